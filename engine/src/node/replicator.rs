//! In a cluster, a partition's sends are ordered by the partition's replica group, not by
//! the node that took them: the group commits each send, and every member's node stamps the
//! committed batch into its replica of the partition at the same offset.
//!
//! ```text
//!  Client::send ─► Replicator::replicate (the partition's group: proposed on its leader,
//!                        │                 or forwarded to it)
//!                        │ committed, on every member
//!                        ▼
//!                  Node::apply_replicated ─► the partition's shard (Partition::append_at)
//! ```
//!
//! A replica's partition shows an applied send at once (`PartitionSettings::replica`): the
//! group's log holds it durable, and [`Node::checkpoint_replica`] syncs the segments before
//! the group drops its log behind them.

use super::shard::ShardRequest;
use super::{Node, PartitionInfo, Sent};
use crate::env::chan::oneshot;
use crate::error::{NodeError, NodeResult};
use crate::partition::{ConsumerId, ConsumerKind, PartitionIdentity};
use crate::partition::{PollFrom, Polled};
use crate::state::key_of;
use bytes::BytesMut;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Where a replicated send landed, once its group committed it.
pub type Replicated = Pin<Box<dyn Future<Output = NodeResult<Sent>> + Send>>;

/// The longest a committed offset write waits for this member's metadata to hold its
/// group's making ([`Node::apply_replicated_offset`]).
pub const VIEW_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether a replicated offset write found an offset to replace or delete, once its group
/// committed it.
pub type OffsetOrdered = Pin<Box<dyn Future<Output = NodeResult<bool>> + Send>>;

/// A consumer offset write a partition's group orders among its sends: `offset` stored, or
/// (`None`) the stored one deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetWrite {
    pub consumer: ConsumerId,
    /// For a consumer group's offset, the op that made the group (`Group::created_op`:
    /// group ids are reused, so a write binds to this incarnation); 0 for a consumer.
    pub made_at: u64,
    pub offset: Option<u64>,
}

/// What a replica did with a committed offset write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetApplied {
    Stored,
    /// Deleted; whether this replica held one.
    Deleted(bool),
    /// The write's consumer group is gone (deleted, or made again since the write was
    /// asked): its offsets went with it, so nothing is stored.
    GroupGone,
}

/// A read of a partition this member keeps no copy of, asked of a member that keeps one
/// ([`Replicator::read_elsewhere`], answered there by [`Node::read_here`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadElsewhere {
    Poll {
        from: PollFrom,
        count: u32,
        max_bytes: u64,
    },
    /// A consumer's stored offset.
    Offset(ConsumerId),
    /// The partition's numbers (offsets, segments, bytes).
    Numbers,
}

/// What a [`ReadElsewhere`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadAnswer {
    Polled(Polled),
    Offset(Option<u64>),
    Numbers(Option<PartitionInfo>),
}

/// A read's answer, once a member that keeps a copy gave it.
pub type ReadFuture = Pin<Box<dyn Future<Output = NodeResult<ReadAnswer>> + Send>>;

/// Who orders a clustered node's sends and offset writes.
pub trait Replicator: Send + Sync {
    /// Has `partition`'s group commit `batch` (as its client sent it), answering where it
    /// landed once committed.
    fn replicate(&self, partition: PartitionIdentity, batch: BytesMut) -> Replicated;
    /// Has `partition`'s group commit `write` after the sends it committed before: every
    /// replica applies it ([`Node::apply_replicated_offset`]), so a client that moves to
    /// another member (its own failed) reads the offset it stored.
    fn order_offset(&self, partition: PartitionIdentity, write: OffsetWrite) -> OffsetOrdered;
    /// Whether this member keeps a copy of `partition` (a cluster places a topic's
    /// partitions on as many members as its replication factor asks); the reads of one it
    /// does not keep go to [`Replicator::read_elsewhere`].
    fn keeps(&self, partition: &PartitionIdentity) -> bool;
    /// Reads `partition` at a member that keeps a copy.
    fn read_elsewhere(&self, partition: PartitionIdentity, read: ReadElsewhere) -> ReadFuture;
}

impl Node {
    /// `read` of this member's copy of `partition`, for a member that keeps none (its
    /// [`Replicator::read_elsewhere`]); refused for another incarnation than its own.
    pub async fn read_here(
        &self,
        partition: PartitionIdentity,
        read: ReadElsewhere,
    ) -> NodeResult<ReadAnswer> {
        self.check_running()?;
        let view = self.view();
        let key = key_of(&partition);
        if view.partition(key).map(|p| p.nonce) != Some(partition.nonce) {
            return Err(NodeError::PartitionNotFound {
                stream: key.0,
                topic: key.1,
                partition: key.2,
            });
        }
        let shard = self.shard(key);
        match read {
            ReadElsewhere::Poll {
                from,
                count,
                max_bytes,
            } => {
                let (polled, _) = self.poll_owner(key, (from, count, max_bytes), None).await?;
                Ok(ReadAnswer::Polled(polled))
            }
            ReadElsewhere::Offset(consumer) => {
                let (reply, pending) = oneshot();
                let request = ShardRequest::GetOffset {
                    key,
                    consumer,
                    reply,
                };
                self.enqueue(shard, request).await?;
                Ok(ReadAnswer::Offset(self.answer(pending).await??))
            }
            ReadElsewhere::Numbers => {
                let (reply, pending) = oneshot();
                self.enqueue(shard, ShardRequest::Inspect { key, reply })
                    .await?;
                Ok(ReadAnswer::Numbers(self.answer(pending).await?))
            }
        }
    }

    /// Installs who orders this clustered node's sends (once).
    pub fn set_replicator(&self, replicator: Arc<dyn Replicator>) {
        assert!(self.clustered(), "only a clustered node replicates sends");
        assert!(
            self.inner.replicator.set(replicator).is_ok(),
            "a node has one replicator"
        );
    }

    /// The replicator, once installed. A node whose partitions are replicas
    /// (`PartitionSettings::replica`: they show appends before any sync) refuses sends
    /// until then: only a group may order them. A node whose partitions are its own (a
    /// single node, or the simulator's metadata-only cluster members) appends them itself.
    pub(super) fn replicator(&self) -> NodeResult<Option<Arc<dyn Replicator>>> {
        match self.inner.replicator.get() {
            Some(replicator) => Ok(Some(replicator.clone())),
            None if self.inner.settings.partition.replica => Err(NodeError::Undecided(
                "this member's partition replicas have not started".into(),
            )),
            None => Ok(None),
        }
    }

    /// The replicator and partition `key`'s identity when this member keeps no copy of the
    /// partition: its reads go to a member that does ([`Replicator::read_elsewhere`]).
    pub(super) fn reads_elsewhere(
        &self,
        view: &super::MetaView,
        key: crate::state::PartitionKey,
    ) -> Option<(Arc<dyn Replicator>, PartitionIdentity)> {
        let replicator = self.inner.replicator.get()?;
        let identity = view.partition(key)?;
        (!replicator.keeps(&identity)).then(|| (replicator.clone(), identity))
    }

    /// The limits a batch must meet to be admitted into this node's partitions (a
    /// replicator verifies a send against them before its group commits it).
    pub fn replica_limits(&self) -> crate::format::Limits {
        self.inner.settings.partition.limits
    }

    /// Stamps a send `partition`'s group committed into this member's replica, with the
    /// leader's clock reading `timestamp`.
    pub async fn apply_replicated(
        &self,
        partition: PartitionIdentity,
        batch: BytesMut,
        timestamp: u64,
    ) -> NodeResult<Sent> {
        self.check_running()?;
        let key = key_of(&partition);
        let (reply, pending) = oneshot();
        let request = ShardRequest::Apply {
            key,
            nonce: partition.nonce,
            batch,
            timestamp,
            reply,
        };
        self.enqueue(self.shard(key), request).await?;
        self.answer(pending).await?
    }

    /// Applies an offset write `partition`'s group committed to this member's replica. A
    /// group's store waits until this node's metadata holds the group's making (the member
    /// that asked held it), then applies only to that incarnation of the group: one deleted
    /// or made again meanwhile took its offsets along ([`Shard::retired`] closes the race
    /// with a deletion after this look). A delete applies whatever group holds the id: the
    /// group's machine answered it for the incarnation it names (and drops one a later
    /// incarnation superseded before it reaches a replica).
    pub async fn apply_replicated_offset(
        &self,
        partition: PartitionIdentity,
        write: OffsetWrite,
    ) -> NodeResult<OffsetApplied> {
        let view = self.view_through(write.made_at).await?;
        let key = key_of(&partition);
        if write.consumer.kind == ConsumerKind::Group && write.offset.is_some() {
            let group = view
                .state
                .find_topic(key.0, key.1)
                .and_then(|t| t.groups.get(&write.consumer.id));
            if group.is_none_or(|g| g.created_op != write.made_at) {
                return Ok(OffsetApplied::GroupGone);
            }
        }
        let (reply, pending) = oneshot();
        let request = ShardRequest::ApplyOffset {
            key,
            nonce: partition.nonce,
            write,
            resolved_at: view.op,
            reply,
        };
        self.enqueue(self.shard(key), request).await?;
        self.answer(pending).await?
    }

    /// This node's view once it holds op `op`: its metadata applies the ops its metadata
    /// group committed in order, and none waits for a partition group, so only a member cut
    /// off from the metadata group waits long. Past [`VIEW_WAIT_LIMIT`] the write fails: the
    /// partition group's replica here stops (and starts again), so a replica that leads
    /// gives its group up to one whose metadata is current instead of stalling it.
    async fn view_through(&self, op: u64) -> NodeResult<Arc<super::MetaView>> {
        const LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(5);
        let clock = &self.env().clock;
        let deadline = clock.monotonic_nanos() + VIEW_WAIT_LIMIT.as_nanos() as u64;
        loop {
            self.check_running()?;
            let view = self.view();
            if view.op >= op {
                return Ok(view);
            }
            if clock.monotonic_nanos() >= deadline {
                return Err(NodeError::Undecided(format!(
                    "this member's metadata holds op {} after {VIEW_WAIT_LIMIT:?}, an offset write's group was made at op {op}",
                    view.op
                )));
            }
            clock.sleep(LOOK_EVERY).await;
        }
    }

    /// The consumers this member's replica of `partition` holds an offset file of (a
    /// checkpoint installed over it deletes those the checkpoint does not name).
    pub async fn replica_consumers(
        &self,
        partition: PartitionIdentity,
    ) -> NodeResult<Vec<ConsumerId>> {
        self.check_running()?;
        let key = key_of(&partition);
        let (reply, pending) = oneshot();
        let request = ShardRequest::Consumers {
            key,
            nonce: partition.nonce,
            reply,
        };
        self.enqueue(self.shard(key), request).await?;
        self.answer(pending).await?
    }

    /// Syncs every batch of this member's replica of `partition` (its group's checkpoint);
    /// the replica's next offset.
    pub async fn checkpoint_replica(&self, partition: PartitionIdentity) -> NodeResult<u64> {
        self.check_running()?;
        let key = key_of(&partition);
        let (reply, pending) = oneshot();
        let request = ShardRequest::Checkpoint {
            key,
            nonce: partition.nonce,
            reply,
        };
        self.enqueue(self.shard(key), request).await?;
        self.answer(pending).await?
    }

    /// Replaces this member's replica of `partition` (fenced, or behind what its peers still
    /// hold) with an empty one whose log starts at `start`, its directory removed: its
    /// group refills it from its peers (a cluster member's replicas only).
    pub async fn rebuild_replica(
        &self,
        partition: PartitionIdentity,
        start: u64,
    ) -> NodeResult<()> {
        self.check_running()?;
        let key = key_of(&partition);
        let (reply, pending) = oneshot();
        let request = ShardRequest::Rebuild {
            key,
            nonce: partition.nonce,
            start,
            reply,
        };
        self.enqueue(self.shard(key), request).await?;
        self.answer(pending).await?
    }

    /// The stored batches of this member's replica of `partition` from offset `from`, at
    /// most `max_bytes` of them (a first batch always whole): what a peer's replica behind
    /// its group's log refills itself with. The replica's segments hold committed batches
    /// only, the same bytes on every replica.
    pub async fn read_replica(
        &self,
        partition: PartitionIdentity,
        from: u64,
        max_bytes: u64,
    ) -> NodeResult<Vec<bytes::Bytes>> {
        self.check_running()?;
        let key = key_of(&partition);
        let from = crate::partition::PollFrom::Offset(from);
        let (polled, _) = self
            .poll_owner(key, (from, u32::MAX, max_bytes), None)
            .await?;
        if polled.incarnation != partition.nonce {
            return Err(NodeError::InvalidRequest(format!(
                "partition {partition} was made again (its replica is incarnation {})",
                polled.incarnation
            )));
        }
        Ok(polled.batches)
    }
}

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
use super::{Node, Sent};
use crate::env::chan::oneshot;
use crate::error::{NodeError, NodeResult};
use crate::partition::PartitionIdentity;
use crate::state::key_of;
use bytes::BytesMut;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Where a replicated send landed, once its group committed it.
pub type Replicated = Pin<Box<dyn Future<Output = NodeResult<Sent>> + Send>>;

/// Who orders a clustered node's sends.
pub trait Replicator: Send + Sync {
    /// Has `partition`'s group commit `batch` (as its client sent it), answering where it
    /// landed once committed.
    fn replicate(&self, partition: PartitionIdentity, batch: BytesMut) -> Replicated;
}

impl Node {
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
        let (reply, pending) = oneshot();
        let request = ShardRequest::Poll {
            key,
            from: crate::partition::PollFrom::Offset(from),
            count: u32::MAX,
            max_bytes,
            commit: None,
            resolved_at: 0,
            ticket: self.ticket(),
            reply,
        };
        self.enqueue(self.shard(key), request).await?;
        let polled = self.answer(pending).await??;
        if polled.incarnation != partition.nonce {
            return Err(NodeError::InvalidRequest(format!(
                "partition {partition} was made again (its replica is incarnation {})",
                polled.incarnation
            )));
        }
        Ok(polled.batches)
    }
}

//! Where a group's committed sends go: this member's replica of the partition.
//!
//! In a server the replica is the node's partition, reached through its shard
//! ([`OnNode`]: `Node::apply_replicated`, `Node::checkpoint_replica`); in tests, a partition
//! held here ([`Held`]).

use super::SendOutcome;
use bytes::{Bytes, BytesMut};
use cairn_engine::config::{PartitionSettings, TopicConfig};
use cairn_engine::env::{BoxFuture, Env};
use cairn_engine::node::{Node, OffsetWrite};
use cairn_engine::partition::{AppendAck, ConsumerId, Partition, PartitionIdentity};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// This member's replica of a group's partition.
pub trait PartitionSink: Send + Sync + 'static {
    /// The offset after the last batch it holds.
    fn next_offset(&self) -> BoxFuture<'_, io::Result<u64>>;
    /// Stamps `batch` at its next offset with the leader's clock reading `timestamp`.
    fn append<'a>(
        &'a self,
        batch: &'a [u8],
        timestamp: u64,
    ) -> BoxFuture<'a, io::Result<SendOutcome>>;
    /// Applies a consumer offset write the group committed (a group's, only to the
    /// incarnation of the group it names: `Node::apply_replicated_offset`).
    fn write_offset(&self, write: OffsetWrite) -> BoxFuture<'_, io::Result<()>>;
    /// The consumers it holds an offset file of (damaged ones too).
    fn consumers(&self) -> BoxFuture<'_, io::Result<Vec<ConsumerId>>>;
    /// Syncs every batch and offset it holds; its next offset.
    fn checkpoint(&self) -> BoxFuture<'_, io::Result<u64>>;
    /// The batches it holds from offset `from`, as stored, at most `max_bytes` of them (a
    /// first batch always whole): what a peer behind the group's log refills itself with.
    fn read(&self, from: u64, max_bytes: u64) -> BoxFuture<'_, io::Result<Vec<Bytes>>>;
    /// Why it is fenced (damaged synced bytes, found at recovery or since), if it is, and
    /// whether the reason says its own files are damaged or missing (it may be rebuilt
    /// from peers: `FenceReason::own_files_damaged`).
    fn fenced(&self) -> BoxFuture<'_, io::Result<Option<(String, bool)>>>;
    /// Where its log starts and its next offset.
    fn bounds(&self) -> BoxFuture<'_, io::Result<(u64, u64)>>;
    /// Replaces it with an empty replica whose log starts at `start`, its files removed:
    /// its peers refill it (`refill::repair`).
    fn rebuild(&self, start: u64) -> BoxFuture<'_, io::Result<()>>;
}

fn outcome(ack: AppendAck) -> SendOutcome {
    SendOutcome {
        base_offset: ack.base_offset,
        message_count: ack.message_count,
        timestamp: ack.timestamp,
    }
}

/// A replica in the node's shard.
pub struct OnNode {
    pub node: Node,
    pub partition: PartitionIdentity,
}

impl OnNode {
    async fn info(&self) -> io::Result<Option<cairn_engine::node::PartitionInfo>> {
        let key = cairn_engine::state::key_of(&self.partition);
        let info = self.node.client(0).local_partition_info(key).await;
        let info = info.map_err(io::Error::other)?;
        Ok(info.filter(|i| i.identity == self.partition))
    }
}

impl PartitionSink for OnNode {
    fn next_offset(&self) -> BoxFuture<'_, io::Result<u64>> {
        Box::pin(async move {
            match self.info().await? {
                Some(info) if info.fence.is_none() => Ok(info
                    .visible_next_offset
                    .expect("an open partition has a next offset")),
                Some(info) => Err(io::Error::other(format!(
                    "partition {} is fenced: {}",
                    self.partition,
                    info.fence.expect("fenced")
                ))),
                None => Err(io::Error::other(format!(
                    "the node holds no partition {}",
                    self.partition
                ))),
            }
        })
    }

    fn append<'a>(
        &'a self,
        batch: &'a [u8],
        timestamp: u64,
    ) -> BoxFuture<'a, io::Result<SendOutcome>> {
        Box::pin(async move {
            let batch = BytesMut::from(batch);
            let applied = self.node.apply_replicated(self.partition, batch, timestamp);
            applied
                .await
                .map(|sent| outcome(sent.ack))
                .map_err(io::Error::other)
        })
    }

    fn write_offset(&self, write: OffsetWrite) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            let applied = self.node.apply_replicated_offset(self.partition, write);
            applied.await.map(|_| ()).map_err(io::Error::other)
        })
    }

    fn consumers(&self) -> BoxFuture<'_, io::Result<Vec<ConsumerId>>> {
        Box::pin(async move {
            let held = self.node.replica_consumers(self.partition).await;
            held.map_err(io::Error::other)
        })
    }

    fn checkpoint(&self) -> BoxFuture<'_, io::Result<u64>> {
        Box::pin(async move {
            let synced = self.node.checkpoint_replica(self.partition).await;
            synced.map_err(io::Error::other)
        })
    }

    fn read(&self, from: u64, max_bytes: u64) -> BoxFuture<'_, io::Result<Vec<Bytes>>> {
        Box::pin(async move {
            let read = self.node.read_replica(self.partition, from, max_bytes);
            read.await.map_err(io::Error::other)
        })
    }

    fn fenced(&self) -> BoxFuture<'_, io::Result<Option<(String, bool)>>> {
        Box::pin(async move {
            let info = self.info().await?;
            let fence = info.and_then(|i| i.fence);
            Ok(fence.map(|reason| (reason.to_string(), reason.own_files_damaged())))
        })
    }

    fn bounds(&self) -> BoxFuture<'_, io::Result<(u64, u64)>> {
        Box::pin(async move {
            let next = self.next_offset().await?;
            let info = self.info().await?;
            Ok((info.map_or(next, |i| i.log_start), next))
        })
    }

    fn rebuild(&self, start: u64) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            let rebuilt = self.node.rebuild_replica(self.partition, start);
            rebuilt.await.map_err(io::Error::other)
        })
    }
}

/// A partition held here (tests, tools), and where it lives (to rebuild it).
#[derive(Clone)]
pub struct Held {
    partition: Arc<Mutex<Partition>>,
    place: Option<Arc<HeldPlace>>,
}

/// Where a held partition lives, and what it is.
pub struct HeldPlace {
    pub env: Env,
    pub dir: PathBuf,
    pub identity: PartitionIdentity,
    pub config: TopicConfig,
    pub settings: PartitionSettings,
}

impl Held {
    /// A partition that cannot be rebuilt.
    pub fn new(partition: Partition) -> Held {
        Held {
            partition: Arc::new(Mutex::new(partition)),
            place: None,
        }
    }

    /// A partition that lives at `place`.
    pub fn at(place: HeldPlace, partition: Partition) -> Held {
        Held {
            partition: Arc::new(Mutex::new(partition)),
            place: Some(Arc::new(place)),
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Partition> {
        self.partition.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn rebuilt(&self, start: u64) -> io::Result<()> {
        let place = self.place.as_ref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "a held partition without a place",
            )
        })?;
        let mut partition = self.lock();
        place.env.disk.remove_dir_all(&place.dir)?;
        let at = (&place.env, place.dir.as_path(), place.identity);
        let hooks = Default::default();
        *partition = Partition::create_at(at, place.config, (place.settings, hooks), start)
            .map_err(io::Error::other)?;
        Ok(())
    }
}

impl PartitionSink for Held {
    fn next_offset(&self) -> BoxFuture<'_, io::Result<u64>> {
        let next = self.lock().next_offset().map_err(io::Error::other);
        Box::pin(async move { next })
    }

    fn append<'a>(
        &'a self,
        batch: &'a [u8],
        timestamp: u64,
    ) -> BoxFuture<'a, io::Result<SendOutcome>> {
        let appended = self.lock().append_at(BytesMut::from(batch), timestamp);
        Box::pin(async move { appended.map(outcome).map_err(io::Error::other) })
    }

    fn write_offset(&self, write: OffsetWrite) -> BoxFuture<'_, io::Result<()>> {
        let mut partition = self.lock();
        let written = match write.offset {
            Some(offset) => partition.store_replicated_offset(write.consumer, offset),
            None => partition.delete_offset(write.consumer).map(|_| ()),
        };
        Box::pin(async move { written.map_err(io::Error::other) })
    }

    fn consumers(&self) -> BoxFuture<'_, io::Result<Vec<ConsumerId>>> {
        let held = self.lock().consumers().map_err(io::Error::other);
        Box::pin(async move { held })
    }

    fn checkpoint(&self) -> BoxFuture<'_, io::Result<u64>> {
        let mut partition = self.lock();
        let synced = partition.persist().and_then(|point| {
            partition.sync_offsets()?;
            Ok(point)
        });
        let synced = synced.map_err(io::Error::other);
        drop(partition);
        Box::pin(async move { synced.map(|point| point.next_offset) })
    }

    fn read(&self, from: u64, max_bytes: u64) -> BoxFuture<'_, io::Result<Vec<Bytes>>> {
        let from = cairn_engine::partition::PollFrom::Offset(from);
        let polled = self.lock().poll_within(from, u32::MAX, max_bytes);
        Box::pin(async move { polled.map(|p| p.batches).map_err(io::Error::other) })
    }

    fn fenced(&self) -> BoxFuture<'_, io::Result<Option<(String, bool)>>> {
        let fence = self
            .lock()
            .fence_reason()
            .map(|r| (r.to_string(), r.own_files_damaged()));
        Box::pin(async move { Ok(fence) })
    }

    fn bounds(&self) -> BoxFuture<'_, io::Result<(u64, u64)>> {
        let partition = self.lock();
        let bounds = partition
            .log_start()
            .and_then(|s| Ok((s, partition.next_offset()?)));
        let bounds = bounds.map_err(io::Error::other);
        Box::pin(async move { bounds })
    }

    fn rebuild(&self, start: u64) -> BoxFuture<'_, io::Result<()>> {
        let rebuilt = self.rebuilt(start);
        Box::pin(async move { rebuilt })
    }
}

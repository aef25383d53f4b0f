//! Where a group's committed sends go: this member's replica of the partition.
//!
//! In a server the replica is the node's partition, reached through its shard
//! ([`OnNode`]: `Node::apply_replicated`, `Node::checkpoint_replica`); in tests, a partition
//! held here ([`Held`]).

use super::SendOutcome;
use bytes::BytesMut;
use cairn_engine::env::BoxFuture;
use cairn_engine::node::Node;
use cairn_engine::partition::{AppendAck, Partition, PartitionIdentity};
use std::io;
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
    /// Syncs every batch it holds; its next offset.
    fn checkpoint(&self) -> BoxFuture<'_, io::Result<u64>>;
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

impl PartitionSink for OnNode {
    fn next_offset(&self) -> BoxFuture<'_, io::Result<u64>> {
        Box::pin(async move {
            let key = cairn_engine::state::key_of(&self.partition);
            let info = self.node.client(0).partition_info(key).await;
            let info = info.map_err(io::Error::other)?;
            let info = info.filter(|i| i.identity == self.partition);
            match info {
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

    fn checkpoint(&self) -> BoxFuture<'_, io::Result<u64>> {
        Box::pin(async move {
            let synced = self.node.checkpoint_replica(self.partition).await;
            synced.map_err(io::Error::other)
        })
    }
}

/// A partition held here (tests, tools).
#[derive(Clone)]
pub struct Held(pub Arc<Mutex<Partition>>);

impl Held {
    pub fn new(partition: Partition) -> Held {
        Held(Arc::new(Mutex::new(partition)))
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Partition> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
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

    fn checkpoint(&self) -> BoxFuture<'_, io::Result<u64>> {
        let synced = self.lock().persist().map_err(io::Error::other);
        Box::pin(async move { synced.map(|point| point.next_offset) })
    }
}

//! What a shard is asked: the requests its inbox carries (sends, polls, offsets, reads,
//! the metadata owner's directory work, shutdown) and the directory work itself.

use super::super::recorder::ShardFigures;
use super::super::{Deletion, PartitionInfo, Sent};
use super::read::{Commit, OwnerRead, PlanOut};
use crate::config::TopicConfig;
use crate::env::chan::Reply;
use crate::error::{NodeResult, WorkError};
use crate::partition::{ConsumerId, PartitionIdentity, PollFrom, ReadFence};
use crate::state::PartitionKey;
use bytes::BytesMut;
use std::sync::Arc;

pub(crate) enum ShardRequest {
    Send {
        key: PartitionKey,
        batch: BytesMut,
        ticket: u64,
        reply: Reply<NodeResult<Sent>>,
    },
    /// A send the partition's replica group committed: stamped with the leader's clock
    /// reading `timestamp`, into the partition of nonce `nonce` (any other is refused).
    Apply {
        key: PartitionKey,
        nonce: u64,
        batch: BytesMut,
        timestamp: u64,
        reply: Reply<NodeResult<Sent>>,
    },
    /// An offset write the partition's replica group committed, for the partition of nonce
    /// `nonce`; `resolved_at` the op of the view that found the write's group alive.
    ApplyOffset {
        key: PartitionKey,
        nonce: u64,
        write: crate::node::replicator::OffsetWrite,
        resolved_at: u64,
        reply: Reply<NodeResult<crate::node::replicator::OffsetApplied>>,
    },
    /// The consumers the partition of nonce `nonce` holds an offset file of.
    Consumers {
        key: PartitionKey,
        nonce: u64,
        reply: Reply<NodeResult<Vec<ConsumerId>>>,
    },
    /// The group's checkpoint: every batch and offset of the partition of nonce `nonce`
    /// synced; its next offset.
    Checkpoint {
        key: PartitionKey,
        nonce: u64,
        reply: Reply<NodeResult<u64>>,
    },
    /// A cluster member's replica of the partition of nonce `nonce` (fenced, or behind what
    /// its peers still hold) replaced by an empty one whose log starts at `start`, for its
    /// group to refill from its peers: its directory is removed first.
    Rebuild {
        key: PartitionKey,
        nonce: u64,
        start: u64,
        reply: Reply<NodeResult<()>>,
    },
    /// A poll's read planned for the caller to run ([`super::read`]): from where, how many
    /// messages, at most how many batch bytes (a first batch always whole); `commit`, the
    /// consumer whose offset its auto-commit will store.
    Poll {
        key: PartitionKey,
        read: (PollFrom, u32, u64),
        commit: Option<ConsumerId>,
        ticket: u64,
        reply: Reply<NodeResult<OwnerRead>>,
    },
    /// A poll's auto-commit of `offset` (the last it read) in the partition its plan `out`
    /// was made of, if the consumer's offset is still `stored`, for the consumer a view of
    /// op `commit.1` named (see `Shard::retired`).
    Commit {
        key: PartitionKey,
        out: Arc<PlanOut>,
        commit: Commit,
        stored: Option<Option<u64>>,
        offset: u64,
        reply: Reply<NodeResult<()>>,
    },
    /// A planned read found damage in bytes the partition its plan `out` was made of
    /// promised durable: fence it.
    ReadDamaged {
        key: PartitionKey,
        out: Arc<PlanOut>,
        fence: ReadFence,
        reply: Reply<()>,
    },
    StoreOffset {
        key: PartitionKey,
        consumer: ConsumerId,
        /// The op of the metadata view that named the consumer (see [`Shard::retired`]).
        resolved_at: u64,
        offset: u64,
        reply: Reply<NodeResult<()>>,
    },
    GetOffset {
        key: PartitionKey,
        consumer: ConsumerId,
        reply: Reply<NodeResult<Option<u64>>>,
    },
    DeleteOffset {
        key: PartitionKey,
        consumer: ConsumerId,
        reply: Reply<NodeResult<bool>>,
    },
    DeleteSegments {
        key: PartitionKey,
        count: u32,
        reply: Reply<NodeResult<Vec<Deletion>>>,
    },
    Inspect {
        key: PartitionKey,
        reply: Reply<Option<PartitionInfo>>,
    },
    Work {
        work: ShardWork,
        reply: Reply<Result<(), WorkError>>,
    },
    /// A cleaner pass now, at `now` (µs) or the retention clock's time.
    Clean {
        now: Option<u64>,
        reply: Reply<Vec<Deletion>>,
    },
    /// The metadata owner recorded the last batch's ops as applied: the partitions that
    /// batch's work created serve from now on. (Also sent when the node stops, so requests
    /// held for such a partition are answered.)
    Applied,
    /// The identities of every partition the shard holds (open or fenced), for the metadata
    /// owner's check that they are exactly the state's.
    Identities {
        reply: Reply<Vec<PartitionIdentity>>,
    },
    /// What the shard holds now, for [`super::Node::metrics`] (settles nothing first).
    Figures { reply: Reply<ShardFigures> },
    /// Graceful shutdown: every partition flushes and syncs what it holds; the loop ends.
    Close { reply: Reply<NodeResult<()>> },
}

impl ShardRequest {
    /// The partition the request reads or changes, if it names one.
    pub(super) fn key(&self) -> Option<PartitionKey> {
        match self {
            ShardRequest::Send { key, .. }
            | ShardRequest::Apply { key, .. }
            | ShardRequest::Checkpoint { key, .. }
            | ShardRequest::ApplyOffset { key, .. }
            | ShardRequest::Consumers { key, .. }
            | ShardRequest::Rebuild { key, .. }
            | ShardRequest::Poll { key, .. }
            | ShardRequest::Commit { key, .. }
            | ShardRequest::ReadDamaged { key, .. }
            | ShardRequest::StoreOffset { key, .. }
            | ShardRequest::GetOffset { key, .. }
            | ShardRequest::DeleteOffset { key, .. }
            | ShardRequest::DeleteSegments { key, .. }
            | ShardRequest::Inspect { key, .. } => Some(*key),
            ShardRequest::Work { .. }
            | ShardRequest::Clean { .. }
            | ShardRequest::Applied
            | ShardRequest::Identities { .. }
            | ShardRequest::Figures { .. }
            | ShardRequest::Close { .. } => None,
        }
    }
}

/// Directory work the metadata owner asks of the shard owning the partitions.
#[derive(Debug, Clone)]
pub(crate) enum ShardWork {
    /// Create the partition (its directory must not exist: checked before journaling).
    Create {
        identity: PartitionIdentity,
        config: TopicConfig,
    },
    /// Replace the partition holding nonce `replaces` with an empty one.
    Purge {
        identity: PartitionIdentity,
        replaces: u64,
        config: TopicConfig,
    },
    /// Remove the partition's directory (it held `identity`).
    Remove {
        identity: PartitionIdentity,
    },
    /// Close every partition of the topic; the metadata owner removes the directory.
    DropTopic {
        stream: u32,
        topic: u32,
    },
    DropStream {
        stream: u32,
    },
    /// Remove a deleted group's stored offset; `op` deleted it.
    RemoveGroupOffsets {
        key: PartitionKey,
        group: u32,
        op: u64,
    },
}

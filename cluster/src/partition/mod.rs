//! A partition's replica group: the partition's messages replicated by openraft.
//!
//! The group's Raft log is the partition's **prepare WAL** (the specification's
//! `prepares-…/` for multi-replica partitions, `000`): a [`crate::log::LogStore`] whose
//! entries are the client's batches, each with its leader's clock reading. A committed
//! entry is applied by stamping the batch into the partition's segments
//! ([`machine::PartMachine`]); every replica stamps it with the same offset and timestamp,
//! so the replicas' segments are the same bytes. The segments hold committed batches only,
//! so a poll of any replica's partition never reads an uncommitted one.
//!
//! Durability: an append to the WAL is synced before openraft counts it flushed, so an
//! entry is committed once a quorum holds it on stable storage, and `persisted` holds at
//! the quorum with no segment sync on the way ("persisted success can precede an ordinary
//! segment flush", `000`). A checkpoint (openraft's snapshot of this machine) syncs the
//! segments, then records the applied entry and the partition's next offset, and only then
//! may openraft purge the WAL behind it.
//!
//! Where it runs and what is not built yet: `docs/cluster.md`, "Partitions".

pub mod balance;
pub mod batch;
pub mod groups;
mod installed;
pub mod machine;
pub mod members;
pub mod net;
pub mod placement;
pub mod quiet;
pub mod refill;
pub mod sink;

use crate::log::LogTypes;
use crate::rt::EnvRuntime;
use crate::types::{bytes_serde, NodeId, Peer};
use cairn_engine::node::OffsetWrite;
use cairn_engine::partition::{ConsumerId, ConsumerKind};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A send, as the group replicates it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendCommand {
    /// The batch as its client sent it: admission stamps it when a replica applies it.
    #[serde(with = "bytes_serde")]
    pub batch: Vec<u8>,
    /// The leader's wall clock when it proposed the send, microseconds: every replica
    /// stamps the batch with it (never below the partition's last timestamp).
    pub timestamp: u64,
}

impl fmt::Display for SendCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a batch of {} bytes at {}",
            self.batch.len(),
            self.timestamp
        )
    }
}

/// An entry of a partition group's log: a send, or a consumer offset written between
/// sends (every replica applies it after the sends committed before it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartCommand {
    Send(SendCommand),
    Offset(OffsetCommand),
}

impl fmt::Display for PartCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartCommand::Send(send) => send.fmt(f),
            PartCommand::Offset(o) => o.fmt(f),
        }
    }
}

/// A consumer offset stored (`offset`) or deleted (`None`), as the group replicates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetCommand {
    /// A consumer group's offset (else a single consumer's).
    pub group: bool,
    pub id: u32,
    /// For a group, the op that made it (`OffsetWrite::made_at`); 0 for a consumer.
    pub made_at: u64,
    pub offset: Option<u64>,
}

impl OffsetCommand {
    pub fn of(write: OffsetWrite) -> OffsetCommand {
        OffsetCommand {
            group: write.consumer.kind == ConsumerKind::Group,
            id: write.consumer.id,
            made_at: write.made_at,
            offset: write.offset,
        }
    }

    pub fn write(&self) -> OffsetWrite {
        let consumer = match self.group {
            true => ConsumerId::group(self.id),
            false => ConsumerId::consumer(self.id),
        };
        OffsetWrite {
            consumer,
            made_at: self.made_at,
            offset: self.offset,
        }
    }
}

impl fmt::Display for OffsetCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = if self.group { "group" } else { "consumer" };
        match self.offset {
            Some(offset) => write!(f, "{whose} {}'s offset {offset}", self.id),
            None => write!(f, "{whose} {}'s offset deleted", self.id),
        }
    }
}

/// Where an applied send landed, as every replica computed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SendOutcome {
    pub base_offset: u64,
    pub message_count: u32,
    pub timestamp: u64,
}

/// What applying an entry did, as every replica decided it (the machine's own state, not
/// its replica's files, decides an offset write's outcome).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum PartOutcome {
    /// A blank or membership entry.
    #[default]
    Nothing,
    Sent(SendOutcome),
    /// An offset stored, or deleted (whether one was stored for that incarnation).
    OffsetStored,
    OffsetDeleted {
        found: bool,
    },
    /// Refused: past the last message the sends before it committed (`next`, the offset
    /// after it).
    OffsetBeyondEnd {
        next: u64,
    },
    /// Refused: the partition holds offsets of `limit` consumers already.
    TooManyOffsets {
        limit: usize,
    },
    /// Not applied: a consumer group deleted since the write was asked, whose id a group
    /// made later stored under (its offsets went with it, as on a single node).
    OffsetOfGoneGroup,
}

openraft::declare_raft_types!(
    /// A partition group's type configuration.
    pub PartConfig:
        D = PartCommand,
        R = PartOutcome,
        NodeId = NodeId,
        Node = Peer,
        AsyncRuntime = EnvRuntime,
);

impl LogTypes for PartConfig {
    /// The largest batch and its envelope.
    const MAX_ENTRY_LEN: usize =
        cairn_engine::format::Limits::MAX_BATCH_BYTES as usize + (64 << 10);
}

pub type PartEntry = openraft::alias::EntryOf<PartConfig>;
pub type PartMembership = openraft::alias::StoredMembershipOf<PartConfig>;
pub type PartSnapshotMeta = openraft::alias::SnapshotMetaOf<PartConfig>;
pub type PartSnapshot = openraft::alias::SnapshotOf<PartConfig, Vec<u8>>;
pub type PartRaft = openraft::Raft<PartConfig, machine::PartMachine>;

#[cfg(test)]
mod tests;

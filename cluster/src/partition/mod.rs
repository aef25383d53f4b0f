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
pub mod groups;
mod installed;
pub mod machine;
pub mod members;
pub mod net;
pub mod quiet;
pub mod refill;
pub mod sink;

use crate::log::LogTypes;
use crate::rt::EnvRuntime;
use crate::types::{bytes_serde, NodeId, Peer};
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

/// Where an applied send landed, as every replica computed it (zero for an entry that is
/// not a send).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SendOutcome {
    pub base_offset: u64,
    pub message_count: u32,
    pub timestamp: u64,
}

openraft::declare_raft_types!(
    /// A partition group's type configuration.
    pub PartConfig:
        D = SendCommand,
        R = SendOutcome,
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

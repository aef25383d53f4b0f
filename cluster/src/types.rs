//! The types the metadata consensus group is instantiated with.
//!
//! An entry's command is a journaled metadata operation as the single node journals it
//! (Iggy's request code and wire body, `cairn_engine::state::ops`), with the leader's clock
//! reading and the acting user: every replica applies the same bytes with the same context,
//! so every replica reaches the same `MetaState` and draws the same partition nonces.

use crate::rt::EnvRuntime;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A member of the cluster as the operator names it (`[cluster]`): never 0.
pub type MemberId = u32;

/// A replica as Raft knows it: its member id in the high 32 bits, the **incarnation** of its
/// storage in the low 32. The incarnation is drawn at random (never 0) when the replica's
/// storage is made and kept in its state record beside its vote ([`crate::log`]). A member
/// whose storage was wiped, or whose state record (its vote) was lost, comes back under a
/// new incarnation: a different Raft node, which requests addressed to the old one do not
/// reach ([`crate::net`]), so it neither votes nor counts toward a quorum with what it
/// forgot, until an administrator replaces the old replica with it
/// ([`crate::group::MetaGroup::change`]). A new incarnation equal to the old one (one chance
/// in 2^32 per blank replica) would undo that; the old one is not known to compare against
/// (it was lost with the storage), so the odds are the bound, stated here.
pub type NodeId = u64;

/// The Raft id of `member`'s replica of incarnation `incarnation`.
pub fn replica_id(member: MemberId, incarnation: u32) -> NodeId {
    assert!(member != 0 && incarnation != 0, "ids are never 0");
    u64::from(member) << 32 | u64::from(incarnation)
}

/// The member a Raft id belongs to.
pub fn member_of(id: NodeId) -> MemberId {
    (id >> 32) as MemberId
}

/// A Raft id as operators read it: `member.incarnation` (the incarnation in hex).
pub fn show_id(id: NodeId) -> String {
    format!("{}.{:08x}", member_of(id), id as u32)
}

/// How to reach a node: its replication address (peers) and its client address (what
/// `GetClusterMetadata` tells clients).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub raft: String,
    pub client: String,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raft {} client {}", self.raft, self.client)
    }
}

/// One metadata operation proposed to the group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaCommand {
    /// Iggy's request code of the operation (`MetaOp::operation`).
    pub operation: u32,
    /// The request's wire body (`MetaOp::body`).
    #[serde(with = "bytes_serde")]
    pub body: Vec<u8>,
    /// The proposing leader's wall clock, microseconds: the op's timestamp on every replica.
    pub timestamp: u64,
    /// The acting user (0 for the node itself).
    pub user_id: u32,
    /// The session that asked, and its request number (one member's: informational).
    #[serde(default)]
    pub client: u128,
    #[serde(default)]
    pub request: u64,
    /// The op's key, drawn by the member that asked and carried by each of its attempts
    /// (`cairn_engine::state::proposals`: a retry applies once); 0 for none (an entry
    /// written before keys).
    #[serde(default)]
    pub key: u128,
    /// The log index the member that asked had applied when it first asked.
    #[serde(default)]
    pub asked_at: u64,
}

impl fmt::Display for MetaCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "op {} ({} bytes) by user {}",
            self.operation,
            self.body.len(),
            self.user_id
        )
    }
}

/// What applying a command did, as every replica computed it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum MetaOutcome {
    /// Accepted; the id of what it created, if it created something. `repeated`: a retry
    /// of a proposal applied before (the same key), answered with that one's outcome and
    /// applied no second time.
    Applied {
        created: Option<u32>,
        #[serde(default)]
        repeated: bool,
    },
    /// Refused by the state machine with Iggy's error code (deterministic: every replica
    /// refuses it the same way, and nothing changed).
    Refused { code: u32, reason: String },
    /// An attempt the state machine could not tell from an earlier one of its op, whose key
    /// it forgot (`NodeError::ProposalForgotten`): nothing changed, and an earlier attempt
    /// may or may not have applied.
    Forgotten {
        asked_at: u64,
        forgotten_through: u64,
    },
    /// A command that is not a journaled operation (a code or body that does not decode):
    /// nothing changed.
    #[default]
    Undecodable,
    /// A command this member's node applied before a restart (its journal holds it): not
    /// applied again. Only a restarted member computes it, and no one waits for its answer.
    Replayed,
}

/// Bytes as a MessagePack `bin`, not an array of integers.
pub mod bytes_serde {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_bytes(Visitor)
    }
}

openraft::declare_raft_types!(
    /// The metadata group's type configuration.
    pub MetaConfig:
        D = MetaCommand,
        R = MetaOutcome,
        NodeId = NodeId,
        Node = Peer,
        AsyncRuntime = EnvRuntime,
);

pub type LogId = openraft::alias::LogIdOf<MetaConfig>;
pub type Vote = openraft::alias::VoteOf<MetaConfig>;
pub type Entry = openraft::alias::EntryOf<MetaConfig>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<MetaConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<MetaConfig>;
pub type Snapshot = openraft::alias::SnapshotOf<MetaConfig, Vec<u8>>;
pub type Raft = openraft::Raft<MetaConfig, crate::sm::MetaMachine>;

//! The metadata state machine: streams, topics, partitions, consumer groups, users and their
//! personal access tokens, and how each journaled operation changes them. Pure and deterministic (ordered maps only):
//! the same journal always rebuilds the same state, which the snapshot stores whole. Both
//! the metadata plane (replay at boot) and the node (live operations) use it; it depends on
//! neither.
//!
//! [`MetaState::apply`] is one method per operation, each in the same shape: resolve the
//! entities the request names, validate the request against them, check the limits, and
//! only then mutate. A refusal therefore changes nothing (and is never journaled). An
//! accepted operation returns what it did ([`Applied`]): the id it created, the directory
//! work it implies ([`DirWork`], carried out after the journal entry is durable and redone
//! at boot for entries whose work may not have finished) and its effects on volatile state
//! ([`Effect`]: consumer-group memberships, sessions), which the node applies exactly, in op
//! order.
//!
//! Lookups by name go through indexes the state keeps beside its maps (never serialized;
//! rebuilt when a snapshot is decoded).

pub mod ops;
pub mod options;
pub mod proposals;
pub mod tokens;

pub mod adoption;
mod apply;
mod grants;

pub use crate::error::{Named, NodeError, NodeResult};
pub use apply::MAX_PASSWORD_HASH_LEN;
pub use grants::check_permissions;

use crate::partition::PartitionIdentity;
use iggy_binary_protocol::WireIdentifier;
use options::TopicOptions;
use proposals::Proposals;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tokens::{Token, TokenHash};
use xxhash_rust::xxh3::xxh3_64;

/// Explicit limits on everything the metadata holds.
pub const MAX_STREAMS: usize = 4096;
pub const MAX_TOPICS_PER_STREAM: usize = 4096;
pub const MAX_PARTITIONS_PER_TOPIC: usize = 1000;
pub const MAX_GROUPS_PER_TOPIC: usize = 1024;
pub const MAX_USERS: usize = 1024;
// Ids are u32 on the wire and the lowest free id is taken: every limit leaves ids to spare.
const _: () = {
    let limits = [
        MAX_STREAMS,
        MAX_TOPICS_PER_STREAM,
        MAX_PARTITIONS_PER_TOPIC,
        MAX_GROUPS_PER_TOPIC,
        MAX_USERS,
    ];
    let mut i = 0;
    while i < limits.len() {
        assert!(0 < limits[i] && limits[i] < u32::MAX as usize);
        i += 1;
    }
};
/// The root user's id; it exists from the first boot and can be neither deleted nor
/// deactivated.
pub const ROOT_USER_ID: u32 = 0;

/// A user's status on the wire (`iggy_common` `UserStatus`).
pub const USER_ACTIVE: u8 = 1;
pub const USER_INACTIVE: u8 = 2;

/// A partition, by (stream, topic, partition) ids.
pub type PartitionKey = (u32, u32, u32);
/// A consumer group, by (stream, topic, group) ids.
pub type GroupKey = (u32, u32, u32);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(from = "StoredState")]
pub struct MetaState {
    streams: BTreeMap<u32, Stream>,
    users: BTreeMap<u32, User>,
    /// In a cluster, the last consensus decision applied (`OpContext::decided`): a decided
    /// op at or below it was applied before and is never applied again. Absent on a single
    /// node, whose snapshots stay as they were.
    #[serde(skip_serializing_if = "is_zero", default)]
    decided: u128,
    /// In a cluster, the keyed proposals applied lately ([`proposals`]): a retry of one is
    /// answered with its outcome and applied no second time. Absent on a single node.
    #[serde(skip_serializing_if = "Proposals::is_empty", default)]
    proposals: Proposals,
    #[serde(skip_serializing)]
    names: Names,
}

fn is_zero(value: &u128) -> bool {
    *value == 0
}

/// The serialized fields of [`MetaState`]; decoding rebuilds the indexes from them.
#[derive(Deserialize)]
struct StoredState {
    streams: BTreeMap<u32, Stream>,
    users: BTreeMap<u32, User>,
    #[serde(default)]
    decided: u128,
    #[serde(default)]
    proposals: Proposals,
}

impl From<StoredState> for MetaState {
    fn from(stored: StoredState) -> MetaState {
        let mut state = MetaState {
            streams: stored.streams,
            users: stored.users,
            decided: stored.decided,
            proposals: stored.proposals,
            names: Names::default(),
        };
        state.names = Names::of(&state);
        state.forget_stale_grants();
        state
    }
}

/// Name → id indexes, one per scope where names are unique.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Names {
    streams: BTreeMap<String, u32>,
    topics: BTreeMap<(u32, String), u32>,
    groups: BTreeMap<(u32, u32, String), u32>,
    users: BTreeMap<String, u32>,
    /// Every user's tokens by hash: (user id, token name).
    tokens: BTreeMap<TokenHash, (u32, String)>,
}

impl Names {
    fn of(state: &MetaState) -> Names {
        let mut names = Names::default();
        for stream in state.streams.values() {
            names.streams.insert(stream.name.clone(), stream.id);
            for topic in stream.topics.values() {
                names
                    .topics
                    .insert((stream.id, topic.name.clone()), topic.id);
                for group in topic.groups.values() {
                    names
                        .groups
                        .insert((stream.id, topic.id, group.name.clone()), group.id);
                }
            }
        }
        for user in state.users.values() {
            names.users.insert(user.username.clone(), user.id);
            for (name, token) in &user.tokens {
                names.tokens.insert(token.hash, (user.id, name.clone()));
            }
        }
        names
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    pub topics: BTreeMap<u32, Topic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topic {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    pub options: TopicOptions,
    pub partitions: BTreeMap<u32, PartitionMeta>,
    pub groups: BTreeMap<u32, Group>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMeta {
    pub id: u32,
    pub created_at: u64,
    /// The nonce in its superblock's identity (new at every purge).
    pub nonce: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub id: u32,
    pub name: String,
    /// The op that created it: ids are reused, so a membership or a session binds to this
    /// incarnation, not only to the id.
    pub created_op: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: u32,
    pub username: String,
    /// A PHC string (argon2id).
    pub password_hash: String,
    /// [`USER_ACTIVE`] or [`USER_INACTIVE`].
    pub status: u8,
    /// The permissions' wire encoding, when set.
    pub permissions: Option<Vec<u8>>,
    pub created_at: u64,
    /// The op that created it (see [`Group::created_op`]).
    pub created_op: u64,
    /// Its personal access tokens by name, at most [`tokens::MAX_TOKENS_PER_USER`]
    /// (snapshots of version 2 have none).
    #[serde(default)]
    pub tokens: BTreeMap<String, Token>,
}

impl User {
    pub fn is_active(&self) -> bool {
        self.status == USER_ACTIVE
    }
}

/// What applying an operation asks of the file system, in order. Every removal names the
/// identities it removes: boot redoes work by identity, so it removes only what a journaled
/// operation deleted and never a directory it cannot account for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirWork {
    CreatePartition(PartitionIdentity),
    /// Replace the partition whose nonce is `replaces` with an empty one of `identity`.
    PurgePartition {
        identity: PartitionIdentity,
        replaces: u64,
    },
    RemovePartition(PartitionIdentity),
    /// Remove the topic's directory and its partitions (the identities it held).
    RemoveTopic {
        stream: u32,
        topic: u32,
        partitions: Vec<PartitionIdentity>,
    },
    RemoveStream {
        stream: u32,
        partitions: Vec<PartitionIdentity>,
    },
    /// A deleted group's stored offset in one partition, removed with it (the partition
    /// records the offset set without it first, then unlinks the file).
    RemoveGroupOffsets {
        partition: PartitionKey,
        group: u32,
    },
}

impl DirWork {
    /// Every partition identity the work creates or removes.
    pub fn identities(&self) -> Vec<PartitionIdentity> {
        match self {
            DirWork::CreatePartition(id) | DirWork::RemovePartition(id) => vec![*id],
            DirWork::PurgePartition { identity, replaces } => vec![
                *identity,
                PartitionIdentity {
                    nonce: *replaces,
                    ..*identity
                },
            ],
            DirWork::RemoveTopic { partitions, .. } | DirWork::RemoveStream { partitions, .. } => {
                partitions.clone()
            }
            DirWork::RemoveGroupOffsets { .. } => Vec::new(),
        }
    }
}

/// A partition identity's key.
pub fn key_of(identity: &PartitionIdentity) -> PartitionKey {
    (identity.stream_id, identity.topic_id, identity.partition_id)
}

/// What an accepted operation changes outside the durable state: consumer-group
/// memberships and client sessions. The node applies exactly these, in op order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    StreamDeleted {
        stream: u32,
    },
    TopicDeleted {
        stream: u32,
        topic: u32,
    },
    /// The topic's partition count changed (partitions added or removed).
    TopicResized {
        stream: u32,
        topic: u32,
        partitions: u32,
    },
    GroupCreated {
        group: GroupKey,
        incarnation: u64,
    },
    GroupDeleted {
        group: GroupKey,
        incarnation: u64,
    },
    UserDeleted {
        user: u32,
        incarnation: u64,
    },
    /// Status, password, permissions or tokens changed: sessions of the user must look
    /// again.
    UserChanged {
        user: u32,
    },
}

/// Where an operation sits in the journal: what makes its effects deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpContext {
    pub op: u64,
    pub timestamp: u64,
    pub cluster: u128,
    /// The consensus decision that ordered the op (`metadata::journal::decision`); 0 on a
    /// single node.
    pub decided: u128,
    /// In a cluster, the key the member that asked drew for the op, the same for each of
    /// its attempts ([`proposals`]); 0 on a single node and for an op with no key.
    pub proposal: u128,
    /// With a key: the log index the member that asked had applied when it first asked.
    pub asked_at: u64,
}

impl OpContext {
    /// The creation nonce of partition `(stream, topic, partition)` made by this op: drawn
    /// from the node's cluster id (itself drawn from the environment's entropy at the first
    /// boot) and the op, so a replay makes the same one and no other creation does.
    pub fn nonce(&self, stream: u32, topic: u32, partition: u32) -> u64 {
        let mut key = Vec::with_capacity(40);
        key.extend_from_slice(&self.cluster.to_le_bytes());
        key.extend_from_slice(&self.op.to_le_bytes());
        for id in [stream, topic, partition] {
            key.extend_from_slice(&id.to_le_bytes());
        }
        xxh3_64(&key)
    }
}

/// What an accepted operation did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// The id of the entity it created, if any.
    pub created: Option<u32>,
    /// In a cluster: the op was a retry of a proposal applied before, answered with that
    /// one's outcome (`created`) and changing nothing.
    pub repeated: bool,
    pub work: Vec<DirWork>,
    pub effects: Vec<Effect>,
}

impl Applied {
    fn created(id: u32) -> Applied {
        Applied {
            created: Some(id),
            ..Applied::default()
        }
    }

    fn work(work: Vec<DirWork>) -> Applied {
        Applied {
            work,
            ..Applied::default()
        }
    }

    fn effect(effect: Effect) -> Applied {
        Applied {
            effects: vec![effect],
            ..Applied::default()
        }
    }
}

/// The lowest id not in `taken`.
fn lowest_free<T>(taken: &BTreeMap<u32, T>) -> u32 {
    let mut next = 0;
    for &id in taken.keys() {
        if id != next {
            break;
        }
        next += 1;
    }
    next
}

fn named(id: &WireIdentifier) -> Named {
    match id {
        WireIdentifier::Numeric(n) => Named::Id(*n),
        WireIdentifier::String(s) => Named::Name(s.as_str().to_owned()),
    }
}

impl MetaState {
    pub fn streams(&self) -> &BTreeMap<u32, Stream> {
        &self.streams
    }

    pub fn users(&self) -> &BTreeMap<u32, User> {
        &self.users
    }

    pub fn stream(&self, id: u32) -> Option<&Stream> {
        self.streams.get(&id)
    }

    /// The topic, if both it and its stream exist.
    pub fn find_topic(&self, stream: u32, topic: u32) -> Option<&Topic> {
        self.streams.get(&stream)?.topics.get(&topic)
    }

    /// The topic `(stream, topic)`, which the caller resolved before.
    pub fn topic(&self, stream: u32, topic: u32) -> &Topic {
        self.find_topic(stream, topic)
            .expect("a topic resolved before")
    }

    pub fn user(&self, id: u32) -> Option<&User> {
        self.users.get(&id)
    }

    pub fn user_by_name(&self, username: &str) -> Option<&User> {
        self.users.get(self.names.users.get(username)?)
    }

    pub fn stream_id(&self, id: &WireIdentifier) -> NodeResult<u32> {
        match id {
            WireIdentifier::Numeric(n) => self.streams.contains_key(n).then_some(*n),
            WireIdentifier::String(s) => self.names.streams.get(s.as_str()).copied(),
        }
        .ok_or_else(|| NodeError::StreamNotFound(named(id)))
    }

    pub fn topic_ids(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> NodeResult<(u32, u32)> {
        let s = self.stream_id(stream)?;
        let t = match topic {
            WireIdentifier::Numeric(n) => self.streams[&s].topics.contains_key(n).then_some(*n),
            WireIdentifier::String(name) => self
                .names
                .topics
                .get(&(s, name.as_str().to_owned()))
                .copied(),
        };
        let t = t.ok_or_else(|| NodeError::TopicNotFound {
            stream: s,
            topic: named(topic),
        })?;
        Ok((s, t))
    }

    pub fn group_id(&self, stream: u32, topic: u32, group: &WireIdentifier) -> NodeResult<u32> {
        let groups = &self.topic(stream, topic).groups;
        match group {
            WireIdentifier::Numeric(n) => groups.contains_key(n).then_some(*n),
            WireIdentifier::String(name) => self
                .names
                .groups
                .get(&(stream, topic, name.as_str().to_owned()))
                .copied(),
        }
        .ok_or_else(|| NodeError::GroupNotFound {
            stream,
            topic,
            group: named(group),
        })
    }

    /// The user's personal access tokens by name (`None` for no such user).
    pub fn user_tokens(&self, user: u32) -> Option<&BTreeMap<String, Token>> {
        self.users.get(&user).map(|u| &u.tokens)
    }

    /// The token a raw token's hash names: its user, its name and itself.
    pub fn token_by_hash(&self, hash: &TokenHash) -> Option<(&User, &str, &Token)> {
        let (user_id, name) = self.names.tokens.get(hash)?;
        let user = self.users.get(user_id)?;
        let (name, token) = user.tokens.get_key_value(name)?;
        Some((user, name.as_str(), token))
    }

    pub fn user_id(&self, user: &WireIdentifier) -> NodeResult<u32> {
        match user {
            WireIdentifier::Numeric(n) => self.users.contains_key(n).then_some(*n),
            WireIdentifier::String(name) => self.names.users.get(name.as_str()).copied(),
        }
        .ok_or_else(|| NodeError::UserNotFound(named(user)))
    }

    /// Every partition, with its identity.
    pub fn partitions(&self) -> Vec<PartitionIdentity> {
        let mut all = Vec::new();
        for stream in self.streams.values() {
            for topic in stream.topics.values() {
                for p in topic.partitions.values() {
                    all.push(PartitionIdentity {
                        stream_id: stream.id,
                        topic_id: topic.id,
                        partition_id: p.id,
                        nonce: p.nonce,
                    });
                }
            }
        }
        all
    }

    /// The identity the metadata gives partition `key`, if it has that partition.
    pub fn partition(&self, (s, t, p): PartitionKey) -> Option<PartitionIdentity> {
        let meta = self.find_topic(s, t)?.partitions.get(&p)?;
        Some(PartitionIdentity {
            stream_id: s,
            topic_id: t,
            partition_id: p,
            nonce: meta.nonce,
        })
    }

    /// Whether the name indexes agree with the maps and every name is unique in its scope
    /// (checked when a snapshot is decoded, by tests and by the simulator).
    pub fn indexes_agree(&self) -> bool {
        let topics: usize = self.streams.values().map(|s| s.topics.len()).sum();
        let groups: usize = self
            .streams
            .values()
            .flat_map(|s| s.topics.values())
            .map(|t| t.groups.len())
            .sum();
        self.names == Names::of(self)
            && self.names.streams.len() == self.streams.len()
            && self.names.topics.len() == topics
            && self.names.groups.len() == groups
            && self.names.users.len() == self.users.len()
            && self.names.tokens.len() == self.users.values().map(|u| u.tokens.len()).sum::<usize>()
    }
}

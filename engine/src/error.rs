//! What a node answers when it cannot do what was asked, with the Iggy 0.11 error code a
//! binary-protocol client expects for each ([`NodeError::code`]). Shared by the state
//! machine (its refusals) and the node (everything else); sources stay typed, so the kind of
//! an I/O error (ENOSPC, say) survives every layer.

use crate::metadata::MetadataError;
use crate::partition::PartitionError;
use std::fmt;
use std::io;
use std::sync::Arc;

/// An entity as the request named it: by id or by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    Id(u32),
    Name(String),
}

impl fmt::Display for Named {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Named::Id(id) => write!(f, "id {id}"),
            Named::Name(name) => write!(f, "name {name:?}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("stream {0} not found")]
    StreamNotFound(Named),
    #[error("a stream named {0:?} already exists")]
    StreamNameExists(String),
    #[error("topic {topic} not found in stream {stream}")]
    TopicNotFound { stream: u32, topic: Named },
    #[error("a topic named {name:?} already exists in stream {stream}")]
    TopicNameExists { stream: u32, name: String },
    #[error("partition {partition} not found in topic {topic} of stream {stream}")]
    PartitionNotFound {
        stream: u32,
        topic: u32,
        partition: u32,
    },
    #[error("invalid partitions count {count}: {why}")]
    InvalidPartitionsCount { count: u32, why: String },
    #[error("consumer group {group} not found in topic {topic} of stream {stream}")]
    GroupNotFound {
        stream: u32,
        topic: u32,
        group: Named,
    },
    #[error("a consumer group named {name:?} already exists in topic {topic}")]
    GroupNameExists { topic: u32, name: String },
    #[error("client {client:#x} is not a member of consumer group {group}")]
    NotAMember { group: u32, client: u128 },
    #[error(
        "partition {partition} is not assigned to client {client:#x} in consumer group {group}"
    )]
    PartitionNotOwned {
        group: u32,
        partition: u32,
        client: u128,
    },
    #[error("invalid name {name:?}: {why}")]
    InvalidName { name: String, why: String },
    #[error("unsupported option {key:?}: {why}")]
    UnsupportedOptionKey { key: String, why: String },
    #[error("invalid value for option {key:?}: {why}")]
    InvalidOptionValue { key: String, why: String },
    #[error("too many {what}: the limit is {limit}")]
    TooMany { what: Capacity, limit: usize },
    #[error("user {0} not found")]
    UserNotFound(Named),
    #[error("a user named {0:?} already exists")]
    UserExists(String),
    #[error("invalid username: {0}")]
    InvalidUsername(String),
    #[error("invalid password: {0}")]
    InvalidPassword(String),
    #[error("the root user cannot be {0}")]
    RootUser(RootAction),
    #[error("invalid user status {0}: 1 (active) or 2 (inactive)")]
    InvalidUserStatus(u8),
    #[error("invalid permissions: {0}")]
    InvalidPermissions(String),
    /// A login with an unknown username or a wrong password (the same answer for both).
    #[error("invalid credentials")]
    InvalidCredentials,
    #[error("user {0} is inactive")]
    UserInactive(u32),
    #[error("invalid personal access token name {0:?}: 3 to 30 bytes, no control characters")]
    InvalidTokenName(String),
    #[error("user {user} already has a personal access token named {name:?}")]
    TokenExists { user: u32, name: String },
    #[error("user {user} has no personal access token named {name:?}")]
    TokenNotFound { user: u32, name: String },
    #[error("user {user} holds the most personal access tokens a user may: {limit}")]
    TooManyTokens { user: u32, limit: usize },
    #[error("invalid personal access token expiry {0} µs")]
    InvalidTokenExpiry(u64),
    /// A login with a token no user holds (the same answer whatever the bytes).
    #[error("invalid personal access token")]
    InvalidToken,
    #[error("personal access token {name:?} of user {user} has expired")]
    TokenExpired { user: u32, name: String },
    #[error("consumer group member {client:#x} of group {group} has no current partition: name one, or poll first")]
    NoCurrentPartition { group: u32, client: u128 },
    /// A new partition's directory exists though the metadata has no partition there; it is
    /// never removed by an operation that did not delete it.
    #[error("{0} exists and the metadata does not account for it: move it away first")]
    DirectoryInTheWay(std::path::PathBuf),
    #[error("{what} of {len} bytes exceeds the limit of {limit}")]
    TooBig {
        what: &'static str,
        len: usize,
        limit: usize,
    },
    #[error("no consumer offset stored for {0}")]
    OffsetNotFound(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// The metadata journal ran out of space: the operations were not journaled (the journal
    /// was cut back to where it was) and the node keeps serving; retry when space returns.
    #[error("no space left for the metadata journal: the operation was not applied; retry when space returns")]
    MetadataNoSpace,
    /// A bounded queue is full: back-pressure; retry later.
    #[error("the node is busy: {0} is full; retry later")]
    Busy(&'static str),
    /// The node stopped: its metadata plane failed after an operation became durable (or
    /// with an error other than no space), or it shut down. It refuses everything; a
    /// restart recovers what the disk holds.
    #[error("the node stopped and refuses requests until restarted: {0}")]
    Stopped(Arc<Failure>),
    /// In a cluster: the metadata state machine refused the op on every member (Iggy's code
    /// and the words of the member that answered).
    #[error("{reason}")]
    Refused { code: u32, reason: String },
    /// In a cluster: the op could not be decided now (no leader reachable, leadership moved,
    /// the replica is not running); nothing is known to have changed; retry.
    #[error("the cluster could not decide the operation now: {0}; retry")]
    Undecided(String),
    /// In a cluster: a consensus decision this member applied before (boot hands the log
    /// after the last snapshot again); nothing changed.
    #[error("consensus decision {0:#x} was applied before")]
    AlreadyDecided(u128),
    /// In a cluster: an attempt of an op asked when its member had applied through log
    /// index `asked_at`, after which keys were forgotten (`state::proposals`): whether an
    /// earlier attempt applied is unknown, so this one changed nothing.
    #[error(
        "the operation was first asked at log index {asked_at} and the cluster no longer \
         remembers the operations applied after it (forgotten through {forgotten_through}): \
         an earlier attempt may or may not have applied; this one changed nothing"
    )]
    ProposalForgotten {
        asked_at: u64,
        forgotten_through: u64,
    },
}

/// What the root user may not be made to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootAction {
    Deleted,
    Deactivated,
    GivenPermissions,
}

impl fmt::Display for RootAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RootAction::Deleted => "deleted",
            RootAction::Deactivated => "deactivated",
            RootAction::GivenPermissions => "given permissions",
        })
    }
}

/// Why a node stopped: its typed cause (the I/O error keeps its kind).
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error("the metadata plane failed: {0}")]
    Metadata(#[source] MetadataError),
    #[error("directory work of a journaled operation failed: {0}")]
    Work(#[source] WorkError),
    #[error("the node was shut down")]
    Shutdown,
    /// An owner broke an invariant (an assertion fired): the node stops rather than serve a
    /// state it no longer understands.
    #[error("the {0} panicked: an invariant failed")]
    Panicked(String),
}

/// A piece of directory work that failed: the file system's error, or the partition's.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Partition(#[from] PartitionError),
}

impl WorkError {
    /// The I/O error underneath, if there is one (its kind says ENOSPC, EIO, ...).
    pub fn io(&self) -> Option<&io::Error> {
        match self {
            WorkError::Io(e) => Some(e),
            WorkError::Partition(PartitionError::Io { source, .. }) => Some(source),
            WorkError::Partition(_) => None,
        }
    }
}

/// What a [`NodeError::TooMany`] ran out of: a bound on a shared resource, answered with a
/// code that says the limit was reached (Iggy's own where it has one), never as a malformed
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capacity {
    Streams,
    TopicsInStream,
    GroupsInTopic,
    Users,
    TokensOfUser,
    MembersInGroup,
    MembershipsInNode,
    MembershipsOfUser,
    OffsetsInPartition,
}

impl Capacity {
    /// The Iggy status code a client gets.
    pub fn code(self) -> u32 {
        match self {
            Capacity::Streams => 1020,            // TooManyStreams
            Capacity::TopicsInStream => 2021,     // TooManyTopics
            Capacity::Users => 55,                // UsersLimitReached
            Capacity::TokensOfUser => 52,         // PersonalAccessTokensLimitReached
            Capacity::OffsetsInPartition => 3024, // TooManyConsumerOffsets
            // Iggy bounds neither: the consumer-group code for a group or member that cannot
            // be made (CannotCreateConsumerGroupInfo).
            Capacity::GroupsInTopic
            | Capacity::MembersInGroup
            | Capacity::MembershipsInNode
            | Capacity::MembershipsOfUser => 5007,
        }
    }
}

impl std::fmt::Display for Capacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Capacity::Streams => "streams",
            Capacity::TopicsInStream => "topics in a stream",
            Capacity::GroupsInTopic => "consumer groups in a topic",
            Capacity::Users => "users",
            Capacity::TokensOfUser => "personal access tokens of a user",
            Capacity::MembersInGroup => "members in a consumer group",
            Capacity::MembershipsInNode => "consumer group memberships in the node",
            Capacity::MembershipsOfUser => "consumer group memberships of one user",
            Capacity::OffsetsInPartition => "consumer offsets in a partition",
        })
    }
}

impl NodeError {
    /// The Iggy 0.11 error code (`iggy_common` `IggyError`).
    pub fn code(&self) -> u32 {
        use NodeError::*;
        match self {
            StreamNotFound(Named::Id(_)) => 1009,
            StreamNotFound(Named::Name(_)) => 1010,
            StreamNameExists(_) => 1012,
            TopicNotFound {
                topic: Named::Id(_),
                ..
            } => 2010,
            TopicNotFound {
                topic: Named::Name(_),
                ..
            } => 2011,
            TopicNameExists { .. } => 2013,
            PartitionNotFound { .. } => 3007,
            InvalidPartitionsCount { .. } => 2019,
            GroupNotFound {
                group: Named::Id(_),
                ..
            } => 5000,
            GroupNotFound {
                group: Named::Name(_),
                ..
            } => 5003,
            GroupNameExists { .. } => 5004,
            NotAMember { .. } => 5006,
            NoCurrentPartition { .. } => 3007,
            DirectoryInTheWay(_) => 1,
            PartitionNotOwned { .. } => 5009,
            InvalidName { .. } => 4,
            UnsupportedOptionKey { .. } => 4041,
            InvalidOptionValue { .. } => 4042,
            TooMany { what, .. } => what.code(),
            UserNotFound(_) => 20,
            UserExists(_) => 46,
            InvalidUsername(_) => 43,
            InvalidPassword(_) => 44,
            RootUser(RootAction::Deleted) => 48,
            RootUser(RootAction::GivenPermissions) => 49,
            RootUser(RootAction::Deactivated) => 41,
            InvalidUserStatus(_) => 45,
            InvalidPermissions(_) => 3,
            InvalidCredentials => 42,
            UserInactive(_) => 47,
            InvalidTokenName(_) => 50,
            TokenExists { .. } => 51,
            TooManyTokens { .. } => 52,
            InvalidToken => 53,
            TokenExpired { .. } => 54,
            InvalidTokenExpiry(_) => 56,
            // Iggy has no code of its own for it: ResourceNotFound.
            TokenNotFound { .. } => 20,
            TooBig { .. } => 3,
            OffsetNotFound(_) => 3021,
            InvalidRequest(_) => 3,
            Partition(PartitionError::InvalidBatch(_)) => 4027,
            // TooManyConsumerOffsets
            Partition(PartitionError::TooManyOffsets { .. }) => 3024,
            Partition(_) => 1,
            MetadataNoSpace => 1,
            Busy(_) => 1,
            Stopped(_) => 1,
            Refused { code, .. } => *code,
            Undecided(_) => 1,
            AlreadyDecided(_) => 1,
            ProposalForgotten { .. } => 1,
        }
    }
}

impl NodeError {
    /// The same error for another caller (a persist's failure answers every batch it
    /// covered). An I/O error is rebuilt with its kind and message.
    pub fn clone_for_reply(&self) -> NodeError {
        use NodeError::*;
        match self {
            StreamNotFound(n) => StreamNotFound(n.clone()),
            StreamNameExists(n) => StreamNameExists(n.clone()),
            TopicNotFound { stream, topic } => TopicNotFound {
                stream: *stream,
                topic: topic.clone(),
            },
            TopicNameExists { stream, name } => TopicNameExists {
                stream: *stream,
                name: name.clone(),
            },
            PartitionNotFound {
                stream,
                topic,
                partition,
            } => PartitionNotFound {
                stream: *stream,
                topic: *topic,
                partition: *partition,
            },
            Partition(e) => Partition(e.duplicate()),
            Stopped(f) => Stopped(f.clone()),
            MetadataNoSpace => MetadataNoSpace,
            Busy(what) => Busy(what),
            Refused { code, reason } => Refused {
                code: *code,
                reason: reason.clone(),
            },
            Undecided(why) => Undecided(why.clone()),
            AlreadyDecided(at) => AlreadyDecided(*at),
            ProposalForgotten {
                asked_at,
                forgotten_through,
            } => ProposalForgotten {
                asked_at: *asked_at,
                forgotten_through: *forgotten_through,
            },
            other => InvalidRequest(other.to_string()),
        }
    }
}

pub type NodeResult<T> = std::result::Result<T, NodeError>;

//! What a node answers when it cannot do what was asked, with the Iggy 0.11 error code a
//! binary-protocol client expects for each ([`NodeError::code`]).

use crate::partition::PartitionError;
use std::fmt;

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
    TooMany { what: &'static str, limit: usize },
    #[error("user {0} not found")]
    UserNotFound(Named),
    #[error("a user named {0:?} already exists")]
    UserExists(String),
    #[error("invalid username: {0}")]
    InvalidUsername(String),
    #[error("invalid password: {0}")]
    InvalidPassword(String),
    #[error("the root user cannot be deleted or deactivated")]
    RootUser,
    #[error("no consumer offset stored for {0}")]
    OffsetNotFound(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// The metadata plane failed to make an operation durable, or its directory work failed:
    /// the node refuses everything until a restart recovers it.
    #[error("the node's metadata plane failed and refuses requests until restarted: {0}")]
    MetadataFailed(String),
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
            PartitionNotOwned { .. } => 5009,
            InvalidName { .. } => 4,
            UnsupportedOptionKey { .. } => 4041,
            InvalidOptionValue { .. } => 4042,
            TooMany { .. } => 3,
            UserNotFound(_) => 20,
            UserExists(_) => 46,
            InvalidUsername(_) => 43,
            InvalidPassword(_) => 44,
            RootUser => 41,
            OffsetNotFound(_) => 3021,
            InvalidRequest(_) => 3,
            Partition(PartitionError::InvalidBatch(_)) => 4027,
            Partition(_) => 1,
            MetadataFailed(_) => 1,
        }
    }
}

pub type NodeResult<T> = std::result::Result<T, NodeError>;

//! How a command says no: Iggy's status code, what went wrong in words, and whose fault it
//! is. Adapters translate a [`Status`]: the binary protocol puts its code in the reply
//! header; HTTP picks its HTTP status from the fault first, then the code.

use cairn_engine::node::NodeError;
use cairn_engine::partition::PartitionError;

/// Iggy's status codes the command layer answers with by name (`iggy_common` `IggyError`).
pub mod codes {
    pub const ERROR: u32 = 1;
    pub const INVALID_COMMAND: u32 = 3;
    pub const INVALID_FORMAT: u32 = 4;
    pub const FEATURE_UNAVAILABLE: u32 = 5;
    pub const RESOURCE_NOT_FOUND: u32 = 20;
    pub const UNAUTHENTICATED: u32 = 40;
    pub const UNAUTHORIZED: u32 = 41;
    pub const INVALID_CREDENTIALS: u32 = 42;
    pub const INVALID_PERSONAL_ACCESS_TOKEN_NAME: u32 = 50;
    pub const INVALID_PERSONAL_ACCESS_TOKEN: u32 = 53;
    pub const PERSONAL_ACCESS_TOKEN_EXPIRED: u32 = 54;
    pub const ACCESS_TOKEN_MISSING: u32 = 77;
    pub const INVALID_ACCESS_TOKEN: u32 = 78;
    pub const INVALID_NUMBER_VALUE: u32 = 84;
    pub const CLIENT_NOT_FOUND: u32 = 100;
    pub const STREAM_ID_NOT_FOUND: u32 = 1009;
    pub const TOPIC_ID_NOT_FOUND: u32 = 2010;
    pub const TOO_MANY_PARTITIONS: u32 = 2015;
    pub const INVALID_MESSAGES_COUNT: u32 = 4009;
    pub const INVALID_BATCH_CHECKSUM: u32 = 4039;
    pub const CONSUMER_GROUP_ID_NOT_FOUND: u32 = 5000;
}

/// A refusal: the Iggy status code to answer with, what went wrong in words (when there is
/// more to say than the code: the HTTP adapter's error bodies carry it), and whose fault it
/// is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: u32,
    pub reason: Option<String>,
    pub fault: Fault,
}

/// Whose fault a refusal is: the client's request, a condition that passes (a stopped node,
/// a fenced partition, a full queue or disk), or the server's own failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Client,
    Unavailable,
    Server,
}

impl Status {
    /// A refusal the client caused, with no more to say than its code.
    pub const fn of(code: u32) -> Status {
        Status {
            code,
            reason: None,
            fault: Fault::Client,
        }
    }

    /// A refusal the client caused, saying why.
    pub fn because(code: u32, reason: impl Into<String>) -> Status {
        Status {
            code,
            reason: Some(reason.into()),
            fault: Fault::Client,
        }
    }
}

impl From<NodeError> for Status {
    fn from(e: NodeError) -> Status {
        tracing::debug!(error = %e, "request refused");
        let code = match &e {
            NodeError::Partition(PartitionError::InvalidBatch(
                cairn_engine::format::FormatError::BatchChecksum { .. },
            )) => codes::INVALID_BATCH_CHECKSUM,
            _ => e.code(),
        };
        Status {
            code,
            fault: fault_of(&e),
            reason: Some(e.to_string()),
        }
    }
}

/// The fault table: what a node error says about who should act.
fn fault_of(e: &NodeError) -> Fault {
    match e {
        NodeError::Stopped(_)
        | NodeError::Busy(_)
        | NodeError::MetadataNoSpace
        | NodeError::Undecided(_)
        | NodeError::ProposalForgotten { .. } => Fault::Unavailable,
        NodeError::Partition(p) => match p {
            PartitionError::Fenced(_)
            | PartitionError::NoSpace
            | PartitionError::JournalFull { .. }
            | PartitionError::NodeJournalFull { .. } => Fault::Unavailable,
            PartitionError::Io { .. }
            | PartitionError::OffsetDamaged { .. }
            | PartitionError::AlreadyExists(_) => Fault::Server,
            PartitionError::InvalidBatch(_)
            | PartitionError::OffsetBeyondEnd { .. }
            | PartitionError::TooManyOffsets { .. }
            | PartitionError::InvalidConfig(_)
            | PartitionError::ZeroCount
            | PartitionError::ActiveSegment { .. } => Fault::Client,
        },
        NodeError::DirectoryInTheWay(_) => Fault::Server,
        _ => Fault::Client,
    }
}

/// A request body that does not decode as the command it names.
pub fn undecodable(what: &str, e: impl std::fmt::Display) -> Status {
    tracing::debug!(what, error = %e, "undecodable request body");
    Status::because(codes::INVALID_COMMAND, format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_fault_table_says_who_should_act() {
        let full = NodeError::Partition(PartitionError::NoSpace);
        assert_eq!(Status::from(full).fault, Fault::Unavailable);
        let stopped = NodeError::Stopped(Arc::new(cairn_engine::node::Failure::Shutdown));
        assert_eq!(Status::from(stopped).fault, Fault::Unavailable);
        assert_eq!(
            Status::from(NodeError::InvalidCredentials).fault,
            Fault::Client
        );
    }
}

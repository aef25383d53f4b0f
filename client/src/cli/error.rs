//! What a client command can fail with ([`CliError`]), each message in the user's words, and
//! [`describe`], which names the stream, topic, group or user the user gave ([`Subject`]) in
//! the server's refusals. A leaf of the `cli` module: the others all return its error.

use crate::error::ClientError;
use iggy_binary_protocol::WireError;
use std::io;

/// The names the user gave, for error messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subject {
    pub stream: Option<String>,
    pub topic: Option<String>,
    pub partition: Option<u32>,
    pub group: Option<String>,
    pub user: Option<String>,
    /// The name a create would give ("already exists" errors).
    pub new_name: Option<String>,
}

/// Why a client command failed; its message is what the user reads after `error: `.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// `--address` does not parse or resolve.
    #[error("bad server address `{address}`: {source}")]
    BadAddress {
        address: String,
        #[source]
        source: io::Error,
    },
    /// `--address` resolves to no address at all.
    #[error("server address `{address}` resolves to nothing")]
    AddressResolvesToNothing { address: String },
    /// The command needs a session and no password was given.
    #[error("this command needs a login: pass --password or set CAIRN_PASSWORD")]
    NeedsLogin,
    /// `message send` without payload arguments could not read stdin.
    #[error("cannot read payloads from stdin: {0}")]
    Stdin(#[source] io::Error),
    /// `message send` got no payloads, neither as arguments nor on stdin.
    #[error("no payloads: give them as arguments or lines on stdin")]
    NoPayloads,
    /// The real I/O runtime did not start.
    #[error("cannot start the I/O runtime: {0}")]
    Runtime(#[source] io::Error),
    /// A stream, topic, group or user argument is neither an id nor a valid name.
    #[error("`{text}` is neither an id nor a valid name: {source}")]
    BadIdent {
        text: String,
        #[source]
        source: WireError,
    },
    /// `--key` is not a valid partitioning key.
    #[error("bad --key: {0}")]
    BadKey(#[source] WireError),
    /// The topic settings do not make a valid options block.
    #[error("bad topic option: {0}")]
    BadTopicOption(#[source] WireError),
    /// One `--headers` entry has no `=`.
    #[error("header `{pair}` is not key=value")]
    HeaderNotKeyValue { pair: String },
    /// One `--headers` entry has an empty or over-long key or value.
    #[error("header `{pair}`: keys and values are 1..=255 bytes")]
    HeaderSize { pair: String },
    /// `--headers` does not encode as user headers.
    #[error("bad headers: {0}")]
    BadHeaders(#[source] WireError),
    /// The polled records do not decode.
    #[error("polled records do not decode: {0}")]
    BadRecords(#[source] WireError),
    /// `user update` with nothing to change.
    #[error("nothing to update: give --new-name, --active or --inactive")]
    NothingToUpdate,
    /// A get found no such stream.
    #[error("unknown stream `{stream}`")]
    UnknownStream { stream: String },
    /// A get found no such topic.
    #[error("unknown topic `{topic}` in stream `{stream}`")]
    UnknownTopic { topic: String, stream: String },
    /// A get found no such consumer group.
    #[error("unknown consumer group `{group}` in topic `{topic}`")]
    UnknownGroup { group: String, topic: String },
    /// A get found no such user.
    #[error("unknown user `{user}`")]
    UnknownUser { user: String },
    /// A get found no such client.
    #[error("unknown client {id}")]
    UnknownClient { id: u32 },
    /// No offset is stored for the consumer.
    #[error("no offset stored for this consumer")]
    NoOffset,
    /// The server refused the request or could not be reached; the message names what the
    /// user asked for (see [`describe`]).
    #[error("{}", describe(source, subject))]
    Request {
        #[source]
        source: ClientError,
        subject: Box<Subject>,
    },
}

impl CliError {
    /// `error` from a request about `what`.
    pub fn request(error: ClientError, what: &Subject) -> CliError {
        CliError::Request {
            source: error,
            subject: Box::new(what.clone()),
        }
    }
}

/// What went wrong, in the user's terms: not-found and already-exists codes name the
/// identifier the user gave.
pub fn describe(error: &ClientError, what: &Subject) -> String {
    let named = |value: &Option<String>| value.clone().unwrap_or_else(|| "?".to_string());
    match error {
        ClientError::Unreachable { address, source } => {
            format!("server unreachable at {address}: {}", io_reason(source))
        }
        ClientError::Server { code, .. } => match code {
            1009 | 1010 => format!("unknown stream `{}`", named(&what.stream)),
            2010 | 2011 => format!(
                "unknown topic `{}` in stream `{}`",
                named(&what.topic),
                named(&what.stream)
            ),
            3007 => match what.partition {
                Some(p) => format!("unknown partition {p} in topic `{}`", named(&what.topic)),
                None => format!("unknown partition in topic `{}`", named(&what.topic)),
            },
            5000 | 5003 => format!("unknown consumer group `{}`", named(&what.group)),
            20 if what.user.is_some() => format!("unknown user `{}`", named(&what.user)),
            1012 => format!("stream `{}` already exists", named(&what.new_name)),
            2013 => format!(
                "topic `{}` already exists in stream `{}`",
                named(&what.new_name),
                named(&what.stream)
            ),
            5004 => format!("consumer group `{}` already exists", named(&what.new_name)),
            46 => format!("user `{}` already exists", named(&what.new_name)),
            3021 => "no offset stored for this consumer".to_string(),
            41 => "permission denied: the user may not do this (Unauthorized, code 41)".to_string(),
            _ => error.to_string(),
        },
        _ => error.to_string(),
    }
}

/// An I/O error in a few words ("connection refused").
fn io_reason(error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::ConnectionRefused => "connection refused".to_string(),
        ErrorKind::ConnectionReset => "connection reset".to_string(),
        ErrorKind::TimedOut => "timed out".to_string(),
        ErrorKind::AddrNotAvailable => "address not available".to_string(),
        _ => error.to_string(),
    }
}

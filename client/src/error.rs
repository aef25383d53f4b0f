//! What can go wrong talking to a server, each variant naming what went wrong.

use crate::codes::{self, eviction_reason_name, eviction_triggers_reconnect};
use iggy_binary_protocol::WireError;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// A request that did not get a successful answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TCP connection could not be made.
    #[error("server unreachable at {address}: {source}")]
    Unreachable {
        address: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// Nothing came back in time; the connection was dropped.
    #[error("timed out after {after:?} waiting for {waiting_for} from {address}")]
    Timeout {
        address: SocketAddr,
        waiting_for: &'static str,
        after: Duration,
    },
    /// The connection broke (read or write error, or the server closed it). For a
    /// replicated request the outcome is unknown: it may or may not have been applied.
    #[error("connection to {address} lost: {source}")]
    Disconnected {
        address: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The server answered with an Iggy error code (status or result section).
    #[error("server refused: {name} (code {code})")]
    Server { code: u32, name: &'static str },
    /// The server ended the session with an Eviction frame.
    #[error("server evicted the session: {} (reason {reason})", eviction_reason_name(*reason))]
    Evicted { reason: u8 },
    /// The login was refused: eviction reason 9 or status 42.
    #[error("wrong username or password")]
    InvalidCredentials,
    /// The server broke the protocol; the connection was dropped.
    #[error("protocol violation: {0}")]
    Protocol(#[from] ProtocolError),
    /// A request that needs a session was made before logging in.
    #[error("`{command}` needs a login first")]
    NotLoggedIn { command: &'static str },
    /// The request cannot be encoded (a bound or a codec rule), so it was not sent.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// No Iggy command has this code.
    #[error("no Iggy command has code {code}")]
    UnknownCommand { code: u32 },
}

impl ClientError {
    /// The error for Iggy code `code` (42 is [`ClientError::InvalidCredentials`]).
    pub fn server(code: u32) -> ClientError {
        assert_ne!(code, 0, "code 0 is success");
        if code == codes::INVALID_CREDENTIALS {
            return ClientError::InvalidCredentials;
        }
        ClientError::Server {
            code,
            name: codes::error_name(code),
        }
    }

    /// The Iggy error code the server sent, if this is a server refusal.
    pub fn code(&self) -> Option<u32> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            ClientError::InvalidCredentials => Some(codes::INVALID_CREDENTIALS),
            _ => None,
        }
    }

    /// The connection is unusable after this error and was dropped.
    pub fn is_connection_failure(&self) -> bool {
        matches!(
            self,
            ClientError::Unreachable { .. }
                | ClientError::Timeout { .. }
                | ClientError::Disconnected { .. }
                | ClientError::Protocol(_)
        )
    }

    /// The Iggy SDK answers this error by reconnecting and logging in again (`docs/wire.md` §2.4):
    /// a broken connection, status 40/30, or an eviction it maps to 40/30.
    pub fn triggers_reconnect(&self) -> bool {
        match self {
            ClientError::Timeout { .. } | ClientError::Disconnected { .. } => true,
            ClientError::Server { code, .. } => codes::triggers_reconnect(*code),
            ClientError::Evicted { reason } => eviction_triggers_reconnect(*reason),
            _ => false,
        }
    }
}

/// How the server broke the protocol.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("reply frame announces {size} bytes, less than its 256-byte header")]
    FrameTooShort { size: u32 },
    #[error("reply frame announces {size} bytes, more than the {max}-byte limit")]
    FrameTooLarge { size: u32, max: u32 },
    #[error("frame has command {command}, expected 8 (Reply) or 13 (Eviction)")]
    UnexpectedCommand { command: u8 },
    #[error("eviction frame announces {size} bytes, expected exactly 256")]
    EvictionWithBody { size: u32 },
    #[error("reply body is {got} bytes, its header announced {announced}")]
    BodyLength { announced: usize, got: usize },
    #[error("reply header is undecodable (operation byte {operation})")]
    BadReplyHeader { operation: u8 },
    #[error("reply echoes operation {got}, the request was operation {sent}")]
    OperationMismatch { sent: u8, got: u8 },
    #[error("reply to operation {operation} has a malformed result section ({len}-byte body)")]
    MalformedResultSection { operation: u8, len: usize },
    #[error("`{command}` reply does not decode: {source}")]
    BadBody {
        command: &'static str,
        #[source]
        source: WireError,
    },
    #[error("`{command}` reply has {extra} bytes after its payload")]
    TrailingBytes { command: &'static str, extra: usize },
    #[error("`{command}` reply is {len} bytes, too short ({why})")]
    ShortBody {
        command: &'static str,
        len: usize,
        why: &'static str,
    },
    #[error("login reply carries session 0")]
    ZeroSession,
}

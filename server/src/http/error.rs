//! HTTP error replies in Iggy's shape: a JSON body `{"id", "code", "reason", "field"}` (the
//! numeric Iggy error code, its snake-case name, what went wrong, and the request field at
//! fault, if one is), under a status chosen by a table of who is at fault: 4xx for the
//! client's faults, 503 for conditions that pass (a stopped node, a fenced partition, a full
//! queue or disk), 500 only for the server's own failures.

use crate::command::{Fault, Status};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

pub use crate::command::codes;

/// Codes a 404 answers: the named entity does not exist.
const NOT_FOUND: [u32; 13] = [
    20, 100, 1009, 1010, 1011, 2010, 2011, 3007, 3021, 4000, 5000, 5003, 5006,
];
/// Codes a 401 answers: no valid token was presented (a wrong password is a 400, as
/// Iggy's server answers it; an expired personal access token is a token, so a 401).
const UNAUTHENTICATED: [u32; 5] = [40, 53, 54, 77, 78];

/// One HTTP error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: u32,
    pub reason: String,
    pub field: Option<String>,
}

#[derive(Serialize)]
struct Body<'a> {
    id: u32,
    code: &'static str,
    reason: &'a str,
    field: Option<&'a str>,
}

/// The status for a refusal: the fault first, then the code.
pub fn status_of(fault: Fault, code: u32) -> StatusCode {
    match fault {
        Fault::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Fault::Server => StatusCode::INTERNAL_SERVER_ERROR,
        Fault::Client if UNAUTHENTICATED.contains(&code) => StatusCode::UNAUTHORIZED,
        Fault::Client if code == codes::UNAUTHORIZED => StatusCode::FORBIDDEN,
        Fault::Client if NOT_FOUND.contains(&code) => StatusCode::NOT_FOUND,
        Fault::Client => StatusCode::BAD_REQUEST,
    }
}

impl ApiError {
    /// A client's fault with its code and words.
    pub fn client(code: u32, reason: impl Into<String>) -> ApiError {
        ApiError {
            status: status_of(Fault::Client, code),
            code,
            reason: reason.into(),
            field: None,
        }
    }

    /// A malformed request naming its field.
    pub fn field(code: u32, field: impl Into<String>, reason: impl Into<String>) -> ApiError {
        ApiError {
            field: Some(field.into()),
            ..ApiError::client(code, reason)
        }
    }

    pub fn with_status(self, status: StatusCode) -> ApiError {
        ApiError { status, ..self }
    }

    pub fn unauthenticated(reason: impl Into<String>) -> ApiError {
        ApiError::client(codes::UNAUTHENTICATED, reason)
    }

    pub fn not_found(reason: impl Into<String>) -> ApiError {
        ApiError::client(codes::RESOURCE_NOT_FOUND, reason)
    }
}

impl From<Status> for ApiError {
    fn from(s: Status) -> ApiError {
        let reason = s.reason.unwrap_or_else(|| {
            iggy_common::IggyError::from_code_as_string(s.code).replace('_', " ")
        });
        ApiError {
            status: status_of(s.fault, s.code),
            code: s.code,
            reason,
            field: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            id: self.code,
            code: iggy_common::IggyError::from_code_as_string(self.code),
            reason: &self.reason,
            field: self.field.as_deref(),
        };
        tracing::debug!(status = %self.status, code = self.code, reason = %self.reason, "http request refused");
        let mut response = (self.status, axum::Json(body)).into_response();
        // Refused before its body was read whole: what is left of the body would be read
        // as the next request, so the connection ends with this answer, and says so (a
        // client that pooled it would send its next request into a closing socket).
        if matches!(
            self.status,
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT
        ) {
            let close = axum::http::HeaderValue::from_static("close");
            response
                .headers_mut()
                .insert(axum::http::header::CONNECTION, close);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fault_decides_before_the_code() {
        assert_eq!(
            status_of(Fault::Unavailable, 1009),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status_of(Fault::Server, 1),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(status_of(Fault::Client, 1009), StatusCode::NOT_FOUND);
        assert_eq!(status_of(Fault::Client, 2011), StatusCode::NOT_FOUND);
        assert_eq!(status_of(Fault::Client, 40), StatusCode::UNAUTHORIZED);
        assert_eq!(status_of(Fault::Client, 41), StatusCode::FORBIDDEN);
        assert_eq!(status_of(Fault::Client, 1012), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(Fault::Client, 4), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(Fault::Client, 42), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn a_stopped_node_a_busy_queue_and_a_full_disk_are_503_naming_why() {
        use cairn_engine::node::{Failure, NodeError};
        let metadata = cairn_engine::metadata::MetadataError::Io {
            op: "write",
            path: "journal.wal".into(),
            source: std::io::Error::other("journal write failed"),
        };
        let stopped = NodeError::Stopped(std::sync::Arc::new(Failure::Metadata(metadata)));
        for (error, words) in [
            (stopped, "the metadata plane failed"),
            (NodeError::Busy("the shard inbox"), "busy"),
            (NodeError::MetadataNoSpace, "no space"),
        ] {
            let api = ApiError::from(Status::from(error));
            assert_eq!(api.status, StatusCode::SERVICE_UNAVAILABLE, "{api:?}");
            assert!(api.reason.contains(words), "{api:?}");
        }
        let io = cairn_engine::partition::PartitionError::Io {
            op: "write",
            path: "x.log".into(),
            source: std::io::Error::other("EIO"),
        };
        let api = ApiError::from(Status::from(NodeError::Partition(io)));
        assert_eq!(api.status, StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn every_table_code_is_an_iggy_code_of_its_kind() {
        for code in NOT_FOUND {
            let name = iggy_common::IggyError::from_code_as_string(code);
            assert!(name.contains("not_found"), "{code} is {name}");
        }
        for code in UNAUTHENTICATED {
            let name = iggy_common::IggyError::from_code_as_string(code);
            assert_ne!(name, "unknown error code", "{code}");
        }
    }
}

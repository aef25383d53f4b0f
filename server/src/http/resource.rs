//! What every resource's handlers share. Each handler is the same three steps: the path,
//! query and JSON body become a typed [`Command`] (through `iggy_common`'s conversions),
//! [`Authed::run`] answers it, and the typed reply becomes `iggy_common`'s model, serialized
//! as the SDK reads it. Here: the reply macros, path and name parsing that name the field at
//! fault, and the responses without a body.

use super::auth::Authed;
use super::error::{codes, ApiError};
use crate::command::{Command, Reply as CommandReply};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use iggy_binary_protocol::{WireIdentifier, WireName, WireOptions};
use iggy_common::wire_conversions as wire;
use iggy_common::{Identifier, IggyError};

pub type Result<T> = std::result::Result<T, ApiError>;
pub type Reply<T> = Result<axum::Json<T>>;

/// The reply variant a command answers with; any other is the server's own bug (500).
macro_rules! reply {
    ($reply:expr, $variant:ident) => {
        match $reply {
            $crate::command::Reply::$variant(value) => value,
            other => return Err($crate::http::resource::unexpected(other)),
        }
    };
}

/// A read's reply variant, or 404 naming `$what` when it found nothing.
macro_rules! found {
    ($reply:expr, $variant:ident, $what:expr) => {
        match $reply {
            $crate::command::Reply::$variant(value) => value,
            $crate::command::Reply::NotFound => {
                return Err($crate::http::error::ApiError::not_found(format!(
                    "{} not found",
                    $what
                )))
            }
            other => return Err($crate::http::resource::unexpected(other)),
        }
    };
}

pub(crate) use {found, reply};

/// A reply of another kind than the command answers: the server's own fault.
pub fn unexpected(reply: CommandReply) -> ApiError {
    tracing::error!(?reply, "a command answered with a reply of another kind");
    ApiError::client(codes::ERROR, "the command layer answered unexpectedly")
        .with_status(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Runs a command whose success says nothing.
pub async fn done(a: &Authed, command: Command) -> Result<()> {
    match a.run(command).await? {
        CommandReply::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// An `IggyError` from a conversion: the request named something the protocol cannot carry.
pub fn invalid(e: IggyError) -> ApiError {
    ApiError::client(e.as_code(), e.to_string())
}

/// A reply that does not convert to the SDK's model: the server's own fault.
pub fn unconvertible(e: IggyError) -> ApiError {
    tracing::error!(error = %e, "a reply of the command layer does not convert");
    ApiError::client(codes::ERROR, format!("a reply of the command layer: {e}"))
        .with_status(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A path identifier: numeric when it parses as one, a name otherwise (Iggy's rule); a bad
/// one names its path `field`.
pub fn id(field: &str, value: &str) -> Result<WireIdentifier> {
    let named = |e: IggyError| ApiError::field(e.as_code(), field, e.to_string());
    let id = Identifier::from_str_value(value).map_err(named)?;
    wire::identifier_to_wire(&id).map_err(named)
}

/// A numeric path segment; a bad one names its path `field`.
pub fn number(field: &str, value: &str) -> Result<u32> {
    value.parse().map_err(|_| {
        ApiError::field(
            codes::INVALID_FORMAT,
            field,
            format!(
                "{field} must be a number from 0 to {}, got {value:?}",
                u32::MAX
            ),
        )
    })
}

/// A name in a body (`field`, 1 to 255 bytes).
pub fn name(field: &str, code: u32, value: &str) -> Result<WireName> {
    WireName::new(value).map_err(|_| {
        ApiError::field(
            code,
            field,
            format!("a name must be 1 to 255 bytes, got {}", value.len()),
        )
    })
}

/// An entity's name in a body.
pub fn entity_name(value: &str) -> Result<WireName> {
    name("name", codes::INVALID_FORMAT, value)
}

/// String options (`{"key": "value"}`) as the protocol's options block.
pub fn string_options(
    raw: std::collections::BTreeMap<String, String>,
    to_wire: impl FnOnce(
        std::collections::BTreeMap<String, String>,
    ) -> std::result::Result<WireOptions, IggyError>,
) -> Result<WireOptions> {
    to_wire(raw).map_err(invalid)
}

pub fn created<T: serde::Serialize>(value: T) -> Response {
    (StatusCode::CREATED, axum::Json(value)).into_response()
}

pub fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

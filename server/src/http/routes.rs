//! The route table, and what every resource's handlers share. Each handler is the same
//! three steps: the path, query and JSON body become a typed [`Command`] (through
//! `iggy_common`'s conversions), [`Authed::run`] answers it, and the typed reply becomes
//! `iggy_common`'s model, serialized as the SDK reads it.

use super::auth::{self, Authed};
use super::error::{codes, ApiError};
use super::Api;
use crate::command::{Command, Reply as CommandReply};
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Router;
use iggy_binary_protocol::{WireIdentifier, WireName, WireOptions};
use iggy_common::wire_conversions as wire;
use iggy_common::{Identifier, IggyError};
use std::sync::Arc;

pub type Result<T> = std::result::Result<T, ApiError>;
pub type Reply<T> = Result<axum::Json<T>>;

/// Every route; a send's body may be up to `max_body_bytes`.
pub fn routes(max_body_bytes: usize) -> Router<Arc<Api>> {
    use super::{consumers, streams, system, users};
    Router::new()
        .route("/", get(|| async { "cairn" }))
        .route("/ping", get(|| async { "pong" }))
        .route("/stats", get(system::stats))
        .route("/clients", get(system::clients))
        .route("/clients/{client_id}", get(system::client))
        .route("/cluster/metadata", get(system::cluster_metadata))
        // A user may be named like these fixed paths (Iggy's route table has the same
        // overlap): their other methods act on that user.
        .route(
            "/users/login",
            post(auth::login)
                .get(|a: Authed| users::get(a, Path("login".into())))
                .put(|a: Authed, j| users::update(a, Path("login".into()), j))
                .delete(|a: Authed| users::delete(a, Path("login".into()))),
        )
        .route(
            "/users/logout",
            delete(auth::logout)
                .get(|a: Authed| users::get(a, Path("logout".into())))
                .put(|a: Authed, j| users::update(a, Path("logout".into()), j)),
        )
        .route(
            "/users/refresh-token",
            post(auth::refresh)
                .get(|a: Authed| users::get(a, Path("refresh-token".into())))
                .put(|a: Authed, j| users::update(a, Path("refresh-token".into()), j))
                .delete(|a: Authed| users::delete(a, Path("refresh-token".into()))),
        )
        .route("/users", get(users::list).post(users::create))
        .route(
            "/users/{user_id}",
            get(users::get).put(users::update).delete(users::delete),
        )
        .route(
            "/users/{user_id}/permissions",
            put(users::update_permissions),
        )
        .route("/users/{user_id}/password", put(users::change_password))
        .route("/streams", get(streams::list).post(streams::create))
        .route(
            "/streams/{stream_id}",
            get(streams::get)
                .put(streams::update)
                .delete(streams::delete),
        )
        .route("/streams/{stream_id}/purge", delete(streams::purge))
        .route(
            "/streams/{stream_id}/topics",
            get(streams::topics).post(streams::create_topic),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}",
            get(streams::topic)
                .put(streams::update_topic)
                .delete(streams::delete_topic),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/purge",
            delete(streams::purge_topic),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/partitions",
            post(streams::create_partitions).delete(streams::delete_partitions),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/partitions/{partition_id}",
            delete(streams::delete_segments),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/consumer-offsets",
            get(consumers::get_offset).put(consumers::store_offset),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/consumer-offsets/{consumer_id}",
            delete(consumers::delete_offset),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/consumer-groups",
            get(consumers::groups).post(consumers::create_group),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/consumer-groups/{group_id}",
            get(consumers::group).delete(consumers::delete_group),
        )
        .merge(super::messages::routes(max_body_bytes))
        .merge(super::personal_tokens::routes())
        .merge(super::metrics::routes())
        .fallback(|| async { ApiError::not_found("no such resource").into_response() })
        .method_not_allowed_fallback(|| async {
            ApiError::client(
                codes::INVALID_COMMAND,
                "this resource does not take that method",
            )
            .with_status(StatusCode::METHOD_NOT_ALLOWED)
            .into_response()
        })
}

/// The reply variant a command answers with; any other is the server's own bug (500).
macro_rules! reply {
    ($reply:expr, $variant:ident) => {
        match $reply {
            $crate::command::Reply::$variant(value) => value,
            other => return Err($crate::http::routes::unexpected(other)),
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
            other => return Err($crate::http::routes::unexpected(other)),
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

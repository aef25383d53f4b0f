//! The route table: every path and method the HTTP API serves, and the resource handler
//! that answers it (what the handlers share is in [`super::resource`]).

use super::auth::{self, Authed};
use super::error::{codes, ApiError};
use super::Api;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{delete, get, post, put};
use axum::Router;
use std::sync::Arc;

/// Every route (bodies are read and bounded by [`super::admit`]).
pub fn routes() -> Router<Arc<Api>> {
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
        .merge(super::messages::routes())
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

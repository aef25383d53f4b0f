//! Sending and polling messages over HTTP. What a send's answer promises is the command
//! layer's table ([`crate::command::messages`]): by default (or `?ack=replicated`) `201
//! Created` once the write completed under the topic's policy, with `Iggy-Durability:
//! replicated` or `persisted` saying which; with `?ack=none`, `202 Accepted` and
//! `Iggy-Durability: none` once the partition's owner queued the batch.

use super::admit;
use super::auth::Authed;
use super::body::{self, Query};
use super::error::{codes, ApiError};
use super::poll_body::PolledJson;
use super::resource::{done, id, invalid, number, reply};
use super::send_body::{self, SendBody, Stamp};
use super::Api;
use crate::command::messages::DURABILITY_HEADER;
use crate::command::permissions::{self, Action};
use crate::command::status::{self, Status};
use crate::command::{Ack, Command, Send};
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_common::wire_conversions as wire;
use std::sync::Arc;

pub fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route(
            "/streams/{stream_id}/topics/{topic_id}/messages",
            get(poll).post(send),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/messages/flush/{partition_id}/{fsync}",
            get(flush),
        )
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SendQuery {
    #[serde(default)]
    ack: Option<AckQuery>,
}

#[derive(serde::Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum AckQuery {
    None,
    Replicated,
}

async fn send(
    State(api): State<Arc<Api>>,
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Query(query): Query<SendQuery>,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let ack = match query.ack {
        Some(AckQuery::None) => Ack::Dispatched,
        Some(AckQuery::Replicated) | None => Ack::Awaited,
    };
    let stream = id("stream_id", &stream_id)?;
    let topic = id("topic_id", &topic_id)?;
    // The body is read only for a session that may send there (review S5), then a slot.
    may_send(&api, &a, &stream, &topic)?;
    let limit = api.settings.max_body_bytes;
    let (raw, _slot) = admit::admission(async {
        let (announced, user) = (admit::announced(&headers), Some(a.session.user_id));
        let raw = admit::read_body(&api, body, announced, limit, user).await?;
        Ok((raw, api.slots.acquire().await))
    })
    .await?;
    let SendBody {
        partitioning,
        count,
        batch,
    } = decode_send(&a, &raw.bytes)?;
    drop(raw);
    if count == 0 {
        return Err(ApiError::field(
            codes::INVALID_MESSAGES_COUNT,
            "messages",
            "a send needs at least one message",
        ));
    }
    let command = Command::SendMessages(Send {
        stream,
        topic,
        partitioning,
        count,
        batch,
        ack,
    });
    let sent = reply!(a.run(command).await?, Sent);
    let mut response = match sent.landed {
        None => StatusCode::ACCEPTED.into_response(),
        Some(landed) => {
            let confirmations = iggy_common::SendMessagesConfirmations {
                confirmations: vec![iggy_common::SendMessagesConfirmation {
                    stream_id: sent.stream_id,
                    topic_id: sent.topic_id,
                    partition_id: sent.partition,
                    base_offset: landed.base_offset,
                }],
            };
            (StatusCode::CREATED, axum::Json(confirmations)).into_response()
        }
    };
    response.headers_mut().insert(
        DURABILITY_HEADER,
        HeaderValue::from_static(sent.durability()),
    );
    Ok(response)
}

/// Refuses, before a body is read, a session that may not send to the named topic (to any
/// topic, when the names do not resolve: the command answers those after the read).
fn may_send(
    api: &Api,
    a: &Authed,
    stream: &iggy_binary_protocol::WireIdentifier,
    topic: &iggy_binary_protocol::WireIdentifier,
) -> Result<(), ApiError> {
    let view = api.cx.node.view();
    let user = a.session.user_id;
    let permissions = a.session.permissions(&view, &api.cx.hooks);
    let may = match view.topic_ids(stream, topic) {
        Ok((s, t)) => permissions::allowed(user, permissions.as_ref(), Action::Send(s, t)),
        Err(_) => permissions::may_send_somewhere(user, permissions.as_ref()),
    };
    match may {
        true => Ok(()),
        false => Err(Status::of(status::codes::UNAUTHORIZED).into()),
    }
}

/// The send body as a batch: message ids the body leaves out are drawn from the server's
/// entropy; the batch's origin timestamp is the server's clock.
fn decode_send(a: &Authed, raw: &[u8]) -> Result<SendBody, ApiError> {
    let env = &a.cx.env;
    let mut next_id =
        || (u128::from(env.entropy.next_u64()) << 64) | u128::from(env.entropy.next_u64());
    let stamp = Stamp {
        origin_timestamp: env.clock.wall_micros(),
        next_id: &mut next_id,
    };
    body::decode_seed(raw, send_body::Seed(stamp))
}

async fn poll(
    State(api): State<Arc<Api>>,
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Query(q): Query<iggy_common::PollMessages>,
) -> Result<Response, ApiError> {
    // The reply is reserved before it is built, within the user's share (review S5); tried
    // once, not waited for: the request holds one of the server's request slots.
    let reserved = api
        .cx
        .replies
        .reserve(&api.cx.env, a.session.user_id, std::time::Duration::ZERO)
        .await
        .ok_or_else(|| {
            ApiError::client(codes::ERROR, "no room for the poll's reply; retry later")
                .with_status(StatusCode::SERVICE_UNAVAILABLE)
        })?;
    let command = Command::PollMessages(PollMessagesRequest {
        consumer: wire::consumer_to_wire(&q.consumer).map_err(invalid)?,
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partition_id: q.partition_id,
        strategy: wire::polling_strategy_to_wire(&q.strategy),
        count: q.count,
        auto_commit: q.auto_commit,
    });
    let polled = reply!(a.run_within(command, reserved.bytes()).await?, Polled);
    let json = serde_json::to_vec(&PolledJson(&polled)).map_err(|e| {
        tracing::error!(error = %e, "a poll's batches do not encode");
        ApiError::client(codes::ERROR, format!("a poll's batches do not encode: {e}"))
            .with_status(StatusCode::INTERNAL_SERVER_ERROR)
    })?;
    let held = api.cx.replies.settle(reserved, json.len() as u64);
    let mut response = json.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(admit::holding(response, held))
}

async fn flush(
    a: Authed,
    Path((stream_id, topic_id, partition_id, fsync)): Path<(String, String, String, String)>,
) -> Result<Response, ApiError> {
    let _partition = number("partition_id", &partition_id)?;
    match fsync.as_str() {
        "fsync=true" | "true" | "fsync=false" | "false" => {}
        other => {
            return Err(ApiError::field(
                codes::INVALID_FORMAT,
                "fsync",
                format!("expected fsync=true or fsync=false, got {other:?}"),
            ))
        }
    }
    let _names = (id("stream_id", &stream_id)?, id("topic_id", &topic_id)?);
    let code = iggy_binary_protocol::codes::FLUSH_UNSAVED_BUFFER_CODE;
    done(&a, Command::Unserved(code)).await?;
    Ok(StatusCode::OK.into_response())
}

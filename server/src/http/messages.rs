//! Sending and polling messages over HTTP. A send's completion follows the durability
//! page's table: by default (or `?ack=replicated`) `201 Created` once the write completed
//! under the topic's policy, with `Iggy-Durability: replicated` or `persisted` saying which;
//! with `?ack=none`, `202 Accepted` and `Iggy-Durability: none` once the partition's owner
//! queued the batch, without waiting for it.

use super::auth::Authed;
use super::body::{Json, Query};
use super::error::{codes, ApiError};
use super::routes::{call, id, invalid};
use super::Api;
use crate::handlers::{self, Ack};
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::BytesMut;
use iggy_binary_protocol::codes::{
    FLUSH_UNSAVED_BUFFER_CODE, POLL_MESSAGES_CODE, SEND_MESSAGES_CODE,
};
use iggy_binary_protocol::requests::messages::{
    FlushUnsavedBufferRequest, PollMessagesRequest, RawMessage, SendMessagesEncoder,
};
use iggy_common::wire_conversions as wire;
use std::sync::Arc;

/// The completion header's name.
pub const DURABILITY_HEADER: &str = "iggy-durability";

pub fn routes(max_body_bytes: usize) -> Router<Arc<Api>> {
    Router::new()
        .route(
            "/streams/{stream_id}/topics/{topic_id}/messages",
            get(poll)
                .post(send)
                .layer(axum::extract::DefaultBodyLimit::max(max_body_bytes)),
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
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Query(query): Query<SendQuery>,
    Json(request): Json<iggy_common::SendMessages>,
) -> Result<Response, ApiError> {
    let ack = match query.ack {
        Some(AckQuery::None) => Ack::Dispatched,
        Some(AckQuery::Replicated) | None => Ack::Awaited,
    };
    let body = wire_body(&a, &stream_id, &topic_id, &request)?;
    // A send is the one command HTTP runs outside the command table (it needs the landing,
    // not the reply body): it is counted here as the table counts the others.
    let sent = handlers::send_with(&a.conn, body, ack).await;
    let status = sent.as_ref().map_or_else(|s| s.code, |_| 0);
    a.conn.shared.metrics.command(SEND_MESSAGES_CODE, status);
    let sent = sent?;
    let (status, durability, body) = match sent.landed {
        None => (StatusCode::ACCEPTED, "none", Vec::new()),
        Some(landed) => {
            let confirmations = iggy_common::SendMessagesConfirmations {
                confirmations: vec![iggy_common::SendMessagesConfirmation {
                    stream_id: sent.stream_id,
                    topic_id: sent.topic_id,
                    partition_id: sent.partition,
                    base_offset: landed.base_offset,
                }],
            };
            let durability = if landed.durable {
                "persisted"
            } else {
                "replicated"
            };
            let json = serde_json::to_vec(&confirmations).expect("serializable");
            (StatusCode::CREATED, durability, json)
        }
    };
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(DURABILITY_HEADER, HeaderValue::from_static(durability));
    if sent.landed.is_some() {
        headers.insert(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    Ok(response)
}

/// The binary protocol's send body for a JSON send: the same bytes an SDK would frame.
/// Messages without an id get a random one (the producer owns ids; over HTTP the server
/// stands in for it).
fn wire_body(
    a: &Authed,
    stream_id: &str,
    topic_id: &str,
    request: &iggy_common::SendMessages,
) -> Result<BytesMut, ApiError> {
    if request.batch.count() == 0 {
        return Err(ApiError::field(
            codes::INVALID_MESSAGES_COUNT,
            "messages",
            "a send needs at least one message",
        ));
    }
    let entropy = &a.conn.shared.env.entropy;
    let views: Vec<_> = request.batch.iter().collect();
    let messages: Vec<RawMessage<'_>> = views
        .iter()
        .map(|m| RawMessage {
            id: match m.header().id() {
                0 => (u128::from(entropy.next_u64()) << 64) | u128::from(entropy.next_u64()),
                id => id,
            },
            origin_timestamp: m.header().origin_timestamp(),
            headers: m.user_headers(),
            payload: m.payload(),
        })
        .collect();
    let stream = id("stream_id", stream_id)?;
    let topic = id("topic_id", topic_id)?;
    let partitioning = wire::partitioning_to_wire(&request.partitioning).map_err(invalid)?;
    let mut body = BytesMut::with_capacity(SendMessagesEncoder::encoded_size(
        &stream,
        &topic,
        &partitioning,
        &messages,
    ));
    SendMessagesEncoder::encode(&mut body, &stream, &topic, &partitioning, &messages)
        .map_err(|e| ApiError::field(codes::INVALID_COMMAND, "messages", e.to_string()))?;
    Ok(body)
}

async fn poll(
    mut a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Query(q): Query<iggy_common::PollMessages>,
) -> Result<axum::Json<iggy_common::PolledMessages>, ApiError> {
    let request = PollMessagesRequest {
        consumer: wire::consumer_to_wire(&q.consumer).map_err(invalid)?,
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partition_id: q.partition_id,
        strategy: wire::polling_strategy_to_wire(&q.strategy),
        count: q.count,
        auto_commit: q.auto_commit,
    };
    let body = call(&mut a, POLL_MESSAGES_CODE, &request).await?;
    let polled = iggy_common::PolledMessages::from_bytes(body.into()).map_err(|e| {
        ApiError::client(codes::ERROR, format!("a poll reply does not decode: {e}"))
            .with_status(StatusCode::INTERNAL_SERVER_ERROR)
    })?;
    Ok(axum::Json(polled))
}

async fn flush(
    mut a: Authed,
    Path((stream_id, topic_id, partition_id, fsync)): Path<(String, String, String, String)>,
) -> Result<Response, ApiError> {
    let partition_id = super::routes::number("partition_id", &partition_id)?;
    let fsync = match fsync.as_str() {
        "fsync=true" | "true" => true,
        "fsync=false" | "false" => false,
        other => {
            return Err(ApiError::field(
                codes::INVALID_FORMAT,
                "fsync",
                format!("expected fsync=true or fsync=false, got {other:?}"),
            ))
        }
    };
    let request = FlushUnsavedBufferRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partition_id,
        fsync,
    };
    call(&mut a, FLUSH_UNSAVED_BUFFER_CODE, &request).await?;
    Ok(StatusCode::OK.into_response())
}

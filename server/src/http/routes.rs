//! The resources, in Iggy's HTTP shape. Each handler is the same three steps: the JSON
//! request becomes the binary protocol's request (by `iggy_common`'s conversions), the
//! command layer answers it ([`crate::handlers::execute`]), and the wire reply becomes
//! `iggy_common`'s model, serialized as the SDK reads it.

use super::auth::{self, Authed};
use super::body::{Json, Query};
use super::error::{codes, ApiError};
use super::Api;
use crate::handlers::{self, Executed};
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Router;
use bytes::BytesMut;
use iggy_binary_protocol::codes::*;
use iggy_binary_protocol::requests::consumer_groups::*;
use iggy_binary_protocol::requests::consumer_offsets::*;
use iggy_binary_protocol::requests::partitions::*;
use iggy_binary_protocol::requests::segments::*;
use iggy_binary_protocol::requests::streams::*;
use iggy_binary_protocol::requests::system::*;
use iggy_binary_protocol::requests::topics::*;
use iggy_binary_protocol::requests::users::*;
use iggy_binary_protocol::responses::clients::{ClientDetailsResponse, GetClientsResponse};
use iggy_binary_protocol::responses::consumer_groups::{
    ConsumerGroupDetailsResponse, GetConsumerGroupsResponse,
};
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::responses::streams::{GetStreamResponse, GetStreamsResponse};
use iggy_binary_protocol::responses::system::{ClusterMetadataResponse, StatsResponse};
use iggy_binary_protocol::responses::topics::{GetTopicResponse, GetTopicsResponse};
use iggy_binary_protocol::responses::users::{GetUsersResponse, UserDetailsResponse};
use iggy_binary_protocol::{AckLevel, WireDecode, WireEncode, WireName, WireOptions};
use iggy_common::wire_conversions as wire;
use iggy_common::{Identifier, IggyError};
use std::sync::Arc;

type Result<T> = std::result::Result<T, ApiError>;
type Reply<T> = Result<axum::Json<T>>;

/// Every route; a send's body may be up to `max_body_bytes`.
pub fn routes(max_body_bytes: usize) -> Router<Arc<Api>> {
    Router::new()
        .route("/", get(|| async { "cairn" }))
        .route("/ping", get(|| async { "pong" }))
        .route("/stats", get(stats))
        .route("/clients", get(clients))
        .route("/clients/{client_id}", get(client))
        .route("/cluster/metadata", get(cluster_metadata))
        // A user may be named like these fixed paths (Iggy's route table has the same
        // overlap): their other methods act on that user.
        .route(
            "/users/login",
            post(auth::login)
                .get(|a: Authed| user(a, Path("login".into())))
                .put(|a: Authed, j| update_user(a, Path("login".into()), j))
                .delete(|a: Authed| delete_user(a, Path("login".into()))),
        )
        .route(
            "/users/logout",
            delete(auth::logout)
                .get(|a: Authed| user(a, Path("logout".into())))
                .put(|a: Authed, j| update_user(a, Path("logout".into()), j)),
        )
        .route(
            "/users/refresh-token",
            post(auth::refresh)
                .get(|a: Authed| user(a, Path("refresh-token".into())))
                .put(|a: Authed, j| update_user(a, Path("refresh-token".into()), j))
                .delete(|a: Authed| delete_user(a, Path("refresh-token".into()))),
        )
        .route("/users", get(users).post(create_user))
        .route(
            "/users/{user_id}",
            get(user).put(update_user).delete(delete_user),
        )
        .route("/users/{user_id}/permissions", put(update_permissions))
        .route("/users/{user_id}/password", put(change_password))
        .route("/streams", get(streams).post(create_stream))
        .route(
            "/streams/{stream_id}",
            get(stream).put(update_stream).delete(delete_stream),
        )
        .route("/streams/{stream_id}/purge", delete(purge_stream))
        .route(
            "/streams/{stream_id}/topics",
            get(topics).post(create_topic),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}",
            get(topic).put(update_topic).delete(delete_topic),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/purge",
            delete(purge_topic),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/partitions",
            post(create_partitions).delete(delete_partitions),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/partitions/{partition_id}",
            delete(delete_segments),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/consumer-offsets",
            get(get_offset).put(store_offset),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/consumer-offsets/{consumer_id}",
            delete(delete_offset),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/consumer-groups",
            get(groups).post(create_group),
        )
        .route(
            "/streams/{stream_id}/topics/{topic_id}/consumer-groups/{group_id}",
            get(group).delete(delete_group),
        )
        .merge(super::messages::routes(max_body_bytes))
        .merge(super::tokens::routes())
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

// The three steps ---------------------------------------------------------------------------

/// An `IggyError` from a conversion: the request named something the wire cannot carry.
pub fn invalid(e: IggyError) -> ApiError {
    ApiError::client(e.as_code(), e.to_string())
}

/// A reply that decoded but does not convert to the SDK's model: the server's own fault.
pub fn unconvertible(e: IggyError) -> ApiError {
    broken("a reply of the command layer", e)
}

/// A reply the command layer produced that does not decode: the server's own fault.
fn broken(what: &str, e: impl std::fmt::Display) -> ApiError {
    tracing::error!(what, error = %e, "a reply of the command layer does not decode");
    ApiError::client(codes::ERROR, format!("{what}: {e}"))
        .with_status(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Runs a command and returns its reply body.
pub async fn call(authed: &mut Authed, code: u32, request: &impl WireEncode) -> Result<Vec<u8>> {
    let body = BytesMut::from(&request.to_bytes()[..]);
    match handlers::execute(&mut authed.conn, code, body).await? {
        Executed::Body(body) => Ok(body),
        Executed::Poll(body) => Ok(body.to_vec()),
    }
}

/// A reply body as `T` (all of it).
pub fn decode<T: WireDecode>(body: &[u8]) -> Result<T> {
    let (value, used) = T::decode(body).map_err(|e| broken(std::any::type_name::<T>(), e))?;
    if used != body.len() {
        return Err(broken(std::any::type_name::<T>(), "trailing bytes"));
    }
    Ok(value)
}

/// A reply body as `T`, or 404 when the command found nothing (an empty body).
fn found<T: WireDecode>(body: &[u8], what: &str) -> Result<T> {
    if body.is_empty() {
        return Err(ApiError::not_found(format!("{what} not found")));
    }
    decode(body)
}

/// A path identifier: numeric when it parses as one, a name otherwise (Iggy's rule); a bad
/// one names its path `field`.
pub fn id(field: &str, value: &str) -> Result<iggy_binary_protocol::WireIdentifier> {
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

fn name(value: &str) -> Result<WireName> {
    WireName::new(value).map_err(|_| {
        ApiError::field(
            codes::INVALID_FORMAT,
            "name",
            format!("a name must be 1 to 255 bytes, got {}", value.len()),
        )
    })
}

fn created<T: serde::Serialize>(value: T) -> Response {
    (StatusCode::CREATED, axum::Json(value)).into_response()
}

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

fn string_options(
    raw: std::collections::BTreeMap<String, String>,
    to_wire: impl FnOnce(
        std::collections::BTreeMap<String, String>,
    ) -> std::result::Result<WireOptions, IggyError>,
) -> Result<WireOptions> {
    to_wire(raw).map_err(invalid)
}

// System ------------------------------------------------------------------------------------

async fn stats(mut a: Authed) -> Reply<iggy_common::Stats> {
    let body = call(&mut a, GET_STATS_CODE, &GetStatsRequest).await?;
    Ok(axum::Json(decode::<StatsResponse>(&body)?.into()))
}

async fn clients(mut a: Authed) -> Reply<Vec<iggy_common::ClientInfo>> {
    let body = call(&mut a, GET_CLIENTS_CODE, &GetClientsRequest).await?;
    Ok(axum::Json(wire::clients_from_wire(decode::<
        GetClientsResponse,
    >(&body)?)))
}

async fn client(
    mut a: Authed,
    Path(client_id): Path<String>,
) -> Reply<iggy_common::ClientInfoDetails> {
    let client_id = number("client_id", &client_id)?;
    let body = call(&mut a, GET_CLIENT_CODE, &GetClientRequest { client_id }).await?;
    Ok(axum::Json(
        found::<ClientDetailsResponse>(&body, "client")?.into(),
    ))
}

async fn cluster_metadata(mut a: Authed) -> Reply<iggy_common::ClusterMetadata> {
    let body = call(
        &mut a,
        GET_CLUSTER_METADATA_CODE,
        &GetClusterMetadataRequest,
    )
    .await?;
    let wire = decode::<ClusterMetadataResponse>(&body)?;
    Ok(axum::Json(
        wire::cluster_metadata_from_wire(wire).map_err(unconvertible)?,
    ))
}

// Users -------------------------------------------------------------------------------------

async fn users(mut a: Authed) -> Reply<Vec<iggy_common::UserInfo>> {
    let body = call(&mut a, GET_USERS_CODE, &GetUsersRequest).await?;
    let users = wire::users_from_wire(decode::<GetUsersResponse>(&body)?).map_err(unconvertible)?;
    Ok(axum::Json(users))
}

async fn user(mut a: Authed, Path(user_id): Path<String>) -> Reply<iggy_common::UserInfoDetails> {
    // `/users/me` is the caller (Iggy's alias).
    let user_id = match user_id.as_str() {
        "me" => iggy_binary_protocol::WireIdentifier::numeric(a.claims.user_id),
        other => id("user_id", other)?,
    };
    let request = GetUserRequest { user_id };
    let body = call(&mut a, GET_USER_CODE, &request).await?;
    let details = found::<UserDetailsResponse>(&body, "user")?;
    Ok(axum::Json(details.try_into().map_err(unconvertible)?))
}

async fn create_user(
    mut a: Authed,
    Json(r): Json<iggy_common::create_user::CreateUser>,
) -> Result<Response> {
    let request = CreateUserRequest {
        username: name(&r.username)?,
        password: secrecy::ExposeSecret::expose_secret(&r.password).to_owned(),
        status: r.status.as_code(),
        permissions: r.permissions.as_ref().map(wire::permissions_to_wire),
        options: WireOptions::empty(),
    };
    let body = call(&mut a, CREATE_USER_CODE, &request).await?;
    let details: iggy_common::UserInfoDetails = decode::<UserDetailsResponse>(&body)?
        .try_into()
        .map_err(unconvertible)?;
    Ok(created(details))
}

async fn update_user(
    mut a: Authed,
    Path(user_id): Path<String>,
    Json(r): Json<iggy_common::update_user::UpdateUser>,
) -> Result<Response> {
    let options = string_options(r.options, |raw| {
        iggy_common::UserUpdateOptions { raw }.to_wire()
    })?;
    let request = UpdateUserRequest {
        user_id: id("user_id", &user_id)?,
        username: r.username.as_deref().map(name).transpose()?,
        status: r.status.map(|s| s.as_code()),
        options,
    };
    call(&mut a, UPDATE_USER_CODE, &request).await?;
    Ok(no_content())
}

async fn delete_user(mut a: Authed, Path(user_id): Path<String>) -> Result<Response> {
    let request = DeleteUserRequest {
        user_id: id("user_id", &user_id)?,
    };
    call(&mut a, DELETE_USER_CODE, &request).await?;
    Ok(no_content())
}

async fn update_permissions(
    mut a: Authed,
    Path(user_id): Path<String>,
    Json(r): Json<iggy_common::update_permissions::UpdatePermissions>,
) -> Result<Response> {
    let request = UpdatePermissionsRequest {
        user_id: id("user_id", &user_id)?,
        permissions: r.permissions.as_ref().map(wire::permissions_to_wire),
    };
    call(&mut a, UPDATE_PERMISSIONS_CODE, &request).await?;
    Ok(no_content())
}

async fn change_password(
    mut a: Authed,
    Path(user_id): Path<String>,
    Json(r): Json<iggy_common::change_password::ChangePassword>,
) -> Result<Response> {
    let request = ChangePasswordRequest {
        user_id: id("user_id", &user_id)?,
        current_password: secrecy::ExposeSecret::expose_secret(&r.current_password).to_owned(),
        new_password: secrecy::ExposeSecret::expose_secret(&r.new_password).to_owned(),
    };
    call(&mut a, CHANGE_PASSWORD_CODE, &request).await?;
    Ok(no_content())
}

// Streams -----------------------------------------------------------------------------------

async fn streams(mut a: Authed) -> Reply<Vec<iggy_common::Stream>> {
    let body = call(&mut a, GET_STREAMS_CODE, &GetStreamsRequest).await?;
    let streams =
        wire::streams_from_wire(decode::<GetStreamsResponse>(&body)?).map_err(unconvertible)?;
    Ok(axum::Json(streams))
}

async fn stream(mut a: Authed, Path(stream_id): Path<String>) -> Reply<iggy_common::StreamDetails> {
    let request = GetStreamRequest {
        stream_id: id("stream_id", &stream_id)?,
    };
    let body = call(&mut a, GET_STREAM_CODE, &request).await?;
    let details = found::<GetStreamResponse>(&body, "stream")?;
    Ok(axum::Json(details.try_into().map_err(unconvertible)?))
}

async fn create_stream(
    mut a: Authed,
    Json(r): Json<iggy_common::create_stream::CreateStream>,
) -> Result<Response> {
    let request = CreateStreamRequest {
        name: name(&r.name)?,
        options: WireOptions::empty(),
    };
    let body = call(&mut a, CREATE_STREAM_CODE, &request).await?;
    let details: iggy_common::StreamDetails = decode::<GetStreamResponse>(&body)?
        .try_into()
        .map_err(unconvertible)?;
    Ok(created(details))
}

async fn update_stream(
    mut a: Authed,
    Path(stream_id): Path<String>,
    Json(r): Json<iggy_common::update_stream::UpdateStream>,
) -> Result<Response> {
    let options = string_options(r.options, |raw| {
        iggy_common::StreamUpdateOptions { raw }.to_wire()
    })?;
    let request = UpdateStreamRequest {
        stream_id: id("stream_id", &stream_id)?,
        name: name(&r.name)?,
        options,
    };
    call(&mut a, UPDATE_STREAM_CODE, &request).await?;
    Ok(no_content())
}

async fn delete_stream(mut a: Authed, Path(stream_id): Path<String>) -> Result<Response> {
    let request = DeleteStreamRequest {
        stream_id: id("stream_id", &stream_id)?,
    };
    call(&mut a, DELETE_STREAM_CODE, &request).await?;
    Ok(no_content())
}

async fn purge_stream(mut a: Authed, Path(stream_id): Path<String>) -> Result<Response> {
    let request = PurgeStreamRequest {
        stream_id: id("stream_id", &stream_id)?,
    };
    call(&mut a, PURGE_STREAM_CODE, &request).await?;
    Ok(no_content())
}

// Topics ------------------------------------------------------------------------------------

async fn topics(mut a: Authed, Path(stream_id): Path<String>) -> Reply<Vec<iggy_common::Topic>> {
    let request = GetTopicsRequest {
        stream_id: id("stream_id", &stream_id)?,
    };
    let body = call(&mut a, GET_TOPICS_CODE, &request).await?;
    let topics =
        wire::topics_from_wire(decode::<GetTopicsResponse>(&body)?).map_err(unconvertible)?;
    Ok(axum::Json(topics))
}

async fn topic(
    mut a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
) -> Reply<iggy_common::TopicDetails> {
    let request = GetTopicRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
    };
    let body = call(&mut a, GET_TOPIC_CODE, &request).await?;
    let details = found::<GetTopicResponse>(&body, "topic")?;
    Ok(axum::Json(details.try_into().map_err(unconvertible)?))
}

async fn create_topic(
    mut a: Authed,
    Path(stream_id): Path<String>,
    Json(r): Json<iggy_common::create_topic::CreateTopic>,
) -> Result<Response> {
    let options = iggy_common::TopicCreateOptions {
        partitions_count: Some(r.partitions_count),
        compression_algorithm: Some(r.compression_algorithm),
        message_expiry: Some(r.message_expiry),
        max_topic_size: Some(r.max_topic_size),
        raw: r.options,
        ..Default::default()
    };
    let request = CreateTopicRequest {
        stream_id: id("stream_id", &stream_id)?,
        partitions_count: r.partitions_count,
        name: name(&r.name)?,
        options: options.to_wire().map_err(invalid)?,
    };
    let body = call(&mut a, CREATE_TOPIC_CODE, &request).await?;
    let details: iggy_common::TopicDetails = decode::<GetTopicResponse>(&body)?
        .try_into()
        .map_err(unconvertible)?;
    Ok(created(details))
}

async fn update_topic(
    mut a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Json(r): Json<iggy_common::update_topic::UpdateTopic>,
) -> Result<Response> {
    let options = iggy_common::TopicUpdateOptions {
        compression_algorithm: r.compression_algorithm,
        message_expiry: r.message_expiry,
        max_topic_size: r.max_topic_size,
        raw: r.options,
    };
    let request = UpdateTopicRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        name: name(&r.name)?,
        options: options.to_wire().map_err(invalid)?,
    };
    call(&mut a, UPDATE_TOPIC_CODE, &request).await?;
    Ok(no_content())
}

async fn delete_topic(
    mut a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
) -> Result<Response> {
    let request = DeleteTopicRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
    };
    call(&mut a, DELETE_TOPIC_CODE, &request).await?;
    Ok(no_content())
}

async fn purge_topic(
    mut a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
) -> Result<Response> {
    let request = PurgeTopicRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
    };
    call(&mut a, PURGE_TOPIC_CODE, &request).await?;
    Ok(no_content())
}

// Partitions and segments -----------------------------------------------------------------

async fn create_partitions(
    mut a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Json(r): Json<iggy_common::create_partitions::CreatePartitions>,
) -> Result<Response> {
    let request = CreatePartitionsRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partitions_count: r.partitions_count,
    };
    call(&mut a, CREATE_PARTITIONS_CODE, &request).await?;
    Ok(StatusCode::CREATED.into_response())
}

#[derive(serde::Deserialize)]
struct PartitionsCount {
    partitions_count: u32,
}

async fn delete_partitions(
    mut a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Query(q): Query<PartitionsCount>,
) -> Result<Response> {
    let request = DeletePartitionsRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partitions_count: q.partitions_count,
    };
    call(&mut a, DELETE_PARTITIONS_CODE, &request).await?;
    Ok(no_content())
}

#[derive(serde::Deserialize)]
struct SegmentsCount {
    segments_count: u32,
}

async fn delete_segments(
    mut a: Authed,
    Path((stream_id, topic_id, partition_id)): Path<(String, String, String)>,
    Query(q): Query<SegmentsCount>,
) -> Result<Response> {
    let partition_id = number("partition_id", &partition_id)?;
    let request = DeleteSegmentsRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partition_id,
        segments_count: q.segments_count,
    };
    call(&mut a, DELETE_SEGMENTS_CODE, &request).await?;
    Ok(no_content())
}

// Consumer offsets --------------------------------------------------------------------------

async fn get_offset(
    mut a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Query(q): Query<iggy_common::get_consumer_offset::GetConsumerOffset>,
) -> Reply<iggy_common::ConsumerOffsetInfo> {
    let request = GetConsumerOffsetRequest {
        consumer: wire::consumer_to_wire(&q.consumer).map_err(invalid)?,
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partition_id: q.partition_id,
    };
    let body = call(&mut a, GET_CONSUMER_OFFSET_CODE, &request).await?;
    Ok(axum::Json(
        found::<ConsumerOffsetResponse>(&body, "consumer offset")?.into(),
    ))
}

async fn store_offset(
    mut a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Json(r): Json<iggy_common::store_consumer_offset::StoreConsumerOffset>,
) -> Result<Response> {
    let request = StoreConsumerOffsetRequest {
        consumer: wire::consumer_to_wire(&r.consumer).map_err(invalid)?,
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partition_id: r.partition_id,
        offset: r.offset,
        ack: AckLevel::Quorum,
    };
    call(&mut a, STORE_CONSUMER_OFFSET_CODE, &request).await?;
    Ok(no_content())
}

#[derive(serde::Deserialize)]
struct OffsetPartition {
    partition_id: Option<u32>,
}

async fn delete_offset(
    mut a: Authed,
    Path((stream_id, topic_id, consumer_id)): Path<(String, String, String)>,
    Query(q): Query<OffsetPartition>,
) -> Result<Response> {
    let consumer =
        iggy_common::Consumer::new(Identifier::from_str_value(&consumer_id).map_err(invalid)?);
    let request = DeleteConsumerOffsetRequest {
        consumer: wire::consumer_to_wire(&consumer).map_err(invalid)?,
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partition_id: q.partition_id,
        ack: AckLevel::Quorum,
    };
    call(&mut a, DELETE_CONSUMER_OFFSET_CODE, &request).await?;
    Ok(no_content())
}

// Consumer groups ---------------------------------------------------------------------------

async fn groups(
    mut a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
) -> Reply<Vec<iggy_common::ConsumerGroup>> {
    let request = GetConsumerGroupsRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
    };
    let body = call(&mut a, GET_CONSUMER_GROUPS_CODE, &request).await?;
    let groups = decode::<GetConsumerGroupsResponse>(&body)?;
    Ok(axum::Json(wire::consumer_groups_from_wire(groups)))
}

async fn group(
    mut a: Authed,
    Path((stream_id, topic_id, group_id)): Path<(String, String, String)>,
) -> Reply<iggy_common::ConsumerGroupDetails> {
    let request = GetConsumerGroupRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        group_id: id("group_id", &group_id)?,
    };
    let body = call(&mut a, GET_CONSUMER_GROUP_CODE, &request).await?;
    Ok(axum::Json(
        found::<ConsumerGroupDetailsResponse>(&body, "consumer group")?.into(),
    ))
}

async fn create_group(
    mut a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Json(r): Json<iggy_common::create_consumer_group::CreateConsumerGroup>,
) -> Result<Response> {
    let request = CreateConsumerGroupRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        name: name(&r.name)?,
    };
    let body = call(&mut a, CREATE_CONSUMER_GROUP_CODE, &request).await?;
    let details: iggy_common::ConsumerGroupDetails =
        decode::<ConsumerGroupDetailsResponse>(&body)?.into();
    Ok(created(details))
}

async fn delete_group(
    mut a: Authed,
    Path((stream_id, topic_id, group_id)): Path<(String, String, String)>,
) -> Result<Response> {
    let request = DeleteConsumerGroupRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        group_id: id("group_id", &group_id)?,
    };
    call(&mut a, DELETE_CONSUMER_GROUP_CODE, &request).await?;
    Ok(no_content())
}

//! Streams, their topics, a topic's partitions and a partition's segments.

use super::auth::Authed;
use super::body::{Json, Query};
use super::resource::{
    created, done, entity_name, found, id, invalid, no_content, number, reply, string_options,
    unconvertible, Reply, Result,
};
use crate::command::Command;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_engine::node::ops::MetaOp;
use iggy_binary_protocol::requests::partitions::{
    CreatePartitionsRequest, DeletePartitionsRequest,
};
use iggy_binary_protocol::requests::segments::DeleteSegmentsRequest;
use iggy_binary_protocol::requests::streams::{
    CreateStreamRequest, DeleteStreamRequest, GetStreamRequest, PurgeStreamRequest,
    UpdateStreamRequest,
};
use iggy_binary_protocol::requests::topics::{
    CreateTopicRequest, DeleteTopicRequest, GetTopicRequest, GetTopicsRequest, PurgeTopicRequest,
    UpdateTopicRequest,
};
use iggy_binary_protocol::WireOptions;
use iggy_common::wire_conversions as wire;

async fn meta(a: &Authed, op: MetaOp) -> Result<()> {
    done(a, Command::Meta(op)).await
}

// Streams -----------------------------------------------------------------------------------

pub async fn list(a: Authed) -> Reply<Vec<iggy_common::Stream>> {
    let streams = reply!(a.run(Command::GetStreams).await?, Streams);
    Ok(axum::Json(
        wire::streams_from_wire(streams).map_err(unconvertible)?,
    ))
}

pub async fn get(a: Authed, Path(stream_id): Path<String>) -> Reply<iggy_common::StreamDetails> {
    let command = Command::GetStream(GetStreamRequest {
        stream_id: id("stream_id", &stream_id)?,
    });
    let details = found!(a.run(command).await?, Stream, "stream");
    Ok(axum::Json(details.try_into().map_err(unconvertible)?))
}

pub async fn create(
    a: Authed,
    Json(r): Json<iggy_common::create_stream::CreateStream>,
) -> Result<Response> {
    let op = MetaOp::CreateStream(CreateStreamRequest {
        name: entity_name(&r.name)?,
        options: WireOptions::empty(),
    });
    let stream = reply!(a.run(Command::Meta(op)).await?, Stream);
    let details: iggy_common::StreamDetails = stream.try_into().map_err(unconvertible)?;
    Ok(created(details))
}

pub async fn update(
    a: Authed,
    Path(stream_id): Path<String>,
    Json(r): Json<iggy_common::update_stream::UpdateStream>,
) -> Result<Response> {
    let options = string_options(r.options, |raw| {
        iggy_common::StreamUpdateOptions { raw }.to_wire()
    })?;
    let op = MetaOp::UpdateStream(UpdateStreamRequest {
        stream_id: id("stream_id", &stream_id)?,
        name: entity_name(&r.name)?,
        options,
    });
    meta(&a, op).await?;
    Ok(no_content())
}

pub async fn delete(a: Authed, Path(stream_id): Path<String>) -> Result<Response> {
    let op = MetaOp::DeleteStream(DeleteStreamRequest {
        stream_id: id("stream_id", &stream_id)?,
    });
    meta(&a, op).await?;
    Ok(no_content())
}

pub async fn purge(a: Authed, Path(stream_id): Path<String>) -> Result<Response> {
    let op = MetaOp::PurgeStream(PurgeStreamRequest {
        stream_id: id("stream_id", &stream_id)?,
    });
    meta(&a, op).await?;
    Ok(no_content())
}

// Topics ------------------------------------------------------------------------------------

pub async fn topics(a: Authed, Path(stream_id): Path<String>) -> Reply<Vec<iggy_common::Topic>> {
    let command = Command::GetTopics(GetTopicsRequest {
        stream_id: id("stream_id", &stream_id)?,
    });
    let topics = reply!(a.run(command).await?, Topics);
    Ok(axum::Json(
        wire::topics_from_wire(topics).map_err(unconvertible)?,
    ))
}

pub async fn topic(
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
) -> Reply<iggy_common::TopicDetails> {
    let command = Command::GetTopic(GetTopicRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
    });
    let details = found!(a.run(command).await?, Topic, "topic");
    Ok(axum::Json(details.try_into().map_err(unconvertible)?))
}

pub async fn create_topic(
    a: Authed,
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
    let op = MetaOp::CreateTopic(CreateTopicRequest {
        stream_id: id("stream_id", &stream_id)?,
        partitions_count: r.partitions_count,
        name: entity_name(&r.name)?,
        options: options.to_wire().map_err(invalid)?,
    });
    let topic = reply!(a.run(Command::Meta(op)).await?, Topic);
    let details: iggy_common::TopicDetails = topic.try_into().map_err(unconvertible)?;
    Ok(created(details))
}

pub async fn update_topic(
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Json(r): Json<iggy_common::update_topic::UpdateTopic>,
) -> Result<Response> {
    let options = iggy_common::TopicUpdateOptions {
        compression_algorithm: r.compression_algorithm,
        message_expiry: r.message_expiry,
        max_topic_size: r.max_topic_size,
        raw: r.options,
    };
    let op = MetaOp::UpdateTopic(UpdateTopicRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        name: entity_name(&r.name)?,
        options: options.to_wire().map_err(invalid)?,
    });
    meta(&a, op).await?;
    Ok(no_content())
}

pub async fn delete_topic(
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
) -> Result<Response> {
    let op = MetaOp::DeleteTopic(DeleteTopicRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
    });
    meta(&a, op).await?;
    Ok(no_content())
}

pub async fn purge_topic(
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
) -> Result<Response> {
    let op = MetaOp::PurgeTopic(PurgeTopicRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
    });
    meta(&a, op).await?;
    Ok(no_content())
}

// Partitions and segments -----------------------------------------------------------------

pub async fn create_partitions(
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Json(r): Json<iggy_common::create_partitions::CreatePartitions>,
) -> Result<Response> {
    let op = MetaOp::CreatePartitions(CreatePartitionsRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partitions_count: r.partitions_count,
    });
    meta(&a, op).await?;
    Ok(StatusCode::CREATED.into_response())
}

#[derive(serde::Deserialize)]
pub struct PartitionsCount {
    partitions_count: u32,
}

pub async fn delete_partitions(
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Query(q): Query<PartitionsCount>,
) -> Result<Response> {
    let op = MetaOp::DeletePartitions(DeletePartitionsRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partitions_count: q.partitions_count,
    });
    meta(&a, op).await?;
    Ok(no_content())
}

#[derive(serde::Deserialize)]
pub struct SegmentsCount {
    segments_count: u32,
}

pub async fn delete_segments(
    a: Authed,
    Path((stream_id, topic_id, partition_id)): Path<(String, String, String)>,
    Query(q): Query<SegmentsCount>,
) -> Result<Response> {
    let command = Command::DeleteSegments(DeleteSegmentsRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partition_id: number("partition_id", &partition_id)?,
        segments_count: q.segments_count,
    });
    done(&a, command).await?;
    Ok(no_content())
}

//! Consumer offsets and consumer groups. Joining and leaving a group are not HTTP routes
//! (the SDK's HTTP transport answers them "feature unavailable" itself).

use super::auth::Authed;
use super::body::{Json, Query};
use super::resource::{
    created, done, entity_name, found, id, invalid, no_content, reply, Reply, Result,
};
use crate::command::Command;
use axum::extract::Path;
use axum::response::Response;
use cairn_engine::node::ops::MetaOp;
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest, GetConsumerGroupRequest,
    GetConsumerGroupsRequest,
};
use iggy_binary_protocol::requests::consumer_offsets::{
    DeleteConsumerOffsetRequest, GetConsumerOffsetRequest, StoreConsumerOffsetRequest,
};
use iggy_binary_protocol::AckLevel;
use iggy_common::wire_conversions as wire;
use iggy_common::Identifier;

// Consumer offsets --------------------------------------------------------------------------

pub async fn get_offset(
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Query(q): Query<iggy_common::get_consumer_offset::GetConsumerOffset>,
) -> Reply<iggy_common::ConsumerOffsetInfo> {
    let command = Command::GetConsumerOffset(GetConsumerOffsetRequest {
        consumer: wire::consumer_to_wire(&q.consumer).map_err(invalid)?,
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partition_id: q.partition_id,
    });
    let offset = found!(a.run(command).await?, ConsumerOffset, "consumer offset");
    Ok(axum::Json(offset.into()))
}

pub async fn store_offset(
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Json(r): Json<iggy_common::store_consumer_offset::StoreConsumerOffset>,
) -> Result<Response> {
    let command = Command::StoreConsumerOffset(StoreConsumerOffsetRequest {
        consumer: wire::consumer_to_wire(&r.consumer).map_err(invalid)?,
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partition_id: r.partition_id,
        offset: r.offset,
        ack: AckLevel::Quorum,
    });
    done(&a, command).await?;
    Ok(no_content())
}

#[derive(serde::Deserialize)]
pub struct OffsetPartition {
    partition_id: Option<u32>,
}

pub async fn delete_offset(
    a: Authed,
    Path((stream_id, topic_id, consumer_id)): Path<(String, String, String)>,
    Query(q): Query<OffsetPartition>,
) -> Result<Response> {
    let consumer =
        iggy_common::Consumer::new(Identifier::from_str_value(&consumer_id).map_err(invalid)?);
    let command = Command::DeleteConsumerOffset(DeleteConsumerOffsetRequest {
        consumer: wire::consumer_to_wire(&consumer).map_err(invalid)?,
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        partition_id: q.partition_id,
        ack: AckLevel::Quorum,
    });
    done(&a, command).await?;
    Ok(no_content())
}

// Consumer groups ---------------------------------------------------------------------------

pub async fn groups(
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
) -> Reply<Vec<iggy_common::ConsumerGroup>> {
    let command = Command::GetConsumerGroups(GetConsumerGroupsRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
    });
    let groups = reply!(a.run(command).await?, Groups);
    Ok(axum::Json(wire::consumer_groups_from_wire(groups)))
}

pub async fn group(
    a: Authed,
    Path((stream_id, topic_id, group_id)): Path<(String, String, String)>,
) -> Reply<iggy_common::ConsumerGroupDetails> {
    let command = Command::GetConsumerGroup(GetConsumerGroupRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        group_id: id("group_id", &group_id)?,
    });
    let group = found!(a.run(command).await?, Group, "consumer group");
    Ok(axum::Json(group.into()))
}

pub async fn create_group(
    a: Authed,
    Path((stream_id, topic_id)): Path<(String, String)>,
    Json(r): Json<iggy_common::create_consumer_group::CreateConsumerGroup>,
) -> Result<Response> {
    let op = MetaOp::CreateConsumerGroup(CreateConsumerGroupRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        name: entity_name(&r.name)?,
    });
    let group = reply!(a.run(Command::Meta(op)).await?, Group);
    let details: iggy_common::ConsumerGroupDetails = group.into();
    Ok(created(details))
}

pub async fn delete_group(
    a: Authed,
    Path((stream_id, topic_id, group_id)): Path<(String, String, String)>,
) -> Result<Response> {
    let op = MetaOp::DeleteConsumerGroup(DeleteConsumerGroupRequest {
        stream_id: id("stream_id", &stream_id)?,
        topic_id: id("topic_id", &topic_id)?,
        group_id: id("group_id", &group_id)?,
    });
    done(&a, Command::Meta(op)).await?;
    Ok(no_content())
}

//! Reply bodies built from the published view and the shards' partition numbers, as the
//! codec's response types (`docs/wire.md` §5.1). Pure: the numbers are gathered by the caller.

use cairn_engine::node::state::{Stream, Topic, User};
use cairn_engine::node::PartitionInfo;
use cairn_engine::state::options::{Compression, TopicOptions};
use iggy_binary_protocol::responses::consumer_groups::ConsumerGroupResponse;
use iggy_binary_protocol::responses::consumer_groups::{
    ConsumerGroupDetailsResponse, ConsumerGroupMemberResponse,
};
use iggy_binary_protocol::responses::streams::StreamResponse;
use iggy_binary_protocol::responses::streams::{GetStreamResponse, TopicHeader};
use iggy_binary_protocol::responses::topics::{GetTopicResponse, PartitionResponse};
use iggy_binary_protocol::responses::users::UserDetailsResponse;
use iggy_binary_protocol::responses::users::UserResponse;
use iggy_binary_protocol::{WireDecode, WireName, WireOptions, WirePermissions};
use std::collections::BTreeMap;

/// The numbers of one partition a reply shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionNumbers {
    pub segments: u32,
    pub current_offset: u64,
    pub messages: u64,
    pub size_bytes: u64,
}

impl PartitionNumbers {
    pub fn of(info: &PartitionInfo) -> PartitionNumbers {
        let next = info.visible_next_offset.unwrap_or(info.log_start);
        PartitionNumbers {
            segments: u32::try_from(info.segment_starts.len()).unwrap_or(u32::MAX),
            current_offset: info.current_offset().unwrap_or(0),
            messages: next.saturating_sub(info.log_start),
            size_bytes: info.stored_bytes,
        }
    }
}

/// Partition numbers by (stream, topic, partition).
pub type Numbers = BTreeMap<(u32, u32, u32), PartitionNumbers>;

fn wire_name(name: &str) -> WireName {
    WireName::new(name).expect("stored names are valid wire names")
}

fn topic_totals(stream: u32, topic: &Topic, numbers: &Numbers) -> (u64, u64) {
    topic.partitions.keys().fold((0, 0), |(size, messages), p| {
        let n = numbers
            .get(&(stream, topic.id, *p))
            .copied()
            .unwrap_or_default();
        (size + n.size_bytes, messages + n.messages)
    })
}

pub fn topic_header(stream: u32, topic: &Topic, numbers: &Numbers) -> TopicHeader {
    let (size_bytes, messages_count) = topic_totals(stream, topic, numbers);
    let options = &topic.options;
    TopicHeader {
        id: topic.id,
        created_at: topic.created_at,
        partitions_count: u32::try_from(topic.partitions.len()).expect("bounded"),
        message_expiry: if options.message_expiry == 0 {
            u64::MAX
        } else {
            options.message_expiry
        },
        compression_algorithm: match options.compression {
            Compression::None => 1,
            Compression::Gzip => 2,
        },
        max_topic_size: if options.max_topic_size == 0 {
            u64::MAX
        } else {
            options.max_topic_size
        },
        size_bytes,
        messages_count,
        name: wire_name(&topic.name),
        options: options_block(&topic.options, true),
        derived_options: options_block(&topic.options, false),
    }
}

/// A topic's options as Iggy reports them: every option's effective value, the ones a
/// request named (`explicit`) in one block, the ones filled from defaults in the other.
fn options_block(options: &TopicOptions, explicit: bool) -> WireOptions {
    let entries: Vec<_> = options
        .effective()
        .into_iter()
        .filter(|e| e.explicit == explicit)
        .collect();
    let tlv: Vec<(u8, &[u8], u8, &[u8])> = entries
        .iter()
        .map(|e| (STRING_KIND, e.key.as_bytes(), e.kind, e.value.as_slice()))
        .collect();
    let mut block = bytes::BytesMut::new();
    iggy_binary_protocol::primitives::user_headers::encode_user_headers(&tlv, &mut block);
    WireOptions::from_bytes(block.freeze()).expect("a topic's options encode as a valid block")
}

/// The option block's kind of a key (a string, as `iggy_common`'s `HeaderKind::String`).
const STRING_KIND: u8 = 2;

pub fn stream_response(stream: &Stream, numbers: &Numbers) -> StreamResponse {
    let (size_bytes, messages_count) = stream
        .topics
        .values()
        .map(|t| topic_totals(stream.id, t, numbers))
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    StreamResponse {
        id: stream.id,
        created_at: stream.created_at,
        topics_count: u32::try_from(stream.topics.len()).expect("bounded"),
        size_bytes,
        messages_count,
        name: wire_name(&stream.name),
        options: WireOptions::empty(),
    }
}

pub fn get_stream(stream: &Stream, numbers: &Numbers) -> GetStreamResponse {
    GetStreamResponse {
        stream: stream_response(stream, numbers),
        topics: stream
            .topics
            .values()
            .map(|t| topic_header(stream.id, t, numbers))
            .collect(),
    }
}

pub fn get_topic(stream: u32, topic: &Topic, numbers: &Numbers) -> GetTopicResponse {
    GetTopicResponse {
        topic: topic_header(stream, topic, numbers),
        partitions: topic
            .partitions
            .values()
            .map(|p| {
                let n = numbers
                    .get(&(stream, topic.id, p.id))
                    .copied()
                    .unwrap_or_default();
                PartitionResponse {
                    id: p.id,
                    created_at: p.created_at,
                    segments_count: n.segments,
                    current_offset: n.current_offset,
                    size_bytes: n.size_bytes,
                    messages_count: n.messages,
                }
            })
            .collect(),
    }
}

/// A group with its members: (member id, partitions) each.
pub fn group_details(
    id: u32,
    name: &str,
    partitions: u32,
    members: Vec<(u32, Vec<u32>)>,
) -> ConsumerGroupDetailsResponse {
    ConsumerGroupDetailsResponse {
        group: ConsumerGroupResponse {
            id,
            partitions_count: partitions,
            members_count: u32::try_from(members.len()).expect("bounded"),
            name: wire_name(name),
        },
        members: members
            .into_iter()
            .map(|(id, partitions)| ConsumerGroupMemberResponse {
                id,
                partitions_count: u32::try_from(partitions.len()).expect("bounded"),
                partitions,
            })
            .collect(),
    }
}

pub fn user_response(user: &User) -> UserResponse {
    UserResponse {
        id: user.id,
        created_at: user.created_at,
        status: user.status,
        username: wire_name(&user.username),
        options: WireOptions::empty(),
    }
}

pub fn user_details(user: &User) -> UserDetailsResponse {
    UserDetailsResponse {
        user: user_response(user),
        permissions: user
            .permissions
            .as_ref()
            .and_then(|bytes| WirePermissions::decode(bytes).ok().map(|(p, _)| p)),
    }
}

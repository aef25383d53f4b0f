//! The server's deliberate bugs (see `cairn_engine::canary` for the names and the switch),
//! reached only through [`crate::canary_seam`]. Compiled only with the `canary` feature.

use crate::tcp::dedup::{Dedup, DedupKey};
use bytes::{Bytes, BytesMut};
use cairn_engine::env::Tasks;
use cairn_engine::node::Client;
use iggy_binary_protocol::HEADER_SIZE;
use iggy_binary_protocol::{
    WireGlobalPermissions, WireIdentifier, WirePartitioning, WirePermissions,
};

/// `ack-send-before-shard`: the send runs in the background; the answer names the partition
/// asked for (or 0) at offset 0, without waiting.
pub(crate) fn send_in_background(
    node: &Client,
    tasks: &dyn Tasks,
    stream: &WireIdentifier,
    topic: &WireIdentifier,
    partitioning: &WirePartitioning,
    batch: BytesMut,
) -> (u32, u64) {
    let partition = match partitioning {
        WirePartitioning::PartitionId(p) => *p,
        _ => 0,
    };
    let (node, stream, topic, partitioning) = (
        node.clone(),
        stream.clone(),
        topic.clone(),
        partitioning.clone(),
    );
    tasks.spawn(Box::pin(async move {
        let _ = node.send(&stream, &topic, &partitioning, batch).await;
    }));
    (partition, 0)
}

/// `dedup-wrong-reply`: the newest other reply of the session, reframed for this request.
pub(crate) fn another_reply(
    dedup: &Dedup,
    key: &DedupKey,
    reframe: &dyn Fn(&[u8]) -> Bytes,
) -> Option<Bytes> {
    let other = dedup.newest_except(key)?;
    Some(reframe(&other[HEADER_SIZE.min(other.len())..]))
}

/// `session-outlives-user`: what the session had at login, at its widest.
pub(crate) fn everything() -> WirePermissions {
    WirePermissions {
        global: WireGlobalPermissions {
            manage_servers: true,
            read_servers: true,
            manage_users: true,
            read_users: true,
            manage_streams: true,
            read_streams: true,
            manage_topics: true,
            read_topics: true,
            poll_messages: true,
            send_messages: true,
        },
        streams: Vec::new(),
    }
}

//! The server's canaries, through its hooks: an awaited send answered before the shard's
//! reply, a retried request answered with another request's reply, a session that outlives
//! its user, request bodies read without their room in the byte budget.

use bytes::{Bytes, BytesMut};
use cairn_engine::env::Tasks;
use cairn_engine::node::{Client, NodeResult};
use cairn_server::command::hooks::{BodyRoomHook, PermissionsHook, SendHook, SessionCheckHook};
use cairn_server::command::{Landed, Revoked};
use cairn_server::tcp::dedup::{Dedup, DedupHitHook, DedupKey};
use iggy_binary_protocol::HEADER_SIZE;
use iggy_binary_protocol::{
    WireGlobalPermissions, WireIdentifier, WirePartitioning, WirePermissions,
};

/// `ack-send-before-shard` answers every awaited send itself.
pub fn send_hook(name: &str) -> Option<SendHook> {
    match name {
        "ack-send-before-shard" => Some(send_in_background),
        _ => None,
    }
}

/// `bodies-unbudgeted` reads every request body without taking its room in the byte
/// budget first: bodies are charged as they come, however many (the budget invariant).
pub fn body_room_hook(name: &str) -> Option<BodyRoomHook> {
    match name {
        "bodies-unbudgeted" => Some(|_| true),
        _ => None,
    }
}

/// `dedup-wrong-reply` answers a retried request with another request's reply.
pub fn dedup_hit_hook(name: &str) -> Option<DedupHitHook> {
    match name {
        "dedup-wrong-reply" => Some(another_reply),
        _ => None,
    }
}

/// `session-outlives-user` keeps a session whose user was deleted...
pub fn session_check_hook(name: &str) -> Option<SessionCheckHook> {
    match name {
        "session-outlives-user" => Some(|judged| match judged {
            Err(Revoked::Deleted) => Ok(()),
            other => other,
        }),
        _ => None,
    }
}

/// ...and gives it every permission once its user is gone.
pub fn permissions_hook(name: &str) -> Option<PermissionsHook> {
    match name {
        "session-outlives-user" => Some(|found, user_exists| {
            if user_exists {
                found
            } else {
                Some(everything())
            }
        }),
        _ => None,
    }
}

/// The send runs in the background; the answer names the partition asked for (or 0) at
/// offset 0, without waiting.
fn send_in_background(
    node: &Client,
    tasks: &dyn Tasks,
    stream: &WireIdentifier,
    topic: &WireIdentifier,
    partitioning: &WirePartitioning,
    batch: BytesMut,
) -> NodeResult<Landed> {
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
    Ok(Landed {
        partition,
        base_offset: 0,
        durable: false,
    })
}

/// The newest other reply of the session, reframed for this request (the cached one when
/// there is no other).
fn another_reply(
    dedup: &Dedup,
    key: &DedupKey,
    cached: Bytes,
    reframe: &dyn Fn(&[u8]) -> Bytes,
) -> Bytes {
    match dedup.newest_except(key) {
        Some(other) => reframe(&other[HEADER_SIZE.min(other.len())..]),
        None => cached,
    }
}

/// What the session had at login, at its widest.
fn everything() -> WirePermissions {
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

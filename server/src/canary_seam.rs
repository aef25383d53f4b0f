//! Where the server meets the deliberate bugs of [`crate::canary`]: each seam is the
//! production behaviour unless the `canary` feature is built and a server canary is active
//! on this thread. The handlers hold no canary toggles of their own.
//!
//! - [`send`]: a send's answer comes from the node's shard;
//! - [`dedup_hit`]: a retried request's cached reply, by its own identity;
//! - [`session_check`]: whether a session's user still holds;
//! - [`permissions`]: the permissions a session acts with.

use crate::command::{Landed, Revoked};
use crate::tcp::dedup::{Dedup, DedupKey};
use bytes::{Bytes, BytesMut};
use cairn_engine::env::Tasks;
use cairn_engine::node::{Client, NodeResult};
use iggy_binary_protocol::{WireIdentifier, WirePartitioning, WirePermissions};

/// A send's landing, once the node answered it.
pub(crate) async fn send(
    node: &Client,
    tasks: &dyn Tasks,
    stream: &WireIdentifier,
    topic: &WireIdentifier,
    partitioning: &WirePartitioning,
    batch: BytesMut,
) -> NodeResult<Landed> {
    #[cfg(feature = "canary")]
    if cairn_engine::canary::active("ack-send-before-shard") {
        let (partition, base_offset) =
            crate::canary::send_in_background(node, tasks, stream, topic, partitioning, batch);
        return Ok(Landed {
            partition,
            base_offset,
            durable: false,
        });
    }
    let _ = tasks;
    let sent = node.send(stream, topic, partitioning, batch).await?;
    Ok(Landed {
        partition: sent.partition,
        base_offset: sent.ack.base_offset,
        durable: sent.ack.durable,
    })
}

/// The cached reply of the request `key`, if the session answered it; `reframe` builds a
/// reply frame for this request from another reply's body (used only by a canary).
pub(crate) fn dedup_hit(
    dedup: &Dedup,
    key: &DedupKey,
    reframe: &dyn Fn(&[u8]) -> Bytes,
) -> Option<Bytes> {
    let cached = dedup.get(key)?;
    #[cfg(feature = "canary")]
    if cairn_engine::canary::active("dedup-wrong-reply") {
        return Some(crate::canary::another_reply(dedup, key, reframe).unwrap_or(cached));
    }
    let _ = reframe;
    Some(cached)
}

/// Whether the session's user still holds, as [`crate::command::Session::still_valid`]
/// judged it.
pub(crate) fn session_check(judged: Result<(), Revoked>) -> Result<(), Revoked> {
    #[cfg(feature = "canary")]
    if cairn_engine::canary::active("session-outlives-user") && judged == Err(Revoked::Deleted) {
        return Ok(());
    }
    judged
}

/// The permissions of a session's user as the view holds them (`user_exists`: the user is
/// in the view at all).
pub(crate) fn permissions(
    found: Option<WirePermissions>,
    user_exists: bool,
) -> Option<WirePermissions> {
    #[cfg(feature = "canary")]
    if cairn_engine::canary::active("session-outlives-user") && !user_exists {
        return Some(crate::canary::everything());
    }
    let _ = user_exists;
    found
}

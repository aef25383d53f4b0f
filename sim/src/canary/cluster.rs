//! Canaries of the cluster's replicas.

use cairn_cluster::group::{IncarnationHook, ReadIndexHook, RekeyHook};
use cairn_cluster::net::AddressedHook;
use cairn_cluster::types::member_of;
use std::sync::Arc;

/// `vote-after-lost-state`: every replica of a member is incarnation 1, so a replica that
/// lost its state comes back as the Raft node it was, with no vote and no log.
pub fn incarnation_hook(name: &str) -> Option<IncarnationHook> {
    match name {
        "vote-after-lost-state" => Some(Arc::new(|_member| 1)),
        _ => None,
    }
}

/// `apply-uncommitted`: a replica's state machine applies the entries of every append a
/// leader sends as they arrive, before they commit.
pub fn applies_uncommitted(name: &str) -> bool {
    name == "apply-uncommitted"
}

/// `retry-rekeyed`: a member draws a new key for each attempt of an op, so an attempt
/// whose fate it could not learn, made again, applies a second time.
pub fn rekey_hook(name: &str) -> Option<RekeyHook> {
    match name {
        "retry-rekeyed" => Some(Arc::new(|key, attempt| {
            (key ^ u128::from(attempt) << 96).max(1)
        })),
        _ => None,
    }
}

/// `read-stale`: a member reads after applying its first entry, not the leader's read
/// index, so a fresh read misses ops the cluster acknowledged.
pub fn read_index_hook(name: &str) -> Option<ReadIndexHook> {
    match name {
        "read-stale" => Some(Arc::new(|_| 1)),
        _ => None,
    }
}

/// `blank-counted`: a replica answers requests meant for any replica of its member, so a
/// blank one stands in for the one it was: it votes with no memory of its vote and its
/// appends count toward the quorum.
pub fn addressed_hook(name: &str) -> Option<AddressedHook> {
    match name {
        "blank-counted" => Some(Arc::new(|to, me| member_of(to) == member_of(me))),
        _ => None,
    }
}

/// `part-stamp-local-clock`: a replica stamps each committed send with its own clock's
/// reading when it applies it, instead of its leader's, so replicas hold different bytes
/// (timestamps) at the same offsets.
pub fn stamp_hook(
    name: &str,
    clock: Arc<dyn cairn_engine::env::Clock>,
) -> Option<cairn_cluster::partition::machine::StampHook> {
    match name {
        "part-stamp-local-clock" => Some(Arc::new(move |_leader| clock.wall_micros())),
        _ => None,
    }
}

//! Canaries of the cluster's replicas.

use cairn_cluster::group::IncarnationHook;
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

/// `blank-counted`: a replica answers requests meant for any replica of its member, so a
/// blank one stands in for the one it was: it votes with no memory of its vote and its
/// appends count toward the quorum.
pub fn addressed_hook(name: &str) -> Option<AddressedHook> {
    match name {
        "blank-counted" => Some(Arc::new(|to, me| member_of(to) == member_of(me))),
        _ => None,
    }
}

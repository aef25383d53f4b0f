//! Canaries of the cluster's replicas.

use cairn_cluster::group::IncarnationHook;
use std::sync::Arc;

/// `vote-after-lost-state`: every replica of a member is incarnation 1, so a replica that
/// lost its state comes back as the Raft node it was, with no vote and no log.
pub fn incarnation_hook(name: &str) -> Option<IncarnationHook> {
    match name {
        "vote-after-lost-state" => Some(Arc::new(|_member| 1)),
        _ => None,
    }
}

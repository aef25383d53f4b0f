//! The canaries in the node's owners: a shard's moments after a persist and when one of
//! the persists it runs at once returned, the metadata owner's moment between writing a
//! batch's journal entries and syncing them.

use cairn_engine::node::{
    AfterPersistHook, BeforeMetadataSyncHook, PersistReturnedHook, RecordReturnedHook,
    StoreWaitsHook,
};

/// The canaries of this module (the node world's directed scenarios are their hunt too).
pub const NAMES: [&str; 5] = [
    "ack-late-joiners",
    "ack-with-first-persist",
    "ack-before-log-sync",
    "ack-offset-before-dir-sync",
    "publish-before-sync",
];

/// `ack-late-joiners`: the shard takes every request that arrived while its persist ran
/// and answers their sends as covered by it.
pub fn after_persist_hook(name: &str) -> Option<AfterPersistHook> {
    match name {
        "ack-late-joiners" => Some(|take| while take() {}),
        _ => None,
    }
}

/// `ack-with-first-persist`: when the first of a round's persists run at once returns, the
/// shard answers the sends of those still in flight as durable too.
pub fn persist_returned_hook(name: &str) -> Option<PersistReturnedHook> {
    match name {
        "ack-with-first-persist" => Some(|in_flight| in_flight > 0),
        _ => None,
    }
}

/// `ack-before-log-sync`: when a partition's record returns while its next group's log
/// sync is still out, the shard answers that group's sends as durable too.
pub fn record_returned_hook(name: &str) -> Option<RecordReturnedHook> {
    match name {
        "ack-before-log-sync" => Some(|syncing| syncing > 0),
        _ => None,
    }
}

/// `publish-before-sync`: the metadata owner publishes the batch's view before its journal
/// entries are synced.
pub fn before_metadata_sync_hook(name: &str) -> Option<BeforeMetadataSyncHook> {
    match name {
        "publish-before-sync" => Some(|publish| publish()),
        _ => None,
    }
}

/// `ack-offset-before-dir-sync`: a `persisted` offset store that waits for its round's
/// directory sync is answered at once.
pub fn store_waits_hook(name: &str) -> Option<StoreWaitsHook> {
    match name {
        "ack-offset-before-dir-sync" => Some(|| true),
        _ => None,
    }
}

//! Deliberate bugs that prove the simulator has teeth. Compiled only with the `canary`
//! feature (never in the production build); at most one is active, chosen by name.
//!
//! - `ack-before-sync`: a `persisted` group is acknowledged after its write, before the sync;
//! - `no-dir-sync`: a new segment's directory entry is never synced;
//! - `truncate-at-first-bad`: recovery truncates at the first bad batch even below the
//!   durable end (where valid, acknowledged batches follow);
//! - `trust-stale-index`: recovery keeps index entries without checking them against the log.

use std::sync::Mutex;

pub const NAMES: [&str; 4] = [
    "ack-before-sync",
    "no-dir-sync",
    "truncate-at-first-bad",
    "trust-stale-index",
];

static ACTIVE: Mutex<Option<&'static str>> = Mutex::new(None);

/// Activates the canary `name` (or none). Returns false for an unknown name.
pub fn activate(name: Option<&str>) -> bool {
    let found = match name {
        None => None,
        Some(name) => match NAMES.iter().find(|n| **n == name) {
            Some(n) => Some(*n),
            None => return false,
        },
    };
    *ACTIVE.lock().expect("canary lock") = found;
    true
}

/// Whether the canary `name` is active.
pub fn active(name: &str) -> bool {
    *ACTIVE.lock().expect("canary lock") == Some(name)
}

//! The canaries in a poll's read plan (`cairn_engine::partition::read_plan`), installed
//! through the partition's read hooks:
//! - `read-above-visible`: a plan serves up to the journal's end instead of the visible
//!   end, so a `persisted` poll reads sends not yet durable (a crash may take them back);
//! - `serve-unverified-skip`: a walk that skipped batches by their headers serves the batch
//!   it stops at without verifying it, so damaged bytes reach a consumer.

use cairn_engine::partition::ReadHooks;

/// The read canaries (the node world's directed scenarios run for them too).
pub const NAMES: [&str; 2] = ["read-above-visible", "serve-unverified-skip"];

/// The read hooks of canary `name` (production's for any other).
pub fn read_hooks(name: Option<&str>) -> ReadHooks {
    match name {
        Some("read-above-visible") => ReadHooks {
            read_end: Some(|_visible, journal_end| journal_end),
            skip_unverified: false,
        },
        Some("serve-unverified-skip") => ReadHooks {
            read_end: None,
            skip_unverified: true,
        },
        _ => ReadHooks::default(),
    }
}

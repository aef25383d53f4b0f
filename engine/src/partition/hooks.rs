//! Optional hooks into a partition's recovery and writes (TigerBeetle's `on_checkpoint`
//! style), given to [`super::Partition::open_with_hooks`] (the node's come from
//! `NodeSettings::hooks`): every one is `None` in production, where the partition follows its
//! own rules untouched. The simulator sets them to install its deliberate bugs
//! (`cairn_sim::canary`), which its oracle must catch; nothing here knows any bug.
//!
//! - [`PartitionHooks::recovery_verdict`]: recovery's verdict, after `decide` and before
//!   `apply` acts on it;
//! - [`PartitionHooks::recovery_disk`]: the disk recovery's `apply` writes through;
//! - [`PartitionHooks::log_disk`]: the disk an open log writes through;
//! - [`PartitionHooks::read`]: what a poll's read plan may serve.

pub use super::recovery::VerdictHook;
use crate::env::{Disk, DiskHook};
use std::sync::Arc;

/// A partition's hooks; [`Default`] is production (none).
#[derive(Clone, Copy, Default)]
pub struct PartitionHooks {
    pub recovery_verdict: Option<VerdictHook>,
    pub recovery_disk: Option<DiskHook>,
    pub log_disk: Option<DiskHook>,
    pub read: ReadHooks,
}

/// The end a read plan serves up to, bent: `(visible end, journal end)` → the plan's end.
pub type ReadEndHook = fn(u64, u64) -> u64;

/// Hooks into a poll's read plan ([`crate::partition::read_plan`]).
#[derive(Clone, Copy, Default, Debug)]
pub struct ReadHooks {
    /// The plan's end instead of the visible end.
    pub read_end: Option<ReadEndHook>,
    /// A batch a skip-by-header walk stops at is served without being verified.
    pub skip_unverified: bool,
}

impl PartitionHooks {
    /// The disk recovery's apply writes through.
    pub(crate) fn recovery_disk(&self, disk: &Arc<dyn Disk>) -> Arc<dyn Disk> {
        wrap(self.recovery_disk, disk)
    }

    /// The disk an open log writes through.
    pub(crate) fn log_disk(&self, disk: &Arc<dyn Disk>) -> Arc<dyn Disk> {
        wrap(self.log_disk, disk)
    }
}

fn wrap(hook: Option<DiskHook>, disk: &Arc<dyn Disk>) -> Arc<dyn Disk> {
    match hook {
        Some(wrap) => wrap(disk.clone()),
        None => disk.clone(),
    }
}

impl std::fmt::Debug for PartitionHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionHooks")
            .field("recovery_verdict", &self.recovery_verdict.is_some())
            .field("recovery_disk", &self.recovery_disk.is_some())
            .field("log_disk", &self.log_disk.is_some())
            .field("read", &self.read)
            .finish()
    }
}

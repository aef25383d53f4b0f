//! How the node's processes end besides crashes and power losses, and what boot may make of
//! it: a graceful shutdown (callers still running, refused once it began), and the judge of
//! boot's verdict on the page cache (`node::exit_record`).
//!
//! The judge's rule, from the fault model rather than from the record: the cache holds
//! bytes the device never took only after a write, a sync or a directory sync failed. So
//! boot may read it as it is when a power loss emptied it since the last process began
//! (whatever boot id the kernel reports), or when that process began a graceful shutdown
//! with none of those failing since it began (on any file but the exit record itself, which
//! is written once the rest is synced: its own fate changes nothing the cache holds). And it
//! must read the cache when the shutdown finished with nothing failing at all: no failed
//! write or sync, no full disk, no crash.

use super::{block, lock, NodeWorld, Shared, NODE_ROOT};
use crate::executor::Executor;
use crate::report::{violation, Checked, INV_JUSTIFIED, INV_LIVENESS};
use cairn_engine::env::PageCache;
use cairn_engine::node::exit_record::{ExitRecord, Why, EXIT_RECORD};
use cairn_engine::node::BootReport;
use cairn_engine::slots::{MIRROR_OFFSET, RECORD_LEN};
use cairn_faults::FaultKind;
use rand::Rng;
use std::path::Path;

/// Faults after which the page cache may hold what the device does not.
const DIVERGING: [FaultKind; 3] = [
    FaultKind::WriteError,
    FaultKind::SyncError,
    FaultKind::DirSyncError,
];

/// Faults after which the node cannot have recorded a clean exit.
const UNCLEAN: [FaultKind; 5] = [
    FaultKind::WriteError,
    FaultKind::SyncError,
    FaultKind::DirSyncError,
    FaultKind::NoSpace,
    FaultKind::TornWrite,
];

/// How the process before the next boot ended, as far as the page cache goes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LastExit {
    /// A power loss emptied the cache since the process began (its boot id kept or not).
    pub power: bool,
    /// It began a graceful shutdown, and no [`DIVERGING`] fault fired since it began on a
    /// file but the exit record (whatever else stopped it: a failure that was no I/O error
    /// leaves the cache as the device has it).
    pub may_trust: bool,
    /// Its graceful shutdown finished (an error or not), nothing of [`UNCLEAN`] fired and no
    /// crash struck.
    pub must_trust: bool,
}

/// Before a process crash or a power loss, now and then: a graceful shutdown while the
/// callers run (the power loss then strikes the machine the node left).
pub(crate) fn maybe_shut_down(world: &Shared, executor: &mut Executor) {
    let node = {
        let mut w = lock(world);
        let going_down = w.stop.is_some() && w.violation.is_none();
        if !going_down || !w.is_up() || !w.rng.gen_bool(0.35) {
            return;
        }
        w.shutting_down = true;
        w.event("graceful shutdown begins");
        w.node.clone().expect("up")
    };
    let failed_before = node.failure().map(|f| f.to_string());
    let closed = block(executor, async move { node.shutdown().await });
    let mut w = lock(world);
    let fired = w.disk.records_since(w.faults_at_boot);
    let of_data =
        |r: &&cairn_faults::FaultRecord| r.path.as_ref().is_none_or(|p| !p.ends_with(EXIT_RECORD));
    let diverged = fired
        .iter()
        .filter(of_data)
        .any(|r| DIVERGING.contains(&r.kind));
    let unclean = fired.iter().any(|r| UNCLEAN.contains(&r.kind)) || w.disk.is_crashed();
    w.exit.may_trust = !diverged;
    w.exit.must_trust = !unclean && closed.is_some();
    w.event(format!(
        "graceful shutdown: {closed:?}, failed before: {failed_before:?}, diverging faults {diverged}, unclean {unclean}"
    ));
    w.decision("GracefulShutdown");
}

/// A boot that crashed: the process before it is still the one the next boot judges by,
/// as far as the crashed one wrote nothing the cache could hold and the device not (it may
/// not have replaced the exit record yet, or only in part, or with all its sectors old);
/// the next boot need not trust the cache (the crashed one may have marked it unclean).
pub(crate) fn boot_crashed(w: &mut NodeWorld, before: LastExit) {
    let fired = w.disk.records_since(w.faults_at_boot);
    let diverged = fired.iter().any(|r| DIVERGING.contains(&r.kind));
    w.exit = LastExit {
        power: before.power || w.exit.power,
        may_trust: before.may_trust && !diverged && !marked_unclean(w),
        must_trust: false,
    };
}

/// Whether the exit record a boot would read (after dropping clean cached pages) says an
/// unclean exit in this kernel in either copy: the crashed boot got as far as marking it.
fn marked_unclean(w: &NodeWorld) -> bool {
    let path = Path::new(NODE_ROOT).join(EXIT_RECORD);
    let Some(bytes) = w.disk.device_view(&path) else {
        return false;
    };
    let now = w.disk.boot_id();
    let copy = |at: usize| bytes.get(at..at + RECORD_LEN)?.try_into().ok();
    [0, MIRROR_OFFSET as usize]
        .into_iter()
        .filter_map(copy)
        .filter_map(|record| ExitRecord::decode(&record).ok())
        .any(|r| r.boot_id == now && !r.clean)
}

/// Judges boot's verdict on the page cache against how the process before ended.
pub(crate) fn judge_page_cache(
    w: &mut NodeWorld,
    exit: LastExit,
    report: &BootReport,
) -> Checked<()> {
    let Some((cache, why)) = report.page_cache else {
        return Err(violation(
            INV_JUSTIFIED,
            "boot reported no verdict on the page cache".into(),
        ));
    };
    w.event(format!(
        "boot reads the page cache as {} ({}); before it: {exit:?}",
        cache.name(),
        why.name()
    ));
    match (cache, why) {
        (PageCache::Trusted, _) if !exit.power && !exit.may_trust => Err(violation(
            INV_JUSTIFIED,
            format!(
                "boot read the page cache as it was ({}) after an unclean exit of a process of the same kernel: a failed writeback may have left bytes the device never took",
                why.name()
            ),
        )),
        (PageCache::Suspect, _) if exit.must_trust => Err(violation(
            INV_LIVENESS,
            format!(
                "after a graceful shutdown with nothing failing, boot read the device anyway ({})",
                why.name()
            ),
        )),
        (PageCache::Trusted, Why::CleanExit) if exit.power => {
            // The record lies about the cache (the kernel kept its boot id through a power
            // loss), harmlessly: the cache began empty.
            w.decision("CacheTrustedLyingRecord");
            Ok(())
        }
        (PageCache::Trusted, Why::CleanExit) => {
            w.decision("CacheTrustedCleanExit");
            Ok(())
        }
        (PageCache::Trusted, Why::KernelBooted) => {
            w.decision("CacheTrustedNewKernel");
            Ok(())
        }
        (PageCache::Suspect, Why::UncleanExit) => {
            w.decision("CacheSuspectUncleanExit");
            Ok(())
        }
        _ => Ok(()),
    }
}

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

use super::{block, lock, NodeWorld, Shared};
use crate::executor::Executor;
use crate::report::{violation, Checked, INV_JUSTIFIED, INV_LIVENESS};
use cairn_engine::env::PageCache;
use cairn_engine::node::exit_record::{Why, EXIT_RECORD};
use cairn_engine::node::BootReport;
use cairn_faults::FaultKind;
use rand::Rng;

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

/// Before a process crash, now and then: a graceful shutdown while the callers run.
pub(crate) fn maybe_shut_down(world: &Shared, executor: &mut Executor) {
    let node = {
        let mut w = lock(world);
        let crash = w.stop == Some(false) && w.violation.is_none();
        if !crash || !w.is_up() || !w.rng.gen_bool(0.35) {
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

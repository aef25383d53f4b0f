//! Deliberate bugs that prove the simulator has teeth. Compiled only with the `canary`
//! feature (never in the production build); at most one is active per thread, chosen by name.
//! They reach the engine only through `crate::canary_seam`.
//!
//! Recovery decisions:
//! - `truncate-at-first-bad`: damage that must fence (below the durable end, in a sealed
//!   segment) is truncated away instead, with every valid batch after it;
//! - `trust-stale-index`: index entries that disagree with the log are kept;
//! - `drop-flushed-tail` (MUT-1): valid batches above the durable end are dropped at every
//!   boot instead of being synced and kept;
//! - `rewind-on-short-log` (MUT-2): a log shorter than the durable record is served from
//!   where its valid bytes end, instead of fencing;
//! - `skip-slot-sync`: recovery serves on the word of a superblock slot it never synced.
//!
//! Recovery's writes:
//! - `unsynced-repair`: recovery's repairs (advanced tail, lowered offsets, truncations,
//!   directory changes) are left unsynced; only the superblock record is synced.
//!
//! The open log's writes:
//! - `ack-before-sync`: the log and index are never synced, so a `persisted` group is
//!   acknowledged before its bytes are durable;
//! - `no-dir-sync`: a new segment's directory entry is never synced.
//!
//! The metadata plane's writes:
//! - `ack-metadata-before-sync`: the metadata journal is never synced, so a metadata
//!   operation is applied and answered before its entry is durable.
//!
//! The metadata plan at boot:
//! - `skip-meta-slot-rewrite`: a superblock record found in one copy only is left so
//!   (boot's `RewriteSlot` dropped), one more damaged copy from being lost.
//!
//! The owners:
//! - `ack-late-joiners`: a shard answers the sends that arrived while a persist ran as if
//!   that persist had covered them (they are only journaled, in memory);
//! - `publish-before-sync`: the metadata owner publishes its view of a batch after writing
//!   the batch's journal entries and before syncing them, so callers read metadata the disk
//!   may not hold.
//!
//! The server (`cairn_server::canary`, through its own seam; activated here, one switch):
//! - `ack-send-before-shard`: the adapter answers a send before the shard's reply (the send
//!   goes on in the background), so a `persisted` acknowledgement promises nothing;
//! - `dedup-wrong-reply`: the duplicate table answers a retried request with the reply of
//!   another request of the session;
//! - `session-outlives-user`: a session keeps its access (as it had at login) after its
//!   user is deleted.

use crate::env::{DirEntry, Disk, DiskFile, OpenMode};
use crate::partition::recovery::decide::{self, Repairs, Trusted};
use crate::partition::recovery::{Action, Damage, DamageKind, Survey};
use crate::partition::superblock::DurablePoint;
use crate::partition::FenceReason;
use std::cell::Cell;
use std::io;
use std::io::IoSlice;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

pub const NAMES: [&str; 15] = [
    "ack-send-before-shard",
    "dedup-wrong-reply",
    "session-outlives-user",
    "skip-meta-slot-rewrite",
    "ack-late-joiners",
    "publish-before-sync",
    "ack-metadata-before-sync",
    "ack-before-sync",
    "no-dir-sync",
    "truncate-at-first-bad",
    "trust-stale-index",
    "drop-flushed-tail",
    "rewind-on-short-log",
    "unsynced-repair",
    "skip-slot-sync",
];

thread_local! {
    static ACTIVE: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Activates the canary `name` (or none) on this thread. Returns false for an unknown name.
pub fn activate(name: Option<&str>) -> bool {
    let found = match name {
        None => None,
        Some(name) => match NAMES.iter().find(|n| **n == name) {
            Some(n) => Some(*n),
            None => return false,
        },
    };
    ACTIVE.with(|active| active.set(found));
    true
}

/// Whether the canary `name` is active on this thread.
pub fn active(name: &str) -> bool {
    ACTIVE.with(|active| active.get()) == Some(name)
}

pub(crate) fn recovery_verdict(
    survey: &Survey,
    verdict: Result<Repairs, FenceReason>,
) -> Result<Repairs, FenceReason> {
    match ACTIVE.with(|active| active.get()) {
        Some("truncate-at-first-bad") => truncate_at_first_bad(survey, verdict),
        Some("trust-stale-index") => verdict.map(|repairs| trust_stale_index(survey, repairs)),
        Some("drop-flushed-tail") => drop_flushed_tail(survey, verdict),
        Some("rewind-on-short-log") => rewind_on_short_log(survey, verdict),
        Some("skip-slot-sync") => verdict.map(|repairs| Repairs {
            sync_slot: None,
            ..repairs
        }),
        _ => verdict,
    }
}

fn trusted(survey: &Survey) -> Option<Trusted> {
    decide::trusted_record(&survey.dir, survey.identity, &survey.slots).ok()
}

/// Decides again as if nothing had ever been durable: every damage is then a torn tail.
fn truncate_at_first_bad(
    survey: &Survey,
    verdict: Result<Repairs, FenceReason>,
) -> Result<Repairs, FenceReason> {
    let damage_fence = matches!(
        &verdict,
        Err(FenceReason::SealedSegmentCorrupt { .. }
            | FenceReason::CorruptBelowDurable { .. }
            | FenceReason::DurableEndUncertain { .. }
            | FenceReason::ReadFailed { .. }
            | FenceReason::LogShorterThanDurable { .. })
    );
    let (Some(mut trusted), Some(first)) = (trusted(survey), survey.segments.first()) else {
        return verdict;
    };
    if !damage_fence {
        return verdict;
    }
    trusted.record.durable = DurablePoint {
        segment_start: first.start_offset,
        position: 0,
        next_offset: first.start_offset,
    };
    trusted.uncertain = None;
    decide::decide_with(survey, trusted).or(verdict)
}

fn trust_stale_index(survey: &Survey, mut repairs: Repairs) -> Repairs {
    for segment in &mut repairs.segments {
        let stale = |action: &Action| {
            matches!(action, Action::RewriteIndex { path, why, .. }
                if *path == segment.index_path && why.contains("does not match"))
        };
        if !repairs.actions.iter().any(stale) {
            continue;
        }
        repairs.actions.retain(|action| !stale(action));
        if let Some(read) = survey
            .segments
            .iter()
            .find(|s| s.start_offset == segment.start_offset)
            .and_then(|s| s.index.as_ref())
        {
            segment.index = read.entries.clone();
        }
    }
    repairs
}

/// Cuts the durable segment at the durable end, as if the valid batches above were damage.
fn drop_flushed_tail(
    survey: &Survey,
    verdict: Result<Repairs, FenceReason>,
) -> Result<Repairs, FenceReason> {
    let Ok(repairs) = &verdict else {
        return verdict;
    };
    let durable = repairs.trusted.record.durable;
    let mut mutated = survey.clone();
    let Some(segment) = mutated
        .segments
        .iter_mut()
        .find(|s| s.start_offset == durable.segment_start && s.valid_end > durable.position)
    else {
        return verdict;
    };
    segment
        .batches
        .retain(|b| b.position + b.length <= durable.position);
    segment.valid_end = durable.position;
    segment.next_offset = durable.next_offset;
    segment.damage = Some(Damage {
        position: durable.position,
        kind: DamageKind::Invalid("MUTANT: drop-flushed-tail".into()),
    });
    decide::decide_with(&mutated, repairs.trusted.clone()).or(verdict)
}

/// Trusts a record lowered to where the durable segment's valid bytes end.
fn rewind_on_short_log(
    survey: &Survey,
    verdict: Result<Repairs, FenceReason>,
) -> Result<Repairs, FenceReason> {
    let short = matches!(
        &verdict,
        Err(FenceReason::LogShorterThanDurable { .. } | FenceReason::DurableOffsetMismatch { .. })
    );
    let Some(mut trusted) = trusted(survey).filter(|_| short) else {
        return verdict;
    };
    let durable = trusted.record.durable;
    let Some(segment) = survey
        .segments
        .iter()
        .find(|s| s.start_offset == durable.segment_start && s.valid_end < durable.position)
    else {
        return verdict;
    };
    trusted.record.durable = DurablePoint {
        segment_start: segment.start_offset,
        position: segment.valid_end,
        next_offset: segment.next_offset,
    };
    decide::decide_with(survey, trusted).or(verdict)
}

pub(crate) fn apply_disk<T>(disk: &dyn Disk, apply: &dyn Fn(&dyn Disk) -> T) -> T {
    if active("unsynced-repair") {
        let skipping = SkippingDisk {
            inner: disk,
            skip_file_sync: |path| !is_superblock(path),
            skip_dir_sync: |_| true,
        };
        return apply(&skipping);
    }
    apply(disk)
}

pub(crate) fn log_disk(disk: Arc<dyn Disk>) -> Arc<dyn Disk> {
    if active("ack-before-sync") {
        return Arc::new(SkippingDisk {
            inner: disk,
            skip_file_sync: is_segment_file,
            skip_dir_sync: |_| false,
        });
    }
    if active("no-dir-sync") {
        return Arc::new(SkippingDisk {
            inner: disk,
            skip_file_sync: |_| false,
            // The partition directory, where segment names live; not the offsets ones.
            skip_dir_sync: |dir| !dir.components().any(|c| c.as_os_str() == "offsets"),
        });
    }
    disk
}

pub(crate) fn metadata_disk(disk: Arc<dyn Disk>) -> Arc<dyn Disk> {
    if active("ack-metadata-before-sync") {
        return Arc::new(SkippingDisk {
            inner: disk,
            skip_file_sync: |path| path.file_name().is_some_and(|n| n == "journal.wal"),
            skip_dir_sync: |_| false,
        });
    }
    disk
}

fn is_superblock(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("superblock"))
}

fn is_segment_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "log" || e == "index")
}

/// A disk whose chosen syncs return success without doing anything.
struct SkippingDisk<D> {
    inner: D,
    skip_file_sync: fn(&Path) -> bool,
    skip_dir_sync: fn(&Path) -> bool,
}

struct SkippingFile {
    inner: Box<dyn DiskFile>,
    skip_sync: bool,
}

impl DiskFile for SkippingFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.inner.read_at(buf, pos)
    }
    fn write_all_at(&self, bufs: &[IoSlice<'_>], pos: u64) -> io::Result<()> {
        self.inner.write_all_at(bufs, pos)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.skip_sync {
            return Ok(());
        }
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn preallocate(&self, len: u64) -> io::Result<bool> {
        self.inner.preallocate(len)
    }
    fn evict_cache(&self) -> io::Result<()> {
        self.inner.evict_cache()
    }
}

impl<'d, D: Deref<Target = dyn Disk + 'd> + Send + Sync> Disk for SkippingDisk<D> {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(SkippingFile {
            inner: self.inner.open(path, mode)?,
            skip_sync: (self.skip_file_sync)(path),
        }))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.inner.read_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_dir_all(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        if (self.skip_dir_sync)(path) {
            return Ok(());
        }
        self.inner.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.inner.exists(path)
    }
    fn take_io_time(&self) -> std::time::Duration {
        self.inner.take_io_time()
    }
}

pub(crate) fn requests_after_persist<T>(inbox: &mut crate::env::chan::Receiver<T>) -> Vec<T> {
    if !active("ack-late-joiners") {
        return Vec::new();
    }
    let mut late = Vec::new();
    while let Ok(request) = inbox.try_recv() {
        late.push(request);
    }
    late
}

pub(crate) fn before_metadata_sync(publish: &mut dyn FnMut()) {
    if active("publish-before-sync") {
        publish();
    }
}

pub(crate) fn metadata_plan(mut plan: crate::metadata::MetaPlan) -> crate::metadata::MetaPlan {
    if active("skip-meta-slot-rewrite") {
        plan.actions
            .retain(|a| !matches!(a, crate::metadata::MetaAction::RewriteSlot { .. }));
    }
    plan
}

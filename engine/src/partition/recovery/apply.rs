//! Carrying out a recovery plan. Every repair is durable before apply returns, whatever the
//! topic's policy (and what an earlier failed attempt repaired is made durable first): a
//! truncation is synced, a rebuilt index is written aside, synced and
//! renamed over, an offset repair is synced with its directory, a `replicated` offset served
//! as it is is synced (it may be a page an earlier process rewrote in place), created and removed names
//! have their directory synced, and the superblock record comes last, after the syncs of
//! every byte it names.
//!
//! A plan with nothing to repair still syncs what it serves every boot (the trusted slot,
//! the last log, the directories, the `replicated` offsets it serves as they are): an
//! earlier process may have left any of them in the page cache only. That insurance costs a
//! flush of the device per file, five per partition; a node booting thousands of partitions
//! defers it ([`Insurance::Deferred`]) to one `Disk::sync_all` before it serves anything.

use super::actions::{Action, RecoveryPlan};
use crate::env::{Disk, OpenMode};
use crate::partition::offsets::{self, ConsumerKind};
use crate::partition::segment::{index_name, log_name};
use crate::partition::superblock::{self, Superblock, SLOT_NAMES};
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

/// Who makes durable what a plan with nothing to repair serves as it found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insurance {
    /// Apply syncs each file and directory before it returns.
    Now,
    /// The caller syncs everything under the data root with one `Disk::sync_all` before
    /// anything of the partition is served (a node's boot). A plan with actions is applied
    /// as under `Now` all the same: its repairs are ordered syncs, the record last.
    Deferred,
}

/// Carries out an unfenced plan's actions; returns the record the partition now stands on.
pub fn apply(disk: &dyn Disk, plan: &RecoveryPlan, insurance: Insurance) -> io::Result<Superblock> {
    let _span = tracing::info_span!("recovery_apply", dir = %plan.dir.display()).entered();
    assert!(plan.fence.is_none(), "a fenced plan is never applied");
    let mut record = plan
        .superblock
        .expect("an unfenced plan trusts a superblock record");
    if insurance == Insurance::Deferred && plan.repairs_nothing() {
        return Ok(record);
    }
    // The trusted record may still be a dirty page (a crash between its write and its sync):
    // make it durable before anything is served on its word.
    if let Some(slot) = &plan.sync_slot {
        disk.open(slot, OpenMode::ReadWrite)?.sync_data()?;
    }
    sync_what_an_earlier_attempt_changed(disk, plan)?;
    // A store interrupted between its rename and its directory sync may be visible: what
    // recovery serves must stay served, so the offsets directories are synced every boot.
    let mut unsynced_dirs: BTreeSet<PathBuf> = ConsumerKind::ALL
        .iter()
        .map(|kind| plan.dir.join("offsets").join(kind.dir()))
        .collect();
    for action in &plan.actions {
        tracing::info!(%action, "recovery applying");
        apply_action(disk, plan, action, &mut record, &mut unsynced_dirs)?;
    }
    for path in &plan.sync_offsets {
        disk.open(path, OpenMode::ReadWrite)?.sync_data()?;
    }
    for dir in unsynced_dirs {
        disk.sync_dir(&dir)?;
    }
    Ok(record)
}

/// An earlier attempt at this recovery in the same boot may have cut the last log (or removed
/// the segments after it) and then failed at the sync (EIO): this attempt finds nothing to
/// repair in the cache, though the cut is not durable, and a power loss would bring the cut
/// batches back above a durable end that moved on. What recovery serves must stay served, so
/// the last log and the directory are synced every boot, before any record is written (each
/// a no-op when nothing is dirty; under [`Insurance::Deferred`], by the boot's one sync
/// before it writes or serves anything of the partition). A last log this plan cuts is synced by its cut instead
/// (synced first, the torn bytes the cut removes would be made durable for nothing).
fn sync_what_an_earlier_attempt_changed(disk: &dyn Disk, plan: &RecoveryPlan) -> io::Result<()> {
    if let Some(last) = plan.segments.last() {
        let cut_here = plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::Truncate { path, .. } if *path == last.log_path));
        if !cut_here && disk.exists(&last.log_path)? {
            disk.open(&last.log_path, OpenMode::ReadWrite)?
                .sync_data()?;
        }
    }
    match disk.exists(&plan.dir)? {
        true => disk.sync_dir(&plan.dir),
        false => Ok(()),
    }
}

fn apply_action(
    disk: &dyn Disk,
    plan: &RecoveryPlan,
    action: &Action,
    record: &mut Superblock,
    unsynced_dirs: &mut BTreeSet<PathBuf>,
) -> io::Result<()> {
    match action {
        Action::CreateDir { path } => {
            disk.create_dir_all(path)?;
            disk.sync_dir(parent(path))?;
        }
        Action::RemoveTemp { path } | Action::RemoveStrayIndex { path } => {
            disk.remove_file(path)?;
            unsynced_dirs.insert(parent(path).to_path_buf());
        }
        Action::CreateSegment { start_offset } => {
            for name in [log_name(*start_offset), index_name(*start_offset)] {
                disk.open(&plan.dir.join(name), OpenMode::CreateOrOpen)?
                    .sync_data()?;
            }
            unsynced_dirs.insert(plan.dir.clone());
        }
        Action::Truncate {
            path, from, len, ..
        } => {
            let trusted = plan
                .superblock
                .expect("an unfenced plan trusts a record")
                .durable;
            assert!(from < len, "a truncation removes bytes: {from} of {len}");
            assert!(
                *path != plan.dir.join(log_name(trusted.segment_start))
                    || *from >= trusted.position,
                "a truncation never cuts below the durable end: {} from {from}, durable at {}",
                path.display(),
                trusted.position
            );
            let file = disk.open(path, OpenMode::ReadWrite)?;
            file.set_len(*from)?;
            file.sync_data()?;
        }
        Action::RemoveSegment {
            log_path,
            index_path,
            ..
        }
        | Action::FinishDeletion {
            log_path,
            index_path,
            ..
        } => {
            disk.remove_file(log_path)?;
            if disk.exists(index_path)? {
                disk.remove_file(index_path)?;
            }
            unsynced_dirs.insert(plan.dir.clone());
        }
        Action::RewriteIndex { path, entries, .. } => {
            // Built aside and renamed over: a crash leaves the old index or the new one,
            // never a partial file that would pass for a valid (sparser) index.
            let mut tmp = path.clone().into_os_string();
            tmp.push(".tmp");
            let tmp = PathBuf::from(tmp);
            let file = disk.open(&tmp, OpenMode::CreateOrOpen)?;
            file.set_len(0)?;
            let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
            file.write_all_at(&[io::IoSlice::new(&bytes)], 0)?;
            file.sync_data()?;
            drop(file);
            disk.rename(&tmp, path)?;
            unsynced_dirs.insert(plan.dir.clone());
        }
        Action::LowerOffset {
            consumer, path, to, ..
        } => offsets::write(
            disk,
            path,
            offsets::owner(&plan.identity),
            *consumer,
            *to,
            true,
        )?,
        Action::DeleteOffset {
            path, record: set, ..
        } => {
            if let Some(set) = set {
                sync_all_dirs(disk, plan, unsynced_dirs)?;
                *record = write_next_record(disk, &plan.dir, record, |r| r.offsets = *set)?;
            }
            offsets::remove(disk, path, true)?
        }
        Action::DropDamagedOffset { path, .. } => offsets::remove(disk, path, true)?,
        Action::AdvanceSuperblock {
            sync, to, offsets, ..
        } => {
            for path in sync {
                disk.open(path, OpenMode::ReadWrite)?.sync_data()?;
            }
            // Always: a crashed process may have created these segment files without
            // syncing their names, and the record is about to name them durable (and the
            // offset files it counts).
            sync_all_dirs(disk, plan, unsynced_dirs)?;
            *record = write_next_record(disk, &plan.dir, record, |r| {
                r.durable = *to;
                r.offsets = *offsets;
            })?;
        }
        Action::RecordOffsets { to, .. } => {
            sync_all_dirs(disk, plan, unsynced_dirs)?;
            *record = write_next_record(disk, &plan.dir, record, |r| r.offsets = *to)?;
        }
        Action::RewriteSlot { .. } => {
            *record = write_next_record(disk, &plan.dir, record, |_| {})?;
        }
    }
    Ok(())
}

/// Syncs the partition directory and every directory recovery changed, before a record
/// names what they hold.
fn sync_all_dirs(
    disk: &dyn Disk,
    plan: &RecoveryPlan,
    unsynced_dirs: &mut BTreeSet<PathBuf>,
) -> io::Result<()> {
    unsynced_dirs.insert(plan.dir.clone());
    for dir in std::mem::take(unsynced_dirs) {
        disk.sync_dir(&dir)?;
    }
    Ok(())
}

/// Writes the record after `current` (the other slot), `change` applied, re-creating the
/// slot file durably if it was missing.
fn write_next_record(
    disk: &dyn Disk,
    dir: &Path,
    current: &Superblock,
    change: impl FnOnce(&mut Superblock),
) -> io::Result<Superblock> {
    let next = current.next(change);
    let slot = dir.join(SLOT_NAMES[next.slot()]);
    let existed = disk.exists(&slot)?;
    superblock::write_slot(disk, dir, &next)?;
    if !existed {
        disk.sync_dir(dir)?;
    }
    assert!(
        next.durable.next_offset >= current.durable.next_offset
            && next.durable.segment_start >= current.durable.segment_start,
        "recovery never records a durable end below the one it trusts"
    );
    Ok(next)
}

fn parent(path: &Path) -> &Path {
    path.parent()
        .expect("a file of a partition has a directory")
}

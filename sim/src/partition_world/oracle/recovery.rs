//! What recovery decided, judged: its actions and fences (invariant 4) against the damage
//! present when it looked, a boot that could not complete, what a rewind after a power loss
//! may be excused by (invariant 1), and the stored offsets it serves (invariant 5).

use super::super::walk::{self, View, WalkedLog};
use super::{damage_in, Model};
use crate::report::{violation, Checked, INV_JUSTIFIED, INV_OFFSETS};
use cairn_engine::config::Durability;
use cairn_engine::partition::recovery::{Action, RecoveryPlan};
use cairn_engine::partition::superblock::{Superblock, MIRROR_OFFSET, SLOT_NAMES, SUPERBLOCK_LEN};
use cairn_engine::partition::{ConsumerId, FenceReason};
use cairn_faults::{Damage, FaultKind, FaultRecord, SimDisk};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------
// Invariant 4: justified decisions.
// ---------------------------------------------------------------------------------------

/// What the oracle knew of a partition's files just before recovery ran: recovery's
/// decisions are judged against the faults present when it looked (its repairs may heal them).
pub struct BeforeRecovery {
    /// Bytes of each log an honest sync promised durable.
    pub promised: BTreeMap<PathBuf, u64>,
    /// The oracle's walk of every log, as recovery reads it (from the device).
    pub walks: Vec<WalkedLog>,
    /// The damage present in every file of the partition.
    pub damage: BTreeMap<PathBuf, Vec<Damage>>,
    /// Names a lying `sync_dir` claimed and a power loss undid.
    pub lost_names: Vec<PathBuf>,
}

impl BeforeRecovery {
    pub fn take(disk: &SimDisk, model: &Model) -> BeforeRecovery {
        let walks = walk::walk_partition(disk, &model.dir, model.partition_id, View::Device);
        let promised = walks
            .iter()
            .map(|w| (w.path.clone(), disk.promised_len(&w.path)))
            .collect();
        let damage = disk
            .paths_under(&model.dir)
            .into_iter()
            .map(|path| {
                let damage = disk.live_damage(&path);
                (path, damage)
            })
            .filter(|(_, damage)| !damage.is_empty())
            .collect();
        BeforeRecovery {
            promised,
            walks,
            damage,
            lost_names: disk.lost_synced_names(&model.dir),
        }
    }

    fn walk(&self, path: &Path) -> Option<&WalkedLog> {
        self.walks.iter().find(|w| w.path == path)
    }

    fn damage_of(&self, path: &Path) -> &[Damage] {
        self.damage.get(path).map_or(&[], Vec::as_slice)
    }

    /// Damage present in `path` whose bytes meet `range` (a sync error excluded: the bytes
    /// it kept from the device were never promised, so it explains losing them, never a
    /// refusal).
    fn explains(&self, path: &Path, range: Range<u64>) -> Option<&Damage> {
        self.damage_of(path).iter().find(|d| {
            d.kind != FaultKind::SyncError
                && d.range.start < range.end
                && range.start < d.range.end.max(d.range.start + 1)
        })
    }
}

/// **Invariant 4** on recovery's actions: a truncation cuts only at a batch the oracle's own
/// walk finds invalid, and below what an honest sync promised only where a fault still
/// present in the cut bytes explains it; a removed segment held nothing promised unless a
/// fault still present in the partition's files explains it.
pub fn check_actions(model: &Model, plan: &RecoveryPlan, before: &BeforeRecovery) -> Checked<()> {
    let p = model.index;
    for action in &plan.actions {
        match action {
            Action::Truncate { path, from, .. } => {
                if let Some(batch) = before
                    .walk(path)
                    .and_then(|w| w.batches.iter().find(|b| b.position == *from))
                {
                    return Err(violation(INV_JUSTIFIED, format!("partition {p}: recovery truncated {} at {from}, where the oracle finds a valid batch (offsets {}..{})", path.display(), batch.base_offset, batch.next_offset)));
                }
                let promised = before.promised.get(path).copied().unwrap_or(0);
                if *from < promised && before.explains(path, *from..promised).is_none() {
                    return Err(violation(INV_JUSTIFIED, format!("partition {p}: recovery truncated {} to {from}, below the {promised} bytes an honest sync made durable, with no fault present there", path.display())));
                }
            }
            Action::FinishDeletion {
                log_path,
                log_start,
                ..
            } => {
                let deleted_below = model.log_start.max(model.log_start_pending.unwrap_or(0));
                if *log_start > deleted_below {
                    return Err(violation(INV_JUSTIFIED, format!("partition {p}: recovery removed {} as below the log start {log_start}, but retention only deleted below {deleted_below}", log_path.display())));
                }
            }
            Action::RemoveSegment { log_path, .. } => {
                let promised = before.promised.get(log_path).copied().unwrap_or(0);
                let damaged = before.damage.values().any(|d| !d.is_empty());
                if promised > 0 && !damaged && before.lost_names.is_empty() {
                    return Err(violation(INV_JUSTIFIED, format!("partition {p}: recovery removed {} holding {promised} durable bytes, with no fault present in the partition", log_path.display())));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The bytes of a batch at `position` of `path` as the walk saw them: at least its header.
fn batch_window(before: &BeforeRecovery, path: &Path, position: u64) -> Range<u64> {
    match before.walk(path).and_then(|w| w.stop.clone()) {
        Some(stop) if stop.start == position => stop,
        _ => position..position + cairn_engine::format::BATCH_HEADER_LEN as u64,
    }
}

/// **Invariant 4** on a fence at recovery: each reason names a file and a position, and is
/// justified only by a fault still present there that could have caused it (damaged bytes in
/// the bytes named; for a missing file, a directory entry a lying `sync_dir` claimed and a
/// power loss undid).
pub fn check_fence(
    model: &Model,
    reason: &FenceReason,
    before: &BeforeRecovery,
    disk: &SimDisk,
) -> Checked<()> {
    let p = model.index;
    let dir = &model.dir;
    let slots: Vec<PathBuf> = SLOT_NAMES.iter().map(|n| dir.join(n)).collect();
    let anywhere = 0..u64::MAX;
    let lost_names = &before.lost_names;
    let in_file = |path: &Path, range: Range<u64>| before.explains(path, range).is_some();
    // Retention deleted segments and the record of the new log start is gone (a slot
    // destroyed, lost, or undone by a power loss after a lying sync): recovery trusts an older
    // record that still names the deleted segments.
    let deletion_record_lost = (model.log_start > 0 || model.log_start_pending.is_some())
        && (model.rewind_floor.is_some()
            || slots
                .iter()
                .any(|s| in_file(s, anywhere.clone()) || lost_names.contains(s)));
    let justified = deletion_record_lost
        && matches!(
            reason,
            FenceReason::MissingLog { .. }
                | FenceReason::DurableSegmentMissing { .. }
                | FenceReason::LogStartMissing { .. }
                | FenceReason::ChainGap { .. }
        )
        || match reason {
            FenceReason::NoSuperblock { .. } => slots
                .iter()
                .any(|s| in_file(s, anywhere.clone()) || lost_names.contains(s)),
            FenceReason::SuperblockIdentity { path, .. }
            | FenceReason::SuperblockMisplaced { path, .. } => in_file(path, anywhere.clone()),
            FenceReason::DurableEndUncertain { slot, .. } => {
                in_file(slot, anywhere.clone()) || lost_names.contains(slot)
            }
            FenceReason::MissingLog { log, .. }
            | FenceReason::DurableSegmentMissing { log, .. } => lost_names.contains(log),
            // The oldest segment's name was lost; or the newer record that moved the log
            // start was destroyed or undone (a power loss after a lying sync of its slot).
            FenceReason::LogStartMissing {
                dir,
                uncertain_slot,
                ..
            } => {
                lost_names
                    .iter()
                    .any(|n| n.parent() == Some(dir) && n.extension().is_some_and(|e| e == "log"))
                    || model.rewind_floor.is_some()
                    || uncertain_slot
                        .as_ref()
                        .is_some_and(|s| in_file(s, anywhere.clone()) || lost_names.contains(s))
            }
            // A stored offset's name (or its directory's) was lost; or the newer record that
            // knew of a deletion was destroyed, or undone (a power loss after a lying sync
            // of its slot, which the deletion's unlink outlived).
            FenceReason::StoredOffsetsMissing {
                dir,
                uncertain_slot,
                ..
            } => {
                lost_names.iter().any(|n| n.starts_with(dir))
                    || model.rewind_floor.is_some()
                    || uncertain_slot
                        .as_ref()
                        .is_some_and(|s| in_file(s, anywhere.clone()) || lost_names.contains(s))
            }
            FenceReason::DirectoryMissing { .. }
            | FenceReason::IdentityDuplicated { .. }
            | FenceReason::DirectoryInTheWay { .. }
            | FenceReason::RebuildCutShort { .. } => false,
            // A segment's name was lost, or the segment before the gap lost its tail.
            FenceReason::ChainGap { log, .. } => {
                let previous = before
                    .walks
                    .iter()
                    .take_while(|w| w.path != *log)
                    .last()
                    .map(|w| w.path.clone());
                !lost_names.is_empty()
                    || previous.is_some_and(|previous| in_file(&previous, anywhere.clone()))
            }
            FenceReason::SegmentNameMismatch { log, .. }
            | FenceReason::EmptySealedSegment { log } => in_file(log, anywhere.clone()),
            FenceReason::SealedSegmentCorrupt { log, position, .. }
            | FenceReason::CorruptBelowDurable { log, position, .. } => {
                in_file(log, batch_window(before, log, *position))
            }
            FenceReason::LogShorterThanDurable {
                log,
                valid_end,
                durable_position,
            } => in_file(log, *valid_end..*durable_position),
            FenceReason::DurableOffsetMismatch { log, durable, .. } => {
                in_file(log, 0..durable.position + 1)
            }
            FenceReason::ReadFailed { file, sector, .. } => before
                .damage_of(file)
                .iter()
                .any(|d| d.kind == FaultKind::ReadError && d.range.contains(sector)),
            FenceReason::IoFailed { .. } => false,
        };
    if justified {
        return Ok(());
    }
    let _ = disk;
    Err(violation(
        INV_JUSTIFIED,
        format!(
            "partition {p}: recovery fenced ({}) with no fault present that explains it: {reason}",
            reason.name()
        ),
    ))
}

/// **Invariant 4** on a fence at runtime: an I/O error is justified by a fault that fired
/// during the operation; damage a read found in promised bytes by a fault still present that
/// reads see, in that file, in the bytes of that batch.
pub fn check_runtime_fence(
    model: &Model,
    reason: &FenceReason,
    fired: &[FaultRecord],
    disk: &SimDisk,
) -> Checked<()> {
    let p = model.index;
    let io_fault = |r: &FaultRecord| io_failure_cause(r.kind);
    let justified = match reason {
        FenceReason::IoFailed { .. } => fired.iter().any(io_fault) || disk.is_crashed(),
        FenceReason::SealedSegmentCorrupt { log, position, .. }
        | FenceReason::CorruptBelowDurable { log, position, .. } => {
            let logs = walk::walk_partition(disk, &model.dir, model.partition_id, View::Cache);
            let window = logs
                .iter()
                .find(|w| w.path == *log)
                .and_then(|w| w.stop.clone())
                .filter(|stop| stop.start <= *position)
                .map_or(*position..position + 256, |stop| {
                    stop.start..stop.end.max(position + 256)
                });
            damage_in(disk, log, window, true).is_some()
        }
        FenceReason::ReadFailed { file, sector, .. } => disk
            .live_damage(file)
            .iter()
            .any(|d| d.kind == FaultKind::ReadError && d.range.contains(sector)),
        _ => false,
    };
    if justified {
        return Ok(());
    }
    Err(violation(INV_JUSTIFIED, format!("partition {p}: fenced at runtime ({}) with no fault present that explains it: {reason}", reason.name())))
}

/// Faults that make an I/O call fail when they fire: an error, no space, a crash, and a write
/// that landed elsewhere (the superblock's read-back finds it).
fn io_failure_cause(kind: FaultKind) -> bool {
    matches!(
        kind,
        FaultKind::WriteError
            | FaultKind::SyncError
            | FaultKind::DirSyncError
            | FaultKind::NoSpace
            | FaultKind::TornWrite
            | FaultKind::MisdirectedWrite
    )
}

/// **Invariant 4** on a boot that could not complete: only an injected fault that fired while
/// it ran (an I/O error, no space, a crash) may stop it; it is then retried.
pub fn check_boot_failure(
    model: &Model,
    error: &str,
    fired: &[FaultRecord],
    crashed: bool,
) -> Checked<()> {
    let injected = crashed || fired.iter().any(|r| io_failure_cause(r.kind));
    if injected {
        return Ok(());
    }
    Err(violation(
        INV_JUSTIFIED,
        format!(
            "partition {}: recovery failed with no fault behind it: {error}",
            model.index
        ),
    ))
}

// ---------------------------------------------------------------------------------------
// Invariant 1 at a power loss: what a rewind may be excused by.
// ---------------------------------------------------------------------------------------

/// The newest record the superblock slots hold durably (what an honest device keeps), and
/// whether a slot holds pages a lying sync claimed: read just before a power loss.
pub fn superblock_at_power_loss(disk: &SimDisk, dir: &Path) -> (Option<u64>, bool) {
    let lied = SLOT_NAMES
        .iter()
        .any(|name| disk.has_lied_pages(&dir.join(name)));
    (newest_durable_record(disk, dir), lied)
}

/// The durable end of the newest valid record the slots hold durably in a copy the device
/// can read (a copy under an unreadable sector is no record to recovery).
pub fn newest_durable_record(disk: &SimDisk, dir: &Path) -> Option<u64> {
    SLOT_NAMES
        .iter()
        .flat_map(|name| slot_copies(disk, &dir.join(name)))
        .filter(|copy| copy.readable)
        .max_by_key(|copy| copy.record.sequence)
        .map(|copy| copy.record.durable.next_offset)
}

/// One valid record a slot file holds durably.
struct SlotCopy {
    record: Superblock,
    /// No unreadable sector lies in the copy.
    readable: bool,
}

/// The valid records the copies of one slot file hold durably.
fn slot_copies(disk: &SimDisk, path: &Path) -> Vec<SlotCopy> {
    let Some(bytes) = disk.durable_contents(path) else {
        return Vec::new();
    };
    let bad = disk.bad_ranges(path);
    [0, MIRROR_OFFSET]
        .into_iter()
        .filter_map(|at| {
            let span = at..at + SUPERBLOCK_LEN as u64;
            let copy = bytes.get(span.start as usize..span.end as usize)?;
            let record = Superblock::decode(copy).ok()?;
            let readable = !bad.iter().any(|r| r.start < span.end && span.start < r.end);
            Some(SlotCopy { record, readable })
        })
        .collect()
}

/// Before a recovery: when damage present in a superblock slot destroyed its newest record
/// (no copy of it verifies or can be read: both rotten or unreadable, or one so and the
/// other holding an older record after a lost page), the durable end it named cannot be
/// proven on one disk; a rewind is then excused down to the newest record that survives,
/// and no further.
pub fn excuse_destroyed_record(model: &mut Model, before: &BeforeRecovery, disk: &SimDisk) {
    let destroyed = SLOT_NAMES.iter().any(|name| {
        let path = model.dir.join(name);
        let damaged = before
            .damage_of(&path)
            .iter()
            .any(|d| d.kind != FaultKind::SyncError);
        let copies = slot_copies(disk, &path);
        let newest = copies.iter().map(|c| c.record.sequence).max();
        let newest_readable = copies
            .iter()
            .filter(|c| c.readable)
            .map(|c| c.record.sequence)
            .max();
        let all_rotten = copies.is_empty() && disk.durable_contents(&path).is_some();
        damaged && (all_rotten || newest_readable < newest)
    });
    if destroyed {
        let floor = newest_durable_record(disk, &model.dir).unwrap_or(0);
        model.rewind_floor = Some(model.rewind_floor.map_or(floor, |f| f.min(floor)));
    }
}

// ---------------------------------------------------------------------------------------
// Invariant 5: consumer offsets.
// ---------------------------------------------------------------------------------------

/// **Invariant 5** after recovery: every stored offset lies within the log, and reads as a
/// value it may hold: after a process crash the last value stored (a failed store: either),
/// after a power loss any value stored since the last durable one (under `replicated` also
/// none: an unsynced store may tear, and recovery drops it); each lowered to the log's end.
/// Allows: a damaged or missing file when a fault still present in it explains it; a name
/// whose synced directory entry was lost, whatever the file now under it holds (an older
/// incarnation, whose bytes the damage seen in the newer one says nothing about). What
/// recovery serves is durable from then on (its repairs are), so it becomes the only value.
pub fn check_offsets(model: &mut Model) -> Checked<()> {
    let p = model.index;
    let end = model.acked_end;
    let last = end.checked_sub(1);
    // Lowered to a lost tail's end; below the log start, read as consumed up to it.
    let floor = model.log_start.saturating_sub(1);
    let clamp = |v: Option<u64>| match (v, last) {
        (Some(v), Some(last)) => Some(v.min(last).max(floor)),
        _ => None,
    };
    let persisted = model.config.consumer_offset_durability == Durability::Persisted;
    let consumers: Vec<ConsumerId> = model.offsets.keys().copied().collect();
    for consumer in consumers {
        let offset_model = model.offsets[&consumer].clone();
        let candidates = if model.power_lost {
            &offset_model.after_power_loss
        } else {
            &offset_model.now
        };
        let allowed: BTreeSet<Option<u64>> = candidates.iter().map(|v| clamp(*v)).collect();
        let path = consumer.path(&model.dir);
        let rotten = model
            .damage_seen
            .get(&path)
            .is_some_and(|d| d.iter().any(|d| d.kind != FaultKind::SyncError));
        let damaged = rotten || model.lost_names_seen.contains(&path);
        let partition = model.partition.as_ref().expect("open");
        let got = match partition.get_offset(consumer) {
            Ok(value) => value,
            Err(e) if damaged && persisted => {
                // Reported as damaged, never reset: fine while the damage is there. Recovery
                // could not lower what it could not read, but a boot that failed part-way
                // since the last settling may have lowered it before the damage struck:
                // once the damage heals, the file holds either (seed 0x5f5eace8).
                let _ = e;
                if model.boot_failed {
                    let settled = model.offsets.get_mut(&consumer).expect("known");
                    settled.now.extend(allowed.iter().copied());
                    settled.after_power_loss.extend(allowed);
                }
                continue;
            }
            Err(e) => {
                return Err(violation(INV_OFFSETS, format!("partition {p}: reading {consumer:?} failed with no fault present in {}: {e}", path.display())));
            }
        };
        if got.is_some_and(|x| last.is_none_or(|l| x > l)) {
            return Err(violation(
                INV_OFFSETS,
                format!(
                    "partition {p}: {consumer:?} offset {got:?} beyond the last offset {last:?}"
                ),
            ));
        }
        let lost = model.lost_names_seen.contains(&path);
        if persisted && rotten && !lost && !allowed.contains(&got) {
            // Damaged bytes of a persisted offset file are reported on every read, never
            // reset to "none" or to another value.
            return Err(violation(INV_OFFSETS, format!("partition {p}: the persisted offset of {consumer:?} in {} is damaged, and reads {got:?} instead of being reported (expected one of {allowed:?})", path.display())));
        }
        if !allowed.contains(&got) && !damaged {
            return Err(violation(INV_OFFSETS, format!("partition {p}: {consumer:?} reads {got:?} after recovery, expected one of {allowed:?} ({}; stored since the last durable value: {:?})", if model.power_lost { "after a power loss" } else { "after a process crash" }, offset_model.after_power_loss)));
        }
        let settled = model.offsets.get_mut(&consumer).expect("known");
        settled.now = BTreeSet::from([got]);
        settled.after_power_loss = if persisted {
            BTreeSet::from([got])
        } else {
            BTreeSet::from([got, None])
        };
    }
    model.power_lost = false;
    model.boot_failed = false;
    model.damage_seen.clear();
    model.lost_names_seen.clear();
    Ok(())
}

//! Boot recovery of one partition directory: a read-only plan, then its application.
//!
//! The plan reads the superblock pair (the durable end), walks every segment verifying every
//! batch, checks the segment chain, reconciles each `.index` with its log, and decides:
//!
//! - invalid bytes **below** the durable end, anywhere in a sealed segment, a chain gap, a
//!   file whose name disagrees with its first batch, or a log shorter than the durable end
//!   → **fence**, files untouched;
//! - invalid bytes **above** the durable end → truncate there (those bytes were never
//!   promised durable) and drop any later, never-durable segment;
//! - a missing, torn or divergent index → rebuild it from the log (the log's checksums win);
//! - valid batches beyond the durable end → sync them and advance the superblock.
//!
//! Applying a plan only truncates, rewrites indexes and writes the superblock last, so a
//! crash inside it leaves a state from which the next plan reaches the same result; a plan
//! made right after applying one has no actions (idempotence).

use super::segment::{index_name, log_name, parse_segment_name, LogReader, ReadBatchError};
use super::superblock::{
    DurablePoint, Superblock, MIRROR_OFFSET, SLOT_FILE_LEN, SLOT_NAMES, SUPERBLOCK_LEN,
};
use super::FenceReason;
use crate::env::{Disk, OpenMode};
use crate::format::{IndexEntry, Limits, INDEX_ENTRY_LEN};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

const TEMP_SUFFIX: &str = ".tmp";

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().expect("file path").to_os_string();
    name.push(TEMP_SUFFIX);
    path.with_file_name(name)
}

/// A rebuilt index gets one entry per this many log bytes (plus the first batch).
pub const REBUILT_INDEX_SPACING: u64 = 4096;

/// Start and end of one valid batch found by the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMark {
    pub position: u64,
    pub length: u64,
    pub base_offset: u64,
    pub next_offset: u64,
    pub timestamp: u64,
}

/// Where and why a walk stopped before the end of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub position: u64,
    pub kind: DamageKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DamageKind {
    /// Fewer bytes remain than the batch (or its header) needs.
    Truncated { needed: u64, available: u64 },
    /// Checksums, reserved bytes or lengths do not verify.
    Invalid(String),
    /// A verified batch with an unexpected base offset.
    OffsetMismatch { expected: u64, found: u64 },
    /// A verified batch of another partition.
    PartitionMismatch { expected: u64, found: u64 },
    /// The device failed the read.
    ReadFailed(String),
}

impl fmt::Display for DamageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DamageKind::Truncated { needed, available } => {
                write!(
                    f,
                    "incomplete batch: {available} bytes remain, {needed} needed"
                )
            }
            DamageKind::Invalid(why) => write!(f, "invalid batch: {why}"),
            DamageKind::OffsetMismatch { expected, found } => {
                write!(f, "batch base_offset {found}, expected {expected}")
            }
            DamageKind::PartitionMismatch { expected, found } => {
                write!(f, "batch partition_id {found}, expected {expected}")
            }
            DamageKind::ReadFailed(why) => write!(f, "read failed: {why}"),
        }
    }
}

/// A segment as the walk found it (and, after planning, as it will be).
#[derive(Debug, Clone)]
pub struct ScannedSegment {
    pub start_offset: u64,
    pub log_path: PathBuf,
    pub index_path: PathBuf,
    pub file_len: u64,
    /// End of the last valid batch (after planning: the length the log will have).
    pub valid_end: u64,
    /// Offset after the last valid batch.
    pub next_offset: u64,
    pub batches: Vec<BatchMark>,
    pub damage: Option<Damage>,
    /// The index file's entries and torn trailing bytes; `None` when the file is missing.
    pub index_file: Option<(Vec<IndexEntry>, usize)>,
    /// After planning: the entries the index holds.
    pub index: Vec<IndexEntry>,
}

impl ScannedSegment {
    pub fn max_timestamp(&self) -> u64 {
        self.batches.last().map_or(0, |b| b.timestamp)
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    CreateDir {
        path: PathBuf,
    },
    /// Cut a log at `from` (it was `len` bytes): the bytes above were never promised durable.
    Truncate {
        path: PathBuf,
        from: u64,
        len: u64,
        damage: String,
    },
    /// Remove a segment that lies wholly above the durable end.
    RemoveSegment {
        log_path: PathBuf,
        index_path: PathBuf,
        why: String,
    },
    /// Remove a file left by an interrupted index rebuild.
    RemoveTemp {
        path: PathBuf,
    },
    /// Remove an index whose log does not exist, above the durable end.
    RemoveStrayIndex {
        path: PathBuf,
    },
    /// Create an empty segment (the durable record names it and it held nothing durable).
    CreateSegment {
        start_offset: u64,
    },
    RewriteIndex {
        path: PathBuf,
        entries: Vec<IndexEntry>,
        why: String,
    },
    /// Sync these logs and indexes, then record the new durable end.
    AdvanceSuperblock {
        sync: Vec<PathBuf>,
        from: DurablePoint,
        to: DurablePoint,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::CreateDir { path } => write!(f, "create missing directory {}", path.display()),
            Action::Truncate {
                path,
                from,
                len,
                damage,
            } => write!(
                f,
                "truncate {} from {len} to {from} bytes: torn tail above the durable end ({damage})",
                path.display()
            ),
            Action::RemoveSegment {
                log_path, why, ..
            } => write!(f, "remove {} and its index: {why}", log_path.display()),
            Action::RemoveTemp { path } => write!(
                f,
                "remove {}: left by an interrupted index rebuild",
                path.display()
            ),
            Action::RemoveStrayIndex { path } => write!(
                f,
                "remove {}: its log does not exist and it lies above the durable end",
                path.display()
            ),
            Action::CreateSegment { start_offset } => write!(
                f,
                "create empty segment {}: the durable record names it and nothing in it was durable",
                log_name(*start_offset)
            ),
            Action::RewriteIndex { path, entries, why } => write!(
                f,
                "rebuild {} from the log ({} entries): {why}",
                path.display(),
                entries.len()
            ),
            Action::AdvanceSuperblock { from, to, .. } => write!(
                f,
                "sync the log and advance the durable end from segment {} position {} (next offset {}) to segment {} position {} (next offset {})",
                from.segment_start, from.position, from.next_offset,
                to.segment_start, to.position, to.next_offset
            ),
        }
    }
}

/// What recovery decided for a partition.
#[derive(Debug, Clone)]
pub struct RecoveryPlan {
    pub dir: PathBuf,
    pub partition_id: u64,
    pub superblock: Option<Superblock>,
    /// Segments as they will be after the actions, in offset order.
    pub segments: Vec<ScannedSegment>,
    pub actions: Vec<Action>,
    /// Observations that change nothing (for example, a damaged older superblock slot).
    pub notes: Vec<String>,
    /// Set when the partition must be fenced; then `actions` is empty.
    pub fence: Option<FenceReason>,
}

/// The coarse result, for reports and simulator coverage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Clean,
    DurableEndAdvanced,
    IndexRebuilt,
    TornTailTruncated,
    Fenced,
}

impl RecoveryPlan {
    /// Every outcome this plan reaches, most severe last.
    pub fn outcomes(&self) -> Vec<Outcome> {
        if self.fence.is_some() {
            return vec![Outcome::Fenced];
        }
        let mut outcomes = Vec::new();
        for action in &self.actions {
            let outcome = match action {
                Action::Truncate { .. } | Action::RemoveSegment { .. } => {
                    Outcome::TornTailTruncated
                }
                Action::RewriteIndex { .. } => Outcome::IndexRebuilt,
                Action::AdvanceSuperblock { .. } => Outcome::DurableEndAdvanced,
                _ => continue,
            };
            if !outcomes.contains(&outcome) {
                outcomes.push(outcome);
            }
        }
        if outcomes.is_empty() {
            outcomes.push(Outcome::Clean);
        }
        outcomes.sort();
        outcomes
    }
}

/// Reads the partition directory and decides what recovery does. Reads only.
pub fn plan(
    disk: &dyn Disk,
    dir: &Path,
    partition_id: u64,
    limits: &Limits,
) -> io::Result<RecoveryPlan> {
    let _span = tracing::info_span!("recovery_plan", dir = %dir.display(), partition_id).entered();
    let mut notes = Vec::new();
    let mut trusted = None;
    let decision = decide(disk, dir, partition_id, limits, &mut notes, &mut trusted)?;
    let (segments, actions, fence) = match decision {
        Ok((segments, actions)) => (segments, actions, None),
        Err(reason) => (Vec::new(), Vec::new(), Some(reason)),
    };
    for action in &actions {
        tracing::info!(%action, "recovery decision");
    }
    Ok(RecoveryPlan {
        dir: dir.to_path_buf(),
        partition_id,
        superblock: trusted,
        segments,
        actions,
        notes,
        fence,
    })
}

/// The segments as they will be and the actions that make them so, or why to fence.
type Decision = Result<(Vec<ScannedSegment>, Vec<Action>), FenceReason>;

/// The decisions of [`plan`]; `trusted` receives the superblock recovery trusts, `notes`
/// what it observed without acting on it.
fn decide(
    disk: &dyn Disk,
    dir: &Path,
    partition_id: u64,
    limits: &Limits,
    notes: &mut Vec<String>,
    trusted: &mut Option<Superblock>,
) -> io::Result<Decision> {
    let entries = disk.read_dir(dir)?;

    // The superblock pair: the newest valid slot wins.
    let mut superblock: Option<Superblock> = None;
    let mut slot_problems = Vec::new();
    // A slot that exists but does not verify may have held the newest record: then the
    // durable end may lie above what the surviving slot says.
    let mut damaged_slot: Option<PathBuf> = None;
    for name in SLOT_NAMES {
        let path = dir.join(name);
        if !entries.iter().any(|e| e.name == name) {
            slot_problems.push(format!("{} is missing", path.display()));
            continue;
        }
        let file = match disk
            .open(&path, OpenMode::Read)
            .and_then(|f| Ok((f.len()?, f)))
        {
            Ok(opened) => opened,
            Err(e) => {
                slot_problems.push(format!("{} is unreadable: {e}", path.display()));
                damaged_slot.get_or_insert(path);
                continue;
            }
        };
        let (len, file) = file;
        if len > SLOT_FILE_LEN {
            // Only the two copies are ever written: more means a superblock write landed
            // out of place, and the newest durable record may be the one missing.
            return Ok(Err(FenceReason::SuperblockMisplaced { path }));
        }
        // Either copy will do; the newer one wins (a torn write may leave one old, one new).
        let mut best_copy: Option<Superblock> = None;
        let mut copy_problems = Vec::new();
        for at in [0, MIRROR_OFFSET] {
            let mut bytes = [0u8; SUPERBLOCK_LEN];
            let copy = if at + SUPERBLOCK_LEN as u64 > len {
                Err(format!("copy at {at}: the file is {len} bytes"))
            } else {
                file.read_exact_at(&mut bytes, at)
                    .map_err(|e| format!("copy at {at} unreadable: {e}"))
                    .and_then(|()| {
                        Superblock::decode(&bytes).map_err(|e| format!("copy at {at}: {e}"))
                    })
            };
            match copy {
                Ok(record) => {
                    if best_copy.is_none_or(|b| record.sequence > b.sequence) {
                        best_copy = Some(record);
                    }
                }
                Err(problem) => copy_problems.push(problem),
            }
        }
        match best_copy {
            Some(slot) if slot.partition_id != partition_id => {
                return Ok(Err(FenceReason::SuperblockIdentity {
                    path,
                    expected: partition_id,
                    found: slot.partition_id,
                }));
            }
            Some(slot) => {
                if !copy_problems.is_empty() {
                    notes.push(format!(
                        "{}: {} (the other copy holds sequence {})",
                        path.display(),
                        copy_problems.join("; "),
                        slot.sequence
                    ));
                }
                if superblock.is_none_or(|best| slot.sequence > best.sequence) {
                    superblock = Some(slot);
                }
            }
            None => {
                slot_problems.push(format!(
                    "{} is damaged: {}",
                    path.display(),
                    copy_problems.join("; ")
                ));
                damaged_slot.get_or_insert(path);
            }
        }
    }
    let Some(superblock) = superblock else {
        return Ok(Err(FenceReason::NoSuperblock {
            dir: dir.to_path_buf(),
            problems: slot_problems.join("; "),
        }));
    };
    notes.extend(
        slot_problems
            .into_iter()
            .map(|p| format!("{p}; using sequence {}", superblock.sequence)),
    );
    *trusted = Some(superblock);
    let durable = superblock.durable;

    // Segment files, paired by start offset.
    let mut logs = Vec::new();
    let mut indexes = Vec::new();
    let mut actions = Vec::new();
    for entry in &entries {
        match parse_segment_name(&entry.name) {
            Some((start, true)) => logs.push(start),
            Some((start, false)) => indexes.push(start),
            None if entry.name == "offsets" || SLOT_NAMES.contains(&entry.name.as_str()) => {}
            None if entry.name.ends_with(TEMP_SUFFIX) => actions.push(Action::RemoveTemp {
                path: dir.join(&entry.name),
            }),
            None => notes.push(format!(
                "ignored unknown entry {}",
                dir.join(&entry.name).display()
            )),
        }
    }
    logs.sort_unstable();
    for &start in &indexes {
        if logs.binary_search(&start).is_err() {
            let path = dir.join(index_name(start));
            if start > durable.segment_start {
                actions.push(Action::RemoveStrayIndex { path });
            } else {
                return Ok(Err(FenceReason::MissingLog {
                    index: path,
                    log: dir.join(log_name(start)),
                }));
            }
        }
    }

    for sub in ["offsets", "offsets/consumers", "offsets/groups"] {
        let path = dir.join(sub);
        if !disk.exists(&path)? {
            actions.push(Action::CreateDir { path });
        }
    }

    let mut scanned = Vec::with_capacity(logs.len());
    for &start in &logs {
        let has_index = indexes.binary_search(&start).is_ok();
        scanned.push(scan_segment(
            disk,
            dir,
            start,
            has_index,
            partition_id,
            limits,
        )?);
    }

    let Some(k) = scanned
        .iter()
        .position(|s| s.start_offset == durable.segment_start)
    else {
        let nothing_durable = durable.position == 0 && durable.next_offset == durable.segment_start;
        if scanned.is_empty() && nothing_durable {
            actions.push(Action::CreateSegment {
                start_offset: durable.segment_start,
            });
            let segment = empty_segment(dir, durable.segment_start);
            return Ok(Ok((vec![segment], actions)));
        }
        return Ok(Err(FenceReason::DurableSegmentMissing {
            log: dir.join(log_name(durable.segment_start)),
            durable,
        }));
    };

    let mut survivors: Vec<ScannedSegment> = Vec::with_capacity(scanned.len());
    let mut cut = false;
    for (i, mut segment) in scanned.into_iter().enumerate() {
        if cut {
            actions.push(Action::RemoveSegment {
                log_path: segment.log_path.clone(),
                index_path: segment.index_path.clone(),
                why: "it lies above the durable end, after a truncated tail".into(),
            });
            continue;
        }
        if let Some(Damage {
            position: 0,
            kind: DamageKind::OffsetMismatch { found, .. },
        }) = &segment.damage
        {
            let reason = FenceReason::SegmentNameMismatch {
                log: segment.log_path.clone(),
                name_offset: segment.start_offset,
                first_batch_offset: *found,
            };
            return Ok(Err(reason));
        }
        if let Some(previous) = survivors.last() {
            if segment.start_offset != previous.next_offset {
                if i <= k {
                    return Ok(Err(FenceReason::ChainGap {
                        log: segment.log_path,
                        expected_start: previous.next_offset,
                        found_start: segment.start_offset,
                    }));
                }
                cut = true;
                actions.push(Action::RemoveSegment {
                    log_path: segment.log_path.clone(),
                    index_path: segment.index_path.clone(),
                    why: format!(
                        "it starts at {} but the log before it ends at {}, above the durable end",
                        segment.start_offset, previous.next_offset
                    ),
                });
                continue;
            }
        }
        if let Some(damage) = &segment.damage {
            let fence = match &damage.kind {
                DamageKind::ReadFailed(error) => Some(FenceReason::ReadFailed {
                    file: segment.log_path.clone(),
                    position: damage.position,
                    error: error.clone(),
                }),
                _ if i < k => Some(FenceReason::SealedSegmentCorrupt {
                    log: segment.log_path.clone(),
                    position: damage.position,
                    damage: damage.kind.to_string(),
                }),
                _ if i == k && damage.position < durable.position => {
                    Some(FenceReason::CorruptBelowDurable {
                        log: segment.log_path.clone(),
                        position: damage.position,
                        durable_position: durable.position,
                        damage: damage.kind.to_string(),
                    })
                }
                _ => None,
            };
            let fence = fence.filter(|_| !crate::canary("truncate-at-first-bad"));
            if let Some(reason) = fence {
                return Ok(Err(reason));
            }
        }
        if i < k && segment.batches.is_empty() {
            return Ok(Err(FenceReason::EmptySealedSegment {
                log: segment.log_path,
            }));
        }
        let canary_skips_checks =
            crate::canary("truncate-at-first-bad") && segment.damage.is_some();
        if i == k && !canary_skips_checks {
            if segment.valid_end < durable.position {
                return Ok(Err(FenceReason::LogShorterThanDurable {
                    log: segment.log_path,
                    valid_end: segment.valid_end,
                    durable_position: durable.position,
                }));
            }
            let next_at_durable = if durable.position == 0 {
                Some(segment.start_offset)
            } else {
                segment
                    .batches
                    .iter()
                    .find(|b| b.position + b.length == durable.position)
                    .map(|b| b.next_offset)
            };
            if next_at_durable != Some(durable.next_offset) {
                return Ok(Err(FenceReason::DurableOffsetMismatch {
                    log: segment.log_path,
                    durable,
                    found_next_offset: next_at_durable,
                }));
            }
        }
        if let (Some(damage), Some(slot)) = (&segment.damage, &damaged_slot) {
            let reason = FenceReason::DurableEndUncertain {
                log: segment.log_path.clone(),
                position: damage.position,
                damage: damage.kind.to_string(),
                slot: slot.clone(),
            };
            if !crate::canary("truncate-at-first-bad") {
                return Ok(Err(reason));
            }
        }
        if let Some(damage) = segment.damage.take() {
            // Above the durable end (checked above): never promised durable.
            debug_assert!(i > k || damage.position >= durable.position || canary_skips_checks);
            actions.push(Action::Truncate {
                path: segment.log_path.clone(),
                from: damage.position,
                len: segment.file_len,
                damage: damage.kind.to_string(),
            });
            cut = true;
        }
        survivors.push(segment);
    }

    for segment in &mut survivors {
        if let Some(action) = plan_index(segment) {
            actions.push(action);
        }
    }

    let last = survivors.last().expect("the durable segment survives");
    let recovered = DurablePoint {
        segment_start: last.start_offset,
        position: last.valid_end,
        next_offset: last.next_offset,
    };
    // Without the canary the durable segment always survives (damage before it fences).
    let first_synced = if crate::canary("truncate-at-first-bad") {
        k.min(survivors.len() - 1)
    } else {
        assert!(k < survivors.len(), "the durable segment survives");
        k
    };
    if recovered != durable {
        actions.push(Action::AdvanceSuperblock {
            sync: survivors[first_synced..]
                .iter()
                .flat_map(|s| [s.log_path.clone(), s.index_path.clone()])
                .collect(),
            from: durable,
            to: recovered,
        });
    }

    Ok(Ok((survivors, actions)))
}

fn empty_segment(dir: &Path, start_offset: u64) -> ScannedSegment {
    ScannedSegment {
        start_offset,
        log_path: dir.join(log_name(start_offset)),
        index_path: dir.join(index_name(start_offset)),
        file_len: 0,
        valid_end: 0,
        next_offset: start_offset,
        batches: Vec::new(),
        damage: None,
        index_file: Some((Vec::new(), 0)),
        index: Vec::new(),
    }
}

/// Walks one segment's log from byte zero, verifying every batch.
fn scan_segment(
    disk: &dyn Disk,
    dir: &Path,
    start_offset: u64,
    has_index: bool,
    partition_id: u64,
    limits: &Limits,
) -> io::Result<ScannedSegment> {
    let mut segment = empty_segment(dir, start_offset);
    let log = disk.open(&segment.log_path, OpenMode::Read)?;
    segment.file_len = log.len()?;
    let mut reader = LogReader::new(log.as_ref(), segment.file_len);
    let mut position = 0;
    let mut expected = start_offset;
    while position < segment.file_len {
        match reader.batch_at(position, expected, partition_id, limits, true) {
            Ok((verified, _)) => {
                let header = verified.header;
                segment.batches.push(BatchMark {
                    position,
                    length: header.batch_length,
                    base_offset: header.base_offset,
                    next_offset: header.next_offset(),
                    timestamp: header.base_timestamp,
                });
                position += header.batch_length;
                expected = header.next_offset();
            }
            Err(error) => {
                let kind = match error {
                    ReadBatchError::Truncated { needed, available } => {
                        DamageKind::Truncated { needed, available }
                    }
                    ReadBatchError::Format(e) => DamageKind::Invalid(e.to_string()),
                    ReadBatchError::OffsetMismatch { expected, found } => {
                        DamageKind::OffsetMismatch { expected, found }
                    }
                    ReadBatchError::PartitionMismatch { expected, found } => {
                        DamageKind::PartitionMismatch { expected, found }
                    }
                    ReadBatchError::Io(e) => DamageKind::ReadFailed(e.to_string()),
                };
                segment.damage = Some(Damage { position, kind });
                break;
            }
        }
    }
    segment.valid_end = position;
    segment.next_offset = expected;
    segment.index_file = None;
    if has_index {
        let read = disk
            .open(&segment.index_path, OpenMode::Read)
            .and_then(|index| {
                let len = index.len()?;
                // An index larger than one entry per smallest batch is garbage past that point.
                let max_len = (segment.file_len / 304 + 1) * INDEX_ENTRY_LEN as u64;
                let mut bytes = vec![0u8; len.min(max_len + INDEX_ENTRY_LEN as u64) as usize];
                index.read_exact_at(&mut bytes, 0)?;
                Ok((bytes, len))
            });
        match read {
            Ok((bytes, len)) => {
                let (entries, torn) = IndexEntry::decode_all(&bytes);
                let torn = torn + (len - bytes.len() as u64) as usize;
                segment.index_file = Some((entries, torn));
            }
            // The index is a hint: an unreadable one is rebuilt like a missing one.
            Err(e) => {
                tracing::warn!(index = %segment.index_path.display(), error = %e, "index unreadable")
            }
        }
    }
    Ok(segment)
}

/// Keeps the longest prefix of index entries that agrees with the log; rebuilds the rest.
fn plan_index(segment: &mut ScannedSegment) -> Option<Action> {
    let (file_entries, torn) = match &segment.index_file {
        Some((entries, torn)) => (entries.as_slice(), *torn),
        None => (&[][..], 0),
    };
    let mut kept = 0;
    let mut previous_position = None;
    for entry in file_entries {
        let agrees = segment
            .batches
            .binary_search_by_key(&entry.position, |b| b.position)
            .ok()
            .map(|i| segment.batches[i])
            .is_some_and(|b| b.base_offset == entry.offset && b.timestamp == entry.timestamp)
            && previous_position.is_none_or(|p| entry.position > p);
        if !agrees && !crate::canary("trust-stale-index") {
            break;
        }
        previous_position = Some(entry.position);
        kept += 1;
    }
    let mut entries = file_entries[..kept].to_vec();
    let why = if segment.index_file.is_none() {
        "the index is missing".to_string()
    } else if kept < file_entries.len() {
        format!(
            "entry {kept} of {} does not match a batch of the log",
            file_entries.len()
        )
    } else if torn > 0 {
        format!("{torn} trailing bytes are a torn entry")
    } else {
        segment.index = entries;
        return None;
    };
    let mut last_position = entries.last().map(|e| e.position);
    for batch in &segment.batches {
        let due = match last_position {
            None => true,
            Some(p) => batch.position > p && batch.position - p >= REBUILT_INDEX_SPACING,
        };
        if due {
            entries.push(IndexEntry {
                offset: batch.base_offset,
                timestamp: batch.timestamp,
                position: batch.position,
            });
            last_position = Some(batch.position);
        }
    }
    segment.index = entries.clone();
    Some(Action::RewriteIndex {
        path: segment.index_path.clone(),
        entries,
        why,
    })
}

/// Carries out a plan's actions, superblock last. Fenced plans have no actions.
pub fn apply(disk: &dyn Disk, plan: &RecoveryPlan) -> io::Result<Option<Superblock>> {
    let _span = tracing::info_span!("recovery_apply", dir = %plan.dir.display()).entered();
    assert!(plan.fence.is_none() || plan.actions.is_empty());
    let mut superblock = plan.superblock;
    let mut dir_changed = false;
    // The record recovery trusts may still be a dirty page (a crash between its write and
    // its sync): make it durable before anything is served on its word.
    if let Some(trusted) = &superblock {
        let path = plan.dir.join(SLOT_NAMES[trusted.slot()]);
        disk.open(&path, OpenMode::ReadWrite)?.sync_data()?;
    }
    for action in &plan.actions {
        tracing::info!(%action, "recovery applying");
        match action {
            Action::CreateDir { path } => {
                disk.create_dir_all(path)?;
                dir_changed = true;
            }
            Action::Truncate { path, from, .. } => {
                let file = disk.open(path, OpenMode::ReadWrite)?;
                file.set_len(*from)?;
                file.sync_data()?;
            }
            Action::RemoveSegment {
                log_path,
                index_path,
                ..
            } => {
                disk.remove_file(log_path)?;
                if disk.exists(index_path)? {
                    disk.remove_file(index_path)?;
                }
                dir_changed = true;
            }
            Action::RemoveStrayIndex { path } => {
                disk.remove_file(path)?;
                dir_changed = true;
            }
            Action::CreateSegment { start_offset } => {
                for name in [log_name(*start_offset), index_name(*start_offset)] {
                    disk.open(&plan.dir.join(name), OpenMode::CreateOrOpen)?
                        .sync_data()?;
                }
                dir_changed = true;
            }
            Action::RewriteIndex { path, entries, .. } => {
                // Built aside and renamed over: a crash leaves the old index or the new one,
                // never a partial file that would pass for a valid (sparser) index.
                let tmp = temp_path(path);
                let file = disk.open(&tmp, OpenMode::CreateOrOpen)?;
                file.set_len(0)?;
                let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
                file.write_all_at(&[io::IoSlice::new(&bytes)], 0)?;
                file.sync_data()?;
                drop(file);
                disk.rename(&tmp, path)?;
                dir_changed = true;
            }
            Action::RemoveTemp { path } => {
                disk.remove_file(path)?;
                dir_changed = true;
            }
            Action::AdvanceSuperblock { sync, to, .. } => {
                for path in sync {
                    disk.open(path, OpenMode::ReadWrite)?.sync_data()?;
                }
                // Always: a crashed process may have created these segment files without
                // syncing their names, and the superblock is about to name them durable.
                disk.sync_dir(&plan.dir)?;
                dir_changed = false;
                let current = superblock.expect("a plan that advances has a superblock");
                let next = Superblock {
                    sequence: current.sequence + 1,
                    partition_id: plan.partition_id,
                    durable: *to,
                };
                super::superblock::write_slot(disk, &plan.dir, &next)?;
                superblock = Some(next);
            }
        }
    }
    if dir_changed {
        disk.sync_dir(&plan.dir)?;
    }
    Ok(superblock)
}

//! Recovery's reading half: everything [`super::plan`] learns from a partition directory,
//! with no decision taken. Decisions are in [`super::decide`], over a [`Survey`]; which
//! record to trust (where the tail to scan begins) is [`super::trust`]'s.
//!
//! What is read is what the device holds, not what a page cache remembers: the superblock
//! slots and the log files at and after the durable segment have their clean cached pages
//! dropped first ([`crate::env::DiskFile::evict_cache`]). After a failed writeback Linux
//! keeps the new bytes cached and marks them clean; a restarted process that read them would
//! take bytes that never reached the device for valid ones, and record them durable. A node's
//! boot skips the dropping when its exit record rules that out (`PageCache::Trusted`: a clean
//! exit, or a new kernel): the survey then reads through a disk whose eviction is a no-op.

use super::trust::{self, SlotRead};
use crate::config::Durability;
use crate::env::{DirEntry, Disk, OpenMode};
use crate::format::{IndexEntry, INDEX_ENTRY_LEN};
use crate::format::{BATCH_HEADER_LEN, FRAME_HEADER_LEN};
use crate::partition::offsets::{self, ConsumerId, ConsumerKind, StoredOffset};
use crate::partition::segment::{index_name, parse_segment_name, Check, LogReader, ReadBatchError};
use crate::partition::superblock::{PartitionIdentity, Superblock, MIRROR_OFFSET, SLOT_NAMES};
use crate::slots::{self, SlotBytes};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Suffix of the file an index rebuild writes before renaming it over the index.
pub const INDEX_TEMP_SUFFIX: &str = ".index.tmp";

/// Start and end of one valid batch found by a walk.
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
    /// The start of the batch that could not be taken.
    pub position: u64,
    pub kind: DamageKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DamageKind {
    /// Fewer bytes remain than the batch (or its header) needs.
    Truncated { needed: u64, available: u64 },
    /// Checksums, reserved bytes, lengths or offsets do not verify.
    Invalid(String),
    /// A verified batch with an unexpected base offset.
    OffsetMismatch { expected: u64, found: u64 },
    /// A verified batch of another partition.
    PartitionMismatch { expected: u64, found: u64 },
    /// The device failed to read the sector at `sector`.
    Unreadable { sector: u64, error: String },
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
            DamageKind::Unreadable { sector, error } => {
                write!(f, "the sector at {sector} cannot be read: {error}")
            }
        }
    }
}

/// An `.index` file as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRead {
    pub entries: Vec<IndexEntry>,
    /// Bytes after the last whole entry (a torn entry, or garbage past a plausible length).
    pub torn_bytes: u64,
}

/// One segment's log as the walk found it.
#[derive(Debug, Clone)]
pub struct ScannedSegment {
    pub start_offset: u64,
    pub log_path: PathBuf,
    pub index_path: PathBuf,
    pub file_len: u64,
    /// Every valid batch from byte zero up to the first damage.
    pub batches: Vec<BatchMark>,
    /// End of the last valid batch.
    pub valid_end: u64,
    /// Offset after the last valid batch.
    pub next_offset: u64,
    pub damage: Option<Damage>,
    /// `None` when the index file is missing or unreadable.
    pub index: Option<IndexRead>,
}

impl ScannedSegment {
    /// The offset the walk reached at byte `position` (a batch boundary), if any.
    pub fn offset_at(&self, position: u64) -> Option<u64> {
        if position == 0 {
            return Some(self.start_offset);
        }
        self.batches
            .binary_search_by_key(&position, |b| b.position + b.length)
            .ok()
            .map(|i| self.batches[i].next_offset)
    }

    pub fn max_timestamp(&self) -> u64 {
        self.batches.last().map_or(0, |b| b.timestamp)
    }
}

/// Everything recovery read from one partition directory.
#[derive(Debug, Clone)]
pub struct Survey {
    pub dir: PathBuf,
    pub identity: PartitionIdentity,
    pub offset_durability: Durability,
    /// `superblock.a`, `superblock.b`.
    pub slots: [SlotRead; 2],
    /// Segment logs in offset order (empty when the superblock pair already fences).
    pub segments: Vec<ScannedSegment>,
    /// Start offsets of `.index` files whose log does not exist.
    pub orphan_indexes: Vec<u64>,
    /// Leftovers of interrupted index rebuilds and offset stores.
    pub temps: Vec<PathBuf>,
    /// Directory entries recovery does not know (left alone).
    pub unknown: Vec<PathBuf>,
    /// `offsets`, `offsets/consumers`, `offsets/groups` when missing (parents first).
    pub missing_dirs: Vec<PathBuf>,
    pub offsets: Vec<(ConsumerId, StoredOffset)>,
}

/// Reads a partition directory for recovery. Changes no bytes; drops clean cached pages of
/// the files whose device contents matter. `slots`: the superblock slots as a caller read
/// them from the device ([`read_slots`]) with nothing written since, or `None` to read them.
pub fn survey(
    disk: &dyn Disk,
    dir: &Path,
    identity: PartitionIdentity,
    offset_durability: Durability,
    slots: Option<[SlotRead; 2]>,
) -> io::Result<Survey> {
    let entries = disk.read_dir(dir)?;
    let slots = slots.unwrap_or_else(|| [0, 1].map(|slot| read_slot(disk, dir, &entries, slot)));
    let mut survey = Survey {
        dir: dir.to_path_buf(),
        identity,
        offset_durability,
        slots,
        segments: Vec::new(),
        orphan_indexes: Vec::new(),
        temps: Vec::new(),
        unknown: Vec::new(),
        missing_dirs: Vec::new(),
        offsets: Vec::new(),
    };
    let mut logs = Vec::new();
    let mut indexes = Vec::new();
    for entry in &entries {
        match parse_segment_name(&entry.name) {
            Some((start, true)) => logs.push(start),
            Some((start, false)) => indexes.push(start),
            None if entry.name == "offsets" || SLOT_NAMES.contains(&entry.name.as_str()) => {}
            None if is_index_temp(&entry.name) => survey.temps.push(dir.join(&entry.name)),
            None => survey.unknown.push(dir.join(&entry.name)),
        }
    }
    logs.sort_unstable();
    survey.orphan_indexes = indexes
        .iter()
        .copied()
        .filter(|start| logs.binary_search(start).is_err())
        .collect();
    survey_offsets(disk, &mut survey)?;
    // Without a trusted record the plan fences: nothing more is worth reading.
    let Ok(trusted) = trust::trusted_record(dir, identity, &survey.slots) else {
        return Ok(survey);
    };
    let tail_from = trusted.record.durable.segment_start;
    for start in logs {
        let has_index = indexes.binary_search(&start).is_ok();
        survey.segments.push(scan_segment(
            disk,
            dir,
            start,
            has_index,
            u64::from(identity.partition_id),
            start >= tail_from,
        )?);
    }
    Ok(survey)
}

fn is_index_temp(name: &str) -> bool {
    name.strip_suffix(INDEX_TEMP_SUFFIX)
        .and_then(|stem| parse_segment_name(&format!("{stem}.index")))
        .is_some()
}

/// The superblock slots of the partition directory `dir`, read from the device (the clean
/// cached pages dropped first), as recovery's survey reads them.
pub fn read_slots(disk: &dyn Disk, dir: &Path) -> io::Result<[SlotRead; 2]> {
    let entries = disk.read_dir(dir)?;
    Ok([0, 1].map(|slot| read_slot(disk, dir, &entries, slot)))
}

/// The identity the newest valid record of `slots` names.
pub fn identity_in(slots: &[SlotRead; 2]) -> Option<PartitionIdentity> {
    let records = slots.iter().filter_map(|slot| match slot {
        SlotRead::Valid { record, .. } => Some(record),
        _ => None,
    });
    records.max_by_key(|r| r.sequence).map(|r| r.identity)
}

/// Reads one slot file from the device: either copy will do, the newer one wins (a torn
/// write may leave one old and one new).
fn read_slot(disk: &dyn Disk, dir: &Path, entries: &[DirEntry], slot: usize) -> SlotRead {
    let copies = match slots::read(disk, dir, entries, SLOT_NAMES[slot]) {
        SlotBytes::Missing => return SlotRead::Missing,
        SlotBytes::Unreadable(e) => return SlotRead::Unreadable(e),
        SlotBytes::Oversized { len } => return SlotRead::Oversized { len },
        SlotBytes::Copies(copies) => copies,
    };
    let mut problems = Vec::new();
    let mut valid = Vec::with_capacity(2);
    for (copy, at) in copies.iter().zip([0, MIRROR_OFFSET]) {
        let decoded = copy
            .clone()
            .and_then(|bytes| Superblock::decode(&bytes).map_err(|e| format!("copy at {at}: {e}")));
        match decoded {
            Ok(record) => valid.push((at, record)),
            Err(problem) => problems.push(problem),
        }
    }
    let best = valid.iter().map(|(_, r)| *r).max_by_key(|r| r.sequence);
    for (at, record) in &valid {
        if let Some(best) = best.filter(|b| b.sequence != record.sequence) {
            // A write whose second page never landed (a lying sync, then a power loss).
            problems.push(format!(
                "copy at {at} holds sequence {}, older than {}",
                record.sequence, best.sequence
            ));
        }
    }
    match best {
        Some(record) => SlotRead::Valid { record, problems },
        None => SlotRead::Damaged(problems.join("; ")),
    }
}

fn survey_offsets(disk: &dyn Disk, survey: &mut Survey) -> io::Result<()> {
    let root = survey.dir.join("offsets");
    let owner = offsets::owner(&survey.identity);
    if !disk.exists(&root)? {
        survey.missing_dirs.push(root.clone());
    }
    for kind in ConsumerKind::ALL {
        let kind_dir = root.join(kind.dir());
        if !disk.exists(&kind_dir)? {
            survey.missing_dirs.push(kind_dir);
            continue;
        }
        for entry in disk.read_dir(&kind_dir)? {
            let path = kind_dir.join(&entry.name);
            let temp_of = entry.name.strip_suffix(offsets::TEMP_SUFFIX);
            if let Some(id) = offsets::parse_name(&entry.name) {
                let consumer = ConsumerId { kind, id };
                survey
                    .offsets
                    .push((consumer, offsets::read(disk, &path, owner, consumer)));
            } else if temp_of.and_then(offsets::parse_name).is_some() {
                survey.temps.push(path);
            } else {
                survey.unknown.push(path);
            }
        }
    }
    Ok(())
}

/// Walks one segment's log from byte zero, verifying every batch. `evict`: read what the
/// device holds (the log lies at or after the durable segment).
fn scan_segment(
    disk: &dyn Disk,
    dir: &Path,
    start_offset: u64,
    has_index: bool,
    partition_id: u64,
    evict: bool,
) -> io::Result<ScannedSegment> {
    let log_path = dir.join(crate::partition::segment::log_name(start_offset));
    let _span = tracing::debug_span!("scan_segment", log = %log_path.display(), evict).entered();
    let log = disk.open(&log_path, OpenMode::Read)?;
    if evict {
        log.evict_cache()?;
    }
    let file_len = log.len()?;
    let mut reader = LogReader::new(log.as_ref(), file_len);
    let mut batches = Vec::new();
    let mut position = 0;
    let mut expected = start_offset;
    let mut damage = None;
    while position < file_len {
        match reader.batch_at(position, expected, partition_id, Check::Full) {
            Ok((verified, _)) => {
                let header = verified.header;
                batches.push(BatchMark {
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
                damage = Some(Damage {
                    position,
                    kind: damage_kind(error),
                });
                break;
            }
        }
    }
    let index_path = dir.join(index_name(start_offset));
    let index = if has_index {
        read_index(disk, &index_path, file_len)
    } else {
        None
    };
    Ok(ScannedSegment {
        start_offset,
        log_path,
        index_path,
        file_len,
        batches,
        valid_end: position,
        next_offset: expected,
        damage,
        index,
    })
}

fn damage_kind(error: ReadBatchError) -> DamageKind {
    match error {
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
        ReadBatchError::Unreadable { sector, error } => DamageKind::Unreadable {
            sector,
            error: error.to_string(),
        },
        ReadBatchError::Unopenable { error } => {
            unreachable!("a survey reads a file it has open: {error}")
        }
    }
}

/// Reads an index file; bytes past one entry per smallest possible batch are garbage (and
/// are not read). An unreadable index is a hint lost: rebuilt like a missing one.
fn read_index(disk: &dyn Disk, path: &Path, log_len: u64) -> Option<IndexRead> {
    let smallest_batch = (BATCH_HEADER_LEN + FRAME_HEADER_LEN) as u64;
    let plausible = (log_len / smallest_batch + 1) * INDEX_ENTRY_LEN as u64;
    let read = disk.open(path, OpenMode::Read).and_then(|index| {
        let len = index.len()?;
        let mut bytes = vec![0u8; len.min(plausible) as usize];
        index.read_exact_at(&mut bytes, 0)?;
        Ok((bytes, len))
    });
    match read {
        Ok((bytes, len)) => {
            let (entries, torn) = IndexEntry::decode_all(&bytes);
            Some(IndexRead {
                entries,
                torn_bytes: torn as u64 + (len - bytes.len() as u64),
            })
        }
        Err(e) => {
            tracing::warn!(index = %path.display(), error = %e, "index unreadable: rebuilt from the log");
            None
        }
    }
}

//! The survey half of the metadata boot plan: what the metadata directory holds, read from
//! the device and judged by nobody yet. The directory's listing, each superblock slot's
//! newest valid record ([`read_slot`]), the snapshot files' bytes ([`read_snapshots`]), the
//! journal's bytes ([`read_journal`]) and, when no record exists, whether anything was ever
//! written ([`journal_is_empty`], [`has_partition_data`]).
//!
//! A file the device cannot read is a [`MetaRefusal::Unreadable`], not an I/O error: boot
//! refuses and names it. Only a failed listing or length is an I/O error. Nothing here
//! writes; the caller reads in the order the decisions need the findings (a later read is
//! skipped when an earlier finding already decided), so the survey never touches a file
//! the plan does not look at.

use super::actions::MetaRefusal;
use crate::env::{DirEntry, Disk, OpenMode};
use crate::metadata::record::{MetaRecord, SLOT_NAMES};
use crate::metadata::{adoption, snapshot, JOURNAL};
use crate::slots::{self, SlotBytes};
use std::io;
use std::path::Path;

/// The metadata directory's entries (none when it does not exist).
pub(super) fn list(disk: &dyn Disk, dir: &Path) -> io::Result<Vec<DirEntry>> {
    Ok(if disk.exists(dir)? {
        disk.read_dir(dir)?
    } else {
        Vec::new()
    })
}

/// A superblock slot as read.
pub(super) enum Slot {
    Missing,
    Problem(String),
    Misplaced(String),
    /// The newest valid record of the slot; `degraded` when the file's other copy is not
    /// the same valid record.
    Valid {
        record: MetaRecord,
        degraded: bool,
    },
}

pub(super) fn read_slot(disk: &dyn Disk, dir: &Path, entries: &[DirEntry], slot: usize) -> Slot {
    let copies = match slots::read(disk, dir, entries, SLOT_NAMES[slot]) {
        SlotBytes::Missing => return Slot::Missing,
        SlotBytes::Unreadable(e) => return Slot::Problem(format!("unreadable: {e}")),
        SlotBytes::Oversized { len } => {
            return Slot::Misplaced(format!(
                "the slot file is {len} bytes, longer than one slot"
            ))
        }
        SlotBytes::Copies(copies) => copies,
    };
    let mut best: Option<MetaRecord> = None;
    let mut problems = Vec::new();
    let mut valid = Vec::new();
    for copy in *copies {
        match copy.and_then(|bytes| MetaRecord::decode(&bytes).map_err(|e| e.to_string())) {
            Ok(record) => {
                valid.push(record);
                if best.is_none_or(|b| record.sequence > b.sequence) {
                    best = Some(record);
                }
            }
            Err(problem) => problems.push(problem),
        }
    }
    match best {
        Some(record) if record.slot() != slot => Slot::Misplaced(format!(
            "it holds sequence {}, which belongs in the other slot",
            record.sequence
        )),
        Some(record) => Slot::Valid {
            record,
            // The other copy is unreadable, rotten or older: the record survives in one.
            degraded: valid.len() < 2 || valid.iter().any(|r| *r != record),
        },
        None => Slot::Problem(problems.join("; ")),
    }
}

/// A metadata file's bytes as the device holds them; a file the device cannot read is a
/// refusal, not an I/O error.
fn read_file(disk: &dyn Disk, path: &Path) -> Result<Vec<u8>, MetaRefusal> {
    let read = || -> io::Result<Vec<u8>> {
        let file = disk.open(path, OpenMode::Read)?;
        file.evict_cache()?;
        let len = file.len()?;
        let mut bytes = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
        file.read_exact_at(&mut bytes, 0)?;
        Ok(bytes)
    };
    read().map_err(|e| MetaRefusal::Unreadable {
        path: path.to_path_buf(),
        error: e.to_string(),
    })
}

/// Whether `streams/` under `root` holds any directory.
pub(super) fn has_partition_data(disk: &dyn Disk, root: &Path) -> io::Result<bool> {
    let streams = root.join("streams");
    Ok(disk.exists(&streams)? && disk.read_dir(&streams)?.iter().any(|e| e.is_dir))
}
/// Whether the journal is absent or empty (asked only when no record exists).
pub(super) fn journal_is_empty(
    disk: &dyn Disk,
    dir: &Path,
    entries: &[DirEntry],
) -> io::Result<bool> {
    Ok(match entries.iter().any(|e| e.name == JOURNAL) {
        true => disk.open(&dir.join(JOURNAL), OpenMode::Read)?.len()? == 0,
        false => true,
    })
}

/// The snapshot files as read.
pub(super) struct SnapshotFiles {
    /// `snapshot.bin`, when the record names a snapshot and the file is listed: its bytes,
    /// or why the device cannot read them.
    pub(super) main: Option<Result<Vec<u8>, MetaRefusal>>,
    /// `snapshot.bin.tmp`, when listed (an unreadable temp reads as empty: one that does
    /// not match, since only the recorded snapshot matters).
    pub(super) temp: Option<Vec<u8>>,
}

/// Reads the snapshot files: the temp when listed, then `snapshot.bin` when `wanted` (the
/// record names a snapshot) and listed.
pub(super) fn read_snapshots(
    disk: &dyn Disk,
    dir: &Path,
    entries: &[DirEntry],
    wanted: bool,
) -> SnapshotFiles {
    let present = |name: &str| entries.iter().any(|e| e.name == name);
    let temp = present(snapshot::TEMP)
        .then(|| read_file(disk, &dir.join(snapshot::TEMP)).unwrap_or_default());
    let main =
        (wanted && present(snapshot::FILE)).then(|| read_file(disk, &dir.join(snapshot::FILE)));
    SnapshotFiles { main, temp }
}

/// The journal's bytes (none when it is not listed).
pub(super) fn read_journal(
    disk: &dyn Disk,
    dir: &Path,
    entries: &[DirEntry],
) -> Result<Vec<u8>, MetaRefusal> {
    match entries.iter().any(|e| e.name == JOURNAL) {
        true => read_file(disk, &dir.join(JOURNAL)),
        false => Ok(Vec::new()),
    }
}

/// The adoption files as read (`crate::metadata::adoption`).
pub struct AdoptionFiles {
    /// `adopt.bin`, when listed: its bytes, or why the device cannot read them.
    pub(super) file: Option<Result<Vec<u8>, MetaRefusal>>,
    /// Whether `adopt.bin.tmp` is listed.
    pub(super) temp: bool,
}

pub(super) fn read_adoption(disk: &dyn Disk, dir: &Path, entries: &[DirEntry]) -> AdoptionFiles {
    let present = |name: &str| entries.iter().any(|e| e.name == name);
    AdoptionFiles {
        file: present(adoption::FILE).then(|| read_file(disk, &dir.join(adoption::FILE))),
        temp: present(adoption::TEMP),
    }
}

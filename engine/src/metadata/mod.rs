//! The metadata plane, in `{root}/metadata/`: the journal of metadata operations
//! ([`journal`]), the checkpoint snapshot ([`snapshot`]) and the superblock pair that ties
//! them together ([`record`]).
//!
//! Write path: an operation is journaled and synced before it is applied or answered; the
//! directory work it implies follows, then a superblock record names the new durable journal
//! end and the applied op. Every so often a checkpoint writes the whole state as a snapshot
//! and empties the journal.
//!
//! Boot ([`plan`], then [`MetadataPlane::open`]): the newest valid superblock record; the
//! snapshot it names (missing, another one, or damaged → refuse); the journal walked from byte
//! zero (a damaged entry below the durable end, or followed by a whole later entry → refuse;
//! a broken hash chain → refuse; a torn tail above the durable end → truncate); the entries
//! after the snapshot replayed onto its state. Refusals change no byte.

pub mod hooks;
pub mod journal;
pub mod record;
pub mod snapshot;

pub use hooks::{MetadataHooks, PlanHook};

use crate::env::{DirEntry, Disk, DiskFile, Env, OpenMode};
use crate::slots::{self, SlotBytes};
use crate::state::ops::MetaOp;
use crate::state::{Applied, MetaState, OpContext};
use journal::{Entry, Origin};
use record::{JournalPoint, MetaRecord, SnapshotRef, SLOT_NAMES};
use snapshot::Snapshot;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const DIR: &str = "metadata";
pub const JOURNAL: &str = "journal.wal";

/// Why the node refuses to boot. Every variant names the file and, where there is one, the
/// position; the files are left as they are for an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaRefusal {
    NoSuperblock {
        dir: PathBuf,
        problems: String,
    },
    SuperblockMisplaced {
        path: PathBuf,
        detail: String,
    },
    /// Partition directories exist but no metadata does: booting would treat them as
    /// leftovers of deleted entities and remove them.
    DataWithoutMetadata {
        streams: PathBuf,
    },
    SnapshotMissing {
        path: PathBuf,
        op: u64,
    },
    SnapshotMismatch {
        path: PathBuf,
        expected: SnapshotRef,
        found_len: u64,
        found_checksum: u64,
    },
    SnapshotUndecodable {
        path: PathBuf,
        error: String,
    },
    /// The snapshot verifies but holds another op or cluster than the record says.
    SnapshotContradicts {
        path: PathBuf,
        detail: String,
    },
    JournalShorterThanDurable {
        path: PathBuf,
        len: u64,
        durable_len: u64,
    },
    /// A damaged entry where the journal was promised durable.
    JournalCorrupt {
        path: PathBuf,
        position: u64,
        durable_len: u64,
        damage: String,
    },
    /// A damaged entry followed by a whole later entry: not a torn tail.
    JournalInteriorCorruption {
        path: PathBuf,
        position: u64,
        later_entry: u64,
        damage: String,
    },
    /// Damage above the durable end while the other superblock slot is damaged or missing:
    /// the durable end may lie above it.
    JournalUncertain {
        path: PathBuf,
        position: u64,
        damage: String,
        slot: PathBuf,
    },
    JournalChainBroken {
        path: PathBuf,
        position: u64,
        detail: String,
    },
    EntryDoesNotApply {
        path: PathBuf,
        position: u64,
        op: u64,
        error: String,
    },
    /// The device cannot read a metadata file (a bad sector).
    Unreadable {
        path: PathBuf,
        error: String,
    },
}

crate::names::variant_names!(MetaRefusal, coverage "meta:":
    NoSuperblock,
    SuperblockMisplaced,
    DataWithoutMetadata,
    SnapshotMissing,
    SnapshotMismatch,
    SnapshotUndecodable,
    SnapshotContradicts,
    JournalShorterThanDurable,
    JournalCorrupt,
    JournalInteriorCorruption,
    JournalUncertain,
    JournalChainBroken,
    EntryDoesNotApply,
    Unreadable,
);

impl MetaRefusal {
    /// The metadata file the refusal is about.
    pub fn file(&self) -> &Path {
        use MetaRefusal::*;
        match self {
            NoSuperblock { dir, .. } => dir,
            DataWithoutMetadata { streams } => streams,
            SuperblockMisplaced { path, .. }
            | SnapshotMissing { path, .. }
            | SnapshotMismatch { path, .. }
            | SnapshotUndecodable { path, .. }
            | SnapshotContradicts { path, .. }
            | JournalShorterThanDurable { path, .. }
            | JournalCorrupt { path, .. }
            | JournalInteriorCorruption { path, .. }
            | JournalUncertain { path, .. }
            | JournalChainBroken { path, .. }
            | EntryDoesNotApply { path, .. }
            | Unreadable { path, .. } => path,
        }
    }
}

impl fmt::Display for MetaRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use MetaRefusal::*;
        match self {
            NoSuperblock { dir, problems } => write!(f, "{}: no valid metadata superblock ({problems})", dir.display()),
            SuperblockMisplaced { path, detail } => write!(f, "{}: {detail}", path.display()),
            DataWithoutMetadata { streams } => write!(f, "{} holds partition directories but there is no metadata: refusing to boot rather than treat them as leftovers", streams.display()),
            SnapshotMissing { path, op } => write!(f, "{}: the superblock names a snapshot at op {op}, and it is missing", path.display()),
            SnapshotMismatch { path, expected, found_len, found_checksum } => write!(f, "{}: the superblock names a snapshot of {} bytes with checksum {:#018x} (op {}), found {found_len} bytes with checksum {found_checksum:#018x}", path.display(), expected.len, expected.checksum, expected.op),
            SnapshotUndecodable { path, error } => write!(f, "{}: the snapshot does not decode: {error}", path.display()),
            SnapshotContradicts { path, detail } => write!(f, "{}: {detail}", path.display()),
            JournalShorterThanDurable { path, len, durable_len } => write!(f, "{}: {len} bytes, but the superblock records {durable_len} bytes as synced (lost write or lying fsync)", path.display()),
            JournalCorrupt { path, position, durable_len, damage } => write!(f, "{} at position {position}, below the durable end {durable_len}: {damage}", path.display()),
            JournalInteriorCorruption { path, position, later_entry, damage } => write!(f, "{} at position {position}: {damage}, yet a whole entry follows at {later_entry}: interior corruption, not a torn tail", path.display()),
            JournalUncertain { path, position, damage, slot } => write!(f, "{} at position {position}: {damage}; {} is damaged or missing, so the durable end may lie above this damage", path.display(), slot.display()),
            JournalChainBroken { path, position, detail } => write!(f, "{} at position {position}: the hash chain is broken: {detail}", path.display()),
            EntryDoesNotApply { path, position, op, error } => write!(f, "{} at position {position}: op {op} does not apply to the state before it: {error}", path.display()),
            Unreadable { path, error } => write!(f, "{}: cannot be read: {error}", path.display()),
        }
    }
}

/// One step of a metadata boot plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaAction {
    /// Cut the journal at `from` (it was `len` bytes): a torn tail above the durable end, or
    /// entries a checkpoint already holds.
    TruncateJournal { from: u64, len: u64, why: String },
    /// Finish a checkpoint: rename `snapshot.bin.tmp` (the recorded snapshot) over
    /// `snapshot.bin`.
    FinishSnapshot,
    /// Remove a `snapshot.bin.tmp` the record does not name (a checkpoint interrupted before
    /// its record).
    RemoveTempSnapshot,
    /// The trusted record survives in one copy of its slot file: write the next two records
    /// (one into each slot), so each slot file holds two good copies again.
    RewriteSlot { path: PathBuf },
}

crate::names::variant_names!(MetaAction:
    TruncateJournal,
    FinishSnapshot,
    RemoveTempSnapshot,
    RewriteSlot,
);

impl fmt::Display for MetaAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaAction::TruncateJournal { from, len, why } => {
                write!(f, "truncate {JOURNAL} from {len} to {from} bytes: {why}")
            }
            MetaAction::FinishSnapshot => {
                write!(
                    f,
                    "rename {} over {}: finish the recorded checkpoint",
                    snapshot::TEMP,
                    snapshot::FILE
                )
            }
            MetaAction::RemoveTempSnapshot => write!(
                f,
                "remove {}: a checkpoint interrupted before its record",
                snapshot::TEMP
            ),
            MetaAction::RewriteSlot { path } => write!(
                f,
                "write the next records into both superblock slots: the newest survives in one copy of {}",
                path.display()
            ),
        }
    }
}

/// One journal entry replayed at boot.
#[derive(Debug, Clone)]
pub struct Replayed {
    pub op: u64,
    pub position: u64,
    pub meta_op: MetaOp,
    pub applied: Applied,
}

/// What boot found in the metadata directory, and what it will do.
#[derive(Debug, Clone)]
pub struct MetaPlan {
    pub dir: PathBuf,
    /// Nothing is there yet: the node initialises the plane.
    pub first_boot: bool,
    pub record: Option<MetaRecord>,
    /// The state after the snapshot and the replayed entries.
    pub state: MetaState,
    /// The entries after the snapshot, in order.
    pub replayed: Vec<Replayed>,
    /// The end of the last valid entry (after the actions).
    pub journal_end: u64,
    /// The last op and its checksum (the snapshot's when no entry follows it).
    pub last_op: u64,
    pub last_checksum: u128,
    pub actions: Vec<MetaAction>,
    pub notes: Vec<String>,
    pub refusal: Option<MetaRefusal>,
}

impl MetaPlan {
    /// A plan with nothing in it yet.
    fn empty(dir: &Path) -> MetaPlan {
        MetaPlan {
            dir: dir.to_path_buf(),
            first_boot: false,
            record: None,
            state: MetaState::default(),
            replayed: Vec::new(),
            journal_end: 0,
            last_op: 0,
            last_checksum: 0,
            actions: Vec::new(),
            notes: Vec::new(),
            refusal: None,
        }
    }

    fn refused(dir: &Path, refusal: MetaRefusal, notes: Vec<String>) -> MetaPlan {
        MetaPlan {
            notes,
            refusal: Some(refusal),
            ..MetaPlan::empty(dir)
        }
    }
}

/// A superblock slot as read.
enum Slot {
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

fn read_slot(disk: &dyn Disk, dir: &Path, entries: &[DirEntry], slot: usize) -> Slot {
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
fn has_partition_data(disk: &dyn Disk, root: &Path) -> io::Result<bool> {
    let streams = root.join("streams");
    Ok(disk.exists(&streams)? && disk.read_dir(&streams)?.iter().any(|e| e.is_dir))
}

/// Reads the metadata directory of `root` and decides what boot does. Changes no bytes.
pub fn plan(disk: &dyn Disk, root: &Path) -> io::Result<MetaPlan> {
    let dir = root.join(DIR);
    let _span = tracing::info_span!("metadata_plan", dir = %dir.display()).entered();
    let entries = if disk.exists(&dir)? {
        disk.read_dir(&dir)?
    } else {
        Vec::new()
    };
    let slots = [0, 1].map(|s| read_slot(disk, &dir, &entries, s));
    let mut notes = Vec::new();
    for (slot, read) in slots.iter().enumerate() {
        if let Slot::Misplaced(detail) = read {
            let path = dir.join(SLOT_NAMES[slot]);
            return Ok(MetaPlan::refused(
                &dir,
                MetaRefusal::SuperblockMisplaced {
                    path,
                    detail: detail.clone(),
                },
                notes,
            ));
        }
    }
    let best = slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            Slot::Valid { record, .. } => Some((i, *record)),
            _ => None,
        })
        .max_by_key(|(_, r)| r.sequence);
    let Some((trusted_slot, record)) = best else {
        return no_record(disk, root, &dir, &entries, &slots);
    };
    let other = 1 - trusted_slot;
    let uncertain = match &slots[other] {
        Slot::Valid { .. } => None,
        Slot::Missing => {
            notes.push(format!(
                "{} is missing",
                dir.join(SLOT_NAMES[other]).display()
            ));
            Some(dir.join(SLOT_NAMES[other]))
        }
        Slot::Problem(p) | Slot::Misplaced(p) => {
            notes.push(format!("{}: {p}", dir.join(SLOT_NAMES[other]).display()));
            Some(dir.join(SLOT_NAMES[other]))
        }
    };
    let mut actions = Vec::new();
    if let Slot::Valid { degraded: true, .. } = &slots[trusted_slot] {
        let path = dir.join(SLOT_NAMES[trusted_slot]);
        notes.push(format!(
            "{}: the newest record survives in one copy only",
            path.display()
        ));
        actions.push(MetaAction::RewriteSlot { path });
    }
    let state = match load_snapshot(disk, &dir, &entries, &record, &mut actions)? {
        Ok(state) => state,
        Err(refusal) => return Ok(MetaPlan::refused(&dir, refusal, notes)),
    };
    let journal_path = dir.join(JOURNAL);
    let journal_bytes = if entries.iter().any(|e| e.name == JOURNAL) {
        match read_file(disk, &journal_path) {
            Ok(bytes) => bytes,
            Err(refusal) => return Ok(MetaPlan::refused(&dir, refusal, notes)),
        }
    } else {
        Vec::new()
    };
    let walked = walk_journal(
        &journal_path,
        &journal_bytes,
        &record,
        uncertain.as_deref(),
        state,
    );
    let plan = match walked {
        Ok(walk) => {
            actions.extend(walk.actions);
            MetaPlan {
                dir: dir.clone(),
                first_boot: false,
                record: Some(record),
                state: walk.state,
                replayed: walk.replayed,
                journal_end: walk.end,
                last_op: walk.last_op,
                last_checksum: walk.last_checksum,
                actions,
                notes,
                refusal: None,
            }
        }
        Err(refusal) => MetaPlan::refused(&dir, refusal, notes),
    };
    Ok(plan)
}

/// No valid record: a first boot when nothing was ever committed, else a refusal.
fn no_record(
    disk: &dyn Disk,
    root: &Path,
    dir: &Path,
    entries: &[DirEntry],
    slots: &[Slot; 2],
) -> io::Result<MetaPlan> {
    let journal_empty = match entries.iter().any(|e| e.name == JOURNAL) {
        true => disk.open(&dir.join(JOURNAL), OpenMode::Read)?.len()? == 0,
        false => true,
    };
    let snapshot = entries
        .iter()
        .any(|e| e.name == snapshot::FILE || e.name == snapshot::TEMP);
    let slots_absent = slots.iter().all(|s| matches!(s, Slot::Missing));
    if slots_absent && journal_empty && !snapshot {
        if has_partition_data(disk, root)? {
            return Ok(MetaPlan::refused(
                dir,
                MetaRefusal::DataWithoutMetadata {
                    streams: root.join("streams"),
                },
                Vec::new(),
            ));
        }
        return Ok(MetaPlan {
            first_boot: true,
            ..MetaPlan::empty(dir)
        });
    }
    let problems: Vec<String> = slots
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let name = SLOT_NAMES[i];
            match s {
                Slot::Missing => format!("{name} is missing"),
                Slot::Problem(p) | Slot::Misplaced(p) => format!("{name}: {p}"),
                Slot::Valid { .. } => unreachable!("no valid record"),
            }
        })
        .collect();
    Ok(MetaPlan::refused(
        dir,
        MetaRefusal::NoSuperblock {
            dir: dir.to_path_buf(),
            problems: problems.join("; "),
        },
        Vec::new(),
    ))
}

/// The state the record's snapshot holds (empty before the first checkpoint).
///
/// | record names | `snapshot.bin` | `snapshot.bin.tmp` | decision |
/// |---|---|---|---|
/// | no snapshot (op 0) | any | any | empty state; a leftover temp is removed |
/// | a snapshot | matches | absent or other | load it; a leftover temp is removed |
/// | a snapshot | other or absent | matches | load it, finish the rename |
/// | a snapshot | absent | absent | refuse `SnapshotMissing` |
/// | a snapshot | other | other or absent | refuse `SnapshotMismatch` |
fn load_snapshot(
    disk: &dyn Disk,
    dir: &Path,
    entries: &[DirEntry],
    record: &MetaRecord,
    actions: &mut Vec<MetaAction>,
) -> io::Result<Result<MetaState, MetaRefusal>> {
    let expected = record.snapshot;
    let present = |name: &str| entries.iter().any(|e| e.name == name);
    let matches = |bytes: &[u8]| {
        bytes.len() as u64 == expected.len && snapshot::checksum(bytes) == expected.checksum
    };
    let path = dir.join(snapshot::FILE);
    // An unreadable temp is one that does not match: only the recorded snapshot matters.
    let temp = present(snapshot::TEMP)
        .then(|| read_file(disk, &dir.join(snapshot::TEMP)).unwrap_or_default());
    if expected.op == 0 {
        if temp.is_some() {
            actions.push(MetaAction::RemoveTempSnapshot);
        }
        return Ok(Ok(MetaState::default()));
    }
    let main = match present(snapshot::FILE) {
        true => match read_file(disk, &path) {
            Ok(bytes) => Some(bytes),
            Err(refusal) => return Ok(Err(refusal)),
        },
        false => None,
    };
    let bytes = match (main, temp) {
        (Some(main), temp) if matches(&main) => {
            if temp.is_some() {
                actions.push(MetaAction::RemoveTempSnapshot);
            }
            main
        }
        (_, Some(temp)) if matches(&temp) => {
            actions.push(MetaAction::FinishSnapshot);
            temp
        }
        (None, _) => {
            return Ok(Err(MetaRefusal::SnapshotMissing {
                path,
                op: expected.op,
            }))
        }
        (Some(main), _) => {
            return Ok(Err(MetaRefusal::SnapshotMismatch {
                path,
                expected,
                found_len: main.len() as u64,
                found_checksum: snapshot::checksum(&main),
            }))
        }
    };
    let snapshot = match Snapshot::decode(&bytes) {
        Ok(snapshot) => snapshot,
        Err(error) => return Ok(Err(MetaRefusal::SnapshotUndecodable { path, error })),
    };
    if snapshot.op != expected.op
        || snapshot.anchor != expected.anchor
        || snapshot.cluster != record.cluster
    {
        return Ok(Err(MetaRefusal::SnapshotContradicts {
            path,
            detail: format!(
                "it holds op {} (anchor {:#x}, cluster {:#x}); the superblock names op {} (anchor {:#x}, cluster {:#x})",
                snapshot.op, snapshot.anchor, snapshot.cluster, expected.op, expected.anchor, record.cluster
            ),
        }));
    }
    Ok(Ok(snapshot.state))
}

struct Walk {
    state: MetaState,
    replayed: Vec<Replayed>,
    end: u64,
    last_op: u64,
    last_checksum: u128,
    actions: Vec<MetaAction>,
}

/// The journal against the record:
///
/// | finding | decision |
/// |---|---|
/// | shorter than the recorded durable end | refuse `JournalShorterThanDurable` |
/// | damage below the durable end | refuse `JournalCorrupt` |
/// | no entry ends at the durable end with the recorded op and checksum | refuse `JournalChainBroken` |
/// | entries out of order, or a parent that is not the previous entry | refuse `JournalChainBroken` |
/// | an entry that does not apply to the state before it | refuse `EntryDoesNotApply` |
/// | damage above the durable end | see [`judge_tail_damage`] |
/// | entries the snapshot already holds, above the durable end | truncate them (a checkpoint's leftovers) |
fn walk_journal(
    path: &Path,
    bytes: &[u8],
    record: &MetaRecord,
    uncertain_slot: Option<&Path>,
    state: MetaState,
) -> Result<Walk, MetaRefusal> {
    let scan = journal::scan(bytes, record.cluster);
    check_durable_end(path, &scan, bytes.len() as u64, record.journal)?;
    let chain = replay_chain(path, &scan, record, state)?;
    let (actions, end) = tail_actions(path, &scan, &chain, uncertain_slot, bytes.len() as u64)?;
    Ok(Walk {
        state: chain.state,
        replayed: chain.replayed,
        end,
        last_op: chain.last_op,
        last_checksum: chain.last_checksum,
        actions,
    })
}

/// The first rows: the journal holds the recorded durable end whole, and the entry ending
/// there is the one recorded.
fn check_durable_end(
    path: &Path,
    scan: &journal::Scan,
    file_len: u64,
    durable: JournalPoint,
) -> Result<(), MetaRefusal> {
    if file_len < durable.len {
        return Err(MetaRefusal::JournalShorterThanDurable {
            path: path.to_path_buf(),
            len: file_len,
            durable_len: durable.len,
        });
    }
    if let Some((position, problem)) = scan.damage.as_ref().filter(|(p, _)| *p < durable.len) {
        return Err(MetaRefusal::JournalCorrupt {
            path: path.to_path_buf(),
            position: *position,
            durable_len: durable.len,
            damage: problem.to_string(),
        });
    }
    let broken = |position: u64, detail: String| MetaRefusal::JournalChainBroken {
        path: path.to_path_buf(),
        position,
        detail,
    };
    // The entry ending at the durable end is the one recorded.
    if durable.len > 0 {
        let at_end = scan
            .entries
            .iter()
            .find(|e| e.position + e.len == durable.len);
        match at_end {
            Some(e) if e.op == durable.op && e.checksum == durable.last => {}
            Some(e) => {
                return Err(broken(
                    e.position,
                    format!(
                        "the entry ending at the durable end {} is op {} ({:#x}); the superblock records op {} ({:#x})",
                        durable.len, e.op, e.checksum, durable.op, durable.last
                    ),
                ))
            }
            None => {
                return Err(broken(
                    durable.len,
                    format!("no entry ends at the durable end {}", durable.len),
                ))
            }
        }
    }
    Ok(())
}

/// The valid entries replayed in order onto the snapshot's state.
struct Chain {
    state: MetaState,
    replayed: Vec<Replayed>,
    last_op: u64,
    last_checksum: u128,
    /// The end of the entries the snapshot already holds, if the journal starts with some.
    obsolete_end: Option<u64>,
    snapshot_op: u64,
}

/// The chain rows: each entry follows the one before it (or the snapshot) and applies to the
/// state it leaves.
fn replay_chain(
    path: &Path,
    scan: &journal::Scan,
    record: &MetaRecord,
    mut state: MetaState,
) -> Result<Chain, MetaRefusal> {
    let durable = record.journal;
    let broken = |position: u64, detail: String| MetaRefusal::JournalChainBroken {
        path: path.to_path_buf(),
        position,
        detail,
    };
    let snapshot = record.snapshot;
    let mut previous: Option<&Entry> = None;
    let mut last_op = snapshot.op;
    let mut last_checksum = snapshot.anchor;
    let mut replayed = Vec::new();
    let mut obsolete_end = None;
    for entry in &scan.entries {
        if let Some(prev) = previous {
            if entry.op != prev.op + 1 || entry.parent != prev.checksum {
                return Err(broken(
                    entry.position,
                    format!(
                        "op {} (parent {:#x}) follows op {} ({:#x})",
                        entry.op, entry.parent, prev.op, prev.checksum
                    ),
                ));
            }
        }
        previous = Some(entry);
        if entry.op <= snapshot.op {
            // Already in the snapshot: left by a checkpoint interrupted before it emptied
            // the journal. Only ever a prefix, above the durable end.
            if entry.position < durable.len {
                return Err(broken(
                    entry.position,
                    format!(
                        "op {} lies below the durable end but the snapshot already holds it",
                        entry.op
                    ),
                ));
            }
            obsolete_end = Some(entry.position + entry.len);
            continue;
        }
        if entry.op == snapshot.op + 1 && entry.parent != snapshot.anchor {
            return Err(broken(
                entry.position,
                format!(
                    "op {} names parent {:#x}, the snapshot's anchor is {:#x}",
                    entry.op, entry.parent, snapshot.anchor
                ),
            ));
        }
        if entry.op != last_op + 1 {
            return Err(broken(
                entry.position,
                format!("op {} follows op {last_op}", entry.op),
            ));
        }
        let meta_op = MetaOp::decode(entry.operation, &entry.body).map_err(|e| {
            MetaRefusal::EntryDoesNotApply {
                path: path.to_path_buf(),
                position: entry.position,
                op: entry.op,
                error: format!("the body does not decode: {e}"),
            }
        })?;
        let ctx = OpContext {
            op: entry.op,
            timestamp: entry.origin.timestamp,
            cluster: record.cluster,
        };
        let applied = state
            .apply(&meta_op, ctx)
            .map_err(|e| MetaRefusal::EntryDoesNotApply {
                path: path.to_path_buf(),
                position: entry.position,
                op: entry.op,
                error: e.to_string(),
            })?;
        replayed.push(Replayed {
            op: entry.op,
            position: entry.position,
            meta_op,
            applied,
        });
        last_op = entry.op;
        last_checksum = entry.checksum;
    }
    Ok(Chain {
        state,
        replayed,
        last_op,
        last_checksum,
        obsolete_end,
        snapshot_op: snapshot.op,
    })
}

/// The tail rows: damage above the durable end (see [`judge_tail_damage`]), and entries the
/// snapshot already holds. Returns the repairs and where the journal then ends.
fn tail_actions(
    path: &Path,
    scan: &journal::Scan,
    chain: &Chain,
    uncertain_slot: Option<&Path>,
    file_len: u64,
) -> Result<(Vec<MetaAction>, u64), MetaRefusal> {
    let mut actions = Vec::new();
    let mut end = scan.valid_end;
    if let Some((position, problem)) = &scan.damage {
        let damaged_op = scan.entries.last().map_or(chain.snapshot_op, |e| e.op) + 1;
        let refusal = |later: journal::Later| MetaRefusal::JournalInteriorCorruption {
            path: path.to_path_buf(),
            position: *position,
            later_entry: later.position,
            damage: problem.to_string(),
        };
        match judge_tail_damage(
            damaged_op,
            chain.snapshot_op,
            &scan.later,
            uncertain_slot.is_some(),
        ) {
            TailDamage::InSnapshot => {
                actions.push(MetaAction::TruncateJournal {
                    from: 0,
                    len: file_len,
                    why: format!(
                        "damage at {position} lies in entries the snapshot already holds ({problem})"
                    ),
                });
                return Ok((actions, 0));
            }
            TailDamage::WrittenAfter(later) => return Err(refusal(later)),
            TailDamage::Uncertain => {
                return Err(MetaRefusal::JournalUncertain {
                    path: path.to_path_buf(),
                    position: *position,
                    damage: problem.to_string(),
                    slot: uncertain_slot.expect("judged uncertain").to_path_buf(),
                })
            }
            TailDamage::Torn => {
                actions.push(MetaAction::TruncateJournal {
                    from: *position,
                    len: file_len,
                    why: format!("torn tail above the durable end ({problem})"),
                });
                end = *position;
            }
        }
    }
    if let Some(obsolete) = chain.obsolete_end.filter(|_| chain.replayed.is_empty()) {
        // Everything the journal holds is in the snapshot: empty it.
        actions.retain(|a| !matches!(a, MetaAction::TruncateJournal { .. }));
        actions.push(MetaAction::TruncateJournal {
            from: 0,
            len: file_len,
            why: format!("its entries up to {obsolete} are already in the snapshot"),
        });
        end = 0;
    }
    Ok((actions, end))
}

/// What damage above the durable end is, the entry it stopped the walk at being op
/// `damaged_op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TailDamage {
    /// The damage and every whole entry after it are ops the snapshot already holds: a
    /// checkpoint's leftovers, cut whole.
    InSnapshot,
    /// A whole entry written after the damaged op was durable follows it (its commit number
    /// reaches the damaged op): the damage is in bytes a sync had returned for.
    WrittenAfter(journal::Later),
    /// The other superblock slot is damaged or missing: the durable end itself may be older
    /// than the newest record, so the damage may be in ops that were answered.
    Uncertain,
    /// A torn last write: nothing after the damage but entries of that same write (their
    /// commit number is below the damaged op), none of them ever durable or answered.
    Torn,
}

/// | the damaged op and every later entry's | a later whole entry with commit ≥ the damaged op | other slot | verdict |
/// |---|---|---|---|
/// | ≤ the snapshot's op | any | any | `InSnapshot`: empty the journal |
/// | above | yes | any | `WrittenAfter`: refuse `JournalInteriorCorruption` |
/// | above | no | damaged or missing | `Uncertain`: refuse `JournalUncertain` |
/// | above | no | valid | `Torn`: truncate at the damage |
fn judge_tail_damage(
    damaged_op: u64,
    snapshot_op: u64,
    later: &[journal::Later],
    other_slot_uncertain: bool,
) -> TailDamage {
    let in_snapshot = damaged_op <= snapshot_op && later.iter().all(|l| l.op <= snapshot_op);
    match (
        in_snapshot,
        later.iter().find(|l| l.commit >= damaged_op),
        other_slot_uncertain,
    ) {
        (true, _, _) => TailDamage::InSnapshot,
        (false, Some(later), _) => TailDamage::WrittenAfter(*later),
        (false, None, true) => TailDamage::Uncertain,
        (false, None, false) => TailDamage::Torn,
    }
}

/// How often the plane checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaSettings {
    /// A checkpoint follows any batch that leaves the journal at least this long.
    pub checkpoint_bytes: u64,
}

impl Default for MetaSettings {
    fn default() -> Self {
        MetaSettings {
            checkpoint_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Entries written but not yet synced: where the journal will end once they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    end: u64,
    last_op: u64,
    last_checksum: u128,
}

/// The open metadata plane.
pub struct MetadataPlane {
    /// The disk the plane writes through.
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    journal: Box<dyn DiskFile>,
    record: MetaRecord,
    journal_end: u64,
    last_op: u64,
    last_checksum: u128,
    settings: MetaSettings,
    /// The journal length at which the next checkpoint is wanted: `checkpoint_bytes`, or
    /// further on after one found no space.
    checkpoint_at: u64,
}

/// How a checkpoint ended when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkpointed {
    Done,
    /// No space for the snapshot: nothing changed (its temporary file is removed); the
    /// next attempt waits for another `checkpoint_bytes` of journal.
    NoSpace,
}

fn at<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> io::Error + 'a {
    move |e| io::Error::new(e.kind(), format!("{op} {}: {e}", path.display()))
}

/// Syncs `dir` and every directory above it, so the names under them survive a power loss.
fn sync_ancestors(disk: &dyn Disk, dir: &Path) -> io::Result<()> {
    for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
        disk.sync_dir(ancestor).map_err(at("sync", ancestor))?;
    }
    Ok(())
}

impl MetadataPlane {
    /// Opens the plane a plan allows (first boot: initialises it), carrying out the plan's
    /// actions durably. The caller redoes the directory work of replayed entries after
    /// [`MetadataPlane::applied_op`] and then calls [`MetadataPlane::record_applied`].
    pub fn open(env: &Env, plan: &MetaPlan, settings: MetaSettings) -> io::Result<MetadataPlane> {
        assert!(plan.refusal.is_none(), "a refused plan is never opened");
        let shared = env.disk.clone();
        let disk = shared.as_ref();
        let dir = plan.dir.clone();
        let journal_path = dir.join(JOURNAL);
        if plan.first_boot {
            return Self::initialise(env, shared.clone(), &dir, settings);
        }
        let record = plan
            .record
            .expect("a plan that is not a first boot has a record");
        for action in &plan.actions {
            tracing::info!(%action, "metadata recovery applying");
            match action {
                MetaAction::TruncateJournal { from, .. } => {
                    let file = disk
                        .open(&journal_path, OpenMode::ReadWrite)
                        .map_err(at("open", &journal_path))?;
                    file.set_len(*from).map_err(at("truncate", &journal_path))?;
                    file.sync_data().map_err(at("sync", &journal_path))?;
                }
                MetaAction::FinishSnapshot => {
                    disk.rename(&dir.join(snapshot::TEMP), &dir.join(snapshot::FILE))
                        .map_err(at("rename", &dir))?;
                    disk.sync_dir(&dir).map_err(at("sync", &dir))?;
                }
                MetaAction::RemoveTempSnapshot => {
                    disk.remove_file(&dir.join(snapshot::TEMP))
                        .map_err(at("remove", &dir))?;
                    disk.sync_dir(&dir).map_err(at("sync", &dir))?;
                }
                // Done once the plane is open (it writes records).
                MetaAction::RewriteSlot { .. } => {}
            }
        }
        let journal = disk
            .open(&journal_path, OpenMode::CreateOrOpen)
            .map_err(at("open", &journal_path))?;
        // Valid entries above the recorded end may still be dirty pages (a crash between
        // their write and their sync): make them durable before anything rests on them.
        journal.sync_data().map_err(at("sync", &journal_path))?;
        // So may the names: a first boot cut short before its directory syncs left the
        // superblock, the journal and the metadata directory itself named only in the cache.
        sync_ancestors(disk, &dir)?;
        assert_eq!(
            journal.len()?,
            plan.journal_end,
            "the plan's actions left the journal"
        );
        let mut plane = MetadataPlane {
            disk: shared.clone(),
            dir,
            journal,
            record,
            journal_end: plan.journal_end,
            last_op: plan.last_op,
            last_checksum: plan.last_checksum,
            settings,
            checkpoint_at: settings.checkpoint_bytes,
        };
        if plan
            .actions
            .iter()
            .any(|a| matches!(a, MetaAction::RewriteSlot { .. }))
        {
            // The next record goes into the other slot, the one after into the degraded one.
            for _ in 0..2 {
                plane.write_record(|_| {})?;
            }
        }
        Ok(plane)
    }

    fn initialise(
        env: &Env,
        shared: Arc<dyn Disk>,
        dir: &Path,
        settings: MetaSettings,
    ) -> io::Result<MetadataPlane> {
        let disk = shared.as_ref();
        let _span = tracing::info_span!("metadata_initialise", dir = %dir.display()).entered();
        disk.create_dir_all(dir).map_err(at("create", dir))?;
        let journal_path = dir.join(JOURNAL);
        let journal = disk
            .open(&journal_path, OpenMode::CreateOrOpen)
            .map_err(at("create", &journal_path))?;
        journal.set_len(0).map_err(at("truncate", &journal_path))?;
        journal.sync_data().map_err(at("sync", &journal_path))?;
        let cluster =
            (u128::from(env.entropy.next_u64()) << 64 | u128::from(env.entropy.next_u64())).max(1);
        let mut record = MetaRecord {
            sequence: 0,
            cluster,
            snapshot: SnapshotRef::default(),
            journal: JournalPoint::default(),
            applied_op: 0,
        };
        // Each slot appears whole or not at all: a crash here leaves no slot (the next boot
        // is a first boot again) or a valid record (the next boot completes this one).
        for sequence in [0, 1] {
            record.sequence = sequence;
            let path = dir.join(SLOT_NAMES[record.slot()]);
            slots::create(disk, &path, &record.encode()).map_err(at("create", &path))?;
        }
        // Every ancestor: the data root itself may have just been created.
        sync_ancestors(disk, dir)?;
        Ok(MetadataPlane {
            disk: shared.clone(),
            dir: dir.to_path_buf(),
            journal,
            record,
            journal_end: 0,
            last_op: 0,
            last_checksum: 0,
            settings,
            checkpoint_at: settings.checkpoint_bytes,
        })
    }

    pub fn cluster(&self) -> u128 {
        self.record.cluster
    }

    pub fn last_op(&self) -> u64 {
        self.last_op
    }

    pub fn applied_op(&self) -> u64 {
        self.record.applied_op
    }

    /// Between batches: the record names the journal's end, its last op and that op's
    /// checksum, and every op as applied.
    pub fn assert_recorded(&self) {
        let end = JournalPoint {
            len: self.journal_end,
            op: self.last_op,
            last: self.last_checksum,
        };
        assert_eq!(
            self.record.journal, end,
            "the record names the journal's end"
        );
        assert_eq!(
            self.record.applied_op, self.last_op,
            "the record names every op applied"
        );
    }

    /// The context the next op will run in.
    pub fn next_context(&self, timestamp: u64) -> OpContext {
        OpContext {
            op: self.last_op + 1,
            timestamp,
            cluster: self.record.cluster,
        }
    }

    /// Journals `ops` (numbered from [`Self::next_context`] on) with one write and one sync.
    /// An error leaves the journal's state unknown: see [`Self::cut_back`].
    pub fn append(&mut self, ops: &[(MetaOp, Origin)]) -> io::Result<()> {
        let written = self.write_entries(ops)?;
        self.sync_entries(written)
    }

    /// Writes the entries of `ops` (numbered from [`Self::next_context`] on) after the
    /// journal's end, in one write. Nothing counts until [`Self::sync_entries`] returns.
    pub fn write_entries(&mut self, ops: &[(MetaOp, Origin)]) -> io::Result<Written> {
        assert!(!ops.is_empty(), "a journal write holds at least one entry");
        let path = self.dir.join(JOURNAL);
        let _span =
            tracing::debug_span!("metadata_write", ops = ops.len(), from = self.last_op + 1)
                .entered();
        let mut bytes = Vec::new();
        let (mut op, mut parent) = (self.last_op, self.last_checksum);
        for (meta_op, origin) in ops {
            op += 1;
            // Every entry of one write names the same commit: the last op synced before it.
            let entry = journal::encode(
                op,
                self.last_op,
                parent,
                self.record.cluster,
                meta_op.operation(),
                *origin,
                &meta_op.body(),
            );
            parent = journal::decode_at(&entry, 0)
                .expect("an entry just encoded decodes")
                .checksum;
            bytes.extend(entry);
        }
        self.journal
            .write_all_at(&[io::IoSlice::new(&bytes)], self.journal_end)
            .map_err(at("write", &path))?;
        Ok(Written {
            end: self.journal_end + bytes.len() as u64,
            last_op: op,
            last_checksum: parent,
        })
    }

    /// Syncs what [`Self::write_entries`] wrote; only then is it the journal's.
    pub fn sync_entries(&mut self, written: Written) -> io::Result<()> {
        let path = self.dir.join(JOURNAL);
        let _span = tracing::debug_span!("metadata_sync", to = written.last_op).entered();
        self.journal.sync_data().map_err(at("sync", &path))?;
        assert!(written.end > self.journal_end && written.last_op > self.last_op);
        self.journal_end = written.end;
        self.last_op = written.last_op;
        self.last_checksum = written.last_checksum;
        Ok(())
    }

    /// After a write or sync of entries failed: cuts the journal back to its durable end
    /// and syncs the cut, so the refused entries can never reappear (a power loss could
    /// otherwise keep some of their pages). An error here leaves the journal unknown.
    pub fn cut_back(&mut self) -> io::Result<()> {
        let path = self.dir.join(JOURNAL);
        tracing::warn!(
            end = self.journal_end,
            "cutting the metadata journal back after a failed write"
        );
        self.journal
            .set_len(self.journal_end)
            .map_err(at("truncate", &path))?;
        self.journal.sync_data().map_err(at("sync", &path))
    }

    /// Records that the journal is durable to its end, before the directory work of its
    /// newest ops begins: rot in those entries is then damage below the durable end (boot
    /// refuses) rather than a torn tail, which boot would drop though the ops' work was
    /// done. Boot redoes their work until [`Self::record_applied`].
    pub fn record_journal(&mut self) -> io::Result<()> {
        let (end, op, last) = (self.journal_end, self.last_op, self.last_checksum);
        assert!(
            op > self.record.applied_op,
            "recorded before the work it precedes"
        );
        self.write_record(|r| r.journal = JournalPoint { len: end, op, last })
    }

    /// Records that the journal is durable to its end and that the directory work of every
    /// op so far is done.
    pub fn record_applied(&mut self) -> io::Result<()> {
        let (end, op, last) = (self.journal_end, self.last_op, self.last_checksum);
        self.write_record(|r| {
            r.journal = JournalPoint { len: end, op, last };
            r.applied_op = op;
        })
    }

    fn write_record(&mut self, change: impl FnOnce(&mut MetaRecord)) -> io::Result<()> {
        let next = self.record.next(change);
        let path = self.dir.join(SLOT_NAMES[next.slot()]);
        let disk = self.disk.as_ref();
        if disk.exists(&path).map_err(at("stat", &path))? {
            slots::write(disk, &path, &next.encode()).map_err(at("write", &path))?;
        } else {
            // A slot that went missing (or a first boot cut short) is re-created whole, and
            // its name made durable before anything rests on it.
            slots::create(disk, &path, &next.encode()).map_err(at("create", &path))?;
            disk.sync_dir(&self.dir).map_err(at("sync", &self.dir))?;
        }
        self.record = next;
        Ok(())
    }

    /// Whether the journal has grown enough for a checkpoint.
    pub fn wants_checkpoint(&self) -> bool {
        self.journal_end >= self.checkpoint_at
    }

    /// Writes `state` (the state after [`Self::last_op`], its directory work done) as the
    /// snapshot, records it, and empties the journal.
    pub fn checkpoint(&mut self, state: &MetaState) -> io::Result<Checkpointed> {
        assert_eq!(
            self.record.applied_op, self.last_op,
            "checkpoints follow applied work"
        );
        let disk = self.disk.clone();
        let _span = tracing::info_span!("metadata_checkpoint", op = self.last_op).entered();
        let bytes = snapshot::encode(self.record.cluster, self.last_op, self.last_checksum, state);
        let temp = self.dir.join(snapshot::TEMP);
        match self.write_temp_snapshot(&temp, &bytes) {
            Ok(()) => {}
            Err(error) if crate::env::is_no_space(&error) => {
                tracing::warn!(%error, "no space for a metadata checkpoint: trying again later");
                let _ = disk.remove_file(&temp);
                self.checkpoint_at = self.journal_end + self.settings.checkpoint_bytes;
                return Ok(Checkpointed::NoSpace);
            }
            Err(error) => return Err(error),
        }
        let snapshot_ref = SnapshotRef {
            op: self.last_op,
            len: bytes.len() as u64,
            checksum: snapshot::checksum(&bytes),
            anchor: self.last_checksum,
        };
        let (op, last) = (self.last_op, self.last_checksum);
        self.write_record(|r| {
            r.snapshot = snapshot_ref;
            r.journal = JournalPoint { len: 0, op, last };
        })?;
        disk.rename(&temp, &self.dir.join(snapshot::FILE))
            .map_err(at("rename", &temp))?;
        disk.sync_dir(&self.dir).map_err(at("sync", &self.dir))?;
        let path = self.dir.join(JOURNAL);
        self.journal.set_len(0).map_err(at("truncate", &path))?;
        self.journal.sync_data().map_err(at("sync", &path))?;
        self.journal_end = 0;
        self.checkpoint_at = self.settings.checkpoint_bytes;
        Ok(Checkpointed::Done)
    }

    /// The snapshot under its temporary name, synced with its name: nothing refers to it
    /// yet, so a failure here changes nothing.
    fn write_temp_snapshot(&self, temp: &Path, bytes: &[u8]) -> io::Result<()> {
        let file = self
            .disk
            .open(temp, OpenMode::CreateOrOpen)
            .map_err(at("create", temp))?;
        file.set_len(0).map_err(at("truncate", temp))?;
        file.write_all_at(&[io::IoSlice::new(bytes)], 0)
            .map_err(at("write", temp))?;
        file.sync_data().map_err(at("sync", temp))?;
        drop(file);
        self.disk.sync_dir(&self.dir).map_err(at("sync", &self.dir))
    }
}

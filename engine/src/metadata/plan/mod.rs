//! The metadata plane's boot plan: what boot found in `{root}/metadata/` and what it will do,
//! in the same shape as the partition's recovery (`crate::partition::recovery`) and the
//! entity tree's (`crate::node::tree`): a [`survey`] reads, a [`decide`] table judges (its
//! module doc holds the table of cases), and [`plan`] interleaves them, reading only what the
//! decisions so far still need. Changes no byte: the vocabulary here ([`MetaRefusal`],
//! [`MetaAction`], [`MetaPlan`]) is what `cairn check` prints and what
//! [`crate::metadata::MetadataPlane::open`] carries out.

pub mod decide;
pub mod survey;

use super::record::{MetaRecord, SnapshotRef};
use super::{snapshot, MetadataError, DIR, JOURNAL};
use crate::env::{DirEntry, Disk};
use crate::state::ops::MetaOp;
use crate::state::{Applied, MetaState};
use decide::Trust;
use std::fmt;
use std::path::{Path, PathBuf};
use survey::Slot;

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
/// Reads the metadata directory of `root` and decides what boot does. Changes no bytes.
pub fn plan(disk: &dyn Disk, root: &Path) -> Result<MetaPlan, MetadataError> {
    let dir = root.join(DIR);
    let _span = tracing::info_span!("metadata_plan", dir = %dir.display()).entered();
    let entries = survey::list(disk, &dir).map_err(MetadataError::Disk)?;
    let slots = [0, 1].map(|s| survey::read_slot(disk, &dir, &entries, s));
    let trusted = match decide::trust(&dir, &slots) {
        Trust::Misplaced(refusal) => return Ok(MetaPlan::refused(&dir, refusal, Vec::new())),
        Trust::NoRecord => return no_record(disk, root, &dir, &entries, &slots),
        Trust::Record(trusted) => trusted,
    };
    let decide::Trusted {
        record,
        uncertain,
        notes,
        mut actions,
    } = trusted;
    let files = survey::read_snapshots(disk, &dir, &entries, record.snapshot.op != 0);
    let state = match decide::snapshot_state(&dir, &record, files, &mut actions) {
        Ok(state) => state,
        Err(refusal) => return Ok(MetaPlan::refused(&dir, refusal, notes)),
    };
    let journal_bytes = match survey::read_journal(disk, &dir, &entries) {
        Ok(bytes) => bytes,
        Err(refusal) => return Ok(MetaPlan::refused(&dir, refusal, notes)),
    };
    let walked = decide::walk_journal(
        &dir.join(JOURNAL),
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

/// No valid record (rows 2-4 of [`decide`]): a first boot when nothing was ever committed,
/// else a refusal.
fn no_record(
    disk: &dyn Disk,
    root: &Path,
    dir: &Path,
    entries: &[DirEntry],
    slots: &[Slot; 2],
) -> Result<MetaPlan, MetadataError> {
    let journal_empty =
        survey::journal_is_empty(disk, dir, entries).map_err(MetadataError::Disk)?;
    if !decide::nothing_committed(entries, slots, journal_empty) {
        return Ok(MetaPlan::refused(
            dir,
            decide::no_superblock(dir, slots),
            Vec::new(),
        ));
    }
    if survey::has_partition_data(disk, root).map_err(MetadataError::Disk)? {
        return Ok(MetaPlan::refused(
            dir,
            MetaRefusal::DataWithoutMetadata {
                streams: root.join("streams"),
            },
            Vec::new(),
        ));
    }
    Ok(MetaPlan {
        first_boot: true,
        ..MetaPlan::empty(dir)
    })
}

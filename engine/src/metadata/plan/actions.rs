//! The boot plan's vocabulary, shared by its survey, its decisions and the plan: why boot
//! refuses ([`MetaRefusal`]), what it repairs ([`MetaAction`]), and the entries it replays
//! ([`Replayed`]). A leaf: it imports neither the survey nor the decisions.

use crate::metadata::record::SnapshotRef;
use crate::metadata::{adoption, snapshot, JOURNAL};
use crate::state::ops::MetaOp;
use crate::state::{Applied, MetaState};
use std::fmt;
use std::path::{Path, PathBuf};

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
    /// A state being adopted (`adopt.bin`, whole once it exists) does not verify or was
    /// made for another cluster: its directory work may have begun, and neither state
    /// accounts for it without the file.
    AdoptionDamaged {
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
    AdoptionDamaged,
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
            | Unreadable { path, .. }
            | AdoptionDamaged { path, .. } => path,
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
            AdoptionDamaged { path, error } => write!(f, "{}: a state being adopted does not verify ({error}); its directory work may have begun", path.display()),
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
    /// Remove an `adopt.bin.tmp`: an adoption interrupted before it began.
    RemoveTempAdoption,
    /// Remove an `adopt.bin` the checkpoint holds: an adoption finished but for this.
    RemoveAdoption,
}

crate::names::variant_names!(MetaAction:
    TruncateJournal,
    FinishSnapshot,
    RemoveTempSnapshot,
    RewriteSlot,
    RemoveTempAdoption,
    RemoveAdoption,
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
            MetaAction::RemoveTempAdoption => write!(
                f,
                "remove {}: an adoption interrupted before it began",
                adoption::TEMP
            ),
            MetaAction::RemoveAdoption => write!(
                f,
                "remove {}: the checkpoint holds the adopted state",
                adoption::FILE
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

/// A state a clustered node was adopting when it stopped (`metadata::adoption`): the state
/// after op `op`, whose prepare's checksum is `anchor`.
#[derive(Debug, Clone)]
pub struct Adopting {
    pub op: u64,
    pub anchor: u128,
    pub state: MetaState,
}

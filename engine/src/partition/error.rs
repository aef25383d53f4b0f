//! What a partition answers when it cannot do what was asked: [`FenceReason`] (the partition
//! refuses everything, files untouched, until an operator acts) and [`PartitionError`] (one
//! request failed).

use super::offsets::ConsumerId;
use super::superblock::{DurablePoint, PartitionIdentity};
use crate::format::FormatError;
use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a partition is fenced. Every variant names the file, the position and what was
/// expected, so an operator can find the damage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceReason {
    NoSuperblock {
        dir: PathBuf,
        problems: String,
    },
    SuperblockIdentity {
        path: PathBuf,
        expected: PartitionIdentity,
        found: PartitionIdentity,
    },
    /// The superblock records where the log starts, and no segment starts there: the oldest
    /// segment vanished (retention records the new start before it unlinks anything).
    LogStartMissing {
        dir: PathBuf,
        log_start: u64,
        first_segment: Option<u64>,
        /// The other slot, when damaged or missing: a newer record there may have moved the
        /// log start past the segments that are gone.
        uncertain_slot: Option<PathBuf>,
    },
    /// The superblock records more stored offsets than there are files: one vanished, and
    /// reading it as "none" would restart its consumer from the beginning.
    StoredOffsetsMissing {
        dir: PathBuf,
        recorded: u32,
        found: Vec<String>,
        /// The other slot, when damaged or missing: a newer record there may have recorded a
        /// deletion the trusted one does not know.
        uncertain_slot: Option<PathBuf>,
    },
    /// The metadata has this partition, and its directory is gone (or is not a directory).
    /// It is never recreated empty.
    DirectoryMissing {
        dir: PathBuf,
    },
    SuperblockMisplaced {
        path: PathBuf,
        detail: String,
    },
    DurableEndUncertain {
        log: PathBuf,
        position: u64,
        damage: String,
        slot: PathBuf,
    },
    MissingLog {
        index: PathBuf,
        log: PathBuf,
    },
    DurableSegmentMissing {
        log: PathBuf,
        durable: DurablePoint,
    },
    ChainGap {
        log: PathBuf,
        expected_start: u64,
        found_start: u64,
    },
    SegmentNameMismatch {
        log: PathBuf,
        name_offset: u64,
        first_batch_offset: u64,
    },
    SealedSegmentCorrupt {
        log: PathBuf,
        position: u64,
        damage: String,
    },
    CorruptBelowDurable {
        log: PathBuf,
        position: u64,
        durable_position: u64,
        damage: String,
    },
    LogShorterThanDurable {
        log: PathBuf,
        valid_end: u64,
        durable_position: u64,
    },
    DurableOffsetMismatch {
        log: PathBuf,
        durable: DurablePoint,
        found_next_offset: Option<u64>,
    },
    EmptySealedSegment {
        log: PathBuf,
    },
    /// The device could not read bytes that must be served (below the durable end, or in a
    /// sealed segment). `position` is the batch, `sector` the first unreadable sector.
    ReadFailed {
        file: PathBuf,
        position: u64,
        sector: u64,
        error: String,
    },
    /// An I/O call failed while serving; the files' state is unknown until recovery.
    IoFailed {
        op: &'static str,
        path: PathBuf,
        error: String,
    },
    /// A directory the metadata does not account for (`other`) also holds this partition's
    /// identity: which of the two is the partition is unknown, so neither is served.
    IdentityDuplicated {
        dir: PathBuf,
        other: PathBuf,
    },
    /// The partition's directory holds something no journaled op deleted (`found`): it is
    /// kept for an operator, and the partition is not served from it.
    DirectoryInTheWay {
        dir: PathBuf,
        found: String,
    },
    /// A cluster replica's rebuild (its copy replaced by an empty one its group refills
    /// from its peers) failed part way: the copy is gone or partial, and the rebuild's mark
    /// beside it says so (`node::rebuild`).
    RebuildCutShort {
        dir: PathBuf,
        error: String,
    },
}

crate::names::variant_names!(FenceReason:
    NoSuperblock,
    SuperblockIdentity,
    LogStartMissing,
    StoredOffsetsMissing,
    DirectoryMissing,
    SuperblockMisplaced,
    DurableEndUncertain,
    MissingLog,
    DurableSegmentMissing,
    ChainGap,
    SegmentNameMismatch,
    SealedSegmentCorrupt,
    CorruptBelowDurable,
    LogShorterThanDurable,
    DurableOffsetMismatch,
    EmptySealedSegment,
    ReadFailed,
    IoFailed,
    IdentityDuplicated,
    DirectoryInTheWay,
    RebuildCutShort,
);

impl FenceReason {
    /// Whether the fence says the partition's own files are damaged or missing, so a
    /// cluster member may rebuild its replica from its peers' copies. Not for an I/O call
    /// that failed while serving or a read the device refused (a restart reads again), nor
    /// for a directory that holds another partition's or someone's data (kept for an
    /// operator).
    pub fn own_files_damaged(&self) -> bool {
        use FenceReason::*;
        match self {
            NoSuperblock { .. }
            | LogStartMissing { .. }
            | StoredOffsetsMissing { .. }
            | DirectoryMissing { .. }
            | SuperblockMisplaced { .. }
            | DurableEndUncertain { .. }
            | MissingLog { .. }
            | DurableSegmentMissing { .. }
            | ChainGap { .. }
            | SegmentNameMismatch { .. }
            | SealedSegmentCorrupt { .. }
            | CorruptBelowDurable { .. }
            | LogShorterThanDurable { .. }
            | DurableOffsetMismatch { .. }
            | EmptySealedSegment { .. }
            | RebuildCutShort { .. } => true,
            ReadFailed { .. }
            | IoFailed { .. }
            | SuperblockIdentity { .. }
            | IdentityDuplicated { .. }
            | DirectoryInTheWay { .. } => false,
        }
    }
}

impl fmt::Display for FenceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use FenceReason::*;
        match self {
            NoSuperblock { dir, problems } => write!(f, "{}: no valid superblock ({problems})", dir.display()),
            SuperblockIdentity { path, expected, found } => write!(f, "{}: superblock belongs to {found}, expected {expected}: a directory moved, copied or swapped in from elsewhere", path.display()),
            LogStartMissing { dir, log_start, first_segment, uncertain_slot } => {
                write!(f, "{}: the log starts at offset {log_start}, but the oldest segment found starts at {first_segment:?}: a segment vanished", dir.display())?;
                match uncertain_slot {
                    Some(slot) => write!(f, ", or a newer record in {} (damaged or missing) moved the log start", slot.display()),
                    None => Ok(()),
                }
            }
            StoredOffsetsMissing { dir, recorded, found, uncertain_slot } => {
                write!(f, "{}: the superblock records {recorded} stored offsets, found {} ({}): an offset file vanished", dir.display(), found.len(), found.join(", "))?;
                match uncertain_slot {
                    Some(slot) => write!(f, ", or a newer record in {} (damaged or missing) recorded its deletion", slot.display()),
                    None => Ok(()),
                }
            }
            DirectoryMissing { dir } => write!(f, "{}: the partition's directory is missing; it is never recreated empty", dir.display()),
            DurableEndUncertain { log, position, damage, slot } => write!(f, "{} at position {position}: {damage}; {} is damaged or missing, so the durable end may lie above this damage and truncating could drop acknowledged data", log.display(), slot.display()),
            SuperblockMisplaced { path, detail } => write!(f, "{}: {detail}: a superblock write landed out of place, so the newest durable record may be lost", path.display()),
            MissingLog { index, log } => write!(f, "{} exists at or below the durable end but {} does not", index.display(), log.display()),
            DurableSegmentMissing { log, durable } => write!(f, "{} is missing, but the superblock records {} durable bytes in it (next offset {})", log.display(), durable.position, durable.next_offset),
            ChainGap { log, expected_start, found_start } => write!(f, "{}: segment chain broken: expected a segment starting at offset {expected_start}, found {found_start}", log.display()),
            SegmentNameMismatch { log, name_offset, first_batch_offset } => write!(f, "{}: the name says offset {name_offset}, the first batch has base_offset {first_batch_offset}", log.display()),
            SealedSegmentCorrupt { log, position, damage } => write!(f, "{} (sealed) at position {position}: {damage}", log.display()),
            CorruptBelowDurable { log, position, durable_position, damage } => write!(f, "{} at position {position}, below the durable end {durable_position}: {damage}", log.display()),
            LogShorterThanDurable { log, valid_end, durable_position } => write!(f, "{}: valid data ends at {valid_end}, but the superblock records {durable_position} bytes as synced (lost write or lying fsync)", log.display()),
            DurableOffsetMismatch { log, durable, found_next_offset } => write!(f, "{}: at durable position {} the log reaches offset {:?}, the superblock records {}", log.display(), durable.position, found_next_offset, durable.next_offset),
            EmptySealedSegment { log } => write!(f, "{}: a sealed segment is empty", log.display()),
            ReadFailed { file, position, sector, error } => write!(f, "{} at position {position}: the sector at {sector} cannot be read: {error}", file.display()),
            IoFailed { op, path, error } => write!(f, "{op} {} failed: {error}", path.display()),
            IdentityDuplicated { dir, other } => write!(f, "{}: {} also holds this partition's identity and the metadata does not account for it: which one is the partition is unknown", dir.display(), other.display()),
            DirectoryInTheWay { dir, found } => write!(f, "{}: holds {found}, which no journaled operation deleted: kept for an operator, not served", dir.display()),
            RebuildCutShort { dir, error } => write!(f, "{}: rebuilding the replica failed part way ({error}): its group refills it from its peers", dir.display()),
        }
    }
}

/// Errors a partition returns to its callers.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("partition fenced: {0}")]
    Fenced(FenceReason),
    #[error("rejected batch: {0}")]
    InvalidBatch(#[from] FormatError),
    /// The device is full. Under `persisted` nothing of the failed request remains (it was
    /// rolled back and its offsets were never shown); under `replicated` acknowledged batches
    /// stay journaled and are written when space returns.
    #[error("no space left on the device: the request did not complete; retry when space returns")]
    NoSpace,
    #[error(
        "{bytes} bytes of unflushed messages would exceed the journal limit {limit}; retry later"
    )]
    JournalFull { bytes: u64, limit: u64 },
    #[error(
        "{bytes} bytes of unflushed messages across the node would exceed its journal budget {limit}; retry later"
    )]
    NodeJournalFull { bytes: u64, limit: u64 },
    #[error("offset {offset} is beyond the partition's last offset {last:?}")]
    OffsetBeyondEnd { offset: u64, last: Option<u64> },
    /// A new consumer's offset past [`crate::partition::offsets::MAX_CONSUMER_OFFSETS`]
    /// (each is a file, read at every boot); consumers with one may still store theirs.
    #[error("too many consumer offsets in the partition: the limit is {limit}; delete unused consumers' offsets")]
    TooManyOffsets { limit: usize },
    #[error("stored offset of {consumer:?} is damaged: {why} ({path})")]
    OffsetDamaged {
        consumer: ConsumerId,
        path: PathBuf,
        why: String,
    },
    #[error("invalid topic options: {0}")]
    InvalidConfig(#[from] crate::config::ConfigError),
    #[error("poll count must be at least 1")]
    ZeroCount,
    #[error("cannot delete {requested} segments: only {sealed} are sealed, and the active segment is never deleted")]
    ActiveSegment { requested: usize, sealed: usize },
    #[error("partition directory {0} already holds a partition")]
    AlreadyExists(PathBuf),
    #[error("{op} {path} failed: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl PartitionError {
    /// The same error again, for another caller (an I/O error keeps its kind and message).
    pub fn duplicate(&self) -> PartitionError {
        use PartitionError::*;
        match self {
            Fenced(reason) => Fenced(reason.clone()),
            InvalidBatch(e) => InvalidBatch(e.clone()),
            NoSpace => NoSpace,
            JournalFull { bytes, limit } => JournalFull {
                bytes: *bytes,
                limit: *limit,
            },
            NodeJournalFull { bytes, limit } => NodeJournalFull {
                bytes: *bytes,
                limit: *limit,
            },
            OffsetBeyondEnd { offset, last } => OffsetBeyondEnd {
                offset: *offset,
                last: *last,
            },
            TooManyOffsets { limit } => TooManyOffsets { limit: *limit },
            OffsetDamaged {
                consumer,
                path,
                why,
            } => OffsetDamaged {
                consumer: *consumer,
                path: path.clone(),
                why: why.clone(),
            },
            InvalidConfig(e) => InvalidConfig(e.clone()),
            ZeroCount => ZeroCount,
            ActiveSegment { requested, sealed } => ActiveSegment {
                requested: *requested,
                sealed: *sealed,
            },
            AlreadyExists(path) => AlreadyExists(path.clone()),
            Io { op, path, source } => Io {
                op,
                path: path.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
        }
    }
}

pub type Result<T> = std::result::Result<T, PartitionError>;

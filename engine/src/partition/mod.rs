//! One partition: a segmented append-only log in its own directory, with its journal of
//! unflushed batches, its durability policy, its consumer offsets and its boot recovery.
//!
//! ```text
//! {partition_dir}/
//!   superblock.a, superblock.b        durable end of the log (ping-pong, newest valid wins)
//!   offsets/consumers/{id}            stored consumer offsets
//!   offsets/groups/{id}               stored consumer-group offsets
//!   {start_offset:020}.log / .index   segments: batch records / sparse index
//! ```
//!
//! A partition is either open or **fenced**: fenced partitions keep their files untouched and
//! answer every request with the reason (recovery found damage it must not repair, or an I/O
//! error made the state of the files unknown).

pub mod offsets;
mod open_log;
pub mod recovery;
pub mod segment;
pub mod superblock;

pub use offsets::{ConsumerId, ConsumerKind, StoredOffset};
pub use open_log::{AppendAck, PollFrom, Polled};
pub use recovery::{Outcome, RecoveryPlan};
pub use superblock::{DurablePoint, Superblock};

use crate::config::{PartitionSettings, TopicConfig};
use crate::env::{Env, OpenMode};
use crate::format::FormatError;
use bytes::BytesMut;
use open_log::OpenLog;
use segment::{index_name, log_name};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use superblock::SLOT_NAMES;

/// The directory of a partition under a data root, as in the seed's tree.
pub fn partition_dir(root: &Path, stream: u32, topic: u32, partition: u32) -> PathBuf {
    root.join("streams")
        .join(stream.to_string())
        .join("topics")
        .join(topic.to_string())
        .join("partitions")
        .join(partition.to_string())
}

/// Why a partition is fenced. Every variant names the file and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceReason {
    NoSuperblock {
        dir: PathBuf,
        problems: String,
    },
    SuperblockIdentity {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    SuperblockMisplaced {
        path: PathBuf,
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
    ReadFailed {
        file: PathBuf,
        position: u64,
        error: String,
    },
    /// An I/O call failed while serving; the files' state is unknown until recovery.
    IoFailed {
        op: &'static str,
        path: PathBuf,
        error: String,
    },
}

impl fmt::Display for FenceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use FenceReason::*;
        match self {
            NoSuperblock { dir, problems } => write!(f, "{}: no valid superblock ({problems})", dir.display()),
            SuperblockIdentity { path, expected, found } => write!(f, "{}: superblock belongs to partition {found}, expected {expected}", path.display()),
            DurableEndUncertain { log, position, damage, slot } => write!(f, "{} at position {position}: {damage}; {} is damaged, so the durable end may lie above this damage and truncating could drop acknowledged data", log.display(), slot.display()),
            SuperblockMisplaced { path } => write!(f, "{}: holds more than one superblock slot: a superblock write landed out of place, so the newest durable record may be lost", path.display()),
            MissingLog { index, log } => write!(f, "{} exists at or below the durable end but {} does not", index.display(), log.display()),
            DurableSegmentMissing { log, durable } => write!(f, "{} is missing, but the superblock records {} durable bytes in it (next offset {})", log.display(), durable.position, durable.next_offset),
            ChainGap { log, expected_start, found_start } => write!(f, "{}: segment chain broken: expected a segment starting at offset {expected_start}, found {found_start}", log.display()),
            SegmentNameMismatch { log, name_offset, first_batch_offset } => write!(f, "{}: the name says offset {name_offset}, the first batch has base_offset {first_batch_offset}", log.display()),
            SealedSegmentCorrupt { log, position, damage } => write!(f, "{} (sealed) at position {position}: {damage}", log.display()),
            CorruptBelowDurable { log, position, durable_position, damage } => write!(f, "{} at position {position}, below the durable end {durable_position}: {damage}", log.display()),
            LogShorterThanDurable { log, valid_end, durable_position } => write!(f, "{}: valid data ends at {valid_end}, but the superblock records {durable_position} bytes as synced (lost write or lying fsync)", log.display()),
            DurableOffsetMismatch { log, durable, found_next_offset } => write!(f, "{}: at durable position {} the log reaches offset {:?}, the superblock records {}", log.display(), durable.position, found_next_offset, durable.next_offset),
            EmptySealedSegment { log } => write!(f, "{}: a sealed segment is empty", log.display()),
            ReadFailed { file, position, error } => write!(f, "{} at position {position}: read failed: {error}", file.display()),
            IoFailed { op, path, error } => write!(f, "{op} {} failed: {error}", path.display()),
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
    #[error("no space left on the device; nothing from this request was acknowledged")]
    NoSpace,
    #[error(
        "{bytes} bytes of unflushed messages would exceed the journal limit {limit}; retry later"
    )]
    JournalFull { bytes: u64, limit: u64 },
    #[error("offset {offset} is beyond the partition's last offset {last:?}")]
    OffsetBeyondEnd { offset: u64, last: Option<u64> },
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
    #[error("partition directory {0} already holds a partition")]
    AlreadyExists(PathBuf),
    #[error("{op} {path} failed: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

pub type Result<T> = std::result::Result<T, PartitionError>;

/// The outcome of opening a partition.
pub struct Opened {
    pub partition: Partition,
    pub plan: RecoveryPlan,
}

/// A partition: open, or fenced with a reason.
pub struct Partition {
    state: State,
}

enum State {
    Open(Box<OpenLog>),
    Fenced(FenceReason),
}

fn io_error<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PartitionError + 'a {
    move |source| PartitionError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl Partition {
    /// Creates a new, empty partition in `dir` (which must not hold one), durably: files
    /// synced, then the directory and its parent.
    pub fn create(
        env: &Env,
        dir: &Path,
        partition_id: u64,
        config: TopicConfig,
        settings: PartitionSettings,
    ) -> Result<Partition> {
        let disk = env.disk.as_ref();
        let _span =
            tracing::info_span!("partition_create", dir = %dir.display(), partition_id).entered();
        config.validate()?;
        if disk
            .exists(&dir.join(SLOT_NAMES[0]))
            .map_err(io_error("stat", dir))?
            || disk
                .exists(&dir.join(SLOT_NAMES[1]))
                .map_err(io_error("stat", dir))?
        {
            return Err(PartitionError::AlreadyExists(dir.to_path_buf()));
        }
        for sub in ["offsets/consumers", "offsets/groups"] {
            let path = dir.join(sub);
            disk.create_dir_all(&path)
                .map_err(io_error("create_dir_all", &path))?;
        }
        for name in [log_name(0), index_name(0)] {
            let path = dir.join(name);
            let file = disk
                .open(&path, OpenMode::CreateOrOpen)
                .map_err(io_error("create", &path))?;
            file.set_len(0).map_err(io_error("set_len", &path))?;
            file.sync_data().map_err(io_error("sync_data", &path))?;
        }
        let durable = DurablePoint {
            segment_start: 0,
            position: 0,
            next_offset: 0,
        };
        for sequence in [0, 1] {
            let sb = Superblock {
                sequence,
                partition_id,
                durable,
            };
            superblock::write_slot(disk, dir, &sb).map_err(io_error("write superblock", dir))?;
        }
        for sync in [dir.join("offsets"), dir.to_path_buf()] {
            disk.sync_dir(&sync).map_err(io_error("sync_dir", &sync))?;
        }
        if let Some(parent) = dir.parent() {
            disk.sync_dir(parent)
                .map_err(io_error("sync_dir", parent))?;
        }
        Ok(Self::open(env, dir, partition_id, config, settings)?.partition)
    }

    /// Opens an existing partition: plans recovery, applies it unless fenced, and loads the
    /// log. Fencing is not an error here: the returned partition answers with the reason.
    pub fn open(
        env: &Env,
        dir: &Path,
        partition_id: u64,
        config: TopicConfig,
        settings: PartitionSettings,
    ) -> Result<Opened> {
        let disk = env.disk.as_ref();
        let plan = recovery::plan(disk, dir, partition_id, &settings.limits)
            .map_err(io_error("recovery scan of", dir))?;
        if let Some(reason) = &plan.fence {
            tracing::error!(dir = %dir.display(), %reason, "partition fenced at recovery");
            return Ok(Opened {
                partition: Partition {
                    state: State::Fenced(reason.clone()),
                },
                plan,
            });
        }
        for note in &plan.notes {
            tracing::warn!(dir = %dir.display(), %note, "recovery note");
        }
        let superblock = recovery::apply(disk, &plan)
            .map_err(io_error("recovery of", dir))?
            .expect("an unfenced plan has a superblock");
        let log = OpenLog::open(env.clone(), &plan, superblock, config, settings)?;
        Ok(Opened {
            partition: Partition {
                state: State::Open(Box::new(log)),
            },
            plan,
        })
    }

    pub fn fence_reason(&self) -> Option<&FenceReason> {
        match &self.state {
            State::Fenced(reason) => Some(reason),
            State::Open(_) => None,
        }
    }

    fn log(&mut self) -> Result<&mut OpenLog> {
        match &mut self.state {
            State::Open(log) => Ok(log),
            State::Fenced(reason) => Err(PartitionError::Fenced(reason.clone())),
        }
    }

    fn log_ref(&self) -> Result<&OpenLog> {
        match &self.state {
            State::Open(log) => Ok(log),
            State::Fenced(reason) => Err(PartitionError::Fenced(reason.clone())),
        }
    }

    /// Runs `op`; an I/O failure fences the partition (never retry-and-ack).
    fn guarded<T>(&mut self, op: impl FnOnce(&mut OpenLog) -> Result<T>) -> Result<T> {
        let result = op(self.log()?);
        if let Err(PartitionError::Io { op, path, source }) = &result {
            let reason = FenceReason::IoFailed {
                op,
                path: path.clone(),
                error: source.to_string(),
            };
            tracing::error!(%reason, "partition fenced after an I/O failure");
            self.state = State::Fenced(reason.clone());
            return Err(PartitionError::Fenced(reason));
        }
        result
    }

    /// Appends one batch to the journal (admission: verify, stamp). Under `replicated` the
    /// returned ack is final; under `persisted` call [`Partition::persist`] (or use
    /// [`Partition::append_group`]) before acknowledging.
    pub fn append(&mut self, batch: BytesMut) -> Result<AppendAck> {
        self.guarded(|log| log.append(batch))
    }

    /// Appends many batches and, when the topic is `persisted`, makes them all durable with
    /// one flush and one sync per file (group commit). Each batch gets its own result.
    pub fn append_group(&mut self, batches: Vec<BytesMut>) -> Vec<Result<AppendAck>> {
        let mut results: Vec<Result<AppendAck>> =
            batches.into_iter().map(|b| self.append(b)).collect();
        let needs_persist = results
            .iter()
            .any(|r| matches!(r, Ok(ack) if !ack.durable && ack.requires_persist));
        if needs_persist && crate::canary("ack-before-sync") {
            let _ = self.flush();
            for ack in results.iter_mut().flatten() {
                ack.durable = true;
            }
            return results;
        }
        if needs_persist {
            match self.persist() {
                Ok(_) => {
                    for ack in results.iter_mut().flatten() {
                        ack.durable = true;
                    }
                }
                Err(error) => {
                    // Nothing of the group is acknowledged: the producer learns the outcome
                    // is unknown (the batches may still land with a later flush).
                    for result in results.iter_mut().filter(|r| r.is_ok()) {
                        *result = Err(match &error {
                            PartitionError::Fenced(reason) => {
                                PartitionError::Fenced(reason.clone())
                            }
                            PartitionError::NoSpace => PartitionError::NoSpace,
                            // `guarded` turns every I/O error into a fence.
                            other => {
                                unreachable!("persist fails only with NoSpace or Fenced: {other}")
                            }
                        });
                    }
                }
            }
        }
        results
    }

    /// Flushes every journaled batch and makes the log durable: log and index synced, new
    /// segment names synced, then the superblock records the durable end.
    pub fn persist(&mut self) -> Result<DurablePoint> {
        self.guarded(|log| log.persist())
    }

    /// Flushes without syncing (what a threshold flush does).
    pub fn flush(&mut self) -> Result<()> {
        self.guarded(|log| log.flush_journal())
    }

    pub fn poll(&mut self, from: PollFrom, count: u32) -> Result<Polled> {
        self.guarded(|log| log.poll(from, count))
    }

    pub fn store_offset(&mut self, consumer: ConsumerId, offset: u64) -> Result<()> {
        self.guarded(|log| log.store_offset(consumer, offset))
    }

    pub fn get_offset(&self, consumer: ConsumerId) -> Result<Option<u64>> {
        self.log_ref()?.get_offset(consumer)
    }

    pub fn delete_offset(&mut self, consumer: ConsumerId) -> Result<bool> {
        self.guarded(|log| log.delete_offset(consumer))
    }

    /// Graceful close: flushes and syncs every journaled message regardless of thresholds.
    pub fn close(mut self) -> Result<()> {
        self.persist().map(|_| ())
    }

    /// The offset the next appended message gets.
    pub fn next_offset(&self) -> Result<u64> {
        Ok(self.log_ref()?.next_offset())
    }

    /// The durable end the superblock records.
    pub fn durable_point(&self) -> Result<DurablePoint> {
        Ok(self.log_ref()?.durable_point())
    }

    /// Start offsets of the segments, oldest first.
    pub fn segment_starts(&self) -> Result<Vec<u64>> {
        Ok(self.log_ref()?.segment_starts())
    }

    pub fn config(&self) -> Result<TopicConfig> {
        Ok(self.log_ref()?.config())
    }
}

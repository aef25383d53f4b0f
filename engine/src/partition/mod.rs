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

pub mod active_handles;
mod error;
pub mod hooks;
pub mod offsets;
mod open_log;
pub mod read_plan;
pub mod recovery;
pub mod resources;
pub mod segment;
pub mod superblock;

pub use error::{FenceReason, PartitionError, Result};
pub use hooks::{PartitionHooks, ReadEndHook, ReadHooks, VerdictHook};
pub use offsets::{ConsumerId, ConsumerKind, StoredOffset};
pub use open_log::{AppendAck, RecordPlan};
pub use read_plan::{PlanRead, PollFrom, Polled, ReadFence, ReadPlan};
pub use recovery::{Insurance, Opening, Outcome, RecoveryPlan};
pub use superblock::{DurablePoint, PartitionIdentity, Superblock};

use crate::config::{PartitionSettings, TopicConfig};
use crate::env::{Env, OpenMode};
use bytes::BytesMut;
use open_log::{OpenLog, WriteError};
use segment::{index_name, log_name};
use std::io;
use std::path::{Path, PathBuf};
use superblock::{OffsetSet, SLOT_NAMES};

/// The directory of a partition under a data root, as in the seed's tree.
pub fn partition_dir(root: &Path, stream: u32, topic: u32, partition: u32) -> PathBuf {
    root.join("streams")
        .join(stream.to_string())
        .join("topics")
        .join(topic.to_string())
        .join("partitions")
        .join(partition.to_string())
}

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

/// Why a persist that a group of appends waits on failed: exactly two ways.
enum PersistFailure {
    NoSpace,
    Fenced(FenceReason),
}

fn io_error<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PartitionError + 'a {
    move |source| PartitionError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Whether `dir` is missing or holds only what an interrupted create leaves (the offsets
/// directories, empty, and segment 0's files, empty, or a temporary file): a partition is
/// created there. Anything else (a superblock slot, messages, an offset) is someone's data.
fn holds_nothing(disk: &dyn crate::env::Disk, dir: &Path) -> io::Result<bool> {
    if !disk.exists(dir)? {
        return Ok(true);
    }
    for entry in disk.read_dir(dir)? {
        let path = dir.join(&entry.name);
        let leftover = match entry.name.as_str() {
            "offsets" => {
                let mut empty = true;
                for sub in disk.read_dir(&path)? {
                    empty &= sub.is_dir && disk.read_dir(&path.join(&sub.name))?.is_empty();
                }
                empty
            }
            name if name == log_name(0) || name == index_name(0) => {
                disk.open(&path, OpenMode::Read)?.len()? == 0
            }
            name => name.ends_with(".tmp") && !SLOT_NAMES.contains(&name),
        };
        if !leftover {
            return Ok(false);
        }
    }
    Ok(true)
}

impl Partition {
    /// Creates a new, empty partition in `dir` (which must not hold one), durably: files
    /// synced, then the directory and its parent.
    pub fn create(
        env: &Env,
        dir: &Path,
        identity: PartitionIdentity,
        config: TopicConfig,
        settings: PartitionSettings,
    ) -> Result<Partition> {
        let hooks = PartitionHooks::default();
        Self::create_with_hooks(env, dir, identity, config, settings, hooks)
    }

    /// [`Partition::create`] with `hooks` (the simulator's; production has none).
    pub fn create_with_hooks(
        env: &Env,
        dir: &Path,
        identity: PartitionIdentity,
        config: TopicConfig,
        settings: PartitionSettings,
        hooks: PartitionHooks,
    ) -> Result<Partition> {
        let partition = Self::create_unlinked(env, dir, identity, config, settings, hooks)?;
        if let Some(parent) = dir.parent() {
            env.disk
                .sync_dir(parent)
                .map_err(io_error("sync_dir", parent))?;
        }
        Ok(partition)
    }

    /// [`Partition::create`] without syncing the parent directory: the partition's files and
    /// its own directory are durable, its name in the parent is not until the caller syncs
    /// the parent (once for every partition it created there).
    pub fn create_unlinked(
        env: &Env,
        dir: &Path,
        identity: PartitionIdentity,
        config: TopicConfig,
        settings: PartitionSettings,
        hooks: PartitionHooks,
    ) -> Result<Partition> {
        let place = (env, dir, identity);
        Self::create_starting(place, config, (settings, hooks), 0)
    }

    /// [`Partition::create_unlinked`] of a partition whose log starts at offset `start`
    /// (as one whose retention removed everything below it): a cluster's replica rebuilt
    /// from its peers, which hold nothing below `start`. The parent directory is synced.
    pub fn create_at(
        (env, dir, identity): (&Env, &Path, PartitionIdentity),
        config: TopicConfig,
        (settings, hooks): (PartitionSettings, PartitionHooks),
        start: u64,
    ) -> Result<Partition> {
        let place = (env, dir, identity);
        let partition = Self::create_starting(place, config, (settings, hooks), start)?;
        if let Some(parent) = dir.parent() {
            env.disk
                .sync_dir(parent)
                .map_err(io_error("sync_dir", parent))?;
        }
        Ok(partition)
    }

    fn create_starting(
        (env, dir, identity): (&Env, &Path, PartitionIdentity),
        config: TopicConfig,
        (settings, hooks): (PartitionSettings, PartitionHooks),
        start: u64,
    ) -> Result<Partition> {
        let disk = env.disk.as_ref();
        let _span =
            tracing::info_span!("partition_create", dir = %dir.display(), %identity).entered();
        config.validate()?;
        if !holds_nothing(disk, dir).map_err(io_error("list", dir))? {
            return Err(PartitionError::AlreadyExists(dir.to_path_buf()));
        }
        for sub in ["offsets/consumers", "offsets/groups"] {
            let path = dir.join(sub);
            disk.create_dir_all(&path)
                .map_err(io_error("create_dir_all", &path))?;
        }
        for name in [log_name(start), index_name(start)] {
            let path = dir.join(name);
            let file = disk
                .open(&path, OpenMode::CreateOrOpen)
                .map_err(io_error("create", &path))?;
            file.set_len(0).map_err(io_error("set_len", &path))?;
            file.sync_data().map_err(io_error("sync_data", &path))?;
        }
        let durable = DurablePoint {
            segment_start: start,
            position: 0,
            next_offset: start,
        };
        for sequence in [0, 1] {
            let record = Superblock {
                sequence,
                identity,
                durable,
                log_start: start,
                offsets: OffsetSet::default(),
            };
            superblock::write_slot(disk, dir, &record)
                .map_err(io_error("write superblock", dir))?;
        }
        for sync in [dir.join("offsets"), dir.to_path_buf()] {
            disk.sync_dir(&sync).map_err(io_error("sync_dir", &sync))?;
        }
        let opened =
            Self::open_with_hooks(env, dir, identity, config, settings, hooks, Opening::Alone)?;
        Ok(opened.partition)
    }

    /// Opens an existing partition: plans recovery, applies it unless fenced, and loads the
    /// log. Fencing is not an error here: the returned partition answers with the reason.
    pub fn open(
        env: &Env,
        dir: &Path,
        identity: PartitionIdentity,
        config: TopicConfig,
        settings: PartitionSettings,
    ) -> Result<Opened> {
        let hooks = PartitionHooks::default();
        Self::open_with_hooks(env, dir, identity, config, settings, hooks, Opening::Alone)
    }

    /// [`Partition::open`] with `hooks` (the simulator's; production has none): recovery's
    /// verdict, the disk its apply writes through and the disk the open log writes through
    /// pass through them. `opening`: alone, or within a node's boot, which may have read the
    /// superblock slots already and makes durable what a recovery with nothing to repair
    /// serves ([`Opening`]).
    pub fn open_with_hooks(
        env: &Env,
        dir: &Path,
        identity: PartitionIdentity,
        config: TopicConfig,
        settings: PartitionSettings,
        hooks: PartitionHooks,
        opening: Opening,
    ) -> Result<Opened> {
        let durability = config.consumer_offset_durability;
        let insurance = opening.insurance();
        let survey_disk = opening.page_cache().reading(&env.disk);
        let slots = match opening {
            Opening::Boot { slots, .. } => slots.map(|slots| *slots),
            Opening::Alone => None,
        };
        let verdict = hooks.recovery_verdict;
        let plan = recovery::plan_with_hook(
            survey_disk.as_ref(),
            dir,
            identity,
            durability,
            verdict,
            slots,
        )
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
        let superblock = recovery::apply(hooks.recovery_disk(&env.disk).as_ref(), &plan, insurance)
            .map_err(io_error("recovery of", dir))?;
        let log_env = Env {
            disk: hooks.log_disk(&env.disk),
            ..env.clone()
        };
        let log = OpenLog::open(log_env, &plan, superblock, config, (settings, hooks.read))?;
        Ok(Opened {
            partition: Partition {
                state: State::Open(Box::new(log)),
            },
            plan,
        })
    }

    /// A partition that is fenced before it was opened (its directory is missing).
    pub fn fenced(reason: FenceReason) -> Partition {
        tracing::error!(%reason, "partition fenced");
        Partition {
            state: State::Fenced(reason),
        }
    }

    pub fn fence_reason(&self) -> Option<&FenceReason> {
        match &self.state {
            State::Fenced(reason) => Some(reason),
            State::Open(_) => None,
        }
    }

    /// Draws on a node's shared resources (sealed-segment handles, journal budget) instead
    /// of the partition's own, from before its first append. A fenced partition holds none.
    pub fn attach(&mut self, resources: &resources::PartitionResources) {
        if let State::Open(log) = &mut self.state {
            log.attach(resources);
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

    fn fence(&mut self, reason: FenceReason) -> FenceReason {
        tracing::error!(%reason, "partition fenced");
        self.state = State::Fenced(reason.clone());
        reason
    }

    /// Runs `op`. An I/O failure fences the partition (never retry-and-ack), and so does
    /// damage a read found in bytes promised durable (after `op` has its answer), and a
    /// failed sync the node's table made to close its active files (before `op`).
    fn guarded<T>(&mut self, op: impl FnOnce(&mut OpenLog) -> Result<T>) -> Result<T> {
        let log = self.log()?;
        if let Some(reason) = log.active_files_failure() {
            return Err(PartitionError::Fenced(self.fence(reason)));
        }
        let result = op(log);
        if let Some(reason) = log.take_pending_fence() {
            self.fence(reason);
        }
        if let Err(PartitionError::Io { op, path, source }) = &result {
            let reason = self.fence(FenceReason::IoFailed {
                op,
                path: path.clone(),
                error: source.to_string(),
            });
            return Err(PartitionError::Fenced(reason));
        }
        result
    }

    /// Appends one batch to the journal (admission: verify, stamp). Under `replicated` the
    /// returned ack is final. Under `persisted` it is provisional: the batch is not shown to
    /// consumers and may not be acknowledged until [`Partition::persist`] succeeds, or
    /// [`Partition::persist_log`] and then the record it plans (or use
    /// [`Partition::append_group`]); a failed persist rolls every unsynced batch back.
    pub fn append(&mut self, batch: BytesMut) -> Result<AppendAck> {
        self.guarded(|log| log.append(batch))
    }

    /// [`Partition::append`] stamped with the clock reading `now` instead of this node's
    /// clock (never below the partition's last timestamp): a replica applying its group's
    /// committed entry stamps it as every other replica does.
    pub fn append_at(&mut self, batch: BytesMut, now: u64) -> Result<AppendAck> {
        self.guarded(|log| log.append_at(batch, now))
    }

    /// Appends many batches and, when the topic is `persisted`, makes them all durable with
    /// one flush and one sync per file (group commit). Each batch gets its own result: a
    /// batch is acknowledged only once durable; when the persist fails, the batches it made
    /// durable anyway (a segment sealed on the way) are acknowledged and the rest fail.
    pub fn append_group(&mut self, batches: Vec<BytesMut>) -> Vec<Result<AppendAck>> {
        let mut results: Vec<Result<AppendAck>> =
            batches.into_iter().map(|b| self.append(b)).collect();
        let needs_persist = results
            .iter()
            .any(|r| matches!(r, Ok(ack) if !ack.durable && ack.requires_persist));
        if !needs_persist {
            return results;
        }
        let failure = self.persist_for_group().err();
        let durable_end = self
            .log_ref()
            .map_or(0, |log| log.durable_point().next_offset);
        for result in results.iter_mut() {
            let Ok(ack) = result else { continue };
            let end = ack.base_offset + u64::from(ack.message_count);
            match &failure {
                None => ack.durable = true,
                Some(_) if end <= durable_end => ack.durable = true,
                Some(PersistFailure::NoSpace) => *result = Err(PartitionError::NoSpace),
                Some(PersistFailure::Fenced(reason)) => {
                    *result = Err(PartitionError::Fenced(reason.clone()))
                }
            }
        }
        results
    }

    /// [`Partition::persist`], failing in exactly the ways a group can.
    fn persist_for_group(&mut self) -> std::result::Result<DurablePoint, PersistFailure> {
        let log = match &mut self.state {
            State::Open(log) => log,
            State::Fenced(reason) => return Err(PersistFailure::Fenced(reason.clone())),
        };
        match log.persist() {
            Ok(point) => Ok(point),
            Err(WriteError::NoSpace) => Err(PersistFailure::NoSpace),
            Err(WriteError::Io { op, path, source }) => {
                Err(PersistFailure::Fenced(self.fence(FenceReason::IoFailed {
                    op,
                    path,
                    error: source.to_string(),
                })))
            }
        }
    }

    /// Flushes every journaled batch and makes the log durable: log and index synced, new
    /// segment names synced, then the superblock records the durable end.
    pub fn persist(&mut self) -> Result<DurablePoint> {
        self.guarded(|log| log.persist().map_err(PartitionError::from))
    }

    /// The first step of a pipelined persist: every journaled batch flushed and the log
    /// synced, nothing recorded. Returns the end durable on the device, for
    /// [`Partition::plan_record`].
    pub fn persist_log(&mut self) -> Result<DurablePoint> {
        self.guarded(|log| log.persist_log().map_err(PartitionError::from))
    }

    /// The second step: the superblock record naming `synced`, for a job to write (`None`
    /// when the superblock names it already). Until [`Partition::recorded`] takes its
    /// result, nothing else may record: the owner waits for it before any request that
    /// could (see [`Partition::recording`]).
    pub fn plan_record(&mut self, synced: DurablePoint) -> Result<Option<RecordPlan>> {
        Ok(self.log()?.plan_record(synced))
    }

    /// The record [`Partition::plan_record`] handed out was written, or failed (which fences).
    pub fn recorded(&mut self, written: std::io::Result<()>) -> Result<DurablePoint> {
        self.guarded(|log| log.recorded(written).map_err(PartitionError::from))
    }

    /// A record is out ([`Partition::plan_record`]).
    pub fn recording(&self) -> bool {
        self.log_ref().is_ok_and(|log| log.recording())
    }

    /// Whether a flush now could seal the active segment, which writes a record.
    pub fn flush_may_seal(&self) -> bool {
        self.log_ref().is_ok_and(|log| log.flush_may_seal())
    }

    /// Flushes without syncing (what a threshold flush does).
    pub fn flush(&mut self) -> Result<()> {
        self.guarded(|log| log.flush_journal().map_err(PartitionError::from))
    }

    pub fn poll(&mut self, from: PollFrom, count: u32) -> Result<Polled> {
        self.poll_within(from, count, u64::MAX)
    }

    /// [`Partition::poll`], with at most `max_bytes` of batches (a first batch always
    /// whole): what a server that reserved room for the reply lets it take.
    pub fn poll_within(&mut self, from: PollFrom, count: u32, max_bytes: u64) -> Result<Polled> {
        self.guarded(|log| log.poll(from, count, max_bytes))
    }

    /// The plan of [`Partition::poll_within`], to read anywhere ([`ReadPlan::read`]); its
    /// fence, if any, comes back through [`Partition::read_damaged`].
    pub fn read_plan(&mut self, from: PollFrom, count: u32, max_bytes: u64) -> Result<ReadPlan> {
        self.guarded(|log| log.read_plan(from, count, max_bytes))
    }

    /// A plan's read of this partition found damage in bytes promised durable: it fences
    /// (unless the damaged segment was deleted since).
    pub fn read_damaged(&mut self, fence: ReadFence) {
        if let State::Open(log) = &mut self.state {
            log.read_damaged(fence);
        }
        let pending = match &mut self.state {
            State::Open(log) => log.take_pending_fence(),
            State::Fenced(_) => None,
        };
        if let Some(reason) = pending {
            self.fence(reason);
        }
    }

    /// The offset stored for `consumer` as its file holds it (no floor at the log start):
    /// what a poll's auto-commit expects to replace.
    pub fn stored_offset(&self, consumer: ConsumerId) -> Result<Option<u64>> {
        self.log_ref()?.stored_offset(consumer)
    }

    pub fn store_offset(&mut self, consumer: ConsumerId, offset: u64) -> Result<()> {
        self.guarded(|log| log.store_offset(consumer, offset))
    }

    /// [`Partition::store_offset`] for a shard's round: true when the store waits for
    /// [`Partition::settle_offsets`] (under `persisted`, into an existing file: the round's
    /// stores share one directory sync) and may be answered only after it.
    pub fn store_offset_in_round(&mut self, consumer: ConsumerId, offset: u64) -> Result<bool> {
        self.guarded(|log| log.store_offset_in_round(consumer, offset))
    }

    /// Makes the stores [`Partition::store_offset_in_round`] left waiting durable and shown.
    pub fn settle_offsets(&mut self) -> Result<()> {
        self.guarded(|log| log.settle_offsets())
    }

    /// Stores an offset a cluster member's partition group ordered (checked there, against
    /// the sends ordered before it, not against this replica's end).
    pub fn store_replicated_offset(&mut self, consumer: ConsumerId, offset: u64) -> Result<()> {
        self.guarded(|log| log.store_offset_unchecked(consumer, offset))
    }

    /// Syncs the offset files stored unsynced since the last call (a replica's checkpoint).
    pub fn sync_offsets(&mut self) -> Result<()> {
        self.guarded(|log| log.sync_offsets())
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

    /// The offset after the last message written to a segment file (flushed; synced or not).
    pub fn flushed_next_offset(&self) -> Result<u64> {
        Ok(self.log_ref()?.flushed_next_offset())
    }

    /// The offset after the last message consumers may see: the durable end under
    /// `persisted`, everything admitted under `replicated`.
    pub fn visible_next_offset(&self) -> Result<u64> {
        Ok(self.log_ref()?.visible_next_offset())
    }

    /// The durable end the superblock records.
    pub fn durable_point(&self) -> Result<DurablePoint> {
        Ok(self.log_ref()?.durable_point())
    }

    /// Start offsets of the segments, oldest first.
    pub fn segment_starts(&self) -> Result<Vec<u64>> {
        Ok(self.log_ref()?.segment_starts())
    }

    /// The first offset the log holds, as the superblock records it.
    pub fn log_start(&self) -> Result<u64> {
        Ok(self.log_ref()?.log_start())
    }

    /// Bytes of batches the log holds (written to segments, and in the journal).
    pub fn stored_bytes(&self) -> Result<u64> {
        Ok(self.log_ref()?.stored_bytes())
    }

    /// Bytes of admitted batches held in memory, not yet written to a segment (its journal).
    pub fn journal_bytes(&self) -> Result<u64> {
        Ok(self.log_ref()?.journal_bytes())
    }

    /// The sealed segments, oldest first: (start offset, bytes, newest timestamp).
    pub fn sealed_segments(&self) -> Result<Vec<(u64, u64, u64)>> {
        Ok(self.log_ref()?.sealed_segments())
    }

    /// Deletes the `count` oldest segments (never the active one), recording the new log
    /// start durably before unlinking anything.
    pub fn delete_oldest_segments(&mut self, count: usize) -> Result<()> {
        self.guarded(|log| log.delete_oldest_segments(count))
    }

    pub fn config(&self) -> Result<TopicConfig> {
        Ok(self.log_ref()?.config())
    }

    /// Every consumer with a stored offset here (damaged ones included).
    pub fn consumers(&self) -> Result<Vec<ConsumerId>> {
        Ok(self.log_ref()?.consumers())
    }

    /// The nonce of the identity its superblock records.
    pub fn nonce(&self) -> Result<u64> {
        Ok(self.log_ref()?.identity_nonce())
    }
}

//! The open partition log: admission, the journal, flushes, rotation, persistence and
//! consumer offsets; polls are in [`read`].
//!
//! Invariants kept here:
//! - offsets are assigned gaplessly at admission; `next_offset` = last segment end + journal;
//! - a flush writes whole batches at the segment's `log_len` and advances `log_len` only
//!   after the write (and its index entry) succeeded;
//! - the superblock's durable end only ever names bytes whose `sync_data` returned: it is
//!   written after the log (and index) syncs of the flush it records, and never moves back;
//! - a sealed segment was synced before the next one was created, and is never written again;
//!   it holds no open file (reads go through the shared handle cache);
//! - the active segment's files are checked out of the node's bounded table for each use
//!   ([`super::active_handles`]), dirty from a write until the durable end records them;
//! - the journal's bytes are reserved in the node's journal budget while it holds them;
//! - under `persisted`, nothing above the durable end is ever shown (polls, stored offsets),
//!   and a failed persist rolls back every batch it did not sync (a synced batch waits for
//!   its record, [`pipeline`]), so an offset a producer was refused is never shown holding
//!   a message.

mod offset_stores;
mod pipeline;
mod read;

pub use pipeline::RecordPlan;

use super::active_handles::Use;
use super::hooks::ReadHooks;
use super::offsets::{ConsumerId, ConsumerOffsets, StoredOffset};
use super::recovery::RecoveryPlan;
use super::resources::{HandleKey, JournalBudget, PartitionResources};
use super::segment::{index_name, log_name, ActiveFiles, Segment};
use super::superblock::{self, DurablePoint, Superblock};
use super::{FenceReason, PartitionError, Result};
use crate::config::{Durability, PartitionSettings, TopicConfig};
use crate::env::{is_no_space, Disk, DiskFile, Env, OpenMode};
use crate::format::{admit_batch, BatchHeader, IndexEntry, INDEX_ENTRY_LEN};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::io;
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What an append was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendAck {
    pub base_offset: u64,
    pub message_count: u32,
    /// The server timestamp stamped into the batch (microseconds).
    pub timestamp: u64,
    /// The batch is on stable storage (synced and recorded in the superblock).
    pub durable: bool,
    /// The topic is `persisted`: the append may be acknowledged only once `durable`.
    pub requires_persist: bool,
}

/// Why writing failed: the device is full (the caller may retry), or any other I/O error
/// (the files' state is unknown: the partition fences).
#[derive(Debug)]
pub(super) enum WriteError {
    NoSpace,
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl From<WriteError> for PartitionError {
    fn from(error: WriteError) -> Self {
        match error {
            WriteError::NoSpace => PartitionError::NoSpace,
            WriteError::Io { op, path, source } => PartitionError::Io { op, path, source },
        }
    }
}

fn write_error<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> WriteError + 'a {
    move |source| WriteError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Like [`write_error`], but ENOSPC is [`WriteError::NoSpace`] (creating a file or a
/// directory entry can run out of space as a write can).
fn space_or_write_error<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> WriteError + 'a {
    move |source| {
        if is_no_space(&source) {
            WriteError::NoSpace
        } else {
            write_error(op, path)(source)
        }
    }
}

struct JournalBatch {
    bytes: Bytes,
    header: BatchHeader,
}

/// Stamped batches admitted but not yet written to the active segment. Its bytes are held
/// in the node's journal budget from admission until the batch leaves (written, rolled
/// back, or the partition dropped).
struct Journal {
    batches: VecDeque<JournalBatch>,
    bytes: u64,
    messages: u64,
    budget: JournalBudget,
}

impl Journal {
    fn new(budget: JournalBudget) -> Journal {
        Journal {
            batches: VecDeque::new(),
            bytes: 0,
            messages: 0,
            budget,
        }
    }

    /// Room for a batch of `length` bytes: under this partition's limit, then reserved in
    /// the node's budget (released by [`Self::unreserve`] if the batch is not admitted).
    fn reserve(&self, length: u64, limit: u64) -> Result<()> {
        if self.bytes + length > limit {
            return Err(PartitionError::JournalFull {
                bytes: self.bytes + length,
                limit,
            });
        }
        self.budget
            .reserve(length)
            .map_err(|bytes| PartitionError::NodeJournalFull {
                bytes,
                limit: self.budget.limit(),
            })
    }

    fn unreserve(&self, length: u64) {
        self.budget.release(length);
    }

    /// Adds an admitted batch whose bytes [`Self::reserve`] reserved.
    fn push(&mut self, batch: JournalBatch) {
        self.bytes += batch.header.batch_length;
        self.messages += u64::from(batch.header.message_count);
        self.batches.push_back(batch);
    }

    fn pop_front(&mut self) -> JournalBatch {
        let batch = self.batches.pop_front().expect("a batch to pop");
        self.bytes -= batch.header.batch_length;
        self.messages -= u64::from(batch.header.message_count);
        self.budget.release(batch.header.batch_length);
        batch
    }

    fn clear(&mut self) {
        self.budget.release(self.bytes);
        self.batches.clear();
        self.bytes = 0;
        self.messages = 0;
    }

    /// Draws on another budget from now on (a partition joining its node, before it admits
    /// anything).
    fn move_to(&mut self, budget: JournalBudget) {
        assert!(
            self.batches.is_empty() && self.bytes == 0,
            "a partition joins its node's budget before it admits a batch"
        );
        self.budget = budget;
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.clear();
    }
}

/// How far the active segment's log may run past the last sync of its index before a
/// persist syncs the index too (about one default flush: what a poll already walks past an
/// entry).
pub const INDEX_SYNC_LAG_BYTES: u64 = 1024 * 1024;

pub(super) struct OpenLog {
    env: Env,
    dir: PathBuf,
    partition_id: u64,
    config: TopicConfig,
    settings: PartitionSettings,
    /// Oldest first; the last one is active.
    segments: Vec<Segment>,
    journal: Journal,
    resources: PartitionResources,
    /// This log's number in the handle cache.
    handle_owner: u64,
    next_offset: u64,
    last_timestamp: u64,
    superblock: Superblock,
    /// A segment file was created since the directory was last synced.
    unsynced_dir_entries: bool,
    /// The active segment's log position its index was last synced at: entries for batches
    /// below it are durable. A persist syncs the index only once the log is
    /// [`INDEX_SYNC_LAG_BYTES`] past it.
    index_synced_at: u64,
    offsets: ConsumerOffsets,
    /// Set when a read found damage in bytes promised durable: the partition fences once the
    /// request that found it has its answer.
    pending_fence: Option<FenceReason>,
    /// What a canary bends in this log's read plans (none in production).
    read_hooks: ReadHooks,
    /// The record a job is writing now ([`pipeline`]): the log is synced up to its durable
    /// end, which the superblock does not name yet.
    recording: Option<Superblock>,
    /// The end the log's last sync made durable (see [`OpenLog::synced_end`]).
    synced: DurablePoint,
}

/// How a record reaches its slot file: through the file kept open with the active
/// segment's files, or by its path.
enum SlotWriter {
    Kept(Arc<dyn DiskFile>),
    ByPath(Arc<dyn Disk>),
}

impl SlotWriter {
    /// Writes `next` into its slot in `dir`, synced and read back.
    fn write(&self, dir: &Path, next: &Superblock) -> io::Result<()> {
        match self {
            SlotWriter::Kept(file) => superblock::write_slot_to(file.as_ref(), dir, next),
            SlotWriter::ByPath(disk) => superblock::write_slot(disk.as_ref(), dir, next),
        }
    }
}

impl OpenLog {
    pub(super) fn open(
        env: Env,
        plan: &RecoveryPlan,
        superblock: Superblock,
        config: TopicConfig,
        (settings, read_hooks): (PartitionSettings, ReadHooks),
    ) -> Result<OpenLog> {
        let config = settings.local(config);
        let mut segments = Vec::with_capacity(plan.segments.len());
        let last = plan.segments.len().saturating_sub(1);
        // No file is opened here: sealed segments when a read reaches them, the active one
        // when it is first used (so a boot of many partitions holds none open).
        for (i, planned) in plan.segments.iter().enumerate() {
            segments.push(Segment {
                start_offset: planned.start_offset,
                end_offset: planned.next_offset,
                log_path: planned.log_path.clone(),
                index_path: planned.index_path.clone(),
                log_len: planned.len,
                index: planned.index.clone(),
                max_timestamp: planned.max_timestamp,
                sealed: i != last,
            });
        }
        let active = segments
            .last()
            .expect("a recovered partition has a segment");
        assert_eq!(
            superblock.durable,
            DurablePoint {
                segment_start: active.start_offset,
                position: active.log_len,
                next_offset: active.end_offset,
            },
            "after recovery the whole log is durable"
        );
        let next_offset = active.end_offset;
        // Recovery left the index agreeing with the log as far as it reaches.
        let active_log_len = active.log_len;
        let last_timestamp = segments.iter().map(|s| s.max_timestamp).max().unwrap_or(0);
        let resources = PartitionResources::private();
        Ok(OpenLog {
            journal: Journal::new(resources.journal.clone()),
            handle_owner: resources.handles.register(),
            resources,
            dir: plan.dir.clone(),
            offsets: ConsumerOffsets::new(
                &plan.dir,
                super::offsets::owner(&plan.identity),
                plan.offsets.clone(),
            ),
            partition_id: plan.identity.partition_id.into(),
            env,
            config,
            settings,
            segments,
            next_offset,
            last_timestamp,
            superblock,
            unsynced_dir_entries: false,
            index_synced_at: active_log_len,
            pending_fence: None,
            read_hooks,
            recording: None,
            synced: superblock.durable,
        })
    }

    /// Draws on a node's shared resources from now on instead of this log's own.
    pub(super) fn attach(&mut self, resources: &PartitionResources) {
        self.journal.move_to(resources.journal.clone());
        self.resources.handles.forget_owner(self.handle_owner);
        self.resources.active.forget_owner(self.handle_owner);
        self.handle_owner = resources.handles.register();
        self.resources = resources.clone();
    }

    fn handle_key(&self, segment_start: u64) -> HandleKey {
        HandleKey {
            owner: self.handle_owner,
            segment_start,
        }
    }

    /// The `.log` of segment `i`: the active one's own handle, a sealed one's from the cache
    /// (opened now if the cache does not hold it).
    fn segment_log(&self, i: usize) -> std::result::Result<Arc<dyn DiskFile>, io::Error> {
        let segment = &self.segments[i];
        if !segment.sealed {
            return Ok(self.checkout(Use::Read)?.log.clone());
        }
        self.resources
            .handles
            .get(self.handle_key(segment.start_offset), || {
                let _span = tracing::debug_span!("open_sealed", log = %segment.log_path.display())
                    .entered();
                self.env.disk.open(&segment.log_path, OpenMode::Read)
            })
    }

    pub(super) fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// The offset after the last message written to a segment file (flushed, maybe unsynced).
    pub(super) fn flushed_next_offset(&self) -> u64 {
        self.segments.last().expect("active segment").end_offset
    }

    /// The offset after the last message a consumer may see: under `persisted` the durable
    /// end, under `replicated` everything admitted.
    pub(super) fn visible_next_offset(&self) -> u64 {
        match self.config.durability {
            Durability::Persisted => self.superblock.durable.next_offset,
            Durability::Replicated => self.next_offset,
        }
    }

    pub(super) fn durable_point(&self) -> DurablePoint {
        self.superblock.durable
    }

    pub(super) fn segment_starts(&self) -> Vec<u64> {
        self.segments.iter().map(|s| s.start_offset).collect()
    }

    pub(super) fn config(&self) -> TopicConfig {
        self.config
    }

    pub(super) fn take_pending_fence(&mut self) -> Option<FenceReason> {
        self.pending_fence.take()
    }

    /// The active segment's files, from the node's table (opened if it does not hold them),
    /// for `use_`. Held only for one operation: the table closes files no checkout holds.
    fn checkout(&self, use_: Use) -> io::Result<Arc<ActiveFiles>> {
        let active = self.segments.last().expect("active segment");
        assert!(!active.sealed, "the last segment is the active one");
        let disk = self.env.disk.as_ref();
        let open = || {
            let _span =
                tracing::debug_span!("open_active", log = %active.log_path.display()).entered();
            Ok(ActiveFiles::new(
                Arc::from(disk.open(&active.log_path, OpenMode::ReadWrite)?),
                disk.open(&active.index_path, OpenMode::ReadWrite)?,
            ))
        };
        let owner = self.handle_owner;
        self.resources
            .active
            .checkout(owner, active.start_offset, use_, open)
    }

    /// What writes superblock slot `slot`: its file kept open with the active segment's
    /// ([`ActiveFiles::slot`]), or, when those cannot be checked out (a missing active
    /// log), the file opened by its path for this one write, as a record needs no more.
    fn slot_writer(&self, slot: usize) -> SlotWriter {
        let path = self.dir.join(superblock::SLOT_NAMES[slot]);
        let disk = self.env.disk.clone();
        let kept = self
            .checkout(Use::Read)
            .and_then(|files| files.slot(slot, || disk.open(&path, OpenMode::CreateOrOpen)));
        match kept {
            Ok(file) => SlotWriter::Kept(file),
            Err(error) => {
                tracing::debug!(%error, "the slot file is not kept open: opened for one record");
                SlotWriter::ByPath(disk)
            }
        }
    }

    /// [`Self::checkout`] to write, its failure a [`WriteError`].
    fn active_files(&self) -> std::result::Result<Arc<ActiveFiles>, WriteError> {
        let log_path = &self.segments.last().expect("active segment").log_path;
        self.checkout(Use::Write)
            .map_err(write_error("open", log_path))
    }

    /// The fence a failed sync made to close this log's active files calls for: that sync
    /// took the writeback error, so no later one of this log's would report it.
    pub(super) fn active_files_failure(&self) -> Option<FenceReason> {
        let error = self.resources.active.failure(self.handle_owner)?;
        let active = self.segments.last().expect("active segment");
        Some(FenceReason::IoFailed {
            op: "sync_data (to close the active files)",
            path: active.log_path.clone(),
            error,
        })
    }

    fn start_offset(&self) -> u64 {
        self.segments[0].start_offset
    }

    fn active(&mut self) -> &mut Segment {
        self.segments
            .last_mut()
            .expect("a log has an active segment")
    }

    /// Admission: verify the producer's batch, stamp it, journal it; flush on thresholds.
    pub(super) fn append(&mut self, batch: BytesMut) -> Result<AppendAck> {
        let now = self.env.clock.wall_micros();
        self.append_at(batch, now)
    }

    /// [`OpenLog::append`] with the clock reading `now` given: a replicated partition
    /// stamps every replica's copy with its leader's reading, so the copies are the same
    /// bytes.
    pub(super) fn append_at(&mut self, mut batch: BytesMut, now: u64) -> Result<AppendAck> {
        let length = batch.len() as u64;
        self.journal
            .reserve(length, self.settings.max_journal_bytes)?;
        // Timestamps never go backwards within a partition, whatever the wall clock does.
        let timestamp = now.max(self.last_timestamp);
        let base_offset = self.next_offset;
        let header = match admit_batch(
            &mut batch,
            &self.settings.limits,
            self.partition_id,
            base_offset,
            timestamp,
        ) {
            Ok(header) => header,
            Err(error) => {
                self.journal.unreserve(length);
                return Err(error.into());
            }
        };
        assert_eq!(header.batch_length, length, "admission keeps the length");
        self.last_timestamp = timestamp;
        self.next_offset = header.next_offset();
        self.journal.push(JournalBatch {
            bytes: batch.freeze(),
            header,
        });
        let ack = AppendAck {
            base_offset,
            message_count: header.message_count,
            timestamp,
            durable: false,
            requires_persist: self.config.durability == Durability::Persisted,
        };
        // While a record job is out, a flush that could seal a segment (which records) waits
        // for the persist, which waits for the job.
        if self.flush_due() && !(self.recording.is_some() && self.flush_may_seal()) {
            let started = self.env.clock.monotonic_nanos();
            // Writes that may wait for writeback (dirty throttling) and a rotation's syncs:
            // one wait on the device, off a shard's runtime worker.
            let tasks = self.env.tasks.clone();
            let flushed = crate::env::device_section(tasks.as_ref(), || self.flush_journal());
            if flushed.is_ok() {
                let elapsed = self.env.clock.monotonic_nanos().saturating_sub(started);
                self.resources.flush_latency.observe(elapsed);
            }
            match flushed {
                // The batch stays journaled; under `replicated` it is acknowledged like any
                // unflushed message, and the journal limit pushes back on further appends.
                Err(WriteError::NoSpace) => {
                    tracing::warn!(dir = %self.dir.display(), "threshold flush: no space left")
                }
                other => other?,
            }
        }
        Ok(ack)
    }

    fn flush_due(&self) -> bool {
        let active = self.segments.last().expect("active segment");
        self.journal.messages >= u64::from(self.config.messages_required_to_save)
            || self.journal.bytes >= self.config.size_of_messages_required_to_save
            || active.log_len + self.journal.bytes >= self.config.segment_size
    }

    /// Writes every journaled batch to the active segment(s), rotating as segments fill.
    /// Does not sync (except sealed segments at rotation).
    pub(super) fn flush_journal(&mut self) -> std::result::Result<(), WriteError> {
        while !self.journal.batches.is_empty() {
            if self.active().log_len >= self.config.segment_size {
                self.rotate()?;
                continue;
            }
            // Take batches until the one that crosses the segment size (it lands whole).
            let room = self.config.segment_size - self.active().log_len;
            let mut take = 0;
            let mut bytes = 0u64;
            for batch in &self.journal.batches {
                take += 1;
                bytes += batch.header.batch_length;
                if bytes >= room {
                    break;
                }
            }
            self.write_batches(take, bytes)?;
        }
        assert!(
            self.journal.bytes == 0 && self.journal.messages == 0,
            "an empty journal holds no bytes and no messages"
        );
        Ok(())
    }

    /// One vectored write of the first `take` journal batches, then their index entry.
    fn write_batches(&mut self, take: usize, bytes: u64) -> std::result::Result<(), WriteError> {
        let first = self.journal.batches[0].header;
        let last = self.journal.batches[take - 1].header;
        let segment = self.segments.last().expect("active segment");
        assert!(!segment.sealed, "a sealed segment is never written");
        assert_eq!(first.base_offset, segment.end_offset, "flushes are gapless");
        let position = segment.log_len;
        let _span = tracing::debug_span!("flush", log = %segment.log_path.display(), position, batches = take, bytes).entered();
        let slices: Vec<IoSlice<'_>> = self
            .journal
            .batches
            .iter()
            .take(take)
            .map(|b| IoSlice::new(&b.bytes))
            .collect();
        let entry = IndexEntry {
            offset: first.base_offset,
            timestamp: first.base_timestamp,
            position,
        };
        let index_position = (segment.index.len() * INDEX_ENTRY_LEN) as u64;
        let files = self.active_files()?;
        let written = files
            .log
            .write_all_at(&slices, position)
            .map_err(|e| (e, &segment.log_path))
            .and_then(|()| {
                files
                    .index
                    .write_all_at(&[IoSlice::new(&entry.encode())], index_position)
                    .map_err(|e| (e, &segment.index_path))
            });
        if let Err((error, path)) = written {
            if !is_no_space(&error) {
                return Err(write_error("write", path)(error));
            }
            // Cut whatever part of the write landed; the journal still holds it all. If the
            // cut fails the file's end is unknown: fence.
            files
                .log
                .set_len(position)
                .map_err(write_error("set_len", &segment.log_path))?;
            files
                .index
                .set_len(index_position)
                .map_err(write_error("set_len", &segment.index_path))?;
            tracing::warn!(path = %path.display(), "flush failed: no space left");
            return Err(WriteError::NoSpace);
        }
        drop(slices);
        let segment = self.active();
        segment.log_len += bytes;
        segment.end_offset = last.next_offset();
        segment.max_timestamp = segment.max_timestamp.max(last.base_timestamp);
        segment.index.push(entry);
        for _ in 0..take {
            self.journal.pop_front();
        }
        Ok(())
    }

    /// Seals the active segment (synced: a sealed segment is durable) and starts the next one.
    /// Running out of space while creating the next one is [`WriteError::NoSpace`]; the active
    /// segment then stays active.
    fn rotate(&mut self) -> std::result::Result<(), WriteError> {
        let sealing = self.segments.last().expect("active segment");
        let _span = tracing::info_span!("rotate", log = %sealing.log_path.display(), end_offset = sealing.end_offset).entered();
        assert!(
            sealing.log_len >= self.config.segment_size,
            "rotation seals a full segment"
        );
        // A sealed segment holds exactly its batches: nothing a failed write or a stray
        // write left past them.
        let files = self.active_files()?;
        let file_len = files
            .log
            .len()
            .map_err(write_error("stat", &sealing.log_path))?;
        if file_len != sealing.log_len {
            tracing::warn!(log = %sealing.log_path.display(), file_len, log_len = sealing.log_len, "cutting bytes past the last batch before sealing");
            files
                .log
                .set_len(sealing.log_len)
                .map_err(write_error("set_len", &sealing.log_path))?;
        }
        files
            .log
            .sync_data()
            .map_err(write_error("sync_data", &sealing.log_path))?;
        files
            .index
            .sync_data()
            .map_err(write_error("sync_data", &sealing.index_path))?;
        let start = sealing.end_offset;
        let disk = self.env.disk.clone();
        let log_path = self.dir.join(log_name(start));
        let index_path = self.dir.join(index_name(start));
        let log = disk
            .open(&log_path, OpenMode::CreateOrOpen)
            .map_err(space_or_write_error("create", &log_path))?;
        let index_file = disk
            .open(&index_path, OpenMode::CreateOrOpen)
            .map_err(space_or_write_error("create", &index_path))?;
        self.unsynced_dir_entries = true;
        self.index_synced_at = 0;
        // A file left by an interrupted earlier rotation holds nothing durable.
        log.set_len(0).map_err(write_error("set_len", &log_path))?;
        index_file
            .set_len(0)
            .map_err(write_error("set_len", &index_path))?;
        if self.config.preallocate_segments {
            // Best effort: a full disk or a file system without fallocate only costs the
            // reservation; the writes themselves report ENOSPC when it matters.
            match log.preallocate(self.config.segment_size) {
                Ok(reserved) => tracing::debug!(reserved, "preallocated segment"),
                Err(error) => {
                    tracing::warn!(log = %log_path.display(), %error, "preallocation failed; continuing without")
                }
            }
        }
        let sealed_start = self.active().start_offset;
        let key = self.handle_key(sealed_start);
        self.active().sealed = true;
        // Its index lives in memory from now on; its log stays warm in the cache.
        self.resources.active.take(self.handle_owner);
        self.resources.handles.put(key, files.log.clone());
        let sealed = files;
        let files = ActiveFiles::new(Arc::from(log), index_file).with_slots_of(&sealed);
        drop(sealed);
        self.resources.active.adopt(self.handle_owner, start, files);
        self.segments.push(Segment {
            start_offset: start,
            end_offset: start,
            log_path,
            index_path,
            log_len: 0,
            index: Vec::new(),
            max_timestamp: 0,
            sealed: false,
        });
        // Record the new active segment: this also promises the sealed one is whole.
        self.sync_and_record().map(|_| ())
    }

    /// Writes the next superblock record, `change` applied to the current one.
    fn record(
        &mut self,
        change: impl FnOnce(&mut Superblock),
    ) -> std::result::Result<(), WriteError> {
        assert!(
            self.recording.is_none(),
            "one record at a time: a record job is out (the owner waits for it first)"
        );
        let next = self.superblock.next(change);
        self.slot_writer(next.slot())
            .write(&self.dir, &next)
            .map_err(write_error("write superblock in", &self.dir))?;
        self.superblock = next;
        Ok(())
    }

    /// The first offset the log holds (retention moves it forward).
    pub(super) fn log_start(&self) -> u64 {
        self.superblock.log_start
    }

    /// Sealed segments retention may delete, oldest first: (start offset, bytes, newest
    /// timestamp). Never the active segment.
    /// Bytes of batches the log holds: every segment's written bytes and the journal's.
    pub(super) fn stored_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.log_len).sum::<u64>() + self.journal.bytes
    }

    /// Bytes of admitted batches the journal holds in memory, not yet written to a segment.
    pub(super) fn journal_bytes(&self) -> u64 {
        self.journal.bytes
    }

    pub(super) fn sealed_segments(&self) -> Vec<(u64, u64, u64)> {
        let sealed = &self.segments[..self.segments.len() - 1];
        sealed
            .iter()
            .map(|s| (s.start_offset, s.log_len, s.max_timestamp))
            .collect()
    }

    /// Deletes the `count` oldest segments, all sealed: the new log start is recorded first,
    /// then the files are unlinked and the directory synced. A crash in between leaves
    /// segments below the recorded start, which recovery removes.
    pub(super) fn delete_oldest_segments(&mut self, count: usize) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        if count >= self.segments.len() {
            return Err(PartitionError::ActiveSegment {
                requested: count,
                sealed: self.segments.len() - 1,
            });
        }
        assert!(self.segments[..count].iter().all(|s| s.sealed));
        let new_start = self.segments[count].start_offset;
        assert!(
            new_start <= self.superblock.durable.segment_start,
            "only segments below the durable one are deleted"
        );
        let _span =
            tracing::info_span!("delete_segments", dir = %self.dir.display(), count, new_start)
                .entered();
        self.record(|r| r.log_start = new_start)?;
        let disk = self.env.disk.clone();
        for segment in self.segments.drain(..count) {
            let (log_path, index_path) = (segment.log_path.clone(), segment.index_path.clone());
            self.resources.handles.forget(HandleKey {
                owner: self.handle_owner,
                segment_start: segment.start_offset,
            });
            drop(segment);
            for path in [&log_path, &index_path] {
                disk.remove_file(path)
                    .map_err(write_error("remove", path))?;
            }
        }
        disk.sync_dir(&self.dir)
            .map_err(write_error("sync_dir", &self.dir))?;
        assert_eq!(self.start_offset(), self.superblock.log_start);
        Ok(())
    }

    /// Flushes every journaled batch and makes the log durable: log and index synced, new
    /// segment names synced, then the superblock records the durable end. Under `persisted`,
    /// running out of space rolls back everything not made durable (see [`Self::roll_back`]).
    pub(super) fn persist(&mut self) -> std::result::Result<DurablePoint, WriteError> {
        let result = self.flush_journal().and_then(|()| self.sync_and_record());
        if let (Err(WriteError::NoSpace), Durability::Persisted) = (&result, self.config.durability)
        {
            self.roll_back()?;
        }
        result
    }

    /// Forgets every batch above the synced end ([`Self::synced_end`]: the durable end, or
    /// past it while a record naming synced bytes is out or to be planned): the journal, and
    /// the bytes flushed to the active segment but not synced. Under `persisted` those
    /// batches were never shown or acknowledged, so their offsets are free again and a retry
    /// cannot duplicate them.
    fn roll_back(&mut self) -> std::result::Result<(), WriteError> {
        // Synced bytes stay: a record out, or to be planned, names them and answers their
        // sends.
        let durable = self.synced_end();
        self.journal.clear();
        let active = self.segments.last().expect("active segment");
        let files = match active.log_len > durable.position {
            true => Some(self.active_files()?),
            false => None,
        };
        let active = self.segments.last_mut().expect("active segment");
        assert_eq!(
            active.start_offset, durable.segment_start,
            "under persisted the active segment is the durable one"
        );
        if let Some(files) = files {
            active.index.retain(|e| e.position < durable.position);
            files
                .log
                .set_len(durable.position)
                .map_err(write_error("set_len", &active.log_path))?;
            files
                .index
                .set_len((active.index.len() * INDEX_ENTRY_LEN) as u64)
                .map_err(write_error("set_len", &active.index_path))?;
            // Durably: the cut bytes may have been synced on the way (a segment sealed before
            // the next one could be created), and a power loss must not bring back batches
            // whose offsets are about to be given to others.
            files
                .log
                .sync_data()
                .map_err(write_error("sync_data", &active.log_path))?;
            files
                .index
                .sync_data()
                .map_err(write_error("sync_data", &active.index_path))?;
            active.log_len = durable.position;
            active.end_offset = durable.next_offset;
        }
        // The index was cut at the durable end (and synced) with the log, or never passed it.
        self.index_synced_at = self.index_synced_at.min(durable.position);
        tracing::warn!(dir = %self.dir.display(), next_offset = durable.next_offset, "rolled back the batches a failed persist did not make durable");
        self.next_offset = durable.next_offset;
        Ok(())
    }

    /// The last offset a consumer may see (see [`Self::visible_next_offset`]), `None` when
    /// there is none.
    fn last_offset(&self) -> Option<u64> {
        self.visible_next_offset()
            .checked_sub(1)
            .filter(|&o| o >= self.start_offset())
    }

    /// A stored offset is the last offset its consumer consumed. One below the log start
    /// (retention deleted what it names) reads as consumed up to the log start: the offset
    /// just before it, so the consumer resumes exactly at the first message kept and skips
    /// nothing.
    pub(super) fn get_offset(&self, consumer: ConsumerId) -> Result<Option<u64>> {
        let floor = self.log_start().saturating_sub(1);
        Ok(self
            .stored_offset(consumer)?
            .map(|offset| offset.max(floor)))
    }

    /// Where a consumer polling `Next` resumes: after its stored offset (as
    /// [`Self::get_offset`] reads it), or at the log start when it has none.
    pub(super) fn next_for(&self, consumer: ConsumerId) -> Result<u64> {
        Ok(match self.get_offset(consumer)? {
            Some(offset) => offset.saturating_add(1).max(self.log_start()),
            None => self.log_start(),
        })
    }

    pub(super) fn stored_offset(&self, consumer: ConsumerId) -> Result<Option<u64>> {
        match self.offsets.get(consumer) {
            None => Ok(None),
            Some(StoredOffset::Offset(offset)) => Ok(Some(*offset)),
            Some(StoredOffset::Damaged { path, why }) => Err(PartitionError::OffsetDamaged {
                consumer,
                path: path.clone(),
                why: why.clone(),
            }),
        }
    }

    /// An offset a consumer may store: one the log holds.
    fn check_storable(&self, offset: u64) -> Result<()> {
        let last = self.last_offset();
        if last.is_none_or(|last| offset > last) {
            return Err(PartitionError::OffsetBeyondEnd { offset, last });
        }
        Ok(())
    }

    pub(super) fn store_offset(&mut self, consumer: ConsumerId, offset: u64) -> Result<()> {
        self.check_storable(offset)?;
        let new_member = self.offsets.get(consumer).is_none();
        if new_member && self.offsets.len() >= super::offsets::MAX_CONSUMER_OFFSETS {
            return Err(PartitionError::TooManyOffsets {
                limit: super::offsets::MAX_CONSUMER_OFFSETS,
            });
        }
        self.store_offset_unchecked(consumer, offset)
    }

    /// Syncs the offset files written unsynced (a replica's checkpoint).
    pub(super) fn sync_offsets(&mut self) -> Result<()> {
        let dir = self.dir.join("offsets");
        self.offsets
            .sync(self.env.disk.as_ref())
            .map_err(|source| PartitionError::Io {
                op: "sync offsets in",
                path: dir,
                source,
            })
    }

    /// [`OpenLog::store_offset`] without its checks: a replica's group checked the offset
    /// against the sends it ordered before it and counted its consumers (its machine holds
    /// at most [`super::offsets::MAX_CONSUMER_OFFSETS`]), and a replica rebuilt or refilled
    /// holds its offsets before its batches.
    pub(super) fn store_offset_unchecked(
        &mut self,
        consumer: ConsumerId,
        offset: u64,
    ) -> Result<()> {
        let durability = self.config.consumer_offset_durability;
        let new_member = self.offsets.get(consumer).is_none();
        self.offsets
            .store(self.env.disk.as_ref(), consumer, offset, durability)
            .map_err(|source| self.offset_error("store offset in", source))?;
        // The file is durable first, then the set that names it: a crash in between leaves
        // one file more than recorded, which recovery accepts.
        if new_member && durability == Durability::Persisted {
            self.record(|r| r.offsets = r.offsets.with(consumer.set_member()))?;
        }
        Ok(())
    }

    /// Every consumer with a stored offset (damaged ones included).
    pub(super) fn consumers(&self) -> Vec<ConsumerId> {
        self.offsets.iter().map(|(c, _)| *c).collect()
    }

    pub(super) fn identity_nonce(&self) -> u64 {
        self.superblock.identity.nonce
    }

    pub(super) fn delete_offset(&mut self, consumer: ConsumerId) -> Result<bool> {
        let durability = self.config.consumer_offset_durability;
        // The set without it is recorded first, then the file goes: a crash in between
        // leaves one file more than recorded, which recovery accepts.
        if self.offsets.get(consumer).is_some() && durability == Durability::Persisted {
            self.record(|r| r.offsets = r.offsets.without(consumer.set_member()))?;
        }
        self.offsets
            .delete(self.env.disk.as_ref(), consumer, durability)
            .map_err(|source| PartitionError::Io {
                op: "delete offset in",
                path: self.dir.join("offsets"),
                source,
            })
    }
}

impl Drop for OpenLog {
    /// Closes this log's cached handles (its journal releases its budget as it drops).
    fn drop(&mut self) {
        self.resources.handles.forget_owner(self.handle_owner);
        self.resources.active.forget_owner(self.handle_owner);
    }
}

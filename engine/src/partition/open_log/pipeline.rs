//! A persist in two steps, so the next group's write and log sync overlap this group's
//! record: [`OpenLog::persist_log`] flushes and syncs (the log's bytes durable, nothing
//! recorded), [`OpenLog::plan_record`] hands out the superblock record naming them as a
//! [`RecordPlan`] any thread may write, and [`OpenLog::recorded`] takes its result back.
//! [`OpenLog::persist`] is both steps in one call.
//!
//! Architecture Invariant: one record at a time. While a plan is out ([`OpenLog::recording`])
//! nothing else writes a record: a flush that could seal a segment waits, and
//! [`OpenLog::record`] asserts it. A record names only bytes [`OpenLog::persist_log`] synced,
//! so the durable end names only synced bytes whichever thread writes it; a sync that failed fences the partition
//! before any later sync could be taken to cover its bytes.

use super::{write_error, OpenLog, SlotWriter, WriteError, INDEX_SYNC_LAG_BYTES};
use crate::partition::active_handles::Use;
use crate::partition::superblock::{DurablePoint, Superblock};
use std::io;
use std::path::PathBuf;

/// A superblock record to write, naming bytes the log synced: the second step of a persist,
/// run anywhere ([`RecordPlan::write`]), its result handed back to [`OpenLog::recorded`].
pub struct RecordPlan {
    writer: SlotWriter,
    dir: PathBuf,
    next: Superblock,
}

impl RecordPlan {
    /// Writes the record into its slot, synced and read back.
    pub fn write(&self) -> io::Result<()> {
        let _span = tracing::debug_span!("record", dir = %self.dir.display(), position = self.next.durable.position).entered();
        self.writer.write(&self.dir, &self.next)
    }

    /// The durable end the record names.
    pub fn durable(&self) -> DurablePoint {
        self.next.durable
    }
}

impl std::fmt::Debug for RecordPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordPlan")
            .field("dir", &self.dir)
            .field("sequence", &self.next.sequence)
            .field("durable", &self.next.durable)
            .finish()
    }
}

impl OpenLog {
    /// The end the log's syncs made durable: the superblock's durable end, or past it when
    /// a sync returned whose record is out or still to be planned (its sends are answered
    /// once it is recorded, so a roll-back keeps its bytes).
    pub(super) fn synced_end(&self) -> DurablePoint {
        self.synced
    }

    /// A record job is out ([`Self::plan_record`]).
    pub(in crate::partition) fn recording(&self) -> bool {
        self.recording.is_some()
    }

    /// Whether flushing the journal now could seal the active segment (a rotation records).
    pub(in crate::partition) fn flush_may_seal(&self) -> bool {
        let active = self.segments.last().expect("active segment");
        !self.journal.batches.is_empty()
            && active.log_len + self.journal.bytes >= self.config.segment_size
    }

    /// The first step of a persist: every journaled batch flushed, the active segment's
    /// files (and the directory when a file was created) synced. Returns the end now
    /// durable on the device, which no record names yet. Under `persisted`, running out of
    /// space rolls back everything above the synced end ([`Self::synced_end`]).
    pub(in crate::partition) fn persist_log(
        &mut self,
    ) -> std::result::Result<DurablePoint, WriteError> {
        assert!(
            !(self.recording() && self.flush_may_seal()),
            "a flush that may seal waits for the record out"
        );
        let result = self.flush_journal().and_then(|()| self.sync_log());
        if let (Err(WriteError::NoSpace), crate::config::Durability::Persisted) =
            (&result, self.config.durability)
        {
            self.roll_back()?;
        }
        result
    }

    /// The second step: the record naming `synced` (what [`Self::persist_log`] returned),
    /// for a job to write; `None` when the superblock names it already. One at a time.
    pub(in crate::partition) fn plan_record(&mut self, synced: DurablePoint) -> Option<RecordPlan> {
        assert!(self.recording.is_none(), "one record out at a time");
        let previous = self.superblock.durable;
        if synced == previous {
            return None;
        }
        assert!(
            synced.next_offset <= self.synced.next_offset,
            "a record names only synced bytes: {synced:?} past {:?}",
            self.synced
        );
        assert!(
            synced.next_offset >= previous.next_offset
                && synced.segment_start >= previous.segment_start,
            "the durable end never moves backwards: {previous:?} -> {synced:?}"
        );
        let next = self.superblock.next(|r| r.durable = synced);
        self.recording = Some(next);
        Some(RecordPlan {
            writer: self.slot_writer(next.slot()),
            dir: self.dir.clone(),
            next,
        })
    }

    /// The record out was written (`Ok`) or not: the superblock names its durable end now,
    /// or the write failed (the partition fences on it).
    pub(in crate::partition) fn recorded(
        &mut self,
        written: io::Result<()>,
    ) -> std::result::Result<DurablePoint, WriteError> {
        let next = self.recording.take().expect("a record out");
        written.map_err(write_error("write superblock in", &self.dir))?;
        assert_eq!(
            next.sequence,
            self.superblock.sequence + 1,
            "records in order"
        );
        self.superblock = next;
        Ok(next.durable)
    }

    /// Syncs the active segment's files (and the directory when a file was created), then
    /// writes the superblock naming the new durable end. No-op when nothing changed.
    pub(super) fn sync_and_record(&mut self) -> std::result::Result<DurablePoint, WriteError> {
        let dir_entries = self.unsynced_dir_entries;
        let durable = self.sync_log()?;
        if durable != self.superblock.durable || dir_entries {
            self.record(|r| r.durable = durable)?;
        }
        Ok(durable)
    }

    /// Syncs what the active segment holds past the pending durable end: its log (its index
    /// every [`INDEX_SYNC_LAG_BYTES`]) and the directory's new names. Returns the end durable
    /// on the device now.
    fn sync_log(&mut self) -> std::result::Result<DurablePoint, WriteError> {
        let active = self.segments.last().expect("active segment");
        let durable = DurablePoint {
            segment_start: active.start_offset,
            position: active.log_len,
            next_offset: active.end_offset,
        };
        let previous = self.synced;
        if durable == previous && !self.unsynced_dir_entries {
            // Nothing past the durable end: what a failed write left there is not owed.
            self.resources.active.settled(self.handle_owner);
            return Ok(durable);
        }
        assert!(
            durable.next_offset >= previous.next_offset
                && durable.segment_start >= previous.segment_start,
            "the durable end never moves backwards: {previous:?} -> {durable:?}"
        );
        let _span = tracing::debug_span!("persist", log = %active.log_path.display(), position = durable.position).entered();
        let files = self
            .checkout(Use::Sync)
            .map_err(write_error("open", &active.log_path))?;
        // The index only every INDEX_SYNC_LAG_BYTES of log: it is a hint recovery verifies
        // against the log (`plan_index` keeps the agreeing prefix), so its newest entries need
        // not be durable before the record names the log's bytes. After a power loss the
        // entries lost cover at most that much log, which a poll walks past the last entry,
        // as it walks a whole flush past the flush's one entry. One fdatasync per persist,
        // not two. The record comes strictly after the log's sync.
        let (log_len, index_due) = (
            active.log_len,
            active.log_len.saturating_sub(self.index_synced_at) >= INDEX_SYNC_LAG_BYTES,
        );
        if index_due {
            files
                .index
                .sync_data()
                .map_err(write_error("sync_data", &active.index_path))?;
        }
        files
            .log
            .sync_data()
            .map_err(write_error("sync_data", &active.log_path))?;
        if index_due {
            self.index_synced_at = log_len;
        }
        if self.unsynced_dir_entries {
            self.env
                .disk
                .sync_dir(&self.dir)
                .map_err(write_error("sync_dir", &self.dir))?;
            self.unsynced_dir_entries = false;
        }
        // Its bytes are on the device: closing its files owes no sync.
        self.resources.active.settled(self.handle_owner);
        self.synced = durable;
        Ok(durable)
    }
}

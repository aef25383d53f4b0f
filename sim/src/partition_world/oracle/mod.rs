//! The partition world's oracle: a model of every partition (what producers sent, what was
//! acknowledged at which offset under which policy, what was promised durable, which consumer
//! offsets were stored) and the checkers that compare what the engine serves and decides
//! against it: on replies and full reads (`reads`: invariants 1, 2, 3) and after recovery
//! (`recovery`: 4, a rewind's excuse for 1, and 5).
//!
//! One checker per invariant of `docs/design.md` ("Invariants"); each says what it allows and why. Every
//! allowance names its cause: an injected fault still present (in the disk's
//! [`cairn_faults::Damage`] records) in the file concerned, at the position concerned. A fault
//! that cannot have produced the effect excuses nothing: a lying sync changes no byte a read
//! sees (only the pages it leaves behind after a power loss do), and a fault overwritten,
//! synced over or cut away is no longer present.
//!
//! The allowances, by invariant, and their causes:
//! - **1 no acknowledged loss**: after a restart the log reaches every offset acknowledged
//!   durable. A rewind is allowed only after a power loss: down to the newest superblock
//!   record honestly synced, when a slot held pages a lying sync claimed; or down to the
//!   newest surviving record, when damage present in a slot destroyed both copies of a newer
//!   one. Never after a process crash. Under `persisted` nothing above the durable end is
//!   shown.
//! - **2 prefix**: gapless from 0, an offset never changes its message, losses are a suffix.
//!   One exception, after a power loss: an offset above the durable end may hold the message
//!   acknowledged there before the last recovery rewound it (whether or not anything was
//!   acknowledged there since), when a lying sync of the log
//!   holding that offset since that recovery began (its truncation's sync) was undone by
//!   the power loss and brought the truncated batch back (`reads::adopt_resurrected`). After a
//!   process crash flushed `replicated` data survives, unless damage seen by recovery
//!   lies in the file and bytes that held the first lost offset (located by the oracle's own
//!   walk at the crash). A runtime reply may stop short only at the byte budget, or where the
//!   oracle's walk of the file stops too, on a fault present that reads see.
//! - **3 exact bytes, no phantoms**: every message was sent, byte for byte, to this
//!   partition, never after being refused; replies verify, hold at most `count` messages,
//!   keep offsets consecutive and timestamps monotone. With `validate_checksum` off, a
//!   message whose bytes differ is allowed when a fault still present in a log file of the
//!   partition damaged it (that configuration serves "whatever decodes").
//! - **4 justified decisions**: a truncation cuts only where the oracle's walk finds no
//!   valid batch, and below honestly synced bytes only where damage is present; a removed
//!   segment held nothing promised unless a fault present explains it; every fence reason
//!   needs damage present in the file and bytes it names (or, for a missing file, a
//!   directory entry a lying `sync_dir` claimed and a power loss undid); a runtime I/O fence
//!   or a failed boot needs a fault that fired during it. Decisions are judged against the
//!   damage present when recovery looked (its repairs may heal it).
//! - **5 offsets**: each stored offset reads as a value it may hold (the last stored after a
//!   process crash, any stored since the last durable one after a power loss, and under
//!   `replicated` also none), lowered to the log's end; damage present in the file excuses a
//!   damaged or dropped one, and a name whose synced directory entry was lost excuses
//!   whatever the file now under it holds.

mod reads;
mod recovery;

pub use reads::{check_exact, check_full, check_reply, check_visible, expected_start, Reply};
pub use recovery::{
    check_actions, check_boot_failure, check_fence, check_offsets, check_runtime_fence,
    excuse_destroyed_record, newest_durable_record, superblock_at_power_loss, BeforeRecovery,
};

use super::walk::WalkedLog;
use crate::report::{violation, Checked, INV_EXACT, INV_PREFIX};
use cairn_engine::config::{Durability, PartitionSettings, TopicConfig};
use cairn_engine::partition::{ConsumerId, Partition};
use cairn_faults::{Damage, FaultKind, SimDisk};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One message as a poll returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadMessage {
    pub offset: u64,
    pub id: u128,
    /// The payload and user headers, shared with the polled batch (no copy).
    pub payload: bytes::Bytes,
    pub headers: bytes::Bytes,
    /// The (server) timestamp of its batch.
    pub timestamp: u64,
    /// The base offset of the stored batch it belongs to.
    pub batch_base: u64,
}

/// What a producer sent for one message id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub payload: Vec<u8>,
    pub headers: Vec<u8>,
}

/// A batch the model knows: where it starts, how many messages, its stored size and stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownBatch {
    pub count: u32,
    /// Stored size (unknown for a batch learned from reads).
    pub bytes: Option<u64>,
    pub timestamp: Option<u64>,
}

/// What one consumer's stored offset may read as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetModel {
    /// Values a read may return now (one, unless a store's outcome is unknown).
    pub now: BTreeSet<Option<u64>>,
    /// Values a read may return after a power loss.
    pub after_power_loss: BTreeSet<Option<u64>>,
}

impl Default for OffsetModel {
    fn default() -> Self {
        OffsetModel {
            now: BTreeSet::from([None]),
            after_power_loss: BTreeSet::from([None]),
        }
    }
}

/// The model of one partition.
pub struct Model {
    pub index: usize,
    pub dir: PathBuf,
    pub partition_id: u64,
    pub config: TopicConfig,
    pub settings: PartitionSettings,
    pub partition: Option<Partition>,
    /// Set once recovery fenced the partition (with a justification checked).
    pub fenced: Option<String>,
    /// Offset → message id, for every offset whose content is known.
    pub log: BTreeMap<u64, u128>,
    /// Message id → offset (the reverse of `log`).
    pub positions: BTreeMap<u128, u64>,
    /// Batches by base offset.
    pub batches: BTreeMap<u64, KnownBatch>,
    /// Ids whose append failed with an unknown outcome: they may or may not be in the log.
    pub unknown: BTreeSet<u128>,
    /// Ids whose append was refused: they are never in the log.
    pub rejected: BTreeSet<u128>,
    /// Provisional appends of a persisted topic, waiting for a persist: (base, ids).
    pub pending: Vec<(u64, Vec<u128>)>,
    /// One past the highest acknowledged offset.
    pub acked_end: u64,
    /// Every offset below this was acknowledged durable.
    pub durable_end: u64,
    /// The offset after the last message written to a segment file, as the engine last said.
    pub flushed_end: u64,
    /// After a process crash: flushed data must survive (the page cache does).
    pub flushed_floor: Option<u64>,
    /// The oracle's walk of the logs at that crash: where each flushed offset lies.
    pub crash_walk: Option<Vec<WalkedLog>>,
    /// Damage every recovery attempt since the last completed one found present, by file
    /// (a failed attempt may heal what it cut, or remove what it dropped, before it failed).
    pub damage_seen: BTreeMap<PathBuf, Vec<Damage>>,
    /// Likewise, names a lying `sync_dir` claimed and a power loss undid.
    pub lost_names_seen: BTreeSet<PathBuf>,
    /// After a power loss that lost a lying superblock sync: the durable end of the newest
    /// record honestly synced, below which nothing may be lost.
    pub rewind_floor: Option<u64>,
    /// A power loss happened since the last recovery.
    pub power_lost: bool,
    /// The boot id of the kernel the last process that opened the partition ran in (what
    /// a node's exit record would name; `None` before its first recovery).
    pub writer_boot_id: Option<u128>,
    /// A boot failed part-way since the offsets were last settled: a repair it made (an
    /// offset it lowered) may stand without any plan having reported it.
    pub boot_failed: bool,
    /// Acks the last rewind at a recovery forgot (offset → id), and the count of fault
    /// records before that recovery began: a lying sync of one of this partition's logs
    /// since then (the recovery's own truncation sync among them), undone by a later power
    /// loss, may bring such a batch back whole above the durable end.
    pub rewound: BTreeMap<u64, u128>,
    pub rewound_since: usize,
    /// Fault records counted when the last recovery's full check ended.
    pub checked_records: usize,
    pub offsets: BTreeMap<ConsumerId, OffsetModel>,
    /// The first offset the log holds: retention deleted everything below.
    pub log_start: u64,
    /// A deletion that failed (a crash inside it) may or may not have moved the log start
    /// here.
    pub log_start_pending: Option<u64>,
}

impl Model {
    pub fn new(
        index: usize,
        dir: PathBuf,
        partition_id: u64,
        config: TopicConfig,
        settings: PartitionSettings,
        partition: Partition,
    ) -> Model {
        Model {
            index,
            dir,
            partition_id,
            config,
            settings,
            partition: Some(partition),
            fenced: None,
            log: BTreeMap::new(),
            positions: BTreeMap::new(),
            batches: BTreeMap::new(),
            unknown: BTreeSet::new(),
            rejected: BTreeSet::new(),
            pending: Vec::new(),
            acked_end: 0,
            durable_end: 0,
            flushed_end: 0,
            flushed_floor: None,
            crash_walk: None,
            damage_seen: BTreeMap::new(),
            lost_names_seen: BTreeSet::new(),
            rewind_floor: None,
            power_lost: false,
            writer_boot_id: None,
            boot_failed: false,
            rewound: BTreeMap::new(),
            rewound_since: 0,
            checked_records: 0,
            offsets: BTreeMap::new(),
            log_start: 0,
            log_start_pending: None,
        }
    }

    /// Retention deleted every offset below `start`: nothing there is owed any more.
    pub fn advance_log_start(&mut self, start: u64) -> Checked<()> {
        let p = self.index;
        if start < self.log_start {
            return Err(violation(
                INV_PREFIX,
                format!(
                    "partition {p}: the log start moved back from {} to {start}",
                    self.log_start
                ),
            ));
        }
        self.log_start = start;
        self.log_start_pending = None;
        let gone: Vec<u64> = self.log.range(..start).map(|(o, _)| *o).collect();
        for offset in gone {
            if let Some(id) = self.log.remove(&offset) {
                self.positions.remove(&id);
            }
        }
        self.batches.retain(|base, _| *base >= start);
        self.acked_end = self.acked_end.max(start);
        self.durable_end = self.durable_end.max(start);
        self.flushed_end = self.flushed_end.max(start);
        Ok(())
    }

    pub fn persisted(&self) -> bool {
        self.config.durability == Durability::Persisted
    }

    /// The offset after the last message a consumer may see, as far as the model knows.
    pub fn visible_end(&self) -> u64 {
        if self.persisted() {
            self.durable_end
        } else {
            self.acked_end
        }
    }

    fn place(&mut self, offset: u64, id: u128) -> Checked<()> {
        let p = self.index;
        if let Some(previous) = self.log.get(&offset) {
            if *previous != id {
                return Err(violation(INV_PREFIX, format!("partition {p}: offset {offset} holds message {id:#x}, but it was acknowledged for {previous:#x}")));
            }
        }
        if let Some(at) = self.positions.get(&id) {
            if *at != offset {
                return Err(violation(
                    INV_PREFIX,
                    format!(
                        "partition {p}: message {id:#x} appears at offset {offset}, it was at {at}"
                    ),
                ));
            }
        }
        if self.rejected.contains(&id) {
            return Err(violation(INV_EXACT, format!("partition {p}: message {id:#x} at offset {offset} was refused to its producer (no space, journal full or invalid), yet it is in the log")));
        }
        self.log.insert(offset, id);
        self.positions.insert(id, offset);
        self.unknown.remove(&id);
        Ok(())
    }

    /// Records an acknowledged append of the batch `ids` (stored size `bytes`).
    pub fn acked(
        &mut self,
        base: u64,
        ids: &[u128],
        bytes: u64,
        timestamp: u64,
        durable: bool,
    ) -> Checked<()> {
        for (i, id) in ids.iter().enumerate() {
            self.place(base + i as u64, *id)?;
        }
        self.batches.insert(
            base,
            KnownBatch {
                count: ids.len() as u32,
                bytes: Some(bytes),
                timestamp: Some(timestamp),
            },
        );
        let end = base + ids.len() as u64;
        self.acked_end = self.acked_end.max(end);
        if durable {
            self.durable_end = self.durable_end.max(end);
        }
        Ok(())
    }

    /// Everything acknowledged up to `next_offset` is durable (a persist or close succeeded).
    pub fn durable_through(&mut self, next_offset: u64) {
        self.durable_end = self.durable_end.max(self.acked_end.min(next_offset));
    }

    /// Settles provisional appends after a persist: those ending at or below `durable` are
    /// acknowledged durable; the rest, if `refused`, were rolled back, else are unknown.
    pub fn settle_pending(&mut self, durable: u64, refused: bool) -> Checked<()> {
        for (base, ids) in std::mem::take(&mut self.pending) {
            let end = base + ids.len() as u64;
            if end <= durable {
                for (i, id) in ids.iter().enumerate() {
                    self.place(base + i as u64, *id)?;
                }
                self.acked_end = self.acked_end.max(end);
                self.durable_end = self.durable_end.max(end);
            } else {
                // Not known to hold these any more: what lands there is learned from reads.
                self.batches.remove(&base);
                if refused {
                    self.rejected.extend(ids);
                } else {
                    self.unknown.extend(ids);
                }
            }
        }
        Ok(())
    }

    fn stored_bytes(&self, offset: u64) -> Option<u64> {
        let (base, batch) = self.batches.range(..=offset).next_back()?;
        (offset < base + u64::from(batch.count))
            .then_some(batch.bytes)
            .flatten()
    }

    /// Provisional appends a durable end a read revealed now covers are acknowledged durable;
    /// the others stay pending: still journaled, a later persist settles them.
    pub fn settle_covered(&mut self, durable: u64) -> Checked<()> {
        let (covered, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(base, ids)| base + ids.len() as u64 <= durable);
        self.pending = covered;
        self.settle_pending(durable, false)?;
        self.pending = rest;
        Ok(())
    }

    /// Learns the batches and stamps of messages read (an unknown outcome that landed).
    pub fn learn_batches(&mut self, messages: &[ReadMessage]) {
        for m in messages {
            let batch = self.batches.entry(m.batch_base).or_insert(KnownBatch {
                count: 0,
                bytes: None,
                timestamp: None,
            });
            batch.count = batch.count.max((m.offset - m.batch_base + 1) as u32);
            batch.timestamp = Some(m.timestamp);
        }
    }

    fn offset_model(&mut self, consumer: ConsumerId) -> &mut OffsetModel {
        self.offsets.entry(consumer).or_default()
    }

    pub fn offset_stored(&mut self, consumer: ConsumerId, value: Option<u64>, ok: bool) {
        let persisted = self.config.consumer_offset_durability == Durability::Persisted;
        let model = self.offset_model(consumer);
        if ok {
            model.now = BTreeSet::from([value]);
        } else {
            model.now.insert(value);
        }
        if persisted && ok {
            model.after_power_loss = BTreeSet::from([value]);
        } else {
            model.after_power_loss.insert(value);
            if !persisted {
                // An unsynced store can tear at a power loss; recovery drops the file.
                model.after_power_loss.insert(None);
            }
        }
    }
}

/// The live damage of `path` that could explain an anomaly in `range` (`reads`: only damage
/// a read sees now). Lying syncs, lost unsynced pages and torn sector-atomic writes never
/// appear here: they damage nothing that was promised.
pub fn damage_in(disk: &SimDisk, path: &Path, range: Range<u64>, reads: bool) -> Option<Damage> {
    disk.live_damage(path).into_iter().find(|d| {
        d.kind != FaultKind::SyncError
            && (!reads || d.in_cache)
            && d.range.start < range.end
            && range.start < d.range.end.max(d.range.start + 1)
    })
}

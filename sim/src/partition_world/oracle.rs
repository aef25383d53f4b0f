//! The oracle: a model of every partition (what producers sent, what was acknowledged at
//! which offset under which policy, what was promised durable, which consumer offsets were
//! stored) and the checkers that compare what the engine serves and decides against it.
//!
//! One checker per invariant of DESIGN.md §3; each says what it allows and why. Every
//! allowance names its cause: an injected fault still present (in the disk's
//! [`cairn_faults::Damage`] records) in the file concerned, at the position concerned. A fault
//! that cannot have produced the effect excuses nothing: a lying sync changes no byte a read
//! sees (only the pages it leaves behind after a power loss do), and a fault overwritten,
//! synced over or cut away is no longer present.

use super::walk::{self, View, WalkedLog};
use crate::report::{
    violation, Checked, INV_EXACT, INV_JUSTIFIED, INV_NO_LOSS, INV_OFFSETS, INV_PREFIX,
};
use cairn_engine::config::{Durability, PartitionSettings, TopicConfig};
use cairn_engine::partition::recovery::{Action, RecoveryPlan};
use cairn_engine::partition::superblock::{Superblock, MIRROR_OFFSET, SLOT_NAMES, SUPERBLOCK_LEN};
use cairn_engine::partition::{ConsumerId, FenceReason, Partition, PollFrom};
use cairn_faults::{Damage, FaultKind, FaultRecord, SimDisk};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One message as a poll returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadMessage {
    pub offset: u64,
    pub id: u128,
    pub payload: Vec<u8>,
    pub headers: Vec<u8>,
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

// ---------------------------------------------------------------------------------------
// Invariant 3: no phantoms, exact bytes.
// ---------------------------------------------------------------------------------------

/// **Invariant 3** on one reply: every message was sent by a producer, byte for byte, to this
/// partition; offsets are consecutive and timestamps never go backwards; the reply holds at
/// most `count` messages. Allows: with `validate_checksum` off, a message whose bytes differ
/// when a fault still present in a log file of the partition damaged it (the configuration
/// serves "whatever decodes").
pub fn check_exact(
    model: &Model,
    messages: &[ReadMessage],
    sent: &BTreeMap<u128, Sent>,
    count: u32,
    disk: &SimDisk,
) -> Checked<()> {
    let p = model.index;
    let max = count.min(model.settings.max_poll_messages) as usize;
    if messages.len() > max {
        return Err(violation(
            INV_EXACT,
            format!(
                "partition {p}: a reply holds {} messages, more than the {max} asked",
                messages.len()
            ),
        ));
    }
    for pair in messages.windows(2) {
        if pair[1].offset != pair[0].offset + 1 {
            return Err(violation(
                INV_PREFIX,
                format!(
                    "partition {p}: a reply jumps from offset {} to {}",
                    pair[0].offset, pair[1].offset
                ),
            ));
        }
        if pair[1].timestamp < pair[0].timestamp {
            return Err(violation(
                INV_EXACT,
                format!(
                    "partition {p}: timestamps go backwards at offset {}",
                    pair[1].offset
                ),
            ));
        }
    }
    let damaged_allowed = !model.settings.validate_checksum
        && walk::walk_partition(disk, &model.dir, model.partition_id, View::Cache)
            .iter()
            .any(|log| damage_in(disk, &log.path, 0..u64::MAX, true).is_some());
    for m in messages {
        let original = sent.get(&m.id);
        let exact = original.is_some_and(|o| o.payload == m.payload && o.headers == m.headers);
        if !exact && damaged_allowed {
            continue;
        }
        let Some(_) = original else {
            return Err(violation(
                INV_EXACT,
                format!(
                    "partition {p}: offset {} holds message {:#x} that no producer sent",
                    m.offset, m.id
                ),
            ));
        };
        if !exact {
            return Err(violation(
                INV_EXACT,
                format!(
                    "partition {p}: message {:#x} at offset {} differs from what was sent",
                    m.id, m.offset
                ),
            ));
        }
        match model.log.get(&m.offset) {
            Some(known) if *known != m.id => {
                return Err(violation(
                    INV_PREFIX,
                    format!(
                        "partition {p}: offset {} holds {:#x}, acknowledged as {known:#x}",
                        m.offset, m.id
                    ),
                ))
            }
            Some(_) => {}
            None if model.unknown.contains(&m.id) || model.positions.contains_key(&m.id) => {}
            None if model.pending.iter().any(|(_, ids)| ids.contains(&m.id)) => {}
            None => {
                return Err(violation(
                    INV_EXACT,
                    format!(
                    "partition {p}: offset {} holds {:#x}, which was not sent here or was refused",
                    m.offset, m.id
                ),
                ))
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Invariant 1 and 2 at runtime: what a poll must return.
// ---------------------------------------------------------------------------------------

/// Where a poll from `from` must start, if the model can tell (`None`: no requirement).
pub fn expected_start(model: &Model, from: PollFrom, count: u32) -> Option<BTreeSet<u64>> {
    let visible = model.visible_end();
    let start = model.log_start;
    match from {
        PollFrom::Offset(o) => Some(BTreeSet::from([o.max(start)])),
        PollFrom::First => Some(BTreeSet::from([start])),
        PollFrom::Last => Some(BTreeSet::from([visible
            .saturating_sub(u64::from(count))
            .max(start)])),
        PollFrom::Next(consumer) => Some(
            model
                .offsets
                .get(&consumer)
                .cloned()
                .unwrap_or_default()
                .now
                .iter()
                .map(|v| v.map_or(0, |v| v + 1).max(start))
                .collect(),
        ),
        PollFrom::Timestamp(t) => {
            // Only when every visible batch is known, from the log start on, with its stamp.
            let mut next = start;
            for (base, batch) in model.batches.range(start..visible) {
                let ts = batch.timestamp.filter(|_| *base == next)?;
                if ts >= t {
                    return Some(BTreeSet::from([*base]));
                }
                next = base + u64::from(batch.count);
            }
            (next >= visible).then(|| BTreeSet::from([visible]))
        }
    }
}

/// **Invariants 1 and 2** on one runtime reply (no crash since the last check): it starts
/// where `from` says, and holds every visible message from there up to `count`, except:
/// - the byte budget (`max_poll_bytes`: a reply with something in it stops before a stored
///   batch that would pass it);
/// - a fault still present that reads see, in the log file holding the first message not
///   returned, in the bytes of the batch where an independent walk of that file stops.
///
/// Under `persisted` nothing above the durable end may be shown (E2): a message not
/// acknowledged durable that a reply holds must lie below the engine's durable point when
/// the poll began (`durable_before`), and is from then on owed as acknowledged.
/// What one poll asked and got.
pub struct Reply<'a> {
    pub from: PollFrom,
    pub count: u32,
    pub messages: &'a [ReadMessage],
    /// Bytes of the reply's batches.
    pub bytes: u64,
    /// The last visible offset the reply reports.
    pub current_offset: Option<u64>,
    /// The engine's durable next offset when the poll began.
    pub durable_before: u64,
}

pub fn check_reply(model: &mut Model, reply: &Reply<'_>, disk: &SimDisk) -> Checked<()> {
    let Reply {
        from,
        count,
        messages,
        bytes: reply_bytes,
        current_offset,
        durable_before,
    } = *reply;
    let p = model.index;
    // The visible end the engine reports: never behind what was acknowledged, and under
    // `persisted` never beyond the durable end.
    // Nothing visible: the log holds nothing from its start on.
    let engine_visible = current_offset.map_or(model.log_start, |c| c + 1);
    if engine_visible < model.visible_end() {
        return Err(violation(INV_NO_LOSS, format!("partition {p}: a poll reports the last offset {current_offset:?}, below the acknowledged {}", model.visible_end())));
    }
    let shown = messages
        .last()
        .map_or(0, |m| m.offset + 1)
        .max(engine_visible);
    if model.persisted() && shown > model.durable_end {
        let durable = durable_before;
        if shown > durable {
            return Err(violation(INV_NO_LOSS, format!("partition {p}: a persisted topic showed offsets up to {shown} before they were durable (durable end {durable})")));
        }
        model.settle_covered(durable)?;
        model.durable_through(durable);
    }
    let from = match from {
        // The model cannot tell whether a provisional append became durable on the way.
        PollFrom::Last => PollFrom::Offset(engine_visible.saturating_sub(u64::from(count))),
        other => other,
    };
    let Some(starts) = expected_start(model, from, count) else {
        return Ok(());
    };
    let visible = model.visible_end();
    let Some(first) = messages.first() else {
        // Nothing returned is complete when the poll may start at the visible end (a `Next`
        // after a failed store has two values to start from, one of them may be there).
        if starts.iter().any(|&start| start >= visible) {
            return Ok(());
        }
        let start = starts.iter().copied().min().unwrap_or(0);
        return excuse_short_read(model, from, start, 0, disk);
    };
    if !starts.contains(&first.offset) {
        return Err(violation(
            INV_PREFIX,
            format!(
                "partition {p}: poll {from:?} started at offset {}, expected one of {starts:?}",
                first.offset
            ),
        ));
    }
    let max = u64::from(count.min(model.settings.max_poll_messages));
    let wanted_end = first.offset.saturating_add(max).min(visible);
    let got_end = first.offset + messages.len() as u64;
    if got_end >= wanted_end {
        return Ok(());
    }
    let budget_stop = model
        .stored_bytes(got_end)
        .is_none_or(|next| reply_bytes + next > model.settings.max_poll_bytes);
    if budget_stop {
        return Ok(());
    }
    excuse_short_read(model, from, got_end, reply_bytes, disk)
}

/// A reply stopped before `missing`: allowed only where the oracle's own walk of the file
/// holding it stops too, on a fault still present that reads see.
fn excuse_short_read(
    model: &Model,
    from: PollFrom,
    missing: u64,
    _reply_bytes: u64,
    disk: &SimDisk,
) -> Checked<()> {
    let p = model.index;
    let fail = |why: String| {
        Err(violation(INV_NO_LOSS, format!("partition {p}: poll {from:?} stopped before offset {missing} (visible end {}, flushed end {}): {why}", model.visible_end(), model.flushed_end)))
    };
    if missing >= model.flushed_end {
        return fail("it is in the journal, which a read cannot fail".into());
    }
    let logs = walk::walk_partition(disk, &model.dir, model.partition_id, View::Cache);
    let Some(log) = logs.iter().rfind(|l| l.start_offset <= missing) else {
        return fail("no log file holds it".into());
    };
    if let Some(batch) = log.batch_holding(missing) {
        // Valid on disk: only an unreadable sector elsewhere in the engine's read window or
        // an index entry could stop the engine; neither is excused.
        return fail(format!(
            "{} holds it intact at position {}",
            log.path.display(),
            batch.position
        ));
    }
    // The walk stops at a batch that does not verify, or the file ends (bytes missing).
    let window = log.stop.clone().unwrap_or(log.file_len..u64::MAX);
    match damage_in(disk, &log.path, window.clone(), true) {
        Some(_) => Ok(()),
        None => fail(format!(
            "the walk of {} stops at {window:?} with no fault present there",
            log.path.display()
        )),
    }
}

// ---------------------------------------------------------------------------------------
// Invariants 1, 2, 3 on a full read.
// ---------------------------------------------------------------------------------------

/// **Invariants 1, 2 and 3** on a full read of the partition from offset 0.
///
/// Always: gapless from 0, no duplicates, every message exact (invariant 3), and every
/// offset holding the message it was acknowledged for (2).
///
/// At runtime (no restart since the last check): the read reaches every visible message,
/// except where a fault still present that reads see stops it (as for a poll).
///
/// After a restart (`after_restart`):
/// - invariant 1: the log reaches every offset acknowledged durable; the only allowance is a
///   power loss that undid a lying sync of the superblock (its slot held lied pages): then
///   down to the durable end of the newest record that was honestly synced, and never after
///   a process crash;
/// - invariant 2: after a process crash the log reaches every offset that was flushed (the
///   page cache survives), unless a fault present when recovery looked lies in the file that
///   held the first lost offset, at or after its position (the oracle's own walk at the
///   crash says where); what is lost is a suffix, and the model forgets it.
pub fn check_full(
    model: &mut Model,
    all: &[ReadMessage],
    log_start: u64,
    sent: &BTreeMap<u128, Sent>,
    after_restart: bool,
    disk: &SimDisk,
) -> Checked<()> {
    let p = model.index;
    if log_start != model.log_start {
        if model.log_start_pending != Some(log_start) {
            return Err(violation(INV_PREFIX, format!("partition {p}: the log starts at {log_start}, but retention deleted only below {} (a deletion in flight could have reached {:?})", model.log_start, model.log_start_pending)));
        }
        model.advance_log_start(log_start)?;
    }
    model.log_start_pending = None;
    for (i, m) in all.iter().enumerate() {
        if m.offset != log_start + i as u64 {
            return Err(violation(
                INV_PREFIX,
                format!(
                    "partition {p}: the log is not gapless from its start {log_start}: position {i} holds offset {}",
                    m.offset
                ),
            ));
        }
    }
    check_exact(model, all, sent, u32::MAX, disk)?;
    let mut ids = BTreeSet::new();
    for m in all {
        if !ids.insert(m.id) {
            return Err(violation(
                INV_PREFIX,
                format!("partition {p}: message {:#x} appears twice", m.id),
            ));
        }
    }
    let end = log_start + all.len() as u64;
    if !after_restart {
        if end < model.visible_end() {
            excuse_short_read(model, PollFrom::First, end, 0, disk)?;
        }
        model.learn_batches(all);
        return Ok(());
    }
    let required = match model.rewind_floor {
        Some(floor) => model.durable_end.min(floor),
        None => model.durable_end,
    };
    if end < required {
        let lost: Vec<u64> = model
            .log
            .range(end..required)
            .map(|(o, _)| *o)
            .take(5)
            .collect();
        return Err(violation(INV_NO_LOSS, format!("partition {p}: after recovery the log ends at {end}, but offsets up to {required} were acknowledged durable (acknowledged durable end {}, rewind allowed to {:?}; first lost: {lost:?})", model.durable_end, model.rewind_floor)));
    }
    if let Some(flushed) = model.flushed_floor.filter(|&f| end < f) {
        if flushed_loss_excuse(model, end).is_none() {
            return Err(violation(INV_PREFIX, format!("partition {p}: after a process crash the log ends at {end}, but offsets up to {flushed} had been flushed (the page cache survives a process crash) and no fault present in the bytes that held them explains the loss")));
        }
    }
    // What is gone is a suffix: forget it, learn what the unknown outcomes became.
    let lost: Vec<u64> = model.log.range(end..).map(|(o, _)| *o).collect();
    for offset in lost {
        if let Some(id) = model.log.remove(&offset) {
            model.positions.remove(&id);
        }
    }
    model
        .batches
        .retain(|base, b| base + u64::from(b.count) <= end);
    for m in all {
        model.place(m.offset, m.id)?;
    }
    model.learn_batches(all);
    for (base, ids) in std::mem::take(&mut model.pending) {
        if !model.log.contains_key(&base) {
            model.batches.remove(&base);
        }
        model.unknown.extend(ids);
    }
    model.durable_end = end;
    model.acked_end = end;
    model.flushed_end = end;
    model.flushed_floor = None;
    model.crash_walk = None;
    model.rewind_floor = None;
    Ok(())
}

/// Damage seen since the crash in the log that held offset `lost` (at or after the batch
/// holding it), or in a later log.
fn flushed_loss_excuse(model: &Model, lost: u64) -> Option<&Damage> {
    let walk = model.crash_walk.as_ref()?;
    let holder = walk.iter().rposition(|w| w.start_offset <= lost)?;
    let from = walk[holder]
        .batch_holding(lost)
        .map_or(walk[holder].valid_end(), |b| b.position);
    walk[holder..].iter().enumerate().find_map(|(i, log)| {
        let start = if i == 0 { from } else { 0 };
        model
            .damage_seen
            .get(&log.path)?
            .iter()
            .find(|d| d.range.end.max(d.range.start + 1) > start)
    })
}

// ---------------------------------------------------------------------------------------
// Invariant 4: justified decisions.
// ---------------------------------------------------------------------------------------

/// What the oracle knew of a partition's files just before recovery ran: recovery's
/// decisions are judged against the faults present when it looked (its repairs may heal them).
pub struct BeforeRecovery {
    /// Bytes of each log an honest sync promised durable.
    pub promised: BTreeMap<PathBuf, u64>,
    /// The oracle's walk of every log, as recovery reads it (from the device).
    pub walks: Vec<WalkedLog>,
    /// The damage present in every file of the partition.
    pub damage: BTreeMap<PathBuf, Vec<Damage>>,
    /// Names a lying `sync_dir` claimed and a power loss undid.
    pub lost_names: Vec<PathBuf>,
}

impl BeforeRecovery {
    pub fn take(disk: &SimDisk, model: &Model) -> BeforeRecovery {
        let walks = walk::walk_partition(disk, &model.dir, model.partition_id, View::Device);
        let promised = walks
            .iter()
            .map(|w| (w.path.clone(), disk.promised_len(&w.path)))
            .collect();
        let damage = disk
            .paths_under(&model.dir)
            .into_iter()
            .map(|path| {
                let damage = disk.live_damage(&path);
                (path, damage)
            })
            .filter(|(_, damage)| !damage.is_empty())
            .collect();
        BeforeRecovery {
            promised,
            walks,
            damage,
            lost_names: disk.lost_synced_names(&model.dir),
        }
    }

    fn walk(&self, path: &Path) -> Option<&WalkedLog> {
        self.walks.iter().find(|w| w.path == path)
    }

    fn damage_of(&self, path: &Path) -> &[Damage] {
        self.damage.get(path).map_or(&[], Vec::as_slice)
    }

    /// Damage present in `path` whose bytes meet `range` (a sync error excluded: the bytes
    /// it kept from the device were never promised, so it explains losing them, never a
    /// refusal).
    fn explains(&self, path: &Path, range: Range<u64>) -> Option<&Damage> {
        self.damage_of(path).iter().find(|d| {
            d.kind != FaultKind::SyncError
                && d.range.start < range.end
                && range.start < d.range.end.max(d.range.start + 1)
        })
    }
}

/// **Invariant 4** on recovery's actions: a truncation cuts only at a batch the oracle's own
/// walk finds invalid, and below what an honest sync promised only where a fault still
/// present in the cut bytes explains it; a removed segment held nothing promised unless a
/// fault still present in the partition's files explains it.
pub fn check_actions(model: &Model, plan: &RecoveryPlan, before: &BeforeRecovery) -> Checked<()> {
    let p = model.index;
    for action in &plan.actions {
        match action {
            Action::Truncate { path, from, .. } => {
                if let Some(batch) = before
                    .walk(path)
                    .and_then(|w| w.batches.iter().find(|b| b.position == *from))
                {
                    return Err(violation(INV_JUSTIFIED, format!("partition {p}: recovery truncated {} at {from}, where the oracle finds a valid batch (offsets {}..{})", path.display(), batch.base_offset, batch.next_offset)));
                }
                let promised = before.promised.get(path).copied().unwrap_or(0);
                if *from < promised && before.explains(path, *from..promised).is_none() {
                    return Err(violation(INV_JUSTIFIED, format!("partition {p}: recovery truncated {} to {from}, below the {promised} bytes an honest sync made durable, with no fault present there", path.display())));
                }
            }
            Action::FinishDeletion {
                log_path,
                log_start,
                ..
            } => {
                let deleted_below = model.log_start.max(model.log_start_pending.unwrap_or(0));
                if *log_start > deleted_below {
                    return Err(violation(INV_JUSTIFIED, format!("partition {p}: recovery removed {} as below the log start {log_start}, but retention only deleted below {deleted_below}", log_path.display())));
                }
            }
            Action::RemoveSegment { log_path, .. } => {
                let promised = before.promised.get(log_path).copied().unwrap_or(0);
                let damaged = before.damage.values().any(|d| !d.is_empty());
                if promised > 0 && !damaged && before.lost_names.is_empty() {
                    return Err(violation(INV_JUSTIFIED, format!("partition {p}: recovery removed {} holding {promised} durable bytes, with no fault present in the partition", log_path.display())));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The bytes of a batch at `position` of `path` as the walk saw them: at least its header.
fn batch_window(before: &BeforeRecovery, path: &Path, position: u64) -> Range<u64> {
    match before.walk(path).and_then(|w| w.stop.clone()) {
        Some(stop) if stop.start == position => stop,
        _ => position..position + cairn_engine::format::BATCH_HEADER_LEN as u64,
    }
}

/// **Invariant 4** on a fence at recovery: each reason names a file and a position, and is
/// justified only by a fault still present there that could have caused it (damaged bytes in
/// the bytes named; for a missing file, a directory entry a lying `sync_dir` claimed and a
/// power loss undid).
pub fn check_fence(
    model: &Model,
    reason: &FenceReason,
    before: &BeforeRecovery,
    disk: &SimDisk,
) -> Checked<()> {
    let p = model.index;
    let dir = &model.dir;
    let slots: Vec<PathBuf> = SLOT_NAMES.iter().map(|n| dir.join(n)).collect();
    let anywhere = 0..u64::MAX;
    let lost_names = &before.lost_names;
    let in_file = |path: &Path, range: Range<u64>| before.explains(path, range).is_some();
    // Retention deleted segments and the record of the new log start is gone (a slot
    // destroyed, lost, or undone by a power loss after a lying sync): recovery trusts an older
    // record that still names the deleted segments.
    let deletion_record_lost = (model.log_start > 0 || model.log_start_pending.is_some())
        && (model.rewind_floor.is_some()
            || slots
                .iter()
                .any(|s| in_file(s, anywhere.clone()) || lost_names.contains(s)));
    let justified = deletion_record_lost
        && matches!(
            reason,
            FenceReason::MissingLog { .. }
                | FenceReason::DurableSegmentMissing { .. }
                | FenceReason::LogStartMissing { .. }
                | FenceReason::ChainGap { .. }
        )
        || match reason {
            FenceReason::NoSuperblock { .. } => slots
                .iter()
                .any(|s| in_file(s, anywhere.clone()) || lost_names.contains(s)),
            FenceReason::SuperblockIdentity { path, .. }
            | FenceReason::SuperblockMisplaced { path, .. } => in_file(path, anywhere.clone()),
            FenceReason::DurableEndUncertain { slot, .. } => {
                in_file(slot, anywhere.clone()) || lost_names.contains(slot)
            }
            FenceReason::MissingLog { log, .. }
            | FenceReason::DurableSegmentMissing { log, .. } => lost_names.contains(log),
            // The oldest segment's name was lost; or the newer record that moved the log
            // start was destroyed or undone (a power loss after a lying sync of its slot).
            FenceReason::LogStartMissing {
                dir,
                uncertain_slot,
                ..
            } => {
                lost_names
                    .iter()
                    .any(|n| n.parent() == Some(dir) && n.extension().is_some_and(|e| e == "log"))
                    || model.rewind_floor.is_some()
                    || uncertain_slot
                        .as_ref()
                        .is_some_and(|s| in_file(s, anywhere.clone()) || lost_names.contains(s))
            }
            // A stored offset's name (or its directory's) was lost; or the newer record that
            // knew of a deletion was destroyed, or undone (a power loss after a lying sync
            // of its slot, which the deletion's unlink outlived).
            FenceReason::StoredOffsetsMissing {
                dir,
                uncertain_slot,
                ..
            } => {
                lost_names.iter().any(|n| n.starts_with(dir))
                    || model.rewind_floor.is_some()
                    || uncertain_slot
                        .as_ref()
                        .is_some_and(|s| in_file(s, anywhere.clone()) || lost_names.contains(s))
            }
            FenceReason::DirectoryMissing { .. }
            | FenceReason::IdentityDuplicated { .. }
            | FenceReason::DirectoryInTheWay { .. } => false,
            // A segment's name was lost, or the segment before the gap lost its tail.
            FenceReason::ChainGap { log, .. } => {
                let previous = before
                    .walks
                    .iter()
                    .take_while(|w| w.path != *log)
                    .last()
                    .map(|w| w.path.clone());
                !lost_names.is_empty()
                    || previous.is_some_and(|previous| in_file(&previous, anywhere.clone()))
            }
            FenceReason::SegmentNameMismatch { log, .. }
            | FenceReason::EmptySealedSegment { log } => in_file(log, anywhere.clone()),
            FenceReason::SealedSegmentCorrupt { log, position, .. }
            | FenceReason::CorruptBelowDurable { log, position, .. } => {
                in_file(log, batch_window(before, log, *position))
            }
            FenceReason::LogShorterThanDurable {
                log,
                valid_end,
                durable_position,
            } => in_file(log, *valid_end..*durable_position),
            FenceReason::DurableOffsetMismatch { log, durable, .. } => {
                in_file(log, 0..durable.position + 1)
            }
            FenceReason::ReadFailed { file, sector, .. } => before
                .damage_of(file)
                .iter()
                .any(|d| d.kind == FaultKind::ReadError && d.range.contains(sector)),
            FenceReason::IoFailed { .. } => false,
        };
    if justified {
        return Ok(());
    }
    let _ = disk;
    Err(violation(
        INV_JUSTIFIED,
        format!(
            "partition {p}: recovery fenced ({}) with no fault present that explains it: {reason}",
            reason.name()
        ),
    ))
}

/// **Invariant 4** on a fence at runtime: an I/O error is justified by a fault that fired
/// during the operation; damage a read found in promised bytes by a fault still present that
/// reads see, in that file, in the bytes of that batch.
pub fn check_runtime_fence(
    model: &Model,
    reason: &FenceReason,
    fired: &[FaultRecord],
    disk: &SimDisk,
) -> Checked<()> {
    let p = model.index;
    let io_fault = |r: &FaultRecord| io_failure_cause(r.kind);
    let justified = match reason {
        FenceReason::IoFailed { .. } => fired.iter().any(io_fault) || disk.is_crashed(),
        FenceReason::SealedSegmentCorrupt { log, position, .. }
        | FenceReason::CorruptBelowDurable { log, position, .. } => {
            let logs = walk::walk_partition(disk, &model.dir, model.partition_id, View::Cache);
            let window = logs
                .iter()
                .find(|w| w.path == *log)
                .and_then(|w| w.stop.clone())
                .filter(|stop| stop.start <= *position)
                .map_or(*position..position + 256, |stop| {
                    stop.start..stop.end.max(position + 256)
                });
            damage_in(disk, log, window, true).is_some()
        }
        FenceReason::ReadFailed { file, sector, .. } => disk
            .live_damage(file)
            .iter()
            .any(|d| d.kind == FaultKind::ReadError && d.range.contains(sector)),
        _ => false,
    };
    if justified {
        return Ok(());
    }
    Err(violation(INV_JUSTIFIED, format!("partition {p}: fenced at runtime ({}) with no fault present that explains it: {reason}", reason.name())))
}

/// Faults that make an I/O call fail when they fire: an error, no space, a crash, and a write
/// that landed elsewhere (the superblock's read-back finds it).
fn io_failure_cause(kind: FaultKind) -> bool {
    matches!(
        kind,
        FaultKind::WriteError
            | FaultKind::SyncError
            | FaultKind::DirSyncError
            | FaultKind::NoSpace
            | FaultKind::TornWrite
            | FaultKind::MisdirectedWrite
    )
}

/// **Invariant 4** on a boot that could not complete: only an injected fault that fired while
/// it ran (an I/O error, no space, a crash) may stop it; it is then retried.
pub fn check_boot_failure(
    model: &Model,
    error: &str,
    fired: &[FaultRecord],
    crashed: bool,
) -> Checked<()> {
    let injected = crashed || fired.iter().any(|r| io_failure_cause(r.kind));
    if injected {
        return Ok(());
    }
    Err(violation(
        INV_JUSTIFIED,
        format!(
            "partition {}: recovery failed with no fault behind it: {error}",
            model.index
        ),
    ))
}

// ---------------------------------------------------------------------------------------
// Invariant 1 at a power loss: what a rewind may be excused by.
// ---------------------------------------------------------------------------------------

/// The newest record the superblock slots hold durably (what an honest device keeps), and
/// whether a slot holds pages a lying sync claimed: read just before a power loss.
pub fn superblock_at_power_loss(disk: &SimDisk, dir: &Path) -> (Option<u64>, bool) {
    let lied = SLOT_NAMES
        .iter()
        .any(|name| disk.has_lied_pages(&dir.join(name)));
    (newest_durable_record(disk, dir), lied)
}

/// The durable end of the newest valid record the slots hold durably in a copy the device
/// can read (a copy under an unreadable sector is no record to recovery).
pub fn newest_durable_record(disk: &SimDisk, dir: &Path) -> Option<u64> {
    SLOT_NAMES
        .iter()
        .flat_map(|name| slot_copies(disk, &dir.join(name)))
        .filter(|copy| copy.readable)
        .max_by_key(|copy| copy.record.sequence)
        .map(|copy| copy.record.durable.next_offset)
}

/// One valid record a slot file holds durably.
struct SlotCopy {
    record: Superblock,
    /// No unreadable sector lies in the copy.
    readable: bool,
}

/// The valid records the copies of one slot file hold durably.
fn slot_copies(disk: &SimDisk, path: &Path) -> Vec<SlotCopy> {
    let Some(bytes) = disk.durable_contents(path) else {
        return Vec::new();
    };
    let bad = disk.bad_ranges(path);
    [0, MIRROR_OFFSET]
        .into_iter()
        .filter_map(|at| {
            let span = at..at + SUPERBLOCK_LEN as u64;
            let copy = bytes.get(span.start as usize..span.end as usize)?;
            let record = Superblock::decode(copy).ok()?;
            let readable = !bad.iter().any(|r| r.start < span.end && span.start < r.end);
            Some(SlotCopy { record, readable })
        })
        .collect()
}

/// Before a recovery: when damage present in a superblock slot destroyed its newest record
/// (no copy of it verifies or can be read: both rotten or unreadable, or one so and the
/// other holding an older record after a lost page), the durable end it named cannot be
/// proven on one disk; a rewind is then excused down to the newest record that survives,
/// and no further.
pub fn excuse_destroyed_record(model: &mut Model, before: &BeforeRecovery, disk: &SimDisk) {
    let destroyed = SLOT_NAMES.iter().any(|name| {
        let path = model.dir.join(name);
        let damaged = before
            .damage_of(&path)
            .iter()
            .any(|d| d.kind != FaultKind::SyncError);
        let copies = slot_copies(disk, &path);
        let newest = copies.iter().map(|c| c.record.sequence).max();
        let newest_readable = copies
            .iter()
            .filter(|c| c.readable)
            .map(|c| c.record.sequence)
            .max();
        let all_rotten = copies.is_empty() && disk.durable_contents(&path).is_some();
        damaged && (all_rotten || newest_readable < newest)
    });
    if destroyed {
        let floor = newest_durable_record(disk, &model.dir).unwrap_or(0);
        model.rewind_floor = Some(model.rewind_floor.map_or(floor, |f| f.min(floor)));
    }
}

// ---------------------------------------------------------------------------------------
// Invariant 5: consumer offsets.
// ---------------------------------------------------------------------------------------

/// **Invariant 5** after recovery: every stored offset lies within the log, and reads as a
/// value it may hold: after a process crash the last value stored (a failed store: either),
/// after a power loss any value stored since the last durable one (under `replicated` also
/// none: an unsynced store may tear, and recovery drops it); each lowered to the log's end.
/// Allows: a damaged or missing file when a fault still present in it explains it; a name
/// whose synced directory entry was lost, whatever the file now under it holds (an older
/// incarnation, whose bytes the damage seen in the newer one says nothing about). What
/// recovery serves is durable from then on (its repairs are), so it becomes the only value.
pub fn check_offsets(model: &mut Model) -> Checked<()> {
    let p = model.index;
    let end = model.acked_end;
    let last = end.checked_sub(1);
    // Lowered to a lost tail's end; below the log start, read as consumed up to it.
    let floor = model.log_start.saturating_sub(1);
    let clamp = |v: Option<u64>| match (v, last) {
        (Some(v), Some(last)) => Some(v.min(last).max(floor)),
        _ => None,
    };
    let persisted = model.config.consumer_offset_durability == Durability::Persisted;
    let consumers: Vec<ConsumerId> = model.offsets.keys().copied().collect();
    for consumer in consumers {
        let offset_model = model.offsets[&consumer].clone();
        let candidates = if model.power_lost {
            &offset_model.after_power_loss
        } else {
            &offset_model.now
        };
        let allowed: BTreeSet<Option<u64>> = candidates.iter().map(|v| clamp(*v)).collect();
        let path = consumer.path(&model.dir);
        let rotten = model
            .damage_seen
            .get(&path)
            .is_some_and(|d| d.iter().any(|d| d.kind != FaultKind::SyncError));
        let damaged = rotten || model.lost_names_seen.contains(&path);
        let partition = model.partition.as_ref().expect("open");
        let got = match partition.get_offset(consumer) {
            Ok(value) => value,
            Err(e) if damaged && persisted => {
                // Reported as damaged, never reset: fine while the damage is there.
                let _ = e;
                continue;
            }
            Err(e) => {
                return Err(violation(INV_OFFSETS, format!("partition {p}: reading {consumer:?} failed with no fault present in {}: {e}", path.display())));
            }
        };
        if got.is_some_and(|x| last.is_none_or(|l| x > l)) {
            return Err(violation(
                INV_OFFSETS,
                format!(
                    "partition {p}: {consumer:?} offset {got:?} beyond the last offset {last:?}"
                ),
            ));
        }
        let lost = model.lost_names_seen.contains(&path);
        if persisted && rotten && !lost && !allowed.contains(&got) {
            // Damaged bytes of a persisted offset file are reported on every read, never
            // reset to "none" or to another value.
            return Err(violation(INV_OFFSETS, format!("partition {p}: the persisted offset of {consumer:?} in {} is damaged, and reads {got:?} instead of being reported (expected one of {allowed:?})", path.display())));
        }
        if !allowed.contains(&got) && !damaged {
            return Err(violation(INV_OFFSETS, format!("partition {p}: {consumer:?} reads {got:?} after recovery, expected one of {allowed:?} ({}; stored since the last durable value: {:?})", if model.power_lost { "after a power loss" } else { "after a process crash" }, offset_model.after_power_loss)));
        }
        let settled = model.offsets.get_mut(&consumer).expect("known");
        settled.now = BTreeSet::from([got]);
        settled.after_power_loss = if persisted {
            BTreeSet::from([got])
        } else {
            BTreeSet::from([got, None])
        };
    }
    model.power_lost = false;
    model.damage_seen.clear();
    model.lost_names_seen.clear();
    Ok(())
}

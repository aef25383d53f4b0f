//! The partition world: one node holding a few partitions on a [`SimDisk`], the oracle's
//! models of them, and the operations the workload and the nemesis perform on it. Each
//! operation runs whole under the world's lock (the engine is synchronous); the executor's
//! seeded choice among ready tasks decides the interleaving.
//!
//! Here the [`World`] and its operations; beside it the run's phases ([`run`]), the oracle
//! ([`oracle`]: the model and one checker per invariant, with each allowance and its
//! cause), the oracle's own reader of the logs on the disk ([`walk`]), and the directed
//! scenarios ([`directed`], on the scripting harness in [`scenario`]).

pub mod directed;
mod directed_reads;
mod opening;
pub mod oracle;
pub mod run;
pub mod scenario;
pub mod walk;

use crate::profile::Profile;
use crate::report::{
    violation, Checked, RunReport, Trace, Violation, INV_EXACT, INV_LIVENESS, INV_NO_LOSS,
    INV_OFFSETS, INV_PREFIX,
};
use bytes::BytesMut;
use cairn_engine::env::{Disk, Env};
use cairn_engine::format::{BatchBuilder, BatchHeader, MessageIter};
use cairn_engine::partition::{
    partition_dir, ConsumerId, Partition, PartitionError, PartitionIdentity, PollFrom, Polled,
};
use cairn_faults::{SimClock, SimDisk};
use oracle::{
    check_actions, check_boot_failure, check_exact, check_fence, check_full, check_offsets,
    check_reply, check_runtime_fence, check_visible, BeforeRecovery, Model, ReadMessage, Sent,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the simulated node keeps its data.
pub const DATA_ROOT: &str = "/data";
/// Crashes that may strike inside one boot's recovery before it is let finish.
pub const MAX_CRASHES_IN_RECOVERY: u32 = 3;

/// Why the tasks of an epoch stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The node goes down: a process crash or a power loss.
    Restart { power: bool },
    /// The safety phase has done its operations.
    End,
}

pub struct World {
    pub profile: Profile,
    pub rng: ChaCha8Rng,
    pub disk: SimDisk,
    pub clock: SimClock,
    pub env: Env,
    pub trace: Trace,
    pub models: Vec<Model>,
    pub sent: BTreeMap<u128, Sent>,
    pub next_id: u128,
    pub report: RunReport,
    pub stop: Option<Stop>,
    pub violation: Option<Violation>,
    /// Operations done in the safety phase.
    pub ops: u32,
    /// Faults strike (false in the liveness phase).
    pub faulty: bool,
    /// A crash is scripted on the next superblock write (the `SlotCrash` class).
    pub slot_crash_armed: bool,
    /// The nemesis cuts the power right after the next restart.
    pub power_loss_next: bool,
    /// Every recovery decision taken, in order (directed scenarios read it).
    pub decision_log: Vec<&'static str>,
}

impl World {
    pub fn new(profile: Profile, disk: SimDisk, clock: SimClock, env: Env, trace: Trace) -> World {
        World {
            rng: ChaCha8Rng::seed_from_u64(profile.seed),
            report: RunReport::new(profile.clone()),
            profile,
            disk,
            clock,
            env,
            trace,
            models: Vec::new(),
            sent: BTreeMap::new(),
            next_id: 1,
            stop: None,
            violation: None,
            ops: 0,
            faulty: true,
            slot_crash_armed: false,
            power_loss_next: false,
            decision_log: Vec::new(),
        }
    }

    pub fn event(&mut self, text: impl AsRef<str>) {
        self.trace.event(text);
    }

    /// Records a broken invariant; the run stops.
    pub fn fail(&mut self, violation: Violation) {
        if self.violation.is_none() {
            self.violation = Some(violation);
        }
    }

    pub fn chance(&mut self, p: Option<f64>) -> bool {
        match p {
            Some(p) => self.rng.gen_bool(p.min(1.0)),
            None => false,
        }
    }

    /// Creates the partitions on a healthy disk: `streams/0/topics/0/partitions/{i}`, with
    /// partition id `i`.
    pub fn setup(&mut self) {
        let root = PathBuf::from(DATA_ROOT);
        for i in 0..self.profile.partitions.len() {
            let dir = partition_dir(&root, 0, 0, i as u32);
            let parent = dir.parent().expect("partitions dir").to_path_buf();
            self.disk.create_dir_all(&parent).expect("setup");
            for ancestor in parent.ancestors() {
                if ancestor.as_os_str().is_empty() {
                    break;
                }
                self.disk.sync_dir(ancestor).expect("setup");
            }
            let spec = self.profile.partitions[i].clone();
            let partition = Partition::create_with_hooks(
                &self.env,
                &dir,
                identity(i),
                spec.config,
                spec.settings,
                crate::canary::partition_hooks(),
            )
            .expect("partition create on a healthy disk");
            self.models.push(Model::new(
                i,
                dir,
                i as u64,
                spec.config,
                spec.settings,
                partition,
            ));
            self.models[i].writer_boot_id = Some(self.disk.boot_id());
        }
        self.event(format!("setup {} partitions", self.models.len()));
    }

    pub fn is_open(&self, p: usize) -> bool {
        self.models[p].partition.is_some()
    }

    /// The partitions that serve.
    pub fn open_partitions(&self) -> Vec<usize> {
        (0..self.models.len())
            .filter(|&p| self.is_open(p))
            .collect()
    }

    /// Runs one workload operation on partition `p` and the checks that follow any
    /// operation; asks for a restart when the node went down or a partition fenced.
    pub fn operate(&mut self, p: usize, op: impl FnOnce(&mut World, usize) -> Checked<()>) {
        let fenced = self.models[p]
            .partition
            .as_ref()
            .is_some_and(|pt| pt.fence_reason().is_some());
        if self.stop.is_some() || self.violation.is_some() || !self.is_open(p) || fenced {
            return;
        }
        let records_before = self.disk.record_count();
        if let Err(v) = op(self, p) {
            self.fail(v);
            return;
        }
        self.ops += 1;
        self.after_operation(p, records_before);
    }

    fn after_operation(&mut self, p: usize, records_before: usize) {
        if self.disk.is_crashed() {
            let slot_crash = self.slot_crash_armed
                && self.disk.records_since(records_before).iter().any(|r| {
                    r.kind == cairn_faults::FaultKind::TornWrite
                        && r.path
                            .as_ref()
                            .is_some_and(|p| p.to_string_lossy().contains("superblock"))
                });
            let power = if slot_crash {
                // A process restart, whose recovery trusts the record in flight; the power
                // goes at the next operation, before another record is written.
                self.slot_crash_armed = false;
                self.power_loss_next = true;
                false
            } else {
                self.profile.power_loss.is_some() && self.rng.gen_bool(0.5)
            };
            self.stop = Some(Stop::Restart { power });
            return;
        }
        let model = &mut self.models[p];
        let Some(partition) = model.partition.as_ref() else {
            return;
        };
        if let Ok(flushed) = partition.flushed_next_offset() {
            model.flushed_end = flushed;
        }
        if let Some(reason) = partition.fence_reason().cloned() {
            let fired = self.disk.records_since(records_before);
            self.trace
                .event(format!("p{p} fenced at runtime: {reason}"));
            self.decision_log.push(reason.name());
            if let Err(v) = check_runtime_fence(&self.models[p], &reason, &fired, &self.disk) {
                self.fail(v);
                return;
            }
            // The process restarts to recover it.
            self.stop = Some(Stop::Restart { power: false });
            return;
        }
        if self.faulty && self.ops >= self.profile.steps {
            self.stop = Some(Stop::End);
        }
    }

    fn new_batch(&mut self, p: usize) -> (BytesMut, Vec<u128>) {
        let count = self.rng.gen_range(1..=8);
        self.batch_of(p, count, self.profile.max_payload)
    }

    /// A batch within the partition's current admission limits.
    fn small_batch(&mut self, p: usize) -> (BytesMut, Vec<u128>) {
        let settings = self.models[p].settings;
        let payload = (settings.limits.max_payload_bytes as usize)
            .min(self.profile.max_payload)
            .min(settings.max_journal_bytes as usize / 4);
        self.batch_of(p, 1, payload)
    }

    fn batch_of(&mut self, p: usize, count: usize, max_payload: usize) -> (BytesMut, Vec<u128>) {
        let mut builder = BatchBuilder::new(self.clock.now_nanos() / 1000);
        let mut ids = Vec::with_capacity(count);
        for _ in 0..count {
            let size = if self.rng.gen_bool(0.8) {
                self.rng.gen_range(0..=max_payload.min(512))
            } else {
                self.rng.gen_range(0..=max_payload)
            };
            let payload: Vec<u8> = (0..size).map(|_| self.rng.gen()).collect();
            let headers: Vec<u8> = (0..self.rng.gen_range(0..16))
                .map(|_| self.rng.gen())
                .collect();
            let id = self.next_id | (p as u128) << 96;
            self.next_id += 1;
            builder.push(id, self.rng.gen_range(0..1000), &payload, &headers);
            self.sent.insert(id, Sent { payload, headers });
            ids.push(id);
        }
        (builder.build(), ids)
    }

    /// A producer round: a group of batches, appended and (under `persisted`) persisted
    /// together; or one batch appended now and persisted later.
    pub fn produce(&mut self, p: usize) -> Checked<()> {
        let later = self.models[p].persisted() && self.rng.gen_bool(self.profile.persist_later);
        if later {
            return self.append_for_later(p);
        }
        let groups = self.rng.gen_range(1..=self.profile.max_group);
        let (mut batches, mut ids) = (Vec::new(), Vec::new());
        for _ in 0..groups {
            let (batch, batch_ids) = self.new_batch(p);
            batches.push(batch);
            ids.push(batch_ids);
        }
        let sizes: Vec<u64> = batches.iter().map(|b| b.len() as u64).collect();
        let results = self.models[p]
            .partition
            .as_mut()
            .expect("open")
            .append_group(batches);
        let refused = results
            .iter()
            .any(|r| matches!(r, Err(PartitionError::NoSpace)));
        // A persist ran unless admission refused every batch of the group.
        let persist_ran = results.iter().any(|r| {
            !matches!(
                r,
                Err(PartitionError::InvalidBatch(_) | PartitionError::JournalFull { .. })
            )
        });
        for ((result, batch_ids), bytes) in results.into_iter().zip(ids).zip(sizes) {
            self.settle_append(p, result, batch_ids, bytes)?;
        }
        // The group's persist also settled every provisional append before it.
        let model = &mut self.models[p];
        if model.persisted() && persist_ran && !model.pending.is_empty() {
            let durable = model
                .partition
                .as_ref()
                .and_then(|pt| pt.durable_point().ok());
            match durable {
                Some(point) => model.settle_pending(point.next_offset, refused)?,
                None => model.settle_pending(0, false)?,
            }
        }
        Ok(())
    }

    fn settle_append(
        &mut self,
        p: usize,
        result: Result<cairn_engine::partition::AppendAck, PartitionError>,
        ids: Vec<u128>,
        bytes: u64,
    ) -> Checked<()> {
        let model = &mut self.models[p];
        match result {
            Ok(ack) => {
                if model.persisted() && !ack.durable {
                    return Err(violation(INV_NO_LOSS, format!("partition {p}: a persisted append was acknowledged without being durable: {ack:?}")));
                }
                let end = ack.base_offset + u64::from(ack.message_count);
                self.report.acked_messages += u64::from(ack.message_count);
                model.acked(ack.base_offset, &ids, bytes, ack.timestamp, ack.durable)?;
                self.trace.event(format!(
                    "p{p} ack offsets {}..{end} durable={}",
                    ack.base_offset, ack.durable
                ));
            }
            Err(error) => {
                let refused = matches!(
                    error,
                    PartitionError::NoSpace
                        | PartitionError::JournalFull { .. }
                        | PartitionError::InvalidBatch(_)
                );
                self.trace.event(format!(
                    "p{p} append of {} messages {}: {error}",
                    ids.len(),
                    if refused {
                        "refused"
                    } else {
                        "failed, outcome unknown"
                    }
                ));
                if refused {
                    model.rejected.extend(ids);
                } else {
                    model.unknown.extend(ids);
                }
            }
        }
        Ok(())
    }

    /// A persisted topic's append now, acknowledged only when a later persist succeeds.
    fn append_for_later(&mut self, p: usize) -> Checked<()> {
        let (batch, ids) = self.new_batch(p);
        let bytes = batch.len() as u64;
        let model = &mut self.models[p];
        match model.partition.as_mut().expect("open").append(batch) {
            Ok(ack) => {
                assert!(!ack.durable && ack.requires_persist);
                model.batches.insert(
                    ack.base_offset,
                    oracle::KnownBatch {
                        count: ack.message_count,
                        bytes: Some(bytes),
                        timestamp: Some(ack.timestamp),
                    },
                );
                model.pending.push((ack.base_offset, ids));
                self.trace.event(format!(
                    "p{p} appended {} to persist later",
                    ack.base_offset
                ));
                Ok(())
            }
            Err(error) => self.settle_append(p, Err(error), ids, bytes),
        }
    }

    /// An explicit persist: everything journaled becomes durable (or a failure settles the
    /// provisional appends).
    pub fn persist(&mut self, p: usize) -> Checked<()> {
        let model = &mut self.models[p];
        let partition = model.partition.as_mut().expect("open");
        match partition.persist() {
            Ok(point) => {
                model.settle_pending(point.next_offset, false)?;
                model.durable_through(point.next_offset);
                self.trace
                    .event(format!("p{p} persist -> next offset {}", point.next_offset));
            }
            Err(e) => {
                let refused = matches!(e, PartitionError::NoSpace);
                let durable = partition.durable_point().map_or(0, |d| d.next_offset);
                model.settle_pending(durable, refused && model.persisted())?;
                self.trace.event(format!("p{p} persist failed: {e}"));
            }
        }
        Ok(())
    }

    fn consumer(&mut self) -> ConsumerId {
        if self.rng.gen_bool(0.7) {
            ConsumerId::consumer(self.rng.gen_range(0..3))
        } else {
            ConsumerId::group(self.rng.gen_range(0..2))
        }
    }

    pub fn store_offset(&mut self, p: usize) -> Checked<()> {
        let consumer = self.consumer();
        let model = &self.models[p];
        let visible = model
            .partition
            .as_ref()
            .and_then(|pt| pt.visible_next_offset().ok())
            .unwrap_or(0);
        let offset = self.rng.gen_range(0..visible + 2);
        let model = &mut self.models[p];
        let result = model
            .partition
            .as_mut()
            .expect("open")
            .store_offset(consumer, offset);
        match result {
            Ok(()) => {
                if offset >= visible {
                    return Err(violation(INV_OFFSETS, format!("partition {p}: stored offset {offset} at or beyond the visible end {visible}")));
                }
                model.offset_stored(consumer, Some(offset), true);
                self.trace
                    .event(format!("p{p} stored offset {consumer:?} = {offset}"));
            }
            Err(PartitionError::OffsetBeyondEnd { .. }) if offset >= visible => {}
            Err(e) => {
                model.offset_stored(consumer, Some(offset), false);
                self.trace.event(format!(
                    "p{p} store offset {consumer:?} = {offset} failed: {e}"
                ));
            }
        }
        Ok(())
    }

    pub fn delete_offset(&mut self, p: usize) -> Checked<()> {
        let consumer = self.consumer();
        let model = &mut self.models[p];
        match model
            .partition
            .as_mut()
            .expect("open")
            .delete_offset(consumer)
        {
            Ok(existed) => {
                model.offset_stored(consumer, None, true);
                self.trace.event(format!(
                    "p{p} deleted offset {consumer:?} (existed: {existed})"
                ));
            }
            Err(e) => {
                model.offset_stored(consumer, None, false);
                self.trace
                    .event(format!("p{p} delete offset {consumer:?} failed: {e}"));
            }
        }
        Ok(())
    }

    /// A poll of a random kind, checked: exact bytes, the start, the count, completeness.
    pub fn poll(&mut self, p: usize) -> Checked<()> {
        let count = self.rng.gen_range(1..100);
        let visible = self.models[p].visible_end();
        let from = match self.rng.gen_range(0..5) {
            0 => PollFrom::Offset(self.rng.gen_range(0..visible + 3)),
            1 => PollFrom::First,
            2 => PollFrom::Last,
            3 => PollFrom::Timestamp(
                cairn_faults::clock::WALL_EPOCH_MICROS
                    + self.rng.gen_range(0..self.clock.now_nanos() / 1000 + 1),
            ),
            _ => PollFrom::Next(self.consumer()),
        };
        self.poll_from(p, from, count)
    }

    /// A poll of partition `p` from `from`, checked like [`Self::poll`]'s.
    pub fn poll_from(&mut self, p: usize, from: PollFrom, count: u32) -> Checked<()> {
        let partition = self.models[p].partition.as_mut().expect("open");
        let durable_before = partition.durable_point().map_or(0, |d| d.next_offset);
        let result = partition.poll(from, count);
        match result {
            Ok(polled) => {
                let messages = decode(&polled, self.models[p].settings.validate_checksum)?;
                self.trace.event(format!(
                    "p{p} poll {from:?} x{count} -> {} messages",
                    messages.len()
                ));
                let reply_bytes = polled.batches.iter().map(|b| b.len() as u64).sum();
                let model = &mut self.models[p];
                check_exact(model, &messages, &self.sent, count, &self.disk)?;
                let durable = model
                    .partition
                    .as_ref()
                    .and_then(|pt| pt.durable_point().ok());
                let durable_end = durable.map_or(0, |d| d.next_offset);
                check_visible(model, &messages, durable_end)?;
                let reply = oracle::Reply {
                    from,
                    count,
                    messages: &messages,
                    bytes: reply_bytes,
                    current_offset: polled.current_offset,
                    durable_before,
                };
                check_reply(model, &reply, &self.disk)?;
                model.learn_batches(&messages);
            }
            Err(PartitionError::OffsetDamaged { path, .. }) => {
                let model = &self.models[p];
                let damaged = oracle::damage_in(&self.disk, &path, 0..u64::MAX, false).is_some();
                if !damaged {
                    return Err(violation(
                        INV_OFFSETS,
                        format!(
                            "partition {p}: {} reported damaged with no fault present in it",
                            path.display()
                        ),
                    ));
                }
                let _ = model;
            }
            Err(e) => self.trace.event(format!("p{p} poll {from:?} failed: {e}")),
        }
        Ok(())
    }

    /// Retention by hand: deletes the oldest sealed segments (never the active one).
    pub fn delete_segments(&mut self, p: usize) -> Checked<()> {
        let segments = self.models[p]
            .partition
            .as_ref()
            .and_then(|pt| pt.segment_starts().ok())
            .map_or(0, |s| s.len());
        if segments < 2 {
            return Ok(());
        }
        let count = self.rng.gen_range(1..segments);
        self.delete_oldest(p, count)
    }

    /// Deletes the `count` oldest segments of partition `p` (fewer than it has).
    pub fn delete_oldest(&mut self, p: usize, count: usize) -> Checked<()> {
        let model = &mut self.models[p];
        let partition = model.partition.as_mut().expect("open");
        let starts = partition.segment_starts().expect("open");
        assert!(count < starts.len(), "the active segment is never deleted");
        let new_start = starts[count];
        match partition.delete_oldest_segments(count) {
            Ok(()) => {
                let start = partition.log_start().expect("open");
                if start != new_start {
                    return Err(violation(INV_PREFIX, format!("partition {p}: deleting {count} segments moved the log start to {start}, expected {new_start}")));
                }
                model.advance_log_start(new_start)?;
                self.trace.event(format!(
                    "p{p} deleted {count} segments: the log starts at {new_start}"
                ));
            }
            Err(e) => {
                model.log_start_pending = Some(new_start);
                self.trace
                    .event(format!("p{p} deleting {count} segments failed: {e}"));
            }
        }
        Ok(())
    }

    /// Reads the whole partition back and checks it against the oracle.
    pub fn verify(&mut self, p: usize, after_restart: bool) -> Checked<()> {
        let page = self.rng.gen_range(1..300);
        let model = &mut self.models[p];
        let Some(partition) = model.partition.as_mut() else {
            return Ok(());
        };
        let mut all = Vec::new();
        let mut next = 0u64;
        loop {
            let polled = match partition.poll(PollFrom::Offset(next), page) {
                Ok(polled) => polled,
                Err(e) => {
                    self.trace.event(format!("p{p} verify: poll failed: {e}"));
                    return Ok(());
                }
            };
            let messages = decode(&polled, model.settings.validate_checksum)?;
            if let Some(reason) = partition.fence_reason().cloned() {
                // The read found damage in promised bytes and fenced: that is judged as a
                // runtime fence, and the node restarts; the full check waits for the next boot.
                self.trace
                    .event(format!("p{p} verify: fenced by the read: {reason}"));
                self.decision_log.push(reason.name());
                return check_runtime_fence(model, &reason, &[], &self.disk);
            }
            if messages.is_empty() {
                break;
            }
            next = messages.last().expect("non-empty").offset + 1;
            all.extend(messages);
        }
        self.trace
            .event(format!("p{p} verify: {} messages, end {next}", all.len()));
        let log_start = partition.log_start().expect("open");
        check_full(
            model,
            &all,
            log_start,
            &self.sent,
            after_restart,
            &self.disk,
        )
    }

    /// Closes a partition gracefully and opens it again: everything acknowledged is durable.
    pub fn close_reopen(&mut self, p: usize) -> Checked<()> {
        let partition = self.models[p].partition.take().expect("open");
        match partition.close() {
            Ok(()) => {
                let model = &mut self.models[p];
                let acked = model.acked_end;
                model.settle_pending(u64::MAX, false)?;
                model.durable_through(acked.max(model.acked_end));
                self.trace.event(format!("p{p} closed"));
            }
            Err(e) => self.trace.event(format!("p{p} close failed: {e}")),
        }
        self.recover(p)
    }

    /// Takes the node down and boots it again; a crash may also strike inside recovery, after
    /// which the node goes down and recovers once more.
    pub fn restart(&mut self, power: bool) -> Checked<()> {
        self.report.restarts += 1;
        self.take_down(power);
        if self.faulty {
            self.strike_while_down();
        }
        for attempt in 0..=MAX_CRASHES_IN_RECOVERY {
            if attempt == MAX_CRASHES_IN_RECOVERY {
                // The last attempt finishes: a slot crash scripted before the restart (its
                // superblock write never came) would otherwise strike inside it.
                self.disk.cancel_crashes();
                self.slot_crash_armed = false;
            }
            let armed = self.faulty
                && attempt < MAX_CRASHES_IN_RECOVERY
                && self.chance(self.profile.mid_operation_crash.map(|p| p * 0.3));
            if armed {
                let n = self.rng.gen_range(0..16);
                self.disk.arm_crash(n);
                self.event(format!(
                    "fault crash armed inside recovery at mutating call +{n}"
                ));
            }
            for p in 0..self.models.len() {
                if self.models[p].fenced.is_none() && !self.disk.is_crashed() {
                    self.recover(p)?;
                }
            }
            self.disk.disarm_crash();
            if !self.disk.is_crashed() {
                return Ok(());
            }
            self.event("fault crash inside recovery");
            self.report.crashes_in_recovery += 1;
            let power = self.profile.power_loss.is_some() && self.rng.gen_bool(0.5);
            self.take_down(power);
        }
        unreachable!("the last attempt arms no crash")
    }

    /// Recovers every partition that is not fenced.
    pub fn recover_all(&mut self) -> Checked<()> {
        for p in 0..self.models.len() {
            if self.models[p].fenced.is_none() && !self.disk.is_crashed() {
                self.recover(p)?;
            }
        }
        Ok(())
    }

    fn strike_while_down(&mut self) {
        if self.chance(self.profile.bit_flip) {
            if let Some((path, at)) = self.disk.flip_random_bit(Path::new(DATA_ROOT)) {
                self.event(format!("fault bit flip {} at {at}", path.display()));
            }
        }
        if self.chance(self.profile.slot_rot) {
            // Both copies of one slot's record: the mirror no longer helps.
            let p = self.rng.gen_range(0..self.models.len());
            let slot = self.models[p]
                .dir
                .join(["superblock.a", "superblock.b"][self.rng.gen_range(0..2)]);
            let (byte, bit) = (self.rng.gen_range(0..64), self.rng.gen_range(0..8));
            if self
                .disk
                .durable_contents(&slot)
                .is_some_and(|c| c.len() as u64 >= 4096 + 64)
            {
                self.disk.flip_bit_at(&slot, byte, bit);
                self.disk.flip_bit_at(&slot, 4096 + byte, bit);
                self.event(format!("fault slot rot {} at byte {byte}", slot.display()));
            }
        }
        if self.chance(self.profile.read_error) {
            if let Some((path, at)) = self.disk.add_bad_sector(Path::new(DATA_ROOT)) {
                self.event(format!("fault bad sector {} at {at}", path.display()));
            }
        }
    }

    /// Drops every partition (the process dies); on a power loss, first notes what the
    /// oracle may excuse (a lying superblock sync), then loses what was not durable.
    pub fn take_down(&mut self, power: bool) {
        let mut serving = Vec::with_capacity(self.models.len());
        for model in &mut self.models {
            let partition = model.partition.take();
            if let Some(flushed) = partition
                .as_ref()
                .and_then(|p| p.flushed_next_offset().ok())
            {
                model.flushed_end = flushed;
            }
            serving.push(partition.is_some());
        }
        if power {
            for model in &mut self.models {
                let (honest, lied) = oracle::superblock_at_power_loss(&self.disk, &model.dir);
                if lied {
                    let floor = honest.unwrap_or(0);
                    model.rewind_floor = Some(model.rewind_floor.map_or(floor, |f| f.min(floor)));
                }
                // Unsynced flushed data may be gone: nothing flushed is owed any more.
                model.flushed_floor = None;
                model.crash_walk = None;
                model.power_lost = true;
            }
            self.disk.power_loss();
            self.event("fault power loss");
            return;
        }
        // The page cache survives: what a serving `replicated` partition had flushed is owed.
        // (Under `persisted`, flushed bytes above the durable end are provisional appends a
        // failed persist may roll back; what is owed there is what was acknowledged.)
        for (model, serving) in self.models.iter_mut().zip(serving) {
            if !serving || model.persisted() {
                continue;
            }
            let flushed = model.flushed_end;
            model.flushed_floor = Some(model.flushed_floor.map_or(flushed, |f| f.max(flushed)));
            if model.crash_walk.is_none() {
                model.crash_walk = Some(walk::walk_partition(
                    &self.disk,
                    &model.dir,
                    model.partition_id,
                    walk::View::Cache,
                ));
            }
        }
        self.disk.process_crash();
        self.event("fault process crash");
    }

    /// The engine's recovery of partition `p` on the surviving image, then every check.
    pub fn recover(&mut self, p: usize) -> Checked<()> {
        let before = BeforeRecovery::take(&self.disk, &self.models[p]);
        let model = &mut self.models[p];
        for (path, damage) in &before.damage {
            model
                .damage_seen
                .entry(path.clone())
                .or_default()
                .extend(damage.iter().cloned());
        }
        model
            .lost_names_seen
            .extend(before.lost_names.iter().cloned());
        oracle::excuse_destroyed_record(&mut self.models[p], &before, &self.disk);
        let spec = self.profile.partitions[p].clone();
        let mut settings = spec.settings;
        if let Some(lowered) = spec.lowered_limits.filter(|_| self.rng.gen_bool(0.5)) {
            settings.limits = lowered;
            self.event(format!(
                "p{p} boots with lowered admission limits {lowered:?}"
            ));
        }
        self.models[p].settings = settings;
        let records_before = self.disk.record_count();
        let model = &self.models[p];
        let boot = (self.rng.gen_range(0..4), self.disk.boot_id());
        let opened = opening::open(&self.env, model, identity(p), settings, boot);
        // This process (of this kernel) may write the partition from here on.
        self.models[p].writer_boot_id = Some(boot.1);
        let opened = match opened {
            Ok(opened) => opened,
            Err(e) => {
                let fired = self.disk.records_since(records_before);
                check_boot_failure(&self.models[p], &e, &fired, self.disk.is_crashed())?;
                self.event(format!("p{p} recovery failed, boot retried later: {e}"));
                self.models[p].boot_failed = true;
                self.report.boot_retries += 1;
                return Ok(());
            }
        };
        for note in &opened.plan.notes {
            self.trace.event(format!("p{p} recovery note: {note}"));
        }
        for outcome in opened.plan.outcomes() {
            *self.report.outcomes.entry(outcome).or_default() += 1;
        }
        for decision in opened.plan.decisions() {
            *self.report.decisions.entry(decision).or_default() += 1;
            self.decision_log.push(decision);
        }
        for action in &opened.plan.actions {
            self.trace.event(format!("p{p} recovery: {action}"));
        }
        check_actions(&self.models[p], &opened.plan, &before)?;
        if let Some(reason) = opened.partition.fence_reason() {
            self.trace.event(format!("p{p} recovery: FENCED {reason}"));
            check_fence(&self.models[p], reason, &before, &self.disk)?;
            self.models[p].fenced = Some(reason.to_string());
            return Ok(());
        }
        self.models[p].partition = Some(opened.partition);
        self.verify(p, true)?;
        if self.models[p]
            .partition
            .as_ref()
            .is_some_and(|pt| pt.fence_reason().is_some())
        {
            return Ok(());
        }
        check_offsets(&mut self.models[p])
    }

    /// After faults healed, every serving partition must take an append, read it back and
    /// store an offset.
    pub fn liveness_round(&mut self, p: usize) -> Checked<bool> {
        if self.models[p].fenced.is_some() {
            return Ok(true);
        }
        if !self.is_open(p) {
            self.recover(p)?;
            if !self.is_open(p) {
                return Ok(false);
            }
        }
        let (batch, ids) = self.small_batch(p);
        let bytes = batch.len() as u64;
        let result = self.models[p]
            .partition
            .as_mut()
            .expect("open")
            .append_group(vec![batch])
            .pop()
            .expect("one result");
        let ack = match result {
            Ok(ack) => ack,
            Err(e) => {
                return Err(violation(
                    INV_LIVENESS,
                    format!("partition {p}: append failed after faults healed: {e}"),
                ))
            }
        };
        self.settle_append(p, Ok(ack), ids, bytes)?;
        let model = &mut self.models[p];
        let partition = model.partition.as_mut().expect("open");
        partition.persist().map_err(|e| {
            violation(
                INV_LIVENESS,
                format!("partition {p}: persist failed after faults healed: {e}"),
            )
        })?;
        let polled = partition
            .poll(PollFrom::Offset(ack.base_offset), 8)
            .map_err(|e| {
                violation(
                    INV_LIVENESS,
                    format!("partition {p}: poll failed after faults healed: {e}"),
                )
            })?;
        if polled.batches.is_empty() {
            return Err(violation(
                INV_LIVENESS,
                format!(
                    "partition {p}: acked offset {} not readable after faults healed",
                    ack.base_offset
                ),
            ));
        }
        let consumer = ConsumerId::consumer(0);
        partition
            .store_offset(consumer, ack.base_offset)
            .map_err(|e| {
                violation(
                    INV_LIVENESS,
                    format!("partition {p}: storing an offset failed after faults healed: {e}"),
                )
            })?;
        model.offset_stored(consumer, Some(ack.base_offset), true);
        model.durable_through(ack.base_offset + u64::from(ack.message_count));
        Ok(true)
    }

    /// Fault kinds fired, for the report.
    pub fn count_faults(&mut self) {
        let records = self.disk.records();
        self.report.count_faults(&records);
    }
}

/// Decodes a reply into messages, checking every batch verifies (invariant 3): fully, or
/// only its structure when the partition does not validate checksums.
pub fn decode(polled: &Polled, full: bool) -> Checked<Vec<ReadMessage>> {
    use cairn_engine::format::{verify_batch, verify_structure, Layout, Limits};
    let mut out = Vec::new();
    for batch in &polled.batches {
        let header = BatchHeader::decode(batch).map_err(|e| {
            violation(
                INV_EXACT,
                format!("a poll returned an undecodable batch: {e}"),
            )
        })?;
        let verified = if full {
            verify_batch(batch, &Limits::CEILING, Layout::Sliced)
        } else {
            verify_structure(batch, &Limits::CEILING, Layout::Sliced)
        };
        verified.map_err(|e| {
            violation(
                INV_EXACT,
                format!("a poll returned a batch that does not verify: {e}"),
            )
        })?;
        for m in MessageIter::new(batch, header.base_offset) {
            out.push(ReadMessage {
                offset: m.offset,
                id: m.header.id,
                payload: batch.slice_ref(m.payload),
                headers: batch.slice_ref(m.user_headers),
                timestamp: header.base_timestamp,
                batch_base: header.base_offset,
            });
        }
    }
    Ok(out)
}

/// The identity of the simulated partition `p` (partition `p` outside any stream).
fn identity(p: usize) -> PartitionIdentity {
    PartitionIdentity::bare(u32::try_from(p).expect("few partitions"))
}

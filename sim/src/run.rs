//! One simulated run: a node holding a few partitions on a [`SimDisk`], a workload of
//! producers, consumers and offset stores, crashes and power losses with the engine's real
//! recovery on the surviving image, and the oracle's checks after every restart and at the
//! end. Everything derives from the seed; the trace hash proves it.

use crate::oracle::{Model, ReadMessage, Sent};
use crate::profile::Profile;
use bytes::BytesMut;
use cairn_engine::config::{Durability, PartitionSettings};
use cairn_engine::env::{Disk, Entropy, Env};
use cairn_engine::format::{BatchBuilder, BatchHeader, MessageIter};
use cairn_engine::partition::recovery::Action;
use cairn_engine::partition::{
    partition_dir, ConsumerId, Outcome, Partition, PartitionError, PollFrom,
};
use cairn_faults::{FaultKind, NetFaults, SimClock, SimDisk, SimNet};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use xxhash::xxh3::Xxh3;

/// The simulated node's address.
pub const NODE_IP: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
/// Where the simulated node keeps its data.
pub const DATA_ROOT: &str = "/data";
/// Crashes that may strike inside one boot's recovery before it is let finish.
pub const MAX_CRASHES_IN_RECOVERY: u32 = 3;
/// Steps of the liveness phase in which every open partition must make progress.
pub const LIVENESS_ROUNDS: u32 = 10;

/// A broken invariant and what shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub evidence: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invariant violated: {}\n  evidence: {}",
            self.invariant, self.evidence
        )
    }
}

pub const INV_NO_LOSS: &str = "1 no acknowledged loss";
pub const INV_PREFIX: &str = "2 prefix property";
pub const INV_EXACT: &str = "3 no phantoms, exact bytes";
pub const INV_JUSTIFIED: &str = "4 justified decisions";
pub const INV_OFFSETS: &str = "5 consumer offsets";
pub const INV_LIVENESS: &str = "7 liveness";

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub profile: Profile,
    pub trace_hash: u64,
    pub violation: Option<Violation>,
    pub faults_fired: BTreeMap<FaultKind, usize>,
    pub outcomes: BTreeMap<Outcome, usize>,
    pub simulated_nanos: u64,
    pub steps: u64,
    pub restarts: u64,
    /// Boot attempts that could not complete (an injected I/O error) and were retried.
    pub boot_retries: u64,
    /// Crashes that struck while recovery was running.
    pub crashes_in_recovery: u64,
    pub acked_messages: u64,
}

impl RunReport {
    pub fn replay_command(&self, canary: Option<&str>) -> String {
        let features = if canary.is_some() {
            " --features canary"
        } else {
            ""
        };
        let canary = canary.map(|c| format!(" --canary {c}")).unwrap_or_default();
        format!(
            "cargo run --release -p cairn-sim{features} -- --seed {:#x}{canary} --verbose",
            self.profile.seed
        )
    }
}

/// The ordered record of a run; its hash is the run's fingerprint.
struct Trace {
    hasher: Xxh3,
    verbose: bool,
    clock: SimClock,
}

impl Trace {
    fn event(&mut self, text: impl AsRef<str>) {
        let line = format!("{:>14} {}", self.clock.now_nanos() / 1000, text.as_ref());
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        if self.verbose {
            println!("{line}");
        }
    }
}

/// Seeded entropy for the engine.
struct SimEntropy(Mutex<ChaCha8Rng>);

impl Entropy for SimEntropy {
    fn next_u64(&self) -> u64 {
        self.0.lock().expect("entropy").gen()
    }
}

struct Sim {
    profile: Profile,
    rng: ChaCha8Rng,
    disk: SimDisk,
    clock: SimClock,
    env: Env,
    trace: Trace,
    models: Vec<Model>,
    sent: BTreeMap<u128, Sent>,
    next_id: u128,
    report: RunReport,
}

type Checked<T> = Result<T, Violation>;

fn violation(invariant: &'static str, evidence: String) -> Violation {
    Violation {
        invariant,
        evidence,
    }
}

/// Runs one seed to completion.
pub fn run_seed(seed: u64, verbose: bool) -> RunReport {
    let profile = Profile::from_seed(seed);
    let clock = SimClock::new();
    let disk = SimDisk::new(seed ^ 0xd15c, Default::default());
    disk.set_latency(
        clock.clone(),
        profile.disk_latency_nanos.0,
        profile.disk_latency_nanos.1,
    );
    let executor = crate::executor::Executor::new(seed ^ 0xe8ec, clock.clone());
    let env = Env {
        disk: Arc::new(disk.clone()),
        clock: Arc::new(clock.clone()),
        // The node's network; this workload drives the engine directly and sends nothing
        // over it until the server exists.
        net: Arc::new(SimNet::new(seed ^ 0x4e7, clock.clone(), NetFaults::default()).host(NODE_IP)),
        tasks: Arc::new(executor.handle()),
        entropy: Arc::new(SimEntropy(Mutex::new(ChaCha8Rng::seed_from_u64(
            seed ^ 0xe27,
        )))),
    };
    let mut sim = Sim {
        rng: ChaCha8Rng::seed_from_u64(seed),
        trace: Trace {
            hasher: Xxh3::new(),
            verbose,
            clock: clock.clone(),
        },
        report: RunReport {
            profile: profile.clone(),
            trace_hash: 0,
            violation: None,
            faults_fired: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            simulated_nanos: 0,
            steps: 0,
            restarts: 0,
            boot_retries: 0,
            crashes_in_recovery: 0,
            acked_messages: 0,
        },
        profile,
        disk,
        clock,
        env,
        models: Vec::new(),
        sent: BTreeMap::new(),
        next_id: 1,
    };
    if verbose {
        print!("{}", sim.profile);
    }
    let profile_text = sim.profile.to_string();
    sim.trace.event(format!(
        "profile {}",
        xxhash::xxh3::xxh3_64(profile_text.as_bytes())
    ));
    let result = sim.run();
    let mut report = sim.report;
    report.violation = result.err();
    for record in sim.disk.records() {
        *report.faults_fired.entry(record.kind).or_default() += 1;
    }
    if let Some(v) = &report.violation {
        sim.trace.event(format!("VIOLATION {v}"));
    }
    report.simulated_nanos = sim.clock.now_nanos();
    report.trace_hash = sim.trace.hasher.digest();
    report
}

impl Sim {
    fn run(&mut self) -> Checked<()> {
        self.setup();
        self.disk.set_faults(self.profile.disk);
        self.trace.event("phase safety");
        for _ in 0..self.profile.steps {
            self.step()?;
            self.report.steps += 1;
        }
        self.trace.event("phase liveness: faults healed");
        self.disk.heal();
        self.restart(false)?;
        self.liveness()?;
        for p in 0..self.models.len() {
            self.verify_log(p, false)?;
        }
        Ok(())
    }

    fn setup(&mut self) {
        let root = PathBuf::from(DATA_ROOT);
        for i in 0..self.profile.partitions.len() {
            let dir = partition_dir(&root, 0, i as u32, 0);
            let parent = dir.parent().expect("partitions dir").to_path_buf();
            self.disk.create_dir_all(&parent).expect("setup");
            let mut ancestor = Some(parent.as_path());
            while let Some(a) = ancestor {
                self.disk.sync_dir(a).expect("setup");
                if let Some(up) = a.parent() {
                    self.disk.sync_dir(up).expect("setup");
                }
                ancestor = a.parent().filter(|p| *p != Path::new("/"));
            }
            let config = self.profile.partitions[i];
            let partition =
                Partition::create(&self.env, &dir, 0, config, PartitionSettings::default())
                    .expect("partition create on a healthy disk");
            self.models.push(Model::new(dir, config, partition));
        }
        self.trace
            .event(format!("setup {} partitions", self.models.len()));
    }

    fn chance(&mut self, p: Option<f64>) -> bool {
        match p {
            Some(p) => self.rng.gen_bool(p.min(1.0)),
            None => false,
        }
    }

    fn step(&mut self) -> Checked<()> {
        self.clock
            .advance(self.rng.gen_range(0..self.profile.max_think_nanos));
        if self.chance(self.profile.clock_jump) {
            let jump: i64 = self.rng.gen_range(-86_400_000_000..86_400_000_000);
            self.clock.jump_wall(jump);
            self.disk
                .record(FaultKind::ClockJump, None, format!("{jump} us"));
            self.trace.event(format!("fault clock jump {jump} us"));
        }
        if self.chance(self.profile.power_loss) {
            return self.restart(true);
        }
        if self.chance(self.profile.process_crash) {
            return self.restart(false);
        }
        if self.chance(self.profile.mid_operation_crash.map(|p| p * 0.05)) {
            let n = self.rng.gen_range(0..8);
            self.disk.arm_crash(n);
            self.trace
                .event(format!("fault crash armed at mutating call +{n}"));
        }
        for p in 0..self.models.len() {
            let down = self.models[p].partition.is_none() && self.models[p].fenced.is_none();
            if down && self.rng.gen_bool(0.3) {
                self.trace.event(format!("p{p} boot retry"));
                self.recover(p)?;
            }
        }
        if self.disk.is_crashed() {
            // A crash struck inside a boot retry: the node is down, restart it first.
            let power = self.profile.power_loss.is_some() && self.rng.gen_bool(0.5);
            return self.restart(power);
        }
        let open: Vec<usize> = (0..self.models.len())
            .filter(|&p| self.models[p].partition.is_some())
            .collect();
        if open.is_empty() {
            return Ok(());
        }
        let p = open[self.rng.gen_range(0..open.len())];
        match self.rng.gen_range(0..100) {
            0..=54 => self.produce(p)?,
            55..=79 => self.poll(p)?,
            80..=89 => self.store_offset(p)?,
            90..=94 => self.persist(p),
            _ => self.verify_log(p, false)?,
        }
        if self.disk.is_crashed() {
            let power = self.profile.power_loss.is_some() && self.rng.gen_bool(0.5);
            return self.restart(power);
        }
        if self.models.iter().any(|m| {
            m.partition
                .as_ref()
                .is_some_and(|p| p.fence_reason().is_some())
        }) {
            // A partition failed at runtime (I/O error): the process restarts to recover it.
            return self.restart(false);
        }
        Ok(())
    }

    fn new_batch(&mut self) -> (BytesMut, Vec<u128>) {
        let count = self.rng.gen_range(1..=8);
        let mut builder = BatchBuilder::new(self.clock.now_nanos() / 1000);
        let mut ids = Vec::with_capacity(count);
        for _ in 0..count {
            let size = if self.rng.gen_bool(0.8) {
                self.rng.gen_range(0..=self.profile.max_payload.min(512))
            } else {
                self.rng.gen_range(0..=self.profile.max_payload)
            };
            let payload: Vec<u8> = (0..size).map(|_| self.rng.gen()).collect();
            let headers: Vec<u8> = (0..self.rng.gen_range(0..16))
                .map(|_| self.rng.gen())
                .collect();
            let id = self.next_id;
            self.next_id += 1;
            builder.push(id, self.rng.gen_range(0..1000), &payload, &headers);
            self.sent.insert(id, Sent { payload, headers });
            ids.push(id);
        }
        (builder.build(), ids)
    }

    fn produce(&mut self, p: usize) -> Checked<()> {
        let groups = self.rng.gen_range(1..=self.profile.max_group);
        let mut batches = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..groups {
            let (batch, batch_ids) = self.new_batch();
            batches.push(batch);
            ids.push(batch_ids);
        }
        let results = self.models[p]
            .partition
            .as_mut()
            .expect("open")
            .append_group(batches);
        let persisted = self.models[p].config.durability == Durability::Persisted;
        for (result, batch_ids) in results.into_iter().zip(ids) {
            match result {
                Ok(ack) => {
                    if persisted && !ack.durable {
                        return Err(violation(INV_NO_LOSS, format!("partition {p}: a persisted append was acknowledged without being durable: {ack:?}")));
                    }
                    self.trace.event(format!(
                        "p{p} ack offsets {}..{} durable={}",
                        ack.base_offset,
                        ack.base_offset + u64::from(ack.message_count),
                        ack.durable
                    ));
                    self.report.acked_messages += u64::from(ack.message_count);
                    self.models[p].acked(ack.base_offset, &batch_ids, ack.durable)?;
                }
                Err(error) => {
                    self.trace.event(format!(
                        "p{p} append failed ({} messages, outcome unknown): {error}",
                        batch_ids.len()
                    ));
                    for id in batch_ids {
                        self.models[p].unknown.insert(id);
                    }
                }
            }
        }
        Ok(())
    }

    fn persist(&mut self, p: usize) {
        let model = &mut self.models[p];
        let result = model.partition.as_mut().expect("open").persist();
        match result {
            Ok(point) => {
                model.durable_end = model
                    .durable_end
                    .max(model.acked_end.min(point.next_offset));
                self.trace
                    .event(format!("p{p} persist -> next offset {}", point.next_offset));
            }
            Err(e) => self.trace.event(format!("p{p} persist failed: {e}")),
        }
    }

    fn store_offset(&mut self, p: usize) -> Checked<()> {
        let consumer = if self.rng.gen_bool(0.7) {
            ConsumerId::consumer(self.rng.gen_range(0..3))
        } else {
            ConsumerId::group(self.rng.gen_range(0..2))
        };
        let model = &mut self.models[p];
        let partition = model.partition.as_mut().expect("open");
        let next = partition.next_offset().unwrap_or(0);
        let offset = self.rng.gen_range(0..next + 2);
        match partition.store_offset(consumer, offset) {
            Ok(()) => {
                if offset >= next {
                    return Err(violation(
                        INV_OFFSETS,
                        format!("partition {p}: stored offset {offset} beyond the end {next}"),
                    ));
                }
                self.trace
                    .event(format!("p{p} stored offset {consumer:?} = {offset}"));
                model.offsets.entry(consumer).or_default().push(offset);
                if model.config.consumer_offset_durability == Durability::Persisted {
                    model.durable_offsets.insert(consumer, offset);
                } else {
                    model.durable_offsets.remove(&consumer);
                }
            }
            Err(PartitionError::OffsetBeyondEnd { .. }) if offset >= next => {}
            Err(e) => {
                // Outcome unknown: the new value may or may not have landed.
                self.trace.event(format!(
                    "p{p} store offset {consumer:?} = {offset} failed: {e}"
                ));
                model.offsets.entry(consumer).or_default().push(offset);
                model.durable_offsets.remove(&consumer);
            }
        }
        Ok(())
    }

    fn poll(&mut self, p: usize) -> Checked<()> {
        let count = self.rng.gen_range(1..100);
        let model = &mut self.models[p];
        let partition = model.partition.as_mut().expect("open");
        let next = partition.next_offset().unwrap_or(0);
        let (from, expect_start) = match self.rng.gen_range(0..5) {
            0 => {
                let o = self.rng.gen_range(0..next + 3);
                (PollFrom::Offset(o), (o < next).then_some(o))
            }
            1 => (PollFrom::First, (next > 0).then_some(0)),
            2 => (
                PollFrom::Last,
                (next > 0).then_some(next.saturating_sub(u64::from(count))),
            ),
            3 => (
                PollFrom::Timestamp(
                    cairn_faults::clock::WALL_EPOCH_MICROS
                        + self.rng.gen_range(0..self.clock.now_nanos() / 1000 + 1),
                ),
                None,
            ),
            _ => (
                PollFrom::Next(ConsumerId::consumer(self.rng.gen_range(0..3))),
                None,
            ),
        };
        match partition.poll(from, count) {
            Ok(polled) => {
                let messages = decode(&polled.batches)?;
                if let (Some(start), Some(first)) = (expect_start, messages.first()) {
                    if first.offset != start && !model.damaged(&self.disk) {
                        return Err(violation(INV_PREFIX, format!("partition {p}: poll {from:?} started at offset {}, expected {start}", first.offset)));
                    }
                }
                if expect_start.is_some() && messages.is_empty() && !model.damaged(&self.disk) {
                    return Err(violation(
                        INV_NO_LOSS,
                        format!(
                            "partition {p}: poll {from:?} returned nothing below the end {next}"
                        ),
                    ));
                }
                self.trace.event(format!(
                    "p{p} poll {from:?} x{count} -> {} messages",
                    messages.len()
                ));
                model.check_messages(p, &messages, &self.sent)?;
            }
            Err(PartitionError::OffsetDamaged { .. }) => {
                if !model.offset_damage_allowed(&self.disk) {
                    return Err(violation(
                        INV_OFFSETS,
                        format!("partition {p}: damaged offset reported with no fault behind it"),
                    ));
                }
            }
            Err(e) => self.trace.event(format!("p{p} poll failed: {e}")),
        }
        Ok(())
    }

    /// Reads the whole partition back and checks it against the oracle.
    fn verify_log(&mut self, p: usize, after_restart: bool) -> Checked<()> {
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
            let messages = decode(&polled.batches)?;
            if messages.is_empty() {
                break;
            }
            next = messages.last().expect("non-empty").offset + 1;
            all.extend(messages);
        }
        let end = next;
        let lie_on_record = model.superblock_lied(&self.disk);
        let damaged = model.damaged(&self.disk);
        self.trace
            .event(format!("p{p} verify: {} messages, end {end}", all.len()));
        model.check_full(p, &all, &self.sent, after_restart, lie_on_record, damaged)?;
        Ok(())
    }

    /// Takes the node down (process crash or power loss, plus faults that strike while it is
    /// down) and boots it again; a crash may also strike inside recovery, after which the node
    /// goes down and recovers once more (recovery must be idempotent under crashes).
    fn restart(&mut self, power: bool) -> Checked<()> {
        self.report.restarts += 1;
        self.take_down(power);
        if self.chance(self.profile.bit_flip) {
            if let Some((path, at)) = self.disk.flip_random_bit(Path::new(DATA_ROOT)) {
                self.trace
                    .event(format!("fault bit flip {} at {at}", path.display()));
            }
        }
        if self.chance(self.profile.read_error) {
            if let Some((path, at)) = self.disk.add_bad_sector(Path::new(DATA_ROOT)) {
                self.trace
                    .event(format!("fault bad sector {} at {at}", path.display()));
            }
        }
        for attempt in 0..=MAX_CRASHES_IN_RECOVERY {
            let armed = attempt < MAX_CRASHES_IN_RECOVERY
                && self.chance(self.profile.mid_operation_crash.map(|p| p * 0.3));
            if armed {
                let n = self.rng.gen_range(0..16);
                self.disk.arm_crash(n);
                self.trace.event(format!(
                    "fault crash armed inside recovery at mutating call +{n}"
                ));
            }
            for p in 0..self.models.len() {
                if self.models[p].fenced.is_none() {
                    self.recover(p)?;
                }
            }
            self.disk.disarm_crash();
            if !self.disk.is_crashed() {
                return Ok(());
            }
            self.trace.event("fault crash inside recovery");
            self.report.crashes_in_recovery += 1;
            let power = self.profile.power_loss.is_some() && self.rng.gen_bool(0.5);
            self.take_down(power);
        }
        unreachable!("the last attempt arms no crash")
    }

    fn take_down(&mut self, power: bool) {
        for model in &mut self.models {
            model.partition = None;
        }
        if power {
            self.disk.power_loss();
            self.trace.event("fault power loss");
        } else {
            self.disk.process_crash();
            self.trace.event("fault process crash");
        }
    }

    fn recover(&mut self, p: usize) -> Checked<()> {
        let dir = self.models[p].dir.clone();
        let config = self.models[p].config;
        // What the disk promised durable, before recovery touches anything.
        let promised: BTreeMap<PathBuf, u64> = self
            .disk
            .read_dir(&dir)
            .map(|entries| {
                entries
                    .into_iter()
                    .filter(|e| e.name.ends_with(".log"))
                    .map(|e| {
                        let path = dir.join(&e.name);
                        let len = self.disk.promised_len(&path);
                        (path, len)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let damage: BTreeSet<PathBuf> = self
            .disk
            .records()
            .into_iter()
            .filter(|r| r.kind.damages_durable_data())
            .filter_map(|r| r.path)
            .filter(|path| path.starts_with(&dir))
            .collect();
        let faults_before = self.disk.record_count();
        let opened = Partition::open(&self.env, &dir, 0, config, PartitionSettings::default());
        let opened = match opened {
            Ok(opened) => opened,
            Err(e) => {
                // Recovery could not complete: the boot is retried later. Only an injected
                // fault may cause that (an I/O error while it ran, or damage it must read).
                let injected_now =
                    self.disk.record_count() > faults_before || self.disk.is_crashed();
                if !injected_now && damage.is_empty() {
                    return Err(violation(
                        INV_JUSTIFIED,
                        format!("partition {p}: recovery failed with no fault behind it: {e}"),
                    ));
                }
                self.trace
                    .event(format!("p{p} recovery failed, boot retried later: {e}"));
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
        for action in &opened.plan.actions {
            self.trace.event(format!("p{p} recovery: {action}"));
            match action {
                Action::Truncate { path, from, .. } => {
                    let promised_len = promised.get(path).copied().unwrap_or(0);
                    if *from < promised_len && !damage.contains(path) {
                        return Err(violation(INV_JUSTIFIED, format!("partition {p}: recovery truncated {} to {from}, below the {promised_len} bytes the disk made durable, with no fault behind it", path.display())));
                    }
                }
                Action::RemoveSegment { log_path, .. } => {
                    let promised_len = promised.get(log_path).copied().unwrap_or(0);
                    if promised_len > 0 && !damage.contains(log_path) {
                        return Err(violation(INV_JUSTIFIED, format!("partition {p}: recovery removed {} holding {promised_len} durable bytes", log_path.display())));
                    }
                }
                _ => {}
            }
        }
        if let Some(reason) = opened.partition.fence_reason() {
            self.trace.event(format!("p{p} recovery: FENCED {reason}"));
            if damage.is_empty() {
                return Err(violation(INV_JUSTIFIED, format!("partition {p}: fenced with no injected corruption or lie behind it: {reason}")));
            }
            self.models[p].fenced = Some(reason.to_string());
            return Ok(());
        }
        self.models[p].partition = Some(opened.partition);
        self.verify_log(p, true)?;
        let disk = self.disk.clone();
        self.models[p].check_offsets(p, &disk)
    }

    fn liveness(&mut self) -> Checked<()> {
        for p in 0..self.models.len() {
            if self.models[p].fenced.is_some() {
                continue;
            }
            if self.models[p].partition.is_none() {
                return Err(violation(
                    INV_LIVENESS,
                    format!("partition {p}: recovery does not complete after faults healed"),
                ));
            }
            for round in 0..LIVENESS_ROUNDS {
                let (batch, ids) = self.new_batch();
                let partition = self.models[p].partition.as_mut().expect("open");
                let result = partition
                    .append_group(vec![batch])
                    .pop()
                    .expect("one result");
                match result {
                    Ok(ack) => {
                        self.report.acked_messages += u64::from(ack.message_count);
                        self.models[p].acked(ack.base_offset, &ids, ack.durable)?;
                        let polled = self.models[p]
                            .partition
                            .as_mut()
                            .expect("open")
                            .poll(PollFrom::Offset(ack.base_offset), 8);
                        match polled {
                            Ok(polled) if !polled.batches.is_empty() => {}
                            other => return Err(violation(INV_LIVENESS, format!("partition {p}: round {round}: acked offset {} not readable after faults healed: {other:?}", ack.base_offset))),
                        }
                    }
                    Err(e) => {
                        return Err(violation(
                            INV_LIVENESS,
                            format!(
                            "partition {p}: round {round}: append failed after faults healed: {e}"
                        ),
                        ))
                    }
                }
            }
            self.trace
                .event(format!("p{p} liveness: {LIVENESS_ROUNDS} rounds ok"));
        }
        Ok(())
    }
}

/// Decodes reply batches into (offset, id, payload, headers, batch timestamp).
pub(crate) fn decode(batches: &[bytes::Bytes]) -> Checked<Vec<ReadMessage>> {
    let mut out = Vec::new();
    for batch in batches {
        let header = BatchHeader::decode(batch).map_err(|e| {
            violation(
                INV_EXACT,
                format!("a poll returned an undecodable batch: {e}"),
            )
        })?;
        cairn_engine::format::verify_batch(
            batch,
            &Default::default(),
            cairn_engine::format::Layout::Sliced,
        )
        .map_err(|e| {
            violation(
                INV_EXACT,
                format!("a poll returned a batch that does not verify: {e}"),
            )
        })?;
        for m in MessageIter::new(batch, header.base_offset) {
            out.push(ReadMessage {
                offset: m.offset,
                id: m.header.id,
                payload: m.payload.to_vec(),
                headers: m.user_headers.to_vec(),
                timestamp: header.base_timestamp,
            });
        }
    }
    Ok(out)
}

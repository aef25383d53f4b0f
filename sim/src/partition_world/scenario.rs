//! Directed scenarios: a world whose faults are all scripted, for reaching each recovery
//! rule on purpose rather than by luck. A scenario drives the same [`World`] as a swarm run
//! (the same operations, restarts, recovery and oracle checks), with the disk's random
//! faults off; the test schedules faults on the [`SimDisk`] (a lie on the next sync, a
//! crash at the next write of a file, the fate of every unsynced page at a power loss, a bit
//! flipped at a position) and asserts which decision recovery took. The oracle's checks run
//! throughout, so a decision the faults do not justify fails the scenario too.

use super::run::world_for;
use super::World;
use crate::profile::{Class, PartitionProfile, Profile};
use crate::report::{Checked, Violation};
use cairn_engine::config::{Durability, PartitionSettings, TopicConfig};
use cairn_engine::partition::recovery::Action;
use cairn_engine::partition::{FenceReason, PollFrom};
use cairn_faults::{DiskFaults, Fates, SimDisk};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// Most steps a scripted loop of a directed scenario may take.
pub const MAX_SCRIPT_STEPS: usize = 2_000;

/// A scripted world.
pub struct Scenario {
    world: Arc<Mutex<World>>,
    _executor: crate::executor::Executor,
    /// Decision names of every recovery so far, in order.
    decisions_seen: usize,
}

/// A partition for a scenario: the topic options and settings.
pub fn topic(durability: Durability) -> PartitionProfile {
    PartitionProfile {
        config: TopicConfig {
            durability,
            consumer_offset_durability: durability,
            messages_required_to_save: 1,
            size_of_messages_required_to_save: 512,
            segment_size: 1024 * 1024,
            preallocate_segments: false,
        },
        settings: PartitionSettings::default(),
        lowered_limits: None,
    }
}

impl Scenario {
    /// A world with these partitions on a healthy disk.
    pub fn new(partitions: Vec<PartitionProfile>) -> Scenario {
        let seed = 0x5ce0_a210;
        let (world, executor) = world_for(seed, false);
        {
            let mut w = world.lock().expect("world");
            w.profile = quiet(seed, partitions);
            w.setup();
            w.disk.set_faults(DiskFaults::default());
        }
        Scenario {
            world,
            _executor: executor,
            decisions_seen: 0,
        }
    }

    /// Prints the trace as it goes (for debugging a scenario).
    pub fn verbose(self) -> Self {
        self.world().trace.set_verbose(true);
        self
    }

    pub fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().expect("world")
    }

    pub fn disk(&self) -> SimDisk {
        self.world().disk.clone()
    }

    /// The directory of partition `p`.
    pub fn dir(&self, p: usize) -> PathBuf {
        self.world().models[p].dir.clone()
    }

    /// The path of a file of partition `p`.
    pub fn file(&self, p: usize, name: &str) -> PathBuf {
        self.dir(p).join(name)
    }

    pub(super) fn checked(&self, result: Checked<()>) -> Result<(), Violation> {
        let mut w = self.world();
        if let Err(v) = result {
            w.fail(v);
        }
        match &w.violation {
            Some(v) => Err(v.clone()),
            None => Ok(()),
        }
    }

    /// Runs one workload operation on partition `p` (the oracle checks it).
    pub fn operate(
        &self,
        p: usize,
        op: impl FnOnce(&mut World, usize) -> Checked<()>,
    ) -> Result<(), Violation> {
        {
            let mut w = self.world();
            w.stop = None;
            w.operate(p, op);
        }
        self.checked(Ok(()))
    }

    /// `rounds` producer rounds on partition `p`.
    pub fn produce(&self, p: usize, rounds: usize) -> Result<(), Violation> {
        for _ in 0..rounds {
            self.operate(p, World::produce)?;
        }
        Ok(())
    }

    /// A full read of partition `p`, checked.
    pub fn verify(&self, p: usize) -> Result<(), Violation> {
        let result = self.world().verify(p, false);
        self.checked(result)
    }

    /// A process crash, then recovery of every partition and the oracle's checks.
    pub fn crash(&self) -> Result<(), Violation> {
        self.restart_with(None, |_| {})
    }

    /// A power loss where unsynced pages and directory changes land as `fates` say, then
    /// recovery and the checks.
    pub fn power_loss(&self, fates: Fates) -> Result<(), Violation> {
        self.restart_with(Some(fates), |_| {})
    }

    /// The node goes down (a power loss with `fates`, or a process crash), `while_down`
    /// strikes the disk (a bit flipped, a sector gone bad, a file an operator removed), then
    /// every partition recovers under the oracle's checks.
    pub fn restart_with(
        &self,
        power: Option<Fates>,
        while_down: impl FnOnce(&SimDisk),
    ) -> Result<(), Violation> {
        let result = {
            let mut w = self.world();
            w.report.restarts += 1;
            if let Some(fates) = power.clone() {
                w.disk.set_fates(fates);
            }
            w.take_down(power.is_some());
            w.disk.set_fates(Fates::Random);
            let disk = w.disk.clone();
            while_down(&disk);
            w.recover_all()
        };
        self.checked(result)
    }

    /// Up to `max` bytes per message payload from now on (rotation needs bulk).
    pub fn payload(&self, max: usize) {
        self.world().profile.max_payload = max;
    }

    /// Repeats `step` until `reached`, at most [`MAX_SCRIPT_STEPS`] times. A script that
    /// cannot get where it leads (the engine refused, fenced, or never met the scripted
    /// fault) is a failure of its own, never an endless loop.
    pub fn repeat_until(
        &self,
        goal: &str,
        mut reached: impl FnMut(&Self) -> bool,
        mut step: impl FnMut(&Self) -> Result<(), Violation>,
    ) -> Result<(), Violation> {
        for _ in 0..MAX_SCRIPT_STEPS {
            if reached(self) {
                return Ok(());
            }
            step(self)?;
        }
        Err(Violation {
            invariant: "a directed scenario reaches its scripted state",
            evidence: format!("{MAX_SCRIPT_STEPS} steps did not reach: {goal}"),
        })
    }

    /// Produces until partition `p` has more than `segments` segments.
    pub fn rotate_to(&self, p: usize, segments: usize) -> Result<(), Violation> {
        self.payload(64 * 1024);
        self.repeat_until(
            "a rotation",
            |s| s.segments(p) > segments,
            |s| s.produce(p, 1),
        )?;
        self.payload(512);
        Ok(())
    }

    /// The start offsets of partition `p`'s segments.
    pub fn segments(&self, p: usize) -> usize {
        let w = self.world();
        w.models[p]
            .partition
            .as_ref()
            .and_then(|pt| pt.segment_starts().ok())
            .map_or(0, |s| s.len())
    }

    /// The segment start offsets of partition `p`.
    pub fn segment_starts(&self, p: usize) -> Vec<u64> {
        let w = self.world();
        w.models[p]
            .partition
            .as_ref()
            .and_then(|pt| pt.segment_starts().ok())
            .unwrap_or_default()
    }

    /// The durable end partition `p`'s superblock records.
    pub fn durable(&self, p: usize) -> cairn_engine::partition::DurablePoint {
        let w = self.world();
        w.models[p]
            .partition
            .as_ref()
            .expect("open")
            .durable_point()
            .expect("open")
    }

    /// Every decision taken so far: recovery's, and fences at runtime.
    pub fn decision_log(&self) -> Vec<&'static str> {
        self.world().decision_log.clone()
    }

    /// The names of the decisions recovery took since the last call.
    pub fn new_decisions(&mut self) -> Vec<&'static str> {
        let w = self.world();
        let all = w.decision_log.clone();
        drop(w);
        let fresh = all[self.decisions_seen..].to_vec();
        self.decisions_seen = all.len();
        fresh
    }

    /// Why partition `p` is fenced, if it is.
    pub fn fence(&self, p: usize) -> Option<String> {
        self.world().models[p].fenced.clone()
    }

    /// The next offset partition `p` serves up to.
    pub fn visible(&self, p: usize) -> u64 {
        let w = self.world();
        w.models[p]
            .partition
            .as_ref()
            .and_then(|pt| pt.visible_next_offset().ok())
            .unwrap_or(0)
    }

    /// Polls partition `p` from `offset`, as an operation (a fence it causes is judged).
    pub fn poll(&self, p: usize, offset: u64) -> Result<(), Violation> {
        self.operate(p, move |w: &mut World, p| {
            let partition = w.models[p].partition.as_mut().expect("open");
            let _ = partition.poll(PollFrom::Offset(offset), 1000);
            Ok(())
        })
    }
}

/// A profile with every random fault off.
fn quiet(seed: u64, partitions: Vec<PartitionProfile>) -> Profile {
    let mut profile = Profile::from_seed(seed);
    profile.class = Class::Swarm;
    profile.partitions = partitions;
    profile.max_group = 2;
    profile.max_payload = 512;
    profile.persist_later = 0.0;
    profile.process_crash = None;
    profile.power_loss = None;
    profile.mid_operation_crash = None;
    profile.disk = DiskFaults::default();
    profile.bit_flip = None;
    profile.read_error = None;
    profile.clock_jump = None;
    profile.close_reopen = 0.0;
    profile.slot_crash = None;
    profile.slot_rot = None;
    profile.steps = u32::MAX;
    profile
}

/// Whether a recovery decision of this name was taken.
pub fn took(decisions: &[&'static str], name: &str) -> bool {
    assert!(
        FenceReason::NAMES.contains(&name) || Action::NAMES.contains(&name),
        "{name} is not a recovery decision"
    );
    decisions.contains(&name)
}

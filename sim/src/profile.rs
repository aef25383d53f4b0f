//! A run's profile: everything a seed decides before the first step (swarm testing: each
//! fault class switched on or off, each with its own intensity, and the workload's shape).
//!
//! A seed first draws a [`Class`]: most runs are plain swarm runs, and a share go to classes
//! that weight the rare two-fault combinations recovery's rules exist for (a lying superblock
//! sync with a power loss, an fsync error with a restart, a non-atomic device with persisted
//! topics, lying directory syncs with rotation, a full disk at rotation).

use cairn_engine::config::{Durability, PartitionSettings, TopicConfig};
use cairn_engine::format::Limits;
use cairn_faults::DiskFaults;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt;

/// What a run emphasises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Every fault class independently on or off.
    Swarm,
    /// Lying syncs (log and superblock) with power losses, persisted topics.
    LyingSuperblock,
    /// fsync errors with process crashes: the page cache keeps bytes the device lacks.
    FsyncError,
    /// A device that tears sectors non-atomically, with power losses.
    NonAtomic,
    /// Lying and failing directory syncs with rotation and power losses.
    DirectoryLies,
    /// A small disk filling up at rotation, with preallocation.
    FullDisk,
    /// Bit rot and bad sectors, with crashes inside recovery.
    Rot,
    /// A crash between a superblock write and its sync, a process restart, then a power loss
    /// before the next record: what recovery trusts must be made durable before it serves.
    SlotCrash,
}

impl Class {
    pub const ALL: [Class; 8] = [
        Class::Swarm,
        Class::LyingSuperblock,
        Class::FsyncError,
        Class::NonAtomic,
        Class::DirectoryLies,
        Class::FullDisk,
        Class::Rot,
        Class::SlotCrash,
    ];
}

/// One partition of the simulated node.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionProfile {
    pub config: TopicConfig,
    pub settings: PartitionSettings,
    /// Admission limits lowered at some restarts (stored batches must stay readable).
    pub lowered_limits: Option<Limits>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub seed: u64,
    /// What the run simulates: bare partitions, or a whole node.
    pub scope: Scope,
    pub class: Class,
    pub partitions: Vec<PartitionProfile>,
    /// Workload operations in the safety phase (all tasks together).
    pub steps: u32,
    /// Largest payload a message may carry.
    pub max_payload: usize,
    /// Most batches a producer round submits together (group commit).
    pub max_group: usize,
    /// Producers per partition (tasks on the executor).
    pub producers: usize,
    /// Longest pause of a task between two operations.
    pub max_think_nanos: u64,
    /// Latency range of every disk call, in nanoseconds (a fast SSD or a slow disk).
    pub disk_latency_nanos: (u64, u64),
    /// Probability that a produce appends now and persists later (persisted topics).
    pub persist_later: f64,
    /// Per-operation probabilities of the nemesis (`None` = off in this run).
    pub process_crash: Option<f64>,
    pub power_loss: Option<f64>,
    /// Probability that a crash is armed inside the next operations (a torn in-flight write).
    pub mid_operation_crash: Option<f64>,
    pub disk: DiskFaults,
    /// Per-restart probabilities of faults that strike while the node is down.
    pub bit_flip: Option<f64>,
    pub read_error: Option<f64>,
    /// Per-operation probability of a wall-clock jump.
    pub clock_jump: Option<f64>,
    /// Per-operation probability that a partition is closed gracefully and reopened.
    pub close_reopen: f64,
    /// Per-operation probability of a crash scripted on the next superblock write, followed
    /// by a process restart and then a power loss at the next operation.
    pub slot_crash: Option<f64>,
    /// Per-restart probability that both copies of one superblock slot's record rot.
    pub slot_rot: Option<f64>,
}

pub(crate) fn maybe(rng: &mut ChaCha8Rng, on: f64, low: f64, high: f64) -> Option<f64> {
    if rng.gen_bool(on) {
        Some(rng.gen_range(low..high))
    } else {
        None
    }
}

fn policy(rng: &mut ChaCha8Rng, persisted: f64) -> Durability {
    if rng.gen_bool(persisted) {
        Durability::Persisted
    } else {
        Durability::Replicated
    }
}

fn partition(rng: &mut ChaCha8Rng, class: Class) -> PartitionProfile {
    let persisted = match class {
        Class::LyingSuperblock | Class::NonAtomic | Class::SlotCrash => 0.8,
        _ => 0.5,
    };
    let config = TopicConfig {
        durability: policy(rng, persisted),
        consumer_offset_durability: policy(rng, 0.5),
        messages_required_to_save: [1, 4, 32, 1024][rng.gen_range(0..4)],
        size_of_messages_required_to_save: [512, 16 * 1024, 256 * 1024, 1024 * 1024]
            [rng.gen_range(0..4)],
        segment_size: 1024 * 1024,
        preallocate_segments: rng.gen_bool(if class == Class::FullDisk { 0.7 } else { 0.2 }),
    };
    let mut settings = PartitionSettings::default();
    if rng.gen_bool(0.1) {
        settings.validate_checksum = false;
    }
    if rng.gen_bool(0.1) {
        settings.max_journal_bytes = [16 * 1024, 128 * 1024][rng.gen_range(0..2)];
    }
    if rng.gen_bool(0.1) {
        settings.max_poll_bytes = [2 * 1024, 32 * 1024][rng.gen_range(0..2)];
    }
    let lowered_limits = rng.gen_bool(0.1).then(|| Limits {
        max_messages_per_batch: rng.gen_range(2..6),
        max_payload_bytes: [256, 4096][rng.gen_range(0..2)],
        ..Limits::default()
    });
    PartitionProfile {
        config,
        settings,
        lowered_limits,
    }
}

fn class_of(rng: &mut ChaCha8Rng) -> Class {
    if rng.gen_bool(0.6) {
        Class::Swarm
    } else {
        Class::ALL[rng.gen_range(1..Class::ALL.len())]
    }
}

fn disk_faults(rng: &mut ChaCha8Rng, class: Class) -> DiskFaults {
    let mut disk = DiskFaults {
        lying_sync: maybe(rng, 0.15, 0.002, 0.05),
        lying_dir_sync: maybe(rng, 0.08, 0.01, 0.2),
        write_error: maybe(rng, 0.12, 0.001, 0.02),
        sync_error: maybe(rng, 0.12, 0.001, 0.02),
        dir_sync_error: maybe(rng, 0.06, 0.005, 0.05),
        misdirected_write: maybe(rng, 0.1, 0.001, 0.01),
        capacity: rng.gen_bool(0.1).then(|| rng.gen_range(1..6) * 1024 * 1024),
        non_atomic: rng.gen_bool(0.05),
    };
    match class {
        Class::Swarm | Class::Rot => {}
        Class::LyingSuperblock | Class::SlotCrash => {
            disk.lying_sync = Some(rng.gen_range(0.05..0.3))
        }
        Class::FsyncError => disk.sync_error = Some(rng.gen_range(0.01..0.08)),
        Class::NonAtomic => disk.non_atomic = true,
        Class::DirectoryLies => {
            disk.lying_dir_sync = Some(rng.gen_range(0.2..0.8));
            disk.dir_sync_error = Some(rng.gen_range(0.01..0.05));
        }
        Class::FullDisk => disk.capacity = Some(rng.gen_range(2..5) * 1024 * 1024),
    }
    disk
}

/// What a run simulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Bare partitions under the full disk fault model (the engine's recovery).
    Partitions,
    /// A whole node: metadata plane, entities, groups, retention
    /// ([`crate::node_world`]).
    Node,
    /// The server (listener, connections, sessions) and the node, reached by protocol
    /// clients over the simulated network ([`crate::server_world`]).
    Server,
    /// The metadata consensus group of 3 or 5 replicas ([`crate::cluster_world`]).
    Cluster,
}

impl Scope {
    /// One seed in five simulates a node; of the rest, one in four the server, and of the
    /// rest one in eight the cluster. Each drawn from its own hash of the seed, so adding a
    /// scope changed no other scope's profile (corpus seeds found in the partition scope
    /// whose draw became another's pin their scope in their file).
    pub fn of(seed: u64) -> Scope {
        if xxhash::xxh3::xxh3_64(&seed.to_le_bytes()).is_multiple_of(5) {
            return Scope::Node;
        }
        match xxhash::xxh3::xxh3_64(&(seed ^ 0x5e4e_e45c_09e0).to_le_bytes()) % 4 {
            0 => Scope::Server,
            // One partitions seed in eight simulates the cluster instead: the node and
            // server draws stay what they were.
            _ if xxhash::xxh3::xxh3_64(&(seed ^ 0xc1a5_7e70).to_le_bytes()).is_multiple_of(8) => {
                Scope::Cluster
            }
            _ => Scope::Partitions,
        }
    }

    /// The name `--scope` takes and seed files pin.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Partitions => "partitions",
            Scope::Node => "node",
            Scope::Server => "server",
            Scope::Cluster => "cluster",
        }
    }

    pub fn parse(name: &str) -> Option<Scope> {
        [
            Scope::Partitions,
            Scope::Node,
            Scope::Server,
            Scope::Cluster,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }
}

impl Profile {
    pub fn from_seed(seed: u64) -> Profile {
        Profile::from_seed_in(seed, Scope::of(seed))
    }

    /// The profile of `seed` run in `scope`.
    pub fn from_seed_in(seed: u64, scope: Scope) -> Profile {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x005e_ed0f_ca12_u64);
        let class = class_of(&mut rng);
        let partition_count = rng.gen_range(1..=3);
        let partitions = (0..partition_count)
            .map(|_| partition(&mut rng, class))
            .collect();
        let disk = disk_faults(&mut rng, class);
        let mut profile = Profile {
            seed,
            scope,
            class,
            partitions,
            steps: rng.gen_range(200..500),
            max_payload: [64, 1024, 16 * 1024, 64 * 1024][rng.gen_range(0..4)],
            max_group: rng.gen_range(1..=6),
            producers: rng.gen_range(1..=2),
            max_think_nanos: [5_000_000, 50_000_000, 500_000_000][rng.gen_range(0..3)],
            disk_latency_nanos: [(2_000, 50_000), (50_000, 2_000_000)][rng.gen_range(0..2)],
            persist_later: [0.0, 0.3][rng.gen_range(0..2)],
            process_crash: maybe(&mut rng, 0.6, 0.002, 0.03),
            power_loss: maybe(&mut rng, 0.6, 0.002, 0.03),
            mid_operation_crash: maybe(&mut rng, 0.4, 0.2, 0.8),
            disk,
            bit_flip: maybe(&mut rng, 0.2, 0.1, 0.6),
            read_error: maybe(&mut rng, 0.15, 0.1, 0.5),
            clock_jump: maybe(&mut rng, 0.25, 0.005, 0.05),
            close_reopen: [0.0, 0.01][rng.gen_range(0..2)],
            slot_crash: None,
            slot_rot: maybe(&mut rng, 0.05, 0.05, 0.2),
        };
        profile.emphasise(&mut rng);
        profile
    }

    /// Makes the class's second fault certain.
    fn emphasise(&mut self, rng: &mut ChaCha8Rng) {
        match self.class {
            Class::Swarm => {}
            Class::LyingSuperblock | Class::NonAtomic | Class::DirectoryLies => {
                self.power_loss = Some(rng.gen_range(0.01..0.04))
            }
            Class::FsyncError => self.process_crash = Some(rng.gen_range(0.005..0.03)),
            Class::SlotCrash => {
                self.slot_crash = Some(rng.gen_range(0.01..0.05));
                self.power_loss = Some(rng.gen_range(0.002..0.01));
            }
            Class::FullDisk => self.max_payload = 64 * 1024,
            Class::Rot => {
                self.slot_rot = Some(rng.gen_range(0.1..0.4));
                self.bit_flip = Some(rng.gen_range(0.3..0.8));
                self.read_error = Some(rng.gen_range(0.3..0.8));
                self.mid_operation_crash = Some(rng.gen_range(0.4..0.9));
                self.process_crash = Some(rng.gen_range(0.005..0.03));
            }
        }
    }
}

fn show(p: Option<f64>) -> String {
    p.map_or_else(|| "off".to_string(), |p| format!("{p:.3}"))
}

/// The partition scope's profile (the node and server worlds draw their own:
/// [`crate::run::describe`]).
impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {:#x} class {:?}", self.seed, self.class)?;
        for (i, p) in self.partitions.iter().enumerate() {
            let c = &p.config;
            writeln!(
                f,
                "  partition {i}: durability={} offsets={} messages_required_to_save={} size_required_to_save={} segment_size={} preallocate={} validate_checksum={} max_journal_bytes={} max_poll_bytes={} lowered_limits={:?}",
                c.durability, c.consumer_offset_durability, c.messages_required_to_save,
                c.size_of_messages_required_to_save, c.segment_size, c.preallocate_segments,
                p.settings.validate_checksum, p.settings.max_journal_bytes, p.settings.max_poll_bytes,
                p.lowered_limits.map(|l| (l.max_messages_per_batch, l.max_payload_bytes))
            )?;
        }
        writeln!(
            f,
            "  workload: steps={} max_payload={} max_group={} producers={} persist_later={} close_reopen={}",
            self.steps, self.max_payload, self.max_group, self.producers, self.persist_later,
            self.close_reopen
        )?;
        let d = &self.disk;
        writeln!(
            f,
            "  faults: slot_crash={} process_crash={} power_loss={} mid_operation_crash={} lying_sync={} lying_dir_sync={} write_error={} sync_error={} dir_sync_error={} misdirected_write={} capacity={} non_atomic={} bit_flip={} read_error={} clock_jump={}",
            show(self.slot_crash), show(self.process_crash), show(self.power_loss), show(self.mid_operation_crash),
            show(d.lying_sync), show(d.lying_dir_sync), show(d.write_error), show(d.sync_error),
            show(d.dir_sync_error), show(d.misdirected_write),
            d.capacity.map_or("off".into(), |c| c.to_string()), d.non_atomic,
            show(self.bit_flip), show(self.read_error), show(self.clock_jump)
        )?;
        writeln!(f, "  slot_rot={}", show(self.slot_rot))
    }
}

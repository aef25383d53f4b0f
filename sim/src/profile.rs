//! A run's profile: everything a seed decides before the first step (swarm testing: each
//! fault class switched on or off, each with its own intensity, and the workload's shape).

use cairn_engine::config::{Durability, TopicConfig};
use cairn_faults::DiskFaults;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub seed: u64,
    /// Topic options of each partition (one node holds them all).
    pub partitions: Vec<TopicConfig>,
    /// Workload steps in the safety phase.
    pub steps: u32,
    /// Largest payload a message may carry.
    pub max_payload: usize,
    /// Most batches a producer round submits together (group commit).
    pub max_group: usize,
    /// Longest pause between two workload steps (the request rate of this run).
    pub max_think_nanos: u64,
    /// Latency range of every disk call, in nanoseconds (a fast SSD or a slow disk).
    pub disk_latency_nanos: (u64, u64),
    /// Per-step probabilities (`None` = the fault class is off in this run).
    pub process_crash: Option<f64>,
    pub power_loss: Option<f64>,
    /// Probability that a crash is armed inside the next operations (a torn in-flight write).
    pub mid_operation_crash: Option<f64>,
    pub disk: DiskFaults,
    /// Per-restart probabilities.
    pub bit_flip: Option<f64>,
    pub read_error: Option<f64>,
    /// Per-step probability of a wall-clock jump.
    pub clock_jump: Option<f64>,
}

fn maybe(rng: &mut ChaCha8Rng, on: f64, low: f64, high: f64) -> Option<f64> {
    if rng.gen_bool(on) {
        Some(rng.gen_range(low..high))
    } else {
        None
    }
}

impl Profile {
    pub fn from_seed(seed: u64) -> Profile {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x005e_ed0f_ca12_u64);
        let partition_count = rng.gen_range(1..=3);
        let partitions = (0..partition_count)
            .map(|_| TopicConfig {
                durability: if rng.gen_bool(0.5) {
                    Durability::Persisted
                } else {
                    Durability::Replicated
                },
                consumer_offset_durability: if rng.gen_bool(0.5) {
                    Durability::Persisted
                } else {
                    Durability::Replicated
                },
                messages_required_to_save: [1, 4, 32, 1024][rng.gen_range(0..4)],
                size_of_messages_required_to_save: [512, 16 * 1024, 256 * 1024, 1024 * 1024]
                    [rng.gen_range(0..4)],
                segment_size: 1024 * 1024,
                preallocate_segments: rng.gen_bool(0.2),
            })
            .collect();
        let disk = DiskFaults {
            lying_sync: maybe(&mut rng, 0.15, 0.002, 0.05),
            write_error: maybe(&mut rng, 0.15, 0.001, 0.02),
            sync_error: maybe(&mut rng, 0.15, 0.001, 0.02),
            misdirected_write: maybe(&mut rng, 0.1, 0.001, 0.01),
            capacity: if rng.gen_bool(0.15) {
                Some(rng.gen_range(1..6) * 1024 * 1024)
            } else {
                None
            },
        };
        Profile {
            seed,
            partitions,
            steps: rng.gen_range(150..400),
            max_payload: [64, 1024, 16 * 1024, 64 * 1024][rng.gen_range(0..4)],
            max_group: rng.gen_range(1..=6),
            max_think_nanos: [5_000_000, 50_000_000, 500_000_000][rng.gen_range(0..3)],
            disk_latency_nanos: [(2_000, 50_000), (50_000, 2_000_000)][rng.gen_range(0..2)],
            process_crash: maybe(&mut rng, 0.6, 0.002, 0.03),
            power_loss: maybe(&mut rng, 0.6, 0.002, 0.03),
            mid_operation_crash: maybe(&mut rng, 0.4, 0.2, 0.8),
            disk,
            bit_flip: maybe(&mut rng, 0.2, 0.1, 0.6),
            read_error: maybe(&mut rng, 0.15, 0.1, 0.5),
            clock_jump: maybe(&mut rng, 0.25, 0.005, 0.05),
        }
    }
}

fn show(p: Option<f64>) -> String {
    p.map_or_else(|| "off".to_string(), |p| format!("{p:.3}"))
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {:#x}", self.seed)?;
        for (i, c) in self.partitions.iter().enumerate() {
            writeln!(
                f,
                "  partition {i}: durability={} offsets={} messages_required_to_save={} size_required_to_save={} segment_size={} preallocate={}",
                c.durability, c.consumer_offset_durability, c.messages_required_to_save,
                c.size_of_messages_required_to_save, c.segment_size, c.preallocate_segments
            )?;
        }
        writeln!(
            f,
            "  workload: steps={} max_payload={} max_group={}",
            self.steps, self.max_payload, self.max_group
        )?;
        writeln!(
            f,
            "  faults: process_crash={} power_loss={} mid_operation_crash={} lying_sync={} write_error={} sync_error={} misdirected_write={} capacity={} bit_flip={} read_error={} clock_jump={}",
            show(self.process_crash), show(self.power_loss), show(self.mid_operation_crash),
            show(self.disk.lying_sync), show(self.disk.write_error), show(self.disk.sync_error),
            show(self.disk.misdirected_write),
            self.disk.capacity.map_or("off".into(), |c| c.to_string()),
            show(self.bit_flip), show(self.read_error), show(self.clock_jump)
        )
    }
}

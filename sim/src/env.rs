//! The simulated machine of a seed, shared by the worlds: its clock, disk, executor and
//! network, each seeded apart from the seed; the engine's seeded entropy; and the node's
//! [`Env`] built from them (the server world builds its own from the same `Machine`).

use crate::executor::Executor;
use crate::profile::Profile;
use cairn_engine::env::{Entropy, Env};
use cairn_faults::{NetFaults, SimClock, SimDisk, SimNet};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::{Arc, Mutex};

/// Polls of the executor one epoch may take (far more than any epoch needs).
pub const MAX_EPOCH_POLLS: u64 = 2_000_000;

/// The simulated node's address.
pub const NODE_IP: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));

/// Seeded entropy for the engine.
pub(crate) struct SimEntropy(pub(crate) Mutex<ChaCha8Rng>);

impl Entropy for SimEntropy {
    fn next_u64(&self) -> u64 {
        self.0.lock().expect("entropy").gen()
    }
}

/// The engine's entropy, seeded with `seed`.
pub(crate) fn entropy(seed: u64) -> Arc<SimEntropy> {
    Arc::new(SimEntropy(Mutex::new(ChaCha8Rng::seed_from_u64(seed))))
}

/// The simulated machine of a seed: one clock, and the disk, executor and network on it.
pub(crate) struct Machine {
    pub(crate) clock: SimClock,
    pub(crate) disk: SimDisk,
    pub(crate) executor: Executor,
    pub(crate) net: SimNet,
}

impl Machine {
    /// The machine of `seed`: the disk without faults and without latency (each world sets
    /// its own), the executor, and a network without faults.
    pub(crate) fn new(seed: u64) -> Machine {
        let clock = SimClock::new();
        let disk = SimDisk::new(seed ^ 0xd15c, Default::default());
        let executor = Executor::new(seed ^ 0xe8ec, clock.clone());
        let net = SimNet::new(seed ^ 0x4e7, clock.clone(), NetFaults::default());
        Machine {
            clock,
            disk,
            executor,
            net,
        }
    }

    /// The engine's entropy on this machine.
    pub(crate) fn entropy(seed: u64) -> Arc<SimEntropy> {
        entropy(seed ^ 0xe27)
    }
}

/// The simulated disk, clock, executor and `Env` of `seed`: the partition and node worlds'
/// machine (every disk call costs virtual time the caller waits).
pub(crate) fn sim_env(seed: u64, profile: &Profile) -> (SimDisk, SimClock, Executor, Env) {
    let Machine {
        clock,
        disk,
        executor,
        net,
    } = Machine::new(seed);
    disk.set_latency(
        clock.clone(),
        profile.disk_latency_nanos.0,
        profile.disk_latency_nanos.1,
    );
    let env = Env {
        disk: crate::canary::disk::machine_disk(crate::canary::active(), Arc::new(disk.clone())),
        clock: Arc::new(clock.clone()),
        // The node's network; the workload drives the engine directly until the server exists.
        net: Arc::new(net.host(NODE_IP)),
        tasks: Arc::new(executor.handle()),
        entropy: Machine::entropy(seed),
    };
    (disk, clock, executor, env)
}

//! What a seed draws for the cluster world ([`ClusterProfile`]).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What a seed draws for the cluster world.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterProfile {
    pub replicas: usize,
    /// Streams the client creates (each acknowledged, or in doubt and resolved).
    pub ops: usize,
    /// Per nemesis step: a replica crashes (if a minority stays down at most).
    pub crash: f64,
    /// Of crashes, the share that are power losses.
    pub power_loss: f64,
    /// Per nemesis step: two hosts are partitioned.
    pub partition: f64,
    /// Per nemesis step: a replica is power-cycled (down and straight back up).
    pub bounce: f64,
    /// Per nemesis step: everything heals and every down replica restarts.
    pub heal: f64,
    /// Of crashes, the share aimed at the leader.
    pub crash_leader: f64,
    /// The nemesis wakes every 1 ms to this many ms (uniformly), during proposals too.
    pub nemesis_gap_ms: u64,
    /// Entries between snapshots (small, so snapshots, purges and snapshot installs happen).
    pub snapshot_every: u64,
    /// Per nemesis step: a replica comes back blank (if a minority stays down at most).
    pub blank: f64,
    /// Of blank replicas, the share that lost only their state record (the rest, the disk).
    pub state_lost: f64,
    /// Per nemesis step: the leader stops gracefully (hands over, then goes down).
    pub graceful: f64,
    /// Per nemesis step: every replica loses power at once.
    pub total_power_loss: f64,
    /// The share of replicas whose clock runs fast or slow (up to 10%) with a wall clock
    /// off by up to 5 s.
    pub clock_skew: f64,
    /// Each replica's commands are applied by a node booted on its disk, as in a server
    /// (`MetaMachine::with_node`); otherwise the machine keeps the state in memory (the
    /// only way a snapshot is installed today).
    pub nodes: bool,
    /// Per client op: the administrator removes a member that counts (the leader's too:
    /// it hands over first), while no more than a minority counts out with it; it is added
    /// back a while later.
    pub remove: f64,
    /// With `nodes`: each member's node runs its replicas of the partitions' groups
    /// ([`messages`]), and the client sends and polls messages through them.
    pub messages: bool,
    /// The replication factor the client's topics ask for: 0 (none named: every member
    /// keeps a copy) or 3 (`cairn_cluster::partition::placement`: of 5 members, 3 keep
    /// each partition; never with `blank`). Never 2: one lost disk of two is no majority.
    pub factor: u8,
}

impl ClusterProfile {
    pub fn from_seed(seed: u64) -> ClusterProfile {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xc1a5);
        ClusterProfile {
            replicas: if rng.gen_bool(0.7) { 3 } else { 5 },
            ops: rng.gen_range(30..150),
            crash: rng.gen_range(0.0..0.5),
            power_loss: rng.gen_range(0.0..1.0),
            partition: rng.gen_range(0.0..0.4),
            bounce: rng.gen_range(0.0..0.3),
            heal: rng.gen_range(0.05..0.4),
            crash_leader: rng.gen_range(0.0..1.0),
            nemesis_gap_ms: rng.gen_range(5..200),
            snapshot_every: rng.gen_range(4..64),
            blank: if rng.gen_bool(0.5) {
                rng.gen_range(0.0..0.1)
            } else {
                0.0
            },
            state_lost: rng.gen_range(0.0..1.0),
            graceful: rng.gen_range(0.0..0.2),
            total_power_loss: rng.gen_range(0.0..0.03),
            clock_skew: if rng.gen_bool(0.3) {
                rng.gen_range(0.2..1.0)
            } else {
                0.0
            },
            // Drawn last: the draws above stay what they were for every seed.
            nodes: rng.gen_bool(0.5),
            remove: if rng.gen_bool(0.5) {
                rng.gen_range(0.0..0.08)
            } else {
                0.0
            },
            messages: rng.gen_bool(0.5),
            factor: if rng.gen_bool(0.8) { 3 } else { 0 },
        }
        .messages_with_nodes()
    }

    /// Messages run through nodes only.
    fn messages_with_nodes(mut self) -> Self {
        self.messages &= self.nodes;
        self
    }

    /// The client's ops: `ops`, or half as many (at least 30) where messages run: every
    /// partition's group costs its heartbeats for the whole run, so a long run of many
    /// topics is slow to simulate.
    pub fn ops_to_run(&self) -> usize {
        match self.messages {
            true => (self.ops / 2).max(30),
            false => self.ops,
        }
    }
}

//! The cluster world: the metadata consensus group (`cairn_cluster::group`) of 3 or 5
//! replicas, each with its own simulated disk, host on the simulated network and task group
//! on the seeded executor, driven by a client that proposes metadata operations to whoever
//! leads, while a nemesis crashes replicas (a process crash, or a power loss that takes the
//! unsynced page cache and the host's connections), partitions pairs of hosts, replaces a
//! replica's disk with a blank one or takes its state record (its vote) away, and heals.
//! A replica that comes back blank is a new Raft node; an administrator (the director,
//! between proposals) replaces the old one with it ([`MemberChange::Add`]).
//!
//! Judged:
//! - **agreement**: every replica that applies an entry at an index applies the same entry
//!   there (an observer on each replica's state machine, checked as it applies);
//! - **no acknowledged op lost**: once every replica is up and the network healed, each
//!   replica's state holds every stream whose creation was acknowledged, and only streams
//!   the client asked for;
//! - **convergence**: the replicas then hold equal states at the same applied index;
//! - **liveness**: with a majority up and connected, proposals keep being acknowledged; the
//!   run fails if the final round cannot get one through within its virtual deadline.
//!
//! Only a minority is ever down at once (a blank replica not yet added counts as down), so
//! every seed must make progress.

pub mod directed;

use crate::executor::{Executor, ExecutorHandle};
use crate::report::Violation;
use cairn_cluster::group::{GroupConfig, MemberChange, MetaGroup, ProposeError};
use cairn_cluster::types::{show_id, Entry, MemberId, MetaCommand, MetaOutcome, NodeId, Peer};
use cairn_engine::env::Env;
use cairn_engine::state::ops::MetaOp;
use cairn_faults::{NetFaults, SimClock, SimDisk, SimNet};
use iggy_binary_protocol::requests::streams::CreateStreamRequest;
use iggy_binary_protocol::{WireName, WireOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The director's task group; replica `i`'s is `NODE_GROUP_BASE + i`.
const DIRECTOR_GROUP: u32 = 900;
const NODE_GROUP_BASE: u32 = 1000;
/// Polls the whole run may take.
const MAX_POLLS: u64 = 20_000_000;
/// How long one proposal may take before the client counts it in doubt.
const PROPOSE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one membership change may take before the administrator tries again.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the final round (all up, healed) has to get a proposal through.
const FINAL_DEADLINE: Duration = Duration::from_secs(30);
const CLUSTER_ID: u128 = 0xc1a5_7e70_0000_0000_0000_0000_0000_0001;

pub const INV_AGREEMENT: &str = "replicas agree on every applied entry";
pub const INV_ACKED_PRESENT: &str = "an acknowledged metadata op is never lost";
pub const INV_CONVERGED: &str = "replicas converge to one state";
/// Liveness: a healed cluster with every replica up makes progress.
pub use crate::report::INV_LIVENESS;
pub const INV_BOOT: &str = "a replica whose disk took no damage boots";
pub const INV_UNASKED: &str = "a replica holds only what clients asked for";

/// The cluster scope's coverage rows: decision name, and what reaching it means.
pub const CLUSTER_COVERAGE: [(&str, &str); 11] = [
    (
        "ClusterDiskReplaced",
        "a replica's disk was replaced by a blank one and it came back as a new replica",
    ),
    (
        "ClusterStateLost",
        "a replica lost its state record (its vote) and came back as a new replica, its files set aside",
    ),
    (
        "ClusterReplicaReplaced",
        "an administrator replaced a blank replica's old incarnation with it (a learner caught up, then a voter)",
    ),
    (
        "ClusterCrashInIo",
        "a replica crashed inside a disk call (a write landed in part)",
    ),
    (
        "ClusterLeaderChanged",
        "a second leader was elected after the first (a new term)",
    ),
    (
        "ClusterProcessCrash",
        "a replica's process crashed under proposals",
    ),
    (
        "ClusterPowerLoss",
        "a replica lost power (its unsynced pages and connections)",
    ),
    ("ClusterPartition", "two replicas' hosts were partitioned"),
    (
        "ClusterInDoubtResolved",
        "a proposal in doubt was resolved by its retry (found applied, or applied once)",
    ),
    (
        "ClusterSnapshotInstalled",
        "a replica behind the leader's log caught up by installing its snapshot",
    ),
    (
        "ClusterBootFromSnapshot",
        "a replica restarted from its snapshot and the log after it (its log's head purged)",
    ),
];

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
        }
    }
}

/// How a cluster seed ended.
#[derive(Debug, Clone)]
pub struct ClusterReport {
    pub seed: u64,
    pub profile: ClusterProfile,
    pub violation: Option<Violation>,
    /// Everything that happened, in order: two runs of a seed match line for line.
    pub events: Vec<String>,
    pub acknowledged: usize,
    pub crashes: usize,
    pub elections: usize,
    /// Coverage rows reached, by name ([`CLUSTER_COVERAGE`]).
    pub decisions: BTreeMap<&'static str, usize>,
    pub simulated_nanos: u64,
}

impl ClusterReport {
    /// A hash of the run's events: equal for two runs of the same seed.
    pub fn trace_hash(&self) -> u64 {
        xxhash::xxh3::xxh3_64(self.events.join("\n").as_bytes())
    }
}

/// One replica's machine: its disk and host survive its crashes.
struct Replica {
    id: MemberId,
    disk: SimDisk,
    /// Disks this replica had (a replaced disk is a new one, with its own seed).
    disks: u64,
    ip: IpAddr,
    env: Env,
    /// The Raft id of this member's storage, once started.
    incarnation: Option<NodeId>,
    /// Whether the group counts this replica's incarnation (false from a blank start until
    /// an administrator replaced the old one with it).
    joined: bool,
    group: Option<Arc<MetaGroup>>,
    /// The starts of this replica so far (each start is a new process).
    starts: u32,
    /// A crash is armed on its disk: it strikes inside a disk call (a write lands in part),
    /// and the nemesis then takes the process down.
    armed: bool,
}

struct Shared {
    events: Vec<String>,
    violation: Option<Violation>,
    /// index → (term, the entry's rendering), as the first replica applied it.
    applied: BTreeMap<u64, (u64, String)>,
}

impl Shared {
    fn fail(&mut self, invariant: &'static str, evidence: String) {
        if self.violation.is_none() {
            self.events
                .push(format!("VIOLATION {invariant}: {evidence}"));
            self.violation = Some(Violation {
                invariant,
                evidence,
            });
        }
    }
}

struct World {
    seed: u64,
    verbose: bool,
    profile: ClusterProfile,
    clock: SimClock,
    net: SimNet,
    executor: ExecutorHandle,
    replicas: Vec<Replica>,
    shared: Arc<Mutex<Shared>>,
    rng: ChaCha8Rng,
    acked: BTreeMap<String, u64>,
    in_doubt: BTreeSet<String>,
    crashes: usize,
    leaders_seen: BTreeSet<(NodeId, u64)>,
    /// The nemesis acts only while the client works (the final round is calm).
    nemesis_on: bool,
    /// When the nemesis acts next (virtual nanoseconds).
    next_nemesis: u64,
    decisions: BTreeMap<&'static str, usize>,
}

fn members(replicas: usize) -> BTreeMap<MemberId, Peer> {
    (1..=replicas as MemberId)
        .map(|id| {
            let ip = host(id);
            (
                id,
                Peer {
                    raft: SocketAddr::new(ip, 7000).to_string(),
                    client: SocketAddr::new(ip, 8090).to_string(),
                },
            )
        })
        .collect()
}

fn host(id: MemberId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, id as u8))
}

fn create_stream(name: &str) -> MetaCommand {
    let op = MetaOp::CreateStream(CreateStreamRequest {
        name: WireName::new(name).expect("a stream name"),
        options: WireOptions::empty(),
    });
    MetaCommand {
        operation: op.operation().to_command_code().expect("a command"),
        body: op.body().to_vec(),
        timestamp: 0,
        user_id: 0,
    }
}

/// Runs one cluster seed.
pub fn run(seed: u64, verbose: bool) -> ClusterReport {
    run_script(
        seed,
        verbose,
        ClusterProfile::from_seed(seed),
        Script::Swarm,
    )
}

/// What the director does with the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    /// The client's proposals under the nemesis, then the final judgement.
    Swarm,
    /// A directed scenario ([`directed`]).
    Directed(directed::Scenario),
}

/// What a run counted: (acknowledged ops, crashes, distinct leaders, coverage rows).
type Counts = (usize, usize, usize, BTreeMap<&'static str, usize>);

/// Runs `script` on a world of `profile`; a panic anywhere in it (openraft's own checks
/// included) is a violation of [`crate::report::INV_ASSERTION`], unless the oracle saw a
/// violation before it.
fn run_script(seed: u64, verbose: bool, profile: ClusterProfile, script: Script) -> ClusterReport {
    if verbose {
        println!("seed {seed} cluster {profile:?}");
    }
    let clock = SimClock::new();
    let mut executor = Executor::new(seed ^ 0xe8ec, clock.clone());
    let net = SimNet::new(seed ^ 0x4e7, clock.clone(), NetFaults::default());
    let shared = Arc::new(Mutex::new(Shared {
        events: vec![format!("profile {profile:?}")],
        violation: None,
        applied: BTreeMap::new(),
    }));
    let replicas = (1..=profile.replicas as MemberId)
        .map(|id| {
            let disk = replica_disk(seed, id, 0, &clock);
            let ip = host(id);
            let env = Env {
                disk: wrap_disk(&disk),
                clock: Arc::new(clock.clone()),
                net: Arc::new(net.host(ip)),
                tasks: Arc::new(executor.handle().in_group(NODE_GROUP_BASE + id)),
                entropy: crate::env::entropy(seed ^ (0xe27 + u64::from(id))),
            };
            Replica {
                id,
                disk,
                disks: 1,
                ip,
                env,
                incarnation: None,
                joined: true,
                group: None,
                starts: 0,
                armed: false,
            }
        })
        .collect();
    let world = World {
        seed,
        verbose,
        profile,
        clock: clock.clone(),
        net,
        executor: executor.handle(),
        replicas,
        shared: shared.clone(),
        rng: ChaCha8Rng::seed_from_u64(seed ^ 0xd12ec),
        acked: BTreeMap::new(),
        in_doubt: BTreeSet::new(),
        crashes: 0,
        leaders_seen: BTreeSet::new(),
        nemesis_on: true,
        next_nemesis: 0,
        decisions: BTreeMap::new(),
    };
    let director = executor.handle().in_group(DIRECTOR_GROUP);
    let play = async move {
        match script {
            Script::Swarm => direct(world).await,
            Script::Directed(scenario) => directed::play(world, scenario).await,
        }
    };
    let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        executor.block_on(&director, MAX_POLLS, play)
    }));
    executor.kill_all();
    let mut shared = shared.lock().unwrap_or_else(|p| p.into_inner());
    let (acknowledged, crashes, elections, decisions) = match finished {
        Ok(Some(counts)) => counts,
        Err(panic) => {
            let message = crate::executor::panic_message(&*panic);
            shared.fail(
                crate::report::INV_ASSERTION,
                format!("the run panicked: {message}"),
            );
            (0, 0, 0, BTreeMap::new())
        }
        Ok(None) => {
            shared.fail(
                INV_LIVENESS,
                format!("the run did not finish within {MAX_POLLS} polls (stalled or looping)"),
            );
            (0, 0, 0, BTreeMap::new())
        }
    };
    if verbose {
        if let Some(v) = &shared.violation {
            println!("{v}");
        }
    }
    ClusterReport {
        seed,
        profile,
        violation: shared.violation.clone(),
        events: std::mem::take(&mut shared.events),
        acknowledged,
        crashes,
        elections,
        decisions,
        simulated_nanos: clock.now_nanos(),
    }
}

/// Replica `id`'s disk number `nth` (a replaced disk is a new device).
fn replica_disk(seed: u64, id: MemberId, nth: u64, clock: &SimClock) -> SimDisk {
    let disk = SimDisk::new(
        seed ^ (0xd15c + u64::from(id)) ^ (nth << 40),
        Default::default(),
    );
    disk.set_latency(clock.clone(), 20_000, 400_000);
    disk
}

/// The disk a replica's `Env` gets: `disk`, wrapped by a canary that needs it (none in
/// production).
fn wrap_disk(disk: &SimDisk) -> Arc<dyn cairn_engine::env::Disk> {
    let plain: Arc<dyn cairn_engine::env::Disk> = Arc::new(disk.clone());
    match crate::canary::active().and_then(crate::canary::disk::replica_disk_hook) {
        Some(hook) => hook(plain),
        None => plain,
    }
}

/// The directory of member `id`'s replica.
fn group_dir(id: MemberId) -> PathBuf {
    PathBuf::from(format!("/data/{id}/cluster/metadata"))
}

/// Runs one cluster seed as the swarm and `cairn-sim` run seeds: its report in the shape
/// every scope's is.
pub fn run_report(profile: crate::profile::Profile, verbose: bool) -> crate::report::RunReport {
    let cluster = run(profile.seed, verbose);
    let mut report = crate::report::RunReport::new(profile);
    report.trace_hash = cluster.trace_hash();
    report.violation = cluster.violation;
    report.decisions = cluster.decisions;
    report.simulated_nanos = cluster.simulated_nanos;
    report.operations = cluster.acknowledged as u64;
    report.restarts = cluster.crashes as u64;
    report
}

impl World {
    fn event(&self, line: String) {
        let at = self.clock.now_nanos() / 1_000_000;
        let line = format!("{at}ms {line}");
        if self.verbose {
            println!("{line}");
        }
        self.shared.lock().expect("shared").events.push(line);
    }

    fn decision(&mut self, name: &'static str) {
        debug_assert!(
            CLUSTER_COVERAGE.iter().any(|(n, _)| *n == name),
            "{name} is a row"
        );
        *self.decisions.entry(name).or_default() += 1;
    }

    /// Counts the snapshots a replica installed, before its process goes.
    fn count_installs(&mut self, at: usize) {
        let installed = self.replicas[at]
            .group
            .as_ref()
            .map_or(0, |g| g.machine().installed_snapshots());
        for _ in 0..installed {
            self.decision("ClusterSnapshotInstalled");
        }
    }

    fn failed(&self) -> bool {
        self.shared.lock().expect("shared").violation.is_some()
    }

    fn fail(&self, invariant: &'static str, evidence: String) {
        self.shared
            .lock()
            .expect("shared")
            .fail(invariant, evidence);
    }

    fn observer(&self, id: MemberId) -> cairn_cluster::sm::ApplyObserver {
        let shared = self.shared.clone();
        Arc::new(move |entry: &Entry| {
            let rendering = format!("{:?}", entry.payload);
            let term = entry.log_id.leader_id.term;
            let index = entry.log_id.index;
            let mut shared = shared.lock().expect("shared");
            match shared.applied.get(&index) {
                None => {
                    shared.applied.insert(index, (term, rendering));
                }
                Some((t, r)) if (*t, r) == (term, &rendering) => {}
                Some((t, r)) => {
                    let evidence = format!(
                        "replica {id} applied at index {index} term {term} {rendering}, another replica term {t} {r}"
                    );
                    shared.fail(INV_AGREEMENT, evidence);
                }
            }
        })
    }

    async fn start(&mut self, at: usize) {
        let id = self.replicas[at].id;
        let mut config = GroupConfig::new(
            CLUSTER_ID,
            id,
            members(self.profile.replicas),
            group_dir(id),
        );
        config.observer = Some(self.observer(id));
        // As production's: the founder makes the group only if no member holds it.
        config.bootstrap = true;
        config.snapshot_every = self.profile.snapshot_every;
        config.hooks = crate::canary::cluster_hooks();
        let env = self.replicas[at].env.clone();
        self.replicas[at].starts += 1;
        match MetaGroup::start(&env, config).await {
            Ok(group) => {
                let (vote, purged, last) = group.log().summary();
                if purged.is_some() && self.replicas[at].starts > 1 {
                    self.decision("ClusterBootFromSnapshot");
                }
                let show = |l: Option<cairn_cluster::types::LogId>| {
                    l.map_or("-".to_owned(), |l| {
                        format!("{}.{}", l.leader_id.term, l.index)
                    })
                };
                let vote = vote.map_or("-".to_owned(), |v| v.to_string());
                let incarnation = group.id();
                let replica = &mut self.replicas[at];
                let blank = replica.incarnation.is_some_and(|old| old != incarnation);
                if blank {
                    // A new replica: it counts once an administrator replaced the old one.
                    replica.joined = false;
                }
                replica.incarnation = Some(incarnation);
                self.event(format!(
                    "replica {} started: vote {vote}, purged {}, last {}{}",
                    show_id(incarnation),
                    show(purged),
                    show(last),
                    if blank { ", a new replica" } else { "" }
                ));
                self.replicas[at].group = Some(Arc::new(group));
            }
            Err(e) => {
                // With a minority of replicas ever down and no disk damage injected, every
                // boot must succeed.
                self.fail(INV_BOOT, format!("replica {id} did not start: {e}"));
            }
        }
    }

    fn crash(&mut self, at: usize) {
        self.count_installs(at);
        self.replicas[at].armed = false;
        let power = self.rng.gen_bool(self.profile.power_loss);
        self.decision(if power {
            "ClusterPowerLoss"
        } else {
            "ClusterProcessCrash"
        });
        let replica = &mut self.replicas[at];
        replica.group = None;
        self.executor.kill_group(NODE_GROUP_BASE + replica.id);
        if power {
            replica.disk.power_loss();
            self.net.power_off(replica.ip);
        } else {
            replica.disk.process_crash();
        }
        self.crashes += 1;
        let kind = if power { "power loss" } else { "process crash" };
        let id = replica.id;
        self.event(format!("replica {id}: {kind}"));
    }

    async fn restart_all(&mut self) {
        self.net.heal();
        for at in 0..self.replicas.len() {
            if self.replicas[at].armed && self.replicas[at].disk.is_crashed() {
                self.crash(at);
            } else if self.replicas[at].armed {
                self.replicas[at].disk.disarm_crash();
                self.replicas[at].armed = false;
            }
            if self.replicas[at].group.is_none() {
                self.net.power_on(self.replicas[at].ip);
                self.start(at).await;
            }
        }
    }

    fn up(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|&at| self.replicas[at].group.is_some())
            .collect()
    }

    /// Brings replica `at` (down) back blank: on a new disk, or on its disk without its
    /// state record (its vote); its files are then set aside by its boot.
    async fn blank(&mut self, at: usize) {
        let id = self.replicas[at].id;
        let lose_state = self.rng.gen_bool(self.profile.state_lost);
        let state = group_dir(id).join(cairn_cluster::log::STATE_FILE);
        if lose_state
            && cairn_engine::env::Disk::exists(&self.replicas[at].disk, &state).unwrap_or(false)
        {
            self.replicas[at].disk.remove_by_operator(&state);
            self.decision("ClusterStateLost");
            self.event(format!("replica {id}: its state record is lost"));
        } else {
            let replica = &mut self.replicas[at];
            replica.disk = replica_disk(self.seed, id, replica.disks, &self.clock);
            replica.disks += 1;
            replica.env.disk = wrap_disk(&replica.disk);
            self.decision("ClusterDiskReplaced");
            self.event(format!("replica {id}: its disk is replaced by a blank one"));
        }
        self.net.power_on(self.replicas[at].ip);
        self.start(at).await;
    }

    /// Replicas that count as down: down, with a crash armed, or blank and not yet added.
    fn out(&self) -> usize {
        self.replicas
            .iter()
            .filter(|r| r.group.is_none() || r.armed || !r.joined)
            .count()
    }

    /// The administrator: replaces the old incarnation of a blank replica that is up with
    /// it, through whoever leads. `true` when no blank replica waits any more.
    async fn rejoin(&mut self) -> bool {
        let Some(at) = (0..self.replicas.len())
            .find(|&at| !self.replicas[at].joined && self.replicas[at].group.is_some())
        else {
            return self.replicas.iter().all(|r| r.joined);
        };
        let Some(leader) = self
            .leader_at()
            .and_then(|l| self.replicas[l].group.clone())
        else {
            return false;
        };
        let id = self.replicas[at].id;
        let change = MemberChange::Add {
            member: id,
            peer: members(self.profile.replicas)[&id].clone(),
        };
        let changed = {
            let leader = leader.clone();
            async move { leader.change(change).await }
        };
        match self.while_nemesis(changed, CHANGE_TIMEOUT).await {
            Some(Ok(status)) => {
                let Some(incarnation) = self.replicas[at].incarnation else {
                    return false;
                };
                // The replica may have gone blank again meanwhile: only its current
                // incarnation among the voters counts.
                if status.voters.contains_key(&incarnation) && !status.joint {
                    self.replicas[at].joined = true;
                    self.decision("ClusterReplicaReplaced");
                    self.event(format!(
                        "replica {} replaced member {id}'s old one",
                        show_id(incarnation)
                    ));
                }
                false
            }
            Some(Err(e)) => {
                self.event(format!("adding replica {id} failed: {e}"));
                false
            }
            None => {
                self.event(format!("adding replica {id} timed out"));
                false
            }
        }
    }

    /// One nemesis step: heal, crash, bounce, restart one, partition, or nothing.
    async fn nemesis(&mut self) {
        // An armed crash that struck: the process goes down now.
        for at in 0..self.replicas.len() {
            if self.replicas[at].armed && self.replicas[at].disk.is_crashed() {
                self.decision("ClusterCrashInIo");
                self.crash(at);
            }
        }
        let down: Vec<usize> = (0..self.replicas.len())
            .filter(|&at| self.replicas[at].group.is_none())
            .collect();
        // A replica with a crash armed counts as down: it may go any moment.
        let out = self.out();
        let minority = (self.replicas.len() - 1) / 2;
        if self.rng.gen_bool(self.profile.heal) {
            self.event("heal".into());
            self.restart_all().await;
        } else if out < minority && self.rng.gen_bool(self.profile.blank) {
            let at = self.victim();
            self.crash(at);
            self.blank(at).await;
        } else if out < minority && self.rng.gen_bool(self.profile.crash) {
            let at = self.victim();
            if self.rng.gen_bool(0.5) && !self.replicas[at].armed {
                // Inside one of its next disk calls (a write, a sync, a rename).
                let calls = self.rng.gen_range(0..40);
                self.replicas[at].disk.arm_crash(calls);
                self.replicas[at].armed = true;
                let id = self.replicas[at].id;
                self.event(format!("replica {id}: crash armed {calls} calls ahead"));
            } else {
                self.crash(at);
            }
        } else if out < minority && self.rng.gen_bool(self.profile.bounce) {
            let at = self.victim();
            self.crash(at);
            self.net.power_on(self.replicas[at].ip);
            self.start(at).await;
        } else if !down.is_empty() && self.rng.gen_bool(0.3) {
            let at = down[self.rng.gen_range(0..down.len())];
            self.net.power_on(self.replicas[at].ip);
            self.start(at).await;
        } else if self.rng.gen_bool(self.profile.partition) {
            let a = self.rng.gen_range(0..self.replicas.len());
            let b = (a + self.rng.gen_range(1..self.replicas.len())) % self.replicas.len();
            self.net.partition(self.replicas[a].ip, self.replicas[b].ip);
            self.decision("ClusterPartition");
            let (a, b) = (self.replicas[a].id, self.replicas[b].id);
            self.event(format!("partition {a} | {b}"));
        }
    }

    /// A replica to crash: the leader as often as the profile says, else any that is up.
    fn victim(&mut self) -> usize {
        let up = self.up();
        match self.leader_at() {
            Some(at) if self.rng.gen_bool(self.profile.crash_leader) => at,
            _ => up[self.rng.gen_range(0..up.len())],
        }
    }

    /// Waits for `future`, the nemesis acting whenever its next time comes meanwhile
    /// (every 1 ms to `nemesis_gap_ms`, however fast proposals go); `None` when `limit`
    /// passes first.
    async fn while_nemesis<T>(
        &mut self,
        future: impl std::future::Future<Output = T>,
        limit: Duration,
    ) -> Option<T> {
        let deadline = self.clock.now_nanos() + limit.as_nanos() as u64;
        let mut future = std::pin::pin!(future);
        loop {
            let now = self.clock.now_nanos();
            if self.nemesis_on && now >= self.next_nemesis {
                self.nemesis().await;
                let gap = self.rng.gen_range(1..=self.profile.nemesis_gap_ms) * 1_000_000;
                self.next_nemesis = self.clock.now_nanos() + gap;
                continue;
            }
            let wake = if self.nemesis_on {
                self.next_nemesis.min(deadline)
            } else {
                deadline
            };
            let nap = cairn_engine::env::Clock::sleep(
                &self.clock,
                Duration::from_nanos(wake.saturating_sub(now)),
            );
            match cairn_engine::env::race(future.as_mut(), nap).await {
                cairn_engine::env::Either::Left(out) => return Some(out),
                cairn_engine::env::Either::Right(()) if self.clock.now_nanos() >= deadline => {
                    return None
                }
                cairn_engine::env::Either::Right(()) => {}
            }
        }
    }

    /// Whether `group` is still the running process of its replica: no crash since, and no
    /// armed crash that struck its disk (the process goes down at the nemesis' next step).
    fn still_up(&self, group: &Arc<MetaGroup>) -> bool {
        self.replicas.iter().any(|r| {
            r.group.as_ref().is_some_and(|g| Arc::ptr_eq(g, group))
                && !(r.armed && r.disk.is_crashed())
        })
    }

    /// Where the leader some up replica names is, if it is up.
    fn leader_at(&self) -> Option<usize> {
        let leader = self
            .up()
            .into_iter()
            .find_map(|at| self.replicas[at].group.as_ref()?.leader())?;
        let at = self
            .replicas
            .iter()
            .position(|r| r.incarnation == Some(leader))?;
        self.replicas[at].group.is_some().then_some(at)
    }

    /// The group a client would send to: the leader some replica names, if it is up.
    fn target(&mut self) -> Option<Arc<MetaGroup>> {
        let up = self.up();
        if up.is_empty() {
            return None;
        }
        let asked = up[self.rng.gen_range(0..up.len())];
        let group = self.replicas[asked].group.clone()?;
        let leader = group.leader();
        leader
            .and_then(|l| {
                self.replicas
                    .iter()
                    .find(|r| r.incarnation == Some(l))?
                    .group
                    .clone()
            })
            .or(Some(group))
    }

    /// Proposes the creation of `name` once; `true` when the outcome is known.
    async fn propose(&mut self, name: &str) -> bool {
        let Some(group) = self.target() else {
            return false;
        };
        let to = show_id(group.id());
        let proposal = {
            let group = group.clone();
            let command = create_stream(name);
            async move { group.propose(command).await }
        };
        let answer = self
            .while_nemesis(proposal, PROPOSE_TIMEOUT)
            .await
            .unwrap_or(Err(ProposeError::InDoubt));
        match answer {
            Ok((index, MetaOutcome::Applied { .. })) => {
                self.event(format!("{name} acknowledged by {to} at index {index}"));
                if let Some(leader) = group.leader() {
                    self.leaders_seen.insert((leader, index));
                }
                self.acked.insert(name.to_owned(), index);
                if self.in_doubt.remove(name) {
                    self.decision("ClusterInDoubtResolved");
                }
                true
            }
            Ok((index, MetaOutcome::Refused { code, reason })) => {
                if self.in_doubt.remove(name) {
                    // An earlier attempt landed: the retry found the name taken.
                    self.event(format!(
                        "{name} found applied by {to} at index {index} ({code})"
                    ));
                    self.acked.insert(name.to_owned(), index);
                } else {
                    self.fail(
                        INV_UNASKED,
                        format!("{name}, proposed once, was refused at index {index}: {reason}"),
                    );
                }
                true
            }
            Ok((index, MetaOutcome::Undecodable)) => {
                self.fail(
                    INV_UNASKED,
                    format!("{name} did not decode at index {index}"),
                );
                true
            }
            Err(ProposeError::NotLeader { .. }) => false,
            // Refused before anything was appended: nothing in this workload is refused so.
            Err(e @ ProposeError::Failed(_)) => {
                self.fail(INV_LIVENESS, format!("{name} at {to}: {e}"));
                true
            }
            // In doubt only for a cause the world made: the replica crashed (its group is
            // gone) or the leader changed. A Raft node that stopped on its own (a storage
            // error, a panic) while the world still runs it is a failure, not a doubt.
            Err(e) if self.still_up(&group) && group.failure().is_some() => {
                let why = group.failure().unwrap_or_default();
                self.fail(
                    INV_LIVENESS,
                    format!("{name} at {to}: {e}; replica {to} stopped by itself: {why}"),
                );
                true
            }
            Err(e) => {
                self.event(format!("{name} in doubt at {to}: {e}"));
                self.in_doubt.insert(name.to_owned());
                false
            }
        }
    }

    /// Waits until every replica has applied the same last index, then compares states.
    async fn judge_final(&mut self) {
        let deadline = self.clock.now_nanos() + FINAL_DEADLINE.as_nanos() as u64;
        // A last proposal through the healed cluster: liveness, and it commits everything
        // before it.
        let mut through = false;
        while !through && self.clock.now_nanos() < deadline {
            through = self.propose("final").await;
            if !through {
                cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(50)).await;
            }
        }
        if !through {
            self.fail(INV_LIVENESS, "the final proposal never went through".into());
            return;
        }
        let target = self.acked.get("final").copied().unwrap_or(0);
        // Every blank replica added (a group that does not count one never converges on it).
        while !self.rejoin().await {
            if self.clock.now_nanos() >= deadline {
                self.fail(
                    INV_LIVENESS,
                    "a blank replica was never added to the healed cluster".into(),
                );
                return;
            }
            cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(50)).await;
        }
        loop {
            let states: Vec<_> = self
                .replicas
                .iter()
                .filter_map(|r| Some((r.id, r.group.as_ref()?.machine().state())))
                .collect();
            let _: &[(MemberId, _)] = &states;
            // Every replica up, past the final proposal, and at one applied index.
            let first = states.first().and_then(|(_, (_, a))| *a);
            if states.len() == self.replicas.len()
                && first.is_some_and(|a| a.index >= target)
                && states.iter().all(|(_, (_, applied))| *applied == first)
            {
                self.compare(states);
                return;
            }
            if self.clock.now_nanos() >= deadline {
                self.fail(
                    INV_LIVENESS,
                    format!("not every replica applied index {target} by the deadline"),
                );
                return;
            }
            cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(20)).await;
        }
    }

    fn compare(
        &mut self,
        states: Vec<(
            MemberId,
            (
                cairn_engine::state::MetaState,
                Option<cairn_cluster::types::LogId>,
            ),
        )>,
    ) {
        // Every replica applied the same index (the caller waited for it): equal states.
        let (first_id, (first, at)) = &states[0];
        let top = at.map(|a| a.index);
        for (id, (state, applied)) in &states {
            assert_eq!(applied, at, "compared at one applied index");
            if state != first {
                self.fail(
                    INV_CONVERGED,
                    format!("replica {id} and replica {first_id} differ at index {top:?}"),
                );
                return;
            }
        }
        for (id, (state, _)) in &states {
            let names: BTreeSet<String> =
                state.streams().values().map(|s| s.name.clone()).collect();
            if let Some(lost) = self.acked.keys().find(|n| !names.contains(*n)) {
                self.fail(
                    INV_ACKED_PRESENT,
                    format!(
                        "replica {id} lacks stream {lost}, acknowledged at index {}",
                        self.acked[lost]
                    ),
                );
                return;
            }
            let asked = |n: &String| self.acked.contains_key(n) || self.in_doubt.contains(n);
            if let Some(extra) = names.iter().find(|n| !asked(n)) {
                self.fail(
                    INV_UNASKED,
                    format!("replica {id} holds stream {extra} nobody asked for"),
                );
                return;
            }
        }
        self.event(format!(
            "final: {} replicas at index {top:?}, {} streams acknowledged, {} in doubt",
            states.len(),
            self.acked.len(),
            self.in_doubt.len()
        ));
    }
}

/// The director: starts every replica, runs the client and the nemesis, then heals and
/// judges. Returns (acknowledged ops, crashes, distinct leaders, coverage rows reached).
async fn direct(mut world: World) -> Counts {
    for at in 0..world.replicas.len() {
        world.start(at).await;
    }
    let mut next = 0;
    while next < world.profile.ops && !world.failed() {
        world.rejoin().await;
        let name = format!("s{next}");
        if world.propose(&name).await {
            next += 1;
        } else {
            let wait = world.rng.gen_range(10..200);
            let nap = cairn_engine::env::Clock::sleep(&world.clock, Duration::from_millis(wait));
            world.while_nemesis(nap, Duration::from_secs(1)).await;
        }
    }
    world.nemesis_on = false;
    if !world.failed() {
        world.event("final heal".into());
        world.restart_all().await;
        world.judge_final().await;
    }
    world.counts()
}

impl World {
    /// What the run counted, once it is over.
    fn counts(mut self) -> Counts {
        let world = &mut self;
        for at in 0..world.replicas.len() {
            world.count_installs(at);
        }
        let leaders: BTreeSet<NodeId> = world.leaders_seen.iter().map(|(l, _)| *l).collect();
        if leaders.len() > 1 {
            world.decision("ClusterLeaderChanged");
        }
        (
            world.acked.len(),
            world.crashes,
            leaders.len(),
            std::mem::take(&mut world.decisions),
        )
    }
}

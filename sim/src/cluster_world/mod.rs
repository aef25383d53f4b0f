//! The cluster world: the metadata consensus group (`cairn_cluster::group`) of 3 or 5
//! replicas, each with its own simulated disk, host on the simulated network and task group
//! on the seeded executor, driven by a client that proposes metadata operations to whoever
//! leads, while a nemesis crashes replicas (a process crash, or a power loss that takes the
//! unsynced page cache and the host's connections), partitions pairs of hosts, replaces a
//! replica's disk with a blank one or takes its state record (its vote) away, and heals.
//! A replica that comes back blank is a new Raft node; an administrator (the director,
//! between proposals) replaces the old one with it ([`MemberChange::Add`]), and now and then
//! removes a member ([`MemberChange::Remove`]) and adds it back a while later.
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
//! Only a minority is ever down at once (a blank replica not yet added, and a removed one,
//! count as down), and a disk goes blank or a partition is damaged only where a majority
//! of every partition's placed copies stays in (`copies_to_spare`: two of five members may
//! be two of a partition's three), so every seed must make progress; the one exception is a power loss of
//! every replica at once, after which all restart (what a quorum acknowledged was on its
//! stable storage).

mod client;
mod coverage;
pub mod directed;
mod messages;
mod nemesis;
mod offsets;
mod oracle;
mod profile;
mod workload;

use crate::executor::{Executor, ExecutorHandle};
use crate::report::Violation;
use crate::timeline::{LaneKind, MarkKind, SpanOutcome, Timeline, Verdict};
use cairn_cluster::group::{GroupConfig, MemberChange, MetaGroup, ProposeError};
use cairn_cluster::net::PeerKey;
use cairn_cluster::partition::groups::{GroupView, PartGroups, Tuning};
use cairn_cluster::types::{show_id, Entry, MemberId, MetaCommand, MetaOutcome, NodeId, Peer};
use cairn_engine::env::Env;
use cairn_engine::state::ops::MetaOp;
use cairn_faults::{NetFaults, SimClock, SimDisk, SimNet};
use iggy_binary_protocol::requests::streams::CreateStreamRequest;
use iggy_binary_protocol::requests::topics::CreateTopicRequest;
use iggy_binary_protocol::{WireIdentifier, WireName, WireOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
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
/// The simulated cluster's shared secret (every peer connection proves it, as in production).
const CLUSTER_SECRET: &[u8] = b"the simulated cluster's secret";

pub const INV_AGREEMENT: &str = "replicas agree on every applied entry";
pub const INV_ACKED_PRESENT: &str = "an acknowledged metadata op is never lost";
pub const INV_CONVERGED: &str = "replicas converge to one state";
/// Liveness: a healed cluster with every replica up makes progress.
pub use crate::report::INV_LIVENESS;
pub const INV_BOOT: &str = "a replica whose disk took no damage boots";
pub const INV_UNASKED: &str = "a replica holds only what clients asked for";
pub const INV_FRESH: &str = "a fresh read sees every op acknowledged before it";
pub const INV_NODE_HOLDS: &str =
    "a replica's node holds exactly its state's partitions, on disk and served";
pub use coverage::CLUSTER_COVERAGE;
pub use messages::{INV_MESSAGES_AGREE, INV_MESSAGE_LOST, INV_MESSAGE_UNSENT, INV_READ_COMMITTED};
pub use offsets::{INV_OFFSETS_AGREE, INV_OFFSET_LOST};
pub use profile::ClusterProfile;

pub const INV_NO_STALE_OFFSET: &str =
    "a group holds no offset it did not store (none of a deleted group under its id)";

/// Replica `id`'s clock: the world's, or, as often as the profile says, one running fast or
/// slow with its wall clock off ([`cairn_faults::SkewedClock`]).
fn replica_clock(
    seed: u64,
    id: MemberId,
    profile: &ClusterProfile,
    clock: &SimClock,
) -> (Arc<dyn cairn_engine::env::Clock>, Option<(u64, i64)>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5ce0 ^ u64::from(id));
    if !rng.gen_bool(profile.clock_skew) {
        return (Arc::new(clock.clone()), None);
    }
    let rate = rng.gen_range(900..=1100);
    let offset = rng.gen_range(-5_000_000..=5_000_000);
    let skewed = cairn_faults::SkewedClock::new(clock.clone(), rate, offset);
    (Arc::new(skewed), Some((rate, offset)))
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
    /// The run's picture, when asked for: a lane per replica, the client's and the
    /// administrator's requests, the network's partitions.
    pub timeline: Option<Box<Timeline>>,
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
    /// an administrator replaced the old one with it, and from the start of a removal until
    /// it is added back).
    joined: bool,
    /// A removed replica is added back no sooner than this (virtual nanoseconds).
    rejoin_after: u64,
    group: Option<Arc<MetaGroup>>,
    /// The starts of this replica so far (each start is a new process).
    starts: u32,
    /// A crash is armed on its disk: it strikes inside a disk call (a write lands in part),
    /// and the nemesis then takes the process down.
    armed: bool,
    /// The node of its current process (when the profile runs nodes), until its counts
    /// are taken.
    node: Option<cairn_engine::node::Node>,
    /// The partitions its last process's node served when it went.
    served: BTreeSet<cairn_engine::partition::PartitionIdentity>,
    /// Its node's partition groups, when the profile runs messages.
    parts: Option<PartGroups>,
    /// Partitions whose segment bytes the nemesis damaged on its disk: its boot may fence
    /// only these, until a boot found one fenced and its group of it then ran (repaired;
    /// damage no boot found, in bytes it never reads or above its durable end, stays).
    damaged: BTreeSet<cairn_engine::state::PartitionKey>,
    /// Of those, the ones its last boot fenced.
    found_damaged: BTreeSet<cairn_engine::state::PartitionKey>,
}

struct Shared {
    clock: SimClock,
    events: Vec<String>,
    violation: Option<Violation>,
    /// When the violation was seen (virtual nanoseconds).
    violated_at: u64,
    timeline: Option<Timeline>,
    /// index → (term, the entry's rendering), as the first replica applied it.
    applied: BTreeMap<u64, (u64, String)>,
}

impl Shared {
    fn fail(&mut self, invariant: &'static str, evidence: String) {
        if self.violation.is_none() {
            self.violated_at = self.clock.now_nanos();
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
    /// The names live by the acknowledged ops: name → the index of its creation.
    acked: BTreeMap<String, u64>,
    /// The labels of ops in doubt ([`workload::Op::label`]).
    in_doubt: BTreeSet<String>,
    /// Ops acknowledged (or found applied).
    acknowledged: usize,
    /// Groups an offset was stored for (or tried), by name.
    stored: BTreeSet<String>,
    /// The key and `asked_at` of the op being asked, until its outcome is known.
    asking: Option<(u128, u64)>,
    crashes: usize,
    leaders_seen: BTreeSet<(NodeId, u64)>,
    /// The leader of the last acknowledgement (the timeline marks each new one).
    last_leader: Option<NodeId>,
    /// The messages the client sent and read (profile `messages`).
    messages: messages::Messages,
    offsets: offsets::Offsets,
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

/// Runs one cluster seed.
pub fn run(seed: u64, verbose: bool) -> ClusterReport {
    run_script(
        seed,
        verbose,
        ClusterProfile::from_seed(seed),
        Script::Swarm,
        false,
    )
}

/// Runs one cluster seed under `profile` instead of the one it draws (a seed found under a
/// hunt's profile replays with it).
pub fn run_profile(seed: u64, profile: ClusterProfile) -> ClusterReport {
    run_script(seed, false, profile, Script::Swarm, false)
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
fn run_script(
    seed: u64,
    verbose: bool,
    profile: ClusterProfile,
    script: Script,
    record: bool,
) -> ClusterReport {
    if verbose {
        println!("seed {seed} cluster {profile:?}");
    }
    let clock = SimClock::new();
    let mut executor = Executor::new(seed ^ 0xe8ec, clock.clone());
    let net = SimNet::new(seed ^ 0x4e7, clock.clone(), NetFaults::default());
    let shared = Arc::new(Mutex::new(Shared {
        clock: clock.clone(),
        events: vec![format!("profile {profile:?}")],
        violation: None,
        violated_at: 0,
        timeline: record.then(|| new_timeline(seed, profile.replicas)),
        applied: BTreeMap::new(),
    }));
    let mut skewed = Vec::new();
    let replicas = (1..=profile.replicas as MemberId)
        .map(|id| {
            let disk = replica_disk(seed, id, 0, &clock);
            let ip = host(id);
            let (replica_clock, skew) = replica_clock(seed, id, &profile, &clock);
            if let Some((rate, offset)) = skew {
                skewed.push(format!(
                    "replica {id}: clock at {rate}‰, wall {offset:+} us"
                ));
            }
            let env = Env {
                disk: wrap_disk(&disk),
                clock: replica_clock,
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
                rejoin_after: 0,
                group: None,
                starts: 0,
                armed: false,
                node: None,
                served: BTreeSet::new(),
                damaged: BTreeSet::new(),
                found_damaged: BTreeSet::new(),
                parts: None,
            }
        })
        .collect();
    let mut world = World {
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
        acknowledged: 0,
        stored: BTreeSet::new(),
        asking: None,
        crashes: 0,
        leaders_seen: BTreeSet::new(),
        last_leader: None,
        messages: messages::Messages::default(),
        offsets: offsets::Offsets::default(),
        nemesis_on: true,
        next_nemesis: 0,
        decisions: BTreeMap::new(),
    };
    for skew in skewed {
        world.event(skew);
        world.decision("ClusterClockSkew");
    }
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
    let timeline = shared.timeline.take().map(|mut timeline| {
        let verdict = shared.violation.as_ref().map(|v| Verdict {
            at_nanos: shared.violated_at,
            invariant: v.invariant.to_string(),
            evidence: v.evidence.clone(),
            spans: Vec::new(),
        });
        timeline.finish(clock.now_nanos(), verdict);
        Box::new(timeline)
    });
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
        timeline,
    }
}

/// A timeline with its lanes in the order they are drawn: the client, the administrator,
/// each replica, the network.
fn new_timeline(seed: u64, replicas: usize) -> Timeline {
    let mut timeline = Timeline::new(format!("cluster seed {seed:#x}: {replicas} replicas"));
    timeline.lane(CLIENT_LANE, LaneKind::Client);
    timeline.lane(ADMIN_LANE, LaneKind::Client);
    for id in 1..=replicas as MemberId {
        timeline.lane(&replica_lane(id), LaneKind::Node);
    }
    timeline.lane(NETWORK_LANE, LaneKind::Network);
    timeline
}

const CLIENT_LANE: &str = "client";
const ADMIN_LANE: &str = "administrator";
const NETWORK_LANE: &str = "network";

fn replica_lane(id: MemberId) -> String {
    format!("replica {id}")
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

/// Boots member `id`'s node (its data directory holds the replica's), clustered: its
/// metadata ops are the group's commands.
async fn boot_node(
    env: &Env,
    id: MemberId,
    replicas: bool,
) -> Result<cairn_engine::node::Booted, cairn_engine::node::BootError> {
    use cairn_engine::node::{Node, NodeSettings, PasswordCost};
    let mut settings = NodeSettings {
        password_cost: PasswordCost::CHEAP,
        meta: cairn_engine::metadata::MetaSettings {
            // Small: checkpoints come every few ops, so boots replay from them.
            checkpoint_bytes: 2048,
            cluster: Some(CLUSTER_ID),
        },
        shards: 1,
        hooks: crate::canary::node_hooks(),
        ..NodeSettings::default()
    };
    // A member whose partitions' groups run: its partitions are their replicas.
    settings.partition.replica = replicas;
    Node::start(env, &node_root(id), settings).await
}

/// Where member `id`'s node keeps its data.
fn node_root(id: MemberId) -> PathBuf {
    PathBuf::from(format!("/data/{id}"))
}

/// Runs one cluster seed as the swarm and `cairn-sim` run seeds: its report in the shape
/// every scope's is.
pub fn run_report(
    profile: crate::profile::Profile,
    verbose: bool,
    timeline: bool,
) -> crate::report::RunReport {
    let seed = profile.seed;
    let cluster = run_script(
        seed,
        verbose,
        ClusterProfile::from_seed(seed),
        Script::Swarm,
        timeline,
    );
    let mut report = crate::report::RunReport::new(profile);
    report.trace_hash = cluster.trace_hash();
    report.violation = cluster.violation;
    report.decisions = cluster.decisions;
    report.simulated_nanos = cluster.simulated_nanos;
    report.operations = cluster.acknowledged as u64;
    report.restarts = cluster.crashes as u64;
    report.timeline = cluster.timeline;
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

    /// A mark on `lane` of the timeline, if one is recorded.
    fn mark(&self, lane: &str, kind: MarkKind, label: String) {
        let now = self.clock.now_nanos();
        if let Some(timeline) = &mut self.shared.lock().expect("shared").timeline {
            let lane = timeline.lane(lane, LaneKind::Node);
            timeline.mark(lane, now, kind, label);
        }
    }

    /// Begins a request's bar on `lane` (0 when no timeline is recorded).
    fn begin(&self, lane: &str, label: String) -> u64 {
        let now = self.clock.now_nanos();
        match &mut self.shared.lock().expect("shared").timeline {
            Some(timeline) => {
                let lane = timeline.lane(lane, LaneKind::Client);
                timeline.begin(lane, now, label)
            }
            None => 0,
        }
    }

    /// Ends the bar `id` began.
    fn end(&self, id: u64, outcome: SpanOutcome) {
        let now = self.clock.now_nanos();
        if let Some(timeline) = &mut self.shared.lock().expect("shared").timeline {
            timeline.end(id, now, outcome);
        }
    }

    fn decision(&mut self, name: &'static str) {
        debug_assert!(
            CLUSTER_COVERAGE.iter().any(|(n, _)| *n == name),
            "{name} is a row"
        );
        *self.decisions.entry(name).or_default() += 1;
    }

    /// Counts the snapshots a replica installed, and the commands its node was handed
    /// again after a restart, before its process goes.
    fn count_installs(&mut self, at: usize) {
        let (installed, replayed) = self.replicas[at].group.as_ref().map_or((0, 0), |g| {
            let machine = g.machine();
            (machine.installed_snapshots(), machine.replayed_commands())
        });
        for _ in 0..installed {
            self.decision("ClusterSnapshotInstalled");
        }
        if let Some(parts) = self.replicas[at].parts.take() {
            self.count_parts(at, &parts);
        }
        let node = self.replicas[at].node.take();
        // The partitions it served: a boot that finishes an adoption compares against them.
        if let Some(node) = &node {
            self.replicas[at].served = node.view().state.partitions().into_iter().collect();
        }
        let stats = node.map(|node| node.stats());
        let (adopted, removed) =
            stats.map_or((0, 0), |s| (s.meta_adoptions, s.meta_adopted_removals));
        for _ in 0..adopted {
            self.decision("ClusterNodeAdopted");
        }
        for _ in 0..removed {
            self.decision("ClusterAdoptionRemoved");
        }
        for _ in 0..replayed {
            self.decision("ClusterNodeReplayed");
        }
    }

    /// What a node's boot found of an adoption the replica's last process began.
    fn adoption_at_boot(&mut self, at: usize, plan: &cairn_engine::metadata::MetaPlan) {
        let id = self.replicas[at].id;
        use cairn_engine::metadata::MetaAction;
        let leftovers = plan.actions.iter().any(|a| {
            matches!(
                a,
                MetaAction::RemoveAdoption | MetaAction::RemoveTempAdoption
            )
        });
        if let Some(a) = &plan.adopting {
            self.event(format!(
                "replica {id}: boot finishes adopting the state after op {}",
                a.op
            ));
            // What its last process served that the adopted state has not (or purged).
            let after: BTreeSet<_> = a.state.partitions().into_iter().collect();
            if self.replicas[at].served.difference(&after).next().is_some() {
                self.decision("ClusterAdoptionRemoved");
            }
        }
        if leftovers || plan.adopting.is_some() {
            self.decision("ClusterAdoptionCutShort");
        }
    }

    /// A restarted replica (likely behind, so likely sent a snapshot) may crash at a step
    /// of an adoption: before the adopted state is synced, inside its directory work (a
    /// partition's sync or removal, which an op's work may reach first), when its checkpoint
    /// is written (its work done), or before its file is removed.
    fn arm_adoption_crash(&mut self, at: usize) {
        use cairn_faults::disk::{Call, Scripted};
        const STEPS: [(Call, &str); 5] = [
            (Call::Sync, "metadata/adopt.bin"),
            // Inside the directory work: a partition created or purged, one removed.
            (Call::Sync, "/partitions/"),
            (Call::Remove, "/partitions/"),
            (Call::Write, "metadata/snapshot.bin.tmp"),
            (Call::Remove, "metadata/adopt.bin"),
        ];
        let replica = &self.replicas[at];
        if !self.profile.nodes || replica.armed || !self.behind(at) {
            return;
        }
        if !self.rng.gen_bool(0.5) {
            return;
        }
        let (call, part) = STEPS[self.rng.gen_range(0..STEPS.len())];
        replica.disk.script(Scripted::CrashOnCall {
            call,
            part: part.into(),
        });
        let id = replica.id;
        self.replicas[at].armed = true;
        self.event(format!(
            "replica {id}: crash armed at its next {call:?} of {part}"
        ));
    }

    /// Whether replica `at`'s log ends further behind another's than a leader keeps behind
    /// its snapshot: it is likely sent the snapshot.
    fn behind(&self, at: usize) -> bool {
        let last = |r: &Replica| {
            r.group
                .as_ref()
                .and_then(|g| g.log().summary().2)
                .map_or(0, |l| l.index)
        };
        let mine = last(&self.replicas[at]);
        let most = self.replicas.iter().map(last).max().unwrap_or(0);
        most.saturating_sub(mine) > self.profile.snapshot_every / 4
    }

    /// Boots member `at`'s node; when the node has an adoption to finish, now and then a
    /// crash strikes inside one of the boot's disk calls first, and the next boot must
    /// finish what that one left.
    async fn boot_node_of(
        &mut self,
        at: usize,
    ) -> Result<cairn_engine::node::Booted, cairn_engine::node::BootError> {
        let id = self.replicas[at].id;
        let adopting = node_root(id)
            .join("metadata")
            .join(cairn_engine::metadata::adoption::FILE);
        let disk = self.replicas[at].disk.clone();
        let pending = cairn_engine::env::Disk::exists(&disk, &adopting).unwrap_or(false);
        if pending && self.rng.gen_bool(0.5) {
            let calls = self.rng.gen_range(0..30);
            disk.arm_crash(calls);
            let env = self.replicas[at].env.clone();
            let booted = boot_node(&env, id, self.profile.messages).await;
            if !disk.is_crashed() {
                disk.disarm_crash();
                return booted;
            }
            if let Ok(booted) = booted {
                booted.node.halt().await;
            }
            self.executor.kill_group(NODE_GROUP_BASE + id);
            disk.process_crash();
            self.decision("ClusterAdoptionCutShort");
            self.event(format!(
                "replica {id}: crashed inside a boot finishing an adoption"
            ));
        }
        boot_node(&self.replicas[at].env.clone(), id, self.profile.messages).await
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

    async fn start(&mut self, at: usize) {
        let id = self.replicas[at].id;
        let mut config = GroupConfig::new(
            (CLUSTER_ID, PeerKey::new(CLUSTER_SECRET)),
            id,
            members(self.profile.replicas),
            group_dir(id),
        );
        config.observer = Some(self.observer(id));
        // As production's: the founder makes the group only if no member holds it.
        config.bootstrap = true;
        config.snapshot_every = self.profile.snapshot_every;
        config.hooks = crate::canary::cluster_hooks();
        // Inside the client's own patience (`PROPOSE_TIMEOUT`), so that a member's own
        // attempts in doubt are asked again within it.
        config.decide_timeout = Duration::from_secs(1);
        let env = self.replicas[at].env.clone();
        self.replicas[at].starts += 1;
        if self.profile.nodes {
            match self.boot_node_of(at).await {
                Ok(booted) => {
                    self.adoption_at_boot(at, &booted.plan);
                    // Only the nemesis's damage to a partition's bytes may fence one (its
                    // group's start then repairs it from its peers); any other fenced one
                    // is work (an op's or an adoption's) done wrong or redone wrong.
                    let damaged = &self.replicas[at].damaged;
                    let fenced = booted.report.partitions.iter().find_map(|(key, boot)| {
                        let reason = boot.fence().filter(|_| !damaged.contains(key))?;
                        Some(format!("{key:?}: {reason}"))
                    });
                    let found: BTreeSet<_> = booted
                        .report
                        .partitions
                        .iter()
                        .filter(|(key, boot)| boot.fence().is_some() && damaged.contains(key))
                        .map(|(key, _)| *key)
                        .collect();
                    self.replicas[at].found_damaged = found;
                    if let Some(fenced) = fenced {
                        self.fail(INV_BOOT, format!("replica {id}'s node fenced {fenced}"));
                        return;
                    }
                    self.replicas[at].node = Some(booted.node.clone());
                    config.node = Some(booted.node);
                }
                Err(e) => {
                    self.fail(INV_BOOT, format!("replica {id}'s node did not boot: {e}"));
                    return;
                }
            }
        }
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
                let label = format!(
                    "started as {}{}, last {}",
                    show_id(incarnation),
                    if blank { " (new)" } else { "" },
                    show(last)
                );
                self.mark(&replica_lane(id), MarkKind::Boot, label);
                self.start_parts(at, &group);
                self.replicas[at].group = Some(Arc::new(group));
            }
            Err(e) => {
                // With a minority of replicas ever down and no disk damage injected, every
                // boot must succeed.
                self.mark(
                    &replica_lane(id),
                    MarkKind::Note,
                    format!("did not start: {e}"),
                );
                self.fail(INV_BOOT, format!("replica {id} did not start: {e}"));
            }
        }
        if self.nemesis_on && self.replicas[at].group.is_some() {
            self.arm_adoption_crash(at);
        }
    }
}

/// The director: starts every replica, runs the client and the nemesis, then heals and
/// judges. Returns (acknowledged ops, crashes, distinct leaders, coverage rows reached).
async fn direct(mut world: World) -> Counts {
    for at in 0..world.replicas.len() {
        world.start(at).await;
    }
    let mut next = 0;
    let mut op = None;
    while next < world.profile.ops_to_run() && !world.failed() {
        world.remove_one().await;
        world.rejoin().await;
        let kinds = (world.profile.nodes, world.profile.messages);
        let live = &world.acked;
        let drawn = op.get_or_insert_with(|| workload::draw(next, kinds, live, &mut world.rng));
        let drawn = drawn.clone();
        // Stores, sends, polls and offset writes are no metadata ops: done once tried.
        let tried = match &drawn {
            workload::Op::Store(group) => world.store_offset(group).await,
            workload::Op::Send(topic) => {
                let balanced = iggy_binary_protocol::WirePartitioning::Balanced;
                world.send_messages(topic, balanced).await
            }
            workload::Op::Poll(topic) => world.poll_messages(topic).await,
            workload::Op::Commit(topic) => world.write_offset(topic).await,
            _ => false,
        };
        if tried {
            next += 1;
            op = None;
            continue;
        }
        if world.propose_op(&drawn).await {
            next += 1;
            op = None;
            world.fresh_read().await;
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
            world.acknowledged,
            world.crashes,
            leaders.len(),
            std::mem::take(&mut world.decisions),
        )
    }
}

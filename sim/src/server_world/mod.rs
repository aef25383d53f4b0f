//! The server scope: `cairn serve`'s code — the listener, the connection tasks, sessions,
//! the duplicate table and the concurrent node — on the simulated disk, clock and network,
//! reached by simulated clients that speak Iggy's binary protocol through `cairn-client`
//! (its real reconnect, re-login and retry rules). Producers, consumers, consumer-group
//! members, an admin and a user's session run as tasks of their own simulated process
//! while the server's process crashes, loses power, or finds its disk full, and the network
//! delays, splits, resets, back-pressures and partitions their connections.
//!
//! Each boot is judged before the server listens again: the oracle ([`oracle`]) scans what
//! the node recovered and holds it against every acknowledgement the clients received.
//! Then the liveness phase heals every fault and every client must get work done, and a
//! graceful shutdown must keep every acknowledged message, `replicated` ones included.

mod actors;
pub mod ends;
mod lifecycle;
pub mod offsets;
pub mod oracle;

use lifecycle::{block, boot, go_down, setup};

use crate::env::MAX_EPOCH_POLLS;
use crate::env::{entropy, Machine};
use crate::executor::{Executor, ExecutorHandle};
use crate::report::{violation, RunReport, Trace, Violation, INV_LIVENESS};
use crate::timeline::{LaneKind, MarkKind, SpanOutcome, Timeline};
use cairn_engine::env::Env;
use cairn_faults::{NetEvent, NetFaults, SimClock, SimDisk, SimNet};
use cairn_server::Server;
use oracle::Oracle;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A partition of the world: (topic index, partition id).
pub type PartKey = (usize, u32);

/// The server's host, and the address it listens on.
pub const SERVER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
pub const SERVER_ADDR: SocketAddr = SocketAddr::new(SERVER_IP, 8090);
/// The server's tasks (one process: killed together) and the clients'.
pub const SERVER_GROUP: u32 = 1;
pub const CLIENT_GROUP: u32 = 2;
pub const DATA_DIR: &str = "/cairn";
pub const ROOT_USER: &str = "iggy";
pub const ROOT_PASSWORD: &str = "sim-root-password";
/// The stream the workload's topics live in, and the topics: index 0 `persisted`, 1
/// `replicated` (the consumer group's).
pub const STREAM: &str = "sim";
pub const TOPICS: [(&str, bool); 2] = [("persisted", true), ("replicated", false)];
pub const GROUP: &str = "members";
/// The budget invariant ([`ServerWorld::check_budgets`]).
pub const INV_BUDGET: &str = "S11 the server's buffered bytes stay within its budget";
/// Restarts a run may take.
const MAX_RESTARTS: u32 = 24;
/// Boot attempts (an armed crash may strike inside one) before the run gives up.
const MAX_BOOT_ATTEMPTS: u32 = 8;
/// Successful requests every client must make once faults heal, and the time it has.
pub const LIVENESS_REQUESTS: u32 = 3;
pub const LIVENESS_BUDGET: Duration = Duration::from_secs(120);

/// The server scope's coverage rows: decision name, and what reaching it means.
pub const SERVER_COVERAGE: [(&str, &str); 55] = [
    (
        "RefusedWithCause",
        "a request refused with code 1 while the world injected a cause (disk full, crash, stop): in doubt",
    ),
    (
        "LoginInactive",
        "a login as a user acknowledged deactivated: refused with 47",
    ),
    (
        "LoginOldPassword",
        "a login with a password acknowledged replaced: refused with 42",
    ),
    (
        "PollRevoked",
        "a poll by a session whose permission to poll was acknowledged revoked: refused with 41",
    ),
    (
        "ReplyLost",
        "a reply lost or never received: an unknown outcome",
    ),
    ("RetriedSend", "a send retried after an unknown outcome"),
    (
        "DedupAnswered",
        "a replayed metadata request answered from the duplicate table",
    ),
    ("Relogin", "a client reconnected and logged in again"),
    (
        "PartitionHealed",
        "a network partition between a client and the server healed",
    ),
    (
        "ResetMidFrame",
        "a connection reset in the middle of a frame",
    ),
    (
        "HalfOpen",
        "a connection half-open after the server's power loss",
    ),
    ("BackPressure", "a write waited on a full pipe"),
    ("ClientTimeout", "a client gave up waiting for a reply"),
    (
        "TopicDetails",
        "GetTopic of a workload topic: each partition's current offset and count judged",
    ),
    (
        "StreamDetails",
        "GetStream of the workload's stream: its totals and topic headers judged",
    ),
    (
        "TopicList",
        "GetTopics: the workload's topic headers judged",
    ),
    (
        "StreamList",
        "GetStreams: the workload stream's totals judged",
    ),
    (
        "PollCurrentOffset",
        "a poll's current offset judged against the partition's window",
    ),
    (
        "Stats",
        "GetStats: streams, topics, partitions, groups and messages judged",
    ),
    (
        "ConsumerOffsetRead",
        "GetConsumerOffset after a store or delete: stored and current offsets judged",
    ),
    (
        "MemberNoCurrentPartition",
        "a member's offset without a partition id before its first poll: refused",
    ),
    (
        "MemberOffsetNamed",
        "a member's offset read without a partition id named its polled partition",
    ),
    (
        "MemberStoreNamed",
        "a member's offset store without a partition id, no rebalance since its poll",
    ),
    (
        "MemberRebalancedAway",
        "a member's offset call refused after a rebalance took its polled partition",
    ),
    (
        "GetMe",
        "GetMe after a join: this connection's client, in the group",
    ),
    (
        "GroupDetails",
        "GetConsumerGroup: counts, the assignment and the asking member judged",
    ),
    (
        "GroupList",
        "GetConsumerGroups: the workload's group judged",
    ),
    ("Ping", "a ping answered"),
    (
        "GetClients",
        "GetClients lists the asking client as its user's",
    ),
    (
        "GetClient",
        "GetClient of the asking client's id answers for it",
    ),
    (
        "ClusterMetadata",
        "GetClusterMetadata: one node, at the address the client connected to",
    ),
    (
        "ScratchTopicCreated",
        "CreateTopic in a scratch stream: its partitions judged",
    ),
    (
        "ScratchTopicRead",
        "GetTopic and GetConsumerGroups of a scratch topic: partitions, expiry, group judged",
    ),
    (
        "ScratchTopicUpdated",
        "UpdateTopic of a scratch topic's message expiry acknowledged (the next read judges it)",
    ),
    (
        "ScratchPartitions",
        "CreatePartitions or DeletePartitions on a scratch topic acknowledged",
    ),
    (
        "ScratchPurged",
        "PurgeTopic or PurgeStream on a scratch topic acknowledged",
    ),
    (
        "ScratchActiveSegmentKept",
        "DeleteSegments of a scratch topic holding only active segments: refused",
    ),
    (
        "ScratchGroup",
        "CreateConsumerGroup, GetConsumerGroup or DeleteConsumerGroup in a scratch topic judged",
    ),
    (
        "StreamRenamed",
        "UpdateStream of a scratch stream acknowledged: the old name freed, the new one names its id",
    ),
    (
        "ScratchTopicDeleted",
        "DeleteTopic of a scratch topic acknowledged",
    ),
    ("TokenCreated", "CreatePersonalAccessToken answered a token"),
    ("TokenDeleted", "DeletePersonalAccessToken acknowledged"),
    ("TokenLogin", "a login with a token just created: a session as root"),
    (
        "MemberLeft",
        "a group member left (LeaveConsumerGroup) and joins again as a new member",
    ),
    (
        "TokenLoginRefused",
        "a login with a token whose deletion was acknowledged: refused",
    ),
    (
        "TokensListed",
        "GetPersonalAccessTokens judged against the tokens created and deleted",
    ),
    (
        "UsersListed",
        "GetUsers judged against the users created and deleted",
    ),
    ("UserRead", "GetUser of root's id answered root"),
    (
        "Logout",
        "the user's session logged out (then logs in afresh)",
    ),
    (
        "HostileGuessRefused",
        "a misbehaving client's wrong password for root: refused",
    ),
    (
        "HostileFloodRefused",
        "a burst of logins with wrong passwords, sent at once from one host: each refused",
    ),
    (
        "HostileTricklerClosed",
        "a login frame trickled a byte at a time: the server closed its connection",
    ),
    (
        "HostileStalledReaderClosed",
        "a reader that never takes its poll replies: the server closed its connection",
    ),
    (
        "HostileSlowSendRefused",
        "a send frame trickled in (its bytes within the byte budget): read, then refused",
    ),
    (
        "BudgetHeld",
        "the server held request bodies or replies while misbehaving clients ran: within its budgets",
    ),
];

/// What one server-scope seed does.
#[derive(Debug, Clone)]
pub struct ServerProfile {
    pub steps: u32,
    pub producers: u32,
    pub consumers: u32,
    /// Consumer-group members (0: no group work).
    pub members: u32,
    /// Whether a user's session runs (created, used, deleted by the admin).
    pub user_session: bool,
    /// Share of the admin's acknowledged creates it replays on the same session.
    pub replay: f64,
    pub shards: usize,
    pub partitions: u32,
    pub max_payload: usize,
    pub max_batch: usize,
    pub max_think_nanos: u64,
    pub net: NetFaults,
    /// Per request: a partition between a random client and the server begins.
    pub net_partition: f64,
    /// How long a network partition lasts (nanoseconds, seeded in this range).
    pub partition_nanos: (u64, u64),
    pub disk_latency_nanos: (u64, u64),
    pub process_crash: f64,
    pub power_loss: f64,
    pub mid_operation_crash: f64,
    pub disk_full: f64,
    pub reply_timeout: Duration,
    pub reconnect_retries: u32,
    pub reconnect_interval: Duration,
    /// The replicated topic's flush threshold (messages).
    pub messages_required_to_save: u32,
    /// The misbehaving clients beside the workload, and the byte budget they meet.
    pub hostile: actors::hostile::Hostile,
    /// The node's persists pipelined (records as jobs) or not (production's default).
    pub pipeline_records: bool,
}

impl ServerProfile {
    pub fn from_seed(seed: u64) -> ServerProfile {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5e4e_e45e_ed00);
        let maybe = |rng: &mut ChaCha8Rng, on: f64, low: f64, high: f64| {
            crate::profile::maybe(rng, on, low, high).unwrap_or(0.0)
        };
        let slow_net = rng.gen_bool(0.3);
        let net = NetFaults {
            delay_nanos: if slow_net {
                (200_000, 5_000_000)
            } else {
                (20_000, 200_000)
            },
            spike: rng.gen_bool(0.4).then(|| rng.gen_range(0.001..0.02)),
            reset: rng.gen_bool(0.5).then(|| rng.gen_range(0.002..0.02)),
            pipe_capacity: [4 * 1024, 64 * 1024, 1 << 20][rng.gen_range(0..3)],
            split_reads: rng.gen_bool(0.7),
        };
        ServerProfile {
            steps: rng.gen_range(150..400),
            producers: rng.gen_range(1..=3),
            consumers: rng.gen_range(1..=2),
            members: [0, 2, 3][rng.gen_range(0..3)],
            user_session: rng.gen_bool(0.6),
            replay: [0.0, 0.3, 0.8][rng.gen_range(0..3)],
            shards: [1, 2, 3, 5, 8][rng.gen_range(0..5)],
            partitions: rng.gen_range(1..=3),
            max_payload: [64, 1024, 16 * 1024][rng.gen_range(0..3)],
            max_batch: rng.gen_range(1..=8),
            max_think_nanos: [1_000_000, 20_000_000, 200_000_000][rng.gen_range(0..3)],
            net,
            net_partition: maybe(&mut rng, 0.5, 0.002, 0.02),
            partition_nanos: (100_000_000, 20_000_000_000),
            disk_latency_nanos: [(2_000, 50_000), (50_000, 2_000_000)][rng.gen_range(0..2)],
            process_crash: maybe(&mut rng, 0.7, 0.002, 0.015),
            power_loss: maybe(&mut rng, 0.7, 0.002, 0.015),
            mid_operation_crash: maybe(&mut rng, 0.4, 0.002, 0.01),
            disk_full: maybe(&mut rng, 0.15, 0.002, 0.01),
            reply_timeout: Duration::from_millis([500, 2_000, 10_000][rng.gen_range(0..3)]),
            reconnect_retries: rng.gen_range(1..=5),
            reconnect_interval: Duration::from_millis([50, 500][rng.gen_range(0..2)]),
            messages_required_to_save: [1, 16, 1000][rng.gen_range(0..3)],
            hostile: actors::hostile::Hostile::from_seed(seed),
            // Drawn last, so the draws above keep their values for every seed.
            pipeline_records: rng.gen_bool(0.5),
        }
    }
}

/// Why the server's process is going down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Down {
    ProcessCrash,
    PowerLoss,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Safety,
    Liveness,
    Done,
}

/// The ids the setup created: the stream, each topic.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ids {
    pub stream: u32,
    pub topics: [u32; 2],
    pub group: u32,
}

pub struct ServerWorld {
    pub profile: ServerProfile,
    pub rng: ChaCha8Rng,
    pub clock: SimClock,
    pub disk: SimDisk,
    pub net: SimNet,
    /// The server process's `Env` (its tasks in [`SERVER_GROUP`]).
    pub server_env: Env,
    pub clients: ExecutorHandle,
    pub trace: Trace,
    pub report: RunReport,
    pub timeline: Option<Timeline>,
    pub server: Option<Arc<Server>>,
    pub ids: Ids,
    pub phase: Phase,
    pub down: Option<Down>,
    pub ops: u32,
    pub restarts: u32,
    pub violation: Option<Violation>,
    pub oracle: Oracle,
    /// A network partition in force: the client host, and when it heals.
    pub partitioned: Option<(IpAddr, u64)>,
    net_seen: usize,
    disk_seen: usize,
    disk_full_until: Option<u32>,
    /// Successful requests of each client since the liveness phase began.
    pub progress: BTreeMap<String, u32>,
    /// When the server last lost power (virtual nanoseconds), for half-open timeouts.
    pub power_lost_at: Option<u64>,
    /// Each boot's first session number, with its epoch: a reply's session says which
    /// server process answered it.
    boot_sessions: Vec<(u64, u64)>,
    /// The disk's fault records when the running server process booted.
    records_at_boot: usize,
    next_entropy: u64,
}

pub(crate) type Shared = Arc<Mutex<ServerWorld>>;

pub(crate) fn lock(world: &Shared) -> std::sync::MutexGuard<'_, ServerWorld> {
    world.lock().expect("world")
}

impl ServerWorld {
    pub fn event(&mut self, text: impl AsRef<str>) {
        self.trace.event(text);
    }

    pub fn fail(&mut self, v: Violation) {
        if self.violation.is_none() {
            self.event(format!("VIOLATION {v}"));
            if let Some(timeline) = &mut self.timeline {
                let lane = timeline.lane("oracle", LaneKind::Node);
                timeline.mark(lane, self.clock.now_nanos(), MarkKind::Note, v.to_string());
            }
            self.violation = Some(v);
        }
    }

    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen_bool(p.min(1.0))
    }

    pub(crate) fn decision(&mut self, name: &'static str) {
        *self.report.decisions.entry(name).or_default() += 1;
    }

    pub fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// The epoch of the server process that granted `session`.
    pub fn epoch_of_session(&self, session: u64) -> Option<u64> {
        self.boot_sessions
            .iter()
            .rev()
            .find(|(first, _)| *first <= session)
            .map(|(_, epoch)| *epoch)
    }

    /// Whether workload partition `part` (any of them, for `None`) may report nothing now:
    /// a write under its directory was refused for space since this process booted (that
    /// fences the partition), or the node stopped for a fault of the world's.
    pub fn may_be_empty(&self, part: Option<PartKey>) -> bool {
        let dir = |(t, p): PartKey| {
            cairn_engine::partition::partition_dir(
                std::path::Path::new(DATA_DIR),
                self.ids.stream,
                self.ids.topics[t],
                p,
            )
        };
        let fenced = |path: &std::path::Path| match part {
            Some(part) => path.starts_with(dir(part)),
            None => self.oracle.parts.keys().any(|k| path.starts_with(dir(*k))),
        };
        let filled = self
            .disk
            .records_since(self.records_at_boot)
            .iter()
            .any(|r| {
                r.kind == cairn_faults::FaultKind::NoSpace && r.path.as_deref().is_some_and(fenced)
            });
        filled || self.node_stopped() == Some(true)
    }

    /// The cause the world injected, from disk fault record `records` and epoch `epoch` on,
    /// that may make the server refuse a request with code 1 (the node has no space, is
    /// busy, or stopped: the wire carries no more). None when there is none to blame.
    pub fn refusal_cause(&self, records: usize, epoch: u64) -> Option<&'static str> {
        let filled = self
            .disk
            .records_since(records)
            .iter()
            .any(|r| r.kind == cairn_faults::FaultKind::NoSpace);
        if filled {
            return Some("the disk filled");
        }
        self.stop_cause(epoch)
    }

    /// The cause that may make the server refuse with code 1 a request that writes nothing
    /// (a read of the metadata view, a login): only the node stopping or the server going
    /// down since epoch `epoch`; a full disk alone does not.
    pub fn stop_cause(&self, epoch: u64) -> Option<&'static str> {
        if self.node_stopped() == Some(true) {
            return Some("the node stopped");
        }
        if self.oracle.epoch != epoch || self.down.is_some() || self.phase == Phase::Done {
            return Some("the server went down");
        }
        None
    }

    /// Whether this process's node stopped (`None` when it runs), and then whether a fault
    /// of the world's explains it: an I/O error returned to the engine since the process
    /// booted, or the disk crashed under it. A node that stopped on its own is no cause.
    pub fn node_stopped(&self) -> Option<bool> {
        let server = self.server.as_ref()?;
        server.node().failure()?;
        let injected = self
            .disk
            .records_since(self.records_at_boot)
            .iter()
            .any(|r| crate::node_world::judges::IO_ERRORS.contains(&r.kind));
        Some(injected || self.disk.is_crashed())
    }

    pub fn running(&self) -> bool {
        self.phase != Phase::Done && self.violation.is_none()
    }

    /// A fresh `Env` for a client process on host `ip`.
    pub fn client_env(&mut self, ip: IpAddr) -> Env {
        self.next_entropy += 1;
        Env {
            disk: self.server_env.disk.clone(),
            clock: self.server_env.clock.clone(),
            net: Arc::new(self.net.host(ip)),
            tasks: Arc::new(self.clients.clone()),
            entropy: entropy(self.next_entropy ^ 0xc11e),
        }
    }

    /// A mark on the timeline (when one is recorded).
    pub fn mark(&mut self, lane: &str, kind: LaneKind, mark: MarkKind, label: String) {
        let now = self.now();
        if let Some(timeline) = &mut self.timeline {
            let lane = timeline.lane(lane, kind);
            timeline.mark(lane, now, mark, label);
        }
    }

    /// What the network and the disk did since the last look: coverage and marks.
    pub fn observe(&mut self) {
        let events = self.net.events_since(self.net_seen);
        self.net_seen += events.len();
        for event in events {
            let name = match event {
                NetEvent::Reset { delivered, .. } if delivered > 0 => Some("ResetMidFrame"),
                NetEvent::BackPressure { .. } => Some("BackPressure"),
                NetEvent::StaleConnection { .. } => Some("HalfOpen"),
                _ => None,
            };
            if let Some(name) = name {
                self.decision(name);
            }
            if !matches!(event, NetEvent::BackPressure { .. }) {
                self.mark(
                    "network",
                    LaneKind::Network,
                    MarkKind::NetFault,
                    format!("{event:?}"),
                );
            }
        }
        let records = self.disk.records_since(self.disk_seen);
        self.disk_seen += records.len();
        for record in records {
            let label = format!("{:?} {:?} {}", record.kind, record.path, record.detail);
            self.mark("disk", LaneKind::Disk, MarkKind::DiskFault, label);
        }
    }

    /// The faults after every request while the server is up in the safety phase.
    pub fn nemesis(&mut self) {
        self.observe();
        self.check_budgets();
        if self.phase != Phase::Safety || self.server.is_none() || self.down.is_some() {
            return;
        }
        if self.disk.is_crashed() {
            // An armed crash struck inside a disk call: the process dies there.
            self.down = Some(Down::ProcessCrash);
            return;
        }
        self.network_partitions();
        let fill = self.disk_full_until.is_none() && self.chance(self.profile.disk_full);
        match self.disk_full_until {
            Some(until) if self.ops >= until => {
                let mut faults = self.disk.faults();
                faults.capacity = None;
                self.disk.set_faults(faults);
                self.disk_full_until = None;
                self.event("the disk has room again");
            }
            None if fill => {
                let mut faults = self.disk.faults();
                faults.capacity = Some(self.disk.used_bytes() + self.rng.gen_range(0..4096));
                self.disk.set_faults(faults);
                self.disk_full_until = Some(self.ops + self.rng.gen_range(2..20));
                self.event("fault the disk is full");
                self.mark(
                    "disk",
                    LaneKind::Disk,
                    MarkKind::DiskFault,
                    "disk full".into(),
                );
            }
            _ => {}
        }
        if self.restarts >= MAX_RESTARTS {
            return;
        }
        if self.chance(self.profile.power_loss) {
            self.down = Some(Down::PowerLoss);
        } else if self.chance(self.profile.process_crash) {
            self.down = Some(Down::ProcessCrash);
        } else if self.chance(self.profile.mid_operation_crash) {
            let n = self.rng.gen_range(0..8);
            self.disk.arm_crash(n);
            self.event(format!("fault crash armed at mutating call +{n}"));
        }
    }

    /// The budget invariant: the request bodies the server holds stay within its byte
    /// budget (plus what a body of at most the small size, charged without waiting so
    /// that logins and polls are never held back by large bodies, may overdraw: one per
    /// connection), the replies it holds within the reply budget, and what replies were
    /// built past their reservations (counted in their users' shares only:
    /// [`cairn_server::command::replies::Shares::overdrawn`]) within one frame per
    /// connection.
    fn check_budgets(&mut self) {
        let Some(server) = &self.server else {
            return;
        };
        let cx = server.context();
        let small = u64::from(cairn_server::tcp::connection::MAX_ANONYMOUS_FRAME);
        let (bodies, bodies_total) = (cx.buffers.held(), cx.buffers.total());
        let overdraw = small * cx.registry.len() as u64;
        let (replies, replies_total) = (cx.replies.held(), cx.replies.total());
        let overdrawn = cx.replies.overdrawn();
        if bodies > bodies_total + overdraw {
            let why = format!("request bodies hold {bodies} bytes, past the budget {bodies_total} and the {overdraw} small bodies may overdraw");
            return self.fail(violation(INV_BUDGET, why));
        }
        let frame = u64::from(cairn_server::tcp::ServerLimits::default().max_frame_bytes);
        let excess = frame * cx.registry.len() as u64;
        if replies > replies_total || overdrawn > excess {
            let why = format!("replies hold {replies} bytes of the budget {replies_total}, and {overdrawn} built past their reservations (at most {excess}: a frame per connection)");
            return self.fail(violation(INV_BUDGET, why));
        }
        if (bodies > 0 || replies > 0) && !self.profile.hostile.clients.is_empty() {
            self.decision("BudgetHeld");
        }
    }

    /// A partition between one client host and the server begins, or the one in force
    /// heals once its time is up.
    fn network_partitions(&mut self) {
        let now = self.now();
        let start = self.partitioned.is_none() && {
            let p = self.profile.net_partition;
            self.chance(p)
        };
        match self.partitioned {
            Some((host, until)) if now >= until => {
                self.net.heal_partition(host, SERVER_IP);
                self.partitioned = None;
                self.decision("PartitionHealed");
                self.event(format!("network partition {host} | server healed"));
                self.mark(
                    "network",
                    LaneKind::Network,
                    MarkKind::Heal,
                    format!("{host} healed"),
                );
            }
            None if start => {
                let hosts = actors::client_hosts(&self.profile);
                let host = hosts[self.rng.gen_range(0..hosts.len())];
                let (lo, hi) = self.profile.partition_nanos;
                let until = now + self.rng.gen_range(lo..hi);
                self.net.partition(host, SERVER_IP);
                self.partitioned = Some((host, until));
                self.event(format!(
                    "fault network partition {host} | server until {until}"
                ));
                self.mark(
                    "network",
                    LaneKind::Network,
                    MarkKind::Partition,
                    format!("{host} cut off"),
                );
            }
            _ => {}
        }
    }
}

/// Runs one server-scope seed.
pub fn run(seed: u64, verbose: bool, record: bool, report: RunReport) -> RunReport {
    let profile = ServerProfile::from_seed(seed);
    let Machine {
        clock,
        disk,
        mut executor,
        net,
    } = Machine::new(seed);
    disk.set_latency_debt(profile.disk_latency_nanos.0, profile.disk_latency_nanos.1);
    let server_env = Env {
        disk: Arc::new(disk.clone()),
        clock: Arc::new(clock.clone()),
        net: Arc::new(net.host(SERVER_IP)),
        tasks: Arc::new(executor.handle().in_group(SERVER_GROUP)),
        entropy: Machine::entropy(seed),
    };
    let mut trace = Trace::new(verbose, clock.clone());
    trace.event(format!("server profile {profile:?}"));
    let timeline = record.then(|| {
        disk.enable_call_log(clock.clone(), crate::timeline::MAX_ITEMS);
        Timeline::new(format!("cairn-sim seed {seed:#x} (server scope)"))
    });
    let world: Shared = Arc::new(Mutex::new(ServerWorld {
        rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5e4e),
        clients: executor.handle().in_group(CLIENT_GROUP),
        profile,
        clock,
        disk,
        net,
        server_env,
        trace,
        report,
        timeline,
        server: None,
        ids: Ids::default(),
        phase: Phase::Safety,
        down: None,
        ops: 0,
        restarts: 0,
        violation: None,
        oracle: Oracle::default(),
        partitioned: None,
        net_seen: 0,
        disk_seen: 0,
        disk_full_until: None,
        progress: BTreeMap::new(),
        power_lost_at: None,
        boot_sessions: Vec::new(),
        records_at_boot: 0,
        next_entropy: seed,
    }));
    if let Err(v) = setup(&world, &mut executor) {
        lock(&world).fail(v);
    } else {
        actors::spawn(&world);
        if let Err(v) = safety(&world, &mut executor) {
            lock(&world).fail(v);
        }
        if lock(&world).violation.is_none() {
            if let Err(v) = liveness(&world, &mut executor) {
                lock(&world).fail(v);
            }
        }
    }
    lock(&world).phase = Phase::Done;
    executor.kill_all();
    finish(&world)
}

fn safety(world: &Shared, executor: &mut Executor) -> Result<(), Violation> {
    loop {
        // A crash that strikes inside a disk call kills the process there: it answers
        // nothing more (checked before every poll of the executor).
        let keep_going = || {
            let w = lock(world);
            w.violation.is_none()
                && w.down.is_none()
                && w.ops < w.profile.steps
                && !w.disk.is_crashed()
        };
        let stopped = executor.run_while(MAX_EPOCH_POLLS, u64::MAX, &keep_going);
        let down = {
            let mut w = lock(world);
            if w.violation.is_some() {
                return Ok(());
            }
            if stopped == crate::executor::Stop::Budget {
                return Err(violation(INV_LIVENESS, format!("the executor made {MAX_EPOCH_POLLS} polls without the workload finishing (a livelock)")));
            }
            if w.disk.is_crashed() && w.down.is_none() {
                w.event("fault the armed crash struck inside a disk call");
                w.down = Some(Down::ProcessCrash);
            }
            w.down.take()
        };
        match down {
            Some(down) => {
                go_down(world, executor, down);
                boot(world, executor, false)?;
            }
            None => return Ok(()),
        }
    }
}

/// Faults healed: the server restarts, every client must make [`LIVENESS_REQUESTS`]
/// successful requests within [`LIVENESS_BUDGET`]; then a graceful shutdown keeps every
/// acknowledged message.
fn liveness(world: &Shared, executor: &mut Executor) -> Result<(), Violation> {
    {
        let mut w = lock(world);
        w.event("phase liveness: faults healed");
        w.net.heal();
        let calm = NetFaults {
            reset: None,
            spike: None,
            ..w.profile.net
        };
        w.net.set_faults(calm);
        w.partitioned = None;
        w.disk.heal();
        w.disk.disarm_crash();
        w.disk_full_until = None;
        w.phase = Phase::Liveness;
        w.progress.clear();
    }
    // The server that ran through the faults serves once they heal — unless the disk
    // filled (a write refused for space fences its partition until a restart) or the node
    // stopped on a metadata failure (it waits for a restart by design).
    let (filled, failed) = {
        let w = lock(world);
        // Only this process's disk fills count: a restart unfences what earlier ones hit.
        let filled = w
            .disk
            .records_since(w.records_at_boot)
            .iter()
            .any(|r| r.kind == cairn_faults::FaultKind::NoSpace);
        (filled, w.node_stopped())
    };
    if failed == Some(false) {
        return Err(violation(
            INV_LIVENESS,
            "the node stopped, with no fault to blame (no I/O error, no disk crash this process)"
                .into(),
        ));
    }
    let failed = failed.is_some();
    if filled || failed {
        lock(world).event(format!(
            "liveness before the restart not judged: disk filled {filled}, node failed {failed}"
        ));
    } else {
        progress(world, executor, "the server that ran through the faults")?;
    }
    go_down(world, executor, Down::ProcessCrash);
    boot(world, executor, false)?;
    lock(world).progress.clear();
    progress(world, executor, "the restarted server")?;
    graceful(world, executor)
}

/// Every client (the user's session aside) makes [`LIVENESS_REQUESTS`] successful requests
/// within [`LIVENESS_BUDGET`] of virtual time.
fn progress(world: &Shared, executor: &mut Executor, of: &str) -> Result<(), Violation> {
    let deadline = lock(world).now() + LIVENESS_BUDGET.as_nanos() as u64;
    let everyone = actors::names(&lock(world).profile);
    let done = || {
        let w = lock(world);
        w.violation.is_some()
            || everyone
                .iter()
                .all(|n| w.progress.get(n).copied().unwrap_or(0) >= LIVENESS_REQUESTS)
    };
    executor.run_while(MAX_EPOCH_POLLS, deadline, &|| !done());
    {
        let w = lock(world);
        if w.violation.is_some() {
            return Ok(());
        }
        if let Some(slow) = everyone
            .iter()
            .find(|n| w.progress.get(*n).copied().unwrap_or(0) < LIVENESS_REQUESTS)
        {
            return Err(violation(INV_LIVENESS, format!("{slow}: fewer than {LIVENESS_REQUESTS} successful requests within {LIVENESS_BUDGET:?} of virtual time after faults healed, from {of} ({:?})", w.progress)));
        }
    }
    Ok(())
}

/// A graceful shutdown, then a boot that must hold every acknowledged message.
fn graceful(world: &Shared, executor: &mut Executor) -> Result<(), Violation> {
    // A graceful shutdown: every acknowledged message, replicated too, survives it.
    let (server, handle) = {
        let mut w = lock(world);
        w.phase = Phase::Done;
        w.event("graceful shutdown");
        (w.server.clone(), w.clients.in_group(SERVER_GROUP))
    };
    executor.kill_group(CLIENT_GROUP);
    if let Some(server) = server {
        let shut = block(executor, &handle, async move { server.shutdown().await });
        if !matches!(shut, Some(Ok(()))) {
            return Err(violation(
                INV_LIVENESS,
                format!("graceful shutdown failed: {shut:?}"),
            ));
        }
    }
    {
        let mut w = lock(world);
        executor.kill_group(SERVER_GROUP);
        w.server = None;
        w.disk.process_crash();
        w.oracle.crashed(false);
    }
    boot(world, executor, true)
}

fn finish(world: &Shared) -> RunReport {
    let mut w = lock(world);
    w.observe();
    let records = w.disk.records();
    w.report.count_faults(&records);
    let net_events = w.net.event_count();
    w.event(format!("network events {net_events}"));
    let now = w.now();
    let violation = w.violation.clone();
    if let Some(mut timeline) = w.timeline.take() {
        owner_lanes(&mut timeline, &w.disk);
        let verdict = violation.as_ref().map(|v| crate::timeline::Verdict {
            at_nanos: now,
            invariant: v.invariant.to_string(),
            evidence: v.evidence.clone(),
            spans: actors::named_spans(&timeline, &v.evidence),
        });
        timeline.finish(now, verdict);
        w.report.timeline = Some(Box::new(timeline));
    }
    let ops = w.ops;
    w.report.acked_messages = w.oracle.parts.values().map(|p| p.acked.len() as u64).sum();
    w.report
        .clone()
        .finished(violation, ops, &w.clock, &w.trace)
}

/// The owners' lanes: every mutating disk call, on the lane of the owner that made it (the
/// metadata owner for `metadata/`, a partition's own lane for its files: the shard that owns
/// a partition is a placement of one process, and a seed's run spans several).
fn owner_lanes(timeline: &mut Timeline, disk: &SimDisk) {
    let (calls, dropped) = disk.call_log();
    timeline.dropped += dropped;
    for call in calls {
        let Some(path) = &call.path else { continue };
        let text = path.to_string_lossy();
        let lane = match partition_key(&text) {
            Some((s, t, p)) => format!("partition {s}/{t}/{p}"),
            None if text.contains("/metadata") => "metadata owner".to_string(),
            None => "node (other files)".to_string(),
        };
        let lane = timeline.lane(&lane, LaneKind::Owner);
        let file = path
            .file_name()
            .map_or(text.to_string(), |f| f.to_string_lossy().into_owned());
        let id = timeline.begin(lane, call.at_nanos, format!("{:?} {file}", call.call));
        timeline.end(id, call.at_nanos, SpanOutcome::Ok);
    }
}

/// The partition key of a path under `streams/<s>/topics/<t>/partitions/<p>/`.
fn partition_key(path: &str) -> Option<cairn_engine::node::PartitionKey> {
    let rest = path.split("/streams/").nth(1)?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [s, "topics", t, "partitions", p, ..] => {
            Some((s.parse().ok()?, t.parse().ok()?, p.parse().ok()?))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn partition_files_belong_to_their_shard_and_metadata_to_its_owner() {
        let key = super::partition_key("/cairn/streams/2/topics/1/partitions/3/00000.log");
        assert_eq!(key, Some((2, 1, 3)));
        assert_eq!(super::partition_key("/cairn/metadata/journal.wal"), None);
        assert_eq!(super::partition_key("/cairn/streams/2/topics/1"), None);
    }
}

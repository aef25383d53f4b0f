//! One replica of the metadata consensus group: its log, its state machine, its Raft node
//! and the listener its peers reach it on.

use crate::log::{LogOpenError, LogStore};
use crate::net::{identify, serve_peers, AddressedHook, AppendedHook, PeerKey, PeerNetwork};
use crate::rt::{in_env, EnvInstant};
use crate::sm::{ApplyObserver, MetaMachine};
use crate::types::{
    member_of, show_id, LogId, MemberId, MetaCommand, MetaOutcome, NodeId, Peer, Raft,
};
use cairn_engine::env::{Env, TaskHandle};
use openraft::errors::{ClientWriteError, RaftError};
use openraft::metrics::SerdeInstant;
use openraft::{ChangeMembers, SnapshotPolicy};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Entries between two snapshots of the state (each snapshot lets the log before it go).
pub const SNAPSHOT_EVERY: u64 = 1024;

/// How long one peer may take to say who it is.
const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the founder asks the members again while one has not answered.
const FOUND_RETRY: Duration = Duration::from_millis(200);
/// How long a new learner may take to hold everything committed before it becomes a voter.
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);
const CATCH_UP_POLL: Duration = Duration::from_millis(20);
/// How many committed entries a learner may still lack when it becomes a voter.
const CATCH_UP_LAG: u64 = 64;
/// How long a stopping leader waits for another replica to take over.
pub const HANDOVER_TIMEOUT: Duration = Duration::from_secs(2);
const HANDOVER_POLL: Duration = Duration::from_millis(5);
/// How often [`Replica::stopped`] looks.
const STOPPED_POLL: Duration = Duration::from_millis(200);

/// A new replica's incarnation, drawn by the simulator instead of at random (a canary's
/// hook: production leaves it `None`).
pub type IncarnationHook = Arc<dyn Fn(MemberId) -> u32 + Send + Sync>;

/// What the simulator may install in a replica; all `None` in production.
#[derive(Clone, Default)]
pub struct GroupHooks {
    pub incarnation: Option<IncarnationHook>,
    /// Decides whether a peer's request is this replica's instead of "addressed to exactly
    /// this Raft id" (`crate::net`).
    pub addressed: Option<AddressedHook>,
    /// The state machine applies the entries of every append a leader sends as they
    /// arrive, before they commit ([`MetaMachine::apply_uncommitted`]).
    pub apply_uncommitted: bool,
    /// The key an op's attempt carries, given the op's key and the attempt's number
    /// (`crate::decide`: production keeps the op's key for every attempt).
    pub rekey: Option<RekeyHook>,
    /// The index a member waits to apply before a fresh read, given the leader's read
    /// index (`crate::decide`: production waits for the read index itself).
    pub read_index: Option<ReadIndexHook>,
}

/// The index a fresh read waits for (a canary's hook: production leaves it `None`).
pub type ReadIndexHook = Arc<dyn Fn(u64) -> u64 + Send + Sync>;

/// The key of an op's attempt (a canary's hook: production leaves it `None`).
pub type RekeyHook = Arc<dyn Fn(u128, u32) -> u128 + Send + Sync>;

/// What a replica is started with.
#[derive(Clone)]
pub struct GroupConfig {
    /// The cluster's id: every peer request carries it, and the replica's state record holds it.
    pub cluster: u128,
    /// The cluster's shared secret: every connection between peers proves it
    /// ([`crate::net`]).
    pub key: PeerKey,
    pub me: MemberId,
    /// Every member at bootstrap, this node included.
    pub members: BTreeMap<MemberId, Peer>,
    /// The replica's directory (`{data}/cluster/metadata`).
    pub dir: PathBuf,
    pub heartbeat: Duration,
    /// An election starts after a random wait in this range without a leader's heartbeat.
    pub election: (Duration, Duration),
    /// Make the group from `members` if it was never made. Only the founder (the lowest
    /// member id) does, and only once every member answers that it holds none of the
    /// group's log or state (a vote alone does not count) and says who it is ([`crate::net::identify`]): a founder that lost its data while the group
    /// lives finds members that hold it, and starts as a new replica instead.
    pub bootstrap: bool,
    /// Entries between snapshots ([`SNAPSHOT_EVERY`] unless a test wants them sooner).
    pub snapshot_every: u64,
    /// The simulator's view of every applied entry; production leaves it empty.
    pub observer: Option<ApplyObserver>,
    pub hooks: GroupHooks,
    /// The node that applies the group's commands (`MetaMachine::with_node`); `None` keeps
    /// the state in the machine (the simulator's cluster world).
    pub node: Option<cairn_engine::node::Node>,
    /// How long one attempt to decide an op, or to read the leader's read index, waits
    /// (`crate::decide::DECIDE_TIMEOUT` by default).
    pub decide_timeout: Duration,
}

impl GroupConfig {
    /// A configuration with the timings of a LAN: heartbeats every 50 ms, elections after
    /// 150 to 300 ms of silence.
    pub fn new(
        (cluster, key): (u128, PeerKey),
        me: MemberId,
        members: BTreeMap<MemberId, Peer>,
        dir: PathBuf,
    ) -> GroupConfig {
        GroupConfig {
            cluster,
            key,
            me,
            members,
            dir,
            heartbeat: Duration::from_millis(50),
            election: (Duration::from_millis(150), Duration::from_millis(300)),
            bootstrap: false,
            snapshot_every: SNAPSHOT_EVERY,
            observer: None,
            hooks: GroupHooks::default(),
            node: None,
            decide_timeout: crate::decide::DECIDE_TIMEOUT,
        }
    }
}

/// Polls (of `HANDOVER_POLL`) a change waits for the metrics to show its configuration.
const SETTLE_POLLS: u32 = 100;

/// Why a replica did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("member {me} is not among the cluster's members")]
    NotAMember { me: MemberId },
    #[error("the replication address {addr:?} of member {member} does not parse")]
    BadAddress { member: MemberId, addr: String },
    #[error(transparent)]
    Log(#[from] LogOpenError),
    #[error("the group's state machine: {0}")]
    Machine(io::Error),
    #[error("listening for peers on {addr}: {source}")]
    Listen { addr: String, source: io::Error },
    #[error("openraft refused the configuration: {0}")]
    Config(String),
    #[error("openraft failed: {0}")]
    Raft(String),
}

/// Why a proposal was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum ProposeError {
    /// Nothing was appended: another node leads (if one is known).
    #[error("node {me} does not lead the group (the leader is {leader:?})")]
    NotLeader { me: NodeId, leader: Option<NodeId> },
    /// The entry may have been appended, then the leader changed or the node stopped before
    /// the answer: whether it commits is unknown.
    #[error(
        "the proposal's fate is unknown (a change of leader or a stop): it may or may not apply"
    )]
    InDoubt,
    /// Refused before anything was appended (a precondition, a member that cannot be
    /// added).
    #[error("the replica refused: {0}")]
    Failed(String),
    /// Refused before anything was appended because an earlier request of its kind is
    /// still running there (a membership change): ask again later.
    #[error("the replica is busy: {0}")]
    Busy(String),
}

/// A change of the group's voters, decided by consensus (openraft's joint consensus).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberChange {
    /// `member`'s replica at `peer` becomes a voter: first a learner until it caught up,
    /// then a voter in place of any earlier replica of the same member (one whose disk was
    /// wiped or whose state was lost).
    Add { member: MemberId, peer: Peer },
    /// `member`'s replicas leave the group.
    Remove { member: MemberId },
}

/// The group as one replica sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    pub me: NodeId,
    pub leader: Option<NodeId>,
    /// The term this replica is in.
    pub term: u64,
    /// The voters of the committed configuration (of both its halves while a change is
    /// joint).
    pub voters: BTreeMap<NodeId, Peer>,
    pub learners: BTreeMap<NodeId, Peer>,
    /// A change is half done: the old and the new voters must both agree (openraft leaves
    /// it so when the leader changes in between; the next change finishes it).
    pub joint: bool,
    /// On the leader: the last log index each replica is known to hold.
    pub matched: BTreeMap<NodeId, Option<u64>>,
    pub last_applied: Option<u64>,
    /// On the leader: how long ago (ms) each other replica last answered its heartbeat
    /// (absent: never, since this replica leads).
    #[serde(default)]
    pub heard_ms: BTreeMap<NodeId, u64>,
    /// This member's partition groups (none before they are installed; counted only by
    /// [`Replica::status_with_partitions`]).
    #[serde(default)]
    pub partitions: PartitionsLed,
}

/// How many partition groups a member runs a replica of, how many of them it leads, and
/// in how many its replica is a voter of a settled configuration (a member added back
/// counts in the quorum of the others only once this reaches `running`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionsLed {
    pub running: u64,
    pub led: u64,
    #[serde(default)]
    pub voting: u64,
}

impl GroupStatus {
    /// Whether the replica that answered says it leads.
    pub fn leads(&self) -> bool {
        self.leader == Some(self.me)
    }
}

/// Of `statuses`, a replica's that says it leads, in the highest term: a leader cut off from
/// the rest may not know yet that it was deposed, and a removed replica names the last
/// leader it heard of forever, so neither a claim alone nor a naming is enough.
pub fn highest_leader<'a>(
    statuses: impl IntoIterator<Item = &'a GroupStatus>,
) -> Option<&'a GroupStatus> {
    statuses
        .into_iter()
        .filter(|s| s.leads())
        .max_by_key(|s| (s.term, s.me))
}

/// A running replica's Raft node and what its requests need: what the peer listener
/// serves administrators with, and what [`MetaGroup`] derefs to.
#[derive(Clone)]
pub struct Replica {
    pub(crate) env: Env,
    pub(crate) me: NodeId,
    pub(crate) raft: Raft,
    pub(crate) cluster: u128,
    pub(crate) key: PeerKey,
    /// Turns to forward an op to the leader (`decide::MAX_FORWARDS`).
    pub(crate) forwards: cairn_engine::env::chan::Semaphore,
    /// Turns to propose a forwarded op, as the leader (`net::MAX_PROPOSING`).
    pub(crate) proposing: cairn_engine::env::chan::Semaphore,
    pub(crate) rekey: Option<RekeyHook>,
    pub(crate) decide_timeout: Duration,
    /// Turns to ask the leader for a read index (`decide::MAX_READS`).
    pub(crate) reads: cairn_engine::env::chan::Semaphore,
    /// One membership change at a time on this replica: a second, arriving while the
    /// first adds a learner, hands leadership over or waits for its commit, is refused.
    pub(crate) changing: cairn_engine::env::chan::Semaphore,
    pub(crate) read_index: Option<ReadIndexHook>,
    /// Who answers partition groups' requests on this member, once they run.
    pub(crate) parts: Arc<std::sync::OnceLock<Arc<dyn crate::partition::net::PartServe>>>,
}

/// A running replica.
pub struct MetaGroup {
    replica: Replica,
    log: LogStore,
    machine: MetaMachine,
    /// The peer listener's task and the founder's, if this replica founds the group (in a
    /// mutex only to make the group `Sync`).
    tasks: std::sync::Mutex<Vec<Box<dyn TaskHandle>>>,
}

impl MetaGroup {
    /// Opens the replica's storage, starts its Raft node and its peer listener, and, when
    /// this replica founds a group never made, makes it from `config.members`
    /// ([`GroupConfig::bootstrap`]).
    pub async fn start(env: &Env, config: GroupConfig) -> Result<MetaGroup, StartError> {
        let member = config.me;
        if !config.members.contains_key(&member) {
            return Err(StartError::NotAMember { me: member });
        }
        let mut addrs = BTreeMap::new();
        for (&m, peer) in &config.members {
            let addr: SocketAddr = peer.raft.parse().map_err(|_| StartError::BadAddress {
                member: m,
                addr: peer.raft.clone(),
            })?;
            addrs.insert(m, addr);
        }
        let log = LogStore::open_drawing(
            env,
            &config.dir,
            config.cluster,
            member,
            config.hooks.incarnation.as_deref(),
        )
        .await?;
        let me = log.id();
        let (vote, purged, last) = log.summary();
        // The replica holds some of the group (a vote alone is not the group's state).
        let stored = purged.is_some() || last.is_some();
        let fresh = vote.is_none() && !stored;
        let machine = MetaMachine::open(
            env.disk.clone(),
            &config.dir,
            config.cluster,
            config.observer.clone(),
        )
        .map_err(StartError::Machine)?;
        // A follower further behind than the log kept behind the snapshot is sent the
        // snapshot, which its node adopts (`Node::adopt`).
        let machine = match config.node.clone() {
            Some(node) => machine.with_node(node).map_err(StartError::Machine)?,
            None => machine,
        };
        let log_kept = config.snapshot_every / 4;
        let listener =
            env.net
                .listen(addrs[&member])
                .await
                .map_err(|source| StartError::Listen {
                    addr: config.members[&member].raft.clone(),
                    source,
                })?;
        let millis = |d: Duration| d.as_millis() as u64;
        let raft_config = openraft::Config {
            cluster_name: format!("{:032x}", config.cluster),
            heartbeat_interval: millis(config.heartbeat),
            election_timeout_min: millis(config.election.0),
            election_timeout_max: millis(config.election.1),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every),
            max_in_snapshot_log_to_keep: log_kept,
            enable_pre_vote: Some(true),
            // A whole snapshot goes in one request (up to `MAX_SNAPSHOT_LEN`, and the
            // follower's syncs): openraft's default of 200 ms would resend it forever.
            install_snapshot_timeout: 60_000,
            ..Default::default()
        }
        .validate()
        .map_err(|e| StartError::Config(e.to_string()))?;
        let network = PeerNetwork::new(env, config.cluster, config.key.clone(), me);
        tracing::info!(replica = %show_id(me), "starting a replica of the metadata group");
        let raft = in_env(
            env,
            Raft::new(
                me,
                Arc::new(raft_config),
                network,
                log.clone(),
                machine.clone(),
            ),
        )
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
        let replica = Replica {
            env: env.clone(),
            me,
            raft: raft.clone(),
            cluster: config.cluster,
            key: config.key.clone(),
            forwards: cairn_engine::env::chan::Semaphore::new(crate::decide::MAX_FORWARDS),
            proposing: cairn_engine::env::chan::Semaphore::new(crate::net::MAX_PROPOSING),
            rekey: config.hooks.rekey.clone(),
            reads: cairn_engine::env::chan::Semaphore::new(crate::decide::MAX_READS),
            changing: cairn_engine::env::chan::Semaphore::new(1),
            decide_timeout: config.decide_timeout,
            read_index: config.hooks.read_index.clone(),
            parts: Arc::default(),
        };
        let appended = config.hooks.apply_uncommitted.then(|| {
            let machine = machine.clone();
            Arc::new(move |entries: &[crate::types::Entry]| machine.apply_uncommitted(entries))
                as AppendedHook
        });
        let serve = serve_peers(
            replica.clone(),
            listener,
            config.key.clone(),
            stored,
            (config.hooks.addressed.clone(), appended),
        );
        let mut tasks = vec![env.tasks.spawn(Box::pin(in_env(env, serve)))];
        let founder = config.members.keys().next() == Some(&member);
        if fresh && config.bootstrap && founder {
            let found = found(replica.clone(), config.members, addrs);
            tasks.push(env.tasks.spawn(Box::pin(in_env(env, found))));
        }
        Ok(MetaGroup {
            replica,
            log,
            machine,
            tasks: std::sync::Mutex::new(tasks),
        })
    }

    pub fn machine(&self) -> &MetaMachine {
        &self.machine
    }

    pub fn log(&self) -> &LogStore {
        &self.log
    }

    /// Hands the leadership of its partition groups and then its own over
    /// ([`Replica::hand_over`], each within [`HANDOVER_TIMEOUT`]), then stops: a graceful
    /// shutdown.
    pub async fn stop(&self) -> Option<NodeId> {
        if let Some(parts) = self.replica.parts.get() {
            parts.hand_over(HANDOVER_TIMEOUT).await;
        }
        let leader = self.hand_over(HANDOVER_TIMEOUT).await;
        self.shutdown().await;
        leader
    }

    /// Stops the Raft node and the listener.
    pub async fn shutdown(&self) {
        for task in self.tasks.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            task.cancel();
        }
        let _ = in_env(&self.env, self.raft.shutdown()).await;
    }
}

impl std::ops::Deref for MetaGroup {
    type Target = Replica;

    fn deref(&self) -> &Replica {
        &self.replica
    }
}

impl Replica {
    /// Proposes `command`; answers once it is committed and applied here, with its index.
    pub async fn propose(&self, command: MetaCommand) -> Result<(u64, MetaOutcome), ProposeError> {
        match in_env(&self.env, self.raft.client_write(command)).await {
            Ok(written) => Ok((written.log_id.index, written.data)),
            Err(e) => Err(self.write_error(e)),
        }
    }

    fn write_error(
        &self,
        e: RaftError<crate::types::MetaConfig, ClientWriteError<crate::types::MetaConfig>>,
    ) -> ProposeError {
        match e.into_api_error() {
            Some(ClientWriteError::ForwardToLeader(f)) => ProposeError::NotLeader {
                me: self.me,
                leader: f.leader_id,
            },
            Some(ClientWriteError::LogEntryDiscarded(_)) => ProposeError::InDoubt,
            Some(other) => ProposeError::Failed(other.to_string()),
            // The node stopped with the proposal handed over: its entry may be in the log
            // already, and may commit.
            None => ProposeError::InDoubt,
        }
    }

    /// Changes the group's voters ([`MemberChange`]); on the leader. Answers once the new
    /// configuration is committed. One change at a time per replica: another arriving
    /// meanwhile is refused (`Busy`). Repeating a change that took effect does nothing. A
    /// leader asked to remove its own member hands leadership over first and answers
    /// `NotLeader`, naming the one to ask (a leader outside its configuration would lead
    /// on until openraft noticed).
    ///
    /// An added replica first becomes a learner and must hold what is committed, but for
    /// the last few entries, within [`CATCH_UP_TIMEOUT`], before it votes. The change is then stated relative to the
    /// configuration openraft holds when it applies it (remove this member's other
    /// replicas, add this one: one joint-consensus change), never as a voter set read
    /// earlier, which a change made meanwhile could have made stale.
    pub async fn change(&self, change: MemberChange) -> Result<GroupStatus, ProposeError> {
        let Some(_turn) = self.changing.try_acquire() else {
            return Err(ProposeError::Busy(
                "another membership change is in progress on this replica".into(),
            ));
        };
        let status = self.status();
        if status.leader != Some(self.me) {
            return Err(ProposeError::NotLeader {
                me: self.me,
                leader: status.leader,
            });
        }
        // The configuration this leader has committed may not be the group's yet: a change
        // an earlier leader appended may still commit, until this leader committed an entry
        // of its own term. Read it once everything through its last entry is applied (a
        // change found already made is then made for good).
        if !self.linearize().await {
            return Err(ProposeError::NotLeader {
                me: self.me,
                leader: None,
            });
        }
        let status = self.status();
        let (member, added) = match &change {
            MemberChange::Remove { member }
                if *member == member_of(self.me)
                    && status.voters.keys().any(|v| member_of(*v) != *member) =>
            {
                let leader = self.hand_over(HANDOVER_TIMEOUT).await;
                return Err(ProposeError::NotLeader {
                    me: self.me,
                    leader: leader.filter(|l| *l != self.me),
                });
            }
            MemberChange::Add { member, peer } => {
                let id = self.identify(*member, peer).await?;
                if member_of(id) == member_of(self.me) && id != self.me {
                    // Replacing the leader's own replica would remove the leader without a
                    // handover: the administrator stops it first.
                    return Err(ProposeError::Failed(format!(
                        "replica {} of member {member} leads: stop it before another replica of the member replaces it",
                        show_id(self.me)
                    )));
                }
                let others = status
                    .voters
                    .keys()
                    .any(|v| member_of(*v) == *member && *v != id);
                if status.voters.contains_key(&id) && !status.joint && !others {
                    return Ok(status);
                }
                if !status.voters.contains_key(&id) {
                    self.add_learner(id, peer).await?;
                }
                (*member, Some(id))
            }
            MemberChange::Remove { member } => (*member, None),
        };
        let status = self.status();
        let of_member = |ids: &BTreeMap<NodeId, Peer>| -> BTreeSet<NodeId> {
            ids.keys()
                .copied()
                .filter(|id| member_of(*id) == member && Some(*id) != added)
                .collect()
        };
        let (old_voters, old_learners) = (of_member(&status.voters), of_member(&status.learners));
        if added.is_none() && old_voters.len() == status.voters.len() {
            return Err(ProposeError::Failed("the group's last voter stays".into()));
        }
        if added.is_none() && old_voters.is_empty() && old_learners.is_empty() && !status.joint {
            return Ok(status);
        }
        let mut steps = vec![
            ChangeMembers::RemoveVoters(old_voters),
            ChangeMembers::RemoveNodes(old_learners),
        ];
        if let Some(id) = added {
            steps.push(ChangeMembers::AddVoterIds(BTreeSet::from([id])));
        }
        let before = self.membership_log_id();
        let changed = self
            .raft
            .change_membership(ChangeMembers::Batch(steps), false);
        in_env(&self.env, changed)
            .await
            .map_err(|e| change_error(self.write_error(e), before, self.membership_log_id()))?;
        // openraft answers once the uniform configuration is committed; its metrics may
        // still show the joint one for a moment: answer with the configuration the change
        // made (within a bound; a later change may keep it joint).
        for _ in 0..SETTLE_POLLS {
            let status = self.status();
            if !status.joint {
                return Ok(status);
            }
            self.env.clock.sleep(HANDOVER_POLL).await;
        }
        Ok(self.status())
    }

    /// The log id of the configuration this replica goes by (committed or not).
    fn membership_log_id(&self) -> Option<LogId> {
        use openraft::async_runtime::WatchReceiver;
        let metrics = self.raft.metrics();
        let id = *metrics.borrow_watched().membership_config.log_id();
        id
    }

    /// Makes `id` a learner and waits until it holds every committed entry.
    async fn add_learner(&self, id: NodeId, peer: &Peer) -> Result<(), ProposeError> {
        let added = self.raft.add_learner(id, peer.clone(), false);
        in_env(&self.env, added)
            .await
            .map_err(|e| self.write_error(e))?;
        let deadline = self.env.clock.monotonic_nanos() + CATCH_UP_TIMEOUT.as_nanos() as u64;
        loop {
            let caught_up = {
                use openraft::async_runtime::WatchReceiver;
                let metrics = self.raft.metrics();
                let metrics = metrics.borrow_watched();
                let matched = metrics
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&id).cloned().flatten());
                let committed = metrics.cluster_committed.as_ref().map(|c| c.index);
                // Within a few entries of the commit (proposals go on meanwhile).
                matched.map(|m| m.index + CATCH_UP_LAG) >= committed
            };
            if caught_up {
                return Ok(());
            }
            if self.env.clock.monotonic_nanos() >= deadline {
                return Err(ProposeError::Failed(format!(
                    "replica {} did not catch up within {CATCH_UP_TIMEOUT:?}",
                    show_id(id)
                )));
            }
            self.env.clock.sleep(CATCH_UP_POLL).await;
        }
    }

    /// The Raft id of `member`'s replica at `peer`. A replica that holds some of this
    /// cluster's state but is not in the configuration (a learner whose addition a leader
    /// change undid, a replica removed earlier) may join too: Raft cuts whatever of its log
    /// the leader's does not hold.
    async fn identify(&self, member: MemberId, peer: &Peer) -> Result<NodeId, ProposeError> {
        let addr: SocketAddr = peer.raft.parse().map_err(|_| {
            ProposeError::Failed(format!("the address {:?} does not parse", peer.raft))
        })?;
        let identity = identify(
            &self.env,
            (self.cluster, &self.key),
            self.me,
            member,
            addr,
            IDENTIFY_TIMEOUT,
        )
        .await
        .map_err(|e| ProposeError::Failed(format!("member {member} at {addr}: {e}")))?;
        Ok(identity.id)
    }

    /// The group's committed configuration, its leader and the progress as this replica
    /// knows them.
    pub fn status(&self) -> GroupStatus {
        use openraft::async_runtime::WatchReceiver;
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let membership = metrics.committed_membership_config.membership();
        let voter_ids: BTreeSet<NodeId> = membership.voter_ids().collect();
        let (voters, learners) = membership
            .nodes()
            .map(|(id, peer)| (*id, peer.clone()))
            .partition(|(id, _)| voter_ids.contains(id));
        GroupStatus {
            me: self.me,
            leader: metrics.current_leader,
            term: metrics.current_term,
            voters,
            learners,
            joint: membership.get_joint_config().len() > 1,
            matched: metrics
                .replication
                .as_ref()
                .map(|r| {
                    r.iter()
                        .map(|(id, l)| (*id, l.as_ref().map(|l| l.index)))
                        .collect()
                })
                .unwrap_or_default(),
            last_applied: metrics.last_applied.as_ref().map(|l| l.index),
            heard_ms: self.heard_ms(metrics.heartbeat.as_ref()),
            partitions: PartitionsLed::default(),
        }
    }

    /// How long ago (ms) each replica in `heartbeat` (the leader's metrics) answered one.
    fn heard_ms(
        &self,
        heartbeat: Option<&BTreeMap<NodeId, Option<SerdeInstant<EnvInstant>>>>,
    ) -> BTreeMap<NodeId, u64> {
        let now = self.env.clock.monotonic_nanos();
        let ago = |at: &SerdeInstant<EnvInstant>| now.saturating_sub(at.reading()) / 1_000_000;
        heartbeat
            .into_iter()
            .flatten()
            .filter_map(|(id, at)| Some((*id, ago(at.as_ref()?))))
            .collect()
    }

    /// [`Replica::status`] with this member's partition groups counted (a walk over every
    /// group: for an administrator and `/metrics`, not for the paths that run per request).
    pub fn status_with_partitions(&self) -> GroupStatus {
        GroupStatus {
            partitions: self
                .parts
                .get()
                .map(|p| p.partitions_led())
                .unwrap_or_default(),
            ..self.status()
        }
    }

    /// The leader this replica knows of.
    pub fn leader(&self) -> Option<NodeId> {
        use openraft::async_runtime::WatchReceiver;
        self.raft.metrics().borrow_watched().current_leader
    }

    /// Waits until the Raft node stops (a storage error, a panic, a shutdown) and says why.
    pub async fn stopped(&self) -> String {
        loop {
            if let Some(why) = self.failure() {
                return why;
            }
            self.env.clock.sleep(STOPPED_POLL).await;
        }
    }

    /// Why the Raft node stopped, if it did (a storage error, a panic, a shutdown).
    pub fn failure(&self) -> Option<String> {
        use openraft::async_runtime::WatchReceiver;
        let metrics = self.raft.metrics();
        let running = &metrics.borrow_watched().running_state;
        running.as_ref().err().map(|fatal| fatal.to_string())
    }

    pub fn id(&self) -> NodeId {
        self.me
    }

    /// The cluster's id.
    pub fn cluster(&self) -> u128 {
        self.cluster
    }

    /// A network to this replica's peers, as this replica (for the partition groups).
    pub(crate) fn peer_network(&self) -> PeerNetwork {
        PeerNetwork::new(&self.env, self.cluster, self.key.clone(), self.me)
    }

    /// If this replica leads, hands leadership to the voter whose log is longest and waits
    /// (at most `limit`) until another replica leads; answers the leader then known. A leader
    /// that stops without this leaves the group leaderless for an election timeout.
    pub async fn hand_over(&self, limit: Duration) -> Option<NodeId> {
        let status = self.status();
        if status.leader != Some(self.me) {
            return status.leader;
        }
        let to = status
            .voters
            .keys()
            .filter(|id| **id != self.me)
            .max_by_key(|id| (status.matched.get(id).copied().flatten(), **id))
            .copied()?;
        tracing::info!(to = %show_id(to), "handing leadership over");
        if in_env(&self.env, self.raft.trigger().transfer_leader(to))
            .await
            .is_err()
        {
            return None;
        }
        let deadline = self.env.clock.monotonic_nanos() + limit.as_nanos() as u64;
        loop {
            let leader = self.leader();
            if leader.is_some_and(|l| l != self.me) {
                return leader;
            }
            if self.env.clock.monotonic_nanos() >= deadline {
                return leader;
            }
            self.env.clock.sleep(HANDOVER_POLL).await;
        }
    }
}

/// The founder's task: asks every member who it is until all answer, then makes the group
/// of their replicas; stops without making it if one answers that it holds a group's state
/// (the group exists, and this replica is a new one that an administrator adds).
async fn found(
    replica: Replica,
    members: BTreeMap<MemberId, Peer>,
    addrs: BTreeMap<MemberId, SocketAddr>,
) {
    let (env, raft, me) = (&replica.env, &replica.raft, replica.me);
    let cluster = (replica.cluster, &replica.key);
    loop {
        let mut replicas = BTreeMap::new();
        let mut exists = None;
        for (&member, peer) in &members {
            if member == member_of(me) {
                replicas.insert(me, peer.clone());
                continue;
            }
            match identify(env, cluster, me, member, addrs[&member], IDENTIFY_TIMEOUT).await {
                Ok(identity) if identity.initialized => exists = Some(identity.id),
                Ok(identity) => {
                    replicas.insert(identity.id, peer.clone());
                }
                Err(e) => tracing::debug!(member, error = %e, "a member did not say who it is yet"),
            }
        }
        if let Some(existing) = exists {
            tracing::warn!(
                existing = %show_id(existing),
                "the group exists: this replica holds no state and waits for an administrator to add it"
            );
            return;
        }
        if replicas.len() == members.len() {
            match raft.initialize(replicas).await {
                Ok(()) => tracing::info!("made the metadata group"),
                Err(e) => tracing::warn!(error = %e, "the group was not made"),
            }
            return;
        }
        env.clock.sleep(FOUND_RETRY).await;
    }
}

/// What a failed membership change means, given the log id of the configuration the replica
/// went by before it (`before`) and after (`after`). openraft makes a change in two entries,
/// the joint configuration and then the uniform one, each its own call into the core: a
/// leader lost between them answers the second `ForwardToLeader` with the joint one already
/// in the log, and perhaps committed (and a second step refused for a precondition, or as a
/// change openraft will not make, is as late). Only a refusal that left the configuration as
/// it found it appended nothing; any other is in doubt.
fn change_error(error: ProposeError, before: Option<LogId>, after: Option<LogId>) -> ProposeError {
    if after != before {
        return ProposeError::InDoubt;
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_id(term: u64, index: u64) -> Option<LogId> {
        type LeaderId = openraft::impls::leader_id_adv::LeaderId<u64, u64>;
        Some(LogId::new(LeaderId { term, node_id: 1 }, index))
    }

    #[test]
    fn a_change_refused_after_the_configuration_moved_is_in_doubt() {
        let not_leader = ProposeError::NotLeader {
            me: 1,
            leader: None,
        };
        let failed = ProposeError::Failed("a precondition".into());
        let cases = [
            // (error, before, after, meaning)
            (
                not_leader.clone(),
                log_id(2, 10),
                log_id(2, 10),
                not_leader.clone(),
            ),
            (not_leader.clone(), None, None, not_leader.clone()),
            // The joint entry was appended: the uniform step's refusal is in doubt.
            (
                not_leader.clone(),
                log_id(2, 10),
                log_id(2, 11),
                ProposeError::InDoubt,
            ),
            (
                not_leader.clone(),
                None,
                log_id(1, 1),
                ProposeError::InDoubt,
            ),
            (failed.clone(), log_id(2, 10), log_id(2, 10), failed.clone()),
            (
                failed.clone(),
                log_id(2, 10),
                log_id(2, 11),
                ProposeError::InDoubt,
            ),
            (
                ProposeError::InDoubt,
                log_id(2, 10),
                log_id(2, 10),
                ProposeError::InDoubt,
            ),
        ];
        for (error, before, after, meaning) in cases {
            assert_eq!(
                change_error(error.clone(), before, after),
                meaning,
                "{error:?}"
            );
        }
    }
}

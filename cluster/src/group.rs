//! One replica of the metadata consensus group: its log, its state machine, its Raft node
//! and the listener its peers reach it on.

use crate::log::{LogOpenError, LogStore};
use crate::net::{serve_peers, PeerNetwork};
use crate::rt::in_env;
use crate::sm::{ApplyObserver, MetaMachine};
use crate::types::{MetaCommand, MetaOutcome, NodeId, Peer, Raft};
use cairn_engine::env::{Env, TaskHandle};
use openraft::errors::ClientWriteError;
use openraft::SnapshotPolicy;
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Entries between two snapshots of the state (each snapshot lets the log before it go).
pub const SNAPSHOT_EVERY: u64 = 1024;

/// What a replica is started with.
#[derive(Clone)]
pub struct GroupConfig {
    /// The cluster's id: every peer request carries it, and the replica's state record holds it.
    pub cluster: u128,
    pub me: NodeId,
    /// Every member at bootstrap, this node included.
    pub members: BTreeMap<NodeId, Peer>,
    /// The replica's directory (`{data}/cluster/metadata`).
    pub dir: PathBuf,
    pub heartbeat: Duration,
    /// An election starts after a random wait in this range without a leader's heartbeat.
    pub election: (Duration, Duration),
    /// Initialize the group from `members` if this replica's log is empty: only when the
    /// cluster is first made. A replica that finds an empty log later lost its data and
    /// must not start a group of its own.
    pub bootstrap: bool,
    /// Entries between snapshots ([`SNAPSHOT_EVERY`] unless a test wants them sooner).
    pub snapshot_every: u64,
    /// The simulator's view of every applied entry; production leaves it empty.
    pub observer: Option<ApplyObserver>,
}

impl GroupConfig {
    /// A configuration with the timings of a LAN: heartbeats every 50 ms, elections after
    /// 150 to 300 ms of silence.
    pub fn new(
        cluster: u128,
        me: NodeId,
        members: BTreeMap<NodeId, Peer>,
        dir: PathBuf,
    ) -> GroupConfig {
        GroupConfig {
            cluster,
            me,
            members,
            dir,
            heartbeat: Duration::from_millis(50),
            election: (Duration::from_millis(150), Duration::from_millis(300)),
            bootstrap: false,
            snapshot_every: SNAPSHOT_EVERY,
            observer: None,
        }
    }
}

/// Why a replica did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("node {me} is not among the cluster's members")]
    NotAMember { me: NodeId },
    #[error("the replication address {addr:?} of node {me} does not parse")]
    BadAddress { me: NodeId, addr: String },
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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
    /// Refused before anything was appended (a membership change in progress, a
    /// precondition).
    #[error("the replica refused: {0}")]
    Failed(String),
}

/// A running replica.
pub struct MetaGroup {
    env: Env,
    me: NodeId,
    raft: Raft,
    log: LogStore,
    machine: MetaMachine,
    /// The peer listener's task (in a mutex only to make the group `Sync`).
    listener: std::sync::Mutex<Box<dyn TaskHandle>>,
}

impl MetaGroup {
    /// Opens the replica's storage, starts its Raft node and its peer listener, and, when
    /// its log is new, bootstraps the group from `config.members` (each member may do so:
    /// openraft lets only replicas with an empty log initialize, all to the same membership).
    pub async fn start(env: &Env, config: GroupConfig) -> Result<MetaGroup, StartError> {
        let me = config.me;
        let peer = config
            .members
            .get(&me)
            .ok_or(StartError::NotAMember { me })?;
        let addr = peer.raft.parse().map_err(|_| StartError::BadAddress {
            me,
            addr: peer.raft.clone(),
        })?;
        let log = LogStore::open(env, &config.dir, config.cluster, me).await?;
        let fresh = log.summary() == (None, None, None);
        let machine = MetaMachine::open(
            env.disk.clone(),
            &config.dir,
            config.cluster,
            config.observer.clone(),
        )
        .map_err(StartError::Machine)?;
        let listener = env
            .net
            .listen(addr)
            .await
            .map_err(|source| StartError::Listen {
                addr: peer.raft.clone(),
                source,
            })?;
        let millis = |d: Duration| d.as_millis() as u64;
        let raft_config = openraft::Config {
            cluster_name: format!("{:032x}", config.cluster),
            heartbeat_interval: millis(config.heartbeat),
            election_timeout_min: millis(config.election.0),
            election_timeout_max: millis(config.election.1),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every),
            max_in_snapshot_log_to_keep: config.snapshot_every / 4,
            enable_pre_vote: Some(true),
            // A whole snapshot goes in one request (up to `MAX_SNAPSHOT_LEN`, and the
            // follower's syncs): openraft's default of 200 ms would resend it forever.
            install_snapshot_timeout: 60_000,
            ..Default::default()
        }
        .validate()
        .map_err(|e| StartError::Config(e.to_string()))?;
        let network = PeerNetwork::new(env, config.cluster, me);
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
        let serve = serve_peers(env.clone(), listener, raft.clone(), config.cluster, me);
        let listener = env.tasks.spawn(Box::pin(in_env(env, serve)));
        if fresh && config.bootstrap {
            let members = config.members.clone();
            if let Err(e) = in_env(env, raft.initialize(members)).await {
                // Another member's bootstrap reached this replica first: nothing to do.
                tracing::debug!(error = %e, "the group was already initialized");
            }
        }
        Ok(MetaGroup {
            env: env.clone(),
            me,
            raft,
            log,
            machine,
            listener: std::sync::Mutex::new(listener),
        })
    }

    /// Proposes `command`; answers once it is committed and applied here, with its index.
    pub async fn propose(&self, command: MetaCommand) -> Result<(u64, MetaOutcome), ProposeError> {
        match in_env(&self.env, self.raft.client_write(command)).await {
            Ok(written) => Ok((written.log_id.index, written.data)),
            Err(e) => Err(match e.into_api_error() {
                Some(ClientWriteError::ForwardToLeader(f)) => ProposeError::NotLeader {
                    me: self.me,
                    leader: f.leader_id,
                },
                Some(ClientWriteError::LogEntryDiscarded(_)) => ProposeError::InDoubt,
                Some(other) => ProposeError::Failed(other.to_string()),
                // The node stopped with the proposal handed over: its entry may be in the
                // log already, and may commit.
                None => ProposeError::InDoubt,
            }),
        }
    }

    /// The leader this replica knows of.
    pub fn leader(&self) -> Option<NodeId> {
        use openraft::async_runtime::WatchReceiver;
        self.raft.metrics().borrow_watched().current_leader
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

    pub fn machine(&self) -> &MetaMachine {
        &self.machine
    }

    pub fn log(&self) -> &LogStore {
        &self.log
    }

    /// Stops the Raft node and the listener.
    pub async fn shutdown(&self) {
        self.listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .cancel();
        let _ = in_env(&self.env, self.raft.shutdown()).await;
    }
}

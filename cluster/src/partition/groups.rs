//! A member's partition groups: one per partition of the metadata state, started as the
//! state names them, stopped and removed as it drops them, and the node's sends ordered by
//! them ([`cairn_engine::node::Replicator`], reached weakly: `installed`).
//!
//! | what [`PartGroups::sync`] finds | what it does |
//! |---|---|
//! | a partition of the state placed on this member (`placement`; others: `placed`) without a running group | opens its WAL (`{root}/{stream}-{topic}-{partition}-{nonce}`), repairs the node's replica from its peers if it is fenced or short of its checkpoint (`refill::repair`), opens the machine over it, starts its Raft node |
//! | a running group whose partition the state no longer holds (deleted, or purged: a new nonce) | stops it and removes its directory |
//! | a running group whose Raft node stopped (its WAL or machine failed) | drops it, to start it again from its storage |
//! | a group that failed (did not start, or stopped) | starts it again after a wait that doubles from [`RETRY_FIRST`] to [`RETRY_MAX`]; a repeated reason is logged once |
//! | a running group that was never made, while this member leads the metadata group (and confirmed it) | makes it, of the replicas the placed members among the metadata group's committed voters' members run (a member asks the leader for them when the leader's member is not placed: `placed`) |
//! | such a group whose replica here voted (for a maker that lost the group's first entry with its disk) and is to make it | starts that replica again as a new one, which the next pass makes the group of (one that voted and is not to make it takes the maker's first entry) |
//! | a group this member leads whose voters changed since its last reconciliation | reconciles them (`members`) |
//! | a group this member leads, reconciled, whose preferred member is up and caught up | hands it to that member (`balance`) |
//!
//! Each replica of a group has its own Raft id: this member and the incarnation of its WAL,
//! drawn when the WAL is made (`crate::partition::net`). A WAL that lost its state record
//! (its vote) is set aside and made again, as a new replica that neither votes nor counts
//! in its group. The member that makes a group asks every voter's member which replica of
//! it runs (`PartRpc::Identify`) and makes it of those once all answered.
//!
//! Sends and offset writes: `write` (its table).

use super::installed::Installed;
use super::machine::{MachineCounts, MachineHooks, PartMachine};
use super::net::{
    group_name, identity_of, FromPeers, GroupName, PartEnvelope, PartNetworks, PartReply, PartRpc,
    PartServe,
};
use super::placement::placed;
use super::quiet::Quiet;
use super::refill;
use super::sink::{OnNode, PartitionSink};
use super::{PartConfig, PartRaft};
use crate::group::Replica;
use crate::log::LogStore;
use crate::rt::in_env;
use crate::types::{member_of, show_id, MemberId, NodeId, Peer};
use cairn_engine::env::Env;
use cairn_engine::node::Node;
use cairn_engine::partition::PartitionIdentity;
use openraft::async_runtime::WatchReceiver;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a member looks whether what its groups follow moved ([`PassStamp`]).
pub const SYNC_EVERY: Duration = Duration::from_millis(100);
/// A full pass over its groups at least this often, moved or not: what the stamp does not
/// cover (a replica that stopped, a reconciliation or hand-over to try again, a group
/// whose configuration changed by itself) is seen within it.
pub const FULL_PASS_EVERY: Duration = Duration::from_secs(1);
/// How long a send waits for its group to have a leader and commit it.
pub const SEND_DEADLINE: Duration = Duration::from_secs(10);
pub(super) const SEND_RETRY: Duration = Duration::from_millis(20);
/// The longest a forwarded send may take at the leader.
pub(super) const FORWARD_LIMIT: Duration = Duration::from_secs(10);
/// The longest a member may take to say which replica of a group it runs.
pub(super) const IDENTIFY_LIMIT: Duration = Duration::from_secs(1);
/// The first wait before a group that failed is started again, and the longest.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// A checkpoint every so many entries; the WAL keeps [`LOG_KEPT`] entries behind it for
/// followers that are behind (production's [`Tuning`]).
pub const CHECKPOINT_EVERY: u64 = 1024;
pub const LOG_KEPT: u64 = 4096;
/// How long a group's leader waits, its log unchanged, before it offers the group to
/// sleep (production's [`Tuning`]: `quiet`).
pub const QUIET_AFTER: Duration = Duration::from_secs(2);

/// The groups' Raft timing, and how often they checkpoint and how much WAL they keep.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    pub heartbeat: Duration,
    pub election: (Duration, Duration),
    /// Entries between checkpoints ([`CHECKPOINT_EVERY`] in production; the simulator's
    /// are few, so checkpoints and the restarts that skip what they hold happen).
    pub checkpoint_every: u64,
    /// Entries the WAL keeps behind a checkpoint ([`LOG_KEPT`]): a replica further behind
    /// is sent the checkpoint and refills its partition from its peers (`refill`).
    pub log_kept: u64,
    /// How long a group's leader waits, its log unchanged, before it offers the group to
    /// sleep (`quiet`).
    pub quiet_after: Duration,
}

/// A member's partition groups; clones share them.
#[derive(Clone)]
pub struct PartGroups {
    inner: Arc<Inner>,
}

/// [`PartGroups`] held weakly (`installed`).
pub(super) struct WeakGroups(std::sync::Weak<Inner>);

impl WeakGroups {
    pub(super) fn upgrade(&self) -> Option<PartGroups> {
        self.0.upgrade().map(|inner| PartGroups { inner })
    }
}

struct Inner {
    env: Env,
    node: Node,
    meta: Replica,
    root: PathBuf,
    networks: PartNetworks,
    tuning: Tuning,
    running: Mutex<BTreeMap<GroupName, PartRaft>>,
    /// The groups the view of op `.0` names ([`PartGroups::wanted`]), each with its
    /// topic's replication factor.
    wanted: Mutex<(u64, Arc<BTreeMap<GroupName, u8>>)>,
    /// The groups placed on this member ([`PartGroups::placed_here`]), for the view of op
    /// `.0` and the metadata voters' members `.1`.
    here: Mutex<(u64, BTreeSet<MemberId>, Arc<BTreeSet<GroupName>>)>,
    /// Groups this member runs although they are not placed on it (found on its disk at
    /// start, or moved away by a change of voters): run until their group's committed
    /// configuration leaves this member's replica out (`placed`).
    /// The value: when to ask again whether it may go.
    kept: Mutex<BTreeMap<GroupName, u64>>,
    /// The replica sets this member, leading the metadata group in term `.0`, answered
    /// `PartRpc::Making` with, and when (`placed`).
    making: Mutex<BTreeMap<GroupName, placed::MadeOf>>,
    /// Per group this member led: the metadata voters it last reconciled the group's
    /// voters with, or when to try again (`members`).
    reconciled: Mutex<BTreeMap<GroupName, super::members::Reconciled>>,
    /// Per group this member leads: when its last hand-over to its preferred member began
    /// (`balance`).
    balanced: Mutex<BTreeMap<GroupName, u64>>,
    /// Set once a graceful stop hands every group over (`balance`): none is taken back.
    leaving: std::sync::atomic::AtomicBool,
    /// Groups that did not start or stopped: why (logged once per reason), when to try
    /// again and how many tries failed (the wait doubles, up to [`RETRY_MAX`]).
    failed: Mutex<BTreeMap<GroupName, Failed>>,
    /// What this member's machines did.
    counts: Arc<MachineCounts>,
    hooks: MachineHooks,
    /// Its idle groups asleep, and what it heard of its peers (`quiet`).
    quiet: Quiet,
}

/// What [`PartGroups::keep_in_step`] compares between ticks: the metadata op its groups
/// follow, the metadata group's leader (who makes new groups) and voters (whom groups
/// reconcile with), whether a failed group is due to start again, how many run.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PassStamp {
    op: u64,
    leader: Option<NodeId>,
    voters: BTreeSet<NodeId>,
    joint: bool,
    retry_due: bool,
    running: usize,
}

struct Failed {
    why: String,
    not_before: u64,
    tries: u32,
}

/// A group as one member's replica sees it ([`PartGroups::views`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub partition: PartitionIdentity,
    /// This member's replica, while its group runs.
    pub replica: Option<NodeId>,
    pub leader: Option<NodeId>,
    pub term: u64,
    /// The index of the last entry applied (0 for none).
    pub applied: u64,
    /// The index of the last entry in its log, committed or not (0 for none).
    pub last_log: u64,
    /// Whether the group's configuration, as this replica knows it, counts it as a voter.
    pub voter: bool,
    /// The group's voters, as this replica knows them.
    pub voters: Vec<NodeId>,
    /// Whether that configuration is joint (a change under way).
    pub joint: bool,
    /// Whether the group is placed on this member (`placement`): one not placed here runs
    /// only until its group's configuration leaves it out.
    pub placed: bool,
    /// Why its replica here does not run, if it failed.
    pub failed: Option<String>,
}

impl GroupView {
    fn down(name: GroupName, placed: bool, failed: Option<String>) -> Self {
        GroupView {
            partition: identity_of(name),
            replica: None,
            leader: None,
            term: 0,
            applied: 0,
            last_log: 0,
            voter: false,
            voters: Vec::new(),
            joint: false,
            placed,
            failed,
        }
    }
}

/// The directory of group `name` under `root`.
pub fn group_dir(root: &Path, name: GroupName) -> PathBuf {
    root.join(format!("{}-{}-{}-{:016x}", name.0, name.1, name.2, name.3))
}

impl PartGroups {
    pub fn new(env: &Env, node: Node, meta: Replica, root: PathBuf, tuning: Tuning) -> Self {
        let networks = PartNetworks::new(meta.peer_network());
        PartGroups {
            inner: Arc::new(Inner {
                env: env.clone(),
                node,
                meta,
                root,
                networks,
                tuning,
                running: Mutex::default(),
                wanted: Mutex::default(),
                here: Mutex::default(),
                kept: Mutex::default(),
                making: Mutex::default(),
                reconciled: Mutex::default(),
                balanced: Mutex::default(),
                leaving: Default::default(),
                failed: Mutex::default(),
                counts: Arc::default(),
                hooks: MachineHooks::default(),
                quiet: Quiet::new(env.entropy.next_u64()),
            }),
        }
    }

    /// The same groups, their machines with `hooks` (a canary's; before they start).
    pub fn with_hooks(self, hooks: MachineHooks) -> Self {
        let mut inner =
            Arc::into_inner(self.inner).expect("hooks are set before the groups are shared");
        inner.hooks = hooks;
        PartGroups {
            inner: Arc::new(inner),
        }
    }

    /// Makes the groups the node's replicator and its peers' partition server (each
    /// reaching them weakly: `installed`).
    pub fn install(&self) {
        let weak = || Installed(WeakGroups(Arc::downgrade(&self.inner)));
        self.inner.node.set_replicator(Arc::new(weak()));
        let serve: Arc<dyn PartServe> = Arc::new(weak());
        assert!(
            self.inner.meta.parts.set(serve).is_ok(),
            "a member installs its groups once"
        );
    }

    /// Keeps the groups in step with the metadata state until the node stops.
    pub async fn run(self) {
        let env = self.inner.env.clone();
        let beat = Box::pin(in_env(&env, self.clone().beat()));
        drop(env.tasks.spawn(beat));
        in_env(&env, self.keep_in_step()).await
    }

    async fn keep_in_step(self) {
        self.remove_strays();
        let full_every = FULL_PASS_EVERY.as_nanos() as u64;
        let mut last: Option<(PassStamp, u64)> = None;
        while self.inner.node.failure().is_none() {
            let (stamp, now) = (self.stamp(), self.inner.env.clock.monotonic_nanos());
            let due = last
                .as_ref()
                .is_none_or(|(was, at)| *was != stamp || now >= at.saturating_add(full_every));
            if due {
                // Groups left unmade (a peer that did not answer yet) are tried next tick.
                let unmade = self.sync().await;
                last = (!unmade).then_some((stamp, now));
            }
            self.inner.env.clock.sleep(SYNC_EVERY).await;
        }
        self.shutdown().await;
    }

    /// What a pass follows, read without a walk over the groups: when it moved, the next
    /// tick passes at once rather than at [`FULL_PASS_EVERY`].
    fn stamp(&self) -> PassStamp {
        let status = self.inner.meta.status();
        let now = self.inner.env.clock.monotonic_nanos();
        // In `start_missing`'s order: the running groups, then the failed ones.
        let (running, retry_due) = {
            let running = self.running();
            let failed = self.failed();
            let due =
                |(n, f): (&GroupName, &Failed)| f.not_before <= now && !running.contains_key(n);
            (running.len(), failed.iter().any(due))
        };
        PassStamp {
            op: self.inner.node.view().op,
            leader: status.leader,
            voters: status.voters.keys().copied().collect(),
            joint: status.joint,
            retry_due,
            running,
        }
    }

    fn me(&self) -> NodeId {
        self.inner.meta.id()
    }

    pub(super) fn meta(&self) -> &Replica {
        &self.inner.meta
    }

    pub fn networks(&self) -> &PartNetworks {
        &self.inner.networks
    }

    pub(super) fn leaving(&self) -> &std::sync::atomic::AtomicBool {
        &self.inner.leaving
    }

    pub(super) fn env(&self) -> &Env {
        &self.inner.env
    }

    pub(super) fn quiet(&self) -> &Quiet {
        &self.inner.quiet
    }

    pub(super) fn node(&self) -> &Node {
        &self.inner.node
    }

    pub(super) fn hooks(&self) -> &MachineHooks {
        &self.inner.hooks
    }

    /// The running groups, as they are now.
    pub(super) fn running_groups(&self) -> BTreeMap<GroupName, PartRaft> {
        self.running().clone()
    }

    /// Wakes group `name` (its replica here `raft`: `quiet`).
    pub(super) fn wake(&self, name: GroupName, raft: &PartRaft) {
        let now = self.inner.env.clock.monotonic_nanos();
        self.inner.quiet.wake(name, raft, now);
    }

    pub(super) fn tuning(&self) -> &Tuning {
        &self.inner.tuning
    }

    pub(super) fn balanced(&self) -> std::sync::MutexGuard<'_, BTreeMap<GroupName, u64>> {
        self.inner
            .balanced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn reconciled(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<GroupName, super::members::Reconciled>> {
        self.inner
            .reconciled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The groups whose leader is this member's replica.
    pub(super) fn led(&self) -> Vec<(GroupName, PartRaft)> {
        self.led_but(&BTreeSet::new())
    }

    /// [`Self::led`], but for the groups `skipped` (their metrics not read).
    pub(super) fn led_but(&self, skipped: &BTreeSet<GroupName>) -> Vec<(GroupName, PartRaft)> {
        self.running()
            .iter()
            .filter(|(name, raft)| !skipped.contains(name) && leads(raft))
            .map(|(n, r)| (*n, r.clone()))
            .collect()
    }

    /// What each group of the metadata state is at this member (running or not), as its
    /// replica here sees it.
    pub fn views(&self) -> Vec<GroupView> {
        let here = self.placed_here();
        let running = self.running();
        self.wanted()
            .keys()
            .map(|name| {
                let placed = here.contains(name);
                let Some(raft) = running.get(name) else {
                    let why = self.failed().get(name).map(|f| f.why.clone());
                    return GroupView::down(*name, placed, why);
                };
                let m = raft.metrics().borrow_watched().clone();
                let membership = m.membership_config.membership();
                let voters: Vec<NodeId> = membership.voter_ids().collect();
                let joint = membership.get_joint_config().len() > 1;
                GroupView {
                    partition: identity_of(*name),
                    replica: Some(m.id),
                    leader: m.current_leader,
                    term: m.current_term,
                    applied: m.last_applied.map_or(0, |l| l.index),
                    last_log: m.last_log_index.unwrap_or(0),
                    voter: voters.contains(&m.id),
                    voters,
                    joint,
                    placed,
                    failed: None,
                }
            })
            .collect()
    }

    /// What this member's group machines did.
    pub fn counts(&self) -> &MachineCounts {
        &self.inner.counts
    }

    /// The groups this member runs a replica of, and how many of them it leads.
    pub(super) fn partitions_led(&self) -> crate::group::PartitionsLed {
        let running = self.running();
        crate::group::PartitionsLed {
            running: running.len() as u64,
            led: running.values().filter(|raft| leads(raft)).count() as u64,
            voting: running.values().filter(|raft| votes(raft)).count() as u64,
        }
    }

    pub(super) fn running(&self) -> std::sync::MutexGuard<'_, BTreeMap<GroupName, PartRaft>> {
        self.inner.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This member's running replica of group `name`, if any.
    pub(super) fn group(&self, name: GroupName) -> Option<PartRaft> {
        self.running().get(&name).cloned()
    }

    /// The groups the metadata state names now, each with its topic's replication factor
    /// (computed again only when the view moved).
    pub(super) fn wanted(&self) -> Arc<BTreeMap<GroupName, u8>> {
        self.wanted_at().1
    }

    /// [`Self::wanted`], and the op of the view it is of.
    fn wanted_at(&self) -> (u64, Arc<BTreeMap<GroupName, u8>>) {
        let view = self.inner.node.view();
        let mut cached = self.inner.wanted.lock().unwrap_or_else(|p| p.into_inner());
        if cached.0 != view.op || cached.1.is_empty() {
            let partitions = view.state.partitions();
            let names = partitions.iter().map(|p| {
                let topic = view.state.find_topic(p.stream_id, p.topic_id);
                let factor = topic.map_or(0, |t| t.options.replication_factor);
                (group_name(p), factor)
            });
            *cached = (view.op, Arc::new(names.collect()));
        }
        (cached.0, cached.1.clone())
    }

    /// The members of the metadata group's committed voters.
    pub(super) fn voter_members(&self) -> BTreeSet<MemberId> {
        let voters = self.inner.meta.status().voters;
        voters.keys().map(|v| member_of(*v)).collect()
    }

    /// The groups of the metadata state placed on this member (`placed`), computed again
    /// only when the view or the voters moved.
    fn placed_here(&self) -> Arc<BTreeSet<GroupName>> {
        // One view's op and groups (a view read twice may have moved between).
        let (op, wanted) = self.wanted_at();
        let members = self.voter_members();
        let me = member_of(self.me());
        let mut cached = self.inner.here.lock().unwrap_or_else(|p| p.into_inner());
        if cached.0 != op || cached.1 != members || cached.2.is_empty() {
            let here: BTreeSet<GroupName> = wanted
                .iter()
                .filter(|(name, factor)| placed(**name, **factor, &members).contains(&me))
                .map(|(name, _)| *name)
                .collect();
            *cached = (op, members, Arc::new(here));
        }
        cached.2.clone()
    }

    /// The members group `name` is placed on now (none for a group the state does not
    /// name).
    pub(super) fn placed_on(&self, name: GroupName) -> BTreeSet<MemberId> {
        match self.wanted().get(&name) {
            Some(factor) => placed(name, *factor, &self.voter_members()),
            None => BTreeSet::new(),
        }
    }

    /// The metadata voters whose members group `name` is placed on.
    pub(super) fn placed_voters(&self, name: GroupName) -> BTreeMap<NodeId, Peer> {
        let on = self.placed_on(name);
        let mut voters = self.inner.meta.status().voters;
        voters.retain(|v, _| on.contains(&member_of(*v)));
        voters
    }

    /// One pass of the module doc's table; whether groups this member should make were
    /// left unmade.
    pub async fn sync(&self) -> bool {
        let wanted = self.wanted();
        let here = self.placed_here();
        // A group asleep (`quiet`) runs no Raft timer and takes no request: it does not
        // stop, change its leader or configuration, or go unmade, so the steps below skip
        // their reads of its metrics (most groups of an idle member are asleep). One woken
        // since is stepped at the next pass.
        let asleep = self.quiet().sleeping();
        self.drop_gone(&wanted).await;
        self.drop_stopped(&asleep).await;
        let kept = self.keep_unplaced(&here);
        self.start_missing(&here, &kept).await;
        let unmade = self.make_new_groups(&asleep, &here).await;
        self.reconcile(&asleep).await;
        self.balance(&asleep);
        self.release_unplaced(&here).await;
        unmade
    }

    /// Stops the groups whose partitions the state no longer holds and removes their WALs.
    async fn drop_gone(&self, wanted: &BTreeMap<GroupName, u8>) {
        let gone: Vec<(GroupName, PartRaft)> = {
            let mut running = self.running();
            let names: Vec<GroupName> = running.keys().copied().collect();
            let gone = names.into_iter().filter(|n| !wanted.contains_key(n));
            gone.filter_map(|n| running.remove(&n).map(|r| (n, r)))
                .collect()
        };
        for (name, raft) in gone {
            self.inner.quiet.forget(name);
            let _ = in_env(&self.inner.env, raft.shutdown()).await;
            let dir = group_dir(&self.inner.root, name);
            if let Err(e) = self.inner.env.disk.remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "a dropped partition's group directory stays");
            }
        }
        self.failed().retain(|n, _| wanted.contains_key(n));
        self.reconciled().retain(|n, _| wanted.contains_key(n));
        self.kept().retain(|n, _| wanted.contains_key(n));
    }

    /// Drops the groups whose Raft node stopped (their machine or WAL failed): started
    /// again from their storage once their wait is over.
    async fn drop_stopped(&self, asleep: &BTreeSet<GroupName>) {
        let stopped: Vec<(GroupName, PartRaft, String)> = {
            let mut running = self.running();
            let names: Vec<GroupName> = running.keys().copied().collect();
            names
                .into_iter()
                .filter(|n| !asleep.contains(n))
                .filter_map(|n| {
                    let why = stopped_why(&running[&n])?;
                    running.remove(&n).map(|r| (n, r, why))
                })
                .collect()
        };
        for (name, raft, why) in stopped {
            let _ = in_env(&self.inner.env, raft.shutdown()).await;
            self.note_failure(name, format!("its replica stopped: {why}"));
        }
    }

    /// Starts the groups placed here (`here`) or kept (`kept`) not running whose wait
    /// after a failure is over.
    async fn start_missing(&self, here: &BTreeSet<GroupName>, kept: &BTreeSet<GroupName>) {
        let now = self.inner.env.clock.monotonic_nanos();
        let missing: Vec<GroupName> = {
            let running = self.running();
            let failed = self.failed();
            let due = |n: &GroupName| failed.get(n).is_none_or(|f| f.not_before <= now);
            here.iter()
                .chain(kept)
                .filter(|n| !running.contains_key(n) && due(n))
                .copied()
                .collect()
        };
        for name in missing {
            match self.start(name).await {
                Ok(raft) => {
                    // Running first: a pass never finds its quiet entry without it.
                    self.running().insert(name, raft.clone());
                    self.inner.quiet.started(name, &raft);
                }
                Err(why) => self.note_failure(name, format!("it did not start: {why}")),
            }
        }
    }

    fn failed(&self) -> std::sync::MutexGuard<'_, BTreeMap<GroupName, Failed>> {
        self.inner.failed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that group `name` failed (`why`): tried again after a wait that doubles with
    /// each failure; a reason logged once.
    fn note_failure(&self, name: GroupName, why: String) {
        let now = self.inner.env.clock.monotonic_nanos();
        let mut failed = self.failed();
        let tries = failed.get(&name).map_or(0, |f| f.tries) + 1;
        let wait = RETRY_FIRST
            .saturating_mul(1 << (tries - 1).min(16))
            .min(RETRY_MAX);
        let again = failed.get(&name).is_some_and(|f| f.why == why);
        if !again {
            tracing::error!(partition = %identity_of(name), %why, retry_in = ?wait,
                "a partition's replica group is not running");
        }
        failed.insert(
            name,
            Failed {
                why,
                not_before: now + wait.as_nanos() as u64,
                tries,
            },
        );
    }

    /// Removes the directories of groups the state does not name (left by a crash between
    /// a deletion and its removal).
    fn remove_strays(&self) {
        let disk = &self.inner.env.disk;
        let Ok(listing) = disk.read_dir(&self.inner.root) else {
            return;
        };
        let here = self.placed_here();
        let wanted: BTreeMap<String, GroupName> = self
            .wanted()
            .keys()
            .map(|n| (group_dir(&self.inner.root, *n).display().to_string(), *n))
            .collect();
        for entry in listing.iter().filter(|e| e.is_dir) {
            let dir = self.inner.root.join(&entry.name);
            // A released replica's leftovers go. Left by a failure, they are never kept
            // (a kept group would start a blank replica where it is not placed): the next
            // boot finishes them, or `start` first where the group is placed here.
            if self.finish_released(&dir).unwrap_or(true) {
                continue;
            }
            if let Some(name) = wanted.get(&dir.display().to_string()) {
                // A replica of a group placed elsewhere now: kept until it may go.
                if !here.contains(name) {
                    self.keep_found(*name);
                }
            } else {
                tracing::info!(dir = %dir.display(), "removing the group directory of a partition the state does not hold");
                let _ = disk.remove_dir_all(&dir);
            }
        }
    }

    /// Finishes the removal of `dir` if it is a released replica's (`placed::Released`):
    /// whether it was.
    fn finish_released(&self, dir: &Path) -> Result<bool, String> {
        let disk = &*self.inner.env.disk;
        let released = placed::Released { disk, dir };
        if !released.present().map_err(|e| e.to_string())? {
            return Ok(false);
        }
        tracing::info!(dir = %dir.display(), "finishing the removal of a released replica's directory");
        let finished = released.finish(&self.inner.root);
        finished.map_err(|e| format!("finishing a released replica's removal: {e}"))?;
        Ok(true)
    }

    /// Opens group `name`'s WAL and machine and starts its Raft node.
    async fn start(&self, name: GroupName) -> Result<PartRaft, String> {
        let inner = &self.inner;
        let dir = group_dir(&inner.root, name);
        // A released replica's leftovers: this member runs a new replica of the group.
        self.finish_released(&dir)?;
        let cluster = inner.meta.cluster();
        let member = member_of(self.me());
        let log = LogStore::<PartConfig>::open(&inner.env, &dir, cluster, member)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(lost) = log.set_aside() {
            tracing::warn!(partition = %identity_of(name), lost = %lost.display(), replica = %show_id(log.id()),
                "the group's WAL lost its state record: this member runs a new replica of it, outside the group");
        }
        let sink = Arc::new(OnNode {
            node: inner.node.clone(),
            partition: identity_of(name),
        });
        let repaired = self.repair(name, log.id(), (&*sink, &dir)).await?;
        let machine = PartMachine::open(
            inner.env.disk.clone(),
            &dir,
            sink,
            (inner.counts.clone(), inner.hooks.clone()),
        )
        .await
        .map_err(|e| e.to_string())?;
        let mark = refill::RepairMark {
            disk: &*inner.env.disk,
            dir: &dir,
        };
        if repaired || mark.present().map_err(|e| e.to_string())? {
            // Its offset files went with its directory: the checkpoint's come back, durably,
            // before the mark of a rebuild goes (a crash before finds it and does it again).
            let restored = machine.restore_offsets().await;
            restored.map_err(|e| format!("restoring the repaired replica's offsets: {e}"))?;
            if mark.present().map_err(|e| e.to_string())? {
                mark.clear().map_err(|e| e.to_string())?;
            }
        }
        let millis = |d: Duration| d.as_millis() as u64;
        let config = openraft::Config {
            cluster_name: format!("{cluster:032x}-{name:?}"),
            heartbeat_interval: millis(inner.tuning.heartbeat),
            election_timeout_min: millis(inner.tuning.election.0),
            election_timeout_max: millis(inner.tuning.election.1),
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(inner.tuning.checkpoint_every),
            max_in_snapshot_log_to_keep: inner.tuning.log_kept,
            enable_pre_vote: Some(true),
            ..Default::default()
        }
        .validate()
        .map_err(|e| e.to_string())?;
        let id = log.id();
        let network = inner.networks.of(name, id);
        let raft = PartRaft::new(id, Arc::new(config), network, log, machine);
        in_env(&inner.env, raft).await.map_err(|e| e.to_string())
    }

    /// Repairs this member's replica `me` of group `name` from its peers when it must
    /// (`refill::needs_repair`: fenced, or short of its checkpoint), before its machine
    /// opens; the peers are the replicas the metadata voters' members run. Whether it
    /// repaired it.
    async fn repair(
        &self,
        name: GroupName,
        me: NodeId,
        (sink, dir): (&dyn PartitionSink, &Path),
    ) -> Result<bool, String> {
        let inner = &self.inner;
        let checkpointed = super::machine::checkpointed(&*inner.env.disk, dir);
        let checkpointed = checkpointed.map_err(|e| e.to_string())?;
        let disk = &*inner.env.disk;
        let mark = refill::RepairMark { disk, dir };
        let needed = refill::needs_repair(sink, checkpointed, &mark).await;
        if !needed.map_err(|e| e.to_string())? {
            return Ok(false);
        }
        let mut peers = Vec::new();
        for (voter, peer) in inner.meta.status().voters {
            if member_of(voter) == member_of(me) {
                continue;
            }
            if let Some((id, _)) = self.identify(name, me, (voter, &peer)).await {
                peers.push((id, peer));
            }
        }
        let source = FromPeers {
            networks: inner.networks.clone(),
            group: name,
            me,
        };
        let hole = inner.hooks.refill_hole;
        let at = (checkpointed, &mark);
        let repaired = refill::repair(sink, at, (&peers, hole), &source).await;
        let next = repaired.map_err(|e| format!("repairing the replica from its peers: {e}"))?;
        tracing::warn!(partition = %identity_of(name), next, "repaired a replica's partition from its peers");
        inner
            .counts
            .repaired
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }

    /// Which replica of group `name` the member of metadata voter `voter` runs, and
    /// whether it holds any of the group; `None` when it does not answer.
    async fn identify(
        &self,
        name: GroupName,
        mine: NodeId,
        (voter, peer): (NodeId, &Peer),
    ) -> Option<(NodeId, bool)> {
        let member = member_of(voter);
        let (id, made, _) = self.identity(name, mine, (member, peer)).await??;
        Some((id, made))
    }

    /// What the member `member` (at `peer`) answers of group `name` when replica `mine`
    /// asks: the replica it runs, whether that holds any of the group, whether the member
    /// is leaving; `Some(None)` when it runs none; `None` when it does not answer (or
    /// answers for another member).
    pub(super) async fn identity(
        &self,
        name: GroupName,
        mine: NodeId,
        (member, peer): (crate::types::MemberId, &Peer),
    ) -> Option<Option<(NodeId, bool, bool)>> {
        let envelope = PartEnvelope {
            from: mine,
            to: u64::from(member) << 32,
            rpc: PartRpc::Identify,
        };
        let asked = self
            .inner
            .networks
            .call(peer, name, &envelope, IDENTIFY_LIMIT);
        match asked.await {
            Ok(PartReply::Identity { id, made, leaving }) if member_of(id) == member => {
                Some(Some((id, made, leaving)))
            }
            Ok(PartReply::NoGroup) => Some(None),
            _ => None,
        }
    }

    /// Stops every group.
    pub async fn shutdown(&self) {
        let all: Vec<PartRaft> = std::mem::take(&mut *self.running()).into_values().collect();
        for raft in all {
            let _ = in_env(&self.inner.env, raft.shutdown()).await;
        }
    }
}

/// The voter of `raft`'s group, other than this replica, that holds the most of its log
/// and answered a heartbeat most recently (as this leader knows).
pub(super) fn successor(raft: &PartRaft) -> Option<NodeId> {
    successor_among(raft, |_| true)
}

/// [`successor`], among the voters `wanted` takes.
pub(super) fn successor_among(raft: &PartRaft, wanted: impl Fn(NodeId) -> bool) -> Option<NodeId> {
    let metrics = raft.metrics().borrow_watched().clone();
    let matched = metrics.replication.unwrap_or_default();
    let heard = metrics.heartbeat.unwrap_or_default();
    let voters = metrics.membership_config.membership().voter_ids();
    let others = voters.filter(|id| *id != metrics.id && wanted(*id));
    others.max_by_key(|id| {
        let log = matched.get(id).cloned().flatten();
        let last_heard = heard.get(id).cloned().flatten();
        (log, last_heard)
    })
}

/// Why `raft`'s Raft node stopped, if it did.
fn stopped_why(raft: &PartRaft) -> Option<String> {
    let metrics = raft.metrics();
    let running = &metrics.borrow_watched().running_state;
    running.as_ref().err().map(|fatal| fatal.to_string())
}

/// Whether this member's replica `raft` leads its group (one read of its metrics: a
/// second read while the first is held could wait behind openraft's next write forever).
pub(super) fn leads(raft: &PartRaft) -> bool {
    let metrics = raft.metrics();
    let metrics = metrics.borrow_watched();
    metrics.current_leader == Some(metrics.id)
}

/// Whether this member's replica `raft` is a voter of its group's configuration, which is
/// not joint (a change under way).
fn votes(raft: &PartRaft) -> bool {
    let metrics = raft.metrics();
    let metrics = metrics.borrow_watched();
    let membership = metrics.membership_config.membership();
    membership.get_joint_config().len() == 1 && membership.voter_ids().any(|v| v == metrics.id)
}

/// The Raft id of this member's replica `raft`.
pub(super) fn id_of(raft: &PartRaft) -> NodeId {
    raft.metrics().borrow_watched().id
}

/// Whether `raft`, holding no entry, voted (openraft then refuses to initialize it).
fn voted(raft: &PartRaft) -> bool {
    never_made(raft) && raft.metrics().borrow_watched().current_term > 0
}

/// Whether `raft`'s group was never made: no configuration, nothing in its log.
pub(super) fn never_made(raft: &PartRaft) -> bool {
    let metrics = raft.metrics();
    let metrics = metrics.borrow_watched();
    metrics.last_log_index.is_none()
        && metrics
            .membership_config
            .membership()
            .voter_ids()
            .next()
            .is_none()
}

mod making;
mod placed;
mod reads;
mod serve;
mod write;

pub use placed::RELEASED_MARK;
pub use reads::{ReadReply, WireRead, READ_BUDGET};

pub(super) use write::{propose, stamp};

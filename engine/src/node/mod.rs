//! A node: the entities users create (streams, topics, partitions, consumer groups, users),
//! the metadata plane that makes them durable, and the partitions that hold the messages,
//! served by owners reached by message.
//!
//! ```text
//!  callers (the server's connections, the simulator's clients): Client
//!     │ lookups ───────────────► the published MetaView (never waits on an owner)
//!     │ metadata ops ──────────► MetaOwner inbox ─► batch: journal + sync, work, publish
//!     │ sends, polls, offsets ─► Shard[hash(stream, topic, partition) % n] inbox
//!     │                            └─► round: append, one persist per partition, answer
//!     │ group joins, leaves ───► GroupsOwner inbox (memberships; no disk)
//!     │ password hashing ──────► the blocking pool (never an owner)
//!     └◄─ one-shot replies
//! ```
//!
//! Only owners touch the disk: the metadata and groups owners as workers (an OS thread in
//! production), the shards as owner tasks beside the connections ([`crate::env::Tasks::spawn_owner`]:
//! their device waits leave the runtime worker to others), and the persist jobs a shard
//! starts, each holding its partition until it returns ([`crate::env::Tasks::spawn_device`]);
//! each a task on the seeded executor in the simulator. Every queue is bounded: a full inbox makes the
//! caller wait (back-pressure), a full pool is [`NodeError::Busy`]. A metadata failure
//! after an op became durable stops the node ([`Node::stopped`]): a supervisor restarts
//! the process and boot recovers what the disk holds.

mod adopt;
mod auth;
mod boot;
mod client;
mod decider;
pub mod exit_record;
pub mod groups;
pub mod hooks;
mod meta_owner;
mod metrics;
mod placement;
pub mod rebuild;
mod recorder;
mod replicator;
pub mod retention;
mod settings;
mod shard;
pub mod tree;
mod view;
mod work;

pub use crate::error::{Failure, Named, NodeError, NodeResult, RootAction, WorkError};
pub use crate::state::tokens::{Token, TokenExpiry};
pub use crate::state::{self, ops, options, PartitionKey};
pub use auth::{token_login, Login, MAX_VERIFIED_LOGINS};
pub use boot::{
    doomed_group_offsets, work_to_finish, work_to_redo, BootError, BootMetrics, BootReport, Booted,
    PartitionBoot,
};
pub use client::Client;
pub use decider::{Barrier, Decider, Decision};
pub use hooks::{
    AfterPersistHook, BeforeMetadataSyncHook, NodeHooks, OwnerHooks, PersistReturnedHook,
    RecordReturnedHook, StoreWaitsHook,
};
pub use meta_owner::{MetaReply, MAX_BATCH_BYTES, MAX_BATCH_OPS, WORK_PER_SHARD};
pub use metrics::NodeMetrics;
pub use replicator::{
    OffsetApplied, OffsetOrdered, OffsetWrite, ReadAnswer, ReadElsewhere, ReadFuture, Replicated,
    Replicator,
};
pub use settings::{NodeLimits, NodeSettings, PasswordCost};
pub use shard::{
    MAX_CONCURRENT_PERSISTS, MAX_DRAIN, MAX_PARKED, MAX_PERSIST_JOBS, MAX_RECORDS_OUT,
};
pub use view::MetaView;

use crate::env::chan::{oneshot, Latch, Pending, Sender, TrySendError};
use crate::env::{device_section, settle, Env};
use crate::partition::{AppendAck, FenceReason, PartitionIdentity};
use crate::state::Applied;
use groups::GroupRequest;
use meta_owner::OwnerRequest;
use retention::{Policy, Reason, Sealed};
use shard::ShardRequest;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use view::ViewCell;

/// One segment a cleaner or an explicit request deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub partition: PartitionKey,
    /// The incarnation (identity nonce) of the partition it was deleted from.
    pub nonce: u64,
    pub segment: Sealed,
    /// The offset after the segment's last message (the next segment's start).
    pub end: u64,
    pub reason: Reason,
    /// The partition's sealed bytes when it was decided.
    pub sealed_bytes: u64,
    pub policy: Policy,
    pub now: u64,
}

/// Most retention deletions kept for [`Node::take_deletions`] before the oldest are dropped.
pub const MAX_RECORDED_DELETIONS: usize = 4096;

/// The deletions the shards' cleaners made, for whoever watches (logs, the simulator).
#[derive(Default)]
pub(crate) struct Deletions {
    recent: Mutex<VecDeque<Deletion>>,
    dropped: AtomicU64,
}

impl Deletions {
    pub(crate) fn record(&self, deletions: Vec<Deletion>) {
        if deletions.is_empty() {
            return;
        }
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        for deletion in deletions {
            tracing::info!(partition = ?deletion.partition, segment = deletion.segment.start_offset, reason = ?deletion.reason, "retention deleted a segment");
            if recent.len() >= MAX_RECORDED_DELETIONS {
                recent.pop_front();
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            recent.push_back(deletion);
        }
    }
}

/// A partition's numbers, for `GetTopic`, stats and the simulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub identity: PartitionIdentity,
    pub fence: Option<FenceReason>,
    pub segment_starts: Vec<u64>,
    pub log_start: u64,
    /// The offset after the last visible message (`None` when fenced).
    pub visible_next_offset: Option<u64>,
    pub durable_next_offset: Option<u64>,
    /// Sealed segments: (start offset, bytes, newest timestamp).
    pub sealed: Vec<(u64, u64, u64)>,
    /// Bytes of batches it holds (all segments and the journal; 0 when fenced).
    pub stored_bytes: u64,
}

impl PartitionInfo {
    /// The last visible offset, if any.
    pub fn current_offset(&self) -> Option<u64> {
        self.visible_next_offset
            .and_then(|n| n.checked_sub(1))
            .filter(|&o| o >= self.log_start)
    }
}

/// Where a send landed: the partition, the incarnation (its identity's nonce: a purge
/// makes a new one) and the ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub partition: u32,
    pub nonce: u64,
    pub ack: AppendAck,
}

/// A dispatched send's outcome, to come (dropping it drops only the answer, never the send).
pub struct Dispatched {
    pending: Pending<NodeResult<Sent>>,
    node: Node,
}

impl Dispatched {
    /// Where the send landed, once its owner appended it under the topic's policy.
    pub async fn outcome(self) -> NodeResult<Sent> {
        self.node.answer(self.pending).await?
    }
}

/// An accepted metadata op: what it did and its op number in the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executed {
    pub op: u64,
    pub applied: Applied,
}

/// Counters of what the owners did (the bench and the simulator's coverage read them).
#[derive(Debug, Default)]
pub struct NodeStats {
    /// Partition persists that acknowledged persisted sends, and the sends they covered.
    pub persists: AtomicU64,
    pub persisted_acks: AtomicU64,
    /// Those persists that failed (no space, or an I/O error that fenced the partition).
    pub failed_persists: AtomicU64,
    /// Sends that arrived while their partition's previous persist ran (they joined the
    /// next one).
    pub joined_running_persist: AtomicU64,
    /// Polls that arrived while their partition's persist ran.
    pub polls_during_persist: AtomicU64,
    /// Times a shard persisted several partitions at once (at a round's end, or before a
    /// request that waits for all of them), and the persist jobs that ran for them.
    pub concurrent_persists: AtomicU64,
    pub persist_jobs: AtomicU64,
    /// Persist and record jobs running now (a stopping node waits until none runs; at most
    /// [`shard::MAX_PERSIST_JOBS`]).
    pub persist_jobs_running: AtomicU64,
    /// Records written as jobs of their own ([`shard::MAX_RECORDS_OUT`]), and log syncs
    /// that began while their partition's previous record was out (the pipeline overlapping).
    pub record_jobs: AtomicU64,
    pub pipelined_persists: AtomicU64,
    /// Deletions of a partition's segments (retention, a request) or of the partition
    /// (purge, removal, drop, rebuild) while a read plan of it was out.
    pub deletions_during_reads: AtomicU64,
    /// Directory syncs that made more than one `persisted` offset store of a round durable
    /// (`shard/stores`).
    pub shared_offset_syncs: AtomicU64,
    /// Requests that found an inbox full and waited for room.
    pub inbox_full: AtomicU64,
    pub meta_batches: AtomicU64,
    pub meta_ops: AtomicU64,
    pub meta_no_space: AtomicU64,
    /// States adopted whole from a cluster's leader (`adopt.rs`).
    pub meta_adoptions: AtomicU64,
    /// Partitions those adoptions removed or emptied (deleted or purged while this node
    /// was behind): data the node held and the cluster had discarded.
    pub meta_adopted_removals: AtomicU64,
    /// Password logins checked by argon2, and those answered by a remembered verification
    /// (`auth.rs`).
    pub argon2_checks: AtomicU64,
    pub remembered_logins: AtomicU64,
}

/// A copy of the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatsSnapshot {
    pub persists: u64,
    pub persisted_acks: u64,
    pub failed_persists: u64,
    pub joined_running_persist: u64,
    pub polls_during_persist: u64,
    pub concurrent_persists: u64,
    pub persist_jobs: u64,
    pub record_jobs: u64,
    pub pipelined_persists: u64,
    pub deletions_during_reads: u64,
    pub shared_offset_syncs: u64,
    pub inbox_full: u64,
    pub meta_batches: u64,
    pub meta_ops: u64,
    pub meta_no_space: u64,
    pub meta_adoptions: u64,
    pub meta_adopted_removals: u64,
    /// Password logins checked by argon2, and those answered by a remembered verification
    /// (`auth.rs`).
    pub argon2_checks: u64,
    pub remembered_logins: u64,
}

impl NodeStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            persists: get(&self.persists),
            persisted_acks: get(&self.persisted_acks),
            failed_persists: get(&self.failed_persists),
            joined_running_persist: get(&self.joined_running_persist),
            polls_during_persist: get(&self.polls_during_persist),
            concurrent_persists: get(&self.concurrent_persists),
            persist_jobs: get(&self.persist_jobs),
            record_jobs: get(&self.record_jobs),
            pipelined_persists: get(&self.pipelined_persists),
            deletions_during_reads: get(&self.deletions_during_reads),
            shared_offset_syncs: get(&self.shared_offset_syncs),
            inbox_full: get(&self.inbox_full),
            meta_batches: get(&self.meta_batches),
            meta_ops: get(&self.meta_ops),
            meta_no_space: get(&self.meta_no_space),
            meta_adoptions: get(&self.meta_adoptions),
            meta_adopted_removals: get(&self.meta_adopted_removals),
            argon2_checks: get(&self.argon2_checks),
            remembered_logins: get(&self.remembered_logins),
        }
    }
}

/// A running node: a handle to its owners, cheap to clone.
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

struct Inner {
    env: Env,
    root: PathBuf,
    cluster: u128,
    settings: NodeSettings,
    view: Arc<ViewCell>,
    meta: Sender<OwnerRequest>,
    shards: Vec<Sender<ShardRequest>>,
    /// Which of `shards` owns each partition.
    placement: Arc<placement::Placement>,
    groups: Sender<GroupRequest>,
    stopped: Latch<Arc<Failure>>,
    stats: Arc<NodeStats>,
    /// What the owners record for [`Node::metrics`].
    recorder: Arc<recorder::Recorder>,
    /// The syncs of every disk call the node makes (its `Env`'s disk counts them).
    syncs: Arc<crate::metrics::SyncCounts>,
    /// The exit record's state: graceful shutdown writes `{boot id, clean}` through it.
    exit: exit_record::ExitWatch,
    boot: BootMetrics,
    /// Tickets stamped on partition requests as they are queued (see the shard's windows).
    tickets: Arc<AtomicU64>,
    deletions: Arc<Deletions>,
    resources: crate::partition::resources::PartitionResources,
    /// Round-robin cursors of `Balanced` sends, per topic (bounded: pruned to the view's
    /// topics when it grows past [`MAX_BALANCED_CURSORS`]).
    balanced: Mutex<BTreeMap<(u32, u32), u32>>,
    auth: auth::Auth,
    workers: Mutex<Vec<Box<dyn crate::env::TaskHandle>>>,
    /// In a cluster, who decides the metadata ops (installed once the replica runs).
    decider: std::sync::OnceLock<Arc<dyn Decider>>,
    /// In a cluster, who orders the sends (installed once the partition replicas run).
    replicator: std::sync::OnceLock<Arc<dyn Replicator>>,
}

/// Most `Balanced` cursors kept before the ones of deleted topics are dropped.
pub const MAX_BALANCED_CURSORS: usize = 65_536;

impl Node {
    pub fn env(&self) -> &Env {
        &self.inner.env
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The current published view of the metadata.
    pub fn view(&self) -> Arc<MetaView> {
        self.inner.view.load()
    }

    /// A caller: its client id keys its group memberships and stamps its journaled ops; it
    /// may have at most [`NodeLimits::in_flight_per_client`] requests in flight.
    pub fn client(&self, id: u128) -> Client {
        Client::new(self.clone(), id)
    }

    /// Why the node stopped, if it did.
    pub fn failure(&self) -> Option<Arc<Failure>> {
        self.inner.stopped.get()
    }

    /// Completes when the node stops (a metadata failure, or a shutdown).
    pub async fn stopped(&self) -> Arc<Failure> {
        self.inner.stopped.wait().await
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.inner.stats.snapshot()
    }

    /// What the partitions hold of the node-wide bounds: unflushed journal bytes, and the
    /// sealed-segment handle cache.
    pub fn resources_in_use(&self) -> (u64, crate::partition::resources::HandleStats) {
        let resources = &self.inner.resources;
        (resources.journal.used(), resources.handles.stats())
    }

    /// How many partitions each shard owns (the placement table's loads).
    pub fn shard_loads(&self) -> Vec<u32> {
        self.inner.placement.loads()
    }

    /// The table of the partitions' active segment files.
    pub fn active_files(&self) -> crate::partition::resources::ActiveStats {
        self.inner.resources.active.stats()
    }

    /// The retention deletions the shards' cleaners made since the last call, oldest first.
    pub fn take_deletions(&self) -> Vec<Deletion> {
        let mut recent = self
            .inner
            .deletions
            .recent
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        recent.drain(..).collect()
    }

    fn shard(&self, key: PartitionKey) -> &Sender<ShardRequest> {
        &self.inner.shards[self.inner.placement.of(key)]
    }

    fn check_running(&self) -> NodeResult<()> {
        match self.inner.stopped.get() {
            Some(failure) => Err(NodeError::Stopped(failure)),
            None => Ok(()),
        }
    }

    /// Queues `request`, waiting for room when the inbox is full.
    async fn enqueue<T>(&self, inbox: &Sender<T>, request: T) -> NodeResult<()> {
        let request = match inbox.try_send(request) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(request)) => {
                self.inner.stats.inbox_full.fetch_add(1, Ordering::Relaxed);
                request
            }
            Err(TrySendError::Closed(_)) => return Err(self.gone()),
        };
        inbox.send(request).await.map_err(|_| self.gone())
    }

    /// The error for an owner that is gone: the node stopped (or shut down).
    fn gone(&self) -> NodeError {
        NodeError::Stopped(
            self.inner
                .stopped
                .get()
                .unwrap_or_else(|| Arc::new(Failure::Shutdown)),
        )
    }

    async fn answer<T>(&self, pending: Pending<T>) -> NodeResult<T> {
        pending.await.map_err(|_| self.gone())
    }

    fn ticket(&self) -> u64 {
        self.inner.tickets.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The node's cluster id (drawn at its first boot).
    pub fn cluster(&self) -> u128 {
        self.inner.cluster
    }

    /// One cleaner pass on every shard now, at `now` (µs; the retention clock's time when
    /// `None`), besides the shards' own timers. Returns what it deleted.
    pub async fn clean(&self, now: Option<u64>) -> NodeResult<Vec<Deletion>> {
        self.check_running()?;
        let mut passes = Vec::new();
        for shard in &self.inner.shards {
            let (reply, pending) = oneshot();
            self.enqueue(shard, ShardRequest::Clean { now, reply })
                .await?;
            passes.push(pending);
        }
        let mut deleted = Vec::new();
        for pending in passes {
            deleted.extend(self.answer(pending).await?);
        }
        Ok(deleted)
    }

    /// Stops every owner at its next wait, flushing nothing (a crash, for tests on real
    /// files), and waits until they stopped.
    pub async fn halt(&self) {
        self.inner.stopped.set(Arc::new(Failure::Shutdown));
        self.stop_workers().await;
    }

    /// Graceful shutdown: every shard flushes and syncs every committed message whatever
    /// the thresholds, the owners stop, and later requests are refused.
    pub async fn shutdown(&self) -> NodeResult<()> {
        let mut first_error = None;
        let mut closing = Vec::new();
        for shard in &self.inner.shards {
            let (reply, pending) = oneshot();
            if self
                .enqueue(shard, ShardRequest::Close { reply })
                .await
                .is_ok()
            {
                closing.push(pending);
            }
        }
        for pending in closing {
            if let Ok(Err(e)) = pending.await {
                first_error.get_or_insert(e);
            }
        }
        self.inner.stopped.set(Arc::new(Failure::Shutdown));
        // Cancelled owners stop at their next wait; one may be inside a checkpoint until
        // then. Only once every owner stopped is nothing of this node writing: a node booted
        // next on the same directory (a restart in the same process) is its only writer.
        let stopped_owners = self.stop_workers().await;
        // Whatever stopped the node or a shard's close, the record says clean exactly when
        // no write or sync failed and everything written is synced (`exit_record`): all it
        // claims is that the page cache holds what the device holds. Only the caller that
        // stopped the owners writes it: another (a second shutdown, a halt's) has nothing
        // to wait for and cannot know the owners are done.
        if stopped_owners {
            let (env, root) = (&self.inner.env, &self.inner.root);
            device_section(env.tasks.as_ref(), || {
                self.inner.exit.end(env.disk.as_ref(), root)
            });
            settle(env).await;
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Cancels every owner and waits until each has stopped; false when another caller
    /// (a shutdown or a halt before) took them already.
    async fn stop_workers(&self) -> bool {
        let workers: Vec<_> = self
            .inner
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for worker in &workers {
            worker.cancel();
        }
        // A cancelled shard's persist jobs run on to their end: they write too.
        let jobs = &self.inner.stats.persist_jobs_running;
        while !workers.iter().all(|w| w.is_finished()) || jobs.load(Ordering::SeqCst) > 0 {
            self.inner
                .env
                .clock
                .sleep(std::time::Duration::from_millis(1))
                .await;
        }
        !workers.is_empty()
    }
}

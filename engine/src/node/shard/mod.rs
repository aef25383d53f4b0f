//! A partition shard: the only owner of the node's partitions placed on it (the node's
//! placement table, `node/placement.rs`), running one loop that drains its inbox.
//!
//! Each round takes everything queued (at most [`MAX_DRAIN`] requests) and serves it in
//! order. A `persisted` send is appended (admitted, stamped, journaled, not yet visible) and
//! waits; before anything else touches that partition's files, and at the end of the round,
//! the partition's log is flushed and synced once for every send waiting on it ([`persist`];
//! the partitions of a round at once). The superblock record naming those bytes is then
//! written by a job while the shard serves on ([`pipeline`]), and only its return answers
//! each of those senders. Sends that arrive while a log sync runs wait in the inbox and make
//! up the next round's group (group commit across callers, with no timer: a lone producer
//! waits for its own sync and record only); the next group's write and sync overlap the
//! record of the one before.
//!
//! The shard also does the directory work of its partitions (create, purge, remove, drop,
//! a deleted group's offsets) when the metadata owner asks, and runs retention on its own
//! timer, judging each topic by the published view.

use super::hooks::NodeHooks;
use super::recorder::{Recorder, ShardFigures};
use super::retention::{self, Policy, Reason, RetentionClock, Sealed};
use super::view::ViewCell;
use super::{Deletion, NodeStats, PartitionInfo, Sent};
use crate::config::{PartitionSettings, TopicConfig};
use crate::env::chan::{Latch, Receiver, Reply};
use crate::env::{device_section, race, settle, Either, Env};
use crate::error::{Failure, NodeError, NodeResult, WorkError};
use crate::partition::resources::PartitionResources;
use crate::partition::{
    partition_dir, ConsumerId, ConsumerKind, FenceReason, Opening, Partition, PartitionError,
    PartitionIdentity, Polled,
};
use crate::state::{key_of, PartitionKey};
use bytes::BytesMut;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Most requests one round takes from the inbox.
pub const MAX_DRAIN: usize = 1024;

/// Most requests a shard holds for partitions its current metadata batch is creating; past
/// it a request is refused [`NodeError::Busy`].
pub const MAX_PARKED: usize = 4096;
const _: () = assert!(MAX_DRAIN > 0 && MAX_PARKED > 0, "a round takes a request");

mod persist;
mod pipeline;
mod read;
mod replica;
mod request;
mod stores;
pub use persist::{MAX_CONCURRENT_PERSISTS, MAX_PERSIST_JOBS};
pub use pipeline::MAX_RECORDS_OUT;
pub(crate) use request::{ShardRequest, ShardWork};

/// A partition the shard owns: open, fenced, or missing its directory.
struct Owned {
    identity: PartitionIdentity,
    partition: Partition,
    /// Read plans of it out now ([`read`]).
    reads: Arc<std::sync::atomic::AtomicU32>,
}

/// Persisted sends waiting for their partition's persist.
struct Waiting {
    sends: Vec<(Sent, Reply<NodeResult<Sent>>)>,
}

pub(crate) struct Shard {
    pub(crate) env: Env,
    pub(crate) root: PathBuf,
    pub(crate) settings: PartitionSettings,
    /// The simulator's hooks (none in production): the partitions' and the after-persist one.
    hooks: NodeHooks,
    pub(crate) view: Arc<ViewCell>,
    pub(crate) stopped: Latch<Arc<Failure>>,
    pub(crate) stats: Arc<NodeStats>,
    pub(crate) tickets: Arc<AtomicU64>,
    pub(crate) cleaner_interval: Duration,
    pub(crate) deletions: Arc<super::Deletions>,
    recorder: Arc<Recorder>,
    /// Sealed-segment handles and the journal budget, shared by every shard's partitions.
    resources: PartitionResources,
    /// Partitions the current metadata batch's work created or replaced: they serve once
    /// that batch is recorded applied ([`ShardRequest::Applied`]), so nothing is ever
    /// acknowledged from a partition a boot could still take for one its op never made.
    held: BTreeSet<PartitionKey>,
    /// Requests for held partitions, in arrival order (at most [`MAX_PARKED`]).
    parked: VecDeque<ShardRequest>,
    partitions: BTreeMap<PartitionKey, Owned>,
    /// Per partition, the tickets issued before its last persist began and before it ended:
    /// a request with a ticket in between arrived while that persist ran.
    windows: BTreeMap<PartitionKey, (u64, u64)>,
    /// Per partition and group id, the op of the group's latest deletion whose offsets this
    /// shard removed. A poll or store names its group in the view a caller read before it
    /// reached the shard: one named in a view older than the deletion names the deleted
    /// group, and its auto-commit or store, arriving after the removal, would leave an
    /// offset for the next group created under that id. Such a write is dropped, as if
    /// it had landed just before the deletion that removed it. (Dropped with the topic:
    /// its group ids outlive a purge or a removal of one of its partitions.)
    retired: BTreeMap<(PartitionKey, u32), u64>,
    retention_clock: RetentionClock,
    /// Each partition's persist pipeline: its record out, and what waits for it.
    records: pipeline::Records,
    /// The round's offset stores waiting for their directory sync ([`stores`]).
    stores: stores::WaitingStores,
}

impl Shard {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        env: Env,
        root: PathBuf,
        settings: PartitionSettings,
        hooks: NodeHooks,
        view: Arc<ViewCell>,
        stopped: Latch<Arc<Failure>>,
        stats: Arc<NodeStats>,
        tickets: Arc<AtomicU64>,
        cleaner_interval: Duration,
        deletions: Arc<super::Deletions>,
        resources: PartitionResources,
        recorder: Arc<Recorder>,
    ) -> Shard {
        Shard {
            resources,
            recorder,
            retention_clock: RetentionClock::new(&env),
            env,
            root,
            settings,
            hooks,
            view,
            stopped,
            stats,
            tickets,
            cleaner_interval,
            deletions,
            partitions: BTreeMap::new(),
            windows: BTreeMap::new(),
            retired: BTreeMap::new(),
            held: BTreeSet::new(),
            parked: VecDeque::new(),
            records: pipeline::Records::new(),
            stores: stores::WaitingStores::default(),
        }
    }

    /// Takes ownership of a partition opened (or fenced) at boot.
    pub(crate) fn adopt(&mut self, identity: PartitionIdentity, partition: Partition) {
        let previous = self.own(identity, partition);
        assert!(previous.is_none(), "a partition has one owner: {identity}");
    }

    /// Holds `partition` from now on, drawing on the node's shared resources; returns the
    /// one it replaces.
    fn own(&mut self, identity: PartitionIdentity, mut partition: Partition) -> Option<Owned> {
        partition.attach(&self.resources);
        self.partitions.insert(
            key_of(&identity),
            Owned {
                identity,
                partition,
                reads: Arc::default(),
            },
        )
    }

    pub(crate) fn keys(&self) -> Vec<PartitionKey> {
        self.partitions.keys().copied().collect()
    }

    /// The shard's loop: rounds of requests, and retention on its own timer.
    pub(crate) async fn run(mut self, mut inbox: Receiver<ShardRequest>) {
        let mut carried: Vec<ShardRequest> = Vec::new();
        // One timer per cleaner interval, kept across rounds (not one per round).
        let mut cleaner = self.cleaner_timer();
        loop {
            // Records that returned are answered before the next round: a busy inbox never
            // holds back an acknowledgement.
            while let Some(record) = self.records.try_recv() {
                self.record_returned(record, &mut inbox, &mut carried).await;
            }
            let mut round = std::mem::take(&mut carried);
            if round.is_empty() {
                let next = race(self.records.recv(), inbox.recv());
                match race(next, cleaner.as_mut()).await {
                    Either::Left(Either::Right(Some(request))) => round.push(request),
                    Either::Left(Either::Right(None)) => {
                        // Every send still waiting for its record is answered first.
                        self.settle_records(&mut inbox, &mut carried).await;
                        return;
                    }
                    Either::Left(Either::Left(record)) => {
                        self.record_returned(record, &mut inbox, &mut carried).await;
                        continue;
                    }
                    Either::Right(()) => {
                        // Retention records deletions: no record may be out meanwhile.
                        self.settle_records(&mut inbox, &mut carried).await;
                        if self.stopped.get().is_none() {
                            let deleted = self.clean(None);
                            self.deletions.record(deleted);
                            settle(&self.env).await;
                        }
                        cleaner = self.cleaner_timer();
                        continue;
                    }
                }
            }
            while round.len() < MAX_DRAIN {
                match inbox.try_recv() {
                    Ok(request) => round.push(request),
                    Err(_) => break,
                }
            }
            if self.serve(round, &mut inbox, &mut carried).await {
                return;
            }
            // A shard shares its runtime worker with connections: after each round the
            // tasks it woke (and the timers and sockets) run, even while requests keep coming.
            self.env.tasks.yield_now().await;
        }
    }

    fn cleaner_timer(&self) -> crate::env::BoxFuture<'static, ()> {
        self.env
            .clock
            .sleep(self.cleaner_interval.max(Duration::from_nanos(1)))
    }

    /// One round, in order; true when the shard closed.
    async fn serve(
        &mut self,
        round: Vec<ShardRequest>,
        inbox: &mut Receiver<ShardRequest>,
        carried: &mut Vec<ShardRequest>,
    ) -> bool {
        let mut waiting: BTreeMap<PartitionKey, Waiting> = BTreeMap::new();
        let mut round = VecDeque::from(round);
        while let Some(request) = round.pop_front() {
            if let Some(failure) = self.stopped.get() {
                for parked in std::mem::take(&mut self.parked) {
                    refuse(parked, &failure);
                }
                self.held.clear();
                refuse(request, &failure);
                continue;
            }
            if let ShardRequest::Applied = request {
                // The held partitions serve now: their requests first, in arrival order.
                self.held.clear();
                for parked in std::mem::take(&mut self.parked).into_iter().rev() {
                    round.push_front(parked);
                }
                continue;
            }
            if request.key().is_some_and(|key| self.held.contains(&key)) {
                if self.parked.len() < MAX_PARKED {
                    self.parked.push_back(request);
                } else {
                    refuse_busy(request);
                }
                continue;
            }
            // Stores waiting for their directory sync are settled before anything that could
            // read them ([`stores`]'s table).
            match &request {
                ShardRequest::Send { .. }
                | ShardRequest::StoreOffset { .. }
                | ShardRequest::Figures { .. }
                | ShardRequest::Identities { .. } => {}
                other => {
                    if self.settle_stores(other.key()) {
                        settle(&self.env).await;
                    }
                }
            }
            // Anything but a send, a poll, a plan's commit or fence, or figures waits until
            // the partition's waiting sends are durable and answered and no record of it is
            // out: offsets, deletions and directory work see them settled.
            let settles_first = match &request {
                ShardRequest::Send { .. }
                | ShardRequest::Poll { .. }
                | ShardRequest::Commit { .. }
                | ShardRequest::ReadDamaged { .. }
                | ShardRequest::Figures { .. } => None,
                ShardRequest::Work { .. }
                | ShardRequest::Clean { .. }
                | ShardRequest::Close { .. } => Some(None),
                other => other.key().map(Some),
            };
            match settles_first {
                Some(Some(key)) => {
                    if let Some(w) = waiting.remove(&key) {
                        self.persist(key, w, inbox, carried).await;
                    }
                    self.settle_record(key, inbox, carried).await;
                }
                Some(None) => {
                    let all = std::mem::take(&mut waiting);
                    self.persist_all(all, inbox, carried).await;
                    self.settle_records(inbox, carried).await;
                }
                // An offset's first store records its consumer, a flush that seals records
                // the next segment: after the record out.
                None => match &request {
                    ShardRequest::Commit { key, .. } => {
                        self.settle_record(*key, inbox, carried).await
                    }
                    ShardRequest::Send { key, .. } if self.flush_would_wait(*key) => {
                        self.settle_record(*key, inbox, carried).await
                    }
                    _ => {}
                },
            }
            if self.handle(request, &mut waiting).await {
                return true;
            }
        }
        // The stores first: their answers need no other partition's log sync.
        if self.settle_stores(None) {
            settle(&self.env).await;
        }
        self.persist_all(waiting, inbox, carried).await;
        false
    }

    /// Serves one request; true when it closed the shard.
    async fn handle(
        &mut self,
        request: ShardRequest,
        waiting: &mut BTreeMap<PartitionKey, Waiting>,
    ) -> bool {
        match request {
            ShardRequest::Send {
                key,
                batch,
                ticket,
                reply,
            } => {
                self.note_window(key, ticket, &self.stats.joined_running_persist);
                match self.append(key, batch) {
                    Ok(sent) if sent.ack.requires_persist && !sent.ack.durable => {
                        waiting
                            .entry(key)
                            .or_insert_with(|| Waiting { sends: Vec::new() })
                            .sends
                            .push((sent, reply));
                    }
                    result => {
                        settle(&self.env).await;
                        reply.send(result);
                    }
                }
            }
            ShardRequest::Apply {
                key,
                nonce,
                batch,
                timestamp,
                reply,
            } => {
                let result = self.apply(key, nonce, batch, timestamp);
                settle(&self.env).await;
                reply.send(result);
            }
            ShardRequest::ApplyOffset {
                key,
                nonce,
                write,
                resolved_at,
                reply,
            } => {
                let result = self.apply_offset(key, nonce, write, resolved_at);
                settle(&self.env).await;
                reply.send(result);
            }
            ShardRequest::Consumers { key, nonce, reply } => {
                let held = self.replica(key, nonce).and_then(|p| Ok(p.consumers()?));
                reply.send(held);
            }
            ShardRequest::Checkpoint { key, nonce, reply } => {
                let result = self.checkpoint(key, nonce);
                settle(&self.env).await;
                reply.send(result);
            }
            ShardRequest::Rebuild {
                key,
                nonce,
                start,
                reply,
            } => {
                let result = self.rebuild(key, nonce, start);
                settle(&self.env).await;
                reply.send(result);
            }
            ShardRequest::Poll {
                key,
                read,
                commit,
                ticket,
                reply,
            } => {
                self.note_window(key, ticket, &self.stats.polls_during_persist);
                let plan = self.plan_read(key, read, commit);
                // The disk time of opening the plan's segments passes here.
                settle(&self.env).await;
                reply.send(plan);
            }
            ShardRequest::Commit {
                key,
                out,
                commit,
                stored,
                offset,
                reply,
            } => {
                let result = self.commit(key, &out, commit, (stored, offset));
                settle(&self.env).await;
                reply.send(result);
            }
            ShardRequest::ReadDamaged {
                key,
                out,
                fence,
                reply,
            } => {
                self.read_damaged(key, &out, fence);
                reply.send(());
            }
            ShardRequest::StoreOffset {
                key,
                consumer,
                resolved_at,
                offset,
                reply,
            } => {
                let retired = self.is_retired(key, consumer, resolved_at);
                let result = self.open(key).and_then(|p| match retired {
                    true => Ok(false),
                    false => Ok(p.store_offset_in_round(consumer, offset)?),
                });
                settle(&self.env).await;
                self.answer_store(key, result, reply);
            }
            ShardRequest::GetOffset {
                key,
                consumer,
                reply,
            } => {
                let result = self.open(key).and_then(|p| Ok(p.get_offset(consumer)?));
                reply.send(result);
            }
            ShardRequest::DeleteOffset {
                key,
                consumer,
                reply,
            } => {
                let result = self.open(key).and_then(|p| Ok(p.delete_offset(consumer)?));
                settle(&self.env).await;
                reply.send(result);
            }
            ShardRequest::DeleteSegments { key, count, reply } => {
                let result = self.delete_segments(key, count);
                settle(&self.env).await;
                reply.send(result);
            }
            ShardRequest::Inspect { key, reply } => reply.send(self.inspect(key)),
            ShardRequest::Work { work, reply } => {
                // Directory work syncs files and directories: one wait on the device.
                let tasks = self.env.tasks.clone();
                let result = device_section(tasks.as_ref(), || self.work(work));
                // Persist windows of partitions that went (bounded by the partitions held).
                let partitions = &self.partitions;
                self.windows.retain(|key, _| partitions.contains_key(key));
                settle(&self.env).await;
                reply.send(result);
            }
            ShardRequest::Clean { now, reply } => {
                let deleted = self.clean(now);
                settle(&self.env).await;
                reply.send(deleted);
            }
            ShardRequest::Applied => unreachable!("a round serves it"),
            ShardRequest::Identities { reply } => {
                reply.send(self.partitions.values().map(|o| o.identity).collect())
            }
            ShardRequest::Figures { reply } => reply.send(self.figures()),
            ShardRequest::Close { reply } => {
                // A metadata batch may be between its work and its record (a shutdown
                // does not wait for it): what waits for its partitions is not served.
                let shutdown = Arc::new(Failure::Shutdown);
                for parked in std::mem::take(&mut self.parked) {
                    refuse(parked, &shutdown);
                }
                let result = self.close();
                settle(&self.env).await;
                reply.send(result);
                return true;
            }
        }
        false
    }

    /// Whether `key`'s journal has reached a flush that could seal its segment while its
    /// record is out: its sends would pile up in memory until the record returns.
    fn flush_would_wait(&self, key: PartitionKey) -> bool {
        self.records.busy(key)
            && self
                .partitions
                .get(&key)
                .is_some_and(|owned| owned.partition.flush_may_seal())
    }

    /// Counts a request for `key` that arrived while its last persist ran.
    fn note_window(&self, key: PartitionKey, ticket: u64, counter: &AtomicU64) {
        if let Some(&(start, end)) = self.windows.get(&key) {
            if ticket > start && ticket <= end {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn missing(key: PartitionKey) -> NodeError {
        NodeError::PartitionNotFound {
            stream: key.0,
            topic: key.1,
            partition: key.2,
        }
    }

    /// Whether `consumer`, named in the view of op `resolved_at`, is a group whose offsets
    /// in `key` a later deletion already removed ([`Shard::retired`]).
    pub(super) fn is_retired(
        &self,
        key: PartitionKey,
        consumer: ConsumerId,
        resolved_at: u64,
    ) -> bool {
        consumer.kind == ConsumerKind::Group
            && self
                .retired
                .get(&(key, consumer.id))
                .is_some_and(|deleted| resolved_at < *deleted)
    }

    fn open(&mut self, key: PartitionKey) -> NodeResult<&mut Partition> {
        self.partitions
            .get_mut(&key)
            .map(|o| &mut o.partition)
            .ok_or(Self::missing(key))
    }

    fn append(&mut self, key: PartitionKey, batch: BytesMut) -> NodeResult<Sent> {
        let owned = self.partitions.get_mut(&key).ok_or(Self::missing(key))?;
        let ack = owned.partition.append(batch)?;
        // Offsets are dense and monotonic: the batch ends where the partition's next one
        // starts, and nothing appended is durable before a persist.
        debug_assert_eq!(
            owned.partition.next_offset().ok(),
            Some(ack.base_offset + u64::from(ack.message_count)),
            "an appended batch ends at the partition's next offset"
        );
        debug_assert!(!ack.durable, "an append is never durable by itself");
        Ok(Sent {
            partition: key.2,
            nonce: owned.identity.nonce,
            ack,
        })
    }

    /// What this shard holds now: fenced partitions by reason, journal bytes per topic.
    fn figures(&self) -> ShardFigures {
        let mut figures = ShardFigures::default();
        for (&(stream, topic, _), owned) in &self.partitions {
            let partition = &owned.partition;
            match partition.fence_reason() {
                Some(reason) => figures.fenced[reason.index()] += 1,
                None => {
                    *figures.journal_bytes.entry((stream, topic)).or_default() +=
                        partition.journal_bytes().unwrap_or(0);
                }
            }
        }
        figures
    }

    fn inspect(&self, key: PartitionKey) -> Option<PartitionInfo> {
        let owned = self.partitions.get(&key)?;
        let p = &owned.partition;
        Some(PartitionInfo {
            identity: owned.identity,
            fence: p.fence_reason().cloned(),
            segment_starts: p.segment_starts().unwrap_or_default(),
            log_start: p.log_start().unwrap_or(0),
            visible_next_offset: p.visible_next_offset().ok(),
            durable_next_offset: p.durable_point().ok().map(|d| d.next_offset),
            sealed: p.sealed_segments().unwrap_or_default(),
            stored_bytes: p.stored_bytes().unwrap_or(0),
        })
    }

    fn work(&mut self, work: ShardWork) -> Result<(), WorkError> {
        let _span = tracing::info_span!("shard_work", ?work).entered();
        match work {
            ShardWork::Create { identity, config } => self.create(identity, config),
            ShardWork::Purge {
                identity,
                replaces,
                config,
            } => {
                let key = key_of(&identity);
                let dir = self.dir(key);
                self.note_deletion(key);
                self.partitions.remove(&key);
                let found = super::tree::survey_path(self.env.disk.as_ref(), &dir);
                let old = PartitionIdentity {
                    nonce: replaces,
                    ..identity
                };
                match found {
                    super::tree::Found::Partition(id) if id == identity => {
                        self.reopen(identity, config)
                    }
                    super::tree::Found::Partition(id) if id == old => {
                        super::work::remove_durably(self.env.disk.as_ref(), &dir)?;
                        self.create(identity, config)
                    }
                    super::tree::Found::Missing | super::tree::Found::Empty => {
                        super::work::remove_durably(self.env.disk.as_ref(), &dir)?;
                        self.create(identity, config)
                    }
                    other => {
                        // Not the partition the purge replaces: keep it for an operator and
                        // fence the partition (never serve it from there).
                        tracing::error!(dir = %dir.display(), found = %other, "purge found a directory it cannot account for; keeping it");
                        let reason = match other {
                            super::tree::Found::Partition(found) => {
                                FenceReason::SuperblockIdentity {
                                    path: dir.clone(),
                                    expected: identity,
                                    found,
                                }
                            }
                            other => FenceReason::DirectoryInTheWay {
                                dir: dir.clone(),
                                found: other.to_string(),
                            },
                        };
                        self.own(identity, Partition::fenced(reason));
                        Ok(())
                    }
                }
            }
            ShardWork::Remove { identity } => {
                let key = key_of(&identity);
                let dir = self.dir(key);
                self.note_deletion(key);
                self.partitions.remove(&key);
                match super::tree::survey_path(self.env.disk.as_ref(), &dir) {
                    super::tree::Found::Partition(id) if id != identity => {
                        tracing::error!(dir = %dir.display(), found = %id, "removal found another partition's directory; keeping it");
                        Ok(())
                    }
                    super::tree::Found::Foreign { why } => {
                        tracing::error!(dir = %dir.display(), why, "removal found a directory it cannot account for; keeping it");
                        Ok(())
                    }
                    _ => Ok(super::work::remove_durably(self.env.disk.as_ref(), &dir)?),
                }
            }
            ShardWork::DropTopic { stream, topic } => {
                for key in self
                    .keys()
                    .into_iter()
                    .filter(|k| (k.0, k.1) == (stream, topic))
                {
                    self.note_deletion(key);
                }
                self.partitions
                    .retain(|(s, t, _), _| (*s, *t) != (stream, topic));
                self.retired
                    .retain(|((s, t, _), _), _| (*s, *t) != (stream, topic));
                Ok(())
            }
            ShardWork::DropStream { stream } => {
                for key in self.keys().into_iter().filter(|k| k.0 == stream) {
                    self.note_deletion(key);
                }
                self.partitions.retain(|(s, _, _), _| *s != stream);
                self.retired.retain(|((s, _, _), _), _| *s != stream);
                Ok(())
            }
            ShardWork::RemoveGroupOffsets { key, group, op } => {
                let deleted = self.retired.entry((key, group)).or_default();
                *deleted = (*deleted).max(op);
                if let Some(owned) = self.partitions.get_mut(&key) {
                    if owned.partition.fence_reason().is_none() {
                        owned.partition.delete_offset(ConsumerId::group(group))?;
                    }
                }
                Ok(())
            }
        }
    }

    fn dir(&self, key: PartitionKey) -> PathBuf {
        partition_dir(&self.root, key.0, key.1, key.2)
    }

    fn create(
        &mut self,
        identity: PartitionIdentity,
        config: TopicConfig,
    ) -> Result<(), WorkError> {
        let key = key_of(&identity);
        let dir = self.dir(key);
        let disk = self.env.disk.as_ref();
        if let Some(parent) = dir.parent() {
            disk.create_dir_all(parent)?;
        }
        let (settings, hooks) = (self.settings, self.hooks.partition);
        let partition =
            Partition::create_unlinked(&self.env, &dir, identity, config, settings, hooks)?;
        self.own(identity, partition);
        self.held.insert(key);
        Ok(())
    }

    /// The partition is there already (done before a crash): open it.
    fn reopen(
        &mut self,
        identity: PartitionIdentity,
        config: TopicConfig,
    ) -> Result<(), WorkError> {
        let key = key_of(&identity);
        let dir = self.dir(key);
        let (settings, hooks) = (self.settings, self.hooks.partition);
        let opened = Partition::open_with_hooks(
            &self.env,
            &dir,
            identity,
            config,
            settings,
            hooks,
            Opening::Alone,
        )?;
        self.own(identity, opened.partition);
        self.held.insert(key);
        Ok(())
    }

    fn close(&mut self) -> NodeResult<()> {
        let mut first_error = None;
        for (key, owned) in std::mem::take(&mut self.partitions) {
            if owned.partition.fence_reason().is_some() {
                continue;
            }
            if let Err(e) = owned.partition.close() {
                tracing::error!(?key, %e, "closing a partition failed");
                first_error.get_or_insert(NodeError::from(e));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    // Retention ---------------------------------------------------------------------------

    /// One cleaner pass over this shard's partitions, at `now` or the retention clock's
    /// time; what it deleted.
    fn clean(&mut self, now: Option<u64>) -> Vec<Deletion> {
        let now = now.unwrap_or_else(|| self.retention_clock.now(&self.env));
        let mut deleted = Vec::new();
        let view = self.view.load();
        let keys = self.keys();
        for key in keys {
            let Some(topic) = view.find_topic(key.0, key.1) else {
                continue;
            };
            let policy = Policy::for_topic(
                topic.options.message_expiry,
                topic.options.max_topic_size,
                topic.partitions.len() as u32,
                topic.options.segment_size,
                self.settings.limits.max_batch_bytes,
            );
            if policy.message_expiry == 0 && policy.budget == 0 {
                continue;
            }
            let Some(sealed) = self.sealed(key) else {
                continue;
            };
            let reasons = retention::decide(&sealed, policy, now);
            deleted.extend(self.delete_prefix(key, &sealed, &reasons, policy, now));
        }
        deleted
    }

    fn sealed(&self, key: PartitionKey) -> Option<Vec<Sealed>> {
        let owned = self.partitions.get(&key)?;
        let sealed = owned.partition.sealed_segments().ok()?;
        Some(
            sealed
                .into_iter()
                .map(|(start_offset, bytes, newest)| Sealed {
                    start_offset,
                    bytes,
                    newest,
                })
                .collect(),
        )
    }

    fn delete_prefix(
        &mut self,
        key: PartitionKey,
        sealed: &[Sealed],
        reasons: &[Reason],
        policy: Policy,
        now: u64,
    ) -> Vec<Deletion> {
        if reasons.is_empty() {
            return Vec::new();
        }
        let sealed_bytes = sealed.iter().map(|s| s.bytes).sum();
        let Some(owned) = self.partitions.get_mut(&key) else {
            return Vec::new();
        };
        let starts = owned.partition.segment_starts().unwrap_or_default();
        let nonce = owned.identity.nonce;
        if let Err(error) = owned.partition.delete_oldest_segments(reasons.len()) {
            tracing::error!(?key, %error, "retention could not delete segments");
            return Vec::new();
        }
        self.note_deletion(key);
        for (i, (segment, reason)) in sealed.iter().zip(reasons).enumerate() {
            let r = reason.index();
            self.recorder.deleted_segments.add(r, 1);
            self.recorder
                .deleted_messages
                .add(r, starts[i + 1] - segment.start_offset);
            self.recorder.deleted_bytes.add(r, segment.bytes);
        }
        sealed
            .iter()
            .zip(reasons)
            .enumerate()
            .map(|(i, (segment, reason))| Deletion {
                partition: key,
                nonce,
                segment: *segment,
                end: starts[i + 1],
                reason: *reason,
                sealed_bytes,
                policy,
                now,
            })
            .collect()
    }

    fn delete_segments(&mut self, key: PartitionKey, count: u32) -> NodeResult<Vec<Deletion>> {
        // A fenced partition answers with its reason.
        self.open(key)?.sealed_segments()?;
        let sealed = self.sealed(key).unwrap_or_default();
        if count as usize > sealed.len() {
            return Err(NodeError::Partition(PartitionError::ActiveSegment {
                requested: count as usize,
                sealed: sealed.len(),
            }));
        }
        let reasons = vec![Reason::Requested; count as usize];
        let policy = Policy {
            message_expiry: 0,
            budget: 0,
        };
        let now = self.env.clock.wall_micros();
        Ok(self.delete_prefix(key, &sealed, &reasons, policy, now))
    }
}

/// Answers a request the stopped node will not serve.
fn refuse(request: ShardRequest, failure: &Arc<Failure>) {
    answer_error(request, &|| NodeError::Stopped(failure.clone()));
}

/// Answers a request for a held partition that found the parking full.
fn refuse_busy(request: ShardRequest) {
    answer_error(request, &|| {
        NodeError::Busy("requests for partitions being created")
    });
}

fn answer_error(request: ShardRequest, error: &dyn Fn() -> NodeError) {
    match request {
        ShardRequest::Send { reply, .. } => reply.send(Err(error())),
        ShardRequest::Apply { reply, .. } => reply.send(Err(error())),
        ShardRequest::Checkpoint { reply, .. } => reply.send(Err(error())),
        ShardRequest::ApplyOffset { reply, .. } => reply.send(Err(error())),
        ShardRequest::Consumers { reply, .. } => reply.send(Err(error())),
        ShardRequest::Rebuild { reply, .. } => reply.send(Err(error())),
        ShardRequest::Poll { reply, .. } => reply.send(Err(error())),
        ShardRequest::Commit { reply, .. } => reply.send(Err(error())),
        ShardRequest::ReadDamaged {
            key, fence, reply, ..
        } => {
            tracing::error!(?key, reason = %fence.reason, error = %error(), "damage a read found is not fenced: the shard did not take the request");
            reply.send(())
        }
        ShardRequest::StoreOffset { reply, .. } => reply.send(Err(error())),
        ShardRequest::GetOffset { reply, .. } => reply.send(Err(error())),
        ShardRequest::DeleteOffset { reply, .. } => reply.send(Err(error())),
        ShardRequest::DeleteSegments { reply, .. } => reply.send(Err(error())),
        ShardRequest::Inspect { reply, .. } => reply.send(None),
        ShardRequest::Work { reply, .. } => reply.send(Err(WorkError::Io(std::io::Error::other(
            error().to_string(),
        )))),
        ShardRequest::Clean { reply, .. } => reply.send(Vec::new()),
        ShardRequest::Applied => {}
        // Unanswered: the check that asked is skipped (an empty list would be a false one).
        ShardRequest::Identities { reply } => drop(reply),
        // Unanswered: the scrape counts this shard as not reporting.
        ShardRequest::Figures { reply } => drop(reply),
        ShardRequest::Close { reply } => reply.send(Ok(())),
    }
}

/// The last offset a poll returned.
pub(crate) fn last_offset(polled: &Polled) -> Option<u64> {
    let batch = polled.batches.last()?;
    crate::format::MessageIter::new(
        batch,
        crate::format::BatchHeader::decode(batch).ok()?.base_offset,
    )
    .last()
    .map(|m| m.offset)
}

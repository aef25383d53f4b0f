//! The metadata owner: the only writer of the metadata state and plane. It drains every
//! operation queued while the previous batch ran into one batch and commits it:
//!
//! ```text
//! check each op on a staged copy of the state (a refusal changes nothing)
//!   → one journal write + one sync for the batch (ENOSPC: cut back, answer no-space,
//!     keep serving; any other failure: the node stops)
//!   → when there is directory work: a record naming the new journal end, then the work
//!     (partitions created, purged, removed on their shards, in parallel within an op; each
//!     changed directory synced once), then a record naming the op applied
//!   → publish the new view → effects to the groups owner → answer every caller
//!   → checkpoint when the journal is long enough
//! ```
//!
//! Once an entry is durable, any failure stops the node ([`Failure`]): the state it would
//! serve is not what the disk holds, and a restart redoes the work of every journaled op.

use super::groups::GroupRequest;
use super::hooks::OwnerHooks;
use super::placement::Placement;
use super::shard::{ShardRequest, ShardWork};
use super::tree::{stream_dir, topic_dir};
use super::view::{MetaView, ViewCell};
use super::work::{ancestors, remove_deleted_tree, sync_dirs};
use super::NodeStats;
use crate::env::chan::{oneshot, Latch, Pending, Receiver, Reply, Sender};
use crate::env::{settle, Env};
use crate::error::{Failure, NodeError, NodeResult, WorkError};
use crate::metadata::journal::Origin;
use crate::metadata::{MetadataError, MetadataPlane};
use crate::partition::{partition_dir, PartitionIdentity};
use crate::state::ops::MetaOp;
use crate::state::{key_of, Applied, DirWork, Effect, MetaState, OpContext, PartitionKey};
use std::collections::{BTreeSet, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Most operations one batch journals.
pub const MAX_BATCH_OPS: usize = 256;
const _: () = assert!(
    MAX_BATCH_OPS < crate::metadata::journal::MAX_LATER,
    "boot sees past the entries of one write"
);
/// Most body bytes one batch journals (a batch always takes at least one op).
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
const _: () = assert!(
    MAX_BATCH_OPS > 0 && MAX_BATCH_BYTES >= crate::state::ops::MAX_BODY_LEN,
    "a batch holds at least one op of the largest body"
);

/// Directory work a batch keeps queued per shard at once: a large create's work goes out a
/// few at a time, so another tenant's send to the same shard waits behind at most this many
/// items, not the whole create (review S11).
pub const WORK_PER_SHARD: usize = 4;

/// Work sent to the shards and not yet answered, at most `limit` at once (oldest first).
struct InFlight {
    pending: std::collections::VecDeque<Pending<Result<(), WorkError>>>,
    limit: usize,
}

impl InFlight {
    fn new(limit: usize) -> InFlight {
        assert!(limit > 0, "work goes out at least one at a time");
        InFlight {
            pending: std::collections::VecDeque::with_capacity(limit),
            limit,
        }
    }

    /// Waits for the oldest answers until one more may go out.
    async fn room(&mut self) -> Result<(), WorkError> {
        while self.pending.len() >= self.limit {
            self.settle_oldest().await?;
        }
        Ok(())
    }

    fn push(&mut self, answer: Pending<Result<(), WorkError>>) {
        debug_assert!(self.pending.len() < self.limit, "room was made first");
        self.pending.push_back(answer);
    }

    /// Waits for every answer.
    async fn drain(&mut self) -> Result<(), WorkError> {
        while !self.pending.is_empty() {
            self.settle_oldest().await?;
        }
        Ok(())
    }

    async fn settle_oldest(&mut self) -> Result<(), WorkError> {
        let answer = self.pending.pop_front().expect("an answer is pending");
        answer
            .await
            .map_err(|_| WorkError::Io(io::Error::other("a shard stopped")))?
    }
}

/// What the metadata owner answers: the op's result, and where it sits in the journal (its
/// own op number when accepted; the last op of the state it was checked against when
/// refused).
#[derive(Debug)]
pub struct MetaReply {
    pub at_op: u64,
    pub result: NodeResult<Applied>,
}

pub(crate) struct OpRequest {
    pub(crate) op: MetaOp,
    pub(crate) origin: Origin,
    pub(crate) reply: Reply<MetaReply>,
}

/// What the metadata owner is asked: an op, or (in a cluster) a whole state to adopt.
pub(crate) enum OwnerRequest {
    Op(OpRequest),
    Adopt(AdoptRequest),
}

/// A state a cluster's leader sent whole: the state after op `op`, whose prepare's
/// checksum is `anchor`. Answered `true` once adopted, `false` when the node's state was
/// already as new (its decision at or after the adopted state's).
pub(crate) struct AdoptRequest {
    pub(crate) op: u64,
    pub(crate) anchor: u128,
    pub(crate) state: MetaState,
    pub(crate) reply: Reply<NodeResult<bool>>,
}

/// An op the batch accepted.
struct Accepted {
    op: MetaOp,
    origin: Origin,
    applied: Applied,
    number: u64,
    reply: Reply<MetaReply>,
}

pub(crate) struct MetaOwner {
    pub(crate) env: Env,
    pub(crate) root: PathBuf,
    pub(crate) plane: MetadataPlane,
    pub(crate) current: Arc<MetaView>,
    pub(crate) view: Arc<ViewCell>,
    pub(crate) shards: Vec<Sender<ShardRequest>>,
    /// Which shard owns each partition: placed here at creation, vacated at removal,
    /// forgotten with its topic or stream.
    pub(crate) placement: Arc<Placement>,
    pub(crate) groups: Sender<GroupRequest>,
    pub(crate) stopped: Latch<Arc<Failure>>,
    pub(crate) stats: Arc<NodeStats>,
    /// Ops a batch put off to the next one (see [`Self::stage`]).
    pub(crate) deferred: VecDeque<OpRequest>,
    /// The simulator's hooks (none in production).
    pub(crate) hooks: OwnerHooks,
}

impl MetaOwner {
    pub(crate) async fn run(mut self, mut inbox: Receiver<OwnerRequest>) {
        loop {
            let mut batch: Vec<OpRequest> = self.deferred.drain(..).collect();
            let mut adopt = None;
            if batch.is_empty() {
                match inbox.recv().await {
                    Some(OwnerRequest::Op(request)) => batch.push(request),
                    Some(OwnerRequest::Adopt(request)) => adopt = Some(request),
                    None => return,
                }
            }
            let mut bytes: usize = batch.iter().map(|r| r.op.body().len()).sum();
            while adopt.is_none() && batch.len() < MAX_BATCH_OPS && bytes < MAX_BATCH_BYTES {
                match inbox.try_recv() {
                    Ok(OwnerRequest::Op(request)) => {
                        bytes += request.op.body().len();
                        batch.push(request);
                    }
                    Ok(OwnerRequest::Adopt(request)) => adopt = Some(request),
                    Err(_) => break,
                }
            }
            if !batch.is_empty() {
                self.stats.meta_batches.fetch_add(1, Ordering::Relaxed);
                self.commit(batch).await;
            }
            if let Some(request) = adopt {
                // Ops queued before the adoption go first, those a batch put off too.
                while !self.deferred.is_empty() {
                    let batch = self.deferred.drain(..).collect();
                    self.commit(batch).await;
                }
                let AdoptRequest {
                    op,
                    anchor,
                    state,
                    reply,
                } = request;
                let result = self.adopt(op, anchor, state).await;
                reply.send(result);
            }
        }
    }

    /// Checks, journals, does the work of, publishes and answers one batch.
    async fn commit(&mut self, batch: Vec<OpRequest>) {
        // Boot tells a torn last write from later damage only if one write holds fewer
        // entries than a scan collects after damage (`MAX_LATER`).
        debug_assert!(
            !batch.is_empty() && batch.len() <= MAX_BATCH_OPS,
            "a batch holds 1..=MAX_BATCH_OPS ops"
        );
        if let Some(failure) = self.stopped.get() {
            for request in batch {
                request.reply.send(MetaReply {
                    at_op: self.current.op,
                    result: Err(NodeError::Stopped(failure.clone())),
                });
            }
            return;
        }
        // While the node serves, the journal ends at the published op: a failed write or
        // sync changed neither, any later failure stopped the node.
        debug_assert_eq!(
            self.plane.last_op(),
            self.current.op,
            "a batch starts where the journal ends"
        );
        let (staged, accepted, refused) = self.stage(batch);
        debug_assert!(
            accepted
                .iter()
                .zip(self.current.op + 1..)
                .all(|(a, number)| a.number == number),
            "accepted ops are numbered in order after the published op"
        );
        if accepted.is_empty() {
            for (reply, at_op, error) in refused {
                reply.send(MetaReply {
                    at_op,
                    result: Err(error),
                });
            }
            return;
        }
        let entries: Vec<(MetaOp, Origin)> =
            accepted.iter().map(|a| (a.op.clone(), a.origin)).collect();
        self.stats
            .meta_ops
            .fetch_add(entries.len() as u64, Ordering::Relaxed);
        let journaled = match self.plane.write_entries(&entries) {
            Ok(written) => {
                settle(&self.env).await;
                if let Some(hook) = self.hooks.before_metadata_sync {
                    let last = accepted.last().map_or(0, |a| a.number);
                    hook(&mut || {
                        self.view.publish(Arc::new(MetaView {
                            op: last,
                            state: staged.clone(),
                        }))
                    });
                }
                let synced = self.plane.sync_entries(written);
                settle(&self.env).await;
                synced
            }
            Err(e) => Err(e),
        };
        if let Err(error) = journaled {
            self.journal_failed(error, accepted, refused);
            return;
        }
        // Durable from here on: a failure stops the node.
        match self.apply(&staged, &accepted).await {
            Ok(()) => {}
            Err(failure) => {
                let failure = self.fail(failure);
                for a in accepted {
                    a.reply.send(MetaReply {
                        at_op: a.number,
                        result: Err(NodeError::Stopped(failure.clone())),
                    });
                }
                for (reply, at_op, _) in refused {
                    reply.send(MetaReply {
                        at_op,
                        result: Err(NodeError::Stopped(failure.clone())),
                    });
                }
                return;
            }
        }
        let last = accepted.last().expect("a batch with entries").number;
        // Every answer below promises its op durable and its work done.
        assert!(
            last <= self.plane.last_op() && last <= self.plane.applied_op(),
            "an answer never runs ahead of the journal's durable end or the applied record"
        );
        self.current = Arc::new(MetaView {
            op: last,
            state: staged,
        });
        self.view.publish(self.current.clone());
        let effects: Vec<Effect> = accepted
            .iter()
            .flat_map(|a| a.applied.effects.iter().cloned())
            .collect();
        if !effects.is_empty() {
            // FIFO after the publish and before any answer: a caller that got its answer
            // and then asks the groups owner finds the effects applied.
            let _ = self
                .groups
                .send(GroupRequest::Effects {
                    effects,
                    at_op: last,
                })
                .await;
        }
        for a in accepted {
            a.reply.send(MetaReply {
                at_op: a.number,
                result: Ok(a.applied),
            });
        }
        for (reply, at_op, error) in refused {
            reply.send(MetaReply {
                at_op,
                result: Err(error),
            });
        }
        self.check();
        if self.plane.wants_checkpoint() {
            let checkpoint = self.plane.checkpoint(&self.current.state);
            settle(&self.env).await;
            match checkpoint {
                Ok(crate::metadata::Checkpointed::Done) => {}
                Ok(crate::metadata::Checkpointed::NoSpace) => {
                    self.stats.meta_no_space.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.fail(Failure::Metadata(e));
                }
            }
        }
    }

    /// Checks every op of the batch on a staged copy of the state, in order. A refused op
    /// changes nothing; an op that would create a group under an id an earlier op of this
    /// batch freed waits for the next batch with every op after it (a group's offset files
    /// are keyed by its id: the deletion's removal of them must be done before the id is
    /// reused); an op whose new partition's directory exists though the metadata has no
    /// partition there is refused (the directory is never removed by an op that did not
    /// delete it).
    #[allow(clippy::type_complexity)]
    fn stage(
        &mut self,
        batch: Vec<OpRequest>,
    ) -> (
        MetaState,
        Vec<Accepted>,
        Vec<(Reply<MetaReply>, u64, NodeError)>,
    ) {
        let base = self.current.clone();
        let timestamp = self.env.clock.wall_micros();
        let cluster = self.plane.cluster();
        let mut staged = base.state.clone();
        let mut accepted: Vec<Accepted> = Vec::new();
        let mut refused = Vec::new();
        let mut freed_groups: BTreeSet<(u32, u32, u32)> = BTreeSet::new();
        let mut deferring = false;
        for request in batch {
            if let Some(failure) = self.stopped.get() {
                // A decided op of this batch stopped the node: nothing after it is applied
                // (a later decision journaled without it would hide the gap at the restart).
                refused.push((request.reply, base.op, NodeError::Stopped(failure)));
                continue;
            }
            if deferring || reuses_freed_group(&staged, &request.op, &freed_groups) {
                deferring = true;
                self.deferred.push_back(request);
                continue;
            }
            let number = base.op + 1 + accepted.len() as u64;
            let decided = request.origin.decided;
            if decided != 0 && decided <= staged.decided() {
                // A decision applied before (boot hands the group's log from its last
                // snapshot again): answered, never applied twice.
                refused.push((
                    request.reply,
                    number - 1,
                    NodeError::AlreadyDecided(decided),
                ));
                continue;
            }
            // A decided op takes its time from the leader that proposed it, so every
            // member stamps the same; the node's own ops take the batch's.
            let timestamp = if decided != 0 {
                request.origin.timestamp
            } else {
                timestamp
            };
            let ctx = OpContext {
                op: number,
                timestamp,
                cluster,
                decided,
                proposal: request.origin.key,
                asked_at: request.origin.asked_at,
            };
            match staged.apply(&request.op, ctx) {
                Ok(applied) => {
                    if let Err(error) = self.check_paths(&base.state, &applied.work) {
                        staged = replay(&base.state, &accepted, cluster);
                        let error = if decided != 0 {
                            // Every other member applies it: refusing here would make this
                            // member's state another's. Stop until an operator moves it.
                            let failure =
                                self.fail(Failure::Work(WorkError::Io(io::Error::other(format!(
                                    "a decided operation cannot create its partition: {error}"
                                )))));
                            NodeError::Stopped(failure)
                        } else {
                            error
                        };
                        refused.push((request.reply, number - 1, error));
                        continue;
                    }
                    for effect in &applied.effects {
                        if let Effect::GroupDeleted { group, .. } = effect {
                            freed_groups.insert(*group);
                        }
                    }
                    accepted.push(Accepted {
                        op: request.op,
                        origin: Origin {
                            timestamp,
                            ..request.origin
                        },
                        applied,
                        number,
                        reply: request.reply,
                    });
                }
                Err(error) => refused.push((request.reply, number - 1, error)),
            }
        }
        (staged, accepted, refused)
    }

    /// A new partition's directory must not exist unless the state before the batch has a
    /// partition there (which an earlier op of the batch removes or replaces).
    pub(super) fn check_paths(&self, before: &MetaState, work: &[DirWork]) -> NodeResult<()> {
        for work in work {
            if let DirWork::CreatePartition(identity) = work {
                let key = key_of(identity);
                let dir = partition_dir(&self.root, key.0, key.1, key.2);
                let exists = self.env.disk.exists(&dir).map_err(|e| {
                    NodeError::InvalidRequest(format!("cannot check {}: {e}", dir.display()))
                })?;
                if exists && !self.removed_before(before, key, &dir) {
                    return Err(NodeError::DirectoryInTheWay(dir));
                }
            }
        }
        Ok(())
    }

    /// Whether an earlier op of the batch removes the directory at `key` before this one
    /// creates it there: the state before the batch has a partition at `key` and the
    /// directory holds that partition (or nothing). A directory the removal would keep (an
    /// identity it does not remove, data without one) stays in the way.
    fn removed_before(&self, before: &MetaState, key: PartitionKey, dir: &Path) -> bool {
        let Some(old) = before.partition(key) else {
            return false;
        };
        match super::tree::survey_path(self.env.disk.as_ref(), dir) {
            super::tree::Found::Partition(found) => found == old,
            super::tree::Found::Empty | super::tree::Found::Missing => true,
            super::tree::Found::Foreign { .. } => false,
        }
    }

    /// The journal write or sync failed: nothing of the batch counts. Out of space, the
    /// journal is cut back durably and every caller of the batch is told so (the node keeps
    /// serving); any other error stops the node.
    fn journal_failed(
        &mut self,
        error: MetadataError,
        accepted: Vec<Accepted>,
        refused: Vec<(Reply<MetaReply>, u64, NodeError)>,
    ) {
        let mut serving = false;
        let answer: Box<dyn Fn() -> NodeError> = if error.is_no_space() {
            match self.plane.cut_back() {
                Ok(()) => {
                    tracing::warn!(%error, "the metadata journal is out of space: the batch was refused");
                    self.stats.meta_no_space.fetch_add(1, Ordering::Relaxed);
                    serving = true;
                    Box::new(|| NodeError::MetadataNoSpace)
                }
                Err(cut) => {
                    let failure = self.fail(Failure::Metadata(cut));
                    Box::new(move || NodeError::Stopped(failure.clone()))
                }
            }
        } else {
            let failure = self.fail(Failure::Metadata(error));
            Box::new(move || NodeError::Stopped(failure.clone()))
        };
        let at_op = self.current.op;
        debug_assert_eq!(
            self.plane.last_op(),
            at_op,
            "nothing of a failed journal write counts"
        );
        for a in accepted {
            a.reply.send(MetaReply {
                at_op,
                result: Err(answer()),
            });
        }
        for (reply, judged_at, refusal) in refused {
            // An op refused on its own merits, against the state as it stays (no op of the
            // failed write before it), keeps its answer while the node serves.
            let error = if serving && judged_at == at_op {
                refusal
            } else {
                answer()
            };
            reply.send(MetaReply {
                at_op,
                result: Err(error),
            });
        }
    }

    /// Stops the node (the first failure stays).
    pub(super) fn fail(&mut self, failure: Failure) -> Arc<Failure> {
        let failure = Arc::new(failure);
        if self.stopped.set(failure.clone()) {
            tracing::error!(%failure, "the node stops: restart it to recover what the disk holds");
        }
        // Wake every shard, so requests it holds for partitions this batch created are
        // answered now (a full inbox wakes it anyway).
        for shard in &self.shards {
            let _ = shard.try_send(ShardRequest::Applied);
        }
        self.stopped.get().expect("just set")
    }

    /// Records, does the directory work of, and records as applied the journaled batch.
    async fn apply(&mut self, staged: &MetaState, accepted: &[Accepted]) -> Result<(), Failure> {
        let has_work = accepted.iter().any(|a| !a.applied.work.is_empty());
        if has_work {
            self.plane.record_journal().map_err(Failure::Metadata)?;
            settle(&self.env).await;
            let mut dirs = BTreeSet::new();
            for a in accepted {
                self.do_work(staged, a.number, &a.applied.work, &mut dirs)
                    .await
                    .map_err(Failure::Work)?;
            }
            sync_dirs(self.env.disk.as_ref(), &dirs).map_err(|e| Failure::Work(e.into()))?;
        }
        self.plane.record_applied().map_err(Failure::Metadata)?;
        settle(&self.env).await;
        if has_work {
            // Only now may the partitions this work created answer anyone: a boot finds
            // their ops applied, so a missing directory is damage, never work to redo.
            for shard in &self.shards {
                let _ = shard.send(ShardRequest::Applied).await;
            }
            self.check_partitions(staged).await;
        }
        Ok(())
    }

    /// After a batch's work: the shards hold exactly the state's partitions, each on the
    /// shard it is placed on, and nothing else counts as placed. (A shard that stopped
    /// answers nothing: no check.)
    pub(super) async fn check_partitions(&self, state: &MetaState) {
        if self.stopped.get().is_some() {
            return;
        }
        let mut answers = Vec::with_capacity(self.shards.len());
        for shard in &self.shards {
            let (reply, pending) = oneshot();
            if shard
                .send(ShardRequest::Identities { reply })
                .await
                .is_err()
            {
                return;
            }
            answers.push(pending);
        }
        let mut held = BTreeSet::new();
        for (index, pending) in answers.into_iter().enumerate() {
            let Ok(identities) = pending.await else {
                return;
            };
            for identity in identities {
                assert_eq!(
                    self.placement.of(key_of(&identity)),
                    index,
                    "{identity} is held by the shard it is placed on"
                );
                assert!(held.insert(identity), "{identity} is held once");
            }
        }
        let expected: BTreeSet<_> = state.partitions().into_iter().collect();
        assert_eq!(
            held, expected,
            "the shards hold exactly the state's partitions"
        );
        assert_eq!(
            self.placement
                .loads()
                .iter()
                .map(|&n| n as usize)
                .sum::<usize>(),
            expected.len(),
            "exactly the state's partitions are placed"
        );
        self.placement.check();
    }

    /// Op `op`'s directory work: its partitions' work on their shards, a few items at a time
    /// ([`WORK_PER_SHARD`] per shard of the node, in all); the
    /// directories of deleted topics and streams after their partitions were closed.
    pub(super) async fn do_work(
        &mut self,
        state: &MetaState,
        op: u64,
        work: &[DirWork],
        dirs: &mut BTreeSet<PathBuf>,
    ) -> Result<(), WorkError> {
        let mut pending = InFlight::new(WORK_PER_SHARD * self.shards.len().max(1));
        let mut trees: Vec<(PathBuf, Vec<PartitionIdentity>)> = Vec::new();
        let (mut removed, mut forgets) = (Vec::new(), Vec::new());
        for w in work {
            let config = |s: u32, t: u32| {
                state
                    .find_topic(s, t)
                    .map(|topic| topic.options.config())
                    .unwrap_or_default()
            };
            let (key, request) = match w {
                DirWork::CreatePartition(identity) => {
                    let key = key_of(identity);
                    ancestors(
                        &self.root,
                        &partition_dir(&self.root, key.0, key.1, key.2),
                        dirs,
                    );
                    (
                        key,
                        ShardWork::Create {
                            identity: *identity,
                            config: config(key.0, key.1),
                        },
                    )
                }
                DirWork::PurgePartition { identity, replaces } => {
                    let key = key_of(identity);
                    ancestors(
                        &self.root,
                        &partition_dir(&self.root, key.0, key.1, key.2),
                        dirs,
                    );
                    (
                        key,
                        ShardWork::Purge {
                            identity: *identity,
                            replaces: *replaces,
                            config: config(key.0, key.1),
                        },
                    )
                }
                DirWork::RemovePartition(identity) => (
                    key_of(identity),
                    ShardWork::Remove {
                        identity: *identity,
                    },
                ),
                DirWork::RemoveGroupOffsets { partition, group } => (
                    *partition,
                    ShardWork::RemoveGroupOffsets {
                        key: *partition,
                        group: *group,
                        op,
                    },
                ),
                DirWork::RemoveTopic {
                    stream,
                    topic,
                    partitions,
                } => {
                    for shard in 0..self.shards.len() {
                        pending.room().await?;
                        pending.push(
                            self.ask(
                                shard,
                                ShardWork::DropTopic {
                                    stream: *stream,
                                    topic: *topic,
                                },
                            )
                            .await,
                        );
                    }
                    trees.push((topic_dir(&self.root, *stream, *topic), partitions.clone()));
                    forgets.push((*stream, Some(*topic)));
                    continue;
                }
                DirWork::RemoveStream { stream, partitions } => {
                    for shard in 0..self.shards.len() {
                        pending.room().await?;
                        pending.push(
                            self.ask(shard, ShardWork::DropStream { stream: *stream })
                                .await,
                        );
                    }
                    trees.push((stream_dir(&self.root, *stream), partitions.clone()));
                    forgets.push((*stream, None));
                    continue;
                }
            };
            let shard = match w {
                DirWork::CreatePartition(_) => self.placement.place(key),
                _ => self.placement.of(key),
            };
            if let DirWork::RemovePartition(identity) = w {
                removed.push(key_of(identity));
            }
            pending.room().await?;
            pending.push(self.ask(shard, request).await);
        }
        pending.drain().await?;
        self.unplace(state, removed, &trees, forgets);
        for (dir, partitions) in trees {
            let removal = remove_deleted_tree(self.env.disk.as_ref(), &dir, &partitions)?;
            for (kept, found) in removal.kept {
                tracing::error!(dir = %kept.display(), %found, "kept a directory the deletion did not account for");
            }
        }
        settle(&self.env).await;
        Ok(())
    }

    /// After an op's work drained: its removed partitions leave their shards' loads, and
    /// the keys of its removed topics and streams are forgotten, except what the batch made
    /// again (`placement.rs`).
    fn unplace(
        &self,
        state: &MetaState,
        removed: Vec<PartitionKey>,
        trees: &[(PathBuf, Vec<PartitionIdentity>)],
        forgets: Vec<(u32, Option<u32>)>,
    ) {
        let gone = trees.iter().flat_map(|(_, gone)| gone.iter().map(key_of));
        for key in removed.into_iter().chain(gone) {
            if state.partition(key).is_none() {
                self.placement.vacate(key);
            }
        }
        for (stream, topic) in forgets {
            let made_again = match topic {
                Some(topic) => state.find_topic(stream, topic).is_some(),
                None => state.stream(stream).is_some(),
            };
            if !made_again {
                self.placement.forget(stream, topic);
            }
        }
    }

    async fn ask(&self, shard: usize, work: ShardWork) -> Pending<Result<(), WorkError>> {
        let (reply, pending) = oneshot();
        // A closed shard drops the reply: the pending answer then says it stopped.
        let _ = self.shards[shard]
            .send(ShardRequest::Work { work, reply })
            .await;
        pending
    }

    /// The invariants at a batch's end: the plane and the view agree on the last op, and the
    /// state's indexes agree with its maps.
    pub(super) fn check(&self) {
        assert_eq!(
            self.plane.last_op(),
            self.current.op,
            "the journal and the published view end at the same op"
        );
        assert_eq!(
            self.plane.applied_op(),
            self.current.op,
            "every journaled op's work is recorded as applied"
        );
        self.plane.assert_recorded();
        debug_assert!(self.current.state.indexes_agree(), "name indexes agree");
    }
}

/// Whether `op` creates a group in a topic where the batch freed that group id.
fn reuses_freed_group(state: &MetaState, op: &MetaOp, freed: &BTreeSet<(u32, u32, u32)>) -> bool {
    let MetaOp::CreateConsumerGroup(r) = op else {
        return false;
    };
    let Ok((s, t)) = state.topic_ids(&r.stream_id, &r.topic_id) else {
        return false;
    };
    let next = lowest_free_group(state, s, t);
    freed.contains(&(s, t, next))
}

fn lowest_free_group(state: &MetaState, s: u32, t: u32) -> u32 {
    let groups = &state.topic(s, t).groups;
    (0..)
        .find(|id| !groups.contains_key(id))
        .expect("a free id")
}

/// The state before the batch with the accepted ops applied again (after an op was refused
/// late, when the staged copy already held it).
fn replay(before: &MetaState, accepted: &[Accepted], cluster: u128) -> MetaState {
    let mut state = before.clone();
    for a in accepted {
        let ctx = OpContext {
            op: a.number,
            timestamp: a.origin.timestamp,
            cluster,
            decided: a.origin.decided,
            proposal: a.origin.key,
            asked_at: a.origin.asked_at,
        };
        state
            .apply(&a.op, ctx)
            .expect("an op accepted on this state applies again");
    }
    state
}

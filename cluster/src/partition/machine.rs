//! A partition group's state machine: each committed send stamped into the partition.
//!
//! | entry | apply |
//! |---|---|
//! | a send whose batch ends at or below what the partition held when opened | already in the segments (applied before a restart, after the last checkpoint): skipped, its offsets counted |
//! | any other send | admitted and stamped at the next offset with the leader's timestamp (`Partition::append_at`); the partition shows it at once |
//! | an offset write past the last message the sends before it committed, or a new consumer past [`MAX_CONSUMER_OFFSETS`] | refused (its outcome says why): every replica decides it on the same sends and consumers |
//! | any other offset write | recorded in the machine's offsets, then applied to the replica (`PartitionSink::write_offset`: a consumer group's only to the incarnation it names) |
//! | a blank or membership entry | nothing in the partition (a membership is recorded) |
//! | a send the partition refuses, or an I/O failure | the replica stops (an error to openraft): a replica that skipped a committed send would hold other bytes at its offsets than its peers |
//!
//! **Checkpoint** (openraft's snapshot of this machine, file `checkpoint` in the group's
//! directory): the partition persisted (every segment and offset file synced), then the
//! applied entry, the membership, the partition's next offset and the machine's consumer
//! offsets written whole. Boot reads it: entries after
//! it are applied again, and those whose batches the segments still hold are skipped by the
//! first row. A partition that holds less than its checkpoint says was synced is damage.
//!
//! A checkpoint holds no messages: a replica sent one past what its partition holds (it is
//! behind the leader's purged WAL) first takes the missing batches from its peers' segments
//! ([`super::refill`], [`PartMachine::take_refilled`]); installing one refuses unless the
//! partition holds every batch it names by then, and writes its consumer offsets to the
//! replica first (and deletes those it no longer holds). A replica rebuilt from its peers
//! has the machine's offsets written again ([`PartMachine::restore_offsets`]).

use super::sink::PartitionSink;
use super::{
    OffsetCommand, PartCommand, PartConfig, PartEntry, PartMembership, PartOutcome, PartSnapshot,
    PartSnapshotMeta, SendOutcome,
};
use crate::sm::{read_whole, write_whole};
use crate::types::LogId;
use cairn_engine::env::Disk;
use cairn_engine::format::BatchHeader;
use cairn_engine::partition::offsets::MAX_CONSUMER_OFFSETS;
use cairn_engine::partition::{ConsumerId, ConsumerKind};
use futures_util::StreamExt;
use openraft::entry::RaftEntry;
use openraft::storage::EntryResponder;
use openraft::{EntryPayload, RaftSnapshotBuilder};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The checkpoint's file in the group's directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// The largest checkpoint read back (a membership, a few numbers and at most
/// [`MAX_CONSUMER_OFFSETS`] offsets of about 50 bytes each, their fields named).
const MAX_CHECKPOINT_LEN: u64 = 1 << 20;
const _: () = assert!(MAX_CONSUMER_OFFSETS as u64 * 64 < MAX_CHECKPOINT_LEN);

/// A stored offset's key in the machine: whether a consumer group's, and the id.
type OffsetKey = (bool, u32);

/// What a checkpoint records: every entry through `meta.last_log_id` is applied and the
/// partition's segments, synced, hold every batch below `next_offset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Checkpoint {
    meta: PartSnapshotMeta,
    next_offset: u64,
    /// The timestamp the last applied send was stamped with.
    #[serde(default)]
    last_timestamp: u64,
    /// The consumer offsets stored through the applied entry (each with `offset` set).
    #[serde(default)]
    offsets: Vec<OffsetCommand>,
}

/// A group's state machine over this member's replica of the partition; clones share it.
#[derive(Clone)]
pub struct PartMachine {
    inner: Arc<Mutex<Inner>>,
    sink: Arc<dyn PartitionSink>,
    /// Set while a refill from peers runs (at most one per replica).
    refilling: Arc<AtomicBool>,
}

/// The stamp a replica gives a committed send, given its leader's clock reading (a canary's
/// hook: production stamps the leader's reading on every replica).
pub type StampHook = Arc<dyn Fn(u64) -> u64 + Send + Sync>;

/// A machine's optional hooks (`None`, `false` in production).
#[derive(Clone, Default)]
pub struct MachineHooks {
    pub stamp: Option<StampHook>,
    /// A canary's: a refill or a repair from peers jumps the partition to the offset it
    /// must reach (rebuilt empty there) instead of taking the batches below it.
    pub refill_hole: bool,
    /// A canary's: a follower appends the sends of a leader's append to its partition as
    /// they arrive, before they commit ([`apply_on_arrival`]).
    pub apply_uncommitted: bool,
    /// A canary's: a sleeping group's follower stays asleep when its leader's member goes
    /// silent or restarts (`quiet`).
    pub deaf_when_quiet: bool,
    /// A canary's: an offset write is applied to the replica of the member asked only,
    /// never ordered by the group (`groups::write`).
    pub offsets_local: bool,
}

/// What machines did, summed over those that share it (a member's groups do): what the
/// simulator's coverage counts.
#[derive(Debug, Default)]
pub struct MachineCounts {
    /// Sends found in the segments already when applied (the table's first row).
    pub skipped: AtomicU64,
    /// Checkpoints built and recorded here.
    pub checkpoints: AtomicU64,
    /// Checkpoints installed from a leader.
    pub installed: AtomicU64,
    /// Batches taken from peers' segments (catch-up beyond the WAL).
    pub refilled: AtomicU64,
    /// Replicas repaired from their peers before their machine opened (fenced, or short of
    /// their checkpoint).
    pub repaired: AtomicU64,
    /// Hand-overs of a group's leadership to its preferred member begun here (`balance`).
    pub balanced: AtomicU64,
    /// Groups put to sleep by their leader here (`quiet`).
    pub slept: AtomicU64,
    /// Sleeping groups woken here because their leader's member went silent or restarted.
    pub woken: AtomicU64,
    /// Groups made here of the replicas the metadata leader named when asked (`placed`).
    pub made_on_ask: AtomicU64,
    /// Writes of a member running no replica of the group taken here (`placed`).
    pub taken_unplaced: AtomicU64,
    /// Replicas of groups placed elsewhere removed here once their group left them out.
    pub released: AtomicU64,
    /// Reads of partitions this member keeps no copy of, answered by one that does.
    pub read_elsewhere: AtomicU64,
}

/// What applying an entry needs of the replica, decided under the machine's lock.
enum Step {
    Done(PartOutcome),
    Append {
        at: LogId,
        end: u64,
        stamp: u64,
    },
    /// An offset write to apply to the replica; `outcome` decided already.
    Offset {
        at: LogId,
        write: OffsetCommand,
        outcome: PartOutcome,
    },
}

struct Inner {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    applied: Option<LogId>,
    membership: PartMembership,
    /// The offset the next applied send starts at.
    next: u64,
    /// The timestamp the last applied send was stamped with: a send is stamped with its
    /// leader's clock reading or this, whichever is later, so every replica stamps the
    /// same whatever its own segments still hold (retention runs on each member's clock).
    last_timestamp: u64,
    /// The partition's next offset when it was opened: sends ending at or below it are in
    /// the segments already.
    held: u64,
    /// Sends the first row of the table skipped since the machine opened.
    skipped: u64,
    /// The canary `part-apply-uncommitted`'s: the first log index it has not taken early.
    taken_early: u64,
    /// The consumer offsets stored through `applied` (at most [`MAX_CONSUMER_OFFSETS`]): what
    /// decides an offset write's outcome and what a checkpoint carries.
    offsets: BTreeMap<OffsetKey, OffsetCommand>,
    counts: Arc<MachineCounts>,
    hooks: MachineHooks,
    checkpoint: Option<Checkpoint>,
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl PartMachine {
    /// The machine of the group whose directory is `dir`, over `sink` (the replica, opened
    /// by recovery, or new), counting into `counts`.
    pub async fn open(
        disk: Arc<dyn Disk>,
        dir: &Path,
        sink: Arc<dyn PartitionSink>,
        (counts, hooks): (Arc<MachineCounts>, MachineHooks),
    ) -> io::Result<Self> {
        let checkpoint: Option<Checkpoint> =
            read_whole(&*disk, &dir.join(CHECKPOINT_FILE), MAX_CHECKPOINT_LEN)?;
        let held = sink.next_offset().await?;
        let next = checkpoint.as_ref().map_or(0, |c| c.next_offset);
        if held < next {
            return Err(invalid(format!(
                "the partition of {} holds offsets below {held}, its checkpoint says {next} were synced",
                dir.display()
            )));
        }
        let (applied, membership) = checkpoint.as_ref().map_or_else(Default::default, |c| {
            (c.meta.last_log_id, c.meta.last_membership.clone())
        });
        let last_timestamp = checkpoint.as_ref().map_or(0, |c| c.last_timestamp);
        let offsets = checkpoint
            .as_ref()
            .map_or_else(Default::default, |c| keyed(&c.offsets));
        let inner = Inner {
            disk,
            dir: dir.to_owned(),
            applied,
            membership,
            next,
            last_timestamp,
            held,
            skipped: 0,
            taken_early: 0,
            offsets,
            counts,
            hooks,
            checkpoint,
        };
        Ok(PartMachine {
            inner: Arc::new(Mutex::new(inner)),
            sink,
            refilling: Arc::default(),
        })
    }

    /// This member's replica of the partition.
    pub fn sink(&self) -> &Arc<dyn PartitionSink> {
        &self.sink
    }

    /// Whether a canary has refills skip the batches they must take ([`MachineHooks`]).
    pub(super) fn refill_hole(&self) -> bool {
        self.lock().hooks.refill_hole
    }

    /// Marks a refill from peers started; false when one runs already.
    pub(super) fn start_refill(&self) -> bool {
        !self.refilling.swap(true, Ordering::AcqRel)
    }

    pub(super) fn end_refill(&self) {
        self.refilling.store(false, Ordering::Release);
    }

    /// Rebuilds the replica empty from offset `start` (every peer's retention removed the
    /// batches it lacks below it). Run by the state machine's worker, as
    /// [`PartMachine::take_refilled`] is.
    pub async fn rebuild_at(&self, start: u64) -> io::Result<()> {
        let applied_to = self.lock().next;
        assert!(
            start >= applied_to,
            "a rebuild keeps every batch applied ({start} < {applied_to})"
        );
        tracing::warn!(
            start,
            "rebuilding a replica's partition where its peers' batches start"
        );
        self.sink.rebuild(start).await?;
        {
            let mut inner = self.lock();
            inner.held = inner.held.max(start);
        }
        self.restore_offsets().await
    }

    /// Writes every offset the machine holds to the replica (rebuilt empty, its offset
    /// files gone with its directory), durably.
    pub async fn restore_offsets(&self) -> io::Result<()> {
        let offsets: Vec<OffsetCommand> = self.lock().offsets.values().copied().collect();
        self.write_offsets(&offsets).await
    }

    /// Applies `writes` to the replica, then syncs it (when there were any).
    async fn write_offsets(&self, writes: &[OffsetCommand]) -> io::Result<()> {
        for write in writes {
            self.sink.write_offset(write.write()).await?;
        }
        if !writes.is_empty() {
            self.sink.checkpoint().await?;
        }
        Ok(())
    }

    /// Appends `batches`, fetched from a peer's replica of the partition, where the
    /// partition ends: each whole and verified, those it holds already skipped, each stored
    /// with its own offset and stamp (admitted again, it is the same bytes). Run by the
    /// state machine's worker, between applies (`Raft::with_state_machine`): the first row
    /// of the module's table then skips the entries whose batches this put in the segments.
    /// The partition's next offset.
    /// One refill step, decided here against what the partition holds now: where the
    /// peers' batches (`batches`) start past its end (`first`: their retention removed
    /// what it lacks), it starts again empty there first; then it takes them.
    pub async fn take_refilled_from(
        &self,
        first: u64,
        batches: Vec<bytes::Bytes>,
    ) -> io::Result<u64> {
        if first > self.sink.next_offset().await? {
            self.rebuild_at(first).await?;
        }
        self.take_refilled(batches).await
    }

    pub async fn take_refilled(&self, batches: Vec<bytes::Bytes>) -> io::Result<u64> {
        let (next, taken) = super::refill::append_fetched(&*self.sink, batches).await?;
        let mut inner = self.lock();
        inner.counts.refilled.fetch_add(taken, Ordering::Relaxed);
        inner.held = inner.held.max(next);
        Ok(next)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The canary `part-apply-uncommitted`: appends the sends of `entries` (a leader's
    /// append, not committed yet) to the partition where it ends, each at most once, so
    /// openraft's apply of each later finds it held and skips it (the table's first row).
    /// A leader that loses its term before they commit leaves this replica holding sends
    /// no one decided, at offsets where its peers store others.
    async fn apply_uncommitted(&self, entries: Vec<PartEntry>) -> io::Result<()> {
        for entry in entries {
            let EntryPayload::Normal(PartCommand::Send(send)) = &entry.payload else {
                continue;
            };
            let index = entry.log_id().index;
            let stamp = {
                let inner = self.lock();
                let first = inner.applied.map_or(0, |a| a.index + 1);
                if index < first.max(inner.taken_early) {
                    continue;
                }
                send.timestamp.max(inner.last_timestamp)
            };
            let outcome = self.sink.append(&send.batch, stamp).await?;
            let mut inner = self.lock();
            let end = outcome.base_offset + u64::from(outcome.message_count);
            inner.held = inner.held.max(end);
            inner.taken_early = index + 1;
        }
        Ok(())
    }

    /// Sends found in the segments already when applied (since the machine opened).
    pub fn skipped(&self) -> u64 {
        self.lock().skipped
    }
}

impl Inner {
    /// What applying one committed entry takes, by the module doc's table (a send that the
    /// replica must append is `Step::Append`, finished by [`Inner::appended`]).
    fn step(&mut self, entry: &PartEntry) -> io::Result<Step> {
        let log_id = entry.log_id();
        assert!(
            self.applied.is_none_or(|a| a.index < log_id.index),
            "entries apply in index order, each once"
        );
        let step = match &entry.payload {
            EntryPayload::Normal(PartCommand::Offset(write)) => {
                return Ok(self.offset_step(log_id, *write));
            }
            EntryPayload::Normal(PartCommand::Send(send)) => {
                let count = BatchHeader::decode(&send.batch)
                    .map_err(|e| {
                        invalid(format!("the send committed at {log_id} is no batch: {e}"))
                    })?
                    .message_count;
                let end = self.next + u64::from(count);
                let leader = match &self.hooks.stamp {
                    Some(hook) => hook(send.timestamp),
                    None => send.timestamp,
                };
                let stamp = leader.max(self.last_timestamp);
                if end <= self.held {
                    self.skipped += 1;
                    self.counts.skipped.fetch_add(1, Ordering::Relaxed);
                    self.next = end;
                    self.last_timestamp = stamp;
                    Step::Done(PartOutcome::Sent(SendOutcome {
                        base_offset: end - u64::from(count),
                        message_count: count,
                        timestamp: stamp,
                    }))
                } else {
                    assert!(
                        self.next >= self.held,
                        "a held batch ends at {}, inside the send committed at {log_id} ({}..{end})",
                        self.held,
                        self.next
                    );
                    return Ok(Step::Append {
                        at: log_id,
                        end,
                        stamp,
                    });
                }
            }
            EntryPayload::Membership(m) => {
                self.membership = PartMembership::new(Some(log_id), m.clone());
                Step::Done(PartOutcome::Nothing)
            }
            EntryPayload::Blank => Step::Done(PartOutcome::Nothing),
        };
        self.applied = Some(log_id);
        Ok(step)
    }

    /// An offset write's step, by the module doc's table: decided on the sends applied
    /// before it and the offsets the machine holds, never on the replica's files. A refused
    /// write is applied (nothing to do); another is recorded here and finished by
    /// [`Inner::offset_written`] once the replica took it.
    fn offset_step(&mut self, at: LogId, write: OffsetCommand) -> Step {
        let key = (write.group, write.id);
        // The incarnation of the consumer group that stored the key last (0 for a consumer).
        let held = self.offsets.get(&key).map(|h| h.made_at);
        let outcome = match write.offset {
            // A write of a group deleted since, whose id a later group stored under.
            _ if held.is_some_and(|made| made > write.made_at) => PartOutcome::OffsetOfGoneGroup,
            Some(offset) if offset >= self.next => PartOutcome::OffsetBeyondEnd { next: self.next },
            Some(_) if held.is_none() && self.offsets.len() >= MAX_CONSUMER_OFFSETS => {
                PartOutcome::TooManyOffsets {
                    limit: MAX_CONSUMER_OFFSETS,
                }
            }
            Some(_) => {
                self.offsets.insert(key, write);
                PartOutcome::OffsetStored
            }
            None => {
                self.offsets.remove(&key);
                PartOutcome::OffsetDeleted {
                    found: held == Some(write.made_at),
                }
            }
        };
        match outcome {
            PartOutcome::OffsetStored | PartOutcome::OffsetDeleted { .. } => {
                Step::Offset { at, write, outcome }
            }
            refused => {
                self.applied = Some(at);
                Step::Done(refused)
            }
        }
    }

    /// Records an offset write the replica applied.
    fn offset_written(&mut self, at: LogId) {
        self.applied = Some(at);
    }

    /// Records a send the replica appended at `outcome`.
    fn appended(&mut self, at: LogId, (end, stamp): (u64, u64), outcome: &SendOutcome) {
        assert_eq!(
            outcome.base_offset, self.next,
            "a replica stamps a committed send at the offset its peers do"
        );
        assert_eq!(
            outcome.timestamp, stamp,
            "a replica stamps a committed send with the timestamp its peers do"
        );
        assert_eq!(outcome.base_offset + u64::from(outcome.message_count), end);
        self.next = end;
        self.last_timestamp = stamp;
        self.applied = Some(at);
    }

    /// The checkpoint of what is applied now; the replica must sync through its offset
    /// before it is recorded.
    fn checkpoint_now(&self) -> Checkpoint {
        Checkpoint {
            meta: PartSnapshotMeta {
                last_log_id: self.applied,
                last_membership: self.membership.clone(),
            },
            next_offset: self.next,
            last_timestamp: self.last_timestamp,
            offsets: self.offsets.values().copied().collect(),
        }
    }

    /// Records `checkpoint`, unless a newer one is recorded already (an installed one, or,
    /// after the group restarted, the new machine's: openraft builds in a task of its own).
    fn record(&mut self, checkpoint: Checkpoint) -> io::Result<PartSnapshot> {
        let _span =
            tracing::debug_span!("partition_checkpoint", dir = %self.dir.display()).entered();
        let path = self.dir.join(CHECKPOINT_FILE);
        let stored: Option<Checkpoint> = read_whole(&*self.disk, &path, MAX_CHECKPOINT_LEN)?;
        let newest = [stored, self.checkpoint.clone()]
            .into_iter()
            .flatten()
            .max_by_key(|c| c.meta.last_log_id);
        if let Some(newer) = newest.filter(|n| n.meta.last_log_id > checkpoint.meta.last_log_id) {
            return snapshot_of(&newer);
        }
        write_whole(&*self.disk, &self.dir, CHECKPOINT_FILE, &checkpoint)?;
        self.counts.checkpoints.fetch_add(1, Ordering::Relaxed);
        let snapshot = snapshot_of(&checkpoint);
        self.checkpoint = Some(checkpoint);
        snapshot
    }

    /// The offset writes that bring the replica to `sent`'s offsets: each it names stored,
    /// then every other consumer the replica's files (`files`: they may hold writes applied
    /// after its own last checkpoint) or the machine hold deleted.
    fn offsets_to_install(&self, sent: &Checkpoint, files: Vec<ConsumerId>) -> Vec<OffsetCommand> {
        let wanted = keyed(&sent.offsets);
        let held = files
            .into_iter()
            .map(|c| (c.kind == ConsumerKind::Group, c.id))
            .chain(self.offsets.keys().copied())
            .collect::<std::collections::BTreeSet<OffsetKey>>();
        let deletes = held
            .into_iter()
            .filter(|k| !wanted.contains_key(k))
            .map(|(group, id)| OffsetCommand {
                group,
                id,
                // A delete applies whatever group holds the id (`apply_replicated_offset`).
                made_at: 0,
                offset: None,
            });
        sent.offsets.iter().copied().chain(deletes).collect()
    }

    /// Whether `sent` may be installed over this replica, whose partition holds offsets
    /// below `holds` (checked before any of its offsets are written).
    fn check_install(
        &self,
        meta: &PartSnapshotMeta,
        sent: &Checkpoint,
        holds: u64,
    ) -> io::Result<()> {
        if sent.meta.last_log_id != meta.last_log_id {
            return Err(invalid("a checkpoint whose data is not its meta".into()));
        }
        // The segments hold committed batches only, in order: a partition that reaches the
        // checkpoint's offset holds exactly the batches it names.
        if !(self.next..=holds).contains(&sent.next_offset) {
            return Err(io::Error::other(format!(
                "behind the leader's WAL: this replica's partition holds offsets below {holds}, the leader's checkpoint is at {} (refilled from peers first, the checkpoint installs once it holds them)",
                sent.next_offset
            )));
        }
        Ok(())
    }

    /// A leader's checkpoint, sent to this replica because it is behind the leader's WAL;
    /// checked ([`Inner::check_install`]), its offsets on the replica already
    /// ([`Inner::offsets_to_install`]).
    fn install(&mut self, meta: &PartSnapshotMeta, sent: Checkpoint, holds: u64) -> io::Result<()> {
        self.check_install(meta, &sent, holds)?;
        self.next = sent.next_offset;
        self.last_timestamp = sent.last_timestamp;
        self.offsets = keyed(&sent.offsets);
        self.held = self.held.max(holds);
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        write_whole(&*self.disk, &self.dir, CHECKPOINT_FILE, &sent)?;
        self.counts.installed.fetch_add(1, Ordering::Relaxed);
        self.checkpoint = Some(sent);
        Ok(())
    }
}

/// Offsets by their keys.
fn keyed(offsets: &[OffsetCommand]) -> BTreeMap<OffsetKey, OffsetCommand> {
    offsets.iter().map(|o| ((o.group, o.id), *o)).collect()
}

fn decode_checkpoint(data: &[u8]) -> io::Result<Checkpoint> {
    rmp_serde::from_slice(data)
        .map_err(|e| invalid(format!("a checkpoint that does not decode: {e}")))
}

/// The canary `part-apply-uncommitted` ([`MachineHooks::apply_uncommitted`]): has the
/// machine of `raft` take the sends of a leader's append before openraft stores them, in
/// its worker (between applies).
pub async fn apply_on_arrival(raft: &super::PartRaft, entries: &[PartEntry]) {
    if entries.is_empty() {
        return;
    }
    let entries = entries.to_vec();
    let early = raft.with_state_machine(move |sm: &mut PartMachine| {
        Box::pin(async move { sm.apply_uncommitted(entries).await })
    });
    if let Ok(Err(e)) = early.await {
        tracing::warn!(error = %e, "the canary's early apply failed");
    }
}

/// The offset below which the checkpoint recorded in `dir` says the partition holds every
/// batch (0 for none).
pub fn checkpointed(disk: &dyn Disk, dir: &Path) -> io::Result<u64> {
    let checkpoint: Option<Checkpoint> =
        read_whole(disk, &dir.join(CHECKPOINT_FILE), MAX_CHECKPOINT_LEN)?;
    Ok(checkpoint.map_or(0, |c| c.next_offset))
}

/// The offset below which a checkpoint's partition holds every batch.
pub fn checkpoint_offset(data: &[u8]) -> io::Result<u64> {
    Ok(decode_checkpoint(data)?.next_offset)
}

fn snapshot_of(checkpoint: &Checkpoint) -> io::Result<PartSnapshot> {
    Ok(PartSnapshot {
        meta: checkpoint.meta.clone(),
        snapshot: rmp_serde::to_vec_named(checkpoint).map_err(io::Error::other)?,
    })
}

impl RaftSnapshotBuilder<PartConfig> for PartMachine {
    type SnapshotData = Vec<u8>;

    /// Reads what is applied, syncs the replica (through at least that), then records it:
    /// entries applied meanwhile are synced too, and the next checkpoint names them.
    async fn build_snapshot(&mut self) -> io::Result<PartSnapshot> {
        let checkpoint = self.lock().checkpoint_now();
        let synced = self.sink.checkpoint().await?;
        assert!(
            synced >= checkpoint.next_offset,
            "a checkpoint syncs every applied send ({synced} < {})",
            checkpoint.next_offset
        );
        self.lock().record(checkpoint)
    }
}

impl openraft::storage::RaftStateMachine<PartConfig> for PartMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = PartMachine;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, PartMembership)> {
        let inner = self.lock();
        Ok((inner.applied, inner.membership.clone()))
    }

    async fn apply<S>(&mut self, mut entries: S) -> io::Result<()>
    where
        S: futures_util::Stream<Item = io::Result<EntryResponder<PartConfig>>> + Unpin + Send,
    {
        while let Some(next) = entries.next().await {
            let (entry, responder) = next?;
            let step = self.lock().step(&entry)?;
            let outcome = match (step, &entry.payload) {
                (Step::Done(outcome), _) => outcome,
                (Step::Offset { at, write, outcome }, _) => {
                    self.sink.write_offset(write.write()).await.map_err(|e| {
                        io::Error::other(format!(
                            "the replica refused {write} committed at {at}, which its peers apply: {e}"
                        ))
                    })?;
                    self.lock().offset_written(at);
                    outcome
                }
                (
                    Step::Append { at, end, stamp },
                    EntryPayload::Normal(PartCommand::Send(send)),
                ) => {
                    let outcome = self.sink.append(&send.batch, stamp).await.map_err(
                        |e| {
                            io::Error::other(format!(
                                "the replica refused the send committed at {at}, which its peers apply: {e}"
                            ))
                        },
                    )?;
                    self.lock().appended(at, (end, stamp), &outcome);
                    PartOutcome::Sent(outcome)
                }
                (Step::Append { .. }, _) => unreachable!("only a send appends"),
            };
            if let Some(responder) = responder {
                responder.send(outcome);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> PartMachine {
        self.clone()
    }

    /// Syncs the partition first: batches refilled from peers are durable before the
    /// checkpoint that names them is recorded.
    async fn install_snapshot(&mut self, meta: &PartSnapshotMeta, data: Vec<u8>) -> io::Result<()> {
        let holds = self.sink.checkpoint().await?;
        let sent = decode_checkpoint(&data)?;
        self.lock().check_install(meta, &sent, holds)?;
        let files = self.sink.consumers().await?;
        let writes = self.lock().offsets_to_install(&sent, files);
        self.write_offsets(&writes).await?;
        self.lock().install(meta, sent, holds)
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<PartSnapshot>> {
        self.lock().checkpoint.as_ref().map(snapshot_of).transpose()
    }
}

//! A shard's persists: the sends a round appended to `persisted` partitions, their log
//! flushed and synced, then handed to the partition's pipeline ([`super::pipeline`]), whose
//! record answers them. One partition syncs in place (one wait on the device). Several sync
//! at once, each a job on the device pool ([`crate::env::Tasks::spawn_device`]) holding its
//! partition until it returns, so a round of many partitions costs about one sync, not one
//! per partition; so does a partition whose previous record is still out (its return is
//! taken meanwhile). No send is answered before its own sync and the record naming it
//! returned.

use super::{NodeStats, Owned, Shard, ShardRequest, Waiting};
use crate::env::chan::{self, Receiver, Sender};
use crate::env::{device_section, panic_message, race, settle, Either};
use crate::error::{NodeError, NodeResult};
use crate::partition::DurablePoint;
use crate::state::PartitionKey;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Most persists one shard has in flight at once. A round with more partitions waiting
/// starts the next one as each returns.
pub const MAX_CONCURRENT_PERSISTS: usize = 16;
/// Most persist jobs of a whole node in flight at once (they share the runtime's blocking
/// pool with every owner's device waits, 512 threads): past it a shard persists in place.
pub const MAX_PERSIST_JOBS: u64 = 128;
const _: () = assert!(MAX_CONCURRENT_PERSISTS > 1, "several at once");
const _: () = assert!(MAX_PERSIST_JOBS >= MAX_CONCURRENT_PERSISTS as u64);

/// A persist begun: the sends it covers, the first ticket and the time it began at.
pub(super) struct Begun {
    waiting: Waiting,
    /// The sends appended before it began (a hook may add later ones when it returns).
    covered: usize,
    ticket: u64,
    nanos: u64,
}

/// A persist job's return: its partition, the log sync's result and the monotonic time
/// from which the shard may take it (the disk time its calls took passed since it ran: a
/// simulated disk's; at once on a real one), or why it ended without them (a panic, or
/// dropped unrun).
type Returned = (
    PartitionKey,
    Result<(Owned, NodeResult<DurablePoint>, u64), String>,
);

/// A job's place in the node's count of persist jobs running
/// ([`crate::node::NodeStats::persist_jobs_running`], which a stopping node waits to see at
/// zero), and its way back to its shard: if the job ends without returning its partition,
/// dropping this says so.
struct JobSlot {
    key: PartitionKey,
    done: Option<Sender<Returned>>,
    stats: Arc<NodeStats>,
}

impl Drop for JobSlot {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            let why = "ended without returning its partition (dropped unrun)".to_string();
            let _ = done.try_send((self.key, Err(why)));
        }
        self.stats
            .persist_jobs_running
            .fetch_sub(1, Ordering::SeqCst);
    }
}

impl Begun {
    /// `later`'s sends join these: one record answers both.
    pub(super) fn merge(&mut self, later: Begun) {
        self.waiting.sends.extend(later.waiting.sends);
        self.covered = self.waiting.sends.len();
    }
}

impl Shard {
    /// Syncs every partition in `waiting` and hands its sends to its pipeline: one in
    /// place, several (or one whose record is out) at once as jobs (at most
    /// [`MAX_CONCURRENT_PERSISTS`]). Returns with records still out.
    pub(super) async fn persist_all(
        &mut self,
        waiting: BTreeMap<PartitionKey, Waiting>,
        inbox: &mut Receiver<ShardRequest>,
        carried: &mut Vec<ShardRequest>,
    ) {
        // A partition whose record is out syncs as a job: the record's return is taken
        // while its log sync runs.
        let pipelined = waiting.keys().any(|&key| self.records.busy(key));
        if waiting.len() <= 1 && !pipelined {
            for (key, w) in waiting {
                self.persist(key, w, inbox, carried).await;
            }
            return;
        }
        if waiting.len() > 1 {
            self.stats
                .concurrent_persists
                .fetch_add(1, Ordering::Relaxed);
        }
        let (done, mut returned) = chan::channel::<Returned>(MAX_CONCURRENT_PERSISTS);
        let mut queue = waiting.into_iter();
        let mut in_flight: BTreeMap<PartitionKey, Begun> = BTreeMap::new();
        loop {
            while in_flight.len() < MAX_CONCURRENT_PERSISTS {
                let Some((key, w)) = queue.next() else { break };
                if !self.partitions.contains_key(&key) || !self.take_job_slot() {
                    // Missing (answered so), or the node's jobs are all taken: in place.
                    self.persist(key, w, inbox, carried).await;
                    continue;
                }
                self.before_log_sync(key, inbox, carried).await;
                let begun = self.begin(w);
                let owned = self.partitions.remove(&key).expect("present");
                self.start_job(key, owned, &done);
                in_flight.insert(key, begun);
            }
            if in_flight.is_empty() {
                return;
            }
            let (key, back) = match race(returned.recv(), self.records.recv()).await {
                Either::Left(back) => back.expect("the shard holds a sender"),
                Either::Right(record) => {
                    let key = self.record_returned(record, inbox, carried).await;
                    // What a canary may ask: the sends whose log sync is still out answered
                    // with the record that returned.
                    if let (Some(key), Some(hook)) = (key, self.hooks.owners.record_returned) {
                        if let Some(begun) = in_flight.get_mut(&key) {
                            if hook(begun.waiting.sends.len()) {
                                answer_early(std::iter::once(begun));
                            }
                        }
                    }
                    continue;
                }
            };
            // As if the shard had panicked persisting in place: the node stops.
            let (owned, result, until) =
                back.unwrap_or_else(|why| panic!("the persist job of {key:?} {why}"));
            let previous = self.partitions.insert(key, owned);
            assert!(previous.is_none(), "a partition is out while its job runs");
            let begun = in_flight
                .remove(&key)
                .expect("a returned persist was in flight");
            // A simulated disk's time for this log sync, counted from when its job ran: the
            // persists in flight together overlap, they do not add up.
            let now = self.env.clock.monotonic_nanos();
            if until > now {
                self.env
                    .clock
                    .sleep(Duration::from_nanos(until - now))
                    .await;
            }
            if let Some(hook) = self.hooks.owners.persist_returned {
                if hook(in_flight.len()) {
                    answer_early(in_flight.values_mut());
                }
            }
            match self.settings.pipeline_records {
                true => self.synced(key, begun, result, inbox, carried).await,
                false => self.answer(key, begun, result, inbox, carried).await,
            }
        }
    }

    /// Before `key`'s log sync: counted as pipelined when its record is out, and a flush
    /// that could seal a segment (which records) waits for that record first.
    async fn before_log_sync(
        &mut self,
        key: PartitionKey,
        inbox: &mut Receiver<ShardRequest>,
        carried: &mut Vec<ShardRequest>,
    ) {
        if !self.records.busy(key) {
            return;
        }
        self.stats
            .pipelined_persists
            .fetch_add(1, Ordering::Relaxed);
        let seals = self
            .partitions
            .get(&key)
            .is_some_and(|owned| owned.partition.flush_may_seal());
        if seals {
            self.settle_record(key, inbox, carried).await;
        }
    }

    /// Counts a persist job in the node's running ones; false (nothing counted) when
    /// [`MAX_PERSIST_JOBS`] run already.
    pub(super) fn take_job_slot(&self) -> bool {
        let running = &self.stats.persist_jobs_running;
        if running.fetch_add(1, Ordering::SeqCst) < MAX_PERSIST_JOBS {
            return true;
        }
        running.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// Runs `owned`'s persist as a job on the device pool, in a slot [`Self::take_job_slot`]
    /// counted; it hands the partition back through `done`, whose room the caller's bound on
    /// jobs in flight guarantees.
    fn start_job(&self, key: PartitionKey, mut owned: Owned, done: &Sender<Returned>) {
        self.stats.persist_jobs.fetch_add(1, Ordering::Relaxed);
        let mut slot = JobSlot {
            key,
            done: Some(done.clone()),
            stats: self.stats.clone(),
        };
        // Its log lines name the shard, as the shard's own do.
        let span = tracing::debug_span!(parent: tracing::Span::current(), "persist_job", ?key);
        let (disk, clock) = (self.env.disk.clone(), self.env.clock.clone());
        let pipelined = self.settings.pipeline_records;
        self.env.tasks.spawn_device(Box::new(move || {
            let _entered = span.entered();
            let ran = clock.monotonic_nanos();
            let persisted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                match pipelined {
                    // The log sync; the record follows as a job of its own.
                    true => owned.partition.persist_log(),
                    false => owned.partition.persist(),
                }
                .map_err(NodeError::from)
            }));
            let back = match persisted {
                Ok(result) => Ok((
                    owned,
                    result,
                    ran.saturating_add(disk.take_io_time().as_nanos() as u64),
                )),
                Err(panic) => Err(format!("panicked: {}", panic_message(&*panic))),
            };
            let done = slot.done.take().expect("armed until returned");
            // Fails only if the shard is gone (the receiver dropped): then nobody waits.
            let _ = done.try_send((key, back));
        }));
    }

    /// Flushes and syncs `key`'s log for every waiting send in place, then hands them to
    /// its pipeline, which answers each once the record naming its batch returned.
    pub(super) async fn persist(
        &mut self,
        key: PartitionKey,
        waiting: Waiting,
        inbox: &mut Receiver<ShardRequest>,
        carried: &mut Vec<ShardRequest>,
    ) {
        let begun = self.begin(waiting);
        if !self.settings.pipeline_records {
            let result = match self.partitions.get_mut(&key) {
                // Log sync, record write, sync and read-back: one wait on the device.
                Some(owned) => {
                    device_section(self.env.tasks.as_ref(), || owned.partition.persist())
                        .map_err(NodeError::from)
                }
                None => Err(Self::missing(key)),
            };
            return self.answer(key, begun, result, inbox, carried).await;
        }
        self.before_log_sync(key, inbox, carried).await;
        let result = match self.partitions.get_mut(&key) {
            // The flush and the log's sync: one wait on the device (the record is a job).
            Some(owned) => {
                device_section(self.env.tasks.as_ref(), || owned.partition.persist_log())
                    .map_err(NodeError::from)
            }
            None => Err(Self::missing(key)),
        };
        // The disk time of the log sync passes here, on the shard, before the record.
        settle(&self.env).await;
        self.synced(key, begun, result, inbox, carried).await;
    }

    fn begin(&self, waiting: Waiting) -> Begun {
        debug_assert!(
            waiting
                .sends
                .iter()
                .all(|(sent, _)| sent.ack.requires_persist && !sent.ack.durable),
            "only persisted topics' sends wait for a persist"
        );
        Begun {
            covered: waiting.sends.len(),
            waiting,
            ticket: self.tickets.load(Ordering::SeqCst),
            nanos: self.env.clock.monotonic_nanos(),
        }
    }

    /// Answers the sends of `key`'s persist, which returned `result`.
    pub(super) async fn answer(
        &mut self,
        key: PartitionKey,
        begun: Begun,
        result: NodeResult<DurablePoint>,
        inbox: &mut Receiver<ShardRequest>,
        carried: &mut Vec<ShardRequest>,
    ) {
        let Begun {
            mut waiting,
            covered,
            ticket,
            nanos,
        } = begun;
        self.stats.persists.fetch_add(1, Ordering::Relaxed);
        self.stats
            .persisted_acks
            .fetch_add(waiting.sends.len() as u64, Ordering::Relaxed);
        settle(&self.env).await;
        // After the settle: a simulated disk's time for the persist has passed by now.
        let elapsed = self.env.clock.monotonic_nanos().saturating_sub(nanos);
        let end = self.tickets.load(Ordering::SeqCst);
        self.windows.insert(key, (ticket, end));
        // In production nothing is taken here; a hook may take requests that arrived
        // during the persist, whose sends are then answered with the persist's.
        let mut late = Vec::new();
        if let Some(hook) = self.hooks.owners.after_persist {
            hook(&mut || match inbox.try_recv() {
                Ok(request) => {
                    late.push(request);
                    true
                }
                Err(_) => false,
            });
        }
        for request in late {
            self.take_late(key, request, &mut waiting, carried);
        }
        let durable_end = match self
            .partitions
            .get(&key)
            .map(|o| o.partition.durable_point())
        {
            Some(Ok(point)) => point.next_offset,
            _ => 0,
        };
        let (sends, messages) = (
            waiting.sends.len() as u64,
            waiting
                .sends
                .iter()
                .map(|(sent, _)| u64::from(sent.ack.message_count))
                .sum::<u64>(),
        );
        for (i, (mut sent, reply)) in waiting.sends.into_iter().enumerate() {
            let end = sent.ack.base_offset + u64::from(sent.ack.message_count);
            match &result {
                Ok(point) => {
                    // A persist makes durable everything appended before it: the ack
                    // never promises past the durable end it names.
                    debug_assert!(
                        i >= covered || end <= point.next_offset,
                        "a persisted ack lies below the durable end: {end} > {}",
                        point.next_offset
                    );
                    sent.ack.durable = true;
                    reply.send(Ok(sent));
                }
                // A segment sealed on the way made this batch durable anyway.
                Err(_) if end <= durable_end => {
                    sent.ack.durable = true;
                    reply.send(Ok(sent));
                }
                Err(e) => reply.send(Err(e.clone_for_reply())),
            }
        }
        if result.is_ok() {
            self.recorder.persist_latency.observe(elapsed);
            self.recorder.persist_sends.observe(sends);
            self.recorder.persist_messages.observe(messages);
        } else {
            self.stats.failed_persists.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request taken from the inbox after a persist of `key` (an after-persist hook): a
    /// send to `key` is appended and answered with the persist's sends, anything else is
    /// carried to the next round.
    fn take_late(
        &mut self,
        key: PartitionKey,
        late: ShardRequest,
        waiting: &mut Waiting,
        carried: &mut Vec<ShardRequest>,
    ) {
        match late {
            ShardRequest::Send {
                key: k,
                batch,
                reply,
                ..
            } if k == key => match self.append(key, batch) {
                Ok(sent) => waiting.sends.push((sent, reply)),
                Err(e) => reply.send(Err(e)),
            },
            other => carried.push(other),
        }
    }
}

/// What a persist-returned hook asks (never in production): the sends of the persists
/// still in flight answered as durable now, before their syncs returned.
fn answer_early<'a>(in_flight: impl Iterator<Item = &'a mut Begun>) {
    for begun in in_flight {
        for (mut sent, reply) in std::mem::take(&mut begun.waiting.sends) {
            sent.ack.durable = true;
            reply.send(Ok(sent));
        }
        begun.covered = 0;
    }
}

//! A partition's persists pipelined on its shard: a persist is a log sync
//! ([`crate::partition::Partition::persist_log`]) and then a record
//! ([`crate::partition::RecordPlan`]), and the record runs as a job while the shard goes on,
//! so the next group's write and log sync overlap this group's record. Each partition has a
//! [`Lane`]: the record out, and the group whose log sync returned while it was out (recorded
//! next, groups merged). Sends are answered as durable when the record naming them returns
//! (or a seal already recorded them), never before; a failure answers them with it.
//!
//! Architecture Invariant: a partition has at most one record out, and no request that
//! could write a record of its own (a seal, an offset member, a deletion, directory work,
//! a close) is served while one is: the shard waits for it first ([`Shard::settle_record`]).

use super::persist::Begun;
use super::{Shard, ShardRequest};
use crate::env::chan::{self, Receiver, Sender};
use crate::env::{device_section, panic_message};
use crate::error::{NodeError, NodeResult};
use crate::partition::{DurablePoint, FenceReason, PartitionError, RecordPlan};
use crate::state::PartitionKey;
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Most records one shard has out at once (one per partition at most); past it a record is
/// written in place.
pub const MAX_RECORDS_OUT: usize = 256;

/// A record job's return: its partition, the write's result (or why the job ended without
/// one), and the monotonic time from which the shard may take it (a simulated disk's time
/// for the write passed; at once on a real disk).
pub(super) struct RecordReturn {
    key: PartitionKey,
    written: Result<io::Result<()>, String>,
    until: u64,
}

/// One partition's pipeline.
#[derive(Default)]
pub(super) struct Lane {
    /// The record out: the sends it covers and the durable end it names.
    out: Option<(Begun, DurablePoint)>,
    /// Sends whose log sync returned while the record was out, and the end those syncs made
    /// durable: recorded next.
    next: Option<(Begun, DurablePoint)>,
    /// A record's result that returned while its partition was out in a persist job: the
    /// partition takes it when it comes back.
    returned: Option<io::Result<()>>,
}

/// A shard's lanes and the channel its record jobs return through.
pub(super) struct Records {
    lanes: BTreeMap<PartitionKey, Lane>,
    out: usize,
    tx: Sender<RecordReturn>,
    rx: Receiver<RecordReturn>,
}

impl Records {
    pub(super) fn new() -> Records {
        let (tx, rx) = chan::channel(MAX_RECORDS_OUT);
        Records {
            lanes: BTreeMap::new(),
            out: 0,
            tx,
            rx,
        }
    }

    /// `key` has a record out.
    pub(super) fn busy(&self, key: PartitionKey) -> bool {
        self.lanes.get(&key).is_some_and(|lane| lane.out.is_some())
    }

    /// A record job's return that is waiting, if any.
    pub(super) fn try_recv(&mut self) -> Option<RecordReturn> {
        self.rx.try_recv().ok()
    }

    /// Waits for the next record job's return.
    pub(super) async fn recv(&mut self) -> RecordReturn {
        self.rx.recv().await.expect("the shard holds a sender")
    }
}

/// A record job's place in the node's count of persist jobs running, and its way back: if
/// the job ends without returning, dropping this says so.
struct RecordSlot {
    key: PartitionKey,
    done: Option<Sender<RecordReturn>>,
    stats: Arc<super::NodeStats>,
}

impl Drop for RecordSlot {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.try_send(RecordReturn {
                key: self.key,
                written: Err("ended without returning (dropped unrun)".to_string()),
                until: 0,
            });
        }
        self.stats
            .persist_jobs_running
            .fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shard {
    /// `key`'s group whose log sync returned `result`: recorded now, or after the record
    /// out (merged with any group already waiting for it).
    pub(super) async fn synced(
        &mut self,
        key: PartitionKey,
        begun: Begun,
        result: NodeResult<DurablePoint>,
        inbox: &mut Receiver<ShardRequest>,
        carried: &mut Vec<ShardRequest>,
    ) {
        self.take_stashed(key);
        let lane = self.records.lanes.entry(key).or_default();
        let behind = lane.next.take();
        let point = match result {
            Ok(point) => point,
            Err(e) => {
                // The group behind the record out synced before this failure: it is still
                // recorded (or refused, if the failure fenced the partition).
                if let Some((waiting, point)) = behind {
                    match lane.out.is_some() {
                        true => lane.next = Some((waiting, point)),
                        false => self.start_record(key, waiting, point, inbox, carried).await,
                    }
                }
                self.answer(key, begun, Err(e), inbox, carried).await;
                return self.tidy_lane(key);
            }
        };
        let begun = match behind {
            Some((mut waiting, _)) => {
                waiting.merge(begun);
                waiting
            }
            None => begun,
        };
        if lane.out.is_some() {
            lane.next = Some((begun, point));
            return;
        }
        self.start_record(key, begun, point, inbox, carried).await;
        self.tidy_lane(key);
    }

    /// Plans `key`'s record of `point` and runs it as a job (in place when the shard has
    /// [`MAX_RECORDS_OUT`] out, or the node's jobs are all taken).
    async fn start_record(
        &mut self,
        key: PartitionKey,
        begun: Begun,
        point: DurablePoint,
        inbox: &mut Receiver<ShardRequest>,
        carried: &mut Vec<ShardRequest>,
    ) {
        let Some(owned) = self.partitions.get_mut(&key) else {
            return self
                .answer(key, begun, Err(Self::missing(key)), inbox, carried)
                .await;
        };
        let plan = match owned.partition.plan_record(point) {
            Ok(Some(plan)) => plan,
            // A seal on the way recorded it already.
            Ok(None) => return self.answer(key, begun, Ok(point), inbox, carried).await,
            Err(e) => return self.answer(key, begun, Err(e.into()), inbox, carried).await,
        };
        if self.records.out >= MAX_RECORDS_OUT || !self.take_job_slot() {
            let written = device_section(self.env.tasks.as_ref(), || plan.write());
            let result = match self.partitions.get_mut(&key) {
                Some(owned) => owned.partition.recorded(written).map_err(NodeError::from),
                None => unreachable!("the partition planned its record just now"),
            };
            return self.answer(key, begun, result, inbox, carried).await;
        }
        self.spawn_record(key, plan);
        self.records.out += 1;
        let lane = self.records.lanes.entry(key).or_default();
        assert!(lane.out.is_none(), "one record out per partition");
        lane.out = Some((begun, point));
    }

    fn spawn_record(&self, key: PartitionKey, plan: RecordPlan) {
        self.stats.record_jobs.fetch_add(1, Ordering::Relaxed);
        let mut slot = RecordSlot {
            key,
            done: Some(self.records.tx.clone()),
            stats: self.stats.clone(),
        };
        let span = tracing::debug_span!(parent: tracing::Span::current(), "record_job", ?key);
        let (disk, clock) = (self.env.disk.clone(), self.env.clock.clone());
        self.env.tasks.spawn_device(Box::new(move || {
            let _entered = span.entered();
            let started = clock.monotonic_nanos();
            let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| plan.write()))
                .map_err(|panic| format!("panicked: {}", panic_message(&*panic)));
            let until = started.saturating_add(disk.take_io_time().as_nanos() as u64);
            let done = slot.done.take().expect("armed until returned");
            let _ = done.try_send(RecordReturn {
                key,
                written,
                until,
            });
        }));
    }

    /// A record job returned: its sends answered, and the group waiting behind it recorded
    /// next. Returns the partition, or `None` when the return waits for the simulated
    /// disk's time first (it comes back through the channel then).
    pub(super) async fn record_returned(
        &mut self,
        back: RecordReturn,
        inbox: &mut Receiver<ShardRequest>,
        carried: &mut Vec<ShardRequest>,
    ) -> Option<PartitionKey> {
        let now = self.env.clock.monotonic_nanos();
        if back.until > now {
            let (tx, clock) = (self.records.tx.clone(), self.env.clock.clone());
            drop(self.env.tasks.spawn(Box::pin(async move {
                clock.sleep(Duration::from_nanos(back.until - now)).await;
                let _ = tx.send(back).await;
            })));
            return None;
        }
        let key = back.key;
        // As if the shard had panicked writing it in place: the node stops.
        let written = back
            .written
            .unwrap_or_else(|why| panic!("the record job of {key:?} {why}"));
        self.records.out -= 1;
        let dir = (!self.partitions.contains_key(&key)).then(|| self.dir(key));
        let lane = self.records.lanes.get_mut(&key).expect("a lane out");
        let (begun, point) = lane.out.take().expect("a record out");
        let written_ok = written.is_ok();
        let result = match self.partitions.get_mut(&key) {
            Some(owned) => owned.partition.recorded(written).map_err(NodeError::from),
            None => {
                // Out in a persist job: it takes the result when it comes back.
                let result = match &written {
                    Ok(()) => Ok(point),
                    Err(e) => Err(NodeError::from(PartitionError::Fenced(
                        FenceReason::IoFailed {
                            op: "write superblock in",
                            path: dir.clone().unwrap_or_default(),
                            error: e.to_string(),
                        },
                    ))),
                };
                lane.returned = Some(written);
                result
            }
        };
        // A record written names its sends' bytes durable: they are acknowledged, even if
        // the partition fenced since (a later sync failed, a read found damage).
        let result = match (written_ok, result) {
            (true, Err(_)) => Ok(point),
            (_, result) => result,
        };
        self.answer(key, begun, result, inbox, carried).await;
        if self.partitions.contains_key(&key) {
            let lane = self.records.lanes.get_mut(&key).expect("a lane");
            if let Some((begun, point)) = lane.next.take() {
                self.start_record(key, begun, point, inbox, carried).await;
            }
            self.tidy_lane(key);
        }
        Some(key)
    }

    /// Drops `key`'s lane once nothing is out, waiting or stashed in it.
    fn tidy_lane(&mut self, key: PartitionKey) {
        if self.records.lanes.get(&key).is_some_and(|lane| {
            lane.out.is_none() && lane.next.is_none() && lane.returned.is_none()
        }) {
            self.records.lanes.remove(&key);
        }
    }

    /// A record result that returned while `key` was out in a persist job, taken now.
    fn take_stashed(&mut self, key: PartitionKey) {
        let Some(lane) = self.records.lanes.get_mut(&key) else {
            return;
        };
        if let Some(written) = lane.returned.take() {
            if let Some(owned) = self.partitions.get_mut(&key) {
                // Its sends were answered by the result; a failure fences the partition.
                let _ = owned.partition.recorded(written);
            }
        }
    }

    /// Waits until `key` has no record out and none waiting.
    pub(super) async fn settle_record(
        &mut self,
        key: PartitionKey,
        inbox: &mut Receiver<ShardRequest>,
        carried: &mut Vec<ShardRequest>,
    ) {
        self.take_stashed(key);
        while self.records.busy(key) {
            let back = self.records.recv().await;
            self.record_returned(back, inbox, carried).await;
        }
        if let Some(lane) = self.records.lanes.remove(&key) {
            assert!(
                lane.next.is_none() && lane.returned.is_none(),
                "a settled lane holds nothing (a group waits only behind a record out)"
            );
        }
    }

    /// Waits until no partition has a record out.
    pub(super) async fn settle_records(
        &mut self,
        inbox: &mut Receiver<ShardRequest>,
        carried: &mut Vec<ShardRequest>,
    ) {
        while self.records.out > 0 {
            let back = self.records.recv().await;
            self.record_returned(back, inbox, carried).await;
        }
        let keys: Vec<PartitionKey> = self.records.lanes.keys().copied().collect();
        for key in keys {
            self.take_stashed(key);
        }
        for (_, lane) in std::mem::take(&mut self.records.lanes) {
            assert!(
                lane.next.is_none(),
                "a group waits only behind a record out"
            );
        }
    }
}

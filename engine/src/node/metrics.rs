//! The node's observable figures ([`Node::metrics`]), for the server's `/metrics`: what the
//! owners record as they work (plain atomics in [`Recorder`], the sync count of the node's
//! disk, the journal budget), what boot decided ([`BootMetrics`], fixed once the node is up),
//! and what the shards hold now (fenced partitions, journal bytes per topic), asked of each
//! shard at scrape time. Every label set is an enum's `NAMES` table, so the series a scrape
//! exports are fixed; nothing here grows with traffic.

use super::boot::{BootReport, PartitionBoot};
use super::groups::RebalanceCause;
use super::retention::Reason;
use super::shard::ShardRequest;
use super::tree::Fate;
use super::{Node, StatsSnapshot};
use crate::env::chan::oneshot;
use crate::metadata::{MetaAction, MetaPlan};
use crate::metrics::{
    Counters, Histogram, HistogramSnapshot, LabeledCounts, GROUP_COMMIT_MESSAGES_BOUNDS,
    GROUP_COMMIT_SENDS_BOUNDS, PERSIST_LATENCY_BOUNDS_NANOS,
};
use crate::partition::recovery::Action;
use crate::partition::{FenceReason, Outcome};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

const REASONS: usize = Reason::NAMES.len();
const CAUSES: usize = RebalanceCause::NAMES.len();
const FENCES: usize = FenceReason::NAMES.len();

/// What the owners record while they work (shared by the shards and the groups owner).
#[derive(Debug)]
pub(crate) struct Recorder {
    /// Group-commit persists, from the persist's start to the sync's completion (its disk
    /// time settled), nanoseconds.
    pub(crate) persist_latency: Histogram,
    /// Sends and messages each group-commit persist acknowledged.
    pub(crate) persist_sends: Histogram,
    pub(crate) persist_messages: Histogram,
    /// Segments, messages and bytes deleted, by [`Reason`].
    pub(crate) deleted_segments: Counters<REASONS>,
    pub(crate) deleted_messages: Counters<REASONS>,
    pub(crate) deleted_bytes: Counters<REASONS>,
    /// Group rebalances, by [`RebalanceCause`] (the groups owner's count, copied here).
    pub(crate) rebalances: Counters<CAUSES>,
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder {
            persist_latency: Histogram::new(&PERSIST_LATENCY_BOUNDS_NANOS),
            persist_sends: Histogram::new(&GROUP_COMMIT_SENDS_BOUNDS),
            persist_messages: Histogram::new(&GROUP_COMMIT_MESSAGES_BOUNDS),
            deleted_segments: Counters::new(Reason::NAMES),
            deleted_messages: Counters::new(Reason::NAMES),
            deleted_bytes: Counters::new(Reason::NAMES),
            rebalances: Counters::new(RebalanceCause::NAMES),
        }
    }
}

/// What one shard holds now, for a scrape.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShardFigures {
    /// Fenced partitions, by [`FenceReason::index`].
    pub(crate) fenced: [u64; FENCES],
    /// Journal bytes of the open partitions, per (stream, topic) (every topic with an open
    /// partition here, zero included).
    pub(crate) journal_bytes: BTreeMap<(u32, u32), u64>,
}

/// A copy of the node's figures at one moment (each figure read on its own: they are not a
/// transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMetrics {
    /// The owners' counters ([`super::NodeStats`]).
    pub stats: StatsSnapshot,
    /// Group-commit persists (the shard's one persist for the `persisted` sends of a round):
    /// from its start to its durable completion, nanoseconds, over
    /// [`PERSIST_LATENCY_BOUNDS_NANOS`]. Failed persists are not observed
    /// (`stats.failed_persists` counts them).
    pub persist_latency: HistogramSnapshot,
    /// Flushes an append's thresholds triggered (the journal written to the active segment,
    /// without a sync unless a segment filled and was sealed), nanoseconds, same bounds.
    pub flush_latency: HistogramSnapshot,
    /// Sends each successful group-commit persist acknowledged
    /// ([`crate::metrics::GROUP_COMMIT_SENDS_BOUNDS`]).
    pub persist_sends: HistogramSnapshot,
    /// Messages each successful group-commit persist acknowledged
    /// ([`crate::metrics::GROUP_COMMIT_MESSAGES_BOUNDS`]).
    pub persist_messages: HistogramSnapshot,
    /// `sync_data` calls the node issued (every file: logs, indexes, superblocks, offsets,
    /// the metadata journal and snapshot), boot included.
    pub file_syncs: u64,
    /// `sync_dir` calls the node issued, boot included.
    pub dir_syncs: u64,
    /// Bytes of admitted batches held in memory, not yet written to a segment, all
    /// partitions together (the node's journal budget in use).
    pub journal_bytes: u64,
    /// The same per (stream id, topic id), for every topic with an open partition (read from
    /// the shards a moment apart from `journal_bytes`).
    pub journal_bytes_by_topic: BTreeMap<(u32, u32), u64>,
    /// Partitions fenced now, by reason (labels [`FenceReason::NAMES`]).
    pub fenced: LabeledCounts,
    /// What retention deleted (reasons `Expired`, `OverSize`) and explicit `DeleteSegments`
    /// (`Requested`), labels [`Reason::NAMES`].
    pub deleted_segments: LabeledCounts,
    pub deleted_messages: LabeledCounts,
    pub deleted_bytes: LabeledCounts,
    /// Consumer-group rebalances (assignment changes), by cause (labels
    /// [`RebalanceCause::NAMES`]).
    pub rebalances: LabeledCounts,
    /// What boot decided.
    pub boot: BootMetrics,
    /// Shards, and the shards that answered this scrape (one that is gone, after a stop,
    /// adds nothing to `fenced` and `journal_bytes_by_topic`).
    pub shards: usize,
    pub shards_reporting: usize,
}

/// What boot decided, per partition and for the metadata plane (fixed once the node is up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootMetrics {
    /// Partitions by recovery outcome (labels [`Outcome::NAMES`]); a partition whose recovery
    /// did several things counts once under each; one fenced before its recovery ran (its
    /// directory missing or claimed, or an I/O error opening it) counts as `Fenced`.
    pub partition_outcomes: LabeledCounts,
    /// Recovery actions carried out, one per segment, index or offset file repaired (labels
    /// [`Action::NAMES`]).
    pub partition_actions: LabeledCounts,
    /// Partitions fenced at boot, by reason (labels [`FenceReason::NAMES`]).
    pub partition_fences: LabeledCounts,
    /// The metadata plane was initialised (nothing was there).
    pub meta_first_boot: bool,
    /// Journal entries replayed after the snapshot.
    pub meta_replayed_ops: u64,
    /// Repairs of the metadata plane (labels [`MetaAction::NAMES`]).
    pub meta_actions: LabeledCounts,
    /// Partition paths under `streams/` by what boot did there (labels [`Fate::NAMES`]).
    pub tree_fates: LabeledCounts,
    /// Stored offsets of deleted consumer groups boot removed.
    pub group_offsets_removed: u64,
}

impl BootMetrics {
    pub(crate) fn new(plan: &MetaPlan, report: &BootReport) -> BootMetrics {
        let mut outcomes = LabeledCounts::zero(Outcome::NAMES);
        let mut actions = LabeledCounts::zero(Action::NAMES);
        let mut fences = LabeledCounts::zero(FenceReason::NAMES);
        for (_, boot) in &report.partitions {
            match boot {
                PartitionBoot::Opened(recovery) => {
                    for outcome in recovery.outcomes() {
                        outcomes.counts[outcome.index()] += 1;
                    }
                    for action in &recovery.actions {
                        actions.counts[action.index()] += 1;
                    }
                }
                PartitionBoot::Fenced(_) => outcomes.counts[Outcome::Fenced.index()] += 1,
            }
            if let Some(reason) = boot.fence() {
                fences.counts[reason.index()] += 1;
            }
        }
        let mut meta_actions = LabeledCounts::zero(MetaAction::NAMES);
        for action in &plan.actions {
            meta_actions.counts[action.index()] += 1;
        }
        let mut tree_fates = LabeledCounts::zero(Fate::NAMES);
        for path in &report.tree.paths {
            tree_fates.counts[path.fate.index()] += 1;
        }
        BootMetrics {
            partition_outcomes: outcomes,
            partition_actions: actions,
            partition_fences: fences,
            meta_first_boot: plan.first_boot,
            meta_replayed_ops: plan.replayed.len() as u64,
            meta_actions,
            tree_fates,
            group_offsets_removed: report.group_offsets_removed.len() as u64,
        }
    }
}

impl Node {
    /// The node's figures now. The counters and histograms are read without waiting; the
    /// fenced partitions and the journal bytes per topic are asked of every shard, so a
    /// scrape waits for each shard's current step (a persist at most).
    pub async fn metrics(&self) -> NodeMetrics {
        let inner = &self.inner;
        let mut asked = Vec::with_capacity(inner.shards.len());
        for shard in &inner.shards {
            let (reply, pending) = oneshot();
            if self
                .enqueue(shard, ShardRequest::Figures { reply })
                .await
                .is_ok()
            {
                asked.push(pending);
            }
        }
        let mut fenced = LabeledCounts::zero(FenceReason::NAMES);
        let mut journal_bytes_by_topic = BTreeMap::new();
        let mut shards_reporting = 0;
        for pending in asked {
            let Ok(figures) = pending.await else { continue };
            shards_reporting += 1;
            for (count, n) in fenced.counts.iter_mut().zip(figures.fenced) {
                *count += n;
            }
            for (topic, bytes) in figures.journal_bytes {
                *journal_bytes_by_topic.entry(topic).or_default() += bytes;
            }
        }
        let recorder = &inner.recorder;
        NodeMetrics {
            stats: self.stats(),
            persist_latency: recorder.persist_latency.snapshot(),
            flush_latency: inner.resources.flush_latency.snapshot(),
            persist_sends: recorder.persist_sends.snapshot(),
            persist_messages: recorder.persist_messages.snapshot(),
            file_syncs: inner.syncs.file.load(Ordering::Relaxed),
            dir_syncs: inner.syncs.dir.load(Ordering::Relaxed),
            journal_bytes: inner.resources.journal.used(),
            journal_bytes_by_topic,
            fenced,
            deleted_segments: recorder.deleted_segments.snapshot(),
            deleted_messages: recorder.deleted_messages.snapshot(),
            deleted_bytes: recorder.deleted_bytes.snapshot(),
            rebalances: recorder.rebalances.snapshot(),
            boot: inner.boot.clone(),
            shards: inner.shards.len(),
            shards_reporting,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each label table's `index()` is the position of the variant's `name()` in `NAMES`.
    #[test]
    fn every_index_is_the_position_of_its_name() {
        for outcome in Outcome::ALL {
            assert_eq!(Outcome::NAMES[outcome.index()], outcome.name());
        }
        for reason in [Reason::Expired, Reason::OverSize, Reason::Requested] {
            assert_eq!(Reason::NAMES[reason.index()], reason.name());
        }
        let fence = FenceReason::DirectoryInTheWay {
            dir: "d".into(),
            found: "f".into(),
        };
        assert_eq!(FenceReason::NAMES[fence.index()], "DirectoryInTheWay");
        assert_eq!(Fate::NAMES[Fate::Nothing.index()], "Nothing");
        assert_eq!(
            MetaAction::NAMES[MetaAction::FinishSnapshot.index()],
            "FinishSnapshot"
        );
    }
}

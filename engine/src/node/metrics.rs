//! The node's observable figures ([`Node::metrics`]), for the server's `/metrics`: the
//! scrape. It reads what the owners record as they work ([`super::recorder::Recorder`], the
//! sync count of the node's disk, the journal budget), what boot decided
//! ([`BootMetrics`], fixed once the node is up), and asks each shard what it holds now
//! (fenced partitions, journal bytes per topic). Every label set is an enum's `NAMES` table,
//! so the series a scrape exports are fixed; nothing here grows with traffic.

use super::boot::BootMetrics;
use super::shard::ShardRequest;
use super::{Node, StatsSnapshot};
use crate::env::chan::oneshot;
use crate::metrics::{HistogramSnapshot, LabeledCounts};
use crate::partition::FenceReason;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

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
    /// `sync_all` calls: each shard's one sync of the data root at boot.
    pub root_syncs: u64,
    /// Bytes of admitted batches held in memory, not yet written to a segment, all
    /// partitions together (the node's journal budget in use).
    pub journal_bytes: u64,
    /// The same per (stream id, topic id), for every topic with an open partition (read from
    /// the shards a moment apart from `journal_bytes`).
    pub journal_bytes_by_topic: BTreeMap<(u32, u32), u64>,
    /// Partitions fenced now, by reason (labels [`FenceReason::NAMES`]).
    pub fenced: LabeledCounts,
    /// What retention deleted (reasons `Expired`, `OverSize`) and explicit `DeleteSegments`
    /// (`Requested`), labels [`super::retention::Reason::NAMES`].
    pub deleted_segments: LabeledCounts,
    pub deleted_messages: LabeledCounts,
    pub deleted_bytes: LabeledCounts,
    /// Consumer-group rebalances (assignment changes), by cause (labels
    /// [`super::recorder::RebalanceCause::NAMES`]).
    pub rebalances: LabeledCounts,
    /// What boot decided.
    pub boot: BootMetrics,
    /// Shards, and the shards that answered this scrape (one that is gone, after a stop,
    /// adds nothing to `fenced` and `journal_bytes_by_topic`).
    pub shards: usize,
    pub shards_reporting: usize,
    /// Partitions placed on each shard (the placement table's loads), by shard index.
    pub shard_partitions: Vec<u32>,
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
            root_syncs: inner.syncs.all.load(Ordering::Relaxed),
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
            shard_partitions: inner.placement.loads(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::retention::Reason;
    use super::super::tree::Fate;
    use crate::metadata::MetaAction;
    use crate::partition::{FenceReason, Outcome};

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

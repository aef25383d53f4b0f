//! What the owners record as they work, for the node's figures ([`super::metrics`]): plain
//! atomics in [`Recorder`] (group-commit histograms, deletions and rebalances by cause) and
//! what one shard holds now ([`ShardFigures`]). A leaf: the owners write here, the scrape
//! reads here, and nothing here knows an owner.

use super::retention::Reason;
use crate::metrics::{
    Counters, Histogram, GROUP_COMMIT_MESSAGES_BOUNDS, GROUP_COMMIT_SENDS_BOUNDS,
    PERSIST_LATENCY_BOUNDS_NANOS,
};
use crate::partition::FenceReason;
use std::collections::BTreeMap;

const REASONS: usize = Reason::NAMES.len();
const CAUSES: usize = RebalanceCause::NAMES.len();
const FENCES: usize = FenceReason::NAMES.len();

/// What made a group rebalance (each rebalance reassigns the group's partitions and bumps
/// its generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceCause {
    Join,
    Leave,
    /// A member's session ended.
    Disconnect,
    /// The topic's partition count changed.
    TopicResized,
}

crate::names::variant_names!(RebalanceCause: Join, Leave, Disconnect, TopicResized);

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

//! The vocabulary of a recovery plan: the [`Action`]s apply carries out, the segments as
//! they will be after them ([`PlannedSegment`]), the plan itself ([`RecoveryPlan`]) and its
//! coarse [`Outcome`]s. Decide builds it, apply acts on it, reports and the simulator read
//! it.

use crate::format::IndexEntry;
use crate::partition::offsets::{ConsumerId, StoredOffset};
use crate::partition::segment::log_name;
use crate::partition::superblock::{DurablePoint, OffsetSet, PartitionIdentity, Superblock};
use crate::partition::FenceReason;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// A segment as it will be after the plan is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedSegment {
    pub start_offset: u64,
    pub log_path: PathBuf,
    pub index_path: PathBuf,
    /// Bytes of valid batches the log will hold.
    pub len: u64,
    /// The offset after its last batch.
    pub next_offset: u64,
    /// Newest batch timestamp (0 when empty).
    pub max_timestamp: u64,
    /// The entries its index will hold.
    pub index: Vec<IndexEntry>,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create a missing offsets directory (its parent synced after).
    CreateDir { path: PathBuf },
    /// Remove a file left by an interrupted index rebuild or offset store.
    RemoveTemp { path: PathBuf },
    /// Remove an index whose log does not exist, above the durable end.
    RemoveStrayIndex { path: PathBuf },
    /// Create an empty segment (the record names it and nothing in it was durable).
    CreateSegment { start_offset: u64 },
    /// Cut a log at `from` (it was `len` bytes): the bytes above were never promised durable.
    Truncate {
        path: PathBuf,
        from: u64,
        len: u64,
        damage: String,
    },
    /// Remove a segment that lies wholly above the durable end.
    RemoveSegment {
        log_path: PathBuf,
        index_path: PathBuf,
        why: String,
    },
    /// Remove a segment below the recorded log start: retention recorded the new start and
    /// was interrupted before it unlinked everything below it.
    FinishDeletion {
        log_path: PathBuf,
        index_path: PathBuf,
        log_start: u64,
    },
    RewriteIndex {
        path: PathBuf,
        entries: Vec<IndexEntry>,
        why: String,
    },
    /// A stored offset beyond the recovered end (a lost tail): a consumer must not skip the
    /// new messages that will take the lost offsets.
    LowerOffset {
        consumer: ConsumerId,
        path: PathBuf,
        from: u64,
        to: u64,
    },
    /// A stored offset of a log that is now empty.
    DeleteOffset {
        consumer: ConsumerId,
        path: PathBuf,
        was: u64,
        /// Under `persisted` offsets: the set recorded (directories synced first) before the
        /// file is removed.
        record: Option<OffsetSet>,
    },
    /// A damaged `replicated` offset file (an unsynced store can tear): the consumer reads
    /// from the start, which the policy allows.
    DropDamagedOffset {
        consumer: ConsumerId,
        path: PathBuf,
        why: String,
    },
    /// Sync these logs and indexes (and the directory), then record the new durable end
    /// (and the set of stored offsets as recovery leaves it).
    AdvanceSuperblock {
        sync: Vec<PathBuf>,
        from: DurablePoint,
        to: DurablePoint,
        offsets: OffsetSet,
    },
    /// Record the set of stored offsets as recovery leaves it: a store of a new consumer
    /// whose record did not land, or offsets recovery deleted.
    RecordOffsets {
        from: OffsetSet,
        to: OffsetSet,
        why: String,
    },
    /// Write the trusted end, with the next sequence, into the other slot, which is missing
    /// or damaged (otherwise the durable end stays uncertain for every later boot), or while
    /// the trusted record survives in one copy only (one more fault would erase it).
    RewriteSlot {
        path: PathBuf,
        durable: DurablePoint,
    },
}

crate::names::variant_names!(Action:
    CreateDir,
    RemoveTemp,
    RemoveStrayIndex,
    CreateSegment,
    Truncate,
    RemoveSegment,
    FinishDeletion,
    RewriteIndex,
    LowerOffset,
    DeleteOffset,
    DropDamagedOffset,
    AdvanceSuperblock,
    RecordOffsets,
    RewriteSlot,
);

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::CreateDir { path } => write!(f, "create missing directory {}", path.display()),
            Action::RemoveTemp { path } => write!(
                f,
                "remove {}: left by an interrupted index rebuild or offset store",
                path.display()
            ),
            Action::RemoveStrayIndex { path } => write!(
                f,
                "remove {}: its log does not exist and it lies above the durable end",
                path.display()
            ),
            Action::CreateSegment { start_offset } => write!(
                f,
                "create empty segment {}: the durable record names it and nothing in it was durable",
                log_name(*start_offset)
            ),
            Action::Truncate {
                path,
                from,
                len,
                damage,
            } => write!(
                f,
                "truncate {} from {len} to {from} bytes: torn tail above the durable end ({damage})",
                path.display()
            ),
            Action::RemoveSegment { log_path, why, .. } => {
                write!(f, "remove {} and its index: {why}", log_path.display())
            }
            Action::FinishDeletion {
                log_path,
                log_start,
                ..
            } => write!(
                f,
                "remove {} and its index: it lies below the recorded log start {log_start} (an interrupted deletion)",
                log_path.display()
            ),
            Action::RewriteIndex { path, entries, why } => write!(
                f,
                "rebuild {} from the log ({} entries): {why}",
                path.display(),
                entries.len()
            ),
            Action::LowerOffset { path, from, to, .. } => write!(
                f,
                "lower the stored offset in {} from {from} to {to}: the log now ends there",
                path.display()
            ),
            Action::DeleteOffset { path, was, .. } => write!(
                f,
                "delete the stored offset {was} in {}: the log is now empty",
                path.display()
            ),
            Action::DropDamagedOffset { path, why, .. } => write!(
                f,
                "drop the damaged replicated offset {} ({why}): the consumer reads from the start",
                path.display()
            ),
            Action::AdvanceSuperblock { from, to, .. } => write!(
                f,
                "sync the log and advance the durable end from segment {} position {} (next offset {}) to segment {} position {} (next offset {})",
                from.segment_start, from.position, from.next_offset,
                to.segment_start, to.position, to.next_offset
            ),
            Action::RecordOffsets { from, to, why } => write!(
                f,
                "record {} stored offsets (the superblock records {}): {why}",
                to.count, from.count
            ),
            Action::RewriteSlot { path, durable } => write!(
                f,
                "rewrite {} with the next sequence and the same durable end (segment {} position {}): the slot is missing or damaged, or the newest record survives in one copy only",
                path.display(), durable.segment_start, durable.position
            ),
        }
    }
}

/// What recovery decided for a partition.
#[derive(Debug, Clone)]
pub struct RecoveryPlan {
    pub dir: PathBuf,
    pub identity: PartitionIdentity,
    /// The record recovery trusts (`None` when no record could be trusted).
    pub superblock: Option<Superblock>,
    /// The slot file holding it: apply syncs it before anything is served on its word.
    pub sync_slot: Option<PathBuf>,
    /// Segments as they will be after the actions, in offset order.
    pub segments: Vec<PlannedSegment>,
    /// Stored offsets as they will be after the actions.
    pub offsets: BTreeMap<ConsumerId, StoredOffset>,
    /// The `replicated` offset files served as they are: apply syncs each. An earlier
    /// process may have rewritten one in place and died before its page reached the device,
    /// while the kernel had written an older value of the same file back; served from the
    /// cache and not synced, a power loss would bring that older value back.
    pub sync_offsets: Vec<PathBuf>,
    pub actions: Vec<Action>,
    /// Observations that change nothing (a damaged copy of a slot, unknown files).
    pub notes: Vec<String>,
    /// Set when the partition must be fenced; then `actions` is empty.
    pub fence: Option<FenceReason>,
}

/// The coarse result, for reports and simulator coverage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Clean,
    DurableEndAdvanced,
    IndexRebuilt,
    TornTailTruncated,
    OffsetRepaired,
    SlotRepaired,
    /// A retention deletion interrupted by a crash was finished.
    DeletionFinished,
    Fenced,
}

impl Outcome {
    pub const ALL: [Outcome; 8] = [
        Outcome::Clean,
        Outcome::DurableEndAdvanced,
        Outcome::IndexRebuilt,
        Outcome::TornTailTruncated,
        Outcome::OffsetRepaired,
        Outcome::SlotRepaired,
        Outcome::DeletionFinished,
        Outcome::Fenced,
    ];
}

crate::names::variant_names!(Outcome:
    Clean,
    DurableEndAdvanced,
    IndexRebuilt,
    TornTailTruncated,
    OffsetRepaired,
    SlotRepaired,
    DeletionFinished,
    Fenced,
);

impl RecoveryPlan {
    /// Whether this plan repairs nothing: under [`super::Insurance::Deferred`] its apply
    /// syncs nothing and its caller's `sync_all` makes what it serves durable.
    pub fn repairs_nothing(&self) -> bool {
        self.fence.is_none() && self.actions.is_empty()
    }

    /// Every outcome this plan reaches, most severe last.
    pub fn outcomes(&self) -> Vec<Outcome> {
        if self.fence.is_some() {
            return vec![Outcome::Fenced];
        }
        let mut outcomes: Vec<Outcome> = self
            .actions
            .iter()
            .filter_map(|action| match action {
                Action::Truncate { .. } | Action::RemoveSegment { .. } => {
                    Some(Outcome::TornTailTruncated)
                }
                Action::RewriteIndex { .. } => Some(Outcome::IndexRebuilt),
                Action::AdvanceSuperblock { .. } => Some(Outcome::DurableEndAdvanced),
                Action::LowerOffset { .. }
                | Action::DeleteOffset { .. }
                | Action::DropDamagedOffset { .. }
                | Action::RecordOffsets { .. } => Some(Outcome::OffsetRepaired),
                Action::RewriteSlot { .. } => Some(Outcome::SlotRepaired),
                Action::FinishDeletion { .. } => Some(Outcome::DeletionFinished),
                _ => None,
            })
            .collect();
        if outcomes.is_empty() {
            outcomes.push(Outcome::Clean);
        }
        outcomes.sort();
        outcomes.dedup();
        outcomes
    }

    /// The fine-grained decisions: the fence reason's name, or every action's name.
    pub fn decisions(&self) -> Vec<&'static str> {
        match &self.fence {
            Some(reason) => vec![reason.name()],
            None => self.actions.iter().map(Action::name).collect(),
        }
    }
}

//! Boot recovery of one partition directory: a [`plan`] (read, then decide) and its
//! [`apply`]cation.
//!
//! - [`survey`] reads: the superblock pair and the tail logs from the device (clean cached
//!   pages dropped first), every segment walked from byte zero with every batch verified
//!   against the format's ceilings, the indexes, the stored offsets;
//! - [`trust`] picks the superblock record the durable end rests on (the survey asks it
//!   where the tail begins; decide starts from it);
//! - [`decide`] decides, purely: the fate of every segment, the indexes to rebuild, the
//!   offsets to repair and the record to write; or why to fence;
//! - [`apply`] carries the actions out, each durable whatever the topic's policy (a repair
//!   that a power loss could undo is no repair), the superblock record last; what a plan
//!   with no actions serves is synced by it, or by its caller's one sync of the data root
//!   ([`Insurance`]);
//! - [`actions`] is their common vocabulary: the actions, the planned segments, the plan.
//!
//! The files import downward only: `survey` → `trust`; `decide` → `survey`, `trust`,
//! `actions`; `apply` → `actions`; this module drives them.
//!
//! In short: invalid bytes **below** the durable end, anywhere in a sealed segment, a chain
//! gap, a file whose name disagrees with its first batch, or a log shorter than the durable
//! end → **fence**, files untouched; invalid or unreadable bytes **above** the durable end →
//! truncate there (never promised durable) and remove later segments; a missing, torn or
//! divergent index → rebuild it from the log; valid batches beyond the durable end → sync
//! them and advance the record. A crash anywhere inside apply leaves a state from which the
//! next plan reaches the same result; a plan made right after applying one has no actions.

pub mod actions;
mod apply;
pub mod decide;
pub mod survey;
pub mod trust;

pub use actions::{Action, Outcome, PlannedSegment, RecoveryPlan};
pub use apply::{apply, Insurance};

/// How a partition's recovery runs: alone, or within a node's boot.
#[derive(Debug, Clone, Default)]
pub enum Opening {
    /// Recovery reads everything it needs and syncs what it serves ([`Insurance::Now`]).
    #[default]
    Alone,
    /// Within a node's boot: `slots` are the superblock slots boot's tree survey read (from
    /// the device, or the cache when `cache` trusts it), nothing having written them since (`None`: read them again); what a
    /// recovery with nothing to repair serves is made durable by its shard's one `sync_all`
    /// before the node serves ([`Insurance::Deferred`]); `cache` says whether the survey
    /// reads the page cache as it is (the node's exit record decided).
    Boot {
        slots: Option<Box<[SlotRead; 2]>>,
        cache: PageCache,
    },
}

impl Opening {
    pub fn insurance(&self) -> Insurance {
        match self {
            Opening::Alone => Insurance::Now,
            Opening::Boot { .. } => Insurance::Deferred,
        }
    }

    /// What the survey may take from the page cache: alone, nothing.
    pub fn page_cache(&self) -> PageCache {
        match self {
            Opening::Alone => PageCache::Suspect,
            Opening::Boot { cache, .. } => *cache,
        }
    }
}
pub use decide::REBUILT_INDEX_SPACING_BYTES;
pub use survey::{identity_in, read_slots, BatchMark, Damage, DamageKind, ScannedSegment, Survey};
pub use trust::SlotRead;

use super::offsets::{ConsumerId, StoredOffset};
use super::superblock::PartitionIdentity;
use super::FenceReason;
use crate::config::Durability;
use crate::env::{Disk, PageCache};
use decide::Repairs;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// Reads the partition directory and decides what recovery does. Changes no bytes (it drops
/// clean cached pages of the files it must read from the device).
pub fn plan(
    disk: &dyn Disk,
    dir: &Path,
    identity: PartitionIdentity,
    offset_durability: Durability,
) -> io::Result<RecoveryPlan> {
    plan_with_hook(disk, dir, identity, offset_durability, None, None)
}

/// Rewrites recovery's verdict on a survey: a seam for the simulator's deliberate bugs
/// (`PartitionHooks::recovery_verdict`); production has none.
pub type VerdictHook = fn(&Survey, Result<Repairs, FenceReason>) -> Result<Repairs, FenceReason>;

/// [`plan`], the verdict passing through `hook` (the simulator's; production has none)
/// between the rules and the plan; `slots` as the caller read them ([`survey::survey`]).
pub fn plan_with_hook(
    disk: &dyn Disk,
    dir: &Path,
    identity: PartitionIdentity,
    offset_durability: Durability,
    hook: Option<VerdictHook>,
    slots: Option<[SlotRead; 2]>,
) -> io::Result<RecoveryPlan> {
    let _span = tracing::info_span!("recovery_plan", dir = %dir.display(), %identity).entered();
    let survey = survey::survey(disk, dir, identity, offset_durability, slots)?;
    let verdict = decide::decide(&survey);
    let verdict = match hook {
        Some(rewrite) => rewrite(&survey, verdict),
        None => verdict,
    };
    let notes = notes(&survey);
    let plan = match verdict {
        Ok(repairs) => RecoveryPlan {
            dir: dir.to_path_buf(),
            identity,
            superblock: Some(repairs.trusted.record),
            sync_slot: repairs.sync_slot,
            segments: repairs.segments,
            sync_offsets: offsets_served_as_they_are(
                dir,
                offset_durability,
                &repairs.offsets,
                &repairs.actions,
            ),
            offsets: repairs.offsets,
            actions: repairs.actions,
            notes,
            fence: None,
        },
        Err(reason) => RecoveryPlan {
            dir: dir.to_path_buf(),
            identity,
            superblock: trust::trusted_record(dir, identity, &survey.slots)
                .ok()
                .map(|t| t.record),
            sync_slot: None,
            segments: Vec::new(),
            offsets: BTreeMap::new(),
            sync_offsets: Vec::new(),
            actions: Vec::new(),
            notes,
            fence: Some(reason),
        },
    };
    for action in &plan.actions {
        tracing::info!(%action, "recovery decision");
    }
    Ok(plan)
}

/// The `replicated` offset files a plan serves without rewriting them (see
/// [`RecoveryPlan::sync_offsets`]); under `persisted` every store was synced before it was
/// answered, and a lowered offset is rewritten and synced by its action.
fn offsets_served_as_they_are(
    dir: &Path,
    durability: Durability,
    offsets: &BTreeMap<ConsumerId, StoredOffset>,
    actions: &[Action],
) -> Vec<PathBuf> {
    if durability != Durability::Replicated {
        return Vec::new();
    }
    let rewritten = |path: &Path| {
        actions
            .iter()
            .any(|a| matches!(a, Action::LowerOffset { path: p, .. } if p == path))
    };
    offsets
        .iter()
        .filter(|(_, stored)| matches!(stored, StoredOffset::Offset(_)))
        .map(|(consumer, _)| consumer.path(dir))
        .filter(|path| !rewritten(path))
        .collect()
}

/// What the survey saw that changes nothing.
fn notes(survey: &Survey) -> Vec<String> {
    let mut notes = Vec::new();
    for (slot, read) in survey.slots.iter().enumerate() {
        let path = survey.dir.join(super::superblock::SLOT_NAMES[slot]);
        match read {
            SlotRead::Valid { record, problems } if !problems.is_empty() => notes.push(format!(
                "{}: {} (the other copy holds sequence {})",
                path.display(),
                problems.join("; "),
                record.sequence
            )),
            SlotRead::Valid { .. } => {}
            SlotRead::Missing => notes.push(format!("{} is missing", path.display())),
            SlotRead::Unreadable(e) => notes.push(format!("{} is unreadable: {e}", path.display())),
            SlotRead::Damaged(e) => notes.push(format!("{} is damaged: {e}", path.display())),
            SlotRead::Oversized { len } => {
                notes.push(format!("{} is {len} bytes long", path.display()))
            }
        }
    }
    for path in &survey.unknown {
        notes.push(format!("ignored unknown entry {}", path.display()));
    }
    for (consumer, stored) in &survey.offsets {
        if let StoredOffset::Damaged { path, why } = stored {
            notes.push(format!(
                "stored offset of {consumer:?} in {} is damaged: {why}",
                path.display()
            ));
        }
    }
    notes
}

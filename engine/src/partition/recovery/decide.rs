//! Recovery's deciding half: pure functions from a [`Survey`] to the repairs that make the
//! partition servable, or to the reason it must be fenced. No I/O here.
//!
//! Three rules, each a table of cases:
//! - [`trusted_record`] (in [`super::trust`]): which superblock record recovery trusts (the
//!   durable end);
//! - [`segment_fate`]: what happens to each segment, given where it lies against the durable
//!   end;
//! - [`plan_record`]: whether a new superblock record must be written, and why.
//!
//! Plus the hints and side files: [`plan_index`] (rebuild an index from its log) and
//! [`plan_offsets`] (stored offsets beyond the recovered end, damaged offset files).
//!
//! The cases it decides (`docs/design.md`, "Recovery", gives the principles):
//!
//! | finding | decision |
//! |---|---|
//! | a slot longer than a slot file, or holding a record of the other parity | fence `SuperblockMisplaced` |
//! | a record of another partition (ids or creation nonce) | fence `SuperblockIdentity` |
//! | segments below the recorded log start | remove them (`FinishDeletion`) |
//! | the oldest segment starting after the log start | fence `LogStartMissing` |
//! | persisted offset files other than the recorded set (or it plus one) | fence `StoredOffsetsMissing` |
//! | no valid record | fence `NoSuperblock` |
//! | a file named differently from its first batch | fence `SegmentNameMismatch` |
//! | a chain gap before the durable segment | fence `ChainGap` |
//! | damage in a sealed segment, below the durable end, or an empty sealed segment | fence (`SealedSegmentCorrupt`, `CorruptBelowDurable`, `ReadFailed`, `EmptySealedSegment`) |
//! | the log shorter than the durable end, or no batch boundary there | fence (`LogShorterThanDurable`, `DurableOffsetMismatch`) |
//! | an index without its log at or below the durable segment; the durable segment missing with durable bytes in it | fence (`MissingLog`, `DurableSegmentMissing`) |
//! | the durable segment missing with nothing durable in it | recreate it empty after the older segments |
//! | damage at or above the durable end with the other slot missing or damaged | fence `DurableEndUncertain` |
//! | damage (invalid, incomplete or unreadable bytes) above the durable end | truncate there, remove later segments |
//! | a tail segment after a gap, an index without its log above the durable end | remove |
//! | a missing, torn or divergent index | keep the agreeing prefix, rebuild the rest |
//! | valid batches beyond the durable end | sync them and the directory, record the new end |
//! | the other slot missing or damaged, nothing else to record | rewrite it with the next sequence |
//! | a stored offset beyond the recovered end / of an empty log | lower / delete it (recording the set first) |
//! | one more persisted offset file than recorded | record the set |
//! | a damaged offset file | drop it under `replicated`; report it under `persisted` |
//!
//! Every truncation is justified by a durable record (the trusted slot names synced bytes);
//! synced bytes that fail verification are fenced, never truncated (`docs/design.md`,
//! "Recovery").

use super::actions::{Action, PlannedSegment};
use super::survey::{Damage, DamageKind, ScannedSegment, Survey};
use super::trust::{trusted_record, Trusted};
use crate::config::Durability;
use crate::format::IndexEntry;
use crate::partition::offsets::{ConsumerId, StoredOffset};
use crate::partition::segment::{index_name, log_name};
use crate::partition::superblock::{DurablePoint, OffsetSet};
use crate::partition::FenceReason;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A rebuilt index gets one entry per this many log bytes (plus the first batch).
pub const REBUILT_INDEX_SPACING_BYTES: u64 = 4096;

/// What recovery will do, when it does not fence.
#[derive(Debug, Clone)]
pub struct Repairs {
    pub trusted: Trusted,
    /// The slot apply syncs before anything else (`None` only when a hook rewrote the
    /// verdict: a simulator canary).
    pub sync_slot: Option<PathBuf>,
    pub segments: Vec<PlannedSegment>,
    pub actions: Vec<Action>,
    pub offsets: BTreeMap<ConsumerId, StoredOffset>,
}

/// Decides with the record [`trusted_record`] picks.
pub fn decide(survey: &Survey) -> Result<Repairs, FenceReason> {
    let trusted = trusted_record(&survey.dir, survey.identity, &survey.slots)?;
    decide_with(survey, trusted)
}

/// Decides the repairs of `survey` given the record recovery trusts. Actions come in the
/// order apply runs them: directories and leftovers, segments, indexes, offsets, and the
/// superblock record last.
pub fn decide_with(survey: &Survey, trusted: Trusted) -> Result<Repairs, FenceReason> {
    let durable = trusted.record.durable;
    let mut actions: Vec<Action> = survey
        .missing_dirs
        .iter()
        .map(|path| Action::CreateDir { path: path.clone() })
        .collect();
    actions.extend(
        survey
            .temps
            .iter()
            .map(|path| Action::RemoveTemp { path: path.clone() }),
    );
    for &start in &survey.orphan_indexes {
        let path = survey.dir.join(index_name(start));
        if start >= trusted.record.log_start && start <= durable.segment_start {
            return Err(FenceReason::MissingLog {
                index: path,
                log: survey.dir.join(log_name(start)),
            });
        }
        actions.push(Action::RemoveStrayIndex { path });
    }
    check_offset_set(survey, &trusted)?;
    let planned = plan_segments(survey, &trusted, &mut actions)?;
    let mut segments = Vec::with_capacity(planned.kept.len() + 1);
    for scanned in &planned.kept {
        let (index, rewrite) = plan_index(scanned);
        actions.extend(rewrite);
        segments.push(PlannedSegment {
            start_offset: scanned.start_offset,
            log_path: scanned.log_path.clone(),
            index_path: scanned.index_path.clone(),
            len: scanned.valid_end,
            next_offset: scanned.next_offset,
            max_timestamp: scanned.max_timestamp(),
            index,
        });
    }
    if planned.recreate {
        let start = durable.segment_start;
        actions.push(Action::CreateSegment {
            start_offset: start,
        });
        segments.push(PlannedSegment {
            start_offset: start,
            log_path: survey.dir.join(log_name(start)),
            index_path: survey.dir.join(index_name(start)),
            len: 0,
            next_offset: start,
            max_timestamp: 0,
            index: Vec::new(),
        });
    }
    let durable_index = planned.durable_index;
    let last = segments.last().expect("the durable segment survives");
    let offsets = plan_offsets(survey, last.next_offset.checked_sub(1), &mut actions);
    let recovered = DurablePoint {
        segment_start: last.start_offset,
        position: last.len,
        next_offset: last.next_offset,
    };
    let offset_set = match survey.offset_durability {
        Durability::Persisted => offset_set(offsets.keys()),
        Durability::Replicated => OffsetSet::default(),
    };
    // Offset deletions under `persisted` record their sets as they go.
    let recorded_by_actions = actions.iter().rev().find_map(|a| match a {
        Action::DeleteOffset {
            record: Some(set), ..
        } => Some(*set),
        _ => None,
    });
    actions.extend(plan_record(
        &trusted,
        recovered,
        offset_set,
        recorded_by_actions,
        &segments[durable_index..],
    ));
    Ok(Repairs {
        sync_slot: Some(trusted.path.clone()),
        trusted,
        segments,
        actions,
        offsets,
    })
}

/// The set of `consumers`, as the superblock records it.
pub fn offset_set<'a>(consumers: impl Iterator<Item = &'a ConsumerId>) -> OffsetSet {
    consumers.fold(OffsetSet::default(), |set, c| set.with(c.set_member()))
}

/// Under `persisted` offsets, the offset files found against the set the superblock records:
///
/// | found | decision |
/// |---|---|
/// | the recorded set | keep |
/// | the recorded set and one more (a store of a new consumer whose record did not land, or a delete whose unlink did not) | keep; the new set is recorded |
/// | anything else (a recorded file is gone) | fence `StoredOffsetsMissing` |
///
/// Under `replicated` offsets the set is not recorded: a lost store is the policy.
fn check_offset_set(survey: &Survey, trusted: &Trusted) -> Result<(), FenceReason> {
    if survey.offset_durability == Durability::Replicated {
        return Ok(());
    }
    let recorded = trusted.record.offsets;
    let consumers: Vec<ConsumerId> = survey.offsets.iter().map(|(c, _)| *c).collect();
    let found = offset_set(consumers.iter());
    let one_extra = || {
        found.count == recorded.count + 1
            && consumers
                .iter()
                .any(|c| found.without(c.set_member()) == recorded)
    };
    if found == recorded || one_extra() {
        return Ok(());
    }
    Err(FenceReason::StoredOffsetsMissing {
        dir: survey.dir.join("offsets"),
        recorded: recorded.count,
        found: consumers
            .iter()
            .map(|c| format!("{}/{}", c.kind.dir(), c.id))
            .collect(),
        uncertain_slot: trusted.uncertain.clone(),
    })
}

/// Where a segment lies against the durable end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Before the durable segment: synced whole at rotation, never written again.
    Sealed,
    /// The segment the record names: durable up to `durable.position`.
    Durable,
    /// After the durable segment: nothing in it was promised durable.
    Tail,
}

/// What happens to one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fate {
    Keep,
    /// Cut the log where its valid bytes end; every later segment goes too.
    Truncate {
        damage: String,
    },
    /// Remove the whole segment (it lies above the durable end); every later one goes too.
    Remove {
        why: String,
    },
}

/// The segments that survive, their actions pushed.
///
/// | segment | decision |
/// |---|---|
/// | starts below the recorded log start | remove (finish an interrupted deletion) |
/// | the durable segment is missing, and the record says nothing in it was durable | recreate it empty; remove any segment after it |
/// | the durable segment is missing, and bytes in it were durable | fence `DurableSegmentMissing` |
/// | the oldest remaining segment starts after the log start | fence `LogStartMissing` |
/// | any other | [`segment_fate`] |
fn plan_segments<'s>(
    survey: &'s Survey,
    trusted: &Trusted,
    actions: &mut Vec<Action>,
) -> Result<Kept<'s>, FenceReason> {
    let durable = trusted.record.durable;
    let log_start = trusted.record.log_start;
    let below = survey
        .segments
        .partition_point(|s| s.start_offset < log_start);
    for segment in &survey.segments[..below] {
        actions.push(Action::FinishDeletion {
            log_path: segment.log_path.clone(),
            index_path: segment.index_path.clone(),
            log_start,
        });
    }
    let live = &survey.segments[below..];
    let nothing_durable = durable.position == 0 && durable.next_offset == durable.segment_start;
    let (walked, recreate) = match live
        .iter()
        .position(|s| s.start_offset == durable.segment_start)
    {
        Some(_) => (live, false),
        None if nothing_durable => {
            // A crash between creating the segment and syncing its name: it held nothing
            // promised. Whatever follows it lies above the durable end.
            let split = live.partition_point(|s| s.start_offset < durable.segment_start);
            for segment in &live[split..] {
                actions.push(remove(
                    segment,
                    "it lies above the durable end, after a durable segment that held nothing and is gone".into(),
                ));
            }
            (&live[..split], true)
        }
        None => {
            return Err(FenceReason::DurableSegmentMissing {
                log: survey.dir.join(log_name(durable.segment_start)),
                durable,
            })
        }
    };
    let first = walked
        .first()
        .map_or(durable.segment_start, |s| s.start_offset);
    if first != log_start {
        return Err(FenceReason::LogStartMissing {
            dir: survey.dir.clone(),
            log_start,
            first_segment: Some(first),
            uncertain_slot: trusted.uncertain.clone(),
        });
    }
    let mut kept: Vec<&ScannedSegment> = Vec::with_capacity(walked.len());
    let mut dropping_later_segments = false;
    for segment in walked {
        if dropping_later_segments {
            actions.push(remove(
                segment,
                "it lies above the durable end, after a cut".into(),
            ));
            continue;
        }
        let role = match segment.start_offset.cmp(&durable.segment_start) {
            std::cmp::Ordering::Less => Role::Sealed,
            std::cmp::Ordering::Equal => Role::Durable,
            std::cmp::Ordering::Greater => Role::Tail,
        };
        let expected_start = kept.last().map(|s| s.next_offset);
        let fate = segment_fate(
            segment,
            role,
            durable,
            expected_start,
            trusted.uncertain.as_deref(),
        )?;
        match fate {
            Fate::Keep => kept.push(segment),
            Fate::Truncate { damage } => {
                actions.push(Action::Truncate {
                    path: segment.log_path.clone(),
                    from: segment.valid_end,
                    len: segment.file_len,
                    damage,
                });
                kept.push(segment);
                dropping_later_segments = true;
            }
            Fate::Remove { why } => {
                actions.push(remove(segment, why));
                dropping_later_segments = true;
            }
        }
    }
    if recreate {
        if let Some(expected) = kept
            .last()
            .map(|s| s.next_offset)
            .filter(|&end| end != durable.segment_start)
        {
            return Err(FenceReason::ChainGap {
                log: survey.dir.join(log_name(durable.segment_start)),
                expected_start: expected,
                found_start: durable.segment_start,
            });
        }
        return Ok(Kept {
            durable_index: kept.len(),
            kept,
            recreate: true,
        });
    }
    let durable_index = kept
        .iter()
        .position(|s| s.start_offset == durable.segment_start)
        .expect("the durable segment and every sealed one survive, or recovery fences");
    Ok(Kept {
        kept,
        durable_index,
        recreate: false,
    })
}

/// The segments [`plan_segments`] keeps.
struct Kept<'s> {
    kept: Vec<&'s ScannedSegment>,
    /// Where the durable segment is (== `kept.len()` when it is recreated).
    durable_index: usize,
    /// The durable segment is missing and held nothing durable: recreate it empty.
    recreate: bool,
}

fn remove(segment: &ScannedSegment, why: String) -> Action {
    Action::RemoveSegment {
        log_path: segment.log_path.clone(),
        index_path: segment.index_path.clone(),
        why,
    }
}

/// The fate of one segment:
///
/// | role | finding | decision |
/// |---|---|---|
/// | any | first batch's offset differs from the name | fence `SegmentNameMismatch` |
/// | sealed, durable | starts elsewhere than the previous segment ends | fence `ChainGap` |
/// | tail | starts elsewhere than the previous segment ends | remove it and every later one |
/// | sealed | unreadable sector | fence `ReadFailed` |
/// | sealed | any other damage | fence `SealedSegmentCorrupt` |
/// | sealed | no batch at all | fence `EmptySealedSegment` |
/// | durable | the file ends before the durable end | fence `LogShorterThanDurable` |
/// | durable | unreadable sector below the durable end | fence `ReadFailed` |
/// | durable | other damage below the durable end | fence `CorruptBelowDurable` |
/// | durable | no batch ends at the durable end with its offset | fence `DurableOffsetMismatch` |
/// | durable, tail | damage at or above the durable end, the other slot uncertain | fence `DurableEndUncertain` |
/// | durable, tail | damage at or above the durable end | truncate there, drop later segments |
/// | durable, tail | no damage | keep |
fn segment_fate(
    segment: &ScannedSegment,
    role: Role,
    durable: DurablePoint,
    expected_start: Option<u64>,
    uncertain_slot: Option<&Path>,
) -> Result<Fate, FenceReason> {
    if let Some(Damage {
        position: 0,
        kind: DamageKind::OffsetMismatch { found, .. },
    }) = &segment.damage
    {
        return Err(FenceReason::SegmentNameMismatch {
            log: segment.log_path.clone(),
            name_offset: segment.start_offset,
            first_batch_offset: *found,
        });
    }
    if let Some(expected) = expected_start.filter(|&e| e != segment.start_offset) {
        if role == Role::Tail {
            return Ok(Fate::Remove {
                why: format!(
                    "it starts at {} but the log before it ends at {expected}, above the durable end",
                    segment.start_offset
                ),
            });
        }
        return Err(FenceReason::ChainGap {
            log: segment.log_path.clone(),
            expected_start: expected,
            found_start: segment.start_offset,
        });
    }
    match role {
        Role::Sealed => sealed_fate(segment),
        Role::Durable => {
            durable_segment_check(segment, durable)?;
            tail_fate(segment, uncertain_slot)
        }
        Role::Tail => tail_fate(segment, uncertain_slot),
    }
}

fn sealed_fate(segment: &ScannedSegment) -> Result<Fate, FenceReason> {
    match &segment.damage {
        Some(damage) => Err(damage_fence(segment, damage, |damage| {
            FenceReason::SealedSegmentCorrupt {
                log: segment.log_path.clone(),
                position: damage.position,
                damage: damage.kind.to_string(),
            }
        })),
        None if segment.batches.is_empty() => Err(FenceReason::EmptySealedSegment {
            log: segment.log_path.clone(),
        }),
        None => Ok(Fate::Keep),
    }
}

/// Every byte below the durable end was synced before the record named it: it must be there
/// and valid, and the record's offset must fall on a batch boundary.
fn durable_segment_check(
    segment: &ScannedSegment,
    durable: DurablePoint,
) -> Result<(), FenceReason> {
    let shorter = FenceReason::LogShorterThanDurable {
        log: segment.log_path.clone(),
        valid_end: segment.valid_end,
        durable_position: durable.position,
    };
    if let Some(damage) = segment
        .damage
        .as_ref()
        .filter(|d| d.position < durable.position)
    {
        return Err(match damage.kind {
            DamageKind::Truncated { .. } => shorter,
            _ => damage_fence(segment, damage, |damage| FenceReason::CorruptBelowDurable {
                log: segment.log_path.clone(),
                position: damage.position,
                durable_position: durable.position,
                damage: damage.kind.to_string(),
            }),
        });
    }
    if segment.valid_end < durable.position {
        return Err(shorter);
    }
    let reached = segment.offset_at(durable.position);
    if reached != Some(durable.next_offset) {
        return Err(FenceReason::DurableOffsetMismatch {
            log: segment.log_path.clone(),
            durable,
            found_next_offset: reached,
        });
    }
    Ok(())
}

/// Bytes above the durable end were never promised durable: damage there is a torn tail,
/// unless the durable end itself is uncertain.
fn tail_fate(segment: &ScannedSegment, uncertain_slot: Option<&Path>) -> Result<Fate, FenceReason> {
    match (&segment.damage, uncertain_slot) {
        (None, _) => Ok(Fate::Keep),
        (Some(damage), Some(slot)) => Err(FenceReason::DurableEndUncertain {
            log: segment.log_path.clone(),
            position: damage.position,
            damage: damage.kind.to_string(),
            slot: slot.to_path_buf(),
        }),
        (Some(damage), None) => Ok(Fate::Truncate {
            damage: damage.kind.to_string(),
        }),
    }
}

/// An unreadable sector fences as `ReadFailed`; other damage as `otherwise` says.
fn damage_fence(
    segment: &ScannedSegment,
    damage: &Damage,
    otherwise: impl FnOnce(&Damage) -> FenceReason,
) -> FenceReason {
    match &damage.kind {
        DamageKind::Unreadable { sector, error } => FenceReason::ReadFailed {
            file: segment.log_path.clone(),
            position: damage.position,
            sector: *sector,
            error: error.clone(),
        },
        _ => otherwise(damage),
    }
}

/// The record to write last, if any:
///
/// | recovered end vs record | offset set vs record | other slot | action |
/// |---|---|---|---|
/// | differs | any | any | sync the durable segment and later ones, record the recovered end and set |
/// | equal | differs | any | record the set |
/// | equal | equal | uncertain | rewrite the other slot with the next sequence |
/// | equal | equal | valid, the trusted record in one copy only | write the next sequence into the other slot |
/// | equal | equal | valid | none |
///
/// "The record" is the trusted one, or the last one an offset deletion wrote (into the other
/// slot, which is then no longer uncertain).
fn plan_record(
    trusted: &Trusted,
    recovered: DurablePoint,
    offsets: OffsetSet,
    recorded_by_actions: Option<OffsetSet>,
    from_durable_segment: &[PlannedSegment],
) -> Option<Action> {
    let mut record = trusted.record;
    if let Some(set) = recorded_by_actions {
        record.offsets = set;
    }
    if recovered != record.durable {
        return Some(Action::AdvanceSuperblock {
            sync: from_durable_segment
                .iter()
                .flat_map(|s| [s.log_path.clone(), s.index_path.clone()])
                .collect(),
            from: record.durable,
            to: recovered,
            offsets,
        });
    }
    if offsets != record.offsets {
        return Some(Action::RecordOffsets {
            from: record.offsets,
            to: offsets,
            why: "the stored offsets differ from the recorded set (an interrupted store or delete, or offsets recovery deleted)".into(),
        });
    }
    if recorded_by_actions.is_some() {
        return None;
    }
    Some(Action::RewriteSlot {
        path: trusted.rewrite.clone()?,
        durable: record.durable,
    })
}

/// Keeps the longest prefix of index entries that agrees with the log and rebuilds the
/// rest; returns the entries the index will hold and the rewrite, if one is needed.
pub fn plan_index(segment: &ScannedSegment) -> (Vec<IndexEntry>, Option<Action>) {
    let (file_entries, torn_bytes) = match &segment.index {
        Some(read) => (read.entries.as_slice(), read.torn_bytes),
        None => (&[][..], 0),
    };
    let kept = agreeing_prefix(segment, file_entries);
    let why = if segment.index.is_none() {
        "the index is missing or unreadable".to_string()
    } else if kept < file_entries.len() {
        format!(
            "entry {kept} of {} does not match a batch of the log",
            file_entries.len()
        )
    } else if torn_bytes > 0 {
        format!("{torn_bytes} trailing bytes are a torn entry")
    } else {
        return (file_entries.to_vec(), None);
    };
    let mut entries = file_entries[..kept].to_vec();
    let mut last_position = entries.last().map(|e| e.position);
    for batch in &segment.batches {
        let due = last_position.is_none_or(|p| {
            batch.position > p && batch.position - p >= REBUILT_INDEX_SPACING_BYTES
        });
        if due {
            entries.push(IndexEntry {
                offset: batch.base_offset,
                timestamp: batch.timestamp,
                position: batch.position,
            });
            last_position = Some(batch.position);
        }
    }
    let action = Action::RewriteIndex {
        path: segment.index_path.clone(),
        entries: entries.clone(),
        why,
    };
    (entries, Some(action))
}

/// How many leading entries name a valid batch (position, offset, timestamp), in order.
fn agreeing_prefix(segment: &ScannedSegment, entries: &[IndexEntry]) -> usize {
    let mut previous_position = None;
    for (i, entry) in entries.iter().enumerate() {
        let agrees = segment
            .batches
            .binary_search_by_key(&entry.position, |b| b.position)
            .ok()
            .map(|i| segment.batches[i])
            .is_some_and(|b| b.base_offset == entry.offset && b.timestamp == entry.timestamp)
            && previous_position.is_none_or(|p| entry.position > p);
        if !agrees {
            return i;
        }
        previous_position = Some(entry.position);
    }
    entries.len()
}

/// Stored offsets after recovery:
///
/// | stored | decision |
/// |---|---|
/// | an offset at or below the recovered last offset | kept |
/// | an offset above it (a lost tail) | lowered to it, durably |
/// | an offset, the log now empty (nothing was ever appended) | deleted, durably |
///
/// An offset below the log start (retention deleted what it names) is kept: it reads as the
/// log start.
/// | a damaged file, `replicated` offsets | dropped, durably (an unsynced store may tear) |
/// | a damaged file, `persisted` offsets | kept as damaged: reported, never reset |
fn plan_offsets(
    survey: &Survey,
    last_offset: Option<u64>,
    actions: &mut Vec<Action>,
) -> BTreeMap<ConsumerId, StoredOffset> {
    let mut offsets = BTreeMap::new();
    let mut recorded = offset_set(survey.offsets.iter().map(|(c, _)| c));
    for (consumer, stored) in &survey.offsets {
        let consumer = *consumer;
        let path = consumer.path(&survey.dir);
        match stored {
            StoredOffset::Offset(offset) => match last_offset {
                Some(last) if *offset <= last => {
                    offsets.insert(consumer, StoredOffset::Offset(*offset));
                }
                Some(last) => {
                    actions.push(Action::LowerOffset {
                        consumer,
                        path,
                        from: *offset,
                        to: last,
                    });
                    offsets.insert(consumer, StoredOffset::Offset(last));
                }
                None => {
                    // Under `persisted` the set without it is recorded before the file goes,
                    // one deletion at a time: a crash leaves at most one file unrecorded.
                    let record = match survey.offset_durability {
                        Durability::Persisted => {
                            recorded = recorded.without(consumer.set_member());
                            Some(recorded)
                        }
                        Durability::Replicated => None,
                    };
                    actions.push(Action::DeleteOffset {
                        consumer,
                        path,
                        was: *offset,
                        record,
                    })
                }
            },
            StoredOffset::Damaged { why, .. }
                if survey.offset_durability == Durability::Replicated =>
            {
                actions.push(Action::DropDamagedOffset {
                    consumer,
                    path,
                    why: why.clone(),
                })
            }
            damaged => {
                offsets.insert(consumer, damaged.clone());
            }
        }
    }
    offsets
}

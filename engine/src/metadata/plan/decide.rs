//! The decide half of the metadata boot plan: what the survey's findings mean. Pure: no
//! disk, every function a table of cases. Cases are judged in the order of the table; the
//! first that matches decides. A refusal changes no byte (`cairn check` prints it); a repair
//! is a [`MetaAction`] that [`crate::metadata::MetadataPlane::open`] carries out.
//!
//! | # | finding | decision |
//! |---|---|---|
//! | 1 | a slot file of the wrong parity, or longer than one slot | refuse `SuperblockMisplaced` |
//! | 2 | no valid superblock record; no journal bytes, no snapshot, no slot file, no partition directory under `streams/` | first boot |
//! | 3 | no valid superblock record; nothing else either, but partition directories under `streams/` | refuse `DataWithoutMetadata` |
//! | 4 | no valid superblock record, and a slot file, journal bytes or a snapshot | refuse `NoSuperblock` |
//! | 5 | the newest record readable in one copy of its slot file only | keep it, rewrite both slots (`RewriteSlot`) |
//! | 6 | the other slot file damaged or missing | keep the newest record; the durable end is uncertain (rows 15, 16) |
//! | 7 | the record names no snapshot (op 0) | empty state; a leftover `snapshot.bin.tmp` is removed (`RemoveTempSnapshot`) |
//! | 8 | `snapshot.bin` matches the record | load it; a leftover temp is removed (`RemoveTempSnapshot`) |
//! | 9 | `snapshot.bin` other or absent, `snapshot.bin.tmp` matches | load the temp, finish the rename (`FinishSnapshot`) |
//! | 10 | neither matches, `snapshot.bin` absent | refuse `SnapshotMissing` |
//! | 11 | neither matches, `snapshot.bin` another snapshot | refuse `SnapshotMismatch` |
//! | 12 | the matching snapshot does not decode / holds another op, anchor or cluster | refuse `SnapshotUndecodable` / `SnapshotContradicts` |
//! | 13 | the journal shorter than the recorded durable end | refuse `JournalShorterThanDurable` |
//! | 14 | a damaged entry below the durable end | refuse `JournalCorrupt` |
//! | 15 | no entry ending at the durable end with the recorded op and checksum; ops out of order; a parent not the previous entry (or the snapshot's anchor); an op the snapshot holds below the durable end | refuse `JournalChainBroken` |
//! | 16 | an entry that does not decode or apply to the state before it | refuse `EntryDoesNotApply` |
//! | 17 | damage above the durable end, in ops the snapshot already holds (as every whole entry after it) | empty the journal (`TruncateJournal` from 0) |
//! | 18 | damage above the durable end followed by a whole entry written after the damaged op was durable (its commit number reaches the damaged op) | refuse `JournalInteriorCorruption` |
//! | 19 | damage above the durable end, nothing written after it, the other slot damaged or missing (row 6) | refuse `JournalUncertain` |
//! | 20 | damage above the durable end followed by nothing, or only by entries of the same write (a write torn sector by sector) | truncate at the damage (`TruncateJournal`: a torn tail) |
//! | 21 | whole entries above the durable end | keep them: the plane syncs, replays and records them |
//! | 22 | only entries the snapshot already holds (a checkpoint interrupted before it emptied the journal) | empty the journal (`TruncateJournal` from 0) |
//! | 23 | an `adopt.bin.tmp` (an adoption interrupted before it began) | remove it (`RemoveTempAdoption`) |
//! | 24 | an `adopt.bin` that does not verify, or names another cluster | refuse `AdoptionDamaged` |
//! | 25 | an `adopt.bin` at or below the last op (the checkpoint holds it) | remove it (`RemoveAdoption`) |
//! | 26 | an `adopt.bin` above the last op | boot finishes the adoption (`MetaPlan::adopting`) |
//!
//! A metadata file the device cannot read is refused `Unreadable` by the survey, before any
//! of these rows. Every op a caller was answered for lies below the recorded durable end
//! (the applied record is written before the answers), so a torn tail (row 20) never holds
//! an answered op.

use super::actions::{Adopting, MetaAction, MetaRefusal, Replayed};
use super::survey::{AdoptionFiles, Slot, SnapshotFiles};
use crate::env::DirEntry;
use crate::metadata::adoption as adopt_file;
use crate::metadata::journal::{self, Entry};
use crate::metadata::record::{JournalPoint, MetaRecord, SLOT_NAMES};
use crate::metadata::snapshot::{self, Snapshot};
use crate::state::ops::MetaOp;
use crate::state::{MetaState, OpContext};
use std::path::{Path, PathBuf};

/// The record boot trusts, and what the slots around it mean.
pub(super) struct Trusted {
    pub(super) record: MetaRecord,
    /// The other slot file, when it is damaged or missing (row 6).
    pub(super) uncertain: Option<PathBuf>,
    pub(super) notes: Vec<String>,
    pub(super) actions: Vec<MetaAction>,
}

/// What the two slots decide.
pub(super) enum Trust {
    /// Row 1.
    Misplaced(MetaRefusal),
    /// No valid record: rows 2-4 (see [`nothing_committed`], [`no_superblock`]).
    NoRecord,
    /// Rows 5, 6.
    Record(Trusted),
}

/// Rows 1, 5 and 6: the newest valid record of the two slots.
pub(super) fn trust(dir: &Path, slots: &[Slot; 2]) -> Trust {
    for (slot, read) in slots.iter().enumerate() {
        if let Slot::Misplaced(detail) = read {
            let path = dir.join(SLOT_NAMES[slot]);
            return Trust::Misplaced(MetaRefusal::SuperblockMisplaced {
                path,
                detail: detail.clone(),
            });
        }
    }
    let best = slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            Slot::Valid { record, .. } => Some((i, *record)),
            _ => None,
        })
        .max_by_key(|(_, r)| r.sequence);
    let Some((trusted_slot, record)) = best else {
        return Trust::NoRecord;
    };
    let mut notes = Vec::new();
    let other = 1 - trusted_slot;
    let uncertain = match &slots[other] {
        Slot::Valid { .. } => None,
        Slot::Missing => {
            notes.push(format!(
                "{} is missing",
                dir.join(SLOT_NAMES[other]).display()
            ));
            Some(dir.join(SLOT_NAMES[other]))
        }
        Slot::Problem(p) | Slot::Misplaced(p) => {
            notes.push(format!("{}: {p}", dir.join(SLOT_NAMES[other]).display()));
            Some(dir.join(SLOT_NAMES[other]))
        }
    };
    let mut actions = Vec::new();
    if let Slot::Valid { degraded: true, .. } = &slots[trusted_slot] {
        let path = dir.join(SLOT_NAMES[trusted_slot]);
        notes.push(format!(
            "{}: the newest record survives in one copy only",
            path.display()
        ));
        actions.push(MetaAction::RewriteSlot { path });
    }
    Trust::Record(Trusted {
        record,
        uncertain,
        notes,
        actions,
    })
}

/// Rows 2-4: with no valid record, whether nothing was ever committed (no slot file, no
/// journal bytes, no snapshot): a first boot unless partition data exists (row 3).
pub(super) fn nothing_committed(
    entries: &[DirEntry],
    slots: &[Slot; 2],
    journal_empty: bool,
) -> bool {
    let snapshot = entries
        .iter()
        .any(|e| e.name == snapshot::FILE || e.name == snapshot::TEMP);
    let slots_absent = slots.iter().all(|s| matches!(s, Slot::Missing));
    slots_absent && journal_empty && !snapshot
}

/// Row 4: the refusal when something was committed but no record is valid.
pub(super) fn no_superblock(dir: &Path, slots: &[Slot; 2]) -> MetaRefusal {
    let problems: Vec<String> = slots
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let name = SLOT_NAMES[i];
            match s {
                Slot::Missing => format!("{name} is missing"),
                Slot::Problem(p) | Slot::Misplaced(p) => format!("{name}: {p}"),
                Slot::Valid { .. } => unreachable!("no valid record"),
            }
        })
        .collect();
    MetaRefusal::NoSuperblock {
        dir: dir.to_path_buf(),
        problems: problems.join("; "),
    }
}

/// Rows 7-12: the state the record's snapshot holds (empty before the first checkpoint).
///
/// | record names | `snapshot.bin` | `snapshot.bin.tmp` | decision |
/// |---|---|---|---|
/// | no snapshot (op 0) | any | any | empty state; a leftover temp is removed |
/// | a snapshot | matches | absent or other | load it; a leftover temp is removed |
/// | a snapshot | other or absent | matches | load it, finish the rename |
/// | a snapshot | absent | absent | refuse `SnapshotMissing` |
/// | a snapshot | other | other or absent | refuse `SnapshotMismatch` |
pub(super) fn snapshot_state(
    dir: &Path,
    record: &MetaRecord,
    files: SnapshotFiles,
    actions: &mut Vec<MetaAction>,
) -> Result<MetaState, MetaRefusal> {
    let expected = record.snapshot;
    let matches = |bytes: &[u8]| {
        bytes.len() as u64 == expected.len && snapshot::checksum(bytes) == expected.checksum
    };
    let path = dir.join(snapshot::FILE);
    let SnapshotFiles { main, temp } = files;
    if expected.op == 0 {
        if temp.is_some() {
            actions.push(MetaAction::RemoveTempSnapshot);
        }
        return Ok(MetaState::default());
    }
    let main = main.transpose()?;
    let bytes = match (main, temp) {
        (Some(main), temp) if matches(&main) => {
            if temp.is_some() {
                actions.push(MetaAction::RemoveTempSnapshot);
            }
            main
        }
        (_, Some(temp)) if matches(&temp) => {
            actions.push(MetaAction::FinishSnapshot);
            temp
        }
        (None, _) => {
            return Err(MetaRefusal::SnapshotMissing {
                path,
                op: expected.op,
            })
        }
        (Some(main), _) => {
            return Err(MetaRefusal::SnapshotMismatch {
                path,
                expected,
                found_len: main.len() as u64,
                found_checksum: snapshot::checksum(&main),
            })
        }
    };
    let snapshot = match Snapshot::decode(&bytes) {
        Ok(snapshot) => snapshot,
        Err(error) => return Err(MetaRefusal::SnapshotUndecodable { path, error }),
    };
    if snapshot.op != expected.op
        || snapshot.anchor != expected.anchor
        || snapshot.cluster != record.cluster
    {
        return Err(MetaRefusal::SnapshotContradicts {
            path,
            detail: format!(
                "it holds op {} (anchor {:#x}, cluster {:#x}); the superblock names op {} (anchor {:#x}, cluster {:#x})",
                snapshot.op, snapshot.anchor, snapshot.cluster, expected.op, expected.anchor, record.cluster
            ),
        });
    }
    Ok(snapshot.state)
}

/// What the journal walk decided: the state after replay, and the repairs.
pub(super) struct Walk {
    pub(super) state: MetaState,
    pub(super) replayed: Vec<Replayed>,
    pub(super) end: u64,
    pub(super) last_op: u64,
    pub(super) last_checksum: u128,
    pub(super) actions: Vec<MetaAction>,
}

/// Rows 13-22, the journal against the record:
///
/// | finding | decision |
/// |---|---|
/// | shorter than the recorded durable end | refuse `JournalShorterThanDurable` |
/// | damage below the durable end | refuse `JournalCorrupt` |
/// | no entry ends at the durable end with the recorded op and checksum | refuse `JournalChainBroken` |
/// | entries out of order, or a parent that is not the previous entry | refuse `JournalChainBroken` |
/// | an entry that does not apply to the state before it | refuse `EntryDoesNotApply` |
/// | damage above the durable end | see [`judge_tail_damage`] |
/// | entries the snapshot already holds, above the durable end | truncate them (a checkpoint's leftovers) |
pub(super) fn walk_journal(
    path: &Path,
    bytes: &[u8],
    record: &MetaRecord,
    uncertain_slot: Option<&Path>,
    state: MetaState,
) -> Result<Walk, MetaRefusal> {
    let scan = journal::scan(bytes, record.cluster);
    check_durable_end(path, &scan, bytes.len() as u64, record.journal)?;
    let chain = replay_chain(path, &scan, record, state)?;
    let (actions, end) = tail_actions(path, &scan, &chain, uncertain_slot, bytes.len() as u64)?;
    Ok(Walk {
        state: chain.state,
        replayed: chain.replayed,
        end,
        last_op: chain.last_op,
        last_checksum: chain.last_checksum,
        actions,
    })
}

/// Rows 13-15: the journal holds the recorded durable end whole, and the entry ending
/// there is the one recorded.
fn check_durable_end(
    path: &Path,
    scan: &journal::Scan,
    file_len: u64,
    durable: JournalPoint,
) -> Result<(), MetaRefusal> {
    if file_len < durable.len {
        return Err(MetaRefusal::JournalShorterThanDurable {
            path: path.to_path_buf(),
            len: file_len,
            durable_len: durable.len,
        });
    }
    if let Some((position, problem)) = scan.damage.as_ref().filter(|(p, _)| *p < durable.len) {
        return Err(MetaRefusal::JournalCorrupt {
            path: path.to_path_buf(),
            position: *position,
            durable_len: durable.len,
            damage: problem.to_string(),
        });
    }
    let broken = |position: u64, detail: String| MetaRefusal::JournalChainBroken {
        path: path.to_path_buf(),
        position,
        detail,
    };
    // The entry ending at the durable end is the one recorded.
    if durable.len > 0 {
        let at_end = scan
            .entries
            .iter()
            .find(|e| e.position + e.len == durable.len);
        match at_end {
            Some(e) if e.op == durable.op && e.checksum == durable.last => {}
            Some(e) => {
                return Err(broken(
                    e.position,
                    format!(
                        "the entry ending at the durable end {} is op {} ({:#x}); the superblock records op {} ({:#x})",
                        durable.len, e.op, e.checksum, durable.op, durable.last
                    ),
                ))
            }
            None => {
                return Err(broken(
                    durable.len,
                    format!("no entry ends at the durable end {}", durable.len),
                ))
            }
        }
    }
    Ok(())
}

/// The valid entries replayed in order onto the snapshot's state.
struct Chain {
    state: MetaState,
    replayed: Vec<Replayed>,
    last_op: u64,
    last_checksum: u128,
    /// The end of the entries the snapshot already holds, if the journal starts with some.
    obsolete_end: Option<u64>,
    snapshot_op: u64,
}

/// Rows 15, 16: each entry follows the one before it (or the snapshot) and applies to the
/// state it leaves.
fn replay_chain(
    path: &Path,
    scan: &journal::Scan,
    record: &MetaRecord,
    mut state: MetaState,
) -> Result<Chain, MetaRefusal> {
    let durable = record.journal;
    let broken = |position: u64, detail: String| MetaRefusal::JournalChainBroken {
        path: path.to_path_buf(),
        position,
        detail,
    };
    let snapshot = record.snapshot;
    let mut previous: Option<&Entry> = None;
    let mut last_op = snapshot.op;
    let mut last_checksum = snapshot.anchor;
    let mut replayed = Vec::new();
    let mut obsolete_end = None;
    for entry in &scan.entries {
        if let Some(prev) = previous {
            if entry.op != prev.op + 1 || entry.parent != prev.checksum {
                return Err(broken(
                    entry.position,
                    format!(
                        "op {} (parent {:#x}) follows op {} ({:#x})",
                        entry.op, entry.parent, prev.op, prev.checksum
                    ),
                ));
            }
        }
        previous = Some(entry);
        if entry.op <= snapshot.op {
            // Already in the snapshot: left by a checkpoint interrupted before it emptied
            // the journal. Only ever a prefix, above the durable end.
            if entry.position < durable.len {
                return Err(broken(
                    entry.position,
                    format!(
                        "op {} lies below the durable end but the snapshot already holds it",
                        entry.op
                    ),
                ));
            }
            obsolete_end = Some(entry.position + entry.len);
            continue;
        }
        if entry.op == snapshot.op + 1 && entry.parent != snapshot.anchor {
            return Err(broken(
                entry.position,
                format!(
                    "op {} names parent {:#x}, the snapshot's anchor is {:#x}",
                    entry.op, entry.parent, snapshot.anchor
                ),
            ));
        }
        if entry.op != last_op + 1 {
            return Err(broken(
                entry.position,
                format!("op {} follows op {last_op}", entry.op),
            ));
        }
        let meta_op = MetaOp::decode(entry.operation, &entry.body).map_err(|e| {
            MetaRefusal::EntryDoesNotApply {
                path: path.to_path_buf(),
                position: entry.position,
                op: entry.op,
                error: format!("the body does not decode: {e}"),
            }
        })?;
        let decided = entry.origin.decided;
        if decided != 0 && decided <= state.decided() {
            return Err(MetaRefusal::EntryDoesNotApply {
                path: path.to_path_buf(),
                position: entry.position,
                op: entry.op,
                error: format!(
                    "its consensus decision {decided:#x} is not after the last applied {:#x}",
                    state.decided()
                ),
            });
        }
        let ctx = OpContext {
            op: entry.op,
            timestamp: entry.origin.timestamp,
            cluster: record.cluster,
            decided,
            proposal: entry.origin.key,
            asked_at: entry.origin.asked_at,
        };
        let applied = state
            .apply(&meta_op, ctx)
            .map_err(|e| MetaRefusal::EntryDoesNotApply {
                path: path.to_path_buf(),
                position: entry.position,
                op: entry.op,
                error: e.to_string(),
            })?;
        replayed.push(Replayed {
            op: entry.op,
            position: entry.position,
            meta_op,
            applied,
        });
        last_op = entry.op;
        last_checksum = entry.checksum;
    }
    Ok(Chain {
        state,
        replayed,
        last_op,
        last_checksum,
        obsolete_end,
        snapshot_op: snapshot.op,
    })
}

/// Rows 17-22: damage above the durable end (see [`judge_tail_damage`]), and entries the
/// snapshot already holds. Returns the repairs and where the journal then ends.
fn tail_actions(
    path: &Path,
    scan: &journal::Scan,
    chain: &Chain,
    uncertain_slot: Option<&Path>,
    file_len: u64,
) -> Result<(Vec<MetaAction>, u64), MetaRefusal> {
    let mut actions = Vec::new();
    let mut end = scan.valid_end;
    if let Some((position, problem)) = &scan.damage {
        let damaged_op = scan.entries.last().map_or(chain.snapshot_op, |e| e.op) + 1;
        let refusal = |later: journal::Later| MetaRefusal::JournalInteriorCorruption {
            path: path.to_path_buf(),
            position: *position,
            later_entry: later.position,
            damage: problem.to_string(),
        };
        match judge_tail_damage(
            damaged_op,
            chain.snapshot_op,
            &scan.later,
            uncertain_slot.is_some(),
        ) {
            TailDamage::InSnapshot => {
                actions.push(MetaAction::TruncateJournal {
                    from: 0,
                    len: file_len,
                    why: format!(
                        "damage at {position} lies in entries the snapshot already holds ({problem})"
                    ),
                });
                return Ok((actions, 0));
            }
            TailDamage::WrittenAfter(later) => return Err(refusal(later)),
            TailDamage::Uncertain => {
                return Err(MetaRefusal::JournalUncertain {
                    path: path.to_path_buf(),
                    position: *position,
                    damage: problem.to_string(),
                    slot: uncertain_slot.expect("judged uncertain").to_path_buf(),
                })
            }
            TailDamage::Torn => {
                actions.push(MetaAction::TruncateJournal {
                    from: *position,
                    len: file_len,
                    why: format!("torn tail above the durable end ({problem})"),
                });
                end = *position;
            }
        }
    }
    if let Some(obsolete) = chain.obsolete_end.filter(|_| chain.replayed.is_empty()) {
        // Everything the journal holds is in the snapshot: empty it.
        actions.retain(|a| !matches!(a, MetaAction::TruncateJournal { .. }));
        actions.push(MetaAction::TruncateJournal {
            from: 0,
            len: file_len,
            why: format!("its entries up to {obsolete} are already in the snapshot"),
        });
        end = 0;
    }
    Ok((actions, end))
}

/// What damage above the durable end is, the entry it stopped the walk at being op
/// `damaged_op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TailDamage {
    /// The damage and every whole entry after it are ops the snapshot already holds: a
    /// checkpoint's leftovers, cut whole.
    InSnapshot,
    /// A whole entry written after the damaged op was durable follows it (its commit number
    /// reaches the damaged op): the damage is in bytes a sync had returned for.
    WrittenAfter(journal::Later),
    /// The other superblock slot is damaged or missing: the durable end itself may be older
    /// than the newest record, so the damage may be in ops that were answered.
    Uncertain,
    /// A torn last write: nothing after the damage but entries of that same write (their
    /// commit number is below the damaged op), none of them ever durable or answered.
    Torn,
}

/// | the damaged op and every later entry's | a later whole entry with commit ≥ the damaged op | other slot | verdict |
/// |---|---|---|---|
/// | ≤ the snapshot's op | any | any | `InSnapshot`: empty the journal |
/// | above | yes | any | `WrittenAfter`: refuse `JournalInteriorCorruption` |
/// | above | no | damaged or missing | `Uncertain`: refuse `JournalUncertain` |
/// | above | no | valid | `Torn`: truncate at the damage |
fn judge_tail_damage(
    damaged_op: u64,
    snapshot_op: u64,
    later: &[journal::Later],
    other_slot_uncertain: bool,
) -> TailDamage {
    let in_snapshot = damaged_op <= snapshot_op && later.iter().all(|l| l.op <= snapshot_op);
    match (
        in_snapshot,
        later.iter().find(|l| l.commit >= damaged_op),
        other_slot_uncertain,
    ) {
        (true, _, _) => TailDamage::InSnapshot,
        (false, Some(later), _) => TailDamage::WrittenAfter(*later),
        (false, None, true) => TailDamage::Uncertain,
        (false, None, false) => TailDamage::Torn,
    }
}

/// Rows 23-26: a state being adopted, against the last op after the journal's replay.
pub(super) fn adoption(
    dir: &Path,
    record: &MetaRecord,
    found: AdoptionFiles,
    last_op: u64,
    actions: &mut Vec<MetaAction>,
) -> Result<Option<Adopting>, MetaRefusal> {
    if found.temp {
        actions.push(MetaAction::RemoveTempAdoption);
    }
    let Some(bytes) = found.file.transpose()? else {
        return Ok(None);
    };
    let path = dir.join(adopt_file::FILE);
    let damaged = |error: String| MetaRefusal::AdoptionDamaged {
        path: path.clone(),
        error,
    };
    let snapshot = adopt_file::decode(&bytes).map_err(damaged)?;
    if snapshot.cluster != record.cluster {
        return Err(damaged(format!(
            "it was made for cluster {:#x}, the superblock names {:#x}",
            snapshot.cluster, record.cluster
        )));
    }
    if snapshot.op <= last_op {
        actions.push(MetaAction::RemoveAdoption);
        return Ok(None);
    }
    Ok(Some(Adopting {
        op: snapshot.op,
        anchor: snapshot.anchor,
        state: snapshot.state,
    }))
}

//! Invariants 1, 2 and 3 on what the engine serves: each runtime reply (exact bytes, where
//! it starts, what it must hold) and a full read from offset 0 (at runtime and after a
//! restart).

use super::super::walk::{self, View};
use super::{damage_in, Model, ReadMessage, Sent};
use crate::report::{violation, Checked, INV_EXACT, INV_NO_LOSS, INV_PREFIX};
use cairn_engine::partition::PollFrom;
use cairn_faults::{Damage, FaultKind, SimDisk};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

// ---------------------------------------------------------------------------------------
// Invariant 3: no phantoms, exact bytes.
// ---------------------------------------------------------------------------------------

/// **Invariant 3** on one reply: every message was sent by a producer, byte for byte, to this
/// partition; offsets are consecutive and timestamps never go backwards; the reply holds at
/// most `count` messages. Allows: with `validate_checksum` off, a message whose bytes differ
/// when a fault still present in a log file of the partition damaged it (the configuration
/// serves "whatever decodes").
pub fn check_exact(
    model: &Model,
    messages: &[ReadMessage],
    sent: &BTreeMap<u128, Sent>,
    count: u32,
    disk: &SimDisk,
) -> Checked<()> {
    let p = model.index;
    let max = count.min(model.settings.max_poll_messages) as usize;
    if messages.len() > max {
        return Err(violation(
            INV_EXACT,
            format!(
                "partition {p}: a reply holds {} messages, more than the {max} asked",
                messages.len()
            ),
        ));
    }
    for pair in messages.windows(2) {
        if pair[1].offset != pair[0].offset + 1 {
            return Err(violation(
                INV_PREFIX,
                format!(
                    "partition {p}: a reply jumps from offset {} to {}",
                    pair[0].offset, pair[1].offset
                ),
            ));
        }
        if pair[1].timestamp < pair[0].timestamp {
            return Err(violation(
                INV_EXACT,
                format!(
                    "partition {p}: timestamps go backwards at offset {}",
                    pair[1].offset
                ),
            ));
        }
    }
    let damaged_allowed = !model.settings.validate_checksum
        && walk::walk_partition(disk, &model.dir, model.partition_id, View::Cache)
            .iter()
            .any(|log| damage_in(disk, &log.path, 0..u64::MAX, true).is_some());
    for m in messages {
        let original = sent.get(&m.id);
        let exact = original.is_some_and(|o| o.payload == m.payload && o.headers == m.headers);
        if !exact && damaged_allowed {
            continue;
        }
        let Some(_) = original else {
            return Err(violation(
                INV_EXACT,
                format!(
                    "partition {p}: offset {} holds message {:#x} that no producer sent",
                    m.offset, m.id
                ),
            ));
        };
        if !exact {
            return Err(violation(
                INV_EXACT,
                format!(
                    "partition {p}: message {:#x} at offset {} differs from what was sent",
                    m.id, m.offset
                ),
            ));
        }
        match model.log.get(&m.offset) {
            Some(known) if *known != m.id => {
                return Err(violation(
                    INV_PREFIX,
                    format!(
                        "partition {p}: offset {} holds {:#x}, acknowledged as {known:#x}",
                        m.offset, m.id
                    ),
                ))
            }
            Some(_) => {}
            None if model.unknown.contains(&m.id) || model.positions.contains_key(&m.id) => {}
            None if model.pending.iter().any(|(_, ids)| ids.contains(&m.id)) => {}
            None => {
                return Err(violation(
                    INV_EXACT,
                    format!(
                    "partition {p}: offset {} holds {:#x}, which was not sent here or was refused",
                    m.offset, m.id
                ),
                ))
            }
        }
    }
    Ok(())
}

/// **Read committed** on one runtime reply of a `persisted` partition: a poll serves durable
/// messages only (what a crash may take back is not visible), so a message that waits for a
/// persist is served only below the durable end the engine holds (a segment sealed on the
/// way may have made it durable before its persist).
pub fn check_visible(model: &Model, messages: &[ReadMessage], durable_end: u64) -> Checked<()> {
    if !model.persisted() {
        return Ok(());
    }
    let waiting = |m: &ReadMessage| model.pending.iter().any(|(_, ids)| ids.contains(&m.id));
    match messages.iter().find(|m| m.offset >= durable_end && waiting(m)) {
        Some(m) => Err(violation(INV_NO_LOSS, format!("partition {}: a poll served offset {} ({:#x}), which waits for a persist above the durable end {durable_end}: not durable, not visible", model.index, m.offset, m.id))),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// Invariant 1 and 2 at runtime: what a poll must return.
// ---------------------------------------------------------------------------------------

/// Where a poll from `from` must start, if the model can tell (`None`: no requirement).
pub fn expected_start(model: &Model, from: PollFrom, count: u32) -> Option<BTreeSet<u64>> {
    let visible = model.visible_end();
    let start = model.log_start;
    match from {
        PollFrom::Offset(o) => Some(BTreeSet::from([o.max(start)])),
        PollFrom::First => Some(BTreeSet::from([start])),
        PollFrom::Last => Some(BTreeSet::from([visible
            .saturating_sub(u64::from(count))
            .max(start)])),
        PollFrom::Next(consumer) => Some(
            model
                .offsets
                .get(&consumer)
                .cloned()
                .unwrap_or_default()
                .now
                .iter()
                .map(|v| v.map_or(0, |v| v + 1).max(start))
                .collect(),
        ),
        PollFrom::Timestamp(t) => {
            // Only when every visible batch is known, from the log start on, with its stamp.
            let mut next = start;
            for (base, batch) in model.batches.range(start..visible) {
                let ts = batch.timestamp.filter(|_| *base == next)?;
                if ts >= t {
                    return Some(BTreeSet::from([*base]));
                }
                next = base + u64::from(batch.count);
            }
            (next >= visible).then(|| BTreeSet::from([visible]))
        }
    }
}

/// **Invariants 1 and 2** on one runtime reply (no crash since the last check): it starts
/// where `from` says, and holds every visible message from there up to `count`, except:
/// - the byte budget (`max_poll_bytes`: a reply with something in it stops before a stored
///   batch that would pass it);
/// - a fault still present that reads see, in the log file holding the first message not
///   returned, in the bytes of the batch where an independent walk of that file stops.
///
/// Under `persisted` nothing above the durable end may be shown (E2): a message not
/// acknowledged durable that a reply holds must lie below the engine's durable point when
/// the poll began (`durable_before`), and is from then on owed as acknowledged.
/// What one poll asked and got.
pub struct Reply<'a> {
    pub from: PollFrom,
    pub count: u32,
    pub messages: &'a [ReadMessage],
    /// Bytes of the reply's batches.
    pub bytes: u64,
    /// The last visible offset the reply reports.
    pub current_offset: Option<u64>,
    /// The engine's durable next offset when the poll began.
    pub durable_before: u64,
}

pub fn check_reply(model: &mut Model, reply: &Reply<'_>, disk: &SimDisk) -> Checked<()> {
    let Reply {
        from,
        count,
        messages,
        bytes: reply_bytes,
        current_offset,
        durable_before,
    } = *reply;
    let p = model.index;
    // The visible end the engine reports: never behind what was acknowledged, and under
    // `persisted` never beyond the durable end.
    // Nothing visible: the log holds nothing from its start on.
    let engine_visible = current_offset.map_or(model.log_start, |c| c + 1);
    if engine_visible < model.visible_end() {
        return Err(violation(INV_NO_LOSS, format!("partition {p}: a poll reports the last offset {current_offset:?}, below the acknowledged {}", model.visible_end())));
    }
    let shown = messages
        .last()
        .map_or(0, |m| m.offset + 1)
        .max(engine_visible);
    if model.persisted() && shown > model.durable_end {
        let durable = durable_before;
        if shown > durable {
            return Err(violation(INV_NO_LOSS, format!("partition {p}: a persisted topic showed offsets up to {shown} before they were durable (durable end {durable})")));
        }
        model.settle_covered(durable)?;
        model.durable_through(durable);
    }
    let from = match from {
        // The model cannot tell whether a provisional append became durable on the way.
        PollFrom::Last => PollFrom::Offset(engine_visible.saturating_sub(u64::from(count))),
        other => other,
    };
    let Some(starts) = expected_start(model, from, count) else {
        return Ok(());
    };
    let visible = model.visible_end();
    let Some(first) = messages.first() else {
        // Nothing returned is complete when the poll may start at the visible end (a `Next`
        // after a failed store has two values to start from, one of them may be there).
        if starts.iter().any(|&start| start >= visible) {
            return Ok(());
        }
        let start = starts.iter().copied().min().unwrap_or(0);
        return excuse_short_read(model, from, start, 0, disk);
    };
    if !starts.contains(&first.offset) {
        return Err(violation(
            INV_PREFIX,
            format!(
                "partition {p}: poll {from:?} started at offset {}, expected one of {starts:?}",
                first.offset
            ),
        ));
    }
    let max = u64::from(count.min(model.settings.max_poll_messages));
    let wanted_end = first.offset.saturating_add(max).min(visible);
    let got_end = first.offset + messages.len() as u64;
    if got_end >= wanted_end {
        return Ok(());
    }
    let budget_stop = model
        .stored_bytes(got_end)
        .is_none_or(|next| reply_bytes + next > model.settings.max_poll_bytes);
    if budget_stop {
        return Ok(());
    }
    excuse_short_read(model, from, got_end, reply_bytes, disk)
}

/// A reply stopped before `missing`: allowed only where the oracle's own walk of the file
/// holding it stops too, on a fault still present that reads see.
fn excuse_short_read(
    model: &Model,
    from: PollFrom,
    missing: u64,
    _reply_bytes: u64,
    disk: &SimDisk,
) -> Checked<()> {
    let p = model.index;
    let fail = |why: String| {
        Err(violation(INV_NO_LOSS, format!("partition {p}: poll {from:?} stopped before offset {missing} (visible end {}, flushed end {}): {why}", model.visible_end(), model.flushed_end)))
    };
    if missing >= model.flushed_end {
        return fail("it is in the journal, which a read cannot fail".into());
    }
    let logs = walk::walk_partition(disk, &model.dir, model.partition_id, View::Cache);
    let Some(log) = logs.iter().rfind(|l| l.start_offset <= missing) else {
        return fail("no log file holds it".into());
    };
    if let Some(batch) = log.batch_holding(missing) {
        // Valid on disk: only an unreadable sector elsewhere in the engine's read window or
        // an index entry could stop the engine; neither is excused.
        return fail(format!(
            "{} holds it intact at position {}",
            log.path.display(),
            batch.position
        ));
    }
    // The walk stops at a batch that does not verify, or the file ends (bytes missing).
    let window = log.stop.clone().unwrap_or(log.file_len..u64::MAX);
    match damage_in(disk, &log.path, window.clone(), true) {
        Some(_) => Ok(()),
        None => fail(format!(
            "the walk of {} stops at {window:?} with no fault present there",
            log.path.display()
        )),
    }
}

// ---------------------------------------------------------------------------------------
// Invariants 1, 2, 3 on a full read.
// ---------------------------------------------------------------------------------------

/// **Invariants 1, 2 and 3** on a full read of the partition from offset 0.
///
/// Always: gapless from 0, no duplicates, every message exact (invariant 3), and every
/// offset holding the message it was acknowledged for (2).
///
/// At runtime (no restart since the last check): the read reaches every visible message,
/// except where a fault still present that reads see stops it (as for a poll).
///
/// After a restart (`after_restart`):
/// - invariant 1: the log reaches every offset acknowledged durable; the only allowance is a
///   power loss that undid a lying sync of the superblock (its slot held lied pages): then
///   down to the durable end of the newest record that was honestly synced, and never after
///   a process crash;
/// - invariant 2: after a process crash the log reaches every offset that was flushed (the
///   page cache survives), unless a fault present when recovery looked lies in the file that
///   held the first lost offset, at or after its position (the oracle's own walk at the
///   crash says where); what is lost is a suffix, and the model forgets it.
pub fn check_full(
    model: &mut Model,
    all: &[ReadMessage],
    log_start: u64,
    sent: &BTreeMap<u128, Sent>,
    after_restart: bool,
    disk: &SimDisk,
) -> Checked<()> {
    let p = model.index;
    if log_start != model.log_start {
        if model.log_start_pending != Some(log_start) {
            return Err(violation(INV_PREFIX, format!("partition {p}: the log starts at {log_start}, but retention deleted only below {} (a deletion in flight could have reached {:?})", model.log_start, model.log_start_pending)));
        }
        model.advance_log_start(log_start)?;
    }
    model.log_start_pending = None;
    for (i, m) in all.iter().enumerate() {
        if m.offset != log_start + i as u64 {
            return Err(violation(
                INV_PREFIX,
                format!(
                    "partition {p}: the log is not gapless from its start {log_start}: position {i} holds offset {}",
                    m.offset
                ),
            ));
        }
    }
    if after_restart && model.power_lost {
        adopt_resurrected(model, all, disk);
    }
    check_exact(model, all, sent, u32::MAX, disk)?;
    let mut ids = BTreeSet::new();
    for m in all {
        if !ids.insert(m.id) {
            return Err(violation(
                INV_PREFIX,
                format!("partition {p}: message {:#x} appears twice", m.id),
            ));
        }
    }
    let end = log_start + all.len() as u64;
    if !after_restart {
        if end < model.visible_end() {
            excuse_short_read(model, PollFrom::First, end, 0, disk)?;
        }
        model.learn_batches(all);
        return Ok(());
    }
    let required = match model.rewind_floor {
        Some(floor) => model.durable_end.min(floor),
        None => model.durable_end,
    };
    if end < required {
        let lost: Vec<u64> = model
            .log
            .range(end..required)
            .map(|(o, _)| *o)
            .take(5)
            .collect();
        return Err(violation(INV_NO_LOSS, format!("partition {p}: after recovery the log ends at {end}, but offsets up to {required} were acknowledged durable (acknowledged durable end {}, rewind allowed to {:?}; first lost: {lost:?})", model.durable_end, model.rewind_floor)));
    }
    if let Some(flushed) = model.flushed_floor.filter(|&f| end < f) {
        if flushed_loss_excuse(model, end).is_none() {
            return Err(violation(INV_PREFIX, format!("partition {p}: after a process crash the log ends at {end}, but offsets up to {flushed} had been flushed (the page cache survives a process crash) and no fault present in the bytes that held them explains the loss")));
        }
    }
    // What is gone is a suffix: forget it, learn what the unknown outcomes became.
    let lost: Vec<u64> = model.log.range(end..).map(|(o, _)| *o).collect();
    let mut rewound = BTreeMap::new();
    for offset in lost {
        if let Some(id) = model.log.remove(&offset) {
            model.positions.remove(&id);
            rewound.insert(offset, id);
        }
    }
    if !rewound.is_empty() {
        model.rewound = rewound;
        model.rewound_since = model.checked_records;
    }
    model.checked_records = disk.record_count();
    model
        .batches
        .retain(|base, b| base + u64::from(b.count) <= end);
    for m in all {
        model.place(m.offset, m.id)?;
    }
    model.learn_batches(all);
    for (base, ids) in std::mem::take(&mut model.pending) {
        if !model.log.contains_key(&base) {
            model.batches.remove(&base);
        }
        model.unknown.extend(ids);
    }
    model.durable_end = end;
    model.acked_end = end;
    model.flushed_end = end;
    model.flushed_floor = None;
    model.crash_walk = None;
    model.rewind_floor = None;
    Ok(())
}

/// After a power loss: the messages of `all` above the durable end that the model does not
/// hold at their offset (it holds another message acknowledged there since, or nothing: no
/// append reached that offset since, or only one whose outcome is unknown), where the last
/// recovery's rewind forgot exactly this one at this offset and a lying sync of the log
/// holding that offset since that recovery began was undone by the power loss (the
/// recovery's truncation did not last: the truncated batches came back whole, and nothing can
/// tell them from new ones). The model adopts each: a message acknowledged there since (never
/// durable) is lost, as a power loss may lose it.
fn adopt_resurrected(model: &mut Model, all: &[ReadMessage], disk: &SimDisk) {
    let start_of = |path: &Path| -> Option<u64> {
        let in_dir = path.starts_with(&model.dir) && path.extension().is_some_and(|e| e == "log");
        in_dir.then(|| path.file_stem()?.to_str()?.parse().ok())?
    };
    let lied: BTreeSet<u64> = disk
        .records()
        .iter()
        .skip(model.rewound_since)
        .filter(|r| r.kind == FaultKind::LyingSync)
        .filter_map(|r| start_of(r.path.as_deref()?))
        .collect();
    if lied.is_empty() {
        return;
    }
    // The log holding an offset: the one starting last at or below it.
    let starts: BTreeSet<u64> = disk
        .paths_under(&model.dir)
        .iter()
        .filter_map(|p| start_of(p))
        .collect();
    for m in all {
        let holder = starts.range(..=m.offset).next_back();
        let stale = m.offset >= model.durable_end
            && holder.is_some_and(|start| lied.contains(start))
            && model.rewound.get(&m.offset) == Some(&m.id)
            && model.log.get(&m.offset) != Some(&m.id);
        if !stale {
            continue;
        }
        if let Some(known) = model.log.insert(m.offset, m.id) {
            model.positions.remove(&known);
        }
        model.positions.insert(m.id, m.offset);
        model
            .batches
            .retain(|base, b| !(*base..base + u64::from(b.count)).contains(&m.offset));
    }
}

/// Damage seen since the crash in the log that held offset `lost` (at or after the batch
/// holding it), or in a later log.
fn flushed_loss_excuse(model: &Model, lost: u64) -> Option<&Damage> {
    let walk = model.crash_walk.as_ref()?;
    let holder = walk.iter().rposition(|w| w.start_offset <= lost)?;
    let from = walk[holder]
        .batch_holding(lost)
        .map_or(walk[holder].valid_end(), |b| b.position);
    walk[holder..].iter().enumerate().find_map(|(i, log)| {
        let start = if i == 0 { from } else { 0 };
        model
            .damage_seen
            .get(&log.path)?
            .iter()
            .find(|d| d.range.end.max(d.range.start + 1) > start)
    })
}

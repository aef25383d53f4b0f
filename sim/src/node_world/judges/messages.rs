//! Judging sends, polls, offset stores and group assignments: an acknowledged send lands in
//! the model at its offsets (durable first if `persisted`), a poll returns only sent
//! messages, gapless, never below the log start; a store is acknowledged or excused; a
//! group's members and assignments are exactly the model's.

use super::super::model;
use super::super::{GroupInc, Holder, NodeWorld, INV_CALLERS, INV_RETENTION};
use super::Start;
use crate::partition_world::decode;
use crate::report::{violation, Checked, INV_LIVENESS, INV_OFFSETS, INV_PREFIX};
use cairn_engine::node::{NodeError, NodeResult, PartitionKey};
use cairn_engine::partition::{PartitionError, PartitionIdentity, Polled};
use std::collections::BTreeMap;
use std::collections::BTreeSet;

impl NodeWorld {
    /// The op that made `identity`, if the newest superblock record (in the page cache)
    /// names it journaled but not applied: a partition an op creates serves only once the
    /// op is recorded applied, so a removal of its directory afterwards fences it rather
    /// than let boot redo the creation empty over acknowledged messages.
    fn created_by_unapplied_op(&self, identity: PartitionIdentity) -> Option<u64> {
        if self.disk.is_crashed() || !self.is_up() {
            return None;
        }
        let record =
            crate::node_world::oracle::newest_slot_record(|path| self.disk.contents(path))?;
        let key = crate::node_world::key(&identity);
        (record.applied_op + 1..=record.journal.op)
            .find(|op| model::nonce(self.cluster, *op, key) == identity.nonce)
    }

    pub(crate) fn judge_send(
        &mut self,
        s: u32,
        t: u32,
        ids: &[u128],
        started: Start,
        result: NodeResult<cairn_engine::node::Sent>,
    ) -> Checked<()> {
        match result {
            Ok(sent) => {
                let identity = PartitionIdentity {
                    stream_id: s,
                    topic_id: t,
                    partition_id: sent.partition,
                    nonce: sent.nonce,
                };
                if let Some(op) = self.created_by_unapplied_op(identity) {
                    return Err(violation(
                        INV_CALLERS,
                        format!("a send to {identity} was answered while op {op}, which made that incarnation, was journaled but not yet recorded applied"),
                    ));
                }
                let now = self.now();
                let part = self.parts.entry(identity).or_default();
                if part.persisted() && !sent.ack.durable {
                    return Err(violation(
                        INV_CALLERS,
                        format!(
                            "a persisted send to {identity} was answered before it was durable"
                        ),
                    ));
                }
                for (i, id) in ids.iter().enumerate() {
                    part.messages.insert(sent.ack.base_offset + i as u64, *id);
                }
                part.batches
                    .insert(sent.ack.base_offset, (ids.len() as u32, sent.ack.timestamp));
                part.last_ack = now;
                self.report.acked_messages += ids.len() as u64;
                self.trace.event(format!(
                    "send {identity} -> offsets {}..{}",
                    sent.ack.base_offset,
                    sent.ack.base_offset + ids.len() as u64
                ));
                Ok(())
            }
            Err(e) if self.excused(&e, s, t, started) => {
                self.trace.event(format!("send {s}/{t} failed: {e}"));
                Ok(())
            }
            Err(e) => Err(violation(
                INV_LIVENESS,
                format!("a send to {s}/{t} failed with no fault: {e}"),
            )),
        }
    }

    /// The log starts of a topic's partitions as a poll sent now must respect: the cleaners'
    /// deletions so far drained and judged first, so that a deletion made before the poll
    /// was sent counts, and one the shard made after serving it (its reply still on the way)
    /// does not.
    pub(crate) fn log_starts_at_send(
        &mut self,
        stream: u32,
        topic: u32,
    ) -> Checked<BTreeMap<PartitionIdentity, u64>> {
        self.drain_deletions()?;
        Ok(self
            .parts
            .iter()
            .filter(|(id, _)| id.stream_id == stream && id.topic_id == topic)
            .map(|(id, part)| (*id, part.log_start))
            .collect())
    }

    /// A poll's messages against the model: sent by someone, gapless, the acknowledged one
    /// at each known offset, none below the log start known when it was sent (`starts`,
    /// from [`Self::log_starts_at_send`]; an incarnation made since starts at 0).
    pub(crate) fn judge_polled(
        &mut self,
        identity: PartitionIdentity,
        polled: &Polled,
        starts: &BTreeMap<PartitionIdentity, u64>,
    ) -> Checked<()> {
        let messages = decode(polled, true)?;
        let part = self.parts.get(&identity).cloned().unwrap_or_default();
        let mut previous: Option<u64> = None;
        for m in &messages {
            if !self.sent_ids.contains(&m.id) {
                return Err(violation(
                    crate::report::INV_EXACT,
                    format!("partition {identity}: a poll returned message {:#x}, which no producer sent", m.id),
                ));
            }
            if previous.is_some_and(|p| m.offset != p + 1) {
                return Err(violation(
                    INV_PREFIX,
                    format!(
                        "partition {identity}: a poll skipped from {previous:?} to {}",
                        m.offset
                    ),
                ));
            }
            previous = Some(m.offset);
            let log_start = starts.get(&identity).copied().unwrap_or(0);
            if m.offset < log_start && !part.log_start_unknown {
                return Err(violation(
                    INV_RETENTION,
                    format!(
                        "partition {identity}: a poll served offset {} below the log start {log_start} known when it was sent",
                        m.offset
                    ),
                ));
            }
            if let Some(id) = part.messages.get(&m.offset) {
                if *id != m.id {
                    return Err(violation(INV_PREFIX, format!("partition {identity}: a poll read {:#x} at offset {}, acknowledged for {id:#x}", m.id, m.offset)));
                }
            }
        }
        // Read committed: under `persisted` a poll serves durable messages only, so what it
        // read is kept like an acknowledgement (no crash may take it back).
        if part.persisted() {
            let kept = &mut self.parts.entry(identity).or_default().messages;
            for m in &messages {
                kept.entry(m.offset).or_insert(m.id);
            }
        }
        Ok(())
    }

    /// Why a store below the acknowledged end may find it past the partition's end: the
    /// partition is `replicated` (acknowledged before flushed, lost at a crash), a metadata
    /// op may have replaced it meanwhile, or retention left no message (the active segment
    /// empty) at or after the offset. Under `persisted` with none of these, the durable end
    /// went backwards.
    fn beyond_end_excused(&mut self, identity: PartitionIdentity, started: Start) -> bool {
        if self.names_moved(started) {
            return true;
        }
        // The cleaner's latest deletions tell where the log starts now.
        if let Err(v) = self.drain_deletions() {
            self.fail(v);
            return true;
        }
        let Some(part) = self.parts.get(&identity) else {
            return true;
        };
        !part.persisted() || part.log_start_unknown || part.acked_end() <= part.log_start
    }

    /// A store that may have happened while a metadata op ran: it may have landed in the
    /// incarnation at `key` now, or in one a later-adopted op makes there.
    fn raced_store(
        &mut self,
        key: PartitionKey,
        planned: PartitionIdentity,
        holder: Holder,
        offset: u64,
    ) {
        if self.racing_stores.len() >= crate::node_world::MAX_RACING_STORES {
            self.racing_stores.pop_front();
        }
        self.racing_stores.push_back((key, holder, offset));
        if let Some(current) = self.model.identity(self.cluster, key) {
            if current != planned {
                self.store_candidate(current, holder, offset);
            }
        }
    }

    /// `offset` may be what `holder`'s offset reads in `identity`.
    pub(crate) fn store_candidate(
        &mut self,
        identity: PartitionIdentity,
        holder: Holder,
        offset: u64,
    ) {
        self.parts
            .entry(identity)
            .or_default()
            .offsets
            .entry(holder)
            .or_insert((None, BTreeSet::new()))
            .1
            .insert(Some(offset));
    }

    /// A group poll's auto-commit of `last` in `identity`, for group incarnation `group`,
    /// stored before the poll was answered. When the model still has that incarnation, the
    /// store is acknowledged. When the model adopted the group's deletion while the poll ran
    /// (the deletion's answer promised its removal of the group's offsets done), the
    /// commit either landed before that removal, which took it, or must not have landed at
    /// all: the deleted incarnation gets no offset back in the model, and while no group of
    /// that id exists again, no offset file of that id may be in the partition (a commit
    /// after the removal would leave one, for the next group created under the id).
    pub(crate) fn judge_auto_commit(
        &mut self,
        identity: PartitionIdentity,
        group: GroupInc,
        last: u64,
    ) -> Checked<()> {
        let (s, t, g, incarnation) = group;
        let holder = Holder::Group { id: g, incarnation };
        let live = self
            .model
            .topic(s, t)
            .and_then(|topic| topic.groups.get(&g))
            .map(|(_, i)| *i);
        if live == Some(incarnation) {
            let part = self.parts.entry(identity).or_default();
            let durable = part.offsets_persisted();
            let entry = part
                .offsets
                .entry(holder)
                .or_insert((None, BTreeSet::new()));
            acknowledge_store(entry, last, durable);
            return Ok(());
        }
        self.decision("AutoCommitRacedGroupDeletion");
        if live.is_some()
            || self
                .model
                .identity(self.cluster, crate::node_world::key(&identity))
                != Some(identity)
        {
            // A group of that id exists again (its own offsets are judged as its own), or
            // the partition went with its topic.
            return Ok(());
        }
        let dir = cairn_engine::partition::partition_dir(
            std::path::Path::new(crate::node_world::NODE_ROOT),
            s,
            t,
            identity.partition_id,
        );
        let file = cairn_engine::partition::offsets::ConsumerId::group(g).path(&dir);
        if self.disk.paths_under(&dir).contains(&file) {
            return Err(violation(
                INV_OFFSETS,
                format!("partition {identity}: a poll's auto-commit of offset {last} into group {s}/{t}/{g} (incarnation {incarnation}), which was deleted while the poll ran, left {} after the deletion removed the group's offsets", file.display()),
            ));
        }
        Ok(())
    }

    pub(crate) fn judge_store(
        &mut self,
        key: PartitionKey,
        identity: PartitionIdentity,
        holder: Holder,
        offset: u64,
        started: Start,
        result: NodeResult<()>,
    ) -> Checked<()> {
        let excused = match &result {
            Ok(()) => true,
            Err(e) => self.excused(e, key.0, key.1, started),
        };
        if excused && self.names_moved(started) {
            self.raced_store(key, identity, holder, offset);
        }
        let part = self.parts.entry(identity).or_default();
        let durable = part.offsets_persisted();
        let entry = part
            .offsets
            .entry(holder)
            .or_insert((None, BTreeSet::new()));
        match result {
            Ok(()) => {
                acknowledge_store(entry, offset, durable);
                Ok(())
            }
            Err(_) if excused => {
                entry.1.insert(Some(offset));
                Ok(())
            }
            Err(NodeError::Partition(PartitionError::OffsetBeyondEnd { .. }))
                if self.beyond_end_excused(identity, started) =>
            {
                Ok(())
            }
            Err(e) => Err(violation(
                INV_OFFSETS,
                format!("storing offset {offset} in {identity} failed with no fault: {e}"),
            )),
        }
    }
}

/// A member's generation and partitions, or why it has none.
pub(crate) type Assignment = NodeResult<(u64, Vec<u32>)>;

/// What the node said about one group: its member list, and each simulated member's own
/// assignment (`SyncConsumerGroup`).
pub(crate) struct GroupSeen {
    pub(crate) members: Vec<(u128, Vec<u32>)>,
    pub(crate) assignments: Vec<(u128, Assignment)>,
}

impl NodeWorld {
    /// The client is a member of no group.
    pub(crate) fn forget_member(&mut self, client: u128) {
        for m in self.members.values_mut() {
            m.remove(&client);
        }
    }

    pub(crate) fn judge_group(
        &mut self,
        group: GroupInc,
        partitions: u32,
        seen: &GroupSeen,
    ) -> Checked<()> {
        let (s, t, g, _) = group;
        let name = format!("group {s}/{t}/{g}");
        let fail = |what: String| Err(violation(INV_CALLERS, format!("{name}: {what}")));
        let clients: BTreeSet<u128> = seen.members.iter().map(|(c, _)| *c).collect();
        let expected = self.members.get(&group).cloned().unwrap_or_default();
        if clients != expected {
            return fail(format!(
                "the node's members are {clients:?}, the model's {expected:?}"
            ));
        }
        let mut owned: Vec<u32> = seen.members.iter().flat_map(|(_, p)| p.clone()).collect();
        owned.sort_unstable();
        let all: Vec<u32> = if clients.is_empty() {
            vec![]
        } else {
            (0..partitions).collect()
        };
        if owned != all {
            return fail(format!(
                "partitions owned {owned:?}, expected each of {all:?} exactly once"
            ));
        }
        let mut generation = None;
        for (client, assignment) in &seen.assignments {
            let listed = seen.members.iter().find(|(c, _)| c == client);
            match (listed, assignment) {
                (None, Err(NodeError::NotAMember { .. })) => {}
                (Some((_, listed)), Ok((at, mine))) if listed == mine => {
                    if generation.is_some_and(|g| g != *at) {
                        return fail(format!(
                            "members answered at generations {generation:?} and {at}"
                        ));
                    }
                    generation = Some(*at);
                }
                (listed, assignment) => {
                    return fail(format!(
                        "client {client} is listed with {listed:?} but its own assignment is {assignment:?}"
                    ));
                }
            }
        }
        let Some(generation) = generation else {
            return Ok(());
        };
        if let Some((before, who)) = self.generations.get(&group) {
            if generation < *before || (generation == *before && *who != clients) {
                return fail(format!(
                    "generation {generation} with members {clients:?} after generation {before} with {who:?}"
                ));
            }
        }
        self.generations.insert(group, (generation, clients));
        self.decision("AssignmentsJudged");
        Ok(())
    }
}

/// An acknowledged store of `offset`: the value a read must give from now on. Under
/// `persisted` offsets it was durable when answered, so no value stored before it may
/// come back; otherwise (acknowledged before synced) a crash may still bring back any value
/// stored since the last check.
pub(crate) fn acknowledge_store(
    entry: &mut (Option<u64>, BTreeSet<Option<u64>>),
    offset: u64,
    durable: bool,
) {
    if durable {
        entry.1.clear();
    } else {
        entry.1.insert(entry.0);
    }
    entry.0 = Some(offset);
}

pub(crate) fn last_offset(polled: &Polled) -> Option<u64> {
    let batch = polled.batches.last()?;
    let header = cairn_engine::format::BatchHeader::decode(batch).ok()?;
    cairn_engine::format::MessageIter::new(batch, header.base_offset)
        .last()
        .map(|m| m.offset)
}

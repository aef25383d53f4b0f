//! The node world's oracle at each boot: the refusal's cause, the superblock record boot
//! trusted, the whole metadata state (with the ops in doubt placed where the journal can
//! hold them), the newest op the view showed, the directory tree, every partition's
//! messages and offsets. (The answers callers got while the node ran are judged in
//! [`super::judges`]; boots and restarts themselves are in [`super::lifecycle`].)

use super::model::{self, AdminOp, Model};
use super::workload::sid;
use super::{
    block, lock, meta_violation, Accepted, Holder, NodeWorld, Sent, Shared, INV_CALLERS, NODE_ROOT,
};
use crate::executor::Executor;
use crate::partition_world::decode;
use crate::report::{
    violation, Checked, INV_JUSTIFIED, INV_LIVENESS, INV_NO_LOSS, INV_OFFSETS, INV_PREFIX,
};
use cairn_engine::metadata::record::{MetaRecord, SLOT_NAMES};
use cairn_engine::metadata::{MetaAction, MetaRefusal};
use cairn_engine::node::tree::Fate;
use cairn_engine::node::{Booted, Client, PartitionBoot, PartitionKey};
use cairn_engine::partition::{Outcome, PartitionIdentity};
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::{WireConsumer, WirePollingStrategy};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub(crate) fn slot_path(slot: usize) -> PathBuf {
    Path::new(NODE_ROOT).join("metadata").join(SLOT_NAMES[slot])
}

/// The two copies of a metadata slot file's record, each decoded if it is valid.
pub(crate) fn slot_copies(bytes: &[u8]) -> [Option<MetaRecord>; 2] {
    [0usize, cairn_engine::slots::MIRROR_OFFSET as usize].map(|at| {
        let copy = bytes.get(at..at + cairn_engine::slots::RECORD_LEN)?;
        let copy: [u8; cairn_engine::slots::RECORD_LEN] = copy.try_into().expect("a record");
        MetaRecord::decode(&copy).ok()
    })
}

pub(crate) fn journal_path() -> PathBuf {
    Path::new(NODE_ROOT)
        .join("metadata")
        .join(cairn_engine::metadata::JOURNAL)
}

/// The newest valid record in the metadata slots, as `read` shows each slot file.
pub(crate) fn newest_slot_record(read: impl Fn(&Path) -> Option<Vec<u8>>) -> Option<MetaRecord> {
    [0, 1]
        .into_iter()
        .filter_map(|slot| read(&slot_path(slot)))
        .flat_map(|bytes| slot_copies(&bytes))
        .flatten()
        .max_by_key(|r| r.sequence)
}

/// The newest valid record in the metadata slots as the device holds them.
pub(crate) fn newest_record(w: &NodeWorld) -> Option<MetaRecord> {
    if [0, 1]
        .iter()
        .any(|s| !w.disk.live_damage(&slot_path(*s)).is_empty())
    {
        // A damaged copy may hide a newer record: the trust check needs clean slots.
        return None;
    }
    newest_slot_record(|path| w.disk.device_view(path))
}

/// After a boot, the slot file of the record boot trusted holds one record in both copies,
/// that one or a newer one boot wrote there: a record boot found in one copy only was
/// written again (`RewriteSlot`), so one more damaged copy cannot lose it. Excused only by
/// a fault the disk injected on a slot file during the boot, or an unreadable sector there
/// (other damage boot reads past, and its rewrite replaces).
pub(crate) fn trusted_slot_in_two_copies(
    w: &NodeWorld,
    trusted: MetaRecord,
    faults_from: usize,
) -> Checked<()> {
    let paths = [0, 1].map(slot_path);
    let excused = paths.iter().any(|path| {
        w.disk
            .live_damage(path)
            .iter()
            .any(|d| d.kind == cairn_faults::FaultKind::ReadError)
            || w.disk
                .records_since(faults_from)
                .iter()
                .any(|r| r.path.as_deref() == Some(path.as_path()))
    });
    if excused {
        return Ok(());
    }
    let path = &paths[trusted.slot()];
    let held = w.disk.contents(path).map(|b| slot_copies(&b));
    match held {
        Some([Some(a), Some(b)]) if a == b && a.sequence >= trusted.sequence => Ok(()),
        other => Err(meta_violation(format!(
            "after boot {} holds {other:?}: the trusted record (sequence {}) is not in both copies",
            path.display(),
            trusted.sequence
        ))),
    }
}

/// After a boot, the metadata journal holds no damage: damage below the durable end is a
/// refusal, and damage above it is a torn tail boot cuts off (or, in entries the snapshot
/// holds, the journal emptied) — so a boot that served leaves none for the next write to
/// bury under whole entries. Judged on wrong bytes (a flip, a tear, a misdirected
/// write), not on bytes that went missing: a lost page is recorded for the whole page,
/// whose older durable bytes may be the very entries boot keeps, and its record outlives
/// a cut. Excused only by a fault the disk injected on the journal during the boot.
pub(crate) fn journal_whole_after_boot(w: &NodeWorld, faults_from: usize) -> Checked<()> {
    let path = journal_path();
    let during_boot = w
        .disk
        .records_since(faults_from)
        .iter()
        .any(|r| r.path.as_deref() == Some(path.as_path()));
    let live = w.disk.live_damage(&path);
    match live.iter().find(|d| !d.missing) {
        Some(d) if !during_boot => Err(meta_violation(format!(
            "after boot {} still holds {:?} damage at {:?}: boot neither refused nor cut it",
            path.display(),
            d.kind,
            d.range
        ))),
        _ => Ok(()),
    }
}

/// After a boot, each journal entry of an op a caller was answered for names that caller
/// as its client and the user it acted as. Ops the journal no longer holds (a checkpoint
/// emptied it) are forgotten.
pub(crate) fn journal_names_who_asked(w: &mut NodeWorld) -> Checked<()> {
    let entries = w.journal_entries();
    let first = entries.first().map_or(u64::MAX, |e| e.op);
    w.asked_by.retain(|op, _| *op >= first);
    entries
        .iter()
        .try_for_each(|entry| match w.asked_by.get(&entry.op) {
            Some(asker) => entry_names_asker(entry, *asker),
            None => Ok(()),
        })
}

/// Who asked for an op: the client, and the user it acted as (the journal header's
/// `user_id`, which the specification says records the acting user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Asker {
    pub(crate) client: u128,
    pub(crate) user: u32,
}

/// A journal entry of an op `asker` asked for names its client and its acting user.
pub(crate) fn entry_names_asker(
    entry: &cairn_engine::metadata::journal::Entry,
    asker: Asker,
) -> Checked<()> {
    if entry.origin.client != asker.client {
        return Err(meta_violation(format!(
            "journal entry of op {} names client {}, but client {} asked for it",
            entry.op, entry.origin.client, asker.client
        )));
    }
    if entry.origin.user_id != asker.user {
        return Err(meta_violation(format!(
            "journal entry of op {} names user {} as acting, but client {} acted as user {}",
            entry.op, entry.origin.user_id, asker.client, asker.user
        )));
    }
    Ok(())
}

/// The entry of an op a client was just answered for names that client, its acting user
/// and one of its request numbers (a client numbers its requests from 1; the server's
/// duplicate detection keys on the pair).
pub(crate) fn judge_entry_origin(
    entry: &cairn_engine::metadata::journal::Entry,
    asker: Asker,
) -> Checked<()> {
    entry_names_asker(entry, asker)?;
    if entry.origin.request == 0 {
        return Err(meta_violation(format!(
            "journal entry of op {} carries no request number of client {}",
            entry.op, asker.client
        )));
    }
    Ok(())
}

impl NodeWorld {
    /// The whole entries at the start of the metadata journal, as reads see it now.
    pub(crate) fn journal_entries(&self) -> Vec<cairn_engine::metadata::journal::Entry> {
        let bytes = self.disk.contents(&journal_path()).unwrap_or_default();
        cairn_engine::metadata::journal::scan(&bytes, self.cluster).entries
    }
}

impl NodeWorld {
    /// What boot decided, against what the disk holds and the model.
    pub(crate) fn booted(&mut self, booted: Booted, newest: Option<MetaRecord>) -> Checked<()> {
        self.jumps_at_boot = self.jumps;
        let plan = &booted.plan;
        self.trace.event(format!(
            "boot: record {:?}, journal end {}, last op {}, replayed {} ops, first boot {}",
            plan.record,
            plan.journal_end,
            plan.last_op,
            plan.replayed.len(),
            plan.first_boot
        ));
        if let (Some(newest), Some(trusted)) = (newest, plan.record) {
            if trusted.sequence != newest.sequence {
                return Err(meta_violation(format!(
                    "boot trusted superblock record {} while sequence {} is valid on the device",
                    trusted.sequence, newest.sequence
                )));
            }
        }
        for action in &plan.actions {
            self.trace.event(format!("metadata recovery: {action}"));
            match action {
                MetaAction::TruncateJournal { why, .. } => {
                    self.decision("TruncateJournal");
                    if why.contains("already in the snapshot") {
                        self.decision("CheckpointCrash");
                    }
                }
                MetaAction::FinishSnapshot | MetaAction::RemoveTempSnapshot => {
                    self.decision("CheckpointCrash");
                }
                MetaAction::RewriteSlot { .. } => self.decision("MetaSlotRepaired"),
                // Only a clustered node adopts a state (the cluster world's nodes).
                MetaAction::RemoveTempAdoption | MetaAction::RemoveAdoption => {}
            }
        }
        if plan.record.is_some_and(|r| r.snapshot.op > 0) && !plan.replayed.is_empty() {
            self.decision("SnapshotReplay");
        }
        let report = &booted.report;
        for path in &report.tree.paths {
            if path.fate != Fate::Open {
                self.trace.event(format!(
                    "boot tree {}: found {}, wanted {:?}: {}",
                    path.dir.display(),
                    path.found,
                    path.wanted,
                    path.fate.name()
                ));
            }
        }
        // An operator's removal is undone by work done there since (by boot, or by an op in
        // doubt before the crash): a removed partition is one whose directory boot finds
        // missing and leaves so.
        let still_missing: BTreeSet<PartitionKey> = report
            .tree
            .paths
            .iter()
            .filter(|p| p.found == cairn_engine::node::tree::Found::Missing && p.fate == Fate::Open)
            .map(|p| p.key)
            .collect();
        // A removed partition whose creation boot re-did (its create op is above the applied
        // op of a metadata record a lying sync left stale, so boot cannot tell the removal
        // from a create that crashed before its directory) is a new, empty partition: the
        // operator's removal took its messages and offsets.
        let recreated: Vec<PartitionKey> = report
            .tree
            .paths
            .iter()
            .filter(|p| self.removed.contains(&p.key) && p.fate == Fate::Create)
            .map(|p| p.key)
            .collect();
        for key in recreated {
            if let Some(identity) = self.model.identity(self.cluster, key) {
                self.parts.remove(&identity);
                self.decision("RemovedDirRecreated");
            }
        }
        self.removed.retain(|k| still_missing.contains(k));
        let claimed: BTreeMap<PartitionKey, PathBuf> =
            report.tree.claimed.iter().cloned().collect();
        for (key, outcome) in &report.partitions {
            match outcome {
                PartitionBoot::Fenced(
                    cairn_engine::partition::FenceReason::IdentityDuplicated { other, .. },
                ) if self.planted.contains(other) && claimed.get(key) == Some(other) => {
                    self.decision("IdentityDuplicated")
                }
                PartitionBoot::Fenced(cairn_engine::partition::FenceReason::DirectoryMissing {
                    ..
                }) if self.removed.contains(key) => self.decision("DirectoryMissing"),
                PartitionBoot::Opened(plan) if self.planted_claims(plan.fence.as_ref()) => {
                    self.decision("SuperblockIdentity")
                }
                PartitionBoot::Opened(plan) if plan.fence.is_none() => {
                    for action in &plan.actions {
                        self.trace.event(format!("recovery of {key:?}: {action}"));
                    }
                    for outcome in plan.outcomes() {
                        *self.report.outcomes.entry(outcome).or_default() += 1;
                        if outcome == Outcome::DeletionFinished {
                            self.decision("CrashDuringDeletion");
                        }
                    }
                }
                other => {
                    return Err(violation(INV_JUSTIFIED, format!("partition {key:?} fenced at boot with no fault on partition files in this scope: {other:?}")));
                }
            }
        }
        for path in &report.tree.paths {
            if path.fate == Fate::Unaccounted && !self.operator_made(&path.dir) {
                return Err(violation(INV_JUSTIFIED, format!("{}: a directory the metadata does not account for ({}), which nothing in this scope makes", path.dir.display(), path.found)));
            }
        }
        if !report
            .tree
            .kept_dirs
            .iter()
            .all(|d| self.operator_made_under(d))
            || !report
                .tree
                .claimed
                .iter()
                .all(|(_, d)| self.planted.contains(d))
        {
            return Err(violation(
                INV_JUSTIFIED,
                format!(
                    "boot kept unaccounted directories: {:?} {:?}",
                    report.tree.kept_dirs, report.tree.claimed
                ),
            ));
        }
        self.last_tree = Some(report.tree.clone());
        let applied = plan.record.map_or(0, |r| r.applied_op);
        if report.redone() > 0
            || plan
                .replayed
                .iter()
                .any(|r| r.op > applied && !r.applied.work.is_empty())
        {
            self.decision("DirWorkRedone");
        }
        for removed in &report.removed {
            self.trace
                .event(format!("boot removed {}", removed.display()));
        }
        // Boot recorded the journal's end: every entry it kept is below it now.
        self.journal_tail_exposed = false;
        self.cluster = booted.node.cluster();
        // A cluster id is 128 bits drawn from the machine's entropy: a half of zeros (odds
        // 2^-64 per half) is a draw that lost its entropy, and two clusters could collide.
        if self.cluster >> 64 == 0 || self.cluster as u64 == 0 {
            return Err(meta_violation(format!(
                "cluster id {:#x} does not fill its 128 bits",
                self.cluster
            )));
        }
        let view = booted.node.view();
        if view.op < self.max_observed_op {
            return Err(violation(
                INV_CALLERS,
                format!(
                    "a caller saw op {} in the published view; the disk holds ops up to {} only",
                    self.max_observed_op, view.op
                ),
            ));
        }
        self.max_observed_op = view.op;
        self.resolve(&view.state, view.op)?;
        self.check_tree()?;
        self.judge_debris(&booted.report)?;
        self.node = Some(booted.node);
        Ok(())
    }

    /// The recovered metadata is the model's: the acknowledged ops in journal order, with the
    /// ops in doubt placed in the journal's gaps and after its last acknowledged op, wherever
    /// that makes the recovered state (all of it: the ops in doubt happened or did not).
    fn resolve(
        &mut self,
        found: &cairn_engine::node::state::MetaState,
        last_op: u64,
    ) -> Checked<()> {
        let known: BTreeMap<u64, Accepted> = std::mem::take(&mut self.pending);
        let doubt: Vec<Sent> = std::mem::take(&mut self.in_doubt);
        self.deferred_refusals.clear();
        self.history.clear();
        if let Some((lost, accepted)) = known.range(last_op + 1..).next() {
            return Err(meta_violation(format!(
                "op {lost} ({:?}) was acknowledged; the recovered journal ends at op {last_op}",
                accepted.sent.op
            )));
        }
        let base = self.model.clone();
        if last_op < base.op {
            return Err(meta_violation(format!(
                "the model holds ops up to {}, the recovered journal ends at op {last_op}",
                base.op
            )));
        }
        let missing: Vec<u64> = (base.op + 1..=last_op)
            .filter(|n| !known.contains_key(n))
            .collect();
        let mut last_error = String::new();
        for assignment in assignments(missing.len(), doubt.len()) {
            let mut model = base.clone();
            let mut ops: Vec<(AdminOp, u64)> = Vec::new();
            let mut fits = true;
            for n in base.op + 1..=last_op {
                let (op, window, at) = match known.get(&n) {
                    Some(a) => (a.sent.op.clone(), a.window, a.sent.at),
                    None => {
                        let i = missing.iter().position(|m| *m == n).expect("missing");
                        let d = &doubt[assignment[i]];
                        (d.op.clone(), None, d.at)
                    }
                };
                if model.apply(&op, window, self.cluster).is_err() {
                    fits = false;
                    break;
                }
                ops.push((op, at));
            }
            if !fits {
                continue;
            }
            match model::compare(&model, found, self.cluster, model::Passwords::Verify) {
                Ok(()) => {
                    for (i, d) in assignment.iter().enumerate() {
                        self.event(format!(
                            "op {} in doubt happened: {:?}",
                            missing[i], doubt[*d].op
                        ));
                    }
                    self.replay_effects(&base, &ops);
                    return Ok(());
                }
                Err(e) => last_error = e,
            }
        }
        Err(meta_violation(format!(
            "after boot the metadata (last op {last_op}) is no arrangement of the acknowledged ops (up to {}) and the {} in doubt: {last_error}",
            base.op,
            doubt.len()
        )))
    }

    /// The model takes the recovered ops, their effects on partitions and groups in order.
    fn replay_effects(&mut self, base: &Model, ops: &[(AdminOp, u64)]) {
        self.model = base.clone();
        for (op, at) in ops {
            let effect = self
                .model
                .apply(op, None, self.cluster)
                .expect("an arrangement that fits applies");
            self.apply_effect(op, &effect, *at, false);
        }
        // A purge or a creation keeps its window: the arrangement's model has them.
    }

    /// The partition directories on disk are exactly the model's (less those an operator
    /// removed or replaced with a planted copy).
    fn check_tree(&mut self) -> Checked<()> {
        let streams = Path::new(NODE_ROOT).join("streams");
        let found: BTreeSet<PartitionKey> = self
            .disk
            .paths_under(&streams)
            .into_iter()
            .filter(|p| !self.operator_made(p))
            .filter_map(|p| partition_key_of(&p))
            .collect();
        let expected: BTreeSet<PartitionKey> = self
            .model
            .identities(self.cluster)
            .into_keys()
            .filter(|k| !self.removed.contains(k))
            .filter(|k| {
                let dir =
                    cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), k.0, k.1, k.2);
                !self.planted.contains(&dir)
            })
            .collect();
        if found != expected {
            return Err(violation(
                INV_JUSTIFIED,
                format!(
                    "the partition directories on disk are {found:?}; the model's are {expected:?}"
                ),
            ));
        }
        Ok(())
    }

    /// A damaging fault present where the refusal points: damaged bytes still in that file
    /// (or, for the superblock pair, in a slot; for a snapshot, in either of its names), a
    /// name lost, or lied pages of it a power loss dropped. A journal shorter than recorded
    /// is explained by its own lost lied pages only.
    pub(crate) fn refusal_justified(&self, refusal: &MetaRefusal) -> bool {
        use cairn_engine::metadata::MetaRefusal as R;
        let dir = Path::new(NODE_ROOT).join("metadata");
        let file = refusal.file().to_path_buf();
        let slots = [dir.join("superblock.a"), dir.join("superblock.b")];
        let mut candidates: Vec<PathBuf> = match refusal {
            R::NoSuperblock { .. } => slots.to_vec(),
            R::SnapshotMissing { .. }
            | R::SnapshotMismatch { .. }
            | R::SnapshotUndecodable { .. }
            | R::SnapshotContradicts { .. } => {
                vec![dir.join("snapshot.bin"), dir.join("snapshot.bin.tmp")]
            }
            R::JournalUncertain { slot, .. } => vec![file.clone(), slot.clone()],
            _ => vec![file.clone()],
        };
        candidates.extend(slots.iter().cloned());
        let damaged = |path: &PathBuf| {
            !self.disk.live_damage(path).is_empty()
                || self.metadata_lies_lost.contains(path)
                || self.disk.lost_synced_names(&dir).contains(path)
        };
        match refusal {
            R::JournalShorterThanDurable { path, .. } => {
                self.metadata_lies_lost.contains(path) || slots.iter().any(damaged)
            }
            _ => candidates.iter().any(damaged),
        }
    }
}

/// Every injective map of `slots` positions to `choices` items (as index lists).
fn assignments(slots: usize, choices: usize) -> Vec<Vec<usize>> {
    if slots > choices {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut current = Vec::with_capacity(slots);
    fn go(slots: usize, choices: usize, current: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if current.len() == slots {
            out.push(current.clone());
            return;
        }
        for c in 0..choices {
            if !current.contains(&c) {
                current.push(c);
                go(slots, choices, current, out);
                current.pop();
            }
        }
    }
    go(slots, choices, &mut current, &mut out);
    out
}

/// `(s, t, p)` when `path` is `/node/streams/s/topics/t/partitions/p`.
fn partition_key_of(path: &Path) -> Option<PartitionKey> {
    let rest = path
        .strip_prefix(Path::new(NODE_ROOT).join("streams"))
        .ok()?;
    let parts: Vec<&str> = rest.iter().filter_map(|c| c.to_str()).collect();
    match parts.as_slice() {
        [s, "topics", t, "partitions", p] => {
            Some((s.parse().ok()?, t.parse().ok()?, p.parse().ok()?))
        }
        _ => None,
    }
}

// Partitions after a boot ---------------------------------------------------------------------

/// Every partition the model has: served, unfenced, gapless from its log start, every
/// acknowledged `persisted` message there; every stored offset allowed.
pub(crate) fn check_partitions(world: &Shared, executor: &mut Executor) -> Checked<()> {
    let (client, identities) = {
        let w = lock(world);
        let Some(node) = w.node.clone() else {
            return Ok(());
        };
        let identities: Vec<PartitionIdentity> = w
            .model
            .identities(w.cluster)
            .into_iter()
            .filter(|(k, _)| !w.removed.contains(k))
            .map(|(_, id)| id)
            .collect();
        (node.client(0x0c4ec4), identities)
    };
    let w2 = world.clone();
    let checked = block(executor, async move {
        for identity in identities {
            verify(&w2, &client, identity, true).await?;
        }
        Ok(())
    });
    match checked {
        Some(result) => result,
        None => Err(violation(
            INV_LIVENESS,
            "the checks after boot stalled".into(),
        )),
    }
}

/// Reads partition `identity` whole; after a boot also checks its stored offsets.
pub(crate) async fn verify(
    world: &Shared,
    client: &Client,
    identity: PartitionIdentity,
    after_boot: bool,
) -> Checked<()> {
    let key = super::key(&identity);
    let info = client
        .partition_info(key)
        .await
        .map_err(|e| violation(INV_LIVENESS, format!("partition {key:?}: {e}")))?
        .ok_or_else(|| {
            meta_violation(format!("partition {key:?} of the metadata is not served"))
        })?;
    if let Some(cairn_engine::partition::FenceReason::IdentityDuplicated { other, .. }) =
        &info.fence
    {
        if lock(world).planted.contains(other) {
            return Ok(()); // fenced, as it must be: a planted copy claims its identity
        }
    }
    if lock(world).planted_claims(info.fence.as_ref()) {
        return Ok(()); // fenced, as it must be: a planted copy sits at its path
    }
    if let Some(reason) = &info.fence {
        return Err(violation(
            INV_JUSTIFIED,
            format!(
                "partition {key:?} fenced with no fault on partition files in this scope: {reason}"
            ),
        ));
    }
    if info.identity != identity {
        return Err(meta_violation(format!(
            "partition {key:?} serves {}, the model has {identity}",
            info.identity
        )));
    }
    let mut all: Vec<crate::partition_world::oracle::ReadMessage> = Vec::new();
    let mut next = 0;
    loop {
        let request = PollMessagesRequest {
            consumer: WireConsumer::consumer(sid(0)),
            stream_id: sid(key.0),
            topic_id: sid(key.1),
            partition_id: Some(key.2),
            strategy: WirePollingStrategy {
                kind: 1,
                value: next,
            },
            count: 500,
            auto_commit: false,
        };
        let polled = client
            .poll(&request)
            .await
            .map_err(|e| violation(INV_NO_LOSS, format!("partition {key:?}: read failed: {e}")))?
            .expect("a consumer's poll has a partition");
        let messages = decode(&polled, true)?;
        let Some(last) = messages.last() else { break };
        next = last.offset + 1;
        all.extend(messages);
    }
    let (holders, end) = {
        let mut w = lock(world);
        let before = w.parts.get(&identity).map_or(0, |p| p.log_start);
        // A cleaner may have run meanwhile, on its shard's timer: before the partition was
        // inspected (then the inspection shows it), or after (then the reads may or may not).
        w.drain_deletions()?;
        w.trace.event(format!(
            "partition {key:?}: log start {}, segments {:?}, visible end {:?}",
            info.log_start, info.segment_starts, info.visible_next_offset
        ));
        let persisted = w.parts.get(&identity).is_some_and(|p| p.persisted());
        let part = w.parts.entry(identity).or_default();
        let inspected = info.log_start;
        if inspected < before || (inspected > part.log_start && !part.log_start_unknown) {
            return Err(violation(super::INV_RETENTION, format!("partition {key:?}: the log starts at {inspected}, the model says {} (the log start only moves forward, by a deletion)", part.log_start)));
        }
        let log_start = inspected.max(part.log_start);
        all.retain(|m| m.offset >= log_start);
        if log_start > part.log_start {
            part.log_start = log_start;
            part.messages = part.messages.split_off(&log_start);
            part.batches = part.batches.split_off(&log_start);
        }
        part.log_start_unknown = false;
        for (i, m) in all.iter().enumerate() {
            if m.offset != log_start + i as u64 {
                return Err(violation(INV_PREFIX, format!("partition {key:?}: not gapless from {log_start}: position {i} holds offset {}", m.offset)));
            }
            if let Some(id) = part.messages.get(&m.offset) {
                if *id != m.id {
                    return Err(violation(
                        INV_PREFIX,
                        format!(
                            "partition {key:?}: offset {} holds {:#x}, acknowledged for {id:#x}",
                            m.offset, m.id
                        ),
                    ));
                }
            }
        }
        let end = log_start + all.len() as u64;
        if after_boot {
            // Nothing sends while boot is checked: the numbers GetTopic, GetStream and a
            // consumer offset's reply report are the log the reads found.
            let current = end.checked_sub(1).filter(|o| *o >= info.log_start);
            if info.visible_next_offset != Some(end) || info.current_offset() != current {
                return Err(meta_violation(format!("partition {key:?}: reports visible end {:?} and current offset {:?}; the reads found messages {log_start}..{end}", info.visible_next_offset, info.current_offset())));
            }
        }
        if persisted {
            if let Some((lost, _)) = part.messages.range(end..).next() {
                return Err(violation(INV_NO_LOSS, format!("partition {key:?}: persisted offset {lost} was acknowledged (or read), the log ends at {end}")));
            }
        } else if after_boot {
            // Replicated: an unflushed suffix may be gone.
            part.messages.split_off(&end);
            part.batches.split_off(&end);
        }
        for m in &all {
            part.messages.insert(m.offset, m.id);
        }
        let holders: Vec<Holder> = part.offsets.keys().copied().collect();
        (holders, end)
    };
    if after_boot {
        for holder in holders {
            check_offset(world, client, identity, holder, end).await?;
        }
    }
    Ok(())
}

/// Invariant 5 after a boot: a stored offset never exceeds the partition's end, and under
/// `persisted` offset durability the last acknowledged store survives (read as consumed up
/// to the log start when retention passed it). A group's offsets are its incarnation's only.
async fn check_offset(
    world: &Shared,
    client: &Client,
    identity: PartitionIdentity,
    holder: Holder,
    end: u64,
) -> Checked<()> {
    let key = super::key(&identity);
    let consumer = match holder {
        Holder::Consumer(id) => WireConsumer::consumer(sid(id)),
        Holder::Group { id, .. } => WireConsumer {
            kind: iggy_binary_protocol::KIND_CONSUMER_GROUP,
            id: sid(id),
        },
    };
    let got = client
        .get_offset(&consumer, &sid(key.0), &sid(key.1), Some(key.2))
        .await
        .map_err(|e| {
            violation(
                INV_OFFSETS,
                format!("partition {key:?}: reading {holder:?}'s offset failed: {e}"),
            )
        })?;
    let mut w = lock(world);
    let part = w.parts.get_mut(&identity).expect("modelled");
    let offsets_persisted = part.offsets_persisted();
    if got.is_some_and(|g| end == 0 || g > end - 1) {
        return Err(violation(
            INV_OFFSETS,
            format!("partition {key:?}: {holder:?} offset {got:?} beyond the end {end}"),
        ));
    }
    let floor = part.log_start.saturating_sub(1);
    let clamp = |v: Option<u64>| match (v, end.checked_sub(1)) {
        (Some(v), Some(l)) => Some(v.min(l).max(floor)),
        _ => None,
    };
    let (acked, candidates) = part.offsets.get(&holder).cloned().expect("listed");
    if part.unknown_offsets.remove(&holder) {
        part.offsets.insert(holder, (got, BTreeSet::new()));
        return Ok(());
    }
    let mut allowed: BTreeSet<Option<u64>> = candidates
        .iter()
        .chain([&acked])
        .map(|v| clamp(*v))
        .collect();
    if !offsets_persisted {
        allowed.insert(None);
    }
    if !allowed.contains(&got) {
        return Err(violation(INV_OFFSETS, format!("partition {key:?}: {holder:?} reads {got:?} after boot; the model allows {allowed:?} (log start {}, end {end})", part.log_start)));
    }
    part.offsets.insert(holder, (got, BTreeSet::new()));
    Ok(())
}

/// After a boot, every consumer-group offset stored in a partition the node serves belongs
/// to a group its topic has: boot removes the offsets of a group a journaled op deleted (its
/// work redone) and of every group id the topic no longer has. A partition fenced at boot
/// (boot leaves its files alone), or one a fault struck during the boot, is excused.
pub(crate) fn group_offsets_of_live_groups(
    w: &NodeWorld,
    fenced: &BTreeSet<PartitionKey>,
    faults_from: usize,
) -> Checked<()> {
    let faulted: Vec<PathBuf> = w
        .disk
        .records_since(faults_from)
        .iter()
        .filter_map(|r| r.path.clone())
        .collect();
    for key in w.model.identities(w.cluster).into_keys() {
        let dir = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), key.0, key.1, key.2);
        if fenced.contains(&key)
            || w.removed.contains(&key)
            || faulted.iter().any(|p| p.starts_with(&dir))
        {
            continue;
        }
        let groups = &w
            .model
            .topic(key.0, key.1)
            .expect("a partition's topic")
            .groups;
        let stored = w.disk.paths_under(&dir.join("offsets").join("groups"));
        let stray = stored.iter().find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(cairn_engine::partition::offsets::parse_name)
                .is_some_and(|id| !groups.contains_key(&id))
        });
        if let Some(path) = stray {
            return Err(violation(
                INV_OFFSETS,
                format!(
                    "after boot {} holds the offset of a group topic {}/{} does not have (its groups: {:?})",
                    path.display(),
                    key.0,
                    key.1,
                    groups.keys().collect::<Vec<_>>()
                ),
            ));
        }
    }
    Ok(())
}

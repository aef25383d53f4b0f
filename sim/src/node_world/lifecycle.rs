//! Boots and restarts of the node world: the first boot (a crash may strike inside it),
//! each boot judged by the oracle ([`super::oracle`]) before callers run again, the node
//! going down (a process crash or a power loss, and the damage and removals that strike
//! while it is down), and the liveness phase once faults heal.

use super::model::{AdminOp, MUser};
use super::oracle::group_offsets_of_live_groups;
use super::oracle::verify;
use super::oracle::{check_partitions, journal_names_who_asked, journal_whole_after_boot};
use super::oracle::{newest_record, trusted_slot_in_two_copies};
use super::workload::sid;
use super::{block, lock, meta_violation, Holder, NodeWorld, Sent, Shared, NODE_ROOT};
use crate::executor::Executor;
use crate::report::{violation, Checked, INV_LIVENESS};
use cairn_engine::node::{BootError, Node, PartitionKey};
use cairn_engine::partition::PartitionIdentity;
use iggy_binary_protocol::WirePartitioning;
use rand::Rng;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The first boot (a crash may be armed inside it; the next boot must finish it).
pub(crate) fn setup(world: &Shared, executor: &mut Executor) -> Checked<()> {
    {
        let mut w = lock(world);
        w.model.users.insert(
            0,
            MUser {
                name: "iggy".into(),
                password: "iggy".into(),
                status: 1,
                permissions: None,
                created: None,
                created_op: 1,
            },
        );
        w.model.op = 1;
        if w.faulty && w.rng.gen_bool(0.2) {
            let n = w.rng.gen_range(0..24);
            w.disk.arm_crash(n);
            w.event(format!("fault crash armed inside the first boot at +{n}"));
        }
    }
    boot(world, executor)?;
    let crashed = {
        let w = lock(world);
        w.disk.disarm_crash();
        w.disk.is_crashed()
    };
    if crashed {
        let power = lock(world).rng.gen_bool(0.5);
        restart(world, executor, power)?;
        let mut w = lock(world);
        if !w.is_up() {
            return Ok(()); // refused, justified by damage the restart injected
        }
        w.decision("FirstBootInterrupted");
    }
    Ok(())
}

/// Boots the node and checks what it recovered.
pub(crate) fn boot(world: &Shared, executor: &mut Executor) -> Checked<()> {
    let (env, settings, newest, faults_from, exit) = {
        let mut w = lock(world);
        w.faults_at_boot = w.disk.record_count();
        (
            w.env.clone(),
            super::settings(&w.profile),
            newest_record(&w),
            w.faults_at_boot,
            // This boot's process is the next one to end.
            std::mem::take(&mut w.exit),
        )
    };
    let started = block(executor, async move {
        Node::start(&env, Path::new(NODE_ROOT), settings).await
    });
    let started = match started {
        Some(result) => result,
        None => {
            let mut w = lock(world);
            if w.disk.is_crashed() {
                super::exits::boot_crashed(&mut w, exit);
                return Ok(());
            }
            return Err(violation(INV_LIVENESS, "boot stalled".into()));
        }
    };
    match started {
        Ok(_) if lock(world).disk.is_crashed() => {
            let mut w = lock(world);
            w.event("boot crashed");
            super::exits::boot_crashed(&mut w, exit);
            Ok(())
        }
        Ok(booted) => {
            let trusted = booted.plan.record;
            let fenced: BTreeSet<PartitionKey> = booted
                .report
                .partitions
                .iter()
                .filter(|(_, b)| b.fence().is_some())
                .map(|(k, _)| *k)
                .collect();
            super::exits::judge_page_cache(&mut lock(world), exit, &booted.report)?;
            lock(world).booted(booted, newest)?;
            lock(world).check_reports_debris()?;
            group_offsets_of_live_groups(&lock(world), &fenced, faults_from)?;
            if let Some(trusted) = trusted {
                trusted_slot_in_two_copies(&lock(world), trusted, faults_from)?;
            }
            journal_whole_after_boot(&lock(world), faults_from)?;
            journal_names_who_asked(&mut lock(world))?;
            check_partitions(world, executor)
        }
        Err(BootError::Refused(refusal)) => {
            let mut w = lock(world);
            w.event(format!("BOOT REFUSED: {refusal}"));
            if !w.refusal_justified(&refusal) {
                return Err(meta_violation(format!(
                    "boot refused with no damaging fault present on a metadata file: {refusal}"
                )));
            }
            w.decision("BootRefused");
            w.decision(refusal.coverage_name());
            w.refused = true;
            Ok(())
        }
        Err(e) => {
            let mut w = lock(world);
            if w.disk.is_crashed() {
                w.event(format!("boot crashed: {e}"));
                super::exits::boot_crashed(&mut w, exit);
                return Ok(());
            }
            Err(meta_violation(format!(
                "boot failed with no fault to explain it: {e}"
            )))
        }
    }
}

// Restarts ------------------------------------------------------------------------------------

impl NodeWorld {
    /// Where metadata damage may strike while the node is down: any metadata file, except
    /// the journal while its tail is exposed: damage to an entry above the surviving record's
    /// journal end reads as a torn tail, and boot drops it with the acknowledged ops in it;
    /// with the record lost to a lie, that disk is the disk before those ops, which one disk
    /// cannot tell and the oracle does not model as a rollback.
    fn metadata_damage_target(&mut self) -> PathBuf {
        let dir = Path::new(NODE_ROOT).join("metadata");
        if !self.journal_tail_exposed {
            return dir;
        }
        let files: Vec<PathBuf> = self
            .disk
            .paths_under(&dir)
            .into_iter()
            .filter(|p| *p != dir && !p.ends_with(cairn_engine::metadata::JOURNAL))
            .collect();
        assert!(!files.is_empty(), "a booted node has superblock slots");
        files[self.rng.gen_range(0..files.len())].clone()
    }

    /// An operator removes a partition's directory (durably) while the node is down.
    pub(crate) fn remove_partition_dir(&mut self, key: PartitionKey) {
        let dir = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), key.0, key.1, key.2);
        if cairn_engine::env::Disk::exists(&self.disk, &dir).unwrap_or(false) {
            cairn_engine::env::Disk::remove_dir_all(&self.disk, &dir).expect("remove");
            let parent = dir.parent().expect("parent");
            cairn_engine::env::Disk::sync_dir(&self.disk, parent).expect("sync");
            self.disk.forgive_io_time();
            self.removed.insert(key);
            self.debris_dir_removed(key);
            self.event(format!("fault an operator removed {}", dir.display()));
        }
    }

    /// The node goes down: its tasks are gone, every answer not yet given is in doubt.
    pub(crate) fn go_down(&mut self, power: bool) {
        // What the cleaners deleted before the crash happened: judged now.
        if let Err(v) = self.drain_deletions() {
            self.fail(v);
        }
        if self.disk.is_crashed() {
            // The crash struck inside a disk call: a cleaner pass may have recorded a new
            // log start and not yet said so.
            for part in self.parts.values_mut() {
                part.log_start_unknown = true;
            }
        }
        // Members rejoin a booted node with their turns afresh.
        self.group_polls.clear();
        // A group poll whose answer the crash took may have stored any offset it read.
        for ((s, t), holder) in std::mem::take(&mut self.auto_commits).into_values() {
            if let Holder::Group { id, incarnation } = holder {
                // A group the model saw deleted has no offsets to store into any more.
                let live = self
                    .model
                    .topic(s, t)
                    .and_then(|topic| topic.groups.get(&id));
                if live.map(|(_, i)| *i) != Some(incarnation) {
                    continue;
                }
            }
            let cluster = self.cluster;
            for key in self.model.keys_of(s, Some(t)) {
                if let Some(identity) = self.model.identity(cluster, key) {
                    let part = self.parts.entry(identity).or_default();
                    part.unknown_offsets.insert(holder);
                    part.offsets
                        .entry(holder)
                        .or_insert((None, BTreeSet::new()));
                }
            }
        }
        // An explicit deletion whose answer the crash took may have happened.
        for key in std::mem::take(&mut self.deleting) {
            if let Some(identity) = self.model.identity(self.cluster, key) {
                self.parts.entry(identity).or_default().log_start_unknown = true;
            }
        }
        // A sync failure scripted for the process that went down is not the next one's.
        self.disk.cancel_sync_failures();
        self.restarts += 1;
        self.report.restarts += 1;
        self.node = None;
        let after_shutdown = std::mem::take(&mut self.shutting_down);
        self.exit.power |= power;
        // Membership is a live session's: it does not outlive the process.
        self.members.clear();
        self.generations.clear();
        self.due.clear();
        self.metadata_lies_lost.clear();
        self.checkpoint_crash_armed = false;
        self.deletion_crash_armed = false;
        let in_flight: Vec<Sent> = std::mem::take(&mut self.in_flight).into_values().collect();
        self.in_doubt.extend(in_flight);
        self.deleting_users.clear();
        if power {
            let dir = Path::new(NODE_ROOT).join("metadata");
            for path in self.disk.paths_under(&dir) {
                if self.disk.has_lied_pages(&path) {
                    self.journal_tail_exposed |= path.to_string_lossy().contains("superblock");
                    self.metadata_lies_lost.insert(path);
                }
            }
            // More often after a graceful shutdown: its clean record then outlives the
            // cache it vouched for.
            let keep = if after_shutdown { 0.3 } else { 0.1 };
            if self.faulty && self.rng.gen_bool(keep) {
                self.disk.power_loss_keeping_boot_id();
                self.event("fault power loss (the kernel keeps its boot id)");
                self.decision("PowerLossKeptBootId");
            } else {
                self.disk.power_loss();
                self.event("fault power loss");
            }
            for part in self.parts.values_mut() {
                for (acked, candidates) in part.offsets.values_mut() {
                    candidates.insert(*acked);
                }
            }
        } else {
            self.disk.process_crash();
            self.event("fault process crash");
        }
        self.disk.cancel_crashes();
        if self.faulty && self.chance(self.profile.dir_removal) {
            let keys: Vec<PartitionKey> = self.model.identities(self.cluster).into_keys().collect();
            if !keys.is_empty() {
                let key = keys[self.rng.gen_range(0..keys.len())];
                self.remove_partition_dir(key);
            }
        }
        if self.faulty && self.chance(self.profile.metadata_damage) {
            let dir = self.metadata_damage_target();
            if self.rng.gen_bool(0.7) {
                if let Some((path, at)) = self.disk.flip_random_bit(&dir) {
                    self.event(format!("fault bit flip {} at {at}", path.display()));
                }
            } else if let Some((path, at)) = self.disk.add_bad_sector(&dir) {
                self.event(format!("fault bad sector {} at {at}", path.display()));
            }
        }
        let mut faults = self.disk.faults();
        faults.capacity = None;
        self.disk.set_faults(faults);
        if self.disk_full_until.take().is_some() {
            self.last_full = self.now();
        }
        if self.faulty && self.chance(self.profile.debris) {
            self.plant_debris();
        }
    }
}

/// Takes the node down (a process crash or a power loss), then boots it again.
pub(crate) fn restart(world: &Shared, executor: &mut Executor, power: bool) -> Checked<()> {
    lock(world).go_down(power);
    boot(world, executor)?;
    let crashed = lock(world).disk.is_crashed();
    if crashed {
        // The boot itself crashed: down again.
        executor.kill_all();
        return restart(world, executor, false);
    }
    Ok(())
}

/// Faults healed: the node must boot and serve every partition and a new stream.
pub(crate) fn liveness(world: &Shared, executor: &mut Executor) -> Checked<()> {
    {
        let mut w = lock(world);
        w.event("phase liveness: faults healed");
        w.disk.heal();
        w.disk.disarm_crash();
        w.faulty = false;
    }
    let power = lock(world).rng.gen_bool(0.5);
    restart(world, executor, power)?;
    if lock(world).refused {
        return Ok(());
    }
    let (client, name, keys) = {
        let w = lock(world);
        let client = w.node.clone().expect("up").client(0x11fe);
        let name = format!("live{}", w.next_name);
        let keys: Vec<PartitionIdentity> = w
            .model
            .identities(w.cluster)
            .into_iter()
            .filter(|(k, _)| !w.removed.contains(k))
            .map(|(_, id)| id)
            .collect();
        (client, name, keys)
    };
    let w2 = world.clone();
    let checked = block(executor, async move {
        let created = client.execute_traced(
            cairn_engine::node::ops::MetaOp::CreateStream(
                iggy_binary_protocol::requests::streams::CreateStreamRequest {
                    name: iggy_binary_protocol::WireName::new(&name).expect("a name"),
                    options: iggy_binary_protocol::WireOptions::empty(),
                },
            ),
            0,
        );
        {
            lock(&w2).send_op_liveness(AdminOp::CreateStream(name.clone()));
        }
        let reply = created.await;
        {
            let mut w = lock(&w2);
            w.judge_meta(
                u32::MAX,
                super::oracle::Asker {
                    client: client.id(),
                    user: 0,
                },
                reply,
            )?;
            if !w.pending.is_empty() {
                return Err(violation(
                    INV_LIVENESS,
                    "the liveness stream's op is out of order".into(),
                ));
            }
        }
        for identity in keys {
            let key = super::key(&identity);
            let (batch, ids) = lock(&w2).batch(1);
            let sent = client
                .send(
                    &sid(key.0),
                    &sid(key.1),
                    &WirePartitioning::PartitionId(key.2),
                    batch,
                )
                .await
                .map_err(|e| {
                    violation(
                        INV_LIVENESS,
                        format!("partition {key:?}: a send failed after faults healed: {e}"),
                    )
                })?;
            lock(&w2).judge_send(key.0, key.1, &ids, Default::default(), Ok(sent))?;
            verify(&w2, &client, identity, false).await?;
        }
        let deleted = client.node().clean(None).await.map_err(|e| {
            violation(
                INV_LIVENESS,
                format!("a cleaner pass after faults healed: {e}"),
            )
        })?;
        lock(&w2).judge_deletions(&deleted)
    });
    checked.unwrap_or_else(|| Err(violation(INV_LIVENESS, "the liveness phase stalled".into())))
}

impl NodeWorld {
    fn send_op_liveness(&mut self, op: AdminOp) {
        self.in_flight.remove(&u32::MAX);
        let sent = Sent {
            op,
            at: self.now(),
            wall: self.wall(),
            jumps: self.jumps,
            fills: self.fills,
            full: self.disk_full_until.is_some(),
        };
        self.in_flight.insert(u32::MAX, sent);
    }
}

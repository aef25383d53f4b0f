//! The nemesis: crashes (a process, a power loss, inside a disk call), bounces, blank
//! replicas (a replaced disk, a lost state record), partitions (both ways, one way,
//! flapping) and heals, on its own clock
//! ([`World::while_nemesis`]), never taking more than a minority out at once.

use super::*;

impl World {
    /// Replica `at` goes down: a power loss as often as the profile says, else a process
    /// crash.
    pub(super) fn crash(&mut self, at: usize) {
        let power = self.rng.gen_bool(self.profile.power_loss);
        self.crash_as(at, power);
    }

    pub(super) fn crash_as(&mut self, at: usize, power: bool) {
        self.count_installs(at);
        // A crash still to strike (armed, or scripted at a step) dies with this process.
        self.replicas[at].armed = false;
        self.replicas[at].disk.disarm_crash();
        self.decision(if power {
            "ClusterPowerLoss"
        } else {
            "ClusterProcessCrash"
        });
        let replica = &mut self.replicas[at];
        replica.group = None;
        self.executor.kill_group(NODE_GROUP_BASE + replica.id);
        if power {
            replica.disk.power_loss();
            self.net.power_off(replica.ip);
        } else {
            replica.disk.process_crash();
        }
        self.crashes += 1;
        let kind = if power { "power loss" } else { "process crash" };
        let id = replica.id;
        self.event(format!("replica {id}: {kind}"));
        let mark = if power {
            MarkKind::PowerLoss
        } else {
            MarkKind::ProcessCrash
        };
        self.mark(&replica_lane(id), mark, kind.into());
    }

    pub(super) async fn restart_all(&mut self) {
        self.net.heal();
        for at in 0..self.replicas.len() {
            if self.replicas[at].armed && self.replicas[at].disk.is_crashed() {
                self.crash(at);
            } else if self.replicas[at].armed {
                self.replicas[at].disk.disarm_crash();
                self.replicas[at].armed = false;
            }
            if self.replicas[at].group.is_none() {
                self.net.power_on(self.replicas[at].ip);
                self.start(at).await;
            }
        }
    }

    pub(super) fn up(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|&at| self.replicas[at].group.is_some())
            .collect()
    }

    /// Brings replica `at` (down) back blank: on a new disk, or on its disk without its
    /// state record (its vote); its files are then set aside by its boot.
    pub(super) async fn blank(&mut self, at: usize) {
        let id = self.replicas[at].id;
        let lose_state = self.rng.gen_bool(self.profile.state_lost);
        let state = group_dir(id).join(cairn_cluster::log::STATE_FILE);
        if lose_state
            && cairn_engine::env::Disk::exists(&self.replicas[at].disk, &state).unwrap_or(false)
        {
            self.replicas[at].disk.remove_by_operator(&state);
            self.decision("ClusterStateLost");
            self.event(format!("replica {id}: its state record is lost"));
            self.mark(
                &replica_lane(id),
                MarkKind::DiskFault,
                "state record lost".into(),
            );
        } else {
            let replica = &mut self.replicas[at];
            replica.disk = replica_disk(self.seed, id, replica.disks, &self.clock);
            replica.disks += 1;
            replica.damaged.clear();
            replica.found_damaged.clear();
            replica.env.disk = wrap_disk(&replica.disk);
            self.decision("ClusterDiskReplaced");
            self.event(format!("replica {id}: its disk is replaced by a blank one"));
            self.mark(
                &replica_lane(id),
                MarkKind::DiskFault,
                "disk replaced".into(),
            );
        }
        self.net.power_on(self.replicas[at].ip);
        self.start(at).await;
    }

    /// Stops replica `at` as an operator's shutdown does: a leader hands over first. The
    /// leader it then knows of, if any.
    pub(super) async fn stop_gracefully(&mut self, at: usize) -> Option<NodeId> {
        let group = self.replicas[at].group.clone()?;
        let old = group.id();
        let handed = group.stop().await;
        self.count_installs(at);
        let replica = &mut self.replicas[at];
        replica.group = None;
        replica.armed = false;
        replica.disk.disarm_crash();
        self.executor.kill_group(NODE_GROUP_BASE + replica.id);
        replica.disk.process_crash();
        let id = replica.id;
        let to = handed.filter(|l| *l != old);
        if to.is_some() {
            self.decision("ClusterLeaderHandedOver");
        }
        let label = match to {
            Some(l) => format!("stopped gracefully, leadership to {}", show_id(l)),
            None => "stopped gracefully, no replica took over in time".to_owned(),
        };
        self.event(format!("replica {id}: {label}"));
        self.mark(&replica_lane(id), MarkKind::Note, label);
        to
    }

    /// Replicas that count as down: down, with a crash armed, blank and not yet added, or
    /// with partition replicas that do not count in their groups yet.
    pub(super) fn out(&self) -> usize {
        self.out_members(&self.part_views_of_all()).len()
    }

    /// The members [`Self::out`] counts, by index.
    fn out_members(&self, views: &[Vec<GroupView>]) -> BTreeSet<usize> {
        (0..self.replicas.len())
            .filter(|&at| {
                let r = &self.replicas[at];
                r.group.is_none() || r.armed || !r.joined || self.parts_outside(at, views)
            })
            .collect()
    }

    /// Whether the world's topics place their partitions on fewer members than it has.
    fn placing(&self) -> bool {
        (2..self.replicas.len()).contains(&usize::from(self.profile.factor))
    }

    /// Whether member `at` may lose what its disk holds (a blank disk, a damaged
    /// partition): every partition it holds a copy of keeps a majority of its copies not
    /// out, both where it is placed and in every configuration a replica of it runs under
    /// (a change of voters may not have moved it yet). With a replication factor below the
    /// member count, a minority of the members may be a majority of a partition's copies
    /// (two of five members, two of a partition's three). `None` when it may not; else how
    /// many partitions placed on fewer members than there are it holds.
    pub(super) fn copies_to_spare(&self, at: usize) -> Option<usize> {
        let views = self.part_views_of_all();
        let mut out = self.out_members(&views);
        out.insert(at);
        let out: BTreeSet<MemberId> = out.iter().map(|&i| self.replicas[i].id).collect();
        let me = self.replicas[at].id;
        let all: BTreeSet<MemberId> = self.replicas.iter().map(|r| r.id).collect();
        let mut partitions: BTreeSet<cairn_engine::partition::PartitionIdentity> =
            views.iter().flatten().map(|v| v.partition).collect();
        let state = self.replicas.iter().find_map(|r| r.node.as_ref());
        partitions.extend(
            state
                .map(|n| n.view().state.partitions())
                .unwrap_or_default(),
        );
        let mut held = 0;
        for identity in partitions {
            // Where copies are placed, a placement unknown now (no metadata leader) may be
            // any three.
            let placed = match self.placed_members_known(identity) {
                Some(placed) => placed,
                None if self.placing() => return None,
                None => all.clone(),
            };
            let configured = views.iter().flatten().filter(|v| v.partition == identity);
            let member = cairn_cluster::types::member_of;
            let configured = configured.map(|v| v.voters.iter().map(|id| member(*id)).collect());
            let sets: Vec<BTreeSet<MemberId>> = std::iter::once(placed.clone())
                .chain(configured)
                .filter(|set: &BTreeSet<MemberId>| !set.is_empty())
                .collect();
            if !sets.iter().any(|set| set.contains(&me)) {
                continue;
            }
            let spared =
                |set: &BTreeSet<MemberId>| set.intersection(&out).count() <= (set.len() - 1) / 2;
            if !sets.iter().all(spared) {
                return None;
            }
            held += usize::from(placed.len() < all.len());
        }
        Some(held)
    }

    /// One nemesis step: heal, crash, damage a partition, bounce, restart one, partition, or
    /// nothing.
    pub(super) async fn nemesis(&mut self) {
        // An armed crash that struck: the process goes down now.
        for at in 0..self.replicas.len() {
            if self.replicas[at].armed && self.replicas[at].disk.is_crashed() {
                self.decision("ClusterCrashInIo");
                self.crash(at);
            }
        }
        let down: Vec<usize> = (0..self.replicas.len())
            .filter(|&at| self.replicas[at].group.is_none())
            .collect();
        // A replica with a crash armed counts as down: it may go any moment.
        let out = self.out();
        let minority = (self.replicas.len() - 1) / 2;
        if self.rng.gen_bool(self.profile.heal) {
            self.event("heal".into());
            self.mark(NETWORK_LANE, MarkKind::Heal, "heal".into());
            self.restart_all().await;
        } else if self.rng.gen_bool(self.profile.total_power_loss) {
            // Every replica at once (a data centre's power): what was acknowledged is on a
            // quorum's stable storage, so it survives.
            self.event("every replica loses power".into());
            self.decision("ClusterTotalPowerLoss");
            for at in 0..self.replicas.len() {
                if self.replicas[at].group.is_some() {
                    self.crash_as(at, true);
                }
            }
            self.restart_all().await;
        } else if out < minority && self.rng.gen_bool(self.profile.graceful) {
            if let Some(at) = self.leader_at() {
                self.stop_gracefully(at).await;
            }
        } else if out < minority && self.rng.gen_bool(self.profile.blank) {
            let at = self.victim();
            if let Some(held) = self.copies_to_spare(at) {
                if held > 0 {
                    self.decision("ClusterPlacedCopyBlank");
                }
                self.crash(at);
                self.blank(at).await;
            }
        } else if out < minority && self.rng.gen_bool(self.profile.crash) {
            let at = self.victim();
            if self.rng.gen_bool(0.5) && !self.replicas[at].armed {
                // Inside one of its next disk calls (a write, a sync, a rename).
                let calls = self.rng.gen_range(0..40);
                self.replicas[at].disk.arm_crash(calls);
                self.replicas[at].armed = true;
                let id = self.replicas[at].id;
                self.event(format!("replica {id}: crash armed {calls} calls ahead"));
                let label = format!("crash armed {calls} calls ahead");
                self.mark(&replica_lane(id), MarkKind::Note, label);
            } else {
                self.crash(at);
            }
        } else if self.profile.messages
            && out < minority
            && self.rng.gen_bool(messages::PARTITION_DAMAGE)
        {
            let at = self.victim();
            if self.copies_to_spare(at).is_some() {
                self.damage_partition(at).await;
            }
        } else if out < minority && self.rng.gen_bool(self.profile.bounce) {
            let at = self.victim();
            self.crash(at);
            self.net.power_on(self.replicas[at].ip);
            self.start(at).await;
        } else if !down.is_empty() && self.rng.gen_bool(0.3) {
            let at = down[self.rng.gen_range(0..down.len())];
            self.net.power_on(self.replicas[at].ip);
            self.start(at).await;
        } else if self.rng.gen_bool(self.profile.partition) {
            let a = self.rng.gen_range(0..self.replicas.len());
            let b = (a + self.rng.gen_range(1..self.replicas.len())) % self.replicas.len();
            self.partition(a, b).await;
        }
    }

    /// Partitions the hosts of replicas `a` and `b`: both ways, one way (`a` cannot reach
    /// `b`: a leader may still be heard and not hear back), or flapping (cut and healed a
    /// few times, a fraction of an election timeout apart, left either way).
    async fn partition(&mut self, a: usize, b: usize) {
        let (ip_a, ip_b) = (self.replicas[a].ip, self.replicas[b].ip);
        let (id_a, id_b) = (self.replicas[a].id, self.replicas[b].id);
        match self.rng.gen_range(0..4) {
            0 => {
                self.net.cut_one_way(ip_a, ip_b);
                self.decision("ClusterOneWayPartition");
                self.event(format!("one-way partition {id_a} -> {id_b}"));
                self.mark(
                    NETWORK_LANE,
                    MarkKind::Partition,
                    format!("{id_a} -> {id_b}"),
                );
            }
            1 => {
                self.decision("ClusterFlappingPartition");
                self.event(format!("flapping partition {id_a} | {id_b}"));
                self.mark(
                    NETWORK_LANE,
                    MarkKind::Partition,
                    format!("{id_a} |~| {id_b}"),
                );
                for _ in 0..self.rng.gen_range(2..6) {
                    self.net.partition(ip_a, ip_b);
                    let cut = Duration::from_millis(self.rng.gen_range(20..200));
                    cairn_engine::env::Clock::sleep(&self.clock, cut).await;
                    self.net.heal_partition(ip_a, ip_b);
                    let healed = Duration::from_millis(self.rng.gen_range(20..200));
                    cairn_engine::env::Clock::sleep(&self.clock, healed).await;
                }
                // It ends healed (this pair's earlier cuts too) or cut both ways.
                if self.rng.gen_bool(0.5) {
                    self.net.partition(ip_a, ip_b);
                    self.event(format!("flapping partition {id_a} | {id_b} ends cut"));
                } else {
                    self.event(format!("flapping partition {id_a} | {id_b} ends healed"));
                    self.mark(NETWORK_LANE, MarkKind::Heal, format!("{id_a} ~ {id_b}"));
                }
            }
            _ => {
                self.net.partition(ip_a, ip_b);
                self.decision("ClusterPartition");
                self.event(format!("partition {id_a} | {id_b}"));
                self.mark(
                    NETWORK_LANE,
                    MarkKind::Partition,
                    format!("{id_a} | {id_b}"),
                );
            }
        }
    }

    /// A replica to crash: the leader as often as the profile says, else any that is up.
    pub(super) fn victim(&mut self) -> usize {
        let up = self.up();
        match self.leader_at() {
            Some(at) if self.rng.gen_bool(self.profile.crash_leader) => at,
            _ => up[self.rng.gen_range(0..up.len())],
        }
    }

    /// Waits for `future`, the nemesis acting whenever its next time comes meanwhile
    /// (every 1 ms to `nemesis_gap_ms`, however fast proposals go); `None` when `limit`
    /// passes first.
    pub(super) async fn while_nemesis<T>(
        &mut self,
        future: impl std::future::Future<Output = T>,
        limit: Duration,
    ) -> Option<T> {
        let deadline = self.clock.now_nanos() + limit.as_nanos() as u64;
        let mut future = std::pin::pin!(future);
        loop {
            let now = self.clock.now_nanos();
            if self.nemesis_on && now >= self.next_nemesis {
                self.nemesis().await;
                let gap = self.rng.gen_range(1..=self.profile.nemesis_gap_ms) * 1_000_000;
                self.next_nemesis = self.clock.now_nanos() + gap;
                continue;
            }
            let wake = if self.nemesis_on {
                self.next_nemesis.min(deadline)
            } else {
                deadline
            };
            let nap = cairn_engine::env::Clock::sleep(
                &self.clock,
                Duration::from_nanos(wake.saturating_sub(now)),
            );
            match cairn_engine::env::race(future.as_mut(), nap).await {
                cairn_engine::env::Either::Left(out) => return Some(out),
                cairn_engine::env::Either::Right(()) if self.clock.now_nanos() >= deadline => {
                    return None
                }
                cairn_engine::env::Either::Right(()) => {}
            }
        }
    }

    /// Whether `group` is still the running process of its replica: no crash since, and no
    /// armed crash that struck its disk (the process goes down at the nemesis' next step).
    pub(super) fn still_up(&self, group: &Arc<MetaGroup>) -> bool {
        self.replicas.iter().any(|r| {
            r.group.as_ref().is_some_and(|g| Arc::ptr_eq(g, group))
                && !(r.armed && r.disk.is_crashed())
        })
    }
}

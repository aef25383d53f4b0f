//! Messages through the partition groups (profile `messages`): every member's node runs its
//! replicas of the partitions' groups (`cairn_cluster::partition::groups::PartGroups`), as a
//! server does, and the client sends messages through a random member (proposed at the
//! group's leader, or forwarded to it) and polls a random member's replica.
//!
//! Judged:
//! - **read committed**: a message a poll read stays where it was read (a replica that
//!   showed a batch its group never committed is caught when the final read differs), and
//!   every message read was sent;
//! - after the final heal, once a last send to every partition went through (liveness) and
//!   every replica applied it: **agreement**, every replica's partition holds the same
//!   batches, byte for byte; **nothing lost**, every acknowledged message is where its
//!   acknowledgement put it (unless its partition was purged or deleted since);
//!   **nothing unsent**, offsets are dense from 0 and each message is one the client sent,
//!   held once.
//!
//! A send whose answer never came (timed out, refused, its member crashed) is in doubt: it
//! may be held once, or not at all.

use super::*;
use cairn_engine::env::{Disk, OpenMode};
use cairn_engine::node::Node;
use cairn_engine::partition::partition_dir;
use cairn_engine::state::key_of;
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::{WireConsumer, WirePartitioning, WirePollingStrategy};

pub const INV_MESSAGES_AGREE: &str = "replicas hold the same batches at every offset";
pub const INV_MESSAGE_LOST: &str = "an acknowledged message is never lost";
pub const INV_MESSAGE_UNSENT: &str =
    "a partition holds only messages a client sent, each once, at dense offsets";
/// How long after the final heal a member's refused replica may take to start again: two
/// of the groups' longest waits between tries (30 s; one more failure as its peers come
/// back may start a last wait), and a margin.
const GROUPS_RUN_DEADLINE: Duration = Duration::from_secs(70);
pub const INV_READ_COMMITTED: &str = "a message a poll read stays where it was read";

/// How long the client waits for a send's answer (a group without a leader keeps it up to
/// `SEND_DEADLINE`, 10 s, before it answers).
pub(super) const SEND_TIMEOUT: Duration = Duration::from_secs(12);
/// Most messages one poll asks for.
const POLL_COUNT: u32 = 1000;
/// The longest the final round waits for one replica's copy of a partition.
const READ_LIMIT: Duration = Duration::from_secs(5);
/// How often a nemesis step (of a world that runs messages) damages a partition's bytes.
pub(super) const PARTITION_DAMAGE: f64 = 0.04;

/// Where a message sits: the topic's name `s/t`, the partition, its nonce and the offset.
pub(super) type Place = (String, u32, u64, u64);

/// A message as a replica holds it: its offset, its payload, and a hash of its batch's
/// header and its own frame (stamps, id and checksums included: replicas hold the same
/// bytes).
type Held = (u64, String, u64);

/// The client's model of the messages it sent and read.
#[derive(Debug, Default)]
pub(super) struct Messages {
    /// Acknowledged messages: payload → where the acknowledgement put it.
    pub(super) acked: BTreeMap<String, Place>,
    /// Messages sent without an answer: held once, or not at all.
    doubt: BTreeSet<String>,
    /// What polls read: place → payload.
    seen: BTreeMap<Place, String>,
    /// Where each message was first found (read, or in a final copy): a message is sent
    /// once, so it is held in one place only, whatever partition or incarnation.
    placed: BTreeMap<String, Place>,
    /// Messages sent so far (each payload is `m{n}`).
    sent: u64,
}

/// Where two replicas' copies hold different messages at the same position, said.
fn overlap_differs(copies: &[(MemberId, Vec<Held>)]) -> Option<String> {
    let (first_id, first) = copies.first()?;
    copies[1..].iter().find_map(|(id, copy)| {
        let at = first.iter().zip(copy).position(|(a, b)| a != b)?;
        Some(format!(
            "replica {id} holds {:?}, replica {first_id} {:?}",
            copy[at], first[at]
        ))
    })
}

/// A partition of the final state, by the client's names.
#[derive(Debug, Clone)]
struct Final {
    topic: String,
    identity: cairn_engine::partition::PartitionIdentity,
}

/// The partition groups' tuning here: production's timing; a checkpoint every 2 to 8
/// entries (an eighth of the profile's `snapshot_every`: a partition sees few sends in a
/// seed), so that checkpoints happen and restarts begin from them; a WAL that keeps half
/// as many behind each (0 to 4), so a replica that was down or cut off falls behind its
/// leader's purged WAL and refills its partition from its peers (`refill`).
fn tuning(profile: &ClusterProfile) -> Tuning {
    let checkpoint_every = (profile.snapshot_every / 8).max(2);
    Tuning {
        heartbeat: Duration::from_millis(100),
        election: (Duration::from_millis(400), Duration::from_millis(800)),
        checkpoint_every,
        log_kept: checkpoint_every / 2,
        // Production's: a group idle that long sleeps (`quiet`), several times a seed.
        quiet_after: cairn_cluster::partition::groups::QUIET_AFTER,
    }
}

/// Where member `id` keeps its partition groups' WALs.
fn parts_dir(id: MemberId) -> PathBuf {
    node_root(id).join("cluster").join("partitions")
}

impl World {
    /// Starts member `at`'s partition groups over its node (booted), as a server does once
    /// its metadata replica (`group`) started.
    pub(super) fn start_parts(&mut self, at: usize, group: &MetaGroup) {
        let Some(node) = self.replicas[at]
            .node
            .clone()
            .filter(|_| self.profile.messages)
        else {
            return;
        };
        let env = self.replicas[at].env.clone();
        let id = self.replicas[at].id;
        let meta = cairn_cluster::group::Replica::clone(group);
        let parts = PartGroups::new(&env, node, meta, parts_dir(id), tuning(&self.profile))
            .with_hooks(crate::canary::part_machine_hooks(env.clock.clone()));
        parts.install();
        drop(env.tasks.spawn(Box::pin(parts.clone().run())));
        self.replicas[at].parts = Some(parts);
    }

    /// Crashes replica `at`, flips a byte of one of its partitions' segment logs (damage to
    /// bytes it may have synced, as a bad sector or an operator's tool does), and starts it
    /// again: its boot fences the partition (or truncates it, above its durable end), and
    /// its group's start repairs it from its peers' segments.
    pub(super) async fn damage_partition(&mut self, at: usize) {
        self.crash(at);
        let id = self.replicas[at].id;
        let root = node_root(id);
        let mut logs = Vec::new();
        for p in &self.replicas[at].served {
            let dir = partition_dir(&root, p.stream_id, p.topic_id, p.partition_id);
            let disk = &self.replicas[at].disk;
            for entry in Disk::read_dir(disk, &dir).unwrap_or_default() {
                let path = dir.join(&entry.name);
                let len = Disk::open(disk, &path, OpenMode::Read).and_then(|f| f.len());
                match len {
                    Ok(len) if entry.name.ends_with(".log") && len > 0 => {
                        logs.push((key_of(p), path, len))
                    }
                    _ => {}
                }
            }
        }
        if !logs.is_empty() {
            let (key, path, len) = logs.swap_remove(self.rng.gen_range(0..logs.len()));
            let position = self.rng.gen_range(0..len);
            let disk = &self.replicas[at].disk;
            let mut byte = [0u8];
            let read = Disk::open(disk, &path, OpenMode::Read)
                .and_then(|f| f.read_at(&mut byte, position));
            assert_eq!(read.ok(), Some(1), "a byte inside the file");
            disk.overwrite(&path, position, &[byte[0] ^ 0x5a]);
            self.replicas[at].damaged.insert(key);
            self.decision("ClusterPartitionDamaged");
            let what = format!("a byte of {} at {position} flipped", path.display());
            self.event(format!("replica {id}: {what}"));
            self.mark(&replica_lane(id), MarkKind::DiskFault, what);
        }
        self.net.power_on(self.replicas[at].ip);
        self.start(at).await;
    }

    /// Counts what member `at`'s groups did, before its process goes; a damaged partition
    /// its boot fenced and whose group then ran was repaired (a group starts only over a
    /// sound replica).
    pub(super) fn count_parts(&mut self, at: usize, parts: &PartGroups) {
        use std::sync::atomic::Ordering::Relaxed;
        let running: BTreeSet<cairn_engine::state::PartitionKey> = parts
            .views()
            .into_iter()
            .filter(|v| v.replica.is_some() && v.failed.is_none())
            .map(|v| key_of(&v.partition))
            .collect();
        let replica = &mut self.replicas[at];
        let repaired: Vec<_> = replica
            .found_damaged
            .intersection(&running)
            .copied()
            .collect();
        for key in repaired {
            replica.damaged.remove(&key);
            replica.found_damaged.remove(&key);
        }
        let counts = parts.counts();
        let (skipped, checkpoints) = (
            counts.skipped.load(Relaxed),
            counts.checkpoints.load(Relaxed),
        );
        let (refilled, installed) = (
            counts.refilled.load(Relaxed),
            counts.installed.load(Relaxed),
        );
        self.event(format!(
            "groups of this process: {skipped} sends skipped, {checkpoints} checkpoints, {refilled} batches refilled from peers, {installed} checkpoints installed"
        ));
        if checkpoints > 0 {
            self.decision("ClusterMessagesCheckpointed");
        }
        if refilled > 0 && installed > 0 {
            self.decision("ClusterMessagesRefilled");
        }
        if counts.repaired.load(Relaxed) > 0 {
            self.decision("ClusterPartitionRepaired");
        }
        if counts.balanced.load(Relaxed) > 0 {
            self.decision("ClusterLeadershipSpread");
        }
        if counts.slept.load(Relaxed) > 0 {
            self.decision("ClusterGroupsSlept");
        }
        if counts.woken.load(Relaxed) > 0 {
            self.decision("ClusterQuietWoken");
        }
        for (count, row) in [
            (&counts.made_on_ask, "ClusterGroupMadeOnAsk"),
            (&counts.taken_unplaced, "ClusterWriteOfUnplacedMember"),
            (&counts.released, "ClusterReplicaReleased"),
            (&counts.read_elsewhere, "ClusterReadOfUnplacedMember"),
        ] {
            if count.load(Relaxed) > 0 {
                self.decision(row);
            }
        }
        let batched = parts.networks().batch_counts();
        let (exchanges, requests) = (
            batched.exchanges.load(Relaxed),
            batched.requests.load(Relaxed),
        );
        if requests > exchanges {
            self.decision("ClusterRaftBatched");
        }
    }

    /// Whether member `at`'s partition replicas do not all count in their groups yet: a
    /// member whose groups lag the metadata group's voters counts as out. Judged for every
    /// group any up member runs (a member whose node has not learnt of a group yet runs no
    /// replica of it, and counts out): its replica counts where the group's leader (the up
    /// replica leading in the highest term) has it among its voters; in a group without a
    /// leader, where its own configuration has it; either only while no up replica's
    /// configuration is joint (seed 0x5f5e39f: a leader's uniform configuration, appended
    /// there only, let a second disk go while its followers were still joint, leaving the
    /// old half one replica); a group made nowhere yet counts no one out.
    pub(super) fn parts_outside(&self, at: usize, all: &[Vec<GroupView>]) -> bool {
        if self.replicas[at].parts.is_none() {
            return false;
        }
        let mine = &all[at];
        let every: Vec<&GroupView> = all.iter().flatten().collect();
        let groups: BTreeSet<cairn_engine::partition::PartitionIdentity> =
            every.iter().map(|v| v.partition).collect();
        let counted = |group: cairn_engine::partition::PartitionIdentity| {
            let of_group = || every.iter().filter(move |v| v.partition == group);
            let leader = of_group()
                .filter(|v| v.replica.is_some() && v.leader == v.replica)
                .max_by_key(|v| v.term);
            let never_made = of_group().all(|v| v.voters.is_empty());
            // A change under way anywhere (a leader's uniform configuration may be appended
            // only there, its followers still joint) counts the member out.
            let settled = of_group().all(|v| !v.joint);
            let mine = mine.iter().find(|v| v.partition == group);
            // A group placed elsewhere needs no replica of this member.
            if mine.is_some_and(|m| !m.placed) {
                return true;
            }
            match (leader, mine.and_then(|m| m.replica)) {
                (Some(l), Some(me)) => settled && l.voters.contains(&me),
                (Some(_), None) => false,
                (None, _) => never_made || (settled && mine.is_some_and(|m| m.voter)),
            }
        };
        groups.into_iter().any(|group| !counted(group))
    }

    /// Each member's [`PartGroups::views`] (none for a member down or without groups), by
    /// position.
    pub(super) fn part_views_of_all(&self) -> Vec<Vec<GroupView>> {
        let views = |r: &Replica| match (&r.group, &r.parts) {
            (Some(_), Some(parts)) => parts.views(),
            _ => Vec::new(),
        };
        self.replicas.iter().map(views).collect()
    }

    /// An up member whose node runs partition groups, at random.
    pub(super) fn member_with_groups(&mut self) -> Option<usize> {
        let up: Vec<usize> = self
            .up()
            .into_iter()
            .filter(|&at| self.replicas[at].parts.is_some())
            .collect();
        (!up.is_empty()).then(|| up[self.rng.gen_range(0..up.len())])
    }

    /// A new message's payload (`m{n}`), in doubt until acknowledged.
    pub(super) fn new_message(&mut self) -> String {
        self.messages.sent += 1;
        let payload = format!("m{}", self.messages.sent);
        self.messages.doubt.insert(payload.clone());
        payload
    }

    /// Sends one or two new messages to topic `topic` (`s/t`) through a random member,
    /// to the partition `partitioning` names.
    pub(super) async fn send_messages(
        &mut self,
        topic: &str,
        partitioning: WirePartitioning,
    ) -> bool {
        let Some(at) = self.member_with_groups() else {
            return true;
        };
        let count = self.rng.gen_range(1..=2);
        let payloads: Vec<String> = (0..count).map(|_| self.new_message()).collect();
        let mut batch = cairn_engine::format::BatchBuilder::new(0);
        for payload in &payloads {
            // Each message's id is its number (`m{n}`).
            let id: u128 = payload[1..].parse().expect("a message's number");
            batch.push(id, 0, payload.as_bytes(), b"");
        }
        let (stream, topic_id) = topic_ids_owned(topic);
        let client = self.replicas[at]
            .node
            .as_ref()
            .expect("a node")
            .client(0x5e7d);
        let send = async move {
            client
                .send(&stream, &topic_id, &partitioning, batch.build())
                .await
        };
        let id = self.replicas[at].id;
        let label = format!("send {} to {topic} at replica {id}", payloads.join(","));
        let span = self.begin(CLIENT_LANE, label.clone());
        let answer = self.while_nemesis(send, SEND_TIMEOUT).await;
        match answer {
            Some(Ok(sent)) => {
                self.end(span, SpanOutcome::Ok);
                let base = sent.ack.base_offset;
                self.event(format!(
                    "{label}: acknowledged at {}:{} offset {base}",
                    sent.partition, sent.nonce
                ));
                for (i, payload) in payloads.into_iter().enumerate() {
                    self.messages.doubt.remove(&payload);
                    let place = (
                        topic.to_owned(),
                        sent.partition,
                        sent.nonce,
                        base + i as u64,
                    );
                    self.messages.acked.insert(payload, place);
                }
                self.decision("ClusterMessagesReplicated");
            }
            Some(Err(e)) => {
                self.end(span, SpanOutcome::Refused(e.to_string()));
                self.event(format!("{label}: in doubt ({e})"));
            }
            None => {
                self.end(span, SpanOutcome::Lost("timed out".into()));
                self.event(format!("{label}: in doubt (timed out)"));
            }
        }
        true
    }

    /// Polls a random partition of topic `topic` at a random member, from offset 0: what
    /// it reads must stay where it was read, and must have been sent.
    pub(super) async fn poll_messages(&mut self, topic: &str) -> bool {
        let Some(at) = self.member_with_groups() else {
            return true;
        };
        let node = self.replicas[at].node.clone().expect("a node");
        let Some(partitions) = partitions_of(&node, topic) else {
            return true;
        };
        let partition = partitions[self.rng.gen_range(0..partitions.len())];
        // A member the partition is not placed on reads it at one it is placed on.
        let id = self.replicas[at].id;
        let poll =
            async move { read_from(&node, topic_ids_owned(topic), (partition, None), 0).await };
        let Some(Ok(Some((nonce, messages)))) = self.while_nemesis(poll, PROPOSE_TIMEOUT).await
        else {
            return true;
        };
        if !messages.is_empty() && self.member_leads(at, topic, partition) == Some(false) {
            self.decision("ClusterMessagesReadAtFollower");
        }
        for (offset, payload, _) in messages {
            let place = (topic.to_owned(), partition, nonce, offset);
            self.judge_read(&place, &payload, &format!("a poll at replica {id}"));
            self.messages.seen.entry(place).or_insert(payload);
            if self.failed() {
                break;
            }
        }
        true
    }

    /// Whether member `at`'s replica of `topic`'s `partition` leads its group, if it runs.
    pub(super) fn member_leads(&self, at: usize, topic: &str, partition: u32) -> Option<bool> {
        let node = self.replicas[at].node.as_ref()?;
        let identity = identity_of(node, topic, partition)?;
        let views = self.replicas[at].parts.as_ref()?.views();
        let view = views.into_iter().find(|v| v.partition == identity)?;
        view.replica?;
        Some(view.leader == view.replica)
    }

    /// A message read at `place`: sent, and where an earlier read or its acknowledgement
    /// put it.
    fn judge_read(&mut self, place: &Place, payload: &str, by: &str) {
        let known =
            self.messages.acked.contains_key(payload) || self.messages.doubt.contains(payload);
        if !known {
            self.fail(
                INV_MESSAGE_UNSENT,
                format!("{by} read {payload:?} at {place:?}, which the client never sent"),
            );
        } else if let Some(before) = self.messages.seen.get(place).filter(|p| *p != payload) {
            self.fail(
                INV_READ_COMMITTED,
                format!(
                    "{by} read {payload:?} at {place:?}, where an earlier poll read {before:?}"
                ),
            );
        } else if let Some(acked) = self.messages.acked.get(payload).filter(|a| *a != place) {
            self.fail(
                INV_MESSAGE_UNSENT,
                format!("{by} read {payload:?} at {place:?}, acknowledged at {acked:?}"),
            );
        } else if let Some(first) = self.messages.placed.get(payload).filter(|p| *p != place) {
            self.fail(
                INV_MESSAGE_UNSENT,
                format!("{by} read {payload:?} at {place:?}, found before at {first:?}"),
            );
        } else {
            let first = self.messages.placed.entry(payload.to_owned());
            first.or_insert_with(|| place.clone());
        }
    }

    /// After the final heal: a send to every partition of the converged state, then every
    /// replica's copy of each compared (the module doc's judgement).
    pub(super) async fn judge_messages(&mut self) {
        let Some(state) = self.replicas[0]
            .node
            .as_ref()
            .map(|n| n.view().state.clone())
        else {
            return;
        };
        let finals = finals_of(&state);
        // Each partition has the final round's time of its own.
        let deadline = |w: &World| w.clock.now_nanos() + FINAL_DEADLINE.as_nanos() as u64;
        for partition in &finals {
            if !self.final_send(partition, deadline(self)).await {
                return;
            }
        }
        for partition in &finals {
            if !self.judge_partition(partition, deadline(self)).await {
                return;
            }
        }
        let places: Vec<(String, u32, u64)> = finals
            .iter()
            .map(|f| (f.topic.clone(), f.identity.partition_id, f.identity.nonce))
            .collect();
        self.judge_offsets(&places).await;
        if self.failed() {
            return;
        }
        self.judge_groups_run().await;
        if self.failed() {
            return;
        }
        let views: Vec<GroupView> = self
            .replicas
            .iter()
            .filter_map(|r| r.parts.as_ref())
            .flat_map(|p| p.views())
            .collect();
        if views.iter().any(|v| v.term > 1) {
            self.decision("ClusterMessagesLeaderChanged");
        }
        self.event(format!(
            "final: {} partitions agree, {} messages acknowledged, {} in doubt, {} read",
            finals.len(),
            self.messages.acked.len(),
            self.messages.doubt.len(),
            self.messages.seen.len()
        ));
    }

    /// After the final heal: no member's replica of a group stays refused. A group that
    /// did not start (or stopped) is started again within [`GROUPS_RUN_DEADLINE`], past the
    /// longest wait between its tries; a copy that never starts again is a boot that failed
    /// (every disk fault of this world is damage its group repairs).
    async fn judge_groups_run(&mut self) {
        let deadline = self.clock.now_nanos() + GROUPS_RUN_DEADLINE.as_nanos() as u64;
        loop {
            let refused: Vec<String> = self
                .replicas
                .iter()
                .filter_map(|r| Some((r.id, r.parts.as_ref()?.views())))
                .flat_map(|(id, views)| {
                    let failed = views
                        .into_iter()
                        .filter_map(|v| Some((v.partition, v.failed?)));
                    failed.map(move |(p, why)| format!("member {id}'s replica of {p}: {why}"))
                })
                .collect();
            if refused.is_empty() {
                return;
            }
            if self.clock.now_nanos() >= deadline {
                let evidence = format!("replicas never started again: {}", refused.join("; "));
                self.fail(INV_BOOT, evidence);
                return;
            }
            cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(100)).await;
        }
    }

    /// A last message to `partition` through a random member, asked again until one is
    /// acknowledged by `deadline` (liveness): it commits everything before it.
    async fn final_send(&mut self, partition: &Final, deadline: u64) -> bool {
        let p = partition.identity.partition_id;
        while self.clock.now_nanos() < deadline {
            let before = self.messages.acked.len();
            self.send_messages(&partition.topic, WirePartitioning::PartitionId(p))
                .await;
            if self.messages.acked.len() > before {
                return true;
            }
            cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(50)).await;
        }
        let what = format!(
            "no send to {} partition {p} went through the healed cluster",
            partition.topic
        );
        self.stalled(partition.identity, what);
        false
    }

    /// A partition's group made no progress by the final deadline: a replica that did not
    /// start (no fault here damages a disk: its WAL or its replica refused) breaks
    /// [`INV_BOOT`]; otherwise it is the group's liveness.
    fn stalled(&mut self, identity: cairn_engine::partition::PartitionIdentity, what: String) {
        let refused = self.replicas.iter().find_map(|r| {
            let views = r.parts.as_ref()?.views();
            let why = views
                .into_iter()
                .find(|v| v.partition == identity)?
                .failed?;
            Some(format!("replica {}'s group of it did not run: {why}", r.id))
        });
        match refused {
            Some(refused) => self.fail(INV_BOOT, format!("{what}: {refused}")),
            None => {
                let views = self.part_views(identity);
                self.fail(INV_LIVENESS, format!("{what}: {views}"));
            }
        }
    }

    /// The members partition `identity` is placed on, computed here from its topic's
    /// replication factor (in the first node's state) and the metadata leader's voters
    /// (`cairn_cluster::partition::placement`); every member when none leads.
    pub(super) fn placed_members(
        &self,
        identity: cairn_engine::partition::PartitionIdentity,
    ) -> BTreeSet<MemberId> {
        let all = || self.replicas.iter().map(|r| r.id).collect();
        self.placed_members_known(identity).unwrap_or_else(all)
    }

    /// [`Self::placed_members`], `None` when no member leads the metadata group or holds
    /// the partition's topic.
    pub(super) fn placed_members_known(
        &self,
        identity: cairn_engine::partition::PartitionIdentity,
    ) -> Option<BTreeSet<MemberId>> {
        let factor = self.replicas.iter().find_map(|r| {
            let view = r.node.as_ref()?.view();
            let topic = view
                .state
                .find_topic(identity.stream_id, identity.topic_id)?;
            Some(topic.options.replication_factor)
        });
        let voters = self
            .leader_at()
            .and_then(|at| self.replicas[at].group.as_ref())
            .map(|g| g.status().voters);
        let (factor, voters) = (factor?, voters?);
        let members = voters
            .keys()
            .map(|v| cairn_cluster::types::member_of(*v))
            .collect();
        let name = cairn_cluster::partition::net::group_name(&identity);
        Some(cairn_cluster::partition::placement::placed(
            name, factor, &members,
        ))
    }

    /// The views of group `identity` of the members it is placed on (`None` where one runs
    /// none).
    fn group_views(
        &self,
        identity: cairn_engine::partition::PartitionIdentity,
    ) -> Vec<Option<GroupView>> {
        let placed = self.placed_members(identity);
        let view = |r: &Replica| {
            let views = r.parts.as_ref()?.views();
            views.into_iter().find(|v| v.partition == identity)
        };
        let on = self.replicas.iter().filter(|r| placed.contains(&r.id));
        on.map(view).collect()
    }

    /// Whether nothing more can come to `identity`'s replicas: every member's replica runs
    /// its group and answered the read (`answered`), under one leader, outside a change of
    /// voters, each having applied its whole log, to the same entry, as it stood `before`
    /// the reads too. A copy short of an acknowledged offset then lost it (else it is only
    /// late: a stall).
    fn applied_whole_log(
        &self,
        identity: cairn_engine::partition::PartitionIdentity,
        answered: &[(MemberId, Vec<Held>)],
        before: &[Option<GroupView>],
    ) -> Option<String> {
        let now = self.group_views(identity);
        if now != before {
            return None;
        }
        let mut views = Vec::new();
        let placed = self.placed_members(identity);
        let on = self.replicas.iter().filter(|r| placed.contains(&r.id));
        for (r, view) in on.zip(now) {
            let view = view?;
            let settled = view.replica.is_some() && view.failed.is_none() && !view.joint;
            if !settled || view.applied != view.last_log || !answered.iter().any(|a| a.0 == r.id) {
                return None;
            }
            views.push(view);
        }
        let first = views.first()?;
        let alike = |v: &&GroupView| v.leader == first.leader && v.applied == first.applied;
        if first.leader.is_none() || !views.iter().all(|v| alike(&v)) {
            return None;
        }
        Some(format!(
            "every replica applied its group's whole log, through entry {}, under leader {}",
            first.applied,
            cairn_cluster::types::show_id(first.leader?)
        ))
    }

    /// What every placed member's replica of `identity` makes of its group.
    fn part_views(&self, identity: cairn_engine::partition::PartitionIdentity) -> String {
        let placed = self.placed_members(identity);
        let on = self.replicas.iter().filter(|r| placed.contains(&r.id));
        let views = on.zip(self.group_views(identity));
        let view =
            |(r, found): (&Replica, Option<GroupView>)| format!("replica {}: {found:?}", r.id);
        views.map(view).collect::<Vec<_>>().join("; ")
    }

    /// Waits until every replica of `partition` holds the same number of messages (its
    /// final send applied everywhere), then compares and checks their copies.
    async fn judge_partition(&mut self, partition: &Final, deadline: u64) -> bool {
        let target = self
            .messages
            .acked
            .values()
            .filter(|(t, p, n, _)| {
                *t == partition.topic
                    && *p == partition.identity.partition_id
                    && *n == partition.identity.nonce
            })
            .map(|place| place.3 + 1)
            .max()
            .unwrap_or(0);
        // The copies of the members it is placed on (another member's replica, kept
        // until its group leaves it out, is not judged).
        let placed = self.placed_members(partition.identity);
        let nodes: Vec<(MemberId, Node)> = self
            .replicas
            .iter()
            .filter(|r| placed.contains(&r.id))
            .filter_map(|r| Some((r.id, r.node.clone()?)))
            .collect();
        if placed.len() < self.replicas.len() {
            self.decision("ClusterPartitionPlaced");
        }
        let copies = loop {
            let mut copies = Vec::new();
            // Every copy read, however short: at the deadline, copies that differ where
            // they overlap are a disagreement, not a stall.
            let mut answered = Vec::new();
            // The groups as they stood before the reads (compared after them).
            let before = self.group_views(partition.identity);
            for (id, node) in &nodes {
                let ids = topic_ids_owned(&partition.topic);
                let own = (partition.identity.partition_id, Some(partition.identity));
                let read = read_from(node, ids, own, 0);
                let nap = cairn_engine::env::Clock::sleep(&self.clock, READ_LIMIT);
                let read = match cairn_engine::env::race(read, nap).await {
                    cairn_engine::env::Either::Left(read) => read,
                    cairn_engine::env::Either::Right(()) => Ok(None),
                };
                if let Ok(Some((nonce, messages))) = read {
                    if nonce == partition.identity.nonce && messages.len() as u64 >= target {
                        copies.push((*id, messages.clone()));
                    }
                    if nonce == partition.identity.nonce {
                        answered.push((*id, messages));
                    }
                }
            }
            let lengths: BTreeSet<usize> = copies.iter().map(|(_, m)| m.len()).collect();
            if copies.len() == nodes.len() && lengths.len() == 1 {
                break copies;
            }
            if self.clock.now_nanos() >= deadline {
                if let Some(differ) = overlap_differs(&answered) {
                    let (topic, p) = (&partition.topic, partition.identity.partition_id);
                    self.fail(
                        INV_MESSAGES_AGREE,
                        format!("{topic} partition {p}: {differ}"),
                    );
                    return false;
                }
                let (topic, p) = (&partition.topic, partition.identity.partition_id);
                let whole = self.applied_whole_log(partition.identity, &answered, &before);
                if let Some(whole) = whole {
                    let held: Vec<String> = answered
                        .iter()
                        .map(|(id, m)| format!("replica {id}: {}", m.len()))
                        .collect();
                    let held = held.join(", ");
                    let lengths: BTreeSet<usize> = answered.iter().map(|a| a.1.len()).collect();
                    // Alike replicas with copies of different lengths disagree; copies alike
                    // and short lost what they were acknowledged for.
                    let (invariant, short) = match lengths.len() {
                        1 => (
                            INV_MESSAGE_LOST,
                            format!("short of the acknowledged offset {}", target - 1),
                        ),
                        _ => (
                            INV_MESSAGES_AGREE,
                            "holding different numbers of messages".to_string(),
                        ),
                    };
                    self.fail(
                        invariant,
                        format!("{topic} partition {p}: {whole}, {short}: {held}"),
                    );
                    return false;
                }
                let what = format!(
                    "not every replica of {topic} partition {p} reached offset {target} by the deadline"
                );
                self.stalled(partition.identity, what);
                return false;
            }
            cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(20)).await;
        };
        self.judge_copies(partition, copies)
    }

    /// Every replica's copy of `partition`: the same messages at the same offsets, dense
    /// from 0, each sent once, every acknowledged and every read one where it was put.
    fn judge_copies(&mut self, partition: &Final, copies: Vec<(MemberId, Vec<Held>)>) -> bool {
        let (first_id, first) = &copies[0];
        for (id, copy) in &copies[1..] {
            if let Some(at) = (0..first.len()).find(|&i| copy[i] != first[i]) {
                self.fail(
                    INV_MESSAGES_AGREE,
                    format!(
                        "{} partition {}: replica {id} holds {:?}, replica {first_id} {:?}",
                        partition.topic, partition.identity.partition_id, copy[at], first[at]
                    ),
                );
                return false;
            }
        }
        let (topic, p, nonce) = (
            partition.topic.clone(),
            partition.identity.partition_id,
            partition.identity.nonce,
        );
        let mut held = BTreeSet::new();
        for (i, (offset, payload, _)) in first.iter().enumerate() {
            let place = (topic.clone(), p, nonce, *offset);
            if *offset != i as u64 || !held.insert(payload.clone()) {
                self.fail(
                    INV_MESSAGE_UNSENT,
                    format!("{topic} partition {p}: {payload:?} at offset {offset}, entry {i} (offsets not dense, or held twice)"),
                );
                return false;
            }
            self.judge_read(&place, payload, &format!("replica {first_id}'s final copy"));
            if self.failed() {
                return false;
            }
        }
        let at = |place: &Place| first.get(place.3 as usize).map(|(_, m, _)| m.clone());
        let here = |place: &Place| place.0 == topic && place.1 == p && place.2 == nonce;
        let lost = self
            .messages
            .acked
            .iter()
            .find(|(m, place)| here(place) && at(place).as_ref() != Some(*m));
        if let Some((message, place)) = lost {
            self.fail(
                INV_MESSAGE_LOST,
                format!(
                    "{message:?}, acknowledged at {place:?}, is not there: {:?}",
                    at(place)
                ),
            );
            return false;
        }
        let unread = self
            .messages
            .seen
            .iter()
            .find(|(place, m)| here(place) && at(place).as_ref() != Some(*m));
        if let Some((place, message)) = unread {
            self.fail(
                INV_READ_COMMITTED,
                format!(
                    "{message:?}, read at {place:?}, is not there: {:?}",
                    at(place)
                ),
            );
            return false;
        }
        true
    }
}

/// The partitions of `state`, by the client's topic names.
fn finals_of(state: &cairn_engine::state::MetaState) -> Vec<Final> {
    let mut finals = Vec::new();
    for stream in state.streams().values() {
        for topic in stream.topics.values() {
            for p in topic.partitions.values() {
                finals.push(Final {
                    topic: format!("{}/{}", stream.name, topic.name),
                    identity: cairn_engine::partition::PartitionIdentity {
                        stream_id: stream.id,
                        topic_id: topic.id,
                        partition_id: p.id,
                        nonce: p.nonce,
                    },
                });
            }
        }
    }
    finals
}

/// The partitions `node` knows of topic `topic` (`s/t`), if it knows the topic.
pub(super) fn partitions_of(node: &Node, topic: &str) -> Option<Vec<u32>> {
    let view = node.view();
    let (s, t) = topic.split_once('/')?;
    let stream = view.state.streams().values().find(|x| x.name == s)?;
    let topic = stream.topics.values().find(|x| x.name == t)?;
    let ids: Vec<u32> = topic.partitions.keys().copied().collect();
    (!ids.is_empty()).then_some(ids)
}

/// The identity of `topic`'s `partition` as `node` knows it.
pub(super) fn identity_of(
    node: &Node,
    topic: &str,
    partition: u32,
) -> Option<cairn_engine::partition::PartitionIdentity> {
    let state = node.view().state.clone();
    finals_of(&state)
        .into_iter()
        .find(|f| f.topic == topic && f.identity.partition_id == partition)
        .map(|f| f.identity)
}

pub(super) fn topic_ids_owned(topic: &str) -> (WireIdentifier, WireIdentifier) {
    let (s, t) = topic.split_once('/').expect("a topic's name");
    (
        WireIdentifier::named(s).expect("a name"),
        WireIdentifier::named(t).expect("a name"),
    )
}

/// Every message of `partition` of topic `ids` at `node` from `from` on, in pages: the
/// partition's nonce and (offset, payload) of each (`None` when the node has no such
/// topic or partition).
/// Every message of `partition` from offset `from` on, by a client's polls through `node`
/// (which may read another member's copy), or, given the partition's identity (`own`),
/// from `node`'s own copy (the final judgement's: a member's copy, not what it serves).
async fn read_from(
    node: &Node,
    ids: (WireIdentifier, WireIdentifier),
    (partition, own): (u32, Option<cairn_engine::partition::PartitionIdentity>),
    from: u64,
) -> cairn_engine::error::NodeResult<Option<(u64, Vec<Held>)>> {
    let client = node.client(0x9011);
    let mut messages = Vec::new();
    let mut nonce = None;
    let mut next = from;
    loop {
        let request = PollMessagesRequest {
            consumer: WireConsumer::consumer(WireIdentifier::numeric(0x9011)),
            stream_id: ids.0.clone(),
            topic_id: ids.1.clone(),
            partition_id: Some(partition),
            strategy: WirePollingStrategy::offset(next),
            count: POLL_COUNT,
            auto_commit: false,
        };
        let polled = match own {
            Some(identity) => {
                let read = cairn_engine::node::ReadElsewhere::Poll {
                    from: cairn_engine::partition::PollFrom::Offset(next),
                    count: POLL_COUNT,
                    max_bytes: u64::MAX,
                };
                match node.read_here(identity, read).await? {
                    cairn_engine::node::ReadAnswer::Polled(p) => Some(p),
                    _ => None,
                }
            }
            None => client.poll(&request).await?,
        };
        let Some(polled) = polled else {
            return Ok(None);
        };
        if nonce.is_some_and(|n| n != polled.incarnation) {
            // Purged between two pages: read again.
            return Ok(None);
        }
        nonce = Some(polled.incarnation);
        let before = messages.len();
        for batch in &polled.batches {
            let base =
                cairn_engine::format::BatchHeader::decode(batch).map_or(0, |h| h.base_offset);
            for m in cairn_engine::format::MessageIter::new(batch, base) {
                if m.offset >= next {
                    let payload = String::from_utf8_lossy(m.payload).into_owned();
                    // The batch's header (its stamp: offset, timestamp, checksum) and the
                    // message's frame.
                    let header = &batch[..cairn_engine::format::BATCH_HEADER_LEN.min(batch.len())];
                    let frame = xxhash::xxh3::xxh3_64(&[header, &batch[m.frame.clone()]].concat());
                    messages.push((m.offset, payload, frame));
                }
            }
        }
        match messages.last() {
            Some(&(last, _, _)) if messages.len() > before => next = last + 1,
            _ => return Ok(Some((polled.incarnation, messages))),
        }
    }
}

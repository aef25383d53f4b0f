//! The oracle: agreement as each replica applies, and after the final heal, convergence, no
//! acknowledged op lost and nothing nobody asked for.

use super::*;

impl World {
    pub(super) fn observer(&self, id: MemberId) -> cairn_cluster::sm::ApplyObserver {
        let shared = self.shared.clone();
        Arc::new(move |entry: &Entry| {
            let rendering = format!("{:?}", entry.payload);
            let term = entry.log_id.leader_id.term;
            let index = entry.log_id.index;
            let mut shared = shared.lock().expect("shared");
            match shared.applied.get(&index) {
                None => {
                    shared.applied.insert(index, (term, rendering));
                }
                Some((t, r)) if (*t, r) == (term, &rendering) => {}
                Some((t, r)) => {
                    let evidence = format!(
                        "replica {id} applied at index {index} term {term} {rendering}, another replica term {t} {r}"
                    );
                    shared.fail(INV_AGREEMENT, evidence);
                }
            }
        })
    }

    /// Waits until every replica has applied the same last index, then compares states.
    pub(super) async fn judge_final(&mut self) {
        let deadline = self.clock.now_nanos() + FINAL_DEADLINE.as_nanos() as u64;
        // A last proposal through the healed cluster: liveness, and it commits everything
        // before it.
        let mut through = false;
        while !through && self.clock.now_nanos() < deadline {
            through = self.propose("final").await;
            if !through {
                cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(50)).await;
            }
        }
        if !through {
            self.fail(INV_LIVENESS, "the final proposal never went through".into());
            return;
        }
        let target = self.acked.get("final").copied().unwrap_or(0);
        // Every blank or removed replica added (a group that does not count one never
        // converges on it), a removed one without waiting.
        for replica in &mut self.replicas {
            replica.rejoin_after = 0;
        }
        while !self.rejoin().await {
            if self.clock.now_nanos() >= deadline {
                self.fail(
                    INV_LIVENESS,
                    "a blank or removed replica was never added to the healed cluster".into(),
                );
                return;
            }
            cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(50)).await;
        }
        loop {
            let states: Vec<_> = self
                .replicas
                .iter()
                .filter_map(|r| Some((r.id, r.group.as_ref()?.machine().state())))
                .collect();
            let _: &[(MemberId, _)] = &states;
            // Every replica up, past the final proposal, and at one applied index.
            let first = states.first().and_then(|(_, (_, a))| *a);
            if states.len() == self.replicas.len()
                && first.is_some_and(|a| a.index >= target)
                && states.iter().all(|(_, (_, applied))| *applied == first)
            {
                self.compare(states);
                if !self.failed() {
                    self.judge_nodes().await;
                }
                if !self.failed() && self.profile.messages {
                    self.judge_messages().await;
                }
                return;
            }
            if self.clock.now_nanos() >= deadline {
                let views = self.views();
                self.fail(
                    INV_LIVENESS,
                    format!("not every replica applied index {target} by the deadline: {views}"),
                );
                return;
            }
            cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(20)).await;
        }
    }

    /// What each replica makes of the group: its applied index, the leader it knows, its
    /// configuration (the evidence of a replica left behind).
    fn views(&self) -> String {
        let view = |r: &Replica| match &r.group {
            None => format!("replica {} down", r.id),
            Some(g) => {
                let s = g.status();
                let ids = |m: &BTreeMap<NodeId, Peer>| {
                    m.keys()
                        .map(|id| show_id(*id))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                format!(
                    "replica {} applied {:?}, leader {:?}, term {}, voters [{}], learners [{}]{}",
                    show_id(s.me),
                    s.last_applied,
                    s.leader.map(show_id),
                    s.term,
                    ids(&s.voters),
                    ids(&s.learners),
                    if s.joint { ", joint" } else { "" }
                )
            }
        };
        self.replicas
            .iter()
            .map(view)
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub(super) fn compare(
        &mut self,
        states: Vec<(
            MemberId,
            (
                cairn_engine::state::MetaState,
                Option<cairn_cluster::types::LogId>,
            ),
        )>,
    ) {
        // Every replica applied the same index (the caller waited for it): equal states.
        let (first_id, (first, at)) = &states[0];
        let top = at.map(|a| a.index);
        for (id, (state, applied)) in &states {
            assert_eq!(applied, at, "compared at one applied index");
            if state != first {
                self.fail(
                    INV_CONVERGED,
                    format!("replica {id} and replica {first_id} differ at index {top:?}"),
                );
                return;
            }
        }
        for (id, (state, _)) in &states {
            let names = names_in(state);
            let lost = |n: &&String| !names.contains(*n) && !self.may_be_gone(n);
            if let Some(lost) = self.acked.keys().find(lost) {
                self.fail(
                    INV_ACKED_PRESENT,
                    format!(
                        "replica {id} lacks {lost}, acknowledged at index {}",
                        self.acked[lost]
                    ),
                );
                return;
            }
            if let Some(extra) = names.iter().find(|n| !self.may_be_held(n)) {
                self.fail(
                    INV_UNASKED,
                    format!("replica {id} holds {extra}, which nobody asked for or was deleted"),
                );
                return;
            }
        }
        self.event(format!(
            "final: {} replicas at index {top:?}, {} ops acknowledged, {} names live, {} in doubt",
            states.len(),
            self.acknowledged,
            self.acked.len(),
            self.in_doubt.len()
        ));
    }
}

/// What `state` holds, by the client's names ([`super::workload`]): streams by name, topics
/// as `stream/topic`, groups as `stream/topic/group`.
pub(super) fn names_in(state: &cairn_engine::state::MetaState) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for stream in state.streams().values() {
        names.insert(stream.name.clone());
        for topic in stream.topics.values() {
            let at = format!("{}/{}", stream.name, topic.name);
            for group in topic.groups.values() {
                names.insert(format!("{at}/{}", group.name));
            }
            names.insert(at);
        }
    }
    names
}

impl World {
    /// A fresh read at a random up replica: once it passed the leader's read index
    /// (`Replica::read_barrier`), its state holds every op acknowledged before.
    pub(super) async fn fresh_read(&mut self) {
        let Some(group) = self.any_up() else {
            return;
        };
        let barrier = {
            let group = group.clone();
            async move { group.read_barrier().await }
        };
        let to = show_id(group.id());
        let span = self.begin(CLIENT_LANE, format!("fresh read at {to}"));
        let answer = self.while_nemesis(barrier, PROPOSE_TIMEOUT).await;
        let outcome = match &answer {
            Some(Ok(())) => SpanOutcome::Ok,
            Some(Err(e)) => SpanOutcome::Refused(e.to_string()),
            None => SpanOutcome::Lost("timed out".into()),
        };
        self.end(span, outcome);
        if !matches!(answer, Some(Ok(()))) || !self.still_up(&group) {
            return;
        }
        let (state, applied) = group.machine().state();
        let names = names_in(&state);
        let extra = names.iter().find(|n| !self.may_be_held(n));
        let missed = |n: &&String| !names.contains(*n) && !self.may_be_gone(n);
        if let Some(missed) = self.acked.keys().find(missed) {
            self.fail(
                INV_FRESH,
                format!(
                    "a fresh read at {to} (applied {applied:?}) missed {missed}, acknowledged at index {}",
                    self.acked[missed]
                ),
            );
        } else if let Some(extra) = extra {
            self.fail(
                INV_FRESH,
                format!(
                    "a fresh read at {to} (applied {applied:?}) shows {extra}, deleted by an op acknowledged before it"
                ),
            );
        } else if group.leader() != Some(group.id()) {
            self.decision("ClusterFreshRead");
        }
    }
}

impl World {
    /// Each replica's node, where nodes apply the commands, once the replicas converged:
    /// the partition directories on its disk are exactly its state's, and it serves each,
    /// unfenced, under the state's identity (nonce included). Adoption, replay after a
    /// restart and the directory work of deletes and purges all end here.
    async fn judge_nodes(&mut self) {
        for at in 0..self.replicas.len() {
            let replica = &self.replicas[at];
            let Some(node) = replica.node.clone() else {
                continue;
            };
            let (id, disk) = (replica.id, replica.disk.clone());
            let state = node.view().state.clone();
            let root = node_root(id);
            let on_disk: BTreeSet<PathBuf> = disk
                .paths_under(&root.join("streams"))
                .into_iter()
                .filter(|p| is_partition_dir(&root, p))
                .collect();
            let identities = state.partitions();
            let wanted: BTreeSet<PathBuf> = identities
                .iter()
                .map(|p| {
                    cairn_engine::partition::partition_dir(
                        &root,
                        p.stream_id,
                        p.topic_id,
                        p.partition_id,
                    )
                })
                .collect();
            // A stream's or topic's directory the state has not is a removal left undone.
            let leftover = disk
                .paths_under(&root.join("streams"))
                .into_iter()
                .find(|p| entity_dir(&root, p).is_some_and(|e| !has_entity(&state, e)));
            if let Some(leftover) = leftover {
                self.fail(
                    INV_NODE_HOLDS,
                    format!("replica {id}'s disk holds {leftover:?}, which its state has not"),
                );
                return;
            }
            if on_disk != wanted {
                let extra: Vec<_> = on_disk.difference(&wanted).collect();
                let missing: Vec<_> = wanted.difference(&on_disk).collect();
                self.fail(
                    INV_NODE_HOLDS,
                    format!("replica {id}'s disk holds partitions {extra:?} its state has not, and lacks {missing:?}"),
                );
                return;
            }
            let client = node.client(0x0c1a5);
            let damaged = self.replicas[at].damaged.clone();
            for identity in identities {
                let key = (identity.stream_id, identity.topic_id, identity.partition_id);
                let served = client.local_partition_info(key).await;
                let wrong = match &served {
                    Ok(Some(info)) if info.fence.is_none() && info.identity == identity => continue,
                    // Fenced for the nemesis's damage to its bytes: its group repairs it
                    // when it starts there, and the messages' final judgment (next) reads
                    // this replica's copy, so one never repaired still fails.
                    Ok(Some(info)) if info.identity == identity && damaged.contains(&key) => {
                        continue
                    }
                    Ok(Some(info)) => format!(
                        "serves {} (fence {:?}), its state has {identity}",
                        info.identity, info.fence
                    ),
                    Ok(None) => "does not serve it".to_string(),
                    Err(e) => format!("answered {e}"),
                };
                self.fail(
                    INV_NODE_HOLDS,
                    format!("replica {id}'s node, asked for partition {key:?}, {wrong}"),
                );
                return;
            }
            if let Some(evidence) = self.stale_offset(&client, &state, &damaged).await {
                self.fail(
                    INV_NO_STALE_OFFSET,
                    format!("replica {id}'s node: {evidence}"),
                );
                return;
            }
        }
    }

    /// An offset held by a live group no offset was ever stored for (in any partition of
    /// its topic, on the node `client` asks): what a deleted group under its id left.
    async fn stale_offset(
        &self,
        client: &cairn_engine::node::Client,
        state: &cairn_engine::state::MetaState,
        damaged: &BTreeSet<cairn_engine::state::PartitionKey>,
    ) -> Option<String> {
        for (s, stream) in state.streams() {
            for (t, topic) in &stream.topics {
                for (g, group) in &topic.groups {
                    let name = format!("{}/{}/{}", stream.name, topic.name, group.name);
                    if !self.acked.contains_key(&name) || self.stored.contains(&name) {
                        continue;
                    }
                    let consumer = cairn_engine::partition::ConsumerId::group(*g);
                    for (p, partition) in &topic.partitions {
                        // Fenced for the nemesis's damage (judged by the messages' final
                        // judgment): it answers no offset until its group repaired it.
                        if damaged.contains(&(*s, *t, *p)) {
                            continue;
                        }
                        // The node's own copy (a member may serve another's).
                        let identity = cairn_engine::partition::PartitionIdentity {
                            stream_id: *s,
                            topic_id: *t,
                            partition_id: *p,
                            nonce: partition.nonce,
                        };
                        let read = cairn_engine::node::ReadElsewhere::Offset(consumer);
                        match client.node().read_here(identity, read).await {
                            Ok(cairn_engine::node::ReadAnswer::Offset(None)) => {}
                            found => {
                                return Some(format!(
                                    "group {name} (id {g}), never stored to, holds {found:?} in partition {p}"
                                ))
                            }
                        }
                    }
                }
            }
        }
        None
    }
}

/// The stream `(s, None)` or topic `(s, Some(t))` whose directory `path` is:
/// `root/streams/s` or `root/streams/s/topics/t`.
fn entity_dir(root: &Path, path: &Path) -> Option<(u32, Option<u32>)> {
    let rest = path.strip_prefix(root.join("streams")).ok()?;
    let parts: Vec<&str> = rest.iter().filter_map(|c| c.to_str()).collect();
    match parts.as_slice() {
        [s] => Some((s.parse().ok()?, None)),
        [s, "topics", t] => Some((s.parse().ok()?, Some(t.parse().ok()?))),
        _ => None,
    }
}

fn has_entity(state: &cairn_engine::state::MetaState, (s, t): (u32, Option<u32>)) -> bool {
    let stream = state.streams().get(&s);
    match t {
        None => stream.is_some(),
        Some(t) => stream.is_some_and(|stream| stream.topics.contains_key(&t)),
    }
}

/// Whether `path` is a partition's directory under `root`:
/// `root/streams/s/topics/t/partitions/p`.
fn is_partition_dir(root: &Path, path: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(root.join("streams")) else {
        return false;
    };
    let parts: Vec<&str> = rest.iter().filter_map(|c| c.to_str()).collect();
    let number = |s: &str| s.parse::<u32>().is_ok();
    matches!(parts.as_slice(), [s, "topics", t, "partitions", p] if number(s) && number(t) && number(p))
}

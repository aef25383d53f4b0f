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
        // Every blank replica added (a group that does not count one never converges on it).
        while !self.rejoin().await {
            if self.clock.now_nanos() >= deadline {
                self.fail(
                    INV_LIVENESS,
                    "a blank replica was never added to the healed cluster".into(),
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
                return;
            }
            if self.clock.now_nanos() >= deadline {
                self.fail(
                    INV_LIVENESS,
                    format!("not every replica applied index {target} by the deadline"),
                );
                return;
            }
            cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(20)).await;
        }
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
            if let Some(lost) = self.acked.keys().find(|n| !names.contains(*n)) {
                self.fail(
                    INV_ACKED_PRESENT,
                    format!(
                        "replica {id} lacks {lost}, acknowledged at index {}",
                        self.acked[lost]
                    ),
                );
                return;
            }
            let asked = |n: &String| self.acked.contains_key(n) || self.in_doubt.contains(n);
            if let Some(extra) = names.iter().find(|n| !asked(n)) {
                self.fail(
                    INV_UNASKED,
                    format!("replica {id} holds {extra}, which nobody asked for"),
                );
                return;
            }
        }
        self.event(format!(
            "final: {} replicas at index {top:?}, {} ops acknowledged, {} in doubt",
            states.len(),
            self.acked.len(),
            self.in_doubt.len()
        ));
    }
}

/// What `state` holds, by the client's names: streams by name, topics as `stream/topic`
/// ([`super::op_name`]).
pub(super) fn names_in(state: &cairn_engine::state::MetaState) -> BTreeSet<String> {
    state
        .streams()
        .values()
        .flat_map(|s| {
            let topics = s.topics.values().map(|t| format!("{}/{}", s.name, t.name));
            std::iter::once(s.name.clone()).chain(topics)
        })
        .collect()
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
        if let Some(missed) = self.acked.keys().find(|n| !names.contains(*n)) {
            self.fail(
                INV_FRESH,
                format!(
                    "a fresh read at {to} (applied {applied:?}) missed {missed}, acknowledged at index {}",
                    self.acked[missed]
                ),
            );
        } else if group.leader() != Some(group.id()) {
            self.decision("ClusterFreshRead");
        }
    }
}

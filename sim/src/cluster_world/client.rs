//! The group's clients: the proposer, which sends each op to whoever leads and retries one
//! in doubt, and the administrator, which replaces a blank replica's old incarnation with it,
//! and now and then removes a member and adds it back.

use super::workload::Op;
use super::*;

impl World {
    /// The administrator: replaces the old incarnation of a blank replica that is up with
    /// it, through whoever leads. `true` when no blank replica waits any more.
    pub(super) async fn rejoin(&mut self) -> bool {
        let now = self.clock.now_nanos();
        let Some(at) = (0..self.replicas.len()).find(|&at| {
            let r = &self.replicas[at];
            !r.joined && r.group.is_some() && r.rejoin_after <= now
        }) else {
            return self.replicas.iter().all(|r| r.joined);
        };
        let Some(leader) = self
            .leader_at()
            .and_then(|l| self.replicas[l].group.clone())
        else {
            return false;
        };
        let id = self.replicas[at].id;
        let change = MemberChange::Add {
            member: id,
            peer: members(self.profile.replicas)[&id].clone(),
        };
        let answer = self
            .ask_change(leader, change, format!("add member {id}"))
            .await;
        match answer {
            Some(Ok(status)) => {
                let Some(incarnation) = self.replicas[at].incarnation else {
                    return false;
                };
                // The replica may have gone blank again meanwhile: only its current
                // incarnation among the voters counts.
                if status.voters.contains_key(&incarnation) && !status.joint {
                    self.replicas[at].joined = true;
                    self.decision("ClusterReplicaReplaced");
                    self.event(format!(
                        "replica {} replaced member {id}'s old one",
                        show_id(incarnation)
                    ));
                }
                false
            }
            Some(Err(e)) => {
                self.event(format!("adding replica {id} failed: {e}"));
                false
            }
            None => {
                self.event(format!("adding replica {id} timed out"));
                false
            }
        }
    }

    /// The administrator, as often as the profile says: removes a member that counts,
    /// through whoever leads, while no more than a minority counts out with it. It counts
    /// out from the start of the change (a joint configuration needs both halves' quorums),
    /// and stays out until [`World::rejoin`] adds it back, unless the change was refused
    /// before anything was appended.
    pub(super) async fn remove_one(&mut self) {
        let minority = (self.replicas.len() - 1) / 2;
        if self.profile.remove == 0.0
            || self.out() >= minority
            || !self.rng.gen_bool(self.profile.remove)
        {
            return;
        }
        let counted: Vec<usize> = (0..self.replicas.len())
            .filter(|&at| self.replicas[at].joined)
            .collect();
        let Some(leader) = self
            .leader_at()
            .and_then(|l| self.replicas[l].group.clone())
        else {
            return;
        };
        let at = counted[self.rng.gen_range(0..counted.len())];
        let (id, incarnation) = (self.replicas[at].id, self.replicas[at].incarnation);
        self.replicas[at].joined = false;
        let wait = self.rng.gen_range(100..5_000) * 1_000_000;
        self.replicas[at].rejoin_after = self.clock.now_nanos() + wait;
        let change = MemberChange::Remove { member: id };
        let answer = self
            .ask_change(leader, change, format!("remove member {id}"))
            .await;
        match answer {
            Some(Ok(status)) => {
                let voting = status
                    .voters
                    .keys()
                    .any(|v| cairn_cluster::types::member_of(*v) == id);
                if voting && !status.joint {
                    self.fail(
                        crate::report::INV_ASSERTION,
                        format!("removing member {id} answered with it voting: {status:?}"),
                    );
                    return;
                }
                if voting {
                    // Joint a moment longer (a later change finishes it); it counts out.
                    self.event(format!("member {id} leaving: the configuration is joint"));
                    return;
                }
                self.decision("ClusterReplicaRemoved");
                self.event(format!("member {id} removed"));
            }
            // Refused before anything was appended (a leader asked to remove itself hands
            // over and names the next): the member still counts, unless the nemesis made
            // it a new replica meanwhile (a blank one counts once it is added).
            Some(Err(
                e @ (ProposeError::NotLeader { .. }
                | ProposeError::Failed(_)
                | ProposeError::Busy(_)),
            )) => {
                self.replicas[at].joined = self.replicas[at].incarnation == incarnation;
                self.event(format!("removing member {id} refused: {e}"));
            }
            Some(Err(e @ ProposeError::InDoubt)) => {
                self.event(format!("removing member {id} in doubt: {e}"));
            }
            None => self.event(format!("removing member {id} timed out")),
        }
    }

    /// Asks `leader` for `change` as the administrator (a bar on its lane), the nemesis acting
    /// meanwhile; `None` when it did not answer within [`CHANGE_TIMEOUT`].
    async fn ask_change(
        &mut self,
        leader: Arc<MetaGroup>,
        change: MemberChange,
        label: String,
    ) -> Option<Result<cairn_cluster::group::GroupStatus, ProposeError>> {
        let span = self.begin(ADMIN_LANE, label);
        let changed = async move { leader.change(change).await };
        let answer = self.while_nemesis(changed, CHANGE_TIMEOUT).await;
        self.end(
            span,
            match &answer {
                Some(Ok(_)) => SpanOutcome::Ok,
                Some(Err(e)) => SpanOutcome::Refused(e.to_string()),
                None => SpanOutcome::Lost("timed out".into()),
            },
        );
        answer
    }

    /// Where the leader is: the up replica that says it leads, in the highest term if more
    /// than one does (one cut off may not know yet that it was deposed). Not the leader
    /// some replica names: a removed replica names the last leader it heard of forever,
    /// as the administrator of production (`cairn cluster`) knows too.
    pub(super) fn leader_at(&self) -> Option<usize> {
        self.up()
            .into_iter()
            .filter_map(|at| {
                let status = self.replicas[at].group.as_ref()?.status();
                status.leads().then_some((status.term, at))
            })
            .max()
            .map(|(_, at)| at)
    }

    /// A random up replica, if one is.
    pub(super) fn any_up(&mut self) -> Option<Arc<MetaGroup>> {
        let up = self.up();
        if up.is_empty() {
            return None;
        }
        let asked = up[self.rng.gen_range(0..up.len())];
        self.replicas[asked].group.clone()
    }

    /// The group a client would send to: the leader some replica names, if it is up.
    pub(super) fn target(&mut self) -> Option<Arc<MetaGroup>> {
        let up = self.up();
        if up.is_empty() {
            return None;
        }
        let asked = up[self.rng.gen_range(0..up.len())];
        let group = self.replicas[asked].group.clone()?;
        let leader = group.leader();
        leader
            .and_then(|l| {
                self.replicas
                    .iter()
                    .find(|r| r.incarnation == Some(l))?
                    .group
                    .clone()
            })
            .or(Some(group))
    }

    /// Proposes the creation of stream `name` once; `true` when the outcome is known.
    pub(super) async fn propose(&mut self, name: &str) -> bool {
        self.propose_op(&Op::Create(name.to_owned())).await
    }

    /// Proposes `op` once; `true` when the outcome is known.
    ///
    /// Where nodes apply the commands, the op goes to a random up replica's decider, as a
    /// server's client op does (forwarded to the leader, answered once applied there);
    /// otherwise straight to the leader.
    pub(super) async fn propose_op(&mut self, op: &Op) -> bool {
        let target = match self.profile.nodes {
            true => self.any_up(),
            false => self.target(),
        };
        let Some(group) = target else {
            return false;
        };
        let nodes = self.profile.nodes;
        // One key for every attempt at this op, until its outcome is known: an attempt the
        // client gave up on that lands later (a forward delivered after a heal) is answered
        // with the first outcome, never applied again after later ops.
        let (key, asked_at) = match self.asking {
            Some(asking) => asking,
            None => {
                let applied = group.machine().state().1.map_or(0, |a| a.index);
                *self.asking.insert((self.rng.gen::<u128>().max(1), applied))
            }
        };
        let proposal = {
            let group = group.clone();
            let mut command = op.command(self.profile.factor);
            (command.key, command.asked_at) = (key, asked_at);
            async move {
                match nodes {
                    true => group
                        .decide_command(command)
                        .await
                        .map_err(|_| ProposeError::InDoubt),
                    false => group.propose(command).await,
                }
            }
        };
        let name = op.label();
        let span = self.begin(CLIENT_LANE, format!("{name} → {}", show_id(group.id())));
        let answer = self
            .while_nemesis(proposal, PROPOSE_TIMEOUT)
            .await
            .unwrap_or(Err(ProposeError::InDoubt));
        self.end(span, span_outcome(&answer));
        let known = self.judge_answer(op, &group, answer);
        if known {
            self.asking = None;
        }
        known
    }

    /// What a proposal's answer means for the client's model; `true` when its outcome is
    /// known.
    fn judge_answer(
        &mut self,
        op: &Op,
        group: &Arc<MetaGroup>,
        answer: Result<(u64, MetaOutcome), ProposeError>,
    ) -> bool {
        let to = show_id(group.id());
        let name = op.label();
        let name = name.as_str();
        match answer {
            Ok((index, MetaOutcome::Applied { repeated, .. })) => {
                self.event(format!("{name} acknowledged by {to} at index {index}"));
                if repeated {
                    // The answer is an earlier attempt's, applied at an earlier index.
                    self.decision("ClusterRetryRepeated");
                }
                if let Some(leader) = group.leader() {
                    if self.last_leader.replace(leader) != Some(leader) {
                        let lane = replica_lane(cairn_cluster::types::member_of(leader));
                        self.mark(&lane, MarkKind::Note, format!("{} leads", show_id(leader)));
                    }
                    self.leaders_seen.insert((leader, index));
                }
                if self.in_doubt.remove(name) {
                    self.decision("ClusterInDoubtResolved");
                }
                self.applied(op, index);
                true
            }
            // Every attempt carries the op's one key: had an earlier one applied, this one
            // would be answered with its outcome. A refusal means none applied, and nothing
            // in this workload is refused.
            Ok((index, MetaOutcome::Refused { code, reason })) => {
                let tries = if self.in_doubt.contains(name) {
                    "after attempts in doubt"
                } else {
                    "proposed once"
                };
                self.fail(
                    INV_UNASKED,
                    format!("{name}, {tries}, was refused at index {index} ({code}): {reason}"),
                );
                true
            }
            Ok((index, MetaOutcome::Undecodable)) => {
                self.fail(
                    INV_UNASKED,
                    format!("{name} did not decode at index {index}"),
                );
                true
            }
            // A run makes far fewer keyed ops than the state machine keeps.
            Ok((index, MetaOutcome::Forgotten { asked_at, .. })) => {
                self.fail(
                    INV_UNASKED,
                    format!("{name}, asked at index {asked_at}, found forgotten at {index}"),
                );
                true
            }
            // Only a node that applies the commands computes it (this world keeps the
            // state in the machine), and only for entries it applied before a restart.
            Ok((index, MetaOutcome::Replayed)) => {
                self.fail(
                    INV_UNASKED,
                    format!("{name} was answered as replayed at index {index}"),
                );
                true
            }
            Err(ProposeError::NotLeader { .. }) => false,
            // Refused before anything was appended: nothing in this workload is refused so.
            Err(e @ ProposeError::Failed(_)) => {
                self.fail(INV_LIVENESS, format!("{name} at {to}: {e}"));
                true
            }
            // In doubt only for a cause the world made: the replica crashed (its group is
            // gone) or the leader changed. A Raft node that stopped on its own (a storage
            // error, a panic) while the world still runs it is a failure, not a doubt.
            Err(e) if self.still_up(group) && group.failure().is_some() => {
                let why = group.failure().unwrap_or_default();
                self.fail(
                    INV_LIVENESS,
                    format!("{name} at {to}: {e}; replica {to} stopped by itself: {why}"),
                );
                true
            }
            Err(e) => {
                self.event(format!("{name} in doubt at {to}: {e}"));
                self.in_doubt.insert(name.to_owned());
                false
            }
        }
    }
}

/// How a proposal's bar ends on the timeline.
fn span_outcome(answer: &Result<(u64, MetaOutcome), ProposeError>) -> SpanOutcome {
    match answer {
        Ok((_, MetaOutcome::Applied { .. })) => SpanOutcome::Ok,
        Ok((_, MetaOutcome::Refused { reason, .. })) => SpanOutcome::Refused(reason.clone()),
        Ok((_, MetaOutcome::Undecodable)) => SpanOutcome::Refused("undecodable".into()),
        Ok((_, MetaOutcome::Forgotten { .. })) => SpanOutcome::Refused("forgotten".into()),
        Ok((_, MetaOutcome::Replayed)) => SpanOutcome::Refused("replayed".into()),
        Err(ProposeError::InDoubt) => SpanOutcome::Lost("in doubt".into()),
        Err(e) => SpanOutcome::Refused(e.to_string()),
    }
}

//! Judging metadata answers and logins: the model adopts acknowledged ops in journal order
//! and judges each refusal against the state it was checked against; a login's answer must
//! fit the users the model had while it ran; the published view resolves every name.

use super::super::model::{self, AdminOp, Model, Window};
use super::super::oracle::Asker;
use super::super::workload::sid;
use super::super::{meta_violation, Accepted, Holder, NodeWorld, Sent, INV_CALLERS};
use crate::report::{violation, Checked, INV_LIVENESS};
use cairn_engine::node::{MetaReply, NodeError, NodeResult};
use cairn_engine::partition::PartitionIdentity;
use iggy_binary_protocol::WireIdentifier;
use std::collections::BTreeSet;

impl NodeWorld {
    /// Registers `op` as `caller`'s op in flight.
    pub(crate) fn send_op(&mut self, caller: u32, op: AdminOp) -> Sent {
        let sent = Sent {
            op,
            at: self.now(),
            wall: self.wall(),
            jumps: self.jumps,
            fills: self.fills,
            full: self.disk_full_until.is_some(),
        };
        if let AdminOp::DeleteUser(id) = &sent.op {
            if let Some(user) = self.model.users.get(id) {
                self.deleting_users.insert(user.name.clone(), sent.at);
            }
        }
        let previous = self.in_flight.insert(caller, sent.clone());
        assert!(previous.is_none(), "one op in flight per caller");
        sent
    }

    fn window(&self, sent: &Sent) -> Window {
        let now = self.wall();
        (self.jumps == sent.jumps && now >= sent.wall).then_some((sent.wall, now))
    }

    /// Judges the answer to `caller`'s op, sent through `asker`'s client as its user, in
    /// journal order.
    pub(crate) fn judge_meta(
        &mut self,
        caller: u32,
        asker: Asker,
        reply: NodeResult<MetaReply>,
    ) -> Checked<()> {
        let sent = self.in_flight.remove(&caller).expect("an op in flight");
        if let AdminOp::DeleteUser(id) = &sent.op {
            let name = self.users_name(*id);
            if let Some(name) = name {
                self.deleting_users.remove(&name);
            }
        }
        self.trace.event(format!("meta {:?} -> {reply:?}", sent.op));
        let reply = match reply {
            Ok(reply) => reply,
            Err(NodeError::Stopped(failure)) => {
                // A node that told a caller it stopped says why to whoever supervises it.
                if !self.stopped_with_cause(&failure) {
                    return Err(violation(
                        INV_LIVENESS,
                        format!("{:?}: answered that the node stopped ({failure}), yet the node reports no failure and its disk did not crash", sent.op),
                    ));
                }
                self.in_doubt.push(sent);
                return Ok(());
            }
            Err(e) => {
                return Err(meta_violation(format!(
                    "{:?}: the node did not answer: {e}",
                    sent.op
                )))
            }
        };
        match reply.result {
            Ok(applied) => {
                let window = self.window(&sent);
                self.asked_by.insert(reply.at_op, asker);
                // The entry is in the journal now, unless a checkpoint since emptied it.
                let entries = self.journal_entries();
                if let Some(entry) = entries.iter().find(|e| e.op == reply.at_op) {
                    crate::node_world::oracle::judge_entry_origin(entry, asker)?;
                }
                self.pending.insert(
                    reply.at_op,
                    Accepted {
                        sent,
                        created: applied.created,
                        window,
                    },
                );
                self.advance()
            }
            Err(NodeError::Stopped(failure)) => {
                if !self.stopped_with_cause(&failure) {
                    return Err(violation(
                        INV_LIVENESS,
                        format!("{:?}: refused as stopped ({failure}) at op {}, yet the node reports no failure and its disk did not crash", sent.op, reply.at_op),
                    ));
                }
                self.in_doubt.push(sent);
                Ok(())
            }
            Err(NodeError::MetadataNoSpace) => {
                self.decision("MetaWriteNoSpace");
                if !sent.saw_full_disk(self.fills, self.disk_full_until.is_some()) {
                    return Err(meta_violation(format!(
                        "{:?} was refused for no space, with room on the disk",
                        sent.op
                    )));
                }
                Ok(())
            }
            // A check that could not read the disk (it is down) refuses for that reason.
            Err(_) if self.disk.is_crashed() => Ok(()),
            Err(e) => {
                if let AdminOp::OversizeUser(_, excess) = &sent.op {
                    if matches!(e, NodeError::TooBig { .. }) != (*excess > 0) {
                        return Err(meta_violation(format!(
                            "{:?}: a body {excess} bytes past the bound was refused with {e}",
                            sent.op
                        )));
                    }
                }
                self.deferred_refusals.push((reply.at_op, sent));
                self.judge_refusals()
            }
        }
    }

    fn users_name(&self, id: u32) -> Option<String> {
        self.model.users.get(&id).map(|u| u.name.clone())
    }

    /// Applies every accepted op whose turn has come, in journal order.
    pub(crate) fn advance(&mut self) -> Checked<()> {
        while let Some(accepted) = self.pending.remove(&(self.model.op + 1)) {
            self.adopt(accepted)?;
        }
        self.judge_refusals()?;
        self.compare_when_quiescent()
    }

    /// At a quiescent point (no op in flight, pending, in doubt or judged later) the
    /// published view is the model's, field by field: entities, options, partitions'
    /// incarnations, groups, users and their grants (passwords are verified at boot).
    fn compare_when_quiescent(&mut self) -> Checked<()> {
        let quiet = self.in_flight.is_empty()
            && self.pending.is_empty()
            && self.in_doubt.is_empty()
            && self.deferred_refusals.is_empty();
        let Some(view) = self.node.as_ref().map(|n| n.view()) else {
            return Ok(());
        };
        if !quiet || view.op != self.model.op {
            return Ok(());
        }
        model::compare(
            &self.model,
            &view.state,
            self.cluster,
            model::Passwords::Skip,
        )
        .map_err(|e| {
            meta_violation(format!(
                "at op {}, with nothing in flight, the published view is not the model: {e}",
                view.op
            ))
        })?;
        self.decision("QuiescentCompared");
        Ok(())
    }

    /// The model applies an accepted op; the node's answer must be the model's.
    fn adopt(&mut self, accepted: Accepted) -> Checked<()> {
        let op = &accepted.sent.op;
        let before = self.model.clone();
        let effect = self
            .model
            .apply(op, accepted.window, self.cluster)
            .map_err(|()| {
                meta_violation(format!(
                    "the node accepted {op:?} as op {}, which the model refuses",
                    self.model.op + 1
                ))
            })?;
        if accepted.created.is_some() && accepted.created != effect.created {
            return Err(meta_violation(format!(
                "{op:?} created id {:?}, the lowest free id is {:?}",
                accepted.created, effect.created
            )));
        }
        self.history.insert(before.op, before);
        self.history.insert(self.model.op, self.model.clone());
        while self.history.len() > crate::node_world::HISTORY {
            self.history.pop_first();
        }
        self.apply_effect(op, &effect, accepted.sent.at, true);
        Ok(())
    }

    /// Partition incarnations and memberships follow an applied op.
    /// `live`: the op's work ran while the node served (an op a boot resolves happened
    /// before an operator's removal while the node was down, which its work cannot undo).
    pub(crate) fn apply_effect(
        &mut self,
        op: &AdminOp,
        effect: &model::Effect,
        sent_at: u64,
        live: bool,
    ) {
        self.debris_holders_changed(op, effect);
        for identity in &effect.removed {
            self.due.remove(identity);
            if live {
                self.removed.remove(&crate::node_world::key(identity));
            }
            if let Some(part) = self.parts.get(identity) {
                if part.last_ack > sent_at {
                    self.decision("MetaOpRacedSends");
                }
            }
        }
        let replaced: Vec<PartitionIdentity> = effect
            .fresh
            .iter()
            .filter_map(|id| {
                self.parts
                    .keys()
                    .find(|p| {
                        crate::node_world::key(p) == crate::node_world::key(id)
                            && p.nonce != id.nonce
                    })
                    .copied()
            })
            .collect();
        for old in replaced {
            if self.parts.get(&old).is_some_and(|p| p.last_ack > sent_at) {
                self.decision("MetaOpRacedSends");
            }
        }
        for identity in &effect.fresh {
            if live {
                self.removed.remove(&crate::node_world::key(identity));
            }
            let raced: Vec<(Holder, u64)> = self
                .racing_stores
                .iter()
                .filter(|(key, _, _)| *key == crate::node_world::key(identity))
                .map(|(_, holder, offset)| (*holder, *offset))
                .collect();
            for (holder, offset) in raced {
                self.store_candidate(*identity, holder, offset);
            }
            let topic = self
                .model
                .topic(identity.stream_id, identity.topic_id)
                .expect("fresh partitions have a topic");
            let flags = (
                topic.durability == cairn_engine::config::Durability::Persisted,
                topic.offsets == cairn_engine::config::Durability::Persisted,
            );
            self.parts.entry(*identity).or_default().persisted = Some(flags);
        }
        for (s, t, g, incarnation) in &effect.groups_deleted {
            self.members.remove(&(*s, *t, *g, *incarnation));
            self.generations.remove(&(*s, *t, *g, *incarnation));
            let holder = Holder::Group {
                id: *g,
                incarnation: *incarnation,
            };
            for part in self.parts.values_mut() {
                part.offsets.remove(&holder);
                part.unknown_offsets.remove(&holder);
            }
        }
        if matches!(
            op,
            AdminOp::DeleteTopic(..) | AdminOp::DeleteStream(..) | AdminOp::DeleteGroup(..)
        ) {
            self.decision("EntityDeleted");
        }
        // Incarnations the model no longer has are gone (purged, removed).
        let current: BTreeSet<PartitionIdentity> =
            self.model.identities(self.cluster).into_values().collect();
        self.parts
            .retain(|id, p| current.contains(id) || p.persisted.is_none());
    }

    /// Judges the refusals whose state the model has reached.
    fn judge_refusals(&mut self) -> Checked<()> {
        let ready: Vec<(u64, Sent)> = {
            let (ready, waiting) = std::mem::take(&mut self.deferred_refusals)
                .into_iter()
                .partition(|(at, _)| *at <= self.model.op);
            self.deferred_refusals = waiting;
            ready
        };
        for (at, sent) in ready {
            let Some(state) = self
                .history
                .get(&at)
                .cloned()
                .or_else(|| (at == self.model.op).then(|| self.model.clone()))
            else {
                // Older than the history keeps: nothing left to judge it by.
                continue;
            };
            let mut state: Model = state;
            if state.apply(&sent.op, None, self.cluster).is_ok() {
                return Err(meta_violation(format!(
                    "the node refused {:?} checked after op {at}, which the model accepts there",
                    sent.op
                )));
            }
        }
        Ok(())
    }
}

/// What the model says a login gets: the user's id and incarnation, or the error code.
pub(crate) type Expected = Result<(u32, u64), u32>;

/// What a login may answer, judged by the users the model had while it ran.
pub(crate) struct LoginExpectation {
    answer: Expected,
    racing: bool,
    user: Option<(u32, u64)>,
}

impl NodeWorld {
    /// What the model says a login gets now, whether user ops are in flight, and the user's
    /// (id, incarnation) if it exists.
    pub(crate) fn login_expectation(&self, username: &str, password: &str) -> LoginExpectation {
        let user = self.model.users.iter().find(|(_, u)| u.name == username);
        let racing = self.in_flight.values().any(|s| s.op.is_user_op())
            || !self.pending.is_empty()
            || !self.deferred_refusals.is_empty();
        let answer = match user {
            None => Err(42),
            Some((_, u)) if u.password != password => Err(42),
            Some((_, u)) if u.status != 1 => Err(47),
            Some((id, u)) => Ok((*id, u.created_op)),
        };
        LoginExpectation {
            answer,
            racing,
            user: user.map(|(id, u)| (*id, u.created_op)),
        }
    }

    /// A quiet login (no user op ran meanwhile) gets exactly the model's answer; one racing
    /// user ops gets an error, or succeeds as a user that existed under that name; and a
    /// success with no user op in flight when it answers is the user as it is then (its
    /// incarnation, password and status).
    pub(crate) fn judge_login(
        &mut self,
        (username, password): (&str, &str),
        before: LoginExpectation,
        after: LoginExpectation,
        result: NodeResult<cairn_engine::node::Login>,
    ) -> Checked<()> {
        if self.deleting_users.contains_key(username) {
            self.decision("LoginRacedDeletion");
        }
        let got: Expected = match &result {
            Ok(login) => Ok((login.user_id, login.incarnation)),
            Err(NodeError::Stopped(failure)) if self.stopped_with_cause(failure) => return Ok(()),
            Err(e) => Err(e.code()),
        };
        self.trace.event(format!(
            "login {username:?} -> {got:?} (expected {:?})",
            before.answer
        ));
        let quiet = !before.racing && !after.racing && before.answer == after.answer;
        if quiet && got != before.answer {
            return Err(violation(
                INV_CALLERS,
                format!(
                    "login of {username:?} answered {got:?}, the model's users say {:?}",
                    before.answer
                ),
            ));
        }
        let plausible =
            match got {
                Err(code) => matches!(code, 42 | 47),
                Ok(user) => Some(user) == before.user
                    || Some(user) == after.user
                    || self.in_flight.values().any(
                        |s| matches!(&s.op, AdminOp::CreateUser { name, .. } if name == username),
                    )
                    || !self.pending.is_empty(),
            };
        if !quiet && !plausible {
            return Err(violation(
                INV_CALLERS,
                format!(
                    "login of {username:?} during user changes answered {got:?}: neither {:?} before nor {:?} after",
                    before.answer, after.answer
                ),
            ));
        }
        // A login's last look at the view is after its hash check, with no wait before it
        // answers, and a user op is published before it is acknowledged. So once the model
        // holds a change of the user (none in flight now), a success is that user as it is
        // now: the incarnation, the password and the status it verified, never ones a
        // change replaced. (A rename does not revoke: the login may answer for the user
        // its name named when it began.)
        if let (Ok((id, incarnation)), false) = (got, after.racing) {
            let now = self.model.users.get(&id);
            let holds = now.is_some_and(|u| {
                u.created_op == incarnation && u.password == password && u.status == 1
            });
            if !holds {
                return Err(violation(
                    INV_CALLERS,
                    format!(
                        "login of {username:?} answered user {id} (incarnation {incarnation}), which no longer has that password, incarnation or status: {:?}",
                        now.map(|u| (&u.name, &u.password, u.created_op, u.status))
                    ),
                ));
            }
        }
        if before.answer.is_ok() && after.answer != before.answer && !after.racing {
            self.decision("LoginOutlivedUserChange");
        }
        Ok(())
    }
}

/// The lookups by name a caller makes, against the entities the view lists: every stream,
/// topic, group and user resolves to its own id by its name (and by its id).
pub(crate) fn names_that_do_not_resolve(view: &cairn_engine::node::MetaView) -> Option<String> {
    let named = |name: &str| WireIdentifier::named(name).expect("a stored name is valid");
    for (&s, stream) in view.streams() {
        if view.stream_id(&named(&stream.name)).ok() != Some(s)
            || view.stream_id(&sid(s)).ok() != Some(s)
        {
            return Some(format!(
                "stream {:?} does not resolve to its id {s}",
                stream.name
            ));
        }
        for (&t, topic) in &stream.topics {
            if view
                .topic_ids(&named(&stream.name), &named(&topic.name))
                .ok()
                != Some((s, t))
            {
                return Some(format!(
                    "topic {:?} of {s} does not resolve to its id {t}",
                    topic.name
                ));
            }
            for (&g, group) in &topic.groups {
                if view.group_id(s, t, &named(&group.name)).ok() != Some(g) {
                    return Some(format!(
                        "group {:?} of {s}/{t} does not resolve to its id {g}",
                        group.name
                    ));
                }
            }
        }
    }
    for (&u, user) in view.users() {
        if view.user_id(&named(&user.username)).ok() != Some(u)
            || view.user_by_name(&user.username).map(|x| x.id) != Some(u)
        {
            return Some(format!(
                "user {:?} does not resolve to its id {u}",
                user.username
            ));
        }
    }
    None
}

//! The callers: each a task that picks an operation from the model, sends it through its
//! own client (the world is never locked across the wait), and judges the answer.

use super::model::{self, AdminOp, Model, Window};
use super::{
    lock, meta_violation, Accepted, Due, GroupInc, Holder, NodeWorld, Sent, Shared, INV_CALLERS,
    INV_RETENTION, MAX_PARTITIONS, MAX_STREAMS, MAX_TOPICS,
};
use crate::executor::Executor;
use crate::partition_world::decode;
use crate::report::{violation, Checked, INV_LIVENESS, INV_OFFSETS, INV_PREFIX};
use bytes::BytesMut;
use cairn_engine::env::Clock;
use cairn_engine::format::BatchBuilder;
use cairn_engine::node::ops::MetaOp;
use cairn_engine::node::retention::{Policy, Reason};
use cairn_engine::node::{
    Client, Deletion, MetaReply, NodeError, NodeResult, PartitionInfo, PartitionKey,
};
use cairn_engine::partition::{PartitionError, PartitionIdentity, Polled};
use cairn_faults::FaultKind;
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest,
};
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::requests::partitions::{
    CreatePartitionsRequest, DeletePartitionsRequest,
};
use iggy_binary_protocol::requests::streams::{
    CreateStreamRequest, DeleteStreamRequest, PurgeStreamRequest, UpdateStreamRequest,
};
use iggy_binary_protocol::requests::topics::{
    CreateTopicRequest, DeleteTopicRequest, PurgeTopicRequest, UpdateTopicRequest,
};
use iggy_binary_protocol::requests::users::{
    ChangePasswordRequest, CreateUserRequest, DeleteUserRequest, UpdatePermissionsRequest,
    UpdateUserRequest,
};
use iggy_binary_protocol::{
    WireConsumer, WireIdentifier, WireName, WireOptions, WirePartitioning, WirePollingStrategy,
    KIND_CONSUMER_GROUP,
};
use rand::Rng;
use std::collections::BTreeSet;
use std::time::Duration;

fn sid(id: u32) -> WireIdentifier {
    WireIdentifier::numeric(id)
}

fn wire_name(name: &str) -> WireName {
    WireName::new(name).unwrap_or_else(|_| WireName::new("invalid").expect("a valid name"))
}

/// When an op started: the virtual time, and the model's op then.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Start {
    pub(crate) at: u64,
    pub(crate) model_op: u64,
}

/// The ids of the callers' clients.
const ADMIN: u32 = 100;
const PRODUCER: u32 = 200;
const AUTH: u32 = 300;
const LOGIN: u32 = 301;
const READER: u32 = 400;
const CLEANER: u32 = 500;
/// Group members are clients 1 ..= MEMBERS.
pub(crate) const MEMBERS: u128 = 3;

/// Spawns every caller of an epoch, each with its own client of the running node.
pub(crate) fn spawn(world: &Shared, executor: &Executor) {
    let handle = executor.handle();
    let (node, profile) = {
        let w = lock(world);
        (w.node.clone().expect("booted"), w.profile.clone())
    };
    let spawn = |f: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| {
        cairn_engine::env::Tasks::spawn(&handle, f);
    };
    let think = profile.max_think_nanos;
    for i in 0..profile.admins {
        let (w, client) = (world.clone(), node.client(u128::from(ADMIN + i)));
        spawn(Box::pin(async move {
            while pause(&w, think * 4).await {
                admin_step(&w, &client, ADMIN + i).await;
                after_step(&w, true);
            }
        }));
    }
    for i in 0..profile.producers {
        let (w, client) = (world.clone(), node.client(u128::from(PRODUCER + i)));
        spawn(Box::pin(async move {
            while pause(&w, think).await {
                produce(&w, &client).await;
                after_step(&w, true);
            }
        }));
    }
    let (w, members) = (
        world.clone(),
        (1..=MEMBERS).map(|c| node.client(c)).collect::<Vec<_>>(),
    );
    spawn(Box::pin(async move {
        while pause(&w, think).await {
            consume(&w, &members).await;
            after_step(&w, true);
        }
    }));
    let (w, client) = (world.clone(), node.client(u128::from(AUTH)));
    spawn(Box::pin(async move {
        while pause(&w, think * 2).await {
            user_step(&w, &client).await;
            after_step(&w, true);
        }
    }));
    let (w, client) = (world.clone(), node.client(u128::from(LOGIN)));
    spawn(Box::pin(async move {
        while pause(&w, think).await {
            login_step(&w, &client).await;
            after_step(&w, true);
        }
    }));
    let (w, client) = (world.clone(), node.client(u128::from(READER)));
    let read_every = profile.read_every_nanos;
    spawn(Box::pin(async move {
        while pause(&w, read_every).await {
            read_view(&w, &client);
            after_step(&w, false);
        }
    }));
    let (w, client) = (world.clone(), node.client(u128::from(CLEANER)));
    let every = profile.cleaner_every_nanos;
    spawn(Box::pin(async move {
        while pause(&w, every).await {
            watch_cleaners(&w, &client).await;
            after_step(&w, false);
        }
    }));
}

/// Waits a random time; false once the epoch is over.
async fn pause(world: &Shared, max: u64) -> bool {
    let (nanos, clock) = {
        let mut w = lock(world);
        if w.stop.is_some() || w.violation.is_some() {
            return false;
        }
        (w.rng.gen_range(0..max.max(1)), w.clock.clone())
    };
    Clock::sleep(&clock, Duration::from_nanos(nanos)).await;
    let w = lock(world);
    w.stop.is_none() && w.violation.is_none()
}

/// After every step: the coverage the node's counters show, the step count, the nemesis.
fn after_step(world: &Shared, counts: bool) {
    let mut w = lock(world);
    if w.disk.is_crashed() && w.stop.is_none() {
        w.stop = Some(false);
    }
    if let Some(node) = w.node.clone() {
        let stats = node.stats();
        for (name, fired) in [
            ("JoinedRunningPersist", stats.joined_running_persist > 0),
            ("PollDuringPersist", stats.polls_during_persist > 0),
            ("InboxFull", stats.inbox_full > 0),
            ("MetadataBatched", stats.meta_ops > stats.meta_batches + 1),
        ] {
            if fired && !w.report.decisions.contains_key(name) {
                w.decision(name);
            }
        }
        if node.failure().is_some() && w.stop.is_none() {
            // A stopped node exits; its supervisor restarts it.
            w.event("the node stopped: restart");
            w.stop = Some(false);
        }
    }
    if counts {
        w.ops += 1;
        if w.ops >= w.profile.steps && w.stop.is_none() {
            w.stop = Some(false);
            w.faulty = false;
        }
        w.nemesis();
    }
}

// Metadata ----------------------------------------------------------------------------------

impl NodeWorld {
    fn name(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        // Now and then a name already taken: the node must refuse it as the model does.
        if self.rng.gen_bool(0.1) && self.next_name > 1 {
            return format!("{prefix}{}", self.rng.gen_range(0..self.next_name));
        }
        format!("{prefix}{}", self.next_name)
    }

    fn pick_topic(&mut self) -> Option<(u32, u32)> {
        let all: Vec<(u32, u32)> = self
            .model
            .streams
            .iter()
            .flat_map(|(s, st)| st.topics.keys().map(move |t| (*s, *t)))
            .collect();
        (!all.is_empty()).then(|| all[self.rng.gen_range(0..all.len())])
    }

    fn pick_key(&mut self) -> Option<PartitionKey> {
        let all: Vec<PartitionKey> = self
            .model
            .identities(self.cluster)
            .into_keys()
            .filter(|k| !self.removed.contains(k))
            .collect();
        (!all.is_empty()).then(|| all[self.rng.gen_range(0..all.len())])
    }

    fn structure_op(&mut self) -> Option<AdminOp> {
        let streams: Vec<u32> = self.model.streams.keys().copied().collect();
        let topics = self
            .model
            .streams
            .values()
            .map(|s| s.topics.len())
            .sum::<usize>();
        let roll = self.rng.gen_range(0..100);
        let any_stream = |w: &mut Self| {
            (!streams.is_empty()).then(|| streams[w.rng.gen_range(0..streams.len())])
        };
        Some(match roll {
            0..=14 if streams.len() < MAX_STREAMS => AdminOp::CreateStream(self.name("s")),
            0..=39 if topics < MAX_TOPICS * 2 => {
                let stream = any_stream(self)?;
                let expiry = self.profile.expiries[self.rng.gen_range(0..3)];
                AdminOp::CreateTopic {
                    stream,
                    name: self.name("t"),
                    partitions: self.rng.gen_range(0..=MAX_PARTITIONS),
                    persisted: self.rng.gen_bool(0.6),
                    offsets_persisted: self.rng.gen_bool(0.6),
                    expiry,
                    max_size: [0, 1, 3 << 20][self.rng.gen_range(0..3)],
                }
            }
            40..=47 => {
                let (s, t) = self.pick_topic()?;
                let n = self.rng.gen_range(1..=2);
                let count = self.model.topic(s, t)?.partitions.len() as u32;
                match count + n <= MAX_PARTITIONS + 1 {
                    true => AdminOp::CreatePartitions(s, t, n),
                    false => AdminOp::DeletePartitions(s, t, n),
                }
            }
            48..=52 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::DeletePartitions(s, t, self.rng.gen_range(1..=2))
            }
            53..=60 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::CreateGroup(s, t, self.name("g"))
            }
            61..=64 => {
                let (s, t) = self.pick_topic()?;
                let groups: Vec<u32> = self.model.topic(s, t)?.groups.keys().copied().collect();
                AdminOp::DeleteGroup(s, t, *groups.first()?)
            }
            65..=70 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::UpdateTopic {
                    stream: s,
                    topic: t,
                    expiry: self.profile.expiries[self.rng.gen_range(0..3)],
                    max_size: [0, 1, 3 << 20][self.rng.gen_range(0..3)],
                }
            }
            71..=75 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::PurgeTopic(s, t)
            }
            76..=78 => AdminOp::PurgeStream(any_stream(self)?),
            79..=84 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::DeleteTopic(s, t)
            }
            85..=87 => AdminOp::DeleteStream(any_stream(self)?),
            _ => {
                let s = any_stream(self)?;
                AdminOp::RenameStream(s, self.name("s"))
            }
        })
    }

    fn user_op(&mut self) -> Option<AdminOp> {
        let users: Vec<u32> = self.model.users.keys().copied().collect();
        let any = |w: &mut Self| users[w.rng.gen_range(0..users.len())];
        Some(match self.rng.gen_range(0..100) {
            0..=29 => AdminOp::CreateUser {
                name: self.name("user"),
                password: format!("pw{}", self.rng.gen_range(0..4)),
                status: [1, 1, 1, 2, 0, 3][self.rng.gen_range(0..6)],
                permissions: self.some_permissions(),
            },
            30..=44 => AdminOp::UpdateUser {
                user: any(self),
                name: self.rng.gen_bool(0.3).then(|| self.name("user")),
                status: Some([1, 2, 2, 9][self.rng.gen_range(0..4)]),
            },
            45..=64 => AdminOp::DeleteUser(any(self)),
            65..=79 => AdminOp::ChangePassword {
                user: any(self),
                password: format!("pw{}", self.rng.gen_range(0..4)),
            },
            80..=94 => AdminOp::UpdatePermissions {
                user: any(self),
                permissions: self.some_permissions(),
            },
            _ => AdminOp::OversizeUser(self.name("huge"), [1, 0, 4096][self.rng.gen_range(0..3)]),
        })
    }

    /// Permissions over some of the topics the model has (now and then a topic it does not,
    /// which the node must refuse).
    fn some_permissions(&mut self) -> Option<model::MPermissions> {
        if self.rng.gen_bool(0.5) {
            return None;
        }
        let mut permissions = Vec::new();
        for (s, stream) in &self.model.streams {
            let topics: Vec<u32> = stream.topics.keys().copied().collect();
            permissions.push((*s, topics));
        }
        if self.rng.gen_bool(0.1) {
            permissions.push((99, vec![0]));
        }
        Some(permissions)
    }

    /// Registers `op` as `caller`'s op in flight.
    pub(crate) fn send_op(&mut self, caller: u32, op: AdminOp) -> Sent {
        let sent = Sent {
            op,
            at: self.now(),
            wall: self.wall(),
            jumps: self.jumps,
            fills: self.fills + u32::from(self.disk_full_until.is_some()),
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

    /// Judges `caller`'s metadata answer, in journal order.
    /// Judges the answer to `caller`'s op, sent through the client with id `client`.
    pub(crate) fn judge_meta(
        &mut self,
        caller: u32,
        client: u128,
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
                // A node that told a caller it failed says why to whoever supervises it.
                let silent = !matches!(*failure, cairn_engine::node::Failure::Shutdown)
                    && self.node.as_ref().is_some_and(|n| n.failure().is_none());
                if silent {
                    return Err(violation(
                        INV_LIVENESS,
                        format!("{:?}: answered that the node stopped ({failure}), yet the node reports no failure", sent.op),
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
                self.asked_by.insert(reply.at_op, client);
                // The entry is in the journal now, unless a checkpoint since emptied it.
                let entries = self.journal_entries();
                if let Some(entry) = entries.iter().find(|e| e.op == reply.at_op) {
                    super::checks::judge_entry_origin(entry, client)?;
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
            Err(NodeError::Stopped(_)) => {
                self.in_doubt.push(sent);
                Ok(())
            }
            Err(NodeError::MetadataNoSpace) => {
                let full_meanwhile = self.fills + u32::from(self.disk_full_until.is_some())
                    > sent.fills
                    || sent.fills > self.fills;
                if !full_meanwhile && self.disk_full_until.is_none() {
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
        self.judge_refusals()
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
        while self.history.len() > super::HISTORY {
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
        for identity in &effect.removed {
            self.due.remove(identity);
            if live {
                self.removed.remove(&super::key(identity));
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
                    .find(|p| super::key(p) == super::key(id) && p.nonce != id.nonce)
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
                self.removed.remove(&super::key(identity));
            }
            let raced: Vec<(Holder, u64)> = self
                .racing_stores
                .iter()
                .filter(|(key, _, _)| *key == super::key(identity))
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

/// The journaled op of an admin op (hashing a password on the node's pool first).
async fn meta_op(client: &Client, op: &AdminOp, model_view: &Model) -> NodeResult<MetaOp> {
    Ok(match op {
        AdminOp::CreateStream(name) => MetaOp::CreateStream(CreateStreamRequest {
            name: wire_name(name),
            options: WireOptions::empty(),
        }),
        AdminOp::RenameStream(s, name) => MetaOp::UpdateStream(UpdateStreamRequest {
            stream_id: sid(*s),
            name: wire_name(name),
            options: WireOptions::empty(),
        }),
        AdminOp::DeleteStream(s) => {
            MetaOp::DeleteStream(DeleteStreamRequest { stream_id: sid(*s) })
        }
        AdminOp::PurgeStream(s) => MetaOp::PurgeStream(PurgeStreamRequest { stream_id: sid(*s) }),
        AdminOp::CreateTopic {
            stream,
            name,
            partitions,
            persisted,
            offsets_persisted,
            expiry,
            max_size,
        } => MetaOp::CreateTopic(CreateTopicRequest {
            stream_id: sid(*stream),
            partitions_count: *partitions,
            name: wire_name(name),
            options: model::create_options(*persisted, *offsets_persisted, *expiry, *max_size),
        }),
        AdminOp::UpdateTopic {
            stream,
            topic,
            expiry,
            max_size,
        } => MetaOp::UpdateTopic(UpdateTopicRequest {
            stream_id: sid(*stream),
            topic_id: sid(*topic),
            name: wire_name(
                &model_view
                    .topic(*stream, *topic)
                    .map_or_else(|| "gone".to_string(), |t| t.name.clone()),
            ),
            options: model::update_options(*expiry, *max_size),
        }),
        AdminOp::DeleteTopic(s, t) => MetaOp::DeleteTopic(DeleteTopicRequest {
            stream_id: sid(*s),
            topic_id: sid(*t),
        }),
        AdminOp::PurgeTopic(s, t) => MetaOp::PurgeTopic(PurgeTopicRequest {
            stream_id: sid(*s),
            topic_id: sid(*t),
        }),
        AdminOp::CreatePartitions(s, t, n) => MetaOp::CreatePartitions(CreatePartitionsRequest {
            stream_id: sid(*s),
            topic_id: sid(*t),
            partitions_count: *n,
        }),
        AdminOp::DeletePartitions(s, t, n) => MetaOp::DeletePartitions(DeletePartitionsRequest {
            stream_id: sid(*s),
            topic_id: sid(*t),
            partitions_count: *n,
        }),
        AdminOp::CreateGroup(s, t, name) => {
            MetaOp::CreateConsumerGroup(CreateConsumerGroupRequest {
                stream_id: sid(*s),
                topic_id: sid(*t),
                name: wire_name(name),
            })
        }
        AdminOp::DeleteGroup(s, t, g) => MetaOp::DeleteConsumerGroup(DeleteConsumerGroupRequest {
            stream_id: sid(*s),
            topic_id: sid(*t),
            group_id: sid(*g),
        }),
        AdminOp::CreateUser {
            name,
            password,
            status,
            permissions,
        } => MetaOp::CreateUser(CreateUserRequest {
            username: wire_name(name),
            password: client.hash_password(password).await?,
            status: *status,
            permissions: permissions.as_ref().map(model::wire_permissions),
            options: WireOptions::empty(),
        }),
        AdminOp::UpdateUser { user, name, status } => MetaOp::UpdateUser(UpdateUserRequest {
            user_id: sid(*user),
            username: name.as_deref().map(wire_name),
            status: *status,
            options: WireOptions::empty(),
        }),
        AdminOp::DeleteUser(id) => MetaOp::DeleteUser(DeleteUserRequest { user_id: sid(*id) }),
        AdminOp::ChangePassword { user, password } => {
            MetaOp::ChangePassword(ChangePasswordRequest {
                user_id: sid(*user),
                current_password: String::new(),
                new_password: client.hash_password(password).await?,
            })
        }
        AdminOp::UpdatePermissions { user, permissions } => {
            MetaOp::UpdatePermissions(UpdatePermissionsRequest {
                user_id: sid(*user),
                permissions: permissions.as_ref().map(model::wire_permissions),
            })
        }
        AdminOp::OversizeUser(name, excess) => {
            let password = client.hash_password("password").await?;
            sized_user(
                name,
                &password,
                model::MAX_BODY.saturating_add_signed(*excess as isize),
            )
        }
    })
}

/// A `CreateUser` whose body is exactly `target` bytes: permissions over topics `0..n` of
/// stream 0, the name padded for the last few bytes.
fn sized_user(name: &str, password: &str, target: usize) -> MetaOp {
    let build = |name: &str, topics: u32| {
        MetaOp::CreateUser(CreateUserRequest {
            username: wire_name(name),
            password: password.to_string(),
            status: 1,
            permissions: Some(model::wire_permissions(&vec![(0, (0..topics).collect())])),
            options: WireOptions::empty(),
        })
    };
    let len = |op: &MetaOp| op.body().len();
    let one = len(&build(name, 1));
    let per_topic = len(&build(name, 2)) - one;
    let topics = 1 + ((target - one) / per_topic) as u32;
    let short = target - len(&build(name, topics));
    let op = build(&format!("{name}{}", "x".repeat(short)), topics);
    assert_eq!(len(&op), target, "a body of exactly the size asked for");
    op
}

pub(crate) async fn run_meta(world: &Shared, client: &Client, caller: u32, op: AdminOp) {
    let view = {
        let mut w = lock(world);
        w.send_op(caller, op.clone());
        w.model.clone()
    };
    let reply = match meta_op(client, &op, &view).await {
        Ok(meta) => client.execute_traced(meta).await,
        Err(e) => Err(e),
    };
    // Read-your-writes: the view after an answer holds that answer's op.
    let seen = client.view().op;
    let mut w = lock(world);
    if let Ok(MetaReply {
        at_op,
        result: Ok(_),
    }) = &reply
    {
        if seen < *at_op {
            let v = violation(
                INV_CALLERS,
                format!("{op:?} was answered as op {at_op}, then the view showed op {seen}"),
            );
            w.fail(v);
            return;
        }
    }
    if let Err(v) = w.judge_meta(caller, client.id(), reply) {
        w.fail(v);
    }
}

async fn admin_step(world: &Shared, client: &Client, caller: u32) {
    let op = {
        let mut w = lock(world);
        if !w.is_up() {
            return;
        }
        let op = w.structure_op();
        match op {
            Some(op) => op,
            None => return,
        }
    };
    run_meta(world, client, caller, op).await;
}

// Users and logins --------------------------------------------------------------------------

/// What a login may answer, judged by the users the model had while it ran.
/// A user operation (create, update, delete, change password, permissions).
async fn user_step(world: &Shared, client: &Client) {
    let op = {
        let mut w = lock(world);
        if !w.is_up() {
            return;
        }
        w.user_op()
    };
    if let Some(op) = op {
        run_meta(world, client, AUTH, op).await;
    }
}

/// A login with a right, a wrong or an unknown user's password, racing the user operations.
async fn login_step(world: &Shared, client: &Client) {
    let (username, password, before) = {
        let mut w = lock(world);
        if !w.is_up() {
            return;
        }
        let (username, password) = w.plan_login();
        let before = w.login_expectation(&username, &password);
        if w.deleting_users.contains_key(&username) {
            w.decision("LoginRacedDeletion");
        }
        (username, password, before)
    };
    let result = client.login(&username, &password).await;
    let mut w = lock(world);
    let after = w.login_expectation(&username, &password);
    if let Err(v) = w.judge_login(&username, before, after, result) {
        w.fail(v);
    }
}

/// What the model says a login gets: the user's id and incarnation, or the error code.
type Expected = Result<(u32, u64), u32>;

struct LoginExpectation {
    answer: Expected,
    racing: bool,
    user: Option<(u32, u64)>,
}

impl NodeWorld {
    fn plan_login(&mut self) -> (String, String) {
        let users: Vec<(String, String)> = self
            .model
            .users
            .values()
            .map(|u| (u.name.clone(), u.password.clone()))
            .collect();
        let (name, password) = users[self.rng.gen_range(0..users.len())].clone();
        match self.rng.gen_range(0..10) {
            0 => ("nobody".into(), "password".into()),
            1 => (name, "wrong password".into()),
            _ => (name, password),
        }
    }

    /// What the model says a login gets now, whether user ops are in flight, and the user's
    /// (id, incarnation) if it exists.
    fn login_expectation(&self, username: &str, password: &str) -> LoginExpectation {
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
    /// user ops gets an error, or succeeds as a user that existed under that name.
    fn judge_login(
        &mut self,
        username: &str,
        before: LoginExpectation,
        after: LoginExpectation,
        result: NodeResult<cairn_engine::node::Login>,
    ) -> Checked<()> {
        if self.deleting_users.contains_key(username) {
            self.decision("LoginRacedDeletion");
        }
        let got: Expected = match &result {
            Ok(login) => Ok((login.user_id, login.incarnation)),
            Err(NodeError::Stopped(_)) => return Ok(()),
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
        Ok(())
    }
}

// Messages ----------------------------------------------------------------------------------

impl NodeWorld {
    pub(crate) fn batch(&mut self, count: usize) -> (BytesMut, Vec<u128>) {
        let mut builder = BatchBuilder::new(self.clock.now_nanos() / 1000);
        let mut ids = Vec::with_capacity(count);
        for _ in 0..count {
            let size = self.rng.gen_range(0..=self.profile.max_payload);
            let mut payload = vec![0u8; size];
            self.rng.fill(&mut payload[..]);
            let id = self.next_id;
            self.next_id += 1;
            builder.push(id, 0, &payload, b"");
            ids.push(id);
            self.sent_ids.insert(id);
        }
        (builder.build(), ids)
    }

    /// Whether an error to a caller of `s`/`t` has a cause the model knows of: a crash, a
    /// concurrent metadata op, a missing entity, an operator's removal, a full disk.
    /// When a caller's op started, for judging its answer.
    /// How a caller names stream `s` and topic `t`: by id, or now and then by name (only
    /// while no metadata op is in flight, so the names denote these ids when picked).
    pub(crate) fn address(&mut self, s: u32, t: u32) -> (WireIdentifier, WireIdentifier, bool) {
        let quiet =
            self.in_flight.is_empty() && self.pending.is_empty() && self.in_doubt.is_empty();
        let names =
            self.model.streams.get(&s).and_then(|stream| {
                Some((stream.name.clone(), stream.topics.get(&t)?.name.clone()))
            });
        match names {
            Some((stream, topic)) if quiet && self.rng.gen_bool(0.3) => (
                WireIdentifier::named(&stream).expect("a model name is valid"),
                WireIdentifier::named(&topic).expect("a model name is valid"),
                true,
            ),
            _ => (sid(s), sid(t), false),
        }
    }

    /// Whether a request that named its stream and topic by name may have reached other
    /// entities: a metadata op ran meanwhile (a rename, a deletion and a re-creation).
    pub(crate) fn names_moved(&self, started: Start) -> bool {
        self.model.op != started.model_op
            || !self.in_flight.is_empty()
            || !self.pending.is_empty()
            || !self.in_doubt.is_empty()
    }

    pub(crate) fn start(&self) -> Start {
        Start {
            at: self.now(),
            model_op: self.model.op,
        }
    }

    fn excused(&self, error: &NodeError, s: u32, t: u32, started: Start) -> bool {
        use cairn_engine::partition::FenceReason;
        // Metadata changed (or may have) while the op ran.
        let racing = !self.in_flight.is_empty()
            || !self.pending.is_empty()
            || !self.in_doubt.is_empty()
            || self.model.op != started.model_op;
        let full = self.disk_full_until.is_some() || self.last_full >= started.at;
        match error {
            NodeError::Stopped(_) => true,
            _ if self.disk.is_crashed() => true,
            NodeError::StreamNotFound(_) | NodeError::TopicNotFound { .. } => {
                racing || self.model.topic(s, t).is_none()
            }
            NodeError::PartitionNotFound { .. } => {
                racing
                    || self
                        .model
                        .topic(s, t)
                        .is_none_or(|t| t.partitions.is_empty())
            }
            NodeError::Partition(PartitionError::Fenced(FenceReason::DirectoryMissing {
                ..
            })) => self.removed.iter().any(|k| (k.0, k.1) == (s, t)),
            NodeError::Partition(PartitionError::NoSpace) => full,
            NodeError::Partition(PartitionError::Fenced(FenceReason::IoFailed { .. })) => full,
            NodeError::GroupNotFound { .. } | NodeError::NotAMember { .. } => racing,
            _ => false,
        }
    }

    /// The op that made `identity`, if the newest superblock record (in the page cache)
    /// names it journaled but not applied: a partition an op creates serves only once the
    /// op is recorded applied, so a removal of its directory afterwards fences it rather
    /// than let boot redo the creation empty over acknowledged messages.
    fn created_by_unapplied_op(&self, identity: PartitionIdentity) -> Option<u64> {
        if self.disk.is_crashed() || !self.is_up() {
            return None;
        }
        let record = super::checks::newest_slot_record(|path| self.disk.contents(path))?;
        let key = super::key(&identity);
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
}

pub(crate) async fn produce(world: &Shared, client: &Client) {
    let plan = {
        let mut w = lock(world);
        if !w.is_up() {
            return;
        }
        let Some((s, t)) = w.pick_topic() else {
            return;
        };
        let partitions = w.model.topic(s, t).expect("picked").partitions.len() as u32;
        let partitioning = match w.rng.gen_range(0..3) {
            0 if partitions > 0 => WirePartitioning::PartitionId(w.rng.gen_range(0..partitions)),
            1 => WirePartitioning::MessagesKey(vec![w.rng.gen(); 4]),
            _ => WirePartitioning::Balanced,
        };
        let count = w.rng.gen_range(1..=8);
        let (batch, ids) = w.batch(count);
        let address = w.address(s, t);
        (s, t, partitioning, batch, ids, address, w.start())
    };
    let (s, t, partitioning, batch, ids, (stream, topic, by_name), started) = plan;
    let result = client.send(&stream, &topic, &partitioning, batch).await;
    let mut w = lock(world);
    if by_name && w.names_moved(started) {
        // The names may denote other entities by now: what the send did is not judged.
        w.event(format!(
            "send by name to {s}/{t} raced a metadata op: not judged"
        ));
        return;
    }
    if let Err(v) = w.judge_send(s, t, &ids, started, result) {
        w.fail(v);
    }
}

// Consumers and groups ----------------------------------------------------------------------

impl NodeWorld {
    /// A poll's messages against the model: sent by someone, gapless, the acknowledged one
    /// at each known offset, none below the log start.
    pub(crate) fn judge_polled(
        &mut self,
        identity: PartitionIdentity,
        polled: &Polled,
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
            if m.offset < part.log_start && !part.log_start_unknown {
                return Err(violation(
                    INV_RETENTION,
                    format!(
                        "partition {identity}: a poll served offset {} below the log start {}",
                        m.offset, part.log_start
                    ),
                ));
            }
            if let Some(id) = part.messages.get(&m.offset) {
                if *id != m.id {
                    return Err(violation(INV_PREFIX, format!("partition {identity}: a poll read {:#x} at offset {}, acknowledged for {id:#x}", m.id, m.offset)));
                }
            }
        }
        Ok(())
    }
}

async fn consume(world: &Shared, members: &[Client]) {
    let roll = lock(world).rng.gen_range(0..12);
    match roll {
        0..=4 => poll(world, &members[0]).await,
        5..=6 => store_offset(world, &members[0]).await,
        7..=10 => group_step(world, members).await,
        _ => delete_segments(world, &members[0]).await,
    }
}

async fn poll(world: &Shared, client: &Client) {
    let plan = {
        let mut w = lock(world);
        if !w.is_up() {
            return;
        }
        let Some(key) = w.pick_key() else {
            return;
        };
        let consumer = WireConsumer::consumer(sid(w.rng.gen_range(0..3)));
        let strategy = match w.rng.gen_range(0..3) {
            0 => WirePollingStrategy { kind: 3, value: 0 },
            1 => WirePollingStrategy { kind: 5, value: 0 },
            _ => WirePollingStrategy {
                kind: 1,
                value: w.rng.gen_range(0..200),
            },
        };
        let address = w.address(key.0, key.1);
        (key, consumer, strategy, address, w.start())
    };
    let (key, consumer, strategy, (stream_id, topic_id, by_name), started) = plan;
    let request = PollMessagesRequest {
        consumer,
        stream_id,
        topic_id,
        partition_id: Some(key.2),
        strategy,
        count: 50,
        auto_commit: false,
    };
    let result = client.poll(&request).await;
    let mut w = lock(world);
    if by_name && w.names_moved(started) {
        return;
    }
    let outcome = match result {
        Ok(Some(polled)) => {
            // Judged in the incarnation it read (a purge may have made another meanwhile).
            let identity = PartitionIdentity {
                stream_id: key.0,
                topic_id: key.1,
                partition_id: key.2,
                nonce: polled.incarnation,
            };
            w.judge_polled(identity, &polled)
        }
        Ok(None) => Ok(()),
        Err(e) if w.excused(&e, key.0, key.1, started) => Ok(()),
        Err(e) => Err(violation(
            INV_LIVENESS,
            format!("a poll of {key:?} failed with no fault: {e}"),
        )),
    };
    if let Err(v) = outcome {
        w.fail(v);
    }
}

async fn store_offset(world: &Shared, client: &Client) {
    let plan = {
        let mut w = lock(world);
        if !w.is_up() {
            return;
        }
        let Some(key) = w.pick_key() else {
            return;
        };
        let identity = w.model.identity(w.cluster, key).expect("picked");
        let part = w.parts.get(&identity).cloned().unwrap_or_default();
        let end = part.acked_end();
        if end == 0 {
            return;
        }
        let offset = w.rng.gen_range(part.log_start.saturating_sub(1)..end);
        (key, identity, offset, w.rng.gen_range(0..3u32), w.start())
    };
    let (key, identity, offset, consumer, started) = plan;
    // A store whose answer a crash takes may have happened: a candidate from now on.
    lock(world)
        .parts
        .entry(identity)
        .or_default()
        .offsets
        .entry(Holder::Consumer(consumer))
        .or_insert((None, BTreeSet::new()))
        .1
        .insert(Some(offset));
    let result = client
        .store_offset(
            &WireConsumer::consumer(sid(consumer)),
            &sid(key.0),
            &sid(key.1),
            Some(key.2),
            offset,
        )
        .await;
    let mut w = lock(world);
    w.trace.event(format!(
        "store {identity} consumer {consumer} = {offset} -> {result:?}"
    ));
    let outcome = w.judge_store(
        key,
        identity,
        Holder::Consumer(consumer),
        offset,
        started,
        result,
    );
    if let Err(v) = outcome {
        w.fail(v);
    }
}

impl NodeWorld {
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
        if self.racing_stores.len() >= super::MAX_RACING_STORES {
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
    fn store_candidate(&mut self, identity: PartitionIdentity, holder: Holder, offset: u64) {
        self.parts
            .entry(identity)
            .or_default()
            .offsets
            .entry(holder)
            .or_insert((None, BTreeSet::new()))
            .1
            .insert(Some(offset));
    }

    fn judge_store(
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

async fn delete_segments(world: &Shared, client: &Client) {
    let Some((key, started)) = ({
        let mut w = lock(world);
        if !w.is_up() {
            return;
        }
        let now = w.start();
        let key = w.pick_key();
        if let Some(key) = key {
            // A deletion whose answer a crash takes may have happened.
            w.deleting.insert(key);
        }
        key.map(|k| (k, now))
    }) else {
        return;
    };
    let result = client
        .delete_segments(&sid(key.0), &sid(key.1), key.2, 1)
        .await;
    let mut w = lock(world);
    w.deleting.remove(&key);
    match result {
        Ok(deleted) => {
            // The shard's cleaner may have deleted segments of this partition just before
            // (or after) this request ran; its records wait in the node's list. Each
            // incarnation's deletions are judged in its own order: by start offset.
            let mut all = w
                .node
                .as_ref()
                .map(|n| n.take_deletions())
                .unwrap_or_default();
            all.extend(deleted);
            all.sort_by_key(|d| (d.partition, d.nonce, d.segment.start_offset));
            if let Err(v) = w.judge_deletions(&all) {
                w.fail(v);
            }
        }
        Err(NodeError::Partition(PartitionError::ActiveSegment { .. })) => {}
        Err(e) if w.excused(&e, key.0, key.1, started) => {}
        Err(e) => {
            let v = violation(
                INV_LIVENESS,
                format!("deleting a segment of {key:?} failed: {e}"),
            );
            w.fail(v);
        }
    }
}

/// What a group member does in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupMove {
    Join,
    Leave,
    Disconnect,
    /// Ask the group's list and every member's assignment, and judge them.
    Check,
    Poll,
}

async fn group_step(world: &Shared, members: &[Client]) {
    let plan = {
        let mut w = lock(world);
        if !w.is_up() {
            return;
        }
        let Some((s, t)) = w.pick_topic() else {
            return;
        };
        let groups: Vec<(u32, u64)> = w
            .model
            .topic(s, t)
            .expect("picked")
            .groups
            .iter()
            .map(|(g, (_, incarnation))| (*g, *incarnation))
            .collect();
        if groups.is_empty() {
            return;
        }
        let (g, incarnation) = groups[w.rng.gen_range(0..groups.len())];
        let member = w.rng.gen_range(0..members.len());
        let moves = [
            GroupMove::Join,
            GroupMove::Leave,
            GroupMove::Disconnect,
            GroupMove::Check,
            GroupMove::Poll,
            GroupMove::Poll,
        ];
        (
            (s, t, g, incarnation),
            member,
            moves[w.rng.gen_range(0..moves.len())],
        )
    };
    group_move(world, members, plan.0, plan.1, plan.2).await;
}

/// One member's move on one incarnation of a group, judged: a join or leave updates the
/// model's members, a poll is judged like any poll, and a move the member's state makes
/// meaningless (a join when joined) is skipped.
pub(crate) async fn group_move(
    world: &Shared,
    members: &[Client],
    group: GroupInc,
    member: usize,
    planned: GroupMove,
) {
    let (s, t, g, incarnation) = group;
    let (joined, started) = {
        let w = lock(world);
        let joined = w
            .members
            .get(&group)
            .is_some_and(|m| m.contains(&members[member].id()));
        (joined, w.start())
    };
    let client = &members[member];
    let group = sid(g);
    let result: NodeResult<GroupMove> = match planned {
        GroupMove::Join if !joined => client
            .join_group(&sid(s), &sid(t), &group)
            .await
            .map(|_| GroupMove::Join),
        GroupMove::Leave if joined => client
            .leave_group(&sid(s), &sid(t), &group)
            .await
            .map(|_| GroupMove::Leave),
        GroupMove::Disconnect => client.disconnect().await.map(|_| GroupMove::Disconnect),
        GroupMove::Check => Ok(GroupMove::Check),
        GroupMove::Poll if joined => {
            let request = PollMessagesRequest {
                consumer: WireConsumer {
                    kind: KIND_CONSUMER_GROUP,
                    id: group.clone(),
                },
                stream_id: sid(s),
                topic_id: sid(t),
                partition_id: None,
                strategy: WirePollingStrategy { kind: 5, value: 0 },
                count: 20,
                auto_commit: true,
            };
            let holder = Holder::Group { id: g, incarnation };
            lock(world)
                .auto_commits
                .insert(client.id(), ((s, t), holder));
            let polled = client.poll(&request).await;
            let mut w = lock(world);
            w.auto_commits.remove(&client.id());
            match polled {
                Ok(Some(polled)) => {
                    let identity = PartitionIdentity {
                        stream_id: s,
                        topic_id: t,
                        partition_id: polled.partition_id as u32,
                        nonce: polled.incarnation,
                    };
                    if let Err(v) = w.judge_polled(identity, &polled) {
                        w.fail(v);
                        return;
                    }
                    // The shard stored the auto-commit before it answered the poll.
                    if let Some(last) = last_offset(&polled) {
                        let holder = Holder::Group { id: g, incarnation };
                        let part = w.parts.entry(identity).or_default();
                        let durable = part.offsets_persisted();
                        let entry = part
                            .offsets
                            .entry(holder)
                            .or_insert((None, BTreeSet::new()));
                        acknowledge_store(entry, last, durable);
                    }
                    return;
                }
                Ok(None) => return,
                Err(e) => {
                    drop(w);
                    Err(e)
                }
            }
        }
        _ => return,
    };
    let (check_members, unsure) = {
        let mut w = lock(world);
        let mut unsure = false;
        match result {
            // A metadata op ran meanwhile: the group may have been deleted and re-created
            // under its id, so which incarnation the node changed is unknown.
            Ok(GroupMove::Join | GroupMove::Leave) if w.names_moved(started) => unsure = true,
            Ok(GroupMove::Join) => {
                w.members
                    .entry((s, t, g, incarnation))
                    .or_default()
                    .insert(client.id());
                w.decision("GroupRebalance");
            }
            Ok(GroupMove::Leave) => {
                if let Some(m) = w.members.get_mut(&(s, t, g, incarnation)) {
                    m.remove(&client.id());
                }
                w.decision("GroupRebalance");
            }
            Ok(GroupMove::Check | GroupMove::Poll) => {}
            Ok(GroupMove::Disconnect) => w.forget_member(client.id()),
            Err(e) if w.excused(&e, s, t, started) => {}
            Err(e) => {
                let v = violation(
                    INV_LIVENESS,
                    format!(
                        "a group operation on {s}/{t}/{g} by {} failed: {e}",
                        client.id()
                    ),
                );
                w.fail(v);
                return;
            }
        }
        let quiet = w.in_flight.is_empty() && w.pending.is_empty() && w.in_doubt.is_empty();
        (quiet, unsure)
    };
    if unsure {
        // The member starts over: a disconnect drops it from every group (it fails only
        // when the node stopped, whose restart drops every membership anyway).
        let _ = client.disconnect().await;
        lock(world).forget_member(client.id());
        return;
    }
    if check_members {
        check_group(world, members, (s, t, g, incarnation)).await;
    }
}

/// A member's generation and partitions, or why it has none.
type Assignment = NodeResult<(u64, Vec<u32>)>;

/// What the node said about one group: its member list, and each simulated member's own
/// assignment (`SyncConsumerGroup`).
struct GroupSeen {
    members: Vec<(u128, Vec<u32>)>,
    assignments: Vec<(u128, Assignment)>,
}

/// Every partition has exactly one owner among the members, who are exactly the members the
/// model knows (a client that left is no member); each member's own assignment is its
/// share of that list, all at one generation, which never goes back and moves whenever the
/// members change; a client the model holds no member is told so. Judged only when no
/// metadata op ran or was in flight while the node was asked.
async fn check_group(world: &Shared, clients: &[Client], group: GroupInc) {
    let (s, t, g, incarnation) = group;
    let started = lock(world).start();
    let Ok(members) = clients[0].group_members(&sid(s), &sid(t), &sid(g)).await else {
        return;
    };
    let mut assignments = Vec::with_capacity(clients.len());
    for client in clients {
        let assignment = client.group_assignment(&sid(s), &sid(t), &sid(g)).await;
        assignments.push((client.id(), assignment));
    }
    let seen = GroupSeen {
        members,
        assignments,
    };
    let mut w = lock(world);
    if w.names_moved(started) || !w.is_up() {
        return;
    }
    let Some(topic) = w.model.topic(s, t) else {
        return;
    };
    if topic.groups.get(&g).map(|(_, inc)| *inc) != Some(incarnation) {
        return;
    }
    let partitions = topic.partitions.len() as u32;
    if let Err(v) = w.judge_group(group, partitions, &seen) {
        w.fail(v);
    }
}

impl NodeWorld {
    /// The client is a member of no group.
    fn forget_member(&mut self, client: u128) {
        for m in self.members.values_mut() {
            m.remove(&client);
        }
    }

    fn judge_group(&mut self, group: GroupInc, partitions: u32, seen: &GroupSeen) -> Checked<()> {
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
fn acknowledge_store(entry: &mut (Option<u64>, BTreeSet<Option<u64>>), offset: u64, durable: bool) {
    if durable {
        entry.1.clear();
    } else {
        entry.1.insert(entry.0);
    }
    entry.0 = Some(offset);
}

fn last_offset(polled: &Polled) -> Option<u64> {
    let batch = polled.batches.last()?;
    let header = cairn_engine::format::BatchHeader::decode(batch).ok()?;
    cairn_engine::format::MessageIter::new(batch, header.base_offset)
        .last()
        .map(|m| m.offset)
}

// The view and the cleaners -------------------------------------------------------------------

/// The reader: what the published view shows must be durable (an op seen there survives).
fn read_view(world: &Shared, client: &Client) {
    let view = client.view();
    let mut w = lock(world);
    w.max_observed_op = w.max_observed_op.max(view.op);
    let answered = w.pending.keys().next_back().copied().unwrap_or(w.model.op);
    if view.op > answered.max(w.model.op) && w.faulty && w.profile.power_loss > 0.0 {
        // An op is published and not yet answered: the moment a power loss tells whether
        // the view ran ahead of the disk.
        if w.rng.gen_bool(0.5) && w.stop.is_none() {
            w.event(format!(
                "the view shows op {} before its answer: power loss",
                view.op
            ));
            w.stop = Some(true);
        }
    }
    if let Some(wrong) = names_that_do_not_resolve(&view) {
        let v = violation(INV_CALLERS, format!("in the view, {wrong}"));
        w.fail(v);
    }
}

/// The lookups by name a caller makes, against the entities the view lists: every stream,
/// topic, group and user resolves to its own id by its name (and by its id).
fn names_that_do_not_resolve(view: &cairn_engine::node::MetaView) -> Option<String> {
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

/// Drains what the shards' cleaners deleted on their own timers and judges it.
/// Judges the cleaners' deletions, then their liveness: a sealed segment at the log start
/// of a partition with an expiry, every message of which the model holds and saw expire, is
/// deleted within a few cleaner intervals of the oracle first seeing it due.
async fn watch_cleaners(world: &Shared, client: &Client) {
    let expiring = {
        let mut w = lock(world);
        if let Err(v) = w.drain_deletions() {
            w.fail(v);
            return;
        }
        if !w.is_up() {
            return;
        }
        w.expiring_partitions()
    };
    for identity in expiring {
        let info = client.partition_info(super::key(&identity)).await;
        let mut w = lock(world);
        let judged = w.drain_deletions().and_then(|()| match info {
            Ok(Some(info)) if info.identity == identity => w.judge_cleaner_liveness(&info),
            _ => Ok(()),
        });
        if let Err(v) = judged {
            w.fail(v);
            return;
        }
    }
}

/// Cleaner intervals the oracle allows between seeing a segment due and its deletion (the
/// timer's period, a pass that began just before, and the oracle's own look between).
const CLEANER_GRACE_INTERVALS: u64 = 4;

/// Fault kinds a cleaner pass may have met on its way (an error returned to the engine):
/// while one struck the partition's files since a segment was seen due, its deletion is
/// not owed. (A clock jump since boot stops the judging altogether: the retention clock
/// refuses to follow it.)
const CLEANER_EXCUSES: [FaultKind; 5] = [
    FaultKind::WriteError,
    FaultKind::SyncError,
    FaultKind::DirSyncError,
    FaultKind::NoSpace,
    FaultKind::ReadError,
];

impl NodeWorld {
    /// Partitions of topics with an expiry, while no metadata op is in flight.
    fn expiring_partitions(&self) -> Vec<PartitionIdentity> {
        if !self.in_flight.is_empty() || !self.pending.is_empty() || !self.in_doubt.is_empty() {
            return Vec::new();
        }
        self.model
            .identities(self.cluster)
            .into_iter()
            .filter(|(k, _)| !self.removed.contains(k))
            .filter(|(k, _)| self.model.topic(k.0, k.1).is_some_and(|t| t.expiry > 0))
            .map(|(_, identity)| identity)
            .collect()
    }

    /// The first sealed segment of `info`, if the oracle knows it due: the log start the
    /// model knows, every message in it in a batch acknowledged with its stamp (a message
    /// in doubt that a boot found there has a stamp the model does not know), the newest
    /// older than the expiry by the wall clock the cleaner reads (no jump since boot, so
    /// the same clock).
    fn due_segment(&self, info: &PartitionInfo) -> Option<Due> {
        let topic = self
            .model
            .topic(info.identity.stream_id, info.identity.topic_id)?;
        let part = self.parts.get(&info.identity)?;
        let (start, _, _) = *info.sealed.first()?;
        let end = *info.segment_starts.iter().find(|s| **s > start)?;
        let stamped: u64 = part
            .batches
            .range(start..end)
            .map(|(base, (count, _))| (base + u64::from(*count)).min(end) - base)
            .sum();
        let whole = stamped == end - start;
        let newest = part
            .batches
            .range(start..end)
            .map(|(_, (_, ts))| *ts)
            .max()?;
        let slack = self.profile.cleaner_every_nanos / 1000;
        let due = info.fence.is_none()
            && !part.log_start_unknown
            && part.log_start == start
            && whole
            && self.jumps == self.jumps_at_boot
            && self.disk_full_until.is_none()
            && topic.expiry > 0
            && self.wall().saturating_sub(newest) > topic.expiry + slack;
        due.then_some(Due {
            start,
            expiry: topic.expiry,
            seen_at: self.now(),
            faults_from: self.disk.record_count(),
            model_op: self.model.op,
        })
    }

    /// A segment seen due and still there, with nothing since that would excuse it, after
    /// the grace the cleaner's timer allows: the cleaner did not run, or did not delete.
    fn judge_cleaner_liveness(&mut self, info: &PartitionInfo) -> Checked<()> {
        let identity = info.identity;
        let Some(now_due) = self.due_segment(info) else {
            self.due.remove(&identity);
            return Ok(());
        };
        let Some(first) = self.due.get(&identity).copied() else {
            self.due.insert(identity, now_due);
            return Ok(());
        };
        let dir = cairn_engine::partition::partition_dir(
            std::path::Path::new(super::NODE_ROOT),
            identity.stream_id,
            identity.topic_id,
            identity.partition_id,
        );
        let metadata_moved = self.names_moved(Start {
            at: first.seen_at,
            model_op: first.model_op,
        });
        let excused = first.start != now_due.start
            || first.expiry != now_due.expiry
            || metadata_moved
            || self.last_full >= first.seen_at
            || self
                .disk
                .records_since(first.faults_from)
                .iter()
                .filter(|r| r.path.as_ref().is_none_or(|p| p.starts_with(&dir)))
                .any(|r| CLEANER_EXCUSES.contains(&r.kind));
        if excused {
            self.due.insert(identity, now_due);
            return Ok(());
        }
        let grace = CLEANER_GRACE_INTERVALS * self.profile.cleaner_every_nanos;
        if now_due.seen_at.saturating_sub(first.seen_at) > grace {
            return Err(violation(
                INV_RETENTION,
                format!(
                    "partition {identity}: segment {}.. due for expiry (every message older than {} µs) since {} ns, still there at {} ns: the cleaner did not delete it",
                    first.start, first.expiry, first.seen_at, now_due.seen_at
                ),
            ));
        }
        self.decision("CleanerOwedDeletion");
        Ok(())
    }

    /// Judges what the running node's cleaners deleted since the last look.
    pub(crate) fn drain_deletions(&mut self) -> Checked<()> {
        let deleted = match &self.node {
            Some(node) => node.take_deletions(),
            None => return Ok(()),
        };
        self.judge_deletions(&deleted)
    }

    /// Each deletion, in order, against its rule and the deletions before it: a prefix of
    /// sealed segments (it starts at the log start the model knows), the expiry judged by
    /// the stamps producers were acknowledged with, the size by the sealed bytes left after
    /// the deletions before it in the same pass.
    pub(crate) fn judge_deletions(&mut self, deleted: &[Deletion]) -> Checked<()> {
        let mut pass: Option<(PartitionKey, u64, u64)> = None;
        for d in deleted {
            self.decision("RetentionDeletion");
            self.trace.event(format!(
                "deleted {:?} segment {}..{} ({:?})",
                d.partition, d.segment.start_offset, d.end, d.reason
            ));
            let key = d.partition;
            let identity = PartitionIdentity {
                stream_id: key.0,
                topic_id: key.1,
                partition_id: key.2,
                nonce: d.nonce,
            };
            if self.model.identity(self.cluster, key) != Some(identity) {
                // An incarnation since purged or removed: its messages are gone with it.
                continue;
            }
            let Some(topic) = self.model.topic(key.0, key.1).cloned() else {
                continue;
            };
            let left = match pass {
                Some((k, now, left)) if k == key && now == d.now => left,
                _ => d.sealed_bytes,
            };
            pass = Some((key, d.now, left.saturating_sub(d.segment.bytes)));
            let part = self.parts.entry(identity).or_default();
            if d.segment.start_offset != part.log_start && !part.log_start_unknown {
                return Err(violation(INV_RETENTION, format!("partition {key:?}: deleted segment {}..{} while the log starts at {}: not a prefix", d.segment.start_offset, d.end, part.log_start)));
            }
            // The cleaner judged by the topic's options in the view it read: the model's now,
            // or those of a recent op (an update may have been published, not yet answered).
            // The budget as the spec words it, computed here rather than by the engine's own
            // `Policy::for_topic`: `max_topic_size` shared equally by the partitions, never
            // below one sealed segment's ceiling (its size plus one batch).
            let floor = model::SEGMENT_SIZE + self.profile.max_batch_bytes;
            let policy_of = |t: &model::MTopic| Policy {
                message_expiry: t.expiry,
                budget: match t.max_size {
                    0 => 0,
                    size => (size / t.partitions.len().max(1) as u64).max(floor),
                },
            };
            let known = std::iter::once(policy_of(&topic))
                .chain(
                    self.history
                        .values()
                        .filter_map(|m| m.topic(key.0, key.1).map(policy_of)),
                )
                .any(|p| p == d.policy);
            if d.reason != Reason::Requested && !known {
                return Err(violation(INV_RETENTION, format!("partition {key:?}: a deletion judged by policy {:?}, which the topic never had", d.policy)));
            }
            let policy = d.policy;
            let justified = match d.reason {
                Reason::Expired => {
                    let newest = part
                        .batches
                        .range(d.segment.start_offset..d.end)
                        .map(|(_, (_, ts))| *ts)
                        .max();
                    policy.message_expiry > 0
                        && d.now <= self.max_wall.max(self.env.clock.wall_micros())
                        && newest.is_none_or(|n| d.now.saturating_sub(n) > policy.message_expiry)
                }
                Reason::OverSize => policy.budget > 0 && left > policy.budget,
                Reason::Requested => true,
            };
            if !justified {
                return Err(violation(INV_RETENTION, format!("partition {key:?}: deleted segment {}..{} ({:?}) though its rule did not hold (expiry {} µs, budget {} B, sealed {} B left, node time {})", d.segment.start_offset, d.end, d.reason, policy.message_expiry, policy.budget, left, d.now)));
            }
            part.log_start = d.end;
            part.log_start_unknown = false;
            part.messages = part.messages.split_off(&d.end);
            part.batches = part.batches.split_off(&d.end);
        }
        Ok(())
    }
}

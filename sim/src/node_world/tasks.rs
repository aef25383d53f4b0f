//! The callers: each a task on the deterministic executor with its own client of the running
//! node. A task asks the workload ([`super::workload`]) what to do, sends it (the world is
//! never locked across the wait), and hands the answer to the judges ([`super::judges`]).
//! After every step comes the nemesis and the coverage the node's counters show.

use super::judges::{last_offset, names_that_do_not_resolve, GroupSeen, Start};
use super::model::AdminOp;
use super::oracle::Asker;
use super::workload::{meta_op, sid, GroupMove};
use super::{lock, GroupInc, Holder, Shared, INV_CALLERS};
use crate::executor::Executor;
use crate::report::{violation, INV_LIVENESS};
use cairn_engine::env::Clock;
use cairn_engine::node::{Client, MetaReply, NodeError, NodeResult, PartitionKey};
use cairn_engine::partition::{PartitionError, PartitionIdentity};
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::{
    WireConsumer, WirePartitioning, WirePollingStrategy, KIND_CONSUMER_GROUP,
};
use rand::Rng;
use std::collections::BTreeSet;
use std::time::Duration;

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
    // Admins pause up to twice the longest think time: their metadata ops meet the users'
    // often enough for the metadata owner to batch them (`MetadataBatched`).
    for i in 0..profile.admins {
        let (w, client) = (world.clone(), node.client(u128::from(ADMIN + i)));
        spawn(Box::pin(async move {
            while pause(&w, think * 2).await {
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
    // Twice per cleaner interval on average: a segment due for expiry is then often seen
    // twice before the cleaner's next pass, so the judgement of an owed deletion runs.
    let every = profile.cleaner_every_nanos / 2;
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
            ("ConcurrentPersists", stats.concurrent_persists > 0),
            ("PersistPipelined", stats.pipelined_persists > 0),
            ("DeletionDuringRead", stats.deletions_during_reads > 0),
            ("OffsetStoresShareSync", stats.shared_offset_syncs > 0),
            ("InboxFull", stats.inbox_full > 0),
            ("MetadataBatched", stats.meta_ops > stats.meta_batches + 1),
            (
                "ActiveFilesSyncedToClose",
                node.active_files().synced_to_close > 0,
            ),
        ] {
            if fired && !w.report.decisions.contains_key(name) {
                w.decision(name);
            }
        }
        let failure = node.failure();
        if let Some(cairn_engine::node::Failure::Metadata(e)) = failure.as_deref() {
            if !w.disk.is_crashed() && !w.report.decisions.contains_key("MetaWriteFailed") {
                w.event(format!("the metadata plane failed: {e}"));
                w.decision("MetaWriteFailed");
            }
        }
        let caused = failure.as_deref().is_some_and(|f| w.failure_has_cause(f));
        if let (Some(failure), false) = (&failure, caused) {
            let v = violation(
                crate::report::INV_LIVENESS,
                format!("the node stopped with no fault injected since it booted: {failure}"),
            );
            w.fail(v);
            return;
        }
        if failure.is_some() && w.stop.is_none() {
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

/// The user a caller acts as in its metadata ops: never root (id 0), so a journal header
/// that dropped its acting user would show.
pub(crate) fn acting_user(caller: u32) -> u32 {
    assert!(caller > 0, "callers are numbered from 1");
    caller
}

pub(crate) async fn run_meta(world: &Shared, client: &Client, caller: u32, op: AdminOp) {
    let asker = Asker {
        client: client.id(),
        user: acting_user(caller),
    };
    let view = {
        let mut w = lock(world);
        w.send_op(caller, op.clone());
        w.model.clone()
    };
    let reply = match meta_op(client, &op, &view).await {
        Ok(meta) => client.execute_traced(meta, asker.user).await,
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
    if let Err(v) = w.judge_meta(caller, asker, reply) {
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
    if let Err(v) = w.judge_login((&username, &password), before, after, result) {
        w.fail(v);
    }
}

// Messages ----------------------------------------------------------------------------------

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

async fn consume(world: &Shared, members: &[Client]) {
    let roll = lock(world).rng.gen_range(0..12);
    match roll {
        0..=4 => poll(world, &members[0]).await,
        5..=6 => store_offsets(world, members).await,
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
    let starts = {
        let mut w = lock(world);
        match w.log_starts_at_send(key.0, key.1) {
            Ok(starts) => starts,
            Err(v) => return w.fail(v),
        }
    };
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
            w.judge_polled(identity, &polled, &starts)
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

/// A consumer's store into a partition, planned: the key, its incarnation, the offset, the
/// consumer and when it began.
pub(crate) type StorePlan = (PartitionKey, PartitionIdentity, u64, u32, Start);

/// A store by one consumer, or (one in three) by two into the same partition at once, from
/// two clients: both may reach the shard in one round (`persisted` offsets then share a
/// directory sync).
async fn store_offsets(world: &Shared, members: &[Client]) {
    let Some(first) = plan_store(world, None) else {
        return;
    };
    let pair = lock(world).rng.gen_range(0..3) == 0;
    let second = match pair {
        true => plan_store(world, Some((first.0, (first.3 + 1) % 3))),
        false => None,
    };
    match second {
        Some(second) => {
            let (one, other) = (&members[0], &members[1 % members.len()]);
            super::directed::both(
                run_store(world, one, first),
                run_store(world, other, second),
            )
            .await
        }
        None => run_store(world, &members[0], first).await,
    }
}

/// Picks a partition, consumer and offset (or takes the given partition and consumer).
fn plan_store(world: &Shared, fixed: Option<(PartitionKey, u32)>) -> Option<StorePlan> {
    let mut w = lock(world);
    if !w.is_up() {
        return None;
    }
    let key = match fixed {
        Some((key, _)) => key,
        None => w.pick_key()?,
    };
    let identity = w.model.identity(w.cluster, key)?;
    let part = w.parts.get(&identity).cloned().unwrap_or_default();
    let end = part.acked_end();
    if end == 0 {
        return None;
    }
    let offset = w.rng.gen_range(part.log_start.saturating_sub(1)..end);
    let consumer = match fixed {
        Some((_, consumer)) => consumer,
        None => w.rng.gen_range(0..3u32),
    };
    Some((key, identity, offset, consumer, w.start()))
}

pub(crate) async fn run_store(world: &Shared, client: &Client, plan: StorePlan) {
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
            let starts = {
                let mut w = lock(world);
                w.auto_commits.insert(client.id(), ((s, t), holder));
                match w.log_starts_at_send(s, t) {
                    Ok(starts) => starts,
                    Err(v) => return w.fail(v),
                }
            };
            let before = client.group_assignment(&sid(s), &sid(t), &group).await;
            let polled = client.poll(&request).await;
            let after = match &polled {
                Ok(Some(_)) => Some(client.group_assignment(&sid(s), &sid(t), &group).await),
                _ => None,
            };
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
                    if let Err(v) = judge_own_partition(identity, &before, after.as_ref()) {
                        w.fail(v);
                        return;
                    }
                    let group = (s, t, g, incarnation);
                    let turn = w.judge_round_robin(
                        client.id(),
                        group,
                        identity.partition_id,
                        &before,
                        after.as_ref(),
                    );
                    if let Err(v) = turn {
                        w.fail(v);
                        return;
                    }
                    if let Err(v) = w.judge_polled(identity, &polled, &starts) {
                        w.fail(v);
                        return;
                    }
                    // The shard stored the auto-commit before it answered the poll.
                    if let Some(last) = last_offset(&polled) {
                        if let Err(v) = w.judge_auto_commit(identity, (s, t, g, incarnation), last)
                        {
                            w.fail(v);
                        }
                    }
                    return;
                }
                Ok(None) => {
                    w.group_polls.remove(&client.id());
                    return;
                }
                Err(e) => {
                    w.group_polls.remove(&client.id());
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

/// A member's poll without a partition id reads a partition the member owns: judged when its
/// assignment was the same generation just before and just after the poll (no rebalance
/// between, so the node had no other assignment to serve it from).
fn judge_own_partition(
    polled: PartitionIdentity,
    before: &NodeResult<(u64, Vec<u32>)>,
    after: Option<&NodeResult<(u64, Vec<u32>)>>,
) -> crate::report::Checked<()> {
    let (Ok((generation, mine)), Some(Ok((after_generation, _)))) = (before, after) else {
        return Ok(());
    };
    if generation != after_generation || mine.contains(&polled.partition_id) {
        return Ok(());
    }
    Err(violation(
        INV_CALLERS,
        format!(
            "a group member's poll read partition {} of {polled}; at generation {generation} it owns {mine:?}",
            polled.partition_id
        ),
    ))
}

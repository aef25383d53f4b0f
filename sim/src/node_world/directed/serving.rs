//! Directed scenarios of a serving node: retention at the expiry's edge, consumer groups
//! across deletions and boots, a login outlived by its user's password, requests for a
//! partition being replaced past a full parking.

use super::*;

/// A sealed segment whose newest message is exactly as old as the topic's expiry is kept
/// (the spec deletes messages *older* than it); a microsecond later it is deleted. Both
/// passes are explicit cleaner passes at a given time, judged by the oracle like the
/// shards' own.
pub(super) fn a_segment_exactly_as_old_as_the_expiry_is_kept() -> Checked<Vec<&'static str>> {
    const EXPIRY: u64 = 10_000_000;
    let mut s = retention_topic(0x4e0d_000e, EXPIRY, 0)?;
    let mut newest = None;
    for _ in 0..64 {
        s.produce()?;
        let info = s.info((0, 0, 0))?;
        if let Some(&(_, _, stamp)) = info.sealed.first() {
            newest = Some(stamp);
            break;
        }
    }
    let newest = newest.expect("a segment sealed");
    let wall = lock(&s.world).env.clock.wall_micros();
    s.sleep(std::time::Duration::from_micros(
        (newest + EXPIRY).saturating_sub(wall),
    ));
    for (now, expect_deleted) in [(newest + EXPIRY, false), (newest + EXPIRY + 1, true)] {
        let node = lock(&s.world).node.clone().expect("up");
        let deleted =
            crate::node_world::block(&mut s.executor, async move { node.clean(Some(now)).await })
                .expect("answered")
                .expect("a pass");
        let mut w = lock(&s.world);
        w.drain_deletions()?;
        w.judge_deletions(&deleted)?;
        if deleted.is_empty() == expect_deleted {
            return Err(crate::report::violation(
                crate::node_world::INV_RETENTION,
                format!("a pass at {now} µs over a segment whose newest stamp is {newest} µs (expiry {EXPIRY} µs) deleted {deleted:?}"),
            ));
        }
    }
    Ok(s.decisions())
}

/// A topic with a size limit and no expiry: once its sealed bytes pass the partition's
/// budget (`max_topic_size`, never below one segment plus one batch) by more than two
/// segments, one cleaner pass must delete its oldest sealed segments until within the
/// budget (more than one), each deletion and the pass judged against the size rule.
pub(super) fn a_topic_over_its_size_and_without_an_expiry_is_cut_to_size(
) -> Checked<Vec<&'static str>> {
    // Below the floor: the budget is one segment plus one batch.
    let mut s = retention_topic(0x4e0d_0026, 0, 1)?;
    let budget = crate::node_world::model::size_floor(&lock(&s.world).profile);
    let mut over = false;
    for _ in 0..1024 {
        s.produce()?;
        let info = s.info((0, 0, 0))?;
        if info.sealed.iter().map(|(_, bytes, _)| bytes).sum::<u64>() > 3 * budget {
            over = true;
            break;
        }
    }
    assert!(over, "the sealed bytes passed the budget");
    let node = lock(&s.world).node.clone().expect("up");
    let deleted = crate::node_world::block(&mut s.executor, async move { node.clean(None).await })
        .expect("answered")
        .expect("a pass");
    let mut w = lock(&s.world);
    w.drain_deletions()?;
    w.judge_deletions(&deleted)?;
    if deleted.len() < 2 {
        return Err(crate::report::violation(
            crate::node_world::INV_RETENTION,
            format!("a pass over a partition whose sealed bytes passed three times its budget of {budget} bytes (no expiry) deleted {} segments", deleted.len()),
        ));
    }
    drop(w);
    Ok(s.decisions())
}

/// A scenario of seed `seed` with one `persisted` topic of one partition, `expiry` and
/// `max_size`, and large payloads; only the scenario's cleaner passes run (the shards' own
/// timers stay out of the way).
fn retention_topic(seed: u64, expiry: u64, max_size: u64) -> Checked<Scenario> {
    let mut s = Scenario::new(seed);
    {
        let mut w = lock(&s.world);
        w.profile.max_payload = 64 * 1024;
        w.profile.cleaner_every_nanos = 24 * 3600 * 1_000_000_000;
    }
    s.setup()?;
    s.perform(AdminOp::CreateStream("s".into()))?;
    s.perform(AdminOp::CreateTopic {
        stream: 0,
        name: "t".into(),
        partitions: 1,
        persisted: true,
        offsets_persisted: true,
        expiry,
        max_size,
    })?;
    Ok(s)
}

/// Two topics of one stream each have a group of id 0 whose members polled with
/// auto-commit (persisted offsets). The superblock records of the deletion of topic 0's
/// group are lost at a power loss, so boot redoes its removal of that group's offsets: it
/// must remove them in topic 0's partition only, never those of topic 1's group of the
/// same id.
pub(super) fn a_redone_group_deletion_keeps_another_topics_group_of_that_id(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_000f);
    s.with_two_persisted_topics()?;
    for _ in 0..32 {
        let acked = |t: u32| {
            let w = lock(&s.world);
            let identity = w.model.identity(w.cluster, (0, t, 0)).expect("made");
            w.parts
                .get(&identity)
                .is_some_and(|p| !p.messages.is_empty())
        };
        if acked(0) && acked(1) {
            break;
        }
        s.produce()?;
    }
    for topic in [0, 1] {
        s.perform(AdminOp::CreateGroup(0, topic, "g".into()))?;
        s.group((0, topic, 0), 0, GroupMove::Join)?;
        s.group((0, topic, 0), 0, GroupMove::Poll)?;
    }
    let committed = {
        let w = lock(&s.world);
        let identity = w.model.identity(w.cluster, (0, 1, 0)).expect("made");
        let incarnation = w.model.topic(0, 1).expect("made").groups[&0].1;
        let holder = crate::node_world::Holder::Group { id: 0, incarnation };
        w.parts[&identity].offsets.get(&holder).and_then(|o| o.0)
    };
    assert!(committed.is_some(), "topic b's group committed an offset");
    s.lie_on_metadata_records(1);
    s.perform(AdminOp::DeleteGroup(0, 0, 0))?;
    s.restart_after(true, |_| {})?;
    Ok(s.decisions())
}

/// Two streams, each with a topic and a group, the same members in both; deleting one
/// stream drops only its group's members: the other group's list, assignments and
/// generation are judged after the deletion.
pub(super) fn deleting_a_stream_keeps_the_other_streams_members() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0008);
    s.with_two_streams(2)?;
    for stream in [0, 1] {
        s.perform(AdminOp::CreateGroup(stream, 0, "g".into()))?;
        for member in 0..2 {
            s.group((stream, 0, 0), member, GroupMove::Join)?;
        }
        s.judged_check((stream, 0, 0), 0)?;
    }
    s.perform(AdminOp::DeleteStream(0))?;
    s.judged_check((1, 0, 0), 1)?;
    s.group((1, 0, 0), 1, GroupMove::Leave)?;
    s.judged_check((1, 0, 0), 0)?;
    Ok(s.decisions())
}

/// The offset the newest incarnation of group `g` of topic `t` in stream 0 last stored in
/// partition 0, as the model has it.
fn group_offset(s: &Scenario, t: u32, g: u32) -> Option<u64> {
    let w = lock(&s.world);
    let identity = w.model.identity(w.cluster, (0, t, 0))?;
    let incarnation = w.model.topic(0, t)?.groups.get(&g)?.1;
    let holder = crate::node_world::Holder::Group { id: g, incarnation };
    w.parts.get(&identity)?.offsets.get(&holder)?.0
}

/// Member `member` joins group `g` of topic 0 and polls, committing an offset.
fn join_and_commit(s: &mut Scenario, g: u32, member: usize) -> Checked<()> {
    s.group((0, 0, g), member, GroupMove::Join)?;
    s.group((0, 0, g), member, GroupMove::Poll)?;
    assert!(
        group_offset(s, 0, g).is_some(),
        "group {g} committed an offset"
    );
    Ok(())
}

/// Groups 0 and 1 of a persisted topic commit offsets; group 0 is deleted and created again
/// under the same id, and the new group commits an offset too. The superblock records of
/// the deletion and the re-creation are lost at a power loss, so boot redoes the deletion's
/// removal of group 0's offsets: it must not remove the new group's (a later op created a
/// group under that id), nor group 1's.
pub(super) fn a_group_re_created_after_a_lost_deletion_keeps_its_new_offsets(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0014);
    s.with_persisted_topic(1)?;
    s.produce_n(4)?;
    for name in ["g", "h"] {
        s.perform(AdminOp::CreateGroup(0, 0, name.into()))?;
    }
    join_and_commit(&mut s, 0, 0)?;
    join_and_commit(&mut s, 1, 1)?;
    let deleted = lock(&s.world).model.topic(0, 0).expect("made").groups[&0].1;
    s.lie_on_metadata_records(2);
    s.perform(AdminOp::DeleteGroup(0, 0, 0))?;
    s.perform(AdminOp::CreateGroup(0, 0, "g2".into()))?;
    let created = lock(&s.world).model.topic(0, 0).expect("made").groups[&0].1;
    assert!(created > deleted, "group id 0 names a new group");
    join_and_commit(&mut s, 0, 2)?;
    s.restart_after(true, |_| {})?;
    Ok(s.decisions())
}

/// The node crashes inside a group deletion's directory work, as it removes the group's
/// offset file: boot redoes the removal (the deleted group's offset gone, which the oracle
/// checks after every boot), and a group created afterwards under the same id starts with
/// no offset.
pub(super) fn a_group_deletion_cut_short_has_its_offsets_removed_at_boot(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0015);
    s.with_persisted_topic(1)?;
    s.produce_n(4)?;
    s.perform(AdminOp::CreateGroup(0, 0, "g".into()))?;
    join_and_commit(&mut s, 0, 0)?;
    lock(&s.world)
        .disk
        .script(cairn_faults::Scripted::CrashOn("offsets/groups/0".into()));
    s.perform(AdminOp::DeleteGroup(0, 0, 0))?;
    assert!(
        lock(&s.world).disk.is_crashed(),
        "the deletion's work crashed"
    );
    s.restart(false)?;
    s.perform(AdminOp::CreateGroup(0, 0, "g2".into()))?;
    group_zero_reads_no_offset(&mut s)?;
    Ok(s.decisions())
}

/// A member polls with auto-commit, over and over, while its group is deleted, in several
/// rounds (the group created again under its id each time). The deletion removes the
/// group's offsets on the partition's shard before its view is published, so a poll that
/// named the group in the older view can reach the shard after the removal: its commit must
/// be dropped, else the next group of that id starts from the deleted group's offset. The
/// auto-commit judge checks that no poll judged after the deletion left an offset file
/// (the [`RACE_ROUNDS`] rounds reach such a poll), each new group's stored offset (read
/// before it polls) must be none, and a boot at the end compares the node with the model.
/// Found by a mutant (`<` → `==` in `Shard::is_retired`) that only seed luck caught.
pub(super) fn a_poll_racing_its_groups_deletion_leaves_no_offset() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0030);
    s.with_persisted_topic(1)?;
    s.produce_n(64)?;
    for round in 0..RACE_ROUNDS {
        s.perform(AdminOp::CreateGroup(0, 0, format!("g{round}")))?;
        group_zero_reads_no_offset(&mut s)?;
        join_and_commit(&mut s, 0, 0)?;
        poll_while_deleted(&mut s)?;
    }
    s.perform(AdminOp::CreateGroup(0, 0, "last".into()))?;
    group_zero_reads_no_offset(&mut s)?;
    s.restart(false)?;
    Ok(s.decisions())
}

/// Group 0, just created under a deleted group's id, has no stored offset.
fn group_zero_reads_no_offset(s: &mut Scenario) -> Checked<()> {
    match group_zero_offset(s) {
        Ok(None) => Ok(()),
        other => Err(crate::report::violation(
            crate::report::INV_OFFSETS,
            format!("a group created under a deleted group's id reads offset {other:?}"),
        )),
    }
}

/// Rounds of [`a_poll_racing_its_groups_deletion_leaves_no_offset`].
const RACE_ROUNDS: usize = 8;

/// Member 0 of group 0 (topic 0 of stream 0) polls with auto-commit, each poll judged,
/// until an admin's deletion of the group has been answered and judged.
fn poll_while_deleted(s: &mut Scenario) -> Checked<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let world = s.world.clone();
    let (node, incarnation) = {
        let w = lock(&world);
        let topic = w.model.topic(0, 0).expect("the scenario made it");
        (w.node.clone().expect("up"), topic.groups[&0].1)
    };
    let members: Vec<_> = (1..=MEMBERS).map(|c| node.client(c)).collect();
    let deleter = node.client(100);
    let deleted = Arc::new(AtomicBool::new(false));
    let (wd, wp, done) = (world.clone(), world.clone(), deleted.clone());
    crate::node_world::block(&mut s.executor, async move {
        both(
            async move {
                run_meta(&wd, &deleter, 100, AdminOp::DeleteGroup(0, 0, 0)).await;
                done.store(true, Ordering::Relaxed);
            },
            async move {
                // Bounded: the deletion is answered after a few disk calls.
                for _ in 0..10_000 {
                    if deleted.load(Ordering::Relaxed) {
                        break;
                    }
                    group_move(&wp, &members, (0, 0, 0, incarnation), 0, GroupMove::Poll).await;
                    // A move the world skips awaits nothing: let the deletion run.
                    yield_now().await;
                }
            },
        )
        .await
    });
    s.violation()
}

/// Pending once, so that the executor runs another ready task.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(move |cx| match yielded {
        true => std::task::Poll::Ready(()),
        false => {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

/// One member of a group over a topic of three partitions polls it seven times: with no
/// rebalance between, each poll reads the partition after the last one's in the member's
/// assignment (round robin), the round-robin judge checks every pair.
pub(super) fn a_lone_member_reads_its_partitions_in_turn() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0022);
    s.with_persisted_topic(3)?;
    s.produce_n(6)?;
    s.perform(AdminOp::CreateGroup(0, 0, "g".into()))?;
    s.group((0, 0, 0), 0, GroupMove::Join)?;
    for _ in 0..7 {
        s.group((0, 0, 0), 0, GroupMove::Poll)?;
    }
    Ok(s.decisions())
}

/// A group's deletion and a creation that would reuse its id arrive together: the creation
/// waits for the next batch, so the deletion's removal of the old group's offsets is done
/// and recorded before any op names a group of that id again. The deletion's work then
/// crashes: boot redoes the removal, and a group of that id (if any) reads no offset.
/// (Journaled in one batch, the creation would follow the deletion, boot would take the
/// old offsets for the new group's and keep them.)
pub(super) fn a_group_id_freed_in_a_batch_is_reused_only_by_the_next() -> Checked<Vec<&'static str>>
{
    freed_group_id_reused_only_by_the_next(0x4e0d_0024, 0)
}

/// The same with group id 1 (group 0 stays): the id the creation would take is the lowest
/// free one, not 0. Found by a mutant (`lowest_free_group` → 0) that saw no reuse then.
pub(super) fn a_freed_group_id_above_zero_is_reused_only_by_the_next() -> Checked<Vec<&'static str>>
{
    freed_group_id_reused_only_by_the_next(0x4e0d_0032, 1)
}

/// Groups `0..=g` exist; group `g`'s deletion and a creation that reuses its id arrive
/// together; the deletion's work crashes; after the boot group `g` reads no offset.
fn freed_group_id_reused_only_by_the_next(seed: u64, g: u32) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(seed);
    // Room in the metadata inbox for both ops at once.
    lock(&s.world).profile.meta_inbox = 4;
    s.with_persisted_topic(1)?;
    s.produce_n(4)?;
    for id in 0..=g {
        s.perform(AdminOp::CreateGroup(0, 0, format!("g{id}")))?;
    }
    join_and_commit(&mut s, g, 0)?;
    lock(&s.world)
        .disk
        .script(cairn_faults::Scripted::CrashOn(format!(
            "offsets/groups/{g}"
        )));
    let world = s.world.clone();
    let node = lock(&world).node.clone().expect("up");
    let (deleter, creator) = (node.client(100), node.client(101));
    let (wd, wc) = (world.clone(), world.clone());
    crate::node_world::block(&mut s.executor, async move {
        both(
            async move { run_meta(&wd, &deleter, 100, AdminOp::DeleteGroup(0, 0, g)).await },
            async move { run_meta(&wc, &creator, 101, AdminOp::CreateGroup(0, 0, "new".into())).await },
        )
        .await
    });
    assert!(
        lock(&s.world).disk.is_crashed(),
        "the deletion's work crashed"
    );
    s.restart(false)?;
    let read = stored_group_offset(&mut s, g);
    match read {
        Ok(None) | Err(cairn_engine::node::NodeError::GroupNotFound { .. }) => Ok(s.decisions()),
        other => Err(crate::report::violation(
            crate::report::INV_OFFSETS,
            format!("a group of deleted group {g}'s id reads offset {other:?}"),
        )),
    }
}

/// Group 0's stored offset in partition 0 of topic 0 of stream 0, read by an admin.
fn group_zero_offset(s: &mut Scenario) -> cairn_engine::node::NodeResult<Option<u64>> {
    stored_group_offset(s, 0)
}

/// Group `g`'s stored offset in partition 0 of topic 0 of stream 0, read by an admin.
fn stored_group_offset(s: &mut Scenario, g: u32) -> cairn_engine::node::NodeResult<Option<u64>> {
    let client = lock(&s.world).node.clone().expect("up").client(100);
    crate::node_world::block(&mut s.executor, async move {
        let group = iggy_binary_protocol::WireConsumer {
            kind: iggy_binary_protocol::KIND_CONSUMER_GROUP,
            id: iggy_binary_protocol::WireIdentifier::numeric(g),
        };
        let id = iggy_binary_protocol::WireIdentifier::numeric(0);
        client.get_offset(&group, &id, &id, Some(0)).await
    })
    .expect("answered")
}

/// What a directed send was answered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    Acked { base: u64, durable: bool },
    NoSpace,
    Other(String),
}

/// A batch of `count` messages of `size` payload bytes each, for partition (0, 0, 0).
pub(super) fn sized_batch(s: &Scenario, count: usize, size: usize) -> (bytes::BytesMut, Vec<u128>) {
    lock(&s.world).batch_sized(count, |_| size)
}

/// Sends `batches` to partition (0, 0, 0) at once (each from its own client, all in the
/// shard's inbox before it runs), each answer judged by the oracle; returns the answers.
fn send_at_once(
    s: &mut Scenario,
    batches: Vec<(bytes::BytesMut, Vec<u128>)>,
) -> Checked<Vec<Answer>> {
    send_at_once_to(s, batches.into_iter().map(|b| (0, b)).collect())
}

/// [`send_at_once`], each batch to the partition of topic (0, 0) it names.
pub(super) fn send_at_once_to(
    s: &mut Scenario,
    batches: Vec<(u32, (bytes::BytesMut, Vec<u128>))>,
) -> Checked<Vec<Answer>> {
    send_staggered(s, batches.into_iter().map(|(p, b)| (0, p, b)).collect())
}

/// [`send_at_once_to`], each send leaving its client the given virtual nanoseconds after
/// the first.
pub(super) fn send_staggered(
    s: &mut Scenario,
    batches: Vec<(u64, u32, (bytes::BytesMut, Vec<u128>))>,
) -> Checked<Vec<Answer>> {
    use cairn_engine::node::NodeError;
    use cairn_engine::partition::PartitionError;
    use iggy_binary_protocol::{WireIdentifier, WirePartitioning};
    let (node, started) = {
        let w = lock(&s.world);
        (w.node.clone().expect("up"), w.start())
    };
    let answers = Arc::new(Mutex::new(Vec::new()));
    let sends: Vec<cairn_engine::env::BoxFuture<'static, ()>> = batches
        .into_iter()
        .enumerate()
        .map(|(i, (delay, partition, (batch, ids)))| {
            let (client, world, answers) = (
                node.client(400 + i as u128),
                s.world.clone(),
                answers.clone(),
            );
            let clock = lock(&s.world).clock.clone();
            let send: cairn_engine::env::BoxFuture<'static, ()> = Box::pin(async move {
                if delay > 0 {
                    cairn_engine::env::Clock::sleep(&clock, std::time::Duration::from_nanos(delay))
                        .await;
                }
                let id = WireIdentifier::numeric(0);
                let result = client
                    .send(&id, &id, &WirePartitioning::PartitionId(partition), batch)
                    .await;
                let answer = match &result {
                    Ok(sent) => Answer::Acked {
                        base: sent.ack.base_offset,
                        durable: sent.ack.durable,
                    },
                    Err(NodeError::Partition(PartitionError::NoSpace)) => Answer::NoSpace,
                    Err(e) => Answer::Other(e.to_string()),
                };
                let mut w = lock(&world);
                if let Err(v) = w.judge_send(0, 0, &ids, started, result) {
                    w.fail(v);
                }
                answers.lock().expect("lock").push((i, answer));
            });
            send
        })
        .collect();
    crate::node_world::block(&mut s.executor, every(sends)).expect("answered");
    s.violation()?;
    let mut answers = std::mem::take(&mut *answers.lock().expect("lock"));
    answers.sort_by_key(|(i, _)| *i);
    Ok(answers.into_iter().map(|(_, a)| a).collect())
}

/// One persist of two sends to a `persisted` topic: the first crosses the segment size, so
/// the persist seals the segment (synced: durable) and records the next one active; the
/// second's write into the new segment finds no room. The persist fails and rolls the
/// second back, which is told there was no room; the first must still be acknowledged as
/// durable (the shard acknowledges, after a failed persist, every send below the durable
/// end it left). After a power loss the boot reads the first back where it was
/// acknowledged, and the next send takes the offsets the second was refused.
pub(super) fn a_send_a_failed_persist_sealed_is_acknowledged() -> Checked<Vec<&'static str>> {
    const KIB: usize = 1024;
    let mut s = Scenario::new(0x4e0d_002a);
    s.with_persisted_topic(1)?;
    // Two persists (each superblock slot written once) leave the first segment some 64
    // KiB short of its size.
    let fill = (crate::node_world::model::SEGMENT_SIZE as usize - 64 * KIB) / 16;
    for _ in 0..2 {
        let batch = sized_batch(&s, 8, fill);
        let answers = send_at_once(&mut s, vec![batch])?;
        assert!(
            matches!(answers[..], [Answer::Acked { durable: true, .. }]),
            "a send with room is acknowledged: {answers:?}"
        );
    }
    let (sealing, rolled_back) = (sized_batch(&s, 1, 100 * KIB), sized_batch(&s, 1, 100 * KIB));
    // Room for the sealing batch and its index entry, not for the next batch.
    s.fill_disk(Some(sealing.0.len() as u64 + 16 + 8 * KIB as u64));
    let answers = send_at_once(&mut s, vec![sealing, rolled_back])?;
    let end = match answers[..] {
        [Answer::Acked { base, durable: true }, Answer::NoSpace] => base + 1,
        _ => {
            return Err(crate::report::violation(
                crate::node_world::INV_CALLERS,
                format!("two sends in one persist, the first sealing its segment and the second finding no room in the next, answered {answers:?}: not the first acknowledged durable and the second refused for space"),
            ))
        }
    };
    s.fill_disk(None);
    s.restart_after(true, |_| {})?;
    let next = sized_batch(&s, 1, KIB);
    match send_at_once(&mut s, vec![next])?[..] {
        [Answer::Acked { base, .. }] if base == end => Ok(s.decisions()),
        ref other => Err(crate::report::violation(
            crate::node_world::INV_CALLERS,
            format!("the send after a persist that refused offsets from {end} on was answered {other:?}"),
        )),
    }
}

/// A login checks the old password while a change of that password commits: the login's
/// hash costs a virtual second, the change's nothing, so the change is acknowledged while
/// the login still hashes. The login looks at the user again after its check and refuses
/// (`InvalidCredentials`): a replaced password never opens a session.
pub(super) fn a_login_outlived_by_its_password_refuses() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0035);
    s.setup()?;
    s.perform(AdminOp::CreateUser {
        name: "outlived".into(),
        password: "old-password".into(),
        status: 1,
        permissions: None,
    })?;
    let (world, hash_nanos) = (s.world.clone(), lock(&s.world).profile.hash_nanos);
    let user = lock(&world)
        .model
        .users
        .iter()
        .find(|(_, u)| u.name == "outlived")
        .map(|(id, _)| *id)
        .expect("created");
    let node = lock(&world).node.clone().expect("up");
    let (login, admin) = (node.client(300), node.client(100));
    let tasks = s.executor.handle();
    tasks.set_blocking_cost(std::time::Duration::from_secs(1));
    let answer = Arc::new(Mutex::new(None));
    let (slot, changer) = (answer.clone(), world.clone());
    super::super::block(&mut s.executor, async move {
        both(
            async move {
                let got = login.login("outlived", "old-password").await;
                *slot.lock().expect("slot") = Some(got);
            },
            async move {
                tasks.set_blocking_cost(std::time::Duration::ZERO);
                let change = AdminOp::ChangePassword {
                    user,
                    password: "new-password".into(),
                };
                run_meta(&changer, &admin, 100, change).await;
            },
        )
        .await;
    });
    s.executor
        .handle()
        .set_blocking_cost(std::time::Duration::from_nanos(hash_nanos));
    s.violation()?;
    let changed = lock(&world).model.users[&user].password == "new-password";
    assert!(changed, "the change was acknowledged");
    let got = answer.lock().expect("slot").take().expect("answered");
    match got {
        Err(cairn_engine::node::NodeError::InvalidCredentials) => {
            lock(&world).decision("LoginOutlivedUserChange");
            Ok(s.decisions())
        }
        other => Err(crate::report::violation(
            crate::node_world::INV_CALLERS,
            format!("a login with a password replaced while it hashed answered {other:?}"),
        )),
    }
}

/// A purge replaces topic 0's partition; once its shard made the new incarnation, and
/// while the purge's applied record is written (each disk call a virtual millisecond),
/// more polls of that partition arrive than the shard parks ([`MAX_PARKED`]). Every poll
/// is answered: the parked ones once the purge is applied, the rest at once with `Busy` —
/// never `Stopped` from a node that serves on.
///
/// [`MAX_PARKED`]: cairn_engine::node::MAX_PARKED
pub(super) fn polls_past_a_full_parking_are_answered_busy() -> Checked<Vec<&'static str>> {
    use iggy_binary_protocol::requests::messages::PollMessagesRequest;
    use iggy_binary_protocol::{WireConsumer, WirePollingStrategy};
    const POLLS: usize = cairn_engine::node::MAX_PARKED + 64;
    let mut s = Scenario::new(0x4e0d_0036);
    s.with_persisted_topic(1)?;
    s.produce_n(2)?;
    let world = s.world.clone();
    let (node, clock, superblock) = {
        let w = lock(&world);
        w.disk.set_latency_debt(1_000_000, 1_000_000);
        let dir = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 0);
        (
            w.node.clone().expect("up"),
            w.clock.clone(),
            dir.join("superblock.a"),
        )
    };
    let before = lock(&world).disk.contents(&superblock);
    let admin = node.client(100);
    let pollers: Vec<_> = (0..POLLS).map(|i| node.client(1_000 + i as u128)).collect();
    let answers = Arc::new(Mutex::new(Vec::with_capacity(POLLS)));
    let (purger, watcher, into) = (world.clone(), world.clone(), answers.clone());
    super::super::block(&mut s.executor, async move {
        both(
            async move { run_meta(&purger, &admin, 100, AdminOp::PurgeTopic(0, 0)).await },
            async move {
                // The new incarnation's superblock is written: the shard holds the partition
                // until the purge is applied. (Bounded: a purge that never gets there sends
                // the polls anyway, and finding the parking never full fails the scenario.)
                for _ in 0..100_000 {
                    if lock(&watcher).disk.contents(&superblock) != before {
                        break;
                    }
                    cairn_engine::env::Clock::sleep(&clock, std::time::Duration::from_micros(10))
                        .await;
                }
                let polls = pollers.into_iter().map(|client| {
                    let into = into.clone();
                    Box::pin(async move {
                        let request = PollMessagesRequest {
                            consumer: WireConsumer::consumer(super::super::workload::sid(0)),
                            stream_id: super::super::workload::sid(0),
                            topic_id: super::super::workload::sid(0),
                            partition_id: Some(0),
                            strategy: WirePollingStrategy { kind: 3, value: 0 },
                            count: 1,
                            auto_commit: false,
                        };
                        let got = client.poll(&request).await.map(|_| ());
                        into.lock().expect("answers").push(got);
                    }) as cairn_engine::env::BoxFuture<'static, ()>
                });
                every(polls.collect()).await;
            },
        )
        .await;
    });
    {
        let w = lock(&world);
        let (min, max) = w.profile.disk_latency_nanos;
        w.disk.set_latency_debt(min, max);
    }
    s.violation()?;
    let answers = std::mem::take(&mut *answers.lock().expect("answers"));
    assert_eq!(answers.len(), POLLS, "every poll answered");
    let busy = answers
        .iter()
        .filter(|a| matches!(a, Err(cairn_engine::node::NodeError::Busy(_))))
        .count();
    if let Some(wrong) = answers
        .iter()
        .find(|a| !matches!(a, Ok(()) | Err(cairn_engine::node::NodeError::Busy(_))))
    {
        return Err(crate::report::violation(
            crate::node_world::INV_CALLERS,
            format!("a poll of a partition being replaced answered {wrong:?}"),
        ));
    }
    if busy == 0 {
        return Err(crate::report::violation(
            crate::node_world::INV_CALLERS,
            format!("{POLLS} polls of a held partition, and none found the parking full"),
        ));
    }
    lock(&world).decision("ParkingFull");
    Ok(s.decisions())
}

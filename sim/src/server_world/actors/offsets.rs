//! Consumer offsets through the server: a consumer stores, reads and deletes its offsets
//! with a partition id (each read judged against the model's stored offset and the
//! partition's end, S7 and S8); a group member stores and reads its offset without one,
//! which means the partition its last poll read (S8, [`super::super::offsets`]).
//!
//! A member's call is judged on one session only (a reconnect is a new client, no longer a
//! member), and strictly only when the group's generation was the same before its poll and
//! after the call: no rebalance can have taken the partition between.

use super::super::ends;
use super::super::offsets::{
    judge_member, Answer, Current, MemberAnswer, INV_OFFSETS, NO_CURRENT_PARTITION,
};
use super::super::oracle::PartKey;
use super::super::{lock, TOPICS};
use super::data::judge_poll;
use super::{outcome, sid, Actor, Begun, Outcome, MAX_POLL};
use crate::report::{violation, Violation};
use cairn_client::iggy_binary_protocol::requests::messages::PollMessagesRequest;
use cairn_client::iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use cairn_client::iggy_binary_protocol::{WireConsumer, WireIdentifier, WirePollingStrategy};
use cairn_client::ClientError;
use rand::Rng;

/// The consumer id a consumer's offset calls use (its polls use their own, `me`): only
/// these calls store it.
const OFFSET_CONSUMER_BASE: u32 = 100;

/// The sentinel partition of a group poll that read no partition (the member holds none).
const NO_ASSIGNED_PARTITION: u32 = u32::MAX - 1;

fn verdict(a: &Actor, row: &'static str, judged: Result<(), Violation>) {
    let mut w = lock(&a.world);
    match judged {
        Ok(()) => w.decision(row),
        Err(v) => w.fail(v),
    }
}

/// Whether an answer came from the server process the request was sent to, still the
/// running one.
fn this_boot(a: &Actor, begun: &Begun, epoch: u64) -> bool {
    let w = lock(&a.world);
    epoch == begun.epoch && epoch == w.oracle.epoch && w.running()
}

/// A consumer's offset step in a random workload partition: a store of an offset the
/// partition holds, or a delete, each followed by a read; or a read alone.
pub(crate) async fn consumer_offsets(a: &mut Actor, me: u32) {
    let (part, pick, store_at) = {
        let mut w = lock(&a.world);
        let partitions = w.profile.partitions;
        let part = (
            w.rng.gen_range(0..TOPICS.len()),
            w.rng.gen_range(0..partitions),
        );
        let floor = w.oracle.floor(part);
        let at = (floor > 0).then(|| w.rng.gen_range(0..floor));
        (part, w.rng.gen_range(0..10), at)
    };
    let id = OFFSET_CONSUMER_BASE + me;
    let consumer = WireConsumer::consumer(sid(id));
    let key = (id, part);
    let (stream, topic) = (sid(a.ids.stream), sid(a.ids.topics[part.0]));
    match (pick, store_at) {
        (0..=5, Some(offset)) => {
            lock(&a.world).oracle.offsets.storing(key, offset);
            let begun = a.begin(&format!("store offset {offset} of {id} in {part:?}"));
            let result = a
                .client()
                .store_consumer_offset(&consumer, &stream, &topic, Some(part.1), offset)
                .await;
            changed(a, &begun, key, Some(offset), &result);
        }
        (0..=7, _) => {
            let begun = a.begin(&format!("delete offset of {id} in {part:?}"));
            let result = a
                .client()
                .delete_consumer_offset(&consumer, &stream, &topic, Some(part.1))
                .await;
            changed(a, &begun, key, None, &result);
        }
        _ => {}
    }
    if lock(&a.world).violation.is_some() {
        return;
    }
    let floor = lock(&a.world).oracle.floor(part);
    let op = format!("get offset of {id} in {part:?}");
    let begun = a.begin(&op);
    let result = a
        .client()
        .get_consumer_offset(&consumer, &stream, &topic, Some(part.1))
        .await;
    a.end(&begun, &result);
    let epoch = a.after(&begun);
    if !this_boot(a, &begun, epoch) {
        return;
    }
    let Ok(reply) = result else {
        a.error_in_doubt((&begun, Some(part)), &result, &op, INV_OFFSETS);
        return;
    };
    let judged = judge_offset_reply(a, part, &begun, floor, epoch, key, reply.as_ref());
    verdict(a, "ConsumerOffsetRead", judged);
}

/// A store or delete answered: the model learns what it did.
fn changed(
    a: &mut Actor,
    begun: &Begun,
    key: (u32, PartKey),
    value: Option<u64>,
    result: &Result<(), ClientError>,
) {
    a.end(begun, result);
    let epoch = a.after(begun);
    let current = this_boot(a, begun, epoch);
    let kind = outcome(result);
    if let (Outcome::Refused(code), true) = (&kind, current) {
        let what = if value.is_some() { "store" } else { "delete" };
        let op = format!(
            "{what} of offset {value:?} of consumer {} in {:?}",
            key.0, key.1
        );
        // Nothing stored to delete is judged below; any other refusal only for a cause.
        let nothing_stored = *code == 3021 && value.is_none();
        if !nothing_stored
            && !a.partition_refusal_in_doubt(begun, Some(key.1), *code, &op, INV_OFFSETS)
        {
            return;
        }
    }
    let mut w = lock(&a.world);
    match kind {
        Outcome::Ok if current => w.oracle.offsets.answered(key, value, Answer::Done),
        Outcome::Ok | Outcome::NotSent => {}
        // Nothing stored to delete.
        Outcome::Refused(3021) if value.is_none() && current => {
            if let Err(v) = w.oracle.offsets.judge_delete_refused(key) {
                w.fail(v);
            }
        }
        Outcome::Refused(_) | Outcome::Unknown => {
            w.oracle.offsets.answered(key, value, Answer::Lost);
        }
    }
}

/// GetConsumerOffset's reply: the partition asked, its current offset within its window,
/// the stored offset as the model has it.
fn judge_offset_reply(
    a: &Actor,
    part: PartKey,
    begun: &Begun,
    floor: u64,
    epoch: u64,
    key: (u32, PartKey),
    reply: Option<&ConsumerOffsetResponse>,
) -> Result<(), Violation> {
    let w = lock(&a.world);
    assert!(
        epoch == w.oracle.epoch && epoch == begun.epoch,
        "judged in its boot"
    );
    let what = format!("{}: get offset of consumer {} in {part:?}", a.name, key.0);
    if let Some(r) = reply {
        if r.partition_id != part.1 {
            return Err(violation(
                INV_OFFSETS,
                format!("{what}: answered for partition {}", r.partition_id),
            ));
        }
        let window = w
            .oracle
            .windows(&[(part, floor)].into(), |p| w.may_be_empty(Some(p)))[&part];
        ends::judge_current(&what, part, window, r.current_offset)?;
    }
    w.oracle
        .offsets
        .judge_read(key, reply.map(|r| r.stored_offset))
}

/// A group member's view of one session: whether it polled since it joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberSession {
    pub session: u64,
    /// A poll of this session was sent (its partition may have become current).
    pub polled: bool,
}

/// The ids of the group's topic and the group.
struct GroupIds {
    stream: WireIdentifier,
    topic: WireIdentifier,
    group: WireIdentifier,
}

fn group_ids(a: &Actor) -> GroupIds {
    GroupIds {
        stream: sid(a.ids.stream),
        topic: sid(a.ids.topics[1]),
        group: sid(a.ids.group),
    }
}

/// How a member's offset call without a partition id ended, if judged.
fn member_answer<T>(
    result: &Result<T, ClientError>,
    ok: impl Fn(&T) -> MemberAnswer,
) -> Option<MemberAnswer> {
    match result {
        Ok(value) => Some(ok(value)),
        Err(ClientError::Server { code, .. }) if *code == NO_CURRENT_PARTITION => {
            Some(MemberAnswer::NoCurrent)
        }
        Err(_) => None,
    }
}

/// The session the last answer came on (`None`: no session).
fn session(a: &Actor) -> Option<u64> {
    a.client
        .as_ref()
        .and_then(|c| c.session())
        .map(|s| s.session)
}

/// A member that has not polled on this session: an offset read and a store without a
/// partition id must both find no current partition.
pub(crate) async fn before_first_poll(a: &mut Actor, at: MemberSession) {
    assert!(!at.polled);
    let ids = group_ids(a);
    let consumer = WireConsumer::consumer_group(ids.group.clone());
    let op = "get group offset (no partition id) before any poll";
    let begun = a.begin(op);
    let result = a
        .client()
        .get_consumer_offset(&consumer, &ids.stream, &ids.topic, None)
        .await;
    a.end(&begun, &result);
    a.after(&begun);
    if session(a) != Some(at.session) {
        return;
    }
    let Some(answer) = member_answer(&result, |r| {
        r.as_ref()
            .map_or(MemberAnswer::Done, |r| MemberAnswer::Named(r.partition_id))
    }) else {
        a.error_in_doubt((&begun, None), &result, op, INV_OFFSETS);
        return;
    };
    let what = format!("{}: get group offset before its first poll", a.name);
    let judged = judge_member(&what, Current::Nothing, false, answer);
    verdict(a, "MemberNoCurrentPartition", judged);
}

/// Sync, a group poll, a store and a read of the offset without a partition id, sync: the
/// read names the polled partition (and finds the offset stored) when no rebalance came
/// between, and never names another.
pub(crate) async fn after_poll(a: &mut Actor, at: MemberSession) -> bool {
    let ids = group_ids(a);
    let Some(before) = sync(a, &ids, at.session).await else {
        return false;
    };
    let count = lock(&a.world).rng.gen_range(1..=MAX_POLL);
    let request = PollMessagesRequest {
        consumer: WireConsumer::consumer_group(ids.group.clone()),
        stream_id: ids.stream.clone(),
        topic_id: ids.topic.clone(),
        partition_id: None,
        strategy: WirePollingStrategy::next(),
        count,
        auto_commit: true,
    };
    let begun = a.begin(&format!("group poll count {count} (then its offset)"));
    let result = a.client().poll_messages(&request).await;
    a.end(&begun, &result);
    let epoch = a.after(&begun);
    if session(a) != Some(at.session) {
        return false;
    }
    let Ok(polled) = result else { return false };
    let current = if polled.partition_id == NO_ASSIGNED_PARTITION {
        Current::Nothing
    } else {
        Current::Polled(polled.partition_id)
    };
    let mut first = None;
    if let Current::Polled(p) = current {
        let part = (1, p);
        if !lock(&a.world).oracle.parts.contains_key(&part) {
            a.fail(violation(
                super::super::oracle::INV_POLL,
                format!("{}: a group poll answered for partition {p}", a.name),
            ));
            return false;
        }
        match judge_poll(a, part, None, false, &polled, epoch) {
            Ok(messages) => first = messages.first().map(|m| m.0),
            Err(()) => return false,
        }
    }
    let consumer = WireConsumer::consumer_group(ids.group.clone());
    let mut stored = None;
    if let Some(offset) = first {
        let op = format!("store group offset {offset} (no partition id)");
        let begun = a.begin(&op);
        let result = a
            .client()
            .store_consumer_offset(&consumer, &ids.stream, &ids.topic, None, offset)
            .await;
        a.end(&begun, &result);
        a.after(&begun);
        if session(a) != Some(at.session) {
            return false;
        }
        let Some(answer) = member_answer(&result, |()| MemberAnswer::Done) else {
            a.error_in_doubt((&begun, None), &result, &op, INV_OFFSETS);
            return false;
        };
        stored = (answer == MemberAnswer::Done).then_some(offset);
        // Judged once the generation after it is known.
        let after = sync(a, &ids, at.session).await;
        let stable = after.is_some_and(|g| g == before);
        let what = format!("{}: store group offset after a poll of {current:?}", a.name);
        if judge(a, &what, current, stable, answer, "MemberStoreNamed").is_err() {
            return false;
        }
    }
    let op = "get group offset (no partition id)";
    let begun = a.begin(op);
    let result = a
        .client()
        .get_consumer_offset(&consumer, &ids.stream, &ids.topic, None)
        .await;
    a.end(&begun, &result);
    a.after(&begun);
    if session(a) != Some(at.session) {
        return false;
    }
    let Some(answer) = member_answer(&result, |r| {
        r.as_ref()
            .map_or(MemberAnswer::Done, |r| MemberAnswer::Named(r.partition_id))
    }) else {
        a.error_in_doubt((&begun, None), &result, op, INV_OFFSETS);
        return false;
    };
    let after = sync(a, &ids, at.session).await;
    let stable = after.is_some_and(|g| g == before);
    let what = format!("{}: get group offset after a poll of {current:?}", a.name);
    if judge(a, &what, current, stable, answer, "MemberOffsetNamed").is_err() {
        return false;
    }
    // In a stable generation the partition's group offset is this member's alone.
    if let (true, Some(offset), Ok(found)) = (stable, stored, &result) {
        let found = found.as_ref().map(|r| r.stored_offset);
        if found != Some(offset) {
            a.fail(violation(INV_OFFSETS, format!("{what}: found {found:?}, though this member stored {offset} there with no rebalance since")));
            return false;
        }
    }
    true
}

/// Judges one member answer; coverage `named_row` when it named the polled partition in a
/// stable generation, `MemberRebalancedAway` when a rebalance took the partition.
fn judge(
    a: &Actor,
    what: &str,
    current: Current,
    stable: bool,
    answer: MemberAnswer,
    named_row: &'static str,
) -> Result<(), ()> {
    if let Err(v) = judge_member(what, current, stable, answer) {
        a.fail(v);
        return Err(());
    }
    let mut w = lock(&a.world);
    match (current, answer, stable) {
        (Current::Polled(_), MemberAnswer::Named(_) | MemberAnswer::Done, true) => {
            w.decision(named_row)
        }
        (Current::Polled(_), MemberAnswer::NoCurrent, false) => w.decision("MemberRebalancedAway"),
        (Current::Nothing, MemberAnswer::NoCurrent, _) => w.decision("MemberNoCurrentPartition"),
        _ => {}
    }
    Ok(())
}

/// The group's generation as this member's session sees it (`None`: not answered on it).
async fn sync(a: &mut Actor, ids: &GroupIds, on: u64) -> Option<u64> {
    let begun = a.begin("sync group");
    let result = a
        .client()
        .sync_consumer_group(&ids.stream, &ids.topic, &ids.group)
        .await;
    a.end(&begun, &result);
    a.after(&begun);
    if session(a) != Some(on) {
        return None;
    }
    match result {
        Ok(Some(sync)) => Some(sync.generation),
        _ => None,
    }
}

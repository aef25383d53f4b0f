//! The data clients: producers (batches to either topic, retried after an unknown
//! outcome), consumers (offset and `next` polls) and consumer-group members (join, group
//! polls with auto-commit, the group's list), each reply judged by the oracle.

use super::super::oracle::{self, PartKey};
use super::super::{lock, TOPICS};
use super::offsets::MemberSession;
use super::{
    details, groups, offsets, outcome, payload, payload_len, sid, Actor, Outcome, Role, LABEL_IDS,
    MAX_POLL, REFUSED_BEFORE_APPEND,
};
use crate::report::violation;
use cairn_client::iggy_binary_protocol::requests::messages::PollMessagesRequest;
use cairn_client::iggy_binary_protocol::{WireConsumer, WirePartitioning, WirePollingStrategy};
use cairn_client::{ClientError, Outgoing, Polled};
use rand::Rng;
use std::collections::BTreeMap;

fn ids_label(ids: &[u128]) -> String {
    let mut text: Vec<String> = ids
        .iter()
        .take(LABEL_IDS)
        .map(|id| format!("{:#x}:{}", id >> 64, *id as u64))
        .collect();
    if ids.len() > LABEL_IDS {
        text.push(format!("+{}", ids.len() - LABEL_IDS));
    }
    text.join(" ")
}

pub(crate) async fn producer(mut a: Actor) {
    let Role::Producer(me) = a.role else {
        unreachable!()
    };
    let mut seq = 0u64;
    let mut retry: Option<(PartKey, Vec<u128>)> = None;
    while a.think().await {
        if !a.connected().await {
            continue;
        }
        let (part, ids, retried) = match retry.take() {
            Some((part, ids)) => (part, ids, true),
            None => {
                let mut w = lock(&a.world);
                let (partitions, max_batch) = (w.profile.partitions, w.profile.max_batch);
                let part = (
                    w.rng.gen_range(0..TOPICS.len()),
                    w.rng.gen_range(0..partitions),
                );
                let n = w.rng.gen_range(1..=max_batch);
                let ids = (0..n)
                    .map(|_| {
                        seq += 1;
                        (u128::from(me) << 64) | u128::from(seq)
                    })
                    .collect();
                (part, ids, false)
            }
        };
        let max_payload = {
            let mut w = lock(&a.world);
            if retried {
                w.decision("RetriedSend");
            }
            w.oracle.sending(part, &ids);
            w.profile.max_payload
        };
        let payloads: Vec<Vec<u8>> = ids
            .iter()
            .map(|id| payload(*id, payload_len(*id, max_payload)))
            .collect();
        let outgoing: Vec<Outgoing<'_>> = ids
            .iter()
            .zip(&payloads)
            .map(|(id, p)| Outgoing {
                id: *id,
                payload: p,
                headers: &[],
            })
            .collect();
        let label = format!(
            "send {}/{} [{}]{}",
            TOPICS[part.0].0,
            part.1,
            ids_label(&ids),
            if retried { " (retry)" } else { "" }
        );
        let begun = a.begin(&label);
        let (stream, topic) = (sid(a.ids.stream), sid(a.ids.topics[part.0]));
        let result = a
            .client()
            .send_payloads(
                &stream,
                &topic,
                &WirePartitioning::PartitionId(part.1),
                &outgoing,
            )
            .await;
        a.end(&begun, &result);
        let epoch = a.after(&begun);
        lock(&a.world).oracle.answered(part, ids.len());
        match &result {
            Ok(reply) => {
                let Some(confirmation) = reply.confirmations.first() else {
                    a.fail(violation(
                        oracle::INV_ACKED,
                        format!("{label}: acknowledged without a confirmation"),
                    ));
                    return;
                };
                if confirmation.partition_id != part.1 {
                    a.fail(violation(
                        oracle::INV_ACKED,
                        format!(
                            "{label}: confirmed in partition {}",
                            confirmation.partition_id
                        ),
                    ));
                    return;
                }
                let judged =
                    lock(&a.world)
                        .oracle
                        .acked(part, confirmation.base_offset, &ids, epoch);
                if let Err(v) = judged {
                    a.fail(v);
                    return;
                }
            }
            Err(_) if outcome(&result) == Outcome::Unknown => {
                // Unknown: sending it again may duplicate it, which the oracle allows.
                let mut w = lock(&a.world);
                w.oracle.unknown(&ids);
                if w.rng.gen_bool(0.6) {
                    retry = Some((part, ids));
                }
            }
            // Refused before the shard could append it (not found, not allowed, malformed):
            // it was not sent after all. Other refusals (I/O, space) may follow a write.
            Err(ClientError::Server { code, .. }) if REFUSED_BEFORE_APPEND.contains(code) => {
                lock(&a.world).oracle.unsent(&ids);
            }
            // Other refusals (I/O, space, a stop) may follow a write, and only those.
            Err(ClientError::Server { code, .. }) => {
                if !a.partition_refusal_in_doubt(
                    &begun,
                    Some(part),
                    *code,
                    &label,
                    oracle::INV_ACKED,
                ) {
                    return;
                }
            }
            Err(_) => {}
        }
    }
}

/// The messages of a poll reply: (offset, id, payload as sent).
fn read(polled: &Polled) -> Result<Vec<(u64, u128, bool)>, String> {
    let mut out = Vec::new();
    for message in polled.messages() {
        let m = message.map_err(|e| format!("undecodable poll reply: {e}"))?;
        out.push((
            m.offset,
            m.id,
            m.payload == payload(m.id, m.payload.len()).as_slice(),
        ));
    }
    Ok(out)
}

/// Judges a poll reply of `part`.
pub(crate) fn judge_poll(
    a: &Actor,
    part: PartKey,
    from: Option<u64>,
    known: bool,
    polled: &Polled,
    epoch: u64,
) -> Result<Vec<(u64, u128, bool)>, ()> {
    let messages = match read(polled) {
        Ok(messages) => messages,
        Err(e) => {
            a.fail(violation(oracle::INV_POLL, format!("{}: {e}", a.name)));
            return Err(());
        }
    };
    let judged = lock(&a.world)
        .oracle
        .polled(part, from, known, &messages, epoch);
    if let Err(mut v) = judged {
        let crashed = lock(&a.world).disk.is_crashed();
        v.evidence.push_str(&format!(
            " (the reply: partition {} current offset {} count {}; the disk {})",
            polled.partition_id,
            polled.current_offset,
            polled.count,
            if crashed {
                "crashed inside a call"
            } else {
                "up"
            }
        ));
        a.fail(v);
        return Err(());
    }
    Ok(messages)
}

pub(crate) async fn consumer(mut a: Actor) {
    let Role::Consumer(me) = a.role else {
        unreachable!()
    };
    let mut cursors: BTreeMap<PartKey, u64> = BTreeMap::new();
    while a.think().await {
        if !a.connected().await {
            continue;
        }
        let step = lock(&a.world).rng.gen_range(0..20);
        match step {
            0..=2 => {
                details::read_numbers(&mut a).await;
                continue;
            }
            3..=4 => {
                offsets::consumer_offsets(&mut a, me).await;
                continue;
            }
            _ => {}
        }
        let (part, from, count, auto_commit) = {
            let mut w = lock(&a.world);
            let partitions = w.profile.partitions;
            let part = (
                w.rng.gen_range(0..TOPICS.len()),
                w.rng.gen_range(0..partitions),
            );
            let cursor = cursors.get(&part).copied().unwrap_or(0);
            let from = match w.rng.gen_range(0..10) {
                0 => Some(0),
                1 => None,
                _ => Some(cursor),
            };
            (part, from, w.rng.gen_range(1..=MAX_POLL), from.is_none())
        };
        let request = PollMessagesRequest {
            consumer: WireConsumer::consumer(sid(me)),
            stream_id: sid(a.ids.stream),
            topic_id: sid(a.ids.topics[part.0]),
            partition_id: Some(part.1),
            strategy: from.map_or(WirePollingStrategy::next(), WirePollingStrategy::offset),
            count,
            auto_commit,
        };
        let known = from.is_some_and(|f| lock(&a.world).oracle.knows(part, f));
        let floor = lock(&a.world).oracle.floor(part);
        let begun = a.begin(&format!(
            "poll {}/{} from {from:?} count {count}",
            TOPICS[part.0].0, part.1
        ));
        let result = a.client().poll_messages(&request).await;
        a.end(&begun, &result);
        let epoch = a.after(&begun);
        let Ok(polled) = result else { continue };
        if polled.partition_id != part.1 {
            a.fail(violation(
                oracle::INV_POLL,
                format!(
                    "{}: a poll of partition {} answered for {}",
                    a.name, part.1, polled.partition_id
                ),
            ));
            return;
        }
        let Ok(messages) = judge_poll(
            &a,
            part,
            from,
            known && epoch == begun.epoch,
            &polled,
            epoch,
        ) else {
            return;
        };
        let last = messages.last().map(|m| m.0);
        details::judge_poll_end(&a, part, &begun, floor, epoch, &polled, last);
        if let Some(last) = last {
            cursors.insert(part, last + 1);
        }
    }
}

/// LeaveConsumerGroup: acknowledged, or refused only for a cause of the server's. After
/// anything but an answer the connection is dropped, so the member starts afresh on a new
/// session either way. False when the run failed.
async fn leave(a: &mut Actor) -> bool {
    let (stream, topic, group) = (sid(a.ids.stream), sid(a.ids.topics[1]), sid(a.ids.group));
    let begun = a.begin("leave group");
    let result = a
        .client()
        .leave_consumer_group(&stream, &topic, &group)
        .await;
    a.end(&begun, &result);
    a.after(&begun);
    match outcome(&result) {
        Outcome::Ok => {
            lock(&a.world).decision("MemberLeft");
            return true;
        }
        Outcome::Refused(code) => {
            if !a.refusal_in_doubt(&begun, code, "leave group", oracle::INV_GROUP) {
                return false;
            }
        }
        Outcome::Unknown | Outcome::NotSent => {}
    }
    a.client = None;
    a.session = None;
    true
}

pub(crate) async fn member(mut a: Actor) {
    // This session's membership, and its client id (from GetMe) once known.
    let mut at: Option<MemberSession> = None;
    let mut me: Option<u32> = None;
    let mut rejoin = false;
    let (stream, topic, group) = (sid(a.ids.stream), sid(a.ids.topics[1]), sid(a.ids.group));
    while a.think().await {
        if !a.connected().await {
            continue;
        }
        let session = a
            .client
            .as_ref()
            .and_then(|c| c.session())
            .map(|s| s.session);
        let joined = session.filter(|s| !rejoin && at.is_some_and(|m| m.session == *s));
        let Some(session) = joined else {
            let begun = a.begin("join group");
            let result = a
                .client()
                .join_consumer_group(&stream, &topic, &group)
                .await;
            a.end(&begun, &result);
            a.after(&begun);
            let now = a
                .client
                .as_ref()
                .and_then(|c| c.session())
                .map(|s| s.session);
            if let (Ok(()), Some(now)) = (&result, now) {
                // A member joining again keeps its current partition.
                let again = at.filter(|m| m.session == now);
                rejoin = false;
                at = Some(MemberSession {
                    session: now,
                    polled: again.is_some_and(|m| m.polled),
                });
                if again.is_none() {
                    me = groups::me_after_join(&mut a, now).await;
                }
            }
            continue;
        };
        let mut member = at.expect("joined on this session");
        let pick = lock(&a.world).rng.gen_range(0..10);
        match pick {
            0..=1 => {
                if !groups::read_group(&mut a, session, me).await {
                    return;
                }
                continue;
            }
            2..=3 if !member.polled => {
                offsets::before_first_poll(&mut a, member).await;
                continue;
            }
            2..=3 => {
                member.polled = true;
                at = Some(member);
                offsets::after_poll(&mut a, member).await;
                continue;
            }
            4 => {
                if !leave(&mut a).await {
                    return;
                }
                // Joined again on the next turn, as a new member: no current partition.
                at = None;
                continue;
            }
            _ => {}
        }
        member.polled = true;
        at = Some(member);
        let count = lock(&a.world).rng.gen_range(1..=MAX_POLL);
        let request = PollMessagesRequest {
            consumer: WireConsumer::consumer_group(group.clone()),
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partition_id: None,
            strategy: WirePollingStrategy::next(),
            count,
            auto_commit: true,
        };
        let begun = a.begin(&format!("group poll count {count}"));
        let result = a.client().poll_messages(&request).await;
        a.end(&begun, &result);
        let epoch = a.after(&begun);
        match result {
            Ok(polled) => {
                let part = (1, polled.partition_id);
                if polled.count > 0 && !lock(&a.world).oracle.parts.contains_key(&part) {
                    a.fail(violation(
                        oracle::INV_POLL,
                        format!(
                            "{}: a group poll answered for partition {}",
                            a.name, polled.partition_id
                        ),
                    ));
                    return;
                }
                if polled.count > 0 && judge_poll(&a, part, None, false, &polled, epoch).is_err() {
                    return;
                }
            }
            // Not a member (any more): join again.
            Err(_) => rejoin = true,
        }
    }
}

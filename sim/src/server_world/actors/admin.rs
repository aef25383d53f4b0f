//! The admin: scratch streams created (a create replayed on its session must get its
//! original reply), deleted and read back; and the choice of its next request.

use super::super::oracle::{StreamState, INV_DEDUP, INV_META};
use super::super::{lock, STREAM};
use super::{outcome, Actor, Outcome};
use crate::report::violation;
use cairn_client::iggy_binary_protocol::{WireDecode, WireIdentifier};
use cairn_client::ClientError;
use rand::Rng;
use std::collections::BTreeMap;

pub(crate) async fn admin(mut a: Actor) {
    let mut next = 0u32;
    while a.think().await {
        if !a.connected().await {
            continue;
        }
        let pick = lock(&a.world).rng.gen_range(0..100);
        match pick {
            0..=24 => {
                next += 1;
                create_stream(&mut a, format!("x{next}")).await;
            }
            25..=36 => delete_stream(&mut a).await,
            37..=39 => rename_stream(&mut a).await,
            40..=47 => super::details::stats(&mut a).await,
            48..=52 => super::clients::clients(&mut a).await,
            53..=57 => read_streams(&mut a).await,
            58..=79 => super::scratch::scratch(&mut a).await,
            80..=91 => super::users::users(&mut a, &mut next).await,
            _ => super::accounts::accounts(&mut a, &mut next).await,
        }
        if lock(&a.world).violation.is_some() {
            return;
        }
    }
}

/// Creates scratch stream `name`; after an unknown outcome, tries once more on the new
/// session (where "already exists" is the first attempt having landed).
async fn create_stream(a: &mut Actor, name: String) {
    lock(&a.world)
        .oracle
        .streams
        .insert(name.clone(), StreamState::Absent);
    for attempt in 0..2 {
        let begun = a.begin(&format!(
            "create stream {name}{}",
            if attempt > 0 { " (retry)" } else { "" }
        ));
        // In doubt while in flight (the run may end before its reply).
        let before = in_flight(a, &name, begun.epoch);
        let result = a.client().create_stream(&name).await;
        a.end(&begun, &result);
        a.after(&begun);
        if let Ok(stream) = &result {
            let replay = {
                let mut w = lock(&a.world);
                w.oracle
                    .streams
                    .insert(name.clone(), StreamState::Exists(stream.id));
                let share = w.profile.replay;
                w.chance(share)
            };
            if replay {
                replay_create(a, &name, stream).await;
            }
            return;
        }
        let kind = outcome(&result);
        if let Outcome::Refused(code) = kind {
            if code != 1012 {
                // A refusal for a cause of the server's (a full disk, a stop): its journal
                // entry may have been written. Any other refusal is wrong.
                let op = format!("create stream {name}");
                if a.refusal_in_doubt(&begun, code, &op, INV_META) {
                    let mut w = lock(&a.world);
                    let now_epoch = w.oracle.epoch;
                    w.oracle
                        .streams
                        .insert(name.clone(), StreamState::InDoubt(now_epoch));
                }
                return;
            }
        }
        let mut w = lock(&a.world);
        match kind {
            Outcome::Refused(_) => {
                if before == StreamState::Absent {
                    w.fail(violation(INV_META, format!("create stream {name}: refused as existing, though no create of it can have landed")));
                }
                // The lost first attempt landed.
                return;
            }
            Outcome::Unknown => {
                w.oracle.lost_attempt(&name);
                continue;
            }
            _ => {
                w.oracle.streams.insert(name.clone(), before);
                return;
            }
        }
    }
}

/// Marks stream `name` in doubt while a create or delete of it is in flight; returns what
/// the model held before.
fn in_flight(a: &Actor, name: &str, epoch: u64) -> StreamState {
    let mut w = lock(&a.world);
    let before = w.oracle.streams[name];
    w.oracle
        .streams
        .insert(name.to_string(), StreamState::InDoubt(epoch));
    before
}

/// The same request again, same header, same session: the duplicate table must answer it
/// with the original reply.
async fn replay_create(
    a: &mut Actor,
    name: &str,
    original: &cairn_client::iggy_binary_protocol::responses::streams::StreamResponse,
) {
    let begun = a.begin(&format!("replay create stream {name}"));
    let result = a.client().replay_last().await;
    a.end(&begun, &result);
    a.after(&begun);
    let payload = match result {
        Ok(payload) => payload,
        Err(ClientError::Server { code, .. }) => {
            // The table holds the session's last 64 metadata replies: a refusal means the
            // create ran again instead of being answered from it.
            a.fail(violation(INV_DEDUP, format!("create stream {name} replayed on its session right after its reply: refused with {code} (not answered from the duplicate table)")));
            return;
        }
        Err(_) => return,
    };
    let decoded =
        cairn_client::iggy_binary_protocol::responses::streams::StreamResponse::decode(&payload);
    match decoded {
        Ok((replayed, _)) if &replayed == original => lock(&a.world).decision("DedupAnswered"),
        Ok((replayed, _)) => a.fail(violation(INV_DEDUP, format!("create stream {name} replayed on its session: answered {replayed:?}, the original reply was {original:?}"))),
        Err(e) => a.fail(violation(INV_DEDUP, format!("create stream {name} replayed on its session: the reply does not decode as the original's kind ({e}); the original was {original:?}"))),
    }
}

async fn delete_stream(a: &mut Actor) {
    // By name: ids are reused, so a lost delete landing late could hit a newer stream.
    let Some(name) = existing_stream(a) else {
        return;
    };
    for attempt in 0..2 {
        let begun = a.begin(&format!(
            "delete stream {name}{}",
            if attempt > 0 { " (retry)" } else { "" }
        ));
        let before = in_flight(a, &name, begun.epoch);
        let result = a
            .client()
            .delete_stream(&WireIdentifier::named(&name).expect("a valid name"))
            .await;
        a.end(&begun, &result);
        a.after(&begun);
        let kind = outcome(&result);
        if let Outcome::Refused(code) = kind {
            if code != 1009 && code != 1010 {
                let op = format!("delete stream {name}");
                if a.refusal_in_doubt(&begun, code, &op, INV_META) {
                    let mut w = lock(&a.world);
                    let now_epoch = w.oracle.epoch;
                    w.oracle
                        .streams
                        .insert(name.clone(), StreamState::InDoubt(now_epoch));
                }
                return;
            }
        }
        let mut w = lock(&a.world);
        match kind {
            Outcome::Ok => {
                w.oracle.streams.insert(name.clone(), StreamState::Absent);
                return;
            }
            // Not found (1009 or 1010, the only refusals left).
            Outcome::Refused(_) => {
                if let StreamState::Exists(_) = before {
                    w.fail(violation(INV_META, format!("delete stream {name}: not found, though it was acknowledged and no delete of it can have landed")));
                } else {
                    w.oracle.streams.insert(name.clone(), StreamState::Absent);
                }
                return;
            }
            Outcome::Unknown => {
                w.oracle.lost_attempt(&name);
                continue;
            }
            Outcome::NotSent => {
                w.oracle.streams.insert(name.clone(), before);
                return;
            }
        }
    }
}

/// A scratch stream acknowledged and not in flight, by name (none: there is none).
fn existing_stream(a: &Actor) -> Option<String> {
    let mut w = lock(&a.world);
    let existing: Vec<String> = w
        .oracle
        .streams
        .iter()
        .filter(|(n, s)| matches!(s, StreamState::Exists(_)) && !w.oracle.pending.contains_key(*n))
        .map(|(n, _)| n.clone())
        .collect();
    (!existing.is_empty()).then(|| existing[w.rng.gen_range(0..existing.len())].clone())
}

/// UpdateStream: a scratch stream renamed (`x5` to `x5-r`, and back). Acknowledged, the old
/// name is free and the new one names the stream's id, with its topic; refused with a cause
/// of the server's or lost, both names are in doubt (and the topic under either) until a
/// read after that server process is gone. Any other refusal is wrong: the model holds the
/// stream under the old name and nothing under the new one.
async fn rename_stream(a: &mut Actor) {
    let Some((old, new, id)) = rename_target(a) else {
        return;
    };
    let label = format!("rename stream {old} to {new}");
    let begun = a.begin(&label);
    lock(&a.world)
        .oracle
        .streams
        .insert(new.clone(), StreamState::Absent);
    let before = in_flight(a, &old, begun.epoch);
    in_flight(a, &new, begun.epoch);
    let result = a
        .client()
        .update_stream(&WireIdentifier::named(&old).expect("a valid name"), &new)
        .await;
    a.end(&begun, &result);
    a.after(&begun);
    let in_doubt = match outcome(&result) {
        Outcome::Ok => return renamed(a, &old, new, id),
        Outcome::Refused(code) => a.refusal_in_doubt(&begun, code, &label, INV_META),
        Outcome::Unknown => true,
        Outcome::NotSent => {
            let mut w = lock(&a.world);
            w.oracle.streams.insert(old, before);
            w.oracle.streams.insert(new, StreamState::Absent);
            return;
        }
    };
    if in_doubt {
        // A rename changes no topic: its model holds under whichever name the stream has.
        let mut w = lock(&a.world);
        let topic = w.oracle.scratch_topics.get(&old).copied();
        for name in [&old, &new] {
            w.oracle.lost_attempt(name);
            match topic {
                Some(topic) => w.oracle.scratch_topics.insert(name.clone(), topic),
                None => w.oracle.scratch_topics.remove(name),
            };
        }
        w.oracle.renames.push((old, new, id));
    }
}

/// A scratch stream to rename, its new name (`-r` added, or taken off) and its id: `None`
/// when no stream exists or its new name is not free in the model.
fn rename_target(a: &Actor) -> Option<(String, String, u32)> {
    let old = existing_stream(a)?;
    let new = match old.strip_suffix("-r") {
        Some(base) => base.to_string(),
        None => format!("{old}-r"),
    };
    let w = lock(&a.world);
    let free = matches!(w.oracle.streams.get(&new), None | Some(StreamState::Absent))
        && !w.oracle.pending.contains_key(&new);
    match w.oracle.streams[&old] {
        StreamState::Exists(id) if free => Some((old, new, id)),
        _ => None,
    }
}

/// An acknowledged rename: the old name is free, the new one names the stream, with its
/// topic.
fn renamed(a: &Actor, old: &str, new: String, id: u32) {
    let mut w = lock(&a.world);
    w.oracle
        .streams
        .insert(old.to_string(), StreamState::Absent);
    w.oracle
        .streams
        .insert(new.clone(), StreamState::Exists(id));
    match w.oracle.scratch_topics.remove(old) {
        Some(topic) => w.oracle.scratch_topics.insert(new, topic),
        None => w.oracle.scratch_topics.remove(&new),
    };
    w.decision("StreamRenamed");
}

async fn read_streams(a: &mut Actor) {
    let begun = a.begin("get streams");
    let result = a.client().get_streams().await;
    a.end(&begun, &result);
    let epoch = a.after(&begun);
    let Ok(streams) = result else { return };
    let listed: BTreeMap<String, u32> = streams
        .iter()
        .filter(|s| s.name.as_str() != STREAM)
        .map(|s| (s.name.as_str().to_string(), s.id))
        .collect();
    let mut w = lock(&a.world);
    if epoch != w.oracle.epoch {
        return;
    }
    if let Err(v) = w.oracle.streams_read(&listed) {
        w.fail(v);
    }
}

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
            25..=39 => delete_stream(&mut a).await,
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
    let name = {
        let mut w = lock(&a.world);
        let existing: Vec<String> = w
            .oracle
            .streams
            .iter()
            .filter(|(n, s)| {
                matches!(s, StreamState::Exists(_)) && !w.oracle.pending.contains_key(*n)
            })
            .map(|(n, _)| n.clone())
            .collect();
        if existing.is_empty() {
            return;
        }
        existing[w.rng.gen_range(0..existing.len())].clone()
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

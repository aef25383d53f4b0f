//! Reads of the workload's numbers: GetTopic, GetStream, GetTopics and GetStreams (each
//! partition's current offset and message count, each topic's and the stream's totals),
//! a poll's current offset, and the server's stats, each judged against the model's
//! window of what the partitions can hold (S7, [`super::super::ends`]).
//!
//! A reply is judged when the server process that answered is the one the request was
//! sent to and still the running one (a floor is a fact of one boot).

use super::super::ends::{self, Floors, Window, INV_ENDS};
use super::super::oracle::{PartKey, StreamState};
use super::super::{lock, STREAM, TOPICS};
use super::{sid, Actor, Begun};
use crate::report::violation;
use cairn_client::iggy_binary_protocol::responses::streams::{StreamResponse, TopicHeader};
use cairn_client::iggy_binary_protocol::responses::system::StatsResponse;
use cairn_client::iggy_binary_protocol::responses::topics::GetTopicResponse;
use cairn_client::{ClientError, Polled};
use rand::Rng;
use std::collections::BTreeMap;

type Windows = BTreeMap<PartKey, Window>;

/// The windows for a read begun at `begun` (floors taken then) answered by `epoch`'s
/// server, when it is judged.
fn windows(a: &Actor, begun: &Begun, floors: &Floors, epoch: u64) -> Option<Windows> {
    let w = lock(&a.world);
    if epoch != begun.epoch || epoch != w.oracle.epoch || !w.running() {
        return None;
    }
    Some(w.oracle.windows(floors, |p| w.may_be_empty(Some(p))))
}

fn judged(a: &Actor, row: &'static str, verdict: Result<(), crate::report::Violation>) {
    let mut w = lock(&a.world);
    match verdict {
        Ok(()) => w.decision(row),
        Err(v) => w.fail(v),
    }
}

/// One read of the workload's numbers, picked at random.
pub(crate) async fn read_numbers(a: &mut Actor) {
    let (pick, t, floors) = {
        let mut w = lock(&a.world);
        let pick = w.rng.gen_range(0..4);
        let t = w.rng.gen_range(0..TOPICS.len());
        (pick, t, w.oracle.floors())
    };
    let (stream, topic) = (sid(a.ids.stream), sid(a.ids.topics[t]));
    match pick {
        0 => {
            let op = format!("get topic {}", TOPICS[t].0);
            let begun = a.begin(&op);
            let result = a.client().get_topic(&stream, &topic).await;
            let Some(ws) = answered(a, &begun, &op, &result, &floors) else {
                return;
            };
            let Ok(Some(reply)) = result else {
                return judged(
                    a,
                    "TopicDetails",
                    Err(violation(
                        INV_ENDS,
                        format!(
                            "get topic {}: answered 'not found' for a workload topic",
                            TOPICS[t].0
                        ),
                    )),
                );
            };
            let verdict = judge_topic(a, t, &reply, &ws);
            judged(a, "TopicDetails", verdict);
        }
        1 => {
            let begun = a.begin("get stream");
            let result = a.client().get_stream(&stream).await;
            let Some(ws) = answered(a, &begun, "get stream", &result, &floors) else {
                return;
            };
            let Ok(Some(reply)) = result else {
                return judged(
                    a,
                    "StreamDetails",
                    Err(violation(
                        INV_ENDS,
                        "get stream: answered 'not found' for the workload's stream".into(),
                    )),
                );
            };
            let verdict = judge_stream(a, &reply.stream, &ws)
                .and_then(|()| judge_headers(a, "get stream", &reply.topics, &ws));
            judged(a, "StreamDetails", verdict);
        }
        2 => {
            let begun = a.begin("get topics");
            let result = a.client().get_topics(&stream).await;
            let Some(ws) = answered(a, &begun, "get topics", &result, &floors) else {
                return;
            };
            let Ok(headers) = result else { return };
            let verdict = judge_headers(a, "get topics", &headers, &ws);
            judged(a, "TopicList", verdict);
        }
        _ => {
            let begun = a.begin("get streams (numbers)");
            let result = a.client().get_streams().await;
            let Some(ws) = answered(a, &begun, "get streams (numbers)", &result, &floors) else {
                return;
            };
            let Ok(streams) = result else { return };
            let verdict = match streams.iter().find(|s| s.name.as_str() == STREAM) {
                Some(s) => judge_stream(a, s, &ws),
                None => Err(violation(
                    INV_ENDS,
                    "get streams: the workload's stream is not listed".into(),
                )),
            };
            judged(a, "StreamList", verdict);
        }
    }
}

/// Ends read `op`; its windows when the answer is judged (`Ok` or `not found`). A refusal
/// is judged here: only a cause of the server's excuses it.
fn answered<T>(
    a: &mut Actor,
    begun: &Begun,
    op: &str,
    result: &Result<T, ClientError>,
    floors: &Floors,
) -> Option<Windows> {
    a.end(begun, result);
    let epoch = a.after(begun);
    if result.is_err() {
        a.error_in_doubt((begun, None), result, op, INV_ENDS);
        return None;
    }
    windows(a, begun, floors, epoch)
}

fn judge_topic(
    a: &Actor,
    t: usize,
    reply: &GetTopicResponse,
    ws: &Windows,
) -> Result<(), crate::report::Violation> {
    let what = format!("get topic {}", TOPICS[t].0);
    judge_header(a, &what, t, &reply.topic, ws)?;
    let ids: Vec<u32> = reply.partitions.iter().map(|p| p.id).collect();
    let expected: Vec<u32> = (0..partitions(a)).collect();
    if ids != expected {
        return Err(violation(
            INV_ENDS,
            format!("{what}: partitions {ids:?}, the workload's are {expected:?}"),
        ));
    }
    let mut sum = 0;
    for p in &reply.partitions {
        let part = (t, p.id);
        ends::judge_partition(&what, part, ws[&part], p.current_offset, p.messages_count)?;
        sum += p.messages_count;
    }
    if sum != reply.topic.messages_count {
        return Err(violation(
            INV_ENDS,
            format!(
                "{what}: the topic counts {} messages, its partitions {sum}",
                reply.topic.messages_count
            ),
        ));
    }
    Ok(())
}

fn partitions(a: &Actor) -> u32 {
    lock(&a.world).profile.partitions
}

/// A workload topic's header: its id, partition count and message total.
fn judge_header(
    a: &Actor,
    what: &str,
    t: usize,
    header: &TopicHeader,
    ws: &Windows,
) -> Result<(), crate::report::Violation> {
    let n = partitions(a);
    if header.id != a.ids.topics[t] || header.partitions_count != n {
        return Err(violation(
            INV_ENDS,
            format!(
                "{what}: topic {} has id {} and {} partitions, created with id {} and {n}",
                TOPICS[t].0, header.id, header.partitions_count, a.ids.topics[t]
            ),
        ));
    }
    let parts = (0..n).map(|p| (t, p));
    ends::judge_total(
        &format!("{what}: topic {}", TOPICS[t].0),
        ws,
        parts,
        header.messages_count,
    )
}

/// The workload stream's topic headers: both topics, each judged.
fn judge_headers(
    a: &Actor,
    what: &str,
    headers: &[TopicHeader],
    ws: &Windows,
) -> Result<(), crate::report::Violation> {
    if headers.len() != TOPICS.len() {
        return Err(violation(
            INV_ENDS,
            format!(
                "{what}: {} topics in the workload's stream, it has {}",
                headers.len(),
                TOPICS.len()
            ),
        ));
    }
    for (t, (name, _)) in TOPICS.iter().enumerate() {
        let Some(header) = headers.iter().find(|h| h.name.as_str() == *name) else {
            return Err(violation(
                INV_ENDS,
                format!("{what}: topic {name} is missing"),
            ));
        };
        judge_header(a, what, t, header, ws)?;
    }
    Ok(())
}

/// The workload stream's summary: its id, topic count and message total.
fn judge_stream(
    a: &Actor,
    stream: &StreamResponse,
    ws: &Windows,
) -> Result<(), crate::report::Violation> {
    if stream.id != a.ids.stream || stream.topics_count != TOPICS.len() as u32 {
        return Err(violation(
            INV_ENDS,
            format!(
                "the workload's stream reports id {} with {} topics, created as {} with {}",
                stream.id,
                stream.topics_count,
                a.ids.stream,
                TOPICS.len()
            ),
        ));
    }
    ends::judge_total(
        "the workload's stream",
        ws,
        ws.keys().copied(),
        stream.messages_count,
    )
}

/// A poll's `current_offset`: within the window, and at least the last offset it returned.
pub(crate) fn judge_poll_end(
    a: &Actor,
    part: PartKey,
    begun: &Begun,
    floor: u64,
    epoch: u64,
    polled: &Polled,
    last_returned: Option<u64>,
) {
    let floors: Floors = [(part, floor)].into();
    let Some(ws) = windows(a, begun, &floors, epoch) else {
        return;
    };
    let what = format!("{}: poll of {part:?}", a.name);
    let verdict =
        ends::judge_current(&what, part, ws[&part], polled.current_offset).and_then(|()| {
            match last_returned {
                Some(last) if polled.current_offset < last => Err(violation(
                    INV_ENDS,
                    format!(
                        "{what}: current offset {} below the last offset it returned ({last})",
                        polled.current_offset
                    ),
                )),
                _ => Ok(()),
            }
        });
    judged(a, "PollCurrentOffset", verdict);
}

/// The admin's GetStats: the workload's partitions' messages within their windows; streams,
/// topics, partitions and groups as the model counts them (a scratch stream in doubt either
/// way).
pub(crate) async fn stats(a: &mut Actor) {
    let floors = lock(&a.world).oracle.floors();
    let begun = a.begin("get stats");
    let result = a.client().get_stats().await;
    let Some(ws) = answered(a, &begun, "get stats", &result, &floors) else {
        return;
    };
    let Ok(stats) = result else { return };
    let verdict = judge_stats(a, &stats, &ws);
    judged(a, "Stats", verdict);
}

fn judge_stats(
    a: &Actor,
    stats: &StatsResponse,
    ws: &Windows,
) -> Result<(), crate::report::Violation> {
    let (exists, doubt) = {
        let w = lock(&a.world);
        let states = w.oracle.streams.values();
        let exists = states
            .clone()
            .filter(|s| matches!(s, StreamState::Exists(_)))
            .count();
        let doubt = states
            .filter(|s| matches!(s, StreamState::InDoubt(_)))
            .count();
        // A rename in doubt holds two names in doubt and one stream that exists.
        let renames = w.oracle.renames_in_doubt().count();
        (exists + renames, doubt - 2 * renames)
    };
    let streams = (1 + exists) as u32..=(1 + exists + doubt) as u32;
    if !streams.contains(&stats.streams_count) {
        return Err(violation(INV_ENDS, format!("stats: {} streams, the model allows {streams:?} (the workload's, {exists} scratch acknowledged, {doubt} in doubt)", stats.streams_count)));
    }
    // The workload's topics, partitions and group, and what the scratch streams hold.
    let n = partitions(a);
    let topics = TOPICS.len() as u32;
    let [scratch_topics, scratch_partitions, scratch_groups] =
        lock(&a.world).oracle.scratch_counts();
    let shift = |r: &std::ops::RangeInclusive<u32>, by: u32| r.start() + by..=r.end() + by;
    let judged = [
        ("topics", stats.topics_count, shift(&scratch_topics, topics)),
        (
            "partitions",
            stats.partitions_count,
            shift(&scratch_partitions, topics * n),
        ),
        (
            "consumer groups",
            stats.consumer_groups_count,
            shift(&scratch_groups, 1),
        ),
    ];
    for (what, count, allowed) in judged {
        if !allowed.contains(&count) {
            return Err(violation(
                INV_ENDS,
                format!("stats: {count} {what}, the model allows {allowed:?} (the workload's and the scratch streams', acknowledged ..= with those in doubt)"),
            ));
        }
    }
    if stats.clients_count == 0 {
        return Err(violation(
            INV_ENDS,
            "stats: no clients, though the asking one is connected".into(),
        ));
    }
    ends::judge_total("stats", ws, ws.keys().copied(), stats.messages_count)
}

//! Consumer offsets through the partition groups (profile `messages`): the client stores or
//! deletes a consumer's offset in a random partition of a live topic through a random
//! member, which has the partition's group order it among the sends
//! (`Replicator::order_offset`). Offsets stored are at or below a message acknowledged in
//! that partition, so the group never refuses one.
//!
//! Judged after the final heal, once every replica of each partition holds the same
//! messages ([`super::messages`]):
//! - **agreement**: every replica holds the same offset for each consumer written to;
//! - **nothing lost**: that offset is the last acknowledged write's (or, with none, no
//!   offset), or one of a write whose answer never came (such a write may apply late, even
//!   after later ones).
//!
//! A write is modelled against the partition's incarnation (its nonce) the member's view
//! named before and after the call; where a purge moved it in between, the write is in
//! doubt in both.

use super::messages::{identity_of, partitions_of, topic_ids_owned, SEND_TIMEOUT};
use super::*;
use cairn_engine::error::NodeError;
use cairn_engine::node::Node;
use cairn_engine::partition::{ConsumerId, PartitionError};
use iggy_binary_protocol::WireConsumer;

pub const INV_OFFSETS_AGREE: &str = "replicas hold the same consumer offsets";
pub const INV_OFFSET_LOST: &str = "an acknowledged consumer offset is never lost";

/// Consumers the client writes offsets for (ids 1 to this).
const CONSUMERS: u32 = 3;
/// How long the final round waits for the replicas' offsets to agree.
const AGREE_LIMIT: Duration = Duration::from_secs(5);

/// A consumer's offset in one incarnation of a partition: topic `s/t`, partition, nonce,
/// consumer id.
type OffsetKey = (String, u32, u64, u32);

/// The client's model of the offsets it wrote.
#[derive(Debug, Default)]
pub(super) struct Offsets {
    /// The last acknowledged write of each key (`None`: deleted).
    acked: BTreeMap<OffsetKey, Option<u64>>,
    /// Writes never answered: each may apply at any time after it was asked.
    doubt: BTreeMap<OffsetKey, BTreeSet<Option<u64>>>,
}

impl Offsets {
    /// The values `key` may hold at the end.
    fn allowed(&self, key: &OffsetKey) -> BTreeSet<Option<u64>> {
        let mut allowed = self.doubt.get(key).cloned().unwrap_or_default();
        allowed.insert(self.acked.get(key).copied().flatten());
        allowed
    }
}

/// What one write was answered.
enum Answer {
    /// Applied (a delete that found none too).
    Applied,
    /// Refused for an offset past the partition's end.
    BeyondEnd(String),
    Doubt(String),
}

impl World {
    /// Stores (three times in four) or deletes a random consumer's offset in a random
    /// partition of topic `topic` through a random member.
    pub(super) async fn write_offset(&mut self, topic: &str) -> bool {
        let Some(at) = self.member_with_groups() else {
            return true;
        };
        let node = self.replicas[at].node.clone().expect("a node");
        let Some(partitions) = partitions_of(&node, topic) else {
            return true;
        };
        let p = partitions[self.rng.gen_range(0..partitions.len())];
        let Some(before) = identity_of(&node, topic, p) else {
            return true;
        };
        let acked_end = self.acked_end(topic, p, before.nonce);
        let consumer = self.rng.gen_range(1..=CONSUMERS);
        let offset = match acked_end {
            Some(end) if self.rng.gen_bool(0.75) => Some(self.rng.gen_range(0..end)),
            _ => None,
        };
        let id = self.replicas[at].id;
        let what = match offset {
            Some(o) => format!("store consumer {consumer}'s offset {o}"),
            None => format!("delete consumer {consumer}'s offset"),
        };
        let label = format!("{what} in {topic} partition {p} at replica {id}");
        let span = self.begin(CLIENT_LANE, label.clone());
        let write = ask(node.clone(), (topic.to_owned(), p), consumer, offset);
        let answer = self.while_nemesis(write, SEND_TIMEOUT).await;
        let answer = answer.unwrap_or_else(|| Answer::Doubt("timed out".into()));
        let after = identity_of(&node, topic, p).map(|i| i.nonce);
        let keys: Vec<OffsetKey> = [Some(before.nonce), after]
            .into_iter()
            .flatten()
            .collect::<BTreeSet<u64>>()
            .into_iter()
            .map(|nonce| (topic.to_owned(), p, nonce, consumer))
            .collect();
        match answer {
            Answer::Applied if keys.len() == 1 => {
                self.end(span, SpanOutcome::Ok);
                self.event(format!("{label}: applied"));
                self.offsets.acked.insert(keys[0].clone(), offset);
                self.decision("ClusterOffsetReplicated");
            }
            Answer::BeyondEnd(why) if keys.len() == 1 => {
                self.end(span, SpanOutcome::Refused(why.clone()));
                self.fail(
                    INV_OFFSET_LOST,
                    format!("{label}: refused ({why}), below a message acknowledged there"),
                );
            }
            Answer::Applied | Answer::BeyondEnd(_) | Answer::Doubt(_) => {
                let why = match answer {
                    Answer::Doubt(why) => why,
                    _ => "its partition was purged meanwhile".into(),
                };
                self.end(span, SpanOutcome::Lost(why.clone()));
                self.event(format!("{label}: in doubt ({why})"));
                for key in keys {
                    self.offsets.doubt.entry(key).or_default().insert(offset);
                }
            }
        }
        true
    }

    /// The offset after the last message acknowledged in `topic`'s partition `p` of nonce
    /// `nonce`, if any was.
    fn acked_end(&self, topic: &str, p: u32, nonce: u64) -> Option<u64> {
        let here = |(t, q, n, _): &&messages::Place| t == topic && *q == p && *n == nonce;
        let places = self.messages.acked.values();
        places.filter(here).map(|place| place.3 + 1).max()
    }

    /// After the final heal and the messages' judgement: every replica of each final
    /// partition holds the same offset for each consumer written to, and one the client may
    /// see (the module doc).
    pub(super) async fn judge_offsets(&mut self, finals: &[(String, u32, u64)]) {
        let keys: Vec<OffsetKey> = self
            .offsets
            .acked
            .keys()
            .chain(self.offsets.doubt.keys())
            .filter(|(t, p, n, _)| finals.contains(&(t.clone(), *p, *n)))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for key in keys {
            // The replicas of the members its partition is placed on.
            let nodes: Vec<(MemberId, Node)> = {
                let (topic, p, _, _) = &key;
                let node = self.replicas.iter().find_map(|r| r.node.clone());
                let identity = node.and_then(|n| identity_of(&n, topic, *p));
                let placed = identity.map(|i| self.placed_members(i));
                self.replicas
                    .iter()
                    .filter(|r| placed.as_ref().is_none_or(|on| on.contains(&r.id)))
                    .filter_map(|r| Some((r.id, r.node.clone()?)))
                    .collect()
            };
            let deadline = self.clock.now_nanos() + AGREE_LIMIT.as_nanos() as u64;
            let held = loop {
                let mut held = BTreeMap::new();
                for (id, node) in &nodes {
                    held.insert(*id, read_offset(node, &key).await);
                }
                let values: BTreeSet<&Result<Option<u64>, String>> = held.values().collect();
                if values.len() == 1 || self.clock.now_nanos() >= deadline {
                    break held;
                }
                cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(20)).await;
            };
            let values: BTreeSet<&Result<Option<u64>, String>> = held.values().collect();
            if values.len() != 1 {
                self.fail(INV_OFFSETS_AGREE, format!("{key:?}: {held:?}"));
                return;
            }
            let value = values.into_iter().next().expect("one value").clone();
            let allowed = self.offsets.allowed(&key);
            if !value.as_ref().is_ok_and(|v| allowed.contains(v)) {
                let acked = self.offsets.acked.get(&key);
                self.fail(
                    INV_OFFSET_LOST,
                    format!("{key:?}: every replica holds {value:?}; the last acknowledged write was {acked:?}, those in doubt {:?}", self.offsets.doubt.get(&key)),
                );
                return;
            }
            self.decision("ClusterOffsetsAgree");
        }
    }
}

/// Stores (`Some`) or deletes consumer `consumer`'s offset in `topic`'s partition `p`
/// through `node`.
async fn ask(node: Node, (topic, p): (String, u32), consumer: u32, offset: Option<u64>) -> Answer {
    let (stream, topic) = topic_ids_owned(&topic);
    let who = WireConsumer::consumer(WireIdentifier::numeric(consumer));
    let client = node.client(0x0ff5);
    let written = match offset {
        Some(o) => client.store_offset(&who, &stream, &topic, Some(p), o).await,
        None => client.delete_offset(&who, &stream, &topic, Some(p)).await,
    };
    match written {
        Ok(()) | Err(NodeError::OffsetNotFound(_)) => Answer::Applied,
        Err(e @ NodeError::Partition(PartitionError::OffsetBeyondEnd { .. })) => {
            Answer::BeyondEnd(e.to_string())
        }
        Err(e) => Answer::Doubt(e.to_string()),
    }
}

/// The offset `node`'s replica holds for `key`'s consumer (an error said in words; a
/// replica of another incarnation is an error too).
async fn read_offset(
    node: &Node,
    (topic, p, nonce, consumer): &OffsetKey,
) -> Result<Option<u64>, String> {
    let Some(identity) = identity_of(node, topic, *p).filter(|i| i.nonce == *nonce) else {
        return Err("another incarnation of the partition".into());
    };
    // This member's own copy, not what it serves (which may be another member's).
    let read = cairn_engine::node::ReadElsewhere::Offset(ConsumerId::consumer(*consumer));
    match node.read_here(identity, read).await {
        Ok(cairn_engine::node::ReadAnswer::Offset(held)) => Ok(held),
        Ok(other) => Err(format!("another answer: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

//! The client's ops, and the names they leave in the state.
//!
//! Without nodes, every op creates a stream `s{n}` (the machine keeps the state in memory).
//! Where nodes apply the commands, ops make and unmake what has directories and offsets, so
//! that a member adopting the leader's state has partitions to create, purge and remove:
//!
//! | op                       | label           | drawn                                  |
//! |--------------------------|-----------------|----------------------------------------|
//! | create stream `s{n}`     | `s{n}`          | every fourth op, or when none is live  |
//! | create topic `s/t{n}`    | `s/t{n}`        | 40%, in the newest live stream (persisted) |
//! | create group `s/t/g{n}`  | `s/t/g{n}`      | 15%, in a live topic                   |
//! | store a group's offset   | `@s/t/g`        | 8%, a live group, on one node          |
//! | delete group             | `-s/t/g`        | 8%, a live group                       |
//! | purge topic              | `~s/t`          | 8%, a live topic (new nonces)          |
//! | add a partition          | `+s/t`          | 8%, a live topic                       |
//! | delete topic             | `-s/t`          | 8%, a live topic                       |
//! | delete stream            | `-s`            | 5%, a live stream but the newest       |
//!
//! Where messages run (profile `messages`), first: 30% send one or two messages to a live
//! topic through a random member (`>s/t`), 10% poll a random partition of one at a random
//! member (`<s/t`), 8% store or delete a consumer's offset in one (`#s/t`);
//! [`super::messages`], [`super::offsets`].
//!
//! A draw that finds nothing to act on creates a topic. Every op's outcome is known before
//! the next is drawn (one in doubt is retried, under the same key, until it is), so the
//! live names are exact: an attempt given up on that lands later is answered with the first
//! outcome by the state machine's table of keys, never applied after the ops that followed.
//! A stored offset is no metadata op: one member's node sends a message to partition 0 of
//! the group's topic, joins the group and stores offset 0 there, and nothing else. Group ids
//! are reused, so the oracle holds that a live group never stored to holds no offset on any
//! node: none of a deleted group under its id survives its deletion, applied as an op or
//! within an adopted state.

use super::*;
use crate::wire::KIND_STRING;
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest,
};
use iggy_binary_protocol::requests::partitions::CreatePartitionsRequest;
use iggy_binary_protocol::requests::streams::DeleteStreamRequest;
use iggy_binary_protocol::requests::topics::{DeleteTopicRequest, PurgeTopicRequest};

/// One op of the client's, by the name it acts on: a stream `s{n}`, a topic `s{m}/t{n}`
/// or a group `s{m}/t{k}/g{n}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Op {
    Create(String),
    /// Deletes what the name names, and everything under it.
    Delete(String),
    /// Purges a topic: its partitions are replaced by empty ones of new nonces.
    Purge(String),
    /// Adds a partition to a topic.
    Grow(String),
    /// Stores an offset of a group on one member's node (no metadata op).
    Store(String),
    /// Sends messages to a topic through one member (profile `messages`; no metadata op).
    Send(String),
    /// Polls a partition of a topic at one member (profile `messages`; no metadata op).
    Poll(String),
    /// Stores or deletes a consumer's offset in a partition of a topic through one member
    /// (profile `messages`; no metadata op).
    Commit(String),
}

impl Op {
    /// How the client's model and the timeline name it.
    pub(super) fn label(&self) -> String {
        match self {
            Op::Create(name) => name.clone(),
            Op::Delete(name) => format!("-{name}"),
            Op::Purge(name) => format!("~{name}"),
            Op::Grow(name) => format!("+{name}"),
            Op::Store(name) => format!("@{name}"),
            Op::Send(name) => format!(">{name}"),
            Op::Poll(name) => format!("<{name}"),
            Op::Commit(name) => format!("#{name}"),
        }
    }

    /// The command that does it.
    pub(super) fn command(&self, factor: u8) -> MetaCommand {
        let op = match self {
            Op::Create(name) => creation(name, factor),
            Op::Delete(name) => deletion(name),
            Op::Purge(name) => {
                let (stream_id, topic_id) = topic_ids(name);
                MetaOp::PurgeTopic(PurgeTopicRequest {
                    stream_id,
                    topic_id,
                })
            }
            Op::Grow(name) => {
                let (stream_id, topic_id) = topic_ids(name);
                MetaOp::CreatePartitions(CreatePartitionsRequest {
                    stream_id,
                    topic_id,
                    partitions_count: 1,
                })
            }
            Op::Store(_) | Op::Send(_) | Op::Poll(_) | Op::Commit(_) => {
                unreachable!("stores, sends and polls are no metadata ops")
            }
        };
        MetaCommand {
            operation: op.operation().to_command_code().expect("a command"),
            body: op.body().to_vec(),
            timestamp: 0,
            user_id: 0,
            client: 0,
            request: 0,
            key: 0,
            asked_at: 0,
        }
    }
}

/// The creation of what `name` names (its last part's name; a topic gets 1 to 3 partitions).
fn creation(name: &str, factor: u8) -> MetaOp {
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        // `persisted`, offsets too: a stored offset (and the message under it) survives a
        // crash, so a deleted group's is there for its deletion to remove.
        [stream, topic] => MetaOp::CreateTopic(CreateTopicRequest {
            stream_id: named(stream),
            partitions_count: 1 + (name.len() % 3) as u32,
            name: WireName::new(*topic).expect("a topic name"),
            options: crate::wire::options(&topic_options(factor)),
        }),
        [stream, topic, group] => MetaOp::CreateConsumerGroup(CreateConsumerGroupRequest {
            stream_id: named(stream),
            topic_id: named(topic),
            name: WireName::new(*group).expect("a group name"),
        }),
        _ => MetaOp::CreateStream(CreateStreamRequest {
            name: WireName::new(name).expect("a stream name"),
            options: WireOptions::empty(),
        }),
    }
}

/// A topic's options: `persisted`, and the replication factor `factor` (none for 0).
fn topic_options(factor: u8) -> Vec<(&'static str, u8, Vec<u8>)> {
    let mut options = vec![
        ("durability", KIND_STRING, b"persisted".to_vec()),
        (
            "consumer_offset_durability",
            KIND_STRING,
            b"persisted".to_vec(),
        ),
    ];
    if factor > 0 {
        options.push(("replication_factor", crate::wire::KIND_UINT8, vec![factor]));
    }
    options
}

fn deletion(name: &str) -> MetaOp {
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        [stream, topic] => MetaOp::DeleteTopic(DeleteTopicRequest {
            stream_id: named(stream),
            topic_id: named(topic),
        }),
        [stream, topic, group] => MetaOp::DeleteConsumerGroup(DeleteConsumerGroupRequest {
            stream_id: named(stream),
            topic_id: named(topic),
            group_id: named(group),
        }),
        _ => MetaOp::DeleteStream(DeleteStreamRequest {
            stream_id: named(name),
        }),
    }
}

fn named(name: &str) -> WireIdentifier {
    WireIdentifier::named(name).expect("a name")
}

fn topic_ids(name: &str) -> (WireIdentifier, WireIdentifier) {
    let (stream, topic) = name.split_once('/').expect("a topic's name");
    (named(stream), named(topic))
}

/// Stream, topic and group of a group's name `s/t/g`.
pub(super) fn group_ids(name: &str) -> (WireIdentifier, WireIdentifier, WireIdentifier) {
    let (topic, group) = name.rsplit_once('/').expect("a group's name");
    let (stream, topic) = topic_ids(topic);
    (stream, topic, named(group))
}

/// How a group is named as a consumer.
pub(super) fn group_consumer(group: WireIdentifier) -> iggy_binary_protocol::WireConsumer {
    iggy_binary_protocol::WireConsumer {
        kind: iggy_binary_protocol::KIND_CONSUMER_GROUP,
        id: group,
    }
}

/// How deep a name is: 0 a stream, 1 a topic, 2 a group.
fn depth(name: &str) -> usize {
    name.matches('/').count()
}

/// Whether `name` is `under` or inside it.
pub(super) fn within(name: &str, under: &str) -> bool {
    name == under
        || name
            .strip_prefix(under)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The client's op number `n`, drawn from the live names (name → the index its creation
/// was acknowledged at).
pub(super) fn draw(
    n: usize,
    (nodes, messages): (bool, bool),
    live: &BTreeMap<String, u64>,
    rng: &mut ChaCha8Rng,
) -> Op {
    let at = |d: usize| -> Vec<&String> { live.keys().filter(|k| depth(k) == d).collect() };
    let (streams, topics, groups) = (at(0), at(1), at(2));
    // Where messages run, two ops in five send or poll (drawn only then: the other
    // profiles' draws stay what they were).
    if messages && !topics.is_empty() {
        let topic = topics[rng.gen_range(0..topics.len())].clone();
        match rng.gen_range(0..100) {
            0..30 => return Op::Send(topic),
            30..40 => return Op::Poll(topic),
            40..48 => return Op::Commit(topic),
            _ => {}
        }
    }
    let newest = streams.iter().max_by_key(|s| live[s.as_str()]).copied();
    let Some(newest) = newest.filter(|_| nodes && !n.is_multiple_of(4)) else {
        return Op::Create(format!("s{n}"));
    };
    let pick = |rng: &mut ChaCha8Rng, of: &[&String]| of[rng.gen_range(0..of.len())].clone();
    let roll = rng.gen_range(0..100);
    let older: Vec<&String> = streams.iter().copied().filter(|s| *s != newest).collect();
    match roll {
        40..55 if !topics.is_empty() => Op::Create(format!("{}/g{n}", pick(rng, &topics))),
        55..63 if !groups.is_empty() => Op::Store(pick(rng, &groups)),
        63..71 if !groups.is_empty() => Op::Delete(pick(rng, &groups)),
        71..79 if !topics.is_empty() => Op::Purge(pick(rng, &topics)),
        79..87 if !topics.is_empty() => Op::Grow(pick(rng, &topics)),
        87..95 if !topics.is_empty() => Op::Delete(pick(rng, &topics)),
        95..100 if !older.is_empty() => Op::Delete(pick(rng, &older)),
        _ => Op::Create(format!("{newest}/t{n}")),
    }
}

impl World {
    /// An op's outcome is known applied: the live names follow it.
    pub(super) fn applied(&mut self, op: &Op, index: u64) {
        self.acknowledged += 1;
        match op {
            Op::Create(name) => {
                self.acked.insert(name.clone(), index);
            }
            Op::Delete(name) => self.acked.retain(|live, _| !within(live, name)),
            Op::Purge(_)
            | Op::Grow(_)
            | Op::Store(_)
            | Op::Send(_)
            | Op::Poll(_)
            | Op::Commit(_) => {}
        }
    }

    /// Stores offset 0 of group `name` in partition 0 of its topic on a random up member's
    /// node, as a member of the group (a message sent there first). The group counts as
    /// stored to whatever the outcome: a node behind may not know the group yet. True: it
    /// was tried.
    pub(super) async fn store_offset(&mut self, name: &str) -> bool {
        let up: Vec<usize> = self
            .up()
            .into_iter()
            .filter(|&at| self.replicas[at].node.is_some())
            .collect();
        match up.is_empty() {
            true => {
                self.stored.insert(name.to_owned());
            }
            false => {
                let at = up[self.rng.gen_range(0..up.len())];
                self.store_offset_on(at, name).await;
            }
        }
        true
    }

    /// [`World::store_offset`] on replica `at`'s node (up, with a node), once it applied
    /// what the leader had (so that it knows the group).
    pub(super) async fn store_offset_on(&mut self, at: usize, name: &str) {
        let node = self.replicas[at].node.clone().expect("a node");
        if let Some(group) = self.replicas[at].group.clone() {
            let barrier = async move { group.read_barrier().await };
            if !matches!(
                self.while_nemesis(barrier, PROPOSE_TIMEOUT).await,
                Some(Ok(()))
            ) {
                return;
            }
        }
        // Tried from here on: a store that failed or timed out may have landed.
        self.stored.insert(name.to_owned());
        let (stream, topic, group) = group_ids(name);
        let client = node.client(0x5707e);
        // A message like any other the client sends (in doubt: the store may fail after it).
        let payload = self.new_message();
        let store = async move {
            let mut batch = cairn_engine::format::BatchBuilder::new(0);
            batch.push(1, 0, payload.as_bytes(), b"");
            let partition = iggy_binary_protocol::WirePartitioning::PartitionId(0);
            client
                .send(&stream, &topic, &partition, batch.build())
                .await?;
            client.join_group(&stream, &topic, &group).await?;
            let consumer = group_consumer(group);
            client
                .store_offset(&consumer, &stream, &topic, Some(0), 0)
                .await
        };
        let id = self.replicas[at].id;
        match self.while_nemesis(store, PROPOSE_TIMEOUT).await {
            Some(Ok(())) => self.event(format!("@{name} stored on replica {id}")),
            Some(Err(e)) => self.event(format!("@{name} not stored on replica {id}: {e}")),
            None => self.event(format!("@{name} on replica {id} timed out")),
        }
    }

    /// Whether `name`, acknowledged live, may be missing: an op in doubt deletes it or what
    /// it is in.
    pub(super) fn may_be_gone(&self, name: &str) -> bool {
        self.in_doubt.iter().any(|label| {
            label
                .strip_prefix('-')
                .is_some_and(|deleted| within(name, deleted))
        })
    }

    /// Whether `name`, found in a state, was asked for and not deleted since: live, or
    /// created by an op in doubt.
    pub(super) fn may_be_held(&self, name: &str) -> bool {
        self.acked.contains_key(name) || self.in_doubt.contains(name)
    }
}

//! What adopting another state costs: the directory work and the effects that take a node
//! from the state it holds to one a cluster's leader sent it whole (a member too far behind
//! for the leader's log catches up by a snapshot, not op by op).
//!
//! The work is the same vocabulary as an op's ([`DirWork`]), so the metadata owner does it
//! and boot redoes it as it does an op's: every item can be done again after a crash. The
//! table, by entity found in `before` and `after`:
//!
//! | entity | before | after | work | effect |
//! |---|---|---|---|---|
//! | stream | yes | no | `RemoveStream` with every partition it held | `StreamDeleted` |
//! | topic (its stream kept) | yes | no | `RemoveTopic` with every partition it held | `TopicDeleted` |
//! | partition (its topic kept) | yes | no | `RemovePartition` | |
//! | partition | nonce n | nonce m ≠ n | `PurgePartition` (m replaces n) | |
//! | partition | no | yes | `CreatePartition` | |
//! | topic (kept) | p partitions | q ≠ p | | `TopicResized` |
//! | group (its topic kept) | yes | no, or created by another op | `RemoveGroupOffsets` in each partition kept | `GroupDeleted` |
//! | group | no, or created by another op | yes | | `GroupCreated` |
//! | user | yes | no, or created by another op | | `UserDeleted` |
//! | user | kept | changed | | `UserChanged` |
//!
//! Removals come first, then purges and offset removals, then creations: a partition
//! directory is never created where a removal still has to look.

use super::{DirWork, Effect, MetaState, Topic};
use crate::partition::PartitionIdentity;

/// The work and effects of adopting `after` in place of `before`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Adoption {
    pub work: Vec<DirWork>,
    pub effects: Vec<Effect>,
}

/// What taking a node from `before` to `after` needs (see the module's table).
pub fn adoption(before: &MetaState, after: &MetaState) -> Adoption {
    let mut removals = Vec::new();
    let mut changes = Vec::new();
    let mut creations = Vec::new();
    let mut effects = Vec::new();
    for (&s, stream) in before.streams() {
        let Some(kept) = after.stream(s) else {
            removals.push(DirWork::RemoveStream {
                stream: s,
                partitions: stream
                    .topics
                    .values()
                    .flat_map(|topic| identities(s, topic))
                    .collect(),
            });
            effects.push(Effect::StreamDeleted { stream: s });
            continue;
        };
        for (&t, topic) in &stream.topics {
            if !kept.topics.contains_key(&t) {
                removals.push(DirWork::RemoveTopic {
                    stream: s,
                    topic: t,
                    partitions: identities(s, topic),
                });
                effects.push(Effect::TopicDeleted {
                    stream: s,
                    topic: t,
                });
            }
        }
    }
    for (&s, stream) in after.streams() {
        for (&t, topic) in &stream.topics {
            let old = before.find_topic(s, t);
            topic_changes(s, old, topic, &mut removals, &mut changes, &mut creations);
            group_changes(s, old, topic, &mut changes, &mut effects);
        }
    }
    for (&u, user) in before.users() {
        match after.user(u) {
            Some(kept) if kept.created_op == user.created_op => {
                if kept != user {
                    effects.push(Effect::UserChanged { user: u });
                }
            }
            _ => effects.push(Effect::UserDeleted {
                user: u,
                incarnation: user.created_op,
            }),
        }
    }
    let mut work = removals;
    work.extend(changes);
    work.extend(creations);
    Adoption { work, effects }
}

/// The partitions of a topic kept (or new) in `after`, against the same topic in `before`.
fn topic_changes(
    s: u32,
    old: Option<&Topic>,
    topic: &Topic,
    removals: &mut Vec<DirWork>,
    changes: &mut Vec<DirWork>,
    creations: &mut Vec<DirWork>,
) {
    let new = identities(s, topic);
    let old = old.map(|o| identities(s, o)).unwrap_or_default();
    for gone in old.iter().filter(|o| !new.iter().any(|n| same_key(n, o))) {
        removals.push(DirWork::RemovePartition(*gone));
    }
    for identity in &new {
        match old.iter().find(|o| same_key(o, identity)) {
            None => creations.push(DirWork::CreatePartition(*identity)),
            Some(o) if o.nonce != identity.nonce => changes.push(DirWork::PurgePartition {
                identity: *identity,
                replaces: o.nonce,
            }),
            Some(_) => {}
        }
    }
}

/// The groups of a topic kept (or new) in `after`, against the same topic in `before`.
fn group_changes(
    s: u32,
    old: Option<&Topic>,
    topic: &Topic,
    changes: &mut Vec<DirWork>,
    effects: &mut Vec<Effect>,
) {
    let t = topic.id;
    let Some(old) = old else {
        for group in topic.groups.values() {
            effects.push(Effect::GroupCreated {
                group: (s, t, group.id),
                incarnation: group.created_op,
            });
        }
        return;
    };
    if old.partitions.len() != topic.partitions.len() {
        effects.push(Effect::TopicResized {
            stream: s,
            topic: t,
            partitions: topic.partitions.len() as u32,
        });
    }
    // Partitions whose stored offsets survive the adoption: those it neither creates nor
    // purges.
    let kept: Vec<u32> = topic
        .partitions
        .values()
        .filter(|p| {
            old.partitions
                .get(&p.id)
                .is_some_and(|o| o.nonce == p.nonce)
        })
        .map(|p| p.id)
        .collect();
    for (&g, group) in &old.groups {
        let same = topic
            .groups
            .get(&g)
            .is_some_and(|n| n.created_op == group.created_op);
        if !same {
            for &p in &kept {
                changes.push(DirWork::RemoveGroupOffsets {
                    partition: (s, t, p),
                    group: g,
                });
            }
            effects.push(Effect::GroupDeleted {
                group: (s, t, g),
                incarnation: group.created_op,
            });
        }
    }
    for (&g, group) in &topic.groups {
        let same = old
            .groups
            .get(&g)
            .is_some_and(|o| o.created_op == group.created_op);
        if !same {
            effects.push(Effect::GroupCreated {
                group: (s, t, g),
                incarnation: group.created_op,
            });
        }
    }
}

/// The identities of topic `topic` of stream `s`'s partitions.
fn identities(s: u32, topic: &Topic) -> Vec<PartitionIdentity> {
    topic
        .partitions
        .values()
        .map(|p| PartitionIdentity {
            stream_id: s,
            topic_id: topic.id,
            partition_id: p.id,
            nonce: p.nonce,
        })
        .collect()
}

fn same_key(a: &PartitionIdentity, b: &PartitionIdentity) -> bool {
    (a.stream_id, a.topic_id, a.partition_id) == (b.stream_id, b.topic_id, b.partition_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ops::MetaOp;
    use crate::state::OpContext;
    use iggy_binary_protocol::requests::consumer_groups::{
        CreateConsumerGroupRequest, DeleteConsumerGroupRequest,
    };
    use iggy_binary_protocol::requests::partitions::{
        CreatePartitionsRequest, DeletePartitionsRequest,
    };
    use iggy_binary_protocol::requests::streams::{CreateStreamRequest, DeleteStreamRequest};
    use iggy_binary_protocol::requests::topics::{
        CreateTopicRequest, DeleteTopicRequest, PurgeTopicRequest,
    };
    use iggy_binary_protocol::{WireIdentifier, WireName, WireOptions};
    use std::collections::BTreeSet;

    fn ctx(op: u64) -> OpContext {
        OpContext {
            op,
            timestamp: 1,
            cluster: 7,
            decided: 0,
            proposal: 0,
            asked_at: 0,
        }
    }

    /// One of a few ops on streams 0..2, topics 0..2, drawn from `r`.
    fn op(r: u64) -> MetaOp {
        let id = |n: u64| WireIdentifier::numeric((n % 2) as u32);
        let name = |n: u64| WireName::new(format!("n{}", n % 2)).unwrap();
        let (s, t) = (id(r >> 8), id(r >> 9));
        match r % 9 {
            0 => MetaOp::CreateStream(CreateStreamRequest {
                name: name(r >> 8),
                options: WireOptions::empty(),
            }),
            1 => MetaOp::DeleteStream(DeleteStreamRequest { stream_id: s }),
            2 | 3 => MetaOp::CreateTopic(CreateTopicRequest {
                stream_id: s,
                partitions_count: 1 + (r >> 10) as u32 % 3,
                name: name(r >> 9),
                options: WireOptions::empty(),
            }),
            4 => MetaOp::DeleteTopic(DeleteTopicRequest {
                stream_id: s,
                topic_id: t,
            }),
            5 => MetaOp::PurgeTopic(PurgeTopicRequest {
                stream_id: s,
                topic_id: t,
            }),
            6 => MetaOp::CreatePartitions(CreatePartitionsRequest {
                stream_id: s,
                topic_id: t,
                partitions_count: 1 + (r >> 10) as u32 % 2,
            }),
            7 => MetaOp::DeletePartitions(DeletePartitionsRequest {
                stream_id: s,
                topic_id: t,
                partitions_count: 1,
            }),
            _ if r & (1 << 12) == 0 => MetaOp::CreateConsumerGroup(CreateConsumerGroupRequest {
                stream_id: s,
                topic_id: t,
                name: name(r >> 10),
            }),
            _ => MetaOp::DeleteConsumerGroup(DeleteConsumerGroupRequest {
                stream_id: s,
                topic_id: t,
                group_id: id(r >> 10),
            }),
        }
    }

    /// The states after each of `count` ops drawn from `seed` (refused ones change nothing).
    fn history(seed: u64, count: u64) -> Vec<MetaState> {
        let mut state = MetaState::default();
        let mut states = vec![state.clone()];
        let mut r = seed;
        for number in 1..=count {
            r = r
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let _ = state.apply(&op(r >> 16), ctx(number));
            states.push(state.clone());
        }
        states
    }

    /// The partitions a node holds after doing `work` on a node that held `held`; panics
    /// when an item removes or replaces a partition the node does not hold, or creates one
    /// it holds already.
    fn carried_out(held: Vec<PartitionIdentity>, work: &[DirWork]) -> BTreeSet<PartitionIdentity> {
        let mut held: BTreeSet<_> = held.into_iter().collect();
        for w in work {
            match w {
                DirWork::CreatePartition(id) => {
                    assert!(!held.iter().any(|h| same_key(h, id)), "{id} created once")
                }
                DirWork::PurgePartition { identity, replaces } => {
                    let old = PartitionIdentity {
                        nonce: *replaces,
                        ..*identity
                    };
                    assert!(held.remove(&old), "{old} purged while held");
                }
                DirWork::RemoveGroupOffsets { partition, .. } => {
                    let key = |h: &PartitionIdentity| (h.stream_id, h.topic_id, h.partition_id);
                    assert!(
                        held.iter().any(|h| key(h) == *partition),
                        "offsets of a held partition"
                    );
                }
                _ => {}
            }
            for id in w.identities() {
                if !matches!(
                    w,
                    DirWork::CreatePartition(_) | DirWork::PurgePartition { .. }
                ) {
                    assert!(held.remove(&id), "{id} removed while held");
                }
            }
            match w {
                DirWork::CreatePartition(id) | DirWork::PurgePartition { identity: id, .. } => {
                    held.insert(*id);
                }
                _ => {}
            }
        }
        held
    }

    #[test]
    fn adopting_a_state_leaves_exactly_its_partitions_and_nothing_for_the_same_state() {
        let mut purged = 0;
        for seed in 0..200 {
            let states = history(seed, 40);
            for (i, before) in states.iter().enumerate().step_by(7) {
                for after in states.iter().skip(i) {
                    let adoption = adoption(before, after);
                    purged += adoption
                        .work
                        .iter()
                        .filter(|w| matches!(w, DirWork::PurgePartition { .. }))
                        .count();
                    let held = carried_out(before.partitions(), &adoption.work);
                    let expected: BTreeSet<_> = after.partitions().into_iter().collect();
                    assert_eq!(
                        held, expected,
                        "seed {seed}: the adopted state's partitions"
                    );
                    if before == after {
                        assert_eq!(adoption, Adoption::default(), "nothing to adopt");
                    }
                }
            }
        }
        assert!(purged > 100, "the histories purge partitions: {purged}");
    }

    #[test]
    fn a_group_deleted_or_created_again_loses_its_offsets_where_partitions_survive() {
        let (s0, t0) = (WireIdentifier::numeric(0), WireIdentifier::numeric(0));
        let group = || {
            MetaOp::CreateConsumerGroup(CreateConsumerGroupRequest {
                stream_id: s0.clone(),
                topic_id: t0.clone(),
                name: WireName::new("g").unwrap(),
            })
        };
        let ops = [
            MetaOp::CreateStream(CreateStreamRequest {
                name: WireName::new("s").unwrap(),
                options: WireOptions::empty(),
            }),
            MetaOp::CreateTopic(CreateTopicRequest {
                stream_id: s0.clone(),
                partitions_count: 2,
                name: WireName::new("t").unwrap(),
                options: WireOptions::empty(),
            }),
            group(),
        ];
        let mut before = MetaState::default();
        for (number, o) in (1..).zip(&ops) {
            before.apply(o, ctx(number)).unwrap();
        }
        let mut after = before.clone();
        let delete = MetaOp::DeleteConsumerGroup(DeleteConsumerGroupRequest {
            stream_id: s0.clone(),
            topic_id: t0.clone(),
            group_id: WireIdentifier::numeric(0),
        });
        after.apply(&delete, ctx(4)).unwrap();
        after.apply(&group(), ctx(5)).unwrap();
        let adoption = adoption(&before, &after);
        let removed: Vec<_> = adoption
            .work
            .iter()
            .filter(|w| matches!(w, DirWork::RemoveGroupOffsets { group: 0, .. }))
            .collect();
        assert_eq!(removed.len(), 2, "one per partition: {adoption:?}");
        for (incarnation, effect) in [(3, "deleted"), (5, "created")] {
            let wanted = match effect {
                "deleted" => Effect::GroupDeleted {
                    group: (0, 0, 0),
                    incarnation,
                },
                _ => Effect::GroupCreated {
                    group: (0, 0, 0),
                    incarnation,
                },
            };
            assert!(adoption.effects.contains(&wanted), "{adoption:?}");
        }
    }
}

//! Consumer group membership: which client sessions belong to which group, and which of the
//! topic's partitions each member reads. Volatile by design: a member is a live client
//! session, so membership does not outlive the process (clients rejoin after a restart, as
//! Iggy's SDK does on `ConsumerGroupMemberNotFound`); the groups themselves are metadata.
//!
//! Assignment: members in client-id order, partition `p` to member `p mod n`. A join, a
//! leave and a change of the topic's partition count rebalance that one group and bump its
//! generation; nothing else does. Group ids are reused, so a membership is bound to the
//! group's incarnation (the op that created it): the deletion of an older incarnation never
//! touches the members of a newer one.
//!
//! Every member remembers the partition its last poll read: a group consumer that stores or
//! reads an offset without naming a partition means that one, as in Iggy.

use super::view::ViewCell;
use crate::env::chan::{Receiver, Reply};
use crate::error::{Capacity, NodeError, NodeResult};
use crate::state::{Effect, GroupKey};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The most members one group holds.
pub const MAX_MEMBERS: usize = 4096;
/// The most memberships (client, group) the node holds in all.
pub const MAX_MEMBERSHIPS: usize = 1 << 16;
const _: () = assert!(
    0 < MAX_MEMBERS && MAX_MEMBERS <= MAX_MEMBERSHIPS,
    "a full group fits the node's memberships"
);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    pub partitions: Vec<u32>,
    /// Where the member's next round-robin poll starts among its partitions.
    pub cursor: usize,
    /// The partition its last poll read (cleared by a rebalance that took it away).
    pub current: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    /// The group incarnation (op that created it) these members joined.
    pub incarnation: u64,
    pub members: BTreeMap<u128, Member>,
    pub generation: u64,
    /// The partition count assignments were made for.
    pub partitions: u32,
}

/// Why a membership change was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    GroupFull,
    NodeFull,
    NotAMember,
}

pub use super::recorder::RebalanceCause;

#[derive(Debug, Default)]
pub struct Membership {
    groups: BTreeMap<GroupKey, Members>,
    /// The groups each client is a member of (disconnects touch only these).
    by_client: BTreeMap<u128, BTreeSet<GroupKey>>,
    total: usize,
    /// Rebalances since this membership was made, by [`RebalanceCause::index`].
    rebalances: [u64; RebalanceCause::NAMES.len()],
}

impl Membership {
    pub fn get(&self, key: GroupKey) -> Option<&Members> {
        self.groups.get(&key)
    }

    #[cfg(test)]
    pub fn total(&self) -> usize {
        self.total
    }

    /// Rebalances since this membership was made, by cause.
    pub fn rebalances(&self, cause: RebalanceCause) -> u64 {
        self.rebalances[cause.index()]
    }

    fn rebalanced(&mut self, cause: RebalanceCause) {
        self.rebalances[cause.index()] += 1;
    }

    /// The members of `key` if they joined incarnation `incarnation`; a stale entry (an
    /// older incarnation the effect has not yet removed) counts as none.
    fn current(&mut self, key: GroupKey, incarnation: u64) -> Option<&mut Members> {
        self.groups
            .get_mut(&key)
            .filter(|g| g.incarnation == incarnation)
    }

    /// Adds `client` to incarnation `incarnation` of the group (a no-op for a member).
    pub fn join(
        &mut self,
        key: GroupKey,
        incarnation: u64,
        client: u128,
        partitions: u32,
    ) -> Result<(), Refused> {
        if self.current(key, incarnation).is_none() {
            self.forget(key);
        }
        let full = self.total >= MAX_MEMBERSHIPS;
        let group = self.groups.entry(key).or_insert_with(|| Members {
            incarnation,
            ..Members::default()
        });
        if group.members.contains_key(&client) {
            return Ok(());
        }
        if group.members.len() >= MAX_MEMBERS {
            return Err(Refused::GroupFull);
        }
        if full {
            return Err(Refused::NodeFull);
        }
        group.members.insert(client, Member::default());
        rebalance(group, partitions);
        debug_assert!(
            group.members.len() <= MAX_MEMBERS,
            "a group within its bound"
        );
        self.rebalanced(RebalanceCause::Join);
        self.by_client.entry(client).or_default().insert(key);
        self.total += 1;
        debug_assert!(
            self.total <= MAX_MEMBERSHIPS,
            "the node's memberships within their bound"
        );
        Ok(())
    }

    /// Removes `client` from the group.
    pub fn leave(&mut self, key: GroupKey, incarnation: u64, client: u128) -> Result<(), Refused> {
        let group = self.current(key, incarnation).ok_or(Refused::NotAMember)?;
        if group.members.remove(&client).is_none() {
            return Err(Refused::NotAMember);
        }
        let partitions = group.partitions;
        rebalance(group, partitions);
        self.rebalanced(RebalanceCause::Leave);
        self.unlink(client, key);
        Ok(())
    }

    /// A client session ended: it leaves every group it was in, releasing its partitions.
    pub fn disconnect(&mut self, client: u128) -> usize {
        let keys = self.by_client.remove(&client).unwrap_or_default();
        debug_assert!(
            keys.len() <= self.total,
            "every membership indexed by client is counted"
        );
        for key in &keys {
            let group = self.groups.get_mut(key).expect("indexed by client");
            group.members.remove(&client);
            let partitions = group.partitions;
            rebalance(group, partitions);
            self.rebalanced(RebalanceCause::Disconnect);
            self.total -= 1;
        }
        keys.len()
    }

    /// Applies one effect of a metadata operation.
    pub fn apply(&mut self, effect: &Effect) {
        match *effect {
            Effect::GroupDeleted { group, incarnation } => {
                if self
                    .groups
                    .get(&group)
                    .is_some_and(|g| g.incarnation == incarnation)
                {
                    self.forget(group);
                }
            }
            Effect::TopicResized {
                stream,
                topic,
                partitions,
            } => {
                for ((s, t, _), group) in self.groups.iter_mut() {
                    if (*s, *t) == (stream, topic) && group.partitions != partitions {
                        rebalance(group, partitions);
                        // A group nobody is in has no assignment to change.
                        if !group.members.is_empty() {
                            self.rebalances[RebalanceCause::TopicResized.index()] += 1;
                        }
                    }
                }
            }
            Effect::TopicDeleted { stream, topic } => {
                let doomed: Vec<GroupKey> = self
                    .groups
                    .keys()
                    .filter(|(s, t, _)| (*s, *t) == (stream, topic))
                    .copied()
                    .collect();
                doomed.into_iter().for_each(|k| self.forget(k));
            }
            Effect::StreamDeleted { stream } => {
                let doomed: Vec<GroupKey> = self
                    .groups
                    .keys()
                    .filter(|(s, _, _)| *s == stream)
                    .copied()
                    .collect();
                doomed.into_iter().for_each(|k| self.forget(k));
            }
            Effect::GroupCreated { .. }
            | Effect::UserDeleted { .. }
            | Effect::UserChanged { .. } => {}
        }
    }

    /// Drops a group's memberships.
    fn forget(&mut self, key: GroupKey) {
        let Some(group) = self.groups.remove(&key) else {
            return;
        };
        for client in group.members.keys() {
            self.unlink(*client, key);
        }
    }

    fn unlink(&mut self, client: u128, key: GroupKey) {
        if let Some(keys) = self.by_client.get_mut(&client) {
            if keys.remove(&key) {
                self.total -= 1;
            }
            if keys.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }

    /// The next partition `client` reads in round-robin (which becomes its current one);
    /// `None` if it holds none.
    pub fn next_partition(
        &mut self,
        key: GroupKey,
        incarnation: u64,
        client: u128,
    ) -> Result<Option<u32>, Refused> {
        let group = self.current(key, incarnation).ok_or(Refused::NotAMember)?;
        let count = group.partitions;
        let member = group.members.get_mut(&client).ok_or(Refused::NotAMember)?;
        if member.partitions.is_empty() {
            return Ok(None);
        }
        let partition = member.partitions[member.cursor % member.partitions.len()];
        debug_assert!(
            partition < count,
            "a member holds only its topic's partitions"
        );
        member.cursor = (member.cursor + 1) % member.partitions.len();
        member.current = Some(partition);
        Ok(Some(partition))
    }

    /// A member polled `partition` by name (it must own it); it becomes its current one.
    pub fn polled(
        &mut self,
        key: GroupKey,
        incarnation: u64,
        client: u128,
        partition: u32,
    ) -> Result<bool, Refused> {
        let member = self
            .current(key, incarnation)
            .and_then(|g| g.members.get_mut(&client))
            .ok_or(Refused::NotAMember)?;
        if !member.partitions.contains(&partition) {
            return Ok(false);
        }
        member.current = Some(partition);
        Ok(true)
    }

    /// The partition a member's offset calls without a partition id mean: the one its last
    /// poll read, if it still owns it.
    pub fn current_partition(
        &mut self,
        key: GroupKey,
        incarnation: u64,
        client: u128,
    ) -> Result<Option<u32>, Refused> {
        let member = self
            .current(key, incarnation)
            .and_then(|g| g.members.get(&client).cloned())
            .ok_or(Refused::NotAMember)?;
        Ok(member.current)
    }

    /// Every group's assignment covers its partitions exactly once (when it has members),
    /// and the client index agrees with the groups.
    pub fn check(&self) {
        let mut total = 0;
        for (key, group) in &self.groups {
            let mut owned: Vec<u32> = group
                .members
                .values()
                .flat_map(|m| m.partitions.iter().copied())
                .collect();
            owned.sort_unstable();
            let expected: Vec<u32> = if group.members.is_empty() {
                Vec::new()
            } else {
                (0..group.partitions).collect()
            };
            assert_eq!(
                owned, expected,
                "group {key:?}: every partition has one owner"
            );
            for client in group.members.keys() {
                assert!(
                    self.by_client.get(client).is_some_and(|k| k.contains(key)),
                    "membership of {client:#x} in {key:?} is indexed"
                );
            }
            total += group.members.len();
        }
        assert_eq!(total, self.total, "the membership count is every member");
    }

    /// Against the state every effect up to its op was applied from: each group with members
    /// is an incarnation the state has, and its assignment covers its topic's partitions.
    pub fn check_against(&self, state: &crate::state::MetaState) {
        for (&(s, t, g), group) in &self.groups {
            if group.members.is_empty() {
                continue;
            }
            let topic = state.find_topic(s, t);
            let created = topic
                .and_then(|topic| topic.groups.get(&g))
                .map(|g| g.created_op);
            assert_eq!(
                created,
                Some(group.incarnation),
                "members of group {:?} joined an incarnation the state has",
                (s, t, g)
            );
            let partitions = topic.map_or(0, |topic| topic.partitions.len() as u32);
            assert_eq!(
                group.partitions,
                partitions,
                "group {:?}'s assignment covers its topic's partitions",
                (s, t, g)
            );
        }
    }
}

fn rebalance(group: &mut Members, partitions: u32) {
    group.generation += 1;
    group.partitions = partitions;
    for member in group.members.values_mut() {
        member.partitions.clear();
        member.cursor = 0;
    }
    let n = group.members.len();
    if n > 0 {
        let clients: Vec<u128> = group.members.keys().copied().collect();
        for p in 0..partitions {
            let owner = clients[p as usize % n];
            group
                .members
                .get_mut(&owner)
                .expect("listed")
                .partitions
                .push(p);
        }
    }
    for member in group.members.values_mut() {
        if member
            .current
            .is_some_and(|c| !member.partitions.contains(&c))
        {
            member.current = None;
        }
    }
    let assigned: usize = group.members.values().map(|m| m.partitions.len()).sum();
    assert_eq!(
        assigned,
        if n == 0 { 0 } else { partitions as usize },
        "every partition has one owner"
    );
}

// The groups owner --------------------------------------------------------------------------

/// Every member of a group and the partitions it holds.
pub type MemberList = Vec<(u128, Vec<u32>)>;

/// A group named by its ids, resolved against the view by the caller.
pub(crate) enum GroupRequest {
    Join {
        key: GroupKey,
        client: u128,
        reply: Reply<NodeResult<()>>,
    },
    Leave {
        key: GroupKey,
        client: u128,
        reply: Reply<NodeResult<()>>,
    },
    Disconnect {
        client: u128,
        reply: Reply<usize>,
    },
    /// Which partition a member's poll reads: the named one (it must own it), or the next
    /// of its partitions in round-robin. Either becomes its current partition.
    Poll {
        key: GroupKey,
        client: u128,
        partition: Option<u32>,
        reply: Reply<NodeResult<Option<u32>>>,
    },
    /// The partition a member's offset call without a partition id means.
    Current {
        key: GroupKey,
        client: u128,
        reply: Reply<NodeResult<u32>>,
    },
    Assignment {
        key: GroupKey,
        client: u128,
        reply: Reply<NodeResult<(u64, Vec<u32>)>>,
    },
    Members {
        key: GroupKey,
        reply: Reply<NodeResult<MemberList>>,
    },
    /// A metadata batch's effects, in op order; `at_op` is the batch's last op.
    Effects {
        effects: Vec<Effect>,
        at_op: u64,
    },
}

/// The owner of every membership. Pure memory: it never touches the disk.
pub(crate) struct GroupsOwner {
    pub(crate) membership: Membership,
    pub(crate) view: Arc<ViewCell>,
    pub(crate) recorder: Arc<super::recorder::Recorder>,
}

impl GroupsOwner {
    pub(crate) async fn run(mut self, mut inbox: Receiver<GroupRequest>) {
        while let Some(request) = inbox.recv().await {
            self.handle(request);
            self.publish_rebalances();
        }
    }

    /// Copies the membership's rebalance counts where a scrape reads them.
    fn publish_rebalances(&self) {
        for (i, count) in self.membership.rebalances.iter().enumerate() {
            self.recorder.rebalances.set(i, *count);
        }
    }

    /// The group's incarnation and its topic's partition count, from the view.
    fn resolve(&self, (s, t, g): GroupKey) -> NodeResult<(u64, u32)> {
        let view = self.view.load();
        let topic = view.find_topic(s, t).ok_or(NodeError::TopicNotFound {
            stream: s,
            topic: crate::error::Named::Id(t),
        })?;
        let group = topic.groups.get(&g).ok_or(NodeError::GroupNotFound {
            stream: s,
            topic: t,
            group: crate::error::Named::Id(g),
        })?;
        Ok((group.created_op, topic.partitions.len() as u32))
    }

    fn handle(&mut self, request: GroupRequest) {
        let not_member = |key: GroupKey, client| NodeError::NotAMember {
            group: key.2,
            client,
        };
        match request {
            GroupRequest::Join { key, client, reply } => {
                let result = self.resolve(key).and_then(|(incarnation, partitions)| {
                    self.membership
                        .join(key, incarnation, client, partitions)
                        .map_err(|refused| match refused {
                            Refused::GroupFull => NodeError::TooMany {
                                what: Capacity::MembersInGroup,
                                limit: MAX_MEMBERS,
                            },
                            _ => NodeError::TooMany {
                                what: Capacity::MembershipsInNode,
                                limit: MAX_MEMBERSHIPS,
                            },
                        })
                });
                reply.send(result);
            }
            GroupRequest::Leave { key, client, reply } => {
                let result = self.resolve(key).and_then(|(incarnation, _)| {
                    self.membership
                        .leave(key, incarnation, client)
                        .map_err(|_| not_member(key, client))
                });
                reply.send(result);
            }
            GroupRequest::Disconnect { client, reply } => {
                reply.send(self.membership.disconnect(client));
            }
            GroupRequest::Poll {
                key,
                client,
                partition,
                reply,
            } => {
                let result = self
                    .resolve(key)
                    .and_then(|(incarnation, _)| match partition {
                        None => self
                            .membership
                            .next_partition(key, incarnation, client)
                            .map_err(|_| not_member(key, client)),
                        Some(p) => match self.membership.polled(key, incarnation, client, p) {
                            Ok(true) => Ok(Some(p)),
                            Ok(false) => Err(NodeError::PartitionNotOwned {
                                group: key.2,
                                partition: p,
                                client,
                            }),
                            Err(_) => Err(not_member(key, client)),
                        },
                    });
                reply.send(result);
            }
            GroupRequest::Current { key, client, reply } => {
                let result = self.resolve(key).and_then(|(incarnation, _)| {
                    match self.membership.current_partition(key, incarnation, client) {
                        Ok(Some(p)) => Ok(p),
                        // A member that has not polled yet, or lost its partition to a
                        // rebalance, has no current partition to mean.
                        Ok(None) => Err(NodeError::NoCurrentPartition {
                            group: key.2,
                            client,
                        }),
                        Err(_) => Err(not_member(key, client)),
                    }
                });
                reply.send(result);
            }
            GroupRequest::Assignment { key, client, reply } => {
                let result = self.resolve(key).and_then(|(incarnation, _)| {
                    let members = self
                        .membership
                        .get(key)
                        .filter(|m| m.incarnation == incarnation)
                        .ok_or(not_member(key, client))?;
                    let member = members
                        .members
                        .get(&client)
                        .ok_or(not_member(key, client))?;
                    Ok((members.generation, member.partitions.clone()))
                });
                reply.send(result);
            }
            GroupRequest::Members { key, reply } => {
                let result = self.resolve(key).map(|(incarnation, _)| {
                    self.membership
                        .get(key)
                        .filter(|m| m.incarnation == incarnation)
                        .map(|m| {
                            m.members
                                .iter()
                                .map(|(c, m)| (*c, m.partitions.clone()))
                                .collect()
                        })
                        .unwrap_or_default()
                });
                reply.send(result);
            }
            GroupRequest::Effects { effects, at_op } => {
                for effect in &effects {
                    self.membership.apply(effect);
                }
                self.membership.check();
                // Only while no later batch is published: a join may already have read a
                // newer view than these effects.
                let view = self.view.load();
                if view.op == at_op {
                    self.membership.check_against(&view.state);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_and_leaves_rebalance_every_partition_to_exactly_one_member() {
        let mut m = Membership::default();
        let key = (0, 0, 0);
        m.join(key, 1, 7, 5).unwrap();
        assert_eq!(
            m.get(key).unwrap().members[&7].partitions,
            vec![0, 1, 2, 3, 4]
        );
        m.join(key, 1, 3, 5).unwrap();
        let g = m.get(key).unwrap();
        assert_eq!(g.members[&3].partitions, vec![0, 2, 4]);
        assert_eq!(g.members[&7].partitions, vec![1, 3]);
        assert_eq!(g.generation, 2);
        assert_eq!(m.next_partition(key, 1, 3), Ok(Some(0)));
        assert_eq!(m.next_partition(key, 1, 3), Ok(Some(2)));
        assert_eq!(m.current_partition(key, 1, 3), Ok(Some(2)));
        assert_eq!(m.next_partition(key, 1, 3), Ok(Some(4)));
        assert_eq!(m.next_partition(key, 1, 3), Ok(Some(0)));
        m.leave(key, 1, 3).unwrap();
        assert_eq!(m.leave(key, 1, 3), Err(Refused::NotAMember));
        assert_eq!(m.get(key).unwrap().members[&7].partitions.len(), 5);
        assert_eq!(m.disconnect(7), 1);
        assert!(m.get(key).unwrap().members.is_empty());
        assert_eq!(m.next_partition(key, 1, 7), Err(Refused::NotAMember));
        m.check();
        assert_eq!(m.total(), 0);
    }

    #[test]
    fn every_assignment_change_counts_one_rebalance_by_its_cause() {
        use RebalanceCause::*;
        let mut m = Membership::default();
        let counts = |m: &Membership| {
            [Join, Leave, Disconnect, TopicResized].map(|cause| m.rebalances(cause))
        };
        m.join((0, 0, 0), 1, 7, 3).unwrap();
        m.join((0, 0, 0), 1, 8, 3).unwrap();
        m.join((0, 0, 0), 1, 8, 3).unwrap(); // a member already: nothing changes
        m.join((0, 0, 1), 2, 8, 3).unwrap();
        assert_eq!(counts(&m), [3, 0, 0, 0]);
        m.leave((0, 0, 0), 1, 7).unwrap();
        assert_eq!(m.leave((0, 0, 0), 1, 7), Err(Refused::NotAMember));
        assert_eq!(counts(&m), [3, 1, 0, 0]);
        // Both groups of the topic have a member: two rebalances; the same count again: none.
        for _ in 0..2 {
            m.apply(&Effect::TopicResized {
                stream: 0,
                topic: 0,
                partitions: 5,
            });
        }
        assert_eq!(counts(&m), [3, 1, 0, 2]);
        assert_eq!(m.disconnect(8), 2, "client 8 was in both groups");
        assert_eq!(counts(&m), [3, 1, 2, 2]);
        // No member left anywhere: a resize changes no assignment.
        m.apply(&Effect::TopicResized {
            stream: 0,
            topic: 0,
            partitions: 6,
        });
        assert_eq!(counts(&m), [3, 1, 2, 2]);
        assert_eq!(RebalanceCause::NAMES[TopicResized.index()], "TopicResized");
    }

    #[test]
    fn effects_touch_only_their_group_and_incarnation() {
        let mut m = Membership::default();
        m.join((0, 0, 0), 1, 9, 2).unwrap();
        m.join((0, 1, 0), 2, 9, 2).unwrap();
        let generation = m.get((0, 1, 0)).unwrap().generation;
        m.apply(&Effect::TopicResized {
            stream: 0,
            topic: 0,
            partitions: 3,
        });
        assert_eq!(
            m.get((0, 1, 0)).unwrap().generation,
            generation,
            "other topic untouched"
        );
        assert_eq!(
            m.get((0, 0, 0)).unwrap().members[&9].partitions,
            vec![0, 1, 2]
        );
        let resized = m.get((0, 0, 0)).unwrap().generation;
        m.apply(&Effect::TopicResized {
            stream: 0,
            topic: 0,
            partitions: 3,
        });
        assert_eq!(
            m.get((0, 0, 0)).unwrap().generation,
            resized,
            "same count: no rebalance"
        );
        // A group re-created under the same id: a member joins the new incarnation before
        // the old one's deletion arrives, and keeps its membership.
        m.join((0, 1, 0), 5, 4, 2).unwrap();
        assert_eq!(m.get((0, 1, 0)).unwrap().incarnation, 5);
        m.apply(&Effect::GroupDeleted {
            group: (0, 1, 0),
            incarnation: 2,
        });
        assert!(m.get((0, 1, 0)).unwrap().members.contains_key(&4));
        assert!(!m.get((0, 1, 0)).unwrap().members.contains_key(&9));
        m.check();
        m.apply(&Effect::StreamDeleted { stream: 0 });
        assert_eq!(m.total(), 0);
        m.check();
    }
}

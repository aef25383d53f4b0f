//! Consumer group membership: which client sessions belong to which group, and which of the
//! topic's partitions each member reads. Volatile by design: a member is a live client
//! session, so membership does not outlive the process (clients rejoin after a restart, as
//! Iggy's SDK does on `ConsumerGroupMemberNotFound`); the groups themselves are metadata.
//!
//! Assignment: members in client-id order, partition `p` to member `p mod n`. Every join,
//! leave and change of the topic's partition count rebalances and bumps the generation.

use std::collections::BTreeMap;

/// A group, by (stream, topic, group) ids.
pub type GroupKey = (u32, u32, u32);

/// The most members one group holds.
pub const MAX_MEMBERS: usize = 4096;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    pub partitions: Vec<u32>,
    /// Where the member's next round-robin poll starts among its partitions.
    pub cursor: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    pub members: BTreeMap<u128, Member>,
    pub generation: u64,
}

#[derive(Debug, Default)]
pub struct Membership {
    groups: BTreeMap<GroupKey, Members>,
}

impl Membership {
    pub fn get(&self, key: GroupKey) -> Option<&Members> {
        self.groups.get(&key)
    }

    /// Adds `client` (a no-op for a member); false when the group is full.
    pub fn join(&mut self, key: GroupKey, client: u128, partitions: u32) -> bool {
        let group = self.groups.entry(key).or_default();
        if group.members.contains_key(&client) {
            return true;
        }
        if group.members.len() >= MAX_MEMBERS {
            return false;
        }
        group.members.insert(client, Member::default());
        rebalance(group, partitions);
        true
    }

    /// Removes `client`; false when it was not a member.
    pub fn leave(&mut self, key: GroupKey, client: u128, partitions: u32) -> bool {
        let Some(group) = self.groups.get_mut(&key) else {
            return false;
        };
        if group.members.remove(&client).is_none() {
            return false;
        }
        rebalance(group, partitions);
        true
    }

    /// A client session ended: it leaves every group. `partitions` gives each topic's count.
    pub fn disconnect(&mut self, client: u128, partitions: impl Fn(GroupKey) -> u32) {
        for (key, group) in &mut self.groups {
            if group.members.remove(&client).is_some() {
                rebalance(group, partitions(*key));
            }
        }
    }

    /// The topic's partition count changed.
    pub fn resize(&mut self, stream: u32, topic: u32, partitions: u32) {
        for ((s, t, _), group) in &mut self.groups {
            if (*s, *t) == (stream, topic) {
                rebalance(group, partitions);
            }
        }
    }

    /// Forgets groups for which `keep` is false (deleted groups, topics, streams).
    pub fn retain(&mut self, keep: impl Fn(GroupKey) -> bool) {
        self.groups.retain(|key, _| keep(*key));
    }

    /// The next partition `client` reads in round-robin, `None` if it holds none.
    pub fn next_partition(&mut self, key: GroupKey, client: u128) -> Option<u32> {
        let member = self.groups.get_mut(&key)?.members.get_mut(&client)?;
        if member.partitions.is_empty() {
            return None;
        }
        let partition = member.partitions[member.cursor % member.partitions.len()];
        member.cursor = (member.cursor + 1) % member.partitions.len();
        Some(partition)
    }
}

fn rebalance(group: &mut Members, partitions: u32) {
    let n = group.members.len();
    group.generation += 1;
    for member in group.members.values_mut() {
        member.partitions.clear();
        member.cursor = 0;
    }
    if n == 0 {
        return;
    }
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
    let assigned: usize = group.members.values().map(|m| m.partitions.len()).sum();
    assert_eq!(
        assigned, partitions as usize,
        "every partition has one owner"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_and_leaves_rebalance_every_partition_to_exactly_one_member() {
        let mut m = Membership::default();
        let key = (0, 0, 0);
        assert!(m.join(key, 7, 5));
        assert_eq!(
            m.get(key).unwrap().members[&7].partitions,
            vec![0, 1, 2, 3, 4]
        );
        assert!(m.join(key, 3, 5));
        let g = m.get(key).unwrap();
        assert_eq!(g.members[&3].partitions, vec![0, 2, 4]);
        assert_eq!(g.members[&7].partitions, vec![1, 3]);
        assert_eq!(g.generation, 2);
        assert_eq!(m.next_partition(key, 3), Some(0));
        assert_eq!(m.next_partition(key, 3), Some(2));
        assert_eq!(m.next_partition(key, 3), Some(4));
        assert_eq!(m.next_partition(key, 3), Some(0));
        assert!(m.leave(key, 3, 5));
        assert!(!m.leave(key, 3, 5));
        assert_eq!(m.get(key).unwrap().members[&7].partitions.len(), 5);
        m.disconnect(7, |_| 5);
        assert!(m.get(key).unwrap().members.is_empty());
        assert_eq!(m.next_partition(key, 7), None);
    }
}

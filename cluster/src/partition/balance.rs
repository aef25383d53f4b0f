//! Leadership spread: each partition group is led by its preferred member while that
//! member's replica is up and caught up, so the leaders of a member's partitions (and the
//! appends, syncs and forwarded sends they take) spread over the cluster rather than all
//! staying where the groups were made (the metadata leader makes every new group, and so
//! first leads it) or where the last failover left them.
//!
//! A group's preferred member is one of its voters' members, picked by the partition's
//! numbers ([`preferred`]): the partitions of a topic go round the members in turn. A
//! leader hands a group to its preferred member's replica (openraft's `transfer_leader`:
//! it stops taking new entries, the successor waits until its log holds the leader's last
//! entry and is elected) when, at a pass of the groups:
//!
//! | the leader finds | it does |
//! |---|---|
//! | the group's reconciliation not done for the voters it last found (`members`) | nothing: membership first |
//! | itself the preferred member | nothing |
//! | the preferred member's replica no voter, or not heard within the shortest election timeout | nothing (it is down or cut off) |
//! | that replica more than [`CAUGHT_UP_LAG`] entries behind its last entry | nothing yet (the transfer would hold sends until it caught up) |
//! | a hand-over of this group begun less than [`BALANCE_RETRY`] ago | nothing (one that failed ends in an election) |
//! | otherwise | hands the group over, and counts it ([`super::machine::MachineCounts::balanced`]) |
//!
//! A failed hand-over costs one election: a leader that is handing over sends no
//! heartbeats, so its followers elect one of themselves.

use super::groups::{id_of, leads, PartGroups};
use super::members::{configured_at, Reconciled};
use super::net::GroupName;
use super::PartRaft;
use crate::rt::in_env;
use crate::types::{member_of, MemberId, NodeId};
use openraft::async_runtime::WatchReceiver;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Entries the preferred replica may lack of the leader's log and still be handed the
/// group (a replica under steady sends is always a few behind).
pub const CAUGHT_UP_LAG: u64 = 16;
/// How long after a hand-over of a group is begun another may be.
pub const BALANCE_RETRY: Duration = Duration::from_secs(3);

/// The member that should lead group `name`, of its voters' members `members` (none for
/// none): the partition's numbers pick one, so a topic's partitions go round the members.
pub fn preferred(name: GroupName, members: &BTreeSet<MemberId>) -> Option<MemberId> {
    let count = members.len() as u64;
    if count == 0 {
        return None;
    }
    let (stream, topic, partition, _) = name;
    let turn = u64::from(stream) * 31 + u64::from(topic) * 7 + u64::from(partition);
    members.iter().nth((turn % count) as usize).copied()
}

impl PartGroups {
    /// Hands each group this member leads, settled, to its preferred member's replica
    /// where the module doc's table says so (a task each; the pass does not wait).
    pub(super) fn balance(&self) {
        let now = self.env().clock.monotonic_nanos();
        let retry = BALANCE_RETRY.as_nanos() as u64;
        let key: BTreeSet<NodeId> = self.meta().status().voters.keys().copied().collect();
        let led = self.led();
        let due: Vec<(GroupName, PartRaft, NodeId)> = {
            let reconciled = self.reconciled();
            let mut begun = self.balanced();
            begun.retain(|name, at| led.iter().any(|(n, _)| n == name) && now < *at + retry);
            led.into_iter()
                .filter(|(name, raft)| match reconciled.get(name) {
                    Some(Reconciled::With(done, at)) => *done == key && configured_at(raft) == *at,
                    _ => false,
                })
                .filter_map(|(name, raft)| {
                    if begun.contains_key(&name) {
                        return None;
                    }
                    let to = self.successor_preferred(name, &raft, now)?;
                    begun.insert(name, now);
                    Some((name, raft, to))
                })
                .collect()
        };
        for (name, raft, to) in due {
            self.counts().balanced.fetch_add(1, Relaxed);
            tracing::info!(partition = %super::net::identity_of(name), to = %crate::types::show_id(to), "handing the partition's leadership to its preferred member");
            let env = self.env().clone();
            let task = async move {
                let _ = raft.trigger().transfer_leader(to).await;
            };
            drop(env.tasks.spawn(Box::pin(in_env(&env, task))));
        }
    }

    /// The replica of group `name`'s preferred member, if it is not this one's and the
    /// module doc's table lets `raft` (leading) hand the group to it at monotonic `now`.
    fn successor_preferred(&self, name: GroupName, raft: &PartRaft, now: u64) -> Option<NodeId> {
        let metrics = raft.metrics().borrow_watched().clone();
        let voters: Vec<NodeId> = metrics.membership_config.membership().voter_ids().collect();
        let members: BTreeSet<MemberId> = voters.iter().map(|id| member_of(*id)).collect();
        let want = preferred(name, &members)?;
        if want == member_of(id_of(raft)) || !leads(raft) {
            return None;
        }
        let to = voters.into_iter().find(|id| member_of(*id) == want)?;
        let heard = metrics.heartbeat.as_ref()?.get(&to).cloned().flatten()?;
        let window = self.tuning().election.0.as_nanos() as u64;
        if now.saturating_sub(heard.reading()) > window {
            return None;
        }
        let matched = metrics.replication.as_ref()?.get(&to).cloned().flatten()?;
        let last = metrics.last_log_index.unwrap_or(0);
        (matched.index + CAUGHT_UP_LAG >= last).then_some(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topics_partitions_go_round_the_members() {
        let members: BTreeSet<MemberId> = [1, 2, 3].into();
        let picked: Vec<MemberId> = (0..6)
            .map(|p| preferred((1, 1, p, 7), &members).expect("members"))
            .collect();
        // Three partitions in a row land on three different members, and the turn repeats.
        let first: BTreeSet<MemberId> = picked[..3].iter().copied().collect();
        assert_eq!(first, members);
        assert_eq!(picked[..3], picked[3..]);
        // The nonce (a partition made again) does not move its preferred member.
        assert_eq!(
            preferred((1, 1, 0, 7), &members),
            preferred((1, 1, 0, 8), &members)
        );
        assert_eq!(preferred((1, 1, 0, 7), &BTreeSet::new()), None);
        // A member that is no voter is never picked.
        let two: BTreeSet<MemberId> = [1, 3].into();
        assert!((0..6).all(|p| preferred((2, 5, p, 1), &two).is_some_and(|m| two.contains(&m))));
    }
}

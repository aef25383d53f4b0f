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
//! | this member leaving (a graceful stop hands every group over: [`PartGroups::hand_over_all`]) | nothing |
//! | the preferred member's replica no voter, or not heard within three heartbeats | nothing (it is down or cut off) |
//! | that replica more than [`CAUGHT_UP_LAG`] entries behind its last entry | nothing yet (the transfer would hold sends until it caught up) |
//! | a hand-over of this group begun less than [`BALANCE_RETRY`] ago | nothing (one that failed ends in an election) |
//! | the preferred member answering that it is leaving, or not answering which replica it runs | nothing |
//! | otherwise | hands the group over; once the preferred replica leads, counts it ([`super::machine::MachineCounts::balanced`]) |
//!
//! A failed hand-over costs one election: a leader that is handing over sends no
//! heartbeats, so its followers elect one of themselves.
//!
//! A graceful stop ([`PartGroups::hand_over_all`]) first marks the member leaving, which
//! its answers to `Identify` say, then hands each group it leads to the voter holding the
//! most of its log, again for any handed back meanwhile, until it leads none.

use super::groups::{id_of, successor, PartGroups, SEND_RETRY};
use super::members::{configured_at, Reconciled};
use super::net::GroupName;
use super::PartRaft;
use crate::rt::in_env;
use crate::types::{member_of, MemberId, NodeId};
use openraft::async_runtime::WatchReceiver;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Entries the preferred replica may lack of the leader's log and still be handed the
/// group (a replica under steady sends is always a few behind).
pub const CAUGHT_UP_LAG: u64 = 16;
/// How long after a hand-over of a group is begun another may be.
pub const BALANCE_RETRY: Duration = Duration::from_secs(3);
/// How often a leaving member hands a group over again that is still led here.
const HAND_OVER_AGAIN: Duration = Duration::from_millis(500);

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
    /// Hands each group this member leads, settled and awake (one asleep was not heard
    /// from its preferred member within three heartbeats, or it would not sleep yet), to
    /// its preferred member's replica where the module doc's table says so (a task each;
    /// the pass does not wait).
    pub(super) fn balance(&self, asleep: &BTreeSet<GroupName>) {
        if self.leaving().load(Relaxed) {
            return;
        }
        let now = self.env().clock.monotonic_nanos();
        let retry = BALANCE_RETRY.as_nanos() as u64;
        let key: BTreeSet<NodeId> = self.meta().status().voters.keys().copied().collect();
        let led = self.led_but(asleep);
        let due: Vec<(GroupName, PartRaft, NodeId)> = {
            let reconciled = self.reconciled();
            let mut begun = self.balanced();
            begun.retain(|name, at| led.iter().any(|(n, _)| n == name) && now < *at + retry);
            // The cheap tests first: most groups are led by their preferred member.
            led.into_iter()
                .filter_map(|(name, raft)| {
                    if begun.contains_key(&name) {
                        return None;
                    }
                    let to = self.successor_preferred(name, &raft, now)?;
                    let settled = match reconciled.get(&name) {
                        Some(Reconciled::With(done, at)) => {
                            *done == key && configured_at(&raft) == *at
                        }
                        _ => false,
                    };
                    settled.then(|| {
                        begun.insert(name, now);
                        (name, raft, to)
                    })
                })
                .collect()
        };
        for (name, raft, to) in due {
            let (groups, env) = (self.clone(), self.env().clone());
            let task = async move { groups.hand_to_preferred(name, raft, to).await };
            drop(env.tasks.spawn(Box::pin(in_env(&env, task))));
        }
    }

    /// Hands group `name` (led by `raft`) to replica `to` unless its member says it is
    /// leaving or does not answer; counts it once `to` leads.
    async fn hand_to_preferred(&self, name: GroupName, raft: PartRaft, to: NodeId) {
        let node = raft
            .metrics()
            .borrow_watched()
            .membership_config
            .membership()
            .get_node(&to)
            .cloned();
        let Some(node) = node else { return };
        let asked = self.identity(name, id_of(&raft), (member_of(to), &node));
        if !matches!(asked.await, Some(Some((id, _, false))) if id == to) {
            return;
        }
        tracing::info!(partition = %super::net::identity_of(name), to = %crate::types::show_id(to), "handing the partition's leadership to its preferred member");
        self.wake(name, &raft);
        if raft.trigger().transfer_leader(to).await.is_err() {
            return;
        }
        let env = self.env();
        let deadline = env.clock.monotonic_nanos() + BALANCE_RETRY.as_nanos() as u64;
        while env.clock.monotonic_nanos() < deadline {
            if raft.metrics().borrow_watched().current_leader == Some(to) {
                self.counts().balanced.fetch_add(1, Relaxed);
                return;
            }
            env.clock.sleep(SEND_RETRY).await;
        }
    }

    /// A graceful stop: marks this member leaving (it takes no group back, and says so),
    /// then hands each group it leads to its voter that holds the most of its log, again
    /// for one handed back meanwhile (by a leader that had not asked yet), and waits (at
    /// most `limit`) until none is led here: sends then resume at once elsewhere instead of
    /// after an election timeout.
    pub(super) async fn hand_over_all(self, limit: Duration) {
        self.leaving().store(true, Relaxed);
        let env = self.env().clone();
        let deadline = env.clock.monotonic_nanos() + limit.as_nanos() as u64;
        let again = HAND_OVER_AGAIN.as_nanos() as u64;
        let mut asked: BTreeMap<GroupName, u64> = BTreeMap::new();
        loop {
            let now = env.clock.monotonic_nanos();
            // Only groups with another voter to take over are waited for.
            let led: Vec<(GroupName, PartRaft)> = self
                .led()
                .into_iter()
                .filter(|(_, r)| successor(r).is_some())
                .collect();
            if led.is_empty() || now >= deadline {
                let kept = led.len();
                let handed = asked.len().saturating_sub(kept);
                tracing::info!(
                    handed,
                    kept,
                    "handed the partition groups this member led over"
                );
                return;
            }
            for (name, raft) in led {
                if asked.get(&name).is_some_and(|at| now < at + again) {
                    continue;
                }
                if let Some(to) = successor(&raft) {
                    self.wake(name, &raft);
                    if raft.trigger().transfer_leader(to).await.is_ok() {
                        asked.insert(name, now);
                    }
                }
            }
            env.clock.sleep(SEND_RETRY).await;
        }
    }

    /// The replica of group `name`'s preferred member, if it is not this one's and the
    /// module doc's table lets `raft` (leading) hand the group to it at monotonic `now`.
    /// Read in one borrow of its metrics, and only as far as needed: every pass asks this
    /// of every group led here, and most are led by their preferred member already.
    fn successor_preferred(&self, name: GroupName, raft: &PartRaft, now: u64) -> Option<NodeId> {
        let metrics = raft.metrics();
        let metrics = metrics.borrow_watched();
        let me = metrics.id;
        if metrics.current_leader != Some(me) {
            return None;
        }
        let membership = metrics.membership_config.membership();
        let members: BTreeSet<MemberId> = membership.voter_ids().map(member_of).collect();
        let want = preferred(name, &members)?;
        if want == member_of(me) {
            return None;
        }
        let to = membership.voter_ids().find(|id| member_of(*id) == want)?;
        let heard = metrics.heartbeat.as_ref()?.get(&to).cloned().flatten()?;
        let window = 3 * self.tuning().heartbeat.as_nanos() as u64;
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
        // Two members share a topic's partitions in turn.
        let two: BTreeSet<MemberId> = [1, 3].into();
        let shared: BTreeSet<MemberId> = (0..2)
            .filter_map(|p| preferred((2, 5, p, 1), &two))
            .collect();
        assert_eq!(shared, two);
    }
}

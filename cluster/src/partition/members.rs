//! A group's voters follow the metadata group's: the leader of each partition group makes
//! its voters the replicas run by the metadata group's committed voters' members that the
//! partition is placed on (`placement`).
//!
//! | the leader finds | it does |
//! |---|---|
//! | the metadata voters as at its last reconciliation of the group, and the group's configuration as that reconciliation left it | nothing |
//! | a member of the metadata voters without a replica among the group's voters (added, or back on a wiped disk as a new replica) | makes that member's replica a learner, waits until it holds every committed entry, then makes the voters the wanted set in one joint change |
//! | a voter whose member the metadata group no longer has | removes it in the same change |
//! | a member that does not answer which replica it runs, a learner that does not catch up within [`CATCH_UP_LIMIT`], a change that does not commit within [`CHANGE_LIMIT`] | nothing more now: tried again once [`RECONCILE_RETRY`] passed |
//! | a member that released the replica it named (a kept one, its metadata view behind this leader's) and runs another, or none, while it catches up or by the time the change commits | the same: the next reconciliation adds the one it runs (and removes the one gone) |
//! | a peer answering a request of the group's Raft that it runs another replica than the one configured (a release decided after the change committed) | reconciles again at the next pass that finds no reconciliation of the group running or waiting to retry, as if the voters had changed |
//! | a learner whose member is not wanted (left over from a change cut short) | removes it in the same change |
//! | the group's configuration joint (a change cut short) | the change above finishes it |
//! | the metadata group's own configuration joint | waits until it is not (a member removed while it runs still sees itself in the joint one) |
//! | its own member no metadata voter (seen once the metadata configuration is not joint) | hands the group over to a wanted voter (a leader never removes itself), and the next leader reconciles |
//! | its own member a metadata voter the group is no longer placed on (`placement`), the placed replicas not all voters | adds them beside itself (the voters: the placed replicas and itself), so that one of them can take over |
//! | the same, the placed replicas all voters | hands the group to one of them, which reconciles (and leaves this replica out) |
//!
//! Each group's reconciliation runs as a task of its own (at most one per group), so a slow
//! one never holds up the member's other groups; it is forgotten when this member stops
//! leading the group, and done again if it leads it again.
//!
//! A new replica catches up from the leader's WAL, which keeps [`super::groups::LOG_KEPT`]
//! entries behind the last checkpoint; one further behind is sent the checkpoint and refills
//! its partition from its peers' segments first (`super::refill`).

use super::groups::{id_of, leads, successor, successor_among, PartGroups};
use super::net::{identity_of, GroupName};
use super::PartRaft;
use crate::rt::in_env;
use crate::types::{member_of, show_id, LogId, NodeId, Peer};
use cairn_engine::env::{race, Either};
use openraft::async_runtime::WatchReceiver;
use openraft::ChangeMembers;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The log id of the configuration `raft` runs under.
pub(super) fn configured_at(raft: &PartRaft) -> Option<LogId> {
    *raft.metrics().borrow_watched().membership_config.log_id()
}

/// How long a new replica may take to catch up before a reconciliation gives up (and is
/// tried again later).
pub const CATCH_UP_LIMIT: Duration = Duration::from_secs(30);
/// How long the membership change may take to commit.
pub const CHANGE_LIMIT: Duration = Duration::from_secs(10);
/// How long after a reconciliation that did not finish it is tried again.
pub const RECONCILE_RETRY: Duration = Duration::from_secs(2);
const CATCH_UP_POLL: Duration = Duration::from_millis(50);
/// How often a catch-up asks the learner's member which replica it runs.
const CATCH_UP_IDENTIFY: Duration = Duration::from_secs(1);

/// Where a group's reconciliation stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// Done for this set of metadata voters, leaving the group's configuration of this log
    /// id (another leader's change since, or a record left from an earlier leadership,
    /// makes it due again).
    With(BTreeSet<NodeId>, Option<LogId>),
    /// A task is at it.
    Running,
    /// Not done; tried again from this monotonic time on.
    RetryAt(u64),
}

/// What a pass knows of a group it leads.
#[derive(Debug, Clone, Copy)]
struct GroupNow {
    /// The log id of the configuration it runs under; `None` when asleep (unchanged).
    configured_at: Option<Option<LogId>>,
    /// A peer answered a request of its Raft that it runs another replica than the one
    /// addressed ([`super::net::PartNetworks::take_elsewhere`]).
    elsewhere: bool,
}

/// Whether a group whose last reconciliation left `record` is due one now, with the
/// metadata voters `key` (the module doc's table, first rows).
fn is_due(record: Option<&Reconciled>, key: &BTreeSet<NodeId>, group: GroupNow, now: u64) -> bool {
    match record {
        Some(Reconciled::With(done, at)) => {
            done != key || group.elsewhere || group.configured_at.is_some_and(|c| c != *at)
        }
        Some(Reconciled::Running) => false,
        Some(Reconciled::RetryAt(at)) => *at <= now,
        None => true,
    }
}

/// The "runs another replica" marks a pass took and did not act on, of groups still led:
/// kept for the next pass.
fn marks_kept(
    taken: &BTreeSet<GroupName>,
    acted: &BTreeSet<GroupName>,
    led: &BTreeSet<GroupName>,
) -> BTreeSet<GroupName> {
    taken
        .difference(acted)
        .filter(|name| led.contains(name))
        .copied()
        .collect()
}

impl PartGroups {
    /// Starts a reconciliation of each group this member leads whose metadata voters
    /// changed since its last one (none while the metadata configuration is joint).
    pub(super) async fn reconcile(&self, asleep: &BTreeSet<GroupName>) {
        let status = self.meta().status();
        let led: BTreeMap<GroupName, PartRaft> = self.led().into_iter().collect();
        let now = self.env().clock.monotonic_nanos();
        let key: BTreeSet<NodeId> = status.voters.keys().copied().collect();
        let due: Vec<(GroupName, PartRaft)> = {
            let mut reconciled = self.reconciled();
            reconciled.retain(|n, r| led.contains_key(n) || *r == Reconciled::Running);
            if status.joint {
                return;
            }
            // A peer that runs another replica than the configured one (its member released
            // the one added after the change committed) makes its group due even when
            // nothing else changed. A mark of a group led whose pass does not act on it (its
            // reconciliation running, or waiting to retry) is kept for the next.
            let elsewhere = self.networks().take_elsewhere();
            let led_names: BTreeSet<GroupName> = led.keys().copied().collect();
            let due: Vec<(GroupName, PartRaft)> = led
                .into_iter()
                .filter(|(name, raft)| {
                    let group = GroupNow {
                        // Asleep, its configuration cannot have changed since.
                        configured_at: (!asleep.contains(name)).then(|| configured_at(raft)),
                        elsewhere: elsewhere.contains(name),
                    };
                    is_due(reconciled.get(name), &key, group, now)
                })
                .collect();
            for (name, _) in &due {
                reconciled.insert(*name, Reconciled::Running);
            }
            let acted: BTreeSet<GroupName> = due.iter().map(|(name, _)| *name).collect();
            let unused = marks_kept(&elsewhere, &acted, &led_names);
            self.networks().keep_elsewhere(unused.into_iter());
            due
        };
        for (name, raft) in due {
            let groups = self.clone();
            let key = key.clone();
            let task = async move {
                let placed = groups.placed_voters(name);
                let done = groups.reconcile_group(name, &raft, &placed).await;
                let retry =
                    groups.env().clock.monotonic_nanos() + RECONCILE_RETRY.as_nanos() as u64;
                let record = if done {
                    Reconciled::With(key, configured_at(&raft))
                } else {
                    Reconciled::RetryAt(retry)
                };
                groups.reconciled().insert(name, record);
            };
            let env = self.env().clone();
            drop(env.tasks.spawn(Box::pin(in_env(&env, task))));
        }
    }

    /// Makes group `name`'s voters the replicas `voters`' members run (the module doc's
    /// table); whether they are now.
    async fn reconcile_group(
        &self,
        name: GroupName,
        raft: &PartRaft,
        voters: &BTreeMap<NodeId, Peer>,
    ) -> bool {
        let Some(wanted) = self.replicas_of(name, raft, voters).await else {
            return false;
        };
        let (current, learners, joint) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow_watched();
            let membership = metrics.membership_config.membership();
            let current: BTreeSet<NodeId> = membership.voter_ids().collect();
            let learners: BTreeSet<NodeId> = membership.learner_ids().collect();
            (current, learners, membership.get_joint_config().len() > 1)
        };
        let mut wanted_ids: BTreeSet<NodeId> = wanted.keys().copied().collect();
        let me = id_of(raft);
        let voter_here = self.voter_members().contains(&member_of(me));
        let moving = voter_here && !wanted_ids.contains(&me);
        let placed_vote = wanted_ids.is_subset(&current) && !joint;
        if moving && !placed_vote {
            // The group is placed elsewhere now, but this member is a metadata voter: its
            // replica stays a voter while the placed ones join (a leader that handed the
            // group on before they were voters would find no successor among them, and
            // could not remove itself), then hands it to one of them next time.
            wanted_ids.insert(me);
        } else if !wanted_ids.contains(&me) {
            // This member is no metadata voter, or the placed replicas are all voters
            // now: a leader must not remove itself (openraft leaves it leading as a
            // learner, which no later change may come from), so it hands the group to a
            // wanted voter (or, with none, any other), and its successor reconciles.
            let to =
                successor_among(raft, |id| wanted_ids.contains(&id)).or_else(|| successor(raft));
            if let Some(to) = to {
                self.wake(name, raft);
                let _ = self
                    .within(CHANGE_LIMIT, raft.trigger().transfer_leader(to))
                    .await;
            }
            return false;
        }
        let stray: BTreeSet<NodeId> = learners.difference(&wanted_ids).copied().collect();
        if current == wanted_ids && stray.is_empty() && !joint {
            // Moving: done once it handed the group on (the next reconciliation).
            return !moving;
        }
        self.wake(name, raft);
        let joining: Vec<(NodeId, &Peer)> = wanted
            .iter()
            .filter(|(id, _)| wanted_ids.contains(id) && !current.contains(id))
            .map(|(id, peer)| (*id, peer))
            .collect();
        for &(id, peer) in &joining {
            tracing::info!(partition = %identity_of(name), replica = %show_id(id), "a member's replica joins the partition's group");
            let added = raft.add_learner(id, peer.clone(), false);
            let Some(Ok(added)) = self.within(CHANGE_LIMIT, added).await else {
                return false;
            };
            // Caught up once it holds the log as far as it was when it became a learner.
            if !self
                .caught_up(name, raft, (id, peer), added.log_id().index)
                .await
            {
                return false;
            }
        }
        let steps = vec![
            ChangeMembers::ReplaceAllVoters(wanted_ids),
            ChangeMembers::RemoveNodes(stray),
        ];
        let changed = raft.change_membership(ChangeMembers::Batch(steps), false);
        let done = matches!(self.within(CHANGE_LIMIT, changed).await, Some(Ok(_)));
        if !done || moving {
            return false;
        }
        // A joining replica's member may have released it meanwhile (a replica it kept
        // while its metadata view left it unplaced) and started another: the change then
        // made a replica that is gone a voter, and recorded done, the group would never be
        // reconciled again (seed 0x5f5ed322). Done only once each says it runs the one added.
        for &(id, peer) in &joining {
            if self.runs(name, raft, (id, peer)).await != Some(true) {
                return false;
            }
        }
        true
    }

    /// Whether replica `id`'s member still runs it as its replica of group `name` (`false`:
    /// it runs another, or none); `None` when it does not answer.
    async fn runs(
        &self,
        name: GroupName,
        raft: &PartRaft,
        (id, peer): (NodeId, &Peer),
    ) -> Option<bool> {
        let asked = self
            .identity(name, id_of(raft), (member_of(id), peer))
            .await?;
        Some(asked.is_some_and(|(runs, _, _)| runs == id))
    }

    /// `future` (an openraft call) if it completes within `limit`.
    async fn within<T>(
        &self,
        limit: Duration,
        future: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        let env = self.env();
        match race(in_env(env, future), env.clock.sleep(limit)).await {
            Either::Left(out) => Some(out),
            Either::Right(()) => None,
        }
    }

    /// Waits (at most [`CATCH_UP_LIMIT`], while this replica leads, and while replica
    /// `id`'s member runs it) until `id` holds the log through `index`.
    async fn caught_up(
        &self,
        name: GroupName,
        raft: &PartRaft,
        (id, peer): (NodeId, &Peer),
        index: u64,
    ) -> bool {
        let env = self.env();
        let mut asked = env.clock.monotonic_nanos();
        let deadline = asked + CATCH_UP_LIMIT.as_nanos() as u64;
        while env.clock.monotonic_nanos() < deadline && leads(raft) {
            let matched = {
                let metrics = raft.metrics();
                let metrics = metrics.borrow_watched();
                let replication = metrics.replication.as_ref();
                replication.and_then(|r| r.get(&id).cloned().flatten())
            };
            if matched.is_some_and(|m| m.index >= index) {
                return true;
            }
            // Released by its member, it never catches up (seed 0x53726d6f waited out the
            // whole limit for one): given up at once, and the one it runs added next time.
            let now = env.clock.monotonic_nanos();
            if now >= asked + CATCH_UP_IDENTIFY.as_nanos() as u64 {
                asked = now;
                if self.runs(name, raft, (id, peer)).await == Some(false) {
                    return false;
                }
            }
            env.clock.sleep(CATCH_UP_POLL).await;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_reconciled_is_due_again_when_its_voters_configuration_or_a_peers_replica_changed() {
        let key: BTreeSet<NodeId> = [1 << 32, 2 << 32].into_iter().collect();
        let done = Reconciled::With(key.clone(), None);
        let quiet = GroupNow {
            configured_at: Some(None),
            elsewhere: false,
        };
        let cases: [(Option<&Reconciled>, &BTreeSet<NodeId>, GroupNow, bool); 7] = [
            (None, &key, quiet, true),
            (Some(&done), &key, quiet, false),
            (Some(&done), &BTreeSet::new(), quiet, true),
            // The peer runs another replica than the configured one (seed 0x53726d6f's gap).
            (
                Some(&done),
                &key,
                GroupNow {
                    elsewhere: true,
                    ..quiet
                },
                true,
            ),
            // Asleep: its configuration is as it was.
            (
                Some(&done),
                &key,
                GroupNow {
                    configured_at: None,
                    ..quiet
                },
                false,
            ),
            (
                Some(&Reconciled::Running),
                &key,
                GroupNow {
                    elsewhere: true,
                    ..quiet
                },
                false,
            ),
            (Some(&Reconciled::RetryAt(10)), &key, quiet, false),
        ];
        for (i, (record, voters, group, due)) in cases.into_iter().enumerate() {
            assert_eq!(is_due(record, voters, group, 5), due, "case {i}");
        }
        assert!(is_due(Some(&Reconciled::RetryAt(5)), &key, quiet, 5));
    }

    #[test]
    fn marks_a_pass_did_not_act_on_are_kept_for_groups_still_led() {
        let set = |names: &[u32]| -> BTreeSet<GroupName> {
            names.iter().map(|&p| (1, 1, p, 7)).collect()
        };
        // 1 acted on, 2 led but running (kept), 3 no longer led (dropped).
        let kept = marks_kept(&set(&[1, 2, 3]), &set(&[1]), &set(&[1, 2]));
        assert_eq!(kept, set(&[2]));
    }
}

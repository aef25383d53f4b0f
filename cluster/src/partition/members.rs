//! A group's voters follow the metadata group's: the leader of each partition group makes
//! its voters the replicas the metadata group's committed voters' members run.
//!
//! | the leader finds | it does |
//! |---|---|
//! | the metadata voters as at its last reconciliation of the group | nothing |
//! | a member of the metadata voters without a replica among the group's voters (added, or back on a wiped disk as a new replica) | makes that member's replica a learner, waits until it holds every committed entry, then makes the voters the wanted set in one joint change |
//! | a voter whose member the metadata group no longer has | removes it in the same change |
//! | a member that does not answer which replica it runs | nothing yet: tried again once [`RECONCILE_RETRY`] passed |
//! | the group's configuration joint (a change cut short) | the change above finishes it |
//!
//! A new replica catches up from the leader's WAL, which keeps [`super::groups::LOG_KEPT`]
//! entries behind the last checkpoint; one further behind cannot catch up until
//! checkpoints carry messages (docs/cluster.md, "Partitions: Not yet").

use super::groups::{id_of, PartGroups};
use super::net::{identity_of, GroupName};
use super::PartRaft;
use crate::rt::in_env;
use crate::types::{show_id, NodeId, Peer};
use openraft::async_runtime::WatchReceiver;
use openraft::ChangeMembers;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How long a new replica may take to catch up before a reconciliation gives up (and is
/// tried again later).
pub const CATCH_UP_LIMIT: Duration = Duration::from_secs(30);
/// How long after a reconciliation that did not finish it is tried again.
pub const RECONCILE_RETRY: Duration = Duration::from_secs(2);
const CATCH_UP_POLL: Duration = Duration::from_millis(50);

impl PartGroups {
    /// Reconciles every group this member leads whose metadata voters changed since.
    pub(super) async fn reconcile(&self) {
        let voters = self.meta().status().voters;
        let key: BTreeSet<NodeId> = voters.keys().copied().collect();
        let now = self.env().clock.monotonic_nanos();
        let due: Vec<(GroupName, PartRaft)> = {
            let reconciled = self.reconciled();
            self.led()
                .into_iter()
                .filter(|(name, _)| match reconciled.get(name) {
                    Some((done, _)) if *done == key => false,
                    Some((_, not_before)) => *not_before <= now,
                    None => true,
                })
                .collect()
        };
        for (name, raft) in due {
            let done = self.reconcile_group(name, &raft, &voters).await;
            let retry = now + RECONCILE_RETRY.as_nanos() as u64;
            let record = if done {
                (key.clone(), 0)
            } else {
                (BTreeSet::new(), retry)
            };
            self.reconciled().insert(name, record);
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
        let (current, joint) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow_watched();
            let membership = metrics.membership_config.membership();
            let current: BTreeSet<NodeId> = membership.voter_ids().collect();
            (current, membership.get_joint_config().len() > 1)
        };
        let wanted_ids: BTreeSet<NodeId> = wanted.keys().copied().collect();
        if current == wanted_ids && !joint {
            return true;
        }
        for (&id, peer) in wanted.iter().filter(|(id, _)| !current.contains(id)) {
            tracing::info!(partition = %identity_of(name), replica = %show_id(id), "a member's replica joins the partition's group");
            let added = raft.add_learner(id, peer.clone(), false);
            if in_env(self.env(), added).await.is_err() || !self.caught_up(raft, id).await {
                return false;
            }
        }
        let changed = raft.change_membership(ChangeMembers::ReplaceAllVoters(wanted_ids), false);
        in_env(self.env(), changed).await.is_ok()
    }

    /// Waits (at most [`CATCH_UP_LIMIT`]) until replica `id` holds every entry committed.
    async fn caught_up(&self, raft: &PartRaft, id: NodeId) -> bool {
        let env = self.env();
        let deadline = env.clock.monotonic_nanos() + CATCH_UP_LIMIT.as_nanos() as u64;
        while env.clock.monotonic_nanos() < deadline {
            let (matched, committed, leads) = {
                let metrics = raft.metrics();
                let metrics = metrics.borrow_watched();
                let matched = metrics
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&id).cloned().flatten());
                let committed = metrics.cluster_committed;
                (
                    matched,
                    committed,
                    metrics.current_leader == Some(id_of(raft)),
                )
            };
            if !leads {
                return false;
            }
            if matched.map(|m| m.index) >= committed.map(|c| c.index) {
                return true;
            }
            env.clock.sleep(CATCH_UP_POLL).await;
        }
        false
    }
}

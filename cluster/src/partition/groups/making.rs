//! The making of a partition's group: its first configuration, of the replicas its placed
//! members run, initialized once and by one set (the module doc's table of `groups`, and
//! `placed` for a group whose metadata leader's member is not placed).

use super::{group_dir, id_of, never_made, voted, PartGroups};
use crate::partition::net::{identity_of, GroupName, Making};
use crate::partition::PartRaft;
use crate::rt::in_env;
use crate::types::{member_of, NodeId, Peer};
use std::collections::{BTreeMap, BTreeSet};

/// The most groups a pass asks the metadata leader about (the rest: the next pass).
const ASKS_PER_PASS: usize = 64;

impl PartGroups {
    /// Makes the groups placed here (`here`) that this member's replica finds never made,
    /// of the replicas the metadata leader names (`placed`): this member's own answer while
    /// it leads the metadata group; asked of the leader when its member is not placed.
    pub(super) async fn make_new_groups(
        &self,
        asleep: &BTreeSet<GroupName>,
        here: &BTreeSet<GroupName>,
    ) -> bool {
        let meta = &self.inner.meta;
        let Some(leader) = meta.leader() else {
            return false;
        };
        let leading = leader == self.me();
        let unmade: Vec<(GroupName, PartRaft)> = self
            .running()
            .iter()
            .filter(|(name, raft)| {
                !asleep.contains(name) && here.contains(name) && never_made(raft)
            })
            .map(|(n, r)| (*n, r.clone()))
            .collect();
        if unmade.is_empty() {
            return false;
        }
        if leading && !meta.linearize().await {
            return true;
        }
        let mut left = false;
        let mut asked = 0;
        for (name, raft) in unmade {
            if asked == ASKS_PER_PASS {
                // The rest next time (the pass that stops here comes again at once).
                left = true;
                break;
            }
            // The metadata leader's member, when placed, makes it alone.
            // Whether it voted is read before the answer: one that votes meanwhile (for a
            // replica made of the same set) holds no vote of an earlier making.
            let fresh = voted(&raft);
            let asker = (id_of(&raft), fresh);
            let making = if leading {
                self.making_confirmed(name, asker).await
            } else if self.placed_on(name).contains(&member_of(leader)) {
                continue;
            } else {
                asked += 1;
                self.ask_making(name, leader, asker).await
            };
            // A group another replica holds exists: this one is new (a wiped member's),
            // and joins when the group's leader reconciles (`members`).
            let (replicas, maker) = match making {
                Making::Of { replicas, maker } => (replicas, maker),
                Making::Made => continue,
                Making::NotNow(why) => {
                    tracing::debug!(partition = %identity_of(name), %why, "a group is not made yet");
                    left = true;
                    continue;
                }
            };
            if voted(&raft) && !fresh {
                // It voted since it asked: asked again, afresh, next time.
                left = true;
                continue;
            }
            if maker != id_of(&raft) {
                // Another placed replica makes it; this one takes its first entry from it
                // (one that voted too: openraft refuses only to initialize it). Started
                // again blank, it would leave that maker a configuration naming a replica
                // that is gone (seed 0x38074a6a: two of three, no quorum ever again).
                continue;
            }
            if fresh {
                // It voted for a maker that lost the group's first entry (with its disk)
                // before any replica held it: openraft initializes no replica that voted.
                // It holds nothing but that vote, so it starts again as a new replica
                // (a blank vote, another Raft id), of which the group is made next time.
                self.start_again_blank(name, &raft).await;
                left = true;
                continue;
            }
            // A group made meanwhile (by an earlier leader) answers `NotAllowed`: fine.
            self.wake(name, &raft);
            let made = in_env(&self.inner.env, raft.initialize(replicas)).await;
            if made.is_ok() && !leading {
                let made_on_ask = &self.inner.counts.made_on_ask;
                made_on_ask.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        left
    }

    /// Stops this member's replica of group `name` and removes its WAL, so that the next
    /// pass starts a new replica of it (only for a replica that holds nothing but a vote).
    async fn start_again_blank(&self, name: GroupName, checked: &PartRaft) {
        let raft = {
            let mut running = self.running();
            // Only the replica checked, not one started since under the name.
            if running
                .get(&name)
                .is_none_or(|r| id_of(r) != id_of(checked))
            {
                return;
            }
            running.remove(&name).expect("checked above")
        };
        let _ = in_env(&self.inner.env, raft.shutdown()).await;
        // An entry that reached it meanwhile (another leader made the group after this one
        // asked) keeps its WAL: the next pass starts it again from it.
        if !never_made(&raft) {
            return;
        }
        let dir = group_dir(&self.inner.root, name);
        tracing::warn!(partition = %identity_of(name), "a replica that voted in a making that never took starts again as a new one");
        if let Err(e) = self.inner.env.disk.remove_dir_all(&dir) {
            self.note_failure(name, format!("its WAL could not be removed: {e}"));
        }
    }

    /// The replica of group `name` each member of `voters` runs, once every one answers.
    pub(in crate::partition) async fn replicas_of(
        &self,
        name: GroupName,
        raft: &PartRaft,
        voters: &BTreeMap<NodeId, Peer>,
    ) -> Option<BTreeMap<NodeId, Peer>> {
        self.replicas_made(name, raft, voters)
            .await
            .map(|(replicas, _)| replicas)
    }

    /// [`PartGroups::replicas_of`], and whether any other member's replica holds any of
    /// the group.
    async fn replicas_made(
        &self,
        name: GroupName,
        raft: &PartRaft,
        voters: &BTreeMap<NodeId, Peer>,
    ) -> Option<(BTreeMap<NodeId, Peer>, bool)> {
        let mine = id_of(raft);
        let mut replicas = BTreeMap::new();
        let mut any_made = false;
        for (&voter, peer) in voters {
            let member = member_of(voter);
            if member == member_of(mine) {
                replicas.insert(mine, peer.clone());
                continue;
            }
            let (id, made) = self.identify(name, mine, (voter, peer)).await?;
            replicas.insert(id, peer.clone());
            any_made |= made;
        }
        Some((replicas, any_made))
    }
}

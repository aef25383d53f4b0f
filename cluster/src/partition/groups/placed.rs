//! A group runs on the members its partition is placed on (`crate::partition::placement`),
//! not on every member:
//!
//! | what a member finds | what it does |
//! |---|---|
//! | a group placed on it | runs its replica (`start_missing`) |
//! | a replica it runs of a group placed elsewhere (moved by a change of voters, or found on its disk at start) | keeps it running, and every [`RELEASE_RETRY`] asks the placed members' replicas for the configuration they applied: once one has applied a settled configuration without it, stops it and removes its WAL |
//! | such a replica leading its group | nothing here: its reconciliation hands the group to a placed replica first (`members`) |
//! | a replica of a group placed on it that was never made, the metadata leader's member placed too | nothing: that member makes it |
//! | the same, the metadata leader's member not placed | asks the metadata leader which replicas to make it of ([`PartRpc::Making`]), and makes it of them |
//! | a send or offset write for a group it runs no replica of, placed elsewhere | forwards it to a placed member ([`PartRpc::Forwarded`]), then to the leader that member names |
//!
//! The metadata leader answers [`PartRpc::Making`] once it has confirmed it leads, with the
//! replica each placed member runs (asked with `Identify`), or [`Making::Made`] when any
//! metadata voter's member (placed or not: a group a change of voters moved still lives
//! where it was) holds some of the group. The first asker is the group's maker: only it
//! initializes; the others take its first entry. Every asker is told the same set and maker
//! while the leader keeps them ([`MAKING_KEPT`], within its term): two replicas initialized
//! with different sets would hold different first entries at the same log id. (A maker
//! that stalls past that, while a member's replica is made again, could still meet a
//! second maker: recording the set in the metadata would close that window.) A replica
//! that voted (`fresh`: openraft initializes none) takes the first entry of another maker;
//! told to make a set itself, it starts again blank instead, and the set stays kept with
//! it as maker, so that no asker makes the group of the replica going away.

use super::{id_of, leads, never_made, PartGroups, FORWARD_LIMIT, IDENTIFY_LIMIT};
use crate::partition::net::{
    GroupName, Making, PartEnvelope, PartLogId, PartReply, PartRpc, SendRefused,
};
use crate::partition::refill;
use crate::partition::{PartCommand, PartOutcome, PartRaft};
use crate::rt::in_env;
use crate::types::{member_of, show_id, MemberId, NodeId, Peer};
use cairn_engine::env::Disk;
use openraft::async_runtime::WatchReceiver;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// How long a member waits before it asks again whether a replica it keeps may go.
pub const RELEASE_RETRY: Duration = Duration::from_secs(2);
/// The most kept replicas a pass asks about (the rest wait for the next passes).
const RELEASES_PER_PASS: usize = 16;
/// How long the metadata leader keeps a replica set it answered `Making` with.
pub const MAKING_KEPT: Duration = Duration::from_secs(10);
/// The longest the metadata leader may take to answer `Making` (it asks every placed
/// member which replica it runs).
const MAKING_LIMIT: Duration = Duration::from_secs(5);

/// A replica set the metadata leader answered `Making` with: its term, when, the set, and
/// the replica that makes the group of it.
pub(super) type MadeOf = (u64, u64, BTreeMap<NodeId, Peer>, NodeId);

/// `raft`'s answer to [`PartRpc::Configured`].
pub(super) fn configured(raft: &PartRaft) -> PartReply {
    let metrics = raft.metrics();
    let metrics = metrics.borrow_watched();
    let stored = &metrics.membership_config;
    let membership = stored.membership();
    let applied = metrics.last_applied.map(|l| l.index);
    let at = *stored.log_id();
    let index = at.map(|l| l.index);
    let settled = membership.get_joint_config().len() == 1 && index.is_some() && index <= applied;
    PartReply::Configured {
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
        settled,
        at,
    }
}

impl PartGroups {
    pub(super) fn kept(&self) -> std::sync::MutexGuard<'_, BTreeMap<GroupName, u64>> {
        self.inner.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a replica of a group placed elsewhere, found on this member's disk at start.
    pub(super) fn keep_found(&self, name: GroupName) {
        self.kept().entry(name).or_insert(0);
    }

    /// Adds the running groups not placed on this member (`here`) to those it keeps, drops
    /// those placed here again: the groups it keeps.
    pub(super) fn keep_unplaced(&self, here: &BTreeSet<GroupName>) -> BTreeSet<GroupName> {
        let unplaced: Vec<GroupName> = self
            .running()
            .keys()
            .filter(|n| !here.contains(n))
            .copied()
            .collect();
        let mut kept = self.kept();
        for name in unplaced {
            kept.entry(name).or_insert(0);
        }
        kept.retain(|n, _| !here.contains(n));
        kept.keys().copied().collect()
    }

    /// Stops and removes the replicas kept (`keep_unplaced`) whose group's configuration,
    /// as a placed member's replica applied it, leaves them out (the module doc's table).
    pub(super) async fn release_unplaced(&self, here: &BTreeSet<GroupName>) {
        let now = self.inner.env.clock.monotonic_nanos();
        let due: Vec<(GroupName, PartRaft)> = {
            let running = self.running();
            let mut kept = self.kept();
            let due: Vec<(GroupName, PartRaft)> = kept
                .iter()
                .filter(|(name, at)| **at <= now && !here.contains(name))
                .filter_map(|(name, _)| running.get(name).map(|r| (*name, r.clone())))
                .take(RELEASES_PER_PASS)
                .collect();
            let again = now + RELEASE_RETRY.as_nanos() as u64;
            for (name, _) in &due {
                kept.insert(*name, again);
            }
            due
        };
        for (name, raft) in due {
            let ours = crate::partition::members::configured_at(&raft);
            if !leads(&raft) && self.left_out(name, id_of(&raft), ours).await {
                self.release(name, &raft).await;
            }
        }
    }

    /// Whether a placed member's replica of group `name` has applied a settled
    /// configuration that leaves replica `mine` out, no older than the one `mine` runs
    /// under (`ours`): one older (a replica that was down while the group moved on) says
    /// nothing of the group now.
    async fn left_out(&self, name: GroupName, mine: NodeId, ours: Option<PartLogId>) -> bool {
        for (voter, peer) in self.placed_voters(name) {
            let member = member_of(voter);
            if member == member_of(mine) {
                continue;
            }
            let envelope = PartEnvelope {
                from: mine,
                to: u64::from(member) << 32,
                rpc: PartRpc::Configured,
            };
            let asked = self.networks().call(&peer, name, &envelope, IDENTIFY_LIMIT);
            if let Ok(PartReply::Configured {
                voters,
                learners,
                settled: true,
                at,
            }) = asked.await
            {
                let current = at.is_some() && at >= ours;
                if current && !voters.contains(&mine) && !learners.contains(&mine) {
                    return true;
                }
            }
        }
        false
    }

    /// Stops this member's replica `checked` of group `name` (placed elsewhere, left out of
    /// its group) and removes its WAL.
    async fn release(&self, name: GroupName, checked: &PartRaft) {
        // Placed here again meanwhile: it stays.
        if self.placed_on(name).contains(&member_of(self.me())) {
            return;
        }
        let raft = {
            let mut running = self.running();
            let same = running
                .get(&name)
                .is_some_and(|r| id_of(r) == id_of(checked));
            if !same {
                return;
            }
            running.remove(&name).expect("checked above")
        };
        self.kept().remove(&name);
        // Not running here by choice: no failure of an earlier start stands for it.
        self.failed().remove(&name);
        self.quiet().forget(name);
        self.counts().released.fetch_add(1, Relaxed);
        let _ = in_env(&self.inner.env, raft.shutdown()).await;
        let identity = crate::partition::net::identity_of(name);
        tracing::info!(partition = %identity, replica = %show_id(id_of(&raft)),
            "removing a replica of a partition placed on other members, which its group left out");
        // The repair mark, then the copy, then the WAL, its removal synced: a crash (or a
        // power loss before the root's sync, which brings the directory back) finds the
        // WAL and the mark, repairs the copy from its peers (short of its checkpoint,
        // `refill::needs_repair`), starts the replica again and releases it again.
        let dir = super::group_dir(&self.inner.root, name);
        let disk = &*self.inner.env.disk;
        if let Err(e) = (refill::RepairMark { disk, dir: &dir }).set() {
            // Kept again, to be released again.
            self.keep_found(name);
            self.note_failure(name, format!("its release was not marked: {e}"));
            return;
        }
        if let Err(e) = self.node().rebuild_replica(identity, 0).await {
            // Kept again: its start repairs the copy (the mark is set) and releases it again.
            self.keep_found(name);
            self.note_failure(name, format!("its released copy was not emptied: {e}"));
            return;
        }
        // The copy is empty: the directory goes, under a mark of its own (a crash partway
        // through the removal finds the mark, and the removal is finished, `Released`).
        let released = Released { disk, dir: &dir };
        let removed = released
            .set()
            .and_then(|()| released.finish(&self.inner.root));
        if let Err(e) = removed {
            tracing::warn!(dir = %dir.display(), error = %e, "a released replica's directory stays");
        }
    }

    fn making_sets(&self) -> std::sync::MutexGuard<'_, BTreeMap<GroupName, MadeOf>> {
        self.inner.making.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The metadata leader's answer to [`PartRpc::Making`] for group `name`.
    pub(super) async fn making(&self, name: GroupName, asker: (NodeId, bool)) -> Making {
        let meta = self.meta();
        if meta.leader() != Some(self.me()) {
            return Making::NotNow("this member does not lead the metadata group".into());
        }
        if !meta.linearize().await {
            return Making::NotNow("the metadata leader could not confirm it leads".into());
        }
        self.making_confirmed(name, asker).await
    }

    /// [`Self::making`], once this member confirmed it leads the metadata group, for the
    /// asking replica `asker.0`. A `fresh` asker (`asker.1`) voted, and openraft
    /// initializes no replica that voted: named in a kept set that another replica makes,
    /// it is told that set and takes the maker's first entry (a replica that voted may);
    /// otherwise, unless one holds some of the group now, it is the maker of a set kept
    /// like any other, and starts again as a new replica (`start_again_blank`) instead of
    /// making it. That set is kept so that no other asker makes the group of it: it names
    /// the replica going away. A set that does not name the asker (it started again since)
    /// is forgotten.
    pub(super) async fn making_confirmed(
        &self,
        name: GroupName,
        (asker, fresh): (NodeId, bool),
    ) -> Making {
        let term = self.meta().status().term;
        let now = self.inner.env.clock.monotonic_nanos();
        let kept = MAKING_KEPT.as_nanos() as u64;
        {
            let mut sets = self.making_sets();
            sets.retain(|_, (t, at, _, _)| *t == term && now < at.saturating_add(kept));
            match sets.get(&name) {
                // A fresh asker is not told a set it makes: it cannot, and starts again.
                Some((_, _, set, maker))
                    if set.contains_key(&asker) && !(fresh && *maker == asker) =>
                {
                    return Making::Of {
                        replicas: set.clone(),
                        maker: *maker,
                    }
                }
                _ => drop(sets.remove(&name)),
            }
        }
        let placed = self.placed_on(name);
        if placed.is_empty() {
            return Making::NotNow("the partition is placed on no member".into());
        }
        let Some((replicas, made)) = self.identified(name, &placed).await else {
            return Making::NotNow("a member did not say which replica it runs".into());
        };
        if made {
            return Making::Made;
        }
        // A fresh asker's set is kept too (it was answered unkept, seed 0x38074a6a): the
        // asker starts again blank, and an asker whose `identified` raced with it (and saw
        // the replica going away) is told this maker, which never initializes, rather than
        // making the group of a replica that is gone, which never gets its quorum. And one
        // that asked first keeps its set: a fresh asker it names takes its first entry.
        let mut sets = self.making_sets();
        let entry = sets.entry(name).or_insert((term, now, replicas, asker));
        Making::Of {
            replicas: entry.2.clone(),
            maker: entry.3,
        }
    }

    /// The replica of group `name` each of the metadata voters' members `placed` runs, and
    /// whether any voter's member (placed or not: a group placement moved away from still
    /// lives where it was) holds some of the group, once every one answered (this
    /// member's own read here; a member running no replica of it answers that).
    async fn identified(
        &self,
        name: GroupName,
        placed: &BTreeSet<MemberId>,
    ) -> Option<(BTreeMap<NodeId, Peer>, bool)> {
        let me = self.me();
        let mut replicas = BTreeMap::new();
        let mut any_made = false;
        for (voter, peer) in self.meta().status().voters {
            let member = member_of(voter);
            let answer = if member == member_of(me) {
                self.group(name)
                    .map(|raft| (id_of(&raft), !never_made(&raft)))
            } else {
                let asked = self.identity(name, me, (member, &peer)).await?;
                asked.map(|(id, made, _)| (id, made))
            };
            match (answer, placed.contains(&member)) {
                (Some((id, made)), true) => {
                    replicas.insert(id, peer.clone());
                    any_made |= made;
                }
                (Some((_, made)), false) => any_made |= made,
                (None, true) => return None,
                (None, false) => {}
            }
        }
        (replicas.len() == placed.len()).then_some((replicas, any_made))
    }

    /// What the metadata leader (`leader`, not this member) says group `name` is to be
    /// made of.
    pub(super) async fn ask_making(
        &self,
        name: GroupName,
        leader: NodeId,
        (asker, fresh): (NodeId, bool),
    ) -> Making {
        let Some(peer) = self.meta().status().voters.get(&leader).cloned() else {
            return Making::NotNow("the metadata leader is no voter".into());
        };
        let envelope = PartEnvelope {
            from: asker,
            to: u64::from(member_of(leader)) << 32,
            rpc: PartRpc::Making { fresh },
        };
        match self
            .networks()
            .call(&peer, name, &envelope, MAKING_LIMIT)
            .await
        {
            Ok(PartReply::Making(making)) => making,
            Ok(_) => Making::NotNow("the metadata leader answered another request".into()),
            Err(e) => Making::NotNow(format!("the metadata leader did not answer: {e}")),
        }
    }

    /// Forwards a write for group `name`, which this member runs no replica of, to placed
    /// member `hint` if it is one, else to the `tries`th placed member.
    pub(super) async fn forward_unplaced(
        &self,
        name: GroupName,
        command: &PartCommand,
        (hint, tries): (Option<MemberId>, usize),
    ) -> Result<(PartOutcome, u64), SendRefused> {
        let placed = self.placed_voters(name);
        // A hint may name a member the group is no longer placed on (its replica leads
        // until it hands the group over).
        let voters = self.meta().status().voters;
        let hinted = voters.iter().find(|(v, _)| Some(member_of(**v)) == hint);
        let Some((&voter, peer)) =
            hinted.or_else(|| placed.iter().nth(tries % placed.len().max(1)))
        else {
            return Err(SendRefused::NotLeader(None));
        };
        let envelope = PartEnvelope {
            from: self.me(),
            to: u64::from(member_of(voter)) << 32,
            rpc: PartRpc::Forwarded(command.clone()),
        };
        let asked = self.networks().call(peer, name, &envelope, FORWARD_LIMIT);
        let to = format!("member {}", member_of(voter));
        super::write::forwarded(asked.await, &to)
    }

    /// A write forwarded by member `from`'s node, which runs no replica of group `name`:
    /// proposed if this member's replica `raft` leads.
    pub(super) async fn take_unplaced(
        &self,
        (name, raft): (GroupName, &PartRaft),
        from: NodeId,
        command: PartCommand,
    ) -> PartReply {
        let status = self.meta().status();
        let of =
            |ids: &BTreeMap<NodeId, Peer>| ids.keys().any(|v| member_of(*v) == member_of(from));
        if !of(&status.voters) && !of(&status.learners) {
            return PartReply::Sent(Err(SendRefused::Failed(format!(
                "member {} is not in the metadata group",
                member_of(from)
            ))));
        }
        let reply = self.propose_here((name, raft), command).await;
        if matches!(reply, PartReply::Sent(Ok(_))) {
            self.counts().taken_unplaced.fetch_add(1, Relaxed);
        }
        reply
    }
}

/// The mark of a released replica's directory (file [`RELEASED_MARK`]), set once its copy
/// was emptied: what is under the mark is going, and is removed wherever it is found
/// (`PartGroups::start`, `remove_strays`), the mark last. A real `remove_dir_all` unlinks
/// one entry at a time in no set order: without the mark, a crash partway could leave a
/// WAL whose repair mark or synced segment is gone, which boot refuses as damage.
pub(super) struct Released<'a> {
    pub(super) disk: &'a dyn Disk,
    pub(super) dir: &'a Path,
}

/// The released mark's file in a group's directory.
pub const RELEASED_MARK: &str = "released";

impl Released<'_> {
    fn path(&self) -> PathBuf {
        self.dir.join(RELEASED_MARK)
    }

    pub(super) fn present(&self) -> io::Result<bool> {
        self.disk.exists(&self.path())
    }

    /// Sets the mark, durably, before anything under it is removed.
    fn set(&self) -> io::Result<()> {
        refill::set_mark(self.disk, self.dir, RELEASED_MARK)
    }

    /// Removes everything but the mark (durably), then the mark with the directory, and
    /// syncs `root`, the directory's parent.
    pub(super) fn finish(&self, root: &Path) -> io::Result<()> {
        for entry in self.disk.read_dir(self.dir)? {
            if entry.name == RELEASED_MARK {
                continue;
            }
            let path = self.dir.join(&entry.name);
            match entry.is_dir {
                true => self.disk.remove_dir_all(&path)?,
                false => self.disk.remove_file(&path)?,
            }
        }
        self.disk.sync_dir(self.dir)?;
        self.disk.remove_dir_all(self.dir)?;
        self.disk.sync_dir(root)
    }
}

//! Quiet groups: an idle partition group's replicas stop their Raft timers (openraft's
//! tick, which otherwise wakes every replica five times a heartbeat), so idle partitions
//! cost neither heartbeats nor wake-ups; one beat from each member to each peer about
//! every heartbeat ([`Beat`]) stands in for all of their groups' heartbeats.
//!
//! | who | finds | does |
//! |---|---|---|
//! | a group's leader | its last applied entry unchanged for [`Tuning::quiet_after`] (five times that where another member is preferred, so `balance` goes first), every voter matched at it, its configuration uniform and without learners | offers the group in its next beat to each other voter's member |
//! | a member the leader's member beats | its replica follows that leader in the offer's vote and applied the offer's last entry | stops its replica's tick; answers that the group sleeps |
//! | the leader | every other voter's member answered so, the group unchanged since the offer | stops its own tick: the group sleeps |
//! | any replica | a Raft request of the group but an empty append (a heartbeat) is answered; this member proposes to the group, makes it, changes its voters or hands it over | starts the tick again: the group wakes |
//! | a follower's member | a sleeping group's leader's member unheard for the shortest election timeout, or heard with another epoch (it restarted) | wakes the group: its election timer, long expired, runs ([`MachineCounts::woken`]) |
//! | any member | a peer heard with another epoch than before | wakes the groups that peer led asleep here (counted too) and those led asleep here with a voter there (its replicas restarted awake, and would elect) |
//! | a member whose replica of a group it led asleep or offered stops or starts again | — | moves its epoch on: the group's followers wake it (a group whose leader's replica is gone elects) |
//! | a member starting its replica of a group never made | — | stops its tick (dormant) until a Raft request, or its making here, wakes it |
//!
//! A whole pass runs every [`QUIET_PASS_EVERY`] beats; every beat looks for silent members.
//! A member's epoch is drawn when its groups start, so a restarted member is told apart
//! from a slow one. A group wakes on any Raft request before it answers the next, and a
//! leader wakes before it proposes: a write is never held by a sleeping group. A follower
//! that wakes on silence while its leader lives costs at most an election (its leader's
//! lease lapsed while the group slept), never an entry.
//!
//! [`Tuning::quiet_after`]: super::groups::Tuning
//! [`MachineCounts::woken`]: super::machine::MachineCounts

use super::balance::preferred;
use super::groups::{never_made, PartGroups};
use super::net::{decode, encode, identity_of, GroupName};
use super::{PartConfig, PartRaft};
use crate::net::PeerClient;
use crate::types::{member_of, MemberId, Peer};
use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;

type Vote = openraft::alias::VoteOf<PartConfig>;
type LogId = openraft::alias::LogIdOf<PartConfig>;

/// The most groups one beat offers to one member (the rest wait for the next beats).
pub const MAX_OFFERS: usize = 4096;
/// A whole pass over the groups (offers, sleeps, the dormant made) every so many beats;
/// the beats between only look for silent members (`wake_followers_of_silent`), so a
/// silent leader's groups still wake within a beat of the election timeout.
pub const QUIET_PASS_EVERY: u64 = 5;
/// A sleeping group's leader is preferred elsewhere: it waits this many times longer.
const UNBALANCED_FACTOR: u64 = 5;

/// What a member tells each peer every heartbeat.
#[derive(Debug, Serialize, Deserialize)]
pub struct Beat {
    /// The sender's epoch, drawn when its groups started.
    pub epoch: u64,
    /// Groups the sender leads that may sleep.
    pub offers: Vec<Offer>,
}

/// A group its leader offers to sleep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    pub group: GroupName,
    /// The leader's vote (committed).
    pub vote: Vote,
    /// Its last applied entry: the last of its log and of every voter's.
    pub applied: LogId,
}

/// A member's answer to a [`Beat`].
#[derive(Debug, Serialize, Deserialize)]
pub struct BeatReply {
    pub epoch: u64,
    /// The offers whose replicas here now sleep.
    pub asleep: Vec<(GroupName, LogId)>,
}

/// This member's quiet groups and what it heard of its peers.
pub struct Quiet {
    /// Drawn when the groups start; moved on when a group this member led asleep or
    /// offered goes (its replica stopped), so its followers wake it ([`Quiet::epoch_moved`]).
    epoch: std::sync::atomic::AtomicU64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// When each peer member was last heard, and its epoch then.
    heard: BTreeMap<MemberId, (u64, u64)>,
    /// Per silent member, the last hearing whose silence the groups following it were
    /// woken for (`wake_followers_of_silent`): one walk per silence, not one per beat.
    swept: BTreeMap<MemberId, u64>,
    groups: BTreeMap<GroupName, Sleep>,
    /// Whether the last pass left a group offered (only a pass offers one): while none
    /// is, a beat's offers need no walk over the groups.
    offering: bool,
}

#[derive(Debug)]
enum Sleep {
    /// Awake since `since` (monotonic nanoseconds), its leader's last applied entry then.
    Awake { since: u64, applied: Option<LogId> },
    /// Offered to the other voters' members `others`; those whose replica sleeps.
    Offered {
        offer: Offer,
        others: BTreeSet<MemberId>,
        asleep: BTreeSet<MemberId>,
    },
    /// Asleep, led here; the other voters' members.
    Leading { others: BTreeSet<MemberId> },
    /// Asleep, led by `leader`'s member in its epoch `epoch`.
    Following { leader: MemberId, epoch: u64 },
    /// A replica of a group never made (its tick stopped when it started): it cannot
    /// elect, and thousands made at once would otherwise each tick fifty times a second
    /// until their making reaches them.
    Dormant,
}

impl Quiet {
    pub fn new(epoch: u64) -> Quiet {
        Quiet {
            epoch: epoch.into(),
            state: Mutex::default(),
        }
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Relaxed)
    }

    /// A group this member led asleep or offered went (its replica stopped, or started
    /// again): a new epoch tells its followers, which wake every group led here.
    fn epoch_moved(&self, gone: Option<&Sleep>) {
        if matches!(gone, Some(Sleep::Leading { .. } | Sleep::Offered { .. })) {
            self.epoch.fetch_add(1, Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This member's replica `raft` of group `name` started: dormant if the group was
    /// never made (a Raft request or its making here wakes it).
    pub fn started(&self, name: GroupName, raft: &PartRaft) {
        let mut state = self.lock();
        let before = state.groups.remove(&name);
        self.epoch_moved(before.as_ref());
        if never_made(raft) {
            raft.runtime_config().tick(false);
            state.groups.insert(name, Sleep::Dormant);
        }
    }

    /// Wakes group `name` (this member's replica `raft`): its tick runs again, and it
    /// counts as awake from `now`. A group with no entry is awake and not yet watched
    /// (a follower's, or a leader's the next pass finds): it takes no entry, so a
    /// follower's appends take none, and its tick is only made sure of (a pass that took
    /// the running groups' names just before a replica started drops its new `Dormant`
    /// entry as gone: its first request starts its tick all the same).
    pub fn wake(&self, name: GroupName, raft: &PartRaft, now: u64) {
        let mut state = self.lock();
        let Some(sleep) = state.groups.get_mut(&name) else {
            raft.runtime_config().tick(true);
            return;
        };
        if matches!(
            sleep,
            Sleep::Leading { .. } | Sleep::Following { .. } | Sleep::Dormant
        ) {
            tracing::debug!(partition = %identity_of(name), "a sleeping group wakes");
            raft.runtime_config().tick(true);
        }
        *sleep = Sleep::Awake {
            since: now,
            applied: None,
        };
    }

    /// Group `name` was dropped because its partition is gone (deleted or purged): its
    /// entry goes without moving the epoch (its peers drop theirs too; no group needs a
    /// new leader).
    pub fn forget(&self, name: GroupName) {
        self.lock().groups.remove(&name);
    }

    /// The groups asleep here (led or followed).
    pub(super) fn sleeping(&self) -> BTreeSet<GroupName> {
        let state = self.lock();
        let asleep = |(_, s): &(&GroupName, &Sleep)| {
            matches!(s, Sleep::Leading { .. } | Sleep::Following { .. })
        };
        state
            .groups
            .iter()
            .filter(asleep)
            .map(|(n, _)| *n)
            .collect()
    }

    /// How many groups sleep here.
    pub fn asleep(&self) -> u64 {
        let state = self.lock();
        let asleep = |s: &&Sleep| matches!(s, Sleep::Leading { .. } | Sleep::Following { .. });
        state.groups.values().filter(asleep).count() as u64
    }

    /// Records that `member` was heard at `now` in `epoch`; whether its epoch changed.
    fn heard(state: &mut State, member: MemberId, epoch: u64, now: u64) -> bool {
        let before = state.heard.insert(member, (now, epoch));
        before.is_some_and(|(_, e)| e != epoch)
    }
}

impl PartGroups {
    /// How many of this member's replicas sleep.
    pub fn asleep(&self) -> u64 {
        self.quiet().asleep()
    }

    /// Beats every peer member every heartbeat and puts idle groups to sleep or wakes them
    /// (the module doc), until the node stops.
    pub(super) async fn beat(self) {
        let mut clients: BTreeMap<(MemberId, String), PeerClient> = BTreeMap::new();
        let mut beats: u64 = 0;
        while self.node().failure().is_none() {
            match beats % QUIET_PASS_EVERY {
                0 => self.quiet_pass(),
                _ => self.wake_followers_of_silent(),
            }
            beats = beats.wrapping_add(1);
            let me = member_of(self.meta().id());
            let peers: BTreeMap<(MemberId, String), Peer> = self
                .meta()
                .status()
                .voters
                .into_iter()
                .filter(|(id, _)| member_of(*id) != me)
                .map(|(id, peer)| ((member_of(id), peer.raft.clone()), peer))
                .collect();
            clients.retain(|key, _| peers.contains_key(key));
            for (key, peer) in &peers {
                let target = u64::from(key.0) << 32;
                let networks = self.networks();
                clients
                    .entry(key.clone())
                    .or_insert_with(|| networks.client(target, peer));
            }
            // Room for a reconnection and its handshake; a beat late by that much is
            // still well within the silence followers wait for.
            let limit = self.tuning().election.0 / 2;
            let calls = clients.iter_mut().map(|((member, _), client)| {
                let beat = Beat {
                    epoch: self.quiet().epoch(),
                    offers: self.offers_for(*member),
                };
                async move {
                    let body = encode(&beat).ok()?;
                    let reply = client.call_beat(body, limit).await.ok()?;
                    Some((*member, decode::<BeatReply>(&reply).ok()?))
                }
            });
            let replies = futures_util::future::join_all(calls).await;
            for (member, reply) in replies.into_iter().flatten() {
                self.take_beat_reply(member, reply);
            }
            self.env().clock.sleep(self.tuning().heartbeat).await;
        }
    }

    /// The groups offered to `member` that its replicas have not said they sleep in.
    fn offers_for(&self, member: MemberId) -> Vec<Offer> {
        let state = self.quiet().lock();
        if !state.offering {
            return Vec::new();
        }
        let wanted = |s: &Sleep| match s {
            Sleep::Offered {
                offer,
                others,
                asleep,
            } if others.contains(&member) && !asleep.contains(&member) => Some(offer.clone()),
            _ => None,
        };
        state
            .groups
            .values()
            .filter_map(wanted)
            .take(MAX_OFFERS)
            .collect()
    }

    /// A peer's answer to this member's beat.
    fn take_beat_reply(&self, member: MemberId, reply: BeatReply) {
        let now = self.env().clock.monotonic_nanos();
        let changed = {
            let mut state = self.quiet().lock();
            let changed = Quiet::heard(&mut state, member, reply.epoch, now);
            for (group, applied) in reply.asleep {
                if let Some(Sleep::Offered { offer, asleep, .. }) = state.groups.get_mut(&group) {
                    if offer.applied == applied {
                        asleep.insert(member);
                    }
                }
            }
            changed
        };
        if changed {
            self.wake_member(member);
        }
    }

    /// Answers peer `from`'s beat: its offers whose replicas here may sleep now sleep.
    pub(super) fn answer_beat(&self, from: MemberId, body: &[u8]) -> Vec<u8> {
        let now = self.env().clock.monotonic_nanos();
        let mut asleep = Vec::new();
        let changed = match decode::<Beat>(body) {
            Err(e) => {
                tracing::warn!(from, error = %e, "a peer's beat does not decode");
                false
            }
            Ok(beat) => {
                // The handles of the offered groups only.
                let running: BTreeMap<GroupName, PartRaft> = {
                    let running = self.running();
                    (beat.offers.iter().take(MAX_OFFERS))
                        .filter_map(|o| Some((o.group, running.get(&o.group)?.clone())))
                        .collect()
                };
                let mut state = self.quiet().lock();
                let changed = Quiet::heard(&mut state, from, beat.epoch, now);
                for offer in beat.offers.into_iter().take(MAX_OFFERS) {
                    let Some(raft) = running.get(&offer.group) else {
                        continue;
                    };
                    if !follows(raft, from, &offer) {
                        continue;
                    }
                    tracing::debug!(partition = %identity_of(offer.group), "a group this member follows sleeps");
                    raft.runtime_config().tick(false);
                    let leader = Sleep::Following {
                        leader: from,
                        epoch: beat.epoch,
                    };
                    state.groups.insert(offer.group, leader);
                    asleep.push((offer.group, offer.applied));
                }
                changed
            }
        };
        if changed {
            self.wake_member(from);
        }
        let reply = BeatReply {
            epoch: self.quiet().epoch(),
            asleep,
        };
        encode(&reply).unwrap_or_default()
    }

    /// Wakes the groups member `member` restarted in (another epoch): those it led asleep
    /// here (its replicas restarted awake), and those led asleep here with a voter there
    /// (its replicas would elect, the leader's lease long lapsed).
    fn wake_member(&self, member: MemberId) {
        let running = self.running_groups();
        let now = self.env().clock.monotonic_nanos();
        let (followed, led): (Vec<GroupName>, Vec<GroupName>) = {
            let state = self.quiet().lock();
            let mut followed = Vec::new();
            let mut led = Vec::new();
            for (name, sleep) in &state.groups {
                match sleep {
                    Sleep::Following { leader, .. } if *leader == member => followed.push(*name),
                    Sleep::Leading { others } | Sleep::Offered { others, .. }
                        if others.contains(&member) =>
                    {
                        led.push(*name)
                    }
                    _ => {}
                }
            }
            (followed, led)
        };
        for name in &followed {
            if let Some(raft) = running.get(name) {
                self.quiet().wake(*name, raft, now);
                self.counts().woken.fetch_add(1, Relaxed);
            }
        }
        for name in &led {
            if let Some(raft) = running.get(name) {
                self.quiet().wake(*name, raft, now);
            }
        }
    }

    /// Between passes, each beat: wakes the groups following a leader whose member went
    /// silent (a walk over the groups only while some member is silent).
    fn wake_followers_of_silent(&self) {
        if self.hooks().deaf_when_quiet {
            return;
        }
        let now = self.env().clock.monotonic_nanos();
        let silent_after = self.tuning().election.0.as_nanos() as u64;
        let followed: Vec<GroupName> = {
            let mut state = self.quiet().lock();
            let silent: BTreeMap<MemberId, u64> = (state.heard.iter())
                .filter(|(_, (at, _))| now.saturating_sub(*at) > silent_after)
                .filter(|(member, (at, _))| state.swept.get(member) != Some(at))
                .map(|(member, (at, _))| (*member, *at))
                .collect();
            if silent.is_empty() {
                return;
            }
            // A group follows a member asleep only on its beat, which moves its hearing:
            // none can start following it during this silence once swept.
            state.swept.extend(silent.iter().map(|(m, at)| (*m, *at)));
            let of_silent = |(name, sleep): (&GroupName, &Sleep)| match sleep {
                Sleep::Following { leader, .. } if silent.contains_key(leader) => Some(*name),
                _ => None,
            };
            state.groups.iter().filter_map(of_silent).collect()
        };
        if followed.is_empty() {
            return;
        }
        let running = self.running_groups();
        for name in followed {
            if let Some(raft) = running.get(&name) {
                tracing::debug!(partition = %identity_of(name), "a sleeping group's leader's member went silent");
                self.quiet().wake(name, raft, now);
                self.counts().woken.fetch_add(1, Relaxed);
            }
        }
    }

    /// One pass over the groups: a leader's idle groups offered, offered groups every
    /// voter's member sleeps in put to sleep here, sleeping groups whose leader's member
    /// went silent or restarted woken.
    fn quiet_pass(&self) {
        let now = self.env().clock.monotonic_nanos();
        // Sleeping groups are most of them at rest: only the names of all are taken, and
        // the handles of the others (those a pass may step).
        let sleeping = self.quiet().sleeping();
        let (names, awake): (BTreeSet<GroupName>, BTreeMap<GroupName, PartRaft>) = {
            let running = self.running();
            let names = running.keys().copied().collect();
            let awake = (running.iter())
                .filter(|(name, _)| !sleeping.contains(name))
                .map(|(name, raft)| (*name, raft.clone()))
                .collect();
            (names, awake)
        };
        let me = member_of(self.meta().id());
        let silent_after = self.tuning().election.0.as_nanos() as u64;
        let deaf = self.hooks().deaf_when_quiet;
        let mut woken = Vec::new();
        let mut made = Vec::new();
        let mut offering = false;
        {
            let mut state = self.quiet().lock();
            // A group led asleep or offered here whose replica stopped: a new epoch.
            let gone: Vec<GroupName> = (state.groups.keys())
                .filter(|name| !names.contains(name))
                .copied()
                .collect();
            for name in gone {
                let sleep = state.groups.remove(&name);
                self.quiet().epoch_moved(sleep.as_ref());
            }
            // Groups following a leader whose member went silent or restarted wake.
            for (name, sleep) in &state.groups {
                let Sleep::Following { leader, epoch } = sleep else {
                    continue;
                };
                let alive = state
                    .heard
                    .get(leader)
                    .is_some_and(|&(at, e)| e == *epoch && now.saturating_sub(at) <= silent_after);
                if !alive && !deaf {
                    tracing::debug!(partition = %identity_of(*name), leader, "a sleeping group's leader's member went silent or restarted");
                    woken.push(*name);
                }
            }
            // Asleep groups stay in place; only the others are stepped.
            for (name, raft) in &awake {
                match state.groups.get(name) {
                    // Put to sleep since the names were taken: left for the next pass.
                    Some(Sleep::Following { .. } | Sleep::Leading { .. }) => {}
                    // Made without a request reaching it first: wakes (below).
                    Some(Sleep::Dormant) => {
                        if !never_made(raft) {
                            made.push(*name);
                        }
                    }
                    _ => {
                        let sleep = state.groups.remove(name);
                        if let Some(next) = self.leader_step(*name, raft, sleep, (me, now)) {
                            offering |= matches!(next, Sleep::Offered { .. });
                            state.groups.insert(*name, next);
                        }
                    }
                }
            }
            state.offering = offering;
        }
        for name in woken {
            if let Some(raft) = self.group(name) {
                self.quiet().wake(name, &raft, now);
                self.counts().woken.fetch_add(1, Relaxed);
            }
        }
        for name in made {
            self.quiet().wake(name, &awake[&name], now);
        }
    }

    /// What an awake or offered group `name` becomes at this pass, as its replica here
    /// (`raft`) finds it; `None` where it does not lead.
    fn leader_step(
        &self,
        name: GroupName,
        raft: &PartRaft,
        sleep: Option<Sleep>,
        (me, now): (MemberId, u64),
    ) -> Option<Sleep> {
        let (offer, others) = idle_offer(name, raft)?;
        let awake = Sleep::Awake {
            since: now,
            applied: Some(offer.applied),
        };
        let Some(sleep) = sleep else {
            return Some(awake);
        };
        let members: BTreeSet<MemberId> = others.iter().copied().chain([me]).collect();
        let wait = self.tuning().quiet_after.as_nanos() as u64;
        let wait = match preferred(name, &members) {
            Some(m) if m != me => wait * UNBALANCED_FACTOR,
            _ => wait,
        };
        match sleep {
            Sleep::Awake { since, applied } if applied == Some(offer.applied) => {
                if now.saturating_sub(since) < wait {
                    return Some(Sleep::Awake { since, applied });
                }
                let asleep = BTreeSet::new();
                Some(Sleep::Offered {
                    offer,
                    others,
                    asleep,
                })
            }
            Sleep::Offered {
                offer: offered,
                others: offered_to,
                asleep,
            } if offered == offer && offered_to == others => {
                if asleep.is_superset(&others) {
                    tracing::debug!(partition = %identity_of(name), "a group this member leads sleeps");
                    raft.runtime_config().tick(false);
                    self.counts().slept.fetch_add(1, Relaxed);
                    return Some(Sleep::Leading { others });
                }
                Some(Sleep::Offered {
                    offer,
                    others,
                    asleep,
                })
            }
            _ => Some(awake),
        }
    }
}

/// The offer of `raft`'s group, and the other voters' members, if it leads the group and
/// the group is idle: every voter matched at the last applied entry, which ends its log;
/// a uniform configuration without learners; a committed vote.
fn idle_offer(group: GroupName, raft: &PartRaft) -> Option<(Offer, BTreeSet<MemberId>)> {
    let metrics = raft.metrics();
    let m = metrics.borrow_watched();
    if m.state != ServerState::Leader || !m.vote.is_committed() {
        return None;
    }
    let applied = m.last_applied?;
    if m.last_log_index != Some(applied.index) {
        return None;
    }
    let membership = m.membership_config.membership();
    if membership.get_joint_config().len() != 1 || membership.learner_ids().next().is_some() {
        return None;
    }
    let replication = m.replication.as_ref()?;
    let mut others = BTreeSet::new();
    for voter in membership.voter_ids().filter(|v| *v != m.id) {
        if replication.get(&voter).cloned().flatten() != Some(applied) {
            return None;
        }
        others.insert(member_of(voter));
    }
    let offer = Offer {
        group,
        vote: m.vote,
        applied,
    };
    Some((offer, others))
}

/// Whether `raft`, this member's replica, follows member `leader`'s replica in `offer`'s
/// vote and applied its last entry, the last of its log.
fn follows(raft: &PartRaft, leader: MemberId, offer: &Offer) -> bool {
    let metrics = raft.metrics();
    let m = metrics.borrow_watched();
    m.state == ServerState::Follower
        && m.vote == offer.vote
        && m.current_leader.map(member_of) == Some(leader)
        && m.last_applied == Some(offer.applied)
        && m.last_log_index == Some(offer.applied.index)
}

//! Directed scenarios of the cluster world: schedules the nemesis would reach only by luck,
//! scripted, and judged by the same oracle as every seed.
//!
//! **A blank replica must not elect a leader that lacks acknowledged ops.** Three replicas:
//! L leads, F follows, C is cut off from both. Ops are acknowledged by L and F alone. Then L
//! crashes and F comes back blank (its state record lost, or its disk replaced), and C and
//! F can talk. If F were still the replica it was (the `vote-after-lost-state` canary), it
//! would grant C its vote with no memory of its vote or log, C would lead without the ops,
//! and its first entry would take their place: the oracle sees two entries at one index
//! (agreement) or an acknowledged op missing. Since F is a new replica, C's requests, meant
//! for the old F, do not reach it: no leader until L is back, then L leads with every op,
//! and the administrator replaces the old F with the new one.
//!
//! **A blank founder does not found a second group.** The founder (the lowest member id)
//! comes back on a blank disk while another replica restarts beside it: a founder that took
//! the restarting replica for an empty one would make a new group over the live one. It
//! must find the group, wait, and be added by the administrator, with every op kept.
//!
//! **An adoption cut short is finished at the next boot.** A member is down while a topic
//! is deleted, another purged and a third made, a group it stored an offset for deleted
//! and its id taken by a new one, and the leader's log moves on past a snapshot: the member
//! comes back, is sent the snapshot, and its node crashes inside the adoption's directory
//! work (removing the deleted topic's partition). Its next boot must finish the work (the
//! `adoption-work-forgotten` canary takes it as done): no partition fenced, its disk holds
//! exactly its state's partitions, and the new group holds no offset of the old one. Where
//! it missed only removals, that canary fences nothing: the oracle of each node's disk
//! catches the deleted topic's partition left there.
//!
//! **Two of a partition's three copies move at once.** Five members, topics of
//! replication factor 3: the members of two of a partition's placed copies are removed one
//! after the other, before its group reconciles, so that it is placed on two new members
//! while its old replicas still vote; once its group settles on the new members, both are
//! added back and the copies move back. The old replicas, left out meanwhile, catch up;
//! the interim copies are released; every acknowledged message is on the copies placed at
//! the end. **A release cut short is finished**: the same, where an interim member
//! crashes inside the removal of the replica it releases (a real `remove_dir_all` leaves any
//! of the directory's files gone); its boot must finish the release, not refuse the WAL
//! that is left.
//!
//! **A member is removed and added back, one change at a time.** The leader asked to remove
//! its own member hands leadership over and names the next leader, which removes it; while
//! that leader adds it back, a second change (removing another member) is refused, not
//! made beside the first; the member is a voter again and every op is kept.

use super::workload::Op;
use super::{
    run_script, ClusterProfile, ClusterReport, Counts, Script, World, INV_ACKED_PRESENT,
    INV_LIVENESS,
};
use crate::report::INV_ASSERTION;
use cairn_cluster::types::MemberId;
use std::time::Duration;

/// A scripted schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// F loses only its state record (its vote and identity); its files are set aside.
    BlankVoterStateLost,
    /// F's disk is replaced by a blank one.
    BlankVoterDiskReplaced,
    /// The founder's disk is replaced while another replica restarts.
    BlankFounder,
    /// The leader stops gracefully with every other replica up.
    LeaderHandover,
    /// A member far behind crashes inside adopting the leader's state.
    AdoptionCutShort,
    /// The same, where what it missed only removes (nothing for boot to fence).
    AdoptionOfRemovalsCutShort,
    /// The leader's member is removed and added back; a change asked meanwhile is refused.
    RemovedAndAddedBack,
    /// A partition group falls asleep (`quiet`), then its leader's member dies and stays
    /// down: its followers must wake and elect one of themselves.
    QuietLeaderDies,
    /// Two of a partition's three copies move to other members at once, and back.
    TwoCopiesMove,
    /// The same, where an interim member crashes inside a release's removal.
    ReleaseCutShort,
}

/// Every directed scenario, by name.
pub const SCENARIOS: [(&str, Scenario); 10] = [
    (
        "a_replica_that_lost_its_vote_does_not_elect_a_leader_without_acknowledged_ops",
        Scenario::BlankVoterStateLost,
    ),
    (
        "a_replica_on_a_blank_disk_does_not_elect_a_leader_without_acknowledged_ops",
        Scenario::BlankVoterDiskReplaced,
    ),
    (
        "a_blank_founder_rejoins_the_group_instead_of_making_another",
        Scenario::BlankFounder,
    ),
    (
        "a_stopping_leader_hands_over_before_it_goes",
        Scenario::LeaderHandover,
    ),
    (
        "an_adoption_cut_short_is_finished_at_the_next_boot",
        Scenario::AdoptionCutShort,
    ),
    (
        "an_adoption_of_removals_cut_short_is_finished_at_the_next_boot",
        Scenario::AdoptionOfRemovalsCutShort,
    ),
    (
        "a_member_is_removed_and_added_back_one_change_at_a_time",
        Scenario::RemovedAndAddedBack,
    ),
    (
        "a_sleeping_group_whose_leader_dies_elects_another",
        Scenario::QuietLeaderDies,
    ),
    (
        "two_copies_of_a_partition_move_at_once_and_back",
        Scenario::TwoCopiesMove,
    ),
    (
        "a_release_cut_short_is_finished_at_the_next_boot",
        Scenario::ReleaseCutShort,
    ),
];

/// Entries between the group's snapshots in [`Scenario::AdoptionCutShort`] (elsewhere, none
/// is taken).
const ADOPTION_SNAPSHOT_EVERY: u64 = 8;

/// The seed every scenario runs with (its entropy, disks and network).
const SEED: u64 = 0xb1a4c;
/// How long one step may take to get its proposal acknowledged.
const STEP_DEADLINE: Duration = Duration::from_secs(20);
/// How long C and the blank F are left alone together.
const ALONE: Duration = Duration::from_secs(5);

/// Runs the scenario `name`, if there is one of that name.
pub fn run(name: &str) -> Option<ClusterReport> {
    let (_, scenario) = SCENARIOS.iter().find(|(n, _)| *n == name)?;
    Some(run_scenario(*scenario, false))
}

/// Runs `scenario`.
pub fn run_scenario(scenario: Scenario, verbose: bool) -> ClusterReport {
    run_scenario_seeded(scenario, SEED, verbose)
}

/// Runs `scenario` with `seed` for its entropy, disks and network (what a crash inside a
/// disk call leaves, among others).
pub fn run_scenario_seeded(scenario: Scenario, seed: u64, verbose: bool) -> ClusterReport {
    let moving = matches!(
        scenario,
        Scenario::TwoCopiesMove | Scenario::ReleaseCutShort
    );
    let profile = ClusterProfile {
        replicas: if moving { 5 } else { 3 },
        ops: 0,
        crash: 0.0,
        power_loss: 0.0,
        partition: 0.0,
        bounce: 0.0,
        heal: 0.0,
        crash_leader: 0.0,
        nemesis_gap_ms: 1000,
        snapshot_every: match scenario {
            Scenario::AdoptionCutShort | Scenario::AdoptionOfRemovalsCutShort => {
                ADOPTION_SNAPSHOT_EVERY
            }
            // Partition groups checkpoint every 2 sends: the WAL a release leaves holds
            // none of the messages its copy held.
            Scenario::ReleaseCutShort => ADOPTION_SNAPSHOT_EVERY,
            _ => 1000,
        },
        blank: 0.0,
        state_lost: match scenario {
            Scenario::BlankVoterStateLost => 1.0,
            _ => 0.0,
        },
        graceful: 0.0,
        total_power_loss: 0.0,
        clock_skew: 0.0,
        // As a server runs them: a node applies each replica's commands.
        nodes: true,
        remove: 0.0,
        messages: scenario == Scenario::QuietLeaderDies || moving,
        factor: if moving { 3 } else { 0 },
    };
    run_script(seed, verbose, profile, Script::Directed(scenario), false)
}

pub(super) async fn play(mut world: World, scenario: Scenario) -> Counts {
    world.nemesis_on = false;
    world.event(format!("directed scenario {scenario:?}"));
    for at in 0..world.replicas.len() {
        world.start(at).await;
    }
    if world.acknowledge("a").await {
        match scenario {
            Scenario::BlankFounder => blank_founder(&mut world).await,
            Scenario::LeaderHandover => handover(&mut world).await,
            Scenario::AdoptionCutShort => adoption_cut_short(&mut world, false).await,
            Scenario::AdoptionOfRemovalsCutShort => adoption_cut_short(&mut world, true).await,
            Scenario::RemovedAndAddedBack => removed_and_added_back(&mut world).await,
            Scenario::QuietLeaderDies => quiet_leader_dies(&mut world).await,
            Scenario::TwoCopiesMove => two_copies_move(&mut world, false).await,
            Scenario::ReleaseCutShort => two_copies_move(&mut world, true).await,
            _ => blank_voter(&mut world).await,
        }
    }
    world.counts()
}

/// The schedule of the module doc, from a cluster that acknowledged its first op.
async fn blank_voter(world: &mut World) {
    let Some(l) = world.leader_at() else {
        world.fail(INV_LIVENESS, "no leader after the first op".into());
        return;
    };
    let (f, c) = ((l + 1) % 3, (l + 2) % 3);
    let ip = |at: usize| world.replicas[at].ip;
    let (ip_l, ip_f, ip_c) = (ip(l), ip(f), ip(c));
    world.net.partition(ip_c, ip_l);
    world.net.partition(ip_c, ip_f);
    world.event(format!("partition {} | {} and {}", c + 1, l + 1, f + 1));
    for name in ["x0", "x1", "x2"] {
        if !world.acknowledge(name).await {
            return;
        }
    }
    world.crash(l);
    world.crash(f);
    world.blank(f).await;
    world.net.heal();
    world.event("heal (the leader stays down)".into());
    // C and the blank F alone: a proposal goes through only if they made a leader.
    let alone_until = world.clock.now_nanos() + ALONE.as_nanos() as u64;
    while world.clock.now_nanos() < alone_until && !world.failed() {
        if world.propose("y").await {
            world.event("y went through without the old leader".into());
            break;
        }
        cairn_engine::env::Clock::sleep(&world.clock, Duration::from_millis(100)).await;
    }
    world.net.power_on(ip_l);
    world.start(l).await;
    world.judge_final().await;
    if !world.failed() && !world.acked.contains_key("x2") {
        world.fail(INV_ACKED_PRESENT, "x2 was never acknowledged".into());
    }
}

/// The founder (replica 0) on a blank disk, replica 1 restarting beside it.
async fn blank_founder(world: &mut World) {
    world.crash(0);
    world.crash(1);
    world.blank(0).await;
    world.start(1).await;
    for name in ["b0", "b1", "b2"] {
        if !world.acknowledge(name).await {
            return;
        }
    }
    world.judge_final().await;
}

/// The leader stops gracefully: another replica must lead before it is gone, and the next
/// op goes through it.
async fn handover(world: &mut World) {
    let Some(l) = world.leader_at() else {
        world.fail(INV_LIVENESS, "no leader after the first op".into());
        return;
    };
    if world.stop_gracefully(l).await.is_none() {
        world.fail(
            INV_LIVENESS,
            "a leader stopping with every other replica up handed leadership to none".into(),
        );
        return;
    }
    if world.acknowledge("h0").await {
        world.net.power_on(world.replicas[l].ip);
        world.start(l).await;
        world.judge_final().await;
    }
}

/// A group of one partition sleeps, then its leader's member crashes and stays down: a
/// send through another member must go through (a new leader) well within the step's
/// deadline, and the followers' members count the wake.
async fn quiet_leader_dies(world: &mut World) {
    use iggy_binary_protocol::WirePartitioning;
    if !world.acknowledge("a/t1").await {
        return;
    }
    let to_zero = || WirePartitioning::PartitionId(0);
    let deadline = world.clock.now_nanos() + STEP_DEADLINE.as_nanos() as u64;
    while world.messages.acked.is_empty() && world.clock.now_nanos() < deadline {
        world.send_messages("a/t1", to_zero()).await;
    }
    // Idle past the leader's wait (the preferred member's, or five times that), and a beat.
    let idle = cairn_cluster::partition::groups::QUIET_AFTER * 6;
    cairn_engine::env::Clock::sleep(&world.clock, idle).await;
    let slept: u64 = world
        .replicas
        .iter()
        .filter_map(|r| r.parts.as_ref())
        .map(|p| p.asleep())
        .sum();
    world.event(format!("{slept} replicas of partition groups asleep"));
    let Some(l) = (0..3).find(|&at| world.member_leads(at, "a/t1", 0) == Some(true)) else {
        world.fail(INV_LIVENESS, "partition 0 of a/t1 has no leader".into());
        return;
    };
    world.crash_as(l, false);
    let before = world.messages.acked.len();
    let deadline = world.clock.now_nanos() + STEP_DEADLINE.as_nanos() as u64;
    while world.messages.acked.len() == before && world.clock.now_nanos() < deadline {
        world.send_messages("a/t1", to_zero()).await;
        cairn_engine::env::Clock::sleep(&world.clock, Duration::from_millis(50)).await;
    }
    if world.messages.acked.len() == before {
        world.fail(
            INV_LIVENESS,
            "no send went through after the sleeping group's leader died".into(),
        );
        return;
    }
    let woken: u64 = world
        .replicas
        .iter()
        .filter_map(|r| r.parts.as_ref())
        .map(|p| p.counts().woken.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    if slept > 0 && woken > 0 {
        world.decision("ClusterQuietWoken");
    }
    world.start(l).await;
    world.judge_final().await;
}

/// Sends to partition 0 of `topic` until `count` more sends were acknowledged; false (the
/// world failed) when they were not within [`STEP_DEADLINE`].
async fn acknowledge_sends(world: &mut World, topic: &str, count: usize) -> bool {
    let to_zero = || iggy_binary_protocol::WirePartitioning::PartitionId(0);
    let target = world.messages.acked.len() + count;
    let deadline = world.clock.now_nanos() + STEP_DEADLINE.as_nanos() as u64;
    while world.messages.acked.len() < target && world.clock.now_nanos() < deadline {
        world.send_messages(topic, to_zero()).await;
    }
    let done = world.messages.acked.len() >= target;
    if !done {
        world.fail(
            INV_LIVENESS,
            format!("{count} sends to {topic} were not acknowledged"),
        );
    }
    done
}

/// The module doc's scenario of two copies moving at once.
async fn two_copies_move(world: &mut World, cut_short: bool) {
    use cairn_cluster::group::MemberChange;
    use cairn_cluster::types::member_of;
    if !world.acknowledge("a/t1").await || !acknowledge_sends(world, "a/t1", 3).await {
        return;
    }
    let node = world.replicas.iter().find_map(|r| r.node.clone());
    let identity = node.and_then(|n| super::messages::identity_of(&n, "a/t1", 0));
    let (Some(identity), Some(l)) = (identity, world.leader_at()) else {
        return world.fail(INV_LIVENESS, "no partition 0 of a/t1, or no leader".into());
    };
    let Some(placed) = world.placed_members_known(identity) else {
        return world.fail(INV_LIVENESS, "the placement of a/t1 is unknown".into());
    };
    let leader_member = world.replicas[l].id;
    let moving: Vec<MemberId> = placed
        .iter()
        .copied()
        .filter(|m| *m != leader_member)
        .take(2)
        .collect();
    let leader = world.replicas[l].group.clone().expect("up");
    let at = |world: &World, m: MemberId| world.replicas.iter().position(|r| r.id == m);
    for &m in &moving {
        let at = at(world, m).expect("a member");
        world.replicas[at].joined = false;
        match leader.change(MemberChange::Remove { member: m }).await {
            Ok(status) if !status.joint && status.voters.keys().all(|v| member_of(*v) != m) => {
                world.decision("ClusterReplicaRemoved");
                world.event(format!("member {m} removed"));
            }
            other => {
                let evidence = format!("removing member {m} answered {other:?}");
                return world.fail(INV_ASSERTION, evidence);
            }
        }
    }
    let moved = world.placed_members_known(identity).unwrap_or_default();
    let new: Vec<_> = moved.difference(&placed).collect();
    world.event(format!(
        "partition 0 of a/t1 placed on {placed:?}, then {moved:?}"
    ));
    if new.len() != 2 {
        let evidence = format!("two copies were to move: placed on {placed:?}, then {moved:?}");
        return world.fail(INV_ASSERTION, evidence);
    }
    // Removed members keep what they run (an operator stops them): the new configuration
    // leaves their replicas out.
    if !acknowledge_sends(world, "a/t1", 3).await || !moved_to(world, identity, &moved).await {
        return;
    }
    let interim: Vec<MemberId> = new.into_iter().copied().collect();
    for &m in &moving {
        let peer = super::members(5)[&m].clone();
        let at = at(world, m).expect("a member");
        match leader.change(MemberChange::Add { member: m, peer }).await {
            Ok(status) if !status.joint => {
                let incarnation = world.replicas[at].incarnation;
                world.replicas[at].joined =
                    incarnation.is_some_and(|i| status.voters.contains_key(&i));
                world.event(format!("member {m} added back"));
            }
            other => {
                let evidence = format!("adding member {m} back answered {other:?}");
                return world.fail(INV_ASSERTION, evidence);
            }
        }
    }
    if cut_short && !release_cut_short(world, interim[0]).await {
        return;
    }
    // Back where they were: the old replicas, left out meanwhile, catch up; the interim
    // copies, placed elsewhere again, are released.
    let placed = world.placed_members(identity);
    if acknowledge_sends(world, "a/t1", 3).await
        && moved_to(world, identity, &placed).await
        && released_on(world, identity, &interim).await
    {
        world.judge_final().await;
    }
}

/// Member `m` crashes (or, on odd seeds, loses power) at its next removal under its
/// groups' directories (the release of a replica it keeps), then boots again; false (the world failed) when it never
/// reached one within [`STEP_DEADLINE`].
async fn release_cut_short(world: &mut World, m: MemberId) -> bool {
    use cairn_cluster::partition::groups::RELEASED_MARK;
    use cairn_cluster::partition::refill::REPAIR_MARK;
    use cairn_faults::disk::{Call, Scripted};
    use std::path::PathBuf;
    let at = world
        .replicas
        .iter()
        .position(|r| r.id == m)
        .expect("a member");
    world.replicas[at].disk.script(Scripted::CrashOnCall {
        call: Call::Remove,
        part: "cluster/partitions/".into(),
    });
    world.replicas[at].armed = true;
    let deadline = world.clock.now_nanos() + STEP_DEADLINE.as_nanos() as u64;
    while !world.replicas[at].disk.is_crashed() {
        if world.clock.now_nanos() >= deadline || world.failed() {
            let evidence = format!("member {m} never removed a released replica's files");
            world.fail(INV_LIVENESS, evidence);
            return false;
        }
        cairn_engine::env::Clock::sleep(&world.clock, Duration::from_millis(50)).await;
    }
    // A process crash: the unlinks made before it stay (a power loss would bring back
    // those not synced).
    // Inside the release: its own mark is there (or, without one, its WAL's repair mark).
    let under = PathBuf::from(format!("/data/{m}/cluster/partitions"));
    let names = world.replicas[at].disk.paths_under(&under);
    let marked = |mark: &str| names.iter().any(|p| p.ends_with(mark));
    if !marked(RELEASED_MARK) && !marked(REPAIR_MARK) {
        let evidence = format!("member {m} crashed at a removal outside a release: {names:?}");
        world.fail(INV_ASSERTION, evidence);
        return false;
    }
    // Seeds alternate a process crash (the unlinks made stay) and a power loss (only the
    // synced ones do).
    let power = world.seed % 2 == 1;
    let kind = if power { "loses power" } else { "crashes" };
    world.event(format!("member {m} {kind} inside a release's removal"));
    world.crash_as(at, power);
    world.restart_all().await;
    true
}

/// Waits until each of `members` runs no replica of partition `identity`, none refused to
/// start, and its copy is empty (released); false (the world failed) when one did not within [`STEP_DEADLINE`].
async fn released_on(
    world: &mut World,
    identity: cairn_engine::partition::PartitionIdentity,
    members: &[MemberId],
) -> bool {
    let key = cairn_engine::state::key_of(&identity);
    let deadline = world.clock.now_nanos() + STEP_DEADLINE.as_nanos() as u64;
    while world.clock.now_nanos() < deadline {
        let mut released = 0;
        for &m in members {
            let Some(r) = world.replicas.iter().find(|r| r.id == m) else {
                continue;
            };
            let views = r.parts.as_ref().map(|p| p.views()).unwrap_or_default();
            // Not running because its start is refused (a WAL a release left behind) is
            // not released.
            let runs = views
                .iter()
                .any(|v| v.partition == identity && (v.replica.is_some() || v.failed.is_some()));
            let Some(node) = r.node.clone() else { continue };
            let held = node.client(0).local_partition_info(key).await;
            let empty = held.is_ok_and(|i| i.is_some_and(|i| i.visible_next_offset == Some(0)));
            released += usize::from(!runs && empty);
        }
        if released == members.len() {
            world.event(format!("members {members:?} released their copies"));
            return true;
        }
        cairn_engine::env::Clock::sleep(&world.clock, Duration::from_millis(50)).await;
    }
    world.fail(
        INV_LIVENESS,
        format!("members {members:?} never released their copies"),
    );
    false
}

/// Waits until the group of partition `identity` is settled on replicas of `members` only
/// (its leader's configuration, not joint); false (the world failed) when it was not within
/// [`STEP_DEADLINE`].
async fn moved_to(
    world: &mut World,
    identity: cairn_engine::partition::PartitionIdentity,
    members: &std::collections::BTreeSet<MemberId>,
) -> bool {
    use cairn_cluster::types::member_of;
    let deadline = world.clock.now_nanos() + STEP_DEADLINE.as_nanos() as u64;
    while world.clock.now_nanos() < deadline {
        let views = world.part_views_of_all();
        let settled = views.iter().flatten().any(|v| {
            let on: std::collections::BTreeSet<MemberId> =
                v.voters.iter().map(|id| member_of(*id)).collect();
            v.partition == identity
                && v.replica.is_some()
                && v.leader == v.replica
                && !v.joint
                && on == *members
        });
        if settled {
            world.event(format!("partition 0 of a/t1 settled on {members:?}"));
            return true;
        }
        cairn_engine::env::Clock::sleep(&world.clock, Duration::from_millis(50)).await;
    }
    world.fail(
        INV_LIVENESS,
        format!("partition 0 of a/t1 never settled on {members:?}"),
    );
    false
}

/// The leader's member removed through the leader (which hands over) and its successor,
/// then added back while a second change is refused.
async fn removed_and_added_back(world: &mut World) {
    use cairn_cluster::group::{MemberChange, ProposeError};
    use cairn_cluster::types::member_of;
    use cairn_engine::env::{race, Either};
    let Some(l) = world.leader_at() else {
        world.fail(INV_LIVENESS, "no leader after the first op".into());
        return;
    };
    let (old, id) = (
        world.replicas[l].group.clone().expect("up"),
        world.replicas[l].id,
    );
    let remove = |member| MemberChange::Remove { member };
    // Asked to remove itself, the leader hands over first and names its successor.
    let successor = match old.change(remove(id)).await {
        Err(ProposeError::NotLeader {
            leader: Some(next), ..
        }) if member_of(next) != id => member_of(next),
        other => {
            let evidence = format!("a leader asked to remove itself answered {other:?}");
            return world.fail(INV_ASSERTION, evidence);
        }
    };
    let at = |m| {
        world
            .replicas
            .iter()
            .position(|r| r.id == m)
            .expect("a member")
    };
    let n = at(successor);
    let leader = world.replicas[n].group.clone().expect("up");
    world.replicas[l].joined = false;
    // The old leader names its successor once it granted it its vote: the successor may
    // take a moment more to hold its election won.
    let mut removed = leader.change(remove(id)).await;
    for _ in 0..50 {
        if !matches!(removed, Err(ProposeError::NotLeader { .. })) {
            break;
        }
        cairn_engine::env::Clock::sleep(&world.clock, Duration::from_millis(100)).await;
        removed = leader.change(remove(id)).await;
    }
    match removed {
        Ok(status) if status.voters.keys().all(|v| member_of(*v) != id) => {
            world.decision("ClusterReplicaRemoved");
            world.event(format!("member {id} removed"));
        }
        other => {
            let evidence = format!("removing member {id} at its successor answered {other:?}");
            return world.fail(INV_ASSERTION, evidence);
        }
    }
    if !world.acknowledge("r0").await {
        return;
    }
    let third = world.replicas[3 - l - n].id;
    let peer = super::members(3)[&id].clone();
    let add = leader.change(MemberChange::Add { member: id, peer });
    let mut add = std::pin::pin!(add);
    match race(add.as_mut(), leader.change(remove(third))).await {
        Either::Right(Err(ProposeError::Busy(reason))) => {
            world.event(format!(
                "removing member {third} meanwhile refused: {reason}"
            ));
        }
        other => {
            let answer = match other {
                Either::Left(a) => format!("the addition answered first: {a:?}"),
                Either::Right(b) => format!("the second change answered {b:?}"),
            };
            return world.fail(INV_ASSERTION, format!("a change beside another: {answer}"));
        }
    }
    match add.await {
        Ok(status)
            if !status.joint
                && world.replicas[l]
                    .incarnation
                    .is_some_and(|i| status.voters.contains_key(&i)) =>
        {
            world.replicas[l].joined = true;
            world.event(format!("member {id} added back"));
        }
        other => {
            let evidence = format!("adding member {id} back answered {other:?}");
            return world.fail(INV_ASSERTION, evidence);
        }
    }
    if world.acknowledge("r1").await {
        world.judge_final().await;
    }
}

/// The schedule of the module doc's last scenario, from a cluster that acknowledged stream
/// `a`; with `removals_only`, nothing the member misses creates or purges a partition.
async fn adoption_cut_short(world: &mut World, removals_only: bool) {
    use cairn_faults::disk::{Call, Scripted};
    let Some(l) = world.leader_at() else {
        world.fail(INV_LIVENESS, "no leader after the first op".into());
        return;
    };
    let b = (l + 1) % 3;
    let create = |name: &str| Op::Create(name.into());
    for op in [
        create("a/t1"),
        create("a/t2"),
        create("a/t4"),
        create("a/t2/g1"),
    ] {
        if !world.acknowledge_op(&op).await {
            return;
        }
    }
    // b's node holds an offset of group g1, which is deleted while b is down and its id
    // taken by g2: the adoption must remove the offset (g2 never stored one).
    world.store_offset_on(b, "a/t2/g1").await;
    // No entry b holds is past the leader's last one.
    let behind = world.last_index_at(l);
    world.crash_as(b, false);
    let mut missed = vec![
        Op::Delete("a/t1".into()),
        Op::Delete("a/t2/g1".into()),
        create("a/t2/g2"),
    ];
    if !removals_only {
        // Not a/t2: a purge empties its partitions, offsets and all.
        missed.extend([Op::Purge("a/t4".into()), create("a/t3")]);
    }
    // Then enough ops that the leader's log moves past a snapshot beyond b's last entry.
    let fillers = (0..5 * ADOPTION_SNAPSHOT_EVERY).map(|n| create(&format!("f{n}")));
    for op in missed.into_iter().chain(fillers) {
        if !world.acknowledge_op(&op).await {
            return;
        }
    }
    // The others purge once no replication to b reads the entries (openraft keeps them while
    // it backs off from an unreachable b); until then b would take entries, not a snapshot.
    if !world.purged_past(behind).await {
        return;
    }
    // Once b's node booted (its boot may remove leftovers under partitions too), b's next
    // removal of a partition's file is the adoption's (the deleted topic's).
    world.start(b).await;
    world.replicas[b].disk.script(Scripted::CrashOnCall {
        call: Call::Remove,
        part: "/partitions/".into(),
    });
    world.replicas[b].armed = true;
    let deadline = world.clock.now_nanos() + STEP_DEADLINE.as_nanos() as u64;
    while !world.replicas[b].disk.is_crashed() && !world.failed() {
        if world.clock.now_nanos() >= deadline {
            world.fail(
                INV_LIVENESS,
                "the member behind never reached its adoption's directory work".into(),
            );
            return;
        }
        cairn_engine::env::Clock::sleep(&world.clock, Duration::from_millis(50)).await;
    }
    // The crash struck: restart_all takes the process down and boots it again.
    world.restart_all().await;
    world.judge_final().await;
}

impl World {
    /// The index of the last entry in replica `at`'s log (0 for none).
    fn last_index_at(&self, at: usize) -> u64 {
        let group = self.replicas[at].group.as_ref();
        group
            .and_then(|g| g.log().summary().2)
            .map_or(0, |l| l.index)
    }

    /// Waits until every up replica purged its log past `index`; a liveness failure past
    /// [`STEP_DEADLINE`].
    async fn purged_past(&mut self, index: u64) -> bool {
        let deadline = self.clock.now_nanos() + STEP_DEADLINE.as_nanos() as u64;
        while self.clock.now_nanos() < deadline && !self.failed() {
            let purged = |at: usize| {
                let group = self.replicas[at].group.as_ref();
                group
                    .and_then(|g| g.log().summary().1)
                    .map_or(0, |l| l.index)
            };
            if self.up().into_iter().all(|at| purged(at) > index) {
                return true;
            }
            cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(50)).await;
        }
        self.fail(INV_LIVENESS, format!("no purge past index {index} in time"));
        false
    }

    /// Proposes `name` until it is acknowledged; a liveness failure past [`STEP_DEADLINE`].
    async fn acknowledge(&mut self, name: &str) -> bool {
        self.acknowledge_op(&Op::Create(name.into())).await
    }

    /// Proposes `op` until it is acknowledged; a liveness failure past [`STEP_DEADLINE`].
    async fn acknowledge_op(&mut self, op: &Op) -> bool {
        let deadline = self.clock.now_nanos() + STEP_DEADLINE.as_nanos() as u64;
        while self.clock.now_nanos() < deadline && !self.failed() {
            if self.propose_op(op).await {
                return !self.failed();
            }
            cairn_engine::env::Clock::sleep(&self.clock, Duration::from_millis(50)).await;
        }
        let label = op.label();
        self.fail(
            INV_LIVENESS,
            format!("{label} was not acknowledged in time"),
        );
        false
    }
}

//! A group member's reads of its group (S6 and S9): GetMe after its join (the connection's
//! client, member of the group), GetConsumerGroup (the assignment covers the topic's
//! partitions once, the counts agree with the lists, the asking member is listed) and
//! GetConsumerGroups (the workload's group with its partition count, and a member when the
//! asking one is). Judged on one session only: a reconnect is a new client, no longer a
//! member.

use super::super::oracle::{check_assignments, INV_GROUP};
use super::super::{lock, GROUP};
use super::{sid, Actor};
use crate::report::{violation, Violation};
use rand::Rng;

/// The session the last answer came on.
fn session(a: &Actor) -> Option<u64> {
    a.client
        .as_ref()
        .and_then(|c| c.session())
        .map(|s| s.session)
}

fn judged(a: &Actor, row: &'static str, verdict: Result<(), Violation>) -> bool {
    let mut w = lock(&a.world);
    match verdict {
        Ok(()) => {
            w.decision(row);
            true
        }
        Err(v) => {
            w.fail(v);
            false
        }
    }
}

/// GetMe right after a join on session `on`: this connection's client, in the group.
/// Returns its client id when answered on that session.
pub(crate) async fn me_after_join(a: &mut Actor, on: u64) -> Option<u32> {
    let begun = a.begin("get me");
    let result = a.client().get_me().await;
    a.end(&begun, &result);
    a.after(&begun);
    if session(a) != Some(on) {
        return None;
    }
    let me = result.ok()?;
    let (s, t, g) = (a.ids.stream, a.ids.topics[1], a.ids.group);
    let listed = me
        .consumer_groups
        .iter()
        .any(|c| (c.stream_id, c.topic_id, c.group_id) == (s, t, g));
    let counted = me.client.consumer_groups_count as usize == me.consumer_groups.len();
    let verdict = if listed && counted {
        Ok(())
    } else {
        Err(violation(INV_GROUP, format!("{}: GetMe after joining group {g} of topic {s}/{t} on this connection shows groups {:?} (count {})", a.name, me.consumer_groups.iter().map(|c| (c.stream_id, c.topic_id, c.group_id)).collect::<Vec<_>>(), me.client.consumer_groups_count)))
    };
    judged(a, "GetMe", verdict).then_some(me.client.client_id)
}

/// One read of the group, on session `on` whose client id is `me` (when known).
pub(crate) async fn read_group(a: &mut Actor, on: u64, me: Option<u32>) -> bool {
    let (stream, topic, group) = (sid(a.ids.stream), sid(a.ids.topics[1]), sid(a.ids.group));
    let (details, partitions) = {
        let mut w = lock(&a.world);
        (w.rng.gen_bool(0.6), w.profile.partitions)
    };
    if details {
        let begun = a.begin("get group");
        let result = a.client().get_consumer_group(&stream, &topic, &group).await;
        a.end(&begun, &result);
        a.after(&begun);
        let Ok(Some(reply)) = result else {
            return true;
        };
        let members: Vec<(u32, Vec<u32>)> = reply
            .members
            .iter()
            .map(|m| (m.id, m.partitions.clone()))
            .collect();
        if let Err(v) = check_assignments(&members) {
            a.fail(v);
            return false;
        }
        let asking = me.filter(|_| session(a) == Some(on));
        let verdict = judge_details(&reply, partitions, asking);
        return judged(a, "GroupDetails", verdict);
    }
    let begun = a.begin("get groups");
    let result = a.client().get_consumer_groups(&stream, &topic).await;
    a.end(&begun, &result);
    a.after(&begun);
    let Ok(groups) = result else { return true };
    let member = session(a) == Some(on);
    let verdict = match groups.iter().find(|g| g.id == a.ids.group) {
        Some(g) if g.name.as_str() == GROUP && g.partitions_count == partitions && (!member || g.members_count >= 1) => Ok(()),
        found => Err(violation(INV_GROUP, format!("{}: the workload's group {} listed as {found:?} (a member asking: {member}; {partitions} partitions)", a.name, a.ids.group))),
    };
    judged(a, "GroupList", verdict)
}

/// A group's details: counts agree with the lists, every partition owned once when it has
/// members, and the asking member (`asking`: its client id, when the session held) listed.
fn judge_details(
    reply: &cairn_client::iggy_binary_protocol::responses::consumer_groups::ConsumerGroupDetailsResponse,
    partitions: u32,
    asking: Option<u32>,
) -> Result<(), Violation> {
    let wrong = |why: String| Err(violation(INV_GROUP, format!("group details: {why}")));
    if reply.group.partitions_count != partitions {
        return wrong(format!(
            "{} partitions, the topic has {partitions}",
            reply.group.partitions_count
        ));
    }
    if reply.group.members_count as usize != reply.members.len() {
        return wrong(format!(
            "members count {} with {} members listed",
            reply.group.members_count,
            reply.members.len()
        ));
    }
    let mut owned: Vec<u32> = Vec::new();
    for m in &reply.members {
        if m.partitions_count as usize != m.partitions.len() {
            return wrong(format!(
                "member {} counts {} partitions and lists {:?}",
                m.id, m.partitions_count, m.partitions
            ));
        }
        owned.extend(&m.partitions);
    }
    owned.sort_unstable();
    let all: Vec<u32> = if reply.members.is_empty() {
        Vec::new()
    } else {
        (0..partitions).collect()
    };
    if owned != all {
        return wrong(format!(
            "the members own partitions {owned:?}, expected each of {all:?} once"
        ));
    }
    if let Some(me) = asking {
        if !reply.members.iter().any(|m| m.id == me) {
            return wrong(format!(
                "the asking member (client {me}) is not listed among {:?}",
                reply.members.iter().map(|m| m.id).collect::<Vec<_>>()
            ));
        }
    }
    Ok(())
}

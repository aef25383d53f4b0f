//! Consumers: stored offsets, consumer groups (their members by connection, joins, leaves
//! and assignments), and the explicit deletion of a partition's oldest segments.

use super::reads::count;
use super::registry::GroupKey;
use super::responses;
use super::status::Status;
use super::{Call, Reply, Resolved};
use cairn_engine::node::{MetaView, NodeError};
use iggy_binary_protocol::requests::consumer_groups::{
    GetConsumerGroupRequest, GetConsumerGroupsRequest, SyncConsumerGroupRequest,
};
use iggy_binary_protocol::requests::consumer_offsets::{
    DeleteConsumerOffsetRequest, GetConsumerOffsetRequest, StoreConsumerOffsetRequest,
};
use iggy_binary_protocol::requests::segments::DeleteSegmentsRequest;
use iggy_binary_protocol::responses::consumer_groups::{
    ConsumerGroupResponse, GetConsumerGroupsResponse, SyncConsumerGroupResponse,
};
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::{WireIdentifier, WireName};

/// The resolved topic, and identifiers that name it by id for the node (a rename between
/// the check and the node's lookup cannot move the request to a topic the check did not
/// cover).
struct ById {
    s: u32,
    t: u32,
    stream: WireIdentifier,
    topic: WireIdentifier,
}

fn by_id(call: &Call<'_>) -> ById {
    let Resolved::Topic(s, t) = call.target else {
        unreachable!("a consumer command names a topic")
    };
    ById {
        s,
        t,
        stream: WireIdentifier::numeric(s),
        topic: WireIdentifier::numeric(t),
    }
}

pub async fn get_offset(call: &Call<'_>, r: GetConsumerOffsetRequest) -> Result<Reply, Status> {
    let to = by_id(call);
    let node = &call.session().node;
    // A group member without a partition id means its current partition: report that one.
    let (_, _, p) = node
        .offset_partition(&r.consumer, &to.stream, &to.topic, r.partition_id)
        .await?;
    let stored = node
        .get_offset(&r.consumer, &to.stream, &to.topic, Some(p))
        .await?;
    let Some(stored) = stored else {
        return Ok(Reply::NotFound);
    };
    let current = match node.partition_info((to.s, to.t, p)).await {
        Ok(Some(info)) => info.current_offset().unwrap_or(0),
        _ => 0,
    };
    Ok(Reply::ConsumerOffset(ConsumerOffsetResponse {
        partition_id: p,
        current_offset: current,
        stored_offset: stored,
    }))
}

pub async fn store_offset(call: &Call<'_>, r: StoreConsumerOffsetRequest) -> Result<Reply, Status> {
    let to = by_id(call);
    call.session()
        .node
        .store_offset(&r.consumer, &to.stream, &to.topic, r.partition_id, r.offset)
        .await?;
    Ok(Reply::Done)
}

pub async fn delete_offset(
    call: &Call<'_>,
    r: DeleteConsumerOffsetRequest,
) -> Result<Reply, Status> {
    let to = by_id(call);
    call.session()
        .node
        .delete_offset(&r.consumer, &to.stream, &to.topic, r.partition_id)
        .await?;
    Ok(Reply::Done)
}

pub async fn delete_segments(call: &Call<'_>, r: DeleteSegmentsRequest) -> Result<Reply, Status> {
    let to = by_id(call);
    call.session()
        .node
        .delete_segments(&to.stream, &to.topic, r.partition_id, r.segments_count)
        .await?;
    Ok(Reply::Done)
}

/// A group's members by their connections' numeric client ids.
async fn members(
    call: &Call<'_>,
    stream: &WireIdentifier,
    topic: &WireIdentifier,
    group: &WireIdentifier,
) -> Result<Vec<(u32, Vec<u32>)>, Status> {
    let members = call
        .session()
        .node
        .group_members(stream, topic, group)
        .await?;
    let registry = &call.cx.registry;
    Ok(members
        .into_iter()
        .map(|(client, partitions)| (registry.id_of(client).unwrap_or(0), partitions))
        .collect())
}

pub async fn get_group(call: &Call<'_>, r: GetConsumerGroupRequest) -> Result<Reply, Status> {
    // Names resolved once, on the request's view; the node is asked by id.
    let to = by_id(call);
    let Ok(g) = call.view.group_id(to.s, to.t, &r.group_id) else {
        return Ok(Reply::NotFound);
    };
    let topic = call.view.topic(to.s, to.t);
    let group = &topic.groups[&g];
    let members = members(call, &to.stream, &to.topic, &WireIdentifier::numeric(g)).await?;
    Ok(Reply::Group(responses::group_details(
        g,
        &group.name,
        count(topic.partitions.len()),
        members,
    )))
}

pub async fn get_groups(call: &Call<'_>, _: GetConsumerGroupsRequest) -> Result<Reply, Status> {
    let to = by_id(call);
    let topic = call.view.topic(to.s, to.t);
    let mut groups = Vec::with_capacity(topic.groups.len());
    for group in topic.groups.values() {
        let id = WireIdentifier::numeric(group.id);
        let members = members(call, &to.stream, &to.topic, &id).await?;
        groups.push(ConsumerGroupResponse {
            id: group.id,
            partitions_count: count(topic.partitions.len()),
            members_count: count(members.len()),
            name: WireName::new(group.name.clone()).expect("stored names are valid"),
        });
    }
    Ok(Reply::Groups(GetConsumerGroupsResponse { groups }))
}

pub async fn join_group(call: &Call<'_>, group: &WireIdentifier) -> Result<Reply, Status> {
    change_membership(call, group, true).await
}

pub async fn leave_group(call: &Call<'_>, group: &WireIdentifier) -> Result<Reply, Status> {
    change_membership(call, group, false).await
}

/// Whether the membership of incarnation `incarnation` of group `key` is of a group that
/// exists on `view` (not deleted, with its topic or stream, nor replaced at its ids).
pub fn membership_alive(view: &MetaView, (s, t, g): GroupKey, incarnation: u64) -> bool {
    view.find_topic(s, t)
        .and_then(|topic| topic.groups.get(&g))
        .is_some_and(|group| group.created_op == incarnation)
}

/// Records the join in the registry before the node's, within the user's share; whether it
/// was recorded now (not a member already).
fn join_recorded(call: &Call<'_>, key: GroupKey, incarnation: u64) -> Result<bool, Status> {
    let user = call.session().user_id;
    let cap = match user {
        super::permissions::ROOT_USER => usize::MAX,
        _ => call.cx.memberships_per_user,
    };
    let registry = &call.cx.registry;
    let id = call.caller.client_id;
    let joined = registry.join(id, key, incarnation, cap).or_else(|_| {
        // Memberships in groups deleted since (with their topic or stream) count until
        // their connections leave: forget those, then judge again. The newest view: a group
        // created after this request's view is alive.
        let view = call.cx.node.view();
        registry.prune_memberships(user, |g, i| membership_alive(&view, g, i));
        registry.join(id, key, incarnation, cap)
    });
    joined.map_err(|_| {
        NodeError::TooMany {
            what: cairn_engine::error::Capacity::MembershipsOfUser,
            limit: cap,
        }
        .into()
    })
}

/// The session joins (or leaves) the group; the registry keeps what GetMe shows.
async fn change_membership(
    call: &Call<'_>,
    group: &WireIdentifier,
    join: bool,
) -> Result<Reply, Status> {
    let to = by_id(call);
    let g = call.view.group_id(to.s, to.t, group)?;
    let group = WireIdentifier::numeric(g);
    let node = &call.session().node;
    let key = (to.s, to.t, g);
    let incarnation = call.view.topic(to.s, to.t).groups[&g].created_op;
    if join {
        let recorded = join_recorded(call, key, incarnation)?;
        if let Err(e) = node.join_group(&to.stream, &to.topic, &group).await {
            if recorded {
                call.cx
                    .registry
                    .update(call.caller.client_id, |e| _ = e.groups.remove(&key));
            }
            return Err(e.into());
        }
    } else {
        node.leave_group(&to.stream, &to.topic, &group).await?;
    }
    call.cx.registry.update(call.caller.client_id, |e| {
        if join {
            e.groups.insert(key, incarnation);
        } else {
            e.groups.remove(&key);
        }
    });
    Ok(Reply::Done)
}

pub async fn sync_group(call: &Call<'_>, r: SyncConsumerGroupRequest) -> Result<Reply, Status> {
    let to = by_id(call);
    match call
        .session()
        .node
        .group_assignment(&to.stream, &to.topic, &r.group_id)
        .await
    {
        Ok((generation, partitions)) => Ok(Reply::Assignment(SyncConsumerGroupResponse {
            generation,
            partitions,
        })),
        Err(NodeError::NotAMember { .. } | NodeError::GroupNotFound { .. }) => Ok(Reply::NotFound),
        Err(e) => Err(e.into()),
    }
}

//! Reads of the metadata and of the server: streams, topics, users, connections, stats and
//! the cluster's roster. Entities come from the request's view; the partitions' numbers
//! (offsets, sizes, segments) are asked of their shards.

use super::consumers::membership_alive;
use super::registry::{ClientEntry, GroupKey};
use super::responses::{self, Numbers, PartitionNumbers};
use super::status::Status;
use super::{Call, Reply, Resolved, SERVER_VERSION};
use cairn_engine::node::{MetaView, PartitionKey};
use iggy_binary_protocol::responses::clients::{
    ClientDetailsResponse, ClientResponse, ConsumerGroupInfoResponse, GetClientsResponse,
};
use iggy_binary_protocol::responses::streams::GetStreamsResponse;
use iggy_binary_protocol::responses::system::StatsResponse;
use iggy_binary_protocol::responses::topics::GetTopicsResponse;
use iggy_binary_protocol::responses::users::GetUsersResponse;

/// The most partitions' numbers asked at once: in a cluster, a partition placed on other
/// members is asked of one of them, and one at a time would cost a round trip each. No
/// more than the connections a member keeps to each peer for them, which forwarded writes
/// and the groups' own requests share.
const NUMBERS_IN_FLIGHT: usize = cairn_cluster::partition::net::FORWARD_POOL;

/// The numbers of every partition `keys` names, from their shards (or, in a cluster, from
/// a member with a copy), [`NUMBERS_IN_FLIGHT`] at a time.
pub(super) async fn numbers(
    call: &Call<'_>,
    keys: impl IntoIterator<Item = PartitionKey>,
) -> Numbers {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let node = &call.session().node;
    // Collected first: the caller's iterator may borrow what a future must not hold.
    let mut keys = keys.into_iter().collect::<Vec<_>>().into_iter();
    let mut asked = FuturesUnordered::new();
    let mut numbers = Numbers::new();
    loop {
        // As one answer comes, the next partition is asked: never more than the limit.
        while asked.len() < NUMBERS_IN_FLIGHT {
            let Some(key) = keys.next() else { break };
            asked.push(numbers_of(node, key));
        }
        let Some((key, info)) = asked.next().await else {
            break;
        };
        if let Some(info) = info {
            numbers.insert(key, info);
        }
    }
    numbers
}

/// Partition `key`'s numbers, if it has any to give.
async fn numbers_of(
    node: &cairn_engine::node::Client,
    key: PartitionKey,
) -> (PartitionKey, Option<PartitionNumbers>) {
    let info = node.partition_info(key).await;
    (key, info.ok().flatten().map(|i| PartitionNumbers::of(&i)))
}

fn stream_keys(view: &MetaView, s: u32) -> Vec<PartitionKey> {
    view.stream(s).map_or_else(Vec::new, |stream| {
        stream
            .topics
            .values()
            .flat_map(|t| t.partitions.keys().map(move |p| (s, t.id, *p)))
            .collect()
    })
}

pub(super) fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn stream_id(call: &Call<'_>) -> u32 {
    match call.target {
        Resolved::Stream(s) => s,
        other => unreachable!("names a stream, not {other:?}"),
    }
}

pub async fn stream(call: &Call<'_>) -> Result<Reply, Status> {
    let s = stream_id(call);
    let numbers = numbers(call, stream_keys(call.view, s)).await;
    let stream = call.view.stream(s).expect("resolved on this view");
    Ok(Reply::Stream(responses::get_stream(stream, &numbers)))
}

pub async fn streams(call: &Call<'_>) -> Result<Reply, Status> {
    let view = call.view;
    let keys: Vec<_> = view
        .streams()
        .keys()
        .flat_map(|s| stream_keys(view, *s))
        .collect();
    let numbers = numbers(call, keys).await;
    Ok(Reply::Streams(GetStreamsResponse {
        streams: view
            .streams()
            .values()
            .map(|s| responses::stream_response(s, &numbers))
            .collect(),
    }))
}

pub async fn topic(call: &Call<'_>) -> Result<Reply, Status> {
    let Resolved::Topic(s, t) = call.target else {
        unreachable!("a topic read names a topic")
    };
    let topic = call.view.topic(s, t);
    let numbers = numbers(call, topic.partitions.keys().map(|p| (s, t, *p))).await;
    Ok(Reply::Topic(responses::get_topic(s, topic, &numbers)))
}

pub async fn topics(call: &Call<'_>) -> Result<Reply, Status> {
    let s = stream_id(call);
    let numbers = numbers(call, stream_keys(call.view, s)).await;
    let stream = call.view.stream(s).expect("resolved on this view");
    Ok(Reply::Topics(GetTopicsResponse {
        topics: stream
            .topics
            .values()
            .map(|t| responses::topic_header(s, t, &numbers))
            .collect(),
    }))
}

pub fn user(call: &Call<'_>) -> Reply {
    let Resolved::User(id) = call.target else {
        unreachable!("a user read names a user")
    };
    let user = call.view.user(id).expect("resolved on this view");
    Reply::User(responses::user_details(user))
}

pub fn users(call: &Call<'_>) -> Reply {
    Reply::Users(GetUsersResponse {
        users: call
            .view
            .users()
            .values()
            .map(responses::user_response)
            .collect(),
    })
}

fn client_response(id: u32, entry: &ClientEntry, view: &MetaView) -> ClientResponse {
    ClientResponse {
        client_id: id,
        user_id: entry.user_id.unwrap_or(u32::MAX),
        transport: 1,
        address: entry.address.to_string(),
        consumer_groups_count: count(alive_groups(entry, view).count()),
    }
}

/// The groups `entry` joined that still exist as joined on `view` (a group deleted since,
/// or replaced at its ids, is not shown: Iggy forgets memberships at a delete).
fn alive_groups<'e>(
    entry: &'e ClientEntry,
    view: &'e MetaView,
) -> impl Iterator<Item = GroupKey> + 'e {
    entry
        .groups
        .iter()
        .filter(|(key, incarnation)| membership_alive(view, **key, **incarnation))
        .map(|(key, _)| *key)
}

/// A listed connection's details (GetMe, GetClient), or nothing for an id not listed.
pub fn client(call: &Call<'_>, id: u32) -> Reply {
    let Some(entry) = call.cx.registry.get(id) else {
        return Reply::NotFound;
    };
    Reply::Client(ClientDetailsResponse {
        client: client_response(id, &entry, call.view),
        consumer_groups: alive_groups(&entry, call.view)
            .map(
                |(stream_id, topic_id, group_id)| ConsumerGroupInfoResponse {
                    stream_id,
                    topic_id,
                    group_id,
                },
            )
            .collect(),
    })
}

pub fn clients(call: &Call<'_>) -> Reply {
    Reply::Clients(GetClientsResponse {
        clients: call
            .cx
            .registry
            .list()
            .iter()
            .map(|(id, e)| client_response(*id, e, call.view))
            .collect(),
    })
}

pub async fn stats(call: &Call<'_>) -> Result<Reply, Status> {
    let cx = call.cx;
    let view = call.view;
    let keys = view
        .partitions()
        .iter()
        .map(cairn_engine::state::key_of)
        .collect::<Vec<_>>();
    let numbers = numbers(call, keys).await;
    let topics = view.streams().values().flat_map(|s| s.topics.values());
    let now = cx.env.clock.wall_micros();
    let figures = cx
        .figures
        .get()
        .map(|read| read(cx.node.root()))
        .unwrap_or_default();
    Ok(Reply::Stats(Box::new(StatsResponse {
        process_id: std::process::id(),
        cpu_usage: figures.cpu_usage,
        total_cpu_usage: figures.cpu_usage,
        memory_usage: figures.resident_bytes,
        total_memory: figures.total_memory,
        available_memory: figures.available_memory,
        run_time: now.saturating_sub(cx.started_at),
        start_time: cx.started_at,
        read_bytes: figures.read_bytes,
        written_bytes: figures.written_bytes,
        messages_size_bytes: numbers.values().map(|n| n.size_bytes).sum(),
        streams_count: count(view.streams().len()),
        topics_count: count(topics.clone().count()),
        partitions_count: count(numbers.len().max(view.partitions().len())),
        segments_count: numbers.values().map(|n| n.segments).sum(),
        messages_count: numbers.values().map(|n| n.messages).sum(),
        clients_count: count(cx.registry.len()),
        consumer_groups_count: count(topics.map(|t| t.groups.len()).sum()),
        hostname: figures.hostname,
        os_name: std::env::consts::OS.into(),
        os_version: figures.os_version,
        kernel_version: figures.kernel_version,
        iggy_server_version: SERVER_VERSION.into(),
        iggy_server_semver: None,
        cache_metrics: Vec::new(),
        threads_count: figures.threads,
        free_disk_space: figures.free_disk,
        total_disk_space: figures.total_disk,
    })))
}

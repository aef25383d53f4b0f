//! The SDK's side of the cluster process tests: what a client of one member sends, polls
//! and stores, and what every member holds.

use crate::cluster::{client_of, SETTLE};
use crate::common::Cairn;
use std::time::{Duration, Instant};

/// Every message payload of partition `p` of `orders/events` at `node`, in offset order
/// (offsets checked dense).
pub(crate) async fn stored_at(client: &iggy::prelude::IggyClient, p: u32) -> Vec<String> {
    use iggy::prelude::{Consumer, Identifier, MessageClient, PollingStrategy};
    let consumer = Consumer::new(Identifier::numeric(99).unwrap());
    let (orders, events) = (crate::common::id("orders"), crate::common::id("events"));
    let mut out = Vec::new();
    loop {
        let offset = out.len() as u64;
        let strategy = PollingStrategy::offset(offset);
        let polled = client
            .poll_messages(&orders, &events, Some(p), &consumer, &strategy, 1000, false)
            .await
            .unwrap();
        if polled.messages.is_empty() {
            return out;
        }
        for (i, m) in polled.messages.iter().enumerate() {
            assert_eq!(m.header.offset, offset + i as u64, "offsets are dense");
            out.push(String::from_utf8(m.payload.to_vec()).unwrap());
        }
    }
}

/// Makes consumer group `workers` of `orders/events` through `maker`; a member of it on
/// `node` polls as the group (auto-commit on) until it read `count` messages; what it read,
/// each once.
pub(crate) async fn group_reads(
    maker: &iggy::prelude::IggyClient,
    node: &Cairn,
    count: usize,
) -> std::collections::BTreeSet<String> {
    use iggy::prelude::{Consumer, ConsumerGroupClient, MessageClient, PollingStrategy};
    let (orders, events) = (crate::common::id("orders"), crate::common::id("events"));
    maker
        .create_consumer_group(&orders, &events, "workers")
        .await
        .unwrap();
    let member = client_of(node, "iggy", crate::common::PASSWORD).await;
    let workers = crate::common::id("workers");
    member
        .join_consumer_group(&orders, &events, &workers)
        .await
        .unwrap();
    let consumer = Consumer::group(workers);
    let strategy = PollingStrategy::next();
    let mut read = Vec::new();
    let started = Instant::now();
    while read.len() < count {
        let polled = member
            .poll_messages(&orders, &events, None, &consumer, &strategy, 100, true)
            .await
            .unwrap();
        read.extend(
            polled
                .messages
                .iter()
                .map(|m| String::from_utf8(m.payload.to_vec()).unwrap()),
        );
        assert!(started.elapsed() < SETTLE, "the group read {read:?} only");
    }
    let once: std::collections::BTreeSet<String> = read.iter().cloned().collect();
    assert_eq!(once.len(), read.len(), "nothing read twice: {read:?}");
    once
}

/// Polls `count` messages of partition 0 of `orders/events` as consumer `audit`, from its
/// stored offset on (auto-commit on): their offsets.
pub(crate) async fn poll_next(client: &iggy::prelude::IggyClient, count: u32) -> Vec<u64> {
    use iggy::prelude::{Consumer, MessageClient, PollingStrategy};
    let (orders, events) = (crate::common::id("orders"), crate::common::id("events"));
    let consumer = Consumer::new(crate::common::id("audit"));
    let started = Instant::now();
    loop {
        let strategy = PollingStrategy::next();
        let polled = client
            .poll_messages(&orders, &events, Some(0), &consumer, &strategy, count, true)
            .await;
        match polled {
            Ok(polled) => return polled.messages.iter().map(|m| m.header.offset).collect(),
            Err(e) => assert!(started.elapsed() < SETTLE, "the consumer's poll: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Makes stream `orders` and its `persisted` topic `events` of 2 partitions through
/// `client`.
pub(crate) async fn make_orders_events(client: &iggy::prelude::IggyClient) {
    use iggy::prelude::{StreamClient, TopicClient};
    client.create_stream("orders").await.unwrap();
    let options = crate::common::topic_options(2, iggy::prelude::Durability::Persisted);
    let orders = crate::common::id("orders");
    client
        .create_topic(&orders, "events", &options)
        .await
        .unwrap();
}

/// Sends `payload` to `orders/events` with the messages key `key`.
pub(crate) async fn send_keyed(
    client: &iggy::prelude::IggyClient,
    key: &str,
    payload: &str,
) -> Result<(), iggy::prelude::IggyError> {
    use iggy::prelude::{IggyMessage, MessageClient, Partitioning};
    use std::str::FromStr;
    let partitioning = Partitioning::messages_key_str(key).unwrap();
    let mut batch = vec![IggyMessage::from_str(payload).unwrap()];
    let (orders, events) = (crate::common::id("orders"), crate::common::id("events"));
    client
        .send_messages(&orders, &events, &partitioning, &mut batch)
        .await
        .map(drop)
}

/// Sends `payload` to partition `p` of `orders/events` (`None`: balanced).
pub(crate) async fn send_one(
    client: &iggy::prelude::IggyClient,
    p: Option<u32>,
    payload: &str,
) -> Result<(), iggy::prelude::IggyError> {
    use iggy::prelude::{IggyMessage, MessageClient, Partitioning};
    use std::str::FromStr;
    let partitioning = p.map_or_else(Partitioning::balanced, Partitioning::partition_id);
    let mut batch = vec![IggyMessage::from_str(payload).unwrap()];
    let (orders, events) = (crate::common::id("orders"), crate::common::id("events"));
    client
        .send_messages(&orders, &events, &partitioning, &mut batch)
        .await
        .map(drop)
}

/// Waits until every running member holds the same messages in both partitions, each
/// holding every one of `acked` (in the order they were acknowledged) exactly once, in that
/// order within its partition (and nothing twice); answers what they hold.
pub(crate) async fn every_member_holds(
    nodes: &[Option<Cairn>],
    acked: &[String],
) -> [Vec<String>; 2] {
    let started = Instant::now();
    loop {
        let mut held: Vec<[Vec<String>; 2]> = Vec::new();
        for node in nodes.iter().flatten() {
            let client = client_of(node, "iggy", crate::common::PASSWORD).await;
            held.push([stored_at(&client, 0).await, stored_at(&client, 1).await]);
        }
        let all: Vec<&String> = held[0].iter().flatten().collect();
        let unique: std::collections::BTreeSet<&String> = all.iter().copied().collect();
        let complete = acked.iter().all(|a| unique.contains(a));
        if complete && held.iter().all(|h| *h == held[0]) {
            assert_eq!(unique.len(), all.len(), "no message is held twice");
            let rank: std::collections::BTreeMap<&String, usize> =
                acked.iter().enumerate().map(|(i, a)| (a, i)).collect();
            for partition in &held[0] {
                let ranks: Vec<usize> = partition
                    .iter()
                    .filter_map(|m| rank.get(m).copied())
                    .collect();
                assert!(
                    ranks.windows(2).all(|w| w[0] < w[1]),
                    "a partition holds acknowledged messages out of their order: {partition:?}"
                );
            }
            return held.swap_remove(0);
        }
        assert!(
            started.elapsed() < SETTLE,
            "the members never held every acknowledged message alike: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

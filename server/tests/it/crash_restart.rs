//! Kill -9 and SIGTERM against the real binary while several connections send, then restart:
//! every acknowledged message is there exactly once and in order, and every restart boots,
//! including kills in the middle of a segment roll (1 MiB segments of 100 KiB messages roll
//! every ten messages).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::common;

use common::{id, Cairn, PASSWORD};
use iggy::prelude::*;
use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PRODUCERS: u32 = 4;

async fn root(cairn: &Cairn) -> IggyClient {
    // No reconnects: a send to a killed server fails at once instead of retrying.
    let address = format!(
        "{}?reconnection_retries=0",
        cairn.connection_string("iggy", PASSWORD)
    );
    let client = IggyClient::from_connection_string(&address).unwrap();
    client.connect().await.unwrap();
    client
}

/// Every message of partition `p`, in offset order: (producer, sequence) from its payload.
async fn read_all(client: &IggyClient, topic: &str, p: u32) -> Vec<(u32, u64)> {
    let consumer = Consumer::new(Identifier::numeric(99).unwrap());
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let polled = client
            .poll_messages(
                &id("crash"),
                &id(topic),
                Some(p),
                &consumer,
                &PollingStrategy::offset(offset),
                1000,
                false,
            )
            .await
            .unwrap();
        if polled.messages.is_empty() {
            return out;
        }
        for m in &polled.messages {
            assert_eq!(m.header.offset, offset, "offsets are dense");
            offset += 1;
            let text = String::from_utf8(m.payload[..32].to_vec()).unwrap();
            let mut parts = text.trim_end().split(':');
            let producer = parts.next().unwrap().parse().unwrap();
            let seq = parts.next().unwrap().parse().unwrap();
            out.push((producer, seq));
        }
    }
}

fn payload(producer: u32, seq: u64, size: usize) -> IggyMessage {
    let mut text = format!("{producer}:{seq}");
    text.push_str(&" ".repeat(32 - text.len()));
    text.push_str(&"x".repeat(size - 32));
    IggyMessage::from_str(&text).unwrap()
}

/// Each producer sends one message per request to its own partition until the server dies;
/// returns the acknowledged sequence numbers per producer.
/// One logged-in connection per producer (made before the kill timer starts, so a slow
/// machine's logins never meet a dead server).
async fn producers(cairn: &Cairn) -> Vec<IggyClient> {
    let mut clients = Vec::new();
    for _ in 0..PRODUCERS {
        clients.push(root(cairn).await);
    }
    clients
}

async fn produce_until_killed(
    clients: Vec<IggyClient>,
    topic: &str,
    size: usize,
    start: &BTreeMap<u32, u64>,
) -> BTreeMap<u32, Vec<u64>> {
    let acked: Arc<Mutex<BTreeMap<u32, Vec<u64>>>> = Arc::default();
    let mut tasks = Vec::new();
    for (producer, client) in (0..PRODUCERS).zip(clients) {
        let acked = acked.clone();
        let topic = topic.to_string();
        let first = start.get(&producer).copied().unwrap_or(0);
        tasks.push(tokio::spawn(async move {
            for seq in first.. {
                let mut batch = vec![payload(producer, seq, size)];
                let sent = client
                    .send_messages(
                        &id("crash"),
                        &id(&topic),
                        &Partitioning::partition_id(producer),
                        &mut batch,
                    )
                    .await;
                if sent.is_err() {
                    return;
                }
                acked.lock().unwrap().entry(producer).or_default().push(seq);
            }
        }));
    }
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(60), task).await;
    }
    let acked = acked.lock().unwrap().clone();
    acked
}

async fn check_all_present(
    cairn: &Cairn,
    topic: &str,
    acked: &BTreeMap<u32, Vec<u64>>,
) -> BTreeMap<u32, u64> {
    let client = root(cairn).await;
    let mut next = BTreeMap::new();
    for producer in 0..PRODUCERS {
        let stored = read_all(&client, topic, producer).await;
        let mut seqs = Vec::new();
        for (from, seq) in &stored {
            assert_eq!(*from, producer, "each producer has its own partition");
            seqs.push(*seq);
        }
        let mut sorted = seqs.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, seqs, "in order and exactly once: {seqs:?}");
        for seq in acked.get(&producer).into_iter().flatten() {
            assert!(
                seqs.binary_search(seq).is_ok(),
                "acknowledged message {producer}:{seq} is present after the restart"
            );
        }
        next.insert(producer, seqs.last().map_or(0, |s| s + 1));
    }
    next
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_during_persisted_sends_loses_no_acknowledged_message() {
    let dir = tempfile::tempdir().unwrap();
    {
        let cairn = Cairn::start(dir.path());
        let client = root(&cairn).await;
        client.create_stream("crash").await.unwrap();
        let options = TopicCreateOptions {
            partitions_count: Some(PRODUCERS),
            durability: Durability::Persisted,
            segment_size: Some(IggyByteSize::from(1024 * 1024u64)),
            ..TopicCreateOptions::default()
        };
        client
            .create_topic(&id("crash"), "persisted", &options)
            .await
            .unwrap();
    }
    let mut acked_total: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut next = BTreeMap::new();
    // `CAIRN_KILL_ROUNDS` runs more kills by hand (the default keeps `cargo test` short).
    let rounds: u64 = std::env::var("CAIRN_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    for round in 0..rounds {
        let cairn = Cairn::start(dir.path());
        let pid = cairn.child.id();
        // Kill at a varying point of the stream: some kills land inside a segment roll.
        let delay = Duration::from_millis(300 + (round % 8) * 170);
        let clients = producers(&cairn).await;
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            // SAFETY: signalling our own child.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        });
        let acked = produce_until_killed(clients, "persisted", 100 * 1024, &next).await;
        killer.join().unwrap();
        cairn.kill9();
        for (p, seqs) in acked {
            acked_total.entry(p).or_default().extend(seqs);
        }
        let restarted = Cairn::start(dir.path());
        next = check_all_present(&restarted, "persisted", &acked_total).await;
        restarted.kill9();
    }
    let sent: usize = acked_total.values().map(Vec::len).sum();
    eprintln!("{rounds} kills, {sent} acknowledged messages, every restart booted");
    assert!(
        sent > 20,
        "the producers got far enough to roll segments ({sent} acknowledged)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_flushes_replicated_messages_below_the_thresholds() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let client = root(&cairn).await;
    client.create_stream("crash").await.unwrap();
    client
        .create_topic(
            &id("crash"),
            "replicated",
            &TopicCreateOptions {
                partitions_count: Some(PRODUCERS),
                durability: Durability::Replicated,
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    let mut acked = BTreeMap::new();
    for producer in 0..PRODUCERS {
        for seq in 0..10u64 {
            client
                .send_messages(
                    &id("crash"),
                    &id("replicated"),
                    &Partitioning::partition_id(producer),
                    &mut [payload(producer, seq, 100)],
                )
                .await
                .unwrap();
            acked.entry(producer).or_insert_with(Vec::new).push(seq);
        }
    }
    drop(client);
    assert_eq!(cairn.terminate(), Some(0), "a graceful shutdown exits 0");
    let restarted = Cairn::start(dir.path());
    check_all_present(&restarted, "replicated", &acked).await;
}

//! The node's figures (`Node::metrics`) on the simulated `Env` (disk, clock, executor): each
//! test does the thing a figure counts and asserts it moved by exactly that much.

use bytes::BytesMut;
use cairn_engine::env::{Disk, Entropy, Env, OpenMode};
use cairn_engine::format::BatchBuilder;
use cairn_engine::metrics::{HistogramSnapshot, PERSIST_LATENCY_BOUNDS_NANOS};
use cairn_engine::node::{Client, Node, NodeMetrics, NodeSettings, PasswordCost};
use cairn_faults::disk::Call;
use cairn_faults::{NetFaults, SimClock, SimDisk, SimNet};
use cairn_sim::executor::Executor;
use iggy_binary_protocol::{WireIdentifier, WireOptions, WirePartitioning};
use std::future::Future;
use std::io::IoSlice;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

const ROOT: &str = "/node";
/// Virtual time each disk call owes (settled by the owner that made it, as in the node scope).
const CALL_NANOS: u64 = 150_000;

struct Counter(AtomicU64);

impl Entropy for Counter {
    fn next_u64(&self) -> u64 {
        // splitmix64: deterministic and good enough for ids.
        let mut z = self
            .0
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

struct Sim {
    disk: SimDisk,
    clock: SimClock,
    executor: Executor,
    env: Env,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let clock = SimClock::new();
        let disk = SimDisk::new(seed, Default::default());
        disk.set_latency_debt(CALL_NANOS, CALL_NANOS);
        disk.enable_call_log(clock.clone(), 1 << 20);
        let executor = Executor::new(seed, clock.clone());
        let env = Env {
            disk: Arc::new(disk.clone()),
            clock: Arc::new(clock.clone()),
            net: Arc::new(
                SimNet::new(seed, clock.clone(), NetFaults::default())
                    .host(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
            ),
            tasks: Arc::new(executor.handle()),
            entropy: Arc::new(Counter(AtomicU64::new(seed))),
        };
        Sim {
            disk,
            clock,
            executor,
            env,
        }
    }

    fn run<T: Send + 'static>(&mut self, future: impl Future<Output = T> + Send + 'static) -> T {
        let tasks = self.executor.handle();
        self.executor
            .block_on(&tasks, 10_000_000, future)
            .expect("the simulated run finished")
    }

    fn boot(&mut self) -> Node {
        let env = self.env.clone();
        self.run(async move {
            Node::start(&env, Path::new(ROOT), settings())
                .await
                .expect("boot")
                .node
        })
    }

    fn metrics(&mut self, node: &Node) -> NodeMetrics {
        let node = node.clone();
        self.run(async move { node.metrics().await })
    }

    fn shutdown(&mut self, node: Node) {
        self.run(async move { node.shutdown().await.expect("shutdown") });
    }

    /// Syncs (of files and directories) the disk has seen so far.
    fn disk_syncs(&self) -> usize {
        let (calls, dropped) = self.disk.call_log();
        assert_eq!(dropped, 0, "the call log kept every call");
        calls.iter().filter(|c| c.call == Call::Sync).count()
    }
}

fn settings() -> NodeSettings {
    NodeSettings {
        password_cost: PasswordCost::CHEAP,
        shards: 2,
        cleaner_interval: Duration::from_secs(3600),
        ..NodeSettings::default()
    }
}

fn id(n: u32) -> WireIdentifier {
    WireIdentifier::numeric(n)
}

/// Topic options as the wire carries them.
fn options(persisted: bool, messages_to_save: u32, expiry: u64) -> WireOptions {
    let policy: &[u8] = if persisted {
        b"persisted"
    } else {
        b"replicated"
    };
    let segment = (1u64 << 20).to_le_bytes();
    let to_save = messages_to_save.to_le_bytes();
    let expiry = expiry.to_le_bytes();
    let entries: [(u8, &[u8], u8, &[u8]); 4] = [
        (2, b"durability", 2, policy),
        (2, b"segment_size", 12, &segment),
        (2, b"messages_required_to_save", 11, &to_save),
        (2, b"message_expiry", 12, &expiry),
    ];
    let mut buf = BytesMut::new();
    iggy_binary_protocol::encode_user_headers(&entries, &mut buf);
    WireOptions::from_bytes(buf.freeze()).expect("valid options")
}

fn batch(seed: u64, count: usize, size: usize) -> BytesMut {
    let mut builder = BatchBuilder::new(1_000 + seed);
    for i in 0..count {
        let payload: Vec<u8> = (0..size).map(|j| (seed as usize + i + j) as u8).collect();
        builder.push(u128::from(seed) << 32 | i as u128, i as u32, &payload, &[]);
    }
    builder.build()
}

/// Stream 0, topic 0 with `partitions` partitions: (stream, topic).
fn topic(sim: &mut Sim, node: &Node, partitions: u32, options: WireOptions) -> (u32, u32) {
    let client = node.client(1);
    sim.run(async move {
        let s = client.create_stream("s").await.expect("stream");
        let t = client
            .create_topic(&id(s), "t", partitions, options)
            .await
            .expect("topic");
        (s, t)
    })
}

fn send(sim: &mut Sim, client: &Client, (s, t): (u32, u32), p: u32, batch: BytesMut) {
    let client = client.clone();
    sim.run(async move {
        client
            .send(&id(s), &id(t), &WirePartitioning::PartitionId(p), batch)
            .await
            .expect("send")
    });
}

/// Every future polled in turn in one task: each runs up to its first wait before the next
/// starts (so sends queued this way reach their shard in one round).
async fn join_all<T>(mut futures: Vec<Pin<Box<dyn Future<Output = T> + Send>>>) -> Vec<T> {
    let mut results: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (future, result) in futures.iter_mut().zip(results.iter_mut()) {
            if result.is_none() {
                if let Poll::Ready(value) = future.as_mut().poll(cx) {
                    *result = Some(value);
                }
            }
        }
        if results.iter().all(Option::is_some) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    results.into_iter().map(|r| r.expect("ready")).collect()
}

/// Per-bucket differences, the sum's and the count's.
fn delta(after: &HistogramSnapshot, before: &HistogramSnapshot) -> (Vec<u64>, u64, u64) {
    let counts = after
        .counts
        .iter()
        .zip(&before.counts)
        .map(|(a, b)| a - b)
        .collect();
    (counts, after.sum - before.sum, after.count - before.count)
}

/// Only bucket `bucket` moved, by one.
fn one_in(bucket: usize, buckets: usize) -> Vec<u64> {
    (0..buckets).map(|i| u64::from(i == bucket)).collect()
}

#[test]
fn a_persisted_send_is_one_persist_whose_latency_is_the_time_it_took() {
    let mut sim = Sim::new(1);
    let node = sim.boot();
    let key = topic(&mut sim, &node, 1, options(true, 1024, 0));
    let client = node.client(1);
    let before = sim.metrics(&node);
    let started = sim.clock.now_nanos();
    send(&mut sim, &client, key, 0, batch(1, 4, 100));
    // Nothing else runs meanwhile: the send's time is its shard's persist, disk time settled.
    let took = sim.clock.now_nanos() - started;
    let after = sim.metrics(&node);
    assert!(took > 0, "the persist's disk calls took virtual time");
    let (counts, sum, count) = delta(&after.persist_latency, &before.persist_latency);
    assert_eq!(count, 1);
    assert_eq!(sum, took);
    assert_eq!(
        counts,
        one_in(
            after.persist_latency.bucket_of(took),
            PERSIST_LATENCY_BOUNDS_NANOS.len() + 1
        )
    );
    assert_eq!(after.persist_latency.bounds, &PERSIST_LATENCY_BOUNDS_NANOS);
    assert_eq!(after.stats.persists - before.stats.persists, 1);
    assert_eq!(after.stats.persisted_acks - before.stats.persisted_acks, 1);
    assert_eq!(after.stats.failed_persists, 0);
    let (_, sends, count) = delta(&after.persist_sends, &before.persist_sends);
    assert_eq!((sends, count), (1, 1));
    let (_, messages, _) = delta(&after.persist_messages, &before.persist_messages);
    assert_eq!(messages, 4);
    assert_eq!(
        after.flush_latency, before.flush_latency,
        "no threshold flush"
    );
}

#[test]
fn one_group_commit_acknowledges_every_send_queued_before_it() {
    let mut sim = Sim::new(2);
    let node = sim.boot();
    let (s, t) = topic(&mut sim, &node, 1, options(true, 1024, 0));
    let before = sim.metrics(&node);
    let sends: Vec<Pin<Box<dyn Future<Output = u32> + Send>>> = [2usize, 3, 5]
        .into_iter()
        .enumerate()
        .map(|(i, count)| {
            let client = node.client(10 + i as u128);
            Box::pin(async move {
                let sent = client
                    .send(
                        &id(s),
                        &id(t),
                        &WirePartitioning::PartitionId(0),
                        batch(i as u64, count, 64),
                    )
                    .await
                    .expect("send");
                assert!(sent.ack.durable);
                sent.ack.message_count
            }) as Pin<Box<dyn Future<Output = u32> + Send>>
        })
        .collect();
    let counts = sim.run(join_all(sends));
    assert_eq!(counts, vec![2, 3, 5]);
    let after = sim.metrics(&node);
    assert_eq!(
        after.stats.persists - before.stats.persists,
        1,
        "one persist"
    );
    let (buckets, sum, count) = delta(&after.persist_sends, &before.persist_sends);
    assert_eq!((sum, count), (3, 1));
    assert_eq!(buckets, one_in(2, 12), "3 sends: the bucket up to 4");
    let (buckets, sum, count) = delta(&after.persist_messages, &before.persist_messages);
    assert_eq!((sum, count), (10, 1));
    assert_eq!(buckets, one_in(2, 12), "10 messages: the bucket up to 16");
    assert_eq!(
        after.persist_latency.count - before.persist_latency.count,
        1
    );
}

#[test]
fn a_persist_that_finds_the_disk_full_is_counted_failed_and_not_observed() {
    let mut sim = Sim::new(3);
    let node = sim.boot();
    let key = topic(&mut sim, &node, 1, options(true, 1024, 0));
    let before = sim.metrics(&node);
    let mut faults = sim.disk.faults();
    faults.capacity = Some(sim.disk.used_bytes());
    sim.disk.set_faults(faults);
    let client = node.client(1);
    let refused = sim.run(async move {
        client
            .send(
                &id(key.0),
                &id(key.1),
                &WirePartitioning::PartitionId(0),
                batch(3, 2, 64),
            )
            .await
    });
    assert!(refused.is_err(), "no space: {refused:?}");
    let after = sim.metrics(&node);
    assert_eq!(
        after.stats.failed_persists - before.stats.failed_persists,
        1
    );
    assert_eq!(after.stats.persists - before.stats.persists, 1);
    assert_eq!(after.persist_latency, before.persist_latency);
    assert_eq!(after.persist_sends, before.persist_sends);
}

#[test]
fn the_sync_count_is_every_sync_the_disk_saw() {
    let mut sim = Sim::new(4);
    let node = sim.boot();
    let m = sim.metrics(&node);
    assert!(m.file_syncs > 0 && m.dir_syncs > 0, "boot syncs: {m:?}");
    assert_eq!(
        (m.file_syncs + m.dir_syncs + m.root_syncs) as usize,
        sim.disk_syncs()
    );
    // Metadata ops, directory work, a persisted send, a rotation, offsets, a deletion.
    let key = topic(&mut sim, &node, 2, options(true, 1024, 0));
    let client = node.client(1);
    let before = sim.disk_syncs();
    let synced = sim.metrics(&node);
    send(&mut sim, &client, key, 1, batch(1, 1, 100));
    let m = sim.metrics(&node);
    let file_syncs = m.file_syncs - synced.file_syncs;
    assert!(
        file_syncs >= 2,
        "log and superblock slot (the active index is not synced per persist): {file_syncs}"
    );
    assert_eq!(
        (file_syncs + m.dir_syncs - synced.dir_syncs + m.root_syncs - synced.root_syncs) as usize,
        sim.disk_syncs() - before
    );
    for i in 0..12 {
        send(&mut sim, &client, key, 0, batch(i, 10, 10_000));
    }
    let (c, k) = (client.clone(), key);
    sim.run(async move {
        let consumer = iggy_binary_protocol::WireConsumer {
            kind: iggy_binary_protocol::KIND_CONSUMER,
            id: id(5),
        };
        c.store_offset(&consumer, &id(k.0), &id(k.1), Some(0), 3)
            .await
            .expect("store");
        c.delete_segments(&id(k.0), &id(k.1), 0, 1)
            .await
            .expect("delete")
    });
    let m = sim.metrics(&node);
    assert_eq!(
        (m.file_syncs + m.dir_syncs + m.root_syncs) as usize,
        sim.disk_syncs()
    );
    assert!(m.deleted_segments.get("Requested") == Some(1));
    sim.shutdown(node);
    let before_boot = sim.disk_syncs();
    let node = sim.boot();
    let m = sim.metrics(&node);
    assert_eq!(
        (m.file_syncs + m.dir_syncs + m.root_syncs) as usize,
        sim.disk_syncs() - before_boot,
        "a new node counts its own boot's syncs from zero"
    );
}

#[test]
fn journal_bytes_are_the_admitted_bytes_not_yet_flushed() {
    let mut sim = Sim::new(5);
    let node = sim.boot();
    let key = topic(&mut sim, &node, 2, options(false, 10, 0));
    let client = node.client(1);
    let m = sim.metrics(&node);
    assert_eq!(m.journal_bytes, 0);
    assert_eq!(
        m.journal_bytes_by_topic.get(&key),
        Some(&0),
        "listed at zero"
    );
    assert_eq!((m.shards, m.shards_reporting), (2, 2));
    let (a, b) = (batch(1, 3, 500), batch(2, 4, 700));
    let b_len = b.len() as u64;
    let bytes = a.len() as u64 + b_len;
    send(&mut sim, &client, key, 0, a);
    send(&mut sim, &client, key, 1, b);
    let m = sim.metrics(&node);
    assert_eq!(m.journal_bytes, bytes);
    assert_eq!(m.journal_bytes_by_topic.get(&key), Some(&bytes));
    assert_eq!(m.flush_latency.count, 0);
    // 3 + 7 messages reach partition 0's threshold of 10: its journal is flushed.
    send(&mut sim, &client, key, 0, batch(3, 7, 100));
    let m = sim.metrics(&node);
    assert_eq!(m.flush_latency.count, 1, "one threshold flush");
    assert_eq!(m.journal_bytes, b_len, "partition 1's batch is still held");
    assert_eq!(m.journal_bytes_by_topic.get(&key), Some(&b_len));
}

#[test]
fn a_group_join_leave_resize_and_disconnect_each_count_one_rebalance() {
    let mut sim = Sim::new(6);
    let node = sim.boot();
    let (s, t) = topic(&mut sim, &node, 2, options(false, 1024, 0));
    let (a, b) = (node.client(21), node.client(22));
    let rebalances = |sim: &mut Sim| {
        let m = sim.metrics(&node);
        ["Join", "Leave", "Disconnect", "TopicResized"].map(|l| m.rebalances.get(l).unwrap())
    };
    let admin = node.client(1);
    sim.run(async move { admin.create_group(&id(s), &id(t), "g").await.unwrap() });
    assert_eq!(rebalances(&mut sim), [0, 0, 0, 0]);
    let (a2, b2) = (a.clone(), b.clone());
    sim.run(async move {
        a2.join_group(&id(s), &id(t), &id(0)).await.unwrap();
        b2.join_group(&id(s), &id(t), &id(0)).await.unwrap();
        b2.join_group(&id(s), &id(t), &id(0)).await.unwrap(); // a member already
    });
    assert_eq!(rebalances(&mut sim), [2, 0, 0, 0]);
    let admin = node.client(1);
    sim.run(async move { admin.create_partitions(&id(s), &id(t), 1).await.unwrap() });
    assert_eq!(rebalances(&mut sim), [2, 0, 0, 1]);
    let a2 = a.clone();
    sim.run(async move { a2.leave_group(&id(s), &id(t), &id(0)).await.unwrap() });
    assert_eq!(rebalances(&mut sim), [2, 1, 0, 1]);
    sim.run(async move { b.disconnect().await.unwrap() });
    assert_eq!(rebalances(&mut sim), [2, 1, 1, 1]);
}

#[test]
fn retention_and_explicit_deletions_count_their_segments_messages_and_bytes() {
    let mut sim = Sim::new(7);
    let node = sim.boot();
    // Expiry 1 s: everything sealed is expired at a cleaner pass an hour on.
    let key = topic(&mut sim, &node, 1, options(true, 1024, 1_000_000));
    let client = node.client(1);
    for i in 0..40 {
        send(&mut sim, &client, key, 0, batch(i, 10, 10_000));
    }
    let c = client.clone();
    let explicit = sim.run(async move {
        c.delete_segments(&id(key.0), &id(key.1), 0, 1)
            .await
            .expect("delete")
    });
    assert_eq!(explicit.len(), 1);
    let m = sim.metrics(&node);
    let segment = &explicit[0];
    assert_eq!(m.deleted_segments.get("Requested"), Some(1));
    assert_eq!(
        m.deleted_messages.get("Requested"),
        Some(segment.end - segment.segment.start_offset)
    );
    assert_eq!(
        m.deleted_bytes.get("Requested"),
        Some(segment.segment.bytes)
    );
    assert_eq!(m.deleted_segments.get("Expired"), Some(0));
    let n = node.clone();
    let now = sim.env.clock.wall_micros() + 3_600_000_000;
    let expired = sim.run(async move { n.clean(Some(now)).await.expect("clean") });
    assert!(expired.len() >= 2, "sealed segments expired: {expired:?}");
    let m = sim.metrics(&node);
    assert_eq!(
        m.deleted_segments.get("Expired"),
        Some(expired.len() as u64)
    );
    assert_eq!(
        m.deleted_messages.get("Expired"),
        Some(expired.iter().map(|d| d.end - d.segment.start_offset).sum())
    );
    assert_eq!(
        m.deleted_bytes.get("Expired"),
        Some(expired.iter().map(|d| d.segment.bytes).sum())
    );
    assert_eq!(m.deleted_segments.get("Requested"), Some(1));
    assert_eq!(m.deleted_segments.get("OverSize"), Some(0));
}

/// The active log of partition `p` of stream 0, topic 0 (the newest `.log`).
fn active_log(sim: &Sim, p: u32) -> PathBuf {
    let dir = Path::new(ROOT).join(format!("streams/0/topics/0/partitions/{p}"));
    let mut logs: Vec<String> = sim
        .disk
        .read_dir(&dir)
        .expect("partition dir")
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n.ends_with(".log"))
        .collect();
    logs.sort();
    dir.join(logs.last().expect("a log"))
}

#[test]
fn boot_counts_what_recovery_decided_and_the_fences_it_left() {
    let mut sim = Sim::new(8);
    let node = sim.boot();
    let m = sim.metrics(&node);
    assert!(m.boot.meta_first_boot);
    assert_eq!(m.boot.meta_replayed_ops, 0);
    assert_eq!(m.boot.partition_outcomes.total(), 0, "no partition yet");
    let key = topic(&mut sim, &node, 3, options(true, 1024, 0));
    let client = node.client(1);
    for p in 0..3 {
        send(&mut sim, &client, key, p, batch(u64::from(p), 3, 200));
    }
    sim.shutdown(node);
    // A torn tail in partition 1 (bytes past the durable end, synced), partition 2's
    // directory gone.
    let log = active_log(&sim, 1);
    let file = sim.disk.open(&log, OpenMode::ReadWrite).unwrap();
    let len = file.len().unwrap();
    file.write_all_at(&[IoSlice::new(&[0xab; 100])], len)
        .unwrap();
    file.sync_data().unwrap();
    drop(file);
    let parent = Path::new(ROOT).join("streams/0/topics/0/partitions");
    sim.disk.remove_dir_all(&parent.join("2")).unwrap();
    sim.disk.sync_dir(&parent).unwrap();
    let syncs_before_boot = sim.disk_syncs();
    let node = sim.boot();
    let m = sim.metrics(&node);
    let boot = &m.boot;
    assert!(!boot.meta_first_boot);
    assert!(boot.meta_replayed_ops >= 3, "root user, stream, topic");
    assert_eq!(boot.meta_actions.total(), 0);
    assert_eq!(boot.partition_outcomes.get("Clean"), Some(1));
    assert_eq!(boot.partition_outcomes.get("TornTailTruncated"), Some(1));
    assert_eq!(boot.partition_outcomes.get("Fenced"), Some(1));
    assert_eq!(boot.partition_outcomes.total(), 3);
    assert_eq!(boot.partition_actions.get("Truncate"), Some(1));
    assert_eq!(boot.partition_fences.get("DirectoryMissing"), Some(1));
    assert_eq!(boot.partition_fences.total(), 1);
    assert_eq!(boot.tree_fates.total(), 3, "three partition paths");
    // Fenced now, by reason: the one boot fenced.
    assert_eq!(m.fenced.get("DirectoryMissing"), Some(1));
    assert_eq!(m.fenced.total(), 1);
    assert_eq!(
        m.fenced.labels,
        cairn_engine::partition::FenceReason::NAMES,
        "every reason listed"
    );
    // A new node counts the syncs of its own boot.
    assert_eq!(
        (m.file_syncs + m.dir_syncs + m.root_syncs) as usize,
        sim.disk_syncs() - syncs_before_boot
    );
}

//! Group commit across callers on real files: many threads, each its own client, sending
//! `persisted` batches to one partition at once. Fewer syncs than acknowledgements (the
//! sends that arrive while a persist runs share the next one), every acknowledged message at
//! its offset; and on a disk that crashes after N mutating calls, every message acknowledged
//! before the crash is there after the next boot. The same with the callers spread over
//! the partitions of one shard, whose persists run at once on the device pool.
// Test driver: real threads are the concurrent callers.
#![allow(clippy::disallowed_methods)]

use cairn_engine::env::real::block_on;
use cairn_engine::node::{Client, Node};
use cairn_tests::*;
use iggy_binary_protocol::WirePartitioning;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

const THREADS: usize = 16;

/// Every acknowledged message: (partition, offset) → id.
type Acked = Arc<Mutex<BTreeMap<(u32, u64), u128>>>;

/// `THREADS` callers each sending `sends` one-message batches to partition 0 until one
/// fails; what was acknowledged.
fn send_concurrently(node: &Node, sends: usize) -> Acked {
    send_spread(node, sends, 1)
}

/// [`send_concurrently`], caller `t` sending to partition `t % partitions`.
fn send_spread(node: &Node, sends: usize, partitions: u32) -> Acked {
    let acked: Acked = Arc::default();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let client: Client = node.client(100 + t as u128);
            let acked = acked.clone();
            std::thread::spawn(move || {
                let partition = t as u32 % partitions;
                for i in 0..sends {
                    let seed = (t * 1000 + i) as u64;
                    let sent = block_on(client.send(
                        &id(0),
                        &id(0),
                        &WirePartitioning::PartitionId(partition),
                        batch(seed, 1, 100),
                    ));
                    let Ok(sent) = sent else { return };
                    assert!(sent.ack.durable, "a persisted send is answered durable");
                    acked
                        .lock()
                        .unwrap()
                        .insert((partition, sent.ack.base_offset), message_id(seed, 0));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    acked
}

fn persisted_topic(node: &TestNode) {
    persisted_topic_of(node, 1);
}

fn persisted_topic_of(node: &TestNode, partitions: u32) {
    node.create_stream("s").unwrap();
    node.create_topic(
        &id(0),
        "t",
        partitions,
        topic_options(&[("durability", 2, b"persisted")]),
    )
    .unwrap();
}

fn check_present(node: &TestNode, acked: &Acked, what: &str) {
    let partitions: BTreeSet<u32> = acked.lock().unwrap().keys().map(|k| k.0).collect();
    let found: BTreeMap<(u32, u64), u128> = partitions
        .into_iter()
        .flat_map(|p| {
            read_node(node, (0, 0, p))
                .into_iter()
                .map(move |(offset, id, _)| ((p, offset), id))
        })
        .collect();
    for (key, id) in acked.lock().unwrap().iter() {
        assert_eq!(
            found.get(key),
            Some(id),
            "{what}: acknowledged (partition, offset) {key:?} lost or changed"
        );
    }
}

#[test]
fn concurrent_persisted_sends_share_syncs_and_every_ack_is_there() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let disk = CountingDisk::default();
    let env = env_on(disk.clone());
    let node = start(&env, root, node_settings()).unwrap().node;
    persisted_topic(&node);
    // Every sync the node makes: each file's (log, index, superblock) and each directory's.
    let all_syncs = || disk.syncs_of("") + disk.all_dir_syncs();
    let before = all_syncs();
    let acked = send_concurrently(&node.node, 40);
    let acks = acked.lock().unwrap().len();
    let syncs = all_syncs() - before;
    assert_eq!(acks, THREADS * 40);
    assert!(
        syncs < acks,
        "{syncs} syncs for {acks} acknowledgements: no group commit"
    );
    assert!(
        node.node.stats().joined_running_persist > 0,
        "some sends joined a persist already running"
    );
    let offsets: Vec<u64> = acked.lock().unwrap().keys().map(|k| k.1).collect();
    assert_eq!(
        offsets,
        (0..acks as u64).collect::<Vec<_>>(),
        "gapless offsets, each given once"
    );
    check_present(&node, &acked, "after the sends");
    node.halt();
    let node = start(&real_env(), root, node_settings()).unwrap().node;
    check_present(&node, &acked, "after a crash");
}

/// One shard holding the eight partitions the callers send to: a round's sends wait on
/// several partitions, which persist at once (jobs on the device pool); every send is
/// answered durable, offsets are gapless per partition, and everything survives a crash.
#[test]
fn sends_spread_over_a_shards_partitions_persist_at_once() {
    const PARTITIONS: u32 = 8;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let settings = || cairn_engine::node::NodeSettings {
        shards: 1,
        ..node_settings()
    };
    let node = start(&real_env(), root, settings()).unwrap().node;
    persisted_topic_of(&node, PARTITIONS);
    let acked = send_spread(&node.node, 40, PARTITIONS);
    assert_eq!(acked.lock().unwrap().len(), THREADS * 40);
    let stats = node.node.stats();
    assert!(
        stats.concurrent_persists > 0 && stats.persist_jobs > 1,
        "some rounds persisted several partitions at once, as jobs: {stats:?}"
    );
    for p in 0..PARTITIONS {
        let offsets: Vec<u64> = acked
            .lock()
            .unwrap()
            .keys()
            .filter(|k| k.0 == p)
            .map(|k| k.1)
            .collect();
        let sends = (THREADS / PARTITIONS as usize * 40) as u64;
        assert_eq!(offsets, (0..sends).collect::<Vec<_>>(), "partition {p}");
    }
    check_present(&node, &acked, "after the sends");
    node.halt();
    let node = start(&real_env(), root, settings()).unwrap().node;
    check_present(&node, &acked, "after a crash");
}

/// A crash at a range of points while the callers send (to one partition, and spread over
/// four partitions of one shard, persisted at once): the next boot keeps every message
/// acknowledged before it.
#[test]
fn a_crash_while_callers_send_keeps_every_acknowledged_message() {
    for (partitions, shards) in [(1, 2), (4, 1)] {
        let settings = || cairn_engine::node::NodeSettings {
            shards,
            ..node_settings()
        };
        let (mut cut_short, mut jobs) = (0, 0);
        for budget in [25usize, 60, 110, 170, 240, 330] {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path();
            let node = start(&real_env(), root, settings()).unwrap().node;
            persisted_topic_of(&node, partitions);
            node.halt();
            let env = env_on(CrashingDisk::new(budget));
            let Ok(booted) = start(&env, root, settings()) else {
                continue; // the crash struck inside the boot
            };
            let acked = send_spread(&booted.node.node, 30, partitions);
            jobs += booted.node.node.stats().persist_jobs;
            let acks = acked.lock().unwrap().len();
            cut_short += usize::from(acks > 0 && acks < THREADS * 30);
            booted.node.halt();
            let node = boot_again(root);
            check_present(
                &node,
                &acked,
                &format!("{partitions} partitions, budget {budget}"),
            );
            node.halt();
        }
        if partitions > 1 {
            // The layout of several partitions ran its persists as jobs (per boot's node).
            assert!(
                jobs > 0,
                "no persist job ran with {partitions} partitions on one shard"
            );
        }
        assert!(
            cut_short >= 3,
            "the crash struck while callers sent to {partitions} partitions ({cut_short} times)"
        );
    }
}

fn boot_again(root: &Path) -> TestNode {
    start(&real_env(), root, node_settings())
        .expect("the boot after a crash")
        .node
}

/// A purge replaces a partition while callers send to it. The partition the purge creates
/// answers nobody until the purge is recorded applied: until then a boot would take a
/// missing directory for the purge's work not yet done and create it again, empty, and an
/// acknowledged message would be gone. Here the record's write is held at a gate: a send to
/// the partition waits for it, and is answered (from the new partition) once it lands.
#[test]
fn a_partition_a_purge_creates_answers_only_once_the_purge_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let disk = GatedDisk::default();
    let env = env_on(disk.clone());
    let node = start(&env, root, node_settings()).unwrap().node;
    persisted_topic(&node);
    let send = |node: &TestNode, seed: u64| {
        node.send(
            &id(0),
            &id(0),
            &WirePartitioning::PartitionId(0),
            batch(seed, 1, 100),
        )
    };
    let before = send(&node, 1).unwrap();
    // The purge's first superblock record (the journal, before the work) passes; the
    // second (applied, after the work) waits at the gate.
    disk.arm("metadata/superblock", 1);
    let purging = {
        let node = node.clone();
        std::thread::spawn(move || node.purge_topic(&id(0), &id(0)))
    };
    assert!(
        disk.wait_blocked(std::time::Duration::from_secs(10)),
        "the purge reached its applied record"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let sender = {
        let node = node.as_client(7);
        std::thread::spawn(move || tx.send(send(&node, 2)).unwrap())
    };
    let early = rx.recv_timeout(std::time::Duration::from_millis(300));
    assert!(
        early.is_err(),
        "a send was answered by a partition whose purge is not yet recorded: {early:?}"
    );
    disk.release();
    purging.join().unwrap().expect("the purge");
    let sent = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("answered once the purge is recorded")
        .expect("the send");
    sender.join().unwrap();
    assert_ne!(
        sent.nonce, before.nonce,
        "from the partition the purge made"
    );
    assert_eq!(sent.ack.base_offset, 0);
    node.close().unwrap();
}

/// Under `persisted` offsets, the stores a shard takes in one round into existing offset
/// files share one directory sync, and each is answered only after it: with the shard held
/// at a gate inside one store, 31 more queue, and once it passes they cost about one
/// round's sync, not one each; every value they were answered with reads back after a
/// restart (a kill: the power-loss case is the simulator's, canary
/// `ack-offset-before-dir-sync`).
#[test]
fn persisted_offset_stores_of_one_round_share_one_directory_sync() {
    const CONSUMERS: u32 = 32;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let counting = CountingDisk::default();
    let disk = GatedDisk::over(Arc::new(counting.clone()));
    let node = start(&env_on(disk.clone()), root, node_settings())
        .unwrap()
        .node;
    node.create_stream("s").unwrap();
    let options = topic_options(&[
        ("durability", 2, b"persisted"),
        ("consumer_offset_durability", 2, b"persisted"),
    ]);
    node.create_topic(&id(0), "t", 1, options).unwrap();
    node.send(
        &id(0),
        &id(0),
        &WirePartitioning::PartitionId(0),
        batch(1, 50, 10),
    )
    .unwrap();
    let consumer = |c: u32| iggy_binary_protocol::WireConsumer::consumer(id(c));
    // Each consumer's first store makes its file (and records it), on its own.
    for c in 1..=CONSUMERS {
        node.store_offset(&consumer(c), &id(0), &id(0), Some(0), 0)
            .unwrap();
    }
    let before = counting.dir_syncs_of("offsets/consumers");
    disk.arm("offsets/consumers/1.tmp", 0);
    let store = |c: u32| {
        let node = node.as_client(u128::from(c) + 100);
        std::thread::spawn(move || {
            node.store_offset(&consumer(c), &id(0), &id(0), Some(0), u64::from(c))
        })
    };
    let first = store(1);
    assert!(disk.wait_blocked(std::time::Duration::from_secs(10)));
    let rest: Vec<_> = (2..=CONSUMERS).map(store).collect();
    // The rest queue in the shard's inbox while it is held.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    disk.release();
    for stored in std::iter::once(first).chain(rest) {
        stored.join().unwrap().expect("stored");
    }
    let syncs = counting.dir_syncs_of("offsets/consumers") - before;
    // Two rounds when every store queued in time (one each without sharing): a slow
    // thread that missed the round only adds one.
    assert!(
        syncs < CONSUMERS as usize / 4,
        "{CONSUMERS} stores in about two rounds synced their directory {syncs} times"
    );
    for c in 1..=CONSUMERS {
        let read = node.get_offset(&consumer(c), &id(0), &id(0), Some(0));
        assert_eq!(read.unwrap(), Some(u64::from(c)), "consumer {c}");
    }
    node.halt();
    let node = boot_again(root);
    for c in 1..=CONSUMERS {
        let read = node.get_offset(&consumer(c), &id(0), &id(0), Some(0));
        assert_eq!(
            read.unwrap(),
            Some(u64::from(c)),
            "consumer {c} after a crash"
        );
    }
}

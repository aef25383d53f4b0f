//! What a node's boot reads and syncs per partition: each superblock slot read from the
//! device once (the tree survey hands what it read to the partition's recovery), and what
//! recoveries with nothing to repair serve made durable by one sync of the data root per
//! shard (`Disk::sync_all`), not by a flush of the device per file and directory; when that
//! sync fails, by each partition's own.

use cairn_engine::env::{Disk, DiskFile, DiskLayer, FileLayer, OpenMode};
use cairn_engine::node::PartitionBoot;
use cairn_engine::partition::FenceReason;
use cairn_tests::fs::env_on;
use cairn_tests::node::{read_node, start};
use cairn_tests::*;
use iggy_binary_protocol::WirePartitioning;
use std::io;
use std::path::Path;

const TOPICS: u32 = 3;
const PARTITIONS: u32 = 2;

fn send_to_each(node: &cairn_tests::node::TestNode, seed: u64) {
    for topic in 0..TOPICS {
        for partition in 0..PARTITIONS {
            let to = WirePartitioning::PartitionId(partition);
            let sent = node.send(
                &id(0),
                &id(topic),
                &to,
                batch(seed + u64::from(topic), 2, 32),
            );
            sent.unwrap_or_else(|e| panic!("send to {topic}/{partition}: {e}"));
        }
    }
}

#[test]
fn a_boot_reads_each_slot_once_and_syncs_the_data_root_once() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = start(&real_env(), root, node_settings()).unwrap().node;
    node.create_stream("s").unwrap();
    for topic in 0..TOPICS {
        let options = topic_options(&[("durability", 2, b"persisted")]);
        node.create_topic(&id(0), &format!("t{topic}"), PARTITIONS, options)
            .unwrap();
    }
    send_to_each(&node, 1);
    node.close().unwrap();

    let disk = CountingDisk::default();
    let booted = start(&env_on(disk.clone()), root, node_settings()).unwrap();
    let opened_clean = booted.report.partitions.iter().all(|(_, boot)| {
        matches!(boot, PartitionBoot::Opened(plan) if plan.fence.is_none() && plan.actions.is_empty())
    });
    assert!(opened_clean, "a clean shutdown leaves nothing to repair");
    assert_eq!(
        booted.report.partitions.len(),
        (TOPICS * PARTITIONS) as usize
    );
    // Each partition's two slot files, each dropped from the cache (and read) once.
    let evictions = disk.evictions.lock().unwrap().clone();
    let slot_evictions: Vec<usize> = evictions
        .iter()
        .filter(|(path, _)| path.to_string_lossy().contains("/partitions/"))
        .filter(|(path, _)| path.to_string_lossy().contains("superblock."))
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(slot_evictions.len(), (2 * TOPICS * PARTITIONS) as usize);
    assert!(
        slot_evictions.iter().all(|n| *n == 1),
        "each slot read from the device once: {evictions:?}"
    );
    // Nothing of a partition synced one by one; the data root synced once by each shard
    // (two, each holding partitions), before it adopts its partitions.
    assert_eq!(disk.syncs_of("/partitions/"), 0, "no partition file synced");
    assert_eq!(
        disk.dir_syncs_of("/partitions/"),
        0,
        "no partition directory"
    );
    let all = disk.all_syncs.lock().unwrap().clone();
    assert_eq!(
        all.into_iter().collect::<Vec<_>>(),
        [(root.to_path_buf(), 2)]
    );
    // And it serves: what was sent before, and more.
    let node = booted.node;
    send_to_each(&node, 100);
    for topic in 0..TOPICS {
        for partition in 0..PARTITIONS {
            assert_eq!(read_node(&node, (0, topic, partition)).len(), 4);
        }
    }
    node.close().unwrap();
}

/// A disk whose `sync_all` fails (EIO), and whose file syncs fail for paths containing
/// `failing`.
#[derive(Clone)]
struct SyncAllFails {
    inner: CountingDisk,
    failing: &'static str,
}

struct FailingSyncs {
    inner: Box<dyn DiskFile>,
    fails: bool,
}

impl FileLayer for FailingSyncs {
    fn inner(&self) -> &dyn DiskFile {
        self.inner.as_ref()
    }
    fn sync_data(&self) -> io::Result<()> {
        match self.fails {
            true => Err(io::Error::other("EIO on fsync (injected)")),
            false => self.inner.sync_data(),
        }
    }
}

impl DiskLayer for SyncAllFails {
    fn inner(&self) -> &dyn Disk {
        &self.inner
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(FailingSyncs {
            inner: Disk::open(&self.inner, path, mode)?,
            fails: path.to_string_lossy().contains(self.failing),
        }))
    }
    fn sync_all(&self, _root: &Path) -> io::Result<()> {
        Err(io::Error::other("EIO on syncfs (injected)"))
    }
}

/// When the one sync of the data root fails, each partition syncs its own: the boot goes
/// on, a partition whose own sync fails is fenced (as when opening it fails), the others
/// serve.
#[test]
fn a_failed_sync_of_the_data_root_falls_back_to_each_partitions_own() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = start(&real_env(), root, node_settings()).unwrap().node;
    node.create_stream("s").unwrap();
    node.create_topic(&id(0), "t", 2, topic_options(&[]))
        .unwrap();
    for partition in 0..2 {
        let to = WirePartitioning::PartitionId(partition);
        node.send(&id(0), &id(0), &to, batch(7, 2, 32)).unwrap();
    }
    node.close().unwrap();

    let disk = SyncAllFails {
        inner: CountingDisk::default(),
        failing: "partitions/1/superblock",
    };
    let booted = start(&env_on(disk.clone()), root, node_settings()).expect("boot goes on");
    let fate = |partition: u32| {
        let found = booted
            .report
            .partitions
            .iter()
            .find(|(k, _)| *k == (0, 0, partition));
        found.map(|(_, boot)| boot.clone()).expect("booted")
    };
    assert!(
        matches!(fate(0), PartitionBoot::Opened(plan) if plan.fence.is_none()),
        "partition 0 opens"
    );
    assert!(
        matches!(
            fate(1),
            PartitionBoot::Fenced(FenceReason::IoFailed { op: "sync", .. })
        ),
        "partition 1 is fenced by its own sync: {:?}",
        fate(1)
    );
    assert!(
        disk.inner.syncs_of("partitions/0/") > 0,
        "partition 0 synced its own"
    );
    assert_eq!(read_node(&booted.node, (0, 0, 0)).len(), 2);
    booted.node.close().unwrap();
}

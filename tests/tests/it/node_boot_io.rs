//! What a node's boot reads and syncs per partition: each superblock slot read from the
//! device once (the tree survey hands what it read to the partition's recovery), and what
//! recoveries with nothing to repair serve made durable by one sync of the data root per
//! shard (`Disk::sync_all`), not by a flush of the device per file and directory; when that
//! sync fails, by each partition's own. After a clean exit in the same kernel, boot reads
//! the page cache as it is; after an unclean one, the device (`node::exit_record`).

use cairn_engine::env::{Disk, DiskFile, DiskLayer, FileLayer, OpenMode, PageCache};
use cairn_engine::node::exit_record::{Why, EXIT_RECORD};
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

/// A node at `root` with `TOPICS` `persisted` topics (acknowledged sends survive a halt),
/// two messages sent to each partition, shut down gracefully.
fn fill_and_close(root: &Path) {
    let node = start(&real_env(), root, node_settings()).unwrap().node;
    node.create_stream("s").unwrap();
    for topic in 0..TOPICS {
        let options = topic_options(&[("durability", 2, b"persisted")]);
        node.create_topic(&id(0), &format!("t{topic}"), PARTITIONS, options)
            .unwrap();
    }
    send_to_each(&node, 1);
    node.close().unwrap();
}

#[test]
fn a_boot_reads_each_slot_once_and_syncs_the_data_root_once() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    fill_and_close(root);
    // Without its exit record a boot cannot tell how the last process ended: it reads the
    // device (a clean exit's boot reads the cache: the test below).
    std::fs::remove_file(root.join(EXIT_RECORD)).unwrap();

    let disk = CountingDisk::default();
    let booted = start(&env_on(disk.clone()), root, node_settings()).unwrap();
    assert_eq!(
        booted.report.page_cache,
        Some((PageCache::Suspect, Why::NoRecord))
    );
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

/// Dropped from the cache by a boot: every path but the exit record's own (which boot reads
/// from the device to decide, and reads back when it writes it).
fn evicted_besides_the_exit_record(disk: &CountingDisk) -> Vec<String> {
    let evictions = disk.evictions.lock().unwrap().clone();
    let paths = evictions.keys().map(|p| p.to_string_lossy().into_owned());
    paths.filter(|p| !p.ends_with(EXIT_RECORD)).collect()
}

/// What a boot that read the page cache as it was dropped from it: nothing it read, only
/// the metadata superblock slot it wrote a record into (every slot write is read back from
/// the device, to check where it landed).
fn assert_read_the_cache(evicted: &[String]) {
    let written = evicted
        .iter()
        .filter(|p| p.contains("metadata/superblock."));
    assert!(
        evicted.len() <= 1 && written.count() == evicted.len(),
        "a clean exit's boot reads the cache: {evicted:?}"
    );
}

/// A clean exit lets the next boot of the same kernel read what the page cache holds (no
/// file of the metadata or of a partition dropped from it); a process that stops without
/// one (a crash) makes the next boot read the device again, and that boot's own clean exit
/// lets the one after it trust the cache again. Each serves everything sent before.
#[test]
fn a_clean_exit_lets_the_next_boot_trust_the_page_cache_and_a_crash_does_not() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    fill_and_close(root);

    let boot = |expected: (PageCache, Why)| {
        let disk = CountingDisk::default();
        let booted = start(&env_on(disk.clone()), root, node_settings()).unwrap();
        assert_eq!(booted.report.page_cache, Some(expected));
        (booted.node, evicted_besides_the_exit_record(&disk))
    };
    let (node, evicted) = boot((PageCache::Trusted, Why::CleanExit));
    assert_read_the_cache(&evicted);
    send_to_each(&node, 10);
    node.halt();

    let (node, evicted) = boot((PageCache::Suspect, Why::UncleanExit));
    let slots = evicted
        .iter()
        .filter(|p| p.contains("/partitions/") && p.contains("superblock."));
    assert_eq!(
        slots.count(),
        (2 * TOPICS * PARTITIONS) as usize,
        "{evicted:?}"
    );
    assert!(
        evicted.iter().any(|p| p.contains("metadata")),
        "{evicted:?}"
    );
    for topic in 0..TOPICS {
        for partition in 0..PARTITIONS {
            assert_eq!(read_node(&node, (0, topic, partition)).len(), 4);
        }
    }
    node.close().unwrap();

    let (node, evicted) = boot((PageCache::Trusted, Why::CleanExit));
    assert_read_the_cache(&evicted);
    assert_eq!(read_node(&node, (0, 2, 1)).len(), 4);
    node.close().unwrap();
}

/// A disk whose file syncs fail (EIO) for paths containing `failing` once `armed`.
#[derive(Clone)]
struct FileSyncsFail {
    inner: CountingDisk,
    failing: &'static str,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl DiskLayer for FileSyncsFail {
    fn inner(&self) -> &dyn Disk {
        &self.inner
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        let armed = self.armed.load(std::sync::atomic::Ordering::SeqCst);
        Ok(Box::new(FailingSyncs {
            inner: Disk::open(&self.inner, path, mode)?,
            fails: armed && path.to_string_lossy().contains(self.failing),
        }))
    }
}

/// A sync that failed while the node ran (its partition fenced, the node serving on) makes
/// the graceful shutdown's exit unclean: the next boot of the kernel reads the device.
#[test]
fn a_sync_that_failed_while_the_node_ran_makes_its_exit_unclean() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let disk = FileSyncsFail {
        inner: CountingDisk::default(),
        failing: "partitions/1/",
        armed: Default::default(),
    };
    let node = start(&env_on(disk.clone()), root, node_settings())
        .unwrap()
        .node;
    node.create_stream("s").unwrap();
    let options = topic_options(&[("durability", 2, b"persisted")]);
    node.create_topic(&id(0), "t", 2, options).unwrap();
    disk.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let to = |p| WirePartitioning::PartitionId(p);
    assert!(node.send(&id(0), &id(0), &to(1), batch(3, 1, 32)).is_err());
    node.send(&id(0), &id(0), &to(0), batch(4, 1, 32)).unwrap();
    let _ = node.close();

    let booted = start(&real_env(), root, node_settings()).unwrap();
    assert_eq!(
        booted.report.page_cache,
        Some((PageCache::Suspect, Why::UncleanExit))
    );
    assert_eq!(read_node(&booted.node, (0, 0, 0)).len(), 1);
    booted.node.close().unwrap();
}

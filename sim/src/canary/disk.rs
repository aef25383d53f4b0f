//! The canaries that skip syncs: a disk wrapper whose chosen syncs return success without
//! doing anything, installed for one role (recovery's apply, an open log, the metadata
//! plane) through the engine's disk hooks, deciding by path.

use cairn_engine::env::{Disk, DiskFile, DiskHook, DiskLayer, FileLayer, OpenMode};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// `unsynced-repair` wraps the disk recovery's apply writes through.
pub fn recovery_disk_hook(name: &str) -> Option<DiskHook> {
    match name {
        "unsynced-repair" => Some(unsynced_repair),
        _ => None,
    }
}

/// `ack-before-sync` and `no-dir-sync` wrap the disk an open log writes through.
pub fn log_disk_hook(name: &str) -> Option<DiskHook> {
    match name {
        "ack-before-sync" => Some(ack_before_sync),
        "no-dir-sync" => Some(no_dir_sync),
        _ => None,
    }
}

/// `ack-metadata-before-sync` wraps the disk the metadata plane writes through.
pub fn plane_disk_hook(name: &str) -> Option<DiskHook> {
    match name {
        "ack-metadata-before-sync" => Some(ack_metadata_before_sync),
        _ => None,
    }
}

/// `raft-ack-before-sync` wraps the disk of each replica of the cluster world.
pub fn replica_disk_hook(name: &str) -> Option<DiskHook> {
    match name {
        "raft-ack-before-sync" => Some(raft_ack_before_sync),
        "part-wal-unsynced" => Some(part_wal_unsynced),
        _ => None,
    }
}

/// `skip-deferred-sync` wraps the simulated machine's disk: `sync_all`, with which a
/// node's boot makes durable what its recoveries serve as they found it
/// (`Insurance::Deferred`), returns success and syncs nothing.
pub fn machine_disk(name: Option<&str>, disk: Arc<dyn Disk>) -> Arc<dyn Disk> {
    match name {
        Some("skip-deferred-sync") => Arc::new(NoSyncAll { inner: disk }),
        _ => disk,
    }
}

struct NoSyncAll {
    inner: Arc<dyn Disk>,
}

impl DiskLayer for NoSyncAll {
    fn inner(&self) -> &dyn Disk {
        self.inner.as_ref()
    }
    fn sync_all(&self, _root: &Path) -> io::Result<()> {
        Ok(())
    }
}

/// A replica's Raft log segments are never synced: it tells openraft its entries are
/// flushed (so its leader counts it toward the quorum) while they are only in the cache.
fn raft_ack_before_sync(disk: Arc<dyn Disk>) -> Arc<dyn Disk> {
    Arc::new(SkippingDisk {
        inner: disk,
        skip_file_sync: |path| {
            path.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("log-"))
        },
        skip_dir_sync: |_| false,
    })
}

/// A partition group's WAL segments are never synced: a replica tells its leader a send is
/// flushed (so it counts toward the group's quorum) while it is only in the cache. The
/// metadata group's log is synced as it should be.
fn part_wal_unsynced(disk: Arc<dyn Disk>) -> Arc<dyn Disk> {
    Arc::new(SkippingDisk {
        inner: disk,
        skip_file_sync: |path| {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let in_partitions = path.to_string_lossy().contains("/cluster/partitions/");
            in_partitions && name.is_some_and(|n| n.starts_with("log-"))
        },
        skip_dir_sync: |_| false,
    })
}

/// Only the superblock record is synced; every other file and every directory is not.
fn unsynced_repair(disk: Arc<dyn Disk>) -> Arc<dyn Disk> {
    Arc::new(SkippingDisk {
        inner: disk,
        skip_file_sync: |path| !is_superblock(path),
        skip_dir_sync: |_| true,
    })
}

/// Segment logs and indexes are never synced.
fn ack_before_sync(disk: Arc<dyn Disk>) -> Arc<dyn Disk> {
    Arc::new(SkippingDisk {
        inner: disk,
        skip_file_sync: is_segment_file,
        skip_dir_sync: |_| false,
    })
}

/// The partition directory, where segment names live, is never synced (the offsets ones
/// are).
fn no_dir_sync(disk: Arc<dyn Disk>) -> Arc<dyn Disk> {
    Arc::new(SkippingDisk {
        inner: disk,
        skip_file_sync: |_| false,
        skip_dir_sync: |dir| !dir.components().any(|c| c.as_os_str() == "offsets"),
    })
}

/// The metadata journal is never synced.
fn ack_metadata_before_sync(disk: Arc<dyn Disk>) -> Arc<dyn Disk> {
    Arc::new(SkippingDisk {
        inner: disk,
        skip_file_sync: |path| path.file_name().is_some_and(|n| n == "journal.wal"),
        skip_dir_sync: |_| false,
    })
}

fn is_superblock(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("superblock"))
}

fn is_segment_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "log" || e == "index")
}

/// A disk whose chosen syncs return success without doing anything.
struct SkippingDisk {
    inner: Arc<dyn Disk>,
    skip_file_sync: fn(&Path) -> bool,
    skip_dir_sync: fn(&Path) -> bool,
}

struct SkippingFile {
    inner: Box<dyn DiskFile>,
    skip_sync: bool,
}

impl FileLayer for SkippingFile {
    fn inner(&self) -> &dyn DiskFile {
        self.inner.as_ref()
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.skip_sync {
            return Ok(());
        }
        self.inner.sync_data()
    }
}

impl DiskLayer for SkippingDisk {
    fn inner(&self) -> &dyn Disk {
        self.inner.as_ref()
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(SkippingFile {
            inner: self.inner.open(path, mode)?,
            skip_sync: (self.skip_file_sync)(path),
        }))
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        if (self.skip_dir_sync)(path) {
            return Ok(());
        }
        self.inner.sync_dir(path)
    }
}

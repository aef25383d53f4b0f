//! `Disk::sync_all` where one `syncfs` would not do: whether it does, and the walk that
//! syncs every file and directory one by one instead.

use std::fs::File;
use std::io;
use std::path::Path;

/// Whether one `syncfs` of `root`'s file system makes everything under `root` durable and
/// reports its writeback errors: Linux 5.8 or later (before, syncfs reports none), no
/// file system mounted below `root`, and `root`'s own entries (`metadata`, `streams`, maybe
/// links to elsewhere) on its file system.
#[cfg(target_os = "linux")]
pub(super) fn syncfs_covers(root: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")?;
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    if (major, minor) < (5, 8) {
        return Ok(false);
    }
    let root = std::fs::canonicalize(root)?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    // The fifth field is the mount point (spaces escaped as \040: such a path is taken as
    // not below `root`, which only ever names paths without them here).
    let below = mounts
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|point| Path::new(point).starts_with(&root) && Path::new(point) != root);
    if below {
        return Ok(false);
    }
    let device = std::fs::metadata(&root)?.dev();
    for entry in std::fs::read_dir(&root)? {
        if std::fs::metadata(entry?.path())?.dev() != device {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Every file and directory under `root` synced one by one (where one `syncfs` would not
/// do: see [`syncfs_covers`]).
pub(super) fn sync_tree(root: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        match std::fs::metadata(entry.path())?.is_dir() {
            true => sync_tree(&entry.path())?,
            false => File::open(entry.path())?.sync_all()?,
        }
    }
    File::open(root)?.sync_all()
}

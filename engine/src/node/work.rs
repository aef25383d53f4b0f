//! Directory work shared by boot and the metadata owner: removing what a journaled op
//! deleted (and only that), and making new names durable with one sync per directory.

use super::tree::{survey_path, Found};
use crate::env::{DirEntry, Disk};
use crate::partition::superblock::SLOT_NAMES;
use crate::partition::PartitionIdentity;
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

/// Removes `path` (if present) and syncs its parent.
pub(crate) fn remove_durably(disk: &dyn Disk, path: &Path) -> io::Result<()> {
    // A partition's rebuild mark goes first: a crash after finds the directory, whose
    // removal is redone, never a mark of a directory gone (`super::rebuild`).
    let in_partitions = path.parent().and_then(Path::file_name) == Some("partitions".as_ref());
    let marked = in_partitions && super::rebuild::remove_marks(disk, path)?;
    let there = disk.exists(path)?;
    if there {
        remove_identity_last(disk, path)?;
    }
    match path.parent() {
        Some(parent) if marked || there => disk.sync_dir(parent),
        _ => Ok(()),
    }
}

/// Removes directory `dir` so that a crash partway leaves either its partition's identity
/// or nothing of it: a partition directory's superblock slots go last, once the removal of
/// everything else is synced. A real `remove_dir_all` unlinks in the order the directory
/// lists (not by name): a crash could leave a segment without its superblock, data with no
/// readable identity, which boot never removes (`super::tree`); a leftover with its
/// identity is the deletion's, which boot finishes. Any other directory (a topic's or a
/// stream's, whose partitions went first) goes whole.
fn remove_identity_last(disk: &dyn Disk, dir: &Path) -> io::Result<()> {
    let entries = disk.read_dir(dir)?;
    let is_slot = |e: &DirEntry| !e.is_dir && SLOT_NAMES.contains(&e.name.as_str());
    if !entries.iter().any(is_slot) {
        return disk.remove_dir_all(dir);
    }
    for entry in entries.iter().filter(|e| !is_slot(e)) {
        let path = dir.join(&entry.name);
        match entry.is_dir {
            true => disk.remove_dir_all(&path)?,
            false => disk.remove_file(&path)?,
        }
    }
    disk.sync_dir(dir)?;
    for slot in entries.iter().filter(|e| is_slot(e)) {
        disk.remove_file(&dir.join(&slot.name))?;
    }
    disk.remove_dir_all(dir)
}

/// Every directory from `dir`'s parent up to `root`, which must be synced for `dir`'s name
/// (and the names of the directories created with it) to survive a power loss.
pub(crate) fn ancestors(root: &Path, dir: &Path, into: &mut BTreeSet<PathBuf>) {
    let mut current = dir.parent();
    while let Some(path) = current {
        into.insert(path.to_path_buf());
        if path == root {
            break;
        }
        current = path.parent();
    }
}

/// Syncs each directory once, deepest first (a name is durable before the one above it).
pub(crate) fn sync_dirs(disk: &dyn Disk, dirs: &BTreeSet<PathBuf>) -> io::Result<()> {
    let mut deepest_first: Vec<&PathBuf> = dirs.iter().collect();
    deepest_first.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for dir in deepest_first {
        if disk.exists(dir)? {
            disk.sync_dir(dir)?;
        }
    }
    Ok(())
}

/// What removing a topic's or stream's directory left in place.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TreeRemoval {
    pub removed: Vec<PathBuf>,
    /// Partition directories kept: they hold an identity the deletion did not remove, or
    /// data with no readable identity.
    pub kept: Vec<(PathBuf, Found)>,
}

/// Removes the directory `dir` of a deleted topic or stream: each partition directory in it
/// only if it holds one of `deleted` (or nothing), then `dir` itself if nothing was kept —
/// else, in a stream's, each topic directory in which nothing was kept.
pub(crate) fn remove_deleted_tree(
    disk: &dyn Disk,
    dir: &Path,
    deleted: &[PartitionIdentity],
) -> io::Result<TreeRemoval> {
    let mut removal = TreeRemoval::default();
    if !disk.exists(dir)? {
        return Ok(removal);
    }
    let deleted: BTreeSet<PartitionIdentity> = deleted.iter().copied().collect();
    for partitions in partition_parents(disk, dir)? {
        for entry in disk.read_dir(&partitions)? {
            let path = partitions.join(&entry.name);
            if !entry.is_dir && super::rebuild::is_mark(&entry.name) {
                // A mark whose partition directory is gone (`super::rebuild`); one beside
                // a directory went with it, earlier in this listing.
                if disk.exists(&path)? {
                    disk.remove_file(&path)?;
                    disk.sync_dir(&partitions)?;
                }
                continue;
            }
            let found = survey_path(disk, &path);
            match &found {
                Found::Partition(id) if deleted.contains(id) => {}
                Found::Empty | Found::Missing => {}
                _ => {
                    tracing::error!(dir = %path.display(), %found, "a deleted entity's directory holds a partition directory no journaled op deleted; keeping it");
                    removal.kept.push((path, found));
                    continue;
                }
            }
            remove_durably(disk, &path)?;
            removal.removed.push(path);
        }
    }
    if removal.kept.is_empty() {
        remove_durably(disk, dir)?;
        removal.removed.push(dir.to_path_buf());
    } else {
        remove_emptied_topics(disk, dir, &mut removal)?;
    }
    Ok(removal)
}

/// In a deleted stream's directory `dir` that keeps something, removes each topic directory
/// that keeps nothing (every partition directory in it was removed).
fn remove_emptied_topics(disk: &dyn Disk, dir: &Path, removal: &mut TreeRemoval) -> io::Result<()> {
    let topics = dir.join("topics");
    if !disk.exists(&topics)? {
        return Ok(());
    }
    for topic in disk.read_dir(&topics)? {
        let path = topics.join(&topic.name);
        let is_topic = topic.is_dir && super::tree::dir_id(&topic.name).is_some();
        if is_topic && !removal.kept.iter().any(|(k, _)| k.starts_with(&path)) {
            remove_durably(disk, &path)?;
            removal.removed.push(path);
        }
    }
    Ok(())
}

/// The `partitions/` directories under a topic or stream directory.
fn partition_parents(disk: &dyn Disk, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let direct = dir.join("partitions");
    if disk.exists(&direct)? {
        return Ok(vec![direct]);
    }
    let topics = dir.join("topics");
    let mut parents = Vec::new();
    if disk.exists(&topics)? {
        for topic in disk.read_dir(&topics)? {
            let partitions = topics.join(&topic.name).join("partitions");
            if topic.is_dir && disk.exists(&partitions)? {
                parents.push(partitions);
            }
        }
    }
    Ok(parents)
}

//! The entity tree under `streams/` at boot, in the shape of partition recovery: [`survey`]
//! reads what is there, [`decide`] is a pure table of what each partition path becomes, and
//! boot carries the decisions out (`cairn check` prints them).
//!
//! The journal is the truth for the tree, but only for what it names: the directory work of
//! the ops after the recorded applied op may not have finished, and boot redoes it by
//! identity. A directory is removed only when a journaled op deleted the identity it holds
//! (or it is an empty leftover of such an op's own work). A directory no op accounts for is
//! never removed: it may hold the only copy of acknowledged data (a lost metadata op, an
//! operator's copy). It is kept and reported, and a partition of the metadata whose identity
//! it also claims is fenced (which copy is the partition is unknown).
//!
//! | found at a partition path | the metadata's partition there | decision |
//! |---|---|---|
//! | nothing | one a journaled op (re)creates | create it |
//! | nothing | one no journaled op touches | open (fenced `DirectoryMissing`, never recreated) |
//! | nothing | none | nothing |
//! | the partition's own identity | that one | open |
//! | an identity a journaled op deleted or replaced | one | replace it (remove, create) |
//! | an identity a journaled op deleted or replaced | none | remove |
//! | an empty directory (no identity, no data) a journaled op touched | one | replace it |
//! | an empty directory a journaled op touched | none | remove |
//! | any other directory | one | open (recovery fences it: another identity, no superblock, damage) |
//! | any other directory | none | keep, report (unaccounted) |
//!
//! A topic or stream directory is removed when a journaled op deleted the entity and every
//! partition directory in it was removed; otherwise it is kept (and reported when the
//! metadata does not have the entity).

use crate::env::Disk;
use crate::partition::recovery::{identity_in, read_slots, SlotRead};
use crate::partition::{partition_dir, PartitionIdentity};
use crate::state::{key_of, DirWork, MetaState, PartitionKey};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What a partition path holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Missing,
    /// A superblock names this identity.
    Partition(PartitionIdentity),
    /// A directory with no readable identity and no data (no log bytes, no offset files).
    Empty,
    /// A directory with data but no readable identity, or one that cannot be read.
    Foreign {
        why: String,
    },
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::Missing => f.write_str("nothing"),
            Found::Partition(id) => write!(f, "partition {id}"),
            Found::Empty => f.write_str("an empty directory"),
            Found::Foreign { why } => write!(f, "data with no readable identity ({why})"),
        }
    }
}

/// What boot does at one partition path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Open the metadata's partition there (recovery decides the rest).
    Open,
    /// Create the metadata's partition, empty (a journaled op made it).
    Create,
    /// Remove what is there, then create the metadata's partition.
    Replace,
    /// Remove what is there (a journaled op deleted it).
    Remove,
    /// Keep it and report it: nothing accounts for it.
    Unaccounted,
    /// Nothing there and nothing wanted.
    Nothing,
}

crate::names::variant_names!(Fate: Open, Create, Replace, Remove, Unaccounted, Nothing);

/// The table in the module comment. `wanted` is the metadata's partition at the path;
/// `journaled` every identity the ops after the applied one created or removed there.
pub fn decide(
    found: &Found,
    wanted: Option<PartitionIdentity>,
    journaled: &BTreeSet<PartitionIdentity>,
) -> Fate {
    let touched = !journaled.is_empty();
    match (found, wanted) {
        (Found::Missing, Some(w)) if journaled.contains(&w) => Fate::Create,
        (Found::Missing, Some(_)) => Fate::Open,
        (Found::Missing, None) => Fate::Nothing,
        (Found::Partition(id), Some(w)) if *id == w => Fate::Open,
        (Found::Partition(id), Some(_)) if journaled.contains(id) => Fate::Replace,
        (Found::Partition(id), None) if journaled.contains(id) => Fate::Remove,
        (Found::Empty, Some(_)) if touched => Fate::Replace,
        (Found::Empty, None) if touched => Fate::Remove,
        (_, Some(_)) => Fate::Open,
        (_, None) => Fate::Unaccounted,
    }
}

/// One partition path as boot found and judged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPlan {
    pub key: PartitionKey,
    pub dir: PathBuf,
    pub found: Found,
    pub wanted: Option<PartitionIdentity>,
    pub fate: Fate,
    /// A journaled op after the applied one made the wanted partition: its work may have
    /// been cut short before its names were synced, so boot syncs them whatever the fate.
    pub made_by_tail: bool,
    /// A journaled op after the applied one created or removed a partition here: the
    /// parent's entries may be only in the cache (a removal done, its sync not), so boot
    /// syncs the parent whatever it finds.
    pub touched_by_tail: bool,
}

/// What boot does to the tree.
#[derive(Debug, Clone, Default)]
pub struct TreePlan {
    /// Directories whose entries a journaled op after the applied one changed (a removed
    /// topic's or stream's parent, and the `topics/` and `partitions/` directories inside
    /// it): synced at boot whatever is found there.
    pub touched_dirs: Vec<PathBuf>,
    /// Every partition path the metadata, the journal tail or the disk names.
    pub paths: Vec<PathPlan>,
    /// Topic and stream directories to remove after their partitions (journaled deletions).
    pub remove_dirs: Vec<PathBuf>,
    /// Topic and stream directories kept though the metadata does not have the entity.
    pub kept_dirs: Vec<PathBuf>,
    /// Partitions fenced because an unaccounted directory claims their identity:
    /// (partition, the other directory).
    pub claimed: Vec<(PartitionKey, PathBuf)>,
    /// Entries under `streams/` that are not entity directories, left alone.
    pub notes: Vec<String>,
    /// The superblock slots the survey read (from the device) of each partition it opens
    /// as found: boot hands them to the partition's recovery instead of reading them twice,
    /// and keeps none of them.
    pub slots: BTreeMap<PartitionKey, [SlotRead; 2]>,
}

impl TreePlan {
    /// The plan changes nothing on disk and keeps nothing unexplained.
    pub fn is_clean(&self) -> bool {
        self.remove_dirs.is_empty()
            && self.kept_dirs.is_empty()
            && self.claimed.is_empty()
            && self
                .paths
                .iter()
                .all(|p| matches!(p.fate, Fate::Open | Fate::Nothing))
    }
}

/// An id as a directory name: exactly the decimal id.
pub(crate) fn dir_id(name: &str) -> Option<u32> {
    name.parse::<u32>().ok().filter(|id| id.to_string() == name)
}

pub fn topic_dir(root: &Path, stream: u32, topic: u32) -> PathBuf {
    stream_dir(root, stream)
        .join("topics")
        .join(topic.to_string())
}

pub fn stream_dir(root: &Path, stream: u32) -> PathBuf {
    root.join("streams").join(stream.to_string())
}

/// The directories of the entity tree under `root/streams` (streams, topics, partitions).
#[derive(Debug, Default)]
struct Listed {
    streams: BTreeSet<u32>,
    topics: BTreeSet<(u32, u32)>,
    partitions: BTreeSet<PartitionKey>,
}

fn list(disk: &dyn Disk, root: &Path, notes: &mut Vec<String>) -> io::Result<Listed> {
    let mut found = Listed::default();
    let streams = root.join("streams");
    if !disk.exists(&streams)? {
        return Ok(found);
    }
    let mut note = |path: PathBuf| notes.push(format!("ignored unknown entry {}", path.display()));
    for stream in disk.read_dir(&streams)? {
        let Some(s) = dir_id(&stream.name).filter(|_| stream.is_dir) else {
            note(streams.join(&stream.name));
            continue;
        };
        found.streams.insert(s);
        let stream_dir = streams.join(&stream.name);
        unknown_besides(disk, &stream_dir, "topics", &mut note)?;
        let topics = stream_dir.join("topics");
        if !disk.exists(&topics)? {
            continue;
        }
        for topic in disk.read_dir(&topics)? {
            let Some(t) = dir_id(&topic.name).filter(|_| topic.is_dir) else {
                note(topics.join(&topic.name));
                continue;
            };
            found.topics.insert((s, t));
            let topic_dir = topics.join(&topic.name);
            unknown_besides(disk, &topic_dir, "partitions", &mut note)?;
            let partitions = topic_dir.join("partitions");
            if !disk.exists(&partitions)? {
                continue;
            }
            for partition in disk.read_dir(&partitions)? {
                match dir_id(&partition.name).filter(|_| partition.is_dir) {
                    Some(p) => {
                        found.partitions.insert((s, t, p));
                    }
                    // A replica's rebuild mark: boot's to finish or remove (`rebuild`).
                    None if !partition.is_dir && super::rebuild::is_mark(&partition.name) => {}
                    None => note(partitions.join(&partition.name)),
                }
            }
        }
    }
    Ok(found)
}

/// Notes every entry of the entity directory `dir` other than its one child directory
/// `child` (an operator's file or directory: reported, left alone).
fn unknown_besides(
    disk: &dyn Disk,
    dir: &Path,
    child: &str,
    note: &mut dyn FnMut(PathBuf),
) -> io::Result<()> {
    for entry in disk.read_dir(dir)? {
        if !(entry.is_dir && entry.name == child) {
            note(dir.join(&entry.name));
        }
    }
    Ok(())
}

/// What one partition directory holds. Read errors make it foreign (kept, never removed).
pub fn survey_path(disk: &dyn Disk, dir: &Path) -> Found {
    survey_path_and_slots(disk, dir).0
}

/// [`survey_path`], and the superblock slots it read when it found a partition.
fn survey_path_and_slots(disk: &dyn Disk, dir: &Path) -> (Found, Option<[SlotRead; 2]>) {
    let survey = || -> io::Result<(Found, Option<[SlotRead; 2]>)> {
        if !disk.exists(dir)? {
            return Ok((Found::Missing, None));
        }
        let slots = read_slots(disk, dir)?;
        if let Some(identity) = identity_in(&slots) {
            return Ok((Found::Partition(identity), Some(slots)));
        }
        let mut data = Vec::new();
        for entry in disk.read_dir(dir)? {
            let path = dir.join(&entry.name);
            if entry.name.ends_with(".log") && !entry.is_dir {
                let len = disk.open(&path, crate::env::OpenMode::Read)?.len()?;
                if len > 0 {
                    data.push(format!("{} ({len} bytes)", entry.name));
                }
            }
        }
        for sub in ["offsets/consumers", "offsets/groups"] {
            let path = dir.join(sub);
            if disk.exists(&path)? {
                let files = disk.read_dir(&path)?;
                if !files.is_empty() {
                    data.push(format!("{} files in {sub}", files.len()));
                }
            }
        }
        let found = match data.is_empty() {
            true => Found::Empty,
            false => Found::Foreign {
                why: data.join(", "),
            },
        };
        Ok((found, None))
    };
    survey().unwrap_or_else(|e| {
        let why = format!("cannot be read: {e}");
        (Found::Foreign { why }, None)
    })
}

/// Surveys the tree and decides every path. `state` is the metadata after replay; `work`
/// the directory work of the ops after the applied one, in op order.
pub fn plan(
    disk: &dyn Disk,
    root: &Path,
    state: &MetaState,
    work: &[&DirWork],
) -> io::Result<TreePlan> {
    let mut plan = TreePlan::default();
    let listed = list(disk, root, &mut plan.notes)?;
    let mut journaled: BTreeMap<PartitionKey, BTreeSet<PartitionIdentity>> = BTreeMap::new();
    let mut deleted_topics = BTreeSet::new();
    let mut deleted_streams = BTreeSet::new();
    for w in work {
        for identity in w.identities() {
            journaled
                .entry(key_of(&identity))
                .or_default()
                .insert(identity);
        }
        match w {
            DirWork::RemoveTopic { stream, topic, .. } => {
                deleted_topics.insert((*stream, *topic));
                if let Some(parent) = topic_dir(root, *stream, *topic).parent() {
                    plan.touched_dirs.push(parent.to_path_buf());
                }
            }
            DirWork::RemoveStream { stream, .. } => {
                deleted_streams.insert(*stream);
                if let Some(parent) = stream_dir(root, *stream).parent() {
                    plan.touched_dirs.push(parent.to_path_buf());
                }
            }
            _ => {}
        }
    }
    touch_deleted_dirs(root, &listed, &deleted_topics, &deleted_streams, &mut plan);
    let wanted: BTreeMap<PartitionKey, PartitionIdentity> = state
        .partitions()
        .into_iter()
        .map(|id| (key_of(&id), id))
        .collect();
    let keys: BTreeSet<PartitionKey> = wanted
        .keys()
        .chain(journaled.keys())
        .chain(listed.partitions.iter())
        .copied()
        .collect();
    let none = BTreeSet::new();
    for key in keys {
        let dir = partition_dir(root, key.0, key.1, key.2);
        let (found, slots) = match listed.partitions.contains(&key) {
            true => survey_path_and_slots(disk, &dir),
            false => (Found::Missing, None),
        };
        let target = wanted.get(&key).copied();
        let tail = journaled.get(&key).unwrap_or(&none);
        let fate = decide(&found, target, tail);
        if let (Fate::Open, Some(slots)) = (fate, slots) {
            plan.slots.insert(key, slots);
        }
        let made_by_tail = target.is_some_and(|t| tail.contains(&t));
        if let (Fate::Unaccounted, Found::Partition(id)) = (fate, &found) {
            if wanted.get(&key_of(id)) == Some(id) {
                plan.claimed.push((key_of(id), dir.clone()));
            }
        }
        plan.paths.push(PathPlan {
            key,
            dir,
            found,
            wanted: target,
            fate,
            made_by_tail,
            touched_by_tail: !tail.is_empty(),
        });
    }
    let kept = |plan: &TreePlan, scope: &dyn Fn(&PartitionKey) -> bool| {
        plan.paths
            .iter()
            .any(|p| scope(&p.key) && p.fate == Fate::Unaccounted)
    };
    for &(s, t) in &listed.topics {
        if state.find_topic(s, t).is_some() {
            continue;
        }
        let dir = topic_dir(root, s, t);
        let journaled = deleted_topics.contains(&(s, t)) || deleted_streams.contains(&s);
        if journaled && !kept(&plan, &|k| (k.0, k.1) == (s, t)) {
            // Removed on its own even when its stream goes too: the stream's directory may
            // be kept for another topic's sake.
            plan.remove_dirs.push(dir);
        } else {
            plan.kept_dirs.push(dir);
        }
    }
    for &s in &listed.streams {
        if state.stream(s).is_some() {
            continue;
        }
        let dir = stream_dir(root, s);
        let topics_kept = plan.kept_dirs.iter().any(|d| d.starts_with(&dir));
        if deleted_streams.contains(&s) && !topics_kept && !kept(&plan, &|k| k.0 == s) {
            plan.remove_dirs.push(dir);
        } else if !topics_kept {
            plan.kept_dirs.push(dir);
        }
    }
    Ok(plan)
}

/// The directories inside a deleted topic or stream whose entries its work may have changed
/// without a partition of the metadata's beneath them: an operator's empty directory removed
/// from a `partitions/`, an emptied topic removed from a kept stream's `topics/`. A crash
/// between such a removal and its sync leaves it only in the cache, where boot's survey no
/// longer sees it; synced at boot whatever is found, or a power loss brings it back after
/// the record says the work is done.
fn touch_deleted_dirs(
    root: &Path,
    listed: &Listed,
    deleted_topics: &BTreeSet<(u32, u32)>,
    deleted_streams: &BTreeSet<u32>,
    plan: &mut TreePlan,
) {
    for &s in deleted_streams {
        plan.touched_dirs.push(stream_dir(root, s).join("topics"));
    }
    for &(s, t) in &listed.topics {
        if deleted_streams.contains(&s) || deleted_topics.contains(&(s, t)) {
            plan.touched_dirs
                .push(topic_dir(root, s, t).join("partitions"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(partition: u32, nonce: u64) -> PartitionIdentity {
        PartitionIdentity {
            stream_id: 0,
            topic_id: 0,
            partition_id: partition,
            nonce,
        }
    }

    #[test]
    fn every_row_of_the_table() {
        let (a, b, c) = (id(1, 1), id(1, 2), id(1, 3));
        let set = |ids: &[PartitionIdentity]| ids.iter().copied().collect::<BTreeSet<_>>();
        let none = set(&[]);
        let foreign = Found::Foreign { why: "x".into() };
        let rows = [
            (Found::Missing, Some(a), set(&[a]), Fate::Create),
            (Found::Missing, Some(a), none.clone(), Fate::Open),
            (Found::Missing, None, set(&[a]), Fate::Nothing),
            (Found::Partition(a), Some(a), set(&[a]), Fate::Open),
            (Found::Partition(a), Some(b), set(&[a, b]), Fate::Replace),
            (Found::Partition(a), None, set(&[a]), Fate::Remove),
            (Found::Empty, Some(a), set(&[a]), Fate::Replace),
            (Found::Empty, None, set(&[a]), Fate::Remove),
            (Found::Empty, Some(a), none.clone(), Fate::Open),
            (Found::Empty, None, none.clone(), Fate::Unaccounted),
            (Found::Partition(c), Some(b), set(&[a, b]), Fate::Open),
            (Found::Partition(c), None, set(&[a]), Fate::Unaccounted),
            (foreign.clone(), Some(a), set(&[a]), Fate::Open),
            (foreign, None, set(&[a]), Fate::Unaccounted),
        ];
        for (found, wanted, journaled, fate) in rows {
            assert_eq!(
                decide(&found, wanted, &journaled),
                fate,
                "{found} wanted {wanted:?} journaled {journaled:?}"
            );
        }
    }
}

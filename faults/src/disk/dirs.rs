//! The namespace: the names of the current view (with the index of each file's names), and
//! the ordered log of unsynced changes of each directory that `sync_dir` makes durable.

use super::{parent_of, State};
use rand::seq::SliceRandom;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Node {
    File(u64),
    /// A directory, by its own id: one made later at the same path is another.
    Dir(u64),
}

/// One unsynced change of a directory's entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum DirOp {
    Link(PathBuf, Node),
    Unlink(PathBuf),
    /// A directory removed with everything in it: the names under it that were durable
    /// when it was removed (a directory made later at the same path keeps its own).
    UnlinkDir(PathBuf, Vec<(PathBuf, Node)>),
    /// Within one directory: atomic.
    Rename(PathBuf, PathBuf, Node),
}

#[derive(Clone, Debug)]
pub(super) struct PendingOp {
    pub(super) op: DirOp,
    /// A lying `sync_dir` claimed it durable.
    pub(super) promised: bool,
}

/// The current namespace: every name and what it names, and, kept in step with it, the
/// names of each file. A file has one name, or none once unlinked while open, or two after a
/// power loss kept both ends of a rename across directories.
#[derive(Default)]
pub(super) struct Names {
    pub(super) by_path: BTreeMap<PathBuf, Node>,
    /// The names of each file that has one (an index of `by_path`: a file's path is asked
    /// for on every write and sync).
    pub(super) of_file: BTreeMap<u64, BTreeSet<PathBuf>>,
}

impl Names {
    pub(super) fn from_map(by_path: BTreeMap<PathBuf, Node>) -> Names {
        let mut of_file: BTreeMap<u64, BTreeSet<PathBuf>> = BTreeMap::new();
        for (path, node) in &by_path {
            if let Node::File(inode) = node {
                of_file.entry(*inode).or_default().insert(path.clone());
            }
        }
        Names { by_path, of_file }
    }

    pub(super) fn get(&self, path: &Path) -> Option<&Node> {
        self.by_path.get(path)
    }

    pub(super) fn contains_key(&self, path: &Path) -> bool {
        self.by_path.contains_key(path)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&PathBuf, &Node)> {
        self.by_path.iter()
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &PathBuf> {
        self.by_path.keys()
    }

    /// The names under `dir` (at any depth), in order: paths sort by component, so a
    /// directory's descendants follow it before any other name (a range, not a scan of
    /// every name: listings of a busy disk were the simulator's hottest path).
    pub(super) fn under<'a>(
        &'a self,
        dir: &'a Path,
    ) -> impl Iterator<Item = (&'a PathBuf, &'a Node)> + 'a {
        use std::ops::Bound::{Excluded, Unbounded};
        self.by_path
            .range::<Path, _>((Excluded(dir), Unbounded))
            .take_while(move |(p, _)| p.starts_with(dir))
    }

    pub(super) fn insert(&mut self, path: PathBuf, node: Node) {
        if let Node::File(inode) = node {
            self.of_file.entry(inode).or_default().insert(path.clone());
        }
        if let Some(old) = self.by_path.insert(path.clone(), node) {
            if old != node {
                self.unindex(&path, old);
            }
        }
        self.debug_check();
    }

    pub(super) fn remove(&mut self, path: &Path) -> Option<Node> {
        let old = self.by_path.remove(path)?;
        self.unindex(path, old);
        self.debug_check();
        Some(old)
    }

    pub(super) fn unindex(&mut self, path: &Path, node: Node) {
        let Node::File(inode) = node else {
            return;
        };
        let names = self.of_file.get_mut(&inode).expect("an indexed file");
        assert!(names.remove(path), "a file's name is indexed");
        if names.is_empty() {
            self.of_file.remove(&inode);
        }
    }

    /// The first name of file `inode` in path order.
    pub(super) fn first_path_of(&self, inode: u64) -> Option<&PathBuf> {
        self.of_file.get(&inode).and_then(BTreeSet::first)
    }

    /// The files some name reaches.
    pub(super) fn live_files(&self) -> impl Iterator<Item = u64> + '_ {
        self.of_file.keys().copied()
    }

    /// The index equals the one `by_path` gives (O(names): debug builds and tests only).
    pub(super) fn debug_check(&self) {
        #[cfg(debug_assertions)]
        {
            let rebuilt = Names::from_map(self.by_path.clone());
            assert!(
                rebuilt.of_file == self.of_file,
                "the file-name index is in step"
            );
        }
    }
}

impl State {
    pub(super) fn is_dir(&self, path: &Path) -> bool {
        path.as_os_str().is_empty() || matches!(self.names.get(path), Some(Node::Dir(_)))
    }

    /// What a crash inside `remove_dir_all` leaves: a real one unlinks the files under
    /// `dir` one at a time, in the order the directory lists them (not by name), so a
    /// crash finds any of them gone (a seeded subset, in a seeded order) and the rest, with
    /// the directories, still there. Each unlink is pending in its directory, as one made
    /// by `remove_file` would be (a power loss may bring it back).
    pub(super) fn unlink_some_under(&mut self, dir: &Path) {
        let mut files: Vec<PathBuf> = self
            .names
            .under(dir)
            .filter(|(_, n)| matches!(n, Node::File(_)))
            .map(|(p, _)| p.clone())
            .collect();
        if files.is_empty() {
            return;
        }
        files.shuffle(&mut self.rng);
        let gone = self.rng.gen_range(0..=files.len());
        for file in files.into_iter().take(gone) {
            self.names.remove(&file);
            let parent = parent_of(&file);
            self.log_dir_op(&parent, DirOp::Unlink(file));
        }
    }

    pub(super) fn log_dir_op(&mut self, dir: &Path, op: DirOp) {
        self.pending
            .entry(dir.to_path_buf())
            .or_default()
            .push(PendingOp {
                op,
                promised: false,
            });
    }

    /// Applies a directory change to the durable namespace. A name it changes is no longer
    /// one whose claimed change was lost.
    pub(super) fn apply_durably(&mut self, op: &DirOp) {
        let changed = match op {
            DirOp::Link(p, _) | DirOp::Unlink(p) | DirOp::UnlinkDir(p, _) => p,
            DirOp::Rename(_, to, _) => to,
        };
        self.lost_synced_names.retain(|(p, _)| p != changed);
        match op {
            DirOp::Link(path, node) => {
                self.durable_names.insert(path.clone(), *node);
            }
            DirOp::Unlink(path) => {
                self.durable_names.remove(path);
            }
            DirOp::UnlinkDir(_, doomed) => {
                for (p, node) in doomed {
                    if self.durable_names.get(p) == Some(node) {
                        self.durable_names.remove(p);
                    }
                }
            }
            DirOp::Rename(from, to, node) => {
                self.durable_names.remove(from);
                self.durable_names.insert(to.clone(), *node);
            }
        }
    }
}

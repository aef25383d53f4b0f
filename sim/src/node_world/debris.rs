//! Operator debris: what an operator leaves under the data root while the node is down (the
//! `debris` knob of [`super::NodeProfile`]) — an empty directory at an unused partition,
//! topic or stream id, a directory holding a segment log's bytes and no identity at an
//! unused partition id, stray files and directories in the entity tree, and stray files
//! inside a live partition's directory — and the checks that every boot keeps each piece
//! byte for byte and reports it, notes as unknown nothing an operator did not make, and that
//! `cairn check` (`cairn_server::check::report`, run on the simulated disk after the boot
//! that first sees a piece) reports it too.
//!
//! The rule is the entity tree's (`engine/src/node/tree.rs` and `work.rs`): what no op
//! accounts for is never removed, and an unknown file is reported and left alone. The one
//! allowance, with its cause named: the deletion or replacement (a journaled op, or an
//! operator's removal of a partition directory) of the entity whose directory held a piece
//! when it was planted — the stream, the topic, or the partition incarnation — may take the
//! piece with that directory, unless the piece is data, which is kept whatever is deleted
//! around it. A piece a boot removes or changes with no such cause is a violation; so is
//! one a boot or the check keeps without reporting it.

use super::model::{AdminOp, Effect};
use super::{NodeWorld, NODE_ROOT};
use crate::report::{violation, Checked, INV_JUSTIFIED};
use cairn_engine::env::{Disk, OpenMode};
use cairn_engine::node::tree::Fate;
use cairn_engine::node::{BootReport, PartitionBoot, PartitionKey};
use cairn_engine::partition::{partition_dir, PartitionIdentity};
use rand::Rng;
use std::path::{Path, PathBuf};

/// How the entity tree's notes name an entry it does not know (`engine/src/node/tree.rs`).
const UNKNOWN_ENTRY: &str = "ignored unknown entry ";

/// Most pieces one run plants (each one is judged at every boot).
pub(crate) const MAX_DEBRIS: usize = 8;
/// The first id debris takes: far above any id the workload's ops reach (a few streams,
/// topics and partitions, lowest free ids first), so no op ever creates an entity there.
const UNUSED: u32 = 100;

/// What a piece is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A directory with nothing in it.
    EmptyDir,
    /// A directory with a segment log's bytes and no superblock: data no identity names.
    DataDir,
    /// A file the engine does not know.
    StrayFile,
    /// A directory the engine does not know beside an entity directory's one child
    /// (`streams/s/<name>/`, `streams/s/topics/t/<name>/`), holding a file.
    StrayDir,
}

/// The entity whose directory held a piece when it was planted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Within {
    /// `streams/` itself, or an id no entity has: nothing deletes it.
    Root,
    Stream(u32),
    Topic(u32, u32),
    Partition(PartitionIdentity),
}

/// One piece of debris.
#[derive(Debug, Clone)]
pub(crate) struct Debris {
    pub(crate) kind: Kind,
    /// Every file it holds, with its bytes (none for an empty directory).
    pub(crate) files: Vec<(PathBuf, Vec<u8>)>,
    pub(crate) within: Within,
    /// Why the engine may have removed it since (the entity holding it was deleted).
    pub(crate) may_be_gone: Option<String>,
    /// `cairn check` has reported it.
    pub(crate) checked: bool,
}

/// `streams/` under the node's root.
fn streams_root() -> PathBuf {
    Path::new(NODE_ROOT).join("streams")
}

fn stream_path(s: u32) -> PathBuf {
    streams_root().join(s.to_string())
}

fn topic_path(s: u32, t: u32) -> PathBuf {
    stream_path(s).join("topics").join(t.to_string())
}

/// Whether `path` is a partition path (`streams/s/topics/t/partitions/p`).
fn at_partition_path(path: &Path) -> bool {
    path.parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "partitions")
}

impl NodeWorld {
    /// Whether `path` is a directory or file an operator made: a directed scenario's
    /// planted copy, or debris.
    pub(crate) fn operator_made(&self, path: &Path) -> bool {
        self.planted.contains(path) || self.debris.contains_key(path)
    }

    /// Whether `fence` is a partition's superblock naming another identity inside a
    /// directory a directed scenario planted at that partition's own path.
    pub(crate) fn planted_claims(
        &self,
        fence: Option<&cairn_engine::partition::FenceReason>,
    ) -> bool {
        match fence {
            Some(cairn_engine::partition::FenceReason::SuperblockIdentity { path, .. }) => {
                path.parent().is_some_and(|dir| self.planted.contains(dir))
            }
            _ => false,
        }
    }

    /// Whether anything an operator made lies at or under `dir`.
    pub(crate) fn operator_made_under(&self, dir: &Path) -> bool {
        self.operator_paths().any(|p| p.starts_with(dir))
    }

    /// Every directory or file an operator made: a directed scenario's planted copies and
    /// the debris.
    fn operator_paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.planted.iter().chain(self.debris.keys())
    }

    /// While the node is down, an operator leaves one piece of debris (durably). Only once
    /// a boot has served: before the metadata's first record, any directory under
    /// `streams/` makes boot refuse (`DataWithoutMetadata`: it may be data whose metadata
    /// was lost), by design.
    pub(crate) fn plant_debris(&mut self) {
        if self.debris_planted as usize >= MAX_DEBRIS || self.last_tree.is_none() {
            return;
        }
        let n = UNUSED + self.debris_planted;
        self.debris_planted += 1;
        let topics: Vec<(u32, u32)> = self
            .model
            .streams
            .iter()
            .flat_map(|(s, stream)| stream.topics.keys().map(move |t| (*s, *t)))
            .collect();
        let streams: Vec<u32> = self.model.streams.keys().copied().collect();
        let topic = (!topics.is_empty()).then(|| topics[self.rng.gen_range(0..topics.len())]);
        let stream = (!streams.is_empty()).then(|| streams[self.rng.gen_range(0..streams.len())]);
        // A partition path at an unused id: in a topic the model has, or in an unused one.
        let partition_path = match topic {
            Some((s, t)) => (
                partition_dir(Path::new(NODE_ROOT), s, t, n),
                Within::Topic(s, t),
            ),
            None => (partition_dir(Path::new(NODE_ROOT), n, n, n), Within::Root),
        };
        let note = format!("notes-{n}.txt");
        let bytes = format!("an operator's note {n}\n").into_bytes();
        let planted: (PathBuf, Within, Kind, Vec<(PathBuf, Vec<u8>)>) = match self
            .rng
            .gen_range(0..6)
        {
            0 => (partition_path.0, partition_path.1, Kind::EmptyDir, vec![]),
            1 => match stream {
                Some(s) => (topic_path(s, n), Within::Stream(s), Kind::EmptyDir, vec![]),
                None => (topic_path(n, n), Within::Root, Kind::EmptyDir, vec![]),
            },
            2 => (stream_path(n), Within::Root, Kind::EmptyDir, vec![]),
            3 => {
                let (dir, within) = partition_path;
                let len = self.rng.gen_range(1..512);
                let data: Vec<u8> = (0..len).map(|_| self.rng.gen()).collect();
                let log = dir.join(cairn_engine::partition::segment::log_name(0));
                (dir, within, Kind::DataDir, vec![(log, data)])
            }
            4 => {
                let (dir, within) = match (self.rng.gen_range(0..4), topic) {
                    (1, _) | (_, None) if stream.is_some() => {
                        let s = stream.expect("some");
                        (stream_path(s), Within::Stream(s))
                    }
                    (2, Some((s, t))) => (topic_path(s, t), Within::Topic(s, t)),
                    (3, Some((s, t))) => (topic_path(s, t).join("partitions"), Within::Topic(s, t)),
                    _ => (streams_root(), Within::Root),
                };
                let beside_a_child = matches!(within, Within::Stream(_))
                    || (matches!(within, Within::Topic(..)) && !dir.ends_with("partitions"));
                if beside_a_child && self.rng.gen_bool(0.5) {
                    let stray = dir.join(format!("notes-{n}"));
                    let file = stray.join("readme");
                    (stray, within, Kind::StrayDir, vec![(file, bytes)])
                } else {
                    let file = dir.join(&note);
                    (file.clone(), within, Kind::StrayFile, vec![(file, bytes)])
                }
            }
            _ => match self.live_partition() {
                Some((dir, identity)) => {
                    let dir = match self.rng.gen_bool(0.5) {
                        true => dir,
                        false => dir.join("offsets").join("consumers"),
                    };
                    let file = dir.join(&note);
                    let within = Within::Partition(identity);
                    (file.clone(), within, Kind::StrayFile, vec![(file, bytes)])
                }
                None => (stream_path(n), Within::Root, Kind::EmptyDir, vec![]),
            },
        };
        let (path, within, kind, files) = planted;
        assert!(!self.debris.contains_key(&path), "each piece its own id");
        match kind {
            Kind::EmptyDir => self.make_dir(&path),
            Kind::DataDir | Kind::StrayFile | Kind::StrayDir => {
                for (file, bytes) in &files {
                    self.make_file(file, bytes);
                }
            }
        }
        self.event(format!(
            "fault an operator left {kind:?} {} ({within:?})",
            path.display()
        ));
        self.debris.insert(
            path,
            Debris {
                kind,
                files,
                within,
                may_be_gone: None,
                checked: false,
            },
        );
    }

    /// A partition of the model whose directory holds its own identity: (directory,
    /// identity).
    fn live_partition(&mut self) -> Option<(PathBuf, PartitionIdentity)> {
        let live: Vec<(PathBuf, PartitionIdentity)> = self
            .model
            .identities(self.cluster)
            .into_iter()
            .filter(|(k, _)| !self.removed.contains(k))
            .map(|(k, id)| (partition_dir(Path::new(NODE_ROOT), k.0, k.1, k.2), id))
            .filter(|(dir, id)| {
                cairn_engine::partition::superblock::read_identity(&self.disk, dir)
                    .is_ok_and(|found| found == Some(*id))
            })
            .collect();
        self.disk.forgive_io_time();
        (!live.is_empty()).then(|| live[self.rng.gen_range(0..live.len())].clone())
    }

    /// Makes `dir` and its parents, each name synced.
    fn make_dir(&self, dir: &Path) {
        self.disk.create_dir_all(dir).expect("mkdir");
        let mut at = Some(dir);
        while let Some(d) = at.filter(|d| d.starts_with(NODE_ROOT)) {
            self.disk.sync_dir(d).expect("sync dir");
            at = d.parent();
        }
        self.disk.forgive_io_time();
    }

    /// Writes `bytes` to a new file `path` (its directory made), durably.
    fn make_file(&self, path: &Path, bytes: &[u8]) {
        let dir = path.parent().expect("a parent");
        self.make_dir(dir);
        let file = self.disk.open(path, OpenMode::CreateNew).expect("create");
        file.write_all_at(&[std::io::IoSlice::new(bytes)], 0)
            .expect("write");
        file.sync_data().expect("sync");
        self.disk.sync_dir(dir).expect("sync dir");
        self.disk.forgive_io_time();
    }

    /// An adopted op deleted or replaced entities: debris they held may go with them.
    pub(crate) fn debris_holders_changed(&mut self, op: &AdminOp, effect: &Effect) {
        let key = super::key;
        for piece in self.debris.values_mut() {
            if piece.kind == Kind::DataDir || piece.may_be_gone.is_some() {
                continue;
            }
            let cause = match (piece.within, op) {
                (Within::Stream(s), AdminOp::DeleteStream(d)) if s == *d => "its stream deleted",
                (Within::Topic(s, _), AdminOp::DeleteStream(d)) if s == *d => "its stream deleted",
                (Within::Topic(s, t), AdminOp::DeleteTopic(ds, dt)) if (s, t) == (*ds, *dt) => {
                    "its topic deleted"
                }
                (Within::Partition(id), _) if effect.removed.contains(&id) => {
                    "its partition deleted"
                }
                (Within::Partition(id), _)
                    if effect
                        .fresh
                        .iter()
                        .any(|f| key(f) == key(&id) && f.nonce != id.nonce) =>
                {
                    "its partition purged"
                }
                _ => continue,
            };
            piece.may_be_gone = Some(format!("{cause} ({op:?})"));
        }
    }

    /// An operator removed partition `key`'s directory: debris inside it went with it.
    pub(crate) fn debris_dir_removed(&mut self, removed: PartitionKey) {
        for piece in self.debris.values_mut() {
            if let Within::Partition(id) = piece.within {
                if super::key(&id) == removed {
                    piece.may_be_gone =
                        Some("an operator removed its partition's directory".into());
                }
            }
        }
    }

    /// Whether `path` holds the piece as planted: the directory there, each file's bytes.
    fn intact(&self, path: &Path, piece: &Debris) -> bool {
        let there = self.disk.exists(path).unwrap_or(false);
        there
            && piece
                .files
                .iter()
                .all(|(file, bytes)| self.disk.contents(file).as_deref() == Some(bytes.as_slice()))
    }

    /// After a boot: every piece is there byte for byte (or went with the entity holding it)
    /// and the boot reported it.
    pub(crate) fn judge_debris(&mut self, report: &BootReport) -> Checked<()> {
        // Before any piece this boot removed is forgotten: the tree's notes are of what it
        // listed, before its redone deletions.
        self.notes_only_what_an_operator_made(report)?;
        let mut seen = false;
        let mut gone = Vec::new();
        for (path, piece) in &self.debris {
            if !self.intact(path, piece) {
                match &piece.may_be_gone {
                    Some(_) if !self.disk.exists(path).unwrap_or(true) => {
                        gone.push(path.clone());
                        continue;
                    }
                    _ => {
                        return Err(violation(
                            INV_JUSTIFIED,
                            format!(
                                "an operator's {:?} at {} is gone or changed after boot ({:?}; allowance: {:?})",
                                piece.kind,
                                path.display(),
                                piece.within,
                                piece.may_be_gone
                            ),
                        ))
                    }
                }
            }
            seen = true;
            if !reported_by_boot(report, path, piece) {
                return Err(violation(
                    INV_JUSTIFIED,
                    format!(
                        "boot kept an operator's {:?} at {} without reporting it (tree notes {:?}, kept {:?})",
                        piece.kind,
                        path.display(),
                        report.tree.notes,
                        report.tree.kept_dirs
                    ),
                ));
            }
        }
        for path in gone {
            let piece = self.debris.remove(&path).expect("judged");
            let cause = piece.may_be_gone.expect("allowed");
            self.event(format!("debris {} gone: {cause}", path.display()));
        }
        if seen {
            self.decision("OperatorDebris");
        }
        Ok(())
    }

    /// Every entry boot's tree notes as unknown is one an operator made (debris, or a
    /// directed scenario's planted copy) or lies inside one: the engine's own directories
    /// (`topics/`, `partitions/`, the entity ids) are never unknown to it.
    fn notes_only_what_an_operator_made(&self, report: &BootReport) -> Checked<()> {
        for note in &report.tree.notes {
            let Some(path) = note.strip_prefix(UNKNOWN_ENTRY).map(Path::new) else {
                continue;
            };
            let operators = self.operator_paths().any(|made| path.starts_with(made));
            if !operators {
                return Err(violation(
                    INV_JUSTIFIED,
                    format!(
                        "boot notes {} as unknown, though no operator made it",
                        path.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// After a boot that first sees a piece: `cairn check` over the disk reports every
    /// piece it has not reported yet.
    pub(crate) fn check_reports_debris(&mut self) -> Checked<()> {
        if self.debris.values().all(|p| p.checked) {
            return Ok(());
        }
        let mut out = Vec::new();
        let checked = cairn_server::check::report(&self.disk, Path::new(NODE_ROOT), &mut out);
        self.disk.forgive_io_time();
        let clean = match checked {
            Ok(clean) => clean,
            Err(e) => {
                return Err(violation(
                    INV_JUSTIFIED,
                    format!("cairn check failed after a boot that served: {e}"),
                ))
            }
        };
        let out = String::from_utf8(out).expect("the report is text");
        // A kept directory nothing accounts for is not a clean tree.
        let kept = self
            .debris
            .values()
            .any(|p| !p.checked && matches!(p.kind, Kind::EmptyDir | Kind::DataDir));
        if kept && clean {
            return Err(violation(
                INV_JUSTIFIED,
                format!("cairn check calls the tree clean though it keeps an operator's directory:\n{out}"),
            ));
        }
        for (path, piece) in self.debris.iter_mut().filter(|(_, p)| !p.checked) {
            let line = match piece.kind {
                Kind::EmptyDir | Kind::DataDir => format!("{}: KEPT (unaccounted)", path.display()),
                Kind::StrayFile | Kind::StrayDir => {
                    format!("note: {UNKNOWN_ENTRY}{}", path.display())
                }
            };
            if !out.lines().any(|l| l.trim_start().starts_with(&line)) {
                return Err(violation(
                    INV_JUSTIFIED,
                    format!(
                        "cairn check does not report an operator's {:?} at {} (no line {line:?}):\n{out}",
                        piece.kind,
                        path.display()
                    ),
                ));
            }
            piece.checked = true;
        }
        self.decision("OperatorDebrisChecked");
        Ok(())
    }
}

/// Whether the boot's report names the piece: a directory at a partition path as
/// unaccounted, an entity directory as kept, a file inside a partition as its recovery's
/// note, any other file as the tree's note.
fn reported_by_boot(report: &BootReport, path: &Path, piece: &Debris) -> bool {
    let note = format!("{UNKNOWN_ENTRY}{}", path.display());
    match (piece.kind, piece.within) {
        (Kind::EmptyDir | Kind::DataDir, _) if at_partition_path(path) => report
            .tree
            .paths
            .iter()
            .any(|p| p.dir == path && p.fate == Fate::Unaccounted),
        (Kind::EmptyDir | Kind::DataDir, _) => report.tree.kept_dirs.iter().any(|d| d == path),
        (Kind::StrayFile, Within::Partition(id)) => report.partitions.iter().any(|(key, boot)| {
            *key == super::key(&id)
                && matches!(boot, PartitionBoot::Opened(plan) if plan.notes.contains(&note))
        }),
        (Kind::StrayFile | Kind::StrayDir, _) => report.tree.notes.contains(&note),
    }
}

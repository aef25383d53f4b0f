//! A cluster member's replica rebuilt: its partition directory replaced by an empty
//! partition whose log starts at `start`, which its group refills from its peers (the group
//! set its own repair mark first, so that its start refills whatever boot finds here).
//!
//! The replacement is a removal and a creation, and a crash between would leave no
//! directory, which boot fences (`DirectoryMissing`) as damage. So the rebuild is marked
//! first, durably, beside the directory (`<partition>.rebuild`: the start, the partition's
//! nonce, then their xxh3-64), and a replica's boot finishes a rebuild cut short:
//!
//! | at a replica's boot, the mark | decision |
//! |---|---|
//! | absent | open what is there |
//! | torn (it was being written: nothing was removed yet) | remove it, open what is there |
//! | whole, of another incarnation (the partition was purged or made again since) | remove it, open what is there |
//! | whole, of this partition | rebuild again (remove what is there, create the empty partition), remove it, open |
//!
//! A mark goes with its partition's directory (`work::remove_durably`), and a mark left
//! alone (its directory gone) is removed with its topic's (`work::remove_deleted_tree`).

use crate::config::{PartitionSettings, TopicConfig};
use crate::env::{Disk, Env, OpenMode};
use crate::partition::{Partition, PartitionError, PartitionHooks, PartitionIdentity, Result};
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_64;

/// The mark's bytes: the start (u64 LE), the nonce (u64 LE), then the xxh3-64 of those
/// 16 bytes (u64 LE).
const MARK_LEN: usize = 24;
/// The suffix of a mark's file name.
const MARK_SUFFIX: &str = ".rebuild";

/// Where partition directory `dir`'s rebuild mark lives: beside it, in its parent.
pub(crate) fn mark_path(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(MARK_SUFFIX);
    dir.with_file_name(name)
}

/// Where a mark is written before it is renamed into place (a mark is never rewritten
/// where it lies: a crash inside the rewrite would tear a mark whose rebuild had begun).
fn staged_path(dir: &Path) -> PathBuf {
    let mut name = mark_path(dir).into_os_string();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Whether `name` (an entry of a topic's `partitions/`) is a rebuild mark's, or one's
/// being written.
pub(crate) fn is_mark(name: &str) -> bool {
    let name = name.strip_suffix(".tmp").unwrap_or(name);
    name.strip_suffix(MARK_SUFFIX)
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

/// Removes partition directory `dir`'s mark and a mark being written, if there are any;
/// whether there were (the caller syncs the parent).
pub(crate) fn remove_marks(disk: &dyn Disk, dir: &Path) -> io::Result<bool> {
    let mut removed = false;
    for path in [staged_path(dir), mark_path(dir)] {
        if disk.exists(&path)? {
            disk.remove_file(&path)?;
            removed = true;
        }
    }
    Ok(removed)
}

fn encode(start: u64, nonce: u64) -> [u8; MARK_LEN] {
    let mut bytes = [0u8; MARK_LEN];
    bytes[..8].copy_from_slice(&start.to_le_bytes());
    bytes[8..16].copy_from_slice(&nonce.to_le_bytes());
    let sum = xxh3_64(&bytes[..16]);
    bytes[16..].copy_from_slice(&sum.to_le_bytes());
    bytes
}

/// The (start, nonce) a whole mark holds; `None` for a torn one.
fn decode(bytes: &[u8]) -> Option<(u64, u64)> {
    let bytes: &[u8; MARK_LEN] = bytes.try_into().ok()?;
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    (word(16) == xxh3_64(&bytes[..16])).then(|| (word(0), word(8)))
}

fn io_error<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PartitionError + 'a {
    move |source| PartitionError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn parent(dir: &Path) -> &Path {
    dir.parent().expect("a partition directory has a parent")
}

/// Writes the mark (staged, synced, renamed into place, its directory synced).
fn set_mark(disk: &dyn Disk, dir: &Path, (start, nonce): (u64, u64)) -> Result<()> {
    let (staged, path) = (staged_path(dir), mark_path(dir));
    if disk.exists(&staged).map_err(io_error("stat", &staged))? {
        disk.remove_file(&staged)
            .map_err(io_error("remove a staged rebuild mark", &staged))?;
    }
    let file = disk
        .open(&staged, OpenMode::CreateNew)
        .map_err(io_error("create the rebuild mark", &staged))?;
    file.write_all_at(&[IoSlice::new(&encode(start, nonce))], 0)
        .map_err(io_error("write the rebuild mark", &staged))?;
    file.sync_data().map_err(io_error("sync_data", &staged))?;
    disk.rename(&staged, &path)
        .map_err(io_error("rename the rebuild mark into place", &path))?;
    disk.sync_dir(parent(dir))
        .map_err(io_error("sync_dir", parent(dir)))
}

fn clear_mark(disk: &dyn Disk, dir: &Path) -> Result<()> {
    remove_marks(disk, dir).map_err(io_error("remove the rebuild mark", dir))?;
    disk.sync_dir(parent(dir))
        .map_err(io_error("sync_dir", parent(dir)))
}

/// What partition `identity` is rebuilt with: its place, its topic's config, and the
/// settings and hooks it opens with.
pub(crate) struct Rebuilt<'a> {
    pub env: &'a Env,
    pub dir: &'a Path,
    pub identity: PartitionIdentity,
    pub config: TopicConfig,
    pub settings: PartitionSettings,
    pub hooks: PartitionHooks,
}

impl Rebuilt<'_> {
    /// Replaces the partition directory with an empty partition starting at `start`,
    /// marked first (the module's table); the new partition, open.
    pub(crate) fn replace(&self, start: u64) -> Result<Partition> {
        assert!(
            self.settings.replica,
            "only a cluster member's replica is rebuilt"
        );
        let disk = self.env.disk.as_ref();
        set_mark(disk, self.dir, (start, self.identity.nonce))?;
        let partition = self.remove_and_create(start)?;
        clear_mark(disk, self.dir)?;
        Ok(partition)
    }

    /// Removes the directory (its mark stays) and creates the empty partition.
    fn remove_and_create(&self, start: u64) -> Result<Partition> {
        let disk = self.env.disk.as_ref();
        let removing = io_error("remove a replica to rebuild it", self.dir);
        if disk.exists(self.dir).map_err(io_error("stat", self.dir))? {
            let removed = disk.remove_dir_all(self.dir);
            removed
                .and_then(|()| disk.sync_dir(parent(self.dir)))
                .map_err(removing)?;
        }
        let place = (self.env, self.dir, self.identity);
        Partition::create_at(place, self.config, (self.settings, self.hooks), start)
    }

    /// At a replica's boot, finishes a rebuild a crash cut short (the module's table);
    /// whether there was one.
    pub(crate) fn finish_cut_short(&self) -> Result<bool> {
        let disk = self.env.disk.as_ref();
        let found = pending(disk, self.dir, self.identity.nonce);
        let found = found.map_err(io_error("read the rebuild mark", self.dir))?;
        match found {
            // (A mark being written when a crash struck, nothing removed yet, is left for
            // the next mark or the directory's removal: boot pays one stat per partition.)
            None => return Ok(false),
            Some(Pending::Redo { start }) => {
                tracing::warn!(dir = %self.dir.display(), start,
                    "a replica's rebuild was cut short: rebuilding it again, for its group to refill");
                drop(self.remove_and_create(start)?);
            }
            Some(other) => {
                tracing::info!(dir = %self.dir.display(), mark = ?other,
                    "a rebuild mark that names nothing to redo: removed, the partition stays as found");
            }
        }
        clear_mark(disk, self.dir)?;
        Ok(true)
    }
}

/// What a rebuild mark beside a partition's directory asks of boot (the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// Rebuild the partition again: empty, its log starting at `start`.
    Redo { start: u64 },
    /// A mark of another incarnation (nonce `nonce`): removed.
    Stale { nonce: u64 },
    /// A torn mark (nothing was removed yet): removed.
    Torn,
}

/// The rebuild mark beside partition directory `dir`, whose partition is incarnation
/// `nonce`, if there is one (`cairn check` prints it too).
pub fn pending(disk: &dyn Disk, dir: &Path, nonce: u64) -> io::Result<Option<Pending>> {
    let path = mark_path(dir);
    if !disk.exists(&path)? {
        return Ok(None);
    }
    let file = disk.open(&path, OpenMode::Read)?;
    let len = file.len()?;
    let mut bytes = vec![0u8; (len as usize).min(MARK_LEN + 1)];
    // Until the end of the file: a read may answer a prefix (a real file's cached part).
    let mut read = 0;
    while read < bytes.len() {
        match file.read_at(&mut bytes[read..], read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(read);
    Ok(Some(match decode(&bytes) {
        Some((start, found)) if found == nonce => Pending::Redo { start },
        Some((_, found)) => Pending::Stale { nonce: found },
        None => Pending::Torn,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_only_whole() {
        for (start, nonce) in [(0, 1), (1, 0), (4096, 0xdead_beef), (u64::MAX, u64::MAX)] {
            let bytes = encode(start, nonce);
            assert_eq!(decode(&bytes), Some((start, nonce)));
            for cut in 0..MARK_LEN {
                assert_eq!(decode(&bytes[..cut]), None, "torn at {cut}");
            }
            for flipped in 0..MARK_LEN {
                let mut bad = bytes;
                bad[flipped] ^= 1;
                assert_eq!(decode(&bad), None, "byte {flipped} flipped");
            }
        }
    }

    #[test]
    fn the_mark_lives_beside_the_directory() {
        let dir = Path::new("/data/streams/1/topics/2/partitions/3");
        let mark = mark_path(dir);
        assert_eq!(
            mark,
            Path::new("/data/streams/1/topics/2/partitions/3.rebuild")
        );
        assert!(is_mark("3.rebuild") && is_mark("17.rebuild") && is_mark("3.rebuild.tmp"));
        for other in [
            "3",
            ".rebuild",
            "a.rebuild",
            "3.rebuild.old",
            "3.rebuilt",
            "3.tmp",
        ] {
            assert!(!is_mark(other), "{other}");
        }
    }
}

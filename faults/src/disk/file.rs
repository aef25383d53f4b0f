//! The engine's `Disk` and `DiskFile` on the simulated disk: every call takes its virtual
//! time, counts toward an armed crash, and meets the faults its kind can fire.

use super::dirs::{DirOp, Node};
use super::pages::{copy_page, pages_of, FileState};
use super::{
    crashed_error, invalid, no_space, not_found, parent_of, Call, FaultKind, Scripted, SimDisk,
    State, PAGE, SECTOR,
};
use cairn_engine::env::{DirEntry, Disk, DiskFile, OpenMode};
use std::io;
use std::io::IoSlice;
use std::path::{Path, PathBuf};

struct SimFile {
    disk: SimDisk,
    inode: u64,
}

impl SimFile {
    fn path(&self, s: &State) -> Option<PathBuf> {
        s.path_of(self.inode)
    }
}

impl DiskFile for SimFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let mut s = self.disk.lock();
        if s.crashed {
            return Err(crashed_error());
        }
        s.take_time();
        let file = s.file(self.inode)?;
        if pos >= file.data.len() as u64 {
            return Ok(0);
        }
        let n = buf.len().min(file.data.len() - pos as usize);
        if n > 0 {
            let first = pos / SECTOR;
            let last = (pos + n as u64 - 1) / SECTOR;
            if s.bad_sectors
                .range((self.inode, first)..=(self.inode, last))
                .next()
                .is_some()
            {
                return Err(io::Error::other("EIO: latent sector error"));
            }
        }
        buf[..n].copy_from_slice(&file.data[pos as usize..pos as usize + n]);
        Ok(n)
    }

    fn write_all_at(&self, bufs: &[IoSlice<'_>], pos: u64) -> io::Result<()> {
        let mut s = self.disk.lock();
        let path = self.path(&s);
        let crash_now = s.mutate(path.as_deref(), Call::Write)?;
        let bytes: std::borrow::Cow<'_, [u8]> = match bufs {
            [one] => std::borrow::Cow::Borrowed(&**one),
            _ => {
                let mut joined = Vec::with_capacity(bufs.iter().map(|b| b.len()).sum());
                bufs.iter().for_each(|b| joined.extend_from_slice(b));
                std::borrow::Cow::Owned(joined)
            }
        };
        s.file(self.inode)?;
        if crash_now {
            s.torn_write(self.inode, pos, &bytes);
            return Err(crashed_error());
        }
        let name = path
            .as_deref()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let crash_after = s
            .take_scripted(
                |f| matches!(f, Scripted::CrashAfterWrite(part) if name.contains(part.as_str())),
            )
            .is_some();
        if crash_after {
            s.files
                .get_mut(&self.inode)
                .expect("file")
                .write(pos, &bytes);
            s.crashed = true;
            s.crash_in = None;
            s.record(
                FaultKind::TornWrite,
                path.as_deref(),
                Some(pos..pos + bytes.len() as u64),
                "landed whole, then the node crashed".into(),
            );
            return Err(crashed_error());
        }
        let faults = s.faults;
        if s.roll(faults.write_error) {
            s.record(
                FaultKind::WriteError,
                path.as_deref(),
                Some(pos..pos + bytes.len() as u64),
                String::new(),
            );
            return Err(io::Error::other("EIO on write"));
        }
        let file = &s.files[&self.inode];
        let growth = (pos + bytes.len() as u64).saturating_sub(file.used());
        if let Some(path) = &path {
            s.check_space(growth, path)?;
        }
        let (target, at) = s.misdirect(self.inode, pos).unwrap_or((self.inode, pos));
        let end = pos + bytes.len() as u64;
        let target_len = s.files[&target].data.len() as u64;
        s.files
            .get_mut(&target)
            .expect("target file")
            .write(at, &bytes);
        let covered: Vec<(u64, u64)> = s
            .bad_sectors
            .keys()
            .filter(|(i, sector)| {
                *i == target
                    && sector * SECTOR >= at
                    && (sector + 1) * SECTOR <= at + bytes.len() as u64
            })
            .copied()
            .collect();
        for key in covered {
            s.bad_sectors.remove(&key);
        }
        if (target, at) != (self.inode, pos) && !bytes.is_empty() {
            let meant = format!(
                "meant for {}@{pos}",
                path.as_deref().unwrap_or(Path::new("?")).display()
            );
            // Landing past the target's end, it also made the zeros between: wrong bytes
            // too, which a sync then promises as the file's.
            s.damage(
                target,
                FaultKind::MisdirectedWrite,
                at.min(target_len)..at + bytes.len() as u64,
                meant.clone(),
                (true, false, false),
            );
            s.damage(
                self.inode,
                FaultKind::MisdirectedWrite,
                pos..end,
                format!("{meant}: never landed"),
                (true, true, true),
            );
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut s = self.disk.lock();
        let path = self.path(&s);
        if s.mutate(path.as_deref(), Call::Sync)? {
            return Err(crashed_error());
        }
        sync_file(&mut s, self.inode, path.as_deref())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.disk.lock();
        let path = self.path(&s);
        if s.mutate(path.as_deref(), Call::SetLen)? {
            return Err(crashed_error());
        }
        let old = s.file(self.inode)?.data.len() as u64;
        if len > old {
            if let Some(path) = &path {
                let growth = len.saturating_sub(s.files[&self.inode].used());
                s.check_space(growth, path)?;
            }
        }
        let inode = self.inode;
        s.bad_sectors
            .retain(|(i, sector), _| *i != inode || sector * SECTOR < len);
        let file = s.files.get_mut(&self.inode).expect("file");
        if len != old {
            file.data.resize(len as usize, 0);
            file.len_dirty = true;
            file.promised_len = file.promised_len.min(len);
            for page in pages_of(&(old.min(len)..old.max(len))) {
                if page * PAGE < len {
                    file.dirty.insert(page);
                }
            }
            for damage in &mut file.damage {
                if damage.range.start >= len && !damage.missing {
                    damage.in_cache = false;
                }
            }
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let s = self.disk.lock();
        if s.crashed {
            return Err(crashed_error());
        }
        s.file(self.inode).map(|f| f.data.len() as u64)
    }

    fn preallocate(&self, len: u64) -> io::Result<bool> {
        let mut s = self.disk.lock();
        let path = self.path(&s);
        if s.mutate(path.as_deref(), Call::Other)? {
            return Err(crashed_error());
        }
        let used = s.file(self.inode)?.used();
        if let Some(path) = &path {
            s.check_space(len.saturating_sub(used), path)?;
        }
        let file = s.files.get_mut(&self.inode).expect("file");
        file.allocated = file.allocated.max(len);
        Ok(true)
    }

    fn evict_cache(&self) -> io::Result<()> {
        let mut s = self.disk.lock();
        if s.crashed {
            return Err(crashed_error());
        }
        s.take_time();
        let file = s.file_mut(self.inode)?;
        let pages = (file.data.len() as u64).div_ceil(PAGE);
        let is_clean = |p: u64| p < pages && !file.dirty.contains(&p);
        for page in (0..pages).filter(|&p| is_clean(p)) {
            copy_page(&mut file.data, &file.device, page);
        }
        for damage in &mut file.damage {
            if pages_of(&damage.range).all(is_clean) {
                damage.in_cache = damage.on_device;
            }
        }
        Ok(())
    }
}

impl Disk for SimDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        let mut s = self.lock();
        if s.crashed {
            return Err(crashed_error());
        }
        if path.as_os_str().is_empty() {
            return Err(invalid("empty path"));
        }
        let existing = s.names.get(path).copied();
        let inode = match (existing, mode) {
            (Some(Node::Dir(_)), _) => return Err(io::Error::other("is a directory")),
            (Some(Node::File(_)), OpenMode::CreateNew) => {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists"))
            }
            (Some(Node::File(inode)), _) => inode,
            (None, OpenMode::Read | OpenMode::ReadWrite) => return Err(not_found("file", path)),
            (None, OpenMode::CreateNew | OpenMode::CreateOrOpen) => {
                let dir = parent_of(path);
                if !s.is_dir(&dir) {
                    return Err(not_found("parent directory of", path));
                }
                if s.mutate(Some(path), Call::Other)? {
                    return Err(crashed_error());
                }
                s.check_space(PAGE, path)?;
                let inode = s.next_inode;
                s.next_inode += 1;
                s.files.insert(inode, FileState::default());
                s.names.insert(path.to_path_buf(), Node::File(inode));
                s.log_dir_op(&dir, DirOp::Link(path.to_path_buf(), Node::File(inode)));
                inode
            }
        };
        Ok(Box::new(SimFile {
            disk: self.clone(),
            inode,
        }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        if path.as_os_str().is_empty() {
            return Err(invalid("empty path"));
        }
        if s.mutate(Some(path), Call::Other)? {
            return Err(crashed_error());
        }
        let mut missing = Vec::new();
        for p in path.ancestors() {
            if p.as_os_str().is_empty() {
                break;
            }
            match s.names.get(p) {
                Some(Node::Dir(_)) => break,
                Some(Node::File(_)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{} is a file", p.display()),
                    ))
                }
                None => missing.push(p.to_path_buf()),
            }
        }
        if !missing.is_empty() {
            s.check_space(PAGE, path)?;
        }
        for p in missing.into_iter().rev() {
            let id = s.next_inode;
            s.next_inode += 1;
            s.names.insert(p.clone(), Node::Dir(id));
            let dir = parent_of(&p);
            s.log_dir_op(&dir, DirOp::Link(p, Node::Dir(id)));
        }
        Ok(())
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let s = self.lock();
        if s.crashed {
            return Err(crashed_error());
        }
        match s.names.get(path) {
            Some(Node::Dir(_)) => {}
            Some(Node::File(_)) => return Err(io::Error::other("not a directory")),
            None => return Err(not_found("directory", path)),
        }
        Ok(s.names
            .under(path)
            .filter(|(p, _)| p.parent() == Some(path))
            .map(|(p, n)| DirEntry {
                name: p.file_name().expect("name").to_string_lossy().into_owned(),
                is_dir: matches!(n, Node::Dir(_)),
            })
            .collect())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.lock();
        if from.as_os_str().is_empty() || to.as_os_str().is_empty() {
            return Err(invalid("empty path"));
        }
        if s.mutate(Some(to), Call::Rename)? {
            return Err(crashed_error());
        }
        let node = *s
            .names
            .get(from)
            .ok_or_else(|| not_found("rename source", from))?;
        let (from_dir, to_dir) = (parent_of(from), parent_of(to));
        if !s.is_dir(&to_dir) {
            return Err(not_found("rename target directory of", to));
        }
        match (node, s.names.get(to)) {
            (Node::File(_), Some(Node::Dir(_))) => {
                return Err(io::Error::other("target is a directory"))
            }
            (Node::Dir(_), Some(Node::File(_))) => {
                return Err(io::Error::other("target is not a directory"))
            }
            (Node::Dir(_), _) if to.starts_with(from) => return Err(invalid("rename into itself")),
            _ => {}
        }
        if matches!(node, Node::Dir(_)) {
            return Err(io::Error::other("renaming directories is not simulated"));
        }
        if s.faults.capacity.is_some_and(|c| s.used_bytes() >= c) {
            s.record(
                FaultKind::NoSpace,
                Some(to),
                None,
                "rename: no room for the entry".into(),
            );
            return Err(no_space());
        }
        s.names.remove(from);
        s.names.insert(to.to_path_buf(), node);
        if from_dir == to_dir {
            s.log_dir_op(
                &from_dir,
                DirOp::Rename(from.to_path_buf(), to.to_path_buf(), node),
            );
        } else {
            s.log_dir_op(&from_dir, DirOp::Unlink(from.to_path_buf()));
            s.log_dir_op(&to_dir, DirOp::Link(to.to_path_buf(), node));
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        if path.as_os_str().is_empty() {
            return Err(invalid("empty path"));
        }
        if s.mutate(Some(path), Call::Remove)? {
            return Err(crashed_error());
        }
        match s.names.get(path) {
            Some(Node::File(_)) => {
                s.names.remove(path);
                let dir = parent_of(path);
                s.log_dir_op(&dir, DirOp::Unlink(path.to_path_buf()));
                Ok(())
            }
            Some(Node::Dir(_)) => Err(io::Error::other("is a directory")),
            None => Err(not_found("file", path)),
        }
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        if path.as_os_str().is_empty() || path == Path::new("/") {
            return Err(invalid("refusing to remove the root"));
        }
        if s.mutate(Some(path), Call::Remove)? {
            s.unlink_some_under(path);
            return Err(crashed_error());
        }
        let node = match s.names.get(path) {
            Some(node @ Node::Dir(_)) => *node,
            Some(Node::File(_)) => return Err(io::Error::other("not a directory")),
            None => return Err(not_found("directory", path)),
        };
        let doomed: Vec<PathBuf> = s
            .names
            .keys()
            .filter(|p| p.starts_with(path))
            .cloned()
            .collect();
        for p in doomed {
            s.names.remove(&p);
        }
        // The removed directories' own unsynced changes go with them: a directory created
        // later at the same path is another directory.
        s.pending.retain(|dir, _| !dir.starts_with(path));
        let mut durable: Vec<(PathBuf, Node)> = s
            .durable_names
            .iter()
            .filter(|(p, _)| p.starts_with(path))
            .map(|(p, n)| (p.clone(), *n))
            .collect();
        // The directory itself goes too, durable yet or not: its name may be waiting in the
        // parent's log ahead of this removal (created and removed before any parent sync),
        // and the sync that applies both must leave no name behind.
        if !durable.iter().any(|(p, _)| p == path) {
            durable.push((path.to_path_buf(), node));
        }
        let dir = parent_of(path);
        s.log_dir_op(&dir, DirOp::UnlinkDir(path.to_path_buf(), durable));
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        if s.mutate(Some(path), Call::Sync)? {
            return Err(crashed_error());
        }
        sync_directory(&mut s, path)
    }

    /// `syncfs`, one call (a crash strikes before it or after it): every file under `root`
    /// with something unsynced (pages or its length), then every directory with unsynced
    /// entries (deepest first), each meeting the faults its own sync would (a failure, a
    /// lie). A failed file is still reported to its own next sync (`unreported_error`, as
    /// Linux keeps an error per file besides the file system's); the call writes everything
    /// back and reports the first failure at its end.
    fn sync_all(&self, root: &Path) -> io::Result<()> {
        let mut s = self.lock();
        if s.mutate(Some(root), Call::Sync)? {
            return Err(crashed_error());
        }
        let (files, dirs) = unsynced_under(&s, root);
        let mut first_error = None;
        for (path, inode) in files {
            // An error the file's own sync has yet to report stays its own: syncfs writes
            // the file back all the same.
            let unreported = std::mem::take(&mut s.file_mut(inode)?.unreported_error);
            if let Err(e) = sync_file(&mut s, inode, Some(&path)) {
                first_error.get_or_insert(e);
                s.file_mut(inode)?.unreported_error = true;
            } else if unreported {
                s.file_mut(inode)?.unreported_error = true;
            }
        }
        for dir in dirs.iter().rev() {
            if let Err(e) = sync_directory(&mut s, dir) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let s = self.lock();
        if s.crashed {
            return Err(crashed_error());
        }
        Ok(s.names.contains_key(path))
    }

    fn boot_id(&self) -> io::Result<u128> {
        if self.lock().crashed {
            return Err(crashed_error());
        }
        Ok(SimDisk::boot_id(self))
    }

    fn take_io_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(std::mem::take(&mut self.lock().debt_nanos))
    }
}

/// A directory's sync once its call was let through (`mutate`).
fn sync_directory(s: &mut State, path: &Path) -> io::Result<()> {
    if !s.names.contains_key(path) {
        return Err(not_found("directory", path));
    }
    let faults = s.faults;
    if s.roll(faults.dir_sync_error) {
        s.record(FaultKind::DirSyncError, Some(path), None, String::new());
        return Err(io::Error::other("EIO on directory fsync"));
    }
    let scripted_lie = s
        .take_scripted(|f| matches!(f, Scripted::LieOnDirSync(dir) if dir == path))
        .is_some();
    if scripted_lie || s.roll(faults.lying_dir_sync) {
        let mut any = false;
        if let Some(ops) = s.pending.get_mut(path) {
            for op in ops.iter_mut() {
                op.promised = true;
                any = true;
            }
        }
        if any {
            s.record(FaultKind::LyingDirSync, Some(path), None, String::new());
        }
        return Ok(());
    }
    let ops = s.pending.remove(path).unwrap_or_default();
    for op in &ops {
        s.apply_durably(&op.op);
    }
    Ok(())
}

/// The files under `root` (by path and inode) with unsynced pages or length, and the
/// directories (`root` first, parents before children) with unsynced entries.
fn unsynced_under(s: &State, root: &Path) -> (Vec<(PathBuf, u64)>, Vec<PathBuf>) {
    let unsynced = |inode: u64| {
        s.files
            .get(&inode)
            .is_some_and(|f| !f.dirty.is_empty() || f.len_dirty)
    };
    let pending = |dir: &Path| s.pending.get(dir).is_some_and(|ops| !ops.is_empty());
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = pending(root)
        .then(|| root.to_path_buf())
        .into_iter()
        .collect();
    for (path, node) in s.names.under(root) {
        match *node {
            Node::File(inode) if unsynced(inode) => files.push((path.clone(), inode)),
            Node::Dir(_) if pending(path) => dirs.push(path.clone()),
            _ => {}
        }
    }
    (files, dirs)
}

/// A file's sync once its call was let through (`mutate`): what `sync_data` does, and
/// `sync_all` for each file it writes back.
fn sync_file(s: &mut State, inode: u64, path: Option<&Path>) -> io::Result<()> {
    let file = s.file_mut(inode)?;
    if std::mem::take(&mut file.unreported_error) {
        s.record(FaultKind::SyncError, path, None, "reported again".into());
        return Err(io::Error::other(
            "EIO on fsync (a writeback failed earlier)",
        ));
    }
    let file = s.file_mut(inode)?;
    // Written back or failed, no page is dirty after this call.
    let pages = std::mem::take(&mut file.dirty);
    let len = file.data.len() as u64;
    let range = match (pages.first(), pages.last()) {
        (Some(first), Some(last)) => Some(first * PAGE..((last + 1) * PAGE).min(len)),
        _ => None,
    };
    let name = path
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let faults = s.faults;
    let scripted_fail = s
        .take_scripted(|f| matches!(f, Scripted::FailSync(end) if name.contains(end.as_str())))
        .is_some();
    if scripted_fail || s.roll(faults.sync_error) {
        // Linux: the failed pages keep their new bytes, marked clean; the device keeps
        // the old ones; the error is reported once.
        if let Some(range) = range {
            s.damage(
                inode,
                FaultKind::SyncError,
                range,
                "writeback failed: the cache holds bytes the device does not".into(),
                (false, true, true),
            );
        } else {
            s.record(FaultKind::SyncError, path, None, String::new());
        }
        return Err(io::Error::other("EIO on fsync"));
    }
    let scripted_lie = s
        .take_scripted(|f| matches!(f, Scripted::LieOnSync(end) if name.contains(end.as_str())))
        .is_some();
    let lie = scripted_lie || s.roll(faults.lying_sync);
    let file = s.files.get_mut(&inode).expect("file");
    file.write_back(&pages, lie);
    if lie {
        s.record(FaultKind::LyingSync, path, range, String::new());
    }
    Ok(())
}

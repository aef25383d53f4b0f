//! A simulated disk: files in memory behind a page-cache model, with fault injection.
//!
//! Every file holds what reads see (`data`, the page cache) and what survives a power loss
//! (`durable`), plus the set of dirty 4 KiB pages written since the last honest sync.
//! Directory entries are durable only after `sync_dir` of their directory. Faults:
//!
//! - process crash: nothing on disk changes (the page cache survives);
//! - power loss: each dirty page independently kept, dropped or torn at 512-byte sectors
//!   with a garbage sector at the edge; file lengths may revert; each directory's unsynced
//!   changes are kept or reverted as a whole;
//! - a crash armed at the n-th mutating call: that call lands partially (a write as a
//!   sector-aligned prefix plus one garbage sector) and every later call fails;
//! - lying `sync_data` (returns Ok, persists nothing), `EIO` on write and on sync (the sync
//!   loses the file's dirty pages), `ENOSPC` past a capacity, misdirected writes, bit flips
//!   in durable bytes, read errors on chosen sectors.
//!
//! Every fault that fires is recorded in [`FaultRecord`]s, so checkers can tell a justified
//! refusal from a bug.

use crate::clock::SimClock;
use cairn_engine::env::{DirEntry, Disk, DiskFile, OpenMode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

pub const PAGE: u64 = 4096;
pub const SECTOR: u64 = 512;

/// The kinds of injected faults (and their visible effects).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    ProcessCrash,
    PowerLoss,
    /// A write in flight at a crash landed as a prefix with a garbage sector.
    TornWrite,
    /// At a power loss, an unsynced page was dropped or torn.
    LostPage,
    /// At a power loss, a directory's unsynced changes were reverted.
    LostDirEntry,
    LyingSync,
    WriteError,
    SyncError,
    NoSpace,
    BitFlip,
    ReadError,
    MisdirectedWrite,
    ClockJump,
}

impl FaultKind {
    pub const ALL: [FaultKind; 13] = [
        FaultKind::ProcessCrash,
        FaultKind::PowerLoss,
        FaultKind::TornWrite,
        FaultKind::LostPage,
        FaultKind::LostDirEntry,
        FaultKind::LyingSync,
        FaultKind::WriteError,
        FaultKind::SyncError,
        FaultKind::NoSpace,
        FaultKind::BitFlip,
        FaultKind::ReadError,
        FaultKind::MisdirectedWrite,
        FaultKind::ClockJump,
    ];

    /// Faults that damage bytes the disk promised durable (or lie about it): the only
    /// faults that can justify a refusal.
    pub fn damages_durable_data(self) -> bool {
        matches!(
            self,
            FaultKind::LyingSync
                | FaultKind::SyncError
                | FaultKind::BitFlip
                | FaultKind::ReadError
                | FaultKind::MisdirectedWrite
        )
    }
}

/// One fault that fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRecord {
    pub kind: FaultKind,
    pub path: Option<PathBuf>,
    pub position: Option<u64>,
    pub detail: String,
}

/// Fault intensities of the disk (probabilities per call; `None` = off).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DiskFaults {
    pub lying_sync: Option<f64>,
    pub write_error: Option<f64>,
    pub sync_error: Option<f64>,
    pub misdirected_write: Option<f64>,
    /// Bytes of file data the device holds; writes past it fail with ENOSPC.
    pub capacity: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    File(u64),
    Dir,
}

#[derive(Default, Clone)]
struct FileState {
    data: Vec<u8>,
    durable: Vec<u8>,
    dirty: BTreeSet<u64>,
    /// Length that a sync promised durable (for truncation justification).
    promised_len: u64,
    /// Whether the length changed since the last honest sync.
    len_dirty: bool,
}

struct State {
    rng: ChaCha8Rng,
    faults: DiskFaults,
    files: BTreeMap<u64, FileState>,
    names: BTreeMap<PathBuf, Node>,
    durable_names: BTreeMap<PathBuf, Node>,
    next_inode: u64,
    records: Vec<FaultRecord>,
    /// Mutating calls left before the armed crash.
    crash_in: Option<u64>,
    crashed: bool,
    bad_sectors: BTreeSet<(u64, u64)>,
    /// Virtual time each call takes: a seeded latency in `latency` nanoseconds.
    clock: Option<SimClock>,
    latency: (u64, u64),
}

/// The simulated disk. Cheap to clone; clones share the disk.
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

fn crashed_error() -> io::Error {
    io::Error::other("simulated node is down")
}

impl State {
    fn record(
        &mut self,
        kind: FaultKind,
        path: Option<&Path>,
        position: Option<u64>,
        detail: String,
    ) {
        self.records.push(FaultRecord {
            kind,
            path: path.map(Path::to_path_buf),
            position,
            detail,
        });
    }

    fn roll(&mut self, p: Option<f64>) -> bool {
        match p {
            Some(p) if p > 0.0 => self.rng.gen_bool(p.min(1.0)),
            _ => false,
        }
    }

    /// Lets the call's latency pass in virtual time.
    fn take_time(&mut self) {
        if let Some(clock) = &self.clock {
            let (lo, hi) = self.latency;
            let nanos = if hi > lo {
                self.rng.gen_range(lo..=hi)
            } else {
                lo
            };
            clock.advance(nanos);
        }
    }

    /// Counts a mutating call; returns true when it is the armed crash point.
    fn mutate(&mut self) -> io::Result<bool> {
        if self.crashed {
            return Err(crashed_error());
        }
        self.take_time();
        if let Some(left) = self.crash_in.as_mut() {
            if *left == 0 {
                self.crash_in = None;
                self.crashed = true;
                return Ok(true);
            }
            *left -= 1;
        }
        Ok(false)
    }

    fn used_bytes(&self) -> u64 {
        self.files.values().map(|f| f.data.len() as u64).sum()
    }

    fn path_of(&self, inode: u64) -> Option<PathBuf> {
        self.names
            .iter()
            .find(|(_, n)| **n == Node::File(inode))
            .map(|(p, _)| p.clone())
    }

    /// A random file under `under` whose state satisfies `wanted`.
    fn pick_file(
        &mut self,
        under: &Path,
        wanted: impl Fn(&FileState) -> bool,
    ) -> Option<(PathBuf, u64)> {
        let candidates: Vec<(PathBuf, u64)> = self
            .names
            .iter()
            .filter(|(p, _)| p.starts_with(under))
            .filter_map(|(p, n)| match n {
                Node::File(i) if wanted(&self.files[i]) => Some((p.clone(), *i)),
                _ => None,
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some(candidates[self.rng.gen_range(0..candidates.len())].clone())
    }

    fn parent_exists(&self, path: &Path) -> bool {
        match path.parent() {
            None => true,
            Some(p) if p.as_os_str().is_empty() => true,
            Some(p) => self.names.get(p) == Some(&Node::Dir),
        }
    }

    fn write_bytes(file: &mut FileState, pos: u64, bytes: &[u8]) {
        let end = pos as usize + bytes.len();
        if file.data.len() < end {
            file.data.resize(end, 0);
            file.len_dirty = true;
        }
        file.data[pos as usize..end].copy_from_slice(bytes);
        if !bytes.is_empty() {
            for page in pos / PAGE..=(end as u64 - 1) / PAGE {
                file.dirty.insert(page);
            }
        }
    }
}

impl SimDisk {
    pub fn new(seed: u64, faults: DiskFaults) -> Self {
        let mut names = BTreeMap::new();
        names.insert(PathBuf::from("/"), Node::Dir);
        SimDisk {
            state: Arc::new(Mutex::new(State {
                rng: ChaCha8Rng::seed_from_u64(seed),
                faults,
                files: BTreeMap::new(),
                durable_names: names.clone(),
                names,
                next_inode: 1,
                records: Vec::new(),
                crash_in: None,
                crashed: false,
                bad_sectors: BTreeSet::new(),
                clock: None,
                latency: (0, 0),
            })),
        }
    }

    /// Makes every call take a seeded latency in `[min, max]` nanoseconds of `clock`'s time.
    pub fn set_latency(&self, clock: SimClock, min_nanos: u64, max_nanos: u64) {
        let mut s = self.lock();
        s.clock = Some(clock);
        s.latency = (min_nanos, max_nanos.max(min_nanos));
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("sim disk lock")
    }

    /// Every fault fired so far.
    pub fn records(&self) -> Vec<FaultRecord> {
        self.lock().records.clone()
    }

    /// How many faults fired so far.
    pub fn record_count(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether any fault fired so far satisfies `pred` (without copying the record).
    pub fn any_record(&self, pred: impl Fn(&FaultRecord) -> bool) -> bool {
        self.lock().records.iter().any(pred)
    }

    pub fn record(&self, kind: FaultKind, path: Option<&Path>, detail: String) {
        self.lock().record(kind, path, None, detail);
    }

    pub fn set_faults(&self, faults: DiskFaults) {
        self.lock().faults = faults;
    }

    /// The `n`-th mutating call from now crashes the node (it lands partially).
    pub fn arm_crash(&self, n: u64) {
        self.lock().crash_in = Some(n);
    }

    /// Cancels an armed crash that has not struck yet.
    pub fn disarm_crash(&self) {
        self.lock().crash_in = None;
    }

    pub fn is_crashed(&self) -> bool {
        self.lock().crashed
    }

    /// A process crash: the page cache survives; calls work again for the next process.
    pub fn process_crash(&self) {
        let mut s = self.lock();
        s.crash_in = None;
        s.crashed = false;
        s.record(FaultKind::ProcessCrash, None, None, String::new());
    }

    /// A power loss: only durable state survives, with unsynced pages kept, dropped or torn.
    pub fn power_loss(&self) {
        let mut s = self.lock();
        s.crash_in = None;
        s.crashed = false;
        s.record(FaultKind::PowerLoss, None, None, String::new());
        // Directories: each one keeps or reverts its unsynced changes as a whole.
        let dirs: BTreeSet<PathBuf> = s
            .names
            .keys()
            .chain(s.durable_names.keys())
            .filter_map(|p| p.parent().map(Path::to_path_buf))
            .collect();
        let mut names = s.names.clone();
        for dir in dirs {
            let current: Vec<(PathBuf, Node)> = s
                .names
                .iter()
                .filter(|(p, _)| p.parent() == Some(&dir))
                .map(|(p, n)| (p.clone(), *n))
                .collect();
            let durable: Vec<(PathBuf, Node)> = s
                .durable_names
                .iter()
                .filter(|(p, _)| p.parent() == Some(&dir))
                .map(|(p, n)| (p.clone(), *n))
                .collect();
            if current != durable && s.rng.gen_bool(0.5) {
                for (p, _) in &current {
                    names.remove(p);
                }
                for (p, n) in &durable {
                    names.insert(p.clone(), *n);
                }
                s.record(
                    FaultKind::LostDirEntry,
                    Some(&dir),
                    None,
                    "unsynced directory changes reverted".into(),
                );
            }
        }
        // Drop children of directories that no longer exist.
        let all: Vec<PathBuf> = names.keys().cloned().collect();
        for p in all {
            let mut ancestor = p.parent();
            while let Some(a) = ancestor {
                if a.as_os_str().is_empty() || a == Path::new("/") {
                    break;
                }
                if !names.contains_key(a) {
                    names.remove(&p);
                    break;
                }
                ancestor = a.parent();
            }
        }
        s.names = names.clone();
        s.durable_names = names;
        // Files: rebuild each from durable bytes plus the fate of every dirty page.
        let inodes: Vec<u64> = s.files.keys().copied().collect();
        for inode in inodes {
            let mut file = s.files.remove(&inode).expect("file");
            let path = s.path_of(inode);
            let len = if file.len_dirty && s.rng.gen_bool(0.5) {
                file.data.len()
            } else {
                file.durable.len()
            };
            let mut image = file.durable.clone();
            image.resize(len, 0);
            let dirty: Vec<u64> = file.dirty.iter().copied().collect();
            for page in dirty {
                let start = (page * PAGE) as usize;
                if start >= len {
                    continue;
                }
                let end = (start + PAGE as usize).min(len);
                let fate = s.rng.gen_range(0..10);
                if fate < 5 {
                    // Kept.
                    let from_end = end.min(file.data.len());
                    if start < from_end {
                        image[start..from_end].copy_from_slice(&file.data[start..from_end]);
                    }
                } else if fate < 8 {
                    // Dropped: the durable bytes (or zeros) stay.
                    s.record(
                        FaultKind::LostPage,
                        path.as_deref(),
                        Some(start as u64),
                        "dropped".into(),
                    );
                } else {
                    // Torn: a prefix of sectors lands, then one garbage sector.
                    let sectors = (end - start).div_ceil(SECTOR as usize);
                    let landed = s.rng.gen_range(0..sectors);
                    let cut = (start + landed * SECTOR as usize).min(end);
                    let from_end = cut.min(file.data.len());
                    if start < from_end {
                        image[start..from_end].copy_from_slice(&file.data[start..from_end]);
                    }
                    // Garbage only where the write changed the bytes: where old and new agree
                    // (an already-durable prefix rewritten unchanged), every byte is old or new.
                    let garbage_end = (cut + SECTOR as usize).min(end);
                    for (i, byte) in image.iter_mut().enumerate().take(garbage_end).skip(cut) {
                        let changed =
                            i >= file.durable.len() || file.data.get(i) != Some(&file.durable[i]);
                        if changed {
                            *byte = s.rng.gen();
                        }
                    }
                    s.record(
                        FaultKind::LostPage,
                        path.as_deref(),
                        Some(cut as u64),
                        "torn".into(),
                    );
                }
            }
            file.data = image.clone();
            file.durable = image;
            file.dirty.clear();
            file.len_dirty = false;
            if let Some(path) = &path {
                if s.names.get(path) == Some(&Node::File(inode)) {
                    s.files.insert(inode, file);
                    continue;
                }
            }
            // Unreachable files are gone.
        }
    }

    /// Flips one bit of durable data in a random non-empty file under `under`.
    pub fn flip_random_bit(&self, under: &Path) -> Option<(PathBuf, u64)> {
        let mut s = self.lock();
        let (path, inode) = s.pick_file(under, |f| !f.durable.is_empty())?;
        let len = s.files[&inode].durable.len();
        let position = s.rng.gen_range(0..len);
        let bit = s.rng.gen_range(0..8);
        let file = s.files.get_mut(&inode).expect("file");
        file.durable[position] ^= 1 << bit;
        if position < file.data.len() {
            file.data[position] ^= 1 << bit;
        }
        s.record(
            FaultKind::BitFlip,
            Some(&path),
            Some(position as u64),
            format!("bit {bit}"),
        );
        Some((path, position as u64))
    }

    /// Makes reads of one random sector of a random file under `under` fail.
    pub fn add_bad_sector(&self, under: &Path) -> Option<(PathBuf, u64)> {
        let mut s = self.lock();
        let (path, inode) = s.pick_file(under, |f| !f.data.is_empty())?;
        let sectors = (s.files[&inode].data.len() as u64).div_ceil(SECTOR);
        let sector = s.rng.gen_range(0..sectors);
        s.bad_sectors.insert((inode, sector));
        s.record(
            FaultKind::ReadError,
            Some(&path),
            Some(sector * SECTOR),
            "latent sector error".into(),
        );
        Some((path, sector * SECTOR))
    }

    /// Heals every fault: no more lies, errors, capacity limit or bad sectors.
    pub fn heal(&self) {
        let mut s = self.lock();
        s.faults = DiskFaults::default();
        s.bad_sectors.clear();
        s.crash_in = None;
    }

    /// Bytes of `path` that an honest sync promised durable.
    pub fn promised_len(&self, path: &Path) -> u64 {
        let s = self.lock();
        match s.names.get(path) {
            Some(Node::File(i)) => s.files[i].promised_len,
            _ => 0,
        }
    }

    /// The current bytes of a file (page cache view), for tests and checkers.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let s = self.lock();
        match s.names.get(path) {
            Some(Node::File(i)) => Some(s.files[i].data.clone()),
            _ => None,
        }
    }
}

struct SimFile {
    disk: SimDisk,
    inode: u64,
}

impl DiskFile for SimFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let mut s = self.disk.lock();
        if s.crashed {
            return Err(crashed_error());
        }
        s.take_time();
        let file = s
            .files
            .get(&self.inode)
            .ok_or_else(|| io::Error::other("stale handle"))?;
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
        let crash_now = s.mutate()?;
        let bytes: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        let path = s.path_of(self.inode);
        if crash_now {
            // Torn: a sector-aligned prefix lands, then a garbage sector.
            let sectors = (bytes.len() as u64).div_ceil(SECTOR);
            let landed = if sectors == 0 {
                0
            } else {
                s.rng.gen_range(0..sectors)
            };
            let cut = (landed * SECTOR).min(bytes.len() as u64) as usize;
            let mut torn = bytes[..cut].to_vec();
            let garbage = (SECTOR as usize).min(bytes.len() - cut);
            torn.extend((0..garbage).map(|_| s.rng.gen::<u8>()));
            let file = s
                .files
                .get_mut(&self.inode)
                .ok_or_else(|| io::Error::other("stale handle"))?;
            State::write_bytes(file, pos, &torn);
            s.record(
                FaultKind::TornWrite,
                path.as_deref(),
                Some(pos + cut as u64),
                format!("{} of {} bytes landed", cut, bytes.len()),
            );
            return Err(crashed_error());
        }
        let faults = s.faults;
        if s.roll(faults.write_error) {
            s.record(
                FaultKind::WriteError,
                path.as_deref(),
                Some(pos),
                String::new(),
            );
            return Err(io::Error::other("EIO on write"));
        }
        if let Some(capacity) = faults.capacity {
            let file_len = s.files[&self.inode].data.len() as u64;
            let growth = (pos + bytes.len() as u64).saturating_sub(file_len);
            if s.used_bytes() + growth > capacity {
                s.record(
                    FaultKind::NoSpace,
                    path.as_deref(),
                    Some(pos),
                    String::new(),
                );
                return Err(io::Error::new(io::ErrorKind::StorageFull, "ENOSPC"));
            }
        }
        let mut at = pos;
        if s.roll(faults.misdirected_write) {
            let shift = SECTOR * s.rng.gen_range(1..16u64);
            at = if s.rng.gen_bool(0.5) || pos < shift {
                pos + shift
            } else {
                pos - shift
            };
            s.record(
                FaultKind::MisdirectedWrite,
                path.as_deref(),
                Some(at),
                format!("meant for {pos}"),
            );
        }
        let file = s
            .files
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::other("stale handle"))?;
        State::write_bytes(file, at, &bytes);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut s = self.disk.lock();
        let crash_now = s.mutate()?;
        if crash_now {
            return Err(crashed_error());
        }
        let path = s.path_of(self.inode);
        let faults = s.faults;
        if s.roll(faults.sync_error) {
            // The dirty pages are lost: the page cache falls back to the durable bytes.
            let file = s.files.get_mut(&self.inode).expect("file");
            let dirty: Vec<u64> = file.dirty.iter().copied().collect();
            for page in dirty {
                let start = (page * PAGE) as usize;
                let end = (start + PAGE as usize).min(file.data.len());
                for i in start..end {
                    file.data[i] = file.durable.get(i).copied().unwrap_or(0);
                }
            }
            file.dirty.clear();
            s.record(
                FaultKind::SyncError,
                path.as_deref(),
                None,
                "dirty pages lost".into(),
            );
            return Err(io::Error::other("EIO on fsync"));
        }
        if s.roll(faults.lying_sync) {
            s.record(FaultKind::LyingSync, path.as_deref(), None, String::new());
            return Ok(());
        }
        let file = s.files.get_mut(&self.inode).expect("file");
        let len = file.data.len();
        file.durable.resize(len, 0);
        let dirty: Vec<u64> = std::mem::take(&mut file.dirty).into_iter().collect();
        for page in dirty {
            let start = (page * PAGE) as usize;
            let end = (start + PAGE as usize).min(len);
            if start < end {
                file.durable[start..end].copy_from_slice(&file.data[start..end]);
            }
        }
        file.len_dirty = false;
        file.promised_len = len as u64;
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.disk.lock();
        if s.mutate()? {
            return Err(crashed_error());
        }
        let file = s
            .files
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::other("stale handle"))?;
        if len as usize != file.data.len() {
            let old = file.data.len() as u64;
            file.data.resize(len as usize, 0);
            file.len_dirty = true;
            file.promised_len = file.promised_len.min(len);
            if len > old {
                for page in old / PAGE..=(len - 1) / PAGE {
                    file.dirty.insert(page);
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
        s.files
            .get(&self.inode)
            .map(|f| f.data.len() as u64)
            .ok_or_else(|| io::Error::other("stale handle"))
    }

    fn preallocate(&self, _len: u64) -> io::Result<bool> {
        Ok(false)
    }

    fn evict_cache(&self) -> io::Result<()> {
        Ok(())
    }
}

impl Disk for SimDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        let mut s = self.lock();
        if s.crashed {
            return Err(crashed_error());
        }
        let existing = s.names.get(path).copied();
        let inode = match (existing, mode) {
            (Some(Node::Dir), _) => return Err(io::Error::other("is a directory")),
            (Some(Node::File(_)), OpenMode::CreateNew) => {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists"))
            }
            (Some(Node::File(inode)), _) => inode,
            (None, OpenMode::Read | OpenMode::ReadWrite) => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} not found", path.display()),
                ))
            }
            (None, OpenMode::CreateNew | OpenMode::CreateOrOpen) => {
                if !s.parent_exists(path) {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        "parent directory missing",
                    ));
                }
                if s.mutate()? {
                    return Err(crashed_error());
                }
                let inode = s.next_inode;
                s.next_inode += 1;
                s.files.insert(inode, FileState::default());
                s.names.insert(path.to_path_buf(), Node::File(inode));
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
        if s.mutate()? {
            return Err(crashed_error());
        }
        let mut missing = Vec::new();
        let mut cur = Some(path);
        while let Some(p) = cur {
            if p.as_os_str().is_empty() {
                break;
            }
            match s.names.get(p) {
                Some(Node::Dir) => break,
                Some(Node::File(_)) => return Err(io::Error::other("a file is in the way")),
                None => missing.push(p.to_path_buf()),
            }
            cur = p.parent();
        }
        for p in missing {
            s.names.insert(p, Node::Dir);
        }
        Ok(())
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let s = self.lock();
        if s.crashed {
            return Err(crashed_error());
        }
        if s.names.get(path) != Some(&Node::Dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} not found", path.display()),
            ));
        }
        Ok(s.names
            .iter()
            .filter(|(p, _)| p.parent() == Some(path))
            .map(|(p, n)| DirEntry {
                name: p.file_name().expect("name").to_string_lossy().into_owned(),
                is_dir: *n == Node::Dir,
            })
            .collect())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.lock();
        if s.mutate()? {
            return Err(crashed_error());
        }
        let node = s
            .names
            .remove(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "rename source missing"))?;
        // The replaced file's state stays until a power loss settles the namespace: the
        // durable directory may still name it.
        s.names.insert(to.to_path_buf(), node);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        if s.mutate()? {
            return Err(crashed_error());
        }
        match s.names.remove(path) {
            Some(Node::File(_)) => Ok(()),
            Some(Node::Dir) => {
                s.names.insert(path.to_path_buf(), Node::Dir);
                Err(io::Error::other("is a directory"))
            }
            None => Err(io::Error::new(io::ErrorKind::NotFound, "not found")),
        }
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        if s.mutate()? {
            return Err(crashed_error());
        }
        let doomed: Vec<PathBuf> = s
            .names
            .keys()
            .filter(|p| p.starts_with(path))
            .cloned()
            .collect();
        for p in doomed {
            s.names.remove(&p);
        }
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        if s.mutate()? {
            return Err(crashed_error());
        }
        let current: Vec<(PathBuf, Node)> = s
            .names
            .iter()
            .filter(|(p, _)| p.parent() == Some(path))
            .map(|(p, n)| (p.clone(), *n))
            .collect();
        let stale: Vec<PathBuf> = s
            .durable_names
            .keys()
            .filter(|p| p.parent() == Some(path))
            .cloned()
            .collect();
        for p in stale {
            s.durable_names.remove(&p);
        }
        for (p, n) in current {
            s.durable_names.insert(p, n);
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let s = self.lock();
        if s.crashed {
            return Err(crashed_error());
        }
        Ok(s.names.contains_key(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(file: &dyn DiskFile, pos: u64, bytes: &[u8]) {
        file.write_all_at(&[IoSlice::new(bytes)], pos).unwrap();
    }

    fn setup(seed: u64) -> (SimDisk, PathBuf) {
        let disk = SimDisk::new(seed, DiskFaults::default());
        let dir = PathBuf::from("/d");
        disk.create_dir_all(&dir).unwrap();
        disk.sync_dir(Path::new("/")).unwrap();
        (disk, dir)
    }

    #[test]
    fn synced_bytes_survive_power_loss_and_unsynced_ones_may_not() {
        for seed in 0..50 {
            let (disk, dir) = setup(seed);
            let path = dir.join("f");
            let file = disk.open(&path, OpenMode::CreateNew).unwrap();
            disk.sync_dir(&dir).unwrap();
            write(file.as_ref(), 0, &[1u8; 10_000]);
            file.sync_data().unwrap();
            assert_eq!(disk.promised_len(&path), 10_000);
            write(file.as_ref(), 10_000, &[2u8; 20_000]);
            disk.power_loss();
            let after = disk.contents(&path).expect("the synced name survives");
            assert!(after.len() >= 10_000, "seed {seed}");
            assert_eq!(
                &after[..10_000],
                &[1u8; 10_000][..],
                "seed {seed}: synced bytes changed"
            );
        }
    }

    #[test]
    fn a_process_crash_keeps_the_page_cache() {
        let (disk, dir) = setup(1);
        let path = dir.join("f");
        let file = disk.open(&path, OpenMode::CreateNew).unwrap();
        write(file.as_ref(), 0, b"unsynced");
        disk.process_crash();
        assert_eq!(disk.contents(&path).unwrap(), b"unsynced");
    }

    #[test]
    fn power_loss_drops_or_tears_some_unsynced_page_across_seeds() {
        let mut lost = false;
        for seed in 0..50 {
            let (disk, dir) = setup(seed);
            let path = dir.join("f");
            let file = disk.open(&path, OpenMode::CreateNew).unwrap();
            disk.sync_dir(&dir).unwrap();
            write(file.as_ref(), 0, &[7u8; 3 * PAGE as usize]);
            disk.power_loss();
            lost |= disk.contents(&path).unwrap() != vec![7u8; 3 * PAGE as usize];
        }
        assert!(lost);
    }

    #[test]
    fn a_name_is_durable_only_after_its_directory_is_synced() {
        let mut vanished = false;
        for seed in 0..50 {
            let (disk, dir) = setup(seed);
            let synced = dir.join("synced");
            let file = disk.open(&synced, OpenMode::CreateNew).unwrap();
            file.sync_data().unwrap();
            disk.sync_dir(&dir).unwrap();
            let unsynced = dir.join("unsynced");
            disk.open(&unsynced, OpenMode::CreateNew)
                .unwrap()
                .sync_data()
                .unwrap();
            disk.power_loss();
            assert!(disk.exists(&synced).unwrap(), "seed {seed}");
            vanished |= !disk.exists(&unsynced).unwrap();
        }
        assert!(vanished, "an unsynced name vanishes in some power loss");
    }

    #[test]
    fn an_armed_crash_tears_the_write_in_flight_and_stops_the_node() {
        let (disk, dir) = setup(3);
        let path = dir.join("f");
        let file = disk.open(&path, OpenMode::CreateNew).unwrap();
        disk.arm_crash(0);
        assert!(file.write_all_at(&[IoSlice::new(&[9u8; 4000])], 0).is_err());
        assert!(disk.is_crashed());
        assert!(
            file.sync_data().is_err(),
            "every call fails while the node is down"
        );
        assert!(disk
            .records()
            .iter()
            .any(|r| r.kind == FaultKind::TornWrite));
        disk.process_crash();
        let torn = disk.contents(&path).unwrap();
        assert!(torn.len() <= 4000 && torn != vec![9u8; 4000]);
    }

    #[test]
    fn lying_syncs_are_recorded_and_persist_nothing() {
        let disk = SimDisk::new(
            1,
            DiskFaults {
                lying_sync: Some(1.0),
                ..DiskFaults::default()
            },
        );
        disk.create_dir_all(Path::new("/d")).unwrap();
        let path = PathBuf::from("/d/f");
        let file = disk.open(&path, OpenMode::CreateNew).unwrap();
        write(file.as_ref(), 0, &[5u8; 100]);
        file.sync_data().unwrap();
        assert_eq!(disk.promised_len(&path), 0);
        assert!(disk
            .records()
            .iter()
            .any(|r| r.kind == FaultKind::LyingSync));
    }

    #[test]
    fn capacity_bad_sectors_and_bit_flips() {
        let disk = SimDisk::new(
            2,
            DiskFaults {
                capacity: Some(1000),
                ..DiskFaults::default()
            },
        );
        disk.create_dir_all(Path::new("/d")).unwrap();
        let file = disk.open(Path::new("/d/f"), OpenMode::CreateNew).unwrap();
        write(file.as_ref(), 0, &[1u8; 900]);
        let full = file
            .write_all_at(&[IoSlice::new(&[1u8; 200])], 900)
            .unwrap_err();
        assert_eq!(full.kind(), io::ErrorKind::StorageFull);
        file.sync_data().unwrap();
        let (path, at) = disk.flip_random_bit(Path::new("/d")).unwrap();
        assert_ne!(disk.contents(&path).unwrap()[at as usize], 1);
        let (_, sector_at) = disk.add_bad_sector(Path::new("/d")).unwrap();
        let mut buf = [0u8; 10];
        assert!(file.read_at(&mut buf, sector_at).is_err());
        disk.heal();
        assert!(file.read_at(&mut buf, sector_at).is_ok());
    }
}

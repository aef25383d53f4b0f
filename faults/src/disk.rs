//! A simulated disk that fails the way Linux on a real device does.
//!
//! Every file has three layers:
//! - `data`, the page cache: what reads return;
//! - `device`, what the device returns once a page is written back (a lying device returns
//!   what its volatile cache holds);
//! - `durable`, what survives a power loss.
//!
//! Pages written since their last writeback are *dirty*; pages a lying sync claimed durable
//! are *lied*. The calls:
//! - `sync_data` writes the dirty pages back (device and durable), or lies (device only,
//!   recorded), or fails with EIO: then, as Linux does, the pages keep their new bytes in the
//!   cache, marked clean, and the device keeps the old ones; a later sync succeeds;
//! - `evict_cache` drops clean cached pages, so reads return the device's bytes;
//! - a process crash changes nothing on disk; a power loss rebuilds every file from its
//!   durable bytes plus the fate of each dirty or lied page: kept, dropped, or torn at 512-byte
//!   sectors. On the default (sector-atomic) device each sector of a torn page is old or new;
//!   on a non-atomic device one sector is garbled whole, unchanged bytes too;
//! - directories keep an ordered log of unsynced changes per directory; `sync_dir` makes them
//!   durable (or lies, or fails), and a power loss persists a prefix of each log;
//! - a crash armed at the n-th mutating call lands that call partially (a write: each sector
//!   old or new, or one garbled sector on a non-atomic device) and fails every later call;
//! - ENOSPC past a capacity from writes, file and directory creation, renames and
//!   preallocation (which reserves space); unlinked files free theirs;
//! - misdirected writes (to another offset, or into another file), bit flips in durable
//!   bytes, unreadable sectors (a write over a sector remaps it).
//!
//! Every fault that fires is recorded ([`FaultRecord`]). Faults that damage bytes are also
//! tracked as [`Damage`] on the file they damaged, with the layers they are still present in:
//! overwritten, synced over, truncated or unlinked damage stops counting, so a checker can ask
//! whether an injected fault still present explains what it sees.

use crate::clock::SimClock;
use cairn_engine::env::{DirEntry, Disk, DiskFile, OpenMode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::io::IoSlice;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

pub const PAGE: u64 = 4096;
pub const SECTOR: u64 = 512;

/// The kinds of injected faults and of their effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    ProcessCrash,
    PowerLoss,
    /// A write in flight at a crash landed partly (each sector old or new).
    TornWrite,
    /// A non-atomic device garbled a whole sector at a crash, unchanged bytes too.
    NonAtomicTear,
    /// At a power loss, a page never synced did not land (or landed torn).
    LostPage,
    /// At a power loss, a page a lying sync had claimed durable did not land.
    LostSyncedPage,
    /// At a power loss, an unsynced directory change did not persist.
    LostDirEntry,
    /// At a power loss, a directory change a lying `sync_dir` had claimed did not persist.
    LostSyncedDirEntry,
    LyingSync,
    LyingDirSync,
    WriteError,
    SyncError,
    DirSyncError,
    NoSpace,
    BitFlip,
    ReadError,
    MisdirectedWrite,
    /// Bytes of a file replaced by something outside the node (an operator, a restore of
    /// another copy): used by directed scenarios for rules no device fault reaches.
    Overwritten,
    ClockJump,
}

impl FaultKind {
    pub const ALL: [FaultKind; 19] = [
        FaultKind::ProcessCrash,
        FaultKind::PowerLoss,
        FaultKind::TornWrite,
        FaultKind::NonAtomicTear,
        FaultKind::LostPage,
        FaultKind::LostSyncedPage,
        FaultKind::LostDirEntry,
        FaultKind::LostSyncedDirEntry,
        FaultKind::LyingSync,
        FaultKind::LyingDirSync,
        FaultKind::WriteError,
        FaultKind::SyncError,
        FaultKind::DirSyncError,
        FaultKind::NoSpace,
        FaultKind::BitFlip,
        FaultKind::ReadError,
        FaultKind::MisdirectedWrite,
        FaultKind::Overwritten,
        FaultKind::ClockJump,
    ];
}

/// One fault that fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRecord {
    pub kind: FaultKind,
    pub path: Option<PathBuf>,
    /// The bytes of `path` it concerns, when it concerns bytes.
    pub range: Option<Range<u64>>,
    pub detail: String,
}

/// Bytes of a file an injected fault changed (or kept from changing), and where that change
/// is still present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub kind: FaultKind,
    pub range: Range<u64>,
    /// The damage is bytes that should be there and are not (a lost synced page, a failed
    /// writeback, a write that landed elsewhere): cutting the file does not heal it, only
    /// writing them does. Otherwise it is wrong bytes, gone once cut away.
    pub missing: bool,
    /// The index of its [`FaultRecord`].
    pub record: usize,
    /// Reads see it now.
    pub in_cache: bool,
    /// Reads see it once the cache is dropped.
    pub on_device: bool,
    /// It survives a power loss.
    pub durable: bool,
}

impl Damage {
    pub fn present(&self) -> bool {
        self.in_cache || self.on_device || self.durable
    }
}

/// Fault intensities of the disk (probabilities per call; `None` = off).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DiskFaults {
    pub lying_sync: Option<f64>,
    pub lying_dir_sync: Option<f64>,
    pub write_error: Option<f64>,
    pub sync_error: Option<f64>,
    pub dir_sync_error: Option<f64>,
    pub misdirected_write: Option<f64>,
    /// Bytes of file data the device holds; growing past it fails with ENOSPC.
    pub capacity: Option<u64>,
    /// The device does not write sectors atomically: a torn sector is garbled whole.
    pub non_atomic: bool,
}

/// What a power loss does to unsynced pages and directory changes (random unless scripted).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Fates {
    #[default]
    Random,
    /// Every unsynced page and directory change lands.
    KeepAll,
    /// None does.
    DropAll,
    /// Unsynced pages of files, and directory changes of names, whose path ends with one of
    /// these are lost; everything else lands.
    DropOnly(Vec<String>),
    /// Every unsynced page lands torn (directory changes land).
    TearAll,
}

impl Fates {
    fn drops(&self, path: Option<&Path>) -> Option<bool> {
        match self {
            Fates::Random => None,
            Fates::KeepAll | Fates::TearAll => Some(false),
            Fates::DropAll => Some(true),
            Fates::DropOnly(ends) => {
                let path = path
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Some(ends.iter().any(|end| path.ends_with(end.as_str())))
            }
        }
    }
}

/// A fault scripted for the next call that matches (directed scenarios).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scripted {
    /// The next `sync_data` of a file whose path contains this lies.
    LieOnSync(String),
    /// The next `sync_data` of a file whose path contains this fails with EIO.
    FailSync(String),
    /// The next `sync_dir` of this directory lies.
    LieOnDirSync(PathBuf),
    /// The next write to a file whose path contains `from` lands in `into` instead, at the
    /// same position.
    MisdirectWrite { from: String, into: PathBuf },
    /// The next mutating call on a path containing this crashes the node (lands partly).
    CrashOn(String),
    /// The next call of kind `call` on a path containing `part` crashes the node (the call
    /// does not happen): a crash placed between two steps of a protocol (a checkpoint's
    /// rename after its record, its journal cut after the rename, a deletion's unlinks).
    CrashOnCall { call: Call, part: String },
    /// The next write to a file whose path contains this lands whole, then the node crashes
    /// (before whatever sync was to follow).
    CrashAfterWrite(String),
}

/// The kinds of mutating call a scripted crash can wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Write,
    Sync,
    SetLen,
    Rename,
    Remove,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    File(u64),
    /// A directory, by its own id: one made later at the same path is another.
    Dir(u64),
}

/// One unsynced change of a directory's entries.
#[derive(Clone, Debug, PartialEq, Eq)]
enum DirOp {
    Link(PathBuf, Node),
    Unlink(PathBuf),
    /// A directory removed with everything in it: the names under it that were durable
    /// when it was removed (a directory made later at the same path keeps its own).
    UnlinkDir(PathBuf, Vec<(PathBuf, Node)>),
    /// Within one directory: atomic.
    Rename(PathBuf, PathBuf, Node),
}

#[derive(Clone, Debug)]
struct PendingOp {
    op: DirOp,
    /// A lying `sync_dir` claimed it durable.
    promised: bool,
}

#[derive(Default, Clone)]
struct FileState {
    data: Vec<u8>,
    device: Vec<u8>,
    durable: Vec<u8>,
    dirty: BTreeSet<u64>,
    lied: BTreeSet<u64>,
    /// Length that an honest sync promised durable.
    promised_len: u64,
    /// The length changed since the last honest sync.
    len_dirty: bool,
    /// Bytes reserved by preallocation.
    allocated: u64,
    damage: Vec<Damage>,
}

fn pages_of(range: &Range<u64>) -> Range<u64> {
    if range.is_empty() {
        return 0..0;
    }
    range.start / PAGE..(range.end - 1) / PAGE + 1
}

fn byte_range(page: u64, len: usize) -> Range<usize> {
    let start = (page * PAGE) as usize;
    start.min(len)..(start + PAGE as usize).min(len)
}

/// Copies page `page` of `from` into `to` (lengths as they are; missing bytes are zeros).
fn copy_page(to: &mut [u8], from: &[u8], page: u64) {
    let range = byte_range(page, to.len());
    let present = range.start.min(from.len())..range.end.min(from.len());
    to[present.clone()].copy_from_slice(&from[present.clone()]);
    to[present.end.max(range.start)..range.end].fill(0);
}

impl FileState {
    fn write(&mut self, pos: u64, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let end = pos as usize + bytes.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
            self.len_dirty = true;
        }
        self.data[pos as usize..end].copy_from_slice(bytes);
        let written = pos..end as u64;
        for page in pages_of(&written) {
            self.dirty.insert(page);
        }
        for damage in &mut self.damage {
            if damage.range.start >= written.start && damage.range.end <= written.end {
                damage.in_cache = false;
            }
        }
    }

    /// Writes back `pages` (honestly unless `lie`); returns them.
    fn write_back(&mut self, pages: &BTreeSet<u64>, lie: bool) {
        let len = self.data.len();
        self.device.resize(len, 0);
        for &page in pages {
            copy_page(&mut self.device, &self.data, page);
        }
        for damage in &mut self.damage {
            let touched = pages_of(&damage.range).any(|p| pages.contains(&p));
            if touched {
                damage.on_device = damage.in_cache;
            }
        }
        if lie {
            self.lied.extend(pages.iter().copied());
            return;
        }
        // An honest flush empties the device's volatile cache too.
        let lied = std::mem::take(&mut self.lied);
        self.durable.resize(len, 0);
        for &page in pages.iter().chain(&lied) {
            copy_page(&mut self.durable, &self.device, page);
        }
        self.len_dirty = false;
        self.promised_len = len as u64;
        for damage in &mut self.damage {
            if pages_of(&damage.range).any(|p| pages.contains(&p) || lied.contains(&p)) {
                damage.durable = damage.on_device;
            }
            if damage.range.start >= len as u64 && !damage.missing {
                damage.on_device = false;
                damage.durable = false;
            }
        }
    }

    fn used(&self) -> u64 {
        (self.data.len() as u64).max(self.allocated)
    }
}

/// The current namespace: every name and what it names, and, kept in step with it, the
/// names of each file. A file has one name, or none once unlinked while open, or two after a
/// power loss kept both ends of a rename across directories.
#[derive(Default)]
struct Names {
    by_path: BTreeMap<PathBuf, Node>,
    /// The names of each file that has one (an index of `by_path`: a file's path is asked
    /// for on every write and sync).
    of_file: BTreeMap<u64, BTreeSet<PathBuf>>,
}

impl Names {
    fn from_map(by_path: BTreeMap<PathBuf, Node>) -> Names {
        let mut of_file: BTreeMap<u64, BTreeSet<PathBuf>> = BTreeMap::new();
        for (path, node) in &by_path {
            if let Node::File(inode) = node {
                of_file.entry(*inode).or_default().insert(path.clone());
            }
        }
        Names { by_path, of_file }
    }

    fn get(&self, path: &Path) -> Option<&Node> {
        self.by_path.get(path)
    }

    fn contains_key(&self, path: &Path) -> bool {
        self.by_path.contains_key(path)
    }

    fn iter(&self) -> impl Iterator<Item = (&PathBuf, &Node)> {
        self.by_path.iter()
    }

    fn keys(&self) -> impl Iterator<Item = &PathBuf> {
        self.by_path.keys()
    }

    fn insert(&mut self, path: PathBuf, node: Node) {
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

    fn remove(&mut self, path: &Path) -> Option<Node> {
        let old = self.by_path.remove(path)?;
        self.unindex(path, old);
        self.debug_check();
        Some(old)
    }

    fn unindex(&mut self, path: &Path, node: Node) {
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
    fn first_path_of(&self, inode: u64) -> Option<&PathBuf> {
        self.of_file.get(&inode).and_then(BTreeSet::first)
    }

    /// The files some name reaches.
    fn live_files(&self) -> impl Iterator<Item = u64> + '_ {
        self.of_file.keys().copied()
    }

    /// The index equals the one `by_path` gives (O(names): debug builds and tests only).
    fn debug_check(&self) {
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

struct State {
    rng: ChaCha8Rng,
    faults: DiskFaults,
    files: BTreeMap<u64, FileState>,
    names: Names,
    durable_names: BTreeMap<PathBuf, Node>,
    /// Unsynced changes per directory, oldest first.
    pending: BTreeMap<PathBuf, Vec<PendingOp>>,
    /// Names whose promised (lied-about) creation a power loss undid, with their record.
    lost_synced_names: Vec<(PathBuf, usize)>,
    next_inode: u64,
    records: Vec<FaultRecord>,
    /// Mutating calls left before the armed crash.
    crash_in: Option<u64>,
    crashed: bool,
    bad_sectors: BTreeMap<(u64, u64), usize>,
    scripted: Vec<Scripted>,
    fates: Fates,
    /// Virtual time each call takes: a seeded latency in `latency` nanoseconds, moving
    /// `clock` at once, or (`debt` mode) owed by the caller until it asks
    /// ([`Disk::take_io_time`]) and sleeps it off.
    clock: Option<SimClock>,
    latency: (u64, u64),
    debt_mode: bool,
    debt_nanos: u64,
    /// Mutating calls as made, for a picture of the run ([`SimDisk::enable_call_log`]).
    call_log: Option<CallLog>,
}

/// One mutating call: when (virtual nanoseconds), what, on which path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    pub at_nanos: u64,
    pub call: Call,
    pub path: Option<PathBuf>,
}

struct CallLog {
    clock: SimClock,
    capacity: usize,
    calls: Vec<CallRecord>,
    dropped: u64,
}

/// The simulated disk. Cheap to clone; clones share the disk.
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

fn crashed_error() -> io::Error {
    io::Error::other("simulated node is down")
}

fn no_space() -> io::Error {
    io::Error::new(io::ErrorKind::StorageFull, "ENOSPC")
}

fn not_found(what: &str, path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{what} {} not found", path.display()),
    )
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why.to_string())
}

fn parent_of(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

impl State {
    fn record(
        &mut self,
        kind: FaultKind,
        path: Option<&Path>,
        range: Option<Range<u64>>,
        detail: String,
    ) -> usize {
        self.records.push(FaultRecord {
            kind,
            path: path.map(Path::to_path_buf),
            range,
            detail,
        });
        self.records.len() - 1
    }

    /// Records a fault that damaged bytes of `inode`, present in the given layers.
    fn damage(
        &mut self,
        inode: u64,
        kind: FaultKind,
        range: Range<u64>,
        detail: String,
        layers: (bool, bool, bool),
    ) {
        let path = self.path_of(inode);
        let record = self.record(kind, path.as_deref(), Some(range.clone()), detail.clone());
        let missing = matches!(kind, FaultKind::LostSyncedPage | FaultKind::SyncError)
            || (kind == FaultKind::MisdirectedWrite && detail.ends_with("never landed"));
        if let Some(file) = self.files.get_mut(&inode) {
            file.damage.push(Damage {
                kind,
                range,
                missing,
                record,
                in_cache: layers.0,
                on_device: layers.1,
                durable: layers.2,
            });
        }
    }

    fn roll(&mut self, p: Option<f64>) -> bool {
        match p {
            Some(p) if p > 0.0 => self.rng.gen_bool(p.min(1.0)),
            _ => false,
        }
    }

    /// Takes the first scripted fault `matches` accepts.
    fn take_scripted(&mut self, matches: impl Fn(&Scripted) -> bool) -> Option<Scripted> {
        let at = self.scripted.iter().position(matches)?;
        Some(self.scripted.remove(at))
    }

    /// Lets the call's latency pass in virtual time.
    fn take_time(&mut self) {
        let (lo, hi) = self.latency;
        let nanos = if hi > lo {
            self.rng.gen_range(lo..=hi)
        } else {
            lo
        };
        if self.debt_mode {
            self.debt_nanos += nanos;
        } else if let Some(clock) = &self.clock {
            clock.advance(nanos);
        }
    }

    /// Counts a mutating call of kind `call` on `path`; returns true when it is the armed
    /// crash point.
    fn mutate(&mut self, path: Option<&Path>, call: Call) -> io::Result<bool> {
        if self.crashed {
            return Err(crashed_error());
        }
        if let Some(log) = &mut self.call_log {
            if log.calls.len() < log.capacity {
                log.calls.push(CallRecord {
                    at_nanos: log.clock.now_nanos(),
                    call,
                    path: path.map(Path::to_path_buf),
                });
            } else {
                log.dropped += 1;
            }
        }
        self.take_time();
        let scripted_crash = path.is_some_and(|path| {
            let path = path.to_string_lossy().into_owned();
            self.take_scripted(|s| match s {
                Scripted::CrashOn(part) => path.contains(part.as_str()),
                Scripted::CrashOnCall { call: c, part } => {
                    *c == call && path.contains(part.as_str())
                }
                _ => false,
            })
            .is_some()
        });
        if scripted_crash {
            self.crash_in = None;
            self.crashed = true;
            return Ok(true);
        }
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
        self.names.live_files().map(|i| self.files[&i].used()).sum()
    }

    /// ENOSPC when `growth` more bytes would pass the capacity.
    fn check_space(&mut self, growth: u64, path: &Path) -> io::Result<()> {
        let Some(capacity) = self.faults.capacity else {
            return Ok(());
        };
        if self.used_bytes() + growth > capacity {
            self.record(FaultKind::NoSpace, Some(path), None, String::new());
            return Err(no_space());
        }
        Ok(())
    }

    fn path_of(&self, inode: u64) -> Option<PathBuf> {
        self.names.first_path_of(inode).cloned()
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.as_os_str().is_empty() || matches!(self.names.get(path), Some(Node::Dir(_)))
    }

    fn log_dir_op(&mut self, dir: &Path, op: DirOp) {
        self.pending
            .entry(dir.to_path_buf())
            .or_default()
            .push(PendingOp {
                op,
                promised: false,
            });
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

    /// A write whose target a device mixed up: another position, or another file.
    fn misdirect(&mut self, inode: u64, pos: u64) -> Option<(u64, u64)> {
        let path = self.path_of(inode)?;
        let scripted_into = self.take_scripted(|s| {
            matches!(s, Scripted::MisdirectWrite { from, .. } if path.to_string_lossy().contains(from.as_str()))
        });
        if let Some(Scripted::MisdirectWrite { into, .. }) = scripted_into {
            return match self.names.get(&into) {
                Some(Node::File(target)) => Some((*target, pos)),
                _ => None,
            };
        }
        if !self.roll(self.faults.misdirected_write) {
            return None;
        }
        let root: PathBuf = path.components().take(2).collect();
        if self.rng.gen_bool(0.5) {
            if let Some((_, target)) = self.pick_file(&root, |_| true) {
                if target != inode {
                    return Some((target, pos));
                }
            }
        }
        let shift = SECTOR * self.rng.gen_range(1..16u64);
        let at = if self.rng.gen_bool(0.5) || pos < shift {
            pos + shift
        } else {
            pos - shift
        };
        Some((inode, at))
    }

    /// The bytes a crash lets land of an interrupted write: each sector old or new, or, on a
    /// non-atomic device, one sector garbled whole (its unchanged bytes too).
    fn torn_write(&mut self, inode: u64, pos: u64, bytes: &[u8]) {
        let path = self.path_of(inode);
        let end = pos + bytes.len() as u64;
        let mut landed = 0;
        let mut sector = pos - pos % SECTOR;
        while sector < end {
            let from = sector.max(pos);
            let to = (sector + SECTOR).min(end);
            if self.rng.gen_bool(0.5) {
                let slice = &bytes[(from - pos) as usize..(to - pos) as usize];
                self.files.get_mut(&inode).expect("file").write(from, slice);
                landed += to - from;
            }
            sector += SECTOR;
        }
        self.record(
            FaultKind::TornWrite,
            path.as_deref(),
            Some(pos..end),
            format!("{landed} of {} bytes landed, sector by sector", bytes.len()),
        );
        if self.faults.non_atomic && !bytes.is_empty() {
            let sectors = (end - 1) / SECTOR - pos / SECTOR + 1;
            let garbled = (pos / SECTOR + self.rng.gen_range(0..sectors)) * SECTOR;
            let garbage: Vec<u8> = (0..SECTOR).map(|_| self.rng.gen()).collect();
            let file = self.files.get_mut(&inode).expect("file");
            let stop = (garbled + SECTOR).min(file.data.len().max(end as usize) as u64);
            let garbage = &garbage[..(stop - garbled) as usize];
            file.write(garbled, garbage);
            self.damage(
                inode,
                FaultKind::NonAtomicTear,
                garbled..stop,
                "a torn write garbled the whole sector".into(),
                (true, false, false),
            );
        }
    }

    /// Applies a directory change to the durable namespace. A name it changes is no longer
    /// one whose claimed change was lost.
    fn apply_durably(&mut self, op: &DirOp) {
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

impl SimDisk {
    pub fn new(seed: u64, faults: DiskFaults) -> Self {
        let mut names = BTreeMap::new();
        names.insert(PathBuf::from("/"), Node::Dir(0));
        let durable_names = names.clone();
        SimDisk {
            state: Arc::new(Mutex::new(State {
                rng: ChaCha8Rng::seed_from_u64(seed),
                faults,
                files: BTreeMap::new(),
                durable_names,
                names: Names::from_map(names),
                pending: BTreeMap::new(),
                lost_synced_names: Vec::new(),
                next_inode: 1,
                records: Vec::new(),
                crash_in: None,
                crashed: false,
                bad_sectors: BTreeMap::new(),
                scripted: Vec::new(),
                fates: Fates::Random,
                clock: None,
                latency: (0, 0),
                debt_mode: false,
                debt_nanos: 0,
                call_log: None,
            })),
        }
    }

    /// Records every mutating call from now on (at most `capacity`; the rest are counted).
    /// Observation only: the run is the same with or without it.
    pub fn enable_call_log(&self, clock: SimClock, capacity: usize) {
        self.lock().call_log = Some(CallLog {
            clock,
            capacity,
            calls: Vec::new(),
            dropped: 0,
        });
    }

    /// The mutating calls recorded, and how many did not fit.
    pub fn call_log(&self) -> (Vec<CallRecord>, u64) {
        self.lock()
            .call_log
            .as_ref()
            .map_or((Vec::new(), 0), |log| (log.calls.clone(), log.dropped))
    }

    /// Makes every call take a seeded latency in `[min, max]` nanoseconds of `clock`'s time.
    pub fn set_latency(&self, clock: SimClock, min_nanos: u64, max_nanos: u64) {
        let mut s = self.lock();
        s.clock = Some(clock);
        s.latency = (min_nanos, max_nanos.max(min_nanos));
    }

    /// Makes every call owe a seeded latency in `[min, max]` nanoseconds, which the caller
    /// learns from [`Disk::take_io_time`] and sleeps off: the disk call itself takes no
    /// virtual time, the worker's sleep after it does, and other tasks run meanwhile.
    pub fn set_latency_debt(&self, min_nanos: u64, max_nanos: u64) {
        let mut s = self.lock();
        s.debt_mode = true;
        s.debt_nanos = 0;
        s.latency = (min_nanos, max_nanos.max(min_nanos));
    }

    /// Bytes the live files use (what a capacity is measured against).
    pub fn used_bytes(&self) -> u64 {
        self.lock().used_bytes()
    }

    /// Forgets what the calls so far owe (the simulator's own reads of the disk).
    pub fn forgive_io_time(&self) {
        self.lock().debt_nanos = 0;
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

    /// The faults fired from record `from` on.
    pub fn records_since(&self, from: usize) -> Vec<FaultRecord> {
        let s = self.lock();
        s.records[from.min(s.records.len())..].to_vec()
    }

    /// Whether any fault fired so far satisfies `pred` (without copying the records).
    pub fn any_record(&self, pred: impl Fn(&FaultRecord) -> bool) -> bool {
        self.lock().records.iter().any(pred)
    }

    /// Records an event that happened outside the disk (a clock jump, say).
    pub fn record(&self, kind: FaultKind, path: Option<&Path>, detail: String) {
        self.lock().record(kind, path, None, detail);
    }

    pub fn faults(&self) -> DiskFaults {
        self.lock().faults
    }

    pub fn set_faults(&self, faults: DiskFaults) {
        self.lock().faults = faults;
    }

    /// Queues a fault for the next call it matches.
    pub fn script(&self, fault: Scripted) {
        self.lock().scripted.push(fault);
    }

    /// What the following power losses do to unsynced pages and directory changes.
    pub fn set_fates(&self, fates: Fates) {
        self.lock().fates = fates;
    }

    /// The `n`-th mutating call from now crashes the node (it lands partially).
    pub fn arm_crash(&self, n: u64) {
        self.lock().crash_in = Some(n);
    }

    /// Cancels an armed crash that has not struck yet.
    pub fn disarm_crash(&self) {
        let mut s = self.lock();
        s.crash_in = None;
        s.scripted
            .retain(|f| !matches!(f, Scripted::CrashOn(_) | Scripted::CrashOnCall { .. }));
    }

    /// Cancels every crash still to strike: the armed one and every scripted one
    /// (`CrashOn`, `CrashOnCall`, `CrashAfterWrite`).
    pub fn cancel_crashes(&self) {
        self.disarm_crash();
        self.lock()
            .scripted
            .retain(|f| !matches!(f, Scripted::CrashAfterWrite(_)));
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

    /// A power loss: only durable state survives, with each unsynced page and directory
    /// change landing or not as the fates say.
    pub fn power_loss(&self) {
        let mut s = self.lock();
        s.crash_in = None;
        s.crashed = false;
        s.record(FaultKind::PowerLoss, None, None, String::new());
        power_loss_names(&mut s);
        let inodes: Vec<u64> = s.files.keys().copied().collect();
        for inode in inodes {
            power_loss_file(&mut s, inode);
        }
        // What no name reaches is gone.
        let live: BTreeSet<u64> = s.names.live_files().collect();
        s.files.retain(|inode, _| live.contains(inode));
        s.bad_sectors.retain(|(inode, _), _| live.contains(inode));
    }

    /// Flips one bit of durable data in a random non-empty file under `under`.
    pub fn flip_random_bit(&self, under: &Path) -> Option<(PathBuf, u64)> {
        let mut s = self.lock();
        let (path, inode) = s.pick_file(under, |f| !f.durable.is_empty())?;
        let len = s.files[&inode].durable.len();
        let position = s.rng.gen_range(0..len) as u64;
        let bit = s.rng.gen_range(0..8);
        drop(s);
        self.flip_bit_at(&path, position, bit);
        Some((path, position))
    }

    /// Flips bit `bit` of durable byte `position` of `path` (in every layer that holds it).
    pub fn flip_bit_at(&self, path: &Path, position: u64, bit: u8) {
        let mut s = self.lock();
        let Some(Node::File(inode)) = s.names.get(path).copied() else {
            panic!("flip_bit_at: no file {}", path.display());
        };
        let file = s.files.get_mut(&inode).expect("file");
        assert!(
            (position as usize) < file.durable.len(),
            "flip below the durable length"
        );
        let at = position as usize;
        file.durable[at] ^= 1 << bit;
        let in_device = at < file.device.len();
        if in_device {
            file.device[at] ^= 1 << bit;
        }
        let in_cache = at < file.data.len() && !file.dirty.contains(&(position / PAGE));
        if in_cache {
            file.data[at] ^= 1 << bit;
        }
        s.damage(
            inode,
            FaultKind::BitFlip,
            position..position + 1,
            format!("bit {bit}"),
            (in_cache, in_device, true),
        );
    }

    /// Replaces bytes of `path` at `position`, in every layer (something outside the node
    /// rewrote the file), recorded as [`FaultKind::Overwritten`] damage.
    pub fn overwrite(&self, path: &Path, position: u64, bytes: &[u8]) {
        let mut s = self.lock();
        let Some(Node::File(inode)) = s.names.get(path).copied() else {
            panic!("overwrite: no file {}", path.display());
        };
        let file = s.files.get_mut(&inode).expect("file");
        let end = position as usize + bytes.len();
        for layer in [&mut file.data, &mut file.device, &mut file.durable] {
            if layer.len() < end {
                layer.resize(end, 0);
            }
            layer[position as usize..end].copy_from_slice(bytes);
        }
        s.damage(
            inode,
            FaultKind::Overwritten,
            position..end as u64,
            format!("{} bytes replaced", bytes.len()),
            (true, true, true),
        );
    }

    /// Makes reads of one random sector of a random file under `under` fail.
    pub fn add_bad_sector(&self, under: &Path) -> Option<(PathBuf, u64)> {
        let mut s = self.lock();
        let (path, inode) = s.pick_file(under, |f| !f.data.is_empty())?;
        let sectors = (s.files[&inode].data.len() as u64).div_ceil(SECTOR);
        let sector = s.rng.gen_range(0..sectors) * SECTOR;
        drop(s);
        self.add_bad_sector_at(&path, sector);
        Some((path, sector))
    }

    /// Makes reads of the sector holding `position` of `path` fail until it is rewritten.
    pub fn add_bad_sector_at(&self, path: &Path, position: u64) {
        let mut s = self.lock();
        let Some(Node::File(inode)) = s.names.get(path).copied() else {
            panic!("add_bad_sector_at: no file {}", path.display());
        };
        let sector = position / SECTOR;
        let record = s.record(
            FaultKind::ReadError,
            Some(path),
            Some(sector * SECTOR..(sector + 1) * SECTOR),
            "latent sector error".into(),
        );
        s.bad_sectors.insert((inode, sector), record);
    }

    /// Heals every fault source: no more lies, errors, capacity limit, bad sectors or scripted
    /// faults. Damage already done stays.
    pub fn heal(&self) {
        let mut s = self.lock();
        s.faults = DiskFaults::default();
        s.bad_sectors.clear();
        s.crash_in = None;
        s.scripted.clear();
        s.fates = Fates::Random;
    }

    fn inode(&self, path: &Path) -> Option<u64> {
        match self.lock().names.get(path) {
            Some(Node::File(i)) => Some(*i),
            _ => None,
        }
    }

    /// Bytes of `path` that an honest sync promised durable.
    pub fn promised_len(&self, path: &Path) -> u64 {
        let s = self.lock();
        match s.names.get(path) {
            Some(Node::File(i)) => s.files[i].promised_len,
            _ => 0,
        }
    }

    /// What reads of `path` return now (the page cache).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let inode = self.inode(path)?;
        Some(self.lock().files[&inode].data.clone())
    }

    /// What reads of `path` return after its clean cached pages are dropped: dirty pages from
    /// the cache, clean ones from the device.
    pub fn device_view(&self, path: &Path) -> Option<Vec<u8>> {
        let inode = self.inode(path)?;
        let s = self.lock();
        let file = &s.files[&inode];
        let mut view = file.data.clone();
        for page in 0..(view.len() as u64).div_ceil(PAGE) {
            if !file.dirty.contains(&page) {
                copy_page(&mut view, &file.device, page);
            }
        }
        Some(view)
    }

    /// The bytes of `path` that survive a power loss for certain.
    pub fn durable_contents(&self, path: &Path) -> Option<Vec<u8>> {
        let inode = self.inode(path)?;
        Some(self.lock().files[&inode].durable.clone())
    }

    /// Whether `path` holds pages a lying sync claimed durable that are not.
    pub fn has_lied_pages(&self, path: &Path) -> bool {
        self.inode(path)
            .is_some_and(|i| !self.lock().files[&i].lied.is_empty())
    }

    /// The unreadable sectors of `path`, as byte ranges.
    pub fn bad_ranges(&self, path: &Path) -> Vec<Range<u64>> {
        let Some(inode) = self.inode(path) else {
            return Vec::new();
        };
        self.lock()
            .bad_sectors
            .keys()
            .filter(|(i, _)| *i == inode)
            .map(|(_, sector)| sector * SECTOR..(sector + 1) * SECTOR)
            .collect()
    }

    /// The damage still present in `path` (unreadable sectors included).
    pub fn live_damage(&self, path: &Path) -> Vec<Damage> {
        let Some(inode) = self.inode(path) else {
            return Vec::new();
        };
        let s = self.lock();
        let mut live: Vec<Damage> = s.files[&inode]
            .damage
            .iter()
            .filter(|d| d.present())
            .cloned()
            .collect();
        for (&(i, sector), &record) in &s.bad_sectors {
            if i == inode {
                live.push(Damage {
                    kind: FaultKind::ReadError,
                    range: sector * SECTOR..(sector + 1) * SECTOR,
                    missing: false,
                    record,
                    in_cache: true,
                    on_device: true,
                    durable: true,
                });
            }
        }
        live
    }

    /// Names under `under` whose change (a creation, a rename over them, a removal) a lying
    /// `sync_dir` claimed durable and a power loss undid, and that no later durable change
    /// has touched since.
    pub fn lost_synced_names(&self, under: &Path) -> Vec<PathBuf> {
        let s = self.lock();
        s.lost_synced_names
            .iter()
            .filter(|(p, _)| p.starts_with(under))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// The files and directories under `under` (current view), sorted.
    pub fn paths_under(&self, under: &Path) -> Vec<PathBuf> {
        self.lock()
            .names
            .keys()
            .filter(|p| p.starts_with(under))
            .cloned()
            .collect()
    }
}

/// The namespace after a power loss: each directory keeps a prefix of its unsynced changes.
fn power_loss_names(s: &mut State) {
    let pending = std::mem::take(&mut s.pending);
    for (dir, ops) in pending {
        let name_of = |op: &DirOp| match op {
            DirOp::Link(p, _) | DirOp::Unlink(p) | DirOp::UnlinkDir(p, _) => p.clone(),
            DirOp::Rename(_, to, _) => to.clone(),
        };
        // An honest device commits directory changes in order: a prefix lands. Changes a
        // lying `sync_dir` claimed sit in a device cache that reorders: each may be lost.
        let mut kept = Vec::with_capacity(ops.len());
        let prefix = match s.fates.drops(None) {
            Some(true) => 0,
            Some(false) => ops.len(),
            None => s.rng.gen_range(0..=ops.len()),
        };
        for (i, op) in ops.iter().enumerate() {
            let keep = match s.fates.drops(Some(&name_of(&op.op))) {
                Some(dropped) if s.fates != Fates::Random => !dropped,
                _ => i < prefix && !(op.promised && s.rng.gen_bool(0.5)),
            };
            kept.push(keep);
        }
        if let Fates::DropOnly(_) = s.fates {
            // A scripted loss keeps order too: nothing after a lost change lands.
            if let Some(first_lost) = kept.iter().position(|k| !k) {
                let promised_tail = ops[first_lost..].iter().all(|op| op.promised);
                if !promised_tail {
                    kept[first_lost..].iter_mut().for_each(|k| *k = false);
                }
            }
        }
        for (op, keep) in ops.iter().zip(&kept) {
            if *keep {
                s.apply_durably(&op.op);
                continue;
            }
            let name = name_of(&op.op);
            let kind = if op.promised {
                FaultKind::LostSyncedDirEntry
            } else {
                FaultKind::LostDirEntry
            };
            let record = s.record(
                kind,
                Some(&name),
                None,
                format!("in {}: {:?}", dir.display(), op.op),
            );
            if op.promised {
                s.lost_synced_names.push((name, record));
            }
        }
    }
    // Children of directories that no longer exist are gone.
    let all: Vec<PathBuf> = s.durable_names.keys().cloned().collect();
    for path in all {
        let orphan = path
            .ancestors()
            .skip(1)
            .take_while(|a| !a.as_os_str().is_empty() && *a != Path::new("/"))
            .any(|a| !matches!(s.durable_names.get(a), Some(Node::Dir(_))));
        if orphan {
            s.durable_names.remove(&path);
        }
    }
    s.names = Names::from_map(s.durable_names.clone());
}

/// The fate of one unsynced page at a power loss.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PageFate {
    Kept,
    Dropped,
    Torn,
}

/// Rebuilds one file from its durable bytes and the fate of every dirty or lied page.
fn power_loss_file(s: &mut State, inode: u64) {
    let mut file = s.files.remove(&inode).expect("file");
    let path = s.path_of(inode);
    let dropped = s.fates.drops(path.as_deref());
    let len = match dropped {
        _ if !file.len_dirty => file.durable.len(),
        Some(true) => file.durable.len(),
        Some(false) => file.data.len(),
        None if s.rng.gen_bool(0.5) => file.data.len(),
        None => file.durable.len(),
    };
    let mut image = file.durable.clone();
    image.resize(len, 0);
    let mut fates: BTreeMap<u64, PageFate> = BTreeMap::new();
    let unsettled: BTreeSet<u64> = file.dirty.union(&file.lied).copied().collect();
    let mut garbled = Vec::new();
    let mut lost = Vec::new();
    for &page in &unsettled {
        let lied_only = file.lied.contains(&page) && !file.dirty.contains(&page);
        let source = if lied_only { &file.device } else { &file.data };
        // The bytes this page was meant to hold (beyond the surviving length they are lost).
        let meant = byte_range(page, source.len());
        if meant.is_empty() {
            continue;
        }
        let range = byte_range(page, len);
        let fate = match dropped {
            _ if s.fates == Fates::TearAll => PageFate::Torn,
            Some(false) => PageFate::Kept,
            Some(true) => PageFate::Dropped,
            None => match s.rng.gen_range(0..10) {
                0..=4 => PageFate::Kept,
                5..=7 => PageFate::Dropped,
                _ => PageFate::Torn,
            },
        };
        fates.insert(page, fate);
        match fate {
            PageFate::Kept => copy_page(&mut image, source, page),
            PageFate::Dropped => {}
            PageFate::Torn => {
                let mut sector = range.start;
                while sector < range.end {
                    let end = (sector + SECTOR as usize).min(range.end);
                    if s.rng.gen_bool(0.5) {
                        for (i, byte) in image.iter_mut().enumerate().take(end).skip(sector) {
                            *byte = source.get(i).copied().unwrap_or(0);
                        }
                    }
                    sector = end;
                }
                if s.faults.non_atomic && !range.is_empty() {
                    let sectors = (range.end - range.start).div_ceil(SECTOR as usize);
                    let at = range.start + s.rng.gen_range(0..sectors) * SECTOR as usize;
                    let end = (at + SECTOR as usize).min(len);
                    for byte in &mut image[at..end] {
                        *byte = s.rng.gen();
                    }
                    garbled.push(at as u64..end as u64);
                }
            }
        }
        let landed = meant
            .clone()
            .all(|i| image.get(i).copied() == Some(source[i]));
        if !landed {
            lost.push((page, meant, file.lied.contains(&page)));
        }
    }
    let old_durable_len = file.durable.len() as u64;
    for damage in &mut file.damage {
        // A write that grew the file leaves its mark if the new length survives, whatever
        // became of its bytes.
        let grew = damage.range.end > old_durable_len
            && len as u64 > old_durable_len
            && damage.range.start < len as u64
            && (damage.in_cache || damage.durable);
        let pages = pages_of(&damage.range);
        // A page past the surviving length keeps nothing, whatever its fate.
        let fate_of = |p: u64| match fates.get(&p) {
            Some(_) if p * PAGE >= len as u64 => Some(PageFate::Dropped),
            fate => fate.copied(),
        };
        let from_cache = pages.clone().all(|p| fate_of(p) == Some(PageFate::Kept));
        let from_durable = pages
            .clone()
            .all(|p| matches!(fate_of(p), None | Some(PageFate::Dropped)));
        let present = if from_cache {
            damage.in_cache
        } else if from_durable {
            damage.durable
        } else {
            damage.in_cache || damage.durable
        };
        let present = (present || grew) && (damage.missing || damage.range.start < len as u64);
        damage.in_cache = present;
        damage.on_device = present;
        damage.durable = present;
    }
    file.data = image.clone();
    file.device = image.clone();
    file.durable = image;
    file.dirty.clear();
    file.lied.clear();
    file.len_dirty = false;
    file.promised_len = file.promised_len.min(len as u64);
    s.files.insert(inode, file);
    for (page, range, promised) in lost {
        let kind = if promised {
            FaultKind::LostSyncedPage
        } else {
            FaultKind::LostPage
        };
        let range = range.start as u64..range.end as u64;
        if promised {
            s.damage(
                inode,
                kind,
                range,
                format!("page {page}: a lying sync had claimed it"),
                (true, true, true),
            );
        } else {
            s.record(kind, path.as_deref(), Some(range), format!("page {page}"));
        }
    }
    for range in garbled {
        s.damage(
            inode,
            FaultKind::NonAtomicTear,
            range,
            "a torn page garbled a whole sector".into(),
            (true, true, true),
        );
    }
}

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
        if !s.files.contains_key(&self.inode) {
            return Err(io::Error::other("stale handle"));
        }
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
        let Some(file) = s.files.get_mut(&self.inode) else {
            return Err(io::Error::other("stale handle"));
        };
        // Written back or failed, no page is dirty after this call.
        let pages = std::mem::take(&mut file.dirty);
        let len = file.data.len() as u64;
        let range = match (pages.first(), pages.last()) {
            (Some(first), Some(last)) => Some(first * PAGE..((last + 1) * PAGE).min(len)),
            _ => None,
        };
        let name = path
            .as_deref()
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
                    self.inode,
                    FaultKind::SyncError,
                    range,
                    "writeback failed: the cache holds bytes the device does not".into(),
                    (false, true, true),
                );
            } else {
                s.record(FaultKind::SyncError, path.as_deref(), None, String::new());
            }
            return Err(io::Error::other("EIO on fsync"));
        }
        let scripted_lie = s
            .take_scripted(|f| matches!(f, Scripted::LieOnSync(end) if name.contains(end.as_str())))
            .is_some();
        let lie = scripted_lie || s.roll(faults.lying_sync);
        let file = s.files.get_mut(&self.inode).expect("file");
        file.write_back(&pages, lie);
        if lie {
            s.record(FaultKind::LyingSync, path.as_deref(), range, String::new());
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.disk.lock();
        let path = self.path(&s);
        if s.mutate(path.as_deref(), Call::SetLen)? {
            return Err(crashed_error());
        }
        let old = s
            .files
            .get(&self.inode)
            .ok_or_else(|| io::Error::other("stale handle"))?
            .data
            .len() as u64;
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
        s.files
            .get(&self.inode)
            .map(|f| f.data.len() as u64)
            .ok_or_else(|| io::Error::other("stale handle"))
    }

    fn preallocate(&self, len: u64) -> io::Result<bool> {
        let mut s = self.disk.lock();
        let path = self.path(&s);
        if s.mutate(path.as_deref(), Call::Other)? {
            return Err(crashed_error());
        }
        let used = s
            .files
            .get(&self.inode)
            .ok_or_else(|| io::Error::other("stale handle"))?
            .used();
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
        let file = s
            .files
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::other("stale handle"))?;
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
            .iter()
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

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let s = self.lock();
        if s.crashed {
            return Err(crashed_error());
        }
        Ok(s.names.contains_key(path))
    }

    fn take_io_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(std::mem::take(&mut self.lock().debt_nanos))
    }
}

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
//!
//! The parts: the fault vocabulary and how faults fire (`faults`), the page and layer model
//! of a file (`pages`), the namespace and its directory change logs (`dirs`), the power-loss
//! algorithm (`power`), and the engine's `Disk`/`DiskFile` on it (`file`); this module holds
//! the disk's state and its control API ([`SimDisk`]).

mod dirs;
mod faults;
mod file;
mod pages;
mod power;

pub use faults::{Call, Damage, DiskFaults, Fates, FaultKind, FaultRecord, Scripted};

use crate::clock::SimClock;
use dirs::{Names, Node, PendingOp};
use pages::{copy_page, FileState};
use power::{power_loss_file, power_loss_names};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

pub const PAGE: u64 = 4096;
pub const SECTOR: u64 = 512;

/// The whole disk behind [`SimDisk`]'s lock: files and their layers, the namespace, the
/// fault sources and what fired.
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
    /// ([`Disk::take_io_time`](cairn_engine::env::Disk::take_io_time)) and sleeps it off.
    clock: Option<SimClock>,
    latency: (u64, u64),
    debt_mode: bool,
    debt_nanos: u64,
    /// Mutating calls as made, for a picture of the run ([`SimDisk::enable_call_log`]).
    call_log: Option<CallLog>,
    /// The seed, and how many kernels booted since: together the boot id.
    boot: (u64, u64),
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
    /// The file a handle names; a handle whose file is gone (removed and its inode freed)
    /// is stale.
    fn file(&self, inode: u64) -> io::Result<&FileState> {
        self.files.get(&inode).ok_or_else(stale_handle)
    }

    fn file_mut(&mut self, inode: u64) -> io::Result<&mut FileState> {
        self.files.get_mut(&inode).ok_or_else(stale_handle)
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
            let exact = path.to_path_buf();
            let path = path.to_string_lossy().into_owned();
            self.take_scripted(|s| match s {
                Scripted::CrashOnDirSync(dir) => call == Call::Sync && *dir == exact,
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
                boot: (seed, 0),
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
    /// learns from [`Disk::take_io_time`](cairn_engine::env::Disk::take_io_time) and sleeps off: the disk call itself takes no
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

    /// Cancels every scripted sync failure (`FailSync`) still to strike: a process that
    /// went down before its sync came does not hand the failure to the next one.
    pub fn cancel_sync_failures(&self) {
        self.lock()
            .scripted
            .retain(|f| !matches!(f, Scripted::FailSync(_)));
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
        self.power_loss_with(true);
    }

    /// A power loss after which the kernel reports the boot id it reported before (a model
    /// that lies, as a restored virtual machine might): the page cache is empty all the
    /// same.
    pub fn power_loss_keeping_boot_id(&self) {
        self.power_loss_with(false);
    }

    /// The boot id `Disk::boot_id` reports now.
    pub fn boot_id(&self) -> u128 {
        let (seed, boots) = self.lock().boot;
        (u128::from(seed) << 64) | u128::from(boots)
    }

    fn power_loss_with(&self, new_boot_id: bool) {
        let mut s = self.lock();
        if new_boot_id {
            s.boot.1 += 1;
        }
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

    /// Deletes `path` durably (something outside the node removed the file), recorded as
    /// [`FaultKind::Overwritten`] damage and as a lost name (boot may refuse over it).
    pub fn remove_by_operator(&self, path: &Path) {
        use cairn_engine::env::Disk;
        self.remove_file(path).expect("the file exists");
        self.sync_dir(path.parent().expect("a parent"))
            .expect("the directory syncs");
        let mut s = self.lock();
        let record = s.record(
            FaultKind::Overwritten,
            Some(path),
            None,
            "removed by an operator".into(),
        );
        s.lost_synced_names.push((path.to_path_buf(), record));
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
        // Each page copied once, from where a read would find it.
        let mut view = vec![0; file.data.len()];
        for page in 0..(view.len() as u64).div_ceil(PAGE) {
            let from = match file.dirty.contains(&page) {
                true => &file.data,
                false => &file.device,
            };
            copy_page(&mut view, from, page);
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

fn stale_handle() -> io::Error {
    io::Error::other("stale handle")
}

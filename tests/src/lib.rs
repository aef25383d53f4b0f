//! Helpers for the workspace integration tests (see `tests/tests/`): producer batches, a
//! disk that counts syncs, whole-directory snapshots, and reading a partition back;
//! appending acknowledged batches ([`batches`]), files changed from outside ([`fs`]), a
//! node on real files ([`node`]).
#![forbid(unsafe_code)]

use bytes::BytesMut;
use cairn_engine::config::{Durability, PartitionSettings, TopicConfig};
use cairn_engine::env::real::RealDisk;
use cairn_engine::env::{Disk, DiskFile, DiskLayer, Env, FileLayer, OpenMode};
use cairn_engine::format::{BatchBuilder, BatchHeader, MessageIter};
use cairn_engine::metrics::{counting_disk, DiskTally};
use cairn_engine::partition::{Opened, Partition, PollFrom};
use std::collections::BTreeMap;
use std::io;
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub mod batches;
pub mod fs;
pub mod node;
pub use batches::{acked_ids, append_acked, append_seeds, ids};
pub use fs::{append_to_file, env_on, scratch_dir};
pub use node::{id, named, node_with_topic, read_node, start, TestNode};

/// A producer batch of `count` messages; message `i` gets id `seed << 32 | i` and a payload
/// of `size` bytes derived from both.
pub fn batch(seed: u64, count: usize, size: usize) -> BytesMut {
    let mut builder = BatchBuilder::new(1_000 + seed);
    for i in 0..count {
        let payload = payload(seed, i, size);
        builder.push(message_id(seed, i), i as u32, &payload, &[i as u8; 3]);
    }
    builder.build()
}

pub fn message_id(seed: u64, i: usize) -> u128 {
    u128::from(seed) << 32 | i as u128
}

pub fn payload(seed: u64, i: usize, size: usize) -> Vec<u8> {
    (0..size)
        .map(|j| (seed as usize * 31 + i * 7 + j) as u8)
        .collect()
}

/// The identity of the partitions these tests create: partition 7 outside any stream.
pub const ID: cairn_engine::partition::PartitionIdentity =
    cairn_engine::partition::PartitionIdentity::bare(7);

/// 1 MiB segments (the minimum) so rotation happens in small tests.
pub fn config(durability: Durability) -> TopicConfig {
    TopicConfig {
        durability,
        consumer_offset_durability: durability,
        segment_size: 1024 * 1024,
        ..TopicConfig::default()
    }
}

pub fn real_env() -> Env {
    cairn_engine::env::real::env().expect("runtime")
}

pub fn create(env: &Env, dir: &Path, config: TopicConfig) -> Partition {
    Partition::create(env, dir, ID, config, PartitionSettings::default()).expect("create")
}

pub fn open(env: &Env, dir: &Path, config: TopicConfig) -> Opened {
    Partition::open(env, dir, ID, config, PartitionSettings::default()).expect("open")
}

/// One message as read back: (offset, id, payload).
pub type Message = (u64, u128, Vec<u8>);

/// Every message of a partition, polled from the first offset in pages of `page`.
pub fn read_all(partition: &mut Partition, page: u32) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    let mut from = PollFrom::First;
    loop {
        let polled = partition.poll(from, page).expect("poll");
        let before = out.len();
        out.extend(messages(&polled.batches));
        if out.len() == before {
            return out;
        }
        from = PollFrom::Offset(out.last().unwrap().0 + 1);
    }
}

/// Decodes reply batches into messages.
pub fn messages(batches: &[bytes::Bytes]) -> Vec<Message> {
    let mut out = Vec::new();
    for batch in batches {
        let header = BatchHeader::decode(batch).expect("reply header");
        for m in MessageIter::new(batch, header.base_offset) {
            out.push((m.offset, m.header.id, m.payload.to_vec()));
        }
    }
    out
}

/// Every file under `dir` with its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            if entry.file_type().expect("type").is_dir() {
                stack.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).expect("read"));
            }
        }
    }
    files
}

/// Segment `.log` files of a partition directory, oldest first.
pub fn logs(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

/// Byte positions of the batches in a log file.
pub fn batch_positions(log: &Path) -> Vec<u64> {
    let bytes = std::fs::read(log).expect("read log");
    let mut positions = Vec::new();
    let mut at = 0usize;
    while at + 256 <= bytes.len() {
        positions.push(at as u64);
        let header = BatchHeader::decode(&bytes[at..]).expect("header");
        at += header.batch_length as usize;
    }
    positions
}

/// Calls counted per path.
pub type PathCounts = Arc<Mutex<BTreeMap<PathBuf, usize>>>;

/// A real disk that counts opens, `sync_data` and `evict_cache` calls per path, `sync_dir`
/// calls per directory and `sync_all` calls per root: the engine's counting disk ([`counting_disk`]) with a tally per path.
#[derive(Clone)]
pub struct CountingDisk {
    pub opens: PathCounts,
    pub syncs: PathCounts,
    pub evictions: PathCounts,
    pub dir_syncs: PathCounts,
    /// `sync_all` calls, by the root they were given.
    pub all_syncs: PathCounts,
    disk: Arc<dyn Disk>,
}

impl Default for CountingDisk {
    fn default() -> Self {
        let tally = PathTally::default();
        CountingDisk {
            opens: tally.opens.clone(),
            syncs: tally.syncs.clone(),
            evictions: tally.evictions.clone(),
            dir_syncs: tally.dir_syncs.clone(),
            all_syncs: tally.all_syncs.clone(),
            disk: counting_disk(Arc::new(RealDisk), Arc::new(tally)),
        }
    }
}

impl CountingDisk {
    /// Opens of files whose path contains `part`.
    pub fn opens_of(&self, part: &str) -> usize {
        count_matching(&self.opens, part)
    }

    /// `sync_data` calls on files whose path contains `part`.
    pub fn syncs_of(&self, part: &str) -> usize {
        count_matching(&self.syncs, part)
    }

    /// `sync_dir` calls on directories whose path contains `part`.
    pub fn dir_syncs_of(&self, part: &str) -> usize {
        count_matching(&self.dir_syncs, part)
    }

    /// Every `sync_dir` call.
    pub fn all_dir_syncs(&self) -> usize {
        self.dir_syncs.lock().unwrap().values().sum()
    }
}

impl DiskLayer for CountingDisk {
    fn inner(&self) -> &dyn Disk {
        self.disk.as_ref()
    }
}

fn count_matching(counts: &Mutex<BTreeMap<PathBuf, usize>>, part: &str) -> usize {
    counts
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, _)| p.to_string_lossy().contains(part))
        .map(|(_, n)| n)
        .sum()
}

/// The counts of a [`CountingDisk`]: an open file keeps its path.
#[derive(Default)]
struct PathTally {
    opens: PathCounts,
    syncs: PathCounts,
    evictions: PathCounts,
    dir_syncs: PathCounts,
    all_syncs: PathCounts,
}

fn bump(counts: &PathCounts, path: &Path) {
    *counts
        .lock()
        .unwrap()
        .entry(path.to_path_buf())
        .or_default() += 1;
}

impl DiskTally for PathTally {
    type File = PathBuf;
    fn opened(&self, path: &Path) -> PathBuf {
        bump(&self.opens, path);
        path.to_path_buf()
    }
    fn file_synced(&self, path: &PathBuf) {
        bump(&self.syncs, path);
    }
    fn cache_evicted(&self, path: &PathBuf) {
        bump(&self.evictions, path);
    }
    fn dir_synced(&self, dir: &Path) {
        bump(&self.dir_syncs, dir);
    }
    fn all_synced(&self, root: &Path) {
        bump(&self.all_syncs, root);
    }
}

/// Flips one bit of a file at `position`.
pub fn flip_byte(path: &Path, position: u64) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[position as usize] ^= 0x10;
    std::fs::write(path, bytes).expect("write");
}

/// A real disk that fails every mutating call (write, sync, set_len, create, rename, remove)
/// after `budget` of them have succeeded: a crash at that point of whatever runs on it.
#[derive(Clone)]
pub struct CrashingDisk {
    pub budget: Arc<Mutex<usize>>,
}

impl CrashingDisk {
    pub fn new(budget: usize) -> Self {
        CrashingDisk {
            budget: Arc::new(Mutex::new(budget)),
        }
    }

    fn spend(budget: &Mutex<usize>) -> io::Result<()> {
        let mut left = budget.lock().unwrap();
        if *left == 0 {
            return Err(io::Error::other("simulated crash"));
        }
        *left -= 1;
        Ok(())
    }
}

struct CrashingFile {
    inner: Box<dyn DiskFile>,
    budget: Arc<Mutex<usize>>,
}

impl FileLayer for CrashingFile {
    fn inner(&self) -> &dyn DiskFile {
        self.inner.as_ref()
    }
    fn write_all_at(&self, bufs: &[IoSlice<'_>], pos: u64) -> io::Result<()> {
        CrashingDisk::spend(&self.budget)?;
        self.inner.write_all_at(bufs, pos)
    }
    fn sync_data(&self) -> io::Result<()> {
        CrashingDisk::spend(&self.budget)?;
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        CrashingDisk::spend(&self.budget)?;
        self.inner.set_len(len)
    }
}

impl DiskLayer for CrashingDisk {
    fn inner(&self) -> &dyn Disk {
        &RealDisk
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        if matches!(mode, OpenMode::CreateNew | OpenMode::CreateOrOpen) && !path.exists() {
            CrashingDisk::spend(&self.budget)?;
        }
        Ok(Box::new(CrashingFile {
            inner: RealDisk.open(path, mode)?,
            budget: self.budget.clone(),
        }))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        CrashingDisk::spend(&self.budget)?;
        RealDisk.create_dir_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        CrashingDisk::spend(&self.budget)?;
        RealDisk.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        CrashingDisk::spend(&self.budget)?;
        RealDisk.remove_file(path)
    }
    /// As `std::fs::remove_dir_all` does it: one entry at a time, each unlink a call a crash
    /// may strike before. A file system lists a directory in an order of its own (ext4: by
    /// hash): here, by name from the last, an order that may take a partition's
    /// `superblock.*` before its segments, as any file system may.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut entries = std::fs::read_dir(path)?.collect::<io::Result<Vec<_>>>()?;
        entries.sort_by_key(|e| std::cmp::Reverse(e.file_name()));
        for entry in entries {
            if entry.file_type()?.is_dir() {
                DiskLayer::remove_dir_all(self, &entry.path())?;
            } else {
                CrashingDisk::spend(&self.budget)?;
                std::fs::remove_file(entry.path())?;
            }
        }
        CrashingDisk::spend(&self.budget)?;
        std::fs::remove_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        CrashingDisk::spend(&self.budget)?;
        RealDisk.sync_dir(path)
    }
    fn sync_all(&self, root: &Path) -> io::Result<()> {
        CrashingDisk::spend(&self.budget)?;
        RealDisk.sync_all(root)
    }
}

/// Copies a directory tree.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A real disk with switchable faults: ENOSPC on writes to files with a given extension, on
/// creating files, on `fallocate`; EIO on reads overlapping a byte range of one file; EIO on
/// `set_len`; writes that vanish. Switches apply from the moment they are set.
#[derive(Default, Clone)]
pub struct FaultyDisk {
    pub nospace_writes_to: Arc<Mutex<Option<&'static str>>>,
    pub nospace_create: Arc<Mutex<bool>>,
    pub nospace_preallocate: Arc<Mutex<bool>>,
    pub set_len_fails: Arc<Mutex<bool>>,
    /// Reads of this file overlapping `[start, end)` fail with EIO.
    pub unreadable: Arc<Mutex<Option<(PathBuf, u64, u64)>>>,
    /// Writes to files whose name starts with this report success and change nothing: a
    /// device that put them somewhere else.
    pub misdirect_writes_to: Arc<Mutex<Option<&'static str>>>,
    /// The next sync of this file fails with EIO, once (as Linux reports a writeback error
    /// once: the sync after it succeeds over the lost bytes).
    pub sync_fails_once: Arc<Mutex<Option<PathBuf>>>,
}

impl FaultyDisk {
    /// An `Env` on the real clock and runtime whose disk is this one.
    pub fn env(&self) -> Env {
        let mut env = real_env();
        env.disk = Arc::new(self.clone());
        env
    }
}

fn no_space() -> io::Error {
    io::Error::new(io::ErrorKind::StorageFull, "ENOSPC (injected)")
}

struct FaultyFile {
    inner: Box<dyn DiskFile>,
    path: PathBuf,
    disk: FaultyDisk,
}

impl FileLayer for FaultyFile {
    fn inner(&self) -> &dyn DiskFile {
        self.inner.as_ref()
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        if let Some((path, start, end)) = self.disk.unreadable.lock().unwrap().clone() {
            if path == self.path && pos < end && pos + buf.len() as u64 > start {
                return Err(io::Error::other("EIO (injected)"));
            }
        }
        self.inner.read_at(buf, pos)
    }
    fn read_exact_owned(&self, len: usize, pos: u64) -> io::Result<bytes::BytesMut> {
        cairn_engine::env::layer::owned_through_read_at(self, len, pos)
    }
    fn write_all_at(&self, bufs: &[IoSlice<'_>], pos: u64) -> io::Result<()> {
        if let Some(ext) = *self.disk.nospace_writes_to.lock().unwrap() {
            if self.path.extension().is_some_and(|e| e == ext) {
                return Err(no_space());
            }
        }
        if let Some(prefix) = *self.disk.misdirect_writes_to.lock().unwrap() {
            let name = self.path.file_name().unwrap_or_default().to_string_lossy();
            if name.starts_with(prefix) {
                return Ok(());
            }
        }
        self.inner.write_all_at(bufs, pos)
    }
    fn sync_data(&self) -> io::Result<()> {
        let mut once = self.disk.sync_fails_once.lock().unwrap();
        if once.as_ref() == Some(&self.path) {
            *once = None;
            return Err(io::Error::other("EIO on sync (injected, reported once)"));
        }
        drop(once);
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        if *self.disk.set_len_fails.lock().unwrap() {
            return Err(io::Error::other("EIO on set_len (injected)"));
        }
        self.inner.set_len(len)
    }
    fn preallocate(&self, len: u64) -> io::Result<bool> {
        if *self.disk.nospace_preallocate.lock().unwrap() {
            return Err(no_space());
        }
        self.inner.preallocate(len)
    }
}

impl DiskLayer for FaultyDisk {
    fn inner(&self) -> &dyn Disk {
        &RealDisk
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        let creates = matches!(mode, OpenMode::CreateNew | OpenMode::CreateOrOpen);
        if creates && *self.nospace_create.lock().unwrap() && !path.exists() {
            return Err(no_space());
        }
        Ok(Box::new(FaultyFile {
            inner: RealDisk.open(path, mode)?,
            path: path.to_path_buf(),
            disk: self.clone(),
        }))
    }
}

/// Settings for a node in tests: cheap password hashes, small checkpoints, two shards.
pub fn node_settings() -> cairn_engine::node::NodeSettings {
    cairn_engine::node::NodeSettings {
        password_cost: cairn_engine::node::PasswordCost::CHEAP,
        meta: cairn_engine::metadata::MetaSettings {
            checkpoint_bytes: 1 << 20,
            cluster: None,
        },
        shards: 2,
        ..Default::default()
    }
}

/// Boots the node under `root` on real files.
pub fn boot(root: &Path) -> node::Booted {
    node::start(&real_env(), root, node_settings()).expect("boot")
}

/// A topic options block: `(key, value kind, value bytes)`, kinds as `iggy_common` encodes
/// them (2 string, 3 bool, 9 u8, 11 u32, 12 u64).
pub fn topic_options(entries: &[(&str, u8, &[u8])]) -> iggy_binary_protocol::WireOptions {
    let mut buf = BytesMut::new();
    let tlv: Vec<(u8, &[u8], u8, &[u8])> = entries
        .iter()
        .map(|(k, kind, v)| (2u8, k.as_bytes(), *kind, *v))
        .collect();
    iggy_binary_protocol::encode_user_headers(&tlv, &mut buf);
    iggy_binary_protocol::WireOptions::from_bytes(buf.freeze()).expect("valid options")
}

/// Damage done to one file of a directory from outside: which file is chosen by the caller
/// from the `Index`.
#[derive(Debug, Clone)]
pub enum Damage {
    Remove(proptest::sample::Index),
    Cut(proptest::sample::Index, proptest::sample::Index),
    Overwrite(proptest::sample::Index, proptest::sample::Index, Vec<u8>),
    Replace(proptest::sample::Index, Vec<u8>),
    /// A file added at a path relative to the directory.
    Add(&'static str, Vec<u8>),
}

/// Any damage to an existing file: removed, cut, overwritten in place, replaced.
pub fn file_damage() -> impl proptest::strategy::Strategy<Value = Damage> {
    use proptest::prelude::*;
    let bytes = || prop::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        any::<proptest::sample::Index>().prop_map(Damage::Remove),
        (
            any::<proptest::sample::Index>(),
            any::<proptest::sample::Index>()
        )
            .prop_map(|(f, at)| Damage::Cut(f, at)),
        (
            any::<proptest::sample::Index>(),
            any::<proptest::sample::Index>(),
            bytes()
        )
            .prop_map(|(f, at, b)| Damage::Overwrite(f, at, b)),
        (any::<proptest::sample::Index>(), bytes()).prop_map(|(f, b)| Damage::Replace(f, b)),
    ]
}

/// Inflicts `damage` under `dir`, `pick` choosing the file an index names.
pub fn inflict(dir: &Path, damage: &Damage, pick: impl Fn(&proptest::sample::Index) -> PathBuf) {
    match damage {
        Damage::Remove(f) => std::fs::remove_file(pick(f)).unwrap(),
        Damage::Cut(f, at) => {
            let path = pick(f);
            let len = std::fs::metadata(&path).unwrap().len() as usize;
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len(at.index(len + 1) as u64).unwrap();
        }
        Damage::Overwrite(f, at, bytes) => {
            let path = pick(f);
            let mut content = std::fs::read(&path).unwrap();
            let at = at.index(content.len() + 1);
            let end = (at + bytes.len()).min(content.len());
            content[at..end].copy_from_slice(&bytes[..end - at]);
            std::fs::write(&path, content).unwrap();
        }
        Damage::Replace(f, bytes) => std::fs::write(pick(f), bytes).unwrap(),
        Damage::Add(name, bytes) => {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
    }
}

/// A real disk on which one chosen `open` blocks until the test lets it go: arm it with a
/// path part and how many matching opens pass first; the next one waits in the calling
/// owner (its OS thread, or a shard's runtime worker) while the test looks at what the node
/// answers meanwhile.
#[derive(Clone)]
pub struct GatedDisk {
    gate: Arc<(Mutex<Gate>, std::sync::Condvar)>,
    inner: Arc<dyn Disk>,
}

impl Default for GatedDisk {
    fn default() -> Self {
        GatedDisk::over(Arc::new(RealDisk))
    }
}

#[derive(Default)]
struct Gate {
    armed: Option<(String, usize)>,
    blocked: bool,
    released: bool,
}

impl GatedDisk {
    /// A gate in front of `inner` (another layer, such as a [`CountingDisk`]).
    pub fn over(inner: Arc<dyn Disk>) -> Self {
        GatedDisk {
            gate: Arc::default(),
            inner,
        }
    }

    /// The open of a path containing `part` after `pass` such opens blocks.
    pub fn arm(&self, part: &str, pass: usize) {
        let mut gate = self.gate.0.lock().unwrap();
        *gate = Gate {
            armed: Some((part.to_string(), pass)),
            ..Gate::default()
        };
    }

    /// Waits until an open is blocked at the gate (false after `timeout`).
    pub fn wait_blocked(&self, timeout: std::time::Duration) -> bool {
        let (lock, signal) = &*self.gate;
        let gate = lock.lock().unwrap();
        let (gate, _) = signal
            .wait_timeout_while(gate, timeout, |g| !g.blocked)
            .unwrap();
        gate.blocked
    }

    /// Lets the blocked open (and every later one) through.
    pub fn release(&self) {
        let (lock, signal) = &*self.gate;
        let mut gate = lock.lock().unwrap();
        gate.released = true;
        gate.armed = None;
        signal.notify_all();
    }

    fn pass(&self, path: &Path) {
        let (lock, signal) = &*self.gate;
        let mut gate = lock.lock().unwrap();
        let Some((part, pass)) = gate.armed.clone() else {
            return;
        };
        if !path.to_string_lossy().contains(&part) {
            return;
        }
        if pass > 0 {
            gate.armed = Some((part, pass - 1));
            return;
        }
        gate.blocked = true;
        signal.notify_all();
        let _released = signal.wait_while(gate, |g| !g.released).unwrap();
    }
}

impl DiskLayer for GatedDisk {
    fn inner(&self) -> &dyn Disk {
        self.inner.as_ref()
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        self.pass(path);
        self.inner.open(path, mode)
    }
}

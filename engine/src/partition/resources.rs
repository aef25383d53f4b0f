//! What the partitions of one node share, each with an explicit bound: the open handles of
//! sealed segments (an LRU cache: a sealed segment's `.log` is opened when a read reaches it
//! and closed when it falls out), the open files of active segments
//! ([`super::active_handles`]) and the bytes of unflushed batches all journals hold
//! together.
//!
//! A partition opened on its own (tests, tools) gets private resources sized for one
//! partition; a node attaches its shared ones with [`super::Partition::attach`].

pub use super::active_handles::{ActiveHandles, ActiveStats};
use crate::env::DiskFile;
use crate::metrics::{Histogram, PERSIST_LATENCY_BOUNDS_NANOS};
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Sealed-segment handles a partition on its own keeps open.
pub const PRIVATE_SEALED_HANDLES: usize = 16;
/// A partition on its own holds its own active files only.
pub const PRIVATE_ACTIVE_HANDLES: usize = 1;

/// The resources one partition draws on.
#[derive(Clone)]
pub struct PartitionResources {
    pub handles: HandleCache,
    pub active: ActiveHandles,
    pub journal: JournalBudget,
    /// How long the flushes an append's thresholds trigger take (nanoseconds, bounds
    /// [`PERSIST_LATENCY_BOUNDS_NANOS`]); observation only.
    pub flush_latency: Arc<Histogram>,
}

impl PartitionResources {
    /// Shared by every partition of a node.
    pub fn shared(
        sealed_handles: usize,
        active_handles: usize,
        journal_bytes: u64,
    ) -> PartitionResources {
        PartitionResources {
            handles: HandleCache::new(sealed_handles),
            active: ActiveHandles::new(active_handles),
            journal: JournalBudget::new(journal_bytes),
            flush_latency: Arc::new(Histogram::new(&PERSIST_LATENCY_BOUNDS_NANOS)),
        }
    }

    /// For one partition on its own: its own journal limit is the only one.
    pub fn private() -> PartitionResources {
        Self::shared(PRIVATE_SEALED_HANDLES, PRIVATE_ACTIVE_HANDLES, u64::MAX)
    }
}

/// Which sealed segment a handle reads: the partition (a number the cache gives each log
/// that registers, so a purged partition's new incarnation never meets its predecessor's
/// handles) and the segment's start offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandleKey {
    pub owner: u64,
    pub segment_start: u64,
}

/// Counters, for tests and benches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandleStats {
    pub open: usize,
    pub hits: u64,
    pub opens: u64,
    pub evictions: u64,
}

/// A bounded LRU of open sealed-segment handles, shared by the partitions of a node.
#[derive(Clone)]
pub struct HandleCache {
    inner: Arc<Mutex<Lru>>,
}

struct Lru {
    capacity: usize,
    next_owner: u64,
    tick: u64,
    entries: BTreeMap<HandleKey, (Arc<dyn DiskFile>, u64)>,
    /// Last use → key: the first is the one to evict.
    by_use: BTreeMap<u64, HandleKey>,
    stats: HandleStats,
}

impl HandleCache {
    pub fn new(capacity: usize) -> HandleCache {
        assert!(capacity > 0, "a handle cache holds at least one handle");
        HandleCache {
            inner: Arc::new(Mutex::new(Lru {
                capacity,
                next_owner: 0,
                tick: 0,
                entries: BTreeMap::new(),
                by_use: BTreeMap::new(),
                stats: HandleStats::default(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A number no other log of this cache has.
    pub fn register(&self) -> u64 {
        let mut lru = self.lock();
        lru.next_owner += 1;
        lru.next_owner
    }

    /// The handle for `key`, opened with `open` when the cache does not hold it. The open
    /// runs without the lock, so one slow open does not stall other partitions' reads.
    pub fn get(
        &self,
        key: HandleKey,
        open: impl FnOnce() -> io::Result<Box<dyn DiskFile>>,
    ) -> io::Result<Arc<dyn DiskFile>> {
        if let Some(file) = self.lock().touch(key) {
            return Ok(file);
        }
        let file: Arc<dyn DiskFile> = Arc::from(open()?);
        Ok(self.lock().insert(key, file))
    }

    /// Keeps a handle that is open already (the segment a rotation just sealed).
    pub fn put(&self, key: HandleKey, file: Arc<dyn DiskFile>) {
        self.lock().insert(key, file);
    }

    /// Closes the handle of a segment about to be deleted.
    pub fn forget(&self, key: HandleKey) {
        self.lock().remove(key);
    }

    /// Closes every handle of a log that goes away (closed, removed, purged).
    pub fn forget_owner(&self, owner: u64) {
        let mut lru = self.lock();
        let keys: Vec<HandleKey> = lru
            .entries
            .keys()
            .filter(|k| k.owner == owner)
            .copied()
            .collect();
        for key in keys {
            lru.remove(key);
        }
    }

    pub fn stats(&self) -> HandleStats {
        let lru = self.lock();
        HandleStats {
            open: lru.entries.len(),
            ..lru.stats
        }
    }
}

impl Lru {
    fn touch(&mut self, key: HandleKey) -> Option<Arc<dyn DiskFile>> {
        let tick = self.next_tick();
        let (file, used) = self.entries.get_mut(&key)?;
        let previous = std::mem::replace(used, tick);
        let file = file.clone();
        self.by_use.remove(&previous);
        self.by_use.insert(tick, key);
        self.stats.hits += 1;
        Some(file)
    }

    /// Inserts `file` under `key` (or keeps the one a racing reader put there first),
    /// evicting the least recently used handle when full.
    fn insert(&mut self, key: HandleKey, file: Arc<dyn DiskFile>) -> Arc<dyn DiskFile> {
        if let Some(existing) = self.touch(key) {
            return existing;
        }
        while self.entries.len() >= self.capacity {
            let (_, oldest) = self.by_use.pop_first().expect("a full cache has entries");
            self.entries.remove(&oldest);
            self.stats.evictions += 1;
        }
        let tick = self.next_tick();
        self.entries.insert(key, (file.clone(), tick));
        self.by_use.insert(tick, key);
        self.stats.opens += 1;
        assert!(self.entries.len() <= self.capacity);
        assert_eq!(self.entries.len(), self.by_use.len());
        file
    }

    fn remove(&mut self, key: HandleKey) {
        if let Some((_, used)) = self.entries.remove(&key) {
            self.by_use.remove(&used);
        }
        assert_eq!(self.entries.len(), self.by_use.len());
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }
}

/// The bytes all journals of a node may hold together. A partition reserves a batch's bytes
/// when it admits the batch and releases them when the batch is written to its segment,
/// rolled back, or the partition goes away.
#[derive(Clone)]
pub struct JournalBudget {
    used: Arc<Used>,
    limit: u64,
}

struct Used(AtomicU64);

impl Drop for Used {
    /// Every journal that reserved bytes released them as it dropped: whatever remains when
    /// the last holder goes is a leak that would have shrunk the budget for good.
    fn drop(&mut self) {
        let leaked = *self.0.get_mut();
        if !std::thread::panicking() {
            assert_eq!(leaked, 0, "journal bytes reserved and never released");
        }
    }
}

impl std::ops::Deref for Used {
    type Target = AtomicU64;
    fn deref(&self) -> &AtomicU64 {
        &self.0
    }
}

impl JournalBudget {
    pub fn new(limit: u64) -> JournalBudget {
        JournalBudget {
            used: Arc::new(Used(AtomicU64::new(0))),
            limit,
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// Reserves `bytes`, or returns what the reservation would have made the total.
    pub fn reserve(&self, bytes: u64) -> Result<(), u64> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .map(|_| ())
            .map_err(|used| used.saturating_add(bytes))
    }

    pub fn release(&self, bytes: u64) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        assert!(
            before >= bytes,
            "released {bytes} journal bytes, only {before} were reserved"
        );
    }
}

/// A file with no bytes for the tables' tests: it counts its syncs, and fails them when
/// told.
#[cfg(test)]
pub(super) mod stub {
    use crate::env::DiskFile;
    use std::io::{self, IoSlice};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[derive(Default)]
    pub struct StubFile {
        pub syncs: Arc<AtomicU64>,
        pub fail: bool,
    }

    impl DiskFile for StubFile {
        fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<usize> {
            Ok(0)
        }
        fn write_all_at(&self, _: &[IoSlice<'_>], _: u64) -> io::Result<()> {
            Ok(())
        }
        fn sync_data(&self) -> io::Result<()> {
            self.syncs.fetch_add(1, Ordering::Relaxed);
            match self.fail {
                true => Err(io::Error::other("EIO")),
                false => Ok(()),
            }
        }
        fn len(&self) -> io::Result<u64> {
            Ok(0)
        }
        fn set_len(&self, _: u64) -> io::Result<()> {
            Ok(())
        }
        fn preallocate(&self, _: u64) -> io::Result<bool> {
            Ok(false)
        }
        fn evict_cache(&self) -> io::Result<()> {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::stub::StubFile;
    use super::*;

    fn key(owner: u64, segment_start: u64) -> HandleKey {
        HandleKey {
            owner,
            segment_start,
        }
    }

    fn open_nothing() -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(StubFile::default()))
    }

    #[test]
    fn the_least_recently_used_handle_is_evicted_at_capacity() {
        let cache = HandleCache::new(2);
        cache.get(key(1, 0), open_nothing).unwrap();
        cache.get(key(1, 10), open_nothing).unwrap();
        cache.get(key(1, 0), open_nothing).unwrap(); // 0 is now newer than 10
        cache.get(key(1, 20), open_nothing).unwrap(); // evicts 10
        let stats = cache.stats();
        assert_eq!(
            (stats.open, stats.opens, stats.hits, stats.evictions),
            (2, 3, 1, 1)
        );
        let mut opened = false;
        cache
            .get(key(1, 0), || {
                opened = true;
                open_nothing()
            })
            .unwrap();
        assert!(!opened, "0 was kept");
        cache
            .get(key(1, 10), || {
                opened = true;
                open_nothing()
            })
            .unwrap();
        assert!(opened, "10 was evicted");
    }

    #[test]
    fn forgetting_an_owner_closes_only_its_handles() {
        let cache = HandleCache::new(8);
        let (a, b) = (cache.register(), cache.register());
        assert_ne!(a, b);
        for start in [0, 10, 20] {
            cache.get(key(a, start), open_nothing).unwrap();
        }
        cache.get(key(b, 0), open_nothing).unwrap();
        cache.forget(key(a, 10));
        assert_eq!(cache.stats().open, 3);
        cache.forget_owner(a);
        assert_eq!(cache.stats().open, 1);
    }

    #[test]
    fn an_open_error_is_returned_and_nothing_is_cached() {
        let cache = HandleCache::new(2);
        let failed = cache.get(key(1, 0), || Err(io::Error::other("EIO")));
        assert!(failed.is_err());
        assert_eq!(cache.stats().open, 0);
    }

    #[test]
    fn the_journal_budget_refuses_past_its_limit_and_releases() {
        let budget = JournalBudget::new(100);
        budget.reserve(60).unwrap();
        assert_eq!(budget.reserve(41), Err(101));
        budget.reserve(40).unwrap();
        budget.release(60);
        assert_eq!(budget.used(), 40);
        budget.reserve(60).unwrap();
        assert_eq!(budget.used(), 100);
        budget.release(100);
    }

    #[test]
    #[should_panic(expected = "reserved and never released")]
    fn a_budget_dropped_with_bytes_reserved_is_a_leak() {
        let budget = JournalBudget::new(100);
        budget.reserve(1).unwrap();
        drop(budget);
    }
}

//! The engine's observable figures, as plain atomics a scrape reads: fixed-bucket
//! [`Histogram`]s, [`Counters`] per label, and the sync count of [`counting_disk`]. Recording
//! never allocates, takes a lock or grows anything (a relaxed `fetch_add` or two); a scrape
//! copies them into snapshots ([`HistogramSnapshot`], [`LabeledCounts`]). There is no
//! exporter here: the server turns the snapshots into its `/metrics` text.
//!
//! Nothing recorded here is read back by the engine, so recording changes no decision (and
//! no simulator trace).

use crate::env::{Disk, DiskFile, DiskLayer, FileLayer, OpenMode};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Persist latency buckets (upper bounds, inclusive), in nanoseconds: 100 µs to 10 s,
/// 1–2.5–5 per decade.
pub const PERSIST_LATENCY_BOUNDS_NANOS: [u64; 16] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Sends acknowledged by one group-commit persist: powers of two up to a round's
/// [`crate::node::MAX_DRAIN`] (1024).
pub const GROUP_COMMIT_SENDS_BOUNDS: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// Messages acknowledged by one group-commit persist: powers of four up to 4^10 (1 Mi).
pub const GROUP_COMMIT_MESSAGES_BOUNDS: [u64; 11] = [
    1, 4, 16, 64, 256, 1_024, 4_096, 16_384, 65_536, 262_144, 1_048_576,
];

/// The most bounds a histogram has (its buckets are these plus one for everything above).
pub const MAX_BOUNDS: usize = 24;

/// A histogram over fixed bucket bounds: one counter per bucket (a value lands in the first
/// bucket whose bound is at least it, or the last, unbounded one) and the sum of the values.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    /// `bounds.len() + 1` of them are used: the last used one is the unbounded bucket.
    buckets: [AtomicU64; MAX_BOUNDS + 1],
    sum: AtomicU64,
}

impl Histogram {
    /// A histogram over `bounds` (strictly increasing, at most [`MAX_BOUNDS`] of them).
    pub const fn new(bounds: &'static [u64]) -> Histogram {
        assert!(bounds.len() <= MAX_BOUNDS, "too many histogram bounds");
        let mut i = 1;
        while i < bounds.len() {
            assert!(bounds[i - 1] < bounds[i], "histogram bounds increase");
            i += 1;
        }
        Histogram {
            bounds,
            buckets: [const { AtomicU64::new(0) }; MAX_BOUNDS + 1],
            sum: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: u64) {
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// A duration, in nanoseconds (saturating).
    pub fn observe_duration(&self, duration: Duration) {
        self.observe(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let counts: Vec<u64> = self.buckets[..=self.bounds.len()]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        HistogramSnapshot {
            bounds: self.bounds,
            count: counts.iter().sum(),
            counts,
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// A copy of a [`Histogram`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Upper bounds (inclusive) of every bucket but the last.
    pub bounds: &'static [u64],
    /// Per bucket, not cumulative: `bounds.len() + 1` counts, the last one of the values
    /// above every bound (Prometheus' `+Inf` bucket, once cumulated).
    pub counts: Vec<u64>,
    /// The sum of every value observed.
    pub sum: u64,
    /// Values observed: the sum of `counts` (so the two always agree).
    pub count: u64,
}

impl HistogramSnapshot {
    /// Cumulative counts, as Prometheus' `_bucket{le=...}` series want them: entry `i` counts
    /// values up to `bounds[i]`, the last one every value.
    pub fn cumulative(&self) -> Vec<u64> {
        self.counts
            .iter()
            .scan(0, |total, c| {
                *total += c;
                Some(*total)
            })
            .collect()
    }

    /// The bucket `value` is counted in.
    pub fn bucket_of(&self, value: u64) -> usize {
        self.bounds.partition_point(|&bound| bound < value)
    }
}

/// One counter per label of a fixed table (an enum's `NAMES`, indexed by its `index()`).
#[derive(Debug)]
pub struct Counters<const N: usize> {
    labels: &'static [&'static str],
    counts: [AtomicU64; N],
}

impl<const N: usize> Counters<N> {
    pub const fn new(labels: &'static [&'static str]) -> Counters<N> {
        assert!(labels.len() == N, "one counter per label");
        Counters {
            labels,
            counts: [const { AtomicU64::new(0) }; N],
        }
    }

    pub fn add(&self, index: usize, n: u64) {
        self.counts[index].fetch_add(n, Ordering::Relaxed);
    }

    /// Sets a counter kept elsewhere by its single owner (the groups owner's rebalances).
    pub fn set(&self, index: usize, value: u64) {
        self.counts[index].store(value, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> LabeledCounts {
        LabeledCounts {
            labels: self.labels,
            counts: self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

/// Counts per label: `counts[i]` is `labels[i]`'s. Every label is present (zero included),
/// so the set of series a scrape exports never changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabeledCounts {
    pub labels: &'static [&'static str],
    pub counts: Vec<u64>,
}

impl LabeledCounts {
    /// Every label at zero.
    pub fn zero(labels: &'static [&'static str]) -> LabeledCounts {
        LabeledCounts {
            labels,
            counts: vec![0; labels.len()],
        }
    }

    /// The count of `label` (`None` when the table has no such label).
    pub fn get(&self, label: &str) -> Option<u64> {
        let i = self.labels.iter().position(|l| *l == label)?;
        Some(self.counts[i])
    }

    /// (label, count) pairs, in the table's order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.labels.iter().copied().zip(self.counts.iter().copied())
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// File and directory syncs issued through a [`counting_disk`].
#[derive(Debug, Default)]
pub struct SyncCounts {
    /// `DiskFile::sync_data` calls.
    pub file: AtomicU64,
    /// `Disk::sync_dir` calls.
    pub dir: AtomicU64,
    /// `Disk::sync_all` calls (each shard's one sync of the data root at boot).
    pub all: AtomicU64,
}

/// What a [`counting_disk`] tells as calls are issued (failed ones included).
pub trait DiskTally: Send + Sync + 'static {
    /// What an open file keeps, to name itself when it reports its calls.
    type File: Send + Sync;
    /// A file at `path` was opened through the counting disk.
    fn opened(&self, path: &Path) -> Self::File;
    /// A `sync_data` of an open file.
    fn file_synced(&self, file: &Self::File);
    /// An `evict_cache` of an open file (not told by default).
    fn cache_evicted(&self, _file: &Self::File) {}
    /// A `sync_dir` of `dir`.
    fn dir_synced(&self, dir: &Path);
    /// A `sync_all` of everything under `root`.
    fn all_synced(&self, root: &Path);
}

/// Totals only: an open file keeps nothing.
impl DiskTally for SyncCounts {
    type File = ();
    fn opened(&self, _path: &Path) {}
    fn file_synced(&self, _file: &()) {
        self.file.fetch_add(1, Ordering::Relaxed);
    }
    fn dir_synced(&self, _dir: &Path) {
        self.dir.fetch_add(1, Ordering::Relaxed);
    }
    fn all_synced(&self, _root: &Path) {
        self.all.fetch_add(1, Ordering::Relaxed);
    }
}

/// `disk`, telling `tally` of every `sync_data` (of any file opened through it), every
/// `evict_cache`, every `sync_dir` and every `sync_all` as it is issued (failed ones included). Everything
/// else is passed through unchanged, so the disk behaves exactly as `disk` does.
pub fn counting_disk<T: DiskTally>(disk: Arc<dyn Disk>, tally: Arc<T>) -> Arc<dyn Disk> {
    Arc::new(CountingDisk { inner: disk, tally })
}

struct CountingDisk<T> {
    inner: Arc<dyn Disk>,
    tally: Arc<T>,
}

struct CountingFile<T: DiskTally> {
    inner: Box<dyn DiskFile>,
    tally: Arc<T>,
    file: T::File,
}

impl<T: DiskTally> FileLayer for CountingFile<T> {
    fn inner(&self) -> &dyn DiskFile {
        self.inner.as_ref()
    }
    fn sync_data(&self) -> io::Result<()> {
        self.tally.file_synced(&self.file);
        self.inner.sync_data()
    }
    fn evict_cache(&self) -> io::Result<()> {
        self.tally.cache_evicted(&self.file);
        self.inner.evict_cache()
    }
}

impl<T: DiskTally> DiskLayer for CountingDisk<T> {
    fn inner(&self) -> &dyn Disk {
        self.inner.as_ref()
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(CountingFile {
            inner: self.inner.open(path, mode)?,
            tally: self.tally.clone(),
            file: self.tally.opened(path),
        }))
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.tally.dir_synced(path);
        self.inner.sync_dir(path)
    }
    fn sync_all(&self, root: &Path) -> io::Result<()> {
        self.tally.all_synced(root);
        self.inner.sync_all(root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BOUNDS: [u64; 3] = [10, 100, 1000];

    #[test]
    fn a_value_lands_in_the_first_bucket_whose_bound_holds_it() {
        let h = Histogram::new(&BOUNDS);
        for v in [0, 10, 11, 100, 1000, 1001, u64::MAX / 2] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.counts, vec![2, 2, 1, 2], "bounds are inclusive");
        assert_eq!(s.count, 7);
        assert_eq!(s.sum, 10 + 11 + 100 + 1000 + 1001 + u64::MAX / 2);
        assert_eq!(s.cumulative(), vec![2, 4, 5, 7]);
        assert_eq!(s.bucket_of(100), 1);
        assert_eq!(s.bucket_of(101), 2);
        assert_eq!(s.bucket_of(5000), 3);
    }

    #[test]
    fn the_stated_bounds_fit_and_increase() {
        // `Histogram::new` asserts both, at compile time for a `static`.
        static _LATENCY: Histogram = Histogram::new(&PERSIST_LATENCY_BOUNDS_NANOS);
        static _SENDS: Histogram = Histogram::new(&GROUP_COMMIT_SENDS_BOUNDS);
        static _MESSAGES: Histogram = Histogram::new(&GROUP_COMMIT_MESSAGES_BOUNDS);
        assert_eq!(PERSIST_LATENCY_BOUNDS_NANOS[0], 100_000, "100 µs");
        assert_eq!(PERSIST_LATENCY_BOUNDS_NANOS[15], 10_000_000_000, "10 s");
        assert_eq!(
            *GROUP_COMMIT_SENDS_BOUNDS.last().unwrap(),
            crate::node::MAX_DRAIN as u64
        );
    }

    #[test]
    fn counters_keep_one_count_per_label() {
        static LABELS: [&str; 2] = ["a", "b"];
        let c = Counters::<2>::new(&LABELS);
        c.add(1, 3);
        c.add(0, 1);
        c.add(1, 2);
        let s = c.snapshot();
        assert_eq!(s.get("a"), Some(1));
        assert_eq!(s.get("b"), Some(5));
        assert_eq!(s.get("c"), None);
        assert_eq!(s.total(), 6);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![("a", 1), ("b", 5)]);
        c.set(0, 9);
        assert_eq!(c.snapshot().get("a"), Some(9));
    }
}

//! `cargo bench -p cairn-engine --bench append`
//!
//! Appends 1000-byte messages in batches of 1000 to one partition on the real disk, under
//! `replicated` and `persisted`, and in the same run writes the same bytes to a plain file
//! with positional writes (no sync for the `replicated` baseline, one `fdatasync` per batch
//! for the `persisted` one). Prints, per policy:
//!
//! ```text
//! ratio append_<policy> <cairn MB/s / baseline MB/s>
//! append_<policy> cairn_mb_per_s=<..> baseline_mb_per_s=<..>
//! ```
//!
//! Then the shape where a persist's fixed cost shows: `persisted` 1-message batches of 1000
//! bytes, one persist each, against a plain file with one `fdatasync` per message, with what
//! each persist costs in disk calls:
//!
//! ```text
//! append_persisted_1msg cairn_msg_per_s=<..> baseline_msg_per_s=<..> ratio=<..> p50_us=<..> p99_us=<..> syncs_per_persist=<..> device_reads_per_persist=<..> opens_per_persist=<..>
//! ```
//!
//! (`syncs` counts `fdatasync` of any file and `fsync` of a directory; a device read is a
//! read after the file's cached pages were dropped; an open is a file opened.)
//!
//! Each side runs `ROUNDS` times, interleaved, and the median is reported, so a burst of
//! noise on this shared machine hits both sides alike. Environment: `CAIRN_BENCH_DIR`
//! (where files go; default the system temp dir), `CAIRN_BENCH_BATCHES` (batches per round).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use bytes::BytesMut;
use cairn_engine::config::{Durability, PartitionSettings, TopicConfig};
use cairn_engine::env::{real, Disk, DiskFile, DiskLayer, FileLayer, OpenMode};
use cairn_engine::format::BatchBuilder;
use cairn_engine::partition::{Partition, PartitionIdentity};
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The allocator of the `cairn` binary, so the engine runs here as it runs in production.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MESSAGES_PER_BATCH: usize = 1000;
const MESSAGE_BYTES: usize = 1000;
const ROUNDS: usize = 5;

fn producer_batch(seed: u64) -> BytesMut {
    let mut builder = BatchBuilder::new(1_764_000_000_000_000);
    let mut payload = vec![0u8; MESSAGE_BYTES];
    for i in 0..MESSAGES_PER_BATCH {
        let x = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(i as u64);
        for (j, b) in payload.iter_mut().enumerate() {
            *b = (x >> (j % 8 * 8)) as u8 ^ j as u8;
        }
        builder.push(u128::from(seed) << 64 | i as u128, 0, &payload, b"");
    }
    builder.build()
}

fn cairn_round(dir: &Path, durability: Durability, batches: &[BytesMut]) -> f64 {
    let env = real::env().expect("runtime");
    let config = TopicConfig {
        durability,
        ..TopicConfig::default()
    };
    let mut partition = Partition::create(
        &env,
        dir,
        PartitionIdentity::bare(0),
        config,
        PartitionSettings::default(),
    )
    .expect("create");
    let inputs: Vec<BytesMut> = batches.to_vec();
    let bytes: usize = inputs.iter().map(|b| b.len()).sum();
    let started = Instant::now();
    for batch in inputs {
        match durability {
            Durability::Replicated => {
                partition.append(batch).expect("append");
            }
            Durability::Persisted => {
                let ack = partition
                    .append_group(vec![batch])
                    .pop()
                    .unwrap()
                    .expect("append");
                assert!(ack.durable);
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    partition.close().expect("close");
    bytes as f64 / elapsed / 1e6
}

fn baseline_round(path: &Path, sync: bool, batches: &[BytesMut]) -> f64 {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .expect("open baseline file");
    let bytes: usize = batches.iter().map(|b| b.len()).sum();
    let started = Instant::now();
    let mut position = 0u64;
    for batch in batches {
        file.write_all_at(batch, position).expect("write");
        position += batch.len() as u64;
        if sync {
            file.sync_data().expect("fdatasync");
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    bytes as f64 / elapsed / 1e6
}

/// Syncs and device reads made through it (a read of a file whose cache was dropped).
#[derive(Default)]
struct Counts {
    syncs: AtomicU64,
    device_reads: AtomicU64,
    opens: AtomicU64,
}

/// Disk calls per persist.
#[derive(Clone, Copy, Default)]
struct PerPersist {
    syncs: f64,
    reads: f64,
    opens: f64,
}

impl Counts {
    fn now(&self) -> [u64; 3] {
        [&self.syncs, &self.device_reads, &self.opens].map(|c| c.load(Ordering::Relaxed))
    }

    fn per_persist(&self, before: [u64; 3], persists: f64) -> PerPersist {
        let [syncs, reads, opens] = self.now().map(|n| n as f64);
        PerPersist {
            syncs: (syncs - before[0] as f64) / persists,
            reads: (reads - before[1] as f64) / persists,
            opens: (opens - before[2] as f64) / persists,
        }
    }
}

struct CountingDisk {
    inner: Arc<dyn Disk>,
    counts: Arc<Counts>,
}

struct CountingFile {
    inner: Box<dyn DiskFile>,
    counts: Arc<Counts>,
    evicted: std::sync::atomic::AtomicBool,
}

impl DiskLayer for CountingDisk {
    fn inner(&self) -> &dyn Disk {
        self.inner.as_ref()
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        self.counts.opens.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(CountingFile {
            inner: self.inner.open(path, mode)?,
            counts: self.counts.clone(),
            evicted: Default::default(),
        }))
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.counts.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_dir(path)
    }
}

impl FileLayer for CountingFile {
    fn inner(&self) -> &dyn DiskFile {
        self.inner.as_ref()
    }
    fn sync_data(&self) -> io::Result<()> {
        self.counts.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_data()
    }
    fn evict_cache(&self) -> io::Result<()> {
        self.evicted.store(true, Ordering::Relaxed);
        self.inner.evict_cache()
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        if self.evicted.swap(false, Ordering::Relaxed) {
            self.counts.device_reads.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.read_at(buf, pos)
    }
    fn read_exact_owned(&self, len: usize, pos: u64) -> io::Result<bytes::BytesMut> {
        cairn_engine::env::layer::owned_through_read_at(self, len, pos)
    }
}

/// One round of 1-message persists: msg/s, each persist's latency (µs), and the disk calls
/// the persists made.
fn cairn_one_message_round(dir: &Path, messages: &[BytesMut]) -> (f64, Vec<f64>, PerPersist) {
    let mut env = real::env().expect("runtime");
    let counts = Arc::new(Counts::default());
    env.disk = Arc::new(CountingDisk {
        inner: env.disk.clone(),
        counts: counts.clone(),
    });
    let config = TopicConfig {
        durability: Durability::Persisted,
        ..TopicConfig::default()
    };
    let identity = PartitionIdentity::bare(0);
    let settings = PartitionSettings::default();
    let mut partition = Partition::create(&env, dir, identity, config, settings).expect("create");
    let before = counts.now();
    let mut latencies = Vec::with_capacity(messages.len());
    let started = Instant::now();
    for message in messages.iter().cloned() {
        let sent = Instant::now();
        let ack = partition
            .append_group(vec![message])
            .pop()
            .unwrap()
            .expect("append");
        assert!(ack.durable);
        latencies.push(sent.elapsed().as_secs_f64() * 1e6);
    }
    let rate = messages.len() as f64 / started.elapsed().as_secs_f64();
    let calls = counts.per_persist(before, messages.len() as f64);
    partition.close().expect("close");
    (rate, latencies, calls)
}

fn one_message(seed: u64) -> BytesMut {
    let mut builder = BatchBuilder::new(1_764_000_000_000_000);
    builder.push(u128::from(seed), 0, &[seed as u8; MESSAGE_BYTES], b"");
    builder.build()
}

fn percentile(mut values: Vec<f64>, q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * q).round() as usize]
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values[values.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; accept and ignore harness flags.
    let root: PathBuf = std::env::var_os("CAIRN_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let count: usize = std::env::var("CAIRN_BENCH_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    let batches: Vec<BytesMut> = (0..count as u64).map(producer_batch).collect();
    for (name, durability, sync) in [
        ("replicated", Durability::Replicated, false),
        ("persisted", Durability::Persisted, true),
    ] {
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for _ in 0..ROUNDS {
            let dir = tempfile::tempdir_in(&root).expect("temp dir");
            theirs.push(baseline_round(
                &dir.path().join("baseline.log"),
                sync,
                &batches,
            ));
            ours.push(cairn_round(
                &dir.path().join("partition"),
                durability,
                &batches,
            ));
        }
        let (ours, theirs) = (median(ours), median(theirs));
        println!("ratio append_{name} {:.3}", ours / theirs);
        println!("append_{name} cairn_mb_per_s={ours:.1} baseline_mb_per_s={theirs:.1}");
    }
    let messages: Vec<BytesMut> = (0..2000u64).map(one_message).collect();
    let (mut ours, mut theirs, mut latencies) = (Vec::new(), Vec::new(), Vec::new());
    let mut calls = PerPersist::default();
    for _ in 0..ROUNDS {
        let dir = tempfile::tempdir_in(&root).expect("temp dir");
        // Messages per second: the baseline's bytes per second over one message's bytes.
        let one = messages[0].len() as f64 / 1e6;
        theirs.push(baseline_round(&dir.path().join("baseline.log"), true, &messages) / one);
        let (rate, round, per_persist) =
            cairn_one_message_round(&dir.path().join("partition"), &messages);
        ours.push(rate);
        latencies.extend(round);
        calls = per_persist;
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "append_persisted_1msg cairn_msg_per_s={ours:.0} baseline_msg_per_s={theirs:.0} ratio={:.3} p50_us={:.0} p99_us={:.0} syncs_per_persist={:.2} device_reads_per_persist={:.2} opens_per_persist={:.2}",
        ours / theirs,
        percentile(latencies.clone(), 0.5),
        percentile(latencies, 0.99),
        calls.syncs,
        calls.reads,
        calls.opens,
    );
}

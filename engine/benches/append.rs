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
//! Each side runs `ROUNDS` times, interleaved, and the median is reported, so a burst of
//! noise on this shared machine hits both sides alike. Environment: `CAIRN_BENCH_DIR`
//! (where files go; default the system temp dir), `CAIRN_BENCH_BATCHES` (batches per round).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use bytes::BytesMut;
use cairn_engine::config::{Durability, PartitionSettings, TopicConfig};
use cairn_engine::env::real;
use cairn_engine::format::BatchBuilder;
use cairn_engine::partition::{Partition, PartitionIdentity};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
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
}

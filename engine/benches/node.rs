//! `cargo bench -p cairn-engine --bench node`
//!
//! Group commit across callers, on real files: a node with one `persisted` topic of 2
//! partitions; `CALLERS` concurrent callers (tasks on the node's runtime, each its own
//! client) each send 1-message batches of 1000-byte payloads, one at a time; then, against a
//! fresh node in the same run, one caller alone. Every `fdatasync` the node makes is
//! counted. Prints the single caller's latency, then as its last line:
//!
//! ```text
//! node persisted callers=64 partitions=2 msg_per_s=<x> single_caller_msg_per_s=<y> ratio=<x/y> syncs_per_ack=<z>
//! ```
//!
//! Each side runs `ROUNDS` times, interleaved, and medians are reported. Environment:
//! `CAIRN_BENCH_DIR` (where files go; default the system temp dir), `CAIRN_BENCH_SENDS`
//! (sends per caller in the concurrent runs; the single caller sends as many messages as
//! `CAIRN_BENCH_SINGLE`).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use cairn_engine::env::chan;
use cairn_engine::env::real::{self, block_on, RealDisk};
use cairn_engine::format::BatchBuilder;
use cairn_engine::metrics::{counting_disk, SyncCounts};
use cairn_engine::node::{Node, NodeSettings, PasswordCost};
use iggy_binary_protocol::{WireIdentifier, WireOptions, WirePartitioning};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CALLERS: usize = 64;
const PARTITIONS: u32 = 2;
const PAYLOAD: usize = 1000;
const ROUNDS: usize = 3;

fn message(caller: usize, i: usize) -> bytes::BytesMut {
    let mut builder = BatchBuilder::new(1_764_000_000_000_000);
    let mut payload = vec![0u8; PAYLOAD];
    for (j, b) in payload.iter_mut().enumerate() {
        *b = (caller * 31 + i * 7 + j) as u8;
    }
    builder.push((caller as u128) << 64 | i as u128, 0, &payload, b"");
    builder.build()
}

/// What one run measured.
struct Run {
    messages: u64,
    seconds: f64,
    syncs: u64,
    /// Each send's latency, in microseconds.
    latencies: Vec<u64>,
}

/// `callers` concurrent callers, each sending `sends` one-message batches, on a fresh node.
fn run(dir: &Path, callers: usize, sends: usize) -> Run {
    let mut env = real::env().expect("runtime");
    // The real disk, counting every `fdatasync`.
    let syncs = Arc::new(SyncCounts::default());
    env.disk = counting_disk(Arc::new(RealDisk), syncs.clone());
    let settings = NodeSettings {
        password_cost: PasswordCost::CHEAP,
        ..Default::default()
    };
    let node = block_on(Node::start(&env, dir, settings))
        .expect("boot")
        .node;
    let admin = node.client(1);
    let id = WireIdentifier::numeric;
    let mut options = bytes::BytesMut::new();
    iggy_binary_protocol::encode_user_headers(&[(2, b"durability", 2, b"persisted")], &mut options);
    let options = WireOptions::from_bytes(options.freeze()).expect("options");
    block_on(admin.create_stream("bench")).expect("stream");
    block_on(admin.create_topic(&id(0), "t", PARTITIONS, options)).expect("topic");
    let before = syncs.file.load(Ordering::Relaxed);
    let (done_tx, mut done_rx) = chan::channel::<Vec<u64>>(callers);
    let started = Instant::now();
    for caller in 0..callers {
        let client = node.client(100 + caller as u128);
        let done = done_tx.clone();
        env.tasks.spawn(Box::pin(async move {
            let mut latencies = Vec::with_capacity(sends);
            for i in 0..sends {
                let sent_at = Instant::now();
                let partition = (caller as u32 + i as u32) % PARTITIONS;
                let sent = client
                    .send(
                        &id(0),
                        &id(0),
                        &WirePartitioning::PartitionId(partition),
                        message(caller, i),
                    )
                    .await
                    .expect("send");
                assert!(sent.ack.durable);
                latencies.push(sent_at.elapsed().as_micros() as u64);
            }
            let _ = done.send(latencies).await;
        }));
    }
    drop(done_tx);
    let mut latencies = Vec::new();
    block_on(async {
        while let Some(l) = done_rx.recv().await {
            latencies.extend(l);
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    let syncs = syncs.file.load(Ordering::Relaxed) - before;
    block_on(node.shutdown()).expect("shutdown");
    Run {
        messages: (callers * sends) as u64,
        seconds,
        syncs,
        latencies,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).expect("a number"));
    values[values.len() / 2]
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn main() {
    let base = std::env::var("CAIRN_BENCH_DIR").map_or_else(|_| std::env::temp_dir(), Into::into);
    let sends: usize = std::env::var("CAIRN_BENCH_SENDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let single: usize = std::env::var("CAIRN_BENCH_SINGLE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    let (mut many, mut one, mut syncs_per_ack, mut latencies) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir_in(&base).expect("temp dir");
        let concurrent = run(&dir.path().join("many"), CALLERS, sends);
        let alone = run(&dir.path().join("one"), 1, single);
        let rate = |r: &Run| r.messages as f64 / r.seconds;
        println!(
            "round {round}: callers={CALLERS} msg_per_s={:.0} syncs={} acks={} | single caller msg_per_s={:.0} syncs={}",
            rate(&concurrent),
            concurrent.syncs,
            concurrent.messages,
            rate(&alone),
            alone.syncs
        );
        many.push(rate(&concurrent));
        one.push(rate(&alone));
        syncs_per_ack.push(concurrent.syncs as f64 / concurrent.messages as f64);
        latencies.extend(alone.latencies);
    }
    latencies.sort_unstable();
    println!(
        "single caller latency: p50={}us p99={}us ({} sends)",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        latencies.len()
    );
    let (x, y) = (median(many), median(one));
    println!(
        "node persisted callers={CALLERS} partitions={PARTITIONS} msg_per_s={x:.0} single_caller_msg_per_s={y:.0} ratio={:.2} syncs_per_ack={:.3}",
        x / y,
        median(syncs_per_ack)
    );
}

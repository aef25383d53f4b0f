//! The simulator inside plain `cargo test`: every seed in `seeds/` replayed, a bounded swarm
//! of fresh seeds, and determinism (same seed, same trace hash).
// Test driver, outside the simulated world: it reads the seed corpus from the real file system
// and runs seeds on real threads (each seed is itself single-threaded and deterministic).
#![allow(clippy::disallowed_methods)]

use cairn_sim::run::RunReport;
use cairn_sim::run_seed;
use std::path::PathBuf;

/// Seeds of the bounded swarm that `cargo test` runs (the harness runs many more).
const SWARM_SEEDS: u64 = 300;
/// Where the bounded swarm starts, away from the seeds the corpus already pins.
const SWARM_START: u64 = 1_000_000;

fn failure_text(report: &RunReport) -> Option<String> {
    report.violation.as_ref().map(|v| {
        format!(
            "seed {:#x}: {v}\n  replay: {}",
            report.profile.seed,
            report.replay_command(None)
        )
    })
}

/// Runs seeds on two threads (the CI machine's cores); returns the failures.
fn run_many(seeds: Vec<u64>) -> Vec<String> {
    let chunks: Vec<Vec<u64>> = seeds
        .chunks(seeds.len().div_ceil(2).max(1))
        .map(<[u64]>::to_vec)
        .collect();
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            std::thread::spawn(move || {
                chunk
                    .into_iter()
                    .filter_map(|seed| failure_text(&run_seed(seed, false)))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("swarm thread"))
        .collect()
}

fn corpus() -> Vec<(PathBuf, u64)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../seeds");
    let mut seeds = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("seeds/ exists") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "seed") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read seed file");
        let first = text.lines().next().unwrap_or_default();
        let hex = first
            .strip_prefix("seed 0x")
            .unwrap_or_else(|| panic!("{}: first line must be `seed 0x<hex>`", path.display()));
        let seed = u64::from_str_radix(hex.trim(), 16).expect("hex seed");
        seeds.push((path, seed));
    }
    seeds.sort();
    seeds
}

#[test]
fn every_seed_that_ever_failed_passes() {
    let seeds = corpus();
    assert!(
        !seeds.is_empty(),
        "the corpus holds the seeds that once failed"
    );
    let failures = run_many(seeds.iter().map(|(_, s)| *s).collect());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bounded_swarm_finds_no_violation() {
    let failures = run_many((SWARM_START..SWARM_START + SWARM_SEEDS).collect());
    assert!(
        failures.is_empty(),
        "{} failing seeds:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_seed_replays_to_the_same_trace_and_seeds_differ() {
    let a = run_seed(0x1f2e_3d4c, false);
    let b = run_seed(0x1f2e_3d4c, false);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.operations, b.operations);
    assert_eq!(a.faults_fired, b.faults_fired);
    let c = run_seed(0x1f2e_3d4d, false);
    assert_ne!(a.trace_hash, c.trace_hash);
}

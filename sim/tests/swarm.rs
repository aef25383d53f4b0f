//! The simulator inside plain `cargo test`: every seed in `seeds/` replayed, a bounded swarm
//! of fresh seeds whose coverage is asserted (a fault kind or recovery outcome that stops
//! firing fails the test: the swarm would be testing less than it claims), and determinism
//! (same seed, same trace hash).
// Test driver, outside the simulated world: it reads the seed corpus from the real file system
// and runs seeds on real threads (each seed is itself single-threaded and deterministic).
#![allow(clippy::disallowed_methods)]

use cairn_engine::partition::Outcome;
use cairn_faults::FaultKind;
use cairn_sim::run::RunReport;
use cairn_sim::run_seed;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Seeds of the bounded swarm that `cargo test` runs (the harness runs many more).
const SWARM_SEEDS: u64 = 600;
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

/// Runs seeds on two threads (the CI machine's cores).
fn run_many(seeds: Vec<u64>) -> Vec<RunReport> {
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
                    .map(|seed| run_seed(seed, false))
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
    let failures: Vec<String> = run_many(seeds.iter().map(|(_, s)| *s).collect())
        .iter()
        .filter_map(failure_text)
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bounded_swarm_finds_no_violation_and_reaches_every_fault_and_outcome() {
    let reports = run_many((SWARM_START..SWARM_START + SWARM_SEEDS).collect());
    let failures: Vec<String> = reports.iter().filter_map(failure_text).collect();
    assert!(
        failures.is_empty(),
        "{} failing seeds:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let fired: BTreeSet<FaultKind> = reports
        .iter()
        .flat_map(|r| r.faults_fired.keys().copied())
        .collect();
    let reached: BTreeSet<Outcome> = reports
        .iter()
        .flat_map(|r| r.outcomes.keys().copied())
        .collect();
    // Only directed scenarios replace bytes from outside the node.
    let silent: Vec<FaultKind> = FaultKind::ALL
        .into_iter()
        .filter(|k| *k != FaultKind::Overwritten && !fired.contains(k))
        .collect();
    assert!(
        silent.is_empty(),
        "fault kinds that never fired: {silent:?}"
    );
    let unreached: Vec<Outcome> = Outcome::ALL
        .into_iter()
        .filter(|o| !reached.contains(o))
        .collect();
    assert!(
        unreached.is_empty(),
        "recovery outcomes never reached: {unreached:?}"
    );
    assert!(
        reports.iter().any(|r| r.crashes_in_recovery > 0),
        "no crash inside recovery"
    );
    assert!(
        reports.iter().any(|r| r.boot_retries > 0),
        "no boot retried"
    );
    // The node scope's rows: every one fires in some seed of the bounded swarm.
    let silent_rows: Vec<&str> = cairn_sim::node_world::NODE_COVERAGE
        .iter()
        .map(|(row, _)| *row)
        .filter(|row| !reports.iter().any(|r| r.decisions.contains_key(row)))
        .collect();
    assert!(
        silent_rows.is_empty(),
        "node coverage rows that never fired: {silent_rows:?}"
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
    // A node-scope seed replays too.
    let node_seed = (0u64..)
        .find(|s| cairn_sim::profile::Scope::of(*s) == cairn_sim::profile::Scope::Node)
        .expect("some seed is a node's");
    let d = run_seed(node_seed, false);
    let e = run_seed(node_seed, false);
    assert_eq!(d.trace_hash, e.trace_hash);
    assert_eq!(d.operations, e.operations);
    assert!(d.operations > 0, "the node scope ran its workload");
}

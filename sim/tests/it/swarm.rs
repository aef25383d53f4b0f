//! The simulator inside plain `cargo test`: every seed in `seeds/` replayed, a bounded swarm
//! of fresh seeds whose coverage is asserted (a fault kind or recovery outcome that stops
//! firing fails the test: the swarm would be testing less than it claims), and determinism
//! (same seed, same trace hash).
// Test driver, outside the simulated world: it reads the seed corpus from the real file system
// and runs seeds on real threads (each seed is itself single-threaded and deterministic).
#![allow(clippy::disallowed_methods)]

use cairn_engine::partition::Outcome;
use cairn_faults::FaultKind;
use cairn_sim::profile::Scope;
use cairn_sim::run::RunReport;
use cairn_sim::{run_seed, run_seed_with, RunOptions};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Seeds of the bounded swarm that `cargo test` runs (the harness runs many more): enough
/// that every coverage row fires. The rarest, `ClusterAdoptionRemoved` (10 seeds in 2,000),
/// first fires past the 700th since the reads moved off the owners shifted the schedules.
const SWARM_SEEDS: u64 = 800;
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
    run_many_in(seeds.into_iter().map(|s| (s, None)).collect())
}

/// Runs seeds, each in its pinned scope if it has one, on two threads.
fn run_many_in(seeds: Vec<(u64, Option<Scope>)>) -> Vec<RunReport> {
    let chunks: Vec<Vec<(u64, Option<Scope>)>> = seeds
        .chunks(seeds.len().div_ceil(2).max(1))
        .map(<[(u64, Option<Scope>)]>::to_vec)
        .collect();
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            std::thread::spawn(move || {
                chunk
                    .into_iter()
                    .map(|(seed, scope)| {
                        run_seed_with(
                            seed,
                            RunOptions {
                                scope,
                                ..RunOptions::default()
                            },
                        )
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("swarm thread"))
        .collect()
}

/// The corpus: each file's seed, and the scope it pins (`scope <name>`: a seed found in a
/// scope keeps it when the draw of scopes changes).
fn corpus() -> Vec<(PathBuf, u64, Option<Scope>)> {
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
        let scope = text
            .lines()
            .find_map(|l| l.strip_prefix("scope "))
            .map(|name| {
                Scope::parse(name.trim())
                    .unwrap_or_else(|| panic!("{}: unknown scope {name:?}", path.display()))
            });
        seeds.push((path, seed, scope));
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
    let failures: Vec<String> =
        run_many_in(seeds.iter().map(|(_, s, scope)| (*s, *scope)).collect())
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
    // The node, server and cluster scopes' rows: every one fires in some seed of the
    // bounded swarm.
    let silent = |rows: &[(&'static str, &str)]| -> Vec<&'static str> {
        rows.iter()
            .map(|(row, _)| *row)
            .filter(|row| !reports.iter().any(|r| r.decisions.contains_key(row)))
            .collect()
    };
    let node = silent(&cairn_sim::node_world::NODE_COVERAGE);
    assert!(
        node.is_empty(),
        "node coverage rows that never fired: {node:?}"
    );
    let server = silent(&cairn_sim::server_world::SERVER_COVERAGE);
    assert!(
        server.is_empty(),
        "server coverage rows that never fired: {server:?}"
    );
    let cluster = silent(&cairn_sim::cluster_world::CLUSTER_COVERAGE);
    assert!(
        cluster.is_empty(),
        "cluster coverage rows that never fired: {cluster:?}"
    );
}

#[test]
fn a_server_seed_replays_to_the_same_trace_with_or_without_its_timeline() {
    let seed = (0u64..)
        .find(|s| Scope::of(*s) == Scope::Server)
        .expect("some seed is a server's");
    let a = run_seed(seed, false);
    let b = run_seed_with(
        seed,
        RunOptions {
            timeline: true,
            ..RunOptions::default()
        },
    );
    assert_eq!(
        a.trace_hash, b.trace_hash,
        "recording the timeline changed the run"
    );
    assert_eq!(a.operations, b.operations);
    assert!(
        a.operations > 0 && a.acked_messages > 0,
        "the server scope ran its workload"
    );
    let timeline = b.timeline.expect("a timeline was asked for");
    assert!(timeline.lanes.iter().any(|l| l.name == "admin"));
    assert!(timeline
        .lanes
        .iter()
        .any(|l| l.name.starts_with("partition ")));
    assert!(timeline.spans.len() as u64 >= a.operations);
    let svg = cairn_sim::timeline::render_svg(&timeline);
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"));
    assert!(svg.contains("admin") && svg.contains("producer 1"));
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

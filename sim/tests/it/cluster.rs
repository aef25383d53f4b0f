//! The cluster world: seeds of the metadata consensus group under crashes, power losses and
//! partitions, each judged by its oracle, and replayed bit for bit.

use cairn_sim::cluster_world;

/// Seeds every `cargo test` runs (a bounded sample); `CAIRN_CLUSTER_SEEDS=A..B` runs others.
fn seeds() -> std::ops::Range<u64> {
    std::env::var("CAIRN_CLUSTER_SEEDS")
        .ok()
        .and_then(|r| {
            let (a, b) = r.split_once("..")?;
            Some(a.parse().ok()?..b.parse().ok()?)
        })
        .unwrap_or(1..25)
}

#[test]
fn cluster_seeds_hold_their_invariants() {
    let mut failures = Vec::new();
    let (mut acknowledged, mut crashes) = (0, 0);
    for seed in seeds() {
        eprintln!("cluster seed {seed}");
        let report = cluster_world::run(seed, std::env::var_os("CAIRN_CLUSTER_VERBOSE").is_some());
        acknowledged += report.acknowledged;
        crashes += report.crashes;
        if let Some(v) = &report.violation {
            failures.push(format!("seed {seed}: {v}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The sample did something: operations went through and replicas crashed under them.
    assert!(acknowledged > 200, "only {acknowledged} ops acknowledged");
    assert!(crashes > 5, "only {crashes} crashes");
}

#[test]
fn a_cluster_seed_replays_bit_for_bit() {
    let a = cluster_world::run(7, false);
    let b = cluster_world::run(7, false);
    assert_eq!(a.events, b.events);
    assert!(a.events.len() > 20, "the run did little: {:?}", a.events);
}

//! Every deliberate bug (`cairn_sim::canary`) is caught in `cargo test`: for each canary,
//! the directed scenarios (the partition world's, the cluster world's, and for the node
//! owners' and the read plan's canaries the node world's) run with it active; when none of
//! them catches it as it must be caught, swarm seeds from a fixed start run until the first
//! violation. The test fails unless each canary is caught, and prints which
//! invariant caught it where.
// Test driver outside the simulated world: real threads run canaries side by side (each
// seed is single-threaded and deterministic; a canary is active per thread).
#![allow(clippy::disallowed_methods)]

use cairn_sim::directed::SCENARIOS;
use cairn_sim::run_seed;
use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Swarm seeds tried per canary (the first violation stops the search). The rarest,
/// `adoption-work-forgotten` (it needs a node's adoption of a leader's state cut short),
/// is first caught at seed 5,001,338.
const MAX_SEEDS: u64 = 1600;
const SWARM_START: u64 = 5_000_000;

/// The server's, the cluster's and some of the node's canaries, and the invariants each
/// must be caught by:
/// any violation would do for "caught", but one from another cause would mean the oracle
/// misfires.
const EXPECTED: [(&str, &[&str]); 23] = [
    // A `persisted` poll that read a send before it was durable: a read is a promise
    // like an acknowledgement, broken when a crash takes the send back (or at once, where
    // the model knows the send is only journaled); over the wire, the poll reports an end
    // past every send acknowledged (S7).
    (
        "read-above-visible",
        &[
            cairn_sim::report::INV_NO_LOSS,
            cairn_sim::server_world::ends::INV_ENDS,
        ],
    ),
    // Damage in a batch a skip stopped at, served to the consumer as it is.
    ("serve-unverified-skip", &[cairn_sim::report::INV_EXACT]),
    // A `persisted` offset store answered before its directory sync: a power loss takes
    // the rename back, and the offset reads as before the store it was told of.
    (
        "ack-offset-before-dir-sync",
        &[cairn_sim::report::INV_OFFSETS],
    ),
    // A send acknowledged from cached WALs is lost with them (a total power loss), or the
    // WALs that lost synced bytes refuse to open (no fault here damages a disk).
    (
        "part-wal-unsynced",
        &[
            cairn_sim::cluster_world::INV_MESSAGE_LOST,
            cairn_sim::cluster_world::INV_BOOT,
        ],
    ),
    (
        "part-stamp-local-clock",
        &[cairn_sim::cluster_world::INV_MESSAGES_AGREE],
    ),
    // A replica that skipped the batches below a checkpoint holds other messages than its
    // peers at those offsets (the next ones, or none where they acknowledged one).
    (
        "part-refill-hole",
        &[
            cairn_sim::cluster_world::INV_MESSAGES_AGREE,
            cairn_sim::cluster_world::INV_MESSAGE_LOST,
        ],
    ),
    // A send a replica took before it committed, which a later leader discarded, holds
    // offsets where its peers store the committed ones (or none).
    (
        "part-apply-uncommitted",
        &[
            cairn_sim::cluster_world::INV_MESSAGES_AGREE,
            cairn_sim::cluster_world::INV_MESSAGE_LOST,
        ],
    ),
    // A sleeping group's followers that never wake elect no leader once their leader's
    // member is gone: no send goes through.
    ("part-quiet-deaf", &[cairn_sim::report::INV_LIVENESS]),
    // An offset kept by the member asked only: the other replicas hold another (or none),
    // or, where the member asked was the only one, a later write through another member
    // leaves the first one's replica behind.
    (
        "part-offsets-local",
        &[
            cairn_sim::cluster_world::INV_OFFSETS_AGREE,
            cairn_sim::cluster_world::INV_OFFSET_LOST,
        ],
    ),
    (
        "vote-after-lost-state",
        &[cairn_sim::cluster_world::INV_AGREEMENT],
    ),
    ("blank-counted", &[cairn_sim::cluster_world::INV_AGREEMENT]),
    // What a replica applied that no one committed shows as a different entry at an index
    // another replica applied, or, where none did, as a state the others never reach; where
    // a node applies the commands, also as a client answered "applied before" for an entry
    // its node took early; and as a fresh read there missing the committed entry in whose
    // place it applied the uncommitted one.
    (
        "apply-uncommitted",
        &[
            cairn_sim::cluster_world::INV_AGREEMENT,
            cairn_sim::cluster_world::INV_CONVERGED,
            cairn_sim::cluster_world::INV_UNASKED,
            cairn_sim::cluster_world::INV_FRESH,
        ],
    ),
    // An op applied twice answers its client that the name it asked for was taken.
    ("retry-rekeyed", &[cairn_sim::cluster_world::INV_UNASKED]),
    ("read-stale", &[cairn_sim::cluster_world::INV_FRESH]),
    // An adoption taken as done at boot fences what it created or purged (never made),
    // and leaves on disk what it removed.
    (
        "adoption-work-forgotten",
        &[
            cairn_sim::cluster_world::INV_BOOT,
            cairn_sim::cluster_world::INV_NODE_HOLDS,
        ],
    ),
    // A send answered with another partition's persist, whose own then failed (or never
    // ran before a crash), is not in its log.
    ("ack-with-first-persist", &[cairn_sim::report::INV_NO_LOSS]),
    // A send answered when the record before its group returned, its own log sync still
    // out: a power loss before that sync ran takes it (1, S1), or a client polls and finds
    // the end it was told of not yet there (S7: nothing names its bytes durable yet).
    (
        "ack-before-log-sync",
        &[
            cairn_sim::report::INV_NO_LOSS,
            cairn_sim::server_world::oracle::INV_ACKED,
            cairn_sim::server_world::ends::INV_ENDS,
        ],
    ),
    (
        "ack-send-before-shard",
        &[cairn_sim::server_world::oracle::INV_ACKED],
    ),
    (
        "dedup-wrong-reply",
        &[cairn_sim::server_world::oracle::INV_DEDUP],
    ),
    (
        "session-outlives-user",
        &[cairn_sim::server_world::oracle::INV_REVOKED],
    ),
    ("bodies-unbudgeted", &[cairn_sim::server_world::INV_BUDGET]),
    // What a boot served from the cache, never synced: a send the process before wrote
    // and a boot served is gone after a power loss, or an offset reads older than served.
    (
        "skip-deferred-sync",
        &[
            cairn_sim::report::INV_NO_LOSS,
            cairn_sim::report::INV_OFFSETS,
        ],
    ),
    // A boot that read the page cache as it was after an unclean exit of the same kernel:
    // judged against how the node world's process ended, or, in the partition world, the
    // bytes a failed writeback left cached and recovery took for durable are gone or wrong
    // after the next power loss (a fence or a truncation nothing explains).
    (
        "trust-unclean-exit",
        &[
            cairn_sim::report::INV_JUSTIFIED,
            cairn_sim::report::INV_NO_LOSS,
        ],
    ),
];

/// Whether `caught` holds a catch as it must be: by a named invariant (`expected`), or,
/// with none named, by anything but a failed assertion. Caught so by a directed scenario,
/// a canary needs no swarm seed to prove it.
fn settled(expected: Option<&[&str]>, caught: &[(String, &'static str)]) -> bool {
    match expected {
        Some(e) => caught.iter().any(|(_, i)| e.contains(i)),
        None => caught
            .iter()
            .any(|(_, i)| *i != cairn_sim::report::INV_ASSERTION),
    }
}

fn expected_of(name: &str) -> Option<&'static [&'static str]> {
    EXPECTED.iter().find(|(n, _)| *n == name).map(|(_, e)| *e)
}

/// What caught one canary: (directed scenario or seed, invariant).
fn hunt(name: &'static str) -> Vec<(String, &'static str)> {
    assert!(
        cairn_sim::canary::activate(Some(name)),
        "unknown canary {name}"
    );
    let mut caught = Vec::new();
    for scenario in SCENARIOS {
        // A scenario whose setup the bug derails panics; that is not the oracle's verdict.
        if let Ok(Err(violation)) = catch_unwind(AssertUnwindSafe(scenario.run)) {
            caught.push((format!("scenario {}", scenario.name), violation.invariant));
        }
    }
    let node_world = cairn_sim::canary::owners::NAMES.contains(&name)
        || cairn_sim::canary::reads::NAMES.contains(&name);
    if node_world {
        for scenario in cairn_sim::node_world::NODE_SCENARIOS {
            if let Ok(Err(violation)) = catch_unwind(AssertUnwindSafe(scenario.run)) {
                caught.push((format!("scenario {}", scenario.name), violation.invariant));
            }
        }
    }
    for (scenario, _) in cairn_sim::cluster_world::directed::SCENARIOS {
        if let Some(violation) =
            cairn_sim::cluster_world::directed::run(scenario).and_then(|report| report.violation)
        {
            caught.push((format!("scenario {scenario}"), violation.invariant));
        }
    }
    // The first seed that catches it, unless an engine assertion caught it there and no
    // catch so far names what the canary must be caught as: then the hunt goes on for a seed
    // whose oracle names it (an assertion stops the run before the oracle looks).
    let expected = expected_of(name);
    let settled = settled(expected, &caught);
    let seeds = if settled { 0 } else { MAX_SEEDS };
    for seed in SWARM_START..SWARM_START + seeds {
        if let Some(violation) = run_seed(seed, false).violation {
            caught.push((format!("seed {seed:#x}"), violation.invariant));
            let named = expected.is_none_or(|e| caught.iter().any(|(_, i)| e.contains(i)));
            if named || violation.invariant != cairn_sim::report::INV_ASSERTION {
                break;
            }
        }
    }
    cairn_sim::canary::activate(None);
    caught
}

#[test]
fn every_canary_is_caught_naming_the_invariant() {
    // Scenario setups a bug derails panic by design (caught above): keep them quiet.
    std::panic::set_hook(Box::new(|_| {}));
    let names: &'static [&str] = &cairn_sim::canary::NAMES;
    let node_world = cairn_sim::canary::owners::NAMES
        .iter()
        .chain(&cairn_sim::canary::reads::NAMES);
    for owner in node_world {
        assert!(names.contains(owner), "{owner} is not a canary's name");
    }
    let (left, right) = names.split_at(names.len() / 2);
    let run = |half: &'static [&'static str]| {
        std::thread::spawn(move || half.iter().map(|n| (*n, hunt(n))).collect::<Vec<_>>())
    };
    let (a, b) = (run(left), run(right));
    let results: Vec<_> = a
        .join()
        .unwrap()
        .into_iter()
        .chain(b.join().unwrap())
        .collect();
    let mut missed = Vec::new();
    for (name, caught) in &results {
        let directed: BTreeSet<&str> = caught
            .iter()
            .filter(|(w, _)| w.starts_with("scenario"))
            .map(|(_, i)| *i)
            .collect();
        let scenarios = caught
            .iter()
            .filter(|(w, _)| w.starts_with("scenario"))
            .count();
        let seed = caught.iter().rev().find(|(w, _)| w.starts_with("seed"));
        println!(
            "canary {name}: {scenarios} directed scenarios object {directed:?}; swarm: {}",
            match seed {
                Some((w, i)) => format!("{w} ({i})"),
                None if settled(expected_of(name), caught) =>
                    "not run (the directed scenarios caught it)".to_string(),
                None => "not caught within the seed range".to_string(),
            }
        );
        if caught.is_empty() {
            missed.push(*name);
        }
        if let Some((_, expected)) = EXPECTED.iter().find(|(n, _)| n == name) {
            if !caught.iter().any(|(_, i)| expected.contains(i)) {
                missed.push(*name);
                println!("canary {name}: caught as {caught:?}, never as one of {expected:?}");
            }
        }
    }
    assert!(missed.is_empty(), "canaries not caught: {missed:?}");
}

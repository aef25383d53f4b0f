//! Every directed scenario (see `cairn_sim::directed`) reaches the decisions it exists for,
//! and the oracle finds nothing wrong on the way.

use cairn_sim::directed::SCENARIOS;

/// What is wrong with one scenario's run: a violation, or a decision it did not reach.
fn failures(
    name: &str,
    expect: &[&str],
    run: Result<Vec<&'static str>, cairn_sim::run::Violation>,
) -> Vec<String> {
    match run {
        Err(violation) => vec![format!("{name}: {violation}")],
        Ok(decisions) => expect
            .iter()
            .filter(|e| !decisions.contains(e))
            .map(|e| format!("{name}: expected {e}, decided {decisions:?}"))
            .collect(),
    }
}

#[test]
fn every_directed_scenario_reaches_its_decisions_with_the_oracle_satisfied() {
    let failures: Vec<String> = SCENARIOS
        .iter()
        .flat_map(|s| failures(s.name, s.expect, (s.run)()))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One node scenario's failures; an engine assertion that fires in it is one of them (the
/// other scenarios still run and report).
fn node_failures(s: &cairn_sim::node_world::NodeDirected) -> Vec<String> {
    match std::panic::catch_unwind(s.run) {
        Ok(run) => failures(s.name, s.expect, run),
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            vec![format!("{}: panicked: {why}", s.name)]
        }
    }
}

#[test]
fn every_directed_node_scenario_reaches_its_decisions_with_the_oracle_satisfied() {
    // `CAIRN_NODE_SCENARIO=<part of a name>` runs only the scenarios so named (to debug one).
    let only = std::env::var("CAIRN_NODE_SCENARIO").unwrap_or_default();
    let chosen: Vec<_> = cairn_sim::node_world::NODE_SCENARIOS
        .iter()
        .filter(|s| s.name.contains(only.as_str()))
        .collect();
    assert!(
        !chosen.is_empty(),
        "no directed node scenario is named like {only:?}"
    );
    let failures: Vec<String> = chosen.into_iter().flat_map(node_failures).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_fence_reason_and_every_repair_has_a_directed_scenario() {
    use cairn_engine::partition::recovery::Action;
    use cairn_engine::partition::FenceReason;
    // A partition directory the metadata names and cannot find is a node's finding: the
    // node's directed scenarios reach it.
    let node_only = [
        "DirectoryMissing",
        "IdentityDuplicated",
        "DirectoryInTheWay",
    ];
    for decision in node_only {
        assert!(
            cairn_sim::node_world::NODE_SCENARIOS
                .iter()
                .any(|s| s.expect.contains(&decision)),
            "no directed node scenario reaches {decision}"
        );
    }
    // A cluster replica's rebuild failing part way is reached where a crash strikes one
    // (`tests/tests/it/replica_rebuild.rs`); the cluster worlds' groups repair it.
    let replica_only = ["RebuildCutShort"];
    for decision in FenceReason::NAMES
        .iter()
        .chain(Action::NAMES.iter())
        .filter(|d| !node_only.contains(d) && !replica_only.contains(d))
    {
        assert!(
            SCENARIOS.iter().any(|s| s.expect.contains(decision)),
            "no directed scenario reaches {decision}"
        );
    }
}

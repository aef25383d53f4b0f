//! Two more of the cluster's process tests (`cluster.rs` and `cluster_sdk.rs` have the
//! helpers): a wiped member
//! added back is refilled with every partition, and a member whose partitions are damaged
//! repairs them from its peers.

use crate::cluster::{at, client_of, field, Running, SECRET};
use crate::cluster_sdk::{every_member_holds, make_orders_events, send_one};
use crate::common::Cairn;
use std::path::Path;

/// A client of member `first`, once it made `orders/events` and sent `count` messages
/// (`"{what} {i}"`, balanced) that every member then holds; and those messages.
async fn orders_sent(
    nodes: &[Option<Cairn>],
    first: usize,
    what: &str,
    count: u32,
) -> (iggy::prelude::IggyClient, Vec<String>) {
    let leading = client_of(at(nodes, first), "iggy", crate::common::PASSWORD).await;
    make_orders_events(&leading).await;
    let mut acked = Vec::new();
    for i in 0..count {
        let payload = format!("{what} {i}");
        send_one(&leading, None, &payload).await.unwrap();
        acked.push(payload);
    }
    every_member_holds(nodes, &acked).await;
    (leading, acked)
}

#[test]
fn a_wiped_member_added_back_is_refilled_with_every_partition() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Running {
        dirs,
        members,
        mut nodes,
        first,
        followers,
    } = Running::start();
    let (leading, mut acked) = runtime.block_on(orders_sent(&nodes, first, "before the wipe", 30));

    // A follower's disk is wiped: it comes back as new replicas, outside every group, and
    // the others go on taking sends.
    let wiped = followers[0];
    nodes[wiped - 1].take().unwrap().kill9();
    let dir = dirs[wiped - 1].path();
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::create_dir(dir).unwrap();
    nodes[wiped - 1] = Some(members.start(wiped, dir));
    members.wait_for("the wiped member outside the group", |rows| {
        field(rows, wiped as u64, "role") == "outside"
    });
    runtime.block_on(async {
        for i in 0..30u32 {
            let payload = format!("while it is out {i}");
            send_one(&leading, None, &payload).await.unwrap();
            acked.push(payload);
        }
    });

    // Added back by the administrator: each partition's group makes its new replica a
    // learner, refills it from the WAL, then a voter; it holds every acknowledged message.
    let (code, json, stderr) = members.admin(SECRET, &["add", &wiped.to_string()]);
    assert_eq!(code, 0, "add: {json} {stderr}");
    runtime.block_on(every_member_holds(&nodes, &acked));
    // Holding the messages (a learner does) is not voting: until each group's change
    // settles, the old replica still counts in its quorum.
    members.wait_for("the wiped member a voter of every group", |rows| {
        let row = rows.iter().find(|r| r["member"] == wiped as u64);
        let partitions = row.map(|r| &r["partitions"]);
        partitions.is_some_and(|p| p["running"].as_u64() == Some(2) && p["voting"] == p["running"])
    });
    let voting = crate::cluster::scrape(at(&nodes, wiped), "cairn_cluster_partitions_voting");
    assert_eq!(voting, 2, "its /metrics count the groups it votes in");

    // It is a voter of every group, not a learner: with the other follower killed, the
    // leader and it are each group's quorum, and sends go on.
    nodes[followers[1] - 1].take().unwrap().kill9();
    runtime.block_on(async {
        for i in 0..10u32 {
            let payload = format!("with the refilled member as quorum {i}");
            send_one(&leading, Some(i % 2), &payload).await.unwrap();
            acked.push(payload);
        }
        every_member_holds(&nodes, &acked).await;
    });
    drop(nodes);
}

/// Every non-empty segment log under `dir`.
fn segment_logs(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(segment_logs(&path));
        } else if path.extension().is_some_and(|e| e == "log")
            && entry.metadata().is_ok_and(|m| m.len() > 0)
        {
            found.push(path);
        }
    }
    found
}

#[test]
fn a_member_whose_partitions_are_damaged_repairs_them_from_its_peers() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Running {
        dirs,
        members,
        mut nodes,
        first,
        followers,
    } = Running::start();
    let (leading, mut acked) =
        runtime.block_on(orders_sent(&nodes, first, "before the damage", 20));

    // A follower stops gracefully (its partitions synced), and a byte of each of its
    // partitions' synced segments flips: its boot fences them.
    let damaged = followers[0];
    nodes[damaged - 1].take().unwrap().terminate();
    let logs = segment_logs(&dirs[damaged - 1].path().join("streams"));
    assert_eq!(logs.len(), 2, "a segment per partition: {logs:?}");
    for log in &logs {
        let mut bytes = std::fs::read(log).unwrap();
        bytes[100] ^= 0x55;
        std::fs::write(log, bytes).unwrap();
    }
    nodes[damaged - 1] = Some(members.start(damaged, dirs[damaged - 1].path()));

    // Its groups rebuild each partition from the peers' segments: it holds every
    // acknowledged message again, and counts in each group's quorum.
    runtime.block_on(async {
        for i in 0..10u32 {
            let payload = format!("after the damage {i}");
            send_one(&leading, Some(i % 2), &payload).await.unwrap();
            acked.push(payload);
        }
        every_member_holds(&nodes, &acked).await;
    });
    let said = at(&nodes, damaged).drain_output();
    let repaired = said
        .iter()
        .filter(|l| l.contains("repaired a replica's partition from its peers"))
        .count();
    assert_eq!(
        repaired, 2,
        "each damaged partition was repaired: {said:#?}"
    );
    nodes[followers[1] - 1].take().unwrap().kill9();
    runtime.block_on(async {
        for i in 0..5u32 {
            let payload = format!("with the repaired member as quorum {i}");
            send_one(&leading, Some(i % 2), &payload).await.unwrap();
            acked.push(payload);
        }
        every_member_holds(&nodes, &acked).await;
    });
    drop(nodes);
}

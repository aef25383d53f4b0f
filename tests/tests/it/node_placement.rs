//! Partitions placed on shards by the node's placement table: the least-loaded shard when a
//! partition is created, afresh at every boot (whatever the shard count), every partition
//! answering from the shard it is placed on.

use cairn_engine::node::NodeSettings;
use cairn_tests::node::{read_node, start, TestNode};
use cairn_tests::*;
use iggy_binary_protocol::WirePartitioning;
use std::path::Path;

fn boot_with_shards(root: &Path, shards: usize) -> TestNode {
    let settings = NodeSettings {
        shards,
        ..node_settings()
    };
    start(&real_env(), root, settings).expect("boot").node
}

/// Sends one message to each partition (topic, partition) of stream 0 in `keys`, and reads
/// each partition back: how many messages each holds.
fn send_and_read(node: &TestNode, keys: &[(u32, u32)], seed: u64) -> Vec<usize> {
    keys.iter()
        .map(|&(topic, partition)| {
            node.send(
                &id(0),
                &id(topic),
                &WirePartitioning::PartitionId(partition),
                batch(seed + u64::from(topic * 10 + partition), 1, 64),
            )
            .unwrap_or_else(|e| panic!("send to {topic}/{partition}: {e}"));
            read_node(node, (0, topic, partition)).len()
        })
        .collect()
}

/// Topics of one partition each on two shards; those on shard 1 are deleted, and a topic
/// of two partitions created: both its partitions go to the emptied shard (a function of
/// the ids, summed, would put them on different shards). Every partition answers sends and
/// polls, so requests are routed by the table (and the metadata owner checks after every
/// batch that each shard holds exactly the partitions placed on it). A boot with three
/// shards places them afresh, evenly, and they answer again; a partition created then goes
/// to that boot's least-loaded shard.
#[test]
fn partitions_go_to_the_least_loaded_shard_and_are_placed_afresh_at_boot() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = boot_with_shards(root, 2);
    assert_eq!(node.create_stream("s").unwrap(), 0);
    let create = |node: &TestNode, name: &str, partitions| {
        node.create_topic(&id(0), name, partitions, topic_options(&[]))
            .unwrap()
    };
    let topics: Vec<u32> = (0..4).map(|t| create(&node, &format!("t{t}"), 1)).collect();
    assert_eq!(topics, [0, 1, 2, 3]);
    assert_eq!(node.node.shard_loads(), [2, 2], "created in turn");
    // Placed in turn: topics 1 and 3 went to shard 1.
    for topic in [1, 3] {
        node.delete_topic(&id(0), &id(topic)).unwrap();
    }
    assert_eq!(node.node.shard_loads(), [2, 0], "deleted from shard 1");
    assert_eq!(create(&node, "wide", 2), 1, "the lowest free id");
    assert_eq!(node.node.shard_loads(), [2, 2], "both to the emptied shard");
    let keys = [(0, 0), (1, 0), (1, 1), (2, 0)];
    assert_eq!(send_and_read(&node, &keys, 1), [1, 1, 1, 1]);
    node.close().unwrap();

    let node = boot_with_shards(root, 3);
    assert_eq!(
        node.node.shard_loads(),
        [2, 1, 1],
        "placed afresh, in key order"
    );
    assert_eq!(send_and_read(&node, &keys, 100), [2, 2, 2, 2]);
    create(&node, "late", 1);
    assert_eq!(
        node.node.shard_loads(),
        [2, 2, 1],
        "the least loaded, lowest first"
    );
    assert_eq!(send_and_read(&node, &[(3, 0)], 200), [1]);
    node.close().unwrap();
}

/// A partition removed while its topic lives keeps its shard: a partition count cut and
/// raised again puts it back where it was, though another shard is now less loaded. (The
/// shard keeps, until the topic goes, which deleted groups' offsets it retired; a late
/// store for the key must reach it.) A removed topic's keys are forgotten.
#[test]
fn a_partition_made_again_under_its_topic_returns_to_its_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let node = boot_with_shards(tmp.path(), 2);
    node.create_stream("s").unwrap();
    let create = |name: &str, partitions| {
        node.create_topic(&id(0), name, partitions, topic_options(&[]))
            .unwrap()
    };
    let a = create("a", 2);
    assert_eq!(node.node.shard_loads(), [1, 1]);
    node.delete_partitions(&id(0), &id(a), 1).unwrap();
    assert_eq!(
        node.node.shard_loads(),
        [1, 0],
        "a's partition 1 left shard 1"
    );
    let c = create("c", 1);
    let d = create("d", 1);
    create("e", 1);
    assert_eq!(node.node.shard_loads(), [2, 2]);
    node.delete_topic(&id(0), &id(d)).unwrap();
    assert_eq!(node.node.shard_loads(), [1, 2], "d was on shard 0");
    node.create_partitions(&id(0), &id(a), 1).unwrap();
    assert_eq!(
        node.node.shard_loads(),
        [1, 3],
        "a's partition 1 is back on shard 1, not on the least-loaded shard 0"
    );
    assert_eq!(send_and_read(&node, &[(a, 0), (a, 1)], 1), [1, 1]);
    // A removed topic's keys are forgotten: a topic made again under c's id (c was on
    // shard 1) goes to the least-loaded shard 0, not back to shard 1.
    node.delete_topic(&id(0), &id(c)).unwrap();
    assert_eq!(node.node.shard_loads(), [1, 2]);
    assert_eq!(create("c2", 1), c, "the lowest free id");
    assert_eq!(node.node.shard_loads(), [2, 2], "placed afresh");
    assert_eq!(send_and_read(&node, &[(c, 0)], 50), [1]);
    node.close().unwrap();
}

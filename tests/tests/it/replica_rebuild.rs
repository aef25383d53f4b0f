//! A cluster member's replica rebuilt (`Node::rebuild_replica`: its partition replaced by
//! an empty one its group refills from its peers) under a crash at every mutating disk call
//! of the rebuild: the next boot never fences the partition, which holds either what it
//! held or nothing from the rebuild's start, and leaves no rebuild mark behind. A mark left
//! beside another incarnation of the partition redoes nothing, and one whose partition is
//! gone does not keep its topic's directory from being deleted.

use cairn_engine::env::real::block_on;
use cairn_engine::node::NodeSettings;
use cairn_engine::partition::FenceReason;
use cairn_tests::*;
use std::path::Path;

/// Where the rebuilt partition's log starts.
const START: u64 = 7;

fn replica_settings() -> NodeSettings {
    let mut settings = node_settings();
    settings.partition.replica = true;
    settings
}

/// A node holding 5 messages in each of partitions (0, 0, 0) and (0, 0, 1), halted.
fn held_partition(root: &Path) {
    let node = node_with_topic(root, 2, topic_options(&[("durability", 2, b"persisted")]));
    node.send_to(0, batch(1, 5, 64));
    node.send_to(1, batch(2, 5, 64));
    node.halt();
}

fn mark_of(root: &Path, partition: u32) -> std::path::PathBuf {
    root.join(format!("streams/0/topics/0/partitions/{partition}.rebuild"))
}

/// A root whose partition (0, 0, 0) has a whole rebuild mark (from `START`) beside it,
/// its rebuild cut short by a crash right after the mark: the crash's budget.
fn marked(root: &Path) {
    held_partition(root);
    let disk = CrashingDisk::new(usize::MAX);
    let booted = start(&env_on(disk.clone()), root, replica_settings()).expect("boot");
    let identity = booted.node.view().state.partition((0, 0, 0)).expect("held");
    // The staged mark's create, write and sync, its rename into place and its directory's
    // sync: the crash strikes the removal after them.
    *disk.budget.lock().unwrap() = 5;
    let rebuilt = block_on(booted.node.node.rebuild_replica(identity, START));
    assert!(rebuilt.is_err(), "the crash struck after the mark");
    // Until a boot finishes it, the partition is fenced as damage its group repairs.
    let info = block_on(booted.node.client.local_partition_info((0, 0, 0)));
    let fence = info.expect("inspect").expect("the partition").fence;
    assert!(
        matches!(fence, Some(FenceReason::RebuildCutShort { .. }))
            && fence.as_ref().is_some_and(FenceReason::own_files_damaged),
        "{fence:?}"
    );
    booted.node.halt();
    assert!(mark_of(root, 0).exists(), "the mark is whole on disk");
}

/// The partition as a boot of `root` (a replica's) finds it: (log start, next offset).
fn booted_bounds(root: &Path, budget: usize) -> (u64, u64) {
    let booted = start(&real_env(), root, replica_settings()).expect("boot");
    for (key, boot) in &booted.report.partitions {
        assert!(
            boot.fence().is_none(),
            "budget {budget}: {key:?} fenced: {boot:?}"
        );
    }
    let info = block_on(booted.node.client.local_partition_info((0, 0, 0)));
    let info = info.expect("inspect").expect("the partition");
    let next = info.visible_next_offset.expect("not fenced");
    booted.node.halt();
    (info.log_start, next)
}

#[test]
fn a_crash_at_every_call_of_a_replica_rebuild_boots_the_old_or_the_empty_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let reference = tmp.path().join("reference");
    held_partition(&reference);
    let (mut old, mut empty) = (0, 0);
    for budget in 0.. {
        let root = tmp.path().join(format!("crash-{budget}"));
        copy_dir(&reference, &root);
        let disk = CrashingDisk::new(usize::MAX);
        let booted = start(&env_on(disk.clone()), &root, replica_settings()).expect("boot");
        let identity = booted.node.view().state.partition((0, 0, 0)).expect("held");
        *disk.budget.lock().unwrap() = budget;
        let rebuilt = block_on(booted.node.node.rebuild_replica(identity, START));
        booted.node.halt();
        *disk.budget.lock().unwrap() = usize::MAX;
        match booted_bounds(&root, budget) {
            (0, 5) => old += 1,
            (START, START) => empty += 1,
            other => panic!("budget {budget}: the partition holds {other:?}"),
        }
        assert!(
            !mark_of(&root, 0).exists(),
            "budget {budget}: the mark stays"
        );
        if rebuilt.is_ok() {
            assert_eq!(
                booted_bounds(&root, budget),
                (START, START),
                "after a rebuild"
            );
            break;
        }
        assert!(budget < 200, "the rebuild never finished");
    }
    // A crash before the mark was whole keeps the old partition; any later one finishes
    // the rebuild at the next boot.
    assert!(old >= 1 && empty >= 3, "old {old}, empty {empty}");
}

#[test]
fn a_mark_beside_another_incarnation_redoes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    marked(root);
    // The mark moved beside partition 1 (another nonce) stands for one left beside a
    // partition purged or made again since.
    std::fs::rename(mark_of(root, 0), mark_of(root, 1)).unwrap();
    let booted = start(&real_env(), root, replica_settings()).expect("boot");
    for key in [(0, 0, 0), (0, 0, 1)] {
        let info = block_on(booted.node.client.local_partition_info(key));
        let info = info.expect("inspect").expect("the partition");
        let bounds = (info.log_start, info.visible_next_offset);
        assert_eq!(bounds, (0, Some(5)), "{key:?} as it was");
    }
    booted.node.halt();
    assert!(!mark_of(root, 1).exists(), "the stale mark is removed");
}

#[test]
fn a_mark_whose_partition_is_gone_does_not_keep_its_topic() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    marked(root);
    // A partition id the topic does not have.
    std::fs::rename(mark_of(root, 0), mark_of(root, 9)).unwrap();
    let node = start(&real_env(), root, replica_settings())
        .expect("boot")
        .node;
    node.delete_topic(&id(0), &id(0)).expect("deleted");
    node.halt();
    let topic = root.join("streams/0/topics/0");
    assert!(!topic.exists(), "the deleted topic's directory is gone");
    let booted = start(&real_env(), root, replica_settings()).expect("boot");
    assert!(
        booted.report.tree.kept_dirs.is_empty(),
        "{:?}",
        booted.report.tree
    );
    booted.node.halt();
}

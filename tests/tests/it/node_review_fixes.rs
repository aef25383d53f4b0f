//! The node review's bugs (`../shared/reviews/wave2-node-and-server-readiness.md`, N1-N10),
//! each on real files. Each test is the review's probe turned around: the probe asserted the
//! faulty behaviour and passed at 3f85aac; this asserts the fixed one.

use cairn_engine::env::is_no_space;
use cairn_engine::metadata::MetaAction;
use cairn_engine::node::ops::MetaOp;
use cairn_engine::node::{Failure, NodeError, PartitionBoot, WorkError};
use cairn_engine::partition::FenceReason;
use cairn_tests::*;
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest,
};
use iggy_binary_protocol::{
    WireConsumer, WireGlobalPermissions, WireIdentifier, WireName, WireOptions, WirePartitioning,
    WirePermissions, WirePollingStrategy, WireStreamPermissions, WireTopicPermissions,
    KIND_CONSUMER_GROUP,
};
use std::future::Future;
use std::path::Path;

fn group(g: WireIdentifier) -> WireConsumer {
    WireConsumer {
        kind: KIND_CONSUMER_GROUP,
        id: g,
    }
}

const NEXT: WirePollingStrategy = WirePollingStrategy { kind: 5, value: 0 };

fn persisted() -> WireOptions {
    topic_options(&[
        ("durability", 2, b"persisted"),
        ("consumer_offset_durability", 2, b"persisted"),
    ])
}

/// A persisted topic of one partition holding ten messages, and group `name` (the first, id
/// 0) with `offset` stored there: the node, the group's id and its offset file.
fn group_with_offset(root: &Path, name: &str, offset: u64) -> (TestNode, u32, std::path::PathBuf) {
    let node = node_with_topic(root, 1, persisted());
    node.send_to(0, batch(1, 10, 10));
    let g = node.create_group(&id(0), &id(0), name).unwrap();
    node.store_offset(&group(id(g)), &id(0), &id(0), Some(0), offset)
        .unwrap();
    let file = cairn_engine::partition::partition_dir(root, 0, 0, 0).join("offsets/groups/0");
    (node, g, file)
}

/// N1: a deleted group's offsets go with it; the next group under the same (lowest free)
/// id starts from nothing, also after a restart.
#[test]
fn n1_a_new_group_never_inherits_a_deleted_groups_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (node, old, file) = group_with_offset(root, "old", 7);
    assert!(file.exists());
    node.delete_group(&id(0), &id(0), &id(old)).unwrap();
    assert!(
        !file.exists(),
        "the deletion removed the group's offset file"
    );
    let fresh = node.create_group(&id(0), &id(0), "fresh").unwrap();
    assert_eq!(fresh, old, "lowest free id reused");
    assert_eq!(
        node.get_offset(&group(named("fresh")), &id(0), &id(0), Some(0))
            .unwrap(),
        None
    );
    node.join_group(&id(0), &id(0), &named("fresh")).unwrap();
    let polled = node.poll_topic(&group(named("fresh")), None, NEXT, 100, false);
    assert_eq!(
        polled.message_count, 10,
        "the fresh group reads from the start"
    );
    node.halt();
    let node = boot(root).node;
    assert_eq!(
        node.get_offset(&group(named("fresh")), &id(0), &id(0), Some(0))
            .unwrap(),
        None
    );
}

/// N1 at boot: a group offset file whose group no longer exists (a crash between the
/// deletion's journal entry and its directory work, or any other leftover) is removed by
/// boot, and `cairn check` says it would be.
#[test]
fn n1_boot_removes_the_offsets_of_groups_that_no_longer_exist() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (node, g, file) = group_with_offset(root, "doomed", 3);
    let saved = std::fs::read(&file).unwrap();
    node.delete_group(&id(0), &id(0), &id(g)).unwrap();
    node.halt();
    // The file comes back (a leftover no journaled op accounts for any more).
    std::fs::write(&file, &saved).unwrap();
    let booted = boot(root);
    assert_eq!(booted.report.group_offsets_removed, vec![((0, 0, 0), 0)]);
    assert!(!file.exists());
    booted.node.halt();
    assert!(boot(root).report.group_offsets_removed.is_empty());
}

/// N2: adding partitions to one topic rebalances that topic's groups only.
#[test]
fn n2_a_partition_change_rebalances_only_its_topics_groups() {
    let tmp = tempfile::tempdir().unwrap();
    let node = node_with_topic(tmp.path(), 1, WireOptions::empty());
    node.create_topic(&id(0), "u", 2, WireOptions::empty())
        .unwrap();
    let g = node.create_group(&id(0), &named("u"), "workers").unwrap();
    let member = node.as_client(7);
    member.join_group(&id(0), &named("u"), &id(g)).unwrap();
    let (before, _) = member
        .group_assignment(&id(0), &named("u"), &id(g))
        .unwrap();
    node.create_partitions(&id(0), &named("t"), 1).unwrap();
    let (after, parts) = member
        .group_assignment(&id(0), &named("u"), &id(g))
        .unwrap();
    assert_eq!(parts, vec![0, 1]);
    assert_eq!(
        after, before,
        "an unrelated topic's change leaves the group alone"
    );
    node.create_partitions(&id(0), &named("u"), 1).unwrap();
    let (resized, parts) = member
        .group_assignment(&id(0), &named("u"), &id(g))
        .unwrap();
    assert_eq!((resized, parts), (before + 1, vec![0, 1, 2]));
}

/// Runs two metadata ops from two callers at once (the owner may journal them in one
/// batch).
fn concurrently(node: &TestNode, a: MetaOp, b: MetaOp) -> (bool, bool) {
    let (c1, c2) = (node.node.client(50), node.node.client(51));
    cairn_engine::env::real::block_on(async move {
        let (x, y) = (c1.execute(a), c2.execute(b));
        let mut x = std::pin::pin!(x);
        let mut y = std::pin::pin!(y);
        let (mut rx, mut ry) = (None, None);
        std::future::poll_fn(|cx| {
            if rx.is_none() {
                if let std::task::Poll::Ready(r) = x.as_mut().poll(cx) {
                    rx = Some(r.is_ok());
                }
            }
            if ry.is_none() {
                if let std::task::Poll::Ready(r) = y.as_mut().poll(cx) {
                    ry = Some(r.is_ok());
                }
            }
            match (rx, ry) {
                (Some(a), Some(b)) => std::task::Poll::Ready((a, b)),
                _ => std::task::Poll::Pending,
            }
        })
        .await
    })
}

/// N3: a group deleted and another created under its id, from two callers at once: the
/// old group's members are no members of the new one.
#[test]
fn n3_a_group_recreated_at_once_does_not_keep_the_old_members() {
    let tmp = tempfile::tempdir().unwrap();
    let node = node_with_topic(tmp.path(), 2, WireOptions::empty());
    for round in 0..20 {
        let name = format!("old{round}");
        let g = node.create_group(&id(0), &id(0), &name).unwrap();
        let member = node.as_client(9);
        member.join_group(&id(0), &id(0), &id(g)).unwrap();
        let delete = MetaOp::DeleteConsumerGroup(DeleteConsumerGroupRequest {
            stream_id: id(0),
            topic_id: id(0),
            group_id: id(g),
        });
        let create = MetaOp::CreateConsumerGroup(CreateConsumerGroupRequest {
            stream_id: id(0),
            topic_id: id(0),
            name: WireName::new(format!("new{round}")).unwrap(),
        });
        assert_eq!(concurrently(&node, delete, create), (true, true));
        let new = node
            .view()
            .group_id(0, 0, &named(&format!("new{round}")))
            .unwrap();
        assert_eq!(new, g, "the new group took the freed id");
        let members = node.group_members(&id(0), &id(0), &id(new)).unwrap();
        assert!(members.is_empty(), "round {round}: {members:?}");
        node.delete_group(&id(0), &id(0), &id(new)).unwrap();
    }
}

/// N2 for whole entities: deleting a stream (or a topic) forgets the memberships of its
/// groups only; a member of another stream's (or topic's) group keeps its partitions, and a
/// group recreated under the deleted one's ids starts without members.
#[test]
fn deleting_a_stream_or_topic_forgets_only_its_groups_members() {
    let tmp = tempfile::tempdir().unwrap();
    let node = node_with_topic(tmp.path(), 2, WireOptions::empty());
    node.create_stream("other").unwrap();
    node.create_topic(&id(1), "t", 2, WireOptions::empty())
        .unwrap();
    node.create_topic(&id(1), "u", 2, WireOptions::empty())
        .unwrap();
    for (s, t) in [(0, 0), (1, 0), (1, 1)] {
        let g = node.create_group(&id(s), &id(t), "g").unwrap();
        assert_eq!(g, 0);
        node.as_client(9)
            .join_group(&id(s), &id(t), &id(0))
            .unwrap();
    }
    let member = node.as_client(9);
    let kept = |s: u32, t: u32| member.group_assignment(&id(s), &id(t), &id(0)).unwrap();
    let before = (kept(1, 0), kept(1, 1));
    node.delete_stream(&id(0)).unwrap();
    assert_eq!(
        (kept(1, 0), kept(1, 1)),
        before,
        "the other stream's groups kept"
    );
    node.delete_topic(&id(1), &id(0)).unwrap();
    assert_eq!(kept(1, 1), before.1, "the other topic's group kept");
    // The same ids again: no member carried over.
    node.create_stream("s").unwrap();
    node.create_topic(&id(0), "t", 2, WireOptions::empty())
        .unwrap();
    node.create_topic(&id(1), "t", 2, WireOptions::empty())
        .unwrap();
    for (s, t) in [(0, 0), (1, 0)] {
        assert_eq!(node.create_group(&id(s), &id(t), "g").unwrap(), 0);
        let members = node.group_members(&id(s), &id(t), &id(0)).unwrap();
        assert!(members.is_empty(), "{s}/{t}: {members:?}");
    }
}

/// A new partition's directory that already exists, with nothing in the metadata there (an
/// operator's copy, a leftover of another node), is in the way: the create is refused,
/// changes nothing, and the directory is left as it was.
#[test]
fn a_create_refuses_a_directory_in_the_way_and_leaves_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = node_with_topic(root, 1, WireOptions::empty());
    let planted = root.join("streams/0/topics/0/partitions/1");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::write(planted.join("someone-elses.log"), b"data").unwrap();
    let view = node.view();
    match node.create_partitions(&id(0), &id(0), 1) {
        Err(NodeError::DirectoryInTheWay(dir)) => assert_eq!(dir, planted),
        other => panic!("{other:?}"),
    }
    assert_eq!(node.view(), view, "nothing changed");
    assert_eq!(
        std::fs::read(planted.join("someone-elses.log")).unwrap(),
        b"data"
    );
    std::fs::remove_dir_all(&planted).unwrap();
    node.create_partitions(&id(0), &id(0), 1).unwrap();
    assert_eq!(node.view().topic(0, 0).partitions.len(), 2);
}

/// N4: a metadata request whose body would exceed the journal's bound is refused before it
/// changes anything (no panic, nothing journaled, the view unchanged).
#[test]
fn n4_an_oversized_body_is_refused_without_changing_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = node_with_topic(root, 1, WireOptions::empty());
    let journal = std::fs::read(root.join("metadata/journal.wal")).unwrap();
    let view = node.view();
    let topics: Vec<WireTopicPermissions> = (0..40_000)
        .map(|_| WireTopicPermissions {
            topic_id: 0,
            manage_topic: true,
            read_topic: true,
            poll_messages: true,
            send_messages: true,
        })
        .collect();
    let global = WireGlobalPermissions {
        manage_servers: false,
        read_servers: false,
        manage_users: false,
        read_users: false,
        manage_streams: false,
        read_streams: false,
        manage_topics: false,
        read_topics: false,
        poll_messages: false,
        send_messages: false,
    };
    let stream = |topics: Vec<WireTopicPermissions>, stream_id| WireStreamPermissions {
        stream_id,
        manage_stream: true,
        read_stream: true,
        manage_topics: true,
        read_topics: true,
        poll_messages: true,
        send_messages: true,
        topics,
    };
    let huge = WirePermissions {
        global: global.clone(),
        streams: vec![stream(topics, 0)],
    };
    let e = node
        .create_user("mallory", "secret", 1, Some(huge))
        .unwrap_err();
    assert!(matches!(e, NodeError::TooBig { .. }), "{e}");
    // Small but naming what does not exist, or naming a topic twice.
    let missing = WirePermissions {
        global: global.clone(),
        streams: vec![stream(Vec::new(), 5)],
    };
    assert_eq!(
        node.create_user("mallory", "secret", 1, Some(missing))
            .unwrap_err()
            .code(),
        3
    );
    assert_eq!(node.view(), view, "nothing changed");
    assert_eq!(
        std::fs::read(root.join("metadata/journal.wal")).unwrap(),
        journal,
        "nothing journaled"
    );
    let fine = WirePermissions {
        global,
        streams: vec![stream(Vec::new(), 0)],
    };
    node.create_user("mallory", "secret", 1, Some(fine))
        .unwrap();
}

/// N5: out of space on the metadata journal, the batch is refused with a no-space error,
/// the journal is cut back, the view shows nothing of it, and sends and polls go on; once
/// space returns metadata is accepted again; a restart holds exactly what was acknowledged.
#[test]
fn n5_a_full_disk_refuses_metadata_and_the_node_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let disk = FaultyDisk::default();
    let env = disk.env();
    let node = start(&env, root, node_settings()).unwrap().node;
    node.create_stream("s").unwrap();
    node.create_topic(&id(0), "t", 1, persisted()).unwrap();
    let journal = root.join("metadata/journal.wal");
    let before = std::fs::metadata(&journal).unwrap().len();
    *disk.nospace_writes_to.lock().unwrap() = Some("wal");
    let e = node.create_stream("ghost").unwrap_err();
    assert!(matches!(e, NodeError::MetadataNoSpace), "{e}");
    assert_eq!(
        std::fs::metadata(&journal).unwrap().len(),
        before,
        "cut back"
    );
    assert!(node.view().stream_id(&named("ghost")).is_err());
    assert!(node.node.failure().is_none(), "the node did not stop");
    node.send_to(0, batch(1, 1, 10));
    *disk.nospace_writes_to.lock().unwrap() = None;
    node.create_stream("after").unwrap();
    node.halt();
    let node = start(&env, root, node_settings()).unwrap().node;
    let view = node.view();
    assert!(view.stream_id(&named("ghost")).is_err());
    assert!(view.stream_id(&named("after")).is_ok());
    assert_eq!(read_node(&node, (0, 0, 0)).len(), 1);
}

/// N5 for checkpoints: no space for the snapshot changes nothing (no snapshot recorded, no
/// temporary file left, the journal kept) and the node keeps serving; the checkpoint is
/// tried again after more journal, and done once there is space.
#[test]
fn n5_a_checkpoint_without_space_changes_nothing_and_is_tried_again() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let disk = FaultyDisk::default();
    let env = disk.env();
    let mut settings = node_settings();
    settings.meta.checkpoint_bytes = 1;
    let node = start(&env, root, settings.clone()).unwrap().node;
    let snapshot = root.join("metadata/snapshot.bin");
    let journal = root.join("metadata/journal.wal");
    // The checkpoint follows the answer; the owner's next answer (a refusal, which
    // journals nothing and so checkpoints nothing) follows the checkpoint.
    let settled = || assert!(node.create_stream("first").is_err());
    node.create_stream("first").unwrap();
    settled();
    let before = std::fs::read(&snapshot).expect("a checkpoint after the first op");
    *disk.nospace_writes_to.lock().unwrap() = Some("tmp");
    node.create_stream("s").unwrap();
    node.create_stream("t").unwrap();
    settled();
    assert!(node.node.failure().is_none(), "the node did not stop");
    assert_eq!(std::fs::read(&snapshot).unwrap(), before, "no new snapshot");
    assert!(!root.join("metadata/snapshot.bin.tmp").exists());
    assert!(
        std::fs::metadata(&journal).unwrap().len() > 0,
        "the journal kept"
    );
    assert!(node.node.stats().meta_no_space >= 1);
    *disk.nospace_writes_to.lock().unwrap() = None;
    node.create_stream("u").unwrap();
    node.create_stream("v").unwrap();
    settled();
    assert_ne!(
        std::fs::read(&snapshot).unwrap(),
        before,
        "checkpointed once there is room"
    );
    node.halt();
    let view = start(&env, root, settings).unwrap().node.view();
    for name in ["s", "t", "u", "v"] {
        assert!(view.stream_id(&named(name)).is_ok(), "{name}");
    }
}

/// N5's other half: any other failure of the journal stops the node (it answers nothing
/// until restarted, and says why).
#[test]
fn n5_an_io_error_on_the_journal_stops_the_node() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let disk = FaultyDisk::default();
    let node = start(&disk.env(), root, node_settings()).unwrap().node;
    node.create_stream("s").unwrap();
    node.create_topic(&id(0), "t", 1, WireOptions::empty())
        .unwrap();
    *disk.set_len_fails.lock().unwrap() = true;
    *disk.nospace_writes_to.lock().unwrap() = Some("wal");
    // The cut-back after no space fails: the journal's end is unknown.
    let e = node.create_stream("x").unwrap_err();
    assert!(matches!(e, NodeError::Stopped(_)), "{e}");
    assert!(matches!(
        node.node.failure().as_deref(),
        Some(Failure::Metadata(_))
    ));
    let send = node.send(
        &id(0),
        &id(0),
        &WirePartitioning::PartitionId(0),
        batch(1, 1, 10),
    );
    assert!(matches!(send, Err(NodeError::Stopped(_))), "{send:?}");
}

/// N6: an inactive user is refused at login; status values are validated; an unknown user
/// and a wrong password get the same answer.
#[test]
fn n6_logins_refuse_inactive_users_and_statuses_are_validated() {
    let tmp = tempfile::tempdir().unwrap();
    let node = boot(tmp.path()).node;
    let bob = node.create_user("bob", "secret", 2, None).unwrap();
    assert_eq!(node.login("bob", "secret").unwrap_err().code(), 47);
    assert!(matches!(
        node.login("bob", "secret"),
        Err(NodeError::UserInactive(id)) if id == bob
    ));
    assert_eq!(node.login("bob", "wrong").unwrap_err().code(), 42);
    assert_eq!(node.login("nobody", "secret").unwrap_err().code(), 42);
    for status in [0, 3, 200] {
        assert_eq!(
            node.create_user("carl", "secret", status, None)
                .unwrap_err()
                .code(),
            45,
            "status {status}"
        );
        assert_eq!(
            node.update_user(&id(bob), None, Some(status))
                .unwrap_err()
                .code(),
            45
        );
    }
    node.update_user(&id(bob), None, Some(1)).unwrap();
    let login = node.login("bob", "secret").unwrap();
    assert_eq!(login.user_id, bob);
}

/// N7: a group member's offset calls without a partition id mean the partition its last
/// poll read; one that has not polled gets a clear error, and nothing moves.
#[test]
fn n7_a_group_store_without_partition_means_the_members_current_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let node = node_with_topic(tmp.path(), 2, WireOptions::empty());
    for p in 0..2 {
        node.send(
            &id(0),
            &id(0),
            &WirePartitioning::PartitionId(p),
            batch(u64::from(p), 5, 10),
        )
        .unwrap();
    }
    let g = node.create_group(&id(0), &id(0), "w").unwrap();
    let (one, two) = (node.as_client(1), node.as_client(2));
    one.join_group(&id(0), &id(0), &id(g)).unwrap();
    two.join_group(&id(0), &id(0), &id(g)).unwrap();
    let (_, mine) = two.group_assignment(&id(0), &id(0), &id(g)).unwrap();
    assert_eq!(mine, vec![1], "client 2 owns partition 1 only");
    let e = two
        .store_offset(&group(id(g)), &id(0), &id(0), None, 4)
        .unwrap_err();
    assert!(matches!(e, NodeError::NoCurrentPartition { .. }), "{e}");
    let polled = two.poll_topic(&group(id(g)), None, NEXT, 2, false);
    assert_eq!(polled.partition_id, 1);
    two.store_offset(&group(id(g)), &id(0), &id(0), None, 4)
        .unwrap();
    assert_eq!(
        two.get_offset(&group(id(g)), &id(0), &id(0), None).unwrap(),
        Some(4)
    );
    assert_eq!(
        one.get_offset(&group(id(g)), &id(0), &id(0), Some(1))
            .unwrap(),
        Some(4)
    );
    assert_eq!(
        one.get_offset(&group(id(g)), &id(0), &id(0), Some(0))
            .unwrap(),
        None,
        "partition 0 (client 1's) did not move"
    );
}

/// N8: an I/O error opening one partition fences that partition; boot goes on and the
/// others serve.
#[test]
fn n8_one_partitions_io_error_fences_only_that_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = node_with_topic(root, 3, WireOptions::empty());
    node.send_to(0, batch(1, 3, 10));
    node.close().unwrap();
    let groups = cairn_engine::partition::partition_dir(root, 0, 0, 2).join("offsets/groups");
    std::fs::remove_dir_all(&groups).unwrap();
    std::fs::write(&groups, b"not a directory").unwrap();
    let booted = boot(root);
    let fenced: Vec<_> = booted
        .report
        .partitions
        .iter()
        .filter(|(_, b)| b.fence().is_some())
        .collect();
    assert_eq!(fenced.len(), 1, "{fenced:?}");
    assert!(matches!(
        &fenced[0],
        (
            (0, 0, 2),
            PartitionBoot::Fenced(FenceReason::IoFailed { .. })
        )
    ));
    assert_eq!(read_node(&booted.node, (0, 0, 0)).len(), 3);
    assert!(matches!(
        booted.node.info((0, 0, 2)).unwrap().fence,
        Some(FenceReason::IoFailed { .. })
    ));
}

/// N9: the kind of an I/O error survives to the node's answer: out of space while creating
/// a topic's partition (after its op is journaled) stops the node with a failure whose
/// source says no space.
#[test]
fn n9_the_kind_of_an_error_survives() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let disk = FaultyDisk::default();
    let node = start(&disk.env(), root, node_settings()).unwrap().node;
    node.create_stream("s").unwrap();
    *disk.nospace_create.lock().unwrap() = true;
    let e = node
        .create_topic(&id(0), "t", 1, WireOptions::empty())
        .unwrap_err();
    let NodeError::Stopped(failure) = e else {
        panic!("{e}");
    };
    let Failure::Work(work) = failure.as_ref() else {
        panic!("{failure}");
    };
    assert!(matches!(work, WorkError::Partition(_)), "{work}");
    assert!(
        work.io().is_some_and(is_no_space),
        "no space survives: {work}"
    );
}

/// N10: the snapshot is the state machine and nothing else: no session table.
#[test]
fn n10_the_snapshot_holds_no_session_table() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut settings = node_settings();
    settings.meta.checkpoint_bytes = 1;
    let node = start(&real_env(), root, settings).unwrap().node;
    node.create_stream("s").unwrap();
    node.create_stream("t").unwrap();
    node.halt();
    let bytes = std::fs::read(root.join("metadata/snapshot.bin")).unwrap();
    assert!(!bytes.windows(8).any(|w| w == b"sessions"));
    let snapshot = cairn_engine::metadata::snapshot::Snapshot::decode(&bytes).unwrap();
    assert!(snapshot.state.stream(0).is_some());
}

/// Item 7's last class: a metadata superblock record left in one readable copy is written
/// again at boot, so both slot files hold two good copies.
#[test]
fn a_metadata_record_left_in_one_copy_is_written_again_at_boot() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = node_with_topic(root, 1, WireOptions::empty());
    node.halt();
    let slots = ["superblock.a", "superblock.b"].map(|n| root.join("metadata").join(n));
    let seq = |p: &Path| {
        let b = std::fs::read(p).unwrap();
        u64::from_le_bytes(b[16..24].try_into().unwrap())
    };
    let newest = if seq(&slots[0]) > seq(&slots[1]) {
        &slots[0]
    } else {
        &slots[1]
    };
    flip_byte(newest, 4096 + 20); // its mirror copy rots
    let booted = boot(root);
    assert!(
        booted
            .plan
            .actions
            .iter()
            .any(|a| matches!(a, MetaAction::RewriteSlot { path } if path == newest)),
        "{:?}",
        booted.plan.actions
    );
    booted.node.halt();
    let again = boot(root);
    assert!(again.plan.actions.is_empty(), "{:?}", again.plan.actions);
    for slot in &slots {
        let b = std::fs::read(slot).unwrap();
        assert_eq!(
            b[..128],
            b[4096..4096 + 128],
            "{}: both copies agree",
            slot.display()
        );
    }
}

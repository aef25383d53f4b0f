//! The node over real files: entities and their rejections, the metadata plane's boot
//! refusals (each with the file and position it names, changing nothing), the directory tree
//! following the journal, consumer groups and retention.

use cairn_engine::config::Durability;
use cairn_engine::metadata::journal::{self, Origin};
use cairn_engine::metadata::{MetaAction, MetaRefusal};
use cairn_engine::node::ops::MetaOp;
use cairn_engine::node::retention::Reason;
use cairn_engine::node::tree::Fate;
use cairn_engine::node::{BootError, NodeError};
use cairn_engine::partition::{partition_dir, FenceReason, PartitionIdentity};
use cairn_tests::*;
use iggy_binary_protocol::{
    Operation, WireConsumer, WireOptions, WirePartitioning, WirePollingStrategy,
};
use std::path::Path;

fn refusal(root: &Path) -> MetaRefusal {
    match start(&real_env(), root, node_settings()) {
        Err(BootError::Refused(r)) => r,
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, the node booted"),
    }
}

/// Boots `root` expecting a refusal named `expected`, and checks nothing changed.
fn refused(root: &Path, expected: &str) -> MetaRefusal {
    let before = snapshot(root);
    let r = refusal(root);
    assert_eq!(r.name(), expected, "{r}");
    assert_eq!(snapshot(root), before, "a refused boot changes nothing");
    r
}

/// The names of the node's streams, in id order.
fn stream_names(node: &TestNode) -> Vec<String> {
    node.view()
        .streams()
        .values()
        .map(|s| s.name.clone())
        .collect()
}

fn journal_path(root: &Path) -> std::path::PathBuf {
    root.join("metadata/journal.wal")
}

#[test]
fn the_first_boot_creates_the_root_user_and_everything_survives_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let booted = boot(root);
    assert!(booted.plan.first_boot);
    let node = booted.node;
    assert_eq!(node.view().users()[&0].username, "iggy");
    assert_eq!(node.login("iggy", "iggy").map(|l| l.user_id).unwrap(), 0);
    assert!(node.login("iggy", "wrong").map(|l| l.user_id).is_err());
    assert_eq!(node.last_op(), 1, "the root user is op 1");
    assert_eq!(node.create_stream("orders").unwrap(), 0);
    assert_eq!(node.create_stream("audit").unwrap(), 1);
    node.delete_stream(&named("orders")).unwrap();
    assert_eq!(node.create_stream("billing").unwrap(), 0, "lowest free id");
    let topic = node
        .create_topic(&named("billing"), "invoices", 3, WireOptions::empty())
        .unwrap();
    assert_eq!(topic, 0);
    node.create_group(&id(0), &id(0), "workers").unwrap();
    node.create_user("alice", "secret", 1, None).unwrap();
    let cluster = node.cluster();
    let state = node.view();
    node.halt(); // a crash: nothing is flushed beyond what each op made durable
    let booted = boot(root);
    assert!(!booted.plan.first_boot);
    assert_eq!(booted.node.view(), state);
    assert_eq!(booted.node.cluster(), cluster);
    assert!(booted.plan.actions.is_empty(), "{:?}", booted.plan.actions);
    for p in 0..3 {
        assert!(partition_dir(root, 0, 0, p).join("superblock.a").exists());
    }
    assert_eq!(
        booted
            .node
            .login("alice", "secret")
            .map(|l| l.user_id)
            .unwrap(),
        1
    );
}

#[test]
fn entities_are_addressed_by_id_or_name_and_names_are_unique() {
    let tmp = tempfile::tempdir().unwrap();
    let node = node_with_topic(tmp.path(), 2, WireOptions::empty());
    let dup = node.create_stream("s").unwrap_err();
    assert!(matches!(dup, NodeError::StreamNameExists(_)));
    assert_eq!(dup.code(), 1012);
    let dup = node
        .create_topic(&named("s"), "t", 1, WireOptions::empty())
        .unwrap_err();
    assert_eq!(dup.code(), 2013);
    assert_eq!(node.delete_stream(&id(9)).unwrap_err().code(), 1009);
    assert_eq!(node.delete_stream(&named("nope")).unwrap_err().code(), 1010);
    assert_eq!(
        node.delete_topic(&id(0), &named("nope"))
            .unwrap_err()
            .code(),
        2011
    );
    node.update_stream(&named("s"), "renamed").unwrap();
    assert_eq!(node.view().streams()[&0].name, "renamed");
    node.update_topic(&id(0), &named("t"), "t2", WireOptions::empty())
        .unwrap();
    node.create_partitions(&id(0), &id(0), 2).unwrap();
    assert_eq!(node.view().topic(0, 0).partitions.len(), 4);
    node.delete_partitions(&id(0), &id(0), 3).unwrap();
    assert_eq!(node.view().topic(0, 0).partitions.len(), 1);
    assert!(
        !partition_dir(node.root(), 0, 0, 1).exists(),
        "deleted at the end"
    );
    assert_eq!(
        node.delete_partitions(&id(0), &id(0), 2)
            .unwrap_err()
            .code(),
        2019
    );
    let long = "x".repeat(256);
    assert!(node.create_stream(&long).is_err(), "names are 1-255 bytes");
    assert!(node.create_stream("").is_err());
    assert!(matches!(
        node.create_stream("a\nb"),
        Err(NodeError::InvalidName { .. })
    ));
}

#[test]
fn rejected_topic_options_name_the_reason_and_journal_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = node_with_topic(root, 1, WireOptions::empty());
    let journal = std::fs::read(journal_path(root)).unwrap();
    type Entries<'a> = &'a [(&'a str, u8, &'a [u8])];
    let cases: [(Entries, u32, &str); 6] = [
        (&[("replication_factor", 9, &[3])], 4042, "needs a cluster"),
        (
            &[("compression_algorithm", 2, b"gzip")],
            4042,
            "not supported yet",
        ),
        (&[("enforce_fsync", 3, &[1])], 4041, "durability"),
        (&[("retention", 2, b"1d")], 4041, "unknown"),
        (&[("segment_size", 12, &1000u64.to_le_bytes())], 4042, "512"),
        (&[("durability", 2, b"eventually")], 4042, "durability"),
    ];
    for (entries, code, text) in cases {
        let e = node
            .create_topic(&id(0), "x", 1, topic_options(entries))
            .unwrap_err();
        assert_eq!(e.code(), code, "{e}");
        assert!(e.to_string().contains(text), "{e}");
    }
    for key in ["durability", "consumer_offset_durability", "segment_size"] {
        let e = node
            .update_topic(
                &id(0),
                &id(0),
                "t",
                topic_options(&[(key, 2, b"persisted")]),
            )
            .unwrap_err();
        assert!(e.to_string().contains("create-only"), "{key}: {e}");
    }
    assert_eq!(
        std::fs::read(journal_path(root)).unwrap(),
        journal,
        "refused operations are not journaled"
    );
    assert_eq!(node.view().streams()[&0].topics.len(), 1);
    // The effective values are reported back.
    node.create_topic(
        &id(0),
        "p",
        1,
        topic_options(&[
            ("durability", 2, b"persisted"),
            ("message_expiry", 2, b"1 day"),
        ]),
    )
    .unwrap();
    let options = node.view().topic(0, 1).options;
    assert_eq!(options.durability, Durability::Persisted);
    assert_eq!(options.consumer_offset_durability, Durability::Replicated);
    assert_eq!(options.message_expiry, 86_400_000_000);
}

#[test]
fn a_damaged_journal_entry_below_the_durable_end_refuses_boot() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = node_with_topic(root, 1, WireOptions::empty());
    node.halt();
    let bytes = std::fs::read(journal_path(root)).unwrap();
    let second = journal::scan(&bytes, cluster_of(root)).entries[1].position;
    flip_byte(&journal_path(root), second + 40);
    match refused(root, "JournalCorrupt") {
        MetaRefusal::JournalCorrupt { path, position, .. } => {
            assert_eq!(path, journal_path(root));
            assert_eq!(position, second);
        }
        other => panic!("{other}"),
    }
}

fn cluster_of(root: &Path) -> u128 {
    let bytes = std::fs::read(journal_path(root)).unwrap();
    journal::decode_at(&bytes, 0).unwrap().cluster
}

/// Appends whole, chained entries after the journal's last one (what a crash between a
/// batch's journal sync and its record leaves).
/// Appends a CreateStream entry per name after the journal's last, unrecorded: each written
/// after the one before it was durable, or all in one write (`one_write`).
fn append_unrecorded(root: &Path, names: &[&str]) -> Vec<u64> {
    append_entries(root, names, false)
}

fn append_entries(root: &Path, names: &[&str], one_write: bool) -> Vec<u64> {
    let path = journal_path(root);
    let mut bytes = std::fs::read(&path).unwrap();
    let scan = journal::scan(&bytes, cluster_of(root));
    let last = scan.entries.last().unwrap().clone();
    let (mut op, mut parent) = (last.op, last.checksum);
    let mut positions = Vec::new();
    for name in names {
        op += 1;
        let body = iggy_binary_protocol::WireEncode::to_bytes(
            &iggy_binary_protocol::requests::streams::CreateStreamRequest {
                name: iggy_binary_protocol::WireName::new(*name).unwrap(),
                options: WireOptions::empty(),
            },
        );
        let commit = if one_write { last.op } else { op - 1 };
        let entry = journal::encode(
            op,
            commit,
            parent,
            last.cluster,
            Operation::CreateStream,
            Origin::default(),
            &body,
        );
        parent = journal::decode_at(&entry, 0).unwrap().checksum;
        positions.push(bytes.len() as u64);
        bytes.extend(entry);
    }
    std::fs::write(&path, bytes).unwrap();
    positions
}

#[test]
fn whole_entries_above_the_durable_end_are_kept_and_a_torn_tail_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    node_with_topic(root, 1, WireOptions::empty()).halt();
    append_unrecorded(root, &["late"]);
    let mut bytes = std::fs::read(journal_path(root)).unwrap();
    let torn_at = bytes.len() as u64;
    bytes.extend_from_slice(&[0xAB; 100]);
    std::fs::write(journal_path(root), &bytes).unwrap();
    let booted = boot(root);
    assert!(matches!(
        booted.plan.actions.as_slice(),
        [MetaAction::TruncateJournal { from, .. }] if *from == torn_at
    ));
    assert!(booted
        .node
        .view()
        .streams()
        .values()
        .any(|s| s.name == "late"));
    booted.node.halt();
    assert_eq!(
        std::fs::metadata(journal_path(root)).unwrap().len(),
        torn_at
    );
    assert!(boot(root).plan.actions.is_empty());
}

#[test]
fn damage_followed_by_a_whole_entry_is_interior_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    node_with_topic(root, 1, WireOptions::empty()).halt();
    let positions = append_unrecorded(root, &["one", "two"]);
    flip_byte(&journal_path(root), positions[0] + 20);
    match refused(root, "JournalInteriorCorruption") {
        MetaRefusal::JournalInteriorCorruption {
            position,
            later_entry,
            ..
        } => assert_eq!((position, later_entry), (positions[0], positions[1])),
        other => panic!("{other}"),
    }
}

/// A crash tears a write sector by sector: the first entry of a two-entry write can be lost
/// while the second lands whole. Neither was ever durable (the second's commit number says
/// it was written with the first, before any sync): a torn tail, not interior damage.
#[test]
fn damage_followed_only_by_entries_of_its_own_write_is_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    node_with_topic(root, 1, WireOptions::empty()).halt();
    let positions = append_entries(root, &["one", "two"], true);
    let journal = journal_path(root);
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes[positions[0] as usize..positions[0] as usize + 512].fill(0);
    std::fs::write(&journal, &bytes).unwrap();
    let booted = boot(root);
    assert!(
        matches!(
            booted.plan.actions.as_slice(),
            [MetaAction::TruncateJournal { from, .. }] if *from == positions[0]
        ),
        "{:?}",
        booted.plan.actions
    );
    let names = stream_names(&booted.node);
    assert!(!names.iter().any(|n| n == "one" || n == "two"), "{names:?}");
    booted.node.halt();
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), positions[0]);
}

#[test]
fn a_journal_cut_below_its_durable_end_refuses_boot() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    node_with_topic(root, 1, WireOptions::empty()).halt();
    let len = std::fs::metadata(journal_path(root)).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(journal_path(root))
        .unwrap();
    file.set_len(len - 10).unwrap();
    match refused(root, "JournalShorterThanDurable") {
        MetaRefusal::JournalShorterThanDurable {
            len: found,
            durable_len,
            ..
        } => assert_eq!((found, durable_len), (len - 10, len)),
        other => panic!("{other}"),
    }
}

/// A node that checkpointed: its journal was emptied into the snapshot.
fn checkpointed(root: &Path) {
    let mut settings = node_settings();
    settings.meta.checkpoint_bytes = 1;
    let node = start(&real_env(), root, settings).unwrap().node;
    node.create_stream("s").unwrap();
    node.create_topic(&id(0), "t", 2, WireOptions::empty())
        .unwrap();
    // The checkpoint follows the answer; the owner's next answer follows the checkpoint.
    assert!(node.create_stream("s").is_err());
    assert!(root.join("metadata/snapshot.bin").exists());
    assert_eq!(std::fs::metadata(journal_path(root)).unwrap().len(), 0);
    node.halt();
}

/// A crash between a checkpoint's rename and its journal cut leaves the journal holding ops
/// the snapshot has. Rot in one of those entries, with whole ones after it written later,
/// is damage only in what the snapshot already holds: boot empties the journal, it does
/// not refuse.
#[test]
fn damage_in_entries_the_snapshot_already_holds_empties_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = boot(root).node;
    for name in ["a", "b", "c"] {
        node.create_stream(name).unwrap();
    }
    node.halt();
    let old = std::fs::read(journal_path(root)).unwrap();
    let entries = journal::scan(&old, cluster_of(root)).entries;
    assert!(
        entries.len() >= 4,
        "the root user and three streams, each its own write"
    );
    let mut settings = node_settings();
    settings.meta.checkpoint_bytes = 1;
    let node = start(&real_env(), root, settings).unwrap().node;
    node.create_stream("d").unwrap();
    assert!(node.create_stream("d").is_err(), "the checkpoint is done");
    node.halt();
    assert_eq!(std::fs::metadata(journal_path(root)).unwrap().len(), 0);
    // The journal as the interrupted cut left it, with rot in its second entry.
    let mut leftover = old.clone();
    leftover[entries[1].position as usize + 100] ^= 1;
    std::fs::write(journal_path(root), &leftover).unwrap();
    let booted = boot(root);
    assert!(
        matches!(
            booted.plan.actions.as_slice(),
            [MetaAction::TruncateJournal { from: 0, .. }]
        ),
        "{:?}",
        booted.plan.actions
    );
    let names = stream_names(&booted.node);
    assert_eq!(names, ["a", "b", "c", "d"]);
    booted.node.halt();
    assert_eq!(std::fs::metadata(journal_path(root)).unwrap().len(), 0);
}

#[test]
fn a_checkpoint_boots_from_the_snapshot_and_replays_what_follows() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    checkpointed(root);
    let node = boot(root).node;
    assert_eq!(node.view().topic(0, 0).partitions.len(), 2);
    node.create_stream("after").unwrap();
    let state = node.view();
    node.halt();
    let booted = boot(root);
    assert_eq!(
        booted.plan.replayed.len(),
        1,
        "one entry after the snapshot"
    );
    assert_eq!(booted.node.view(), state);
}

#[test]
fn a_missing_or_different_snapshot_refuses_boot() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("n");
    checkpointed(&original);
    let missing = tmp.path().join("missing");
    copy_dir(&original, &missing);
    std::fs::remove_file(missing.join("metadata/snapshot.bin")).unwrap();
    match refused(&missing, "SnapshotMissing") {
        MetaRefusal::SnapshotMissing { path, .. } => {
            assert_eq!(path, missing.join("metadata/snapshot.bin"))
        }
        other => panic!("{other}"),
    }
    let damaged = tmp.path().join("damaged");
    copy_dir(&original, &damaged);
    flip_byte(&damaged.join("metadata/snapshot.bin"), 10);
    refused(&damaged, "SnapshotMismatch");
    // A temporary snapshot beside it that is not the recorded one either (a later
    // checkpoint's, torn) is not taken in its place: the refusal still names the snapshot.
    let temp = damaged.join("metadata/snapshot.bin.tmp");
    std::fs::write(&temp, b"half a later checkpoint").unwrap();
    match refused(&damaged, "SnapshotMismatch") {
        MetaRefusal::SnapshotMismatch { path, .. } => {
            assert_eq!(path, damaged.join("metadata/snapshot.bin"))
        }
        other => panic!("{other}"),
    }
    // An older snapshot (another checkpoint's) in its place.
    let older = tmp.path().join("older");
    copy_dir(&original, &older);
    let mut settings = node_settings();
    settings.meta.checkpoint_bytes = 1;
    let node = start(&real_env(), &older, settings).unwrap().node;
    let old_snapshot = std::fs::read(older.join("metadata/snapshot.bin")).unwrap();
    node.create_stream("newer").unwrap();
    assert!(
        node.create_stream("newer").is_err(),
        "the checkpoint is done"
    );
    node.halt();
    std::fs::write(older.join("metadata/snapshot.bin"), old_snapshot).unwrap();
    refused(&older, "SnapshotMismatch");
}

/// A slot file holding the other slot's record (a copy of it, or a restore that swapped
/// them), or longer than one slot, is not a superblock cairn wrote there: boot refuses and
/// names the file rather than trust either.
#[test]
fn a_superblock_in_the_wrong_slot_or_oversized_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("n");
    node_with_topic(&root, 1, WireOptions::empty()).halt();
    let [a, b] = ["superblock.a", "superblock.b"].map(|n| root.join("metadata").join(n));
    for (from, to) in [(&a, &b), (&b, &a)] {
        let copied = tmp.path().join("copied");
        let _ = std::fs::remove_dir_all(&copied);
        copy_dir(&root, &copied);
        let target = copied.join("metadata").join(to.file_name().unwrap());
        std::fs::copy(
            copied.join("metadata").join(from.file_name().unwrap()),
            &target,
        )
        .unwrap();
        match refused(&copied, "SuperblockMisplaced") {
            MetaRefusal::SuperblockMisplaced { path, detail } => {
                assert_eq!(path, target);
                assert!(detail.contains("belongs in the other slot"), "{detail}");
            }
            other => panic!("{other}"),
        }
    }
    let long = tmp.path().join("long");
    copy_dir(&root, &long);
    let slot = long.join("metadata/superblock.a");
    append_to_file(&slot, &[0; 512]);
    match refused(&long, "SuperblockMisplaced") {
        MetaRefusal::SuperblockMisplaced { path, detail } => {
            assert_eq!(path, slot);
            assert!(detail.contains("longer than one slot"), "{detail}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn both_superblocks_damaged_refuse_and_data_without_metadata_is_never_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("n");
    node_with_topic(&root, 1, WireOptions::empty()).halt();
    let damaged = tmp.path().join("damaged");
    copy_dir(&root, &damaged);
    for slot in ["superblock.a", "superblock.b"] {
        flip_byte(&damaged.join("metadata").join(slot), 20);
        flip_byte(&damaged.join("metadata").join(slot), 4096 + 20);
    }
    refused(&damaged, "NoSuperblock");
    let orphaned = tmp.path().join("orphaned");
    copy_dir(&root, &orphaned);
    std::fs::remove_dir_all(orphaned.join("metadata")).unwrap();
    refused(&orphaned, "DataWithoutMetadata");
}

#[test]
fn the_journal_is_the_truth_for_the_tree_and_nothing_unaccounted_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = node_with_topic(root, 2, WireOptions::empty());
    node.create_topic(&id(0), "gone", 1, WireOptions::empty())
        .unwrap();
    let gone = partition_dir(root, 0, 1, 0);
    let saved = tmp.path().join("saved");
    copy_dir(&gone, &saved);
    let records = RecordsLost::from_now(root);
    node.delete_topic(&id(0), &named("gone")).unwrap();
    node.halt();
    // A crash between journaling the delete and removing the files (the records after it
    // lost) leaves them: the journal's op deleted that identity, so boot removes it.
    copy_dir(&saved, &gone);
    records.lose();
    // A partition the metadata has loses its directory.
    std::fs::remove_dir_all(partition_dir(root, 0, 0, 1)).unwrap();
    // Directories nothing accounts for: the deleted partition again, under a topic the
    // metadata never had; and a copy of partition 0, whose identity the metadata has.
    let stray = partition_dir(root, 0, 5, 0);
    copy_dir(&saved, &stray);
    let copy = partition_dir(root, 0, 6, 0);
    copy_dir(&partition_dir(root, 0, 0, 0), &copy);
    let booted = boot(root);
    assert_eq!(
        booted.report.removed,
        vec![gone.clone(), root.join("streams/0/topics/1")],
        "the deleted topic's directory is removed"
    );
    assert!(!gone.exists());
    assert!(stray.exists() && copy.exists(), "never removed");
    let tree = &booted.report.tree;
    let fate = |dir: &Path| tree.paths.iter().find(|p| p.dir == dir).map(|p| p.fate);
    assert_eq!(fate(&stray), Some(Fate::Unaccounted), "{tree:?}");
    assert_eq!(fate(&copy), Some(Fate::Unaccounted), "{tree:?}");
    let missing = booted.node.info((0, 0, 1)).unwrap();
    assert!(matches!(
        missing.fence,
        Some(FenceReason::DirectoryMissing { dir }) if dir == partition_dir(root, 0, 0, 1)
    ));
    assert!(
        !partition_dir(root, 0, 0, 1).exists(),
        "never recreated empty"
    );
    assert!(matches!(
        booted.node.info((0, 0, 0)).unwrap().fence,
        Some(FenceReason::IdentityDuplicated { other, .. }) if other == copy
    ));
}

/// The metadata superblock records as they are now; [`RecordsLost::lose`] puts them back,
/// as a power loss after lying syncs of every record written in between would.
struct RecordsLost(Vec<(std::path::PathBuf, Vec<u8>)>);

impl RecordsLost {
    fn from_now(root: &Path) -> RecordsLost {
        let slots = ["superblock.a", "superblock.b"].map(|n| root.join("metadata").join(n));
        RecordsLost(
            slots
                .into_iter()
                .map(|p| {
                    let bytes = std::fs::read(&p).unwrap();
                    (p, bytes)
                })
                .collect(),
        )
    }

    fn lose(self) {
        for (path, bytes) in self.0 {
            std::fs::write(path, bytes).unwrap();
        }
    }
}

/// Boots and reads every message of partition `key`.
fn messages_after_boot(root: &Path, key: (u32, u32, u32)) -> (cairn_tests::node::Booted, usize) {
    let booted = boot(root);
    let count = read_node(&booted.node, key).len();
    (booted, count)
}

#[test]
fn redone_directory_work_keeps_a_partition_that_already_holds_messages() {
    // The superblock record after a create was lost (a lying sync, then a power loss): boot
    // replays the create from the journal and redoes its directory work, but the partition
    // it made has taken acknowledged messages since. Redoing means proving it is there.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = boot(root).node;
    node.create_stream("s").unwrap();
    let records = RecordsLost::from_now(root);
    let persisted = topic_options(&[("durability", 2, b"persisted")]);
    node.create_topic(&id(0), "t", 1, persisted).unwrap();
    let sent = node.send_to(0, batch(1, 4, 10));
    assert!(sent.ack.durable);
    node.halt();
    records.lose();
    let (booted, count) = messages_after_boot(root, (0, 0, 0));
    assert!(
        matches!(
            booted.plan.replayed.last().map(|r| &r.meta_op),
            Some(MetaOp::CreateTopic(_))
        ),
        "the create is replayed"
    );
    let tree = &booted.report.tree;
    assert!(
        tree.paths
            .iter()
            .any(|p| p.key == (0, 0, 0) && p.fate == Fate::Open),
        "the redone create finds its partition and opens it: {tree:?}"
    );
    assert_eq!(count, 4, "acknowledged messages kept");
}

#[test]
fn redone_work_never_undoes_a_later_op_that_re_created_the_partition() {
    // Two records lost: boot redoes a partition's removal and its re-creation, and the
    // re-created partition has taken acknowledged messages since. The removal is superseded.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let persisted = topic_options(&[("durability", 2, b"persisted")]);
    let node = node_with_topic(root, 2, persisted);
    let records = RecordsLost::from_now(root);
    node.delete_partitions(&id(0), &id(0), 1).unwrap();
    node.create_partitions(&id(0), &id(0), 1).unwrap();
    node.send_to(1, batch(1, 4, 10));
    node.halt();
    records.lose();
    let (booted, count) = messages_after_boot(root, (0, 0, 1));
    // The removal is superseded (the directory holds the re-created identity, not the one
    // the removal deleted); the re-creation finds its partition there and opens it.
    let tree = &booted.report.tree;
    assert_eq!(booted.report.redone(), 0, "{tree:?}");
    assert!(
        tree.paths
            .iter()
            .any(|p| p.key == (0, 0, 1) && p.fate == Fate::Open),
        "{tree:?}"
    );
    assert_eq!(count, 4, "acknowledged messages kept");
}

#[test]
fn swapped_partition_directories_are_fenced_not_adopted() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    node_with_topic(root, 2, WireOptions::empty()).halt();
    let (a, b) = (partition_dir(root, 0, 0, 0), partition_dir(root, 0, 0, 1));
    let aside = tmp.path().join("aside");
    std::fs::rename(&a, &aside).unwrap();
    std::fs::rename(&b, &a).unwrap();
    std::fs::rename(&aside, &b).unwrap();
    let booted = boot(root);
    for (p, found_partition) in [(0, 1), (1, 0)] {
        match booted.node.info((0, 0, p)).unwrap().fence.as_ref() {
            Some(FenceReason::SuperblockIdentity {
                expected, found, ..
            }) => {
                assert_eq!(expected.partition_id, p);
                assert_eq!(found.partition_id, found_partition);
            }
            other => panic!("partition {p}: {other:?}"),
        }
    }
    // A directory from another node: same ids, another cluster's nonce.
    let other = tmp.path().join("other");
    node_with_topic(&other, 1, WireOptions::empty()).halt();
    std::fs::remove_dir_all(partition_dir(root, 0, 0, 0)).unwrap();
    copy_dir(
        &partition_dir(&other, 0, 0, 0),
        &partition_dir(root, 0, 0, 0),
    );
    let booted = boot(root);
    assert!(matches!(
        booted.node.info((0, 0, 0)).unwrap().fence,
        Some(FenceReason::SuperblockIdentity { expected, found, .. })
            if expected.nonce != found.nonce && key(&expected) == key(&found)
    ));
}

fn key(identity: &PartitionIdentity) -> (u32, u32, u32) {
    (identity.stream_id, identity.topic_id, identity.partition_id)
}

#[test]
fn purge_empties_messages_and_offsets_and_keeps_the_entities() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = node_with_topic(root, 2, topic_options(&[("durability", 2, b"persisted")]));
    for p in 0..2 {
        node.send(
            &id(0),
            &id(0),
            &WirePartitioning::PartitionId(p),
            batch(u64::from(p), 3, 10),
        )
        .unwrap();
    }
    let consumer = WireConsumer::consumer(id(1));
    node.store_offset(&consumer, &id(0), &id(0), Some(0), 2)
        .unwrap();
    let nonce = node.view().topic(0, 0).partitions[&0].nonce;
    node.purge_topic(&id(0), &id(0)).unwrap();
    assert_ne!(node.view().topic(0, 0).partitions[&0].nonce, nonce);
    assert_eq!(
        node.get_offset(&consumer, &id(0), &id(0), Some(0)).unwrap(),
        None
    );
    let polled = node.poll_topic(
        &consumer,
        Some(0),
        WirePollingStrategy { kind: 3, value: 0 },
        10,
        false,
    );
    assert_eq!(polled.message_count, 0);
    let sent = node.send_to(0, batch(9, 1, 10));
    assert_eq!(
        sent.ack.base_offset, 0,
        "a purged partition starts again at 0"
    );
    node.halt();
    let node = boot(root).node;
    let polled = node.poll_topic(
        &consumer,
        Some(0),
        WirePollingStrategy { kind: 3, value: 0 },
        10,
        false,
    );
    assert_eq!(polled.message_count, 1);
}

#[test]
fn group_members_share_the_partitions_and_poll_them_round_robin() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = node_with_topic(root, 3, WireOptions::empty());
    for p in 0..3 {
        node.send(
            &id(0),
            &id(0),
            &WirePartitioning::PartitionId(p),
            batch(u64::from(p), 2, 10),
        )
        .unwrap();
    }
    let g = node.create_group(&id(0), &id(0), "workers").unwrap();
    let group = WireConsumer {
        kind: iggy_binary_protocol::KIND_CONSUMER_GROUP,
        id: id(g),
    };
    let next = WirePollingStrategy { kind: 5, value: 0 };
    let (ten, twenty) = (node.as_client(10), node.as_client(20));
    assert_eq!(
        ten.poll(&group, &id(0), &id(0), None, next.clone(), 10, true)
            .unwrap_err()
            .code(),
        5006,
        "only members poll"
    );
    ten.join_group(&id(0), &id(0), &named("workers")).unwrap();
    twenty.join_group(&id(0), &id(0), &id(g)).unwrap();
    let (generation, mine) = ten.group_assignment(&id(0), &id(0), &id(g)).unwrap();
    assert_eq!((generation, mine.clone()), (2, vec![0, 2]));
    let mut seen = Vec::new();
    for _ in 0..2 {
        let polled = ten.poll_topic(&group, None, next.clone(), 10, true);
        seen.push(polled.partition_id);
        assert_eq!(polled.message_count, 2);
    }
    seen.sort();
    assert_eq!(seen, vec![0, 2]);
    assert_eq!(
        ten.poll(&group, &id(0), &id(0), Some(1), next.clone(), 10, true)
            .unwrap_err()
            .code(),
        5009
    );
    // The group's offsets moved on: nothing new to read.
    let again = ten.poll_topic(&group, Some(0), next.clone(), 10, true);
    assert_eq!(again.message_count, 0);
    assert_eq!(twenty.disconnect().unwrap(), 1);
    assert_eq!(
        ten.group_assignment(&id(0), &id(0), &id(g)).unwrap().1,
        vec![0, 1, 2],
        "a member that disconnects releases its partitions"
    );
    ten.leave_group(&id(0), &id(0), &id(g)).unwrap();
    assert_eq!(
        ten.leave_group(&id(0), &id(0), &id(g)).unwrap_err().code(),
        5006
    );
}

#[test]
fn the_cleaner_deletes_expired_and_oversized_sealed_segments_oldest_first() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = node_with_topic(
        root,
        1,
        topic_options(&[
            ("durability", 2, b"persisted"),
            ("segment_size", 2, b"1 MiB"),
            ("message_expiry", 2, b"1 h"),
        ]),
    );
    for seed in 0..40 {
        node.send_to(0, batch(seed, 10, 9000));
    }
    let segments = node.info((0, 0, 0)).unwrap().segment_starts.len();
    assert!(segments >= 3, "{segments}");
    let now = real_env().clock.wall_micros();
    assert!(
        node.clean(Some(now)).unwrap().is_empty(),
        "nothing has expired yet"
    );
    let later = now + 2 * 3_600_000_000;
    let deleted = node.clean(Some(later)).unwrap();
    assert_eq!(deleted.len(), segments - 1, "every sealed segment");
    assert!(deleted.iter().all(|d| d.reason == Reason::Expired));
    let after = node.info((0, 0, 0)).unwrap();
    assert_eq!(
        after.segment_starts.len(),
        1,
        "the active segment is never deleted"
    );
    assert!(after.log_start > 0);
    // Size: a budget below one segment keeps the newest sealed segment.
    node.update_topic(
        &id(0),
        &id(0),
        "t",
        topic_options(&[
            ("message_expiry", 12, &0u64.to_le_bytes()),
            ("max_topic_size", 2, b"1 B"),
        ]),
    )
    .unwrap();
    for seed in 100..140 {
        node.send_to(0, batch(seed, 10, 9000));
    }
    let deleted = node.clean(Some(later)).unwrap();
    assert!(deleted.iter().all(|d| d.reason == Reason::OverSize));
    let info = node.info((0, 0, 0)).unwrap();
    assert!(
        info.segment_starts.len() >= 2,
        "the floor keeps the newest sealed segment"
    );
    node.halt();
    let node = boot(root).node;
    assert_eq!(node.info((0, 0, 0)).unwrap().log_start, info.log_start);
}

#[test]
fn explicit_segment_deletion_never_touches_the_active_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let node = node_with_topic(
        tmp.path(),
        1,
        topic_options(&[
            ("durability", 2, b"persisted"),
            ("segment_size", 2, b"1 MiB"),
        ]),
    );
    for seed in 0..30 {
        node.send_to(0, batch(seed, 10, 9000));
    }
    let segments = node.info((0, 0, 0)).unwrap().segment_starts.len() as u32;
    assert!(node.delete_segments(&id(0), &id(0), 0, segments).is_err());
    let deleted = node.delete_segments(&id(0), &id(0), 0, 1).unwrap();
    assert_eq!(deleted.len(), 1);
    assert_eq!(deleted[0].segment.start_offset, 0);
    assert_eq!(
        node.info((0, 0, 0)).unwrap().segment_starts.len() as u32,
        segments - 1
    );
}

#[test]
fn entities_are_read_by_id_or_name_and_a_missing_one_is_none() {
    let tmp = tempfile::tempdir().unwrap();
    let node = node_with_topic(tmp.path(), 2, WireOptions::empty());
    node.create_group(&id(0), &id(0), "g").unwrap();
    let view = node.view();
    assert_eq!(view.stream_id(&named("s")).unwrap(), 0);
    assert_eq!(view.stream_id(&id(5)).unwrap_err().code(), 1009);
    assert_eq!(view.streams().len(), 1);
    let (s, t) = view.topic_ids(&id(0), &named("t")).unwrap();
    let topic = view.topic(s, t);
    assert_eq!((topic.id, topic.partitions.len()), (0, 2));
    assert_eq!(view.topic_ids(&id(0), &id(9)).unwrap_err().code(), 2010);
    assert_eq!(view.topic_ids(&id(9), &id(0)).unwrap_err().code(), 1009);
    assert_eq!(view.group_id(0, 0, &named("g")).unwrap(), 0);
    assert_eq!(view.group_id(0, 0, &id(3)).unwrap_err().code(), 5000);
    assert_eq!(view.user_id(&named("iggy")).unwrap(), 0);
    assert_eq!(view.users().len(), 1);
    // The root user stays.
    assert!(matches!(
        node.delete_user(&id(0)),
        Err(NodeError::RootUser(_))
    ));
    assert_eq!(
        node.create_user("ab", "secret", 1, None)
            .unwrap_err()
            .code(),
        43
    );
    assert_eq!(
        node.create_user("alice", "x", 1, None).unwrap_err().code(),
        44
    );
    let alice = node.create_user("alice", "secret", 1, None).unwrap();
    assert_eq!(
        node.create_user("alice", "secret", 1, None)
            .unwrap_err()
            .code(),
        46
    );
    node.change_password(&id(alice), "secret", "better")
        .unwrap();
    assert_eq!(node.login("alice", "better").unwrap().user_id, alice);
    assert_eq!(node.login("alice", "secret").unwrap_err().code(), 42);
    assert!(node.change_password(&id(alice), "wrong", "other").is_err());
    node.delete_user(&named("alice")).unwrap();
    assert_eq!(node.login("alice", "better").unwrap_err().code(), 42);
}

#[test]
fn each_shard_runs_its_cleaner_on_its_own_timer() {
    let tmp = tempfile::tempdir().unwrap();
    let mut settings = node_settings();
    settings.cleaner_interval = std::time::Duration::from_millis(20);
    let node = start(&real_env(), tmp.path(), settings).unwrap().node;
    node.create_stream("s").unwrap();
    node.create_topic(
        &id(0),
        "t",
        2,
        topic_options(&[
            ("durability", 2, b"persisted"),
            ("segment_size", 2, b"1 MiB"),
            ("message_expiry", 12, &1u64.to_le_bytes()),
        ]),
    )
    .unwrap();
    for seed in 0..60 {
        node.send(
            &id(0),
            &id(0),
            &WirePartitioning::PartitionId((seed % 2) as u32),
            batch(seed, 10, 9000),
        )
        .unwrap();
    }
    // 1 µs expiry: every sealed segment of both partitions goes, on each shard's timer,
    // with nobody asking.
    let mut deleted = Vec::new();
    for _ in 0..500 {
        deleted.extend(node.node.take_deletions());
        let sealed: usize = (0..2)
            .map(|p| node.info((0, 0, p)).unwrap().sealed.len())
            .sum();
        if sealed == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    deleted.extend(node.node.take_deletions());
    assert!(
        deleted.iter().any(|d| d.partition == (0, 0, 0))
            && deleted.iter().any(|d| d.partition == (0, 0, 1)),
        "{deleted:?}"
    );
    assert!(deleted.iter().all(|d| d.reason == Reason::Expired));
}

/// Appends one whole, correctly chained entry of `operation` with `body` after the last.
fn append_entry(root: &Path, operation: Operation, body: &[u8], parent: Option<u128>) -> u64 {
    let path = journal_path(root);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = journal::scan(&bytes, cluster_of(root))
        .entries
        .last()
        .unwrap()
        .clone();
    let entry = journal::encode(
        last.op + 1,
        last.op,
        parent.unwrap_or(last.checksum),
        last.cluster,
        operation,
        Origin::default(),
        body,
    );
    let position = bytes.len() as u64;
    bytes.extend(entry);
    std::fs::write(&path, bytes).unwrap();
    position
}

#[test]
fn a_broken_chain_or_an_entry_that_does_not_apply_refuses_boot() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("n");
    node_with_topic(&original, 1, WireOptions::empty()).halt();
    let create = |name: &str| {
        iggy_binary_protocol::WireEncode::to_bytes(
            &iggy_binary_protocol::requests::streams::CreateStreamRequest {
                name: iggy_binary_protocol::WireName::new(name).unwrap(),
                options: WireOptions::empty(),
            },
        )
    };
    let chain = tmp.path().join("chain");
    copy_dir(&original, &chain);
    let at = append_entry(&chain, Operation::CreateStream, &create("x"), Some(12345));
    match refused(&chain, "JournalChainBroken") {
        MetaRefusal::JournalChainBroken { position, .. } => assert_eq!(position, at),
        other => panic!("{other}"),
    }
    let apply = tmp.path().join("apply");
    copy_dir(&original, &apply);
    // A valid entry that creates a stream whose name is taken.
    let at = append_entry(&apply, Operation::CreateStream, &create("s"), None);
    match refused(&apply, "EntryDoesNotApply") {
        MetaRefusal::EntryDoesNotApply {
            position, error, ..
        } => {
            assert_eq!(position, at);
            assert!(error.contains("already exists"), "{error}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_torn_tail_with_a_damaged_other_slot_refuses_as_uncertain() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    node_with_topic(root, 1, WireOptions::empty()).halt();
    let mut bytes = std::fs::read(journal_path(root)).unwrap();
    let torn_at = bytes.len() as u64;
    bytes.extend_from_slice(&[1u8; 300]);
    std::fs::write(journal_path(root), &bytes).unwrap();
    // Destroy the older slot: the newest one may not be the last record written.
    let slots: Vec<_> = ["superblock.a", "superblock.b"]
        .iter()
        .map(|n| root.join("metadata").join(n))
        .collect();
    let seq = |p: &Path| {
        let b = std::fs::read(p).unwrap();
        u64::from_le_bytes(b[16..24].try_into().unwrap())
    };
    let older = if seq(&slots[0]) < seq(&slots[1]) {
        &slots[0]
    } else {
        &slots[1]
    };
    flip_byte(older, 20);
    flip_byte(older, 4096 + 20);
    match refused(root, "JournalUncertain") {
        MetaRefusal::JournalUncertain { position, slot, .. } => {
            assert_eq!((position, &slot), (torn_at, older));
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_slot_of_the_wrong_parity_refuses_as_misplaced() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    node_with_topic(root, 1, WireOptions::empty()).halt();
    let (a, b) = (
        root.join("metadata/superblock.a"),
        root.join("metadata/superblock.b"),
    );
    std::fs::copy(&a, &b).unwrap();
    match refused(root, "SuperblockMisplaced") {
        MetaRefusal::SuperblockMisplaced { path, .. } => assert_eq!(path, b),
        other => panic!("{other}"),
    }
}

#[test]
fn an_unreadable_journal_refuses_boot_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    node_with_topic(root, 1, WireOptions::empty()).halt();
    let faulty = FaultyDisk::default();
    *faulty.unreadable.lock().unwrap() = Some((journal_path(root), 0, 512));
    let before = snapshot(root);
    match start(&faulty.env(), root, node_settings()) {
        Err(BootError::Refused(MetaRefusal::Unreadable { path, .. })) => {
            assert_eq!(path, journal_path(root))
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("booted"),
    }
    assert_eq!(snapshot(root), before);
}

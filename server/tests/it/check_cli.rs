//! `cairn check` end to end: the real binary over a real data directory made by a node.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use cairn_engine::env::real::block_on;
use cairn_engine::format::BatchBuilder;
use cairn_engine::node::{Node, NodeSettings, PasswordCost};
use cairn_engine::partition::partition_dir;
use iggy_binary_protocol::{WireIdentifier, WireOptions, WirePartitioning};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;
use common::snapshot;

fn check(root: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("check")
        .arg(root)
        .output()
        .expect("run cairn");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The node under `root` on real files, with cheap password hashes.
fn start_node(root: &Path) -> Node {
    let env = cairn_engine::env::real::env().unwrap();
    let settings = NodeSettings {
        password_cost: PasswordCost::CHEAP,
        ..Default::default()
    };
    block_on(Node::start(&env, root, settings)).unwrap().node
}

/// A node with stream 0, topic 0 of three partitions holding messages, closed.
fn node(root: &Path) {
    let node = start_node(root);
    let client = node.client(1);
    let id = WireIdentifier::numeric;
    block_on(client.create_stream("s")).unwrap();
    block_on(client.create_topic(&id(0), "t", 3, WireOptions::empty())).unwrap();
    for p in 0..3 {
        for i in 0..5u128 {
            let mut builder = BatchBuilder::new(1);
            builder.push(i + 1, 0, b"payload", b"");
            block_on(client.send(
                &id(0),
                &id(0),
                &WirePartitioning::PartitionId(p),
                builder.build(),
            ))
            .unwrap();
        }
    }
    block_on(node.shutdown()).unwrap();
}

fn line_of(out: &str, path: &Path) -> String {
    out.lines()
        .find(|l| l.starts_with(&format!("{}: ", path.display())))
        .unwrap_or_else(|| panic!("no line for {}: {out}", path.display()))
        .to_string()
}

#[test]
fn check_reports_clean_repair_fence_removal_and_refusal_without_changing_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("data");
    node(&root);
    let (code, out) = check(&root);
    assert_eq!(code, 0, "{out}");
    assert!(
        line_of(&out, &root.join("metadata")).contains(": clean"),
        "{out}"
    );
    assert_eq!(out.matches(": clean").count(), 4, "{out}");

    // Partition 0: garbage tail -> repair. Partition 1: a flipped byte -> fenced.
    // Partition 2: its directory gone -> fenced. A directory of a topic the metadata does
    // not have, which no journaled op deleted -> kept and reported, never removed.
    let dirs: Vec<PathBuf> = (0..3).map(|p| partition_dir(&root, 0, 0, p)).collect();
    let log0 = dirs[0].join("00000000000000000000.log");
    let mut bytes = std::fs::read(&log0).unwrap();
    bytes.extend_from_slice(&[7u8; 50]);
    std::fs::write(&log0, &bytes).unwrap();
    let log1 = dirs[1].join("00000000000000000000.log");
    let mut bytes1 = std::fs::read(&log1).unwrap();
    bytes1[300] ^= 1;
    std::fs::write(&log1, &bytes1).unwrap();
    std::fs::remove_dir_all(&dirs[2]).unwrap();
    let orphan = partition_dir(&root, 0, 7, 0);
    std::fs::create_dir_all(&orphan).unwrap();

    let before = snapshot(&root);
    let (code, out) = check(&root);
    assert_eq!(code, 1, "{out}");
    assert!(line_of(&out, &dirs[0]).ends_with(": would repair"), "{out}");
    assert!(
        out.contains(&format!(
            "would truncate {} from {} to {} bytes",
            log0.display(),
            bytes.len(),
            bytes.len() - 50
        )),
        "{out}"
    );
    let fenced = line_of(&out, &dirs[1]);
    assert!(
        fenced.contains("FENCED (CorruptBelowDurable)")
            && fenced.contains(&log1.display().to_string())
            && fenced.contains("at position 0, below the durable end"),
        "{fenced}"
    );
    assert!(
        line_of(&out, &dirs[2]).contains("FENCED (DirectoryMissing)"),
        "{out}"
    );
    assert!(
        line_of(&out, &orphan).contains("KEPT (unaccounted)"),
        "{out}"
    );
    let topic_dir = orphan.parent().unwrap().parent().unwrap();
    assert!(
        line_of(&out, topic_dir).contains("KEPT (unaccounted)"),
        "{out}"
    );
    assert_eq!(snapshot(&root), before, "check changes nothing");

    // Damage below the metadata journal's durable end refuses boot.
    let journal = root.join("metadata/journal.wal");
    let mut wal = std::fs::read(&journal).unwrap();
    wal[400] ^= 1;
    std::fs::write(&journal, &wal).unwrap();
    let before = snapshot(&root);
    let (code, out) = check(&root);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_of(&out, &root.join("metadata")).contains("BOOT REFUSED (JournalCorrupt)"),
        "{out}"
    );
    assert_eq!(snapshot(&root), before, "check changes nothing");

    silent_losses_are_refused_in_check(tmp.path());
    let missing = root.join("missing");
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("check")
        .arg(&missing)
        .output()
        .expect("run cairn");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such data directory"));
}

/// Deleting the oldest segment, or a persisted offset file, of a cleanly closed partition is
/// a fence `cairn check` reports, never a log that starts later or an offset read as none.
fn silent_losses_are_refused_in_check(tmp: &Path) {
    let root = tmp.join("losses");
    let node = start_node(&root);
    let client = node.client(1);
    let id = WireIdentifier::numeric;
    block_on(client.create_stream("s")).unwrap();
    let mut options = bytes::BytesMut::new();
    iggy_binary_protocol::encode_user_headers(
        &[
            (2, b"durability", 2, b"persisted"),
            (2, b"consumer_offset_durability", 2, b"persisted"),
            (2, b"segment_size", 2, b"1 MiB"),
        ],
        &mut options,
    );
    let options = WireOptions::from_bytes(options.freeze()).unwrap();
    block_on(client.create_topic(&id(0), "t", 2, options)).unwrap();
    for p in 0..2 {
        for i in 0..30u128 {
            let mut builder = BatchBuilder::new(1);
            builder.push(i + 1, 0, &[5u8; 90_000], b"");
            block_on(client.send(
                &id(0),
                &id(0),
                &WirePartitioning::PartitionId(p),
                builder.build(),
            ))
            .unwrap();
        }
        let consumer = iggy_binary_protocol::WireConsumer::consumer(id(3));
        block_on(client.store_offset(&consumer, &id(0), &id(0), Some(p), 10)).unwrap();
    }
    block_on(node.shutdown()).unwrap();
    let (code, out) = check(&root);
    assert_eq!(code, 0, "{out}");
    let (p0, p1) = (partition_dir(&root, 0, 0, 0), partition_dir(&root, 0, 0, 1));
    std::fs::remove_file(p0.join("00000000000000000000.log")).unwrap();
    std::fs::remove_file(p0.join("00000000000000000000.index")).unwrap();
    std::fs::remove_file(p1.join("offsets/consumers/3")).unwrap();
    let before = snapshot(&root);
    let (code, out) = check(&root);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_of(&out, &p0).contains("FENCED (LogStartMissing)"),
        "{out}"
    );
    assert!(
        line_of(&out, &p1).contains("FENCED (StoredOffsetsMissing)"),
        "{out}"
    );
    assert_eq!(snapshot(&root), before, "check changes nothing");
}

/// A topic options block of string values (kind 2), as `iggy_common` encodes them.
fn string_options(entries: &[(&str, &str)]) -> WireOptions {
    let mut buf = bytes::BytesMut::new();
    let tlv: Vec<(u8, &[u8], u8, &[u8])> = entries
        .iter()
        .map(|(k, v)| (2u8, k.as_bytes(), 2u8, v.as_bytes()))
        .collect();
    iggy_binary_protocol::encode_user_headers(&tlv, &mut buf);
    WireOptions::from_bytes(buf.freeze()).expect("valid options")
}

/// What boot leaves for a read to refuse, and what it would remove, `cairn check` reports
/// and exits non-zero for: a damaged `persisted` consumer offset, and the offset file of a
/// consumer group that no longer exists.
#[test]
fn check_reports_damaged_offsets_and_offsets_of_deleted_groups() {
    use iggy_binary_protocol::WireConsumer;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("data");
    let node = start_node(&root);
    let client = node.client(1);
    let id = WireIdentifier::numeric;
    block_on(client.create_stream("s")).unwrap();
    let options = string_options(&[
        ("durability", "persisted"),
        ("consumer_offset_durability", "persisted"),
    ]);
    block_on(client.create_topic(&id(0), "t", 1, options)).unwrap();
    let mut builder = BatchBuilder::new(1);
    for i in 0..5u128 {
        builder.push(i + 1, 0, b"payload", b"");
    }
    block_on(client.send(
        &id(0),
        &id(0),
        &WirePartitioning::PartitionId(0),
        builder.build(),
    ))
    .unwrap();
    let consumer = WireConsumer::consumer(id(4));
    block_on(client.store_offset(&consumer, &id(0), &id(0), Some(0), 2)).unwrap();
    let g = block_on(client.create_group(&id(0), &id(0), "doomed")).unwrap();
    let group = WireConsumer::consumer_group(id(g));
    block_on(client.store_offset(&group, &id(0), &id(0), Some(0), 3)).unwrap();
    let dir = partition_dir(&root, 0, 0, 0);
    let group_file = dir.join(format!("offsets/groups/{g}"));
    let saved = std::fs::read(&group_file).unwrap();
    block_on(client.delete_group(&id(0), &id(0), &id(g))).unwrap();
    block_on(node.shutdown()).unwrap();
    let (code, out) = check(&root);
    assert_eq!(code, 0, "{out}");

    // The deleted group's file comes back (a leftover no journaled op accounts for), and
    // the consumer's offset file rots.
    std::fs::write(&group_file, &saved).unwrap();
    let consumer_file = dir.join("offsets/consumers/4");
    let mut bytes = std::fs::read(&consumer_file).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&consumer_file, &bytes).unwrap();
    let before = snapshot(&root);
    let (code, out) = check(&root);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "would remove the offset of consumer group {g}: the group no longer exists"
        )),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("DAMAGED offset")
                && l.contains(&consumer_file.display().to_string())),
        "{out}"
    );
    assert_eq!(snapshot(&root), before, "check changes nothing");
}

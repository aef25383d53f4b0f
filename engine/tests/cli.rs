//! `cairn check` end to end: the real binary over a real data directory.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use cairn_engine::config::{PartitionSettings, TopicConfig};
use cairn_engine::format::BatchBuilder;
use cairn_engine::partition::{partition_dir, Partition};
use std::process::Command;

fn check(root: &std::path::Path) -> (i32, String) {
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

#[test]
fn check_reports_clean_repair_and_fence_without_changing_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let env = cairn_engine::env::real::env().unwrap();
    let settings = PartitionSettings::default();
    for p in 0..2u32 {
        let dir = partition_dir(root, 0, 0, p);
        let mut partition =
            Partition::create(&env, &dir, u64::from(p), TopicConfig::default(), settings).unwrap();
        for i in 0..5u128 {
            let mut builder = BatchBuilder::new(1);
            builder.push(i, 0, b"payload", b"");
            partition.append(builder.build()).unwrap();
        }
        partition.close().unwrap();
    }
    let (code, out) = check(root);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches(": clean").count(), 2, "{out}");

    // Partition 0: garbage tail -> repair. Partition 1: a flipped byte -> fenced.
    let log0 = partition_dir(root, 0, 0, 0).join("00000000000000000000.log");
    let mut bytes = std::fs::read(&log0).unwrap();
    bytes.extend_from_slice(&[7u8; 50]);
    std::fs::write(&log0, &bytes).unwrap();
    let log1 = partition_dir(root, 0, 0, 1).join("00000000000000000000.log");
    let mut bytes1 = std::fs::read(&log1).unwrap();
    bytes1[300] ^= 1;
    std::fs::write(&log1, &bytes1).unwrap();

    let (code, out) = check(root);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("would repair") && out.contains("would truncate"),
        "{out}"
    );
    assert!(
        out.contains("FENCED") && out.contains("position 0"),
        "{out}"
    );
    assert_eq!(
        std::fs::read(&log0).unwrap(),
        bytes,
        "check changes nothing"
    );

    let (code, out) = check(&root.join("missing"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no partitions found"));
}

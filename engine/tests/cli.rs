//! `cairn check` end to end: the real binary over a real data directory.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use cairn_engine::config::{PartitionSettings, TopicConfig};
use cairn_engine::format::BatchBuilder;
use cairn_engine::partition::{partition_dir, Partition, PartitionIdentity};
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
        let mut partition = Partition::create(
            &env,
            &dir,
            PartitionIdentity::bare(p),
            TopicConfig::default(),
            settings,
        )
        .unwrap();
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
    let dir0 = partition_dir(root, 0, 0, 0);
    let dir1 = partition_dir(root, 0, 0, 1);
    let line_of = |dir: &std::path::Path| {
        out.lines()
            .find(|l| l.starts_with(&format!("{}: ", dir.display())))
            .unwrap_or_else(|| panic!("no line for {}: {out}", dir.display()))
            .to_string()
    };
    assert!(line_of(&dir0).ends_with(": would repair"), "{out}");
    assert!(
        out.contains(&format!(
            "would truncate {} from {} to {} bytes",
            log0.display(),
            bytes.len(),
            bytes.len() - 50
        )),
        "{out}"
    );
    let fenced = line_of(&dir1);
    assert!(
        fenced.contains("FENCED")
            && fenced.contains(&log1.display().to_string())
            && fenced.contains("at position 0, below the durable end"),
        "{fenced}"
    );
    assert_eq!(
        std::fs::read(&log0).unwrap(),
        bytes,
        "check changes nothing"
    );
    assert_eq!(
        std::fs::read(&log1).unwrap(),
        bytes1,
        "check changes nothing"
    );

    let missing = root.join("missing");
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("check")
        .arg(&missing)
        .output()
        .expect("run cairn");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such data directory"));
}

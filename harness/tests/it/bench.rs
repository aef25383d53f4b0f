//! `cairn-harness bench <kind>`, each kind tiny against its own in-process server: the last
//! line's shape, and the counts the report states against what was sent and what the server
//! holds (GetStreams per bench stream, GetStats overall).

use serde_json::Value;
use std::process::Command;

const PRODUCERS: u64 = 2;
const CONSUMERS: u64 = 2;
const BATCHES: u64 = 20;
const PER_BATCH: u64 = 10;
const SIZE: u64 = 100;
/// What one run sends (and, for consumer kinds, what the fill phase sends and is read).
const TOTAL: u64 = 2 * BATCHES * PER_BATCH;

/// Runs the bench, checks the last line's shape, returns the JSON report.
fn bench(kind: &str, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let output = Command::new(env!("CARGO_BIN_EXE_cairn-harness"))
        .args(["bench", kind])
        .args(["--producers", &PRODUCERS.to_string()])
        .args(["--consumers", &CONSUMERS.to_string()])
        .args(["--batches", &BATCHES.to_string()])
        .args(["--messages-per-batch", &PER_BATCH.to_string()])
        .args(["--message-size", &SIZE.to_string()])
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .args(extra)
        .env_remove("CAIRN_PASSWORD")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bench {kind} failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let last = stdout.lines().last().expect("some output");
    check_last_line(kind, last);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["kind"], kind);
    // The last line states the measured phase's numbers.
    let measured = &report["measured"];
    let mb = measured["mb_per_s"].as_f64().unwrap();
    assert!(
        last.contains(&format!("mb_per_s={mb:.2} ")),
        "{last} vs {mb}"
    );
    // The in-process server's data directory is gone.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "report.json")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    report
}

fn check_last_line(kind: &str, line: &str) {
    let words: Vec<&str> = line.split(' ').collect();
    assert_eq!(words.len(), 6, "{line}");
    assert_eq!(&words[..2], ["bench", kind], "{line}");
    for (word, (key, decimals)) in words[2..].iter().zip([
        ("mb_per_s", 2),
        ("msg_per_s", 0),
        ("p50_ms", 2),
        ("p99_ms", 2),
    ]) {
        let value = word
            .strip_prefix(key)
            .and_then(|w| w.strip_prefix('='))
            .unwrap_or_else(|| panic!("{word} in {line} is not {key}=…"));
        let fraction = value.split_once('.').map_or(0, |(_, f)| f.len());
        assert_eq!(fraction, decimals, "{key} in {line}");
        let number: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("{value} in {line}"));
        assert!(number.is_finite() && number >= 0.0, "{line}");
    }
    assert!(!line.contains("msg_per_s=0 "), "nothing measured: {line}");
}

fn phase<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == name)
        .unwrap_or_else(|| panic!("no phase {name} in {report}"))
}

fn count(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("{value} is not a count"))
}

/// The server holds exactly what was sent: per bench stream (checked by the bench, summed
/// here) and overall (GetStats).
fn server_holds(report: &Value, messages: u64) {
    assert_eq!(count(&report["server"]["stats_messages_count"]), messages);
}

#[test]
fn pinned_producer() {
    let report = bench("pinned-producer", &[]);
    let p = phase(&report, "pinned-producer");
    assert_eq!(count(&p["messages"]), TOTAL);
    assert_eq!(count(&p["bytes"]), TOTAL * SIZE);
    assert_eq!(count(&p["actors"]), PRODUCERS);
    assert_eq!(count(&p["latency_samples"]), PRODUCERS * BATCHES);
    assert_eq!(count(&report["server"]["bench_streams_messages"]), TOTAL);
    assert_eq!(count(&report["server"]["stats_streams_count"]), PRODUCERS);
    server_holds(&report, TOTAL);
}

#[test]
fn pinned_consumer() {
    let report = bench("pinned-consumer", &[]);
    assert_eq!(
        count(&phase(&report, "fill: pinned-producer")["messages"]),
        TOTAL
    );
    let c = phase(&report, "pinned-consumer");
    assert_eq!(count(&c["messages"]), TOTAL);
    assert_eq!(count(&c["bytes"]), TOTAL * SIZE, "payload bytes read back");
    assert_eq!(count(&c["actors"]), CONSUMERS);
    assert_eq!(count(&report["server"]["consumed_goal"]), TOTAL);
    server_holds(&report, TOTAL);
}

#[test]
fn balanced_producer_persisted() {
    let report = bench(
        "balanced-producer",
        &["--partitions", "3", "--durability", "persisted"],
    );
    let p = phase(&report, "balanced-producer");
    assert_eq!(count(&p["messages"]), TOTAL);
    assert_eq!(count(&report["server"]["bench_streams_messages"]), TOTAL);
    assert_eq!(report["shape"]["durability"], "persisted");
    server_holds(&report, TOTAL);
}

#[test]
fn balanced_consumer_group() {
    let report = bench("balanced-consumer-group", &["--partitions", "3"]);
    assert_eq!(
        count(&phase(&report, "fill: balanced-producer")["messages"]),
        TOTAL
    );
    let c = phase(&report, "balanced-consumer-group");
    assert_eq!(
        count(&c["messages"]),
        TOTAL,
        "the group read every message once"
    );
    assert_eq!(count(&c["bytes"]), TOTAL * SIZE);
    server_holds(&report, TOTAL);
}

#[test]
fn end_to_end() {
    let report = bench("end-to-end", &["--partitions", "2"]);
    let p = phase(&report, "end-to-end: producers");
    assert_eq!(count(&p["messages"]), TOTAL);
    let c = phase(&report, "end-to-end");
    assert_eq!(count(&c["messages"]), TOTAL);
    assert_eq!(c["latency_of"], "end-to-end");
    assert_eq!(
        count(&c["latency_samples"]),
        TOTAL,
        "one latency per message"
    );
    assert_eq!(report["measured"]["phase"], "end-to-end");
    server_holds(&report, TOTAL);
}

#[test]
fn address_needs_a_password() {
    let output = Command::new(env!("CARGO_BIN_EXE_cairn-harness"))
        .args(["bench", "pinned-producer", "--address", "127.0.0.1:1"])
        .env_remove("CAIRN_PASSWORD")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--password"), "{stderr}");
}

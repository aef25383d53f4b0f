//! cairn's own client commands, run as the real binary against a real server: the output a
//! user sees (tables and `--json`), the exit codes, and errors that name what went wrong.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::common;

use common::{Cairn, PASSWORD};
use std::process::Command;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn cairn(server: &Cairn, password: &str, args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_clear()
        .env("CAIRN_ADDRESS", server.address.to_string())
        .env("CAIRN_PASSWORD", password)
        .args(args)
        .output()
        .expect("run cairn");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn ok(server: &Cairn, args: &[&str]) -> String {
    let out = cairn(server, PASSWORD, args);
    assert_eq!(out.code, 0, "cairn {args:?}: {}{}", out.stdout, out.stderr);
    out.stdout
}

#[test]
fn the_client_commands_create_send_poll_and_report_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Cairn::start(dir.path());
    assert!(ok(&server, &["ping"]).contains("pong"));
    ok(&server, &["stream", "create", "orders"]);
    ok(
        &server,
        &[
            "topic",
            "create",
            "orders",
            "events",
            "--partitions",
            "2",
            "--durability",
            "persisted",
        ],
    );
    let topics = ok(&server, &["topic", "list", "orders"]);
    assert!(topics.contains("events"), "{topics}");
    // `topic get` shows every option's effective value: the durability asked for, and the
    // offsets' policy the server derived.
    let topic = ok(&server, &["--json", "topic", "get", "orders", "events"]);
    for option in ["durability=persisted", "consumer_offset_durability="] {
        assert!(topic.contains(option), "no {option} in {topic}");
    }
    ok(
        &server,
        &[
            "message",
            "send",
            "orders",
            "events",
            "--partition-id",
            "1",
            "hello",
            "world",
        ],
    );
    let polled = ok(
        &server,
        &[
            "--json",
            "message",
            "poll",
            "orders",
            "events",
            "--partition-id",
            "1",
            "--first",
        ],
    );
    let json: serde_json::Value =
        serde_json::from_str(&polled).unwrap_or_else(|e| panic!("{e}: {polled}"));
    let text = json.to_string();
    assert!(text.contains("hello") && text.contains("world"), "{text}");
    ok(&server, &["group", "create", "orders", "events", "workers"]);
    assert!(ok(&server, &["group", "list", "orders", "events"]).contains("workers"));
    // A group poll: the one-shot session joins, reads what the group is assigned, and
    // commits; the next one goes on from there.
    let group_poll = [
        "--json",
        "message",
        "poll",
        "orders",
        "events",
        "--group",
        "workers",
        "--partition-id",
        "1",
        "--auto-commit",
        "--count",
        "1",
    ];
    let first = ok(&server, &group_poll);
    assert!(first.contains("hello"), "{first}");
    let second = ok(&server, &group_poll);
    assert!(second.contains("world"), "{second}");
    ok(
        &server,
        &["user", "create", "alice", "alice-password", "--can-poll"],
    );
    assert!(ok(&server, &["user", "list"]).contains("alice"));
    let stats = ok(&server, &["--json", "stats"]);
    assert!(
        stats.contains("\"messages\"") || stats.contains("messages"),
        "{stats}"
    );

    let missing = cairn(&server, PASSWORD, &["stream", "get", "nope"]);
    assert_ne!(missing.code, 0);
    assert!(
        missing.stderr.contains("unknown stream `nope`"),
        "{}",
        missing.stderr
    );
    let wrong = cairn(&server, "wrong-password", &["stream", "list"]);
    assert_ne!(wrong.code, 0);
    assert!(
        wrong.stderr.contains("wrong username or password"),
        "{}",
        wrong.stderr
    );
    // alice may poll but not create streams.
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_clear()
        .args([
            "--address",
            &server.address.to_string(),
            "-u",
            "alice",
            "-p",
            "alice-password",
            "stream",
            "create",
            "x",
        ])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    drop(server);
    let gone = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_clear()
        .args(["--address", "127.0.0.1:1", "-p", "x", "ping"])
        .output()
        .unwrap();
    assert_ne!(gone.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("unreachable at 127.0.0.1:1"));
}

#[test]
fn serve_refuses_unknown_keys_and_prints_its_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cairn"));
        command
            .env_clear()
            .current_dir(dir.path())
            .arg("serve")
            .args(args);
        for (k, v) in env {
            command.env(k, v);
        }
        command.output().unwrap()
    };
    let out = run(&[], &["--address", "0.0.0.0:9"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a client flag does not set the listen address"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("CAIRN_TCP_ADDRESS"));
    let out = run(&[("CAIRN_TCP_ADRESS", "127.0.0.1:1")], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("CAIRN_TCP_ADRESS"));
    std::fs::write(dir.path().join("cairn.toml"), "[tcp]\nadress = \"x\"\n").unwrap();
    let out = run(&[], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcp.adress"));
    std::fs::write(dir.path().join("cairn.toml"), "[node]\nshards = 3\n").unwrap();
    let out = run(&[("CAIRN_ROOT_PASSWORD", "hunter22")], &["--print-config"]);
    assert_eq!(out.status.code(), Some(0));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("shards = 3"), "{printed}");
    assert!(printed.contains("127.0.0.1:8090"), "{printed}");
    assert!(
        !printed.contains("hunter22"),
        "the password is masked: {printed}"
    );
}

#[test]
fn the_first_start_without_a_password_generates_one_and_never_uses_a_default() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_cairn"));
    let mut child = command
        .env_clear()
        .env("CAIRN_DATA_DIR", dir.path())
        .env("CAIRN_TCP_ADDRESS", "127.0.0.1:0")
        .env("CAIRN_HTTP_ADDRESS", "127.0.0.1:0")
        .arg("serve")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut password = None;
    let mut address = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.split("with the password `").nth(1) {
            password = Some(rest.split('`').next().unwrap().to_string());
        }
        if let Some(rest) = line.strip_prefix("cairn: listening on ") {
            address = Some(rest.split_whitespace().next().unwrap().to_string());
            break;
        }
    }
    let password = password.expect("the generated password is printed once");
    assert!(password.len() >= 16 && password != "iggy");
    let address = address.unwrap();
    let login = |p: &str| {
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .env_clear()
            .args(["--address", &address, "-p", p, "stream", "list"])
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(login(&password), Some(0));
    assert_ne!(
        login("iggy"),
        Some(0),
        "the library's default password never reaches the server"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The partition a `cairn --json message send` confirmation names.
fn sent_to(server: &Cairn, args: &[&str]) -> u64 {
    let mut all = vec!["--json", "message", "send"];
    all.extend_from_slice(args);
    let out = ok(server, &all);
    let json: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    fn find(v: &serde_json::Value) -> Option<u64> {
        match v {
            serde_json::Value::Object(m) => m
                .get("partition_id")
                .and_then(|p| p.as_u64())
                .or_else(|| m.values().find_map(find)),
            serde_json::Value::Array(a) => a.iter().find_map(find),
            _ => None,
        }
    }
    find(&json).unwrap_or_else(|| panic!("no partition_id in {out}"))
}

#[test]
fn the_server_resolves_balanced_and_key_partitioning_and_names_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let server = Cairn::start(dir.path());
    ok(&server, &["stream", "create", "s"]);
    ok(&server, &["topic", "create", "s", "t", "--partitions", "2"]);
    // cairn's client sends Balanced (kind 1) and MessagesKey (kind 3) for the server to
    // resolve (the Iggy SDK resolves both itself and sends a partition id).
    let balanced: Vec<u64> = (0..4).map(|_| sent_to(&server, &["s", "t", "x"])).collect();
    assert_eq!(balanced, [0, 1, 0, 1], "round robin over the partitions");
    let expected = u64::from(xxhash_rust::xxh32::xxh32(b"customer-7", 0) % 2);
    for _ in 0..3 {
        assert_eq!(
            sent_to(&server, &["--key", "customer-7", "s", "t", "y"]),
            expected
        );
    }
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&server, &["--json", "stats"])).unwrap();
    assert_eq!(stats["messages"], 7, "{stats}");
    assert_eq!(stats["partitions"], 2, "{stats}");
    // A user who may not send is refused with Iggy's Unauthorized, not a login failure.
    ok(
        &server,
        &["user", "create", "bob", "bob-password", "--can-poll"],
    );
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_clear()
        .args([
            "--address",
            &server.address.to_string(),
            "-u",
            "bob",
            "-p",
            "bob-password",
        ])
        .args(["message", "send", "s", "t", "nope"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("code 41"), "{stderr}");
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&server, &["--json", "stats"])).unwrap();
    assert_eq!(stats["messages"], 7, "the refused send wrote nothing");
}

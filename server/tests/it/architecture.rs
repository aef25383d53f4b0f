//! Architecture invariants of the server, checked on its sources (rust-analyzer's "tidy"
//! tests): what a module must never reach for is a property of the code, not of a run.
// A test over the repository's own files.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, with its production code only (up to `#[cfg(test)]`).
fn production_sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let production = text.split("#[cfg(test)]").next().unwrap().to_owned();
                out.push((path, production));
            }
        }
    }
    out.sort();
    assert!(!out.is_empty(), "no sources under {}", dir.display());
    out
}

/// Lines of code, without comments.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.split("//").next().unwrap_or_default()))
}

fn src(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(dir)
}

/// Architecture invariant: the HTTP adapter never builds or reads the binary protocol's
/// bytes. It turns JSON into typed commands and typed replies into JSON; a send's payloads
/// are decoded from base64 straight into the batch, a poll's encoded straight from the
/// stored batches. The codec's encoders and decoders, and the table's wire decoders, are
/// the binary adapter's alone.
#[test]
fn the_http_adapter_never_touches_the_binary_protocols_bytes() {
    const WIRE: [&str; 9] = [
        "WireEncode",
        "WireDecode",
        ".to_bytes(",
        "from_bytes(",
        "SendMessagesEncoder",
        "table::decode",
        "crate::tcp",
        "encoded_size",
        "BytesMut::from(",
    ];
    let mut found = Vec::new();
    for (path, text) in production_sources(&src("http")) {
        for (line_no, code) in code_lines(&text) {
            for token in WIRE {
                if code.contains(token) {
                    found.push(format!("{}:{line_no}: {}", path.display(), code.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the HTTP adapter reaches for wire bytes:\n{}",
        found.join("\n")
    );
}

/// Architecture invariant: the command layer knows no socket, frame or JSON: neither
/// adapter, nor the frame codec, nor HTTP's or JSON's crates.
#[test]
fn the_command_layer_knows_no_transport() {
    const TRANSPORT: [&str; 8] = [
        "crate::tcp",
        "crate::http",
        "axum",
        "hyper",
        "serde_json",
        "tokio",
        "HEADER_SIZE",
        "EvictionReason",
    ];
    let mut found = Vec::new();
    for (path, text) in production_sources(&src("command")) {
        for (line_no, code) in code_lines(&text) {
            for token in TRANSPORT {
                if code.contains(token) && !code.contains("`") {
                    found.push(format!("{}:{line_no}: {}", path.display(), code.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the command layer reaches for a transport:\n{}",
        found.join("\n")
    );
}

/// The checks above can fail: a line that reaches for the codec is found.
#[test]
fn the_scan_finds_a_wire_call() {
    let code = "    let body = request.to_bytes(); // encode";
    assert!(code_lines(code).any(|(_, c)| c.contains(".to_bytes(")));
    assert!(!code_lines("// request.to_bytes()").any(|(_, c)| c.contains(".to_bytes(")));
}

/// The workspace's root (this crate's parent directory).
fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The map stays a map: rust-analyzer's form, under 30 KB; the specification lives in the
/// module docs and `docs/`.
#[test]
fn the_architecture_map_is_under_30_kb() {
    let map = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    assert!(
        map.len() < 30 * 1024,
        "ARCHITECTURE.md is {} bytes: move detail into module docs",
        map.len()
    );
}

/// Every non-test source file is a room a person can hold: at most 1,000 lines.
#[test]
fn no_source_file_is_over_1000_lines() {
    const CRATES: [&str; 7] = [
        "engine/src",
        "faults/src",
        "sim/src",
        "harness/src",
        "server/src",
        "client/src",
        "tests/src",
    ];
    let mut long = Vec::new();
    for dir in CRATES {
        for (path, _) in production_sources(&workspace().join(dir)) {
            if path.file_name().is_some_and(|name| name == "tests.rs") {
                continue;
            }
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            if lines > 1000 {
                long.push(format!("{}: {lines} lines", path.display()));
            }
        }
    }
    assert!(long.is_empty(), "split these by role:\n{}", long.join("\n"));
}

/// A crate's modules, one per file (`a/b.rs` and `a/b/mod.rs` are `a/b`; the crate root is
/// ""), with the production code of each.
fn modules(src: &Path) -> std::collections::BTreeMap<String, String> {
    production_sources(src)
        .into_iter()
        .map(|(path, text)| {
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let name = relative.to_string_lossy().replace('\\', "/");
            let name = name.strip_suffix("/mod").unwrap_or(&name).to_owned();
            let name = match name.as_str() {
                "lib" | "main" => String::new(),
                _ => name,
            };
            (name, text)
        })
        .collect()
}

/// The paths a `crate::` or `super::` reference at `at` names: the path itself, or each item
/// of a `{…}` group that follows it (nested groups are taken at their first level).
fn referenced_paths(code: &str, at: usize) -> Vec<Vec<&str>> {
    let is_path = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let rest = &code[at..];
    let end = rest.find(|c: char| !is_path(c)).unwrap_or(rest.len());
    let head: Vec<&str> = rest[..end].split("::").filter(|p| !p.is_empty()).collect();
    if !rest[..end].ends_with("::") || !rest[end..].starts_with('{') {
        return vec![head];
    }
    let group = &rest[end + 1..];
    let mut depth = 0usize;
    let mut items = Vec::new();
    let mut start = 0;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
        .into_iter()
        .map(|item| {
            let item = item.trim();
            let first = &item[..item.find(|c: char| !is_path(c)).unwrap_or(item.len())];
            let mut path = head.clone();
            path.extend(first.split("::").filter(|p| !p.is_empty() && *p != "self"));
            path
        })
        .collect()
}

/// The import graph of a crate, file by file: an arrow from a module to each module a
/// `crate::` or `super::` path in its code names (the longest module prefix of the path).
/// A module's arrows to its own descendants are left out: a parent declares and re-exports
/// its children, which is a tree, not a circle.
fn import_graph(src: &Path) -> std::collections::BTreeMap<String, Vec<String>> {
    let modules = modules(src);
    let resolve = |parts: &[&str]| -> Option<String> {
        (0..=parts.len())
            .rev()
            .map(|n| parts[..n].join("/"))
            .find(|name| modules.contains_key(name))
    };
    let mut graph = std::collections::BTreeMap::new();
    for (name, text) in &modules {
        let code: String = code_lines(text)
            .map(|(_, c)| c)
            .collect::<Vec<_>>()
            .join("\n");
        let mut arrows = std::collections::BTreeSet::new();
        let starts = code
            .match_indices("crate::")
            .chain(code.match_indices("super::"));
        for (at, _) in starts {
            let preceded = code[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$');
            if preceded {
                continue;
            }
            for path in referenced_paths(&code, at) {
                let mut base: Vec<&str> = name.split('/').filter(|p| !p.is_empty()).collect();
                let mut rest = &path[..];
                if rest.first() == Some(&"crate") {
                    base.clear();
                    rest = &rest[1..];
                } else {
                    while rest.first() == Some(&"super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                }
                let parts: Vec<&str> = base.into_iter().chain(rest.iter().copied()).collect();
                let Some(target) = resolve(&parts) else {
                    continue;
                };
                let descendant = name.is_empty() || target.starts_with(&format!("{name}/"));
                if target != *name && !descendant {
                    arrows.insert(target);
                }
            }
        }
        graph.insert(name.clone(), arrows.into_iter().collect());
    }
    graph
}

/// The circles of a graph: its strongly connected components of more than one module
/// (Tarjan's algorithm).
fn circles(graph: &std::collections::BTreeMap<String, Vec<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a std::collections::BTreeMap<String, Vec<String>>,
        index: std::collections::BTreeMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(walk: &mut Walk<'a>, node: &'a str) {
        let number = walk.index.len();
        walk.index.insert(node, (number, number));
        walk.stack.push(node);
        for next in &walk.graph[node] {
            let next = next.as_str();
            match walk.index.get(next) {
                None => {
                    visit(walk, next);
                    let low = walk.index[next].1;
                    let entry = walk.index.get_mut(node).unwrap();
                    entry.1 = entry.1.min(low);
                }
                Some(&(seen, _)) if walk.stack.contains(&next) => {
                    let entry = walk.index.get_mut(node).unwrap();
                    entry.1 = entry.1.min(seen);
                }
                Some(_) => {}
            }
        }
        let (number, low) = walk.index[node];
        if number == low {
            let at = walk.stack.iter().rposition(|n| *n == node).unwrap();
            let component: Vec<String> = walk.stack.drain(at..).map(str::to_owned).collect();
            if component.len() > 1 {
                walk.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: Default::default(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            visit(&mut walk, node);
        }
    }
    walk.found
}

/// Architecture invariant: the crates' modules import each other without circles, so each
/// can be read (and replaced) from the bottom up. The engine's partition log and metadata
/// plane above all: the canary seams once closed an 11-file circle through them.
#[test]
fn no_crate_has_an_import_circle() {
    let mut found = Vec::new();
    const CRATES: [&str; 6] = [
        "engine/src",
        "faults/src",
        "client/src",
        "server/src",
        "sim/src",
        "harness/src",
    ];
    for dir in CRATES {
        for circle in circles(&import_graph(&workspace().join(dir))) {
            found.push(format!("{dir}: {}", circle.join(" → ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// The circle finder can fail: two modules naming each other are a circle, a parent
/// re-exporting its child is not; a group import names each of its items.
#[test]
fn the_circle_finder_finds_a_circle() {
    let code = "use super::{alpha, beta::Gamma, self};";
    let at = code.find("super::").unwrap();
    assert_eq!(
        referenced_paths(code, at),
        vec![
            vec!["super", "alpha"],
            vec!["super", "beta", "Gamma"],
            vec!["super"]
        ]
    );
    let graph = |edges: &[(&str, &str)]| {
        let mut graph: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (from, to) in edges {
            graph
                .entry(from.to_string())
                .or_default()
                .push(to.to_string());
            graph.entry(to.to_string()).or_default();
        }
        graph
    };
    let circle = circles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]));
    assert_eq!(circle.len(), 1);
    assert_eq!(circle[0].len(), 3);
    assert!(circles(&graph(&[("a", "b"), ("b", "c")])).is_empty());
}

/// Architecture invariant: deliberate bugs stay out of the production graph. No production
/// module names a canary; the simulator installs them through optional hooks.
#[test]
fn no_production_module_names_a_canary() {
    let mut found = Vec::new();
    for dir in ["engine/src", "faults/src", "client/src", "server/src"] {
        for (path, text) in production_sources(&workspace().join(dir)) {
            for (line_no, code) in code_lines(&text) {
                if code.to_lowercase().contains("canary") {
                    found.push(format!("{}:{line_no}: {}", path.display(), code.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "canaries in production code:\n{}",
        found.join("\n")
    );
}

/// A value as the map writes it: `64 MiB`, `100 000`, `10 s` (durations in seconds).
fn map_value(text: &str) -> u64 {
    let (number, unit) = match text.rsplit_once(' ') {
        Some((number, unit)) if unit.chars().all(char::is_alphabetic) => (number, unit),
        _ => (text, ""),
    };
    let number: u64 = number
        .replace(' ', "")
        .parse()
        .unwrap_or_else(|_| panic!("ARCHITECTURE.md: {text:?} is not a number with a unit"));
    let scale = match unit {
        "" | "s" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => panic!("ARCHITECTURE.md: unknown unit {other:?} in {text:?}"),
    };
    number * scale
}

/// The bounds as the code holds them, named as the map's "in the code" column names them.
fn limits_in_code() -> std::collections::BTreeMap<&'static str, u64> {
    use cairn_engine::config::{PartitionSettings, MAX_SEGMENT_SIZE};
    use cairn_engine::env::real;
    use cairn_engine::format::Limits;
    use cairn_engine::metadata::MetaSettings;
    use cairn_engine::node::{self, groups, NodeLimits};
    use cairn_engine::partition::segment;
    use cairn_engine::state::{self, ops, tokens};
    use cairn_server::command::{messages, registry};
    use cairn_server::config::ServerConfig;
    use cairn_server::tcp::{connection, dedup};
    use cairn_server::ServerLimits;
    let n = |value: usize| value as u64;
    let admission = Limits::default();
    let node_limits = NodeLimits::default();
    let config = ServerConfig::default();
    [
        ("Limits::MAX_BATCH_BYTES", Limits::MAX_BATCH_BYTES),
        (
            "Limits::max_messages_per_batch",
            admission.max_messages_per_batch.into(),
        ),
        (
            "Limits::max_payload_bytes",
            admission.max_payload_bytes.into(),
        ),
        (
            "Limits::max_user_headers_bytes",
            admission.max_user_headers_bytes.into(),
        ),
        ("config::MAX_SEGMENT_SIZE", MAX_SEGMENT_SIZE),
        ("segment::READ_WINDOW_BYTES", n(segment::READ_WINDOW_BYTES)),
        ("real::MAX_IOVECS_PER_WRITE", n(real::MAX_IOVECS_PER_WRITE)),
        (
            "PartitionSettings::max_journal_bytes",
            PartitionSettings::default().max_journal_bytes,
        ),
        ("NodeLimits::journal_bytes", node_limits.journal_bytes),
        ("NodeLimits::meta_inbox", n(node_limits.meta_inbox)),
        ("NodeLimits::shard_inbox", n(node_limits.shard_inbox)),
        ("NodeLimits::groups_inbox", n(node_limits.groups_inbox)),
        (
            "NodeLimits::in_flight_per_client",
            n(node_limits.in_flight_per_client),
        ),
        ("NodeLimits::sealed_handles", n(node_limits.sealed_handles)),
        ("shard::MAX_DRAIN", n(node::MAX_DRAIN)),
        ("shard::MAX_PARKED", n(node::MAX_PARKED)),
        ("meta_owner::MAX_BATCH_OPS", n(node::MAX_BATCH_OPS)),
        ("meta_owner::MAX_BATCH_BYTES", n(node::MAX_BATCH_BYTES)),
        ("ops::MAX_BODY_LEN", n(ops::MAX_BODY_LEN)),
        (
            "MetaSettings::checkpoint_bytes",
            MetaSettings::default().checkpoint_bytes,
        ),
        ("state::MAX_STREAMS", n(state::MAX_STREAMS)),
        (
            "state::MAX_TOPICS_PER_STREAM",
            n(state::MAX_TOPICS_PER_STREAM),
        ),
        (
            "state::MAX_PARTITIONS_PER_TOPIC",
            n(state::MAX_PARTITIONS_PER_TOPIC),
        ),
        (
            "state::MAX_GROUPS_PER_TOPIC",
            n(state::MAX_GROUPS_PER_TOPIC),
        ),
        ("state::MAX_USERS", n(state::MAX_USERS)),
        (
            "tokens::MAX_TOKENS_PER_USER",
            n(tokens::MAX_TOKENS_PER_USER),
        ),
        ("groups::MAX_MEMBERSHIPS", n(groups::MAX_MEMBERSHIPS)),
        ("groups::MAX_MEMBERS", n(groups::MAX_MEMBERS)),
        (
            "node::MAX_RECORDED_DELETIONS",
            n(node::MAX_RECORDED_DELETIONS),
        ),
        ("node::MAX_BALANCED_CURSORS", n(node::MAX_BALANCED_CURSORS)),
        ("real::BLOCKING_QUEUE", n(real::BLOCKING_QUEUE)),
        ("tcp.max_frame_bytes", config.tcp.max_frame_bytes),
        (
            "connection::MAX_ANONYMOUS_FRAME",
            connection::MAX_ANONYMOUS_FRAME.into(),
        ),
        ("tcp.max_reply_bytes", config.tcp.max_reply_bytes),
        ("tcp.max_connections", n(config.tcp.max_connections)),
        (
            "tcp.handshake_timeout",
            config.tcp.handshake_timeout.as_secs(),
        ),
        ("tcp.idle_timeout", config.tcp.idle_timeout.as_secs()),
        ("dedup::DEDUP_ENTRIES", n(dedup::DEDUP_ENTRIES)),
        (
            "auth.max_failed_logins",
            config.auth.max_failed_logins.into(),
        ),
        (
            "auth.failed_login_window",
            config.auth.failed_login_window.as_secs(),
        ),
        (
            "registry::MAX_TRACKED_ADDRESSES",
            n(registry::MAX_TRACKED_ADDRESSES),
        ),
        (
            "ServerLimits::drain_timeout",
            ServerLimits::default().drain_timeout.as_secs(),
        ),
        ("http.max_body_bytes", config.http.max_body_bytes),
        (
            "http.max_concurrent_requests",
            n(config.http.max_concurrent_requests),
        ),
        ("http.token_expiry", config.http.token_expiry.as_secs()),
        (
            "messages::DISPATCH_BUDGET_UNITS × DISPATCH_UNIT",
            n(messages::DISPATCH_BUDGET_UNITS * messages::DISPATCH_UNIT),
        ),
    ]
    .into_iter()
    .collect()
}

/// The limits the map names equal the constants and defaults in the code: a bound changed
/// in one place and not the other fails here, and so does a row the code does not know.
#[test]
fn the_maps_limits_are_the_codes() {
    let map = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let section = map
        .split("\n## Limits\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a Limits section");
    let section = section.split("\n## ").next().unwrap();
    let mut code = limits_in_code();
    let mut wrong = Vec::new();
    let mut rows = 0;
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, _, name, value, _] = cells[..] else {
            panic!(
                "ARCHITECTURE.md: a limits row of {} cells: {line}",
                cells.len()
            );
        };
        if name == "in the code" || name.starts_with("---") {
            continue;
        }
        rows += 1;
        let name = name.replace('`', "");
        match code.remove(name.as_str()) {
            None => wrong.push(format!(
                "{name}: the map names it, the test does not know it"
            )),
            Some(actual) if actual != map_value(value) => wrong.push(format!(
                "{name}: the map says {value}, the code holds {actual}"
            )),
            Some(_) => {}
        }
    }
    for name in code.keys() {
        wrong.push(format!("{name}: in the code, missing from the map"));
    }
    assert!(rows > 40, "the Limits table lost its rows");
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's limits:\n{}",
        wrong.join("\n")
    );
}

/// The parser reads the map's notation.
#[test]
fn map_values_parse() {
    assert_eq!(map_value("64 MiB"), 64 << 20);
    assert_eq!(map_value("65 536"), 65_536);
    assert_eq!(map_value("100 000"), 100_000);
    assert_eq!(map_value("10 s"), 10);
    assert_eq!(map_value("1 GiB"), 1 << 30);
}

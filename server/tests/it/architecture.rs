//! Architecture invariants of the server, checked on its sources (rust-analyzer's "tidy"
//! tests): what a module must never reach for is a property of the code, not of a run.
// A test over the repository's own files.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir` but the `tests.rs` files, with its production code only:
/// each `#[cfg(test)]` item blanked (lines kept, so line numbers stay true).
fn production_sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|name| name != "tests.rs")
            {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, without_tests(&text)));
            }
        }
    }
    out.sort();
    assert!(!out.is_empty(), "no sources under {}", dir.display());
    out
}

/// `text` with every item marked `#[cfg(test)]` blanked: up to its `;`, or to the brace
/// that closes its body. Newlines stay.
fn without_tests(text: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let semi = item.find(';').unwrap_or(item.len());
        let open = item.find('{').unwrap_or(item.len());
        let end = if semi < open {
            semi + 1
        } else {
            let mut depth = 0usize;
            let mut end = item.len();
            for (i, c) in item.char_indices().skip(open) {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        };
        out.extend(item[..end].chars().filter(|&c| c == '\n'));
        rest = &item[end..];
    }
    out.push_str(rest);
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
    const WIRE: [&str; 8] = [
        "WireEncode",
        "WireDecode",
        ".to_bytes(",
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
    const CRATES: [&str; 8] = [
        "engine/src",
        "faults/src",
        "sim/src",
        "harness/src",
        "server/src",
        "client/src",
        "tests/src",
        "cluster/src",
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

type Graph = std::collections::BTreeMap<String, Vec<String>>;
/// A path as seen from a module, made absolute (None: another crate's or a local name).
type Absolute<'a> = &'a dyn Fn(&str, &[String]) -> Option<Vec<String>>;

/// A crate's modules, one per file (`a/b.rs` and `a/b/mod.rs` are `a/b`; the crate root is
/// ""), with the code of each: production only, comments and `pub use` re-exports left out.
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
            let code: Vec<&str> = code_lines(&text).map(|(_, code)| code).collect();
            (name, code.join("\n"))
        })
        .collect()
}

fn is_path_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == ':'
}

/// The items of a `{…}` group, `text` starting just after its `{`: each item's path, and
/// the name it is known by (its last segment, or what follows `as`). Nested groups are
/// expanded.
fn group_items(text: &str) -> Vec<(Vec<String>, String)> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&text[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
        .into_iter()
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .flat_map(paths_at)
        .collect()
}

/// The paths named at the start of `text` (`a::b::C`, `a::{b, c::D as E}`), each with the
/// name it is known by.
fn paths_at(text: &str) -> Vec<(Vec<String>, String)> {
    let end = text.find(|c: char| !is_path_char(c)).unwrap_or(text.len());
    let head: Vec<String> = text[..end]
        .split("::")
        .filter(|part| !part.is_empty() && *part != "self")
        .map(str::to_owned)
        .collect();
    let after = text[end..].trim_start();
    if text[..end].ends_with("::") && after.starts_with('{') {
        return group_items(&after[1..])
            .into_iter()
            .map(|(tail, name)| (head.iter().cloned().chain(tail).collect(), name))
            .collect();
    }
    let name = match after.strip_prefix("as ") {
        Some(alias) => alias
            .split(|c: char| !is_path_char(c))
            .next()
            .unwrap_or("")
            .to_owned(),
        None => head.last().cloned().unwrap_or_default(),
    };
    vec![(head, name)]
}

/// A crate's import graph, file by file. An arrow goes from a module to the module that
/// defines what a path in its code names: `crate::`, `super::`, `self::` and a child's
/// name, followed through `pub use` re-exports to the defining module (a parent that only
/// declares and re-exports its children has no arrow to them; one whose code uses them
/// does).
fn import_graph(src: &Path) -> Graph {
    let modules = modules(src);
    // Per module, the names its `pub use`s re-export and the paths they stand for.
    let reexport_at = |code: &str| -> Vec<usize> {
        let mut starts = Vec::new();
        for (at, _) in code.match_indices("use ") {
            let before = code[..at].trim_end();
            if before.ends_with("pub") || before.ends_with(')') && before.contains("pub(") {
                starts.push(at);
            }
        }
        starts
    };
    let mut reexports: std::collections::BTreeMap<&str, Vec<(Vec<String>, String)>> =
        Default::default();
    for (name, code) in &modules {
        for at in reexport_at(code) {
            let statement = &code[at + 4..];
            let statement = &statement[..statement.find(';').unwrap_or(statement.len())];
            reexports
                .entry(name.as_str())
                .or_default()
                .extend(paths_at(statement.trim()));
        }
    }
    let segments = |name: &str| -> Vec<String> {
        name.split('/')
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect()
    };
    // A path as seen from `module`, made absolute; None for another crate's or a local name.
    let absolute = |module: &str, path: &[String]| -> Option<Vec<String>> {
        let mut base = segments(module);
        let first = path.first()?;
        let rest = match first.as_str() {
            "crate" => {
                base.clear();
                &path[1..]
            }
            "super" => {
                let supers = path.iter().take_while(|p| *p == "super").count();
                base.truncate(base.len().saturating_sub(supers));
                &path[supers..]
            }
            _ => {
                let child: Vec<String> = base.iter().chain([first]).cloned().collect();
                if !modules.contains_key(&child.join("/")) {
                    return None;
                }
                path
            }
        };
        Some(base.into_iter().chain(rest.iter().cloned()).collect())
    };
    fn resolve(
        parts: &[String],
        depth: usize,
        modules: &std::collections::BTreeMap<String, String>,
        reexports: &std::collections::BTreeMap<&str, Vec<(Vec<String>, String)>>,
        absolute: Absolute<'_>,
    ) -> Option<String> {
        let (module, rest) = (0..=parts.len())
            .rev()
            .map(|n| (parts[..n].join("/"), &parts[n..]))
            .find(|(name, _)| modules.contains_key(name))?;
        let through = rest.first().and_then(|item| {
            reexports
                .get(module.as_str())?
                .iter()
                .find(|(_, name)| name == item)
        });
        match through {
            Some((path, _)) if depth < 8 => {
                let target = absolute(&module, path)?;
                let target: Vec<String> = target
                    .into_iter()
                    .chain(rest[1..].iter().cloned())
                    .collect();
                resolve(&target, depth + 1, modules, reexports, absolute)
            }
            _ => Some(module),
        }
    }
    let mut graph = Graph::new();
    for (name, code) in &modules {
        let mut code = code.clone();
        let starts = reexport_at(&code);
        for at in starts.into_iter().rev() {
            let end = code[at..].find(';').map_or(code.len(), |e| at + e + 1);
            code.replace_range(at..end, "");
        }
        let children: Vec<String> = modules
            .keys()
            .filter_map(|other| {
                let tail = match name.as_str() {
                    "" => Some(other.as_str()),
                    _ => other.strip_prefix(&format!("{name}/")),
                }?;
                (!tail.is_empty() && !tail.contains('/')).then(|| tail.to_owned())
            })
            .collect();
        let mut arrows = std::collections::BTreeSet::new();
        for (at, c) in code.char_indices() {
            let boundary = code[..at]
                .chars()
                .next_back()
                .is_none_or(|p| !is_path_char(p) && p != '$');
            if !boundary || !(c.is_alphabetic() || c == '_') {
                continue;
            }
            let word_end = code[at..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map_or(code.len(), |e| at + e);
            let word = &code[at..word_end];
            let named =
                matches!(word, "crate" | "super" | "self") || children.iter().any(|c| c == word);
            if !named || !code[word_end..].starts_with("::") {
                continue;
            }
            for (path, _) in paths_at(&code[at..]) {
                let path: Vec<String> = match word {
                    "self" => std::iter::once("self".to_owned()).chain(path).collect(),
                    _ => path,
                };
                let path = match path.first().map(String::as_str) {
                    Some("self") => segments(name)
                        .into_iter()
                        .chain(path[1..].iter().cloned())
                        .collect(),
                    _ => match absolute(name, &path) {
                        Some(path) => path,
                        None => continue,
                    },
                };
                if let Some(target) = resolve(&path, 0, &modules, &reexports, &absolute) {
                    if target != *name {
                        arrows.insert(target);
                    }
                }
            }
        }
        graph.insert(name.clone(), arrows.into_iter().collect());
    }
    graph
}

/// The circles of a graph: its strongly connected components of more than one module
/// (Tarjan's algorithm).
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: std::collections::BTreeMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(walk: &mut Walk<'a>, node: &'a str) {
        let number = walk.index.len();
        walk.index.insert(node, (number, number));
        walk.stack.push(node);
        for next in walk.graph.get(node).into_iter().flatten() {
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
            let mut component: Vec<String> = walk.stack.drain(at..).map(str::to_owned).collect();
            if component.len() > 1 {
                component.sort();
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

/// The room a circle stays in: a module every other member lies under (a folder's `mod.rs`
/// and its files), or None when the circle crosses rooms. The crate root is no room.
fn room_of(circle: &[String]) -> Option<&str> {
    circle
        .iter()
        .find(|room| {
            !room.is_empty()
                && circle
                    .iter()
                    .all(|m| m == *room || m.starts_with(&format!("{room}/")))
        })
        .map(String::as_str)
}

/// Architecture invariant: the modules of each crate import each other without circles
/// across rooms, so each room can be read (and replaced) from the bottom up; and none at all
/// through the engine's partition log or metadata plane (the canary seams once closed an
/// 11-file circle through them). What remains is a folder's parent and its files sharing
/// the parent's types (the node's owners and `Node`; the command layer's handlers and its
/// `Context`; the simulated disk's parts and `SimDisk`), listed in the closing note of the
/// work that made this test.
#[test]
fn no_import_circle_crosses_a_room_or_touches_the_log_or_the_metadata_plane() {
    const CRATES: [&str; 6] = [
        "engine/src",
        "faults/src",
        "client/src",
        "server/src",
        "sim/src",
        "harness/src",
    ];
    let mut found = Vec::new();
    for dir in CRATES {
        for circle in circles(&import_graph(&workspace().join(dir))) {
            let forbidden = dir == "engine/src"
                && circle
                    .iter()
                    .any(|m| m.starts_with("partition") || m.starts_with("metadata"));
            if forbidden || room_of(&circle).is_none() {
                found.push(format!("{dir}: {}", circle.join(" → ")));
            }
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// The circle finder can fail: two modules naming each other are a circle, also when one
/// reaches the other through a re-export; a parent that only re-exports its child is not.
#[test]
fn the_circle_finder_finds_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\npub use b::Thing;\n");
    write(
        "a/mod.rs",
        "mod inner;\npub use inner::Item;\npub fn f() -> crate::Thing { todo!() }\n",
    );
    write("a/inner.rs", "pub struct Item;\n");
    write("b.rs", "use crate::a::{Item};\npub struct Thing(Item);\n#[cfg(test)]\nmod tests { use crate::a; }\n");
    let graph = import_graph(dir.path());
    assert_eq!(
        graph["a"],
        ["b"],
        "crate::Thing resolves through lib.rs's re-export to b"
    );
    assert_eq!(
        graph["b"],
        ["a/inner"],
        "a::Item resolves to where it is defined"
    );
    assert!(circles(&graph).is_empty(), "{graph:?}");
    write("a/inner.rs", "pub struct Item(super::super::b::Thing);\n");
    let found = circles(&import_graph(dir.path()));
    assert_eq!(found, [["a/inner", "b"]]);
    assert_eq!(room_of(&found[0]), None);
    assert_eq!(room_of(&["a".into(), "a/inner".into()]), Some("a"));
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
        .unwrap_or_else(|_| panic!("docs/limits.md: {text:?} is not a number with a unit"));
    let scale = match unit {
        "" | "s" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => panic!("docs/limits.md: unknown unit {other:?} in {text:?}"),
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
    use cairn_server::command::{login, login_limit, messages, replies};
    use cairn_server::config::ServerConfig;
    use cairn_server::http::{admit, listen};
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
        (
            "segment::FIRST_READ_WINDOW_BYTES",
            n(segment::FIRST_READ_WINDOW_BYTES),
        ),
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
        ("NodeLimits::active_handles", n(node_limits.active_handles)),
        (
            "descriptors::MAX_PARTITIONS",
            cairn_server::command::descriptors::MAX_PARTITIONS,
        ),
        ("shard::MAX_DRAIN", n(node::MAX_DRAIN)),
        ("shard::MAX_PARKED", n(node::MAX_PARKED)),
        (
            "shard::MAX_CONCURRENT_PERSISTS",
            n(node::MAX_CONCURRENT_PERSISTS),
        ),
        ("shard::MAX_PERSIST_JOBS", node::MAX_PERSIST_JOBS),
        ("meta_owner::MAX_BATCH_OPS", n(node::MAX_BATCH_OPS)),
        ("meta_owner::WORK_PER_SHARD", n(node::WORK_PER_SHARD)),
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
        ("node::MAX_VERIFIED_LOGINS", n(node::MAX_VERIFIED_LOGINS)),
        ("real::BLOCKING_QUEUE", n(real::BLOCKING_QUEUE)),
        ("tcp.max_frame_bytes", config.tcp.max_frame_bytes),
        (
            "connection::MAX_ANONYMOUS_FRAME",
            connection::MAX_ANONYMOUS_FRAME.into(),
        ),
        (
            "connection::MAX_COMMAND_FRAME",
            n(connection::MAX_COMMAND_FRAME),
        ),
        (
            "connection::REPLY_TIMEOUT",
            connection::REPLY_TIMEOUT.as_secs(),
        ),
        ("limits.buffered_bytes", config.limits.buffered_bytes),
        ("replies::USERS_SHARING", replies::USERS_SHARING),
        ("replies::POLLS_PER_SHARE", replies::POLLS_PER_SHARE),
        ("replies::MIN_ROOM", replies::MIN_ROOM),
        ("replies::OTHER_ROOM", replies::OTHER_ROOM),
        ("login::LOGIN_WAIT", login::LOGIN_WAIT.as_secs()),
        (
            "limits.connections_per_address",
            n(config.limits.connections_per_address),
        ),
        (
            "limits.anonymous_connections",
            n(config.limits.anonymous_connections),
        ),
        (
            "limits.anonymous_per_address",
            n(config.limits.anonymous_per_address),
        ),
        (
            "limits.memberships_per_user",
            n(config.limits.memberships_per_user),
        ),
        (
            "offsets::MAX_CONSUMER_OFFSETS",
            n(cairn_engine::partition::offsets::MAX_CONSUMER_OFFSETS),
        ),
        (
            "admit::BODY_READ_TIMEOUT",
            admit::BODY_READ_TIMEOUT.as_secs(),
        ),
        ("admit::MIN_BODY_RATE", admit::MIN_BODY_RATE),
        (
            "admit::ADMISSION_TIMEOUT",
            admit::ADMISSION_TIMEOUT.as_secs(),
        ),
        ("listen::REPLY_TIMEOUT", listen::REPLY_TIMEOUT.as_secs()),
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
        ("login_limit::MAX_TRACKED", n(login_limit::MAX_TRACKED)),
        (
            "login_limit::MAX_IN_FLIGHT_PER_ADDRESS",
            login_limit::MAX_IN_FLIGHT_PER_ADDRESS.into(),
        ),
        (
            "login_limit::MAX_IN_FLIGHT",
            login_limit::MAX_IN_FLIGHT.into(),
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

/// The limits the map points to (`docs/limits.md`) equal the constants and defaults in the
/// code: a bound changed in one place and not the other fails here, and so does a row the
/// code does not know.
#[test]
fn the_maps_limits_are_the_codes() {
    let section = std::fs::read_to_string(workspace().join("docs/limits.md")).unwrap();
    let map = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    assert!(
        map.contains("(docs/limits.md)"),
        "ARCHITECTURE.md points to the limits"
    );
    let mut code = limits_in_code();
    let mut wrong = Vec::new();
    let mut rows = 0;
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, _, name, value, _] = cells[..] else {
            panic!(
                "docs/limits.md: a limits row of {} cells: {line}",
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
        "docs/limits.md's limits:\n{}",
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

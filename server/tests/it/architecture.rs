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

//! Every class of malformed frame against the real binary, over a raw socket: each gets the
//! status (or eviction) Iggy's protocol gives it, the connection stays usable when the
//! framing is intact and closes when it is not, and the data directory is unchanged.
//! Also: a client that stops reading its replies does not grow the server's memory.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use common::{Cairn, PASSWORD};
use iggy_binary_protocol::requests::streams::CreateStreamRequest;
use iggy_binary_protocol::requests::users::LoginRegisterRequest;
use iggy_binary_protocol::{
    ClientVersionInfo, Command, Operation, RequestHeader, WireEncode, WireName, WireOptions,
    HEADER_SIZE,
};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

struct Raw {
    stream: TcpStream,
    client: u128,
    session: u64,
    request: u64,
}

#[derive(Debug)]
enum Back {
    Reply {
        status: u32,
        operation: u8,
        body: Vec<u8>,
    },
    Eviction {
        reason: u8,
    },
    Closed,
}

fn header(
    client: u128,
    operation: Operation,
    code: u32,
    request: u64,
    session: u64,
    body: &[u8],
) -> [u8; HEADER_SIZE] {
    let mut h = RequestHeader {
        checksum: 0,
        checksum_body: 0,
        cluster: 0,
        size: (HEADER_SIZE + body.len()) as u32,
        view: 0,
        release: 0,
        command: Command::Request,
        replica: 0,
        reserved_frame: [0; 66],
        client,
        request_checksum: 0,
        timestamp: 0,
        request,
        operation,
        operation_padding: [0; 7],
        session,
        user_id: 0,
        reserved: [0; 60],
    };
    if operation == Operation::NonReplicated {
        h.reserved[..4].copy_from_slice(&code.to_le_bytes());
    } else {
        h.request_checksum = u128::from(xxhash_rust::xxh3::xxh3_64(body));
    }
    let mut out = [0u8; HEADER_SIZE];
    out.copy_from_slice(bytemuck::bytes_of(&h));
    out
}

fn login_body(version: u32, user: &str, password: &str) -> Vec<u8> {
    LoginRegisterRequest {
        version_info: ClientVersionInfo {
            protocol_version: version,
            sdk_name: WireName::new("raw-test").unwrap(),
            sdk_version: WireName::new("0.0.1").unwrap(),
        },
        username: WireName::new(user).unwrap(),
        password: password.to_string().into(),
        client_context: None,
    }
    .to_bytes()
    .to_vec()
}

impl Raw {
    fn connect(cairn: &Cairn) -> Raw {
        let stream = TcpStream::connect(cairn.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Raw {
            stream,
            client: 0x5eed,
            session: 0,
            request: 0,
        }
    }

    fn login(cairn: &Cairn) -> Raw {
        let mut raw = Raw::connect(cairn);
        let body = login_body(
            iggy_binary_protocol::IGGY_PROTOCOL_VERSION,
            "iggy",
            PASSWORD,
        );
        let frame = header(raw.client, Operation::Register, 0, 0, 0, &body);
        match raw.exchange(&frame, &body) {
            Back::Reply {
                status: 0, body, ..
            } => {
                raw.session = u64::from_le_bytes(body[8..16].try_into().unwrap());
            }
            other => panic!("login failed: {other:?}"),
        }
        raw
    }

    fn send(&mut self, frame: &[u8], body: &[u8]) {
        self.stream.write_all(frame).unwrap();
        self.stream.write_all(body).unwrap();
    }

    fn read_back(&mut self) -> Back {
        let mut h = [0u8; HEADER_SIZE];
        if self.stream.read_exact(&mut h).is_err() {
            return Back::Closed;
        }
        if h[60] == Command::Eviction as u8 {
            return Back::Eviction { reason: h[255] };
        }
        let size = u32::from_le_bytes(h[48..52].try_into().unwrap()) as usize;
        let mut body = vec![0u8; size - HEADER_SIZE];
        self.stream.read_exact(&mut body).unwrap();
        Back::Reply {
            status: u32::from_le_bytes(h[216..220].try_into().unwrap()),
            operation: h[208],
            body,
        }
    }

    fn exchange(&mut self, frame: &[u8], body: &[u8]) -> Back {
        self.send(frame, body);
        self.read_back()
    }

    /// A NonReplicated request of this session.
    fn read(&mut self, code: u32, body: &[u8]) -> Back {
        let frame = header(
            self.client,
            Operation::NonReplicated,
            code,
            self.request,
            self.session,
            body,
        );
        self.exchange(&frame, body)
    }

    fn ping_ok(&mut self) {
        assert!(
            matches!(self.read(1, &[]), Back::Reply { status: 0, .. }),
            "the connection is still usable"
        );
    }

    fn create_stream_frame(&mut self, name: &str) -> ([u8; HEADER_SIZE], Vec<u8>) {
        self.request += 1;
        let body = CreateStreamRequest {
            name: WireName::new(name).unwrap(),
            options: WireOptions::empty(),
        }
        .to_bytes()
        .to_vec();
        (
            header(
                self.client,
                Operation::CreateStream,
                0,
                self.request,
                self.session,
                &body,
            ),
            body,
        )
    }
}

fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

fn status_of(back: Back) -> u32 {
    match back {
        Back::Reply { status, .. } => status,
        other => panic!("expected a reply, got {other:?}"),
    }
}

#[test]
fn each_malformed_frame_gets_its_answer_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let before = files(dir.path());

    // Before login: a read gets 40, a replicated op is evicted (no session).
    let mut anonymous = Raw::connect(&cairn);
    anonymous.ping_ok();
    assert_eq!(status_of(anonymous.read(201, &[])), 40);
    let (frame, body) = anonymous.create_stream_frame("x");
    assert!(matches!(
        anonymous.exchange(&frame, &body),
        Back::Eviction { reason: 1 }
    ));

    // A protocol version the gate refuses: eviction 14.
    let mut old = Raw::connect(&cairn);
    let body = login_body(0x0000_2800, "iggy", PASSWORD);
    let frame = header(old.client, Operation::Register, 0, 0, 0, &body);
    assert!(matches!(
        old.exchange(&frame, &body),
        Back::Eviction { reason: 14 }
    ));
    // Wrong credentials: eviction 9 (the SDK's InvalidCredentials).
    let mut wrong = Raw::connect(&cairn);
    let body = login_body(
        iggy_binary_protocol::IGGY_PROTOCOL_VERSION,
        "iggy",
        "not-it",
    );
    let frame = header(wrong.client, Operation::Register, 0, 0, 0, &body);
    assert!(matches!(
        wrong.exchange(&frame, &body),
        Back::Eviction { reason: 9 }
    ));

    let mut raw = Raw::login(&cairn);
    // An undecodable body: 3, and the connection stays usable.
    raw.request += 1;
    let garbage = [0xffu8; 7];
    let frame = header(
        raw.client,
        Operation::CreateStream,
        0,
        raw.request,
        raw.session,
        &garbage,
    );
    assert_eq!(status_of(raw.exchange(&frame, &garbage)), 3);
    raw.ping_ok();
    // A request checksum that does not match its body: 4.
    let (mut frame, body) = raw.create_stream_frame("sum");
    frame[144] ^= 1;
    assert_eq!(status_of(raw.exchange(&frame, &body)), 4);
    // Reserved header bytes set: 4.
    let (mut frame, body) = raw.create_stream_frame("reserved");
    frame[230] = 1;
    assert_eq!(status_of(raw.exchange(&frame, &body)), 4);
    // An unknown command code: 3; a known one cairn does not serve: 5.
    assert_eq!(status_of(raw.read(9999, &[])), 3);
    assert_eq!(status_of(raw.read(11, &[])), 5);
    // An unknown stream: Iggy's 1009, the reply echoing the operation.
    let missing = [1u8, 4, 9, 0, 0, 0];
    assert_eq!(status_of(raw.read(301, &missing)), 1009);
    // A replicated request of another session: evicted.
    let (mut frame, body) = raw.create_stream_frame("stale");
    frame[184] ^= 1;
    assert!(matches!(
        raw.exchange(&frame, &body),
        Back::Eviction { reason: 1 }
    ));

    // A frame over the size limit: the connection closes (the framing is broken).
    let mut big = Raw::login(&cairn);
    let mut frame = header(big.client, Operation::NonReplicated, 1, 0, big.session, &[]);
    frame[48..52].copy_from_slice(&(200 * 1024 * 1024u32).to_le_bytes());
    big.stream.write_all(&frame).unwrap();
    assert!(matches!(big.read_back(), Back::Closed));
    // A size below the header: closed too.
    let mut small = Raw::login(&cairn);
    let mut frame = header(
        small.client,
        Operation::NonReplicated,
        1,
        0,
        small.session,
        &[],
    );
    frame[48..52].copy_from_slice(&100u32.to_le_bytes());
    small.stream.write_all(&frame).unwrap();
    assert!(matches!(small.read_back(), Back::Closed));

    let mut fresh = Raw::login(&cairn);
    fresh.ping_ok();
    assert_eq!(
        files(dir.path()),
        before,
        "no rejected request wrote anything"
    );
}

#[test]
fn a_retried_metadata_request_is_answered_from_the_duplicate_table() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let mut raw = Raw::login(&cairn);
    let (frame, body) = raw.create_stream_frame("once");
    let first = raw.exchange(&frame, &body);
    let again = raw.exchange(&frame, &body);
    match (first, again) {
        (
            Back::Reply {
                status: 0,
                body: a,
                operation,
            },
            Back::Reply {
                status: 0, body: b, ..
            },
        ) => {
            assert_eq!(operation, Operation::CreateStream as u8);
            assert_eq!(a, b, "the same reply, not StreamNameAlreadyExists");
        }
        other => panic!("{other:?}"),
    }
    // The same name under a new request number is a new request: refused.
    let (frame, body) = raw.create_stream_frame("once");
    assert_eq!(status_of(raw.exchange(&frame, &body)), 1012);
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn a_client_that_stops_reading_does_not_grow_the_servers_memory() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &[("CAIRN_TCP_IDLE_TIMEOUT", "3s")]);
    let mut raw = Raw::login(&cairn);
    // A stream with one big message, then thousands of polls of it whose replies are never
    // read: the server answers one at a time and blocks on the full socket.
    let (frame, body) = raw.create_stream_frame("mem");
    assert_eq!(status_of(raw.exchange(&frame, &body)), 0);
    let baseline = rss_kib(cairn.child.id());
    let get_streams = header(
        raw.client,
        Operation::NonReplicated,
        201,
        raw.request,
        raw.session,
        &[],
    );
    raw.stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut sent = 0;
    for _ in 0..200_000 {
        if raw.stream.write_all(&get_streams).is_err() {
            break;
        }
        sent += 1;
    }
    let grown = rss_kib(cairn.child.id());
    assert!(sent > 1000, "the requests went out ({sent})");
    assert!(
        grown < baseline + 64 * 1024,
        "the server's memory stays bounded: {baseline} KiB before, {grown} KiB with {sent} unread replies"
    );
    // The stalled connection is closed after the idle timeout; others are served meanwhile.
    let mut other = Raw::login(&cairn);
    other.ping_ok();
}

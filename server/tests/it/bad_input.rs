//! Every class of malformed frame against the real binary, over a raw socket: each gets the
//! status (or eviction) Iggy's protocol gives it, the connection stays usable when the
//! framing is intact and closes when it is not, and the data directory is unchanged.
//! Also: a client that stops reading its replies does not grow the server's memory.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::common;

use common::{snapshot, Cairn, PASSWORD};
use iggy_binary_protocol::requests::streams::CreateStreamRequest;
use iggy_binary_protocol::requests::users::{CreateUserRequest, LoginRegisterRequest};
use iggy_binary_protocol::{
    ClientVersionInfo, Command, Operation, RequestHeader, WireEncode, WireName, WireOptions,
    HEADER_SIZE,
};
use std::io::{Read, Write};
use std::net::TcpStream;
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
        if let Err(other) = raw.register() {
            panic!("login failed: {other:?}");
        }
        raw
    }

    /// Logs in as root on this socket (a Register); the session the reply names becomes
    /// this connection's. Any other answer comes back as the error.
    fn register(&mut self) -> Result<(), Back> {
        self.register_as("iggy", PASSWORD)
    }

    fn register_as(&mut self, user: &str, password: &str) -> Result<(), Back> {
        let body = login_body(iggy_binary_protocol::IGGY_PROTOCOL_VERSION, user, password);
        let frame = header(self.client, Operation::Register, 0, 0, 0, &body);
        match self.exchange(&frame, &body) {
            Back::Reply {
                status: 0, body, ..
            } => {
                self.session = u64::from_le_bytes(body[8..16].try_into().unwrap());
                Ok(())
            }
            other => Err(other),
        }
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

    /// A replicated request of this session (its request number advanced).
    fn replicated(&mut self, operation: Operation, body: &[u8]) -> Back {
        self.request += 1;
        let frame = header(self.client, operation, 0, self.request, self.session, body);
        self.exchange(&frame, body)
    }

    /// Logs the session out (a Logout, its request number advanced); it must be answered.
    fn logout(&mut self) {
        self.request += 1;
        let frame = header(
            self.client,
            Operation::Logout,
            0,
            self.request,
            self.session,
            &[],
        );
        let back = self.exchange(&frame, &[]);
        assert!(matches!(back, Back::Reply { status: 0, .. }), "{back:?}");
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
    let before = snapshot(dir.path());

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
    match raw.read(301, &missing) {
        Back::Reply {
            status, operation, ..
        } => {
            assert_eq!(status, 1009);
            assert_eq!(
                operation,
                Operation::NonReplicated as u8,
                "the operation is echoed"
            );
        }
        other => panic!("{other:?}"),
    }
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
        snapshot(dir.path()),
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

/// A send of one message of `size` bytes to partition 0 of stream 0, topic 0.
fn send_body(size: usize) -> Vec<u8> {
    let mut builder = cairn_engine::format::BatchBuilder::new(1);
    builder.push(1, 0, &vec![7u8; size], &[]);
    let batch = builder.build();
    let mut meta = Vec::new();
    for id in [0u32, 0] {
        meta.extend_from_slice(&[1, 4]);
        meta.extend_from_slice(&id.to_le_bytes());
    }
    meta.extend_from_slice(&[2, 4]);
    meta.extend_from_slice(&0u32.to_le_bytes());
    meta.extend_from_slice(&1u32.to_le_bytes());
    let mut body = (meta.len() as u32).to_le_bytes().to_vec();
    body.extend_from_slice(&meta);
    body.extend_from_slice(&batch);
    body
}

/// A poll of partition 0 of stream 0, topic 0, from offset 0.
fn poll_body() -> Vec<u8> {
    let mut body = vec![1u8, 1, 4, 0, 0, 0, 0];
    for id in [0u32, 0] {
        body.extend_from_slice(&[1, 4]);
        body.extend_from_slice(&id.to_le_bytes());
    }
    body.push(1);
    body.extend_from_slice(&0u32.to_le_bytes());
    body.push(1);
    body.extend_from_slice(&0u64.to_le_bytes());
    body.extend_from_slice(&10u32.to_le_bytes());
    body.push(0);
    body
}

#[test]
fn a_client_that_stops_reading_does_not_grow_the_servers_memory() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &[("CAIRN_TCP_IDLE_TIMEOUT", "3s")]);
    let mut raw = Raw::login(&cairn);
    // A topic holding one 1 MiB message, then up to 100 000 polls of it whose replies are
    // never read: 100 GiB if the server queued them; it answers one at a time and blocks on
    // the full socket instead.
    let (frame, body) = raw.create_stream_frame("mem");
    assert_eq!(status_of(raw.exchange(&frame, &body)), 0);
    raw.request += 1;
    let mut topic = vec![1u8, 4, 0, 0, 0, 0];
    topic.extend_from_slice(&1u32.to_le_bytes());
    topic.extend_from_slice(&[1, b't']);
    let frame = header(
        raw.client,
        Operation::CreateTopic,
        0,
        raw.request,
        raw.session,
        &topic,
    );
    assert_eq!(status_of(raw.exchange(&frame, &topic)), 0);
    raw.request += 1;
    let body = send_body(1024 * 1024);
    let frame = header(
        raw.client,
        Operation::SendMessages,
        0,
        raw.request,
        raw.session,
        &body,
    );
    assert_eq!(status_of(raw.exchange(&frame, &body)), 0);
    let poll = poll_body();
    let reply = raw.read(100, &poll);
    assert!(
        matches!(&reply, Back::Reply { status: 0, body, .. } if body.len() > 1024 * 1024),
        "{reply:?}"
    );
    let baseline = rss_kib(cairn.child.id());
    let mut request = header(
        raw.client,
        Operation::NonReplicated,
        100,
        raw.request,
        raw.session,
        &poll,
    )
    .to_vec();
    request.extend_from_slice(&poll);
    raw.stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut sent = 0;
    for _ in 0..100_000 {
        if raw.stream.write_all(&request).is_err() {
            break;
        }
        sent += 1;
    }
    let grown = rss_kib(cairn.child.id());
    assert!(sent > 100, "the requests went out ({sent})");
    assert!(
        grown < baseline + 128 * 1024,
        "the server's memory stays bounded: {baseline} KiB before, {grown} KiB with {sent} unread 1 MiB replies"
    );
    // The stalled connection is closed after the idle timeout: only the new one is left.
    std::thread::sleep(Duration::from_secs(5));
    let mut other = Raw::login(&cairn);
    match other.read(22, &[]) {
        Back::Reply {
            status: 0, body, ..
        } => {
            use iggy_binary_protocol::WireDecode;
            let (clients, _) =
                iggy_binary_protocol::responses::clients::GetClientsResponse::decode(&body)
                    .unwrap();
            assert_eq!(
                clients.clients.len(),
                1,
                "the stalled connection was closed: {clients:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_anonymous_connection_cannot_send_a_large_frame() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let mut raw = Raw::connect(&cairn);
    let mut frame = header(raw.client, Operation::NonReplicated, 1, 0, 0, &[]);
    frame[48..52].copy_from_slice(&(HEADER_SIZE as u32 + 1024 * 1024).to_le_bytes());
    raw.stream.write_all(&frame).unwrap();
    assert!(
        matches!(raw.read_back(), Back::Closed),
        "closed before a login's body limit"
    );
    // A logged-in connection may send frames that large.
    let mut logged = Raw::login(&cairn);
    let mut frame = header(
        logged.client,
        Operation::NonReplicated,
        1,
        0,
        logged.session,
        &[],
    );
    let body = vec![0u8; 1024 * 1024];
    frame[48..52].copy_from_slice(&((HEADER_SIZE + body.len()) as u32).to_le_bytes());
    assert!(matches!(logged.exchange(&frame, &body), Back::Reply { .. }));
}

#[test]
fn a_connection_that_logs_out_may_log_in_again_on_the_same_socket() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &[("CAIRN_TCP_HANDSHAKE_TIMEOUT", "1s")]);
    let mut raw = Raw::login(&cairn);
    // Longer than the handshake timeout after connecting: a fresh one starts at the logout
    // (the SDK's re-login is Logout then Register on one socket).
    std::thread::sleep(Duration::from_millis(1500));
    raw.logout();
    assert_eq!(status_of(raw.read(201, &[])), 40, "no data after logout");
    raw.client += 1;
    if let Err(other) = raw.register() {
        panic!("the second login on the same socket failed: {other:?}");
    }
    raw.request = 0;
    raw.ping_ok();
    // And without a login, the handshake timeout closes it.
    let mut idle = Raw::connect(&cairn);
    std::thread::sleep(Duration::from_millis(1500));
    let ping = header(idle.client, Operation::NonReplicated, 1, 0, 0, &[]);
    let _ = idle.stream.write_all(&ping);
    assert!(
        matches!(idle.read_back(), Back::Closed),
        "closed at the handshake timeout"
    );
}

/// The server's buffered bytes, as `/metrics` (scraped as root) says.
fn buffered_bytes(cairn: &Cairn) -> u64 {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let token = common::http_token(cairn, "iggy", PASSWORD).await;
        common::metric(cairn, &token, "cairn_buffered_bytes").await
    })
}

/// Review S5: a user who may send nowhere announces a 48 MiB send and writes 8 MiB of it:
/// the server buffers none of it (it reads and drops the frame, then refuses it as
/// unauthorized, the connection serving on). Root's frame of the same size is held, counted
/// in the server's byte budget while it arrives.
#[test]
fn a_frame_its_session_may_not_send_is_never_buffered() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let mut root = Raw::login(&cairn);
    let mut user = CreateUserRequest {
        username: WireName::new("eve").unwrap(),
        password: "eve-password".to_string(),
        status: 1,
        permissions: None,
        options: WireOptions::empty(),
    }
    .to_bytes()
    .to_vec();
    assert_eq!(status_of(root.replicated(Operation::CreateUser, &user)), 0);
    user.clear();
    let mut eve = Raw::connect(&cairn);
    eve.client = 0xe7e;
    eve.register_as("eve", "eve-password").expect("eve logs in");
    let body = vec![0u8; 48 * 1024 * 1024];
    let announce = |raw: &mut Raw| {
        raw.request += 1;
        let frame = header(
            raw.client,
            Operation::SendMessages,
            0,
            raw.request,
            raw.session,
            &body,
        );
        raw.stream.write_all(&frame).unwrap();
        raw.stream.write_all(&body[..8 * 1024 * 1024]).unwrap();
    };
    announce(&mut eve);
    std::thread::sleep(Duration::from_millis(300));
    let held = buffered_bytes(&cairn);
    assert!(
        held < 1024 * 1024,
        "eve's frame is not buffered: {held} bytes held"
    );
    eve.stream.write_all(&body[8 * 1024 * 1024..]).unwrap();
    assert_eq!(status_of(eve.read_back()), 41, "refused as unauthorized");
    eve.ping_ok();
    announce(&mut root);
    std::thread::sleep(Duration::from_millis(300));
    let held = buffered_bytes(&cairn);
    assert!(
        held >= body.len() as u64,
        "root's frame is held while it arrives: {held}"
    );
}

/// The poll routing's attachment (`ATTACH_CONSUMER_SESSION`): a data connection acts for a
/// live login of its own user only; a poll on the primary needs a live attachment.
#[test]
fn a_data_connection_attaches_only_to_a_live_login_of_its_own_user() {
    use iggy::prelude::{UserClient, UserStatus};
    use iggy_binary_protocol::requests::system::AttachConsumerSessionRequest;
    const ATTACH: u32 = iggy_binary_protocol::codes::ATTACH_CONSUMER_SESSION_CODE;
    const ON_PRIMARY: u32 = iggy_binary_protocol::codes::POLL_MESSAGES_ON_PRIMARY_CODE;
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let root = common::sdk_client(&cairn, "iggy", PASSWORD).await.unwrap();
        root.create_user("bob", "bob-password", UserStatus::Active, None)
            .await
            .unwrap();
    });
    let mut coordinator = Raw::login(&cairn);
    let attach = |client: u128, session: u64| {
        AttachConsumerSessionRequest {
            client_id: client,
            session,
            metadata_watermark: 0,
        }
        .to_bytes()
        .to_vec()
    };
    let mut data = Raw::connect(&cairn);
    data.client = coordinator.client + 1;
    data.register().unwrap();
    // Unattached, a poll on the primary is not accepted: the SDK routes again.
    assert_eq!(status_of(data.read(ON_PRIMARY, &poll_body())), 58);
    // A session no connection holds, or another user's: refused.
    let stale = attach(coordinator.client, coordinator.session + 1);
    assert_eq!(status_of(data.read(ATTACH, &stale)), 58);
    let mut bob = Raw::connect(&cairn);
    bob.client = coordinator.client + 2;
    bob.register_as("bob", "bob-password").unwrap();
    let roots = attach(coordinator.client, coordinator.session);
    assert_eq!(
        status_of(bob.read(ATTACH, &roots)),
        58,
        "bob acts for root, or learns that root's session exists"
    );
    assert_eq!(status_of(bob.read(ON_PRIMARY, &poll_body())), 58);
    // Root's own data connection attaches: its poll reaches the command (stream 0 does
    // not exist), acting for the coordinator's login.
    assert_eq!(status_of(data.read(ATTACH, &roots)), 0);
    assert_eq!(status_of(data.read(ON_PRIMARY, &poll_body())), 1009);
    // The coordinator logs out: the attachment goes with its login.
    coordinator.logout();
    assert_eq!(status_of(data.read(ON_PRIMARY, &poll_body())), 58);
    // Nor does an offset write fall back to the data connection's own login.
    let store = iggy_binary_protocol::requests::consumer_offsets::StoreConsumerOffsetRequest {
        consumer: iggy_binary_protocol::WireConsumer {
            kind: iggy_binary_protocol::KIND_CONSUMER,
            id: iggy_binary_protocol::WireIdentifier::numeric(1),
        },
        stream_id: iggy_binary_protocol::WireIdentifier::numeric(0),
        topic_id: iggy_binary_protocol::WireIdentifier::numeric(0),
        partition_id: Some(0),
        offset: 0,
        ack: iggy_binary_protocol::AckLevel::Quorum,
    }
    .to_bytes()
    .to_vec();
    let stored = data.replicated(Operation::StoreConsumerOffset, &store);
    assert_eq!(status_of(stored), 58, "an offset for an ended login");
}

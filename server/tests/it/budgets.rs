//! Shared resources stay shared (review `wave3-security.md` S3, S5, S6): slow request
//! bodies hold no request slot, a body is read only for a session that may send it,
//! an address gets only its share of the connections, and a frame larger than its session
//! may send is dropped unread, the connection still serving.

use crate::common;

use common::{
    every_right_on, http_token, id, messages, payloads, sdk_client as client, topic_options, Cairn,
    PASSWORD,
};
use iggy::prelude::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Root's client, after it made stream `s` with topic `t` (one partition) and user `eve`
/// with no permission.
async fn topic_and_eve(cairn: &Cairn) -> IggyClient {
    topic_and_eve_with(cairn, false).await
}

/// [`topic_and_eve`], eve with every right on stream `s` when `rights`.
async fn topic_and_eve_with(cairn: &Cairn, rights: bool) -> IggyClient {
    let root = client(cairn, "iggy", PASSWORD).await.unwrap();
    let stream = root.create_stream("s").await.unwrap();
    root.create_topic(&id("s"), "t", &topic_options(1, Durability::Replicated))
        .await
        .unwrap();
    let permissions = rights.then(|| every_right_on(stream.id));
    root.create_user("eve", "eve-password", UserStatus::Active, permissions)
        .await
        .unwrap();
    root
}

/// Writes a request's head (and `body_start` of its body) and leaves it unfinished.
async fn unfinished(address: std::net::SocketAddr, head: &str, body_start: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body_start.as_bytes()).await.unwrap();
    stream
}

/// The status line of the response `stream` gets within `within`, if any.
async fn status_line(stream: &mut TcpStream, within: Duration) -> Option<String> {
    read_status(stream, within).await
}

/// The status line `stream` reads within `within`, if any.
async fn read_status(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    within: Duration,
) -> Option<String> {
    let mut read = Vec::new();
    let mut buf = [0u8; 1024];
    let reading = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read.extend_from_slice(&buf[..n]),
            }
            if read.windows(2).any(|w| w == b"\r\n") {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(within, reading).await;
    let text = String::from_utf8_lossy(&read).into_owned();
    text.split("\r\n")
        .next()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
}

/// Review S3: twice as many anonymous logins as there are request slots, each stalled
/// inside its body, and `/ping` and a real login are still answered at once (before, each
/// stalled body held a slot and every request waited until the sockets closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_hold_no_request_slot() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &[("CAIRN_HTTP_MAX_CONCURRENT_REQUESTS", "2")]);
    let address = cairn.http.expect("the HTTP API is on");
    let head = format!(
        "POST /users/login HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         content-length: 100\r\n\r\n"
    );
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(unfinished(address, &head, "{\"username\": ").await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut ping = unfinished(
        address,
        &format!("GET /ping HTTP/1.1\r\nhost: {address}\r\n\r\n"),
        "",
    )
    .await;
    let answered = status_line(&mut ping, Duration::from_secs(5)).await;
    assert_eq!(answered.as_deref(), Some("HTTP/1.1 200 OK"));
    let login = reqwest::Client::new()
        .post(format!("{}/users/login", cairn.http_url()))
        .json(&serde_json::json!({"username": "iggy", "password": PASSWORD}))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("a login is answered beside the stalled bodies");
    assert_eq!(login.status(), reqwest::StatusCode::OK);
    drop(stalled);
}

/// Review S5: a user with no right to send announces a 32 MiB send body and sends none of
/// it: refused (403) at once, the body never read; one who may send gets hers read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_body_is_read_only_for_a_session_that_may_send() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let _root = topic_and_eve(&cairn).await;
    let address = cairn.http.expect("the HTTP API is on");
    let send_head = |token: &str| {
        format!(
            "POST /streams/s/topics/t/messages HTTP/1.1\r\nhost: {address}\r\n\
             authorization: Bearer {token}\r\ncontent-type: application/json\r\n\
             content-length: 33554432\r\n\r\n"
        )
    };
    let eve = http_token(&cairn, "eve", "eve-password").await;
    let mut refused = unfinished(address, &send_head(&eve), "{\"partitioning\"").await;
    let answered = status_line(&mut refused, Duration::from_secs(5)).await;
    assert_eq!(answered.as_deref(), Some("HTTP/1.1 403 Forbidden"));
    // Root may send: the server waits for the body it announced.
    let root_token = http_token(&cairn, "iggy", PASSWORD).await;
    let mut reading = unfinished(address, &send_head(&root_token), "{\"partitioning\"").await;
    let answered = status_line(&mut reading, Duration::from_secs(1)).await;
    assert_eq!(answered, None, "a body the sender may send is waited for");
}

/// Review S5, per tenant, over HTTP: a send body above 64 KiB takes its size from its
/// user's share of the byte budget (here 8 MiB, a share 1 MiB). Eve holds 768 KiB with a
/// body she trickles; her second body of 768 KiB waits, unread, while root's of the same
/// size is read and answered at once; once her first goes, her second is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_send_body_waits_on_its_users_share_only() {
    let dir = tempfile::tempdir().unwrap();
    let mib = (1u64 << 20).to_string();
    let cairn = Cairn::start_with(
        dir.path(),
        &[
            ("CAIRN_LIMITS_BUFFERED_BYTES", "8388608"),
            ("CAIRN_HTTP_MAX_BODY_BYTES", &mib),
            ("CAIRN_TCP_MAX_FRAME_BYTES", &mib),
            ("CAIRN_TCP_MAX_REPLY_BYTES", &mib),
        ],
    );
    let _root = topic_and_eve_with(&cairn, true).await;
    let address = cairn.http.expect("the HTTP API is on");
    const BODY: usize = 768 * 1024;
    let send_head = |token: &str| {
        format!(
            "POST /streams/s/topics/t/messages HTTP/1.1\r\nhost: {address}\r\n\
             authorization: Bearer {token}\r\ncontent-type: application/json\r\n\
             content-length: {BODY}\r\n\r\n"
        )
    };
    // A whole body (not JSON: refused once read), written on a task of its own, since the
    // server may not read it yet.
    let whole = |token: String| async move {
        let stream = unfinished(address, &send_head(&token), "").await;
        let (read, mut write) = stream.into_split();
        let writer = tokio::spawn(async move {
            let _ = write.write_all(&vec![b' '; BODY]).await;
            write
        });
        (read, writer)
    };
    let eve = http_token(&cairn, "eve", "eve-password").await;
    let first = unfinished(address, &send_head(&eve), "{\"partitioning\"").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (mut second, _second_writer) = whole(eve.clone()).await;
    let root_token = http_token(&cairn, "iggy", PASSWORD).await;
    let (mut roots, _roots_writer) = whole(root_token).await;
    let answered = read_status(&mut roots, Duration::from_secs(10)).await;
    assert_eq!(
        answered.as_deref(),
        Some("HTTP/1.1 400 Bad Request"),
        "root's body is read beside eve's"
    );
    let waiting = read_status(&mut second, Duration::from_secs(1)).await;
    assert_eq!(waiting, None, "eve's second body waits on her share");
    drop(first);
    let answered = read_status(&mut second, Duration::from_secs(10)).await;
    assert_eq!(answered.as_deref(), Some("HTTP/1.1 400 Bad Request"));
}

/// Opens 8 sockets from 127.0.0.2 that never log in; how many the server closed at once.
async fn idle_sockets_closed(cairn: &Cairn) -> (usize, Vec<TcpStream>) {
    let mut idle = Vec::new();
    for _ in 0..8 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        idle.push(socket.connect(cairn.address).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut closed = 0;
    for stream in &mut idle {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte)).await;
        if matches!(read, Ok(Ok(0)) | Ok(Err(_))) {
            closed += 1;
        }
    }
    (closed, idle)
}

/// Review S6: an address holds at most its share of the connections (here 4 of 8), and of
/// those not logged in (here 4 of 1024): sockets opened from 127.0.0.2 and left idle past
/// it are closed at once, and a client from another address still connects and logs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_gets_only_its_share_of_the_connections() {
    for share in [
        [
            ("CAIRN_TCP_MAX_CONNECTIONS", "8"),
            ("CAIRN_LIMITS_CONNECTIONS_PER_ADDRESS", "4"),
        ],
        [
            ("CAIRN_TCP_MAX_CONNECTIONS", "1024"),
            ("CAIRN_LIMITS_ANONYMOUS_PER_ADDRESS", "4"),
        ],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let cairn = Cairn::start_with(dir.path(), &share);
        let (closed, idle) = idle_sockets_closed(&cairn).await;
        assert_eq!(
            closed, 4,
            "{share:?}: the four past the address's share are closed"
        );
        let root = client(&cairn, "iggy", PASSWORD)
            .await
            .expect("another address connects and logs in");
        root.ping().await.unwrap();
        drop(idle);
    }
}

/// A send frame larger than a command's (1 MiB) from a user with no right to send is
/// dropped unread and refused as unauthorized, through Iggy's SDK; the connection keeps
/// serving. (That it is never buffered is `bad_input::a_frame_its_session_may_not_send_is_never_buffered`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_larger_than_its_session_may_send_is_refused_and_the_connection_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let root = topic_and_eve(&cairn).await;
    let eve = client(&cairn, "eve", "eve-password").await.unwrap();
    let mut big = messages(&"x".repeat(64 * 1024), 32);
    let refused = eve
        .send_messages(&id("s"), &id("t"), &Partitioning::partition_id(0), &mut big)
        .await
        .expect_err("eve may not send");
    assert!(
        matches!(refused, IggyError::Unauthorized),
        "refused as unauthorized: {refused:?}"
    );
    eve.get_me().await.expect("the connection serves on");
    let mut big = messages(&"x".repeat(64 * 1024), 32);
    root.send_messages(&id("s"), &id("t"), &Partitioning::partition_id(0), &mut big)
        .await
        .expect("root's large send is read");
}

/// Review S4, now without a refusal: under an open-file limit of 1100 (soft and hard), a
/// topic of 600 `persisted` partitions (up to 2400 active files with their superblock slots) is created and each is sent a
/// message and read back, the active files checked out of a table the limit sizes; after a
/// kill -9 a restart under the same limit boots (opening none of them) and every message
/// reads back. (Before, the create was refused: every partition held its two files.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_partitions_than_the_open_file_limit_holds_files_for_are_served_and_restart() {
    const PARTITIONS: u32 = 600;
    let dir = tempfile::tempdir().unwrap();
    let start = || Cairn::start_with_open_files(dir.path(), &[], 1100, 1100);
    let cairn = start();
    let said = |what: &str| cairn.startup.iter().any(|line| line.contains(what));
    assert!(
        said("active files at once") && said("open_files=1100"),
        "{:#?}",
        cairn.startup
    );
    // 4096 configured connections per listener would take the files' descriptors.
    assert!(said("fewer are taken"), "{:#?}", cairn.startup);
    let root = client(&cairn, "iggy", PASSWORD).await.unwrap();
    root.create_stream("s").await.unwrap();
    let options = topic_options(PARTITIONS, Durability::Persisted);
    root.create_topic(&id("s"), "t", &options)
        .await
        .expect("600 partitions are created under 1100 descriptors");
    for p in 0..PARTITIONS {
        let mut sent = messages(&format!("m{p}"), 1);
        root.send_messages(
            &id("s"),
            &id("t"),
            &Partitioning::partition_id(p),
            &mut sent,
        )
        .await
        .unwrap_or_else(|e| panic!("partition {p}: {e}"));
    }
    let read_all = |root: IggyClient| async move {
        let consumer = Consumer::new(Identifier::numeric(1).unwrap());
        for p in 0..PARTITIONS {
            let strategy = PollingStrategy::first();
            let polled = root
                .poll_messages(&id("s"), &id("t"), Some(p), &consumer, &strategy, 10, false)
                .await
                .unwrap_or_else(|e| panic!("partition {p}: {e}"));
            assert_eq!(payloads(&polled), [format!("m{p}-0")], "partition {p}");
        }
    };
    read_all(root).await;
    cairn.kill9();
    let cairn = start();
    let root = client(&cairn, "iggy", PASSWORD).await.unwrap();
    let topic = root.get_topic(&id("s"), &id("t")).await.unwrap().unwrap();
    assert_eq!(topic.partitions_count, PARTITIONS);
    read_all(root).await;
}

/// At start the soft open-file limit is raised to the hard one, and said so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with_open_files(dir.path(), &[], 1100, 4096);
    let said = cairn
        .startup
        .iter()
        .any(|line| line.contains("raised the open-file limit") && line.contains("after=4096"));
    assert!(said, "{:#?}", cairn.startup);
    let root = client(&cairn, "iggy", PASSWORD).await.unwrap();
    root.create_stream("s").await.unwrap();
    // The raised limit sizes the active-files table.
    let table = cairn
        .startup
        .iter()
        .any(|line| line.contains("active files at once") && line.contains("open_files=4096"));
    assert!(table, "{:#?}", cairn.startup);
    root.create_topic(&id("s"), "t", &topic_options(600, Durability::Replicated))
        .await
        .expect("600 partitions");
}

/// Review S7: one user's connections hold at most `limits.memberships_per_user` group
/// memberships (here 2), over all its connections, answered with a consumer-group capacity
/// code (5007), not InvalidCommand; root (uncounted) still joins, and a leave makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_holds_only_its_share_of_group_memberships() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &[("CAIRN_LIMITS_MEMBERSHIPS_PER_USER", "2")]);
    let root = topic_and_eve_with(&cairn, true).await;
    let mut groups = Vec::new();
    for g in ["g0", "g1", "g2"] {
        let group = root
            .create_consumer_group(&id("s"), &id("t"), g)
            .await
            .unwrap();
        groups.push(group.id);
    }
    let eve = client(&cairn, "eve", "eve-password").await.unwrap();
    let eve2 = client(&cairn, "eve", "eve-password").await.unwrap();
    eve.join_consumer_group(&id("s"), &id("t"), &id("g0"))
        .await
        .unwrap();
    eve2.join_consumer_group(&id("s"), &id("t"), &id("g1"))
        .await
        .unwrap();
    let refused = eve
        .join_consumer_group(&id("s"), &id("t"), &id("g2"))
        .await
        .expect_err("eve's share is 2, over both her connections");
    assert_eq!(refused.as_code(), 5007, "a capacity code: {refused:?}");
    // Joining a group it is in already takes nothing more.
    eve.join_consumer_group(&id("s"), &id("t"), &id("g0"))
        .await
        .expect("a member already");
    root.join_consumer_group(&id("s"), &id("t"), &id("g2"))
        .await
        .expect("root is not counted");
    eve2.leave_consumer_group(&id("s"), &id("t"), &id("g1"))
        .await
        .unwrap();
    eve.join_consumer_group(&id("s"), &id("t"), &id("g2"))
        .await
        .expect("a leave made room");
    // A deleted group's memberships no longer count, though their connections never left,
    // nor do they pass for memberships of the group that takes its id.
    root.delete_consumer_group(&id("s"), &id("t"), &id("g0"))
        .await
        .unwrap();
    let g3 = root
        .create_consumer_group(&id("s"), &id("t"), "g3")
        .await
        .unwrap();
    assert_eq!(g3.id, groups[0], "g3 takes the lowest free id, g0's");
    let shown = |me: ClientInfoDetails| -> Vec<u32> {
        me.consumer_groups.iter().map(|g| g.group_id).collect()
    };
    assert_eq!(
        shown(eve.get_me().await.unwrap()),
        vec![groups[2]],
        "eve's connection was in g0, never in g3"
    );
    eve2.join_consumer_group(&id("s"), &id("t"), &id("g3"))
        .await
        .expect("g0, deleted, holds no room of eve's");
    eve.leave_consumer_group(&id("s"), &id("t"), &id("g2"))
        .await
        .unwrap();
    eve.join_consumer_group(&id("s"), &id("t"), &id("g3"))
        .await
        .expect("a join of g3, not a membership of g0's id");
    assert_eq!(shown(eve.get_me().await.unwrap()), vec![g3.id]);
    let g3 = root
        .get_consumer_group(&id("s"), &id("t"), &id("g3"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g3.members_count, 2, "both of eve's connections joined g3");
}

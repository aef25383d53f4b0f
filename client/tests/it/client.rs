//! The client against a scripted server: login, header identity across a session, the
//! reconnect-and-replay rule (SPEC §2.4), bounds, and typed decoding.

use crate::support;

use cairn_client::{ClientError, ProtocolError};
use cairn_engine::format::BatchBuilder;
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::requests::users::LoginRegisterRequest;
use iggy_binary_protocol::responses::consumer_groups::{
    ConsumerGroupResponse, GetConsumerGroupsResponse,
};
use iggy_binary_protocol::responses::messages::poll_messages::PollMessagesResponseHeader;
use iggy_binary_protocol::responses::streams::StreamResponse;
use iggy_binary_protocol::responses::streams::TopicHeader;
use iggy_binary_protocol::responses::system::StatsResponse;
use iggy_binary_protocol::responses::topics::{GetTopicResponse, PartitionResponse};
use iggy_binary_protocol::{
    ClientVersionInfo, EvictionReason, Operation, WireConsumer, WireDecode, WireIdentifier,
    WireName, WireOptions, WirePartitioning, WirePollingStrategy,
};
use secrecy::ExposeSecret;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::*;

/// Answers logins, logouts and pings; `other` answers the rest.
fn standard(
    mut other: impl FnMut(&Seen) -> Action + Send + 'static,
) -> impl FnMut(&Seen) -> Action + Send + 'static {
    move |seen| match seen.header.operation {
        Operation::Register => Action::Reply(login_ok()),
        Operation::Logout => Action::Reply(Vec::new()),
        Operation::NonReplicated if seen.code() == 1 => Action::Reply(Vec::new()),
        _ => other(seen),
    }
}

fn stream_response(name: &str) -> StreamResponse {
    StreamResponse {
        id: 0,
        created_at: 1,
        topics_count: 0,
        size_bytes: 0,
        messages_count: 0,
        name: WireName::new(name).unwrap(),
        options: WireOptions::empty(),
    }
}

fn stream_id() -> WireIdentifier {
    WireIdentifier::named("orders").unwrap()
}

/// Answers CreateStream with the created stream.
fn create_ok(seen: &Seen) -> Action {
    assert_eq!(seen.code(), 202, "unexpected request {}", seen.code());
    Action::Reply(framed(&encode(&stream_response("orders"))))
}

#[test]
fn connect_logs_in_and_a_session_shares_one_identity() {
    let server = Server::new(standard(|seen| match seen.code() {
        202 => create_ok(seen),
        200 => Action::Reply(Vec::new()),
        _ => Action::Status(3),
    }));
    let mut client = connect(&server, config_with_login()).unwrap();
    assert_eq!(client.session().unwrap().session, SESSION);
    block_on(async {
        client.ping().await.unwrap();
        client.create_stream("orders").await.unwrap();
        assert!(client.get_stream(&stream_id()).await.unwrap().is_none());
    });
    let seen = server.seen();
    let codes: Vec<u32> = seen.iter().map(Seen::code).collect();
    assert_eq!(codes, [40, 1, 202, 200]);
    let register = &seen[0].header;
    assert_ne!(register.client, 0);
    assert_eq!((register.request, register.session), (0, 0));
    // Every request of the login carries its client id and session.
    for later in &seen[1..] {
        assert_eq!(later.header.client, register.client);
        assert_eq!(later.header.session, SESSION);
    }
    let numbers: Vec<u64> = seen[1..].iter().map(|s| s.header.request).collect();
    assert_eq!(
        numbers,
        [1, 1, 2],
        "ping 1 (current), create 1 (next), get 2 (current)"
    );
    assert_eq!(client.client_id(), register.client);
}

#[test]
fn login_body_is_version_info_then_username_and_password() {
    let server = Server::new(standard(|_| Action::Status(3)));
    connect(&server, config_with_login()).unwrap();
    let body = &server.seen()[0].body;
    let (version, used) = ClientVersionInfo::decode(body).unwrap();
    assert_eq!(
        version.protocol_version,
        iggy_binary_protocol::IGGY_PROTOCOL_VERSION
    );
    assert_eq!(version.sdk_name.as_str(), "cairn");
    let (login, rest) = LoginRegisterRequest::decode_after_prefix(version, &body[used..]).unwrap();
    assert_eq!(used + rest, body.len(), "nothing after the context");
    assert_eq!(login.username.as_str(), "iggy");
    assert_eq!(login.password.expose_secret(), "iggy");
    assert_eq!(login.client_context, None);
    assert_eq!(
        server.seen()[0].header.request_checksum,
        u128::from(xxhash_rust::xxh3::xxh3_64(body))
    );
}

#[test]
fn a_read_is_replayed_on_a_new_login_after_the_connection_drops() {
    let pings = Arc::new(AtomicUsize::new(0));
    let counter = pings.clone();
    let server = Server::new(move |seen| match seen.header.operation {
        Operation::Register => Action::Reply(login_ok()),
        _ if seen.code() == 1 && counter.fetch_add(1, Ordering::SeqCst) == 0 => Action::Close,
        _ => Action::Reply(Vec::new()),
    });
    let mut client = connect(&server, config_with_login()).unwrap();
    block_on(client.ping()).unwrap();
    assert_eq!(server.codes(), [(1, 40), (1, 1), (2, 40), (2, 1)]);
    let seen = server.seen();
    assert_ne!(
        seen[0].header.client, seen[2].header.client,
        "new client id per login"
    );
    assert_eq!(seen[3].header.client, seen[2].header.client);
}

#[test]
fn a_replicated_request_is_not_replayed_and_reports_the_lost_connection() {
    let creates = Arc::new(AtomicUsize::new(0));
    let counter = creates.clone();
    let server = Server::new(standard(move |seen| {
        if counter.fetch_add(1, Ordering::SeqCst) == 0 {
            Action::Close
        } else {
            create_ok(seen)
        }
    }));
    let mut client = connect(&server, config_with_login()).unwrap();
    let error = block_on(client.create_stream("orders")).unwrap_err();
    assert!(matches!(error, ClientError::Disconnected { .. }), "{error}");
    // The client reconnected and logged in again, but did not resend the create.
    assert_eq!(server.codes(), [(1, 40), (1, 202), (2, 40)]);
    assert!(client.is_connected());
    // The next write goes on the new login, numbered from 1 again.
    block_on(client.create_stream("orders")).unwrap();
    let last = server.seen().last().unwrap().clone();
    assert_eq!(
        (last.connection, last.code(), last.header.request),
        (2, 202, 1)
    );
}

#[test]
fn status_40_logs_in_again_and_replays_a_read() {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = reads.clone();
    let server = Server::new(standard(move |_| {
        if counter.fetch_add(1, Ordering::SeqCst) == 0 {
            Action::Status(40)
        } else {
            Action::Reply(encode(&stream_response("orders")))
        }
    }));
    let mut client = connect(&server, config_with_login()).unwrap();
    let streams = block_on(client.get_streams()).unwrap();
    assert_eq!(streams.len(), 1);
    assert_eq!(server.codes(), [(1, 40), (1, 201), (2, 40), (2, 201)]);
}

#[test]
fn status_41_is_an_error_without_reconnecting() {
    let server = Server::new(standard(|_| Action::Status(41)));
    let mut client = connect(&server, config_with_login()).unwrap();
    let error = block_on(client.get_streams()).unwrap_err();
    assert_eq!(error.to_string(), "server refused: Unauthorized (code 41)");
    assert_eq!(server.connections(), 1);
    assert!(client.session().is_some(), "the session survives a refusal");
}

#[test]
fn a_silent_server_times_out_a_write_and_is_replayed_for_a_read() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let server = Server::new(standard(move |seen| {
        if counter.fetch_add(1, Ordering::SeqCst) == 0 {
            Action::Silence
        } else if seen.code() == 202 {
            create_ok(seen)
        } else {
            Action::Reply(Vec::new())
        }
    }));
    let mut client = connect(&server, config_with_login()).unwrap();
    let error = block_on(client.create_stream("orders")).unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::Timeout {
                waiting_for: "a reply",
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(server.codes(), [(1, 40), (1, 202), (2, 40)]);

    calls.store(0, Ordering::SeqCst);
    block_on(client.get_streams()).unwrap();
    assert_eq!(&server.codes()[3..], [(2, 201), (3, 40), (3, 201)]);
}

#[test]
fn without_credentials_a_failure_is_returned_and_the_next_request_reconnects() {
    let pings = Arc::new(AtomicUsize::new(0));
    let counter = pings.clone();
    let server = Server::new(move |_| {
        if counter.fetch_add(1, Ordering::SeqCst) == 0 {
            Action::Close
        } else {
            Action::Reply(Vec::new())
        }
    });
    let mut client = connect(&server, config()).unwrap();
    let error = block_on(client.ping()).unwrap_err();
    assert!(matches!(error, ClientError::Disconnected { .. }));
    assert_eq!(server.connections(), 1, "no reconnect without credentials");
    assert!(!client.is_connected());
    block_on(client.ping()).unwrap();
    assert_eq!(server.codes(), [(1, 1), (2, 1)]);
    let seen = server.seen();
    assert_eq!(
        seen[1].header.session, 0,
        "an anonymous ping carries session 0"
    );
}

#[test]
fn reconnecting_gives_up_after_the_configured_attempts() {
    let server = Server::new(move |seen| match seen.header.operation {
        Operation::Register => Action::Reply(login_ok()),
        _ => Action::Close,
    });
    let mut client = connect(&server, config_with_login()).unwrap();
    server.refuse_next(100);
    let error = block_on(client.ping()).unwrap_err();
    assert!(matches!(error, ClientError::Unreachable { .. }), "{error}");
    assert_eq!(server.refused(), 3, "reconnect_retries attempts");
    assert_eq!(
        error.to_string(),
        "server unreachable at 127.0.0.1:8090: connection refused"
    );
}

#[test]
fn connect_reports_an_unreachable_server() {
    let server = Server::new(|_| Action::Silence);
    server.refuse_next(1);
    let error = connect(&server, config()).unwrap_err();
    assert!(matches!(error, ClientError::Unreachable { .. }));
}

#[test]
fn wrong_credentials_are_named_and_not_retried() {
    let server = Server::new(|_| Action::Evict(EvictionReason::InvalidCredentials));
    let error = connect(&server, config_with_login()).unwrap_err();
    assert!(matches!(error, ClientError::InvalidCredentials));
    assert_eq!(error.to_string(), "wrong username or password");
    assert_eq!(server.connections(), 1);

    let server = Server::new(|_| Action::Reply(framed_error(42)));
    let error = connect(&server, config_with_login()).unwrap_err();
    assert!(matches!(error, ClientError::InvalidCredentials));
}

#[test]
fn an_eviction_ends_the_session_and_stale_clients_log_in_again() {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = reads.clone();
    let server = Server::new(standard(move |_| {
        if counter.fetch_add(1, Ordering::SeqCst) == 0 {
            Action::Evict(EvictionReason::StaleClient)
        } else {
            Action::Reply(Vec::new())
        }
    }));
    let mut client = connect(&server, config_with_login()).unwrap();
    assert!(block_on(client.get_streams()).unwrap().is_empty());
    assert_eq!(server.codes(), [(1, 40), (1, 201), (2, 40), (2, 201)]);
}

#[test]
fn an_oversized_reply_is_a_protocol_error_that_drops_the_connection() {
    let server = Server::new(|_| Action::Reply(vec![7u8; 4096]));
    let mut config = config();
    config.max_reply_bytes = 1024;
    let mut client = connect(&server, config).unwrap();
    let error = block_on(client.get_stats()).unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::Protocol(ProtocolError::FrameTooLarge {
                size: 4352,
                max: 1024
            })
        ),
        "{error}"
    );
    assert!(!client.is_connected());
}

#[test]
fn a_reply_echoing_another_operation_drops_the_connection() {
    let server = Server::new(standard(|_| {
        Action::ReplyAs(Operation::NonReplicated, framed(&[]))
    }));
    let mut client = connect(&server, config_with_login()).unwrap();
    let error = block_on(client.delete_stream(&stream_id())).unwrap_err();
    assert!(matches!(
        error,
        ClientError::Protocol(ProtocolError::OperationMismatch { sent: 130, got: 2 })
    ));
    assert!(!client.is_connected());
}

#[test]
fn logout_ends_the_session_and_mints_a_new_client_id() {
    let server = Server::new(standard(|_| Action::Status(3)));
    let mut client = connect(&server, config_with_login()).unwrap();
    let before = client.client_id();
    block_on(async {
        client.logout().await.unwrap();
        client.ping().await.unwrap();
    });
    let seen = server.seen();
    let logout = &seen[1].header;
    assert_eq!(seen[1].code(), 39);
    assert_eq!(
        (logout.request, logout.session, logout.client),
        (1, SESSION, before)
    );
    assert_eq!(logout.request_checksum, 0x2d06_8005_38d3_94c2);
    let ping = &seen[2].header;
    assert_ne!(ping.client, before);
    assert_eq!((ping.session, ping.request), (0, 0));
    assert!(client.session().is_none());
    assert!(matches!(
        block_on(client.logout()),
        Err(ClientError::NotLoggedIn { .. })
    ));
}

#[test]
fn logging_in_again_logs_out_first_and_takes_a_new_client_id() {
    let server = Server::new(standard(|_| Action::Status(3)));
    let mut client = connect(&server, config_with_login()).unwrap();
    let session = block_on(client.login("admin", "secret")).unwrap();
    assert_eq!(session.session, SESSION);
    let seen = server.seen();
    assert_eq!(
        seen.iter().map(Seen::code).collect::<Vec<_>>(),
        [40, 39, 40]
    );
    assert_ne!(seen[0].header.client, seen[2].header.client);
    assert_eq!(seen[1].header.client, seen[0].header.client);
}

#[test]
fn an_anonymous_client_logs_in_and_remembers_the_credentials_for_reconnects() {
    let pings = Arc::new(AtomicUsize::new(0));
    let counter = pings.clone();
    let server = Server::new(move |seen| match seen.header.operation {
        Operation::Register => Action::Reply(login_ok()),
        _ if counter.fetch_add(1, Ordering::SeqCst) == 0 => Action::Close,
        _ => Action::Reply(Vec::new()),
    });
    let mut client = connect(&server, config()).unwrap();
    block_on(async {
        client.login("iggy", "iggy").await.unwrap();
        client.ping().await.unwrap();
    });
    assert_eq!(server.codes(), [(1, 40), (1, 1), (2, 40), (2, 1)]);
}

#[test]
fn the_raw_request_refuses_session_commands_and_unknown_codes() {
    let server = Server::new(|_| Action::Reply(Vec::new()));
    let mut client = connect(&server, config()).unwrap();
    assert!(matches!(
        block_on(client.request(40, &[])),
        Err(ClientError::InvalidRequest(_))
    ));
    assert!(matches!(
        block_on(client.request(39, &[])),
        Err(ClientError::InvalidRequest(_))
    ));
    assert!(matches!(
        block_on(client.request(7777, &[])),
        Err(ClientError::UnknownCommand { code: 7777 })
    ));
    assert!(server.seen().is_empty());
    assert_eq!(&block_on(client.request(1, &[])).unwrap()[..], b"");
}

// ---- typed calls ----

fn topic_header(partitions: u32) -> TopicHeader {
    TopicHeader {
        id: 2,
        created_at: 10,
        partitions_count: partitions,
        message_expiry: 0,
        compression_algorithm: 1,
        max_topic_size: 0,
        size_bytes: 0,
        messages_count: 0,
        name: WireName::new("events").unwrap(),
        options: WireOptions::empty(),
        derived_options: WireOptions::empty(),
    }
}

#[test]
fn typed_reads_decode_the_codec_types() {
    let topic = GetTopicResponse {
        topic: topic_header(2),
        partitions: (0..2)
            .map(|id| PartitionResponse {
                id,
                created_at: 3,
                segments_count: 1,
                current_offset: 9,
                size_bytes: 100,
                messages_count: 10,
            })
            .collect(),
    };
    let groups = GetConsumerGroupsResponse {
        groups: vec![ConsumerGroupResponse {
            id: 0,
            partitions_count: 2,
            members_count: 1,
            name: WireName::new("cg-1").unwrap(),
        }],
    };
    let mut stats = StatsResponse::decode(&[0u8; 156]).unwrap().0;
    stats.process_id = 42;
    stats.hostname = "box".into();
    let (topic_bytes, groups_bytes, stats_bytes) =
        (encode(&topic), encode(&groups), encode(&stats));
    let server = Server::new(standard(move |seen| match seen.code() {
        300 => Action::Reply(topic_bytes.clone()),
        301 => Action::Reply(Vec::new()),
        601 => Action::Reply(groups_bytes.clone()),
        10 => Action::Reply(stats_bytes.clone()),
        302 => Action::Reply(framed(&topic_bytes)),
        _ => Action::Status(3),
    }));
    let mut client = connect(&server, config_with_login()).unwrap();
    block_on(async {
        let got = client
            .get_topic(&stream_id(), &WireIdentifier::numeric(2))
            .await
            .unwrap();
        assert_eq!(got, Some(topic.clone()));
        assert!(client.get_topics(&stream_id()).await.unwrap().is_empty());
        assert_eq!(
            client
                .get_consumer_groups(&stream_id(), &WireIdentifier::numeric(2))
                .await
                .unwrap(),
            groups.groups
        );
        let got = client.get_stats().await.unwrap();
        assert_eq!((got.process_id, got.hostname.as_str()), (42, "box"));
        let created = client
            .create_topic(&stream_id(), "events", 2, WireOptions::empty())
            .await
            .unwrap();
        assert_eq!(created, topic);
    });
}

#[test]
fn a_reply_with_trailing_bytes_is_a_protocol_error() {
    let mut body = encode(&stream_response("orders"));
    body.extend_from_slice(&[1, 2, 3]);
    let server = Server::new(standard(move |_| Action::Reply(framed(&body))));
    let mut client = connect(&server, config_with_login()).unwrap();
    let error = block_on(client.create_stream("orders")).unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::Protocol(
                ProtocolError::BadBody { .. } | ProtocolError::TrailingBytes { .. }
            )
        ),
        "{error}"
    );
}

#[test]
fn send_puts_the_metadata_before_the_batch_and_poll_iterates_messages() {
    let mut builder = BatchBuilder::new(1_000);
    builder.push(11, 0, b"hello", b"");
    builder.push(12, 5, b"world", b"");
    let batch = builder.build().to_vec();
    let records = batch.clone();
    let server = Server::new(standard(move |seen| match seen.code() {
        101 => Action::Reply(Vec::new()),
        100 => {
            let mut body = encode(&PollMessagesResponseHeader {
                partition_id: 1,
                current_offset: 1,
                messages_count: 2,
            });
            body.extend_from_slice(&records);
            Action::Reply(body)
        }
        _ => Action::Status(3),
    }));
    let mut client = connect(&server, config_with_login()).unwrap();
    let topic = WireIdentifier::numeric(0);
    block_on(async {
        let sent = client
            .send_messages(
                &stream_id(),
                &topic,
                &WirePartitioning::PartitionId(1),
                &batch,
            )
            .await
            .unwrap();
        assert!(sent.confirmations.is_empty());
        let polled = client
            .poll_messages(&PollMessagesRequest {
                consumer: WireConsumer::consumer(WireIdentifier::numeric(0)),
                stream_id: stream_id(),
                topic_id: topic.clone(),
                partition_id: Some(1),
                strategy: WirePollingStrategy::first(),
                count: 10,
                auto_commit: false,
            })
            .await
            .unwrap();
        assert_eq!((polled.partition_id, polled.count), (1, 2));
        let messages: Vec<_> = polled.messages().map(Result::unwrap).collect();
        assert_eq!(messages.len(), 2);
        assert_eq!(
            (messages[1].offset, messages[1].id, messages[1].payload),
            (1, 12, &b"world"[..])
        );
        assert_eq!(messages[1].origin_timestamp, 1_005);
    });
    let send = &server.seen()[1];
    assert_eq!(
        send.header.request_checksum, 0,
        "partition ops are unstamped"
    );
    let metadata_length = u32::from_le_bytes(send.body[..4].try_into().unwrap()) as usize;
    let (header, used) = iggy_binary_protocol::requests::messages::SendMessagesHeader::decode(
        &send.body[4..4 + metadata_length],
    )
    .unwrap();
    assert_eq!(used, metadata_length);
    assert_eq!(header.messages_count, 2);
    assert_eq!(header.partitioning, WirePartitioning::PartitionId(1));
    assert_eq!(&send.body[4 + metadata_length..], &batch[..]);
}

#[test]
fn a_short_poll_reply_is_a_protocol_error() {
    let server = Server::new(|_| Action::Reply(vec![0u8; 15]));
    let mut client = connect(&server, config()).unwrap();
    let error = block_on(client.poll_messages(&PollMessagesRequest {
        consumer: WireConsumer::consumer(WireIdentifier::numeric(0)),
        stream_id: stream_id(),
        topic_id: WireIdentifier::numeric(0),
        partition_id: None,
        strategy: WirePollingStrategy::next(),
        count: 1,
        auto_commit: true,
    }))
    .unwrap_err();
    assert!(matches!(
        error,
        ClientError::Protocol(ProtocolError::ShortBody { len: 15, .. })
    ));
}

#[test]
fn wrong_credentials_on_reconnect_stop_the_retries_and_leave_the_client_disconnected() {
    let server = Server::new(|seen| match (seen.connection, seen.header.operation) {
        (1, Operation::Register) => Action::Reply(login_ok()),
        (1, _) => Action::Close,
        _ => Action::Evict(EvictionReason::InvalidCredentials),
    });
    let mut client = connect(&server, config_with_login()).unwrap();
    let error = block_on(client.ping()).unwrap_err();
    assert!(matches!(error, ClientError::InvalidCredentials), "{error}");
    assert_eq!(server.connections(), 2, "no retry after wrong credentials");
    assert!(!client.is_connected());
    assert!(client.session().is_none());
}

#[test]
fn close_logs_out_once_without_reconnecting() {
    let server = Server::new(standard(|_| Action::Status(3)));
    let client = connect(&server, config_with_login()).unwrap();
    block_on(client.close());
    assert_eq!(server.codes(), [(1, 40), (1, 39)]);
}

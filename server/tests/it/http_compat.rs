//! Iggy's own Rust SDK's HTTP transport (`iggy` =0.11.0 `HttpClient`, unmodified) against
//! the real `cairn` binary: login, streams and topics under both durability policies, sends
//! with each partitioning, polls with each strategy, offsets, a consumer group, users, a
//! personal access token, logout.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::common;

use common::{id, messages, payloads, topic_option, topic_options, Cairn, PASSWORD};
use iggy::prelude::*;

async fn logged_in(cairn: &Cairn) -> HttpClient {
    let client = HttpClient::new(&cairn.http_url()).unwrap();
    client
        .login_user("iggy", PASSWORD)
        .await
        .expect("root logs in");
    client
}

async fn poll(
    client: &HttpClient,
    topic: &str,
    partition: u32,
    strategy: PollingStrategy,
    count: u32,
    auto_commit: bool,
) -> PolledMessages {
    client
        .poll_messages(
            &id("s"),
            &id(topic),
            Some(partition),
            &Consumer::new(Identifier::numeric(7).unwrap()),
            &strategy,
            count,
            auto_commit,
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_http_transport_works_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());

    let anonymous = HttpClient::new(&cairn.http_url()).unwrap();
    anonymous.ping().await.expect("ping needs no login");
    assert!(anonymous
        .login_user("iggy", "wrong-password")
        .await
        .is_err());
    assert!(matches!(
        anonymous.get_streams().await,
        Err(IggyError::Unauthenticated)
    ));

    let client = logged_in(&cairn).await;
    let stream = client.create_stream("s").await.unwrap();
    assert_eq!(stream.name, "s");
    assert!(client.get_stream(&id("nope")).await.unwrap().is_none());
    let replicated = client
        .create_topic(&id("s"), "r", &topic_options(3, Durability::Replicated))
        .await
        .unwrap();
    assert_eq!(replicated.partitions_count, 3);
    client
        .create_topic(&id("s"), "p", &topic_options(1, Durability::Persisted))
        .await
        .unwrap();
    let topics = client.get_topics(&id("s")).await.unwrap();
    assert_eq!(topics.len(), 2);
    // GetTopic reports every option's effective value, the durability policies among them.
    let details = client.get_topic(&id("s"), &id("p")).await.unwrap().unwrap();
    assert_eq!(
        topic_option(&details, "durability"),
        Some(("persisted".into(), true)),
        "{details:?}"
    );
    assert_eq!(
        topic_option(&details, "consumer_offset_durability").map(|o| o.0),
        Some("replicated".into())
    );
    assert!(
        topic_option(&details, "messages_required_to_save").is_some_and(|(_, explicit)| !explicit)
    );
    assert!(client
        .get_topic(&id("s"), &id("nope"))
        .await
        .unwrap()
        .is_none());

    // Sends with each partitioning; the completion header says the topic's policy.
    let (sent, durability) = client
        .send_messages_with_durability(
            &id("s"),
            &id("p"),
            &Partitioning::partition_id(0),
            &mut messages("p", 4),
        )
        .await
        .unwrap();
    assert_eq!(durability, Some(Durability::Persisted));
    assert_eq!(sent.confirmations.len(), 1);
    assert_eq!(sent.confirmations[0].base_offset, 0);
    let (_, durability) = client
        .send_messages_with_durability(
            &id("s"),
            &id("r"),
            &Partitioning::partition_id(1),
            &mut messages("r1", 3),
        )
        .await
        .unwrap();
    assert_eq!(durability, Some(Durability::Replicated));
    for i in 0..3 {
        client
            .send_messages(
                &id("s"),
                &id("r"),
                &Partitioning::balanced(),
                &mut messages(&format!("b{i}"), 1),
            )
            .await
            .unwrap();
    }
    let keyed = Partitioning::messages_key_str("user-42").unwrap();
    let first = client
        .send_messages(&id("s"), &id("r"), &keyed, &mut messages("k1", 1))
        .await
        .unwrap();
    let second = client
        .send_messages(&id("s"), &id("r"), &keyed, &mut messages("k2", 1))
        .await
        .unwrap();
    assert_eq!(
        first.confirmations[0].partition_id, second.confirmations[0].partition_id,
        "one key, one partition"
    );

    // Polls with each strategy.
    let all = poll(&client, "p", 0, PollingStrategy::first(), 10, false).await;
    assert_eq!(payloads(&all), ["p-0", "p-1", "p-2", "p-3"]);
    let from = poll(&client, "p", 0, PollingStrategy::offset(2), 10, false).await;
    assert_eq!(payloads(&from), ["p-2", "p-3"]);
    let last = poll(&client, "p", 0, PollingStrategy::last(), 1, false).await;
    assert_eq!(payloads(&last), ["p-3"]);
    // One batch shares one timestamp: a later batch is what a timestamp poll can skip to.
    client
        .send_messages(
            &id("s"),
            &id("p"),
            &Partitioning::partition_id(0),
            &mut messages("q", 1),
        )
        .await
        .unwrap();
    let later = poll(&client, "p", 0, PollingStrategy::offset(4), 1, false).await;
    let stamp = later.messages[0].header.timestamp;
    assert!(stamp > all.messages[3].header.timestamp);
    let since = poll(
        &client,
        "p",
        0,
        PollingStrategy::timestamp(stamp.into()),
        10,
        false,
    )
    .await;
    assert_eq!(payloads(&since), ["q-0"]);
    let next = poll(&client, "p", 0, PollingStrategy::next(), 2, true).await;
    assert_eq!(payloads(&next), ["p-0", "p-1"]);
    let consumer = Consumer::new(Identifier::numeric(7).unwrap());
    // Auto-commit is asynchronous (the durability page): wait for it to show.
    let mut committed = None;
    for _ in 0..100 {
        committed = client
            .get_consumer_offset(&consumer, &id("s"), &id("p"), Some(0))
            .await
            .unwrap();
        if committed.as_ref().is_some_and(|o| o.stored_offset == 1) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(committed.unwrap().stored_offset, 1);
    let next = poll(&client, "p", 0, PollingStrategy::next(), 10, false).await;
    assert_eq!(payloads(&next), ["p-2", "p-3", "q-0"]);

    // Offsets stored, read and deleted.
    let other = Consumer::new(Identifier::numeric(8).unwrap());
    assert!(client
        .get_consumer_offset(&other, &id("s"), &id("p"), Some(0))
        .await
        .unwrap()
        .is_none());
    client
        .store_consumer_offset(&other, &id("s"), &id("p"), Some(0), 2)
        .await
        .unwrap();
    let stored = client
        .get_consumer_offset(&other, &id("s"), &id("p"), Some(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((stored.stored_offset, stored.current_offset), (2, 4));
    client
        .delete_consumer_offset(&other, &id("s"), &id("p"), Some(0))
        .await
        .unwrap();
    assert!(client
        .get_consumer_offset(&other, &id("s"), &id("p"), Some(0))
        .await
        .unwrap()
        .is_none());

    // A consumer group.
    let group = client
        .create_consumer_group(&id("s"), &id("r"), "g")
        .await
        .unwrap();
    assert_eq!(group.name, "g");
    assert_eq!(group.partitions_count, 3);
    let groups = client
        .get_consumer_groups(&id("s"), &id("r"))
        .await
        .unwrap();
    assert_eq!(groups.len(), 1);
    assert!(client
        .get_consumer_group(&id("s"), &id("r"), &id("g"))
        .await
        .unwrap()
        .is_some());
    client
        .delete_consumer_group(&id("s"), &id("r"), &id("g"))
        .await
        .unwrap();
    assert!(client
        .get_consumer_group(&id("s"), &id("r"), &id("g"))
        .await
        .unwrap()
        .is_none());

    // Users and permissions.
    client
        .create_user("reader", "reader-password", UserStatus::Active, None)
        .await
        .unwrap();
    let reader = HttpClient::new(&cairn.http_url()).unwrap();
    reader
        .login_user("reader", "reader-password")
        .await
        .unwrap();
    assert!(matches!(
        reader.create_stream("x").await,
        Err(IggyError::Unauthorized)
    ));
    let users = client.get_users().await.unwrap();
    assert_eq!(users.len(), 2);

    // Administration: updates, partitions, segments, purges, passwords, permissions.
    client
        .update_stream(&id("s"), "s", &StreamUpdateOptions::default())
        .await
        .unwrap();
    client
        .update_topic(&id("s"), &id("r"), "r", &TopicUpdateOptions::default())
        .await
        .unwrap();
    client
        .create_partitions(&id("s"), &id("r"), 2)
        .await
        .unwrap();
    let grown = client.get_topic(&id("s"), &id("r")).await.unwrap().unwrap();
    assert_eq!(grown.partitions_count, 5);
    client
        .delete_partitions(&id("s"), &id("r"), 2)
        .await
        .unwrap();
    assert!(
        client
            .delete_segments(&id("s"), &id("p"), 0, 1)
            .await
            .is_err(),
        "the active segment is never deleted"
    );
    client
        .create_topic(&id("s"), "tmp", &topic_options(1, Durability::Replicated))
        .await
        .unwrap();
    client
        .send_messages(
            &id("s"),
            &id("tmp"),
            &Partitioning::partition_id(0),
            &mut messages("t", 2),
        )
        .await
        .unwrap();
    client.purge_topic(&id("s"), &id("tmp")).await.unwrap();
    assert!(poll(&client, "tmp", 0, PollingStrategy::first(), 10, false)
        .await
        .messages
        .is_empty());
    client.delete_topic(&id("s"), &id("tmp")).await.unwrap();
    client
        .change_password(&id("reader"), "reader-password", "reader-password-2")
        .await
        .unwrap();
    assert!(
        matches!(reader.get_streams().await, Err(IggyError::Unauthenticated)),
        "a changed password ends the tokens issued before it"
    );
    reader
        .login_user("reader", "reader-password-2")
        .await
        .unwrap();
    let mut everything = Permissions::default();
    everything.global.manage_streams = true;
    client
        .update_permissions(&id("reader"), Some(everything))
        .await
        .unwrap();
    reader.create_stream("x").await.unwrap();
    reader.delete_stream(&id("x")).await.unwrap();
    let me = client
        .get_user(&Identifier::named("me").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(me.username, "iggy");
    let metadata = client.get_cluster_metadata().await.unwrap();
    assert_eq!(metadata.nodes.len(), 1);
    assert!(client.get_clients().await.is_ok());
    assert!(client.get_client(999_999).await.unwrap().is_none());

    // Stats carry what the binary protocol's GetStats does.
    let stats = client.get_stats().await.unwrap();
    assert_eq!(stats.streams_count, 1);
    assert_eq!(stats.topics_count, 2);
    assert_eq!(stats.messages_count, 5 + 3 + 3 + 2);
    // The process's figures, as Iggy's GetStats carries them.
    assert!(stats.threads_count > 0, "{stats:?}");
    assert!(stats.memory_usage.as_bytes_u64() > 0, "{stats:?}");
    assert!(stats.total_memory.as_bytes_u64() >= stats.available_memory.as_bytes_u64());
    assert!(stats.total_disk_space.as_bytes_u64() > 0, "{stats:?}");
    assert!(!stats.kernel_version.is_empty(), "{stats:?}");

    // A deleted user's token stops working at once.
    client.delete_user(&id("reader")).await.unwrap();
    assert!(matches!(
        reader.get_streams().await,
        Err(IggyError::Unauthenticated)
    ));

    // A personal access token: created (shown once), listed without it, logged in with,
    // and worthless once deleted.
    let raw = client
        .create_personal_access_token("ci-bot", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap();
    let listed = client.get_personal_access_tokens().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "ci-bot");
    let robot = HttpClient::new(&cairn.http_url()).unwrap();
    let identity = robot
        .login_with_personal_access_token(&raw.token)
        .await
        .unwrap();
    assert_eq!(identity.user_id, 0);
    assert_eq!(robot.get_streams().await.unwrap().len(), 1);
    let stranger = HttpClient::new(&cairn.http_url()).unwrap();
    assert!(stranger
        .login_with_personal_access_token("not-a-token-at-all")
        .await
        .is_err());
    client.delete_personal_access_token("ci-bot").await.unwrap();
    assert!(matches!(
        robot.get_streams().await,
        Err(IggyError::Unauthenticated)
    ));
    assert!(robot
        .login_with_personal_access_token(&raw.token)
        .await
        .is_err());
    assert!(client
        .get_personal_access_tokens()
        .await
        .unwrap()
        .is_empty());

    // Logout revokes the token.
    let refreshed = client.refresh_access_token().await.unwrap();
    let refreshed = refreshed.access_token.unwrap().token;
    client.get_streams().await.unwrap();
    // A token named "login" is a token like any other.
    client
        .create_personal_access_token("login", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap();
    client.delete_personal_access_token("login").await.unwrap();
    client.logout_user().await.unwrap();
    // The SDK forgot its token; the server must refuse it too (and every token of that
    // login, refreshed ones included).
    let replayed = reqwest::Client::new()
        .get(format!("{}/streams", cairn.http_url()))
        .bearer_auth(&refreshed)
        .send()
        .await
        .unwrap();
    assert_eq!(replayed.status(), reqwest::StatusCode::UNAUTHORIZED);
}

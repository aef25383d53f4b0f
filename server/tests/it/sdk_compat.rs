//! Iggy's own Rust SDK (`iggy` =0.11.0, unmodified) against the real `cairn` binary: every
//! call a producer, a consumer, a consumer-group member and an administrator make.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::common;

use common::{
    id, messages, payloads, sdk_client as client, topic_option, topic_options, Cairn, PASSWORD,
};
use futures::StreamExt;
use iggy::prelude::*;
use std::time::Duration;

async fn root(cairn: &Cairn) -> IggyClient {
    client(cairn, "iggy", PASSWORD).await.expect("root logs in")
}

/// A plain consumer's poll of partition 0 of `s`/`t` from the first message.
async fn poll_as(client: &IggyClient) -> Result<PolledMessages, IggyError> {
    client
        .poll_messages(
            &id("s"),
            &id("t"),
            Some(0),
            &Consumer::new(Identifier::numeric(1).unwrap()),
            &PollingStrategy::first(),
            10,
            false,
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_logs_in_creates_sends_polls_and_logs_out() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());

    // Wrong credentials: refused, and no data.
    let wrong =
        IggyClient::from_connection_string(&cairn.connection_string("iggy", "wrong-password"))
            .unwrap();
    let refused = wrong.connect().await;
    let refused = match refused {
        Err(e) => e,
        Ok(()) => wrong
            .get_streams()
            .await
            .expect_err("no data without a login"),
    };
    assert!([42, 40].contains(&refused.as_code()), "{refused:?}");

    let client = root(&cairn).await;
    client.ping().await.unwrap();
    let stream = client.create_stream("orders").await.unwrap();
    assert_eq!(stream.id, 0);
    assert_eq!(
        client.create_stream("orders").await.unwrap_err().as_code(),
        1012,
        "a second stream of the same name is refused"
    );
    let replicated = client
        .create_topic(
            &id("orders"),
            "replicated",
            &topic_options(3, Durability::Replicated),
        )
        .await
        .unwrap();
    assert_eq!(replicated.partitions_count, 3);
    let persisted = client
        .create_topic(
            &id("orders"),
            "persisted",
            &topic_options(1, Durability::Persisted),
        )
        .await
        .unwrap();
    assert_eq!(persisted.id, 1);
    // GetTopic reports every option's effective value, the durability policies among them.
    let details = client
        .get_topic(&id("orders"), &id("persisted"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        topic_option(&details, "durability"),
        Some(("persisted".into(), true)),
        "{details:?}"
    );
    assert_eq!(
        topic_option(&details, "consumer_offset_durability").map(|o| o.0),
        Some("replicated".into())
    );
    assert!(topic_option(&details, "segment_size").is_some_and(|(_, explicit)| !explicit));
    assert!(client.get_stream(&id("missing")).await.unwrap().is_none());
    assert!(client
        .get_topic(&id("orders"), &id("missing"))
        .await
        .unwrap()
        .is_none());
    let streams = client.get_streams().await.unwrap();
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].topics_count, 2);

    // Sends with each partitioning.
    let (s, t) = (id("orders"), id("replicated"));
    client
        .send_messages(
            &s,
            &t,
            &Partitioning::partition_id(2),
            &mut messages("p2", 5),
        )
        .await
        .unwrap();
    for _ in 0..3 {
        client
            .send_messages(&s, &t, &Partitioning::balanced(), &mut messages("bal", 1))
            .await
            .unwrap();
    }
    let key = Partitioning::messages_key_str("customer-7").unwrap();
    client
        .send_messages(&s, &t, &key, &mut messages("key", 2))
        .await
        .unwrap();
    client
        .send_messages(
            &s,
            &id("persisted"),
            &Partitioning::partition_id(0),
            &mut messages("dur", 4),
        )
        .await
        .unwrap();
    let topic = client.get_topic(&s, &t).await.unwrap().unwrap();
    let total: u64 = topic.partitions.iter().map(|p| p.messages_count).sum();
    assert_eq!(total, 10, "every message sent is counted: {topic:?}");

    // Polls with each strategy.
    let consumer = Consumer::new(Identifier::numeric(7).unwrap());
    let poll = |strategy: PollingStrategy, count: u32, auto_commit: bool| {
        let (client, s, t, consumer) = (&client, s.clone(), t.clone(), consumer.clone());
        async move {
            client
                .poll_messages(&s, &t, Some(2), &consumer, &strategy, count, auto_commit)
                .await
                .unwrap()
        }
    };
    let first_two = poll(PollingStrategy::first(), 2, false).await;
    let p2_first = payloads(&first_two);
    assert_eq!(first_two.messages.len(), 2);
    let p2 = client.get_topic(&s, &t).await.unwrap().unwrap().partitions[2].messages_count;
    assert_eq!(
        first_two.current_offset,
        p2 - 1,
        "the partition's last offset"
    );
    let from_offset = poll(PollingStrategy::offset(1), 100, false).await;
    assert_eq!(from_offset.messages[0].header.offset, 1);
    assert_eq!(payloads(&from_offset)[0], p2_first[1]);
    let last = poll(PollingStrategy::last(), 1, false).await;
    assert_eq!(last.messages.len(), 1);
    assert_eq!(last.messages[0].header.offset, last.current_offset);
    let since = IggyTimestamp::from(first_two.messages[0].header.timestamp);
    let by_time = poll(PollingStrategy::timestamp(since), 100, false).await;
    assert!(!by_time.messages.is_empty());
    let next = poll(PollingStrategy::next(), 2, true).await;
    assert_eq!(payloads(&next), p2_first, "next starts at the beginning");
    let next = poll(PollingStrategy::next(), 2, true).await;
    assert_eq!(
        next.messages[0].header.offset, 2,
        "auto-commit moved the offset"
    );

    // Offsets: stored, read, deleted.
    let offset = client
        .get_consumer_offset(&consumer, &s, &t, Some(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(offset.stored_offset, 3);
    client
        .store_consumer_offset(&consumer, &s, &t, Some(2), 0)
        .await
        .unwrap();
    let offset = client
        .get_consumer_offset(&consumer, &s, &t, Some(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(offset.stored_offset, 0);
    client
        .delete_consumer_offset(&consumer, &s, &t, Some(2))
        .await
        .unwrap();
    assert!(client
        .get_consumer_offset(&consumer, &s, &t, Some(2))
        .await
        .unwrap()
        .is_none());

    // Stats, me, clients.
    let stats = client.get_stats().await.unwrap();
    assert_eq!(stats.streams_count, 1);
    assert_eq!(stats.topics_count, 2);
    assert_eq!(stats.partitions_count, 4);
    assert_eq!(stats.messages_count, 14);
    let me = client.get_me().await.unwrap();
    assert_eq!(me.user_id, Some(0));
    assert!(!client.get_clients().await.unwrap().is_empty());

    client.logout_user().await.unwrap();
    let after = client.get_streams().await.unwrap_err();
    assert_eq!(after.as_code(), 40, "no data after logout: {after:?}");
    client.login_user("iggy", PASSWORD).await.unwrap();
    assert_eq!(
        client.get_streams().await.unwrap().len(),
        1,
        "a new login on the same client"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_groups_users_and_permissions_work_through_the_sdk() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let admin = root(&cairn).await;
    admin.create_stream("s").await.unwrap();
    admin
        .create_topic(&id("s"), "t", &topic_options(2, Durability::Replicated))
        .await
        .unwrap();
    for p in 0..2 {
        admin
            .send_messages(
                &id("s"),
                &id("t"),
                &Partitioning::partition_id(p),
                &mut messages(&format!("p{p}"), 3 + 2 * p as usize),
            )
            .await
            .unwrap();
    }

    // A consumer group: created, joined, polled, left.
    let group = admin
        .create_consumer_group(&id("s"), &id("t"), "workers")
        .await
        .unwrap();
    assert_eq!(group.id, 0);
    let member = root(&cairn).await;
    member
        .join_consumer_group(&id("s"), &id("t"), &id("workers"))
        .await
        .unwrap();
    let details = admin
        .get_consumer_group(&id("s"), &id("t"), &id("workers"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(details.members_count, 1);
    assert_eq!(
        details.members[0].partitions.len(),
        2,
        "one member holds both partitions"
    );
    let group_consumer = Consumer::group(id("workers"));
    let mut seen = Vec::new();
    for _ in 0..4 {
        let polled = member
            .poll_messages(
                &id("s"),
                &id("t"),
                None,
                &group_consumer,
                &PollingStrategy::next(),
                10,
                true,
            )
            .await
            .unwrap();
        seen.extend(payloads(&polled));
    }
    seen.sort();
    assert_eq!(
        seen,
        ["p0-0", "p0-1", "p0-2", "p1-0", "p1-1", "p1-2", "p1-3", "p1-4"]
    );
    // Without a partition id, a member's offset is its current partition's.
    let offset = member
        .get_consumer_offset(&group_consumer, &id("s"), &id("t"), None)
        .await
        .unwrap()
        .expect("auto-commit stored it");
    let last = if offset.partition_id == 0 { 2 } else { 4 };
    assert_eq!(
        (offset.current_offset, offset.stored_offset),
        (last, last),
        "the partition reported is the one whose offset it is: {offset:?}"
    );
    member
        .leave_consumer_group(&id("s"), &id("t"), &id("workers"))
        .await
        .unwrap();
    let details = admin
        .get_consumer_group(&id("s"), &id("t"), &id("workers"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(details.members_count, 0);
    assert_eq!(
        admin
            .get_consumer_groups(&id("s"), &id("t"))
            .await
            .unwrap()
            .len(),
        1
    );

    // A user who may read but not send.
    let mut permissions = Permissions::default();
    permissions.global.read_streams = true;
    permissions.global.poll_messages = true;
    admin
        .create_user(
            "reader",
            "reader-password",
            UserStatus::Active,
            Some(permissions),
        )
        .await
        .unwrap();
    let users = admin.get_users().await.unwrap();
    assert_eq!(users.len(), 2);
    let reader = client(&cairn, "reader", "reader-password").await.unwrap();
    let polled = reader
        .poll_messages(
            &id("s"),
            &id("t"),
            Some(0),
            &Consumer::new(Identifier::numeric(1).unwrap()),
            &PollingStrategy::first(),
            10,
            false,
        )
        .await
        .unwrap();
    assert_eq!(polled.messages.len(), 3);
    let refused = reader
        .send_messages(
            &id("s"),
            &id("t"),
            &Partitioning::partition_id(0),
            &mut messages("no", 1),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.as_code(), 41);
    let refused = reader.create_stream("nope").await.unwrap_err();
    assert_eq!(refused.as_code(), 41);
    let topic = admin.get_topic(&id("s"), &id("t")).await.unwrap().unwrap();
    assert_eq!(
        topic.partitions[0].messages_count, 3,
        "the refused send wrote nothing"
    );

    // Deleting the user ends its live session at once.
    admin.delete_user(&id("reader")).await.unwrap();
    let after = reader
        .poll_messages(
            &id("s"),
            &id("t"),
            Some(0),
            &Consumer::new(Identifier::numeric(1).unwrap()),
            &PollingStrategy::first(),
            10,
            false,
        )
        .await;
    assert!(
        after.is_err(),
        "a deleted user's session gets no data: {after:?}"
    );

    // Deactivated, re-passworded, and deleted with the id given to someone else: each live
    // session loses access at its next request.
    let mut can_poll = Permissions::default();
    can_poll.global.read_streams = true;
    can_poll.global.poll_messages = true;
    let mut sessions = Vec::new();
    for name in ["sleepy", "rotated", "replaced"] {
        admin
            .create_user(
                name,
                "first-password",
                UserStatus::Active,
                Some(can_poll.clone()),
            )
            .await
            .unwrap();
        let session = client(&cairn, name, "first-password").await.unwrap();
        assert!(poll_as(&session).await.is_ok(), "{name} may poll at first");
        sessions.push(session);
    }
    admin
        .update_user(
            &id("sleepy"),
            None,
            Some(UserStatus::Inactive),
            &UserUpdateOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        poll_as(&sessions[0]).await.is_err(),
        "a deactivated user's session"
    );
    admin
        .change_password(&id("rotated"), "first-password", "second-password")
        .await
        .unwrap();
    assert!(
        poll_as(&sessions[1]).await.is_err(),
        "a re-passworded user's session"
    );
    let replaced = admin.get_user(&id("replaced")).await.unwrap().unwrap().id;
    admin.delete_user(&id("replaced")).await.unwrap();
    let heir = admin
        .create_user("heir", "heir-password", UserStatus::Active, Some(can_poll))
        .await
        .unwrap();
    assert_eq!(heir.id, replaced, "user ids are reused");
    assert!(
        poll_as(&sessions[2]).await.is_err(),
        "a session is bound to its user's incarnation, not only its id"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iggy_producer_and_consumer_stream_messages_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let client = root(&cairn).await;
    let producer = client
        .producer("events", "clicks")
        .unwrap()
        .create_stream_if_not_exists()
        .create_topic_if_not_exists(2, IggyExpiry::NeverExpire, MaxTopicSize::ServerDefault)
        .partitioning(Partitioning::balanced())
        .build();
    producer.init().await.unwrap();
    for batch in 0..10 {
        producer
            .send(messages(&format!("b{batch}"), 10))
            .await
            .unwrap();
    }
    let consumer_client = root(&cairn).await;
    let mut consumer = consumer_client
        .consumer_group("readers", "events", "clicks")
        .unwrap()
        .create_consumer_group_if_not_exists()
        .auto_join_consumer_group()
        .polling_strategy(PollingStrategy::next())
        .auto_commit(AutoCommit::When(AutoCommitWhen::PollingMessages))
        .batch_length(25)
        .poll_interval(IggyDuration::from(Duration::from_millis(5)))
        .build();
    consumer.init().await.unwrap();
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while received.len() < 100 {
        let next = tokio::time::timeout_at(deadline, consumer.next())
            .await
            .expect("the consumer receives every message within 30 s");
        let message = next.expect("the stream goes on").expect("a message");
        received.push(String::from_utf8(message.message.payload.to_vec()).unwrap());
    }
    received.sort();
    received.dedup();
    assert_eq!(received.len(), 100, "every message exactly once");
    consumer.shutdown().await.unwrap();
    producer.shutdown().await;
}

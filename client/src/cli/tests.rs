use super::parse::{partitioning, strategy};
use super::render::{self, Table, View};
use super::run::execute;
use super::*;
use crate::error::ClientError;
use clap::Parser;
use iggy_binary_protocol::responses::streams::StreamResponse;
use iggy_binary_protocol::responses::streams::TopicHeader;
use iggy_binary_protocol::responses::topics::{GetTopicResponse, PartitionResponse};
use iggy_binary_protocol::{
    WireConsumer, WireIdentifier, WireOptions, WirePartitioning, WirePollingStrategy,
};
use iggy_binary_protocol::{WireName, WireUserHeaderIterator};

/// How the lead embeds the arguments: connection flags plus a client command.
#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: ConnectArgs,
    #[command(subcommand)]
    command: ClientCommand,
}

fn parse(line: &str) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("cairn").chain(line.split_whitespace()))
}

fn command(line: &str) -> ClientCommand {
    parse(line)
        .unwrap_or_else(|e| panic!("`{line}`: {e}"))
        .command
}

#[test]
fn help_exists_for_every_command() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
    fn walk(command: &clap::Command) {
        for sub in command.get_subcommands() {
            assert!(
                sub.get_about().is_some(),
                "`{}` has no help text",
                sub.get_name()
            );
            for arg in sub.get_arguments() {
                assert!(
                    arg.get_help().is_some() || arg.get_id() == "help",
                    "`{} {}` has no help text",
                    sub.get_name(),
                    arg.get_id()
                );
            }
            walk(sub);
        }
    }
    walk(&Cli::command());
}

#[test]
fn connection_flags_have_defaults_and_go_anywhere() {
    let cli = parse("ping").unwrap();
    assert_eq!(cli.args.address, "127.0.0.1:8090");
    assert_eq!(cli.args.username, "iggy");
    assert!(!cli.args.json);
    let cli = parse("stream list --json --address 10.0.0.1:9000 -u admin -p pw").unwrap();
    assert!(cli.args.json);
    assert_eq!(cli.args.address, "10.0.0.1:9000");
    assert_eq!(cli.args.username, "admin");
    assert_eq!(cli.args.password.as_deref(), Some("pw"));
    assert!(matches!(
        cli.command,
        ClientCommand::Stream(StreamCommand::List)
    ));
}

#[test]
fn identifiers_are_ids_when_numeric_and_names_otherwise() {
    let ClientCommand::Topic(TopicCommand::Get { stream, topic }) = command("topic get 3 events")
    else {
        panic!("not topic get");
    };
    assert_eq!(stream.0, WireIdentifier::numeric(3));
    assert_eq!(topic.0, WireIdentifier::named("events").unwrap());
    let long = "x".repeat(256);
    assert!(parse(&format!("stream get {long}")).is_err());
}

#[test]
fn topic_create_takes_partitions_durability_and_settings() {
    let ClientCommand::Topic(TopicCommand::Create {
        stream,
        name,
        partitions,
        durability,
        offset_durability,
        segment_size,
        settings,
    }) = command(
        "topic create orders events --partitions 3 --durability persisted --message-expiry 1000 --max-size unlimited",
    )
    else {
        panic!("not topic create");
    };
    assert_eq!(stream.to_string(), "orders");
    assert_eq!(name, "events");
    assert_eq!(partitions, 3);
    assert_eq!(durability, Durability::Persisted);
    assert_eq!(offset_durability, Durability::Replicated);
    assert_eq!(segment_size, None);
    assert_eq!(settings.message_expiry.as_deref(), Some("1000"));
    assert!(parse("topic create orders events --durability sometimes").is_err());
}

#[test]
fn create_topic_options_always_carry_durability_sorted_bytewise() {
    let settings = TopicSettings {
        message_expiry: Some("1000".into()),
        max_size: Some("1 GiB".into()),
        compression: None,
    };
    let options = create_topic_options(
        Durability::Persisted,
        Durability::Replicated,
        None,
        &settings,
    )
    .unwrap();
    let entries: Vec<(String, u8, Vec<u8>)> = WireUserHeaderIterator::new(options.as_bytes())
        .map(|e| {
            (
                String::from_utf8(e.key.to_vec()).unwrap(),
                e.value_kind.0,
                e.value.to_vec(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            (
                "consumer_offset_durability".into(),
                2,
                b"replicated".to_vec()
            ),
            ("durability".into(), 2, b"persisted".to_vec()),
            ("max_topic_size".into(), 2, b"1 GiB".to_vec()),
            ("message_expiry".into(), 12, 1000u64.to_le_bytes().to_vec()),
        ]
    );
    // The SDK's default block is 76 bytes (`docs/wire.md` §8).
    let default = create_topic_options(
        Durability::Replicated,
        Durability::Replicated,
        None,
        &TopicSettings::default(),
    )
    .unwrap();
    assert_eq!(default.as_bytes().len(), 76);
}

#[test]
fn message_send_and_poll_flags() {
    let ClientCommand::Message(MessageCommand::Send {
        payloads,
        partition,
        headers,
        ..
    }) = command("message send s t hello world --partition-id 2 --headers a=1,b=2")
    else {
        panic!("not send");
    };
    assert_eq!(payloads, ["hello", "world"]);
    assert_eq!(
        partitioning(&partition).unwrap(),
        WirePartitioning::PartitionId(2)
    );
    let headers = parse_headers(headers.as_deref().unwrap()).unwrap();
    assert_eq!(render::user_headers(&headers), "a=1,b=2");
    assert!(
        parse("message send s t x --partition-id 1 --key k").is_err(),
        "one partitioning"
    );
    let ClientCommand::Message(MessageCommand::Send { partition, .. }) =
        command("message send s t x")
    else {
        panic!("not send");
    };
    assert_eq!(
        partitioning(&partition).unwrap(),
        WirePartitioning::Balanced
    );

    let ClientCommand::Message(MessageCommand::Poll {
        start,
        count,
        consumer,
        auto_commit,
        partition_id,
        ..
    }) = command("message poll s t --offset 5 --count 3 --group cg --partition-id 0 --auto-commit")
    else {
        panic!("not poll");
    };
    assert_eq!(strategy(&start), WirePollingStrategy::offset(5));
    assert_eq!(count, 3);
    assert_eq!(partition_id, Some(0));
    assert!(auto_commit);
    assert_eq!(
        consumer.wire(),
        WireConsumer::consumer_group(WireIdentifier::named("cg").unwrap())
    );
    let ClientCommand::Message(MessageCommand::Poll {
        start, consumer, ..
    }) = command("message poll s t")
    else {
        panic!("not poll");
    };
    assert_eq!(strategy(&start), WirePollingStrategy::next());
    assert_eq!(
        consumer.wire(),
        WireConsumer::consumer(WireIdentifier::numeric(0))
    );
    assert!(parse("message poll s t --first --last").is_err());
    assert!(parse("message poll s t --consumer 1 --group 2").is_err());
}

#[test]
fn user_permission_flags_become_global_permissions() {
    let ClientCommand::User(UserCommand::Create {
        username,
        inactive,
        permissions,
        ..
    }) = command("user create alice secret --can-manage-streams --can-send")
    else {
        panic!("not user create");
    };
    assert_eq!(username, "alice");
    assert!(!inactive);
    let wire = permissions.wire().unwrap();
    assert!(wire.global.manage_streams && wire.global.send_messages);
    assert!(!wire.global.manage_users && !wire.global.poll_messages);
    let ClientCommand::User(UserCommand::Create { permissions, .. }) =
        command("user create bob secret")
    else {
        panic!("not user create");
    };
    assert_eq!(permissions.wire(), None);
    assert!(parse("user update bob --active --inactive").is_err());
}

fn stream_response(id: u32, name: &str) -> StreamResponse {
    StreamResponse {
        id,
        created_at: 1_700_000,
        topics_count: 2,
        size_bytes: 4096,
        messages_count: 10,
        name: WireName::new(name).unwrap(),
        options: WireOptions::empty(),
    }
}

#[test]
fn stream_list_renders_as_a_table_and_as_json() {
    let view = render::streams(&[stream_response(0, "orders"), stream_response(1, "a")]);
    assert_eq!(
        view.to_text(),
        "ID  NAME    CREATED_AT  TOPICS  SIZE_BYTES  MESSAGES\n\
         0   orders  1700000     2       4096        10\n\
         1   a       1700000     2       4096        10\n"
    );
    let json: serde_json::Value = serde_json::from_str(&view.to_json()).unwrap();
    assert_eq!(
        json,
        serde_json::json!([
            {"id": 0, "name": "orders", "created_at": 1_700_000, "topics": 2, "size_bytes": 4096, "messages": 10},
            {"id": 1, "name": "a", "created_at": 1_700_000, "topics": 2, "size_bytes": 4096, "messages": 10},
        ])
    );
    assert_eq!(
        render::streams(&[]).to_text(),
        "ID  NAME  CREATED_AT  TOPICS  SIZE_BYTES  MESSAGES\n"
    );
}

#[test]
fn a_topic_renders_its_fields_and_partitions() {
    let topic = GetTopicResponse {
        topic: TopicHeader {
            id: 0,
            created_at: 5,
            partitions_count: 1,
            message_expiry: u64::MAX,
            compression_algorithm: 1,
            max_topic_size: 0,
            size_bytes: 0,
            messages_count: 0,
            name: WireName::new("events").unwrap(),
            options: create_topic_options(
                Durability::Persisted,
                Durability::Replicated,
                None,
                &TopicSettings::default(),
            )
            .unwrap(),
            derived_options: WireOptions::empty(),
        },
        partitions: vec![PartitionResponse {
            id: 0,
            created_at: 5,
            segments_count: 1,
            current_offset: 0,
            size_bytes: 0,
            messages_count: 0,
        }],
    };
    let view = render::topic_details(&topic);
    let text = view.to_text();
    assert!(text.contains("name            events\n"), "{text}");
    assert!(text.contains("message_expiry  unlimited\n"), "{text}");
    assert!(text.contains("compression     none\n"), "{text}");
    assert!(
        text.contains(
            "options         consumer_offset_durability=replicated,durability=persisted\n"
        ),
        "{text}"
    );
    assert!(text.contains("\npartitions:\nID  CREATED_AT"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&view.to_json()).unwrap();
    assert_eq!(json["name"], "events");
    assert_eq!(json["max_topic_size"], "default");
    assert_eq!(json["partitions"][0]["segments"], 1);
}

#[test]
fn done_messages_render_as_text_and_json() {
    let view = View::Done("stream `orders` deleted".into());
    assert_eq!(view.to_text(), "stream `orders` deleted\n");
    let json: serde_json::Value = serde_json::from_str(&view.to_json()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"ok": true, "message": "stream `orders` deleted"})
    );
}

#[test]
fn polled_messages_render_offsets_payloads_and_headers() {
    let headers = parse_headers("k=v").unwrap();
    let mut builder = cairn_engine::format::BatchBuilder::new(100);
    builder.push(1, 0, b"hello", &headers);
    let polled = crate::Polled {
        partition_id: 0,
        current_offset: 0,
        count: 1,
        records: builder.build().freeze(),
    };
    let View::List(table) = render::messages(&polled).unwrap() else {
        panic!("a list");
    };
    assert_eq!(table.rows.len(), 1);
    assert_eq!(table.rows[0][0], 0);
    assert_eq!(table.rows[0][4], "hello");
    assert_eq!(table.rows[0][5], "k=v");
}

#[test]
fn tables_refuse_rows_of_the_wrong_width() {
    let result = std::panic::catch_unwind(|| {
        let mut table = Table::new(vec!["a", "b"]);
        table.push(vec![1.into()]);
    });
    assert!(result.is_err());
}

#[test]
fn errors_name_what_the_user_asked_for() {
    let what = Subject {
        stream: Some("x".into()),
        topic: Some("t".into()),
        group: Some("g".into()),
        partition: Some(4),
        user: None,
        new_name: Some("new".into()),
    };
    let cases = [
        (1009, "unknown stream `x`"),
        (1010, "unknown stream `x`"),
        (2010, "unknown topic `t` in stream `x`"),
        (2011, "unknown topic `t` in stream `x`"),
        (3007, "unknown partition 4 in topic `t`"),
        (5000, "unknown consumer group `g`"),
        (5003, "unknown consumer group `g`"),
        (1012, "stream `new` already exists"),
        (2013, "topic `new` already exists in stream `x`"),
        (5004, "consumer group `new` already exists"),
        (46, "user `new` already exists"),
        (4042, "server refused: InvalidOptionValue (code 4042)"),
    ];
    for (code, message) in cases {
        assert_eq!(
            describe(&ClientError::server(code), &what),
            message,
            "code {code}"
        );
    }
    assert_eq!(
        describe(&ClientError::server(42), &what),
        "wrong username or password"
    );
    let user = Subject {
        user: Some("bob".into()),
        ..Subject::default()
    };
    assert_eq!(
        describe(&ClientError::server(20), &user),
        "unknown user `bob`"
    );
    let unreachable = ClientError::Unreachable {
        address: "127.0.0.1:8090".parse().unwrap(),
        source: std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "os error 111"),
    };
    assert_eq!(
        describe(&unreachable, &Subject::default()),
        "server unreachable at 127.0.0.1:8090: connection refused"
    );
}

#[test]
fn an_unreachable_server_exits_nonzero() {
    // Port 1 on localhost: nothing listens there.
    let args = ConnectArgs {
        address: "127.0.0.1:1".into(),
        username: "iggy".into(),
        password: None,
        json: false,
    };
    let error = execute(&args, ClientCommand::Ping { count: 1 }).unwrap_err();
    assert_eq!(
        error.to_string(),
        "server unreachable at 127.0.0.1:1: connection refused"
    );
    let error = execute(&args, ClientCommand::Stats).unwrap_err();
    assert!(error.to_string().contains("needs a login"), "{error}");
}

#[test]
fn a_new_users_name_and_password_are_not_the_login_flags() {
    let cli = parse("-u root -p rootpw user create alice alice-pw --can-poll").unwrap();
    assert_eq!(cli.args.username, "root");
    assert_eq!(cli.args.password.as_deref(), Some("rootpw"));
    match cli.command {
        ClientCommand::User(UserCommand::Create {
            username, password, ..
        }) => {
            assert_eq!(username, "alice");
            assert_eq!(password, "alice-pw");
        }
        other => panic!("{other:?}"),
    }
    let cli = parse("-u root user update alice --new-name bob").unwrap();
    assert_eq!(cli.args.username, "root");
}

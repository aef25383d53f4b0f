//! Running one client command: resolve the address, read stdin payloads if asked, connect
//! (and log in), run the command per resource, close, and print a table or JSON on stdout
//! or the [`CliError`] on stderr.

use super::args::{
    ClientCommand, ClientsCommand, ConnectArgs, ConsumerChoice, GroupCommand, Ident,
    MessageCommand, OffsetCommand, PartitionCommand, SegmentCommand, StreamCommand, TopicCommand,
    UserCommand,
};
use super::error::{CliError, Subject};
use super::parse::{create_topic_options, parse_headers, partitioning, strategy, topic_options};
use super::render::{self, View};
use crate::client::{Client, ClientConfig};
use crate::Outgoing;
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;

/// Runs `command` against the server `args` names; prints its output on stdout or what
/// went wrong on stderr.
pub fn run(args: ConnectArgs, command: ClientCommand) -> ExitCode {
    match execute(&args, command) {
        Ok(view) => {
            let out = if args.json {
                view.to_json() + "\n"
            } else {
                view.to_text()
            };
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

pub(super) fn execute(args: &ConnectArgs, command: ClientCommand) -> Result<View, CliError> {
    let address = resolve(&args.address)?;
    let mut config = ClientConfig::new(address);
    config.reconnect_retries = 1;
    let anonymous = matches!(command, ClientCommand::Ping { .. }) && args.password.is_none();
    if !anonymous {
        let Some(password) = &args.password else {
            return Err(CliError::NeedsLogin);
        };
        config = config.with_credentials(&args.username, password);
    }
    // Payloads from stdin are read before connecting, so a slow pipe holds no session.
    let command = with_stdin_payloads(command)?;
    let env = cairn_engine::env::real::env().map_err(CliError::Runtime)?;
    cairn_engine::env::real::block_on(async move {
        let mut client = Client::connect(env, config)
            .await
            .map_err(|error| CliError::request(error, &Subject::default()))?;
        let result = dispatch(&mut client, command).await;
        client.close().await;
        result
    })
}

/// The first address `address` resolves to.
fn resolve(address: &str) -> Result<SocketAddr, CliError> {
    address
        .to_socket_addrs()
        .map_err(|source| CliError::BadAddress {
            address: address.to_string(),
            source,
        })?
        .next()
        .ok_or_else(|| CliError::AddressResolvesToNothing {
            address: address.to_string(),
        })
}

/// Replaces an empty payload list of `message send` with the lines of stdin.
fn with_stdin_payloads(command: ClientCommand) -> Result<ClientCommand, CliError> {
    match command {
        ClientCommand::Message(MessageCommand::Send {
            stream,
            topic,
            payloads,
            partition,
            headers,
        }) if payloads.is_empty() => {
            let lines: Result<Vec<String>, _> = std::io::stdin().lines().collect();
            let payloads: Vec<String> = lines
                .map_err(CliError::Stdin)?
                .into_iter()
                .filter(|line| !line.is_empty())
                .collect();
            if payloads.is_empty() {
                return Err(CliError::NoPayloads);
            }
            Ok(ClientCommand::Message(MessageCommand::Send {
                stream,
                topic,
                payloads,
                partition,
                headers,
            }))
        }
        other => Ok(other),
    }
}

fn subject(stream: Option<&Ident>, topic: Option<&Ident>) -> Subject {
    Subject {
        stream: stream.map(Ident::to_string),
        topic: topic.map(Ident::to_string),
        ..Subject::default()
    }
}

/// Runs one command on a connected client.
async fn dispatch(client: &mut Client, command: ClientCommand) -> Result<View, CliError> {
    match command {
        ClientCommand::Ping { count } => {
            for _ in 0..count {
                client
                    .ping()
                    .await
                    .map_err(|e| CliError::request(e, &Subject::default()))?;
            }
            Ok(View::Done(format!("pong from {}", client.address())))
        }
        ClientCommand::Stats => client
            .get_stats()
            .await
            .map(|s| render::stats(&s))
            .map_err(|e| CliError::request(e, &Subject::default())),
        ClientCommand::Me => client
            .get_me()
            .await
            .map(|me| render::client_details(&me))
            .map_err(|e| CliError::request(e, &Subject::default())),
        ClientCommand::Stream(command) => stream(client, command).await,
        ClientCommand::Topic(command) => topic(client, command).await,
        ClientCommand::Partition(command) => partition(client, command).await,
        ClientCommand::Segment(command) => segment(client, command).await,
        ClientCommand::Message(command) => message(client, command).await,
        ClientCommand::Offset(command) => offset(client, command).await,
        ClientCommand::Group(command) => group(client, command).await,
        ClientCommand::User(command) => user(client, command).await,
        ClientCommand::Client(command) => clients(client, command).await,
    }
}

async fn stream(client: &mut Client, command: StreamCommand) -> Result<View, CliError> {
    match command {
        StreamCommand::Create { name } => {
            let what = Subject {
                new_name: Some(name.clone()),
                ..Subject::default()
            };
            let created = client
                .create_stream(&name)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(render::stream(&created))
        }
        StreamCommand::Get { stream } => {
            let what = subject(Some(&stream), None);
            match client.get_stream(&stream.0).await {
                Ok(Some(details)) => Ok(render::stream_details(&details)),
                Ok(None) => Err(CliError::UnknownStream {
                    stream: stream.to_string(),
                }),
                Err(e) => Err(CliError::request(e, &what)),
            }
        }
        StreamCommand::List => client
            .get_streams()
            .await
            .map(|list| render::streams(&list))
            .map_err(|e| CliError::request(e, &Subject::default())),
        StreamCommand::Update { stream, name } => {
            let what = Subject {
                new_name: Some(name.clone()),
                ..subject(Some(&stream), None)
            };
            client
                .update_stream(&stream.0, &name)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(View::Done(format!("stream `{stream}` renamed to `{name}`")))
        }
        StreamCommand::Delete { stream } => {
            let what = subject(Some(&stream), None);
            client
                .delete_stream(&stream.0)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(View::Done(format!("stream `{stream}` deleted")))
        }
        StreamCommand::Purge { stream } => {
            let what = subject(Some(&stream), None);
            client
                .purge_stream(&stream.0)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(View::Done(format!("stream `{stream}` purged")))
        }
    }
}

async fn topic(client: &mut Client, command: TopicCommand) -> Result<View, CliError> {
    match command {
        TopicCommand::Create {
            stream,
            name,
            partitions,
            durability,
            offset_durability,
            segment_size,
            settings,
        } => {
            let what = Subject {
                new_name: Some(name.clone()),
                ..subject(Some(&stream), None)
            };
            let options =
                create_topic_options(durability, offset_durability, segment_size, &settings)?;
            let created = client
                .create_topic(&stream.0, &name, partitions, options)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(render::topic_details(&created))
        }
        TopicCommand::Get { stream, topic } => {
            let what = subject(Some(&stream), Some(&topic));
            match client.get_topic(&stream.0, &topic.0).await {
                Ok(Some(details)) => Ok(render::topic_details(&details)),
                Ok(None) => Err(CliError::UnknownTopic {
                    topic: topic.to_string(),
                    stream: stream.to_string(),
                }),
                Err(e) => Err(CliError::request(e, &what)),
            }
        }
        TopicCommand::List { stream } => {
            let what = subject(Some(&stream), None);
            client
                .get_topics(&stream.0)
                .await
                .map(|list| render::topics(&list))
                .map_err(|e| CliError::request(e, &what))
        }
        TopicCommand::Update {
            stream,
            topic,
            name,
            settings,
        } => {
            let what = subject(Some(&stream), Some(&topic));
            let options = topic_options(Vec::new(), &settings)?;
            client
                .update_topic(&stream.0, &topic.0, &name, options)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(View::Done(format!("topic `{topic}` updated")))
        }
        TopicCommand::Delete { stream, topic } => {
            let what = subject(Some(&stream), Some(&topic));
            client
                .delete_topic(&stream.0, &topic.0)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(View::Done(format!("topic `{topic}` deleted")))
        }
        TopicCommand::Purge { stream, topic } => {
            let what = subject(Some(&stream), Some(&topic));
            client
                .purge_topic(&stream.0, &topic.0)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(View::Done(format!("topic `{topic}` purged")))
        }
    }
}

async fn partition(client: &mut Client, command: PartitionCommand) -> Result<View, CliError> {
    match command {
        PartitionCommand::Create {
            stream,
            topic,
            count,
        } => {
            let what = subject(Some(&stream), Some(&topic));
            client
                .create_partitions(&stream.0, &topic.0, count)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(View::Done(format!(
                "{count} partition(s) added to `{topic}`"
            )))
        }
        PartitionCommand::Delete {
            stream,
            topic,
            count,
        } => {
            let what = subject(Some(&stream), Some(&topic));
            client
                .delete_partitions(&stream.0, &topic.0, count)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(View::Done(format!(
                "{count} partition(s) removed from `{topic}`"
            )))
        }
    }
}

async fn segment(client: &mut Client, command: SegmentCommand) -> Result<View, CliError> {
    let SegmentCommand::Delete {
        stream,
        topic,
        partition,
        count,
    } = command;
    let what = Subject {
        partition: Some(partition),
        ..subject(Some(&stream), Some(&topic))
    };
    client
        .delete_segments(&stream.0, &topic.0, partition, count)
        .await
        .map_err(|e| CliError::request(e, &what))?;
    Ok(View::Done(format!(
        "up to {count} segment(s) of partition {partition} deleted"
    )))
}

async fn message(client: &mut Client, command: MessageCommand) -> Result<View, CliError> {
    match command {
        MessageCommand::Send {
            stream,
            topic,
            payloads,
            partition,
            headers,
        } => {
            let what = Subject {
                partition: partition.partition_id,
                ..subject(Some(&stream), Some(&topic))
            };
            let partitioning = partitioning(&partition)?;
            let headers = match &headers {
                Some(text) => parse_headers(text)?,
                None => Vec::new(),
            };
            let messages: Vec<Outgoing<'_>> = payloads
                .iter()
                .map(|payload| Outgoing {
                    id: 0,
                    payload: payload.as_bytes(),
                    headers: &headers,
                })
                .collect();
            let response = client
                .send_payloads(&stream.0, &topic.0, &partitioning, &messages)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(render::sent(messages.len(), &response))
        }
        MessageCommand::Poll {
            stream,
            topic,
            partition_id,
            start,
            count,
            consumer,
            auto_commit,
        } => {
            let what = Subject {
                partition: partition_id,
                group: consumer.group.as_ref().map(Ident::to_string),
                ..subject(Some(&stream), Some(&topic))
            };
            // A group's partitions are its members': this one-shot session joins first
            // (its logout at the end leaves again).
            if let Some(group) = &consumer.group {
                client
                    .join_consumer_group(&stream.0, &topic.0, &group.0)
                    .await
                    .map_err(|e| CliError::request(e, &what))?;
            }
            let request = PollMessagesRequest {
                consumer: consumer.wire(),
                stream_id: stream.0.clone(),
                topic_id: topic.0.clone(),
                partition_id,
                strategy: strategy(&start),
                count,
                auto_commit,
            };
            let polled = client
                .poll_messages(&request)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            render::messages(&polled)
        }
    }
}

async fn offset(client: &mut Client, command: OffsetCommand) -> Result<View, CliError> {
    match command {
        OffsetCommand::Get {
            stream,
            topic,
            partition_id,
            consumer,
        } => {
            let what = offset_subject(&stream, &topic, partition_id, &consumer);
            match client
                .get_consumer_offset(&consumer.wire(), &stream.0, &topic.0, partition_id)
                .await
            {
                Ok(Some(offset)) => Ok(render::offset(&offset)),
                Ok(None) => Err(CliError::NoOffset),
                Err(e) => Err(CliError::request(e, &what)),
            }
        }
        OffsetCommand::Store {
            stream,
            topic,
            offset,
            partition_id,
            consumer,
        } => {
            let what = offset_subject(&stream, &topic, partition_id, &consumer);
            client
                .store_consumer_offset(&consumer.wire(), &stream.0, &topic.0, partition_id, offset)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(View::Done(format!("offset {offset} stored")))
        }
        OffsetCommand::Delete {
            stream,
            topic,
            partition_id,
            consumer,
        } => {
            let what = offset_subject(&stream, &topic, partition_id, &consumer);
            client
                .delete_consumer_offset(&consumer.wire(), &stream.0, &topic.0, partition_id)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(View::Done("offset deleted".to_string()))
        }
    }
}

fn offset_subject(
    stream: &Ident,
    topic: &Ident,
    partition: Option<u32>,
    consumer: &ConsumerChoice,
) -> Subject {
    Subject {
        partition,
        group: consumer.group.as_ref().map(Ident::to_string),
        ..subject(Some(stream), Some(topic))
    }
}

async fn group(client: &mut Client, command: GroupCommand) -> Result<View, CliError> {
    match command {
        GroupCommand::Create {
            stream,
            topic,
            name,
        } => {
            let what = Subject {
                new_name: Some(name.clone()),
                ..subject(Some(&stream), Some(&topic))
            };
            match client
                .create_consumer_group(&stream.0, &topic.0, &name)
                .await
            {
                Ok(Some(details)) => Ok(render::group_details(&details)),
                Ok(None) => Ok(View::Done(format!("consumer group `{name}` created"))),
                Err(e) => Err(CliError::request(e, &what)),
            }
        }
        GroupCommand::Get {
            stream,
            topic,
            group,
        } => {
            let what = Subject {
                group: Some(group.to_string()),
                ..subject(Some(&stream), Some(&topic))
            };
            match client
                .get_consumer_group(&stream.0, &topic.0, &group.0)
                .await
            {
                Ok(Some(details)) => Ok(render::group_details(&details)),
                Ok(None) => Err(CliError::UnknownGroup {
                    group: group.to_string(),
                    topic: topic.to_string(),
                }),
                Err(e) => Err(CliError::request(e, &what)),
            }
        }
        GroupCommand::List { stream, topic } => {
            let what = subject(Some(&stream), Some(&topic));
            client
                .get_consumer_groups(&stream.0, &topic.0)
                .await
                .map(|list| render::groups(&list))
                .map_err(|e| CliError::request(e, &what))
        }
        GroupCommand::Delete {
            stream,
            topic,
            group,
        } => {
            let what = Subject {
                group: Some(group.to_string()),
                ..subject(Some(&stream), Some(&topic))
            };
            client
                .delete_consumer_group(&stream.0, &topic.0, &group.0)
                .await
                .map_err(|e| CliError::request(e, &what))?;
            Ok(View::Done(format!("consumer group `{group}` deleted")))
        }
    }
}

fn user_subject(user: &Ident) -> Subject {
    Subject {
        user: Some(user.to_string()),
        ..Subject::default()
    }
}

async fn user(client: &mut Client, command: UserCommand) -> Result<View, CliError> {
    match command {
        UserCommand::Create {
            username,
            password,
            inactive,
            permissions,
        } => {
            let what = Subject {
                new_name: Some(username.clone()),
                ..Subject::default()
            };
            match client
                .create_user(&username, &password, !inactive, permissions.wire())
                .await
            {
                Ok(Some(details)) => Ok(render::user_details(&details)),
                Ok(None) => Ok(View::Done(format!("user `{username}` created"))),
                Err(e) => Err(CliError::request(e, &what)),
            }
        }
        UserCommand::Get { user } => match client.get_user(&user.0).await {
            Ok(Some(details)) => Ok(render::user_details(&details)),
            Ok(None) => Err(CliError::UnknownUser {
                user: user.to_string(),
            }),
            Err(e) => Err(CliError::request(e, &user_subject(&user))),
        },
        UserCommand::List => client
            .get_users()
            .await
            .map(|list| render::users(&list))
            .map_err(|e| CliError::request(e, &Subject::default())),
        UserCommand::Update {
            user,
            username,
            active,
            inactive,
        } => {
            let status = match (active, inactive) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            };
            if username.is_none() && status.is_none() {
                return Err(CliError::NothingToUpdate);
            }
            client
                .update_user(&user.0, username.as_deref(), status)
                .await
                .map_err(|e| CliError::request(e, &user_subject(&user)))?;
            Ok(View::Done(format!("user `{user}` updated")))
        }
        UserCommand::Permissions { user, permissions } => {
            client
                .update_permissions(&user.0, permissions.wire())
                .await
                .map_err(|e| CliError::request(e, &user_subject(&user)))?;
            Ok(View::Done(format!("permissions of `{user}` replaced")))
        }
        UserCommand::Delete { user } => {
            client
                .delete_user(&user.0)
                .await
                .map_err(|e| CliError::request(e, &user_subject(&user)))?;
            Ok(View::Done(format!("user `{user}` deleted")))
        }
        UserCommand::Password { user, current, new } => {
            client
                .change_password(&user.0, &current, &new)
                .await
                .map_err(|e| CliError::request(e, &user_subject(&user)))?;
            Ok(View::Done(format!("password of `{user}` changed")))
        }
    }
}

async fn clients(client: &mut Client, command: ClientsCommand) -> Result<View, CliError> {
    match command {
        ClientsCommand::Get { id } => match client.get_client(id).await {
            Ok(Some(details)) => Ok(render::client_details(&details)),
            Ok(None) => Err(CliError::UnknownClient { id }),
            Err(e) => Err(CliError::request(e, &Subject::default())),
        },
        ClientsCommand::List => client
            .get_clients()
            .await
            .map(|list| render::clients(&list))
            .map_err(|e| CliError::request(e, &Subject::default())),
    }
}

//! The client half of the `cairn` command line: arguments ([`ConnectArgs`],
//! [`ClientCommand`]), one connection per command, a table or JSON on stdout, errors that
//! name what went wrong on stderr and a non-zero exit.

pub mod render;

use crate::client::{Client, ClientConfig};
use crate::error::ClientError;
use crate::Outgoing;
use bytes::BytesMut;
use clap::{Args, Subcommand};
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::{
    WireConsumer, WireGlobalPermissions, WireIdentifier, WireOptions, WirePartitioning,
    WirePermissions, WirePollingStrategy,
};
use render::View;
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;

/// Where the server is and who to log in as.
#[derive(Debug, Clone, Args)]
pub struct ConnectArgs {
    /// Server address, host:port.
    #[arg(
        long,
        env = "CAIRN_ADDRESS",
        default_value = "127.0.0.1:8090",
        global = true
    )]
    pub address: String,
    /// User to log in as.
    #[arg(
        long,
        short = 'u',
        env = "CAIRN_USERNAME",
        default_value = "iggy",
        global = true
    )]
    pub username: String,
    /// Password to log in with (every command but `ping` needs it).
    #[arg(
        long,
        short = 'p',
        env = "CAIRN_PASSWORD",
        global = true,
        hide_env_values = true
    )]
    pub password: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// A command against a running server.
#[derive(Debug, Clone, Subcommand)]
pub enum ClientCommand {
    /// Check that the server answers (no login needed).
    Ping {
        /// How many pings to send.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        count: u32,
    },
    /// Show the server's statistics.
    Stats,
    /// Show this connection as the server sees it.
    Me,
    /// Manage streams.
    #[command(subcommand)]
    Stream(StreamCommand),
    /// Manage topics.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Add or remove partitions of a topic.
    #[command(subcommand)]
    Partition(PartitionCommand),
    /// Remove old segments of a partition.
    #[command(subcommand)]
    Segment(SegmentCommand),
    /// Send and poll messages.
    #[command(subcommand)]
    Message(MessageCommand),
    /// Read, store or delete consumer offsets.
    #[command(subcommand)]
    Offset(OffsetCommand),
    /// Manage consumer groups.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Manage users.
    #[command(subcommand)]
    User(UserCommand),
    /// Show connected clients.
    #[command(subcommand)]
    Client(ClientsCommand),
}

/// A stream, topic, group or user: a number is a numeric id, anything else a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident(pub WireIdentifier);

impl std::str::FromStr for Ident {
    type Err = String;
    fn from_str(s: &str) -> Result<Ident, String> {
        if let Ok(id) = s.parse::<u32>() {
            return Ok(Ident(WireIdentifier::numeric(id)));
        }
        WireIdentifier::named(s)
            .map(Ident)
            .map_err(|error| format!("`{s}` is neither an id nor a valid name: {error}"))
    }
}

impl std::fmt::Display for Ident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Debug, Clone, Subcommand)]
pub enum StreamCommand {
    /// Create a stream.
    Create {
        /// The new stream's name.
        name: String,
    },
    /// Show a stream and its topics.
    Get {
        /// Stream id or name.
        stream: Ident,
    },
    /// List streams.
    List,
    /// Rename a stream.
    Update {
        /// Stream id or name.
        stream: Ident,
        /// The new name.
        name: String,
    },
    /// Delete a stream with its topics and messages.
    Delete {
        /// Stream id or name.
        stream: Ident,
    },
    /// Delete every message of a stream, keeping its topics.
    Purge {
        /// Stream id or name.
        stream: Ident,
    },
}

/// A durability policy (see the durability document).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    /// Acknowledged once accepted in memory.
    Replicated,
    /// Acknowledged once synced to disk.
    Persisted,
}

impl Durability {
    fn as_str(self) -> &'static str {
        match self {
            Durability::Replicated => "replicated",
            Durability::Persisted => "persisted",
        }
    }
}

/// Compression of a topic's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    None,
    Gzip,
}

/// Topic settings sent as options (SPEC §8). Sizes and durations take a number (bytes,
/// microseconds) or a text the server parses ("1 GiB", "7 days").
#[derive(Debug, Clone, Default, Args)]
pub struct TopicSettings {
    /// How long messages live: microseconds, `never`, or a duration ("7 days").
    #[arg(long)]
    pub message_expiry: Option<String>,
    /// Largest size of the topic: bytes, `unlimited`, or a size ("1 GiB").
    #[arg(long)]
    pub max_size: Option<String>,
    /// Compression of stored messages.
    #[arg(long, value_enum)]
    pub compression: Option<Compression>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        /// Stream id or name.
        stream: Ident,
        /// The new topic's name.
        name: String,
        /// Number of partitions.
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        /// When a send is acknowledged.
        #[arg(long, value_enum, default_value = "replicated")]
        durability: Durability,
        /// When a stored consumer offset is acknowledged.
        #[arg(long, value_enum, default_value = "replicated")]
        offset_durability: Durability,
        /// Segment size: bytes or a size ("64 MiB").
        #[arg(long)]
        segment_size: Option<String>,
        #[command(flatten)]
        settings: TopicSettings,
    },
    /// Show a topic and its partitions.
    Get {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
    },
    /// List the topics of a stream.
    List {
        /// Stream id or name.
        stream: Ident,
    },
    /// Rename a topic and change its settings.
    Update {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// The (new) name.
        name: String,
        #[command(flatten)]
        settings: TopicSettings,
    },
    /// Delete a topic with its messages.
    Delete {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
    },
    /// Delete every message of a topic.
    Purge {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum PartitionCommand {
    /// Add partitions to a topic.
    Create {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// How many partitions to add.
        count: u32,
    },
    /// Remove the last partitions of a topic.
    Delete {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// How many partitions to remove.
        count: u32,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum SegmentCommand {
    /// Delete the oldest segments of a partition.
    Delete {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// Partition id (0-based).
        partition: u32,
        /// How many segments to delete.
        count: u32,
    },
}

/// Which partition a send goes to.
#[derive(Debug, Clone, Default, Args)]
#[group(multiple = false)]
pub struct PartitionChoice {
    /// Send to this partition (0-based).
    #[arg(long)]
    pub partition_id: Option<u32>,
    /// Send to the partition this key hashes to.
    #[arg(long)]
    pub key: Option<String>,
}

/// Where a poll starts (one of them; `--next` by default).
#[derive(Debug, Clone, Default, Args)]
#[group(multiple = false)]
pub struct Start {
    /// From this offset.
    #[arg(long)]
    pub offset: Option<u64>,
    /// From the first message.
    #[arg(long)]
    pub first: bool,
    /// The last `--count` messages.
    #[arg(long)]
    pub last: bool,
    /// After the consumer's stored offset (the default).
    #[arg(long)]
    pub next: bool,
    /// From the first message at or after this time (microseconds since the epoch).
    #[arg(long)]
    pub timestamp: Option<u64>,
}

/// Who reads: a consumer (id or name) or a consumer group.
#[derive(Debug, Clone, Default, Args)]
#[group(multiple = false)]
pub struct ConsumerChoice {
    /// Consumer id or name (default 0).
    #[arg(long)]
    pub consumer: Option<Ident>,
    /// Consumer group id or name (reads as the group).
    #[arg(long)]
    pub group: Option<Ident>,
}

impl ConsumerChoice {
    fn wire(&self) -> WireConsumer {
        match (&self.consumer, &self.group) {
            (_, Some(group)) => WireConsumer::consumer_group(group.0.clone()),
            (Some(consumer), None) => WireConsumer::consumer(consumer.0.clone()),
            (None, None) => WireConsumer::consumer(WireIdentifier::numeric(0)),
        }
    }
}

#[derive(Debug, Clone, Subcommand)]
pub enum MessageCommand {
    /// Send messages: the payloads given, or one per line of stdin.
    Send {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// Message payloads; none reads lines from stdin.
        payloads: Vec<String>,
        #[command(flatten)]
        partition: PartitionChoice,
        /// User headers for every message: `key=value,key2=value2` (string values).
        #[arg(long)]
        headers: Option<String>,
    },
    /// Poll messages.
    Poll {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// Partition id (0-based; default 0). With --group, omit it to read the partitions the
        /// server assigns the group member.
        #[arg(long)]
        partition_id: Option<u32>,
        #[command(flatten)]
        start: Start,
        /// Most messages to return.
        #[arg(long, default_value_t = 10)]
        count: u32,
        #[command(flatten)]
        consumer: ConsumerChoice,
        /// Store the offset of the last message returned.
        #[arg(long)]
        auto_commit: bool,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum OffsetCommand {
    /// Show a consumer's stored offset.
    Get {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// Partition id (0-based).
        #[arg(long)]
        partition_id: Option<u32>,
        #[command(flatten)]
        consumer: ConsumerChoice,
    },
    /// Store a consumer's offset.
    Store {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// The offset to store.
        offset: u64,
        /// Partition id (0-based).
        #[arg(long)]
        partition_id: Option<u32>,
        #[command(flatten)]
        consumer: ConsumerChoice,
    },
    /// Delete a consumer's stored offset.
    Delete {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// Partition id (0-based).
        #[arg(long)]
        partition_id: Option<u32>,
        #[command(flatten)]
        consumer: ConsumerChoice,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum GroupCommand {
    /// Create a consumer group.
    Create {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// The new group's name.
        name: String,
    },
    /// Show a consumer group and its members.
    Get {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// Group id or name.
        group: Ident,
    },
    /// List the consumer groups of a topic.
    List {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
    },
    /// Delete a consumer group.
    Delete {
        /// Stream id or name.
        stream: Ident,
        /// Topic id or name.
        topic: Ident,
        /// Group id or name.
        group: Ident,
    },
}

/// Global permissions, one flag each; none given means no permissions.
#[derive(Debug, Clone, Default, Args)]
pub struct PermissionFlags {
    /// May manage the server.
    #[arg(long)]
    pub can_manage_servers: bool,
    /// May read server information.
    #[arg(long)]
    pub can_read_servers: bool,
    /// May manage users.
    #[arg(long)]
    pub can_manage_users: bool,
    /// May read users.
    #[arg(long)]
    pub can_read_users: bool,
    /// May create, change and delete streams.
    #[arg(long)]
    pub can_manage_streams: bool,
    /// May read streams.
    #[arg(long)]
    pub can_read_streams: bool,
    /// May create, change and delete topics.
    #[arg(long)]
    pub can_manage_topics: bool,
    /// May read topics.
    #[arg(long)]
    pub can_read_topics: bool,
    /// May poll messages.
    #[arg(long)]
    pub can_poll: bool,
    /// May send messages.
    #[arg(long)]
    pub can_send: bool,
}

impl PermissionFlags {
    /// The permissions, or `None` when no flag is set.
    pub fn wire(&self) -> Option<WirePermissions> {
        let global = WireGlobalPermissions {
            manage_servers: self.can_manage_servers,
            read_servers: self.can_read_servers,
            manage_users: self.can_manage_users,
            read_users: self.can_read_users,
            manage_streams: self.can_manage_streams,
            read_streams: self.can_read_streams,
            manage_topics: self.can_manage_topics,
            read_topics: self.can_read_topics,
            poll_messages: self.can_poll,
            send_messages: self.can_send,
        };
        let any = [
            global.manage_servers,
            global.read_servers,
            global.manage_users,
            global.read_users,
            global.manage_streams,
            global.read_streams,
            global.manage_topics,
            global.read_topics,
            global.poll_messages,
            global.send_messages,
        ]
        .contains(&true);
        any.then_some(WirePermissions {
            global,
            streams: Vec::new(),
        })
    }
}

#[derive(Debug, Clone, Subcommand)]
pub enum UserCommand {
    /// Create a user.
    Create {
        /// The new user's name (3..=50 bytes).
        // Ids of their own: `username` and `password` are the global login flags' ids.
        #[arg(id = "new_username", value_name = "USERNAME")]
        username: String,
        /// Their password (3..=100 bytes).
        #[arg(id = "new_password", value_name = "PASSWORD")]
        password: String,
        /// Create the user inactive (cannot log in).
        #[arg(long)]
        inactive: bool,
        #[command(flatten)]
        permissions: PermissionFlags,
    },
    /// Show a user and their permissions.
    Get {
        /// User id or name.
        user: Ident,
    },
    /// List users.
    List,
    /// Rename a user or change their status.
    Update {
        /// User id or name.
        user: Ident,
        /// A new username.
        #[arg(long = "new-name", id = "new_name")]
        username: Option<String>,
        /// Let the user log in.
        #[arg(long, conflicts_with = "inactive")]
        active: bool,
        /// Stop the user from logging in.
        #[arg(long)]
        inactive: bool,
    },
    /// Replace a user's global permissions.
    Permissions {
        /// User id or name.
        user: Ident,
        #[command(flatten)]
        permissions: PermissionFlags,
    },
    /// Delete a user.
    Delete {
        /// User id or name.
        user: Ident,
    },
    /// Change a user's password.
    Password {
        /// User id or name.
        user: Ident,
        /// The current password.
        current: String,
        /// The new password.
        new: String,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum ClientsCommand {
    /// Show one client.
    Get {
        /// Client id.
        id: u32,
    },
    /// List connected clients.
    List,
}

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
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The names the user gave, for error messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subject {
    pub stream: Option<String>,
    pub topic: Option<String>,
    pub partition: Option<u32>,
    pub group: Option<String>,
    pub user: Option<String>,
    /// The name a create would give ("already exists" errors).
    pub new_name: Option<String>,
}

fn execute(args: &ConnectArgs, command: ClientCommand) -> Result<View, String> {
    let address = resolve(&args.address)?;
    let mut config = ClientConfig::new(address);
    config.reconnect_retries = 1;
    let anonymous = matches!(command, ClientCommand::Ping { .. }) && args.password.is_none();
    if !anonymous {
        let Some(password) = &args.password else {
            return Err(
                "this command needs a login: pass --password or set CAIRN_PASSWORD".to_string(),
            );
        };
        config = config.with_credentials(&args.username, password);
    }
    // Payloads from stdin are read before connecting, so a slow pipe holds no session.
    let command = with_stdin_payloads(command)?;
    let env = cairn_engine::env::real::env()
        .map_err(|error| format!("cannot start the I/O runtime: {error}"))?;
    cairn_engine::env::real::block_on(async move {
        let mut client = Client::connect(env, config)
            .await
            .map_err(|error| describe(&error, &Subject::default()))?;
        let result = dispatch(&mut client, command).await;
        client.close().await;
        result
    })
}

/// The first address `address` resolves to.
fn resolve(address: &str) -> Result<SocketAddr, String> {
    address
        .to_socket_addrs()
        .map_err(|error| format!("bad server address `{address}`: {error}"))?
        .next()
        .ok_or_else(|| format!("server address `{address}` resolves to nothing"))
}

/// Replaces an empty payload list of `message send` with the lines of stdin.
fn with_stdin_payloads(command: ClientCommand) -> Result<ClientCommand, String> {
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
                .map_err(|error| format!("cannot read payloads from stdin: {error}"))?
                .into_iter()
                .filter(|line| !line.is_empty())
                .collect();
            if payloads.is_empty() {
                return Err("no payloads: give them as arguments or lines on stdin".to_string());
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
async fn dispatch(client: &mut Client, command: ClientCommand) -> Result<View, String> {
    match command {
        ClientCommand::Ping { count } => {
            for _ in 0..count {
                client
                    .ping()
                    .await
                    .map_err(|e| describe(&e, &Subject::default()))?;
            }
            Ok(View::Done(format!("pong from {}", client.address())))
        }
        ClientCommand::Stats => client
            .get_stats()
            .await
            .map(|s| render::stats(&s))
            .map_err(|e| describe(&e, &Subject::default())),
        ClientCommand::Me => client
            .get_me()
            .await
            .map(|me| render::client_details(&me))
            .map_err(|e| describe(&e, &Subject::default())),
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

async fn stream(client: &mut Client, command: StreamCommand) -> Result<View, String> {
    match command {
        StreamCommand::Create { name } => {
            let what = Subject {
                new_name: Some(name.clone()),
                ..Subject::default()
            };
            let created = client
                .create_stream(&name)
                .await
                .map_err(|e| describe(&e, &what))?;
            Ok(render::stream(&created))
        }
        StreamCommand::Get { stream } => {
            let what = subject(Some(&stream), None);
            match client.get_stream(&stream.0).await {
                Ok(Some(details)) => Ok(render::stream_details(&details)),
                Ok(None) => Err(format!("unknown stream `{stream}`")),
                Err(e) => Err(describe(&e, &what)),
            }
        }
        StreamCommand::List => client
            .get_streams()
            .await
            .map(|list| render::streams(&list))
            .map_err(|e| describe(&e, &Subject::default())),
        StreamCommand::Update { stream, name } => {
            let what = Subject {
                new_name: Some(name.clone()),
                ..subject(Some(&stream), None)
            };
            client
                .update_stream(&stream.0, &name)
                .await
                .map_err(|e| describe(&e, &what))?;
            Ok(View::Done(format!("stream `{stream}` renamed to `{name}`")))
        }
        StreamCommand::Delete { stream } => {
            let what = subject(Some(&stream), None);
            client
                .delete_stream(&stream.0)
                .await
                .map_err(|e| describe(&e, &what))?;
            Ok(View::Done(format!("stream `{stream}` deleted")))
        }
        StreamCommand::Purge { stream } => {
            let what = subject(Some(&stream), None);
            client
                .purge_stream(&stream.0)
                .await
                .map_err(|e| describe(&e, &what))?;
            Ok(View::Done(format!("stream `{stream}` purged")))
        }
    }
}

async fn topic(client: &mut Client, command: TopicCommand) -> Result<View, String> {
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
                .map_err(|e| describe(&e, &what))?;
            Ok(render::topic_details(&created))
        }
        TopicCommand::Get { stream, topic } => {
            let what = subject(Some(&stream), Some(&topic));
            match client.get_topic(&stream.0, &topic.0).await {
                Ok(Some(details)) => Ok(render::topic_details(&details)),
                Ok(None) => Err(format!("unknown topic `{topic}` in stream `{stream}`")),
                Err(e) => Err(describe(&e, &what)),
            }
        }
        TopicCommand::List { stream } => {
            let what = subject(Some(&stream), None);
            client
                .get_topics(&stream.0)
                .await
                .map(|list| render::topics(&list))
                .map_err(|e| describe(&e, &what))
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
                .map_err(|e| describe(&e, &what))?;
            Ok(View::Done(format!("topic `{topic}` updated")))
        }
        TopicCommand::Delete { stream, topic } => {
            let what = subject(Some(&stream), Some(&topic));
            client
                .delete_topic(&stream.0, &topic.0)
                .await
                .map_err(|e| describe(&e, &what))?;
            Ok(View::Done(format!("topic `{topic}` deleted")))
        }
        TopicCommand::Purge { stream, topic } => {
            let what = subject(Some(&stream), Some(&topic));
            client
                .purge_topic(&stream.0, &topic.0)
                .await
                .map_err(|e| describe(&e, &what))?;
            Ok(View::Done(format!("topic `{topic}` purged")))
        }
    }
}

async fn partition(client: &mut Client, command: PartitionCommand) -> Result<View, String> {
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
                .map_err(|e| describe(&e, &what))?;
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
                .map_err(|e| describe(&e, &what))?;
            Ok(View::Done(format!(
                "{count} partition(s) removed from `{topic}`"
            )))
        }
    }
}

async fn segment(client: &mut Client, command: SegmentCommand) -> Result<View, String> {
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
        .map_err(|e| describe(&e, &what))?;
    Ok(View::Done(format!(
        "up to {count} segment(s) of partition {partition} deleted"
    )))
}

async fn message(client: &mut Client, command: MessageCommand) -> Result<View, String> {
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
                .map_err(|e| describe(&e, &what))?;
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
                    .map_err(|e| describe(&e, &what))?;
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
                .map_err(|e| describe(&e, &what))?;
            render::messages(&polled)
        }
    }
}

async fn offset(client: &mut Client, command: OffsetCommand) -> Result<View, String> {
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
                Ok(None) => Err("no offset stored for this consumer".to_string()),
                Err(e) => Err(describe(&e, &what)),
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
                .map_err(|e| describe(&e, &what))?;
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
                .map_err(|e| describe(&e, &what))?;
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

async fn group(client: &mut Client, command: GroupCommand) -> Result<View, String> {
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
                Err(e) => Err(describe(&e, &what)),
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
                Ok(None) => Err(format!(
                    "unknown consumer group `{group}` in topic `{topic}`"
                )),
                Err(e) => Err(describe(&e, &what)),
            }
        }
        GroupCommand::List { stream, topic } => {
            let what = subject(Some(&stream), Some(&topic));
            client
                .get_consumer_groups(&stream.0, &topic.0)
                .await
                .map(|list| render::groups(&list))
                .map_err(|e| describe(&e, &what))
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
                .map_err(|e| describe(&e, &what))?;
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

async fn user(client: &mut Client, command: UserCommand) -> Result<View, String> {
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
                Err(e) => Err(describe(&e, &what)),
            }
        }
        UserCommand::Get { user } => match client.get_user(&user.0).await {
            Ok(Some(details)) => Ok(render::user_details(&details)),
            Ok(None) => Err(format!("unknown user `{user}`")),
            Err(e) => Err(describe(&e, &user_subject(&user))),
        },
        UserCommand::List => client
            .get_users()
            .await
            .map(|list| render::users(&list))
            .map_err(|e| describe(&e, &Subject::default())),
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
                return Err("nothing to update: give --new-name, --active or --inactive".into());
            }
            client
                .update_user(&user.0, username.as_deref(), status)
                .await
                .map_err(|e| describe(&e, &user_subject(&user)))?;
            Ok(View::Done(format!("user `{user}` updated")))
        }
        UserCommand::Permissions { user, permissions } => {
            client
                .update_permissions(&user.0, permissions.wire())
                .await
                .map_err(|e| describe(&e, &user_subject(&user)))?;
            Ok(View::Done(format!("permissions of `{user}` replaced")))
        }
        UserCommand::Delete { user } => {
            client
                .delete_user(&user.0)
                .await
                .map_err(|e| describe(&e, &user_subject(&user)))?;
            Ok(View::Done(format!("user `{user}` deleted")))
        }
        UserCommand::Password { user, current, new } => {
            client
                .change_password(&user.0, &current, &new)
                .await
                .map_err(|e| describe(&e, &user_subject(&user)))?;
            Ok(View::Done(format!("password of `{user}` changed")))
        }
    }
}

async fn clients(client: &mut Client, command: ClientsCommand) -> Result<View, String> {
    match command {
        ClientsCommand::Get { id } => match client.get_client(id).await {
            Ok(Some(details)) => Ok(render::client_details(&details)),
            Ok(None) => Err(format!("unknown client {id}")),
            Err(e) => Err(describe(&e, &Subject::default())),
        },
        ClientsCommand::List => client
            .get_clients()
            .await
            .map(|list| render::clients(&list))
            .map_err(|e| describe(&e, &Subject::default())),
    }
}

fn partitioning(choice: &PartitionChoice) -> Result<WirePartitioning, String> {
    match (&choice.partition_id, &choice.key) {
        (Some(id), _) => Ok(WirePartitioning::PartitionId(*id)),
        (None, Some(key)) => WirePartitioning::messages_key(key.as_bytes().to_vec())
            .map_err(|error| format!("bad --key: {error}")),
        (None, None) => Ok(WirePartitioning::Balanced),
    }
}

fn strategy(start: &Start) -> WirePollingStrategy {
    if let Some(offset) = start.offset {
        WirePollingStrategy::offset(offset)
    } else if let Some(timestamp) = start.timestamp {
        WirePollingStrategy::timestamp(timestamp)
    } else if start.first {
        WirePollingStrategy::first()
    } else if start.last {
        WirePollingStrategy::last()
    } else {
        WirePollingStrategy::next()
    }
}

/// TLV kinds (SPEC §1.6).
const KIND_STRING: u8 = 2;
const KIND_UINT64: u8 = 12;

/// One option value: a number as Uint64, `never`/`unlimited` as u64::MAX, else a string the
/// server parses.
fn option_value(text: &str) -> (u8, Vec<u8>) {
    if let Ok(number) = text.parse::<u64>() {
        return (KIND_UINT64, number.to_le_bytes().to_vec());
    }
    if text.eq_ignore_ascii_case("never") || text.eq_ignore_ascii_case("unlimited") {
        return (KIND_UINT64, u64::MAX.to_le_bytes().to_vec());
    }
    (KIND_STRING, text.as_bytes().to_vec())
}

/// CreateTopic options: the durability keys always (as the 0.11.0 SDK sends them), the
/// rest when given.
pub fn create_topic_options(
    durability: Durability,
    offset_durability: Durability,
    segment_size: Option<String>,
    settings: &TopicSettings,
) -> Result<WireOptions, String> {
    let mut pairs = vec![
        (
            "durability",
            (KIND_STRING, durability.as_str().as_bytes().to_vec()),
        ),
        (
            "consumer_offset_durability",
            (KIND_STRING, offset_durability.as_str().as_bytes().to_vec()),
        ),
    ];
    if let Some(size) = &segment_size {
        pairs.push(("segment_size", option_value(size)));
    }
    topic_options(pairs, settings)
}

/// The options block of `pairs` plus `settings`, keys sorted bytewise.
fn topic_options(
    mut pairs: Vec<(&'static str, (u8, Vec<u8>))>,
    settings: &TopicSettings,
) -> Result<WireOptions, String> {
    if let Some(expiry) = &settings.message_expiry {
        pairs.push(("message_expiry", option_value(expiry)));
    }
    if let Some(size) = &settings.max_size {
        pairs.push(("max_topic_size", option_value(size)));
    }
    if let Some(compression) = settings.compression {
        let name = match compression {
            Compression::None => "none",
            Compression::Gzip => "gzip",
        };
        pairs.push((
            "compression_algorithm",
            (KIND_STRING, name.as_bytes().to_vec()),
        ));
    }
    pairs.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let entries: Vec<(u8, &[u8], u8, &[u8])> = pairs
        .iter()
        .map(|(key, (kind, value))| (KIND_STRING, key.as_bytes(), *kind, value.as_slice()))
        .collect();
    let mut buf = BytesMut::new();
    iggy_binary_protocol::encode_user_headers(&entries, &mut buf);
    WireOptions::from_bytes(buf.freeze()).map_err(|error| format!("bad topic option: {error}"))
}

/// `key=value,key2=value2` as encoded user headers (string keys and values).
pub fn parse_headers(text: &str) -> Result<Vec<u8>, String> {
    let mut pairs = Vec::new();
    for pair in text.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("header `{pair}` is not key=value"))?;
        if key.is_empty() || key.len() > 255 || value.is_empty() || value.len() > 255 {
            return Err(format!(
                "header `{pair}`: keys and values are 1..=255 bytes"
            ));
        }
        pairs.push((key, value));
    }
    let entries: Vec<(u8, &[u8], u8, &[u8])> = pairs
        .iter()
        .map(|(k, v)| (KIND_STRING, k.as_bytes(), KIND_STRING, v.as_bytes()))
        .collect();
    let mut buf = BytesMut::new();
    iggy_binary_protocol::encode_user_headers(&entries, &mut buf);
    iggy_binary_protocol::validate_user_headers(&buf).map_err(|e| format!("bad headers: {e}"))?;
    Ok(buf.to_vec())
}

/// What went wrong, in the user's terms: not-found and already-exists codes name the
/// identifier the user gave.
pub fn describe(error: &ClientError, what: &Subject) -> String {
    let named = |value: &Option<String>| value.clone().unwrap_or_else(|| "?".to_string());
    match error {
        ClientError::Unreachable { address, source } => {
            format!("server unreachable at {address}: {}", io_reason(source))
        }
        ClientError::Server { code, .. } => match code {
            1009 | 1010 => format!("unknown stream `{}`", named(&what.stream)),
            2010 | 2011 => format!(
                "unknown topic `{}` in stream `{}`",
                named(&what.topic),
                named(&what.stream)
            ),
            3007 => match what.partition {
                Some(p) => format!("unknown partition {p} in topic `{}`", named(&what.topic)),
                None => format!("unknown partition in topic `{}`", named(&what.topic)),
            },
            5000 | 5003 => format!("unknown consumer group `{}`", named(&what.group)),
            20 if what.user.is_some() => format!("unknown user `{}`", named(&what.user)),
            1012 => format!("stream `{}` already exists", named(&what.new_name)),
            2013 => format!(
                "topic `{}` already exists in stream `{}`",
                named(&what.new_name),
                named(&what.stream)
            ),
            5004 => format!("consumer group `{}` already exists", named(&what.new_name)),
            46 => format!("user `{}` already exists", named(&what.new_name)),
            3021 => "no offset stored for this consumer".to_string(),
            41 => "permission denied: the user may not do this (Unauthorized, code 41)".to_string(),
            _ => error.to_string(),
        },
        _ => error.to_string(),
    }
}

/// An I/O error in a few words ("connection refused").
fn io_reason(error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::ConnectionRefused => "connection refused".to_string(),
        ErrorKind::ConnectionReset => "connection reset".to_string(),
        ErrorKind::TimedOut => "timed out".to_string(),
        ErrorKind::AddrNotAvailable => "address not available".to_string(),
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests;

//! The `cairn` client's arguments: connection flags ([`ConnectArgs`]), the command tree
//! ([`ClientCommand`] and one enum per resource), and the small value types clap parses
//! into ([`Ident`], [`Durability`], flag groups). Nothing here talks to a server.

use super::error::CliError;
use clap::{Args, Subcommand};
use iggy_binary_protocol::{WireConsumer, WireGlobalPermissions, WireIdentifier, WirePermissions};

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
    type Err = CliError;
    fn from_str(s: &str) -> Result<Ident, CliError> {
        if let Ok(id) = s.parse::<u32>() {
            return Ok(Ident(WireIdentifier::numeric(id)));
        }
        WireIdentifier::named(s)
            .map(Ident)
            .map_err(|source| CliError::BadIdent {
                text: s.to_string(),
                source,
            })
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
    pub(super) fn as_str(self) -> &'static str {
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

/// Topic settings sent as options (`docs/wire.md` §8). Sizes and durations take a number (bytes,
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
    pub(super) fn wire(&self) -> WireConsumer {
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

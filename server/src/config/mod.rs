//! The configuration of `cairn serve`: defaults < the TOML file < `CAIRN_*` variables.
//!
//! ```text
//!  ServerConfig::default()          every key has one (no default password: root.password
//!     ▲ overridden by                is optional, none means "generate on the first start")
//!  the TOML file                     --config <path> (must exist), else ./cairn.toml if any
//!     ▲ overridden by
//!  CAIRN_<SECTION>_<KEY>=value       e.g. CAIRN_TCP_ADDRESS, CAIRN_NODE_SHARDS; top-level
//!                                    keys without a section: CAIRN_DATA_DIR; a table
//!                                    in a section: CAIRN_TCP_TLS_ENABLED
//! ```
//!
//! Every layer is a figment provider with its own metadata (the file's path, or the one
//! variable's name), so an error names the key, where its value came from and what was
//! expected. Unknown keys are refused in the file (`deny_unknown_fields`) and in the
//! environment (any `CAIRN_*` variable naming no key), except the command-line client's own
//! `CAIRN_USERNAME`, `CAIRN_PASSWORD` and `CAIRN_ADDRESS`, which the server ignores. Ranges
//! are checked once everything is merged ([`ServerConfig::validate`]).
//!
//! Durations are humantime strings (`"10s"`, `"5m"`, `"250ms"`, `"1h 30m"`).
//!
//! - this file: the sections, their keys and defaults, and [`ConfigError`];
//! - `load`: the layering (file, then variables, each a figment provider) and `--print-config`;
//! - `validate`: the range checks, one per section, and the mapping to the engine's
//!   [`NodeSettings`](cairn_engine::node::NodeSettings).

mod cluster;
mod load;
#[cfg(test)]
mod tests;
mod validate;

pub use cluster::{ClusterConfig, MemberConfig, MAX_MEMBERS};
pub use load::load;

use cairn_engine::config::{PartitionSettings, TopicConfig};
use cairn_engine::format::Limits;
use cairn_engine::node::{NodeLimits, PasswordCost};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The file read when no `--config` is given, if it exists in the working directory.
pub const DEFAULT_CONFIG_FILE: &str = "cairn.toml";
/// What every environment variable of the configuration starts with.
pub const ENV_PREFIX: &str = "CAIRN_";
/// The command-line client's variables: the server ignores them.
pub const CLIENT_VARS: [&str; 3] = ["CAIRN_USERNAME", "CAIRN_PASSWORD", "CAIRN_ADDRESS"];
/// What `--print-config` prints instead of a configured root password. Refused as a
/// password, so that a printed configuration saved as a file cannot set it.
pub const PASSWORD_MASK: &str = "***";

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

pub const MIN_FRAME_BYTES: u64 = 4 * KIB;
pub const MAX_FRAME_BYTES: u64 = GIB;
pub const MAX_CONNECTIONS: usize = 1 << 20;
pub const MIN_REPLY_BYTES: u64 = 64 * KIB;
pub const MAX_REPLY_BYTES: u64 = GIB;
/// Most bytes of a username or a password (Iggy's wire strings have a one-byte length).
pub const MAX_CREDENTIAL_BYTES: usize = 255;
pub const MAX_SHARDS: usize = 1024;
/// Most bytes `limits.buffered_bytes` may be.
pub const MAX_BUFFERED_BYTES: u64 = 64 * GIB;
/// The node journal must hold at least one batch of the largest size the format allows,
/// or a send of such a batch would be refused forever.
pub const MIN_JOURNAL_BYTES: u64 = Limits::MAX_BATCH_BYTES;
pub const MAX_IN_FLIGHT_PER_CLIENT: usize = 65_536;
/// 4 GiB of memory per password hash.
pub const MAX_PASSWORD_HASH_MEMORY_KIB: u32 = 4 * 1024 * 1024;
pub const MAX_PASSWORD_HASH_ITERATIONS: u32 = 64;
pub const MAX_FAILED_LOGINS: u32 = 1_000_000;
/// Longest timeout or interval (kept far from `Instant` arithmetic overflowing).
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The whole configuration of `cairn serve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The data directory (holds `metadata/` and `streams/`).
    pub data_dir: PathBuf,
    pub tcp: TcpConfig,
    pub http: HttpConfig,
    pub root: RootConfig,
    pub node: NodeConfig,
    pub auth: AuthConfig,
    pub log: LogConfig,
    pub limits: LimitsConfig,
    pub cluster: ClusterConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            data_dir: PathBuf::from("local_data"),
            tcp: TcpConfig::default(),
            http: HttpConfig::default(),
            root: RootConfig::default(),
            node: NodeConfig::default(),
            auth: AuthConfig::default(),
            log: LogConfig::default(),
            limits: LimitsConfig::default(),
            cluster: ClusterConfig::default(),
        }
    }
}

/// `[tcp]`: the listener and the bounds of one connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TcpConfig {
    /// `IP:PORT` to listen on.
    #[serde(with = "socket_addr")]
    pub address: SocketAddr,
    /// Largest request frame accepted; a larger one closes the connection.
    pub max_frame_bytes: u64,
    /// Connections open at once; more are refused.
    pub max_connections: usize,
    /// A connection must log in within it.
    #[serde(with = "duration")]
    pub handshake_timeout: Duration,
    /// A connection that sends nothing for this long is closed (the Iggy SDK pings every
    /// 5 s, so a healthy client never comes near the default).
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// The most batch bytes one poll reply carries (a single larger stored batch still goes
    /// whole): with one request served at a time, the reply bytes one slow connection can
    /// hold.
    pub max_reply_bytes: u64,
    pub tls: TlsConfig,
}

impl Default for TcpConfig {
    fn default() -> Self {
        // The server's own defaults (one place says them).
        let limits = crate::ServerLimits::default();
        TcpConfig {
            address: SocketAddr::from(([127, 0, 0, 1], 8090)),
            max_frame_bytes: u64::from(limits.max_frame_bytes),
            max_connections: limits.max_connections,
            handshake_timeout: limits.handshake_timeout,
            idle_timeout: limits.idle_timeout,
            max_reply_bytes: 64 * MIB,
            tls: TlsConfig::default(),
        }
    }
}

/// `[limits]`: what every client shares, bounded server-wide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Bytes of request bodies being read over every TCP and HTTP connection (past it, a
    /// body above 64 KiB waits before it is read), and, as a second budget of the same
    /// size, of replies reserved or not yet written (each user an eighth). Never
    /// below the largest request and its reply (`max_frame_bytes` or `max_body_bytes`,
    /// plus `max_reply_bytes`).
    pub buffered_bytes: u64,
    /// Binary-protocol connections one IP address may hold (at most `tcp.max_connections`).
    pub connections_per_address: usize,
    /// Binary-protocol connections not logged in, at once (at most `tcp.max_connections`).
    pub anonymous_connections: usize,
    /// Binary-protocol connections not logged in from one address (an IPv6 /64 counts as
    /// one), so that no address fills the anonymous share.
    pub anonymous_per_address: usize,
    /// Consumer-group memberships one user's connections may hold at once (root's are not
    /// counted), so that no one tenant takes the node's 65,536.
    pub memberships_per_user: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let limits = crate::ServerLimits::default();
        LimitsConfig {
            buffered_bytes: limits.buffered_bytes,
            connections_per_address: limits.connections_per_address,
            anonymous_connections: limits.anonymous_connections,
            anonymous_per_address: limits.anonymous_per_address,
            memberships_per_user: limits.memberships_per_user,
        }
    }
}

/// `[tcp.tls]` and `[http.tls]`: TLS on a listener, off by default. Paths relative to the working
/// directory; the files are read (and the key checked against the certificate) when the
/// configuration loads, and again at start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    pub enabled: bool,
    /// PEM: the server's certificate, then any intermediates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM: the private key of the first certificate (PKCS#8, PKCS#1 or SEC1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

/// `[http]`: the HTTP API (Iggy's shape) and `/metrics`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    pub enabled: bool,
    /// `IP:PORT` to listen on (Iggy's default port).
    #[serde(with = "socket_addr")]
    pub address: SocketAddr,
    /// Largest request body accepted; a larger one is answered 413.
    pub max_body_bytes: u64,
    /// Requests served at once; more wait.
    pub max_concurrent_requests: usize,
    /// How long a bearer token from a login is valid.
    #[serde(with = "duration")]
    pub token_expiry: Duration,
    /// Who may scrape `/metrics`: `authenticated` (the default: a bearer token),
    /// `open_on_loopback` (callers from a loopback address need none) or `open`.
    pub metrics_access: crate::http::MetricsAccess,
    /// `[http.tls]`: HTTPS, off by default (the same keys as `[tcp.tls]`).
    pub tls: TlsConfig,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("enabled", &self.enabled)
            .field("address", &self.address)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_concurrent_requests", &self.max_concurrent_requests)
            .field("token_expiry", &self.token_expiry)
            .field("metrics_access", &self.metrics_access)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            enabled: true,
            address: SocketAddr::from(([127, 0, 0, 1], 3000)),
            max_body_bytes: 64 * MIB,
            max_concurrent_requests: 1024,
            token_expiry: Duration::from_secs(3600),
            metrics_access: crate::http::MetricsAccess::Authenticated,
            tls: TlsConfig::default(),
        }
    }
}

/// `[root]`: the root user created at the first start.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RootConfig {
    pub username: String,
    /// None: the server generates one on the first start (there is no default password).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

impl Default for RootConfig {
    fn default() -> Self {
        RootConfig {
            username: "iggy".into(),
            password: None,
        }
    }
}

/// Never prints the password.
impl fmt::Debug for RootConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RootConfig")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| PASSWORD_MASK))
            .finish()
    }
}

/// `[node]`: the engine's settings ([`ServerConfig::node_settings`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// Partition shards (workers); 0 means one per core.
    pub shards: usize,
    /// Re-hash every batch a disk poll reads.
    pub validate_checksum: bool,
    /// Write a `persisted` partition's superblock record as a job while its shard serves
    /// on, overlapping the next group's log sync (off: in the log sync's wait).
    pub pipeline_records: bool,
    /// Files and directories the node creates are readable by their group too (`0640` and
    /// `0750`), not only by their owner (`0600` and `0700`).
    pub data_group_access: bool,
    /// How often each shard's retention cleaner runs.
    #[serde(with = "duration")]
    pub cleaner_interval: Duration,
    /// Unflushed message bytes all partitions together may hold.
    pub journal_bytes: u64,
    /// Requests one client may have in flight at once.
    pub in_flight_per_client: usize,
    /// Argon2id memory cost of a password hash, in KiB.
    pub password_hash_memory_kib: u32,
    /// Argon2id passes of a password hash.
    pub password_hash_iterations: u32,
    /// A new topic's flush threshold in messages, when its creation does not name one.
    pub messages_required_to_save: u32,
    /// A new topic's flush threshold in bytes, when its creation does not name one.
    pub size_of_messages_required_to_save: u64,
}

impl Default for NodeConfig {
    fn default() -> Self {
        let limits = NodeLimits::default();
        let cost = PasswordCost::default();
        NodeConfig {
            shards: 0,
            validate_checksum: PartitionSettings::default().validate_checksum,
            pipeline_records: PartitionSettings::default().pipeline_records,
            data_group_access: false,
            cleaner_interval: Duration::from_secs(60),
            journal_bytes: limits.journal_bytes,
            in_flight_per_client: limits.in_flight_per_client,
            password_hash_memory_kib: cost.memory_kib,
            password_hash_iterations: cost.iterations,
            messages_required_to_save: TopicConfig::default().messages_required_to_save,
            size_of_messages_required_to_save: TopicConfig::default()
                .size_of_messages_required_to_save,
        }
    }
}

/// `[auth]`: failed logins allowed per remote address and account within a window (token
/// logins: per address), counted before the password is checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub max_failed_logins: u32,
    #[serde(with = "duration")]
    pub failed_login_window: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        // The server's own defaults (one place says them).
        let limits = crate::ServerLimits::default();
        AuthConfig {
            max_failed_logins: limits.max_failed_logins,
            failed_login_window: limits.failed_login_window,
        }
    }
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A `tracing_subscriber::EnvFilter` directive string (`"info"`, `"warn,cairn=debug"`).
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Human,
            level: "info".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Default,
    File(PathBuf),
    /// The environment variable's name.
    Env(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("the defaults"),
            Origin::File(path) => write!(f, "{}", path.display()),
            Origin::Env(var) => write!(f, "environment variable {var}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {}: no such file", path.display())]
    MissingFile { path: PathBuf },
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Syntax { path: PathBuf, message: String },
    #[error("unknown key {key} in {origin} (expected one of: {})", expected.join(", "))]
    UnknownKey {
        /// The dotted key (`tcp.adress`).
        key: String,
        origin: Origin,
        expected: Vec<String>,
    },
    #[error("{var} names the section [{section}], not a key (expected {var}_<KEY>, KEY one of: {})", expected.join(", "))]
    SectionVariable {
        var: String,
        section: String,
        expected: Vec<String>,
    },
    #[error("{}", invalid(key, origin, message))]
    Invalid {
        key: String,
        origin: Origin,
        message: String,
    },
}

fn invalid(key: &str, origin: &Origin, message: &str) -> String {
    match origin {
        Origin::Env(var) => format!("{var}: {message}"),
        Origin::File(path) => format!("{key} in {}: {message}", path.display()),
        Origin::Default => format!("{key}: {message}"),
    }
}

/// Durations as humantime strings.
mod duration {
    use serde::{de, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = Duration;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(r#"a duration such as "10s", "5m" or "250ms""#)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Duration, E> {
                humantime::parse_duration(s).map_err(|e| {
                    E::custom(format!(
                        r#"invalid duration {s:?}: {e} (expected a duration such as "10s", "5m" or "250ms")"#
                    ))
                })
            }
        }
        d.deserialize_str(Visitor)
    }
}

/// Socket addresses as `IP:PORT` strings.
pub(crate) mod socket_addr {
    use serde::{de, Deserializer, Serializer};
    use std::net::SocketAddr;

    pub fn serialize<S: Serializer>(value: &SocketAddr, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = SocketAddr;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(r#"a socket address such as "127.0.0.1:8090""#)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<SocketAddr, E> {
                s.parse().map_err(|_| {
                    E::custom(format!(
                        r#"invalid socket address {s:?} (expected IP:PORT, such as "127.0.0.1:8090" or "[::1]:8090")"#
                    ))
                })
            }
        }
        d.deserialize_str(Visitor)
    }
}

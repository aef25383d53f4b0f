//! The configuration of `cairn serve`: defaults < the TOML file < `CAIRN_*` variables.
//!
//! ```text
//!  ServerConfig::default()          every key has one (no default password: root.password
//!     ▲ overridden by                is optional, none means "generate on the first start")
//!  the TOML file                     --config <path> (must exist), else ./cairn.toml if any
//!     ▲ overridden by
//!  CAIRN_<SECTION>_<KEY>=value       e.g. CAIRN_TCP_ADDRESS, CAIRN_NODE_SHARDS; top-level
//!                                    keys without a section: CAIRN_DATA_DIR
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

use cairn_engine::config::PartitionSettings;
use cairn_engine::format::Limits;
use cairn_engine::node::{NodeLimits, NodeSettings, PasswordCost};
use figment::value::{Dict, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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
pub const MIN_REPLY_BUFFER_BYTES: u64 = 64 * KIB;
pub const MAX_REPLY_BUFFER_BYTES: u64 = 16 * GIB;
/// Most bytes of a username or a password (Iggy's wire strings have a one-byte length).
pub const MAX_CREDENTIAL_BYTES: usize = 255;
pub const MAX_SHARDS: usize = 1024;
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
    pub root: RootConfig,
    pub node: NodeConfig,
    pub auth: AuthConfig,
    pub log: LogConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            data_dir: PathBuf::from("local_data"),
            tcp: TcpConfig::default(),
            root: RootConfig::default(),
            node: NodeConfig::default(),
            auth: AuthConfig::default(),
            log: LogConfig::default(),
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
    /// Reply bytes that may wait on one slow connection.
    pub max_reply_buffer_bytes: u64,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            address: SocketAddr::from(([127, 0, 0, 1], 8090)),
            max_frame_bytes: 64 * MIB,
            max_connections: 4096,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(5 * 60),
            max_reply_buffer_bytes: 64 * MIB,
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
}

impl Default for NodeConfig {
    fn default() -> Self {
        let limits = NodeLimits::default();
        let cost = PasswordCost::default();
        NodeConfig {
            shards: 0,
            validate_checksum: PartitionSettings::default().validate_checksum,
            cleaner_interval: Duration::from_secs(60),
            journal_bytes: limits.journal_bytes,
            in_flight_per_client: limits.in_flight_per_client,
            password_hash_memory_kib: cost.memory_kib,
            password_hash_iterations: cost.iterations,
        }
    }
}

/// `[auth]`: failed logins allowed per remote address within a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub max_failed_logins: u32,
    #[serde(with = "duration")]
    pub failed_login_window: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            max_failed_logins: 5,
            failed_login_window: Duration::from_secs(60),
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

/// Loads the configuration: the defaults, then `file` (or `./cairn.toml` when `file` is
/// none and it exists), then the `CAIRN_*` variables among `vars`, then checks ranges.
/// The binary passes `std::env::vars()`.
pub fn load(
    file: Option<&Path>,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<ServerConfig, ConfigError> {
    load_layers(Some(file_source(file)), vars)
}

/// The file to read and whether it must exist: the given one, else `./cairn.toml` if any.
fn file_source(file: Option<&Path>) -> (PathBuf, bool) {
    match file {
        Some(path) => (path.to_path_buf(), true),
        None => (PathBuf::from(DEFAULT_CONFIG_FILE), false),
    }
}

/// `file`: the path and whether it must exist.
fn load_layers(
    file: Option<(PathBuf, bool)>,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<ServerConfig, ConfigError> {
    let schema = schema();
    let mut figment = Figment::new();
    let mut file_path = None;
    if let Some((path, required)) = file {
        if let Some(text) = read_file(&path, required)? {
            let table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::Syntax {
                path: path.clone(),
                message: e.to_string().trim_end().to_string(),
            })?;
            let dict = Value::serialize(&table)
                .ok()
                .and_then(Value::into_dict)
                .ok_or_else(|| ConfigError::Syntax {
                    path: path.clone(),
                    message: "not a table of keys".into(),
                })?;
            figment = figment.merge(Layer {
                metadata: Metadata::from("config file", path.as_path()),
                dict,
            });
            file_path = Some(path);
        }
    }
    let mut vars: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(name, _)| name.starts_with(ENV_PREFIX) && !CLIENT_VARS.contains(&name.as_str()))
        .collect();
    vars.sort();
    for (name, raw) in vars {
        let (key, value) = env_value(&schema, &name, raw)?;
        figment = figment.merge(Layer {
            metadata: Metadata::named(name),
            dict: nest(&key, value),
        });
    }
    let origin_of = |key: &str| match figment.find_metadata(key) {
        Some(metadata) => origin(metadata, file_path.as_deref()),
        None => Origin::Default,
    };
    let config: ServerConfig = figment
        .extract()
        .map_err(|e| from_figment(e, file_path.as_deref(), &origin_of))?;
    config.validate_with(&origin_of)?;
    Ok(config)
}

/// The file's text; none when it is not there and not required.
#[allow(
    clippy::disallowed_methods,
    reason = "the configuration is read once at start, before the Env exists (it is made from it)"
)]
fn read_file(path: &Path, required: bool) -> Result<Option<String>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if required {
                Err(ConfigError::MissingFile {
                    path: path.to_path_buf(),
                })
            } else {
                Ok(None)
            }
        }
        Err(source) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// One layer: a file's keys or one environment variable's.
struct Layer {
    metadata: Metadata,
    dict: Dict,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<figment::value::Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

fn nest(key: &str, value: Value) -> Dict {
    match figment::util::nest(key, value) {
        Value::Dict(_, dict) => dict,
        _ => unreachable!("nest makes a dict of a non-empty key"),
    }
}

fn origin(metadata: &Metadata, file: Option<&Path>) -> Origin {
    match (&metadata.source, file) {
        (Some(figment::Source::File(_)), Some(file)) => Origin::File(file.to_path_buf()),
        _ if metadata.name.starts_with(ENV_PREFIX) => Origin::Env(metadata.name.to_string()),
        _ => Origin::Default,
    }
}

/// Every key with a value of its type: the defaults, with a password so that it is there.
fn schema() -> Dict {
    let mut config = ServerConfig::default();
    config.root.password = Some(String::new());
    Value::serialize(config)
        .ok()
        .and_then(Value::into_dict)
        .expect("the configuration serializes to a dict")
}

/// The keys of `section` (or the top-level keys) in their declared order, sections as
/// `name.*`: asked of serde itself, by the error an unknown key gets.
fn keys_of(schema: &Dict, section: Option<&str>) -> Vec<String> {
    let probe = "\u{0}";
    let key = match section {
        Some(section) => format!("{section}.{probe}"),
        None => probe.to_string(),
    };
    let figment = Figment::new().merge(Layer {
        metadata: Metadata::named("probe"),
        dict: nest(&key, Value::from(0)),
    });
    let fields: &[&str] = match figment.extract::<ServerConfig>() {
        Err(e) => match e.into_iter().next().map(|e| e.kind) {
            Some(figment::error::Kind::UnknownField(_, fields)) => fields,
            _ => &[],
        },
        Ok(_) => &[],
    };
    fields
        .iter()
        .map(|field| match schema.get(*field) {
            Some(Value::Dict(..)) if section.is_none() => format!("{field}.*"),
            _ => field.to_string(),
        })
        .collect()
}

/// The key `name` sets and its value, typed as the key is (the variable's text is taken
/// whole: a password of digits stays a string).
fn env_value(schema: &Dict, name: &str, raw: String) -> Result<(String, Value), ConfigError> {
    let rest = &name[ENV_PREFIX.len()..];
    let lower = rest.to_ascii_lowercase();
    let unknown = |key: String, expected: Vec<String>| ConfigError::UnknownKey {
        key,
        origin: Origin::Env(name.to_string()),
        expected,
    };
    let sections: Vec<(&String, &Dict)> = schema
        .iter()
        .filter_map(|(key, value)| value.as_dict().map(|dict| (key, dict)))
        .collect();
    let (key, expected, kind) = match sections
        .iter()
        .find(|(section, _)| lower.starts_with(&format!("{section}_")))
    {
        Some((section, dict)) => {
            let field = &lower[section.len() + 1..];
            (
                format!("{section}.{field}"),
                keys_of(schema, Some(section)),
                dict.get(field).filter(|value| value.as_dict().is_none()),
            )
        }
        None => {
            if let Some((section, _)) = sections.iter().find(|(section, _)| **section == lower) {
                return Err(ConfigError::SectionVariable {
                    var: name.to_string(),
                    section: section.to_string(),
                    expected: keys_of(schema, Some(section))
                        .iter()
                        .map(|k| k.to_ascii_uppercase())
                        .collect(),
                });
            }
            (
                lower.clone(),
                keys_of(schema, None),
                schema.get(&lower).filter(|value| value.as_dict().is_none()),
            )
        }
    };
    // Variable names are upper case: CAIRN_Tcp_Address names no key.
    let kind = match kind {
        Some(kind) if rest == rest.to_ascii_uppercase() => kind,
        _ => return Err(unknown(key, expected)),
    };
    let value = match kind {
        Value::Bool(..) => match raw.as_str() {
            "true" => Value::from(true),
            "false" => Value::from(false),
            _ => Value::from(raw),
        },
        Value::Num(..) => {
            if let Ok(n) = raw.parse::<u64>() {
                Value::from(n)
            } else if let Ok(n) = raw.parse::<i64>() {
                Value::from(n)
            } else {
                Value::from(raw)
            }
        }
        _ => Value::from(raw),
    };
    Ok((key, value))
}

fn from_figment(
    error: figment::Error,
    file: Option<&Path>,
    origin_of: &dyn Fn(&str) -> Origin,
) -> ConfigError {
    let error = error
        .into_iter()
        .next()
        .expect("an error holds one at least");
    let key = error.path.join(".");
    let origin = match &error.metadata {
        Some(metadata) => origin(metadata, file),
        None => origin_of(&key),
    };
    match error.kind {
        figment::error::Kind::UnknownField(_, expected) => ConfigError::UnknownKey {
            key,
            origin,
            expected: expected.iter().map(|s| s.to_string()).collect(),
        },
        kind => ConfigError::Invalid {
            key,
            origin,
            message: kind.to_string(),
        },
    }
}

impl ServerConfig {
    /// The configuration as TOML, for `--print-config`: loading it again gives the same
    /// configuration, except that a root password prints as [`PASSWORD_MASK`].
    pub fn to_toml(&self) -> String {
        let mut shown = self.clone();
        if shown.root.password.is_some() {
            shown.root.password = Some(PASSWORD_MASK.into());
        }
        toml::to_string(&shown).expect("the configuration serializes to TOML")
    }

    /// The engine's settings. `root_password` is the configured password, or empty when
    /// none is configured: the caller then sets the one it generated. Settings the
    /// configuration does not name keep the engine's defaults.
    pub fn node_settings(&self) -> NodeSettings {
        let defaults = NodeSettings::default();
        NodeSettings {
            partition: PartitionSettings {
                validate_checksum: self.node.validate_checksum,
                ..defaults.partition
            },
            meta: defaults.meta,
            password_cost: PasswordCost {
                memory_kib: self.node.password_hash_memory_kib,
                iterations: self.node.password_hash_iterations,
            },
            root_username: self.root.username.clone(),
            root_password: self.root.password.clone().unwrap_or_default(),
            cleaner_interval: self.node.cleaner_interval,
            shards: self.node.shards,
            limits: NodeLimits {
                in_flight_per_client: self.node.in_flight_per_client,
                journal_bytes: self.node.journal_bytes,
                ..defaults.limits
            },
        }
    }

    /// Checks every range ([`load`] does; a configuration built in code may call it).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_with(&|_| Origin::Default)
    }

    fn validate_with(&self, origin_of: &dyn Fn(&str) -> Origin) -> Result<(), ConfigError> {
        let fail = |key: &str, message: String| ConfigError::Invalid {
            key: key.into(),
            origin: origin_of(key),
            message,
        };
        let range = |key: &str, value: u64, min: u64, max: u64| {
            if value < min {
                Err(fail(key, format!("{value} is below the minimum {min}")))
            } else if value > max {
                Err(fail(key, format!("{value} is above the limit {max}")))
            } else {
                Ok(())
            }
        };
        let span = |key: &str, value: Duration| {
            if value.is_zero() {
                Err(fail(key, "must be longer than 0s".into()))
            } else if value > MAX_DURATION {
                Err(fail(
                    key,
                    format!(
                        "{} is above the limit {}",
                        humantime::format_duration(value),
                        humantime::format_duration(MAX_DURATION)
                    ),
                ))
            } else {
                Ok(())
            }
        };
        let credential = |key: &str, value: &str| {
            if value.is_empty() {
                Err(fail(key, "must not be empty".into()))
            } else if value.len() > MAX_CREDENTIAL_BYTES {
                Err(fail(
                    key,
                    format!(
                        "{} bytes is above the limit {MAX_CREDENTIAL_BYTES}",
                        value.len()
                    ),
                ))
            } else {
                Ok(())
            }
        };
        let n = |v: usize| v as u64;

        if self.data_dir.as_os_str().is_empty() {
            return Err(fail("data_dir", "must not be empty".into()));
        }
        let tcp = &self.tcp;
        range(
            "tcp.max_frame_bytes",
            tcp.max_frame_bytes,
            MIN_FRAME_BYTES,
            MAX_FRAME_BYTES,
        )?;
        range(
            "tcp.max_connections",
            n(tcp.max_connections),
            1,
            n(MAX_CONNECTIONS),
        )?;
        span("tcp.handshake_timeout", tcp.handshake_timeout)?;
        span("tcp.idle_timeout", tcp.idle_timeout)?;
        range(
            "tcp.max_reply_buffer_bytes",
            tcp.max_reply_buffer_bytes,
            MIN_REPLY_BUFFER_BYTES,
            MAX_REPLY_BUFFER_BYTES,
        )?;
        credential("root.username", &self.root.username)?;
        if let Some(password) = &self.root.password {
            credential("root.password", password)?;
            if password == PASSWORD_MASK {
                return Err(fail(
                    "root.password",
                    format!("{PASSWORD_MASK:?} is the mask --print-config shows, not a password: set the real one or remove the key"),
                ));
            }
        }
        let node = &self.node;
        range("node.shards", n(node.shards), 0, n(MAX_SHARDS))?;
        span("node.cleaner_interval", node.cleaner_interval)?;
        range(
            "node.journal_bytes",
            node.journal_bytes,
            MIN_JOURNAL_BYTES,
            u64::MAX,
        )?;
        range(
            "node.in_flight_per_client",
            n(node.in_flight_per_client),
            1,
            n(MAX_IN_FLIGHT_PER_CLIENT),
        )?;
        range(
            "node.password_hash_memory_kib",
            node.password_hash_memory_kib.into(),
            PasswordCost::CHEAP.memory_kib.into(),
            MAX_PASSWORD_HASH_MEMORY_KIB.into(),
        )?;
        range(
            "node.password_hash_iterations",
            node.password_hash_iterations.into(),
            PasswordCost::CHEAP.iterations.into(),
            MAX_PASSWORD_HASH_ITERATIONS.into(),
        )?;
        range(
            "auth.max_failed_logins",
            self.auth.max_failed_logins.into(),
            1,
            MAX_FAILED_LOGINS.into(),
        )?;
        span("auth.failed_login_window", self.auth.failed_login_window)?;
        if self.log.level.trim().is_empty() {
            return Err(fail("log.level", "must not be empty".into()));
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.level) {
            return Err(fail(
                "log.level",
                format!("invalid filter {:?}: {e}", self.log.level),
            ));
        }
        Ok(())
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
mod socket_addr {
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

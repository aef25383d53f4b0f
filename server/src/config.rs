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

use cairn_engine::config::{PartitionSettings, TopicConfig, MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE};
use cairn_engine::format::Limits;
use cairn_engine::node::{NodeLimits, NodeSettings, PasswordCost};
use cairn_engine::state::options::MAX_MESSAGES_REQUIRED_TO_SAVE;
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
pub const MIN_REPLY_BYTES: u64 = 64 * KIB;
pub const MAX_REPLY_BYTES: u64 = GIB;
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
    pub http: HttpConfig,
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
            http: HttpConfig::default(),
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

impl TlsConfig {
    /// The listener's TLS configuration; none when TLS is off. `section` names the
    /// listener's keys in errors (`tcp`, `http`).
    pub fn server_config(
        &self,
        section: &str,
    ) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, ConfigError> {
        self.server_config_with(section, &|_| Origin::Default)
    }

    fn server_config_with(
        &self,
        section: &str,
        origin_of: &dyn Fn(&str) -> Origin,
    ) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, ConfigError> {
        if !self.enabled {
            return Ok(None);
        }
        let enabled_key = format!("{section}.tls.enabled");
        let enabled_by = match origin_of(&enabled_key) {
            Origin::Default => String::new(),
            origin => format!(" (set by {origin})"),
        };
        let path = |key: &str, value: &Option<PathBuf>| match value {
            Some(path) if !path.as_os_str().is_empty() => Ok(path.clone()),
            _ => Err(ConfigError::Invalid {
                key: key.into(),
                origin: origin_of(key),
                message: format!("must be set when {enabled_key} is true{enabled_by}"),
            }),
        };
        let cert_key = format!("{section}.tls.cert_file");
        let key_key = format!("{section}.tls.key_file");
        let cert = path(&cert_key, &self.cert_file)?;
        let key = path(&key_key, &self.key_file)?;
        crate::tls::server_config(&cert, &key)
            .map(Some)
            .map_err(|e| {
                let key = match e.file() {
                    crate::tls::TlsFile::Certificate => &cert_key,
                    crate::tls::TlsFile::Key => &key_key,
                };
                ConfigError::Invalid {
                    key: key.clone(),
                    origin: origin_of(key),
                    message: e.to_string(),
                }
            })
    }
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
    /// Who may scrape `/metrics`: `open`, `open_on_loopback` (callers from a loopback
    /// address need no token; others need one) or `authenticated`.
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
            metrics_access: crate::http::MetricsAccess::OpenOnLoopback,
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
    config.tcp.tls.cert_file = Some(PathBuf::new());
    config.tcp.tls.key_file = Some(PathBuf::new());
    config.http.tls.cert_file = Some(PathBuf::new());
    config.http.tls.key_file = Some(PathBuf::new());
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
    let dict = match section {
        Some(section) => table(schema, section),
        None => Some(schema),
    };
    fields
        .iter()
        .map(|field| match dict.and_then(|dict| dict.get(*field)) {
            Some(Value::Dict(..)) => format!("{field}.*"),
            _ => field.to_string(),
        })
        .collect()
}

/// The table at the dotted `path` (`tcp`, `tcp.tls`).
fn table<'a>(schema: &'a Dict, path: &str) -> Option<&'a Dict> {
    path.split('.')
        .try_fold(schema, |dict, name| dict.get(name).and_then(Value::as_dict))
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
    // Down the tables the name starts with (`tcp_` and then `tls_` in CAIRN_TCP_TLS_ENABLED),
    // stopping at a key of the table reached.
    let mut section: Vec<&str> = Vec::new();
    let mut dict = schema;
    let mut field = lower.as_str();
    while dict
        .get(field)
        .is_none_or(|value| value.as_dict().is_some())
    {
        let inner = dict.iter().find_map(|(key, value)| {
            let rest = field.strip_prefix(key.as_str())?.strip_prefix('_')?;
            Some((key, value.as_dict()?, rest))
        });
        let Some((key, inner, rest)) = inner else {
            break;
        };
        section.push(key);
        dict = inner;
        field = rest;
    }
    let within = |name: &str| match section.is_empty() {
        true => name.to_string(),
        false => format!("{}.{name}", section.join(".")),
    };
    if dict
        .get(field)
        .is_some_and(|value| value.as_dict().is_some())
    {
        let table = within(field);
        return Err(ConfigError::SectionVariable {
            var: name.to_string(),
            expected: keys_of(schema, Some(&table))
                .iter()
                .map(|k| k.to_ascii_uppercase().replace(".*", "_*"))
                .collect(),
            section: table,
        });
    }
    let section = (!section.is_empty()).then(|| section.join("."));
    let (key, expected, kind) = (
        within(field),
        keys_of(schema, section.as_deref()),
        dict.get(field),
    );
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
                max_poll_bytes: self.tcp.max_reply_bytes,
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
            hooks: defaults.hooks,
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
        // The lengths Iggy's SDK lets a client send (a root user it could not log in as is
        // no use): usernames 3..=50 bytes, passwords 3..=100.
        let credential = |key: &str, value: &str, max: usize| {
            if value.is_empty() {
                Err(fail(key, "must not be empty".into()))
            } else if value.len() < 3 || value.len() > max.min(MAX_CREDENTIAL_BYTES) {
                Err(fail(
                    key,
                    format!(
                        "{} bytes is outside 3..={} (what Iggy clients send)",
                        value.len(),
                        max.min(MAX_CREDENTIAL_BYTES)
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
            "tcp.max_reply_bytes",
            tcp.max_reply_bytes,
            MIN_REPLY_BYTES,
            MAX_REPLY_BYTES,
        )?;
        let http = &self.http;
        range(
            "http.max_body_bytes",
            http.max_body_bytes,
            MIN_FRAME_BYTES,
            MAX_FRAME_BYTES,
        )?;
        range(
            "http.max_concurrent_requests",
            n(http.max_concurrent_requests),
            1,
            n(MAX_CONNECTIONS),
        )?;
        span("http.token_expiry", http.token_expiry)?;
        if http.enabled && http.address == tcp.address && http.address.port() != 0 {
            return Err(fail(
                "http.address",
                format!(
                    "{} is tcp.address too: they need different ports",
                    http.address
                ),
            ));
        }
        credential("root.username", &self.root.username, 50)?;
        if let Some(password) = &self.root.password {
            credential("root.password", password, 100)?;
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
            "node.messages_required_to_save",
            node.messages_required_to_save.into(),
            1,
            MAX_MESSAGES_REQUIRED_TO_SAVE.into(),
        )?;
        range(
            "node.size_of_messages_required_to_save",
            node.size_of_messages_required_to_save,
            1,
            MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE,
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
        // Last, as it reads files: both paths set, both files readable PEM, the key the
        // certificate's.
        self.tcp.tls.server_config_with("tcp", origin_of)?;
        self.http.tls.server_config_with("http", origin_of)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A config file holding `text`, in a directory that lives as long as the guard.
    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.toml");
        #[allow(clippy::disallowed_methods, reason = "a test's fixture")]
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn from_file(text: &str, env: &[(&str, &str)]) -> (Result<ServerConfig, ConfigError>, PathBuf) {
        let (_dir, path) = file(text);
        (load(Some(&path), vars(env)), path)
    }

    fn from_env(env: &[(&str, &str)]) -> Result<ServerConfig, ConfigError> {
        load_layers(None, vars(env))
    }

    fn error(result: Result<ServerConfig, ConfigError>) -> String {
        result
            .expect_err("the configuration must be refused")
            .to_string()
    }

    /// A configuration with every value away from its default (but `tcp.tls.enabled`: on,
    /// it needs real files; `tls_is_configured_by_file_and_variables` sets it).
    fn everything_changed() -> ServerConfig {
        ServerConfig {
            data_dir: "/var/lib/cairn".into(),
            tcp: TcpConfig {
                address: "[::1]:9100".parse().unwrap(),
                max_frame_bytes: 8 * MIB,
                max_connections: 100,
                handshake_timeout: Duration::from_millis(2500),
                idle_timeout: Duration::from_secs(90),
                max_reply_bytes: 32 * MIB,
                tls: TlsConfig {
                    enabled: false,
                    cert_file: Some("/etc/cairn/cert.pem".into()),
                    key_file: Some("/etc/cairn/key.pem".into()),
                },
            },
            http: HttpConfig {
                enabled: false,
                address: "[::1]:9200".parse().unwrap(),
                max_body_bytes: 4 * MIB,
                max_concurrent_requests: 16,
                token_expiry: Duration::from_secs(600),
                metrics_access: crate::http::MetricsAccess::Authenticated,
                tls: TlsConfig::default(),
            },
            root: RootConfig {
                username: "admin".into(),
                password: None,
            },
            node: NodeConfig {
                shards: 3,
                validate_checksum: false,
                cleaner_interval: Duration::from_secs(3600 + 1800),
                journal_bytes: 2 * GIB,
                in_flight_per_client: 8,
                password_hash_memory_kib: 1024,
                password_hash_iterations: 3,
                messages_required_to_save: 10,
                size_of_messages_required_to_save: 4096,
            },
            auth: AuthConfig {
                max_failed_logins: 9,
                failed_login_window: Duration::from_secs(120),
            },
            log: LogConfig {
                format: LogFormat::Json,
                level: "warn,cairn_server=debug".into(),
            },
        }
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let config = from_env(&[]).unwrap();
        assert_eq!(config, ServerConfig::default());
        assert_eq!(config.data_dir, PathBuf::from("local_data"));
        assert_eq!(config.tcp.address, "127.0.0.1:8090".parse().unwrap());
        assert_eq!(config.tcp.max_frame_bytes, 64 * 1024 * 1024);
        assert_eq!(config.tcp.max_connections, 4096);
        assert_eq!(config.tcp.handshake_timeout, Duration::from_secs(10));
        assert_eq!(config.tcp.idle_timeout, Duration::from_secs(300));
        assert_eq!(config.tcp.max_reply_bytes, 64 * 1024 * 1024);
        assert!(!config.tcp.tls.enabled, "TLS is off by default");
        assert_eq!(config.tcp.tls.cert_file, None);
        assert_eq!(config.tcp.tls.key_file, None);
        assert!(config.tcp.tls.server_config("tcp").unwrap().is_none());
        assert_eq!(config.root.username, "iggy");
        assert_eq!(config.root.password, None, "there is no default password");
        assert_eq!(config.node.shards, 0);
        assert!(config.node.validate_checksum);
        assert_eq!(config.node.cleaner_interval, Duration::from_secs(60));
        assert_eq!(config.node.journal_bytes, 1024 * 1024 * 1024);
        assert_eq!(config.node.in_flight_per_client, 64);
        assert_eq!(
            config.node.password_hash_memory_kib,
            argon2_default_memory_kib()
        );
        assert_eq!(config.node.password_hash_iterations, 2);
        assert_eq!(config.auth.max_failed_logins, 5);
        assert_eq!(config.auth.failed_login_window, Duration::from_secs(60));
        assert_eq!(config.log.format, LogFormat::Human);
        assert_eq!(config.log.level, "info");
        config.validate().unwrap();
    }

    /// argon2's default memory cost (19 MiB), as the engine's PasswordCost has it.
    fn argon2_default_memory_kib() -> u32 {
        19 * 1024
    }

    #[test]
    fn an_empty_file_gives_the_defaults() {
        let (config, _) = from_file("", &[]);
        assert_eq!(config.unwrap(), ServerConfig::default());
    }

    #[test]
    fn the_file_overrides_defaults_and_the_environment_overrides_the_file() {
        let text = r#"
            data_dir = "/srv/from-file"
            [tcp]
            address = "0.0.0.0:7000"
            max_connections = 10
            [node]
            shards = 4
            validate_checksum = false
        "#;
        let (config, _) = from_file(
            text,
            &[
                ("CAIRN_TCP_ADDRESS", "127.0.0.1:7001"),
                ("CAIRN_NODE_VALIDATE_CHECKSUM", "true"),
                ("CAIRN_ROOT_USERNAME", "admin"),
            ],
        );
        let config = config.unwrap();
        // The environment wins over the file...
        assert_eq!(config.tcp.address, "127.0.0.1:7001".parse().unwrap());
        assert!(config.node.validate_checksum);
        // ...over the defaults...
        assert_eq!(config.root.username, "admin");
        // ...and the file's other keys stay, over the defaults.
        assert_eq!(config.data_dir, PathBuf::from("/srv/from-file"));
        assert_eq!(config.tcp.max_connections, 10);
        assert_eq!(config.node.shards, 4);
        // Keys no layer names keep their defaults.
        assert_eq!(
            config.tcp.max_frame_bytes,
            TcpConfig::default().max_frame_bytes
        );
    }

    #[test]
    fn every_key_is_settable_by_its_environment_variable() {
        let changed = everything_changed();
        let text = toml::to_string(&changed).unwrap();
        let table: toml::Table = toml::from_str(&text).unwrap();
        let mut env = Vec::new();
        // Every key of every table, nested ones too (`CAIRN_TCP_TLS_CERT_FILE`).
        fn push(env: &mut Vec<(String, String)>, name: String, value: &toml::Value) {
            match value {
                toml::Value::Table(table) => {
                    for (field, value) in table {
                        push(env, format!("{name}_{}", field.to_uppercase()), value);
                    }
                }
                toml::Value::String(s) => env.push((name, s.clone())),
                other => env.push((name, other.to_string())),
            }
        }
        for (key, value) in &table {
            push(&mut env, format!("CAIRN_{}", key.to_uppercase()), value);
        }
        assert!(env.iter().any(|(k, _)| k == "CAIRN_TCP_TLS_KEY_FILE"));
        env.push(("CAIRN_ROOT_PASSWORD".into(), "s3cret".into()));
        assert!(env.iter().any(|(k, _)| k == "CAIRN_DATA_DIR"));
        assert!(env
            .iter()
            .any(|(k, _)| k == "CAIRN_NODE_PASSWORD_HASH_MEMORY_KIB"));
        let config = load_layers(None, env).unwrap();
        let mut expected = changed;
        expected.root.password = Some("s3cret".into());
        assert_eq!(config, expected);
    }

    #[test]
    fn the_file_is_the_given_one_else_cairn_toml_if_there() {
        assert_eq!(file_source(None), (PathBuf::from("cairn.toml"), false));
        let given = Path::new("/etc/cairn/server.toml");
        assert_eq!(file_source(Some(given)), (given.to_path_buf(), true));
    }

    #[test]
    fn the_default_file_is_read_when_there_and_skipped_when_not() {
        let (dir, path) = file("[node]\nshards = 5\n");
        let config = load_layers(Some((path, false)), vars(&[])).unwrap();
        assert_eq!(config.node.shards, 5);
        let absent = dir.path().join("none.toml");
        let config = load_layers(Some((absent, false)), vars(&[])).unwrap();
        assert_eq!(config, ServerConfig::default());
    }

    #[test]
    fn a_given_file_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.toml");
        let message = error(load(Some(&path), vars(&[])));
        assert_eq!(
            message,
            format!("config file {}: no such file", path.display())
        );
    }

    #[test]
    fn a_syntax_error_names_the_file_and_the_line() {
        let (result, path) = from_file("[tcp]\naddress = \n", &[]);
        let message = error(result);
        assert!(
            message.starts_with(&format!("{}: ", path.display())),
            "{message}"
        );
        assert!(message.contains("line 2"), "{message}");
    }

    #[test]
    fn unknown_keys_in_the_file_are_refused_with_the_expected_ones() {
        let (result, path) = from_file("[tcp]\nadress = \"127.0.0.1:1\"\n", &[]);
        assert_eq!(
            error(result),
            format!(
                "unknown key tcp.adress in {} (expected one of: address, max_frame_bytes, \
                 max_connections, handshake_timeout, idle_timeout, max_reply_bytes, tls)",
                path.display()
            )
        );
        let (result, path) = from_file("datadir = \"x\"\n", &[]);
        assert_eq!(
            error(result),
            format!(
                "unknown key datadir in {} (expected one of: data_dir, tcp, http, root, node, auth, log)",
                path.display()
            )
        );
        let (result, path) = from_file("[metrics]\nport = 1\n", &[]);
        assert!(error(result).starts_with(&format!("unknown key metrics in {} ", path.display())),);
        // Every section refuses keys it does not have.
        for section in ["tcp", "root", "node", "auth", "log"] {
            let (result, path) = from_file(&format!("[{section}]\nbogus = 1\n"), &[]);
            let message = error(result);
            assert!(
                message.starts_with(&format!(
                    "unknown key {section}.bogus in {} (expected one of: ",
                    path.display()
                )),
                "{message}"
            );
        }
        // A table nested in a section refuses keys it does not have too.
        let (result, path) = from_file("[tcp.tls]\ncert = \"a.pem\"\n", &[]);
        assert_eq!(
            error(result),
            format!(
                "unknown key tcp.tls.cert in {} (expected one of: enabled, cert_file, key_file)",
                path.display()
            )
        );
        let (result, path) = from_file("[tcp.tcp]\nx = 1\n", &[]);
        assert!(error(result).starts_with(&format!("unknown key tcp.tcp in {} ", path.display())),);
        let (result, path) = from_file("[log]\nformat = \"json\"\ncolour = true\n", &[]);
        assert!(
            error(result).starts_with(&format!("unknown key log.colour in {} ", path.display())),
        );
    }

    #[test]
    fn an_unknown_key_set_only_by_the_environment_names_the_variable() {
        // The file has a [tcp] section; the variable adds an unknown key to it.
        let (result, _) = from_file("[tcp]\nmax_connections = 3\n", &[("CAIRN_TCP_ADRESS", "x")]);
        assert_eq!(
            error(result),
            "unknown key tcp.adress in environment variable CAIRN_TCP_ADRESS (expected one of: \
             address, max_frame_bytes, max_connections, handshake_timeout, idle_timeout, \
             max_reply_bytes, tls.*)"
        );
    }

    #[test]
    fn unknown_variables_are_refused_naming_the_variable() {
        let message = error(from_env(&[("CAIRN_DATADIR", "/x")]));
        assert_eq!(
            message,
            "unknown key datadir in environment variable CAIRN_DATADIR (expected one of: \
             data_dir, tcp.*, http.*, root.*, node.*, auth.*, log.*)"
        );
        let message = error(from_env(&[("CAIRN_NODE_SHARD", "2")]));
        assert!(
            message.starts_with("unknown key node.shard in environment variable CAIRN_NODE_SHARD (expected one of: shards, "),
            "{message}"
        );
        // Variable names are upper case.
        let message = error(from_env(&[("CAIRN_Node_Shards", "2")]));
        assert!(message.contains("CAIRN_Node_Shards"), "{message}");
        for name in [
            "CAIRN_",
            "CAIRN_TCP_",
            "CAIRN_BENCH_DIR",
            "CAIRN_METRICS_PORT",
        ] {
            let message = error(from_env(&[(name, "1")]));
            assert!(
                message.contains(&format!("environment variable {name} ")),
                "{message}"
            );
        }
        let message = error(from_env(&[("CAIRN_TCP", "x")]));
        assert_eq!(
            message,
            "CAIRN_TCP names the section [tcp], not a key (expected CAIRN_TCP_<KEY>, KEY one of: \
             ADDRESS, MAX_FRAME_BYTES, MAX_CONNECTIONS, HANDSHAKE_TIMEOUT, IDLE_TIMEOUT, \
             MAX_REPLY_BYTES, TLS_*)"
        );
        assert_eq!(
            error(from_env(&[("CAIRN_TCP_TLS", "x")])),
            "CAIRN_TCP_TLS names the section [tcp.tls], not a key (expected CAIRN_TCP_TLS_<KEY>, \
             KEY one of: ENABLED, CERT_FILE, KEY_FILE)"
        );
        let message = error(from_env(&[("CAIRN_TCP_TLS_CERT", "x")]));
        assert_eq!(
            message,
            "unknown key tcp.tls.cert in environment variable CAIRN_TCP_TLS_CERT (expected one \
             of: enabled, cert_file, key_file)"
        );
    }

    #[test]
    fn the_clients_variables_and_other_names_are_ignored() {
        let config = from_env(&[
            ("CAIRN_USERNAME", "someone"),
            ("CAIRN_PASSWORD", "their-secret"),
            ("CAIRN_ADDRESS", "not an address"),
            ("PATH", "/usr/bin"),
            ("cairn_tcp_address", "nonsense"),
            ("IGGY_TCP_ADDRESS", "nonsense"),
        ])
        .unwrap();
        assert_eq!(config, ServerConfig::default());
    }

    #[test]
    fn invalid_values_name_the_key_where_it_came_from_and_what_was_expected() {
        assert_eq!(
            error(from_env(&[("CAIRN_TCP_ADDRESS", "localhost")])),
            "CAIRN_TCP_ADDRESS: invalid socket address \"localhost\" (expected IP:PORT, such as \
             \"127.0.0.1:8090\" or \"[::1]:8090\")"
        );
        let (result, path) = from_file("[tcp]\naddress = \"localhost\"\n", &[]);
        assert!(error(result).starts_with(&format!(
            "tcp.address in {}: invalid socket address \"localhost\"",
            path.display()
        )),);
        let (result, path) = from_file("[tcp]\naddress = 8090\n", &[]);
        assert_eq!(
            error(result),
            format!(
                "tcp.address in {}: invalid type: found signed int `8090`, expected a socket \
                 address such as \"127.0.0.1:8090\"",
                path.display()
            )
        );
        let (result, path) = from_file("[tcp]\nmax_connections = \"many\"\n", &[]);
        let message = error(result);
        assert!(
            message.starts_with(&format!(
                "tcp.max_connections in {}: invalid type: found string \"many\"",
                path.display()
            )),
            "{message}"
        );
        let message = error(from_env(&[("CAIRN_NODE_SHARDS", "two")]));
        assert!(
            message.starts_with("CAIRN_NODE_SHARDS: invalid type: found string \"two\""),
            "{message}"
        );
        let message = error(from_env(&[("CAIRN_NODE_SHARDS", "-1")]));
        assert!(message.starts_with("CAIRN_NODE_SHARDS: "), "{message}");
        let message = error(from_env(&[("CAIRN_NODE_VALIDATE_CHECKSUM", "yes")]));
        assert!(
            message.starts_with("CAIRN_NODE_VALIDATE_CHECKSUM: invalid type: found string \"yes\", expected a boolean"),
            "{message}"
        );
        let message = error(from_env(&[("CAIRN_LOG_FORMAT", "xml")]));
        assert!(
            message.starts_with("CAIRN_LOG_FORMAT: ")
                && message.contains("human")
                && message.contains("json"),
            "{message}"
        );
        let message = error(from_env(&[(
            "CAIRN_NODE_PASSWORD_HASH_ITERATIONS",
            "5000000000",
        )]));
        assert!(
            message.starts_with("CAIRN_NODE_PASSWORD_HASH_ITERATIONS: "),
            "{message}"
        );
    }

    #[test]
    fn ranges_are_checked_after_loading_naming_the_origin() {
        assert_eq!(
            error(from_env(&[("CAIRN_NODE_SHARDS", "100000")])),
            "CAIRN_NODE_SHARDS: 100000 is above the limit 1024"
        );
        let (result, path) = from_file("[node]\nshards = 100000\n", &[]);
        assert_eq!(
            error(result),
            format!(
                "node.shards in {}: 100000 is above the limit 1024",
                path.display()
            )
        );
        let mut config = ServerConfig::default();
        config.node.shards = 100_000;
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "node.shards: 100000 is above the limit 1024"
        );
        assert_eq!(
            error(from_env(&[("CAIRN_TCP_MAX_FRAME_BYTES", "4095")])),
            "CAIRN_TCP_MAX_FRAME_BYTES: 4095 is below the minimum 4096"
        );
        from_env(&[("CAIRN_TCP_MAX_FRAME_BYTES", "4096")]).unwrap();
        from_env(&[("CAIRN_TCP_MAX_FRAME_BYTES", "1073741824")]).unwrap();
        assert_eq!(
            error(from_env(&[("CAIRN_TCP_MAX_FRAME_BYTES", "1073741825")])),
            "CAIRN_TCP_MAX_FRAME_BYTES: 1073741825 is above the limit 1073741824"
        );
        let refused = [
            ("CAIRN_TCP_MAX_CONNECTIONS", "0"),
            ("CAIRN_TCP_MAX_REPLY_BYTES", "1024"),
            ("CAIRN_TCP_IDLE_TIMEOUT", "0s"),
            ("CAIRN_TCP_HANDSHAKE_TIMEOUT", "30days"),
            ("CAIRN_ROOT_USERNAME", ""),
            ("CAIRN_ROOT_PASSWORD", ""),
            ("CAIRN_DATA_DIR", ""),
            ("CAIRN_NODE_JOURNAL_BYTES", "1048576"),
            ("CAIRN_NODE_IN_FLIGHT_PER_CLIENT", "0"),
            ("CAIRN_NODE_PASSWORD_HASH_MEMORY_KIB", "4"),
            ("CAIRN_NODE_PASSWORD_HASH_ITERATIONS", "0"),
            ("CAIRN_NODE_CLEANER_INTERVAL", "0ms"),
            ("CAIRN_AUTH_MAX_FAILED_LOGINS", "0"),
            ("CAIRN_AUTH_FAILED_LOGIN_WINDOW", "0s"),
            ("CAIRN_LOG_LEVEL", ""),
            ("CAIRN_LOG_LEVEL", "cairn=loud"),
        ];
        for (name, value) in refused {
            let message = error(from_env(&[(name, value)]));
            assert!(
                message.starts_with(&format!("{name}: ")),
                "{name}={value}: {message}"
            );
        }
        let long = "x".repeat(101);
        let message = error(from_env(&[("CAIRN_ROOT_PASSWORD", &long)]));
        assert_eq!(
            message,
            "CAIRN_ROOT_PASSWORD: 101 bytes is outside 3..=100 (what Iggy clients send)"
        );
        let message = error(from_env(&[("CAIRN_ROOT_USERNAME", "ab")]));
        assert_eq!(
            message,
            "CAIRN_ROOT_USERNAME: 2 bytes is outside 3..=50 (what Iggy clients send)"
        );
        from_env(&[("CAIRN_ROOT_PASSWORD", &"x".repeat(100))]).unwrap();
    }

    #[test]
    fn durations_are_humantime_strings() {
        let (config, _) = from_file(
            r#"
            [tcp]
            handshake_timeout = "250ms"
            idle_timeout = "5m"
            [node]
            cleaner_interval = "1h 30m"
            [auth]
            failed_login_window = "2s"
            "#,
            &[],
        );
        let config = config.unwrap();
        assert_eq!(config.tcp.handshake_timeout, Duration::from_millis(250));
        assert_eq!(config.tcp.idle_timeout, Duration::from_secs(300));
        assert_eq!(config.node.cleaner_interval, Duration::from_secs(5400));
        assert_eq!(config.auth.failed_login_window, Duration::from_secs(2));
        let config = from_env(&[("CAIRN_TCP_IDLE_TIMEOUT", "10s")]).unwrap();
        assert_eq!(config.tcp.idle_timeout, Duration::from_secs(10));

        // A bare number has no unit.
        let message = error(from_env(&[("CAIRN_TCP_IDLE_TIMEOUT", "10")]));
        assert!(
            message.starts_with("CAIRN_TCP_IDLE_TIMEOUT: invalid duration \"10\""),
            "{message}"
        );
        let message = error(from_env(&[("CAIRN_TCP_IDLE_TIMEOUT", "ten seconds")]));
        assert!(
            message.starts_with("CAIRN_TCP_IDLE_TIMEOUT: invalid duration \"ten seconds\"")
                && message.contains("\"250ms\""),
            "{message}"
        );
        let (result, path) = from_file("[tcp]\nidle_timeout = 10\n", &[]);
        assert_eq!(
            error(result),
            format!(
                "tcp.idle_timeout in {}: invalid type: found signed int `10`, expected a \
                 duration such as \"10s\", \"5m\" or \"250ms\"",
                path.display()
            )
        );
    }

    #[test]
    fn to_toml_loads_back_to_the_same_config() {
        for config in [ServerConfig::default(), everything_changed()] {
            let text = config.to_toml();
            let (loaded, _) = from_file(&text, &[]);
            assert_eq!(loaded.unwrap(), config, "{text}");
        }
        let text = everything_changed().to_toml();
        assert!(text.contains("idle_timeout = \"1m 30s\""), "{text}");
        assert!(text.contains("handshake_timeout = \"2s 500ms\""), "{text}");
        assert!(text.contains("address = \"[::1]:9100\""), "{text}");
        assert!(text.contains("format = \"json\""), "{text}");
        assert!(!text.contains("password ="), "no password, no key: {text}");
    }

    #[test]
    fn to_toml_masks_the_password_and_the_mask_does_not_load() {
        let mut config = everything_changed();
        config.root.password = Some("hunter2-but-longer".into());
        let text = config.to_toml();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("password = \"***\""), "{text}");
        let (result, path) = from_file(&text, &[]);
        let message = error(result);
        assert!(
            message.starts_with(&format!(
                "root.password in {}: \"***\" is the mask",
                path.display()
            )),
            "{message}"
        );
        // With the mask replaced the rest is the same configuration.
        let (loaded, _) = from_file(&text.replace("***", "hunter2-but-longer"), &[]);
        assert_eq!(loaded.unwrap(), config);
        // Debug output never shows it either.
        let debug = format!("{config:?}");
        assert!(
            !debug.contains("hunter2") && debug.contains("***"),
            "{debug}"
        );
    }

    #[test]
    fn a_password_of_digits_from_the_environment_stays_a_string() {
        let config = from_env(&[
            ("CAIRN_ROOT_PASSWORD", "12345"),
            ("CAIRN_ROOT_USERNAME", "007"),
        ])
        .unwrap();
        assert_eq!(config.root.password.as_deref(), Some("12345"));
        assert_eq!(config.root.username, "007");
        let config = from_env(&[("CAIRN_ROOT_PASSWORD", "[1, 2]")]).unwrap();
        assert_eq!(config.root.password.as_deref(), Some("[1, 2]"));
    }

    #[test]
    fn node_settings_map_every_field() {
        let mut config = everything_changed();
        let settings = config.node_settings();
        let defaults = NodeSettings::default();
        assert_eq!(settings.shards, 3);
        assert!(!settings.partition.validate_checksum);
        assert_eq!(settings.cleaner_interval, Duration::from_secs(5400));
        assert_eq!(settings.limits.journal_bytes, 2 * GIB);
        assert_eq!(settings.limits.in_flight_per_client, 8);
        assert_eq!(
            settings.password_cost,
            PasswordCost {
                memory_kib: 1024,
                iterations: 3
            }
        );
        assert_eq!(settings.root_username, "admin");
        assert_eq!(
            settings.root_password, "",
            "no configured password: empty for the caller to set, never a default"
        );
        // What the configuration does not name keeps the engine's defaults.
        assert_eq!(
            settings.partition,
            PartitionSettings {
                validate_checksum: false,
                max_poll_bytes: 32 * MIB,
                ..defaults.partition
            }
        );
        assert_eq!(
            settings.limits,
            NodeLimits {
                journal_bytes: 2 * GIB,
                in_flight_per_client: 8,
                ..defaults.limits
            }
        );
        assert_eq!(
            settings.meta.checkpoint_bytes,
            defaults.meta.checkpoint_bytes
        );

        config.root.password = Some("configured".into());
        assert_eq!(config.node_settings().root_password, "configured");

        // The defaults map to the engine's own defaults (but the password).
        let settings = ServerConfig::default().node_settings();
        assert_eq!(settings.partition, defaults.partition);
        assert_eq!(settings.limits, defaults.limits);
        assert_eq!(settings.password_cost, defaults.password_cost);
        assert_eq!(settings.cleaner_interval, defaults.cleaner_interval);
        assert_eq!(settings.shards, defaults.shards);
        assert_eq!(settings.root_username, defaults.root_username);
        assert_eq!(settings.root_password, "");
    }
    #[test]
    fn tls_is_configured_by_file_and_variables() {
        let made = crate::tls::tests::test_cert();
        let text = format!(
            "[tcp.tls]\nenabled = true\ncert_file = {:?}\nkey_file = {:?}\n",
            made.cert, made.key
        );
        let (config, _) = from_file(&text, &[]);
        let config = config.unwrap();
        assert!(config.tcp.tls.enabled);
        assert_eq!(
            config.tcp.tls.cert_file.as_deref(),
            Some(made.cert.as_path())
        );
        assert!(config.tcp.tls.server_config("tcp").unwrap().is_some());
        // --print-config shows the section and it loads back.
        let printed = config.to_toml();
        assert!(printed.contains("[tcp.tls]\nenabled = true\n"), "{printed}");
        let (loaded, _) = from_file(&printed, &[]);
        assert_eq!(loaded.unwrap(), config);

        let cert = made.cert.to_str().unwrap();
        let key = made.key.to_str().unwrap();
        let config = from_env(&[
            ("CAIRN_TCP_TLS_ENABLED", "true"),
            ("CAIRN_TCP_TLS_CERT_FILE", cert),
            ("CAIRN_TCP_TLS_KEY_FILE", key),
        ])
        .unwrap();
        assert!(config.tcp.tls.enabled);
        assert_eq!(config.tcp.tls.key_file.as_deref(), Some(made.key.as_path()));
        // The variable wins over the file.
        let (config, _) = from_file(&text, &[("CAIRN_TCP_TLS_ENABLED", "false")]);
        assert!(!config.unwrap().tcp.tls.enabled);
        // Off, the paths are not looked at.
        from_env(&[("CAIRN_TCP_TLS_CERT_FILE", "/no/such/cert.pem")]).unwrap();
    }

    #[test]
    fn tls_enabled_needs_both_files_readable_and_matching_naming_the_key() {
        let made = crate::tls::tests::test_cert();
        let cert = made.cert.to_str().unwrap();
        let key = made.key.to_str().unwrap();
        assert_eq!(
            error(from_env(&[("CAIRN_TCP_TLS_ENABLED", "true")])),
            "tcp.tls.cert_file: must be set when tcp.tls.enabled is true (set by environment \
             variable CAIRN_TCP_TLS_ENABLED)"
        );
        let (result, path) = from_file(
            &format!("[tcp.tls]\nenabled = true\ncert_file = {cert:?}\n"),
            &[],
        );
        assert_eq!(
            error(result),
            format!(
                "tcp.tls.key_file: must be set when tcp.tls.enabled is true (set by {})",
                path.display()
            )
        );
        let (result, _) = from_file(
            &format!("[tcp.tls]\nenabled = true\ncert_file = {cert:?}\nkey_file = \"\"\n"),
            &[],
        );
        assert!(error(result).contains("tcp.tls.key_file in "));

        let missing = made.dir.path().join("missing.pem");
        let missing = missing.to_str().unwrap();
        assert_eq!(
            error(from_env(&[
                ("CAIRN_TCP_TLS_ENABLED", "true"),
                ("CAIRN_TCP_TLS_CERT_FILE", missing),
                ("CAIRN_TCP_TLS_KEY_FILE", key),
            ])),
            format!("CAIRN_TCP_TLS_CERT_FILE: {missing}: no such file")
        );
        let (result, path) = from_file(
            &format!("[tcp.tls]\nenabled = true\ncert_file = {cert:?}\nkey_file = {missing:?}\n"),
            &[],
        );
        assert_eq!(
            error(result),
            format!(
                "tcp.tls.key_file in {}: {missing}: no such file",
                path.display()
            )
        );
        // The files swapped: each error names its key.
        let message = error(from_env(&[
            ("CAIRN_TCP_TLS_ENABLED", "true"),
            ("CAIRN_TCP_TLS_CERT_FILE", key),
            ("CAIRN_TCP_TLS_KEY_FILE", cert),
        ]));
        assert_eq!(
            message,
            format!(
                "CAIRN_TCP_TLS_CERT_FILE: {key}: no certificate in it (expected a PEM \
                 \"BEGIN CERTIFICATE\" section)"
            )
        );
        let other = crate::tls::tests::test_cert();
        let message = error(from_env(&[
            ("CAIRN_TCP_TLS_ENABLED", "true"),
            ("CAIRN_TCP_TLS_CERT_FILE", cert),
            ("CAIRN_TCP_TLS_KEY_FILE", other.key.to_str().unwrap()),
        ]));
        assert_eq!(
            message,
            format!(
                "CAIRN_TCP_TLS_KEY_FILE: {}: the private key does not match the certificate in \
                 {cert}",
                other.key.display()
            )
        );
        // A configuration built in code is checked the same way.
        let mut config = ServerConfig::default();
        config.tcp.tls.enabled = true;
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "tcp.tls.cert_file: must be set when tcp.tls.enabled is true"
        );
    }
}

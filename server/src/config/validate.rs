//! Checking a loaded configuration, one check per section (the shape of Iggy's
//! `configs/validators.rs`), and mapping it to the engine's [`NodeSettings`].
//!
//! Every refusal is a [`ConfigError::Invalid`] naming the key, where its value came from
//! (the defaults, the file or a variable) and what was expected. The TLS files are read
//! last ([`TlsConfig::server_config`], which the server calls again at start).

use super::{
    AuthConfig, ConfigError, HttpConfig, LogConfig, NodeConfig, Origin, RootConfig, ServerConfig,
    TcpConfig, TlsConfig, MAX_BUFFERED_BYTES, MAX_CONNECTIONS, MAX_CREDENTIAL_BYTES, MAX_DURATION,
    MAX_FAILED_LOGINS, MAX_FRAME_BYTES, MAX_IN_FLIGHT_PER_CLIENT, MAX_PASSWORD_HASH_ITERATIONS,
    MAX_PASSWORD_HASH_MEMORY_KIB, MAX_REPLY_BYTES, MAX_SHARDS, MIN_FRAME_BYTES, MIN_JOURNAL_BYTES,
    MIN_REPLY_BYTES, PASSWORD_MASK,
};
use cairn_engine::config::{PartitionSettings, MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE};
use cairn_engine::node::{NodeLimits, NodeSettings, PasswordCost};
use cairn_engine::state::options::MAX_MESSAGES_REQUIRED_TO_SAVE;
use std::path::PathBuf;
use std::time::Duration;

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

impl ServerConfig {
    /// The engine's settings. `root_password` is the configured password, or empty when
    /// none is configured: the caller then sets the one it generated. Settings the
    /// configuration does not name keep the engine's defaults.
    pub fn node_settings(&self) -> NodeSettings {
        let defaults = NodeSettings::default();
        NodeSettings {
            partition: PartitionSettings {
                validate_checksum: self.node.validate_checksum,
                pipeline_records: self.node.pipeline_records,
                max_poll_bytes: self.tcp.max_reply_bytes,
                replica: self.cluster.enabled,
                ..defaults.partition
            },
            // A member's metadata ops are decided by the cluster, under its id.
            meta: cairn_engine::metadata::MetaSettings {
                cluster: self.cluster.enabled.then(|| self.cluster.cluster_id()),
                ..defaults.meta
            },
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

    /// Checks every range ([`load`](fn@super::load) does; a configuration built in code may
    /// call it).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_with(&|_| Origin::Default)
    }

    /// Checks section by section, in the order the sections are declared; the first
    /// refusal names its key and where the value came from (`origin_of`).
    pub(super) fn validate_with(
        &self,
        origin_of: &dyn Fn(&str) -> Origin,
    ) -> Result<(), ConfigError> {
        let rules = Rules { origin_of };
        if self.data_dir.as_os_str().is_empty() {
            return Err(rules.fail("data_dir", "must not be empty".into()));
        }
        self.tcp.check(&rules)?;
        self.http.check(&rules)?;
        self.check_listeners_apart(&rules)?;
        self.root.check(&rules)?;
        self.node.check(&rules)?;
        self.auth.check(&rules)?;
        self.log.check(&rules)?;
        self.check_limits(&rules)?;
        let mut listeners = vec![self.tcp.address];
        if self.http.enabled {
            listeners.push(self.http.address);
        }
        self.cluster.check(&rules, self.tcp.address, &listeners)?;
        // Last, as it reads files: both paths set, both files readable PEM, the key the
        // certificate's.
        self.tcp.tls.server_config_with("tcp", origin_of)?;
        self.http.tls.server_config_with("http", origin_of)?;
        Ok(())
    }

    /// The budget's and the caps' ranges (what they become beside the other settings:
    /// [`ServerConfig::buffered_bytes`], [`ServerConfig::connection_caps`]).
    fn check_limits(&self, rules: &Rules<'_>) -> Result<(), ConfigError> {
        rules.range(
            "limits.buffered_bytes",
            self.limits.buffered_bytes,
            MIN_FRAME_BYTES,
            MAX_BUFFERED_BYTES,
        )?;
        for (key, value) in [
            (
                "limits.connections_per_address",
                self.limits.connections_per_address,
            ),
            (
                "limits.anonymous_connections",
                self.limits.anonymous_connections,
            ),
            (
                "limits.anonymous_per_address",
                self.limits.anonymous_per_address,
            ),
        ] {
            rules.range(key, count(value), 1, count(MAX_CONNECTIONS))?;
        }
        rules.range(
            "limits.memberships_per_user",
            count(self.limits.memberships_per_user),
            1,
            count(cairn_engine::node::groups::MAX_MEMBERSHIPS),
        )
    }

    /// The byte budget: `limits.buffered_bytes`, never below the largest request and its
    /// reply on either listener (such a request would otherwise wait for room forever).
    pub fn buffered_bytes(&self) -> u64 {
        let largest =
            self.tcp.max_frame_bytes.max(self.http.max_body_bytes) + self.tcp.max_reply_bytes;
        self.limits.buffered_bytes.max(largest)
    }

    /// Connections per address, not logged in, and not logged in per address, each at
    /// most `tcp.max_connections`.
    pub fn connection_caps(&self) -> (usize, usize, usize) {
        let total = self.tcp.max_connections;
        (
            self.limits.connections_per_address.min(total),
            self.limits.anonymous_connections.min(total),
            self.limits.anonymous_per_address.min(total),
        )
    }

    /// The HTTP listener and the binary one cannot share an address (port 0 asks the
    /// system for a free port each, so it may repeat).
    fn check_listeners_apart(&self, rules: &Rules<'_>) -> Result<(), ConfigError> {
        let (http, tcp) = (&self.http, &self.tcp);
        if http.enabled && http.address == tcp.address && http.address.port() != 0 {
            return Err(rules.fail(
                "http.address",
                format!(
                    "{} is tcp.address too: they need different ports",
                    http.address
                ),
            ));
        }
        Ok(())
    }
}

/// The shapes of a check, each refusing with the key, where its value came from and what
/// was expected.
pub(super) struct Rules<'a> {
    origin_of: &'a dyn Fn(&str) -> Origin,
}

impl Rules<'_> {
    pub(super) fn fail(&self, key: &str, message: String) -> ConfigError {
        ConfigError::Invalid {
            key: key.into(),
            origin: (self.origin_of)(key),
            message,
        }
    }

    /// `min <= value <= max`.
    fn range(&self, key: &str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
        debug_assert!(min <= max, "{key}: the range {min}..={max} is empty");
        if value < min {
            Err(self.fail(key, format!("{value} is below the minimum {min}")))
        } else if value > max {
            Err(self.fail(key, format!("{value} is above the limit {max}")))
        } else {
            Ok(())
        }
    }

    /// A duration longer than zero and at most [`MAX_DURATION`].
    fn span(&self, key: &str, value: Duration) -> Result<(), ConfigError> {
        if value.is_zero() {
            Err(self.fail(key, "must be longer than 0s".into()))
        } else if value > MAX_DURATION {
            Err(self.fail(
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
    }

    /// The lengths Iggy's SDK lets a client send (a root user it could not log in as is no
    /// use): usernames 3..=50 bytes, passwords 3..=100.
    fn credential(&self, key: &str, value: &str, max: usize) -> Result<(), ConfigError> {
        let max = max.min(MAX_CREDENTIAL_BYTES);
        if value.is_empty() {
            Err(self.fail(key, "must not be empty".into()))
        } else if value.len() < 3 || value.len() > max {
            Err(self.fail(
                key,
                format!(
                    "{} bytes is outside 3..={max} (what Iggy clients send)",
                    value.len()
                ),
            ))
        } else {
            Ok(())
        }
    }
}

/// A count as the u64 [`Rules::range`] compares.
fn count(value: usize) -> u64 {
    value as u64
}

impl TcpConfig {
    fn check(&self, rules: &Rules<'_>) -> Result<(), ConfigError> {
        rules.range(
            "tcp.max_frame_bytes",
            self.max_frame_bytes,
            MIN_FRAME_BYTES,
            MAX_FRAME_BYTES,
        )?;
        rules.range(
            "tcp.max_connections",
            count(self.max_connections),
            1,
            count(MAX_CONNECTIONS),
        )?;
        rules.span("tcp.handshake_timeout", self.handshake_timeout)?;
        rules.span("tcp.idle_timeout", self.idle_timeout)?;
        rules.range(
            "tcp.max_reply_bytes",
            self.max_reply_bytes,
            MIN_REPLY_BYTES,
            MAX_REPLY_BYTES,
        )
    }
}

impl HttpConfig {
    fn check(&self, rules: &Rules<'_>) -> Result<(), ConfigError> {
        rules.range(
            "http.max_body_bytes",
            self.max_body_bytes,
            MIN_FRAME_BYTES,
            MAX_FRAME_BYTES,
        )?;
        rules.range(
            "http.max_concurrent_requests",
            count(self.max_concurrent_requests),
            1,
            count(MAX_CONNECTIONS),
        )?;
        rules.span("http.token_expiry", self.token_expiry)
    }
}

impl RootConfig {
    fn check(&self, rules: &Rules<'_>) -> Result<(), ConfigError> {
        rules.credential("root.username", &self.username, 50)?;
        let Some(password) = &self.password else {
            return Ok(());
        };
        rules.credential("root.password", password, 100)?;
        if password == PASSWORD_MASK {
            return Err(rules.fail(
                "root.password",
                format!("{PASSWORD_MASK:?} is the mask --print-config shows, not a password: set the real one or remove the key"),
            ));
        }
        Ok(())
    }
}

impl NodeConfig {
    fn check(&self, rules: &Rules<'_>) -> Result<(), ConfigError> {
        rules.range("node.shards", count(self.shards), 0, count(MAX_SHARDS))?;
        rules.span("node.cleaner_interval", self.cleaner_interval)?;
        rules.range(
            "node.journal_bytes",
            self.journal_bytes,
            MIN_JOURNAL_BYTES,
            u64::MAX,
        )?;
        rules.range(
            "node.in_flight_per_client",
            count(self.in_flight_per_client),
            1,
            count(MAX_IN_FLIGHT_PER_CLIENT),
        )?;
        self.check_topic_defaults(rules)?;
        self.check_password_cost(rules)
    }

    /// The flush thresholds a new topic gets when its creation names none.
    fn check_topic_defaults(&self, rules: &Rules<'_>) -> Result<(), ConfigError> {
        rules.range(
            "node.messages_required_to_save",
            self.messages_required_to_save.into(),
            1,
            MAX_MESSAGES_REQUIRED_TO_SAVE.into(),
        )?;
        rules.range(
            "node.size_of_messages_required_to_save",
            self.size_of_messages_required_to_save,
            1,
            MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE,
        )
    }

    /// Argon2id's cost: at least the cheapest the engine allows, at most the limits.
    fn check_password_cost(&self, rules: &Rules<'_>) -> Result<(), ConfigError> {
        rules.range(
            "node.password_hash_memory_kib",
            self.password_hash_memory_kib.into(),
            PasswordCost::CHEAP.memory_kib.into(),
            MAX_PASSWORD_HASH_MEMORY_KIB.into(),
        )?;
        rules.range(
            "node.password_hash_iterations",
            self.password_hash_iterations.into(),
            PasswordCost::CHEAP.iterations.into(),
            MAX_PASSWORD_HASH_ITERATIONS.into(),
        )
    }
}

impl AuthConfig {
    fn check(&self, rules: &Rules<'_>) -> Result<(), ConfigError> {
        rules.range(
            "auth.max_failed_logins",
            self.max_failed_logins.into(),
            1,
            MAX_FAILED_LOGINS.into(),
        )?;
        rules.span("auth.failed_login_window", self.failed_login_window)
    }
}

impl LogConfig {
    fn check(&self, rules: &Rules<'_>) -> Result<(), ConfigError> {
        if self.level.trim().is_empty() {
            return Err(rules.fail("log.level", "must not be empty".into()));
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.level) {
            return Err(rules.fail("log.level", format!("invalid filter {:?}: {e}", self.level)));
        }
        Ok(())
    }
}

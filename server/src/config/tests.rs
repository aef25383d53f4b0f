use super::load::{file_source, load_layers};
use super::*;
use cairn_engine::node::NodeSettings;
use std::path::Path;

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
            metrics_access: crate::http::MetricsAccess::OpenOnLoopback,
            tls: TlsConfig::default(),
        },
        root: RootConfig {
            username: "admin".into(),
            password: None,
        },
        node: NodeConfig {
            shards: 3,
            validate_checksum: false,
            pipeline_records: true,
            data_group_access: true,
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
        limits: LimitsConfig {
            buffered_bytes: 512 * MIB,
            connections_per_address: 64,
            anonymous_connections: 32,
            anonymous_per_address: 4,
            memberships_per_user: 100,
        },
        // Off, so that the rest is checked without a secret; every key still changed.
        cluster: ClusterConfig {
            enabled: false,
            name: "orders".into(),
            node: 2,
            secret: None,
            bootstrap: false,
            replication_factor: 2,
            members: (1..=3)
                .map(|id| MemberConfig {
                    id,
                    replication: format!("10.0.0.{id}:8091").parse().unwrap(),
                    client: format!("10.0.0.{id}:8090").parse().unwrap(),
                })
                .collect(),
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
    assert!(
        !config.node.pipeline_records,
        "records in the log sync's wait"
    );
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
    env.push(("CAIRN_CLUSTER_SECRET".into(), "a cluster's secret".into()));
    assert!(env.iter().any(|(k, _)| k == "CAIRN_DATA_DIR"));
    assert!(env
        .iter()
        .any(|(k, _)| k == "CAIRN_NODE_PASSWORD_HASH_MEMORY_KIB"));
    assert!(env.iter().any(|(k, _)| k == "CAIRN_CLUSTER_MEMBERS"));
    let config = load_layers(None, env).unwrap();
    let mut expected = changed;
    expected.root.password = Some("s3cret".into());
    expected.cluster.secret = Some("a cluster's secret".into());
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
            "unknown key datadir in {} (expected one of: data_dir, tcp, http, root, node, auth, log, limits, cluster)",
            path.display()
        )
    );
    let (result, path) = from_file("[metrics]\nport = 1\n", &[]);
    assert!(error(result).starts_with(&format!("unknown key metrics in {} ", path.display())));
    // Every section refuses keys it does not have.
    for section in ["tcp", "root", "node", "auth", "log", "limits"] {
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
    assert!(error(result).starts_with(&format!("unknown key tcp.tcp in {} ", path.display())));
    let (result, path) = from_file("[log]\nformat = \"json\"\ncolour = true\n", &[]);
    assert!(error(result).starts_with(&format!("unknown key log.colour in {} ", path.display())));
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
         data_dir, tcp.*, http.*, root.*, node.*, auth.*, log.*, limits.*, cluster.*)"
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
    )));
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
        message.starts_with(
            "CAIRN_NODE_VALIDATE_CHECKSUM: invalid type: found string \"yes\", expected a boolean"
        ),
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
    assert!(settings.partition.pipeline_records);
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
            pipeline_records: true,
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

/// Review S19: a secret of the wrong type is refused without echoing its value.
#[test]
fn a_secrets_value_is_never_in_an_error() {
    let (result, _) = from_file("[root]\npassword = 987654321\n", &[]);
    let message = error(result);
    assert!(message.contains("root.password"), "{message}");
    assert!(message.contains("expected a string"), "{message}");
    assert!(!message.contains("987654321"), "{message}");
}

/// Review S19: a syntax error says where, never quotes the line (it may hold a secret).
#[test]
fn a_syntax_error_never_quotes_its_line() {
    let (result, _) = from_file("[root]\npassword = \"hunter2\\q\"\n", &[]);
    let message = error(result);
    assert!(message.contains("line 2"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
}

type Vars = Vec<(&'static str, String)>;

/// A three-member cluster's variables for member `node`, with `secret`.
fn cluster_vars(node: &str, secret: &str) -> Vars {
    let tcp = format!("127.0.0.1:900{node}");
    vec![
        ("CAIRN_TCP_ADDRESS", tcp),
        ("CAIRN_CLUSTER_ENABLED", "true".into()),
        ("CAIRN_CLUSTER_NODE", node.into()),
        ("CAIRN_CLUSTER_SECRET", secret.into()),
        (
            "CAIRN_CLUSTER_MEMBERS",
            "[{id = 1, replication = \"127.0.0.1:9101\", client = \"127.0.0.1:9001\"}, \
              {id = 2, replication = \"127.0.0.1:9102\", client = \"127.0.0.1:9002\"}, \
              {id = 3, replication = \"127.0.0.1:9103\", client = \"127.0.0.1:9003\"}]"
                .into(),
        ),
    ]
}

fn cluster_from_env(vars: &[(&'static str, String)]) -> Result<ServerConfig, ConfigError> {
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    from_env(&pairs)
}

#[test]
fn a_cluster_is_configured_by_variables_and_checked() {
    let config = cluster_from_env(&cluster_vars("2", "sixteen bytes at least")).unwrap();
    let cluster = &config.cluster;
    assert!(cluster.enabled && cluster.bootstrap);
    assert_eq!(cluster.members.len(), 3);
    assert_eq!(cluster.me().unwrap().replication.port(), 9102);
    assert_eq!(cluster.peers()[&3].client, "127.0.0.1:9003");
    assert!(cluster.key().is_some());
    // The id is the name's: one name, one id; another name, another.
    let mut other = cluster.clone();
    assert_eq!(other.cluster_id(), cluster.cluster_id());
    other.name = "another".into();
    assert_ne!(other.cluster_id(), cluster.cluster_id());

    let refusals: [(&str, Vars, &str); 8] = [
        (
            "no secret",
            cluster_vars("2", "x")
                .into_iter()
                .filter(|(k, _)| *k != "CAIRN_CLUSTER_SECRET")
                .collect(),
            "cluster.secret",
        ),
        (
            "a short secret",
            cluster_vars("2", "too short"),
            "16 to 1024 bytes",
        ),
        ("the mask", cluster_vars("2", PASSWORD_MASK), "is the mask"),
        (
            "not a member",
            cluster_vars("4", "sixteen bytes at least"),
            "4 is not among cluster.members",
        ),
        (
            "member 0",
            {
                let mut v = cluster_vars("2", "sixteen bytes at least");
                v[4].1 = v[4].1.replace("id = 1", "id = 0");
                v
            },
            "nonzero and unique",
        ),
        (
            "a shared replication address",
            {
                let mut v = cluster_vars("2", "sixteen bytes at least");
                v[4].1 = v[4].1.replace("9101", "9102");
                v
            },
            "127.0.0.1:9102 is given twice",
        ),
        (
            "a replication address that is another member's client address",
            {
                let mut v = cluster_vars("2", "sixteen bytes at least");
                v[4].1 = v[4].1.replace("127.0.0.1:9101", "127.0.0.1:9003");
                v
            },
            "127.0.0.1:9003 is given twice",
        ),
        (
            "a client address clients cannot dial",
            {
                let mut v = cluster_vars("2", "sixteen bytes at least");
                v[4].1 = v[4].1.replace("127.0.0.1:9003", "0.0.0.0:9003");
                v
            },
            "member 3's client address 0.0.0.0:9003 is where clients dial it",
        ),
    ];
    for (case, vars, expected) in refusals {
        let message = error(cluster_from_env(&vars));
        assert!(message.contains(expected), "{case}: {message}");
        assert!(
            !message.contains("sixteen bytes"),
            "{case}: the secret shown: {message}"
        );
    }
    // A member's replication address may not be this node's HTTP listener.
    let mut vars = cluster_vars("1", "sixteen bytes at least");
    vars.push(("CAIRN_HTTP_ADDRESS", "0.0.0.0:9101".into()));
    assert!(error(cluster_from_env(&vars)).contains("also a listener's"));
    // An HTTP listener that is off takes no port.
    vars.push(("CAIRN_HTTP_ENABLED", "false".into()));
    cluster_from_env(&vars).expect("HTTP off");
    // The client address the cluster gives out is where this node listens.
    let mut vars = cluster_vars("1", "sixteen bytes at least");
    vars[0].1 = "127.0.0.1:9002".into();
    assert!(error(cluster_from_env(&vars)).contains("not where it listens"));
    vars[0].1 = "0.0.0.0:9001".into();
    cluster_from_env(&vars).expect("an unspecified listen address on the client port");
    // An administrator's configuration names no node: loaded, and refused for serving.
    let admin = cluster_from_env(&cluster_vars("0", "sixteen bytes at least")).unwrap();
    assert!(admin
        .cluster
        .serving()
        .unwrap_err()
        .contains("cluster.node is 0"));
    assert!(config.cluster.serving().is_ok());
    // Not a TOML array: the key's type is named, not the text.
    let mut vars = cluster_vars("1", "sixteen bytes at least");
    vars[4].1 = "1=127.0.0.1:9101".into();
    let message = error(cluster_from_env(&vars));
    assert!(message.contains("CAIRN_CLUSTER_MEMBERS"), "{message}");
}

#[test]
fn the_cluster_secret_is_masked_and_never_in_an_error() {
    let config = cluster_from_env(&cluster_vars("1", "the-cluster-secret-1")).unwrap();
    let text = config.to_toml();
    assert!(!text.contains("the-cluster-secret-1"), "{text}");
    assert!(text.contains("secret = \"***\""), "{text}");
    assert!(!format!("{config:?}").contains("the-cluster-secret-1"));
    let (result, _) = from_file("[cluster]\nsecret = 987654321\n", &[]);
    let message = error(result);
    assert!(
        message.contains("cluster.secret") && !message.contains("987654321"),
        "{message}"
    );
}

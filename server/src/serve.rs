//! `cairn serve`: boot the node on the data directory, start the listener, and run until a
//! signal (graceful shutdown; a second signal exits at once) or a node failure (exit 1, for a
//! supervisor to restart the process).
//!
//! The root user is created at the first boot with the configured password, or a random one
//! printed once; the node library's test default never reaches the server.

use crate::command::ClusterSource;
use crate::config::{LogFormat, ServerConfig};
use crate::{Server, ServerLimits, ServerSettings};
use cairn_engine::env::chan::Latch;
use cairn_engine::env::{race, Either, Env};
use cairn_engine::node::{Booted, Failure, Node};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Exit codes of `cairn serve`.
pub mod exit {
    /// The node stopped on a failure, or a graceful shutdown could not flush.
    pub const FAILED: u8 = 1;
    /// Boot refused, or the listener could not bind.
    pub const NOT_STARTED: u8 = 2;
    /// A second signal during shutdown.
    pub const INTERRUPTED: i32 = 130;
}

/// Installs the log output the configuration asks for (stderr).
pub fn init_logging(format: LogFormat, level: &str) {
    // openraft reports every vote and election at `info`: its warnings are what an
    // operator wants unless the level names it.
    let level = match level.contains("openraft") {
        true => level.to_string(),
        false => format!("{level},openraft=warn"),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human => builder.init(),
    }
}

/// A password for the root user when none is configured: 24 characters from the
/// environment's entropy.
pub fn generated_password(env: &Env) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    (0..24)
        .map(|_| ALPHABET[(env.entropy.next_u64() % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

/// The signals: the first sets the latch, the second exits at once.
fn install_signals() -> Latch<()> {
    let latch = Latch::default();
    let seen = Arc::new(AtomicU32::new(0));
    let handler_latch = latch.clone();
    let result = ctrlc::set_handler(move || {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!("cairn: shutting down (signal again to exit at once)");
            handler_latch.set(());
        } else {
            eprintln!("cairn: second signal, exiting now");
            std::process::exit(exit::INTERRUPTED);
        }
    });
    if let Err(e) = result {
        tracing::warn!(error = %e, "signal handler not installed");
    }
    latch
}

fn log_boot(config: &ServerConfig, booted: &Booted) {
    let plan = &booted.plan;
    let report = &booted.report;
    let fenced: Vec<_> = report
        .partitions
        .iter()
        .filter_map(|(key, boot)| boot.fence().map(|f| (key, f)))
        .collect();
    for (key, reason) in &fenced {
        tracing::warn!(partition = ?key, %reason, "partition fenced at boot: it refuses reads and writes until repaired");
    }
    for action in &plan.actions {
        tracing::info!(?action, "metadata recovery");
    }
    for note in &plan.notes {
        tracing::info!(%note, "metadata recovery");
    }
    for dir in &report.removed {
        tracing::info!(dir = %dir.display(), "boot removed a directory of a deleted entity");
    }
    tracing::info!(
        data = %config.data_dir.display(),
        first_boot = plan.first_boot,
        op = plan.last_op,
        replayed = plan.replayed.len(),
        repairs = plan.actions.len(),
        redone = report.redone(),
        partitions = report.partitions.len(),
        fenced = fenced.len(),
        "booted"
    );
}

fn server_settings(
    config: &ServerConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> ServerSettings {
    ServerSettings {
        address: config.tcp.address,
        limits: ServerLimits {
            max_frame_bytes: u32::try_from(config.tcp.max_frame_bytes)
                .expect("the configuration bounds frames at 1 GiB"),
            max_connections: config.tcp.max_connections,
            connections_per_address: config.connection_caps().0,
            anonymous_connections: config.connection_caps().1,
            anonymous_per_address: config.connection_caps().2,
            memberships_per_user: config.limits.memberships_per_user,
            max_reply_bytes: config.tcp.max_reply_bytes,
            buffered_bytes: config.buffered_bytes(),
            handshake_timeout: config.tcp.handshake_timeout,
            idle_timeout: config.tcp.idle_timeout,
            max_failed_logins: config.auth.max_failed_logins,
            failed_login_window: config.auth.failed_login_window,
            ..ServerLimits::default()
        },
        topic_defaults: crate::TopicDefaults {
            messages_required_to_save: config.node.messages_required_to_save,
            size_of_messages_required_to_save: config.node.size_of_messages_required_to_save,
            replication_factor: config
                .cluster
                .enabled
                .then_some(config.cluster.replication_factor),
        },
        tls,
        hooks: Default::default(),
    }
}

fn http_settings(
    config: &ServerConfig,
    env: &Env,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> crate::http::HttpSettings {
    let http = &config.http;
    // A fresh key per start: a restart ends every bearer token, logged out or not (the
    // logout list is in memory; a key that outlived it would bring logged-out tokens back).
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&env.entropy.next_u64().to_le_bytes());
    }
    let key = crate::http::bearer::SigningKey::from_bytes(bytes);
    crate::http::HttpSettings {
        address: http.address,
        max_body_bytes: usize::try_from(http.max_body_bytes).unwrap_or(usize::MAX),
        max_concurrent_requests: http.max_concurrent_requests,
        token_expiry: http.token_expiry,
        key,
        metrics: http.metrics_access,
        max_connections: config.tcp.max_connections,
        max_connections_per_address: config.connection_caps().0,
        tls,
    }
}

/// Warns of each entry of the data directory (itself, its top level, `metadata/` and what
/// it holds) that gives more access than the node would create it with: others (or, without
/// `node.data_group_access`, the group) may read the journal's password hashes or the
/// messages. Reported, not changed: the modes are the operator's.
#[allow(clippy::disallowed_methods)] // at process start, before the node's disk exists
fn report_wide_modes(data_dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let (file_mode, dir_mode) = cairn_engine::env::real::created_modes();
    let children = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    };
    let mut paths = vec![data_dir.to_path_buf()];
    paths.extend(children(data_dir));
    paths.extend(children(&data_dir.join("metadata")));
    for path in paths {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let allowed = if meta.is_dir() { dir_mode } else { file_mode };
        let mode = meta.permissions().mode() & 0o777;
        if mode & !allowed != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format_args!("{mode:04o}"),
                expected = format_args!("{allowed:04o}"),
                "a data path gives more access than the node would create it with"
            );
        }
    }
}

/// The binary listener and, when enabled, the HTTP one, bound; `None` (reported) when an
/// address cannot be had.
#[allow(clippy::disallowed_types)] // the HTTP listener is tokio's (outside the `Env` seam)
async fn bind_listeners(
    env: &Env,
    config: &ServerConfig,
) -> Option<(
    Box<dyn cairn_engine::env::Listener>,
    Option<std::net::TcpListener>,
)> {
    let socket = match env.net.listen(config.tcp.address).await {
        Ok(socket) => socket,
        Err(e) => {
            tracing::error!(address = %config.tcp.address, error = %e, "cannot listen");
            eprintln!("cairn: cannot listen on {}: {e}", config.tcp.address);
            return None;
        }
    };
    if !config.http.enabled {
        return Some((socket, None));
    }
    match crate::http::bind(config.http.address) {
        Ok(listener) => Some((socket, Some(listener))),
        Err(e) => {
            tracing::error!(address = %config.http.address, error = %e, "cannot listen for HTTP");
            eprintln!(
                "cairn: cannot listen on {} (HTTP): {e}",
                config.http.address
            );
            None
        }
    }
}

/// Takes at most `room` connections (TCP and HTTP alike), where the configuration allows
/// more: past it clients would take the descriptors the partitions' files need.
fn clamp_connections(config: &mut ServerConfig, room: u64) {
    let listeners = if config.http.enabled { 2 } else { 1 };
    let fits = usize::try_from(room / listeners)
        .unwrap_or(usize::MAX)
        .max(1);
    if config.tcp.max_connections <= fits {
        return;
    }
    tracing::warn!(
        configured = config.tcp.max_connections,
        taken = fits,
        "the open-file limit leaves room for fewer connections than tcp.max_connections: \
         fewer are taken (raise the hard `ulimit -n` for more)"
    );
    config.tcp.max_connections = fits;
    let limits = &mut config.limits;
    limits.connections_per_address = limits.connections_per_address.min(fits);
    limits.anonymous_connections = limits.anonymous_connections.min(fits);
    limits.anonymous_per_address = limits.anonymous_per_address.min(fits);
}

/// The partitions whose active files the process's open-file limit leaves room for (none
/// when the limit cannot be read: the engine's default table then).
fn descriptor_budget(
    config: &ServerConfig,
    sealed_handles: u64,
) -> Option<crate::command::descriptors::DescriptorBudget> {
    let (limit, _) = crate::process::open_file_limit().ok()?;
    let listeners = if config.http.enabled { 2 } else { 1 };
    let connections = listeners * config.tcp.max_connections as u64;
    Some(crate::command::descriptors::DescriptorBudget::new(
        limit,
        sealed_handles,
        connections,
    ))
}

/// This node's replica of the cluster's metadata group, when `[cluster]` is enabled;
/// `Err` (reported) when it cannot start.
async fn start_member(
    env: &Env,
    config: &ServerConfig,
    node: &Node,
) -> Result<Option<cairn_cluster::group::MetaGroup>, ()> {
    if !config.cluster.enabled {
        return Ok(None);
    }
    match crate::cluster::start(env, config, node).await {
        Ok(group) => {
            let me = config
                .cluster
                .me()
                .expect("the replica started as a member");
            println!(
                "cairn: member {} of cluster {} (replica {}), peers on {}",
                config.cluster.node,
                config.cluster.name,
                cairn_cluster::types::show_id(group.id()),
                me.replication
            );
            Ok(Some(group))
        }
        Err(e) => {
            tracing::error!(error = %e, "the cluster's replica did not start");
            eprintln!("cairn: {e}");
            Err(())
        }
    }
}

/// Runs the server until a signal or a failure.
pub fn run(config: ServerConfig) -> ExitCode {
    init_logging(config.log.format, &config.log.level);
    match crate::process::raise_open_file_limit() {
        Ok((before, after)) if after > before => {
            tracing::info!(
                before,
                after,
                "raised the open-file limit to its hard limit"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "the open-file limit could not be raised"),
    }
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let env = match cairn_engine::env::real::env_with_workers(workers) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("cairn: cannot start the runtime: {e}");
            return ExitCode::from(exit::NOT_STARTED);
        }
    };
    // Read again (the configuration's check read them too): what the files hold now.
    let (tls, https) = match (
        config.tcp.tls.server_config("tcp"),
        config.http.tls.server_config("http"),
    ) {
        (Ok(tls), Ok(https)) => (tls, https),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("cairn: {e}");
            return ExitCode::from(exit::NOT_STARTED);
        }
    };
    let stop = install_signals();
    cairn_engine::env::real::block_on(serve(env, config, tls, https, stop))
}

async fn serve(
    env: Env,
    config: ServerConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
    https: Option<Arc<rustls::ServerConfig>>,
    stop: Latch<()>,
) -> ExitCode {
    let mut settings = config.node_settings();
    let generated = config.root.password.is_none();
    settings.root_password = config
        .root
        .password
        .clone()
        .unwrap_or_else(|| generated_password(&env));
    let root_password = settings.root_password.clone();
    let sealed_handles = settings.limits.sealed_handles as u64;
    let mut config = config;
    if let Some(budget) = descriptor_budget(&config, sealed_handles) {
        tracing::info!(
            open_files = budget.limit,
            active_files_of = budget.active,
            connections = budget.connections,
            "the open-file limit leaves room for this many partitions' active files at once"
        );
        settings.limits.active_handles = budget.active as usize;
        clamp_connections(&mut config, budget.connections);
    }
    cairn_engine::env::real::set_group_read(config.node.data_group_access);
    report_wide_modes(&config.data_dir);
    // The listeners first: a taken port is reported as such before a long boot.
    let Some((socket, http_listener)) = bind_listeners(&env, &config).await else {
        return ExitCode::from(exit::NOT_STARTED);
    };
    let booted = match Node::start(&env, &config.data_dir, settings).await {
        Ok(booted) => booted,
        Err(e) => {
            tracing::error!(data = %config.data_dir.display(), error = %e, "boot refused");
            eprintln!("cairn: boot of {} refused: {e}", config.data_dir.display());
            return ExitCode::from(exit::NOT_STARTED);
        }
    };
    log_boot(&config, &booted);
    if booted.plan.last_op > 0 && !generated {
        tracing::warn!(
            user = %config.root.username,
            "root.password (CAIRN_ROOT_PASSWORD) applies only at the first start; the root user keeps the password it has"
        );
    }
    if booted.plan.last_op == 0 && generated && !config.cluster.enabled {
        println!(
            "cairn: created the root user `{}` with the password `{root_password}` (shown once; set CAIRN_ROOT_PASSWORD to choose it)",
            config.root.username
        );
    }
    let node = booted.node;
    // The cluster's replica before any client is served: a member that cannot be one
    // (its replication address taken, its Raft storage refused) serves no one.
    let group = match start_member(&env, &config, &node).await {
        Ok(group) => group,
        Err(()) => {
            let _ = node.shutdown().await;
            return ExitCode::from(exit::NOT_STARTED);
        }
    };
    if let Some(group) = &group {
        let found = crate::cluster::found_root(
            env.clone(),
            node.clone(),
            cairn_cluster::group::Replica::clone(group),
            config.root.username.clone(),
            root_password.clone(),
        );
        drop(env.tasks.spawn(Box::pin(async move {
            found.await;
        })));
    }
    let server = match Server::start_on(node.clone(), server_settings(&config, tls), socket) {
        Ok(server) => server,
        Err(e) => {
            tracing::error!(address = %config.tcp.address, error = %e, "cannot listen");
            eprintln!("cairn: cannot listen on {}: {e}", config.tcp.address);
            let _ = node.shutdown().await;
            return ExitCode::from(exit::NOT_STARTED);
        }
    };
    let _ = server.context().figures.set(crate::process::read);
    if let Some(group) = &group {
        let replica = cairn_cluster::group::Replica::clone(group);
        let me = config
            .cluster
            .me()
            .expect("a member's configuration names itself");
        let _ = server.context().cluster.set(ClusterSource {
            name: config.cluster.name.clone(),
            client: me.client,
            status: Box::new(move |partitions| match partitions {
                true => replica.status_with_partitions(),
                false => replica.status(),
            }),
        });
    }
    let http = if let Some(listener) = http_listener {
        let settings = http_settings(&config, &env, https);
        match crate::http::start_on(listener, server.context(), server.stopping(), settings) {
            Ok(http) => Some(http),
            Err(e) => {
                tracing::error!(address = %config.http.address, error = %e, "cannot listen for HTTP");
                eprintln!(
                    "cairn: cannot listen on {} (HTTP): {e}",
                    config.http.address
                );
                let _ = server.shutdown().await;
                return ExitCode::from(exit::NOT_STARTED);
            }
        }
    } else {
        None
    };
    tracing::info!(data = %config.data_dir.display(), tcp = %server.local_addr(), "cairn serving");
    // The HTTP line first: a supervisor (and the tests) may take "listening on" as ready.
    if let Some(http) = &http {
        let scheme = if config.http.tls.enabled {
            "https"
        } else {
            "http"
        };
        println!("cairn: HTTP API on {scheme}://{}", http.local_addr());
    }
    println!(
        "cairn: listening on {} (data in {})",
        server.local_addr(),
        config.data_dir.display()
    );
    let group_stopped = async {
        match &group {
            Some(group) => group.stopped().await,
            None => std::future::pending().await,
        }
    };
    let outcome = match race(stop.wait(), race(node.stopped(), group_stopped)).await {
        Either::Left(()) => Either::Left(()),
        Either::Right(Either::Left(failure)) => Either::Right(failure),
        // A member whose replica stopped would serve as if it were still one: it drains
        // and flushes as a graceful shutdown does, then exits 1, for a restart to recover
        // its replica from the disk.
        Either::Right(Either::Right(why)) => {
            tracing::error!(%why, "the cluster's replica stopped; shutting down for a restart to recover");
            eprintln!("cairn: the cluster's replica stopped: {why}");
            if let Err(e) = server.shutdown().await {
                tracing::error!(error = %e, "shutdown could not flush everything");
            }
            return ExitCode::from(exit::FAILED);
        }
    };
    if let Some(group) = &group {
        // A leader hands leadership over before it goes (within a couple of seconds).
        let leader = group.stop().await;
        tracing::info!(leader = ?leader.map(cairn_cluster::types::show_id), "left the cluster's group");
    }
    match outcome {
        Either::Left(()) => match server.shutdown().await {
            // The node may have stopped on a failure during the drain: then not everything
            // is known to be on disk.
            Ok(()) if !matches!(node.failure().as_deref(), None | Some(Failure::Shutdown)) => {
                let failure = node.failure().expect("checked");
                tracing::error!(%failure, "the node failed during shutdown");
                ExitCode::from(exit::FAILED)
            }
            Ok(()) => {
                tracing::info!("shut down cleanly: every committed message is on disk");
                ExitCode::SUCCESS
            }
            Err(e) => {
                tracing::error!(error = %e, "shutdown could not flush everything");
                ExitCode::from(exit::FAILED)
            }
        },
        Either::Right(failure) => {
            tracing::error!(%failure, "the node stopped; exiting for a restart to recover");
            ExitCode::from(exit::FAILED)
        }
    }
}

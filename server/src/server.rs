//! The listener: accepts connections up to a bound, runs one task per connection, and shuts
//! down gracefully (stop accepting, let every connection finish the request it is serving,
//! then the node flushes and syncs every committed message).

use crate::connection;
use crate::registry::{LoginLimiter, Registry};
use cairn_engine::env::chan::Latch;
use cairn_engine::env::{race, Either, Env, TaskHandle};
use cairn_engine::node::Node;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The server's bounds (each one a limit on memory or time a client can hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// The largest frame a client may send (header included); above it the connection
    /// closes.
    pub max_frame_bytes: u32,
    pub max_connections: usize,
    /// A connection must log in within this long of connecting.
    pub handshake_timeout: Duration,
    /// A connection with no request for this long is closed (the SDK pings every 5 s), and
    /// so is one that does not take a reply within it.
    pub idle_timeout: Duration,
    pub max_failed_logins: u32,
    pub failed_login_window: Duration,
    /// How long a graceful shutdown waits for connections to finish their requests.
    pub drain_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_frame_bytes: 64 * 1024 * 1024,
            max_connections: 4096,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_failed_logins: 5,
            failed_login_window: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    pub address: SocketAddr,
    pub limits: ServerLimits,
    /// What a new topic gets when its creation does not say.
    pub topic_defaults: TopicDefaults,
}

/// Flush thresholds a topic creation that names none gets. The server writes them into the
/// request's options before it is journaled, so a later change of the configuration never
/// changes a topic that exists (replay reads what the journal says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicDefaults {
    pub messages_required_to_save: u32,
    pub size_of_messages_required_to_save: u64,
}

impl Default for TopicDefaults {
    fn default() -> Self {
        let config = cairn_engine::config::TopicConfig::default();
        TopicDefaults {
            messages_required_to_save: config.messages_required_to_save,
            size_of_messages_required_to_save: config.size_of_messages_required_to_save,
        }
    }
}

/// What every connection task shares.
pub struct Shared {
    pub env: Env,
    pub node: Node,
    pub limits: ServerLimits,
    pub topic_defaults: TopicDefaults,
    pub registry: Registry,
    pub logins: LoginLimiter,
    /// The address the listener is bound to (reported by GetClusterMetadata).
    pub local_addr: SocketAddr,
    /// Wall-clock µs at start.
    pub started_at: u64,
    next_session: AtomicU64,
    /// Set when the server stops accepting and connections should finish.
    pub stopping: Latch<()>,
    /// Live connection tasks.
    pub live: AtomicU64,
    /// What the command layer counts (`/metrics`).
    pub metrics: crate::metrics::CommandMetrics,
}

impl Shared {
    /// A session number for a new login: nonzero and increasing (SPEC §2.2).
    pub fn next_session(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }
}

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    accept: Mutex<Option<Box<dyn TaskHandle>>>,
}

impl Server {
    /// Binds the listener and starts accepting.
    pub async fn start(node: Node, settings: ServerSettings) -> io::Result<Server> {
        let env = node.env().clone();
        let mut listener = env.net.listen(settings.address).await?;
        let local_addr = listener.local_addr()?;
        let limits = settings.limits;
        let shared = Arc::new(Shared {
            started_at: env.clock.wall_micros(),
            // Session numbers grow across restarts too: a session from before one never
            // matches one after it.
            next_session: AtomicU64::new(env.clock.wall_micros().max(1)),
            env: env.clone(),
            node,
            limits,
            topic_defaults: settings.topic_defaults,
            registry: Registry::default(),
            logins: LoginLimiter::new(limits.max_failed_logins, limits.failed_login_window),
            local_addr,
            stopping: Latch::default(),
            live: AtomicU64::new(0),
            metrics: crate::metrics::CommandMetrics::default(),
        });
        tracing::info!(address = %local_addr, "listening for Iggy binary protocol clients (TCP)");
        let accepting = shared.clone();
        let accept = env.tasks.spawn(Box::pin(async move {
            loop {
                let next = race(accepting.stopping.wait(), listener.accept()).await;
                match next {
                    Either::Left(()) => break,
                    Either::Right(Ok((stream, peer))) => {
                        connection::start(accepting.clone(), stream, peer);
                    }
                    Either::Right(Err(e)) => {
                        tracing::debug!(error = %e, "accept failed");
                        accepting.env.clock.sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            tracing::info!("stopped accepting connections");
        }));
        Ok(Server {
            shared,
            accept: Mutex::new(Some(accept)),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The wall-clock µs the server started at: its first login's session number (every
    /// session of this process is at least this, and below any later process's).
    pub fn started_at(&self) -> u64 {
        self.shared.started_at
    }

    /// What the connection tasks share (another adapter, HTTP, serves over it too).
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    pub fn node(&self) -> &Node {
        &self.shared.node
    }

    /// Live connections.
    pub fn connections(&self) -> u64 {
        self.shared.live.load(Ordering::SeqCst)
    }

    /// Graceful shutdown: stop accepting; every connection finishes the request it is
    /// serving and closes (at most [`ServerLimits::drain_timeout`]); then the node flushes
    /// and syncs every committed message whatever the thresholds.
    pub async fn shutdown(&self) -> cairn_engine::node::NodeResult<()> {
        self.shared.stopping.set(());
        let deadline = self.shared.env.clock.monotonic_nanos()
            + u64::try_from(self.shared.limits.drain_timeout.as_nanos()).unwrap_or(u64::MAX);
        while self.connections() > 0 && self.shared.env.clock.monotonic_nanos() < deadline {
            self.shared.env.clock.sleep(Duration::from_millis(5)).await;
        }
        if let Some(accept) = self.accept.lock().unwrap_or_else(|p| p.into_inner()).take() {
            accept.cancel();
        }
        tracing::info!(
            unfinished = self.connections(),
            "connections drained; flushing"
        );
        self.shared.node.shutdown().await
    }
}

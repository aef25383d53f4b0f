//! The listener: accepts connections up to a bound, runs one task per connection, and shuts
//! down gracefully (stop accepting, let every connection finish the request it is serving,
//! then the node flushes and syncs every committed message).

use crate::connection;
use crate::hooks::ServerHooks;
use crate::registry::{LoginLimiter, Registry};
use cairn_engine::env::chan::{Latch, Permit, Semaphore};
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

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub address: SocketAddr,
    pub limits: ServerLimits,
    /// What a new topic gets when its creation does not say.
    pub topic_defaults: TopicDefaults,
    /// TLS on every accepted connection ([`crate::tls::server_config`]); none: plain TCP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The simulator's hooks into the command path; none in production
    /// ([`ServerHooks::default`]).
    pub hooks: ServerHooks,
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

/// Bytes of `ack=none` sends in flight at most, in [`DISPATCH_UNIT`]s (256 MiB).
pub const DISPATCH_BUDGET_UNITS: usize = 256;

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
    /// TLS on every connection: its task runs the handshake before the first request.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Live connection tasks.
    pub live: AtomicU64,
    /// What the command layer counts (`/metrics`).
    pub metrics: crate::metrics::CommandMetrics,
    /// Bytes of dispatched (`ack=none`) sends not yet appended.
    pub dispatch_budget: DispatchBudget,
    /// Where `GetStats` reads the process's figures: set by `cairn serve`, never by the
    /// simulator (whose stats then carry zeros).
    pub figures: std::sync::OnceLock<crate::process::FiguresSource>,
    /// The simulator's hooks (none in production).
    pub hooks: ServerHooks,
}

/// A bound on the bytes of sends dispatched and not yet appended, in MiB units. Units are
/// taken one caller at a time (a gate), so two callers each holding part of what they need
/// never wait on each other forever.
pub struct DispatchBudget {
    gate: Semaphore,
    units: Semaphore,
    total: usize,
}

/// The bytes one unit of [`DispatchBudget`] stands for.
pub const DISPATCH_UNIT: usize = 1024 * 1024;

impl DispatchBudget {
    pub fn new(total_units: usize) -> DispatchBudget {
        assert!(total_units > 0);
        DispatchBudget {
            gate: Semaphore::new(1),
            units: Semaphore::new(total_units),
            total: total_units,
        }
    }

    /// Units for `bytes` (at least one; a batch larger than the budget takes all of it),
    /// waiting for them.
    pub async fn reserve(&self, bytes: usize) -> Vec<Permit> {
        let wanted = bytes.div_ceil(DISPATCH_UNIT).clamp(1, self.total);
        let _gate = self.gate.acquire().await;
        let mut held = Vec::with_capacity(wanted);
        while held.len() < wanted {
            held.push(self.units.acquire().await);
        }
        held
    }

    pub fn available(&self) -> usize {
        self.units.available()
    }
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
            tls: settings.tls,
            live: AtomicU64::new(0),
            metrics: crate::metrics::CommandMetrics::default(),
            dispatch_budget: DispatchBudget::new(DISPATCH_BUDGET_UNITS),
            figures: std::sync::OnceLock::new(),
            hooks: settings.hooks,
        });
        tracing::info!(address = %local_addr, tls = shared.tls.is_some(), "listening for Iggy binary protocol clients (TCP)");
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn the_dispatch_budget_bounds_bytes_and_waits_past_them() {
        let budget = DispatchBudget::new(4);
        let three = budget.reserve(3 * DISPATCH_UNIT).now_or_never().unwrap();
        assert_eq!((three.len(), budget.available()), (3, 1));
        let one = budget.reserve(1).now_or_never().unwrap();
        assert_eq!((one.len(), budget.available()), (1, 0));
        // Full: the next reservation waits, whatever its size.
        assert!(budget.reserve(10).now_or_never().is_none());
        drop(three);
        assert_eq!(budget.available(), 3);
        // Larger than the whole budget: it takes all of it, once all of it is free.
        assert!(budget.reserve(100 * DISPATCH_UNIT).now_or_never().is_none());
        drop(one);
        let all = budget.reserve(100 * DISPATCH_UNIT).now_or_never().unwrap();
        assert_eq!((all.len(), budget.available()), (4, 0));
    }
}

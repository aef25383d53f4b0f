//! The server: the command layer's context and the binary listener over it, with their
//! bounds. It starts, and shuts down gracefully: stop accepting, let every connection finish
//! the request it is serving, then the node flushes and syncs every committed message.

use crate::command::hooks::CommandHooks;
use crate::command::login_limit::LoginLimiter;
use crate::command::{Context, TopicDefaults};
use crate::tcp::dedup::DedupHitHook;
use crate::tcp::{self, Listener, ServerLimits};
use cairn_engine::env::chan::Latch;
use cairn_engine::env::{Listener as NetListener, TaskHandle};
use cairn_engine::node::Node;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub address: SocketAddr,
    pub limits: ServerLimits,
    /// What a new topic gets when its creation does not say.
    pub topic_defaults: TopicDefaults,
    /// TLS on every accepted connection ([`crate::tls::server_config`]); none: plain TCP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The simulator's hooks; none in production ([`ServerHooks::default`]).
    pub hooks: ServerHooks,
}

/// The simulator's hooks into the server, for its deliberate bugs: the command layer's
/// ([`CommandHooks`]) and the binary protocol's duplicate table's. [`Default`] is
/// production (none).
#[derive(Clone, Copy, Default, Debug)]
pub struct ServerHooks {
    pub command: CommandHooks,
    pub dedup_hit: Option<DedupHitHook>,
}

/// A running server: the command layer's context and the binary listener over it.
pub struct Server {
    listener: Arc<Listener>,
    accept: Mutex<Option<Box<dyn TaskHandle>>>,
}

impl Server {
    /// Binds the listener and starts accepting.
    pub async fn start(node: Node, settings: ServerSettings) -> io::Result<Server> {
        let socket = node.env().net.listen(settings.address).await?;
        Self::start_on(node, settings, socket)
    }

    /// Starts accepting on `socket`, bound before the node booted (`cairn serve` binds
    /// first: a boot problem is never taken for a port problem, nor the other way round).
    pub fn start_on(
        node: Node,
        settings: ServerSettings,
        socket: Box<dyn NetListener>,
    ) -> io::Result<Server> {
        let env = node.env().clone();
        let local_addr = socket.local_addr()?;
        let limits = settings.limits;
        let logins = LoginLimiter::new(limits.max_failed_logins, limits.failed_login_window);
        let hooks = settings.hooks;
        let mut cx = Context::new(
            node,
            settings.topic_defaults,
            logins,
            local_addr,
            limits.buffered_bytes,
            hooks.command,
        );
        cx.memberships_per_user = limits.memberships_per_user;
        cx.replies = crate::command::replies::Shares::new(
            limits.buffered_bytes,
            crate::command::replies::USERS_SHARING,
            limits.max_reply_bytes,
        );
        let listener = Arc::new(Listener {
            cx: Arc::new(cx),
            limits,
            stopping: Latch::default(),
            tls: settings.tls,
            live: AtomicU64::new(0),
            dedup_hit: hooks.dedup_hit,
        });
        tracing::info!(address = %local_addr, tls = listener.tls.is_some(), "listening for Iggy binary protocol clients (TCP)");
        let accept = env
            .tasks
            .spawn(Box::pin(tcp::accept(listener.clone(), socket)));
        Ok(Server {
            listener,
            accept: Mutex::new(Some(accept)),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.cx.local_addr
    }

    /// The wall-clock µs the server started at: its first login's session number (every
    /// session of this process is at least this, and below any later process's).
    pub fn started_at(&self) -> u64 {
        self.listener.cx.started_at
    }

    /// The command layer's context (another adapter, HTTP, serves over it too).
    pub fn context(&self) -> Arc<Context> {
        self.listener.cx.clone()
    }

    /// Set when the server stops: every listener stops accepting.
    pub fn stopping(&self) -> Latch<()> {
        self.listener.stopping.clone()
    }

    pub fn node(&self) -> &Node {
        &self.listener.cx.node
    }

    /// Live binary-protocol connections.
    pub fn connections(&self) -> u64 {
        self.listener.live.load(Ordering::SeqCst)
    }

    /// Graceful shutdown: stop accepting; every connection finishes the request it is
    /// serving and closes (at most [`ServerLimits::drain_timeout`]); then the node flushes
    /// and syncs every committed message whatever the thresholds.
    pub async fn shutdown(&self) -> cairn_engine::node::NodeResult<()> {
        let (cx, limits) = (&self.listener.cx, self.listener.limits);
        self.listener.stopping.set(());
        let deadline = cx.env.clock.monotonic_nanos()
            + u64::try_from(limits.drain_timeout.as_nanos()).unwrap_or(u64::MAX);
        while self.connections() > 0 && cx.env.clock.monotonic_nanos() < deadline {
            cx.env.clock.sleep(Duration::from_millis(5)).await;
        }
        if let Some(accept) = self.accept.lock().unwrap_or_else(|p| p.into_inner()).take() {
            accept.cancel();
        }
        tracing::info!(
            unfinished = self.connections(),
            "connections drained; flushing"
        );
        cx.node.shutdown().await
    }
}

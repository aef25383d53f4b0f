//! The HTTP API in Iggy's shape (paths, methods, JSON bodies and replies, bearer tokens), so
//! the `iggy` SDK's HTTP transport works unmodified. It is a leaf adapter over the command
//! layer, with no state of its own beyond its signing key and the logged-out token ids:
//!
//! ```text
//! JSON body / query / path (iggy_common's types) ──► a typed command::Command
//!     ──► command::execute (session check, permissions, node) ──► a typed command::Reply
//!     ──► iggy_common's model (its own conversions from the codec's response types) ──► JSON
//! ```
//!
//! Architecture invariant: this adapter never builds or reads the binary protocol's bytes.
//! A send's JSON is decoded straight into a batch in the stored format (each payload's
//! base64 decoded once, at its final offset: [`send_body`]); a poll's JSON is encoded
//! straight from the stored batches ([`poll_body`]). The conversions of everything else are
//! Iggy's own (`iggy_common::wire_conversions`), so a field the SDK reads is the field the
//! binary protocol carries.
//!
//! - [`bearer`]: signed, expiring bearer tokens and the bounded logout list (sans-IO);
//! - [`auth`]: token → session, login, refresh, logout;
//! - [`admit`]: bodies read within the byte budget and a timeout, then a slot;
//! - [`body`]: bounded JSON bodies and queries, refused with the field at fault (unknown
//!   fields included);
//! - [`error`]: Iggy's error JSON and the status table;
//! - [`routes`]: the route table; [`resource`]: what every resource's handlers share; the
//!   resources:
//!   [`system`], [`users`], [`streams`], [`consumers`], [`messages`], [`personal_tokens`];
//! - [`metrics`]: `GET /metrics` in Prometheus' text format.
//!
//! Unlike the binary listener this runs on tokio directly (axum), not on the `Env` seam: the
//! simulator drives the binary protocol only.

pub mod admit;
pub mod auth;
pub mod bearer;
pub mod body;
pub mod consumers;
pub mod error;
pub mod listen;
pub mod messages;
pub mod metrics;
pub mod personal_tokens;
pub mod poll_body;
pub mod resource;
pub mod routes;
pub mod send_body;
pub mod streams;
pub mod system;
pub mod users;

use crate::command::Context;
use axum::Router;
use bearer::{Revocations, SigningKey};
use cairn_engine::env::chan::Latch;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The largest body of any request but a send.
pub const SMALL_BODY_BYTES: usize = 64 * 1024;

/// Who may scrape `GET /metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricsAccess {
    /// Anyone who reaches the listener.
    Open,
    /// Callers from a loopback address without a token; others need a bearer token.
    OpenOnLoopback,
    /// Everyone needs a bearer token of a user allowed to read the server's state.
    Authenticated,
}

/// The HTTP listener's settings.
#[derive(Clone)]
pub struct HttpSettings {
    pub address: SocketAddr,
    /// The largest request body accepted; above it, 413.
    pub max_body_bytes: usize,
    /// Requests served at once; more wait for a slot (back-pressure, not memory).
    pub max_concurrent_requests: usize,
    /// How long a bearer token is valid.
    pub token_expiry: Duration,
    pub key: SigningKey,
    pub metrics: MetricsAccess,
    /// HTTP connections open at once; more are closed at once.
    pub max_connections: usize,
    /// HTTP connections one address may hold.
    pub max_connections_per_address: usize,
    /// TLS for every connection, when configured.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
}

/// What every HTTP request shares.
pub struct Api {
    pub cx: Arc<Context>,
    pub settings: HttpSettings,
    pub metrics: metrics::Metrics,
    key: SigningKey,
    revoked: Revocations,
    /// Requests served at once (`max_concurrent_requests`), taken once a body is read.
    pub slots: cairn_engine::env::chan::Semaphore,
}

/// A running HTTP listener.
pub struct HttpServer {
    local_addr: SocketAddr,
    task: Box<dyn cairn_engine::env::TaskHandle>,
}

impl HttpServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting; requests in flight finish (the binary server's shutdown drains).
    pub fn stop(self) {
        self.task.cancel();
    }
}

/// The router, for a server's shared state.
pub fn router(api: Arc<Api>) -> Router {
    routes::routes()
        // Bodies read (within the budget and the body timeout), then a slot: after routing,
        // so that a send's body waits for its handler's permission check.
        .layer(axum::middleware::from_fn_with_state(
            api.clone(),
            admit::admit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            api.clone(),
            metrics::count,
        ))
        .with_state(api)
}

/// Binds the listener (so a taken address is an error at start) and serves on the
/// runtime the server's tasks run on.
// The one place the HTTP adapter meets sockets: axum serves a tokio listener, outside the
// `Env` seam (the simulator drives the binary protocol only).
#[allow(clippy::disallowed_types)]
pub fn start(
    cx: Arc<Context>,
    stopping: Latch<()>,
    settings: HttpSettings,
) -> io::Result<HttpServer> {
    let listener = bind(settings.address)?;
    start_on(listener, cx, stopping, settings)
}

/// The HTTP listener bound at `address` (`cairn serve` binds it before the node boots).
#[allow(clippy::disallowed_types)]
pub fn bind(address: SocketAddr) -> io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves on `listener` (bound by [`bind`]).
#[allow(clippy::disallowed_types)]
pub fn start_on(
    listener: std::net::TcpListener,
    cx: Arc<Context>,
    stopping: Latch<()>,
    settings: HttpSettings,
) -> io::Result<HttpServer> {
    let local_addr = listener.local_addr()?;
    let key = settings.key.clone();
    let settings_slots = settings.max_concurrent_requests.max(1);
    let env = cx.env.clone();
    let api = Arc::new(Api {
        metrics: metrics::Metrics::new(cx.clone()),
        cx,
        settings,
        key,
        revoked: Revocations::default(),
        slots: cairn_engine::env::chan::Semaphore::new(settings_slots),
    });
    let how = listen::Listening {
        max_connections: api.settings.max_connections,
        per_address: api.settings.max_connections_per_address,
        tls: api
            .settings
            .tls
            .clone()
            .map(tokio_rustls::TlsAcceptor::from),
    };
    let app = router(api);
    tracing::info!(address = %local_addr, "listening for HTTP clients");
    let task = env.tasks.spawn(Box::pin(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(e) => {
                tracing::error!(error = %e, "the HTTP listener cannot run");
                return;
            }
        };
        listen::serve(listener, app, how, async move { stopping.wait().await }).await;
        tracing::info!("stopped serving HTTP");
    }));
    Ok(HttpServer { local_addr, task })
}

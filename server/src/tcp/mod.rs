//! Apache Iggy's 0.11 binary protocol over TCP: a leaf adapter over the command layer. It
//! owns what only this protocol has — frames, the login handshake and its evictions, session
//! numbers, the duplicate table, connection timeouts and TLS on the socket — and nothing a
//! command means.
//!
//! ```text
//! accept (≤ max_connections) ──► one task per connection (`connection`):
//!   [tcp.tls]: the TLS handshake within the handshake timeout
//!   header (256 bytes) ──► size outside the bounds: close (the framing is broken)
//!   body ──► answer::answer:
//!     frame::decode_request (a bad header is a status reply; the connection stays)
//!     Ping | Register (version gate, credentials or token → command::login) | Logout
//!     | gate: the bound login, its client and session numbers, command::session::check
//!       ──► duplicate table (rows marked dedup) ──► table decoder: body → Command
//!       ──► command::execute ──► encode: Reply → body (a poll's batches not copied)
//!   reply or eviction ──► next request
//! ```
//!
//! Architecture invariant: exactly one reply or eviction per request, in order (the 0.11
//! SDK is lockstep); nothing reaches the node before the header, the session, the body and
//! the permission are checked.

pub mod answer;
pub mod attach;
pub mod connection;
pub mod dedup;
pub mod encode;
pub mod frame;
pub mod inbox;

use crate::command::Context;
use cairn_engine::env::chan::Latch;
use cairn_engine::env::{race, Either, Listener as NetListener};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// The server's bounds (each one a limit on memory or time a client can hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// The largest frame a client may send (header included); above it the connection
    /// closes.
    pub max_frame_bytes: u32,
    pub max_connections: usize,
    /// Connections one IP address may hold (of `max_connections`).
    pub connections_per_address: usize,
    /// Connections not logged in at once (of `max_connections`): sockets opened and left
    /// idle, by any number of addresses, never take every slot.
    pub anonymous_connections: usize,
    /// Connections not logged in from one address (an IPv6 /64 is one).
    pub anonymous_per_address: usize,
    /// Consumer-group memberships one user's connections may hold (root's are not counted).
    pub memberships_per_user: usize,
    /// The most batch bytes one poll reply carries (`tcp.max_reply_bytes`): what a poll
    /// reserves of the reply budget before it is built.
    pub max_reply_bytes: u64,
    /// Bytes of request bodies being read over every connection, HTTP's included (the
    /// server's [`ByteBudget`](cairn_engine::env::chan::ByteBudget)); replies have a
    /// budget of the same size (`command::replies`).
    pub buffered_bytes: u64,
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
            connections_per_address: 1024,
            anonymous_connections: 1024,
            // A host opening this many connections at once (a bench, a pool) still logs
            // them all in; one address cannot take the whole anonymous share.
            anonymous_per_address: 256,
            // A sixteenth of the node's: no one tenant takes them all.
            memberships_per_user: cairn_engine::node::groups::MAX_MEMBERSHIPS / 16,
            max_reply_bytes: 64 * 1024 * 1024,
            buffered_bytes: 256 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_failed_logins: 5,
            failed_login_window: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// What every connection task shares.
pub struct Listener {
    pub cx: Arc<Context>,
    pub limits: ServerLimits,
    /// Set when the server stops accepting and connections should finish.
    pub stopping: Latch<()>,
    /// TLS on every connection: its task runs the handshake before the first request.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Live connection tasks.
    pub live: AtomicU64,
    /// The simulator's hook at the duplicate table (none in production).
    pub dedup_hit: Option<dedup::DedupHitHook>,
}

/// Accepts connections until the server stops; each gets its own task.
pub async fn accept(listener: Arc<Listener>, mut socket: Box<dyn NetListener>) {
    loop {
        match race(listener.stopping.wait(), socket.accept()).await {
            Either::Left(()) => break,
            Either::Right(Ok((stream, peer))) => {
                connection::start(listener.clone(), stream, peer);
            }
            Either::Right(Err(e)) => {
                tracing::debug!(error = %e, "accept failed");
                listener.cx.env.clock.sleep(Duration::from_millis(10)).await;
            }
        }
    }
    tracing::info!("stopped accepting connections");
}

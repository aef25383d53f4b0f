//! The HTTP listener's accept loop (hyper's HTTP/1 connections serving the axum router):
//! at most `max_connections` connections, a header that must arrive within
//! [`HEADER_READ_TIMEOUT`], a graceful stop that lets requests in flight finish (at most
//! [`DRAIN_TIMEOUT`]). TLS, when configured, wraps each accepted stream in its own task.

use crate::command::log_throttle::{Throttle, LOG_INTERVAL_NANOS};
use crate::command::registry::address_of;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// A request's headers must arrive within this long of the connection's last request.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stop waits for requests in flight.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection whose peer takes none of a response's bytes for this long is closed (the
/// response's bytes count in the server's budget until written).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A stream whose writes fail once one has made no progress for `limit`: a peer that
/// stops reading its response cannot hold the connection (and the response) forever.
struct WriteDeadline<S> {
    stream: S,
    limit: Duration,
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteDeadline<S> {
    fn new(stream: S, limit: Duration) -> Self {
        WriteDeadline {
            stream,
            limit,
            stalled: None,
        }
    }

    /// `poll` of a write: progress clears the deadline; no progress starts it, and past
    /// it the write fails.
    // The HTTP adapter's timers are tokio's (outside the `Env` seam).
    #[allow(clippy::disallowed_methods)]
    fn deadline<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        poll: std::task::Poll<std::io::Result<T>>,
    ) -> std::task::Poll<std::io::Result<T>> {
        use std::task::Poll;
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let limit = self.limit;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match std::future::Future::poll(sleep.as_mut(), cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the peer took no response bytes for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let poll = std::pin::Pin::new(&mut self.stream).poll_write(cx, buf);
        self.deadline(cx, poll)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let poll = std::pin::Pin::new(&mut self.stream).poll_flush(cx);
        self.deadline(cx, poll)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let poll = std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.deadline(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        // A TLS close to a peer that reads nothing gives up too.
        let poll = std::pin::Pin::new(&mut self.stream).poll_shutdown(cx);
        self.deadline(cx, poll)
    }
}

/// Live HTTP connections per address ([`address_of`]); no entry at zero.
type Addresses = Arc<std::sync::Mutex<std::collections::BTreeMap<std::net::IpAddr, usize>>>;

/// One connection counted under its address until dropped.
struct PerAddress {
    addresses: Addresses,
    address: std::net::IpAddr,
}

impl PerAddress {
    /// A count under `ip`'s address, unless it holds `cap` already.
    fn take(addresses: &Addresses, ip: std::net::IpAddr, cap: usize) -> Option<PerAddress> {
        let address = address_of(ip);
        let mut counts = addresses.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.entry(address).or_default();
        if *count >= cap {
            if *count == 0 {
                counts.remove(&address);
            }
            return None;
        }
        *count += 1;
        Some(PerAddress {
            addresses: addresses.clone(),
            address,
        })
    }
}

impl Drop for PerAddress {
    fn drop(&mut self) {
        let mut counts = self.addresses.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.address);
            }
        }
    }
}

/// How the loop runs: its bound on connections, and TLS if any.
pub struct Listening {
    pub max_connections: usize,
    /// Connections one address may hold (an IPv6 /64 is one).
    pub per_address: usize,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

// The HTTP adapter's sockets, timers and connection tasks: tokio's, outside the `Env` seam
// (the simulator drives the binary protocol only).
#[allow(clippy::disallowed_types, clippy::disallowed_methods)]
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    how: Listening,
    stopping: impl std::future::Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let connections = Arc::new(tokio::sync::Semaphore::new(how.max_connections.max(1)));
    let addresses = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let builder = Arc::new(builder);
    let mut stopping = std::pin::pin!(stopping);
    let started = std::time::Instant::now();
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut stopping => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::debug!(error = %e, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let Some(from_address) = PerAddress::take(&addresses, peer.ip(), how.per_address) else {
            static REFUSED_ADDRESS: Throttle = Throttle::new(LOG_INTERVAL_NANOS);
            let now = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            if let Some(left_out) = REFUSED_ADDRESS.admit(now) {
                tracing::warn!(%peer, limit = how.per_address, left_out, "http connection refused: too many connections from this address");
            }
            continue;
        };
        let Ok(slot) = connections.clone().try_acquire_owned() else {
            static REFUSED: Throttle = Throttle::new(LOG_INTERVAL_NANOS);
            let now = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            if let Some(left_out) = REFUSED.admit(now) {
                tracing::warn!(%peer, limit = how.max_connections, left_out, "http connection refused: too many connections");
            }
            continue;
        };
        let app = app.clone();
        let service =
            hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let mut request = request.map(axum::body::Body::new);
                request.extensions_mut().insert(ConnectInfo(peer));
                app.clone().oneshot(request)
            });
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let tls = how.tls.clone();
        tokio::spawn(async move {
            let served = match tls {
                None => {
                    let stream = WriteDeadline::new(stream, REPLY_TIMEOUT);
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream));
                    let stream = match handshake.await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "http tls handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "http tls handshake timed out");
                            return;
                        }
                    };
                    let stream = WriteDeadline::new(stream, REPLY_TIMEOUT);
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "http connection ended with an error");
            }
            drop((slot, from_address));
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("http connections drained"),
        () = tokio::time::sleep(DRAIN_TIMEOUT) => tracing::warn!("http connections still open after the drain timeout"),
    }
}

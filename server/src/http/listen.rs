//! The HTTP listener's accept loop (hyper's HTTP/1 connections serving the axum router):
//! at most `max_connections` connections, a header that must arrive within
//! [`HEADER_READ_TIMEOUT`], a graceful stop that lets requests in flight finish (at most
//! [`DRAIN_TIMEOUT`]). TLS, when configured, wraps each accepted stream in its own task.

use crate::command::log_throttle::{Throttle, LOG_INTERVAL_NANOS};
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

/// How the loop runs: its bound on connections, and TLS if any.
pub struct Listening {
    pub max_connections: usize,
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
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "http connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("http connections drained"),
        () = tokio::time::sleep(DRAIN_TIMEOUT) => tracing::warn!("http connections still open after the drain timeout"),
    }
}

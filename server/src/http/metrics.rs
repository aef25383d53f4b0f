//! `GET /metrics` in Prometheus' text format (0.0.4), with `prometheus-client`. The
//! command layer's counters are registered as they are; the node's and the process's
//! figures are read at scrape time by collectors, so a scrape never waits on an owner.
//!
//! Who may scrape is [`MetricsAccess`]: by default callers from a loopback address need no
//! token, others need a bearer token of a user who may read the server's state.

use super::auth::Authed;
use super::error::ApiError;
use super::{Api, MetricsAccess};
use crate::permissions::Action;
use crate::server::Shared;
use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;

pub fn routes() -> Router<Arc<Api>> {
    Router::new().route("/metrics", get(scrape))
}

/// One HTTP request as the listener answered it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    /// The route's template (`/streams/{stream_id}`), bounded by the route table.
    pub route: String,
    pub status: u16,
}

/// The registry one server's scrapes encode, and the HTTP listener's own counter.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub http_requests: Family<HttpLabels, Counter>,
}

impl Metrics {
    pub fn new(shared: Arc<Shared>) -> Metrics {
        let mut registry = Registry::default();
        let command = &shared.metrics;
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "cairn_messages_produced",
            "Messages appended, per topic (both protocols)",
            command.messages_produced.clone(),
        );
        registry.register(
            "cairn_bytes_produced",
            "Batch bytes appended, per topic",
            command.bytes_produced.clone(),
        );
        registry.register(
            "cairn_messages_consumed",
            "Messages returned by polls, per topic",
            command.messages_consumed.clone(),
        );
        registry.register(
            "cairn_bytes_consumed",
            "Batch bytes returned by polls, per topic",
            command.bytes_consumed.clone(),
        );
        registry.register(
            "cairn_commands",
            "Commands answered, by command and status (both protocols; logins excluded)",
            command.commands.clone(),
        );
        registry.register(
            "cairn_http_requests",
            "HTTP requests answered, by method, route and status",
            http_requests.clone(),
        );
        registry.register_collector(Box::new(NodeCollector { shared }));
        registry.register_collector(Box::new(ProcessCollector));
        Metrics {
            registry,
            http_requests,
        }
    }

    /// The text of one scrape.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

async fn scrape(
    State(api): State<Arc<Api>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Result<Response, ApiError> {
    let open = match api.settings.metrics {
        MetricsAccess::Open => true,
        MetricsAccess::OpenOnLoopback => peer.ip().is_loopback(),
        MetricsAccess::Authenticated => false,
    };
    if !open {
        let (mut parts, _) = request.into_parts();
        let authed = Authed::from_request_parts(&mut parts, &api).await?;
        crate::handlers::require(&authed.conn, Action::ReadServers)?;
    }
    let mut response = api.metrics.encode().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(response)
}

/// Counts every HTTP request by its route and status.
pub async fn count(State(api): State<Arc<Api>>, request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    let labels = HttpLabels {
        method,
        route,
        status: response.status().as_u16(),
    };
    api.metrics.http_requests.get_or_create(&labels).inc();
    response
}

/// One value of a metric that has no labels.
fn single(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    let metric_encoder = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(metric_encoder)
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> std::fmt::Result {
    single(encoder, name, help, &ConstCounter::new(value))
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> std::fmt::Result {
    single(encoder, name, help, &ConstGauge::new(value))
}

/// The node's figures, read at scrape time.
struct NodeCollector {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for NodeCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeCollector")
    }
}

impl prometheus_client::collector::Collector for NodeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let shared = &self.shared;
        let open = i64::try_from(shared.registry.len()).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "cairn_connections_open",
            "Binary-protocol connections open",
            open,
        )?;
        let stats = shared.node.stats();
        let counters: [(&str, &str, u64); 8] = [
            (
                "cairn_persists",
                "Partition persists that acknowledged persisted sends",
                stats.persists,
            ),
            (
                "cairn_persisted_acks",
                "Persisted sends acknowledged by those persists",
                stats.persisted_acks,
            ),
            (
                "cairn_sends_joined_running_persist",
                "Sends that arrived while their partition's persist ran and joined the next",
                stats.joined_running_persist,
            ),
            (
                "cairn_polls_during_persist",
                "Polls that arrived while their partition's persist ran",
                stats.polls_during_persist,
            ),
            (
                "cairn_inbox_full",
                "Requests that found an owner's inbox full and waited",
                stats.inbox_full,
            ),
            (
                "cairn_metadata_batches",
                "Metadata journal batches committed",
                stats.meta_batches,
            ),
            (
                "cairn_metadata_ops",
                "Metadata operations committed",
                stats.meta_ops,
            ),
            (
                "cairn_metadata_no_space",
                "Metadata batches refused for a full disk",
                stats.meta_no_space,
            ),
        ];
        for (name, help, value) in counters {
            counter(&mut encoder, name, help, value)?;
        }
        let stopped = i64::from(shared.node.failure().is_some());
        gauge(
            &mut encoder,
            "cairn_node_stopped",
            "1 when the node stopped (it refuses every request until restarted)",
            stopped,
        )?;
        let view = shared.node.view();
        gauge(
            &mut encoder,
            "cairn_streams",
            "Streams",
            i64::try_from(view.streams().len()).unwrap_or(i64::MAX),
        )?;
        gauge(
            &mut encoder,
            "cairn_partitions",
            "Partitions",
            i64::try_from(view.partitions().len()).unwrap_or(i64::MAX),
        )?;
        Ok(())
    }
}

/// The process's own figures (Linux `/proc/self`), independent of any simulator.
#[derive(Debug)]
struct ProcessCollector;

/// Clock ticks per second of `/proc/self/stat` (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;
const PAGE_BYTES: u64 = 4096;

// The process's own files, not the data directory: outside the `Env` seam by design (these
// figures describe this OS process, never a simulated one).
#[allow(clippy::disallowed_methods)]
impl prometheus_client::collector::Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(stat) = std::fs::read_to_string("/proc/self/stat").ok() else {
            return Ok(());
        };
        // The fields after the command name, which is in parentheses and may hold spaces.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            return Ok(());
        };
        let fields: Vec<&str> = after.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
        if let (Some(utime), Some(stime)) = (field(14), field(15)) {
            let seconds = (utime + stime) as f64 / TICKS_PER_SECOND;
            single(
                &mut encoder,
                "process_cpu_seconds",
                "User and system CPU time spent, in seconds",
                &ConstCounter::new(seconds),
            )?;
        }
        if let Some(threads) = field(20) {
            gauge(
                &mut encoder,
                "process_threads",
                "OS threads",
                threads as i64,
            )?;
        }
        if let Some(vsize) = field(23) {
            gauge(
                &mut encoder,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                vsize as i64,
            )?;
        }
        if let Some(rss) = field(24) {
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                (rss * PAGE_BYTES) as i64,
            )?;
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            gauge(
                &mut encoder,
                "process_open_fds",
                "Open file descriptors",
                fds.count() as i64,
            )?;
        }
        Ok(())
    }
}

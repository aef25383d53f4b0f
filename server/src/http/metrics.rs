//! `GET /metrics` in Prometheus' text format (0.0.4), with `prometheus-client`. The
//! command layer's counters are registered as they are; the node's and the process's
//! figures are read at scrape time by collectors, so a scrape never waits on an owner.
//!
//! Who may scrape is [`MetricsAccess`]: by default every caller needs a bearer token of a
//! user who may read the server's state (a loopback address proves nothing behind a reverse
//! proxy on the same host); an operator may open it to loopback callers or to everyone.

use super::auth::Authed;
use super::error::ApiError;
use super::{Api, MetricsAccess};
use crate::command::permissions::{self, Action};
use crate::command::Context;
use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use cairn_engine::metrics::{HistogramSnapshot, LabeledCounts};
use cairn_engine::node::NodeMetrics;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

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
    /// The node's figures for the scrape being encoded (the owners answer asynchronously;
    /// the encoder is synchronous). Held for one encoding at a time.
    node: Arc<Mutex<Option<NodeMetrics>>>,
}

impl Metrics {
    pub fn new(cx: Arc<Context>) -> Metrics {
        let mut registry = Registry::default();
        let data_dir = cx.node.root().to_path_buf();
        let command = &cx.metrics;
        let http_requests = Family::<HttpLabels, Counter>::default();
        let per_topic = [
            (
                "cairn_messages_produced",
                "Messages appended, per topic (both protocols)",
                &command.messages_produced,
            ),
            (
                "cairn_bytes_produced",
                "Batch bytes appended, per topic",
                &command.bytes_produced,
            ),
            (
                "cairn_messages_consumed",
                "Messages returned by polls, per topic",
                &command.messages_consumed,
            ),
            (
                "cairn_bytes_consumed",
                "Batch bytes returned by polls, per topic",
                &command.bytes_consumed,
            ),
        ];
        for (name, help, family) in per_topic {
            registry.register(name, help, family.clone());
        }
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
        let node = Arc::new(Mutex::new(None));
        registry.register_collector(Box::new(NodeCollector {
            cx: cx.clone(),
            node: node.clone(),
        }));
        registry.register_collector(Box::new(ProcessCollector { data_dir }));
        registry.register_collector(Box::new(ClusterCollector { cx: cx.clone() }));
        Metrics {
            registry,
            http_requests,
            node,
        }
    }

    /// The text of one scrape, with the node's figures as `node` reported them.
    pub fn encode(&self, node: NodeMetrics) -> String {
        // Two scrapes at once may both encode the later snapshot: both are current.
        *self.node.lock().unwrap_or_else(|p| p.into_inner()) = Some(node);
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
    if needs_token(api.settings.metrics, peer.ip()) {
        let (mut parts, _) = request.into_parts();
        let authed = Authed::from_request_parts(&mut parts, &api).await?;
        permissions::require(
            &api.cx,
            &authed.session,
            &api.cx.node.view(),
            Action::ReadServers,
        )?;
    }
    let node = api.cx.node.metrics().await;
    let mut response = api.metrics.encode(node).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(response)
}

/// Whether a scrape from `peer` must present a token (of a user who may read the server's
/// state).
pub fn needs_token(access: MetricsAccess, peer: std::net::IpAddr) -> bool {
    match access {
        MetricsAccess::Open => false,
        MetricsAccess::OpenOnLoopback => !peer.is_loopback(),
        MetricsAccess::Authenticated => true,
    }
}

/// Counts every HTTP request by its route and status.
pub async fn count(State(api): State<Arc<Api>>, request: Request, next: Next) -> Response {
    // Extension methods are any token a client likes: one label for all of them.
    let method = match request.method().as_str() {
        m @ ("GET" | "POST" | "PUT" | "DELETE" | "PATCH" | "HEAD" | "OPTIONS") => m,
        _ => "other",
    }
    .to_owned();
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
    cx: Arc<Context>,
    node: Arc<Mutex<Option<NodeMetrics>>>,
}

impl std::fmt::Debug for NodeCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeCollector")
    }
}

impl prometheus_client::collector::Collector for NodeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let cx = &self.cx;
        let open = i64::try_from(cx.registry.len()).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "cairn_connections_open",
            "Binary-protocol connections open",
            open,
        )?;
        counter(
            &mut encoder,
            "cairn_login_checks",
            "Credential checks run (password or token; both protocols and ChangePassword), each counted before it ran",
            cx.logins.begun(),
        )?;
        let buffered = i64::try_from(cx.buffers.held()).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "cairn_buffered_bytes",
            "Bytes of request bodies being read (limits.buffered_bytes bounds them)",
            buffered,
        )?;
        let unsent = i64::try_from(cx.replies.held()).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "cairn_unsent_reply_bytes",
            "Bytes of replies reserved or built and not yet written to their clients",
            unsent,
        )?;
        let stats = cx.node.stats();
        let counters: [(&str, &str, u64); 12] = [
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
                "cairn_concurrent_persists",
                "Times a shard persisted several partitions at once (each a job on the blocking pool)",
                stats.concurrent_persists,
            ),
            (
                "cairn_persist_jobs",
                "Persist jobs run for those (one partition's persist each)",
                stats.persist_jobs,
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
            (
                "cairn_metadata_adoptions",
                "Cluster states adopted whole from a leader's snapshot (a member too far behind its log)",
                stats.meta_adoptions,
            ),
            (
                "cairn_metadata_adopted_removals",
                "Partitions those adopted states removed or emptied (deleted or purged while this node was behind)",
                stats.meta_adopted_removals,
            ),
        ];
        for (name, help, value) in counters {
            counter(&mut encoder, name, help, value)?;
        }
        let stopped = i64::from(cx.node.failure().is_some());
        gauge(
            &mut encoder,
            "cairn_node_stopped",
            "1 when the node stopped (it refuses every request until restarted)",
            stopped,
        )?;
        let view = cx.node.view();
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
        let slot = self.node.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(node) = slot.as_ref() {
            encode_node(&mut encoder, node)?;
        }
        Ok(())
    }
}

/// A histogram from the engine's fixed buckets, its bounds scaled by `scale` (ns → s).
fn histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    h: &HistogramSnapshot,
    scale: f64,
) -> std::fmt::Result {
    let mut buckets: Vec<(f64, u64)> = h
        .bounds
        .iter()
        .zip(&h.counts)
        .map(|(bound, count)| (*bound as f64 * scale, *count))
        .collect();
    buckets.push((f64::INFINITY, h.counts.last().copied().unwrap_or(0)));
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    let mut metric = metric;
    metric.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
        h.sum as f64 * scale,
        h.count,
        &buckets,
        None,
    )
}

/// A labeled family of counts (every label present, zero included).
fn labeled(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    key: &'static str,
    counts: &LabeledCounts,
    kind: MetricType,
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (label, count) in counts.iter() {
        let labels = [(key, label)];
        let metric = family.encode_family(&labels)?;
        match kind {
            MetricType::Gauge => ConstGauge::new(count as i64).encode(metric)?,
            _ => ConstCounter::new(count).encode(metric)?,
        }
    }
    Ok(())
}

fn encode_node(encoder: &mut DescriptorEncoder, m: &NodeMetrics) -> std::fmt::Result {
    const NANOS: f64 = 1e-9;
    histogram(
        encoder,
        "cairn_persist_latency_seconds",
        "Group-commit persists of persisted sends, from start to durable",
        &m.persist_latency,
        NANOS,
    )?;
    histogram(
        encoder,
        "cairn_flush_latency_seconds",
        "Flushes an append's thresholds triggered",
        &m.flush_latency,
        NANOS,
    )?;
    histogram(
        encoder,
        "cairn_group_commit_sends",
        "Sends one persist acknowledged (group-commit size)",
        &m.persist_sends,
        1.0,
    )?;
    histogram(
        encoder,
        "cairn_group_commit_messages",
        "Messages one persist acknowledged",
        &m.persist_messages,
        1.0,
    )?;
    counter(
        encoder,
        "cairn_failed_persists",
        "Persists that failed (their sends were refused)",
        m.stats.failed_persists,
    )?;
    let mut syncs = encoder.encode_descriptor(
        "cairn_fsyncs",
        "Syncs the node issued, by what they synced",
        None,
        MetricType::Counter,
    )?;
    let kinds = [
        ("file", m.file_syncs),
        ("directory", m.dir_syncs),
        ("data_root", m.root_syncs),
    ];
    for (kind, count) in kinds {
        ConstCounter::new(count).encode(syncs.encode_family(&[("kind", kind)])?)?;
    }
    gauge(
        encoder,
        "cairn_journal_bytes",
        "Committed batch bytes held in memory, not yet flushed (the node's journal budget in use)",
        m.journal_bytes as i64,
    )?;
    let mut by_topic = encoder.encode_descriptor(
        "cairn_topic_journal_bytes",
        "Committed batch bytes held in memory, per topic",
        None,
        MetricType::Gauge,
    )?;
    for ((stream_id, topic_id), bytes) in &m.journal_bytes_by_topic {
        let labels = crate::command::metrics::TopicLabels {
            stream_id: *stream_id,
            topic_id: *topic_id,
        };
        ConstGauge::new(*bytes as i64).encode(by_topic.encode_family(&labels)?)?;
    }
    let mut placed = encoder.encode_descriptor(
        "cairn_shard_partitions",
        "Partitions placed on each shard of the node (each goes to the least-loaded one)",
        None,
        MetricType::Gauge,
    )?;
    for (shard, count) in m.shard_partitions.iter().enumerate() {
        let shard = shard.to_string();
        ConstGauge::new(i64::from(*count))
            .encode(placed.encode_family(&[("shard", shard.as_str())])?)?;
    }
    labeled(
        encoder,
        "cairn_partitions_fenced",
        "Partitions fenced now, by why",
        "reason",
        &m.fenced,
        MetricType::Gauge,
    )?;
    labeled(
        encoder,
        "cairn_boot_partition_outcomes",
        "What boot recovery decided per partition (one partition may count under several)",
        "outcome",
        &m.boot.partition_outcomes,
        MetricType::Gauge,
    )?;
    labeled(
        encoder,
        "cairn_boot_partition_actions",
        "Repairs boot recovery made, by kind",
        "action",
        &m.boot.partition_actions,
        MetricType::Gauge,
    )?;
    labeled(
        encoder,
        "cairn_boot_partition_fences",
        "Partitions boot fenced, by why",
        "reason",
        &m.boot.partition_fences,
        MetricType::Gauge,
    )?;
    labeled(
        encoder,
        "cairn_boot_metadata_actions",
        "Repairs boot made to the metadata plane",
        "action",
        &m.boot.meta_actions,
        MetricType::Gauge,
    )?;
    gauge(
        encoder,
        "cairn_boot_metadata_replayed_ops",
        "Metadata journal ops boot replayed",
        m.boot.meta_replayed_ops as i64,
    )?;
    labeled(
        encoder,
        "cairn_retention_deleted_segments",
        "Segments deleted, by retention's reason or an explicit request",
        "reason",
        &m.deleted_segments,
        MetricType::Counter,
    )?;
    labeled(
        encoder,
        "cairn_retention_deleted_messages",
        "Messages deleted with those segments",
        "reason",
        &m.deleted_messages,
        MetricType::Counter,
    )?;
    labeled(
        encoder,
        "cairn_retention_deleted_bytes",
        "Bytes deleted with those segments",
        "reason",
        &m.deleted_bytes,
        MetricType::Counter,
    )?;
    labeled(
        encoder,
        "cairn_group_rebalances",
        "Consumer-group assignment changes, by cause",
        "cause",
        &m.rebalances,
        MetricType::Counter,
    )?;
    Ok(())
}

/// The metadata group as this member's replica sees it, under `[cluster]` (nothing
/// otherwise).
struct ClusterCollector {
    cx: Arc<Context>,
}

impl std::fmt::Debug for ClusterCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterCollector")
    }
}

impl prometheus_client::collector::Collector for ClusterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(source) = self.cx.cluster.get() else {
            return Ok(());
        };
        let status = (source.status)(true);
        let leads = status.leader == Some(status.me);
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let applied = status.last_applied.unwrap_or(0);
        let gauges = [
            (
                "cairn_cluster_leader",
                "1 while this member's replica leads the metadata group",
                u64::from(leads),
            ),
            (
                "cairn_cluster_term",
                "The term this replica is in",
                status.term,
            ),
            (
                "cairn_cluster_voters",
                "Voters of the committed configuration, as this replica knows it",
                status.voters.len() as u64,
            ),
            (
                "cairn_cluster_learners",
                "Learners of the committed configuration",
                status.learners.len() as u64,
            ),
            (
                "cairn_cluster_last_applied",
                "The index of the last entry this replica applied",
                applied,
            ),
            (
                "cairn_cluster_partitions",
                "Partition groups this member runs a replica of",
                status.partitions.running,
            ),
            (
                "cairn_cluster_partitions_led",
                "Partition groups this member's replica leads (each group's preferred member leads it while it is up)",
                status.partitions.led,
            ),
            (
                "cairn_cluster_partitions_voting",
                "Partition groups in whose settled configuration this member's replica votes (below cairn_cluster_partitions while a member added back is refilled)",
                status.partitions.voting,
            ),
        ];
        for (name, help, value) in gauges {
            gauge(&mut encoder, name, help, as_i64(value))?;
        }
        if !leads {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "cairn_cluster_replica_lag",
            "On the leader: entries each other replica lacks of what the leader applied",
            None,
            MetricType::Gauge,
        )?;
        for (id, matched) in &status.matched {
            if *id == status.me {
                continue;
            }
            let lag = applied.saturating_sub(matched.unwrap_or(0));
            let labels = [("replica", cairn_cluster::types::show_id(*id))];
            ConstGauge::new(as_i64(lag)).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The process's own figures (Linux `/proc/self`), independent of any simulator: the same
/// reading `GetStats` reports.
struct ProcessCollector {
    data_dir: std::path::PathBuf,
}

impl std::fmt::Debug for ProcessCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessCollector")
    }
}

impl prometheus_client::collector::Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let f = crate::process::read(&self.data_dir);
        let cpu = ConstCounter::new(f.cpu_seconds);
        single(
            &mut encoder,
            "process_cpu_seconds",
            "User and system CPU time spent, in seconds",
            &cpu,
        )?;
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let gauges = [
            ("process_threads", "OS threads", u64::from(f.threads)),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                f.virtual_bytes,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                f.resident_bytes,
            ),
            ("process_open_fds", "Open file descriptors", f.open_fds),
            (
                "cairn_disk_free_bytes",
                "Free bytes on the data directory's file system",
                f.free_disk,
            ),
            (
                "cairn_disk_total_bytes",
                "Bytes of the data directory's file system",
                f.total_disk,
            ),
        ];
        for (name, help, value) in gauges {
            gauge(&mut encoder, name, help, as_i64(value))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_every_scrape_needs_a_token() {
        let loopback: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let v6_loopback: std::net::IpAddr = "::1".parse().unwrap();
        let lan: std::net::IpAddr = "10.1.2.3".parse().unwrap();
        let default = crate::config::HttpConfig::default().metrics_access;
        assert_eq!(default, MetricsAccess::Authenticated);
        assert!(needs_token(default, loopback));
        assert!(needs_token(default, lan));
        assert!(!needs_token(MetricsAccess::OpenOnLoopback, loopback));
        assert!(!needs_token(MetricsAccess::OpenOnLoopback, v6_loopback));
        assert!(needs_token(MetricsAccess::OpenOnLoopback, lan));
        assert!(!needs_token(MetricsAccess::Open, lan));
    }
}

//! `cairn-harness bench <kind>`: a bench client on the client module (`cairn_client`), with
//! iggy-bench's workload shapes (`docs/wire.md` §12):
//!
//! - `pinned-producer`: producer N has its own connection and stream `bench-stream-N`
//!   (topic `topic-1`, 1 partition unless `--partitions`) and sends to partition 0;
//!   latency per send call.
//! - `pinned-consumer`: consumer N polls `bench-stream-N` partition 0 (consumer id N, strategy
//!   Next, auto-commit) until it read `batches × messages-per-batch`. The streams come from a
//!   previous pinned-producer run; a bench that starts its own server fills them first.
//! - `balanced-producer`: `--streams` streams (default 1) of `--partitions` partitions
//!   (default 24); producers (spread over the streams) send with Balanced partitioning,
//!   which cairn resolves server-side.
//! - `balanced-consumer-group`: a group `cg-1` per stream; the members poll as the group
//!   with no partition (the server picks among the member's), auto-commit, until the group
//!   read the stream. Its own server is filled first by balanced producers.
//! - `end-to-end`: producers and a consumer group per stream at once; each payload carries
//!   its send time (monotonic ns from `env.clock`); latency measured at the consumer.
//!
//! Setup (delete the bench streams that exist unless `--reuse-streams`, create them) runs on
//! a separate admin connection. Without `--address` the bench boots a node and a server in
//! this process on a temporary directory (under `--data-dir` if given) with a random root
//! password. Progress goes to stderr every second; the report table to stdout, then (with
//! `--json`) the same as JSON; the last line is exactly
//! `bench <kind> mb_per_s=<x> msg_per_s=<x> p50_ms=<x> p99_ms=<x>`.

mod actors;
pub mod hostile;
mod report;

use actors::{run_phase, ConsumerPlan, Goal, Place, ProducerPlan, Work};
use cairn_client::cli::{create_topic_options, Durability, TopicSettings};
use cairn_client::{Client, ClientConfig};
use cairn_engine::env::Env;
use cairn_engine::node::{Node, PasswordCost};
use cairn_server::{Server, ServerLimits, ServerSettings};
use iggy_binary_protocol::{WireConsumer, WireIdentifier, WireOptions, WirePartitioning};
use report::PhaseResult;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// The topic of every bench stream, as iggy-bench names it.
pub const TOPIC: &str = "topic-1";
/// The consumer group of every bench stream.
pub const GROUP: &str = "cg-1";
/// Bench streams are `bench-stream-1`, `bench-stream-2`, …
pub const STREAM_PREFIX: &str = "bench-stream-";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    #[value(alias = "pp")]
    PinnedProducer,
    #[value(alias = "pc")]
    PinnedConsumer,
    #[value(alias = "bp")]
    BalancedProducer,
    #[value(alias = "bcg")]
    BalancedConsumerGroup,
    #[value(alias = "e2e")]
    EndToEnd,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::PinnedProducer => "pinned-producer",
            Kind::PinnedConsumer => "pinned-consumer",
            Kind::BalancedProducer => "balanced-producer",
            Kind::BalancedConsumerGroup => "balanced-consumer-group",
            Kind::EndToEnd => "end-to-end",
        }
    }
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The workload shape (iggy-bench's).
    #[arg(value_enum)]
    kind: Kind,
    /// Producers (default 8; a pinned producer per stream).
    #[arg(long)]
    producers: Option<u32>,
    /// Consumers (default 8; a pinned consumer per stream).
    #[arg(long)]
    consumers: Option<u32>,
    /// Streams (balanced and end-to-end kinds, default 1; pinned kinds: one per actor).
    #[arg(long)]
    streams: Option<u32>,
    /// Partitions per topic (pinned default 1, balanced 24, end-to-end one per consumer).
    #[arg(long)]
    partitions: Option<u32>,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 1000)]
    message_size: u32,
    /// Messages per send (and per poll).
    #[arg(long, default_value_t = 1000)]
    messages_per_batch: u32,
    /// Batches each producer sends (each consumer reads), default 1000.
    #[arg(long, conflicts_with = "total_bytes")]
    batches: Option<u64>,
    /// Payload bytes of the whole run instead of --batches (e.g. 1GB, 500MiB).
    #[arg(long, value_parser = report::parse_size)]
    total_bytes: Option<u64>,
    /// When a send is acknowledged: the topics are created with this `durability` option.
    #[arg(long, value_enum, default_value = "replicated")]
    durability: Durability,
    /// A running server (host:port); without it the bench starts one in this process.
    #[arg(long)]
    address: Option<String>,
    #[arg(long, default_value = "iggy")]
    username: String,
    /// Needed with --address.
    #[arg(long, env = "CAIRN_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Keep existing bench streams (and their messages) instead of deleting them first.
    #[arg(long)]
    reuse_streams: bool,
    /// Where the in-process server's temporary data directory goes (default: the system's
    /// temporary directory).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// The shape resolved from the arguments and the kind's defaults.
#[derive(Debug, Clone)]
struct Shape {
    kind: Kind,
    producers: u32,
    consumers: u32,
    streams: u32,
    partitions: u32,
    message_size: u32,
    messages_per_batch: u32,
    batches: u64,
    durability: Durability,
}

fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::Replicated => "replicated",
        Durability::Persisted => "persisted",
    }
}

fn shape(args: &BenchArgs) -> Result<Shape, String> {
    let kind = args.kind;
    let producers = args.producers.unwrap_or(8);
    let consumers = args.consumers.unwrap_or(8);
    let pinned_actors = match kind {
        Kind::PinnedProducer => Some(producers),
        Kind::PinnedConsumer => Some(consumers),
        _ => None,
    };
    let streams = match (pinned_actors, args.streams) {
        (Some(actors), Some(s)) if s != actors => {
            return Err(format!(
                "{} uses one stream per actor: --streams {s} differs from {actors}",
                kind.name()
            ))
        }
        (Some(actors), _) => actors,
        (None, s) => s.unwrap_or(1),
    };
    let partitions = args.partitions.unwrap_or(match kind {
        Kind::PinnedProducer | Kind::PinnedConsumer => 1,
        Kind::BalancedProducer | Kind::BalancedConsumerGroup => 24,
        Kind::EndToEnd => consumers.div_ceil(streams.max(1)).max(1),
    });
    let (message_size, messages_per_batch) = (args.message_size, args.messages_per_batch);
    if streams == 0 || partitions == 0 || message_size == 0 || messages_per_batch == 0 {
        return Err(
            "--streams, --partitions, --message-size and --messages-per-batch must be at least 1"
                .into(),
        );
    }
    if kind == Kind::EndToEnd && message_size < 8 {
        return Err(
            "end-to-end needs --message-size ≥ 8 (the payload carries its send time)".into(),
        );
    }
    if messages_per_batch > 100_000 {
        return Err("--messages-per-batch is at most 100000 (the server's batch limit)".into());
    }
    let batch_bytes = 256 + u64::from(messages_per_batch) * (48 + u64::from(message_size));
    if batch_bytes > 64 * 1024 * 1024 {
        return Err(format!(
            "a batch of {messages_per_batch} messages of {message_size} bytes is {batch_bytes} bytes, above the 64 MiB limit"
        ));
    }
    let producing = matches!(
        kind,
        Kind::PinnedProducer | Kind::BalancedProducer | Kind::EndToEnd
    );
    let consuming = matches!(
        kind,
        Kind::PinnedConsumer | Kind::BalancedConsumerGroup | Kind::EndToEnd
    );
    if (producing && producers < streams) || (consuming && consumers < streams) {
        return Err(format!(
            "{} needs at least one {} per stream ({streams} streams)",
            kind.name(),
            if producing && producers < streams {
                "producer"
            } else {
                "consumer"
            }
        ));
    }
    // The actors whose batches count: producers, or consumers (each reads a producer's worth).
    let actors = u64::from(if producing { producers } else { consumers });
    let batches = match (args.batches, args.total_bytes) {
        (Some(b), _) => b,
        (None, Some(total)) => {
            (total / (u64::from(message_size) * u64::from(messages_per_batch) * actors)).max(1)
        }
        (None, None) => 1000,
    };
    if batches == 0 {
        return Err("--batches must be at least 1".into());
    }
    Ok(Shape {
        kind,
        producers,
        consumers,
        streams,
        partitions,
        message_size,
        messages_per_batch,
        batches,
        durability: args.durability,
    })
}

/// Runs the bench: exit 0 with the report, 1 when the bench failed or its counts disagree
/// with the server's, 2 on bad arguments.
pub fn bench(args: BenchArgs) -> ExitCode {
    let shape = match shape(&args) {
        Ok(shape) => shape,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let env = match cairn_engine::env::real::env_with_workers(workers) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("bench: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match cairn_engine::env::real::block_on(run(env, args, shape)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::from(1)
        }
    }
}

/// The in-process server and its data directory (removed when dropped).
struct OwnServer {
    server: Server,
    _dir: tempfile::TempDir,
}

async fn start_server(env: &Env, args: &BenchArgs, password: &str) -> Result<OwnServer, String> {
    let mut builder = tempfile::Builder::new();
    builder.prefix("cairn-bench-");
    let dir = match &args.data_dir {
        Some(parent) => {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            builder.tempdir_in(parent)
        }
        None => builder.tempdir(),
    }
    .map_err(|e| format!("cannot create a temporary data directory: {e}"))?;
    // What `cairn serve` runs with by default, with a random root password.
    let mut settings = cairn_server::config::ServerConfig::default().node_settings();
    settings.root_username = args.username.clone();
    settings.root_password = password.to_string();
    settings.password_cost = PasswordCost::default();
    let booted = Node::start(env, dir.path(), settings)
        .await
        .map_err(|e| format!("boot of {} refused: {e}", dir.path().display()))?;
    let server = Server::start(
        booted.node,
        ServerSettings {
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
            limits: ServerLimits::default(),
            topic_defaults: cairn_server::TopicDefaults::default(),
            tls: None,
            hooks: Default::default(),
        },
    )
    .await
    .map_err(|e| format!("cannot listen: {e}"))?;
    Ok(OwnServer { server, _dir: dir })
}

async fn run(env: Env, args: BenchArgs, shape: Shape) -> Result<(), String> {
    let (address, password, own) = match &args.address {
        Some(text) => {
            let address = text
                .to_socket_addrs()
                .map_err(|e| format!("--address {text}: {e}"))?
                .next()
                .ok_or_else(|| format!("--address {text} resolves to nothing"))?;
            let password = args
                .password
                .clone()
                .ok_or("--address needs --password (or CAIRN_PASSWORD)")?;
            (address, password, None)
        }
        None => {
            let password = cairn_server::serve::generated_password(&env);
            let own = start_server(&env, &args, &password).await?;
            (own.server.local_addr(), password, Some(own))
        }
    };
    let config = ClientConfig::new(address).with_credentials(&args.username, &password);
    let result = bench_on(&env, &args, &shape, &config, own.is_some()).await;
    if let Some(own) = own {
        if let Err(e) = own.server.shutdown().await {
            eprintln!("bench: the in-process server's shutdown failed: {e}");
        }
    }
    let (phases, summary) = result?;
    let measured = phases.last().expect("every kind measures a phase");
    print!("{}", report::table(&phases));
    if let Some(path) = &args.json {
        let document = json!({
            "kind": shape.kind.name(),
            "shape": {
                "producers": shape.producers,
                "consumers": shape.consumers,
                "streams": shape.streams,
                "partitions": shape.partitions,
                "message_size": shape.message_size,
                "messages_per_batch": shape.messages_per_batch,
                "batches": shape.batches,
                "durability": durability_name(shape.durability),
            },
            "server": summary,
            "phases": phases.iter().map(PhaseResult::json).collect::<Vec<_>>(),
            "measured": measured.json(),
        });
        let text = serde_json::to_string_pretty(&document).expect("JSON of plain values");
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    println!("{}", report::last_line(shape.kind.name(), measured));
    Ok(())
}

/// A bench stream as the setup found or made it.
#[derive(Debug, Clone)]
struct BenchStream {
    place: Place,
    /// Messages it held before this run.
    messages_before: u64,
}

fn stream_name(index: u32) -> String {
    format!("{STREAM_PREFIX}{index}")
}

async fn admin_client(env: &Env, config: &ClientConfig) -> Result<Client, String> {
    Client::connect(env.clone(), config.clone())
        .await
        .map_err(|e| format!("admin connection to {}: {e}", config.address))
}

/// Messages per bench stream, by name (GetStreams).
async fn stream_messages(admin: &mut Client) -> Result<BTreeMap<String, (u32, u64)>, String> {
    let streams = admin
        .get_streams()
        .await
        .map_err(|e| format!("get streams: {e}"))?;
    Ok(streams
        .into_iter()
        .map(|s| (s.name.as_str().to_string(), (s.id, s.messages_count)))
        .collect())
}

/// Producers' setup (iggy-bench's `init_streams`): delete the bench streams that exist
/// (unless reusing them), create stream `bench-stream-N` with topic `topic-1`.
async fn init_streams(
    admin: &mut Client,
    shape: &Shape,
    count: u32,
    reuse: bool,
) -> Result<Vec<BenchStream>, String> {
    let options: WireOptions = create_topic_options(
        shape.durability,
        Durability::Replicated,
        None,
        &TopicSettings::default(),
    )
    .map_err(|error| error.to_string())?;
    let existing = stream_messages(admin).await?;
    let mut streams = Vec::new();
    for index in 1..=count {
        let name = stream_name(index);
        let found = existing.get(&name).copied();
        if let (Some((id, messages)), true) = (found, reuse) {
            let stream = WireIdentifier::numeric(id);
            let topic = match admin
                .get_topic(&stream, &named(TOPIC)?)
                .await
                .map_err(|e| format!("get topic {TOPIC} of {name}: {e}"))?
            {
                Some(topic) => topic.topic.id,
                None => {
                    admin
                        .create_topic(&stream, TOPIC, shape.partitions, options.clone())
                        .await
                        .map_err(|e| format!("create topic {TOPIC} in {name}: {e}"))?
                        .topic
                        .id
                }
            };
            streams.push(BenchStream {
                place: Place {
                    stream_name: name,
                    stream,
                    topic: WireIdentifier::numeric(topic),
                },
                messages_before: messages,
            });
            continue;
        }
        if let Some((id, _)) = found {
            admin
                .delete_stream(&WireIdentifier::numeric(id))
                .await
                .map_err(|e| format!("delete stream {name}: {e}"))?;
        }
        let created = admin
            .create_stream(&name)
            .await
            .map_err(|e| format!("create stream {name}: {e}"))?;
        let stream = WireIdentifier::numeric(created.id);
        let topic = admin
            .create_topic(&stream, TOPIC, shape.partitions, options.clone())
            .await
            .map_err(|e| format!("create topic {TOPIC} in {name}: {e}"))?;
        streams.push(BenchStream {
            place: Place {
                stream_name: name,
                stream,
                topic: WireIdentifier::numeric(topic.topic.id),
            },
            messages_before: 0,
        });
    }
    Ok(streams)
}

/// Consumers' setup (iggy-bench's `check_streams`): every stream exists and holds at least
/// what its consumers will read.
async fn check_streams(
    admin: &mut Client,
    count: u32,
    needed: impl Fn(u32) -> u64,
) -> Result<Vec<BenchStream>, String> {
    let existing = stream_messages(admin).await?;
    let mut streams = Vec::new();
    for index in 1..=count {
        let name = stream_name(index);
        let Some(&(id, messages)) = existing.get(&name) else {
            return Err(format!(
                "stream {name} does not exist: run a producer bench with the same shape first"
            ));
        };
        if messages < needed(index) {
            return Err(format!(
                "stream {name} holds {messages} messages, the consumers read {}: run a producer bench with the same shape first",
                needed(index)
            ));
        }
        let stream = WireIdentifier::numeric(id);
        let topic = admin
            .get_topic(&stream, &named(TOPIC)?)
            .await
            .map_err(|e| format!("get topic {TOPIC} of {name}: {e}"))?
            .ok_or_else(|| format!("stream {name} has no topic {TOPIC}"))?;
        streams.push(BenchStream {
            place: Place {
                stream_name: name,
                stream,
                topic: WireIdentifier::numeric(topic.topic.id),
            },
            messages_before: messages,
        });
    }
    Ok(streams)
}

/// A fresh group `cg-1` on every stream (an old one is deleted: its offsets would skip
/// messages); returns its identifier per stream.
async fn fresh_groups(
    admin: &mut Client,
    streams: &[BenchStream],
) -> Result<Vec<WireIdentifier>, String> {
    let mut groups = Vec::new();
    for s in streams {
        let (stream, topic) = (&s.place.stream, &s.place.topic);
        let group = named(GROUP)?;
        let found = admin
            .get_consumer_group(stream, topic, &group)
            .await
            .map_err(|e| format!("get group {GROUP} of {}: {e}", s.place.stream_name))?;
        if found.is_some() {
            admin
                .delete_consumer_group(stream, topic, &group)
                .await
                .map_err(|e| format!("delete group {GROUP} of {}: {e}", s.place.stream_name))?;
        }
        let created = admin
            .create_consumer_group(stream, topic, GROUP)
            .await
            .map_err(|e| format!("create group {GROUP} in {}: {e}", s.place.stream_name))?;
        groups.push(created.map_or(group, |g| WireIdentifier::numeric(g.group.id)));
    }
    Ok(groups)
}

fn named(name: &str) -> Result<WireIdentifier, String> {
    WireIdentifier::named(name).map_err(|e| format!("name {name}: {e}"))
}

fn pinned_producers(shape: &Shape, streams: &[BenchStream]) -> Vec<Work> {
    streams
        .iter()
        .map(|s| {
            Work::Produce(ProducerPlan {
                place: s.place.clone(),
                partitioning: WirePartitioning::PartitionId(0),
                batches: shape.batches,
                messages_per_batch: shape.messages_per_batch,
                message_size: shape.message_size,
                stamp: false,
            })
        })
        .collect()
}

/// `count` producers spread over the streams (producer i on stream i mod streams), each
/// with Balanced partitioning (PartitionId 0 when the topic has one partition).
fn balanced_producers(
    shape: &Shape,
    streams: &[BenchStream],
    count: u32,
    stamp: bool,
) -> Vec<Work> {
    (0..count as usize)
        .map(|i| {
            Work::Produce(ProducerPlan {
                place: streams[i % streams.len()].place.clone(),
                partitioning: if shape.partitions == 1 {
                    WirePartitioning::PartitionId(0)
                } else {
                    WirePartitioning::Balanced
                },
                batches: shape.batches,
                messages_per_batch: shape.messages_per_batch,
                message_size: shape.message_size,
                stamp,
            })
        })
        .collect()
}

/// How many of `count` actors spread round-robin land on stream `index` (1-based).
fn actors_on(count: u32, streams: u32, index: u32) -> u64 {
    u64::from((0..count).filter(|i| i % streams + 1 == index).count() as u32)
}

/// Group consumers: consumer i joins `cg-1` of stream i mod streams; the group stops once
/// it read `goal(stream)`.
fn group_consumers(
    shape: &Shape,
    streams: &[BenchStream],
    groups: &[WireIdentifier],
    goal: impl Fn(u32) -> u64,
    stamped: bool,
) -> Vec<Work> {
    let counters: Vec<Arc<AtomicU64>> = streams.iter().map(|_| Arc::default()).collect();
    (0..shape.consumers as usize)
        .map(|i| {
            let s = i % streams.len();
            Work::Consume(ConsumerPlan {
                place: streams[s].place.clone(),
                consumer: WireConsumer::consumer_group(groups[s].clone()),
                partition: None,
                join: Some(groups[s].clone()),
                messages_per_batch: shape.messages_per_batch,
                goal: Goal::Shared(counters[s].clone(), goal(s as u32 + 1)),
                stamped,
            })
        })
        .collect()
}

/// The phases of one kind, the last one the measured one, and what the server said.
async fn bench_on(
    env: &Env,
    args: &BenchArgs,
    shape: &Shape,
    config: &ClientConfig,
    own_server: bool,
) -> Result<(Vec<PhaseResult>, serde_json::Value), String> {
    let mut admin = admin_client(env, config).await?;
    let kind = shape.kind;
    let per_actor = shape.batches * u64::from(shape.messages_per_batch);
    eprintln!(
        "bench {}: {} producers, {} consumers, {} streams × {} partitions, {} batches × {} messages × {} B, durability {}, server {} ({})",
        kind.name(),
        shape.producers,
        shape.consumers,
        shape.streams,
        shape.partitions,
        shape.batches,
        shape.messages_per_batch,
        shape.message_size,
        durability_name(shape.durability),
        if own_server { "in-process" } else { "external" },
        config.address
    );
    let mut phases = Vec::new();
    // (streams, messages this run added to each) to check against the server afterwards.
    let mut produced: Option<(Vec<BenchStream>, Vec<u64>)> = None;
    let mut consumed_goal = None;
    match kind {
        Kind::PinnedProducer | Kind::BalancedProducer => {
            let streams =
                init_streams(&mut admin, shape, shape.streams, args.reuse_streams).await?;
            let works = if kind == Kind::PinnedProducer {
                pinned_producers(shape, &streams)
            } else {
                balanced_producers(shape, &streams, shape.producers, false)
            };
            let run = run_phase(env, kind.name(), config, works).await?;
            phases.push(run.producers.expect("producers ran"));
            let added = (1..=shape.streams)
                .map(|i| actors_on(shape.producers, shape.streams, i) * per_actor)
                .collect();
            produced = Some((streams, added));
        }
        Kind::PinnedConsumer | Kind::BalancedConsumerGroup => {
            let pinned = kind == Kind::PinnedConsumer;
            let needed = |index: u32| actors_on(shape.consumers, shape.streams, index) * per_actor;
            let streams = if own_server {
                // Fill the streams first, as a producer run into the same server would.
                let streams = init_streams(&mut admin, shape, shape.streams, false).await?;
                let (label, works) = if pinned {
                    ("fill: pinned-producer", pinned_producers(shape, &streams))
                } else {
                    (
                        "fill: balanced-producer",
                        balanced_producers(shape, &streams, shape.consumers, false),
                    )
                };
                let run = run_phase(env, label, config, works).await?;
                phases.push(run.producers.expect("producers ran"));
                check_streams(&mut admin, shape.streams, needed).await?
            } else {
                check_streams(&mut admin, shape.streams, needed).await?
            };
            let works: Vec<Work> = if pinned {
                for (i, s) in streams.iter().enumerate() {
                    // A previous run's committed offset would skip messages; none stored is fine.
                    let _ = admin
                        .delete_consumer_offset(
                            &WireConsumer::consumer(WireIdentifier::numeric(i as u32 + 1)),
                            &s.place.stream,
                            &s.place.topic,
                            Some(0),
                        )
                        .await;
                }
                streams
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        Work::Consume(ConsumerPlan {
                            place: s.place.clone(),
                            consumer: WireConsumer::consumer(WireIdentifier::numeric(i as u32 + 1)),
                            partition: Some(0),
                            join: None,
                            messages_per_batch: shape.messages_per_batch,
                            goal: Goal::Own(per_actor),
                            stamped: false,
                        })
                    })
                    .collect()
            } else {
                let groups = fresh_groups(&mut admin, &streams).await?;
                group_consumers(shape, &streams, &groups, needed, false)
            };
            let run = run_phase(env, kind.name(), config, works).await?;
            phases.push(run.consumers.expect("consumers ran"));
            consumed_goal = Some((1..=shape.streams).map(needed).sum::<u64>());
        }
        Kind::EndToEnd => {
            let streams =
                init_streams(&mut admin, shape, shape.streams, args.reuse_streams).await?;
            let groups = fresh_groups(&mut admin, &streams).await?;
            let added: Vec<u64> = (1..=shape.streams)
                .map(|i| actors_on(shape.producers, shape.streams, i) * per_actor)
                .collect();
            // The group reads what this run adds (a reused stream's old messages too: the
            // group is new and starts at the beginning).
            let goals: Vec<u64> = streams
                .iter()
                .zip(&added)
                .map(|(s, a)| s.messages_before + a)
                .collect();
            let mut works = balanced_producers(shape, &streams, shape.producers, true);
            works.extend(group_consumers(
                shape,
                &streams,
                &groups,
                |i| goals[i as usize - 1],
                true,
            ));
            let run = run_phase(env, kind.name(), config, works).await?;
            let mut producers = run.producers.expect("producers ran");
            producers.name = "end-to-end: producers".into();
            phases.push(producers);
            phases.push(run.consumers.expect("consumers ran"));
            consumed_goal = Some(goals.iter().sum());
            produced = Some((streams, added));
        }
    }
    // What the server holds must be what was sent; what was read, what was asked.
    let held = stream_messages(&mut admin).await?;
    let mut stream_total = 0;
    if let Some((streams, added)) = &produced {
        for (s, added) in streams.iter().zip(added) {
            let now = held.get(&s.place.stream_name).map_or(0, |&(_, m)| m);
            stream_total += now;
            if now != s.messages_before + added {
                return Err(format!(
                    "stream {} holds {now} messages; it held {} and this run sent {added}",
                    s.place.stream_name, s.messages_before
                ));
            }
        }
    }
    if let Some(goal) = consumed_goal {
        let measured = phases.last().expect("a consumer phase");
        if measured.messages < goal {
            return Err(format!(
                "the consumers read {} messages of {goal}",
                measured.messages
            ));
        }
    }
    // As iggy-bench, the statistics after the run (their reply must decode).
    let stats = admin
        .get_stats()
        .await
        .map_err(|e| format!("get stats: {e}"))?;
    admin.close().await;
    Ok((
        phases,
        json!({
            "address": config.address.to_string(),
            "in_process": own_server,
            "stats_messages_count": stats.messages_count,
            "stats_streams_count": stats.streams_count,
            "bench_streams_messages": stream_total,
            "consumed_goal": consumed_goal,
        }),
    ))
}

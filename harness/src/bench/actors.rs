//! The bench's actors: each one a task with its own [`Client`] (its own connection), as
//! iggy-bench's. An actor connects (and joins its group) before the phase starts, waits for
//! the start latch, runs its loop, and hands back its counts and latency histogram.

use super::report::{histogram, LatencyOf, PhaseResult};
use cairn_client::{Client, ClientConfig};
use cairn_engine::env::chan::{oneshot, Latch, Pending};
use cairn_engine::env::{race, Either, Env, TaskHandle};
use cairn_engine::format::BatchBuilder;
use hdrhistogram::Histogram;
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::{WireConsumer, WireIdentifier, WirePartitioning, WirePollingStrategy};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A consumer that sees no new message for this long gives up (the bench fails).
pub const STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Where an actor sends or polls: ids resolved by the setup.
#[derive(Debug, Clone)]
pub struct Place {
    pub stream_name: String,
    pub stream: WireIdentifier,
    pub topic: WireIdentifier,
}

/// A producer: `batches` sends of `messages_per_batch` messages of `message_size` bytes.
#[derive(Debug, Clone)]
pub struct ProducerPlan {
    pub place: Place,
    pub partitioning: WirePartitioning,
    pub batches: u64,
    pub messages_per_batch: u32,
    pub message_size: u32,
    /// Each message's first 8 payload bytes carry the monotonic ns (`env.clock`) at which its
    /// batch was built for sending (end-to-end);
    /// otherwise one batch is built once and sent again and again (as iggy-bench does).
    pub stamp: bool,
}

/// When a consumer stops.
#[derive(Debug, Clone)]
pub enum Goal {
    /// After reading this many messages itself.
    Own(u64),
    /// When the members of its group together read this many (the counter they share).
    Shared(Arc<AtomicU64>, u64),
}

/// A consumer: polls with strategy Next and auto-commit, `messages_per_batch` per poll.
#[derive(Debug, Clone)]
pub struct ConsumerPlan {
    pub place: Place,
    pub consumer: WireConsumer,
    /// `None` for a group member (the server picks among its partitions).
    pub partition: Option<u32>,
    /// Joined before the phase starts.
    pub join: Option<WireIdentifier>,
    pub messages_per_batch: u32,
    pub goal: Goal,
    /// Payloads carry send timestamps: measure end-to-end latency per message.
    pub stamped: bool,
}

#[derive(Debug, Clone)]
pub enum Work {
    Produce(ProducerPlan),
    Consume(ConsumerPlan),
}

/// Messages so far, for the progress line.
#[derive(Debug, Default)]
pub struct Progress {
    pub produced: AtomicU64,
    pub consumed: AtomicU64,
    pub produced_bytes: AtomicU64,
    pub consumed_bytes: AtomicU64,
}

/// What one actor did.
pub struct Outcome {
    pub producer: bool,
    pub messages: u64,
    pub bytes: u64,
    pub finished_nanos: u64,
    pub latency_of: LatencyOf,
    pub histogram: Histogram<u64>,
}

/// What a phase's actors did, merged per role (producers first).
pub struct PhaseRun {
    pub producers: Option<PhaseResult>,
    pub consumers: Option<PhaseResult>,
}

/// Runs one phase: every actor connects, then all start at once; the phase lasts from the
/// start to the last actor's end. Progress goes to stderr every second.
pub async fn run_phase(
    env: &Env,
    label: &str,
    config: &ClientConfig,
    works: Vec<Work>,
) -> Result<PhaseRun, String> {
    let progress = Arc::new(Progress::default());
    let start = Latch::<()>::default();
    let failure = Latch::<String>::default();
    let mut handles: Vec<Box<dyn TaskHandle>> = Vec::new();
    let mut readies: Vec<Pending<()>> = Vec::new();
    let mut dones: Vec<Pending<Result<Outcome, String>>> = Vec::new();
    for (index, work) in works.into_iter().enumerate() {
        let (ready, ready_pending) = oneshot::<()>();
        let (done, done_pending) = oneshot::<Result<Outcome, String>>();
        let (env2, config, progress, start, failure) = (
            env.clone(),
            config.clone(),
            progress.clone(),
            start.clone(),
            failure.clone(),
        );
        handles.push(env.tasks.spawn(Box::pin(async move {
            let result = actor(&env2, config, work, &progress, ready, &start).await;
            let result = result.map_err(|e| format!("actor {index}: {e}"));
            if let Err(e) = &result {
                failure.set(e.clone());
            }
            done.send(result);
        })));
        readies.push(ready_pending);
        dones.push(done_pending);
    }
    let cancel_all = |handles: &[Box<dyn TaskHandle>]| handles.iter().for_each(|h| h.cancel());
    // Everyone connected (a dropped `ready` means the actor failed before it).
    for (ready, done) in readies.into_iter().zip(dones.iter_mut()) {
        if ready.await.is_err() {
            let why = match done.await {
                Ok(Err(e)) => e,
                _ => "an actor stopped before it was ready".to_string(),
            };
            cancel_all(&handles);
            return Err(why);
        }
    }
    let started = env.clock.monotonic_nanos();
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = env.tasks.spawn(Box::pin(show_progress(
        env.clone(),
        label.to_string(),
        progress.clone(),
        started,
        stop.clone(),
    )));
    start.set(());
    let all = async {
        let mut outcomes = Vec::new();
        for done in dones {
            match done.await {
                Ok(Ok(outcome)) => outcomes.push(outcome),
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err("an actor vanished".to_string()),
            }
        }
        Ok(outcomes)
    };
    let outcomes = match race(failure.wait(), all).await {
        Either::Left(e) | Either::Right(Err(e)) => Err(e),
        Either::Right(Ok(outcomes)) => Ok(outcomes),
    };
    stop.store(true, Ordering::SeqCst);
    ticker.cancel();
    let outcomes = match outcomes {
        Ok(o) => o,
        Err(e) => {
            cancel_all(&handles);
            return Err(e);
        }
    };
    Ok(PhaseRun {
        producers: merge(label, started, outcomes.iter().filter(|o| o.producer)),
        consumers: merge(label, started, outcomes.iter().filter(|o| !o.producer)),
    })
}

fn merge<'a>(
    label: &str,
    started: u64,
    outcomes: impl Iterator<Item = &'a Outcome>,
) -> Option<PhaseResult> {
    let mut merged: Option<PhaseResult> = None;
    let mut finished = started;
    for o in outcomes {
        finished = finished.max(o.finished_nanos);
        let m = merged.get_or_insert_with(|| PhaseResult {
            name: label.to_string(),
            actors: 0,
            messages: 0,
            bytes: 0,
            seconds: 0.0,
            latency_of: o.latency_of,
            histogram: histogram(),
        });
        m.actors += 1;
        m.messages += o.messages;
        m.bytes += o.bytes;
        m.histogram
            .add(&o.histogram)
            .expect("histograms share their bounds");
    }
    if let Some(m) = &mut merged {
        m.seconds = (finished - started) as f64 / 1e9;
    }
    merged
}

async fn show_progress(
    env: Env,
    label: String,
    progress: Arc<Progress>,
    started: u64,
    stop: Arc<AtomicBool>,
) {
    loop {
        env.clock.sleep(Duration::from_secs(1)).await;
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let seconds = (env.clock.monotonic_nanos() - started) as f64 / 1e9;
        let mut line = format!("bench {label}: {seconds:.0} s");
        for (what, messages, bytes) in [
            ("produced", &progress.produced, &progress.produced_bytes),
            ("consumed", &progress.consumed, &progress.consumed_bytes),
        ] {
            let (messages, bytes) = (
                messages.load(Ordering::Relaxed),
                bytes.load(Ordering::Relaxed),
            );
            if messages > 0 {
                line.push_str(&format!(
                    ", {what} {messages} messages ({:.2} MB/s so far)",
                    bytes as f64 / 1e6 / seconds.max(1e-9)
                ));
            }
        }
        eprintln!("{line}");
    }
}

/// One actor: connect (and join), report ready, wait for the start, work, close.
async fn actor(
    env: &Env,
    config: ClientConfig,
    work: Work,
    progress: &Progress,
    ready: cairn_engine::env::chan::Reply<()>,
    start: &Latch<()>,
) -> Result<Outcome, String> {
    let mut client = Client::connect(env.clone(), config)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    if let Work::Consume(plan) = &work {
        if let Some(group) = &plan.join {
            client
                .join_consumer_group(&plan.place.stream, &plan.place.topic, group)
                .await
                .map_err(|e| format!("join group {group:?} on {}: {e}", plan.place.stream_name))?;
        }
    }
    ready.send(());
    start.wait().await;
    let outcome = match work {
        Work::Produce(plan) => produce(env, &mut client, &plan, progress).await,
        Work::Consume(plan) => consume(env, &mut client, &plan, progress).await,
    };
    client.close().await;
    outcome
}

/// A random nonzero message id.
fn message_id(env: &Env) -> u128 {
    let id = (u128::from(env.entropy.next_u64()) << 64) | u128::from(env.entropy.next_u64());
    id.max(1)
}

fn build_batch(env: &Env, plan: &ProducerPlan, payload: &mut [u8]) -> bytes::BytesMut {
    if plan.stamp {
        payload[..8].copy_from_slice(&env.clock.monotonic_nanos().to_le_bytes());
    }
    let mut builder = BatchBuilder::new(env.clock.wall_micros());
    for _ in 0..plan.messages_per_batch {
        builder.push(message_id(env), 0, payload, &[]);
    }
    builder.build()
}

async fn produce(
    env: &Env,
    client: &mut Client,
    plan: &ProducerPlan,
    progress: &Progress,
) -> Result<Outcome, String> {
    let mut payload: Vec<u8> = (0..plan.message_size)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let reused = (!plan.stamp).then(|| build_batch(env, plan, &mut payload));
    let mut latencies = histogram();
    let per_batch = u64::from(plan.messages_per_batch);
    let per_batch_bytes = per_batch * u64::from(plan.message_size);
    for sent in 0..plan.batches {
        let fresh;
        let batch: &[u8] = match &reused {
            Some(batch) => batch,
            None => {
                fresh = build_batch(env, plan, &mut payload);
                &fresh
            }
        };
        let before = env.clock.monotonic_nanos();
        client
            .send_messages(
                &plan.place.stream,
                &plan.place.topic,
                &plan.partitioning,
                batch,
            )
            .await
            .map_err(|e| {
                format!(
                    "send to {} after {sent} batches: {e}",
                    plan.place.stream_name
                )
            })?;
        latencies.saturating_record(env.clock.monotonic_nanos() - before);
        progress.produced.fetch_add(per_batch, Ordering::Relaxed);
        progress
            .produced_bytes
            .fetch_add(per_batch_bytes, Ordering::Relaxed);
    }
    Ok(Outcome {
        producer: true,
        messages: plan.batches * per_batch,
        bytes: plan.batches * per_batch_bytes,
        finished_nanos: env.clock.monotonic_nanos(),
        latency_of: LatencyOf::Send,
        histogram: latencies,
    })
}

async fn consume(
    env: &Env,
    client: &mut Client,
    plan: &ConsumerPlan,
    progress: &Progress,
) -> Result<Outcome, String> {
    let mut latencies = histogram();
    let (mut read, mut bytes) = (0u64, 0u64);
    let mut empty_polls = 0u32;
    // (the count last seen, when it changed): a stall watchdog.
    let mut last_change = (u64::MAX, env.clock.monotonic_nanos());
    let stall_nanos = u64::try_from(STALL_TIMEOUT.as_nanos()).expect("small");
    loop {
        let (seen, goal) = match &plan.goal {
            Goal::Own(goal) => (read, *goal),
            Goal::Shared(counter, goal) => (counter.load(Ordering::SeqCst), *goal),
        };
        if seen >= goal {
            break;
        }
        let now = env.clock.monotonic_nanos();
        if seen != last_change.0 {
            last_change = (seen, now);
        } else if now - last_change.1 > stall_nanos {
            return Err(format!(
                "no new message on {} for {} s: read {seen} of {goal}",
                plan.place.stream_name,
                STALL_TIMEOUT.as_secs()
            ));
        }
        let count = match &plan.goal {
            Goal::Own(goal) => u64::from(plan.messages_per_batch).min(goal - read) as u32,
            Goal::Shared(..) => plan.messages_per_batch,
        };
        let request = PollMessagesRequest {
            consumer: plan.consumer.clone(),
            stream_id: plan.place.stream.clone(),
            topic_id: plan.place.topic.clone(),
            partition_id: plan.partition,
            strategy: WirePollingStrategy::next(),
            count,
            auto_commit: true,
        };
        let before = env.clock.monotonic_nanos();
        let polled = client
            .poll_messages(&request)
            .await
            .map_err(|e| format!("poll {} after {read} messages: {e}", plan.place.stream_name))?;
        let after = env.clock.monotonic_nanos();
        let n = u64::from(polled.count);
        if n == 0 {
            // No data yet (or no partition assigned): retry at once a few times, then
            // back off a millisecond at a time.
            empty_polls += 1;
            if empty_polls > 8 {
                env.clock.sleep(Duration::from_millis(1)).await;
            }
            continue;
        }
        empty_polls = 0;
        let (mut counted, mut payload_bytes) = (0u64, 0u64);
        for message in polled.messages() {
            let message = message.map_err(|e| format!("undecodable poll reply: {e}"))?;
            if plan.stamped {
                let stamp = message
                    .payload
                    .get(..8)
                    .ok_or("a message shorter than its timestamp")?;
                let sent = u64::from_le_bytes(stamp.try_into().expect("8 bytes"));
                latencies.saturating_record(after.saturating_sub(sent));
            }
            counted += 1;
            payload_bytes += message.payload.len() as u64;
        }
        if counted != n {
            return Err(format!(
                "a poll reply says {n} messages and holds {counted}"
            ));
        }
        if !plan.stamped {
            latencies.saturating_record(after - before);
        }
        bytes += payload_bytes;
        read += n;
        if let Goal::Shared(counter, _) = &plan.goal {
            counter.fetch_add(n, Ordering::SeqCst);
        }
        progress.consumed.fetch_add(n, Ordering::Relaxed);
        progress
            .consumed_bytes
            .fetch_add(payload_bytes, Ordering::Relaxed);
    }
    Ok(Outcome {
        producer: false,
        messages: read,
        bytes,
        finished_nanos: env.clock.monotonic_nanos(),
        latency_of: if plan.stamped {
            LatencyOf::EndToEnd
        } else {
            LatencyOf::Poll
        },
        histogram: latencies,
    })
}

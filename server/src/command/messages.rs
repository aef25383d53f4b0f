//! Sending and polling messages, and what an acknowledgement promises. This file is the one
//! place that decides it, for every adapter:
//!
//! | ack | answered when | what it promises | binary protocol | HTTP |
//! |---|---|---|---|---|
//! | [`Ack::Awaited`], topic `replicated` | the partition's owner appended the batch (offsets assigned, visible to polls) | the messages survive a process crash once flushed; a power loss may take the unflushed tail | the send's reply | `201`, `Iggy-Durability: replicated` |
//! | [`Ack::Awaited`], topic `persisted` | the persist that covers the batch synced the log, the index and the superblock record | the messages survive any crash or power loss (`docs/design.md`, "Durability") | the send's reply | `201`, `Iggy-Durability: persisted` |
//! | [`Ack::Dispatched`] (HTTP `?ack=none`) | the owner's bounded inbox took the batch | nothing: the batch may still be refused (it is then logged) | — | `202`, `Iggy-Durability: none` |
//!
//! [`Landed::durable`] carries the node's own word for which policy the write completed
//! under: an adapter never infers it from the topic's settings. Dispatched bytes not yet
//! appended are bounded by [`DispatchBudget`]: past it a dispatch waits.

use super::status::Status;
use super::{Call, Reply, Resolved};
use bytes::{Bytes, BytesMut};
use cairn_engine::env::chan::{Permit, Semaphore};
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::{WireIdentifier, WirePartitioning};

/// The HTTP header naming what a send's answer promises (`replicated`, `persisted` or
/// `none`).
pub const DURABILITY_HEADER: &str = "iggy-durability";

/// What a send waits for before it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// The write completed under the topic's durability policy.
    Awaited,
    /// The partition's owner queued it (HTTP's `ack=none`).
    Dispatched,
}

/// One batch to send: where to, and the batch in the stored format (verified by the
/// partition's owner at admission).
#[derive(Debug)]
pub struct Send {
    pub stream: WireIdentifier,
    pub topic: WireIdentifier,
    pub partitioning: WirePartitioning,
    /// Messages the batch holds (checked against its header by the adapter that built it).
    pub count: u32,
    pub batch: BytesMut,
    pub ack: Ack,
}

/// Where a send went: its topic's ids and partition, and, when awaited, where it landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendOutcome {
    pub stream_id: u32,
    pub topic_id: u32,
    pub partition: u32,
    pub landed: Option<Landed>,
}

/// Where an awaited send landed, once the node answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landed {
    pub partition: u32,
    pub base_offset: u64,
    /// On stable storage when acknowledged (the topic is `persisted`).
    pub durable: bool,
}

impl SendOutcome {
    /// What the answer promises, as the `Iggy-Durability` header says it.
    pub fn durability(&self) -> &'static str {
        match self.landed {
            None => "none",
            Some(Landed { durable: true, .. }) => "persisted",
            Some(Landed { durable: false, .. }) => "replicated",
        }
    }
}

/// A poll's answer: the partition, its current offset, and the stored batches as they are
/// (the first and last possibly sliced by the partition), never copied here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polled {
    /// Iggy's `NO_ASSIGNED_PARTITION` sentinel (`u32::MAX - 1`) for a group member that
    /// holds no partition.
    pub partition_id: u32,
    pub current_offset: u64,
    pub count: u32,
    pub batches: Vec<Bytes>,
}

/// Iggy's partition id for a group member that holds no partition.
pub const NO_ASSIGNED_PARTITION: u32 = u32::MAX - 1;

impl Polled {
    /// The binary protocol's 16 bytes before the batches.
    pub fn head(&self) -> [u8; 16] {
        let mut head = [0u8; 16];
        head[..4].copy_from_slice(&self.partition_id.to_le_bytes());
        head[4..12].copy_from_slice(&self.current_offset.to_le_bytes());
        head[12..16].copy_from_slice(&self.count.to_le_bytes());
        head
    }

    pub fn batch_bytes(&self) -> usize {
        self.batches.iter().map(Bytes::len).sum()
    }
}

fn topic(call: &Call<'_>) -> (u32, u32) {
    match call.target {
        Resolved::Topic(s, t) => (s, t),
        other => unreachable!("a message command names a topic, not {other:?}"),
    }
}

/// Sends one batch to the resolved topic; waits as `send.ack` says.
pub async fn send(call: &Call<'_>, send: Send) -> Result<Reply, Status> {
    let (s, t) = topic(call);
    // By id: a rename between the permission check and the node's lookup cannot move the
    // batch to a topic the check did not cover.
    let (stream, topic) = (WireIdentifier::numeric(s), WireIdentifier::numeric(t));
    let bytes = send.batch.len();
    let node = &call.session().node;
    let cx = call.cx;
    let landed = match send.ack {
        Ack::Awaited => match cx.hooks.send {
            // The simulator's canary answers in the shard's place.
            Some(hook) => hook(
                node,
                &*cx.env.tasks,
                &stream,
                &topic,
                &send.partitioning,
                send.batch,
            )?,
            None => {
                let sent = node
                    .send(&stream, &topic, &send.partitioning, send.batch)
                    .await?;
                Landed {
                    partition: sent.partition,
                    base_offset: sent.ack.base_offset,
                    durable: sent.ack.durable,
                }
            }
        },
        Ack::Dispatched => {
            // The bytes dispatched and not yet appended are bounded: past the budget a
            // dispatch waits (back-pressure), never grows the queues' memory.
            let held = cx.dispatch_budget.reserve(bytes).await;
            let (partition, dispatched) = node
                .dispatch(&stream, &topic, &send.partitioning, send.batch)
                .await?;
            // A clone shares the counters.
            let metrics = cx.metrics.clone();
            let count = send.count;
            cx.env.tasks.spawn(Box::pin(async move {
                match dispatched.outcome().await {
                    Ok(_) => metrics.produced(s, t, count, bytes),
                    Err(e) => tracing::info!(error = %e, "a dispatched send was refused"),
                }
                drop(held);
            }));
            return Ok(Reply::Sent(SendOutcome {
                stream_id: s,
                topic_id: t,
                partition,
                landed: None,
            }));
        }
    };
    cx.metrics.produced(s, t, send.count, bytes);
    Ok(Reply::Sent(SendOutcome {
        stream_id: s,
        topic_id: t,
        partition: landed.partition,
        landed: Some(landed),
    }))
}

/// Polls the resolved topic.
pub async fn poll(call: &Call<'_>, mut request: PollMessagesRequest) -> Result<Reply, Status> {
    let (s, t) = topic(call);
    request.stream_id = WireIdentifier::numeric(s);
    request.topic_id = WireIdentifier::numeric(t);
    let polled = call
        .session()
        .node
        .poll_within(&request, call.caller.reply_room)
        .await?;
    let polled = match polled {
        Some(p) => Polled {
            partition_id: u32::try_from(p.partition_id).expect("partition ids are u32"),
            current_offset: p.current_offset.unwrap_or(0),
            count: p.message_count,
            batches: p.batches,
        },
        // A group member that holds no partition: an empty poll with Iggy's sentinel.
        None => Polled {
            partition_id: NO_ASSIGNED_PARTITION,
            current_offset: 0,
            count: 0,
            batches: Vec::new(),
        },
    };
    call.cx
        .metrics
        .consumed(s, t, polled.count, polled.batch_bytes());
    Ok(Reply::Polled(polled))
}

/// Bytes of `ack=none` sends in flight at most, in [`DISPATCH_UNIT`]s (256 MiB).
pub const DISPATCH_BUDGET_UNITS: usize = 256;

/// The bytes one unit of [`DispatchBudget`] stands for.
pub const DISPATCH_UNIT: usize = 1024 * 1024;

/// A bound on the bytes of sends dispatched and not yet appended, in MiB units. Units are
/// taken one caller at a time (a gate), so two callers each holding part of what they need
/// never wait on each other forever.
pub struct DispatchBudget {
    gate: Semaphore,
    units: Semaphore,
    total: usize,
}

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
        assert_eq!(held.len(), wanted);
        held
    }

    pub fn available(&self) -> usize {
        self.units.available()
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

    #[test]
    fn the_durability_header_says_what_the_node_said() {
        let outcome = |landed| SendOutcome {
            stream_id: 0,
            topic_id: 0,
            partition: 0,
            landed,
        };
        let landed = |durable| {
            Some(Landed {
                partition: 0,
                base_offset: 0,
                durable,
            })
        };
        assert_eq!(outcome(None).durability(), "none");
        assert_eq!(outcome(landed(true)).durability(), "persisted");
        assert_eq!(outcome(landed(false)).durability(), "replicated");
    }
}

//! Raft traffic of every partition group between two members, batched: one exchange
//! carries the requests of many groups (heartbeats, appends, votes) to a peer member, so
//! the number of exchanges follows the load, not the number of partitions.
//!
//! | who | does |
//! |---|---|
//! | a group's Raft client (`net::GroupClient`) | queues its request for the peer member (at most [`MAX_QUEUED`]; a full queue is a request not sent) and waits for its answer within its own limit |
//! | the member's driver for that peer (a task) | once one of the peer's [`CONNECTIONS`] is free, takes what is queued (at most [`MAX_BATCH`] requests and [`BATCH_BYTES`], always one), drops those whose caller gave up, and sends the rest as one `Rpc::Parts` on that connection (a task each, so up to [`CONNECTIONS`] exchanges are in flight) |
//! | the peer (`crate::net`) | answers each request of the batch concurrently, in the batch's order |
//! | the exchange | hands each caller its answer; a failed exchange fails every request in it (not run, when nothing was written) |
//!
//! While every connection is busy, requests gather in the queue, so under load the
//! batches grow and the exchanges do not: a member whose thousands of groups all beat at
//! once sends a handful of exchanges per heartbeat instead of one per group. Snapshots,
//! forwarded writes, identifications and fetches, which may take long to answer, do not
//! go this way (`net::PartNetworks::call`): nothing slow holds a batch.
//!
//! Requests of one group may be answered out of the order they were queued in (two
//! batches in flight at once, or two requests in one batch); Raft needs no order from its
//! network, and openraft sends a peer one append at a time.

use super::net::GroupName;
use crate::net::{unsent, PeerClient};
use crate::rt::in_env;
use cairn_engine::env::{race, Either, Env};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Mutex, OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

/// Connections a member keeps to each peer for each of its two batchers (appends that
/// carry entries; heartbeats, votes and hand-overs: `net::PartNetworks`).
pub const CONNECTIONS: usize = 4;
/// The most requests queued for one peer; more are refused (not sent: openraft retries).
/// A group has at most a few requests to a peer in flight, so this is well above what
/// 10,000 groups queue at once.
pub const MAX_QUEUED: usize = 65_536;
/// The most requests one exchange carries.
pub const MAX_BATCH: usize = 4_096;
/// Past this many request bytes an exchange takes no further request (so it carries at
/// most this plus one request: an append is at most 32 MiB, far below the frame limit).
pub const BATCH_BYTES: usize = 8 << 20;

/// How many exchanges and requests went to peers, over the member's life (a test reads
/// them: batching is what keeps the first far below the second).
#[derive(Debug, Default)]
pub struct BatchCounts {
    pub exchanges: AtomicU64,
    pub requests: AtomicU64,
}

/// A queued request: its group, its encoded envelope, how long its caller waits, and
/// where its answer goes.
struct Queued {
    group: GroupName,
    body: Vec<u8>,
    limit: Duration,
    answer: oneshot::Sender<io::Result<Vec<u8>>>,
}

/// A queue to one peer member; its driver ends once every clone of it is dropped.
#[derive(Clone)]
pub struct Batcher {
    queue: mpsc::Sender<Queued>,
    env: Env,
}

impl Batcher {
    /// A batcher whose driver (spawned on `env`) sends through `clients`, connections to
    /// the peer member, and counts into `counts`.
    pub fn start(env: &Env, clients: Vec<PeerClient>, counts: Arc<BatchCounts>) -> Batcher {
        assert!(!clients.is_empty(), "a batcher needs a connection");
        let (queue, queued) = mpsc::channel(MAX_QUEUED);
        let clients = clients
            .into_iter()
            .map(|c| Arc::new(Mutex::new(c)))
            .collect();
        let driver = drive(env.clone(), queued, clients, counts);
        drop(env.tasks.spawn(Box::pin(in_env(env, driver))));
        Batcher {
            queue,
            env: env.clone(),
        }
    }

    /// Whether its driver ended (the node's tasks were stopped): a new batcher is due.
    pub fn stopped(&self) -> bool {
        self.queue.is_closed()
    }

    /// Asks `body` (an encoded `PartEnvelope`) of group `group` of the peer: the encoded
    /// reply, within `limit`.
    pub async fn call(
        &self,
        group: GroupName,
        body: Vec<u8>,
        limit: Duration,
    ) -> io::Result<Vec<u8>> {
        let (answer, answered) = oneshot::channel();
        let queued = Queued {
            group,
            body,
            limit,
            answer,
        };
        if let Err(refused) = self.queue.try_send(queued) {
            let why = match refused {
                mpsc::error::TrySendError::Full(_) => {
                    format!("{MAX_QUEUED} requests to the peer are queued")
                }
                mpsc::error::TrySendError::Closed(_) => "the peer's batcher stopped".to_string(),
            };
            return Err(unsent(io::Error::new(io::ErrorKind::TimedOut, why)));
        }
        match race(answered, self.env.clock.sleep(limit)).await {
            Either::Left(Ok(reply)) => reply,
            Either::Left(Err(_)) => Err(io::Error::other("the exchange carrying it was dropped")),
            Either::Right(()) => Err(io::Error::new(io::ErrorKind::TimedOut, "timed out")),
        }
    }
}

/// Sends what is queued, one batch per free connection, until the queue's senders are
/// all dropped.
async fn drive(
    env: Env,
    mut queued: mpsc::Receiver<Queued>,
    clients: Vec<Arc<Mutex<PeerClient>>>,
    counts: Arc<BatchCounts>,
) {
    let free = Arc::new(Semaphore::new(clients.len()));
    loop {
        let Ok(permit) = free.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = queued.recv().await else {
            return;
        };
        let batch = gather(first, &mut queued);
        if batch.is_empty() {
            continue;
        }
        // Each exchange holds a permit and a connection, and frees the connection first
        // (`Lease`): a free permit means a free connection.
        let free = clients.iter().find_map(|c| c.clone().try_lock_owned().ok());
        let client = match free {
            Some(client) => client,
            None => clients[0].clone().lock_owned().await,
        };
        counts.exchanges.fetch_add(1, Relaxed);
        counts.requests.fetch_add(batch.len() as u64, Relaxed);
        let exchange = exchange(
            Lease {
                client,
                _permit: permit,
            },
            batch,
        );
        drop(env.tasks.spawn(Box::pin(in_env(&env, exchange))));
    }
}

/// `first` and what else is queued now, within [`MAX_BATCH`] and [`BATCH_BYTES`], less
/// the requests whose callers gave up.
fn gather(first: Queued, queued: &mut mpsc::Receiver<Queued>) -> Vec<Queued> {
    let mut bytes = first.body.len();
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH && bytes < BATCH_BYTES {
        let Ok(next) = queued.try_recv() else { break };
        bytes += next.body.len();
        batch.push(next);
    }
    batch.retain(|q| !q.answer.is_closed());
    batch
}

/// A connection and the permit that counts it, freed in that order (fields drop in
/// declaration order, also when an exchange is cancelled).
struct Lease {
    client: OwnedMutexGuard<PeerClient>,
    _permit: OwnedSemaphorePermit,
}

/// One exchange of `batch` on `lease`'s connection; answers every request in it.
async fn exchange(mut lease: Lease, batch: Vec<Queued>) {
    let limit = batch
        .iter()
        .map(|q| q.limit)
        .max()
        .expect("a batch is not empty");
    let (requests, answers): (Vec<(GroupName, Vec<u8>)>, Vec<_>) = batch
        .into_iter()
        .map(|q| ((q.group, q.body), q.answer))
        .unzip();
    let count = requests.len();
    let replies = lease.client.call_parts(requests, limit).await;
    drop(lease);
    match replies {
        Ok(replies) if replies.len() == count => {
            for (answer, reply) in answers.into_iter().zip(replies) {
                let _ = answer.send(Ok(reply));
            }
        }
        Ok(replies) => {
            let why = format!("the peer answered {} of {count} requests", replies.len());
            for answer in answers {
                let _ = answer.send(Err(io::Error::new(io::ErrorKind::InvalidData, why.clone())));
            }
        }
        Err(e) => {
            for answer in answers {
                let _ = answer.send(Err(crate::net::copy(&e)));
            }
        }
    }
}

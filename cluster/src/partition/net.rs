//! Partition groups' traffic between members, on the metadata group's peer connections.
//!
//! A partition group's request is the metadata network's `Rpc::Part`, addressed to a member
//! (any incarnation: the connection's handshake proved both members), carrying the group's
//! name and a [`PartEnvelope`] as MessagePack: the group's replicas at both ends and a
//! [`PartRpc`], answered by a [`PartReply`]. Each replica of a group has its own Raft id,
//! the member and the incarnation of the group's WAL (drawn when it is made, as the
//! metadata replica's is): a member whose WAL of a group was lost comes back as another
//! replica of that group, which requests for the old one do not reach and which neither
//! votes nor counts in it. A member speaks only for its own replicas (the envelope's `from`
//! is checked against the connection's member).
//!
//! Every group of a member shares a few connections to each peer member, so the number of
//! connections does not grow with the number of partitions: its Raft requests but
//! snapshots go batched with the other groups' (`super::batch`; appends carrying entries
//! apart from heartbeats and votes); snapshots take one of
//! [`POOL`] connections (a group always the same one), forwarded writes, identifications
//! and fetches one of [`FORWARD_POOL`] in turn.

use super::batch::{BatchCounts, Batcher, CONNECTIONS};
use super::{PartCommand, PartConfig, PartOutcome, PartSnapshot, PartSnapshotMeta};
use crate::net::{PeerClient, PeerNetwork};
use crate::types::{member_of, show_id, MemberId, NodeId, Peer};
use cairn_engine::env::BoxFuture;
use cairn_engine::partition::PartitionIdentity;
use openraft::entry::RaftEntry;
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connections each member keeps to each peer for its partition groups' snapshots.
pub const POOL: usize = 4;
/// Connections each member keeps to each peer for forwarded sends and identifications
/// (apart from the Raft traffic: a forwarded send holds its connection until it commits,
/// which may need Raft traffic between the same two members).
pub const FORWARD_POOL: usize = 8;
/// The most entry bytes one AppendEntries carries (one entry more always goes: a batch is
/// at most 64 MiB, far below the frame limit); the rest follow in the next request.
pub const APPEND_BUDGET: usize = 32 << 20;

/// A partition group's name between members: stream, topic, partition and nonce.
pub type GroupName = (u32, u32, u32, u64);

pub fn group_name(p: &PartitionIdentity) -> GroupName {
    (p.stream_id, p.topic_id, p.partition_id, p.nonce)
}

pub fn identity_of(g: GroupName) -> PartitionIdentity {
    PartitionIdentity {
        stream_id: g.0,
        topic_id: g.1,
        partition_id: g.2,
        nonce: g.3,
    }
}

type Vote = openraft::alias::VoteOf<PartConfig>;

/// A group's request between two of its replicas.
#[derive(Serialize, Deserialize)]
pub struct PartEnvelope {
    pub from: NodeId,
    pub to: NodeId,
    pub rpc: PartRpc,
}

#[derive(Serialize, Deserialize)]
pub enum PartRpc {
    /// Which replica of the group do you run? (`to` names the member only.)
    Identify,
    Append(AppendEntriesRequest<PartConfig>),
    Vote(VoteRequest<PartConfig>),
    PreVote(VoteRequest<PartConfig>),
    Snapshot {
        vote: Vote,
        meta: PartSnapshotMeta,
        #[serde(with = "crate::types::bytes_serde")]
        data: Vec<u8>,
    },
    TransferLeader(TransferLeaderRequest<PartConfig>),
    /// A member's send or offset write, forwarded to the member it believes leads the
    /// group.
    Send(PartCommand),
    /// The stored batches from offset `from`, at most `max_bytes` (a replica behind the
    /// leader's WAL refills itself: `refill`).
    Fetch {
        from: u64,
        max_bytes: u64,
    },
    /// Of the metadata group's leader: which replicas to make the group of (`placed`);
    /// `fresh`: asked again of every placed member, not the set answered before (the
    /// asker's replica voted, so it holds a vote of an earlier making). `from` is the
    /// asking replica, `to` names the member only.
    Making {
        fresh: bool,
    },
    /// A send or offset write of a member the group is not placed on, for whichever
    /// replica leads (`placed`). `to` names the member only.
    Forwarded(PartCommand),
    /// The group's configuration as the addressed member's replica has applied it (a
    /// member whose replica the group no longer needs asks before it removes it:
    /// `placed`). `to` names the member only.
    Configured,
    /// A read of a member that keeps no copy of the partition (`reads`). `to` names the
    /// member only.
    Read(super::groups::WireRead),
}

/// The metadata leader's answer to [`PartRpc::Making`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Making {
    /// Make it of these replicas; only the replica `maker` initializes it (the first to
    /// ask), the others wait for its first entry. Every asker is told the same set while
    /// the leader keeps it (`MAKING_KEPT`, within its term).
    Of {
        replicas: BTreeMap<NodeId, Peer>,
        maker: NodeId,
    },
    /// A replica holds some of the group already: it exists, and its leader adds the
    /// asker's replica (`members`).
    Made,
    /// Not now (not the leader, a placed member that did not answer): said in words.
    NotNow(String),
}

/// Why a forwarded send was not committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SendRefused {
    /// The member does not lead the group; the leader it knows, if any.
    NotLeader(Option<NodeId>),
    /// Anything else (the group stopped, the send's fate unknown): said in words.
    Failed(String),
}

#[derive(Serialize, Deserialize)]
pub enum PartReply {
    Append(AppendEntriesResponse<PartConfig>),
    Vote(VoteResponse<PartConfig>),
    Snapshot(SnapshotResponse<PartConfig>),
    TransferLeader(TransferLeaderResponse<PartConfig>),
    /// What a forwarded write did, and its log index (the forwarder waits until it
    /// applied that far, so its own copy shows the write when the client hears of it).
    Sent(Result<(PartOutcome, u64), SendRefused>),
    /// The replica of the group this member runs, and whether it holds any of the group
    /// (a configuration or a log): a group is made only where no member's replica does;
    /// and whether the member is leaving (a graceful stop: it takes no group back).
    Identity {
        id: NodeId,
        made: bool,
        #[serde(default)]
        leaving: bool,
    },
    /// Stored batches, back to back, and where the replica's log ends (a
    /// `Fetch`'s answer).
    Batches {
        #[serde(with = "crate::types::bytes_serde")]
        bytes: Vec<u8>,
        next: u64,
    },
    /// The answer to [`PartRpc::Making`].
    Making(Making),
    /// The answer to [`PartRpc::Configured`]: the voters and learners of the configuration
    /// the member's replica runs under, and whether it has applied it (committed) and it
    /// is not joint.
    Configured {
        voters: Vec<NodeId>,
        learners: Vec<NodeId>,
        settled: bool,
        /// The log id of that configuration's entry.
        at: Option<PartLogId>,
    },
    /// The answer to [`PartRpc::Read`].
    Read(super::groups::ReadReply),
    /// The group's Raft node refused the request.
    Refused(String),
    /// This member runs no group of that name (not made yet here, or deleted).
    NoGroup,
    /// This member runs another replica of the group than the one addressed (its WAL was
    /// made again): openraft takes it as unreachable.
    Elsewhere(NodeId),
}

/// A partition group's log id.
pub type PartLogId = openraft::alias::LogIdOf<PartConfig>;

/// A member's partition groups, as its metadata replica reaches them.
pub trait PartServe: Send + Sync {
    /// Answers a peer's request for group `group`.
    fn serve(&self, group: GroupName, envelope: PartEnvelope) -> BoxFuture<'_, PartReply>;
    /// Hands the leadership of every group this member leads to another replica, waiting
    /// at most `limit` (a graceful shutdown).
    fn hand_over(&self, limit: Duration) -> BoxFuture<'_, ()>;
    /// Answers peer member `from`'s beat (`quiet`): encoded, empty for none.
    fn beat(&self, from: MemberId, body: &[u8]) -> Vec<u8>;
    /// The groups this member runs a replica of, and how many of them it leads.
    fn partitions_led(&self) -> crate::group::PartitionsLed;
}

pub fn encode<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    rmp_serde::to_vec(value).map_err(io::Error::other)
}

pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> io::Result<T> {
    rmp_serde::from_slice(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The pooled connections to one peer.
struct Pool {
    slots: Vec<tokio::sync::Mutex<PeerClient>>,
    /// The next slot a forwarded request takes (round robin).
    turn: std::sync::atomic::AtomicUsize,
}

/// A peer member and the replication address it was reached at (a member re-added at
/// another address gets pools of its own).
type PoolKey = (MemberId, String, bool);

/// A peer member, the address it was reached at, and whether the batcher is for appends
/// that carry entries.
type BatcherKey = (MemberId, String, bool);

/// Every group's network on this member: the pools and batchers, by peer.
#[derive(Clone)]
pub struct PartNetworks {
    peers: PeerNetwork,
    pools: Arc<Mutex<BTreeMap<PoolKey, Arc<Pool>>>>,
    batchers: Arc<Mutex<BTreeMap<BatcherKey, Batcher>>>,
    counts: Arc<BatchCounts>,
    /// Groups a peer answered [`PartReply::Elsewhere`] for since the last
    /// [`PartNetworks::take_elsewhere`]: the group's configuration names a replica its
    /// member no longer runs (at most one entry per group this member runs).
    elsewhere: Arc<Mutex<BTreeSet<GroupName>>>,
}

impl PartNetworks {
    pub fn new(peers: PeerNetwork) -> PartNetworks {
        PartNetworks {
            peers,
            pools: Arc::default(),
            batchers: Arc::default(),
            counts: Arc::default(),
            elsewhere: Arc::default(),
        }
    }

    /// Notes that a peer runs another replica of `group` than the one addressed.
    fn note_elsewhere(&self, group: GroupName) {
        let mut elsewhere = self.elsewhere.lock().unwrap_or_else(|p| p.into_inner());
        elsewhere.insert(group);
    }

    /// Puts back marks [`Self::take_elsewhere`] took that their pass did not act on.
    pub(super) fn keep_elsewhere(&self, groups: impl Iterator<Item = GroupName>) {
        let mut elsewhere = self.elsewhere.lock().unwrap_or_else(|p| p.into_inner());
        elsewhere.extend(groups);
    }

    /// The groups a peer answered "runs another replica" for since the last call.
    pub(super) fn take_elsewhere(&self) -> BTreeSet<GroupName> {
        std::mem::take(&mut *self.elsewhere.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// How many batched exchanges and requests went to peers.
    pub fn batch_counts(&self) -> &BatchCounts {
        &self.counts
    }

    /// The batcher of Raft requests to `member` at `node` (made on first use): one for
    /// appends that carry entries (`heavy`: a follower answers them once its WAL synced),
    /// one for the rest (heartbeats, votes, hand-overs), which so never wait behind a sync.
    fn batcher(&self, member: MemberId, node: &Peer, heavy: bool) -> Batcher {
        let mut batchers = self.batchers.lock().unwrap_or_else(|p| p.into_inner());
        let key = (member, node.raft.clone(), heavy);
        if batchers.get(&key).is_some_and(Batcher::stopped) {
            batchers.remove(&key);
        }
        let batcher = batchers.entry(key).or_insert_with(|| {
            // Addressed to the member, any incarnation (each envelope names the replica).
            let target = u64::from(member) << 32;
            let clients = (0..CONNECTIONS)
                .map(|_| self.peers.client(target, node))
                .collect();
            Batcher::start(self.peers.env(), clients, self.counts.clone())
        });
        batcher.clone()
    }

    /// The pool of connections to `member` at `node`, for forwarded requests or Raft's.
    fn pool(&self, member: MemberId, node: &Peer, forwarded: bool) -> Arc<Pool> {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let key = (member, node.raft.clone(), forwarded);
        let pool = pools.entry(key).or_insert_with(|| {
            // Addressed to the member, any incarnation (the envelope names the replica).
            let target = u64::from(member) << 32;
            let size = if forwarded { FORWARD_POOL } else { POOL };
            let slots = (0..size)
                .map(|_| tokio::sync::Mutex::new(self.peers.client(target, node)))
                .collect();
            Arc::new(Pool {
                slots,
                turn: Default::default(),
            })
        });
        pool.clone()
    }

    /// A connection of its own to member `target` (any incarnation) at `node`.
    pub(super) fn client(&self, target: NodeId, node: &Peer) -> PeerClient {
        self.peers.client(target, node)
    }

    /// The network of this member's replica `me` of group `group` (openraft's factory).
    pub fn of(&self, group: GroupName, me: NodeId) -> GroupNetwork {
        GroupNetwork {
            networks: self.clone(),
            group,
            me,
        }
    }

    /// Asks `envelope` of its addressee's member (at `node`) for `group`, within `limit`.
    pub async fn call(
        &self,
        node: &Peer,
        group: GroupName,
        envelope: &PartEnvelope,
        limit: Duration,
    ) -> io::Result<PartReply> {
        let member = member_of(envelope.to);
        if !matches!(
            envelope.rpc,
            PartRpc::Send(_)
                | PartRpc::Identify
                | PartRpc::Fetch { .. }
                | PartRpc::Snapshot { .. }
                | PartRpc::Making { .. }
                | PartRpc::Forwarded(_)
                | PartRpc::Configured
                | PartRpc::Read(_)
        ) {
            let heavy = matches!(&envelope.rpc, PartRpc::Append(r) if !r.entries.is_empty());
            let batcher = self.batcher(member, node, heavy);
            return decode(&batcher.call(group, encode(envelope)?, limit).await?);
        }
        let forwarded = !matches!(envelope.rpc, PartRpc::Snapshot { .. });
        let pool = self.pool(member, node, forwarded);
        let slot = if forwarded {
            pool.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % pool.slots.len()
        } else {
            slot_of(group)
        };
        let env = self.peers.env();
        let locked = cairn_engine::env::race(pool.slots[slot].lock(), env.clock.sleep(limit));
        let mut client = match locked.await {
            cairn_engine::env::Either::Left(client) => client,
            cairn_engine::env::Either::Right(()) => {
                return Err(crate::net::unsent(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "every connection to the peer stayed busy",
                )))
            }
        };
        let reply = client.call_part(group, encode(envelope)?, limit).await?;
        decode(&reply)
    }
}

/// How many of `entries`, from the first, fit `budget` bytes (at least one).
pub(super) fn entries_within(entries: &[super::PartEntry], budget: usize) -> usize {
    let mut total = 0usize;
    for (i, entry) in entries.iter().enumerate() {
        total += match &entry.payload {
            openraft::EntryPayload::Normal(PartCommand::Send(send)) => send.batch.len() + 64,
            _ => 1024,
        };
        if total > budget && i > 0 {
            return i;
        }
    }
    entries.len()
}

fn slot_of(group: GroupName) -> usize {
    let bytes = [
        group.0.to_le_bytes(),
        group.1.to_le_bytes(),
        group.2.to_le_bytes(),
    ]
    .concat();
    (xxhash_rust::xxh3::xxh3_64(&bytes) % POOL as u64) as usize
}

/// One group's network: openraft's factory of clients to each peer.
#[derive(Clone)]
pub struct GroupNetwork {
    networks: PartNetworks,
    group: GroupName,
    me: NodeId,
}

pub struct GroupClient {
    network: GroupNetwork,
    target: NodeId,
    node: Peer,
}

impl openraft::RaftNetworkFactory<PartConfig> for GroupNetwork {
    type Network = GroupClient;

    async fn new_client(&mut self, target: NodeId, node: &Peer) -> GroupClient {
        GroupClient {
            network: self.clone(),
            target,
            node: node.clone(),
        }
    }
}

impl GroupClient {
    async fn ask(&self, rpc: PartRpc, limit: Duration) -> io::Result<PartReply> {
        let network = &self.network;
        let envelope = PartEnvelope {
            from: network.me,
            to: self.target,
            rpc,
        };
        let asked = network
            .networks
            .call(&self.node, network.group, &envelope, limit);
        match asked.await? {
            PartReply::Refused(why) => Err(io::Error::other(format!("the peer refused: {why}"))),
            PartReply::NoGroup => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the peer runs no replica of this partition yet",
            )),
            PartReply::Elsewhere(runs) => Err({
                // Its leader's next reconciliation adds the replica the member runs.
                network.networks.note_elsewhere(network.group);
                io::Error::new(
                    io::ErrorKind::NotConnected,
                    format!(
                        "the peer runs replica {} of this partition, not {}",
                        show_id(runs),
                        show_id(self.target)
                    ),
                )
            }),
            reply => Ok(reply),
        }
    }

    async fn answered<T>(
        &self,
        rpc: PartRpc,
        option: RPCOption,
        pick: impl FnOnce(PartReply) -> Option<T>,
    ) -> Result<T, RPCError<PartConfig>> {
        let reply = self.ask(rpc, option.hard_ttl()).await;
        let unexpected = || io::Error::new(io::ErrorKind::InvalidData, "another reply");
        reply
            .and_then(|r| pick(r).ok_or_else(unexpected))
            .map_err(crate::net::rpc_error)
    }
}

impl openraft::RaftNetworkV2<PartConfig> for GroupClient {
    type SnapshotData = Vec<u8>;

    /// Sends the entries that fit [`APPEND_BUDGET`] and answers a partial success for
    /// them when more were asked (openraft sends the rest next).
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<PartConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<PartConfig>, RPCError<PartConfig>> {
        let fit = entries_within(&rpc.entries, APPEND_BUDGET);
        let cut = (fit < rpc.entries.len()).then(|| rpc.entries[fit - 1].log_id());
        rpc.entries.truncate(fit);
        let reply = self.answered(PartRpc::Append(rpc), option, |r| match r {
            PartReply::Append(r) => Some(r),
            _ => None,
        });
        match (reply.await?, cut) {
            (AppendEntriesResponse::Success, Some(last)) => {
                Ok(AppendEntriesResponse::PartialSuccess(Some(last)))
            }
            (reply, _) => Ok(reply),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<PartConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<PartConfig>, RPCError<PartConfig>> {
        self.answered(PartRpc::Vote(rpc), option, |r| match r {
            PartReply::Vote(r) => Some(r),
            _ => None,
        })
        .await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<PartConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<PartConfig>, RPCError<PartConfig>> {
        self.answered(PartRpc::PreVote(rpc), option, |r| match r {
            PartReply::Vote(r) => Some(r),
            _ => None,
        })
        .await
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<PartConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<PartConfig>, RPCError<PartConfig>> {
        self.answered(PartRpc::TransferLeader(rpc), option, |r| match r {
            PartReply::TransferLeader(r) => Some(r),
            _ => None,
        })
        .await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: PartSnapshot,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<PartConfig>, StreamingError<PartConfig>> {
        let rpc = PartRpc::Snapshot {
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot,
        };
        let reply = self.ask(rpc, option.hard_ttl()).await;
        match reply {
            Ok(PartReply::Snapshot(r)) => Ok(r),
            Ok(_) => Err(StreamingError::Network(NetworkError::new(
                &io::Error::other("another reply"),
            ))),
            Err(e) => match crate::net::rpc_error::<PartConfig>(e) {
                RPCError::Unreachable(u) => Err(StreamingError::Unreachable(u)),
                other => Err(StreamingError::Network(NetworkError::new(&other))),
            },
        }
    }
}

/// A replica's peers, as it refills its partition from theirs (`refill`).
pub struct FromPeers {
    pub networks: PartNetworks,
    pub group: GroupName,
    pub me: NodeId,
}

impl super::refill::PeerBatches for FromPeers {
    fn fetch(
        &self,
        peer: NodeId,
        node: Peer,
        from: u64,
    ) -> BoxFuture<'static, io::Result<super::refill::Fetched>> {
        let (networks, group) = (self.networks.clone(), self.group);
        let envelope = PartEnvelope {
            from: self.me,
            to: peer,
            rpc: PartRpc::Fetch {
                from,
                max_bytes: super::refill::FETCH_BUDGET,
            },
        };
        Box::pin(async move {
            let reply = networks.call(&node, group, &envelope, super::refill::FETCH_LIMIT);
            match reply.await? {
                PartReply::Batches { bytes, next } => Ok(super::refill::Fetched {
                    batches: super::refill::split_batches(bytes.into())?,
                    next,
                }),
                PartReply::Refused(why) => Err(io::Error::other(why)),
                _ => Err(io::Error::other("the peer runs no such replica")),
            }
        })
    }
}

/// Answers peer `from`'s beat with this member's groups (`quiet`), if they run.
pub(crate) fn answer_beat(replica: &crate::group::Replica, from: NodeId, body: &[u8]) -> Vec<u8> {
    match replica.parts.get() {
        Some(serve) => serve.beat(member_of(from), body),
        None => Vec::new(),
    }
}

/// Answers a peer's request `body` for group `group` with this member's groups, if they
/// run; `from` is the member the connection's handshake proved.
pub(crate) async fn answer(
    replica: &crate::group::Replica,
    from: NodeId,
    group: GroupName,
    body: &[u8],
) -> Vec<u8> {
    let reply = match (replica.parts.get(), decode::<PartEnvelope>(body)) {
        (_, Ok(envelope)) if member_of(envelope.from) != member_of(from) => {
            PartReply::Refused(format!(
                "member {} spoke for replica {}",
                member_of(from),
                show_id(envelope.from)
            ))
        }
        (Some(serve), Ok(envelope)) => serve.serve(group, envelope).await,
        (None, _) => PartReply::NoGroup,
        (_, Err(e)) => PartReply::Refused(format!("a request that does not decode: {e}")),
    };
    encode(&reply)
        .unwrap_or_else(|e| encode(&PartReply::Refused(e.to_string())).expect("a refusal encodes"))
}

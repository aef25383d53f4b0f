//! Raft traffic between the nodes of a cluster, on the `Env` network.
//!
//! One connection per (node, peer) pair and direction, one request at a time on it (openraft
//! drives each peer's client sequentially). Every request names the cluster and both ends by
//! Raft id (member and incarnation, `crate::types::NodeId`); a node answers only requests of
//! its own cluster addressed to itself, so a node never takes part in a cluster it was not
//! made for, and a replica that lost its state (a new incarnation) is not reached by
//! requests meant for the replica it was. One request names only the member:
//! [`identify`], which asks a node who it is (bootstrap and membership changes learn a new
//! replica's id so).
//!
//! Frames are sans-IO ([`encode_frame`], [`frame_len`], [`decode_frame`]):
//! `[body length u32][xxh3 u64 of the body][body: MessagePack]`, at most [`MAX_FRAME`]
//! bytes of body. A connection opens with a [`Hello`] of at most [`MAX_HELLO`] bytes naming
//! the cluster: a listener reads no larger frame from a connection that has not named its
//! own cluster, so a stray connection cannot make it hold a snapshot-sized buffer.

use crate::rt::in_env;
use crate::sm::MAX_SNAPSHOT_LEN;
use crate::types::{
    member_of, show_id, MemberId, MetaConfig, NodeId, Peer, Raft, Snapshot, SnapshotMeta, Vote,
};
use cairn_engine::env::{self, ByteStream, Env, Listener};
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;
use xxhash_rust::xxh3::xxh3_64;

/// The largest frame body: a whole snapshot and its envelope.
pub const MAX_FRAME: usize = MAX_SNAPSHOT_LEN as usize + (1 << 20);
const HEADER: usize = 12;
/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Serialize, Deserialize)]
struct Request {
    cluster: u128,
    from: NodeId,
    to: NodeId,
    rpc: Rpc,
}

#[derive(Serialize, Deserialize)]
enum Rpc {
    Append(AppendEntriesRequest<MetaConfig>),
    Vote(VoteRequest<MetaConfig>),
    PreVote(VoteRequest<MetaConfig>),
    Snapshot {
        vote: Vote,
        meta: SnapshotMeta,
        #[serde(with = "crate::types::bytes_serde")]
        data: Vec<u8>,
    },
    /// Who are you? (Addressed to a member, any incarnation.)
    Identify,
    /// The leader hands leadership over to the addressee (it is stepping down).
    TransferLeader(TransferLeaderRequest<MetaConfig>),
}

/// A node's answer to [`identify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Its Raft id: the incarnation of its storage.
    pub id: NodeId,
    /// Whether it holds any of the group's log or state (a vote alone does not count): a
    /// replica of a group already made. Read from its storage as it booted, or from its Raft
    /// node once that runs, never from the Raft node alone, whose view starts empty.
    pub initialized: bool,
}

#[derive(Serialize, Deserialize)]
enum Reply {
    Append(AppendEntriesResponse<MetaConfig>),
    Vote(VoteResponse<MetaConfig>),
    Snapshot(SnapshotResponse<MetaConfig>),
    Identity(Identity),
    TransferLeader(TransferLeaderResponse<MetaConfig>),
    /// The request was not served: a wrong cluster or node, or the Raft node failed.
    Refused(String),
}

/// The frame carrying `body`.
pub fn encode_frame(body: &[u8]) -> io::Result<Vec<u8>> {
    if body.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a frame of {} bytes (at most {MAX_FRAME})", body.len()),
        ));
    }
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&xxh3_64(body).to_le_bytes());
    out.extend_from_slice(body);
    Ok(out)
}

/// The body length a frame header announces, refused past `max` bytes.
pub fn frame_len(header: &[u8; HEADER], max: usize) -> io::Result<usize> {
    let len = u32::from_le_bytes(header[..4].try_into().expect("4")) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a peer announced a frame of {len} bytes (at most {max})"),
        ));
    }
    Ok(len)
}

/// The largest first frame of a connection ([`Hello`]).
pub const MAX_HELLO: usize = 1024;

/// The first frame of every connection: the cluster it is for and who opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub cluster: u128,
    pub from: NodeId,
}

/// The body of a frame whose header and body were read, if its checksum matches.
pub fn decode_frame<'a>(header: &[u8; HEADER], body: &'a [u8]) -> io::Result<&'a [u8]> {
    let sum = u64::from_le_bytes(header[4..].try_into().expect("8"));
    if xxh3_64(body) != sum {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a peer's frame fails its checksum",
        ));
    }
    Ok(body)
}

async fn write_message<T: Serialize>(stream: &mut dyn ByteStream, message: &T) -> io::Result<()> {
    let body = rmp_serde::to_vec(message).map_err(io::Error::other)?;
    stream.write_all(&encode_frame(&body)?).await
}

async fn read_message<T: for<'de> Deserialize<'de>>(
    stream: &mut dyn ByteStream,
    max: usize,
) -> io::Result<T> {
    let mut header = [0u8; HEADER];
    env::read_exact(stream, &mut header).await?;
    let mut body = vec![0u8; frame_len(&header, max)?];
    env::read_exact(stream, &mut body).await?;
    rmp_serde::from_slice(decode_frame(&header, &body)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// `future`, or `TimedOut` after `limit` of the `Env`'s clock.
async fn within<T>(
    env: &Env,
    limit: Duration,
    future: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match env::race(future, env.clock.sleep(limit)).await {
        env::Either::Left(out) => out,
        env::Either::Right(()) => Err(io::Error::new(io::ErrorKind::TimedOut, "timed out")),
    }
}

/// Makes a client per peer ([`openraft::RaftNetworkFactory`]).
pub struct PeerNetwork {
    env: Env,
    cluster: u128,
    me: NodeId,
}

impl PeerNetwork {
    pub fn new(env: &Env, cluster: u128, me: NodeId) -> PeerNetwork {
        PeerNetwork {
            env: env.clone(),
            cluster,
            me,
        }
    }
}

/// The connection to one peer, made on first use and after every failure.
pub struct PeerClient {
    env: Env,
    cluster: u128,
    me: NodeId,
    target: NodeId,
    addr: Option<SocketAddr>,
    stream: Exclusive<Option<Box<dyn ByteStream>>>,
    /// A request was written and its reply not yet read: set across each exchange, so an
    /// exchange that openraft cancelled (dropped mid-way) leaves it set, and the next call
    /// starts on a new connection instead of reading the old request's reply as its own.
    in_flight: bool,
}

/// A value reachable only through `&mut` ([`Exclusive::get_mut`]): openraft wants its
/// network clients `Sync`, and a byte stream is only `Send`.
struct Exclusive<T>(T);

// SAFETY: the inner value is reachable only through `&mut Exclusive` (`get_mut`); a shared
// `&Exclusive` gives access to nothing, so sharing one between threads cannot race.
unsafe impl<T: Send> Sync for Exclusive<T> {}

impl<T> Exclusive<T> {
    fn get_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl openraft::RaftNetworkFactory<MetaConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Peer) -> PeerClient {
        PeerClient {
            env: self.env.clone(),
            cluster: self.cluster,
            me: self.me,
            target,
            addr: node.raft.parse().ok(),
            stream: Exclusive(None),
            in_flight: false,
        }
    }
}

impl PeerClient {
    async fn call(&mut self, rpc: Rpc, limit: Duration) -> io::Result<Reply> {
        let span = tracing::debug_span!("raft_rpc", to = self.target);
        let request = Request {
            cluster: self.cluster,
            from: self.me,
            to: self.target,
            rpc,
        };
        let env = self.env.clone();
        if self.in_flight {
            *self.stream.get_mut() = None;
        }
        self.in_flight = true;
        let result = within(&env, limit, async {
            if self.stream.get_mut().is_none() {
                let addr = self.addr.ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "the peer's raft address does not parse",
                    )
                })?;
                let mut stream = within(&env, CONNECT_TIMEOUT, env.net.connect(addr)).await?;
                let hello = Hello {
                    cluster: self.cluster,
                    from: self.me,
                };
                write_message(&mut *stream, &hello).await?;
                *self.stream.get_mut() = Some(stream);
            }
            let stream = self.stream.get_mut().as_mut().expect("connected above");
            write_message(&mut **stream, &request).await?;
            read_message::<Reply>(&mut **stream, MAX_FRAME).await
        })
        .instrument(span)
        .await;
        match &result {
            Ok(_) => self.in_flight = false,
            // The stream may hold half a request or reply: start over on a new one.
            Err(_) => *self.stream.get_mut() = None,
        }
        result
    }

    /// A client for one [`identify`] exchange with `member` at `addr`.
    fn to_member(env: &Env, cluster: u128, me: NodeId, member: MemberId, addr: SocketAddr) -> Self {
        PeerClient {
            env: env.clone(),
            cluster,
            me,
            target: u64::from(member) << 32,
            addr: Some(addr),
            stream: Exclusive(None),
            in_flight: false,
        }
    }

    fn rpc_error(e: io::Error) -> RPCError<MetaConfig> {
        match e.kind() {
            io::ErrorKind::ConnectionRefused
            | io::ErrorKind::TimedOut
            | io::ErrorKind::NotConnected => RPCError::Unreachable(Unreachable::new(&e)),
            _ => RPCError::Network(NetworkError::new(&e)),
        }
    }
}

/// The answer `pick` takes from a peer's reply, or the error openraft gets.
fn answered<T>(
    reply: io::Result<Reply>,
    pick: impl FnOnce(Reply) -> Option<T>,
) -> Result<T, RPCError<MetaConfig>> {
    match reply {
        Ok(Reply::Refused(why)) => Err(PeerClient::rpc_error(refused(why))),
        Ok(reply) => pick(reply).ok_or_else(|| PeerClient::rpc_error(unexpected())),
        Err(e) => Err(PeerClient::rpc_error(e)),
    }
}

fn refused(why: String) -> io::Error {
    io::Error::other(format!("the peer refused: {why}"))
}

fn unexpected() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "the peer answered another request",
    )
}

impl openraft::RaftNetworkV2<MetaConfig> for PeerClient {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<MetaConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<MetaConfig>, RPCError<MetaConfig>> {
        let reply = self.call(Rpc::Append(rpc), option.hard_ttl()).await;
        answered(reply, |r| match r {
            Reply::Append(r) => Some(r),
            _ => None,
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<MetaConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<MetaConfig>, RPCError<MetaConfig>> {
        let reply = self.call(Rpc::Vote(rpc), option.hard_ttl()).await;
        answered(reply, |r| match r {
            Reply::Vote(r) => Some(r),
            _ => None,
        })
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<MetaConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<MetaConfig>, RPCError<MetaConfig>> {
        let reply = self.call(Rpc::PreVote(rpc), option.hard_ttl()).await;
        answered(reply, |r| match r {
            Reply::Vote(r) => Some(r),
            _ => None,
        })
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<MetaConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<MetaConfig>, RPCError<MetaConfig>> {
        let reply = self.call(Rpc::TransferLeader(rpc), option.hard_ttl()).await;
        answered(reply, |r| match r {
            Reply::TransferLeader(r) => Some(r),
            _ => None,
        })
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<MetaConfig>, StreamingError<MetaConfig>> {
        let rpc = Rpc::Snapshot {
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot,
        };
        let failed = |e: io::Error| match Self::rpc_error(e) {
            RPCError::Unreachable(u) => StreamingError::Unreachable(u),
            other => StreamingError::Network(NetworkError::new(&other)),
        };
        match self.call(rpc, option.hard_ttl()).await {
            Ok(Reply::Snapshot(r)) => Ok(r),
            Ok(Reply::Refused(why)) => Err(failed(refused(why))),
            Ok(_) => Err(failed(unexpected())),
            Err(e) => Err(failed(e)),
        }
    }
}

/// Asks the node of `member` at `addr` who it is, within `limit`.
pub async fn identify(
    env: &Env,
    cluster: u128,
    me: NodeId,
    member: MemberId,
    addr: SocketAddr,
    limit: Duration,
) -> io::Result<Identity> {
    let mut client = PeerClient::to_member(env, cluster, me, member, addr);
    match client.call(Rpc::Identify, limit).await? {
        Reply::Identity(identity) if member_of(identity.id) == member => Ok(identity),
        Reply::Identity(identity) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "member {member} at {addr} answered as replica {}",
                identity.id
            ),
        )),
        Reply::Refused(why) => Err(refused(why)),
        _ => Err(unexpected()),
    }
}

/// Whether a request addressed to `to` is this replica's (`me`); a canary's hook may
/// answer instead of the rule ([`crate::group::GroupHooks::addressed`]).
pub type AddressedHook = Arc<dyn Fn(NodeId, NodeId) -> bool + Send + Sync>;

/// Serves peers' requests to `raft` on `listener` until the task is cancelled.
pub async fn serve_peers(
    env: Env,
    mut listener: Box<dyn Listener>,
    raft: Raft,
    cluster: u128,
    me: NodeId,
    stored: bool,
    addressed: Option<AddressedHook>,
) {
    loop {
        let Ok((stream, from)) = listener.accept().await else {
            // The listener failed (the node is going down, or the network is): back off.
            env.clock.sleep(Duration::from_millis(100)).await;
            continue;
        };
        tracing::debug!(%from, "a peer connected");
        let task = serve_connection(
            stream,
            raft.clone(),
            cluster,
            (me, stored),
            addressed.clone(),
        );
        drop(env.tasks.spawn(Box::pin(in_env(&env, task))));
    }
}

async fn serve_connection(
    mut stream: Box<dyn ByteStream>,
    raft: Raft,
    cluster: u128,
    (me, stored): (NodeId, bool),
    hook: Option<AddressedHook>,
) {
    match read_message::<Hello>(&mut *stream, MAX_HELLO).await {
        Ok(hello) if hello.cluster == cluster => {}
        Ok(hello) => {
            let why = format!(
                "a connection for cluster {:032x} from {} reached cluster {cluster:032x}",
                hello.cluster,
                show_id(hello.from)
            );
            tracing::warn!(%why, "a peer of another cluster");
            let _ = write_message(&mut *stream, &Reply::Refused(why)).await;
            return;
        }
        Err(e) => {
            tracing::debug!(error = %e, "a connection without a hello");
            return;
        }
    }
    loop {
        let Ok(request) = read_message::<Request>(&mut *stream, MAX_FRAME).await else {
            return;
        };
        let addressed = match (&request.rpc, &hook) {
            (Rpc::Identify, _) => member_of(request.to) == member_of(me),
            (_, Some(hook)) => hook(request.to, me),
            (_, None) => request.to == me,
        };
        let reply = if request.cluster != cluster || !addressed {
            Reply::Refused(format!(
                "a request for cluster {:032x} replica {} reached cluster {cluster:032x} replica {}",
                request.cluster,
                show_id(request.to),
                show_id(me)
            ))
        } else {
            answer(&raft, request.rpc, stored).await
        };
        if write_message(&mut *stream, &reply).await.is_err() {
            return;
        }
    }
}

/// `stored`: the replica held some of the group's log or state when it booted.
async fn answer(raft: &Raft, rpc: Rpc, stored: bool) -> Reply {
    match rpc {
        Rpc::Append(r) => raft
            .append_entries(r)
            .await
            .map_or_else(|e| Reply::Refused(e.to_string()), Reply::Append),
        Rpc::Vote(r) => raft
            .vote(r)
            .await
            .map_or_else(|e| Reply::Refused(e.to_string()), Reply::Vote),
        Rpc::PreVote(r) => raft
            .pre_vote(r)
            .await
            .map_or_else(|e| Reply::Refused(e.to_string()), Reply::Vote),
        Rpc::Snapshot { vote, meta, data } => raft
            .install_full_snapshot(
                vote,
                Snapshot {
                    meta,
                    snapshot: data,
                },
            )
            .await
            .map_or_else(|e| Reply::Refused(e.to_string()), Reply::Snapshot),
        Rpc::TransferLeader(r) => raft
            .handle_transfer_leader(r)
            .await
            .map_or_else(|e| Reply::Refused(e.to_string()), Reply::TransferLeader),
        Rpc::Identify => {
            use openraft::async_runtime::WatchReceiver;
            let metrics = raft.metrics();
            let metrics = metrics.borrow_watched();
            let initialized = stored
                || metrics
                    .membership_config
                    .membership()
                    .voter_ids()
                    .next()
                    .is_some();
            Reply::Identity(Identity {
                id: metrics.id,
                initialized,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_refuse_damage() {
        let frame = encode_frame(b"hello").unwrap();
        let header: [u8; HEADER] = frame[..HEADER].try_into().unwrap();
        assert_eq!(frame_len(&header, MAX_FRAME).unwrap(), 5);
        assert_eq!(decode_frame(&header, &frame[HEADER..]).unwrap(), b"hello");
        let mut bad = frame.clone();
        bad[HEADER] ^= 1;
        assert!(decode_frame(&header, &bad[HEADER..]).is_err());
        let mut huge = header;
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(frame_len(&huge, MAX_FRAME).is_err());
    }

    #[test]
    fn a_connection_names_its_cluster_in_a_small_first_frame() {
        let hello = rmp_serde::to_vec(&Hello {
            cluster: u128::MAX,
            from: u64::MAX,
        })
        .unwrap();
        assert!(hello.len() <= MAX_HELLO, "{} bytes", hello.len());
        // A first frame past the bound is refused by its header, before its body is read.
        let frame = encode_frame(&vec![0u8; MAX_HELLO + 1]).unwrap();
        let header: [u8; HEADER] = frame[..HEADER].try_into().unwrap();
        assert!(frame_len(&header, MAX_HELLO).is_err());
        assert!(frame_len(&header, MAX_FRAME).is_ok());
    }
}

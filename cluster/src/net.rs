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
//! bytes of body. A connection opens with a handshake of frames of at most [`MAX_HELLO`]
//! bytes that proves both ends hold the cluster's secret ([`PeerKey`]), so a listener reads
//! no larger frame, and serves no request, from a connection that has not:
//!
//! ```text
//! listener → Challenge { its nonce }
//! opener   → Hello { cluster, from, its nonce, HMAC(secret, "hello", cluster, both nonces, from) }
//! listener → Welcome(HMAC(secret, "welcome", cluster, both nonces))  or  Refused(why)
//! ```
//!
//! Both nonces are fresh per connection, so a recorded handshake does not open another one.
//! The traffic itself is not encrypted: the replication network is the operator's to keep
//! private (the README says so).
//!
//! Besides openraft's requests, an administrator (`cairn cluster`, from Raft id 0) may ask a
//! member for the group's status and, of the leader, a membership change ([`ask`]).

use crate::group::{GroupStatus, MemberChange, ProposeError, Replica};
use crate::rt::in_env;
use crate::sm::MAX_SNAPSHOT_LEN;
use crate::types::{
    member_of, show_id, MemberId, MetaCommand, MetaConfig, MetaOutcome, NodeId, Peer, Snapshot,
    SnapshotMeta, Vote,
};
use cairn_engine::env::{self, ByteStream, Env, Listener};
use fate::{answered, closed_by_peer, elsewhere, refused, unexpected};
pub(crate) use fate::{copy, rpc_error, unsent};
pub use fate::{not_run, NotRun};
use handshake::{accept_handshake, open_handshake};
pub use handshake::{Challenge, Hello, PeerKey, MAX_HELLO};
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// A member's metadata command, forwarded to the leader it knows (addressed to a member,
    /// any incarnation: the leader stamps and proposes it, or answers `NotLeader`).
    Propose(MetaCommand),
    /// A member's fresh read: the leader's read index (it confirmed its leadership with a
    /// quorum), through which the member must apply before it reads. Addressed like
    /// `Propose`.
    ReadIndex,
    /// An administrator's request (addressed to a member, any incarnation).
    Admin(AdminRequest),
    /// A partition group's request (`crate::partition::net`: it names the group's replicas
    /// at both ends), addressed to a member, any incarnation.
    Part {
        group: crate::partition::net::GroupName,
        #[serde(with = "crate::types::bytes_serde")]
        body: Vec<u8>,
    },
    /// A member's beat (`crate::partition::quiet`), addressed to a member.
    Beat(#[serde(with = "crate::types::bytes_serde")] Vec<u8>),
    /// Many partition groups' requests at once (`crate::partition::batch`), addressed to a
    /// member; answered in order, each as `Part` would be.
    Parts(Vec<PartItem>),
}

/// One partition group's request in [`Rpc::Parts`].
#[derive(Serialize, Deserialize)]
pub struct PartItem {
    pub group: crate::partition::net::GroupName,
    #[serde(with = "crate::types::bytes_serde")]
    pub body: Vec<u8>,
}

/// One answer in [`Reply::Parts`].
#[derive(Serialize, Deserialize)]
pub struct PartAnswer(#[serde(with = "crate::types::bytes_serde")] pub Vec<u8>);

/// What an administrator may ask of a member ([`ask`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminRequest {
    /// The group as the member sees it.
    Status,
    /// A change of the voters; only the leader makes it (others answer `NotLeader`).
    Change(MemberChange),
}

/// A member's answer to an [`AdminRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminReply {
    Status(GroupStatus),
    Changed(Result<GroupStatus, ProposeError>),
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
    Admin(AdminReply),
    /// The leader's answer to a forwarded command: its index and outcome once applied there.
    Proposed(Result<(u64, MetaOutcome), ProposeError>),
    /// The leader's read index (`NotLeader` when it does not lead or could not confirm it).
    ReadIndex(Result<u64, ProposeError>),
    /// The handshake's last frame: the listener's proof that it holds the secret.
    #[serde(with = "crate::types::bytes_serde")]
    Welcome(Vec<u8>),
    /// A partition group's answer (`crate::partition::net::PartReply`).
    #[serde(with = "crate::types::bytes_serde")]
    Part(Vec<u8>),
    /// The request was not served: the Raft node failed, or the handshake did.
    Refused(String),
    /// The request was meant for another replica (one this member's storage replaced: a
    /// wiped disk, a lost state record) or another cluster. openraft takes it as an
    /// unreachable peer, and backs off, until an administrator replaces the old replica.
    Elsewhere(String),
    /// A member's answer to a beat (`crate::partition::quiet::BeatReply`).
    #[serde(with = "crate::types::bytes_serde")]
    Beat(Vec<u8>),
    /// The answers to [`Rpc::Parts`], in its order.
    Parts(Vec<PartAnswer>),
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

/// How long an opener may take over its side of the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A served connection that carries no request for this long is closed: a peer that died
/// without closing it (a power loss) leaves it open otherwise. Clients make a connection
/// idle for [`CLIENT_IDLE`] again before they use it, so a live peer never finds its own
/// closed under it.
pub const PEER_IDLE: Duration = Duration::from_secs(120);
pub const CLIENT_IDLE: Duration = Duration::from_secs(60);
const _: () = assert!(CLIENT_IDLE.as_nanos() < PEER_IDLE.as_nanos());

/// Connections a member serves at once, proven or not; more are closed as they arrive.
/// Each peer member holds at most [`served::PER_MEMBER`], so this leaves room for six peers
/// and for connections still in their handshake.
pub const MAX_PEER_CONNECTIONS: usize = 640;

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
#[derive(Clone)]
pub struct PeerNetwork {
    env: Env,
    cluster: u128,
    key: PeerKey,
    me: NodeId,
}

impl PeerNetwork {
    pub fn new(env: &Env, cluster: u128, key: PeerKey, me: NodeId) -> PeerNetwork {
        PeerNetwork {
            env: env.clone(),
            cluster,
            key,
            me,
        }
    }
}

/// The connection to one peer, made on first use and after every failure.
pub struct PeerClient {
    env: Env,
    cluster: u128,
    key: PeerKey,
    me: NodeId,
    target: NodeId,
    addr: Option<SocketAddr>,
    stream: Exclusive<Option<Box<dyn ByteStream>>>,
    /// A request was written and its reply not yet read: set across each exchange, so an
    /// exchange that openraft cancelled (dropped mid-way) leaves it set, and the next call
    /// starts on a new connection instead of reading the old request's reply as its own.
    in_flight: bool,
    /// When the connection last carried an exchange (monotonic nanoseconds): one idle for
    /// [`CLIENT_IDLE`] is made again, before the peer closes it ([`PEER_IDLE`]).
    used_at: u64,
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

impl PeerNetwork {
    pub(crate) fn env(&self) -> &Env {
        &self.env
    }

    /// A client of `target` at `node` (connected on first use).
    pub(crate) fn client(&self, target: NodeId, node: &Peer) -> PeerClient {
        PeerClient {
            env: self.env.clone(),
            cluster: self.cluster,
            key: self.key.clone(),
            me: self.me,
            target,
            addr: node.raft.parse().ok(),
            stream: Exclusive(None),
            in_flight: false,
            used_at: 0,
        }
    }
}

impl openraft::RaftNetworkFactory<MetaConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Peer) -> PeerClient {
        self.client(target, node)
    }
}

impl PeerClient {
    /// Asks a partition group's request `body` of group `group`; the reply's body.
    pub(crate) async fn call_part(
        &mut self,
        group: crate::partition::net::GroupName,
        body: Vec<u8>,
        limit: Duration,
    ) -> io::Result<Vec<u8>> {
        // A request refused, or that reached another replica, was not run there.
        match self.call(Rpc::Part { group, body }, limit).await? {
            Reply::Part(body) => Ok(body),
            Reply::Refused(why) => Err(unsent(refused(why))),
            Reply::Elsewhere(why) => Err(unsent(elsewhere(why))),
            _ => Err(unexpected()),
        }
    }

    /// Asks many partition groups' requests at once (`crate::partition::batch`): each
    /// one's reply body, in order.
    pub(crate) async fn call_parts(
        &mut self,
        requests: Vec<(crate::partition::net::GroupName, Vec<u8>)>,
        limit: Duration,
    ) -> io::Result<Vec<Vec<u8>>> {
        let items = requests
            .into_iter()
            .map(|(group, body)| PartItem { group, body })
            .collect();
        match self.call(Rpc::Parts(items), limit).await? {
            Reply::Parts(answers) => Ok(answers.into_iter().map(|a| a.0).collect()),
            Reply::Refused(why) => Err(unsent(refused(why))),
            Reply::Elsewhere(why) => Err(unsent(elsewhere(why))),
            _ => Err(unexpected()),
        }
    }

    /// Beats the peer member (`crate::partition::quiet`): its answer.
    pub(crate) async fn call_beat(
        &mut self,
        body: Vec<u8>,
        limit: Duration,
    ) -> io::Result<Vec<u8>> {
        match self.call(Rpc::Beat(body), limit).await? {
            Reply::Beat(body) => Ok(body),
            Reply::Refused(why) => Err(refused(why)),
            _ => Err(unexpected()),
        }
    }

    async fn call(&mut self, rpc: Rpc, limit: Duration) -> io::Result<Reply> {
        let span = tracing::debug_span!("raft_rpc", to = self.target);
        let request = Request {
            cluster: self.cluster,
            from: self.me,
            to: self.target,
            rpc,
        };
        let env = self.env.clone();
        let now = env.clock.monotonic_nanos();
        let idle = now.saturating_sub(self.used_at) > CLIENT_IDLE.as_nanos() as u64;
        let closed = self
            .stream
            .get_mut()
            .as_mut()
            .is_some_and(|s| closed_by_peer(&mut **s));
        if self.in_flight || idle || closed {
            *self.stream.get_mut() = None;
        }
        self.in_flight = true;
        let wrote = std::sync::atomic::AtomicBool::new(false);
        let result = within(&env, limit, async {
            if self.stream.get_mut().is_none() {
                let addr = self.addr.ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "the peer's raft address does not parse",
                    )
                })?;
                let mut stream = within(&env, CONNECT_TIMEOUT, env.net.connect(addr)).await?;
                let ends = (self.me, member_of(self.target));
                open_handshake(&env, &mut *stream, &self.key, self.cluster, ends).await?;
                *self.stream.get_mut() = Some(stream);
            }
            let stream = self.stream.get_mut().as_mut().expect("connected above");
            wrote.store(true, std::sync::atomic::Ordering::Relaxed);
            write_message(&mut **stream, &request).await?;
            read_message::<Reply>(&mut **stream, MAX_FRAME).await
        })
        .instrument(span)
        .await;
        // Failed before a byte of the request was written (no connection, a refused
        // handshake, the limit passed while connecting): the peer cannot have run it.
        let result = match result {
            Err(e) if !wrote.load(std::sync::atomic::Ordering::Relaxed) => Err(unsent(e)),
            other => other,
        };
        match &result {
            Ok(_) => {
                self.in_flight = false;
                self.used_at = env.clock.monotonic_nanos();
            }
            // The stream may hold half a request or reply: start over on a new one.
            Err(_) => *self.stream.get_mut() = None,
        }
        result
    }

    /// A client for one exchange with `member` at `addr` ([`identify`], [`ask`]).
    fn to_member(
        env: &Env,
        (cluster, key): (u128, &PeerKey),
        me: NodeId,
        member: MemberId,
        addr: SocketAddr,
    ) -> Self {
        PeerClient {
            env: env.clone(),
            cluster,
            key: key.clone(),
            me,
            target: u64::from(member) << 32,
            addr: Some(addr),
            stream: Exclusive(None),
            in_flight: false,
            used_at: 0,
        }
    }
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
        let failed = |e: io::Error| match rpc_error(e) {
            RPCError::Unreachable(u) => StreamingError::Unreachable(u),
            other => StreamingError::Network(NetworkError::new(&other)),
        };
        match self.call(rpc, option.hard_ttl()).await {
            Ok(Reply::Snapshot(r)) => Ok(r),
            Ok(Reply::Refused(why)) => Err(failed(refused(why))),
            Ok(Reply::Elsewhere(why)) => Err(failed(elsewhere(why))),
            Ok(_) => Err(failed(unexpected())),
            Err(e) => Err(failed(e)),
        }
    }
}

/// Asks the node of `member` at `addr` who it is, within `limit`.
pub async fn identify(
    env: &Env,
    cluster: (u128, &PeerKey),
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
        Reply::Elsewhere(why) => Err(elsewhere(why)),
        _ => Err(unexpected()),
    }
}

/// An administrator's request to the node of `member` at `addr` (sent as Raft id 0), within
/// `limit`.
pub async fn ask(
    env: &Env,
    cluster: (u128, &PeerKey),
    member: MemberId,
    addr: SocketAddr,
    request: AdminRequest,
    limit: Duration,
) -> io::Result<AdminReply> {
    let client = PeerClient::to_member(env, cluster, 0, member, addr);
    match served(client, Rpc::Admin(request), limit).await? {
        Reply::Admin(reply) => Ok(reply),
        _ => Err(unexpected()),
    }
}

/// `rpc`'s reply from the member `client` reaches, within `limit`; a refusal, or a request
/// that reached another replica or cluster, as an error.
async fn served(mut client: PeerClient, rpc: Rpc, limit: Duration) -> io::Result<Reply> {
    match client.call(rpc, limit).await? {
        Reply::Refused(why) => Err(refused(why)),
        Reply::Elsewhere(why) => Err(elsewhere(why)),
        reply => Ok(reply),
    }
}

/// Forwards `command` to the leader `leader` (its member at `addr`), within `limit`: the
/// leader's answer once it applied the command.
pub(crate) async fn forward(
    env: &Env,
    cluster: (u128, &PeerKey),
    me: NodeId,
    (leader, addr): (NodeId, SocketAddr),
    command: MetaCommand,
    limit: Duration,
) -> io::Result<Result<(u64, MetaOutcome), ProposeError>> {
    let client = PeerClient::to_member(env, cluster, me, member_of(leader), addr);
    match served(client, Rpc::Propose(command), limit).await? {
        Reply::Proposed(answer) => Ok(answer),
        _ => Err(unexpected()),
    }
}

/// Asks the leader `leader` (its member at `addr`) for its read index, within `limit`.
pub(crate) async fn read_index_at(
    env: &Env,
    cluster: (u128, &PeerKey),
    me: NodeId,
    (leader, addr): (NodeId, SocketAddr),
    limit: Duration,
) -> io::Result<Result<u64, ProposeError>> {
    let client = PeerClient::to_member(env, cluster, me, member_of(leader), addr);
    match served(client, Rpc::ReadIndex, limit).await? {
        Reply::ReadIndex(answer) => Ok(answer),
        _ => Err(unexpected()),
    }
}

/// Whether a request addressed to `to` is this replica's (`me`); a canary's hook may
/// answer instead of the rule ([`crate::group::GroupHooks::addressed`]).
pub type AddressedHook = Arc<dyn Fn(NodeId, NodeId) -> bool + Send + Sync>;

/// Told of the entries of every append a leader sends that this replica took (a canary's
/// hook, [`crate::group::GroupHooks::apply_uncommitted`]).
pub type AppendedHook = Arc<dyn Fn(&[crate::types::Entry]) + Send + Sync>;

/// Serves peers' and administrators' requests to `replica` on `listener` until the task
/// is cancelled.
pub async fn serve_peers(
    replica: Replica,
    mut listener: Box<dyn Listener>,
    key: PeerKey,
    stored: bool,
    hooks: (Option<AddressedHook>, Option<AppendedHook>),
) {
    let env = replica.env.clone();
    let open = Arc::new(AtomicUsize::new(0));
    let served = served::Served::default();
    loop {
        let Ok((stream, from)) = listener.accept().await else {
            // The listener failed (the node is going down, or the network is): back off.
            env.clock.sleep(Duration::from_millis(100)).await;
            continue;
        };
        if open.load(Ordering::Relaxed) >= MAX_PEER_CONNECTIONS {
            tracing::warn!(%from, "a peer connection closed: {MAX_PEER_CONNECTIONS} are open");
            continue;
        }
        tracing::debug!(%from, "a peer connected");
        let counted = Counted::new(&open);
        let task = serve_connection(
            stream,
            (replica.clone(), served.clone()),
            key.clone(),
            stored,
            hooks.clone(),
        );
        let task = async move {
            let _counted = counted;
            task.await
        };
        drop(env.tasks.spawn(Box::pin(in_env(&env, task))));
    }
}

/// One open connection, counted while it lives.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(open: &Arc<AtomicUsize>) -> Counted {
        open.fetch_add(1, Ordering::Relaxed);
        Counted(open.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve_connection(
    mut stream: Box<dyn ByteStream>,
    (replica, served): (Replica, served::Served),
    key: PeerKey,
    stored: bool,
    (hook, appended): (Option<AddressedHook>, Option<AppendedHook>),
) {
    let (cluster, me) = (replica.cluster, replica.me);
    let handshake = accept_handshake(&replica.env, &mut *stream, &key, (cluster, member_of(me)));
    let peer = match within(&replica.env, HANDSHAKE_TIMEOUT, handshake).await {
        Ok(peer) => peer,
        Err(e) => {
            tracing::debug!(error = %e, "a connection without a handshake");
            return;
        }
    };
    // Closed when its member opened too many newer ones (`served`).
    let mut entry = served.admit(member_of(peer));
    loop {
        let read = read_message::<Request>(&mut *stream, MAX_FRAME);
        let idle = replica.env.clock.sleep(PEER_IDLE);
        let closed = env::race(&mut entry.closed, idle);
        let env::Either::Left(Ok(request)) = env::race(read, closed).await else {
            return;
        };
        // The handshake proved who opened the connection: its requests speak for it alone.
        if request.from != peer {
            tracing::warn!(
                peer = %show_id(peer),
                claimed = %show_id(request.from),
                "a request in another's name: the connection is closed"
            );
            return;
        }
        let addressed = match (&request.rpc, &hook) {
            (
                Rpc::Identify
                | Rpc::Admin(_)
                | Rpc::Propose(_)
                | Rpc::ReadIndex
                | Rpc::Part { .. }
                | Rpc::Parts(_)
                | Rpc::Beat(_),
                _,
            ) => member_of(request.to) == member_of(me),
            (_, Some(hook)) => hook(request.to, me),
            (_, None) => request.to == me,
        };
        let reply = if request.cluster != cluster || !addressed {
            Reply::Elsewhere(format!(
                "a request for cluster {:032x} replica {} reached cluster {cluster:032x} replica {}",
                request.cluster,
                show_id(request.to),
                show_id(me)
            ))
        } else {
            let entries = match (&request.rpc, &appended) {
                (Rpc::Append(r), Some(_)) => r.entries.clone(),
                _ => Vec::new(),
            };
            let reply = answer(&replica, request.from, request.rpc, stored).await;
            if let (Reply::Append(r), Some(appended)) = (&reply, &appended) {
                if r.is_success() {
                    appended(&entries);
                }
            }
            reply
        };
        if write_message(&mut *stream, &reply).await.is_err() {
            return;
        }
    }
}

/// Forwarded ops a leader proposes at once; more are answered "busy" (the forwarder retries
/// as for another leader), so forwards never take all of its peer connections.
pub const MAX_PROPOSING: usize = 16;

/// A forwarded command, from replica `from`: proposed only when `from` is a replica of the
/// group's configuration (a removed or replaced member, or an administrator, proposes
/// nothing), and at most [`MAX_PROPOSING`] at once.
async fn propose_forwarded(
    replica: &Replica,
    from: NodeId,
    command: MetaCommand,
) -> Result<(u64, MetaOutcome), ProposeError> {
    let status = replica.status();
    if !status.voters.contains_key(&from) && !status.learners.contains_key(&from) {
        return Err(ProposeError::Failed(format!(
            "replica {} is not in the group's configuration",
            show_id(from)
        )));
    }
    let Some(_turn) = replica.proposing.try_acquire() else {
        return Err(ProposeError::NotLeader {
            me: replica.me,
            leader: Some(replica.me),
        });
    };
    replica.propose_here(command).await
}

/// `stored`: the replica held some of the group's log or state when it booted.
async fn answer(replica: &Replica, from: NodeId, rpc: Rpc, stored: bool) -> Reply {
    let raft = &replica.raft;
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
        Rpc::Propose(command) => Reply::Proposed(propose_forwarded(replica, from, command).await),
        Rpc::Part { group, body } => {
            Reply::Part(crate::partition::net::answer(replica, from, group, &body).await)
        }
        Rpc::Parts(items) => {
            let answers = items
                .iter()
                .map(|item| crate::partition::net::answer(replica, from, item.group, &item.body));
            let answers = futures_util::future::join_all(answers).await;
            Reply::Parts(answers.into_iter().map(PartAnswer).collect())
        }
        Rpc::Beat(body) => Reply::Beat(crate::partition::net::answer_beat(replica, from, &body)),
        Rpc::ReadIndex => Reply::ReadIndex(replica.read_index_here().await),
        Rpc::Admin(AdminRequest::Status) => {
            Reply::Admin(AdminReply::Status(replica.status_with_partitions()))
        }
        Rpc::Admin(AdminRequest::Change(change)) => {
            tracing::info!(?change, "an administrator changes the group");
            Reply::Admin(AdminReply::Changed(replica.change(change).await))
        }
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

mod fate;
mod handshake;
mod served;
#[cfg(test)]
mod tests;

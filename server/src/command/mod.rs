//! The command layer: what every request means, whichever adapter carried it. A typed
//! [`Command`] and its [`Caller`] go in; a typed [`Reply`] or a [`Status`] comes out. It runs
//! on the `Env` seam and knows no socket, frame or JSON: the binary protocol (`crate::tcp`)
//! decodes a frame's body into a command with the table's decoder, HTTP (`crate::http`)
//! builds the same command from JSON; each turns the reply back into its own bytes.
//!
//! ```text
//! execute(command, caller)
//!   ──► the row of the command table (code, name, decoder, rule, journaled, dedup)
//!   ──► one view of the metadata for the whole request
//!   ──► the session still holds (its user's incarnation, active, password or token)
//!   ──► the command's names resolved on that view (a read of nothing answers NotFound)
//!   ──► the row's permission rule on what they resolved to
//!   ──► the command's handler (meta, reads, messages, consumers, tokens) ──► the node
//!   ──► counted by command and status (`metrics`)
//! ```
//!
//! Architecture invariant: a request reaches the node only through [`execute`] (and a login
//! only through [`login`]), so the adapters cannot disagree on a check. What an
//! acknowledgement promises is decided in one place, [`messages`].

pub mod descriptors;
pub mod hooks;
pub mod log_throttle;
pub mod login;
pub mod login_limit;
pub mod messages;
pub mod metrics;
pub mod permissions;
pub mod registry;
pub mod replies;
pub mod responses;
pub mod roster;
pub mod session;
pub mod status;
pub mod table;

mod consumers;
mod meta;
mod reads;
mod tokens;

pub use messages::{Ack, Landed, Polled, Send, SendOutcome};
pub use meta::TopicDefaults;
pub use permissions::Rule;
pub use session::{Revoked, Session};
pub use status::{codes, Fault, Status};
pub use table::{Missing, Row, TABLE};

use cairn_engine::env::Env;
use cairn_engine::node::ops::MetaOp;
use cairn_engine::node::{MetaView, Node};
use iggy_binary_protocol::requests::consumer_groups::{
    GetConsumerGroupRequest, GetConsumerGroupsRequest, JoinConsumerGroupRequest,
    LeaveConsumerGroupRequest, SyncConsumerGroupRequest,
};
use iggy_binary_protocol::requests::consumer_offsets::{
    DeleteConsumerOffsetRequest, GetConsumerOffsetRequest, StoreConsumerOffsetRequest,
};
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::requests::personal_access_tokens::{
    CreatePersonalAccessTokenRequest, DeletePersonalAccessTokenRequest,
};
use iggy_binary_protocol::requests::segments::DeleteSegmentsRequest;
use iggy_binary_protocol::requests::streams::GetStreamRequest;
use iggy_binary_protocol::requests::system::GetClientRequest;
use iggy_binary_protocol::requests::topics::{GetTopicRequest, GetTopicsRequest};
use iggy_binary_protocol::requests::users::{
    ChangePasswordRequest, CreateUserRequest, GetUserRequest,
};
use iggy_binary_protocol::responses::clients::{ClientDetailsResponse, GetClientsResponse};
use iggy_binary_protocol::responses::consumer_groups::{
    ConsumerGroupDetailsResponse, GetConsumerGroupsResponse, SyncConsumerGroupResponse,
};
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::responses::messages::PollRoutingResponse;
use iggy_binary_protocol::responses::personal_access_tokens::{
    GetPersonalAccessTokensResponse, RawPersonalAccessTokenResponse,
};
use iggy_binary_protocol::responses::streams::{GetStreamResponse, GetStreamsResponse};
use iggy_binary_protocol::responses::system::{ClusterMetadataResponse, StatsResponse};
use iggy_binary_protocol::responses::topics::{GetTopicResponse, GetTopicsResponse};
use iggy_binary_protocol::responses::users::{GetUsersResponse, UserDetailsResponse};
use iggy_binary_protocol::WireIdentifier;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

/// The server's version string in login replies and stats.
pub const SERVER_VERSION: &str = concat!("cairn ", env!("CARGO_PKG_VERSION"));

/// The cluster this member serves in: its name, and its metadata group as this member's
/// replica sees it.
pub struct ClusterSource {
    /// What `GetClusterMetadata` answers as the cluster's name.
    pub name: String,
    /// This member's configured client address (what clients are told to dial).
    pub client: SocketAddr,
    /// The group's status: cheap (`false`: for each request that reads the roster), or
    /// with this member's partition groups counted (`true`: a walk over every group, for
    /// `/metrics`).
    pub status: Box<dyn Fn(bool) -> cairn_cluster::group::GroupStatus + std::marker::Send + Sync>,
}

/// What every command shares: the node and the server's own bookkeeping (no listener state).
pub struct Context {
    pub env: Env,
    pub node: Node,
    /// What a new topic gets when its creation does not say.
    pub topic_defaults: TopicDefaults,
    /// The live binary-protocol connections (GetClients, GetMe).
    pub registry: registry::Registry,
    /// Login attempts: failed ones per address and account, verifications in flight.
    pub logins: login_limit::LoginLimiter,
    /// The address the binary listener is bound to (reported by GetClusterMetadata).
    pub local_addr: SocketAddr,
    /// Wall-clock µs at start.
    pub started_at: u64,
    next_session: AtomicU64,
    /// What the command layer counts (`/metrics`).
    pub metrics: metrics::CommandMetrics,
    /// Bytes of dispatched (`ack=none`) sends not yet appended.
    pub dispatch_budget: messages::DispatchBudget,
    /// Bytes of request bodies being read, by every adapter
    /// (`limits.buffered_bytes`): a large body waits for room.
    pub buffers: cairn_engine::env::chan::ByteBudget,
    /// Each user's share of `buffers`: a logged-in session's body larger than a login's
    /// takes its size from it, so one tenant's sends hold at most its share.
    pub bodies: replies::Shares,
    /// Poll replies built and not yet written, by every adapter: reserved before they are
    /// built, within each user's share ([`replies`]).
    pub replies: replies::Shares,
    /// Consumer-group memberships one user's connections may hold (root's uncounted).
    pub memberships_per_user: usize,
    /// Held by a create of partitions from its check of the node's limit until it is
    /// journaled, so two at once cannot both pass the check.
    pub partition_creates: cairn_engine::env::chan::Semaphore,
    /// Where `GetStats` reads the process's figures: set by `cairn serve`, never by the
    /// simulator (whose stats then carry zeros).
    pub figures: std::sync::OnceLock<crate::process::FiguresSource>,
    /// The cluster's group as this member's replica sees it (`/metrics`): set by `cairn serve`
    /// under `[cluster]`.
    pub cluster: std::sync::OnceLock<ClusterSource>,
    /// The simulator's hooks at the layer's edges (none in production).
    pub hooks: hooks::CommandHooks,
}

impl Context {
    pub fn new(
        node: Node,
        topic_defaults: TopicDefaults,
        logins: login_limit::LoginLimiter,
        local_addr: SocketAddr,
        buffered_bytes: u64,
        hooks: hooks::CommandHooks,
    ) -> Context {
        let env = node.env().clone();
        let now = env.clock.wall_micros();
        let buffers = cairn_engine::env::chan::ByteBudget::new(buffered_bytes);
        Context {
            started_at: now,
            // Session numbers grow across restarts too: a session from before one never
            // matches one after it.
            next_session: AtomicU64::new(now.max(1)),
            env,
            node,
            topic_defaults,
            registry: registry::Registry::default(),
            logins,
            local_addr,
            metrics: metrics::CommandMetrics::default(),
            dispatch_budget: messages::DispatchBudget::new(messages::DISPATCH_BUDGET_UNITS),
            buffers: buffers.clone(),
            bodies: replies::Shares::over(buffers, replies::USERS_SHARING, u64::MAX),
            replies: replies::Shares::new(
                buffered_bytes,
                replies::USERS_SHARING,
                cairn_engine::config::PartitionSettings::default().max_poll_bytes,
            ),
            memberships_per_user: usize::MAX,
            partition_creates: cairn_engine::env::chan::Semaphore::new(1),
            figures: std::sync::OnceLock::new(),
            cluster: std::sync::OnceLock::new(),
            hooks,
        }
    }

    /// A session number for a new login: nonzero and increasing (`docs/wire.md` §2.2).
    pub fn next_session(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }
}

/// Who asks: a login's session, and its entry in the registry of live connections.
pub struct Caller<'a> {
    pub session: &'a Session,
    /// Its connection's numeric client id (0: not a listed connection, as HTTP's callers).
    pub client_id: u32,
    /// The most batch bytes a poll's reply may carry: the room its adapter reserved for it
    /// ([`replies::Shares`]), `u64::MAX` when nothing was reserved.
    pub reply_room: u64,
}

/// Every command the layer serves. Journaled metadata operations travel as the engine's
/// [`MetaOp`] (the body the journal keeps); the rest as the codec's request types.
#[derive(Debug)]
pub enum Command {
    GetStats,
    GetClusterMetadata,
    GetMe,
    GetClient(GetClientRequest),
    GetClients,
    GetUser(GetUserRequest),
    GetUsers,
    CreateUser(CreateUserRequest),
    ChangePassword(ChangePasswordRequest),
    GetStream(GetStreamRequest),
    GetStreams,
    GetTopic(GetTopicRequest),
    GetTopics(GetTopicsRequest),
    SendMessages(Send),
    PollMessages(PollMessagesRequest),
    /// A poll the SDK routed here (`POLL_MESSAGES_ON_PRIMARY`), on a data connection
    /// attached to its coordinator's session ([`roster`]).
    PollOnPrimary(PollMessagesRequest),
    /// Where a consumer's auto-commit polls go (`GET_POLL_ROUTING`).
    PollRouting(PollMessagesRequest),
    /// Where a consumer's offset writes go (`GET_CONSUMER_OFFSET_ROUTING`).
    OffsetRouting(GetConsumerOffsetRequest),
    GetConsumerOffset(GetConsumerOffsetRequest),
    StoreConsumerOffset(StoreConsumerOffsetRequest),
    DeleteConsumerOffset(DeleteConsumerOffsetRequest),
    DeleteSegments(DeleteSegmentsRequest),
    GetConsumerGroup(GetConsumerGroupRequest),
    GetConsumerGroups(GetConsumerGroupsRequest),
    JoinConsumerGroup(JoinConsumerGroupRequest),
    LeaveConsumerGroup(LeaveConsumerGroupRequest),
    SyncConsumerGroup(SyncConsumerGroupRequest),
    GetPersonalAccessTokens,
    CreatePersonalAccessToken(CreatePersonalAccessTokenRequest),
    DeletePersonalAccessToken(DeletePersonalAccessTokenRequest),
    /// A journaled metadata operation: streams, topics, partitions, groups, users.
    Meta(MetaOp),
    /// A command of Iggy's table that cairn does not serve (by its code).
    Unserved(u32),
}

/// What a command's names point at, before they are resolved.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    Nothing,
    Stream(&'a WireIdentifier),
    Topic(&'a WireIdentifier, &'a WireIdentifier),
    User(&'a WireIdentifier),
    Client(u32),
}

/// What a command's names resolved to, on the request's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    Nothing,
    Stream(u32),
    Topic(u32, u32),
    User(u32),
    Client(u32),
}

/// A command's answer, typed; each adapter encodes it its own way.
#[derive(Debug)]
pub enum Reply {
    /// Done, nothing to say (the binary protocol's empty body).
    Done,
    /// A read found nothing (an empty body on the binary protocol, 404 over HTTP).
    NotFound,
    Stats(Box<StatsResponse>),
    ClusterMetadata(ClusterMetadataResponse),
    Client(ClientDetailsResponse),
    Clients(GetClientsResponse),
    User(UserDetailsResponse),
    Users(GetUsersResponse),
    Stream(GetStreamResponse),
    Streams(GetStreamsResponse),
    Topic(GetTopicResponse),
    Topics(GetTopicsResponse),
    Sent(SendOutcome),
    Polled(Polled),
    Routing(PollRoutingResponse),
    ConsumerOffset(ConsumerOffsetResponse),
    Group(ConsumerGroupDetailsResponse),
    Groups(GetConsumerGroupsResponse),
    Assignment(SyncConsumerGroupResponse),
    Tokens(GetPersonalAccessTokensResponse),
    RawToken(RawPersonalAccessTokenResponse),
}

/// One request being served: who asks, on which view, and what its names resolved to.
pub struct Call<'a> {
    pub cx: &'a Context,
    pub caller: &'a Caller<'a>,
    pub view: &'a MetaView,
    pub target: Resolved,
}

impl Call<'_> {
    pub fn session(&self) -> &Session {
        self.caller.session
    }
}

/// Runs one command for `caller`: the session check, name resolution, the permission rule
/// of its row, its handler; counted by command and status.
pub async fn execute(cx: &Context, caller: &Caller<'_>, command: Command) -> Result<Reply, Status> {
    let code = command.code();
    let row = table::row(code);
    let span = tracing::debug_span!("command", name = row.name);
    let result =
        tracing::Instrument::instrument(fresh_then_run(cx, caller, row, command), span).await;
    cx.metrics
        .command(code, result.as_ref().map_or_else(|s| s.code, |_| 0));
    result
}

/// Runs the command on the node's view, waiting first, for a row that reads the metadata,
/// until that view is fresh (a clustered node's read index; a single node's always is).
async fn fresh_then_run(
    cx: &Context,
    caller: &Caller<'_>,
    row: &Row,
    command: Command,
) -> Result<Reply, Status> {
    if row.reads_metadata() {
        cx.node.fresh().await?;
    }
    let view = cx.node.view();
    run(cx, caller, &view, row, command).await
}

async fn run(
    cx: &Context,
    caller: &Caller<'_>,
    view: &MetaView,
    row: &Row,
    command: Command,
) -> Result<Reply, Status> {
    session::check(cx, caller.session, view)?;
    let target = match resolve(view, command.target()) {
        Ok(target) => target,
        Err(_) if !may_see_missing(cx, caller.session, view, command.target()) => {
            return Err(Status::of(status::codes::UNAUTHORIZED))
        }
        Err(_) if row.missing == Missing::NotFound => return Ok(Reply::NotFound),
        Err(e) => return Err(e.into()),
    };
    let call = Call {
        cx,
        caller,
        view,
        target,
    };
    permissions::check(&call, row.rule)?;
    dispatch(&call, command).await
}

/// Whether `session` may learn that a name of `target` does not exist: it may read the
/// space the name was looked up in (every stream, the topics of the stream that resolved,
/// every user). Otherwise a missing name is answered as forbidden, as one that exists
/// would be, so that "not found" never tells what exists (review S16).
fn may_see_missing(cx: &Context, session: &Session, view: &MetaView, target: Target<'_>) -> bool {
    use permissions::Action;
    let space = match target {
        Target::Nothing | Target::Client(_) => return true,
        Target::Stream(_) => Action::ReadStreams,
        Target::Topic(stream, _) => match view.stream_id(stream) {
            Ok(s) => Action::ReadTopics(s),
            Err(_) => Action::ReadStreams,
        },
        Target::User(_) => Action::ReadUsers,
    };
    permissions::require(cx, session, view, space).is_ok()
}

/// A command's names, resolved on `view`.
fn resolve(view: &MetaView, target: Target<'_>) -> cairn_engine::node::NodeResult<Resolved> {
    Ok(match target {
        Target::Nothing => Resolved::Nothing,
        Target::Stream(stream) => Resolved::Stream(view.stream_id(stream)?),
        Target::Topic(stream, topic) => {
            let (s, t) = view.topic_ids(stream, topic)?;
            Resolved::Topic(s, t)
        }
        Target::User(user) => Resolved::User(view.user_id(user)?),
        Target::Client(id) => Resolved::Client(id),
    })
}

/// The handler of each command.
async fn dispatch(call: &Call<'_>, command: Command) -> Result<Reply, Status> {
    match command {
        Command::GetStats => reads::stats(call).await,
        Command::GetClusterMetadata => Ok(roster::cluster_metadata(call)),
        Command::GetMe => Ok(reads::client(call, call.caller.client_id)),
        Command::GetClient(r) => Ok(reads::client(call, r.client_id)),
        Command::GetClients => Ok(reads::clients(call)),
        Command::GetUser(_) => Ok(reads::user(call)),
        Command::GetUsers => Ok(reads::users(call)),
        Command::CreateUser(r) => meta::create_user(call, r).await,
        Command::ChangePassword(r) => meta::change_password(call, r).await,
        Command::GetStream(_) => reads::stream(call).await,
        Command::GetStreams => reads::streams(call).await,
        Command::GetTopic(_) => reads::topic(call).await,
        Command::GetTopics(_) => reads::topics(call).await,
        Command::SendMessages(send) => messages::send(call, send).await,
        Command::PollMessages(r) | Command::PollOnPrimary(r) => messages::poll(call, r).await,
        Command::PollRouting(_) | Command::OffsetRouting(_) => Ok(roster::routing(call)),
        Command::GetConsumerOffset(r) => consumers::get_offset(call, r).await,
        Command::StoreConsumerOffset(r) => consumers::store_offset(call, r).await,
        Command::DeleteConsumerOffset(r) => consumers::delete_offset(call, r).await,
        Command::DeleteSegments(r) => consumers::delete_segments(call, r).await,
        Command::GetConsumerGroup(r) => consumers::get_group(call, r).await,
        Command::GetConsumerGroups(r) => consumers::get_groups(call, r).await,
        Command::JoinConsumerGroup(r) => consumers::join_group(call, &r.group_id).await,
        Command::LeaveConsumerGroup(r) => consumers::leave_group(call, &r.group_id).await,
        Command::SyncConsumerGroup(r) => consumers::sync_group(call, r).await,
        Command::GetPersonalAccessTokens => Ok(tokens::list(call)),
        Command::CreatePersonalAccessToken(r) => tokens::create(call, r).await,
        Command::DeletePersonalAccessToken(r) => tokens::delete(call, r).await,
        Command::Meta(op) => meta::execute(call, op).await,
        Command::Unserved(code) => {
            tracing::debug!(code, "a known command cairn does not serve");
            Err(Status::of(codes::FEATURE_UNAVAILABLE))
        }
    }
}

impl Command {
    /// Iggy's command code.
    pub fn code(&self) -> u32 {
        use iggy_binary_protocol::codes::*;
        match self {
            Command::GetStats => GET_STATS_CODE,
            Command::GetClusterMetadata => GET_CLUSTER_METADATA_CODE,
            Command::GetMe => GET_ME_CODE,
            Command::GetClient(_) => GET_CLIENT_CODE,
            Command::GetClients => GET_CLIENTS_CODE,
            Command::GetUser(_) => GET_USER_CODE,
            Command::GetUsers => GET_USERS_CODE,
            Command::CreateUser(_) => CREATE_USER_CODE,
            Command::ChangePassword(_) => CHANGE_PASSWORD_CODE,
            Command::GetStream(_) => GET_STREAM_CODE,
            Command::GetStreams => GET_STREAMS_CODE,
            Command::GetTopic(_) => GET_TOPIC_CODE,
            Command::GetTopics(_) => GET_TOPICS_CODE,
            Command::SendMessages(_) => SEND_MESSAGES_CODE,
            Command::PollMessages(_) => POLL_MESSAGES_CODE,
            Command::PollOnPrimary(_) => POLL_MESSAGES_ON_PRIMARY_CODE,
            Command::PollRouting(_) => GET_POLL_ROUTING_CODE,
            Command::OffsetRouting(_) => GET_CONSUMER_OFFSET_ROUTING_CODE,
            Command::GetConsumerOffset(_) => GET_CONSUMER_OFFSET_CODE,
            Command::StoreConsumerOffset(_) => STORE_CONSUMER_OFFSET_CODE,
            Command::DeleteConsumerOffset(_) => DELETE_CONSUMER_OFFSET_CODE,
            Command::DeleteSegments(_) => DELETE_SEGMENTS_CODE,
            Command::GetConsumerGroup(_) => GET_CONSUMER_GROUP_CODE,
            Command::GetConsumerGroups(_) => GET_CONSUMER_GROUPS_CODE,
            Command::JoinConsumerGroup(_) => JOIN_CONSUMER_GROUP_CODE,
            Command::LeaveConsumerGroup(_) => LEAVE_CONSUMER_GROUP_CODE,
            Command::SyncConsumerGroup(_) => SYNC_CONSUMER_GROUP_CODE,
            Command::GetPersonalAccessTokens => GET_PERSONAL_ACCESS_TOKENS_CODE,
            Command::CreatePersonalAccessToken(_) => CREATE_PERSONAL_ACCESS_TOKEN_CODE,
            Command::DeletePersonalAccessToken(_) => DELETE_PERSONAL_ACCESS_TOKEN_CODE,
            Command::Meta(op) => op
                .operation()
                .to_command_code()
                .expect("every journaled op has a command code"),
            Command::Unserved(code) => *code,
        }
    }

    /// The names the command acts on.
    pub fn target(&self) -> Target<'_> {
        match self {
            Command::GetClient(r) => Target::Client(r.client_id),
            Command::GetUser(r) => Target::User(&r.user_id),
            Command::ChangePassword(r) => Target::User(&r.user_id),
            Command::GetStream(r) => Target::Stream(&r.stream_id),
            Command::GetTopic(r) => Target::Topic(&r.stream_id, &r.topic_id),
            Command::GetTopics(r) => Target::Stream(&r.stream_id),
            Command::SendMessages(r) => Target::Topic(&r.stream, &r.topic),
            Command::PollMessages(r) | Command::PollOnPrimary(r) | Command::PollRouting(r) => {
                Target::Topic(&r.stream_id, &r.topic_id)
            }
            Command::OffsetRouting(r) => Target::Topic(&r.stream_id, &r.topic_id),
            Command::GetConsumerOffset(r) => Target::Topic(&r.stream_id, &r.topic_id),
            Command::StoreConsumerOffset(r) => Target::Topic(&r.stream_id, &r.topic_id),
            Command::DeleteConsumerOffset(r) => Target::Topic(&r.stream_id, &r.topic_id),
            Command::DeleteSegments(r) => Target::Topic(&r.stream_id, &r.topic_id),
            Command::GetConsumerGroup(r) => Target::Topic(&r.stream_id, &r.topic_id),
            Command::GetConsumerGroups(r) => Target::Topic(&r.stream_id, &r.topic_id),
            Command::JoinConsumerGroup(r) => Target::Topic(&r.stream_id, &r.topic_id),
            Command::LeaveConsumerGroup(r) => Target::Topic(&r.stream_id, &r.topic_id),
            Command::SyncConsumerGroup(r) => Target::Topic(&r.stream_id, &r.topic_id),
            Command::Meta(op) => meta::target(op),
            Command::GetStats
            | Command::GetClusterMetadata
            | Command::GetMe
            | Command::GetClients
            | Command::GetUsers
            | Command::CreateUser(_)
            | Command::GetStreams
            | Command::GetPersonalAccessTokens
            | Command::CreatePersonalAccessToken(_)
            | Command::DeletePersonalAccessToken(_)
            | Command::Unserved(_) => Target::Nothing,
        }
    }
}

//! Each request, from its checked header to its reply: the login and session gate, then a
//! table of command codes, each handler decoding its body with the codec, checking the
//! user's permission, calling the node and encoding the reply (SPEC §4, §5).
//!
//! Every request gets exactly one frame back: a reply (status 0 with its body, or an error
//! status with an empty body) or an eviction. Nothing is written for a refused request: the
//! header, the session, the body and the permission are all checked before the node is
//! called.

use crate::connection::Conn;
use crate::frame::{self, status, Echo, ReplyMeta};
use crate::permissions::{allowed, Action};
use crate::responses::{self, Numbers, PartitionNumbers};
use crate::server::Shared;
use crate::session::{Dedup, Session};
use crate::TopicDefaults;
use bytes::{Buf, Bytes, BytesMut};
use cairn_engine::node::ops::MetaOp;
use cairn_engine::node::{Login, NodeError, PartitionKey, TokenExpiry};
use cairn_engine::partition::PartitionError;
use cairn_engine::state::tokens::TokenHash;
use iggy_binary_protocol::codes::*;
use iggy_binary_protocol::requests::consumer_groups::{
    GetConsumerGroupRequest, GetConsumerGroupsRequest, JoinConsumerGroupRequest,
    LeaveConsumerGroupRequest, SyncConsumerGroupRequest,
};
use iggy_binary_protocol::requests::consumer_offsets::{
    DeleteConsumerOffsetRequest, GetConsumerOffsetRequest, StoreConsumerOffsetRequest,
};
use iggy_binary_protocol::requests::messages::{PollMessagesRequest, SendMessagesHeader};
use iggy_binary_protocol::requests::personal_access_tokens::{
    CreatePersonalAccessTokenRequest, DeletePersonalAccessTokenRequest,
    GetPersonalAccessTokensRequest,
};
use iggy_binary_protocol::requests::segments::DeleteSegmentsRequest;
use iggy_binary_protocol::requests::streams::GetStreamRequest;
use iggy_binary_protocol::requests::system::GetClientRequest;
use iggy_binary_protocol::requests::topics::{GetTopicRequest, GetTopicsRequest};
use iggy_binary_protocol::requests::users::{
    ChangePasswordRequest, CreateUserRequest, GetUserRequest, LoginRegisterRequest,
    LoginRegisterWithPatRequest,
};
use iggy_binary_protocol::responses::clients::ClientDetailsResponse;
use iggy_binary_protocol::responses::clients::GetClientsResponse;
use iggy_binary_protocol::responses::clients::{ClientResponse, ConsumerGroupInfoResponse};
use iggy_binary_protocol::responses::consumer_groups::ConsumerGroupResponse;
use iggy_binary_protocol::responses::consumer_groups::GetConsumerGroupsResponse;
use iggy_binary_protocol::responses::consumer_groups::SyncConsumerGroupResponse;
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::responses::messages::{
    SendMessagesConfirmationResponse, SendMessagesResponse,
};
use iggy_binary_protocol::responses::personal_access_tokens::{
    GetPersonalAccessTokensResponse, PersonalAccessTokenResponse, RawPersonalAccessTokenResponse,
};
use iggy_binary_protocol::responses::streams::GetStreamsResponse;
use iggy_binary_protocol::responses::system::StatsResponse;
use iggy_binary_protocol::responses::system::{ClusterMetadataResponse, ClusterNodeResponse};
use iggy_binary_protocol::responses::topics::GetTopicsResponse;
use iggy_binary_protocol::responses::users::GetUsersResponse;
use iggy_binary_protocol::responses::users::LoginRegisterResponse;
use iggy_binary_protocol::{
    ClientVersionInfo, EvictionReason, Operation, WireDecode, WireEncode, WireIdentifier, WireName,
    WireOptions, HEADER_SIZE,
};
use secrecy::ExposeSecret;
use std::net::IpAddr;
use tracing::Instrument;

/// The server's version string in login replies and stats.
pub const SERVER_VERSION: &str = concat!("cairn ", env!("CARGO_PKG_VERSION"));

/// What to write back.
pub enum Answer {
    /// A reply frame, in pieces written back to back (a poll's stored batches are not
    /// copied).
    Frame(Vec<Bytes>),
    /// An eviction; the connection closes after it.
    Evict(Bytes),
}

/// A refusal: the Iggy status code to answer with, what went wrong in words (when the node
/// said more than the code: the HTTP adapter's error bodies carry it), and whose fault it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: u32,
    pub reason: Option<String>,
    pub fault: Fault,
}

/// Whose fault a refusal is: the client's request, a condition that passes (a stopped node,
/// a fenced partition, a full queue or disk), or the server's own failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Client,
    Unavailable,
    Server,
}

impl Status {
    /// A refusal the client caused, with no more to say than its code.
    pub const fn of(code: u32) -> Status {
        Status {
            code,
            reason: None,
            fault: Fault::Client,
        }
    }
}

impl From<NodeError> for Status {
    fn from(e: NodeError) -> Status {
        tracing::debug!(error = %e, "request refused");
        let code = match &e {
            NodeError::Partition(PartitionError::InvalidBatch(
                cairn_engine::format::FormatError::BatchChecksum { .. },
            )) => 4039,
            _ => e.code(),
        };
        Status {
            code,
            fault: fault_of(&e),
            reason: Some(e.to_string()),
        }
    }
}

/// The fault table: what a node error says about who should act.
fn fault_of(e: &NodeError) -> Fault {
    match e {
        NodeError::Stopped(_) | NodeError::Busy(_) | NodeError::MetadataNoSpace => {
            Fault::Unavailable
        }
        NodeError::Partition(p) => match p {
            PartitionError::Fenced(_)
            | PartitionError::NoSpace
            | PartitionError::JournalFull { .. }
            | PartitionError::NodeJournalFull { .. } => Fault::Unavailable,
            PartitionError::Io { .. }
            | PartitionError::OffsetDamaged { .. }
            | PartitionError::AlreadyExists(_) => Fault::Server,
            PartitionError::InvalidBatch(_)
            | PartitionError::OffsetBeyondEnd { .. }
            | PartitionError::InvalidConfig(_)
            | PartitionError::ZeroCount
            | PartitionError::ActiveSegment { .. } => Fault::Client,
        },
        NodeError::DirectoryInTheWay(_) => Fault::Server,
        _ => Fault::Client,
    }
}

fn undecodable(what: &str, e: impl std::fmt::Display) -> Status {
    tracing::debug!(what, error = %e, "undecodable request body");
    Status::of(status::INVALID_COMMAND)
}

/// Decodes a whole body as `T`; trailing bytes are a malformed request.
fn decode<T: WireDecode>(body: &[u8]) -> Result<T, Status> {
    let (value, used) = T::decode(body).map_err(|e| undecodable(std::any::type_name::<T>(), e))?;
    if used != body.len() {
        return Err(undecodable(
            std::any::type_name::<T>(),
            format!("{} trailing bytes", body.len() - used),
        ));
    }
    Ok(value)
}

fn encoded(value: &impl WireEncode) -> Vec<u8> {
    value.to_bytes().to_vec()
}

/// The body of a successful reply, before framing.
type Handled = Result<Vec<u8>, Status>;

/// Answers one framed request.
pub async fn answer(conn: &mut Conn, header: &[u8; HEADER_SIZE], body: BytesMut) -> Answer {
    let echo = Echo::of(header);
    let request = match frame::decode_request(header, &body) {
        Ok(request) => request,
        Err(e) => {
            tracing::debug!(error = %e, "request refused at its header");
            return reply(conn, echo, Err(Status::of(e.status())));
        }
    };
    let span = tracing::debug_span!(
        "request",
        code = request.code,
        request = request.header.request
    );
    answer_request(conn, echo, request, body)
        .instrument(span)
        .await
}

async fn answer_request(
    conn: &mut Conn,
    echo: Echo,
    request: frame::Request,
    body: BytesMut,
) -> Answer {
    let code = request.code;
    let operation = request.header.operation;
    match code {
        PING_CODE => reply(conn, echo, Ok(Vec::new())),
        LOGIN_REGISTER_CODE => login(conn, echo, &body).await,
        LOGOUT_USER_CODE => logout(conn, echo, &request.header).await,
        LOGIN_USER_CODE | LOGIN_WITH_PERSONAL_ACCESS_TOKEN_CODE => {
            evict(echo, EvictionReason::MalformedLogin)
        }
        _ => {
            if let Err(answer) = gate(conn, echo, &request.header).await {
                return answer;
            }
            let key = (echo.client, echo.request, echo.request_checksum);
            // A created token's reply is its raw token: it is not kept for a retry (Iggy
            // refuses to replay it too); a retried creation finds the name taken.
            let dedup = operation.is_metadata()
                && echo.request_checksum != 0
                && operation != Operation::CreatePersonalAccessToken;
            if dedup {
                let reframe = |body: &[u8]| {
                    frame::reply(echo, meta(conn, operation), 0, false, body).freeze()
                };
                let table = &session(conn).dedup;
                if let Some(cached) = table.get(&key) {
                    let cached = conn.shared.hooks.dedup_hit(table, &key, cached, &reframe);
                    tracing::debug!("a retried request answered from the duplicate table");
                    return Answer::Frame(vec![cached]);
                }
            }
            let answer = match authorized(conn, code, body).await {
                Outcome::Body(result) => {
                    // Only what was applied is cached: a refusal (a full disk, a busy
                    // node) retried is tried again.
                    let applied = result.is_ok();
                    let answer = reply(conn, echo, result);
                    if let (true, true, Answer::Frame(pieces), Some(session)) =
                        (dedup, applied, &answer, conn.session.as_mut())
                    {
                        session.dedup.insert(key, pieces.concat().into());
                    }
                    answer
                }
                Outcome::Poll(result) => poll_reply(conn, echo, result),
            };
            answer
        }
    }
}

fn session(conn: &Conn) -> &Session {
    conn.session.as_ref().expect("the gate passed")
}

fn meta(conn: &Conn, operation: Operation) -> ReplyMeta {
    ReplyMeta {
        session: conn.session.as_ref().map_or(0, |s| s.session),
        // Only metadata-plane replies feed the SDK's commit watermark: the others need no
        // view read.
        commit: if operation.is_metadata_plane() {
            conn.shared.node.view().op
        } else {
            0
        },
    }
}

/// A reply frame; result-framed operations get their `[count = 0]` prefix on success.
fn reply(conn: &Conn, echo: Echo, result: Handled) -> Answer {
    let meta = meta(conn, echo.operation);
    let framed = echo.operation.is_result_framed() || echo.operation == Operation::Register;
    let frame = match result {
        Ok(body) => frame::reply(echo, meta, 0, framed, &body),
        Err(Status { code, .. }) => frame::reply(echo, meta, code, framed, &[]),
    };
    Answer::Frame(vec![frame.freeze()])
}

fn evict(echo: Echo, reason: EvictionReason) -> Answer {
    tracing::debug!(?reason, "evicting the session");
    Answer::Evict(frame::eviction(echo.client, reason).freeze())
}

/// The session gate: logged in, as the login that is bound here, whose user still holds.
async fn gate(
    conn: &mut Conn,
    echo: Echo,
    header: &iggy_binary_protocol::RequestHeader,
) -> Result<(), Answer> {
    let replicated = header.operation != Operation::NonReplicated;
    let unauthenticated = |conn: &Conn| {
        if replicated {
            evict(echo, EvictionReason::NoSession)
        } else {
            reply(conn, echo, Err(Status::of(status::UNAUTHENTICATED)))
        }
    };
    let Some(session) = conn.session.as_ref() else {
        return Err(unauthenticated(conn));
    };
    if session.client != header.client || session.session != header.session {
        return Err(unauthenticated(conn));
    }
    let now = conn.shared.env.clock.wall_micros();
    if let Err(why) =
        (conn.shared.hooks).session_check(session.still_valid(&conn.shared.node.view(), now))
    {
        tracing::info!(user = session.user_id, ?why, "a session lost its access");
        end_session(conn).await;
        return Err(reply(conn, echo, Err(Status::of(status::UNAUTHENTICATED))));
    }
    Ok(())
}

// Login and logout --------------------------------------------------------------------------

/// Why a login was refused: the status an adapter answers with, and the eviction that
/// carries it on the binary protocol (`None` when the node could not answer: the
/// connection stays usable and may try again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginRefused {
    pub status: Status,
    pub eviction: Option<EvictionReason>,
}

impl LoginRefused {
    fn evicted(code: u32, reason: EvictionReason) -> LoginRefused {
        LoginRefused {
            status: Status::of(code),
            eviction: Some(reason),
        }
    }

    /// A wrong username or password, or an inactive user (hidden, as Iggy hides it).
    fn credentials() -> LoginRefused {
        Self::evicted(
            status::INVALID_CREDENTIALS,
            EvictionReason::InvalidCredentials,
        )
    }

    /// A token nobody holds (or one already gone again).
    fn token() -> LoginRefused {
        Self::evicted(NodeError::InvalidToken.code(), EvictionReason::InvalidToken)
    }

    fn failed(e: NodeError) -> LoginRefused {
        LoginRefused {
            status: e.into(),
            eviction: None,
        }
    }
}

/// A session for `username` and `password`, for the login client id `client` from `peer`:
/// checked by the node (argon2 on the blocking pool), and counted by the server's
/// failed-login limit for `peer`. The session is not bound to any connection yet.
pub async fn session_for_password(
    shared: &Shared,
    client: u128,
    peer: IpAddr,
    username: &str,
    password: &str,
) -> Result<Session, LoginRefused> {
    let now = shared.env.clock.monotonic_nanos() / 1000;
    if !shared.logins.may_try(peer, now) {
        tracing::warn!(%peer, "login refused: too many failed logins from this address");
        return Err(LoginRefused::credentials());
    }
    let node = shared.node.client(client);
    let login = match node.login(username, password).await {
        Ok(login) => login,
        Err(e) => {
            shared.logins.failed(peer, now);
            tracing::info!(%peer, user = %username, error = %e, "login refused");
            return Err(match e {
                NodeError::InvalidCredentials | NodeError::UserInactive(_) => {
                    LoginRefused::credentials()
                }
                other => LoginRefused::failed(other),
            });
        }
    };
    bind_session(shared, client, node, login, None).ok_or_else(LoginRefused::credentials)
}

/// A session for the raw personal access token `raw`, for the login client id `client`
/// from `peer`, counted by the failed-login limit like a password: refused for a token
/// nobody holds or one past its expiry (status 53 or 54, eviction `InvalidToken`: the SDK
/// reads 53), and for an inactive user (47, eviction `UserInactive`), as Iggy answers.
/// The session lasts as long as the token: deleted or expired, the session's next request
/// is refused.
pub async fn session_for_token(
    shared: &Shared,
    client: u128,
    peer: IpAddr,
    raw: &str,
) -> Result<Session, LoginRefused> {
    let now = shared.env.clock.monotonic_nanos() / 1000;
    if !shared.logins.may_try(peer, now) {
        tracing::warn!(%peer, "token login refused: too many failed logins from this address");
        return Err(LoginRefused::token());
    }
    let node = shared.node.client(client);
    let login = match node.login_with_token(raw).await {
        Ok(login) => login,
        Err(e) => {
            shared.logins.failed(peer, now);
            tracing::info!(%peer, error = %e, "token login refused");
            return Err(match e {
                NodeError::InvalidToken | NodeError::TokenExpired { .. } => {
                    LoginRefused::evicted(e.code(), EvictionReason::InvalidToken)
                }
                NodeError::UserInactive(_) => {
                    LoginRefused::evicted(e.code(), EvictionReason::UserInactive)
                }
                other => LoginRefused::failed(other),
            });
        }
    };
    let hash = cairn_engine::state::tokens::hash_token(raw);
    bind_session(shared, client, node, login, Some(hash)).ok_or_else(LoginRefused::token)
}

/// The session of `login` as the view holds its user now (`None` if the user is gone).
fn bind_session(
    shared: &Shared,
    client: u128,
    node: cairn_engine::node::Client,
    login: Login,
    token: Option<TokenHash>,
) -> Option<Session> {
    let view = shared.node.view();
    let user = view
        .user(login.user_id)
        .filter(|u| u.created_op == login.incarnation)?;
    Some(Session {
        client,
        session: shared.next_session(),
        user_id: login.user_id,
        incarnation: login.incarnation,
        password_hash: user.password_hash.clone(),
        token,
        node,
        dedup: Dedup::default(),
    })
}

/// The two shapes of a Register body after its version prefix (SPEC §2.2, trap T10).
enum Credentials {
    Password(LoginRegisterRequest),
    Token(LoginRegisterWithPatRequest),
}

async fn login(conn: &mut Conn, echo: Echo, body: &[u8]) -> Answer {
    let Ok((version, used)) = ClientVersionInfo::decode(body) else {
        return evict(echo, EvictionReason::MalformedLogin);
    };
    if !iggy_binary_protocol::is_protocol_compatible(version.protocol_version) {
        tracing::info!(
            version = version.protocol_version,
            sdk = version.sdk_name.as_str(),
            "login refused: incompatible protocol version"
        );
        return evict(echo, EvictionReason::IncompatibleProtocol);
    }
    // The password shape first, then the token's (as Iggy tries them); either must be the
    // whole body.
    let tail = &body[used..];
    let credentials = match LoginRegisterRequest::decode_after_prefix(version.clone(), tail) {
        Ok((request, rest)) if rest == tail.len() => Credentials::Password(request),
        _ => match LoginRegisterWithPatRequest::decode_after_prefix(version, tail) {
            Ok((request, rest)) if rest == tail.len() => Credentials::Token(request),
            _ => return evict(echo, EvictionReason::MalformedLogin),
        },
    };
    end_session(conn).await;
    let shared = conn.shared.clone();
    let peer = conn.peer.ip();
    let session = match &credentials {
        Credentials::Password(request) => {
            session_for_password(
                &shared,
                echo.client,
                peer,
                request.username.as_str(),
                request.password.expose_secret(),
            )
            .await
        }
        Credentials::Token(request) => {
            session_for_token(&shared, echo.client, peer, request.token.expose_secret()).await
        }
    };
    let session = match session {
        Ok(session) => session,
        Err(LoginRefused {
            eviction: Some(reason),
            ..
        }) => return evict(echo, reason),
        Err(LoginRefused { status, .. }) => return reply(conn, echo, Err(status)),
    };
    let response = LoginRegisterResponse {
        user_id: session.user_id,
        session: session.session,
        server_protocol_version: iggy_binary_protocol::IGGY_PROTOCOL_VERSION,
        server_version: WireName::new(SERVER_VERSION).expect("a valid name"),
    };
    conn.id = shared.registry.renew(conn.id, |entry| {
        entry.user_id = Some(session.user_id);
        entry.client = session.client;
        entry.groups.clear();
    });
    tracing::debug!(
        user = session.user_id,
        client_id = conn.id,
        token = session.token.is_some(),
        "logged in"
    );
    conn.session = Some(session);
    reply(conn, echo, Ok(encoded(&response)))
}

async fn logout(
    conn: &mut Conn,
    echo: Echo,
    header: &iggy_binary_protocol::RequestHeader,
) -> Answer {
    let bound = conn
        .session
        .as_ref()
        .is_some_and(|s| s.client == header.client && s.session == header.session);
    if !bound {
        return evict(echo, EvictionReason::NoSession);
    }
    let answer = reply(conn, echo, Ok(Vec::new()));
    end_session(conn).await;
    answer
}

/// Unbinds the connection's login: it leaves every consumer group it joined.
pub async fn end_session(conn: &mut Conn) {
    if let Some(session) = conn.session.take() {
        if let Err(e) = session.node.disconnect().await {
            tracing::debug!(error = %e, "leaving the session's groups failed");
        }
        conn.shared.registry.update(conn.id, |entry| {
            entry.user_id = None;
            entry.groups.clear();
        });
        // A connection without a login must log in again within the handshake timeout,
        // counted from now (the SDK logs out and in again on one socket).
        conn.connected_at = conn.shared.env.clock.monotonic_nanos();
    }
}

// The command table ------------------------------------------------------------------------

enum Outcome {
    Body(Handled),
    Poll(Result<Polled, Status>),
}

struct Polled {
    head: [u8; 16],
    batches: Vec<Bytes>,
}

fn poll_reply(conn: &Conn, echo: Echo, result: Result<Polled, Status>) -> Answer {
    match result {
        Ok(polled) => {
            let body_len = 16 + polled.batches.iter().map(Bytes::len).sum::<usize>();
            let mut head = Vec::with_capacity(HEADER_SIZE + 16);
            head.extend_from_slice(&frame::reply_header(
                echo,
                meta(conn, echo.operation),
                0,
                body_len,
            ));
            head.extend_from_slice(&polled.head);
            let mut pieces = Vec::with_capacity(1 + polled.batches.len());
            pieces.push(Bytes::from(head));
            pieces.extend(polled.batches);
            Answer::Frame(pieces)
        }
        Err(e) => reply(conn, echo, Err(e)),
    }
}

/// The command table, counted by command and outcome.
async fn authorized(conn: &mut Conn, code: u32, body: BytesMut) -> Outcome {
    let outcome = command_table(conn, code, body).await;
    let status = match &outcome {
        Outcome::Body(Err(s)) | Outcome::Poll(Err(s)) => s.code,
        Outcome::Body(Ok(_)) | Outcome::Poll(Ok(_)) => 0,
    };
    conn.shared.metrics.command(code, status);
    outcome
}

async fn command_table(conn: &mut Conn, code: u32, body: BytesMut) -> Outcome {
    if code == POLL_MESSAGES_CODE {
        return Outcome::Poll(poll(conn, &body).await);
    }
    Outcome::Body(match code {
        GET_STATS_CODE => stats(conn).await,
        GET_CLUSTER_METADATA_CODE => Ok(cluster_metadata(conn)),
        GET_ME_CODE => Ok(client_details(conn, conn.id)
            .map(|d| encoded(&d))
            .unwrap_or_default()),
        GET_CLIENT_CODE => get_client(conn, &body),
        GET_CLIENTS_CODE => get_clients(conn),
        GET_USER_CODE => get_user(conn, &body),
        GET_USERS_CODE => get_users(conn),
        CREATE_USER_CODE => create_user(conn, &body).await,
        CHANGE_PASSWORD_CODE => change_password(conn, &body).await,
        GET_STREAM_CODE => get_stream(conn, &body).await,
        GET_STREAMS_CODE => get_streams(conn).await,
        GET_TOPIC_CODE => get_topic(conn, &body).await,
        GET_TOPICS_CODE => get_topics(conn, &body).await,
        SEND_MESSAGES_CODE => send(conn, body).await,
        GET_CONSUMER_OFFSET_CODE => get_offset(conn, &body).await,
        STORE_CONSUMER_OFFSET_CODE => store_offset(conn, &body).await,
        DELETE_CONSUMER_OFFSET_CODE => delete_offset(conn, &body).await,
        DELETE_SEGMENTS_CODE => delete_segments(conn, &body).await,
        GET_CONSUMER_GROUP_CODE => get_group(conn, &body).await,
        GET_CONSUMER_GROUPS_CODE => get_groups(conn, &body).await,
        JOIN_CONSUMER_GROUP_CODE => join_group(conn, &body).await,
        LEAVE_CONSUMER_GROUP_CODE => leave_group(conn, &body).await,
        SYNC_CONSUMER_GROUP_CODE => sync_group(conn, &body).await,
        GET_PERSONAL_ACCESS_TOKENS_CODE => get_tokens(conn, &body),
        CREATE_PERSONAL_ACCESS_TOKEN_CODE => create_token(conn, &body).await,
        DELETE_PERSONAL_ACCESS_TOKEN_CODE => delete_token(conn, &body).await,
        CREATE_STREAM_CODE
        | UPDATE_STREAM_CODE
        | DELETE_STREAM_CODE
        | PURGE_STREAM_CODE
        | CREATE_TOPIC_CODE
        | UPDATE_TOPIC_CODE
        | DELETE_TOPIC_CODE
        | PURGE_TOPIC_CODE
        | CREATE_PARTITIONS_CODE
        | DELETE_PARTITIONS_CODE
        | CREATE_CONSUMER_GROUP_CODE
        | DELETE_CONSUMER_GROUP_CODE
        | UPDATE_USER_CODE
        | DELETE_USER_CODE
        | UPDATE_PERMISSIONS_CODE => metadata_op(conn, code, &body).await,
        other => {
            tracing::debug!(code = other, "a known command cairn does not serve");
            Err(Status::of(status::FEATURE_UNAVAILABLE))
        }
    })
}

/// What a command answered, for an adapter other than the binary protocol's frames.
pub enum Executed {
    /// The reply body (before any result framing).
    Body(Vec<u8>),
    /// A poll's reply body: the 16-byte head, then the batches.
    Poll(Bytes),
}

/// Runs one command for a connection whose session another adapter set (HTTP: from a
/// bearer token), as the binary protocol's command table does: the session's user must
/// still hold, then the same decoding, permission checks and node calls.
pub async fn execute(conn: &mut Conn, code: u32, body: BytesMut) -> Result<Executed, Status> {
    let Some(session) = conn.session.as_ref() else {
        return Err(Status::of(status::UNAUTHENTICATED));
    };
    let now = conn.shared.env.clock.wall_micros();
    if let Err(why) =
        (conn.shared.hooks).session_check(session.still_valid(&conn.shared.node.view(), now))
    {
        return Err(Status {
            reason: Some(format!("the session's access was revoked: {why:?}")),
            ..Status::of(status::UNAUTHENTICATED)
        });
    }
    match authorized(conn, code, body).await {
        Outcome::Body(result) => result.map(Executed::Body),
        Outcome::Poll(result) => result.map(|polled| {
            let mut body =
                BytesMut::with_capacity(16 + polled.batches.iter().map(Bytes::len).sum::<usize>());
            body.extend_from_slice(&polled.head);
            for batch in &polled.batches {
                body.extend_from_slice(batch);
            }
            Executed::Poll(body.freeze())
        }),
    }
}

/// Refuses unless the session's user may do `action`.
pub fn require(conn: &Conn, action: Action) -> Result<(), Status> {
    let session = session(conn);
    let view = conn.shared.node.view();
    let permissions = session.permissions(&view, &conn.shared.hooks);
    if allowed(session.user_id, permissions.as_ref(), action) {
        Ok(())
    } else {
        tracing::debug!(user = session.user_id, ?action, "permission denied");
        Err(Status::of(status::UNAUTHORIZED))
    }
}

fn topic_ids(
    conn: &Conn,
    stream: &WireIdentifier,
    topic: &WireIdentifier,
) -> Result<(u32, u32), Status> {
    Ok(conn.shared.node.view().topic_ids(stream, topic)?)
}

/// The topic a request names, once the session may do `action` on it: its ids, and
/// identifiers that name it by id for the node (a rename between the check and the node's
/// lookup cannot move the request to a topic the check did not cover).
struct Target {
    s: u32,
    t: u32,
    stream: WireIdentifier,
    topic: WireIdentifier,
}

fn target(
    conn: &Conn,
    stream: &WireIdentifier,
    topic: &WireIdentifier,
    action: fn(u32, u32) -> Action,
) -> Result<Target, Status> {
    let (s, t) = topic_ids(conn, stream, topic)?;
    require(conn, action(s, t))?;
    Ok(Target {
        s,
        t,
        stream: WireIdentifier::numeric(s),
        topic: WireIdentifier::numeric(t),
    })
}

// Metadata ops ------------------------------------------------------------------------------

/// The permission a journaled metadata op needs.
fn op_action(conn: &Conn, op: &MetaOp) -> Result<Action, Status> {
    let view = conn.shared.node.view();
    Ok(match op {
        MetaOp::CreateStream(_) => Action::CreateStream,
        MetaOp::UpdateStream(r) => Action::ManageStream(view.stream_id(&r.stream_id)?),
        MetaOp::DeleteStream(r) => Action::ManageStream(view.stream_id(&r.stream_id)?),
        MetaOp::PurgeStream(r) => Action::ManageStream(view.stream_id(&r.stream_id)?),
        MetaOp::CreateTopic(r) => Action::CreateTopic(view.stream_id(&r.stream_id)?),
        MetaOp::UpdateTopic(r) => manage(view.topic_ids(&r.stream_id, &r.topic_id)?),
        MetaOp::DeleteTopic(r) => manage(view.topic_ids(&r.stream_id, &r.topic_id)?),
        MetaOp::PurgeTopic(r) => manage(view.topic_ids(&r.stream_id, &r.topic_id)?),
        MetaOp::CreatePartitions(r) => manage(view.topic_ids(&r.stream_id, &r.topic_id)?),
        MetaOp::DeletePartitions(r) => manage(view.topic_ids(&r.stream_id, &r.topic_id)?),
        MetaOp::CreateConsumerGroup(r) => manage(view.topic_ids(&r.stream_id, &r.topic_id)?),
        MetaOp::DeleteConsumerGroup(r) => manage(view.topic_ids(&r.stream_id, &r.topic_id)?),
        MetaOp::CreateUser(_)
        | MetaOp::UpdateUser(_)
        | MetaOp::DeleteUser(_)
        | MetaOp::ChangePassword(_)
        | MetaOp::UpdatePermissions(_) => Action::ManageUsers,
        // Served by their own handlers (a user manages its own tokens); never decoded from
        // a client's body here.
        MetaOp::CreatePersonalAccessToken(_) | MetaOp::DeletePersonalAccessToken(_) => {
            return Err(Status::of(status::INVALID_COMMAND))
        }
    })
}

/// Keys a topic creation's options must name for the configuration's defaults to apply.
const FLUSH_KEYS: [&str; 2] = [
    "messages_required_to_save",
    "size_of_messages_required_to_save",
];

/// `options` with the flush thresholds it does not name set to `defaults` (as unsigned
/// values, kinds Uint32 and Uint64).
fn with_flush_defaults(
    options: &WireOptions,
    defaults: TopicDefaults,
) -> Result<WireOptions, Status> {
    let named: Vec<&[u8]> = options.iter().map(|entry| entry.key).collect();
    let mut block = options.as_bytes().to_vec();
    let values: [(u8, Vec<u8>); 2] = [
        (
            11,
            defaults.messages_required_to_save.to_le_bytes().to_vec(),
        ),
        (
            12,
            defaults
                .size_of_messages_required_to_save
                .to_le_bytes()
                .to_vec(),
        ),
    ];
    for (key, (kind, value)) in FLUSH_KEYS.iter().zip(values) {
        if named.contains(&key.as_bytes()) {
            continue;
        }
        for (kind, bytes) in [(2u8, key.as_bytes()), (kind, &value[..])] {
            block.push(kind);
            block.extend_from_slice(&u32::try_from(bytes.len()).expect("short").to_le_bytes());
            block.extend_from_slice(bytes);
        }
    }
    WireOptions::from_bytes(block.into()).map_err(|e| undecodable("topic options", e))
}

fn manage((s, t): (u32, u32)) -> Action {
    Action::ManageTopic(s, t)
}

async fn metadata_op(conn: &mut Conn, code: u32, body: &[u8]) -> Handled {
    let operation = Operation::from_command_code(code).expect("a replicated command");
    let mut op = MetaOp::decode(operation, body).map_err(|e| undecodable("metadata op", e))?;
    require(conn, op_action(conn, &op)?)?;
    if let MetaOp::CreateTopic(request) = &mut op {
        request.options = with_flush_defaults(&request.options, conn.shared.topic_defaults)?;
    }
    let session = session(conn);
    let executed = session.node.execute_as(op.clone(), session.user_id).await?;
    let view = conn.shared.node.view();
    let created = executed.applied.created;
    Ok(match (&op, created) {
        (MetaOp::CreateStream(_), Some(s)) => {
            let stream = view.stream(s).ok_or(Status::of(1009))?;
            encoded(&responses::get_stream(stream, &Numbers::new()))
        }
        (MetaOp::CreateTopic(r), Some(t)) => {
            let s = view.stream_id(&r.stream_id)?;
            let topic = view.find_topic(s, t).ok_or(Status::of(2010))?;
            encoded(&responses::get_topic(s, topic, &Numbers::new()))
        }
        (MetaOp::CreateConsumerGroup(r), Some(g)) => {
            let (s, t) = view.topic_ids(&r.stream_id, &r.topic_id)?;
            let topic = view.topic(s, t);
            let group = topic.groups.get(&g).ok_or(Status::of(5000))?;
            let partitions = u32::try_from(topic.partitions.len()).expect("bounded");
            encoded(&responses::group_details(
                g,
                &group.name,
                partitions,
                Vec::new(),
            ))
        }
        _ => Vec::new(),
    })
}

async fn create_user(conn: &mut Conn, body: &[u8]) -> Handled {
    let request: CreateUserRequest = decode(body)?;
    require(conn, Action::ManageUsers)?;
    let id = session(conn)
        .node
        .create_user(
            request.username.as_str(),
            &request.password,
            request.status,
            request.permissions,
        )
        .await?;
    let view = conn.shared.node.view();
    let user = view.user(id).ok_or(Status::of(20))?;
    Ok(encoded(&responses::user_details(user)))
}

async fn change_password(conn: &mut Conn, body: &[u8]) -> Handled {
    let request: ChangePasswordRequest = decode(body)?;
    let target = conn.shared.node.view().user_id(&request.user_id)?;
    if target != session(conn).user_id {
        require(conn, Action::ManageUsers)?;
    }
    session(conn)
        .node
        .change_password(
            &WireIdentifier::numeric(target),
            &request.current_password,
            &request.new_password,
        )
        .await?;
    Ok(Vec::new())
}

// Personal access tokens: each user manages its own ---------------------------------------------

/// The login the session acts as.
fn login_of(conn: &Conn) -> Login {
    let session = session(conn);
    Login {
        user_id: session.user_id,
        incarnation: session.incarnation,
    }
}

/// The session user's tokens: name and expiry (µs, 0 for never), never the token.
fn get_tokens(conn: &Conn, body: &[u8]) -> Handled {
    let GetPersonalAccessTokensRequest = decode(body)?;
    let view = conn.shared.node.view();
    let tokens = view
        .user_tokens(session(conn).user_id)
        .into_iter()
        .flatten()
        .map(|(name, token)| PersonalAccessTokenResponse {
            name: WireName::new(name.clone()).expect("stored names are valid"),
            expiry_at: token.expiry_at.unwrap_or(0),
        })
        .collect();
    Ok(encoded(&GetPersonalAccessTokensResponse { tokens }))
}

async fn create_token(conn: &Conn, body: &[u8]) -> Handled {
    let request: CreatePersonalAccessTokenRequest = decode(body)?;
    let raw = session(conn)
        .node
        .create_personal_access_token(
            login_of(conn),
            request.name.as_str(),
            TokenExpiry::from_wire(request.expiry),
        )
        .await?;
    Ok(encoded(&RawPersonalAccessTokenResponse {
        token: WireName::new(raw).expect("a raw token is 68 bytes"),
    }))
}

async fn delete_token(conn: &Conn, body: &[u8]) -> Handled {
    let request: DeletePersonalAccessTokenRequest = decode(body)?;
    session(conn)
        .node
        .delete_personal_access_token(login_of(conn), request.name.as_str())
        .await?;
    Ok(Vec::new())
}

// Reads of the metadata -----------------------------------------------------------------------

/// The numbers of every partition `keys` names, from their shards.
async fn numbers(conn: &Conn, keys: impl IntoIterator<Item = PartitionKey>) -> Numbers {
    let node = session(conn).node.clone();
    let keys: Vec<PartitionKey> = keys.into_iter().collect();
    let mut numbers = Numbers::new();
    for key in keys {
        if let Ok(Some(info)) = node.partition_info(key).await {
            numbers.insert(key, PartitionNumbers::of(&info));
        }
    }
    numbers
}

fn stream_keys(view: &cairn_engine::node::MetaView, s: u32) -> Vec<PartitionKey> {
    view.stream(s).map_or_else(Vec::new, |stream| {
        stream
            .topics
            .values()
            .flat_map(|t| t.partitions.keys().map(move |p| (s, t.id, *p)))
            .collect()
    })
}

async fn get_stream(conn: &Conn, body: &[u8]) -> Handled {
    let request: GetStreamRequest = decode(body)?;
    let view = conn.shared.node.view();
    let Ok(s) = view.stream_id(&request.stream_id) else {
        return Ok(Vec::new());
    };
    require(conn, Action::ReadStream(s))?;
    let numbers = numbers(conn, stream_keys(&view, s)).await;
    Ok(encoded(&responses::get_stream(
        view.stream(s).expect("resolved"),
        &numbers,
    )))
}

async fn get_streams(conn: &Conn) -> Handled {
    require(conn, Action::ReadStreams)?;
    let view = conn.shared.node.view();
    let keys: Vec<_> = view
        .streams()
        .keys()
        .flat_map(|s| stream_keys(&view, *s))
        .collect();
    let numbers = numbers(conn, keys).await;
    Ok(encoded(&GetStreamsResponse {
        streams: view
            .streams()
            .values()
            .map(|s| responses::stream_response(s, &numbers))
            .collect(),
    }))
}

async fn get_topic(conn: &Conn, body: &[u8]) -> Handled {
    let request: GetTopicRequest = decode(body)?;
    let view = conn.shared.node.view();
    let Ok((s, t)) = view.topic_ids(&request.stream_id, &request.topic_id) else {
        return Ok(Vec::new());
    };
    require(conn, Action::ReadTopic(s, t))?;
    let topic = view.topic(s, t);
    let numbers = numbers(conn, topic.partitions.keys().map(|p| (s, t, *p))).await;
    Ok(encoded(&responses::get_topic(s, topic, &numbers)))
}

async fn get_topics(conn: &Conn, body: &[u8]) -> Handled {
    let request: GetTopicsRequest = decode(body)?;
    let view = conn.shared.node.view();
    let s = view.stream_id(&request.stream_id)?;
    require(conn, Action::ReadTopics(s))?;
    let numbers = numbers(conn, stream_keys(&view, s)).await;
    let stream = view.stream(s).expect("resolved");
    Ok(encoded(&GetTopicsResponse {
        topics: stream
            .topics
            .values()
            .map(|t| responses::topic_header(s, t, &numbers))
            .collect(),
    }))
}

fn get_user(conn: &Conn, body: &[u8]) -> Handled {
    let request: GetUserRequest = decode(body)?;
    let view = conn.shared.node.view();
    let Ok(id) = view.user_id(&request.user_id) else {
        return Ok(Vec::new());
    };
    if id != session(conn).user_id {
        require(conn, Action::ReadUsers)?;
    }
    Ok(encoded(&responses::user_details(
        view.user(id).expect("resolved"),
    )))
}

fn get_users(conn: &Conn) -> Handled {
    require(conn, Action::ReadUsers)?;
    let view = conn.shared.node.view();
    Ok(encoded(&GetUsersResponse {
        users: view
            .users()
            .values()
            .map(responses::user_response)
            .collect(),
    }))
}

// Clients and the system ------------------------------------------------------------------------

fn client_response(id: u32, entry: &crate::registry::ClientEntry) -> ClientResponse {
    ClientResponse {
        client_id: id,
        user_id: entry.user_id.unwrap_or(u32::MAX),
        transport: 1,
        address: entry.address.to_string(),
        consumer_groups_count: u32::try_from(entry.groups.len()).expect("bounded"),
    }
}

fn client_details(conn: &Conn, id: u32) -> Option<ClientDetailsResponse> {
    let entry = conn.shared.registry.get(id)?;
    Some(ClientDetailsResponse {
        client: client_response(id, &entry),
        consumer_groups: entry
            .groups
            .iter()
            .map(
                |&(stream_id, topic_id, group_id)| ConsumerGroupInfoResponse {
                    stream_id,
                    topic_id,
                    group_id,
                },
            )
            .collect(),
    })
}

fn get_client(conn: &Conn, body: &[u8]) -> Handled {
    let request: GetClientRequest = decode(body)?;
    if request.client_id != conn.id {
        require(conn, Action::ReadServers)?;
    }
    Ok(client_details(conn, request.client_id)
        .map(|d| encoded(&d))
        .unwrap_or_default())
}

fn get_clients(conn: &Conn) -> Handled {
    require(conn, Action::ReadServers)?;
    Ok(encoded(&GetClientsResponse {
        clients: conn
            .shared
            .registry
            .list()
            .iter()
            .map(|(id, e)| client_response(*id, e))
            .collect(),
    }))
}

/// One node, the leader, at the address this connection reached (SPEC §2.1, trap T4).
fn cluster_metadata(conn: &Conn) -> Vec<u8> {
    let addr = conn.shared.local_addr;
    encoded(&ClusterMetadataResponse {
        name: "cairn".into(),
        nodes: vec![ClusterNodeResponse {
            name: "cairn-0".into(),
            ip: addr.ip().to_string(),
            tcp_port: addr.port(),
            quic_port: 0,
            http_port: 0,
            websocket_port: 0,
            role: 0,
            status: 0,
        }],
    })
}

async fn stats(conn: &Conn) -> Handled {
    require(conn, Action::ReadServers)?;
    let view = conn.shared.node.view();
    let keys = view
        .partitions()
        .iter()
        .map(cairn_engine::state::key_of)
        .collect::<Vec<_>>();
    let numbers = numbers(conn, keys).await;
    let topics = view.streams().values().flat_map(|s| s.topics.values());
    let now = conn.shared.env.clock.wall_micros();
    let figures = conn
        .shared
        .figures
        .get()
        .map(|read| read(conn.shared.node.root()))
        .unwrap_or_default();
    Ok(encoded(&StatsResponse {
        process_id: std::process::id(),
        cpu_usage: figures.cpu_usage,
        total_cpu_usage: figures.cpu_usage,
        memory_usage: figures.resident_bytes,
        total_memory: figures.total_memory,
        available_memory: figures.available_memory,
        run_time: now.saturating_sub(conn.shared.started_at),
        start_time: conn.shared.started_at,
        read_bytes: figures.read_bytes,
        written_bytes: figures.written_bytes,
        messages_size_bytes: numbers.values().map(|n| n.size_bytes).sum(),
        streams_count: count(view.streams().len()),
        topics_count: count(topics.clone().count()),
        partitions_count: count(numbers.len().max(view.partitions().len())),
        segments_count: numbers.values().map(|n| n.segments).sum(),
        messages_count: numbers.values().map(|n| n.messages).sum(),
        clients_count: count(conn.shared.registry.len()),
        consumer_groups_count: count(topics.map(|t| t.groups.len()).sum()),
        hostname: figures.hostname,
        os_name: std::env::consts::OS.into(),
        os_version: figures.os_version,
        kernel_version: figures.kernel_version,
        iggy_server_version: SERVER_VERSION.into(),
        iggy_server_semver: None,
        cache_metrics: Vec::new(),
        threads_count: figures.threads,
        free_disk_space: figures.free_disk,
        total_disk_space: figures.total_disk,
    }))
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

// Messages ------------------------------------------------------------------------------------

async fn send(conn: &Conn, body: BytesMut) -> Handled {
    let sent = send_with(conn, body, Ack::Awaited).await?;
    let partition_id = sent.partition;
    let base_offset = sent.landed.map_or(0, |l| l.base_offset);
    Ok(encoded(&SendMessagesResponse {
        confirmations: vec![SendMessagesConfirmationResponse {
            stream_id: sent.stream_id,
            topic_id: sent.topic_id,
            partition_id,
            base_offset,
        }],
    }))
}

/// What a send waits for before it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// The write completed under the topic's durability policy.
    Awaited,
    /// The partition's owner queued it (HTTP's `ack=none`).
    Dispatched,
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

/// A send request's body (the binary protocol's: metadata length, header, one batch),
/// checked, authorized and handed to the node; waits as `ack` says.
pub async fn send_with(conn: &Conn, mut body: BytesMut, ack: Ack) -> Result<SendOutcome, Status> {
    if body.len() < 4 {
        return Err(undecodable("send", "no metadata length"));
    }
    let metadata_len = body.get_u32_le() as usize;
    if metadata_len > body.len() {
        return Err(undecodable("send", "metadata longer than the body"));
    }
    let header: SendMessagesHeader = decode(&body[..metadata_len])?;
    let batch = body.split_off(metadata_len);
    check_batch_frame(&batch, header.messages_count)?;
    let to = target(conn, &header.stream_id, &header.topic_id, Action::Send)?;
    let bytes = batch.len();
    let node = &session(conn).node;
    let (partition, landed) = match ack {
        Ack::Awaited => {
            let landed = match conn.shared.hooks.send {
                None => {
                    let sent = node
                        .send(&to.stream, &to.topic, &header.partitioning, batch)
                        .await?;
                    Landed {
                        partition: sent.partition,
                        base_offset: sent.ack.base_offset,
                        durable: sent.ack.durable,
                    }
                }
                Some(hook) => hook(
                    node,
                    &*conn.shared.env.tasks,
                    &to.stream,
                    &to.topic,
                    &header.partitioning,
                    batch,
                )?,
            };
            (landed.partition, Some(landed))
        }
        Ack::Dispatched => {
            // The bytes dispatched and not yet appended are bounded: past the budget a
            // dispatch waits (back-pressure), never grows the queues' memory.
            let held = conn.shared.dispatch_budget.reserve(bytes).await;
            let (partition, dispatched) = node
                .dispatch(&to.stream, &to.topic, &header.partitioning, batch)
                .await?;
            let shared = conn.shared.clone();
            let (s, t, count) = (to.s, to.t, header.messages_count);
            conn.shared.env.tasks.spawn(Box::pin(async move {
                match dispatched.outcome().await {
                    Ok(_) => shared.metrics.produced(s, t, count, bytes),
                    Err(e) => tracing::info!(error = %e, "a dispatched send was refused"),
                }
                drop(held);
            }));
            return Ok(SendOutcome {
                stream_id: to.s,
                topic_id: to.t,
                partition,
                landed: None,
            });
        }
    };
    conn.shared
        .metrics
        .produced(to.s, to.t, header.messages_count, bytes);
    Ok(SendOutcome {
        stream_id: to.s,
        topic_id: to.t,
        partition,
        landed,
    })
}

/// The batch fills the rest of the body exactly and holds the count the header says.
fn check_batch_frame(batch: &[u8], messages_count: u32) -> Result<(), Status> {
    if batch.len() < HEADER_SIZE {
        return Err(undecodable("send", "batch shorter than its header"));
    }
    let length = u64::from_le_bytes(batch[32..40].try_into().expect("8 bytes"));
    let count = u32::from_le_bytes(batch[48..52].try_into().expect("4 bytes"));
    if length != batch.len() as u64 {
        return Err(undecodable(
            "send",
            format!("batch_length {length} but {} bytes follow", batch.len()),
        ));
    }
    if count != messages_count || count == 0 {
        return Err(Status::of(4009));
    }
    Ok(())
}

async fn poll(conn: &Conn, body: &[u8]) -> Result<Polled, Status> {
    let mut request: PollMessagesRequest = decode(body)?;
    let to = target(conn, &request.stream_id, &request.topic_id, Action::Poll)?;
    request.stream_id = to.stream;
    request.topic_id = to.topic;
    let polled = session(conn).node.poll(&request).await?;
    let (partition, current, count, batches) = match polled {
        Some(p) => (
            u32::try_from(p.partition_id).expect("partition ids are u32"),
            p.current_offset.unwrap_or(0),
            p.message_count,
            p.batches,
        ),
        // A group member that holds no partition: an empty poll with Iggy's
        // `NO_ASSIGNED_PARTITION` sentinel.
        None => (u32::MAX - 1, 0, 0, Vec::new()),
    };
    let bytes = batches.iter().map(Bytes::len).sum();
    conn.shared.metrics.consumed(to.s, to.t, count, bytes);
    let mut head = [0u8; 16];
    head[..4].copy_from_slice(&partition.to_le_bytes());
    head[4..12].copy_from_slice(&current.to_le_bytes());
    head[12..16].copy_from_slice(&count.to_le_bytes());
    Ok(Polled { head, batches })
}

async fn get_offset(conn: &Conn, body: &[u8]) -> Handled {
    let request: GetConsumerOffsetRequest = decode(body)?;
    let to = target(conn, &request.stream_id, &request.topic_id, Action::Poll)?;
    let node = &session(conn).node;
    // A group member without a partition id means its current partition: report that one.
    let (_, _, p) = node
        .offset_partition(
            &request.consumer,
            &to.stream,
            &to.topic,
            request.partition_id,
        )
        .await?;
    let stored = node
        .get_offset(&request.consumer, &to.stream, &to.topic, Some(p))
        .await?;
    let Some(stored) = stored else {
        return Ok(Vec::new());
    };
    let current = match node.partition_info((to.s, to.t, p)).await {
        Ok(Some(info)) => info.current_offset().unwrap_or(0),
        _ => 0,
    };
    Ok(encoded(&ConsumerOffsetResponse {
        partition_id: p,
        current_offset: current,
        stored_offset: stored,
    }))
}

async fn store_offset(conn: &Conn, body: &[u8]) -> Handled {
    let r: StoreConsumerOffsetRequest = decode(body)?;
    let to = target(conn, &r.stream_id, &r.topic_id, Action::Poll)?;
    let node = &session(conn).node;
    node.store_offset(&r.consumer, &to.stream, &to.topic, r.partition_id, r.offset)
        .await?;
    Ok(Vec::new())
}

async fn delete_offset(conn: &Conn, body: &[u8]) -> Handled {
    let r: DeleteConsumerOffsetRequest = decode(body)?;
    let to = target(conn, &r.stream_id, &r.topic_id, Action::Poll)?;
    let node = &session(conn).node;
    node.delete_offset(&r.consumer, &to.stream, &to.topic, r.partition_id)
        .await?;
    Ok(Vec::new())
}

async fn delete_segments(conn: &Conn, body: &[u8]) -> Handled {
    let r: DeleteSegmentsRequest = decode(body)?;
    let to = target(conn, &r.stream_id, &r.topic_id, Action::ManageTopic)?;
    let node = &session(conn).node;
    node.delete_segments(&to.stream, &to.topic, r.partition_id, r.segments_count)
        .await?;
    Ok(Vec::new())
}

// Consumer groups -------------------------------------------------------------------------------

/// A group's members by their connections' numeric client ids.
async fn members(
    conn: &Conn,
    stream: &WireIdentifier,
    topic: &WireIdentifier,
    group: &WireIdentifier,
) -> Result<Vec<(u32, Vec<u32>)>, Status> {
    let members = session(conn)
        .node
        .group_members(stream, topic, group)
        .await?;
    Ok(members
        .into_iter()
        .map(|(client, partitions)| (conn.shared.registry.id_of(client).unwrap_or(0), partitions))
        .collect())
}

async fn get_group(conn: &Conn, body: &[u8]) -> Handled {
    let request: GetConsumerGroupRequest = decode(body)?;
    let view = conn.shared.node.view();
    let Ok((s, t)) = view.topic_ids(&request.stream_id, &request.topic_id) else {
        return Ok(Vec::new());
    };
    require(conn, Action::ReadTopic(s, t))?;
    let Ok(g) = view.group_id(s, t, &request.group_id) else {
        return Ok(Vec::new());
    };
    let topic = view.topic(s, t);
    let group = &topic.groups[&g];
    let members = members(
        conn,
        &request.stream_id,
        &request.topic_id,
        &request.group_id,
    )
    .await?;
    let partitions = count(topic.partitions.len());
    Ok(encoded(&responses::group_details(
        g,
        &group.name,
        partitions,
        members,
    )))
}

async fn get_groups(conn: &Conn, body: &[u8]) -> Handled {
    let request: GetConsumerGroupsRequest = decode(body)?;
    let view = conn.shared.node.view();
    let (s, t) = view.topic_ids(&request.stream_id, &request.topic_id)?;
    require(conn, Action::ReadTopic(s, t))?;
    let topic = view.topic(s, t);
    let mut groups = Vec::with_capacity(topic.groups.len());
    for group in topic.groups.values() {
        let id = WireIdentifier::numeric(group.id);
        let members = members(conn, &request.stream_id, &request.topic_id, &id).await?;
        groups.push(ConsumerGroupResponse {
            id: group.id,
            partitions_count: count(topic.partitions.len()),
            members_count: count(members.len()),
            name: WireName::new(group.name.clone()).expect("stored names are valid"),
        });
    }
    Ok(encoded(&GetConsumerGroupsResponse { groups }))
}

async fn join_group(conn: &Conn, body: &[u8]) -> Handled {
    let r: JoinConsumerGroupRequest = decode(body)?;
    change_membership(conn, &r.stream_id, &r.topic_id, &r.group_id, true).await
}

async fn leave_group(conn: &Conn, body: &[u8]) -> Handled {
    let r: LeaveConsumerGroupRequest = decode(body)?;
    change_membership(conn, &r.stream_id, &r.topic_id, &r.group_id, false).await
}

/// This session joins (or leaves) the group; the registry keeps what GetMe shows.
async fn change_membership(
    conn: &Conn,
    stream: &WireIdentifier,
    topic: &WireIdentifier,
    group: &WireIdentifier,
    join: bool,
) -> Handled {
    let to = target(conn, stream, topic, Action::Poll)?;
    let g = conn.shared.node.view().group_id(to.s, to.t, group)?;
    let group = WireIdentifier::numeric(g);
    let node = &session(conn).node;
    if join {
        node.join_group(&to.stream, &to.topic, &group).await?;
    } else {
        node.leave_group(&to.stream, &to.topic, &group).await?;
    }
    conn.shared.registry.update(conn.id, |e| {
        if join {
            e.groups.insert((to.s, to.t, g));
        } else {
            e.groups.remove(&(to.s, to.t, g));
        }
    });
    Ok(Vec::new())
}

async fn sync_group(conn: &Conn, body: &[u8]) -> Handled {
    let request: SyncConsumerGroupRequest = decode(body)?;
    let view = conn.shared.node.view();
    let Ok((s, t)) = view.topic_ids(&request.stream_id, &request.topic_id) else {
        return Ok(Vec::new());
    };
    require(conn, Action::Poll(s, t))?;
    match session(conn)
        .node
        .group_assignment(
            &WireIdentifier::numeric(s),
            &WireIdentifier::numeric(t),
            &request.group_id,
        )
        .await
    {
        Ok((generation, partitions)) => Ok(encoded(&SyncConsumerGroupResponse {
            generation,
            partitions,
        })),
        Err(NodeError::NotAMember { .. } | NodeError::GroupNotFound { .. }) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::state::options::for_create;

    const DEFAULTS: TopicDefaults = TopicDefaults {
        messages_required_to_save: 7,
        size_of_messages_required_to_save: 9000,
    };

    #[test]
    fn a_topic_creation_gets_the_configured_flush_thresholds_it_does_not_name() {
        let filled = with_flush_defaults(&WireOptions::empty(), DEFAULTS).unwrap();
        let topic = for_create(&filled).unwrap();
        assert_eq!(topic.messages_required_to_save, 7);
        assert_eq!(topic.size_of_messages_required_to_save, 9000);
    }

    #[test]
    fn a_threshold_the_creation_names_is_kept() {
        let mut block = Vec::new();
        for (kind, bytes) in [
            (2u8, &b"messages_required_to_save"[..]),
            (11, &3u32.to_le_bytes()[..]),
        ] {
            block.push(kind);
            block.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            block.extend_from_slice(bytes);
        }
        let named = WireOptions::from_bytes(block.into()).unwrap();
        let topic = for_create(&with_flush_defaults(&named, DEFAULTS).unwrap()).unwrap();
        assert_eq!(topic.messages_required_to_save, 3);
        assert_eq!(topic.size_of_messages_required_to_save, 9000);
    }
}

//! One binary-protocol request, from its checked header to its reply: ping, the login
//! handshake and logout, the session gate, the duplicate table, then the command table's
//! decoder and [`command::execute`].
//!
//! Every request gets exactly one frame back: a reply (status 0 with its body, or an error
//! status with an empty body) or an eviction. Nothing is written for a refused request: the
//! header, the session, the body and the permission are all checked before the node is
//! called.

use super::attach;
use super::dedup::Dedup;
use super::encode::{encode, Encoded};
use super::frame::{self, Echo, ReplyMeta};
use super::Listener;
use crate::command::login::{self, LoginRefused, Waiter};
use crate::command::{self, codes, table, Caller, Session, Status, SERVER_VERSION};
use bytes::{Bytes, BytesMut};
use iggy_binary_protocol::codes::{
    ATTACH_CONSUMER_SESSION_CODE, LOGIN_REGISTER_CODE, LOGIN_USER_CODE,
    LOGIN_WITH_PERSONAL_ACCESS_TOKEN_CODE, LOGOUT_USER_CODE, PING_CODE,
};
use iggy_binary_protocol::requests::users::{LoginRegisterRequest, LoginRegisterWithPatRequest};
use iggy_binary_protocol::responses::users::LoginRegisterResponse;
use iggy_binary_protocol::{
    ClientVersionInfo, EvictionReason, Operation, RequestHeader, WireDecode, WireEncode, WireName,
    HEADER_SIZE,
};
use secrecy::ExposeSecret;
use std::net::SocketAddr;
use std::sync::Arc;
use tracing::Instrument;

/// One connection's state.
pub struct Conn {
    pub listener: Arc<Listener>,
    pub peer: SocketAddr,
    /// Its numeric client id in the registry (renewed at each login).
    pub id: u32,
    pub login: Option<Login>,
    /// Monotonic ns when it connected, or when its last login ended: the handshake timeout
    /// counts from there.
    pub(crate) connected_at: u64,
    /// Set when the registry closes the connection to make room for a new one.
    pub(crate) evicted: cairn_engine::env::chan::Latch<()>,
    /// The batch bytes the request being answered may reply with (what was reserved).
    pub(crate) reply_room: u64,
}

/// A login bound to the connection: its session and its duplicate table.
pub struct Login {
    pub session: Session,
    pub dedup: Dedup,
    /// The coordinator login this data connection acts for, if it attached
    /// ([`super::attach`]).
    pub attached: Option<attach::Attached>,
}

/// What to write back.
pub enum Answer {
    /// A reply frame, in pieces written back to back (a poll's stored batches are not
    /// copied).
    Frame(Vec<Bytes>),
    /// An eviction; the connection closes after it.
    Evict(Bytes),
}

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

/// The answer to a frame larger than its session may send (its body was dropped unread):
/// a send's is refused as a send without the permission is; any other command's body is
/// never that large.
pub fn oversized(conn: &Conn, header: &[u8; HEADER_SIZE], body_len: usize, send: bool) -> Answer {
    tracing::debug!(
        body_len,
        send,
        "a frame larger than its session may send was dropped unread"
    );
    let code = match send {
        true => codes::UNAUTHORIZED,
        false => codes::INVALID_COMMAND,
    };
    reply(conn, Echo::of(header), Err(Status::of(code)))
}

async fn answer_request(
    conn: &mut Conn,
    echo: Echo,
    request: frame::Request,
    body: BytesMut,
) -> Answer {
    match request.code {
        PING_CODE => reply(conn, echo, Ok(Bytes::new())),
        LOGIN_REGISTER_CODE => register(conn, echo, &body).await,
        LOGOUT_USER_CODE => logout(conn, echo, &request.header).await,
        LOGIN_USER_CODE | LOGIN_WITH_PERSONAL_ACCESS_TOKEN_CODE => {
            evict(echo, EvictionReason::MalformedLogin)
        }
        code => {
            if let Err(answer) = gate(conn, echo, &request.header).await {
                return answer;
            }
            match code {
                ATTACH_CONSUMER_SESSION_CODE => {
                    let attached = table::whole(&body).and_then(|r| attach::attach(conn, r));
                    conn.listener.cx.metrics.command(code, status_of(&attached));
                    reply(conn, echo, attached.map(|()| Bytes::new()))
                }
                code => run(conn, echo, code, body).await,
            }
        }
    }
}

/// A command of the table, for the login the gate let through: answered from the duplicate
/// table when its row says so and it was answered before.
async fn run(conn: &mut Conn, echo: Echo, code: u32, body: BytesMut) -> Answer {
    let row = table::row(code);
    let key = (echo.client, echo.request, echo.request_checksum);
    let dedup = row.dedup && echo.request_checksum != 0;
    if dedup {
        let reframe =
            |body: &[u8]| frame::reply(echo, meta(conn, echo.operation), 0, false, body).freeze();
        let table = &login(conn).dedup;
        if let Some(cached) = table.get(&key) {
            let cached = match conn.listener.dedup_hit {
                Some(hook) => hook(table, &key, cached, &reframe),
                None => cached,
            };
            tracing::debug!("a retried request answered from the duplicate table");
            return Answer::Frame(vec![cached]);
        }
    }
    let cx = conn.listener.cx.clone();
    let (client_id, reply_room) = (conn.id, conn.reply_room);
    let result = match (table::decode(code, body), attach::check(conn, code)) {
        (Ok(command), Ok(())) => {
            let caller = Caller {
                session: attach::acting(conn, code),
                client_id,
                reply_room,
            };
            command::execute(&cx, &caller, command).await
        }
        (Err(status), _) | (_, Err(status)) => {
            cx.metrics.command(code, status.code);
            Err(status)
        }
    };
    let applied = result.is_ok();
    let answer = match result.map(encode) {
        Ok(Encoded::Poll(polled)) => poll_reply(conn, echo, polled),
        Ok(Encoded::Body(body)) => reply(conn, echo, Ok(body)),
        Err(status) => reply(conn, echo, Err(status)),
    };
    // Only what was applied is cached: a refusal (a full disk, a busy node) retried is tried
    // again.
    if let (true, true, Answer::Frame(pieces), Some(login)) =
        (dedup, applied, &answer, conn.login.as_mut())
    {
        login.dedup.insert(key, pieces.concat().into());
    }
    answer
}

fn status_of(result: &Result<(), Status>) -> u32 {
    result.as_ref().map_or_else(|s| s.code, |()| 0)
}

fn login(conn: &Conn) -> &Login {
    conn.login.as_ref().expect("the gate passed")
}

fn meta(conn: &Conn, operation: Operation) -> ReplyMeta {
    ReplyMeta {
        session: conn.login.as_ref().map_or(0, |l| l.session.session),
        // Only metadata-plane replies feed the SDK's commit watermark: the others need no
        // view read.
        commit: if operation.is_metadata_plane() {
            conn.listener.cx.node.view().op
        } else {
            0
        },
    }
}

/// A reply frame; result-framed operations get their `[count = 0]` prefix on success.
fn reply(conn: &Conn, echo: Echo, result: Result<Bytes, Status>) -> Answer {
    let meta = meta(conn, echo.operation);
    let framed = echo.operation.is_result_framed() || echo.operation == Operation::Register;
    let frame = match result {
        Ok(body) => frame::reply(echo, meta, 0, framed, &body),
        Err(Status { code, .. }) => frame::reply(echo, meta, code, framed, &[]),
    };
    Answer::Frame(vec![frame.freeze()])
}

/// A poll's reply: the header and the 16-byte head in one piece, then each stored batch.
fn poll_reply(conn: &Conn, echo: Echo, polled: command::Polled) -> Answer {
    let head = polled.head();
    let body_len = head.len() + polled.batch_bytes();
    let mut first = Vec::with_capacity(HEADER_SIZE + head.len());
    first.extend_from_slice(&frame::reply_header(
        echo,
        meta(conn, echo.operation),
        0,
        body_len,
    ));
    first.extend_from_slice(&head);
    let mut pieces = Vec::with_capacity(1 + polled.batches.len());
    pieces.push(Bytes::from(first));
    pieces.extend(polled.batches);
    Answer::Frame(pieces)
}

fn evict(echo: Echo, reason: EvictionReason) -> Answer {
    tracing::debug!(?reason, "evicting the session");
    Answer::Evict(frame::eviction(echo.client, reason).freeze())
}

/// The session gate: logged in, as the login that is bound here, whose user still holds.
async fn gate(conn: &mut Conn, echo: Echo, header: &RequestHeader) -> Result<(), Answer> {
    let replicated = header.operation != Operation::NonReplicated;
    let unauthenticated = |conn: &Conn| {
        if replicated {
            evict(echo, EvictionReason::NoSession)
        } else {
            reply(conn, echo, Err(Status::of(codes::UNAUTHENTICATED)))
        }
    };
    let Some(Login { session, .. }) = conn.login.as_ref() else {
        return Err(unauthenticated(conn));
    };
    if session.client != header.client || session.session != header.session {
        return Err(unauthenticated(conn));
    }
    let cx = &conn.listener.cx;
    if let Err(revoked) = command::session::check(cx, session, &cx.node.view()) {
        tracing::info!(user = session.user_id, reason = ?revoked.reason, "a session lost its access");
        end_session(conn).await;
        return Err(reply(conn, echo, Err(Status::of(codes::UNAUTHENTICATED))));
    }
    Ok(())
}

/// The two shapes of a Register body after its version prefix (`docs/wire.md` §2.2).
enum Credentials {
    Password(LoginRegisterRequest),
    Token(LoginRegisterWithPatRequest),
}

/// Register: the version gate, then a password or a token login; any earlier login of the
/// connection ends first.
async fn register(conn: &mut Conn, echo: Echo, body: &[u8]) -> Answer {
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
    let cx = conn.listener.cx.clone();
    let peer = conn.peer.ip();
    let session = match &credentials {
        Credentials::Password(request) => {
            let (username, password) =
                (request.username.as_str(), request.password.expose_secret());
            login::with_password(
                &cx,
                (echo.client, Waiter::Connection),
                peer,
                username,
                password,
            )
            .await
        }
        Credentials::Token(request) => {
            login::with_token(
                &cx,
                (echo.client, Waiter::Connection),
                peer,
                request.token.expose_secret(),
            )
            .await
        }
    };
    let session = match session {
        Ok(session) => session,
        Err(LoginRefused::Credentials) => return evict(echo, EvictionReason::InvalidCredentials),
        Err(LoginRefused::Token(_)) => return evict(echo, EvictionReason::InvalidToken),
        Err(LoginRefused::Inactive(_)) => return evict(echo, EvictionReason::UserInactive),
        Err(LoginRefused::Failed(status)) => return reply(conn, echo, Err(status)),
    };
    let response = LoginRegisterResponse {
        user_id: session.user_id,
        session: session.session,
        server_protocol_version: iggy_binary_protocol::IGGY_PROTOCOL_VERSION,
        server_version: WireName::new(SERVER_VERSION).expect("a valid name"),
    };
    let renewed = cx.registry.renew(conn.id, |entry| {
        entry.user_id = Some(session.user_id);
        entry.client = session.client;
        entry.session = session.session;
        entry.groups.clear();
    });
    let Some(renewed) = renewed else {
        // The connection is gone from the registry (removed while the login ran): the
        // session ends here, and the connection with it.
        let _ = session.node.disconnect().await;
        conn.evicted.set(());
        return reply(conn, echo, Err(Status::of(codes::ERROR)));
    };
    conn.id = renewed;
    tracing::debug!(
        user = session.user_id,
        client_id = conn.id,
        token = session.token.is_some(),
        "logged in"
    );
    conn.login = Some(Login {
        session,
        dedup: Dedup::default(),
        attached: None,
    });
    reply(conn, echo, Ok(response.to_bytes()))
}

async fn logout(conn: &mut Conn, echo: Echo, header: &RequestHeader) -> Answer {
    let bound = conn
        .login
        .as_ref()
        .is_some_and(|l| l.session.client == header.client && l.session.session == header.session);
    if !bound {
        return evict(echo, EvictionReason::NoSession);
    }
    let answer = reply(conn, echo, Ok(Bytes::new()));
    end_session(conn).await;
    answer
}

/// Unbinds the connection's login: it leaves every consumer group it joined.
pub async fn end_session(conn: &mut Conn) {
    if let Some(login) = conn.login.take() {
        if let Err(e) = login.session.node.disconnect().await {
            tracing::debug!(error = %e, "leaving the session's groups failed");
        }
        let cx = &conn.listener.cx;
        // A connection without a login must log in again within the handshake timeout,
        // counted from now (the SDK logs out and in again on one socket).
        conn.connected_at = cx.env.clock.monotonic_nanos();
        let since = conn.connected_at;
        cx.registry.update(conn.id, |entry| {
            entry.user_id = None;
            entry.session = 0;
            entry.groups.clear();
            entry.since = since;
        });
    }
}

//! One connection's task: read a frame, answer it, write the reply; in order, one request at
//! a time (the 0.11 SDK is lockstep: `docs/wire.md` §1). A connection therefore holds at most
//! one request (≤ `max_frame_bytes`) and one reply in memory: a client that stops reading its
//! replies blocks its own task in `write_all` (TCP back-pressure) until the idle timeout
//! closes it, and never grows the server's memory.
//!
//! Closed when: the framing breaks (a size outside the bounds), the peer closes, it does not
//! log in within the handshake timeout, it sends nothing (or takes no reply) within the idle
//! timeout, it was evicted, or the server stops (after finishing the request it is serving).
//!
//! With TLS on, the task first runs the TLS handshake, within the same handshake timeout
//! as the login (never in the accept loop): a peer that fails it, or is too slow, ends only
//! its own connection, with a debug log.

use super::answer::{self, Answer, Conn};
use super::frame::{self, FrameError};
use super::inbox::{Inbox, ReadError};
use super::Listener;
use crate::command::log_throttle::{Throttle, LOG_INTERVAL_NANOS};
use crate::command::registry::{Caps, ClientEntry};
use crate::tls::TlsStream;
use bytes::Bytes;
use cairn_engine::env::chan::Latch;
use cairn_engine::env::{race, ByteStream, Deadline, Either};
use iggy_binary_protocol::HEADER_SIZE;
use std::collections::BTreeMap;
use std::io;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("the peer closed the connection")]
    PeerClosed,
    #[error("no login within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("idle for {0:?}")]
    Idle(Duration),
    #[error("a reply's next bytes not taken within {0:?}")]
    Unread(Duration),
    #[error("the server is stopping")]
    Stopping,
    #[error(transparent)]
    Framing(#[from] FrameError),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    #[error("evicted")]
    Evicted,
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
}

/// Registers the connection and spawns its task; refuses it (closes at once) past the
/// connection limit.
pub fn start(listener: Arc<Listener>, stream: Box<dyn ByteStream>, peer: SocketAddr) {
    let connected_at = listener.cx.env.clock.monotonic_nanos();
    let entry = ClientEntry {
        address: peer,
        user_id: None,
        client: 0,
        session: 0,
        groups: BTreeMap::new(),
        since: connected_at,
    };
    let evicted = Latch::default();
    let limits = &listener.limits;
    let caps = Caps {
        total: limits.max_connections,
        per_address: limits.connections_per_address,
        anonymous: limits.anonymous_connections,
        anonymous_per_address: limits.anonymous_per_address,
    };
    let id = match listener.cx.registry.add(entry, caps, evicted.clone()) {
        Ok(id) => id,
        Err(refused) => {
            static REFUSED: Throttle = Throttle::new(LOG_INTERVAL_NANOS);
            if let Some(left_out) = REFUSED.admit(listener.cx.env.clock.monotonic_nanos()) {
                tracing::warn!(%peer, ?caps, left_out, "connection refused: {refused}");
            }
            return;
        }
    };
    listener.live.fetch_add(1, Ordering::SeqCst);
    let env = listener.cx.env.clone();
    let conn = Conn {
        connected_at,
        evicted,
        reply_room: u64::MAX,
        listener,
        peer,
        id,
        login: None,
    };
    env.tasks.spawn(Box::pin(serve(conn, stream)));
}

async fn serve(mut conn: Conn, stream: Box<dyn ByteStream>) {
    let span = tracing::debug_span!("connection", peer = %conn.peer);
    async move {
        tracing::debug!("connected");
        let mut deadline = conn.listener.cx.env.clock.deadline();
        match secure(&conn, deadline.as_mut(), stream).await {
            Ok(stream) => {
                let mut wire = Wire {
                    stream,
                    inbox: Inbox::default(),
                    deadline,
                };
                let ended = serve_requests(&mut conn, &mut wire).await;
                tracing::debug!(reason = %ended, "connection closed");
                // Bounded: a TLS close_notify waits for a peer that may read nothing.
                let shutdown = wire.stream.shutdown();
                let _ = timed(&conn, wire.deadline.as_mut(), shutdown, CLOSE_TIMEOUT).await;
            }
            // The stream is dropped: the socket closes (a TLS alert, if any, was sent).
            Err(ended) => tracing::debug!(reason = %ended, "connection closed"),
        }
        answer::end_session(&mut conn).await;
        conn.listener.cx.registry.remove(conn.id);
        conn.listener.live.fetch_sub(1, Ordering::SeqCst);
    }
    .instrument(span)
    .await
}

/// The socket side of a connection: its stream (TLS over TCP, with TLS on), what was read
/// ahead of the frame being parsed, and the one timer every wait of the connection re-arms.
struct Wire {
    stream: Box<dyn ByteStream>,
    inbox: Inbox,
    deadline: Box<dyn Deadline>,
}

/// How long closing a connection may take (a TLS close_notify to a peer that reads
/// nothing).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The stream requests are read from: the connection's own, or, with TLS on, TLS over it
/// once the TLS handshake finished within what remains of the handshake timeout.
async fn secure(
    conn: &Conn,
    deadline: &mut dyn Deadline,
    stream: Box<dyn ByteStream>,
) -> Result<Box<dyn ByteStream>, Ended> {
    let Some(config) = &conn.listener.tls else {
        return Ok(stream);
    };
    let mut tls = TlsStream::new(stream, config.clone()).map_err(Ended::Tls)?;
    let (wait, on_timeout) = wait_for_request(conn);
    match race(
        conn.listener.stopping.wait(),
        timed(conn, deadline, tls.handshake(), wait),
    )
    .await
    {
        Either::Left(()) => Err(Ended::Stopping),
        Either::Right(None) => Err(on_timeout),
        Either::Right(Some(Err(e))) => Err(Ended::Tls(e)),
        Either::Right(Some(Ok(()))) => Ok(Box::new(tls)),
    }
}

async fn serve_requests(conn: &mut Conn, wire: &mut Wire) -> Ended {
    loop {
        let mut header = [0u8; HEADER_SIZE];
        if let Err(ended) = read_request_start(conn, wire, &mut header).await {
            return ended;
        }
        let body_len = match frame::body_len(&header, framing_limit(conn)) {
            Ok(len) => len,
            Err(e) => return e.into(),
        };
        // A reply is reserved before it is built, within its user's share.
        let reservation = match reply_room(conn, &header).await {
            Ok(reservation) => reservation,
            Err(ended) => return ended,
        };
        conn.reply_room = match (&reservation, is_poll(&header)) {
            (Some(held), true) => held.bytes(),
            _ => u64::MAX,
        };
        let answer = if HEADER_SIZE + body_len > permitted_frame(conn, &header) {
            // Larger than anything this session may send: read and dropped, never held.
            let (wait, on_timeout) = wait_for_request(conn);
            let discard = wire.inbox.discard(wire.stream.as_mut(), body_len);
            match timed(conn, wire.deadline.as_mut(), discard, wait).await {
                Some(Ok(())) => {}
                Some(Err(e)) => return e.into(),
                None => return on_timeout,
            }
            answer::oversized(conn, &header, body_len, is_send(&header))
        } else {
            match read_and_answer(conn, wire, &header, body_len).await {
                Ok(answer) => answer,
                Err(ended) => return ended,
            }
        };
        let (pieces, close) = match answer {
            Answer::Frame(pieces) => (pieces, false),
            Answer::Evict(frame) => (vec![frame], true),
        };
        // A reply holds its user's share until it is written.
        let charge = reservation.map(|held| {
            let reply_bytes = pieces.iter().map(|p| p.len() as u64).sum();
            conn.listener.cx.replies.settle(held, reply_bytes)
        });
        if let Err(ended) = write_reply(conn, wire, &pieces).await {
            return ended;
        }
        drop(charge);
        if close {
            return Ended::Evicted;
        }
        if conn.listener.stopping.get().is_some() {
            return Ended::Stopping;
        }
    }
}

/// Reads the next request's header: waits at most the handshake timeout's remainder before
/// a login, the idle timeout after; gives up when the server stops.
async fn read_request_start(
    conn: &Conn,
    wire: &mut Wire,
    header: &mut [u8; HEADER_SIZE],
) -> Result<(), Ended> {
    let (wait, on_timeout) = wait_for_request(conn);
    let read = wire.inbox.header(wire.stream.as_mut(), header);
    let read = timed(conn, wire.deadline.as_mut(), read, wait);
    match race(conn.listener.stopping.wait(), read).await {
        Either::Left(()) => Err(Ended::Stopping),
        Either::Right(None) => Err(on_timeout),
        Either::Right(Some(result)) => result.map_err(Ended::from),
    }
}

/// Most bytes a frame may have before its connection logged in.
pub const MAX_ANONYMOUS_FRAME: u32 = 64 * 1024;

/// Most bytes of a frame that is not a send (a create, a login, permissions for thousands
/// of topics): only a send's batch is large.
pub const MAX_COMMAND_FRAME: usize = 1024 * 1024;

/// A frame above this closes the connection: the framing is broken (or an anonymous
/// connection announces more than a login needs).
fn framing_limit(conn: &Conn) -> u32 {
    let limit = conn.listener.limits.max_frame_bytes;
    match conn.login {
        Some(_) => limit,
        None => limit.min(MAX_ANONYMOUS_FRAME),
    }
}

/// The largest frame this session may have read: a send's from a user who may send to
/// some topic, else [`MAX_COMMAND_FRAME`]. A larger one is dropped unread and refused
/// (anyone logged in cannot park `max_frame_bytes` per connection).
fn permitted_frame(conn: &Conn, header: &[u8; HEADER_SIZE]) -> usize {
    let max = conn.listener.limits.max_frame_bytes as usize;
    let may_send = || {
        conn.login.as_ref().is_some_and(|login| {
            let cx = &conn.listener.cx;
            let permissions = login.session.permissions(&cx.node.view(), &cx.hooks);
            crate::command::permissions::may_send_somewhere(
                login.session.user_id,
                permissions.as_ref(),
            )
        })
    };
    if is_send(header) && may_send() {
        max
    } else {
        max.min(MAX_COMMAND_FRAME)
    }
}

/// Room for the reply of a logged-in session's request (waiting, at most the idle timeout,
/// while its user's share or the server's reply budget is full): a poll's as much as it may
/// carry, any other's [`replies::OTHER_ROOM`](crate::command::replies::OTHER_ROOM) (a list
/// may grow past it: the excess counts in its user's share). None before a login.
async fn reply_room(
    conn: &Conn,
    header: &[u8; HEADER_SIZE],
) -> Result<Option<crate::command::replies::Held>, Ended> {
    let Some(login) = &conn.login else {
        return Ok(None);
    };
    let (cx, user) = (&conn.listener.cx, login.session.user_id);
    let wait = conn.listener.limits.idle_timeout;
    let reserved = match is_poll(header) {
        true => cx.replies.reserve(&cx.env, user, wait).await,
        false => cx.replies.reserve_other(&cx.env, user, wait).await,
    };
    reserved.map(Some).ok_or(Ended::Idle(wait))
}

/// Whether the request polls messages (as itself, or routed to this member: code 104), so
/// its reply is reserved as a poll's and its batches cut at that room.
fn is_poll(header: &[u8; HEADER_SIZE]) -> bool {
    use iggy_binary_protocol::codes::{POLL_MESSAGES_CODE, POLL_MESSAGES_ON_PRIMARY_CODE};
    matches!(
        frame::non_replicated_code(header),
        Some(POLL_MESSAGES_CODE | POLL_MESSAGES_ON_PRIMARY_CODE)
    )
}

fn is_send(header: &[u8; HEADER_SIZE]) -> bool {
    frame::Echo::of(header).operation == iggy_binary_protocol::consensus::Operation::SendMessages
}

/// Reads the body once the server's byte budget has room for it (waiting, the connection
/// reads nothing: back-pressure; a body of at most 64 KiB, a login's or a poll's, never
/// waits), and answers it; the body's bytes count until answered.
async fn read_and_answer(
    conn: &mut Conn,
    wire: &mut Wire,
    header: &[u8; HEADER_SIZE],
    body_len: usize,
) -> Result<Answer, Ended> {
    let (wait, on_timeout) = wait_for_request(conn);
    let cx = conn.listener.cx.clone();
    let user = conn.login.as_ref().map(|l| l.session.user_id);
    let (stream, inbox) = (wire.stream.as_mut(), &mut wire.inbox);
    let read = async {
        let charge = body_room(&cx, user, body_len as u64).await;
        inbox
            .body(stream, body_len)
            .await
            .map(|body| (charge, body))
    };
    let (charge, body) = match timed(conn, wire.deadline.as_mut(), read, wait).await {
        Some(read) => read?,
        None => return Err(on_timeout),
    };
    // Answering, a connection not logged in is not an idle socket: never closed to make
    // room meanwhile (one logged in never is).
    let anonymous = conn.login.is_none();
    if anonymous {
        conn.listener.cx.registry.answering(conn.id, true);
    }
    let answer = answer::answer(conn, header, body).await;
    if anonymous {
        conn.listener.cx.registry.answering(conn.id, false);
    }
    drop(charge);
    Ok(answer)
}

/// The bytes a request body holds while it is read and answered.
enum BodyRoom {
    /// Of the server's byte budget alone (a small body, or one not logged in).
    Budget(#[allow(dead_code)] cairn_engine::env::chan::Charge),
    /// Of its user's share of that budget.
    Share(#[allow(dead_code)] crate::command::replies::Held),
}

/// Room for a body of `bytes` (waiting, the connection reads nothing: back-pressure): a
/// logged-in `user`'s body larger than a login's takes its size from the user's share of
/// the budget; a smaller one (a login, a poll) is charged and never waits.
async fn body_room(cx: &crate::command::Context, user: Option<u32>, bytes: u64) -> BodyRoom {
    let small = u64::from(MAX_ANONYMOUS_FRAME);
    if cx.hooks.body_skips_room(bytes) {
        return BodyRoom::Budget(cx.buffers.charge(bytes));
    }
    match user {
        Some(user) if bytes > small => {
            BodyRoom::Share(cx.bodies.reserve_exact(&cx.env, user, bytes).await)
        }
        _ => BodyRoom::Budget(cx.buffers.admit(bytes, small).await),
    }
}

/// Writes a reply with as few calls as the socket allows (one `writev` of up to
/// [`MAX_IOVECS`] pieces, not a call per batch), each call's bytes taken by the peer within
/// [`REPLY_TIMEOUT`] (never longer than the idle timeout): a client that stops reading
/// loses the connection and frees the reply; a slow one keeps it as long as it makes
/// progress.
async fn write_reply(conn: &Conn, wire: &mut Wire, pieces: &[Bytes]) -> Result<(), Ended> {
    let wait = REPLY_TIMEOUT.min(conn.listener.limits.idle_timeout);
    // The first piece not yet wholly written, and how far into it (empty pieces skipped).
    let (mut i, mut at) = advance(pieces, 0, 0, 0);
    while i < pieces.len() {
        let n = {
            let slices = unwritten(pieces, i, at);
            let write = wire.stream.write_vectored(&slices);
            match timed(conn, wire.deadline.as_mut(), write, wait).await {
                Some(Ok(0)) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                Some(Ok(n)) => n,
                Some(Err(e)) => return Err(e.into()),
                None => return Err(Ended::Unread(wait)),
            }
        };
        (i, at) = advance(pieces, i, at, n);
    }
    Ok(())
}

/// The most pieces one write hands the socket (the kernel's `IOV_MAX` is 1024).
pub const MAX_IOVECS: usize = 1024;

/// What is left of `pieces` from byte `at` of piece `i`, at most [`MAX_IOVECS`] slices.
fn unwritten(pieces: &[Bytes], i: usize, at: usize) -> Vec<IoSlice<'_>> {
    let mut slices = Vec::with_capacity((pieces.len() - i).min(MAX_IOVECS));
    slices.push(IoSlice::new(&pieces[i][at..]));
    let rest = pieces[i + 1..].iter().filter(|p| !p.is_empty());
    slices.extend(rest.take(MAX_IOVECS - 1).map(|p| IoSlice::new(p)));
    slices
}

/// The position `n` bytes past byte `at` of piece `i`: the first piece not wholly written
/// and the offset into it (`pieces.len()` once all is written).
fn advance(pieces: &[Bytes], mut i: usize, mut at: usize, mut n: usize) -> (usize, usize) {
    while i < pieces.len() {
        let left = pieces[i].len() - at;
        if n < left {
            return (i, at + n);
        }
        n -= left;
        (i, at) = (i + 1, 0);
    }
    assert_eq!(n, 0, "a write took more bytes than the reply holds");
    (i, at)
}

/// Longest a reply's next chunk may wait to be taken (the reply counts in the budget
/// meanwhile).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the connection may take over its next request: the idle timeout after a login,
/// what remains of the handshake timeout before one.
fn wait_for_request(conn: &Conn) -> (Duration, Ended) {
    let limits = conn.listener.limits;
    if conn.login.is_some() {
        return (limits.idle_timeout, Ended::Idle(limits.idle_timeout));
    }
    let elapsed = conn
        .listener
        .cx
        .env
        .clock
        .monotonic_nanos()
        .saturating_sub(conn.connected_at);
    (
        limits
            .handshake_timeout
            .saturating_sub(Duration::from_nanos(elapsed)),
        Ended::HandshakeTimeout(limits.handshake_timeout),
    )
}

/// `future`, or `None` once `limit` passed (the connection's one timer, re-armed) or the
/// registry closed the connection to make room (it stayed too long without a login).
async fn timed<T>(
    conn: &Conn,
    deadline: &mut dyn Deadline,
    future: impl std::future::Future<Output = T>,
    limit: Duration,
) -> Option<T> {
    deadline.reset(limit);
    let ends = race(deadline.passed(), conn.evicted.wait());
    match race(future, ends).await {
        Either::Left(value) => Some(value),
        Either::Right(_) => None,
    }
}

impl From<ReadError> for Ended {
    fn from(error: ReadError) -> Ended {
        match error {
            ReadError::Closed => Ended::PeerClosed,
            ReadError::Io(e) => Ended::Io(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_written_from_wherever_the_last_write_stopped() {
        let pieces: Vec<Bytes> = [&b"abc"[..], b"", b"de", b"fghij"]
            .iter()
            .map(|p| Bytes::copy_from_slice(p))
            .collect();
        let all = b"abcdefghij";
        for step in 1..=all.len() {
            let ((mut i, mut at), mut written) = (advance(&pieces, 0, 0, 0), Vec::new());
            while i < pieces.len() {
                let slices = unwritten(&pieces, i, at);
                let flat: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
                let n = step.min(flat.len());
                written.extend_from_slice(&flat[..n]);
                (i, at) = advance(&pieces, i, at, n);
            }
            assert_eq!(written, all, "writes of {step} bytes");
        }
        let many: Vec<Bytes> = (0..3000).map(|_| Bytes::from_static(b"x")).collect();
        assert_eq!(unwritten(&many, 0, 0).len(), MAX_IOVECS);
        assert_eq!(advance(&many, 0, 0, 3000), (3000, 0));
    }
}

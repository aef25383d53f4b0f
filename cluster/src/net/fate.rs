//! What is known of a request's fate when no answer came: whether its peer certainly did
//! not run it ([`NotRun`]), and whether a pooled connection is still worth writing to.

use super::Reply;
use crate::types::MetaConfig;
use cairn_engine::env::ByteStream;
use openraft::errors::{NetworkError, RPCError, Unreachable};
use std::io;

/// Whether an idle connection's peer closed it (its process ended, so a request written
/// now would meet a reset and be in doubt) or sent what no request asked for: a read that
/// completes at once. A live peer's connection has nothing to read, and the read waits.
/// The read is polled once and dropped, which loses nothing on the peer connections'
/// streams (plain TCP, or the simulator's, which take bytes only when a read completes);
/// a TLS stream's read may write, so peer traffic over TLS would need another probe.
pub(super) fn closed_by_peer(stream: &mut dyn ByteStream) -> bool {
    let mut byte = [0u8; 1];
    futures_util::FutureExt::now_or_never(stream.read(&mut byte)).is_some()
}

/// Why a request was not run by its peer, known for certain: it was never sent (no
/// connection, a refused handshake, a pool that stayed busy), or the peer answered that it
/// did not take it (a partition request refused or addressed to another replica). A
/// request that failed otherwise may have run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotRun(String);

/// Whether `e` says for certain that the peer did not run the request ([`NotRun`]).
pub fn not_run(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<NotRun>())
}

/// `e`, marked as a request the peer did not run ([`NotRun`]).
pub(crate) fn unsent(e: io::Error) -> io::Error {
    if not_run(&e) {
        return e;
    }
    io::Error::new(e.kind(), NotRun(format!("not run: {e}")))
}

/// A copy of `e` (its kind, its words, and whether it was [`NotRun`]), for each of the
/// requests one failed exchange carried.
pub(crate) fn copy(e: &io::Error) -> io::Error {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<NotRun>()) {
        Some(not_run) => io::Error::new(e.kind(), NotRun(not_run.0.clone())),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

pub(super) fn refused(why: String) -> io::Error {
    io::Error::other(format!("the peer refused: {why}"))
}

pub(super) fn elsewhere(why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        format!("not that replica: {why}"),
    )
}

pub(super) fn unexpected() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "the peer answered another request",
    )
}

/// The error openraft gets for a failed exchange.
pub(crate) fn rpc_error<C: openraft::RaftTypeConfig>(e: io::Error) -> RPCError<C> {
    match e.kind() {
        // A peer that refuses the handshake (another secret, another member at the address)
        // is unreachable, not a network error: openraft backs off from it.
        io::ErrorKind::ConnectionRefused
        | io::ErrorKind::TimedOut
        | io::ErrorKind::NotConnected
        | io::ErrorKind::PermissionDenied => RPCError::Unreachable(Unreachable::new(&e)),
        _ => RPCError::Network(NetworkError::new(&e)),
    }
}

/// The answer `pick` takes from a peer's reply, or the error openraft gets.
pub(super) fn answered<T>(
    reply: io::Result<Reply>,
    pick: impl FnOnce(Reply) -> Option<T>,
) -> Result<T, RPCError<MetaConfig>> {
    match reply {
        Ok(Reply::Refused(why)) => Err(rpc_error(refused(why))),
        Ok(Reply::Elsewhere(why)) => Err(rpc_error(elsewhere(why))),
        Ok(reply) => pick(reply).ok_or_else(|| rpc_error(unexpected())),
        Err(e) => Err(rpc_error(e)),
    }
}

//! The peer connections a member serves, per peer member, with a bound on each.
//!
//! A peer's process that died without closing its connections (a power loss, a host that
//! vanished) leaves them open here: nothing reads a close that never comes. Its next
//! process opens new ones. So each member may hold at most [`PER_MEMBER`] connections here;
//! a newer one closes its oldest, which are a dead process's first. A live member opens at
//! most 45 at once (`decide::MAX_READS` and `MAX_FORWARDS` metadata asks, its Raft clients,
//! its partition groups' pools of `partition::net::POOL` and `FORWARD_POOL`, its beat:
//! `partition::quiet`), so a live
//! one's are closed only past twice that (one-exchange connections whose client gave up
//! while this member still answers them count until it has). What no newer connection
//! closes (a replaced member's, whose id never connects again) closes once idle for
//! `net::PEER_IDLE`.
//!
//! | a connection that proved member `m` arrives | `m` holds |
//! |---|---|
//! | fewer than [`PER_MEMBER`] | it is served |
//! | [`PER_MEMBER`] already | its oldest is closed (its task's `closed` resolves), then it is served |

use cairn_engine::env::chan::{oneshot, Pending, Reply};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::types::MemberId;

/// Connections one peer member may hold here at once: twice what a live one needs.
pub const PER_MEMBER: usize = 96;

/// The metadata group's Raft clients of one peer (replication, heartbeats, votes, a
/// snapshot's), at most.
const RAFT_CLIENTS: usize = 4;
/// The connection a peer member beats this one on (`partition::quiet`).
const BEAT_CLIENTS: usize = 1;
const _: () = assert!(
    2 * (crate::decide::MAX_READS
        + crate::decide::MAX_FORWARDS
        + RAFT_CLIENTS
        + 2 * crate::partition::batch::CONNECTIONS
        + crate::partition::net::POOL
        + crate::partition::net::FORWARD_POOL
        + BEAT_CLIENTS)
        <= PER_MEMBER
);

/// The connections served, by the member each proved; clones share them.
#[derive(Clone, Default)]
pub(crate) struct Served {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// Per member, oldest first: each connection's number and the handle whose drop closes
    /// it.
    by_member: BTreeMap<MemberId, VecDeque<(u64, Reply<()>)>>,
}

/// One served connection: `closed` resolves when a newer connection of its member closed
/// it; dropping it (the connection ended) forgets it.
pub(crate) struct Entry {
    served: Served,
    member: MemberId,
    number: u64,
    pub closed: Pending<()>,
}

impl Served {
    /// Records a connection of `member`, closing its oldest if it holds [`PER_MEMBER`].
    pub fn admit(&self, member: MemberId) -> Entry {
        let (handle, closed) = oneshot();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.next += 1;
        let number = inner.next;
        let held = inner.by_member.entry(member).or_default();
        while held.len() >= PER_MEMBER {
            let (oldest, _dropped) = held.pop_front().expect("held is not empty");
            tracing::info!(
                member,
                oldest,
                "a peer's oldest connection closed: it opened {PER_MEMBER} newer ones"
            );
        }
        held.push_back((number, handle));
        assert!(held.len() <= PER_MEMBER);
        Entry {
            served: self.clone(),
            member,
            number,
            closed,
        }
    }

    /// Connections held now (all members).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.by_member.values().map(VecDeque::len).sum()
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut inner = self.served.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = inner.by_member.get_mut(&self.member) {
            held.retain(|(n, _)| *n != self.number);
            if held.is_empty() {
                inner.by_member.remove(&self.member);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[test]
    fn a_members_newest_connection_closes_its_oldest_and_no_other_members() {
        let served = Served::default();
        let mut first: Vec<Entry> = (0..PER_MEMBER).map(|_| served.admit(2)).collect();
        let other = served.admit(3);
        assert_eq!(served.len(), PER_MEMBER + 1);
        assert!(first
            .iter_mut()
            .all(|e| (&mut e.closed).now_or_never().is_none()));
        let mut newest = served.admit(2);
        // The oldest of member 2's is closed; every other stays open.
        assert!((&mut first[0].closed).now_or_never().is_some());
        assert!(first[1..]
            .iter_mut()
            .all(|e| (&mut e.closed).now_or_never().is_none()));
        let mut other = other;
        assert!((&mut other.closed).now_or_never().is_none());
        assert!((&mut newest.closed).now_or_never().is_none());
        assert_eq!(served.len(), PER_MEMBER + 1);
        // Connections that end are forgotten.
        drop(first);
        assert_eq!(served.len(), 2);
    }
}

//! Each user's share of a byte budget ([`Shares`]), for replies and for request bodies.
//!
//! Every reply to a logged-in session is reserved before it is built: a poll's as much as
//! it may carry, any other's [`OTHER_ROOM`].
//!
//! Replies built and not yet written are bounded before they are built (review S5): a poll
//! reserves what its reply may take (the node's poll bound, `tcp.max_reply_bytes`, at most
//! a user's share) from its user's share and from the server's reply budget, waiting while
//! either is full; once built the reservation becomes the reply's real size, given back when
//! the reply is written. A reader that takes none of its replies so stalls its own polls,
//! never another user's, and the replies in memory stay within the budget (plus, per connection
//! with a reply, what it may exceed its reservation by: `Shares::overdrawn`).
//!
//! Request bodies larger than a login's or a poll's take their exact size from their user's
//! share of the bodies' budget ([`Shares::reserve_exact`]; `Context::bodies`), so one
//! tenant's slow or huge sends hold at most its share beside everyone else's.

use cairn_engine::env::chan::{ByteBudget, Charge};
use cairn_engine::env::Env;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A user's share of the reply budget is this fraction of it.
pub const USERS_SHARING: u64 = 8;

/// A poll reserves at most this fraction of its user's share, so that this many of the
/// user's polls build at once (a larger reply is cut at it, as at `tcp.max_reply_bytes`).
pub const POLLS_PER_SHARE: u64 = 8;

/// The least room a poll waits for: a reply of fewer bytes than this is not worth cutting
/// (a first batch always goes whole anyway).
pub const MIN_ROOM: u64 = 64 * 1024;

/// What any other request's reply reserves (most answers are a few bytes; a list that
/// grows past it counts in full in its user's share once built).
pub const OTHER_ROOM: u64 = 4 * 1024;

/// How often a poll waiting for room tries again.
const RETRY: Duration = Duration::from_millis(5);

/// Each user's share of a byte budget (replies, or request bodies), and what each holds.
pub struct Shares {
    budget: ByteBudget,
    share: u64,
    reply_max: u64,
    held: Arc<Mutex<BTreeMap<u32, u64>>>,
    /// Bytes settled replies hold past what they reserved (see [`Shares::overdrawn`]).
    overdrawn: Arc<AtomicU64>,
}

/// Bytes of a user's share (and of the budget) a reply holds; given back when dropped.
pub struct Held {
    held: Arc<Mutex<BTreeMap<u32, u64>>>,
    user: u32,
    bytes: u64,
    /// Of `bytes`, those past the reservation it was settled from.
    over: u64,
    overdrawn: Arc<AtomicU64>,
    _budget: Charge,
}

impl Shares {
    /// `total` bytes of replies at once, a user at most `total / users_sharing`; a poll
    /// reserves up to `reply_max`.
    pub fn new(total: u64, users_sharing: u64, reply_max: u64) -> Shares {
        Shares::over(ByteBudget::new(total), users_sharing, reply_max)
    }

    /// Shares of `budget` (shared with whoever else holds it), a user at most
    /// `budget.total() / users_sharing`; a poll reserves up to `reply_max`.
    pub fn over(budget: ByteBudget, users_sharing: u64, reply_max: u64) -> Shares {
        let total = budget.total();
        assert!(total > 0 && users_sharing > 0 && reply_max > 0);
        Shares {
            budget,
            share: (total / users_sharing).max(1),
            reply_max,
            held: Arc::default(),
            overdrawn: Arc::default(),
        }
    }

    /// Room for one reply of `user`'s: as much of `tcp.max_reply_bytes` as its share and
    /// the budget have free, at least [`MIN_ROOM`] (waiting for that, at most `limit`, while
    /// either is full; `None` when the wait ran out). The poll then carries at most
    /// [`Held::bytes`] of batches.
    pub async fn reserve(&self, env: &Env, user: u32, limit: Duration) -> Option<Held> {
        let started = env.clock.monotonic_nanos();
        loop {
            if let Some(held) = self.try_reserve_free(user) {
                return Some(held);
            }
            if env.clock.monotonic_nanos().saturating_sub(started) >= limit.as_nanos() as u64 {
                return None;
            }
            env.clock.sleep(RETRY).await;
        }
    }

    /// Room for the reply of any request but a poll: [`OTHER_ROOM`], waiting (at most
    /// `limit`) while `user`'s share or the budget is full; `None` when the wait ran out.
    /// Settled to the reply's size once built, it holds its user's share until written,
    /// so a reader that takes none of its replies stalls its own requests only.
    pub async fn reserve_other(&self, env: &Env, user: u32, limit: Duration) -> Option<Held> {
        let started = env.clock.monotonic_nanos();
        loop {
            if let Some(held) = self.try_reserve(user, OTHER_ROOM) {
                return Some(held);
            }
            if env.clock.monotonic_nanos().saturating_sub(started) >= limit.as_nanos() as u64 {
                return None;
            }
            env.clock.sleep(RETRY).await;
        }
    }

    /// Exactly `bytes` of `user`'s share and of the budget, waiting while either is full
    /// (a size above the share is taken only while the user holds nothing else). The
    /// caller bounds the wait.
    pub async fn reserve_exact(&self, env: &Env, user: u32, bytes: u64) -> Held {
        loop {
            if let Some(held) = self.try_reserve(user, bytes) {
                return held;
            }
            env.clock.sleep(RETRY).await;
        }
    }

    /// What [`Shares::reserve`] tries each time.
    fn try_reserve_free(&self, user: u32) -> Option<Held> {
        let mine = {
            let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            held.get(&user).copied().unwrap_or(0)
        };
        let free = self
            .share
            .saturating_sub(mine)
            .min(self.budget.total().saturating_sub(self.budget.held()))
            .min(self.reply_max)
            .min(self.share / POLLS_PER_SHARE);
        self.try_reserve(user, free.max(MIN_ROOM.min(self.reply_max)))
    }

    fn try_reserve(&self, user: u32, bytes: u64) -> Option<Held> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let mine = held.get(&user).copied().unwrap_or(0);
        if mine + bytes > self.share.max(bytes) {
            return None;
        }
        let budget = self.budget.try_acquire(bytes)?;
        held.insert(user, mine + bytes);
        Some(Held {
            held: self.held.clone(),
            user,
            bytes,
            over: 0,
            overdrawn: self.overdrawn.clone(),
            _budget: budget,
        })
    }

    /// Bytes the settled replies hold past what they reserved: a poll's first batch goes
    /// whole, and a list is built at its size. The excess counts in its user's share (so
    /// that user's next replies wait) but not in the budget others reserve from (so one
    /// tenant's large replies never stall another's): it is memory beside the budget, at
    /// most one reply's excess per connection.
    pub fn overdrawn(&self) -> u64 {
        self.overdrawn.load(Ordering::Relaxed)
    }

    /// Bytes of replies held now.
    pub fn held(&self) -> u64 {
        self.budget.held()
    }

    /// The reply budget.
    pub fn total(&self) -> u64 {
        self.budget.total()
    }

    /// `reservation` becomes `bytes`, the built reply's size, in its user's share; the budget
    /// keeps at most the reservation. A reply larger than its reservation (a poll's first
    /// batch goes whole; a list is built at its size) overdraws its user's share only, so
    /// its user's next replies wait until it is written, never another's
    /// ([`Shares::overdrawn`] counts the excess).
    pub fn settle(&self, reservation: Held, bytes: u64) -> Held {
        let user = reservation.user;
        let over = bytes.saturating_sub(reservation.bytes);
        let budget = self.budget.charge(bytes.min(reservation.bytes));
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        *held.entry(user).or_default() += bytes;
        drop(held);
        self.overdrawn.fetch_add(over, Ordering::Relaxed);
        drop(reservation);
        Held {
            held: self.held.clone(),
            user,
            bytes,
            over,
            overdrawn: self.overdrawn.clone(),
            _budget: budget,
        }
    }
}

impl Held {
    /// The batch bytes the reply may carry.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.overdrawn.fetch_sub(self.over, Ordering::Relaxed);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let mine = held.get_mut(&self.user).expect("a holder's user is held");
        *mine -= self.bytes;
        if *mine == 0 {
            held.remove(&self.user);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_holds_at_most_its_share_and_a_settled_reply_holds_its_size() {
        let shares = Shares::new(100, 4, 20);
        // A share of 25: one reservation of 20 fits, a second does not.
        let first = shares.try_reserve(1, 20).expect("room");
        assert!(shares.try_reserve(1, 20).is_none(), "20 + 20 > 25");
        let other = shares.try_reserve(2, 20).expect("another user's share");
        let built = shares.settle(first, 3);
        assert_eq!(shares.held(), 23);
        assert_eq!(shares.overdrawn(), 0);
        let second = shares.try_reserve(1, 20).expect("3 + 20 ≤ 25");
        drop((built, second, other));
        assert_eq!(shares.held(), 0);
        assert!(shares.held.lock().unwrap().is_empty());
        // The budget bounds every user together.
        let held: Vec<_> = (10..15).filter_map(|u| shares.try_reserve(u, 20)).collect();
        assert_eq!(held.len(), 5, "100 bytes: five reservations of 20");
        assert!(shares.try_reserve(99, 20).is_none());
        drop(held);
        // A reply built past its reservation counts whole in its user's share, and its
        // excess is counted apart: that user waits, another does not.
        let list = shares.try_reserve(1, 4).unwrap();
        let list = shares.settle(list, 90);
        assert_eq!((shares.held(), shares.overdrawn()), (4, 86));
        assert!(
            shares.try_reserve(1, 1).is_none(),
            "user 1's share is overdrawn"
        );
        let other = shares.try_reserve(2, 20).expect("user 2 is not held back");
        drop((list, other));
        assert_eq!((shares.held(), shares.overdrawn()), (0, 0));
        assert!(shares.try_reserve(1, 20).is_some());
    }

    /// Review S5, per tenant: bodies take their size from their user's share of the
    /// bodies' budget, which others charge too; a body above the share goes only alone.
    #[test]
    fn shares_over_a_shared_budget_count_what_others_hold() {
        let budget = ByteBudget::new(100);
        let shares = Shares::over(budget.clone(), 4, u64::MAX);
        let small = budget.charge(30);
        assert!(
            shares.try_reserve(1, 80).is_none(),
            "30 are charged elsewhere"
        );
        let alone = shares
            .try_reserve(1, 70)
            .expect("above the share of 25, alone");
        assert!(
            shares.try_reserve(1, 1).is_none(),
            "its user holds 70 already"
        );
        assert!(shares.try_reserve(2, 1).is_none(), "and the budget is full");
        drop((small, alone));
        let first = shares.try_reserve(1, 20).unwrap();
        assert!(shares.try_reserve(1, 20).is_none(), "20 + 20 > 25");
        let other = shares.try_reserve(2, 25).expect("another user's share");
        drop((first, other));
        assert_eq!(budget.held(), 0);
    }
}

//! The limit on login attempts: how many may fail, and how many may be checked at once.
//!
//! An attempt is counted when it begins, before its password is verified: while the
//! window's failures and the attempts being checked could together reach the limit, the
//! next is refused as busy, so a burst of logins sent at once is held to the limit like a
//! slow series, however long each verification takes. An attempt that ends without success
//! (and that the node could judge) is a failure; past the limit the account is locked out
//! for that address until the window passes.
//!
//! Failures are counted per (address, account): one shared address (a NAT, a reverse
//! proxy, every loopback client) locks out only the account it guesses at, never the
//! others behind it. Token logins, which name no account, share one count per address.
//!
//! Password verifications (argon2, the costly ones) are bounded per address and overall,
//! ahead of the hashing pool. Past its address's bound an attempt is refused
//! ([`Refusal::Busy`]) and the command layer's `login::begin` tries again (bounded); the
//! overall bound is a line served in arrival order ([`LoginLimiter::turn`]), so a crowd of
//! guessers from many addresses delays an honest login by the guesses queued before it,
//! never starves it. A token is checked by its hash, cheaply: it waits for neither bound.

use cairn_engine::env::chan::{TakeTurn, Turn, Turns};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Most (address, account) pairs whose attempts are remembered; past it the oldest window
/// is dropped.
pub const MAX_TRACKED: usize = 65_536;
/// Password verifications begun (in flight or in line for a turn) from one address.
pub const MAX_IN_FLIGHT_PER_ADDRESS: u32 = 4;
/// Password verifications in flight from every address together (turns).
pub const MAX_IN_FLIGHT: u32 = 64;
/// Account names longer than this are counted under their first bytes (a username is at
/// most 50 bytes; anything longer fails anyway).
const MAX_ACCOUNT_LEN: usize = 64;

/// Who a login tries to be.
#[derive(Debug, Clone, Copy)]
pub enum Account<'a> {
    /// A username (a password login, or a password checked by ChangePassword).
    User(&'a str),
    /// Any personal access token.
    Token,
}

impl Account<'_> {
    fn key(self) -> String {
        match self {
            // A username is never empty: the empty key is every token's.
            Account::User(name) => {
                let mut end = name.len().min(MAX_ACCOUNT_LEN);
                while !name.is_char_boundary(end) {
                    end -= 1;
                }
                format!("u:{}", &name[..end])
            }
            Account::Token => String::new(),
        }
    }
}

/// Why an attempt may not begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This address failed too often at this account within the window.
    LockedOut,
    /// Too many attempts at this account, or password verifications from this address,
    /// in flight.
    Busy,
}

/// One (address, account)'s attempts in its current window.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// When the window began (µs, monotonic).
    since: u64,
    /// Attempts refused on their merits in the window.
    failures: u32,
    /// Attempts being checked now (each may still fail).
    in_flight: u32,
}

struct Counts {
    attempts: BTreeMap<(IpAddr, String), Entry>,
    /// Password attempts begun and not ended, per address and in all.
    in_flight: BTreeMap<IpAddr, u32>,
    in_flight_total: u32,
    /// Attempts begun (checks run), ever.
    begun: u64,
}

pub struct LoginLimiter {
    max_failures: u32,
    window_micros: u64,
    counts: Mutex<Counts>,
    /// The turns of password verifications: [`MAX_IN_FLIGHT`] at once, first come first
    /// served.
    turns: Turns,
}

/// One login attempt under way: it holds its slots until dropped, and is counted as a
/// failure then unless [`Attempt::succeeded`] or [`Attempt::not_judged`] settled it.
pub struct Attempt<'l> {
    limiter: &'l LoginLimiter,
    ip: IpAddr,
    key: String,
    /// The window the attempt was counted in.
    since: u64,
    failed: bool,
    /// A password attempt: counted at its address.
    costly: bool,
    /// Its turn to be verified, once it has it.
    turn: Option<Turn>,
}

impl LoginLimiter {
    pub fn new(max_failures: u32, window: std::time::Duration) -> LoginLimiter {
        assert!(max_failures > 0, "at least one attempt per window");
        LoginLimiter {
            max_failures,
            window_micros: u64::try_from(window.as_micros()).unwrap_or(u64::MAX),
            counts: Mutex::new(Counts {
                attempts: BTreeMap::new(),
                in_flight: BTreeMap::new(),
                in_flight_total: 0,
                begun: 0,
            }),
            turns: Turns::new(MAX_IN_FLIGHT as usize),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Begins an attempt from `ip` at `account` at `now` (µs, monotonic), counted at once:
    /// refused as locked out once the window's failures reached the limit, and as busy while
    /// the failures and the attempts in flight together would (an attempt in flight may
    /// fail), or (a password) past the verifications its address may have begun. A password
    /// attempt is then verified only in its [`LoginLimiter::turn`].
    pub fn begin(
        &self,
        ip: IpAddr,
        account: Account<'_>,
        now: u64,
    ) -> Result<Attempt<'_>, Refusal> {
        let key = (ip, account.key());
        let (max, window) = (self.max_failures, self.window_micros);
        let mut counts = self.lock();
        if let Some(entry) = counts.attempts.get_mut(&key) {
            if now.saturating_sub(entry.since) >= window {
                *entry = Entry {
                    since: now,
                    failures: 0,
                    in_flight: entry.in_flight,
                };
            }
            if entry.failures >= max {
                return Err(Refusal::LockedOut);
            }
            if entry.failures + entry.in_flight >= max {
                return Err(Refusal::Busy);
            }
        }
        let costly = matches!(account, Account::User(_));
        let from_ip = counts.in_flight.get(&ip).copied().unwrap_or(0);
        if costly && from_ip >= MAX_IN_FLIGHT_PER_ADDRESS {
            return Err(Refusal::Busy);
        }
        if counts.attempts.len() >= MAX_TRACKED && !counts.attempts.contains_key(&key) {
            // Only an entry that locks nobody out and has nothing in flight may go, oldest
            // first: forgetting a lockout would give its guesser a fresh window.
            let evictable = counts
                .attempts
                .iter()
                .filter(|(_, e)| {
                    e.in_flight == 0 && (e.failures < max || now.saturating_sub(e.since) >= window)
                })
                .min_by_key(|(_, e)| e.since)
                .map(|(k, _)| k.clone());
            let Some(evicted) = evictable else {
                return Err(Refusal::Busy);
            };
            counts.attempts.remove(&evicted);
        }
        let entry = counts.attempts.entry(key.clone()).or_insert(Entry {
            since: now,
            failures: 0,
            in_flight: 0,
        });
        entry.in_flight += 1;
        let since = entry.since;
        if costly {
            *counts.in_flight.entry(ip).or_insert(0) += 1;
            counts.in_flight_total += 1;
        }
        counts.begun += 1;
        assert!(counts.attempts.len() <= MAX_TRACKED);
        assert!(counts.in_flight.get(&ip).copied().unwrap_or(0) <= MAX_IN_FLIGHT_PER_ADDRESS);
        Ok(Attempt {
            limiter: self,
            ip,
            key: key.1,
            since,
            failed: true,
            costly,
            turn: None,
        })
    }

    /// A turn to verify a password: at most [`MAX_IN_FLIGHT`] at once, in arrival order.
    pub fn turn(&self) -> TakeTurn<'_> {
        self.turns.take()
    }

    /// Password attempts begun and not ended, from every address (for tests and figures).
    pub fn in_flight(&self) -> u32 {
        self.lock().in_flight_total
    }

    /// Attempts begun since start: the credentials checks run (`/metrics`).
    pub fn begun(&self) -> u64 {
        self.lock().begun
    }
}

impl Attempt<'_> {
    /// Holds `turn` (from [`LoginLimiter::turn`]) until the attempt ends.
    pub fn hold(&mut self, turn: Turn) {
        debug_assert!(self.costly, "only a password waits for a turn");
        self.turn = Some(turn);
    }

    /// The credentials were right: the attempt is not a failure.
    pub fn succeeded(mut self) {
        self.failed = false;
    }

    /// The node could not judge the credentials (stopped, busy): a failure of the server,
    /// not of the caller, so it does not count.
    pub fn not_judged(mut self) {
        self.failed = false;
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let mut counts = self.limiter.lock();
        let key = (self.ip, std::mem::take(&mut self.key));
        let entry = counts
            .attempts
            .get_mut(&key)
            .expect("an entry with an attempt in flight is never evicted");
        entry.in_flight -= 1;
        // A failure counts in the window it began in, not in a later one.
        if self.failed && entry.since == self.since {
            entry.failures += 1;
        }
        if !self.costly {
            return;
        }
        let from_ip = counts
            .in_flight
            .get_mut(&self.ip)
            .expect("an attempt in flight is counted at its address");
        *from_ip -= 1;
        if *from_ip == 0 {
            counts.in_flight.remove(&self.ip);
        }
        counts.in_flight_total -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    /// Review S2: the attempts of a burst are each counted before any is verified.
    #[test]
    fn a_burst_is_counted_before_it_is_verified() {
        let limiter = LoginLimiter::new(3, Duration::from_secs(60));
        let a = limiter.begin(ip(1), Account::User("root"), 0).unwrap();
        let b = limiter.begin(ip(1), Account::User("root"), 0).unwrap();
        let c = limiter.begin(ip(1), Account::User("root"), 0).unwrap();
        assert_eq!(
            limiter.begin(ip(1), Account::User("root"), 0).err(),
            Some(Refusal::Busy),
            "three attempts in flight may use the window's three failures"
        );
        drop((a, b));
        c.succeeded();
        let d = limiter
            .begin(ip(1), Account::User("root"), 1)
            .expect("two failed, the success refunded its own attempt");
        drop(d);
        assert_eq!(
            limiter.begin(ip(1), Account::User("root"), 1).err(),
            Some(Refusal::LockedOut)
        );
    }

    /// Review S14: a locked address is locked out of the account under attack only.
    #[test]
    fn a_locked_address_keeps_every_other_account_and_other_addresses_keep_it() {
        let limiter = LoginLimiter::new(2, Duration::from_secs(10));
        for _ in 0..2 {
            drop(limiter.begin(ip(1), Account::User("root"), 0).unwrap());
        }
        assert_eq!(
            limiter.begin(ip(1), Account::User("root"), 1).err(),
            Some(Refusal::LockedOut)
        );
        limiter
            .begin(ip(1), Account::User("alice"), 1)
            .unwrap()
            .succeeded();
        limiter
            .begin(ip(2), Account::User("root"), 1)
            .unwrap()
            .succeeded();
        limiter.begin(ip(1), Account::Token, 1).unwrap().succeeded();
        limiter
            .begin(ip(1), Account::User("root"), 10_000_000)
            .expect("the window passed")
            .succeeded();
    }

    #[test]
    fn a_success_or_an_unjudged_attempt_does_not_count() {
        let limiter = LoginLimiter::new(1, Duration::from_secs(10));
        for _ in 0..5 {
            limiter
                .begin(ip(1), Account::User("bob"), 0)
                .unwrap()
                .succeeded();
            limiter
                .begin(ip(1), Account::User("bob"), 0)
                .unwrap()
                .not_judged();
        }
        drop(limiter.begin(ip(1), Account::User("bob"), 0).unwrap());
        assert_eq!(
            limiter.begin(ip(1), Account::User("bob"), 0).err(),
            Some(Refusal::LockedOut)
        );
    }

    #[test]
    fn password_checks_are_bounded_per_address_and_token_checks_are_not() {
        let limiter = LoginLimiter::new(u32::MAX, Duration::from_secs(10));
        let mine: Vec<_> = (0..MAX_IN_FLIGHT_PER_ADDRESS)
            .map(|n| {
                limiter
                    .begin(ip(1), Account::User(&format!("u{n}")), 0)
                    .unwrap()
            })
            .collect();
        assert_eq!(
            limiter.begin(ip(1), Account::User("other"), 0).err(),
            Some(Refusal::Busy)
        );
        limiter
            .begin(ip(2), Account::User("other"), 0)
            .expect("another address has its own bound")
            .succeeded();
        // A token is checked by its hash: as many as come, and none counts as a password.
        let tokens: Vec<_> = (0..2 * MAX_IN_FLIGHT)
            .map(|_| limiter.begin(ip(1), Account::Token, 0).unwrap())
            .collect();
        assert_eq!(limiter.in_flight(), MAX_IN_FLIGHT_PER_ADDRESS);
        drop(mine);
        assert_eq!(limiter.in_flight(), 0);
        limiter
            .begin(ip(1), Account::User("u0"), 0)
            .unwrap()
            .succeeded();
        drop(tokens);
        assert_eq!(limiter.in_flight(), 0);
    }

    /// A full table never forgets a lockout to make room: a guesser cannot flood it with
    /// names to win a fresh window.
    #[test]
    fn a_full_table_keeps_its_lockouts() {
        let limiter = LoginLimiter::new(2, Duration::from_secs(3600));
        for _ in 0..2 {
            drop(limiter.begin(ip(1), Account::User("root"), 0).unwrap());
        }
        for n in 0..MAX_TRACKED {
            let name = format!("u{n}");
            limiter
                .begin(ip(2), Account::User(&name), 1 + n as u64)
                .unwrap()
                .succeeded();
        }
        assert_eq!(
            limiter
                .begin(ip(1), Account::User("root"), 2 + MAX_TRACKED as u64)
                .err(),
            Some(Refusal::LockedOut)
        );
    }
}

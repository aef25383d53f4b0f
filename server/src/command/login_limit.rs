//! The limit on login attempts: how many may fail, and how many may be checked at once.
//!
//! An attempt is counted when it begins, before its password is verified, and refunded
//! only when it succeeds (or the node could not judge it): a burst of logins sent at once
//! is held to the limit like a slow series, however long each verification takes.
//!
//! Failures are counted per (address, account): one shared address (a NAT, a reverse
//! proxy, every loopback client) locks out only the account it guesses at, never the
//! others behind it. Token logins, which name no account, share one count per address.
//!
//! Verifications in flight are bounded per address and overall, ahead of the hashing pool:
//! a flood of logins is refused at once ([`Refusal::Busy`]) instead of queueing every
//! other address's login behind it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Most (address, account) pairs whose attempts are remembered; past it the oldest window
/// is dropped.
pub const MAX_TRACKED: usize = 65_536;
/// Verifications in flight from one address.
pub const MAX_IN_FLIGHT_PER_ADDRESS: u32 = 4;
/// Verifications in flight from every address together.
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
    /// Too many verifications in flight, from this address or overall.
    Busy,
}

struct Counts {
    /// (address, account key) → (window start µs, attempts counted in it).
    attempts: BTreeMap<(IpAddr, String), (u64, u32)>,
    in_flight: BTreeMap<IpAddr, u32>,
    in_flight_total: u32,
}

pub struct LoginLimiter {
    max_failures: u32,
    window_micros: u64,
    counts: Mutex<Counts>,
}

/// One login attempt under way: it holds an in-flight slot until dropped, and stays
/// counted as a failure unless [`Attempt::succeeded`] or [`Attempt::not_judged`] says
/// otherwise.
pub struct Attempt<'l> {
    limiter: &'l LoginLimiter,
    ip: IpAddr,
    key: String,
    /// The window the attempt was counted in.
    since: u64,
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
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Begins an attempt from `ip` at `account` at `now` (µs, monotonic), counted at once.
    pub fn begin(
        &self,
        ip: IpAddr,
        account: Account<'_>,
        now: u64,
    ) -> Result<Attempt<'_>, Refusal> {
        let key = account.key();
        let mut counts = self.lock();
        let window = self.window_micros;
        if let Some(&(since, count)) = counts.attempts.get(&(ip, key.clone())) {
            if count >= self.max_failures && now.saturating_sub(since) < window {
                return Err(Refusal::LockedOut);
            }
        }
        let from_ip = counts.in_flight.get(&ip).copied().unwrap_or(0);
        if from_ip >= MAX_IN_FLIGHT_PER_ADDRESS || counts.in_flight_total >= MAX_IN_FLIGHT {
            return Err(Refusal::Busy);
        }
        if counts.attempts.len() >= MAX_TRACKED && !counts.attempts.contains_key(&(ip, key.clone()))
        {
            let oldest = counts
                .attempts
                .iter()
                .min_by_key(|(_, (since, _))| *since)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                counts.attempts.remove(&oldest);
            }
        }
        let entry = counts.attempts.entry((ip, key.clone())).or_insert((now, 0));
        if now.saturating_sub(entry.0) >= window {
            *entry = (now, 0);
        }
        entry.1 += 1;
        let since = entry.0;
        *counts.in_flight.entry(ip).or_insert(0) += 1;
        counts.in_flight_total += 1;
        assert!(counts.attempts.len() <= MAX_TRACKED);
        Ok(Attempt {
            limiter: self,
            ip,
            key,
            since,
        })
    }

    /// Verifications in flight from every address (for tests and figures).
    pub fn in_flight(&self) -> u32 {
        self.lock().in_flight_total
    }
}

impl Attempt<'_> {
    /// The credentials were right: the attempt is not a failure.
    pub fn succeeded(self) {
        self.refund();
    }

    /// The node could not judge the credentials (stopped, busy): a failure of the server,
    /// not of the caller, so it does not count.
    pub fn not_judged(self) {
        self.refund();
    }

    fn refund(&self) {
        let mut counts = self.limiter.lock();
        if let Some(entry) = counts.attempts.get_mut(&(self.ip, self.key.clone())) {
            // Only the window it was counted in holds it.
            if entry.0 == self.since {
                entry.1 = entry.1.saturating_sub(1);
            }
        }
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let mut counts = self.limiter.lock();
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
            Some(Refusal::LockedOut),
            "three attempts in flight already use the window's three"
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
    fn verifications_in_flight_are_bounded_per_address_and_overall() {
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
        let mut others = Vec::new();
        let mut n = 0u32;
        while limiter.in_flight() < MAX_IN_FLIGHT {
            let from = IpAddr::from((n + 2).to_be_bytes());
            others.push(limiter.begin(from, Account::Token, 0).unwrap());
            n += 1;
        }
        assert_eq!(
            limiter.begin(ip(200), Account::Token, 0).err(),
            Some(Refusal::Busy),
            "every slot is held"
        );
        drop(mine);
        assert_eq!(
            limiter.in_flight(),
            MAX_IN_FLIGHT - MAX_IN_FLIGHT_PER_ADDRESS
        );
        limiter
            .begin(ip(1), Account::User("u0"), 0)
            .unwrap()
            .succeeded();
        drop(others);
        assert_eq!(limiter.in_flight(), 0);
    }
}

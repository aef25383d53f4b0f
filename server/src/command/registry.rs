//! What the server knows about its live connections (for `GetClients`, `GetClient`, `GetMe`
//! and stats), and the per-address limit on failed logins. Both are bounded: connections by
//! [`crate::ServerLimits::max_connections`], addresses by [`MAX_TRACKED_ADDRESSES`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

/// One live connection as `GetClients` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientEntry {
    pub address: SocketAddr,
    /// The user logged in on it, if any.
    pub user_id: Option<u32>,
    /// The protocol client id of its current login (memberships are keyed by it).
    pub client: u128,
    /// Consumer groups joined through it: (stream, topic, group).
    pub groups: BTreeSet<(u32, u32, u32)>,
}

/// The live connections by their numeric client id, minted at connect and again at each
/// login (Iggy's ids are per login, trap T12).
#[derive(Default)]
pub struct Registry {
    inner: Mutex<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    next_id: u32,
    clients: BTreeMap<u32, ClientEntry>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a connection under a fresh id, or `None` when `limit` are live.
    pub fn add(&self, entry: ClientEntry, limit: usize) -> Option<u32> {
        let mut inner = self.lock();
        if inner.clients.len() >= limit {
            return None;
        }
        Some(Self::insert(&mut inner, entry))
    }

    fn insert(inner: &mut RegistryInner, entry: ClientEntry) -> u32 {
        loop {
            inner.next_id = inner.next_id.wrapping_add(1).max(1);
            let id = inner.next_id;
            if let std::collections::btree_map::Entry::Vacant(slot) = inner.clients.entry(id) {
                slot.insert(entry);
                return id;
            }
        }
    }

    /// Moves a connection to a fresh id (a new login), with `change` applied.
    pub fn renew(&self, id: u32, change: impl FnOnce(&mut ClientEntry)) -> u32 {
        let mut inner = self.lock();
        let mut entry = inner
            .clients
            .remove(&id)
            .expect("a live connection is registered");
        change(&mut entry);
        Self::insert(&mut inner, entry)
    }

    pub fn update(&self, id: u32, change: impl FnOnce(&mut ClientEntry)) {
        if let Some(entry) = self.lock().clients.get_mut(&id) {
            change(entry);
        }
    }

    pub fn remove(&self, id: u32) {
        self.lock().clients.remove(&id);
    }

    pub fn get(&self, id: u32) -> Option<ClientEntry> {
        self.lock().clients.get(&id).cloned()
    }

    pub fn list(&self) -> Vec<(u32, ClientEntry)> {
        self.lock()
            .clients
            .iter()
            .map(|(id, e)| (*id, e.clone()))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().clients.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The numeric id of the connection whose login is `client`.
    pub fn id_of(&self, client: u128) -> Option<u32> {
        self.lock()
            .clients
            .iter()
            .find(|(_, e)| e.client == client && e.user_id.is_some())
            .map(|(id, _)| *id)
    }
}

/// Most addresses whose failed logins are remembered; past it the oldest window is dropped.
pub const MAX_TRACKED_ADDRESSES: usize = 65_536;

/// Failed logins per remote address in a window: past `max` failures, logins from that
/// address are refused without checking the password until the window passes. A successful
/// login does not clear the count (else any account's login would reset an attacker's
/// guesses at another's).
pub struct LoginLimiter {
    max: u32,
    window_micros: u64,
    failures: Mutex<BTreeMap<IpAddr, (u64, u32)>>,
}

impl LoginLimiter {
    pub fn new(max: u32, window: std::time::Duration) -> LoginLimiter {
        LoginLimiter {
            max,
            window_micros: u64::try_from(window.as_micros()).unwrap_or(u64::MAX),
            failures: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<IpAddr, (u64, u32)>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a login from `ip` may be checked at `now` (µs, monotonic).
    pub fn may_try(&self, ip: IpAddr, now: u64) -> bool {
        match self.lock().get(&ip) {
            Some(&(since, count)) => {
                count < self.max || now.saturating_sub(since) >= self.window_micros
            }
            None => true,
        }
    }

    pub fn failed(&self, ip: IpAddr, now: u64) {
        let mut failures = self.lock();
        if failures.len() >= MAX_TRACKED_ADDRESSES && !failures.contains_key(&ip) {
            let oldest = failures
                .iter()
                .min_by_key(|(_, (since, _))| *since)
                .map(|(ip, _)| *ip);
            if let Some(oldest) = oldest {
                failures.remove(&oldest);
            }
        }
        let entry = failures.entry(ip).or_insert((now, 0));
        if now.saturating_sub(entry.0) >= self.window_micros {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn entry() -> ClientEntry {
        ClientEntry {
            address: "127.0.0.1:5000".parse().unwrap(),
            user_id: None,
            client: 1,
            groups: BTreeSet::new(),
        }
    }

    #[test]
    fn the_registry_is_bounded_and_a_login_mints_a_new_id() {
        let registry = Registry::default();
        let a = registry.add(entry(), 2).unwrap();
        let b = registry.add(entry(), 2).unwrap();
        assert_ne!(a, b);
        assert_eq!(registry.add(entry(), 2), None);
        let renewed = registry.renew(a, |e| e.user_id = Some(3));
        assert_ne!(renewed, a);
        assert_eq!(registry.get(a), None);
        assert_eq!(registry.get(renewed).unwrap().user_id, Some(3));
        registry.remove(b);
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn failed_logins_lock_an_address_out_for_the_window() {
        let limiter = LoginLimiter::new(2, Duration::from_secs(10));
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(limiter.may_try(ip, 0));
        limiter.failed(ip, 0);
        assert!(limiter.may_try(ip, 1));
        limiter.failed(ip, 1);
        assert!(!limiter.may_try(ip, 2));
        assert!(limiter.may_try(other, 2));
        assert!(limiter.may_try(ip, 10_000_000));
    }
}

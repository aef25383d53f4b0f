//! What the server knows about its live connections (for `GetClients`, `GetClient`, `GetMe`
//! and stats), bounded by [`Caps`]: connections in all, from one address, and not logged in
//! (anonymous). Indexed by address (the per-address cap) and by login (`id_of`, which maps
//! each member of a consumer group to its connection: a lookup, not a scan).

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

/// How many connections may be live: in all, from one IP address, and not logged in (a
/// new connection is anonymous until its login, so the anonymous cap bounds sockets opened
/// and left idle by anyone; the others keep the rest of the slots for clients that log in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub total: usize,
    pub per_address: usize,
    pub anonymous: usize,
    /// Connections not logged in from one address: far below `anonymous`, so that no one
    /// address (an IPv6 /64 counts as one) fills the anonymous share.
    pub anonymous_per_address: usize,
}

impl Caps {
    /// `total` for each: no cap but the total.
    pub fn only(total: usize) -> Caps {
        Caps {
            total,
            per_address: total,
            anonymous: total,
            anonymous_per_address: total,
        }
    }
}

/// The address a connection counts under: an IPv4 address, or an IPv6 /64 (one host may
/// take any address of its /64).
pub fn address_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("too many connections")]
    Total,
    #[error("too many connections from this address")]
    PerAddress,
    #[error("too many connections not logged in")]
    Anonymous,
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
    /// Live connections per address ([`address_of`]), and those not logged in (no entry
    /// at zero).
    per_address: BTreeMap<IpAddr, (usize, usize)>,
    /// Live connections with no login.
    anonymous: usize,
    /// The connections of each logged-in protocol client id (the client picks it: two
    /// connections may share one).
    by_client: BTreeMap<u128, BTreeSet<u32>>,
    /// Group memberships held through each user's connections (no entry at zero).
    memberships: BTreeMap<u32, usize>,
}

impl RegistryInner {
    /// Adds (`true`) or takes away what `entry`, registered under `id`, counts in the indexes.
    fn index(&mut self, id: u32, entry: &ClientEntry, add: bool) {
        let address = address_of(entry.address.ip());
        let anonymous = entry.user_id.is_none();
        let counts = self.per_address.entry(address).or_default();
        let step = |n: &mut usize| match add {
            true => *n += 1,
            false => *n -= 1,
        };
        step(&mut counts.0);
        if anonymous {
            step(&mut counts.1);
            step(&mut self.anonymous);
        }
        if counts.0 == 0 {
            self.per_address.remove(&address);
        }
        if anonymous {
            return;
        }
        if let Some(user) = entry.user_id.filter(|_| !entry.groups.is_empty()) {
            let held = self.memberships.entry(user).or_default();
            match add {
                true => *held += entry.groups.len(),
                false => *held -= entry.groups.len(),
            }
            if *held == 0 {
                self.memberships.remove(&user);
            }
        }
        let ids = self.by_client.entry(entry.client).or_default();
        match add {
            true => ids.insert(id),
            false => ids.remove(&id),
        };
        if ids.is_empty() {
            self.by_client.remove(&entry.client);
        }
    }

    fn insert(&mut self, entry: ClientEntry) -> u32 {
        loop {
            self.next_id = self.next_id.wrapping_add(1).max(1);
            let id = self.next_id;
            if !self.clients.contains_key(&id) {
                self.index(id, &entry, true);
                self.clients.insert(id, entry);
                return id;
            }
        }
    }

    fn take(&mut self, id: u32) -> Option<ClientEntry> {
        let entry = self.clients.remove(&id)?;
        self.index(id, &entry, false);
        Some(entry)
    }

    /// The indexes agree with the entries (checked in tests and debug builds' changes).
    fn check(&self) {
        debug_assert_eq!(
            self.anonymous,
            self.clients
                .values()
                .filter(|e| e.user_id.is_none())
                .count(),
            "the anonymous count is the entries without a login"
        );
        debug_assert_eq!(
            self.per_address.values().map(|c| c.0).sum::<usize>(),
            self.clients.len(),
            "every connection is counted under its address once"
        );
        debug_assert_eq!(
            self.per_address.values().map(|c| c.1).sum::<usize>(),
            self.anonymous,
            "every connection not logged in is counted under its address once"
        );
        debug_assert_eq!(
            self.memberships.values().sum::<usize>(),
            self.clients
                .values()
                .filter(|e| e.user_id.is_some())
                .map(|e| e.groups.len())
                .sum::<usize>(),
            "every membership is counted under its user once"
        );
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a connection (not logged in yet) under a fresh id, unless a cap is reached.
    pub fn add(&self, entry: ClientEntry, caps: Caps) -> Result<u32, Refused> {
        debug_assert!(entry.user_id.is_none(), "a connection starts with no login");
        let mut inner = self.lock();
        let (from_address, anonymous_from_address) = inner
            .per_address
            .get(&address_of(entry.address.ip()))
            .copied()
            .unwrap_or_default();
        if inner.clients.len() >= caps.total {
            return Err(Refused::Total);
        }
        if from_address >= caps.per_address {
            return Err(Refused::PerAddress);
        }
        if inner.anonymous >= caps.anonymous || anonymous_from_address >= caps.anonymous_per_address
        {
            return Err(Refused::Anonymous);
        }
        let id = inner.insert(entry);
        inner.check();
        Ok(id)
    }

    /// Moves a connection to a fresh id (a new login), with `change` applied.
    pub fn renew(&self, id: u32, change: impl FnOnce(&mut ClientEntry)) -> u32 {
        let mut inner = self.lock();
        let mut entry = inner.take(id).expect("a live connection is registered");
        change(&mut entry);
        let id = inner.insert(entry);
        inner.check();
        id
    }

    pub fn update(&self, id: u32, change: impl FnOnce(&mut ClientEntry)) {
        let mut inner = self.lock();
        if let Some(mut entry) = inner.take(id) {
            change(&mut entry);
            inner.index(id, &entry, true);
            inner.clients.insert(id, entry);
        }
        inner.check();
    }

    pub fn remove(&self, id: u32) {
        let mut inner = self.lock();
        inner.take(id);
        inner.check();
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

    /// Records that connection `id` joins `group`, unless its user holds `cap` memberships
    /// already (then the number it holds): taken before the node's join, so that joins at
    /// once from one user's connections cannot pass the cap together. `Ok(false)`: it was a
    /// member already (or the connection is gone).
    pub fn join(&self, id: u32, group: (u32, u32, u32), cap: usize) -> Result<bool, usize> {
        let mut inner = self.lock();
        let Some(entry) = inner.clients.get(&id) else {
            return Ok(false);
        };
        if entry.groups.contains(&group) {
            return Ok(false);
        }
        let held = entry
            .user_id
            .and_then(|user| inner.memberships.get(&user).copied())
            .unwrap_or(0);
        if held >= cap {
            return Err(held);
        }
        let mut entry = inner.take(id).expect("looked up");
        entry.groups.insert(group);
        inner.index(id, &entry, true);
        inner.clients.insert(id, entry);
        inner.check();
        Ok(true)
    }

    /// Live connections not logged in.
    pub fn anonymous(&self) -> usize {
        self.lock().anonymous
    }

    /// The numeric id of the (first) connection whose login is `client`.
    pub fn id_of(&self, client: u128) -> Option<u32> {
        self.lock()
            .by_client
            .get(&client)
            .and_then(|ids| ids.first().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let a = registry.add(entry(), Caps::only(2)).unwrap();
        let b = registry.add(entry(), Caps::only(2)).unwrap();
        assert_ne!(a, b);
        assert_eq!(registry.add(entry(), Caps::only(2)), Err(Refused::Total));
        let renewed = registry.renew(a, |e| e.user_id = Some(3));
        assert_ne!(renewed, a);
        assert_eq!(registry.get(a), None);
        assert_eq!(registry.get(renewed).unwrap().user_id, Some(3));
        registry.remove(b);
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn an_address_and_the_anonymous_get_only_their_share_and_a_login_frees_an_anonymous_slot() {
        let registry = Registry::default();
        let caps = Caps {
            total: 4,
            per_address: 2,
            anonymous: 3,
            anonymous_per_address: 2,
        };
        let from = |ip: &str| ClientEntry {
            address: format!("{ip}:5000").parse().unwrap(),
            ..entry()
        };
        let a = registry.add(from("10.0.0.1"), caps).unwrap();
        registry.add(from("10.0.0.1"), caps).unwrap();
        assert_eq!(
            registry.add(from("10.0.0.1"), caps),
            Err(Refused::PerAddress)
        );
        registry.add(from("10.0.0.2"), caps).unwrap();
        assert_eq!(
            registry.add(from("10.0.0.3"), caps),
            Err(Refused::Anonymous)
        );
        // A login takes its connection out of the anonymous share, and indexes its client.
        let logged = registry.renew(a, |e| {
            e.user_id = Some(7);
            e.client = 99;
        });
        assert_eq!(registry.id_of(99), Some(logged));
        assert_eq!(registry.anonymous(), 2);
        registry.add(from("10.0.0.3"), caps).unwrap();
        assert_eq!(registry.add(from("10.0.0.4"), caps), Err(Refused::Total));
        // A logout makes it anonymous again; a removal frees its address's slot.
        registry.update(logged, |e| e.user_id = None);
        assert_eq!((registry.id_of(99), registry.anonymous()), (None, 4));
        registry.remove(logged);
        assert_eq!(
            registry.add(from("10.0.0.5"), caps),
            Err(Refused::Anonymous)
        );
        let b = registry.list()[0].0;
        registry.update(b, |e| e.user_id = Some(8));
        registry.add(from("10.0.0.1"), caps).unwrap();
    }

    #[test]
    fn one_address_fills_only_its_anonymous_share_and_an_ipv6_slash_64_is_one_address() {
        let registry = Registry::default();
        let caps = Caps {
            total: 100,
            per_address: 50,
            anonymous: 10,
            anonymous_per_address: 2,
        };
        let from = |ip: &str| ClientEntry {
            address: std::net::SocketAddr::new(ip.parse().unwrap(), 5000),
            ..entry()
        };
        registry.add(from("2001:db8::1"), caps).unwrap();
        registry.add(from("2001:db8::2"), caps).unwrap();
        assert_eq!(
            registry.add(from("2001:db8::ffff:3"), caps),
            Err(Refused::Anonymous)
        );
        registry.add(from("2001:db8:0:1::1"), caps).unwrap();
        // Logged in, an address may hold its whole share.
        let first = registry.list()[0].0;
        registry.update(first, |e| {
            e.user_id = Some(1);
            e.client = 5;
        });
        registry.add(from("2001:db8::4"), caps).unwrap();
        // Two connections of one client id: each found while it lives.
        let second = registry.list()[1].0;
        registry.update(second, |e| {
            e.user_id = Some(1);
            e.client = 5;
        });
        assert_eq!(registry.id_of(5), Some(first.min(second)));
        registry.remove(first.min(second));
        assert_eq!(registry.id_of(5), Some(first.max(second)));
    }

    #[test]
    fn a_users_memberships_are_counted_over_its_connections_and_capped_at_a_join() {
        let registry = Registry::default();
        let logged = |client: u128| ClientEntry {
            user_id: Some(4),
            client,
            ..entry()
        };
        let a = registry.add(entry(), Caps::only(8)).unwrap();
        let a = registry.renew(a, |e| *e = logged(1));
        let b = registry.add(entry(), Caps::only(8)).unwrap();
        let b = registry.renew(b, |e| *e = logged(2));
        assert_eq!(registry.join(a, (0, 0, 0), 2), Ok(true));
        assert_eq!(
            registry.join(a, (0, 0, 0), 2),
            Ok(false),
            "a member already"
        );
        assert_eq!(registry.join(b, (0, 0, 1), 2), Ok(true));
        assert_eq!(
            registry.join(b, (0, 0, 2), 2),
            Err(2),
            "two held over both connections"
        );
        registry.remove(a);
        assert_eq!(registry.join(b, (0, 0, 2), 2), Ok(true), "a's went with it");
    }
}

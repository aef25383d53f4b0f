//! What the server knows about its live connections (for `GetClients`, `GetClient`, `GetMe`
//! and stats), bounded by [`Caps`]: connections in all, from one address, and not logged in
//! (anonymous). Indexed by address (the per-address cap) and by login (`id_of`, which maps
//! each member of a consumer group to its connection: a lookup, not a scan).

use cairn_engine::env::chan::Latch;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

/// A consumer group by ids: (stream, topic, group).
pub type GroupKey = (u32, u32, u32);

/// One live connection as `GetClients` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientEntry {
    pub address: SocketAddr,
    /// The user logged in on it, if any.
    pub user_id: Option<u32>,
    /// The protocol client id of its current login (memberships are keyed by it).
    pub client: u128,
    /// The session number of its current login (0: none).
    pub session: u64,
    /// Consumer groups joined through it, each with the incarnation joined (the op that
    /// created the group: ids are reused, so a membership of a deleted group never passes
    /// for one of the group that took its id).
    pub groups: BTreeMap<GroupKey, u64>,
    /// Monotonic ns since when it has been without a login (its connect, or its logout).
    pub since: u64,
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
    /// The connections not logged in and not answering a request (a login waiting its turn
    /// or being checked), oldest first: (since, id). Only these may be evicted.
    by_age: BTreeSet<(u64, u32)>,
    /// Connections answering a request now (left out of `by_age`).
    answering: BTreeSet<u32>,
    /// What closes each connection the registry evicts (set when it registered).
    evictors: BTreeMap<u32, Latch<()>>,
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
            if !self.answering.contains(&id) {
                match add {
                    true => self.by_age.insert((entry.since, id)),
                    false => self.by_age.remove(&(entry.since, id)),
                };
            }
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

    /// Closes the oldest connection not logged in and answering no request (from
    /// `address`, if given) to make room; whether there was one.
    ///
    /// Its age does not matter: the newest of C such connections is evicted only after the
    /// C - 1 before it, so under a flood of R connections a second an honest client has
    /// C / R seconds to send its login (then it is answering, and stays). Refusing newcomers
    /// while every such connection is young would give it no chance at all.
    fn evict_oldest_anonymous(&mut self, address: Option<IpAddr>) -> bool {
        let oldest = self
            .by_age
            .iter()
            .find(|(_, id)| address.is_none_or(|a| address_of(self.clients[id].address.ip()) == a))
            .map(|&(_, id)| id);
        let Some(id) = oldest else {
            return false;
        };
        self.take(id);
        if let Some(evictor) = self.evictors.remove(&id) {
            evictor.set(());
        }
        true
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
            self.by_age.len()
                + self
                    .answering
                    .iter()
                    .filter(|id| self.clients.get(id).is_some_and(|e| e.user_id.is_none()))
                    .count(),
            self.anonymous,
            "every anonymous one by age, or answering"
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

    /// Registers a connection (not logged in yet, since `entry.since`) under a fresh id,
    /// unless a cap is reached. When the address's share, its anonymous share, the
    /// anonymous share or the total is full, the oldest connection without a login that
    /// answers no request (of that address, for its shares) is closed to make room (its
    /// `evictor` set): sockets opened and left idle hold slots only until newcomers need
    /// them.
    pub fn add(&self, entry: ClientEntry, caps: Caps, evictor: Latch<()>) -> Result<u32, Refused> {
        debug_assert!(entry.user_id.is_none(), "a connection starts with no login");
        let address = address_of(entry.address.ip());
        let mut inner = self.lock();
        let counts =
            |inner: &RegistryInner| inner.per_address.get(&address).copied().unwrap_or_default();
        if inner.clients.len() >= caps.total && !inner.evict_oldest_anonymous(None) {
            return Err(Refused::Total);
        }
        if counts(&inner).0 >= caps.per_address && !inner.evict_oldest_anonymous(Some(address)) {
            return Err(Refused::PerAddress);
        }
        if counts(&inner).1 >= caps.anonymous_per_address
            && !inner.evict_oldest_anonymous(Some(address))
        {
            return Err(Refused::Anonymous);
        }
        if inner.anonymous >= caps.anonymous && !inner.evict_oldest_anonymous(None) {
            return Err(Refused::Anonymous);
        }
        let id = inner.insert(entry);
        inner.evictors.insert(id, evictor);
        inner.check();
        Ok(id)
    }

    /// Moves a connection to a fresh id (a new login), with `change` applied.
    /// `None` when the connection is no longer registered (it was closed to make room
    /// while its login ran).
    pub fn renew(&self, id: u32, change: impl FnOnce(&mut ClientEntry)) -> Option<u32> {
        let mut inner = self.lock();
        let mut entry = inner.take(id)?;
        let evictor = inner.evictors.remove(&id);
        let answering = inner.answering.remove(&id);
        change(&mut entry);
        let (since, anonymous) = (entry.since, entry.user_id.is_none());
        let renewed = inner.insert(entry);
        if let Some(evictor) = evictor {
            inner.evictors.insert(renewed, evictor);
        }
        if answering {
            inner.answering.insert(renewed);
            if anonymous {
                inner.by_age.remove(&(since, renewed));
            }
        }
        inner.check();
        Some(renewed)
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
        inner.answering.remove(&id);
        inner.evictors.remove(&id);
        inner.check();
    }

    /// Marks connection `id` as answering a request (`true`: it may not be evicted until
    /// marked `false`), as a login waits its turn or is checked.
    pub fn answering(&self, id: u32, answering: bool) {
        let mut inner = self.lock();
        let Some(entry) = inner.clients.get(&id).cloned() else {
            return;
        };
        let key = (entry.since, id);
        let anonymous = entry.user_id.is_none();
        match answering {
            true => {
                if inner.answering.insert(id) && anonymous {
                    inner.by_age.remove(&key);
                }
            }
            false => {
                if inner.answering.remove(&id) && anonymous {
                    inner.by_age.insert(key);
                }
            }
        }
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

    /// Records that connection `id` joins incarnation `incarnation` of `group`, unless its
    /// user holds `cap` memberships already (then the number it holds): taken before the
    /// node's join, so that joins at once from one user's connections cannot pass the cap
    /// together. `Ok(false)`: it was a member already (or the connection is gone). A
    /// membership of an older incarnation at the same ids is replaced (it counts once).
    pub fn join(
        &self,
        id: u32,
        group: GroupKey,
        incarnation: u64,
        cap: usize,
    ) -> Result<bool, usize> {
        let mut inner = self.lock();
        let Some(entry) = inner.clients.get(&id) else {
            return Ok(false);
        };
        let replacing = match entry.groups.get(&group) {
            Some(&joined) if joined == incarnation => return Ok(false),
            Some(_) => true,
            None => false,
        };
        let held = entry
            .user_id
            .and_then(|user| inner.memberships.get(&user).copied())
            .unwrap_or(0);
        if held >= cap && !replacing {
            return Err(held);
        }
        let mut entry = inner.take(id).expect("looked up");
        entry.groups.insert(group, incarnation);
        inner.index(id, &entry, true);
        inner.clients.insert(id, entry);
        inner.check();
        Ok(true)
    }

    /// Forgets the memberships of `user`'s connections that `alive` says are gone (their
    /// group deleted, with its topic or stream, or its ids taken by a later group): the
    /// count the cap checks is then what the user holds. O(connections); run only when the
    /// user is at its cap.
    pub fn prune_memberships(&self, user: u32, alive: impl Fn(GroupKey, u64) -> bool) {
        let mut inner = self.lock();
        let stale: Vec<(u32, GroupKey)> = inner
            .clients
            .iter()
            .filter(|(_, e)| e.user_id == Some(user))
            .flat_map(|(id, e)| e.groups.iter().map(move |(g, i)| (*id, *g, *i)))
            .filter(|(_, g, i)| !alive(*g, *i))
            .map(|(id, g, _)| (id, g))
            .collect();
        for (id, group) in stale {
            let mut entry = inner.take(id).expect("listed above");
            entry.groups.remove(&group);
            inner.index(id, &entry, true);
            inner.clients.insert(id, entry);
        }
        inner.check();
    }

    /// Live connections not logged in.
    pub fn anonymous(&self) -> usize {
        self.lock().anonymous
    }

    /// The user of the live login `(client, session)`, if a connection holds it.
    pub fn login_of(&self, client: u128, session: u64) -> Option<u32> {
        let inner = self.lock();
        let ids = inner.by_client.get(&client)?;
        ids.iter()
            .filter_map(|id| inner.clients.get(id))
            .find(|e| e.session == session && session != 0)
            .and_then(|e| e.user_id)
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
            session: 0,
            groups: BTreeMap::new(),
            since: 0,
        }
    }

    /// Registers a connection that answers a request (a login being checked), so no
    /// newcomer may evict it: the caps then refuse.
    fn held(registry: &Registry, entry: ClientEntry, caps: Caps) -> u32 {
        let id = registry.add(entry, caps, Latch::default()).unwrap();
        registry.answering(id, true);
        id
    }

    #[test]
    fn the_registry_is_bounded_and_a_login_mints_a_new_id() {
        let registry = Registry::default();
        let a = held(&registry, entry(), Caps::only(2));
        let b = held(&registry, entry(), Caps::only(2));
        assert_ne!(a, b);
        assert_eq!(
            registry.add(entry(), Caps::only(2), Latch::default()),
            Err(Refused::Total)
        );
        let renewed = registry.renew(a, |e| e.user_id = Some(3)).unwrap();
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
        let a = held(&registry, from("10.0.0.1"), caps);
        held(&registry, from("10.0.0.1"), caps);
        assert_eq!(
            registry.add(from("10.0.0.1"), caps, Latch::default()),
            Err(Refused::PerAddress)
        );
        held(&registry, from("10.0.0.2"), caps);
        assert_eq!(
            registry.add(from("10.0.0.3"), caps, Latch::default()),
            Err(Refused::Anonymous)
        );
        // A login takes its connection out of the anonymous share, and indexes its client.
        let logged = registry
            .renew(a, |e| {
                e.user_id = Some(7);
                e.client = 99;
            })
            .unwrap();
        assert_eq!(registry.id_of(99), Some(logged));
        assert_eq!(registry.anonymous(), 2);
        held(&registry, from("10.0.0.3"), caps);
        assert_eq!(
            registry.add(from("10.0.0.4"), caps, Latch::default()),
            Err(Refused::Total)
        );
        // A logout makes it anonymous again; a removal frees its address's slot.
        registry.update(logged, |e| e.user_id = None);
        assert_eq!((registry.id_of(99), registry.anonymous()), (None, 4));
        registry.remove(logged);
        assert_eq!(
            registry.add(from("10.0.0.5"), caps, Latch::default()),
            Err(Refused::Anonymous)
        );
        let b = registry.list()[0].0;
        registry.update(b, |e| e.user_id = Some(8));
        held(&registry, from("10.0.0.1"), caps);
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
        held(&registry, from("2001:db8::1"), caps);
        held(&registry, from("2001:db8::2"), caps);
        assert_eq!(
            registry.add(from("2001:db8::ffff:3"), caps, Latch::default()),
            Err(Refused::Anonymous)
        );
        held(&registry, from("2001:db8:0:1::1"), caps);
        // Logged in, an address may hold its whole share.
        let first = registry.list()[0].0;
        registry.update(first, |e| {
            e.user_id = Some(1);
            e.client = 5;
        });
        held(&registry, from("2001:db8::4"), caps);
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
        let a = registry
            .add(entry(), Caps::only(8), Latch::default())
            .unwrap();
        let a = registry.renew(a, |e| *e = logged(1)).unwrap();
        let b = registry
            .add(entry(), Caps::only(8), Latch::default())
            .unwrap();
        let b = registry.renew(b, |e| *e = logged(2)).unwrap();
        assert_eq!(registry.join(a, (0, 0, 0), 1, 2), Ok(true));
        assert_eq!(
            registry.join(a, (0, 0, 0), 1, 2),
            Ok(false),
            "a member already"
        );
        assert_eq!(registry.join(b, (0, 0, 1), 1, 2), Ok(true));
        assert_eq!(
            registry.join(b, (0, 0, 2), 1, 2),
            Err(2),
            "two held over both connections"
        );
        registry.remove(a);
        assert_eq!(
            registry.join(b, (0, 0, 2), 1, 2),
            Ok(true),
            "a's went with it"
        );
        // A group deleted with its members still counted: pruned, it counts no more.
        assert_eq!(registry.join(b, (0, 0, 3), 1, 2), Err(2));
        registry.prune_memberships(4, |g, _| g != (0, 0, 2));
        assert_eq!(registry.join(b, (0, 0, 3), 1, 2), Ok(true));
        // The ids of (0, 0, 3) taken by a later group: its membership is replaced, not
        // added; pruned as the older incarnation, it counts no more.
        assert_eq!(
            registry.join(b, (0, 0, 3), 9, 2),
            Ok(true),
            "a new incarnation"
        );
        assert_eq!(registry.get(b).unwrap().groups[&(0, 0, 3)], 9);
        assert_eq!(
            registry.join(b, (0, 0, 4), 1, 2),
            Err(2),
            "replaced, not added"
        );
        registry.prune_memberships(4, |g, incarnation| g != (0, 0, 3) || incarnation != 9);
        assert_eq!(registry.join(b, (0, 0, 4), 1, 2), Ok(true));
    }

    #[test]
    fn a_newcomer_closes_the_oldest_idle_anonymous_connection_when_a_share_is_full() {
        let registry = Registry::default();
        let caps = Caps {
            total: 3,
            per_address: 3,
            anonymous: 2,
            anonymous_per_address: 2,
        };
        let at = |ip: &str, since: u64| ClientEntry {
            address: format!("{ip}:5000").parse().unwrap(),
            since,
            ..entry()
        };
        let (old, older) = (Latch::default(), Latch::default());
        let a = registry
            .add(at("10.0.0.1", 5), caps, older.clone())
            .unwrap();
        registry.add(at("10.0.0.2", 7), caps, old.clone()).unwrap();
        // However young, the oldest goes, and its connection is told.
        registry
            .add(at("10.0.0.3", 8), caps, Latch::default())
            .unwrap();
        assert!(older.get().is_some() && old.get().is_none());
        assert_eq!(registry.get(a), None);
        // A login that ends after its connection was closed finds nothing to renew.
        assert_eq!(registry.renew(a, |e| e.user_id = Some(1)), None);
        assert_eq!(registry.anonymous(), 2);
        // Logged in, a connection is never evicted.
        for n in 0..2 {
            let id = registry.list()[n].0;
            registry.update(id, |e| e.user_id = Some(1));
        }
        let fourth = Latch::default();
        registry
            .add(at("10.0.0.4", 9), caps, fourth.clone())
            .unwrap();
        registry
            .add(at("10.0.0.5", 10), caps, Latch::default())
            .expect("the total is full: the one not logged in goes");
        assert!(fourth.get().is_some());
        let fifth = registry.list()[2].0;
        registry.update(fifth, |e| e.user_id = Some(1));
        assert_eq!(
            registry.add(at("10.0.0.6", 11), caps, Latch::default()),
            Err(Refused::Total),
            "every connection is logged in: none may go"
        );
    }

    #[test]
    fn a_connection_answering_a_request_is_never_evicted() {
        let registry = Registry::default();
        let caps = Caps {
            total: 8,
            per_address: 8,
            anonymous: 1,
            anonymous_per_address: 8,
        };
        let at = |since: u64| ClientEntry { since, ..entry() };
        let a = registry.add(at(0), caps, Latch::default()).unwrap();
        registry.answering(a, true);
        let later = 10_000_000_000;
        assert_eq!(
            registry.add(at(later), caps, Latch::default()),
            Err(Refused::Anonymous),
            "its login is being answered: it stays"
        );
        // Logged in while answering, it leaves the anonymous share under its new id.
        let a = registry.renew(a, |e| e.user_id = Some(1)).unwrap();
        registry.answering(a, false);
        registry.add(at(later), caps, Latch::default()).unwrap();
        assert!(registry.lock().answering.is_empty());
    }
}

//! What the server knows about its live connections (for `GetClients`, `GetClient`, `GetMe`
//! and stats), bounded by [`crate::ServerLimits::max_connections`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
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
}

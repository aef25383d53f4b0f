//! The duplicate table of a binary-protocol login (`docs/wire.md` §3.3): the
//! replies of metadata operations only, keyed on (client, request, request checksum),
//! bounded; never partition operations (the snapshot SDK sends every partition op with the
//! same request number, so a second send would be answered with the first one's reply).

use std::collections::{BTreeMap, VecDeque};

/// The simulator's hook at the table's edge (none in production): the reply a retried
/// request gets, given the login's table, the request's identity, its cached reply and how
/// to frame another reply body for it.
pub type DedupHitHook =
    fn(&Dedup, &DedupKey, bytes::Bytes, &dyn Fn(&[u8]) -> bytes::Bytes) -> bytes::Bytes;

/// Most cached metadata replies one login keeps for retried requests.
pub const DEDUP_ENTRIES: usize = 64;

/// A request's identity for duplicate detection.
pub type DedupKey = (u128, u64, u128);

/// The last [`DEDUP_ENTRIES`] metadata replies of one connection, by request identity.
#[derive(Default)]
pub struct Dedup {
    replies: BTreeMap<DedupKey, bytes::Bytes>,
    order: VecDeque<DedupKey>,
}

impl Dedup {
    pub fn get(&self, key: &DedupKey) -> Option<bytes::Bytes> {
        self.replies.get(key).cloned()
    }

    pub fn insert(&mut self, key: DedupKey, reply: bytes::Bytes) {
        if self.replies.insert(key, reply).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > DEDUP_ENTRIES {
            let oldest = self.order.pop_front().expect("nonempty");
            self.replies.remove(&oldest);
        }
        assert_eq!(self.order.len(), self.replies.len());
        assert!(self.replies.len() <= DEDUP_ENTRIES);
    }

    pub fn len(&self) -> usize {
        self.replies.len()
    }

    /// The newest reply cached for a request other than `key` (a simulator canary's wrong
    /// answer, through a [`DedupHitHook`]).
    pub fn newest_except(&self, key: &DedupKey) -> Option<bytes::Bytes> {
        let other = self.order.iter().rev().find(|k| *k != key)?;
        self.replies.get(other).cloned()
    }

    pub fn is_empty(&self) -> bool {
        self.replies.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dedup_table_answers_only_the_same_request_and_stays_bounded() {
        let mut dedup = Dedup::default();
        dedup.insert((1, 1, 9), bytes::Bytes::from_static(b"a"));
        assert_eq!(dedup.get(&(1, 1, 9)).unwrap(), &b"a"[..]);
        // Another body under the same request number is another request.
        assert_eq!(dedup.get(&(1, 1, 8)), None);
        assert_eq!(dedup.get(&(2, 1, 9)), None);
        for r in 2..200 {
            dedup.insert((1, r, 9), bytes::Bytes::from_static(b"b"));
        }
        assert_eq!(dedup.len(), DEDUP_ENTRIES);
        assert_eq!(dedup.get(&(1, 1, 9)), None);
        assert!(dedup.get(&(1, 199, 9)).is_some());
    }
}

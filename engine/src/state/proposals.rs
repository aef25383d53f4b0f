//! In a cluster, the proposals applied lately, by key: what makes a retried proposal apply
//! once. A member that asks the group to decide an op draws a key for it and keeps that key
//! for every attempt (a forward whose answer was lost, a proposal whose leader lost its
//! quorum); the first attempt that applies records its key, its log index and its outcome
//! here, and a later one with the same key is answered with that outcome and changes
//! nothing.
//!
//! The table is part of the replicated state (every member applies the same entries, so
//! every member's table is the same; snapshots carry it) and holds the last
//! [`MAX_PROPOSALS_KEPT`] keys, oldest out first. An attempt names the log index its
//! member had applied when the op was first asked (`asked_at`): every attempt's entry comes
//! after it. While no key applied after `asked_at` was forgotten, a key not found was never
//! applied; once one was, the table cannot tell, and the attempt is refused unapplied
//! ([`Lookup::Forgotten`]) rather than risk applying the op twice.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Keys kept: at about 34 bytes each about 0.5 MiB of a snapshot when full.
pub const MAX_PROPOSALS_KEPT: usize = 16_384;

/// The keyed proposals applied lately and the id each created, if any.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(from = "Stored", into = "Stored")]
pub struct Proposals {
    /// Keys and the log index each applied at, in the order applied (the oldest first out).
    order: VecDeque<(u128, u64)>,
    created: BTreeMap<u128, Option<u32>>,
    /// The log index of the newest key forgotten (0: none yet).
    forgotten_through: u64,
}

/// What the table knows of a keyed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// An attempt with this key applied, and created this.
    Applied(Option<u32>),
    /// None applied: the attempt is the op's first to apply.
    New,
    /// Keys applied after the op was asked were forgotten (through this index): whether
    /// an earlier attempt applied is unknown.
    Forgotten(u64),
}

impl Proposals {
    pub fn is_empty(&self) -> bool {
        self.order.is_empty() && self.forgotten_through == 0
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// What is known of an attempt with `key` of an op first asked when its member had
    /// applied through log index `asked_at`.
    pub fn lookup(&self, key: u128, asked_at: u64) -> Lookup {
        match self.created.get(&key) {
            Some(created) => Lookup::Applied(*created),
            None if asked_at < self.forgotten_through => Lookup::Forgotten(self.forgotten_through),
            None => Lookup::New,
        }
    }

    /// Records that the proposal `key` applied at log index `index` and created `created`.
    /// Keys arrive in log order; what is forgotten is judged by the newest index forgotten,
    /// so the rule holds even of a table that took them otherwise.
    pub fn record(&mut self, key: u128, index: u64, created: Option<u32>) {
        assert!(key != 0, "a proposal's key is never 0");
        assert!(index > 0, "a decided entry has an index");
        assert!(
            self.created.insert(key, created).is_none(),
            "a keyed proposal applies once"
        );
        self.order.push_back((key, index));
        if self.order.len() > MAX_PROPOSALS_KEPT {
            let (oldest, at) = self.order.pop_front().expect("the table is not empty");
            self.created.remove(&oldest);
            self.forgotten_through = self.forgotten_through.max(at);
        }
        assert!(self.order.len() == self.created.len() && self.len() <= MAX_PROPOSALS_KEPT);
    }
}

/// The table as snapshots hold it.
#[derive(Serialize, Deserialize)]
struct Stored {
    /// (key, log index, created), oldest first.
    kept: Vec<(u128, u64, Option<u32>)>,
    forgotten_through: u64,
}

impl From<Stored> for Proposals {
    fn from(stored: Stored) -> Proposals {
        let mut proposals = Proposals {
            forgotten_through: stored.forgotten_through,
            ..Proposals::default()
        };
        // A table written by this code holds distinct keys in log order, at most the limit
        // of them; any other is read as far as it holds, and what it drops counts as
        // forgotten.
        for (key, index, created) in stored.kept {
            if key == 0 || index == 0 || proposals.created.contains_key(&key) {
                proposals.forgotten_through = proposals.forgotten_through.max(index);
                continue;
            }
            proposals.record(key, index, created);
        }
        proposals
    }
}

impl From<Proposals> for Stored {
    fn from(proposals: Proposals) -> Stored {
        let Proposals {
            order,
            created,
            forgotten_through,
        } = proposals;
        let kept = order
            .into_iter()
            .map(|(key, index)| (key, index, created[&key]))
            .collect();
        Stored {
            kept,
            forgotten_through,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_answered_until_it_is_the_oldest_past_the_limit() {
        let mut table = Proposals::default();
        table.record(1, 10, Some(7));
        assert_eq!(table.lookup(1, 0), Lookup::Applied(Some(7)));
        assert_eq!(table.lookup(2, 0), Lookup::New);
        for key in 2..=MAX_PROPOSALS_KEPT as u128 {
            table.record(key, 10 + key as u64, None);
        }
        assert_eq!(table.len(), MAX_PROPOSALS_KEPT);
        assert_eq!(
            table.lookup(1, 0),
            Lookup::Applied(Some(7)),
            "inside the limit"
        );
        let next = MAX_PROPOSALS_KEPT as u128 + 1;
        table.record(next, 10 + next as u64, None);
        assert_eq!(table.len(), MAX_PROPOSALS_KEPT);
        // Key 1 (index 10) is gone: an op asked before index 10 cannot be told apart from
        // one of its attempts that applied; one asked at or after it can.
        assert_eq!(table.lookup(1, 9), Lookup::Forgotten(10));
        assert_eq!(table.lookup(99_999, 10), Lookup::New);
        assert_eq!(table.lookup(2, 0), Lookup::Applied(None));
    }

    #[test]
    fn the_table_survives_encoding_in_order() {
        let mut table = Proposals::default();
        for (key, index) in [(9u128, 3), (3, 5), (u128::MAX, 8)] {
            table.record(key, index, Some(key as u32));
        }
        table.forgotten_through = 2;
        let bytes = rmp_serde::to_vec_named(&table).unwrap();
        let back: Proposals = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, table);
        let stored = Stored::from(back);
        assert_eq!(
            stored.kept,
            vec![
                (9, 3, Some(9)),
                (3, 5, Some(3)),
                (u128::MAX, 8, Some(u32::MAX))
            ]
        );
        assert_eq!(stored.forgotten_through, 2);
    }

    #[test]
    #[should_panic(expected = "applies once")]
    fn recording_a_key_twice_is_a_bug() {
        let mut table = Proposals::default();
        table.record(5, 1, None);
        table.record(5, 2, None);
    }
}

//! In a cluster, the proposals applied lately, by key: what makes a retried proposal apply
//! once. A member that asks the group to decide an op draws a key for it and keeps that key
//! for every attempt (a forward whose answer was lost, a proposal whose leader lost its
//! quorum); the first attempt that applies records its key and outcome here, and a later
//! one with the same key is answered with that outcome and changes nothing.
//!
//! The table is part of the replicated state (every member applies the same entries, so
//! every member's table is the same; snapshots carry it) and holds the last
//! [`MAX_PROPOSALS_KEPT`] keys, oldest out first. A member's retries of one op end within
//! seconds (`cairn_cluster::decide`'s deadline), far inside that many later ops.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Keys kept: at 26 bytes each about 0.4 MiB of a snapshot when full.
pub const MAX_PROPOSALS_KEPT: usize = 16_384;

/// The keyed proposals applied lately and the id each created, if any.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(from = "Vec<(u128, Option<u32>)>", into = "Vec<(u128, Option<u32>)>")]
pub struct Proposals {
    /// Keys in the order applied (the oldest first out).
    order: VecDeque<u128>,
    created: BTreeMap<u128, Option<u32>>,
}

impl Proposals {
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// What the proposal `key` created when it applied, if it did (and is still kept).
    pub fn applied(&self, key: u128) -> Option<Option<u32>> {
        self.created.get(&key).copied()
    }

    /// Records that the proposal `key` applied and created `created`.
    pub fn record(&mut self, key: u128, created: Option<u32>) {
        assert!(key != 0, "a proposal's key is never 0");
        assert!(
            self.created.insert(key, created).is_none(),
            "a keyed proposal applies once"
        );
        self.order.push_back(key);
        if self.order.len() > MAX_PROPOSALS_KEPT {
            let oldest = self.order.pop_front().expect("the table is not empty");
            self.created.remove(&oldest);
        }
        assert!(self.order.len() == self.created.len() && self.len() <= MAX_PROPOSALS_KEPT);
    }
}

impl From<Vec<(u128, Option<u32>)>> for Proposals {
    fn from(stored: Vec<(u128, Option<u32>)>) -> Proposals {
        let mut proposals = Proposals::default();
        // A table written by this code has distinct keys, at most the limit of them; any
        // other is read as far as it holds (the newest kept).
        let skip = stored.len().saturating_sub(MAX_PROPOSALS_KEPT);
        for (key, created) in stored.into_iter().skip(skip) {
            if key != 0 && proposals.applied(key).is_none() {
                proposals.record(key, created);
            }
        }
        proposals
    }
}

impl From<Proposals> for Vec<(u128, Option<u32>)> {
    fn from(proposals: Proposals) -> Vec<(u128, Option<u32>)> {
        let Proposals { order, created } = proposals;
        order.into_iter().map(|key| (key, created[&key])).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_answered_until_it_is_the_oldest_past_the_limit() {
        let mut table = Proposals::default();
        table.record(1, Some(7));
        assert_eq!(table.applied(1), Some(Some(7)));
        assert_eq!(table.applied(2), None);
        for key in 2..=MAX_PROPOSALS_KEPT as u128 {
            table.record(key, None);
        }
        assert_eq!(table.len(), MAX_PROPOSALS_KEPT);
        assert_eq!(table.applied(1), Some(Some(7)), "still inside the limit");
        table.record(MAX_PROPOSALS_KEPT as u128 + 1, None);
        assert_eq!(table.len(), MAX_PROPOSALS_KEPT);
        assert_eq!(table.applied(1), None, "the oldest goes first");
        assert_eq!(table.applied(2), Some(None));
    }

    #[test]
    fn the_table_survives_encoding_in_order() {
        let mut table = Proposals::default();
        for key in [9u128, 3, u128::MAX] {
            table.record(key, Some(key as u32));
        }
        let bytes = rmp_serde::to_vec_named(&table).unwrap();
        let back: Proposals = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, table);
        assert_eq!(
            Vec::from(back),
            vec![(9, Some(9)), (3, Some(3)), (u128::MAX, Some(u32::MAX))]
        );
    }

    #[test]
    #[should_panic(expected = "applies once")]
    fn recording_a_key_twice_is_a_bug() {
        let mut table = Proposals::default();
        table.record(5, None);
        table.record(5, None);
    }
}

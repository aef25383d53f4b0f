//! Where a partition's replicas live: the members its group runs on, out of the metadata
//! group's voters' members, as many as its topic's replication factor asks.
//!
//! Rendezvous hashing (highest random weight): each member scores each partition by a hash
//! of the two, and the partition lives on its `factor` highest-scoring members. Every member
//! computes the same set from the same metadata (the topic's factor is in the replicated
//! state, the voters are the metadata group's committed configuration), and a change of
//! members moves only what it must:
//!
//! | the voters' members | a partition's placed set |
//! |---|---|
//! | one added | gains the new member only where it outscores the lowest of the set, which it then replaces |
//! | one removed | loses it where it held it; the next highest takes its place; unchanged elsewhere |
//! | no more than the factor | every member |
//!
//! | the topic's factor | copies |
//! |---|---|
//! | 0 or 1 (a topic made before factors were, or by a single node) | every member |
//! | 2 to [`MAX_FACTOR`] | that many, at most every member |
//!
//! The score leaves out the partition's nonce: a purged partition (a new nonce) stays where
//! it was.

use super::net::GroupName;
use crate::types::MemberId;
use std::collections::BTreeSet;

/// The largest replication factor a topic may ask for (the most members a cluster has).
pub const MAX_FACTOR: u8 = cairn_engine::state::options::MAX_REPLICATION_FACTOR;

/// The members partition `name` of a topic with replication factor `factor` lives on, out
/// of `members` (the metadata voters' members).
pub fn placed(name: GroupName, factor: u8, members: &BTreeSet<MemberId>) -> BTreeSet<MemberId> {
    let copies = copies(factor, members.len());
    let mut scored: Vec<(u64, MemberId)> = members.iter().map(|&m| (score(name, m), m)).collect();
    // Highest score first; a tie (never seen, but possible) goes to the lower id.
    scored.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let set: BTreeSet<MemberId> = scored.into_iter().take(copies).map(|(_, m)| m).collect();
    debug_assert_eq!(set.len(), copies);
    set
}

/// How many copies a topic of replication factor `factor` keeps among `members` members.
pub fn copies(factor: u8, members: usize) -> usize {
    match factor {
        0 | 1 => members,
        f => usize::from(f).min(members),
    }
}

/// Member `member`'s score for partition `name` (its nonce left out).
fn score(name: GroupName, member: MemberId) -> u64 {
    let (stream, topic, partition, _nonce) = name;
    let mut h = mix(u64::from(stream) << 32 | u64::from(topic));
    h = mix(h ^ u64::from(partition));
    mix(h ^ u64::from(member).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// SplitMix64's finalizer: a fixed, well-spread mix, the same on every build.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn members(ids: &[MemberId]) -> BTreeSet<MemberId> {
        ids.iter().copied().collect()
    }

    fn names() -> impl Iterator<Item = GroupName> {
        (1..=4).flat_map(|s| (1..=5).flat_map(move |t| (0..50).map(move |p| (s, t, p, 9))))
    }

    #[test]
    fn a_partition_gets_its_factor_of_members_or_all_of_them() {
        let five = members(&[1, 2, 3, 4, 5]);
        for name in names().take(100) {
            assert_eq!(placed(name, 3, &five).len(), 3);
            assert_eq!(placed(name, 2, &five).len(), 2);
            assert_eq!(placed(name, 7, &five), five);
            // A topic without a factor (0 or 1) lives on every member.
            assert_eq!(placed(name, 1, &five), five);
            assert_eq!(placed(name, 0, &five), five);
            assert!(placed(name, 3, &five).is_subset(&five));
        }
        assert!(placed((1, 1, 0, 1), 3, &BTreeSet::new()).is_empty());
        // The nonce (a purge) does not move it.
        assert_eq!(
            placed((1, 2, 3, 4), 3, &five),
            placed((1, 2, 3, 5), 3, &five)
        );
    }

    #[test]
    fn placement_spreads_partitions_evenly_over_the_members() {
        let five = members(&[1, 2, 3, 4, 5]);
        let mut held: BTreeMap<MemberId, usize> = BTreeMap::new();
        let mut total = 0;
        for name in names() {
            for m in placed(name, 3, &five) {
                *held.entry(m).or_default() += 1;
                total += 1;
            }
        }
        let fair = total / five.len();
        for (m, count) in held {
            assert!(
                count.abs_diff(fair) * 10 < fair,
                "member {m} holds {count} copies, against a fair share of {fair}"
            );
        }
    }

    #[test]
    fn a_member_added_or_removed_moves_only_the_copies_it_must() {
        let four = members(&[1, 2, 3, 4]);
        let five = members(&[1, 2, 3, 4, 5]);
        let mut moved = 0usize;
        let mut count = 0usize;
        for name in names() {
            let before = placed(name, 3, &four);
            let after = placed(name, 3, &five);
            // Added: the new member replaces at most one copy; nothing else moves.
            let gone: Vec<_> = before.difference(&after).collect();
            let came: Vec<_> = after.difference(&before).collect();
            assert!(gone.len() <= 1 && gone.len() == came.len());
            if let Some(c) = came.first() {
                assert_eq!(**c, 5);
                moved += 1;
            }
            // Removed again: back where it was.
            assert_eq!(placed(name, 3, &four), before);
            // A member removed that held no copy moves nothing.
            for m in five.difference(&after) {
                let without: BTreeSet<MemberId> = five.iter().copied().filter(|x| x != m).collect();
                assert_eq!(placed(name, 3, &without), after);
            }
            count += 1;
        }
        // About 3 in 5 partitions take a copy on the fifth member.
        assert!(
            (moved * 5).abs_diff(count * 3) * 10 < count * 3,
            "{moved} of {count} moved"
        );
    }
}

//! Which sealed segments retention deletes: a pure decision over a partition's sealed
//! segments (oldest first), the topic's policies and the time. Only sealed segments, never
//! the active one, and always a prefix (oldest first), so no hole is ever visible. The time
//! it judges by is a [`RetentionClock`]'s.

use crate::env::Env;
use serde::{Deserialize, Serialize};

/// A sealed segment as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    pub start_offset: u64,
    pub bytes: u64,
    /// The newest message's timestamp (µs).
    pub newest: u64,
}

/// Why a segment was deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    /// Its newest message is older than the expiry.
    Expired,
    /// The partition's sealed bytes exceeded its share of `max_topic_size`.
    OverSize,
    /// An explicit request (`DeleteSegments`).
    Requested,
}

crate::names::variant_names!(Reason: Expired, OverSize, Requested);

/// A topic's retention policy, per partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// µs; 0 = never.
    pub message_expiry: u64,
    /// Bytes of sealed segments a partition keeps; 0 = unlimited.
    pub budget: u64,
}

impl Policy {
    /// The per-partition policy of a topic: `max_topic_size` shared equally, floored at one
    /// sealed segment's ceiling (`segment_size` plus one batch of at most `max_batch_bytes`,
    /// the node's admission limit: a sealed segment may run one batch past `segment_size`),
    /// so the policy always means at least "keep the newest sealed segment".
    pub fn for_topic(
        message_expiry: u64,
        max_topic_size: u64,
        partitions: u32,
        segment_size: u64,
        max_batch_bytes: u64,
    ) -> Policy {
        let budget = match max_topic_size {
            0 => 0,
            size => (size / u64::from(partitions.max(1))).max(segment_size + max_batch_bytes),
        };
        Policy {
            message_expiry,
            budget,
        }
    }
}

/// How many of the oldest sealed segments to delete, each with its reason. Expiry first
/// (oldest first, stopping at the first segment not expired), then size.
pub fn decide(sealed: &[Sealed], policy: Policy, now: u64) -> Vec<Reason> {
    let mut reasons = Vec::new();
    if policy.message_expiry > 0 {
        for segment in sealed {
            let expired = now.saturating_sub(segment.newest) > policy.message_expiry;
            if !expired {
                break;
            }
            reasons.push(Reason::Expired);
        }
    }
    if policy.budget > 0 {
        let mut total: u64 = sealed[reasons.len()..].iter().map(|s| s.bytes).sum();
        for segment in &sealed[reasons.len()..] {
            if total <= policy.budget {
                break;
            }
            total -= segment.bytes;
            reasons.push(Reason::OverSize);
        }
    }
    assert!(reasons.len() <= sealed.len(), "only sealed segments");
    reasons
}

/// The time retention judges expiry by: the wall clock, never running ahead of the
/// monotonic clock since boot (a wall clock jumped forward at runtime does not make
/// messages look older than they are) and never going back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetentionClock {
    anchor_wall: u64,
    anchor_mono_nanos: u64,
    last: u64,
}

impl RetentionClock {
    pub(crate) fn new(env: &Env) -> RetentionClock {
        RetentionClock {
            anchor_wall: env.clock.wall_micros(),
            anchor_mono_nanos: env.clock.monotonic_nanos(),
            last: 0,
        }
    }

    pub(crate) fn now(&mut self, env: &Env) -> u64 {
        let elapsed = env
            .clock
            .monotonic_nanos()
            .saturating_sub(self.anchor_mono_nanos)
            / 1000;
        let bound = self.anchor_wall.saturating_add(elapsed);
        self.last = self.last.max(env.clock.wall_micros().min(bound));
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(start: u64, bytes: u64, newest: u64) -> Sealed {
        Sealed {
            start_offset: start,
            bytes,
            newest,
        }
    }

    #[test]
    fn expiry_deletes_a_prefix_of_expired_segments_only() {
        let sealed = [seg(0, 10, 100), seg(10, 10, 500), seg(20, 10, 150)];
        let policy = Policy {
            message_expiry: 200,
            budget: 0,
        };
        // At 400: the first is expired; the second is not, so the third stays too.
        assert_eq!(decide(&sealed, policy, 400), vec![Reason::Expired]);
        assert_eq!(decide(&sealed, policy, 1000).len(), 3);
        assert!(decide(&sealed, policy, 250).is_empty());
    }

    #[test]
    fn size_trims_oldest_until_within_budget_and_the_floor_keeps_a_segment() {
        let sealed = [seg(0, 40, 0), seg(10, 40, 0), seg(20, 40, 0)];
        let policy = Policy {
            message_expiry: 0,
            budget: 90,
        };
        assert_eq!(decide(&sealed, policy, 0), vec![Reason::OverSize]);
        let tiny = Policy::for_topic(0, 1, 4, 1 << 20, 1 << 16);
        assert_eq!(tiny.budget, (1 << 20) + (1 << 16));
        assert_eq!(Policy::for_topic(0, 0, 4, 1 << 20, 1 << 16).budget, 0);
        let shared = Policy::for_topic(0, 40 << 20, 4, 1 << 20, 1 << 16);
        assert_eq!(
            shared.budget,
            10 << 20,
            "the topic's size shared by its partitions"
        );
    }
}

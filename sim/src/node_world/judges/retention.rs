//! Judging the cleaners: each deletion against its rule (expiry or size) and the deletions
//! before it, each pass ending within its size budget, and the cleaners' liveness (a segment due for expiry is deleted within a few
//! cleaner intervals of the oracle first seeing it due).

use super::super::model;
use super::super::{Due, NodeWorld, INV_RETENTION};
use super::Start;
use crate::report::{violation, Checked};
use cairn_engine::node::retention::{Policy, Reason};
use cairn_engine::node::{Deletion, PartitionInfo, PartitionKey};
use cairn_engine::partition::PartitionIdentity;
use cairn_faults::FaultKind;

/// Cleaner intervals the oracle allows between seeing a segment due and its deletion (the
/// timer's period, a pass that began just before, and the oracle's own look between).
const CLEANER_GRACE_INTERVALS: u64 = 4;

/// Fault kinds a cleaner pass may have met on its way (an error returned to the engine):
/// while one struck the partition's files since a segment was seen due, its deletion is
/// not owed. (A clock jump since boot stops the judging altogether: the retention clock
/// refuses to follow it.)
const CLEANER_EXCUSES: [FaultKind; 5] = super::IO_ERRORS;

impl NodeWorld {
    /// Partitions of topics with an expiry, while no metadata op is in flight.
    pub(crate) fn expiring_partitions(&self) -> Vec<PartitionIdentity> {
        if !self.in_flight.is_empty() || !self.pending.is_empty() || !self.in_doubt.is_empty() {
            return Vec::new();
        }
        self.model
            .identities(self.cluster)
            .into_iter()
            .filter(|(k, _)| !self.removed.contains(k))
            .filter(|(k, _)| self.model.topic(k.0, k.1).is_some_and(|t| t.expiry > 0))
            .map(|(_, identity)| identity)
            .collect()
    }

    /// The first sealed segment of `info`, if the oracle knows it due: the log start the
    /// model knows, every message in it in a batch acknowledged with its stamp (a message
    /// in doubt that a boot found there has a stamp the model does not know), the newest
    /// older than the expiry by the wall clock the cleaner reads (no jump since boot, so
    /// the same clock).
    fn due_segment(&self, info: &PartitionInfo) -> Option<Due> {
        let topic = self
            .model
            .topic(info.identity.stream_id, info.identity.topic_id)?;
        let part = self.parts.get(&info.identity)?;
        let (start, _, _) = *info.sealed.first()?;
        let end = *info.segment_starts.iter().find(|s| **s > start)?;
        let stamped: u64 = part
            .batches
            .range(start..end)
            .map(|(base, (count, _))| (base + u64::from(*count)).min(end) - base)
            .sum();
        let whole = stamped == end - start;
        let newest = part
            .batches
            .range(start..end)
            .map(|(_, (_, ts))| *ts)
            .max()?;
        let slack = self.profile.cleaner_every_nanos / 1000;
        let due = info.fence.is_none()
            && !part.log_start_unknown
            && part.log_start == start
            && whole
            && self.jumps == self.jumps_at_boot
            && self.disk_full_until.is_none()
            && topic.expiry > 0
            && self.wall().saturating_sub(newest) > topic.expiry + slack;
        due.then_some(Due {
            start,
            expiry: topic.expiry,
            seen_at: self.now(),
            faults_from: self.disk.record_count(),
            model_op: self.model.op,
        })
    }

    /// A segment seen due and still there, with nothing since that would excuse it, after
    /// the grace the cleaner's timer allows: the cleaner did not run, or did not delete.
    pub(crate) fn judge_cleaner_liveness(&mut self, info: &PartitionInfo) -> Checked<()> {
        let identity = info.identity;
        let Some(now_due) = self.due_segment(info) else {
            self.due.remove(&identity);
            return Ok(());
        };
        let Some(first) = self.due.get(&identity).copied() else {
            self.due.insert(identity, now_due);
            return Ok(());
        };
        let dir = cairn_engine::partition::partition_dir(
            std::path::Path::new(crate::node_world::NODE_ROOT),
            identity.stream_id,
            identity.topic_id,
            identity.partition_id,
        );
        let metadata_moved = self.names_moved(Start {
            at: first.seen_at,
            model_op: first.model_op,
        });
        let excused = first.start != now_due.start
            || first.expiry != now_due.expiry
            || metadata_moved
            || self.last_full >= first.seen_at
            || self
                .disk
                .records_since(first.faults_from)
                .iter()
                .filter(|r| r.path.as_ref().is_none_or(|p| p.starts_with(&dir)))
                .any(|r| CLEANER_EXCUSES.contains(&r.kind));
        if excused {
            self.due.insert(identity, now_due);
            return Ok(());
        }
        let grace = CLEANER_GRACE_INTERVALS * self.profile.cleaner_every_nanos;
        if now_due.seen_at.saturating_sub(first.seen_at) > grace {
            return Err(violation(
                INV_RETENTION,
                format!(
                    "partition {identity}: segment {}.. due for expiry (every message older than {} µs) since {} ns, still there at {} ns: the cleaner did not delete it",
                    first.start, first.expiry, first.seen_at, now_due.seen_at
                ),
            ));
        }
        self.decision("CleanerOwedDeletion");
        Ok(())
    }

    /// Judges what the running node's cleaners deleted since the last look.
    pub(crate) fn drain_deletions(&mut self) -> Checked<()> {
        let deleted = match &self.node {
            Some(node) => node.take_deletions(),
            None => return Ok(()),
        };
        self.judge_deletions(&deleted)
    }

    /// Each deletion, in order, against its rule and the deletions before it: a prefix of
    /// sealed segments (it starts at the log start the model knows), the expiry judged by
    /// the stamps producers were acknowledged with, the size by the sealed bytes left after
    /// the deletions before it in the same pass; and each cleaner pass as a whole, which
    /// leaves no more sealed bytes than its budget (it deletes until within it).
    pub(crate) fn judge_deletions(&mut self, deleted: &[Deletion]) -> Checked<()> {
        let mut pass: Option<(PartitionKey, u64, u64)> = None;
        for (i, d) in deleted.iter().enumerate() {
            self.decision("RetentionDeletion");
            self.trace.event(format!(
                "deleted {:?} segment {}..{} ({:?})",
                d.partition, d.segment.start_offset, d.end, d.reason
            ));
            let key = d.partition;
            let identity = PartitionIdentity {
                stream_id: key.0,
                topic_id: key.1,
                partition_id: key.2,
                nonce: d.nonce,
            };
            if self.model.identity(self.cluster, key) != Some(identity) {
                // An incarnation since purged or removed: its messages are gone with it.
                continue;
            }
            let Some(topic) = self.model.topic(key.0, key.1).cloned() else {
                continue;
            };
            let left = match pass {
                Some((k, now, left)) if k == key && now == d.now => left,
                _ => d.sealed_bytes,
            };
            let after = left.saturating_sub(d.segment.bytes);
            pass = Some((key, d.now, after));
            let pass_ends = deleted
                .get(i + 1)
                .is_none_or(|next| (next.partition, next.now) != (key, d.now));
            if pass_ends
                && d.reason != Reason::Requested
                && d.policy.budget > 0
                && after > d.policy.budget
            {
                return Err(violation(INV_RETENTION, format!("partition {key:?}: a cleaner pass ended with {after} B sealed, over its budget of {} B (its last deletion {}..{}, {:?})", d.policy.budget, d.segment.start_offset, d.end, d.reason)));
            }
            let part = self.parts.entry(identity).or_default();
            if d.segment.start_offset != part.log_start && !part.log_start_unknown {
                return Err(violation(INV_RETENTION, format!("partition {key:?}: deleted segment {}..{} while the log starts at {}: not a prefix", d.segment.start_offset, d.end, part.log_start)));
            }
            // The cleaner judged by the topic's options in the view it read: the model's now,
            // or those of a recent op (an update may have been published, not yet answered).
            // The budget as the spec words it, computed here rather than by the engine's own
            // `Policy::for_topic`: `max_topic_size` shared equally by the partitions, never
            // below one sealed segment's ceiling (its size plus one batch).
            let floor = model::size_floor(&self.profile);
            let policy_of = |t: &model::MTopic| Policy {
                message_expiry: t.expiry,
                budget: match t.max_size {
                    0 => 0,
                    size => (size / t.partitions.len().max(1) as u64).max(floor),
                },
            };
            let known = std::iter::once(policy_of(&topic))
                .chain(
                    self.history
                        .values()
                        .filter_map(|m| m.topic(key.0, key.1).map(policy_of)),
                )
                .any(|p| p == d.policy);
            if d.reason != Reason::Requested && !known {
                return Err(violation(INV_RETENTION, format!("partition {key:?}: a deletion judged by policy {:?}, which the topic never had", d.policy)));
            }
            let policy = d.policy;
            let justified = match d.reason {
                Reason::Expired => {
                    let newest = part
                        .batches
                        .range(d.segment.start_offset..d.end)
                        .map(|(_, (_, ts))| *ts)
                        .max();
                    policy.message_expiry > 0
                        && d.now <= self.max_wall.max(self.env.clock.wall_micros())
                        && newest.is_none_or(|n| d.now.saturating_sub(n) > policy.message_expiry)
                }
                Reason::OverSize => policy.budget > 0 && left > policy.budget,
                Reason::Requested => true,
            };
            if !justified {
                return Err(violation(INV_RETENTION, format!("partition {key:?}: deleted segment {}..{} ({:?}) though its rule did not hold (expiry {} µs, budget {} B, sealed {} B left, node time {})", d.segment.start_offset, d.end, d.reason, policy.message_expiry, policy.budget, left, d.now)));
            }
            part.log_start = d.end;
            part.log_start_unknown = false;
            part.messages = part.messages.split_off(&d.end);
            part.batches = part.batches.split_off(&d.end);
        }
        Ok(())
    }
}

//! Polls off the owner: the shard plans a poll's read ([`crate::partition::ReadPlan`]:
//! where it starts, the open files and bytes it may touch, up to the visible end) and hands
//! the plan out; the caller reads it on its own task, so a poll's device reads never stall
//! the shard's sends. What the read decides comes back as requests of their own: a consumer's
//! auto-commit ([`ShardRequest::Commit`]) and the fence damage in promised bytes calls for
//! ([`ShardRequest::ReadDamaged`]), each for the partition the plan was made of only (the
//! same adoption: not one purged, removed or rebuilt since). An auto-commit lands only if
//! the consumer's stored offset is still the one the plan saw: a poll and its commit are one
//! step, as if taken when the plan was made, and a store, a deletion or another poll's
//! commit in between wins (two polls of one consumer at once may so read the same messages:
//! the second commit is dropped, and the consumer's next poll resumes after the first's).
//!
//! Architecture Invariant: a plan is made between the owner's requests, never while its
//! partition's files are being written (a partition in a persist job is not in the map), and
//! reads whole batches below the visible end only; its handles keep a segment that
//! retention, a purge or a deletion unlinks meanwhile readable, so a reply is one
//! incarnation's bytes as they were.

use super::{Shard, ShardRequest};
use crate::error::NodeResult;
use crate::node::Node;
use crate::partition::{ConsumerId, Partition, PlanRead, PollFrom, Polled, ReadFence, ReadPlan};
use crate::state::PartitionKey;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// A plan handed out, and its place in its partition's count of plans out.
pub(crate) struct OwnerRead {
    plan: ReadPlan,
    out: PlanOut,
    /// The auto-commit consumer's stored offset when the plan was made (`None` inside: no
    /// offset stored; outside: no auto-commit, or the offset unreadable).
    stored: Option<Option<u64>>,
}

/// Counts a plan out of its partition while it lives ([`Shard::note_deletion`]); the count
/// is the partition's adoption (made anew by every `own`), which its requests name.
pub(crate) struct PlanOut(Arc<AtomicU32>);

impl Drop for PlanOut {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A consumer's auto-commit, for the caller to ask after the read: the consumer and the op
/// of the view that named it.
pub(crate) type Commit = (ConsumerId, u64);

impl Shard {
    /// Plans a poll of `key` (`ShardRequest::Poll`); `commit`: the consumer whose stored
    /// offset its auto-commit will replace.
    pub(super) fn plan_read(
        &mut self,
        key: PartitionKey,
        (from, count, max_bytes): (PollFrom, u32, u64),
        commit: Option<ConsumerId>,
    ) -> NodeResult<OwnerRead> {
        let owned = self.partitions.get_mut(&key).ok_or(Self::missing(key))?;
        let plan = owned.partition.read_plan(from, count, max_bytes)?;
        let stored = commit.and_then(|c| owned.partition.stored_offset(c).ok());
        owned.reads.fetch_add(1, Ordering::SeqCst);
        Ok(OwnerRead {
            plan,
            out: PlanOut(owned.reads.clone()),
            stored,
        })
    }

    /// The partition the plan counted in `out` was made of, if the shard still holds it.
    fn planned(&mut self, key: PartitionKey, out: &PlanOut) -> Option<&mut Partition> {
        let owned = self.partitions.get_mut(&key)?;
        Arc::ptr_eq(&owned.reads, &out.0).then_some(&mut owned.partition)
    }

    /// Stores a poll's auto-commit (`ShardRequest::Commit`) in the partition it read, if the
    /// consumer's stored offset is still `stored`; one for a partition gone (purged, removed,
    /// rebuilt), a group deleted since, or an offset written meanwhile is dropped.
    pub(super) fn commit(
        &mut self,
        key: PartitionKey,
        out: &PlanOut,
        (consumer, resolved_at): Commit,
        (stored, offset): (Option<Option<u64>>, u64),
    ) -> NodeResult<()> {
        if self.is_retired(key, consumer, resolved_at) {
            return Ok(());
        }
        let Some(partition) = self.planned(key, out) else {
            return Ok(());
        };
        if partition.stored_offset(consumer).ok() != stored {
            return Ok(());
        }
        Ok(partition.store_offset(consumer, offset)?)
    }

    /// A read found damage in promised bytes of the partition it read (`ShardRequest::
    /// ReadDamaged`): it fences, if the shard still holds that partition.
    pub(super) fn read_damaged(&mut self, key: PartitionKey, out: &PlanOut, fence: ReadFence) {
        if let Some(partition) = self.planned(key, out) {
            partition.read_damaged(fence);
        }
    }

    /// Counts a deletion of `key`'s segments, or of the partition, while a plan of it was
    /// out (the simulator's coverage: reads off the owner raced it).
    pub(super) fn note_deletion(&self, key: PartitionKey) {
        let out = self
            .partitions
            .get(&key)
            .is_some_and(|owned| owned.reads.load(Ordering::SeqCst) > 0);
        if out {
            self.stats
                .deletions_during_reads
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Node {
    /// A poll of this node's partition `key`: planned by its shard, read here; the read's
    /// fence and the auto-commit go back to the shard before the reply is returned, with
    /// the last offset it holds.
    pub(crate) async fn poll_owner(
        &self,
        key: PartitionKey,
        read: (PollFrom, u32, u64),
        commit: Option<Commit>,
    ) -> NodeResult<(Polled, Option<u64>)> {
        let (reply, pending) = crate::env::chan::oneshot();
        let request = ShardRequest::Poll {
            key,
            read,
            commit: commit.map(|c| c.0),
            ticket: self.ticket(),
            reply,
        };
        self.enqueue(self.shard(key), request).await?;
        let OwnerRead { plan, out, stored } = self.answer(pending).await??;
        let PlanRead {
            polled,
            last_offset,
            fence,
        } = plan.read();
        debug_assert_eq!(
            last_offset,
            super::last_offset(&polled),
            "the plan's last offset"
        );
        // The simulated disk's time for the read passes here, not on the shard.
        crate::env::settle(&self.inner.env).await;
        let out = Arc::new(out);
        if let Some(fence) = fence {
            let (reply, pending) = crate::env::chan::oneshot();
            let request = ShardRequest::ReadDamaged {
                key,
                out: out.clone(),
                fence,
                reply,
            };
            self.enqueue(self.shard(key), request).await?;
            self.answer(pending).await?;
        }
        if let (Some(commit), Some(last)) = (commit, last_offset) {
            let (reply, pending) = crate::env::chan::oneshot();
            let request = ShardRequest::Commit {
                key,
                out,
                commit,
                stored,
                offset: last,
                reply,
            };
            self.enqueue(self.shard(key), request).await?;
            self.answer(pending).await??;
        }
        Ok((polled, last_offset))
    }
}

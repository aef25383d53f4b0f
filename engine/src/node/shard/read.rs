//! Polls off the owner: the shard plans a poll's read ([`crate::partition::ReadPlan`]:
//! where it starts, the open files and bytes it may touch, up to the visible end) and hands
//! the plan out; the caller reads it on its own task, so a poll's device reads never stall
//! the shard's sends. What the read decides comes back as requests of their own: a consumer's
//! auto-commit ([`ShardRequest::Commit`]) and the fence damage in promised bytes calls for
//! ([`ShardRequest::ReadDamaged`]), each for the incarnation the plan was made of only.
//!
//! Architecture Invariant: a plan is made between the owner's requests, never while its
//! partition's files are being written (a partition in a persist job is not in the map), and
//! covers whole batches below the visible end only; its handles keep a segment that
//! retention, a purge or a deletion unlinks meanwhile readable, so a reply is one
//! incarnation's bytes as they were.

use super::{Shard, ShardRequest};
use crate::error::NodeResult;
use crate::node::Node;
use crate::partition::{ConsumerId, FenceReason, PlanRead, PollFrom, Polled, ReadPlan};
use crate::state::PartitionKey;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// A plan handed out, and its place in its partition's count of plans out.
pub(crate) struct OwnerRead {
    plan: ReadPlan,
    nonce: u64,
    _out: PlanOut,
}

/// Counts a plan out of its partition while it lives ([`Shard::reads_out`]).
struct PlanOut(Arc<AtomicU32>);

impl Drop for PlanOut {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A consumer's auto-commit, for the caller to ask after the read: the consumer and the op
/// of the view that named it.
pub(crate) type Commit = (ConsumerId, u64);

impl Shard {
    /// Plans a poll of `key` (`ShardRequest::Poll`).
    pub(super) fn plan_read(
        &mut self,
        key: PartitionKey,
        from: PollFrom,
        count: u32,
        max_bytes: u64,
    ) -> NodeResult<OwnerRead> {
        let owned = self.partitions.get_mut(&key).ok_or(Self::missing(key))?;
        let plan = owned.partition.read_plan(from, count, max_bytes)?;
        owned.reads.fetch_add(1, Ordering::SeqCst);
        Ok(OwnerRead {
            plan,
            nonce: owned.identity.nonce,
            _out: PlanOut(owned.reads.clone()),
        })
    }

    /// Stores a poll's auto-commit (`ShardRequest::Commit`) in the incarnation it read; a
    /// commit for one gone (purged, removed) or a group deleted since is dropped with it.
    pub(super) fn commit(
        &mut self,
        key: PartitionKey,
        nonce: u64,
        (consumer, resolved_at): Commit,
        offset: u64,
    ) -> NodeResult<()> {
        if self.is_retired(key, consumer, resolved_at) {
            return Ok(());
        }
        match self.partitions.get_mut(&key) {
            Some(owned) if owned.identity.nonce == nonce => {
                Ok(owned.partition.store_offset(consumer, offset)?)
            }
            _ => Ok(()),
        }
    }

    /// A read found damage in promised bytes of the incarnation `nonce` (`ShardRequest::
    /// ReadDamaged`): it fences, if the shard still holds that incarnation.
    pub(super) fn read_damaged(&mut self, key: PartitionKey, nonce: u64, reason: FenceReason) {
        if let Some(owned) = self.partitions.get_mut(&key) {
            if owned.identity.nonce == nonce {
                owned.partition.read_damaged(reason);
            }
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
    /// fence and the auto-commit go back to the shard before the reply is returned.
    pub(crate) async fn poll_owner(
        &self,
        key: PartitionKey,
        (from, count, max_bytes): (PollFrom, u32, u64),
        commit: Option<Commit>,
    ) -> NodeResult<Polled> {
        let (reply, pending) = crate::env::chan::oneshot();
        let request = ShardRequest::Poll {
            key,
            from,
            count,
            max_bytes,
            ticket: self.ticket(),
            reply,
        };
        self.enqueue(self.shard(key), request).await?;
        let OwnerRead { plan, nonce, _out } = self.answer(pending).await??;
        let PlanRead { polled, fence } = plan.read();
        drop(_out);
        self.inner
            .stats
            .reads_off_owner
            .fetch_add(1, Ordering::Relaxed);
        if let Some(reason) = fence {
            let (reply, pending) = crate::env::chan::oneshot();
            let request = ShardRequest::ReadDamaged {
                key,
                nonce,
                reason,
                reply,
            };
            self.enqueue(self.shard(key), request).await?;
            self.answer(pending).await?;
        }
        if let (Some(commit), Some(last)) = (commit, super::last_offset(&polled)) {
            let (reply, pending) = crate::env::chan::oneshot();
            let request = ShardRequest::Commit {
                key,
                nonce,
                commit,
                offset: last,
                reply,
            };
            self.enqueue(self.shard(key), request).await?;
            self.answer(pending).await??;
        }
        Ok(polled)
    }
}

//! Adopting a state whole: a clustered member too far behind for its leader's log is sent
//! the leader's state (the metadata group's snapshot) instead of the ops it missed.
//!
//! ```text
//! its decision at or before the node's → nothing to do (answered false)
//!   → the work between the two states (`state::adoption`), checked for directories in the way
//!   → `adopt.bin` durable (from here on boot finishes the adoption if the node stops)
//!   → the work on the shards, each changed directory synced once
//!   → the state recorded as the checkpoint, every op up to it applied; `adopt.bin` removed
//!   → publish the new view → effects to the groups owner → answered true
//! ```
//!
//! As with an op, once the adoption is durable any failure stops the node, and a restart
//! finishes it (`node::boot`).

use super::groups::GroupRequest;
use super::meta_owner::MetaOwner;
use super::shard::ShardRequest;
use super::view::MetaView;
use super::work::sync_dirs;
use crate::env::settle;
use crate::error::{Failure, NodeError, NodeResult};
use crate::state::adoption::adoption;
use crate::state::{DirWork, MetaState};
use std::collections::BTreeSet;
use std::sync::Arc;

impl MetaOwner {
    /// Adopts `state`, the state after op `op` whose prepare's checksum is `anchor` (see
    /// the module's table).
    pub(super) async fn adopt(
        &mut self,
        op: u64,
        anchor: u128,
        state: MetaState,
    ) -> NodeResult<bool> {
        if let Some(failure) = self.stopped.get() {
            return Err(NodeError::Stopped(failure));
        }
        let (before, after) = (&self.current.state, &state);
        if after.decided() <= before.decided() {
            return Ok(false);
        }
        if op <= self.current.op {
            return Err(NodeError::Undecided(format!(
                "the adopted state ends at op {}, this node at op {}, though its decision {:#x} is \
                 after this node's {:#x}",
                op,
                self.current.op,
                after.decided(),
                before.decided()
            )));
        }
        let planned = adoption(before, after);
        let removals = removed_partitions(&planned.work);
        // A directory in the way of a partition it creates refuses it, as it refuses an op.
        self.check_paths(before, &planned.work)?;
        tracing::info!(
            from = self.current.op,
            to = op,
            "adopting a cluster's state"
        );
        if let Err(error) = self.plane.begin_adoption(op, anchor, after) {
            // Nothing rests on the temporary file: boot removes it.
            let failure = self.fail(Failure::Metadata(error));
            return Err(NodeError::Stopped(failure));
        }
        settle(&self.env).await;
        let after = state;
        let mut dirs = BTreeSet::new();
        if let Err(error) = self.do_work(&after, op, &planned.work, &mut dirs).await {
            return Err(NodeError::Stopped(self.fail(Failure::Work(error))));
        }
        if let Err(error) = sync_dirs(self.env.disk.as_ref(), &dirs) {
            return Err(NodeError::Stopped(self.fail(Failure::Work(error.into()))));
        }
        if let Err(error) = self.plane.finish_adoption(op, anchor, &after) {
            return Err(NodeError::Stopped(self.fail(Failure::Metadata(error))));
        }
        settle(&self.env).await;
        self.current = Arc::new(MetaView { op, state: after });
        self.view.publish(self.current.clone());
        for shard in &self.shards {
            let _ = shard.send(ShardRequest::Applied).await;
        }
        self.check_partitions(&self.current.state).await;
        if !planned.effects.is_empty() {
            let _ = self
                .groups
                .send(GroupRequest::Effects {
                    effects: planned.effects,
                    at_op: op,
                })
                .await;
        }
        use std::sync::atomic::Ordering::Relaxed;
        self.stats.meta_adoptions.fetch_add(1, Relaxed);
        self.stats
            .meta_adopted_removals
            .fetch_add(removals, Relaxed);
        self.check();
        Ok(true)
    }
}

/// The partitions `work` removes or empties.
fn removed_partitions(work: &[DirWork]) -> u64 {
    let count = |work: &DirWork| match work {
        DirWork::CreatePartition(_) | DirWork::RemoveGroupOffsets { .. } => 0,
        DirWork::PurgePartition { .. } | DirWork::RemovePartition(_) => 1,
        DirWork::RemoveTopic { partitions, .. } => partitions.len(),
        DirWork::RemoveStream { partitions, .. } => partitions.len(),
    };
    work.iter().map(count).sum::<usize>() as u64
}

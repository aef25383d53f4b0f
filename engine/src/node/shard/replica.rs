//! A cluster member's replicas in the shard: what its partition groups ask of them
//! (`ShardRequest::Apply`, `Checkpoint`, `Rebuild`).

use super::Shard;
use crate::error::{NodeError, NodeResult};
use crate::node::replicator::{OffsetApplied, OffsetWrite};
use crate::node::Sent;
use crate::partition::{FenceReason, Partition};
use crate::state::PartitionKey;
use bytes::BytesMut;

impl Shard {
    /// The partition `key` of nonce `nonce` (a replica group's, which names the one it
    /// replicates: a purge makes another).
    pub(super) fn replica(&mut self, key: PartitionKey, nonce: u64) -> NodeResult<&mut Partition> {
        match self.partitions.get_mut(&key) {
            Some(owned) if owned.identity.nonce == nonce => Ok(&mut owned.partition),
            _ => Err(Self::missing(key)),
        }
    }

    /// Stamps a committed send into its replica (`ShardRequest::Apply`).
    pub(super) fn apply(
        &mut self,
        key: PartitionKey,
        nonce: u64,
        batch: BytesMut,
        timestamp: u64,
    ) -> NodeResult<Sent> {
        let partition = self.replica(key, nonce)?;
        let ack = partition.append_at(batch, timestamp)?;
        debug_assert!(!ack.requires_persist, "a replica's appends show at once");
        Ok(Sent {
            partition: key.2,
            nonce,
            ack,
        })
    }

    /// Applies a committed offset write to its replica (`ShardRequest::ApplyOffset`): a
    /// group's write that a deletion after `resolved_at` retired is not stored.
    pub(super) fn apply_offset(
        &mut self,
        key: PartitionKey,
        nonce: u64,
        write: OffsetWrite,
        resolved_at: u64,
    ) -> NodeResult<OffsetApplied> {
        let retired = self.is_retired(key, write.consumer, resolved_at);
        let partition = self.replica(key, nonce)?;
        Ok(match write.offset {
            _ if retired => OffsetApplied::GroupGone,
            Some(offset) => {
                partition.store_replicated_offset(write.consumer, offset)?;
                OffsetApplied::Stored
            }
            None => OffsetApplied::Deleted(partition.delete_offset(write.consumer)?),
        })
    }

    /// Syncs a replica for its group's checkpoint (`ShardRequest::Checkpoint`): its batches,
    /// then the offsets stored unsynced (its group's log no longer holds them after).
    pub(super) fn checkpoint(&mut self, key: PartitionKey, nonce: u64) -> NodeResult<u64> {
        let partition = self.replica(key, nonce)?;
        let point = partition.persist()?;
        partition.sync_offsets()?;
        Ok(point.next_offset)
    }

    /// Replaces this member's replica `key` (of nonce `nonce`) with an empty one starting at
    /// `start` ([`ShardRequest::Rebuild`]); only a cluster member's replicas, whose peers
    /// hold what it held.
    pub(super) fn rebuild(&mut self, key: PartitionKey, nonce: u64, start: u64) -> NodeResult<()> {
        if !self.settings.replica {
            return Err(NodeError::InvalidRequest(
                "only a cluster member's replica is rebuilt from its peers".into(),
            ));
        }
        let identity = match self.partitions.get(&key) {
            Some(owned) if owned.identity.nonce == nonce => owned.identity,
            _ => return Err(Self::missing(key)),
        };
        let view = self.view.load();
        let topic = view.find_topic(key.0, key.1);
        let config = topic.map(|t| t.options.config()).unwrap_or_default();
        let dir = self.dir(key);
        let fence = self.partitions[&key].partition.fence_reason().cloned();
        tracing::warn!(dir = %dir.display(), ?fence, start,
            "rebuilding a replica's partition for its peers to refill: its directory is removed");
        self.note_deletion(key);
        self.partitions.remove(&key);
        let rebuilt = crate::node::rebuild::Rebuilt {
            env: &self.env,
            dir: &dir,
            identity,
            config,
            settings: self.settings,
            hooks: self.hooks.partition,
        };
        match rebuilt.replace(start) {
            Ok(partition) => {
                self.own(identity, partition);
                Ok(())
            }
            Err(e) => {
                // Still the shard's (fenced): the next rebuild, or a boot, takes it from here.
                let reason = FenceReason::RebuildCutShort {
                    dir,
                    error: e.to_string(),
                };
                self.own(identity, Partition::fenced(reason));
                Err(e.into())
            }
        }
    }
}

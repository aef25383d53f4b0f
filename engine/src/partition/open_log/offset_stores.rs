//! Consumer offset stores that wait for a shared directory sync (`persisted`, a shard's
//! round: `node/shard/stores`), and the error an offset file's failure makes.

use super::OpenLog;
use crate::config::Durability;
use crate::env::is_no_space;
use crate::partition::offsets::ConsumerId;
use crate::partition::{PartitionError, Result};
use std::io;

impl OpenLog {
    /// [`Self::store_offset`], its directory sync left to [`Self::settle_offsets`] when the
    /// store can wait for it (`persisted`, into an existing member's file); whether it
    /// does.
    pub(in crate::partition) fn store_offset_in_round(
        &mut self,
        consumer: ConsumerId,
        offset: u64,
    ) -> Result<bool> {
        let waits = self.config.consumer_offset_durability == Durability::Persisted
            && self.offsets.get(consumer).is_some();
        if !waits {
            return self.store_offset(consumer, offset).map(|()| false);
        }
        self.check_storable(offset)?;
        self.offsets
            .store_pending(self.env.disk.as_ref(), consumer, offset)
            .map_err(|source| self.offset_error("store offset in", source))?;
        Ok(true)
    }

    /// Makes the stores [`Self::store_offset_in_round`] left waiting durable (their
    /// directories synced once) and shown.
    pub(in crate::partition) fn settle_offsets(&mut self) -> Result<()> {
        if !self.offsets.has_pending() {
            return Ok(());
        }
        // Any failure fences, out of space too: the renames it leaves may yet become
        // durable under values the partition would go on showing as before.
        let dir = self.dir.join("offsets");
        self.offsets
            .settle(self.env.disk.as_ref())
            .map_err(|source| PartitionError::Io {
                op: "sync offset directories in",
                path: dir,
                source,
            })
    }

    /// An offset file's I/O failure: out of space, or the failure its partition fences on.
    pub(super) fn offset_error(&self, op: &'static str, source: io::Error) -> PartitionError {
        if is_no_space(&source) {
            PartitionError::NoSpace
        } else {
            PartitionError::Io {
                op,
                path: self.dir.join("offsets"),
                source,
            }
        }
    }
}

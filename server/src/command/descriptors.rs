//! The open-file budget (review S4): every partition keeps its active segment's two files
//! open, so the process's open-file limit bounds the partitions a node can serve. At start
//! the server raises its soft limit to the hard one ([`crate::process::raise_open_file_limit`])
//! and sets this budget from it; a create that would take the partitions past the budget is
//! refused before it is journaled, with a reason that names the limit, instead of failing
//! inside its directory work (which stops the node, and every boot after it).
//!
//! ```text
//! limit ─ reserved (the sealed-handle cache, metadata files, the runtime)
//!       ─ connections (TCP and HTTP; at most half of what is left)
//!       = 2 × partitions
//! ```

use super::status::{codes, Status};

/// Files each open partition holds: its active segment's log and index.
pub const FILES_PER_PARTITION: u64 = 2;
/// Descriptors kept for the process itself besides the sealed-handle cache: the metadata
/// journal and superblock, a checkpoint's files, stdio, the runtime's event and signal
/// descriptors, the listeners.
pub const RESERVED: u64 = 64;

/// How many partitions the process's open-file limit leaves room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorBudget {
    /// The soft open-file limit the process runs with.
    pub limit: u64,
    pub partitions: u64,
}

impl DescriptorBudget {
    /// The budget under `limit`, with `sealed_handles` kept for the handle cache and
    /// `connections` (TCP and HTTP together) for clients, who get at most half of what the
    /// reserve leaves.
    pub fn new(limit: u64, sealed_handles: u64, connections: u64) -> DescriptorBudget {
        let spare = limit.saturating_sub(RESERVED + sealed_handles);
        let for_connections = connections.min(spare / 2);
        DescriptorBudget {
            limit,
            partitions: (spare - for_connections) / FILES_PER_PARTITION,
        }
    }

    /// Refuses a create that takes the node from `now` partitions to `now + more`.
    pub fn admit(&self, now: u64, more: u64) -> Result<(), Status> {
        if now.saturating_add(more) <= self.partitions {
            return Ok(());
        }
        Err(Status::because(
            codes::TOO_MANY_PARTITIONS,
            format!(
                "{more} more partitions would make {} of the {} the open-file limit ({}) leaves \
                 room for (each keeps {FILES_PER_PARTITION} files open): raise the server's \
                 `ulimit -n` (its hard limit) or delete partitions",
                now + more,
                self.partitions,
                self.limit,
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_get_what_the_reserve_and_the_connections_leave() {
        // 1024 - 64 - 512 = 448 spare; connections take at most half: 224; 224 / 2 files.
        let tight = DescriptorBudget::new(1024, 512, 8192);
        assert_eq!(tight.partitions, 112);
        assert!(tight.admit(100, 12).is_ok());
        let refused = tight.admit(100, 13).unwrap_err();
        assert_eq!(refused.code, codes::TOO_MANY_PARTITIONS);
        assert!(refused.reason.unwrap().contains("open-file limit (1024)"));
        // A roomy limit: connections take what they need.
        let roomy = DescriptorBudget::new(1 << 20, 512, 8192);
        assert_eq!(roomy.partitions, ((1 << 20) - 64 - 512 - 8192) / 2);
        // Below the reserve nothing is left, and nothing overflows.
        assert_eq!(DescriptorBudget::new(100, 512, 10).partitions, 0);
    }
}

//! The open-file budget (review S4) and the node's partition limit. Partitions no longer
//! hold their files for life: the active segments' files are checked out of a bounded table
//! (`cairn_engine::partition::active_handles`), so the open-file limit sizes that table, not
//! the number of partitions. At start the server raises its soft limit to the hard one
//! ([`crate::process::raise_open_file_limit`]) and sizes the table from it:
//!
//! ```text
//! limit ─ reserved (the sealed-handle cache, metadata files, the runtime)
//!       ─ connections (TCP and HTTP; at most half of what is left)
//!       = 4 × partitions whose active files stay open at once
//! ```
//!
//! Partitions are bounded by [`MAX_PARTITIONS`]: a create past it is refused before it is
//! journaled, with a reason that names the limit.

use super::status::{codes, Status};

/// Files each partition holds while its active segment's files are open: its log and
/// index, and the superblock's two slot files kept open beside them.
pub const FILES_PER_PARTITION: u64 = 4;
/// Descriptors kept for the process itself besides the sealed-handle cache: the metadata
/// journal and superblock, a checkpoint's files, stdio, the runtime's event and signal
/// descriptors, the listeners.
pub const RESERVED: u64 = 64;
/// The most partitions a node holds (an explicit limit on everything: each costs memory
/// for its index, offsets and, in a cluster, its replica group).
pub const MAX_PARTITIONS: u64 = 100_000;

/// What the process's open-file limit leaves room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorBudget {
    /// The soft open-file limit the process runs with.
    pub limit: u64,
    /// Connections (TCP and HTTP together) the limit leaves room for: `cairn serve` takes
    /// no more, so clients cannot take the descriptors partitions need.
    pub connections: u64,
    /// Partitions whose active segment's files may be open at once (at least one).
    pub active: u64,
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
            connections: for_connections,
            active: ((spare - for_connections) / FILES_PER_PARTITION).max(1),
        }
    }
}

/// Refuses a create that takes the node from `now` partitions to `now + more` past
/// [`MAX_PARTITIONS`].
pub fn admit(now: u64, more: u64) -> Result<(), Status> {
    if now.saturating_add(more) <= MAX_PARTITIONS {
        return Ok(());
    }
    Err(Status::because(
        codes::TOO_MANY_PARTITIONS,
        format!(
            "{more} more partitions would make {} of the {MAX_PARTITIONS} a node holds: \
             delete partitions first",
            now.saturating_add(more),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_files_get_what_the_reserve_and_the_connections_leave() {
        // 1024 - 64 - 512 = 448 spare; connections take at most half: 224; 224 / 4 files.
        let tight = DescriptorBudget::new(1024, 512, 8192);
        assert_eq!((tight.connections, tight.active), (224, 56));
        // A roomy limit: connections take what they need.
        let roomy = DescriptorBudget::new(1 << 20, 512, 8192);
        assert_eq!(roomy.active, ((1 << 20) - 64 - 512 - 8192) / 4);
        // Below the reserve one partition's files still open, and nothing overflows.
        assert_eq!(DescriptorBudget::new(100, 512, 10).active, 1);
    }

    #[test]
    fn partitions_past_the_node_limit_are_refused() {
        assert!(admit(MAX_PARTITIONS - 10, 10).is_ok());
        let refused = admit(MAX_PARTITIONS - 10, 11).unwrap_err();
        assert_eq!(refused.code, codes::TOO_MANY_PARTITIONS);
        assert!(refused.reason.unwrap().contains("100000 a node holds"));
        assert!(admit(u64::MAX, 1).is_err(), "no overflow");
    }
}

//! The node's settings: what boot is given ([`NodeSettings`]): the partitions' and the
//! metadata plane's settings, the password hashing cost ([`PasswordCost`]), the root user,
//! the cleaner's interval, the shard count, the bound of every queue ([`NodeLimits`]) and the
//! simulator's hooks ([`NodeHooks`]; none in production).

use super::NodeHooks;
use crate::config::PartitionSettings;
use crate::metadata::MetaSettings;

/// What a password hash costs (argon2id). Production uses the library's defaults; tests and
/// the simulator use [`PasswordCost::CHEAP`] so that creating users stays fast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PasswordCost {
    pub memory_kib: u32,
    pub iterations: u32,
}

impl PasswordCost {
    pub const CHEAP: PasswordCost = PasswordCost {
        memory_kib: 8,
        iterations: 1,
    };
}

impl Default for PasswordCost {
    fn default() -> Self {
        PasswordCost {
            memory_kib: argon2::Params::DEFAULT_M_COST,
            iterations: argon2::Params::DEFAULT_T_COST,
        }
    }
}

/// The bound of every queue the node keeps (see `docs/limits.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLimits {
    /// Operations waiting for the metadata owner.
    pub meta_inbox: usize,
    /// Requests waiting for one shard.
    pub shard_inbox: usize,
    /// Requests waiting for the groups owner.
    pub groups_inbox: usize,
    /// Requests one client may have in flight at once.
    pub in_flight_per_client: usize,
    /// Unflushed message bytes all partitions together may hold; a send past it is
    /// refused with [`crate::partition::PartitionError::NodeJournalFull`].
    pub journal_bytes: u64,
    /// Open handles of sealed segments across all partitions (an LRU cache).
    pub sealed_handles: usize,
    /// Partitions whose active segment's files (and superblock slots) may stay open at once (a bounded
    /// table: [`crate::partition::active_handles`]).
    pub active_handles: usize,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            meta_inbox: 1024,
            shard_inbox: 4096,
            groups_inbox: 4096,
            in_flight_per_client: 64,
            journal_bytes: 1024 * 1024 * 1024,
            sealed_handles: 512,
            active_handles: 4096,
        }
    }
}

#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub partition: PartitionSettings,
    pub meta: MetaSettings,
    pub password_cost: PasswordCost,
    /// The root user at the first boot. The library's default password is for tests; the
    /// server never starts with it (it takes one from its configuration or generates one).
    pub root_username: String,
    pub root_password: String,
    /// How often each shard's retention cleaner runs.
    pub cleaner_interval: std::time::Duration,
    /// Partition shards (workers); 0 means one per core.
    pub shards: usize,
    pub limits: NodeLimits,
    /// The simulator's hooks into the owners, the partitions and the metadata plane; none
    /// in production ([`NodeHooks::default`]).
    pub hooks: NodeHooks,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            partition: PartitionSettings::default(),
            meta: MetaSettings::default(),
            password_cost: PasswordCost::default(),
            root_username: "iggy".into(),
            root_password: "iggy".into(),
            cleaner_interval: std::time::Duration::from_secs(60),
            shards: 0,
            limits: NodeLimits::default(),
            hooks: NodeHooks::default(),
        }
    }
}

//! cairn's integration tests over the real file system: partitions, recovery, whole nodes
//! driven from plain threads, damage and crashes at every step, the review fixes.
// One test binary for the crate: one link, and the tests of every file share the
// harness's threads (cargo runs test binaries one after another).

mod engine_defects_real_fs;
mod node_boot_io;
mod node_bounds;
mod node_concurrency;
mod node_crash_and_damage;
mod node_decided;
mod node_placement;
mod node_real_fs;
mod node_review_fixes;
mod node_tokens;
mod partition_identity_and_retention;
mod partition_real_fs;
mod recovery_damage_fuzz;
mod recovery_real_fs;
mod replica_rebuild;

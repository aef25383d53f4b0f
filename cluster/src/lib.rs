//! cairn's cluster: openraft on the `Env` seam, and the metadata consensus group.
//!
//! - [`rt`]: openraft's runtime implemented on `Env`, so the same Raft code runs on tokio and
//!   on the simulator's seeded executor.
//! - [`types`]: the group's type configuration: a command is a journaled metadata operation.
//! - [`log`]: the group's Raft log and vote on the `Env` disk (boot's table in its doc).
//! - [`sm`]: the state machine: each committed command applied by the member's node (or,
//!   in the simulator's in-memory worlds, by a `MetaState` here), and its snapshots.
//! - [`decide`]: the node's `Decider`: its metadata ops proposed on the leader or forwarded
//!   to it, answered once applied here.
//! - [`net`]: peer traffic on the `Env` network (sans-IO frames, a client per peer, the
//!   listener).
//! - [`partition`]: a partition's replica group: its sends replicated through a Raft log
//!   (the partition's prepare WAL) and stamped into its segments once committed.
//! - [`group`]: one replica: the above assembled, founded, proposed to, and its group's
//!   membership changed (a blank replica replacing the one it was).

pub mod decide;
pub mod group;
pub mod log;
pub mod net;
pub mod partition;
pub mod rt;
pub mod sm;
pub mod types;

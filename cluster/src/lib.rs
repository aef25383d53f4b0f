//! cairn's cluster: openraft on the `Env` seam.
//!
//! - [`rt`]: openraft's runtime implemented on `Env`, so the same Raft code runs on tokio and
//!   on the simulator's seeded executor.

pub mod rt;

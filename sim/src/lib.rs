//! cairn's deterministic simulator. Three worlds, each a seeded run of real engine code on a
//! simulated disk, clock and network, judged by its oracle:
//! - the partition world ([`partition_world`]): partitions on a simulated disk, their
//!   workload and nemesis, the engine's real recovery, the oracle's own reader of the disk,
//!   and directed scenarios;
//! - the node world ([`node_world`]): the concurrent node, its callers and their judges;
//! - the server world ([`server_world`]): `cairn serve` reached by simulated clients.
//!
//! Below them the ground floor they share: the [`executor`], the simulated machine
//! ([`mod@env`]), the run's [`report`], the seed's [`profile`], the [`timeline`] a run can
//! record, and the [`canary`] bugs the oracles must catch. [`run`] runs one seed.
#![forbid(unsafe_code)]

pub mod canary;
pub mod cluster_world;
pub mod env;
pub mod executor;
pub mod node_world;
pub mod partition_world;
pub mod profile;
pub mod report;
pub mod run;
pub mod server_world;
pub mod timeline;
pub mod wire;

// The partition world's modules at their old paths (`cairn_sim::directed::SCENARIOS`).
pub use partition_world::directed;

pub use profile::{Class, Profile};
pub use run::{run_seed, run_seed_with, RunOptions, RunReport, Violation};

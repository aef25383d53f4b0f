//! cairn's deterministic simulator: the executor, the world (a node with partitions on a
//! simulated disk, its workload and nemesis, the engine's real recovery), the oracle and its
//! checkers, the oracle's own reader of the disk, directed scenarios, and the seed corpus.
#![forbid(unsafe_code)]

pub mod canary;
pub mod directed;
pub mod executor;
pub mod node_world;
pub mod oracle;
pub mod profile;
pub mod run;
pub mod scenario;
pub mod server_world;
pub mod timeline;
pub mod walk;
pub mod world;

pub use profile::{Class, Profile};
pub use run::{run_seed, run_seed_with, RunOptions, RunReport, Violation};

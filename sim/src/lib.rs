//! cairn's deterministic simulator: the executor, the run (a node with partitions on a
//! simulated disk, a workload, crashes and power losses, the engine's real recovery), the
//! oracle and its invariant checks, and the seed corpus.

pub mod executor;
pub mod oracle;
pub mod profile;
pub mod run;

pub use profile::Profile;
pub use run::{run_seed, RunReport, Violation};

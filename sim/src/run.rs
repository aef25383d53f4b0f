//! One simulated run: the seed's scope picks its world — partitions
//! ([`crate::partition_world::run`]), the node ([`crate::node_world`]) or the server
//! ([`crate::server_world`]) — and the run's report comes back, an engine assertion that
//! fires included. Every choice derives from the seed; the trace hash proves it.

use crate::profile::{Profile, Scope};
use crate::report::INV_ASSERTION;

// The report's types at their old paths (`cairn_sim::run::RunReport`).
pub use crate::env::{MAX_EPOCH_POLLS, NODE_IP};
pub use crate::report::{RunReport, Trace, Violation};

/// The seed's profile as a run prints it (and the node world hashes it): the world's own
/// profile for the node and server scopes, the partitions' for the partition scope.
pub fn describe(profile: &Profile) -> String {
    match profile.scope {
        Scope::Node => {
            let node = crate::node_world::NodeProfile::from_seed(profile.seed);
            format!("seed {:#x} scope node\n  {node:?}\n", profile.seed)
        }
        Scope::Server => {
            let server = crate::server_world::ServerProfile::from_seed(profile.seed);
            format!("seed {:#x} scope server\n  {server:?}\n", profile.seed)
        }
        Scope::Cluster => {
            let cluster = crate::cluster_world::ClusterProfile::from_seed(profile.seed);
            format!("seed {:#x} scope cluster\n  {cluster:?}\n", profile.seed)
        }
        Scope::Partitions => profile.to_string(),
    }
}

/// How to run a seed.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    pub verbose: bool,
    /// Record the run's timeline (observation only: the run is the same).
    pub timeline: bool,
    /// Run the seed in this scope instead of the one it draws (a corpus seed found in a
    /// scope keeps it when the draw changes).
    pub scope: Option<crate::profile::Scope>,
}

/// Runs one node-scope seed ([`crate::node_world`]).
fn run_node_seed(profile: Profile, verbose: bool) -> RunReport {
    let seed = profile.seed;
    if verbose {
        print!("{}", describe(&profile));
    }
    let profile_hash = xxhash::xxh3::xxh3_64(describe(&profile).as_bytes());
    let (mut world, executor) = crate::node_world::NodeWorld::for_seed(seed, profile, verbose);
    // Before anything runs (the clock still at zero), as every run's trace begins.
    world.event(format!("profile {profile_hash}"));
    crate::node_world::run(world, executor).0
}

/// Runs one seed to completion. An engine assertion that fires (a panic) is a violation of
/// its own: the run reports it instead of taking the caller down.
pub fn run_seed(seed: u64, verbose: bool) -> RunReport {
    run_seed_with(
        seed,
        RunOptions {
            verbose,
            ..RunOptions::default()
        },
    )
}

/// Runs one seed as `options` say; see [`run_seed`].
pub fn run_seed_with(seed: u64, options: RunOptions) -> RunReport {
    let scope = options
        .scope
        .unwrap_or_else(|| crate::profile::Scope::of(seed));
    match std::panic::catch_unwind(|| run_seed_inner(seed, scope, options)) {
        Ok(report) => report,
        Err(panic) => {
            let message = crate::executor::panic_message(&*panic);
            let mut report = RunReport::new(Profile::from_seed_in(seed, scope));
            report.violation = Some(Violation {
                invariant: INV_ASSERTION,
                evidence: format!("the run panicked: {message}"),
            });
            report
        }
    }
}

fn run_seed_inner(seed: u64, scope: crate::profile::Scope, options: RunOptions) -> RunReport {
    let verbose = options.verbose;
    let profile = Profile::from_seed_in(seed, scope);
    match scope {
        crate::profile::Scope::Node => return run_node_seed(profile, verbose),
        crate::profile::Scope::Server => {
            if verbose {
                print!("{}", describe(&profile));
            }
            return crate::server_world::run(
                seed,
                verbose,
                options.timeline,
                RunReport::new(profile),
            );
        }
        crate::profile::Scope::Cluster => {
            if verbose {
                print!("{}", describe(&profile));
            }
            return crate::cluster_world::run_report(profile, verbose, options.timeline);
        }
        crate::profile::Scope::Partitions => {}
    }
    crate::partition_world::run::run(seed, verbose)
}

//! The simulator's own tests: the bounded swarm (fault kinds, recovery outcomes and coverage
//! rows all reached), the directed scenarios, the metrics under simulation, the network.
// One test binary for the crate: one link, and the tests of every file share the
// harness's threads (cargo runs test binaries one after another).

mod cluster;
mod directed;
mod metrics;
mod net;
mod swarm;

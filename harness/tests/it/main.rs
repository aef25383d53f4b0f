//! The harness's tests: every canary caught, and the benchmark's command line.
// One test binary for the crate: one link, and the tests of every file share the
// harness's threads (cargo runs test binaries one after another).

mod bench;
mod canaries;

//! The client's integration tests: the client against a scripted server, and over real TCP.
// One test binary for the crate: one link, and the tests of every file share the
// harness's threads (cargo runs test binaries one after another).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod support;

mod client;
mod real_tcp;

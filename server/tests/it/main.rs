//! The server's integration tests: the real `cairn` binary driven by Iggy's own SDK (TCP and
//! HTTP), by raw sockets, by plain HTTP and by cairn's own CLI; kill -9 and restarts; TLS; and
//! the architecture's tidy checks over the sources.
// One test binary for the crate: one link, and the tests of every file share the
// harness's threads (cargo runs test binaries one after another).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

mod architecture;
mod bad_input;
mod budgets;
mod check_cli;
mod cli_e2e;
mod cluster;
mod cluster_placement;
mod cluster_repair;
mod cluster_sdk;
mod crash_restart;
mod http_api;
mod http_compat;
mod personal_access_tokens;
mod sdk_compat;
mod tenants;
mod tls;

//! cairn's server: Apache Iggy's 0.11 binary protocol over TCP, as a thin adapter over the
//! concurrent node (`cairn_engine::node`). It holds no durable state of its own: every
//! request becomes a call on the node's owners or a read of its published view.
//!
//! Everything here runs on the `Env` seam (`Net` for the listener and connections, `Clock`
//! for timeouts, `Tasks` for connection tasks), never on tokio directly, so the simulator
//! runs this same code over a simulated network.
//!
//! - [`frame`]: sans-IO framing (256-byte headers, replies, evictions);
//! - [`tls`]: TLS for the listener (rustls, sans-IO over any `ByteStream`), off by default;
//! - [`permissions`]: Iggy's permission rules, a pure decision;
//! - [`registry`]: the live connections (GetClients), failed-login limits per address;
//! - [`session`]: a connection's login, bound to its user's incarnation;
//! - [`handlers`] and [`responses`]: each command code → the node → the reply body;
//! - [`connection`]: one connection's task (read a frame, answer it, in order);
//! - [`server`]: the listener, its bounds and graceful shutdown;
//! - [`hooks`]: optional hooks into the command path, for the simulator's deliberate bugs
//!   (none in production);
//! - [`http`]: the HTTP API in Iggy's shape and `/metrics`, one more adapter over the
//!   same command layer (on tokio, not the `Env` seam).

pub mod config;
pub mod connection;
pub mod frame;
pub mod handlers;
pub mod hooks;
pub mod http;
pub mod metrics;
pub mod permissions;
pub mod process;
pub mod registry;
pub mod responses;
pub mod serve;
pub mod server;
pub mod session;
pub mod tls;

pub use server::{Server, ServerLimits, ServerSettings, TopicDefaults};

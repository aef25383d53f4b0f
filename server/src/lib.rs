//! cairn's server: a transport-neutral command layer over the concurrent node
//! (`cairn_engine::node`), and its adapters — Apache Iggy's 0.11 binary protocol over TCP and
//! Iggy's HTTP API. It holds no durable state of its own: every request becomes a call on the
//! node's owners or a read of its published view.
//!
//! ```text
//! tcp (frames, login handshake, duplicate table) ─┐
//!                                                  ├─► command (table, session, permissions,
//! http (JSON, bearer tokens, status codes) ───────┘    handlers) ──► cairn_engine::node
//! ```
//!
//! The command layer and the binary protocol run on the `Env` seam (`Net` for the listener
//! and connections, `Clock` for timeouts, `Tasks` for connection tasks), never on tokio
//! directly, so the simulator runs this same code over a simulated network.
//!
//! - [`command`]: typed commands in, typed replies or a status out; the command table,
//!   sessions and logins, permissions, what an acknowledgement promises;
//! - [`tcp`]: the binary protocol's adapter (framing, connections, evictions, duplicates);
//! - [`http`]: the HTTP API in Iggy's shape and `/metrics` (on tokio, not the `Env` seam);
//! - [`tls`]: TLS for the listeners (rustls, sans-IO over any `ByteStream`), off by default;
//! - [`server`]: the context and the binary listener, their bounds and graceful shutdown;
//! - [`config`], [`serve`], [`process`]: `cairn serve`'s configuration, start and figures.
//! - [`check`]: `cairn check`'s report of every boot plan, applied to nothing.
#![deny(unsafe_code)]

pub mod check;
pub mod cluster;
pub mod command;
pub mod config;
pub mod http;
pub mod process;
pub mod serve;
pub mod server;
pub mod tcp;
pub mod tls;

pub use command::TopicDefaults;
pub use server::{Server, ServerHooks, ServerSettings};
pub use tcp::ServerLimits;

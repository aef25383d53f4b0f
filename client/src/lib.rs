//! cairn's client module (see ARCHITECTURE.md): Iggy's 0.11 binary protocol, client side,
//! over the [`cairn_engine::env`] seam, so the same client runs on real TCP (the `cairn`
//! command line, benches) and on the simulator's network and clock.
//!
//! - [`frame`]: sans-IO request headers (`docs/wire.md` §1.2, §3) and reply judgement
//!   (§1.3, §1.4, §4).
//! - [`connection`]: one connection, lockstep, bounded frames, deadlines.
//! - [`client`]: [`Client`], login/logout, the reconnect-and-replay rule (§2.4).
//! - [`api`]: typed calls returning the codec's response types.
//! - [`codes`]: Iggy error codes by name (§9).
//! - `cli` (feature `cli`): the client half of the `cairn` command line.
#![forbid(unsafe_code)]

pub mod api;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod codes;
pub mod connection;
pub mod error;
pub mod frame;

pub use api::{Outgoing, Polled};
pub use client::{Client, ClientConfig, Credentials, Session};
pub use error::{ClientError, ProtocolError};
pub use iggy_binary_protocol;

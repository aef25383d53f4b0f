//! cairn's engine: the formats, the partition log with its durability policies and boot
//! recovery, written against the [`env`] seam so the same code runs on real files and in the
//! deterministic simulator. See `ARCHITECTURE.md` at the workspace root for the map.
#![deny(unsafe_code)]

pub mod config;
pub mod env;
pub mod error;
pub mod format;
pub mod metadata;
pub mod metrics;
mod names;
pub mod node;
pub mod partition;
pub mod slots;
pub mod state;

//! cairn's server (see ARCHITECTURE.md).
pub mod config;

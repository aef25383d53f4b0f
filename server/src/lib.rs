//! cairn's server (see ARCHITECTURE.md).

//! cairn's client module (see ARCHITECTURE.md).

//! (empty until its issue lands: see ARCHITECTURE.md)

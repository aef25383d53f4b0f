//! Helpers for the workspace integration tests (see tests/tests/).

//! Directed scenarios (filled in next).

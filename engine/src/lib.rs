//! cairn's engine: the formats, the partition log with its durability policies and boot
//! recovery, written against the [`env`] seam so the same code runs on real files and in the
//! deterministic simulator. See `ARCHITECTURE.md` at the workspace root for the map.

#[cfg(feature = "canary")]
pub mod canary;
pub mod config;
pub mod env;
pub mod format;
pub mod partition;

/// Whether the deliberate bug `name` is active (always false without the `canary` feature).
#[inline]
pub(crate) fn canary(name: &str) -> bool {
    #[cfg(feature = "canary")]
    {
        canary::active(name)
    }
    #[cfg(not(feature = "canary"))]
    {
        let _ = name;
        false
    }
}

//! Files changed from outside the engine, and an environment over a disk a test chose.

use cairn_engine::env::{Disk, Env};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Appends `bytes` to the file at `path` (a torn or foreign tail); returns the file's
/// length before, where the added bytes start.
pub fn append_to_file(path: &Path, bytes: &[u8]) -> u64 {
    let mut content = std::fs::read(path).expect("read");
    let before = content.len() as u64;
    content.extend_from_slice(bytes);
    std::fs::write(path, content).expect("write");
    before
}

/// The real environment with its disk replaced by `disk` (a counting, crashing or faulty
/// wrapper over the real one).
pub fn env_on(disk: impl Disk + 'static) -> Env {
    let mut env = crate::real_env();
    env.disk = Arc::new(disk);
    env
}

/// A fresh temporary directory, removed when the returned guard drops, and the path `p`
/// inside it for a partition (not created).
pub fn scratch_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dir = tmp.path().join("p");
    (tmp, dir)
}

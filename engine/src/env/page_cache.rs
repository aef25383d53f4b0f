//! Whether boot may read what the page cache holds, or must drop it and read the device.
//!
//! After a failed writeback Linux keeps the new bytes cached and marks them clean. A process
//! of the same kernel that read them would take bytes that never reached the device for
//! valid ones, and build on them. So a reader that cannot rule that out drops the clean
//! cached pages of a file before reading it ([`DiskFile::evict_cache`]) and pays a read of the
//! device for each. It can be ruled out when the kernel booted since the last writer ran (its
//! cache began empty) or when the last writer exited cleanly having seen no I/O error
//! (`node::exit_record` decides which, at boot).

use super::{Disk, DiskFile, DiskLayer, FileLayer, OpenMode};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// What a boot may take from the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageCache {
    /// It may hold bytes an earlier process of this kernel wrote and the device never took:
    /// every survey read drops the cached pages first.
    Suspect,
    /// It holds what the device holds: survey reads take it as it is.
    Trusted,
}

impl PageCache {
    pub fn name(self) -> &'static str {
        match self {
            PageCache::Suspect => "suspect",
            PageCache::Trusted => "trusted",
        }
    }

    /// The disk a survey reads through: `disk` itself when the cache is suspect; when it is
    /// trusted, `disk` with [`DiskFile::evict_cache`] a no-op on files opened for reading
    /// (a write's read-back, which checks where the write landed, still reads the device).
    pub fn reading(self, disk: &Arc<dyn Disk>) -> Arc<dyn Disk> {
        match self {
            PageCache::Suspect => disk.clone(),
            PageCache::Trusted => Arc::new(TrustingDisk {
                inner: disk.clone(),
            }),
        }
    }
}

struct TrustingDisk {
    inner: Arc<dyn Disk>,
}

struct TrustingFile {
    inner: Box<dyn DiskFile>,
}

impl DiskLayer for TrustingDisk {
    fn inner(&self) -> &dyn Disk {
        self.inner.as_ref()
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        let inner = self.inner.open(path, mode)?;
        match mode {
            OpenMode::Read => Ok(Box::new(TrustingFile { inner })),
            _ => Ok(inner),
        }
    }
}

impl FileLayer for TrustingFile {
    fn inner(&self) -> &dyn DiskFile {
        self.inner.as_ref()
    }
    fn evict_cache(&self) -> io::Result<()> {
        Ok(())
    }
}

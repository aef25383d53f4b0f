//! Disk wrappers that change one or two calls: [`DiskLayer`] and [`FileLayer`] forward every
//! call to the disk (or file) beneath them by default, and whatever implements them is a
//! [`Disk`] (or [`DiskFile`]) through the blanket impls below. A wrapper names what it
//! wraps ([`DiskLayer::inner`]) and overrides only the calls it changes: a counting disk
//! overrides `open` and `sync_dir`, its files `sync_data`.
//!
//! Every call a wrapper does not override reaches the inner disk unchanged ([`Disk::take_io_time`]
//! included), so a layer never changes what it does not name. [`DiskFile::read_exact_at`]
//! stays the provided loop over `read_at`: a layer that changes `read_at` changes exact reads
//! with it. [`DiskFile::read_exact_owned`] reaches the inner file too (a real file reads a
//! window into uninitialised memory; the provided default zeroes it first), so a layer that
//! changes `read_at` overrides it with [`owned_through_read_at`].

use super::{DirEntry, Disk, DiskFile, OpenMode};
use std::io;
use std::io::IoSlice;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Wraps the disk one role writes through (recovery's apply, an open log, the metadata
/// plane): the simulator's disk hooks, none in production; typically in a [`DiskLayer`].
pub type DiskHook = fn(Arc<dyn Disk>) -> Arc<dyn Disk>;

/// A [`Disk`] that passes every call it does not override to [`DiskLayer::inner`].
pub trait DiskLayer: Send + Sync {
    /// The disk beneath this layer.
    fn inner(&self) -> &dyn Disk;

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        self.inner().open(path, mode)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner().create_dir_all(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.inner().read_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner().rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner().remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner().remove_dir_all(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner().sync_dir(path)
    }
    fn sync_all(&self, root: &Path) -> io::Result<()> {
        self.inner().sync_all(root)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.inner().exists(path)
    }
    fn boot_id(&self) -> io::Result<u128> {
        self.inner().boot_id()
    }
    fn take_io_time(&self) -> Duration {
        self.inner().take_io_time()
    }
}

impl<L: DiskLayer> Disk for L {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        DiskLayer::open(self, path, mode)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        DiskLayer::create_dir_all(self, path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        DiskLayer::read_dir(self, path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        DiskLayer::rename(self, from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        DiskLayer::remove_file(self, path)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        DiskLayer::remove_dir_all(self, path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        DiskLayer::sync_dir(self, path)
    }
    fn sync_all(&self, root: &Path) -> io::Result<()> {
        DiskLayer::sync_all(self, root)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        DiskLayer::exists(self, path)
    }
    fn boot_id(&self) -> io::Result<u128> {
        DiskLayer::boot_id(self)
    }
    fn take_io_time(&self) -> Duration {
        DiskLayer::take_io_time(self)
    }
}

/// A [`DiskFile`] that passes every call it does not override to [`FileLayer::inner`].
#[allow(clippy::len_without_is_empty)]
pub trait FileLayer: Send + Sync {
    /// The file beneath this layer.
    fn inner(&self) -> &dyn DiskFile;

    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.inner().read_at(buf, pos)
    }
    fn write_all_at(&self, bufs: &[IoSlice<'_>], pos: u64) -> io::Result<()> {
        self.inner().write_all_at(bufs, pos)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner().sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner().set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner().len()
    }
    fn preallocate(&self, len: u64) -> io::Result<bool> {
        self.inner().preallocate(len)
    }
    fn evict_cache(&self) -> io::Result<()> {
        self.inner().evict_cache()
    }
    /// The inner file's owned read. A layer that overrides `read_at` overrides this with
    /// [`owned_through_read_at`], or its windows bypass it.
    fn read_exact_owned(&self, len: usize, pos: u64) -> io::Result<bytes::BytesMut> {
        self.inner().read_exact_owned(len, pos)
    }
}

/// [`DiskFile::read_exact_owned`] through `file`'s own `read_at` (zeroed, then read): for a
/// layer that changes reads.
pub fn owned_through_read_at(
    file: &(impl DiskFile + ?Sized),
    len: usize,
    pos: u64,
) -> io::Result<bytes::BytesMut> {
    let mut buf = bytes::BytesMut::zeroed(len);
    file.read_exact_at(&mut buf, pos)?;
    Ok(buf)
}

impl<F: FileLayer> DiskFile for F {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        FileLayer::read_at(self, buf, pos)
    }
    fn write_all_at(&self, bufs: &[IoSlice<'_>], pos: u64) -> io::Result<()> {
        FileLayer::write_all_at(self, bufs, pos)
    }
    fn sync_data(&self) -> io::Result<()> {
        FileLayer::sync_data(self)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        FileLayer::set_len(self, len)
    }
    fn len(&self) -> io::Result<u64> {
        FileLayer::len(self)
    }
    fn preallocate(&self, len: u64) -> io::Result<bool> {
        FileLayer::preallocate(self, len)
    }
    fn evict_cache(&self) -> io::Result<()> {
        FileLayer::evict_cache(self)
    }
    fn read_exact_owned(&self, len: usize, pos: u64) -> io::Result<bytes::BytesMut> {
        FileLayer::read_exact_owned(self, len, pos)
    }
    // `read_exact_at` stays the provided loop over `read_at`, so a layer that changes
    // `read_at` changes exact reads too.
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file whose owned reads answer a marker and whose plain reads fail: which one a
    /// layer reached shows in the answer.
    struct Marked;

    impl DiskFile for Marked {
        fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<usize> {
            Err(io::Error::other("read_at reached"))
        }
        fn write_all_at(&self, _: &[IoSlice<'_>], _: u64) -> io::Result<()> {
            unreachable!()
        }
        fn sync_data(&self) -> io::Result<()> {
            unreachable!()
        }
        fn set_len(&self, _: u64) -> io::Result<()> {
            unreachable!()
        }
        fn len(&self) -> io::Result<u64> {
            unreachable!()
        }
        fn preallocate(&self, _: u64) -> io::Result<bool> {
            unreachable!()
        }
        fn evict_cache(&self) -> io::Result<()> {
            unreachable!()
        }
        fn read_exact_owned(&self, len: usize, _: u64) -> io::Result<bytes::BytesMut> {
            Ok(bytes::BytesMut::from(&vec![7u8; len][..]))
        }
    }

    struct Passing(Marked);
    impl FileLayer for Passing {
        fn inner(&self) -> &dyn DiskFile {
            &self.0
        }
    }

    struct ChangingReads(Marked);
    impl FileLayer for ChangingReads {
        fn inner(&self) -> &dyn DiskFile {
            &self.0
        }
        fn read_at(&self, buf: &mut [u8], _: u64) -> io::Result<usize> {
            buf.fill(1);
            Ok(buf.len())
        }
        fn read_exact_owned(&self, len: usize, pos: u64) -> io::Result<bytes::BytesMut> {
            owned_through_read_at(self, len, pos)
        }
    }

    #[test]
    fn a_layer_passes_owned_reads_to_the_file_beneath_unless_it_changes_reads() {
        // A counting layer must not turn a real file's uninitialised window read into a
        // zeroed one: it reaches the inner file's own owned read.
        let passed = DiskFile::read_exact_owned(&Passing(Marked), 3, 0).unwrap();
        assert_eq!(&passed[..], &[7, 7, 7]);
        // A layer that changes reads sees its windows too.
        let changed = DiskFile::read_exact_owned(&ChangingReads(Marked), 3, 0).unwrap();
        assert_eq!(&changed[..], &[1, 1, 1]);
    }
}

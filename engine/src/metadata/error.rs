//! The metadata plane's error: [`MetadataError`], what a write, sync, rename or listing of
//! the plane's files returns. Like the partition's `WriteError`, it tells a full device
//! ([`MetadataError::NoSpace`]: the metadata owner cuts the journal back and keeps serving;
//! a checkpoint tries again later) from any other failure ([`MetadataError::Io`]: the files'
//! state is unknown, the node stops). Damage the plane finds at boot is not an error but a
//! refusal ([`super::MetaRefusal`]); a file the device cannot read at boot is one too.

use crate::env::is_no_space;
use std::io;
use std::path::{Path, PathBuf};

/// Why the metadata plane failed. Each variant reads as the plane's messages always did:
/// `{op} {path}: {error}`, or the disk's own message where no file is named.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// The device is full (ENOSPC) doing `op` on `path`.
    #[error("{op} {}: {source}", .path.display())]
    NoSpace {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// Any other I/O error doing `op` on `path`.
    #[error("{op} {}: {source}", .path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// An I/O error where the plane names no file: listing the metadata directory or
    /// `streams/`, or a length read while planning or opening. Shown as the disk gave it.
    #[error(transparent)]
    Disk(io::Error),
}

impl MetadataError {
    /// Whether the device was full (the caller may go on; nothing the error touched counts).
    pub fn is_no_space(&self) -> bool {
        matches!(self, MetadataError::NoSpace { .. })
    }

    /// The I/O error underneath (its kind says ENOSPC, EIO, ...).
    pub fn io(&self) -> &io::Error {
        match self {
            MetadataError::NoSpace { source, .. }
            | MetadataError::Io { source, .. }
            | MetadataError::Disk(source) => source,
        }
    }
}

/// Maps an I/O error of `op` on `path` to a [`MetadataError`]: [`MetadataError::NoSpace`]
/// when the device is full, else [`MetadataError::Io`].
pub(crate) fn at<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> MetadataError + 'a {
    move |source| {
        let path = path.to_path_buf();
        match is_no_space(&source) {
            true => MetadataError::NoSpace { op, path, source },
            false => MetadataError::Io { op, path, source },
        }
    }
}

/// For callers that speak `io::Error` (`cairn check`): the same message, the same kind.
impl From<MetadataError> for io::Error {
    fn from(error: MetadataError) -> io::Error {
        match error {
            MetadataError::Disk(source) => source,
            other => io::Error::new(other.io().kind(), other),
        }
    }
}

//! One segment: a `.log` file of batch records and its `.index` file of sparse entries,
//! named by the segment's start offset, zero-padded to 20 digits.

use crate::env::DiskFile;
use crate::format::{
    verify_batch, verify_structure, BatchHeader, FormatError, IndexEntry, Layout, Limits,
    VerifiedBatch, BATCH_HEADER_LEN, FRAME_HEADER_LEN,
};
use bytes::Bytes;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

pub fn log_name(start_offset: u64) -> String {
    format!("{start_offset:020}.log")
}

pub fn index_name(start_offset: u64) -> String {
    format!("{start_offset:020}.index")
}

/// Parses `{20 digits}.log` / `{20 digits}.index`; returns the start offset and whether it is
/// the log (true) or the index (false).
pub fn parse_segment_name(name: &str) -> Option<(u64, bool)> {
    let (stem, is_log) = if let Some(stem) = name.strip_suffix(".log") {
        (stem, true)
    } else if let Some(stem) = name.strip_suffix(".index") {
        (stem, false)
    } else {
        return None;
    };
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok().map(|offset| (offset, is_log))
}

/// The open files of the active segment, checked out of the node's bounded table
/// ([`super::active_handles`]). A sealed segment's `.log` is read through the node's
/// [`super::resources::HandleCache`], its index lives in memory.
pub struct ActiveFiles {
    pub log: Arc<dyn DiskFile>,
    pub index: Box<dyn DiskFile>,
    /// The superblock's slot files (`superblock.a`, `.b`), opened when a record first needs
    /// one and closed with these files, so a record costs no open and close while they are
    /// open (4 descriptors per partition in the table, at most).
    slots: [OnceLock<Arc<dyn DiskFile>>; 2],
}

impl ActiveFiles {
    pub fn new(log: Arc<dyn DiskFile>, index: Box<dyn DiskFile>) -> ActiveFiles {
        ActiveFiles {
            log,
            index,
            slots: Default::default(),
        }
    }

    /// These files with `sealed`'s slot files, open already (a rotation carries them from
    /// the segment it seals to the new active one).
    pub fn with_slots_of(self, sealed: &ActiveFiles) -> ActiveFiles {
        ActiveFiles {
            slots: sealed.slots.clone(),
            ..self
        }
    }

    /// Slot file `slot`, opened with `open` the first time. A partition's checkouts come
    /// one at a time, so two opens never race; if they did, the first kept wins.
    pub fn slot(
        &self,
        slot: usize,
        open: impl FnOnce() -> io::Result<Box<dyn DiskFile>>,
    ) -> io::Result<Arc<dyn DiskFile>> {
        if let Some(file) = self.slots[slot].get() {
            return Ok(file.clone());
        }
        let opened: Arc<dyn DiskFile> = Arc::from(open()?);
        Ok(self.slots[slot].get_or_init(|| opened).clone())
    }
}

/// A live segment of an open partition.
pub struct Segment {
    pub start_offset: u64,
    /// The offset after the last message written to this segment.
    pub end_offset: u64,
    pub log_path: PathBuf,
    pub index_path: PathBuf,
    /// Bytes of whole batches written to the `.log` (the next write position).
    pub log_len: u64,
    /// The in-memory copy of the `.index` file, in file order.
    pub index: Vec<IndexEntry>,
    /// Newest batch timestamp in this segment (0 when empty).
    pub max_timestamp: u64,
    pub sealed: bool,
}

impl Segment {
    pub fn is_empty(&self) -> bool {
        self.log_len == 0
    }

    /// Where to start walking to find `offset`: the last index entry at or below it, or the
    /// segment start when the offset is below the indexed range. Returns the position and the
    /// base offset the batch there must carry.
    pub fn seek_offset(&self, offset: u64) -> (u64, u64) {
        self.walk_start(self.index.partition_point(|e| e.offset <= offset))
    }

    /// Where to start walking to find the first batch with timestamp at or above `timestamp`.
    pub fn seek_timestamp(&self, timestamp: u64) -> (u64, u64) {
        self.walk_start(self.index.partition_point(|e| e.timestamp < timestamp))
    }

    /// The entry before the first `entries_before` index entries, as (position, offset).
    fn walk_start(&self, entries_before: usize) -> (u64, u64) {
        match entries_before.checked_sub(1) {
            Some(i) => (self.index[i].position, self.index[i].offset),
            None => (0, self.start_offset),
        }
    }
}

/// Why a batch could not be read from a log file at a position.
#[derive(Debug, thiserror::Error)]
pub enum ReadBatchError {
    #[error("{available} bytes remain, a batch needs {needed}")]
    Truncated { needed: u64, available: u64 },
    #[error("{0}")]
    Format(#[from] FormatError),
    #[error("base_offset is {found}, expected {expected}")]
    OffsetMismatch { expected: u64, found: u64 },
    #[error("partition_id is {found}, expected {expected}")]
    PartitionMismatch { expected: u64, found: u64 },
    /// The device failed to read the sector at `sector` (the first failing one).
    #[error("the sector at {sector} cannot be read: {error}")]
    Unreadable { sector: u64, error: io::Error },
    /// The sealed segment's file could not be opened for the read.
    #[error("the file cannot be opened: {error}")]
    Unopenable { error: io::Error },
}

/// How much of each batch a read checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Every checksum (recovery always; polls when `validate_checksum` is on).
    Full,
    /// Lengths, frames, counts and the batch checksum over the stored message checksums,
    /// but no re-hash of message bodies (polls when `validate_checksum` is off): enough to
    /// slice and serve without reading past a frame.
    Structure,
}

/// Bytes a reader fetches at once at most, so a walk over many small batches costs few
/// syscalls.
pub const READ_WINDOW_BYTES: usize = 1024 * 1024;
/// A reader's first window: a poll that wants one batch reads this much, not a whole
/// window; each later window doubles, up to [`READ_WINDOW_BYTES`], so a long walk soon reads
/// in full windows.
pub const FIRST_READ_WINDOW_BYTES: usize = 64 * 1024;
const _: () = assert!(FIRST_READ_WINDOW_BYTES <= READ_WINDOW_BYTES);
/// The unit in which a failed read is narrowed down to the sector that fails.
pub const SECTOR_BYTES: u64 = 512;
const _: () = assert!(
    SECTOR_BYTES.is_power_of_two(),
    "a failed read is narrowed down sector by sector from an aligned start"
);

/// A read window over a log file. Batches it returns share the window's buffer.
pub struct LogReader<'a> {
    file: &'a dyn DiskFile,
    /// Bytes of the file that may be read (the known data end).
    end: u64,
    window: Bytes,
    window_start: u64,
    /// The size of the next window read (doubling from [`FIRST_READ_WINDOW_BYTES`]).
    next_window: usize,
}

impl<'a> LogReader<'a> {
    pub fn new(file: &'a dyn DiskFile, end: u64) -> Self {
        LogReader {
            file,
            end,
            window: Bytes::new(),
            window_start: 0,
            next_window: FIRST_READ_WINDOW_BYTES,
        }
    }

    /// The bytes `[position, position + len)`, which the caller checked lie below `end`.
    /// A failed window read is retried for exactly these bytes, so a bad sector is blamed
    /// only on the batches it lies in; when that fails too, the error names the sector.
    fn get(&mut self, position: u64, len: usize) -> Result<Bytes, ReadBatchError> {
        assert!(
            position + len as u64 <= self.end,
            "reads stay below the data end"
        );
        let window_end = self.window_start + self.window.len() as u64;
        if position < self.window_start || position + len as u64 > window_end {
            let want = len
                .max(self.next_window)
                .min((self.end - position) as usize);
            self.next_window = (self.next_window * 2).min(READ_WINDOW_BYTES);
            let read = self
                .read(position, want)
                .or_else(|_| self.read(position, len));
            self.window = read.map_err(|error| {
                if error.kind() == io::ErrorKind::UnexpectedEof {
                    // The file ends before the bytes the log holds: missing, not unreadable.
                    let file_len = self.file.len().unwrap_or(position);
                    return ReadBatchError::Truncated {
                        needed: len as u64,
                        available: file_len.saturating_sub(position),
                    };
                }
                ReadBatchError::Unreadable {
                    sector: self.first_unreadable_sector(position, len),
                    error,
                }
            })?;
            self.window_start = position;
        }
        let at = (position - self.window_start) as usize;
        Ok(self.window.slice(at..at + len))
    }

    fn read(&self, position: u64, len: usize) -> io::Result<Bytes> {
        // Into uninitialised memory: a 1 MiB window is not zeroed before it is read.
        Ok(self.file.read_exact_owned(len, position)?.freeze())
    }

    /// The first sector of `[position, position + len)` that fails to read (or `position`
    /// when each sector reads alone: the failure was transient).
    fn first_unreadable_sector(&self, position: u64, len: usize) -> u64 {
        let end = position + len as u64;
        let mut sector = position - position % SECTOR_BYTES;
        while sector < end {
            let from = sector.max(position);
            let to = (sector + SECTOR_BYTES).min(end);
            if self.read(from, (to - from) as usize).is_err() {
                return sector;
            }
            sector += SECTOR_BYTES;
        }
        position
    }

    /// Reads the header of the batch at `position` and checks its length and offsets are
    /// plausible for any stored batch (the format's ceilings, not admission limits).
    pub fn header_at(&mut self, position: u64) -> Result<BatchHeader, ReadBatchError> {
        let available = self.end.saturating_sub(position);
        if available < BATCH_HEADER_LEN as u64 {
            return Err(ReadBatchError::Truncated {
                needed: BATCH_HEADER_LEN as u64,
                available,
            });
        }
        let header = BatchHeader::decode(&self.get(position, BATCH_HEADER_LEN)?)?;
        header.check_offsets()?;
        let min = (BATCH_HEADER_LEN + FRAME_HEADER_LEN) as u64;
        if header.batch_length < min {
            return Err(FormatError::TooShort {
                what: "one message",
                needed: min as usize,
                found: header.batch_length as usize,
            }
            .into());
        }
        if header.batch_length > Limits::CEILING.max_batch_bytes {
            return Err(FormatError::BatchTooLarge {
                length: header.batch_length,
                limit: Limits::CEILING.max_batch_bytes,
            }
            .into());
        }
        if header.batch_length > available {
            return Err(ReadBatchError::Truncated {
                needed: header.batch_length,
                available,
            });
        }
        Ok(header)
    }

    /// The header of the batch at `position` ([`Self::header_at`]), checked to continue the
    /// offset chain at `expected_offset` in partition `partition_id`: enough to step over a
    /// batch a read does not serve (its bytes are never read or verified).
    pub fn chained_header_at(
        &mut self,
        position: u64,
        expected_offset: u64,
        partition_id: u64,
    ) -> Result<BatchHeader, ReadBatchError> {
        let header = self.header_at(position)?;
        chained(&header, expected_offset, partition_id)?;
        Ok(header)
    }

    /// The bytes of the batch `header` describes at `position`, not verified: only a
    /// canary's bent read serves them (`ReadHooks::skip_unverified`).
    pub fn unverified_at(
        &mut self,
        position: u64,
        header: &BatchHeader,
    ) -> Result<Bytes, ReadBatchError> {
        self.get(position, header.batch_length as usize)
    }

    /// The whole batch at `position`, verified to `check`, and checked to carry
    /// `expected_offset` and `partition_id`.
    pub fn batch_at(
        &mut self,
        position: u64,
        expected_offset: u64,
        partition_id: u64,
        check: Check,
    ) -> Result<(VerifiedBatch, Bytes), ReadBatchError> {
        let header = self.header_at(position)?;
        let bytes = self.get(position, header.batch_length as usize)?;
        let verified = match check {
            Check::Full => verify_batch(&bytes, &Limits::CEILING, Layout::Stored)?,
            Check::Structure => verify_structure(&bytes, &Limits::CEILING, Layout::Stored)?,
        };
        chained(&header, expected_offset, partition_id)?;
        Ok((verified, bytes))
    }
}

/// The batch `header` describes continues the offset chain at `expected_offset`, in
/// partition `partition_id`.
fn chained(
    header: &BatchHeader,
    expected_offset: u64,
    partition_id: u64,
) -> Result<(), ReadBatchError> {
    if header.base_offset != expected_offset {
        return Err(ReadBatchError::OffsetMismatch {
            expected: expected_offset,
            found: header.base_offset,
        });
    }
    if header.partition_id != partition_id {
        return Err(ReadBatchError::PartitionMismatch {
            expected: partition_id,
            found: header.partition_id,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IoSlice;
    use std::sync::Mutex;

    /// A file of `len` zero bytes that records the length of every read.
    struct Reads {
        len: u64,
        reads: Mutex<Vec<usize>>,
    }
    impl DiskFile for Reads {
        fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
            let n = buf.len().min(self.len.saturating_sub(pos) as usize);
            self.reads.lock().unwrap().push(n);
            buf[..n].fill(0);
            Ok(n)
        }
        fn write_all_at(&self, _: &[IoSlice<'_>], _: u64) -> io::Result<()> {
            unreachable!("a reader never writes")
        }
        fn sync_data(&self) -> io::Result<()> {
            Ok(())
        }
        fn len(&self) -> io::Result<u64> {
            Ok(self.len)
        }
        fn set_len(&self, _: u64) -> io::Result<()> {
            unreachable!("a reader never cuts")
        }
        fn preallocate(&self, _: u64) -> io::Result<bool> {
            Ok(false)
        }
        fn evict_cache(&self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A read for one batch fetches the first window, not a whole one; a walk's windows
    /// double up to the full window; a batch larger than the window is read whole; nothing
    /// is read past the data end.
    #[test]
    fn windows_start_small_and_double() {
        let file = Reads {
            len: 8 << 20,
            reads: Mutex::new(Vec::new()),
        };
        let mut reader = LogReader::new(&file, 4 << 20);
        reader.get(0, 256).unwrap();
        reader.get(1000, 256).unwrap();
        assert_eq!(*file.reads.lock().unwrap(), [FIRST_READ_WINDOW_BYTES]);
        let mut position = 0u64;
        while position + 4096 <= 3 << 20 {
            reader.get(position, 4096).unwrap();
            position += 4096;
        }
        let reads = file.reads.lock().unwrap().clone();
        assert_eq!(
            reads[..5],
            [64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20]
        );
        assert!(reads[5..].iter().all(|&n| n == READ_WINDOW_BYTES));
        reader.get(0, 2 << 20).unwrap();
        assert_eq!(file.reads.lock().unwrap().last(), Some(&(2 << 20)));
        reader.get((4 << 20) - 100, 100).unwrap();
        assert_eq!(file.reads.lock().unwrap().last(), Some(&100));
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(log_name(16_000_000), "00000000000016000000.log");
        assert_eq!(
            parse_segment_name("00000000000016000000.log"),
            Some((16_000_000, true))
        );
        assert_eq!(
            parse_segment_name("00000000000016000000.index"),
            Some((16_000_000, false))
        );
        assert_eq!(parse_segment_name("0000000000001600000.log"), None);
        assert_eq!(parse_segment_name("0000000000001600000x.log"), None);
        assert_eq!(parse_segment_name("superblock.a"), None);
    }
}

//! One segment: a `.log` file of batch records and its `.index` file of sparse entries,
//! named by the segment's start offset, zero-padded to 20 digits.

use crate::env::DiskFile;
use crate::format::{
    verify_batch, BatchHeader, FormatError, IndexEntry, Layout, Limits, VerifiedBatch,
    BATCH_HEADER_LEN, FRAME_HEADER_LEN,
};
use std::io;
use std::path::PathBuf;

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

/// A live segment of an open partition.
pub struct Segment {
    pub start_offset: u64,
    /// The offset after the last message written to this segment.
    pub end_offset: u64,
    pub log_path: PathBuf,
    pub index_path: PathBuf,
    pub log: Box<dyn DiskFile>,
    pub index_file: Box<dyn DiskFile>,
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
    #[error("read failed: {0}")]
    Io(#[from] io::Error),
}

/// A read window over a log file, so a walk over many small batches costs few syscalls.
pub struct LogReader<'a> {
    file: &'a dyn DiskFile,
    /// Bytes of the file that may be read (the known data end).
    end: u64,
    window: Vec<u8>,
    window_start: u64,
}

const READ_WINDOW: usize = 1024 * 1024;

impl<'a> LogReader<'a> {
    pub fn new(file: &'a dyn DiskFile, end: u64) -> Self {
        LogReader {
            file,
            end,
            window: Vec::new(),
            window_start: 0,
        }
    }

    /// The bytes `[position, position + len)`; the caller checked they lie below `end`.
    fn get(&mut self, position: u64, len: usize) -> io::Result<&[u8]> {
        debug_assert!(position + len as u64 <= self.end);
        let window_end = self.window_start + self.window.len() as u64;
        if position < self.window_start || position + len as u64 > window_end {
            let want = len.max(READ_WINDOW).min((self.end - position) as usize);
            self.window.resize(want, 0);
            self.file.read_exact_at(&mut self.window, position)?;
            self.window_start = position;
        }
        let at = (position - self.window_start) as usize;
        Ok(&self.window[at..at + len])
    }

    /// Reads the header of the batch at `position` and checks its length is plausible.
    pub fn header_at(
        &mut self,
        position: u64,
        limits: &Limits,
    ) -> Result<BatchHeader, ReadBatchError> {
        let available = self.end.saturating_sub(position);
        if available < BATCH_HEADER_LEN as u64 {
            return Err(ReadBatchError::Truncated {
                needed: BATCH_HEADER_LEN as u64,
                available,
            });
        }
        let header = BatchHeader::decode(self.get(position, BATCH_HEADER_LEN)?)?;
        let min = (BATCH_HEADER_LEN + FRAME_HEADER_LEN) as u64;
        if header.batch_length < min {
            return Err(FormatError::TooShort {
                what: "one message",
                needed: min as usize,
                found: header.batch_length as usize,
            }
            .into());
        }
        if header.batch_length > limits.max_batch_bytes {
            return Err(FormatError::BatchTooLarge {
                length: header.batch_length,
                limit: limits.max_batch_bytes,
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

    /// The whole batch at `position`, fully verified when `verify` is set, and checked to
    /// carry `expected_offset` and `partition_id`.
    pub fn batch_at(
        &mut self,
        position: u64,
        expected_offset: u64,
        partition_id: u64,
        limits: &Limits,
        verify: bool,
    ) -> Result<(VerifiedBatch, &[u8]), ReadBatchError> {
        let header = self.header_at(position, limits)?;
        let bytes = self.get(position, header.batch_length as usize)?;
        let verified = if verify {
            verify_batch(bytes, limits, Layout::Stored)?
        } else {
            VerifiedBatch {
                header,
                payload_bytes: 0,
            }
        };
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
        Ok((verified, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

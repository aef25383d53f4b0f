//! The on-disk and on-wire formats, as pure functions over bytes (no I/O here).
//!
//! - [`batch`]: the batch record `[256-byte header][frames]`, frame =
//!   `[48-byte frame header][payload][user headers]`, XxHash3-64 checksums.
//! - [`index`]: the 24-byte sparse index entry.
//!
//! All fields are little-endian. The same batch bytes serve the send body, the segment
//! record and the poll reply.

pub mod batch;
pub mod index;

pub use batch::{
    admit_batch, batch_checksum, message_checksum, slice_batch, stamp_batch, verify_batch,
    verify_structure, BatchBuilder, BatchHeader, DecodedMessage, FrameHeader, Layout, Limits,
    MessageIter, VerifiedBatch, BATCH_HEADER_LEN, FRAME_HEADER_LEN,
};
pub use index::{IndexEntry, INDEX_ENTRY_LEN};

/// Why bytes are not a valid batch. Byte offsets are relative to the start of the batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("batch is {found} bytes, too short for {what} (needs {needed})")]
    TooShort {
        what: &'static str,
        needed: usize,
        found: usize,
    },
    #[error("{what} reserved byte at batch offset {offset} is {found:#04x}, expected 0x00")]
    ReservedNotZero {
        what: &'static str,
        offset: usize,
        found: u8,
    },
    #[error("batch_length is {declared}, but the batch holds {actual} bytes")]
    BatchLengthMismatch { declared: u64, actual: u64 },
    #[error("message_count is {declared}, but the frames hold {found} messages")]
    MessageCountMismatch { declared: u32, found: u64 },
    #[error("frame {index} at batch offset {frame_start} ends at {frame_end}, past batch_length {batch_length}")]
    FrameOverrun {
        index: u32,
        frame_start: u64,
        frame_end: u64,
        batch_length: u64,
    },
    #[error("message {index} checksum: stored {stored:#018x}, computed {computed:#018x}")]
    MessageChecksum {
        index: u32,
        stored: u64,
        computed: u64,
    },
    #[error("batch checksum: stored {stored:#018x}, computed {computed:#018x}")]
    BatchChecksum { stored: u64, computed: u64 },
    #[error("message {index} offset_delta is {found}, expected {expected}")]
    OffsetDelta {
        index: u32,
        expected: u32,
        found: u32,
    },
    #[error("batch holds no messages")]
    Empty,
    #[error("batch_length {length} exceeds the limit {limit}")]
    BatchTooLarge { length: u64, limit: u64 },
    #[error("message_count {count} exceeds the limit {limit}")]
    TooManyMessages { count: u32, limit: u32 },
    #[error("message {index} payload is {length} bytes, over the limit {limit}")]
    PayloadTooLarge { index: u32, length: u32, limit: u32 },
    #[error("message {index} user headers are {length} bytes, over the limit {limit}")]
    UserHeadersTooLarge { index: u32, length: u32, limit: u32 },
    #[error("base_offset {base_offset} plus {message_count} overflows a u64 offset")]
    OffsetOverflow {
        base_offset: u64,
        message_count: u32,
    },
}

#[inline]
pub(crate) fn get_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

#[inline]
pub(crate) fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

#[inline]
pub(crate) fn get_u128(bytes: &[u8], at: usize) -> u128 {
    u128::from_le_bytes(bytes[at..at + 16].try_into().expect("16 bytes"))
}

#[inline]
pub(crate) fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

#[inline]
pub(crate) fn put_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

#[cfg(test)]
mod golden;

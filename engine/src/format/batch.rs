//! The batch record.
//!
//! ```text
//! batch header (256 B): 0 partition_id u64 | 8 base_offset u64 | 16 base_timestamp u64 |
//!   24 origin_timestamp u64 | 32 batch_length u64 | 40 batch_checksum u64 |
//!   48 message_count u32 | 52..256 reserved, zero
//! frame header (48 B):  0 checksum u64 | 8 id u128 | 24 offset_delta u32 |
//!   28 timestamp_delta u32 | 32 user_headers_length u32 | 36 payload_length u32 |
//!   40..48 reserved, zero
//! frame = [frame header][payload][user headers]
//! ```
//!
//! Message checksum: XxHash3-64 of frame bytes 8..48, then payload, then user headers (which
//! are contiguous, so it is one hash of `frame[8..]`). Batch checksum: XxHash3-64 of
//! partition_id, base_offset, base_timestamp, origin_timestamp, batch_length (u64 each),
//! message_count (u32), then every message checksum in order.

use super::{get_u128, get_u32, get_u64, put_u32, put_u64, FormatError};
use bytes::{BufMut, BytesMut};
use std::ops::Range;
use xxhash_rust::xxh3::xxh3_64;

pub const BATCH_HEADER_LEN: usize = 256;
pub const FRAME_HEADER_LEN: usize = 48;

const BATCH_RESERVED: Range<usize> = 52..BATCH_HEADER_LEN;
const FRAME_RESERVED: Range<usize> = 40..FRAME_HEADER_LEN;
const BATCH_CHECKSUM_AT: usize = 40;
/// Bytes of header fields covered by the batch checksum (five u64 and one u32).
const BATCH_CHECKSUM_FIELDS_LEN: usize = 44;

// The layout of the module doc, pinned: a change here is a change of the format on disk.
const _: () = assert!(BATCH_HEADER_LEN == 256 && FRAME_HEADER_LEN == 48);
const _: () = assert!(
    BATCH_CHECKSUM_AT == 5 * 8 && BATCH_RESERVED.start == 6 * 8 + 4,
    "five u64, the checksum, then message_count (u32) before the reserved bytes"
);
const _: () = assert!(
    BATCH_CHECKSUM_FIELDS_LEN == 5 * 8 + 4,
    "five u64 and one u32"
);
const _: () = assert!(BATCH_RESERVED.end == BATCH_HEADER_LEN);
const _: () = assert!(FRAME_RESERVED.start == 40 && FRAME_RESERVED.end == FRAME_HEADER_LEN);

/// Upper bounds on what one batch may hold. Every decode checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_batch_bytes: u64,
    pub max_messages_per_batch: u32,
    pub max_payload_bytes: u32,
    pub max_user_headers_bytes: u32,
}

impl Limits {
    /// The hard ceiling of the format in this server: no batch is ever larger.
    pub const MAX_BATCH_BYTES: u64 = 64 * 1024 * 1024;

    /// What any stored batch satisfies, whatever the admission limits were when it was
    /// written: recovery and disk reads verify against these, so lowering an admission limit
    /// in the configuration never makes stored data look corrupt.
    pub const CEILING: Limits = Limits {
        max_batch_bytes: Self::MAX_BATCH_BYTES,
        max_messages_per_batch: ((Self::MAX_BATCH_BYTES - BATCH_HEADER_LEN as u64)
            / FRAME_HEADER_LEN as u64) as u32,
        max_payload_bytes: Self::MAX_BATCH_BYTES as u32,
        max_user_headers_bytes: Self::MAX_BATCH_BYTES as u32,
    };
}

// The ceiling's bounds are the batch size cast to u32 without loss, and a batch of the
// most messages (each a bare frame header) still fits in the largest batch.
const _: () = assert!(Limits::MAX_BATCH_BYTES <= u32::MAX as u64);
const _: () = assert!(Limits::CEILING.max_messages_per_batch > 0);
const _: () = assert!(
    BATCH_HEADER_LEN as u64
        + Limits::CEILING.max_messages_per_batch as u64 * FRAME_HEADER_LEN as u64
        <= Limits::MAX_BATCH_BYTES
);

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_batch_bytes: Self::MAX_BATCH_BYTES,
            max_messages_per_batch: 100_000,
            max_payload_bytes: 16 * 1024 * 1024,
            max_user_headers_bytes: 64 * 1024,
        }
    }
}

/// The 256-byte batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchHeader {
    pub partition_id: u64,
    pub base_offset: u64,
    pub base_timestamp: u64,
    pub origin_timestamp: u64,
    pub batch_length: u64,
    pub batch_checksum: u64,
    pub message_count: u32,
}

impl BatchHeader {
    /// Decodes the header at the start of `bytes`; rejects non-zero reserved bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        if bytes.len() < BATCH_HEADER_LEN {
            return Err(FormatError::TooShort {
                what: "the batch header",
                needed: BATCH_HEADER_LEN,
                found: bytes.len(),
            });
        }
        if let Some(at) = bytes[BATCH_RESERVED].iter().position(|&b| b != 0) {
            let offset = BATCH_RESERVED.start + at;
            return Err(FormatError::ReservedNotZero {
                what: "batch header",
                offset,
                found: bytes[offset],
            });
        }
        Ok(BatchHeader {
            partition_id: get_u64(bytes, 0),
            base_offset: get_u64(bytes, 8),
            base_timestamp: get_u64(bytes, 16),
            origin_timestamp: get_u64(bytes, 24),
            batch_length: get_u64(bytes, 32),
            batch_checksum: get_u64(bytes, BATCH_CHECKSUM_AT),
            message_count: get_u32(bytes, 48),
        })
    }

    /// Writes all 256 bytes (reserved bytes zeroed) to the start of `out`.
    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= BATCH_HEADER_LEN);
        put_u64(out, 0, self.partition_id);
        put_u64(out, 8, self.base_offset);
        put_u64(out, 16, self.base_timestamp);
        put_u64(out, 24, self.origin_timestamp);
        put_u64(out, 32, self.batch_length);
        put_u64(out, BATCH_CHECKSUM_AT, self.batch_checksum);
        put_u32(out, 48, self.message_count);
        out[BATCH_RESERVED].fill(0);
    }

    /// The offset one past this batch's last message (stored layout: deltas 0..count), or
    /// `None` when it would not fit a `u64`.
    pub fn checked_next_offset(&self) -> Option<u64> {
        self.base_offset.checked_add(u64::from(self.message_count))
    }

    /// [`BatchHeader::checked_next_offset`] of a header that verification or
    /// [`BatchHeader::check_offsets`] accepted.
    pub fn next_offset(&self) -> u64 {
        self.checked_next_offset()
            .expect("a verified header's offsets fit a u64")
    }

    /// Rejects a header whose offsets overflow a `u64` (bytes from disk may be anything).
    pub fn check_offsets(&self) -> Result<(), FormatError> {
        match self.checked_next_offset() {
            Some(_) => Ok(()),
            None => Err(FormatError::OffsetOverflow {
                base_offset: self.base_offset,
                message_count: self.message_count,
            }),
        }
    }

    fn checksum_fields(&self) -> [u8; BATCH_CHECKSUM_FIELDS_LEN] {
        let mut fields = [0u8; BATCH_CHECKSUM_FIELDS_LEN];
        put_u64(&mut fields, 0, self.partition_id);
        put_u64(&mut fields, 8, self.base_offset);
        put_u64(&mut fields, 16, self.base_timestamp);
        put_u64(&mut fields, 24, self.origin_timestamp);
        put_u64(&mut fields, 32, self.batch_length);
        put_u32(&mut fields, 40, self.message_count);
        fields
    }
}

/// The 48-byte frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameHeader {
    pub checksum: u64,
    pub id: u128,
    pub offset_delta: u32,
    pub timestamp_delta: u32,
    pub user_headers_length: u32,
    pub payload_length: u32,
}

impl FrameHeader {
    /// Decodes a frame header from the first 48 bytes of `bytes`. `batch_offset` is where the
    /// frame starts inside its batch, for error reports.
    pub fn decode(bytes: &[u8], batch_offset: usize) -> Result<Self, FormatError> {
        debug_assert!(bytes.len() >= FRAME_HEADER_LEN);
        if let Some(at) = bytes[FRAME_RESERVED].iter().position(|&b| b != 0) {
            let within = FRAME_RESERVED.start + at;
            return Err(FormatError::ReservedNotZero {
                what: "frame header",
                offset: batch_offset + within,
                found: bytes[within],
            });
        }
        Ok(FrameHeader {
            checksum: get_u64(bytes, 0),
            id: get_u128(bytes, 8),
            offset_delta: get_u32(bytes, 24),
            timestamp_delta: get_u32(bytes, 28),
            user_headers_length: get_u32(bytes, 32),
            payload_length: get_u32(bytes, 36),
        })
    }

    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= FRAME_HEADER_LEN);
        put_u64(out, 0, self.checksum);
        out[8..24].copy_from_slice(&self.id.to_le_bytes());
        put_u32(out, 24, self.offset_delta);
        put_u32(out, 28, self.timestamp_delta);
        put_u32(out, 32, self.user_headers_length);
        put_u32(out, 36, self.payload_length);
        out[FRAME_RESERVED].fill(0);
    }

    /// Bytes of the whole frame: header, payload and user headers.
    pub fn frame_len(&self) -> u64 {
        FRAME_HEADER_LEN as u64
            + u64::from(self.payload_length)
            + u64::from(self.user_headers_length)
    }
}

/// The message checksum of one encoded frame (header, payload, user headers).
pub fn message_checksum(frame: &[u8]) -> u64 {
    xxh3_64(&frame[8..])
}

/// The batch checksum over the header's fields and the message checksums in order.
pub fn batch_checksum(header: &BatchHeader, message_checksums: impl Iterator<Item = u64>) -> u64 {
    let mut input =
        Vec::with_capacity(BATCH_CHECKSUM_FIELDS_LEN + 8 * header.message_count as usize);
    input.extend_from_slice(&header.checksum_fields());
    for checksum in message_checksums {
        input.extend_from_slice(&checksum.to_le_bytes());
    }
    xxh3_64(&input)
}

/// Which offset deltas a batch may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// As sent and as stored: message `i` has `offset_delta == i`.
    Stored,
    /// A poll reply sliced from a stored batch: deltas strictly increasing.
    Sliced,
}

/// The result of a successful [`verify_batch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifiedBatch {
    pub header: BatchHeader,
    /// Bytes of payload and user headers over all messages.
    pub payload_bytes: u64,
}

/// How much of a batch [`verify_batch`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Depth {
    /// Everything, re-hashing every message.
    Full,
    /// Everything but the message hashes: the batch checksum is checked over the message
    /// checksums the frames store.
    Structure,
}

/// Fully verifies that `bytes` is exactly one batch: header, reserved bytes, lengths,
/// limits, every frame, every message checksum, the count and the batch checksum.
pub fn verify_batch(
    bytes: &[u8],
    limits: &Limits,
    layout: Layout,
) -> Result<VerifiedBatch, FormatError> {
    verify_collecting(bytes, limits, layout, Depth::Full, &mut Vec::new())
}

/// Verifies everything [`verify_batch`] does except re-hashing message bodies: enough to
/// walk, slice and serve the batch without reading past any frame (what a poll does when
/// `validate_checksum` is off), at the cost of reading each frame header only.
pub fn verify_structure(
    bytes: &[u8],
    limits: &Limits,
    layout: Layout,
) -> Result<VerifiedBatch, FormatError> {
    verify_collecting(bytes, limits, layout, Depth::Structure, &mut Vec::new())
}

/// Admission in one pass: verifies a producer batch exactly as [`verify_batch`] does, then
/// stamps `partition_id`, `base_offset` and `base_timestamp` and recomputes the batch
/// checksum from the message checksums the verification already computed.
pub fn admit_batch(
    bytes: &mut [u8],
    limits: &Limits,
    partition_id: u64,
    base_offset: u64,
    base_timestamp: u64,
) -> Result<BatchHeader, FormatError> {
    let mut checksums = Vec::new();
    let mut header =
        verify_collecting(bytes, limits, Layout::Stored, Depth::Full, &mut checksums)?.header;
    header.partition_id = partition_id;
    header.base_offset = base_offset;
    header.base_timestamp = base_timestamp;
    header.batch_checksum = batch_checksum(&header, checksums.iter().copied());
    header.encode(bytes);
    Ok(header)
}

fn verify_collecting(
    bytes: &[u8],
    limits: &Limits,
    layout: Layout,
    depth: Depth,
    checksums: &mut Vec<u64>,
) -> Result<VerifiedBatch, FormatError> {
    let header = BatchHeader::decode(bytes)?;
    header.check_offsets()?;
    if header.batch_length != bytes.len() as u64 {
        return Err(FormatError::BatchLengthMismatch {
            declared: header.batch_length,
            actual: bytes.len() as u64,
        });
    }
    if header.batch_length > limits.max_batch_bytes {
        return Err(FormatError::BatchTooLarge {
            length: header.batch_length,
            limit: limits.max_batch_bytes,
        });
    }
    if header.message_count > limits.max_messages_per_batch {
        return Err(FormatError::TooManyMessages {
            count: header.message_count,
            limit: limits.max_messages_per_batch,
        });
    }
    checksums.clear();
    checksums.reserve(header.message_count as usize);
    let mut position = BATCH_HEADER_LEN;
    let mut payload_bytes = 0u64;
    let mut previous_delta: Option<u32> = None;
    while position < bytes.len() {
        let index = checksums.len() as u32;
        if index >= header.message_count {
            // More frames than declared: count what is there for the report.
            let found = count_frames(bytes, position)
                .map_or(u64::from(index) + 1, |n| u64::from(index) + n);
            return Err(FormatError::MessageCountMismatch {
                declared: header.message_count,
                found,
            });
        }
        let frame_start = position as u64;
        if bytes.len() - position < FRAME_HEADER_LEN {
            return Err(FormatError::FrameOverrun {
                index,
                frame_start,
                frame_end: frame_start + FRAME_HEADER_LEN as u64,
                batch_length: header.batch_length,
            });
        }
        let frame = FrameHeader::decode(&bytes[position..], position)?;
        if frame.payload_length > limits.max_payload_bytes {
            return Err(FormatError::PayloadTooLarge {
                index,
                length: frame.payload_length,
                limit: limits.max_payload_bytes,
            });
        }
        if frame.user_headers_length > limits.max_user_headers_bytes {
            return Err(FormatError::UserHeadersTooLarge {
                index,
                length: frame.user_headers_length,
                limit: limits.max_user_headers_bytes,
            });
        }
        let frame_end = frame_start + frame.frame_len();
        if frame_end > header.batch_length {
            return Err(FormatError::FrameOverrun {
                index,
                frame_start,
                frame_end,
                batch_length: header.batch_length,
            });
        }
        let frame_end = frame_end as usize;
        if depth == Depth::Full {
            let computed = message_checksum(&bytes[position..frame_end]);
            if computed != frame.checksum {
                return Err(FormatError::MessageChecksum {
                    index,
                    stored: frame.checksum,
                    computed,
                });
            }
        }
        match layout {
            Layout::Stored if frame.offset_delta != index => {
                return Err(FormatError::OffsetDelta {
                    index,
                    expected: index,
                    found: frame.offset_delta,
                })
            }
            Layout::Sliced => {
                if let Some(previous) = previous_delta {
                    if frame.offset_delta <= previous {
                        return Err(FormatError::OffsetDelta {
                            index,
                            expected: previous.saturating_add(1),
                            found: frame.offset_delta,
                        });
                    }
                }
                if header
                    .base_offset
                    .checked_add(u64::from(frame.offset_delta))
                    .is_none()
                {
                    return Err(FormatError::OffsetOverflow {
                        base_offset: header.base_offset,
                        message_count: frame.offset_delta,
                    });
                }
            }
            Layout::Stored => {}
        }
        previous_delta = Some(frame.offset_delta);
        payload_bytes += frame.frame_len() - FRAME_HEADER_LEN as u64;
        checksums.push(frame.checksum);
        position = frame_end;
    }
    if checksums.len() as u64 != u64::from(header.message_count) {
        return Err(FormatError::MessageCountMismatch {
            declared: header.message_count,
            found: checksums.len() as u64,
        });
    }
    if checksums.is_empty() {
        return Err(FormatError::Empty);
    }
    let computed = batch_checksum(&header, checksums.iter().copied());
    if computed != header.batch_checksum {
        return Err(FormatError::BatchChecksum {
            stored: header.batch_checksum,
            computed,
        });
    }
    Ok(VerifiedBatch {
        header,
        payload_bytes,
    })
}

/// Counts well-formed frame headers from `position` to the end (for error reports only).
fn count_frames(bytes: &[u8], mut position: usize) -> Option<u64> {
    let mut count = 0;
    while position < bytes.len() {
        if bytes.len() - position < FRAME_HEADER_LEN {
            return None;
        }
        let payload = u64::from(get_u32(bytes, position + 36));
        let headers = u64::from(get_u32(bytes, position + 32));
        position =
            usize::try_from(position as u64 + FRAME_HEADER_LEN as u64 + payload + headers).ok()?;
        count += 1;
    }
    Some(count)
}

/// Stamps a verified batch in place with the server's fields and recomputes its checksum.
pub fn stamp_batch(bytes: &mut [u8], partition_id: u64, base_offset: u64, base_timestamp: u64) {
    let mut header = BatchHeader::decode(bytes).expect("stamp_batch takes a verified batch");
    assert_eq!(header.batch_length, bytes.len() as u64);
    header.partition_id = partition_id;
    header.base_offset = base_offset;
    header.base_timestamp = base_timestamp;
    header.batch_checksum = batch_checksum(
        &header,
        MessageIter::new(bytes, header.base_offset).map(|m| m.header.checksum),
    );
    header.encode(bytes);
}

/// One message of a verified batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedMessage<'a> {
    pub header: FrameHeader,
    /// Absolute offset: `base_offset + offset_delta`.
    pub offset: u64,
    pub payload: &'a [u8],
    pub user_headers: &'a [u8],
    /// Where the whole frame lies inside the batch.
    pub frame: Range<usize>,
}

/// Iterates the frames of a batch that has passed [`verify_batch`] or [`verify_structure`].
/// On bytes that did not, it stops at the first frame that does not fit instead of reading
/// past it.
pub struct MessageIter<'a> {
    bytes: &'a [u8],
    base_offset: u64,
    position: usize,
}

impl<'a> MessageIter<'a> {
    pub fn new(batch: &'a [u8], base_offset: u64) -> Self {
        MessageIter {
            bytes: batch,
            base_offset,
            position: BATCH_HEADER_LEN,
        }
    }
}

impl<'a> Iterator for MessageIter<'a> {
    type Item = DecodedMessage<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.position >= self.bytes.len() {
            return None;
        }
        let start = self.position;
        if self.bytes.len() - start < FRAME_HEADER_LEN {
            self.position = self.bytes.len();
            return None;
        }
        let Ok(header) = FrameHeader::decode(&self.bytes[start..], start) else {
            self.position = self.bytes.len();
            return None;
        };
        let end = usize::try_from(start as u64 + header.frame_len())
            .ok()
            .filter(|&end| end <= self.bytes.len());
        let (Some(end), Some(offset)) = (
            end,
            self.base_offset.checked_add(u64::from(header.offset_delta)),
        ) else {
            self.position = self.bytes.len();
            return None;
        };
        let payload_start = start + FRAME_HEADER_LEN;
        let headers_start = payload_start + header.payload_length as usize;
        self.position = end;
        Some(DecodedMessage {
            header,
            offset,
            payload: &self.bytes[payload_start..headers_start],
            user_headers: &self.bytes[headers_start..end],
            frame: start..end,
        })
    }
}

/// Builds a new batch holding only the messages of a verified `batch` whose offsets lie in
/// `offsets`. The header keeps `base_offset` (frames keep their deltas, so their checksums
/// stay valid); `batch_length`, `message_count` and `batch_checksum` are rewritten. Returns
/// `None` when no message falls in the range.
pub fn slice_batch(batch: &[u8], offsets: Range<u64>) -> Option<BytesMut> {
    let mut header = BatchHeader::decode(batch).expect("slice_batch takes a verified batch");
    let kept: Vec<DecodedMessage<'_>> = MessageIter::new(batch, header.base_offset)
        .filter(|m| offsets.contains(&m.offset))
        .collect();
    if kept.is_empty() {
        return None;
    }
    let frames_len: usize = kept.iter().map(|m| m.frame.len()).sum();
    header.batch_length = (BATCH_HEADER_LEN + frames_len) as u64;
    header.message_count = kept.len() as u32;
    header.batch_checksum = batch_checksum(&header, kept.iter().map(|m| m.header.checksum));
    let mut out = BytesMut::with_capacity(header.batch_length as usize);
    out.resize(BATCH_HEADER_LEN, 0);
    header.encode(&mut out);
    for message in &kept {
        out.put_slice(&batch[message.frame.clone()]);
    }
    Some(out)
}

/// Encodes a batch the way a producer sends it: `partition_id`, `base_offset` and
/// `base_timestamp` zero, message `i` with `offset_delta == i`, all checksums computed. The
/// batch is built in one buffer, in place: its header is written over the 256 bytes reserved
/// at the start by [`BatchBuilder::build`], and [`BatchBuilder::push_with`] lets a payload be
/// written straight at its final offset (an adapter decoding base64 copies each payload
/// once).
#[derive(Debug)]
pub struct BatchBuilder {
    origin_timestamp: u64,
    /// The header's reserved bytes, then the frames.
    buf: BytesMut,
    checksums: Vec<u64>,
}

impl BatchBuilder {
    pub fn new(origin_timestamp: u64) -> Self {
        let mut buf = BytesMut::new();
        buf.resize(BATCH_HEADER_LEN, 0);
        BatchBuilder {
            origin_timestamp,
            buf,
            checksums: Vec::new(),
        }
    }

    pub fn message_count(&self) -> usize {
        self.checksums.len()
    }

    /// Bytes of the batch so far (its header included).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.checksums.is_empty()
    }

    /// Appends one message.
    pub fn push(&mut self, id: u128, timestamp_delta: u32, payload: &[u8], user_headers: &[u8]) {
        let filled: Result<(), std::convert::Infallible> =
            self.push_with(id, timestamp_delta, payload.len(), user_headers, |out| {
                out.copy_from_slice(payload);
                Ok(payload.len())
            });
        filled.unwrap_or_else(|never| match never {});
    }

    /// Appends one message whose payload `fill` writes into the batch itself: it is given
    /// `max_payload` bytes at the payload's final offset and returns how many it wrote (at
    /// most that). An error leaves the batch as it was.
    pub fn push_with<E>(
        &mut self,
        id: u128,
        timestamp_delta: u32,
        max_payload: usize,
        user_headers: &[u8],
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<(), E> {
        let start = self.buf.len();
        let payload_at = start + FRAME_HEADER_LEN;
        self.buf.resize(payload_at + max_payload, 0);
        let written = match fill(&mut self.buf[payload_at..]) {
            Ok(written) => written,
            Err(e) => {
                self.buf.truncate(start);
                return Err(e);
            }
        };
        assert!(written <= max_payload, "a fill wrote past its room");
        self.buf.truncate(payload_at + written);
        self.buf.put_slice(user_headers);
        let header = FrameHeader {
            checksum: 0,
            id,
            offset_delta: u32::try_from(self.checksums.len()).expect("message count fits u32"),
            timestamp_delta,
            user_headers_length: u32::try_from(user_headers.len()).expect("headers fit u32"),
            payload_length: u32::try_from(written).expect("payload fits u32"),
        };
        header.encode(&mut self.buf[start..]);
        let checksum = message_checksum(&self.buf[start..]);
        put_u64(&mut self.buf[start..], 0, checksum);
        self.checksums.push(checksum);
        Ok(())
    }

    /// The batch: its header written over the reserved bytes (the frames are not moved).
    pub fn build(mut self) -> BytesMut {
        let mut header = BatchHeader {
            origin_timestamp: self.origin_timestamp,
            batch_length: self.buf.len() as u64,
            message_count: u32::try_from(self.checksums.len()).expect("count fits u32"),
            ..BatchHeader::default()
        };
        header.batch_checksum = batch_checksum(&header, self.checksums.iter().copied());
        header.encode(&mut self.buf[..BATCH_HEADER_LEN]);
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_messages() -> impl Strategy<Value = Vec<(u128, u32, Vec<u8>, Vec<u8>)>> {
        prop::collection::vec(
            (
                any::<u128>(),
                any::<u32>(),
                prop::collection::vec(any::<u8>(), 0..300),
                prop::collection::vec(any::<u8>(), 0..40),
            ),
            1..8,
        )
    }

    fn build(messages: &[(u128, u32, Vec<u8>, Vec<u8>)], origin: u64) -> BytesMut {
        let mut builder = BatchBuilder::new(origin);
        for (id, delta, payload, headers) in messages {
            builder.push(*id, *delta, payload, headers);
        }
        builder.build()
    }

    #[test]
    fn a_batch_is_built_in_place_and_a_fill_writes_its_payload_at_its_final_offset() {
        let mut builder = BatchBuilder::new(9);
        builder.push(1, 0, b"first", b"h");
        builder
            .push_with::<()>(2, 3, 16, &[], |out| {
                out[..6].copy_from_slice(b"second");
                Ok(6)
            })
            .unwrap();
        // A failed fill leaves the batch as it was.
        let before = builder.len();
        assert_eq!(builder.push_with(3, 0, 8, b"x", |_| Err("bad")), Err("bad"));
        assert_eq!((builder.len(), builder.message_count()), (before, 2));
        let frames_at = builder.buf.as_ptr();
        let built = builder.build();
        assert_eq!(
            built.as_ptr(),
            frames_at,
            "the header is written in place: no copy"
        );
        let mut copied = BatchBuilder::new(9);
        copied.push(1, 0, b"first", b"h");
        copied.push(2, 3, b"second", &[]);
        assert_eq!(built, copied.build());
        verify_batch(&built, &Limits::CEILING, Layout::Stored).unwrap();
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(
            messages in arb_messages(),
            origin in any::<u64>(),
            partition in any::<u64>(),
            base in 0u64..u64::MAX / 2,
            ts in any::<u64>(),
        ) {
            let mut batch = build(&messages, origin);
            let limits = Limits::default();
            verify_batch(&batch, &limits, Layout::Stored).unwrap();
            stamp_batch(&mut batch, partition, base, ts);
            let verified = verify_batch(&batch, &limits, Layout::Stored).unwrap();
            prop_assert_eq!(verified.header.partition_id, partition);
            prop_assert_eq!(verified.header.base_offset, base);
            prop_assert_eq!(verified.header.base_timestamp, ts);
            prop_assert_eq!(verified.header.origin_timestamp, origin);
            prop_assert_eq!(verified.header.message_count as usize, messages.len());
            let decoded: Vec<_> = MessageIter::new(&batch, base).collect();
            prop_assert_eq!(decoded.len(), messages.len());
            for (i, (m, (id, delta, payload, headers))) in decoded.iter().zip(&messages).enumerate() {
                prop_assert_eq!(m.offset, base + i as u64);
                prop_assert_eq!(m.header.id, *id);
                prop_assert_eq!(m.header.timestamp_delta, *delta);
                prop_assert_eq!(m.payload, &payload[..]);
                prop_assert_eq!(m.user_headers, &headers[..]);
            }
            // Re-encoding the decoded header reproduces the bytes.
            let mut again = vec![0u8; BATCH_HEADER_LEN];
            verified.header.encode(&mut again);
            prop_assert_eq!(&again[..], &batch[..BATCH_HEADER_LEN]);
        }

        #[test]
        fn every_single_bit_flip_is_detected(
            messages in arb_messages(),
            origin in any::<u64>(),
            flip_seed in any::<u64>(),
        ) {
            let mut batch = build(&messages, origin);
            stamp_batch(&mut batch, 3, 77, 12345);
            let limits = Limits::default();
            let bits = batch.len() * 8;
            // Every bit of the header and the first frame header, plus a sample elsewhere.
            let exhaustive = (BATCH_HEADER_LEN + FRAME_HEADER_LEN) * 8;
            let sampled = (0..64u64).map(|i| {
                ((flip_seed.wrapping_mul(i + 1).wrapping_add(i * 7919)) % bits as u64) as usize
            });
            for bit in (0..exhaustive.min(bits)).chain(sampled) {
                let mut damaged = batch.clone();
                damaged[bit / 8] ^= 1 << (bit % 8);
                prop_assert!(
                    verify_batch(&damaged, &limits, Layout::Stored).is_err(),
                    "flip of bit {} went undetected", bit
                );
            }
        }

        #[test]
        fn slices_verify_and_keep_exact_messages(
            messages in arb_messages(),
            from in 0usize..8,
            len in 1usize..8,
        ) {
            let mut batch = build(&messages, 9);
            stamp_batch(&mut batch, 1, 100, 5);
            let range = 100 + from as u64..100 + (from + len) as u64;
            let sliced = slice_batch(&batch, range.clone());
            let expected: Vec<_> = MessageIter::new(&batch, 100)
                .filter(|m| range.contains(&m.offset))
                .map(|m| (m.offset, m.payload.to_vec()))
                .collect();
            match sliced {
                None => prop_assert!(expected.is_empty()),
                Some(sliced) => {
                    let verified = verify_batch(&sliced, &Limits::default(), Layout::Sliced).unwrap();
                    let got: Vec<_> = MessageIter::new(&sliced, verified.header.base_offset)
                        .map(|m| (m.offset, m.payload.to_vec()))
                        .collect();
                    prop_assert_eq!(got, expected);
                }
            }
        }
    }

    #[test]
    fn admit_equals_verify_then_stamp() {
        let mut builder = BatchBuilder::new(5);
        builder.push(1, 0, b"one", b"");
        builder.push(2, 3, b"two", b"hh");
        let mut a = builder.build();
        let mut b = a.clone();
        verify_batch(&b, &Limits::default(), Layout::Stored).unwrap();
        stamp_batch(&mut b, 4, 99, 1234);
        let header = admit_batch(&mut a, &Limits::default(), 4, 99, 1234).unwrap();
        assert_eq!(a, b);
        assert_eq!(header, BatchHeader::decode(&b).unwrap());
    }

    #[test]
    fn every_bit_flip_of_a_small_batch_is_detected_exhaustively() {
        let mut builder = BatchBuilder::new(1);
        builder.push(7, 0, b"abc", b"h");
        builder.push(8, 1, b"", b"");
        let mut batch = builder.build();
        stamp_batch(&mut batch, 2, 10, 20);
        for bit in 0..batch.len() * 8 {
            let mut damaged = batch.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(
                verify_batch(&damaged, &Limits::default(), Layout::Stored).is_err(),
                "bit {bit}"
            );
        }
    }

    /// Every reader of batch bytes, on `bytes`: none may panic, and whatever a reader yields
    /// stays inside the bytes.
    fn read_every_way(bytes: &[u8]) {
        for limits in [Limits::default(), Limits::CEILING] {
            for layout in [Layout::Stored, Layout::Sliced] {
                let full = verify_batch(bytes, &limits, layout);
                let structure = verify_structure(bytes, &limits, layout);
                if let Ok(verified) = &full {
                    assert_eq!(
                        structure.as_ref().ok(),
                        Some(verified),
                        "full implies structure"
                    );
                }
                if let Ok(verified) = structure {
                    let h = verified.header;
                    let _ = slice_batch(bytes, h.base_offset..h.base_offset.saturating_add(2));
                }
            }
        }
        let mut copy = bytes.to_vec();
        let _ = admit_batch(&mut copy, &Limits::default(), 1, 2, 3);
        for base in [0, u64::MAX - 1] {
            for message in MessageIter::new(bytes, base) {
                assert!(message.frame.end <= bytes.len());
                assert!(message.frame.start >= BATCH_HEADER_LEN);
            }
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_a_reader(bytes in prop::collection::vec(any::<u8>(), 0..1200)) {
            read_every_way(&bytes);
        }

        #[test]
        fn damaged_batches_never_panic_a_reader(
            messages in arb_messages(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            cut in prop::option::of(any::<prop::sample::Index>()),
            extra in prop::collection::vec(any::<u8>(), 0..80),
        ) {
            let mut bytes = build(&messages, 9).to_vec();
            for (at, value) in edits {
                let at = at.index(bytes.len());
                bytes[at] = value;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            bytes.extend_from_slice(&extra);
            read_every_way(&bytes);
        }
    }
}

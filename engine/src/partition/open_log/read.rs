//! The read path of an open log: polls by offset, timestamp, first, last and next, walking
//! segments from their sparse index and then the journal, slicing the first and last batch to
//! the requested range. Nothing above the visible end is served (under `persisted`, the
//! durable end).
//!
//! Every batch read from a segment continues the offset chain from where the walk started
//! (an index entry or the segment start) and is verified, fully when `validate_checksum` is
//! on, structurally otherwise (lengths, frames, counts, the batch checksum over the stored
//! message checksums), so no reply ever reads past a frame. A batch that fails stops the
//! walk: the consumer gets the valid prefix. If it lies in bytes promised durable (a sealed
//! segment, or below the durable end), the partition fences once the poll has its answer:
//! acknowledging further writes would only add to what the next boot must refuse.

use super::OpenLog;
use crate::format::{slice_batch, BatchHeader};
use crate::partition::offsets::ConsumerId;
use crate::partition::segment::{Check, LogReader, ReadBatchError, Segment};
use crate::partition::{FenceReason, PartitionError, Result};
use bytes::Bytes;

/// Where a poll starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollFrom {
    Offset(u64),
    /// The first message whose (batch) timestamp is at or after this many microseconds.
    Timestamp(u64),
    First,
    /// The last `count` messages.
    Last,
    /// After the consumer's stored offset (from the start when none is stored).
    Next(ConsumerId),
}

/// A poll reply: batches in the stored layout, the first and last possibly sliced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polled {
    pub partition_id: u64,
    /// The nonce of the partition's identity: which incarnation (a purge makes a new one)
    /// the messages come from.
    pub incarnation: u64,
    /// The partition's last visible offset at the time of the poll (`None` when empty).
    pub current_offset: Option<u64>,
    pub batches: Vec<Bytes>,
    pub message_count: u32,
}

/// The reply being built, with its budget.
struct Reply {
    polled: Polled,
    /// Offsets wanted: `[next, end)`.
    next: u64,
    end: u64,
    bytes: u64,
    max_bytes: u64,
}

impl Reply {
    /// Adds the part of `batch` in `[next, end)`; false when the byte budget is spent (a
    /// first batch is always taken whole).
    fn take(&mut self, batch: &Bytes, header: BatchHeader) -> bool {
        assert!(
            header.base_offset <= self.next && header.next_offset() > self.next,
            "a reply is gapless: batch {}..{} taken at {}",
            header.base_offset,
            header.next_offset(),
            self.next
        );
        if !self.polled.batches.is_empty() && self.bytes + header.batch_length > self.max_bytes {
            return false;
        }
        let whole = header.base_offset >= self.next && header.next_offset() <= self.end;
        let reply = if whole {
            batch.clone()
        } else {
            match slice_batch(batch, self.next..self.end) {
                Some(sliced) => sliced.freeze(),
                None => return true,
            }
        };
        let kept = BatchHeader::decode(&reply)
            .expect("a verified or sliced batch decodes")
            .message_count;
        self.bytes += reply.len() as u64;
        self.polled.message_count += kept;
        self.polled.batches.push(reply);
        self.next = header.next_offset().min(self.end);
        true
    }

    fn full(&self) -> bool {
        self.next >= self.end
    }
}

impl OpenLog {
    /// At most `count` messages from `from`, and at most `max_bytes` of batches (and of the
    /// partition's `max_poll_bytes`), but always a whole first batch.
    pub(in crate::partition) fn poll(
        &mut self,
        from: PollFrom,
        count: u32,
        max_bytes: u64,
    ) -> Result<Polled> {
        if count == 0 {
            return Err(PartitionError::ZeroCount);
        }
        let count = count.min(self.settings.max_poll_messages);
        let visible = self.visible_next_offset();
        let start = match from {
            PollFrom::Offset(offset) => Some(offset.max(self.start_offset())),
            PollFrom::First => Some(self.start_offset()),
            PollFrom::Last => Some(
                visible
                    .saturating_sub(u64::from(count))
                    .max(self.start_offset()),
            ),
            PollFrom::Next(consumer) => Some(self.next_for(consumer)?),
            PollFrom::Timestamp(timestamp) => self.offset_for_timestamp(timestamp),
        };
        let mut reply = Reply {
            polled: Polled {
                partition_id: self.partition_id,
                incarnation: self.superblock.identity.nonce,
                current_offset: self.last_offset(),
                batches: Vec::new(),
                message_count: 0,
            },
            next: 0,
            end: 0,
            bytes: 0,
            max_bytes: self.settings.max_poll_bytes.min(max_bytes),
        };
        if let Some(start) = start.filter(|&s| s < visible) {
            reply.next = start;
            reply.end = start.saturating_add(u64::from(count)).min(visible);
            self.read_into(&mut reply);
        }
        let polled = reply.polled;
        assert!(
            polled.message_count <= count,
            "a reply holds at most count messages"
        );
        Ok(polled)
    }

    /// The base offset of the first visible batch with timestamp at or after `timestamp`.
    fn offset_for_timestamp(&mut self, timestamp: u64) -> Option<u64> {
        let visible = self.visible_next_offset();
        for i in 0..self.segments.len() {
            match self.timestamp_in_segment(i, timestamp, visible) {
                Ok(Some(offset)) => return Some(offset),
                Ok(None) => {}
                Err((position, error)) => {
                    self.damage_found(i, position, &error);
                    return None;
                }
            }
        }
        self.journal
            .batches
            .iter()
            .take_while(|b| b.header.base_offset < visible)
            .find(|b| b.header.base_timestamp >= timestamp)
            .map(|b| b.header.base_offset)
    }

    /// The first batch of segment `i` stamped at or after `timestamp`, below `visible`. Each
    /// batch the walk passes is verified like any read (its stamp is only as good as its
    /// checksum).
    fn timestamp_in_segment(
        &self,
        i: usize,
        timestamp: u64,
        visible: u64,
    ) -> std::result::Result<Option<u64>, (u64, ReadBatchError)> {
        let segment = &self.segments[i];
        if segment.is_empty() || segment.max_timestamp < timestamp {
            return Ok(None);
        }
        let log = self
            .segment_log(i)
            .map_err(|error| (0, ReadBatchError::Unopenable { error }))?;
        let mut reader = LogReader::new(log.as_ref(), segment.log_len);
        let (mut position, mut expected) = segment.seek_timestamp(timestamp);
        while position < segment.log_len && expected < visible {
            let header = match reader.batch_at(position, expected, self.partition_id, self.check())
            {
                Ok((verified, _)) => verified.header,
                Err(error) => return Err((position, error)),
            };
            if header.base_timestamp >= timestamp {
                return Ok(Some(header.base_offset));
            }
            position += header.batch_length;
            expected = header.next_offset();
        }
        Ok(None)
    }

    fn check(&self) -> Check {
        if self.settings.validate_checksum {
            Check::Full
        } else {
            Check::Structure
        }
    }

    /// Collects messages from the segments, then the journal, into `reply`.
    fn read_into(&mut self, reply: &mut Reply) {
        let first_segment = self
            .segments
            .partition_point(|s| s.start_offset <= reply.next)
            .saturating_sub(1);
        for i in first_segment..self.segments.len() {
            if self.segments[i].end_offset <= reply.next {
                continue;
            }
            match self.read_segment(i, reply) {
                Ok(true) if !reply.full() => {}
                Ok(_) => return,
                Err((position, error)) => {
                    self.damage_found(i, position, &error);
                    return;
                }
            }
        }
        for batch in &self.journal.batches {
            if reply.full() {
                break;
            }
            if batch.header.next_offset() <= reply.next {
                continue;
            }
            if !reply.take(&batch.bytes, batch.header) {
                break;
            }
        }
    }

    /// Walks segment `i` from its index entry at or below `reply.next`; false when the byte
    /// budget stopped it; the position and error of a batch it could not take.
    fn read_segment(
        &self,
        i: usize,
        reply: &mut Reply,
    ) -> std::result::Result<bool, (u64, ReadBatchError)> {
        let check = self.check();
        let segment = &self.segments[i];
        let log = self
            .segment_log(i)
            .map_err(|error| (0, ReadBatchError::Unopenable { error }))?;
        let mut reader = LogReader::new(log.as_ref(), segment.log_len);
        let (mut position, mut expected) = segment.seek_offset(reply.next);
        while position < segment.log_len && !reply.full() {
            match reader.batch_at(position, expected, self.partition_id, check) {
                Ok((verified, batch)) => {
                    let header = verified.header;
                    if header.next_offset() > reply.next && !reply.take(&batch, header) {
                        return Ok(false);
                    }
                    position += header.batch_length;
                    expected = header.next_offset();
                }
                Err(error) => return Err((position, error)),
            }
        }
        Ok(true)
    }

    /// A walk of segment `i` could not take the batch at `position`. The poll returns what it
    /// has; in bytes promised durable the partition also fences.
    fn damage_found(&mut self, i: usize, position: u64, error: &ReadBatchError) {
        let segment = &self.segments[i];
        if let ReadBatchError::Unopenable { error } = error {
            if error.kind() != std::io::ErrorKind::NotFound {
                // Out of file descriptors or memory: nothing says the bytes are damaged.
                tracing::warn!(log = %segment.log_path.display(), %error, "a sealed segment could not be opened for a read: the poll returns what it has");
                return;
            }
        }
        let durable = self.superblock.durable;
        let promised = segment.sealed
            || (segment.start_offset == durable.segment_start && position < durable.position);
        tracing::error!(log = %segment.log_path.display(), position, %error, promised, "a read found damage: the poll returns the valid prefix");
        if promised && self.pending_fence.is_none() {
            self.pending_fence = Some(fence_for(segment, position, durable.position, error));
        }
    }
}

fn fence_for(
    segment: &Segment,
    position: u64,
    durable_position: u64,
    error: &ReadBatchError,
) -> FenceReason {
    match error {
        ReadBatchError::Unreadable { sector, error } => FenceReason::ReadFailed {
            file: segment.log_path.clone(),
            position,
            sector: *sector,
            error: error.to_string(),
        },
        ReadBatchError::Unopenable { error } => FenceReason::ReadFailed {
            file: segment.log_path.clone(),
            position,
            sector: 0,
            error: format!("open: {error}"),
        },
        _ if segment.sealed => FenceReason::SealedSegmentCorrupt {
            log: segment.log_path.clone(),
            position,
            damage: error.to_string(),
        },
        _ => FenceReason::CorruptBelowDurable {
            log: segment.log_path.clone(),
            position,
            durable_position,
            damage: error.to_string(),
        },
    }
}

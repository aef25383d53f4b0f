//! The read path of an open log: polls by offset, timestamp, first, last and next, walking
//! segments from their sparse index and then the journal, slicing the first and last batch to
//! the requested range.

use super::OpenLog;
use crate::config::PartitionSettings;
use crate::format::{slice_batch, BatchHeader};
use crate::partition::offsets::ConsumerId;
use crate::partition::segment::{LogReader, Segment};
use crate::partition::{PartitionError, Result};
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
    /// The partition's last offset at the time of the poll (`None` when empty).
    pub current_offset: Option<u64>,
    pub batches: Vec<Bytes>,
    pub message_count: u32,
}

impl OpenLog {
    pub(in crate::partition) fn poll(&mut self, from: PollFrom, count: u32) -> Result<Polled> {
        if count == 0 {
            return Err(PartitionError::ZeroCount);
        }
        let count = count.min(self.settings.max_poll_messages);
        let start = match from {
            PollFrom::Offset(offset) => Some(offset.max(self.start_offset())),
            PollFrom::First => Some(self.start_offset()),
            PollFrom::Last => Some(
                self.next_offset
                    .saturating_sub(u64::from(count))
                    .max(self.start_offset()),
            ),
            PollFrom::Next(consumer) => Some(match self.get_offset(consumer)? {
                Some(offset) => offset + 1,
                None => self.start_offset(),
            }),
            PollFrom::Timestamp(timestamp) => self.offset_for_timestamp(timestamp)?,
        };
        let mut polled = Polled {
            partition_id: self.partition_id,
            current_offset: self.last_offset(),
            batches: Vec::new(),
            message_count: 0,
        };
        if let Some(start) = start.filter(|&s| s < self.next_offset) {
            self.read_messages(start, count, &mut polled)?;
        }
        Ok(polled)
    }

    /// The base offset of the first batch with timestamp at or after `timestamp`.
    fn offset_for_timestamp(&self, timestamp: u64) -> Result<Option<u64>> {
        for segment in &self.segments {
            if segment.is_empty() || segment.max_timestamp < timestamp {
                continue;
            }
            let mut reader = LogReader::new(segment.log.as_ref(), segment.log_len);
            let (mut position, mut expected) = segment.seek_timestamp(timestamp);
            while position < segment.log_len {
                let header = match self.header_in_chain(&mut reader, segment, position, expected) {
                    Some(header) => header,
                    None => return Ok(None),
                };
                if header.base_timestamp >= timestamp {
                    return Ok(Some(header.base_offset));
                }
                position += header.batch_length;
                expected = header.next_offset();
            }
        }
        Ok(self
            .journal
            .batches
            .iter()
            .find(|b| b.header.base_timestamp >= timestamp)
            .map(|b| b.header.base_offset))
    }

    /// Collects up to `count` messages from `start`: segments first, then the journal.
    fn read_messages(&self, start: u64, count: u32, polled: &mut Polled) -> Result<()> {
        let end = start.saturating_add(u64::from(count));
        let mut bytes = 0u64;
        let mut next = start;
        let first_segment = self
            .segments
            .partition_point(|s| s.start_offset <= start)
            .saturating_sub(1);
        for segment in &self.segments[first_segment..] {
            if segment.end_offset <= next {
                continue;
            }
            let mut reader = LogReader::new(segment.log.as_ref(), segment.log_len);
            let (mut position, mut expected) = segment.seek_offset(next);
            while position < segment.log_len && next < end {
                let Some(header) = self.header_in_chain(&mut reader, segment, position, expected)
                else {
                    return Ok(());
                };
                if header.next_offset() <= next {
                    position += header.batch_length;
                    expected = header.next_offset();
                    continue;
                }
                match reader.batch_at(
                    position,
                    expected,
                    self.partition_id,
                    &self.settings.limits,
                    self.settings.validate_checksum,
                ) {
                    Ok((verified, batch)) => {
                        if !Self::take_batch(
                            batch,
                            verified.header,
                            next,
                            end,
                            &mut bytes,
                            polled,
                            &self.settings,
                        ) {
                            return Ok(());
                        }
                        next = verified.header.next_offset().min(end);
                        position += verified.header.batch_length;
                        expected = verified.header.next_offset();
                    }
                    Err(error) => {
                        tracing::error!(log = %segment.log_path.display(), position, %error, "checksum failure: poll returns the valid prefix");
                        return Ok(());
                    }
                }
            }
            if next >= end {
                return Ok(());
            }
        }
        for batch in &self.journal.batches {
            if next >= end {
                break;
            }
            if batch.header.next_offset() <= next {
                continue;
            }
            if !Self::take_batch(
                &batch.bytes,
                batch.header,
                next,
                end,
                &mut bytes,
                polled,
                &self.settings,
            ) {
                break;
            }
            next = batch.header.next_offset().min(end);
        }
        Ok(())
    }

    /// The header of the batch at `position`, which must carry `expected` as its base offset
    /// (the chain from the index entry or segment start); `None`, logged, when it does not.
    fn header_in_chain(
        &self,
        reader: &mut LogReader<'_>,
        segment: &Segment,
        position: u64,
        expected: u64,
    ) -> Option<BatchHeader> {
        let problem = match reader.header_at(position, &self.settings.limits) {
            Ok(header) if header.base_offset == expected => return Some(header),
            Ok(header) => format!("base_offset {}, expected {expected}", header.base_offset),
            Err(error) => error.to_string(),
        };
        tracing::error!(log = %segment.log_path.display(), position, %problem, "walk stopped at an unreadable batch: the valid prefix is returned");
        None
    }

    /// Adds the part of `batch` in `[from, end)` to the reply; false when the byte budget
    /// is spent (a first batch is always taken whole).
    fn take_batch(
        batch: &[u8],
        header: BatchHeader,
        from: u64,
        end: u64,
        bytes: &mut u64,
        polled: &mut Polled,
        settings: &PartitionSettings,
    ) -> bool {
        if !polled.batches.is_empty() && *bytes + header.batch_length > settings.max_poll_bytes {
            return false;
        }
        let whole = header.base_offset >= from && header.next_offset() <= end;
        let reply = if whole {
            Bytes::copy_from_slice(batch)
        } else {
            match slice_batch(batch, from..end) {
                Some(sliced) => sliced.freeze(),
                None => return true,
            }
        };
        let kept = u64::from(
            BatchHeader::decode(&reply)
                .expect("reply decodes")
                .message_count,
        );
        *bytes += reply.len() as u64;
        polled.message_count += kept as u32;
        polled.batches.push(reply);
        true
    }
}

//! The read path of an open log: polls by offset, timestamp, first, last and next. The log
//! plans each poll ([`OpenLog::read_plan`]: where it starts, which segments' open files and
//! bytes it may read, the journal's visible batches) and the plan reads
//! ([`crate::partition::read_plan`]), in place or off the owner. Nothing above the visible
//! end is planned (under `persisted`, the durable end). Damage a read finds in bytes promised
//! durable fences the partition once the poll has its answer: acknowledging further writes
//! would only add to what the next boot must refuse.

use super::OpenLog;
use crate::partition::offsets::ConsumerId;
use crate::partition::read_plan::{PlannedSegment, ReadPlan, Start};
use crate::partition::segment::Check;
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

impl OpenLog {
    /// At most `count` messages from `from`, and at most `max_bytes` of batches (and of the
    /// partition's `max_poll_bytes`), but always a whole first batch: planned and read in
    /// place.
    pub(in crate::partition) fn poll(
        &mut self,
        from: PollFrom,
        count: u32,
        max_bytes: u64,
    ) -> Result<Polled> {
        let read = self.read_plan(from, count, max_bytes)?.read();
        if let Some(reason) = read.fence {
            self.read_damaged(reason);
        }
        Ok(read.polled)
    }

    /// The plan of a poll ([`Self::poll`]), to read anywhere.
    pub(in crate::partition) fn read_plan(
        &mut self,
        from: PollFrom,
        count: u32,
        max_bytes: u64,
    ) -> Result<ReadPlan> {
        if count == 0 {
            return Err(PartitionError::ZeroCount);
        }
        let count = count.min(self.settings.max_poll_messages);
        let visible = match self.read_hooks.read_end {
            Some(bend) => bend(self.visible_next_offset(), self.next_offset),
            None => self.visible_next_offset(),
        };
        let start = match from {
            PollFrom::Offset(offset) => Start::Offset(offset.max(self.start_offset())),
            PollFrom::First => Start::Offset(self.start_offset()),
            PollFrom::Last => Start::Offset(
                visible
                    .saturating_sub(u64::from(count))
                    .max(self.start_offset()),
            ),
            PollFrom::Next(consumer) => Start::Offset(self.next_for(consumer)?),
            PollFrom::Timestamp(timestamp) => Start::Timestamp(timestamp),
        };
        let start = match start {
            Start::Offset(offset) if offset >= visible => Start::Nothing,
            start => start,
        };
        let durable = self.superblock.durable;
        let segments = self.planned_segments(start, count, visible);
        let journal = match start {
            Start::Nothing => Vec::new(),
            _ => self
                .journal
                .batches
                .iter()
                .take_while(|b| b.header.next_offset() <= visible)
                .map(|b| (b.header, b.bytes.clone()))
                .collect(),
        };
        Ok(ReadPlan {
            polled: Polled {
                partition_id: self.partition_id,
                incarnation: self.superblock.identity.nonce,
                current_offset: self.last_offset(),
                batches: Vec::new(),
                message_count: 0,
            },
            start,
            count,
            visible,
            max_bytes: self.settings.max_poll_bytes.min(max_bytes),
            check: self.check(),
            segments,
            journal,
            durable_position: durable.position,
            skip_unverified: self.read_hooks.skip_unverified,
        })
    }

    /// The segments a read from `start` of `count` messages below `visible` may touch, each
    /// with its open `.log` and the bytes of it the read may reach.
    fn planned_segments(&self, start: Start, count: u32, visible: u64) -> Vec<PlannedSegment> {
        let (first, bound) = match start {
            Start::Nothing => return Vec::new(),
            Start::Offset(offset) => {
                let first = self
                    .segments
                    .partition_point(|s| s.start_offset <= offset)
                    .saturating_sub(1);
                (first, offset.saturating_add(u64::from(count)))
            }
            Start::Timestamp(timestamp) => {
                let first = self
                    .segments
                    .iter()
                    .position(|s| !s.is_empty() && s.max_timestamp >= timestamp);
                let Some(first) = first else {
                    return Vec::new();
                };
                (
                    first,
                    self.segments[first]
                        .end_offset
                        .saturating_add(u64::from(count)),
                )
            }
        };
        let bound = bound.min(visible);
        let durable = self.superblock.durable;
        let mut planned = Vec::new();
        for (i, segment) in self.segments.iter().enumerate().skip(first) {
            if segment.start_offset >= bound && !planned.is_empty() {
                break;
            }
            if segment.is_empty() {
                continue;
            }
            let from = match start {
                Start::Offset(offset) => offset.max(segment.start_offset),
                _ => segment.start_offset,
            };
            let timestamp_walk = match start {
                Start::Timestamp(t) if segment.max_timestamp >= t => {
                    Some(segment.seek_timestamp(t))
                }
                _ => None,
            };
            let promised_below = if segment.sealed {
                u64::MAX
            } else if segment.start_offset == durable.segment_start {
                durable.position
            } else {
                0
            };
            planned.push(PlannedSegment {
                log_len: segment.log_len,
                log: self.segment_log(i),
                log_path: segment.log_path.clone(),
                offset_walk: segment.seek_offset(from),
                timestamp_walk,
                sealed: segment.sealed,
                promised_below,
            });
        }
        planned
    }

    fn check(&self) -> Check {
        if self.settings.validate_checksum {
            Check::Full
        } else {
            Check::Structure
        }
    }

    /// A read of this log found damage in bytes promised durable: the partition fences once
    /// the request that found it has its answer.
    pub(in crate::partition) fn read_damaged(&mut self, reason: FenceReason) {
        if self.pending_fence.is_none() {
            self.pending_fence = Some(reason);
        }
    }
}

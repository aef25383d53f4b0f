//! The read path of an open log: polls by offset, timestamp, first, last and next. The log
//! plans each poll ([`OpenLog::read_plan`]: where it starts, which segments' open files and
//! bytes it may read, the journal's visible batches) and the plan reads
//! ([`crate::partition::read_plan`]), in place or off the owner. Nothing above the visible
//! end is planned (under `persisted`, the durable end). Damage a read finds in bytes promised
//! durable fences the partition once the poll has its answer: acknowledging further writes
//! would only add to what the next boot must refuse.

use super::OpenLog;
use crate::partition::read_plan::{PlannedSegment, PollFrom, Polled, ReadFence, ReadPlan, Start};
use crate::partition::segment::Check;
use crate::partition::{PartitionError, Result};

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
        if let Some(fence) = read.fence {
            self.read_damaged(fence);
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
        let max_bytes = self.settings.max_poll_bytes.min(max_bytes);
        let (segments, cut) = self.planned_segments(start, (count, max_bytes), visible);
        // The journal's batches the read may reach: below the visible end, and for an offset
        // start those overlapping the offsets wanted.
        let (from, until) = match start {
            Start::Nothing => (u64::MAX, 0),
            Start::Offset(offset) => (offset, offset.saturating_add(u64::from(count))),
            Start::Timestamp(_) => (0, u64::MAX),
        };
        let journal = match cut {
            true => Vec::new(),
            false => self
                .journal
                .batches
                .iter()
                .skip_while(|b| b.header.next_offset() <= from)
                .take_while(|b| b.header.next_offset() <= visible && b.header.base_offset < until)
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
            max_bytes,
            check: self.check(),
            segments,
            journal,
            cut,
            durable_position: durable.position,
            skip_unverified: self.read_hooks.skip_unverified,
        })
    }

    /// The segments a read from `start` of `count` messages and about `max_bytes` below
    /// `visible` may touch, each with its open `.log` and the bytes of it the read may reach
    /// (under `persisted`, none above the durable end); and whether planning stopped short of
    /// the offsets wanted, if it did: past the first segment every batch a reply takes is
    /// whole, so once the later segments hold `max_bytes` and a largest batch, the reply is
    /// sure to stop inside them and no further segment is opened.
    fn planned_segments(
        &self,
        start: Start,
        (count, max_bytes): (u32, u64),
        visible: u64,
    ) -> (Vec<PlannedSegment>, bool) {
        let (first, bound) = match start {
            Start::Nothing => return (Vec::new(), false),
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
                    return (Vec::new(), false);
                };
                let end = self.segments[first].end_offset;
                (first, end.saturating_add(u64::from(count)))
            }
        };
        let bound = bound.min(visible);
        let budget = max_bytes.saturating_add(self.settings.limits.max_batch_bytes);
        let (mut planned, mut later_bytes) = (Vec::new(), 0u64);
        for (i, segment) in self.segments.iter().enumerate().skip(first) {
            if !planned.is_empty() && segment.start_offset >= bound {
                break;
            }
            if later_bytes >= budget {
                return (planned, true);
            }
            let from = match start {
                Start::Offset(offset) => offset.max(segment.start_offset),
                _ => segment.start_offset,
            };
            if segment.is_empty() || segment.end_offset <= from {
                continue;
            }
            let planned_segment = self.planned_segment(i, from, start, visible);
            if !planned.is_empty() {
                later_bytes += planned_segment.log_len;
            }
            planned.push(planned_segment);
        }
        (planned, false)
    }

    /// Segment `i` planned for a read from `from` (or a timestamp `start`) below `visible`.
    fn planned_segment(&self, i: usize, from: u64, start: Start, visible: u64) -> PlannedSegment {
        let segment = &self.segments[i];
        let durable = self.superblock.durable;
        let timestamp_walk = match start {
            Start::Timestamp(t) if segment.max_timestamp >= t => Some(segment.seek_timestamp(t)),
            _ => None,
        };
        let promised_below = if segment.sealed {
            u64::MAX
        } else if segment.start_offset == durable.segment_start {
            durable.position
        } else {
            0
        };
        // The segment holding a durable end the plan serves up to: nothing above it read.
        let ends_at_durable = segment.start_offset == durable.segment_start
            && visible == durable.next_offset
            && durable.position <= segment.log_len;
        let (log_len, end_offset) = match ends_at_durable {
            true => (durable.position, durable.next_offset),
            false => (segment.log_len, segment.end_offset),
        };
        PlannedSegment {
            start_offset: segment.start_offset,
            end_offset,
            log_len,
            log: self.segment_log(i),
            log_path: segment.log_path.clone(),
            offset_walk: segment.seek_offset(from),
            timestamp_walk,
            sealed: segment.sealed,
            promised_below,
        }
    }

    fn check(&self) -> Check {
        if self.settings.validate_checksum {
            Check::Full
        } else {
            Check::Structure
        }
    }

    /// A read of this log found damage in bytes promised durable: the partition fences once
    /// the request that found it has its answer, unless retention deleted the segment since
    /// (no boot will read it).
    pub(in crate::partition) fn read_damaged(&mut self, fence: ReadFence) {
        if fence.segment_start < self.log_start() {
            tracing::warn!(segment = fence.segment_start, reason = %fence.reason, "damage a read found is in a segment deleted since: no fence");
            return;
        }
        if self.pending_fence.is_none() {
            self.pending_fence = Some(fence.reason);
        }
    }
}

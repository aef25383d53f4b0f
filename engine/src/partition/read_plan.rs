//! A poll's read, planned by the partition's owner and run anywhere: the owner resolves
//! where the poll starts and hands out what the read may touch (each segment's open `.log`,
//! the bytes of it below the visible end, where the walk in it begins, the journal's visible
//! batches); [`ReadPlan::read`] walks them without the partition, so a poll's device reads
//! never stall the owner's sends. Nothing above the plan's visible end is ever served.
//!
//! Every batch a reply takes continues the offset chain from where the walk started (an
//! index entry or the segment start) and is verified, fully when `validate_checksum` is on,
//! structurally otherwise (lengths, frames, counts, the batch checksum over the stored
//! message checksums), so no reply ever reads past a frame. A batch wholly below the
//! requested offset is skipped by its header (plausible, and continuing the chain), not
//! verified: its bytes are never served. A walk that ends its segment must end the chain at
//! the segment's end offset. When a skip is followed by a break in the chain (a header's
//! length or count damaged), the skipped batches are walked again, verified, to find where
//! the damage is. A batch that fails stops the walk: the consumer gets the valid prefix; if
//! it lies in bytes promised durable (a sealed segment, or below the durable end when the
//! plan was made) the read says which fence the owner must raise ([`PlanRead::fence`]), and
//! the owner raises it unless the segment is gone meanwhile.
//!
//! Architecture Invariant: a plan holds open handles, never paths to reopen, so a segment
//! that retention, a purge or a deletion unlinks while the plan runs still reads as it was
//! (its inode lives until the handle drops): a reply is one incarnation's bytes.

use crate::env::DiskFile;
use crate::format::{slice_batch, BatchHeader};
use crate::partition::offsets::ConsumerId;
use crate::partition::segment::{Check, LogReader, ReadBatchError};
use crate::partition::FenceReason;
use bytes::Bytes;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

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

/// Where a planned read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// At this offset (below the visible end).
    Offset(u64),
    /// At the first visible batch stamped at or after this many microseconds.
    Timestamp(u64),
    /// Nothing to read (the start is at or past the visible end).
    Nothing,
}

/// One segment a plan may read.
pub(crate) struct PlannedSegment {
    pub start_offset: u64,
    /// The offset after the last message of the bytes below `log_len`: where the chain of a
    /// walk that reaches `log_len` must end.
    pub end_offset: u64,
    /// Bytes of the `.log` the read may touch: whole batches, all below the visible end's
    /// segment position or wholly written before the plan.
    pub log_len: u64,
    /// The `.log`, open (or why it could not be opened).
    pub log: Result<Arc<dyn DiskFile>, io::Error>,
    pub log_path: PathBuf,
    /// Where the walk for an offset start begins: (position, base offset there).
    pub offset_walk: (u64, u64),
    /// Where the walk for a timestamp start begins (`None`: the segment holds no batch
    /// stamped late enough).
    pub timestamp_walk: Option<(u64, u64)>,
    pub sealed: bool,
    /// Bytes below this position were promised durable when the plan was made (every byte
    /// of a sealed segment; the durable end's position in its segment; none otherwise).
    pub promised_below: u64,
}

/// A poll's read, ready to run off the owner.
pub struct ReadPlan {
    pub(crate) polled: Polled,
    pub(crate) start: Start,
    /// Most messages wanted.
    pub(crate) count: u32,
    /// The offset after the last message the read may serve.
    pub(crate) visible: u64,
    pub(crate) max_bytes: u64,
    pub(crate) check: Check,
    pub(crate) segments: Vec<PlannedSegment>,
    /// The journal's batches below the visible end the read may reach, in offset order.
    pub(crate) journal: Vec<(BatchHeader, Bytes)>,
    /// Planning stopped at the byte budget before the offsets wanted ended (the reply fills
    /// inside the planned segments; nothing past them is read).
    pub(crate) cut: bool,
    /// The durable end's position, named in a fence for damage below it.
    pub(crate) durable_position: u64,
    /// A canary's bent read: a batch a skip stopped at is served unverified.
    pub(crate) skip_unverified: bool,
}

/// What a plan's read found: the reply, and the fence its damage calls for, if any.
#[derive(Debug)]
pub struct PlanRead {
    pub polled: Polled,
    /// The last offset the reply holds (what an auto-commit stores).
    pub last_offset: Option<u64>,
    /// Damage in bytes promised durable: the owner fences the partition with its reason
    /// (if it still holds the incarnation the plan was made of, and the segment).
    pub fence: Option<ReadFence>,
}

/// Damage a read found in bytes promised durable.
#[derive(Debug, Clone)]
pub struct ReadFence {
    /// The start offset of the segment it is in (retention may have deleted it since).
    pub segment_start: u64,
    pub reason: FenceReason,
}

impl std::fmt::Debug for ReadPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadPlan")
            .field("incarnation", &self.polled.incarnation)
            .field("start", &self.start)
            .field("count", &self.count)
            .field("visible", &self.visible)
            .field("segments", &self.segments.len())
            .field("journal", &self.journal.len())
            .finish()
    }
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

/// Where a walk stopped on a batch it could not take: segment, position, why.
type Stop = (usize, u64, ReadBatchError);
/// Where a timestamp search found its batch: its offset, its segment (the journal's is
/// one past the segments) and where its walk starts (none in the journal).
type Found = (u64, usize, Option<(u64, u64)>);

impl ReadPlan {
    /// Runs the plan: the reply, and the fence any damage found calls for.
    pub fn read(self) -> PlanRead {
        let _span = tracing::debug_span!(
            "plan_read",
            partition = self.polled.partition_id,
            incarnation = self.polled.incarnation
        )
        .entered();
        let mut reply = Reply {
            polled: self.polled.clone(),
            next: 0,
            end: 0,
            bytes: 0,
            max_bytes: self.max_bytes,
        };
        let result = match self.start {
            Start::Nothing => Ok(()),
            Start::Offset(offset) => self.read_from(&mut reply, offset, 0, None),
            Start::Timestamp(timestamp) => {
                self.find_timestamp(timestamp)
                    .and_then(|found| match found {
                        Some((offset, segment, walk)) => {
                            self.read_from(&mut reply, offset, segment, walk)
                        }
                        None => Ok(()),
                    })
            }
        };
        let fence = result.err().and_then(|stop| self.damage_found(stop));
        assert!(
            reply.polled.batches.is_empty() || reply.next <= self.visible,
            "a reply holds nothing at or above the visible end"
        );
        // Replies are gapless and end just below `next`.
        let last_offset = (reply.polled.message_count > 0).then(|| reply.next - 1);
        let polled = reply.polled;
        assert!(
            polled.message_count <= self.count,
            "a reply holds at most count messages"
        );
        PlanRead {
            polled,
            last_offset,
            fence,
        }
    }

    /// Reads `[offset, offset + count)` below the visible end into `reply`, from segment
    /// `first` on (its walk at `walk`, or its offset walk), then the journal.
    fn read_from(
        &self,
        reply: &mut Reply,
        offset: u64,
        first: usize,
        walk: Option<(u64, u64)>,
    ) -> Result<(), Stop> {
        assert!(
            offset < self.visible,
            "a planned read starts below the visible end"
        );
        reply.next = offset;
        reply.end = offset
            .saturating_add(u64::from(self.count))
            .min(self.visible);
        for (i, segment) in self.segments.iter().enumerate().skip(first) {
            let start = match walk {
                Some(walk) if i == first => walk,
                _ => segment.offset_walk,
            };
            match self.read_segment(segment, start, reply) {
                Ok(true) if !reply.full() => {}
                Ok(_) => return Ok(()),
                Err((position, error)) => return Err((i, position, error)),
            }
        }
        if self.cut {
            return Ok(());
        }
        for (header, bytes) in &self.journal {
            if reply.full() {
                break;
            }
            if header.next_offset() <= reply.next {
                continue;
            }
            if !reply.take(bytes, *header) {
                break;
            }
        }
        Ok(())
    }

    /// Walks `segment` from `(position, expected)`; false when the byte budget stopped it;
    /// the position and error of a batch it could not take. Batches wholly below the reply's
    /// next offset are skipped by their headers.
    fn read_segment(
        &self,
        segment: &PlannedSegment,
        (mut position, mut expected): (u64, u64),
        reply: &mut Reply,
    ) -> Result<bool, (u64, ReadBatchError)> {
        let mut reader = segment.reader().map_err(|error| (0, error))?;
        let partition_id = self.polled.partition_id;
        // Where the skips since the last batch taken began: a break in the chain after them
        // is looked for there first.
        let mut skips: Option<(u64, u64)> = None;
        while position < segment.log_len && !reply.full() {
            let header = reader
                .chained_header_at(position, expected, partition_id)
                .map_err(|error| self.locate(&mut reader, skips, (position, error)))?;
            if header.next_offset() <= reply.next {
                skips.get_or_insert((position, expected));
            } else {
                let batch = if skips.is_some() && self.skip_unverified {
                    reader.unverified_at(position, &header)
                } else {
                    reader
                        .batch_at(position, expected, partition_id, self.check)
                        .map(|(_, batch)| batch)
                };
                let batch =
                    batch.map_err(|error| self.locate(&mut reader, skips, (position, error)))?;
                skips = None;
                if !reply.take(&batch, header) {
                    return Ok(false);
                }
            }
            position += header.batch_length;
            expected = header.next_offset();
        }
        if !reply.full() && expected != segment.end_offset {
            let error = ReadBatchError::OffsetMismatch {
                expected: segment.end_offset,
                found: expected,
            };
            return Err(self.locate(&mut reader, skips, (position, error)));
        }
        Ok(true)
    }

    /// Where a walk's damage is: the first batch from `skips` on (batches skipped by their
    /// headers) that fails verification, or where the walk stopped (`stop`).
    fn locate(
        &self,
        reader: &mut LogReader<'_>,
        skips: Option<(u64, u64)>,
        stop: (u64, ReadBatchError),
    ) -> (u64, ReadBatchError) {
        let Some((mut position, mut expected)) = skips else {
            return stop;
        };
        let partition_id = self.polled.partition_id;
        while position < stop.0 {
            match reader.batch_at(position, expected, partition_id, self.check) {
                Ok((verified, _)) => {
                    position += verified.header.batch_length;
                    expected = verified.header.next_offset();
                }
                Err(error) => return (position, error),
            }
        }
        stop
    }

    /// The first visible batch stamped at or after `timestamp`: its offset, its segment and
    /// where its walk starts (`None` for a journal batch). Each batch the search passes is
    /// verified like any read (its stamp is only as good as its checksum).
    fn find_timestamp(&self, timestamp: u64) -> Result<Option<Found>, Stop> {
        for (i, segment) in self.segments.iter().enumerate() {
            let Some((mut position, mut expected)) = segment.timestamp_walk else {
                continue;
            };
            let mut reader = segment.reader().map_err(|error| (i, 0, error))?;
            while position < segment.log_len && expected < self.visible {
                let partition_id = self.polled.partition_id;
                let header = match reader.batch_at(position, expected, partition_id, self.check) {
                    Ok((verified, _)) => verified.header,
                    Err(error) => return Err((i, position, error)),
                };
                if header.base_timestamp >= timestamp {
                    return Ok(Some((header.base_offset, i, Some((position, expected)))));
                }
                position += header.batch_length;
                expected = header.next_offset();
            }
        }
        let found = self
            .journal
            .iter()
            .find(|(header, _)| header.base_timestamp >= timestamp)
            .map(|(header, _)| (header.base_offset, self.segments.len(), None));
        Ok(found)
    }

    /// A walk could not take a batch: the poll returns what it has; in bytes promised
    /// durable, the fence the owner must raise.
    fn damage_found(&self, (i, position, error): Stop) -> Option<ReadFence> {
        let segment = &self.segments[i];
        if let ReadBatchError::Unopenable { error } = &error {
            if error.kind() != io::ErrorKind::NotFound {
                // Out of file descriptors or memory: nothing says the bytes are damaged.
                tracing::warn!(log = %segment.log_path.display(), %error, "a segment could not be opened for a read: the poll returns what it has");
                return None;
            }
        }
        let promised = position < segment.promised_below;
        tracing::error!(log = %segment.log_path.display(), position, %error, promised, "a read found damage: the poll returns the valid prefix");
        promised.then(|| ReadFence {
            segment_start: segment.start_offset,
            reason: fence_for(segment, position, self.durable_position, error),
        })
    }
}

impl PlannedSegment {
    /// A reader of the bytes the plan may read, or why the `.log` could not be opened.
    fn reader(&self) -> Result<LogReader<'_>, ReadBatchError> {
        match &self.log {
            Ok(log) => Ok(LogReader::new(log.as_ref(), self.log_len)),
            Err(error) => Err(ReadBatchError::Unopenable {
                error: io::Error::new(error.kind(), error.to_string()),
            }),
        }
    }
}

fn fence_for(
    segment: &PlannedSegment,
    position: u64,
    durable_position: u64,
    error: ReadBatchError,
) -> FenceReason {
    match error {
        ReadBatchError::Unreadable { sector, error } => FenceReason::ReadFailed {
            file: segment.log_path.clone(),
            position,
            sector,
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

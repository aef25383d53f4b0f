//! The partition superblock: the durable record of who the partition is, where its log
//! starts, how far it is promised durable, and which consumers have stored offsets.
//!
//! Two slots, `superblock.a` and `superblock.b`, written alternately (ping-pong); the valid
//! slot with the highest sequence wins. A record is 128 bytes:
//!
//! ```text
//! 0 magic u64 | 8 version u32 | 12 reserved u32 (zero) | 16 sequence u64 |
//! 24 partition_id u64 | 32 segment_start u64 | 40 durable_position u64 |
//! 48 durable_next_offset u64 | 56 stream_id u32 | 60 topic_id u32 | 64 nonce u64 |
//! 72 log_start u64 | 80 offsets_count u32 | 84 reserved u32 (zero) | 88 offsets_digest u64 |
//! 96..120 reserved (zero) | 120 checksum u64 = xxh3_64(bytes 0..120)
//! ```
//!
//! Each slot file holds the record twice, at offset 0 and at [`MIRROR_OFFSET`] (a page
//! apart), written by one write and made durable by one sync: a rotten sector, a bad sector
//! or a torn page can then not erase the newest record, which recovery needs to tell a torn
//! tail from lost acknowledged data.
//!
//! - `(segment_start, durable_position)` names the durable end: every byte of every segment
//!   before `segment_start`, and the first `durable_position` bytes of that segment, were
//!   synced before this record was written, and `durable_next_offset` is the offset that
//!   follows the last durable message. Recovery fences on invalid bytes below it and may
//!   truncate only above it.
//! - The identity (stream, topic and partition ids, and a nonce drawn when the partition was
//!   created) lets a restarted partition prove it is itself: a directory moved, copied or
//!   swapped in from elsewhere disagrees, and is fenced rather than adopted.
//! - `log_start` is the first offset the log holds: retention records it before it unlinks a
//!   segment, so a vanished oldest segment is damage, never a log that starts later.
//! - `offsets_count` / `offsets_digest` describe the set of consumers with a stored offset
//!   (under `persisted` offset durability; zero otherwise), so a vanished offset file is
//!   detected instead of read as "none".

use crate::env::Disk;
use crate::format::{get_u32, get_u64, put_u32, put_u64};
use std::fmt;
use std::io;
use std::path::Path;
use xxhash_rust::xxh3::xxh3_64;

pub const SUPERBLOCK_LEN: usize = crate::slots::RECORD_LEN;
const CHECKSUM_AT: usize = SUPERBLOCK_LEN - 8;
const _: () = assert!(
    SUPERBLOCK_LEN == 128 && CHECKSUM_AT == 120,
    "the layout above"
);
pub const SUPERBLOCK_MAGIC: u64 = u64::from_le_bytes(*b"CAIRNPSB");
pub const SUPERBLOCK_VERSION: u32 = 2;
pub const SLOT_NAMES: [&str; 2] = ["superblock.a", "superblock.b"];
pub use crate::slots::{MIRROR_OFFSET, SLOT_FILE_LEN};

/// The durable end of a partition log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurablePoint {
    pub segment_start: u64,
    pub position: u64,
    pub next_offset: u64,
}

/// Who a partition is: where it sits in the entity tree, and which creation made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionIdentity {
    pub stream_id: u32,
    pub topic_id: u32,
    pub partition_id: u32,
    /// Drawn from the environment's entropy when the partition was created (or purged).
    pub nonce: u64,
}

impl PartitionIdentity {
    /// A partition outside any stream or topic, with nonce zero: for tools and tests that
    /// work on one partition directory by itself.
    pub const fn bare(partition_id: u32) -> Self {
        PartitionIdentity {
            stream_id: 0,
            topic_id: 0,
            partition_id,
            nonce: 0,
        }
    }
}

impl fmt::Display for PartitionIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stream {} topic {} partition {} (nonce {:#018x})",
            self.stream_id, self.topic_id, self.partition_id, self.nonce
        )
    }
}

/// The set of consumers with a stored offset, as a count and an order-free digest (the sum
/// of each member's hash), so adding or removing one member is O(1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffsetSet {
    pub count: u32,
    pub digest: u64,
}

impl OffsetSet {
    /// The hash one member contributes.
    pub fn member_hash(kind: u16, id: u32) -> u64 {
        let mut key = [0u8; 6];
        key[..2].copy_from_slice(&kind.to_le_bytes());
        key[2..].copy_from_slice(&id.to_le_bytes());
        xxh3_64(&key)
    }

    pub fn with(self, member: u64) -> Self {
        OffsetSet {
            count: self.count + 1,
            digest: self.digest.wrapping_add(member),
        }
    }

    pub fn without(self, member: u64) -> Self {
        assert!(self.count > 0, "removing from an empty offset set");
        OffsetSet {
            count: self.count - 1,
            digest: self.digest.wrapping_sub(member),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub sequence: u64,
    pub identity: PartitionIdentity,
    pub durable: DurablePoint,
    pub log_start: u64,
    pub offsets: OffsetSet,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuperblockError {
    #[error("{found} bytes, expected {SUPERBLOCK_LEN}")]
    Length { found: usize },
    #[error("magic {found:#018x}, expected {SUPERBLOCK_MAGIC:#018x}")]
    Magic { found: u64 },
    #[error("version {found}, expected {SUPERBLOCK_VERSION}")]
    Version { found: u32 },
    #[error("reserved bytes are not zero")]
    Reserved,
    #[error("checksum: stored {stored:#018x}, computed {computed:#018x}")]
    Checksum { stored: u64, computed: u64 },
    #[error("log start {log_start} lies above the durable segment {segment_start}")]
    LogStartAboveDurable { log_start: u64, segment_start: u64 },
}

impl Superblock {
    /// The slot this superblock is written to.
    pub fn slot(&self) -> usize {
        (self.sequence % 2) as usize
    }

    /// The record that follows this one, with `change` applied.
    pub fn next(&self, change: impl FnOnce(&mut Superblock)) -> Superblock {
        let mut next = *self;
        next.sequence = self.sequence + 1;
        change(&mut next);
        assert_eq!(
            next.identity, self.identity,
            "a partition keeps its identity"
        );
        assert!(
            next.log_start >= self.log_start,
            "the log start only moves forward"
        );
        assert!(
            next.log_start <= next.durable.segment_start,
            "the log starts at or before the durable segment"
        );
        next
    }

    pub fn encode(&self) -> [u8; SUPERBLOCK_LEN] {
        let mut out = [0u8; SUPERBLOCK_LEN];
        put_u64(&mut out, 0, SUPERBLOCK_MAGIC);
        put_u32(&mut out, 8, SUPERBLOCK_VERSION);
        put_u64(&mut out, 16, self.sequence);
        put_u64(&mut out, 24, u64::from(self.identity.partition_id));
        put_u64(&mut out, 32, self.durable.segment_start);
        put_u64(&mut out, 40, self.durable.position);
        put_u64(&mut out, 48, self.durable.next_offset);
        put_u32(&mut out, 56, self.identity.stream_id);
        put_u32(&mut out, 60, self.identity.topic_id);
        put_u64(&mut out, 64, self.identity.nonce);
        put_u64(&mut out, 72, self.log_start);
        put_u32(&mut out, 80, self.offsets.count);
        put_u64(&mut out, 88, self.offsets.digest);
        let checksum = xxh3_64(&out[..CHECKSUM_AT]);
        put_u64(&mut out, CHECKSUM_AT, checksum);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, SuperblockError> {
        if bytes.len() != SUPERBLOCK_LEN {
            return Err(SuperblockError::Length { found: bytes.len() });
        }
        let stored = get_u64(bytes, CHECKSUM_AT);
        let computed = xxh3_64(&bytes[..CHECKSUM_AT]);
        if stored != computed {
            return Err(SuperblockError::Checksum { stored, computed });
        }
        let magic = get_u64(bytes, 0);
        if magic != SUPERBLOCK_MAGIC {
            return Err(SuperblockError::Magic { found: magic });
        }
        let version = get_u32(bytes, 8);
        if version != SUPERBLOCK_VERSION {
            return Err(SuperblockError::Version { found: version });
        }
        let partition_id = get_u64(bytes, 24);
        if get_u32(bytes, 12) != 0
            || get_u32(bytes, 84) != 0
            || bytes[96..CHECKSUM_AT].iter().any(|&b| b != 0)
        {
            return Err(SuperblockError::Reserved);
        }
        let Ok(partition_id) = u32::try_from(partition_id) else {
            return Err(SuperblockError::Reserved);
        };
        let (log_start, segment_start) = (get_u64(bytes, 72), get_u64(bytes, 32));
        if log_start > segment_start {
            return Err(SuperblockError::LogStartAboveDurable {
                log_start,
                segment_start,
            });
        }
        Ok(Superblock {
            sequence: get_u64(bytes, 16),
            identity: PartitionIdentity {
                stream_id: get_u32(bytes, 56),
                topic_id: get_u32(bytes, 60),
                partition_id,
                nonce: get_u64(bytes, 64),
            },
            durable: DurablePoint {
                segment_start: get_u64(bytes, 32),
                position: get_u64(bytes, 40),
                next_offset: get_u64(bytes, 48),
            },
            log_start: get_u64(bytes, 72),
            offsets: OffsetSet {
                count: get_u32(bytes, 80),
                digest: get_u64(bytes, 88),
            },
        })
    }
}

/// The identity the newest valid record in `dir`'s slots names, if any slot holds one.
pub fn read_identity(disk: &dyn Disk, dir: &Path) -> io::Result<Option<PartitionIdentity>> {
    if !disk.exists(dir)? {
        return Ok(None);
    }
    let entries = disk.read_dir(dir)?;
    let mut best: Option<Superblock> = None;
    for name in SLOT_NAMES {
        if let crate::slots::SlotBytes::Copies(copies) =
            crate::slots::read(disk, dir, &entries, name)
        {
            for record in copies
                .iter()
                .flatten()
                .filter_map(|b| Superblock::decode(b).ok())
            {
                if best.is_none_or(|b| record.sequence > b.sequence) {
                    best = Some(record);
                }
            }
        }
    }
    Ok(best.map(|b| b.identity))
}

/// Writes `superblock` into its slot file in `dir` (both copies, one write), syncs it, and
/// reads it back from the device (see [`crate::slots::write`]).
pub(crate) fn write_slot(disk: &dyn Disk, dir: &Path, superblock: &Superblock) -> io::Result<()> {
    let path = dir.join(SLOT_NAMES[superblock.slot()]);
    let _span = tracing::debug_span!("write_superblock", sequence = superblock.sequence).entered();
    crate::slots::write(disk, &path, &superblock.encode())
}

/// [`write_slot`] through `file`, the slot file of `superblock` in `dir` opened already.
pub(crate) fn write_slot_to(
    file: &dyn crate::env::DiskFile,
    dir: &Path,
    superblock: &Superblock,
) -> io::Result<()> {
    let path = dir.join(SLOT_NAMES[superblock.slot()]);
    let _span = tracing::debug_span!("write_superblock", sequence = superblock.sequence).entered();
    crate::slots::write_to(file, &path, &superblock.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_file_holds_two_copies_a_page_apart() {
        let sb = Superblock {
            sequence: 3,
            identity: PartitionIdentity::bare(1),
            durable: DurablePoint {
                segment_start: 0,
                position: 10,
                next_offset: 2,
            },
            log_start: 0,
            offsets: OffsetSet::default(),
        };
        let file = crate::slots::encode_file(&sb.encode());
        assert_eq!(file.len() as u64, SLOT_FILE_LEN);
        assert_eq!(Superblock::decode(&file[..SUPERBLOCK_LEN]), Ok(sb));
        assert_eq!(
            Superblock::decode(&file[MIRROR_OFFSET as usize..][..SUPERBLOCK_LEN]),
            Ok(sb)
        );
    }

    #[test]
    fn round_trip_and_every_bit_flip_detected() {
        let sb = Superblock {
            sequence: 9,
            identity: PartitionIdentity {
                stream_id: 2,
                topic_id: 3,
                partition_id: 4,
                nonce: 0xdead_beef,
            },
            durable: DurablePoint {
                segment_start: 1000,
                position: 4096,
                next_offset: 1017,
            },
            log_start: 500,
            offsets: OffsetSet {
                count: 2,
                digest: 77,
            },
        };
        let bytes = sb.encode();
        assert_eq!(Superblock::decode(&bytes), Ok(sb));
        assert_eq!(sb.slot(), 1);
        for bit in 0..SUPERBLOCK_LEN * 8 {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&damaged).is_err(), "bit {bit}");
        }
    }

    /// A record with a valid checksum that a future version (or a bug) wrote: each reserved
    /// field, a partition id beyond `u32` and a log start above the durable segment are
    /// refused, not read as something they are not.
    #[test]
    fn sealed_records_with_reserved_bits_or_an_impossible_log_start_are_refused() {
        let sb = Superblock {
            sequence: 1,
            identity: PartitionIdentity::bare(1),
            durable: DurablePoint {
                segment_start: 10,
                position: 0,
                next_offset: 10,
            },
            log_start: 10,
            offsets: OffsetSet::default(),
        };
        let sealed = |change: &dyn Fn(&mut [u8; SUPERBLOCK_LEN])| {
            let mut bytes = sb.encode();
            change(&mut bytes);
            let checksum = xxh3_64(&bytes[..CHECKSUM_AT]);
            put_u64(&mut bytes, CHECKSUM_AT, checksum);
            Superblock::decode(&bytes)
        };
        assert_eq!(sealed(&|_| {}), Ok(sb));
        for at in [12, 28, 84, 96, CHECKSUM_AT - 1] {
            assert_eq!(
                sealed(&|b| b[at] = 1),
                Err(SuperblockError::Reserved),
                "byte {at}"
            );
        }
        assert_eq!(
            sealed(&|b| put_u64(b, 72, 11)),
            Err(SuperblockError::LogStartAboveDurable {
                log_start: 11,
                segment_start: 10
            })
        );
    }
}

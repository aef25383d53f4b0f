//! The partition superblock: the durable record of how far the log is promised durable.
//!
//! Two slots, `superblock.a` and `superblock.b`, written alternately (ping-pong); the valid
//! slot with the highest sequence wins. A slot is 64 bytes:
//!
//! ```text
//! 0 magic u64 | 8 version u32 | 12 reserved u32 (zero) | 16 sequence u64 |
//! 24 partition_id u64 | 32 segment_start u64 | 40 durable_position u64 |
//! 48 durable_next_offset u64 | 56 checksum u64 = xxh3_64(bytes 0..56)
//! ```
//!
//! Each slot file holds the record twice, at offset 0 and at [`MIRROR_OFFSET`] (a page
//! apart), written by one write and made durable by one sync: a rotten sector, a bad sector
//! or a torn page can then not erase the newest record, which recovery needs to tell a torn
//! tail from lost acknowledged data.
//!
//! `(segment_start, durable_position)` names the durable end: every byte of every segment
//! before `segment_start`, and the first `durable_position` bytes of that segment, were
//! synced before this record was written, and `durable_next_offset` is the offset that
//! follows the last durable message. Recovery fences on invalid bytes below it and may
//! truncate only above it.

use crate::env::{Disk, OpenMode};
use crate::format::{get_u32, get_u64, put_u32, put_u64};
use std::io;
use std::path::Path;
use xxhash_rust::xxh3::xxh3_64;

pub const SUPERBLOCK_LEN: usize = 64;
pub const SUPERBLOCK_MAGIC: u64 = u64::from_le_bytes(*b"CAIRNPSB");
pub const SUPERBLOCK_VERSION: u32 = 1;
pub const SLOT_NAMES: [&str; 2] = ["superblock.a", "superblock.b"];
/// Where the second copy of the record lies in a slot file.
pub const MIRROR_OFFSET: u64 = 4096;
/// The exact length of a slot file.
pub const SLOT_FILE_LEN: u64 = MIRROR_OFFSET + SUPERBLOCK_LEN as u64;

/// The durable end of a partition log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurablePoint {
    pub segment_start: u64,
    pub position: u64,
    pub next_offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub sequence: u64,
    pub partition_id: u64,
    pub durable: DurablePoint,
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
}

impl Superblock {
    /// The slot this superblock is written to.
    pub fn slot(&self) -> usize {
        (self.sequence % 2) as usize
    }

    pub fn encode(&self) -> [u8; SUPERBLOCK_LEN] {
        let mut out = [0u8; SUPERBLOCK_LEN];
        put_u64(&mut out, 0, SUPERBLOCK_MAGIC);
        put_u32(&mut out, 8, SUPERBLOCK_VERSION);
        put_u64(&mut out, 16, self.sequence);
        put_u64(&mut out, 24, self.partition_id);
        put_u64(&mut out, 32, self.durable.segment_start);
        put_u64(&mut out, 40, self.durable.position);
        put_u64(&mut out, 48, self.durable.next_offset);
        let checksum = xxh3_64(&out[..56]);
        put_u64(&mut out, 56, checksum);
        out
    }

    /// The bytes of a slot file: the record at 0 and again at [`MIRROR_OFFSET`].
    pub fn encode_slot_file(&self) -> Vec<u8> {
        let record = self.encode();
        let mut file = vec![0u8; SLOT_FILE_LEN as usize];
        file[..SUPERBLOCK_LEN].copy_from_slice(&record);
        file[MIRROR_OFFSET as usize..].copy_from_slice(&record);
        file
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, SuperblockError> {
        if bytes.len() != SUPERBLOCK_LEN {
            return Err(SuperblockError::Length { found: bytes.len() });
        }
        let stored = get_u64(bytes, 56);
        let computed = xxh3_64(&bytes[..56]);
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
        if get_u32(bytes, 12) != 0 {
            return Err(SuperblockError::Reserved);
        }
        Ok(Superblock {
            sequence: get_u64(bytes, 16),
            partition_id: get_u64(bytes, 24),
            durable: DurablePoint {
                segment_start: get_u64(bytes, 32),
                position: get_u64(bytes, 40),
                next_offset: get_u64(bytes, 48),
            },
        })
    }
}

/// Writes `superblock` into its slot file in `dir` (both copies, one write), syncs it, and
/// reads the record back from the device (the cached page dropped first). A device that puts
/// a write at the wrong place keeps the slot's old bytes: the record that would have named
/// the durable end is elsewhere, so nothing may be acknowledged on it; that is an error.
pub(crate) fn write_slot(disk: &dyn Disk, dir: &Path, superblock: &Superblock) -> io::Result<()> {
    let path = dir.join(SLOT_NAMES[superblock.slot()]);
    let _span = tracing::debug_span!("write_superblock", path = %path.display(), sequence = superblock.sequence).entered();
    let file = disk.open(&path, OpenMode::CreateOrOpen)?;
    let bytes = superblock.encode_slot_file();
    file.write_all_at(&[io::IoSlice::new(&bytes)], 0)?;
    file.sync_data()?;
    file.evict_cache()?;
    let mut back = [0u8; SUPERBLOCK_LEN];
    file.read_exact_at(&mut back, 0)?;
    if back[..] != bytes[..SUPERBLOCK_LEN] {
        return Err(io::Error::other(format!(
            "superblock sequence {} read back from {} differs from what was written: the write landed elsewhere",
            superblock.sequence,
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_file_holds_two_copies_a_page_apart() {
        let sb = Superblock {
            sequence: 3,
            partition_id: 1,
            durable: DurablePoint {
                segment_start: 0,
                position: 10,
                next_offset: 2,
            },
        };
        let file = sb.encode_slot_file();
        assert_eq!(file.len() as u64, SLOT_FILE_LEN);
        assert_eq!(Superblock::decode(&file[..SUPERBLOCK_LEN]), Ok(sb));
        assert_eq!(Superblock::decode(&file[MIRROR_OFFSET as usize..]), Ok(sb));
    }

    #[test]
    fn round_trip_and_every_bit_flip_detected() {
        let sb = Superblock {
            sequence: 9,
            partition_id: 4,
            durable: DurablePoint {
                segment_start: 1000,
                position: 4096,
                next_offset: 1017,
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
}

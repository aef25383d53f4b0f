//! The metadata superblock: ping-pong checkpoint records in `metadata/superblock.a` / `.b`
//! (see [`crate::slots`]), the newest valid sequence winning. A record is 128 bytes:
//!
//! ```text
//! 0 magic u64 | 8 version u32 | 12 reserved u32 (zero) | 16 sequence u64 | 24 cluster u128 |
//! 40 snapshot_op u64 | 48 snapshot_len u64 | 56 snapshot_checksum u64 |
//! 64 snapshot_anchor u128 | 80 journal_len u64 | 88 journal_op u64 |
//! 96 journal_last u128 | 112 applied_op u64 | 120 checksum u64 = xxh3_64(bytes 0..120)
//! ```
//!
//! - `snapshot_*`: the checkpoint: `snapshot.bin` holds the state after op `snapshot_op`, is
//!   `snapshot_len` bytes with xxh3 `snapshot_checksum`; `snapshot_anchor` is the checksum of
//!   op `snapshot_op`'s prepare, the parent the next journal entry names (0 before op 1).
//! - `journal_*`: how far `journal.wal` is durable: its first `journal_len` bytes were synced
//!   before this record was written, ending with op `journal_op` whose prepare checksum is
//!   `journal_last`. Damage below it is corruption (refuse boot); above it, a torn tail.
//! - `applied_op`: the directory work (partition directories created, removed, purged) of
//!   every op up to here is done and durable. Boot redoes it for later ops only: a partition
//!   directory missing for an op at or below this is damage, never recreated empty.
//! - `cluster`: drawn from the environment's entropy at the first boot; every journal entry
//!   and every partition's creation nonce derives from it.

use crate::format::{get_u32, get_u64, put_u32, put_u64};
use crate::slots::RECORD_LEN;
use xxhash_rust::xxh3::xxh3_64;

pub const SLOT_NAMES: [&str; 2] = ["superblock.a", "superblock.b"];
const MAGIC: u64 = u64::from_le_bytes(*b"CAIRNMSB");
const VERSION: u32 = 1;
const CHECKSUM_AT: usize = RECORD_LEN - 8;
const _: () = assert!(
    RECORD_LEN == 128 && CHECKSUM_AT == 112 + 8,
    "the layout above: applied_op (112) ends where the checksum begins"
);

/// Where the checkpoint stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotRef {
    pub op: u64,
    pub len: u64,
    pub checksum: u64,
    pub anchor: u128,
}

/// How far the journal is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalPoint {
    pub len: u64,
    pub op: u64,
    pub last: u128,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaRecord {
    pub sequence: u64,
    pub cluster: u128,
    pub snapshot: SnapshotRef,
    pub journal: JournalPoint,
    pub applied_op: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("checksum: stored {stored:#018x}, computed {computed:#018x}")]
    Checksum { stored: u64, computed: u64 },
    #[error("magic {found:#018x}, version or reserved bytes are not a metadata record's")]
    Header { found: u64 },
    #[error("inconsistent: {0}")]
    Inconsistent(&'static str),
}

fn get_u128(bytes: &[u8], at: usize) -> u128 {
    u128::from_le_bytes(bytes[at..at + 16].try_into().expect("16 bytes"))
}

fn put_u128(out: &mut [u8], at: usize, value: u128) {
    out[at..at + 16].copy_from_slice(&value.to_le_bytes());
}

impl MetaRecord {
    pub fn slot(&self) -> usize {
        (self.sequence % 2) as usize
    }

    /// The record that follows this one, `change` applied.
    pub fn next(&self, change: impl FnOnce(&mut MetaRecord)) -> MetaRecord {
        let mut next = *self;
        next.sequence = self.sequence + 1;
        change(&mut next);
        assert_eq!(next.cluster, self.cluster, "a node keeps its cluster id");
        assert!(
            next.snapshot.op >= self.snapshot.op,
            "checkpoints only advance"
        );
        assert!(
            next.applied_op >= self.applied_op,
            "applied work only advances"
        );
        assert!(next.consistent().is_ok(), "{:?}", next.consistent());
        next
    }

    fn consistent(&self) -> Result<(), RecordError> {
        if self.journal.op < self.snapshot.op {
            return Err(RecordError::Inconsistent(
                "journal op below the snapshot op",
            ));
        }
        if self.applied_op > self.journal.op {
            return Err(RecordError::Inconsistent("applied op beyond the journal"));
        }
        Ok(())
    }

    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut out = [0u8; RECORD_LEN];
        put_u64(&mut out, 0, MAGIC);
        put_u32(&mut out, 8, VERSION);
        put_u64(&mut out, 16, self.sequence);
        put_u128(&mut out, 24, self.cluster);
        put_u64(&mut out, 40, self.snapshot.op);
        put_u64(&mut out, 48, self.snapshot.len);
        put_u64(&mut out, 56, self.snapshot.checksum);
        put_u128(&mut out, 64, self.snapshot.anchor);
        put_u64(&mut out, 80, self.journal.len);
        put_u64(&mut out, 88, self.journal.op);
        put_u128(&mut out, 96, self.journal.last);
        put_u64(&mut out, 112, self.applied_op);
        let checksum = xxh3_64(&out[..CHECKSUM_AT]);
        put_u64(&mut out, CHECKSUM_AT, checksum);
        out
    }

    pub fn decode(bytes: &[u8; RECORD_LEN]) -> Result<MetaRecord, RecordError> {
        let stored = get_u64(bytes, CHECKSUM_AT);
        let computed = xxh3_64(&bytes[..CHECKSUM_AT]);
        if stored != computed {
            return Err(RecordError::Checksum { stored, computed });
        }
        let magic = get_u64(bytes, 0);
        if magic != MAGIC || get_u32(bytes, 8) != VERSION || get_u32(bytes, 12) != 0 {
            return Err(RecordError::Header { found: magic });
        }
        let record = MetaRecord {
            sequence: get_u64(bytes, 16),
            cluster: get_u128(bytes, 24),
            snapshot: SnapshotRef {
                op: get_u64(bytes, 40),
                len: get_u64(bytes, 48),
                checksum: get_u64(bytes, 56),
                anchor: get_u128(bytes, 64),
            },
            journal: JournalPoint {
                len: get_u64(bytes, 80),
                op: get_u64(bytes, 88),
                last: get_u128(bytes, 96),
            },
            applied_op: get_u64(bytes, 112),
        };
        record.consistent()?;
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_bit_flip_detected() {
        let record = MetaRecord {
            sequence: 5,
            cluster: 0x1234_5678_9abc_def0_1122_3344_5566_7788,
            snapshot: SnapshotRef {
                op: 10,
                len: 300,
                checksum: 77,
                anchor: 99,
            },
            journal: JournalPoint {
                len: 4096,
                op: 17,
                last: 5,
            },
            applied_op: 16,
        };
        let bytes = record.encode();
        assert_eq!(MetaRecord::decode(&bytes), Ok(record));
        for bit in 0..RECORD_LEN * 8 {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(MetaRecord::decode(&damaged).is_err(), "bit {bit}");
        }
    }
}

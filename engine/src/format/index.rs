//! The sparse index entry: 24 bytes, no header, no padding, little-endian.
//!
//! `0 offset u64 | 8 timestamp u64 | 16 position u64` — the absolute offset and timestamp of
//! a flushed write's first batch and the byte position of that batch in the `.log` file.

use super::{get_u64, put_u64};

pub const INDEX_ENTRY_LEN: usize = 24;
const _: () = assert!(
    INDEX_ENTRY_LEN == 3 * 8,
    "offset, timestamp, position: a u64 each, no padding"
);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexEntry {
    pub offset: u64,
    pub timestamp: u64,
    pub position: u64,
}

impl IndexEntry {
    pub fn encode(&self) -> [u8; INDEX_ENTRY_LEN] {
        let mut out = [0u8; INDEX_ENTRY_LEN];
        put_u64(&mut out, 0, self.offset);
        put_u64(&mut out, 8, self.timestamp);
        put_u64(&mut out, 16, self.position);
        out
    }

    /// Decodes the first 24 bytes of `bytes`.
    pub fn decode(bytes: &[u8]) -> Self {
        assert!(bytes.len() >= INDEX_ENTRY_LEN);
        IndexEntry {
            offset: get_u64(bytes, 0),
            timestamp: get_u64(bytes, 8),
            position: get_u64(bytes, 16),
        }
    }

    /// Decodes a whole index file; a trailing partial entry is returned as the torn byte count.
    pub fn decode_all(bytes: &[u8]) -> (Vec<IndexEntry>, usize) {
        let whole = bytes.len() / INDEX_ENTRY_LEN;
        let entries = (0..whole)
            .map(|i| IndexEntry::decode(&bytes[i * INDEX_ENTRY_LEN..]))
            .collect();
        (entries, bytes.len() % INDEX_ENTRY_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(offset in any::<u64>(), timestamp in any::<u64>(), position in any::<u64>()) {
            let entry = IndexEntry { offset, timestamp, position };
            prop_assert_eq!(IndexEntry::decode(&entry.encode()), entry);
        }
    }
}

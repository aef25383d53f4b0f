//! `metadata/adopt.bin`: a state a clustered node is adopting whole (a snapshot its
//! cluster's leader sent), durable before the first piece of its directory work begins and
//! removed once the plane records the state as its checkpoint.
//!
//! ```text
//! 0 checksum u64 = xxh3_64(body) | 8 length u64 | 16 body: the snapshot format (`snapshot.rs`)
//! ```
//!
//! Written as `adopt.bin.tmp`, synced, renamed and the directory synced: `adopt.bin` is
//! whole once it exists, so one that does not verify is damage (boot refuses), while a
//! leftover temporary file is an adoption that never began (boot removes it). Boot finds an
//! adoption the plane has not recorded (its op above the journal's last) and finishes it:
//! the work between the replayed state and the adopted one, done as an op's work is redone,
//! then the checkpoint (`node::boot`).

use super::snapshot::{self, Snapshot};
use xxhash_rust::xxh3::xxh3_64;

pub const FILE: &str = "adopt.bin";
pub const TEMP: &str = "adopt.bin.tmp";
const HEADER: usize = 16;

/// The file's bytes for the state `snapshot` encodes.
pub fn encode(cluster: u128, op: u64, anchor: u128, state: &crate::state::MetaState) -> Vec<u8> {
    let body = snapshot::encode(cluster, op, anchor, state);
    let mut bytes = Vec::with_capacity(HEADER + body.len());
    bytes.extend_from_slice(&xxh3_64(&body).to_le_bytes());
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&body);
    bytes
}

/// The adopted state the file holds, or why it does not verify.
pub fn decode(bytes: &[u8]) -> Result<Snapshot, String> {
    if bytes.len() < HEADER {
        return Err(format!("{} bytes, shorter than its header", bytes.len()));
    }
    let checksum = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let body = &bytes[HEADER..];
    if len != body.len() as u64 {
        return Err(format!(
            "its header says {len} bytes, {} follow",
            body.len()
        ));
    }
    let computed = xxh3_64(body);
    if computed != checksum {
        return Err(format!(
            "checksum: stored {checksum:#018x}, computed {computed:#018x}"
        ));
    }
    Snapshot::decode(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MetaState;

    #[test]
    fn a_whole_file_decodes_and_any_flipped_or_missing_byte_is_refused() {
        let bytes = encode(9, 12, 77, &MetaState::default());
        let decoded = decode(&bytes).expect("decodes");
        assert_eq!((decoded.cluster, decoded.op, decoded.anchor), (9, 12, 77));
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            assert!(decode(&damaged).is_err(), "a flip at {at}");
            assert!(decode(&bytes[..at]).is_err(), "cut at {at}");
        }
    }
}

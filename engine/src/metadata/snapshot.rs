//! `metadata/snapshot.bin`: the whole metadata state at a checkpoint, as MessagePack
//! (`rmp-serde`). The superblock names it by op, length and xxh3 checksum; a checkpoint
//! writes `snapshot.bin.tmp` (synced) first, records it, then renames it over
//! `snapshot.bin`, so a crash leaves the recorded snapshot under one of the two names.
//!
//! The snapshot holds the state machine and nothing else: no client session table. Client
//! ids are minted per login and a session does not outlive its connection, so a table that
//! survived a restart could match no later request (version 1 had an always-empty one).

use crate::state::MetaState;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

pub const FILE: &str = "snapshot.bin";
pub const TEMP: &str = "snapshot.bin.tmp";
/// 2: no session table; groups and users carry the op that created them.
const VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Snapshot {
    pub version: u32,
    pub cluster: u128,
    /// The state after this op.
    pub op: u64,
    /// The checksum of op `op`'s prepare: the parent of the next journal entry.
    pub anchor: u128,
    pub state: MetaState,
}

/// What a checkpoint encodes: the live state borrowed, never cloned.
#[derive(Serialize)]
struct Encoded<'a> {
    version: u32,
    cluster: u128,
    op: u64,
    anchor: u128,
    state: &'a MetaState,
}

/// The snapshot bytes of `state` after op `op`.
pub fn encode(cluster: u128, op: u64, anchor: u128, state: &MetaState) -> Vec<u8> {
    rmp_serde::to_vec_named(&Encoded {
        version: VERSION,
        cluster,
        op,
        anchor,
        state,
    })
    .expect("the metadata state always serializes")
}

impl Snapshot {
    pub fn decode(bytes: &[u8]) -> Result<Snapshot, String> {
        let snapshot: Snapshot = rmp_serde::from_slice(bytes).map_err(|e| e.to_string())?;
        if snapshot.version != VERSION {
            return Err(format!("version {}, expected {VERSION}", snapshot.version));
        }
        if !snapshot.state.indexes_agree() {
            return Err("its names are not unique in their scopes".into());
        }
        Ok(snapshot)
    }
}

pub fn checksum(bytes: &[u8]) -> u64 {
    xxh3_64(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let state = MetaState::default();
        let bytes = encode(9, 4, 77, &state);
        let decoded = Snapshot::decode(&bytes).expect("decodes");
        assert_eq!((decoded.cluster, decoded.op, decoded.anchor), (9, 4, 77));
        assert_eq!(decoded.state, state);
        assert!(Snapshot::decode(b"garbage").is_err());
    }
}

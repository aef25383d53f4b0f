//! `metadata/snapshot.bin`: the whole metadata state at a checkpoint, as MessagePack
//! (`rmp-serde`). The superblock names it by op, length and xxh3 checksum; a checkpoint
//! writes `snapshot.bin.tmp` (synced) first, records it, then renames it over
//! `snapshot.bin`, so a crash leaves the recorded snapshot under one of the two names.

use crate::node::state::MetaState;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use xxhash_rust::xxh3::xxh3_64;

pub const FILE: &str = "snapshot.bin";
pub const TEMP: &str = "snapshot.bin.tmp";
const VERSION: u32 = 1;

/// A client session the node knows (the server fills this table; it survives restarts so
/// a reconnecting client's session can be recognised).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEntry {
    pub user_id: u32,
    pub last_request: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub version: u32,
    pub cluster: u128,
    /// The state after this op.
    pub op: u64,
    /// The checksum of op `op`'s prepare: the parent of the next journal entry.
    pub anchor: u128,
    pub state: MetaState,
    pub sessions: BTreeMap<u128, SessionEntry>,
}

impl Snapshot {
    pub fn new(cluster: u128, op: u64, anchor: u128, state: MetaState) -> Snapshot {
        Snapshot {
            version: VERSION,
            cluster,
            op,
            anchor,
            state,
            sessions: BTreeMap::new(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("the metadata state always serializes")
    }

    pub fn decode(bytes: &[u8]) -> Result<Snapshot, String> {
        let snapshot: Snapshot = rmp_serde::from_slice(bytes).map_err(|e| e.to_string())?;
        if snapshot.version != VERSION {
            return Err(format!("version {}, expected {VERSION}", snapshot.version));
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
        let snapshot = Snapshot::new(9, 4, 77, MetaState::default());
        assert_eq!(Snapshot::decode(&snapshot.encode()), Ok(snapshot));
        assert!(Snapshot::decode(b"garbage").is_err());
    }
}

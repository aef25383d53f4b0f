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
/// 3: users carry their personal access tokens (hashes only). A version-2 snapshot decodes
/// as one whose users hold none; a binary that knows only version 2 refuses a version 3
/// rather than drop the tokens.
/// 4: in a cluster, the state carries its proposals' keys (`state::proposals`); written
/// only when it does, so a single node's snapshots stay version 3, and a binary that knows
/// only version 3 refuses a cluster's rather than drop the keys (and apply a retry twice).
const VERSION: u32 = 4;
/// The version of a state that holds no proposals' keys.
const VERSION_UNKEYED: u32 = 3;
/// The oldest version this binary still reads.
const OLDEST_READ: u32 = 2;

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
    let version = match state.proposals().is_empty() {
        true => VERSION_UNKEYED,
        false => VERSION,
    };
    rmp_serde::to_vec_named(&Encoded {
        version,
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
        if !(OLDEST_READ..=VERSION).contains(&snapshot.version) {
            return Err(format!(
                "version {}, expected {OLDEST_READ} to {VERSION}",
                snapshot.version
            ));
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

    #[test]
    fn a_version_2_snapshot_decodes_with_tokenless_users_and_a_later_one_is_refused() {
        use std::collections::BTreeMap;
        // Version 2's users had no `tokens` field.
        #[derive(Serialize)]
        struct V2User {
            id: u32,
            username: String,
            password_hash: String,
            status: u8,
            permissions: Option<Vec<u8>>,
            created_at: u64,
            created_op: u64,
        }
        #[derive(Serialize)]
        struct V2State {
            streams: BTreeMap<u32, crate::state::Stream>,
            users: BTreeMap<u32, V2User>,
        }
        #[derive(Serialize)]
        struct V2 {
            version: u32,
            cluster: u128,
            op: u64,
            anchor: u128,
            state: V2State,
        }
        let mut v2 = V2 {
            version: 2,
            cluster: 9,
            op: 1,
            anchor: 5,
            state: V2State {
                streams: BTreeMap::new(),
                users: BTreeMap::from([(
                    0,
                    V2User {
                        id: 0,
                        username: "iggy".into(),
                        password_hash: "$argon2id$stand-in".into(),
                        status: 1,
                        permissions: None,
                        created_at: 3,
                        created_op: 1,
                    },
                )]),
            },
        };
        let decoded = Snapshot::decode(&rmp_serde::to_vec_named(&v2).unwrap()).expect("decodes");
        let root = decoded.state.user(0).expect("the user");
        assert_eq!(root.username, "iggy");
        assert!(root.tokens.is_empty());
        v2.version = VERSION + 1;
        assert!(Snapshot::decode(&rmp_serde::to_vec_named(&v2).unwrap()).is_err());
    }

    #[test]
    fn a_state_with_proposals_keys_is_version_4_and_one_without_stays_3() {
        use crate::state::ops::MetaOp;
        use crate::state::OpContext;
        use iggy_binary_protocol::requests::streams::CreateStreamRequest;
        use iggy_binary_protocol::{WireName, WireOptions};
        let mut state = MetaState::default();
        let version = |state: &MetaState| Snapshot::decode(&encode(9, 1, 0, state)).unwrap();
        assert_eq!(version(&state).version, 3);
        let ctx = OpContext {
            op: 1,
            timestamp: 7,
            cluster: 9,
            decided: crate::metadata::journal::decision(1, 1),
            proposal: 0xfeed,
            asked_at: 0,
        };
        let op = MetaOp::CreateStream(CreateStreamRequest {
            name: WireName::new("orders").unwrap(),
            options: WireOptions::empty(),
        });
        state.apply(&op, ctx).unwrap();
        let decoded = version(&state);
        assert_eq!(decoded.version, 4);
        assert_eq!(decoded.state, state, "the keys survive");
        assert!(!decoded.state.proposals().is_empty());
    }
}

//! `metadata/journal.wal`: the metadata write-ahead log. Each entry is a 256-byte
//! [`PrepareHeader`] (the type of `iggy_binary_protocol`, Iggy's consensus header) followed by
//! the operation's wire-format body, exactly as a client sends it (with a password replaced by
//! its hash). Pure functions over bytes; the I/O is in [`super::plane`].
//!
//! Fields a cairn entry sets: `checksum` = the prepare's identity checksum (covering the whole
//! header, hence `checksum_body`, hence the body); `checksum_body` = xxh3-64 of the body;
//! `cluster`; `size` = 256 + body; `command` = Prepare; `parent` = the previous entry's
//! checksum (a hash chain; the first entry after a checkpoint names the snapshot's anchor);
//! `op` (1, 2, 3, ... never reused); `commit` = the last op whose entry was durable (synced)
//! when this one was written, VSR's commit number: the entries of one write share it, so
//! boot can tell the entries of a torn last write (commit below every op of that write) from
//! entries written after damaged ones were durable; `timestamp` (wall-clock µs, the entities' creation time); `operation`;
//! `group` = the metadata group; `user_id` = the acting user; `client` / `request` = the
//! session's, when a client asked; `request_checksum` = in a cluster, the consensus decision
//! that ordered the op ([`decision`]), which boot reads back so that no decided op applies
//! twice.

use bytemuck::checked::try_pod_read_unaligned;
use iggy_binary_protocol::namespace::METADATA_GROUP;
use iggy_binary_protocol::{Command, ConsensusHeader, Operation, PrepareHeader, HEADER_SIZE};
use xxhash_rust::xxh3::xxh3_64;

/// Largest body an entry may carry; the state machine refuses any operation with a longer
/// one before it changes anything.
pub use crate::state::ops::MAX_BODY_LEN;

// An entry is Iggy's 256-byte prepare header, then the body; its `size` (u32) holds both.
const _: () = assert!(HEADER_SIZE == 256 && std::mem::size_of::<PrepareHeader>() == HEADER_SIZE);
const _: () = assert!(HEADER_SIZE + MAX_BODY_LEN <= u32::MAX as usize);

/// Who asked, and when: the fields of an entry besides its operation and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Origin {
    pub timestamp: u64,
    pub user_id: u32,
    /// On a single node, the session that asked, and its request number (a decided op
    /// keeps neither: they are one member's).
    pub client: u128,
    pub request: u64,
    /// In a cluster, the consensus decision that ordered the op ([`decision`]: its Raft
    /// term and index), stored in the prepare's `request_checksum`; 0 on a single node.
    pub decided: u128,
    /// In a decided op, its proposal's key (drawn by the member that asked, the same for
    /// each attempt, so a retry applies once: `state::proposals`) and the log index that
    /// member had applied when it first asked; stored in the prepare's `client` and
    /// `request` (entries of release [`KEYED_RELEASE`]).
    pub key: u128,
    pub asked_at: u64,
}

/// The prepare's `release` of an entry whose decided op's `client` and `request` hold its
/// proposal's key and asked-at index; entries written before (release 0) hold neither,
/// and their ops have no key.
pub const KEYED_RELEASE: u32 = 1;

/// A consensus decision as one number: the term in the high 64 bits, the index in the low.
/// Along one log the index grows and the term never falls, so later decisions are greater.
pub fn decision(term: u64, index: u64) -> u128 {
    assert!(index > 0, "a decided entry has an index");
    u128::from(term) << 64 | u128::from(index)
}

/// One decoded, self-consistent entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Where it starts in the journal.
    pub position: u64,
    pub len: u64,
    pub op: u64,
    /// The last op durable when this entry was written.
    pub commit: u64,
    pub parent: u128,
    pub checksum: u128,
    pub cluster: u128,
    pub operation: Operation,
    pub origin: Origin,
    pub body: Vec<u8>,
}

/// Why the bytes at a position are not an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryProblem {
    /// The journal ends inside it.
    Truncated {
        needed: u64,
        available: u64,
    },
    Invalid(String),
}

impl std::fmt::Display for EntryProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EntryProblem::Truncated { needed, available } => {
                write!(
                    f,
                    "incomplete entry: {available} bytes remain, {needed} needed"
                )
            }
            EntryProblem::Invalid(why) => write!(f, "invalid entry: {why}"),
        }
    }
}

/// The bytes of one entry: op `op`, written when ops up to `commit` were durable.
pub fn encode(
    op: u64,
    commit: u64,
    parent: u128,
    cluster: u128,
    operation: Operation,
    origin: Origin,
    body: &[u8],
) -> Vec<u8> {
    assert!(body.len() <= MAX_BODY_LEN, "metadata bodies are bounded");
    assert!(op > 0, "op numbers start at 1");
    assert!(commit < op, "an entry is written before it is durable");
    assert!(
        origin.key == 0 || origin.decided != 0,
        "only a decided op has a proposal's key"
    );
    let (client, request) = match origin.decided {
        0 => (origin.client, origin.request),
        _ => (origin.key, origin.asked_at),
    };
    let mut header = PrepareHeader {
        checksum_body: u128::from(xxh3_64(body)),
        cluster,
        size: u32::try_from(HEADER_SIZE + body.len()).expect("bounded"),
        // A single node's entries stay as they were.
        release: if origin.decided != 0 {
            KEYED_RELEASE
        } else {
            0
        },
        command: Command::Prepare,
        client,
        parent,
        op,
        commit,
        timestamp: origin.timestamp,
        request,
        request_checksum: origin.decided,
        operation,
        group: METADATA_GROUP,
        user_id: origin.user_id,
        ..PrepareHeader::default()
    };
    header.checksum = header.identity_checksum();
    let mut out = Vec::with_capacity(HEADER_SIZE + body.len());
    out.extend_from_slice(bytemuck::bytes_of(&header));
    out.extend_from_slice(body);
    out
}

/// The entry at `position` of `journal`, verified whole: header checksum, the header's own
/// rules, size, body checksum, group.
pub fn decode_at(journal: &[u8], position: u64) -> Result<Entry, EntryProblem> {
    let at = usize::try_from(position).expect("in memory");
    let rest = &journal[at.min(journal.len())..];
    if rest.len() < HEADER_SIZE {
        return Err(EntryProblem::Truncated {
            needed: HEADER_SIZE as u64,
            available: rest.len() as u64,
        });
    }
    let invalid = |why: String| EntryProblem::Invalid(why);
    let header: PrepareHeader = try_pod_read_unaligned(&rest[..HEADER_SIZE])
        .map_err(|e| invalid(format!("header does not decode: {e}")))?;
    let computed = header.identity_checksum();
    if header.checksum != computed {
        return Err(invalid(format!(
            "header checksum: stored {:#x}, computed {computed:#x}",
            header.checksum
        )));
    }
    header
        .validate()
        .map_err(|e| invalid(format!("header: {e}")))?;
    // `view` is outside the identity checksum (a re-stamped prepare keeps its identity);
    // a single node never re-stamps, so anything but zero is damage.
    if header.view != 0 {
        return Err(invalid(format!("view {} on a single node", header.view)));
    }
    if header.group != METADATA_GROUP || header.commit > header.op || header.op == 0 {
        return Err(invalid("not a cairn metadata prepare".into()));
    }
    let size = header.size as usize;
    if !(HEADER_SIZE..=HEADER_SIZE + MAX_BODY_LEN).contains(&size) {
        return Err(invalid(format!("size {size} out of bounds")));
    }
    if rest.len() < size {
        return Err(EntryProblem::Truncated {
            needed: size as u64,
            available: rest.len() as u64,
        });
    }
    let body = &rest[HEADER_SIZE..size];
    if header.checksum_body != u128::from(xxh3_64(body)) {
        return Err(invalid("body checksum".into()));
    }
    Ok(Entry {
        position,
        len: size as u64,
        op: header.op,
        commit: header.commit,
        parent: header.parent,
        checksum: header.checksum,
        cluster: header.cluster,
        operation: header.operation,
        origin: origin_of(&header),
        body: body.to_vec(),
    })
}

/// Who asked for the op of an entry with `header` ([`encode`]'s fields, by release).
fn origin_of(header: &PrepareHeader) -> Origin {
    let decided = header.request_checksum;
    let keyed = decided != 0 && header.release >= KEYED_RELEASE;
    let (client, request, key, asked_at) = match (decided, keyed) {
        (0, _) => (header.client, header.request, 0, 0),
        (_, true) => (0, 0, header.client, header.request),
        (_, false) => (0, 0, 0, 0),
    };
    Origin {
        timestamp: header.timestamp,
        user_id: header.user_id,
        client,
        request,
        decided,
        key,
        asked_at,
    }
}

/// The journal as a walk from byte zero found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    pub entries: Vec<Entry>,
    /// End of the last valid entry.
    pub valid_end: u64,
    /// Where and why the walk stopped before the end of the file.
    pub damage: Option<(u64, EntryProblem)>,
    /// The complete valid entries of this cluster found after the damage, in file order:
    /// whether the damage is a torn tail depends on when they were written.
    pub later: Vec<Later>,
}

/// A whole entry found after damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Later {
    pub position: u64,
    pub op: u64,
    pub commit: u64,
}

/// Most whole entries a scan collects after damage: more than one write holds (the metadata
/// owner journals at most 256 ops at once), so an entry of a later write is among them.
pub const MAX_LATER: usize = 512;

/// Walks `journal` from byte zero; after damage, searches every later position for whole
/// entries of `cluster`.
pub fn scan(journal: &[u8], cluster: u128) -> Scan {
    let mut entries = Vec::new();
    let mut position = 0u64;
    let mut damage = None;
    while position < journal.len() as u64 {
        match decode_at(journal, position) {
            Ok(entry) => {
                position += entry.len;
                entries.push(entry);
            }
            Err(problem) => {
                damage = Some((position, problem));
                break;
            }
        }
    }
    let mut later = Vec::new();
    if let Some((at, _)) = &damage {
        let mut p = at + 1;
        while p + HEADER_SIZE as u64 <= journal.len() as u64 && later.len() < MAX_LATER {
            let found = (journal[p as usize + 60] == Command::Prepare as u8)
                .then(|| decode_at(journal, p).ok())
                .flatten()
                .filter(|e| e.cluster == cluster);
            match found {
                Some(entry) => {
                    later.push(Later {
                        position: p,
                        op: entry.op,
                        commit: entry.commit,
                    });
                    p += entry.len;
                }
                None => p += 1,
            }
        }
    }
    Scan {
        entries,
        valid_end: position,
        damage,
        later,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn journal(n: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut parent = 0;
        for op in 1..=n {
            let entry = encode(
                op,
                op - 1,
                parent,
                7,
                Operation::CreateStream,
                Origin::default(),
                format!("body {op}").as_bytes(),
            );
            parent = decode_at(&entry, 0).unwrap().checksum;
            bytes.extend(entry);
        }
        bytes
    }

    #[test]
    fn entries_round_trip_with_a_hash_chain() {
        let bytes = journal(3);
        let scan = scan(&bytes, 7);
        assert_eq!(scan.entries.len(), 3);
        assert_eq!(scan.damage, None);
        assert_eq!(scan.entries[1].parent, scan.entries[0].checksum);
        assert_eq!(scan.entries[2].body, b"body 3");
        assert_eq!(scan.valid_end, bytes.len() as u64);
    }

    #[test]
    fn a_decided_entry_keeps_its_key_and_one_written_before_keys_has_none() {
        let session = Origin {
            timestamp: 5,
            user_id: 2,
            client: 0xc1,
            request: 4,
            ..Origin::default()
        };
        let decided = Origin {
            decided: decision(3, 9),
            key: 0x5eed,
            asked_at: 8,
            ..session
        };
        let write = |origin: Origin| encode(1, 0, 0, 7, Operation::CreateStream, origin, b"b");
        assert_eq!(decode_at(&write(session), 0).unwrap().origin, session);
        // A decided op keeps its key and asked-at index, not the session of one member.
        let back = decode_at(&write(decided), 0).unwrap().origin;
        assert_eq!(
            back,
            Origin {
                client: 0,
                request: 0,
                ..decided
            }
        );
        // An entry written before keys (release 0) held the session there: no key.
        let mut header: PrepareHeader =
            try_pod_read_unaligned(&write(decided)[..HEADER_SIZE]).unwrap();
        assert_eq!(header.release, KEYED_RELEASE);
        header.release = 0;
        let old = origin_of(&header);
        assert_eq!((old.key, old.asked_at, old.decided), (0, 0, decision(3, 9)));
    }

    #[test]
    fn a_torn_tail_has_nothing_after_it_and_interior_damage_does() {
        let bytes = journal(3);
        let second = scan(&bytes, 7).entries[1].position;
        let torn = &bytes[..bytes.len() - 5];
        let s = scan(torn, 7);
        assert_eq!(s.entries.len(), 2);
        assert!(matches!(
            s.damage,
            Some((_, EntryProblem::Truncated { .. }))
        ));
        assert_eq!(s.later, vec![]);
        let mut rotten = bytes.clone();
        rotten[second as usize + 100] ^= 1;
        let s = scan(&rotten, 7);
        assert_eq!(s.entries.len(), 1);
        assert_eq!(s.damage.as_ref().map(|d| d.0), Some(second));
        assert_eq!(
            s.later.iter().map(|l| (l.op, l.commit)).collect::<Vec<_>>(),
            vec![(3, 2)],
            "entry 3 is whole after the damage"
        );
    }

    #[test]
    fn every_bit_flip_of_an_entry_is_detected() {
        let bytes = journal(1);
        for bit in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_at(&damaged, 0).is_err(), "bit {bit}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_scan(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
            let s = scan(&bytes, 7);
            prop_assert!(s.valid_end <= bytes.len() as u64);
        }
    }
}

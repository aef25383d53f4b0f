//! Which superblock record recovery trusts: the two slot files as the survey read them
//! ([`SlotRead`]) and the rule that picks the record the durable end rests on
//! ([`trusted_record`]). The survey asks it before scanning the tail (where the tail begins
//! is the trusted record's durable segment); the decision rules start from it. Pure: no I/O.

use crate::partition::superblock::{PartitionIdentity, Superblock, SLOT_NAMES};
use crate::partition::FenceReason;
use std::path::{Path, PathBuf};

/// One superblock slot file as read from the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotRead {
    Missing,
    Unreadable(String),
    /// Longer than a slot file: a superblock write landed out of place.
    Oversized {
        len: u64,
    },
    /// Neither copy verifies.
    Damaged(String),
    /// The newer valid copy; `problems` names a copy that did not verify or holds an older
    /// record: the newest record then rests on one copy.
    Valid {
        record: Superblock,
        problems: Vec<String>,
    },
}

/// The superblock record recovery trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trusted {
    pub record: Superblock,
    /// The slot file holding it.
    pub path: PathBuf,
    /// The other slot, when it is missing, unreadable or damaged: it may have held a newer
    /// record, so the durable end may lie above `record`'s.
    pub uncertain: Option<PathBuf>,
    /// The other slot, when recovery writes the next record into it: `uncertain`, or
    /// `record` survives in one copy only (the other unreadable, damaged or older), where
    /// one more fault would erase it.
    pub rewrite: Option<PathBuf>,
}

/// Which record recovery trusts:
///
/// | slots found | decision |
/// |---|---|
/// | a slot file longer than one slot file | fence `SuperblockMisplaced` |
/// | a valid record of another partition (ids or creation nonce) | fence `SuperblockIdentity` |
/// | a valid record in the slot of the other parity | fence `SuperblockMisplaced` |
/// | no valid record | fence `NoSuperblock` |
/// | two valid records | the higher sequence |
/// | one valid record, the other slot missing, unreadable or damaged | that record, durable end uncertain |
///
/// The other slot is rewritten when it is uncertain or only one copy of the trusted record
/// verifies.
pub fn trusted_record(
    dir: &Path,
    identity: PartitionIdentity,
    slots: &[SlotRead; 2],
) -> Result<Trusted, FenceReason> {
    let path = |slot: usize| dir.join(SLOT_NAMES[slot]);
    let mut best: Option<(usize, Superblock)> = None;
    let mut problems = Vec::new();
    for (slot, read) in slots.iter().enumerate() {
        match read {
            SlotRead::Oversized { len } => {
                return Err(FenceReason::SuperblockMisplaced {
                    path: path(slot),
                    detail: format!("the slot file is {len} bytes, longer than one slot"),
                })
            }
            SlotRead::Valid { record, .. } if record.identity != identity => {
                return Err(FenceReason::SuperblockIdentity {
                    path: path(slot),
                    expected: identity,
                    found: record.identity,
                })
            }
            SlotRead::Valid { record, .. } if record.slot() != slot => {
                return Err(FenceReason::SuperblockMisplaced {
                    path: path(slot),
                    detail: format!(
                        "it holds sequence {}, which belongs in the other slot",
                        record.sequence
                    ),
                })
            }
            SlotRead::Valid { record, .. } => {
                if best.is_none_or(|(_, b)| record.sequence > b.sequence) {
                    best = Some((slot, *record));
                }
            }
            SlotRead::Missing => problems.push(format!("{} is missing", path(slot).display())),
            SlotRead::Unreadable(e) => {
                problems.push(format!("{} is unreadable: {e}", path(slot).display()))
            }
            SlotRead::Damaged(e) => {
                problems.push(format!("{} is damaged: {e}", path(slot).display()))
            }
        }
    }
    let Some((slot, record)) = best else {
        return Err(FenceReason::NoSuperblock {
            dir: dir.to_path_buf(),
            problems: problems.join("; "),
        });
    };
    let other = 1 - slot;
    let uncertain = match slots[other] {
        SlotRead::Valid { .. } => None,
        _ => Some(path(other)),
    };
    let degraded = matches!(&slots[slot], SlotRead::Valid { problems, .. } if !problems.is_empty());
    let rewrite = (uncertain.is_some() || degraded).then(|| path(other));
    Ok(Trusted {
        record,
        path: path(slot),
        uncertain,
        rewrite,
    })
}

//! The metadata plane's boot plan: what boot found in `{root}/metadata/` and what it will do,
//! in the same shape as the partition's recovery (`crate::partition::recovery`) and the
//! entity tree's (`crate::node::tree`): a [`survey`] reads, a [`decide`] table judges (its
//! module doc holds the table of cases), and [`plan`] interleaves them, reading only what the
//! decisions so far still need. Changes no byte: the vocabulary ([`actions`]: [`MetaRefusal`],
//! [`MetaAction`]; and [`MetaPlan`]) is what `cairn check` prints and what
//! [`crate::metadata::MetadataPlane::open`] carries out.

pub mod actions;
pub mod decide;
pub mod survey;

pub use actions::{Adopting, MetaAction, MetaRefusal, Replayed};
pub use survey::AdoptionFiles;

use super::record::MetaRecord;
use super::{MetadataError, DIR, JOURNAL};
use crate::env::{DirEntry, Disk};
use crate::state::MetaState;
use decide::Trust;
use std::path::{Path, PathBuf};
use survey::Slot;

/// What boot found in the metadata directory, and what it will do.
#[derive(Debug, Clone)]
pub struct MetaPlan {
    pub dir: PathBuf,
    /// Nothing is there yet: the node initialises the plane.
    pub first_boot: bool,
    pub record: Option<MetaRecord>,
    /// The state after the snapshot and the replayed entries.
    pub state: MetaState,
    /// The entries after the snapshot, in order.
    pub replayed: Vec<Replayed>,
    /// The end of the last valid entry (after the actions).
    pub journal_end: u64,
    /// The last op and its checksum (the snapshot's when no entry follows it).
    pub last_op: u64,
    pub last_checksum: u128,
    pub actions: Vec<MetaAction>,
    pub notes: Vec<String>,
    pub refusal: Option<MetaRefusal>,
    /// A state being adopted whole that the plane has not recorded yet: boot finishes it.
    pub adopting: Option<Adopting>,
}

impl MetaPlan {
    /// A plan with nothing in it yet.
    fn empty(dir: &Path) -> MetaPlan {
        MetaPlan {
            dir: dir.to_path_buf(),
            first_boot: false,
            record: None,
            state: MetaState::default(),
            replayed: Vec::new(),
            journal_end: 0,
            last_op: 0,
            last_checksum: 0,
            actions: Vec::new(),
            notes: Vec::new(),
            refusal: None,
            adopting: None,
        }
    }

    fn refused(dir: &Path, refusal: MetaRefusal, notes: Vec<String>) -> MetaPlan {
        MetaPlan {
            notes,
            refusal: Some(refusal),
            ..MetaPlan::empty(dir)
        }
    }
}
/// Reads the metadata directory of `root` and decides what boot does. Changes no bytes.
pub fn plan(disk: &dyn Disk, root: &Path) -> Result<MetaPlan, MetadataError> {
    let dir = root.join(DIR);
    let _span = tracing::info_span!("metadata_plan", dir = %dir.display()).entered();
    let entries = survey::list(disk, &dir).map_err(MetadataError::Disk)?;
    let slots = [0, 1].map(|s| survey::read_slot(disk, &dir, &entries, s));
    let trusted = match decide::trust(&dir, &slots) {
        Trust::Misplaced(refusal) => return Ok(MetaPlan::refused(&dir, refusal, Vec::new())),
        Trust::NoRecord => return no_record(disk, root, &dir, &entries, &slots),
        Trust::Record(trusted) => trusted,
    };
    let decide::Trusted {
        record,
        uncertain,
        notes,
        mut actions,
    } = trusted;
    let files = survey::read_snapshots(disk, &dir, &entries, record.snapshot.op != 0);
    let state = match decide::snapshot_state(&dir, &record, files, &mut actions) {
        Ok(state) => state,
        Err(refusal) => return Ok(MetaPlan::refused(&dir, refusal, notes)),
    };
    let journal_bytes = match survey::read_journal(disk, &dir, &entries) {
        Ok(bytes) => bytes,
        Err(refusal) => return Ok(MetaPlan::refused(&dir, refusal, notes)),
    };
    let walked = decide::walk_journal(
        &dir.join(JOURNAL),
        &journal_bytes,
        &record,
        uncertain.as_deref(),
        state,
    );
    let plan = match walked {
        Ok(walk) => {
            actions.extend(walk.actions);
            let found = survey::read_adoption(disk, &dir, &entries);
            let adopting = match decide::adoption(&dir, &record, found, walk.last_op, &mut actions)
            {
                Ok(adopting) => adopting,
                Err(refusal) => return Ok(MetaPlan::refused(&dir, refusal, notes)),
            };
            MetaPlan {
                dir: dir.clone(),
                first_boot: false,
                record: Some(record),
                state: walk.state,
                replayed: walk.replayed,
                journal_end: walk.end,
                last_op: walk.last_op,
                last_checksum: walk.last_checksum,
                actions,
                notes,
                refusal: None,
                adopting,
            }
        }
        Err(refusal) => MetaPlan::refused(&dir, refusal, notes),
    };
    Ok(plan)
}

/// No valid record (rows 2-4 of [`decide`]): a first boot when nothing was ever committed,
/// else a refusal.
fn no_record(
    disk: &dyn Disk,
    root: &Path,
    dir: &Path,
    entries: &[DirEntry],
    slots: &[Slot; 2],
) -> Result<MetaPlan, MetadataError> {
    let journal_empty =
        survey::journal_is_empty(disk, dir, entries).map_err(MetadataError::Disk)?;
    if !decide::nothing_committed(entries, slots, journal_empty) {
        return Ok(MetaPlan::refused(
            dir,
            decide::no_superblock(dir, slots),
            Vec::new(),
        ));
    }
    if survey::has_partition_data(disk, root).map_err(MetadataError::Disk)? {
        return Ok(MetaPlan::refused(
            dir,
            MetaRefusal::DataWithoutMetadata {
                streams: root.join("streams"),
            },
            Vec::new(),
        ));
    }
    Ok(MetaPlan {
        first_boot: true,
        ..MetaPlan::empty(dir)
    })
}

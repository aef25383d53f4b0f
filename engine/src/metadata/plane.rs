//! The open metadata plane: the write path. An operation is journaled and synced
//! ([`MetadataPlane::append`], or [`MetadataPlane::write_entries`] then
//! [`MetadataPlane::sync_entries`]) before it is applied or answered; a superblock record
//! names the new durable journal end ([`MetadataPlane::record_journal`]) before the directory
//! work of its ops, and the applied op after it ([`MetadataPlane::record_applied`]); every
//! `checkpoint_bytes` of journal a checkpoint ([`MetadataPlane::checkpoint`]) writes the whole
//! state as the snapshot and empties the journal. [`MetadataPlane::open`] carries out a boot
//! plan's repairs (see [`super::plan`]) before any of this.

use super::error::{at, MetadataError};
use super::journal::{self, Origin};
use super::plan::{MetaAction, MetaPlan};
use super::record::{JournalPoint, MetaRecord, SnapshotRef, SLOT_NAMES};
use super::{adoption, snapshot, JOURNAL};
use crate::env::{Disk, DiskFile, Env, OpenMode};
use crate::slots;
use crate::state::ops::MetaOp;
use crate::state::MetaState;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How often the plane checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaSettings {
    /// A checkpoint follows any batch that leaves the journal at least this long.
    pub checkpoint_bytes: u64,
    /// In a cluster, the cluster's id as configured: a first boot takes it (so every member
    /// draws the same partition nonces for the same decided op), a later boot refuses a
    /// plane made for another; the node's metadata ops are then decided by the cluster
    /// (`node::Decider`). `None` on a single node: a first boot draws one.
    pub cluster: Option<u128>,
}

impl Default for MetaSettings {
    fn default() -> Self {
        MetaSettings {
            checkpoint_bytes: 4 * 1024 * 1024,
            cluster: None,
        }
    }
}

/// Entries written but not yet synced: where the journal will end once they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    end: u64,
    last_op: u64,
    last_checksum: u128,
}

/// The open metadata plane.
pub struct MetadataPlane {
    /// The disk the plane writes through.
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    journal: Box<dyn DiskFile>,
    record: MetaRecord,
    journal_end: u64,
    last_op: u64,
    last_checksum: u128,
    settings: MetaSettings,
    /// The journal length at which the next checkpoint is wanted: `checkpoint_bytes`, or
    /// further on after one found no space.
    checkpoint_at: u64,
}

/// How a checkpoint ended when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkpointed {
    Done,
    /// No space for the snapshot: nothing changed (its temporary file is removed); the
    /// next attempt waits for another `checkpoint_bytes` of journal.
    NoSpace,
}

/// Syncs `dir` and every directory above it, so the names under them survive a power loss.
fn sync_ancestors(disk: &dyn Disk, dir: &Path) -> Result<(), MetadataError> {
    for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
        disk.sync_dir(ancestor).map_err(at("sync", ancestor))?;
    }
    Ok(())
}

impl MetadataPlane {
    /// Opens the plane a plan allows (first boot: initialises it), carrying out the plan's
    /// actions durably. The caller redoes the directory work of replayed entries after
    /// [`MetadataPlane::applied_op`] and then calls [`MetadataPlane::record_applied`].
    pub fn open(
        env: &Env,
        plan: &MetaPlan,
        settings: MetaSettings,
    ) -> Result<MetadataPlane, MetadataError> {
        assert!(plan.refusal.is_none(), "a refused plan is never opened");
        let shared = env.disk.clone();
        let disk = shared.as_ref();
        let dir = plan.dir.clone();
        let journal_path = dir.join(JOURNAL);
        if plan.first_boot {
            return Self::initialise(env, shared.clone(), &dir, settings);
        }
        let record = plan
            .record
            .expect("a plan that is not a first boot has a record");
        for action in &plan.actions {
            tracing::info!(%action, "metadata recovery applying");
            match action {
                MetaAction::TruncateJournal { from, .. } => {
                    let file = disk
                        .open(&journal_path, OpenMode::ReadWrite)
                        .map_err(at("open", &journal_path))?;
                    file.set_len(*from).map_err(at("truncate", &journal_path))?;
                    file.sync_data().map_err(at("sync", &journal_path))?;
                }
                MetaAction::FinishSnapshot => {
                    disk.rename(&dir.join(snapshot::TEMP), &dir.join(snapshot::FILE))
                        .map_err(at("rename", &dir))?;
                    disk.sync_dir(&dir).map_err(at("sync", &dir))?;
                }
                MetaAction::RemoveTempSnapshot => {
                    disk.remove_file(&dir.join(snapshot::TEMP))
                        .map_err(at("remove", &dir))?;
                    disk.sync_dir(&dir).map_err(at("sync", &dir))?;
                }
                MetaAction::RemoveTempAdoption => {
                    disk.remove_file(&dir.join(adoption::TEMP))
                        .map_err(at("remove", &dir))?;
                    disk.sync_dir(&dir).map_err(at("sync", &dir))?;
                }
                MetaAction::RemoveAdoption => {
                    disk.remove_file(&dir.join(adoption::FILE))
                        .map_err(at("remove", &dir))?;
                    disk.sync_dir(&dir).map_err(at("sync", &dir))?;
                }
                // Done once the plane is open (it writes records).
                MetaAction::RewriteSlot { .. } => {}
            }
        }
        let journal = disk
            .open(&journal_path, OpenMode::CreateOrOpen)
            .map_err(at("open", &journal_path))?;
        // Valid entries above the recorded end may still be dirty pages (a crash between
        // their write and their sync): make them durable before anything rests on them.
        journal.sync_data().map_err(at("sync", &journal_path))?;
        // So may the names: a first boot cut short before its directory syncs left the
        // superblock, the journal and the metadata directory itself named only in the cache.
        sync_ancestors(disk, &dir)?;
        assert_eq!(
            journal.len().map_err(MetadataError::Disk)?,
            plan.journal_end,
            "the plan's actions left the journal"
        );
        let mut plane = MetadataPlane {
            disk: shared.clone(),
            dir,
            journal,
            record,
            journal_end: plan.journal_end,
            last_op: plan.last_op,
            last_checksum: plan.last_checksum,
            settings,
            checkpoint_at: settings.checkpoint_bytes,
        };
        if plan
            .actions
            .iter()
            .any(|a| matches!(a, MetaAction::RewriteSlot { .. }))
        {
            // The next record goes into the other slot, the one after into the degraded one.
            for _ in 0..2 {
                plane.write_record(|_| {})?;
            }
        }
        Ok(plane)
    }

    fn initialise(
        env: &Env,
        shared: Arc<dyn Disk>,
        dir: &Path,
        settings: MetaSettings,
    ) -> Result<MetadataPlane, MetadataError> {
        let disk = shared.as_ref();
        let _span = tracing::info_span!("metadata_initialise", dir = %dir.display()).entered();
        disk.create_dir_all(dir).map_err(at("create", dir))?;
        let journal_path = dir.join(JOURNAL);
        let journal = disk
            .open(&journal_path, OpenMode::CreateOrOpen)
            .map_err(at("create", &journal_path))?;
        journal.set_len(0).map_err(at("truncate", &journal_path))?;
        journal.sync_data().map_err(at("sync", &journal_path))?;
        let cluster = settings.cluster.unwrap_or_else(|| {
            (u128::from(env.entropy.next_u64()) << 64 | u128::from(env.entropy.next_u64())).max(1)
        });
        let mut record = MetaRecord {
            sequence: 0,
            cluster,
            snapshot: SnapshotRef::default(),
            journal: JournalPoint::default(),
            applied_op: 0,
        };
        // Each slot appears whole or not at all: a crash here leaves no slot (the next boot
        // is a first boot again) or a valid record (the next boot completes this one).
        for sequence in [0, 1] {
            record.sequence = sequence;
            let path = dir.join(SLOT_NAMES[record.slot()]);
            slots::create(disk, &path, &record.encode()).map_err(at("create", &path))?;
        }
        // Every ancestor: the data root itself may have just been created.
        sync_ancestors(disk, dir)?;
        Ok(MetadataPlane {
            disk: shared.clone(),
            dir: dir.to_path_buf(),
            journal,
            record,
            journal_end: 0,
            last_op: 0,
            last_checksum: 0,
            settings,
            checkpoint_at: settings.checkpoint_bytes,
        })
    }

    pub fn cluster(&self) -> u128 {
        self.record.cluster
    }

    pub fn last_op(&self) -> u64 {
        self.last_op
    }

    pub fn applied_op(&self) -> u64 {
        self.record.applied_op
    }

    /// Between batches: the record names the journal's end, its last op and that op's
    /// checksum, and every op as applied.
    pub fn assert_recorded(&self) {
        let end = JournalPoint {
            len: self.journal_end,
            op: self.last_op,
            last: self.last_checksum,
        };
        assert_eq!(
            self.record.journal, end,
            "the record names the journal's end"
        );
        assert_eq!(
            self.record.applied_op, self.last_op,
            "the record names every op applied"
        );
    }

    /// Journals `ops` (numbered from the op after the last one on) with one write and one sync.
    /// An error leaves the journal's state unknown: see [`Self::cut_back`].
    pub fn append(&mut self, ops: &[(MetaOp, Origin)]) -> Result<(), MetadataError> {
        let written = self.write_entries(ops)?;
        self.sync_entries(written)
    }

    /// Writes the entries of `ops` (numbered from the op after the last one on) after the
    /// journal's end, in one write. Nothing counts until [`Self::sync_entries`] returns.
    pub fn write_entries(&mut self, ops: &[(MetaOp, Origin)]) -> Result<Written, MetadataError> {
        assert!(!ops.is_empty(), "a journal write holds at least one entry");
        let path = self.dir.join(JOURNAL);
        let _span =
            tracing::debug_span!("metadata_write", ops = ops.len(), from = self.last_op + 1)
                .entered();
        let mut bytes = Vec::new();
        let (mut op, mut parent) = (self.last_op, self.last_checksum);
        for (meta_op, origin) in ops {
            op += 1;
            // Every entry of one write names the same commit: the last op synced before it.
            let entry = journal::encode(
                op,
                self.last_op,
                parent,
                self.record.cluster,
                meta_op.operation(),
                *origin,
                &meta_op.body(),
            );
            parent = journal::decode_at(&entry, 0)
                .expect("an entry just encoded decodes")
                .checksum;
            bytes.extend(entry);
        }
        debug_assert_eq!(
            op,
            self.last_op + ops.len() as u64,
            "one entry per op, numbered in order"
        );
        self.journal
            .write_all_at(&[io::IoSlice::new(&bytes)], self.journal_end)
            .map_err(at("write", &path))?;
        Ok(Written {
            end: self.journal_end + bytes.len() as u64,
            last_op: op,
            last_checksum: parent,
        })
    }

    /// Syncs what [`Self::write_entries`] wrote; only then is it the journal's.
    pub fn sync_entries(&mut self, written: Written) -> Result<(), MetadataError> {
        let path = self.dir.join(JOURNAL);
        let _span = tracing::debug_span!("metadata_sync", to = written.last_op).entered();
        self.journal.sync_data().map_err(at("sync", &path))?;
        assert!(written.end > self.journal_end && written.last_op > self.last_op);
        self.journal_end = written.end;
        self.last_op = written.last_op;
        self.last_checksum = written.last_checksum;
        Ok(())
    }

    /// After a write or sync of entries failed: cuts the journal back to its durable end
    /// and syncs the cut, so the refused entries can never reappear (a power loss could
    /// otherwise keep some of their pages). An error here leaves the journal unknown.
    pub fn cut_back(&mut self) -> Result<(), MetadataError> {
        let path = self.dir.join(JOURNAL);
        tracing::warn!(
            end = self.journal_end,
            "cutting the metadata journal back after a failed write"
        );
        self.journal
            .set_len(self.journal_end)
            .map_err(at("truncate", &path))?;
        self.journal.sync_data().map_err(at("sync", &path))
    }

    /// Records that the journal is durable to its end, before the directory work of its
    /// newest ops begins: rot in those entries is then damage below the durable end (boot
    /// refuses) rather than a torn tail, which boot would drop though the ops' work was
    /// done. Boot redoes their work until [`Self::record_applied`].
    pub fn record_journal(&mut self) -> Result<(), MetadataError> {
        let (end, op, last) = (self.journal_end, self.last_op, self.last_checksum);
        assert!(
            op > self.record.applied_op,
            "recorded before the work it precedes"
        );
        self.write_record(|r| r.journal = JournalPoint { len: end, op, last })
    }

    /// Records that the journal is durable to its end and that the directory work of every
    /// op so far is done.
    pub fn record_applied(&mut self) -> Result<(), MetadataError> {
        let (end, op, last) = (self.journal_end, self.last_op, self.last_checksum);
        self.write_record(|r| {
            r.journal = JournalPoint { len: end, op, last };
            r.applied_op = op;
        })
    }

    fn write_record(&mut self, change: impl FnOnce(&mut MetaRecord)) -> Result<(), MetadataError> {
        let next = self.record.next(change);
        let path = self.dir.join(SLOT_NAMES[next.slot()]);
        let disk = self.disk.as_ref();
        if disk.exists(&path).map_err(at("stat", &path))? {
            slots::write(disk, &path, &next.encode()).map_err(at("write", &path))?;
        } else {
            // A slot that went missing (or a first boot cut short) is re-created whole, and
            // its name made durable before anything rests on it.
            slots::create(disk, &path, &next.encode()).map_err(at("create", &path))?;
            disk.sync_dir(&self.dir).map_err(at("sync", &self.dir))?;
        }
        self.record = next;
        Ok(())
    }

    /// Whether the journal has grown enough for a checkpoint.
    pub fn wants_checkpoint(&self) -> bool {
        self.journal_end >= self.checkpoint_at
    }

    /// Writes `state` (the state after [`Self::last_op`], its directory work done) as the
    /// snapshot, records it, and empties the journal.
    pub fn checkpoint(&mut self, state: &MetaState) -> Result<Checkpointed, MetadataError> {
        assert_eq!(
            self.record.applied_op, self.last_op,
            "checkpoints follow applied work"
        );
        let disk = self.disk.clone();
        let _span = tracing::info_span!("metadata_checkpoint", op = self.last_op).entered();
        let bytes = snapshot::encode(self.record.cluster, self.last_op, self.last_checksum, state);
        let temp = self.dir.join(snapshot::TEMP);
        match self.write_temp_snapshot(&temp, &bytes) {
            Ok(()) => {}
            Err(error) if error.is_no_space() => {
                tracing::warn!(%error, "no space for a metadata checkpoint: trying again later");
                let _ = disk.remove_file(&temp);
                self.checkpoint_at = self.journal_end + self.settings.checkpoint_bytes;
                return Ok(Checkpointed::NoSpace);
            }
            Err(error) => return Err(error),
        }
        self.record_checkpoint(&bytes, self.last_op, self.last_checksum)?;
        Ok(Checkpointed::Done)
    }

    /// Records the snapshot `bytes`, written and synced as `snapshot.bin.tmp`, as the
    /// checkpoint after op `op` (whose prepare's checksum is `anchor`), every op up to it
    /// applied; then renames it into place and empties the journal.
    fn record_checkpoint(
        &mut self,
        bytes: &[u8],
        op: u64,
        anchor: u128,
    ) -> Result<(), MetadataError> {
        let snapshot_ref = SnapshotRef {
            op,
            len: bytes.len() as u64,
            checksum: snapshot::checksum(bytes),
            anchor,
        };
        self.write_record(|r| {
            r.snapshot = snapshot_ref;
            r.journal = JournalPoint {
                len: 0,
                op,
                last: anchor,
            };
            r.applied_op = op;
        })?;
        let (disk, temp) = (self.disk.clone(), self.dir.join(snapshot::TEMP));
        disk.rename(&temp, &self.dir.join(snapshot::FILE))
            .map_err(at("rename", &temp))?;
        disk.sync_dir(&self.dir).map_err(at("sync", &self.dir))?;
        let path = self.dir.join(JOURNAL);
        self.journal.set_len(0).map_err(at("truncate", &path))?;
        self.journal.sync_data().map_err(at("sync", &path))?;
        (self.journal_end, self.last_op, self.last_checksum) = (0, op, anchor);
        self.checkpoint_at = self.settings.checkpoint_bytes;
        Ok(())
    }

    /// Makes `state`, the state after op `op` (whose prepare's checksum is `anchor`), the
    /// state being adopted: `adopt.bin` is durable and whole when this returns, and boot
    /// finishes the adoption from here on (`crate::metadata::adoption`). A failure leaves
    /// at most the temporary file, which boot removes.
    pub fn begin_adoption(
        &mut self,
        op: u64,
        anchor: u128,
        state: &MetaState,
    ) -> Result<(), MetadataError> {
        assert!(
            op > self.last_op,
            "an adopted state is newer than the journal"
        );
        assert_eq!(
            self.record.applied_op, self.last_op,
            "an adoption begins after every op's work"
        );
        let _span = tracing::info_span!("metadata_adopt_begin", op).entered();
        let bytes = adoption::encode(self.record.cluster, op, anchor, state);
        let temp = self.dir.join(adoption::TEMP);
        self.write_temp_snapshot(&temp, &bytes)?;
        self.disk
            .rename(&temp, &self.dir.join(adoption::FILE))
            .map_err(at("rename", &temp))?;
        self.disk.sync_dir(&self.dir).map_err(at("sync", &self.dir))
    }

    /// Finishes the adoption [`Self::begin_adoption`] began, once its directory work is
    /// done: `state` becomes the checkpoint at op `op`, every op up to it applied, the
    /// journal empty, and `adopt.bin` is removed.
    pub fn finish_adoption(
        &mut self,
        op: u64,
        anchor: u128,
        state: &MetaState,
    ) -> Result<(), MetadataError> {
        assert!(
            op > self.last_op,
            "an adopted state is newer than the journal"
        );
        let _span = tracing::info_span!("metadata_adopt_finish", op).entered();
        let bytes = snapshot::encode(self.record.cluster, op, anchor, state);
        self.write_temp_snapshot(&self.dir.join(snapshot::TEMP), &bytes)?;
        self.record_checkpoint(&bytes, op, anchor)?;
        let adopted = self.dir.join(adoption::FILE);
        self.disk
            .remove_file(&adopted)
            .map_err(at("remove", &adopted))?;
        self.disk.sync_dir(&self.dir).map_err(at("sync", &self.dir))
    }

    /// The snapshot under its temporary name, synced with its name: nothing refers to it
    /// yet, so a failure here changes nothing.
    fn write_temp_snapshot(&self, temp: &Path, bytes: &[u8]) -> Result<(), MetadataError> {
        let file = self
            .disk
            .open(temp, OpenMode::CreateOrOpen)
            .map_err(at("create", temp))?;
        file.set_len(0).map_err(at("truncate", temp))?;
        file.write_all_at(&[io::IoSlice::new(bytes)], 0)
            .map_err(at("write", temp))?;
        file.sync_data().map_err(at("sync", temp))?;
        drop(file);
        self.disk.sync_dir(&self.dir).map_err(at("sync", &self.dir))
    }
}

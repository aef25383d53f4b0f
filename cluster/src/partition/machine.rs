//! A partition group's state machine: each committed send stamped into the partition.
//!
//! | entry | apply |
//! |---|---|
//! | a send whose batch ends at or below what the partition held when opened | already in the segments (applied before a restart, after the last checkpoint): skipped, its offsets counted |
//! | any other send | admitted and stamped at the next offset with the leader's timestamp (`Partition::append_at`); the partition shows it at once |
//! | a blank or membership entry | nothing in the partition (a membership is recorded) |
//! | a send the partition refuses, or an I/O failure | the replica stops (an error to openraft): a replica that skipped a committed send would hold other bytes at its offsets than its peers |
//!
//! **Checkpoint** (openraft's snapshot of this machine, file `checkpoint` in the group's
//! directory): the partition persisted (every segment synced), then the applied entry, the
//! membership and the partition's next offset written whole. Boot reads it: entries after
//! it are applied again, and those whose batches the segments still hold are skipped by the
//! first row. A partition that holds less than its checkpoint says was synced is damage.
//!
//! A checkpoint holds no messages, so it cannot catch up a follower behind the leader's
//! purged WAL: installing one refuses unless the partition already holds every batch it
//! names (issue 24's catch-up by snapshot will send segments).

use super::{PartConfig, PartEntry, PartMembership, PartSnapshot, PartSnapshotMeta, SendOutcome};
use crate::sm::{read_whole, write_whole};
use crate::types::LogId;
use bytes::BytesMut;
use cairn_engine::env::Disk;
use cairn_engine::format::BatchHeader;
use cairn_engine::partition::Partition;
use futures_util::StreamExt;
use openraft::entry::RaftEntry;
use openraft::storage::EntryResponder;
use openraft::{EntryPayload, RaftSnapshotBuilder};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The checkpoint's file in the group's directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// The largest checkpoint read back (a membership and a few numbers).
const MAX_CHECKPOINT_LEN: u64 = 1 << 20;

/// What a checkpoint records: every entry through `meta.last_log_id` is applied and the
/// partition's segments, synced, hold every batch below `next_offset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Checkpoint {
    meta: PartSnapshotMeta,
    next_offset: u64,
}

/// The partition a group's committed sends are applied to; clones share it.
#[derive(Clone)]
pub struct PartMachine {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    partition: Partition,
    applied: Option<LogId>,
    membership: PartMembership,
    /// The offset the next applied send starts at.
    next: u64,
    /// The partition's next offset when it was opened: sends ending at or below it are in
    /// the segments already.
    held: u64,
    /// Sends the first row of the table skipped since the machine opened.
    skipped: u64,
    checkpoint: Option<Checkpoint>,
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl PartMachine {
    /// The machine of the group whose directory is `dir`, over `partition` (opened by
    /// recovery, or new).
    pub fn open(disk: Arc<dyn Disk>, dir: &Path, partition: Partition) -> io::Result<Self> {
        let checkpoint: Option<Checkpoint> =
            read_whole(&*disk, &dir.join(CHECKPOINT_FILE), MAX_CHECKPOINT_LEN)?;
        let held = partition.next_offset().map_err(io::Error::other)?;
        let next = checkpoint.as_ref().map_or(0, |c| c.next_offset);
        if held < next {
            return Err(invalid(format!(
                "the partition in {} holds offsets below {held}, its checkpoint says {next} were synced",
                dir.display()
            )));
        }
        let (applied, membership) = checkpoint.as_ref().map_or_else(Default::default, |c| {
            (c.meta.last_log_id, c.meta.last_membership.clone())
        });
        let inner = Inner {
            disk,
            dir: dir.to_owned(),
            partition,
            applied,
            membership,
            next,
            held,
            skipped: 0,
            checkpoint,
        };
        Ok(PartMachine {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `read` run on the partition (polls, its offsets), between applies.
    pub fn with_partition<T>(&self, read: impl FnOnce(&mut Partition) -> T) -> T {
        read(&mut self.lock().partition)
    }

    /// Sends found in the segments already when applied (since the machine opened).
    pub fn skipped(&self) -> u64 {
        self.lock().skipped
    }

    /// The last entry applied.
    pub fn applied(&self) -> Option<LogId> {
        self.lock().applied
    }
}

impl Inner {
    /// Applies one committed entry by the module doc's table; `Some` for a send.
    fn apply(&mut self, entry: &PartEntry) -> io::Result<Option<SendOutcome>> {
        let log_id = entry.log_id();
        assert!(
            self.applied.is_none_or(|a| a.index < log_id.index),
            "entries apply in index order, each once"
        );
        let outcome = match &entry.payload {
            EntryPayload::Normal(send) => Some(self.apply_send(send, log_id)?),
            EntryPayload::Membership(m) => {
                self.membership = PartMembership::new(Some(log_id), m.clone());
                None
            }
            EntryPayload::Blank => None,
        };
        self.applied = Some(log_id);
        Ok(outcome)
    }

    fn apply_send(&mut self, send: &super::SendCommand, at: LogId) -> io::Result<SendOutcome> {
        let count = BatchHeader::decode(&send.batch)
            .map_err(|e| invalid(format!("the send committed at {at} is no batch: {e}")))?
            .message_count;
        let end = self.next + u64::from(count);
        if end <= self.held {
            self.next = end;
            self.skipped += 1;
            return Ok(SendOutcome {
                base_offset: end - u64::from(count),
                message_count: count,
                timestamp: 0,
            });
        }
        assert!(
            self.next >= self.held,
            "a held batch ends at {}, inside the send committed at {at} ({}..{end})",
            self.held,
            self.next
        );
        let ack = self
            .partition
            .append_at(BytesMut::from(&send.batch[..]), send.timestamp)
            .map_err(|e| {
                io::Error::other(format!(
                    "the partition refused the send committed at {at}, which its peers apply: {e}"
                ))
            })?;
        assert_eq!(
            ack.base_offset, self.next,
            "a replica stamps a committed send at the offset its peers do"
        );
        self.next = end;
        Ok(SendOutcome {
            base_offset: ack.base_offset,
            message_count: ack.message_count,
            timestamp: ack.timestamp,
        })
    }

    /// Persists the partition, then records the checkpoint (the module doc).
    fn checkpoint(&mut self) -> io::Result<PartSnapshot> {
        let _span =
            tracing::debug_span!("partition_checkpoint", dir = %self.dir.display()).entered();
        self.partition.persist().map_err(io::Error::other)?;
        let checkpoint = Checkpoint {
            meta: PartSnapshotMeta {
                last_log_id: self.applied,
                last_membership: self.membership.clone(),
            },
            next_offset: self.next,
        };
        write_whole(&*self.disk, &self.dir, CHECKPOINT_FILE, &checkpoint)?;
        self.checkpoint = Some(checkpoint.clone());
        snapshot_of(&checkpoint)
    }

    /// A leader's checkpoint, sent to this replica because it is behind the leader's WAL.
    fn install(&mut self, meta: &PartSnapshotMeta, data: &[u8]) -> io::Result<()> {
        let sent: Checkpoint = rmp_serde::from_slice(data)
            .map_err(|e| invalid(format!("a checkpoint that does not decode: {e}")))?;
        if sent.meta.last_log_id != meta.last_log_id {
            return Err(invalid("a checkpoint whose data is not its meta".into()));
        }
        // The segments hold committed batches only, in order: a partition that reaches the
        // checkpoint's offset holds exactly the batches it names.
        let holds = self.partition.next_offset().map_err(io::Error::other)?;
        if !(self.next..=holds).contains(&sent.next_offset) {
            return Err(io::Error::other(format!(
                "behind the leader's WAL: this replica's partition holds offsets below {holds}, the leader's checkpoint is at {}, and a checkpoint carries no messages",
                sent.next_offset
            )));
        }
        self.next = sent.next_offset;
        self.held = self.held.max(holds);
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        write_whole(&*self.disk, &self.dir, CHECKPOINT_FILE, &sent)?;
        self.checkpoint = Some(sent);
        Ok(())
    }
}

fn snapshot_of(checkpoint: &Checkpoint) -> io::Result<PartSnapshot> {
    Ok(PartSnapshot {
        meta: checkpoint.meta.clone(),
        snapshot: rmp_serde::to_vec_named(checkpoint).map_err(io::Error::other)?,
    })
}

impl RaftSnapshotBuilder<PartConfig> for PartMachine {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> io::Result<PartSnapshot> {
        self.lock().checkpoint()
    }
}

impl openraft::storage::RaftStateMachine<PartConfig> for PartMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = PartMachine;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, PartMembership)> {
        let inner = self.lock();
        Ok((inner.applied, inner.membership.clone()))
    }

    async fn apply<S>(&mut self, mut entries: S) -> io::Result<()>
    where
        S: futures_util::Stream<Item = io::Result<EntryResponder<PartConfig>>> + Unpin + Send,
    {
        while let Some(next) = entries.next().await {
            let (entry, responder) = next?;
            let outcome = self.lock().apply(&entry)?;
            if let Some(responder) = responder {
                responder.send(outcome.unwrap_or_default());
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> PartMachine {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &PartSnapshotMeta, data: Vec<u8>) -> io::Result<()> {
        self.lock().install(meta, &data)
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<PartSnapshot>> {
        self.lock().checkpoint.as_ref().map(snapshot_of).transpose()
    }
}

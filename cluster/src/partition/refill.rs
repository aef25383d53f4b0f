//! Catch-up beyond the WAL: a replica sent a checkpoint past what its partition holds (it
//! fell behind the leader's purged WAL, or it is a wiped member's new replica) takes the
//! missing batches from its peers' segments, then installs the checkpoint.
//!
//! ```text
//!  leader ── checkpoint (offset N) ──► replica holding M < N: "refilling" (no install;
//!                                      openraft sends the checkpoint again later)
//!                                      └► one task: fetch from M (the sender first, then
//!                                         the other members), take in the machine's worker,
//!                                         until N
//!  leader ── checkpoint (offset N) ──► replica holding ≥ N: synced, installed
//! ```
//!
//! Every replica's segments hold committed batches only, the same bytes (the machine stamps
//! them alike), so any peer serves. Each batch is verified by its checksum and must start
//! where the partition ends ([`PartMachine::take_refilled`]); no request waits for the whole
//! refill (a fetch carries at most [`FETCH_BUDGET`]).

use super::machine::{checkpoint_offset, PartMachine};
use super::sink::PartitionSink;
use super::{PartConfig, PartRaft, PartSnapshot};
use crate::rt::in_env;
use crate::types::{show_id, NodeId, Peer};
use bytes::Bytes;
use cairn_engine::env::{BoxFuture, Disk, Env, OpenMode};
use cairn_engine::format::{verify_batch, BatchHeader, Layout, Limits};
use openraft::async_runtime::WatchReceiver;
use openraft::raft::SnapshotResponse;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The most batch bytes one fetch carries (one batch more always goes).
pub const FETCH_BUDGET: u64 = 4 << 20;
/// How long one fetch may take.
pub const FETCH_LIMIT: Duration = Duration::from_secs(10);

type Vote = openraft::alias::VoteOf<PartConfig>;

/// A peer's answer to a fetch: its stored batches from the offset asked (or from where
/// its log starts, if later), at most [`FETCH_BUDGET`] of them, and where its partition's
/// log ends.
pub struct Fetched {
    pub batches: Vec<Bytes>,
    pub next: u64,
}

/// Where a replica's missing batches come from: its peers' replicas of the partition.
pub trait PeerBatches: Send + Sync + 'static {
    /// What replica `peer` (reached at `node`) holds from offset `from`.
    fn fetch(&self, peer: NodeId, node: Peer, from: u64)
        -> BoxFuture<'static, io::Result<Fetched>>;
}

/// Installs `snapshot` on `raft` once its partition holds every batch the checkpoint
/// names; until then starts (at most one per replica) a refill from the group's other
/// members, `sender` first, and refuses with how far it is.
pub async fn install_or_refill(
    env: &Env,
    raft: &PartRaft,
    (vote, snapshot): (Vote, PartSnapshot),
    sender: NodeId,
    source: Arc<dyn PeerBatches>,
) -> Result<SnapshotResponse<PartConfig>, String> {
    let machine = raft
        .with_state_machine(|sm: &mut PartMachine| {
            let machine = sm.clone();
            Box::pin(async move { machine })
        })
        .await
        .map_err(|e| e.to_string())?;
    let target = checkpoint_offset(&snapshot.snapshot).map_err(|e| e.to_string())?;
    let holds = machine
        .sink()
        .next_offset()
        .await
        .map_err(|e| e.to_string())?;
    if holds >= target {
        let installed = raft.install_full_snapshot(vote, snapshot).await;
        return installed.map_err(|e| e.to_string());
    }
    let me = raft.metrics().borrow_watched().id;
    let mut peers: Vec<(NodeId, Peer)> = snapshot
        .meta
        .last_membership
        .membership()
        .nodes()
        .filter(|(id, _)| **id != me)
        .map(|(id, node)| (*id, node.clone()))
        .collect();
    peers.sort_by_key(|(id, _)| *id != sender);
    if machine.start_refill() {
        let task = refill(raft.clone(), machine, target, peers, source);
        drop(env.tasks.spawn(Box::pin(in_env(env, task))));
    }
    Err(format!(
        "refilling from peers: this replica's partition holds offsets below {holds}, the checkpoint names {target}"
    ))
}

/// One refill, logged; the machine is free for the next once it ends (or its task
/// unwinds).
async fn refill(
    raft: PartRaft,
    machine: PartMachine,
    target: u64,
    peers: Vec<(NodeId, Peer)>,
    source: Arc<dyn PeerBatches>,
) {
    struct Ended(PartMachine);
    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.end_refill();
        }
    }
    let ended = Ended(machine.clone());
    let refilled = refill_to(&raft, &machine, target, &peers, &*source).await;
    drop(ended);
    let replica = show_id(raft.metrics().borrow_watched().id);
    match refilled {
        Ok(next) => tracing::info!(%replica, next, "refilled a replica's partition from its peers"),
        Err(e) => {
            tracing::warn!(%replica, target, error = %e, "refilling a replica's partition from its peers stopped")
        }
    }
}

/// Takes batches from `peers` until the partition reaches `target`, each step in the
/// state machine's worker (`PartMachine::take_refilled_from` decides there, against what
/// the partition holds then, whether it starts again where the peers' batches start).
async fn refill_to(
    raft: &PartRaft,
    machine: &PartMachine,
    target: u64,
    peers: &[(NodeId, Peer)],
    source: &dyn PeerBatches,
) -> io::Result<u64> {
    if machine.refill_hole() {
        let jumped = raft.with_state_machine(move |sm: &mut PartMachine| {
            Box::pin(async move { sm.rebuild_at(target).await })
        });
        jumped.await.map_err(io::Error::other)??;
        return Ok(target);
    }
    let mut next = machine.sink().next_offset().await?;
    while next < target {
        let (first, batches) = fetch_best(peers, next, target, source).await?;
        let taken = raft.with_state_machine(move |sm: &mut PartMachine| {
            Box::pin(async move { sm.take_refilled_from(first, batches).await })
        });
        let now = taken.await.map_err(io::Error::other)??;
        if now <= next {
            return Err(io::Error::other(format!(
                "a refill step from offset {next} took nothing (the peers' batches start at {first})"
            )));
        }
        next = now;
    }
    Ok(next)
}

fn first_offset(batches: &[Bytes]) -> Option<u64> {
    let first = batches.first()?;
    BatchHeader::decode(first).ok().map(|h| h.base_offset)
}

/// Appends `batches` (a peer's, fetched) where `sink`'s partition ends: each whole and
/// verified by its checksum, those it holds already skipped, each stored with its own
/// offset and stamp (admitted again, it is the same bytes). The partition's next offset and
/// how many batches it took.
pub async fn append_fetched(
    sink: &dyn PartitionSink,
    batches: Vec<Bytes>,
) -> io::Result<(u64, u64)> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    let mut next = sink.next_offset().await?;
    let mut taken = 0;
    for batch in batches {
        let header = verify_batch(&batch, &Limits::CEILING, Layout::Stored)
            .map_err(|e| invalid(format!("a peer's batch that does not verify: {e}")))?
            .header;
        if header.next_offset() <= next {
            continue;
        }
        if header.base_offset != next {
            return Err(invalid(format!(
                "a peer's batch at offset {} where this replica's partition ends at {next}",
                header.base_offset
            )));
        }
        let outcome = sink.append(&batch, header.base_timestamp).await?;
        if (outcome.base_offset, outcome.timestamp) != (header.base_offset, header.base_timestamp) {
            return Err(invalid(format!(
                "a peer's batch at offset {} stamped {}, stored here at {} stamped {}",
                header.base_offset, header.base_timestamp, outcome.base_offset, outcome.timestamp
            )));
        }
        next = header.next_offset();
        taken += 1;
    }
    Ok((next, taken))
}

/// The group directory's record that a repair rebuilt this member's replica and has not
/// finished refilling it (file [`REPAIR_MARK`]): a replica short of its checkpoint without
/// it lost synced bytes, which is refused, never repaired.
pub struct RepairMark<'a> {
    pub disk: &'a dyn Disk,
    pub dir: &'a Path,
}

/// The repair mark's file in a group's directory.
pub const REPAIR_MARK: &str = "repairing";

impl RepairMark<'_> {
    fn path(&self) -> PathBuf {
        self.dir.join(REPAIR_MARK)
    }

    pub fn present(&self) -> io::Result<bool> {
        self.disk.exists(&self.path())
    }

    /// Sets the mark, durably: what follows may empty the replica's copy.
    pub fn set(&self) -> io::Result<()> {
        set_mark(self.disk, self.dir, REPAIR_MARK)
    }

    /// Clears the mark: the repair is done, the replica's offsets written back durably
    /// too (`PartMachine::restore_offsets`, once the machine opened over it).
    pub fn clear(&self) -> io::Result<()> {
        self.disk.remove_file(&self.path())?;
        self.disk.sync_dir(self.dir)
    }
}

/// Creates the empty file `name` in a group's directory `dir`, durably (its name synced):
/// a mark that what follows it may be cut short and must be finished.
pub(crate) fn set_mark(disk: &dyn Disk, dir: &Path, name: &str) -> io::Result<()> {
    let file = disk.open(&dir.join(name), OpenMode::CreateOrOpen)?;
    file.sync_data()?;
    disk.sync_dir(dir)
}

/// Whether this member's replica must be repaired from its peers before its group's
/// machine opens:
///
/// | the replica | |
/// |---|---|
/// | fenced for damage to its own files (`FenceReason::own_files_damaged`) | repaired |
/// | fenced otherwise (an I/O call failed, another's directory in the way) | refused with the reason (a restart reads again; an operator sorts the directory) |
/// | short of its checkpoint, with the repair mark | repaired (a repair cut short) |
/// | short of its checkpoint, without it | refused: synced bytes were lost |
/// | holding its checkpoint | nothing (a leftover mark stays for the group's start: its offsets are written back before it is cleared) |
pub async fn needs_repair(
    sink: &dyn PartitionSink,
    checkpointed: u64,
    mark: &RepairMark<'_>,
) -> io::Result<bool> {
    match sink.fenced().await? {
        Some((_, true)) => return Ok(true),
        Some((why, false)) => {
            return Err(io::Error::other(format!(
                "the replica is fenced ({why}), not for damage to its own files: not rebuilt from its peers"
            )))
        }
        None => {}
    }
    let held = sink.next_offset().await?;
    if held >= checkpointed {
        return Ok(false);
    }
    if mark.present()? {
        return Ok(true);
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the replica holds offsets below {held}, its checkpoint says {checkpointed} were synced: synced bytes were lost"),
    ))
}

/// Repairs this member's replica from `peers` ([`needs_repair`]): once a peer that holds
/// everything through `checkpointed` answered, a fenced partition, or one whose peers hold
/// nothing where it ends, is rebuilt empty where that peer's batches start (the repair
/// mark set first), refilled up to `checkpointed` and synced; the group's start clears
/// the mark once the machine's offsets are back on it (`PartMachine::restore_offsets`).
/// The group's log then applies what follows.
pub async fn repair(
    sink: &dyn PartitionSink,
    (checkpointed, mark): (u64, &RepairMark<'_>),
    (peers, hole): (&[(NodeId, Peer)], bool),
    source: &dyn PeerBatches,
) -> io::Result<u64> {
    if hole {
        // A canary's ([`super::machine::MachineHooks::refill_hole`]).
        sink.rebuild(checkpointed).await?;
        return Ok(checkpointed);
    }
    let fence = sink.fenced().await?;
    let held = match &fence {
        Some(_) => None,
        None => Some(sink.next_offset().await?),
    };
    let from = held.unwrap_or(0);
    let (first, batches) = fetch_best(peers, from, checkpointed, source).await?;
    if fence.is_some() || held.is_some_and(|h| h < first) {
        tracing::warn!(
            ?fence,
            held,
            first,
            "rebuilding a replica's partition from its peers"
        );
        mark.set()?;
        sink.rebuild(first).await?;
    }
    let mut next = append_fetched(sink, batches).await?.0;
    while next < checkpointed {
        let (first, batches) = fetch_best(peers, next, checkpointed, source).await?;
        if first != next {
            return Err(io::Error::other(format!(
                "the peers' batches go on at {first}, this replica's partition ends at {next}"
            )));
        }
        next = append_fetched(sink, batches).await?.0;
    }
    // The mark stays until the machine's offsets are back on the rebuilt replica.
    sink.checkpoint().await
}

/// Of the peers that hold everything through `need`, the batches of the one whose start
/// from `from` is lowest (its first batch, at `from` or later where its retention removed
/// what is before; where it holds none from there, its end), and that start. The first
/// peer that starts at `from` ends the search; none qualifying is an error, saying why.
async fn fetch_best(
    peers: &[(NodeId, Peer)],
    from: u64,
    need: u64,
    source: &dyn PeerBatches,
) -> io::Result<(u64, Vec<Bytes>)> {
    let mut why = Vec::new();
    let mut best: Option<(u64, Vec<Bytes>)> = None;
    for (id, node) in peers {
        match source.fetch(*id, node.clone(), from).await {
            Ok(fetched) if fetched.next < need => why.push(format!(
                "{} holds offsets below {} only",
                show_id(*id),
                fetched.next
            )),
            Ok(fetched) => {
                let first = first_offset(&fetched.batches).unwrap_or(fetched.next.max(from));
                if best.as_ref().is_none_or(|(low, _)| first < *low) {
                    best = Some((first, fetched.batches));
                }
                if first == from {
                    break;
                }
            }
            Err(e) => why.push(format!("{}: {e}", show_id(*id))),
        }
    }
    best.ok_or_else(|| {
        io::Error::other(format!(
            "no peer holds the batches from offset {from} through {need}: {}",
            why.join("; ")
        ))
    })
}

/// Splits batches sent back to back into each (a fetch's reply).
pub fn split_batches(mut bytes: Bytes) -> io::Result<Vec<Bytes>> {
    let mut batches = Vec::new();
    while !bytes.is_empty() {
        let header = BatchHeader::decode(&bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        let len = usize::try_from(header.batch_length)
            .ok()
            .filter(|len| (1..=bytes.len()).contains(len))
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, "a batch longer than the reply")
            })?;
        batches.push(bytes.split_to(len));
    }
    Ok(batches)
}

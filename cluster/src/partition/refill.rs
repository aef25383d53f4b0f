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
use cairn_engine::env::{BoxFuture, Env};
use cairn_engine::format::{verify_batch, BatchHeader, Layout, Limits};
use openraft::async_runtime::WatchReceiver;
use openraft::raft::SnapshotResponse;
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// The most batch bytes one fetch carries (one batch more always goes).
pub const FETCH_BUDGET: u64 = 4 << 20;
/// How long one fetch may take.
pub const FETCH_LIMIT: Duration = Duration::from_secs(10);

type Vote = openraft::alias::VoteOf<PartConfig>;

/// Where a replica's missing batches come from: its peers' replicas of the partition.
pub trait PeerBatches: Send + Sync + 'static {
    /// The stored batches replica `peer` (reached at `node`) holds from offset `from`, at
    /// most [`FETCH_BUDGET`] of them.
    fn fetch(
        &self,
        peer: NodeId,
        node: Peer,
        from: u64,
    ) -> BoxFuture<'static, io::Result<Vec<Bytes>>>;
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

/// One refill, logged; the machine is free for the next once it ends.
async fn refill(
    raft: PartRaft,
    machine: PartMachine,
    target: u64,
    peers: Vec<(NodeId, Peer)>,
    source: Arc<dyn PeerBatches>,
) {
    let refilled = refill_to(&raft, &machine, target, &peers, &*source).await;
    machine.end_refill();
    let replica = show_id(raft.metrics().borrow_watched().id);
    match refilled {
        Ok(next) => tracing::info!(%replica, next, "refilled a replica's partition from its peers"),
        Err(e) => {
            tracing::warn!(%replica, target, error = %e, "refilling a replica's partition from its peers stopped")
        }
    }
}

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
        let (first, batches) = fetch_first(peers, next, source).await?;
        // Where every peer's retention removed what this replica lacks, it starts again
        // empty where the lowest peer's batches start (nothing below is kept anywhere).
        let rebuild = match first {
            Some(first) if first == next => None,
            Some(first) if first <= target => Some(first),
            _ => {
                return Err(io::Error::other(format!(
                    "no peer holds the batches from offset {next}, below the checkpoint's {target}"
                )))
            }
        };
        let taken = raft.with_state_machine(move |sm: &mut PartMachine| {
            Box::pin(async move {
                if let Some(start) = rebuild {
                    sm.rebuild_at(start).await?;
                }
                sm.take_refilled(batches).await
            })
        });
        let now = taken.await.map_err(io::Error::other)??;
        assert!(
            now > next,
            "a fetched batch starts where the partition ends: it moves on"
        );
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

/// Whether this member's replica must be repaired from its peers before its group's
/// machine opens: its partition is fenced (damaged synced bytes), or it holds less than
/// the group's last checkpoint (`checkpointed`) names (rebuilt before, or a refill cut
/// short).
pub async fn needs_repair(sink: &dyn PartitionSink, checkpointed: u64) -> io::Result<bool> {
    if sink.fenced().await?.is_some() {
        return Ok(true);
    }
    Ok(sink.next_offset().await? < checkpointed)
}

/// Repairs this member's replica from `peers` ([`needs_repair`]): a fenced partition, or
/// one whose peers hold nothing where it ends, is rebuilt empty where a peer's batches
/// start (only once a peer answered: a replica no peer can refill keeps its bytes), then
/// refilled up to `checkpointed` and synced. The group's log then applies what follows.
pub async fn repair(
    sink: &dyn PartitionSink,
    checkpointed: u64,
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
    let (first, batches) = fetch_first(peers, from, source).await?;
    // Peers that hold nothing from there leave a partition with no checkpoint to start at
    // 0 (its group's log holds every entry); one with a checkpoint waits for a peer that
    // holds what it names.
    let start = first.or((checkpointed == 0).then_some(0)).ok_or_else(|| {
        io::Error::other(format!(
            "no peer holds the batches from offset {from}, below the checkpoint's {checkpointed}"
        ))
    })?;
    if fence.is_some() || held.is_some_and(|h| h < start) {
        tracing::warn!(
            ?fence,
            held,
            start,
            "rebuilding a replica's partition from its peers"
        );
        sink.rebuild(start).await?;
    }
    let mut next = append_fetched(sink, batches).await?.0;
    while next < checkpointed {
        let (first, batches) = fetch_first(peers, next, source).await?;
        if first != Some(next) {
            return Err(io::Error::other(format!(
                "no peer holds the batches from offset {next}, below the checkpoint's {checkpointed}"
            )));
        }
        let now = append_fetched(sink, batches).await?.0;
        assert!(
            now > next,
            "a fetched batch starts where the partition ends: it moves on"
        );
        next = now;
    }
    sink.checkpoint().await
}

/// Of every peer's batches from `from` (at `from`, or later where its retention removed
/// what is before), those that start lowest, and their first offset (`None`: no peer that
/// answered holds anything from there); the first peer's that start at `from` end the
/// search. At least one peer must answer.
async fn fetch_first(
    peers: &[(NodeId, Peer)],
    from: u64,
    source: &dyn PeerBatches,
) -> io::Result<(Option<u64>, Vec<Bytes>)> {
    let mut why = Vec::new();
    let mut lowest: Option<(Option<u64>, Vec<Bytes>)> = None;
    for (id, node) in peers {
        match source.fetch(*id, node.clone(), from).await {
            Ok(batches) => {
                let first = first_offset(&batches);
                // `None` holds nothing: it sorts after any offset.
                let rank = |f: Option<u64>| f.map_or(u128::MAX, u128::from);
                if lowest
                    .as_ref()
                    .is_none_or(|(low, _)| rank(first) < rank(*low))
                {
                    lowest = Some((first, batches));
                }
                if first == Some(from) {
                    break;
                }
            }
            Err(e) => why.push(format!("{}: {e}", show_id(*id))),
        }
    }
    lowest.ok_or_else(|| {
        io::Error::other(format!(
            "no peer answered for the batches from offset {from}: {}",
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

//! A peer's request of one of this member's partition groups ([`PartGroups::serve_rpc`]):
//! Raft's requests handed to the group's replica here (which they wake: `quiet`), sends
//! forwarded to it, its stored batches read for a peer that refills.

use super::placed::configured;
use super::{id_of, never_made, propose, stamp, PartGroups};
use crate::partition::net::{
    identity_of, FromPeers, GroupName, PartEnvelope, PartReply, PartRpc, SendRefused,
};
use crate::partition::refill;
use crate::partition::sink::{OnNode, PartitionSink};
use crate::partition::{PartCommand, PartRaft, PartSnapshot};
use crate::types::{show_id, NodeId};
use cairn_engine::format::{verify_batch, Layout};
use openraft::async_runtime::WatchReceiver;
use std::sync::Arc;

impl PartGroups {
    /// A send or offset write a member forwarded: proposed when this member's replica
    /// leads (a send's batch verified with this member's limits first).
    async fn take_forwarded(
        &self,
        (name, raft): (GroupName, &PartRaft),
        from: NodeId,
        command: PartCommand,
    ) -> PartReply {
        let metrics = raft.metrics().borrow_watched().clone();
        if metrics
            .membership_config
            .membership()
            .get_node(&from)
            .is_none()
        {
            return PartReply::Sent(Err(SendRefused::Failed(format!(
                "replica {} is not in the group's configuration",
                show_id(from)
            ))));
        }
        self.propose_here((name, raft), command).await
    }

    /// Proposes a forwarded write if this member's replica `raft` leads its group (a
    /// send's batch verified with this member's limits first).
    pub(super) async fn propose_here(
        &self,
        (name, raft): (GroupName, &PartRaft),
        mut command: PartCommand,
    ) -> PartReply {
        let leader = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow_watched();
            (
                metrics.current_leader,
                metrics.current_leader == Some(metrics.id),
            )
        };
        if !leader.1 {
            return PartReply::Sent(Err(SendRefused::NotLeader(leader.0)));
        }
        let limits = self.inner.node.replica_limits();
        if let PartCommand::Send(send) = &command {
            if let Err(e) = verify_batch(&send.batch, &limits, Layout::Stored) {
                return PartReply::Sent(Err(SendRefused::Failed(format!(
                    "the leader refuses the batch: {e}"
                ))));
            }
        }
        stamp(&mut command, self.inner.env.clock.wall_micros());
        self.wake(name, raft);
        PartReply::Sent(propose(raft, command).await)
    }

    pub(in crate::partition) async fn serve_rpc(
        &self,
        name: GroupName,
        envelope: PartEnvelope,
    ) -> PartReply {
        if let PartRpc::Making { fresh } = envelope.rpc {
            // This member may run no replica of the group: the metadata leader answers.
            let asker = (envelope.from, fresh);
            return PartReply::Making(self.making(name, asker).await);
        }
        let Some(raft) = self.group(name) else {
            return PartReply::NoGroup;
        };
        let here = id_of(&raft);
        let PartEnvelope { from, to, rpc } = envelope;
        match rpc {
            PartRpc::Forwarded(command) => {
                return self.take_unplaced((name, &raft), from, command).await
            }
            PartRpc::Configured => return configured(&raft),
            PartRpc::Read(read) => return self.answer_read((name, &raft), read).await,
            _ => {}
        }
        if let PartRpc::Identify = rpc {
            let made = !never_made(&raft);
            let leaving = self
                .inner
                .leaving
                .load(std::sync::atomic::Ordering::Relaxed);
            return PartReply::Identity {
                id: here,
                made,
                leaving,
            };
        }
        if to != here {
            return PartReply::Elsewhere(here);
        }
        // Raft's requests wake the group once they are answered (its tick then finds the
        // leader's lease renewed), but for a heartbeat (an append of nothing: a sleeping
        // follower's leader may beat until all its followers sleep); the rest leave it be.
        let raft_rpc = match &rpc {
            PartRpc::Append(r) => !r.entries.is_empty(),
            other => matches!(
                other,
                PartRpc::Vote(_)
                    | PartRpc::PreVote(_)
                    | PartRpc::Snapshot { .. }
                    | PartRpc::TransferLeader(_)
            ),
        };
        let reply = self.answer_rpc(name, (&raft, from), rpc).await;
        if raft_rpc {
            self.wake(name, &raft);
        }
        reply
    }

    /// [`PartGroups::serve_rpc`]'s answer to `rpc`, from replica `from`, addressed to
    /// this member's replica `raft`.
    async fn answer_rpc(
        &self,
        name: GroupName,
        (raft, from): (&PartRaft, NodeId),
        rpc: PartRpc,
    ) -> PartReply {
        let here = id_of(raft);
        let raft = raft.clone();
        let refused = |e: &dyn std::fmt::Display| PartReply::Refused(e.to_string());
        match rpc {
            PartRpc::Append(r) => {
                if self.inner.hooks.apply_uncommitted {
                    crate::partition::machine::apply_on_arrival(&raft, &r.entries).await;
                }
                let appended = raft.append_entries(r).await;
                appended.map_or_else(|e| refused(&e), PartReply::Append)
            }
            PartRpc::Vote(r) => raft
                .vote(r)
                .await
                .map_or_else(|e| refused(&e), PartReply::Vote),
            PartRpc::PreVote(r) => raft
                .pre_vote(r)
                .await
                .map_or_else(|e| refused(&e), PartReply::Vote),
            PartRpc::Snapshot { vote, meta, data } => {
                let snapshot = PartSnapshot {
                    meta,
                    snapshot: data,
                };
                let source = Arc::new(FromPeers {
                    networks: self.inner.networks.clone(),
                    group: name,
                    me: here,
                });
                let env = &self.inner.env;
                refill::install_or_refill(env, &raft, (vote, snapshot), from, source)
                    .await
                    .map_or_else(|e| refused(&e), PartReply::Snapshot)
            }
            // Any member's replica may fetch (the connection proved the member, the
            // envelope that it speaks for its own): every member the partition is placed
            // on holds it, and a replica outside its group (a member's new one) repairs too.
            PartRpc::Fetch { from, max_bytes } => {
                let replica = OnNode {
                    node: self.inner.node.clone(),
                    partition: identity_of(name),
                };
                let bounds = replica.bounds().await;
                let read = replica.read(from, max_bytes.min(refill::FETCH_BUDGET));
                match (bounds, read.await) {
                    (Ok((_, next)), Ok(batches)) => PartReply::Batches {
                        bytes: batches.concat(),
                        next,
                    },
                    (Err(e), _) | (_, Err(e)) => refused(&e),
                }
            }
            PartRpc::TransferLeader(r) => raft
                .handle_transfer_leader(r)
                .await
                .map_or_else(|e| refused(&e), PartReply::TransferLeader),
            PartRpc::Send(command) => self.take_forwarded((name, &raft), from, command).await,
            PartRpc::Identify
            | PartRpc::Making { .. }
            | PartRpc::Forwarded(_)
            | PartRpc::Configured
            | PartRpc::Read(_) => {
                unreachable!("answered above")
            }
        }
    }
}

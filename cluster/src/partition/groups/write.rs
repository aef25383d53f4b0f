//! A member's writes to its partition groups: sends and consumer offsets, proposed where
//! this member's replica leads, forwarded to the leader otherwise (`PartRpc::Send`), and
//! asked again while the group has no leader, for up to [`SEND_DEADLINE`].
//!
//! | write | checked before it is proposed | its outcome, decided by the machine (`machine`) |
//! |---|---|---|
//! | a send ([`PartGroups::send`]) | the batch, with this node's limits, as admission would (a committed batch a replica refused would stop every replica) | where it landed: every replica stamps it at the same offset |
//! | an offset write ([`PartGroups::order_offset`]) | nothing here: the node resolved its consumer | stored, deleted (found or not), refused past the sends committed before it or past the consumer limit, or dropped for a group deleted since (a later one stored under its id) |

use super::{group_name, id_of, PartGroups, FORWARD_LIMIT, SEND_DEADLINE, SEND_RETRY};
use crate::partition::net::{GroupName, PartEnvelope, PartReply, PartRpc, SendRefused};
use crate::partition::{OffsetCommand, PartCommand, PartOutcome, PartRaft, SendCommand};
use crate::rt::in_env;
use crate::types::{member_of, show_id, NodeId};
use bytes::BytesMut;
use cairn_engine::error::{NodeError, NodeResult};
use cairn_engine::format::{verify_batch, Layout};
use cairn_engine::node::{OffsetWrite, Sent};
use cairn_engine::partition::{AppendAck, PartitionError, PartitionIdentity};
use openraft::async_runtime::WatchReceiver;
use openraft::error::ClientWriteError;

impl PartGroups {
    /// Has the group commit `batch` (the module doc's table).
    pub(in crate::partition) async fn send(
        self,
        partition: PartitionIdentity,
        batch: BytesMut,
    ) -> NodeResult<Sent> {
        let limits = self.inner.node.replica_limits();
        verify_batch(&batch, &limits, Layout::Stored)
            .map_err(|e| NodeError::Partition(PartitionError::InvalidBatch(e)))?;
        let command = PartCommand::Send(SendCommand {
            batch: batch.to_vec(),
            timestamp: 0,
        });
        match self.write(partition, command).await? {
            PartOutcome::Sent(outcome) => Ok(Sent {
                partition: partition.partition_id,
                nonce: partition.nonce,
                ack: AppendAck {
                    base_offset: outcome.base_offset,
                    message_count: outcome.message_count,
                    timestamp: outcome.timestamp,
                    // Committed: a quorum synced it in the group's WAL.
                    durable: true,
                    requires_persist: false,
                },
            }),
            other => unreachable!("a send applied as {other:?}"),
        }
    }

    /// Has the group commit an offset write (the module doc's table); whether it replaced
    /// or deleted a stored offset.
    pub(in crate::partition) async fn order_offset(
        self,
        partition: PartitionIdentity,
        write: OffsetWrite,
    ) -> NodeResult<bool> {
        if self.inner.hooks.offsets_local {
            // The canary's ([`crate::partition::machine::MachineHooks::offsets_local`]).
            let node = self.inner.node.clone();
            node.apply_replicated_offset(partition, write).await?;
            return Ok(true);
        }
        let command = PartCommand::Offset(OffsetCommand::of(write));
        match self.write(partition, command).await? {
            PartOutcome::OffsetStored => Ok(true),
            PartOutcome::OffsetOfGoneGroup => Ok(false),
            PartOutcome::OffsetDeleted { found } => Ok(found),
            PartOutcome::OffsetBeyondEnd { next } => {
                Err(NodeError::Partition(PartitionError::OffsetBeyondEnd {
                    offset: write.offset.unwrap_or(0),
                    last: next.checked_sub(1),
                }))
            }
            PartOutcome::TooManyOffsets { limit } => {
                Err(NodeError::Partition(PartitionError::TooManyOffsets {
                    limit,
                }))
            }
            other => unreachable!("an offset write applied as {other:?}"),
        }
    }

    /// Has the group commit `command`: its outcome, once this member's replica applied it
    /// too (read your writes where you wrote) or [`SEND_DEADLINE`] passed (it is committed
    /// anyway).
    async fn write(
        self,
        partition: PartitionIdentity,
        mut command: PartCommand,
    ) -> NodeResult<PartOutcome> {
        let env = self.inner.env.clone();
        let name = group_name(&partition);
        let deadline = env.clock.monotonic_nanos() + SEND_DEADLINE.as_nanos() as u64;
        let mut last = String::from("the group has no leader");
        // Where a write goes from a member the group is not placed on (`placed`).
        let (mut hint, mut tries) = (None, 0);
        while env.clock.monotonic_nanos() < deadline {
            if let Some(raft) = self.group(name) {
                let leader = raft.metrics().borrow_watched().current_leader;
                let answered = match leader {
                    Some(l) if l == id_of(&raft) => {
                        stamp(&mut command, env.clock.wall_micros());
                        self.wake(name, &raft);
                        propose(&raft, command.clone()).await
                    }
                    Some(l) => self.forward(&raft, l, name, &command).await,
                    None => Err(SendRefused::NotLeader(None)),
                };
                match answered {
                    Ok((outcome, index)) => {
                        let waiting = raft.wait(Some(SEND_DEADLINE));
                        let wait = waiting.applied_index_at_least(Some(index), "applied here");
                        let _ = in_env(&env, wait).await;
                        return Ok(outcome);
                    }
                    Err(SendRefused::NotLeader(_)) => last = "no leader took it".into(),
                    Err(SendRefused::Failed(why)) => return Err(NodeError::Undecided(why)),
                }
            } else if !self.placed_on(name).contains(&member_of(self.me())) {
                let forwarded = self.forward_unplaced(name, &command, (hint, tries));
                match forwarded.await {
                    Ok((outcome, _)) => return Ok(outcome),
                    Err(SendRefused::NotLeader(leader)) => {
                        (hint, tries) = (leader.map(member_of), tries + 1);
                        last = "no placed member's replica took it".into();
                    }
                    Err(SendRefused::Failed(why)) => return Err(NodeError::Undecided(why)),
                }
            } else {
                last = "this member runs no replica of the partition yet".into();
            }
            env.clock.sleep(SEND_RETRY).await;
        }
        Err(NodeError::Undecided(format!(
            "partition {partition} did not take the write within {SEND_DEADLINE:?}: {last}"
        )))
    }

    /// Forwards a write to `leader`, which the group's configuration names.
    async fn forward(
        &self,
        raft: &PartRaft,
        leader: NodeId,
        name: GroupName,
        command: &PartCommand,
    ) -> Result<(PartOutcome, u64), SendRefused> {
        let node = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow_watched();
            metrics
                .membership_config
                .membership()
                .get_node(&leader)
                .cloned()
        };
        let Some(node) = node else {
            return Err(SendRefused::NotLeader(None));
        };
        let envelope = PartEnvelope {
            from: id_of(raft),
            to: leader,
            rpc: PartRpc::Send(command.clone()),
        };
        let asked = self
            .inner
            .networks
            .call(&node, name, &envelope, FORWARD_LIMIT);
        forwarded(asked.await, &show_id(leader))
    }
}

/// What a write forwarded to `to` came to, from its peer's `reply`.
pub(in crate::partition) fn forwarded(
    reply: std::io::Result<PartReply>,
    to: &str,
) -> Result<(PartOutcome, u64), SendRefused> {
    match reply {
        Ok(PartReply::Sent(result)) => result,
        Ok(PartReply::NoGroup | PartReply::Elsewhere(_)) => Err(SendRefused::NotLeader(None)),
        // Never run there (not sent, or refused): asked again, of the leader then.
        Err(e) if crate::net::not_run(&e) => Err(SendRefused::NotLeader(None)),
        Ok(_) => Err(SendRefused::Failed(format!(
            "{to} answered another request"
        ))),
        // Sent and not answered: it may have committed. The client decides.
        Err(e) => Err(SendRefused::Failed(format!(
            "the write forwarded to {to} has no answer (it may have landed): {e}"
        ))),
    }
}

/// Gives a send its leader's clock reading, `now` (every replica stamps the batch with it).
pub(in crate::partition) fn stamp(command: &mut PartCommand, now: u64) {
    if let PartCommand::Send(send) = command {
        send.timestamp = now;
    }
}

pub(in crate::partition) async fn propose(
    raft: &PartRaft,
    command: PartCommand,
) -> Result<(PartOutcome, u64), SendRefused> {
    match raft.client_write(command).await {
        Ok(written) => Ok((*written.response(), written.log_id().index)),
        Err(e) => match e.into_api_error() {
            Some(ClientWriteError::ForwardToLeader(f)) => Err(SendRefused::NotLeader(f.leader_id)),
            Some(ClientWriteError::LogEntryDiscarded(_)) | None => Err(SendRefused::Failed(
                "the write's leader lost its leadership with it (it may have landed)".into(),
            )),
            Some(other) => Err(SendRefused::Failed(other.to_string())),
        },
    }
}

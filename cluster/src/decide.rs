//! The node's metadata ops decided by the group ([`GroupDecider`], the node's
//! `Decider`): proposed on the leader, or forwarded to it by a follower, and answered once
//! this member applied the op, so a caller's next read here sees it.
//!
//! | this replica knows | it does | answered with |
//! |---|---|---|
//! | it leads | stamps the leader's clock, proposes | the outcome, once applied here |
//! | another leads | forwards to the leader's member ([`crate::net::forward`]) | the leader's outcome, once applied here too |
//! | no leader (an election) | waits [`DECIDE_RETRY`], asks again, up to [`DECIDE_ATTEMPTS`] times | `Undecided` after the last |
//! | the leader moved before appending | asks the new leader | as above |
//! | the proposal's fate is unknown | nothing more | `Undecided` ("may or may not have applied") |

use crate::group::{ProposeError, Replica};
use crate::net::forward;
use crate::rt::in_env;
use crate::types::{MetaCommand, MetaOutcome};
use cairn_engine::metadata::journal::Origin;
use cairn_engine::node::{Decider, Decision, MetaReply, NodeError, NodeResult};
use cairn_engine::state::ops::MetaOp;
use cairn_engine::state::Applied;
use std::net::SocketAddr;
use std::time::Duration;

/// How long a replica waits for a leader between attempts to decide an op.
pub const DECIDE_RETRY: Duration = Duration::from_millis(100);
/// Attempts to reach a leader before an op is answered `Undecided` (about 5 s of elections).
pub const DECIDE_ATTEMPTS: u32 = 50;
/// The longest a forwarded op waits for the leader's answer, and for this member to apply it;
/// and the longest a leader waits for its own proposal to apply (openraft answers a
/// proposal only once it is applied, purged or truncated here, not when leadership is lost).
pub const DECIDE_TIMEOUT: Duration = Duration::from_secs(10);
/// Ops one member forwards to the leader at once; more wait their turn. Each forward holds
/// one of the leader's peer connections (`net::MAX_PEER_CONNECTIONS`, shared with Raft's
/// own traffic) for as long as it waits.
pub const MAX_FORWARDS: usize = 8;

/// The node's `Decider`: its replica of the metadata group.
pub struct GroupDecider {
    replica: Replica,
}

impl GroupDecider {
    pub fn new(replica: Replica) -> GroupDecider {
        GroupDecider { replica }
    }
}

impl Decider for GroupDecider {
    fn decide(&self, op: MetaOp, origin: Origin) -> Decision {
        let replica = self.replica.clone();
        Box::pin(async move { replica.decide(op, origin).await })
    }
}

/// The state machine's refusal as the node would have typed it where a caller tells it
/// apart (a wrong current password is judged by the login limiter); else by its code.
fn refusal(code: u32, reason: String) -> NodeError {
    match code {
        42 => NodeError::InvalidCredentials,
        _ => NodeError::Refused { code, reason },
    }
}

impl Replica {
    /// Proposes `command` here, stamped with this leader's clock (every member applies it
    /// with that time), or answers `NotLeader`.
    pub async fn propose_here(
        &self,
        mut command: MetaCommand,
    ) -> Result<(u64, MetaOutcome), ProposeError> {
        command.timestamp = self.env.clock.wall_micros();
        let proposed = self.propose(command);
        match cairn_engine::env::race(proposed, self.env.clock.sleep(DECIDE_TIMEOUT)).await {
            cairn_engine::env::Either::Left(answer) => answer,
            // Appended, perhaps, by a leader that lost its quorum: it may yet commit.
            cairn_engine::env::Either::Right(()) => Err(ProposeError::InDoubt),
        }
    }

    /// Waits (within [`DECIDE_TIMEOUT`]) until this replica, as the leader, has applied
    /// everything committed before its read index: what it then reads of the node's state is
    /// the cluster's. `false` when it does not lead or could not confirm it.
    pub async fn linearize(&self) -> bool {
        let read = self
            .raft
            .ensure_linearizable(openraft::ReadPolicy::ReadIndex);
        let read = in_env(&self.env, read);
        matches!(
            cairn_engine::env::race(read, self.env.clock.sleep(DECIDE_TIMEOUT)).await,
            cairn_engine::env::Either::Left(Ok(_))
        )
    }

    /// Has the group decide `op` ([`GroupDecider`]'s table).
    pub async fn decide(&self, op: MetaOp, origin: Origin) -> NodeResult<MetaReply> {
        let operation = op
            .operation()
            .to_command_code()
            .expect("a metadata op has a command code");
        let command = MetaCommand {
            operation,
            body: op.body().to_vec(),
            timestamp: 0,
            user_id: origin.user_id,
            client: origin.client,
            request: origin.request,
        };
        let (_, outcome) = self.decide_command(command).await?;
        Ok(reply_of(outcome))
    }

    /// Has the group decide `command` ([`GroupDecider`]'s table): its index and the state
    /// machine's outcome, once this member applied it.
    pub async fn decide_command(&self, command: MetaCommand) -> NodeResult<(u64, MetaOutcome)> {
        let mut last = String::from("no leader is known");
        for _ in 0..DECIDE_ATTEMPTS {
            if let Some(why) = self.failure() {
                return Err(NodeError::Undecided(format!(
                    "this member's replica stopped: {why}"
                )));
            }
            let answer = match self.leader() {
                Some(leader) if leader == self.me => self.propose_here(command.clone()).await,
                Some(leader) => match self.leader_address(leader) {
                    Some(addr) => self.forward_to(leader, addr, command.clone()).await?,
                    None => Err(ProposeError::NotLeader {
                        me: self.me,
                        leader: None,
                    }),
                },
                None => Err(ProposeError::NotLeader {
                    me: self.me,
                    leader: None,
                }),
            };
            match answer {
                Ok((index, outcome)) => {
                    self.applied_here(index).await?;
                    return Ok((index, outcome));
                }
                Err(e @ ProposeError::NotLeader { .. }) => last = e.to_string(),
                Err(e) => return Err(NodeError::Undecided(e.to_string())),
            }
            self.env.clock.sleep(DECIDE_RETRY).await;
        }
        Err(NodeError::Undecided(last))
    }

    /// The replication address of `leader` in the configuration this replica holds.
    fn leader_address(&self, leader: crate::types::NodeId) -> Option<SocketAddr> {
        use openraft::async_runtime::WatchReceiver;
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let peer = metrics.membership_config.membership().get_node(&leader)?;
        peer.raft.parse().ok()
    }

    /// Forwards to the leader. A connection that failed may have carried the command: its
    /// fate is unknown, and the caller is told so rather than risk applying it twice.
    async fn forward_to(
        &self,
        leader: crate::types::NodeId,
        addr: SocketAddr,
        command: MetaCommand,
    ) -> NodeResult<Result<(u64, MetaOutcome), ProposeError>> {
        let _turn = self.forwards.acquire().await;
        let cluster = (self.cluster, &self.key);
        let sent = forward(
            &self.env,
            cluster,
            self.me,
            (leader, addr),
            command,
            DECIDE_TIMEOUT,
        )
        .await;
        match sent {
            Ok(answer) => Ok(answer),
            // Not the replica this member took for the leader (it was replaced): nothing
            // was proposed; ask again.
            Err(e) if e.kind() == std::io::ErrorKind::NotConnected => {
                Ok(Err(ProposeError::NotLeader {
                    me: self.me,
                    leader: None,
                }))
            }
            Err(e) => Err(NodeError::Undecided(format!(
                "forwarding to the leader {}: {e}; the operation may or may not have applied",
                crate::types::show_id(leader)
            ))),
        }
    }

    /// Waits until this member applied entry `index`.
    async fn applied_here(&self, index: u64) -> NodeResult<()> {
        let wait = self.raft.wait(Some(DECIDE_TIMEOUT));
        in_env(
            &self.env,
            wait.applied_index_at_least(Some(index), "decided"),
        )
        .await
        .map_err(|e| {
            NodeError::Undecided(format!(
                "the operation was decided as entry {index}, not yet applied here: {e}"
            ))
        })?;
        Ok(())
    }
}

/// The node's answer for a decided command's outcome.
fn reply_of(outcome: MetaOutcome) -> MetaReply {
    let result = match outcome {
        MetaOutcome::Applied { created } => Ok(Applied {
            created,
            work: Vec::new(),
            effects: Vec::new(),
        }),
        MetaOutcome::Refused { code, reason } => Err(refusal(code, reason)),
        MetaOutcome::Undecodable => Err(NodeError::InvalidRequest(
            "the cluster could not decode the operation".into(),
        )),
        // Only a member that applied the entry before a restart computes it, and no one
        // waits for that answer.
        MetaOutcome::Replayed => Err(NodeError::Undecided(
            "the entry was answered as applied before a restart".into(),
        )),
    };
    // The op number is the node's own (each member numbers the ops it applies); no caller
    // of a clustered node reads it.
    MetaReply { at_op: 0, result }
}

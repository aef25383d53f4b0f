//! The node's metadata ops decided by the group ([`GroupDecider`], the node's
//! `Decider`): proposed on the leader, or forwarded to it by a follower, and answered once
//! this member applied the op, so a caller's next read here sees it.
//!
//! Every op is keyed: the member draws a key for it, notes the log index it applied
//! through, and every attempt carries both, so an attempt whose fate was unknown can be
//! made again. The state machine applies the first attempt that commits and answers any
//! later one with its outcome (`cairn_engine::state::proposals`, part of the replicated
//! state); an attempt it can no longer tell from an applied one (keys applied after the op
//! was asked were forgotten) it refuses unapplied.
//!
//! | this replica knows | it does | answered with |
//! |---|---|---|
//! | it leads | stamps the leader's clock, proposes | the outcome, once applied here |
//! | another leads | forwards to the leader's member ([`crate::net::forward`]) | the leader's outcome, once applied here too |
//! | no leader (an election) | waits [`DECIDE_RETRY`], asks again | as above |
//! | the leader moved before appending | asks the new leader | as above |
//! | the attempt's fate is unknown (the leader lost its quorum, a forward's connection failed) | waits [`DECIDE_RETRY`], asks again with the same key | the first applied attempt's outcome |
//! | the state machine forgot keys applied after the op was asked | nothing more | `ProposalForgotten` (refused, unapplied; an earlier attempt may have applied) |
//! | [`DECIDE_ATTEMPTS`] attempts or [`DECIDE_DEADLINE`] passed | nothing more | `Undecided` ("may or may not have applied") |

use crate::group::{ProposeError, Replica};
use crate::net::forward;
use crate::rt::in_env;
use crate::types::{MetaCommand, MetaOutcome};
use cairn_engine::metadata::journal::Origin;
use cairn_engine::node::{Barrier, Decider, Decision, MetaReply, NodeError, NodeResult};
use cairn_engine::state::ops::MetaOp;
use cairn_engine::state::Applied;
use std::net::SocketAddr;
use std::time::Duration;

/// How long a replica waits for a leader between attempts to decide an op.
pub const DECIDE_RETRY: Duration = Duration::from_millis(100);
/// Attempts to reach a leader before an op is answered `Undecided` (about 5 s of elections).
pub const DECIDE_ATTEMPTS: u32 = 50;
/// The longest a member keeps trying to decide one op (then `Undecided`: it may or may not
/// have applied). Safety does not rest on it: an attempt the state machine can no longer
/// tell from an applied one is refused unapplied (`state::proposals`).
pub const DECIDE_DEADLINE: Duration = Duration::from_secs(30);
/// The longest a fresh read waits for the leader's read index and for this member to apply
/// through it (a login waits before it takes its turn in the line of password checks).
pub const READ_DEADLINE: Duration = Duration::from_secs(5);
/// The longest one ask for a read index waits, so that a leader that does not answer is
/// asked again (or its successor is) within [`READ_DEADLINE`].
pub const READ_ATTEMPT: Duration = Duration::from_secs(1);
/// Read indexes one member asks the leader for at once; more wait their turn. Each holds
/// one of the leader's peer connections (`net::MAX_PEER_CONNECTIONS`) while it waits.
pub const MAX_READS: usize = 8;
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

    fn barrier(&self) -> Barrier {
        let replica = self.replica.clone();
        Box::pin(async move { replica.read_barrier().await })
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
        match cairn_engine::env::race(proposed, self.env.clock.sleep(self.decide_timeout)).await {
            cairn_engine::env::Either::Left(answer) => answer,
            // Appended, perhaps, by a leader that lost its quorum: it may yet commit.
            cairn_engine::env::Either::Right(()) => Err(ProposeError::InDoubt),
        }
    }

    /// As the leader, its read index: once a quorum confirmed it still leads, the last
    /// entry in its log. `NotLeader` when it does not lead or could not confirm it within
    /// [`READ_ATTEMPT`].
    ///
    /// Not openraft's read log id alone (the later of the leader's committed entry and its
    /// term's first): a leader that restarted into the term it led resumes with the
    /// committed id it last saved, which may be older than entries it had answered for
    /// (the simulator's seed 72 of the cluster scope). Every committed entry is in the
    /// leader's log, so its last entry is never too early; entries after the committed
    /// ones commit under a leader that holds its quorum, and a member waiting for them
    /// waits at most [`DECIDE_TIMEOUT`].
    pub(crate) async fn read_index_here(&self) -> Result<u64, ProposeError> {
        let read = self.raft.get_read_log_id(openraft::ReadPolicy::ReadIndex);
        let read = in_env(&self.env, read);
        let not_leader = ProposeError::NotLeader {
            me: self.me,
            leader: None,
        };
        match cairn_engine::env::race(read, self.env.clock.sleep(self.read_timeout())).await {
            cairn_engine::env::Either::Left(Ok((read, _))) => {
                use openraft::async_runtime::WatchReceiver;
                let last = self.raft.metrics().borrow_watched().last_log_index;
                Ok(read.index().max(last.unwrap_or(0)))
            }
            cairn_engine::env::Either::Left(Err(e)) => {
                tracing::debug!(error = %e, "no read index here");
                Err(not_leader)
            }
            cairn_engine::env::Either::Right(()) => Err(not_leader),
        }
    }

    /// Waits until this member applied every entry committed before the call, by the
    /// leader's read index (asked over the peer protocol when another member leads);
    /// retried through elections as [`Replica::decide_command`] is.
    pub async fn read_barrier(&self) -> NodeResult<()> {
        let barrier = self.through_read_index();
        match cairn_engine::env::race(barrier, self.env.clock.sleep(READ_DEADLINE)).await {
            cairn_engine::env::Either::Left(done) => done,
            cairn_engine::env::Either::Right(()) => Err(NodeError::Undecided(format!(
                "no fresh read: no read index applied here within {READ_DEADLINE:?}"
            ))),
        }
    }

    async fn through_read_index(&self) -> NodeResult<()> {
        let mut last = String::from("no leader is known");
        for _ in 0..DECIDE_ATTEMPTS {
            if let Some(why) = self.failure() {
                return Err(NodeError::Undecided(format!(
                    "this member's replica stopped: {why}"
                )));
            }
            let index = match self.whom_to_ask() {
                Ok(None) => self.read_index_here().await,
                Ok(Some(leader)) => self.read_index_of(leader).await,
                Err(e) => Err(e),
            };
            match index {
                Ok(index) => {
                    let index = self.read_index.as_ref().map_or(index, |hook| hook(index));
                    return self.applied_here(index).await;
                }
                Err(e) => last = e.to_string(),
            }
            self.env.clock.sleep(DECIDE_RETRY).await;
        }
        Err(NodeError::Undecided(format!("no fresh read: {last}")))
    }

    /// Waits (within [`DECIDE_TIMEOUT`]) until this replica, as the leader, has applied
    /// everything committed before its read index: what it then reads of the node's state is
    /// the cluster's. `false` when it does not lead or could not confirm it.
    pub async fn linearize(&self) -> bool {
        match self.read_index_here().await {
            Ok(index) => self.applied_here(index).await.is_ok(),
            Err(_) => false,
        }
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
            key: 0,
            asked_at: 0,
        };
        let (_, outcome) = self.decide_command(command).await?;
        Ok(reply_of(outcome))
    }

    /// Has the group decide `command` ([`GroupDecider`]'s table): its index and the state
    /// machine's outcome, once this member applied it. A command without a key is given
    /// one, and the index this member applied through.
    pub async fn decide_command(&self, mut command: MetaCommand) -> NodeResult<(u64, MetaOutcome)> {
        if command.key == 0 {
            use openraft::async_runtime::WatchReceiver;
            command.key = self.draw_key();
            let applied = self.raft.metrics().borrow_watched().last_applied;
            command.asked_at = applied.map_or(0, |a| a.index);
        }
        let attempts = self.attempts(command);
        match cairn_engine::env::race(attempts, self.env.clock.sleep(DECIDE_DEADLINE)).await {
            cairn_engine::env::Either::Left(answer) => answer,
            cairn_engine::env::Either::Right(()) => Err(NodeError::Undecided(format!(
                "no answer within {DECIDE_DEADLINE:?}; the operation may or may not have applied"
            ))),
        }
    }

    /// The attempts to decide `command`, each with its key ([`Replica::decide_command`]).
    async fn attempts(&self, mut command: MetaCommand) -> NodeResult<(u64, MetaOutcome)> {
        let key = command.key;
        let mut last = String::from("no leader is known");
        for attempt in 0..DECIDE_ATTEMPTS {
            if let Some(why) = self.failure() {
                return Err(NodeError::Undecided(format!(
                    "this member's replica stopped: {why}; {last}"
                )));
            }
            if let Some(rekey) = &self.rekey {
                command.key = rekey(key, attempt);
            }
            let answer = match self.whom_to_ask() {
                Ok(None) => self.propose_here(command.clone()).await,
                Ok(Some((leader, addr))) => self.forward_to(leader, addr, command.clone()).await?,
                Err(e) => Err(e),
            };
            match answer {
                Ok((index, outcome)) => {
                    self.applied_here(index).await?;
                    return Ok((index, outcome));
                }
                Err(e @ ProposeError::NotLeader { .. }) => last = e.to_string(),
                // Appended perhaps, committed perhaps: the key makes asking again safe.
                Err(ProposeError::InDoubt) => {
                    last = "an attempt's fate is unknown; the operation may or may not have \
                            applied"
                        .into()
                }
                Err(e) => return Err(NodeError::Undecided(e.to_string())),
            }
            self.env.clock.sleep(DECIDE_RETRY).await;
        }
        Err(NodeError::Undecided(last))
    }

    /// A new op's key: never 0 (0 is "no key").
    fn draw_key(&self) -> u128 {
        let entropy = &self.env.entropy;
        let key = u128::from(entropy.next_u64()) << 64 | u128::from(entropy.next_u64());
        key.max(1)
    }

    /// How long one ask for a read index waits ([`READ_ATTEMPT`], or less).
    fn read_timeout(&self) -> Duration {
        self.decide_timeout.min(READ_ATTEMPT)
    }

    /// Whom an op or a read goes to: `None` when this replica leads, else the leader and its
    /// member's replication address; `NotLeader` when neither is known (an election).
    fn whom_to_ask(&self) -> Result<Option<(crate::types::NodeId, SocketAddr)>, ProposeError> {
        let not_leader = || ProposeError::NotLeader {
            me: self.me,
            leader: None,
        };
        match self.leader() {
            Some(leader) if leader == self.me => Ok(None),
            Some(leader) => match self.leader_address(leader) {
                Some(addr) => Ok(Some((leader, addr))),
                None => Err(not_leader()),
            },
            None => Err(not_leader()),
        }
    }

    /// The read index of `leader` (its member at the address), asked over the peer
    /// protocol ([`MAX_READS`] at a time); `NotLeader` when it could not be had.
    async fn read_index_of(
        &self,
        leader: (crate::types::NodeId, SocketAddr),
    ) -> Result<u64, ProposeError> {
        let _turn = self.reads.acquire().await;
        let cluster = (self.cluster, &self.key);
        let asked =
            crate::net::read_index_at(&self.env, cluster, self.me, leader, self.read_timeout());
        asked.await.unwrap_or_else(|e| {
            tracing::debug!(error = %e, "asking the leader for a read index");
            Err(ProposeError::NotLeader {
                me: self.me,
                leader: None,
            })
        })
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
    /// fate is unknown (`InDoubt`), and the caller asks again with the same key.
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
            // The leader answers within its own timeout; the way there and back on top.
            self.decide_timeout * 2,
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
            // The connection may have carried the command: in doubt, asked again (keyed).
            Err(e) => {
                tracing::debug!(
                    leader = %crate::types::show_id(leader),
                    error = %e,
                    "forward failed; asking again with the same key"
                );
                Ok(Err(ProposeError::InDoubt))
            }
        }
    }

    /// Waits until this member applied entry `index`.
    async fn applied_here(&self, index: u64) -> NodeResult<()> {
        let wait = self.raft.wait(Some(self.decide_timeout));
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
pub(crate) fn reply_of(outcome: MetaOutcome) -> MetaReply {
    let result = match outcome {
        MetaOutcome::Applied { created, repeated } => Ok(Applied {
            created,
            repeated,
            work: Vec::new(),
            effects: Vec::new(),
        }),
        MetaOutcome::Refused { code, reason } => Err(refusal(code, reason)),
        MetaOutcome::Forgotten {
            asked_at,
            forgotten_through,
        } => Err(NodeError::ProposalForgotten {
            asked_at,
            forgotten_through,
        }),
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

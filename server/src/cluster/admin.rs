//! `cairn cluster status|add|remove`: an administrator's requests to the members, over
//! their replication addresses, proving the cluster's secret as peers do
//! (`cairn_cluster::net::ask`). It reads the same configuration as `cairn serve` (the
//! file, then `CAIRN_*`): the cluster's name, secret and members.
//!
//! A change goes to the leader (asked of every member until one names it) and is decided
//! by consensus there: an added member first catches up as a learner, then becomes a voter
//! in place of any earlier replica of the same member (one whose disk was wiped).

use crate::config::ServerConfig;
use cairn_cluster::decide::{DECIDE_TIMEOUT, READ_ATTEMPT};
use cairn_cluster::group::{
    highest_leader, GroupStatus, MemberChange, PartitionsLed, ProposeError, CATCH_UP_TIMEOUT,
};
use cairn_cluster::net::{ask, AdminReply, AdminRequest, PeerKey};
use cairn_cluster::types::{member_of, show_id, MemberId, NodeId, Peer};
use cairn_engine::env::Env;
use serde::Serialize;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// How long one member may take to answer a status request.
const STATUS_LIMIT: Duration = Duration::from_secs(2);
/// How long the leader may take to decide a change: it first applies everything through
/// its last entry (a read index, then up to a decision's timeout), and an added member
/// catches up, before the change's two entries commit.
const CHANGE_LIMIT: Duration = Duration::from_secs(
    READ_ATTEMPT.as_secs() + DECIDE_TIMEOUT.as_secs() + CATCH_UP_TIMEOUT.as_secs() + 10,
);
/// Times a change is asked of the leader before it gives up (leadership moving, a leader
/// not yet elected, an outcome in doubt), [`RETRY_WAIT`] apart.
const MAX_ATTEMPTS: usize = 8;
const RETRY_WAIT: Duration = Duration::from_millis(500);

/// What the administrator asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCommand {
    Status,
    Add {
        member: MemberId,
        replication: Option<SocketAddr>,
        client: Option<SocketAddr>,
    },
    Remove {
        member: MemberId,
    },
}

/// Exit codes of `cairn cluster`.
pub mod exit {
    /// The cluster refused the change, or no member answered.
    pub const FAILED: u8 = 1;
    /// The configuration names no cluster, or the command is malformed.
    pub const INVALID: u8 = 2;
}

/// One member as it answered.
#[derive(Debug, Serialize)]
struct MemberRow {
    member: MemberId,
    replication: String,
    /// Its replica's id (`member.incarnation`), when it answered.
    replica: Option<String>,
    /// `leader`, `voter`, `learner`, `outside` (a replica not in the group: a new one an
    /// administrator adds, or one removed), or `unreachable`: as the leader's committed
    /// configuration has it when a leader answered (a removed replica hears of its removal
    /// from no one), else as the member itself sees it.
    role: &'static str,
    leader: Option<String>,
    applied: Option<u64>,
    /// The partition groups it runs a replica of, and of those the ones it leads.
    partitions: Option<PartitionsLed>,
    error: Option<String>,
}

struct Admin {
    env: Env,
    cluster: u128,
    key: PeerKey,
    members: Vec<(MemberId, SocketAddr)>,
}

/// Runs `command` against the cluster `config` names.
pub fn run(config: &ServerConfig, command: AdminCommand, json: bool) -> ExitCode {
    let cluster = &config.cluster;
    let (true, Some(key)) = (cluster.enabled, cluster.key()) else {
        eprintln!("cairn cluster: the configuration names no cluster ([cluster] enabled, secret and members, or CAIRN_CLUSTER_*)");
        return ExitCode::from(exit::INVALID);
    };
    let env = match cairn_engine::env::real::env() {
        Ok(env) => env,
        Err(e) => {
            eprintln!("cairn cluster: cannot start: {e}");
            return ExitCode::from(exit::INVALID);
        }
    };
    let admin = Admin {
        env,
        cluster: cluster.cluster_id(),
        key,
        members: cluster
            .members
            .iter()
            .map(|m| (m.id, m.replication))
            .collect(),
    };
    let change = match command {
        AdminCommand::Status => {
            let rows = cairn_engine::env::real::block_on(admin.rows());
            return print_status(&cluster.name, &rows, json);
        }
        AdminCommand::Remove { member } => MemberChange::Remove { member },
        AdminCommand::Add {
            member,
            replication,
            client,
        } => {
            let configured = cluster.members.iter().find(|m| m.id == member);
            let (Some(replication), Some(client)) = (
                replication.or(configured.map(|m| m.replication)),
                client.or(configured.map(|m| m.client)),
            ) else {
                eprintln!("cairn cluster add: member {member} is not in the configuration: give --replication and --client");
                return ExitCode::from(exit::INVALID);
            };
            let peer = Peer {
                raft: replication.to_string(),
                client: client.to_string(),
            };
            MemberChange::Add { member, peer }
        }
    };
    match cairn_engine::env::real::block_on(admin.change(change)) {
        Ok(status) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "voters": ids(&status.voters), "learners": ids(&status.learners), "joint": status.joint })
                );
            } else {
                println!("changed: voters {}", ids(&status.voters).join(" "));
            }
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("cairn cluster: {why}");
            ExitCode::from(exit::FAILED)
        }
    }
}

fn ids(replicas: &std::collections::BTreeMap<NodeId, Peer>) -> Vec<String> {
    replicas.keys().map(|id| show_id(*id)).collect()
}

impl Admin {
    async fn status_of(&self, member: MemberId, addr: SocketAddr) -> Result<GroupStatus, String> {
        let cluster = (self.cluster, &self.key);
        match ask(
            &self.env,
            cluster,
            member,
            addr,
            AdminRequest::Status,
            STATUS_LIMIT,
        )
        .await
        {
            Ok(AdminReply::Status(status)) => Ok(status),
            Ok(other) => Err(format!("answered {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn rows(&self) -> Vec<MemberRow> {
        let mut answers = Vec::with_capacity(self.members.len());
        for &(member, addr) in &self.members {
            answers.push((member, addr, self.status_of(member, addr).await));
        }
        let statuses = answers.iter().filter_map(|(_, _, s)| s.as_ref().ok());
        let leader = highest_leader(statuses).cloned();
        let mut rows = Vec::with_capacity(answers.len());
        for (member, addr, answer) in answers {
            let row = match answer {
                Ok(status) => MemberRow {
                    member,
                    replication: addr.to_string(),
                    replica: Some(show_id(status.me)),
                    role: role(status.me, leader.as_ref().unwrap_or(&status)),
                    leader: status.leader.map(show_id),
                    applied: status.last_applied,
                    partitions: Some(status.partitions),
                    error: None,
                },
                Err(error) => MemberRow {
                    member,
                    replication: addr.to_string(),
                    replica: None,
                    role: "unreachable",
                    leader: None,
                    applied: None,
                    partitions: None,
                    error: Some(error),
                },
            };
            rows.push(row);
        }
        rows
    }

    /// The member whose replica says it leads, and its address. Every configured member is
    /// asked first, then the leaders they name at addresses the configuration lacks (a
    /// replica added since): a leader that was killed is still named by its followers for
    /// an election timeout, and a removed replica names the last leader it heard of, so
    /// neither is taken for one because it is named. Of replicas that say they lead, the
    /// one in the highest term (an old leader cut off from the rest may not know yet).
    async fn leader(&self) -> Result<(MemberId, SocketAddr), String> {
        let mut last = String::from("no member is configured");
        let mut named = Vec::new();
        let mut leading = Vec::new();
        for &(member, addr) in &self.members {
            match self.status_of(member, addr).await {
                Ok(status) if status.leads() => leading.push((status.term, member, addr)),
                Ok(status) => {
                    last = format!("member {member} knows no reachable leader");
                    if let Some(leader) = status.leader.and_then(|l| self.address_of(l, &status)) {
                        named.push(leader);
                    }
                }
                Err(e) => last = format!("member {member} at {addr}: {e}"),
            }
        }
        for (member, addr) in named {
            if self.members.contains(&(member, addr)) {
                continue;
            }
            if let Ok(status) = self.status_of(member, addr).await {
                if status.leads() {
                    leading.push((status.term, member, addr));
                }
            }
        }
        match leading
            .into_iter()
            .max_by_key(|(term, member, _)| (*term, *member))
        {
            Some((_, member, addr)) => Ok((member, addr)),
            None => Err(format!("no reachable replica leads ({last})")),
        }
    }

    /// Where the replica `leader` is, as `status` (its committed configuration) has it.
    fn address_of(&self, leader: NodeId, status: &GroupStatus) -> Option<(MemberId, SocketAddr)> {
        let addr = status.voters.get(&leader)?.raft.parse().ok()?;
        Some((member_of(leader), addr))
    }

    /// Asks the leader for `change`, again while leadership moves or the outcome is in
    /// doubt (a change that took effect is not made twice: the leader answers the
    /// configuration it finds).
    async fn change(&self, change: MemberChange) -> Result<GroupStatus, String> {
        let mut last = String::new();
        for attempt in 0..MAX_ATTEMPTS {
            if attempt > 0 {
                self.env.clock.sleep(RETRY_WAIT).await;
            }
            let (member, addr) = match self.leader().await {
                Ok(leader) => leader,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let request = AdminRequest::Change(change.clone());
            let cluster = (self.cluster, &self.key);
            match ask(&self.env, cluster, member, addr, request, CHANGE_LIMIT).await {
                Ok(AdminReply::Changed(Ok(status))) => return Ok(status),
                Ok(AdminReply::Changed(Err(
                    e @ (ProposeError::NotLeader { .. }
                    | ProposeError::InDoubt
                    | ProposeError::Busy(_)),
                ))) => last = e.to_string(),
                Ok(AdminReply::Changed(Err(e))) => return Err(e.to_string()),
                Ok(other) => return Err(format!("the leader answered {other:?}")),
                Err(e) => last = format!("the leader (member {member} at {addr}): {e}"),
            }
        }
        Err(format!("no change after {MAX_ATTEMPTS} attempts: {last}"))
    }
}

fn role(me: NodeId, status: &GroupStatus) -> &'static str {
    if status.leader == Some(me) {
        "leader"
    } else if status.voters.contains_key(&me) {
        "voter"
    } else if status.learners.contains_key(&me) {
        "learner"
    } else {
        "outside"
    }
}

fn print_status(name: &str, rows: &[MemberRow], json: bool) -> ExitCode {
    if json {
        println!(
            "{}",
            serde_json::json!({ "cluster": name, "members": rows })
        );
    } else {
        println!("cluster {name}");
        println!(
            "{:<7} {:<12} {:<12} {:<22} {:<12} {:>8} {:>11}",
            "member", "replica", "role", "replication", "leader", "applied", "partitions"
        );
        for row in rows {
            let dash = || "-".to_string();
            println!(
                "{:<7} {:<12} {:<12} {:<22} {:<12} {:>8} {:>11}",
                row.member,
                row.replica.clone().unwrap_or_else(dash),
                row.role,
                row.replication,
                row.leader.clone().unwrap_or_else(dash),
                row.applied.map_or_else(dash, |a| a.to_string()),
                row.partitions.map_or_else(dash, partitions_shown),
            );
            if let Some(error) = &row.error {
                println!("        {error}");
            }
            if row.role == "outside" {
                println!("        a replica outside the group (a new one: `cairn cluster add {}` makes it a voter)", row.member);
            }
        }
    }
    if rows.iter().any(|r| r.error.is_none()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILED)
    }
}

/// A member's partitions as `cairn cluster status` shows them: how many it leads of those
/// it runs, and how many of those its replica does not vote in yet.
fn partitions_shown(p: cairn_cluster::group::PartitionsLed) -> String {
    match p.running.saturating_sub(p.voting) {
        0 => format!("{} led/{}", p.led, p.running),
        out => format!("{} led/{}, {out} not voting", p.led, p.running),
    }
}

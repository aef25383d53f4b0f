//! `cairn cluster status|add|remove`: an administrator's requests to the members, over
//! their replication addresses, proving the cluster's secret as peers do
//! (`cairn_cluster::net::ask`). It reads the same configuration as `cairn serve` (the
//! file, then `CAIRN_*`): the cluster's name, secret and members.
//!
//! A change goes to the leader (asked of every member until one names it) and is decided
//! by consensus there: an added member first catches up as a learner, then becomes a voter
//! in place of any earlier replica of the same member (one whose disk was wiped).

use crate::config::ServerConfig;
use cairn_cluster::group::{GroupStatus, MemberChange, ProposeError, CATCH_UP_TIMEOUT};
use cairn_cluster::net::{ask, AdminReply, AdminRequest, PeerKey};
use cairn_cluster::types::{member_of, show_id, MemberId, NodeId, Peer};
use cairn_engine::env::Env;
use serde::Serialize;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// How long one member may take to answer a status request.
const STATUS_LIMIT: Duration = Duration::from_secs(2);
/// How long the leader may take to decide a change (an added member catches up first).
const CHANGE_LIMIT: Duration = Duration::from_secs(CATCH_UP_TIMEOUT.as_secs() + 10);
/// Leaders followed before a change gives up (each names the next while leadership moves).
const MAX_REDIRECTS: usize = 3;

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
        let leader = answers.iter().find_map(|(_, _, status)| {
            status
                .as_ref()
                .ok()
                .filter(|s| s.leader == Some(s.me))
                .cloned()
        });
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
                    error: None,
                },
                Err(error) => MemberRow {
                    member,
                    replication: addr.to_string(),
                    replica: None,
                    role: "unreachable",
                    leader: None,
                    applied: None,
                    error: Some(error),
                },
            };
            rows.push(row);
        }
        rows
    }

    /// The leader's member and replication address, as the first member that knows it says.
    async fn leader(&self) -> Result<(MemberId, SocketAddr), String> {
        let mut last = String::from("no member is configured");
        for &(member, addr) in &self.members {
            match self.status_of(member, addr).await {
                Ok(status) => match status.leader {
                    Some(leader) => return self.address_of(leader, &status),
                    None => last = format!("member {member} knows no leader"),
                },
                Err(e) => last = format!("member {member} at {addr}: {e}"),
            }
        }
        Err(format!("no leader found ({last})"))
    }

    fn address_of(
        &self,
        leader: NodeId,
        status: &GroupStatus,
    ) -> Result<(MemberId, SocketAddr), String> {
        let member = member_of(leader);
        let known = status.voters.get(&leader).and_then(|p| p.raft.parse().ok());
        let configured = self
            .members
            .iter()
            .find(|(m, _)| *m == member)
            .map(|(_, a)| *a);
        known
            .or(configured)
            .map(|addr| (member, addr))
            .ok_or_else(|| format!("the leader {} has no known address", show_id(leader)))
    }

    async fn change(&self, change: MemberChange) -> Result<GroupStatus, String> {
        let (mut member, mut addr) = self.leader().await?;
        for _ in 0..MAX_REDIRECTS {
            let request = AdminRequest::Change(change.clone());
            let reply = ask(
                &self.env,
                (self.cluster, &self.key),
                member,
                addr,
                request,
                CHANGE_LIMIT,
            )
            .await
            .map_err(|e| format!("the leader (member {member} at {addr}): {e}"))?;
            match reply {
                AdminReply::Changed(Ok(status)) => return Ok(status),
                AdminReply::Changed(Err(ProposeError::NotLeader {
                    leader: Some(l), ..
                })) => {
                    // The one that answered knows the new leader's address.
                    let status = self.status_of(member, addr).await.ok();
                    (member, addr) = match status {
                        Some(status) => self.address_of(l, &status)?,
                        None => self.leader().await?,
                    };
                }
                AdminReply::Changed(Err(e)) => return Err(e.to_string()),
                other => return Err(format!("the leader answered {other:?}")),
            }
        }
        Err(format!(
            "leadership moved {MAX_REDIRECTS} times during the change: try again"
        ))
    }
}

/// The role of replica `me` in the configuration `status` holds.
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
            "{:<7} {:<12} {:<12} {:<22} {:<12} {:>8}",
            "member", "replica", "role", "replication", "leader", "applied"
        );
        for row in rows {
            let dash = || "-".to_string();
            println!(
                "{:<7} {:<12} {:<12} {:<22} {:<12} {:>8}",
                row.member,
                row.replica.clone().unwrap_or_else(dash),
                row.role,
                row.replication,
                row.leader.clone().unwrap_or_else(dash),
                row.applied.map_or_else(dash, |a| a.to_string()),
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

//! The server as a member of a cluster (`[cluster]`), and `cairn cluster`, its
//! administrator's command.
//!
//! What runs today: the metadata consensus group's replica (`cairn_cluster`): its Raft log
//! and vote under `{data_dir}/cluster/metadata`, its peer listener on this member's
//! replication address, the founding of the group at the first start, and the membership
//! changes an administrator asks for. The node's metadata ops (streams, topics, partitions,
//! groups, users, tokens) are decided by the group and applied by every member's node; the
//! root user is the group's first op, proposed by a leader that finds no user. Each
//! partition's sends are ordered by the partition's own group (`cairn_cluster::partition`),
//! whose WAL lives under `{data_dir}/cluster/partitions`.

pub mod admin;

use crate::config::ServerConfig;
use cairn_cluster::decide::GroupDecider;
use cairn_cluster::group::{GroupConfig, MetaGroup, Replica};
use cairn_cluster::partition::groups::{
    PartGroups, Tuning, CHECKPOINT_EVERY, LOG_KEPT, QUIET_AFTER,
};
use cairn_cluster::types::show_id;
use cairn_engine::env::Env;
use cairn_engine::node::{Node, NodeError};
use cairn_engine::state::{ROOT_USER_ID, USER_ACTIVE};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often a member looks whether the cluster has its root user yet.
const ROOT_POLL: Duration = Duration::from_millis(200);

/// The replica's directory under the data directory.
pub fn group_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("cluster").join("metadata")
}

/// Where the partition groups' WALs live under the data directory.
pub fn partitions_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("cluster").join("partitions")
}

/// The partition groups' Raft timing: an election within a second of a leader's silence,
/// so sends resume within about that after a member dies.
const PARTITION_TUNING: Tuning = Tuning {
    heartbeat: Duration::from_millis(100),
    election: (Duration::from_millis(400), Duration::from_millis(800)),
    checkpoint_every: CHECKPOINT_EVERY,
    log_kept: LOG_KEPT,
    quiet_after: QUIET_AFTER,
};

/// Starts this member's replica of the metadata group, as `[cluster]` configures it (a
/// checked configuration with `enabled`), with `node` (booted clustered) applying its
/// commands and having its metadata ops decided by it.
pub async fn start(env: &Env, config: &ServerConfig, node: &Node) -> Result<MetaGroup, String> {
    let cluster = &config.cluster;
    assert!(cluster.enabled, "start is called for a cluster member only");
    cluster.serving()?;
    if config.root.password.is_none() {
        // The root user is the cluster's first op, made by whichever member leads then: a
        // password generated there would be shown by that member alone, if it lived.
        return Err("a cluster member needs root.password (CAIRN_ROOT_PASSWORD), the same on every member: the cluster's root user is made with it".into());
    }
    let key = cluster
        .key()
        .ok_or("cluster.secret is not set (the configuration's check refuses that)")?;
    let mut group = GroupConfig::new(
        (cluster.cluster_id(), key),
        cluster.node,
        cluster.peers(),
        group_dir(&config.data_dir),
    );
    group.bootstrap = cluster.bootstrap;
    group.node = Some(node.clone());
    let started = MetaGroup::start(env, group)
        .await
        .map_err(|e| format!("the cluster's replica did not start: {e}"))?;
    node.set_decider(Arc::new(GroupDecider::new(Replica::clone(&started))));
    let groups = PartGroups::new(
        env,
        node.clone(),
        Replica::clone(&started),
        partitions_dir(&config.data_dir),
        PARTITION_TUNING,
    );
    groups.install();
    drop(env.tasks.spawn(Box::pin(groups.run())));
    let me = cluster.me().expect("serving() found this node");
    tracing::info!(
        cluster = %cluster.name,
        member = cluster.node,
        replica = %show_id(started.id()),
        replication = %me.replication,
        "member of the cluster; metadata and every partition's sends are replicated by it"
    );
    Ok(started)
}

/// Until the cluster has a user: while this member's replica leads, proposes the root user
/// (`username`, `password`). Every member runs it; the first leader to find no user makes
/// it (a second proposal is refused alike on every member: the name exists). Answers
/// whether this member created it.
pub async fn found_root(
    env: Env,
    node: Node,
    replica: Replica,
    username: String,
    password: String,
) -> bool {
    loop {
        if !node.view().state.users().is_empty() || replica.failure().is_some() {
            return false;
        }
        // Only a leader that has applied everything committed before its read index reads
        // "no user" as the cluster's answer (a new leader's node may still be behind).
        if replica.leader() == Some(replica.id())
            && replica.linearize().await
            && node.view().state.users().is_empty()
        {
            let created = node
                .client(0)
                .create_user(&username, &password, USER_ACTIVE, None)
                .await;
            match created {
                Ok(id) => {
                    if id != ROOT_USER_ID {
                        tracing::error!(id, "the root user was not the cluster's first user");
                    }
                    tracing::info!(user = %username, "created the cluster's root user");
                    return true;
                }
                // Another leader created it first.
                Err(NodeError::Refused { code, .. })
                    if code == NodeError::UserExists(String::new()).code() =>
                {
                    return false
                }
                Err(e) => tracing::warn!(error = %e, "the root user was not created yet"),
            }
        }
        env.clock.sleep(ROOT_POLL).await;
    }
}

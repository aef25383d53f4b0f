//! The server as a member of a cluster (`[cluster]`), and `cairn cluster`, its
//! administrator's command.
//!
//! What runs today: the metadata consensus group's replica (`cairn_cluster`): its Raft log
//! and vote under `{data_dir}/cluster/metadata`, its peer listener on this member's
//! replication address, the founding of the group at the first start, and the membership
//! changes an administrator asks for. Streams, topics and messages are not replicated yet:
//! each node serves what it took itself (the README's cluster page says so).

pub mod admin;

use crate::config::ServerConfig;
use cairn_cluster::group::{GroupConfig, MetaGroup};
use cairn_cluster::types::show_id;
use cairn_engine::env::Env;
use std::path::{Path, PathBuf};

/// The replica's directory under the data directory.
pub fn group_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("cluster").join("metadata")
}

/// Starts this member's replica of the metadata group, as `[cluster]` configures it (a
/// checked configuration with `enabled`).
pub async fn start(env: &Env, config: &ServerConfig) -> Result<MetaGroup, String> {
    let cluster = &config.cluster;
    assert!(cluster.enabled, "start is called for a cluster member only");
    cluster.serving()?;
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
    let started = MetaGroup::start(env, group)
        .await
        .map_err(|e| format!("the cluster's replica did not start: {e}"))?;
    let me = cluster.me().expect("serving() found this node");
    tracing::info!(
        cluster = %cluster.name,
        member = cluster.node,
        replica = %show_id(started.id()),
        replication = %me.replication,
        "member of the cluster; streams, topics and messages are not replicated yet: this node serves what it takes"
    );
    Ok(started)
}

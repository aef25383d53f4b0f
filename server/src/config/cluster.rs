//! `[cluster]`: run as a member of a cluster (`cairn_cluster`). Off by default: a single
//! node is the embedded default and needs none of it.
//!
//! ```toml
//! [cluster]
//! enabled = true
//! name = "orders"              # the cluster's id is drawn from it
//! node = 1                     # this node's member id
//! secret = "…"                 # every member's connections prove it (≥ 16 bytes)
//! replication_factor = 3       # copies of each partition (a topic may name its own)
//! [[cluster.members]]
//! id = 1
//! replication = "10.0.0.1:8091"
//! client = "10.0.0.1:8090"
//! ```
//!
//! `CAIRN_CLUSTER_MEMBERS` takes the list as a TOML array:
//! `[{id=1, replication="10.0.0.1:8091", client="10.0.0.1:8090"}, …]`.

use super::validate::Rules;
use super::{socket_addr, ConfigError, PASSWORD_MASK};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;

/// Most members a cluster is configured with.
pub const MAX_MEMBERS: usize = 7;
/// The copies of each partition a cluster keeps unless a topic names its own.
pub const DEFAULT_REPLICATION_FACTOR: u8 = 3;
const _: () = assert!(MAX_MEMBERS == cairn_engine::state::options::MAX_REPLICATION_FACTOR as usize);
/// The shortest shared secret.
pub const MIN_SECRET_BYTES: usize = cairn_cluster::net::PeerKey::MIN_SECRET;
/// The longest shared secret.
pub const MAX_SECRET_BYTES: usize = 1024;

/// `[cluster]`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Run as a member of the cluster `members` make up.
    pub enabled: bool,
    /// The cluster's name (what `GetClusterMetadata` answers); its id, which every
    /// connection between members checks, is drawn from it.
    pub name: String,
    /// This node's member id: one of `members`. 0 in an administrator's configuration,
    /// which `cairn cluster` reads and `cairn serve` refuses ([`ClusterConfig::serving`]).
    pub node: u32,
    /// The secret every connection between members (and `cairn cluster`'s) proves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Make the cluster from `members` at their first start (the lowest id does, once every
    /// member answers that it holds none of it). A node started without it waits to be
    /// added (`cairn cluster add`).
    pub bootstrap: bool,
    /// How many members keep a copy of each partition of a topic whose creation names no
    /// `replication_factor` (2 to [`MAX_MEMBERS`]; at most every member).
    pub replication_factor: u8,
    pub members: Vec<MemberConfig>,
}

/// One member: its id, where its peers reach it, and where clients do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberConfig {
    pub id: u32,
    #[serde(with = "socket_addr")]
    pub replication: SocketAddr,
    #[serde(with = "socket_addr")]
    pub client: SocketAddr,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            enabled: false,
            name: "cairn".into(),
            node: 0,
            secret: None,
            bootstrap: true,
            replication_factor: DEFAULT_REPLICATION_FACTOR,
            members: Vec::new(),
        }
    }
}

/// Never prints the secret.
impl fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("enabled", &self.enabled)
            .field("name", &self.name)
            .field("node", &self.node)
            .field("secret", &self.secret.as_ref().map(|_| PASSWORD_MASK))
            .field("bootstrap", &self.bootstrap)
            .field("replication_factor", &self.replication_factor)
            .field("members", &self.members)
            .finish()
    }
}

/// Whether listening on `a` and on `b` would take one port (an unspecified IP, `0.0.0.0`,
/// listens on every IP).
fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    let any = a.ip().is_unspecified() || b.ip().is_unspecified();
    a.port() == b.port() && (any || a.ip() == b.ip())
}

impl ClusterConfig {
    /// The cluster's id, drawn from its name: two clusters of one name (and one secret)
    /// would take each other's members for their own, so the names should differ.
    pub fn cluster_id(&self) -> u128 {
        xxhash_rust::xxh3::xxh3_128(format!("cairn cluster {}", self.name).as_bytes())
    }

    /// The members as the cluster crate takes them.
    pub fn peers(&self) -> BTreeMap<u32, cairn_cluster::types::Peer> {
        self.members
            .iter()
            .map(|m| {
                let peer = cairn_cluster::types::Peer {
                    raft: m.replication.to_string(),
                    client: m.client.to_string(),
                };
                (m.id, peer)
            })
            .collect()
    }

    /// The shared secret as a key (a checked configuration has one when enabled).
    pub fn key(&self) -> Option<cairn_cluster::net::PeerKey> {
        let secret = self.secret.as_deref()?;
        (secret.len() >= MIN_SECRET_BYTES)
            .then(|| cairn_cluster::net::PeerKey::new(secret.as_bytes()))
    }

    /// Why `cairn serve` cannot run as a member with this configuration, if it cannot: a
    /// checked configuration refuses every other case, but takes node 0 for an
    /// administrator's.
    pub fn serving(&self) -> Result<(), String> {
        match self.enabled && self.me().is_none() {
            true => Err(format!(
                "cluster.node is {} (an administrator's configuration, for `cairn cluster`): a member names itself, one of cluster.members",
                self.node
            )),
            false => Ok(()),
        }
    }

    /// This node's entry among the members.
    pub fn me(&self) -> Option<&MemberConfig> {
        self.members.iter().find(|m| m.id == self.node)
    }

    /// `tcp`: where this node listens for clients; `listeners`: every address it listens on.
    pub(super) fn check(
        &self,
        rules: &Rules<'_>,
        tcp: SocketAddr,
        listeners: &[SocketAddr],
    ) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if self.name.is_empty() || self.name.len() > 255 {
            return Err(rules.fail("cluster.name", "must be 1 to 255 bytes".into()));
        }
        self.check_secret(rules)?;
        if !(2..=MAX_MEMBERS).contains(&usize::from(self.replication_factor)) {
            return Err(rules.fail(
                "cluster.replication_factor",
                format!("must be 2 to {MAX_MEMBERS} (the copies of each partition; a cluster keeps at least two)"),
            ));
        }
        if self.members.is_empty() || self.members.len() > MAX_MEMBERS {
            return Err(rules.fail(
                "cluster.members",
                format!("a cluster has 1 to {MAX_MEMBERS} members"),
            ));
        }
        let mut ids = BTreeSet::new();
        let mut addrs = BTreeSet::new();
        for member in &self.members {
            if member.id == 0 || !ids.insert(member.id) {
                return Err(rules.fail(
                    "cluster.members",
                    format!("member ids are nonzero and unique ({} is not)", member.id),
                ));
            }
            // Clients are told it (`GetClusterMetadata`) and dial it.
            if member.client.ip().is_unspecified() {
                return Err(rules.fail(
                    "cluster.members",
                    format!(
                        "member {}'s client address {} is where clients dial it: not an unspecified IP",
                        member.id, member.client
                    ),
                ));
            }
            // Every member's two addresses are its own: no two alike among all of them.
            for addr in [member.replication, member.client] {
                if !addrs.insert(addr) {
                    return Err(rules.fail(
                        "cluster.members",
                        format!("{addr} is given twice among the members' addresses"),
                    ));
                }
            }
        }
        if self.node == 0 {
            // An administrator's configuration: no node of its own to check.
            return Ok(());
        }
        let Some(me) = self.me() else {
            return Err(rules.fail(
                "cluster.node",
                format!("{} is not among cluster.members (ids {ids:?})", self.node),
            ));
        };
        if listeners.iter().any(|l| overlap(*l, me.replication)) {
            return Err(rules.fail(
                "cluster.members",
                format!(
                    "this node's replication address {} is also a listener's",
                    me.replication
                ),
            ));
        }
        // What the cluster tells clients of this node must be where it listens (an
        // unspecified listen address, 0.0.0.0, listens on the client address's IP too).
        let same_ip = tcp.ip().is_unspecified() || tcp.ip() == me.client.ip();
        if tcp.port() != me.client.port() || !same_ip {
            return Err(rules.fail(
                "cluster.members",
                format!(
                    "this node's client address {} is not where it listens (tcp.address {tcp})",
                    me.client
                ),
            ));
        }
        Ok(())
    }

    fn check_secret(&self, rules: &Rules<'_>) -> Result<(), ConfigError> {
        let Some(secret) = &self.secret else {
            return Err(rules.fail(
                "cluster.secret",
                "must be set when cluster.enabled is true (every member's, the same)".into(),
            ));
        };
        if secret == PASSWORD_MASK {
            return Err(rules.fail(
                "cluster.secret",
                format!("{PASSWORD_MASK:?} is the mask --print-config shows, not a secret"),
            ));
        }
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&secret.len()) {
            return Err(rules.fail(
                "cluster.secret",
                format!("must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes (the value is not shown)"),
            ));
        }
        Ok(())
    }
}

//! The cluster as Iggy's SDK reads it (`docs/wire.md` §5.1): `GetClusterMetadata`'s roster
//! of members with their roles and health, and the poll routing that a roster of more than
//! one member switches the SDK to (`GetPollRouting` 103, `GetConsumerOffsetRouting` 123:
//! which member a consumer's auto-commit polls and offset writes go to, and the session
//! they act for there).
//!
//! A routed request names this member as its primary: the member the coordinator's session
//! lives on, so the data connection's attachment to that session is checked here, and a
//! partition another member leads is forwarded inside the cluster as any request is.
//!
//! Health, as this member's replica of the metadata group knows it:
//!
//! | member                              | status        |
//! |-------------------------------------|---------------|
//! | this one (a voter)                  | healthy       |
//! | a learner (being filled, this one too) | starting   |
//! | the leader, seen by a follower      | healthy       |
//! | a voter, seen by the leader         | healthy if it answered a heartbeat within [`UNHEARD_AFTER_MS`], else unreachable |
//! | a voter, seen by a follower         | healthy: a follower hears only its leader, and the SDK's status set has no "unknown" it accepts (`iggy_common` decodes 0..=4), so the leader's roster is the one to ask |

use super::{Call, Reply};
use cairn_cluster::group::GroupStatus;
use cairn_cluster::types::{member_of, NodeId, Peer};
use iggy_binary_protocol::requests::system::AttachConsumerSessionRequest;
use iggy_binary_protocol::responses::messages::PollRoutingResponse;
use iggy_binary_protocol::responses::system::{ClusterMetadataResponse, ClusterNodeResponse};
use iggy_common::{ClusterNodeRole, ClusterNodeStatus};
use std::net::SocketAddr;

/// A voter the leader has not heard from for this long is reported unreachable (the
/// metadata group's leader sends a heartbeat every 50 ms).
pub const UNHEARD_AFTER_MS: u64 = 2_000;

/// `GetClusterMetadata`: the cluster's members, or, for a single node, that node at the
/// address its binary listener is bound to.
pub fn cluster_metadata(call: &Call<'_>) -> Reply {
    let metadata = match call.cx.cluster.get() {
        Some(source) => {
            let status = (source.status)(false);
            let mut nodes = roster(&status);
            // A member in no configuration yet (wiped, waiting to be added) names itself
            // alone: an empty roster is an error to the SDK.
            if nodes.is_empty() {
                nodes.push(alone(status.me, source.client));
            }
            ClusterMetadataResponse {
                name: source.name.clone(),
                nodes,
            }
        }
        None => ClusterMetadataResponse {
            name: "cairn".into(),
            nodes: vec![single(call.cx.local_addr)],
        },
    };
    Reply::ClusterMetadata(metadata)
}

/// `GetPollRouting` and `GetConsumerOffsetRouting`: this member, and the asking session
/// for the data connection to attach to.
pub fn routing(call: &Call<'_>) -> Reply {
    let session = call.session();
    let primary = match call.cx.cluster.get() {
        Some(source) => {
            let status = (source.status)(false);
            let (voter, learner) = (
                status.voters.get(&status.me),
                status.learners.get(&status.me),
            );
            let me = voter.map(|p| (p, true)).or(learner.map(|p| (p, false)));
            me.and_then(|(peer, voter)| member(&status, status.me, peer, voter))
                .unwrap_or_else(|| alone(status.me, source.client))
        }
        None => single(call.cx.local_addr),
    };
    Reply::Routing(PollRoutingResponse {
        consumer_session: AttachConsumerSessionRequest {
            client_id: session.client,
            session: session.session,
            metadata_watermark: call.view.op,
        },
        primary,
    })
}

/// A member's name: `cairn-` and its member id (a replica's Raft id also carries the
/// incarnation of its storage).
fn member_name(id: NodeId) -> String {
    format!("cairn-{}", member_of(id))
}

/// A member in no configuration yet (wiped, waiting to be added), at its configured
/// client address.
fn alone(me: NodeId, client: SocketAddr) -> ClusterNodeResponse {
    node(
        member_name(me),
        client,
        ClusterNodeRole::Follower,
        ClusterNodeStatus::Starting,
    )
}

/// The one node of a single-node server.
fn single(addr: SocketAddr) -> ClusterNodeResponse {
    node(
        "cairn-0".into(),
        addr,
        ClusterNodeRole::Leader,
        ClusterNodeStatus::Healthy,
    )
}

fn node(
    name: String,
    addr: SocketAddr,
    role: ClusterNodeRole,
    status: ClusterNodeStatus,
) -> ClusterNodeResponse {
    ClusterNodeResponse {
        name,
        ip: addr.ip().to_string(),
        tcp_port: addr.port(),
        quic_port: 0,
        http_port: 0,
        websocket_port: 0,
        role: role as u8,
        status: status as u8,
    }
}

/// Every member of `status`'s configuration (voters, then learners, each by id), at the
/// client address it was added with. A member whose address does not parse is left out:
/// the SDK could not dial it.
pub fn roster(status: &GroupStatus) -> Vec<ClusterNodeResponse> {
    let voters = status.voters.iter().map(|(id, peer)| (*id, peer, true));
    let learners = status.learners.iter().map(|(id, peer)| (*id, peer, false));
    voters
        .chain(learners)
        .filter_map(|(id, peer, voter)| member(status, id, peer, voter))
        .collect()
}

/// Member `id` (its replica's `peer` addresses; a `voter` or a learner) as `status` shows
/// it; `None` when its client address does not parse.
fn member(
    status: &GroupStatus,
    id: NodeId,
    peer: &Peer,
    voter: bool,
) -> Option<ClusterNodeResponse> {
    let addr: SocketAddr = peer.client.parse().ok()?;
    let role = match status.leader == Some(id) {
        true => ClusterNodeRole::Leader,
        false => ClusterNodeRole::Follower,
    };
    Some(node(member_name(id), addr, role, health(status, id, voter)))
}

/// The health of member `id` as `status`'s replica knows it (the module's table).
fn health(status: &GroupStatus, id: NodeId, voter: bool) -> ClusterNodeStatus {
    if !voter {
        return ClusterNodeStatus::Starting;
    }
    if id == status.me || status.leader == Some(id) {
        return ClusterNodeStatus::Healthy;
    }
    if !status.leads() {
        return ClusterNodeStatus::Healthy;
    }
    match status.heard_ms.get(&id) {
        Some(ago) if *ago < UNHEARD_AFTER_MS => ClusterNodeStatus::Healthy,
        _ => ClusterNodeStatus::Unreachable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_cluster::types::replica_id;

    /// Member `m`'s replica (of an incarnation the roster does not show).
    fn r(m: u32) -> NodeId {
        replica_id(m, 0x5eed)
    }

    fn peer(port: u16) -> Peer {
        Peer {
            raft: format!("127.0.0.1:{}", port + 1),
            client: format!("127.0.0.1:{port}"),
        }
    }

    fn status(me: u32, leader: Option<u32>) -> GroupStatus {
        GroupStatus {
            me: r(me),
            leader: leader.map(r),
            term: 3,
            voters: [(r(1), peer(9010)), (r(2), peer(9020)), (r(3), peer(9030))].into(),
            learners: [(r(4), peer(9040))].into(),
            joint: false,
            matched: Default::default(),
            last_applied: Some(7),
            heard_ms: [(r(2), 40), (r(3), UNHEARD_AFTER_MS)].into(),
            partitions: Default::default(),
        }
    }

    fn shown(nodes: &[ClusterNodeResponse]) -> Vec<(String, u16, u8, u8)> {
        nodes
            .iter()
            .map(|n| (n.name.clone(), n.tcp_port, n.role, n.status))
            .collect()
    }

    const LEADER: u8 = ClusterNodeRole::Leader as u8;
    const FOLLOWER: u8 = ClusterNodeRole::Follower as u8;
    const HEALTHY: u8 = ClusterNodeStatus::Healthy as u8;
    const STARTING: u8 = ClusterNodeStatus::Starting as u8;
    const UNREACHABLE: u8 = ClusterNodeStatus::Unreachable as u8;

    #[test]
    fn the_leader_reports_whom_it_hears_and_the_learner_starting() {
        let nodes = roster(&status(1, Some(1)));
        assert_eq!(
            shown(&nodes),
            [
                ("cairn-1".into(), 9010, LEADER, HEALTHY),
                ("cairn-2".into(), 9020, FOLLOWER, HEALTHY),
                ("cairn-3".into(), 9030, FOLLOWER, UNREACHABLE),
                ("cairn-4".into(), 9040, FOLLOWER, STARTING),
            ]
        );
        assert!(nodes.iter().all(|n| n.ip == "127.0.0.1"));
    }

    #[test]
    fn a_follower_reports_every_voter_healthy() {
        let nodes = roster(&status(2, Some(1)));
        assert_eq!(
            shown(&nodes),
            [
                ("cairn-1".into(), 9010, LEADER, HEALTHY),
                ("cairn-2".into(), 9020, FOLLOWER, HEALTHY),
                ("cairn-3".into(), 9030, FOLLOWER, HEALTHY),
                ("cairn-4".into(), 9040, FOLLOWER, STARTING),
            ]
        );
    }

    #[test]
    fn without_a_leader_no_member_is_named_leader() {
        let nodes = roster(&status(3, None));
        assert!(nodes.iter().all(|n| n.role == FOLLOWER));
        assert_eq!(nodes[2].status, HEALTHY, "this member");
        assert!(nodes.iter().take(3).all(|n| n.status == HEALTHY));
    }

    /// What the SDK makes of every role and status this module answers (its decoder refuses
    /// a status outside 0..=4).
    #[test]
    fn the_sdk_decodes_every_roster_this_answers() {
        use iggy_binary_protocol::{WireDecode, WireEncode};
        for (me, leader) in [(1, Some(1)), (2, Some(1)), (3, None)] {
            let wire = ClusterMetadataResponse {
                name: "orders".into(),
                nodes: roster(&status(me, leader)),
            };
            let (decoded, _) = ClusterMetadataResponse::decode(&wire.to_bytes()).unwrap();
            let metadata = iggy_common::wire_conversions::cluster_metadata_from_wire(decoded)
                .expect("the SDK takes the roster");
            assert_eq!(metadata.nodes.len(), 4);
        }
        let alone = single("127.0.0.1:8090".parse().unwrap());
        assert!(iggy_common::ClusterNode::try_from(alone).is_ok());
    }

    #[test]
    fn a_member_whose_address_does_not_parse_is_left_out() {
        let mut status = status(1, Some(1));
        status.voters.insert(
            r(5),
            Peer {
                raft: "x".into(),
                client: "not an address".into(),
            },
        );
        assert_eq!(roster(&status).len(), 4);
    }
}

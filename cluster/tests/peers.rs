//! The peer port on the production environment (tokio, real sockets): the handshake that
//! proves the cluster's secret, and the administrator's requests.
// A test of the production environment: a free port is found with std's listener.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use cairn_cluster::group::{GroupConfig, MemberChange, MetaGroup, ProposeError};
use cairn_cluster::net::{ask, identify, AdminReply, AdminRequest, PeerKey};
use cairn_cluster::types::{member_of, Peer};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

const CLUSTER: u128 = 0x5eed;
const SECRET: &[u8] = b"a secret of the test cluster";
const LIMIT: Duration = Duration::from_secs(5);

/// A loopback address no one listens on now.
fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

#[test]
fn a_member_serves_only_connections_that_prove_the_secret() {
    let env = cairn_engine::env::real::env().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let members = BTreeMap::from([(
        1,
        Peer {
            raft: addr.to_string(),
            client: "127.0.0.1:8090".into(),
        },
    )]);
    let mut config = GroupConfig::new(
        (CLUSTER, PeerKey::new(SECRET)),
        1,
        members,
        dir.path().join("metadata"),
    );
    config.bootstrap = true;
    cairn_engine::env::real::block_on(async {
        let group = MetaGroup::start(&env, config).await.unwrap();
        let key = PeerKey::new(SECRET);
        // The one member founds the group and leads it.
        let started = env.clock.monotonic_nanos();
        let status = loop {
            let reply = ask(&env, (CLUSTER, &key), 1, addr, AdminRequest::Status, LIMIT).await;
            match reply.unwrap() {
                AdminReply::Status(status) if status.leader == Some(group.id()) => break status,
                _ => assert!(
                    env.clock.monotonic_nanos() - started < 10_000_000_000,
                    "no leader"
                ),
            }
            env.clock.sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(
            status
                .voters
                .keys()
                .map(|v| member_of(*v))
                .collect::<Vec<_>>(),
            [1]
        );

        // Another secret: refused before any request is read, and said so.
        let wrong = PeerKey::new(b"not the secret of the cluster");
        let refused = ask(
            &env,
            (CLUSTER, &wrong),
            1,
            addr,
            AdminRequest::Status,
            LIMIT,
        )
        .await
        .unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(refused.to_string().contains("secret"), "{refused}");
        let refused = identify(&env, (CLUSTER, &wrong), 0, 1, addr, LIMIT)
            .await
            .unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied);
        // Another cluster with the right secret: refused too, naming the clusters.
        let refused = identify(&env, (CLUSTER + 1, &key), 0, 1, addr, LIMIT)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("reached cluster"), "{refused}");
        // The right secret and cluster: who it is.
        let identity = identify(&env, (CLUSTER, &key), 0, 1, addr, LIMIT)
            .await
            .unwrap();
        assert_eq!(identity.id, group.id());
        assert!(identity.initialized);

        // Through consensus: the last voter cannot be removed.
        let change = AdminRequest::Change(MemberChange::Remove { member: 1 });
        match ask(&env, (CLUSTER, &key), 1, addr, change, LIMIT)
            .await
            .unwrap()
        {
            AdminReply::Changed(Err(ProposeError::Failed(why))) => {
                assert!(why.contains("last voter"), "{why}")
            }
            other => panic!("removing the last voter: {other:?}"),
        }
        group.stop().await;
    });
}

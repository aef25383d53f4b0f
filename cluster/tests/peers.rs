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

/// A one-member group's configuration: the member listens for peers on `addr` and founds
/// the group.
fn one_member(addr: SocketAddr, dir: &std::path::Path) -> GroupConfig {
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
        dir.join("metadata"),
    );
    config.bootstrap = true;
    config
}

#[test]
fn a_member_serves_only_connections_that_prove_the_secret() {
    let env = cairn_engine::env::real::env().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let config = one_member(addr, dir.path());
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
        assert!(refused.to_string().contains("did not prove"), "{refused}");
        let refused = identify(&env, (CLUSTER, &wrong), 0, 1, addr, LIMIT)
            .await
            .unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied);
        // Another cluster with the right secret: refused too, naming the clusters.
        let refused = identify(&env, (CLUSTER + 1, &key), 0, 1, addr, LIMIT)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("did not prove"), "{refused}");
        assert!(
            !refused.to_string().contains(&format!("{CLUSTER:x}")),
            "{refused}"
        );
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

/// Raw bytes at the peer port: nothing but a handshake is read, and a first frame past the
/// handshake's bound, or one that is not a hello, closes the connection unanswered.
#[test]
fn a_connection_without_the_handshake_is_closed_unanswered() {
    use std::io::{Read, Write};
    let env = cairn_engine::env::real::env().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let config = one_member(addr, dir.path());
    cairn_engine::env::real::block_on(async {
        let group = MetaGroup::start(&env, config).await.unwrap();
        for first in [
            // A header announcing a snapshot-sized frame.
            {
                let mut header = vec![0u8; 12];
                header[..4].copy_from_slice(&(64u32 << 20).to_le_bytes());
                header
            },
            // A well-formed frame that is not a hello.
            cairn_cluster::net::encode_frame(b"\x93\x01\x02\x03").unwrap(),
        ] {
            let mut socket = std::net::TcpStream::connect(addr).unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            // The challenge comes first, unasked.
            let mut header = [0u8; 12];
            socket.read_exact(&mut header).unwrap();
            let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
            assert!(len <= cairn_cluster::net::MAX_HELLO);
            let mut challenge = vec![0u8; len];
            socket.read_exact(&mut challenge).unwrap();
            socket.write_all(&first).unwrap();
            // Closed (an end of stream, or a reset for the bytes it left unread) without a
            // byte of answer; a read timeout would mean it is still open.
            let mut rest = Vec::new();
            let read = socket.read_to_end(&mut rest);
            assert!(rest.is_empty(), "answered: {rest:?}");
            match read {
                Ok(0) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
                other => panic!("not closed: {other:?}"),
            }
        }
        // A member asked for as another: refused, naming both.
        let key = PeerKey::new(SECRET);
        let refused = identify(&env, (CLUSTER, &key), 0, 2, addr, LIMIT)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("meant member 2"), "{refused}");
        group.stop().await;
    });
}

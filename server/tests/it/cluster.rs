//! Three real `cairn serve` processes as a cluster on loopback, administered with
//! `cairn cluster`: the metadata group founds itself, survives kill -9 of its leader, takes
//! a restarted member back as itself, takes a wiped member back only once an administrator
//! adds it, hands leadership over on SIGTERM, and refuses connections without the secret.

use crate::cluster_sdk::{
    every_member_holds, group_reads, make_orders_events, poll_next, send_keyed, send_one, stored_at,
};
use crate::common::Cairn;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub(crate) const SECRET: &str = "the test cluster's shared secret";
/// How long the group may take to elect a leader (elections start after 150 to 300 ms of
/// silence; a loaded CI host is slower).
pub(crate) const SETTLE: Duration = Duration::from_secs(20);

/// A loopback port free now, below Linux's ephemeral range (from 32768): a member restarted
/// after a kill gets its ports back even while its peers' reconnects take ephemeral ones.
fn free_addr() -> SocketAddr {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 400) as u16 * 25;
    loop {
        let port = base + NEXT.fetch_add(1, Ordering::Relaxed) % 2_000;
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return listener.local_addr().unwrap();
        }
    }
}

pub(crate) struct Members {
    replication: Vec<SocketAddr>,
    client: Vec<SocketAddr>,
}

impl Members {
    fn new() -> Members {
        Members {
            replication: (0..3).map(|_| free_addr()).collect(),
            client: (0..3).map(|_| free_addr()).collect(),
        }
    }

    /// The `[cluster]` variables of member `node` (1-based), with `secret`.
    fn vars(&self, node: usize, secret: &str) -> Vec<(&'static str, String)> {
        let members: Vec<String> = (0..3)
            .map(|i| {
                format!(
                    "{{id = {}, replication = \"{}\", client = \"{}\"}}",
                    i + 1,
                    self.replication[i],
                    self.client[i]
                )
            })
            .collect();
        vec![
            ("CAIRN_CLUSTER_ENABLED", "true".into()),
            ("CAIRN_CLUSTER_NAME", "test".into()),
            ("CAIRN_CLUSTER_NODE", node.to_string()),
            ("CAIRN_CLUSTER_SECRET", secret.into()),
            ("CAIRN_CLUSTER_MEMBERS", format!("[{}]", members.join(", "))),
            ("CAIRN_TCP_ADDRESS", self.client[node - 1].to_string()),
        ]
    }

    pub(crate) fn start(&self, node: usize, data: &Path) -> Cairn {
        self.start_with(node, data, &[])
    }

    /// [`Members::start`], with the variables `extra` too.
    pub(crate) fn start_with(&self, node: usize, data: &Path, extra: &[(&str, &str)]) -> Cairn {
        let vars = self.vars(node, SECRET);
        let mut pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        pairs.extend_from_slice(extra);
        Cairn::start_with(data, &pairs)
    }

    /// An administrator's `[cluster]` variables: node 0, no listener of its own.
    fn admin_vars(&self, secret: &str) -> Vec<(&'static str, String)> {
        let mut vars = self.vars(1, secret);
        vars.retain(|(k, _)| *k != "CAIRN_TCP_ADDRESS");
        for (k, v) in &mut vars {
            if *k == "CAIRN_CLUSTER_NODE" {
                *v = "0".into();
            }
        }
        vars
    }

    /// `cairn cluster <args> --json` as an administrator's configuration (node 0, with
    /// `secret`): its exit code, its output as JSON (when it printed some), its error output.
    pub(crate) fn admin(&self, secret: &str, args: &[&str]) -> (i32, serde_json::Value, String) {
        let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("cluster")
            .args(args)
            .arg("--json")
            .env_clear()
            .envs(self.admin_vars(secret))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let json = serde_json::from_str(stdout.trim()).unwrap_or(serde_json::Value::Null);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code().unwrap_or(-1), json, stderr)
    }

    /// Every member's row of `cairn cluster status`.
    fn status(&self) -> Vec<serde_json::Value> {
        let (_, json, _) = self.admin(SECRET, &["status"]);
        json["members"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `check` holds of the status, and answers it and how long that took.
    pub(crate) fn wait_for(
        &self,
        what: &str,
        check: impl Fn(&[serde_json::Value]) -> bool,
    ) -> (Vec<serde_json::Value>, Duration) {
        let started = Instant::now();
        loop {
            let rows = self.status();
            if check(&rows) {
                return (rows, started.elapsed());
            }
            assert!(
                started.elapsed() < SETTLE,
                "{what}: never; last status {rows:#?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The value of `/metrics`' sample `name` on `node`, scraped as root.
pub(crate) fn scrape(node: &Cairn, name: &str) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // The root user is the cluster's first decided op: a member may not hold it yet.
        client_of(node, "iggy", crate::common::PASSWORD).await;
        let token = crate::common::http_token(node, "iggy", crate::common::PASSWORD).await;
        crate::common::metric(node, &token, name).await
    })
}

/// [`scrape`], 0 where the sample is not there (a counter never counted).
fn scrape_or_0(node: &Cairn, name: &str) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let token = crate::common::http_token(node, "iggy", crate::common::PASSWORD).await;
        let (value, _) = crate::common::metric_if_any(node, &token, name).await;
        value.unwrap_or(0)
    })
}

pub(crate) fn field<'a>(
    rows: &'a [serde_json::Value],
    member: u64,
    key: &str,
) -> &'a serde_json::Value {
    let row = rows.iter().find(|r| r["member"] == member).unwrap();
    &row[key]
}

/// The member that leads, if every answering member names the same leader and it answers
/// as leader.
fn leader(rows: &[serde_json::Value]) -> Option<u64> {
    let leading: Vec<u64> = rows
        .iter()
        .filter(|r| r["role"] == "leader")
        .map(|r| r["member"].as_u64().unwrap())
        .collect();
    let named: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| !r["leader"].is_null())
        .map(|r| &r["leader"])
        .collect();
    let agreed = named.windows(2).all(|w| w[0] == w[1]);
    match leading.as_slice() {
        [one] if agreed => Some(*one),
        _ => None,
    }
}

/// How many partition groups member `m` leads, as its row of `rows` says (0 unreachable).
fn led(rows: &[serde_json::Value], m: usize) -> u64 {
    let row = rows.iter().find(|r| r["member"] == m as u64);
    row.and_then(|r| r["partitions"]["led"].as_u64())
        .unwrap_or(0)
}

/// Waits until `groups` partition groups are led and no member leads more than one (each
/// handed to its preferred member), member `with` (if any) among the leaders; answers the
/// members that lead one, and how long it took.
pub(crate) fn spread(
    members: &Members,
    groups: u64,
    with: Option<usize>,
) -> (Vec<usize>, Duration) {
    let (rows, took) = members.wait_for("the partitions' leadership spread", |rows| {
        (1..=3).map(|m| led(rows, m)).sum::<u64>() == groups
            && (1..=3).all(|m| led(rows, m) <= 1)
            && with.is_none_or(|m| led(rows, m) == 1)
    });
    ((1..=3).filter(|m| led(&rows, *m) == 1).collect(), took)
}

fn voters(rows: &[serde_json::Value]) -> usize {
    rows.iter()
        .filter(|r| r["role"] == "voter" || r["role"] == "leader")
        .count()
}

#[test]
fn a_three_member_cluster_elects_fails_over_and_takes_back_a_wiped_member() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let members = Members::new();
    let mut nodes: Vec<Option<Cairn>> = (0..3)
        .map(|i| Some(members.start(i + 1, dirs[i].path())))
        .collect();

    // Founded from the configuration: one leader, three voters.
    let (rows, took) = members.wait_for("a leader and three voters", |rows| {
        leader(rows).is_some() && voters(rows) == 3
    });
    eprintln!("the group was founded and led within {took:?}");
    let first = leader(&rows).unwrap();
    // `/metrics` says who leads, as each member sees it.
    let follower = (1..=3).find(|m| *m != first).unwrap();
    let leading = nodes[first as usize - 1].as_ref().unwrap();
    assert_eq!(scrape(leading, "cairn_cluster_leader"), 1);
    assert_eq!(scrape(leading, "cairn_cluster_voters"), 3);
    assert!(scrape(leading, "cairn_cluster_term") >= 1);
    assert_eq!(
        scrape(
            nodes[follower as usize - 1].as_ref().unwrap(),
            "cairn_cluster_leader"
        ),
        0
    );
    let replica_of = |rows: &[serde_json::Value], m: u64| field(rows, m, "replica").clone();
    let before: Vec<serde_json::Value> = (1..=3).map(|m| replica_of(&rows, m)).collect();

    // kill -9 of the leader: the two others elect one of themselves.
    let killed_at = Instant::now();
    nodes[first as usize - 1].take().unwrap().kill9();
    let (rows, _) = members.wait_for("a new leader", |rows| {
        leader(rows).is_some_and(|l| l != first)
    });
    eprintln!(
        "a new leader (member {}) {:?} after the kill",
        leader(&rows).unwrap(),
        killed_at.elapsed()
    );
    // Restarted on its data, it is the same replica, a voter again.
    nodes[first as usize - 1] =
        Some(members.start(first as usize, dirs[first as usize - 1].path()));
    let (rows, _) = members.wait_for("the killed member back as a voter", |rows| {
        voters(rows) == 3 && leader(rows).is_some()
    });
    assert_eq!(replica_of(&rows, first), before[first as usize - 1]);

    // A follower's data directory wiped: it comes back as a new replica outside the group,
    // counted by no quorum until an administrator adds it.
    let (rows, _) = members.wait_for("a leader", |rows| leader(rows).is_some());
    let leading = leader(&rows).unwrap();
    let wiped = (1..=3).find(|m| *m != leading).unwrap();
    nodes[wiped as usize - 1].take().unwrap().kill9();
    let dir = dirs[wiped as usize - 1].path();
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::create_dir(dir).unwrap();
    nodes[wiped as usize - 1] = Some(members.start(wiped as usize, dir));
    let (rows, _) = members.wait_for("the wiped member outside the group", |rows| {
        field(rows, wiped, "role") == "outside"
    });
    let new_replica = replica_of(&rows, wiped);
    assert_ne!(
        new_replica,
        before[wiped as usize - 1],
        "a wiped member is a new replica"
    );
    let (code, json, stderr) = members.admin(SECRET, &["add", &wiped.to_string()]);
    assert_eq!(code, 0, "add: {json} {stderr}");
    let voters_now: Vec<&serde_json::Value> = json["voters"].as_array().unwrap().iter().collect();
    assert_eq!(voters_now.len(), 3, "the old replica replaced: {json}");
    assert!(voters_now.contains(&&new_replica), "{json}");
    members.wait_for("the added replica a voter", |rows| {
        field(rows, wiped, "role") == "voter" && voters(rows) == 3
    });

    // The leader's member removed (it hands over, and the administrator asks its
    // successor), then added back: the same replica, a voter again.
    let (rows, _) = members.wait_for("a leader", |rows| leader(rows).is_some());
    let leading = leader(&rows).unwrap();
    let replica = replica_of(&rows, leading);
    let (code, json, stderr) = members.admin(SECRET, &["remove", &leading.to_string()]);
    assert_eq!(code, 0, "remove: {json} {stderr}");
    let voters_now = json["voters"].as_array().unwrap();
    assert_eq!(voters_now.len(), 2, "the leader's member removed: {json}");
    assert!(!voters_now.contains(&replica), "{json}");
    members.wait_for("the removed member outside", |rows| {
        field(rows, leading, "role") == "outside" && voters(rows) == 2
    });
    let (code, json, stderr) = members.admin(SECRET, &["add", &leading.to_string()]);
    assert_eq!(code, 0, "add back: {json} {stderr}");
    assert!(
        json["voters"].as_array().unwrap().contains(&replica),
        "{json}"
    );
    members.wait_for("the removed member a voter again", |rows| {
        field(rows, leading, "role") == "voter" && voters(rows) == 3
    });

    // Without the secret, no member answers, and says why.
    let (code, json, _) = members.admin("not the cluster's secret at all", &["status"]);
    assert_eq!(code, 1, "{json}");
    let error = json["members"][0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(error.contains("secret"), "{json}");

    // An administrator's configuration (node 0) is not a member's: serve refuses it.
    let refused = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("serve")
        .env_clear()
        .env("CAIRN_DATA_DIR", dirs[0].path().join("never"))
        .envs(members.admin_vars(SECRET))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("cluster.node is 0"), "{said}");

    // SIGTERM of the leader hands leadership over before it exits: it says to whom.
    let (rows, _) = members.wait_for("a leader", |rows| leader(rows).is_some());
    let leading = leader(&rows).unwrap();
    let mut stopped = nodes[leading as usize - 1].take().unwrap();
    // SAFETY: a signal to our own child process.
    unsafe {
        libc::kill(stopped.child.id() as i32, libc::SIGTERM);
    }
    assert_eq!(stopped.child.wait().unwrap().code(), Some(0));
    std::thread::sleep(Duration::from_millis(300));
    let said = stopped.drain_output();
    let left = said
        .iter()
        .find(|l| l.contains("left the cluster's group"))
        .unwrap_or_else(|| panic!("no handover reported: {said:#?}"));
    let to: u64 = left
        .split("Some(\"")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .and_then(|member| member.parse().ok())
        .unwrap_or_else(|| panic!("the stopped leader named no successor: {left}"));
    assert_ne!(to, leading, "{left}");
    members.wait_for("the successor leading", |rows| leader(rows) == Some(to));
}

/// An SDK client of `node` logged in as `user`, asking again while the member has not
/// applied the user yet (the root user is the cluster's first decided op).
pub(crate) async fn client_of(
    node: &Cairn,
    user: &str,
    password: &str,
) -> iggy::prelude::IggyClient {
    let started = Instant::now();
    loop {
        match crate::common::sdk_client(node, user, password).await {
            Ok(client) => return client,
            Err(e) => assert!(
                started.elapsed() < SETTLE,
                "{user} never logged in at {}: {e}",
                node.address
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every stream `node` serves, as (id, name, topics), asked until `check` holds of them.
async fn streams_until(
    node: &Cairn,
    what: &str,
    check: impl Fn(&[(u32, String, u32)]) -> bool,
) -> Vec<(u32, String, u32)> {
    use iggy::prelude::StreamClient;
    let client = client_of(node, "iggy", crate::common::PASSWORD).await;
    let started = Instant::now();
    loop {
        let streams: Vec<(u32, String, u32)> = client
            .get_streams()
            .await
            .unwrap()
            .into_iter()
            .map(|s| (s.id, s.name, s.topics_count))
            .collect();
        if check(&streams) {
            return streams;
        }
        assert!(
            started.elapsed() < SETTLE,
            "{what} at {}: never; it serves {streams:?}",
            node.address
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three members started on data directories of their own, with a leader and three voters.
pub(crate) struct Running {
    pub(crate) dirs: Vec<tempfile::TempDir>,
    pub(crate) members: Members,
    pub(crate) nodes: Vec<Option<Cairn>>,
    /// The member that leads, and the others.
    pub(crate) first: usize,
    pub(crate) followers: Vec<usize>,
}

impl Running {
    pub(crate) fn start() -> Running {
        Running::start_with(&[])
    }

    /// [`Running::start`], every member with the variables `extra` too.
    pub(crate) fn start_with(extra: &[(&str, &str)]) -> Running {
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let members = Members::new();
        let nodes: Vec<Option<Cairn>> = (0..3)
            .map(|i| Some(members.start_with(i + 1, dirs[i].path(), extra)))
            .collect();
        let (rows, _) = members.wait_for("a leader and three voters", |rows| {
            leader(rows).is_some() && voters(rows) == 3
        });
        let first = leader(&rows).unwrap() as usize;
        let followers: Vec<usize> = (1..=3).filter(|m| *m != first).collect();
        Running {
            dirs,
            members,
            nodes,
            first,
            followers,
        }
    }
}

/// Asks `node` for the cluster's roster until every member is in it at its client address,
/// `leader` alone as leader, every one healthy.
async fn roster_until(members: &Members, node: &Cairn, leader: usize) {
    use iggy::prelude::{ClusterClient, ClusterNodeRole, ClusterNodeStatus};
    let client = client_of(node, "iggy", crate::common::PASSWORD).await;
    let started = Instant::now();
    loop {
        let roster = client.get_cluster_metadata().await.unwrap();
        let shown: Vec<(String, String, ClusterNodeRole)> = roster
            .nodes
            .iter()
            .map(|n| {
                (
                    n.name.clone(),
                    format!("{}:{}", n.ip, n.endpoints.tcp),
                    n.role,
                )
            })
            .collect();
        let expected: Vec<(String, String, ClusterNodeRole)> = (1..=3)
            .map(|m| {
                let role = match m == leader {
                    true => ClusterNodeRole::Leader,
                    false => ClusterNodeRole::Follower,
                };
                (
                    format!("cairn-{m}"),
                    members.client[m - 1].to_string(),
                    role,
                )
            })
            .collect();
        let healthy = roster
            .nodes
            .iter()
            .all(|n| n.status == ClusterNodeStatus::Healthy);
        if shown == expected && healthy && roster.name == "test" {
            return;
        }
        assert!(started.elapsed() < SETTLE, "the roster: {roster:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Member `m` (1-based) of `nodes`, running.
pub(crate) fn at(nodes: &[Option<Cairn>], m: usize) -> &Cairn {
    nodes[m - 1].as_ref().unwrap()
}

#[test]
fn metadata_is_decided_by_the_cluster_and_served_by_every_member() {
    use iggy::prelude::{StreamClient, TopicClient, UserClient, UserStatus};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Running {
        dirs,
        members,
        mut nodes,
        first,
        followers,
    } = Running::start();

    runtime.block_on(async {
        let at = |m| at(&nodes, m);
        // Every member answers the roster: the three members at their client addresses,
        // the metadata leader marked so, every one healthy as the leader hears it.
        for m in 1..=3 {
            roster_until(&members, at(m), first).await;
        }
        // Created through a follower (the SDK moves to the leader its roster names), a
        // user through the leader.
        let follower = client_of(at(followers[0]), "iggy", crate::common::PASSWORD).await;
        let stream = follower.create_stream("orders").await.unwrap();
        follower
            .create_topic(
                &crate::common::id("orders"),
                "events",
                &crate::common::topic_options(2, iggy::prelude::Durability::Persisted),
            )
            .await
            .unwrap();
        // Read back where it was asked: applied there before the answer.
        assert!(follower
            .get_stream(&crate::common::id("orders"))
            .await
            .unwrap()
            .is_some());
        let leading = client_of(at(first), "iggy", crate::common::PASSWORD).await;
        assert_eq!(
            leading.create_stream("orders").await.unwrap_err().as_code(),
            1012,
            "the name is taken on every member"
        );
        leading
            .create_user("alice", "alice-password", UserStatus::Active, None)
            .await
            .unwrap();
        // Fresh reads: the other follower, which was not asked, reads through the leader's
        // read index, so what the leader just answered is there at once: each login below
        // is tried once, with no retry. A new user, a changed password, a new topic.
        let once = |user, password| crate::common::sdk_client(at(followers[1]), user, password);
        once("alice", "alice-password")
            .await
            .expect("alice, just made");
        let alice = iggy::prelude::Identifier::named("alice").unwrap();
        leading
            .change_password(&alice, "alice-password", "alice-new-password")
            .await
            .unwrap();
        once("alice", "alice-new-password")
            .await
            .expect("the new password, just changed");
        let Err(old) = once("alice", "alice-password").await else {
            panic!("the old password is refused at once");
        };
        assert_eq!(old.as_code(), 42, "as invalid credentials: {old:?}");
        let orders = crate::common::id("orders");
        leading
            .create_topic(
                &orders,
                "audit",
                &crate::common::topic_options(1, iggy::prelude::Durability::Persisted),
            )
            .await
            .unwrap();
        let other = once("iggy", crate::common::PASSWORD).await.unwrap();
        let audit = other.get_topic(&orders, &crate::common::id("audit")).await;
        assert!(audit.unwrap().is_some(), "a topic made through the leader");
        // Every member serves the same streams, under the same ids.
        for m in 1..=3 {
            let streams = streams_until(at(m), "the stream and its topics", |s| {
                s.len() == 1 && s[0].2 == 2
            })
            .await;
            assert_eq!(streams, vec![(stream.id, "orders".into(), 2)]);
        }
    });

    // A follower killed, the others decide more, then it restarts: it applies what it
    // missed (that it applies nothing twice is the engine test's, `node_decided`).
    let down = followers[1];
    nodes[down - 1].take().unwrap().kill9();
    runtime.block_on(async {
        let leading = client_of(at(&nodes, first), "iggy", crate::common::PASSWORD).await;
        leading.create_stream("invoices").await.unwrap();
    });
    nodes[down - 1] = Some(members.start(down, dirs[down - 1].path()));
    let expected = runtime.block_on(streams_until(at(&nodes, first), "two streams", |s| {
        s.len() == 2
    }));
    for m in 1..=3 {
        let served = runtime.block_on(streams_until(at(&nodes, m), "both streams", |s| {
            s.len() == 2
        }));
        assert_eq!(served, expected, "member {m} serves what the leader does");
    }

    // A wiped member comes back as a new replica; once added, it is refilled with every
    // decided op from the group's log.
    let wiped = followers[0];
    nodes[wiped - 1].take().unwrap().kill9();
    let dir = dirs[wiped - 1].path();
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::create_dir(dir).unwrap();
    nodes[wiped - 1] = Some(members.start(wiped, dir));
    members.wait_for("the wiped member outside the group", |rows| {
        field(rows, wiped as u64, "role") == "outside"
    });
    let (code, json, stderr) = members.admin(SECRET, &["add", &wiped.to_string()]);
    assert_eq!(code, 0, "add: {json} {stderr}");
    let served = runtime.block_on(streams_until(
        at(&nodes, wiped),
        "the refilled streams",
        |s| s.len() == 2,
    ));
    assert_eq!(
        served, expected,
        "the wiped member serves the cluster's streams"
    );
    drop(nodes);
}

#[test]
fn sends_are_replicated_and_every_acknowledged_one_outlives_a_killed_leader() {
    use std::collections::BTreeSet;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Running {
        dirs,
        members,
        mut nodes,
        first,
        followers,
    } = Running::start();
    let mut acked: Vec<String> = Vec::new();

    runtime.block_on(async {
        let follower = client_of(at(&nodes, followers[0]), "iggy", crate::common::PASSWORD).await;
        make_orders_events(&follower).await;
        // Through two members (each partition's leader is one of the three: a send is
        // proposed there or forwarded to it), by partition and balanced.
        let leading = client_of(at(&nodes, first), "iggy", crate::common::PASSWORD).await;
        for i in 0..20u32 {
            let via_follower = format!("follower {i}");
            send_one(&follower, Some(i % 2), &via_follower)
                .await
                .unwrap();
            // Read your writes where you sent: the follower answers once its own copy
            // applied the send (polled once, no retry).
            let held = stored_at(&follower, i % 2).await;
            assert_eq!(held.last(), Some(&via_follower), "the follower's own copy");
            let via_leader = format!("leader {i}");
            send_one(&leading, None, &via_leader).await.unwrap();
            acked.extend([via_follower, via_leader]);
        }
        for i in 0..10u32 {
            let keyed = format!("keyed {i}");
            send_keyed(&leading, &format!("customer-{}", i % 3), &keyed)
                .await
                .unwrap();
            acked.push(keyed);
        }
        let held = every_member_holds(&nodes, &acked).await;
        assert_eq!(held[0].len() + held[1].len(), 50);
        // A consumer group made through the follower; its member, on the other follower,
        // reads every message once from that member's copy (auto-commit on).
        let workers = group_reads(&follower, at(&nodes, followers[1]), 50).await;
        let all: BTreeSet<String> = acked.iter().cloned().collect();
        assert_eq!(
            workers, all,
            "the group read every acknowledged message once"
        );
    });

    // The roster names three members, so the group's member (moved to the metadata
    // leader at login) polled through Iggy's poll routing: asked where (103), attached a
    // data connection to its session (14) and polled there (104), acting as its session.
    for (command, what) in [
        ("message.poll_routing", "routed"),
        ("consumer_session.attach", "attached"),
        ("message.poll_primary", "polled on the primary"),
    ] {
        let sample = format!("cairn_commands_total{{command=\"{command}\",status=\"ok\"}}");
        let counts: Vec<u64> = (1..=3)
            .map(|m| scrape_or_0(at(&nodes, m), &sample))
            .collect();
        assert!(
            counts[first - 1] > 0,
            "the group's polls were never {what} on the leader: {counts:?}"
        );
    }

    // The metadata leader made the partitions' groups, so it led both first; each group
    // is handed to its preferred member, so two members lead one each.
    let (leaders, took) = spread(&members, 2, None);
    println!("cluster: the partitions' leadership spread over members {leaders:?} in {took:?}");
    let victim = leaders[0];
    let survivor = (1..=3).find(|m| !leaders.contains(m)).unwrap();
    // kill -9 a partition's leader while a survivor's client sends, and measure how long
    // sends to each partition fail.
    let client = runtime.block_on(client_of(
        at(&nodes, survivor),
        "iggy",
        crate::common::PASSWORD,
    ));
    // A producer sends as the kill comes: what it was told is acknowledged.
    let during: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let leader_client = runtime.block_on(client_of(
        at(&nodes, victim),
        "iggy",
        crate::common::PASSWORD,
    ));
    let producer = {
        let during = during.clone();
        runtime.spawn(async move {
            for seq in 0u32.. {
                let payload = format!("during the kill {seq}");
                if send_one(&leader_client, Some(seq % 2), &payload)
                    .await
                    .is_err()
                {
                    return;
                }
                during.lock().unwrap().push(payload);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    nodes[victim - 1].take().unwrap().kill9();
    let killed = Instant::now();
    producer.abort();
    let during = during.lock().unwrap().clone();
    assert!(
        !during.is_empty(),
        "the producer on the leader sent before the kill"
    );
    acked.extend(during);
    // Per partition: when its first send after the kill was acknowledged (the killed
    // member's partition waits for an election).
    let mut resumed = [None, None];
    let mut after = 0;
    runtime.block_on(async {
        for seq in 0u32.. {
            let payload = format!("after the kill {seq}");
            if send_one(&client, Some(seq % 2), &payload).await.is_ok() {
                resumed[(seq % 2) as usize].get_or_insert(killed.elapsed());
                acked.push(payload);
                after += 1;
                if after >= 40 && resumed.iter().all(Option::is_some) {
                    break;
                }
            }
            assert!(
                killed.elapsed() < SETTLE,
                "sends never resumed after the kill"
            );
        }
    });
    let gap = resumed
        .iter()
        .flatten()
        .max()
        .expect("both partitions took sends");
    println!("cluster: sends resumed {gap:?} after kill -9 of a partition's leader (per partition: {resumed:?})");

    // The killed member restarts and catches up: every member holds every acknowledged
    // message once, in the same order, and it leads its partition again.
    nodes[victim - 1] = Some(members.start(victim, dirs[victim - 1].path()));
    runtime.block_on(every_member_holds(&nodes, &acked));
    let (_, took) = spread(&members, 2, Some(victim));
    println!("cluster: the restarted member led its partition again within {took:?}");

    // kill -9 of the member an SDK client was made for and sits on (the metadata leader,
    // so its roster kept it there): the next send fails, and the client walks the roster
    // the member gave it to a live member and sends on.
    let (rows, _) = members.wait_for("a metadata leader", |rows| leader(rows).is_some());
    let on = leader(&rows).unwrap() as usize;
    let pinned = runtime.block_on(client_of(at(&nodes, on), "iggy", crate::common::PASSWORD));
    runtime
        .block_on(send_one(&pinned, Some(0), "before the failover"))
        .unwrap();
    acked.push("before the failover".into());
    // A consumer polls partition 0 with auto-commit there: its offset goes through the
    // partition's group, so the member the client fails over to holds it too.
    let read_before = runtime.block_on(poll_next(&pinned, 3));
    assert_eq!(
        read_before,
        vec![0, 1, 2],
        "the consumer read from the start"
    );
    nodes[on - 1].take().unwrap().kill9();
    let killed = Instant::now();
    let gap = runtime.block_on(async {
        for seq in 0u32.. {
            let payload = format!("after the failover {seq}");
            if send_one(&pinned, Some(seq % 2), &payload).await.is_ok() {
                acked.push(payload);
                return killed.elapsed();
            }
            assert!(
                killed.elapsed() < SETTLE,
                "the SDK client never failed over"
            );
        }
        unreachable!()
    });
    println!("cluster: an SDK client failed over through the roster and sent {gap:?} after kill -9 of its member");
    let read_after = runtime.block_on(poll_next(&pinned, 1));
    assert_eq!(
        read_after,
        vec![3],
        "the consumer goes on after its auto-committed offset on another member"
    );
    nodes[on - 1] = Some(members.start(on, dirs[on - 1].path()));
    runtime.block_on(every_member_holds(&nodes, &acked));
    let (back, _) = spread(&members, 2, None);
    // The sends below go through a client on the metadata leader, so the member stopped
    // is a partition's leader other than it.
    let (rows, _) = members.wait_for("a metadata leader", |rows| leader(rows).is_some());
    let metadata_leader = leader(&rows).unwrap() as usize;
    let stopping = back.into_iter().find(|m| *m != metadata_leader).unwrap();
    let client = runtime.block_on(client_of(
        at(&nodes, metadata_leader),
        "iggy",
        crate::common::PASSWORD,
    ));

    // SIGTERM of a partition's leader: it hands its group over before it exits, and sends
    // through the metadata leader go on.
    let mut stopped = nodes[stopping - 1].take().unwrap();
    // SAFETY: a signal to our own child process.
    unsafe {
        libc::kill(stopped.child.id() as i32, libc::SIGTERM);
    }
    assert_eq!(stopped.child.wait().unwrap().code(), Some(0));
    let said = stopped.drain_output();
    let handed = said
        .iter()
        .find(|l| l.contains("handed the partition groups this member led over"))
        .unwrap_or_else(|| panic!("no handover of partition groups reported: {said:#?}"));
    assert!(
        handed.contains("handed=1") && handed.contains("kept=0"),
        "{handed}"
    );
    let sent = Instant::now();
    runtime.block_on(async {
        for seq in 0u32..10 {
            let payload = format!("after the handover {seq}");
            send_one(&client, Some(seq % 2), &payload).await.unwrap();
            acked.push(payload);
        }
    });
    let took = sent.elapsed();
    println!("cluster: {handed}; 10 sends took {took:?} after it exited");
    // Handed over, not lost: an election would take at least its 400 ms timeout.
    assert!(
        took < Duration::from_millis(400),
        "sends after a graceful stop waited {took:?}: the group was not handed over"
    );
    runtime.block_on(every_member_holds(&nodes, &acked));
    drop(nodes);
}

//! A three-member cluster of real `cairn serve` processes keeping two copies of each
//! partition (`[cluster] replication_factor = 2`): each partition's group runs on two
//! members only, and the third serves it all the same, over HTTP (which, unlike Iggy's SDK,
//! stays on the member it reached): its sends are forwarded to the partition's leader, its
//! polls and the topic's numbers read at a member with a copy.

use crate::cluster::{at, Running, SETTLE};
use crate::common::PASSWORD;
use base64::Engine;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Instant;

/// A member's HTTP API, logged in as root.
struct Api {
    base: String,
    http: reqwest::Client,
    token: String,
}

impl Api {
    async fn login(node: &crate::common::Cairn) -> Api {
        let started = Instant::now();
        loop {
            let http = reqwest::Client::new();
            let base = node.http_url();
            let reply = http
                .post(format!("{base}/users/login"))
                .json(&json!({"username": "iggy", "password": PASSWORD}))
                .send()
                .await;
            if let Some(reply) = reply.ok().filter(|r| r.status().is_success()) {
                let identity: Value = reply.json().await.unwrap();
                let token = identity["access_token"]["token"].as_str().unwrap().into();
                return Api { base, http, token };
            }
            // The root user is the cluster's first op: a member may not hold it yet.
            assert!(started.elapsed() < SETTLE, "no login at {base}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let reply = request.send().await.unwrap();
        let status = reply.status();
        let text = reply.text().await.unwrap();
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// Every payload of partition `p` of orders/events, as this member serves it.
    async fn payloads(&self, p: u32) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let path = format!(
                "/streams/orders/topics/events/messages?consumer_id=1&partition_id={p}&kind=offset&value={}&count=1000",
                out.len()
            );
            let polled = self.call(reqwest::Method::GET, &path, None).await;
            let messages = polled["messages"].as_array().unwrap();
            if messages.is_empty() {
                return out;
            }
            for m in messages {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(m["payload"].as_str().unwrap())
                    .unwrap();
                out.push(String::from_utf8(bytes).unwrap());
            }
        }
    }
}

/// The partitions whose group keeps a WAL under member `data`'s directory, by id.
fn groups_on(data: &Path) -> BTreeSet<u32> {
    let dir = data.join("cluster").join("partitions");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.split('-').nth(2)?.parse().ok()
        })
        .collect()
}

#[test]
fn a_member_without_a_copy_of_a_partition_serves_it_through_the_members_with_one() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let running = Running::start_with(&[("CAIRN_CLUSTER_REPLICATION_FACTOR", "2")]);
    let apis: Vec<Api> = runtime.block_on(async {
        let mut apis = Vec::new();
        for m in 1..=3 {
            apis.push(Api::login(at(&running.nodes, m)).await);
        }
        apis
    });
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut sent: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    runtime.block_on(async {
        let post = reqwest::Method::POST;
        apis[0]
            .call(post.clone(), "/streams", Some(json!({"name": "orders"})))
            .await;
        let topic = json!({
            "name": "events", "partitions_count": 4, "compression_algorithm": "none",
            "message_expiry": 0, "max_topic_size": 0,
            "options": {"durability": "persisted"},
        });
        let created = apis[1]
            .call(post.clone(), "/streams/orders/topics", Some(topic))
            .await;
        // Not named: the configuration's factor, reported as derived.
        let factor = &created["options"]["replication_factor"];
        assert_eq!(
            (&factor["value"], &factor["explicit"]),
            (&json!("2"), &json!(false)),
            "{created}"
        );
        // Sends to every partition through every member, with or without a copy.
        for round in 0..5 {
            for (m, api) in apis.iter().enumerate() {
                for p in 0..4u32 {
                    let payload = format!("m{} p{p} round {round}", m + 1);
                    let body = json!({
                        "partitioning": {"kind": "partition_id", "value": b64.encode(p.to_le_bytes())},
                        "messages": [{"id": 0, "payload": b64.encode(&payload)}],
                    });
                    let path = "/streams/orders/topics/events/messages";
                    api.call(post.clone(), path, Some(body)).await;
                    sent.entry(p).or_default().push(payload);
                }
            }
        }
    });
    // Each partition's group runs on two members of three, and every member runs some.
    let started = Instant::now();
    let on: Vec<BTreeSet<u32>> = loop {
        let on: Vec<BTreeSet<u32>> = running.dirs.iter().map(|d| groups_on(d.path())).collect();
        let copies = |p: u32| on.iter().filter(|g| g.contains(&p)).count();
        if (0..4).all(|p| copies(p) == 2) {
            break on;
        }
        assert!(
            started.elapsed() < SETTLE,
            "partitions' groups per member: {on:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    println!("cluster placement: partitions' groups per member {on:?}");
    runtime.block_on(async {
        for (m, api) in apis.iter().enumerate() {
            // Every member serves every partition whole and in order, from a copy of its
            // own or another member's (a send is answered once committed, so the last one
            // may still be on its way to a follower: asked again until it is there).
            for p in 0..4u32 {
                let started = Instant::now();
                loop {
                    let held = api.payloads(p).await;
                    if held == sent[&p] {
                        break;
                    }
                    assert!(
                        started.elapsed() < SETTLE,
                        "member {} serves partition {p} as {held:?}, not {:?} (its groups: {:?})",
                        m + 1,
                        sent[&p],
                        on[m]
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
            // And the topic's numbers (GetTopic): 15 messages in each partition.
            let topic = api
                .call(reqwest::Method::GET, "/streams/orders/topics/events", None)
                .await;
            let counts: Vec<u64> = topic["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["messages_count"].as_u64().unwrap())
                .collect();
            assert_eq!(counts, vec![15; 4], "member {}: {topic}", m + 1);
        }
        // A factor the creation names must be 2 to the members.
        let topic = json!({
            "name": "wide", "partitions_count": 1, "compression_algorithm": "none",
            "message_expiry": 0, "max_topic_size": 0,
            "options": {"replication_factor": "4"},
        });
        let reply = apis[0]
            .http
            .post(format!("{}/streams/orders/topics", apis[0].base))
            .bearer_auth(&apis[0].token)
            .json(&topic)
            .send()
            .await
            .unwrap();
        let status = reply.status();
        let body = reply.text().await.unwrap();
        assert!(
            !status.is_success() && body.contains("not 2 to the cluster's 3 members"),
            "{status} {body}"
        );
    });
}

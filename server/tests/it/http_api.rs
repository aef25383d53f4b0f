//! The HTTP API seen by a plain HTTP client (reqwest): production completion (`201` with
//! `Iggy-Durability: replicated|persisted`, `202` with `none` for `ack=none`), every error
//! class with its status and Iggy code, `/metrics` parsed line by line, and kill -9 during
//! persisted sends: every message answered 201 is there exactly once after the restart.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::common;

use base64::Engine;
use common::{Cairn, PASSWORD};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

struct Api {
    base: String,
    http: reqwest::Client,
    token: String,
}

impl Api {
    async fn login(cairn: &Cairn, user: &str, password: &str) -> Api {
        let http = reqwest::Client::new();
        let base = cairn.http_url();
        let reply = http
            .post(format!("{base}/users/login"))
            .json(&json!({"username": user, "password": password}))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), StatusCode::OK);
        let identity: Value = reply.json().await.unwrap();
        let token = identity["access_token"]["token"]
            .as_str()
            .unwrap()
            .to_owned();
        Api { base, http, token }
    }

    fn at(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.at(reqwest::Method::POST, path)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.at(reqwest::Method::GET, path).send().await.unwrap()
    }
}

/// An error reply's status, Iggy code and field.
async fn error_of(reply: reqwest::Response) -> (StatusCode, u64, Option<String>, String) {
    let status = reply.status();
    let body: Value = reply.json().await.unwrap();
    let code = body["id"].as_u64().unwrap();
    let name = body["code"].as_str().unwrap();
    assert_ne!(name, "unknown error code", "{body}");
    assert!(!body["reason"].as_str().unwrap().is_empty(), "{body}");
    let field = body["field"].as_str().map(str::to_owned);
    (
        status,
        code,
        field,
        body["reason"].as_str().unwrap().to_owned(),
    )
}

fn topic(name: &str, partitions: u32, durability: &str) -> Value {
    json!({
        "name": name,
        "partitions_count": partitions,
        "compression_algorithm": "none",
        "message_expiry": 0,
        "max_topic_size": 0,
        "options": {"durability": durability},
    })
}

fn send_body(partition: u32, payloads: &[String]) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    json!({
        "partitioning": {"kind": "partition_id", "value": b64.encode(partition.to_le_bytes())},
        "messages": payloads.iter().map(|p| json!({"id": 0, "payload": b64.encode(p)})).collect::<Vec<_>>(),
    })
}

fn durability(reply: &reqwest::Response) -> String {
    reply
        .headers()
        .get("iggy-durability")
        .expect("every send reply says its durability")
        .to_str()
        .unwrap()
        .to_owned()
}

/// Every payload in partition `p` of `s/t`, from offset 0.
async fn payloads(api: &Api, topic: &str, p: u32) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let reply = api
            .get(&format!(
                "/streams/s/topics/{topic}/messages?consumer_id=1&partition_id={p}&kind=offset&value={}&count=1000",
                out.len()
            ))
            .await;
        assert_eq!(reply.status(), StatusCode::OK);
        let polled: Value = reply.json().await.unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_complete_as_the_durability_page_says_and_errors_carry_iggy_codes() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &[("CAIRN_HTTP_MAX_BODY_BYTES", "65536")]);
    let api = Api::login(&cairn, "iggy", PASSWORD).await;
    assert_eq!(
        api.post("/streams", json!({"name": "s"})).await.status(),
        StatusCode::CREATED
    );
    let created = api
        .post("/streams/s/topics", topic("p", 1, "persisted"))
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let created = api
        .post("/streams/s/topics", topic("r", 2, "replicated"))
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);

    // Completion.
    let msgs = |tag: &str| vec![format!("{tag}-0"), format!("{tag}-1")];
    let reply = api
        .post("/streams/s/topics/p/messages", send_body(0, &msgs("a")))
        .await;
    assert_eq!(reply.status(), StatusCode::CREATED);
    assert_eq!(durability(&reply), "persisted");
    let confirmations: Value = reply.json().await.unwrap();
    assert_eq!(confirmations["confirmations"][0]["base_offset"], 0);
    let reply = api
        .post(
            "/streams/s/topics/p/messages?ack=replicated",
            send_body(0, &msgs("b")),
        )
        .await;
    assert_eq!(reply.status(), StatusCode::CREATED);
    assert_eq!(
        durability(&reply),
        "persisted",
        "ack=replicated does not override the policy"
    );
    let reply = api
        .post("/streams/s/topics/r/messages", send_body(1, &msgs("c")))
        .await;
    assert_eq!(reply.status(), StatusCode::CREATED);
    assert_eq!(durability(&reply), "replicated");
    let reply = api
        .post(
            "/streams/s/topics/r/messages?ack=none",
            send_body(1, &msgs("d")),
        )
        .await;
    assert_eq!(reply.status(), StatusCode::ACCEPTED);
    assert_eq!(durability(&reply), "none");
    // Dispatched: it lands after the reply.
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = payloads(&api, "r", 1).await;
        if seen.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, ["c-0", "c-1", "d-0", "d-1"]);
    assert_eq!(payloads(&api, "p", 0).await, ["a-0", "a-1", "b-0", "b-1"]);

    // Malformed requests: 400, Iggy's code, the field named.
    let raw = |body: &'static str| {
        api.at(reqwest::Method::POST, "/streams")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let (status, code, field, _) = error_of(raw("{\"name\":").await.unwrap()).await;
    assert_eq!((status, code), (StatusCode::BAD_REQUEST, 4));
    assert_eq!(field.as_deref(), Some("name"), "the value that was cut off");
    let (status, code, field, _) = error_of(raw("\"text\"").await.unwrap()).await;
    assert_eq!(
        (status, code, field.as_deref()),
        (StatusCode::BAD_REQUEST, 4, Some("."))
    );
    let (status, code, field, _) = error_of(raw("{\"name\": 5}").await.unwrap()).await;
    assert_eq!(
        (status, code, field.as_deref()),
        (StatusCode::BAD_REQUEST, 4, Some("name"))
    );
    let (status, _, _, reason) = error_of(raw("{}").await.unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(reason.contains("name"), "{reason}");
    let bad_count = json!({"name": "t", "partitions_count": "two", "compression_algorithm": "none", "message_expiry": 0, "max_topic_size": 0});
    let (status, _, field, _) = error_of(api.post("/streams/s/topics", bad_count).await).await;
    assert_eq!(
        (status, field.as_deref()),
        (StatusCode::BAD_REQUEST, Some("partitions_count"))
    );
    let (status, code, field, _) = error_of(
        api.post(
            "/streams/s/topics/r/messages?ack=all",
            send_body(0, &msgs("x")),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, code, field.as_deref()),
        (StatusCode::BAD_REQUEST, 4, Some("ack"))
    );
    let (status, code, _, _) = error_of(
        api.post(
            "/streams/s/topics/r/messages",
            json!({"partitioning": {"kind": "balanced", "value": ""}, "messages": []}),
        )
        .await,
    )
    .await;
    assert_eq!((status, code), (StatusCode::BAD_REQUEST, 4009));
    // Iggy refuses unknown topic option keys by name.
    let mut unknown = topic("u", 1, "replicated");
    unknown["options"]["enforce_fsync"] = json!("true");
    let (status, code, _, reason) = error_of(api.post("/streams/s/topics", unknown).await).await;
    assert_eq!((status, code), (StatusCode::BAD_REQUEST, 4041));
    assert!(reason.contains("enforce_fsync"), "{reason}");
    // Too big a body: 413.
    let big = vec![String::from_utf8(vec![b'x'; 70_000]).unwrap()];
    let reply = api
        .post("/streams/s/topics/r/messages", send_body(0, &big))
        .await;
    assert_eq!(reply.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // The body was not read whole: the connection closes, and the client is told so
    // (the next request must not go into the closing socket).
    assert_eq!(reply.headers()[reqwest::header::CONNECTION], "close");
    // Already exists, not found, no such partition.
    let (status, code, _, _) = error_of(api.post("/streams", json!({"name": "s"})).await).await;
    assert_eq!((status, code), (StatusCode::BAD_REQUEST, 1012));
    let (status, _, _, _) = error_of(api.get("/streams/nope").await).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, code, _, _) = error_of(
        api.post("/streams/nope/topics/r/messages", send_body(0, &msgs("x")))
            .await,
    )
    .await;
    assert_eq!((status, code), (StatusCode::NOT_FOUND, 1010));
    let (status, code, _, _) = error_of(
        api.post("/streams/s/topics/r/messages", send_body(9, &msgs("x")))
            .await,
    )
    .await;
    assert_eq!((status, code), (StatusCode::NOT_FOUND, 3007));
    assert_eq!(
        api.get("/no/such/route").await.status(),
        StatusCode::NOT_FOUND
    );

    // Identity: none, garbage, a user without the permission, a deleted user, a logout.
    let anonymous = reqwest::Client::new()
        .get(format!("{}/streams", api.base))
        .send()
        .await
        .unwrap();
    let (status, code, _, _) = error_of(anonymous).await;
    assert_eq!((status, code), (StatusCode::UNAUTHORIZED, 77));
    let forged = Api {
        token: "forged".into(),
        ..Api::login(&cairn, "iggy", PASSWORD).await
    };
    let (status, code, _, _) = error_of(forged.get("/streams").await).await;
    assert_eq!((status, code), (StatusCode::UNAUTHORIZED, 78));
    let wrong = reqwest::Client::new()
        .post(format!("{}/users/login", api.base))
        .json(&json!({"username": "iggy", "password": "not-it"}))
        .send()
        .await
        .unwrap();
    let (status, code, _, _) = error_of(wrong).await;
    assert_eq!(
        (status, code),
        (StatusCode::BAD_REQUEST, 42),
        "as Iggy answers a wrong password"
    );
    let user = json!({"username": "plain", "password": "plain-password", "status": "active", "permissions": null});
    assert_eq!(api.post("/users", user).await.status(), StatusCode::CREATED);
    let plain = Api::login(&cairn, "plain", "plain-password").await;
    let (status, code, _, _) = error_of(plain.post("/streams", json!({"name": "x"})).await).await;
    assert_eq!((status, code), (StatusCode::FORBIDDEN, 41));
    let deleted = api
        .at(reqwest::Method::DELETE, "/users/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let (status, code, _, _) = error_of(plain.get("/streams").await).await;
    assert_eq!((status, code), (StatusCode::UNAUTHORIZED, 40));
    let bad_token = reqwest::Client::new()
        .post(format!("{}/personal-access-tokens/login", api.base))
        .json(&json!({"token": "no-such-token"}))
        .send()
        .await
        .unwrap();
    let (status, code, _, _) = error_of(bad_token).await;
    assert_eq!((status, code), (StatusCode::UNAUTHORIZED, 53));
    let expiring = api
        .post(
            "/personal-access-tokens",
            json!({"name": "brief", "expiry": 2_000_000}),
        )
        .await;
    assert_eq!(expiring.status(), StatusCode::CREATED);
    let raw: Value = expiring.json().await.unwrap();
    let raw = raw["token"].as_str().unwrap().to_owned();
    let pat_login = |raw: String| {
        let url = format!("{}/personal-access-tokens/login", api.base);
        async move {
            reqwest::Client::new()
                .post(url)
                .json(&json!({"token": raw}))
                .send()
                .await
                .unwrap()
        }
    };
    let robot: Value = pat_login(raw.clone()).await.json().await.unwrap();
    let robot = Api {
        token: robot["access_token"]["token"].as_str().unwrap().to_owned(),
        base: api.base.clone(),
        http: reqwest::Client::new(),
    };
    assert_eq!(robot.get("/streams").await.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, code, _, _) = error_of(robot.get("/streams").await).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the personal access token expired: {code}"
    );
    let (status, code, _, _) = error_of(pat_login(raw).await).await;
    assert_eq!((status, code), (StatusCode::UNAUTHORIZED, 54));
    let duplicate = api
        .post(
            "/personal-access-tokens",
            json!({"name": "brief", "expiry": 0}),
        )
        .await;
    let (status, code, _, _) = error_of(duplicate).await;
    assert_eq!((status, code), (StatusCode::BAD_REQUEST, 51));
    // A deactivated user's token gets 401, for a send as for anything.
    let user = json!({"username": "idle", "password": "idle-password", "status": "active", "permissions": {"global": {"manage_servers": false, "read_servers": false, "manage_users": false, "read_users": false, "manage_streams": false, "read_streams": false, "manage_topics": false, "read_topics": false, "poll_messages": false, "send_messages": true}, "streams": null}});
    assert_eq!(api.post("/users", user).await.status(), StatusCode::CREATED);
    let idle = Api::login(&cairn, "idle", "idle-password").await;
    let sent = idle
        .post("/streams/s/topics/r/messages", send_body(0, &msgs("i")))
        .await;
    assert_eq!(sent.status(), StatusCode::CREATED);
    let deactivate = api
        .at(reqwest::Method::PUT, "/users/idle")
        .json(&json!({"status": "inactive"}))
        .send()
        .await
        .unwrap();
    assert_eq!(deactivate.status(), StatusCode::NO_CONTENT);
    let (status, code, _, _) = error_of(
        idle.post("/streams/s/topics/r/messages", send_body(0, &msgs("j")))
            .await,
    )
    .await;
    assert_eq!((status, code), (StatusCode::UNAUTHORIZED, 40));
    // Paths: a method a resource does not take, a bad number, a bad identifier.
    let (status, _, _, _) = error_of(
        api.at(reqwest::Method::PATCH, "/streams")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, code, field, _) = error_of(api.get("/clients/abc").await).await;
    assert_eq!(
        (status, code, field.as_deref()),
        (StatusCode::BAD_REQUEST, 4, Some("client_id"))
    );
    let long = "x".repeat(300);
    let (status, _, field, _) = error_of(api.get(&format!("/streams/{long}")).await).await;
    assert_eq!(
        (status, field.as_deref()),
        (StatusCode::BAD_REQUEST, Some("stream_id"))
    );
    let other = Api::login(&cairn, "iggy", PASSWORD).await;
    let out = other
        .at(reqwest::Method::DELETE, "/users/logout")
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::NO_CONTENT);
    let (status, code, _, _) = error_of(other.get("/streams").await).await;
    assert_eq!((status, code), (StatusCode::UNAUTHORIZED, 78));
    // The first login is untouched by another token's logout.
    assert_eq!(api.get("/streams").await.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_reports_every_options_effective_value_and_a_misplaced_field_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let api = Api::login(&cairn, "iggy", PASSWORD).await;
    assert_eq!(
        api.post("/streams", json!({"name": "s"})).await.status(),
        StatusCode::CREATED
    );
    // `durability` beside the name instead of under `options`: refused, naming it, and
    // nothing is created (it used to make a `replicated` topic silently).
    let mut misplaced = topic("m", 1, "replicated");
    misplaced["options"] = json!({});
    misplaced["durability"] = json!("persisted");
    let (status, code, field, reason) =
        error_of(api.post("/streams/s/topics", misplaced).await).await;
    assert_eq!((status, code), (StatusCode::BAD_REQUEST, 4));
    assert_eq!(field.as_deref(), Some("durability"));
    assert!(reason.contains("under `options`"), "{reason}");
    assert_eq!(
        api.get("/streams/s/topics/m").await.status(),
        StatusCode::NOT_FOUND
    );
    // Any field a command does not know, at any depth.
    let mut unknown = topic("u", 1, "replicated");
    unknown["colour"] = json!("red");
    let (status, _, field, _) = error_of(api.post("/streams/s/topics", unknown).await).await;
    assert_eq!(
        (status, field.as_deref()),
        (StatusCode::BAD_REQUEST, Some("colour"))
    );
    let (status, _, field, _) = error_of(
        api.post("/streams", json!({"name": "x", "topics": []}))
            .await,
    )
    .await;
    assert_eq!(
        (status, field.as_deref()),
        (StatusCode::BAD_REQUEST, Some("topics"))
    );
    let mut bad_message = send_body(0, &["a".to_owned()]);
    bad_message["messages"][0]["key"] = json!(1);
    let (status, _, field, reason) =
        error_of(api.post("/streams/s/topics/t/messages", bad_message).await).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        field.as_deref().unwrap_or_default().starts_with("messages"),
        "{field:?}"
    );
    assert!(reason.contains("`key`"), "{reason}");

    // Every option's effective value, with whether the creation named it.
    let created = api
        .post("/streams/s/topics", topic("t", 1, "persisted"))
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let details: Value = api.get("/streams/s/topics/t").await.json().await.unwrap();
    let options = &details["options"];
    assert_eq!(
        options["durability"],
        json!({"value": "persisted", "explicit": true})
    );
    assert_eq!(
        options["consumer_offset_durability"]["value"], "replicated",
        "{options}"
    );
    for key in [
        "consumer_offset_durability",
        "message_expiry",
        "max_topic_size",
        "replication_factor",
        "compression_algorithm",
        "segment_size",
        "messages_required_to_save",
        "size_of_messages_required_to_save",
        "preallocate_segments",
    ] {
        assert!(
            options[key]["value"].is_string(),
            "{key} missing: {options}"
        );
    }
    // The server's configured flush thresholds were filled in, not chosen by the client.
    assert_eq!(options["messages_required_to_save"]["explicit"], false);
    assert_eq!(options["segment_size"]["explicit"], false);
    // The list of topics carries them too.
    let topics: Value = api.get("/streams/s/topics").await.json().await.unwrap();
    assert_eq!(topics[0]["options"]["durability"]["value"], "persisted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_gets_401_and_no_data() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &[("CAIRN_HTTP_TOKEN_EXPIRY", "2s")]);
    let api = Api::login(&cairn, "iggy", PASSWORD).await;
    // Expiry is in whole seconds: a 2 s token is good for at least 1 s, gone after 3.
    assert_eq!(api.get("/streams").await.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let reply = api.get("/streams").await;
    let (status, code, _, reason) = error_of(reply).await;
    assert_eq!((status, code), (StatusCode::UNAUTHORIZED, 78));
    assert!(reason.contains("expired"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_partition_answers_503_naming_the_fence() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cairn = Cairn::start(&data);
    let api = Api::login(&cairn, "iggy", PASSWORD).await;
    api.post("/streams", json!({"name": "s"})).await;
    api.post("/streams/s/topics", topic("p", 2, "persisted"))
        .await;
    for p in 0..2 {
        let body = send_body(p, &(0..20).map(|i| format!("m{i}")).collect::<Vec<_>>());
        assert_eq!(
            api.post("/streams/s/topics/p/messages", body)
                .await
                .status(),
            StatusCode::CREATED
        );
    }
    assert_eq!(cairn.terminate(), Some(0));
    // A flipped byte below the durable end of partition 1: boot fences it.
    let log =
        cairn_engine::partition::partition_dir(&data, 0, 0, 1).join("00000000000000000000.log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&log, &bytes).unwrap();
    let cairn = Cairn::start(&data);
    let api = Api::login(&cairn, "iggy", PASSWORD).await;
    let reply = api
        .post(
            "/streams/s/topics/p/messages",
            send_body(1, &["late".into()]),
        )
        .await;
    let (status, _, _, reason) = error_of(reply).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reason.contains("fenced"), "{reason}");
    let (status, code, _, _) = error_of(
        api.post(
            "/streams/s/topics/p/messages?ack=none",
            send_body(1, &["late".into()]),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, code),
        (StatusCode::SERVICE_UNAVAILABLE, 1),
        "no 202 for a fenced partition"
    );
    let text = api.get("/metrics").await.text().await.unwrap();
    let samples = parse_metrics(&text);
    assert_eq!(
        samples["cairn_partitions_fenced{reason=\"CorruptBelowDurable\"}"], 1.0,
        "{text}"
    );
    assert_eq!(
        samples["cairn_boot_partition_fences{reason=\"CorruptBelowDurable\"}"], 1.0,
        "{text}"
    );
    // The other partition serves on.
    let reply = api
        .post(
            "/streams/s/topics/p/messages",
            send_body(0, &["late".into()]),
        )
        .await;
    assert_eq!(reply.status(), StatusCode::CREATED);
}

/// Checks a scrape strictly: every line is a `# HELP`/`# TYPE` comment or a sample
/// `name{labels} value`, every sample's family was typed first; returns the samples.
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    let mut typed = std::collections::BTreeSet::new();
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            assert!(
                rest.split_once(' ').is_some(),
                "a HELP line names a metric and says something: {line}"
            );
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect(line);
            assert!(
                [
                    "counter",
                    "gauge",
                    "histogram",
                    "summary",
                    "untyped",
                    "info"
                ]
                .contains(&kind),
                "{line}"
            );
            typed.insert(name.to_owned());
        } else if line.is_empty() || line == "# EOF" {
            continue;
        } else {
            let (series, value) = line.rsplit_once(' ').expect(line);
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("a number: {line}"));
            let name = series.split('{').next().unwrap();
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "{line}"
            );
            if let Some(labels) = series.strip_prefix(name) {
                if !labels.is_empty() {
                    assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                    for pair in labels[1..labels.len() - 1].split(',') {
                        let (k, v) = pair.split_once('=').expect(line);
                        assert!(
                            !k.is_empty() && v.starts_with('"') && v.ends_with('"'),
                            "{line}"
                        );
                    }
                }
            }
            let family = ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|f| typed.contains(*f))
                .unwrap_or(name);
            assert!(
                typed.contains(family),
                "a sample of an untyped family: {line}"
            );
            samples.insert(series.to_owned(), value);
        }
    }
    samples
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_scrape_is_prometheus_text_with_the_figures() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let api = Api::login(&cairn, "iggy", PASSWORD).await;
    api.post("/streams", json!({"name": "s"})).await;
    api.post("/streams/s/topics", topic("p", 1, "persisted"))
        .await;
    let sent: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    assert_eq!(
        api.post("/streams/s/topics/p/messages", send_body(0, &sent))
            .await
            .status(),
        StatusCode::CREATED
    );
    assert_eq!(payloads(&api, "p", 0).await.len(), 5);
    let reply = api.get("/metrics").await;
    assert_eq!(reply.status(), StatusCode::OK);
    assert!(reply.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = reply.text().await.unwrap();
    let samples = parse_metrics(&text);
    let topic = "{stream_id=\"0\",topic_id=\"0\"}";
    assert_eq!(
        samples[&format!("cairn_messages_produced_total{topic}")],
        5.0,
        "{text}"
    );
    assert_eq!(
        samples[&format!("cairn_messages_consumed_total{topic}")],
        5.0,
        "{text}"
    );
    assert!(samples[&format!("cairn_bytes_produced_total{topic}")] > 5.0);
    assert!(samples["cairn_persists_total"] >= 1.0, "{text}");
    // One partition: its persists ran in place, never several at once as jobs.
    assert_eq!(samples["cairn_concurrent_persists_total"], 0.0, "{text}");
    assert_eq!(samples["cairn_persist_jobs_total"], 0.0, "{text}");
    // The engine's figures: one persisted send made one group-commit persist of one send.
    assert_eq!(
        samples["cairn_persist_latency_seconds_count"], 1.0,
        "{text}"
    );
    let one_send = samples
        .iter()
        .find(|(k, _)| k.starts_with("cairn_group_commit_sends_bucket{le=\"1"))
        .unwrap_or_else(|| panic!("the first bucket: {text}"));
    assert_eq!(*one_send.1, 1.0, "{text}");
    assert!(
        samples["cairn_fsyncs_total{kind=\"file\"}"] >= 2.0,
        "{text}"
    );
    assert!(samples.contains_key("cairn_journal_bytes"), "{text}");
    let placed: f64 = samples
        .iter()
        .filter(|(name, _)| name.starts_with("cairn_shard_partitions{shard="))
        .map(|(_, count)| count)
        .sum();
    assert_eq!(
        placed, 1.0,
        "the one partition is placed on a shard: {text}"
    );
    assert_eq!(
        samples["cairn_partitions_fenced{reason=\"CorruptBelowDurable\"}"], 0.0,
        "{text}"
    );
    assert!(
        samples.contains_key("cairn_boot_partition_outcomes{outcome=\"Clean\"}"),
        "{text}"
    );
    assert_eq!(
        samples["cairn_group_rebalances_total{cause=\"Join\"}"], 0.0,
        "{text}"
    );
    assert_eq!(
        samples["cairn_retention_deleted_segments_total{reason=\"Expired\"}"], 0.0,
        "{text}"
    );
    assert!(samples["process_resident_memory_bytes"] > 0.0, "{text}");
    assert!(samples["process_open_fds"] > 0.0, "{text}");
    assert!(
        samples
            .keys()
            .any(|k| k.starts_with("cairn_commands_total{command=\"message.send\",status=\"ok\"}")),
        "{text}"
    );
    let created = "cairn_http_requests_total{method=\"POST\",route=\"/streams\",status=\"201\"}";
    assert_eq!(
        samples[created], 1.0,
        "the route template, not the path: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_a_token_by_default_even_from_loopback() {
    // Review S17: behind a reverse proxy on the same host every caller is loopback.
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let url = format!("{}/metrics", cairn.http_url());
    assert_eq!(
        reqwest::get(&url).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let api = Api::login(&cairn, "iggy", PASSWORD).await;
    let reply = api.get("/metrics").await;
    assert_eq!(reply.status(), StatusCode::OK);
    parse_metrics(&reply.text().await.unwrap());
    // Only a send may be large: an anonymous login body over 64 KiB is refused unread...
    let padding = "x".repeat(100 * 1024);
    let big_login = reqwest::Client::new()
        .post(format!("{}/users/login", api.base))
        .json(&json!({"username": "iggy", "password": PASSWORD, "context": padding}))
        .send()
        .await
        .unwrap();
    assert_eq!(big_login.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // ...while a send of the same size is taken.
    api.post("/streams", json!({"name": "s"})).await;
    api.post("/streams/s/topics", topic("t", 1, "replicated"))
        .await;
    let big_send = api
        .post("/streams/s/topics/t/messages", send_body(0, &[padding]))
        .await;
    assert_eq!(big_send.status(), StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_persisted_http_sends_keeps_every_201_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cairn = Cairn::start(&data);
    let api = std::sync::Arc::new(Api::login(&cairn, "iggy", PASSWORD).await);
    api.post("/streams", json!({"name": "s"})).await;
    api.post("/streams/s/topics", topic("p", 2, "persisted"))
        .await;
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut senders = Vec::new();
    for w in 0..4u32 {
        let (api, acked) = (api.clone(), acked.clone());
        senders.push(tokio::spawn(async move {
            for i in 0.. {
                let payload = format!("w{w}-{i}");
                let body = send_body(w % 2, std::slice::from_ref(&payload));
                match api
                    .at(reqwest::Method::POST, "/streams/s/topics/p/messages")
                    .json(&body)
                    .send()
                    .await
                {
                    Ok(reply) => {
                        // Until the kill every send is answered 201; after it none is answered.
                        assert_eq!(reply.status(), StatusCode::CREATED, "{payload}");
                        assert_eq!(durability(&reply), "persisted");
                        acked.lock().unwrap().push(payload);
                    }
                    Err(_) => return i,
                }
            }
            unreachable!()
        }));
    }
    // Let sends run, then kill -9 in the middle of them.
    while acked.lock().unwrap().len() < 200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cairn.kill9();
    let mut attempted = 0;
    for sender in senders {
        attempted += sender.await.unwrap() + 1;
    }
    let acked = acked.lock().unwrap().clone();
    let cairn = Cairn::start(&data);
    let api = Api::login(&cairn, "iggy", PASSWORD).await;
    let mut found = BTreeMap::<String, usize>::new();
    for p in 0..2 {
        for payload in payloads(&api, "p", p).await {
            *found.entry(payload).or_default() += 1;
        }
    }
    for payload in &acked {
        assert_eq!(found.get(payload), Some(&1), "{payload} was answered 201");
    }
    assert!(
        found.values().all(|n| *n == 1),
        "every message was sent once"
    );
    assert!(found.len() <= attempted as usize);
}

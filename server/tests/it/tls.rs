//! TLS on the binary protocol's listener, end to end: the real `cairn` binary with a
//! self-signed certificate made here (rcgen), and Iggy's own SDK (`iggy` =0.11.0,
//! unmodified) as the client, with TLS on and off.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::common;

use common::{id, Cairn, PASSWORD};
use iggy::prelude::*;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// A self-signed certificate for `localhost` (its own CA) and its key, as PEM files.
struct Cert {
    cert: PathBuf,
    key: PathBuf,
}

fn make_cert(dir: &Path, name: &str) -> Cert {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = dir.join(format!("{name}-cert.pem"));
    let key = dir.join(format!("{name}-key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    Cert { cert, key }
}

fn start_tls(data: &Path, cert: &Cert) -> Cairn {
    Cairn::start_with(
        data,
        &[
            ("CAIRN_TCP_TLS_ENABLED", "true"),
            ("CAIRN_TCP_TLS_CERT_FILE", cert.cert.to_str().unwrap()),
            ("CAIRN_TCP_TLS_KEY_FILE", cert.key.to_str().unwrap()),
            // The failed handshakes' debug lines.
            (
                "CAIRN_LOG_LEVEL",
                "info,cairn_server::tcp::connection=debug",
            ),
        ],
    )
}

/// The SDK's TCP client; with TLS when `ca` is given (trusting only that certificate).
fn sdk_client(cairn: &Cairn, ca: Option<&Path>) -> IggyClient {
    let config = TcpClientConfig {
        server_address: cairn.address.to_string(),
        tls_enabled: ca.is_some(),
        tls_domain: "localhost".to_string(),
        tls_ca_file: ca.map(|ca| ca.to_str().unwrap().to_string()),
        tls_validate_certificate: true,
        reconnection: TcpClientReconnectionConfig {
            enabled: false,
            ..TcpClientReconnectionConfig::default()
        },
        ..TcpClientConfig::default()
    };
    let tcp = TcpClient::create(Arc::new(config)).unwrap();
    IggyClient::create(ClientWrapper::Tcp(tcp), None, None)
}

/// What a TLS client does: logs in, creates a stream and a topic, sends, polls.
async fn produce_and_consume(client: &IggyClient, stream: &str) {
    client.connect().await.expect("connects");
    client.login_user("iggy", PASSWORD).await.expect("logs in");
    client.ping().await.unwrap();
    client.create_stream(stream).await.unwrap();
    client
        .create_topic(
            &id(stream),
            "events",
            &TopicCreateOptions {
                partitions_count: Some(1),
                durability: Durability::Persisted,
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    // Enough bytes for many TLS records each way.
    let payloads: Vec<String> = (0..200)
        .map(|i| format!("message-{i}-{}", "x".repeat(1000)))
        .collect();
    let mut messages: Vec<IggyMessage> = payloads
        .iter()
        .map(|p| IggyMessage::from_str(p).unwrap())
        .collect();
    client
        .send_messages(
            &id(stream),
            &id("events"),
            &Partitioning::partition_id(0),
            &mut messages,
        )
        .await
        .unwrap();
    let polled = client
        .poll_messages(
            &id(stream),
            &id("events"),
            Some(0),
            &Consumer::new(Identifier::numeric(1).unwrap()),
            &PollingStrategy::offset(0),
            1000,
            false,
        )
        .await
        .unwrap();
    let got: Vec<String> = polled
        .messages
        .iter()
        .map(|m| String::from_utf8(m.payload.to_vec()).unwrap())
        .collect();
    assert_eq!(got, payloads);
    let streams = client.get_streams().await.unwrap();
    assert!(streams.iter().any(|s| s.name == stream));
}

/// Waits for an output line containing `text`.
fn wait_for_line(cairn: &Cairn, text: &str) -> String {
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        if let Ok(line) = cairn.output.recv_timeout(Duration::from_millis(100)) {
            if line.contains(text) {
                return line;
            }
            seen.push(line);
        }
    }
    panic!("no line with {text:?}; output: {seen:#?}");
}

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_over_tls_logs_in_creates_sends_and_polls() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "server");
    let cairn = start_tls(&dir.path().join("data"), &cert);
    let client = sdk_client(&cairn, Some(&cert.cert));
    tokio::time::timeout(LIMIT, produce_and_consume(&client, "orders"))
        .await
        .expect("in time");
    client.logout_user().await.unwrap();
    client.disconnect().await.unwrap();
    // A graceful stop with TLS connections closed (close_notify) and open.
    let open = sdk_client(&cairn, Some(&cert.cert));
    open.connect().await.unwrap();
    open.login_user("iggy", PASSWORD).await.unwrap();
    assert_eq!(cairn.terminate(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_on_the_tls_port_fails_and_harms_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "server");
    let mut cairn = start_tls(&dir.path().join("data"), &cert);

    // A TLS client logged in before, and still there after.
    let before = sdk_client(&cairn, Some(&cert.cert));
    before.connect().await.unwrap();
    before.login_user("iggy", PASSWORD).await.unwrap();

    let plain = sdk_client(&cairn, None);
    let refused = tokio::time::timeout(LIMIT, async {
        plain.connect().await?;
        plain.login_user("iggy", PASSWORD).await
    })
    .await
    .expect("refused in time, not left hanging");
    assert!(refused.is_err(), "a plain client gets nothing: {refused:?}");
    let line = wait_for_line(&cairn, "TLS handshake failed");
    assert!(line.contains("connection closed"), "{line}");

    assert!(
        cairn.child.try_wait().unwrap().is_none(),
        "the server runs on"
    );
    before
        .ping()
        .await
        .expect("the earlier connection is unharmed");
    let after = sdk_client(&cairn, Some(&cert.cert));
    tokio::time::timeout(LIMIT, produce_and_consume(&after, "after-plain"))
        .await
        .expect("in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_trusting_another_ca_fails() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "server");
    let other = make_cert(dir.path(), "other");
    let mut cairn = start_tls(&dir.path().join("data"), &cert);

    let wrong = sdk_client(&cairn, Some(&other.cert));
    let refused = tokio::time::timeout(LIMIT, wrong.connect())
        .await
        .expect("refused in time");
    assert!(refused.is_err(), "the certificate is not trusted");
    wait_for_line(&cairn, "TLS handshake failed");

    assert!(
        cairn.child.try_wait().unwrap().is_none(),
        "the server runs on"
    );
    let right = sdk_client(&cairn, Some(&cert.cert));
    tokio::time::timeout(LIMIT, produce_and_consume(&right, "after-wrong-ca"))
        .await
        .expect("in time");
}

#[test]
fn tls_is_off_by_default_and_a_bad_tls_configuration_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
        command
            .arg("serve")
            .args(args)
            .env_clear()
            .env("CAIRN_DATA_DIR", dir.path().join("data"))
            .env("CAIRN_TCP_ADDRESS", "127.0.0.1:0")
            .current_dir(dir.path());
        for (k, v) in env {
            command.env(k, v);
        }
        command.output().unwrap()
    };
    let out = run(&[], &["--print-config"]);
    assert_eq!(out.status.code(), Some(0));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("[tcp.tls]\nenabled = false\n"),
        "{printed}"
    );

    let out = run(&[("CAIRN_TCP_TLS_ENABLED", "true")], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tcp.tls.cert_file: must be set when tcp.tls.enabled is true"),
        "{stderr}"
    );
    let missing = dir.path().join("missing.pem");
    let out = run(
        &[
            ("CAIRN_TCP_TLS_ENABLED", "true"),
            ("CAIRN_TCP_TLS_CERT_FILE", missing.to_str().unwrap()),
            ("CAIRN_TCP_TLS_KEY_FILE", missing.to_str().unwrap()),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "CAIRN_TCP_TLS_CERT_FILE: {}: no such file",
            missing.display()
        )),
        "{stderr}"
    );
}

/// HTTPS on the HTTP listener: the SDK's HTTP transport cannot be given a CA, so a plain
/// client (reqwest over rustls) trusting the test's certificate logs in and reads; one that
/// trusts another certificate, and plain HTTP on the same port, get nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "https");
    let other = make_cert(dir.path(), "other");
    let cairn = Cairn::start_with(
        &dir.path().join("data"),
        &[
            ("CAIRN_HTTP_TLS_ENABLED", "true"),
            ("CAIRN_HTTP_TLS_CERT_FILE", cert.cert.to_str().unwrap()),
            ("CAIRN_HTTP_TLS_KEY_FILE", cert.key.to_str().unwrap()),
        ],
    );
    let port = cairn.http.unwrap().port();
    let trusting = |pem: &Path| {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(pem).unwrap()).unwrap();
        reqwest::Client::builder()
            .tls_certs_only([ca])
            .build()
            .unwrap()
    };
    let url = format!("https://localhost:{port}");
    let login = trusting(&cert.cert)
        .post(format!("{url}/users/login"))
        .json(&serde_json::json!({"username": "iggy", "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), reqwest::StatusCode::OK);
    let identity: serde_json::Value = login.json().await.unwrap();
    let token = identity["access_token"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let streams = trusting(&cert.cert)
        .get(format!("{url}/streams"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(streams.status(), reqwest::StatusCode::OK);
    assert!(trusting(&other.cert)
        .get(format!("{url}/ping"))
        .send()
        .await
        .is_err());
    let plain = reqwest::Client::new()
        .get(format!("http://localhost:{port}/ping"))
        .send()
        .await;
    assert!(plain.map_or(true, |r| !r.status().is_success()));
    // The listener serves on after both.
    let ping = trusting(&cert.cert)
        .get(format!("{url}/ping"))
        .send()
        .await
        .unwrap();
    assert_eq!(ping.status(), reqwest::StatusCode::OK);
}

//! The real `cairn` binary as a child process on a temporary data directory and a free
//! loopback port, for end-to-end tests.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    dead_code,
    clippy::zombie_processes,
    unreachable_pub
)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const PASSWORD: &str = "secret-root-password";

/// A running `cairn serve`.
pub struct Cairn {
    pub child: Child,
    pub address: SocketAddr,
    /// The HTTP API's address, when it is enabled.
    pub http: Option<SocketAddr>,
    pub data: PathBuf,
    /// Lines of its stdout and stderr seen so far arrive here.
    pub output: mpsc::Receiver<String>,
    /// The lines it wrote before it listened.
    pub startup: Vec<String>,
}

impl Cairn {
    /// Starts `cairn serve` on `data` (listening on an ephemeral port) and waits until it
    /// listens.
    pub fn start(data: &Path) -> Cairn {
        Self::start_with(data, &[])
    }

    pub fn start_with(data: &Path, env: &[(&str, &str)]) -> Cairn {
        Self::start_command(data, env, |_| {})
    }

    /// Starts it with the open-file limit (soft, hard) set for its process.
    pub fn start_with_open_files(data: &Path, env: &[(&str, &str)], soft: u64, hard: u64) -> Cairn {
        Self::start_command(data, env, move |command| {
            use std::os::unix::process::CommandExt;
            let limit = libc::rlimit {
                rlim_cur: soft as libc::rlim_t,
                rlim_max: hard as libc::rlim_t,
            };
            // SAFETY: setrlimit is async-signal-safe; it runs in the child before exec.
            unsafe {
                command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                });
            }
        })
    }

    fn start_command(
        data: &Path,
        env: &[(&str, &str)],
        prepare: impl FnOnce(&mut Command),
    ) -> Cairn {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cairn"));
        prepare(&mut command);
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("CAIRN_DATA_DIR", data)
            .env("CAIRN_TCP_ADDRESS", "127.0.0.1:0")
            .env("CAIRN_HTTP_ADDRESS", "127.0.0.1:0")
            .env("CAIRN_ROOT_PASSWORD", PASSWORD)
            .env("CAIRN_NODE_SHARDS", "2")
            .env("CAIRN_LOG_LEVEL", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn cairn");
        let (tx, output) = mpsc::channel();
        for pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let mut seen = Vec::new();
        let mut http = None;
        loop {
            let line = output
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("cairn did not start listening; output: {seen:#?}"));
            if let Some(rest) = line.strip_prefix("cairn: HTTP API on ") {
                let address = rest.trim().split("://").nth(1).unwrap();
                http = Some(address.parse().unwrap());
            }
            if let Some(rest) = line.strip_prefix("cairn: listening on ") {
                let address = rest.split_whitespace().next().unwrap().parse().unwrap();
                return Cairn {
                    child,
                    address,
                    http,
                    data: data.to_path_buf(),
                    output,
                    startup: seen,
                };
            }
            seen.push(line);
        }
    }

    /// The HTTP API's base URL.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http.expect("the HTTP API is enabled"))
    }

    pub fn connection_string(&self, user: &str, password: &str) -> String {
        format!("iggy://{user}:{password}@{}", self.address)
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then the exit code.
    pub fn terminate(mut self) -> Option<i32> {
        let pid = self.child.id() as i32;
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let status = self.child.wait().unwrap();
        status.code()
    }

    /// Every output line seen so far.
    pub fn drain_output(&self) -> Vec<String> {
        self.output.try_iter().collect()
    }
}

impl Drop for Cairn {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The output threads get the last lines before the process goes.
            std::thread::sleep(Duration::from_millis(300));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failing test shows what the server said: its output is otherwise lost.
        if std::thread::panicking() {
            let said: Vec<String> = self.output.try_iter().collect();
            eprintln!("cairn's output up to the failure:");
            for line in self.startup.iter().chain(&said) {
                eprintln!("  {line}");
            }
        }
    }
}

/// Every file under `dir` with its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// `n` SDK messages with payloads `{prefix}-{i}`.
pub fn messages(prefix: &str, n: usize) -> Vec<iggy::prelude::IggyMessage> {
    use std::str::FromStr;
    (0..n)
        .map(|i| iggy::prelude::IggyMessage::from_str(&format!("{prefix}-{i}")).unwrap())
        .collect()
}

/// A poll's payloads as text.
pub fn payloads(polled: &iggy::prelude::PolledMessages) -> Vec<String> {
    polled
        .messages
        .iter()
        .map(|m| String::from_utf8(m.payload.to_vec()).unwrap())
        .collect()
}

/// A stream, topic or group named `name`, as the SDK addresses it.
/// An SDK client connected to `cairn` and logged in as `user`.
pub async fn sdk_client(
    cairn: &Cairn,
    user: &str,
    password: &str,
) -> Result<iggy::prelude::IggyClient, iggy::prelude::IggyError> {
    use iggy::prelude::Client;
    let client = iggy::prelude::IggyClient::from_connection_string(
        &cairn.connection_string(user, password),
    )?;
    client.connect().await?;
    Ok(client)
}

/// A bearer token of `user`'s, from an HTTP login.
pub async fn http_token(cairn: &Cairn, user: &str, password: &str) -> String {
    let identity: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/users/login", cairn.http_url()))
        .json(&serde_json::json!({"username": user, "password": password}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    identity["access_token"]["token"]
        .as_str()
        .unwrap_or_else(|| panic!("{user} logs in over HTTP: {identity}"))
        .to_owned()
}

/// The value of `/metrics`' sample `name` (a counter's name ends in `_total`), scraped with
/// `token`.
pub async fn metric(cairn: &Cairn, token: &str, name: &str) -> u64 {
    let (value, text) = metric_if_any(cairn, token, name).await;
    value.unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// `/metrics`' sample `name`, if it is there, and the whole scrape.
pub async fn metric_if_any(cairn: &Cairn, token: &str, name: &str) -> (Option<u64>, String) {
    let text = reqwest::Client::new()
        .get(format!("{}/metrics", cairn.http_url()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = (text.lines())
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap());
    (value, text)
}

/// Every per-stream right on stream `stream`, nothing else.
pub fn every_right_on(stream: u32) -> iggy::prelude::Permissions {
    let every = iggy::prelude::StreamPermissions {
        manage_stream: true,
        read_stream: true,
        manage_topics: true,
        read_topics: true,
        poll_messages: true,
        send_messages: true,
        topics: None,
    };
    iggy::prelude::Permissions {
        global: iggy::prelude::GlobalPermissions::default(),
        streams: Some([(stream as usize, every)].into_iter().collect()),
    }
}

/// An SDK client connected to `cairn` that has not logged in.
pub async fn anonymous(cairn: &Cairn) -> iggy::prelude::IggyClient {
    use iggy::prelude::Client;
    let client = iggy::prelude::IggyClient::builder()
        .with_tcp()
        .with_server_address(cairn.address.to_string())
        .build()
        .unwrap();
    client.connect().await.expect("connects");
    client
}

pub fn id(name: &str) -> iggy::prelude::Identifier {
    iggy::prelude::Identifier::named(name).unwrap()
}

/// A topic option as the SDK reads it: its value as text, and whether a request named it.
pub fn topic_option(details: &iggy::prelude::TopicDetails, key: &str) -> Option<(String, bool)> {
    use std::str::FromStr;
    let key = iggy::prelude::HeaderKey::from_str(key).unwrap();
    details
        .options
        .get(&key)
        .map(|option| (option.value.to_string_value(), option.explicit))
}

/// The SDK's options for a new topic of `partitions` partitions under `durability`.
pub fn topic_options(
    partitions: u32,
    durability: iggy::prelude::Durability,
) -> iggy::prelude::TopicCreateOptions {
    iggy::prelude::TopicCreateOptions {
        partitions_count: Some(partitions),
        durability,
        ..iggy::prelude::TopicCreateOptions::default()
    }
}

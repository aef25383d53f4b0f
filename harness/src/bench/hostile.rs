//! `cairn-harness hostile`: the real `cairn` binary under a crowd, half of it hostile
//! (review `wave3-security.md`, issue 23's load test). Two runs of the same well-behaved
//! end-to-end workload (8 producers and a group of 8 consumers on the bench's client), one
//! alone and one beside `--connections` connections of which half misbehave:
//!
//! - anonymous sockets that announce a login frame and trickle it a byte at a time;
//! - logins with a wrong password, over and over;
//! - logged-in users with no right to send who announce 60 MiB sends and trickle them;
//! - logged-in readers who ask for 1 MiB-message polls and never read a reply;
//! - HTTP logins whose body trickles a byte at a time;
//!
//! and the other half arrive over 10 s, log in and ping every 5 s (a failure of one counts
//! as a failure of the run). Each hostile connection comes from its own
//! loopback address (127.1.x.y, 8 per address), as a crowd of hosts would. The server's
//! resident memory is sampled every 50 ms. The last line is
//! `hostile connections=… p99_ms_alone=… p99_ms_hostile=… ratio=… rss_max_mib=…
//! rss_budget_mib=… failures=…`; the exit status is 1 when a well-behaved request failed,
//! the p99 ratio passed 5 or the memory passed the budget.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // sockets bound to a source address, /proc, a child process

use super::report::PhaseResult;
use super::{bench_on, shape, BenchArgs, Kind};
use cairn_client::frame::{encode_request, Route, Sequence};
use cairn_client::{Client, ClientConfig, Credentials, Outgoing};
use cairn_engine::env::Env;
use iggy_binary_protocol::codes::{
    LOGIN_REGISTER_CODE, LOGIN_REGISTER_WITH_PAT_CODE, PING_CODE, POLL_MESSAGES_CODE,
    SEND_MESSAGES_CODE,
};
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::{
    WireConsumer, WireEncode, WireGlobalPermissions, WireIdentifier, WireOptions, WirePartitioning,
    WirePermissions, WirePollingStrategy, HEADER_SIZE,
};
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(clap::Args)]
pub struct HostileArgs {
    /// The `cairn` binary (default: `cairn` beside this program).
    #[arg(long)]
    server: Option<PathBuf>,
    /// Connections in the hostile run besides the workload's; half misbehave.
    #[arg(long, default_value_t = 4096)]
    connections: u32,
    /// Batches of 100 messages of 1000 bytes each of the 8 producers sends per run.
    #[arg(long, default_value_t = 1000)]
    batches: u64,
    /// The server's resident memory must stay below this, MiB.
    #[arg(long, default_value_t = 1024)]
    rss_budget_mib: u64,
    /// The server's `limits.buffered_bytes`, MiB.
    #[arg(long, default_value_t = 256)]
    buffered_mib: u64,
    /// Where the server's log goes (at `info`); default: nowhere.
    #[arg(long)]
    server_log: Option<PathBuf>,
}

const PASSWORD: &str = "hostile-root-password";
/// Hostile connections per source address (a crowd of hosts, a few each).
const PER_ADDRESS: u32 = 8;

pub fn hostile(args: HostileArgs) -> ExitCode {
    match cairn_server::process::raise_open_file_limit() {
        Ok((_, limit)) if limit < 2 * u64::from(args.connections) + 256 => {
            eprintln!("hostile: the open-file limit ({limit}) is below what the run needs");
            return ExitCode::from(2);
        }
        Ok(_) => {}
        Err(e) => eprintln!("hostile: the open-file limit could not be raised: {e}"),
    }
    let env = match cairn_engine::env::real::env_with_workers(2) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("hostile: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match cairn_engine::env::real::block_on(run(env, args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("hostile: {e}");
            ExitCode::from(1)
        }
    }
}

/// The `cairn serve` child, killed when dropped, with its data directory.
struct Served {
    child: std::process::Child,
    tcp: SocketAddr,
    http: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &HostileArgs) -> Result<Served, String> {
    let binary = match &args.server {
        Some(path) => path.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("where is this program: {e}"))?
            .with_file_name("cairn"),
    };
    let dir = tempfile::Builder::new()
        .prefix("cairn-hostile-")
        .tempdir()
        .map_err(|e| format!("a temporary directory: {e}"))?;
    let connections = 2 * args.connections + 64;
    let mut child = Command::new(&binary)
        .arg("serve")
        .env("CAIRN_DATA_DIR", dir.path())
        .env("CAIRN_TCP_ADDRESS", "127.0.0.1:0")
        .env("CAIRN_HTTP_ADDRESS", "127.0.0.1:0")
        .env("CAIRN_ROOT_PASSWORD", PASSWORD)
        .env(
            "CAIRN_LOG_LEVEL",
            if args.server_log.is_some() {
                "info"
            } else {
                "warn"
            },
        )
        .env("CAIRN_TCP_MAX_CONNECTIONS", connections.to_string())
        .env(
            "CAIRN_LIMITS_BUFFERED_BYTES",
            (args.buffered_mib << 20).to_string(),
        )
        .stdout(Stdio::piped())
        .stderr(match &args.server_log {
            Some(path) => std::fs::File::create(path)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?
                .into(),
            None => Stdio::null(),
        })
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let mut http = None;
    let address = |rest: &str| -> Result<SocketAddr, String> {
        rest.split_whitespace()
            .next()
            .and_then(|a| a.rsplit("://").next())
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("cannot read an address in {rest:?}"))
    };
    loop {
        let Some(Ok(line)) = lines.next() else {
            return Err(format!("{} ended before it listened", binary.display()));
        };
        if let Some(rest) = line.strip_prefix("cairn: HTTP API on ") {
            http = Some(address(rest)?);
        }
        if let Some(rest) = line.strip_prefix("cairn: listening on ") {
            let tcp = address(rest)?;
            // Keep draining its output so it never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines.by_ref() {});
            return Ok(Served {
                child,
                tcp,
                http: http.ok_or("no HTTP API line")?,
                _dir: dir,
            });
        }
    }
}

/// The most resident memory seen while it runs, sampled every 50 ms.
struct RssWatch {
    max_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssWatch {
    fn start(pid: u32) -> RssWatch {
        let (max_kib, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (m, s) = (max_kib.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                m.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        RssWatch {
            max_kib,
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.max_kib.load(Ordering::Relaxed) / 1024
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The credentials the hostile crowd uses, made by the setup.
#[derive(Clone)]
struct Crowd {
    tcp: SocketAddr,
    http: SocketAddr,
    /// A token of a user with no permission at all.
    nobody: String,
    /// A token of a user who may poll everything.
    reader: String,
    /// A poll of topic `big` (1 MiB messages) of stream `hostile`.
    poll: Vec<u8>,
    stop: Arc<AtomicBool>,
    /// Well-behaved connections (the half that logs in and pings) that failed.
    idle_failures: Arc<AtomicU64>,
    /// Why they failed, counted (the first words of each error).
    idle_errors: Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>,
}

async fn run(env: Env, args: HostileArgs) -> Result<bool, String> {
    let served = serve(&args)?;
    let config = ClientConfig::new(served.tcp).with_credentials("iggy", PASSWORD);
    let crowd = setup(&env, &served, &config).await?;
    let workload = BenchArgs::workload(served.tcp, PASSWORD, args.batches);
    let shape = shape(&workload)?;

    eprintln!("hostile: the workload alone");
    let watch = RssWatch::start(served.child.id());
    let alone = bench_on(&env, &workload, &shape, &config, false).await;
    let rss_alone = watch.stop();
    let alone = p99(&alone?.0);

    let hostile = args.connections / 2;
    eprintln!(
        "hostile: the workload beside {} connections, {hostile} of them hostile",
        args.connections
    );
    let watch = RssWatch::start(served.child.id());
    let tasks = start_crowd(&env, &crowd, args.connections);
    // Let the crowd arrive (and its wrong passwords lock their addresses out) before the
    // workload starts: it then runs among them.
    env.clock.sleep(Duration::from_secs(15)).await;
    let beside = bench_on(&env, &workload, &shape, &config, false).await;
    crowd.stop.store(true, Ordering::Relaxed);
    drop(tasks);
    let rss_max = watch.stop();
    let idle_failures = crowd.idle_failures.load(Ordering::Relaxed);
    if idle_failures > 0 {
        let errors = crowd.idle_errors.lock().unwrap_or_else(|p| p.into_inner());
        eprintln!("hostile: {idle_failures} well-behaved idle connections failed: {errors:?}");
    }
    let (beside, failures) = match beside {
        Ok((phases, _)) => (p99(&phases), idle_failures),
        Err(e) => {
            eprintln!("hostile: a well-behaved request failed: {e}");
            (f64::NAN, 1 + idle_failures)
        }
    };
    let ratio = beside / alone.max(1e-3);
    println!(
        "hostile connections={} hostile={hostile} p99_ms_alone={alone:.2} p99_ms_hostile={beside:.2} ratio={ratio:.2} rss_alone_mib={rss_alone} rss_max_mib={rss_max} rss_budget_mib={} buffered_mib={} failures={failures}",
        args.connections, args.rss_budget_mib, args.buffered_mib
    );
    Ok(failures == 0 && ratio <= 5.0 && rss_max <= args.rss_budget_mib)
}

/// The p99 of the run's last (measured) phase, ms.
fn p99(phases: &[PhaseResult]) -> f64 {
    phases.last().map_or(f64::NAN, |p| p.latencies().p99)
}

impl BenchArgs {
    /// The well-behaved workload: end-to-end, 8 producers and 8 consumers, one stream of 8
    /// partitions, 100 messages of 1000 bytes per batch, on a running server.
    fn workload(address: SocketAddr, password: &str, batches: u64) -> BenchArgs {
        BenchArgs {
            kind: Kind::EndToEnd,
            producers: Some(8),
            consumers: Some(8),
            streams: Some(1),
            partitions: None,
            message_size: 1000,
            messages_per_batch: 100,
            batches: Some(batches),
            total_bytes: None,
            durability: cairn_client::cli::Durability::Replicated,
            address: Some(address.to_string()),
            username: "iggy".into(),
            password: Some(password.into()),
            json: None,
            reuse_streams: false,
            data_dir: None,
        }
    }
}

/// Stream `hostile` with topic `big` (16 messages of 1 MiB), users `nobody` (no permission)
/// and `reader` (may poll), and a personal access token of each.
async fn setup(env: &Env, served: &Served, config: &ClientConfig) -> Result<Crowd, String> {
    let failed = |what: &str, e: cairn_client::ClientError| format!("setup: {what}: {e}");
    let mut root = Client::connect(env.clone(), config.clone())
        .await
        .map_err(|e| failed("root login", e))?;
    root.create_stream("hostile")
        .await
        .map_err(|e| failed("stream", e))?;
    let stream = WireIdentifier::named("hostile").expect("a name");
    root.create_topic(&stream, "big", 1, WireOptions::empty())
        .await
        .map_err(|e| failed("topic", e))?;
    let topic = WireIdentifier::named("big").expect("a name");
    let payload = vec![7u8; 1 << 20];
    for _ in 0..16 {
        let message = Outgoing {
            id: 0,
            payload: &payload,
            headers: &[],
        };
        root.send_payloads(
            &stream,
            &topic,
            &WirePartitioning::PartitionId(0),
            &[message],
        )
        .await
        .map_err(|e| failed("a 1 MiB message", e))?;
    }
    let may_poll = WirePermissions {
        global: WireGlobalPermissions {
            manage_servers: false,
            read_servers: false,
            manage_users: false,
            read_users: false,
            manage_streams: false,
            read_streams: false,
            manage_topics: false,
            read_topics: false,
            poll_messages: true,
            send_messages: false,
        },
        streams: Vec::new(),
    };
    let mut tokens = Vec::new();
    for (user, permissions) in [("nobody", None), ("reader", Some(may_poll))] {
        root.create_user(user, "a-user-password", true, permissions)
            .await
            .map_err(|e| failed("a user", e))?;
        let mut as_user = Client::connect(
            env.clone(),
            ClientConfig::new(served.tcp).with_credentials(user, "a-user-password"),
        )
        .await
        .map_err(|e| failed("a user's login", e))?;
        let token = as_user
            .create_personal_access_token("hostile", 0)
            .await
            .map_err(|e| failed("a token", e))?;
        as_user.close().await;
        tokens.push(token);
    }
    root.close().await;
    let poll = PollMessagesRequest {
        consumer: WireConsumer::consumer(WireIdentifier::numeric(1)),
        stream_id: stream,
        topic_id: topic,
        partition_id: Some(0),
        strategy: WirePollingStrategy { kind: 1, value: 0 },
        count: 16,
        auto_commit: false,
    }
    .to_bytes()
    .to_vec();
    let reader = tokens.pop().expect("two tokens");
    let nobody = tokens.pop().expect("two tokens");
    Ok(Crowd {
        tcp: served.tcp,
        http: served.http,
        nobody,
        reader,
        poll,
        stop: Arc::new(AtomicBool::new(false)),
        idle_failures: Arc::new(AtomicU64::new(0)),
        idle_errors: Arc::default(),
    })
}

/// Starts `connections` tasks: the first half misbehave (five kinds in turn), the rest log
/// in and ping. They run until `crowd.stop`.
fn start_crowd(
    env: &Env,
    crowd: &Crowd,
    connections: u32,
) -> Vec<Box<dyn cairn_engine::env::TaskHandle>> {
    (0..connections)
        .map(|i| {
            let source = IpAddr::V4(Ipv4Addr::new(
                127,
                1 + (i / PER_ADDRESS / 250) as u8,
                (i / PER_ADDRESS % 250) as u8,
                1 + (i % PER_ADDRESS) as u8,
            ));
            let crowd = crowd.clone();
            let kind = if i < connections / 2 { i % 5 } else { 5 };
            let env2 = env.clone();
            // The well-behaved half arrives over 10 s, as clients of many hosts would.
            let arrival = match kind {
                5 => Duration::from_millis(
                    u64::from(i - connections / 2) * 10_000 / u64::from(connections / 2).max(1),
                ),
                _ => Duration::ZERO,
            };
            env.tasks.spawn(Box::pin(async move {
                env2.clock.sleep(arrival).await;
                while !crowd.stop.load(Ordering::Relaxed) {
                    // Each misbehaviour runs until the server ends it (or the run does).
                    let _ = match kind {
                        0 => trickled_login(&crowd, source).await,
                        1 => wrong_password(&crowd, source).await,
                        2 => unpermitted_big_send(&crowd, source).await,
                        3 => unread_polls(&crowd, source).await,
                        4 => trickled_http_login(&crowd, source).await,
                        _ => {
                            let ended = idle(&crowd, source).await;
                            if let (Err(e), false) = (&ended, crowd.stop.load(Ordering::Relaxed)) {
                                crowd.idle_failures.fetch_add(1, Ordering::Relaxed);
                                let mut errors =
                                    crowd.idle_errors.lock().unwrap_or_else(|p| p.into_inner());
                                *errors.entry(e.to_string()).or_default() += 1;
                            }
                            ended
                        }
                    };
                    env2.clock.sleep(Duration::from_millis(500)).await;
                }
            }))
        })
        .collect()
}

async fn connect(source: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(to).await
}

/// A request's frame: its header announcing `announced` body bytes, and `body` (empty, or
/// all of it).
fn frame(sequence: &mut Sequence, code: u32, body: &[u8], announced: usize) -> Vec<u8> {
    let route = Route::of(code).expect("a known command");
    let mut frame = encode_request(sequence, &route, body).expect("a valid request");
    let size = u32::try_from(HEADER_SIZE + announced).expect("below 4 GiB");
    frame[48..52].copy_from_slice(&size.to_le_bytes());
    frame
}

/// Reads one reply: its status.
async fn reply(stream: &mut TcpStream) -> std::io::Result<u32> {
    let mut header = [0u8; HEADER_SIZE];
    stream.read_exact(&mut header).await?;
    let size = u32::from_le_bytes(header[48..52].try_into().expect("4 bytes")) as usize;
    let mut body = vec![0u8; size.saturating_sub(HEADER_SIZE)];
    stream.read_exact(&mut body).await?;
    Ok(u32::from_le_bytes(
        header[216..220].try_into().expect("4 bytes"),
    ))
}

/// A connection logged in with `token`, and its sequence.
async fn login(
    crowd: &Crowd,
    source: IpAddr,
    token: &str,
) -> std::io::Result<(TcpStream, Sequence)> {
    let mut stream = connect(source, crowd.tcp).await?;
    // A client id of its own, as the SDK draws one.
    static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);
    let client = 0x4057_11e0_0000_0000 | u128::from(NEXT_CLIENT.fetch_add(1, Ordering::Relaxed));
    let mut sequence = Sequence::unbound(client);
    let body = cairn_client::client::login_body(&Credentials::Token(token.into()))
        .map_err(std::io::Error::other)?;
    stream
        .write_all(&frame(
            &mut sequence,
            LOGIN_REGISTER_WITH_PAT_CODE,
            &body,
            body.len(),
        ))
        .await?;
    let mut header = [0u8; HEADER_SIZE];
    stream.read_exact(&mut header).await?;
    let size = u32::from_le_bytes(header[48..52].try_into().expect("4 bytes")) as usize;
    let mut reply = vec![0u8; size.saturating_sub(HEADER_SIZE)];
    stream.read_exact(&mut reply).await?;
    let status = u32::from_le_bytes(header[216..220].try_into().expect("4 bytes"));
    if status != 0 || reply.len() < 16 {
        return Err(std::io::Error::other(format!("login refused: {status}")));
    }
    let session = u64::from_le_bytes(reply[8..16].try_into().expect("8 bytes"));
    Ok((stream, Sequence::bound(client, session)))
}

/// Sends `len` bytes, `chunk` at a time, `every` apart, until the server closes or the run
/// ends.
async fn trickle(
    crowd: &Crowd,
    stream: &mut TcpStream,
    len: usize,
    chunk: usize,
    every: Duration,
) -> std::io::Result<()> {
    let bytes = vec![0u8; chunk];
    let mut sent = 0;
    while sent < len && !crowd.stop.load(Ordering::Relaxed) {
        stream.write_all(&bytes).await?;
        sent += chunk;
        tokio::time::sleep(every).await;
    }
    Ok(())
}

async fn trickled_login(crowd: &Crowd, source: IpAddr) -> std::io::Result<()> {
    let mut stream = connect(source, crowd.tcp).await?;
    let mut sequence = Sequence::unbound(1);
    stream
        .write_all(&frame(&mut sequence, LOGIN_REGISTER_CODE, &[], 60_000))
        .await?;
    trickle(crowd, &mut stream, 60_000, 1, Duration::from_millis(500)).await
}

async fn wrong_password(crowd: &Crowd, source: IpAddr) -> std::io::Result<()> {
    let mut stream = connect(source, crowd.tcp).await?;
    let body = cairn_client::client::login_body(&Credentials::Password {
        username: "iggy".into(),
        password: "not-the-password".into(),
    })
    .map_err(std::io::Error::other)?;
    let mut sequence = Sequence::unbound(2);
    stream
        .write_all(&frame(
            &mut sequence,
            LOGIN_REGISTER_CODE,
            &body,
            body.len(),
        ))
        .await?;
    // An eviction (or a busy answer); either way, again.
    let _ = reply(&mut stream).await;
    Ok(())
}

async fn unpermitted_big_send(crowd: &Crowd, source: IpAddr) -> std::io::Result<()> {
    let (mut stream, mut sequence) = login(crowd, source, &crowd.nobody).await?;
    stream
        .write_all(&frame(&mut sequence, SEND_MESSAGES_CODE, &[], 60 << 20))
        .await?;
    trickle(
        crowd,
        &mut stream,
        60 << 20,
        64 << 10,
        Duration::from_secs(1),
    )
    .await
}

async fn unread_polls(crowd: &Crowd, source: IpAddr) -> std::io::Result<()> {
    let (mut stream, mut sequence) = login(crowd, source, &crowd.reader).await?;
    for _ in 0..16 {
        let poll = frame(
            &mut sequence,
            POLL_MESSAGES_CODE,
            &crowd.poll,
            crowd.poll.len(),
        );
        stream.write_all(&poll).await?;
    }
    // Never read; the server closes the connection once a reply waits too long.
    while !crowd.stop.load(Ordering::Relaxed) {
        let ping = frame(&mut sequence, PING_CODE, &[], 0);
        stream.write_all(&ping).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

async fn trickled_http_login(crowd: &Crowd, source: IpAddr) -> std::io::Result<()> {
    let mut stream = connect(source, crowd.http).await?;
    let head = format!(
        "POST /users/login HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: 60000\r\n\r\n",
        crowd.http
    );
    stream.write_all(head.as_bytes()).await?;
    trickle(crowd, &mut stream, 60_000, 1, Duration::from_millis(500)).await
}

async fn idle(crowd: &Crowd, source: IpAddr) -> std::io::Result<()> {
    let (mut stream, mut sequence) = login(crowd, source, &crowd.reader).await?;
    while !crowd.stop.load(Ordering::Relaxed) {
        stream
            .write_all(&frame(&mut sequence, PING_CODE, &[], 0))
            .await?;
        reply(&mut stream).await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    Ok(())
}

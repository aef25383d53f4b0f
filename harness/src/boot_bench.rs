//! `cairn-harness boot-bench`: how long a node takes to boot on real files, and what it holds
//! once up. Every measurement runs in a process of its own (this binary again, in a hidden
//! role), so its resident memory and open files are the node's and nothing else's:
//!
//! - `fill`: one stream, topics of 1,000 partitions, a few messages sent to each, then a
//!   clean shutdown;
//! - `sealed`: one partition filled past `--sealed-gib` GiB, so that much lies in sealed
//!   segments, then a clean shutdown;
//! - `boot`: boots the node with a disk that counts device reads (read calls on a handle
//!   whose cached pages boot dropped: such a handle reads the device from then on), prints
//!   what it took, then shuts down cleanly; with `--hold` it sends one message more to each
//!   partition of the first topic and waits to be killed (`kill -9`: the next boot is after
//!   an unclean exit, the page cache intact);
//! - `verify`: `cairn check`'s full verification of the directory, timed.
//!
//! The parent prints, per partition count and per shutdown, the medians of `--runs` boots:
//! `boot partitions=<n> seconds=<x> rss_mib=<x> fds=<n> device_reads=<n> shutdown=<clean|kill>`,
//! then `boot sealed_gib=<g> seconds=<x> full_verify_seconds=<x> ratio=<x>`.

use bytes::BytesMut;
use cairn_engine::env::{real, Disk, DiskFile, DiskLayer, Env, FileLayer, OpenMode};
use cairn_engine::format::BatchBuilder;
use cairn_engine::node::{Client, Node, NodeSettings};
use iggy_binary_protocol::{WireIdentifier, WireOptions, WirePartitioning};
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Partitions per topic, as the shape names it.
const TOPIC_PARTITIONS: u32 = 1_000;
/// Messages sent to each partition by the fill (one batch).
const FILL_MESSAGES: usize = 3;
/// The sealed fill's batch: 1,000 messages of 1,000 bytes.
const SEALED_BATCH_MESSAGES: usize = 1_000;
const SEALED_MESSAGE_BYTES: usize = 1_000;

#[derive(clap::Args)]
pub struct BootBenchArgs {
    /// Partition counts to boot, comma separated (one stream, topics of 1,000 partitions).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    partitions: Vec<u32>,
    /// GiB of sealed data in one partition for the sealed line (0: no sealed line).
    #[arg(long, default_value_t = 2)]
    sealed_gib: u64,
    /// Boots measured per line; the line gives their medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Where the data directories are made (default: the system's temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The role this process plays for its parent (internal).
    #[arg(long, hide = true)]
    role: Option<Role>,
    /// The data directory a role works on (internal).
    #[arg(long, hide = true)]
    root: Option<PathBuf>,
    /// `boot` role: send one message and wait to be killed (internal).
    #[arg(long, hide = true)]
    hold: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Role {
    Fill,
    Sealed,
    Boot,
    Verify,
}

/// What one boot measured.
#[derive(Debug, Clone, Copy, Default)]
struct Booted {
    seconds: f64,
    rss_kib: u64,
    fds: u64,
    device_reads: u64,
}

pub fn boot_bench(args: BootBenchArgs) -> ExitCode {
    let result = match (args.role, &args.root) {
        (None, _) => parent(&args),
        (Some(role), Some(root)) => child(role, root, &args),
        (Some(_), None) => Err("a role needs --root".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("boot-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parent(args: &BootBenchArgs) -> Result<(), String> {
    if args.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    let mut lines = Vec::new();
    for &partitions in &args.partitions {
        let dir = temp_dir(args, &format!("boot-{partitions}-"))?;
        let started = Instant::now();
        run_child(
            Role::Fill,
            dir.path(),
            &[format!("--partitions={partitions}")],
        )?;
        eprintln!(
            "boot-bench: {partitions} partitions filled in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        for shutdown in ["clean", "kill"] {
            let mut runs = Vec::new();
            for _ in 0..args.runs {
                if shutdown == "kill" {
                    hold_and_kill(dir.path())?;
                }
                let booted = parse_booted(&run_child(Role::Boot, dir.path(), &[])?)?;
                eprintln!("boot-bench: {partitions} after {shutdown}: {booted:?}");
                runs.push(booted);
            }
            let line = format!(
                "boot partitions={partitions} seconds={:.3} rss_mib={:.1} fds={} device_reads={} shutdown={shutdown}",
                median(runs.iter().map(|b| b.seconds)),
                median(runs.iter().map(|b| b.rss_kib as f64)) / 1024.0,
                median(runs.iter().map(|b| b.fds as f64)),
                median(runs.iter().map(|b| b.device_reads as f64)),
            );
            println!("{line}");
            lines.push(line);
        }
    }
    if args.sealed_gib > 0 {
        let dir = temp_dir(args, "boot-sealed-")?;
        run_child(
            Role::Sealed,
            dir.path(),
            &[format!("--sealed-gib={}", args.sealed_gib)],
        )?;
        let mut boots = Vec::new();
        let mut verifies = Vec::new();
        for _ in 0..args.runs {
            boots.push(parse_booted(&run_child(Role::Boot, dir.path(), &[])?)?.seconds);
            verifies.push(parse_seconds(&run_child(Role::Verify, dir.path(), &[])?)?);
        }
        let (boot, verify) = (median(boots.into_iter()), median(verifies.into_iter()));
        lines.push(format!(
            "boot sealed_gib={} seconds={boot:.3} full_verify_seconds={verify:.3} ratio={:.4}",
            args.sealed_gib,
            boot / verify
        ));
    }
    // The last lines, together, as the issue reads them.
    for line in &lines {
        println!("{line}");
    }
    Ok(())
}

fn temp_dir(args: &BootBenchArgs, prefix: &str) -> Result<tempfile::TempDir, String> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    match &args.dir {
        Some(parent) => {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            builder.tempdir_in(parent)
        }
        None => builder.tempdir(),
    }
    .map_err(|e| format!("cannot create a data directory: {e}"))
}

fn child_command(role: Role, root: &Path, extra: &[String]) -> Result<Command, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let role = clap::ValueEnum::to_possible_value(&role)
        .expect("every role has a name")
        .get_name()
        .to_string();
    let mut command = Command::new(me);
    command
        .arg("boot-bench")
        .arg(format!("--role={role}"))
        .arg("--root")
        .arg(root)
        .args(extra)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    Ok(command)
}

/// Runs a role to its end: its standard output.
fn run_child(role: Role, root: &Path, extra: &[String]) -> Result<String, String> {
    let out = child_command(role, root, extra)?
        .output()
        .map_err(|e| format!("cannot start the {role:?} role: {e}"))?;
    if !out.status.success() {
        return Err(format!("the {role:?} role failed: {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Boots, sends one message more, and is killed with `kill -9` once it says so.
fn hold_and_kill(root: &Path) -> Result<(), String> {
    let mut child: Child = child_command(Role::Boot, root, &["--hold".to_string()])?
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the holding boot: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    let held = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line == "held");
    // SIGKILL: no shutdown code runs.
    child.kill().map_err(|e| format!("kill -9: {e}"))?;
    let _ = child.wait();
    if held {
        Ok(())
    } else {
        Err("the holding boot ended before it held".into())
    }
}

fn parse_booted(out: &str) -> Result<Booted, String> {
    let line = out
        .lines()
        .find(|l| l.starts_with("booted "))
        .ok_or_else(|| format!("no `booted` line in {out:?}"))?;
    let field = |key: &str| -> Result<f64, String> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no {key} in {line:?}"))
    };
    Ok(Booted {
        seconds: field("seconds")?,
        rss_kib: field("rss_kib")? as u64,
        fds: field("fds")? as u64,
        device_reads: field("device_reads")? as u64,
    })
}

fn parse_seconds(out: &str) -> Result<f64, String> {
    out.lines()
        .find_map(|l| l.strip_prefix("verified seconds="))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no `verified` line in {out:?}"))
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn child(role: Role, root: &Path, args: &BootBenchArgs) -> Result<(), String> {
    if let Err(e) = cairn_server::process::raise_open_file_limit() {
        eprintln!("boot-bench: the open-file limit could not be raised: {e}");
    }
    let counts = Arc::new(AtomicU64::new(0));
    let mut env = real::env().map_err(|e| format!("cannot start the runtime: {e}"))?;
    env.disk = Arc::new(CountingDisk {
        inner: env.disk.clone(),
        device_reads: counts.clone(),
    });
    match role {
        Role::Fill => real::block_on(fill(env, root, args)),
        Role::Sealed => real::block_on(fill_sealed(env, root, args.sealed_gib)),
        Role::Boot => real::block_on(boot(env, root, &counts, args.hold)),
        Role::Verify => verify(env.disk.as_ref(), root),
    }
}

/// What `cairn serve` boots with by default, its active-files table sized by the open-file
/// limit as `cairn serve` sizes it.
fn settings() -> NodeSettings {
    let config = cairn_server::config::ServerConfig::default();
    let mut settings = config.node_settings();
    settings.root_password = "boot-bench".into();
    if let Ok((limit, _)) = cairn_server::process::open_file_limit() {
        let connections = 2 * config.tcp.max_connections as u64;
        let budget = cairn_server::command::descriptors::DescriptorBudget::new(
            limit,
            settings.limits.sealed_handles as u64,
            connections,
        );
        settings.limits.active_handles = budget.active as usize;
    }
    settings
}

async fn start(env: &Env, root: &Path) -> Result<Node, String> {
    Node::start(env, root, settings())
        .await
        .map(|booted| booted.node)
        .map_err(|e| format!("boot of {} refused: {e}", root.display()))
}

async fn fill(env: Env, root: &Path, args: &BootBenchArgs) -> Result<(), String> {
    let partitions = *args.partitions.first().ok_or("--partitions is empty")?;
    let node = start(&env, root).await?;
    let client = node.client(1);
    let stream = client
        .create_stream("boot")
        .await
        .map_err(|e| format!("create the stream: {e}"))?;
    let stream = WireIdentifier::numeric(stream);
    let mut left = partitions;
    let mut topic_index = 0;
    while left > 0 {
        let count = left.min(TOPIC_PARTITIONS);
        let topic = client
            .create_topic(
                &stream,
                &format!("t{topic_index}"),
                count,
                WireOptions::empty(),
            )
            .await
            .map_err(|e| format!("create topic {topic_index}: {e}"))?;
        send_each(&client, &stream, topic, count).await?;
        left -= count;
        topic_index += 1;
    }
    node.shutdown().await.map_err(|e| format!("shutdown: {e}"))
}

/// One batch of [`FILL_MESSAGES`] to every partition of `topic`.
async fn send_each(
    client: &Client,
    stream: &WireIdentifier,
    topic: u32,
    count: u32,
) -> Result<(), String> {
    let topic = WireIdentifier::numeric(topic);
    for partition in 0..count {
        let mut builder = BatchBuilder::new(1_764_000_000_000_000);
        for i in 0..FILL_MESSAGES {
            builder.push(
                u128::from(partition) << 8 | i as u128,
                0,
                &[i as u8; 100],
                b"",
            );
        }
        client
            .send(
                stream,
                &topic,
                &WirePartitioning::PartitionId(partition),
                builder.build(),
            )
            .await
            .map_err(|e| format!("send to partition {partition}: {e}"))?;
    }
    Ok(())
}

async fn fill_sealed(env: Env, root: &Path, gib: u64) -> Result<(), String> {
    let node = start(&env, root).await?;
    let client = node.client(1);
    let stream = WireIdentifier::numeric(
        client
            .create_stream("sealed")
            .await
            .map_err(|e| format!("create the stream: {e}"))?,
    );
    let topic = WireIdentifier::numeric(
        client
            .create_topic(&stream, "sealed", 1, WireOptions::empty())
            .await
            .map_err(|e| format!("create the topic: {e}"))?,
    );
    let batch = sealed_batch();
    // Past `gib` by one batch, so every one of its GiB lies in sealed segments.
    let batches = (gib << 30) / batch.len() as u64 + 1;
    for _ in 0..batches {
        client
            .send(
                &stream,
                &topic,
                &WirePartitioning::PartitionId(0),
                batch.clone(),
            )
            .await
            .map_err(|e| format!("send: {e}"))?;
    }
    node.shutdown().await.map_err(|e| format!("shutdown: {e}"))
}

fn sealed_batch() -> BytesMut {
    let mut builder = BatchBuilder::new(1_764_000_000_000_000);
    for i in 0..SEALED_BATCH_MESSAGES {
        builder.push(i as u128 + 1, 0, &[i as u8; SEALED_MESSAGE_BYTES], b"");
    }
    builder.build()
}

async fn boot(env: Env, root: &Path, device_reads: &AtomicU64, hold: bool) -> Result<(), String> {
    let started = Instant::now();
    let node = start(&env, root).await?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "booted seconds={seconds:.4} rss_kib={} fds={} device_reads={}",
        rss_kib()?,
        open_fds()?,
        device_reads.load(Ordering::Relaxed)
    );
    if hold {
        // A tail the next boot finds after the kill, in every partition of the first
        // topic, then wait for the kill.
        let client = node.client(1);
        let (stream, topic) = (WireIdentifier::numeric(0), WireIdentifier::numeric(0));
        for partition in 0..TOPIC_PARTITIONS {
            let mut builder = BatchBuilder::new(1_764_000_000_000_000);
            builder.push(u128::from(partition) + 1, 0, b"held", b"");
            let to = WirePartitioning::PartitionId(partition);
            if client
                .send(&stream, &topic, &to, builder.build())
                .await
                .is_err()
            {
                break; // past the topic's partitions
            }
        }
        println!("held");
        loop {
            env.clock.sleep(std::time::Duration::from_secs(3600)).await;
        }
    }
    node.shutdown().await.map_err(|e| format!("shutdown: {e}"))
}

fn verify(disk: &dyn Disk, root: &Path) -> Result<(), String> {
    let started = Instant::now();
    let clean = cairn_server::check::report(disk, root, &mut io::sink())
        .map_err(|e| format!("check of {}: {e}", root.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    if !clean {
        return Err(format!("check of {} found work to do", root.display()));
    }
    println!("verified seconds={seconds:.4}");
    Ok(())
}

fn rss_kib() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("/proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| "no VmRSS in /proc/self/status".to_string())
}

fn open_fds() -> Result<u64, String> {
    Ok(std::fs::read_dir("/proc/self/fd")
        .map_err(|e| format!("/proc/self/fd: {e}"))?
        .count() as u64)
}

/// A disk that counts reads sent to the device: reads on a handle whose cached pages were
/// dropped ([`DiskFile::evict_cache`]), which read the device from then on.
struct CountingDisk {
    inner: Arc<dyn Disk>,
    device_reads: Arc<AtomicU64>,
}

struct CountingFile {
    inner: Box<dyn DiskFile>,
    device_reads: Arc<AtomicU64>,
    evicted: AtomicBool,
}

impl CountingFile {
    fn count(&self) {
        if self.evicted.load(Ordering::Relaxed) {
            self.device_reads.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl DiskLayer for CountingDisk {
    fn inner(&self) -> &dyn Disk {
        self.inner.as_ref()
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(CountingFile {
            inner: self.inner.open(path, mode)?,
            device_reads: self.device_reads.clone(),
            evicted: AtomicBool::new(false),
        }))
    }
}

impl FileLayer for CountingFile {
    fn inner(&self) -> &dyn DiskFile {
        self.inner.as_ref()
    }
    fn evict_cache(&self) -> io::Result<()> {
        self.evicted.store(true, Ordering::Relaxed);
        self.inner.evict_cache()
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.count();
        self.inner.read_at(buf, pos)
    }
    fn read_exact_owned(&self, len: usize, pos: u64) -> io::Result<BytesMut> {
        self.count();
        self.inner.read_exact_owned(len, pos)
    }
}

//! `cairn-harness sbs`: cairn and Apache Iggy's server side by side, driven by the same
//! client (Iggy's `iggy-bench`), on the same host and file system.
//!
//! For each workload, runs alternate (Iggy, cairn, Iggy, cairn, …), each on a fresh data
//! directory and a fresh server process on the same ports; a workload's figure is the
//! median of its runs. Server CPU is the process's `utime + stime` (`/proc/<pid>/stat`, all
//! threads) across the measured run only (a fill before it is not counted). First a disk
//! probe, then one line per workload:
//!
//! ```text
//! disk fs=<type> seq_write_mb_s=<x> fdatasync_4k_p50_ms=<x> p99_ms=<x> dirty_threshold_mib=<x>
//! sbs <id> client=iggy-bench iggy=<x> cairn=<y> unit=<MB/s|msg/s> ratio=<y/x> goal=<g> pass=<yes|no> iggy_p99_ms=<a> cairn_p99_ms=<b> iggy_cpu_us_per_msg=<c> cairn_cpu_us_per_msg=<d> disk_bound=<yes|no>
//! ```
//!
//! Durability: cairn's topics are `replicated` (its default) unless the workload says
//! `persisted`; Iggy's are not durable unless the workload makes them so, the only way its
//! acknowledgements survive `kill -9`: `enforce_fsync` and `messages_required_to_save=1` on a
//! topic created over its HTTP API before iggy-bench runs with `--reuse-streams`.
//!
//! One more row, `C3`, is cairn against itself: a cluster of three `cairn serve` processes
//! on this host (every send synced by a quorum of its partition's copies) against a single
//! node with the topic `persisted`, iggy-bench driving member 1 (report only):
//!
//! ```text
//! sbs C3 client=iggy-bench cairn=<x> cluster=<y> unit=msg/s ratio=<y/x> goal=report pass=n/a cairn_p99_ms=<a> cluster_p99_ms=<b> cairn_cpu_us_per_msg=<c> cluster_cpu_us_per_msg=<d> disk_bound=no
//! ```
//!
//! (the cluster's CPU is its three processes'.)
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // child processes, /proc, files, sockets

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct SbsArgs {
    /// Apache Iggy's server binary.
    #[arg(long, env = "IGGY_SERVER")]
    iggy_server: PathBuf,
    /// iggy-bench, built from the same sources.
    #[arg(long, env = "IGGY_BENCH")]
    iggy_bench: PathBuf,
    /// The server's `config.toml` from the same sources.
    #[arg(long, env = "IGGY_CONFIG")]
    iggy_config: PathBuf,
    /// cairn's binary (default: `cairn` beside this program).
    #[arg(long)]
    cairn: Option<PathBuf>,
    /// Runs of each server per workload (the figure is their median).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Only these workloads (e.g. `W2,W5d`); all by default.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Where each run's data directory is made: the file system the disk probe measures.
    #[arg(long, default_value = "target/sbs")]
    dir: PathBuf,
    /// Keep each run's server and iggy-bench output in this directory.
    #[arg(long)]
    logs: Option<PathBuf>,
    /// Profile each measured run's server processes with `perf record` (999 Hz, kernel and
    /// user stacks) into `<dir>/<workload>-<server>-<run>.perf.data`, for `perf report -i`.
    /// The figures of a profiled run carry perf's overhead: measure without it.
    #[arg(long)]
    perf: Option<PathBuf>,
}

const TCP: &str = "127.0.0.1:8090";
const HTTP: &str = "127.0.0.1:3000";
const USER: &str = "iggy";
const PASSWORD: &str = "iggy";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Server {
    Iggy,
    Cairn,
    /// Three `cairn serve` members of one cluster ([`MEMBERS`]); iggy-bench drives the first.
    Cluster,
}

impl Server {
    /// The name of its figures on a workload's line.
    fn label(self) -> &'static str {
        match self {
            Server::Iggy => "iggy",
            Server::Cairn => "cairn",
            Server::Cluster => "cluster",
        }
    }
}

/// A cluster's members on this host: (tcp, http, replication) addresses. The first's are
/// [`TCP`] and [`HTTP`], where iggy-bench and the topic's creation go.
const MEMBERS: [(&str, &str, &str); 3] = [
    (TCP, HTTP, "127.0.0.1:8091"),
    ("127.0.0.1:8190", "127.0.0.1:3100", "127.0.0.1:8191"),
    ("127.0.0.1:8290", "127.0.0.1:3200", "127.0.0.1:8291"),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    MbS,
    MsgS,
}

/// What a workload must reach against Iggy to pass.
#[derive(Clone, Copy)]
enum Goal {
    /// cairn's throughput at least this many times Iggy's.
    Ratio(f64),
    /// The ratio, and cairn's p99 at most this many ms.
    RatioAndP99(f64, f64),
    /// cairn's p99 at most this many ms and at most half of Iggy's.
    P99HalfOfIggy(f64),
    /// Reported, no goal.
    Report,
}

/// A topic made before the measured run (iggy-bench then runs with `--reuse-streams`).
#[derive(Clone, Copy)]
struct Durable {
    partitions: u32,
    /// Made durable on Iggy too (else Iggy runs the workload as iggy-bench makes it).
    on_iggy: bool,
}

struct Workload {
    id: &'static str,
    /// iggy-bench's arguments (global flags, then the kind and its flags), by whitespace.
    args: &'static str,
    /// Run first on the same server, not measured (the data a consumer workload reads).
    fill: Option<&'static str>,
    durable: Option<Durable>,
    /// Iggy's figures are another workload's (the same iggy-bench run on Iggy).
    iggy_as: Option<&'static str>,
    unit: Unit,
    goal: Goal,
    /// The baseline and the measured server: Iggy and cairn but for `C3`.
    sides: (Server, Server),
    /// Messages the measured run moves (for CPU per message).
    messages: u64,
    disk_bound: bool,
}

/// The workloads of issue 25, each under the dirty-page threshold unless `disk_bound`.
fn workloads() -> Vec<Workload> {
    const W1: &str = "-m 1000 -P 1000 -b 250 pinned-producer --producers 8 --streams 8";
    const W3: &str = "-P 1 -b 5000 balanced-producer --producers 64 --streams 1 --partitions 2";
    let w = |id, args, unit, goal, messages| Workload {
        id,
        args,
        fill: None,
        durable: None,
        iggy_as: None,
        unit,
        goal,
        sides: (Server::Iggy, Server::Cairn),
        messages,
        disk_bound: false,
    };
    let durable = |partitions, on_iggy| {
        Some(Durable {
            partitions,
            on_iggy,
        })
    };
    vec![
        w("W1", W1, Unit::MbS, Goal::Ratio(2.0), 8 * 250 * 1000),
        w(
            "W2",
            "-P 1 -b 20000 pinned-producer --producers 8",
            Unit::MsgS,
            Goal::RatioAndP99(2.0, 0.5),
            8 * 20_000,
        ),
        w("W3", W3, Unit::MsgS, Goal::Ratio(2.0), 64 * 5000),
        Workload {
            durable: durable(2, false),
            iggy_as: Some("W3"),
            ..w("W4", "--reuse-streams -P 1 -b 5000 balanced-producer --producers 64 --streams 1 --partitions 2", Unit::MsgS, Goal::Ratio(2.0), 64 * 5000)
        },
        // Iggy made durable acknowledges ~2k msg/s: fewer messages, the same shape.
        Workload {
            durable: durable(2, true),
            ..w(
                "W4d",
                "--reuse-streams -P 1 -b 500 balanced-producer --producers 64 --streams 1 --partitions 2",
                Unit::MsgS,
                Goal::Ratio(20.0),
                64 * 500,
            )
        },
        Workload {
            durable: durable(1, true),
            ..w(
                "W5d",
                "--reuse-streams -P 1 -b 5000 pinned-producer --producers 1 --streams 1",
                Unit::MsgS,
                Goal::P99HalfOfIggy(1.0),
                5000,
            )
        },
        Workload {
            fill: Some(W1),
            ..w(
                "W6",
                "--reuse-streams -m 1000 -P 1000 -b 250 pinned-consumer --consumers 8 --streams 8",
                Unit::MbS,
                Goal::Ratio(2.0),
                8 * 250 * 1000,
            )
        },
        Workload {
            fill: Some("-m 1000 -P 1000 -b 250 balanced-producer --producers 8 --streams 1 --partitions 8"),
            ..w(
                "W7",
                "--reuse-streams -m 1000 -P 1000 -b 250 balanced-consumer-group --consumers 8 --streams 1 --consumer-groups 1",
                Unit::MbS,
                Goal::Ratio(2.0),
                8 * 250 * 1000,
            )
        },
        w(
            "W8",
            "-m 1000 -P 100 -b 1000 end-to-end-producing-consumer --producing-consumers 8 --streams 8",
            Unit::MbS,
            Goal::Report,
            2 * 8 * 1000 * 100,
        ),
        // W4's shape, fewer messages: a cluster syncs each send on a quorum of three.
        Workload {
            durable: durable(2, true),
            sides: (Server::Cairn, Server::Cluster),
            ..w(
                "C3",
                "--reuse-streams -P 1 -b 1000 balanced-producer --producers 64 --streams 1 --partitions 2",
                Unit::MsgS,
                Goal::Report,
                64 * 1000,
            )
        },
    ]
}

/// One measured run: what iggy-bench reported and what the server spent.
#[derive(Clone, Copy, Debug)]
struct Run {
    mb_s: f64,
    msg_s: f64,
    p99_ms: f64,
    cpu_us_per_msg: f64,
}

pub fn sbs(args: SbsArgs) -> ExitCode {
    match run_all(&args) {
        Ok(passed) if passed => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("sbs: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_all(args: &SbsArgs) -> Result<bool, String> {
    let cairn = match &args.cairn {
        Some(path) => path.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("where is this program: {e}"))?
            .with_file_name("cairn"),
    };
    for (what, path) in [
        ("IGGY_SERVER", &args.iggy_server),
        ("IGGY_BENCH", &args.iggy_bench),
        ("IGGY_CONFIG", &args.iggy_config),
        ("cairn", &cairn),
    ] {
        if !path.is_file() {
            return Err(format!("{what}: no file at {}", path.display()));
        }
    }
    std::fs::create_dir_all(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
    if let Some(logs) = &args.logs {
        std::fs::create_dir_all(logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    }
    println!("{}", disk_probe(&args.dir)?);
    let all = workloads();
    let chosen: Vec<&Workload> = all
        .iter()
        .filter(|w| args.only.is_empty() || args.only.iter().any(|o| o == w.id))
        .collect();
    let mut iggy_figures: Vec<(&str, Run)> = Vec::new();
    let mut all_passed = true;
    for workload in chosen {
        let iggy_reused = workload
            .iggy_as
            .and_then(|id| iggy_figures.iter().find(|(w, _)| *w == id).map(|(_, r)| *r));
        let mut iggy = Vec::new();
        let mut ours = Vec::new();
        let (baseline, measured) = workload.sides;
        for run in 0..args.runs {
            if iggy_reused.is_none() {
                iggy.push(measure(args, &cairn, workload, baseline, run)?);
            }
            ours.push(measure(args, &cairn, workload, measured, run)?);
        }
        let iggy = match iggy_reused {
            Some(figure) => figure,
            None => median_run(&iggy),
        };
        iggy_figures.push((workload.id, iggy));
        let cairn_figure = median_run(&ours);
        let passed = report(workload, &iggy, &cairn_figure);
        all_passed &= passed;
    }
    Ok(all_passed)
}

/// Prints the workload's line; whether it met its goal.
fn report(workload: &Workload, iggy: &Run, cairn: &Run) -> bool {
    let (x, y, unit) = match workload.unit {
        Unit::MbS => (iggy.mb_s, cairn.mb_s, "MB/s"),
        Unit::MsgS => (iggy.msg_s, cairn.msg_s, "msg/s"),
    };
    let ratio = if x > 0.0 { y / x } else { f64::INFINITY };
    let (goal, pass) = match workload.goal {
        Goal::Ratio(g) => (format!("{g:.2}"), Some(ratio >= g)),
        Goal::RatioAndP99(g, p99) => (
            format!("{g:.2},p99<={p99}ms"),
            Some(ratio >= g && cairn.p99_ms <= p99),
        ),
        Goal::P99HalfOfIggy(p99) => (
            format!("p99<={p99}ms,p99<=0.5xiggy"),
            Some(cairn.p99_ms <= p99 && cairn.p99_ms <= 0.5 * iggy.p99_ms),
        ),
        Goal::Report => ("report".to_string(), None),
    };
    let yes = |b: bool| if b { "yes" } else { "no" };
    let (a, b) = (workload.sides.0.label(), workload.sides.1.label());
    println!(
        "sbs {} client=iggy-bench {a}={x:.1} {b}={y:.1} unit={unit} ratio={ratio:.2} goal={goal} pass={} {a}_p99_ms={:.2} {b}_p99_ms={:.2} {a}_cpu_us_per_msg={:.2} {b}_cpu_us_per_msg={:.2} disk_bound={}",
        workload.id,
        pass.map_or("n/a", yes),
        iggy.p99_ms,
        cairn.p99_ms,
        iggy.cpu_us_per_msg,
        cairn.cpu_us_per_msg,
        yes(workload.disk_bound),
    );
    pass.unwrap_or(true)
}

/// Each figure's median over the runs, separately.
fn median_run(runs: &[Run]) -> Run {
    assert!(!runs.is_empty());
    let median = |f: fn(&Run) -> f64| {
        let mut values: Vec<f64> = runs.iter().map(f).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    Run {
        mb_s: median(|r| r.mb_s),
        msg_s: median(|r| r.msg_s),
        p99_ms: median(|r| r.p99_ms),
        cpu_us_per_msg: median(|r| r.cpu_us_per_msg),
    }
}

/// One run of `workload` against a fresh `server`.
fn measure(
    args: &SbsArgs,
    cairn: &Path,
    workload: &Workload,
    server: Server,
    run: usize,
) -> Result<Run, String> {
    let name = format!("{}-{:?}-{run}", workload.id, server).to_lowercase();
    let dir = args.dir.join(&name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let log = |suffix: &str| -> Result<Stdio, String> {
        match &args.logs {
            Some(logs) => {
                let path = logs.join(format!("{name}.{suffix}"));
                std::fs::File::create(&path)
                    .map(Stdio::from)
                    .map_err(|e| format!("{}: {e}", path.display()))
            }
            None => Ok(Stdio::null()),
        }
    };
    let mut processes = start(args, cairn, server, &dir.join("data"), &log)?;
    let result = (|| -> Result<Run, String> {
        if let Some(durable) = workload.durable {
            if server != Server::Iggy || durable.on_iggy {
                create_durable_topic(server, durable.partitions)?;
            }
        }
        if let Some(fill) = workload.fill {
            bench(args, fill, log("fill.log")?)?;
        }
        let ticks = |processes: &[Child]| -> Result<u64, String> {
            processes.iter().map(|p| cpu_ticks(p.id())).sum()
        };
        let profiler = match &args.perf {
            Some(perf) => Some(start_perf(perf, &name, &processes)?),
            None => None,
        };
        let before = ticks(&processes);
        let out = bench(args, workload.args, log("bench.log")?);
        let after = ticks(&processes);
        if let Some(profiler) = profiler {
            stop_perf(profiler)?;
        }
        let (before, out, after) = (before?, out?, after?);
        let (mb_s, msg_s, p99_ms) = parse_results(&out)
            .ok_or_else(|| format!("{name}: no results line in iggy-bench's output:\n{out}"))?;
        // /proc counts in USER_HZ ticks, 100 a second on Linux.
        let cpu_us = (after - before) as f64 * 10_000.0;
        Ok(Run {
            mb_s,
            msg_s,
            p99_ms,
            cpu_us_per_msg: cpu_us / workload.messages as f64,
        })
    })();
    for process in &mut processes {
        let _ = process.kill();
        let _ = process.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    let run = result?;
    eprintln!(
        "  {name}: {:.1} MB/s {:.0} msg/s p99 {:.2} ms cpu {:.2} us/msg",
        run.mb_s, run.msg_s, run.p99_ms, run.cpu_us_per_msg
    );
    Ok(run)
}

/// Starts `perf record` on `processes`, writing `<dir>/<name>.perf.data`; returns once perf
/// has had time to attach.
fn start_perf(dir: &Path, name: &str, processes: &[Child]) -> Result<Child, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let pids: Vec<String> = processes.iter().map(|p| p.id().to_string()).collect();
    let out = dir.join(format!("{name}.perf.data"));
    let log = dir.join(format!("{name}.perf.log"));
    let log = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut perf = Command::new("perf")
        .args(["record", "-F", "999", "-g", "-p", &pids.join(","), "-o"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("perf record (is perf installed?): {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    if let Ok(Some(status)) = perf.try_wait() {
        return Err(format!(
            "perf record exited at once ({status}): see {}.perf.log in {}",
            name,
            dir.display()
        ));
    }
    Ok(perf)
}

/// Stops `perf record` the way it finishes its file: an interrupt, then a wait.
fn stop_perf(mut perf: Child) -> Result<(), String> {
    let status = Command::new("kill")
        .args(["-INT", &perf.id().to_string()])
        .status()
        .map_err(|e| format!("kill -INT perf: {e}"))?;
    if !status.success() {
        return Err(format!("kill -INT perf: {status}"));
    }
    let status = perf.wait().map_err(|e| format!("waiting for perf: {e}"))?;
    // perf finishes its file, then ends by the interrupt it was sent.
    use std::os::unix::process::ExitStatusExt;
    let interrupted = status.signal() == Some(2) || status.code() == Some(130);
    if !status.success() && !interrupted {
        return Err(format!("perf record ended with {status}"));
    }
    Ok(())
}

/// Starts `server` on a fresh `data` directory (its processes: one, or a cluster's
/// three) and waits for its TCP and HTTP ports; `log` names each one's output.
fn start(
    args: &SbsArgs,
    cairn: &Path,
    server: Server,
    data: &Path,
    log: &dyn Fn(&str) -> Result<Stdio, String>,
) -> Result<Vec<Child>, String> {
    wait_for(
        || MEMBERS.iter().all(|m| TcpStream::connect(m.0).is_err()),
        "the previous server's ports to close",
    )?;
    let commands = match server {
        Server::Iggy => {
            let mut c = Command::new(&args.iggy_server);
            c.env("IGGY_CONFIG_PATH", &args.iggy_config)
                .env("IGGY_SYSTEM_PATH", data)
                .env("IGGY_QUIC_ENABLED", "false")
                .env("IGGY_WEBSOCKET_ENABLED", "false")
                .env("IGGY_HTTP_ADDRESS", HTTP)
                .env("IGGY_TCP_ADDRESS", TCP)
                .env("IGGY_ROOT_USERNAME", USER)
                .env("IGGY_ROOT_PASSWORD", PASSWORD);
            vec![c]
        }
        Server::Cairn => {
            let mut c = Command::new(cairn);
            c.arg("serve")
                .env("CAIRN_DATA_DIR", data)
                .env("CAIRN_TCP_ADDRESS", TCP)
                .env("CAIRN_HTTP_ADDRESS", HTTP)
                .env("CAIRN_ROOT_PASSWORD", PASSWORD)
                .env("CAIRN_LOG_LEVEL", "warn");
            vec![c]
        }
        Server::Cluster => (1..=MEMBERS.len())
            .map(|node| -> Result<Command, String> {
                let config = data.with_file_name(format!("member{node}.toml"));
                std::fs::write(&config, member_config(data, node))
                    .map_err(|e| format!("{}: {e}", config.display()))?;
                let mut c = Command::new(cairn);
                c.arg("serve")
                    .arg("--config")
                    .arg(&config)
                    .env("CAIRN_ROOT_PASSWORD", PASSWORD)
                    .env("CAIRN_LOG_LEVEL", "warn");
                Ok(c)
            })
            .collect::<Result<_, _>>()?,
    };
    let mut children = Vec::new();
    let mut spawned = Ok(());
    for (i, mut command) in commands.into_iter().enumerate() {
        let name = match server {
            Server::Cluster => format!("server-m{}.log", i + 1),
            _ => "server.log".to_string(),
        };
        let child = log(&name).and_then(|log| {
            command
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("cannot start {server:?}: {e}"))
        });
        match child {
            Ok(child) => children.push(child),
            Err(e) => {
                spawned = Err(e);
                break;
            }
        }
    }
    let members = match server {
        Server::Cluster => &MEMBERS[..],
        _ => &MEMBERS[..1],
    };
    let ready = spawned
        .and_then(|()| {
            wait_for(
                || {
                    members
                        .iter()
                        .all(|m| TcpStream::connect(m.0).is_ok() && TcpStream::connect(m.1).is_ok())
                },
                "the server's ports",
            )
        })
        // A cluster serves once it decided its root user (its first op): a login works.
        .and_then(|()| match server {
            Server::Cluster => wait_for(|| login().is_ok(), "the cluster's first login"),
            _ => Ok(()),
        });
    if let Err(e) = ready {
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        return Err(format!("{server:?}: {e}"));
    }
    Ok(children)
}

/// Member `node`'s configuration of the cluster on [`MEMBERS`], its data under `data`.
fn member_config(data: &Path, node: usize) -> String {
    let (tcp, http, _) = MEMBERS[node - 1];
    let mut config = format!(
        "data_dir = {:?}\n[tcp]\naddress = {tcp:?}\n[http]\naddress = {http:?}\n[cluster]\nenabled = true\nname = \"sbs\"\nnode = {node}\nsecret = \"sbs-cluster-secret-of-this-host\"\n",
        data.join(format!("m{node}")).display().to_string()
    );
    for (id, (tcp, _, replication)) in MEMBERS.iter().enumerate() {
        config.push_str(&format!(
            "[[cluster.members]]\nid = {}\nreplication = {replication:?}\nclient = {tcp:?}\n",
            id + 1
        ));
    }
    config
}

fn wait_for(mut done: impl FnMut() -> bool, what: &str) -> Result<(), String> {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!("gave up waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Runs iggy-bench with `workload` against the server on [`TCP`]: its whole output.
fn bench(args: &SbsArgs, workload: &str, log: Stdio) -> Result<String, String> {
    let mut command = Command::new(&args.iggy_bench);
    command.args(["-u", USER, "-p", PASSWORD]);
    command.args(workload.split_whitespace());
    command.args(["tcp", "--server-address", TCP]);
    let out = command
        .stderr(log)
        .output()
        .map_err(|e| format!("cannot run iggy-bench: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "iggy-bench {workload} failed ({}):\n{}",
            out.status,
            tail(&text, 40)
        ));
    }
    Ok(text)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// MB/s, msg/s and p99 (ms) of iggy-bench's summary line (`… Results: Total throughput: X
/// MB/s, Y messages/s, … p99 latency: Z ms, …`): the first such line, the producers' in a
/// workload that has both.
fn parse_results(out: &str) -> Option<(f64, f64, f64)> {
    let line = out
        .lines()
        .find(|l| l.contains("Results: Total throughput:"))?;
    let number_before = |suffix: &str| -> Option<f64> {
        let end = line.find(suffix)?;
        let start = line[..end].trim_end().rfind(' ')? + 1;
        line[start..end].trim().parse().ok()
    };
    let p99 = {
        let at = line.find("p99 latency: ")? + "p99 latency: ".len();
        let rest = &line[at..];
        rest[..rest.find(' ')?].parse().ok()?
    };
    Some((number_before(" MB/s")?, number_before(" messages/s")?, p99))
}

/// utime + stime of `pid` (every thread), in ticks.
fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let fields: Vec<&str> = stat[stat.rfind(')').ok_or("a stat line")? + 2..]
        .split(' ')
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    Ok(tick(11).ok_or("utime")? + tick(12).ok_or("stime")?)
}

/// Creates `bench-stream-1/topic-1` (the names iggy-bench uses) with `partitions`
/// partitions, durable: `persisted` on cairn; `enforce_fsync` and
/// `messages_required_to_save=1` on Iggy.
fn create_durable_topic(server: Server, partitions: u32) -> Result<(), String> {
    let token = login()?;
    http(
        "POST",
        "/streams",
        Some(&token),
        r#"{"name":"bench-stream-1"}"#,
    )?;
    let options = match server {
        // A cluster's sends are synced by a quorum whatever the topic says.
        Server::Cairn | Server::Cluster => r#"{"durability":"persisted"}"#,
        Server::Iggy => r#"{"enforce_fsync":"true","messages_required_to_save":"1"}"#,
    };
    http(
        "POST",
        "/streams/bench-stream-1/topics",
        Some(&token),
        &format!(
            r#"{{"name":"topic-1","partitions_count":{partitions},"compression_algorithm":"none","message_expiry":0,"max_topic_size":0,"options":{options}}}"#
        ),
    )?;
    Ok(())
}

/// The root user's token, from a login over HTTP.
fn login() -> Result<String, String> {
    let login = http(
        "POST",
        "/users/login",
        None,
        &format!(r#"{{"username":"{USER}","password":"{PASSWORD}"}}"#),
    )?;
    json_string(&login, "token").ok_or(format!("no token in {login}"))
}

/// One HTTP/1.1 request to [`HTTP`]: the response body; an error unless 2xx.
fn http(method: &str, path: &str, token: Option<&str>, body: &str) -> Result<String, String> {
    let address: SocketAddr = HTTP.parse().expect("an address");
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(10))
        .map_err(|e| format!("HTTP {HTTP}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {HTTP}\r\n{auth}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("HTTP {method} {path}: {e}"))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| format!("HTTP {method} {path}: {e}"))?;
    let status: u16 = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(format!("HTTP {method} {path}: no status in {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    if !(200..300).contains(&status) {
        return Err(format!("HTTP {method} {path}: {status} {body}"));
    }
    Ok(body)
}

/// The first `"key":"value"` string value in `json`.
fn json_string(json: &str, key: &str) -> Option<String> {
    let at = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let end = json[at..].find('"')?;
    Some(json[at..at + end].to_string())
}

/// The file system under `dir`: its type, sequential write rate (256 MiB in 1 MiB writes,
/// then `fdatasync`), the latency of a 4 KiB append and `fdatasync` (500 of them), and the
/// kernel's dirty-page threshold.
fn disk_probe(dir: &Path) -> Result<String, String> {
    use std::os::unix::fs::FileExt;
    let path = dir.join("disk-probe");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let chunk = vec![0x5au8; 1 << 20];
    let started = Instant::now();
    for i in 0..256u64 {
        file.write_all_at(&chunk, i << 20)
            .map_err(|e| e.to_string())?;
    }
    file.sync_data().map_err(|e| e.to_string())?;
    let seq_mb_s = 256.0 * 1.048_576 / started.elapsed().as_secs_f64();
    file.set_len(0).map_err(|e| e.to_string())?;
    file.sync_all().map_err(|e| e.to_string())?;
    let page = vec![0xa5u8; 4096];
    let mut syncs = Vec::with_capacity(500);
    for i in 0..500u64 {
        let started = Instant::now();
        file.write_all_at(&page, i * 4096)
            .map_err(|e| e.to_string())?;
        file.sync_data().map_err(|e| e.to_string())?;
        syncs.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    syncs.sort_by(f64::total_cmp);
    let at = |q: f64| syncs[((syncs.len() - 1) as f64 * q).round() as usize];
    Ok(format!(
        "disk fs={} seq_write_mb_s={seq_mb_s:.0} fdatasync_4k_p50_ms={:.2} p99_ms={:.2} dirty_threshold_mib={}",
        fs_type(dir).unwrap_or_else(|| "unknown".into()),
        at(0.5),
        at(0.99),
        dirty_threshold_mib().map_or("unknown".into(), |m| m.to_string()),
    ))
}

/// The type of the file system `dir` is on: the longest mount point in `/proc/mounts` that
/// holds it.
fn fs_type(dir: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let (_, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            dir.starts_with(point)
                .then(|| (point.len(), kind.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, kind)| kind)
}

/// `nr_dirty_threshold` of `/proc/vmstat`, in MiB.
fn dirty_threshold_mib() -> Option<u64> {
    let vmstat = std::fs::read_to_string("/proc/vmstat").ok()?;
    let pages: u64 = vmstat
        .lines()
        .find_map(|l| l.strip_prefix("nr_dirty_threshold "))?
        .trim()
        .parse()
        .ok()?;
    Some((pages * 4096) >> 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iggy_bench_summary_lines_are_read() {
        let out = "noise\nProducers Results: Total throughput: 22.15 MB/s, 22143 messages/s, average throughput per Producer: 2.77 MB/s, p50 latency: 0.23 ms, p90 latency: 0.47 ms, p95 latency: 1.36 ms, p99 latency: 2.55 ms, p999 latency: 4.21 ms\n";
        assert_eq!(parse_results(out), Some((22.15, 22143.0, 2.55)));
        assert_eq!(parse_results("no summary"), None);
    }

    #[test]
    fn a_login_token_is_found() {
        let body = r#"{"user_id":0,"access_token":{"token":"abc.def","expiry":1}}"#;
        assert_eq!(json_string(body, "token").as_deref(), Some("abc.def"));
    }

    #[test]
    fn figures_are_medians_of_their_runs() {
        let run = |x: f64| Run {
            mb_s: x,
            msg_s: 10.0 * x,
            p99_ms: 1.0 / x,
            cpu_us_per_msg: x,
        };
        let m = median_run(&[run(3.0), run(1.0), run(2.0)]);
        assert_eq!((m.mb_s, m.msg_s, m.p99_ms), (2.0, 20.0, 0.5));
    }
}

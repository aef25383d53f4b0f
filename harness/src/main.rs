//! `cairn-harness swarm --seeds <N> | --for <duration>`: runs simulation seeds on every
//! core, shows progress, and ends with the failures (with replay commands), simulated time
//! per wall second, and a coverage table: for each fault kind the seeds where it fired, for
//! each recovery outcome the seeds that reached it. New failing seeds are recorded in
//! `seeds/`. The last line is exactly `swarm seeds=<n> failures=<n> speedup=<x>`.
//!
//! `cairn-harness sbs`: cairn beside Apache Iggy's server, both driven by iggy-bench (see
//! [`sbs`]).
//!
//! `cairn-harness bench <kind>`: a bench client with iggy-bench's workload shapes (see
//! [`bench`]). The last line is exactly
//! `bench <kind> mb_per_s=<x> msg_per_s=<x> p50_ms=<x> p99_ms=<x>`.
#![forbid(unsafe_code)]

mod bench;
mod boot_bench;
mod sbs;

use cairn_engine::partition::recovery::Action;
use cairn_engine::partition::{FenceReason, Outcome};
use cairn_faults::FaultKind;
use cairn_sim::{run_seed, RunReport};
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(name = "cairn-harness", about = "Drive cairn from outside")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run many simulation seeds in parallel and report failures and coverage.
    Swarm(SwarmArgs),
    /// Benchmark a server (one started in this process, or --address) with iggy-bench's
    /// workload shapes; report MB/s, msg/s and latency percentiles.
    Bench(bench::BenchArgs),
    /// The real `cairn` binary under 4096 connections, half of them misbehaving, beside a
    /// well-behaved workload: its p99 against the workload alone, the server's memory.
    Hostile(bench::hostile::HostileArgs),
    /// cairn and Apache Iggy's server side by side, driven by iggy-bench: a disk probe, then
    /// per workload both servers' medians, their ratio and the goal.
    Sbs(sbs::SbsArgs),
    /// How long a node takes to boot on real files: topics of 1,000 partitions after a clean
    /// shutdown and after `kill -9`, and one partition of sealed data against its full
    /// verification (medians; resident memory, open files and device reads beside).
    BootBench(boot_bench::BootBenchArgs),
}

#[derive(clap::Args)]
struct SwarmArgs {
    /// How many seeds to run.
    #[arg(long, conflicts_with = "for_")]
    seeds: Option<u64>,
    /// Run seeds for this long instead (e.g. 90s, 10m, 2h).
    #[arg(long = "for", value_parser = parse_duration)]
    for_: Option<Duration>,
    /// The first seed; seeds are consecutive from here.
    #[arg(long, default_value_t = 10_000_000)]
    start: u64,
    /// Worker threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Activate a deliberate bug (`cairn_sim::canary::NAMES`) on every seed.
    #[arg(long)]
    canary: Option<String>,
    /// Do not write failing seeds into seeds/.
    #[arg(long)]
    no_record: bool,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number
        .parse()
        .map_err(|_| format!("bad duration {text:?}"))?;
    let seconds = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("bad duration unit in {text:?} (use s, m or h)")),
    };
    Ok(Duration::from_secs(seconds))
}

#[derive(Default)]
struct Totals {
    seeds: u64,
    failures: Vec<(u64, String, String)>,
    simulated_nanos: u128,
    fault_seeds: BTreeMap<FaultKind, u64>,
    outcome_seeds: BTreeMap<Outcome, u64>,
    decision_seeds: BTreeMap<&'static str, u64>,
    class_seeds: BTreeMap<String, u64>,
    boot_retry_seeds: u64,
    crash_in_recovery_seeds: u64,
    acked: u64,
    first_failure_at: BTreeMap<String, u64>,
}

fn record(totals: &mut Totals, report: &RunReport, canary: Option<&str>) {
    totals.seeds += 1;
    totals.simulated_nanos += u128::from(report.simulated_nanos);
    totals.acked += report.acked_messages;
    for kind in report.faults_fired.keys() {
        *totals.fault_seeds.entry(*kind).or_default() += 1;
    }
    for outcome in report.outcomes.keys() {
        *totals.outcome_seeds.entry(*outcome).or_default() += 1;
    }
    for decision in report.decisions.keys() {
        *totals.decision_seeds.entry(decision).or_default() += 1;
    }
    let class = match report.profile.scope {
        cairn_sim::profile::Scope::Partitions => format!("{:?}", report.profile.class),
        scope => format!("scope {}", scope.name()),
    };
    *totals.class_seeds.entry(class).or_default() += 1;
    if report.boot_retries > 0 {
        totals.boot_retry_seeds += 1;
    }
    if report.crashes_in_recovery > 0 {
        totals.crash_in_recovery_seeds += 1;
    }
    if let Some(v) = &report.violation {
        totals
            .first_failure_at
            .entry(v.invariant.to_string())
            .or_insert(totals.seeds);
        totals.failures.push((
            report.profile.seed,
            v.to_string(),
            report.replay_command(canary),
        ));
    }
}

fn swarm(args: SwarmArgs) -> ExitCode {
    if !cairn_sim::canary::activate(args.canary.as_deref()) {
        eprintln!(
            "unknown canary {:?}; known: {:?}",
            args.canary,
            cairn_sim::canary::NAMES
        );
        return ExitCode::from(2);
    }
    let limit = match (args.seeds, args.for_) {
        (Some(n), _) => n,
        (None, Some(_)) => u64::MAX,
        (None, None) => 1000,
    };
    let deadline = args.for_.map(|d| Instant::now() + d);
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let canary = args.canary.clone();
    println!(
        "swarm: {} from seed {:#x} on {threads} threads{}",
        args.seeds.map_or_else(
            || format!("for {:?}", args.for_.unwrap_or_default()),
            |n| format!("{n} seeds")
        ),
        args.start,
        canary
            .as_deref()
            .map(|c| format!(", canary {c}"))
            .unwrap_or_default()
    );
    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let totals = Arc::new(Mutex::new(Totals::default()));
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (next, stop, totals, canary) =
                (next.clone(), stop.clone(), totals.clone(), canary.clone());
            let start = args.start;
            std::thread::spawn(move || loop {
                // A canary is active per thread: every worker activates the one asked for.
                cairn_sim::canary::activate(canary.as_deref());
                if stop.load(Ordering::SeqCst) || deadline.is_some_and(|d| Instant::now() >= d) {
                    return;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= limit {
                    return;
                }
                let report = run_seed(start.wrapping_add(i), false);
                record(
                    &mut totals.lock().expect("totals"),
                    &report,
                    canary.as_deref(),
                );
            })
        })
        .collect();
    let mut last_print = Instant::now();
    while workers.iter().any(|w| !w.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
        if last_print.elapsed() >= Duration::from_secs(2) {
            let t = totals.lock().expect("totals");
            println!(
                "progress: {} seeds, {} failures, {:.0} s",
                t.seeds,
                t.failures.len(),
                started.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
    }
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.join().expect("worker");
    }
    let wall = started.elapsed().as_secs_f64();
    let t = totals.lock().expect("totals");
    let simulated = t.simulated_nanos as f64 / 1e9;
    let speedup = simulated / wall.max(1e-9);

    println!();
    println!(
        "seeds run: {} in {wall:.1} s ({:.0} seeds/minute), acknowledged messages: {}",
        t.seeds,
        t.seeds as f64 / wall * 60.0,
        t.acked
    );
    println!("simulated time: {simulated:.0} s, {speedup:.0} simulated seconds per wall second");
    println!("\ncoverage: fault kind -> seeds where it fired");
    for kind in FaultKind::ALL {
        println!(
            "  {:<18} {}",
            format!("{kind:?}"),
            t.fault_seeds.get(&kind).copied().unwrap_or(0)
        );
    }
    println!("  {:<18} {}", "CrashInRecovery", t.crash_in_recovery_seeds);
    println!("coverage: recovery outcome -> seeds that reached it");
    for outcome in Outcome::ALL {
        println!(
            "  {:<18} {}",
            format!("{outcome:?}"),
            t.outcome_seeds.get(&outcome).copied().unwrap_or(0)
        );
    }
    println!("  {:<18} {}", "BootRetried", t.boot_retry_seeds);
    println!("coverage: recovery decision (fence reason or action) -> seeds that reached it");
    for decision in FenceReason::NAMES.iter().chain(Action::NAMES.iter()) {
        println!(
            "  {:<22} {}",
            decision,
            t.decision_seeds.get(decision).copied().unwrap_or(0)
        );
    }
    let scopes: [(&str, &[(&str, &str)]); 3] = [
        (
            "node scope (metadata plane, retention, groups)",
            &cairn_sim::node_world::NODE_COVERAGE,
        ),
        (
            "server scope (protocol clients over a faulty network)",
            &cairn_sim::server_world::SERVER_COVERAGE,
        ),
        (
            "cluster scope (the metadata group's replicas)",
            &cairn_sim::cluster_world::CLUSTER_COVERAGE,
        ),
    ];
    for (scope, rows) in scopes {
        println!("coverage: {scope} -> seeds that reached it");
        for (decision, what) in rows {
            println!(
                "  {:<22} {:<6} {what}",
                decision,
                t.decision_seeds.get(decision).copied().unwrap_or(0)
            );
        }
    }
    println!("coverage: metadata boot refusal -> seeds that reached it");
    for refusal in cairn_engine::metadata::MetaRefusal::COVERAGE_NAMES {
        println!(
            "  {:<31} {}",
            refusal,
            t.decision_seeds.get(refusal).copied().unwrap_or(0)
        );
    }
    println!("profile classes -> seeds");
    for (class, n) in &t.class_seeds {
        println!("  {class:<18} {n}");
    }
    if !t.failures.is_empty() {
        println!("\nfailures:");
        for (seed, violation, replay) in &t.failures {
            println!("seed {seed:#x}: {violation}\n  replay: {replay}");
        }
        for (invariant, at) in &t.first_failure_at {
            println!("first failure of {invariant} after {at} seeds");
        }
        if canary.is_none() && !args.no_record {
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../seeds");
            for (seed, violation, _) in &t.failures {
                let path = dir.join(format!("{seed:#x}.seed"));
                if !path.exists() {
                    let first_line = violation.lines().next().unwrap_or_default().to_string();
                    let evidence = violation
                        .lines()
                        .nth(1)
                        .unwrap_or_default()
                        .trim()
                        .to_string();
                    let text = format!(
                        "seed {seed:#x}\nfound: {first_line}; {evidence} (recorded by the swarm)\n"
                    );
                    match std::fs::write(&path, text) {
                        Ok(()) => println!("recorded {}", path.display()),
                        Err(e) => println!("could not record {}: {e}", path.display()),
                    }
                }
            }
        }
    }
    println!(
        "swarm seeds={} failures={} speedup={speedup:.0}",
        t.seeds,
        t.failures.len()
    );
    if t.failures.is_empty() || canary.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Swarm(args) => swarm(args),
        Command::Bench(args) => bench::bench(args),
        Command::Hostile(args) => bench::hostile::hostile(args),
        Command::Sbs(args) => sbs::sbs(args),
        Command::BootBench(args) => boot_bench::boot_bench(args),
    }
}

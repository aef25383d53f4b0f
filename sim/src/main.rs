//! `cairn-sim --seed <N> [--verbose] [--canary <name>] [--scope <scope>] [--timeline <file>]`:
//! runs one seed and prints its profile, a summary and `trace_hash <hex>`; `--verbose` prints
//! the event trace; `--timeline out.svg` (or `.html`) draws the run. On failure it prints the
//! violated invariant, the evidence and the command that replays it, and exits 1.
#![forbid(unsafe_code)]
// The command line writes the picture it was asked for to the real file system.
#![allow(clippy::disallowed_methods)]

use cairn_sim::profile::Scope;
use cairn_sim::{run_seed_with, RunOptions};
use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "cairn-sim",
    about = "Run one seed of cairn's deterministic simulation"
)]
struct Cli {
    /// The seed (decimal, or hex with 0x).
    #[arg(long, value_parser = parse_seed)]
    seed: u64,
    /// Print the event trace (operations, acks, faults, crashes, recovery decisions).
    #[arg(long)]
    verbose: bool,
    /// Activate a deliberate bug (`cairn_sim::canary::NAMES`) on the seed's run.
    #[arg(long)]
    canary: Option<String>,
    /// Run the seed in this scope (partitions, node, server) instead of the one it draws.
    #[arg(long, value_parser = parse_scope)]
    scope: Option<Scope>,
    /// Draw the run on a time axis into this file: `.svg`, or `.html` (the SVG with a zoom).
    #[arg(long, value_name = "FILE")]
    timeline: Option<std::path::PathBuf>,
}

fn parse_scope(text: &str) -> Result<Scope, String> {
    Scope::parse(text).ok_or_else(|| format!("unknown scope {text:?}: partitions, node or server"))
}

fn parse_seed(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|e| format!("not a seed: {e}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The engine's and the server's own logs, for debugging a seed: `CAIRN_SIM_LOG=debug`.
    if let Ok(filter) = std::env::var("CAIRN_SIM_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .without_time()
            .init();
    }
    if !cairn_sim::canary::activate(cli.canary.as_deref()) {
        eprintln!(
            "unknown canary {:?}; known: {:?}",
            cli.canary,
            cairn_sim::canary::NAMES
        );
        return ExitCode::from(2);
    }
    let html = match &cli.timeline {
        None => false,
        Some(path) => match path.extension().and_then(|e| e.to_str()) {
            Some("svg") => false,
            Some("html") => true,
            _ => {
                eprintln!(
                    "--timeline {}: the file must end in .svg or .html",
                    path.display()
                );
                return ExitCode::from(2);
            }
        },
    };
    let options = RunOptions {
        verbose: cli.verbose,
        timeline: cli.timeline.is_some(),
        scope: cli.scope,
    };
    let report = run_seed_with(cli.seed, options);
    if let Some(path) = &cli.timeline {
        let Some(timeline) = &report.timeline else {
            eprintln!(
                "this seed's scope records no timeline yet (the server and cluster scopes do)"
            );
            return ExitCode::from(2);
        };
        let picture = if html {
            cairn_sim::timeline::render_html(timeline)
        } else {
            cairn_sim::timeline::render_svg(timeline)
        };
        if let Err(e) = std::fs::write(path, picture) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
        println!("timeline written to {}", path.display());
    }
    if !cli.verbose {
        print!("{}", cairn_sim::run::describe(&report.profile));
    }
    println!(
        "summary: operations={} restarts={} acked_messages={} simulated_seconds={:.1}",
        report.operations,
        report.restarts,
        report.acked_messages,
        report.simulated_nanos as f64 / 1e9
    );
    let faults: Vec<String> = report
        .faults_fired
        .iter()
        .map(|(k, n)| format!("{k:?}={n}"))
        .collect();
    println!(
        "faults fired: {}",
        if faults.is_empty() {
            "none".into()
        } else {
            faults.join(" ")
        }
    );
    let outcomes: Vec<String> = report
        .outcomes
        .iter()
        .map(|(k, n)| format!("{k:?}={n}"))
        .collect();
    println!("recovery outcomes: {}", outcomes.join(" "));
    let decisions: Vec<String> = report
        .decisions
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    println!("recovery decisions: {}", decisions.join(" "));
    println!("trace_hash {:016x}", report.trace_hash);
    match &report.violation {
        None => ExitCode::SUCCESS,
        Some(v) => {
            println!("FAILED {v}");
            println!("replay: {}", report.replay_command(cli.canary.as_deref()));
            ExitCode::from(1)
        }
    }
}

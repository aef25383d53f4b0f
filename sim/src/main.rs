//! `cairn-sim --seed <N> [--verbose] [--canary <name>]`: runs one seed and prints its profile,
//! a summary and `trace_hash <hex>`; `--verbose` prints the event trace. On failure it prints
//! the violated invariant, the evidence and the command that replays it, and exits 1.

use cairn_sim::run_seed;
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
    /// Activate a deliberate engine bug (needs `--features canary`).
    #[arg(long)]
    canary: Option<String>,
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
    if let Some(name) = &cli.canary {
        #[cfg(feature = "canary")]
        if !cairn_engine::canary::activate(Some(name)) {
            eprintln!(
                "unknown canary {name:?}; known: {:?}",
                cairn_engine::canary::NAMES
            );
            return ExitCode::from(2);
        }
        #[cfg(not(feature = "canary"))]
        {
            eprintln!("--canary {name} needs a build with --features canary");
            return ExitCode::from(2);
        }
    }
    let report = run_seed(cli.seed, cli.verbose);
    if !cli.verbose {
        print!("{}", report.profile);
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

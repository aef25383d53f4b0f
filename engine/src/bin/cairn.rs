//! The `cairn` command line.

use cairn_engine::config::Durability;
use cairn_engine::env::Disk;
use cairn_engine::partition::recovery::{self, RecoveryPlan};
use cairn_engine::partition::PartitionIdentity;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Large batch buffers are freed after every flush; mimalloc reuses them instead of
/// returning them to the OS each time (glibc unmaps allocations this large on free).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "cairn",
    version,
    about = "cairn: a durable message-streaming log server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Report, for every partition under a data directory, what boot recovery would do and
    /// why. Changes no bytes. Exits 0 when every partition is clean, 1 when any would be
    /// repaired or fenced, 2 when the directory cannot be read.
    Check {
        /// The data directory (the one holding `streams/`).
        data_dir: PathBuf,
        /// The topics' consumer offset policy, which decides what happens to a damaged
        /// offset file (dropped under `replicated`, reported under `persisted`). Until the
        /// metadata plane records topic options, check cannot read it from the directory.
        #[arg(long, default_value = "replicated")]
        consumer_offset_durability: Durability,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            data_dir,
            consumer_offset_durability,
        } => check(&data_dir, consumer_offset_durability),
    }
}

/// Partition directories `streams/{s}/topics/{t}/partitions/{p}` with their partition ids.
fn partition_dirs(disk: &dyn Disk, root: &Path) -> std::io::Result<Vec<(PathBuf, u64)>> {
    let mut found = Vec::new();
    let streams = root.join("streams");
    if !disk.exists(&streams)? {
        return Ok(found);
    }
    for stream in disk.read_dir(&streams)?.into_iter().filter(|e| e.is_dir) {
        let topics = streams.join(&stream.name).join("topics");
        if !disk.exists(&topics)? {
            continue;
        }
        for topic in disk.read_dir(&topics)?.into_iter().filter(|e| e.is_dir) {
            let partitions = topics.join(&topic.name).join("partitions");
            if !disk.exists(&partitions)? {
                continue;
            }
            for partition in disk.read_dir(&partitions)?.into_iter().filter(|e| e.is_dir) {
                if let Ok(id) = partition.name.parse::<u64>() {
                    found.push((partitions.join(&partition.name), id));
                }
            }
        }
    }
    Ok(found)
}

fn check(root: &Path, offset_durability: Durability) -> ExitCode {
    let env = match cairn_engine::env::real::env() {
        Ok(env) => env,
        Err(e) => {
            eprintln!("cairn check: cannot start: {e}");
            return ExitCode::from(2);
        }
    };
    let disk = env.disk.as_ref();
    match disk.exists(root) {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("cairn check: {}: no such data directory", root.display());
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("cairn check: cannot read {}: {e}", root.display());
            return ExitCode::from(2);
        }
    }
    let dirs = match partition_dirs(disk, root) {
        Ok(dirs) => dirs,
        Err(e) => {
            eprintln!("cairn check: cannot read {}: {e}", root.display());
            return ExitCode::from(2);
        }
    };
    if dirs.is_empty() {
        println!("{}: no partitions found", root.display());
    }
    let mut unclean = 0;
    for (dir, id) in dirs {
        match recovery::plan(
            disk,
            &dir,
            PartitionIdentity::bare(id as u32),
            offset_durability,
        ) {
            Err(e) => {
                unclean += 1;
                println!("{}: CANNOT SCAN: {e}", dir.display());
            }
            Ok(plan) => {
                if plan.fence.is_some() || !plan.actions.is_empty() {
                    unclean += 1;
                }
                report(&dir, &plan);
            }
        }
    }
    if unclean > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn report(dir: &Path, plan: &RecoveryPlan) {
    if let Some(reason) = &plan.fence {
        println!("{}: FENCED: {reason}", dir.display());
    } else if plan.actions.is_empty() {
        println!("{}: clean", dir.display());
    } else {
        println!("{}: would repair", dir.display());
    }
    for note in &plan.notes {
        println!("  note: {note}");
    }
    for action in &plan.actions {
        println!("  would {action}");
    }
    for segment in &plan.segments {
        println!(
            "  {}: {} bytes, offsets {}..{}, {} index entries",
            segment.log_path.display(),
            segment.len,
            segment.start_offset,
            segment.next_offset,
            segment.index.len()
        );
    }
    for (consumer, stored) in &plan.offsets {
        println!("  offset {consumer:?}: {stored:?}");
    }
}

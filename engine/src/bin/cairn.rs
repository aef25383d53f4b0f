//! The `cairn` command line.

use cairn_engine::config::PartitionSettings;
use cairn_engine::partition::recovery;
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
    /// why. Reads only; changes nothing. Exits 1 when any partition would be fenced.
    Check {
        /// The data directory (the one holding `streams/`).
        data_dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { data_dir } => check(&data_dir),
    }
}

/// Partition directories: `streams/{s}/topics/{t}/partitions/{p}`.
fn partition_dirs(
    disk: &dyn cairn_engine::env::Disk,
    root: &Path,
) -> std::io::Result<Vec<(PathBuf, u64)>> {
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

fn check(root: &Path) -> ExitCode {
    let env = match cairn_engine::env::real::env() {
        Ok(env) => env,
        Err(e) => {
            eprintln!("cairn check: cannot start: {e}");
            return ExitCode::from(2);
        }
    };
    let disk = env.disk.as_ref();
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
    let settings = PartitionSettings::default();
    let mut fenced = 0;
    for (dir, id) in dirs {
        match recovery::plan(disk, &dir, id, &settings.limits) {
            Err(e) => {
                fenced += 1;
                println!("{}: FENCED: cannot scan: {e}", dir.display());
            }
            Ok(plan) => {
                if let Some(reason) = &plan.fence {
                    fenced += 1;
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
                        segment.valid_end,
                        segment.start_offset,
                        segment.next_offset,
                        segment.index.len()
                    );
                }
            }
        }
    }
    if fenced > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

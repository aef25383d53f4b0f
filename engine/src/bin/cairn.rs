//! The `cairn` command line.

use cairn_engine::env::Disk;
use cairn_engine::metadata;
use cairn_engine::node::{self, state::DirWork};
use cairn_engine::partition::recovery::{self, RecoveryPlan};
use cairn_engine::partition::{partition_dir, PartitionIdentity};
use clap::{Parser, Subcommand};
use std::collections::BTreeSet;
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
    /// Report what boot would do to a data directory, and why, without changing a byte: the
    /// metadata plane (refusal, journal repairs, replayed operations, directory work still
    /// to redo), directories of deleted entities it would remove, and for every partition the
    /// metadata names its recovery plan (a missing directory is fenced). Exits 0 when boot
    /// would change nothing and refuse nothing, 1 when anything would be repaired, removed,
    /// fenced or refused, 2 when the directory cannot be read.
    Check {
        /// The data directory (the one holding `metadata/` and `streams/`).
        data_dir: PathBuf,
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
        Command::Check { data_dir } => check(&data_dir),
    }
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
    match report(disk, root) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("cairn check: cannot read {}: {e}", root.display());
            ExitCode::from(2)
        }
    }
}

/// Prints the report; true when boot would change and refuse nothing.
fn report(disk: &dyn Disk, root: &Path) -> std::io::Result<bool> {
    let meta = metadata::plan(disk, root)?;
    let meta_dir = root.join(metadata::DIR);
    if let Some(refusal) = &meta.refusal {
        println!(
            "{}: BOOT REFUSED ({}): {refusal}",
            meta_dir.display(),
            refusal.name()
        );
        for note in &meta.notes {
            println!("  note: {note}");
        }
        return Ok(false);
    }
    if meta.first_boot {
        println!(
            "{}: no metadata yet: the first boot initialises it",
            root.display()
        );
        return Ok(true);
    }
    let mut clean = meta.actions.is_empty();
    let record = meta
        .record
        .expect("a plan past the first boot has a record");
    println!(
        "{}: {} (snapshot at op {}, {} journal entries after it, last op {})",
        meta_dir.display(),
        if meta.actions.is_empty() {
            "clean"
        } else {
            "would repair"
        },
        record.snapshot.op,
        meta.replayed.len(),
        meta.last_op
    );
    for note in &meta.notes {
        println!("  note: {note}");
    }
    for action in &meta.actions {
        println!("  would {action}");
    }
    let redo = node::work_to_redo(&meta);
    for (op, work) in &redo {
        clean = false;
        println!("  would redo the directory work of op {op}: {work:?}");
    }
    let tree = node::plan_tree(disk, root, &meta.state)?;
    for note in &tree.notes {
        println!("  note: {note}");
    }
    for orphan in &tree.orphans {
        clean = false;
        println!(
            "{}: would remove: the metadata has no such entity",
            orphan.display()
        );
    }
    let pending: BTreeSet<PartitionIdentity> = redo
        .iter()
        .filter_map(|(_, w)| match w {
            DirWork::CreatePartition(id) | DirWork::PurgePartition(id) => Some(*id),
            _ => None,
        })
        .collect();
    for identity in meta.state.partitions() {
        let dir = partition_dir(
            root,
            identity.stream_id,
            identity.topic_id,
            identity.partition_id,
        );
        if pending.contains(&identity) {
            continue; // boot makes it (again) first
        }
        if !disk.exists(&dir)? {
            clean = false;
            println!("{}: FENCED (DirectoryMissing): the metadata has this partition and its directory is missing", dir.display());
            continue;
        }
        let topic = meta.state.topic(identity.stream_id, identity.topic_id);
        let plan = recovery::plan(
            disk,
            &dir,
            identity,
            topic.options.consumer_offset_durability,
        )?;
        clean &= plan.fence.is_none() && plan.actions.is_empty();
        report_partition(&dir, &plan);
    }
    Ok(clean)
}

fn report_partition(dir: &Path, plan: &RecoveryPlan) {
    if let Some(reason) = &plan.fence {
        println!("{}: FENCED ({}): {reason}", dir.display(), reason.name());
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

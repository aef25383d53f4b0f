//! The `cairn` command line.
#![forbid(unsafe_code)]

use cairn_client::cli::{ClientCommand, ConnectArgs};
use cairn_engine::env::Disk;
use cairn_engine::metadata;
use cairn_engine::node::tree::{Fate, Found};
use cairn_engine::node::{self, state::DirWork};
use cairn_engine::partition::recovery::{self, RecoveryPlan};
use cairn_engine::partition::{ConsumerId, StoredOffset};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::collections::BTreeMap;
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
    /// The server the client commands talk to, and who they log in as.
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (Iggy's 0.11 binary protocol over TCP, 127.0.0.1:8090 by default).
    ///
    /// Boots the node on the data directory and serves. Configuration: defaults, then
    /// `cairn.toml` (or `--config`), then `CAIRN_*` environment variables (for example
    /// `CAIRN_DATA_DIR`, `CAIRN_TCP_ADDRESS`, `CAIRN_ROOT_PASSWORD`). SIGINT or SIGTERM shuts
    /// down gracefully (every committed message flushed and synced, exit 0); a second signal
    /// exits at once. Exits 1 when the node stopped on a failure, 2 when it could not start.
    Serve {
        /// The configuration file (default: `cairn.toml` in the working directory, if any).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the effective configuration (defaults, file and environment merged) as TOML
        /// and exit.
        #[arg(long)]
        print_config: bool,
    },
    /// Report what boot would do to a data directory, without changing a byte.
    ///
    /// Covers the metadata plane (refusal, journal repairs, replayed operations, directory work still
    /// to redo), directories of deleted entities it would remove, and for every partition the
    /// metadata names its recovery plan (a missing directory is fenced). Exits 0 when boot
    /// would change nothing and refuse nothing, 1 when anything would be repaired, removed,
    /// fenced or refused, 2 when the directory cannot be read.
    Check {
        /// The data directory (the one holding `metadata/` and `streams/`).
        data_dir: PathBuf,
    },
    #[command(flatten)]
    Client(ClientCommand),
}

/// The client commands' connection flags, which `serve` and `check` do not take.
const CLIENT_FLAGS: [&str; 4] = ["address", "username", "password", "json"];

/// The client flag given on the command line of a command that does not use it, if any:
/// `cairn serve --address X` must not look as if it set the listen address.
fn misplaced_client_flag(matches: &clap::ArgMatches) -> Option<&'static str> {
    let (_, sub) = matches.subcommand()?;
    CLIENT_FLAGS
        .into_iter()
        .find(|flag| sub.value_source(flag) == Some(clap::parser::ValueSource::CommandLine))
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if !matches!(cli.command, Command::Client(_)) {
        if let Some(flag) = misplaced_client_flag(&matches) {
            eprintln!(
                "cairn: --{flag} is a flag of the client commands; `serve` and `check` do not take it (the server's listen address is CAIRN_TCP_ADDRESS or [tcp] address in its configuration)"
            );
            return ExitCode::from(2);
        }
    }
    match cli.command {
        Command::Serve {
            config,
            print_config,
        } => serve(config.as_deref(), print_config),
        Command::Check { data_dir } => {
            quiet_logs();
            check(&data_dir)
        }
        Command::Client(command) => {
            quiet_logs();
            cairn_client::cli::run(cli.connect, command)
        }
    }
}

fn quiet_logs() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
}

fn serve(file: Option<&Path>, print_config: bool) -> ExitCode {
    let config = match cairn_server::config::load(file, std::env::vars()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("cairn: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    if print_config {
        print!("{}", config.to_toml());
        return ExitCode::SUCCESS;
    }
    cairn_server::serve::run(config)
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
    let works: Vec<&DirWork> = redo.iter().map(|(_, w)| *w).collect();
    for (op, work) in &redo {
        println!("  journaled op {op} has directory work boot redoes by identity: {work:?}");
    }
    let tree = node::tree::plan(disk, root, &meta.state, &works)?;
    clean &= tree.is_clean();
    for note in &tree.notes {
        println!("  note: {note}");
    }
    let mut opening = Vec::new();
    for path in &tree.paths {
        match path.fate {
            Fate::Open => opening.push(path),
            Fate::Nothing => {}
            Fate::Create => println!(
                "{}: would create the partition a journaled op made ({})",
                path.dir.display(),
                path.wanted.expect("a created partition is wanted")
            ),
            Fate::Replace => println!(
                "{}: would remove {} (a journaled op replaced it) and create {}",
                path.dir.display(),
                path.found,
                path.wanted.expect("a replacement is wanted")
            ),
            Fate::Remove => println!(
                "{}: would remove {}: a journaled op deleted it",
                path.dir.display(),
                path.found
            ),
            Fate::Unaccounted => println!(
                "{}: KEPT (unaccounted): holds {}, which the metadata does not have and no journaled op deleted; boot never removes it",
                path.dir.display(),
                path.found
            ),
        }
    }
    for dir in &tree.remove_dirs {
        println!("{}: would remove: a journaled op deleted it", dir.display());
    }
    for dir in &tree.kept_dirs {
        println!(
            "{}: KEPT (unaccounted): the metadata does not have this entity and its directory holds what no journaled op deleted",
            dir.display()
        );
    }
    let claimed: BTreeMap<_, _> = tree.claimed.iter().cloned().collect();
    for path in opening {
        let identity = path.wanted.expect("an opened partition is the metadata's");
        let key = path.key;
        if let Some(other) = claimed.get(&key) {
            clean = false;
            println!(
                "{}: FENCED (IdentityDuplicated): {} also holds this partition's identity",
                path.dir.display(),
                other.display()
            );
            continue;
        }
        if path.found == Found::Missing {
            clean = false;
            println!("{}: FENCED (DirectoryMissing): the metadata has this partition and its directory is missing", path.dir.display());
            continue;
        }
        let topic = meta.state.topic(key.0, key.1);
        let plan = recovery::plan(
            disk,
            &path.dir,
            identity,
            topic.options.consumer_offset_durability,
        )?;
        clean &= plan.fence.is_none() && plan.actions.is_empty();
        report_partition(&path.dir, &plan);
        if plan.fence.is_some() {
            continue;
        }
        let stored: Vec<ConsumerId> = plan.offsets.keys().copied().collect();
        for group in node::doomed_group_offsets(&meta.state, &redo, key, &stored) {
            clean = false;
            println!(
                "  would remove the offset of consumer group {group}: the group no longer exists"
            );
        }
        for (consumer, stored) in &plan.offsets {
            if let StoredOffset::Damaged { path, why } = stored {
                clean = false;
                println!(
                    "  DAMAGED offset of {consumer:?} ({}): {why}; a read of it is refused",
                    path.display()
                );
            }
        }
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

//! The `cairn` command line.
#![forbid(unsafe_code)]

use cairn_client::cli::{ClientCommand, ConnectArgs};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
    /// Administer the cluster this node's configuration names: its members' status, and
    /// membership changes decided by consensus.
    ///
    /// Reads the configuration as `serve` does (`--config`, else `cairn.toml`, then
    /// `CAIRN_*`) for the cluster's name, secret and members, and talks to the members on
    /// their replication addresses. Exits 0 on success, 1 when the cluster refused or no
    /// member answered, 2 when the configuration names no cluster.
    Cluster {
        /// The configuration file (default: `cairn.toml` in the working directory, if any).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(subcommand)]
        command: ClusterCommand,
    },
    #[command(flatten)]
    Client(ClientCommand),
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Every configured member's view: its replica, role, the leader it knows, what it
    /// applied (`--json` for a machine).
    Status,
    /// Make `member` a voter: it catches up as a learner first, then replaces any earlier
    /// replica of the same member (one whose data directory was wiped).
    Add {
        /// The member id.
        member: u32,
        /// Its replication address (default: the configuration's).
        #[arg(long)]
        replication: Option<std::net::SocketAddr>,
        /// Its client address (default: the configuration's).
        #[arg(long)]
        client: Option<std::net::SocketAddr>,
    },
    /// Remove `member`'s replicas from the group.
    Remove {
        /// The member id.
        member: u32,
    },
}

/// The client commands' connection flags, which `serve` and `check` do not take.
const CLIENT_FLAGS: [&str; 4] = ["address", "username", "password", "json"];

/// The client flag given on the command line of a command that does not use it, if any:
/// `cairn serve --address X` must not look as if it set the listen address.
fn misplaced_client_flag(matches: &clap::ArgMatches) -> Option<&'static str> {
    let (name, sub) = matches.subcommand()?;
    CLIENT_FLAGS
        .into_iter()
        // `cairn cluster` prints JSON when asked.
        .filter(|flag| !(name == "cluster" && *flag == "json"))
        .find(|flag| sub.value_source(flag) == Some(clap::parser::ValueSource::CommandLine))
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if !matches!(cli.command, Command::Client(_)) {
        if let Some(flag) = misplaced_client_flag(&matches) {
            eprintln!(
                "cairn: --{flag} is a flag of the client commands; `serve`, `check` and `cluster` do not take it (the server's listen address is CAIRN_TCP_ADDRESS or [tcp] address in its configuration)"
            );
            return ExitCode::from(2);
        }
    }
    match cli.command {
        Command::Serve {
            config,
            print_config,
        } => serve(config.as_deref(), print_config),
        Command::Cluster { config, command } => {
            quiet_logs();
            cluster(config.as_deref(), command, cli.connect.json)
        }
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
    if let Err(e) = config.cluster.serving() {
        eprintln!("cairn: invalid configuration: {e}");
        return ExitCode::from(2);
    }
    cairn_server::serve::run(config)
}

fn cluster(file: Option<&Path>, command: ClusterCommand, json: bool) -> ExitCode {
    use cairn_server::cluster::admin::{self, AdminCommand};
    let config = match cairn_server::config::load(file, std::env::vars()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("cairn cluster: invalid configuration: {e}");
            return ExitCode::from(admin::exit::INVALID);
        }
    };
    let command = match command {
        ClusterCommand::Status => AdminCommand::Status,
        ClusterCommand::Add {
            member,
            replication,
            client,
        } => AdminCommand::Add {
            member,
            replication,
            client,
        },
        ClusterCommand::Remove { member } => AdminCommand::Remove { member },
    };
    admin::run(&config, command, json)
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
    match cairn_server::check::report(disk, root, &mut std::io::stdout().lock()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("cairn check: cannot read {}: {e}", root.display());
            ExitCode::from(2)
        }
    }
}

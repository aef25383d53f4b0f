//! The node-scope simulation: the concurrent [`Node`] (metadata owner, partition shards,
//! groups owner, the blocking pool) on the simulated disk, driven by concurrent callers as
//! tasks on the deterministic executor — admins, producers, a consumer with group members, a
//! user-and-login caller, a reader of the published view — through process crashes, power
//! losses, crashes inside operations and checkpoints, clock jumps, a full disk, and damage
//! to the metadata files. Every disk call costs virtual time that the owner making it sleeps
//! off, so operations of different callers really interleave.
//!
//! The oracle judges what each caller was told:
//! - **metadata (invariant 6)**: every metadata reply carries its op number; the model
//!   applies acknowledged ops in journal order and judges each refusal against the state it
//!   was checked against. After every boot the whole recovered state (every field) equals the
//!   model with the ops in doubt placed where the journal can hold them; the view never
//!   showed an op the disk then lost; a refused boot needs a damaging fault still present;
//! - **messages (1-3)**: acknowledged `persisted` messages survive, at their offset, in the
//!   incarnation (identity) their send landed in; polls return only sent messages, gapless,
//!   never below the log start;
//! - **offsets (5)**, consumer-group memberships (every partition owned once, by exactly the
//!   members the model knows), logins (an answer consistent with the users during the
//!   login), the directory tree (exactly the model's partitions after deletes and boots),
//!   and each retention deletion against the rule and the deletions before it.
//!
//! The allowances, each with its cause: an op in doubt (its answer lost to a crash) may or
//! may not be in the recovered state, and a purge in doubt is decided by the partitions'
//! identity nonces; a boot refusal needs damage present in the file it names (or in a
//! superblock slot whose older record the snapshot and journal moved past), or a lying
//! metadata sync a power loss undid; a superblock record left in one copy (then written
//! again) needs a fault injected on a slot file during that boot or an unreadable sector;
//! a caller's error needs a crash, a concurrent metadata op, a missing entity, an operator's
//! removal or a full disk (`judges`); a segment due for expiry may outlive four cleaner
//! intervals only when an I/O error, a full disk or a clock jump came since.
//!
//! The files: the world and its run here; `model` (the metadata model), `workload`
//! (what callers ask), `tasks` (the callers), `judges` (what checks their answers),
//! `lifecycle` (boots and restarts), `oracle` (the checks at each boot), `debris` (an
//! operator's leftovers and the checks that boot and `cairn check` keep and report them), [`directed`]
//! (scripted node scenarios).

mod debris;
pub mod directed;
mod exits;
pub(crate) mod judges;
mod lifecycle;
mod model;
mod oracle;
mod owner_panic;
mod tasks;
mod workload;

pub use directed::{NodeDirected, NODE_SCENARIOS};

use crate::env::MAX_EPOCH_POLLS;
use crate::executor::{Executor, ExecutorHandle};
use crate::report::violation;
use crate::report::{RunReport, Trace, Violation};
use cairn_engine::env::Env;
use cairn_engine::metadata::MetaSettings;
use cairn_engine::node::{Node, NodeLimits, NodeSettings, PartitionKey, PasswordCost};
use cairn_engine::partition::PartitionIdentity;
use cairn_faults::{FaultKind, SimClock, SimDisk};
use model::{AdminOp, Model, Window};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const NODE_ROOT: &str = "/node";

/// The node scope's coverage rows: decision name, and what reaching it means.
pub const NODE_COVERAGE: [(&str, &str); 34] = [
    ("TruncateJournal", "metadata journal tail truncated at boot"),
    (
        "QuiescentCompared",
        "with nothing in flight, the published view compared with the model field by field",
    ),
    (
        "MetaWriteNoSpace",
        "a metadata journal write refused for no space (the node serves on; the op never reappears)",
    ),
    (
        "MetaWriteFailed",
        "a metadata write failed with an I/O error: the node stopped and said why",
    ),
    (
        "SnapshotReplay",
        "boot from a snapshot plus replayed entries",
    ),
    ("BootRefused", "boot refused, justified by metadata damage"),
    (
        "RetentionDeletion",
        "segment deleted by a shard's cleaner (rule checked)",
    ),
    (
        "CrashDuringDeletion",
        "a deletion interrupted by a crash, finished at boot",
    ),
    (
        "GroupRebalance",
        "consumer group membership changed, partitions rebalanced",
    ),
    ("EntityDeleted", "stream, topic or group deleted"),
    (
        "DirectoryMissing",
        "a partition directory removed while down: fenced, never recreated",
    ),
    (
        "FirstBootInterrupted",
        "a crash inside the very first boot, finished by the next",
    ),
    (
        "JoinedRunningPersist",
        "a send arrived while its partition's persist ran and joined the next one",
    ),
    (
        "PollDuringPersist",
        "a poll arrived while its partition's persist ran",
    ),
    (
        "ConcurrentPersists",
        "a shard persisted several partitions' sends of one round at once",
    ),
    (
        "PersistPipelined",
        "a partition's log sync ran while its previous group's record was out",
    ),
    (
        "DeletionDuringRead",
        "a partition's segments or the partition deleted while a poll read it off its owner",
    ),
    (
        "OffsetStoresShareSync",
        "a shard's `persisted` offset stores of one round shared one directory sync",
    ),
    (
        "MetaOpRacedSends",
        "a purge or removal of a partition concurrent with sends to it",
    ),
    (
        "LoginRacedDeletion",
        "a login concurrent with the deletion of that user",
    ),
    ("InboxFull", "a full inbox pushed back on a caller"),
    (
        "MetadataBatched",
        "two callers' metadata ops journaled in one batch",
    ),
    (
        "CleanerOwedDeletion",
        "a segment due for expiry seen twice: the cleaner's deletion of it judged owed",
    ),
    (
        "AssignmentsJudged",
        "every member's own assignment judged against the group's list and generation",
    ),
    (
        "CheckpointCrash",
        "a crash inside a checkpoint (record, rename, journal cut), finished at boot",
    ),
    (
        "OperatorDebris",
        "a boot found an operator's debris (empty or identity-less directories, stray files): kept and reported",
    ),
    (
        "OperatorDebrisChecked",
        "cairn check, run on the simulated disk after a boot, reported every new piece of debris",
    ),
    (
        "ActiveFilesSyncedToClose",
        "a partition's active files written past their durable end synced and closed to make room in the node's table",
    ),
    (
        "GracefulShutdown",
        "a graceful shutdown while callers ran (each answered, or refused as shut down)",
    ),
    (
        "CacheTrustedCleanExit",
        "boot read the page cache as it was after a clean exit in the same kernel",
    ),
    (
        "CacheTrustedNewKernel",
        "boot read the page cache as it was after the kernel booted again (a power loss)",
    ),
    (
        "CacheSuspectUncleanExit",
        "boot read the device after an unclean exit in the same kernel",
    ),
    (
        "PowerLossKeptBootId",
        "a power loss after which the kernel reported the boot id it had before",
    ),
    (
        "CacheTrustedLyingRecord",
        "boot read the cache as a clean exit's though a power loss that kept the boot id emptied it",
    ),
];
pub const INV_METADATA: &str = "6 metadata";
pub const INV_RETENTION: &str = "6r retention";
pub const INV_CALLERS: &str = "9 what callers were told";
/// Most streams, topics per stream and partitions per topic the admins create.
const MAX_STREAMS: usize = 3;
const MAX_TOPICS: usize = 3;
const MAX_PARTITIONS: u32 = 3;
/// Restarts a run may take (each one a full boot and check).
const MAX_RESTARTS: u32 = 40;
/// Metadata states kept for judging refusals checked against an earlier op.
const HISTORY: usize = 512;

/// What one node-scope seed does.
#[derive(Debug, Clone)]
pub struct NodeProfile {
    pub steps: u32,
    pub producers: u32,
    pub admins: u32,
    pub shards: usize,
    pub shard_inbox: usize,
    pub meta_inbox: usize,
    pub max_think_nanos: u64,
    /// The longest a reader of the view waits between reads.
    pub read_every_nanos: u64,
    pub max_payload: usize,
    /// Virtual time each disk call costs (seeded in this range).
    pub disk_latency_nanos: (u64, u64),
    /// Virtual time a password hash costs on the blocking pool.
    pub hash_nanos: u64,
    /// Virtual time a device job (a persist's log sync, a record) waits for its thread
    /// before it runs: the window in which a pipeline's record returns while the next
    /// group's sync has not run yet.
    pub device_queue_nanos: u64,
    /// Records written as jobs while the shard serves on (the persist pipeline), or in the
    /// log sync's wait (production's default).
    pub pipeline_records: bool,
    pub process_crash: f64,
    pub power_loss: f64,
    pub mid_operation_crash: f64,
    /// While the node is down: a bit flipped in a metadata file, or a bad sector there.
    pub metadata_damage: f64,
    /// The next metadata journal sync lies (a power loss may follow).
    pub metadata_lie: f64,
    pub clock_jump: f64,
    /// While the node is down: an operator removes a partition's directory.
    pub dir_removal: f64,
    /// A crash scripted inside the next checkpoint, or the next deletion.
    pub checkpoint_crash: f64,
    pub deletion_crash: f64,
    /// The disk fills up for a while.
    pub disk_full: f64,
    /// Per step: the disk fills with no room at all (the next metadata write is refused for
    /// no space).
    pub metadata_full: f64,
    /// Per step: the metadata journal's next sync fails with EIO (the node must stop).
    pub metadata_sync_error: f64,
    /// While the node is down: an operator leaves debris under the data root
    /// ([`debris`]).
    pub debris: f64,
    /// Virtual time between each shard's cleaner passes.
    pub cleaner_every_nanos: u64,
    pub checkpoint_bytes: u64,
    /// Message expiries topics are created with (µs), 0 = none.
    pub expiries: [u64; 3],
    /// The largest batch the node admits (size retention's floor is a segment plus this).
    pub max_batch_bytes: u64,
    /// Sealed-segment handles the node keeps open (small: reads reopen and evict).
    pub sealed_handles: usize,
}

impl NodeProfile {
    pub fn from_seed(seed: u64) -> NodeProfile {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0a0d_e5ee_d000);
        let maybe = |rng: &mut ChaCha8Rng, on: f64, low: f64, high: f64| {
            crate::profile::maybe(rng, on, low, high).unwrap_or(0.0)
        };
        NodeProfile {
            steps: rng.gen_range(200..500),
            producers: rng.gen_range(1..=3),
            admins: rng.gen_range(1..=2),
            // More shards than `WORK_PER_SHARD` on some seeds: a node on a machine of many
            // cores shares its directory work among them.
            shards: [1, 2, 3, 5, 8][rng.gen_range(0..5)],
            shard_inbox: [2, 4, 64][rng.gen_range(0..3)],
            meta_inbox: [1, 4][rng.gen_range(0..2)],
            max_think_nanos: [2_000_000, 20_000_000, 200_000_000][rng.gen_range(0..3)],
            read_every_nanos: [50_000, 500_000, 10_000_000][rng.gen_range(0..3)],
            // Large payloads in half the profiles: 1 MiB segments seal, so the cleaner has work.
            max_payload: [256, 8 * 1024, 64 * 1024, 64 * 1024][rng.gen_range(0..4)],
            disk_latency_nanos: [(2_000, 50_000), (50_000, 2_000_000)][rng.gen_range(0..2)],
            hash_nanos: [100_000, 3_000_000][rng.gen_range(0..2)],
            process_crash: maybe(&mut rng, 0.7, 0.002, 0.02),
            power_loss: maybe(&mut rng, 0.7, 0.002, 0.02),
            mid_operation_crash: maybe(&mut rng, 0.5, 0.002, 0.02),
            metadata_damage: maybe(&mut rng, 0.3, 0.1, 0.5),
            metadata_lie: maybe(&mut rng, 0.2, 0.005, 0.03),
            clock_jump: maybe(&mut rng, 0.3, 0.005, 0.03),
            dir_removal: maybe(&mut rng, 0.2, 0.1, 0.3),
            checkpoint_crash: maybe(&mut rng, 0.2, 0.2, 0.6),
            deletion_crash: maybe(&mut rng, 0.3, 0.05, 0.3),
            disk_full: maybe(&mut rng, 0.15, 0.002, 0.01),
            cleaner_every_nanos: [50_000_000, 500_000_000][rng.gen_range(0..2)],
            checkpoint_bytes: [512, 4096, 1 << 20][rng.gen_range(0..3)],
            expiries: [
                0,
                rng.gen_range(100_000..2_000_000),
                rng.gen_range(1..50_000),
            ],
            max_batch_bytes: 1 << 20,
            // Drawn last, so the draws above keep their values for every seed.
            sealed_handles: [1, 2, 512][rng.gen_range(0..3)],
            metadata_full: maybe(&mut rng, 0.15, 0.01, 0.04),
            metadata_sync_error: maybe(&mut rng, 0.15, 0.002, 0.01),
            debris: maybe(&mut rng, 0.3, 0.2, 0.6),
            device_queue_nanos: [0, 20_000, 500_000][rng.gen_range(0..3)],
            pipeline_records: rng.gen_bool(0.5),
        }
    }
}

// The model of a partition ------------------------------------------------------------------

/// Most racing offset stores the oracle remembers (the oldest go first; a store older than
/// this many others has long met the ops it raced).
pub(crate) const MAX_RACING_STORES: usize = 1024;

/// A consumer whose offset the model follows: a consumer id, or a group's incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Holder {
    Consumer(u32),
    Group { id: u32, incarnation: u64 },
}

/// One incarnation of a partition (an identity: a purge or a re-creation makes another).
#[derive(Debug, Clone, Default)]
pub(crate) struct PartModel {
    /// Whether its topic is `persisted` (for messages, and for offsets); `None` until the
    /// model adopts the op that created this incarnation.
    pub(crate) persisted: Option<(bool, bool)>,
    /// Offset → message id, for every acknowledged message the log still holds.
    pub(crate) messages: BTreeMap<u64, u128>,
    /// Acknowledged batches: base offset → (messages, stamp).
    pub(crate) batches: BTreeMap<u64, (u32, u64)>,
    /// The first offset the log holds, as the model knows it.
    pub(crate) log_start: u64,
    /// A deletion a crash interrupted may have moved the log start.
    pub(crate) log_start_unknown: bool,
    /// Holder → the last acknowledged store, and every value stored since the last check (a
    /// store in doubt or a replicated one may or may not have survived).
    pub(crate) offsets: BTreeMap<Holder, (Option<u64>, BTreeSet<Option<u64>>)>,
    /// Holders an auto-commit of unknown value may have stored into (its poll's answer was
    /// lost): any offset up to the end is theirs until the next check.
    pub(crate) unknown_offsets: BTreeSet<Holder>,
    /// When a send to it was last acknowledged (virtual nanoseconds).
    pub(crate) last_ack: u64,
}

impl PartModel {
    fn acked_end(&self) -> u64 {
        self.messages
            .keys()
            .next_back()
            .map_or(self.log_start, |o| o + 1)
    }

    pub(crate) fn persisted(&self) -> bool {
        self.persisted.is_some_and(|p| p.0)
    }

    /// Whether its topic's offsets are `persisted` (synced before a store is answered).
    pub(crate) fn offsets_persisted(&self) -> bool {
        self.persisted.is_some_and(|p| p.1)
    }
}

/// One incarnation of a consumer group: (stream, topic, group, the op that created it).
pub(crate) type GroupInc = (u32, u32, u32, u64);

/// A sealed segment at a partition's log start that the oracle saw due for expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    /// The segment's first offset.
    pub(crate) start: u64,
    /// The topic's expiry then.
    pub(crate) expiry: u64,
    /// When the oracle first saw it due (virtual nanoseconds).
    pub(crate) seen_at: u64,
    /// The disk's fault records then (a fault the cleaner would hit since excuses it).
    pub(crate) faults_from: usize,
    /// The model's last op then (a metadata op since may have changed the policy the
    /// node's view holds before the model adopts it).
    pub(crate) model_op: u64,
}

/// A metadata op a caller has sent and not yet had judged.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    pub(crate) op: AdminOp,
    /// Virtual time and wall clock when it was sent, and the clock jumps before it.
    pub(crate) at: u64,
    pub(crate) wall: u64,
    pub(crate) jumps: u32,
    /// How many times the disk had filled up when it was sent, and whether it was full
    /// then (a no-space answer needs a full disk at some point while it ran).
    pub(crate) fills: u32,
    pub(crate) full: bool,
}

impl Sent {
    /// Whether the disk was full at some point between this op's sending and now, when
    /// the disk has filled `fills` times and is `full_now`: full when it was sent, filled
    /// again since, or full now. (One count of fills plus one for a full disk at sending
    /// could not tell an op sent inside fill n and answered after fill n+1 had ended from
    /// one that never saw a full disk.)
    pub(crate) fn saw_full_disk(&self, fills: u32, full_now: bool) -> bool {
        self.full || fills > self.fills || full_now
    }
}

/// An accepted op waiting for the ops before it.
#[derive(Debug, Clone)]
pub(crate) struct Accepted {
    pub(crate) sent: Sent,
    pub(crate) created: Option<u32>,
    pub(crate) window: Window,
}

// The world ---------------------------------------------------------------------------------

pub struct NodeWorld {
    pub profile: NodeProfile,
    pub rng: ChaCha8Rng,
    pub disk: SimDisk,
    pub clock: SimClock,
    pub env: Env,
    pub trace: Trace,
    pub report: RunReport,
    node: Option<Node>,
    cluster: u128,
    model: Model,
    /// The model after each recent op, for refusals checked against an earlier state.
    history: BTreeMap<u64, Model>,
    /// Accepted ops whose op number lies beyond the model's next one.
    pending: BTreeMap<u64, Accepted>,
    /// Refusals checked against a state the model has not reached yet.
    deferred_refusals: Vec<(u64, Sent)>,
    /// Ops sent whose answer has not come, by caller.
    in_flight: BTreeMap<u32, Sent>,
    /// Ops whose answer a crash or a failure took: each may or may not have happened.
    in_doubt: Vec<Sent>,
    /// Every partition incarnation the callers saw.
    parts: BTreeMap<PartitionIdentity, PartModel>,
    /// Partitions whose directory an operator removed while the node was down.
    removed: BTreeSet<PartitionKey>,
    /// The disk's fault records when the node last began to boot.
    faults_at_boot: usize,
    /// Every message id a producer sent (a poll may return only these).
    sent_ids: BTreeSet<u128>,
    /// Group members the model believes joined: (stream, topic, group, incarnation) →
    /// clients.
    members: BTreeMap<GroupInc, BTreeSet<u128>>,
    /// The last generation each group's members were seen at, with who they were: a
    /// group's generation never goes back, and changes whenever its members do.
    generations: BTreeMap<GroupInc, (u64, BTreeSet<u128>)>,
    /// Sealed segments the oracle saw due for expiry (every message older than the topic's
    /// expiry): partition → when first seen due, for the cleaner's liveness.
    due: BTreeMap<PartitionIdentity, Due>,
    /// Op number → the client that asked for it and was answered (the journal records who
    /// asked: the server's duplicate detection reads it). Pruned to the journal at boot.
    asked_by: BTreeMap<u64, oracle::Asker>,
    /// Clock jumps when the node last booted (its cleaners' clocks start there).
    jumps_at_boot: u32,
    next_id: u128,
    next_name: u32,
    pub stop: Option<bool>,
    pub violation: Option<Violation>,
    pub ops: u32,
    pub faulty: bool,
    /// Boot was refused, justified: the run ends.
    pub refused: bool,
    /// Metadata files whose lied pages a power loss dropped.
    metadata_lies_lost: BTreeSet<PathBuf>,
    /// The metadata file this run's lying syncs strike (see `nemesis`).
    metadata_lie_target: Option<&'static str>,
    /// A power loss undid a lying superblock-record sync and no boot has recorded the
    /// journal's end since (see `metadata_damage_target`).
    journal_tail_exposed: bool,
    restarts: u32,
    /// The latest wall-clock time the node could have read (jumps back do not lower it).
    max_wall: u64,
    /// Clock jumps so far (an op's window is unknown when one happened during it).
    jumps: u32,
    /// The newest op any caller saw in the published view.
    max_observed_op: u64,
    /// A checkpoint crash, or a deletion crash, is scripted and has not struck yet.
    checkpoint_crash_armed: bool,
    deletion_crash_armed: bool,
    /// The op count at which a full disk has room again, and how often it filled.
    disk_full_until: Option<u32>,
    pub(crate) fills: u32,
    /// When the disk last had room again after being full (virtual nanoseconds).
    pub(crate) last_full: u64,
    /// Group polls with auto-commit in flight, by client: (topic, group holder).
    pub(crate) auto_commits: BTreeMap<u128, ((u32, u32), Holder)>,
    /// Each group member's last poll, for judging its turns (forgotten at a restart).
    pub(crate) group_polls: BTreeMap<u128, judges::GroupPoll>,
    /// A graceful shutdown is under way: its callers may be refused as shut down.
    pub(crate) shutting_down: bool,
    /// How the process before the next boot ended (judged against boot's page cache).
    pub(crate) exit: exits::LastExit,
    /// Directories a directed scenario put under `streams/` that no op made (an operator's
    /// copy): boot must keep them and fence the partition whose identity they claim.
    pub(crate) planted: BTreeSet<PathBuf>,
    /// What the last boot decided for the tree under `streams/` (directed scenarios read
    /// what it kept and reported).
    pub(crate) last_tree: Option<cairn_engine::node::tree::TreePlan>,
    /// An operator's debris under the data root, by path (a directory, or a stray file):
    /// every boot must keep and report it ([`debris`]).
    pub(crate) debris: BTreeMap<PathBuf, debris::Debris>,
    /// Pieces of debris planted so far (a piece's ids derive from it, so a piece a later
    /// deletion removed never lends its ids to the next one).
    pub(crate) debris_planted: u32,
    /// Partitions an explicit segment deletion is in flight for.
    pub(crate) deleting: BTreeSet<PartitionKey>,
    /// Offset stores that raced a metadata op (answered, or in doubt): the node resolves
    /// the partition when the store reaches its shard, so a purge or re-creation adopted
    /// later may have made the store land in the new incarnation. Each fresh incarnation
    /// at the key takes the value as a candidate (bounded: [`MAX_RACING_STORES`]).
    pub(crate) racing_stores: VecDeque<(PartitionKey, Holder, u64)>,
    /// Deletions of users in flight: username → when sent.
    deleting_users: BTreeMap<String, u64>,
}

fn settings(profile: &NodeProfile) -> NodeSettings {
    let mut partition = cairn_engine::config::PartitionSettings::default();
    partition.limits.max_batch_bytes = profile.max_batch_bytes;
    partition.pipeline_records = profile.pipeline_records;
    NodeSettings {
        password_cost: PasswordCost::CHEAP,
        meta: MetaSettings {
            checkpoint_bytes: profile.checkpoint_bytes,
            cluster: None,
        },
        partition,
        cleaner_interval: Duration::from_nanos(profile.cleaner_every_nanos),
        shards: profile.shards,
        limits: NodeLimits {
            meta_inbox: profile.meta_inbox,
            shard_inbox: profile.shard_inbox,
            groups_inbox: 16,
            in_flight_per_client: 4,
            journal_bytes: 64 << 20,
            sealed_handles: profile.sealed_handles,
            // A table as small as the sealed-handle cache (no draw of its own, so every
            // seed keeps its trajectory's draws): 1 and 2 close active files, synced, at
            // nearly every append to another partition.
            active_handles: match profile.sealed_handles {
                1 | 2 => profile.sealed_handles,
                _ => 4096,
            },
        },
        hooks: crate::canary::node_hooks(),
        ..Default::default()
    }
}

pub(crate) type Shared = Arc<Mutex<NodeWorld>>;

pub(crate) fn lock(world: &Shared) -> std::sync::MutexGuard<'_, NodeWorld> {
    world.lock().expect("world")
}

impl NodeWorld {
    /// The node world of `seed` on its simulated machine ([`crate::env::sim_env`]), with
    /// the executor that runs it.
    pub fn for_seed(
        seed: u64,
        profile: crate::profile::Profile,
        verbose: bool,
    ) -> (NodeWorld, Executor) {
        let (disk, clock, executor, env) = crate::env::sim_env(seed, &profile);
        let trace = Trace::new(verbose, clock.clone());
        let world = NodeWorld::new(
            seed,
            disk,
            clock,
            env,
            executor.handle(),
            trace,
            RunReport::new(profile),
        );
        (world, executor)
    }

    pub fn new(
        seed: u64,
        disk: SimDisk,
        clock: SimClock,
        env: Env,
        tasks: ExecutorHandle,
        trace: Trace,
        report: RunReport,
    ) -> NodeWorld {
        let profile = NodeProfile::from_seed(seed);
        disk.set_latency_debt(profile.disk_latency_nanos.0, profile.disk_latency_nanos.1);
        tasks.set_blocking_cost(Duration::from_nanos(profile.hash_nanos));
        tasks.set_device_queue(Duration::from_nanos(profile.device_queue_nanos));
        NodeWorld {
            profile,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x0de0),
            disk,
            clock,
            env,
            trace,
            report,
            node: None,
            cluster: 0,
            model: Model::default(),
            history: BTreeMap::new(),
            pending: BTreeMap::new(),
            deferred_refusals: Vec::new(),
            in_flight: BTreeMap::new(),
            in_doubt: Vec::new(),
            parts: BTreeMap::new(),
            removed: BTreeSet::new(),
            faults_at_boot: 0,
            sent_ids: BTreeSet::new(),
            members: BTreeMap::new(),
            generations: BTreeMap::new(),
            due: BTreeMap::new(),
            jumps_at_boot: 0,
            asked_by: BTreeMap::new(),
            next_id: 1,
            next_name: 0,
            stop: None,
            violation: None,
            ops: 0,
            faulty: true,
            refused: false,
            metadata_lies_lost: BTreeSet::new(),
            metadata_lie_target: None,
            journal_tail_exposed: false,
            restarts: 0,
            max_wall: 0,
            jumps: 0,
            max_observed_op: 0,
            checkpoint_crash_armed: false,
            deletion_crash_armed: false,
            disk_full_until: None,
            fills: 0,
            last_full: 0,
            deleting_users: BTreeMap::new(),
            deleting: BTreeSet::new(),
            racing_stores: VecDeque::new(),
            planted: BTreeSet::new(),
            last_tree: None,
            debris: BTreeMap::new(),
            debris_planted: 0,
            auto_commits: BTreeMap::new(),
            group_polls: BTreeMap::new(),
            shutting_down: false,
            exit: exits::LastExit::default(),
        }
    }

    pub fn event(&mut self, text: impl AsRef<str>) {
        self.trace.event(text);
    }

    pub fn fail(&mut self, v: Violation) {
        if self.violation.is_none() {
            self.violation = Some(v);
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen_bool(p.min(1.0))
    }

    pub(crate) fn decision(&mut self, name: &'static str) {
        *self.report.decisions.entry(name).or_default() += 1;
    }

    pub fn is_up(&self) -> bool {
        self.node.is_some() && !self.refused
    }

    fn wall(&self) -> u64 {
        self.env.clock.wall_micros()
    }

    /// The virtual time now.
    fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// Faults of the nemesis after every step: clock jumps, lies, crashes, a full disk.
    pub fn nemesis(&mut self) {
        if self.stop.is_some() || self.violation.is_some() || !self.faulty {
            return;
        }
        self.max_wall = self.max_wall.max(self.wall());
        if self.chance(self.profile.clock_jump) {
            let jump: i64 = self.rng.gen_range(-86_400_000_000..86_400_000_000);
            self.clock.jump_wall(jump);
            self.jumps += 1;
            self.disk
                .record(FaultKind::ClockJump, None, format!("{jump} us"));
            self.event(format!("fault clock jump {jump} us"));
        }
        if self.chance(self.profile.metadata_lie) {
            // The journal's sync, or a superblock record's. One of them per run (a scripted
            // lie outlives a power loss): a journal entry and the record covering it both
            // lost to lies leave the disk byte for byte as it was before the op, which no
            // single-disk design can tell from never having done it; this oracle does not
            // model rolling back acknowledged metadata ops, so the pair is not injected.
            let pick = self.rng.gen_range(0..2);
            let target = *self
                .metadata_lie_target
                .get_or_insert(["journal.wal", "metadata/superblock"][pick]);
            self.disk
                .script(cairn_faults::Scripted::LieOnSync(target.into()));
            self.event(format!("fault the next sync of {target} lies"));
        }
        if !self.checkpoint_crash_armed && self.chance(self.profile.checkpoint_crash) {
            self.arm_checkpoint_crash();
        }
        if !self.deletion_crash_armed && self.chance(self.profile.deletion_crash) {
            self.deletion_crash_armed = true;
            self.disk.script(cairn_faults::Scripted::CrashOnCall {
                call: cairn_faults::Call::Remove,
                part: ".log".into(),
            });
        }
        if self.chance(self.profile.metadata_sync_error) {
            self.disk
                .script(cairn_faults::Scripted::FailSync("journal.wal".into()));
            self.event("fault the next sync of journal.wal fails (EIO)");
        }
        let room = match self.disk_full_until.is_none() {
            true if self.chance(self.profile.disk_full) => Some(self.rng.gen_range(0..4096)),
            true if self.chance(self.profile.metadata_full) => Some(0),
            _ => None,
        };
        match self.disk_full_until {
            Some(until) if self.ops >= until => {
                let mut faults = self.disk.faults();
                faults.capacity = None;
                self.disk.set_faults(faults);
                self.disk_full_until = None;
                self.last_full = self.now();
                self.event("the disk has room again");
            }
            None if room.is_some() => {
                let mut faults = self.disk.faults();
                faults.capacity = Some(self.disk.used_bytes() + room.expect("some"));
                self.disk.set_faults(faults);
                self.disk_full_until = Some(self.ops + self.rng.gen_range(2..20));
                self.fills += 1;
                self.event("fault the disk is full");
            }
            _ => {}
        }
        if self.chance(self.profile.power_loss) {
            self.stop = Some(true);
        } else if self.chance(self.profile.process_crash) {
            self.stop = Some(false);
        } else if self.chance(self.profile.mid_operation_crash) {
            let n = self.rng.gen_range(0..8);
            self.disk.arm_crash(n);
            self.event(format!("fault crash armed at mutating call +{n}"));
        }
    }

    /// A crash at one of a checkpoint's steps: before its record (the temporary snapshot),
    /// between the record and the rename, or between the rename and the journal cut.
    fn arm_checkpoint_crash(&mut self) {
        use cairn_faults::{Call, Scripted};
        let (call, part, step) = match self.rng.gen_range(0..3) {
            0 => (Call::Sync, "snapshot.bin.tmp", "before its record"),
            1 => (
                Call::Rename,
                "snapshot.bin",
                "between its record and the rename",
            ),
            _ => (
                Call::SetLen,
                "journal.wal",
                "between the rename and the journal cut",
            ),
        };
        self.disk.script(Scripted::CrashOnCall {
            call,
            part: part.into(),
        });
        self.checkpoint_crash_armed = true;
        self.event(format!(
            "fault a crash is scripted inside the next checkpoint, {step}"
        ));
    }
}

// The run -----------------------------------------------------------------------------------

/// Runs `future` on the executor until it finishes; `None` if the run stalled first.
pub(crate) fn block<T: Send + 'static>(
    executor: &mut Executor,
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    let tasks = executor.handle();
    executor.block_on(&tasks, MAX_EPOCH_POLLS, future)
}

/// Runs one node-scope seed.
pub fn run(world: NodeWorld, mut executor: Executor) -> (RunReport, u64) {
    let world: Shared = Arc::new(Mutex::new(world));
    if let Err(v) = lifecycle::setup(&world, &mut executor) {
        lock(&world).fail(v);
    }
    loop {
        {
            let w = lock(&world);
            if w.violation.is_some() || w.refused || !w.faulty {
                break;
            }
        }
        tasks::spawn(&world, &executor);
        let keep_going = || {
            let w = lock(&world);
            w.stop.is_none() && w.violation.is_none()
        };
        executor.run_while(MAX_EPOCH_POLLS, u64::MAX, &keep_going);
        exits::maybe_shut_down(&world, &mut executor);
        executor.kill_all();
        let power = {
            let mut w = lock(&world);
            if w.violation.is_some() {
                break;
            }
            let power = w.stop.take().unwrap_or(false);
            if w.restarts >= MAX_RESTARTS {
                w.faulty = false;
            }
            if !w.faulty {
                break;
            }
            power
        };
        if let Err(v) = lifecycle::restart(&world, &mut executor, power) {
            lock(&world).fail(v);
            break;
        }
    }
    let liveness = {
        let w = lock(&world);
        w.violation.is_none() && !w.refused
    };
    if liveness {
        if let Err(v) = lifecycle::liveness(&world, &mut executor) {
            lock(&world).fail(v);
        }
    }
    executor.kill_all();
    let mut w = lock(&world);
    let records = w.disk.records();
    w.report.count_faults(&records);
    if let Some(v) = w.violation.clone() {
        w.event(format!("VIOLATION {v}"));
    }
    let report = w
        .report
        .clone()
        .finished(w.violation.clone(), w.ops, &w.clock, &w.trace);
    (report, 0)
}

/// A partition identity's key.
pub(crate) fn key(identity: &PartitionIdentity) -> PartitionKey {
    (identity.stream_id, identity.topic_id, identity.partition_id)
}

/// A violation of the metadata invariant.
pub(crate) fn meta_violation(evidence: String) -> Violation {
    violation(INV_METADATA, evidence)
}

#[cfg(test)]
mod tests {
    use super::{model::AdminOp, Sent};

    fn sent(fills: u32, full: bool) -> Sent {
        Sent {
            op: AdminOp::DeleteStream(0),
            at: 0,
            wall: 0,
            jumps: 0,
            fills,
            full,
        }
    }

    /// A no-space refusal is excused only by a full disk while the op ran.
    #[test]
    fn a_full_disk_while_an_op_ran() {
        // Seed 0xee6b3b9d: sent inside the 7th fill, refused inside the 8th, answered
        // after it ended.
        assert!(sent(7, true).saw_full_disk(8, false));
        // Sent inside a fill that is still on, or ended.
        assert!(sent(7, true).saw_full_disk(7, true));
        assert!(sent(7, true).saw_full_disk(7, false));
        // Sent with room, a fill since (over, or still on).
        assert!(sent(7, false).saw_full_disk(8, false));
        assert!(sent(7, false).saw_full_disk(8, true));
        // Never full while it ran: the check still bites.
        assert!(!sent(7, false).saw_full_disk(7, false));
        assert!(!sent(0, false).saw_full_disk(0, false));
    }
}

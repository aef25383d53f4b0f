//! The node-scope simulation: a whole [`Node`] (metadata plane, entities, partitions,
//! consumer groups, retention) on the simulated disk, driven by an admin, producers, a
//! consumer and a cleaner as tasks on the deterministic executor, through process crashes,
//! power losses, crashes inside operations, clock jumps, and damage to the metadata files.
//!
//! The oracle here holds:
//! - **invariant 6 (metadata)**: after every boot the metadata equals the model built from
//!   every acknowledged operation (an operation whose answer was lost to a crash may or may
//!   not be there, nothing else); a refused boot needs a damaging fault still present on a
//!   metadata file (damaged bytes, or a lying sync a power loss undid);
//! - **invariant 5 (offsets)**: a stored offset never exceeds its partition's end, and under
//!   `persisted` offset durability the last acknowledged store survives (read as consumed up
//!   to the log start when retention passed it);
//! - **invariants 1-3 for the node's partitions**: under `persisted` every acknowledged
//!   message from the log start on survives at its offset; every message read is the one
//!   acknowledged there; logs are gapless from their start. Partition files suffer no
//!   damage in this scope, so any fence is a violation;
//! - **retention**: the active segment is never deleted, the log start only moves forward,
//!   and every deleted segment satisfied its rule when deleted (expiry judged against the
//!   stamps the producers were acknowledged with).

use crate::executor::Executor;
use crate::oracle::{
    violation, Checked, INV_JUSTIFIED, INV_LIVENESS, INV_NO_LOSS, INV_OFFSETS, INV_PREFIX,
};
use crate::run::{RunReport, Trace, Violation, MAX_EPOCH_POLLS};
use crate::world::decode;
use bytes::BytesMut;
use cairn_engine::config::Durability;
use cairn_engine::env::{Clock, Env};
use cairn_engine::format::BatchBuilder;
use cairn_engine::metadata::journal::Origin;
use cairn_engine::metadata::{MetaAction, MetaSettings};
use cairn_engine::node::retention::{Policy, Reason};
use cairn_engine::node::state::MetaState;
use cairn_engine::node::{
    BootError, Deletion, Node, NodeError, NodeSettings, PartitionKey, PasswordCost,
};
use cairn_engine::partition::{Outcome, PollFrom};
use cairn_faults::{FaultKind, SimClock, SimDisk};
use iggy_binary_protocol::{
    WireConsumer, WireIdentifier, WireOptions, WirePartitioning, WirePollingStrategy,
    KIND_CONSUMER_GROUP,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const NODE_ROOT: &str = "/node";

/// The node scope's coverage rows: decision name, and what reaching it means.
pub const NODE_COVERAGE: [(&str, &str); 9] = [
    ("TruncateJournal", "metadata journal tail truncated at boot"),
    (
        "SnapshotReplay",
        "boot from a snapshot plus replayed entries",
    ),
    ("BootRefused", "boot refused, justified by metadata damage"),
    (
        "RetentionDeletion",
        "segment deleted by retention (rule checked)",
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
];
pub const INV_METADATA: &str = "6 metadata";
pub const INV_RETENTION: &str = "6r retention";
/// Most streams, topics per stream and partitions per topic the admin creates.
const MAX_STREAMS: usize = 3;
const MAX_TOPICS: usize = 3;
const MAX_PARTITIONS: u32 = 3;
/// Restarts a run may take (each one a full boot and check).
const MAX_RESTARTS: u32 = 40;

/// What one node-scope seed does.
#[derive(Debug, Clone)]
pub struct NodeProfile {
    pub steps: u32,
    pub producers: u32,
    pub max_think_nanos: u64,
    pub max_payload: usize,
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
    /// Virtual time between cleaner passes.
    pub cleaner_every_nanos: u64,
    pub checkpoint_bytes: u64,
    /// Message expiries topics are created with (µs), 0 = none.
    pub expiries: [u64; 3],
}

impl NodeProfile {
    pub fn from_seed(seed: u64) -> NodeProfile {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0a0d_e5ee_d000);
        let maybe = |rng: &mut ChaCha8Rng, on: f64, low: f64, high: f64| {
            if rng.gen_bool(on) {
                rng.gen_range(low..high)
            } else {
                0.0
            }
        };
        NodeProfile {
            steps: rng.gen_range(150..400),
            producers: rng.gen_range(1..=2),
            max_think_nanos: [2_000_000, 20_000_000, 200_000_000][rng.gen_range(0..3)],
            // Large payloads in half the profiles: 1 MiB segments seal, so the cleaner has work.
            max_payload: [256, 8 * 1024, 64 * 1024, 64 * 1024][rng.gen_range(0..4)],
            process_crash: maybe(&mut rng, 0.7, 0.002, 0.02),
            power_loss: maybe(&mut rng, 0.7, 0.002, 0.02),
            mid_operation_crash: maybe(&mut rng, 0.5, 0.002, 0.02),
            metadata_damage: maybe(&mut rng, 0.3, 0.1, 0.5),
            metadata_lie: maybe(&mut rng, 0.2, 0.005, 0.03),
            clock_jump: maybe(&mut rng, 0.3, 0.005, 0.03),
            dir_removal: maybe(&mut rng, 0.2, 0.1, 0.3),
            cleaner_every_nanos: [50_000_000, 500_000_000][rng.gen_range(0..2)],
            checkpoint_bytes: [512, 4096, 1 << 20][rng.gen_range(0..3)],
            expiries: [
                0,
                rng.gen_range(100_000..2_000_000),
                rng.gen_range(1..50_000),
            ],
        }
    }
}

// The model of the metadata ---------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct MTopic {
    name: String,
    partitions: u32,
    durability: Durability,
    offsets: Durability,
    expiry: u64,
    max_size: u64,
    groups: BTreeMap<u32, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct MStream {
    name: String,
    topics: BTreeMap<u32, MTopic>,
}

/// What the acknowledged operations say the metadata is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct MetaModel {
    streams: BTreeMap<u32, MStream>,
    users: BTreeMap<u32, String>,
}

/// The model's view of an engine state.
fn project(state: &MetaState) -> MetaModel {
    MetaModel {
        streams: state
            .streams
            .values()
            .map(|s| {
                let topics = s
                    .topics
                    .values()
                    .map(|t| {
                        let topic = MTopic {
                            name: t.name.clone(),
                            partitions: t.partitions.len() as u32,
                            durability: t.options.durability,
                            offsets: t.options.consumer_offset_durability,
                            expiry: t.options.message_expiry,
                            max_size: t.options.max_topic_size,
                            groups: t.groups.iter().map(|(g, v)| (*g, v.name.clone())).collect(),
                        };
                        (t.id, topic)
                    })
                    .collect();
                (
                    s.id,
                    MStream {
                        name: s.name.clone(),
                        topics,
                    },
                )
            })
            .collect(),
        users: state
            .users
            .values()
            .map(|u| (u.id, u.username.clone()))
            .collect(),
    }
}

fn lowest_free<T>(map: &BTreeMap<u32, T>) -> u32 {
    (0..).find(|id| !map.contains_key(id)).expect("a free id")
}

/// An admin operation, as the model and the node each carry it out.
#[derive(Debug, Clone)]
enum AdminOp {
    CreateStream(String),
    RenameStream(u32, String),
    DeleteStream(u32),
    PurgeStream(u32),
    CreateTopic {
        stream: u32,
        name: String,
        partitions: u32,
        persisted: bool,
        offsets_persisted: bool,
        expiry: u64,
        max_size: u64,
    },
    UpdateTopic {
        stream: u32,
        topic: u32,
        expiry: u64,
        max_size: u64,
    },
    DeleteTopic(u32, u32),
    PurgeTopic(u32, u32),
    CreatePartitions(u32, u32, u32),
    DeletePartitions(u32, u32, u32),
    CreateGroup(u32, u32, String),
    DeleteGroup(u32, u32, u32),
    CreateUser(String),
    DeleteUser(u32),
}

/// What the model says an operation does: created id, the partitions it empties or creates
/// or removes; `Err` when it must be refused.
#[derive(Debug, Clone, Default)]
struct Effect {
    created: Option<u32>,
    fresh: Vec<PartitionKey>,
    removed: Vec<PartitionKey>,
}

impl MetaModel {
    fn topic(&self, s: u32, t: u32) -> Option<&MTopic> {
        self.streams.get(&s)?.topics.get(&t)
    }

    fn keys_of(&self, s: u32, t: Option<u32>) -> Vec<PartitionKey> {
        let Some(stream) = self.streams.get(&s) else {
            return Vec::new();
        };
        stream
            .topics
            .iter()
            .filter(|(id, _)| t.is_none_or(|t| t == **id))
            .flat_map(|(id, topic)| (0..topic.partitions).map(move |p| (s, *id, p)))
            .collect()
    }

    fn apply(&mut self, op: &AdminOp) -> Result<Effect, ()> {
        let mut effect = Effect::default();
        match op {
            AdminOp::CreateStream(name) => {
                if self.streams.values().any(|s| &s.name == name) {
                    return Err(());
                }
                let id = lowest_free(&self.streams);
                self.streams.insert(
                    id,
                    MStream {
                        name: name.clone(),
                        topics: BTreeMap::new(),
                    },
                );
                effect.created = Some(id);
            }
            AdminOp::RenameStream(s, name) => {
                if !self.streams.contains_key(s)
                    || self
                        .streams
                        .iter()
                        .any(|(id, st)| &st.name == name && id != s)
                {
                    return Err(());
                }
                self.streams.get_mut(s).expect("checked").name = name.clone();
            }
            AdminOp::DeleteStream(s) => {
                effect.removed = self.keys_of(*s, None);
                self.streams.remove(s).ok_or(())?;
            }
            AdminOp::PurgeStream(s) => {
                self.streams.get(s).ok_or(())?;
                effect.fresh = self.keys_of(*s, None);
            }
            AdminOp::CreateTopic {
                stream,
                name,
                partitions,
                persisted,
                offsets_persisted,
                expiry,
                max_size,
            } => {
                let st = self.streams.get_mut(stream).ok_or(())?;
                if st.topics.values().any(|t| &t.name == name) {
                    return Err(());
                }
                let id = lowest_free(&st.topics);
                let policy = |p: bool| {
                    if p {
                        Durability::Persisted
                    } else {
                        Durability::Replicated
                    }
                };
                st.topics.insert(
                    id,
                    MTopic {
                        name: name.clone(),
                        partitions: *partitions,
                        durability: policy(*persisted),
                        offsets: policy(*offsets_persisted),
                        expiry: *expiry,
                        max_size: *max_size,
                        groups: BTreeMap::new(),
                    },
                );
                effect.created = Some(id);
                effect.fresh = (0..*partitions).map(|p| (*stream, id, p)).collect();
            }
            AdminOp::UpdateTopic {
                stream,
                topic,
                expiry,
                max_size,
            } => {
                let t = self
                    .streams
                    .get_mut(stream)
                    .and_then(|s| s.topics.get_mut(topic))
                    .ok_or(())?;
                t.expiry = *expiry;
                t.max_size = *max_size;
            }
            AdminOp::DeleteTopic(s, t) => {
                effect.removed = self.keys_of(*s, Some(*t));
                self.streams
                    .get_mut(s)
                    .ok_or(())?
                    .topics
                    .remove(t)
                    .ok_or(())?;
            }
            AdminOp::PurgeTopic(s, t) => {
                self.topic(*s, *t).ok_or(())?;
                effect.fresh = self.keys_of(*s, Some(*t));
            }
            AdminOp::CreatePartitions(s, t, n) => {
                let topic = self
                    .streams
                    .get_mut(s)
                    .and_then(|st| st.topics.get_mut(t))
                    .ok_or(())?;
                effect.fresh = (topic.partitions..topic.partitions + n)
                    .map(|p| (*s, *t, p))
                    .collect();
                topic.partitions += n;
            }
            AdminOp::DeletePartitions(s, t, n) => {
                let topic = self
                    .streams
                    .get_mut(s)
                    .and_then(|st| st.topics.get_mut(t))
                    .ok_or(())?;
                if *n == 0 || *n > topic.partitions {
                    return Err(());
                }
                effect.removed = (topic.partitions - n..topic.partitions)
                    .map(|p| (*s, *t, p))
                    .collect();
                topic.partitions -= n;
            }
            AdminOp::CreateGroup(s, t, name) => {
                let topic = self
                    .streams
                    .get_mut(s)
                    .and_then(|st| st.topics.get_mut(t))
                    .ok_or(())?;
                if topic.groups.values().any(|g| g == name) {
                    return Err(());
                }
                let id = lowest_free(&topic.groups);
                topic.groups.insert(id, name.clone());
                effect.created = Some(id);
            }
            AdminOp::DeleteGroup(s, t, g) => {
                self.streams
                    .get_mut(s)
                    .and_then(|st| st.topics.get_mut(t))
                    .ok_or(())?
                    .groups
                    .remove(g)
                    .ok_or(())?;
            }
            AdminOp::CreateUser(name) => {
                if self.users.values().any(|u| u == name) {
                    return Err(());
                }
                let id = lowest_free(&self.users);
                self.users.insert(id, name.clone());
                effect.created = Some(id);
            }
            AdminOp::DeleteUser(id) => {
                if *id == 0 {
                    return Err(());
                }
                self.users.remove(id).ok_or(())?;
            }
        }
        Ok(effect)
    }
}

// The model of a partition ----------------------------------------------------------------

#[derive(Debug, Clone, Default)]
struct PartModel {
    /// The identity nonce the metadata gave it (new at every purge).
    nonce: u64,
    persisted: bool,
    offsets_persisted: bool,
    /// Offset → message id, for every acknowledged message the log still holds.
    messages: BTreeMap<u64, u128>,
    /// Acknowledged batches: base offset → (messages, stamp).
    batches: BTreeMap<u64, (u32, u64)>,
    /// The first offset the log holds, as the model knows it.
    log_start: u64,
    /// A cleaner pass that a crash interrupted may have moved the log start.
    log_start_unknown: bool,
    /// Consumer id → the last acknowledged store, and every value stored since the last
    /// check (a replicated store may or may not have survived).
    offsets: BTreeMap<u32, (Option<u64>, BTreeSet<Option<u64>>)>,
}

impl PartModel {
    fn new(topic: &MTopic) -> PartModel {
        PartModel {
            persisted: topic.durability == Durability::Persisted,
            offsets_persisted: topic.offsets == Durability::Persisted,
            ..Default::default()
        }
    }

    fn acked_end(&self) -> u64 {
        self.messages
            .keys()
            .next_back()
            .map_or(self.log_start, |o| o + 1)
    }
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
    model: MetaModel,
    /// An operation whose answer a crash took: it may or may not have happened.
    in_doubt: Option<AdminOp>,
    parts: BTreeMap<PartitionKey, PartModel>,
    /// Partitions whose directory an operator removed while the node was down.
    removed: BTreeSet<PartitionKey>,
    /// Group members (client ids) the model believes joined.
    members: BTreeSet<(u32, u32, u32, u128)>,
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
    /// journal's end since: journal entries of acknowledged ops lie above the surviving
    /// record's end (see `metadata_damage_target`).
    journal_tail_exposed: bool,
    restarts: u32,
    /// The latest wall-clock time the node could have read (jumps back do not lower it).
    max_wall: u64,
}

fn settings(profile: &NodeProfile) -> NodeSettings {
    NodeSettings {
        password_cost: PasswordCost::CHEAP,
        meta: MetaSettings {
            checkpoint_bytes: profile.checkpoint_bytes,
        },
        ..Default::default()
    }
}

fn sid(id: u32) -> WireIdentifier {
    WireIdentifier::numeric(id)
}

fn options(persisted: bool, offsets_persisted: bool, expiry: u64, max_size: u64) -> WireOptions {
    let policy = |p: bool| if p { "persisted" } else { "replicated" };
    let entries: Vec<(&str, u8, Vec<u8>)> = vec![
        ("durability", 2, policy(persisted).as_bytes().to_vec()),
        (
            "consumer_offset_durability",
            2,
            policy(offsets_persisted).as_bytes().to_vec(),
        ),
        ("segment_size", 12, (1u64 << 20).to_le_bytes().to_vec()),
        (
            "messages_required_to_save",
            11,
            16u32.to_le_bytes().to_vec(),
        ),
        ("message_expiry", 12, expiry.to_le_bytes().to_vec()),
        ("max_topic_size", 12, max_size.to_le_bytes().to_vec()),
    ];
    let tlv: Vec<(u8, &[u8], u8, &[u8])> = entries
        .iter()
        .map(|(k, kind, v)| (2u8, k.as_bytes(), *kind, v.as_slice()))
        .collect();
    let mut buf = BytesMut::new();
    iggy_binary_protocol::encode_user_headers(&tlv, &mut buf);
    WireOptions::from_bytes(buf.freeze()).expect("valid options")
}

impl NodeWorld {
    pub fn new(
        seed: u64,
        disk: SimDisk,
        clock: SimClock,
        env: Env,
        trace: Trace,
        report: RunReport,
    ) -> NodeWorld {
        NodeWorld {
            profile: NodeProfile::from_seed(seed),
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x0de0),
            disk,
            clock,
            env,
            trace,
            report,
            node: None,
            model: MetaModel::default(),
            in_doubt: None,
            parts: BTreeMap::new(),
            members: BTreeSet::new(),
            removed: BTreeSet::new(),
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

    fn decision(&mut self, name: &'static str) {
        *self.report.decisions.entry(name).or_default() += 1;
    }

    pub fn is_up(&self) -> bool {
        self.node.is_some() && !self.refused
    }

    /// The first boot.
    pub fn setup(&mut self) -> Checked<()> {
        self.model.users.insert(0, "iggy".into());
        // A crash inside the first boot: creating the metadata plane, its superblocks, the
        // root user. The next boot must finish it, never refuse it.
        let crash_first_boot = self.faulty && self.rng.gen_bool(0.2);
        if crash_first_boot {
            let n = self.rng.gen_range(0..24);
            self.disk.arm_crash(n);
            self.event(format!("fault crash armed inside the first boot at +{n}"));
        }
        self.boot()?;
        self.disk.disarm_crash();
        if self.disk.is_crashed() {
            let power = self.rng.gen_bool(0.5);
            self.restart(power)?;
            if !self.is_up() {
                return Ok(()); // refused, justified by damage the restart injected
            }
            self.decision("FirstBootInterrupted");
        }
        let node = self.node.as_ref().expect("booted");
        if project(node.state()) != self.model {
            return Err(violation(
                INV_METADATA,
                "the first boot's state is not a fresh node with its root user".into(),
            ));
        }
        Ok(())
    }

    /// Boots the node and checks what it recovered.
    fn boot(&mut self) -> Checked<()> {
        let root = Path::new(NODE_ROOT);
        match Node::open(&self.env, root, settings(&self.profile)) {
            Ok(booted) => {
                let plan = &booted.plan;
                self.trace.event(format!(
                    "boot: record {:?}, journal end {}, last op {}, replayed {} ops, first boot {}",
                    plan.record,
                    plan.journal_end,
                    plan.last_op,
                    plan.replayed.len(),
                    plan.first_boot
                ));
                for action in &booted.plan.actions {
                    self.trace.event(format!("metadata recovery: {action}"));
                    if matches!(action, MetaAction::TruncateJournal { .. }) {
                        self.decision("TruncateJournal");
                    }
                }
                if booted.plan.record.is_some_and(|r| r.snapshot.op > 0)
                    && !booted.plan.replayed.is_empty()
                {
                    self.decision("SnapshotReplay");
                }
                for (key, plan) in &booted.report.partitions {
                    let Some(plan) = plan else {
                        if !self.removed.contains(key) {
                            return Err(violation(INV_JUSTIFIED, format!("partition {key:?}: its directory is missing and nothing removed it")));
                        }
                        self.decision("DirectoryMissing");
                        continue;
                    };
                    for outcome in plan.outcomes() {
                        *self.report.outcomes.entry(outcome).or_default() += 1;
                        if outcome == Outcome::DeletionFinished {
                            self.decision("CrashDuringDeletion");
                        }
                    }
                    if let Some(reason) = &plan.fence {
                        return Err(violation(INV_JUSTIFIED, format!("partition {key:?} fenced at boot with no fault on partition files in this scope: {reason}")));
                    }
                }
                if !booted.report.redone.is_empty() {
                    self.decision("DirWorkRedone");
                }
                for removed in &booted.report.removed {
                    self.trace
                        .event(format!("boot removed {}", removed.display()));
                }
                // Boot recorded the journal's end: every entry it kept is below it now.
                self.journal_tail_exposed = false;
                self.node = Some(booted.node);
                self.check_metadata()?;
                self.check_partitions()
            }
            Err(BootError::Refused(refusal)) => {
                self.event(format!("BOOT REFUSED: {refusal}"));
                let justified = self.refusal_justified(&refusal);
                if !justified {
                    return Err(violation(INV_METADATA, format!("boot refused with no damaging fault present on a metadata file: {refusal}")));
                }
                self.decision("BootRefused");
                self.decision(refusal.coverage_name());
                self.refused = true;
                Ok(())
            }
            Err(BootError::Io(e)) if self.disk.is_crashed() => {
                self.event(format!("boot crashed: {e}"));
                Ok(())
            }
            Err(BootError::Io(e)) => Err(violation(
                INV_METADATA,
                format!("boot failed with no fault to explain it: {e}"),
            )),
        }
    }

    /// A damaging fault present where the refusal points: damaged bytes still in that file
    /// (or, for the superblock pair, in a slot; for a snapshot, in either of its names), a
    /// name lost, or lied pages of it a power loss dropped. A journal shorter than recorded
    /// is explained by its own lost lied pages only.
    fn refusal_justified(&self, refusal: &cairn_engine::metadata::MetaRefusal) -> bool {
        use cairn_engine::metadata::MetaRefusal as R;
        let dir = Path::new(NODE_ROOT).join("metadata");
        let file = refusal.file().to_path_buf();
        // A destroyed newest record leaves an older one trusted, which the snapshot and the
        // journal have moved past: damage in either slot explains any refusal of them.
        let slots = [dir.join("superblock.a"), dir.join("superblock.b")];
        let mut candidates: Vec<PathBuf> = match refusal {
            R::NoSuperblock { .. } => ["superblock.a", "superblock.b"]
                .iter()
                .map(|n| dir.join(n))
                .collect(),
            R::SnapshotMissing { .. }
            | R::SnapshotMismatch { .. }
            | R::SnapshotUndecodable { .. }
            | R::SnapshotContradicts { .. } => {
                vec![dir.join("snapshot.bin"), dir.join("snapshot.bin.tmp")]
            }
            R::JournalUncertain { slot, .. } => vec![file.clone(), slot.clone()],
            _ => vec![file.clone()],
        };
        candidates.extend(slots.iter().cloned());
        let damaged = |path: &PathBuf| {
            !self.disk.live_damage(path).is_empty()
                || self.metadata_lies_lost.contains(path)
                || self.disk.lost_synced_names(&dir).contains(path)
        };
        match refusal {
            R::JournalShorterThanDurable { path, .. } => {
                self.metadata_lies_lost.contains(path) || slots.iter().any(damaged)
            }
            _ => candidates.iter().any(damaged),
        }
    }

    /// Invariant 6: the recovered metadata is the model's (with or without the one
    /// operation in doubt). A purge changes no metadata but every partition's identity: the
    /// nonces say whether one in doubt happened.
    fn check_metadata(&mut self) -> Checked<()> {
        let found = project(self.node.as_ref().expect("booted").state());
        if found == self.model {
            let in_doubt = self.in_doubt.take();
            let purged = match &in_doubt {
                Some(op @ (AdminOp::PurgeTopic(..) | AdminOp::PurgeStream(..))) => self
                    .model
                    .clone()
                    .apply(op)
                    .map(|e| e.fresh)
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            for key in purged {
                if self.node_nonce(key) != self.parts.get(&key).map(|m| m.nonce) {
                    self.event(format!("the purge in doubt happened to {key:?}"));
                    let topic = self
                        .model
                        .topic(key.0, key.1)
                        .expect("purged partitions have a topic")
                        .clone();
                    let mut fresh = PartModel::new(&topic);
                    fresh.nonce = self.node_nonce(key).expect("a purged partition exists");
                    self.parts.insert(key, fresh);
                }
            }
            if let Some(op) = in_doubt {
                self.event(format!(
                    "the op in doubt left the metadata as it was: {op:?}"
                ));
            }
            return self.check_nonces();
        }
        if let Some(op) = self.in_doubt.take() {
            let mut with = self.model.clone();
            if let Ok(effect) = with.apply(&op) {
                if with == found {
                    self.event(format!("the op in doubt happened: {op:?}"));
                    self.model = with;
                    self.adopt(&effect);
                    return self.check_nonces();
                }
            }
        }
        Err(violation(INV_METADATA, format!("after boot the metadata is {found:?}, but the acknowledged operations make it {:?}", self.model)))
    }

    /// The nonce the node's metadata gives a partition.
    fn node_nonce(&self, (s, t, p): PartitionKey) -> Option<u64> {
        let state = self.node.as_ref()?.state();
        Some(
            state
                .streams
                .get(&s)?
                .topics
                .get(&t)?
                .partitions
                .get(&p)?
                .nonce,
        )
    }

    /// Every partition is the one the model knows: a changed identity is a purge or a
    /// re-creation the model did not see.
    fn check_nonces(&self) -> Checked<()> {
        for (key, model) in &self.parts {
            let nonce = self.node_nonce(*key);
            if nonce != Some(model.nonce) {
                return Err(violation(INV_METADATA, format!("partition {key:?} has identity nonce {nonce:?}, the model knows {:#x}: an acknowledged partition was replaced", model.nonce)));
            }
        }
        Ok(())
    }

    /// Partition models follow an applied operation.
    fn adopt(&mut self, effect: &Effect) {
        for key in effect.removed.iter().chain(&effect.fresh) {
            // Deleted, or made again (a purge recreates a missing directory).
            self.removed.remove(key);
        }
        for key in &effect.removed {
            self.parts.remove(key);
        }
        for key in &effect.fresh {
            let topic = self
                .model
                .topic(key.0, key.1)
                .expect("fresh partitions have a topic")
                .clone();
            let mut fresh = PartModel::new(&topic);
            fresh.nonce = self.node_nonce(*key).unwrap_or_default();
            self.parts.insert(*key, fresh);
        }
        let model = &self.model;
        self.members.retain(|(s, t, g, _)| {
            model
                .topic(*s, *t)
                .is_some_and(|topic| topic.groups.contains_key(g))
        });
    }

    // Checks of partitions ------------------------------------------------------------------

    fn check_partitions(&mut self) -> Checked<()> {
        let keys: Vec<PartitionKey> = self
            .parts
            .keys()
            .copied()
            .filter(|k| !self.removed.contains(k))
            .collect();
        for key in keys {
            self.verify(key, true)?;
        }
        Ok(())
    }

    /// Reads partition `key` whole; after a boot also checks the stored offsets.
    fn verify(&mut self, key: PartitionKey, after_boot: bool) -> Checked<()> {
        let node = self.node.as_mut().expect("up");
        let partition = node.partition_for(key).map_err(|e| {
            violation(
                INV_METADATA,
                format!("partition {key:?} of the metadata is not served: {e}"),
            )
        })?;
        if let Some(reason) = partition.fence_reason() {
            return Err(violation(INV_JUSTIFIED, format!("partition {key:?} fenced with no fault on partition files in this scope: {reason}")));
        }
        let log_start = partition.log_start().expect("open");
        let mut all = Vec::new();
        let mut next = 0;
        loop {
            let polled = partition.poll(PollFrom::Offset(next), 500).map_err(|e| {
                violation(INV_NO_LOSS, format!("partition {key:?}: read failed: {e}"))
            })?;
            let messages = decode(&polled, true)?;
            let Some(last) = messages.last() else { break };
            next = last.offset + 1;
            all.extend(messages);
        }
        let model = self.parts.get_mut(&key).expect("modelled");
        if log_start < model.log_start || (log_start > model.log_start && !model.log_start_unknown)
        {
            return Err(violation(INV_RETENTION, format!("partition {key:?}: the log starts at {log_start}, the model says {} (the log start only moves forward, by a deletion)", model.log_start)));
        }
        if log_start > model.log_start {
            model.log_start = log_start;
            model.messages = model.messages.split_off(&log_start);
            model.batches = model.batches.split_off(&log_start);
        }
        model.log_start_unknown = false;
        for (i, m) in all.iter().enumerate() {
            if m.offset != log_start + i as u64 {
                return Err(violation(INV_PREFIX, format!("partition {key:?}: not gapless from {log_start}: position {i} holds offset {}", m.offset)));
            }
            if let Some(id) = model.messages.get(&m.offset) {
                if *id != m.id {
                    return Err(violation(
                        INV_PREFIX,
                        format!(
                            "partition {key:?}: offset {} holds {:#x}, acknowledged for {id:#x}",
                            m.offset, m.id
                        ),
                    ));
                }
            }
        }
        let end = log_start + all.len() as u64;
        if model.persisted {
            if let Some((lost, _)) = model.messages.range(end..).next() {
                return Err(violation(INV_NO_LOSS, format!("partition {key:?}: persisted offset {lost} was acknowledged, the log ends at {end}")));
            }
        } else if after_boot {
            // Replicated: an unflushed suffix may be gone.
            model.messages.split_off(&end);
            model.batches.split_off(&end);
        }
        for m in &all {
            model.messages.insert(m.offset, m.id);
        }
        if after_boot {
            self.check_offsets(key, end)?;
        }
        Ok(())
    }

    /// Invariant 5 after a boot.
    fn check_offsets(&mut self, key: PartitionKey, end: u64) -> Checked<()> {
        let node = self.node.as_mut().expect("up");
        let model = self.parts.get_mut(&key).expect("modelled");
        let last = end
            .checked_sub(1)
            .filter(|&l| l >= model.log_start || model.log_start == 0);
        let floor = model.log_start.saturating_sub(1);
        let clamp = |v: Option<u64>| match (v, end.checked_sub(1)) {
            (Some(v), Some(l)) => Some(v.min(l).max(floor)),
            _ => None,
        };
        let partition = node.partition_for(key).expect("served");
        let consumers: Vec<u32> = model.offsets.keys().copied().collect();
        for consumer in consumers {
            let got = partition
                .get_offset(cairn_engine::partition::ConsumerId::consumer(consumer))
                .map_err(|e| {
                    violation(
                        INV_OFFSETS,
                        format!(
                            "partition {key:?}: reading consumer {consumer}'s offset failed: {e}"
                        ),
                    )
                })?;
            if got.is_some_and(|g| end == 0 || g > end - 1) {
                return Err(violation(INV_OFFSETS, format!("partition {key:?}: consumer {consumer} offset {got:?} beyond the last offset {last:?}")));
            }
            let (acked, candidates) = model.offsets.get(&consumer).cloned().expect("listed");
            let allowed: BTreeSet<Option<u64>> = if model.offsets_persisted {
                candidates
                    .iter()
                    .chain([&acked])
                    .map(|v| clamp(*v))
                    .collect()
            } else {
                candidates
                    .iter()
                    .chain([&acked, &None])
                    .map(|v| clamp(*v))
                    .collect()
            };
            if !allowed.contains(&got) {
                return Err(violation(INV_OFFSETS, format!("partition {key:?}: consumer {consumer} reads {got:?} after boot; the model allows {allowed:?}")));
            }
            model.offsets.insert(consumer, (got, BTreeSet::new()));
        }
        Ok(())
    }

    // The workload -------------------------------------------------------------------------

    fn name(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        // Now and then a name already taken: the node must refuse it as the model does.
        if self.rng.gen_bool(0.1) && self.next_name > 1 {
            return format!("{prefix}{}", self.rng.gen_range(0..self.next_name));
        }
        format!("{prefix}{}", self.next_name)
    }

    fn pick_topic(&mut self) -> Option<(u32, u32)> {
        let all: Vec<(u32, u32)> = self
            .model
            .streams
            .iter()
            .flat_map(|(s, st)| st.topics.keys().map(move |t| (*s, *t)))
            .collect();
        (!all.is_empty()).then(|| all[self.rng.gen_range(0..all.len())])
    }

    fn pick_partition(&mut self) -> Option<PartitionKey> {
        let all: Vec<PartitionKey> = self.parts.keys().copied().collect();
        (!all.is_empty()).then(|| all[self.rng.gen_range(0..all.len())])
    }

    fn admin_op(&mut self) -> Option<AdminOp> {
        let streams: Vec<u32> = self.model.streams.keys().copied().collect();
        let topics = self
            .model
            .streams
            .values()
            .map(|s| s.topics.len())
            .sum::<usize>();
        let roll = self.rng.gen_range(0..100);
        let any_stream = |w: &mut Self| {
            (!streams.is_empty()).then(|| streams[w.rng.gen_range(0..streams.len())])
        };
        Some(match roll {
            0..=14 if streams.len() < MAX_STREAMS => AdminOp::CreateStream(self.name("s")),
            0..=39 if topics < MAX_TOPICS * 2 => {
                let stream = any_stream(self)?;
                let expiry = self.profile.expiries[self.rng.gen_range(0..3)];
                AdminOp::CreateTopic {
                    stream,
                    name: self.name("t"),
                    partitions: self.rng.gen_range(0..=MAX_PARTITIONS),
                    persisted: self.rng.gen_bool(0.6),
                    offsets_persisted: self.rng.gen_bool(0.6),
                    expiry,
                    max_size: [0, 1, 3 << 20][self.rng.gen_range(0..3)],
                }
            }
            40..=47 => {
                let (s, t) = self.pick_topic()?;
                let n = self.rng.gen_range(1..=2);
                match self.model.topic(s, t)?.partitions + n <= MAX_PARTITIONS + 1 {
                    true => AdminOp::CreatePartitions(s, t, n),
                    false => AdminOp::DeletePartitions(s, t, n),
                }
            }
            48..=52 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::DeletePartitions(s, t, self.rng.gen_range(1..=2))
            }
            53..=60 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::CreateGroup(s, t, self.name("g"))
            }
            61..=64 => {
                let (s, t) = self.pick_topic()?;
                let groups: Vec<u32> = self.model.topic(s, t)?.groups.keys().copied().collect();
                AdminOp::DeleteGroup(s, t, *groups.first()?)
            }
            65..=70 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::UpdateTopic {
                    stream: s,
                    topic: t,
                    expiry: self.profile.expiries[self.rng.gen_range(0..3)],
                    max_size: [0, 1, 3 << 20][self.rng.gen_range(0..3)],
                }
            }
            71..=74 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::PurgeTopic(s, t)
            }
            75..=77 => AdminOp::PurgeStream(any_stream(self)?),
            78..=81 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::DeleteTopic(s, t)
            }
            82..=84 => AdminOp::DeleteStream(any_stream(self)?),
            85..=88 => {
                let s = any_stream(self)?;
                AdminOp::RenameStream(s, self.name("s"))
            }
            89..=94 => AdminOp::CreateUser(self.name("user")),
            _ => {
                let users: Vec<u32> = self.model.users.keys().copied().collect();
                AdminOp::DeleteUser(users[self.rng.gen_range(0..users.len())])
            }
        })
    }

    fn run_admin(node: &mut Node, op: &AdminOp) -> Result<Option<u32>, NodeError> {
        let o = Origin::default();
        match op {
            AdminOp::CreateStream(name) => node.create_stream(name, o).map(Some),
            AdminOp::RenameStream(s, name) => node.update_stream(&sid(*s), name, o).map(|_| None),
            AdminOp::DeleteStream(s) => node.delete_stream(&sid(*s), o).map(|_| None),
            AdminOp::PurgeStream(s) => node.purge_stream(&sid(*s), o).map(|_| None),
            AdminOp::CreateTopic {
                stream,
                name,
                partitions,
                persisted,
                offsets_persisted,
                expiry,
                max_size,
            } => node
                .create_topic(
                    &sid(*stream),
                    name,
                    *partitions,
                    options(*persisted, *offsets_persisted, *expiry, *max_size),
                    o,
                )
                .map(Some),
            AdminOp::UpdateTopic {
                stream,
                topic,
                expiry,
                max_size,
            } => {
                let name = node.state().topic(*stream, *topic).name.clone();
                let mut buf = BytesMut::new();
                let (e, m) = (expiry.to_le_bytes(), max_size.to_le_bytes());
                iggy_binary_protocol::encode_user_headers(
                    &[
                        (2, b"message_expiry", 12, &e),
                        (2, b"max_topic_size", 12, &m),
                    ],
                    &mut buf,
                );
                let opts = WireOptions::from_bytes(buf.freeze()).expect("valid");
                node.update_topic(&sid(*stream), &sid(*topic), &name, opts, o)
                    .map(|_| None)
            }
            AdminOp::DeleteTopic(s, t) => node.delete_topic(&sid(*s), &sid(*t), o).map(|_| None),
            AdminOp::PurgeTopic(s, t) => node.purge_topic(&sid(*s), &sid(*t), o).map(|_| None),
            AdminOp::CreatePartitions(s, t, n) => node
                .create_partitions(&sid(*s), &sid(*t), *n, o)
                .map(|_| None),
            AdminOp::DeletePartitions(s, t, n) => node
                .delete_partitions(&sid(*s), &sid(*t), *n, o)
                .map(|_| None),
            AdminOp::CreateGroup(s, t, name) => {
                node.create_group(&sid(*s), &sid(*t), name, o).map(Some)
            }
            AdminOp::DeleteGroup(s, t, g) => node
                .delete_group(&sid(*s), &sid(*t), &sid(*g), o)
                .map(|_| None),
            AdminOp::CreateUser(name) => node.create_user(name, "password", 1, None, o).map(Some),
            AdminOp::DeleteUser(id) => node.delete_user(&sid(*id), o).map(|_| None),
        }
    }

    /// One admin operation, judged against the model.
    pub fn admin(&mut self) -> Checked<()> {
        let Some(op) = self.admin_op() else {
            return Ok(());
        };
        self.perform(op)
    }

    /// Runs `op` on the node and holds the answer to the model's.
    fn perform(&mut self, op: AdminOp) -> Checked<()> {
        let mut expected = self.model.clone();
        let predicted = expected.apply(&op);
        let node = self.node.as_mut().expect("up");
        let result = Self::run_admin(node, &op);
        self.trace.event(format!("admin {op:?} -> {result:?}"));
        match (result, predicted) {
            (Ok(created), Ok(effect)) => {
                if created.is_some() && created != effect.created {
                    return Err(violation(
                        INV_METADATA,
                        format!(
                            "{op:?} created id {created:?}, the lowest free id is {:?}",
                            effect.created
                        ),
                    ));
                }
                self.model = expected;
                self.adopt(&effect);
                if matches!(
                    op,
                    AdminOp::DeleteTopic(..) | AdminOp::DeleteStream(..) | AdminOp::DeleteGroup(..)
                ) {
                    self.decision("EntityDeleted");
                }
            }
            (Err(NodeError::MetadataFailed(_)), Ok(_)) => {
                self.in_doubt = Some(op);
                self.stop = Some(self.rng.gen_bool(0.5) && self.profile.power_loss > 0.0);
            }
            (Err(NodeError::MetadataFailed(_)), Err(())) => {
                self.stop = Some(false);
            }
            (Err(_), Err(())) => {}
            (Ok(_), Err(())) => {
                return Err(violation(INV_METADATA, format!("the node accepted {op:?}, which the model refuses (duplicate name or missing entity)")));
            }
            (Err(e), Ok(_)) if self.disk.is_crashed() => {
                let _ = e;
                self.in_doubt = Some(op);
                self.stop = Some(false);
            }
            (Err(e), Ok(_)) => {
                return Err(violation(
                    INV_METADATA,
                    format!("the node refused {op:?} ({e}), which the model accepts"),
                ));
            }
        }
        Ok(())
    }

    fn batch(&mut self, count: usize) -> (BytesMut, Vec<u128>) {
        let mut builder = BatchBuilder::new(self.clock.now_nanos() / 1000);
        let mut ids = Vec::with_capacity(count);
        for _ in 0..count {
            let size = self.rng.gen_range(0..=self.profile.max_payload);
            let mut payload = vec![0u8; size];
            self.rng.fill(&mut payload[..]);
            let id = self.next_id;
            self.next_id += 1;
            builder.push(id, 0, &payload, b"");
            ids.push(id);
        }
        (builder.build(), ids)
    }

    /// A producer's send.
    pub fn produce(&mut self) -> Checked<()> {
        let Some((s, t)) = self.pick_topic() else {
            return Ok(());
        };
        let partitions = self.model.topic(s, t).expect("picked").partitions;
        let partitioning = match self.rng.gen_range(0..3) {
            0 if partitions > 0 => WirePartitioning::PartitionId(self.rng.gen_range(0..partitions)),
            1 => WirePartitioning::MessagesKey(vec![self.rng.gen(); 4]),
            _ => WirePartitioning::Balanced,
        };
        let count = self.rng.gen_range(1..=8);
        let (batch, ids) = self.batch(count);
        let node = self.node.as_mut().expect("up");
        match node.send(&sid(s), &sid(t), &partitioning, batch) {
            Ok(sent) => {
                let key = (s, t, sent.partition);
                let model = self.parts.get_mut(&key).ok_or_else(|| {
                    violation(
                        INV_METADATA,
                        format!("a send landed in {key:?}, which the model does not have"),
                    )
                })?;
                for (i, id) in ids.iter().enumerate() {
                    model.messages.insert(sent.ack.base_offset + i as u64, *id);
                }
                model
                    .batches
                    .insert(sent.ack.base_offset, (ids.len() as u32, sent.ack.timestamp));
                self.report.acked_messages += ids.len() as u64;
                self.trace.event(format!(
                    "send {key:?} -> offsets {}..{}",
                    sent.ack.base_offset,
                    sent.ack.base_offset + ids.len() as u64
                ));
            }
            Err(NodeError::PartitionNotFound { .. }) if partitions == 0 => {}
            Err(e) if self.fenced_by_removal(&e, s, t) => {}
            Err(e) if self.disk.is_crashed() => {
                self.trace.event(format!("send failed in a crash: {e}"));
                self.stop = Some(false);
            }
            Err(e) => {
                return Err(violation(
                    INV_LIVENESS,
                    format!("a send to {s}/{t} failed with no fault: {e}"),
                ))
            }
        }
        Ok(())
    }

    /// A consumer's round: a poll checked against the model, an offset store, a group move.
    pub fn consume(&mut self) -> Checked<()> {
        match self.rng.gen_range(0..10) {
            0..=4 => self.poll(),
            5..=7 => self.store_offset(),
            _ => self.group_move(),
        }
    }

    /// The error a partition of topic `s`/`t` whose directory an operator removed answers.
    fn fenced_by_removal(&self, error: &NodeError, s: u32, t: u32) -> bool {
        use cairn_engine::partition::{FenceReason, PartitionError};
        matches!(
            error,
            NodeError::Partition(PartitionError::Fenced(FenceReason::DirectoryMissing { .. }))
        ) && self.removed.iter().any(|k| (k.0, k.1) == (s, t))
    }

    fn pick_serving(&mut self) -> Option<PartitionKey> {
        self.pick_partition().filter(|k| !self.removed.contains(k))
    }

    fn poll(&mut self) -> Checked<()> {
        let Some(key) = self.pick_serving() else {
            return Ok(());
        };
        let node = self.node.as_mut().expect("up");
        let consumer = WireConsumer::consumer(sid(self.rng.gen_range(0..3)));
        let strategy = match self.rng.gen_range(0..3) {
            0 => WirePollingStrategy { kind: 3, value: 0 },
            1 => WirePollingStrategy { kind: 5, value: 0 },
            _ => WirePollingStrategy {
                kind: 1,
                value: self.rng.gen_range(0..200),
            },
        };
        let polled = match node.poll(
            &consumer,
            0,
            &sid(key.0),
            &sid(key.1),
            Some(key.2),
            &strategy,
            50,
            false,
        ) {
            Ok(Some(polled)) => polled,
            Ok(None) => return Ok(()),
            Err(e) if self.disk.is_crashed() => {
                self.trace.event(format!("poll failed in a crash: {e}"));
                self.stop = Some(false);
                return Ok(());
            }
            Err(e) => {
                return Err(violation(
                    INV_LIVENESS,
                    format!("a poll of {key:?} failed with no fault: {e}"),
                ))
            }
        };
        let messages = decode(&polled, true)?;
        let model = self.parts.get(&key).expect("picked");
        for m in &messages {
            if m.offset < model.log_start && !model.log_start_unknown {
                return Err(violation(
                    INV_RETENTION,
                    format!(
                        "partition {key:?}: a poll served offset {} below the log start {}",
                        m.offset, model.log_start
                    ),
                ));
            }
            if let Some(id) = model.messages.get(&m.offset) {
                if *id != m.id {
                    return Err(violation(INV_PREFIX, format!("partition {key:?}: a poll read {:#x} at offset {}, acknowledged for {id:#x}", m.id, m.offset)));
                }
            }
        }
        Ok(())
    }

    fn store_offset(&mut self) -> Checked<()> {
        let Some(key) = self.pick_serving() else {
            return Ok(());
        };
        let model = self.parts.get(&key).expect("picked");
        let end = model.acked_end();
        if end == 0 {
            return Ok(());
        }
        let offset = self.rng.gen_range(model.log_start.saturating_sub(1)..end);
        let consumer_id = self.rng.gen_range(0..3);
        let node = self.node.as_mut().expect("up");
        let result = node.store_offset(
            &WireConsumer::consumer(sid(consumer_id)),
            &sid(key.0),
            &sid(key.1),
            Some(key.2),
            offset,
        );
        self.trace.event(format!(
            "store {key:?} consumer {consumer_id} = {offset} -> {result:?}"
        ));
        let model = self.parts.get_mut(&key).expect("picked");
        let entry = model
            .offsets
            .entry(consumer_id)
            .or_insert((None, BTreeSet::new()));
        match result {
            Ok(()) => {
                entry.1.insert(entry.0);
                entry.0 = Some(offset);
            }
            Err(e) if self.disk.is_crashed() => {
                entry.1.insert(Some(offset));
                self.trace.event(format!("store failed in a crash: {e}"));
                self.stop = Some(false);
            }
            // Replicated partitions acknowledge before flushing: the visible end may be
            // below what the model counts as acknowledged only under persisted.
            Err(NodeError::Partition(
                cairn_engine::partition::PartitionError::OffsetBeyondEnd { .. },
            )) => {}
            Err(e) => {
                return Err(violation(
                    INV_OFFSETS,
                    format!("storing offset {offset} in {key:?} failed with no fault: {e}"),
                ))
            }
        }
        Ok(())
    }

    fn group_move(&mut self) -> Checked<()> {
        let Some((s, t)) = self.pick_topic() else {
            return Ok(());
        };
        let groups: Vec<u32> = self
            .model
            .topic(s, t)
            .expect("picked")
            .groups
            .keys()
            .copied()
            .collect();
        let Some(&g) = groups.first() else {
            return Ok(());
        };
        let client = u128::from(self.rng.gen_range(1..4u8));
        let node = self.node.as_mut().expect("up");
        let member = self.members.contains(&(s, t, g, client));
        let group = sid(g);
        let result = match self.rng.gen_range(0..4) {
            0 if !member => node
                .join_group(&sid(s), &sid(t), &group, client)
                .map(|_| "join"),
            1 if member => node
                .leave_group(&sid(s), &sid(t), &group, client)
                .map(|_| "leave"),
            2 => {
                node.disconnect(client);
                Ok("disconnect")
            }
            _ if member => {
                let consumer = WireConsumer {
                    kind: KIND_CONSUMER_GROUP,
                    id: group.clone(),
                };
                let strategy = WirePollingStrategy { kind: 5, value: 0 };
                node.poll(
                    &consumer,
                    client,
                    &sid(s),
                    &sid(t),
                    None,
                    &strategy,
                    20,
                    true,
                )
                .map(|_| "poll")
            }
            _ => return Ok(()),
        };
        match result {
            Ok("join") => {
                self.members.insert((s, t, g, client));
                self.decision("GroupRebalance");
            }
            Ok("leave") => {
                self.members.remove(&(s, t, g, client));
                self.decision("GroupRebalance");
            }
            Ok("disconnect") => {
                let before = self.members.len();
                self.members.retain(|m| m.3 != client);
                if self.members.len() < before {
                    self.decision("GroupRebalance");
                }
            }
            Ok(_) => {}
            Err(e) if self.fenced_by_removal(&e, s, t) => {}
            Err(e) if self.disk.is_crashed() => {
                self.trace.event(format!("group op failed in a crash: {e}"));
                self.stop = Some(false);
            }
            Err(e) => {
                return Err(violation(
                    INV_LIVENESS,
                    format!("a group operation on {s}/{t}/{g} by {client} failed: {e}"),
                ))
            }
        }
        // Every partition has exactly one owner among the members the model knows.
        let node = self.node.as_ref().expect("up");
        if let Ok(members) = node.group_members(&sid(s), &sid(t), &group) {
            let partitions = self.model.topic(s, t).expect("picked").partitions;
            let mut owned: Vec<u32> = members.iter().flat_map(|(_, p)| p.clone()).collect();
            owned.sort_unstable();
            let expected: Vec<u32> = if members.is_empty() {
                vec![]
            } else {
                (0..partitions).collect()
            };
            if owned != expected {
                return Err(violation(INV_METADATA, format!("group {s}/{t}/{g}: partitions owned {owned:?}, expected each of {expected:?} exactly once")));
            }
        }
        Ok(())
    }

    /// A cleaner pass: every deletion checked against the rules.
    pub fn clean(&mut self) -> Checked<()> {
        self.max_wall = self.max_wall.max(self.env.clock.wall_micros());
        let wall = self.max_wall;
        let node = self.node.as_mut().expect("up");
        let before: BTreeMap<PartitionKey, Vec<u64>> = self
            .parts
            .keys()
            .map(|k| {
                (
                    *k,
                    node.partition(*k)
                        .and_then(|p| p.segment_starts().ok())
                        .unwrap_or_default(),
                )
            })
            .collect();
        // A crash armed here strikes only if the pass deletes something (nothing else in a
        // pass mutates the disk), so its rate is per deleting pass, not per profile.
        if self.faulty && self.rng.gen_bool(0.25) {
            // A crash inside the pass: between a new log start's record and the unlinks.
            let n = self.rng.gen_range(0..4);
            self.disk.arm_crash(n);
            self.trace
                .event(format!("fault crash armed inside the cleaner at +{n}"));
        }
        let node = self.node.as_mut().expect("up");
        let deletions = node.clean();
        self.disk.disarm_crash();
        if self.disk.is_crashed() {
            for model in self.parts.values_mut() {
                model.log_start_unknown = true;
            }
            self.trace.event("cleaner crashed");
            self.stop = Some(false);
            return Ok(());
        }
        for d in &deletions {
            self.check_deletion(d, &before, wall)?;
        }
        let node = self.node.as_ref().expect("up");
        for (key, model) in &mut self.parts {
            if self.removed.contains(key) {
                continue;
            }
            let Some(partition) = node.partition(*key) else {
                continue;
            };
            let start = partition.log_start().unwrap_or(0);
            if start < model.log_start {
                return Err(violation(
                    INV_RETENTION,
                    format!(
                        "partition {key:?}: the log start moved back from {} to {start}",
                        model.log_start
                    ),
                ));
            }
            model.log_start = start;
            model.messages = model.messages.split_off(&start);
            model.batches = model.batches.split_off(&start);
        }
        if !deletions.is_empty() {
            self.trace
                .event(format!("cleaner deleted {} segments", deletions.len()));
        }
        Ok(())
    }

    fn check_deletion(
        &mut self,
        d: &Deletion,
        before: &BTreeMap<PartitionKey, Vec<u64>>,
        wall: u64,
    ) -> Checked<()> {
        self.decision("RetentionDeletion");
        let key = d.partition;
        let starts = before.get(&key).cloned().unwrap_or_default();
        let Some(position) = starts.iter().position(|&s| s == d.segment.start_offset) else {
            return Err(violation(
                INV_RETENTION,
                format!(
                    "partition {key:?}: deleted a segment at {} that was not there",
                    d.segment.start_offset
                ),
            ));
        };
        if position + 1 >= starts.len() {
            return Err(violation(
                INV_RETENTION,
                format!(
                    "partition {key:?}: deleted the active segment at {}",
                    d.segment.start_offset
                ),
            ));
        }
        let end = starts[position + 1];
        let topic = self
            .model
            .topic(key.0, key.1)
            .expect("partition of a topic")
            .clone();
        let policy = Policy::for_topic(topic.expiry, topic.max_size, topic.partitions, 1 << 20);
        let model = self.parts.get(&key).expect("modelled");
        let justified = match d.reason {
            Reason::Expired => {
                // The stamps producers were acknowledged with, in that segment.
                let newest = model
                    .batches
                    .range(d.segment.start_offset..end)
                    .map(|(_, (_, ts))| *ts)
                    .max();
                topic.expiry > 0
                    && d.now <= wall
                    && newest.is_none_or(|n| d.now.saturating_sub(n) > topic.expiry)
            }
            Reason::OverSize => policy.budget > 0 && d.sealed_bytes > policy.budget,
            Reason::Requested => false,
        };
        if !justified {
            return Err(violation(INV_RETENTION, format!("partition {key:?}: deleted segment {}..{end} ({:?}) though its rule did not hold (expiry {} µs, budget {} B, sealed {} B, node time {}, wall {wall})", d.segment.start_offset, d.reason, topic.expiry, policy.budget, d.sealed_bytes, d.now)));
        }
        Ok(())
    }

    // Crashes, power losses, damage --------------------------------------------------------

    /// Takes the node down; while down, metadata files may be damaged; boots again.
    /// Where metadata damage may strike while the node is down: any metadata file, except
    /// the journal while its tail is exposed (`journal_tail_exposed`). Damage to an entry
    /// above the surviving record's journal end reads as a torn tail, and boot drops it with
    /// the acknowledged ops in it: with the record lost to a lie, that disk is the disk
    /// before those ops, which one disk cannot tell and the oracle does not model as a
    /// rollback (as with lies lost on both the journal and the record, see `nemesis`).
    fn metadata_damage_target(&mut self) -> PathBuf {
        let dir = Path::new(NODE_ROOT).join("metadata");
        if !self.journal_tail_exposed {
            return dir;
        }
        let files: Vec<PathBuf> = self
            .disk
            .paths_under(&dir)
            .into_iter()
            .filter(|p| *p != dir && !p.ends_with(cairn_engine::metadata::JOURNAL))
            .collect();
        assert!(!files.is_empty(), "a booted node has superblock slots");
        files[self.rng.gen_range(0..files.len())].clone()
    }

    pub fn restart(&mut self, power: bool) -> Checked<()> {
        self.restarts += 1;
        self.report.restarts += 1;
        self.node = None;
        // Membership is a live session's: it does not outlive the process.
        self.members.clear();
        self.metadata_lies_lost.clear();
        if power {
            let dir = Path::new(NODE_ROOT).join("metadata");
            for path in self.disk.paths_under(&dir) {
                if self.disk.has_lied_pages(&path) {
                    self.journal_tail_exposed |= path.to_string_lossy().contains("superblock");
                    self.metadata_lies_lost.insert(path);
                }
            }
            self.disk.power_loss();
            self.event("fault power loss");
            for model in self.parts.values_mut() {
                for (acked, candidates) in model.offsets.values_mut() {
                    candidates.insert(*acked);
                }
            }
        } else {
            self.disk.process_crash();
            self.event("fault process crash");
        }
        if self.faulty && !self.parts.is_empty() && self.chance(self.profile.dir_removal) {
            let keys: Vec<PartitionKey> = self.parts.keys().copied().collect();
            let key = keys[self.rng.gen_range(0..keys.len())];
            self.remove_partition_dir(key);
        }
        if self.faulty && self.chance(self.profile.metadata_damage) {
            let dir = self.metadata_damage_target();
            if self.rng.gen_bool(0.7) {
                if let Some((path, at)) = self.disk.flip_random_bit(&dir) {
                    self.event(format!("fault bit flip {} at {at}", path.display()));
                }
            } else if let Some((path, at)) = self.disk.add_bad_sector(&dir) {
                self.event(format!("fault bad sector {} at {at}", path.display()));
            }
        }
        self.boot()?;
        if self.disk.is_crashed() {
            // The boot itself crashed: down again.
            return self.restart(false);
        }
        Ok(())
    }

    /// An operator removes a partition's directory (durably) while the node is down.
    fn remove_partition_dir(&mut self, key: PartitionKey) {
        let dir = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), key.0, key.1, key.2);
        if cairn_engine::env::Disk::exists(&self.disk, &dir).unwrap_or(false) {
            cairn_engine::env::Disk::remove_dir_all(&self.disk, &dir).expect("remove");
            let parent = dir.parent().expect("parent");
            cairn_engine::env::Disk::sync_dir(&self.disk, parent).expect("sync");
            self.removed.insert(key);
            self.event(format!("fault an operator removed {}", dir.display()));
        }
    }

    /// After every operation: the faults of the profile.
    pub fn nemesis(&mut self) {
        if self.stop.is_some() || self.violation.is_some() || !self.faulty {
            return;
        }
        self.max_wall = self.max_wall.max(self.env.clock.wall_micros());
        if self.chance(self.profile.clock_jump) {
            let jump: i64 = self.rng.gen_range(-86_400_000_000..86_400_000_000);
            self.clock.jump_wall(jump);
            self.disk
                .record(FaultKind::ClockJump, None, format!("{jump} us"));
            self.event(format!("fault clock jump {jump} us"));
        }
        if self.chance(self.profile.metadata_lie) {
            // The journal's sync, or a superblock record's (losing it rewinds the applied op:
            // boot redoes directory work that may have finished long ago). One of them per
            // run (a scripted lie outlives a power loss): a journal entry and the record
            // covering it both lost to lies
            // leave the disk byte for byte as it was before the op, which no single-disk
            // design can tell from never having done it. The partition oracle excuses such a
            // rewind; this one does not model rolling back acknowledged metadata ops (their
            // directory work stays done), so the pair is not injected.
            let pick = self.rng.gen_range(0..2);
            let target = *self
                .metadata_lie_target
                .get_or_insert(["journal.wal", "metadata/superblock"][pick]);
            self.disk
                .script(cairn_faults::Scripted::LieOnSync(target.into()));
            self.event(format!("fault the next sync of {target} lies"));
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

    /// Faults healed: the node must boot and serve every partition and a new topic.
    pub fn liveness(&mut self) -> Checked<()> {
        self.event("phase liveness: faults healed");
        self.disk.heal();
        self.disk.disarm_crash();
        self.faulty = false;
        let power = self.rng.gen_bool(0.5);
        self.restart(power)?;
        if self.refused {
            return Ok(());
        }
        let node = self.node.as_mut().expect("up");
        let s = node
            .create_stream(&format!("live{}", self.next_name), Origin::default())
            .map_err(|e| {
                violation(
                    INV_LIVENESS,
                    format!("creating a stream after faults healed: {e}"),
                )
            })?;
        let mut expected = self.model.clone();
        let effect = expected
            .apply(&AdminOp::CreateStream(format!("live{}", self.next_name)))
            .map_err(|_| violation(INV_METADATA, "the liveness stream name is taken".into()))?;
        if effect.created != Some(s) {
            return Err(violation(
                INV_METADATA,
                format!(
                    "the liveness stream got id {s}, the lowest free is {:?}",
                    effect.created
                ),
            ));
        }
        self.model = expected;
        let keys: Vec<PartitionKey> = self
            .parts
            .keys()
            .copied()
            .filter(|k| !self.removed.contains(k))
            .collect();
        for key in keys {
            let (batch, ids) = self.batch(1);
            let node = self.node.as_mut().expect("up");
            let sent = node
                .send(
                    &sid(key.0),
                    &sid(key.1),
                    &WirePartitioning::PartitionId(key.2),
                    batch,
                )
                .map_err(|e| {
                    violation(
                        INV_LIVENESS,
                        format!("partition {key:?}: a send failed after faults healed: {e}"),
                    )
                })?;
            self.parts
                .get_mut(&key)
                .expect("modelled")
                .messages
                .insert(sent.ack.base_offset, ids[0]);
            self.verify(key, false)?;
        }
        self.clean()
    }
}

// The run -----------------------------------------------------------------------------------

type Shared = Arc<Mutex<NodeWorld>>;

fn lock(world: &Shared) -> std::sync::MutexGuard<'_, NodeWorld> {
    world.lock().expect("world")
}

async fn think(world: &Shared, max: u64) -> bool {
    let (nanos, clock) = {
        let mut w = lock(world);
        if w.stop.is_some() || w.violation.is_some() {
            return false;
        }
        (w.rng.gen_range(0..max), w.clock.clone())
    };
    Clock::sleep(&clock, Duration::from_nanos(nanos)).await;
    let w = lock(world);
    w.stop.is_none() && w.violation.is_none()
}

fn step(world: &Shared, op: fn(&mut NodeWorld) -> Checked<()>) {
    let mut w = lock(world);
    if !w.is_up() || w.stop.is_some() || w.violation.is_some() {
        return;
    }
    if let Err(v) = op(&mut w) {
        w.fail(v);
        return;
    }
    if w.disk.is_crashed() && w.stop.is_none() {
        w.stop = Some(false);
    }
    w.ops += 1;
    if w.ops >= w.profile.steps && w.stop.is_none() {
        w.stop = Some(false);
        w.faulty = false;
    }
    w.nemesis();
}

fn spawn_actors(world: &Shared, executor: &Executor) {
    let handle = executor.handle();
    let (producers, think_max, cleaner_every) = {
        let w = lock(world);
        (
            w.profile.producers,
            w.profile.max_think_nanos,
            w.profile.cleaner_every_nanos,
        )
    };
    let spawn = |f: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| {
        cairn_engine::env::Tasks::spawn(&handle, f);
    };
    let w = world.clone();
    spawn(Box::pin(async move {
        while think(&w, think_max * 4).await {
            step(&w, NodeWorld::admin);
        }
    }));
    for _ in 0..producers {
        let w = world.clone();
        spawn(Box::pin(async move {
            while think(&w, think_max).await {
                step(&w, NodeWorld::produce);
            }
        }));
    }
    let w = world.clone();
    spawn(Box::pin(async move {
        while think(&w, think_max).await {
            step(&w, NodeWorld::consume);
        }
    }));
    let w = world.clone();
    spawn(Box::pin(async move {
        while think(&w, cleaner_every).await {
            step(&w, NodeWorld::clean);
        }
    }));
}

/// Runs one node-scope seed.
pub fn run(world: NodeWorld, mut executor: Executor) -> (RunReport, u64) {
    let world = Arc::new(Mutex::new(world));
    {
        let mut w = lock(&world);
        if let Err(v) = w.setup() {
            w.fail(v);
        }
    }
    loop {
        {
            let w = lock(&world);
            if w.violation.is_some() || w.refused || !w.faulty {
                break;
            }
        }
        spawn_actors(&world, &executor);
        let keep_going = || {
            let w = lock(&world);
            w.stop.is_none() && w.violation.is_none()
        };
        executor.run_while(MAX_EPOCH_POLLS, u64::MAX, &keep_going);
        executor.kill_all();
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
        if let Err(v) = w.restart(power) {
            w.fail(v);
            break;
        }
    }
    let mut w = lock(&world);
    if w.violation.is_none() && !w.refused {
        if let Err(v) = w.liveness() {
            w.fail(v);
        }
    }
    executor.kill_all();
    for record in w.disk.records() {
        *w.report.faults_fired.entry(record.kind).or_default() += 1;
    }
    if let Some(v) = w.violation.clone() {
        w.event(format!("VIOLATION {v}"));
    }
    let report = w
        .report
        .clone()
        .finished(w.violation.clone(), w.ops, &w.clock, &w.trace);
    (report, 0)
}

// Directed node scenarios ---------------------------------------------------------------------

/// One directed node scenario: its name, the decisions it must reach, and its body (the
/// world's oracle checks every boot and operation on the way).
pub struct NodeDirected {
    pub name: &'static str,
    pub expect: &'static [&'static str],
    pub run: fn() -> Checked<Vec<&'static str>>,
}

/// A node on a simulated disk with no random faults: each scenario injects its own.
fn directed_world(seed: u64) -> NodeWorld {
    let profile = crate::profile::Profile::from_seed(seed);
    let (disk, clock, _executor, env) = crate::run::sim_env(seed, &profile);
    disk.set_faults(cairn_faults::DiskFaults::default());
    let trace = Trace::new(false, clock.clone());
    let mut w = NodeWorld::new(seed, disk, clock, env, trace, RunReport::new(profile));
    w.faulty = false;
    // No checkpoint unless a scenario asks: each superblock record is then one op's.
    w.profile.checkpoint_bytes = 1 << 20;
    w
}

/// Creating topic "t" in stream 0: `persisted` messages and offsets, no retention.
fn persisted_topic(partitions: u32) -> AdminOp {
    AdminOp::CreateTopic {
        stream: 0,
        name: "t".into(),
        partitions,
        persisted: true,
        offsets_persisted: true,
        expiry: 0,
        max_size: 0,
    }
}

/// A node with stream 0 and a `persisted` topic 0 of `partitions` partitions.
fn with_persisted_topic(w: &mut NodeWorld, partitions: u32) -> Checked<()> {
    w.setup()?;
    w.perform(AdminOp::CreateStream("s".into()))?;
    w.perform(persisted_topic(partitions))
}

/// The superblock records of the next `ops` ops with directory work are lost at the next
/// power loss: each writes two (the journal's durable end before its work, the applied op
/// after), and their syncs lie.
fn lie_on_metadata_records(w: &mut NodeWorld, ops: usize) {
    for _ in 0..2 * ops {
        w.disk.script(cairn_faults::Scripted::LieOnSync(
            "metadata/superblock".into(),
        ));
    }
}

/// `batches` acknowledged sends, then a power loss that drops everything unsynced; the
/// decisions boot took.
fn produce_then_lose_power(w: &mut NodeWorld, batches: usize) -> Checked<Vec<&'static str>> {
    for _ in 0..batches {
        w.produce()?;
    }
    w.disk.set_fates(cairn_faults::Fates::DropAll);
    w.restart(true)?;
    Ok(decisions(w))
}

fn decisions(w: &NodeWorld) -> Vec<&'static str> {
    w.report.decisions.keys().copied().collect()
}

/// The superblock record after a topic's creation is lost (its sync lied, then the power
/// failed) after the new partition took acknowledged messages: boot replays the creation and
/// redoes its directory work, which must find the partition there and keep it.
fn a_create_redone_after_a_lost_record_keeps_its_messages() -> Checked<Vec<&'static str>> {
    let mut w = directed_world(0x4e0d_0001);
    w.setup()?;
    w.perform(AdminOp::CreateStream("s".into()))?;
    lie_on_metadata_records(&mut w, 1);
    w.perform(persisted_topic(1))?;
    produce_then_lose_power(&mut w, 4)
}

/// The records of a partition's removal and of its re-creation are both lost, after the
/// re-created partition took acknowledged messages: boot must not redo the removal.
fn a_removal_superseded_by_a_re_creation_is_not_redone() -> Checked<Vec<&'static str>> {
    let mut w = directed_world(0x4e0d_0003);
    with_persisted_topic(&mut w, 2)?;
    lie_on_metadata_records(&mut w, 2);
    w.perform(AdminOp::DeletePartitions(0, 0, 1))?;
    w.perform(AdminOp::CreatePartitions(0, 0, 1))?;
    produce_then_lose_power(&mut w, 6)
}

/// An operator removed a partition directory while the node was down: that partition is
/// fenced, never recreated empty; the others serve.
fn a_removed_partition_directory_is_fenced() -> Checked<Vec<&'static str>> {
    let mut w = directed_world(0x4e0d_0002);
    with_persisted_topic(&mut w, 2)?;
    for _ in 0..4 {
        w.produce()?;
    }
    w.node = None;
    w.remove_partition_dir((0, 0, 1));
    w.restart(false)?;
    Ok(decisions(&w))
}

/// The node crashes inside the directory work of a partition's removal, and rot then
/// strikes that op's journal entry: the entry lies below the durable end recorded before the
/// work began, so boot refuses. (Dropped as a torn tail, the op would be undone with its
/// work half done: a partition directory gone with no op that removed it.)
fn rot_in_an_entry_whose_work_began_is_refused() -> Checked<Vec<&'static str>> {
    let mut w = directed_world(0x4e0d_0004);
    with_persisted_topic(&mut w, 2)?;
    for _ in 0..4 {
        w.produce()?;
    }
    let journal = Path::new(NODE_ROOT).join("metadata").join("journal.wal");
    let journal_len = |w: &NodeWorld| w.disk.contents(&journal).map_or(0, |c| c.len() as u64);
    let before = journal_len(&w);
    w.disk
        .script(cairn_faults::Scripted::CrashOn("partitions/1".into()));
    w.perform(AdminOp::DeletePartitions(0, 0, 1))?;
    assert!(w.disk.is_crashed(), "the removal's work crashed");
    let after = journal_len(&w);
    assert!(after > before, "the removal was journaled before its work");
    w.node = None;
    w.disk.flip_bit_at(&journal, (before + after) / 2, 3);
    w.restart(false)?;
    Ok(decisions(&w))
}

/// Every directed node scenario.
pub const NODE_SCENARIOS: &[NodeDirected] = &[
    NodeDirected {
        name: "a_create_redone_after_a_lost_record_keeps_its_messages",
        expect: &["DirWorkRedone"],
        run: a_create_redone_after_a_lost_record_keeps_its_messages,
    },
    NodeDirected {
        name: "a_removal_superseded_by_a_re_creation_is_not_redone",
        expect: &["DirWorkRedone"],
        run: a_removal_superseded_by_a_re_creation_is_not_redone,
    },
    NodeDirected {
        name: "rot_in_an_entry_whose_work_began_is_refused",
        expect: &["BootRefused"],
        run: rot_in_an_entry_whose_work_began_is_refused,
    },
    NodeDirected {
        name: "a_removed_partition_directory_is_fenced",
        expect: &["DirectoryMissing"],
        run: a_removed_partition_directory_is_fenced,
    },
];

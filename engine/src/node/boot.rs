//! Boot: the metadata plan (refusal, or the state after snapshot and replay); the entity
//! tree brought in line with it by identity ([`super::tree`]: the work of journaled ops
//! redone, nothing removed that no journaled op deleted); the owners started; every
//! partition opened on its shard (the shards open theirs in parallel), an I/O error fencing
//! only its own partition; a deleted group's offsets removed, and offsets of groups that no
//! longer exist; while no op is journaled, the root user created (op 1).

use super::auth::Auth;
use super::exit_record::{self, ExitWatch, IoFailures, Why};
use super::groups::{GroupsOwner, Membership};
use super::meta_owner::MetaOwner;
use super::placement::Placement;
use super::recorder::Recorder;
use super::shard::{Shard, ShardRequest};
use super::tree::{self, Fate, TreePlan};
use super::view::{MetaView, ViewCell};
use super::work::{ancestors, remove_durably, sync_dirs};
use super::{Deletions, Inner, Node, NodeSettings, NodeStats};
use crate::env::chan::{channel, oneshot, Latch};
use crate::env::{device_section, settle, Env, PageCache};
use crate::error::Failure;
use crate::metadata::{self, MetaAction, MetaPlan, MetaRefusal, MetadataError, MetadataPlane};
use crate::metrics::LabeledCounts;
use crate::partition::recovery::{self, Action, Insurance, SlotRead};
use crate::partition::resources::PartitionResources;
use crate::partition::{
    partition_dir, ConsumerId, ConsumerKind, FenceReason, Opening, Outcome, Partition,
    PartitionError, PartitionHooks, PartitionIdentity, RecoveryPlan,
};
use crate::state::adoption::adoption;
use crate::state::{key_of, DirWork, MetaState, PartitionKey, ROOT_USER_ID, USER_ACTIVE};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// Why a node did not boot.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("boot refused: {0}")]
    Refused(MetaRefusal),
    /// The metadata plane or the root directory failed (an error confined to one partition
    /// fences that partition instead).
    #[error("boot failed: {0}")]
    Io(#[from] io::Error),
    /// The metadata plane failed planning or opening (no space, or an I/O error naming the
    /// operation and the file).
    #[error("boot failed: {0}")]
    Metadata(#[from] MetadataError),
    /// Creating a partition the journal created failed other than by I/O.
    #[error("boot failed: {0}")]
    Partition(#[source] PartitionError),
    #[error("boot failed: a shard stopped while opening its partitions")]
    ShardStopped,
    #[error("the data directory belongs to cluster {found:#x}, not to the configured cluster {configured:#x} (its name differs, or it was made by a single node): give this member an empty data directory")]
    OtherCluster { configured: u128, found: u128 },
    #[error("boot failed creating the root user: {0}")]
    RootUser(#[source] super::NodeError),
}

/// How one partition came up.
#[derive(Debug, Clone)]
pub enum PartitionBoot {
    /// Opened (or fenced) by its recovery plan.
    Opened(Box<RecoveryPlan>),
    /// Fenced before recovery: its directory is missing, another directory claims its
    /// identity, or opening it failed with an I/O error.
    Fenced(FenceReason),
}

impl PartitionBoot {
    pub fn fence(&self) -> Option<&FenceReason> {
        match self {
            PartitionBoot::Opened(plan) => plan.fence.as_ref(),
            PartitionBoot::Fenced(reason) => Some(reason),
        }
    }
}

/// What boot did besides the metadata plan.
#[derive(Debug, Clone, Default)]
pub struct BootReport {
    /// The entity tree: every partition path with what was found and decided, directories
    /// removed and kept.
    pub tree: TreePlan,
    /// Directories boot removed (journaled deletions and replacements).
    pub removed: Vec<PathBuf>,
    /// Every partition of the metadata and how it came up.
    pub partitions: Vec<(PartitionKey, PartitionBoot)>,
    /// Group offsets boot removed: (partition, group) of deleted groups.
    pub group_offsets_removed: Vec<(PartitionKey, u32)>,
    /// Whether the surveys read the page cache as it was, and why (`exit_record`).
    pub page_cache: Option<(PageCache, Why)>,
}

impl BootReport {
    /// Journaled directory work boot carried out (created, replaced, removed).
    pub fn redone(&self) -> usize {
        self.tree
            .paths
            .iter()
            .filter(|p| matches!(p.fate, Fate::Create | Fate::Replace | Fate::Remove))
            .count()
            + self.tree.remove_dirs.len()
    }
}

pub struct Booted {
    pub node: Node,
    pub plan: MetaPlan,
    pub report: BootReport,
}

/// The directory work of the ops after the recorded applied op (their work may not have
/// finished), in op order.
pub fn work_to_redo(plan: &MetaPlan) -> Vec<(u64, &DirWork)> {
    let applied = plan.record.map_or(0, |r| r.applied_op);
    plan.replayed
        .iter()
        .filter(|r| r.op > applied)
        .flat_map(|r| r.applied.work.iter().map(move |w| (r.op, w)))
        .collect()
}

/// Everything boot redoes, in order: [`work_to_redo`], then, when the plan finishes an
/// adoption, the work between the replayed state and the adopted one as the work of the
/// adoption's op (`state::adoption`), done against the adopted state.
pub fn work_to_finish(plan: &MetaPlan) -> Vec<(u64, DirWork)> {
    let mut redo: Vec<(u64, DirWork)> = work_to_redo(plan)
        .into_iter()
        .map(|(op, w)| (op, w.clone()))
        .collect();
    if let Some(a) = &plan.adopting {
        let work = adoption(&plan.state, &a.state).work;
        redo.extend(work.into_iter().map(|w| (a.op, w)));
    }
    redo
}

/// Group offsets boot removes in `key`: those of groups a journaled op deleted (unless a
/// later op created a group under that id, which only a later batch can: the removal was
/// done before it), and those of every group id the topic does not have.
pub fn doomed_group_offsets(
    state: &MetaState,
    redo: &[(u64, &DirWork)],
    key: PartitionKey,
    stored: &[ConsumerId],
) -> BTreeSet<u32> {
    let groups = state.find_topic(key.0, key.1).map(|t| &t.groups);
    let mut doomed = BTreeSet::new();
    for (op, work) in redo {
        if let DirWork::RemoveGroupOffsets { partition, group } = work {
            let recreated = groups
                .and_then(|g| g.get(group))
                .is_some_and(|g| g.created_op > *op);
            if *partition == key && !recreated {
                doomed.insert(*group);
            }
        }
    }
    for consumer in stored {
        if consumer.kind == ConsumerKind::Group
            && !groups.is_some_and(|g| g.contains_key(&consumer.id))
        {
            doomed.insert(consumer.id);
        }
    }
    doomed
}

/// What boot decided, per partition and for the metadata plane (fixed once the node is up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootMetrics {
    /// Partitions by recovery outcome (labels [`Outcome::NAMES`]); a partition whose recovery
    /// did several things counts once under each; one fenced before its recovery ran (its
    /// directory missing or claimed, or an I/O error opening it) counts as `Fenced`.
    pub partition_outcomes: LabeledCounts,
    /// Recovery actions carried out, one per segment, index or offset file repaired (labels
    /// [`Action::NAMES`]).
    pub partition_actions: LabeledCounts,
    /// Partitions fenced at boot, by reason (labels [`FenceReason::NAMES`]).
    pub partition_fences: LabeledCounts,
    /// The metadata plane was initialised (nothing was there).
    pub meta_first_boot: bool,
    /// Journal entries replayed after the snapshot.
    pub meta_replayed_ops: u64,
    /// Repairs of the metadata plane (labels [`MetaAction::NAMES`]).
    pub meta_actions: LabeledCounts,
    /// Partition paths under `streams/` by what boot did there (labels [`Fate::NAMES`]).
    pub tree_fates: LabeledCounts,
    /// Stored offsets of deleted consumer groups boot removed.
    pub group_offsets_removed: u64,
}

impl BootMetrics {
    pub(crate) fn new(plan: &MetaPlan, report: &BootReport) -> BootMetrics {
        let mut outcomes = LabeledCounts::zero(Outcome::NAMES);
        let mut actions = LabeledCounts::zero(Action::NAMES);
        let mut fences = LabeledCounts::zero(FenceReason::NAMES);
        for (_, boot) in &report.partitions {
            match boot {
                PartitionBoot::Opened(recovery) => {
                    for outcome in recovery.outcomes() {
                        outcomes.counts[outcome.index()] += 1;
                    }
                    for action in &recovery.actions {
                        actions.counts[action.index()] += 1;
                    }
                }
                PartitionBoot::Fenced(_) => outcomes.counts[Outcome::Fenced.index()] += 1,
            }
            if let Some(reason) = boot.fence() {
                fences.counts[reason.index()] += 1;
            }
        }
        let mut meta_actions = LabeledCounts::zero(MetaAction::NAMES);
        for action in &plan.actions {
            meta_actions.counts[action.index()] += 1;
        }
        let mut tree_fates = LabeledCounts::zero(Fate::NAMES);
        for path in &report.tree.paths {
            tree_fates.counts[path.fate.index()] += 1;
        }
        BootMetrics {
            partition_outcomes: outcomes,
            partition_actions: actions,
            partition_fences: fences,
            meta_first_boot: plan.first_boot,
            meta_replayed_ops: plan.replayed.len() as u64,
            meta_actions,
            tree_fates,
            group_offsets_removed: report.group_offsets_removed.len() as u64,
        }
    }
}

impl Node {
    /// Boots the node whose data lives under `root` and starts its owners.
    pub async fn start(
        env: &Env,
        root: &Path,
        settings: NodeSettings,
    ) -> Result<Booted, BootError> {
        // Every disk call of the node goes through this `Env` from here on: boot's own, and
        // every owner's (each is given a clone of it); the engine has no other way to the
        // disk. So the syncs it counts are all the syncs the node issues, whichever module
        // (partition log, superblock, recovery, offsets, metadata plane, directory work)
        // issued them.
        // A write or a sync failing anywhere, the exit cannot be clean (`exit_record`).
        let syncs = Arc::new(crate::metrics::SyncCounts::default());
        let failures = Arc::new(IoFailures::default());
        let watched = exit_record::watching(env.disk.clone(), failures.clone());
        let counted = Env {
            disk: crate::metrics::counting_disk(watched, syncs.clone()),
            ..env.clone()
        };
        let env = &counted;
        let disk = env.disk.as_ref();
        let span = tracing::info_span!("node_boot", root = %root.display());
        let exit =
            span.in_scope(|| ExitWatch::begin(disk, root, failures, settings.hooks.exit_verdict))?;
        // The surveys read through it: the device, or the cache when the record allows.
        let reading = exit.cache.reading(&env.disk);
        let mut plan = span.in_scope(|| metadata::plan(reading.as_ref(), root))?;
        plan = settings.hooks.metadata.plan(plan);
        if let Some(refusal) = &plan.refusal {
            tracing::error!(%refusal, "metadata refused boot");
            return Err(BootError::Refused(refusal.clone()));
        }
        if let (Some(configured), Some(record)) = (settings.meta.cluster, plan.record) {
            if record.cluster != configured {
                return Err(BootError::OtherCluster {
                    configured,
                    found: record.cluster,
                });
            }
        }
        let plane_env = Env {
            disk: settings.hooks.metadata.plane_disk(&env.disk),
            ..env.clone()
        };
        let mut plane = MetadataPlane::open(&plane_env, &plan, settings.meta)?;
        let redo = work_to_finish(&plan);
        if let Some(a) = &plan.adopting {
            tracing::info!(op = a.op, "finishing the adoption of a cluster's state");
            plan.state = a.state.clone();
        }
        let works: Vec<&DirWork> = redo.iter().map(|(_, w)| w).collect();
        let mut tree = tree::plan(reading.as_ref(), root, &plan.state, &works)?;
        let slots = std::mem::take(&mut tree.slots);
        let mut report = BootReport {
            removed: apply_tree(env, root, &plan.state, &tree, settings.hooks.partition)?,
            tree,
            page_cache: Some((exit.cache, exit.why)),
            ..BootReport::default()
        };
        match &plan.adopting {
            // Recorded once the shards removed the stale group offsets (`start_owners`):
            // a group deleted and made again under its id within the adoption keeps no
            // offset of the old one, which no later boot could tell from its own.
            Some(a) => (plan.last_op, plan.last_checksum) = (a.op, a.anchor),
            None => plane.record_applied()?,
        }
        settle(env).await;
        let redo: Vec<(u64, &DirWork)> = redo.iter().map(|(op, w)| (*op, w)).collect();
        let boot = (&plan, &redo[..], &mut report, slots);
        let node = start_owners(env, root, settings, plane, boot, (syncs, exit)).await?;
        // In a cluster the root user is the cluster's first decided op (proposed by a leader
        // that finds no user), not each member's own: each would salt its own hash.
        let clustered = node.inner.settings.meta.cluster.is_some();
        if node.inner.stopped.get().is_none() && plan.last_op == 0 && !clustered {
            node.inner.auth.prepare(env).await;
            let (username, password) = (
                node.inner.settings.root_username.clone(),
                node.inner.settings.root_password.clone(),
            );
            let id = node
                .client(0)
                .create_user(&username, &password, USER_ACTIVE, None)
                .await
                .map_err(BootError::RootUser)?;
            assert_eq!(id, ROOT_USER_ID, "the root user is the first");
        } else {
            node.inner.auth.prepare(env).await;
        }
        Ok(Booted { node, plan, report })
    }
}

/// Carries the tree plan out: journaled replacements and removals, new partitions created
/// empty, each changed directory synced once. Returns what it removed.
fn apply_tree(
    env: &Env,
    root: &Path,
    state: &MetaState,
    tree: &TreePlan,
    hooks: PartitionHooks,
) -> Result<Vec<PathBuf>, BootError> {
    let disk = env.disk.as_ref();
    let mut removed = Vec::new();
    let mut dirs = BTreeSet::new();
    for path in &tree.paths {
        let _span = tracing::info_span!("boot_tree", dir = %path.dir.display(), fate = path.fate.name(), found = %path.found).entered();
        if path.touched_by_tail {
            // Done before a crash, maybe: a creation's or a removal's names (its own, its
            // files', its parents') may still be only in the cache.
            ancestors(root, &path.dir, &mut dirs);
        }
        if path.made_by_tail {
            dirs.insert(path.dir.clone());
            dirs.insert(path.dir.join("offsets"));
        }
        match path.fate {
            Fate::Remove => {
                remove_durably(disk, &path.dir)?;
                removed.push(path.dir.clone());
            }
            Fate::Replace | Fate::Create => {
                if path.fate == Fate::Replace {
                    remove_durably(disk, &path.dir)?;
                    removed.push(path.dir.clone());
                }
                let identity = path.wanted.expect("a created partition is the metadata's");
                create_empty(env, root, state, identity, hooks, &mut dirs)?;
            }
            Fate::Unaccounted => {
                tracing::warn!(dir = %path.dir.display(), found = %path.found, "a directory the metadata does not account for: kept, never removed")
            }
            Fate::Open | Fate::Nothing => {}
        }
    }
    for dir in &tree.remove_dirs {
        remove_durably(disk, dir)?;
        removed.push(dir.clone());
    }
    for dir in &tree.touched_dirs {
        ancestors(root, &dir.join("x"), &mut dirs);
    }
    for dir in &tree.kept_dirs {
        tracing::warn!(dir = %dir.display(), "the directory of an entity the metadata does not have holds what no journaled op deleted: kept");
    }
    sync_dirs(disk, &dirs)?;
    Ok(removed)
}

fn create_empty(
    env: &Env,
    root: &Path,
    state: &MetaState,
    identity: PartitionIdentity,
    hooks: PartitionHooks,
    dirs: &mut BTreeSet<PathBuf>,
) -> Result<(), BootError> {
    let key = key_of(&identity);
    let dir = partition_dir(root, key.0, key.1, key.2);
    if let Some(parent) = dir.parent() {
        env.disk.create_dir_all(parent)?;
    }
    let config = state.topic(key.0, key.1).options.config();
    Partition::create_unlinked(env, &dir, identity, config, Default::default(), hooks).map_err(
        |e| match e {
            // The file system's error as it always read (the node's error names no file).
            PartitionError::Io { source, .. } => BootError::Io(source),
            other => BootError::Partition(other),
        },
    )?;
    ancestors(root, &dir, dirs);
    Ok(())
}

/// Opens one partition for its shard: fenced when its directory is missing, when another
/// directory claims its identity, or when opening fails with an I/O error (the error is
/// confined to this partition: boot goes on). What a recovery with nothing to repair
/// serves is made durable by its shard's one `sync_all` after it opened its partitions
/// ([`Opening::Boot`]), not a flush of the device per file; `slots` are the superblock
/// slots boot's tree survey read.
fn open_partition(
    env: &Env,
    root: &Path,
    state: &MetaState,
    settings: crate::config::PartitionSettings,
    hooks: PartitionHooks,
    (identity, slots, cache): ToOpen,
    claimed: &BTreeMap<PartitionKey, PathBuf>,
) -> (Partition, PartitionBoot) {
    let key = key_of(&identity);
    let dir = partition_dir(root, key.0, key.1, key.2);
    let fenced = |reason: FenceReason| {
        (
            Partition::fenced(reason.clone()),
            PartitionBoot::Fenced(reason),
        )
    };
    if let Some(other) = claimed.get(&key) {
        return fenced(FenceReason::IdentityDuplicated {
            dir,
            other: other.clone(),
        });
    }
    let config = state.topic(key.0, key.1).options.config();
    let mut slots = slots;
    if settings.replica {
        // Finishing a rebuild may rewrite the slots: read them again.
        slots = None;
        let rebuilt = super::rebuild::Rebuilt {
            env,
            dir: &dir,
            identity,
            config,
            settings,
            hooks,
        };
        if let Err(e) = rebuilt.finish_cut_short() {
            // Its group repairs it (damage to its own files), as after a rebuild that
            // failed while the node ran.
            return fenced(FenceReason::RebuildCutShort {
                dir,
                error: e.to_string(),
            });
        }
    }
    match env.disk.exists(&dir) {
        Ok(true) => {}
        Ok(false) => return fenced(FenceReason::DirectoryMissing { dir }),
        Err(e) => {
            return fenced(FenceReason::IoFailed {
                op: "stat",
                path: dir,
                error: e.to_string(),
            })
        }
    }
    match Partition::open_with_hooks(
        env,
        &dir,
        identity,
        config,
        settings,
        hooks,
        Opening::Boot { slots, cache },
    ) {
        Ok(opened) => (
            opened.partition,
            PartitionBoot::Opened(Box::new(opened.plan)),
        ),
        Err(e) => {
            tracing::error!(dir = %dir.display(), %e, "opening a partition failed: it is fenced, boot goes on");
            fenced(FenceReason::IoFailed {
                op: "open",
                path: dir,
                error: e.to_string(),
            })
        }
    }
}

/// What boot's plans hand the owners: the metadata's plan, the directory work to redo, the
/// report to fill, and the superblock slots the tree survey read, by partition.
type BootInputs<'a> = (
    &'a MetaPlan,
    &'a [(u64, &'a DirWork)],
    &'a mut BootReport,
    BTreeMap<PartitionKey, [SlotRead; 2]>,
);

/// What the recoveries of `opened` served as they found it and left to boot
/// ([`Opening::Boot`]: an earlier process may have left it in the page cache only), made
/// durable: one `sync_all` of the data root, or, when that fails, each partition's own
/// syncs, so an error fences only the partition whose file it is (as an I/O error opening
/// it does; a file's own sync reports its writeback error even after `syncfs` did).
fn insure_deferred(
    env: &Env,
    root: &Path,
    hooks: PartitionHooks,
    opened: &mut [(PartitionIdentity, Partition, PartitionBoot)],
) {
    let deferred = |boot: &PartitionBoot| matches!(boot, PartitionBoot::Opened(plan) if plan.repairs_nothing());
    if !opened.iter().any(|(_, _, boot)| deferred(boot)) {
        return;
    }
    let Err(e) = env.disk.sync_all(root) else {
        return;
    };
    tracing::warn!(root = %root.display(), %e, "the sync of the data root failed: each partition syncs its own");
    let disk = hooks.recovery_disk(&env.disk);
    for (_, partition, boot) in opened.iter_mut().filter(|(_, _, boot)| deferred(boot)) {
        let PartitionBoot::Opened(plan) = boot else {
            unreachable!("a deferred partition was opened")
        };
        if let Err(e) = recovery::apply(disk.as_ref(), plan, Insurance::Now) {
            let reason = FenceReason::IoFailed {
                op: "sync",
                path: plan.dir.clone(),
                error: e.to_string(),
            };
            tracing::error!(dir = %plan.dir.display(), %e, "a partition's boot sync failed: it is fenced, boot goes on");
            *partition = Partition::fenced(reason.clone());
            *boot = PartitionBoot::Fenced(reason);
        }
    }
}

/// A partition a shard opens at boot, with the superblock slots boot's survey read of it,
/// and what its survey may take from the page cache.
type ToOpen = (PartitionIdentity, Option<Box<[SlotRead; 2]>>, PageCache);

/// What one shard reports once its partitions are open.
struct ShardBoot {
    partitions: Vec<(PartitionKey, PartitionBoot)>,
    group_offsets_removed: Vec<(PartitionKey, u32)>,
}

async fn start_owners(
    env: &Env,
    root: &Path,
    settings: NodeSettings,
    mut plane: MetadataPlane,
    (plan, redo, report, mut slots): BootInputs<'_>,
    (syncs, exit): (Arc<crate::metrics::SyncCounts>, ExitWatch),
) -> Result<Node, BootError> {
    let shard_count = match settings.shards {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let limits = settings.limits;
    let last_op = plan.last_op;
    let cluster = plane.cluster();
    let view = Arc::new(ViewCell::new(MetaView {
        op: last_op,
        state: plan.state.clone(),
    }));
    let stopped = Latch::default();
    let stats = Arc::new(NodeStats::default());
    let recorder = Arc::new(Recorder::default());
    let tickets = Arc::new(AtomicU64::new(0));
    let deletions = Arc::new(Deletions::default());
    let resources = PartitionResources::shared(
        limits.sealed_handles,
        limits.active_handles,
        limits.journal_bytes,
    );
    let claimed: BTreeMap<PartitionKey, PathBuf> = report.tree.claimed.iter().cloned().collect();
    let redo_owned: Vec<(u64, DirWork)> = redo.iter().map(|(op, w)| (*op, (*w).clone())).collect();
    let mut workers = Vec::new();
    let mut shards = Vec::with_capacity(shard_count);
    let mut booting = Vec::with_capacity(shard_count);
    let mut owned: Vec<Vec<ToOpen>> = (0..shard_count).map(|_| Vec::new()).collect();
    // Placed afresh in key order: spread evenly over this process's shards.
    let placement = Arc::new(Placement::new(shard_count));
    for identity in plan.state.partitions() {
        let key = key_of(&identity);
        let read = slots.remove(&key).map(Box::new);
        owned[placement.place(key)].push((identity, read, exit.cache));
    }
    for (index, identities) in owned.into_iter().enumerate() {
        let (tx, rx) = channel::<ShardRequest>(limits.shard_inbox);
        let (reply, pending) = oneshot::<ShardBoot>();
        let mut shard = Shard::new(
            env.clone(),
            root.to_path_buf(),
            settings.partition,
            settings.hooks,
            view.clone(),
            stopped.clone(),
            stats.clone(),
            tickets.clone(),
            settings.cleaner_interval,
            deletions.clone(),
            resources.clone(),
            recorder.clone(),
        );
        let (env2, root2, state, claimed, redo) = (
            env.clone(),
            root.to_path_buf(),
            plan.state.clone(),
            claimed.clone(),
            redo_owned.clone(),
        );
        let (partition_settings, partition_hooks) = (settings.partition, settings.hooks.partition);
        let task = async move {
            let mut boot = ShardBoot {
                partitions: Vec::new(),
                group_offsets_removed: Vec::new(),
            };
            let redo: Vec<(u64, &DirWork)> = redo.iter().map(|(op, w)| (*op, w)).collect();
            let mut opened = Vec::with_capacity(identities.len());
            for to_open in identities {
                let identity = to_open.0;
                // Recovery reads what the device holds: one wait on the device per partition.
                let (partition, outcome) = device_section(env2.tasks.as_ref(), || {
                    open_partition(
                        &env2,
                        &root2,
                        &state,
                        partition_settings,
                        partition_hooks,
                        to_open,
                        &claimed,
                    )
                });
                opened.push((identity, partition, outcome));
            }
            // Before anything of these partitions is written or served.
            device_section(env2.tasks.as_ref(), || {
                insure_deferred(&env2, &root2, partition_hooks, &mut opened)
            });
            for (identity, mut partition, outcome) in opened {
                let key = key_of(&identity);
                if partition.fence_reason().is_none() {
                    let stored = partition.consumers().unwrap_or_default();
                    for group in doomed_group_offsets(&state, &redo, key, &stored) {
                        match partition.delete_offset(ConsumerId::group(group)) {
                            Ok(true) => boot.group_offsets_removed.push((key, group)),
                            Ok(false) => {}
                            Err(e) => {
                                tracing::error!(?key, group, %e, "removing a deleted group's offset failed")
                            }
                        }
                    }
                }
                shard.adopt(identity, partition);
                boot.partitions.push((key, outcome));
            }
            settle(&env2).await;
            reply.send(boot);
            shard.run(rx).await;
        };
        let name = format!("cairn-shard-{index}");
        workers.push(env.tasks.spawn_owner(
            &name,
            stops_on_panic(name.clone(), stopped.clone(), Vec::new(), task),
        ));
        shards.push(tx);
        booting.push(pending);
    }
    for pending in booting {
        let boot = pending.await.map_err(|_| BootError::ShardStopped)?;
        report.partitions.extend(boot.partitions);
        report
            .group_offsets_removed
            .extend(boot.group_offsets_removed);
    }
    if let Some(a) = &plan.adopting {
        plane.finish_adoption(a.op, a.anchor, &a.state)?;
        settle(env).await;
    }
    report.partitions.sort_by_key(|(key, _)| *key);
    let boot = BootMetrics::new(plan, report);
    let (groups_tx, groups_rx) = channel(limits.groups_inbox);
    let groups = GroupsOwner {
        membership: Membership::default(),
        view: view.clone(),
        recorder: recorder.clone(),
    };
    workers.push(env.tasks.spawn_worker(
        "cairn-groups",
        stops_on_panic(
            "groups owner".into(),
            stopped.clone(),
            Vec::new(),
            groups.run(groups_rx),
        ),
    ));
    let (meta_tx, meta_rx) = channel(limits.meta_inbox);
    let owner = MetaOwner {
        env: env.clone(),
        root: root.to_path_buf(),
        plane,
        current: view.load(),
        view: view.clone(),
        shards: shards.clone(),
        placement: placement.clone(),
        groups: groups_tx.clone(),
        stopped: stopped.clone(),
        stats: stats.clone(),
        deferred: Default::default(),
        hooks: settings.hooks.owners,
    };
    workers.push(env.tasks.spawn_worker(
        "cairn-metadata",
        stops_on_panic(
            "metadata owner".into(),
            stopped.clone(),
            shards.clone(),
            owner.run(meta_rx),
        ),
    ));
    Ok(Node {
        inner: Arc::new(Inner {
            env: env.clone(),
            root: root.to_path_buf(),
            cluster,
            auth: Auth::new(settings.password_cost, login_key(env)),
            settings,
            view,
            meta: meta_tx,
            shards,
            placement,
            groups: groups_tx,
            stopped,
            stats,
            recorder,
            syncs,
            exit,
            boot,
            tickets,
            deletions,
            resources,
            balanced: Mutex::new(BTreeMap::new()),
            workers: Mutex::new(workers),
            decider: std::sync::OnceLock::new(),
            replicator: std::sync::OnceLock::new(),
        }),
    })
}

/// The secret that keys the digests of remembered logins (`auth.rs`), drawn at every boot.
fn login_key(env: &Env) -> [u8; 32] {
    let mut key = [0u8; 32];
    for chunk in key.chunks_exact_mut(8) {
        chunk.copy_from_slice(&env.entropy.next_u64().to_le_bytes());
    }
    key
}

/// An owner's loop that stops the node if it panics (an invariant's assertion fired): the
/// latch tells every caller and the supervisor, and the shards are woken so requests they
/// hold for the metadata owner's answer are refused instead of waiting for it.
fn stops_on_panic(
    name: String,
    stopped: Latch<Arc<Failure>>,
    wake: Vec<crate::env::chan::Sender<ShardRequest>>,
    run: impl std::future::Future<Output = ()> + Send + 'static,
) -> crate::env::BoxFuture<'static, ()> {
    Box::pin(async move {
        let _guard = PanicGuard {
            name,
            stopped,
            wake,
        };
        run.await;
    })
}

struct PanicGuard {
    name: String,
    stopped: Latch<Arc<Failure>>,
    wake: Vec<crate::env::chan::Sender<ShardRequest>>,
}

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        self.stopped
            .set(Arc::new(Failure::Panicked(std::mem::take(&mut self.name))));
        for shard in &self.wake {
            let _ = shard.try_send(ShardRequest::Applied);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An owner whose assertion fires stops the node (callers and the supervisor hear it)
    /// and its worker counts as finished, so a halt waiting for it returns.
    #[test]
    #[allow(clippy::disallowed_methods, clippy::disallowed_types)]
    fn an_owner_that_panics_stops_the_node() {
        let env = crate::env::real::env().expect("runtime");
        // On its own thread (a worker) and as a task on the runtime (a shard) alike.
        for on_runtime in [false, true] {
            let stopped: Latch<Arc<Failure>> = Latch::default();
            let task = stops_on_panic("test owner".into(), stopped.clone(), Vec::new(), async {
                panic!("an invariant failed (on purpose)")
            });
            let worker = match on_runtime {
                false => env.tasks.spawn_worker("cairn-test-owner", task),
                true => env.tasks.spawn_owner("cairn-test-owner", task),
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !worker.is_finished() {
                assert!(std::time::Instant::now() < deadline, "the worker finished");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            match stopped.get().as_deref() {
                Some(Failure::Panicked(name)) => assert_eq!(name, "test owner"),
                other => panic!("the node stopped for the panic, not {other:?}"),
            }
        }
    }

    /// A redone group removal dooms that group's offsets in the partition it names only:
    /// the same group id in another topic (ids are per topic) keeps its offsets.
    #[test]
    fn a_redone_group_removal_dooms_only_the_partition_it_names() {
        let state = MetaState::default();
        let work = DirWork::RemoveGroupOffsets {
            partition: (0, 1, 0),
            group: 3,
        };
        let redo = [(5, &work)];
        assert!(doomed_group_offsets(&state, &redo, (0, 0, 0), &[]).is_empty());
        assert_eq!(
            doomed_group_offsets(&state, &redo, (0, 1, 0), &[]),
            BTreeSet::from([3])
        );
    }
}

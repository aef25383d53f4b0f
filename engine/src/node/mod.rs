//! A node: the entities users create (streams, topics, partitions, consumer groups, users),
//! the metadata plane that makes them durable, and the partitions that hold the messages.
//! One entry point per operation, typed errors ([`NodeError`]), no I/O outside [`Env`]:
//! the server's adapters and the simulator call the same methods.
//!
//! A metadata operation is checked against the state (a refusal changes nothing and is not
//! journaled), journaled and synced, applied, its directory work done (partition directories
//! created, purged, removed, every new name synced), and recorded as applied; only then is it
//! answered. If any of that fails the node stops answering ([`NodeError::MetadataFailed`])
//! until a restart: boot redoes the work of every journaled op after the recorded one.
//!
//! Boot: the metadata plan (refusal, or the state after snapshot and replay); the directory
//! work of ops after the applied one, redone; directories of entities the metadata does not
//! have, removed (the journal is the truth for the tree); every partition opened with the
//! identity the metadata gives it (a missing directory is fenced, never recreated empty).

pub mod error;
pub mod groups;
pub mod ops;
pub mod options;
pub mod retention;
pub mod state;

pub use error::{Named, NodeError, NodeResult};

use crate::config::PartitionSettings;
use crate::env::{Disk, Env};
use crate::metadata::journal::Origin;
use crate::metadata::{self, MetaPlan, MetaRefusal, MetaSettings, MetadataPlane};
use crate::partition::superblock::read_identity;
use crate::partition::{
    partition_dir, AppendAck, ConsumerId, FenceReason, Partition, PartitionIdentity, PollFrom,
    Polled, RecoveryPlan,
};
use bytes::BytesMut;
use groups::{GroupKey, Membership};
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest,
};
use iggy_binary_protocol::requests::partitions::{
    CreatePartitionsRequest, DeletePartitionsRequest,
};
use iggy_binary_protocol::requests::streams::{
    CreateStreamRequest, DeleteStreamRequest, PurgeStreamRequest, UpdateStreamRequest,
};
use iggy_binary_protocol::requests::topics::{
    CreateTopicRequest, DeleteTopicRequest, PurgeTopicRequest, UpdateTopicRequest,
};
use iggy_binary_protocol::requests::users::{
    ChangePasswordRequest, CreateUserRequest, DeleteUserRequest,
};
use iggy_binary_protocol::{
    WireConsumer, WireIdentifier, WireName, WireOptions, WirePartitioning, WirePermissions,
    WirePollingStrategy, KIND_CONSUMER, KIND_CONSUMER_GROUP,
};
use ops::MetaOp;
use retention::{Policy, Reason, Sealed};
use state::{Applied, DirWork, MetaState, ROOT_USER_ID};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// A partition, by (stream, topic, partition) ids.
pub type PartitionKey = (u32, u32, u32);

/// What a password hash costs (argon2id). Production uses the library's defaults; tests and
/// the simulator use [`PasswordCost::CHEAP`] so that creating users stays fast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PasswordCost {
    pub memory_kib: u32,
    pub iterations: u32,
}

impl PasswordCost {
    pub const CHEAP: PasswordCost = PasswordCost {
        memory_kib: 8,
        iterations: 1,
    };
}

impl Default for PasswordCost {
    fn default() -> Self {
        PasswordCost {
            memory_kib: argon2::Params::DEFAULT_M_COST,
            iterations: argon2::Params::DEFAULT_T_COST,
        }
    }
}

#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub partition: PartitionSettings,
    pub meta: MetaSettings,
    pub password_cost: PasswordCost,
    /// The root user's password at the first boot (Iggy's default credentials).
    pub root_username: String,
    pub root_password: String,
    /// How often the retention cleaner runs ([`Node::tick`]).
    pub cleaner_interval: std::time::Duration,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            partition: PartitionSettings::default(),
            meta: MetaSettings::default(),
            password_cost: PasswordCost::default(),
            root_username: "iggy".into(),
            root_password: "iggy".into(),
            cleaner_interval: std::time::Duration::from_secs(60),
        }
    }
}

/// Why a node did not boot.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("boot refused: {0}")]
    Refused(MetaRefusal),
    #[error("boot failed: {0}")]
    Io(#[from] io::Error),
}

/// What boot did besides the metadata plan.
#[derive(Debug, Clone, Default)]
pub struct BootReport {
    /// Directory work of journaled ops whose work may not have finished, redone.
    pub redone: Vec<(u64, DirWork)>,
    /// Directories of entities the metadata does not have, removed.
    pub removed: Vec<PathBuf>,
    /// Entries under `streams/` boot does not recognise, left alone.
    pub notes: Vec<String>,
    /// Each partition's recovery plan; `None` when its directory is missing (fenced).
    pub partitions: Vec<(PartitionKey, Option<RecoveryPlan>)>,
}

pub struct Booted {
    pub node: Node,
    pub plan: MetaPlan,
    pub report: BootReport,
}

/// One segment a cleaner or an explicit request deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub partition: PartitionKey,
    pub segment: Sealed,
    pub reason: Reason,
    /// The partition's sealed bytes when it was decided.
    pub sealed_bytes: u64,
    pub policy: Policy,
    pub now: u64,
}

/// A partition's numbers, for `GetTopic` and stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionStats {
    pub segments: u32,
    /// The last visible offset, if any.
    pub current_offset: Option<u64>,
    pub log_start: u64,
    pub fenced: bool,
}

/// Where a send landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub partition: u32,
    pub ack: AppendAck,
}

pub struct Node {
    env: Env,
    root: PathBuf,
    settings: NodeSettings,
    plane: MetadataPlane,
    state: MetaState,
    partitions: BTreeMap<PartitionKey, Partition>,
    groups: Membership,
    /// Round-robin cursors of `Balanced` sends, per topic.
    balanced: BTreeMap<(u32, u32), u32>,
    failed: Option<String>,
    retention_clock: RetentionClock,
    /// Monotonic time of the last cleaner pass.
    last_clean_nanos: u64,
}

/// The time retention judges expiry by: the wall clock, never running ahead of the
/// monotonic clock since boot (a wall clock jumped forward at runtime does not make
/// messages look older than they are) and never going back.
#[derive(Debug, Clone, Copy)]
struct RetentionClock {
    anchor_wall: u64,
    anchor_mono_nanos: u64,
    last: u64,
}

impl RetentionClock {
    fn new(env: &Env) -> RetentionClock {
        RetentionClock {
            anchor_wall: env.clock.wall_micros(),
            anchor_mono_nanos: env.clock.monotonic_nanos(),
            last: 0,
        }
    }

    fn now(&mut self, env: &Env) -> u64 {
        let elapsed = env
            .clock
            .monotonic_nanos()
            .saturating_sub(self.anchor_mono_nanos)
            / 1000;
        let bound = self.anchor_wall.saturating_add(elapsed);
        self.last = self.last.max(env.clock.wall_micros().min(bound));
        self.last
    }
}

fn key_of(identity: &PartitionIdentity) -> PartitionKey {
    (identity.stream_id, identity.topic_id, identity.partition_id)
}

fn name(text: &str) -> NodeResult<WireName> {
    WireName::new(text).map_err(|e| NodeError::InvalidName {
        name: text.into(),
        why: e.to_string(),
    })
}

impl Node {
    /// Boots the node whose data lives under `root`.
    pub fn open(env: &Env, root: &Path, settings: NodeSettings) -> Result<Booted, BootError> {
        let disk = env.disk.as_ref();
        let _span = tracing::info_span!("node_boot", root = %root.display()).entered();
        let plan = metadata::plan(disk, root)?;
        if let Some(refusal) = &plan.refusal {
            tracing::error!(%refusal, "metadata refused boot");
            return Err(BootError::Refused(refusal.clone()));
        }
        let plane = MetadataPlane::open(env, &plan, settings.meta)?;
        let mut node = Node {
            env: env.clone(),
            root: root.to_path_buf(),
            settings,
            plane,
            state: plan.state.clone(),
            partitions: BTreeMap::new(),
            groups: Membership::default(),
            balanced: BTreeMap::new(),
            failed: None,
            retention_clock: RetentionClock::new(env),
            last_clean_nanos: env.clock.monotonic_nanos(),
        };
        let mut report = BootReport::default();
        for (op, work) in work_to_redo(&plan) {
            node.do_work(work, true)?;
            report.redone.push((op, work.clone()));
        }
        node.remove_orphans(&mut report)?;
        node.plane.record_applied()?;
        node.open_partitions(&mut report)?;
        // Op 1 creates the root user: until it is journaled (a first boot cut short after
        // the superblocks were written), the first boot is not finished.
        if node.plane.last_op() == 0 {
            let (username, password) = (
                node.settings.root_username.clone(),
                node.settings.root_password.clone(),
            );
            let id = node
                .create_user(&username, &password, 1, None, Origin::default())
                .map_err(|e| io::Error::other(format!("creating the root user: {e}")))?;
            assert_eq!(id, ROOT_USER_ID, "the root user is the first");
        }
        Ok(Booted { node, plan, report })
    }

    fn open_partitions(&mut self, report: &mut BootReport) -> io::Result<()> {
        for identity in self.state.partitions() {
            let key = key_of(&identity);
            let dir = self.partition_dir(key);
            let config = self.topic_config(key.0, key.1);
            if !self.env.disk.exists(&dir)? {
                self.partitions.insert(
                    key,
                    Partition::fenced(FenceReason::DirectoryMissing { dir }),
                );
                report.partitions.push((key, None));
                continue;
            }
            let opened =
                Partition::open(&self.env, &dir, identity, config, self.settings.partition)
                    .map_err(|e| io::Error::other(e.to_string()))?;
            report.partitions.push((key, Some(opened.plan)));
            self.partitions.insert(key, opened.partition);
        }
        Ok(())
    }

    /// Removes the directories of streams, topics and partitions the metadata does not have.
    fn remove_orphans(&mut self, report: &mut BootReport) -> io::Result<()> {
        let found = tree(self.env.disk.as_ref(), &self.root, &mut report.notes)?;
        let disk = self.env.disk.clone();
        for orphan in orphans(&self.state, &found) {
            let path = orphan.path(&self.root);
            tracing::warn!(dir = %path.display(), "removing the directory of an entity the metadata does not have");
            remove_durably(disk.as_ref(), &path)?;
            report.removed.push(path);
        }
        Ok(())
    }

    pub fn state(&self) -> &MetaState {
        &self.state
    }

    // Reads of the entities (GetStream, GetStreams, GetTopic, ...). A missing entity is
    // `None`, as Iggy answers single-object reads with an empty body.

    pub fn get_stream(&self, stream: &WireIdentifier) -> Option<&state::Stream> {
        let id = self.state.stream_id(stream).ok()?;
        self.state.streams.get(&id)
    }

    pub fn list_streams(&self) -> Vec<&state::Stream> {
        self.state.streams.values().collect()
    }

    pub fn get_topic(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> NodeResult<Option<&state::Topic>> {
        let s = self.state.stream_id(stream)?;
        Ok(self
            .state
            .topic_ids(stream, topic)
            .ok()
            .map(|(_, t)| self.state.topic(s, t)))
    }

    pub fn list_topics(&self, stream: &WireIdentifier) -> NodeResult<Vec<&state::Topic>> {
        let s = self.state.stream_id(stream)?;
        Ok(self.state.streams[&s].topics.values().collect())
    }

    pub fn get_group(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<Option<&state::Group>> {
        let (s, t) = self.state.topic_ids(stream, topic)?;
        Ok(self
            .state
            .group_id(s, t, group)
            .ok()
            .map(|g| &self.state.topic(s, t).groups[&g]))
    }

    pub fn list_groups(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> NodeResult<Vec<&state::Group>> {
        let (s, t) = self.state.topic_ids(stream, topic)?;
        Ok(self.state.topic(s, t).groups.values().collect())
    }

    pub fn get_user(&self, user: &WireIdentifier) -> Option<&state::User> {
        let id = self.state.user_id(user).ok()?;
        self.state.users.get(&id)
    }

    pub fn list_users(&self) -> Vec<&state::User> {
        self.state.users.values().collect()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The last journaled op.
    pub fn last_op(&self) -> u64 {
        self.plane.last_op()
    }

    pub fn cluster(&self) -> u128 {
        self.plane.cluster()
    }

    fn partition_dir(&self, (s, t, p): PartitionKey) -> PathBuf {
        partition_dir(&self.root, s, t, p)
    }

    fn topic_config(&self, stream: u32, topic: u32) -> crate::config::TopicConfig {
        self.state.topic(stream, topic).options.config()
    }

    fn check_failed(&self) -> NodeResult<()> {
        match &self.failed {
            Some(why) => Err(NodeError::MetadataFailed(why.clone())),
            None => Ok(()),
        }
    }

    fn fail(&mut self, error: io::Error) -> NodeError {
        let why = error.to_string();
        tracing::error!(%why, "the metadata plane failed: the node stops answering");
        self.failed = Some(why.clone());
        NodeError::MetadataFailed(why)
    }

    /// Checks, journals, applies and does the work of a batch of operations (one journal
    /// write and sync for all). Each gets its own result; a refused one is not journaled.
    pub fn execute_batch(&mut self, ops: Vec<(MetaOp, Origin)>) -> Vec<NodeResult<Applied>> {
        if let Err(e) = self.check_failed() {
            let why = e.to_string();
            return ops
                .iter()
                .map(|_| Err(NodeError::MetadataFailed(why.clone())))
                .collect();
        }
        let timestamp = self.env.clock.wall_micros();
        let mut results = Vec::with_capacity(ops.len());
        let mut accepted = Vec::new();
        for (op, origin) in ops {
            let mut ctx = self.plane.next_context(timestamp);
            ctx.op += accepted.len() as u64;
            match self.state.apply(&op, ctx) {
                Ok(applied) => {
                    results.push(Ok(applied));
                    accepted.push((
                        op,
                        Origin {
                            timestamp,
                            ..origin
                        },
                    ));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if accepted.is_empty() {
            return results;
        }
        if let Err(e) = self.commit(&accepted, &results) {
            let error = self.fail(e);
            let why = error.to_string();
            return results
                .into_iter()
                .map(|r| r.and(Err(NodeError::MetadataFailed(why.clone()))))
                .collect();
        }
        results
    }

    /// Journal, journal recorded (when there is directory work), directory work, applied
    /// record, checkpoint.
    fn commit(
        &mut self,
        accepted: &[(MetaOp, Origin)],
        results: &[NodeResult<Applied>],
    ) -> io::Result<()> {
        self.plane.append(accepted)?;
        if results
            .iter()
            .flatten()
            .any(|applied| !applied.work.is_empty())
        {
            self.plane.record_journal()?;
        }
        for applied in results.iter().flatten() {
            for work in &applied.work {
                self.do_work(work, false)?;
            }
        }
        self.plane.record_applied()?;
        for (op, _) in accepted {
            self.after(op);
        }
        if self.plane.wants_checkpoint() {
            self.plane.checkpoint(&self.state)?;
        }
        Ok(())
    }

    fn execute(&mut self, op: MetaOp, origin: Origin) -> NodeResult<Applied> {
        self.execute_batch(vec![(op, origin)])
            .pop()
            .expect("one result per op")
    }

    /// Volatile state that follows the metadata: group membership and send cursors.
    fn after(&mut self, op: &MetaOp) {
        let state = &self.state;
        self.groups.retain(|(s, t, g)| {
            state
                .streams
                .get(&s)
                .and_then(|st| st.topics.get(&t))
                .is_some_and(|topic| topic.groups.contains_key(&g))
        });
        self.balanced.retain(|(s, t), _| {
            state
                .streams
                .get(s)
                .is_some_and(|st| st.topics.contains_key(t))
        });
        if let MetaOp::CreatePartitions(_) | MetaOp::DeletePartitions(_) = op {
            for stream in state.streams.values() {
                for topic in stream.topics.values() {
                    self.groups
                        .resize(stream.id, topic.id, topic.partitions.len() as u32);
                }
            }
        }
    }

    /// Carries out one piece of directory work. Idempotent: boot redoes it for ops whose
    /// work may not have finished (`replay`).
    fn do_work(&mut self, work: &DirWork, replay: bool) -> io::Result<()> {
        let disk = self.env.disk.clone();
        let _span = tracing::info_span!("dir_work", ?work, replay).entered();
        match work {
            DirWork::CreatePartition(identity) | DirWork::PurgePartition(identity) => {
                let key = key_of(identity);
                let dir = self.partition_dir(key);
                self.partitions.remove(&key);
                if read_identity(disk.as_ref(), &dir)? == Some(*identity) {
                    // Done before a crash: the partition may hold messages since. A crash
                    // may have cut the work short before its names were synced, though.
                    return sync_ancestors(disk.as_ref(), &self.root, &dir);
                }
                remove_durably(disk.as_ref(), &dir)?;
                let config = self.topic_config_at(key);
                let partition =
                    Partition::create(&self.env, &dir, *identity, config, self.settings.partition)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                sync_ancestors(disk.as_ref(), &self.root, &dir)?;
                if !replay {
                    self.partitions.insert(key, partition);
                }
            }
            DirWork::RemovePartition {
                stream,
                topic,
                partition,
            } => {
                let key = (*stream, *topic, *partition);
                self.partitions.remove(&key);
                remove_durably(disk.as_ref(), &self.partition_dir(key))?;
            }
            DirWork::RemoveTopic { stream, topic } => {
                self.partitions
                    .retain(|(s, t, _), _| (*s, *t) != (*stream, *topic));
                remove_durably(disk.as_ref(), &topic_dir(&self.root, *stream, *topic))?;
            }
            DirWork::RemoveStream { stream } => {
                self.partitions.retain(|(s, _, _), _| s != stream);
                remove_durably(
                    disk.as_ref(),
                    &self.root.join("streams").join(stream.to_string()),
                )?;
            }
        }
        Ok(())
    }

    /// A partition's topic config, whether or not the topic is still in the state (a replay
    /// may create a partition of a topic a later op deletes).
    fn topic_config_at(&self, (s, t, _): PartitionKey) -> crate::config::TopicConfig {
        self.state
            .streams
            .get(&s)
            .and_then(|st| st.topics.get(&t))
            .map(|topic| topic.options.config())
            .unwrap_or_default()
    }

    // Streams ------------------------------------------------------------------------------

    pub fn create_stream(&mut self, stream_name: &str, origin: Origin) -> NodeResult<u32> {
        let op = MetaOp::CreateStream(CreateStreamRequest {
            name: name(stream_name)?,
            options: WireOptions::empty(),
        });
        Ok(self
            .execute(op, origin)?
            .created
            .expect("a create returns its id"))
    }

    pub fn update_stream(
        &mut self,
        stream: &WireIdentifier,
        new_name: &str,
        origin: Origin,
    ) -> NodeResult<()> {
        let op = MetaOp::UpdateStream(UpdateStreamRequest {
            stream_id: stream.clone(),
            name: name(new_name)?,
            options: WireOptions::empty(),
        });
        self.execute(op, origin).map(|_| ())
    }

    pub fn delete_stream(&mut self, stream: &WireIdentifier, origin: Origin) -> NodeResult<()> {
        let op = MetaOp::DeleteStream(DeleteStreamRequest {
            stream_id: stream.clone(),
        });
        self.execute(op, origin).map(|_| ())
    }

    pub fn purge_stream(&mut self, stream: &WireIdentifier, origin: Origin) -> NodeResult<()> {
        let op = MetaOp::PurgeStream(PurgeStreamRequest {
            stream_id: stream.clone(),
        });
        self.execute(op, origin).map(|_| ())
    }

    // Topics -------------------------------------------------------------------------------

    pub fn create_topic(
        &mut self,
        stream: &WireIdentifier,
        topic_name: &str,
        partitions_count: u32,
        options: WireOptions,
        origin: Origin,
    ) -> NodeResult<u32> {
        let op = MetaOp::CreateTopic(CreateTopicRequest {
            stream_id: stream.clone(),
            partitions_count,
            name: name(topic_name)?,
            options,
        });
        Ok(self
            .execute(op, origin)?
            .created
            .expect("a create returns its id"))
    }

    pub fn update_topic(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        new_name: &str,
        options: WireOptions,
        origin: Origin,
    ) -> NodeResult<()> {
        let op = MetaOp::UpdateTopic(UpdateTopicRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            name: name(new_name)?,
            options,
        });
        self.execute(op, origin).map(|_| ())
    }

    pub fn delete_topic(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        origin: Origin,
    ) -> NodeResult<()> {
        let op = MetaOp::DeleteTopic(DeleteTopicRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
        });
        self.execute(op, origin).map(|_| ())
    }

    pub fn purge_topic(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        origin: Origin,
    ) -> NodeResult<()> {
        let op = MetaOp::PurgeTopic(PurgeTopicRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
        });
        self.execute(op, origin).map(|_| ())
    }

    pub fn create_partitions(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        count: u32,
        origin: Origin,
    ) -> NodeResult<()> {
        let op = MetaOp::CreatePartitions(CreatePartitionsRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partitions_count: count,
        });
        self.execute(op, origin).map(|_| ())
    }

    pub fn delete_partitions(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        count: u32,
        origin: Origin,
    ) -> NodeResult<()> {
        let op = MetaOp::DeletePartitions(DeletePartitionsRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partitions_count: count,
        });
        self.execute(op, origin).map(|_| ())
    }

    // Consumer groups ----------------------------------------------------------------------

    pub fn create_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group_name: &str,
        origin: Origin,
    ) -> NodeResult<u32> {
        let op = MetaOp::CreateConsumerGroup(CreateConsumerGroupRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            name: name(group_name)?,
        });
        Ok(self
            .execute(op, origin)?
            .created
            .expect("a create returns its id"))
    }

    pub fn delete_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
        origin: Origin,
    ) -> NodeResult<()> {
        let op = MetaOp::DeleteConsumerGroup(DeleteConsumerGroupRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            group_id: group.clone(),
        });
        self.execute(op, origin).map(|_| ())
    }

    fn group_key(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<(GroupKey, u32)> {
        let (s, t) = self.state.topic_ids(stream, topic)?;
        let g = self.state.group_id(s, t, group)?;
        let partitions = self.state.topic(s, t).partitions.len() as u32;
        Ok(((s, t, g), partitions))
    }

    /// The client session `client` joins the group (a no-op for a member).
    pub fn join_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
        client: u128,
    ) -> NodeResult<()> {
        self.check_failed()?;
        let (key, partitions) = self.group_key(stream, topic, group)?;
        if !self.groups.join(key, client, partitions) {
            return Err(NodeError::TooMany {
                what: "members in a consumer group",
                limit: groups::MAX_MEMBERS,
            });
        }
        Ok(())
    }

    pub fn leave_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
        client: u128,
    ) -> NodeResult<()> {
        self.check_failed()?;
        let (key, partitions) = self.group_key(stream, topic, group)?;
        if !self.groups.leave(key, client, partitions) {
            return Err(NodeError::NotAMember {
                group: key.2,
                client,
            });
        }
        Ok(())
    }

    /// A client session ended: it leaves every group, releasing its partitions.
    pub fn disconnect(&mut self, client: u128) {
        let state = &self.state;
        self.groups.disconnect(client, |(s, t, _)| {
            state
                .streams
                .get(&s)
                .and_then(|st| st.topics.get(&t))
                .map_or(0, |topic| topic.partitions.len() as u32)
        });
    }

    /// The member's generation and partitions (`SyncConsumerGroup`).
    pub fn group_assignment(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
        client: u128,
    ) -> NodeResult<(u64, Vec<u32>)> {
        let (key, _) = self.group_key(stream, topic, group)?;
        let members = self.groups.get(key).ok_or(NodeError::NotAMember {
            group: key.2,
            client,
        })?;
        let member = members.members.get(&client).ok_or(NodeError::NotAMember {
            group: key.2,
            client,
        })?;
        Ok((members.generation, member.partitions.clone()))
    }

    /// Every member of a group and its partitions.
    pub fn group_members(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<Vec<(u128, Vec<u32>)>> {
        let (key, _) = self.group_key(stream, topic, group)?;
        Ok(self
            .groups
            .get(key)
            .map(|m| {
                m.members
                    .iter()
                    .map(|(c, m)| (*c, m.partitions.clone()))
                    .collect()
            })
            .unwrap_or_default())
    }

    // Users --------------------------------------------------------------------------------

    fn hash_password(&self, password: &str) -> NodeResult<String> {
        use argon2::password_hash::{PasswordHasher, SaltString};
        if !(3..=100).contains(&password.len()) {
            return Err(NodeError::InvalidPassword("3 to 100 bytes".into()));
        }
        let mut salt = [0u8; 16];
        salt[..8].copy_from_slice(&self.env.entropy.next_u64().to_le_bytes());
        salt[8..].copy_from_slice(&self.env.entropy.next_u64().to_le_bytes());
        let salt = SaltString::encode_b64(&salt).expect("16 bytes make a salt");
        let cost = self.settings.password_cost;
        let params = argon2::Params::new(cost.memory_kib, cost.iterations, 1, None)
            .map_err(|e| NodeError::InvalidPassword(format!("hash parameters: {e}")))?;
        let argon =
            argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let hash = argon
            .hash_password(password.as_bytes(), &salt)
            .map_err(|e| NodeError::InvalidPassword(e.to_string()))?
            .to_string();
        assert!(
            hash.len() <= 255,
            "a PHC string fits the wire's password field"
        );
        Ok(hash)
    }

    pub fn create_user(
        &mut self,
        username: &str,
        password: &str,
        status: u8,
        permissions: Option<WirePermissions>,
        origin: Origin,
    ) -> NodeResult<u32> {
        if !(3..=50).contains(&username.len()) {
            return Err(NodeError::InvalidUsername("3 to 50 bytes".into()));
        }
        let op = MetaOp::CreateUser(CreateUserRequest {
            username: name(username)?,
            password: self.hash_password(password)?,
            status,
            permissions,
            options: WireOptions::empty(),
        });
        Ok(self
            .execute(op, origin)?
            .created
            .expect("a create returns its id"))
    }

    pub fn delete_user(&mut self, user: &WireIdentifier, origin: Origin) -> NodeResult<()> {
        let op = MetaOp::DeleteUser(DeleteUserRequest {
            user_id: user.clone(),
        });
        self.execute(op, origin).map(|_| ())
    }

    /// Whether `password` is `user`'s (the server's login checks this).
    pub fn verify_password(&self, username: &str, password: &str) -> NodeResult<u32> {
        use argon2::password_hash::{PasswordHash, PasswordVerifier};
        let user = self
            .state
            .users
            .values()
            .find(|u| u.username == username)
            .ok_or_else(|| NodeError::UserNotFound(Named::Name(username.into())))?;
        let hash = PasswordHash::new(&user.password_hash)
            .map_err(|e| NodeError::InvalidPassword(e.to_string()))?;
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &hash)
            .map_err(|_| NodeError::InvalidPassword("wrong password".into()))?;
        Ok(user.id)
    }

    pub fn change_password(
        &mut self,
        user: &WireIdentifier,
        current: &str,
        new: &str,
        origin: Origin,
    ) -> NodeResult<()> {
        let id = self.state.user_id(user)?;
        let username = self.state.users[&id].username.clone();
        self.verify_password(&username, current)?;
        let op = MetaOp::ChangePassword(ChangePasswordRequest {
            user_id: WireIdentifier::numeric(id),
            current_password: String::new(),
            new_password: self.hash_password(new)?,
        });
        self.execute(op, origin).map(|_| ())
    }

    // Messages and offsets -----------------------------------------------------------------

    fn partition_mut(&mut self, key: PartitionKey) -> NodeResult<&mut Partition> {
        self.partitions
            .get_mut(&key)
            .ok_or(NodeError::PartitionNotFound {
                stream: key.0,
                topic: key.1,
                partition: key.2,
            })
    }

    fn resolve_partition(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partitioning: &WirePartitioning,
    ) -> NodeResult<PartitionKey> {
        let (s, t) = self.state.topic_ids(stream, topic)?;
        let count = self.state.topic(s, t).partitions.len() as u32;
        let missing = |p| NodeError::PartitionNotFound {
            stream: s,
            topic: t,
            partition: p,
        };
        if count == 0 {
            return Err(missing(0));
        }
        let p = match partitioning {
            WirePartitioning::PartitionId(p) => *p,
            WirePartitioning::Balanced => {
                let cursor = self.balanced.entry((s, t)).or_default();
                let p = *cursor % count;
                *cursor = cursor.wrapping_add(1);
                p
            }
            WirePartitioning::MessagesKey(key) => xxhash_rust::xxh32::xxh32(key, 0) % count,
        };
        if p >= count {
            return Err(missing(p));
        }
        Ok((s, t, p))
    }

    /// Appends a batch (as a producer sends it) to the partition `partitioning` picks; the
    /// answer comes once the batch is complete under the topic's durability policy.
    pub fn send(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partitioning: &WirePartitioning,
        batch: BytesMut,
    ) -> NodeResult<Sent> {
        self.check_failed()?;
        let key = self.resolve_partition(stream, topic, partitioning)?;
        let ack = self
            .partition_mut(key)?
            .append_group(vec![batch])
            .pop()
            .expect("one result per batch")?;
        Ok(Sent {
            partition: key.2,
            ack,
        })
    }

    /// The partition offsets are kept in for `consumer`, and its id there. A numeric
    /// consumer id is itself; a named one is XxHash32 of the name (as Iggy does).
    fn consumer_id(
        &self,
        consumer: &WireConsumer,
        stream: u32,
        topic: u32,
    ) -> NodeResult<ConsumerId> {
        match consumer.kind {
            KIND_CONSUMER => Ok(ConsumerId::consumer(match &consumer.id {
                WireIdentifier::Numeric(id) => *id,
                WireIdentifier::String(name) => {
                    xxhash_rust::xxh32::xxh32(name.as_str().as_bytes(), 0)
                }
            })),
            KIND_CONSUMER_GROUP => Ok(ConsumerId::group(self.state.group_id(
                stream,
                topic,
                &consumer.id,
            )?)),
            kind => Err(NodeError::InvalidRequest(format!("consumer kind {kind}"))),
        }
    }

    /// Which partition a poll reads: a consumer's given one (default 0); a group member's
    /// given one if it owns it, else the next of its partitions in round-robin.
    fn poll_partition(
        &mut self,
        consumer: &WireConsumer,
        client: u128,
        s: u32,
        t: u32,
        partition: Option<u32>,
    ) -> NodeResult<Option<u32>> {
        if consumer.kind != KIND_CONSUMER_GROUP {
            return Ok(Some(partition.unwrap_or(0)));
        }
        let g = self.state.group_id(s, t, &consumer.id)?;
        let key = (s, t, g);
        let member = self
            .groups
            .get(key)
            .and_then(|m| m.members.get(&client))
            .ok_or(NodeError::NotAMember { group: g, client })?;
        match partition {
            Some(p) if member.partitions.contains(&p) => Ok(Some(p)),
            Some(p) => Err(NodeError::PartitionNotOwned {
                group: g,
                partition: p,
                client,
            }),
            None => Ok(self.groups.next_partition(key, client)),
        }
    }

    /// Polls messages. `None` when a group member holds no partition.
    #[allow(clippy::too_many_arguments)]
    pub fn poll(
        &mut self,
        consumer: &WireConsumer,
        client: u128,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
        strategy: &WirePollingStrategy,
        count: u32,
        auto_commit: bool,
    ) -> NodeResult<Option<Polled>> {
        self.check_failed()?;
        let (s, t) = self.state.topic_ids(stream, topic)?;
        let Some(p) = self.poll_partition(consumer, client, s, t, partition)? else {
            return Ok(None);
        };
        let consumer_id = self.consumer_id(consumer, s, t)?;
        let from = match strategy.kind {
            1 => PollFrom::Offset(strategy.value),
            2 => PollFrom::Timestamp(strategy.value),
            3 => PollFrom::First,
            4 => PollFrom::Last,
            5 => PollFrom::Next(consumer_id),
            kind => {
                return Err(NodeError::InvalidRequest(format!(
                    "polling strategy {kind}"
                )))
            }
        };
        let partition = self.partition_mut((s, t, p))?;
        let polled = partition.poll(from, count)?;
        if auto_commit {
            if let Some(last) = last_offset(&polled) {
                partition.store_offset(consumer_id, last)?;
            }
        }
        Ok(Some(polled))
    }

    fn offset_target(
        &self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
    ) -> NodeResult<(PartitionKey, ConsumerId)> {
        let (s, t) = self.state.topic_ids(stream, topic)?;
        let id = self.consumer_id(consumer, s, t)?;
        Ok(((s, t, partition.unwrap_or(0)), id))
    }

    pub fn store_offset(
        &mut self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
        offset: u64,
    ) -> NodeResult<()> {
        self.check_failed()?;
        let (key, id) = self.offset_target(consumer, stream, topic, partition)?;
        Ok(self.partition_mut(key)?.store_offset(id, offset)?)
    }

    pub fn get_offset(
        &mut self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
    ) -> NodeResult<Option<u64>> {
        self.check_failed()?;
        let (key, id) = self.offset_target(consumer, stream, topic, partition)?;
        Ok(self.partition_mut(key)?.get_offset(id)?)
    }

    pub fn delete_offset(
        &mut self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
    ) -> NodeResult<()> {
        self.check_failed()?;
        let (key, id) = self.offset_target(consumer, stream, topic, partition)?;
        if !self.partition_mut(key)?.delete_offset(id)? {
            return Err(NodeError::OffsetNotFound(format!("{id:?}")));
        }
        Ok(())
    }

    /// A partition by key, for reads the server builds replies from.
    pub fn partition(&self, key: PartitionKey) -> Option<&Partition> {
        self.partitions.get(&key)
    }

    /// Direct access to a partition (the simulator and tests).
    pub fn partition_for(&mut self, key: PartitionKey) -> NodeResult<&mut Partition> {
        self.partition_mut(key)
    }

    pub fn partition_stats(&self, key: PartitionKey) -> PartitionStats {
        let Some(partition) = self.partitions.get(&key) else {
            return PartitionStats::default();
        };
        PartitionStats {
            segments: partition.segment_starts().map_or(0, |s| s.len() as u32),
            current_offset: partition
                .visible_next_offset()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .filter(|&o| partition.log_start().is_ok_and(|s| o >= s)),
            log_start: partition.log_start().unwrap_or(0),
            fenced: partition.fence_reason().is_some(),
        }
    }

    // Retention ----------------------------------------------------------------------------

    /// Periodic work, called by the server's timer: a cleaner pass once every
    /// `cleaner_interval` of monotonic time (default one minute).
    pub fn tick(&mut self) -> Vec<Deletion> {
        let now = self.env.clock.monotonic_nanos();
        let interval = self.settings.cleaner_interval.as_nanos() as u64;
        if now.saturating_sub(self.last_clean_nanos) < interval || self.failed.is_some() {
            return Vec::new();
        }
        self.last_clean_nanos = now;
        self.clean()
    }

    /// One pass of the cleaner at the retention clock's time.
    pub fn clean(&mut self) -> Vec<Deletion> {
        let now = self.retention_clock.now(&self.env);
        self.run_cleaner(now)
    }

    /// One pass of the cleaner at `now` (µs): every partition's sealed segments that a
    /// retention rule of its topic condemns, oldest first.
    pub fn run_cleaner(&mut self, now: u64) -> Vec<Deletion> {
        let mut deletions = Vec::new();
        let keys: Vec<PartitionKey> = self.partitions.keys().copied().collect();
        for key in keys {
            let Some(topic) = self
                .state
                .streams
                .get(&key.0)
                .and_then(|s| s.topics.get(&key.1))
            else {
                continue;
            };
            let policy = Policy::for_topic(
                topic.options.message_expiry,
                topic.options.max_topic_size,
                topic.partitions.len() as u32,
                topic.options.segment_size,
            );
            if policy.message_expiry == 0 && policy.budget == 0 {
                continue;
            }
            let Some(sealed) = self.sealed(key) else {
                continue;
            };
            let reasons = retention::decide(&sealed, policy, now);
            deletions.extend(self.delete_prefix(key, &sealed, &reasons, policy, now));
        }
        deletions
    }

    fn sealed(&self, key: PartitionKey) -> Option<Vec<Sealed>> {
        let partition = self.partitions.get(&key)?;
        let sealed = partition.sealed_segments().ok()?;
        Some(
            sealed
                .into_iter()
                .map(|(start_offset, bytes, newest)| Sealed {
                    start_offset,
                    bytes,
                    newest,
                })
                .collect(),
        )
    }

    fn delete_prefix(
        &mut self,
        key: PartitionKey,
        sealed: &[Sealed],
        reasons: &[Reason],
        policy: Policy,
        now: u64,
    ) -> Vec<Deletion> {
        if reasons.is_empty() {
            return Vec::new();
        }
        let sealed_bytes = sealed.iter().map(|s| s.bytes).sum();
        let Some(partition) = self.partitions.get_mut(&key) else {
            return Vec::new();
        };
        if let Err(error) = partition.delete_oldest_segments(reasons.len()) {
            tracing::error!(?key, %error, "retention could not delete segments");
            return Vec::new();
        }
        sealed
            .iter()
            .zip(reasons)
            .map(|(segment, reason)| Deletion {
                partition: key,
                segment: *segment,
                reason: *reason,
                sealed_bytes,
                policy,
                now,
            })
            .collect()
    }

    /// Deletes the `count` oldest sealed segments of a partition (`DeleteSegments`); the
    /// active segment is never deleted.
    pub fn delete_segments(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: u32,
        count: u32,
    ) -> NodeResult<Vec<Deletion>> {
        self.check_failed()?;
        let (s, t) = self.state.topic_ids(stream, topic)?;
        let key = (s, t, partition);
        self.partition_mut(key)?;
        let sealed = self.sealed(key).unwrap_or_default();
        if count as usize > sealed.len() {
            return Err(NodeError::Partition(
                crate::partition::PartitionError::ActiveSegment {
                    requested: count as usize,
                    sealed: sealed.len(),
                },
            ));
        }
        let reasons = vec![Reason::Requested; count as usize];
        let policy = Policy {
            message_expiry: 0,
            budget: 0,
        };
        let now = self.env.clock.wall_micros();
        Ok(self.delete_prefix(key, &sealed, &reasons, policy, now))
    }

    /// Graceful shutdown: every partition flushes and syncs what it holds.
    pub fn close(self) -> NodeResult<()> {
        for (_, partition) in self.partitions {
            if partition.fence_reason().is_none() {
                partition.close()?;
            }
        }
        Ok(())
    }
}

/// The last offset a poll returned.
fn last_offset(polled: &Polled) -> Option<u64> {
    let batch = polled.batches.last()?;
    crate::format::MessageIter::new(
        batch,
        crate::format::BatchHeader::decode(batch).ok()?.base_offset,
    )
    .last()
    .map(|m| m.offset)
}

fn topic_dir(root: &Path, stream: u32, topic: u32) -> PathBuf {
    root.join("streams")
        .join(stream.to_string())
        .join("topics")
        .join(topic.to_string())
}

/// The directory work boot redoes, in order: that of the ops after the recorded applied op
/// (their work may not have finished), except what a later op superseded.
pub fn work_to_redo(plan: &MetaPlan) -> Vec<(u64, &DirWork)> {
    let applied = plan.record.map_or(0, |r| r.applied_op);
    plan.replayed
        .iter()
        .filter(|r| r.op > applied)
        .flat_map(|r| r.applied.work.iter().map(move |w| (r.op, w)))
        .filter(|(_, work)| !superseded(&plan.state, work))
        .collect()
}

/// Whether the state after every replayed op has moved past `work`: a later op replaced
/// the partition it creates, or re-created what it removes. Redoing it would undo that later
/// op's work (and the messages acknowledged since); the later op's own redo follows, and
/// boot's orphan removal takes whatever no entity owns.
fn superseded(state: &MetaState, work: &DirWork) -> bool {
    let topic = |s: &u32, t: &u32| state.streams.get(s).and_then(|st| st.topics.get(t));
    match work {
        DirWork::CreatePartition(identity) | DirWork::PurgePartition(identity) => {
            !state.partitions().contains(identity)
        }
        DirWork::RemovePartition {
            stream,
            topic: t,
            partition,
        } => topic(stream, t).is_some_and(|t| t.partitions.contains_key(partition)),
        DirWork::RemoveTopic { stream, topic: t } => topic(stream, t).is_some(),
        DirWork::RemoveStream { stream } => state.streams.contains_key(stream),
    }
}

/// Removes `path` (if present) and syncs its parent.
fn remove_durably(disk: &dyn Disk, path: &Path) -> io::Result<()> {
    if !disk.exists(path)? {
        return Ok(());
    }
    disk.remove_dir_all(path)?;
    if let Some(parent) = path.parent() {
        disk.sync_dir(parent)?;
    }
    Ok(())
}

/// Syncs every directory from `dir`'s parent up to `root`: a partition's new name, and the
/// names of the stream and topic directories created with it, survive a power loss.
fn sync_ancestors(disk: &dyn Disk, root: &Path, dir: &Path) -> io::Result<()> {
    let mut current = dir.parent();
    while let Some(path) = current {
        disk.sync_dir(path)?;
        if path == root {
            break;
        }
        current = path.parent();
    }
    Ok(())
}

/// A directory under `streams/` boot found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Stream(u32),
    Topic(u32, u32),
    Partition(u32, u32, u32),
}

impl Found {
    fn path(&self, root: &Path) -> PathBuf {
        match *self {
            Found::Stream(s) => root.join("streams").join(s.to_string()),
            Found::Topic(s, t) => topic_dir(root, s, t),
            Found::Partition(s, t, p) => partition_dir(root, s, t, p),
        }
    }
}

/// An id as a directory name: exactly the decimal id.
fn dir_id(name: &str) -> Option<u32> {
    name.parse::<u32>().ok().filter(|id| id.to_string() == name)
}

/// The directories of the entity tree under `root/streams`.
fn tree(disk: &dyn Disk, root: &Path, notes: &mut Vec<String>) -> io::Result<Vec<Found>> {
    let mut found = Vec::new();
    let streams = root.join("streams");
    if !disk.exists(&streams)? {
        return Ok(found);
    }
    let mut note = |path: PathBuf| notes.push(format!("ignored unknown entry {}", path.display()));
    for stream in disk.read_dir(&streams)? {
        let Some(s) = dir_id(&stream.name).filter(|_| stream.is_dir) else {
            note(streams.join(&stream.name));
            continue;
        };
        found.push(Found::Stream(s));
        let topics = streams.join(&stream.name).join("topics");
        if !disk.exists(&topics)? {
            continue;
        }
        for topic in disk.read_dir(&topics)? {
            let Some(t) = dir_id(&topic.name).filter(|_| topic.is_dir) else {
                note(topics.join(&topic.name));
                continue;
            };
            found.push(Found::Topic(s, t));
            let partitions = topics.join(&topic.name).join("partitions");
            if !disk.exists(&partitions)? {
                continue;
            }
            for partition in disk.read_dir(&partitions)? {
                match dir_id(&partition.name).filter(|_| partition.is_dir) {
                    Some(p) => found.push(Found::Partition(s, t, p)),
                    None => note(partitions.join(&partition.name)),
                }
            }
        }
    }
    Ok(found)
}

/// The found directories of entities the state does not have (the outermost one of each).
fn orphans(state: &MetaState, found: &[Found]) -> Vec<Found> {
    found
        .iter()
        .copied()
        .filter(|f| match *f {
            Found::Stream(s) => !state.streams.contains_key(&s),
            Found::Topic(s, t) => state
                .streams
                .get(&s)
                .is_some_and(|st| !st.topics.contains_key(&t)),
            Found::Partition(s, t, p) => state
                .streams
                .get(&s)
                .and_then(|st| st.topics.get(&t))
                .is_some_and(|topic| !topic.partitions.contains_key(&p)),
        })
        .collect()
}

/// What boot would do to the entity tree, without doing it (for `cairn check`).
pub struct TreePlan {
    pub orphans: Vec<PathBuf>,
    pub notes: Vec<String>,
}

/// The orphan directories boot would remove given `state`.
pub fn plan_tree(disk: &dyn Disk, root: &Path, state: &MetaState) -> io::Result<TreePlan> {
    let mut notes = Vec::new();
    let found = tree(disk, root, &mut notes)?;
    Ok(TreePlan {
        orphans: orphans(state, &found)
            .iter()
            .map(|f| f.path(root))
            .collect(),
        notes,
    })
}

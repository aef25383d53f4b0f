//! The metadata group's state machine: every committed command applied on every replica.
//!
//! | who holds the state | a command is | durable in | boot |
//! |---|---|---|---|
//! | the member's node ([`MetaMachine::with_node`], a server) | a decided op (`Node::apply_decided`, its decision the entry's term and index) | the node's journal and checkpoints | the node boots from its own; the log after the last snapshot is handed to it again and it skips every decision it holds |
//! | this machine, in memory (the simulator's in-memory worlds) | applied to a `MetaState` with the same context on every replica | the log and the last snapshot | the snapshot, then the committed entries after it |
//!
//! Either way the leader's timestamp and the cluster's id are the op's context, so replicas
//! that applied the same log hold equal states. A snapshot is a file in the group's
//! directory written whole before it counts (`snapshot.tmp`, synced, renamed, the directory
//! synced), its data the single node's snapshot format (`metadata::snapshot::encode`).

use crate::types::{
    Entry, LogId, MetaCommand, MetaConfig, MetaOutcome, Snapshot, SnapshotMeta, StoredMembership,
};
use cairn_engine::env::{Disk, OpenMode};
use cairn_engine::metadata::journal::{decision, Origin};
use cairn_engine::metadata::snapshot as meta_snapshot;
use cairn_engine::node::{Node, NodeError};
use cairn_engine::state::ops::MetaOp;
use cairn_engine::state::{MetaState, OpContext};
use futures_util::StreamExt;
use iggy_binary_protocol::Operation;
use openraft::entry::RaftEntry;
use openraft::storage::EntryResponder;
use openraft::{EntryPayload, RaftSnapshotBuilder};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use xxhash_rust::xxh3::xxh3_64;

/// The snapshot file in the group's directory, and its temporary name.
pub const SNAPSHOT_FILE: &str = "snapshot";
/// The largest snapshot file read back (the metadata state's own limits keep it far below).
pub const MAX_SNAPSHOT_LEN: u64 = 256 << 20;

/// Told of every entry a replica applies, in order (the simulator's check that replicas
/// agree on every committed entry). Production sets none.
pub type ApplyObserver = Arc<dyn Fn(&Entry) + Send + Sync>;

/// The replicated state and where its snapshots live.
#[derive(Clone)]
pub struct MetaMachine {
    inner: Arc<Mutex<Inner>>,
    /// In a server, the node that applies the group's commands ([`MetaMachine::with_node`]);
    /// `None` keeps the state here, in memory (the simulator's cluster world).
    node: Option<Node>,
}

struct Inner {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    cluster: u128,
    state: MetaState,
    applied: Option<LogId>,
    membership: StoredMembership,
    /// The last snapshot, as stored.
    snapshot: Option<StoredSnapshot>,
    observer: Option<ApplyObserver>,
    /// Snapshots installed from a leader since this replica started.
    installed: u64,
    /// Commands handed to the node that it had applied before this replica restarted.
    replayed: u64,
    /// The last entry the canary `apply-uncommitted` applied before openraft did (openraft
    /// only learns of an entry applied when it asks for it: `applied` stays its view).
    eager: Option<LogId>,
    /// The canary's entries a node has yet to apply, and whether a worker applies them.
    eager_queue: std::collections::VecDeque<Entry>,
    eager_worker: bool,
}

#[derive(Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    #[serde(with = "crate::types::bytes_serde")]
    data: Vec<u8>,
}

impl MetaMachine {
    /// The state machine of the group stored under `dir`: empty, or the last snapshot found
    /// there (a damaged snapshot file is an error: the log before it may be purged).
    pub fn open(
        disk: Arc<dyn Disk>,
        dir: &Path,
        cluster: u128,
        observer: Option<ApplyObserver>,
    ) -> io::Result<MetaMachine> {
        let snapshot = read_snapshot(&*disk, &dir.join(SNAPSHOT_FILE))?;
        // The state starts as the snapshot holds it (openraft then applies the committed
        // entries after it): boot installs nothing, so `installed` counts only snapshots a
        // leader sent.
        let (state, applied, membership) = match &snapshot {
            None => (MetaState::default(), None, StoredMembership::default()),
            Some(stored) => {
                let decoded = meta_snapshot::Snapshot::decode(&stored.data).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the group's snapshot: {e}"),
                    )
                })?;
                (
                    decoded.state,
                    stored.meta.last_log_id,
                    stored.meta.last_membership.clone(),
                )
            }
        };
        Ok(MetaMachine {
            inner: Arc::new(Mutex::new(Inner {
                disk,
                dir: dir.to_owned(),
                cluster,
                state,
                applied,
                membership,
                snapshot,
                observer,
                installed: 0,
                replayed: 0,
                eager: None,
                eager_queue: Default::default(),
                eager_worker: false,
            })),
            node: None,
        })
    }

    /// The machine whose commands `node` applies: each committed command is handed to the
    /// node as a decided op (`Node::apply_decided`) and answered once the node made it
    /// durable and applied it; the node's own journal, not this machine, holds the state,
    /// and its last decision tells a command applied before a restart from a new one. A
    /// snapshot is the node's state after its op; a member that installs one from a leader
    /// has its node adopt it (`Node::adopt`) before the group records it.
    ///
    /// Refused when the node holds less than the group's snapshot says was applied: the
    /// entries before the snapshot would never reach it again (its metadata was lost or
    /// replaced while the group's directory survived). Such a member must come back as a
    /// new replica (its `cluster/metadata` directory removed too) and be added.
    pub fn with_node(mut self, node: Node) -> io::Result<MetaMachine> {
        assert!(
            node.clustered(),
            "a clustered node applies a group's commands"
        );
        let (snapshot, held) = (self.lock().state.decided(), node.view().state.decided());
        if held < snapshot {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the node's metadata ends at decision {held:#x}, before the group's snapshot \
                     ({snapshot:#x}): it was lost or replaced; remove this member's \
                     cluster/metadata too, so that it starts as a new replica, and add it"
                ),
            ));
        }
        self.node = Some(node);
        Ok(self)
    }

    /// Snapshots installed from a leader since this replica started (a replica too far
    /// behind for the leader's log catches up this way).
    pub fn installed_snapshots(&self) -> u64 {
        self.lock().installed
    }

    /// Commands the node answered as applied before this replica restarted (boot hands the
    /// log after the last snapshot to the node again; it applies none of them twice).
    pub fn replayed_commands(&self) -> u64 {
        self.lock().replayed
    }

    /// The canary `apply-uncommitted`: applies `entries` as they arrive from a leader,
    /// before they commit (each at most once: openraft's later apply skips them). A leader
    /// that loses its term before they commit leaves this replica with ops no one decided.
    pub fn apply_uncommitted(&self, entries: &[Entry]) {
        let mut inner = self.lock();
        for entry in entries {
            let log_id = entry.log_id();
            if inner
                .eager
                .max(inner.applied)
                .is_none_or(|a| a.index < log_id.index)
            {
                let applied = inner.applied;
                match &self.node {
                    // The node applies asynchronously: queued for one worker, in order.
                    Some(_) => {
                        inner.record(entry);
                        inner.eager_queue.push_back(entry.clone());
                    }
                    None => {
                        inner.apply_entry(entry);
                    }
                }
                inner.applied = applied;
                inner.eager = Some(log_id);
            }
        }
        if let Some(node) = &self.node {
            if !inner.eager_queue.is_empty() && !inner.eager_worker {
                inner.eager_worker = true;
                let tasks = node.env().tasks.clone();
                let (machine, node) = (self.clone(), node.clone());
                let worker = async move {
                    loop {
                        let next = {
                            let mut inner = machine.lock();
                            let next = inner.eager_queue.pop_front();
                            inner.eager_worker = next.is_some();
                            next
                        };
                        let Some(entry) = next else { return };
                        if let EntryPayload::Normal(command) = &entry.payload {
                            let _ = Self::apply_on_node(&node, entry.log_id(), command).await;
                        }
                    }
                };
                drop(tasks.spawn(Box::pin(worker)));
            }
        }
    }

    /// The state as applied so far, and the last entry applied.
    pub fn state(&self) -> (MetaState, Option<LogId>) {
        let inner = self.lock();
        match &self.node {
            Some(node) => (node.view().state.clone(), inner.applied),
            None => (inner.state.clone(), inner.applied),
        }
    }

    /// Hands a committed command to the node: the outcome every member computes alike, or
    /// an error when this member could not apply it (its node stopped, its journal is out
    /// of space): the replica must not go on past an entry it did not apply.
    async fn apply_on_node(
        node: &Node,
        log_id: LogId,
        command: &MetaCommand,
    ) -> io::Result<MetaOutcome> {
        let Some(op) = decode(command) else {
            return Ok(MetaOutcome::Undecodable);
        };
        let origin = Origin {
            timestamp: command.timestamp,
            user_id: command.user_id,
            decided: decision(log_id.leader_id.term, log_id.index),
            key: command.key,
            asked_at: command.asked_at,
            ..Origin::default()
        };
        let reply = node.apply_decided(op, origin).await;
        match reply.map(|r| r.result) {
            Ok(Ok(applied)) => Ok(MetaOutcome::Applied {
                created: applied.created,
                repeated: applied.repeated,
            }),
            Ok(Err(NodeError::AlreadyDecided(_))) => Ok(MetaOutcome::Replayed),
            Ok(Err(e)) | Err(e) if !is_refusal(&e) => Err(io::Error::other(format!(
                "the node could not apply entry {log_id}: {e}"
            ))),
            Ok(Err(e)) | Err(e) => Ok(refused(e)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether the node's answer is the state machine's refusal, which every member gives
/// alike, rather than this member's own failure to apply (stopped, out of space, busy).
/// A directory of this member's disk in the way of a decided op's partition stops its
/// node (the test
/// `a_directory_in_the_way_of_a_decided_partition_stops_the_member` below): it never refuses what the others applied.
fn is_refusal(e: &NodeError) -> bool {
    !matches!(
        e,
        NodeError::Stopped(_)
            | NodeError::MetadataNoSpace
            | NodeError::Busy(_)
            | NodeError::Undecided(_)
            | NodeError::AlreadyDecided(_)
    )
}

/// The journaled operation a command carries, if its code and body decode as one.
fn decode(command: &MetaCommand) -> Option<MetaOp> {
    let operation = Operation::from_command_code(command.operation)?;
    MetaOp::decode(operation, &command.body).ok()
}

/// Applies one command to `state` as op `index` (its log index).
pub fn apply_command(
    state: &mut MetaState,
    cluster: u128,
    index: u64,
    command: &MetaCommand,
) -> MetaOutcome {
    let Some(op) = decode(command) else {
        return MetaOutcome::Undecodable;
    };
    let ctx = OpContext {
        op: index,
        timestamp: command.timestamp,
        cluster,
        decided: 0,
        proposal: command.key,
        asked_at: command.asked_at,
    };
    match state.apply(&op, ctx) {
        Ok(applied) => MetaOutcome::Applied {
            created: applied.created,
            repeated: applied.repeated,
        },
        Err(e) => refused(e),
    }
}

/// The outcome of a command the state machine refused: a forgotten key kept as such (the
/// caller is told the op may have applied), any other refusal by its code and words.
fn refused(e: NodeError) -> MetaOutcome {
    match e {
        NodeError::ProposalForgotten {
            asked_at,
            forgotten_through,
        } => MetaOutcome::Forgotten {
            asked_at,
            forgotten_through,
        },
        e => MetaOutcome::Refused {
            code: e.code(),
            reason: e.to_string(),
        },
    }
}

impl Inner {
    fn apply_entry(&mut self, entry: &Entry) -> MetaOutcome {
        let log_id = entry.log_id();
        let outcome = match &entry.payload {
            EntryPayload::Normal(command) => {
                apply_command(&mut self.state, self.cluster, log_id.index, command)
            }
            EntryPayload::Blank | EntryPayload::Membership(_) => MetaOutcome::Applied {
                created: None,
                repeated: false,
            },
        };
        self.record(entry);
        outcome
    }

    /// Records `entry` as applied (a membership entry as the group's configuration).
    fn record(&mut self, entry: &Entry) {
        let log_id = entry.log_id();
        assert!(
            self.applied.as_ref().is_none_or(|a| a.index < log_id.index),
            "entries apply in index order, each once"
        );
        if let EntryPayload::Membership(m) = &entry.payload {
            self.membership = StoredMembership::new(Some(log_id), m.clone());
        }
        self.applied = Some(log_id);
        if let Some(observer) = &self.observer {
            observer(entry);
        }
    }

    /// A snapshot of the node's state after its op (when a node applies the commands: a
    /// member that adopts it numbers its ops on from there) or of the state held here
    /// after the last entry applied.
    fn build(&mut self, node: Option<(u64, &MetaState)>) -> io::Result<Snapshot> {
        let last = self.applied;
        let (op, state) = node.unwrap_or((last.map_or(0, |l| l.index), &self.state));
        let data = meta_snapshot::encode(self.cluster, op, 0, state);
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: self.membership.clone(),
        };
        let stored = StoredSnapshot { meta, data };
        write_snapshot(&*self.disk, &self.dir, &stored)?;
        self.snapshot = Some(stored.clone());
        Ok(Snapshot {
            meta: stored.meta,
            snapshot: stored.data,
        })
    }

    /// Records a snapshot a leader sent: stored, and (when no node holds the state) its
    /// state held here.
    fn install(
        &mut self,
        meta: &SnapshotMeta,
        data: Vec<u8>,
        state: Option<MetaState>,
    ) -> io::Result<()> {
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        write_snapshot(&*self.disk, &self.dir, &stored)?;
        if let Some(state) = state {
            self.state = state;
        }
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.snapshot = Some(stored);
        self.installed += 1;
        Ok(())
    }
}

fn write_snapshot(disk: &dyn Disk, dir: &Path, snapshot: &StoredSnapshot) -> io::Result<()> {
    write_whole(disk, dir, SNAPSHOT_FILE, snapshot)
}

fn read_snapshot(disk: &dyn Disk, path: &Path) -> io::Result<Option<StoredSnapshot>> {
    read_whole(disk, path, MAX_SNAPSHOT_LEN)
}

/// Writes `value` as `dir/name`, whole: `[checksum u64][length u64][rmp of the value]`
/// written to `name.tmp`, synced, renamed, and the directory synced, so the name holds
/// a whole value or the one before.
pub(crate) fn write_whole<T: Serialize>(
    disk: &dyn Disk,
    dir: &Path,
    name: &str,
    value: &T,
) -> io::Result<()> {
    let _span = tracing::debug_span!("write_whole", dir = %dir.display(), name).entered();
    let body = rmp_serde::to_vec_named(value).map_err(io::Error::other)?;
    let mut bytes = Vec::with_capacity(16 + body.len());
    bytes.extend_from_slice(&xxh3_64(&body).to_le_bytes());
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&body);
    let temp = dir.join(format!("{name}.tmp"));
    let file = disk.open(&temp, OpenMode::CreateOrOpen)?;
    file.set_len(0)?;
    file.write_all_at(&[io::IoSlice::new(&bytes)], 0)?;
    file.sync_data()?;
    drop(file);
    disk.rename(&temp, &dir.join(name))?;
    disk.sync_dir(dir)
}

/// What [`write_whole`] wrote at `path` (`None` if there is no file); damage (a checksum or
/// length that does not match, more than `max` bytes) is an `InvalidData` error.
pub(crate) fn read_whole<T: serde::de::DeserializeOwned>(
    disk: &dyn Disk,
    path: &Path,
    max: u64,
) -> io::Result<Option<T>> {
    if !disk.exists(path)? {
        return Ok(None);
    }
    let damaged = |why: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is damaged: {why}", path.display()),
        )
    };
    let file = disk.open(path, OpenMode::Read)?;
    let len = file.len()?;
    if !(16..=max).contains(&len) {
        return Err(damaged(format!("{len} bytes")));
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)?;
    let checksum = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let body_len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let body = &bytes[16..];
    if body_len != body.len() as u64 || xxh3_64(body) != checksum {
        return Err(damaged("its checksum or length does not match".into()));
    }
    rmp_serde::from_slice(body)
        .map(Some)
        .map_err(|e| damaged(e.to_string()))
}

impl RaftSnapshotBuilder<MetaConfig> for MetaMachine {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        // `applied` is read under the lock (it advances only after the node applied an
        // entry), then the node's state: it may be ahead of the snapshot's last entry by an
        // entry being applied now, never behind (a node skips the decisions it holds).
        let mut inner = self.lock();
        let view = self.node.as_ref().map(|node| node.view());
        inner.build(view.as_deref().map(|v| (v.op, &v.state)))
    }
}

impl openraft::storage::RaftStateMachine<MetaConfig> for MetaMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = MetaMachine;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        let inner = self.lock();
        Ok((inner.applied, inner.membership.clone()))
    }

    async fn apply<S>(&mut self, mut entries: S) -> io::Result<()>
    where
        S: futures_util::Stream<Item = io::Result<EntryResponder<MetaConfig>>> + Unpin + Send,
    {
        while let Some(next) = entries.next().await {
            let (entry, responder) = next?;
            if let (Some(node), EntryPayload::Normal(command)) = (&self.node, &entry.payload) {
                let outcome = Self::apply_on_node(node, entry.log_id(), command).await?;
                let mut inner = self.lock();
                inner.record(&entry);
                inner.replayed += u64::from(outcome == MetaOutcome::Replayed);
                drop(inner);
                if let Some(responder) = responder {
                    responder.send(outcome);
                }
                continue;
            }
            let mut inner = self.lock();
            let index = entry.log_id().index;
            if inner.eager.is_some_and(|a| a.index >= index) {
                inner.applied = Some(entry.log_id());
                continue;
            }
            let outcome = inner.apply_entry(&entry);
            drop(inner);
            if let Some(responder) = responder {
                responder.send(outcome);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> MetaMachine {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, data: Vec<u8>) -> io::Result<()> {
        let decoded = meta_snapshot::Snapshot::decode(&data)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("snapshot: {e}")))?;
        let cluster = self.lock().cluster;
        if decoded.cluster != cluster {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a snapshot of cluster {:#x} arrived at a replica of {cluster:#x}",
                    decoded.cluster
                ),
            ));
        }
        let Some(node) = &self.node else {
            return self.lock().install(meta, data, Some(decoded.state));
        };
        // The node adopts the state first: a crash before the group's snapshot is stored
        // leaves the group where it was, and the leader sends the snapshot again, which the
        // node then holds already. Its chain restarts from the decision the state holds.
        let anchor = decoded.state.decided();
        node.adopt(decoded.op, anchor, decoded.state)
            .await
            .map_err(|e| {
                io::Error::other(format!(
                    "the node could not adopt the snapshot up to {:?}: {e}",
                    meta.last_log_id
                ))
            })?;
        self.lock().install(meta, data, None)
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        Ok(self.lock().snapshot.clone().map(|s| Snapshot {
            meta: s.meta,
            snapshot: s.data,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::env::real::{block_on, env_with_workers};
    use cairn_engine::metadata::MetaSettings;
    use cairn_engine::node::{NodeSettings, PasswordCost};
    use iggy_binary_protocol::requests::streams::CreateStreamRequest;
    use iggy_binary_protocol::{WireName, WireOptions};

    const CLUSTER: u128 = 0xc1;

    fn create(name: &str) -> MetaOp {
        MetaOp::CreateStream(CreateStreamRequest {
            name: WireName::new(name).unwrap(),
            options: WireOptions::empty(),
        })
    }

    /// A group snapshot under `dir` whose state applied decision `(1, 1)`.
    fn snapshot_after_one_decision(disk: &dyn Disk, dir: &Path) {
        let mut state = MetaState::default();
        let ctx = OpContext {
            op: 1,
            timestamp: 7,
            cluster: CLUSTER,
            decided: decision(1, 1),
            proposal: 0,
            asked_at: 0,
        };
        state.apply(&create("orders"), ctx).unwrap();
        let data = meta_snapshot::encode(CLUSTER, 1, 0, &state);
        let meta = SnapshotMeta {
            last_log_id: None,
            last_membership: StoredMembership::default(),
        };
        write_snapshot(disk, dir, &StoredSnapshot { meta, data }).unwrap();
    }

    /// A clustered node of `CLUSTER` over `dir`.
    fn clustered_node(env: &cairn_engine::env::Env, dir: &Path) -> Node {
        let settings = NodeSettings {
            password_cost: PasswordCost::CHEAP,
            meta: MetaSettings {
                cluster: Some(CLUSTER),
                ..MetaSettings::default()
            },
            shards: 1,
            ..NodeSettings::default()
        };
        block_on(Node::start(env, dir, settings)).unwrap().node
    }

    #[test]
    fn a_node_behind_the_groups_snapshot_is_refused_and_one_that_holds_it_is_not() {
        let env = env_with_workers(2).unwrap();
        let (group, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        snapshot_after_one_decision(&*env.disk, group.path());
        let node = clustered_node(&env, data.path());
        let open = || MetaMachine::open(env.disk.clone(), group.path(), CLUSTER, None).unwrap();
        // A node that lost its metadata (here: never had it) would miss the snapshot's ops.
        let refused = open().with_node(node.clone()).err().expect("refused");
        assert!(refused.to_string().contains("new replica"), "{refused}");
        // Once it holds the snapshot's last decision, it is the group's state machine.
        let origin = Origin {
            timestamp: 7,
            decided: decision(1, 1),
            ..Origin::default()
        };
        let applied = block_on(node.apply_decided(create("orders"), origin)).unwrap();
        assert!(applied.result.is_ok(), "{:?}", applied.result);
        assert!(open().with_node(node.clone()).is_ok());
        block_on(node.shutdown()).unwrap();
    }

    /// A command as the decider sends it: `op` under `key`, asked at `asked_at`.
    fn keyed(op: &MetaOp, key: u128, asked_at: u64) -> MetaCommand {
        MetaCommand {
            operation: op.operation().to_command_code().unwrap(),
            body: op.body().to_vec(),
            timestamp: 7,
            user_id: 0,
            client: 0,
            request: 0,
            key,
            asked_at,
        }
    }

    #[test]
    fn a_repeated_key_is_answered_as_applied_and_a_forgotten_one_as_forgotten() {
        use cairn_engine::state::proposals::MAX_PROPOSALS_KEPT;
        let mut state = MetaState::default();
        let first = apply_command(&mut state, CLUSTER, 1, &keyed(&create("s0"), 1, 0));
        assert_eq!(
            first,
            MetaOutcome::Applied {
                created: Some(0),
                repeated: false
            }
        );
        let again = apply_command(&mut state, CLUSTER, 2, &keyed(&create("s0"), 1, 0));
        assert_eq!(
            again,
            MetaOutcome::Applied {
                created: Some(0),
                repeated: true
            }
        );
        // Enough keyed ops later that key 1 (index 1) is forgotten.
        let rename = MetaOp::UpdateStream(
            iggy_binary_protocol::requests::streams::UpdateStreamRequest {
                stream_id: iggy_binary_protocol::WireIdentifier::numeric(0),
                name: WireName::new("s0").unwrap(),
                options: WireOptions::empty(),
            },
        );
        for index in 3..MAX_PROPOSALS_KEPT as u64 + 3 {
            let outcome =
                apply_command(&mut state, CLUSTER, index, &keyed(&rename, index.into(), 2));
            assert!(
                matches!(outcome, MetaOutcome::Applied { .. }),
                "{outcome:?}"
            );
        }
        let late = MAX_PROPOSALS_KEPT as u64 + 3;
        let forgotten = apply_command(&mut state, CLUSTER, late, &keyed(&create("s0"), 1, 0));
        assert_eq!(
            forgotten,
            MetaOutcome::Forgotten {
                asked_at: 0,
                forgotten_through: 1
            }
        );
        // And the decider tells its caller so, typed (the server answers it as unavailable).
        let reply = crate::decide::reply_of(forgotten);
        assert!(matches!(
            reply.result,
            Err(NodeError::ProposalForgotten {
                asked_at: 0,
                forgotten_through: 1
            })
        ));
    }

    /// A directory of this member's disk where a decided op makes a partition is this
    /// member's failure, not a refusal every member gives: applying stops, rather than
    /// leave this member without the topic the others made.
    #[test]
    fn a_directory_in_the_way_of_a_decided_partition_stops_the_member() {
        use iggy_binary_protocol::requests::topics::CreateTopicRequest;
        use iggy_binary_protocol::WireIdentifier;
        type LeaderId = openraft::impls::leader_id_adv::LeaderId<u64, u64>;
        let env = env_with_workers(2).unwrap();
        let data = tempfile::tempdir().unwrap();
        let node = clustered_node(&env, data.path());
        let at = |index| {
            LogId::new(
                LeaderId {
                    term: 1,
                    node_id: 1,
                },
                index,
            )
        };
        let stream = create("orders");
        let made = block_on(MetaMachine::apply_on_node(
            &node,
            at(1),
            &keyed(&stream, 0, 0),
        ));
        assert!(matches!(made, Ok(MetaOutcome::Applied { .. })), "{made:?}");
        let stray = cairn_engine::partition::partition_dir(data.path(), 0, 0, 0);
        env.disk.create_dir_all(&stray.join("leftover")).unwrap();
        let topic = MetaOp::CreateTopic(CreateTopicRequest {
            stream_id: WireIdentifier::numeric(0),
            partitions_count: 1,
            name: WireName::new("events").unwrap(),
            options: WireOptions::empty(),
        });
        let refused = block_on(MetaMachine::apply_on_node(
            &node,
            at(2),
            &keyed(&topic, 0, 0),
        ));
        let error = refused.expect_err("this member cannot apply it");
        assert!(
            error.to_string().contains("does not account for it"),
            "{error}"
        );
        assert!(node.failure().is_some(), "the member's node stopped");
        block_on(node.shutdown()).unwrap();
    }
}

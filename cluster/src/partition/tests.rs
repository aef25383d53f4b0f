//! Three replicas of one partition in one process, their Raft messages handed over in
//! memory: every replica's segments hold the same bytes, a replica restarted after
//! applying past its checkpoint applies nothing twice, and one behind the leader's purged
//! WAL refills its partition from its peers' segments.

use super::machine::{MachineCounts, PartMachine};
use super::refill;
use super::sink::{Held, HeldPlace, PartitionSink};
use super::*;
use crate::log::LogStore;
use crate::rt::in_env;
use cairn_engine::config::{Durability, PartitionSettings, TopicConfig};
use cairn_engine::env::real::{block_on, env_with_workers};
use cairn_engine::env::{BoxFuture, Env};
use cairn_engine::format::BatchBuilder;
use cairn_engine::partition::{Partition, PartitionIdentity, PollFrom};
use futures_util::FutureExt;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{RaftNetworkFactory, RaftNetworkV2, SnapshotPolicy};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CLUSTER: u128 = 0x5eed;
const WAIT: Duration = Duration::from_secs(20);
/// Sends numbered from here carry big messages ([`batch`]).
const BIG: u64 = 1_000;

type Vote = openraft::alias::VoteOf<PartConfig>;

/// The replicas reachable in memory, by Raft id (a stopped one is absent), and their
/// partitions.
#[derive(Clone)]
struct Router {
    env: Env,
    up: Arc<Mutex<BTreeMap<NodeId, (PartRaft, Held)>>>,
}

impl Router {
    fn new(env: &Env) -> Router {
        Router {
            env: env.clone(),
            up: Arc::default(),
        }
    }

    fn get(&self, id: NodeId) -> Result<PartRaft, Unreachable<PartConfig>> {
        let found = self
            .up
            .lock()
            .unwrap()
            .get(&id)
            .map(|(raft, _)| raft.clone());
        found.ok_or_else(|| Unreachable::new(&std::io::Error::other("stopped")))
    }

    fn down(&self, id: NodeId) {
        self.up.lock().unwrap().remove(&id);
    }
}

impl refill::PeerBatches for Router {
    fn fetch(
        &self,
        peer: NodeId,
        _node: Peer,
        from: u64,
    ) -> BoxFuture<'static, std::io::Result<refill::Fetched>> {
        let held = self
            .up
            .lock()
            .unwrap()
            .get(&peer)
            .map(|(_, held)| held.clone());
        Box::pin(async move {
            let held = held.ok_or_else(|| std::io::Error::other("stopped"))?;
            let (_, next) = held.bounds().await?;
            let batches = held.read(from, refill::FETCH_BUDGET).await?;
            Ok(refill::Fetched { batches, next })
        })
    }
}

struct Client {
    router: Router,
    target: NodeId,
}

impl RaftNetworkFactory<PartConfig> for Router {
    type Network = Client;

    async fn new_client(&mut self, target: NodeId, _node: &Peer) -> Client {
        Client {
            router: self.clone(),
            target,
        }
    }
}

fn failed<E: std::error::Error + 'static>(e: E) -> RPCError<PartConfig> {
    RPCError::Network(NetworkError::new(&e))
}

impl RaftNetworkV2<PartConfig> for Client {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<PartConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<PartConfig>, RPCError<PartConfig>> {
        let raft = self.router.get(self.target)?;
        raft.append_entries(rpc).await.map_err(failed)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<PartConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<PartConfig>, RPCError<PartConfig>> {
        let raft = self.router.get(self.target)?;
        raft.vote(rpc).await.map_err(failed)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: PartSnapshot,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<PartConfig>, StreamingError<PartConfig>> {
        let raft = self.router.get(self.target)?;
        let source = Arc::new(self.router.clone());
        let env = &self.router.env;
        refill::install_or_refill(env, &raft, (vote, snapshot), 0, source)
            .await
            .map_err(|e| StreamingError::Network(NetworkError::new(&std::io::Error::other(e))))
    }
}

/// One replica's storage: its directory, and what runs over it while it is up.
struct Replica {
    dir: PathBuf,
    member: u32,
    id: NodeId,
    raft: PartRaft,
    machine: PartMachine,
    held: Held,
    counts: Arc<MachineCounts>,
}

/// The partition's topic: segments of the smallest size, so big sends fill several.
fn topic() -> TopicConfig {
    TopicConfig {
        durability: Durability::Replicated,
        segment_size: cairn_engine::config::MIN_SEGMENT_SIZE,
        ..TopicConfig::default()
    }
}

const IDENTITY: PartitionIdentity = PartitionIdentity {
    stream_id: 1,
    topic_id: 1,
    partition_id: 0,
    nonce: 7,
};

/// Starts (or starts again) the replica of `member` in `dir`, its WAL keeping `kept`
/// entries behind each checkpoint.
async fn start(env: &Env, router: &Router, (dir, member): (&Path, u32), kept: u64) -> Replica {
    let wal = dir.join("wal");
    let log = LogStore::<PartConfig>::open(env, &wal, CLUSTER, member)
        .await
        .unwrap();
    let data = dir.join("partition");
    let settings = PartitionSettings::default();
    let partition = if env.disk.exists(&data).unwrap() {
        Partition::open(env, &data, IDENTITY, topic(), settings)
            .unwrap()
            .partition
    } else {
        Partition::create(env, &data, IDENTITY, topic(), settings).unwrap()
    };
    let place = HeldPlace {
        env: env.clone(),
        dir: data,
        identity: IDENTITY,
        config: topic(),
        settings,
    };
    let held = Held::at(place, partition);
    // What a member's group start does first (`groups.rs`): repair from the peers.
    let checkpointed = super::machine::checkpointed(&*env.disk, &wal).unwrap();
    let mark = refill::RepairMark {
        disk: &*env.disk,
        dir: &wal,
    };
    let repaired = refill::needs_repair(&held, checkpointed, &mark)
        .await
        .unwrap();
    if repaired {
        let peers: Vec<(NodeId, Peer)> = router
            .up
            .lock()
            .unwrap()
            .keys()
            .map(|id| (*id, Peer::default()))
            .collect();
        refill::repair(&held, (checkpointed, &mark), (&peers, false), router)
            .await
            .unwrap();
    }
    let counts = Arc::new(MachineCounts::default());
    let machine = PartMachine::open(
        env.disk.clone(),
        &wal,
        Arc::new(held.clone()),
        (counts.clone(), Default::default()),
    )
    .await
    .unwrap();
    if repaired || mark.present().unwrap() {
        machine.restore_offsets().await.unwrap();
        if mark.present().unwrap() {
            mark.clear().unwrap();
        }
    }
    let config = openraft::Config {
        heartbeat_interval: 50,
        election_timeout_min: 300,
        election_timeout_max: 600,
        // A checkpoint every few entries, so restarts find entries applied past one.
        snapshot_policy: SnapshotPolicy::LogsSinceLast(5),
        max_in_snapshot_log_to_keep: kept,
        ..Default::default()
    }
    .validate()
    .unwrap();
    let id = log.id();
    let raft = PartRaft::new(id, Arc::new(config), router.clone(), log, machine.clone())
        .await
        .unwrap();
    router
        .up
        .lock()
        .unwrap()
        .insert(id, (raft.clone(), held.clone()));
    Replica {
        dir: dir.to_owned(),
        member,
        id,
        raft,
        machine,
        held,
        counts,
    }
}

/// Batch `seed` of `count` messages; from seed [`BIG`] on, each message carries 64 KiB
/// more (enough to fill segments).
fn batch(seed: u64, count: u32) -> Vec<u8> {
    let mut builder = BatchBuilder::new(seed);
    let pad = if seed >= BIG {
        "x".repeat(64 << 10)
    } else {
        String::new()
    };
    for i in 0..count {
        let payload = format!("message {seed}.{i}{pad}");
        builder.push(
            u128::from(seed) << 32 | u128::from(i),
            0,
            payload.as_bytes(),
            &[],
        );
    }
    builder.build().to_vec()
}

/// Every batch of `replica`'s partition, as stored.
fn stored(replica: &Replica) -> Vec<u8> {
    let polled = replica.held.lock().poll(PollFrom::Offset(0), 100_000);
    polled.unwrap().batches.concat()
}

/// Proposes sends `from..to` on whichever replica leads (asking again, as a client does,
/// while none does yet), each of 1 to 3 messages; the offsets each was answered with.
async fn send(env: &Env, replicas: &[Replica], from: u64, to: u64) -> Vec<SendOutcome> {
    let mut outcomes = Vec::new();
    for seed in from..to {
        let command = PartCommand::Send(SendCommand {
            batch: batch(seed, 1 + (seed % 3) as u32),
            timestamp: 1_000 + seed,
        });
        match write(env, replicas, command).await {
            PartOutcome::Sent(outcome) => outcomes.push(outcome),
            other => panic!("send {seed} applied as {other:?}"),
        }
    }
    outcomes
}

/// Proposes `command` on whichever replica leads (asking again, as a client does, while
/// none does yet): what applying it did.
async fn write(env: &Env, replicas: &[Replica], command: PartCommand) -> PartOutcome {
    for _ in 0..400 {
        let leader = replicas[0].raft.metrics().borrow_watched().current_leader;
        let raft = leader.and_then(|l| replicas.iter().find(|r| r.id == l));
        if let Some(replica) = raft {
            match replica.raft.client_write(command.clone()).await {
                Ok(written) => return *written.response(),
                Err(e) if e.forward_to_leader().is_some() => {}
                Err(e) => panic!("{command}: {e}"),
            }
        }
        env.clock.sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader took {command}")
}

/// Stores (`Some`) or deletes consumer `id`'s offset through the group.
async fn offset(env: &Env, replicas: &[Replica], id: u32, offset: Option<u64>) -> PartOutcome {
    let command = OffsetCommand {
        group: false,
        id,
        made_at: 0,
        offset,
    };
    write(env, replicas, PartCommand::Offset(command)).await
}

/// Every replica holds `expected` as consumer `id`'s offset.
fn all_hold_offset(replicas: &[Replica], id: u32, expected: Option<u64>) {
    let consumer = cairn_engine::partition::ConsumerId::consumer(id);
    for r in replicas {
        let held = r.held.lock().get_offset(consumer).unwrap();
        assert_eq!(
            held, expected,
            "replica {}: consumer {id}'s offset",
            r.member
        );
    }
}

async fn settle(replicas: &[Replica]) {
    let last = replicas
        .iter()
        .filter_map(|r| r.raft.metrics().borrow_watched().last_log_index)
        .max();
    for r in replicas {
        r.raft
            .wait(Some(WAIT))
            .applied_index_at_least(last, "all applied")
            .await
            .unwrap();
    }
}

fn dense(outcomes: &[SendOutcome], from: u64) -> u64 {
    let mut next = from;
    for o in outcomes {
        assert_eq!(o.base_offset, next, "sends are answered dense offsets");
        next += u64::from(o.message_count);
    }
    next
}

/// Starts the replicas of members 1 to 3 under `root` (their WALs keeping `kept` entries
/// behind each checkpoint) and makes the group of them.
async fn three_started(env: &Env, router: &Router, root: &Path, kept: u64) -> Vec<Replica> {
    let mut replicas = Vec::new();
    for member in 1..=3 {
        let dir = root.join(format!("r{member}"));
        replicas.push(start(env, router, (&dir, member), kept).await);
    }
    let members: BTreeMap<NodeId, Peer> =
        replicas.iter().map(|r| (r.id, Peer::default())).collect();
    replicas[0].raft.initialize(members).await.unwrap();
    replicas
}

/// Stops a follower of `replicas` (its segments flushed, not synced): its directory, member
/// and Raft id.
async fn stop_a_follower(router: &Router, replicas: &mut Vec<Replica>) -> (PathBuf, u32, NodeId) {
    let leader = replicas[0].raft.metrics().borrow_watched().current_leader;
    let at = replicas.iter().position(|r| Some(r.id) != leader).unwrap();
    let stopping = replicas.remove(at);
    stopping.held.lock().flush().unwrap();
    router.down(stopping.id);
    stopping.raft.shutdown().await.unwrap();
    (stopping.dir.clone(), stopping.member, stopping.id)
}

/// A follower behind what its peers' retention kept (their oldest segment removed past
/// where its partition ends) starts again empty where their batches start, refills from
/// there, and holds what they hold.
#[test]
fn a_follower_behind_its_peers_retention_starts_again_where_their_batches_start() {
    let env = env_with_workers(2).unwrap();
    let root = tempfile::tempdir().unwrap();
    let router = Router::new(&env);
    block_on(in_env(&env, async {
        let mut replicas = three_started(&env, &router, root.path(), 0).await;
        let end = dense(&send(&env, &replicas, 0, 10).await, 0);
        settle(&replicas).await;

        let (dir, member, _) = stop_a_follower(&router, &mut replicas).await;
        let end = dense(&send(&env, &replicas, BIG, BIG + 30).await, end);
        settle(&replicas).await;
        wait_for_purge_past(&replicas, 10).await;
        for r in &replicas {
            r.held.lock().delete_oldest_segments(1).unwrap();
        }
        let kept = replicas[0].held.lock().log_start().unwrap();
        assert!(
            kept > 20,
            "retention removed past the stopped follower's batches: {kept}"
        );
        replicas.push(start(&env, &router, (&dir, member), 0).await);
        let end = dense(&send(&env, &replicas, BIG + 30, BIG + 32).await, end);
        settle(&replicas).await;
        all_hold_the_same(&replicas, end);
        let back = replicas.last().unwrap();
        assert_eq!(back.held.lock().log_start().unwrap(), kept);
        for r in &replicas {
            r.raft.shutdown().await.unwrap();
        }
    }));
}

/// A follower whose partition's synced bytes are damaged while it is down comes back fenced:
/// its group's start rebuilds it and refills it from its peers' segments, and the group's
/// log applies the rest.
#[test]
fn a_follower_whose_partition_is_damaged_repairs_it_from_its_peers() {
    let env = env_with_workers(2).unwrap();
    let root = tempfile::tempdir().unwrap();
    let router = Router::new(&env);
    block_on(in_env(&env, async {
        let mut replicas = three_started(&env, &router, root.path(), 0).await;
        let end = dense(&send(&env, &replicas, 0, 30).await, 0);
        assert_eq!(
            offset(&env, &replicas, 9, Some(20)).await,
            PartOutcome::OffsetStored
        );
        // Checkpoints past the offset's entry: the rebuilt replica's WAL no longer holds it.
        let end = dense(&send(&env, &replicas, 30, 50).await, end);
        settle(&replicas).await;

        let (dir, member, id) = stop_a_follower(&router, &mut replicas).await;
        let data = dir.join("partition");
        let log = data.join(cairn_engine::partition::segment::log_name(0));
        let file = env.disk.open(&log, cairn_engine::env::OpenMode::ReadWrite);
        let file = file.unwrap();
        let mut byte = [0u8];
        assert_eq!(file.read_at(&mut byte, 100).unwrap(), 1);
        byte[0] ^= 0x55;
        file.write_all_at(&[std::io::IoSlice::new(&byte)], 100)
            .unwrap();
        file.sync_data().unwrap();
        let opened = Partition::open(&env, &data, IDENTITY, topic(), PartitionSettings::default());
        let fence = opened.unwrap().partition.fence_reason().cloned();
        assert!(fence.is_some(), "damaged synced bytes fence the partition");

        let end = dense(&send(&env, &replicas, 50, 60).await, end);
        let back = start(&env, &router, (&dir, member), 0).await;
        assert_eq!(
            back.id, id,
            "the same replica: only its partition was rebuilt"
        );
        replicas.push(back);
        let end = dense(&send(&env, &replicas, 60, 65).await, end);
        settle(&replicas).await;
        all_hold_the_same(&replicas, end);
        all_hold_offset(&replicas, 9, Some(20));
        for r in &replicas {
            r.raft.shutdown().await.unwrap();
        }
    }));
}

/// Waits until every one of `replicas` purged its WAL past entry `index` (a leader does once
/// its replication to a stopped follower failed again).
async fn wait_for_purge_past(replicas: &[Replica], index: u64) {
    for r in replicas {
        let purged =
            |m: &openraft::RaftMetrics<PartConfig>| m.purged.is_some_and(|p| p.index > index);
        let wait = r.raft.wait(Some(WAIT));
        wait.metrics(purged, "purged past the stopped one")
            .await
            .unwrap();
    }
}

/// Every replica holds the same bytes, each send once (`end` offsets).
fn all_hold_the_same(replicas: &[Replica], end: u64) {
    // Compared by length and hash: a difference of mebibytes would drown the report.
    let digest = |b: &[u8]| (b.len(), xxhash_rust::xxh3::xxh3_64(b));
    let bytes = digest(&stored(&replicas[0]));
    assert!(bytes.0 > 0);
    for r in replicas {
        assert_eq!(
            digest(&stored(r)),
            bytes,
            "replica {} holds other bytes",
            r.member
        );
        let next = r.held.lock().next_offset().unwrap();
        assert_eq!(next, end, "replica {} holds every send once", r.member);
    }
}

#[test]
fn three_replicas_hold_the_same_bytes_and_a_restarted_one_applies_nothing_twice() {
    let env = env_with_workers(2).unwrap();
    let root = tempfile::tempdir().unwrap();
    let router = Router::new(&env);
    block_on(in_env(&env, async {
        let mut replicas = three_started(&env, &router, root.path(), 100).await;

        let first = send(&env, &replicas, 0, 20).await;
        let end = dense(&first, 0);
        settle(&replicas).await;
        let bytes = stored(&replicas[0]);
        assert!(!bytes.is_empty());
        for r in &replicas[1..] {
            assert_eq!(stored(r), bytes, "replica {} holds other bytes", r.member);
        }

        // A follower stops with batches in its segments past its checkpoint, and comes back.
        let (dir, member, old_id) = stop_a_follower(&router, &mut replicas).await;
        let second = send(&env, &replicas, 20, 30).await;
        let end = dense(&second, end);
        let back = start(&env, &router, (&dir, member), 100).await;
        assert_eq!(back.id, old_id, "the same replica, with its vote");
        replicas.push(back);
        let third = send(&env, &replicas, 30, 40).await;
        let end = dense(&third, end);
        settle(&replicas).await;
        let restarted = replicas.last().unwrap();
        assert!(
            restarted.machine.skipped() > 0,
            "the restarted replica found sends past its checkpoint in its segments"
        );
        all_hold_the_same(&replicas, end);
        for r in &replicas {
            r.raft.shutdown().await.unwrap();
        }
    }));
}

/// A follower that stops while its leader checkpoints and purges its WAL past it is sent a
/// checkpoint when it comes back: it refills its partition from its peers' segments,
/// installs the checkpoint, and holds what they hold, the same bytes.
#[test]
fn a_follower_behind_the_purged_wal_refills_its_partition_from_its_peers() {
    let env = env_with_workers(2).unwrap();
    let root = tempfile::tempdir().unwrap();
    let router = Router::new(&env);
    block_on(in_env(&env, async {
        let mut replicas = three_started(&env, &router, root.path(), 0).await;
        let end = dense(&send(&env, &replicas, 0, 10).await, 0);
        settle(&replicas).await;

        let (dir, member, _) = stop_a_follower(&router, &mut replicas).await;
        let end = dense(&send(&env, &replicas, 10, 60).await, end);
        wait_for_purge_past(&replicas, 10).await;
        replicas.push(start(&env, &router, (&dir, member), 0).await);
        let end = dense(&send(&env, &replicas, 60, 70).await, end);
        settle(&replicas).await;
        let back = replicas.last().unwrap();
        let counted =
            |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            counted(&back.counts.refilled) > 0,
            "it took batches from its peers"
        );
        assert!(
            counted(&back.counts.installed) > 0,
            "it installed a checkpoint"
        );
        all_hold_the_same(&replicas, end);

        // What it installed is durable: it comes back from its own storage.
        let (dir, member, _) = stop_a_follower(&router, &mut replicas).await;
        replicas.push(start(&env, &router, (&dir, member), 0).await);
        let end = dense(&send(&env, &replicas, 70, 75).await, end);
        settle(&replicas).await;
        all_hold_the_same(&replicas, end);
        for r in &replicas {
            r.raft.shutdown().await.unwrap();
        }
    }));
}

/// Consumer offsets go through the group: every replica holds each one stored, an offset
/// past the sends committed before it is refused on every replica alike, and a follower
/// behind the purged WAL installs the leader's checkpoint with its offsets (the ones it
/// missed stored, one deleted meanwhile deleted), durably.
#[test]
fn offsets_reach_every_replica_and_a_checkpoint_carries_them_to_one_behind() {
    let env = env_with_workers(2).unwrap();
    let root = tempfile::tempdir().unwrap();
    let router = Router::new(&env);
    block_on(in_env(&env, async {
        let mut replicas = three_started(&env, &router, root.path(), 0).await;
        let end = dense(&send(&env, &replicas, 0, 10).await, 0);
        for (id, at) in [(1, 5), (2, 3)] {
            let stored = offset(&env, &replicas, id, Some(at)).await;
            assert_eq!(stored, PartOutcome::OffsetStored);
        }
        let past = offset(&env, &replicas, 3, Some(end)).await;
        assert_eq!(past, PartOutcome::OffsetBeyondEnd { next: end });
        settle(&replicas).await;
        all_hold_offset(&replicas, 1, Some(5));
        all_hold_offset(&replicas, 3, None);

        let (dir, member, _) = stop_a_follower(&router, &mut replicas).await;
        // What its files hold past its machine's checkpoint (an entry applied before it
        // stopped): the checkpoint it installs deletes it, since the group holds none.
        let data = dir.join("partition");
        let opened = Partition::open(&env, &data, IDENTITY, topic(), PartitionSettings::default());
        let mut stray = opened.unwrap().partition;
        let consumer = cairn_engine::partition::ConsumerId::consumer(77);
        stray.store_replicated_offset(consumer, 1).unwrap();
        stray.close().unwrap();
        let end = dense(&send(&env, &replicas, 10, 40).await, end);
        let last = end - 1;
        assert_eq!(
            offset(&env, &replicas, 1, Some(last)).await,
            PartOutcome::OffsetStored
        );
        let deleted = offset(&env, &replicas, 2, None).await;
        assert_eq!(deleted, PartOutcome::OffsetDeleted { found: true });
        let again = offset(&env, &replicas, 2, None).await;
        assert_eq!(again, PartOutcome::OffsetDeleted { found: false });
        let end = dense(&send(&env, &replicas, 40, 60).await, end);
        wait_for_purge_past(&replicas, 20).await;
        replicas.push(start(&env, &router, (&dir, member), 0).await);
        settle(&replicas).await;
        let back = replicas.last().unwrap();
        let installed = back
            .counts
            .installed
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(installed > 0, "it installed a checkpoint");
        all_hold_the_same(&replicas, end);
        all_hold_offset(&replicas, 1, Some(last));
        all_hold_offset(&replicas, 2, None);
        all_hold_offset(&replicas, 77, None);

        // What it installed is durable: it comes back from its own storage.
        let (dir, member, _) = stop_a_follower(&router, &mut replicas).await;
        replicas.push(start(&env, &router, (&dir, member), 0).await);
        settle(&replicas).await;
        all_hold_offset(&replicas, 1, Some(last));
        all_hold_offset(&replicas, 2, None);
        for r in &replicas {
            r.raft.shutdown().await.unwrap();
        }
    }));
}

/// A consumer group's offsets bind to the group's incarnation (ids are reused): a write of
/// a group deleted since, arriving after the group made later under its id stored, is
/// dropped on every replica, and a delete finds only its own incarnation's offset.
#[test]
fn an_offset_of_a_group_made_again_since_is_dropped() {
    let env = env_with_workers(2).unwrap();
    let root = tempfile::tempdir().unwrap();
    let router = Router::new(&env);
    block_on(in_env(&env, async {
        let replicas = three_started(&env, &router, root.path(), 100).await;
        dense(&send(&env, &replicas, 0, 10).await, 0);
        let group = |made_at: u64, offset: Option<u64>| {
            PartCommand::Offset(OffsetCommand {
                group: true,
                id: 5,
                made_at,
                offset,
            })
        };
        let consumer = cairn_engine::partition::ConsumerId::group(5);
        let hold = |expected: Option<u64>| {
            for r in &replicas {
                let held = r.held.lock().get_offset(consumer).unwrap();
                assert_eq!(held, expected, "replica {}: group 5's offset", r.member);
            }
        };
        let cases = [
            (group(10, Some(1)), PartOutcome::OffsetStored, Some(1)),
            (group(16, Some(7)), PartOutcome::OffsetStored, Some(7)),
            (group(10, Some(2)), PartOutcome::OffsetOfGoneGroup, Some(7)),
            (group(10, None), PartOutcome::OffsetOfGoneGroup, Some(7)),
            (
                group(16, None),
                PartOutcome::OffsetDeleted { found: true },
                None,
            ),
            (
                group(16, None),
                PartOutcome::OffsetDeleted { found: false },
                None,
            ),
        ];
        for (command, outcome, held) in cases {
            assert_eq!(
                write(&env, &replicas, command.clone()).await,
                outcome,
                "{command}"
            );
            settle(&replicas).await;
            hold(held);
        }
        for r in &replicas {
            r.raft.shutdown().await.unwrap();
        }
    }));
}

impl crate::log::tests::SuiteMachine for PartMachine {
    type C = PartConfig;
    fn open_for_suite(env: &Env, dir: &Path) -> Self {
        let settings = PartitionSettings::default();
        let partition =
            Partition::create(env, &dir.join("partition"), IDENTITY, topic(), settings).unwrap();
        let sink = Arc::new(Held::new(partition));
        let opened =
            PartMachine::open(env.disk.clone(), dir, sink, Default::default()).now_or_never();
        opened.expect("a held partition answers at once").unwrap()
    }
}

#[test]
fn passes_openraft_storage_suite() {
    crate::log::tests::run_openraft_storage_suite::<PartMachine>();
}

fn send_entry(index: u64, bytes: usize) -> PartEntry {
    let leader = openraft::impls::leader_id_adv::LeaderId {
        term: 1,
        node_id: 1,
    };
    PartEntry {
        log_id: crate::types::LogId::new(leader, index),
        payload: openraft::EntryPayload::Normal(PartCommand::Send(SendCommand {
            batch: vec![0; bytes],
            timestamp: 0,
        })),
    }
}

/// An AppendEntries takes entries up to its byte budget, and always the first.
#[test]
fn an_append_carries_entries_up_to_its_budget_and_always_one() {
    use super::net::entries_within;
    let mib = 1 << 20;
    let entries: Vec<PartEntry> = (1..=5).map(|i| send_entry(i, 10 * mib)).collect();
    let cases = [
        (5 * mib, 1, "one entry past the budget still goes"),
        (25 * mib, 2, "two fit 25 MiB, the third would not"),
        (100 * mib, 5, "all fit"),
    ];
    for (budget, fit, why) in cases {
        assert_eq!(entries_within(&entries, budget), fit, "{why}");
    }
    assert_eq!(entries_within(&[], mib), 0, "nothing to send");
}

/// A partition's WAL takes a batch far above the metadata group's 1 MiB entry limit, and
/// reads it back whole after a restart.
#[test]
fn a_partition_wal_takes_a_batch_of_many_mebibytes() {
    use openraft::storage::{IOFlushed, RaftLogStorage};
    use openraft::RaftLogReader;
    let env = env_with_workers(1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let big = send_entry(1, 9 << 20);
    block_on(in_env(&env, async {
        let mut log = LogStore::<PartConfig>::open(&env, dir.path(), CLUSTER, 1)
            .await
            .unwrap();
        log.append([big.clone()], IOFlushed::noop()).await.unwrap();
        drop(log);
        let mut log = LogStore::<PartConfig>::open(&env, dir.path(), CLUSTER, 1)
            .await
            .unwrap();
        let read = log.try_get_log_entries(1..2).await.unwrap();
        assert_eq!(read, vec![big]);
    }));
}

/// `refill::needs_repair`'s table, case by case.
#[test]
fn a_replica_is_repaired_only_for_damage_to_its_own_files_or_a_repair_cut_short() {
    use cairn_engine::partition::FenceReason;
    let env = env_with_workers(1).unwrap();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let mark = refill::RepairMark {
        disk: &*env.disk,
        dir,
    };
    let fenced = |reason: FenceReason| Held::new(Partition::fenced(reason));
    let partition = Partition::create(
        &env,
        &dir.join("partition"),
        IDENTITY,
        topic(),
        PartitionSettings::default(),
    );
    let empty = Held::new(partition.unwrap());
    let needs = |held: &Held, checkpointed: u64| {
        refill::needs_repair(held, checkpointed, &mark)
            .now_or_never()
            .expect("a held partition answers at once")
    };
    let damaged = fenced(FenceReason::DirectoryMissing { dir: dir.into() });
    assert!(needs(&damaged, 10).unwrap(), "damage to its own files");
    let failed = fenced(FenceReason::IoFailed {
        op: "sync",
        path: dir.into(),
        error: "EIO".into(),
    });
    let refused = needs(&failed, 10).unwrap_err().to_string();
    assert!(refused.contains("not for damage"), "{refused}");
    let lost = needs(&empty, 10).unwrap_err().to_string();
    assert!(lost.contains("synced bytes were lost"), "{lost}");
    assert!(!needs(&empty, 0).unwrap(), "it holds its checkpoint");

    // A repair cut short left its mark: it goes on; once the replica holds its
    // checkpoint, the mark stays for the group's start (which writes its offsets back,
    // then clears it).
    let at = dir.join(refill::REPAIR_MARK);
    let made = env
        .disk
        .open(&at, cairn_engine::env::OpenMode::CreateOrOpen);
    drop(made.unwrap());
    assert!(needs(&empty, 10).unwrap());
    assert!(!needs(&empty, 0).unwrap());
    assert!(env.disk.exists(&at).unwrap(), "the mark stays");
}

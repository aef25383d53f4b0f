//! Clustered nodes over real files, with a stand-in for the consensus group: the decider
//! below numbers every op (term 1, index 1, 2, ...) and hands it to every member's node, as
//! the group's state machine does. Members fed the same decisions hold the same state (the
//! same partition identities, timestamps and refusals); a member that restarts and is handed
//! the log again applies nothing twice, from its journal or from a checkpoint; a clustered
//! node decides nothing itself and refuses another cluster's data.

use cairn_engine::env::real::block_on;
use cairn_engine::metadata::journal::{decision, Origin};
use cairn_engine::metadata::MetaSettings;
use cairn_engine::node::{
    Barrier, BootError, Decider, Decision, MetaReply, Node, NodeError, NodeResult, NodeSettings,
};
use cairn_engine::state::ops::MetaOp;
use cairn_engine::state::USER_ACTIVE;
use cairn_tests::node::{start, TestNode};
use cairn_tests::*;
use iggy_binary_protocol::{WireConsumer, WireIdentifier, WireOptions, WirePartitioning};
use std::path::Path;
use std::sync::{Arc, Mutex};

const CLUSTER: u128 = 0x005e_edc1_u128 << 64 | 0xd00d;

fn settings(cluster: Option<u128>) -> NodeSettings {
    NodeSettings {
        // Small: the journal checkpoints every few ops.
        meta: MetaSettings {
            checkpoint_bytes: 900,
            cluster,
        },
        ..node_settings()
    }
}

/// Two members on fresh directories, both fed by one sequencer, A deciding through it.
fn joined_pair() -> (
    (tempfile::TempDir, TestNode),
    (tempfile::TempDir, TestNode),
    Sequencer,
) {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sequencer = Sequencer::default();
    let a = boot_member(da.path());
    let b = boot_member(db.path());
    sequencer.join(&a.node);
    sequencer.join(&b.node);
    a.node.set_decider(Arc::new(sequencer.clone()));
    ((da, a), (db, b), sequencer)
}

fn boot_member(root: &Path) -> TestNode {
    start(&real_env(), root, settings(Some(CLUSTER)))
        .expect("boot")
        .node
}

/// The decided log: every op in decision order, and the members that apply it.
#[derive(Default)]
struct Log {
    decided: Vec<(MetaOp, Origin)>,
    members: Vec<Node>,
}

/// The stand-in for the group: decides in call order (one at a time), applies on every
/// member in order, answers with the first member's reply.
#[derive(Clone, Default)]
struct Sequencer(Arc<Mutex<Log>>);

impl Sequencer {
    fn join(&self, node: &Node) {
        self.0.lock().unwrap().members.push(node.clone());
    }

    async fn decide_now(self, op: MetaOp, mut origin: Origin) -> NodeResult<MetaReply> {
        let members = {
            let mut log = self.0.lock().unwrap();
            let index = log.decided.len() as u64 + 1;
            // The op's key, as the group's decider draws one (unless a test set its own).
            if origin.key == 0 {
                origin.key = KEYS | u128::from(index);
                origin.asked_at = index - 1;
            }
            origin.decided = decision(1, index);
            origin.timestamp = 1_700_000_000_000_000 + index;
            log.decided.push((op.clone(), origin));
            log.members.clone()
        };
        let mut first = None;
        for member in members {
            let reply = member.apply_decided(op.clone(), origin).await;
            first.get_or_insert(reply);
        }
        first.expect("a member")
    }

    /// Hands `node` every decision so far, as a restarted member's group does; the answers.
    fn replay_to(&self, node: &Node) -> Vec<NodeResult<MetaReply>> {
        let decided = self.0.lock().unwrap().decided.clone();
        decided
            .into_iter()
            .map(|(op, origin)| block_on(node.apply_decided(op, origin)))
            .collect()
    }
}

impl Decider for Sequencer {
    fn decide(&self, op: MetaOp, origin: Origin) -> Decision {
        Box::pin(self.clone().decide_now(op, origin))
    }

    /// Every member applied each decision before it was answered.
    fn barrier(&self) -> Barrier {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The stand-in's keys (one per decision); a test's own keys stay below.
const KEYS: u128 = 1 << 100;

/// Streams, topics with partitions, a refusal, users, groups: through member `a`'s client.
fn workload(a: &TestNode, round: u32) {
    let stream = a.create_stream(&format!("orders-{round}")).unwrap();
    let s = WireIdentifier::numeric(stream);
    let topic = a
        .create_topic(&s, "events", 3, WireOptions::empty())
        .unwrap();
    let t = WireIdentifier::numeric(topic);
    let refused = a.create_stream(&format!("orders-{round}")).unwrap_err();
    assert_eq!(refused.code(), 1012, "{refused}");
    a.create_partitions(&s, &t, 2).unwrap();
    a.create_group(&s, &t, "readers").unwrap();
    a.create_user(&format!("user-{round}"), "password", USER_ACTIVE, None)
        .unwrap();
}

fn same_state(a: &TestNode, b: &TestNode) {
    let (va, vb) = (a.view(), b.view());
    assert_eq!(va.state, vb.state, "members hold the same state");
    assert_eq!(va.op, vb.op, "members number the same ops alike");
    assert_eq!(va.state.partitions(), vb.state.partitions());
}

#[test]
fn members_fed_the_same_decisions_hold_the_same_state_and_apply_nothing_twice() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sequencer = Sequencer::default();
    let a = boot_member(da.path());
    let b = boot_member(db.path());
    assert!(
        a.view().state.users().is_empty(),
        "a clustered node makes no root user of its own"
    );
    sequencer.join(&a.node);
    sequencer.join(&b.node);
    a.node.set_decider(Arc::new(sequencer.clone()));
    for round in 0..3 {
        workload(&a, round);
    }
    same_state(&a, &b);
    let decided = b.view().state.decided();
    assert_eq!(decided, decision(1, 18), "the last decision applied");
    for id in a.view().state.partitions() {
        let dir = cairn_engine::partition::partition_dir(
            db.path(),
            id.stream_id,
            id.topic_id,
            id.partition_id,
        );
        assert!(
            dir.is_dir(),
            "{} was made on the other member",
            dir.display()
        );
    }

    // B restarts (its journal checkpointed on the way) and is handed the whole log again.
    let ops_before = b.view().op;
    b.close().unwrap();
    let b = boot_member(db.path());
    assert_eq!(
        b.view().state.decided(),
        decided,
        "the decision survives a restart"
    );
    let answers = sequencer.replay_to(&b.node);
    assert!(
        answers.iter().all(|r| matches!(
            r,
            Ok(MetaReply {
                result: Err(NodeError::AlreadyDecided(_)),
                ..
            })
        )),
        "every decision is answered as applied before: {answers:?}"
    );
    assert_eq!(b.view().op, ops_before, "nothing was journaled again");

    // A crash (no flush) of B, then more decisions reach both.
    {
        let mut log = sequencer.0.lock().unwrap();
        log.members.pop();
    }
    b.halt();
    let b = boot_member(db.path());
    assert_eq!(b.view().state.decided(), decided);
    sequencer.join(&b.node);
    workload(&a, 3);
    same_state(&a, &b);
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn a_clustered_node_decides_nothing_itself_and_keeps_to_its_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let node = boot_member(dir.path());
    let refused = node.create_stream("early").unwrap_err();
    assert!(matches!(refused, NodeError::Undecided(_)), "{refused}");
    assert!(node.view().state.streams().is_empty());
    node.close().unwrap();

    let other = start(&real_env(), dir.path(), settings(Some(CLUSTER + 1)));
    assert!(
        matches!(other, Err(BootError::OtherCluster { configured, found }) if configured == CLUSTER + 1 && found == CLUSTER),
        "a member refuses another cluster's data directory"
    );
    let single = tempfile::tempdir().unwrap();
    start(&real_env(), single.path(), settings(None))
        .unwrap()
        .node
        .close()
        .unwrap();
    let made_alone = start(&real_env(), single.path(), settings(Some(CLUSTER)));
    assert!(
        matches!(made_alone, Err(BootError::OtherCluster { .. })),
        "a member refuses a single node's data directory"
    );
}

#[test]
fn a_retried_decision_applies_once_on_every_member_and_after_restarts() {
    let ((_da, a), (db, b), sequencer) = joined_pair();
    let stream = a.create_stream("orders").unwrap();
    let s = WireIdentifier::numeric(stream);
    let topic = a
        .create_topic(&s, "events", 1, WireOptions::empty())
        .unwrap();
    let t = WireIdentifier::numeric(topic);

    // One op (one key) decided three times, as a member's attempts whose fate it could not
    // learn are: adding partitions is not idempotent, so only the key keeps it to one.
    let add = MetaOp::CreatePartitions(
        iggy_binary_protocol::requests::partitions::CreatePartitionsRequest {
            stream_id: s.clone(),
            topic_id: t.clone(),
            partitions_count: 2,
        },
    );
    let keyed = Origin {
        key: 0x5eed,
        asked_at: 3,
        ..Origin::default()
    };
    let answers: Vec<_> = (0..3)
        .map(|_| block_on(sequencer.clone().decide_now(add.clone(), keyed)))
        .collect();
    let repeated: Vec<bool> = answers
        .iter()
        .map(|r| r.as_ref().unwrap().result.as_ref().unwrap().repeated)
        .collect();
    assert_eq!(repeated, [false, true, true], "{answers:?}");
    let partitions = a.view().state.partitions().len();
    assert_eq!(partitions, 3, "one partition and two added, once");
    same_state(&a, &b);
    let dirs = |root: &Path| {
        (0..6)
            .filter(|&p| cairn_engine::partition::partition_dir(root, stream, topic, p).is_dir())
            .count()
    };
    assert_eq!(
        dirs(db.path()),
        3,
        "the other member made two partitions, not six"
    );

    // B crashes (its journal replays the three decisions at boot), then closes (from its
    // checkpoint): the retries stay answered, the partitions stay three.
    {
        let mut log = sequencer.0.lock().unwrap();
        log.members.pop();
    }
    b.halt();
    let b = boot_member(db.path());
    assert_eq!(
        b.view().state,
        a.view().state,
        "the journal replays the retries as no-ops"
    );
    b.close().unwrap();
    let b = boot_member(db.path());
    assert_eq!(b.view().state, a.view().state);
    assert_eq!(
        b.view().state.proposals().lookup(0x5eed, 3),
        cairn_engine::state::proposals::Lookup::Applied(None)
    );
    sequencer.join(&b.node);
    let again = block_on(sequencer.clone().decide_now(add, keyed)).unwrap();
    assert!(
        again.result.unwrap().repeated,
        "still known after the restarts"
    );
    same_state(&a, &b);
    assert_eq!(b.view().state.partitions().len(), 3);
    a.close().unwrap();
    b.close().unwrap();
}

/// Every partition of `state` has its directory under `root`, and no other partition
/// directory is there.
fn holds_exactly(root: &Path, state: &cairn_engine::state::MetaState) {
    let mut found = Vec::new();
    let streams = root.join("streams");
    let list = |dir: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect()
    };
    for stream in list(&streams) {
        for topic in list(&stream.join("topics")) {
            for partition in list(&topic.join("partitions")) {
                if partition.is_dir() {
                    found.push(partition);
                }
            }
        }
    }
    let mut wanted: Vec<_> = state
        .partitions()
        .into_iter()
        .map(|id| {
            cairn_engine::partition::partition_dir(root, id.stream_id, id.topic_id, id.partition_id)
        })
        .collect();
    found.sort();
    wanted.sort();
    assert_eq!(found, wanted, "the partition directories are the state's");
}

/// Group `g` of topic `(s, t)` stores offset 1 of partition 0 (a message is sent there
/// first) on `node`, through a member of it.
fn store_group_offset(node: &TestNode, s: &WireIdentifier, t: &WireIdentifier, g: u32) {
    let consumer = group_consumer(g);
    let member = node.as_client(40);
    member
        .send(s, t, &WirePartitioning::PartitionId(0), batch(1, 2, 10))
        .unwrap();
    member
        .join_group(s, t, &WireIdentifier::numeric(g))
        .unwrap();
    member.store_offset(&consumer, s, t, Some(0), 1).unwrap();
    assert_eq!(group_offset(node, s, t, g), Some(1));
}

/// The offset group `g` of topic `(s, t)` holds in partition 0 on `node`.
fn group_offset(node: &TestNode, s: &WireIdentifier, t: &WireIdentifier, g: u32) -> Option<u64> {
    let member = node.as_client(41);
    member
        .join_group(s, t, &WireIdentifier::numeric(g))
        .unwrap();
    member
        .get_offset(&group_consumer(g), s, t, Some(0))
        .unwrap()
}

fn group_consumer(g: u32) -> WireConsumer {
    WireConsumer {
        kind: iggy_binary_protocol::KIND_CONSUMER_GROUP,
        id: WireIdentifier::numeric(g),
    }
}

#[test]
fn a_member_behind_adopts_the_state_whole_and_boot_finishes_an_adoption_cut_short() {
    use cairn_engine::metadata::{adoption, MetaRefusal};
    let ((_da, a), (db, b), sequencer) = joined_pair();
    workload(&a, 0);
    workload(&a, 1);
    same_state(&a, &b);

    // B's group 0 of topic (1, 0) stored an offset in partition 0 (offsets are each
    // node's own, not decided).
    let (s0, s1, t0) = (
        WireIdentifier::numeric(0),
        WireIdentifier::numeric(1),
        WireIdentifier::numeric(0),
    );
    store_group_offset(&b, &s1, &t0, 0);
    // B misses everything from here: a stream deleted (its id then taken by a new one), a
    // group made again under its id, partitions removed, new streams.
    sequencer.0.lock().unwrap().members.pop();
    a.delete_stream(&s0).unwrap();
    a.delete_group(&s1, &t0, &WireIdentifier::numeric(0))
        .unwrap();
    a.create_group(&s1, &t0, "readers-again").unwrap();
    a.delete_partitions(&s1, &t0, 2).unwrap();
    workload(&a, 2);
    // What the adoption removes of B's: stream 0's partitions, and two of topic (1, 0)'s.
    let removed = b
        .view()
        .state
        .partitions()
        .iter()
        .filter(|p| p.stream_id == 0)
        .count() as u64
        + 2;
    let view = a.view();
    let adopt = |node: &Node, view: &cairn_engine::node::MetaView| {
        block_on(node.adopt(view.op, view.state.decided(), view.state.clone()))
    };
    assert!(adopt(&b.node, &view).unwrap(), "adopted");
    same_state(&a, &b);
    holds_exactly(db.path(), &b.view().state);
    assert!(!adopt(&b.node, &view).unwrap(), "held already");
    assert_eq!(b.node.stats().meta_adoptions, 1);
    assert_eq!(b.node.stats().meta_adopted_removals, removed);
    assert_eq!(
        group_offset(&b, &s1, &t0, 0),
        None,
        "the group made again holds no offset of the old one"
    );

    // It goes on from the adopted state: later decisions, a restart from the checkpoint.
    sequencer.join(&b.node);
    workload(&a, 3);
    same_state(&a, &b);
    b.close().unwrap();
    let b = boot_member(db.path());
    same_state(&a, &b);

    // B stops just after an adoption became durable, before any of its work: boot does
    // the work (the stale offset of a group made again removed too) and records the state.
    store_group_offset(&b, &s0, &t0, 0);
    sequencer.0.lock().unwrap().members.pop();
    b.halt();
    a.delete_group(&s0, &t0, &WireIdentifier::numeric(0))
        .unwrap();
    a.create_group(&s0, &t0, "readers-anew").unwrap();
    // Streams 1 and 2 go; the next stream takes id 1 again, 2 stays gone.
    a.delete_stream(&WireIdentifier::numeric(1)).unwrap();
    a.delete_stream(&WireIdentifier::numeric(2)).unwrap();
    workload(&a, 4);
    assert!(a.view().state.stream(2).is_none());
    let view = a.view();
    let file = db.path().join("metadata").join(adoption::FILE);
    let bytes = adoption::encode(CLUSTER, view.op, view.state.decided(), &view.state);
    std::fs::write(&file, &bytes).unwrap();
    assert!(db.path().join("streams/2").is_dir());
    let b = boot_member(db.path());
    same_state(&a, &b);
    holds_exactly(db.path(), &b.view().state);
    assert!(
        !db.path().join("streams/2").exists(),
        "the stream's tree went"
    );
    assert_eq!(group_offset(&b, &s0, &t0, 0), None);
    assert!(!file.exists(), "the finished adoption's file is gone");
    b.close().unwrap();
    let b = boot_member(db.path());
    same_state(&a, &b);
    b.halt();

    // A damaged adoption file is damage: its work may have begun.
    let mut damaged = bytes;
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    std::fs::write(&file, &damaged).unwrap();
    let refused = start(&real_env(), db.path(), settings(Some(CLUSTER))).err();
    assert!(
        matches!(
            &refused,
            Some(BootError::Refused(MetaRefusal::AdoptionDamaged { .. }))
        ),
        "{refused:?}"
    );

    // One made for another cluster is refused the same way: not this cluster's state.
    let foreign = adoption::encode(CLUSTER ^ 1, view.op + 1, 7, &view.state);
    std::fs::write(&file, &foreign).unwrap();
    let refused = start(&real_env(), db.path(), settings(Some(CLUSTER))).err();
    match &refused {
        Some(BootError::Refused(MetaRefusal::AdoptionDamaged { error, .. })) => {
            assert!(error.contains("made for cluster"), "{error}")
        }
        other => panic!("{other:?}"),
    }

    // One the checkpoint already holds (at or below the last op) is removed, and so is a
    // temporary one (an adoption that never began); the state is the checkpoint's.
    let temp = db.path().join("metadata").join(adoption::TEMP);
    for op in [view.op, view.op - 1] {
        std::fs::write(&file, adoption::encode(CLUSTER, op, 7, &view.state)).unwrap();
        std::fs::write(&temp, b"an adoption cut short before it began").unwrap();
        let b = boot_member(db.path());
        same_state(&a, &b);
        assert!(!file.exists() && !temp.exists(), "both removed (op {op})");
        b.close().unwrap();
    }
    a.close().unwrap();
}

//! The node under the two failures an operator meets: a process killed at any point (the
//! kill -9 loop), and damage to any file of its data directory.
//!
//! - A crash at every mutating disk call of a workload that touches every kind of file
//!   (journal, snapshot, metadata superblocks, partition directories, segments, offsets): the
//!   next boot never refuses, recovers exactly the state of the operations acknowledged before
//!   the crash (plus, possibly, the one in flight), keeps every acknowledged message and
//!   offset, and leaves nothing for a further boot to do.
//! - Arbitrary damage to any file (metadata or partition): boot never panics; it refuses
//!   changing nothing (and refuses again the same way), or it boots to a state that a second
//!   boot reproduces without further repairs.

use cairn_engine::env::{BoxFuture, Clock, Entropy, Env};
use cairn_engine::metadata::MetaSettings;
use cairn_engine::node::state::{MetaState, Stream, User};
use cairn_engine::node::{BootError, NodeSettings, PartitionBoot, PartitionKey, PasswordCost};
use cairn_tests::*;
use iggy_binary_protocol::{WireConsumer, WirePartitioning};
use proptest::prelude::*;
use proptest::sample::Index;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A wall clock that stands still, so two runs of one workload stamp the same times.
struct StillClock(Arc<dyn Clock>);

impl Clock for StillClock {
    fn wall_micros(&self) -> u64 {
        1_800_000_000_000_000
    }
    fn monotonic_nanos(&self) -> u64 {
        self.0.monotonic_nanos()
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        self.0.sleep(duration)
    }
    fn deadline(&self) -> Box<dyn cairn_engine::env::Deadline> {
        self.0.deadline()
    }
}

/// Entropy that counts, so every run draws the same cluster id and salts.
struct CountingEntropy(AtomicU64);

impl Entropy for CountingEntropy {
    fn next_u64(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed) + 0x5eed
    }
}

/// The real environment made repeatable: a still clock and counting entropy.
fn repeatable_env() -> Env {
    let mut env = real_env();
    env.clock = Arc::new(StillClock(env.clock.clone()));
    env.entropy = Arc::new(CountingEntropy(AtomicU64::new(0)));
    env
}

/// Small checkpoints, so the workload writes snapshots and superblock records too.
fn settings() -> NodeSettings {
    NodeSettings {
        password_cost: PasswordCost::CHEAP,
        meta: MetaSettings {
            checkpoint_bytes: 600,
            cluster: None,
        },
        ..Default::default()
    }
}

/// A message a step acknowledged: its partition and id.
type Acked = ((u32, u32, u32), u128);

/// What the steps acknowledged so far.
#[derive(Default, Clone)]
struct Ledger {
    messages: Vec<Acked>,
    /// The persisted offset of consumer 1 on topic 0 partition 0, once stored.
    offset: Option<u64>,
}

const STEPS: usize = 18;

/// Step `i` of the workload: every kind of metadata operation, sends to a persisted topic,
/// a persisted offset. Errors are the crash.
fn step(node: &TestNode, i: usize, ledger: &mut Ledger) -> Result<(), String> {
    let e = |e: cairn_engine::node::NodeError| e.to_string();
    let persisted = topic_options(&[
        ("durability", 2, b"persisted"),
        ("consumer_offset_durability", 2, b"persisted"),
    ]);
    let mut send = |node: &TestNode, p: u32, seed: u64| -> Result<(), String> {
        let sent = node
            .send(
                &id(0),
                &id(0),
                &WirePartitioning::PartitionId(p),
                batch(seed, 2, 300),
            )
            .map_err(e)?;
        assert!(sent.ack.durable, "a persisted topic acknowledges durable");
        for k in 0..2 {
            ledger.messages.push(((0, 0, p), message_id(seed, k)));
        }
        Ok(())
    };
    match i {
        0 => node.create_stream("s").map(drop).map_err(e),
        1 => node
            .create_topic(&id(0), "t", 2, persisted)
            .map(drop)
            .map_err(e),
        2 => send(node, 0, 1),
        3 => node.create_group(&id(0), &id(0), "g").map(drop).map_err(e),
        4 => node
            .create_user("alice", "secret", 1, None)
            .map(drop)
            .map_err(e),
        // Persisted: what is sent to it is in its log when it is deleted.
        5 => node
            .create_topic(&id(0), "doomed", 1, persisted.clone())
            .map(drop)
            .map_err(e),
        6 => node
            .send(&id(0), &id(1), &WirePartitioning::Balanced, batch(2, 1, 50))
            .map(drop)
            .map_err(e),
        7 => {
            let consumer = WireConsumer::consumer(id(1));
            node.store_offset(&consumer, &id(0), &id(0), Some(0), 1)
                .map_err(e)?;
            ledger.offset = Some(1);
            Ok(())
        }
        8 => node.create_partitions(&id(0), &id(0), 2).map_err(e),
        9 => node.purge_topic(&id(0), &id(1)).map_err(e),
        10 => {
            // Data in the deleted partition: a crash inside its removal must leave either
            // its identity or nothing of it, never bytes nothing accounts for.
            node.send(&id(0), &id(1), &WirePartitioning::Balanced, batch(3, 1, 50))
                .map_err(e)?;
            node.delete_topic(&id(0), &id(1)).map_err(e)
        }
        11 => node.update_stream(&id(0), "renamed").map_err(e),
        12 => node.delete_partitions(&id(0), &id(0), 1).map_err(e),
        13 => node.delete_group(&id(0), &id(0), &id(0)).map_err(e),
        14 => node.create_stream("x").map(drop).map_err(e),
        15 => node.delete_stream(&id(1)).map_err(e),
        16 => send(node, 2, 3),
        17 => node.delete_user(&id(1)).map_err(e),
        _ => unreachable!("{STEPS} steps"),
    }
}

/// A state as it can be compared across runs.
type Comparable = (BTreeMap<u32, Stream>, BTreeMap<u32, User>);

/// `state` without password hashes: their salts are drawn when the user is created, so a
/// first boot finished by a second boot salts the root user's differently. Passwords are
/// checked by verifying them instead.
fn comparable(state: &MetaState) -> Comparable {
    let mut users = state.users().clone();
    for user in users.values_mut() {
        user.password_hash.clear();
    }
    (state.streams().clone(), users)
}

/// The workload run to the end on the real disk: the state after boot and after each step.
fn reference(root: &Path) -> Vec<Comparable> {
    let env = repeatable_env();
    let node = start(&env, root, settings()).expect("boot").node;
    let mut states = vec![comparable(&node.view())];
    let mut ledger = Ledger::default();
    for i in 0..STEPS {
        step(&node, i, &mut ledger).expect("the reference run does not fail");
        states.push(comparable(&node.view()));
    }
    node.halt();
    states
}

/// The workload on a disk that crashes after `budget` mutating calls: how many steps were
/// acknowledged (`None`: the first boot itself crashed), what they acknowledged, and
/// whether the crash struck at all.
fn crashed_run(root: &Path, budget: usize) -> (Option<usize>, Ledger, bool) {
    let mut env = repeatable_env();
    env.disk = Arc::new(CrashingDisk::new(budget));
    let mut ledger = Ledger::default();
    let Ok(booted) = start(&env, root, settings()) else {
        return (None, ledger, true);
    };
    let node = booted.node;
    for i in 0..STEPS {
        if step(&node, i, &mut ledger).is_err() {
            node.halt();
            return (Some(i), ledger, true);
        }
    }
    node.halt();
    (Some(STEPS), ledger, false)
}

/// Every message of a partition of the booted node, by id.
fn ids_in(node: &TestNode, key: (u32, u32, u32)) -> Vec<u128> {
    read_node(node, key).into_iter().map(|m| m.1).collect()
}

fn boot_again(root: &Path) -> cairn_tests::node::Booted {
    match start(&repeatable_env(), root, settings()) {
        Ok(booted) => booted,
        Err(error) => panic!("boot after a crash failed: {error}"),
    }
}

#[test]
fn a_crash_at_every_mutating_call_of_a_node_workload_recovers_what_was_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let states = reference(&tmp.path().join("reference"));
    let mut budget = 0;
    loop {
        let root = tmp.path().join(format!("crash-{budget}"));
        let (acked, ledger, crashed) = crashed_run(&root, budget);
        let booted = boot_again(&root);
        let node = booted.node;
        // The acknowledged steps survive; the one in flight may or may not have.
        let state = comparable(&node.view());
        assert_eq!(
            node.login("iggy", "iggy").unwrap().user_id,
            0,
            "budget {budget}: root"
        );
        if let Some(alice) = state.1.get(&1) {
            assert_eq!(node.login(&alice.username, "secret").unwrap().user_id, 1);
        }
        let allowed: Vec<&Comparable> = match acked {
            None => vec![&states[0]],
            Some(k) => states[k..(k + 2).min(states.len())].iter().collect(),
        };
        assert!(
            allowed.contains(&&state),
            "budget {budget}: {acked:?} steps acknowledged, the boot recovered another state"
        );
        for (key, message) in &ledger.messages {
            assert!(
                ids_in(&node, *key).contains(message),
                "budget {budget}: acknowledged message {message:x} of {key:?} lost"
            );
        }
        if let Some(offset) = ledger.offset {
            let consumer = WireConsumer::consumer(id(1));
            let stored = node.get_offset(&consumer, &id(0), &id(0), Some(0)).unwrap();
            assert_eq!(stored, Some(offset), "budget {budget}: the stored offset");
        }
        node.halt();
        // Whatever that boot repaired, it repaired durably: the next has nothing to do.
        let again = boot_again(&root);
        assert!(
            again.plan.actions.is_empty(),
            "budget {budget}: {:?}",
            again.plan.actions
        );
        assert!(
            again.report.removed.is_empty(),
            "budget {budget}: {:?}",
            again.report.removed
        );
        assert_eq!(
            again.report.redone(),
            0,
            "budget {budget}: {:?}",
            again.report.tree
        );
        assert!(
            again.report.tree.is_clean(),
            "budget {budget}: {:?}",
            again.report.tree
        );
        for (key, boot) in &again.report.partitions {
            let PartitionBoot::Opened(plan) = boot else {
                panic!("budget {budget}: partition {key:?} fenced before recovery: {boot:?}");
            };
            assert!(
                plan.fence.is_none() && plan.actions.is_empty(),
                "budget {budget}: partition {key:?} on the second boot: {plan:?}"
            );
        }
        assert_eq!(comparable(&again.node.view()), state, "budget {budget}");
        again.node.halt();
        if !crashed {
            assert!(budget > 50, "the workload makes many mutating calls");
            return;
        }
        budget += 1;
        assert!(budget < 5_000, "the workload never completed");
    }
}

// Damage -----------------------------------------------------------------------------------

/// A template data directory, built once: metadata with a snapshot and journal entries after
/// it, two topics (one persisted, with stored offsets), several segments.
fn template() -> PathBuf {
    static TEMPLATE: OnceLock<tempfile::TempDir> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().join("node");
            let env = repeatable_env();
            let node = start(&env, &root, settings()).expect("boot").node;
            let mut ledger = Ledger::default();
            for i in 0..8 {
                step(&node, i, &mut ledger).expect("template step");
            }
            node.halt();
            tmp
        })
        .path()
        .join("node")
}

/// Metadata files are picked as often as all partition files together.
fn pick(root: &Path, i: &Index) -> PathBuf {
    let files: Vec<PathBuf> = snapshot(root).into_keys().collect();
    let (meta, data): (Vec<PathBuf>, Vec<PathBuf>) = files
        .into_iter()
        .partition(|p| p.starts_with(root.join("metadata")));
    let pool = if i.index(2) == 0 && !meta.is_empty() {
        meta
    } else {
        data
    };
    pool[i.index(pool.len())].clone()
}

/// Each partition boot opened, and the name of its fence if it has one.
fn fences(booted: &cairn_tests::node::Booted) -> Vec<(PartitionKey, Option<&'static str>)> {
    booted
        .report
        .partitions
        .iter()
        .map(|(k, p)| (*k, p.fence().map(|f| f.name())))
        .collect()
}

fn check_boot(root: &Path) {
    let before = snapshot(root);
    let booted = match start(&repeatable_env(), root, settings()) {
        Ok(booted) => booted,
        Err(BootError::Refused(refusal)) => {
            assert_eq!(snapshot(root), before, "a refused boot changes nothing");
            match start(&repeatable_env(), root, settings()) {
                Err(BootError::Refused(again)) => {
                    assert_eq!(again.name(), refusal.name(), "a refusal is stable")
                }
                Err(other) => panic!("refused with {refusal}, then {other}"),
                Ok(_) => panic!("refused with {refusal}, then booted"),
            }
            return;
        }
        // An I/O error on a directory a test mangled is an answer, not a panic.
        Err(_) => return,
    };
    let state = booted.node.view().state.clone();
    let fenced = fences(&booted);
    booted.node.halt();
    let again = start(&repeatable_env(), root, settings()).expect("a booted node boots again");
    assert_eq!(
        again.node.view().state,
        state,
        "a second boot recovers the same state"
    );
    assert!(again.plan.actions.is_empty(), "{:?}", again.plan.actions);
    assert!(
        again.report.removed.is_empty(),
        "{:?}",
        again.report.removed
    );
    assert_eq!(fences(&again), fenced, "fences are stable");
    for (key, boot) in &again.report.partitions {
        if let PartitionBoot::Opened(plan) = boot {
            assert!(
                plan.fence.is_some() || plan.actions.is_empty(),
                "partition {key:?} repaired twice: {plan:?}"
            );
        }
    }
    again.node.halt();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_damage_to_a_node_directory_refuses_unchanged_or_boots_stably(
        damages in prop::collection::vec(file_damage(), 1..4),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("node");
        copy_dir(&template(), &root);
        for damage in &damages {
            inflict(&root, damage, |i| pick(&root, i));
        }
        check_boot(&root);
    }
}

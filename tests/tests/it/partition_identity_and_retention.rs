//! A partition proves who it is, where its log starts and which offsets it stored: files
//! deleted from, or swapped into, a cleanly closed partition are refused with the reason,
//! changing nothing; retention advances the log start durably before it unlinks anything.

use cairn_engine::config::{Durability, PartitionSettings, TopicConfig};
use cairn_engine::partition::recovery::{Action, Outcome};
use cairn_engine::partition::{
    ConsumerId, FenceReason, Partition, PartitionError, PartitionIdentity, PollFrom,
};
use cairn_tests::*;
use std::path::{Path, PathBuf};

fn settings() -> PartitionSettings {
    PartitionSettings::default()
}

/// A closed `persisted` partition with three segments and two stored offsets.
fn closed_partition(dir: &Path) -> Vec<u64> {
    let env = real_env();
    let mut partition = create(&env, dir, config(Durability::Persisted));
    append_seeds(&mut partition, 0..30, 10, 9000);
    partition.store_offset(ConsumerId::consumer(1), 5).unwrap();
    partition.store_offset(ConsumerId::group(2), 250).unwrap();
    let starts = partition.segment_starts().unwrap();
    assert!(starts.len() >= 3, "{starts:?}");
    partition.close().unwrap();
    starts
}

fn fence_of(dir: &Path, identity: PartitionIdentity) -> FenceReason {
    let opened = Partition::open(
        &real_env(),
        dir,
        identity,
        config(Durability::Persisted),
        settings(),
    )
    .unwrap();
    assert!(opened.plan.actions.is_empty(), "a fence changes nothing");
    opened.partition.fence_reason().cloned().expect("fenced")
}

#[test]
fn a_directory_swapped_in_from_another_partition_is_fenced_not_adopted() {
    let (_tmp, dir) = scratch_dir();
    closed_partition(&dir);
    let before = snapshot(&dir);
    let impostors = [
        PartitionIdentity {
            partition_id: 8,
            ..ID
        },
        PartitionIdentity { stream_id: 1, ..ID },
        PartitionIdentity { topic_id: 3, ..ID },
        PartitionIdentity { nonce: 99, ..ID },
    ];
    for expected in impostors {
        match fence_of(&dir, expected) {
            FenceReason::SuperblockIdentity {
                path,
                expected: e,
                found,
            } => {
                assert_eq!((e, found), (expected, ID));
                assert_eq!(path.parent(), Some(dir.as_path()));
            }
            other => panic!("expected SuperblockIdentity, got {other}"),
        }
    }
    assert_eq!(snapshot(&dir), before, "nothing changed");
    let reopened = open(&real_env(), &dir, config(Durability::Persisted));
    assert_eq!(reopened.plan.outcomes(), vec![Outcome::Clean]);
}

#[test]
fn deleting_the_oldest_segment_is_refused_not_served_from_a_later_offset() {
    let (_tmp, dir) = scratch_dir();
    let starts = closed_partition(&dir);
    for name in [format!("{:020}.log", 0), format!("{:020}.index", 0)] {
        std::fs::remove_file(dir.join(name)).unwrap();
    }
    let before = snapshot(&dir);
    match fence_of(&dir, ID) {
        FenceReason::LogStartMissing {
            dir: d,
            log_start,
            first_segment,
            uncertain_slot,
        } => assert_eq!(
            (d, log_start, first_segment, uncertain_slot),
            (dir.clone(), 0, Some(starts[1]), None)
        ),
        other => panic!("expected LogStartMissing, got {other}"),
    }
    assert_eq!(snapshot(&dir), before, "nothing changed");
}

#[test]
fn a_vanished_persisted_offset_file_or_directory_is_refused_not_read_as_none() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("p");
    closed_partition(&original);
    let cases: [(&str, Vec<String>); 3] = [
        ("offsets/consumers/1", vec!["groups/2".into()]),
        ("offsets/groups/2", vec!["consumers/1".into()]),
        ("offsets", vec![]),
    ];
    for (i, (removed, left)) in cases.into_iter().enumerate() {
        let dir = tmp.path().join(format!("case-{i}"));
        copy_dir(&original, &dir);
        let path = dir.join(removed);
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
        let before = snapshot(&dir);
        match fence_of(&dir, ID) {
            FenceReason::StoredOffsetsMissing {
                dir: d,
                recorded,
                found,
                uncertain_slot,
            } => {
                assert_eq!(d, dir.join("offsets"), "{removed}");
                assert_eq!((recorded, found), (2, left), "{removed}");
                assert_eq!(uncertain_slot, None);
            }
            other => panic!("{removed}: expected StoredOffsetsMissing, got {other}"),
        }
        assert_eq!(snapshot(&dir), before, "{removed}: nothing changed");
    }
}

#[test]
fn a_stored_offset_file_renamed_to_another_consumer_is_refused_not_adopted() {
    // Same count, other members: only the set's digest tells them apart.
    let (tmp, dir) = scratch_dir();
    closed_partition(&dir);
    std::fs::rename(
        dir.join("offsets/consumers/1"),
        dir.join("offsets/consumers/9"),
    )
    .unwrap();
    let before = snapshot(&dir);
    match fence_of(&dir, ID) {
        FenceReason::StoredOffsetsMissing {
            recorded, found, ..
        } => {
            assert_eq!(recorded, 2);
            assert_eq!(found, vec!["consumers/9".to_string(), "groups/2".into()]);
        }
        other => panic!("expected StoredOffsetsMissing, got {other}"),
    }
    assert_eq!(snapshot(&dir), before, "nothing changed");
    // One recorded file gone and two unrecorded ones: one more than recorded, as after an
    // interrupted store, but not the recorded set plus one.
    let dir = tmp.path().join("q");
    closed_partition(&dir);
    let consumers = dir.join("offsets/consumers");
    std::fs::rename(consumers.join("1"), consumers.join("5")).unwrap();
    std::fs::copy(consumers.join("5"), consumers.join("6")).unwrap();
    match fence_of(&dir, ID) {
        FenceReason::StoredOffsetsMissing {
            recorded, found, ..
        } => assert_eq!((recorded, found.len()), (2, 3)),
        other => panic!("expected StoredOffsetsMissing, got {other}"),
    }
}

#[test]
fn another_partitions_offset_file_for_the_same_consumer_reads_as_damaged() {
    // What a misdirected write can do: the bytes of partition 8's offset for consumer 1 land
    // in partition 7's file for consumer 1. They name the right consumer; only the checksum's
    // seed (the partition's identity) tells them apart.
    let tmp = tempfile::tempdir().unwrap();
    let env = real_env();
    let cfg = config(Durability::Persisted);
    let (ours, theirs) = (tmp.path().join("ours"), tmp.path().join("theirs"));
    let mut partition = create(&env, &ours, cfg);
    append_acked(&mut partition, batch(2, 5, 10));
    partition.store_offset(ConsumerId::consumer(1), 0).unwrap();
    partition.close().unwrap();
    let other = PartitionIdentity::bare(8);
    let mut partition = Partition::create(&env, &theirs, other, cfg, settings()).unwrap();
    append_acked(&mut partition, batch(1, 5, 10));
    partition.store_offset(ConsumerId::consumer(1), 4).unwrap();
    partition.close().unwrap();
    std::fs::copy(
        theirs.join("offsets/consumers/1"),
        ours.join("offsets/consumers/1"),
    )
    .unwrap();
    let opened = open(&env, &ours, cfg);
    assert!(opened.partition.fence_reason().is_none());
    match opened.partition.get_offset(ConsumerId::consumer(1)) {
        Err(PartitionError::OffsetDamaged { path, .. }) => {
            assert_eq!(path, ours.join("offsets/consumers/1"))
        }
        other => panic!("expected the offset reported damaged, got {other:?}"),
    }
}

#[test]
fn replicated_offsets_are_not_tracked_a_lost_one_reads_as_none() {
    let (_tmp, dir) = scratch_dir();
    let mut cfg = config(Durability::Persisted);
    cfg.consumer_offset_durability = Durability::Replicated;
    let mut partition = create(&real_env(), &dir, cfg);
    append_acked(&mut partition, batch(1, 5, 10));
    partition.store_offset(ConsumerId::consumer(4), 3).unwrap();
    partition.close().unwrap();
    std::fs::remove_file(dir.join("offsets/consumers/4")).unwrap();
    let opened = open(&real_env(), &dir, cfg);
    assert!(opened.partition.fence_reason().is_none());
    assert_eq!(
        opened
            .partition
            .get_offset(ConsumerId::consumer(4))
            .unwrap(),
        None
    );
}

#[test]
fn retention_records_the_log_start_first_and_overtaken_consumers_resume_there() {
    let (_tmp, dir) = scratch_dir();
    let starts = closed_partition(&dir);
    let mut partition = open(&real_env(), &dir, config(Durability::Persisted)).partition;
    assert!(matches!(
        partition.delete_oldest_segments(starts.len()),
        Err(PartitionError::ActiveSegment { .. })
    ));
    partition.delete_oldest_segments(2).unwrap();
    assert_eq!(partition.log_start().unwrap(), starts[2]);
    assert_eq!(partition.segment_starts().unwrap(), starts[2..].to_vec());
    for start in &starts[..2] {
        assert!(!dir.join(format!("{start:020}.log")).exists());
        assert!(!dir.join(format!("{start:020}.index")).exists());
    }
    let consumer = ConsumerId::consumer(1);
    // Stored 5, now below the log start: consumed up to it, resuming exactly there.
    assert_eq!(partition.get_offset(consumer).unwrap(), Some(starts[2] - 1));
    let polled = partition.poll(PollFrom::Next(consumer), 1).unwrap();
    let first = cairn_engine::format::BatchHeader::decode(&polled.batches[0]).unwrap();
    assert_eq!(first.base_offset, starts[2]);
    let from_zero = partition.poll(PollFrom::Offset(0), 1).unwrap();
    let first = cairn_engine::format::BatchHeader::decode(&from_zero.batches[0]).unwrap();
    assert_eq!(first.base_offset, starts[2], "nothing below the log start");
    drop(partition);
    let reopened = open(&real_env(), &dir, config(Durability::Persisted));
    assert_eq!(reopened.plan.outcomes(), vec![Outcome::Clean]);
    let mut partition = reopened.partition;
    assert_eq!(partition.log_start().unwrap(), starts[2]);
    let all = read_all(&mut partition, 100);
    assert_eq!(all.first().map(|m| m.0), Some(starts[2]));
    assert_eq!(all.last().map(|m| m.0), Some(299));
}

/// A crash at every mutating call of a deletion: recovery reaches a log that starts at the
/// old start or the new one, gapless, never in between and never refused.
#[test]
fn a_crash_anywhere_inside_a_deletion_recovers_to_the_old_or_the_new_start() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("p");
    let starts = closed_partition(&original);
    let mut finished = 0;
    for budget in 0..12 {
        let dir = tmp.path().join(format!("crash-{budget}"));
        copy_dir(&original, &dir);
        let disk = CrashingDisk::new(usize::MAX);
        let crashing = env_on(disk.clone());
        let mut partition = Partition::open(
            &crashing,
            &dir,
            ID,
            config(Durability::Persisted),
            settings(),
        )
        .unwrap()
        .partition;
        *disk.budget.lock().unwrap() = budget;
        let _ = partition.delete_oldest_segments(2);
        drop(partition);
        let opened = open(&real_env(), &dir, config(Durability::Persisted));
        assert!(opened.partition.fence_reason().is_none(), "budget {budget}");
        let finishing = opened
            .plan
            .actions
            .iter()
            .filter(|a| matches!(a, Action::FinishDeletion { .. }))
            .count();
        finished += usize::from(finishing > 0);
        let mut partition = opened.partition;
        let start = partition.log_start().unwrap();
        assert!(start == 0 || start == starts[2], "budget {budget}: {start}");
        let all = read_all(&mut partition, 100);
        let offsets: Vec<u64> = all.iter().map(|m| m.0).collect();
        assert_eq!(offsets, (start..300).collect::<Vec<_>>(), "budget {budget}");
        let left: Vec<PathBuf> = logs(&dir);
        assert!(
            left.iter().all(|l| {
                let name = l.file_stem().unwrap().to_str().unwrap();
                name.parse::<u64>().unwrap() >= start
            }),
            "budget {budget}: {left:?}"
        );
    }
    assert!(
        finished > 0,
        "some crash fell between the record and the unlinks"
    );
}

/// A partition created at an offset (a cluster replica rebuilt from peers that hold
/// nothing below it) starts there, takes batches from there, and reopens clean with the
/// same log start.
#[test]
fn a_partition_created_at_an_offset_starts_there_and_reopens_clean() {
    let env = real_env();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p");
    let persisted = config(Durability::Persisted);
    let place = (&env, dir.as_path(), ID);
    let hooks = cairn_engine::partition::PartitionHooks::default();
    let mut partition = Partition::create_at(place, persisted, (settings(), hooks), 700).unwrap();
    assert_eq!(partition.next_offset().unwrap(), 700);
    assert_eq!(partition.log_start().unwrap(), 700);
    let ack = partition.append(batch(1, 3, 100)).unwrap();
    assert_eq!(ack.base_offset, 700, "the first batch lands at the start");
    partition.persist().unwrap();
    partition.close().unwrap();

    let opened = open(&env, &dir, persisted);
    assert!(opened.plan.fence.is_none(), "{:?}", opened.plan.fence);
    assert!(opened.plan.actions.is_empty(), "{:?}", opened.plan.actions);
    let mut partition = opened.partition;
    assert_eq!(partition.log_start().unwrap(), 700);
    assert_eq!(partition.next_offset().unwrap(), 703);
    let polled = partition.poll(PollFrom::First, 10).unwrap();
    assert_eq!(messages(&polled.batches).len(), 3);
    let before = partition.poll(PollFrom::Offset(0), 10).unwrap();
    assert_eq!(
        messages(&before.batches)[0].0,
        700,
        "nothing below the start"
    );
}

/// A read plan holds open handles: retention deleting the segment it reads (its files
/// unlinked) after the plan was made still reads the segment's bytes as they were, every
/// message exact, and the partition goes on from its new log start.
#[test]
fn a_read_plan_outlives_the_deletion_of_the_segment_it_reads() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let mut partition = create(&env, &dir, config(Durability::Persisted));
    let mut seed = 0;
    while partition.segment_starts().unwrap().len() < 3 {
        append_acked(&mut partition, batch(seed, 8, 4000));
        seed += 1;
    }
    let plan = partition
        .read_plan(PollFrom::First, 16, u64::MAX)
        .expect("a plan");
    partition.delete_oldest_segments(1).expect("retention");
    assert!(!dir.join(format!("{:020}.log", 0)).exists(), "unlinked");
    let read = plan.read();
    assert!(read.fence.is_none(), "nothing damaged: {:?}", read.fence);
    let got = messages(&read.polled.batches);
    let want: Vec<Message> = (0..2u64)
        .flat_map(|s| {
            (0..8).map(move |i| (s * 8 + i as u64, message_id(s, i), payload(s, i, 4000)))
        })
        .collect();
    assert_eq!(got, want, "the deleted segment's messages, exact");
    let start = partition.log_start().unwrap();
    assert!(start > 0, "the log starts after the deleted segment");
    let after = partition.poll(PollFrom::First, 1).unwrap();
    assert_eq!(messages(&after.batches)[0].0, start);
}

/// Polls from any offset or timestamp, with any byte budget, read a gapless run of the log
/// from where they start (a first batch always whole), across sealed segments, the active
/// one and the journal: the plan's segments stop at the budget without leaving a gap.
#[test]
fn polls_from_anywhere_with_any_budget_read_a_gapless_run_of_the_log() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let mut settings = PartitionSettings::default();
    settings.limits.max_batch_bytes = 64 * 1024;
    let lazy = TopicConfig {
        messages_required_to_save: 1_000_000,
        size_of_messages_required_to_save:
            cairn_engine::config::MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE,
        ..config(Durability::Replicated)
    };
    let mut partition = Partition::create(&env, &dir, ID, lazy, settings).expect("create");
    let mut seed = 0;
    while partition.segment_starts().unwrap().len() < 4 {
        partition.append(batch(seed, 6, 5000)).expect("append");
        if seed % 3 == 2 {
            partition.flush().expect("flush");
        }
        seed += 1;
    }
    for extra in 0..5 {
        partition
            .append(batch(seed + extra, 3, 700))
            .expect("journaled");
    }
    let all = read_all(&mut partition, 1_000_000);
    let end = all.len() as u64;
    assert!(end > 0 && all.iter().enumerate().all(|(i, m)| m.0 == i as u64));
    for max_bytes in [1, 40_000, 200_000, 1 << 20, 3 << 20] {
        for start in (0..end).step_by(7).chain([end - 1]) {
            let polled = partition
                .poll_within(PollFrom::Offset(start), 100_000, max_bytes)
                .expect("poll");
            let got = messages(&polled.batches);
            assert!(!got.is_empty(), "from {start} within {max_bytes}: nothing");
            assert_eq!(got[..], all[start as usize..start as usize + got.len()]);
        }
    }
    for max_bytes in [1, 200_000, 3 << 20] {
        let polled = partition
            .poll_within(PollFrom::Timestamp(0), 100_000, max_bytes)
            .expect("poll");
        let got = messages(&polled.batches);
        assert_eq!(got[..], all[..got.len()], "by timestamp within {max_bytes}");
    }
}

//! The engine defects of the 2026-11-30 review (E-items, probes P1–P8), each shown fixed over
//! real files: the probe's scenario, asserting the corrected behaviour.

use bytes::BytesMut;
use cairn_engine::config::{Durability, PartitionSettings, TopicConfig};
use cairn_engine::env::Env;
use cairn_engine::format::{BatchHeader, FormatError, Limits};
use cairn_engine::partition::recovery::{self, Action};
use cairn_engine::partition::superblock::{DurablePoint, Superblock};
use cairn_engine::partition::{
    offsets, ConsumerId, FenceReason, Outcome, Partition, PartitionError, PollFrom,
};
use cairn_tests::*;
use std::path::Path;

const LOG0: &str = "00000000000000000000.log";

fn settings() -> PartitionSettings {
    PartitionSettings::default()
}

fn open_with(
    env: &cairn_engine::env::Env,
    dir: &Path,
    durability: Durability,
    settings: PartitionSettings,
) -> cairn_engine::partition::Opened {
    Partition::open(env, dir, ID, config(durability), settings).expect("open")
}

/// P1, E7: with `validate_checksum = false` a damaged frame structure is refused, never a
/// panic; a damaged payload is served as the specification says ("whatever decodes").
#[test]
fn validate_checksum_off_never_panics_on_damaged_bytes() {
    let settings = PartitionSettings {
        validate_checksum: false,
        ..settings()
    };
    let tmp = tempfile::tempdir().unwrap();
    let env = real_env();
    // Frame 1 starts at 256 + (48 + 100 + 3); its reserved bytes are at frame + 40..48.
    let frame1 = 256 + 151;
    for (poke, structural) in [(frame1 + 44, true), (frame1 + 48 + 7, false)] {
        let dir = tmp.path().join(format!("p{poke}"));
        let cfg = config(Durability::Persisted);
        let mut partition = Partition::create(&env, &dir, ID, cfg, settings).unwrap();
        append_acked(&mut partition, batch(1, 4, 100));
        let log = dir.join(LOG0);
        let mut bytes = std::fs::read(&log).unwrap();
        bytes[poke] = 0xFF;
        std::fs::write(&log, bytes).unwrap();
        let polled = partition.poll(PollFrom::Offset(1), 1).unwrap();
        if structural {
            assert!(
                polled.batches.is_empty(),
                "a batch that does not frame is not served"
            );
            assert!(matches!(
                partition.fence_reason(),
                Some(FenceReason::CorruptBelowDurable { position: 0, .. })
            ));
        } else {
            let served = messages(&polled.batches);
            assert_eq!(served.len(), 1);
            assert_eq!(served[0].1, message_id(1, 1));
            assert_ne!(
                served[0].2,
                payload(1, 1, 100),
                "the damaged payload is served"
            );
            assert!(partition.fence_reason().is_none());
        }
    }
}

/// P2, E4: out of space while rotating is `NoSpace`, not a fence; preallocation is best
/// effort; appends resume when space returns and every acknowledged message is kept.
#[test]
fn no_space_at_rotation_is_reported_and_appends_resume() {
    let (_tmp, dir) = scratch_dir();
    let faulty = FaultyDisk::default();
    let env = faulty.env();
    let mut cfg = config(Durability::Persisted);
    cfg.preallocate_segments = true;
    let mut partition = Partition::create(&env, &dir, ID, cfg, settings()).unwrap();
    *faulty.nospace_preallocate.lock().unwrap() = true;
    let mut acked = Vec::new();
    for seed in 0..30 {
        let ack = partition
            .append_group(vec![batch(seed, 10, 9000)])
            .pop()
            .unwrap();
        acked.push((
            seed,
            ack.expect("fallocate failing costs only the reservation"),
        ));
    }
    assert!(
        partition.segment_starts().unwrap().len() >= 3,
        "rotated while fallocate failed"
    );
    *faulty.nospace_create.lock().unwrap() = true;
    let mut refused = 0;
    for seed in 30..60 {
        match partition
            .append_group(vec![batch(seed, 10, 9000)])
            .pop()
            .unwrap()
        {
            Ok(ack) => acked.push((seed, ack)),
            Err(PartitionError::NoSpace) => refused += 1,
            Err(other) => panic!("expected NoSpace, got {other}"),
        }
    }
    assert!(refused > 0, "a rotation needed a new file");
    assert!(partition.fence_reason().is_none());
    *faulty.nospace_create.lock().unwrap() = false;
    let resumed = partition
        .append_group(vec![batch(99, 10, 9000)])
        .pop()
        .unwrap();
    acked.push((99, resumed.expect("appends resume when space returns")));
    let expected = acked_ids(&acked, 10);
    drop(partition);
    let mut partition = open(&real_env(), &dir, cfg).partition;
    assert_eq!(ids(&mut partition), expected);
}

/// P3, E2, E16: under `persisted` a failed persist rolls back: the refused message is never
/// shown, its offset is not stored against, and after a crash the offset holds only the
/// message that was acknowledged there.
#[test]
fn a_failed_persist_rolls_back_and_its_offsets_are_never_shown() {
    let (_tmp, dir) = scratch_dir();
    let faulty = FaultyDisk::default();
    let env = faulty.env();
    let cfg = config(Durability::Persisted);
    let mut partition = Partition::create(&env, &dir, ID, cfg, settings()).unwrap();
    append_acked(&mut partition, batch(1, 2, 10));
    *faulty.nospace_writes_to.lock().unwrap() = Some("log");
    let failed = partition.append_group(vec![batch(2, 2, 10)]).pop().unwrap();
    assert!(matches!(failed, Err(PartitionError::NoSpace)), "{failed:?}");
    // Provisional appends are rolled back with the persist that fails them.
    partition.append(batch(3, 1, 10)).unwrap();
    partition.append(batch(4, 1, 10)).unwrap();
    assert!(matches!(partition.persist(), Err(PartitionError::NoSpace)));
    assert_eq!(partition.next_offset().unwrap(), 2);
    let polled = partition.poll(PollFrom::Offset(2), 10).unwrap();
    assert!(
        polled.batches.is_empty(),
        "nothing above the durable end is shown"
    );
    assert_eq!(polled.current_offset, Some(1));
    let consumer = ConsumerId::consumer(1);
    assert!(matches!(
        partition.store_offset(consumer, 2),
        Err(PartitionError::OffsetBeyondEnd {
            offset: 2,
            last: Some(1)
        })
    ));
    *faulty.nospace_writes_to.lock().unwrap() = None;
    let ack = append_acked(&mut partition, batch(5, 2, 10));
    assert_eq!(ack.base_offset, 2);
    drop(partition); // a process crash
    let mut partition = open(&real_env(), &dir, cfg).partition;
    assert_eq!(
        ids(&mut partition),
        vec![
            (0, message_id(1, 0)),
            (1, message_id(1, 1)),
            (2, message_id(5, 0)),
            (3, message_id(5, 1))
        ]
    );
}

/// Under `persisted`, journaled but unpersisted appends are not shown to consumers.
#[test]
fn persisted_appends_are_invisible_until_durable() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let mut partition = create(&env, &dir, config(Durability::Persisted));
    partition.append(batch(1, 3, 10)).unwrap();
    partition.flush().unwrap(); // written, not synced
    let polled = partition.poll(PollFrom::First, 10).unwrap();
    assert!(polled.batches.is_empty());
    assert_eq!(polled.current_offset, None);
    assert_eq!(partition.visible_next_offset().unwrap(), 0);
    partition.persist().unwrap();
    assert_eq!(
        partition.poll(PollFrom::First, 10).unwrap().message_count,
        3
    );
}

/// P4, E5: stored batches are verified against the format's ceilings: lowering an admission
/// limit changes what new batches may hold, never what recovery accepts.
#[test]
fn lowering_admission_limits_never_fences_stored_batches() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let cfg = config(Durability::Persisted);
    let mut partition = create(&env, &dir, cfg);
    append_acked(&mut partition, batch(1, 10, 100));
    partition.close().unwrap();
    let mut lowered = settings();
    lowered.limits.max_messages_per_batch = 5;
    lowered.limits.max_payload_bytes = 50;
    let opened = open_with(&env, &dir, Durability::Persisted, lowered);
    assert_eq!(opened.plan.outcomes(), vec![Outcome::Clean]);
    let mut partition = opened.partition;
    assert_eq!(read_all(&mut partition, 100).len(), 10);
    assert!(matches!(
        partition.append(batch(2, 10, 10)),
        Err(PartitionError::InvalidBatch(FormatError::TooManyMessages {
            count: 10,
            limit: 5
        }))
    ));
}

/// A partition with three durable batches and three more flushed above the durable end.
fn durable_and_tail(dir: &Path) -> (DurablePoint, u64) {
    let env = real_env();
    let cfg = config(Durability::Persisted);
    let mut partition = create(&env, dir, cfg);
    append_seeds(&mut partition, 0..3, 10, 5000);
    let durable = partition.durable_point().unwrap();
    for seed in 3..6 {
        partition.append(batch(seed, 10, 5000)).unwrap();
    }
    partition.flush().unwrap();
    drop(partition);
    let len = std::fs::metadata(dir.join(LOG0)).unwrap().len();
    (durable, len)
}

/// P6, E8: an unreadable sector above the durable end is a torn tail, cut at the batch it
/// lies in; the durable data stays served.
#[test]
fn an_unreadable_sector_above_the_durable_end_is_a_torn_tail() {
    let (_tmp, dir) = scratch_dir();
    let (durable, len) = durable_and_tail(&dir);
    let log = dir.join(LOG0);
    let bad = durable.position + (len - durable.position) / 2;
    let bad = bad - bad % 512;
    let batch_start = *batch_positions(&log)
        .iter()
        .rev()
        .find(|&&p| p <= bad)
        .unwrap();
    let faulty = FaultyDisk::default();
    *faulty.unreadable.lock().unwrap() = Some((log.clone(), bad, bad + 512));
    let opened = open_with(&faulty.env(), &dir, Durability::Persisted, settings());
    assert!(opened.partition.fence_reason().is_none());
    let truncations: Vec<(u64, String)> = opened
        .plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Truncate { from, damage, .. } => Some((*from, damage.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(truncations.len(), 1, "{:?}", opened.plan.actions);
    assert_eq!(truncations[0].0, batch_start);
    assert!(
        truncations[0].1.contains(&format!("sector at {bad}")),
        "{truncations:?}"
    );
    let mut partition = opened.partition;
    assert!(read_all(&mut partition, 100).len() as u64 >= durable.next_offset);
}

/// E8: below the durable end the same sector fences, naming the batch and the sector.
#[test]
fn an_unreadable_sector_below_the_durable_end_fences_naming_the_sector() {
    let (_tmp, dir) = scratch_dir();
    let (durable, _) = durable_and_tail(&dir);
    let log = dir.join(LOG0);
    let bad = durable.position / 2;
    let bad = bad - bad % 512;
    let batch_start = *batch_positions(&log)
        .iter()
        .rev()
        .find(|&&p| p <= bad)
        .unwrap();
    let faulty = FaultyDisk::default();
    *faulty.unreadable.lock().unwrap() = Some((log.clone(), bad, bad + 512));
    let opened = open_with(&faulty.env(), &dir, Durability::Persisted, settings());
    match opened.partition.fence_reason() {
        Some(FenceReason::ReadFailed {
            file,
            position,
            sector,
            ..
        }) => assert_eq!((file, *position, *sector), (&log, batch_start, bad)),
        other => panic!("expected ReadFailed, got {other:?}"),
    }
    assert!(opened.plan.actions.is_empty(), "a fence changes nothing");
}

/// P7, E3: lowering an offset beyond a lost tail is a repair, durable under either policy.
#[test]
fn recovery_lowers_an_offset_durably_under_replicated_offsets() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let mut cfg = config(Durability::Replicated);
    cfg.messages_required_to_save = 10;
    let consumer = ConsumerId::consumer(3);
    let mut partition = create(&env, &dir, cfg);
    partition.append(batch(1, 10, 10)).unwrap(); // flushed (threshold)
    partition.append(batch(2, 5, 10)).unwrap(); // journal only
    partition.store_offset(consumer, 13).unwrap();
    drop(partition); // the journal is lost
    let counting = CountingDisk::default();
    let cenv = env_on(counting.clone());
    let opened = open(&cenv, &dir, cfg);
    assert!(opened.plan.actions.contains(&Action::LowerOffset {
        consumer,
        path: consumer.path(&dir),
        from: 13,
        to: 9
    }));
    assert_eq!(opened.partition.get_offset(consumer).unwrap(), Some(9));
    assert!(
        counting.syncs_of("offsets/consumers/3") >= 1,
        "the new value is synced"
    );
    assert!(
        counting.dir_syncs_of("offsets/consumers") >= 1,
        "and its rename"
    );
}

/// P8: a torn `replicated` offset file (an unsynced store) is dropped, so the consumer
/// reads from the start; under `persisted` the same damage is reported, never reset.
#[test]
fn a_torn_offset_file_is_dropped_under_replicated_and_reported_under_persisted() {
    for durability in [Durability::Replicated, Durability::Persisted] {
        let (_tmp, dir) = scratch_dir();
        let env = real_env();
        let cfg = config(durability);
        let consumer = ConsumerId::consumer(1);
        let mut partition = create(&env, &dir, cfg);
        append_acked(&mut partition, batch(1, 10, 10));
        partition.store_offset(consumer, 4).unwrap();
        partition.close().unwrap();
        let file = consumer.path(&dir);
        std::fs::write(&file, b"").unwrap();
        let opened = open(&env, &dir, cfg);
        let mut partition = opened.partition;
        match durability {
            Durability::Replicated => {
                assert!(matches!(
                    opened.plan.actions.as_slice(),
                    [Action::DropDamagedOffset { path, .. }] if *path == file
                ));
                assert_eq!(partition.get_offset(consumer).unwrap(), None);
                let polled = partition.poll(PollFrom::Next(consumer), 5).unwrap();
                assert_eq!(messages(&polled.batches)[0].0, 0);
                assert!(!file.exists());
            }
            Durability::Persisted => {
                assert!(opened.plan.actions.is_empty());
                assert!(matches!(
                    partition.poll(PollFrom::Next(consumer), 5),
                    Err(PartitionError::OffsetDamaged { .. })
                ));
                assert_eq!(std::fs::read(&file).unwrap(), b"");
            }
        }
    }
}

fn slot_record(dir: &Path, name: &str) -> Option<Superblock> {
    let bytes = std::fs::read(dir.join(name)).ok()?;
    Superblock::decode(bytes.get(..cairn_engine::partition::superblock::SUPERBLOCK_LEN)?).ok()
}

/// A new partition at `dir` holding one acknowledged batch, closed cleanly.
fn one_batch_closed(env: &Env, dir: &Path, cfg: TopicConfig) {
    let mut partition = create(env, dir, cfg);
    append_acked(&mut partition, batch(1, 5, 100));
    partition.close().unwrap();
}

/// The slot holding the older record (the one a clean close did not write last).
fn older_slot(dir: &Path) -> &'static str {
    let a = slot_record(dir, "superblock.a").unwrap().sequence;
    let b = slot_record(dir, "superblock.b").unwrap().sequence;
    if a < b {
        "superblock.a"
    } else {
        "superblock.b"
    }
}

/// E11: a missing slot is as uncertain as a damaged one; a clean recovery re-creates it,
/// durably, and a torn tail with a slot missing fences instead of truncating.
#[test]
fn a_missing_slot_is_recreated_durably_or_fences_a_torn_tail() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let cfg = config(Durability::Persisted);
    one_batch_closed(&env, &dir, cfg);
    let slot = older_slot(&dir);
    std::fs::remove_file(dir.join(slot)).unwrap();
    let counting = CountingDisk::default();
    let cenv = env_on(counting.clone());
    let opened = open(&cenv, &dir, cfg);
    assert_eq!(opened.plan.outcomes(), vec![Outcome::SlotRepaired]);
    assert!(slot_record(&dir, slot).is_some(), "the slot is back");
    assert!(
        counting.dir_syncs.lock().unwrap().contains_key(&dir),
        "its name is durable"
    );
    opened.partition.close().unwrap();

    std::fs::remove_file(dir.join(older_slot(&dir))).unwrap();
    let log = dir.join(LOG0);
    append_to_file(&log, &[9u8; 300]);
    let opened = open(&env, &dir, cfg);
    assert!(matches!(
        opened.partition.fence_reason(),
        Some(FenceReason::DurableEndUncertain { .. })
    ));
}

/// E12: a damaged older slot is rewritten at the next clean recovery, so the uncertainty does
/// not outlive it: a later torn tail is truncated, not fenced.
#[test]
fn a_damaged_older_slot_is_rewritten_so_a_later_torn_tail_truncates() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let cfg = config(Durability::Persisted);
    one_batch_closed(&env, &dir, cfg);
    let slot = dir.join(older_slot(&dir));
    flip_byte(&slot, 20);
    flip_byte(&slot, 4096 + 20);
    let opened = open(&env, &dir, cfg);
    assert_eq!(opened.plan.outcomes(), vec![Outcome::SlotRepaired]);
    opened.partition.close().unwrap();
    let log = dir.join(LOG0);
    append_to_file(&log, &[9u8; 300]);
    let opened = open(&env, &dir, cfg);
    assert_eq!(opened.plan.outcomes(), vec![Outcome::TornTailTruncated]);
}

/// The slot that holds the newest record.
fn newer_slot(dir: &Path) -> &'static str {
    if older_slot(dir) == "superblock.a" {
        "superblock.b"
    } else {
        "superblock.a"
    }
}

/// A newest record that survives in one copy only (its mirror rotten, or holding an older
/// record after its page was lost) is written again, into the other slot, at the next boot:
/// one more fault would otherwise erase it. Slot files are two whole pages, so each write
/// rewrites every sector of both copies.
#[test]
fn a_newest_record_left_in_one_copy_is_written_again() {
    use cairn_engine::partition::superblock::{MIRROR_OFFSET, SLOT_FILE_LEN, SUPERBLOCK_LEN};
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let cfg = config(Durability::Persisted);
    one_batch_closed(&env, &dir, cfg);
    for name in ["superblock.a", "superblock.b"] {
        let len = std::fs::metadata(dir.join(name)).unwrap().len();
        assert_eq!(len, SLOT_FILE_LEN, "{name} is two whole pages");
    }
    let mirror = MIRROR_OFFSET as usize;
    type Inflict = fn(&Path);
    let damage: [(&str, Inflict); 2] = [
        ("rotten", |newest: &Path| {
            flip_byte(newest, MIRROR_OFFSET + 20)
        }),
        ("stale", |newest: &Path| {
            // The mirror's page never landed: it still holds the slot's record before.
            let mut bytes = std::fs::read(newest).unwrap();
            let mut before = Superblock::decode(&bytes[..SUPERBLOCK_LEN]).unwrap();
            assert!(before.sequence >= 2, "the slot was written before");
            before.sequence -= 2;
            let mirror = MIRROR_OFFSET as usize;
            bytes[mirror..mirror + SUPERBLOCK_LEN].copy_from_slice(&before.encode());
            std::fs::write(newest, bytes).unwrap();
        }),
    ];
    for (what, inflict) in damage {
        let newest = dir.join(newer_slot(&dir));
        let other = older_slot(&dir);
        let older = dir.join(other);
        let record = slot_record(&dir, newer_slot(&dir)).unwrap();
        inflict(&newest);
        let opened = open(&env, &dir, cfg);
        assert_eq!(
            opened.plan.outcomes(),
            vec![Outcome::SlotRepaired],
            "{what}"
        );
        let rewritten = slot_record(&dir, other).unwrap();
        assert_eq!(
            rewritten.durable, record.durable,
            "{what}: the same durable end"
        );
        assert!(
            rewritten.sequence > record.sequence,
            "{what}: the next record went into the other slot"
        );
        opened.partition.close().unwrap();
        let bytes = std::fs::read(&older).unwrap();
        assert_eq!(
            bytes[..SUPERBLOCK_LEN],
            bytes[mirror..mirror + SUPERBLOCK_LEN]
        );
        let opened = open(&env, &dir, cfg);
        assert_eq!(
            opened.plan.outcomes(),
            vec![Outcome::Clean],
            "{what}: repaired"
        );
        opened.partition.close().unwrap();
    }
}

/// E14: missing offsets directories are created with their parents synced.
#[test]
fn missing_offsets_directories_are_created_durably() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let cfg = config(Durability::Persisted);
    create(&env, &dir, cfg).close().unwrap();
    std::fs::remove_dir_all(dir.join("offsets")).unwrap();
    let counting = CountingDisk::default();
    let cenv = env_on(counting.clone());
    let opened = open(&cenv, &dir, cfg);
    let created: Vec<&str> = opened.plan.decisions();
    assert_eq!(created, vec!["CreateDir", "CreateDir", "CreateDir"]);
    let synced = counting.dir_syncs.lock().unwrap().clone();
    assert!(
        synced.contains_key(&dir) && synced.contains_key(&dir.join("offsets")),
        "{synced:?}"
    );
    assert!(dir.join("offsets/consumers").is_dir() && dir.join("offsets/groups").is_dir());
}

/// E15: when the cut after a failed write fails too, the file's end is unknown: fence.
#[test]
fn a_failed_cut_after_no_space_fences() {
    let (_tmp, dir) = scratch_dir();
    let faulty = FaultyDisk::default();
    let mut partition = Partition::create(
        &faulty.env(),
        &dir,
        ID,
        config(Durability::Persisted),
        settings(),
    )
    .unwrap();
    *faulty.nospace_writes_to.lock().unwrap() = Some("log");
    *faulty.set_len_fails.lock().unwrap() = true;
    let result = partition.append_group(vec![batch(1, 2, 10)]).pop().unwrap();
    assert!(matches!(
        result,
        Err(PartitionError::Fenced(FenceReason::IoFailed {
            op: "set_len",
            ..
        }))
    ));
}

/// E18: offsets near `u64::MAX` on disk are damage, never an overflow.
#[test]
fn offsets_that_would_overflow_are_damage_not_a_panic() {
    let (_tmp, dir) = scratch_dir();
    std::fs::create_dir_all(dir.join("offsets/consumers")).unwrap();
    std::fs::create_dir_all(dir.join("offsets/groups")).unwrap();
    let start = u64::MAX - 2;
    let durable = DurablePoint {
        segment_start: start,
        position: 0,
        next_offset: start,
    };
    for (sequence, name) in [(0, "superblock.a"), (1, "superblock.b")] {
        let record = Superblock {
            sequence,
            identity: ID,
            durable,
            log_start: start,
            offsets: Default::default(),
        };
        std::fs::write(
            dir.join(name),
            cairn_engine::slots::encode_file(&record.encode()),
        )
        .unwrap();
    }
    let mut stored: BytesMut = batch(1, 5, 10);
    cairn_engine::format::stamp_batch(&mut stored, 7, start, 1);
    std::fs::write(dir.join(format!("{start:020}.log")), &stored).unwrap();
    std::fs::write(dir.join(format!("{start:020}.index")), b"").unwrap();
    assert!(matches!(
        cairn_engine::format::verify_batch(
            &stored,
            &Limits::default(),
            cairn_engine::format::Layout::Stored
        ),
        Err(FormatError::OffsetOverflow { .. })
    ));
    let opened = open(&real_env(), &dir, config(Durability::Persisted));
    assert!(opened.partition.fence_reason().is_none());
    assert!(matches!(
        opened.plan.actions.as_slice(),
        [Action::Truncate { from: 0, damage, .. }] if damage.contains("overflows")
    ));
}

/// E20, E21: recovery removes only its own leftovers, and reads only offset files named by
/// the plain decimal id; an operator's other files are left alone and noted.
#[test]
fn only_recoverys_own_files_are_touched() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let cfg = config(Durability::Persisted);
    let mut partition = create(&env, &dir, cfg);
    append_acked(&mut partition, batch(1, 10, 10));
    partition.store_offset(ConsumerId::consumer(5), 3).unwrap();
    partition.close().unwrap();
    let consumers = dir.join("offsets/consumers");
    std::fs::write(dir.join("notes.tmp"), b"mine").unwrap();
    std::fs::write(dir.join("00000000000000000000.index.tmp"), b"x").unwrap();
    std::fs::write(consumers.join("6.tmp"), b"x").unwrap();
    let valid = std::fs::read(consumers.join("5")).unwrap();
    std::fs::write(consumers.join("+5"), &valid).unwrap();
    std::fs::write(
        consumers.join("007"),
        offsets::encode(offsets::owner(&ID), ConsumerId::consumer(7), 1),
    )
    .unwrap();
    let opened = open(&env, &dir, cfg);
    assert_eq!(opened.plan.decisions(), vec!["RemoveTemp", "RemoveTemp"]);
    assert!(dir.join("notes.tmp").exists() && consumers.join("+5").exists());
    for unknown in ["notes.tmp", "+5", "007"] {
        assert!(
            opened.plan.notes.iter().any(|n| n.contains(unknown)),
            "{unknown}: {:?}",
            opened.plan.notes
        );
    }
    let partition = opened.partition;
    assert_eq!(partition.get_offset(ConsumerId::consumer(7)).unwrap(), None);
    assert_eq!(
        partition.get_offset(ConsumerId::consumer(5)).unwrap(),
        Some(3)
    );
}

/// E24: a poll serves whole batches by sharing their bytes, not copying them.
#[test]
fn whole_batches_are_served_without_copies() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let mut partition = create(&env, &dir, config(Durability::Replicated));
    partition.append(batch(1, 3, 10)).unwrap();
    let first = partition.poll(PollFrom::First, 10).unwrap();
    let again = partition.poll(PollFrom::First, 10).unwrap();
    assert_eq!(first.batches[0].as_ptr(), again.batches[0].as_ptr());
    partition.persist().unwrap();
    let from_disk = partition.poll(PollFrom::First, 10).unwrap();
    assert_eq!(from_disk.batches[0], first.batches[0]);
    let header = BatchHeader::decode(&from_disk.batches[0]).unwrap();
    assert_eq!(header.message_count, 3);
}

/// E1: recovery reads the superblock slots and the tail logs from the device (their clean
/// cached pages dropped first), never from what a page cache remembers; sealed segments,
/// synced before they were sealed, are read as they are.
#[test]
fn recovery_reads_the_slots_and_tail_from_the_device() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let cfg = config(Durability::Persisted);
    let mut partition = create(&env, &dir, cfg);
    append_seeds(&mut partition, 0..30, 10, 9000);
    let starts = partition.segment_starts().unwrap();
    assert!(starts.len() >= 3);
    partition.close().unwrap();
    let counting = CountingDisk::default();
    let cenv = env_on(counting.clone());
    let _ = recovery::plan(cenv.disk.as_ref(), &dir, ID, Durability::Persisted).unwrap();
    let evicted = counting.evictions.lock().unwrap().clone();
    let active = dir.join(format!("{:020}.log", starts.last().unwrap()));
    let sealed = dir.join(format!("{:020}.log", starts[0]));
    assert!(evicted.contains_key(&dir.join("superblock.a")));
    assert!(evicted.contains_key(&dir.join("superblock.b")));
    assert!(evicted.contains_key(&active), "{evicted:?}");
    assert!(!evicted.contains_key(&sealed), "{evicted:?}");
}

/// A superblock write the device puts elsewhere is caught by reading the slot back: the
/// group is refused (fenced), never acknowledged on a record that is not where recovery looks.
#[test]
fn a_superblock_write_that_lands_elsewhere_is_never_acknowledged() {
    let (_tmp, dir) = scratch_dir();
    let faulty = FaultyDisk::default();
    let cfg = config(Durability::Persisted);
    let mut partition = Partition::create(&faulty.env(), &dir, ID, cfg, settings()).unwrap();
    let acked = partition
        .append_group(vec![batch(1, 3, 10)])
        .pop()
        .unwrap()
        .expect("a sound device acknowledges");
    *faulty.misdirect_writes_to.lock().unwrap() = Some("superblock");
    let refused = partition.append_group(vec![batch(2, 3, 10)]).pop().unwrap();
    match refused {
        Err(PartitionError::Fenced(FenceReason::IoFailed { op, error, .. })) => {
            assert_eq!(op, "write superblock in");
            assert!(error.contains("landed elsewhere"), "{error}");
        }
        other => panic!("expected a fence on the read-back, got {other:?}"),
    }
    drop(partition);
    let opened = open(&real_env(), &dir, cfg);
    assert!(opened.partition.fence_reason().is_none());
    let mut partition = opened.partition;
    let expected: Vec<(u64, u128)> = (0..3)
        .map(|i| (acked.base_offset + i as u64, message_id(1, i)))
        .collect();
    let found = ids(&mut partition);
    assert_eq!(found[..3], expected[..], "the acknowledged group survives");
    // The refused group was synced before its record; recovery may keep it whole (a write
    // that failed may have happened) but never a part of it.
    assert!(found.len() == 3 || found.len() == 6, "{found:?}");
}

/// A poll by timestamp verifies every batch it walks: a flipped bit in a stored stamp fences
/// the partition instead of answering with the wrong offset.
#[test]
fn a_timestamp_walk_over_a_damaged_stamp_fences_instead_of_answering_wrong() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let mut partition = create(&env, &dir, config(Durability::Persisted));
    let mut stamps = Vec::new();
    for seed in 0..3 {
        let ack = append_acked(&mut partition, batch(seed, 2, 10));
        stamps.push(ack.timestamp);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(stamps[0] + 1 < stamps[1]);
    let between = stamps[0] + 1;
    assert_eq!(
        partition
            .poll(PollFrom::Timestamp(between), 10)
            .unwrap()
            .batches
            .first()
            .map(|b| BatchHeader::decode(b).unwrap().base_offset),
        Some(2),
        "the first batch stamped at or after the query"
    );
    // The high byte of batch 0's base_timestamp: an unverified walk would stop there.
    flip_byte(&dir.join(LOG0), 16 + 7);
    let polled = partition.poll(PollFrom::Timestamp(between), 10).unwrap();
    assert!(polled.batches.is_empty(), "{:?}", polled.message_count);
    match partition.fence_reason() {
        Some(FenceReason::CorruptBelowDurable { position, .. }) => assert_eq!(*position, 0),
        other => panic!("expected CorruptBelowDurable at 0, got {other:?}"),
    }
}

/// A log found shorter than its durable end while the partition runs is damage to promised
/// bytes (the file lost them), not an unreadable sector.
#[test]
fn a_log_shortened_under_a_running_partition_fences_as_corrupt() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let mut partition = create(&env, &dir, config(Durability::Persisted));
    append_seeds(&mut partition, 0..3, 4, 100);
    let log = dir.join(LOG0);
    let positions = batch_positions(&log);
    let cut = positions[1] + 100;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(cut)
        .unwrap();
    let polled = partition.poll(PollFrom::First, 100).unwrap();
    assert_eq!(polled.message_count, 4, "the valid prefix is served");
    match partition.fence_reason() {
        Some(FenceReason::CorruptBelowDurable {
            position,
            durable_position,
            ..
        }) => {
            assert_eq!(*position, positions[1]);
            assert!(*durable_position > cut);
        }
        other => panic!("expected CorruptBelowDurable, got {other:?}"),
    }
}

/// Under `persisted`, a group whose first batch filled the segment and whose rotation then
/// found no space is rolled back: the sealed-and-synced bytes past the durable end are cut
/// (the file ends at the durable position) and never shown, before or after a restart.
#[test]
fn a_rotation_without_space_cuts_the_synced_batch_back_to_the_durable_end() {
    let (_tmp, dir) = scratch_dir();
    let faulty = FaultyDisk::default();
    let cfg = config(Durability::Persisted);
    let mut partition = Partition::create(&faulty.env(), &dir, ID, cfg, settings()).unwrap();
    let length = batch(0, 10, 9000).len() as u64;
    let mut acked = Vec::new();
    let mut seed = 0;
    while partition.durable_point().unwrap().position + length < cfg.segment_size {
        let ack = partition.append_group(vec![batch(seed, 10, 9000)]).pop();
        acked.push((seed, ack.unwrap().unwrap()));
        seed += 1;
    }
    let durable = partition.durable_point().unwrap();
    *faulty.nospace_create.lock().unwrap() = true;
    let results = partition.append_group(vec![batch(100, 10, 9000), batch(101, 10, 9000)]);
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(PartitionError::NoSpace))),
        "{results:?}"
    );
    assert!(partition.fence_reason().is_none());
    assert_eq!(partition.durable_point().unwrap(), durable);
    assert_eq!(
        std::fs::metadata(dir.join(LOG0)).unwrap().len(),
        durable.position,
        "the batch synced by the seal is cut"
    );
    assert_eq!(partition.segment_starts().unwrap(), vec![0]);
    *faulty.nospace_create.lock().unwrap() = false;
    let ack = partition.append_group(vec![batch(200, 10, 9000)]).pop();
    let ack = ack.unwrap().expect("appends resume when space returns");
    assert_eq!(
        ack.base_offset, durable.next_offset,
        "the refused offsets are reused"
    );
    acked.push((200, ack));
    drop(partition);
    let expected = acked_ids(&acked, 10);
    let mut partition = open(&real_env(), &dir, cfg).partition;
    assert_eq!(ids(&mut partition), expected);
}

/// Review S10: a partition keeps at most `MAX_CONSUMER_OFFSETS` consumers' offsets (each a
/// file read at every boot). The next new consumer, single or group, is refused (Iggy's
/// TooManyConsumerOffsets, 3024) while those with an offset still store theirs; a deletion
/// makes room, and a reopen finds exactly what was kept.
#[test]
fn a_partition_keeps_a_bounded_number_of_consumer_offsets() {
    use cairn_engine::partition::offsets::MAX_CONSUMER_OFFSETS;
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let cfg = config(Durability::Replicated);
    let mut partition = create(&env, &dir, cfg);
    append_acked(&mut partition, batch(1, 10, 10));
    for id in 0..MAX_CONSUMER_OFFSETS as u32 {
        partition.store_offset(ConsumerId::consumer(id), 3).unwrap();
    }
    let next = ConsumerId::consumer(MAX_CONSUMER_OFFSETS as u32);
    for refused in [next, ConsumerId::group(0)] {
        let e = partition.store_offset(refused, 3).unwrap_err();
        assert!(
            matches!(e, PartitionError::TooManyOffsets { limit } if limit == MAX_CONSUMER_OFFSETS),
            "{e}"
        );
        let code = cairn_engine::error::NodeError::Partition(e).code();
        assert_eq!(code, 3024, "Iggy's TooManyConsumerOffsets");
    }
    partition.store_offset(ConsumerId::consumer(7), 5).unwrap();
    assert!(partition.delete_offset(ConsumerId::consumer(0)).unwrap());
    partition.store_offset(next, 4).unwrap();
    partition.close().unwrap();
    let mut partition = open(&env, &dir, cfg).partition;
    assert_eq!(partition.get_offset(next).unwrap(), Some(4));
    assert_eq!(
        partition.get_offset(ConsumerId::consumer(7)).unwrap(),
        Some(5)
    );
    assert_eq!(partition.get_offset(ConsumerId::consumer(0)).unwrap(), None);
    let e = partition
        .store_offset(ConsumerId::consumer(0), 3)
        .unwrap_err();
    assert!(matches!(e, PartitionError::TooManyOffsets { .. }), "{e}");
}

/// The active-files table (review of 7f36e6c): a sync the node's table makes to close a
/// partition's dirty active files takes the writeback error, which Linux reports once; that
/// partition fences at its next request, and its next persist never records the lost bytes
/// as durable (its own sync would succeed over them).
#[test]
fn a_failed_sync_to_close_the_active_files_fences_their_partition() {
    use cairn_engine::partition::resources::PartitionResources;
    let tmp = tempfile::tempdir().unwrap();
    let faulty = FaultyDisk::default();
    let env = faulty.env();
    let shared = PartitionResources::shared(16, 1, u64::MAX);
    let create = |name: &str| {
        let dir = tmp.path().join(name);
        let cfg = config(Durability::Replicated);
        let mut partition = Partition::create(&env, &dir, ID, cfg, settings()).unwrap();
        partition.attach(&shared);
        partition
    };
    let (mut a, mut b) = (create("a"), create("b"));
    a.append(batch(1, 2, 10)).unwrap();
    a.flush().unwrap();
    *faulty.sync_fails_once.lock().unwrap() = Some(tmp.path().join("a").join(LOG0));
    // B's files take the table's one place: A's, written past its durable end, are synced
    // to close, and that sync fails.
    b.append(batch(2, 1, 10)).unwrap();
    b.flush().unwrap();
    let stats = shared.active.stats();
    assert_eq!(
        (stats.open, stats.closes),
        (2, 0),
        "A's stay open: {stats:?}"
    );
    let persisted = a.persist();
    assert!(
        matches!(
            &persisted,
            Err(PartitionError::Fenced(FenceReason::IoFailed {
                op: "sync_data (to close the active files)",
                ..
            }))
        ),
        "{persisted:?}"
    );
    assert!(a.fence_reason().is_some());
    b.persist().expect("only A fences");
}

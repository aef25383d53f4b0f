//! The partition log over the real file system: admission, group commit, rotation, polls,
//! consumer offsets, crash behaviour of the two durability policies.

use bytes::BytesMut;
use cairn_engine::config::{Durability, PartitionSettings, TopicConfig};
use cairn_engine::format::{message_checksum, BatchHeader, FormatError, Limits, BATCH_HEADER_LEN};
use cairn_engine::partition::{
    ConsumerId, FenceReason, Outcome, Partition, PartitionError, PollFrom,
};
use cairn_tests::*;

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Recomputes the message checksum of the frame at `start` (after editing its header).
fn reseal_frame(bytes: &mut [u8], start: usize) {
    let payload = u32::from_le_bytes(bytes[start + 36..start + 40].try_into().unwrap()) as usize;
    let headers = u32::from_le_bytes(bytes[start + 32..start + 36].try_into().unwrap()) as usize;
    let checksum = message_checksum(&bytes[start..start + 48 + payload + headers]);
    put_u64(bytes, start, checksum);
}

const FIRST_FRAME: usize = BATCH_HEADER_LEN;

#[test]
fn bad_input_is_rejected_with_its_typed_error_and_the_log_is_unchanged() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let settings = PartitionSettings {
        limits: Limits {
            max_batch_bytes: 64 * 1024,
            max_messages_per_batch: 20,
            max_payload_bytes: 4096,
            max_user_headers_bytes: 16,
        },
        ..PartitionSettings::default()
    };
    let mut partition =
        Partition::create(&env, &dir, ID, config(Durability::Persisted), settings).unwrap();
    append_seeds(&mut partition, 0..3, 4, 100);
    let next = partition.next_offset().unwrap();
    let before = snapshot(&dir);

    let good = || batch(50, 3, 100); // frames: 48 + 100 + 3 bytes each
    let frame_len = 48 + 100 + 3;
    type Case = (
        &'static str,
        Box<dyn Fn() -> BytesMut>,
        Box<dyn Fn(&FormatError) -> bool>,
    );
    let cases: Vec<Case> = vec![
        (
            "reserved byte in the batch header",
            Box::new(move || {
                let mut b = good();
                b[100] = 1;
                b
            }),
            Box::new(|e| {
                matches!(
                    e,
                    FormatError::ReservedNotZero {
                        what: "batch header",
                        offset: 100,
                        found: 1
                    }
                )
            }),
        ),
        (
            "reserved byte in a frame header",
            Box::new(move || {
                let mut b = good();
                b[FIRST_FRAME + 44] = 9;
                b
            }),
            Box::new(
                |e| matches!(e, FormatError::ReservedNotZero { what: "frame header", offset, found: 9 } if *offset == FIRST_FRAME + 44),
            ),
        ),
        (
            "batch_length disagrees with the bytes",
            Box::new(move || {
                let mut b = good();
                let l = b.len() as u64;
                put_u64(&mut b, 32, l + 8);
                b
            }),
            Box::new(|e| matches!(e, FormatError::BatchLengthMismatch { .. })),
        ),
        (
            "message_count too small",
            Box::new(move || {
                let mut b = good();
                put_u32(&mut b, 48, 2);
                b
            }),
            Box::new(|e| {
                matches!(
                    e,
                    FormatError::MessageCountMismatch {
                        declared: 2,
                        found: 3
                    }
                )
            }),
        ),
        (
            "message_count too large",
            Box::new(move || {
                let mut b = good();
                put_u32(&mut b, 48, 5);
                b
            }),
            Box::new(|e| {
                matches!(
                    e,
                    FormatError::MessageCountMismatch {
                        declared: 5,
                        found: 3
                    }
                )
            }),
        ),
        (
            "a frame runs past the batch",
            Box::new(move || {
                let mut b = good();
                put_u32(&mut b, FIRST_FRAME + 2 * frame_len + 36, 200);
                b
            }),
            Box::new(|e| matches!(e, FormatError::FrameOverrun { index: 2, .. })),
        ),
        (
            "message checksum",
            Box::new(move || {
                let mut b = good();
                b[FIRST_FRAME + frame_len + 60] ^= 4;
                b
            }),
            Box::new(|e| matches!(e, FormatError::MessageChecksum { index: 1, .. })),
        ),
        (
            "batch checksum",
            Box::new(move || {
                let mut b = good();
                b[24] ^= 1;
                b
            }),
            Box::new(|e| matches!(e, FormatError::BatchChecksum { .. })),
        ),
        (
            "offset_delta out of order",
            Box::new(move || {
                let mut b = good();
                let at = FIRST_FRAME + frame_len;
                put_u32(&mut b, at + 24, 7);
                reseal_frame(&mut b, at);
                b
            }),
            Box::new(|e| {
                matches!(
                    e,
                    FormatError::OffsetDelta {
                        index: 1,
                        expected: 1,
                        found: 7
                    }
                )
            }),
        ),
        (
            "payload over the limit",
            Box::new(|| batch(51, 1, 5000)),
            Box::new(|e| {
                matches!(
                    e,
                    FormatError::PayloadTooLarge {
                        length: 5000,
                        limit: 4096,
                        ..
                    }
                )
            }),
        ),
        (
            "user headers over the limit",
            Box::new(|| {
                let mut builder = cairn_engine::format::BatchBuilder::new(1);
                builder.push(1, 0, b"x", &[0u8; 17]);
                builder.build()
            }),
            Box::new(|e| {
                matches!(
                    e,
                    FormatError::UserHeadersTooLarge {
                        length: 17,
                        limit: 16,
                        ..
                    }
                )
            }),
        ),
        (
            "too many messages",
            Box::new(|| batch(52, 21, 1)),
            Box::new(|e| {
                matches!(
                    e,
                    FormatError::TooManyMessages {
                        count: 21,
                        limit: 20
                    }
                )
            }),
        ),
        (
            "batch over the size limit",
            Box::new(|| batch(53, 20, 4000)),
            Box::new(|e| matches!(e, FormatError::BatchTooLarge { limit: 65536, .. })),
        ),
        (
            "no messages",
            Box::new(|| cairn_engine::format::BatchBuilder::new(1).build()),
            Box::new(|e| matches!(e, FormatError::Empty)),
        ),
        (
            "shorter than a header",
            Box::new(move || {
                let mut b = good();
                b.truncate(100);
                b
            }),
            Box::new(|e| matches!(e, FormatError::TooShort { .. })),
        ),
    ];
    for (name, make, expected) in &cases {
        match partition.append_group(vec![make()]).pop().unwrap() {
            Err(PartitionError::InvalidBatch(error)) => {
                assert!(expected(&error), "{name}: got {error:?}")
            }
            other => panic!("{name}: expected a rejection, got {other:?}"),
        }
        assert_eq!(
            partition.next_offset().unwrap(),
            next,
            "{name}: offsets moved"
        );
    }
    partition.close().unwrap();
    assert_eq!(snapshot(&dir), before, "rejected input changed the files");
}

#[test]
fn a_persist_syncs_the_active_index_once_the_log_runs_a_mebibyte_past_its_last_sync() {
    let (_tmp, dir) = scratch_dir();
    let counting = CountingDisk::default();
    let env = env_on(counting.clone());
    let segment_size = 64 * 1024 * 1024;
    let one_segment = TopicConfig {
        segment_size,
        ..config(Durability::Persisted)
    };
    let mut partition = create(&env, &dir, one_segment);
    counting.syncs.lock().unwrap().clear();
    // Four persists of ~0.7 MB each: the index is due at the 2nd (1.4 MB since its last
    // sync, at 0) and the 4th (1.4 MB since the 2nd), not at the 1st or the 3rd.
    let mut index_syncs = Vec::new();
    for seed in 0..4 {
        let ack = partition.append_group(vec![batch(seed, 70, 10_000)]);
        assert!(ack[0].as_ref().unwrap().durable);
        let syncs = counting.syncs.lock().unwrap().clone();
        let index = syncs
            .iter()
            .filter(|(p, _)| p.ends_with("00000000000000000000.index"))
            .map(|(_, n)| *n)
            .sum::<usize>();
        index_syncs.push(index);
    }
    assert_eq!(
        index_syncs,
        [0, 1, 1, 2],
        "{:?}",
        counting.syncs.lock().unwrap()
    );
    partition.close().unwrap();
}

#[test]
fn many_persisted_appends_share_one_sync_per_file() {
    let (_tmp, dir) = scratch_dir();
    let counting = CountingDisk::default();
    let env = env_on(counting.clone());
    let mut partition = create(&env, &dir, config(Durability::Persisted));
    counting.syncs.lock().unwrap().clear();
    counting.dir_syncs.lock().unwrap().clear();

    let acks = partition.append_group((0..50).map(|seed| batch(seed, 3, 200)).collect());
    assert_eq!(acks.len(), 50);
    let mut expected_offset = 0;
    for ack in acks {
        let ack = ack.unwrap();
        assert!(ack.durable && ack.requires_persist);
        assert_eq!(ack.base_offset, expected_offset);
        expected_offset += 3;
    }
    let syncs = counting.syncs.lock().unwrap().clone();
    let count = |name: &str| {
        syncs
            .iter()
            .filter(|(p, _)| p.ends_with(name))
            .map(|(_, n)| *n)
            .sum::<usize>()
    };
    assert_eq!(count("00000000000000000000.log"), 1, "{syncs:?}");
    // The active index is a hint recovery verifies: synced every 1 MiB of log, not per persist.
    assert_eq!(count("00000000000000000000.index"), 0, "{syncs:?}");
    assert_eq!(
        count("superblock.a") + count("superblock.b"),
        1,
        "{syncs:?}"
    );
    assert_eq!(
        counting.all_dir_syncs(),
        0,
        "no new file, no directory sync"
    );
    let point = partition.durable_point().unwrap();
    assert_eq!(point.next_offset, 150);

    // A persist with nothing new costs nothing.
    counting.syncs.lock().unwrap().clear();
    partition.persist().unwrap();
    assert!(counting.syncs.lock().unwrap().is_empty());
}

/// A record goes through the slot files kept open with the active segment's files: once
/// open, persists open nothing, and a rotation carries them to the new active segment.
#[test]
fn persists_write_their_records_through_slot_files_kept_open() {
    let (_tmp, dir) = scratch_dir();
    let counting = CountingDisk::default();
    let env = env_on(counting.clone());
    let small_segments = TopicConfig {
        segment_size: 1024 * 1024,
        ..config(Durability::Persisted)
    };
    let mut partition = create(&env, &dir, small_segments);
    let opened = |counting: &CountingDisk| counting.opens_of("superblock.");
    let persist = |partition: &mut Partition, seed: u64| {
        let acks = partition.append_group(vec![batch(seed, 1, 40_000)]);
        assert!(acks.into_iter().all(|a| a.unwrap().durable));
    };
    persist(&mut partition, 0);
    persist(&mut partition, 1);
    let warm = opened(&counting);
    for seed in 2..40 {
        persist(&mut partition, seed);
    }
    assert_eq!(opened(&counting), warm, "38 persists open no slot file");
    assert!(
        counting.syncs_of("superblock.") >= 40,
        "each persist recorded"
    );
    let segments = logs(&dir).len();
    for seed in 40..100 {
        persist(&mut partition, seed);
    }
    assert!(logs(&dir).len() > segments, "segments rotated");
    assert_eq!(
        opened(&counting),
        warm,
        "a rotation keeps the slot files open"
    );
    // The node's path: the record as a plan, written by a job through the kept file.
    for seed in 100..110 {
        partition.append(batch(seed, 1, 100)).unwrap();
        let synced = partition.persist_log().unwrap();
        let plan = partition.plan_record(synced).unwrap().expect("a record");
        let written = std::thread::spawn(move || plan.write().map(|()| plan));
        let plan = written.join().unwrap().expect("written");
        partition.recorded(Ok(())).unwrap();
        assert_eq!(partition.durable_point().unwrap(), plan.durable());
    }
    assert_eq!(opened(&counting), warm, "planned records open nothing");
    drop(partition);
    let opened = open(&env, &dir, small_segments);
    assert_eq!(opened.partition.next_offset().unwrap(), 110);
}

#[test]
fn replicated_appends_wait_for_thresholds_and_never_sync() {
    let (_tmp, dir) = scratch_dir();
    let counting = CountingDisk::default();
    let env = env_on(counting.clone());
    let mut cfg = config(Durability::Replicated);
    cfg.messages_required_to_save = 10;
    let mut partition = create(&env, &dir, cfg);
    counting.syncs.lock().unwrap().clear();
    let log = dir.join("00000000000000000000.log");
    for seed in 0..3 {
        let ack = partition.append(batch(seed, 3, 10)).unwrap();
        assert!(!ack.durable && !ack.requires_persist);
    }
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        0,
        "9 messages: below the threshold"
    );
    // Unflushed messages are served from the journal.
    assert_eq!(read_all(&mut partition, 100).len(), 9);
    partition.append(batch(3, 3, 10)).unwrap();
    assert!(
        std::fs::metadata(&log).unwrap().len() > 0,
        "12 messages: flushed"
    );
    assert!(
        counting.syncs.lock().unwrap().is_empty(),
        "replicated flushes do not sync"
    );
    assert_eq!(read_all(&mut partition, 5).len(), 12);
}

#[test]
fn persisted_acks_survive_a_crash_and_replicated_loses_only_the_unflushed_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let env = real_env();
    // persisted: crash (drop without close) right after the acks.
    let dir = tmp.path().join("persisted");
    let mut partition = create(&env, &dir, config(Durability::Persisted));
    let mut acked = 0;
    for seed in 0..20 {
        let ack = append_acked(&mut partition, batch(seed, 5, 700));
        assert!(ack.durable);
        acked += 5;
    }
    drop(partition);
    let mut reopened = open(&env, &dir, config(Durability::Persisted)).partition;
    assert_eq!(read_all(&mut reopened, 1000).len(), acked);

    // replicated: a threshold flush reached the file, the rest stayed in memory.
    let dir = tmp.path().join("replicated");
    let mut cfg = config(Durability::Replicated);
    cfg.messages_required_to_save = 50;
    let mut partition = create(&env, &dir, cfg);
    for seed in 0..12 {
        partition.append(batch(seed, 5, 700)).unwrap(); // flush at 50; the last 10 stay journaled
    }
    drop(partition);
    let opened = open(&env, &dir, cfg);
    assert_eq!(opened.plan.outcomes(), vec![Outcome::DurableEndAdvanced]);
    let mut reopened = opened.partition;
    let kept = read_all(&mut reopened, 1000);
    assert_eq!(kept.len(), 50, "flushed messages survive a process crash");
    // Offsets stay gapless after the lost suffix.
    let ack = reopened.append(batch(99, 1, 1)).unwrap();
    assert_eq!(ack.base_offset, 50);
}

#[test]
fn segments_rotate_after_the_crossing_batch_and_every_poll_kind_works() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let mut partition = create(&env, &dir, config(Durability::Persisted));
    let mut timestamps = Vec::new();
    for seed in 0..40 {
        let ack = append_acked(&mut partition, batch(seed, 10, 9000));
        let polled = partition
            .poll(PollFrom::Offset(ack.base_offset), 1)
            .unwrap();
        timestamps.push(
            BatchHeader::decode(&polled.batches[0])
                .unwrap()
                .base_timestamp,
        );
    }
    let starts = partition.segment_starts().unwrap();
    assert!(starts.len() >= 3, "{starts:?}");
    // Sealed segments hold whole batches and are at least segment_size (soft limit).
    for log in &logs(&dir)[..starts.len() - 1] {
        let len = std::fs::metadata(log).unwrap().len();
        assert!(
            (1024 * 1024..1024 * 1024 + 100_000).contains(&len),
            "{log:?}: {len}"
        );
    }
    // Offset: slices inside a batch.
    let polled = partition.poll(PollFrom::Offset(13), 4).unwrap();
    let got: Vec<u64> = messages(&polled.batches).iter().map(|m| m.0).collect();
    assert_eq!(got, vec![13, 14, 15, 16]);
    assert_eq!(polled.current_offset, Some(399));
    // Across a segment boundary.
    let boundary = starts[1];
    let polled = partition.poll(PollFrom::Offset(boundary - 2), 5).unwrap();
    let got: Vec<u64> = messages(&polled.batches).iter().map(|m| m.0).collect();
    assert_eq!(got, (boundary - 2..boundary + 3).collect::<Vec<_>>());
    // First and Last.
    let first: Vec<u64> = messages(&partition.poll(PollFrom::First, 3).unwrap().batches)
        .iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(first, vec![0, 1, 2]);
    let last: Vec<u64> = messages(&partition.poll(PollFrom::Last, 3).unwrap().batches)
        .iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(last, vec![397, 398, 399]);
    // Timestamp: the first batch at or after a batch's timestamp.
    let t = timestamps[25];
    let from_t = messages(&partition.poll(PollFrom::Timestamp(t), 1).unwrap().batches);
    let first_at_t = timestamps.iter().position(|&x| x >= t).unwrap() as u64 * 10;
    assert_eq!(from_t[0].0, first_at_t);
    assert!(partition
        .poll(PollFrom::Timestamp(u64::MAX), 5)
        .unwrap()
        .batches
        .is_empty());
    // Beyond the end: empty.
    assert!(partition
        .poll(PollFrom::Offset(400), 5)
        .unwrap()
        .batches
        .is_empty());
    assert!(matches!(
        partition.poll(PollFrom::First, 0),
        Err(PartitionError::ZeroCount)
    ));
    // Next, driven by stored offsets.
    let consumer = ConsumerId::consumer(4);
    let next: Vec<u64> = messages(&partition.poll(PollFrom::Next(consumer), 2).unwrap().batches)
        .iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(next, vec![0, 1]);
    partition.store_offset(consumer, 1).unwrap();
    let next: Vec<u64> = messages(&partition.poll(PollFrom::Next(consumer), 2).unwrap().batches)
        .iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(next, vec![2, 3]);
    partition.close().unwrap();
    let opened = open(&env, &dir, config(Durability::Persisted));
    assert_eq!(opened.plan.outcomes(), vec![Outcome::Clean]);
    assert_eq!(opened.partition.segment_starts().unwrap(), starts);
}

#[test]
fn consumer_offsets_store_get_delete_reject_and_report_damage() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let cfg = config(Durability::Persisted);
    let mut partition = create(&env, &dir, cfg);
    let (a, b, g) = (
        ConsumerId::consumer(1),
        ConsumerId::consumer(2),
        ConsumerId::group(1),
    );
    assert!(matches!(
        partition.store_offset(a, 0),
        Err(PartitionError::OffsetBeyondEnd {
            offset: 0,
            last: None
        })
    ));
    append_acked(&mut partition, batch(1, 10, 10));
    partition.store_offset(a, 5).unwrap();
    partition.store_offset(b, 9).unwrap();
    partition.store_offset(g, 3).unwrap();
    assert!(matches!(
        partition.store_offset(a, 10),
        Err(PartitionError::OffsetBeyondEnd {
            offset: 10,
            last: Some(9)
        })
    ));
    assert_eq!(partition.get_offset(a).unwrap(), Some(5));
    assert!(partition.delete_offset(b).unwrap());
    assert!(!partition.delete_offset(b).unwrap());
    assert_eq!(partition.get_offset(b).unwrap(), None);
    drop(partition); // crash: persisted offsets survive

    let partition = open(&env, &dir, cfg).partition;
    assert_eq!(partition.get_offset(a).unwrap(), Some(5));
    assert_eq!(partition.get_offset(g).unwrap(), Some(3));
    assert_eq!(partition.get_offset(b).unwrap(), None);
    drop(partition);

    flip_byte(&dir.join("offsets/consumers/1"), 17);
    let mut partition = open(&env, &dir, cfg).partition;
    match partition.get_offset(a) {
        Err(PartitionError::OffsetDamaged { consumer, path, .. }) => {
            assert_eq!(consumer, a);
            assert!(path.ends_with("offsets/consumers/1"));
        }
        other => panic!("damaged offset must be reported, got {other:?}"),
    }
    assert!(matches!(
        partition.poll(PollFrom::Next(a), 1),
        Err(PartitionError::OffsetDamaged { .. })
    ));
    assert_eq!(
        partition.get_offset(g).unwrap(),
        Some(3),
        "other consumers are unaffected"
    );
    // An explicit store replaces the damaged value.
    partition.store_offset(a, 2).unwrap();
    assert_eq!(partition.get_offset(a).unwrap(), Some(2));
}

#[test]
fn preallocated_segments_recover_clean() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let mut cfg = config(Durability::Persisted);
    cfg.preallocate_segments = true;
    let mut partition = create(&env, &dir, cfg);
    append_seeds(&mut partition, 0..30, 10, 9000);
    let written = read_all(&mut partition, 1000);
    drop(partition);
    let opened = open(&env, &dir, cfg);
    assert!(opened.partition.fence_reason().is_none());
    let mut partition = opened.partition;
    assert_eq!(read_all(&mut partition, 1000), written);
}

#[test]
fn offsets_lowered_after_a_lost_tail_stay_lowered_when_the_log_grows_again() {
    // Found by the simulator: the lowering was kept in memory only, so after the next restart
    // a consumer resumed past new messages that reused the lost offsets.
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let mut cfg = config(Durability::Replicated);
    cfg.consumer_offset_durability = Durability::Persisted;
    cfg.messages_required_to_save = 10;
    let consumer = ConsumerId::consumer(3);
    let mut partition = create(&env, &dir, cfg);
    partition.append(batch(1, 10, 10)).unwrap(); // flushed: offsets 0..10
    partition.append(batch(2, 5, 10)).unwrap(); // journal only: 10..15
    partition.store_offset(consumer, 13).unwrap();
    drop(partition); // crash: 10..15 are lost
    let mut partition = open(&env, &dir, cfg).partition;
    assert_eq!(partition.get_offset(consumer).unwrap(), Some(9));
    partition.append(batch(3, 10, 10)).unwrap(); // new messages at 10..20
    drop(partition);
    let mut partition = open(&env, &dir, cfg).partition;
    assert_eq!(
        partition.get_offset(consumer).unwrap(),
        Some(9),
        "the lowered offset was not written"
    );
    let next: Vec<u64> = messages(&partition.poll(PollFrom::Next(consumer), 3).unwrap().batches)
        .iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(next, vec![10, 11, 12]);
}

#[test]
fn invalid_topic_options_are_rejected_before_anything_is_written() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    for segment_size in [1024 * 1024 - 512, 1024 * 1024 + 1, 2 * 1024 * 1024 * 1024] {
        let mut cfg = config(Durability::Persisted);
        cfg.segment_size = segment_size;
        match Partition::create(&env, &dir, ID, cfg, PartitionSettings::default()) {
            Err(PartitionError::InvalidConfig(cairn_engine::config::ConfigError::SegmentSize(
                s,
            ))) => assert_eq!(s, segment_size),
            other => panic!("segment_size {segment_size}: {:?}", other.err()),
        }
    }
    let mut cfg = config(Durability::Persisted);
    cfg.messages_required_to_save = 0;
    assert!(matches!(
        Partition::create(&env, &dir, ID, cfg, PartitionSettings::default()),
        Err(PartitionError::InvalidConfig(_))
    ));
    assert!(!dir.exists(), "nothing was created");
}

#[test]
fn a_poll_stops_at_a_batch_damaged_on_disk_and_serves_the_valid_prefix() {
    for durability in [Durability::Persisted, Durability::Replicated] {
        let (_tmp, dir) = scratch_dir();
        let env = real_env();
        let mut cfg = config(durability);
        cfg.messages_required_to_save = 1; // replicated: every batch is flushed, none synced
        let mut partition = create(&env, &dir, cfg);
        append_seeds(&mut partition, 0..5, 4, 100);
        // Damage the third batch under the running partition (bit rot after the write).
        let log = dir.join("00000000000000000000.log");
        let third = batch_positions(&log)[2];
        flip_byte(&log, third + 300);
        let polled = partition.poll(PollFrom::First, 100).unwrap();
        let got: Vec<u64> = messages(&polled.batches).iter().map(|m| m.0).collect();
        assert_eq!(
            got,
            (0..8).collect::<Vec<_>>(),
            "{durability}: the two batches before the damage, nothing after"
        );
        match durability {
            // The damage lies below the durable end: acknowledging more writes would only
            // add to what the next boot refuses, so the partition fences now.
            Durability::Persisted => match partition.poll(PollFrom::Offset(9), 100) {
                Err(PartitionError::Fenced(FenceReason::CorruptBelowDurable {
                    log: path,
                    position,
                    ..
                })) => {
                    assert_eq!((path, position), (log.clone(), third));
                    assert!(matches!(
                        partition.append(batch(9, 1, 1)),
                        Err(PartitionError::Fenced(_))
                    ));
                }
                other => panic!("expected a fence, got {other:?}"),
            },
            // Above the durable end (flushed, never synced): a torn tail recovery will cut,
            // not a refusal. A poll starting inside the damaged batch gets nothing.
            Durability::Replicated => {
                let polled = partition.poll(PollFrom::Offset(9), 100).unwrap();
                assert!(polled.batches.is_empty());
                assert!(partition.fence_reason().is_none());
            }
        }
    }
}

/// A persist in two steps (the shard's pipeline): a log synced shows and promises nothing
/// until the record naming it is written; the next group's write and sync run while that
/// record is out; each record, written, moves the visible and durable end to what it names,
/// in order; and a record planned but never written (a crash) leaves the boot at the last
/// record written, with nothing it named lost.
#[test]
fn a_persist_in_two_steps_promises_nothing_until_its_record_is_written() {
    let (_tmp, dir) = scratch_dir();
    let env = real_env();
    let mut partition = create(&env, &dir, config(Durability::Persisted));
    partition.append(batch(1, 3, 10)).unwrap();
    let first = partition.persist_log().unwrap();
    assert_eq!(first.next_offset, 3);
    assert_eq!(
        partition.visible_next_offset().unwrap(),
        0,
        "synced, not recorded"
    );
    assert_eq!(partition.durable_point().unwrap().next_offset, 0);
    let plan = partition
        .plan_record(first)
        .unwrap()
        .expect("a record to write");
    assert!(partition.recording());
    assert_eq!(plan.durable(), first);
    // The next group: appended, flushed and synced while the first record is out.
    partition.append(batch(2, 2, 10)).unwrap();
    assert!(!partition.flush_may_seal());
    let second = partition.persist_log().unwrap();
    assert_eq!(second.next_offset, 5);
    assert_eq!(partition.visible_next_offset().unwrap(), 0);
    partition.recorded(plan.write()).unwrap();
    assert!(!partition.recording());
    assert_eq!(partition.durable_point().unwrap(), first);
    assert_eq!(partition.visible_next_offset().unwrap(), 3);
    let plan = partition
        .plan_record(second)
        .unwrap()
        .expect("a record to write");
    partition.recorded(plan.write()).unwrap();
    assert_eq!(partition.visible_next_offset().unwrap(), 5);
    assert!(
        partition.plan_record(second).unwrap().is_none(),
        "nothing new to record"
    );
    // A third group synced, its record planned and never written: the crash keeps the
    // second record's end, every message it named whole.
    partition.append(batch(3, 4, 10)).unwrap();
    let third = partition.persist_log().unwrap();
    let never_written = partition.plan_record(third).unwrap().expect("a record");
    drop(never_written);
    drop(partition);
    let mut reopened = open(&env, &dir, config(Durability::Persisted)).partition;
    let read = read_all(&mut reopened, 100);
    assert!(
        read.len() >= 5,
        "the recorded messages survive: {}",
        read.len()
    );
    let expected: Vec<u128> = (0..3)
        .map(|i| message_id(1, i))
        .chain((0..2).map(|i| message_id(2, i)))
        .collect();
    let ids: Vec<u128> = read.iter().take(5).map(|m| m.1).collect();
    assert_eq!(ids, expected);
}

/// Under `replicated` an offset stored again is rewritten in place (the same file, no temp
/// renamed over it), and a boot reads the last one stored; under `persisted` every store is
/// a durable replace (a new file each time). After a boot the first store replaces the file
/// the boot read (its value is on the device): only a file this process made is rewritten.
#[test]
fn a_replicated_offset_stored_again_is_rewritten_in_place() {
    use std::os::unix::fs::MetadataExt;
    for (durability, in_place) in [
        (Durability::Replicated, true),
        (Durability::Persisted, false),
    ] {
        let (_tmp, dir) = scratch_dir();
        let env = real_env();
        let mut partition = create(&env, &dir, config(durability));
        partition.append(batch(1, 10, 10)).unwrap();
        partition.persist().unwrap();
        let consumer = ConsumerId::consumer(7);
        let path = consumer.path(&dir);
        partition.store_offset(consumer, 3).unwrap();
        let first = std::fs::metadata(&path).unwrap().ino();
        partition.store_offset(consumer, 8).unwrap();
        let second = std::fs::metadata(&path).unwrap().ino();
        assert_eq!(first == second, in_place, "{durability:?}");
        assert!(!dir.join("offsets/consumers/7.tmp").exists());
        partition.close().unwrap();
        let mut reopened = open(&env, &dir, config(durability)).partition;
        assert_eq!(
            reopened.get_offset(consumer).unwrap(),
            Some(8),
            "{durability:?}"
        );
        reopened.store_offset(consumer, 9).unwrap();
        let third = std::fs::metadata(&path).unwrap().ino();
        assert_ne!(
            third, second,
            "the file a boot read is replaced, not overwritten"
        );
    }
}

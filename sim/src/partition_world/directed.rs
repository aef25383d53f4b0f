//! Directed scenarios: every fence reason and every repair of recovery reached on purpose,
//! by a scripted fault schedule on the simulated disk, with the oracle's checks running
//! throughout (a decision the scripted faults do not justify fails a scenario as surely as
//! a missed one). Seeds in `seeds/` drift away from what they once found as the engine
//! changes; these do not. `sim/tests/it/directed.rs` runs them; the canary test runs them under
//! every deliberate bug and expects the oracle to object.

use super::scenario::{topic, Scenario};
use super::World;
use crate::profile::PartitionProfile;
use crate::report::Violation;
use cairn_engine::config::Durability;
use cairn_engine::env::{Disk, OpenMode};
use cairn_engine::format::{stamp_batch, BatchBuilder};
use cairn_engine::partition::recovery::survey::INDEX_TEMP_SUFFIX;
use cairn_engine::partition::segment::{index_name, log_name};
use cairn_engine::partition::superblock::{Superblock, MIRROR_OFFSET, SUPERBLOCK_LEN};
use cairn_engine::partition::ConsumerId;
use cairn_faults::{DiskFaults, Fates, FaultKind, Scripted, SimDisk};
use std::io::IoSlice;
use std::path::{Path, PathBuf};

/// What a scenario returns: every decision recovery (or a runtime fence) took, in order.
pub type Outcome = Result<Vec<&'static str>, Violation>;

/// One directed scenario.
pub struct Directed {
    pub name: &'static str,
    /// Decisions it must reach (fence reasons or recovery actions).
    pub expect: &'static [&'static str],
    pub run: fn() -> Outcome,
}

fn one(durability: Durability) -> Scenario {
    Scenario::new(vec![topic(durability)])
}

/// A replicated topic that flushes only when asked (or at 1024 messages).
fn lazy_replicated() -> PartitionProfile {
    let mut spec = topic(Durability::Replicated);
    spec.config.messages_required_to_save = 1024;
    spec.config.size_of_messages_required_to_save = 1024 * 1024;
    spec
}

/// Rots both copies of the record in a slot file.
fn rot_slot(disk: &SimDisk, slot: &Path) {
    disk.flip_bit_at(slot, 20, 1);
    disk.flip_bit_at(slot, 4096 + 20, 1);
}

/// An operator's removal, durable: a later power loss does not bring the file back.
fn remove_durably(disk: &SimDisk, path: &Path) {
    disk.remove_file(path).expect("remove");
    disk.sync_dir(path.parent().expect("parent"))
        .expect("sync_dir");
}

/// The slot holding the older (or the newer) durable record of partition `p`.
fn slot(s: &Scenario, p: usize, newest: bool) -> PathBuf {
    let disk = s.disk();
    let sequence = |name: &str| {
        let bytes = disk.durable_contents(&s.file(p, name)).expect("slot");
        Superblock::decode(&bytes[..SUPERBLOCK_LEN])
            .expect("record")
            .sequence
    };
    let a_newer = sequence("superblock.a") > sequence("superblock.b");
    s.file(
        p,
        if a_newer == newest {
            "superblock.a"
        } else {
            "superblock.b"
        },
    )
}

// Fences ------------------------------------------------------------------------------------

fn both_slots_rotten_fence_as_no_superblock() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 2)?;
    let (a, b) = (s.file(0, "superblock.a"), s.file(0, "superblock.b"));
    s.restart_with(None, |disk| {
        rot_slot(disk, &a);
        rot_slot(disk, &b);
    })?;
    Ok(s.decision_log())
}

fn a_record_of_another_partition_in_a_slot_fences_as_identity() -> Outcome {
    let s = Scenario::new(vec![
        topic(Durability::Persisted),
        topic(Durability::Persisted),
    ]);
    s.produce(0, 2)?;
    s.produce(1, 2)?;
    s.disk().script(Scripted::MisdirectWrite {
        from: "partitions/1/superblock".into(),
        into: s.file(0, "superblock.a"),
    });
    s.produce(1, 1)?; // the read-back finds its record gone: partition 1 fences
    s.crash()?;
    Ok(s.decision_log())
}

fn a_slot_file_grown_by_a_stray_write_fences_as_misplaced() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 6)?;
    s.disk().script(Scripted::MisdirectWrite {
        from: log_name(0),
        into: s.file(0, "superblock.a"),
    });
    s.produce(0, 1)?;
    s.crash()?;
    Ok(s.decision_log())
}

fn a_record_in_the_slot_of_the_other_parity_fences_as_misplaced() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 2)?;
    s.disk().script(Scripted::MisdirectWrite {
        from: "superblock.a".into(),
        into: s.file(0, "superblock.b"),
    });
    s.produce(0, 2)?; // one of the two persists writes slot a
    s.crash()?;
    Ok(s.decision_log())
}

fn a_rotten_slot_and_a_torn_tail_fence_as_uncertain() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 3)?;
    let older = slot(&s, 0, false);
    s.disk().script(Scripted::CrashOn(log_name(0)));
    s.payload(8 * 1024);
    s.produce(0, 1)?; // a torn write above the durable end
    s.restart_with(None, |disk| rot_slot(disk, &older))?;
    Ok(s.decision_log())
}

/// Rotates partition 0 once while the partition directory's sync lies; returns the new
/// segment's start.
fn rotate_with_a_lying_dir_sync(s: &Scenario) -> Result<u64, Violation> {
    let before = s.segments(0);
    s.disk().script(Scripted::LieOnDirSync(s.dir(0)));
    s.rotate_to(0, before)?;
    Ok(*s
        .segment_starts(0)
        .last()
        .expect("a rotated partition has segments"))
}

fn an_index_whose_log_a_lying_dir_sync_lost_fences_as_missing_log() -> Outcome {
    let s = one(Durability::Persisted);
    let start = rotate_with_a_lying_dir_sync(&s)?;
    s.power_loss(Fates::DropOnly(vec![log_name(start)]))?;
    Ok(s.decision_log())
}

fn a_durable_segment_whose_names_were_lost_fences() -> Outcome {
    let s = one(Durability::Persisted);
    let start = rotate_with_a_lying_dir_sync(&s)?;
    s.power_loss(Fates::DropOnly(vec![log_name(start), index_name(start)]))?;
    Ok(s.decision_log())
}

fn a_middle_segment_lost_fences_as_a_chain_gap() -> Outcome {
    let s = one(Durability::Persisted);
    let middle = rotate_with_a_lying_dir_sync(&s)?;
    rotate_with_a_lying_dir_sync(&s)?;
    s.power_loss(Fates::DropOnly(vec![log_name(middle), index_name(middle)]))?;
    Ok(s.decision_log())
}

fn a_sealed_segment_starting_with_another_offset_fences_as_a_name_mismatch() -> Outcome {
    let s = one(Durability::Persisted);
    s.rotate_to(0, 1)?;
    // What a file restored or renamed from elsewhere looks like: a whole valid batch of this
    // partition, of another offset, where the segment's first batch belongs.
    let mut builder = BatchBuilder::new(1);
    builder.push(1 << 110, 0, b"from elsewhere", b"");
    let mut bytes = builder.build();
    stamp_batch(&mut bytes, 0, 5, 1);
    let sealed = s.file(0, &log_name(0));
    s.restart_with(None, |disk| disk.overwrite(&sealed, 0, &bytes))?;
    Ok(s.decision_log())
}

fn rot_in_a_sealed_segment_fences() -> Outcome {
    let s = one(Durability::Persisted);
    s.rotate_to(0, 1)?;
    let sealed = s.file(0, &log_name(0));
    s.restart_with(None, |disk| disk.flip_bit_at(&sealed, 5000, 2))?;
    Ok(s.decision_log())
}

fn rot_below_the_durable_end_fences() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 4)?;
    let at = s.durable(0).position / 2;
    let log = s.file(0, &log_name(0));
    s.restart_with(None, |disk| disk.flip_bit_at(&log, at, 5))?;
    Ok(s.decision_log())
}

fn a_lying_log_sync_then_a_power_loss_fences_as_shorter_than_durable() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 3)?;
    s.disk().script(Scripted::LieOnSync(log_name(0)));
    s.produce(0, 1)?;
    s.power_loss(Fates::DropAll)?;
    Ok(s.decision_log())
}

fn the_newest_record_survives_one_rotten_copy_and_still_proves_the_loss() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 3)?;
    s.disk().script(Scripted::LieOnSync(log_name(0)));
    s.produce(0, 1)?;
    let newest = slot(&s, 0, true);
    s.restart_with(Some(Fates::DropAll), |disk| {
        disk.flip_bit_at(&newest, 20, 3)
    })?;
    Ok(s.decision_log())
}

fn a_log_rewritten_with_other_batch_boundaries_fences_as_an_offset_mismatch() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 3)?;
    let durable = s.durable(0);
    let mut builder = BatchBuilder::new(1);
    for i in 0..durable.next_offset + 3 {
        builder.push(u128::from(i) | 1 << 100, 0, &[7u8; 400], b"");
    }
    let mut bytes = builder.build();
    stamp_batch(&mut bytes, 0, 0, 1);
    assert!(bytes.len() as u64 > durable.position);
    let log = s.file(0, &log_name(0));
    s.restart_with(None, |disk| disk.overwrite(&log, 0, &bytes))?;
    Ok(s.decision_log())
}

fn a_sealed_segment_whose_sealing_sync_lied_comes_back_empty_and_fences() -> Outcome {
    let s = Scenario::new(vec![topic(Durability::Replicated)]);
    s.disk().script(Scripted::LieOnSync(log_name(0)));
    s.rotate_to(0, 1)?;
    s.power_loss(Fates::DropAll)?;
    Ok(s.decision_log())
}

fn an_unreadable_sector_below_the_durable_end_fences() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 4)?;
    let at = s.durable(0).position / 2;
    let log = s.file(0, &log_name(0));
    s.restart_with(None, |disk| disk.add_bad_sector_at(&log, at))?;
    Ok(s.decision_log())
}

fn a_read_that_finds_damage_below_the_durable_end_fences_at_once() -> Outcome {
    let s = Scenario::new(vec![
        topic(Durability::Persisted),
        topic(Durability::Persisted),
    ]);
    s.produce(1, 6)?;
    s.produce(0, 1)?;
    s.disk().script(Scripted::MisdirectWrite {
        from: "partitions/0/00000000000000000000.log".into(),
        into: s.file(1, &log_name(0)),
    });
    s.produce(0, 1)?; // lands in partition 1's durable bytes
    s.poll(1, 0)?;
    Ok(s.decision_log())
}

fn a_non_atomic_device_tearing_the_durable_end_sector_fences() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 3)?;
    s.disk().set_faults(DiskFaults {
        non_atomic: true,
        ..DiskFaults::default()
    });
    // A flush that rewrites the page holding the durable end, never synced.
    s.operate(0, |w: &mut World, p| {
        let partition = w.models[p].partition.as_mut().expect("open");
        let mut builder = BatchBuilder::new(1);
        builder.push(1 << 120, 0, b"unsynced", b"");
        partition.append(builder.build()).expect("append");
        partition.flush().expect("flush");
        Ok(())
    })?;
    s.power_loss(Fates::TearAll)?;
    Ok(s.decision_log())
}

// Repairs -----------------------------------------------------------------------------------

/// Every repair is durable before recovery serves: a power loss that drops every unsynced
/// page and directory change right after a recovery leaves nothing to repair again. Returns
/// the decisions taken so far.
fn repairs_stick(s: &Scenario) -> Outcome {
    let before = s.decision_log();
    s.power_loss(Fates::DropAll)?;
    let after = s.decision_log();
    let again = &after[before.len()..];
    if !again.is_empty() {
        return Err(Violation {
            invariant: "recovery's repairs are durable",
            evidence: format!(
                "after {before:?}, a power loss dropping what was unsynced made recovery \
                 decide again: {again:?}"
            ),
        });
    }
    Ok(before)
}

fn a_failed_fsync_is_learned_from_the_device_and_cut() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 2)?;
    s.disk().script(Scripted::FailSync(log_name(0)));
    s.produce(0, 1)?; // the partition fences: the bytes stay cached, clean
    s.crash()?;
    repairs_stick(&s)
}

/// Flushed batches above the durable end reach the device (the kernel wrote the pages back),
/// and a sector among them goes bad while the node is down: recovery cuts the log there,
/// and the cut's sync fails (EIO), so recovery fails. The retry in the same boot finds the
/// log already cut in the cache, with nothing left to repair, though the cut is not
/// durable: recovery syncs the last log every boot, so the power loss that follows does not
/// bring the cut batches back above the durable end (where they would be read as new).
fn a_cut_whose_sync_failed_is_made_durable_by_the_retry() -> Outcome {
    let s = one(Durability::Replicated);
    s.produce(0, 2)?;
    s.operate(0, World::persist)?;
    s.produce(0, 3)?; // flushed, never synced by the engine
    let durable = s.durable(0).position;
    let log = s.file(0, &log_name(0));
    s.disk()
        .open(&log, OpenMode::ReadWrite)
        .and_then(|f| f.sync_data())
        .expect("the kernel's write-back");
    s.restart_with(None, |disk| {
        disk.add_bad_sector_at(&log, durable + 600);
        disk.script(Scripted::FailSync(log_name(0)));
    })?;
    let failed = s.world().models[0].fenced.is_none() && !s.world().is_open(0);
    assert!(failed, "the first recovery failed at its sync");
    let retried = s.world().recover(0);
    s.checked(retried)?;
    assert!(s.world().is_open(0), "the retry recovered");
    s.power_loss(Fates::DropAll)?;
    Ok(s.decision_log())
}

fn a_torn_write_above_the_durable_end_is_cut() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 2)?;
    s.disk().script(Scripted::CrashOn(log_name(0)));
    s.payload(8 * 1024);
    s.produce(0, 1)?;
    s.crash()?;
    repairs_stick(&s)
}

fn an_unreadable_sector_above_the_durable_end_is_cut() -> Outcome {
    let s = Scenario::new(vec![topic(Durability::Replicated)]);
    s.produce(0, 2)?;
    s.operate(0, World::persist)?;
    s.produce(0, 3)?; // flushed, never synced
    let durable = s.durable(0).position;
    let log = s.file(0, &log_name(0));
    s.restart_with(None, |disk| disk.add_bad_sector_at(&log, durable + 600))?;
    repairs_stick(&s)
}

fn valid_flushed_batches_are_synced_and_recorded() -> Outcome {
    let s = one(Durability::Replicated);
    s.produce(0, 3)?;
    s.crash()?;
    // The advance was synced: a power loss now takes nothing it recorded.
    s.power_loss(Fates::DropAll)?;
    repairs_stick(&s)
}

/// A replicated partition whose sealing sync lied and whose record naming the next segment
/// failed: after a power loss the next segment lies after a gap. Returns its start.
fn segment_after_a_lost_seal(s: &Scenario) -> Result<u64, Violation> {
    let disk = s.disk();
    disk.script(Scripted::LieOnSync(log_name(0)));
    disk.script(Scripted::FailSync("superblock".into()));
    s.payload(64 * 1024);
    s.repeat_until(
        "a failed superblock sync",
        |s| s.disk().any_record(|r| r.kind == FaultKind::SyncError),
        |s| s.produce(0, 1),
    )?;
    let w = s.world();
    let next = w
        .disk
        .paths_under(&w.models[0].dir)
        .iter()
        .filter_map(|p| {
            p.file_name()?
                .to_str()?
                .strip_suffix(".log")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .unwrap();
    assert!(next > 0, "the rotation created the next segment");
    Ok(next)
}

fn a_segment_after_a_gap_above_the_durable_end_is_removed() -> Outcome {
    let s = one(Durability::Replicated);
    segment_after_a_lost_seal(&s)?;
    s.power_loss(Fates::DropAll)?;
    repairs_stick(&s)
}

fn a_crash_between_removing_a_log_and_its_index_leaves_a_stray_index_that_is_removed() -> Outcome {
    let s = one(Durability::Replicated);
    let index = index_name(segment_after_a_lost_seal(&s)?);
    s.restart_with(Some(Fates::DropAll), |disk| {
        disk.script(Scripted::CrashOn(index.clone()))
    })?;
    assert!(s.disk().is_crashed(), "the crash struck inside the removal");
    s.crash()?;
    repairs_stick(&s)
}

fn a_partition_whose_empty_files_vanished_gets_them_back() -> Outcome {
    let s = one(Durability::Persisted);
    let (log, index) = (s.file(0, &log_name(0)), s.file(0, &index_name(0)));
    s.restart_with(None, |disk| {
        remove_durably(disk, &log);
        remove_durably(disk, &index);
    })?;
    repairs_stick(&s)
}

fn missing_offsets_directories_are_created() -> Outcome {
    let s = one(Durability::Persisted);
    let offsets = s.file(0, "offsets");
    s.restart_with(None, |disk| {
        disk.remove_dir_all(&offsets).unwrap();
        disk.sync_dir(offsets.parent().unwrap()).unwrap();
    })?;
    repairs_stick(&s)
}

fn an_interrupted_offset_store_leaves_a_temp_file_that_is_removed() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 2)?;
    s.disk()
        .script(Scripted::CrashAfterWrite("offsets/".into()));
    s.repeat_until(
        "a crash inside an offset store",
        |s| s.disk().is_crashed(),
        |s| s.operate(0, World::store_offset),
    )?;
    s.crash()?;
    repairs_stick(&s)
}

/// Flips bit `bit` of byte `position` of `path` as the page cache holds it (an active
/// index: a persist syncs only the log, so its bytes may be cached and nowhere else), in
/// every layer.
fn flip_cached_bit(disk: &SimDisk, path: &Path, position: u64, bit: u8) {
    let cached = disk.contents(path).expect("the file exists");
    let byte = cached[position as usize] ^ (1 << bit);
    disk.overwrite(path, position, &[byte]);
}

fn a_divergent_or_missing_index_is_rebuilt() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 4)?;
    let index = s.file(0, &index_name(0));
    // Entry 1's position: an index that kept it would send reads into the middle of a batch.
    s.restart_with(None, |disk| flip_cached_bit(disk, &index, 24 + 16, 6))?;
    let second = *s.world().models[0]
        .batches
        .keys()
        .nth(1)
        .expect("two batches");
    s.poll(0, second)?;
    s.restart_with(None, |disk| remove_durably(disk, &index))?;
    repairs_stick(&s)
}

fn an_interrupted_index_rebuild_leaves_a_temp_that_is_removed_and_other_files_are_kept() -> Outcome
{
    let s = one(Durability::Persisted);
    s.produce(0, 4)?;
    let index = s.file(0, &index_name(0));
    let notes = s.file(0, "notes.txt");
    s.disk()
        .script(Scripted::CrashAfterWrite(INDEX_TEMP_SUFFIX.into()));
    s.restart_with(None, |disk| {
        flip_cached_bit(disk, &index, 24 + 16, 6);
        // An operator's file in the partition directory: recovery notes it, never removes it.
        let file = disk.open(&notes, OpenMode::CreateNew).expect("notes");
        file.write_all_at(&[IoSlice::new(b"kept")], 0)
            .expect("write");
        file.sync_data().expect("sync");
        disk.sync_dir(notes.parent().expect("dir"))
            .expect("sync_dir");
    })?;
    if !s.disk().is_crashed() {
        return Err(Violation {
            invariant: "directed script",
            evidence: "the crash did not strike the index rebuild".into(),
        });
    }
    s.crash()?;
    let decisions = repairs_stick(&s)?;
    if s.disk().contents(&notes).is_none() {
        return Err(Violation {
            invariant: "4 justified decisions",
            evidence: format!(
                "recovery removed {}, a file it does not own",
                notes.display()
            ),
        });
    }
    Ok(decisions)
}

fn a_torn_index_entry_is_rewritten() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 4)?;
    let index = s.file(0, &index_name(0));
    // A crash while an entry was appended: part of it reached the device.
    s.restart_with(None, |disk| {
        let file = disk
            .open(&index, cairn_engine::env::OpenMode::ReadWrite)
            .expect("index");
        let len = file.len().expect("len");
        assert!(len >= 16, "the index holds an entry");
        file.set_len(len - 5).expect("cut");
        file.sync_data().expect("sync");
    })?;
    repairs_stick(&s)
}

fn an_offset_beyond_a_lost_tail_is_lowered_and_one_of_an_empty_log_deleted() -> Outcome {
    let s = Scenario::new(vec![lazy_replicated()]);
    s.produce(0, 2)?;
    s.operate(0, World::persist)?;
    s.produce(0, 2)?; // journaled only
    let last = s.visible(0) - 1;
    let consumer = ConsumerId::consumer(0);
    s.operate(0, |w: &mut World, p| {
        let model = &mut w.models[p];
        model
            .partition
            .as_mut()
            .unwrap()
            .store_offset(consumer, last)
            .expect("store");
        model.offset_stored(consumer, Some(last), true);
        Ok(())
    })?;
    s.crash()?;

    let mut decisions = s.decision_log();
    let s = Scenario::new(vec![lazy_replicated()]);
    s.produce(0, 1)?; // journaled only
    s.operate(0, |w: &mut World, p| {
        let model = &mut w.models[p];
        model
            .partition
            .as_mut()
            .unwrap()
            .store_offset(consumer, 0)
            .expect("store");
        model.offset_stored(consumer, Some(0), true);
        Ok(())
    })?;
    s.crash()?;
    decisions.extend(s.decision_log());
    Ok(decisions)
}

fn a_damaged_replicated_offset_is_dropped() -> Outcome {
    let s = one(Durability::Replicated);
    s.produce(0, 2)?;
    let consumer = ConsumerId::consumer(1);
    s.operate(0, |w: &mut World, p| {
        let model = &mut w.models[p];
        model
            .partition
            .as_mut()
            .unwrap()
            .store_offset(consumer, 1)
            .expect("store");
        model.offset_stored(consumer, Some(1), true);
        Ok(())
    })?;
    s.operate(0, World::persist)?;
    let path = consumer.path(&s.dir(0));
    s.power_loss(Fates::KeepAll)?; // the store lands
    s.restart_with(None, |disk| disk.flip_bit_at(&path, 20, 4))?;
    repairs_stick(&s)
}

/// A real kernel writes dirty pages back on its own (the simulated disk only when synced):
/// a `replicated` offset's file holds an older value on the device when a store rewrites it
/// in place. A boot that served the newer value from the page cache must make it durable,
/// or a power loss brings the older value back.
fn a_replicated_offset_rewritten_in_place_and_served_by_a_boot_stays_served() -> Outcome {
    let s = one(Durability::Replicated);
    s.produce(0, 2)?;
    let consumer = ConsumerId::consumer(1);
    store(&s, consumer, 0)?;
    let path = consumer.path(&s.dir(0));
    let disk = s.disk();
    // The kernel's writeback of the new file and its name.
    disk.open(&path, OpenMode::ReadWrite)
        .and_then(|file| file.sync_data())
        .expect("writeback");
    disk.sync_dir(path.parent().expect("parent"))
        .expect("writeback");
    store(&s, consumer, 1)?; // in place: the device still holds 0
    s.crash()?; // served from the page cache
    s.power_loss(Fates::DropAll)?;
    Ok(s.decision_log())
}

fn a_rotten_or_missing_older_slot_is_rewritten() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 2)?;
    let older = slot(&s, 0, false);
    s.restart_with(None, |disk| rot_slot(disk, &older))?;
    repairs_stick(&s)?;
    let older = slot(&s, 0, false);
    s.restart_with(None, |disk| remove_durably(disk, &older))?;
    repairs_stick(&s)
}

fn a_newest_record_left_in_one_copy_is_written_again_and_its_bad_sector_heals() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 2)?;
    let newest = slot(&s, 0, true);
    s.restart_with(None, |disk| disk.add_bad_sector_at(&newest, MIRROR_OFFSET))?;
    let decided = repairs_stick(&s)?;
    // Later records write that slot again, both pages whole: the bad sector is rewritten,
    // so a second one under the first copy cannot erase the newest record with it.
    s.produce(0, 2)?;
    if !s.disk().bad_ranges(&newest).is_empty() {
        return Err(Violation {
            invariant: "a slot write rewrites every sector of both copies",
            evidence: format!(
                "{} still has unreadable sectors {:?} after being written again",
                newest.display(),
                s.disk().bad_ranges(&newest)
            ),
        });
    }
    Ok(decided)
}

fn a_trusted_record_still_in_the_page_cache_is_synced_before_recovery_serves() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 3)?;
    let disk = s.disk();
    disk.script(Scripted::LieOnSync(log_name(0)));
    disk.script(Scripted::CrashAfterWrite("superblock".into()));
    s.produce(0, 1)?;
    assert!(disk.is_crashed());
    // Recovery trusts the record in flight; without syncing it, a power loss would take it
    // and the lied log pages together, and the log would silently rewind. (Recovery's own
    // sync of the last log lies too: else it would make the pages durable after all.)
    disk.script(Scripted::LieOnSync(log_name(0)));
    s.crash()?;
    s.power_loss(Fates::DropAll)?;
    Ok(s.decision_log())
}

fn a_new_segment_lost_before_anything_in_it_was_durable_is_recreated() -> Outcome {
    let s = Scenario::new(vec![lazy_replicated()]);
    s.produce(0, 2)?;
    let start = rotate_with_a_lying_dir_sync(&s)?;
    // The rotation recorded the new segment with nothing durable in it; the older segment
    // keeps every durable message.
    s.power_loss(Fates::DropOnly(vec![log_name(start), index_name(start)]))?;
    repairs_stick(&s)
}

fn store(s: &Scenario, consumer: ConsumerId, offset: u64) -> Result<(), Violation> {
    s.operate(0, |w: &mut World, p| {
        let model = &mut w.models[p];
        let result = model
            .partition
            .as_mut()
            .unwrap()
            .store_offset(consumer, offset);
        model.offset_stored(consumer, Some(offset), result.is_ok());
        Ok(())
    })
}

fn the_oldest_segment_lost_after_retention_fences_as_log_start_missing() -> Outcome {
    let s = one(Durability::Persisted);
    let kept = rotate_with_a_lying_dir_sync(&s)?;
    // Every later directory sync lies too, so nothing makes the new segment's name durable.
    s.disk().script(Scripted::LieOnDirSync(s.dir(0)));
    s.rotate_to(0, 2)?;
    s.disk().script(Scripted::LieOnDirSync(s.dir(0)));
    s.operate(0, |w, p| w.delete_oldest(p, 1))?;
    // The segment the log now starts with loses its name: nothing else records it.
    s.power_loss(Fates::DropOnly(vec![log_name(kept), index_name(kept)]))?;
    Ok(s.decision_log())
}

fn a_stored_offset_whose_name_was_lost_fences_as_missing() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 2)?;
    let consumer = ConsumerId::consumer(3);
    let file = consumer.path(&s.dir(0));
    s.disk()
        .script(Scripted::LieOnDirSync(file.parent().unwrap().to_path_buf()));
    store(&s, consumer, 1)?;
    s.power_loss(Fates::DropOnly(vec!["consumers/3".into()]))?;
    Ok(s.decision_log())
}

fn a_deletion_interrupted_after_its_record_is_finished() -> Outcome {
    let s = one(Durability::Persisted);
    s.rotate_to(0, 2)?;
    s.disk()
        .script(Scripted::CrashAfterWrite("superblock".into()));
    s.operate(0, |w, p| w.delete_oldest(p, 2))?;
    assert!(
        s.disk().is_crashed(),
        "the crash struck the deletion's record"
    );
    s.crash()?;
    repairs_stick(&s)
}

fn a_new_consumers_store_whose_record_was_lost_is_recorded() -> Outcome {
    let s = one(Durability::Persisted);
    s.produce(0, 2)?;
    s.disk()
        .script(Scripted::CrashAfterWrite("superblock".into()));
    store(&s, ConsumerId::group(4), 1)?;
    assert!(s.disk().is_crashed(), "the crash struck the store's record");
    s.power_loss(Fates::DropOnly(vec![
        "superblock.a".into(),
        "superblock.b".into(),
    ]))?;
    repairs_stick(&s)
}

/// Every directed scenario: its name, the decisions it must reach, and its body.
pub const SCENARIOS: &[Directed] = &[
    Directed {
        name: "both_slots_rotten_fence_as_no_superblock",
        expect: &["NoSuperblock"],
        run: both_slots_rotten_fence_as_no_superblock,
    },
    Directed {
        name: "a_record_of_another_partition_in_a_slot_fences_as_identity",
        expect: &["SuperblockIdentity"],
        run: a_record_of_another_partition_in_a_slot_fences_as_identity,
    },
    Directed {
        name: "a_slot_file_grown_by_a_stray_write_fences_as_misplaced",
        expect: &["SuperblockMisplaced"],
        run: a_slot_file_grown_by_a_stray_write_fences_as_misplaced,
    },
    Directed {
        name: "a_record_in_the_slot_of_the_other_parity_fences_as_misplaced",
        expect: &["SuperblockMisplaced"],
        run: a_record_in_the_slot_of_the_other_parity_fences_as_misplaced,
    },
    Directed {
        name: "a_rotten_slot_and_a_torn_tail_fence_as_uncertain",
        expect: &["DurableEndUncertain"],
        run: a_rotten_slot_and_a_torn_tail_fence_as_uncertain,
    },
    Directed {
        name: "an_index_whose_log_a_lying_dir_sync_lost_fences_as_missing_log",
        expect: &["MissingLog"],
        run: an_index_whose_log_a_lying_dir_sync_lost_fences_as_missing_log,
    },
    Directed {
        name: "a_durable_segment_whose_names_were_lost_fences",
        expect: &["DurableSegmentMissing"],
        run: a_durable_segment_whose_names_were_lost_fences,
    },
    Directed {
        name: "a_middle_segment_lost_fences_as_a_chain_gap",
        expect: &["ChainGap"],
        run: a_middle_segment_lost_fences_as_a_chain_gap,
    },
    Directed {
        name: "a_sealed_segment_starting_with_another_offset_fences_as_a_name_mismatch",
        expect: &["SegmentNameMismatch"],
        run: a_sealed_segment_starting_with_another_offset_fences_as_a_name_mismatch,
    },
    Directed {
        name: "rot_in_a_sealed_segment_fences",
        expect: &["SealedSegmentCorrupt"],
        run: rot_in_a_sealed_segment_fences,
    },
    Directed {
        name: "rot_below_the_durable_end_fences",
        expect: &["CorruptBelowDurable"],
        run: rot_below_the_durable_end_fences,
    },
    Directed {
        name: "a_lying_log_sync_then_a_power_loss_fences_as_shorter_than_durable",
        expect: &["LogShorterThanDurable"],
        run: a_lying_log_sync_then_a_power_loss_fences_as_shorter_than_durable,
    },
    Directed {
        name: "the_newest_record_survives_one_rotten_copy_and_still_proves_the_loss",
        expect: &["LogShorterThanDurable"],
        run: the_newest_record_survives_one_rotten_copy_and_still_proves_the_loss,
    },
    Directed {
        name: "a_log_rewritten_with_other_batch_boundaries_fences_as_an_offset_mismatch",
        expect: &["DurableOffsetMismatch"],
        run: a_log_rewritten_with_other_batch_boundaries_fences_as_an_offset_mismatch,
    },
    Directed {
        name: "a_sealed_segment_whose_sealing_sync_lied_comes_back_empty_and_fences",
        expect: &["EmptySealedSegment"],
        run: a_sealed_segment_whose_sealing_sync_lied_comes_back_empty_and_fences,
    },
    Directed {
        name: "an_unreadable_sector_below_the_durable_end_fences",
        expect: &["ReadFailed"],
        run: an_unreadable_sector_below_the_durable_end_fences,
    },
    Directed {
        name: "a_read_that_finds_damage_below_the_durable_end_fences_at_once",
        expect: &["CorruptBelowDurable"],
        run: a_read_that_finds_damage_below_the_durable_end_fences_at_once,
    },
    Directed {
        name: "a_poll_that_skips_to_a_rotten_batch_serves_none_of_it_and_fences",
        expect: &["CorruptBelowDurable"],
        run:
            super::directed_reads::a_poll_that_skips_to_a_rotten_batch_serves_none_of_it_and_fences,
    },
    Directed {
        name: "a_non_atomic_device_tearing_the_durable_end_sector_fences",
        expect: &["CorruptBelowDurable"],
        run: a_non_atomic_device_tearing_the_durable_end_sector_fences,
    },
    Directed {
        name: "a_failed_fsync_is_learned_from_the_device_and_cut",
        expect: &["IoFailed", "Truncate"],
        run: a_failed_fsync_is_learned_from_the_device_and_cut,
    },
    Directed {
        name: "a_torn_write_above_the_durable_end_is_cut",
        expect: &["Truncate"],
        run: a_torn_write_above_the_durable_end_is_cut,
    },
    Directed {
        name: "an_unreadable_sector_above_the_durable_end_is_cut",
        expect: &["Truncate"],
        run: an_unreadable_sector_above_the_durable_end_is_cut,
    },
    Directed {
        name: "valid_flushed_batches_are_synced_and_recorded",
        expect: &["AdvanceSuperblock"],
        run: valid_flushed_batches_are_synced_and_recorded,
    },
    Directed {
        name: "a_segment_after_a_gap_above_the_durable_end_is_removed",
        expect: &["RemoveSegment"],
        run: a_segment_after_a_gap_above_the_durable_end_is_removed,
    },
    Directed {
        name: "a_crash_between_removing_a_log_and_its_index_leaves_a_stray_index_that_is_removed",
        expect: &["RemoveStrayIndex"],
        run: a_crash_between_removing_a_log_and_its_index_leaves_a_stray_index_that_is_removed,
    },
    Directed {
        name: "a_partition_whose_empty_files_vanished_gets_them_back",
        expect: &["CreateSegment"],
        run: a_partition_whose_empty_files_vanished_gets_them_back,
    },
    Directed {
        name: "missing_offsets_directories_are_created",
        expect: &["CreateDir"],
        run: missing_offsets_directories_are_created,
    },
    Directed {
        name: "an_interrupted_offset_store_leaves_a_temp_file_that_is_removed",
        expect: &["RemoveTemp"],
        run: an_interrupted_offset_store_leaves_a_temp_file_that_is_removed,
    },
    Directed {
        name: "a_divergent_or_missing_index_is_rebuilt",
        expect: &["RewriteIndex"],
        run: a_divergent_or_missing_index_is_rebuilt,
    },
    Directed {
        name: "an_interrupted_index_rebuild_leaves_a_temp_that_is_removed_and_other_files_are_kept",
        expect: &["RewriteIndex", "RemoveTemp"],
        run: an_interrupted_index_rebuild_leaves_a_temp_that_is_removed_and_other_files_are_kept,
    },
    Directed {
        name: "a_cut_whose_sync_failed_is_made_durable_by_the_retry",
        // The failed attempt's cut is logged by no plan that served; the scenario asserts it.
        expect: &[],
        run: a_cut_whose_sync_failed_is_made_durable_by_the_retry,
    },
    Directed {
        name: "a_torn_index_entry_is_rewritten",
        expect: &["RewriteIndex"],
        run: a_torn_index_entry_is_rewritten,
    },
    Directed {
        name: "an_offset_beyond_a_lost_tail_is_lowered_and_one_of_an_empty_log_deleted",
        expect: &["LowerOffset", "DeleteOffset"],
        run: an_offset_beyond_a_lost_tail_is_lowered_and_one_of_an_empty_log_deleted,
    },
    Directed {
        name: "a_damaged_replicated_offset_is_dropped",
        expect: &["DropDamagedOffset"],
        run: a_damaged_replicated_offset_is_dropped,
    },
    Directed {
        name: "a_new_segment_lost_before_anything_in_it_was_durable_is_recreated",
        expect: &["CreateSegment"],
        run: a_new_segment_lost_before_anything_in_it_was_durable_is_recreated,
    },
    Directed {
        name: "the_oldest_segment_lost_after_retention_fences_as_log_start_missing",
        expect: &["LogStartMissing"],
        run: the_oldest_segment_lost_after_retention_fences_as_log_start_missing,
    },
    Directed {
        name: "a_stored_offset_whose_name_was_lost_fences_as_missing",
        expect: &["StoredOffsetsMissing"],
        run: a_stored_offset_whose_name_was_lost_fences_as_missing,
    },
    Directed {
        name: "a_deletion_interrupted_after_its_record_is_finished",
        expect: &["FinishDeletion"],
        run: a_deletion_interrupted_after_its_record_is_finished,
    },
    Directed {
        name: "a_new_consumers_store_whose_record_was_lost_is_recorded",
        expect: &["RecordOffsets"],
        run: a_new_consumers_store_whose_record_was_lost_is_recorded,
    },
    Directed {
        name: "a_replicated_offset_rewritten_in_place_and_served_by_a_boot_stays_served",
        expect: &[],
        run: a_replicated_offset_rewritten_in_place_and_served_by_a_boot_stays_served,
    },
    Directed {
        name: "a_rotten_or_missing_older_slot_is_rewritten",
        expect: &["RewriteSlot"],
        run: a_rotten_or_missing_older_slot_is_rewritten,
    },
    Directed {
        name: "a_newest_record_left_in_one_copy_is_written_again_and_its_bad_sector_heals",
        expect: &["RewriteSlot"],
        run: a_newest_record_left_in_one_copy_is_written_again_and_its_bad_sector_heals,
    },
    Directed {
        name: "a_trusted_record_still_in_the_page_cache_is_synced_before_recovery_serves",
        expect: &["LogShorterThanDurable"],
        run: a_trusted_record_still_in_the_page_cache_is_synced_before_recovery_serves,
    },
];

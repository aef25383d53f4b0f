//! The simulated disk's model, one behaviour per test: what survives a crash and a power loss,
//! Linux's fsync error semantics, directory changes, capacity, misdirected writes, damage that
//! knows whether it is still present, and what a real file system refuses.

use cairn_engine::env::{Disk, DiskFile, OpenMode};
use cairn_faults::{DiskFaults, Fates, FaultKind, Scripted, SimDisk, PAGE, SECTOR};
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

fn write(file: &dyn DiskFile, pos: u64, bytes: &[u8]) {
    file.write_all_at(&[IoSlice::new(bytes)], pos).unwrap();
}

fn read(file: &dyn DiskFile, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0).unwrap();
    buf
}

fn setup(seed: u64, faults: DiskFaults) -> (SimDisk, PathBuf) {
    let disk = SimDisk::new(seed, faults);
    let dir = PathBuf::from("/d");
    disk.create_dir_all(&dir).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    (disk, dir)
}

/// A durable, empty file `name` in `dir`.
fn durable_file(disk: &SimDisk, dir: &Path, name: &str) -> (Box<dyn DiskFile>, PathBuf) {
    let path = dir.join(name);
    let file = disk.open(&path, OpenMode::CreateNew).unwrap();
    disk.sync_dir(dir).unwrap();
    (file, path)
}

#[test]
fn synced_bytes_survive_power_loss_and_unsynced_ones_may_not() {
    let mut lost = false;
    for seed in 0..50 {
        let (disk, dir) = setup(seed, DiskFaults::default());
        let (file, path) = durable_file(&disk, &dir, "f");
        write(file.as_ref(), 0, &[1u8; 10_000]);
        file.sync_data().unwrap();
        assert_eq!(disk.promised_len(&path), 10_000);
        write(file.as_ref(), 10_000, &[2u8; 20_000]);
        disk.power_loss();
        let after = disk.contents(&path).expect("the synced name survives");
        assert_eq!(&after[..10_000], &[1u8; 10_000][..], "seed {seed}");
        lost |= after.len() < 30_000 || after[10_000..] != [2u8; 20_000][..];
    }
    assert!(
        lost,
        "some unsynced page is dropped or torn in some power loss"
    );
}

#[test]
fn a_process_crash_keeps_the_page_cache() {
    let (disk, dir) = setup(1, DiskFaults::default());
    let (file, path) = durable_file(&disk, &dir, "f");
    write(file.as_ref(), 0, b"unsynced");
    disk.process_crash();
    assert_eq!(disk.contents(&path).unwrap(), b"unsynced");
}

#[test]
fn a_torn_page_keeps_each_sector_old_or_new_on_an_atomic_device() {
    for seed in 0..40 {
        let (disk, dir) = setup(seed, DiskFaults::default());
        let (file, path) = durable_file(&disk, &dir, "f");
        write(file.as_ref(), 0, &[1u8; PAGE as usize]);
        file.sync_data().unwrap();
        write(file.as_ref(), 0, &[2u8; PAGE as usize]);
        disk.power_loss();
        let after = disk.contents(&path).unwrap();
        for sector in after.chunks(SECTOR as usize) {
            assert!(
                sector.iter().all(|&b| b == 1) || sector.iter().all(|&b| b == 2),
                "seed {seed}: a sector mixes old and new bytes"
            );
        }
        assert!(disk.live_damage(&path).is_empty());
    }
}

#[test]
fn a_non_atomic_device_garbles_whole_sectors_and_records_the_damage() {
    let faults = DiskFaults {
        non_atomic: true,
        ..DiskFaults::default()
    };
    let mut garbled = false;
    for seed in 0..60 {
        let (disk, dir) = setup(seed, faults);
        let (file, path) = durable_file(&disk, &dir, "f");
        write(file.as_ref(), 0, &[1u8; PAGE as usize]);
        file.sync_data().unwrap();
        write(file.as_ref(), 100, &[2u8; 10]); // changes bytes of sector 0 only
        disk.power_loss();
        let after = disk.contents(&path).unwrap();
        let damage = disk.live_damage(&path);
        let ok = |b: u8| b == 1 || b == 2;
        if after.iter().any(|&b| !ok(b)) {
            garbled = true;
            let tear = damage
                .iter()
                .find(|d| d.kind == FaultKind::NonAtomicTear)
                .expect("a garbled sector is recorded as damage");
            assert_eq!(tear.range.end - tear.range.start, SECTOR);
            let first_bad = after.iter().position(|&b| !ok(b)).unwrap() as u64;
            assert!(tear.range.contains(&first_bad));
        }
    }
    assert!(garbled, "some power loss garbles a sector");
}

#[test]
fn a_failed_fsync_keeps_new_bytes_cached_and_clean_as_linux_does() {
    let (disk, dir) = setup(3, DiskFaults::default());
    let (file, path) = durable_file(&disk, &dir, "f");
    write(file.as_ref(), 0, &[1u8; 100]);
    file.sync_data().unwrap();
    write(file.as_ref(), 100, &[2u8; 100]);
    disk.script(Scripted::FailSync("/d/f".into()));
    assert!(file.sync_data().is_err());
    assert_eq!(
        read(file.as_ref(), 200)[100..],
        [2u8; 100],
        "the cache keeps the new bytes"
    );
    file.sync_data()
        .expect("a later sync succeeds: the pages are clean");
    assert!(disk
        .live_damage(&path)
        .iter()
        .any(|d| d.kind == FaultKind::SyncError && d.range.contains(&150)));
    file.evict_cache().unwrap();
    assert_eq!(
        read(file.as_ref(), 200)[100..],
        [0u8; 100],
        "the device never got them"
    );
    // Rewriting and syncing the bytes heals it.
    write(file.as_ref(), 0, &[3u8; 200]);
    file.sync_data().unwrap();
    assert!(disk.live_damage(&path).is_empty());
}

#[test]
fn evicting_the_cache_reads_the_device_and_keeps_dirty_pages() {
    let (disk, dir) = setup(4, DiskFaults::default());
    let (file, _) = durable_file(&disk, &dir, "f");
    write(file.as_ref(), 0, &[5u8; 2 * PAGE as usize]);
    file.evict_cache().unwrap();
    assert_eq!(
        read(file.as_ref(), 2 * PAGE as usize),
        vec![5u8; 2 * PAGE as usize]
    );
}

#[test]
fn a_lying_sync_promises_nothing_and_its_lost_pages_are_damage() {
    let (disk, dir) = setup(5, DiskFaults::default());
    let (file, path) = durable_file(&disk, &dir, "f");
    write(file.as_ref(), 0, &[5u8; 100]);
    disk.script(Scripted::LieOnSync("/d/f".into()));
    file.sync_data().unwrap();
    assert_eq!(disk.promised_len(&path), 0);
    assert!(disk.has_lied_pages(&path));
    file.evict_cache().unwrap();
    assert_eq!(
        read(file.as_ref(), 100),
        vec![5u8; 100],
        "the device's cache holds them"
    );
    disk.set_fates(Fates::DropAll);
    disk.power_loss();
    assert!(disk
        .live_damage(&path)
        .iter()
        .any(|d| d.kind == FaultKind::LostSyncedPage && d.range.start == 0));
}

#[test]
fn a_power_loss_keeps_a_prefix_of_each_directorys_unsynced_changes() {
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..60 {
        let (disk, dir) = setup(seed, DiskFaults::default());
        for name in ["a", "b", "c"] {
            disk.open(&dir.join(name), OpenMode::CreateNew).unwrap();
        }
        disk.power_loss();
        let kept: Vec<bool> = ["a", "b", "c"]
            .iter()
            .map(|n| disk.exists(&dir.join(n)).unwrap())
            .collect();
        assert!(
            kept.windows(2).all(|w| w[0] || !w[1]),
            "seed {seed}: {kept:?} is not a prefix"
        );
        seen.insert(kept.iter().filter(|k| **k).count());
    }
    assert_eq!(seen.len(), 4, "every prefix length occurs: {seen:?}");
}

#[test]
fn a_rename_within_a_directory_persists_whole_or_not_at_all() {
    for seed in 0..40 {
        let (disk, dir) = setup(seed, DiskFaults::default());
        let (file, _) = durable_file(&disk, &dir, "old");
        file.sync_data().unwrap();
        disk.rename(&dir.join("old"), &dir.join("new")).unwrap();
        disk.power_loss();
        let (old, new) = (
            disk.exists(&dir.join("old")).unwrap(),
            disk.exists(&dir.join("new")).unwrap(),
        );
        assert!(old != new, "seed {seed}: old={old} new={new}");
    }
}

#[test]
fn a_lying_or_failing_dir_sync_leaves_entries_that_a_power_loss_can_undo() {
    let (disk, dir) = setup(6, DiskFaults::default());
    let path = dir.join("f");
    disk.open(&path, OpenMode::CreateNew).unwrap();
    disk.script(Scripted::LieOnDirSync(dir.clone()));
    disk.sync_dir(&dir).unwrap();
    disk.set_fates(Fates::DropAll);
    disk.power_loss();
    assert!(!disk.exists(&path).unwrap());
    assert_eq!(disk.lost_synced_names(&dir), vec![path.clone()]);

    let (disk, dir) = setup(7, DiskFaults::default());
    disk.set_faults(DiskFaults {
        dir_sync_error: Some(1.0),
        ..DiskFaults::default()
    });
    disk.open(&dir.join("g"), OpenMode::CreateNew).unwrap();
    assert!(disk.sync_dir(&dir).is_err());
    assert!(disk.any_record(|r| r.kind == FaultKind::DirSyncError));
}

#[test]
fn an_armed_crash_lands_the_write_in_flight_sector_by_sector_and_stops_the_node() {
    let (disk, dir) = setup(3, DiskFaults::default());
    let (file, path) = durable_file(&disk, &dir, "f");
    disk.arm_crash(0);
    assert!(file.write_all_at(&[IoSlice::new(&[9u8; 4000])], 0).is_err());
    assert!(disk.is_crashed());
    assert!(
        file.sync_data().is_err(),
        "every call fails while the node is down"
    );
    assert!(disk.any_record(|r| r.kind == FaultKind::TornWrite));
    disk.process_crash();
    let torn = disk.contents(&path).unwrap();
    for sector in torn.chunks(SECTOR as usize) {
        assert!(sector.iter().all(|&b| b == 9) || sector.iter().all(|&b| b == 0));
    }
}

#[test]
fn out_of_space_comes_from_writes_creation_and_preallocation_and_unlinking_frees_it() {
    let faults = DiskFaults {
        capacity: Some(3 * PAGE),
        ..DiskFaults::default()
    };
    let (disk, dir) = setup(2, faults);
    let full = |r: io::Result<()>| r.unwrap_err().kind() == io::ErrorKind::StorageFull;
    let (file, path) = durable_file(&disk, &dir, "f");
    write(file.as_ref(), 0, &[1u8; 2 * PAGE as usize]);
    assert!(full(file.write_all_at(
        &[IoSlice::new(&[1u8; 2 * PAGE as usize])],
        2 * PAGE
    )));
    assert!(full(file.preallocate(10 * PAGE).map(|_| ())));
    write(file.as_ref(), 2 * PAGE, &[1u8; PAGE as usize - 1]);
    assert!(full(
        disk.open(&dir.join("g"), OpenMode::CreateNew).map(|_| ())
    ));
    assert!(full(disk.create_dir_all(&dir.join("sub"))));
    disk.remove_file(&path).unwrap();
    disk.open(&dir.join("g"), OpenMode::CreateNew)
        .expect("unlinking freed the space");
}

#[test]
fn preallocation_reserves_space_that_writes_then_use() {
    let faults = DiskFaults {
        capacity: Some(4 * PAGE),
        ..DiskFaults::default()
    };
    let (disk, dir) = setup(2, faults);
    let (file, _) = durable_file(&disk, &dir, "f");
    assert!(file.preallocate(3 * PAGE).unwrap());
    let (other, _) = durable_file(&disk, &dir, "g");
    let other_write = other.write_all_at(&[IoSlice::new(&[1u8; 2 * PAGE as usize])], 0);
    assert_eq!(other_write.unwrap_err().kind(), io::ErrorKind::StorageFull);
    write(file.as_ref(), 0, &[1u8; 3 * PAGE as usize]);
}

#[test]
fn a_misdirected_write_can_land_in_another_file_and_damages_both() {
    let (disk, dir) = setup(8, DiskFaults::default());
    let (file, path) = durable_file(&disk, &dir, "f");
    let (other, other_path) = durable_file(&disk, &dir, "g");
    write(other.as_ref(), 0, &[7u8; 100]);
    disk.script(Scripted::MisdirectWrite {
        from: "/d/f".into(),
        into: other_path.clone(),
    });
    write(file.as_ref(), 0, &[1u8; 50]);
    assert_eq!(disk.contents(&path).unwrap(), Vec::<u8>::new());
    assert_eq!(&disk.contents(&other_path).unwrap()[..50], &[1u8; 50][..]);
    assert!(disk
        .live_damage(&other_path)
        .iter()
        .any(|d| d.kind == FaultKind::MisdirectedWrite));
    assert!(disk
        .live_damage(&path)
        .iter()
        .any(|d| d.kind == FaultKind::MisdirectedWrite));
    // Rewriting the intended bytes heals the file that missed them.
    write(file.as_ref(), 0, &[1u8; 50]);
    file.sync_data().unwrap();
    assert!(disk.live_damage(&path).is_empty());
}

/// A misdirected write landing past the end of the file it hits also makes the zeros up to
/// it: they are damage too (seed 0x5373933f: a sync then promised them as the file's bytes,
/// and recovery's cut through them looked unjustified).
#[test]
fn a_misdirected_write_past_the_end_damages_the_gap_it_makes() {
    let (disk, dir) = setup(10, DiskFaults::default());
    let (file, _) = durable_file(&disk, &dir, "f");
    let (other, other_path) = durable_file(&disk, &dir, "g");
    write(other.as_ref(), 0, &[7u8; 100]);
    disk.script(Scripted::MisdirectWrite {
        from: "/d/f".into(),
        into: other_path.clone(),
    });
    write(file.as_ref(), 1000, &[1u8; 50]);
    assert_eq!(disk.contents(&other_path).unwrap().len(), 1050);
    let damage = disk.live_damage(&other_path);
    assert!(
        damage
            .iter()
            .any(|d| d.kind == FaultKind::MisdirectedWrite && d.range == (100..1050)),
        "{damage:?}"
    );
}

#[test]
fn bad_sectors_fail_reads_until_rewritten_or_cut() {
    let (disk, dir) = setup(9, DiskFaults::default());
    let (file, path) = durable_file(&disk, &dir, "f");
    write(file.as_ref(), 0, &[1u8; 3 * SECTOR as usize]);
    disk.add_bad_sector_at(&path, SECTOR + 10);
    let mut buf = [0u8; 10];
    assert!(file.read_at(&mut buf, SECTOR).is_err());
    assert!(file.read_at(&mut buf, 0).is_ok());
    assert_eq!(disk.live_damage(&path)[0].range, SECTOR..2 * SECTOR);
    write(file.as_ref(), SECTOR, &[2u8; SECTOR as usize]);
    assert!(
        file.read_at(&mut buf, SECTOR).is_ok(),
        "a write remaps the sector"
    );
    disk.add_bad_sector_at(&path, 2 * SECTOR);
    file.set_len(2 * SECTOR).unwrap();
    assert!(disk.live_damage(&path).is_empty(), "cut away");
}

#[test]
fn a_bit_flip_is_damage_until_overwritten_and_synced() {
    let (disk, dir) = setup(10, DiskFaults::default());
    let (file, path) = durable_file(&disk, &dir, "f");
    write(file.as_ref(), 0, &[1u8; 100]);
    file.sync_data().unwrap();
    disk.flip_bit_at(&path, 40, 3);
    assert_eq!(read(file.as_ref(), 100)[40], 1 ^ 8);
    assert_eq!(disk.live_damage(&path)[0].kind, FaultKind::BitFlip);
    write(file.as_ref(), 0, &[1u8; 100]);
    assert!(
        !disk.live_damage(&path).is_empty(),
        "the durable bytes still hold it"
    );
    file.sync_data().unwrap();
    assert!(disk.live_damage(&path).is_empty());
    // Truncation below it clears it too.
    disk.flip_bit_at(&path, 90, 1);
    file.set_len(50).unwrap();
    file.sync_data().unwrap();
    assert!(disk.live_damage(&path).is_empty());
}

#[test]
fn what_a_real_file_system_refuses_is_refused() {
    let (disk, dir) = setup(11, DiskFaults::default());
    let kind = |r: io::Result<()>| r.unwrap_err().kind();
    assert_eq!(
        kind(disk.open(Path::new(""), OpenMode::CreateNew).map(|_| ())),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        kind(disk.create_dir_all(Path::new(""))),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        kind(
            disk.open(&dir.join("missing/f"), OpenMode::CreateNew)
                .map(|_| ())
        ),
        io::ErrorKind::NotFound
    );
    let (_, f) = durable_file(&disk, &dir, "f");
    assert_eq!(
        kind(disk.rename(&f, &dir.join("missing/g"))),
        io::ErrorKind::NotFound
    );
    assert_eq!(
        kind(disk.rename(&dir.join("nope"), &dir.join("g"))),
        io::ErrorKind::NotFound
    );
    assert!(disk.rename(&f, &dir).is_err(), "a file over a directory");
    assert!(disk.remove_dir_all(&f).is_err(), "not a directory");
    assert!(disk.read_dir(&f).is_err(), "not a directory");
    assert!(
        disk.open(&dir, OpenMode::Read).is_err(),
        "a directory is not a file"
    );
    assert!(
        disk.create_dir_all(&f.join("sub")).is_err(),
        "a file is in the way"
    );
    assert!(disk.remove_file(&dir).is_err(), "a directory");
    assert_eq!(
        kind(disk.remove_file(&dir.join("nope"))),
        io::ErrorKind::NotFound
    );
    assert_eq!(
        kind(disk.sync_dir(&dir.join("nope"))),
        io::ErrorKind::NotFound
    );
    assert!(disk.remove_dir_all(Path::new("/")).is_err());
}

/// A removed directory's unsynced entries go with it: a directory later created at the same
/// path never inherits them, at a power loss or at its own sync.
#[test]
fn a_directory_recreated_at_the_same_path_does_not_inherit_unsynced_entries() {
    for seed in 0..20 {
        let (disk, dir) = setup(seed, DiskFaults::default());
        let sub = dir.join("p");
        disk.create_dir_all(&sub).unwrap();
        disk.sync_dir(&dir).unwrap();
        let old = disk.open(&sub.join("old"), OpenMode::CreateNew).unwrap();
        write(old.as_ref(), 0, b"stale");
        old.sync_data().unwrap();
        drop(old);
        // The name "old" was never synced into `sub`.
        disk.remove_dir_all(&sub).unwrap();
        disk.sync_dir(&dir).unwrap();
        disk.create_dir_all(&sub).unwrap();
        disk.sync_dir(&dir).unwrap();
        if seed % 2 == 0 {
            disk.sync_dir(&sub).unwrap();
        }
        disk.set_fates(Fates::KeepAll);
        disk.power_loss();
        assert!(!disk.exists(&sub.join("old")).unwrap(), "seed {seed}");
        assert!(disk.exists(&sub).unwrap());
    }
}

/// A directory removed, made again at the same path before its parent was synced, and
/// filled and synced: the parent's sync makes the new directory durable with its own
/// entries, which the old directory's removal does not take away.
#[test]
fn a_directory_removed_and_made_again_keeps_its_new_entries() {
    let (disk, dir) = setup(3, DiskFaults::default());
    let sub = dir.join("p");
    disk.create_dir_all(&sub).unwrap();
    let (_, old) = durable_file(&disk, &sub, "f");
    disk.sync_dir(&dir).unwrap();
    disk.remove_dir_all(&sub).unwrap(); // not synced
    disk.create_dir_all(&sub).unwrap();
    let (file, new) = durable_file(&disk, &sub, "f");
    write(file.as_ref(), 0, b"new");
    file.sync_data().unwrap();
    disk.sync_dir(&dir).unwrap();
    assert_eq!(old, new);
    disk.set_fates(Fates::DropAll);
    disk.power_loss();
    let file = disk
        .open(&new, OpenMode::Read)
        .expect("the new entry survives");
    assert_eq!(read(file.as_ref(), 3), b"new");
}

/// A write that never landed is damage of the file it was meant for as long as its bytes
/// are missing, whatever else lands in that file and is lost again.
#[test]
fn bytes_that_never_landed_stay_damage_through_later_writes_and_power_loss() {
    for seed in 0..20 {
        let (disk, dir) = setup(seed, DiskFaults::default());
        let (other, other_path) = durable_file(&disk, &dir, "other");
        let (file, path) = durable_file(&disk, &dir, "f.tmp");
        file.set_len(0).unwrap();
        disk.script(Scripted::MisdirectWrite {
            from: "f.tmp".into(),
            into: other_path.clone(),
        });
        write(file.as_ref(), 0, &[9u8; 32]);
        file.sync_data().unwrap();
        let target = dir.join("f");
        disk.rename(&path, &target).unwrap();
        disk.sync_dir(&dir).unwrap();
        assert!(!disk.live_damage(&target).is_empty(), "seed {seed}: before");
        // Another file's write lands here instead, unsynced.
        disk.script(Scripted::MisdirectWrite {
            from: "other".into(),
            into: target.clone(),
        });
        write(other.as_ref(), 0, &[7u8; 100]);
        disk.power_loss();
        assert!(
            !disk.live_damage(&target).is_empty(),
            "seed {seed}: the 32 bytes meant for {} never landed",
            target.display()
        );
    }
}

#[test]
fn a_file_left_with_two_names_by_a_power_loss_is_counted_once_until_both_are_gone() {
    let (disk, a) = setup(3, DiskFaults::default());
    let b = PathBuf::from("/e");
    disk.create_dir_all(&b).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    let (file, old) = durable_file(&disk, &a, "f");
    write(file.as_ref(), 0, &[7u8; 3 * PAGE as usize]);
    file.sync_data().unwrap();
    drop(file);
    // Renamed across directories; only the new directory is synced, and the power loss
    // drops the old directory's unlink: both names survive, naming one file.
    let new = b.join("f");
    disk.rename(&old, &new).unwrap();
    disk.sync_dir(&b).unwrap();
    disk.set_fates(Fates::DropOnly(vec!["/d/f".into()]));
    disk.power_loss();
    assert!(disk.exists(&old).unwrap() && disk.exists(&new).unwrap());
    assert_eq!(disk.contents(&old), disk.contents(&new));
    let used = disk.used_bytes();
    assert_eq!(used, 3 * PAGE, "one file, counted once");
    // A write through either name is the one file's.
    let via_new = disk.open(&new, OpenMode::ReadWrite).unwrap();
    write(via_new.as_ref(), 0, &[9u8; 10]);
    assert_eq!(disk.contents(&old).unwrap()[..10], [9u8; 10]);
    disk.remove_file(&old).unwrap();
    assert_eq!(disk.used_bytes(), used, "still named by the other name");
    via_new.sync_data().unwrap();
    disk.remove_file(&new).unwrap();
    assert_eq!(disk.used_bytes(), 0, "no name reaches it");
}

//! Directed scenarios of the metadata plane's boot rules: the superblock slots, the
//! snapshot, and damage in the journal (below the durable end, above it, in a checkpoint's
//! leftovers) with the verdict each position gets.

use super::*;

/// The node crashes inside the directory work of a partition's removal, and rot then
/// strikes that op's journal entry: the entry lies below the durable end recorded before the
/// work began, so boot refuses. (Dropped as a torn tail, the op would be undone with its
/// work half done: a partition directory gone with no op that removed it.)
pub(super) fn rot_in_an_entry_whose_work_began_is_refused() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0004);
    s.with_persisted_topic(2)?;
    s.produce_n(4)?;
    let journal = metadata(cairn_engine::metadata::JOURNAL);
    let before = s.journal_len();
    lock(&s.world)
        .disk
        .script(cairn_faults::Scripted::CrashOn("partitions/1".into()));
    s.perform(AdminOp::DeletePartitions(0, 0, 1))?;
    assert!(
        lock(&s.world).disk.is_crashed(),
        "the removal's work crashed"
    );
    let after = s.journal_len();
    assert!(after > before, "the removal was journaled before its work");
    s.executor.kill_all();
    lock(&s.world)
        .disk
        .flip_bit_at(&journal, (before + after) / 2, 3);
    s.restart(false)?;
    Ok(s.decisions())
}

/// While the node is down, the mirror copy of the newest metadata superblock record rots:
/// boot trusts the record from its one good copy and writes it again (`RewriteSlot`), which
/// the oracle checks after the boot (the slot file holds one record twice).
pub(super) fn a_metadata_record_in_one_copy_is_written_again() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0007);
    s.with_persisted_topic(1)?;
    s.produce()?;
    s.executor.kill_all();
    {
        let w = lock(&s.world);
        let dir = Path::new(NODE_ROOT).join("metadata");
        let sequence = |name: &str| {
            let bytes = w.disk.contents(&dir.join(name)).expect("a slot file");
            let copy: [u8; cairn_engine::slots::RECORD_LEN] = bytes
                [..cairn_engine::slots::RECORD_LEN]
                .try_into()
                .expect("a record");
            cairn_engine::metadata::record::MetaRecord::decode(&copy).map_or(0, |r| r.sequence)
        };
        let newest = ["superblock.a", "superblock.b"]
            .into_iter()
            .max_by_key(|n| sequence(n))
            .expect("two slots");
        let mirror = cairn_engine::slots::MIRROR_OFFSET + 20;
        w.disk.flip_bit_at(&dir.join(newest), mirror, 2);
    }
    s.restart(false)?;
    Ok(s.decisions())
}

/// An operator restored a copy of one superblock slot file over the other while the node
/// was down: slot b holds a record whose sequence belongs in slot a. Boot refuses
/// (`SuperblockMisplaced`) rather than trust a file that is not what its name says.
pub(super) fn a_slot_holding_the_other_slots_record_refuses_boot() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0009);
    s.with_persisted_topic(1)?;
    s.produce()?;
    s.restart_after(false, |w| {
        let a = w.disk.contents(&metadata("superblock.a")).expect("slot a");
        w.disk.overwrite(&metadata("superblock.b"), 0, &a);
    })?;
    Ok(s.decisions())
}

/// Both copies of both superblock slots rot while the node is down: no record to trust,
/// though the journal holds ops, so boot refuses (`NoSuperblock`) instead of starting empty.
pub(super) fn every_superblock_copy_rotten_refuses_boot() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_000a);
    s.with_persisted_topic(1)?;
    s.produce()?;
    s.restart_after(false, |w| {
        for slot in ["superblock.a", "superblock.b"] {
            for copy in [0, cairn_engine::slots::MIRROR_OFFSET] {
                w.disk.flip_bit_at(&metadata(slot), copy + 20, 1);
            }
        }
    })?;
    Ok(s.decisions())
}

/// The records of two ops are lost at a power loss (their syncs lied); the journal kept
/// both entries, and rot then strikes the first. Damage above the durable end the surviving
/// record names is a torn tail only if nothing written after it follows; the second entry
/// was written after the first was durable (its commit number reaches it), so boot refuses
/// (`JournalInteriorCorruption`).
pub(super) fn rot_before_a_later_whole_entry_is_interior_corruption() -> Checked<Vec<&'static str>>
{
    let mut s = Scenario::new(0x4e0d_000b);
    s.with_persisted_topic(1)?;
    let journal = metadata(cairn_engine::metadata::JOURNAL);
    s.lie_on_metadata_records(2);
    let before = s.journal_len();
    s.perform(AdminOp::RenameStream(0, "renamed".into()))?;
    let first_end = s.journal_len();
    s.perform(AdminOp::RenameStream(0, "again".into()))?;
    assert!(s.journal_len() > first_end, "the second op was journaled");
    s.restart_after(true, |w| {
        w.disk.flip_bit_at(&journal, (before + first_end) / 2, 4);
    })?;
    Ok(s.decisions())
}

/// While the node is down, the last journal entry is replaced by another whole entry of the
/// same op number, parent and length (an operator's restore from another history): it is
/// not the op the superblock records, whose checksum it lacks, so boot refuses
/// (`JournalChainBroken`) rather than replay an op nobody was answered for.
pub(super) fn another_entry_at_the_durable_end_refuses_boot() -> Checked<Vec<&'static str>> {
    use cairn_engine::metadata::journal;
    let mut s = Scenario::new(0x4e0d_000d);
    s.with_persisted_topic(1)?;
    s.perform(AdminOp::RenameStream(0, "renamed".into()))?;
    s.restart_after(false, |w| {
        let path = metadata(cairn_engine::metadata::JOURNAL);
        let bytes = w.disk.contents(&path).expect("a journal");
        let last = journal::scan(&bytes, w.cluster)
            .entries
            .pop()
            .expect("the rename's entry");
        let mut body = last.body.clone();
        let at = body
            .windows(7)
            .position(|n| n == b"renamed")
            .expect("the new name is in the body");
        body[at] = b'R';
        let forged = journal::encode(
            last.op,
            last.commit,
            last.parent,
            last.cluster,
            last.operation,
            last.origin,
            &body,
        );
        assert_eq!(forged.len() as u64, last.len, "the same length");
        w.disk.overwrite(&path, last.position, &forged);
    })?;
    Ok(s.decisions())
}

/// A checkpoint crashed after writing its temporary snapshot (before its record), and the
/// snapshot the record names then rots while the node is down: boot refuses
/// (`SnapshotMismatch`) — the temporary file is a later checkpoint's, which no record names,
/// and never stands in for the recorded one.
pub(super) fn a_rotten_snapshot_beside_a_later_temporary_one_refuses_boot(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0012);
    lock(&s.world).profile.checkpoint_bytes = 1;
    s.setup()?;
    s.perform(AdminOp::CreateStream("s".into()))?;
    let snapshot = metadata("snapshot.bin");
    assert!(
        lock(&s.world).disk.contents(&snapshot).is_some(),
        "the first op's batch checkpointed"
    );
    lock(&s.world)
        .disk
        .script(cairn_faults::Scripted::CrashOnCall {
            call: cairn_faults::Call::Sync,
            part: "snapshot.bin.tmp".into(),
        });
    s.perform(AdminOp::RenameStream(0, "renamed".into()))?;
    assert!(lock(&s.world).disk.is_crashed(), "the checkpoint crashed");
    s.restart_after(false, |w| {
        assert!(
            w.disk.contents(&metadata("snapshot.bin.tmp")).is_some(),
            "the crashed checkpoint left its temporary snapshot"
        );
        w.disk.flip_bit_at(&snapshot, 40, 5);
    })?;
    Ok(s.decisions())
}

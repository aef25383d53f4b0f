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
        let (path, _, last) = journal_tail(w);
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

/// Stream 0 renamed `renames` times, each op its own journal write; then the node restarts
/// with a checkpoint threshold the next op crosses.
fn renamed_then_ready_to_checkpoint(s: &mut Scenario, renames: usize) -> Checked<()> {
    s.setup()?;
    s.perform(AdminOp::CreateStream("s".into()))?;
    for i in 0..renames {
        s.perform(AdminOp::RenameStream(0, format!("r{i}")))?;
    }
    let len = s.journal_len();
    lock(&s.world).profile.checkpoint_bytes = len + 1;
    s.restart(false)
}

/// A checkpoint that crashes between its snapshot's rename and the journal cut: every
/// entry the journal holds is then in the snapshot. Returns the journal's entries.
fn crash_a_checkpoint_before_its_journal_cut(
    s: &mut Scenario,
) -> Checked<Vec<cairn_engine::metadata::journal::Entry>> {
    renamed_then_ready_to_checkpoint(s, 4)?;
    lock(&s.world)
        .disk
        .script(cairn_faults::Scripted::CrashOnCall {
            call: cairn_faults::Call::SetLen,
            part: "journal.wal".into(),
        });
    s.perform(AdminOp::RenameStream(0, "last".into()))?;
    let w = lock(&s.world);
    assert!(w.disk.is_crashed(), "the checkpoint crashed");
    Ok(w.journal_entries())
}

/// A checkpoint crashes before it empties the journal: boot finds only entries the
/// snapshot holds and empties the journal (`TruncateJournal` from 0), replaying none.
pub(super) fn a_checkpoint_cut_short_before_its_journal_cut_empties_the_journal(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_001a);
    let entries = crash_a_checkpoint_before_its_journal_cut(&mut s)?;
    assert!(entries.len() > 2, "the journal kept the checkpoint's ops");
    s.restart(false)?;
    Ok(s.decisions())
}

/// A checkpoint crashes before it empties the journal, and rot then strikes the second
/// entry there, followed by whole entries written after it was durable. Every one of them
/// is an op the snapshot holds, so the damage is in a checkpoint's leftovers: boot empties
/// the journal (row 17), where damage followed by later writes anywhere else refuses.
pub(super) fn rot_in_a_checkpoints_leftover_journal_empties_it() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_001b);
    let entries = crash_a_checkpoint_before_its_journal_cut(&mut s)?;
    let second = &entries[1];
    assert!(
        entries[2..].iter().any(|e| e.commit >= second.op),
        "a whole entry written after the damaged one was durable follows it"
    );
    let journal = metadata(cairn_engine::metadata::JOURNAL);
    let at = second.position + second.len / 2;
    s.restart_after(false, |w| w.disk.flip_bit_at(&journal, at, 2))?;
    Ok(s.decisions())
}

/// After a checkpoint, two acknowledged ops are journaled; a third is journaled and the
/// node crashes before its superblock record (it is in doubt), and rot strikes its entry.
/// Nothing follows the damage: a torn tail above the durable end (row 20), cut at the
/// damage; the two ops after the snapshot are kept, through this boot and the next.
pub(super) fn a_torn_tail_after_a_checkpoint_keeps_the_ops_before_it() -> Checked<Vec<&'static str>>
{
    let mut s = Scenario::new(0x4e0d_001c);
    renamed_then_ready_to_checkpoint(&mut s, 4)?;
    s.perform(AdminOp::RenameStream(0, "checkpointed".into()))?;
    assert_eq!(s.journal_len(), 0, "the checkpoint emptied the journal");
    s.perform(AdminOp::RenameStream(0, "after 1".into()))?;
    s.perform(AdminOp::RenameStream(0, "after 2".into()))?;
    lock(&s.world).disk.script(cairn_faults::Scripted::CrashOn(
        "metadata/superblock".into(),
    ));
    s.perform(AdminOp::RenameStream(0, "in doubt".into()))?;
    assert!(
        lock(&s.world).disk.is_crashed(),
        "the record's write crashed"
    );
    let last = lock(&s.world).journal_entries().pop().expect("entries");
    let journal = metadata(cairn_engine::metadata::JOURNAL);
    s.restart_after(false, |w| {
        w.disk
            .flip_bit_at(&journal, last.position + last.len / 2, 1)
    })?;
    s.restart(false)?;
    Ok(s.decisions())
}

/// A rule of a journal entry's header that the checksums do not cover for the decoder.
#[derive(Debug, Clone, Copy)]
enum HeaderRule {
    /// `commit` (the last durable op when written) above the entry's own op.
    CommitAboveOp,
    /// A view other than 0 on a single node.
    View,
    /// Another consensus group than the metadata's.
    Group,
    /// Op 0 (ops start at 1).
    OpZero,
    /// A size above a header and the largest body.
    Size,
    /// A parent other than the checksum of the op before (the op number right).
    Parent,
}

/// The journal's path, its length, and its last whole entry.
fn journal_tail(
    w: &NodeWorld,
) -> (
    std::path::PathBuf,
    u64,
    cairn_engine::metadata::journal::Entry,
) {
    let path = metadata(cairn_engine::metadata::JOURNAL);
    let bytes = w.disk.contents(&path).expect("a journal");
    let last = cairn_engine::metadata::journal::scan(&bytes, w.cluster)
        .entries
        .pop()
        .expect("an entry");
    (path, bytes.len() as u64, last)
}

/// The bytes of an entry that follows `last` and breaks `rule`, its header checksum (and
/// its body checksum) correct, so only the rule can tell it from an entry: a rename of
/// stream 0 to a name no caller asked for.
fn forged_entry(last: &cairn_engine::metadata::journal::Entry, rule: HeaderRule) -> Vec<u8> {
    use cairn_engine::metadata::journal;
    use iggy_binary_protocol::{PrepareHeader, HEADER_SIZE};
    let mut body = last.body.clone();
    let at = body
        .windows(7)
        .position(|n| n == b"renamed")
        .expect("the name is in the body");
    body[at..at + 7].copy_from_slice(b"forged!");
    if let HeaderRule::Size = rule {
        body.resize(journal::MAX_BODY_LEN + 1, 0);
    }
    let op = last.op + 1;
    let mut bytes = journal::encode(
        op,
        last.op,
        last.checksum,
        last.cluster,
        last.operation,
        last.origin,
        &body[..body.len().min(journal::MAX_BODY_LEN)],
    );
    let mut put = |offset: usize, value: &[u8]| {
        bytes[offset..offset + value.len()].copy_from_slice(value);
    };
    match rule {
        HeaderRule::CommitAboveOp => put(
            std::mem::offset_of!(PrepareHeader, commit),
            &(op + 1).to_le_bytes(),
        ),
        HeaderRule::View => put(
            std::mem::offset_of!(PrepareHeader, view),
            &1u32.to_le_bytes(),
        ),
        HeaderRule::Group => put(
            std::mem::offset_of!(PrepareHeader, group),
            &(iggy_binary_protocol::namespace::METADATA_GROUP + 1).to_le_bytes(),
        ),
        HeaderRule::Parent => put(
            std::mem::offset_of!(PrepareHeader, parent),
            &(last.checksum ^ 1).to_le_bytes(),
        ),
        HeaderRule::OpZero => {
            put(std::mem::offset_of!(PrepareHeader, op), &0u64.to_le_bytes());
            put(
                std::mem::offset_of!(PrepareHeader, commit),
                &0u64.to_le_bytes(),
            );
        }
        HeaderRule::Size => {
            let size = u32::try_from(HEADER_SIZE + body.len()).expect("bounded");
            put(
                std::mem::offset_of!(PrepareHeader, size),
                &size.to_le_bytes(),
            );
            let sum = u128::from(xxhash::xxh3::xxh3_64(&body));
            put(
                std::mem::offset_of!(PrepareHeader, checksum_body),
                &sum.to_le_bytes(),
            );
            bytes.truncate(HEADER_SIZE);
            bytes.extend_from_slice(&body);
        }
    }
    // The identity checksum: xxh3 of the header with its checksum and view zeroed.
    let mut covered: [u8; HEADER_SIZE] = bytes[..HEADER_SIZE].try_into().expect("a header");
    let at = std::mem::offset_of!(PrepareHeader, checksum);
    covered[at..at + 16].fill(0);
    let view = std::mem::offset_of!(PrepareHeader, view);
    covered[view..view + 4].fill(0);
    let checksum = u128::from(xxhash::xxh3::xxh3_64(&covered));
    bytes[at..at + 16].copy_from_slice(&checksum.to_le_bytes());
    bytes
}

/// While the node is down, an entry breaking `rule` (both checksums right) is appended to
/// the journal after the last op. It is no entry: damage above the durable end with nothing
/// after it, a torn tail boot cuts off (`TruncateJournal`). Read as an entry it would be
/// replayed, an op no caller asked for, or refuse boot.
fn a_header_breaking(seed: u64, rule: HeaderRule) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(seed);
    s.with_persisted_topic(1)?;
    s.perform(AdminOp::RenameStream(0, "renamed".into()))?;
    s.restart_after(false, |w| {
        let (path, len, last) = journal_tail(w);
        let forged = forged_entry(&last, rule);
        w.disk.overwrite(&path, len, &forged);
    })?;
    Ok(s.decisions())
}

pub(super) fn a_header_committing_above_its_op_is_a_torn_tail() -> Checked<Vec<&'static str>> {
    a_header_breaking(0x4e0d_001d, HeaderRule::CommitAboveOp)
}

pub(super) fn a_header_with_a_view_is_a_torn_tail() -> Checked<Vec<&'static str>> {
    a_header_breaking(0x4e0d_001e, HeaderRule::View)
}

pub(super) fn a_header_of_another_group_is_a_torn_tail() -> Checked<Vec<&'static str>> {
    a_header_breaking(0x4e0d_001f, HeaderRule::Group)
}

pub(super) fn a_header_of_op_zero_is_a_torn_tail() -> Checked<Vec<&'static str>> {
    a_header_breaking(0x4e0d_0020, HeaderRule::OpZero)
}

pub(super) fn a_header_sized_beyond_any_body_is_a_torn_tail() -> Checked<Vec<&'static str>> {
    a_header_breaking(0x4e0d_0021, HeaderRule::Size)
}

/// As [`a_header_breaking`], an entry whose op follows the last one but whose parent is not
/// that op's checksum: whole, yet not of this chain (a stale entry of an earlier write), so
/// boot refuses (`JournalChainBroken`) rather than replay it or guess it torn.
pub(super) fn an_entry_of_another_chain_refuses_boot() -> Checked<Vec<&'static str>> {
    a_header_breaking(0x4e0d_002b, HeaderRule::Parent)
}

/// While the node is down two entries are appended after the last op, as a write of two new
/// ops leaves them when its first entry is torn: the first's body damaged, the second whole,
/// committing only the ops before the first (as every entry of such a write does). The
/// second proves nothing of the first (its commit is below the first's op): a torn tail,
/// cut off with both (`TruncateJournal`), never a refusal.
pub(super) fn a_torn_entry_before_one_committing_below_it_is_a_torn_tail(
) -> Checked<Vec<&'static str>> {
    use cairn_engine::metadata::journal;
    use iggy_binary_protocol::PrepareHeader;
    let mut s = Scenario::new(0x4e0d_002c);
    s.with_persisted_topic(1)?;
    s.perform(AdminOp::RenameStream(0, "renamed".into()))?;
    s.restart_after(false, |w| {
        let (path, len, last) = journal_tail(w);
        let entry = |op: u64, parent: u128| {
            journal::encode(
                op,
                last.op,
                parent,
                last.cluster,
                last.operation,
                last.origin,
                &last.body,
            )
        };
        let mut first = entry(last.op + 1, last.checksum);
        let at = std::mem::offset_of!(PrepareHeader, checksum);
        let checksum = u128::from_le_bytes(first[at..at + 16].try_into().expect("16 bytes"));
        let second = entry(last.op + 2, checksum);
        let end = first.len() - 1;
        first[end] ^= 0xff;
        first.extend_from_slice(&second);
        w.disk.overwrite(&path, len, &first);
    })?;
    Ok(s.decisions())
}

/// While the node is down the snapshot is rewritten as one of a later op (its anchor and
/// cluster the same), and the newest record is rewritten to name the new bytes (their
/// length and checksum), every checksum right: the snapshot holds another op than the
/// record says it does, and boot refuses (`SnapshotContradicts`) rather than replay the
/// journal onto a state it cannot place.
pub(super) fn a_snapshot_of_another_op_than_its_record_refuses_boot() -> Checked<Vec<&'static str>>
{
    use cairn_engine::metadata::{record::MetaRecord, snapshot};
    use cairn_engine::slots::{MIRROR_OFFSET, RECORD_LEN};
    let mut s = Scenario::new(0x4e0d_002e);
    lock(&s.world).profile.checkpoint_bytes = 1;
    s.with_persisted_topic(1)?;
    s.restart_after(false, |w| {
        let path = metadata("snapshot.bin");
        let bytes = w.disk.contents(&path).expect("a checkpoint was taken");
        let taken = snapshot::Snapshot::decode(&bytes).expect("a whole snapshot");
        let forged = snapshot::encode(taken.cluster, taken.op + 1, taken.anchor, &taken.state);
        w.disk.overwrite(&path, 0, &forged);
        let newest = cairn_engine::metadata::record::SLOT_NAMES
            .iter()
            .map(|slot| metadata(slot))
            .filter_map(|slot| {
                let bytes = w.disk.contents(&slot)?;
                let copy: [u8; RECORD_LEN] = bytes[..RECORD_LEN].try_into().ok()?;
                Some((MetaRecord::decode(&copy).ok()?, slot))
            })
            .max_by_key(|(record, _)| record.sequence);
        let (mut record, slot) = newest.expect("a record");
        record.snapshot.len = forged.len() as u64;
        record.snapshot.checksum = snapshot::checksum(&forged);
        for copy in [0, MIRROR_OFFSET] {
            w.disk.overwrite(&slot, copy, &record.encode());
        }
    })?;
    Ok(s.decisions())
}

/// A checkpoint empties the journal; while the node is down an entry is appended: the op
/// after the snapshot's, every checksum right, but its parent is not the snapshot's anchor
/// (a stale entry of another chain). Boot refuses (`JournalChainBroken`) rather than
/// replay it onto the snapshot.
pub(super) fn an_entry_not_chained_to_the_snapshot_refuses_boot() -> Checked<Vec<&'static str>> {
    use cairn_engine::metadata::{journal, snapshot};
    let mut s = Scenario::new(0x4e0d_002f);
    s.setup()?;
    s.perform(AdminOp::CreateStream("s".into()))?;
    s.perform(AdminOp::RenameStream(0, "renamed".into()))?;
    let (path, _, rename) = journal_tail(&lock(&s.world));
    // The threshold counts from the next boot on.
    lock(&s.world).profile.checkpoint_bytes = 1;
    s.restart(false)?;
    s.perform(AdminOp::RenameStream(0, "checkpointed".into()))?;
    assert_eq!(s.journal_len(), 0, "the checkpoint emptied the journal");
    s.restart_after(false, |w| {
        let taken = w
            .disk
            .contents(&metadata("snapshot.bin"))
            .expect("a snapshot");
        let taken = snapshot::Snapshot::decode(&taken).expect("a whole snapshot");
        let forged = journal::encode(
            taken.op + 1,
            taken.op,
            taken.anchor ^ 1,
            rename.cluster,
            rename.operation,
            rename.origin,
            &rename.body,
        );
        w.disk.overwrite(&path, 0, &forged);
    })?;
    Ok(s.decisions())
}

/// Every copy of both superblock slots holds a record whose format version is not this
/// build's (a newer cairn wrote it, its checksum correct): boot refuses (`NoSuperblock`)
/// rather than read fields whose meaning it does not know.
pub(super) fn records_of_another_format_version_refuse_boot() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_001d);
    s.with_persisted_topic(1)?;
    s.produce()?;
    s.restart_after(false, |w| {
        for slot in cairn_engine::metadata::record::SLOT_NAMES {
            let path = metadata(slot);
            for copy in [0, cairn_engine::slots::MIRROR_OFFSET] {
                let bytes = w.disk.contents(&path).expect("a slot file");
                let mut record: [u8; cairn_engine::slots::RECORD_LEN] = bytes[copy as usize..]
                    [..cairn_engine::slots::RECORD_LEN]
                    .try_into()
                    .expect("a record");
                let version = u32::from_le_bytes(record[8..12].try_into().expect("4 bytes"));
                record[8..12].copy_from_slice(&(version + 1).to_le_bytes());
                let checksum_at = cairn_engine::slots::RECORD_LEN - 8;
                let checksum = xxhash::xxh3::xxh3_64(&record[..checksum_at]);
                record[checksum_at..].copy_from_slice(&checksum.to_le_bytes());
                w.disk.overwrite(&path, copy, &record);
            }
        }
    })?;
    Ok(s.decisions())
}

/// After a checkpoint two ops are acknowledged, each with its own superblock record; rot
/// then strikes both copies of the newest record. The other slot holds the record before it
/// (the slots alternate), which names the checkpoint: boot recovers from it, and the newer
/// op's whole entry above its durable end is kept. (Were every record written to one slot,
/// the other would still hold the first boot's record, which names no checkpoint, and the
/// journal would no longer begin where it says.)
pub(super) fn a_lost_newest_record_falls_back_to_the_one_before() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_001e);
    renamed_then_ready_to_checkpoint(&mut s, 4)?;
    s.perform(AdminOp::RenameStream(0, "checkpointed".into()))?;
    assert_eq!(s.journal_len(), 0, "the checkpoint emptied the journal");
    s.perform(AdminOp::RenameStream(0, "after 1".into()))?;
    s.perform(AdminOp::RenameStream(0, "after 2".into()))?;
    s.restart_after(false, |w| {
        let sequence = |slot: &str| {
            let bytes = w.disk.contents(&metadata(slot)).expect("a slot file");
            let copy: [u8; cairn_engine::slots::RECORD_LEN] = bytes
                [..cairn_engine::slots::RECORD_LEN]
                .try_into()
                .expect("a record");
            cairn_engine::metadata::record::MetaRecord::decode(&copy)
                .expect("a whole record")
                .sequence
        };
        let [a, b] = cairn_engine::metadata::record::SLOT_NAMES.map(sequence);
        assert_eq!(a.abs_diff(b), 1, "the slots hold consecutive records");
        let newest = cairn_engine::metadata::record::SLOT_NAMES[usize::from(b > a)];
        for copy in [0, cairn_engine::slots::MIRROR_OFFSET] {
            w.disk.flip_bit_at(&metadata(newest), copy + 20, 3);
        }
    })?;
    s.restart(false)?;
    Ok(s.decisions())
}

/// A checkpoint's snapshot fails to sync (EIO). Unlike a full disk, which only defers the
/// checkpoint, an I/O error stops the node (`Failure::Metadata`): what it wrote since can no
/// longer be trusted to be on the device. The op that triggered the checkpoint was
/// acknowledged before it and survives the boot that follows, with the ones before it.
pub(super) fn an_io_error_in_a_checkpoint_stops_the_node() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0021);
    renamed_then_ready_to_checkpoint(&mut s, 4)?;
    lock(&s.world).disk.script(cairn_faults::Scripted::FailSync(
        cairn_engine::metadata::snapshot::TEMP.into(),
    ));
    s.perform(AdminOp::RenameStream(0, "checkpointed".into()))?;
    // The owner checkpoints after it answered.
    s.sleep(std::time::Duration::from_millis(100));
    let failure = lock(&s.world).node.as_ref().and_then(|n| n.failure());
    if !matches!(
        failure.as_deref(),
        Some(cairn_engine::node::Failure::Metadata(_))
    ) {
        return Err(crate::report::violation(
            crate::report::INV_LIVENESS,
            format!("a checkpoint whose snapshot failed to sync left the node at {failure:?}, not stopped for its metadata"),
        ));
    }
    s.restart(false)?;
    let mut decisions = s.decisions();
    decisions.push("MetaWriteFailed");
    Ok(decisions)
}

/// More metadata ops arrive at once than one batch may hold (`MAX_BATCH_OPS`): the owner
/// journals them in several batches, none above the limit (the engine asserts it at each
/// commit), and every op is acknowledged and judged.
pub(super) fn a_flood_of_metadata_ops_is_journaled_in_bounded_batches() -> Checked<Vec<&'static str>>
{
    const OPS: u32 = cairn_engine::node::MAX_BATCH_OPS as u32 + 44;
    let mut s = Scenario::new(0x4e0d_0023);
    // Room in the metadata inbox for every op at once.
    lock(&s.world).profile.meta_inbox = 2 * OPS as usize;
    s.setup()?;
    s.perform(AdminOp::CreateStream("s".into()))?;
    let world = s.world.clone();
    let node = lock(&world).node.clone().expect("up");
    let before = node.stats();
    let ops: Vec<cairn_engine::env::BoxFuture<'static, ()>> = (0..OPS)
        .map(|i| {
            let (world, client, caller) =
                (world.clone(), node.client(1000 + u128::from(i)), 1000 + i);
            let op = AdminOp::RenameStream(0, format!("flood {i}"));
            let run: cairn_engine::env::BoxFuture<'static, ()> =
                Box::pin(async move { run_meta(&world, &client, caller, op).await });
            run
        })
        .collect();
    crate::node_world::block(&mut s.executor, every(ops));
    s.violation()?;
    let after = node.stats();
    let (batches, journaled) = (
        after.meta_batches - before.meta_batches,
        after.meta_ops - before.meta_ops,
    );
    assert_eq!(journaled, u64::from(OPS), "every op was journaled");
    assert!(
        batches >= journaled.div_ceil(cairn_engine::node::MAX_BATCH_OPS as u64),
        "{journaled} ops in {batches} batches"
    );
    Ok(s.decisions())
}

/// Three ops in one batch while the disk has no room: a create of a stream whose name
/// exists (refused on its own merits), a partition added over a directory an operator left
/// at its path (refused: the directory is in the way), and a create of a new stream, which
/// is accepted and whose journal write fails for space. The owner cuts the journal back and
/// keeps serving: each refusal, judged against the state before the batch, keeps its own
/// answer; the create is told there was no room; after a restart the new stream never
/// appears (the restart's boot compares the node with the model, which holds none of it).
pub(super) fn refusals_before_a_journal_write_without_room_keep_their_answers(
) -> Checked<Vec<&'static str>> {
    use cairn_engine::node::NodeError;
    use iggy_binary_protocol::requests::{partitions, streams};
    let mut s = Scenario::new(0x4e0d_0027);
    // Room in the metadata inbox for the batch's three ops.
    lock(&s.world).profile.meta_inbox = 4;
    s.with_persisted_topic(1)?;
    s.produce_n(2)?;
    {
        let mut w = lock(&s.world);
        let source = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 0);
        let next = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 1);
        copy_tree(&w, &source, &next);
        w.planted.insert(next);
    }
    s.fill_disk(Some(0));
    let node = lock(&s.world).node.clone().expect("up");
    let before = node.stats();
    let create = |name: &str| {
        cairn_engine::node::ops::MetaOp::CreateStream(streams::CreateStreamRequest {
            name: iggy_binary_protocol::WireName::new(name).expect("a name"),
            options: iggy_binary_protocol::WireOptions::empty(),
        })
    };
    let add =
        cairn_engine::node::ops::MetaOp::CreatePartitions(partitions::CreatePartitionsRequest {
            stream_id: iggy_binary_protocol::WireIdentifier::numeric(0),
            topic_id: iggy_binary_protocol::WireIdentifier::numeric(0),
            partitions_count: 1,
        });
    let answers = std::sync::Arc::new(Mutex::new(Vec::new()));
    let ops: Vec<cairn_engine::env::BoxFuture<'static, ()>> = [create("s"), add, create("u")]
        .into_iter()
        .enumerate()
        .map(|(i, op)| {
            let (client, answers) = (node.client(100 + i as u128), answers.clone());
            let future: cairn_engine::env::BoxFuture<'static, ()> = Box::pin(async move {
                let answer = client.execute(op).await.map(|_| ());
                answers.lock().expect("lock").push((i, answer));
            });
            future
        })
        .collect();
    crate::node_world::block(&mut s.executor, every(ops)).expect("answered");
    let after = node.stats();
    assert_eq!(
        (
            after.meta_batches - before.meta_batches,
            after.meta_no_space - before.meta_no_space
        ),
        (1, 1),
        "the three ops were staged in one batch, whose journal write found no room"
    );
    assert!(node.failure().is_none(), "the node keeps serving");
    let mut answers = std::mem::take(&mut *answers.lock().expect("lock"));
    answers.sort_by_key(|(i, _)| *i);
    let right = matches!(
        answers.as_slice(),
        [
            (0, Err(NodeError::StreamNameExists(_))),
            (1, Err(NodeError::DirectoryInTheWay(_))),
            (2, Err(NodeError::MetadataNoSpace)),
        ]
    );
    if !right {
        return Err(crate::report::violation(
            crate::node_world::INV_CALLERS,
            format!("a create of an existing name, a partition over a planted directory and a create without room, in one batch, answered {answers:?}: not the name's refusal, the directory's, and no room"),
        ));
    }
    s.fill_disk(None);
    s.restart(false)?;
    s.perform(AdminOp::CreateStream("v".into()))?;
    Ok(s.decisions())
}

/// Both superblock records are gone but the journal holds committed ops (a stream, and no
/// topic, so no partition directory either): the records were lost, it is not a first boot,
/// and boot must refuse rather than start empty over the journal. Found by a mutant
/// (`journal_is_empty` → `Ok(true)`) under which such a boot started afresh.
pub(super) fn a_journal_without_its_records_refuses_boot() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0031);
    s.setup()?;
    s.perform(AdminOp::CreateStream("s".into()))?;
    s.restart_after(false, |w| {
        remove_both_records(w);
    })?;
    Ok(s.decisions())
}

/// Every op checkpoints, so the journal is empty and the snapshot holds everything; while
/// the node is down both superblock copies are removed. Something was committed (a snapshot
/// is there), so boot refuses (`NoSuperblock`) rather than take the directory for a first
/// boot's and start empty, losing the stream.
pub(super) fn a_snapshot_without_its_records_refuses_boot() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0032);
    lock(&s.world).profile.checkpoint_bytes = 1;
    s.setup()?;
    s.perform(AdminOp::CreateStream("s".into()))?;
    s.restart_after(false, |w| {
        assert!(
            w.disk.contents(&metadata("snapshot.bin")).is_some(),
            "the op's batch checkpointed"
        );
        let journal = w.disk.contents(&metadata(cairn_engine::metadata::JOURNAL));
        assert_eq!(
            journal.map_or(0, |j| j.len()),
            0,
            "the checkpoint emptied the journal"
        );
        remove_both_records(w);
    })?;
    Ok(s.decisions())
}

/// An operator removes both superblock copies of the metadata (the slot files).
fn remove_both_records(w: &NodeWorld) {
    for slot in cairn_engine::metadata::record::SLOT_NAMES {
        w.disk.remove_by_operator(&metadata(slot));
    }
}

//! Directed node scenarios: each a scripted fault schedule under the node oracle, reaching a
//! decision on purpose. Every step is a caller's operation run on the executor and judged
//! like the swarm's.

use super::lifecycle::{restart, setup};
use super::model::AdminOp;
use super::tasks::{group_move, produce, run_meta, MEMBERS};
use super::workload::GroupMove;
use super::{lock, NodeWorld, Shared, NODE_ROOT};
use crate::executor::Executor;
use crate::report::Checked;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// One directed node scenario: its name, the decisions it must reach, and its body (the
/// world's oracle checks every boot and operation on the way).
pub struct NodeDirected {
    pub name: &'static str,
    pub expect: &'static [&'static str],
    pub run: fn() -> Checked<Vec<&'static str>>,
}

/// A node on a simulated disk with no random faults: each scenario injects its own.
struct Scenario {
    world: Shared,
    executor: Executor,
}

impl Scenario {
    fn new(seed: u64) -> Scenario {
        let profile = crate::profile::Profile::from_seed(seed);
        let (mut w, executor) = NodeWorld::for_seed(seed, profile, false);
        w.disk.set_faults(cairn_faults::DiskFaults::default());
        w.faulty = false;
        // No checkpoint unless a scenario asks: each superblock record is then one op's.
        w.profile.checkpoint_bytes = 1 << 20;
        Scenario {
            world: Arc::new(Mutex::new(w)),
            executor,
        }
    }

    fn setup(&mut self) -> Checked<()> {
        setup(&self.world, &mut self.executor)
    }

    /// Runs `op` as an admin caller and judges it.
    fn perform(&mut self, op: AdminOp) -> Checked<()> {
        let world = self.world.clone();
        let client = lock(&world).node.clone().expect("up").client(100);
        super::block(&mut self.executor, async move {
            run_meta(&world, &client, 100, op).await;
        });
        self.violation()
    }

    /// One producer's send, judged.
    fn produce(&mut self) -> Checked<()> {
        let world = self.world.clone();
        let client = lock(&world).node.clone().expect("up").client(200);
        super::block(&mut self.executor, async move {
            produce(&world, &client).await;
        });
        self.violation()
    }

    /// Member `member`'s `planned` move on the newest incarnation of group `g` of topic
    /// `t` in stream `s`, judged.
    fn group(
        &mut self,
        (s, t, g): (u32, u32, u32),
        member: usize,
        planned: GroupMove,
    ) -> Checked<()> {
        let world = self.world.clone();
        let (node, incarnation) = {
            let w = lock(&world);
            let topic = w.model.topic(s, t).expect("the scenario made it");
            (w.node.clone().expect("up"), topic.groups[&g].1)
        };
        let members: Vec<_> = (1..=MEMBERS).map(|c| node.client(c)).collect();
        super::block(&mut self.executor, async move {
            group_move(&world, &members, (s, t, g, incarnation), member, planned).await;
        });
        self.violation()
    }

    /// The node goes down (all its unsynced pages lost on a power loss), `damage` is done to
    /// its disk while it is down, and it boots again.
    fn restart_after(&mut self, power: bool, damage: impl FnOnce(&NodeWorld)) -> Checked<()> {
        self.executor.kill_all();
        {
            let mut w = lock(&self.world);
            if power {
                w.disk.set_fates(cairn_faults::Fates::DropAll);
            }
            w.go_down(power);
            damage(&w);
        }
        super::lifecycle::boot(&self.world, &mut self.executor)?;
        self.violation()
    }

    /// A `Check` move that the oracle must judge (not skip as racing).
    fn judged_check(&mut self, group: (u32, u32, u32), member: usize) -> Checked<()> {
        let judged = |s: &Scenario| {
            let w = lock(&s.world);
            w.report
                .decisions
                .get("AssignmentsJudged")
                .copied()
                .unwrap_or(0)
        };
        let before = judged(self);
        self.group(group, member, GroupMove::Check)?;
        if judged(self) == before {
            return Err(crate::report::violation(
                super::INV_CALLERS,
                format!("group {group:?}: the scenario's check was not judged"),
            ));
        }
        Ok(())
    }

    /// `n` producer sends, each judged.
    fn produce_n(&mut self, n: usize) -> Checked<()> {
        (0..n).try_for_each(|_| self.produce())
    }

    /// What the node says of partition `key`.
    fn info(
        &mut self,
        key: cairn_engine::node::PartitionKey,
    ) -> Checked<cairn_engine::node::PartitionInfo> {
        let client = lock(&self.world).node.clone().expect("up").client(300);
        let info = super::block(&mut self.executor, async move {
            client.partition_info(key).await
        });
        match info {
            Some(Ok(Some(info))) => Ok(info),
            other => Err(crate::report::violation(
                crate::report::INV_LIVENESS,
                format!("partition {key:?} has no info: {other:?}"),
            )),
        }
    }

    /// Virtual time passes.
    fn sleep(&mut self, duration: std::time::Duration) {
        let clock = lock(&self.world).clock.clone();
        super::block(&mut self.executor, async move {
            cairn_engine::env::Clock::sleep(&clock, duration).await;
        });
    }

    /// The metadata journal's length in the page cache.
    fn journal_len(&self) -> u64 {
        let path = metadata(cairn_engine::metadata::JOURNAL);
        let w = lock(&self.world);
        w.disk.contents(&path).map_or(0, |c| c.len() as u64)
    }

    fn violation(&self) -> Checked<()> {
        match lock(&self.world).violation.clone() {
            Some(v) => Err(v),
            None => Ok(()),
        }
    }

    fn restart(&mut self, power: bool) -> Checked<()> {
        self.executor.kill_all();
        restart(&self.world, &mut self.executor, power)?;
        self.violation()
    }

    fn with_persisted_topic(&mut self, partitions: u32) -> Checked<()> {
        self.setup()?;
        self.perform(AdminOp::CreateStream("s".into()))?;
        self.perform(persisted_topic(partitions))
    }

    /// Stream 0 with topics 0 ("a") and 1 ("b"), one `persisted` partition each.
    fn with_two_persisted_topics(&mut self) -> Checked<()> {
        self.setup()?;
        self.perform(AdminOp::CreateStream("s".into()))?;
        for name in ["a", "b"] {
            self.perform(AdminOp::CreateTopic {
                stream: 0,
                name: name.into(),
                partitions: 1,
                persisted: true,
                offsets_persisted: true,
                expiry: 0,
                max_size: 0,
            })?;
        }
        Ok(())
    }

    fn decisions(&self) -> Vec<&'static str> {
        lock(&self.world).report.decisions.keys().copied().collect()
    }

    /// `batches` acknowledged sends, then a power loss that drops everything unsynced; the
    /// decisions boot took.
    fn produce_then_lose_power(&mut self, batches: usize) -> Checked<Vec<&'static str>> {
        self.produce_n(batches)?;
        lock(&self.world)
            .disk
            .set_fates(cairn_faults::Fates::DropAll);
        self.restart(true)?;
        Ok(self.decisions())
    }

    /// The superblock records of the next `ops` ops with directory work are lost at the
    /// next power loss: each writes two (the journal's durable end before its work, the
    /// applied op after), and their syncs lie.
    fn lie_on_metadata_records(&mut self, ops: usize) {
        let w = lock(&self.world);
        for _ in 0..2 * ops {
            w.disk.script(cairn_faults::Scripted::LieOnSync(
                "metadata/superblock".into(),
            ));
        }
    }
}

/// Creating topic "t" in stream 0: `persisted` messages and offsets, no retention.
fn persisted_topic(partitions: u32) -> AdminOp {
    AdminOp::CreateTopic {
        stream: 0,
        name: "t".into(),
        partitions,
        persisted: true,
        offsets_persisted: true,
        expiry: 0,
        max_size: 0,
    }
}

/// The superblock record after a topic's creation is lost (its sync lied, then the power
/// failed) after the new partition took acknowledged messages: boot replays the creation and
/// its directory work, which must find the partition there and keep it.
fn a_create_redone_after_a_lost_record_keeps_its_messages() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0001);
    s.setup()?;
    s.perform(AdminOp::CreateStream("s".into()))?;
    s.lie_on_metadata_records(1);
    s.perform(persisted_topic(1))?;
    s.produce_then_lose_power(4)
}

/// The records of a partition's removal and of its re-creation are both lost, after the
/// re-created partition took acknowledged messages: boot must not redo the removal.
fn a_removal_superseded_by_a_re_creation_is_not_redone() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0003);
    s.with_persisted_topic(2)?;
    s.lie_on_metadata_records(2);
    s.perform(AdminOp::DeletePartitions(0, 0, 1))?;
    s.perform(AdminOp::CreatePartitions(0, 0, 1))?;
    s.produce_then_lose_power(6)
}

/// An operator removed a partition directory while the node was down: that partition is
/// fenced, never recreated empty; the others serve.
fn a_removed_partition_directory_is_fenced() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0002);
    s.with_persisted_topic(2)?;
    s.produce_n(4)?;
    s.executor.kill_all();
    lock(&s.world).remove_partition_dir((0, 0, 1));
    s.restart(false)?;
    Ok(s.decisions())
}

/// The node crashes inside the directory work of a partition's removal, and rot then
/// strikes that op's journal entry: the entry lies below the durable end recorded before the
/// work began, so boot refuses. (Dropped as a torn tail, the op would be undone with its
/// work half done: a partition directory gone with no op that removed it.)
fn rot_in_an_entry_whose_work_began_is_refused() -> Checked<Vec<&'static str>> {
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
fn a_metadata_record_in_one_copy_is_written_again() -> Checked<Vec<&'static str>> {
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

/// The metadata directory, and its files by name.
fn metadata(name: &str) -> std::path::PathBuf {
    super::oracle::journal_path().with_file_name(name)
}

/// An operator restored a copy of one superblock slot file over the other while the node
/// was down: slot b holds a record whose sequence belongs in slot a. Boot refuses
/// (`SuperblockMisplaced`) rather than trust a file that is not what its name says.
fn a_slot_holding_the_other_slots_record_refuses_boot() -> Checked<Vec<&'static str>> {
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
fn every_superblock_copy_rotten_refuses_boot() -> Checked<Vec<&'static str>> {
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
fn rot_before_a_later_whole_entry_is_interior_corruption() -> Checked<Vec<&'static str>> {
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

/// The node crashes as a purge's directory work first touches the partition, after the
/// purge was journaled: boot finds the old incarnation at the path, which the journaled
/// purge replaces, and redoes the replacement (the old messages gone, the new incarnation
/// empty), rather than open the old directory as the new partition.
fn a_purge_cut_short_before_its_work_is_redone() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_000c);
    s.with_persisted_topic(1)?;
    s.produce_n(3)?;
    lock(&s.world)
        .disk
        .script(cairn_faults::Scripted::CrashOn("partitions/0".into()));
    s.perform(AdminOp::PurgeTopic(0, 0))?;
    assert!(lock(&s.world).disk.is_crashed(), "the purge's work crashed");
    s.restart(false)?;
    s.produce()?;
    Ok(s.decisions())
}

/// While the node is down, the last journal entry is replaced by another whole entry of the
/// same op number, parent and length (an operator's restore from another history): it is
/// not the op the superblock records, whose checksum it lacks, so boot refuses
/// (`JournalChainBroken`) rather than replay an op nobody was answered for.
fn another_entry_at_the_durable_end_refuses_boot() -> Checked<Vec<&'static str>> {
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

/// A sealed segment whose newest message is exactly as old as the topic's expiry is kept
/// (the spec deletes messages *older* than it); a microsecond later it is deleted. Both
/// passes are explicit cleaner passes at a given time, judged by the oracle like the
/// shards' own.
fn a_segment_exactly_as_old_as_the_expiry_is_kept() -> Checked<Vec<&'static str>> {
    const EXPIRY: u64 = 10_000_000;
    let mut s = Scenario::new(0x4e0d_000e);
    {
        // Only the scenario's passes: the shards' own timers stay out of the way.
        let mut w = lock(&s.world);
        w.profile.max_payload = 64 * 1024;
        w.profile.cleaner_every_nanos = 24 * 3600 * 1_000_000_000;
    }
    s.setup()?;
    s.perform(AdminOp::CreateStream("s".into()))?;
    s.perform(AdminOp::CreateTopic {
        stream: 0,
        name: "t".into(),
        partitions: 1,
        persisted: true,
        offsets_persisted: true,
        expiry: EXPIRY,
        max_size: 0,
    })?;
    let mut newest = None;
    for _ in 0..64 {
        s.produce()?;
        let info = s.info((0, 0, 0))?;
        if let Some(&(_, _, stamp)) = info.sealed.first() {
            newest = Some(stamp);
            break;
        }
    }
    let newest = newest.expect("a segment sealed");
    let wall = lock(&s.world).env.clock.wall_micros();
    s.sleep(std::time::Duration::from_micros(
        (newest + EXPIRY).saturating_sub(wall),
    ));
    for (now, expect_deleted) in [(newest + EXPIRY, false), (newest + EXPIRY + 1, true)] {
        let node = lock(&s.world).node.clone().expect("up");
        let deleted = super::block(&mut s.executor, async move { node.clean(Some(now)).await })
            .expect("answered")
            .expect("a pass");
        let mut w = lock(&s.world);
        w.drain_deletions()?;
        w.judge_deletions(&deleted)?;
        if deleted.is_empty() == expect_deleted {
            return Err(crate::report::violation(
                super::INV_RETENTION,
                format!("a pass at {now} µs over a segment whose newest stamp is {newest} µs (expiry {EXPIRY} µs) deleted {deleted:?}"),
            ));
        }
    }
    Ok(s.decisions())
}

/// Two topics of one stream each have a group of id 0 whose members polled with
/// auto-commit (persisted offsets). The superblock records of the deletion of topic 0's
/// group are lost at a power loss, so boot redoes its removal of that group's offsets: it
/// must remove them in topic 0's partition only, never those of topic 1's group of the
/// same id.
fn a_redone_group_deletion_keeps_another_topics_group_of_that_id() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_000f);
    s.with_two_persisted_topics()?;
    for _ in 0..32 {
        let acked = |t: u32| {
            let w = lock(&s.world);
            let identity = w.model.identity(w.cluster, (0, t, 0)).expect("made");
            w.parts
                .get(&identity)
                .is_some_and(|p| !p.messages.is_empty())
        };
        if acked(0) && acked(1) {
            break;
        }
        s.produce()?;
    }
    for topic in [0, 1] {
        s.perform(AdminOp::CreateGroup(0, topic, "g".into()))?;
        s.group((0, topic, 0), 0, GroupMove::Join)?;
        s.group((0, topic, 0), 0, GroupMove::Poll)?;
    }
    let committed = {
        let w = lock(&s.world);
        let identity = w.model.identity(w.cluster, (0, 1, 0)).expect("made");
        let incarnation = w.model.topic(0, 1).expect("made").groups[&0].1;
        let holder = super::Holder::Group { id: 0, incarnation };
        w.parts[&identity].offsets.get(&holder).and_then(|o| o.0)
    };
    assert!(committed.is_some(), "topic b's group committed an offset");
    s.lie_on_metadata_records(1);
    s.perform(AdminOp::DeleteGroup(0, 0, 0))?;
    s.restart_after(true, |_| {})?;
    Ok(s.decisions())
}

/// Two streams, each with a topic and a group, the same members in both; deleting one
/// stream drops only its group's members: the other group's list, assignments and
/// generation are judged after the deletion.
fn deleting_a_stream_keeps_the_other_streams_members() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0008);
    s.setup()?;
    for (stream, name) in [(0, "a"), (1, "b")] {
        s.perform(AdminOp::CreateStream(name.into()))?;
        s.perform(AdminOp::CreateTopic {
            stream,
            name: "t".into(),
            partitions: 2,
            persisted: true,
            offsets_persisted: true,
            expiry: 0,
            max_size: 0,
        })?;
        s.perform(AdminOp::CreateGroup(stream, 0, "g".into()))?;
        for member in 0..2 {
            s.group((stream, 0, 0), member, GroupMove::Join)?;
        }
        s.judged_check((stream, 0, 0), 0)?;
    }
    s.perform(AdminOp::DeleteStream(0))?;
    s.judged_check((1, 0, 0), 1)?;
    s.group((1, 0, 0), 1, GroupMove::Leave)?;
    s.judged_check((1, 0, 0), 0)?;
    Ok(s.decisions())
}

/// Copies the directory tree `from` to `to` on the simulated disk, durably (what an operator
/// does with `cp -r` and `sync`).
fn copy_tree(w: &NodeWorld, from: &Path, to: &Path) {
    use cairn_engine::env::{Disk, OpenMode};
    let disk = &w.disk;
    for path in disk.paths_under(from) {
        let target = to.join(path.strip_prefix(from).expect("under"));
        match disk.contents(&path) {
            Some(bytes) => {
                disk.create_dir_all(target.parent().expect("parent"))
                    .expect("mkdir");
                let file = disk.open(&target, OpenMode::CreateNew).expect("create");
                file.write_all_at(&[std::io::IoSlice::new(&bytes)], 0)
                    .expect("write");
                file.sync_data().expect("sync");
            }
            None => disk.create_dir_all(&target).expect("mkdir"),
        }
    }
    for dir in disk.paths_under(to).iter().chain([to.to_path_buf()].iter()) {
        if disk.contents(dir).is_none() {
            disk.sync_dir(dir).expect("sync dir");
        }
    }
    let mut up = to.parent();
    while let Some(dir) = up {
        disk.sync_dir(dir).expect("sync dir");
        up = dir.parent().filter(|p| p.starts_with(NODE_ROOT));
    }
    disk.forgive_io_time();
}

/// While the node is down an operator copies a partition's directory under a topic the
/// metadata never had: boot keeps the copy (it may be the only copy of acknowledged data),
/// never removes it, and fences the partition whose identity it claims.
fn a_copy_claiming_a_partitions_identity_fences_it_and_is_kept() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0005);
    s.with_persisted_topic(2)?;
    s.produce_n(4)?;
    s.executor.kill_all();
    let original = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 0);
    let copy = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 7, 0);
    {
        let mut w = lock(&s.world);
        copy_tree(&w, &original, &copy);
        w.planted.insert(copy.clone());
    }
    s.restart(false)?;
    let w = lock(&s.world);
    assert!(
        cairn_engine::env::Disk::exists(&w.disk, &copy).unwrap_or(false),
        "the copy is kept"
    );
    drop(w);
    Ok(s.decisions())
}

/// While the node serves, an operator's mistake leaves a partition's directory with data and
/// no readable identity (its superblocks removed). A purge of the topic must not remove what
/// it cannot account for: it keeps the directory and fences the partition.
fn a_purge_keeps_a_directory_it_cannot_account_for() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0006);
    s.with_persisted_topic(1)?;
    s.produce_n(3)?;
    let dir = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 0);
    {
        let w = lock(&s.world);
        for slot in ["superblock.a", "superblock.b"] {
            cairn_engine::env::Disk::remove_file(&w.disk, &dir.join(slot)).expect("remove");
        }
        cairn_engine::env::Disk::sync_dir(&w.disk, &dir).expect("sync");
        w.disk.forgive_io_time();
    }
    let world = s.world.clone();
    let client = lock(&world).node.clone().expect("up").client(100);
    let purge = cairn_engine::node::ops::MetaOp::PurgeTopic(
        iggy_binary_protocol::requests::topics::PurgeTopicRequest {
            stream_id: iggy_binary_protocol::WireIdentifier::numeric(0),
            topic_id: iggy_binary_protocol::WireIdentifier::numeric(0),
        },
    );
    let (purged, sent) = super::block(&mut s.executor, async move {
        let purged = client.execute(purge).await;
        let mut builder = cairn_engine::format::BatchBuilder::new(1);
        builder.push(u128::MAX, 0, b"after", b"");
        let sent = client
            .send(
                &iggy_binary_protocol::WireIdentifier::numeric(0),
                &iggy_binary_protocol::WireIdentifier::numeric(0),
                &iggy_binary_protocol::WirePartitioning::PartitionId(0),
                builder.build(),
            )
            .await;
        (purged, sent)
    })
    .expect("the purge and the send finish");
    assert!(
        purged.is_ok(),
        "the purge is journaled and done: {purged:?}"
    );
    let kept = lock(&s.world)
        .disk
        .paths_under(&dir)
        .iter()
        .any(|p| p.to_string_lossy().ends_with(".log"));
    assert!(
        kept,
        "the directory the purge could not account for is kept"
    );
    match sent {
        Err(cairn_engine::node::NodeError::Partition(
            cairn_engine::partition::PartitionError::Fenced(
                cairn_engine::partition::FenceReason::DirectoryInTheWay { .. },
            ),
        )) => Ok(vec!["DirectoryInTheWay"]),
        other => Err(crate::report::violation(
            crate::report::INV_JUSTIFIED,
            format!("a send after the purge answered {other:?}, not a fence for the directory in the way"),
        )),
    }
}

/// A checkpoint crashed after writing its temporary snapshot (before its record), and the
/// snapshot the record names then rots while the node is down: boot refuses
/// (`SnapshotMismatch`) — the temporary file is a later checkpoint's, which no record names,
/// and never stands in for the recorded one.
fn a_rotten_snapshot_beside_a_later_temporary_one_refuses_boot() -> Checked<Vec<&'static str>> {
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

/// While the node serves, an operator plants a copy of partition 0's directory where the
/// topic's next partition will go. Adding a partition is refused (`DirectoryInTheWay`)
/// before anything is journaled, and the planted directory is left as it was.
fn a_create_refuses_a_directory_in_the_way() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0013);
    s.with_persisted_topic(1)?;
    s.produce_n(2)?;
    let next = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 1);
    let journaled = s.journal_len();
    {
        let mut w = lock(&s.world);
        let source = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 0);
        copy_tree(&w, &source, &next);
        w.disk.forgive_io_time();
        w.planted.insert(next.clone());
    }
    let client = lock(&s.world).node.clone().expect("up").client(100);
    let create = cairn_engine::node::ops::MetaOp::CreatePartitions(
        iggy_binary_protocol::requests::partitions::CreatePartitionsRequest {
            stream_id: iggy_binary_protocol::WireIdentifier::numeric(0),
            topic_id: iggy_binary_protocol::WireIdentifier::numeric(0),
            partitions_count: 1,
        },
    );
    let created = super::block(&mut s.executor, async move { client.execute(create).await })
        .expect("answered");
    assert!(
        holds_a_log(&lock(&s.world), &next),
        "the planted copy is kept"
    );
    assert_eq!(s.journal_len(), journaled, "nothing was journaled");
    match created {
        Err(cairn_engine::node::NodeError::DirectoryInTheWay(_)) => Ok(vec!["DirectoryInTheWay"]),
        other => Err(crate::report::violation(
            crate::report::INV_JUSTIFIED,
            format!("adding a partition over a planted directory answered {other:?}"),
        )),
    }
}

/// Whether `dir` still holds a segment log file.
fn holds_a_log(w: &NodeWorld, dir: &Path) -> bool {
    w.disk
        .paths_under(dir)
        .iter()
        .any(|p| p.to_string_lossy().ends_with(".log"))
}

/// While the node serves, an operator copies partition 1's directory over partition 0's. A
/// purge of the topic finds another partition's identity where it replaces partition 0: it
/// keeps that directory and fences the partition, rather than remove what it did not make.
fn a_purge_keeps_a_directory_of_another_identity() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0010);
    s.with_persisted_topic(2)?;
    s.produce_n(4)?;
    let dir = |p| cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, p);
    {
        let w = lock(&s.world);
        cairn_engine::env::Disk::remove_dir_all(&w.disk, &dir(0)).expect("remove");
        copy_tree(&w, &dir(1), &dir(0));
        w.disk.forgive_io_time();
    }
    let world = s.world.clone();
    let client = lock(&world).node.clone().expect("up").client(100);
    let purge = cairn_engine::node::ops::MetaOp::PurgeTopic(
        iggy_binary_protocol::requests::topics::PurgeTopicRequest {
            stream_id: iggy_binary_protocol::WireIdentifier::numeric(0),
            topic_id: iggy_binary_protocol::WireIdentifier::numeric(0),
        },
    );
    let info = super::block(&mut s.executor, async move {
        client
            .execute(purge)
            .await
            .expect("the purge is journaled and done");
        client.partition_info((0, 0, 0)).await
    })
    .expect("the purge and the look finish");
    assert!(holds_a_log(&lock(&s.world), &dir(0)), "the copy is kept");
    match info.ok().flatten().and_then(|i| i.fence) {
        Some(cairn_engine::partition::FenceReason::SuperblockIdentity { .. }) => {
            Ok(vec!["SuperblockIdentity"])
        }
        other => Err(crate::report::violation(
            crate::report::INV_JUSTIFIED,
            format!(
                "after the purge partition 0 is fenced by {other:?}, not for the identity it found"
            ),
        )),
    }
}

/// While the node serves, an operator plants a copy of topic 1's partition under topic 0
/// (a partition id no op made). Deleting topic 0 removes its own partitions and keeps the
/// directory it cannot account for, with the topic directory holding it.
fn a_topic_deletion_keeps_a_directory_of_another_identity() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0011);
    s.with_two_persisted_topics()?;
    s.produce_n(4)?;
    let planted = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 7);
    {
        let mut w = lock(&s.world);
        let source = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 1, 0);
        copy_tree(&w, &source, &planted);
        w.disk.forgive_io_time();
        w.planted.insert(planted.clone());
    }
    s.perform(AdminOp::DeleteTopic(0, 0))?;
    let w = lock(&s.world);
    assert!(holds_a_log(&w, &planted), "the planted copy is kept");
    let own = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 0);
    assert!(
        !cairn_engine::env::Disk::exists(&w.disk, &own).unwrap_or(true),
        "the deleted topic's own partition is removed"
    );
    drop(w);
    Ok(s.decisions())
}

/// Every directed node scenario.
pub const NODE_SCENARIOS: &[NodeDirected] = &[
    NodeDirected {
        name: "a_create_refuses_a_directory_in_the_way",
        expect: &["DirectoryInTheWay"],
        run: a_create_refuses_a_directory_in_the_way,
    },
    NodeDirected {
        name: "a_rotten_snapshot_beside_a_later_temporary_one_refuses_boot",
        expect: &["BootRefused", "meta:SnapshotMismatch"],
        run: a_rotten_snapshot_beside_a_later_temporary_one_refuses_boot,
    },
    NodeDirected {
        name: "a_purge_keeps_a_directory_of_another_identity",
        expect: &["SuperblockIdentity"],
        run: a_purge_keeps_a_directory_of_another_identity,
    },
    NodeDirected {
        name: "a_topic_deletion_keeps_a_directory_of_another_identity",
        expect: &["EntityDeleted"],
        run: a_topic_deletion_keeps_a_directory_of_another_identity,
    },
    NodeDirected {
        name: "a_redone_group_deletion_keeps_another_topics_group_of_that_id",
        expect: &["DirWorkRedone"],
        run: a_redone_group_deletion_keeps_another_topics_group_of_that_id,
    },
    NodeDirected {
        name: "a_segment_exactly_as_old_as_the_expiry_is_kept",
        expect: &["RetentionDeletion"],
        run: a_segment_exactly_as_old_as_the_expiry_is_kept,
    },
    NodeDirected {
        name: "another_entry_at_the_durable_end_refuses_boot",
        expect: &["BootRefused", "meta:JournalChainBroken"],
        run: another_entry_at_the_durable_end_refuses_boot,
    },
    NodeDirected {
        name: "a_purge_cut_short_before_its_work_is_redone",
        expect: &["DirWorkRedone"],
        run: a_purge_cut_short_before_its_work_is_redone,
    },
    NodeDirected {
        name: "a_slot_holding_the_other_slots_record_refuses_boot",
        expect: &["BootRefused", "meta:SuperblockMisplaced"],
        run: a_slot_holding_the_other_slots_record_refuses_boot,
    },
    NodeDirected {
        name: "every_superblock_copy_rotten_refuses_boot",
        expect: &["BootRefused", "meta:NoSuperblock"],
        run: every_superblock_copy_rotten_refuses_boot,
    },
    NodeDirected {
        name: "rot_before_a_later_whole_entry_is_interior_corruption",
        expect: &["BootRefused", "meta:JournalInteriorCorruption"],
        run: rot_before_a_later_whole_entry_is_interior_corruption,
    },
    NodeDirected {
        name: "deleting_a_stream_keeps_the_other_streams_members",
        expect: &["GroupRebalance", "AssignmentsJudged"],
        run: deleting_a_stream_keeps_the_other_streams_members,
    },
    NodeDirected {
        name: "a_metadata_record_in_one_copy_is_written_again",
        expect: &["MetaSlotRepaired"],
        run: a_metadata_record_in_one_copy_is_written_again,
    },
    NodeDirected {
        name: "a_create_redone_after_a_lost_record_keeps_its_messages",
        expect: &["DirWorkRedone"],
        run: a_create_redone_after_a_lost_record_keeps_its_messages,
    },
    NodeDirected {
        name: "a_removal_superseded_by_a_re_creation_is_not_redone",
        expect: &["DirWorkRedone"],
        run: a_removal_superseded_by_a_re_creation_is_not_redone,
    },
    NodeDirected {
        name: "rot_in_an_entry_whose_work_began_is_refused",
        expect: &["BootRefused"],
        run: rot_in_an_entry_whose_work_began_is_refused,
    },
    NodeDirected {
        name: "a_removed_partition_directory_is_fenced",
        expect: &["DirectoryMissing"],
        run: a_removed_partition_directory_is_fenced,
    },
    NodeDirected {
        name: "a_copy_claiming_a_partitions_identity_fences_it_and_is_kept",
        expect: &["IdentityDuplicated"],
        run: a_copy_claiming_a_partitions_identity_fences_it_and_is_kept,
    },
    NodeDirected {
        name: "a_purge_keeps_a_directory_it_cannot_account_for",
        expect: &["DirectoryInTheWay"],
        run: a_purge_keeps_a_directory_it_cannot_account_for,
    },
];

//! Directed scenarios of the entity tree under `streams/`: directory work redone from the
//! journal, operators' removals, copies and debris, and what boot and the metadata owner
//! keep, report, fence or remove.

use super::*;

/// The superblock record after a topic's creation is lost (its sync lied, then the power
/// failed) after the new partition took acknowledged messages: boot replays the creation and
/// its directory work, which must find the partition there and keep it.
pub(super) fn a_create_redone_after_a_lost_record_keeps_its_messages() -> Checked<Vec<&'static str>>
{
    let mut s = Scenario::new(0x4e0d_0001);
    s.setup()?;
    s.perform(AdminOp::CreateStream("s".into()))?;
    s.lie_on_metadata_records(1);
    s.perform(persisted_topic(1))?;
    s.produce_then_lose_power(4)
}

/// The superblock records of a purge are lost (their syncs lied, then the power failed)
/// after the purged partition's new incarnation took acknowledged messages: boot replays
/// the purge, whose tree plan finds the new incarnation there already and keeps it (never
/// replacing it again), so its messages stay and it serves.
pub(super) fn a_purge_redone_after_a_lost_record_keeps_its_messages() -> Checked<Vec<&'static str>>
{
    let mut s = Scenario::new(0x4e0d_0033);
    s.with_persisted_topic(1)?;
    s.produce_n(2)?;
    s.lie_on_metadata_records(1);
    s.perform(AdminOp::PurgeTopic(0, 0))?;
    s.produce_then_lose_power(4)?;
    s.produce()?;
    Ok(s.decisions())
}

/// The records of a partition's removal and of its re-creation are both lost, after the
/// re-created partition took acknowledged messages: boot must not redo the removal.
pub(super) fn a_removal_superseded_by_a_re_creation_is_not_redone() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0003);
    s.with_persisted_topic(2)?;
    s.lie_on_metadata_records(2);
    s.perform(AdminOp::DeletePartitions(0, 0, 1))?;
    s.perform(AdminOp::CreatePartitions(0, 0, 1))?;
    s.produce_then_lose_power(6)
}

/// One batch deletes a topic's last partition and creates one in its place: the create
/// finds the old partition's directory there, which the batch's earlier removal takes away,
/// so it is not in the way (the metadata owner's `removed_before`). Both are acknowledged,
/// the new partition is a new incarnation, and it serves across a boot.
pub(super) fn a_partition_deleted_and_re_created_in_one_batch_is_not_in_its_own_way(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0010);
    // Room in the metadata inbox for both ops of the batch.
    lock(&s.world).profile.meta_inbox = 4;
    s.with_persisted_topic(2)?;
    s.produce_n(4)?;
    let identity = |s: &Scenario| {
        let w = lock(&s.world);
        w.model.identity(w.cluster, (0, 0, 1))
    };
    let old = identity(&s).expect("made");
    s.perform_in_one_batch(
        AdminOp::DeletePartitions(0, 0, 1),
        AdminOp::CreatePartitions(0, 0, 1),
    )?;
    match identity(&s) {
        Some(new) if new != old => {}
        other => {
            return Err(crate::report::violation(
                crate::node_world::INV_METADATA,
                format!("partition (0, 0, 1) deleted and created again in one batch: the model holds {other:?} (was {old:?}); the create was not acknowledged"),
            ))
        }
    }
    s.produce_n(4)?;
    s.restart(false)?;
    s.produce_n(2)?;
    Ok(s.decisions())
}

/// An operator removed a partition directory while the node was down: that partition is
/// fenced, never recreated empty; the others serve.
pub(super) fn a_removed_partition_directory_is_fenced() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0002);
    s.with_persisted_topic(2)?;
    s.produce_n(4)?;
    s.executor.kill_all();
    lock(&s.world).remove_partition_dir((0, 0, 1));
    s.restart(false)?;
    Ok(s.decisions())
}

/// The node crashes as a purge's directory work first touches the partition, after the
/// purge was journaled: boot finds the old incarnation at the path, which the journaled
/// purge replaces, and redoes the replacement (the old messages gone, the new incarnation
/// empty), rather than open the old directory as the new partition.
pub(super) fn a_purge_cut_short_before_its_work_is_redone() -> Checked<Vec<&'static str>> {
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

/// While the node is down an operator copies a partition's directory under a topic the
/// metadata never had: boot keeps the copy (it may be the only copy of acknowledged data),
/// never removes it, and fences the partition whose identity it claims.
pub(super) fn a_copy_claiming_a_partitions_identity_fences_it_and_is_kept(
) -> Checked<Vec<&'static str>> {
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
pub(super) fn a_purge_keeps_a_directory_it_cannot_account_for() -> Checked<Vec<&'static str>> {
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
    let (purged, sent) = crate::node_world::block(&mut s.executor, async move {
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

/// While the node serves, an operator plants a copy of partition 0's directory where the
/// topic's next partition will go. Adding a partition is refused (`DirectoryInTheWay`)
/// before anything is journaled, and the planted directory is left as it was.
pub(super) fn a_create_refuses_a_directory_in_the_way() -> Checked<Vec<&'static str>> {
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
    let created =
        crate::node_world::block(&mut s.executor, async move { client.execute(create).await })
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

/// While the node serves, an operator copies partition 1's directory over partition 0's. A
/// purge of the topic finds another partition's identity where it replaces partition 0: it
/// keeps that directory and fences the partition, rather than remove what it did not make.
pub(super) fn a_purge_keeps_a_directory_of_another_identity() -> Checked<Vec<&'static str>> {
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
    let info = crate::node_world::block(&mut s.executor, async move {
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
pub(super) fn a_topic_deletion_keeps_a_directory_of_another_identity() -> Checked<Vec<&'static str>>
{
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

/// Partition `p` of topic `t` in stream 0.
fn part_dir(t: u32, p: u32) -> std::path::PathBuf {
    cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, t, p)
}

/// `dir` is not on the disk; if it is, a violation saying it `outlived` (what happened).
fn gone(s: &Scenario, dir: &Path, outlived: &str) -> Checked<()> {
    match cairn_engine::env::Disk::exists(&lock(&s.world).disk, dir).unwrap_or(true) {
        true => Err(crate::report::violation(
            crate::report::INV_JUSTIFIED,
            format!("{} {outlived}", dir.display()),
        )),
        false => Ok(()),
    }
}

/// An operator makes directory `dir` (with its parents), durably.
fn plant_dir(w: &NodeWorld, dir: &Path) {
    use cairn_engine::env::Disk;
    w.disk.create_dir_all(dir).expect("mkdir");
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| d.starts_with(NODE_ROOT)) {
        w.disk.sync_dir(d).expect("sync dir");
        at = d.parent();
    }
    w.disk.forgive_io_time();
}

/// An operator writes `bytes` to file `path` (its directory made), durably.
fn plant_file(w: &NodeWorld, path: &Path, bytes: &[u8]) {
    use cairn_engine::env::{Disk, OpenMode};
    plant_dir(w, path.parent().expect("a parent"));
    let file = w.disk.open(path, OpenMode::CreateNew).expect("create");
    file.write_all_at(&[std::io::IoSlice::new(bytes)], 0)
        .expect("write");
    file.sync_data().expect("sync");
    w.disk
        .sync_dir(path.parent().expect("a parent"))
        .expect("sync dir");
    w.disk.forgive_io_time();
}

/// An operator's copy of partition `from`'s data at `to` without its superblocks: data no
/// identity names.
fn plant_identityless_copy(w: &NodeWorld, from: &Path, to: &Path) {
    use cairn_engine::env::Disk;
    copy_tree(w, from, to);
    for slot in ["superblock.a", "superblock.b"] {
        w.disk.remove_file(&to.join(slot)).expect("remove");
    }
    w.disk.sync_dir(to).expect("sync dir");
    w.disk.forgive_io_time();
}

/// After the last boot, `dir` is still there and the boot reported it: a partition path as
/// unaccounted, any other directory as kept.
fn kept_and_reported(s: &Scenario, dir: &Path) -> Checked<()> {
    use cairn_engine::node::tree::Fate;
    let w = lock(&s.world);
    let tree = w.last_tree.as_ref().expect("booted");
    let reported = tree
        .paths
        .iter()
        .any(|p| p.dir == dir && p.fate == Fate::Unaccounted)
        || tree.kept_dirs.iter().any(|d| d == dir);
    let kept = cairn_engine::env::Disk::exists(&w.disk, dir).unwrap_or(false);
    if kept && reported {
        return Ok(());
    }
    Err(crate::report::violation(
        crate::report::INV_JUSTIFIED,
        format!(
            "{}: an operator's directory, kept {kept}, reported {reported} (paths {:?}, kept {:?})",
            dir.display(),
            tree.paths
                .iter()
                .filter(|p| p.dir == dir)
                .map(|p| p.fate)
                .collect::<Vec<_>>(),
            tree.kept_dirs
        ),
    ))
}

/// Two partitions are removed and the records of the removal are lost at a power loss;
/// while the node is down an operator puts a directory with data and no identity at each
/// removed partition's own path (a segment log at one, only a consumer's offset file at the
/// other). Boot redoes the removal by identity: neither directory holds a removed identity,
/// so both are kept and reported, never removed.
pub(super) fn identityless_data_at_a_removed_partitions_path_is_kept() -> Checked<Vec<&'static str>>
{
    let mut s = Scenario::new(0x4e0d_0016);
    s.with_persisted_topic(3)?;
    s.produce_n(6)?;
    s.lie_on_metadata_records(1);
    s.perform(AdminOp::DeletePartitions(0, 0, 2))?;
    s.restart_after(true, |w| {
        assert!(!holds_a_log(w, &part_dir(0, 1)), "the removal was done");
        plant_identityless_copy(w, &part_dir(0, 0), &part_dir(0, 1));
        plant_file(
            w,
            &part_dir(0, 2).join("offsets").join("consumers").join("5"),
            &[7; 16],
        );
        w.planted.extend([part_dir(0, 1), part_dir(0, 2)]);
    })?;
    kept_and_reported(&s, &part_dir(0, 1))?;
    kept_and_reported(&s, &part_dir(0, 2))?;
    Ok(s.decisions())
}

/// As [`identityless_data_at_a_removed_partitions_path_is_kept`], but all the operator
/// leaves at the removed partition's path is a non-empty index: a file the engine makes and
/// never data (only segment logs and offset files are). The directory holds nothing to keep,
/// and boot's redone removal takes it away.
pub(super) fn an_index_alone_at_a_removed_partitions_path_is_removed() -> Checked<Vec<&'static str>>
{
    let mut s = Scenario::new(0x4e0d_002d);
    s.with_persisted_topic(2)?;
    s.produce_n(4)?;
    s.lie_on_metadata_records(1);
    s.perform(AdminOp::DeletePartitions(0, 0, 1))?;
    let dir = part_dir(0, 1);
    s.restart_after(true, |w| {
        assert!(!holds_a_log(w, &dir), "the removal was done");
        let index = cairn_engine::partition::segment::index_name(0);
        plant_file(w, &dir.join(index), &[7; 32]);
    })?;
    gone(
        &s,
        &dir,
        "holding only an index outlived the removal boot redid",
    )?;
    Ok(s.decisions())
}

/// While the node is down an operator makes an empty directory at a partition id no op
/// used, and an empty stream directory at an unused stream id. Boot keeps and reports
/// both: nothing accounts for them, and removing what nothing accounts for is never boot's.
pub(super) fn an_empty_directory_at_an_unused_id_is_reported() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0017);
    s.with_persisted_topic(1)?;
    s.produce_n(2)?;
    let stream = Path::new(NODE_ROOT).join("streams").join("9");
    s.restart_after(false, |w| {
        plant_dir(w, &part_dir(0, 5));
        plant_dir(w, &stream);
        w.planted.extend([part_dir(0, 5), stream.clone()]);
    })?;
    kept_and_reported(&s, &part_dir(0, 5))?;
    kept_and_reported(&s, &stream)?;
    s.produce()?;
    Ok(s.decisions())
}

/// While the node serves, an operator leaves a directory with data and no identity at an
/// unused partition id of topic 0; the node then crashes inside topic 0's deletion, as it
/// removes the topic's own partition. Boot redoes the deletion: it removes the partition,
/// keeps the operator's directory and the topic directory holding it, and reports both.
pub(super) fn a_directory_planted_in_a_topic_whose_deletion_crashed_is_kept(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0018);
    s.with_persisted_topic(1)?;
    s.produce_n(3)?;
    {
        let mut w = lock(&s.world);
        plant_identityless_copy(&w, &part_dir(0, 0), &part_dir(0, 7));
        w.planted.insert(part_dir(0, 7));
        w.disk.script(cairn_faults::Scripted::CrashOn(
            "topics/0/partitions/0".into(),
        ));
    }
    s.perform(AdminOp::DeleteTopic(0, 0))?;
    assert!(
        lock(&s.world).disk.is_crashed(),
        "the deletion's work crashed"
    );
    s.restart(false)?;
    kept_and_reported(&s, &part_dir(0, 7))?;
    kept_and_reported(
        &s,
        part_dir(0, 7)
            .parent()
            .and_then(Path::parent)
            .expect("topic"),
    )?;
    Ok(s.decisions())
}

/// While the node serves, an operator leaves an empty `topics/5` (no `partitions/` in it)
/// under stream 0; the stream is then deleted, its directory work done whole or (`crash`)
/// cut short by a crash and redone by boot. Either way the whole stream directory goes, the
/// empty topic directory with it (it holds nothing to keep), the node never stops on it
/// (a stop with no injected fault fails the run), and it serves on: a new stream and topic
/// take messages.
fn an_empty_topic_directory_under_a_deleted_stream(
    seed: u64,
    crash: bool,
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(seed);
    s.with_persisted_topic(1)?;
    s.produce_n(3)?;
    let stream = Path::new(NODE_ROOT).join("streams").join("0");
    {
        let w = lock(&s.world);
        plant_dir(&w, &stream.join("topics").join("5"));
        if crash {
            w.disk.script(cairn_faults::Scripted::CrashOn(
                "topics/0/partitions/0".into(),
            ));
        }
    }
    s.perform(AdminOp::DeleteStream(0))?;
    assert_eq!(
        lock(&s.world).disk.is_crashed(),
        crash,
        "the deletion's work crashed only when scripted to"
    );
    s.restart(false)?;
    gone(&s, &stream, "outlived its stream's deletion")?;
    s.perform(AdminOp::CreateStream("again".into()))?;
    s.perform(persisted_topic(1))?;
    s.produce_n(2)?;
    Ok(s.decisions())
}

pub(super) fn an_empty_topic_directory_under_a_deleted_stream_is_removed(
) -> Checked<Vec<&'static str>> {
    an_empty_topic_directory_under_a_deleted_stream(0x4e0d_0019, true)
}

pub(super) fn an_empty_topic_directory_under_a_stream_deleted_whole_is_removed(
) -> Checked<Vec<&'static str>> {
    an_empty_topic_directory_under_a_deleted_stream(0x4e0d_001d, false)
}

/// While the node serves, an operator leaves a directory with data and no identity at an
/// unused partition id of topic 0; stream 0 (topics 0 and 1) is then deleted, its directory
/// work done whole or (`crash`) cut short and redone by boot. The deletion keeps the
/// operator's directory with the directories holding it, and removes all it deleted: topic
/// 1's directory too, since every partition directory in it was removed. The boot after
/// keeps and reports the operator's directory and reports nothing else.
fn a_stream_deletion_keeping_data_removes_its_emptied_topics(
    seed: u64,
    crash: bool,
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(seed);
    s.with_two_persisted_topics()?;
    s.produce_n(4)?;
    {
        let mut w = lock(&s.world);
        let log = cairn_engine::partition::segment::log_name(0);
        plant_file(&w, &part_dir(0, 7).join(log), &[7; 64]);
        w.planted.insert(part_dir(0, 7));
        // Beside the topics, a directory that is no topic's (its name is no id).
        plant_file(&w, &notes().join("readme"), b"an operator's notes");
        w.planted.insert(notes());
        if crash {
            w.disk.script(cairn_faults::Scripted::CrashOn(
                "topics/1/partitions/0".into(),
            ));
        }
    }
    s.perform(AdminOp::DeleteStream(0))?;
    assert_eq!(
        lock(&s.world).disk.is_crashed(),
        crash,
        "the deletion's work crashed as scripted"
    );
    s.restart(false)?;
    kept_and_reported(&s, &part_dir(0, 7))?;
    let emptied = part_dir(1, 0)
        .parent()
        .and_then(Path::parent)
        .expect("topic")
        .to_path_buf();
    gone(
        &s,
        &emptied,
        "outlived its stream's deletion, though every partition directory in it was removed",
    )?;
    s.restart(false)?;
    kept_and_reported(&s, &part_dir(0, 7))?;
    if !cairn_engine::env::Disk::exists(&lock(&s.world).disk, &notes().join("readme"))
        .unwrap_or(false)
    {
        return Err(crate::report::violation(
            crate::report::INV_JUSTIFIED,
            format!(
                "{} (no topic's: its name is no id) was removed with its stream's emptied topics",
                notes().display()
            ),
        ));
    }
    Ok(s.decisions())
}

/// A directory an operator left among stream 0's topic directories, named as no topic is.
fn notes() -> std::path::PathBuf {
    part_dir(0, 0)
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("the topics directory")
        .join("notes")
}

/// While the node serves, an operator leaves a directory with data and no identity at an
/// unused partition id of stream 1's topic; stream 0 is then deleted, and the node crashes
/// inside its directory work. Boot redoes the deletion: stream 0's directory goes whole (the
/// operator's data is another stream's, and keeps only its own stream's directory), and
/// the operator's directory is kept and reported.
pub(super) fn a_deleted_stream_goes_whole_beside_another_streams_debris(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0034);
    s.with_two_streams(1)?;
    s.produce_n(4)?;
    let root = Path::new(NODE_ROOT);
    let planted = cairn_engine::partition::partition_dir(root, 1, 0, 7);
    {
        let mut w = lock(&s.world);
        let log = cairn_engine::partition::segment::log_name(0);
        plant_file(&w, &planted.join(log), &[7; 64]);
        w.planted.insert(planted.clone());
        w.disk.script(cairn_faults::Scripted::CrashOn(
            "streams/0/topics/0/partitions/0".into(),
        ));
    }
    s.perform(AdminOp::DeleteStream(0))?;
    assert!(
        lock(&s.world).disk.is_crashed(),
        "the deletion's work crashed"
    );
    s.restart(false)?;
    kept_and_reported(&s, &planted)?;
    gone(
        &s,
        &cairn_engine::node::tree::stream_dir(root, 0),
        "outlived its deletion, though nothing in it was kept",
    )?;
    Ok(s.decisions())
}

/// [`a_stream_deletion_keeping_data_removes_its_emptied_topics`], the work done whole.
pub(super) fn a_stream_deletion_keeping_data_removes_its_emptied_topics_done(
) -> Checked<Vec<&'static str>> {
    a_stream_deletion_keeping_data_removes_its_emptied_topics(0x4e0d_0022, false)
}

/// [`a_stream_deletion_keeping_data_removes_its_emptied_topics`], the work redone at boot.
pub(super) fn a_stream_deletion_keeping_data_removes_its_emptied_topics_redone(
) -> Checked<Vec<&'static str>> {
    a_stream_deletion_keeping_data_removes_its_emptied_topics(0x4e0d_0023, true)
}

/// While the node serves, an operator leaves an empty directory and one with data in topic 2
/// (a topic with no partitions, so none of the metadata's partitions' directories is synced
/// at boot beneath it); stream 0 is then deleted, keeping the data and the directories
/// holding it. Its work removes the empty directory and the node crashes before that
/// removal's sync: the boot after no longer
/// sees the directory, though its removal is only in the cache, and records the work done.
/// A power loss after that boot must not bring the directory back (seed 0x3f5489253): boot
/// syncs every directory a journaled deletion may have changed, whatever it finds there.
pub(super) fn an_operators_directory_removed_before_a_crash_stays_removed(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0029);
    s.with_two_persisted_topics()?;
    s.perform(AdminOp::CreateTopic {
        stream: 0,
        name: "c".into(),
        partitions: 0,
        persisted: true,
        offsets_persisted: true,
        expiry: 0,
        max_size: 0,
    })?;
    s.produce_n(3)?;
    let empty = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 2, 3);
    {
        let mut w = lock(&s.world);
        let log = cairn_engine::partition::segment::log_name(0);
        plant_file(&w, &part_dir(2, 7).join(log), &[7; 64]);
        w.planted.insert(part_dir(2, 7));
        // Not among `planted`: once removed, nothing may make it again.
        plant_dir(&w, &empty);
        w.disk.script(cairn_faults::Scripted::CrashOnCall {
            call: cairn_faults::Call::Sync,
            part: "topics/2/partitions".into(),
        });
    }
    s.perform(AdminOp::DeleteStream(0))?;
    assert!(
        lock(&s.world).disk.is_crashed(),
        "the deletion's work crashed before syncing the removal"
    );
    s.restart(false)?;
    s.restart_after(true, |_| {})?;
    kept_and_reported(&s, &part_dir(2, 7))?;
    gone(
        &s,
        &empty,
        "came back at a power loss after the boot that recorded its removal done",
    )?;
    Ok(s.decisions())
}

/// While the node is down an operator replaces partition 0's directory with a copy of
/// partition 1's. No journaled op touched that path, so boot opens what it finds and fences
/// partition 0, whose superblock names another identity (`SuperblockIdentity`): the copy is
/// kept byte for byte, never replaced by a fresh partition 0 (only an op after the applied one may
/// replace another identity's directory).
pub(super) fn a_sibling_copied_over_a_partition_is_fenced_and_kept() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_001f);
    s.with_persisted_topic(2)?;
    s.produce_n(4)?;
    s.executor.kill_all();
    let target = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 0);
    let sibling = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 1);
    let copied = {
        let mut w = lock(&s.world);
        w.remove_partition_dir((0, 0, 0));
        copy_tree(&w, &sibling, &target);
        w.planted.insert(target.clone());
        files_under(&w, &target)
    };
    assert!(
        copied.keys().any(|p| p.to_string_lossy().ends_with(".log")),
        "the copy holds a log"
    );
    s.restart(false)?;
    let kept = files_under(&lock(&s.world), &target);
    if kept != copied {
        return Err(crate::report::violation(
            crate::report::INV_JUSTIFIED,
            format!(
                "boot changed the copy at {}: it held {:?}, it holds {:?}",
                target.display(),
                copied.keys().collect::<Vec<_>>(),
                kept.keys().collect::<Vec<_>>()
            ),
        ));
    }
    Ok(s.decisions())
}

/// Every file under `dir` with its bytes.
fn files_under(
    w: &NodeWorld,
    dir: &Path,
) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    w.disk
        .paths_under(dir)
        .into_iter()
        .filter_map(|p| w.disk.contents(&p).map(|bytes| (p, bytes)))
        .collect()
}

/// One metadata batch holds a rename of stream 0 and an added partition whose directory an
/// operator planted: the rename is acknowledged, the add is refused late
/// (`DirectoryInTheWay`, after the batch staged it), and the published state is the state
/// before the batch with the rename alone applied again, which the quiescent comparison
/// checks field by field.
pub(super) fn a_late_refusal_in_a_batch_keeps_the_ops_before_it() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0020);
    // Room in the metadata inbox for both ops of the batch.
    lock(&s.world).profile.meta_inbox = 4;
    s.with_persisted_topic(1)?;
    s.produce_n(2)?;
    let next = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 1);
    {
        let mut w = lock(&s.world);
        let source = cairn_engine::partition::partition_dir(Path::new(NODE_ROOT), 0, 0, 0);
        copy_tree(&w, &source, &next);
        w.planted.insert(next.clone());
    }
    let world = s.world.clone();
    let node = lock(&world).node.clone().expect("up");
    let before = node.stats();
    let (renamer, adder) = (node.client(100), node.client(101));
    let create = cairn_engine::node::ops::MetaOp::CreatePartitions(
        iggy_binary_protocol::requests::partitions::CreatePartitionsRequest {
            stream_id: iggy_binary_protocol::WireIdentifier::numeric(0),
            topic_id: iggy_binary_protocol::WireIdentifier::numeric(0),
            partitions_count: 1,
        },
    );
    let created = crate::node_world::block(&mut s.executor, async move {
        let created = std::sync::Arc::new(Mutex::new(None));
        let answer = created.clone();
        both(
            async move {
                let rename = AdminOp::RenameStream(0, "renamed in a batch".into());
                crate::node_world::tasks::run_meta(&world, &renamer, 100, rename).await
            },
            async move { *answer.lock().expect("lock") = Some(adder.execute(create).await) },
        )
        .await;
        let answer = created.lock().expect("lock").take();
        answer
    })
    .flatten();
    s.violation()?;
    let after = node.stats();
    assert_eq!(
        after.meta_batches - before.meta_batches,
        1,
        "the scenario's two ops were staged in one batch"
    );
    assert!(
        holds_a_log(&lock(&s.world), &next),
        "the planted copy is kept"
    );
    match created {
        Some(Err(cairn_engine::node::NodeError::DirectoryInTheWay(_))) => {}
        other => {
            return Err(crate::report::violation(
                crate::report::INV_JUSTIFIED,
                format!("adding a partition over a planted directory answered {other:?}"),
            ))
        }
    }
    s.produce_n(2)?;
    let mut decisions = s.decisions();
    decisions.push("DirectoryInTheWay");
    Ok(decisions)
}

/// A node that served and stopped cleanly leaves a tree `cairn check` calls clean (it must
/// not cry wolf: an operator acts on its verdict), and calls clean again after a crash
/// whose boot finished the work.
pub(super) fn a_tree_with_nothing_amiss_checks_clean() -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0025);
    s.with_persisted_topic(2)?;
    s.produce_n(4)?;
    s.perform(AdminOp::CreateGroup(0, 0, "g".into()))?;
    s.perform(AdminOp::DeletePartitions(0, 0, 1))?;
    for power in [false, true] {
        s.restart(power)?;
        s.executor.kill_all();
        let w = lock(&s.world);
        let mut out = Vec::new();
        let clean = cairn_server::check::report(&w.disk, Path::new(NODE_ROOT), &mut out);
        w.disk.forgive_io_time();
        if !matches!(clean, Ok(true)) {
            return Err(crate::report::violation(
                crate::report::INV_JUSTIFIED,
                format!(
                    "cairn check of a tree with nothing amiss answered {clean:?}:\n{}",
                    String::from_utf8_lossy(&out)
                ),
            ));
        }
    }
    s.restart(false)?;
    let mut decisions = s.decisions();
    decisions.push("CheckedClean");
    Ok(decisions)
}

/// A node of one shard creates a topic of more partitions than the metadata owner keeps
/// queued on a shard (`WORK_PER_SHARD`): the partitions' work goes out a few items at a
/// time (the owner waits for the oldest answers before it sends more; review S11's bound on
/// how long another tenant's send waits behind a large create), every partition is made
/// and serves. With the bound not kept, the owner's own assertion that it made room before
/// sending fires (a survivor of mutation shard 7/12 at f713d75: `InFlight::room` → `Ok(())`;
/// the node world's creates hold at most 3 partitions, below the bound).
pub(super) fn a_large_create_sends_its_work_a_few_items_at_a_time() -> Checked<Vec<&'static str>> {
    const PARTITIONS: u32 = 3 * cairn_engine::node::WORK_PER_SHARD as u32 + 1;
    let mut s = Scenario::new(0x4e0d_0041);
    lock(&s.world).profile.shards = 1;
    s.setup()?;
    s.perform(AdminOp::CreateStream("s".into()))?;
    s.perform(super::persisted_topic(PARTITIONS))?;
    for p in 0..PARTITIONS {
        s.info((0, 0, p))?;
    }
    s.produce_n(3)?;
    Ok(s.decisions())
}

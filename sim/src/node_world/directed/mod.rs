//! Directed node scenarios: each a scripted fault schedule under the node oracle, reaching a
//! decision on purpose. Every step is a caller's operation run on the executor and judged
//! like the swarm's.
//!
//! Here: [`Scenario`] (a node on a fault-free disk and the steps scenarios take) and the
//! list [`NODE_SCENARIOS`]; the scenarios by concern in `journal` (the metadata plane's
//! boot rules), `tree` (the directories under `streams/`) and `serving` (retention and
//! consumer groups).

mod journal;
mod persists;
mod serving;
mod tree;

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

    /// Runs `first` and `second` as two admin callers at once, so that the metadata owner
    /// takes both into one batch (checked: one batch more, two ops more; the node's
    /// metadata inbox must hold both), each judged.
    fn perform_in_one_batch(&mut self, first: AdminOp, second: AdminOp) -> Checked<()> {
        let world = self.world.clone();
        let node = lock(&world).node.clone().expect("up");
        let before = node.stats();
        let (a, b) = (node.client(100), node.client(101));
        let (wa, wb) = (world.clone(), world.clone());
        super::block(&mut self.executor, async move {
            both(
                async move { run_meta(&wa, &a, 100, first).await },
                async move { run_meta(&wb, &b, 101, second).await },
            )
            .await;
        });
        self.violation()?;
        let after = node.stats();
        assert_eq!(
            (
                after.meta_batches - before.meta_batches,
                after.meta_ops - before.meta_ops
            ),
            (1, 2),
            "the scenario's two ops were journaled in one batch"
        );
        Ok(())
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
    fn restart_after(&mut self, power: bool, damage: impl FnOnce(&mut NodeWorld)) -> Checked<()> {
        self.executor.kill_all();
        {
            let mut w = lock(&self.world);
            if power {
                w.disk.set_fates(cairn_faults::Fates::DropAll);
            }
            w.go_down(power);
            damage(&mut w);
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

    /// Consumer `consumer`'s store of `offset` into partition `key`, judged.
    fn store(
        &mut self,
        key: cairn_engine::node::PartitionKey,
        consumer: u32,
        offset: u64,
    ) -> Checked<()> {
        let world = self.world.clone();
        let (client, plan) = {
            let w = lock(&world);
            let identity = w
                .model
                .identity(w.cluster, key)
                .expect("the scenario made it");
            let client = w.node.clone().expect("up").client(400);
            (client, (key, identity, offset, consumer, w.start()))
        };
        super::block(&mut self.executor, async move {
            crate::node_world::tasks::run_store(&world, &client, plan).await;
        });
        self.violation()
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

    /// The run's violation, if any; a node that stopped with no fault injected since it
    /// booted is one.
    fn violation(&self) -> Checked<()> {
        let w = lock(&self.world);
        if let Some(v) = w.violation.clone() {
            return Err(v);
        }
        match w.node.as_ref().and_then(|n| n.failure()) {
            Some(failure) if !w.failure_has_cause(&failure) => Err(crate::report::violation(
                crate::report::INV_LIVENESS,
                format!("the node stopped with no fault injected since it booted: {failure}"),
            )),
            _ => Ok(()),
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
            self.perform(persisted_topic_in(0, name, 1))?;
        }
        Ok(())
    }

    /// Streams 0 ("a") and 1 ("b"), each with topic 0 ("t") of `partitions` `persisted`
    /// partitions.
    fn with_two_streams(&mut self, partitions: u32) -> Checked<()> {
        self.setup()?;
        for (stream, name) in [(0, "a"), (1, "b")] {
            self.perform(AdminOp::CreateStream(name.into()))?;
            self.perform(persisted_topic_in(stream, "t", partitions))?;
        }
        Ok(())
    }

    /// The disk holds at most `room` more bytes than it uses now (`None`: no limit again),
    /// and the world knows it is full (so answers of no room are excused).
    fn fill_disk(&mut self, room: Option<u64>) {
        let mut w = lock(&self.world);
        let mut faults = w.disk.faults();
        faults.capacity = room.map(|room| w.disk.used_bytes() + room);
        w.disk.set_faults(faults);
        w.disk_full_until = room.map(|_| u32::MAX);
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

/// Awaits both futures, polled together (`first` first on each wake).
pub(crate) async fn both(
    first: impl std::future::Future<Output = ()>,
    second: impl std::future::Future<Output = ()>,
) {
    let (mut first, mut second) = (std::pin::pin!(first), std::pin::pin!(second));
    let (mut first_done, mut second_done) = (false, false);
    std::future::poll_fn(move |cx| {
        first_done = first_done || first.as_mut().poll(cx).is_ready();
        second_done = second_done || second.as_mut().poll(cx).is_ready();
        match first_done && second_done {
            true => std::task::Poll::Ready(()),
            false => std::task::Poll::Pending,
        }
    })
    .await
}

/// Awaits every future, all polled on each wake.
async fn every(mut futures: Vec<cairn_engine::env::BoxFuture<'static, ()>>) {
    std::future::poll_fn(move |cx| {
        futures.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        match futures.is_empty() {
            true => std::task::Poll::Ready(()),
            false => std::task::Poll::Pending,
        }
    })
    .await
}

/// Creating topic "t" in stream 0: `persisted` messages and offsets, no retention.
fn persisted_topic(partitions: u32) -> AdminOp {
    persisted_topic_in(0, "t", partitions)
}

/// Creating topic `name` in `stream`: `persisted` messages and offsets, no retention.
fn persisted_topic_in(stream: u32, name: &str, partitions: u32) -> AdminOp {
    AdminOp::CreateTopic {
        stream,
        name: name.into(),
        partitions,
        persisted: true,
        offsets_persisted: true,
        expiry: 0,
        max_size: 0,
    }
}

/// The metadata directory, and its files by name.
fn metadata(name: &str) -> std::path::PathBuf {
    super::oracle::journal_path().with_file_name(name)
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

/// Whether `dir` still holds a segment log file.
fn holds_a_log(w: &NodeWorld, dir: &Path) -> bool {
    w.disk
        .paths_under(dir)
        .iter()
        .any(|p| p.to_string_lossy().ends_with(".log"))
}

/// Every directed node scenario.
pub const NODE_SCENARIOS: &[NodeDirected] = &[
    NodeDirected {
        name: "a_large_create_sends_its_work_a_few_items_at_a_time",
        expect: &["QuiescentCompared"],
        run: tree::a_large_create_sends_its_work_a_few_items_at_a_time,
    },
    NodeDirected {
        name: "a_tree_with_nothing_amiss_checks_clean",
        expect: &["CheckedClean"],
        run: tree::a_tree_with_nothing_amiss_checks_clean,
    },
    NodeDirected {
        name: "a_group_id_freed_in_a_batch_is_reused_only_by_the_next",
        expect: &["DirWorkRedone"],
        run: serving::a_group_id_freed_in_a_batch_is_reused_only_by_the_next,
    },
    NodeDirected {
        name: "a_flood_of_metadata_ops_is_journaled_in_bounded_batches",
        expect: &["QuiescentCompared"],
        run: journal::a_flood_of_metadata_ops_is_journaled_in_bounded_batches,
    },
    NodeDirected {
        name: "a_lone_member_reads_its_partitions_in_turn",
        expect: &["GroupRoundRobin"],
        run: serving::a_lone_member_reads_its_partitions_in_turn,
    },
    NodeDirected {
        name: "an_io_error_in_a_checkpoint_stops_the_node",
        expect: &["MetaWriteFailed", "QuiescentCompared"],
        run: journal::an_io_error_in_a_checkpoint_stops_the_node,
    },
    NodeDirected {
        name: "a_snapshot_of_another_op_than_its_record_refuses_boot",
        expect: &["BootRefused", "meta:SnapshotContradicts"],
        run: journal::a_snapshot_of_another_op_than_its_record_refuses_boot,
    },
    NodeDirected {
        name: "an_entry_not_chained_to_the_snapshot_refuses_boot",
        expect: &["BootRefused", "meta:JournalChainBroken"],
        run: journal::an_entry_not_chained_to_the_snapshot_refuses_boot,
    },
    NodeDirected {
        name: "records_of_another_format_version_refuse_boot",
        expect: &["BootRefused", "meta:NoSuperblock"],
        run: journal::records_of_another_format_version_refuse_boot,
    },
    NodeDirected {
        name: "a_lost_newest_record_falls_back_to_the_one_before",
        expect: &["SnapshotReplay", "QuiescentCompared"],
        run: journal::a_lost_newest_record_falls_back_to_the_one_before,
    },
    NodeDirected {
        name: "a_sibling_copied_over_a_partition_is_fenced_and_kept",
        expect: &["SuperblockIdentity"],
        run: tree::a_sibling_copied_over_a_partition_is_fenced_and_kept,
    },
    NodeDirected {
        name: "a_late_refusal_in_a_batch_keeps_the_ops_before_it",
        expect: &["QuiescentCompared", "DirectoryInTheWay"],
        run: tree::a_late_refusal_in_a_batch_keeps_the_ops_before_it,
    },
    NodeDirected {
        name: "a_partition_deleted_and_re_created_in_one_batch_is_not_in_its_own_way",
        expect: &["QuiescentCompared"],
        run: tree::a_partition_deleted_and_re_created_in_one_batch_is_not_in_its_own_way,
    },
    NodeDirected {
        name: "a_checkpoint_cut_short_before_its_journal_cut_empties_the_journal",
        expect: &["TruncateJournal", "CheckpointCrash"],
        run: journal::a_checkpoint_cut_short_before_its_journal_cut_empties_the_journal,
    },
    NodeDirected {
        name: "rot_in_a_checkpoints_leftover_journal_empties_it",
        expect: &["TruncateJournal"],
        run: journal::rot_in_a_checkpoints_leftover_journal_empties_it,
    },
    NodeDirected {
        name: "a_torn_tail_after_a_checkpoint_keeps_the_ops_before_it",
        expect: &["TruncateJournal", "SnapshotReplay"],
        run: journal::a_torn_tail_after_a_checkpoint_keeps_the_ops_before_it,
    },
    NodeDirected {
        name: "a_header_committing_above_its_op_is_a_torn_tail",
        expect: &["TruncateJournal"],
        run: journal::a_header_committing_above_its_op_is_a_torn_tail,
    },
    NodeDirected {
        name: "a_header_with_a_view_is_a_torn_tail",
        expect: &["TruncateJournal"],
        run: journal::a_header_with_a_view_is_a_torn_tail,
    },
    NodeDirected {
        name: "a_header_of_another_group_is_a_torn_tail",
        expect: &["TruncateJournal"],
        run: journal::a_header_of_another_group_is_a_torn_tail,
    },
    NodeDirected {
        name: "a_header_of_op_zero_is_a_torn_tail",
        expect: &["TruncateJournal"],
        run: journal::a_header_of_op_zero_is_a_torn_tail,
    },
    NodeDirected {
        name: "an_entry_of_another_chain_refuses_boot",
        expect: &["BootRefused", "meta:JournalChainBroken"],
        run: journal::an_entry_of_another_chain_refuses_boot,
    },
    NodeDirected {
        name: "a_torn_entry_before_one_committing_below_it_is_a_torn_tail",
        expect: &["TruncateJournal"],
        run: journal::a_torn_entry_before_one_committing_below_it_is_a_torn_tail,
    },
    NodeDirected {
        name: "a_header_sized_beyond_any_body_is_a_torn_tail",
        expect: &["TruncateJournal"],
        run: journal::a_header_sized_beyond_any_body_is_a_torn_tail,
    },
    NodeDirected {
        name: "identityless_data_at_a_removed_partitions_path_is_kept",
        expect: &["DirWorkRedone"],
        run: tree::identityless_data_at_a_removed_partitions_path_is_kept,
    },
    NodeDirected {
        name: "an_index_alone_at_a_removed_partitions_path_is_removed",
        expect: &[],
        run: tree::an_index_alone_at_a_removed_partitions_path_is_removed,
    },
    NodeDirected {
        name: "an_empty_directory_at_an_unused_id_is_reported",
        expect: &[],
        run: tree::an_empty_directory_at_an_unused_id_is_reported,
    },
    NodeDirected {
        name: "a_directory_planted_in_a_topic_whose_deletion_crashed_is_kept",
        expect: &["DirWorkRedone"],
        run: tree::a_directory_planted_in_a_topic_whose_deletion_crashed_is_kept,
    },
    NodeDirected {
        name: "a_stream_deletion_keeping_data_removes_its_emptied_topics_done",
        expect: &[],
        run: tree::a_stream_deletion_keeping_data_removes_its_emptied_topics_done,
    },
    NodeDirected {
        name: "a_stream_deletion_keeping_data_removes_its_emptied_topics_redone",
        expect: &["DirWorkRedone"],
        run: tree::a_stream_deletion_keeping_data_removes_its_emptied_topics_redone,
    },
    NodeDirected {
        name: "a_deleted_stream_goes_whole_beside_another_streams_debris",
        expect: &["DirWorkRedone"],
        run: tree::a_deleted_stream_goes_whole_beside_another_streams_debris,
    },
    NodeDirected {
        name: "an_operators_directory_removed_before_a_crash_stays_removed",
        expect: &["DirWorkRedone"],
        run: tree::an_operators_directory_removed_before_a_crash_stays_removed,
    },
    NodeDirected {
        name: "an_empty_topic_directory_under_a_deleted_stream_is_removed",
        expect: &["DirWorkRedone"],
        run: tree::an_empty_topic_directory_under_a_deleted_stream_is_removed,
    },
    NodeDirected {
        name: "an_empty_topic_directory_under_a_stream_deleted_whole_is_removed",
        expect: &["EntityDeleted"],
        run: tree::an_empty_topic_directory_under_a_stream_deleted_whole_is_removed,
    },
    NodeDirected {
        name: "polls_past_a_full_parking_are_answered_busy",
        expect: &["ParkingFull"],
        run: serving::polls_past_a_full_parking_are_answered_busy,
    },
    NodeDirected {
        name: "a_login_outlived_by_its_password_refuses",
        expect: &["LoginOutlivedUserChange"],
        run: serving::a_login_outlived_by_its_password_refuses,
    },
    NodeDirected {
        name: "a_group_re_created_after_a_lost_deletion_keeps_its_new_offsets",
        expect: &["DirWorkRedone", "EntityDeleted"],
        run: serving::a_group_re_created_after_a_lost_deletion_keeps_its_new_offsets,
    },
    NodeDirected {
        name: "a_journal_without_its_records_refuses_boot",
        expect: &["BootRefused", "meta:NoSuperblock"],
        run: journal::a_journal_without_its_records_refuses_boot,
    },
    NodeDirected {
        name: "a_snapshot_without_its_records_refuses_boot",
        expect: &["BootRefused", "meta:NoSuperblock"],
        run: journal::a_snapshot_without_its_records_refuses_boot,
    },
    NodeDirected {
        name: "a_freed_group_id_above_zero_is_reused_only_by_the_next",
        expect: &["DirWorkRedone"],
        run: serving::a_freed_group_id_above_zero_is_reused_only_by_the_next,
    },
    NodeDirected {
        name: "a_poll_racing_its_groups_deletion_leaves_no_offset",
        expect: &["AutoCommitRacedGroupDeletion", "QuiescentCompared"],
        run: serving::a_poll_racing_its_groups_deletion_leaves_no_offset,
    },
    NodeDirected {
        name: "a_group_deletion_cut_short_has_its_offsets_removed_at_boot",
        expect: &["DirWorkRedone"],
        run: serving::a_group_deletion_cut_short_has_its_offsets_removed_at_boot,
    },
    NodeDirected {
        name: "a_create_refuses_a_directory_in_the_way",
        expect: &["DirectoryInTheWay"],
        run: tree::a_create_refuses_a_directory_in_the_way,
    },
    NodeDirected {
        name: "a_rotten_snapshot_beside_a_later_temporary_one_refuses_boot",
        expect: &["BootRefused", "meta:SnapshotMismatch"],
        run: journal::a_rotten_snapshot_beside_a_later_temporary_one_refuses_boot,
    },
    NodeDirected {
        name: "a_purge_keeps_a_directory_of_another_identity",
        expect: &["SuperblockIdentity"],
        run: tree::a_purge_keeps_a_directory_of_another_identity,
    },
    NodeDirected {
        name: "a_topic_deletion_keeps_a_directory_of_another_identity",
        expect: &["EntityDeleted"],
        run: tree::a_topic_deletion_keeps_a_directory_of_another_identity,
    },
    NodeDirected {
        name: "a_redone_group_deletion_keeps_another_topics_group_of_that_id",
        expect: &["DirWorkRedone"],
        run: serving::a_redone_group_deletion_keeps_another_topics_group_of_that_id,
    },
    NodeDirected {
        name: "a_segment_exactly_as_old_as_the_expiry_is_kept",
        expect: &["RetentionDeletion"],
        run: serving::a_segment_exactly_as_old_as_the_expiry_is_kept,
    },
    NodeDirected {
        name: "persists_of_one_round_run_at_once_each_answering_its_own",
        expect: &["ConcurrentPersists"],
        run: persists::persists_of_one_round_run_at_once_each_answering_its_own,
    },
    NodeDirected {
        name: "a_persisted_offset_store_is_answered_only_after_its_directory_sync",
        expect: &[],
        run: persists::a_persisted_offset_store_is_answered_only_after_its_directory_sync,
    },
    NodeDirected {
        name: "a_send_overlapping_the_record_before_it_is_answered_by_its_own",
        expect: &["PersistPipelined"],
        run: persists::a_send_overlapping_the_record_before_it_is_answered_by_its_own,
    },
    NodeDirected {
        name: "a_send_a_failed_persist_sealed_is_acknowledged",
        expect: &[],
        run: serving::a_send_a_failed_persist_sealed_is_acknowledged,
    },
    NodeDirected {
        name: "a_topic_over_its_size_and_without_an_expiry_is_cut_to_size",
        expect: &["RetentionDeletion"],
        run: serving::a_topic_over_its_size_and_without_an_expiry_is_cut_to_size,
    },
    NodeDirected {
        name: "refusals_before_a_journal_write_without_room_keep_their_answers",
        // Its ops bypass the world's judges: the no-space answer is checked in place.
        expect: &[],
        run: journal::refusals_before_a_journal_write_without_room_keep_their_answers,
    },
    NodeDirected {
        name: "another_entry_at_the_durable_end_refuses_boot",
        expect: &["BootRefused", "meta:JournalChainBroken"],
        run: journal::another_entry_at_the_durable_end_refuses_boot,
    },
    NodeDirected {
        name: "a_purge_cut_short_before_its_work_is_redone",
        expect: &["DirWorkRedone"],
        run: tree::a_purge_cut_short_before_its_work_is_redone,
    },
    NodeDirected {
        name: "a_slot_holding_the_other_slots_record_refuses_boot",
        expect: &["BootRefused", "meta:SuperblockMisplaced"],
        run: journal::a_slot_holding_the_other_slots_record_refuses_boot,
    },
    NodeDirected {
        name: "every_superblock_copy_rotten_refuses_boot",
        expect: &["BootRefused", "meta:NoSuperblock"],
        run: journal::every_superblock_copy_rotten_refuses_boot,
    },
    NodeDirected {
        name: "rot_before_a_later_whole_entry_is_interior_corruption",
        expect: &["BootRefused", "meta:JournalInteriorCorruption"],
        run: journal::rot_before_a_later_whole_entry_is_interior_corruption,
    },
    NodeDirected {
        name: "deleting_a_stream_keeps_the_other_streams_members",
        expect: &["GroupRebalance", "AssignmentsJudged"],
        run: serving::deleting_a_stream_keeps_the_other_streams_members,
    },
    NodeDirected {
        name: "a_metadata_record_in_one_copy_is_written_again",
        expect: &["MetaSlotRepaired"],
        run: journal::a_metadata_record_in_one_copy_is_written_again,
    },
    NodeDirected {
        name: "a_create_redone_after_a_lost_record_keeps_its_messages",
        expect: &["DirWorkRedone"],
        run: tree::a_create_redone_after_a_lost_record_keeps_its_messages,
    },
    NodeDirected {
        name: "a_purge_redone_after_a_lost_record_keeps_its_messages",
        expect: &["DirWorkRedone"],
        run: tree::a_purge_redone_after_a_lost_record_keeps_its_messages,
    },
    NodeDirected {
        name: "a_removal_superseded_by_a_re_creation_is_not_redone",
        expect: &["DirWorkRedone"],
        run: tree::a_removal_superseded_by_a_re_creation_is_not_redone,
    },
    NodeDirected {
        name: "rot_in_an_entry_whose_work_began_is_refused",
        expect: &["BootRefused"],
        run: journal::rot_in_an_entry_whose_work_began_is_refused,
    },
    NodeDirected {
        name: "a_removed_partition_directory_is_fenced",
        expect: &["DirectoryMissing"],
        run: tree::a_removed_partition_directory_is_fenced,
    },
    NodeDirected {
        name: "a_copy_claiming_a_partitions_identity_fences_it_and_is_kept",
        expect: &["IdentityDuplicated"],
        run: tree::a_copy_claiming_a_partitions_identity_fences_it_and_is_kept,
    },
    NodeDirected {
        name: "a_purge_keeps_a_directory_it_cannot_account_for",
        expect: &["DirectoryInTheWay"],
        run: tree::a_purge_keeps_a_directory_it_cannot_account_for,
    },
];

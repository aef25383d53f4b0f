//! Directed scenarios of a shard's persists: the partitions of one round persisted at once.

use super::serving::{send_at_once_to, send_staggered, sized_batch, Answer};
use super::Scenario;
use crate::node_world::lock;
use crate::report::Checked;

/// Two sends to two `persisted` partitions of one shard, in its inbox together: one round,
/// whose persists run at once as jobs of their own. Neither log has room for its send, so
/// neither may be acknowledged; each is answered by its own persist, never by the other's
/// (the canary `ack-with-first-persist` answers the one still in flight as durable when the
/// first fails, and its persist then rolls back what it acknowledged). Then room for one of
/// two more: exactly one is acknowledged, and kept.
pub(super) fn persists_of_one_round_run_at_once_each_answering_its_own(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0040);
    // One shard holds both partitions.
    lock(&s.world).profile.shards = 1;
    s.with_persisted_topic(2)?;
    // No room for either log's write: both persists fail and roll their sends back.
    s.fill_disk(Some(0));
    let before = lock(&s.world).node.clone().expect("up").stats();
    let batches = (0..2).map(|p| (p, sized_batch(&s, 1, 100))).collect();
    let answers = send_at_once_to(&mut s, batches)?;
    let after = lock(&s.world).node.clone().expect("up").stats();
    assert_eq!(
        (
            after.concurrent_persists - before.concurrent_persists,
            after.persist_jobs - before.persist_jobs
        ),
        (1, 2),
        "the two partitions persisted in one round, at once, each a job"
    );
    lock(&s.world).decision("ConcurrentPersists");
    s.fill_disk(None);
    // The oracle judges what the power loss left of what was acknowledged.
    s.restart_after(true, |_| {})?;
    if answers.iter().any(|a| matches!(a, Answer::Acked { .. })) {
        return Err(crate::report::violation(
            crate::node_world::INV_CALLERS,
            format!("two sends that found no room were answered {answers:?}: one acknowledged"),
        ));
    }
    // Room for one of two: whichever job writes first is acknowledged and survives the
    // power loss, the other is refused; neither is answered with the other's result.
    let batches: Vec<_> = (0..2).map(|p| (p, sized_batch(&s, 1, 100))).collect();
    let len = batches[0].1 .0.len() as u64;
    s.fill_disk(Some(len + 16 + len / 2));
    let answers = send_at_once_to(&mut s, batches)?;
    s.fill_disk(None);
    s.restart_after(true, |_| {})?;
    let acked = answers
        .iter()
        .filter(|a| matches!(a, Answer::Acked { durable: true, .. }))
        .count();
    let refused = answers.iter().filter(|a| **a == Answer::NoSpace).count();
    if (acked, refused) != (1, 1) {
        return Err(crate::report::violation(
            crate::node_world::INV_CALLERS,
            format!("two sends at once with room for one were answered {answers:?}: not one acknowledged and one refused"),
        ));
    }
    Ok(s.decisions())
}

/// A send that reaches its shard while the record of the send before it is being written:
/// its write and log sync overlap that record (the pipeline), and it is answered only once a
/// record of its own names it. Device jobs wait 5 ms for their thread here and the second
/// send leaves 1 ms after the first, so the first send's record returns while the second's
/// log sync still waits; a power loss right after both are answered keeps both (the canary `ack-before-log-sync` answers the second when
/// the first's record returns, and the power loss takes it before its sync ran).
pub(super) fn a_send_overlapping_the_record_before_it_is_answered_by_its_own(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0051);
    lock(&s.world).profile.shards = 1;
    lock(&s.world).profile.pipeline_records = true;
    s.with_persisted_topic(1)?;
    // Disk calls of at most 50 µs: the first send's sync and record take well under the
    // millisecond before the second is sent, whose job then waits past that record's return.
    lock(&s.world).disk.set_latency_debt(2_000, 50_000);
    s.executor
        .handle()
        .set_device_queue(std::time::Duration::from_millis(5));
    let before = lock(&s.world).node.clone().expect("up").stats();
    let (first, second) = (sized_batch(&s, 1, 100), sized_batch(&s, 1, 100));
    let answers = send_staggered(&mut s, vec![(0, 0, first), (1_000_000, 0, second)])?;
    let after = lock(&s.world).node.clone().expect("up").stats();
    assert!(
        after.pipelined_persists > before.pipelined_persists,
        "the second send's log sync began while the first's record was out"
    );
    lock(&s.world).decision("PersistPipelined");
    // The oracle judges what the power loss left of what was acknowledged.
    s.restart_after(true, |_| {})?;
    match answers[..] {
        [Answer::Acked { durable: true, .. }, Answer::Acked { durable: true, .. }] => {
            Ok(s.decisions())
        }
        _ => Err(crate::report::violation(
            crate::node_world::INV_CALLERS,
            format!("two sends to a persisted partition with room answered {answers:?}"),
        )),
    }
}

/// A `persisted` offset store into an existing file waits for its round's directory sync
/// (`shard/stores`): here the node crashes at that sync and a power loss follows. The store
/// was never answered, so the offset before it or the new one may stand (the canary
/// `ack-offset-before-dir-sync` answers it before the sync, and the power loss takes its
/// rename back: invariant 5).
pub(super) fn a_persisted_offset_store_is_answered_only_after_its_directory_sync(
) -> Checked<Vec<&'static str>> {
    let mut s = Scenario::new(0x4e0d_0061);
    lock(&s.world).profile.shards = 1;
    s.with_persisted_topic(1)?;
    s.produce_n(3)?;
    // The consumer's file made (recorded, its directory synced at once).
    s.store((0, 0, 0), 0, 0)?;
    let root = std::path::Path::new(crate::node_world::NODE_ROOT);
    let dir = cairn_engine::partition::partition_dir(root, 0, 0, 0)
        .join("offsets")
        .join("consumers");
    lock(&s.world)
        .disk
        .script(cairn_faults::Scripted::CrashOnDirSync(dir));
    s.store((0, 0, 0), 0, 1)?;
    // The round ends (and reaches the sync) before or after the store's answer.
    s.sleep(std::time::Duration::from_millis(10));
    assert!(
        lock(&s.world).disk.is_crashed(),
        "the store reached its directory sync"
    );
    // The oracle judges the offset the power loss left against what the store was told.
    s.restart_after(true, |_| {})?;
    Ok(s.decisions())
}

//! The boot table of the module doc, case by case, on a real disk.
use super::*;
use crate::types::Entry;
use openraft::storage::RaftLogStorage;
use openraft::EntryPayload;

const CLUSTER: u128 = 7;

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: LogId::new(LeaderId { term, node_id: 1 }, index),
        payload: EntryPayload::Blank,
    }
}

fn open(env: &Env, dir: &Path, member: MemberId) -> Result<LogStore, LogOpenError> {
    cairn_engine::env::real::block_on(LogStore::open(env, dir, CLUSTER, member))
}

fn append(store: &mut LogStore, entries: Vec<Entry>) {
    cairn_engine::env::real::block_on(store.append(entries, IOFlushed::noop())).unwrap();
}

fn indexes(store: &LogStore) -> Vec<u64> {
    store.lock().places.keys().copied().collect()
}

fn segment(dir: &Path) -> PathBuf {
    dir.join(segment_name(0))
}

fn setup() -> (tempfile::TempDir, Env, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let env = cairn_engine::env::real::env().unwrap();
    let dir = tmp.path().join("group");
    (tmp, env, dir)
}

#[test]
fn entries_and_vote_survive_a_reopen() {
    let (_tmp, env, dir) = setup();
    let mut store = open(&env, &dir, 1).unwrap();
    append(&mut store, (0..5).map(|i| entry(1, i)).collect());
    cairn_engine::env::real::block_on(store.save_vote(&Vote::new(2, 3))).unwrap();
    drop(store);
    let store = open(&env, &dir, 1).unwrap();
    assert_eq!(indexes(&store), vec![0, 1, 2, 3, 4]);
    assert_eq!(store.summary().0, Some(Vote::new(2, 3)));
}

#[test]
fn a_torn_tail_past_the_synced_position_is_cut_and_appends_follow_it() {
    let (_tmp, env, dir) = setup();
    let mut store = open(&env, &dir, 1).unwrap();
    append(&mut store, (0..3).map(|i| entry(1, i)).collect());
    drop(store);
    let file = env.disk.open(&segment(&dir), OpenMode::ReadWrite).unwrap();
    let len = file.len().unwrap();
    let half = &encode_record::<MetaConfig>(&entry(1, 3)).unwrap()[..15];
    file.write_all_at(&[io::IoSlice::new(half)], len).unwrap();
    let mut store = open(&env, &dir, 1).unwrap();
    assert_eq!(indexes(&store), vec![0, 1, 2]);
    assert_eq!(file.len().unwrap(), len, "the torn record was cut");
    append(&mut store, vec![entry(1, 3)]);
    drop(store);
    assert_eq!(indexes(&open(&env, &dir, 1).unwrap()), vec![0, 1, 2, 3]);
}

#[test]
fn whole_records_past_the_synced_position_are_kept() {
    let (_tmp, env, dir) = setup();
    let mut store = open(&env, &dir, 1).unwrap();
    append(&mut store, (0..3).map(|i| entry(1, i)).collect());
    // The crash came after the records' sync and before the state record said so.
    {
        let mut inner = store.lock();
        inner.durable.synced = inner.places[&1].offset;
        inner.write_state().unwrap();
    }
    drop(store);
    let mut store = open(&env, &dir, 1).unwrap();
    assert_eq!(indexes(&store), vec![0, 1, 2]);
    append(&mut store, vec![entry(1, 3)]);
    drop(store);
    assert_eq!(indexes(&open(&env, &dir, 1).unwrap()), vec![0, 1, 2, 3]);
}

#[test]
fn damage_in_synced_bytes_refuses_the_boot() {
    let (_tmp, env, dir) = setup();
    let mut store = open(&env, &dir, 1).unwrap();
    append(&mut store, (0..3).map(|i| entry(1, i)).collect());
    drop(store);
    let file = env.disk.open(&segment(&dir), OpenMode::ReadWrite).unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, 25).unwrap();
    byte[0] ^= 0x10;
    file.write_all_at(&[io::IoSlice::new(&byte)], 25).unwrap();
    assert!(matches!(
        open(&env, &dir, 1),
        Err(LogOpenError::Damaged { offset: 0, .. })
    ));
}

#[test]
fn synced_bytes_missing_refuse_the_boot() {
    let (_tmp, env, dir) = setup();
    let mut store = open(&env, &dir, 1).unwrap();
    append(&mut store, (0..3).map(|i| entry(1, i)).collect());
    drop(store);
    let file = env.disk.open(&segment(&dir), OpenMode::ReadWrite).unwrap();
    file.set_len(file.len().unwrap() - 1).unwrap();
    assert!(matches!(
        open(&env, &dir, 1),
        Err(LogOpenError::Damaged { .. })
    ));
}

#[test]
fn another_replicas_state_refuses_the_boot() {
    let (_tmp, env, dir) = setup();
    let id = open(&env, &dir, 1).unwrap().id();
    assert_eq!(member_of(id), 1);
    assert!(matches!(
        open(&env, &dir, 2),
        Err(LogOpenError::NotThisReplica { found_node, .. }) if found_node == id
    ));
}

#[test]
fn a_replica_keeps_its_incarnation_across_boots_and_a_new_one_draws_another() {
    let (_tmp, env, dir) = setup();
    let id = open(&env, &dir, 1).unwrap().id();
    assert_eq!(open(&env, &dir, 1).unwrap().id(), id);
    let other = tempfile::tempdir().unwrap();
    let again = open(&env, other.path(), 1).unwrap().id();
    assert_eq!(member_of(again), 1);
    assert_ne!(
        again, id,
        "a new replica of the same member is another Raft node"
    );
}

#[test]
fn a_lost_state_record_sets_the_files_aside_and_starts_a_new_replica() {
    let (_tmp, env, dir) = setup();
    let mut store = open(&env, &dir, 1).unwrap();
    let old = store.id();
    append(&mut store, vec![entry(1, 0), entry(1, 1)]);
    drop(store);
    env.disk.remove_file(&dir.join(STATE_FILE)).unwrap();
    let store = open(&env, &dir, 1).unwrap();
    // A new replica: another incarnation, no vote, no entries.
    assert_ne!(store.id(), old);
    assert_eq!(store.summary(), (None, None, None));
    let lost = store.set_aside().expect("the old files were set aside");
    assert_eq!(lost, dir.join(format!("lost-{:016x}", store.id())));
    let kept: Vec<String> = env
        .disk
        .read_dir(&lost)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(kept, vec![segment_name(0)]);
    // It stays that replica, with nothing set aside again.
    drop(store);
    let store = open(&env, &dir, 1).unwrap();
    assert!(store.set_aside().is_none());
    assert_eq!(indexes(&store), Vec::<u64>::new());
}

#[test]
fn a_state_record_damaged_in_both_copies_refuses_the_boot() {
    let (_tmp, env, dir) = setup();
    drop(open(&env, &dir, 1).unwrap());
    let file = env
        .disk
        .open(&dir.join(STATE_FILE), OpenMode::ReadWrite)
        .unwrap();
    for at in [0, slots::MIRROR_OFFSET] {
        file.write_all_at(&[io::IoSlice::new(&[0xff; 8])], at + 40)
            .unwrap();
    }
    assert!(matches!(
        open(&env, &dir, 1),
        Err(LogOpenError::StateDamaged { .. })
    ));
}

#[test]
fn a_truncation_is_durable_and_a_later_append_replaces_the_cut_entries() {
    let (_tmp, env, dir) = setup();
    let mut store = open(&env, &dir, 1).unwrap();
    append(&mut store, (0..5).map(|i| entry(1, i)).collect());
    cairn_engine::env::real::block_on(store.truncate_after(Some(entry(1, 2).log_id))).unwrap();
    assert_eq!(indexes(&store), vec![0, 1, 2]);
    append(&mut store, vec![entry(2, 3)]);
    drop(store);
    let store = open(&env, &dir, 1).unwrap();
    assert_eq!(indexes(&store), vec![0, 1, 2, 3]);
    assert_eq!(store.summary().2, Some(entry(2, 3).log_id));
}

#[test]
fn an_older_term_after_a_newer_one_is_a_tail_to_cut() {
    let (_tmp, env, dir) = setup();
    let mut store = open(&env, &dir, 1).unwrap();
    append(&mut store, vec![entry(2, 0)]);
    drop(store);
    // A stale record of an older term after the synced position: not a chain.
    let file = env.disk.open(&segment(&dir), OpenMode::ReadWrite).unwrap();
    let len = file.len().unwrap();
    let stale = encode_record::<MetaConfig>(&entry(1, 1)).unwrap();
    file.write_all_at(&[io::IoSlice::new(&stale)], len).unwrap();
    let store = open(&env, &dir, 1).unwrap();
    assert_eq!(indexes(&store), vec![0]);
    assert_eq!(file.len().unwrap(), len);
}

#[test]
fn a_purge_forgets_entries_and_removes_whole_segments() {
    let (_tmp, env, dir) = setup();
    let mut store = open(&env, &dir, 1).unwrap();
    append(&mut store, (0..6).map(|i| entry(1, i)).collect());
    // Rotate: every later append goes to a new segment.
    store.lock().durable.synced = SEGMENT_BYTES;
    append(&mut store, vec![entry(1, 6)]);
    append(&mut store, vec![entry(1, 7)]);
    assert_eq!(store.lock().segments, vec![0, 6]);
    cairn_engine::env::real::block_on(store.purge(entry(1, 6).log_id)).unwrap();
    assert_eq!(indexes(&store), vec![7]);
    assert_eq!(
        store.lock().segments,
        vec![6],
        "segment 0 held only purged entries"
    );
    drop(store);
    let store = open(&env, &dir, 1).unwrap();
    assert_eq!(indexes(&store), vec![7]);
    assert_eq!(store.summary().1, Some(entry(1, 6).log_id));
}

#[test]
fn a_rotation_cut_short_after_a_purge_keeps_the_synced_segment() {
    let (_tmp, env, dir) = setup();
    let mut store = open(&env, &dir, 1).unwrap();
    append(&mut store, (0..4).map(|i| entry(1, i)).collect());
    cairn_engine::env::real::block_on(store.purge(entry(1, 3).log_id)).unwrap();
    // The crash came after the next segment was made and before the record named it.
    env.disk
        .open(&dir.join(segment_name(4)), OpenMode::CreateNew)
        .unwrap();
    drop(store);
    let mut store = open(&env, &dir, 1).unwrap();
    assert_eq!(
        store.lock().segments,
        vec![0],
        "the synced segment stays, the leftover goes"
    );
    append(&mut store, vec![entry(1, 4)]);
    drop(store);
    let store = open(&env, &dir, 1).unwrap();
    assert_eq!(indexes(&store), vec![4]);
}

#[test]
fn a_missing_synced_segment_refuses_the_boot() {
    let (_tmp, env, dir) = setup();
    let mut store = open(&env, &dir, 1).unwrap();
    append(&mut store, vec![entry(1, 0)]);
    drop(store);
    env.disk.remove_file(&segment(&dir)).unwrap();
    assert!(matches!(
        open(&env, &dir, 1),
        Err(LogOpenError::Damaged { .. })
    ));
}

/// A state machine openraft's storage suite can run with a [`LogStore`]: made afresh in a
/// directory of its own for each case.
pub(crate) trait SuiteMachine: openraft::storage::RaftStateMachine<Self::C> + Sized {
    type C: LogTypes<Node: Default>;
    fn open_for_suite(env: &Env, dir: &Path) -> Self;
}

impl SuiteMachine for crate::sm::MetaMachine {
    type C = MetaConfig;
    fn open_for_suite(env: &Env, dir: &Path) -> Self {
        crate::sm::MetaMachine::open(env.disk.clone(), dir, CLUSTER, None).unwrap()
    }
}

/// Builds a fresh log store and machine per case, each in its own directory.
struct SuiteBuilder<M> {
    env: Env,
    root: tempfile::TempDir,
    made: std::sync::atomic::AtomicU32,
    machine: std::marker::PhantomData<fn() -> M>,
}

impl<M: SuiteMachine> openraft::testing::log::StoreBuilder<M::C, LogStore<M::C>, M>
    for SuiteBuilder<M>
{
    async fn build(&self) -> Result<((), LogStore<M::C>, M), openraft::StorageError<M::C>> {
        let n = self.made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = self.root.path().join(format!("case-{n}"));
        let store = LogStore::open(&self.env, &dir, CLUSTER, 1).await.unwrap();
        Ok(((), store, M::open_for_suite(&self.env, &dir)))
    }
}

/// Runs openraft's own conformance suite for log storage and state machines (vote, log
/// state, reads, truncation, purge, membership from the log and the machine, snapshots)
/// against a [`LogStore`] on a real disk and `M`.
pub(crate) fn run_openraft_storage_suite<M: SuiteMachine + 'static>()
where
    <M::C as openraft::RaftTypeConfig>::D: std::fmt::Debug,
    <M::C as openraft::RaftTypeConfig>::R: std::fmt::Debug,
{
    let builder = SuiteBuilder::<M> {
        env: cairn_engine::env::real::env_with_workers(1).unwrap(),
        root: tempfile::tempdir().unwrap(),
        made: Default::default(),
        machine: std::marker::PhantomData,
    };
    let env = builder.env.clone();
    cairn_engine::env::real::block_on(crate::rt::in_env(
        &env,
        openraft::testing::log::Suite::test_all(builder),
    ))
    .unwrap();
}

#[test]
fn passes_openraft_storage_suite() {
    run_openraft_storage_suite::<crate::sm::MetaMachine>();
}

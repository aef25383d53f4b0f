//! Recovery over arbitrary damage to a partition directory (T7): whatever is deleted, cut,
//! overwritten, replaced or added, opening never panics; it fences (changing nothing, and
//! fencing again the same way) or repairs to a state a second boot finds clean and serves
//! identically.

use cairn_engine::config::Durability;
use cairn_engine::partition::recovery;
use cairn_engine::partition::{ConsumerId, Outcome, Partition};
use cairn_tests::*;
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A template partition, built once: two sealed segments and an active one, a durable end
/// with a flushed tail above it, and stored consumer offsets.
fn template() -> PathBuf {
    static TEMPLATE: OnceLock<tempfile::TempDir> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let (tmp, dir) = scratch_dir();
            let env = real_env();
            let mut partition = create(&env, &dir, config(Durability::Persisted));
            for seed in 0..24 {
                let size = if seed % 3 == 0 { 100_000 } else { 300 };
                append_acked(&mut partition, batch(seed, 3, size));
            }
            partition.store_offset(ConsumerId::consumer(1), 10).unwrap();
            partition.store_offset(ConsumerId::consumer(2), 40).unwrap();
            for seed in 24..27 {
                partition.append(batch(seed, 2, 200)).unwrap();
            }
            partition.flush().unwrap();
            assert!(partition.segment_starts().unwrap().len() >= 3);
            drop(partition);
            tmp
        })
        .path()
        .join("p")
}

fn damage() -> impl Strategy<Value = Damage> {
    let bytes = || prop::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        4 => file_damage(),
        1 => (
            prop::sample::select(vec![
                "00000000000000000001.log",
                "99999999999999999999.index",
                "superblock.a.tmp",
                "offsets/consumers/77",
                "offsets/consumers/07",
                "offsets/consumer_groups/3.tmp",
                "notes.txt",
            ]),
            bytes()
        )
            .prop_map(|(name, b)| Damage::Add(name, b)),
    ]
}

fn files(dir: &Path) -> Vec<PathBuf> {
    snapshot(dir).into_keys().collect()
}

fn check_boot(dir: &Path, durability: Durability) {
    let cfg = config(durability);
    let planned = recovery::plan(real_env().disk.as_ref(), dir, ID, durability);
    let before = snapshot(dir);
    let Ok(opened) = Partition::open(&real_env(), dir, ID, cfg, Default::default()) else {
        return; // an I/O error on a directory a test mangled is an answer, not a panic
    };
    let planned = planned.expect("plan fails only when open does");
    assert_eq!(planned.outcomes(), opened.plan.outcomes(), "plan is pure");
    if let Some(reason) = opened.partition.fence_reason().cloned() {
        assert_eq!(snapshot(dir), before, "a fence changes nothing");
        drop(opened);
        let again = Partition::open(&real_env(), dir, ID, cfg, Default::default()).unwrap();
        let again = again.partition.fence_reason().map(|r| r.name());
        assert_eq!(again, Some(reason.name()), "a fence is stable");
        return;
    }
    let mut partition = opened.partition;
    let served = read_all(&mut partition, 7);
    drop(partition);
    let again = Partition::open(&real_env(), dir, ID, cfg, Default::default()).unwrap();
    assert_eq!(
        again.plan.outcomes(),
        vec![Outcome::Clean],
        "{:?}",
        again.plan
    );
    let mut partition = again.partition;
    assert_eq!(read_all(&mut partition, 7), served, "a repair is stable");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn any_damage_fences_or_repairs_to_a_clean_state(
        damages in prop::collection::vec(damage(), 1..4),
        persisted in any::<bool>(),
    ) {
        let (_tmp, dir) = scratch_dir();
        copy_dir(&template(), &dir);
        for damage in &damages {
            let files = files(&dir);
            inflict(&dir, damage, |i| files[i.index(files.len())].clone());
        }
        let durability = if persisted { Durability::Persisted } else { Durability::Replicated };
        check_boot(&dir, durability);
    }
}

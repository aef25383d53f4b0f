//! How the partition world opens a partition at a boot: alone, or as a node's boot opens
//! it (`Opening::Boot`: the superblock slots read first and handed over, or read by the
//! recovery; what a recovery with nothing to repair serves made durable by one `sync_all`
//! of the directory before it serves, each file's own sync when that fails).

use super::oracle::Model;
use cairn_engine::config::PartitionSettings;
use cairn_engine::env::{Env, PageCache};
use cairn_engine::node::exit_record::{verdict, ExitRecord, Found};
use cairn_engine::partition::recovery::{self, Insurance, Opening};
use cairn_engine::partition::{Opened, Partition, PartitionIdentity};

/// Opens the partition of `model`: `boot` 0 as a node's boot that reads the slots itself,
/// 1 as one that hands over the slots it read, anything else alone. `now` is the kernel's
/// boot id; a boot reads the page cache as the node's exit record would let it
/// ([`page_cache`]).
pub(super) fn open(
    env: &Env,
    model: &Model,
    identity: PartitionIdentity,
    settings: PartitionSettings,
    (boot, now): (u32, u128),
) -> Result<Opened, String> {
    let cache = page_cache(model.writer_boot_id, now);
    let opening = match boot {
        0 => Opening::Boot { slots: None, cache },
        1 => Opening::Boot {
            slots: recovery::read_slots(env.disk.as_ref(), &model.dir)
                .ok()
                .map(Box::new),
            cache,
        },
        _ => Opening::Alone,
    };
    let insurance = opening.insurance();
    let hooks = crate::canary::partition_hooks();
    let (dir, config) = (&model.dir, model.config);
    let opened = Partition::open_with_hooks(env, dir, identity, config, settings, hooks, opening)
        .map_err(|e| e.to_string())?;
    let deferred = insurance == Insurance::Deferred && opened.plan.repairs_nothing();
    if deferred && env.disk.sync_all(dir).is_err() {
        // As a node's boot: when the sync of everything fails, the partition's own.
        recovery::apply(env.disk.as_ref(), &opened.plan, Insurance::Now)
            .map_err(|e| format!("the boot sync of {}: {e}", dir.display()))?;
    }
    Ok(opened)
}

/// What a boot may take from the page cache, decided by the node's rule (and the active
/// canary's hook): the partition world's processes never exit cleanly, so its exit record
/// names the kernel the last process that opened the partition ran in, unclean (none
/// before the first recovery).
fn page_cache(writer: Option<u128>, now: u128) -> PageCache {
    let found = writer.map_or(Found::Missing, |boot_id| {
        Found::Record(ExitRecord {
            boot_id,
            clean: false,
        })
    });
    let decided = verdict(&found, Some(now));
    let hook = crate::canary::node_hooks().exit_verdict;
    hook.map_or(decided, |rewrite| rewrite(&found, Some(now), decided))
        .0
}

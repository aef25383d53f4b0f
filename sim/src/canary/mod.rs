//! Deliberate bugs that prove the simulator has teeth: each canary is a bug the oracle must
//! catch, by the invariant that names it. At most one is active per thread, chosen by name
//! ([`activate`]); the worlds install what it needs when they build the settings and disks
//! they give the engine and the server ([`partition_hooks`], [`node_hooks`],
//! [`server_hooks`]). None of this is in the engine or the server: they offer optional hooks
//! (`None` in production) and the canaries live here, beside the oracle that must catch them.
//!
//! Recovery decisions ([`recovery`], the partition's verdict hook):
//! - `truncate-at-first-bad`: damage that must fence (below the durable end, in a sealed
//!   segment) is truncated away instead, with every valid batch after it;
//! - `trust-stale-index`: index entries that disagree with the log are kept;
//! - `drop-flushed-tail` (MUT-1): valid batches above the durable end are dropped at every
//!   boot instead of being synced and kept;
//! - `rewind-on-short-log` (MUT-2): a log shorter than the durable record is served from
//!   where its valid bytes end, instead of fencing;
//! - `skip-slot-sync`: recovery serves on the word of a superblock slot it never synced.
//!
//! Skipped syncs ([`disk`], a disk wrapped for one role):
//! - `unsynced-repair`: recovery's repairs (advanced tail, lowered offsets, truncations,
//!   directory changes) are left unsynced; only the superblock record is synced;
//! - `ack-before-sync`: the open log's log and index are never synced, so a `persisted`
//!   group is acknowledged before its bytes are durable;
//! - `no-dir-sync`: a new segment's directory entry is never synced;
//! - `ack-metadata-before-sync`: the metadata journal is never synced, so a metadata
//!   operation is applied and answered before its entry is durable;
//! - `raft-ack-before-sync`: a cluster replica's Raft log is never synced, so it tells its
//!   leader entries are flushed (and counts toward the quorum) while they are only cached;
//! - `part-wal-unsynced`: the same for the partition groups' WALs alone, so a `persisted`
//!   send is acknowledged before a quorum holds it on stable storage;
//! - `skip-deferred-sync`: the machine's `sync_all` syncs nothing, so what a boot's
//!   recoveries serve as they found it (left in the page cache by the process before) is
//!   never made durable, though the boot deferred exactly that to it;
//! - `trust-unclean-exit`: boot reads the page cache as it is after an unclean exit of a
//!   process of the same kernel (the exit record's verdict rewritten), so bytes a failed
//!   writeback left cached and never on the device are taken for valid ones.
//!
//! The cluster's replicas ([`cluster`]):
//! - `vote-after-lost-state`: a replica that lost its state record (its vote) or its whole
//!   disk comes back under the identity it had, blank, so it votes again in terms it voted
//!   in and counts toward quorums for entries it no longer holds;
//! - `blank-counted`: a replica answers peers' requests meant for any replica of its member,
//!   so a blank one is counted (votes, acknowledges appends) as the replica it replaced;
//! - `apply-uncommitted`: a follower's state machine applies what a leader sends as it
//!   arrives, before it commits;
//! - `retry-rekeyed`: a member asks again for an op whose attempt's fate it could not
//!   learn under a new key, so the op may apply twice;
//! - `read-stale`: a member serves a fresh read without waiting for the leader's read
//!   index;
//! - `part-stamp-local-clock`: a partition replica stamps each committed send with its own
//!   clock when it applies it, not with its leader's, so replicas' bytes differ;
//! - `part-refill-hole`: a replica refilled or repaired from its peers jumps its partition
//!   to the offset it must reach instead of taking the batches below it;
//! - `part-apply-uncommitted`: a partition replica appends the sends a leader sends it as
//!   they arrive, before they commit; one a later leader discards stays in its partition;
//! - `part-quiet-deaf`: a sleeping partition group's followers stay asleep when their
//!   leader's member goes silent (`quiet`), so the group elects no leader without it;
//! - `part-offsets-local`: a consumer offset is stored on the replica of the member asked
//!   only, never ordered by the partition's group (each member kept its own before).
//!
//! The metadata plan at boot ([`metadata`]):
//! - `skip-meta-slot-rewrite`: a superblock record found in one copy only is left so
//!   (boot's `RewriteSlot` dropped), one more damaged copy from being lost;
//! - `adoption-work-forgotten`: a cluster member's adoption cut short is taken as done at
//!   boot, its directory work never redone (removed partitions stay on its disk).
//!
//! The owners ([`owners`]):
//! - `ack-late-joiners`: a shard answers the sends that arrived while a persist ran as if
//!   that persist had covered them (they are only journaled, in memory);
//! - `ack-with-first-persist`: when the first of the persists a shard runs at once returns,
//!   it answers the sends of those still in flight as durable too;
//! - `ack-before-log-sync`: when a partition's record returns while its next group's log
//!   sync is out (the pipeline overlapping them), the shard answers that group too;
//! - `ack-offset-before-dir-sync`: a shard answers a `persisted` offset store that waits for
//!   its round's directory sync at once, as if that sync had run;
//! - `publish-before-sync`: the metadata owner publishes its view of a batch after writing
//!   the batch's journal entries and before syncing them, so callers read metadata the disk
//!   may not hold.
//!
//! A poll's read plan ([`reads`]):
//! - `read-above-visible`: a plan serves up to the journal's end, not the visible end, so
//!   a `persisted` poll reads sends that are not durable yet;
//! - `serve-unverified-skip`: a walk that skipped batches by their headers serves the batch
//!   it stops at unverified.
//!
//! The server ([`server`]):
//! - `ack-send-before-shard`: the adapter answers a send before the shard's reply (the send
//!   goes on in the background), so a `persisted` acknowledgement promises nothing;
//! - `dedup-wrong-reply`: the duplicate table answers a retried request with the reply of
//!   another request of the session;
//! - `session-outlives-user`: a session keeps its access (as it had at login) after its
//!   user is deleted.
//! - `bodies-unbudgeted`: request bodies are read without taking their room in the byte
//!   budget (the budget invariant, beside the slow senders of `actors::hostile`).

pub mod cluster;
pub mod disk;
pub mod metadata;
pub mod owners;
pub mod reads;
pub mod recovery;
pub mod server;

use cairn_engine::metadata::MetadataHooks;
use cairn_engine::node::{NodeHooks, OwnerHooks};
use cairn_engine::partition::PartitionHooks;
use cairn_server::command::hooks::CommandHooks;
use cairn_server::ServerHooks;
use std::cell::Cell;

pub const NAMES: [&str; 36] = [
    "read-above-visible",
    "serve-unverified-skip",
    "raft-ack-before-sync",
    "part-wal-unsynced",
    "part-stamp-local-clock",
    "part-refill-hole",
    "part-apply-uncommitted",
    "part-quiet-deaf",
    "part-offsets-local",
    "vote-after-lost-state",
    "blank-counted",
    "apply-uncommitted",
    "retry-rekeyed",
    "read-stale",
    "ack-send-before-shard",
    "bodies-unbudgeted",
    "dedup-wrong-reply",
    "session-outlives-user",
    "skip-meta-slot-rewrite",
    "adoption-work-forgotten",
    "ack-late-joiners",
    "ack-with-first-persist",
    "ack-before-log-sync",
    "ack-offset-before-dir-sync",
    "publish-before-sync",
    "ack-metadata-before-sync",
    "ack-before-sync",
    "no-dir-sync",
    "truncate-at-first-bad",
    "trust-stale-index",
    "drop-flushed-tail",
    "rewind-on-short-log",
    "unsynced-repair",
    "skip-slot-sync",
    "skip-deferred-sync",
    "trust-unclean-exit",
];

thread_local! {
    static ACTIVE: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Activates the canary `name` (or none) on this thread. Returns false for an unknown name.
pub fn activate(name: Option<&str>) -> bool {
    let found = match name {
        None => None,
        Some(name) => match NAMES.iter().find(|n| **n == name) {
            Some(n) => Some(*n),
            None => return false,
        },
    };
    ACTIVE.with(|active| active.set(found));
    true
}

/// The canary active on this thread, if any.
pub fn active() -> Option<&'static str> {
    ACTIVE.with(|active| active.get())
}

/// The partition hooks the active canary needs (none without one).
pub fn partition_hooks() -> PartitionHooks {
    let name = active();
    PartitionHooks {
        recovery_verdict: name.and_then(recovery::verdict_hook),
        recovery_disk: name.and_then(disk::recovery_disk_hook),
        log_disk: name.and_then(disk::log_disk_hook),
        read: reads::read_hooks(name),
    }
}

/// The node's hooks (the metadata plane's and the owners') the active canary needs.
pub fn node_hooks() -> NodeHooks {
    let name = active();
    NodeHooks {
        partition: partition_hooks(),
        metadata: MetadataHooks {
            plan: name.and_then(metadata::plan_hook),
            plane_disk: name.and_then(disk::plane_disk_hook),
        },
        owners: OwnerHooks {
            after_persist: name.and_then(owners::after_persist_hook),
            persist_returned: name.and_then(owners::persist_returned_hook),
            record_returned: name.and_then(owners::record_returned_hook),
            before_metadata_sync: name.and_then(owners::before_metadata_sync_hook),
            store_waits: name.and_then(owners::store_waits_hook),
        },
        exit_verdict: name.and_then(recovery::exit_verdict_hook),
    }
}

/// The server's hooks the active canary needs.
pub fn server_hooks() -> ServerHooks {
    let name = active();
    ServerHooks {
        command: CommandHooks {
            send: name.and_then(server::send_hook),
            session_check: name.and_then(server::session_check_hook),
            permissions: name.and_then(server::permissions_hook),
            body_room: name.and_then(server::body_room_hook),
        },
        dedup_hit: name.and_then(server::dedup_hit_hook),
    }
}

/// The partition group machines' hooks the active canary needs, for a replica whose clock
/// is `clock`.
pub fn part_machine_hooks(
    clock: std::sync::Arc<dyn cairn_engine::env::Clock>,
) -> cairn_cluster::partition::machine::MachineHooks {
    cairn_cluster::partition::machine::MachineHooks {
        stamp: active().and_then(|name| cluster::stamp_hook(name, clock)),
        refill_hole: active() == Some("part-refill-hole"),
        apply_uncommitted: active() == Some("part-apply-uncommitted"),
        deaf_when_quiet: active() == Some("part-quiet-deaf"),
        offsets_local: active() == Some("part-offsets-local"),
    }
}

/// A cluster replica's hooks the active canary needs.
pub fn cluster_hooks() -> cairn_cluster::group::GroupHooks {
    cairn_cluster::group::GroupHooks {
        incarnation: active().and_then(cluster::incarnation_hook),
        addressed: active().and_then(cluster::addressed_hook),
        apply_uncommitted: active().is_some_and(cluster::applies_uncommitted),
        rekey: active().and_then(cluster::rekey_hook),
        read_index: active().and_then(cluster::read_index_hook),
    }
}

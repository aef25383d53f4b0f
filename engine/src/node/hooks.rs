//! Optional hooks into the node (TigerBeetle's `on_checkpoint` style), gathered in
//! [`super::NodeSettings::hooks`]: every one is `None` in production, where the owners, the
//! partitions and the metadata plane follow their own rules. The simulator sets them to
//! install its deliberate bugs (`cairn_sim::canary`), which its oracle must catch; nothing
//! here knows any bug. Each scope's hooks are defined beside what they hook: the
//! partitions' in [`crate::partition::hooks`], the metadata plane's in
//! [`crate::metadata::hooks`], the owners' here.

use crate::metadata::MetadataHooks;
use crate::partition::PartitionHooks;

/// A shard's moment after a persist's record returned (or its sync failed) and before it
/// answers the sends the persist covered. It is given `take`, which takes one request that arrived meanwhile from the
/// shard's inbox (false once none is waiting); the shard then appends each taken send to the
/// persisted partition and answers it with the persist's sends, and carries anything else to
/// its next round.
pub type AfterPersistHook = fn(take: &mut dyn FnMut() -> bool);

/// A shard's moment when one of the log syncs it runs at once returned, given how many are
/// still in flight; true answers their sends now, as if their persists had returned too.
pub type PersistReturnedHook = fn(in_flight: usize) -> bool;

/// A shard's moment when a partition's record returned while the partition's next log sync
/// was still out, given how many sends that sync covers; true answers them now, as if their
/// sync and record had returned too.
pub type RecordReturnedHook = fn(syncing: usize) -> bool;

/// A shard's moment when a `persisted` offset store starts waiting for its directory sync
/// (`shard/stores`); true answers it now, as if its directory were synced.
pub type StoreWaitsHook = fn() -> bool;

/// The metadata owner's moment between writing a batch's journal entries and syncing them.
/// It is given `publish`, which publishes the batch's view now.
pub type BeforeMetadataSyncHook = fn(publish: &mut dyn FnMut());

/// The owners' hooks; [`Default`] is production (none).
#[derive(Clone, Copy, Default)]
pub struct OwnerHooks {
    pub after_persist: Option<AfterPersistHook>,
    pub persist_returned: Option<PersistReturnedHook>,
    pub record_returned: Option<RecordReturnedHook>,
    pub before_metadata_sync: Option<BeforeMetadataSyncHook>,
    pub store_waits: Option<StoreWaitsHook>,
}

/// The node's hooks: every partition's (at boot and when created), the metadata plane's and
/// the owners'.
#[derive(Clone, Copy, Default, Debug)]
pub struct NodeHooks {
    pub partition: PartitionHooks,
    pub metadata: MetadataHooks,
    pub owners: OwnerHooks,
    /// Boot's verdict on the page cache, from the exit record.
    pub exit_verdict: Option<super::exit_record::ExitVerdictHook>,
}

impl std::fmt::Debug for OwnerHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnerHooks")
            .field("after_persist", &self.after_persist.is_some())
            .field("persist_returned", &self.persist_returned.is_some())
            .field("record_returned", &self.record_returned.is_some())
            .field("before_metadata_sync", &self.before_metadata_sync.is_some())
            .field("store_waits", &self.store_waits.is_some())
            .finish()
    }
}

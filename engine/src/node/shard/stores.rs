//! A round's `persisted` offset stores share one directory sync: a store into a consumer's
//! existing offset file replaces it (the temp synced, then renamed) and waits; the
//! partition's offset directories are synced once for all that wait, and only then is each
//! answered ([`crate::partition::Partition::settle_offsets`]).
//!
//! | the shard meets | it does |
//! |---|---|
//! | a store that can wait (`persisted`, an existing file) | replaces the file and keeps the reply |
//! | a send, or another store | serves it; nothing it does reads the stores waiting |
//! | any other request of a partition with stores waiting (a poll, its commit, an offset read or deletion, a fence) | settles that partition's stores first: it sees them as they are answered |
//! | a request of no partition (directory work, retention, a close; not figures or identities) | settles every partition's first |
//! | the end of the round | settles every partition's |
//!
//! Architecture Invariant: a store is answered only once its rename is durable, and no
//! request reads a stored offset that is not; the stores waiting are those of one round
//! (at most its requests).

use super::{Shard, MAX_DRAIN, MAX_PARKED};
use crate::env::chan::Reply;
use crate::error::NodeResult;
use crate::state::PartitionKey;
use std::collections::BTreeMap;

/// The replies of stores waiting for their partition's directory sync.
#[derive(Default)]
pub(super) struct WaitingStores {
    replies: BTreeMap<PartitionKey, Vec<Reply<NodeResult<()>>>>,
    count: usize,
}

impl Shard {
    /// Answers a store of `key` whose result is `stored` (true: it waits for its
    /// directory sync), or keeps its reply until [`Shard::settle_stores`].
    pub(super) fn answer_store(
        &mut self,
        key: PartitionKey,
        stored: NodeResult<bool>,
        reply: Reply<NodeResult<()>>,
    ) {
        let answered_early = || self.hooks.owners.store_waits.is_some_and(|hook| hook());
        match stored {
            // The simulator's canary: answered before its directory sync (which still runs).
            Ok(true) if answered_early() => {
                self.stores.replies.entry(key).or_default();
                reply.send(Ok(()));
            }
            Ok(true) => {
                let waiting = &mut self.stores;
                waiting.count += 1;
                assert!(
                    waiting.count <= MAX_DRAIN + MAX_PARKED,
                    "the stores waiting are one round's"
                );
                waiting.replies.entry(key).or_default().push(reply);
            }
            Ok(false) => reply.send(Ok(())),
            Err(error) => reply.send(Err(error)),
        }
    }

    /// Makes the waiting stores of `key` (every partition's when `None`) durable and
    /// answers them; whether any waited (its disk time is the caller's to let pass).
    pub(super) fn settle_stores(&mut self, key: Option<PartitionKey>) -> bool {
        let keys: Vec<PartitionKey> = match key {
            Some(key) if self.stores.replies.contains_key(&key) => vec![key],
            Some(_) => return false,
            None => self.stores.replies.keys().copied().collect(),
        };
        let settled_any = !keys.is_empty();
        for key in keys {
            let replies = self.stores.replies.remove(&key).expect("listed above");
            self.stores.count -= replies.len();
            if replies.len() > 1 {
                let shared = &self.stats.shared_offset_syncs;
                shared.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let settled = self
                .open(key)
                .and_then(|partition| Ok(partition.settle_offsets()?));
            for reply in replies {
                reply.send(match &settled {
                    Ok(()) => Ok(()),
                    Err(e) => Err(e.clone_for_reply()),
                });
            }
        }
        settled_any
    }
}

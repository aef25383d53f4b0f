//! The published, read-only view of the metadata: what every lookup (names to ids, topic
//! settings, users and their password hashes) reads without waiting on the metadata owner.
//!
//! The metadata owner is its only writer. It publishes a new view after a batch's journal
//! entries are durable and their directory work is done, and before it answers any caller of
//! that batch: a caller that received a metadata reply and then reads the view sees that
//! reply's op or a later one (the view a caller reads is never older than the last metadata
//! reply it received). A refused or failed batch publishes nothing.

use crate::state::MetaState;
use std::sync::{Arc, RwLock};

/// One published state of the metadata, immutable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaView {
    /// The last op this view holds (0 before the first).
    pub op: u64,
    pub state: MetaState,
}

impl std::ops::Deref for MetaView {
    type Target = MetaState;

    fn deref(&self) -> &MetaState {
        &self.state
    }
}

/// Where the current view is published.
pub(crate) struct ViewCell {
    current: RwLock<Arc<MetaView>>,
}

impl ViewCell {
    pub(crate) fn new(view: MetaView) -> ViewCell {
        ViewCell {
            current: RwLock::new(Arc::new(view)),
        }
    }

    pub(crate) fn load(&self) -> Arc<MetaView> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Publishes `view`, which is never older than the one it replaces.
    pub(crate) fn publish(&self, view: Arc<MetaView>) {
        let mut current = self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        assert!(
            view.op >= current.op,
            "a published view never goes back: op {} after op {}",
            view.op,
            current.op
        );
        *current = view;
    }
}

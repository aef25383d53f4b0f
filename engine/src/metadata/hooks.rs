//! Optional hooks into the metadata plane at boot (TigerBeetle's `on_checkpoint` style),
//! carried in the node's settings (`crate::node::NodeHooks`): `None` in production, where
//! boot follows the plan's rules and the plane writes through the node's disk. The
//! simulator sets them to install its deliberate bugs (`cairn_sim::canary`).

use super::MetaPlan;
use crate::env::{Disk, DiskHook};
use std::sync::Arc;

/// Rewrites boot's metadata plan.
pub type PlanHook = fn(MetaPlan) -> MetaPlan;

/// The metadata plane's hooks; [`Default`] is production (none).
#[derive(Clone, Copy, Default)]
pub struct MetadataHooks {
    /// Boot's metadata plan, after the rules and before boot acts on it.
    pub plan: Option<PlanHook>,
    /// The disk the open plane writes through.
    pub plane_disk: Option<DiskHook>,
}

impl MetadataHooks {
    /// Boot's plan, as the hook (if any) rewrites it.
    pub(crate) fn plan(&self, plan: MetaPlan) -> MetaPlan {
        match self.plan {
            Some(hook) => hook(plan),
            None => plan,
        }
    }

    /// The disk the open plane writes through.
    pub(crate) fn plane_disk(&self, disk: &Arc<dyn Disk>) -> Arc<dyn Disk> {
        match self.plane_disk {
            Some(wrap) => wrap(disk.clone()),
            None => disk.clone(),
        }
    }
}

impl std::fmt::Debug for MetadataHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataHooks")
            .field("plan", &self.plan.is_some())
            .field("plane_disk", &self.plane_disk.is_some())
            .finish()
    }
}

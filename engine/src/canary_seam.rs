//! Where production code meets the deliberate bugs of `crate::canary`: four seams, each the
//! identity unless the `canary` feature is built and a canary is active on this thread. The
//! production rules themselves hold no canary toggles.
//!
//! - [`recovery_verdict`]: recovery's decision, after the rules and before it is acted on;
//! - [`apply_disk`]: the disk recovery's apply writes through;
//! - [`log_disk`]: the disk an open partition log writes through;
//! - [`metadata_disk`]: the disk the metadata plane writes through;
//! - [`requests_after_persist`]: requests a shard takes from its inbox after a persist and
//!   before answering the sends it covered (none in production);
//! - [`before_metadata_sync`]: what the metadata owner does between writing a batch's
//!   journal entries and syncing them (nothing in production);
//! - [`metadata_plan`]: boot's metadata plan, after the rules and before it is acted on.

use crate::env::Disk;
use crate::partition::recovery::decide::Repairs;
use crate::partition::recovery::Survey;
use crate::partition::FenceReason;
use std::sync::Arc;

pub(crate) fn recovery_verdict(
    survey: &Survey,
    verdict: Result<Repairs, FenceReason>,
) -> Result<Repairs, FenceReason> {
    #[cfg(feature = "canary")]
    {
        crate::canary::recovery_verdict(survey, verdict)
    }
    #[cfg(not(feature = "canary"))]
    {
        let _ = survey;
        verdict
    }
}

pub(crate) fn apply_disk<T>(disk: &dyn Disk, apply: &dyn Fn(&dyn Disk) -> T) -> T {
    #[cfg(feature = "canary")]
    {
        crate::canary::apply_disk(disk, apply)
    }
    #[cfg(not(feature = "canary"))]
    {
        apply(disk)
    }
}

pub(crate) fn log_disk(disk: Arc<dyn Disk>) -> Arc<dyn Disk> {
    #[cfg(feature = "canary")]
    {
        crate::canary::log_disk(disk)
    }
    #[cfg(not(feature = "canary"))]
    {
        disk
    }
}

pub(crate) fn metadata_disk(disk: Arc<dyn Disk>) -> Arc<dyn Disk> {
    #[cfg(feature = "canary")]
    {
        crate::canary::metadata_disk(disk)
    }
    #[cfg(not(feature = "canary"))]
    {
        disk
    }
}

pub(crate) fn requests_after_persist<T>(inbox: &mut crate::env::chan::Receiver<T>) -> Vec<T> {
    #[cfg(feature = "canary")]
    {
        crate::canary::requests_after_persist(inbox)
    }
    #[cfg(not(feature = "canary"))]
    {
        let _ = inbox;
        Vec::new()
    }
}

pub(crate) fn before_metadata_sync(publish: &mut dyn FnMut()) {
    #[cfg(feature = "canary")]
    {
        crate::canary::before_metadata_sync(publish)
    }
    #[cfg(not(feature = "canary"))]
    {
        let _ = publish;
    }
}

pub(crate) fn metadata_plan(plan: crate::metadata::MetaPlan) -> crate::metadata::MetaPlan {
    #[cfg(feature = "canary")]
    {
        crate::canary::metadata_plan(plan)
    }
    #[cfg(not(feature = "canary"))]
    {
        plan
    }
}

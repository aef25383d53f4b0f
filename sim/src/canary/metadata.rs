//! The canary in boot's metadata plan (the metadata plan hook, after the rules).

use cairn_engine::metadata::{MetaAction, MetaPlan};

/// The plan hook of the metadata canary `name`.
pub fn plan_hook(name: &str) -> Option<fn(MetaPlan) -> MetaPlan> {
    match name {
        "skip-meta-slot-rewrite" => Some(skip_meta_slot_rewrite),
        "adoption-work-forgotten" => Some(adoption_work_forgotten),
        _ => None,
    }
}

/// A record found in one copy only is left so: boot's `RewriteSlot` is dropped.
fn skip_meta_slot_rewrite(mut plan: MetaPlan) -> MetaPlan {
    plan.actions
        .retain(|a| !matches!(a, MetaAction::RewriteSlot { .. }));
    plan
}

/// An adoption cut short is taken as done: boot starts from the adopted state as if its
/// directory work had finished, so none is redone (partitions it removed stay on disk,
/// those it created or purged are not made).
fn adoption_work_forgotten(mut plan: MetaPlan) -> MetaPlan {
    if let Some(adopting) = &plan.adopting {
        plan.state = adopting.state.clone();
    }
    plan
}

//! The canaries in recovery's decisions: each rewrites the verdict recovery's rules reached
//! (the partition's verdict hook, between `decide` and `apply`), usually by deciding again
//! on a record or a survey it changed first; and the one in boot's verdict on the page
//! cache (the node's exit-record hook).

use cairn_engine::env::PageCache;
use cairn_engine::node::exit_record::{ExitVerdictHook, Why};
use cairn_engine::partition::recovery::decide::{self, Repairs};
use cairn_engine::partition::recovery::trust::{self, Trusted};
use cairn_engine::partition::recovery::{Action, Damage, DamageKind, Survey};
use cairn_engine::partition::{DurablePoint, FenceReason, VerdictHook};

/// The exit-record verdict hook of the canary `name`: `trust-unclean-exit` reads an
/// unclean exit in this kernel as a clean one.
pub fn exit_verdict_hook(name: &str) -> Option<ExitVerdictHook> {
    match name {
        "trust-unclean-exit" => Some(|_, _, verdict| match verdict {
            (PageCache::Suspect, Why::UncleanExit) => (PageCache::Trusted, Why::CleanExit),
            other => other,
        }),
        _ => None,
    }
}

/// The verdict hook of the recovery canary `name`.
pub fn verdict_hook(name: &str) -> Option<VerdictHook> {
    match name {
        "truncate-at-first-bad" => Some(truncate_at_first_bad),
        "trust-stale-index" => {
            Some(|survey, verdict| verdict.map(|repairs| trust_stale_index(survey, repairs)))
        }
        "drop-flushed-tail" => Some(drop_flushed_tail),
        "rewind-on-short-log" => Some(rewind_on_short_log),
        "skip-slot-sync" => Some(|_, verdict| {
            verdict.map(|repairs| Repairs {
                sync_slot: None,
                ..repairs
            })
        }),
        _ => None,
    }
}

fn trusted(survey: &Survey) -> Option<Trusted> {
    trust::trusted_record(&survey.dir, survey.identity, &survey.slots).ok()
}

/// Decides again as if nothing had ever been durable: every damage is then a torn tail.
fn truncate_at_first_bad(
    survey: &Survey,
    verdict: Result<Repairs, FenceReason>,
) -> Result<Repairs, FenceReason> {
    let damage_fence = matches!(
        &verdict,
        Err(FenceReason::SealedSegmentCorrupt { .. }
            | FenceReason::CorruptBelowDurable { .. }
            | FenceReason::DurableEndUncertain { .. }
            | FenceReason::ReadFailed { .. }
            | FenceReason::LogShorterThanDurable { .. })
    );
    let (Some(mut trusted), Some(first)) = (trusted(survey), survey.segments.first()) else {
        return verdict;
    };
    if !damage_fence {
        return verdict;
    }
    trusted.record.durable = DurablePoint {
        segment_start: first.start_offset,
        position: 0,
        next_offset: first.start_offset,
    };
    trusted.uncertain = None;
    decide::decide_with(survey, trusted).or(verdict)
}

fn trust_stale_index(survey: &Survey, mut repairs: Repairs) -> Repairs {
    for segment in &mut repairs.segments {
        let stale = |action: &Action| {
            matches!(action, Action::RewriteIndex { path, why, .. }
                if *path == segment.index_path && why.contains("does not match"))
        };
        if !repairs.actions.iter().any(stale) {
            continue;
        }
        repairs.actions.retain(|action| !stale(action));
        if let Some(read) = survey
            .segments
            .iter()
            .find(|s| s.start_offset == segment.start_offset)
            .and_then(|s| s.index.as_ref())
        {
            segment.index = read.entries.clone();
        }
    }
    repairs
}

/// Cuts the durable segment at the durable end, as if the valid batches above were damage.
fn drop_flushed_tail(
    survey: &Survey,
    verdict: Result<Repairs, FenceReason>,
) -> Result<Repairs, FenceReason> {
    let Ok(repairs) = &verdict else {
        return verdict;
    };
    let durable = repairs.trusted.record.durable;
    let mut mutated = survey.clone();
    let Some(segment) = mutated
        .segments
        .iter_mut()
        .find(|s| s.start_offset == durable.segment_start && s.valid_end > durable.position)
    else {
        return verdict;
    };
    segment
        .batches
        .retain(|b| b.position + b.length <= durable.position);
    segment.valid_end = durable.position;
    segment.next_offset = durable.next_offset;
    segment.damage = Some(Damage {
        position: durable.position,
        kind: DamageKind::Invalid("MUTANT: drop-flushed-tail".into()),
    });
    decide::decide_with(&mutated, repairs.trusted.clone()).or(verdict)
}

/// Trusts a record lowered to where the durable segment's valid bytes end.
fn rewind_on_short_log(
    survey: &Survey,
    verdict: Result<Repairs, FenceReason>,
) -> Result<Repairs, FenceReason> {
    let short = matches!(
        &verdict,
        Err(FenceReason::LogShorterThanDurable { .. } | FenceReason::DurableOffsetMismatch { .. })
    );
    let Some(mut trusted) = trusted(survey).filter(|_| short) else {
        return verdict;
    };
    let durable = trusted.record.durable;
    let Some(segment) = survey
        .segments
        .iter()
        .find(|s| s.start_offset == durable.segment_start && s.valid_end < durable.position)
    else {
        return verdict;
    };
    trusted.record.durable = DurablePoint {
        segment_start: segment.start_offset,
        position: segment.valid_end,
        next_offset: segment.next_offset,
    };
    decide::decide_with(survey, trusted).or(verdict)
}

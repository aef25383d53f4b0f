//! A picture of one run on a time axis: one lane per client, per owner (the metadata owner,
//! each shard) and for the disk and the network; each request a bar from its send to its
//! reply (or to its loss); faults, crashes, power losses and boots as marks; and, for a
//! failing run, the violated invariant at the moment the oracle caught it, with the requests
//! it names highlighted. The world records into a [`Timeline`]; [`render_svg`] and
//! [`render_html`] are pure functions of it. Bounded: past [`MAX_ITEMS`] spans and marks,
//! further ones are counted, not kept.
//!
//! Here the model the worlds record into; the renderers beside it: `layout` (the picture's
//! geometry and its bars), `svg` (the drawing), `html` (the page around it) and
//! `text` (times, tooltips, escaping).

use std::collections::BTreeMap;

/// Most spans plus marks one timeline keeps.
pub const MAX_ITEMS: usize = 100_000;

/// What a lane shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LaneKind {
    /// A simulated client (producer, consumer, group member, admin, user session).
    Client,
    /// An owner inside the node: the metadata owner, a shard.
    Owner,
    /// The disk's faults.
    Disk,
    /// The network's faults and the node's process (crashes, power, boots).
    Network,
    Node,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub name: String,
    pub kind: LaneKind,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpanOutcome {
    /// Answered with success.
    Ok,
    /// Answered with a refusal (the error's text).
    Refused(String),
    /// The reply never came or was lost: the outcome is unknown (why).
    Lost(String),
    /// Still running when the run ended.
    Running,
}

/// One request (or one unit of an owner's work) from start to end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub id: u64,
    pub lane: usize,
    pub start_nanos: u64,
    /// `None` while running.
    pub end_nanos: Option<u64>,
    pub label: String,
    pub outcome: SpanOutcome,
}

/// What a mark shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    DiskFault,
    NetFault,
    /// A network partition begins, or heals.
    Partition,
    Heal,
    ProcessCrash,
    PowerLoss,
    Boot,
    Note,
}

/// A point event on a lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub lane: usize,
    pub at_nanos: u64,
    pub kind: MarkKind,
    pub label: String,
}

/// The violated invariant, where the oracle caught it, and the spans it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub at_nanos: u64,
    pub invariant: String,
    pub evidence: String,
    pub spans: Vec<u64>,
}

/// The recorded run.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    pub title: String,
    pub lanes: Vec<Lane>,
    pub spans: Vec<Span>,
    pub marks: Vec<Mark>,
    pub verdict: Option<Verdict>,
    /// The run's end (virtual nanoseconds).
    pub end_nanos: u64,
    /// Spans and marks not kept (past [`MAX_ITEMS`]).
    pub dropped: u64,
    by_name: BTreeMap<String, usize>,
    /// Span id → index in `spans`.
    index: BTreeMap<u64, usize>,
    next_id: u64,
}

impl Timeline {
    pub fn new(title: impl Into<String>) -> Timeline {
        Timeline {
            title: title.into(),
            ..Timeline::default()
        }
    }

    /// The lane named `name`, created on first use.
    pub fn lane(&mut self, name: &str, kind: LaneKind) -> usize {
        if let Some(lane) = self.by_name.get(name) {
            return *lane;
        }
        self.lanes.push(Lane {
            name: name.to_string(),
            kind,
        });
        let lane = self.lanes.len() - 1;
        self.by_name.insert(name.to_string(), lane);
        lane
    }

    fn full(&mut self) -> bool {
        let full = self.spans.len() + self.marks.len() >= MAX_ITEMS;
        if full {
            self.dropped += 1;
        }
        full
    }

    /// Starts a span; its id ends it. Past the bound the id names no span.
    pub fn begin(&mut self, lane: usize, at_nanos: u64, label: impl Into<String>) -> u64 {
        assert!(lane < self.lanes.len(), "span on an unknown lane");
        self.next_id += 1;
        let id = self.next_id;
        if self.full() {
            return id;
        }
        self.index.insert(id, self.spans.len());
        self.spans.push(Span {
            id,
            lane,
            start_nanos: at_nanos,
            end_nanos: None,
            label: label.into(),
            outcome: SpanOutcome::Running,
        });
        id
    }

    /// Ends span `id` (no effect for a dropped one, or one already ended).
    pub fn end(&mut self, id: u64, at_nanos: u64, outcome: SpanOutcome) {
        let Some(&i) = self.index.get(&id) else {
            return;
        };
        let span = &mut self.spans[i];
        if span.end_nanos.is_some() {
            return;
        }
        assert!(at_nanos >= span.start_nanos, "a span ends before it began");
        span.end_nanos = Some(at_nanos);
        span.outcome = outcome;
    }

    pub fn mark(&mut self, lane: usize, at_nanos: u64, kind: MarkKind, label: impl Into<String>) {
        assert!(lane < self.lanes.len(), "mark on an unknown lane");
        if self.full() {
            return;
        }
        self.marks.push(Mark {
            lane,
            at_nanos,
            kind,
            label: label.into(),
        });
    }

    /// The span with `id`, if kept.
    pub fn span(&self, id: u64) -> Option<&Span> {
        self.index.get(&id).map(|&i| &self.spans[i])
    }

    /// The run ended at `at_nanos`; spans still running stay so.
    pub fn finish(&mut self, at_nanos: u64, verdict: Option<Verdict>) {
        self.end_nanos = at_nanos;
        self.verdict = verdict;
    }
}

/// Appends formatted text to a `String` (which takes every write).
macro_rules! put {
    ($out:expr, $($arg:tt)*) => {
        $out.write_fmt(format_args!($($arg)*)).expect("a String takes every write")
    };
}

mod html;
mod layout;
mod svg;
#[cfg(test)]
mod tests;
mod text;

pub use html::render_html;
pub use layout::{MAX_EVIDENCE_CHARS, MAX_PLOT_WIDTH, MIN_BAR_WIDTH, MIN_PLOT_WIDTH};
pub use svg::render_svg;

/// Where a span's bar ends: its end, or the run's end while it is running.
fn span_end(span: &Span, horizon: u64) -> u64 {
    match (&span.outcome, span.end_nanos) {
        (SpanOutcome::Running, _) | (_, None) => horizon,
        (_, Some(end)) => end,
    }
    .max(span.start_nanos)
}

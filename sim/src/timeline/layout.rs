//! The picture's geometry, computed once from a [`Timeline`]: the plot's width and scale,
//! each lane's row (grouped by kind), the verdict's box, the axis's tick step, and the
//! spans as bars (overlapping extents of one lane and outcome merged).

use super::text::{clip, fmt_time, named_spans, wrap};
use super::{span_end, LaneKind, Span, SpanOutcome, Timeline, Verdict};
use std::collections::BTreeSet;

/// The narrowest plot (pixels of time axis); a run gets 100 px per virtual second above it.
pub const MIN_PLOT_WIDTH: f64 = 2000.0;
/// The widest plot (pixels of time axis), whatever the run's length.
pub const MAX_PLOT_WIDTH: f64 = 8000.0;
/// The narrowest bar drawn (pixels), so that a span of a microsecond still shows.
pub const MIN_BAR_WIDTH: f64 = 1.5;
/// Most characters of a verdict's evidence the picture shows.
pub const MAX_EVIDENCE_CHARS: usize = 600;

/// Width of the lane names' column (pixels).
pub(super) const LEFT: f64 = 200.0;
pub(super) const RIGHT: f64 = 30.0;
pub(super) const LANE_H: f64 = 22.0;
pub(super) const GROUP_H: f64 = 18.0;
pub(super) const BAR_PAD: f64 = 4.0;
pub(super) const BAR_H: f64 = LANE_H - 2.0 * BAR_PAD;
/// Least distance between two "×" on one lane (pixels).
pub(super) const CROSS_GAP: f64 = 10.0;
/// Advance of one character of the 12 px monospace font (pixels, a little generous).
pub(super) const CHAR_W: f64 = 7.3;
/// Where the header (title, summary, legend) ends.
pub(super) const HEADER_H: f64 = 84.0;
/// Characters per line of the verdict's evidence.
pub(super) const EVIDENCE_LINE_CHARS: usize = 150;
pub(super) const EVIDENCE_MAX_LINES: usize = 12;
pub(super) const EVIDENCE_LINE_H: f64 = 15.0;

/// The picture's geometry, computed once from the timeline.
pub(super) struct Layout {
    /// The time the plot's right edge stands for (at least 1 ns).
    pub(super) horizon: u64,
    pub(super) plot_w: f64,
    pub(super) width: f64,
    pub(super) height: f64,
    pub(super) verdict: Option<VerdictBox>,
    /// Baseline of the row of event labels (restarts, the verdict) above the axis.
    pub(super) events_y: f64,
    pub(super) axis_y: f64,
    pub(super) lanes_bottom: f64,
    /// Lane indices in drawing order: by kind, then as created.
    pub(super) order: Vec<usize>,
    /// Top of each lane's row, by lane index.
    pub(super) lane_top: Vec<f64>,
    /// Each group's kind and the top of its header row.
    pub(super) groups: Vec<(LaneKind, f64)>,
}

impl Layout {
    pub(super) fn new(t: &Timeline) -> Layout {
        let horizon = horizon(t);
        let plot_w = plot_width(horizon);
        let width = LEFT + plot_w + RIGHT;
        let verdict = t
            .verdict
            .as_ref()
            .map(|v| VerdictBox::new(t, v, HEADER_H, width));
        let top = HEADER_H + verdict.as_ref().map_or(0.0, |b| b.height + 10.0);
        let axis_y = top + 36.0;
        let order = lane_order(t);
        let mut lane_top = vec![0.0; t.lanes.len()];
        let mut groups = Vec::new();
        let mut y = axis_y;
        for &lane in &order {
            let kind = t.lanes[lane].kind;
            if groups.last().is_none_or(|&(last, _)| last != kind) {
                groups.push((kind, y));
                y += GROUP_H;
            }
            lane_top[lane] = y;
            y += LANE_H;
        }
        Layout {
            horizon,
            plot_w,
            width,
            height: y + 30.0,
            verdict,
            events_y: top + 12.0,
            axis_y,
            lanes_bottom: y,
            order,
            lane_top,
            groups,
        }
    }

    /// The x of virtual time `nanos`.
    pub(super) fn x(&self, nanos: u64) -> f64 {
        LEFT + nanos as f64 / self.horizon as f64 * self.plot_w
    }

    pub(super) fn lane_top(&self, lane: usize) -> f64 {
        assert!(lane < self.lane_top.len(), "an item on an unknown lane");
        self.lane_top[lane]
    }
}

/// The latest time anything in the timeline names (at least 1 ns, so the scale is defined).
pub(super) fn horizon(t: &Timeline) -> u64 {
    let spans = t
        .spans
        .iter()
        .map(|s| s.end_nanos.unwrap_or(s.start_nanos).max(s.start_nanos));
    let marks = t.marks.iter().map(|m| m.at_nanos);
    let verdict = t.verdict.iter().map(|v| v.at_nanos);
    spans
        .chain(marks)
        .chain(verdict)
        .fold(t.end_nanos, u64::max)
        .max(1)
}

/// The plot's width for a run of `horizon` nanoseconds.
pub(super) fn plot_width(horizon: u64) -> f64 {
    (MIN_PLOT_WIDTH + horizon as f64 / 1e9 * 100.0).clamp(MIN_PLOT_WIDTH, MAX_PLOT_WIDTH)
}

/// Lane indices grouped by kind (clients, owners, disk, network, node), each group in
/// creation order.
pub(super) fn lane_order(t: &Timeline) -> Vec<usize> {
    let mut order: Vec<usize> = (0..t.lanes.len()).collect();
    order.sort_by_key(|&lane| t.lanes[lane].kind);
    order
}

/// The ids of the kept spans the verdict names.
pub(super) fn highlighted(t: &Timeline) -> BTreeSet<u64> {
    t.verdict
        .iter()
        .flat_map(|v| v.spans.iter())
        .filter(|&&id| t.span(id).is_some())
        .copied()
        .collect()
}

/// The red box with the violated invariant and its evidence.
pub(super) struct VerdictBox {
    pub(super) top: f64,
    pub(super) width: f64,
    pub(super) height: f64,
    pub(super) heading: String,
    pub(super) lines: Vec<String>,
}

impl VerdictBox {
    pub(super) fn new(t: &Timeline, verdict: &Verdict, top: f64, width: f64) -> VerdictBox {
        let heading = format!(
            "✗ invariant violated: {}   at {}",
            clip(&verdict.invariant, 200),
            fmt_time(verdict.at_nanos)
        );
        let mut lines = wrap(
            &clip(&verdict.evidence, MAX_EVIDENCE_CHARS),
            EVIDENCE_LINE_CHARS,
        );
        if lines.len() > EVIDENCE_MAX_LINES {
            lines.truncate(EVIDENCE_MAX_LINES);
            lines.push("…".to_string());
        }
        lines.push(clip(&named_spans(t, verdict), EVIDENCE_LINE_CHARS));
        let chars = lines.iter().map(|l| l.chars().count()).max().unwrap_or(0) as f64;
        let heading_w = heading.chars().count() as f64 * 8.6;
        VerdictBox {
            top,
            width: (chars * CHAR_W).max(heading_w).max(400.0).min(width - 48.0) + 24.0,
            height: 30.0 + lines.len() as f64 * EVIDENCE_LINE_H,
            heading,
            lines,
        }
    }
}

/// The 1-2-5 step (nanoseconds) that puts closest to ten ticks on `horizon`.
pub(super) fn tick_step(horizon: u64) -> u64 {
    let mut best = 1;
    let mut best_miss = f64::MAX;
    let mut decade: u64 = 1;
    for _ in 0..19 {
        for mantissa in [1, 2, 5] {
            let step = decade.saturating_mul(mantissa);
            let miss = (horizon as f64 / step as f64 - 10.0).abs();
            if miss < best_miss {
                best = step;
                best_miss = miss;
            }
        }
        decade = decade.saturating_mul(10);
    }
    best
}

/// How a span is coloured; also the drawing order within a lane (later on top): running
/// bars, which reach the run's end, lie under the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Class {
    Running,
    Ok,
    Refused,
    Lost,
}

impl Class {
    const ALL: [Class; 4] = [Class::Running, Class::Ok, Class::Refused, Class::Lost];

    pub(super) fn of(outcome: &SpanOutcome) -> Class {
        match outcome {
            SpanOutcome::Ok => Class::Ok,
            SpanOutcome::Refused(_) => Class::Refused,
            SpanOutcome::Lost(_) => Class::Lost,
            SpanOutcome::Running => Class::Running,
        }
    }

    pub(super) fn css(self) -> &'static str {
        match self {
            Class::Ok => "ok",
            Class::Running => "ru",
            Class::Refused => "rf",
            Class::Lost => "lo",
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Class::Ok => "ok",
            Class::Running => "running",
            Class::Refused => "refused",
            Class::Lost => "lost",
        }
    }
}

/// A span's pixel extent, at least `min_width` wide.
pub(super) fn extent(span: &Span, layout: &Layout, min_width: f64) -> (f64, f64) {
    let x0 = layout.x(span.start_nanos);
    let x1 = layout.x(span_end(span, layout.horizon));
    (x0, x1.max(x0 + min_width))
}

/// One drawn bar: the spans of one lane and outcome whose pixel extents overlap (often one).
pub(super) struct Bar<'a> {
    pub(super) lane: usize,
    pub(super) class: Class,
    pub(super) x0: f64,
    pub(super) x1: f64,
    pub(super) first: &'a Span,
    pub(super) last: &'a Span,
    pub(super) count: usize,
    /// The latest end among its spans.
    pub(super) end: u64,
    /// Whether a lost bar gets its "×".
    pub(super) cross: bool,
}

/// Every span not named by the verdict, as bars: per lane in drawing order, per class, spans
/// whose extents overlap merged.
pub(super) fn build_bars<'a>(
    t: &'a Timeline,
    layout: &Layout,
    skip: &BTreeSet<u64>,
) -> Vec<Bar<'a>> {
    let mut by_lane: Vec<[Vec<&Span>; 4]> =
        (0..t.lanes.len()).map(|_| Default::default()).collect();
    for span in t.spans.iter().filter(|s| !skip.contains(&s.id)) {
        assert!(span.lane < t.lanes.len(), "a span on an unknown lane");
        by_lane[span.lane][Class::of(&span.outcome) as usize].push(span);
    }
    let mut bars = Vec::new();
    for &lane in &layout.order {
        for class in Class::ALL {
            let spans = &mut by_lane[lane][class as usize];
            spans.sort_by_key(|s| (s.start_nanos, s.id));
            let first = bars.len();
            merge_into(&mut bars, spans, lane, class, layout);
            if class == Class::Lost {
                thin_crosses(&mut bars[first..]);
            }
        }
    }
    bars
}

/// Keeps the "×" of a lost bar only where the last one kept is [`CROSS_GAP`] behind, so that
/// a dense run of losses stays a red bar rather than a row of crosses.
pub(super) fn thin_crosses(bars: &mut [Bar<'_>]) {
    let mut last = f64::MIN;
    for bar in bars {
        bar.cross = bar.x1 >= last + CROSS_GAP;
        if bar.cross {
            last = bar.x1;
        }
    }
}

/// Appends `spans` (one lane, one class, by start) as bars, merging overlapping extents.
pub(super) fn merge_into<'a>(
    bars: &mut Vec<Bar<'a>>,
    spans: &[&'a Span],
    lane: usize,
    class: Class,
    layout: &Layout,
) {
    let mut current: Option<Bar<'a>> = None;
    for &span in spans {
        let (x0, x1) = extent(span, layout, MIN_BAR_WIDTH);
        let end = span_end(span, layout.horizon);
        if let Some(bar) = current.as_mut().filter(|bar| x0 <= bar.x1) {
            bar.x1 = bar.x1.max(x1);
            bar.end = bar.end.max(end);
            bar.last = span;
            bar.count += 1;
            continue;
        }
        bars.extend(current.take());
        current = Some(Bar {
            lane,
            class,
            x0,
            x1,
            first: span,
            last: span,
            count: 1,
            end,
            cross: false,
        });
    }
    bars.extend(current);
}

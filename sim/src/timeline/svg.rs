//! The SVG renderer: a pure function of the [`Timeline`] and its [`Layout`] — header and
//! legend, lanes, axis, partitions, bars, restarts, marks, and the verdict in red.

use super::layout::*;
use super::text::*;
use super::{LaneKind, Mark, MarkKind, Timeline, MAX_ITEMS};
use std::collections::BTreeSet;
use std::fmt::Write as _;

pub(super) const STYLE: &str = "text{font-family:'DejaVu Sans Mono',Menlo,Consolas,monospace;font-size:12px;fill:#222}\
.title{font-size:18px;font-weight:bold}.grp{font-weight:bold;fill:#555}.warn{fill:#c00;font-weight:bold}\
.tick{fill:#555;font-size:11px}.grid{stroke:#e2e2e2}.axis{stroke:#888}.stripe{fill:#f4f4f4}\
.frame{fill:none;stroke:#999}.sep{stroke:#bbb}\
.ok{fill:#4cae4c}.rf{fill:#f0a020}.lo{fill:#d62728}.ru{fill:url(#hatch);stroke:#666;stroke-dasharray:3 2}\
.lx{stroke:#5a0000;stroke-width:1.6;fill:none}.hl{stroke:#e00000;stroke-width:3}.hh{fill:#e00000;fill-opacity:.3}\
.mk line{stroke-width:2}.m-df{stroke:#ff7f0e;fill:#ff7f0e}.m-nf{stroke:#9467bd;fill:#9467bd}\
.m-pa,.m-he{stroke:#1f77b4;fill:#1f77b4}.m-pa line,.m-he line{stroke-dasharray:4 2}.m-he path{fill:#fff}\
.m-cr{stroke:#8b0000;fill:#8b0000}.m-pl{stroke:#000;fill:#000}.m-pl line{stroke-width:4}\
.m-bo{stroke:#006400;fill:#006400}.m-no{stroke:#999;fill:#999}.m-no line{stroke-width:1}\
.band{fill:#1f77b4;fill-opacity:.07}.bandl{fill:#1f77b4;fill-opacity:.18}\
.g-cr{stroke:#8b0000;stroke-opacity:.55}.g-pl{stroke:#000;stroke-width:1.5;stroke-opacity:.6}\
.g-bo{stroke:#006400;stroke-opacity:.6;stroke-dasharray:5 3}\
.ev{font-size:11px}.ev-cr{fill:#8b0000}.ev-pl{fill:#000}.ev-bo{fill:#006400}\
.vl{stroke:#e00000;stroke-width:3}.vt{fill:#e00000;font-weight:bold}\
.vbox{fill:#fff0f0;stroke:#e00000;stroke-width:2}.vhead{fill:#c00;font-weight:bold;font-size:14px}";

pub(super) const DEFS: &str = "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#dcdcdc\"/>\
<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#8a8a8a\" stroke-width=\"2.5\"/></pattern></defs>";

/// The timeline as a standalone SVG document.
pub fn render_svg(timeline: &Timeline) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    svg_element(&mut out, timeline);
    out
}

/// The `<svg>` element, without an XML declaration (so it can sit inside HTML).
pub(super) fn svg_element(out: &mut String, t: &Timeline) {
    let layout = Layout::new(t);
    let highlighted = highlighted(t);
    let bars = build_bars(t, &layout, &highlighted);
    put!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{h:.0}\" viewBox=\"0 0 {w:.0} {h:.0}\">\n<style>{STYLE}</style>{DEFS}\n",
        w = layout.width,
        h = layout.height
    );
    put!(
        out,
        "<rect width=\"{:.0}\" height=\"{:.0}\" fill=\"#fff\"/>\n",
        layout.width,
        layout.height
    );
    draw_header(out, t, &layout, bars.len());
    draw_legend(out);
    if let Some(vbox) = &layout.verdict {
        vbox.draw(out);
    }
    draw_lanes(out, t, &layout);
    draw_axis(out, &layout);
    draw_partitions(out, t, &layout);
    for bar in &bars {
        bar.draw(out, &layout);
    }
    draw_restarts(out, t, &layout);
    for mark in &t.marks {
        draw_mark(out, mark, &layout);
    }
    draw_highlighted(out, t, &layout, &highlighted);
    draw_verdict_line(out, t, &layout);
    out.push_str("</svg>\n");
}

pub(super) fn draw_header(out: &mut String, t: &Timeline, layout: &Layout, bars: usize) {
    let max_chars = ((layout.width - 24.0) / 11.0) as usize;
    put!(
        out,
        "<text class=\"title\" x=\"12\" y=\"28\">{}</text>\n",
        esc(&clip(&t.title, max_chars))
    );
    let mut counts = [0usize; 4];
    for span in &t.spans {
        counts[Class::of(&span.outcome) as usize] += 1;
    }
    put!(
        out,
        "<text x=\"12\" y=\"48\">run {} · {} lanes · {} spans (ok {}, refused {}, lost {}, running {}) · {} marks",
        fmt_time(layout.horizon),
        t.lanes.len(),
        t.spans.len(),
        counts[Class::Ok as usize],
        counts[Class::Refused as usize],
        counts[Class::Lost as usize],
        counts[Class::Running as usize],
        t.marks.len()
    );
    if bars < t.spans.len() {
        put!(
            out,
            " · spans of one lane and outcome whose bars overlap drawn as one ({bars} bars)"
        );
    }
    if t.dropped > 0 {
        put!(
            out,
            " · <tspan class=\"warn\">{} items not recorded (past {MAX_ITEMS})</tspan>",
            t.dropped
        );
    }
    out.push_str("</text>\n");
}

/// One entry of the legend: how it is drawn, and what it means.
#[derive(Clone, Copy)]
pub(super) enum Swatch {
    Bar(&'static str),
    Mark(MarkKind),
    Verdict,
}

pub(super) const LEGEND: [(Swatch, &str); 14] = [
    (Swatch::Bar("ok"), "ok"),
    (Swatch::Bar("rf"), "refused"),
    (Swatch::Bar("lo"), "lost (× at the loss)"),
    (Swatch::Bar("ru"), "running at the end"),
    (Swatch::Bar("ok hl"), "named by the verdict"),
    (Swatch::Mark(MarkKind::DiskFault), "disk fault"),
    (Swatch::Mark(MarkKind::NetFault), "network fault"),
    (Swatch::Mark(MarkKind::Partition), "partition"),
    (Swatch::Mark(MarkKind::Heal), "heal"),
    (Swatch::Mark(MarkKind::ProcessCrash), "process crash"),
    (Swatch::Mark(MarkKind::PowerLoss), "power loss"),
    (Swatch::Mark(MarkKind::Boot), "boot"),
    (Swatch::Mark(MarkKind::Note), "note"),
    (Swatch::Verdict, "verdict"),
];

pub(super) fn draw_legend(out: &mut String) {
    let mut x = 12.0;
    let top = 60.0;
    for (swatch, text) in LEGEND {
        match swatch {
            Swatch::Bar(class) => {
                put!(
                    out,
                    "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{top}\" width=\"16\" height=\"{BAR_H}\"/>"
                );
                if class == "lo" {
                    lost_cross(out, x + 11.0, top);
                }
            }
            Swatch::Mark(kind) => mark_shape(out, kind, x + 8.0, top - BAR_PAD),
            Swatch::Verdict => put!(
                out,
                "<line class=\"vl\" x1=\"{c:.1}\" x2=\"{c:.1}\" y1=\"{top}\" y2=\"{b}\"/>",
                c = x + 8.0,
                b = top + BAR_H
            ),
        }
        put!(
            out,
            "<text x=\"{:.1}\" y=\"{}\">{}</text>\n",
            x + 22.0,
            top + 11.0,
            esc(text)
        );
        x += 22.0 + text.chars().count() as f64 * CHAR_W + 18.0;
    }
}

impl VerdictBox {
    pub(super) fn draw(&self, out: &mut String) {
        put!(
            out,
            "<rect class=\"vbox\" x=\"12\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"4\"/>\n",
            self.top,
            self.width,
            self.height
        );
        put!(
            out,
            "<text class=\"vhead\" x=\"24\" y=\"{:.1}\">{}</text>\n",
            self.top + 19.0,
            esc(&self.heading)
        );
        for (i, line) in self.lines.iter().enumerate() {
            put!(
                out,
                "<text x=\"24\" y=\"{:.1}\">{}</text>\n",
                self.top + 36.0 + i as f64 * EVIDENCE_LINE_H,
                esc(line)
            );
        }
    }
}

pub(super) fn draw_lanes(out: &mut String, t: &Timeline, layout: &Layout) {
    let name_chars = ((LEFT - 16.0) / CHAR_W) as usize;
    for (row, &lane) in layout.order.iter().enumerate() {
        let top = layout.lane_top(lane);
        if row % 2 == 0 {
            put!(
                out,
                "<rect class=\"stripe\" x=\"0\" y=\"{top:.1}\" width=\"{:.0}\" height=\"{LANE_H}\"/>",
                layout.width
            );
        }
        let name = &t.lanes[lane].name;
        let shown = clip(name, name_chars);
        let tip = if shown.len() < name.len() {
            format!("<title>{}</title>", esc(name))
        } else {
            String::new()
        };
        put!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{tip}{}</text>\n",
            LEFT - 8.0,
            top + 15.0,
            esc(&shown)
        );
    }
    for &(kind, top) in &layout.groups {
        put!(
            out,
            "<line class=\"sep\" x1=\"0\" x2=\"{:.0}\" y1=\"{top:.1}\" y2=\"{top:.1}\"/><text class=\"grp\" x=\"8\" y=\"{:.1}\">{}</text>\n",
            layout.width,
            top + 13.0,
            group_name(kind)
        );
    }
    put!(
        out,
        "<rect class=\"frame\" x=\"{LEFT}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"/>\n",
        layout.axis_y,
        layout.plot_w,
        layout.lanes_bottom - layout.axis_y
    );
}

pub(super) fn group_name(kind: LaneKind) -> &'static str {
    match kind {
        LaneKind::Client => "clients",
        LaneKind::Owner => "owners",
        LaneKind::Disk => "disk",
        LaneKind::Network => "network",
        LaneKind::Node => "node",
    }
}

/// Ticks on a 1-2-5 step, labelled above the lanes and below them, with a grid between.
pub(super) fn draw_axis(out: &mut String, layout: &Layout) {
    let step = tick_step(layout.horizon);
    let mut tick = 0;
    while tick <= layout.horizon {
        let x = layout.x(tick);
        let label = tick_label(tick, step);
        put!(
            out,
            "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text><text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>\n",
            layout.axis_y - 4.0,
            layout.lanes_bottom,
            layout.axis_y - 7.0,
            layout.lanes_bottom + 16.0
        );
        tick += step;
    }
    put!(
        out,
        "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>\n",
        LEFT + layout.plot_w,
        layout.axis_y,
        layout.axis_y
    );
}

impl Bar<'_> {
    pub(super) fn draw(&self, out: &mut String, layout: &Layout) {
        let y = layout.lane_top(self.lane) + BAR_PAD;
        put!(
            out,
            "<rect class=\"{}\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{BAR_H}\"><title>{}</title></rect>\n",
            self.class.css(),
            self.x0,
            self.x1 - self.x0,
            esc(&self.tip(layout.horizon))
        );
        if self.cross {
            lost_cross(out, self.x1, y);
        }
    }

    pub(super) fn tip(&self, horizon: u64) -> String {
        if self.count == 1 {
            return span_tip(self.first, horizon);
        }
        format!(
            "{} {} spans drawn as one bar (their bars overlap)\n{} → {}\nfirst: {}\nlast: {}",
            self.count,
            self.class.name(),
            fmt_time(self.first.start_nanos),
            fmt_time(self.end),
            span_line(self.first),
            span_line(self.last)
        )
    }
}

/// The "×" at the end of a lost bar whose top is `y`.
pub(super) fn lost_cross(out: &mut String, x: f64, y: f64) {
    put!(
        out,
        "<path class=\"lx\" d=\"M{:.1} {:.1}l7 8m0 -8l-7 8\"/>",
        x - 3.5,
        y + 3.0
    );
}

/// Faint bands from each partition to the next heal on its lane (or the run's end): strong on
/// the lane, faint across all lanes, since a partition cuts every client off.
pub(super) fn draw_partitions(out: &mut String, t: &Timeline, layout: &Layout) {
    let mut edges: Vec<(usize, u64, bool)> = t
        .marks
        .iter()
        .filter(|m| matches!(m.kind, MarkKind::Partition | MarkKind::Heal))
        .map(|m| (m.lane, m.at_nanos, m.kind == MarkKind::Partition))
        .collect();
    edges.sort_by_key(|&(lane, at, _)| (lane, at));
    let mut open: Option<(usize, u64)> = None;
    for (lane, at, begins) in edges {
        if let Some((from_lane, from)) = open.filter(|&(l, _)| l != lane || !begins) {
            let to = if from_lane == lane {
                at
            } else {
                layout.horizon
            };
            partition_band(out, layout, from_lane, from, to);
            open = None;
        }
        if begins && open.is_none() {
            open = Some((lane, at));
        }
    }
    if let Some((lane, from)) = open {
        partition_band(out, layout, lane, from, layout.horizon);
    }
}

pub(super) fn partition_band(out: &mut String, layout: &Layout, lane: usize, from: u64, to: u64) {
    let (x0, x1) = (layout.x(from), layout.x(to));
    put!(
        out,
        "<rect class=\"band\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"/><rect class=\"bandl\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{LANE_H}\"/>\n",
        layout.axis_y,
        x1 - x0,
        layout.lanes_bottom - layout.axis_y,
        layout.lane_top(lane),
        x1 - x0
    );
}

/// Crashes, power losses and boots as thin lines across every lane, labelled above the axis
/// where there is room.
pub(super) fn draw_restarts(out: &mut String, t: &Timeline, layout: &Layout) {
    let mut label_end = f64::MIN;
    for mark in &t.marks {
        let (class, word) = match mark.kind {
            MarkKind::ProcessCrash => ("cr", "crash"),
            MarkKind::PowerLoss => ("pl", "power loss"),
            MarkKind::Boot => ("bo", "boot"),
            _ => continue,
        };
        let x = layout.x(mark.at_nanos);
        put!(
            out,
            "<line class=\"g-{class}\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>",
            layout.events_y + 3.0,
            layout.lanes_bottom
        );
        if x > label_end {
            put!(
                out,
                "<text class=\"ev ev-{class}\" x=\"{:.1}\" y=\"{:.1}\">{word}</text>",
                x + 2.0,
                layout.events_y
            );
            label_end = x + 2.0 + word.len() as f64 * 6.8 + 4.0;
        }
        out.push('\n');
    }
}

pub(super) fn mark_class(kind: MarkKind) -> (&'static str, &'static str) {
    match kind {
        MarkKind::DiskFault => ("df", "disk fault"),
        MarkKind::NetFault => ("nf", "network fault"),
        MarkKind::Partition => ("pa", "partition"),
        MarkKind::Heal => ("he", "heal"),
        MarkKind::ProcessCrash => ("cr", "process crash"),
        MarkKind::PowerLoss => ("pl", "power loss"),
        MarkKind::Boot => ("bo", "boot"),
        MarkKind::Note => ("no", "note"),
    }
}

pub(super) fn draw_mark(out: &mut String, mark: &Mark, layout: &Layout) {
    let (_, name) = mark_class(mark.kind);
    let x = layout.x(mark.at_nanos);
    let top = layout.lane_top(mark.lane);
    put!(
        out,
        "<g><title>{}</title>",
        esc(&format!(
            "{name} at {}\n{}",
            fmt_time(mark.at_nanos),
            clip(&mark.label, MAX_TIP_CHARS)
        ))
    );
    mark_shape(out, mark.kind, x, top);
    out.push_str("</g>\n");
}

/// A mark's tick and symbol at `x` on the lane whose top is `top`.
pub(super) fn mark_shape(out: &mut String, kind: MarkKind, x: f64, top: f64) {
    let (class, _) = mark_class(kind);
    let c = top + LANE_H / 2.0;
    let symbol = match kind {
        MarkKind::DiskFault | MarkKind::NetFault => {
            format!("M{x:.1} {:.1}l5 5l-5 5l-5 -5z", c - 5.0)
        }
        MarkKind::Partition | MarkKind::Heal => format!("M{:.1} {:.1}h8v8h-8z", x - 4.0, c - 4.0),
        MarkKind::ProcessCrash | MarkKind::PowerLoss => {
            format!("M{:.1} {:.1}h12l-6 9z", x - 6.0, top + 1.0)
        }
        MarkKind::Boot => format!("M{:.1} {:.1}h12l-6 -9z", x - 6.0, top + LANE_H - 1.0),
        MarkKind::Note => format!("M{:.1} {c:.1}a3 3 0 1 0 6 0a3 3 0 1 0 -6 0z", x - 3.0),
    };
    put!(
        out,
        "<g class=\"mk m-{class}\"><line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/><path d=\"{symbol}\"/></g>",
        top + 1.0,
        top + LANE_H - 1.0
    );
}

/// The verdict's spans, on top of everything: outlined in red, on a red halo that a span of a
/// pixel still shows.
pub(super) fn draw_highlighted(
    out: &mut String,
    t: &Timeline,
    layout: &Layout,
    ids: &BTreeSet<u64>,
) {
    for span in ids.iter().filter_map(|&id| t.span(id)) {
        let (x0, x1) = extent(span, layout, 4.0);
        let y = layout.lane_top(span.lane) + BAR_PAD;
        let class = Class::of(&span.outcome);
        put!(
            out,
            "<g><title>named by the verdict\n{}</title><rect class=\"hh\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{LANE_H}\"/><rect class=\"{} hl\" x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{BAR_H}\"/>",
            esc(&span_tip(span, layout.horizon)),
            x0 - 5.0,
            y - BAR_PAD,
            x1 - x0 + 10.0,
            class.css(),
            x1 - x0
        );
        if class == Class::Lost {
            lost_cross(out, x1, y);
        }
        out.push_str("</g>\n");
    }
}

/// The bold red line where the oracle caught the violation.
pub(super) fn draw_verdict_line(out: &mut String, t: &Timeline, layout: &Layout) {
    let Some(verdict) = &t.verdict else {
        return;
    };
    let x = layout.x(verdict.at_nanos);
    put!(
        out,
        "<g><title>{}</title><line class=\"vl\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/><text class=\"vt\" x=\"{:.1}\" y=\"{:.1}\">✗ {}</text></g>\n",
        esc(&format!(
            "invariant violated: {}\nat {}",
            clip(&verdict.invariant, 200),
            fmt_time(verdict.at_nanos)
        )),
        layout.events_y - 10.0,
        layout.lanes_bottom + 4.0,
        x + 4.0,
        layout.events_y,
        esc(&clip(&verdict.invariant, 60))
    );
}

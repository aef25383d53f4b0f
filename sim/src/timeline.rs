//! A picture of one run on a time axis: one lane per client, per owner (the metadata owner,
//! each shard) and for the disk and the network; each request a bar from its send to its
//! reply (or to its loss); faults, crashes, power losses and boots as marks; and, for a
//! failing run, the violated invariant at the moment the oracle caught it, with the requests
//! it names highlighted. The world records into a [`Timeline`]; [`render_svg`] and
//! [`render_html`] are pure functions of it. Bounded: past [`MAX_ITEMS`] spans and marks,
//! further ones are counted, not kept.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

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

/// The narrowest plot (pixels of time axis); a run gets 100 px per virtual second above it.
pub const MIN_PLOT_WIDTH: f64 = 2000.0;
/// The widest plot (pixels of time axis), whatever the run's length.
pub const MAX_PLOT_WIDTH: f64 = 8000.0;
/// The narrowest bar drawn (pixels), so that a span of a microsecond still shows.
pub const MIN_BAR_WIDTH: f64 = 1.5;
/// Most characters of a verdict's evidence the picture shows.
pub const MAX_EVIDENCE_CHARS: usize = 600;

/// Most characters of one label or reason in a tooltip.
const MAX_TIP_CHARS: usize = 160;
/// Width of the lane names' column (pixels).
const LEFT: f64 = 200.0;
const RIGHT: f64 = 30.0;
const LANE_H: f64 = 22.0;
const GROUP_H: f64 = 18.0;
const BAR_PAD: f64 = 4.0;
const BAR_H: f64 = LANE_H - 2.0 * BAR_PAD;
/// Least distance between two "×" on one lane (pixels).
const CROSS_GAP: f64 = 10.0;
/// Advance of one character of the 12 px monospace font (pixels, a little generous).
const CHAR_W: f64 = 7.3;
/// Where the header (title, summary, legend) ends.
const HEADER_H: f64 = 84.0;
/// Characters per line of the verdict's evidence.
const EVIDENCE_LINE_CHARS: usize = 150;
const EVIDENCE_MAX_LINES: usize = 12;
const EVIDENCE_LINE_H: f64 = 15.0;

const STYLE: &str = "text{font-family:'DejaVu Sans Mono',Menlo,Consolas,monospace;font-size:12px;fill:#222}\
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

const DEFS: &str = "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#dcdcdc\"/>\
<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#8a8a8a\" stroke-width=\"2.5\"/></pattern></defs>";

/// Appends formatted text to a `String` (which takes every write).
macro_rules! put {
    ($out:expr, $($arg:tt)*) => {
        $out.write_fmt(format_args!($($arg)*)).expect("a String takes every write")
    };
}

/// The timeline as a standalone SVG document.
pub fn render_svg(timeline: &Timeline) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    svg_element(&mut out, timeline);
    out
}

/// The timeline as a standalone HTML page: the SVG inline (tooltips from its `<title>`s),
/// the verdict as copyable text (its evidence uncut), and a zoom slider. No external
/// resources.
pub fn render_html(timeline: &Timeline) -> String {
    let title = esc(&timeline.title);
    let mut out = String::new();
    put!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\n<style>{HTML_STYLE}</style></head>\n<body>\n"
    );
    put!(
        out,
        "<header><b>{title}</b> <label>zoom <input id=\"zoom\" type=\"range\" min=\"-4\" max=\"2\" step=\"0.1\" value=\"0\"></label> <span id=\"zv\">100%</span> <button id=\"fit\">fit width</button> <button id=\"one\">100%</button> <small>hover a bar or mark for details</small></header>\n"
    );
    if let Some(verdict) = &timeline.verdict {
        let spans: Vec<String> = verdict.spans.iter().map(|id| format!("#{id}")).collect();
        put!(
            out,
            "<details><summary>the verdict as text</summary><pre class=\"verdict\">invariant violated: {}\nat {}\nspans: {}\n{}</pre></details>\n",
            esc(&verdict.invariant),
            fmt_time(verdict.at_nanos),
            spans.join(", "),
            esc(&verdict.evidence)
        );
    }
    out.push_str("<div id=\"wrap\">");
    svg_element(&mut out, timeline);
    put!(
        out,
        "</div>\n<script>{HTML_SCRIPT}</script>\n</body></html>\n"
    );
    out
}

const HTML_STYLE: &str = "body{margin:0;font:14px sans-serif;background:#fafafa}\
header{position:sticky;top:0;left:0;z-index:1;background:#fff;padding:6px 12px;border-bottom:1px solid #ccc}\
header small{color:#777}#wrap{overflow:auto}#wrap svg{display:block;background:#fff}\
details{margin:4px 12px}pre.verdict{margin:4px 0;padding:8px;border:2px solid #e00;background:#fff0f0;white-space:pre-wrap}";

const HTML_SCRIPT: &str = "(function(){var s=document.querySelector('#wrap svg'),\
w=+s.getAttribute('width'),h=+s.getAttribute('height'),z=document.getElementById('zoom'),\
v=document.getElementById('zv');function set(f){s.setAttribute('width',w*f);\
s.setAttribute('height',h*f);v.textContent=Math.round(f*100)+'%';}\
z.oninput=function(){set(Math.pow(2,+z.value));};\
document.getElementById('fit').onclick=function(){var f=document.getElementById('wrap').clientWidth/w;\
z.value=Math.log2(f);set(f);};document.getElementById('one').onclick=function(){z.value=0;set(1);};})();";

/// The `<svg>` element, without an XML declaration (so it can sit inside HTML).
fn svg_element(out: &mut String, t: &Timeline) {
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

/// The picture's geometry, computed once from the timeline.
struct Layout {
    /// The time the plot's right edge stands for (at least 1 ns).
    horizon: u64,
    plot_w: f64,
    width: f64,
    height: f64,
    verdict: Option<VerdictBox>,
    /// Baseline of the row of event labels (restarts, the verdict) above the axis.
    events_y: f64,
    axis_y: f64,
    lanes_bottom: f64,
    /// Lane indices in drawing order: by kind, then as created.
    order: Vec<usize>,
    /// Top of each lane's row, by lane index.
    lane_top: Vec<f64>,
    /// Each group's kind and the top of its header row.
    groups: Vec<(LaneKind, f64)>,
}

impl Layout {
    fn new(t: &Timeline) -> Layout {
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
    fn x(&self, nanos: u64) -> f64 {
        LEFT + nanos as f64 / self.horizon as f64 * self.plot_w
    }

    fn lane_top(&self, lane: usize) -> f64 {
        assert!(lane < self.lane_top.len(), "an item on an unknown lane");
        self.lane_top[lane]
    }
}

/// The latest time anything in the timeline names (at least 1 ns, so the scale is defined).
fn horizon(t: &Timeline) -> u64 {
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
fn plot_width(horizon: u64) -> f64 {
    (MIN_PLOT_WIDTH + horizon as f64 / 1e9 * 100.0).clamp(MIN_PLOT_WIDTH, MAX_PLOT_WIDTH)
}

/// Lane indices grouped by kind (clients, owners, disk, network, node), each group in
/// creation order.
fn lane_order(t: &Timeline) -> Vec<usize> {
    let mut order: Vec<usize> = (0..t.lanes.len()).collect();
    order.sort_by_key(|&lane| t.lanes[lane].kind);
    order
}

/// The ids of the kept spans the verdict names.
fn highlighted(t: &Timeline) -> BTreeSet<u64> {
    t.verdict
        .iter()
        .flat_map(|v| v.spans.iter())
        .filter(|&&id| t.span(id).is_some())
        .copied()
        .collect()
}

fn draw_header(out: &mut String, t: &Timeline, layout: &Layout, bars: usize) {
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
enum Swatch {
    Bar(&'static str),
    Mark(MarkKind),
    Verdict,
}

const LEGEND: [(Swatch, &str); 14] = [
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

fn draw_legend(out: &mut String) {
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

/// The red box with the violated invariant and its evidence.
struct VerdictBox {
    top: f64,
    width: f64,
    height: f64,
    heading: String,
    lines: Vec<String>,
}

impl VerdictBox {
    fn new(t: &Timeline, verdict: &Verdict, top: f64, width: f64) -> VerdictBox {
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

    fn draw(&self, out: &mut String) {
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

/// "spans named: #12 produce p3, #40 (not recorded)".
fn named_spans(t: &Timeline, verdict: &Verdict) -> String {
    let named: Vec<String> = verdict
        .spans
        .iter()
        .map(|&id| match t.span(id) {
            Some(span) => format!("#{id} {}", clip(&span.label, 40)),
            None => format!("#{id} (not recorded)"),
        })
        .collect();
    if named.is_empty() {
        "spans named: none".to_string()
    } else {
        format!("spans named (outlined in red): {}", named.join(", "))
    }
}

fn draw_lanes(out: &mut String, t: &Timeline, layout: &Layout) {
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

fn group_name(kind: LaneKind) -> &'static str {
    match kind {
        LaneKind::Client => "clients",
        LaneKind::Owner => "owners",
        LaneKind::Disk => "disk",
        LaneKind::Network => "network",
        LaneKind::Node => "node",
    }
}

/// Ticks on a 1-2-5 step, labelled above the lanes and below them, with a grid between.
fn draw_axis(out: &mut String, layout: &Layout) {
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

/// The 1-2-5 step (nanoseconds) that puts closest to ten ticks on `horizon`.
fn tick_step(horizon: u64) -> u64 {
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

/// A tick's label, in the unit that suits the step (s, ms, µs or ns), with one decimal where
/// the step is a tenth of that unit.
fn tick_label(tick: u64, step: u64) -> String {
    let (unit, name) = match step {
        100_000_000.. => (1_000_000_000, "s"),
        100_000.. => (1_000_000, "ms"),
        100.. => (1_000, "µs"),
        _ => return format!("{tick} ns"),
    };
    if step >= unit {
        format!("{} {name}", tick / unit)
    } else {
        format!("{}.{} {name}", tick / unit, tick % unit / (unit / 10))
    }
}

/// A virtual time, to the microsecond: "1.234567 s" or "12.345 ms".
fn fmt_time(nanos: u64) -> String {
    if nanos >= 1_000_000_000 {
        format!(
            "{}.{:06} s",
            nanos / 1_000_000_000,
            nanos % 1_000_000_000 / 1_000
        )
    } else {
        format!("{}.{:03} ms", nanos / 1_000_000, nanos % 1_000_000 / 1_000)
    }
}

/// A duration, to three digits after the point of its unit.
fn fmt_duration(nanos: u64) -> String {
    match nanos {
        1_000_000_000.. => format!(
            "{}.{:03} s",
            nanos / 1_000_000_000,
            nanos % 1_000_000_000 / 1_000_000
        ),
        1_000_000.. => format!("{}.{:03} ms", nanos / 1_000_000, nanos % 1_000_000 / 1_000),
        1_000.. => format!("{}.{:03} µs", nanos / 1_000, nanos % 1_000),
        _ => format!("{nanos} ns"),
    }
}

/// How a span is coloured; also the drawing order within a lane (later on top): running
/// bars, which reach the run's end, lie under the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Running,
    Ok,
    Refused,
    Lost,
}

impl Class {
    const ALL: [Class; 4] = [Class::Running, Class::Ok, Class::Refused, Class::Lost];

    fn of(outcome: &SpanOutcome) -> Class {
        match outcome {
            SpanOutcome::Ok => Class::Ok,
            SpanOutcome::Refused(_) => Class::Refused,
            SpanOutcome::Lost(_) => Class::Lost,
            SpanOutcome::Running => Class::Running,
        }
    }

    fn css(self) -> &'static str {
        match self {
            Class::Ok => "ok",
            Class::Running => "ru",
            Class::Refused => "rf",
            Class::Lost => "lo",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Class::Ok => "ok",
            Class::Running => "running",
            Class::Refused => "refused",
            Class::Lost => "lost",
        }
    }
}

/// Where a span's bar ends: its end, or the run's end while it is running.
fn span_end(span: &Span, horizon: u64) -> u64 {
    match (&span.outcome, span.end_nanos) {
        (SpanOutcome::Running, _) | (_, None) => horizon,
        (_, Some(end)) => end,
    }
    .max(span.start_nanos)
}

/// A span's pixel extent, at least `min_width` wide.
fn extent(span: &Span, layout: &Layout, min_width: f64) -> (f64, f64) {
    let x0 = layout.x(span.start_nanos);
    let x1 = layout.x(span_end(span, layout.horizon));
    (x0, x1.max(x0 + min_width))
}

/// One drawn bar: the spans of one lane and outcome whose pixel extents overlap (often one).
struct Bar<'a> {
    lane: usize,
    class: Class,
    x0: f64,
    x1: f64,
    first: &'a Span,
    last: &'a Span,
    count: usize,
    /// The latest end among its spans.
    end: u64,
    /// Whether a lost bar gets its "×".
    cross: bool,
}

/// Every span not named by the verdict, as bars: per lane in drawing order, per class, spans
/// whose extents overlap merged.
fn build_bars<'a>(t: &'a Timeline, layout: &Layout, skip: &BTreeSet<u64>) -> Vec<Bar<'a>> {
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
fn thin_crosses(bars: &mut [Bar<'_>]) {
    let mut last = f64::MIN;
    for bar in bars {
        bar.cross = bar.x1 >= last + CROSS_GAP;
        if bar.cross {
            last = bar.x1;
        }
    }
}

/// Appends `spans` (one lane, one class, by start) as bars, merging overlapping extents.
fn merge_into<'a>(
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

impl Bar<'_> {
    fn draw(&self, out: &mut String, layout: &Layout) {
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

    fn tip(&self, horizon: u64) -> String {
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

/// "#12 produce p3 (refused: not the leader)".
fn span_line(span: &Span) -> String {
    let label = clip(&span.label, MAX_TIP_CHARS);
    match &span.outcome {
        SpanOutcome::Refused(why) | SpanOutcome::Lost(why) => {
            format!("#{} {label} ({})", span.id, clip(why, MAX_TIP_CHARS))
        }
        SpanOutcome::Ok | SpanOutcome::Running => format!("#{} {label}", span.id),
    }
}

/// A span's tooltip: label, start, end, duration and outcome.
fn span_tip(span: &Span, horizon: u64) -> String {
    let end = span_end(span, horizon);
    let when = match span.outcome {
        SpanOutcome::Running => format!(
            "{} → still running at the end, {}",
            fmt_time(span.start_nanos),
            fmt_time(end)
        ),
        _ => format!("{} → {}", fmt_time(span.start_nanos), fmt_time(end)),
    };
    let outcome = match &span.outcome {
        SpanOutcome::Ok => "ok".to_string(),
        SpanOutcome::Refused(why) => format!("refused: {}", clip(why, MAX_TIP_CHARS)),
        SpanOutcome::Lost(why) => format!("lost: {}", clip(why, MAX_TIP_CHARS)),
        SpanOutcome::Running => "running".to_string(),
    };
    format!(
        "#{} {}\n{when} ({})\n{outcome}",
        span.id,
        clip(&span.label, MAX_TIP_CHARS),
        fmt_duration(end - span.start_nanos)
    )
}

/// The "×" at the end of a lost bar whose top is `y`.
fn lost_cross(out: &mut String, x: f64, y: f64) {
    put!(
        out,
        "<path class=\"lx\" d=\"M{:.1} {:.1}l7 8m0 -8l-7 8\"/>",
        x - 3.5,
        y + 3.0
    );
}

/// Faint bands from each partition to the next heal on its lane (or the run's end): strong on
/// the lane, faint across all lanes, since a partition cuts every client off.
fn draw_partitions(out: &mut String, t: &Timeline, layout: &Layout) {
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

fn partition_band(out: &mut String, layout: &Layout, lane: usize, from: u64, to: u64) {
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
fn draw_restarts(out: &mut String, t: &Timeline, layout: &Layout) {
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

fn mark_class(kind: MarkKind) -> (&'static str, &'static str) {
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

fn draw_mark(out: &mut String, mark: &Mark, layout: &Layout) {
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
fn mark_shape(out: &mut String, kind: MarkKind, x: f64, top: f64) {
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
fn draw_highlighted(out: &mut String, t: &Timeline, layout: &Layout, ids: &BTreeSet<u64>) {
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
fn draw_verdict_line(out: &mut String, t: &Timeline, layout: &Layout) {
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

/// `text` cut to `max` characters, "…" marking a cut.
fn clip(text: &str, max: usize) -> String {
    assert!(max > 0, "clipping to nothing");
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut clipped: String = text.chars().take(max - 1).collect();
    clipped.push('…');
    clipped
}

/// `text` in lines of at most `width` characters, broken at spaces where it can be and inside
/// words longer than a line; its own line breaks kept.
fn wrap(text: &str, width: usize) -> Vec<String> {
    assert!(width > 0, "wrapping to no width");
    let mut lines = Vec::new();
    for paragraph in text.lines() {
        let mut line = String::new();
        let mut len = 0;
        for word in paragraph.split(' ') {
            let word_len = word.chars().count();
            if len > 0 && len + 1 + word_len > width {
                lines.push(std::mem::take(&mut line));
                len = 0;
            }
            if len > 0 {
                line.push(' ');
                len += 1;
            }
            for c in word.chars() {
                if len == width {
                    lines.push(std::mem::take(&mut line));
                    len = 0;
                }
                line.push(c);
                len += 1;
            }
        }
        lines.push(line);
    }
    lines
}

/// `text` escaped for XML text and attributes; characters XML 1.0 cannot carry become U+FFFD.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' => out.push(c),
            '\u{FFFE}' | '\u{FFFF}' => out.push('\u{FFFD}'),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Every lane kind, outcome and mark kind, text that needs escaping, and a verdict.
    fn small() -> Timeline {
        let mut t = Timeline::new("seed 7 <canary> & \"friends\"");
        let client = t.lane("client-0 'producer'", LaneKind::Client);
        let owner = t.lane("shard 1", LaneKind::Owner);
        let disk = t.lane("disk", LaneKind::Disk);
        let net = t.lane("network", LaneKind::Network);
        let node = t.lane("node", LaneKind::Node);
        let ok = t.begin(client, 0, "produce p0 <3 msgs>");
        t.end(ok, 2 * MS, SpanOutcome::Ok);
        let refused = t.begin(client, 3 * MS, "produce p1");
        t.end(refused, 4 * MS, SpanOutcome::Refused("not a member".into()));
        let lost = t.begin(owner, MS, "append p0");
        t.end(lost, 6 * MS, SpanOutcome::Lost("power loss".into()));
        t.begin(client, 7 * MS, "poll p0");
        let kinds = [
            (disk, MarkKind::DiskFault),
            (net, MarkKind::NetFault),
            (net, MarkKind::Partition),
            (net, MarkKind::Heal),
            (node, MarkKind::ProcessCrash),
            (node, MarkKind::PowerLoss),
            (node, MarkKind::Boot),
            (client, MarkKind::Note),
        ];
        for (i, (lane, kind)) in (0u64..).zip(kinds) {
            t.mark(lane, i * MS, kind, format!("mark {i} \u{1} ctl"));
        }
        let verdict = Verdict {
            at_nanos: 8 * MS,
            invariant: "1 no acknowledged loss".into(),
            evidence: "offset 4 acknowledged, then read as missing & gone ".repeat(30),
            spans: vec![lost, 999],
        };
        t.finish(10 * MS, Some(verdict));
        t
    }

    /// A light check that `xml` is well formed: tags balance, and no text or attribute holds
    /// a raw `<` or an `&` that starts no entity.
    fn assert_well_formed(xml: &str) {
        let mut stack: Vec<&str> = Vec::new();
        let mut rest = xml;
        while let Some(open) = rest.find('<') {
            assert_text(&rest[..open]);
            rest = &rest[open..];
            if let Some(after) = rest.strip_prefix("<?") {
                let end = after.find("?>").expect("an unclosed declaration");
                rest = &after[end + 2..];
                continue;
            }
            let close = rest.find('>').expect("an unclosed tag");
            let tag = &rest[1..close];
            rest = &rest[close + 1..];
            assert_text(tag);
            assert_eq!(
                tag.matches('"').count() % 2,
                0,
                "unbalanced quotes in <{tag}>"
            );
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name), "a mismatched </{name}>");
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().expect("a tag without a name"));
            }
        }
        assert_text(rest);
        assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    }

    fn assert_text(text: &str) {
        assert!(!text.contains('<'), "a raw < in {text:?}");
        for (i, _) in text.match_indices('&') {
            let entity = &text[i + 1..];
            let ok = ["amp;", "lt;", "gt;", "quot;", "apos;"]
                .iter()
                .any(|e| entity.starts_with(e));
            assert!(ok, "a bare & in {text:?}");
        }
        assert!(
            !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "a control character in {text:?}"
        );
    }

    #[test]
    fn svg_is_well_formed_and_shows_the_verdict() {
        let t = small();
        let svg = render_svg(&t);
        assert_well_formed(&svg);
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("invariant violated: 1 no acknowledged loss"));
        assert!(
            svg.contains("class=\"lo hl\""),
            "the lost span is highlighted"
        );
        assert!(svg.contains("#999 (not recorded)"));
        assert!(svg.contains("class=\"vl\""));
        assert!(svg.contains("seed 7 &lt;canary&gt; &amp; &quot;friends&quot;"));
        assert!(svg.contains("client-0 &apos;producer&apos;"));
        assert!(svg.contains("produce p0 &lt;3 msgs&gt;"));
        assert!(svg.contains("refused: not a member"));
        assert!(svg.contains("lost: power loss"));
        assert!(svg.contains("still running at the end"));
        for class in ["df", "nf", "pa", "he", "cr", "pl", "bo", "no"] {
            assert!(svg.contains(&format!("mk m-{class}")), "no {class} mark");
        }
        for class in ["g-cr", "g-pl", "g-bo", "bandl", "class=\"ru\""] {
            assert!(svg.contains(class), "no {class}");
        }
        assert!(svg.contains('…'), "the long evidence is cut");
        assert!(!svg.contains("items not recorded"));
    }

    #[test]
    fn lanes_are_grouped_by_kind() {
        let mut t = Timeline::new("order");
        t.lane("node", LaneKind::Node);
        t.lane("shard 0", LaneKind::Owner);
        t.lane("client 0", LaneKind::Client);
        t.lane("client 1", LaneKind::Client);
        let svg = render_svg(&t);
        let at = |text: &str| svg.find(text).expect(text);
        assert!(at(">client 0<") < at(">client 1<"));
        assert!(at(">client 1<") < at(">shard 0<"));
        assert!(at(">shard 0<") < at(">node<"));
        assert!(at(">clients<") < at(">owners<"));
    }

    #[test]
    fn output_is_deterministic() {
        assert_eq!(render_svg(&small()), render_svg(&small()));
        assert_eq!(render_html(&small()), render_html(&small()));
    }

    #[test]
    fn html_embeds_the_svg() {
        let html = render_html(&small());
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.trim_end().ends_with("</html>"));
        let start = html.find("<svg").expect("an inline svg");
        let end = html.find("</svg>").expect("a closed svg") + "</svg>".len();
        assert_well_formed(&html[start..end]);
        assert!(!html.contains("<?xml"));
        assert!(html.contains("<pre class=\"verdict\">invariant violated: 1 no acknowledged loss"));
        assert!(html.contains("id=\"zoom\""));
    }

    #[test]
    fn an_empty_timeline_renders() {
        let svg = render_svg(&Timeline::new(""));
        assert_well_formed(&svg);
        assert!(svg.contains(">0 ns<"));
    }

    #[test]
    fn dropped_items_are_said() {
        let mut t = Timeline::new("full");
        let lane = t.lane("c", LaneKind::Client);
        t.dropped = 12;
        t.mark(lane, 5, MarkKind::Note, "n");
        assert!(render_svg(&t).contains("12 items not recorded"));
    }

    #[test]
    fn ticks_follow_a_1_2_5_series() {
        assert_eq!(tick_step(10 * MS), MS);
        assert_eq!(tick_step(60_000 * MS), 5_000 * MS);
        assert_eq!(tick_step(2_500 * MS), 200 * MS);
        assert_eq!(tick_label(1_400 * MS, 200 * MS), "1.4 s");
        assert_eq!(tick_label(15_000 * MS, 5_000 * MS), "15 s");
        assert_eq!(tick_label(250_000, 50_000), "250 µs");
        assert_eq!(tick_label(30 * MS, 10 * MS), "30 ms");
        assert_eq!(fmt_time(1_234_567_890), "1.234567 s");
        assert_eq!(fmt_time(12_345_678), "12.345 ms");
        assert_eq!(fmt_duration(1_500), "1.500 µs");
    }

    #[test]
    fn wrap_and_clip_keep_to_their_widths() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("abcdefgh", 3), ["abc", "def", "gh"]);
        assert_eq!(wrap("a\nb", 10), ["a", "b"]);
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 4), "abc");
        assert_eq!(esc("<&>\"'\u{0}"), "&lt;&amp;&gt;&quot;&apos;\u{FFFD}");
    }

    #[test]
    fn close_spans_merge_but_named_ones_stay_apart() {
        let mut t = Timeline::new("merge");
        let lane = t.lane("c", LaneKind::Client);
        let ids: Vec<u64> = (0..1_000)
            .map(|i| {
                let id = t.begin(lane, i * 1_000, "req");
                t.end(id, i * 1_000 + 500, SpanOutcome::Ok);
                id
            })
            .collect();
        let verdict = Verdict {
            at_nanos: 500_000,
            invariant: "x".into(),
            evidence: "y".into(),
            spans: vec![ids[500]],
        };
        t.finish(10_000 * MS, Some(verdict));
        let svg = render_svg(&t);
        assert!(svg.contains("999 ok spans drawn as one bar"));
        assert!(svg.contains("class=\"ok hl\""));
    }

    /// `spans` spans over one virtual minute on 24 lanes, outcomes interleaved.
    fn busy(spans: u64) -> Timeline {
        let mut t = Timeline::new("busy");
        let lanes: Vec<usize> = (0..24)
            .map(|i| t.lane(&format!("client {i}"), LaneKind::Client))
            .collect();
        let step = 60_000 * MS / spans;
        for i in 0..spans {
            let lane = lanes[(i % 24) as usize];
            let id = t.begin(lane, i * step, format!("produce p{} batch {i}", i % 7));
            let outcome = match i % 5 {
                0 => SpanOutcome::Refused("the partition is fenced".into()),
                1 => SpanOutcome::Lost("connection dropped".into()),
                2 => SpanOutcome::Running,
                _ => SpanOutcome::Ok,
            };
            if outcome != SpanOutcome::Running {
                t.end(id, i * step + 24 * step * (1 + i % 3), outcome);
            }
        }
        t.finish(60_000 * MS, None);
        t
    }

    #[test]
    fn a_hundred_thousand_spans_stay_small() {
        let t = busy(MAX_ITEMS as u64);
        assert_eq!(t.spans.len(), MAX_ITEMS);
        let svg = render_svg(&t);
        assert!(svg.len() < 30_000_000, "{} bytes", svg.len());
        assert!(render_html(&t).len() < 30_000_000);
        assert_well_formed(&svg);
    }

    /// A realistic failing run, for a person to look at.
    fn sample() -> Timeline {
        let mut t = Timeline::new("seed 0x5eed42 · profile mixed · 1 no acknowledged loss");
        let clients: Vec<usize> = [
            "producer-0",
            "producer-1",
            "producer-2",
            "consumer-0",
            "group-member-0",
            "admin-0",
        ]
        .iter()
        .map(|name| t.lane(name, LaneKind::Client))
        .collect();
        let owners: Vec<usize> = ["metadata", "shard 0", "shard 1"]
            .iter()
            .map(|name| t.lane(name, LaneKind::Owner))
            .collect();
        let disk = t.lane("disk", LaneKind::Disk);
        let net = t.lane("network", LaneKind::Network);
        let node = t.lane("node", LaneKind::Node);
        let mut rng: u64 = 0x5eed42;
        let mut next = |n: u64| {
            rng = rng
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (rng >> 33) % n
        };
        let power_loss = 1_400 * MS;
        let boot = 1_650 * MS;
        let mut named = Vec::new();
        for (c, &lane) in clients.iter().enumerate() {
            let mut at = next(20) * MS;
            while at < 3_000 * MS {
                let took = (2 + next(30)) * MS;
                let label = format!(
                    "{} p{}",
                    [
                        "produce",
                        "produce",
                        "produce",
                        "poll",
                        "join group",
                        "create topic"
                    ][c],
                    next(4)
                );
                let id = t.begin(lane, at, label);
                let ends = at + took;
                let outcome = if at < power_loss && ends > power_loss {
                    SpanOutcome::Lost("the connection closed: power loss".into())
                } else if (power_loss..boot).contains(&at) {
                    SpanOutcome::Lost("no reply: the node is down".into())
                } else if c == 2 && (2_100 * MS..2_450 * MS).contains(&ends) {
                    SpanOutcome::Lost("no reply: partitioned".into())
                } else if next(12) == 0 {
                    SpanOutcome::Refused("not the leader of p2".into())
                } else {
                    SpanOutcome::Ok
                };
                if ends < 2_990 * MS {
                    if matches!(outcome, SpanOutcome::Lost(_)) && c == named.len() && c < 2 {
                        named.push(id);
                    }
                    t.end(id, ends, outcome);
                }
                at = ends + next(40) * MS;
            }
        }
        for &lane in &owners {
            let mut at = 5 * MS;
            while at < 3_000 * MS {
                let took = (1 + next(8)) * MS;
                if !(power_loss..boot).contains(&at) {
                    let id = t.begin(lane, at, "append batch");
                    if at + took < 3_000 * MS {
                        t.end(id, at + took, SpanOutcome::Ok);
                    }
                }
                at += took + next(60) * MS;
            }
        }
        t.mark(
            disk,
            800 * MS,
            MarkKind::DiskFault,
            "torn write shard-1/00000.log @ 40960",
        );
        t.mark(
            disk,
            1_390 * MS,
            MarkKind::DiskFault,
            "lying sync shard-0/00000.log",
        );
        t.mark(net, 500 * MS, MarkKind::NetFault, "delay 40 ms producer-1");
        t.mark(net, 2_100 * MS, MarkKind::Partition, "producer-2 cut off");
        t.mark(net, 2_450 * MS, MarkKind::Heal, "producer-2 back");
        t.mark(node, 300 * MS, MarkKind::ProcessCrash, "process crash");
        t.mark(
            node,
            320 * MS,
            MarkKind::Boot,
            "boot: recovered 3 partitions",
        );
        t.mark(
            node,
            power_loss,
            MarkKind::PowerLoss,
            "power loss: unsynced pages dropped",
        );
        t.mark(
            node,
            boot,
            MarkKind::Boot,
            "boot: recovered 3 partitions, truncated p0 at 17",
        );
        t.mark(
            owners[1],
            1_700 * MS,
            MarkKind::Note,
            "recovery truncated p0 to offset 17",
        );
        let verdict = Verdict {
            at_nanos: 2_720 * MS,
            invariant: "1 no acknowledged loss".into(),
            evidence: "partition 0: offset 17 (message id 0x2a, acknowledged to producer-0 under \
                       durability=always at 1.392 s) is missing after the power loss at 1.400 s; \
                       the log ends at offset 16 and the superblock's durable point says 18. \
                       A poll at 2.720 s returned offsets 0..=16 then 18."
                .into(),
            spans: named,
        };
        t.finish(3_000 * MS, Some(verdict));
        t
    }

    #[test]
    #[ignore = "writes /tmp/timeline-sample.{svg,html} and /tmp/timeline-busy.svg to look at"]
    #[allow(
        clippy::disallowed_methods,
        reason = "a sample written for a person, not a run"
    )]
    fn sample_picture() {
        let t = sample();
        std::fs::write("/tmp/timeline-sample.svg", render_svg(&t)).expect("write the svg");
        std::fs::write("/tmp/timeline-sample.html", render_html(&t)).expect("write the html");
        let busy = busy(MAX_ITEMS as u64);
        std::fs::write("/tmp/timeline-busy.svg", render_svg(&busy)).expect("write the busy svg");
    }
}

//! The timeline's renderers: well-formed output, grouping, determinism, bounds.

use super::layout::tick_step;
use super::text::{clip, esc, fmt_duration, fmt_time, tick_label, wrap};
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

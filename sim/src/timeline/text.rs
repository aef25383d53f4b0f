//! Text in the picture: times and durations in their unit, tick labels, a span's one-line
//! name and tooltip, clipping and wrapping to a width, and XML escaping.

use super::span_end;
use super::{Span, SpanOutcome, Timeline, Verdict};

/// Most characters of one label or reason in a tooltip.
pub(super) const MAX_TIP_CHARS: usize = 160;

/// A tick's label, in the unit that suits the step (s, ms, µs or ns), with one decimal where
/// the step is a tenth of that unit.
pub(super) fn tick_label(tick: u64, step: u64) -> String {
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
pub(super) fn fmt_time(nanos: u64) -> String {
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
pub(super) fn fmt_duration(nanos: u64) -> String {
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

/// "#12 produce p3 (refused: not the leader)".
pub(super) fn span_line(span: &Span) -> String {
    let label = clip(&span.label, MAX_TIP_CHARS);
    match &span.outcome {
        SpanOutcome::Refused(why) | SpanOutcome::Lost(why) => {
            format!("#{} {label} ({})", span.id, clip(why, MAX_TIP_CHARS))
        }
        SpanOutcome::Ok | SpanOutcome::Running => format!("#{} {label}", span.id),
    }
}

/// A span's tooltip: label, start, end, duration and outcome.
pub(super) fn span_tip(span: &Span, horizon: u64) -> String {
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

/// `text` cut to `max` characters, "…" marking a cut.
pub(super) fn clip(text: &str, max: usize) -> String {
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
pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
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
pub(super) fn esc(text: &str) -> String {
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

/// "spans named: #12 produce p3, #40 (not recorded)".
pub(super) fn named_spans(t: &Timeline, verdict: &Verdict) -> String {
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

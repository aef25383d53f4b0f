//! What a bench phase measured and how it is shown: the table, the JSON, the last line.
//! 1 MB = 1 000 000 bytes (as iggy-bench); bytes are payload bytes (messages × size).

use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// Latencies are recorded in nanoseconds, saturating at ten minutes.
const MAX_LATENCY_NANOS: u64 = 600_000_000_000;

/// A latency histogram (ns, 3 significant figures).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NANOS, 3).expect("valid histogram bounds")
}

/// What a latency measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyOf {
    /// One SendMessages call, request to reply.
    Send,
    /// One PollMessages call that returned messages, request to reply.
    Poll,
    /// Each message: its send timestamp (in the payload) to the reply that delivered it.
    EndToEnd,
}

impl LatencyOf {
    pub fn name(self) -> &'static str {
        match self {
            LatencyOf::Send => "send",
            LatencyOf::Poll => "poll",
            LatencyOf::EndToEnd => "end-to-end",
        }
    }
}

/// One phase's actors of one role, merged.
pub struct PhaseResult {
    pub name: String,
    pub actors: usize,
    pub messages: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub latency_of: LatencyOf,
    pub histogram: Histogram<u64>,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latencies {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

fn ms(nanos: u64) -> f64 {
    nanos as f64 / 1e6
}

impl PhaseResult {
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }

    pub fn msg_per_s(&self) -> f64 {
        self.messages as f64 / self.seconds.max(1e-9)
    }

    pub fn latencies(&self) -> Latencies {
        let h = &self.histogram;
        if h.is_empty() {
            return Latencies {
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                p999: 0.0,
                max: 0.0,
            };
        }
        Latencies {
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }

    pub fn json(&self) -> Value {
        let l = self.latencies();
        json!({
            "phase": self.name,
            "actors": self.actors,
            "messages": self.messages,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "mb_per_s": self.mb_per_s(),
            "msg_per_s": self.msg_per_s(),
            "latency_of": self.latency_of.name(),
            "latency_samples": self.histogram.len(),
            "latency_ms": {
                "p50": l.p50,
                "p90": l.p90,
                "p99": l.p99,
                "p999": l.p999,
                "max": l.max,
            },
        })
    }
}

/// The report table, one row per phase.
pub fn table(phases: &[PhaseResult]) -> String {
    let mut out = format!(
        "{:<34} {:>6} {:>10} {:>13} {:>8} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}  latency of\n",
        "phase",
        "actors",
        "messages",
        "bytes",
        "seconds",
        "MB/s",
        "msg/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "p999 ms",
        "max ms"
    );
    for p in phases {
        let l = p.latencies();
        out.push_str(&format!(
            "{:<34} {:>6} {:>10} {:>13} {:>8.3} {:>9.2} {:>10.0} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3}  {}\n",
            p.name,
            p.actors,
            p.messages,
            p.bytes,
            p.seconds,
            p.mb_per_s(),
            p.msg_per_s(),
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            p.latency_of.name()
        ));
    }
    out
}

/// The last line: `bench <kind> mb_per_s=<x> msg_per_s=<x> p50_ms=<x> p99_ms=<x>`.
pub fn last_line(kind: &str, measured: &PhaseResult) -> String {
    let l = measured.latencies();
    format!(
        "bench {kind} mb_per_s={:.2} msg_per_s={:.0} p50_ms={:.2} p99_ms={:.2}",
        measured.mb_per_s(),
        measured.msg_per_s(),
        l.p50,
        l.p99
    )
}

/// A size in bytes: a number, optionally with KB/MB/GB (10^3) or KiB/MiB/GiB (2^10) or B.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("bad size {text:?} (e.g. 1000000, 500MB, 1GiB)"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "bad size unit in {text:?} (use B, KB, MB, GB, KiB, MiB, GiB)"
            ))
        }
    };
    let bytes = number * factor as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("size {text:?} out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert_eq!(parse_size("2MB").unwrap(), 2_000_000);
        assert_eq!(parse_size("1 GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5kb").unwrap(), 1500);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("0").is_err());
    }

    #[test]
    fn last_line_shape() {
        let mut histogram = histogram();
        histogram.record(1_500_000).unwrap();
        histogram.record(2_500_000).unwrap();
        let phase = PhaseResult {
            name: "pinned-producer".into(),
            actors: 2,
            messages: 400,
            bytes: 40_000,
            seconds: 0.5,
            latency_of: LatencyOf::Send,
            histogram,
        };
        let line = last_line("pinned-producer", &phase);
        assert!(
            line.starts_with(
                "bench pinned-producer mb_per_s=0.08 msg_per_s=800 p50_ms=1.50 p99_ms=2.50"
            ),
            "{line}"
        );
    }
}

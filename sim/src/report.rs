//! What a run reports, shared by the three worlds: the broken invariant ([`Violation`]) and
//! the names of the invariants, the run's [`RunReport`], and the [`Trace`] whose hash is the
//! run's fingerprint.

use crate::profile::Profile;
use cairn_engine::partition::Outcome;
use cairn_faults::{FaultKind, FaultRecord, SimClock};
use std::collections::BTreeMap;
use std::fmt;
use xxhash::xxh3::Xxh3;

// The invariants (`docs/design.md`, "Invariants") a violation names.
pub const INV_NO_LOSS: &str = "1 no acknowledged loss";
pub const INV_PREFIX: &str = "2 prefix property";
pub const INV_EXACT: &str = "3 no phantoms, exact bytes";
pub const INV_JUSTIFIED: &str = "4 justified decisions";
pub const INV_OFFSETS: &str = "5 consumer offsets";
pub const INV_LIVENESS: &str = "7 liveness";

/// A check's result: what it found, or the invariant it saw broken.
pub type Checked<T> = Result<T, Violation>;

/// A violation of `invariant`, with what shows it.
pub fn violation(invariant: &'static str, evidence: String) -> Violation {
    Violation {
        invariant,
        evidence,
    }
}

/// The invariant a failed engine assertion reports.
pub const INV_ASSERTION: &str = "engine assertion";

/// A broken invariant and what shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub evidence: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invariant violated: {}\n  evidence: {}",
            self.invariant, self.evidence
        )
    }
}

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub profile: Profile,
    pub trace_hash: u64,
    pub violation: Option<Violation>,
    pub faults_fired: BTreeMap<FaultKind, usize>,
    pub outcomes: BTreeMap<Outcome, usize>,
    /// Recovery's fine-grained decisions: fence reasons and actions, by name.
    pub decisions: BTreeMap<&'static str, usize>,
    pub simulated_nanos: u64,
    pub operations: u64,
    pub restarts: u64,
    /// Boot attempts that could not complete (an injected I/O error) and were retried.
    pub boot_retries: u64,
    /// Crashes that struck while recovery was running.
    pub crashes_in_recovery: u64,
    pub acked_messages: u64,
    /// The run's picture, when asked for ([`crate::run::RunOptions::timeline`]).
    pub timeline: Option<Box<crate::timeline::Timeline>>,
}

impl RunReport {
    pub fn new(profile: Profile) -> RunReport {
        RunReport {
            profile,
            trace_hash: 0,
            violation: None,
            faults_fired: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            decisions: BTreeMap::new(),
            simulated_nanos: 0,
            operations: 0,
            restarts: 0,
            boot_retries: 0,
            crashes_in_recovery: 0,
            acked_messages: 0,
            timeline: None,
        }
    }

    /// The report of a run that ended: its verdict, operations, virtual time, trace hash.
    pub fn finished(
        mut self,
        violation: Option<Violation>,
        operations: u32,
        clock: &SimClock,
        trace: &Trace,
    ) -> RunReport {
        self.violation = violation;
        self.operations = u64::from(operations);
        self.simulated_nanos = clock.now_nanos();
        self.trace_hash = trace.digest();
        self
    }

    /// Counts the faults the disk fired, by kind.
    pub fn count_faults(&mut self, records: &[FaultRecord]) {
        for record in records {
            *self.faults_fired.entry(record.kind).or_default() += 1;
        }
    }

    pub fn replay_command(&self, canary: Option<&str>) -> String {
        let canary = canary.map(|c| format!(" --canary {c}")).unwrap_or_default();
        let scope = if self.profile.scope == crate::profile::Scope::of(self.profile.seed) {
            String::new()
        } else {
            format!(" --scope {}", self.profile.scope.name())
        };
        format!(
            "cargo run --release -p cairn-sim -- --seed {:#x}{scope}{canary} --verbose",
            self.profile.seed
        )
    }
}

/// The ordered record of a run; its hash is the run's fingerprint.
pub struct Trace {
    hasher: Xxh3,
    verbose: bool,
    clock: SimClock,
}

impl Trace {
    pub fn new(verbose: bool, clock: SimClock) -> Trace {
        Trace {
            hasher: Xxh3::new(),
            verbose,
            clock,
        }
    }

    /// One line of the trace: the virtual time in µs, right-aligned in 14 columns, then the
    /// text. Hashed as it is written, without building the line (the hash is that of the
    /// line's bytes and a newline, as `--verbose` prints them).
    pub fn event(&mut self, text: impl AsRef<str>) {
        let micros = self.clock.now_nanos() / 1000;
        let text = text.as_ref();
        let mut time = [b' '; 20];
        let mut at = time.len();
        let mut rest = micros;
        loop {
            at -= 1;
            time[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let start = at.min(time.len() - 14);
        self.hasher.update(&time[start..]);
        self.hasher.update(b" ");
        self.hasher.update(text.as_bytes());
        self.hasher.update(b"\n");
        if self.verbose {
            println!("{micros:>14} {text}");
        }
    }

    pub fn digest(&self) -> u64 {
        self.hasher.digest()
    }

    pub fn set_verbose(&mut self, verbose: bool) {
        self.verbose = verbose;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The trace hashes exactly the bytes `--verbose` prints: the time right-aligned in 14
    /// columns (wider when it needs more), a space, the text, a newline.
    #[test]
    fn an_event_hashes_the_line_it_prints() {
        for micros in [
            0u64,
            7,
            1_234_567,
            99_999_999_999_999,
            1_844_674_407_370_955,
        ] {
            let clock = SimClock::new();
            clock.advance(micros * 1000);
            let mut trace = Trace::new(false, clock);
            trace.event("p0 send 0..3");
            let mut expected = Xxh3::new();
            expected.update(format!("{micros:>14} p0 send 0..3\n").as_bytes());
            assert_eq!(trace.digest(), expected.digest(), "at {micros} µs");
        }
    }
}

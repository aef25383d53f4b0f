//! Log lines a client can cause at will (a refused connection, a refused login) are written
//! at most once per interval per site, each with the count of those left out since the last
//! one: a flood of refusals cannot flood the log (review S15).

use std::sync::Mutex;

/// One site's throttle.
pub struct Throttle {
    interval_nanos: u64,
    /// (when the last line was written, lines left out since), `None` before the first.
    state: Mutex<Option<(u64, u64)>>,
}

impl Throttle {
    pub const fn new(interval_nanos: u64) -> Throttle {
        Throttle {
            interval_nanos,
            state: Mutex::new(None),
        }
    }

    /// At `now` (monotonic ns): `Some(left out since the last line)` if a line may be
    /// written, else `None` (and the line is counted as left out).
    pub fn admit(&self, now: u64) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match *state {
            Some((last, ref mut left_out)) if now.saturating_sub(last) < self.interval_nanos => {
                *left_out += 1;
                None
            }
            Some((_, left_out)) => {
                *state = Some((now, 0));
                Some(left_out)
            }
            None => {
                *state = Some((now, 0));
                Some(0)
            }
        }
    }
}

/// How often each throttled site may write a line.
pub const LOG_INTERVAL_NANOS: u64 = 1_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_left_out() {
        let throttle = Throttle::new(10);
        assert_eq!(throttle.admit(100), Some(0));
        assert_eq!(throttle.admit(101), None);
        assert_eq!(throttle.admit(109), None);
        assert_eq!(throttle.admit(110), Some(2));
        assert_eq!(throttle.admit(111), None);
        assert_eq!(throttle.admit(500), Some(1));
    }
}

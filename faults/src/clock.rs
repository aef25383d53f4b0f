//! Virtual time: a monotonic clock that moves only when the simulator advances it, timers
//! that the executor fires in deadline order, and a wall clock that can jump.

use cairn_engine::env::{BoxFuture, Clock, Deadline, SleepDeadline};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The Unix time (µs) the simulated wall clock starts at: 2026-01-01T00:00:00Z.
pub const WALL_EPOCH_MICROS: u64 = 1_767_225_600_000_000;

#[derive(Default)]
struct ClockState {
    now_nanos: u64,
    wall_offset_micros: i64,
    next_timer: u64,
    /// (deadline, timer id) of pending timers.
    timers: BTreeSet<(u64, u64)>,
    wakers: BTreeMap<u64, Waker>,
}

/// The simulated clock. Clones share the same time.
#[derive(Clone, Default)]
pub struct SimClock {
    state: Arc<Mutex<ClockState>>,
}

impl SimClock {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn now_nanos(&self) -> u64 {
        self.state.lock().expect("clock").now_nanos
    }

    /// Moves time forward by `nanos` (timers that come due are left for the executor).
    pub fn advance(&self, nanos: u64) {
        self.state.lock().expect("clock").now_nanos += nanos;
    }

    /// The earliest pending timer deadline.
    pub fn next_deadline(&self) -> Option<u64> {
        self.state
            .lock()
            .expect("clock")
            .timers
            .first()
            .map(|(d, _)| *d)
    }

    /// Moves time to the earliest pending timer (if later than now) and fires every timer due
    /// by then. Returns false when no timer is pending.
    pub fn fire_next(&self) -> bool {
        let mut s = self.state.lock().expect("clock");
        let Some(&(deadline, _)) = s.timers.first() else {
            return false;
        };
        s.now_nanos = s.now_nanos.max(deadline);
        let now = s.now_nanos;
        while let Some(&(d, id)) = s.timers.first() {
            if d > now {
                break;
            }
            s.timers.pop_first();
            if let Some(waker) = s.wakers.remove(&id) {
                waker.wake();
            }
        }
        true
    }

    /// Makes the wall clock jump by `micros` (backwards when negative); monotonic time and
    /// timers are unaffected.
    pub fn jump_wall(&self, micros: i64) {
        self.state.lock().expect("clock").wall_offset_micros += micros;
    }
}

struct Sleep {
    clock: SimClock,
    deadline: u64,
    id: Option<u64>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.clock.state.lock().expect("clock");
        if s.now_nanos >= self.deadline {
            if let Some(id) = self.id {
                s.timers.remove(&(self.deadline, id));
                s.wakers.remove(&id);
            }
            return Poll::Ready(());
        }
        let id = match self.id {
            Some(id) => id,
            None => {
                let id = s.next_timer;
                s.next_timer += 1;
                s.timers.insert((self.deadline, id));
                id
            }
        };
        s.wakers.insert(id, cx.waker().clone());
        drop(s);
        self.id = Some(id);
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            if let Ok(mut s) = self.clock.state.lock() {
                s.timers.remove(&(self.deadline, id));
                s.wakers.remove(&id);
            }
        }
    }
}

impl Clock for SimClock {
    fn wall_micros(&self) -> u64 {
        let s = self.state.lock().expect("clock");
        let micros = WALL_EPOCH_MICROS as i64 + (s.now_nanos / 1000) as i64 + s.wall_offset_micros;
        micros.max(0) as u64
    }

    fn monotonic_nanos(&self) -> u64 {
        self.now_nanos()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        let deadline = self.now_nanos() + duration.as_nanos() as u64;
        Box::pin(Sleep {
            clock: self.clone(),
            deadline,
            id: None,
        })
    }

    fn deadline(&self) -> Box<dyn Deadline> {
        let clock = self.clone();
        Box::new(SleepDeadline::new(move |after| clock.sleep(after)))
    }
}

/// One host's view of [`SimClock`]'s time: its monotonic clock runs at `rate_permille`
/// thousandths of the true rate (a fast or slow oscillator) and its wall clock is off by
/// `wall_offset_micros` (an NTP that is wrong). Timers it sets fire when its own clock says
/// they are due. Clones share the underlying time.
#[derive(Clone)]
pub struct SkewedClock {
    inner: SimClock,
    rate_permille: u64,
    wall_offset_micros: i64,
}

impl SkewedClock {
    /// The slowest and fastest rates a host's clock may run at.
    pub const RATES: std::ops::RangeInclusive<u64> = 500..=2000;

    pub fn new(inner: SimClock, rate_permille: u64, wall_offset_micros: i64) -> SkewedClock {
        assert!(
            Self::RATES.contains(&rate_permille),
            "a clock rate of {rate_permille}‰ is outside {:?}",
            Self::RATES
        );
        SkewedClock {
            inner,
            rate_permille,
            wall_offset_micros,
        }
    }
}

impl Clock for SkewedClock {
    fn wall_micros(&self) -> u64 {
        let micros = self.inner.wall_micros() as i64 + self.wall_offset_micros;
        micros.max(0) as u64
    }

    fn monotonic_nanos(&self) -> u64 {
        (u128::from(self.inner.now_nanos()) * u128::from(self.rate_permille) / 1000) as u64
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        // This host's `duration` is `duration / rate` of the true time (rounded up, so a
        // timer never fires before its own clock says it is due).
        let nanos = duration.as_nanos() * 1000;
        let rate = u128::from(self.rate_permille);
        let true_nanos = nanos.div_ceil(rate).min(u128::from(u64::MAX)) as u64;
        self.inner.sleep(Duration::from_nanos(true_nanos))
    }

    fn deadline(&self) -> Box<dyn Deadline> {
        let clock = self.clone();
        Box::new(SleepDeadline::new(move |after| clock.sleep(after)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_clock_runs_at_its_rate_and_keeps_its_offset() {
        let clock = SimClock::new();
        let fast = SkewedClock::new(clock.clone(), 1100, -5_000_000);
        let slow = SkewedClock::new(clock.clone(), 900, 3_000_000);
        clock.advance(1_000_000_000);
        assert_eq!(fast.monotonic_nanos(), 1_100_000_000);
        assert_eq!(slow.monotonic_nanos(), 900_000_000);
        assert_eq!(fast.wall_micros() + 5_000_000, clock.wall_micros());
        assert_eq!(slow.wall_micros(), clock.wall_micros() + 3_000_000);
        // A fast clock's second passes sooner: its timer is set for 1/1.1 s of true time.
        let before = clock.now_nanos();
        let timer = {
            let sleep = fast.sleep(Duration::from_secs(1));
            let mut sleep = std::pin::pin!(sleep);
            let waker = std::task::Waker::noop();
            let mut cx = Context::from_waker(waker);
            assert!(sleep.as_mut().poll(&mut cx).is_pending());
            clock.next_deadline().unwrap()
        };
        assert_eq!(timer - before, 909_090_910);
    }
}

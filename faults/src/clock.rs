//! Virtual time: a monotonic clock that moves only when the simulator advances it, timers
//! that the executor fires in deadline order, and a wall clock that can jump.

use cairn_engine::env::{BoxFuture, Clock};
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
}

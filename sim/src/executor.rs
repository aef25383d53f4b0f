//! The deterministic executor: one thread, cooperative tasks, and when several are ready the
//! next one is chosen by a PRNG seeded from the run's seed. When nothing is ready, virtual
//! time jumps to the next timer of the [`SimClock`].

use cairn_engine::env::{BlockingJob, BoxFuture, Clock, PoolBusy, TaskHandle, Tasks};
use cairn_faults::SimClock;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// Most tasks alive at once; spawning more is a bug in the workload.
pub const MAX_TASKS: usize = 10_000;

struct Slot {
    future: Option<BoxFuture<'static, ()>>,
    /// The group of the handle that spawned it ([`ExecutorHandle::in_group`]).
    group: u32,
    cancelled: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
    /// Marks the task ready; made once at spawn and lent to every poll.
    waker: Waker,
}

#[derive(Default)]
struct Shared {
    tasks: BTreeMap<u64, Slot>,
    next_id: u64,
}

struct Ready(Mutex<BTreeSet<u64>>);

struct TaskWaker {
    id: u64,
    ready: Arc<Ready>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.ready.0.lock().expect("ready").insert(self.id);
    }
}

/// How a call to [`Executor::run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// No task left.
    Done,
    /// Tasks remain, but none is ready and no timer is pending (a deadlock).
    Stalled,
    /// The step budget ran out.
    Budget,
    /// Virtual time reached the deadline.
    Deadline,
    /// The caller's condition asked to stop.
    Asked,
}

pub struct Executor {
    shared: Arc<Mutex<Shared>>,
    ready: Arc<Ready>,
    rng: ChaCha8Rng,
    clock: SimClock,
    blocking_cost: Arc<AtomicU64>,
    device_queue: Arc<AtomicU64>,
    blocking_jobs: Arc<AtomicUsize>,
    /// Whether a task's panic ends only that task (as tokio's runtime does) instead of the
    /// run; off unless a test injects a panic and judges what follows ([`Executor::catch_panics`]).
    catch_panics: bool,
    /// The messages of the panics caught, in order.
    panics: Vec<String>,
}

/// Most blocking jobs queued or running at once before the simulated pool is busy.
pub const BLOCKING_SLOTS: usize = 64;

/// Spawns tasks onto an [`Executor`]; implements the engine's `Tasks`. Workers are tasks
/// like any other (their disk calls owe virtual time they sleep off); a blocking job is a
/// task that sleeps the pool's virtual cost, then runs the job; a device job is a task that
/// runs it (the persist job hands its disk time to the shard that awaits it).
#[derive(Clone)]
pub struct ExecutorHandle {
    shared: Arc<Mutex<Shared>>,
    ready: Arc<Ready>,
    clock: SimClock,
    blocking_cost_nanos: Arc<AtomicU64>,
    /// The virtual time a device job waits before it runs (see [`Self::set_device_queue`]).
    device_queue_nanos: Arc<AtomicU64>,
    blocking_jobs: Arc<AtomicUsize>,
    /// Tasks spawned through this handle belong to this group (0 by default).
    group: u32,
}

struct SimTaskHandle {
    cancelled: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
    ready: Arc<Ready>,
    id: u64,
}

impl TaskHandle for SimTaskHandle {
    fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.ready.0.lock().expect("ready").insert(self.id);
    }
    fn is_finished(&self) -> bool {
        self.finished.load(Ordering::SeqCst)
    }
}

impl ExecutorHandle {
    /// The virtual time every blocking job takes (a password hash, say).
    pub fn set_blocking_cost(&self, cost: std::time::Duration) {
        self.blocking_cost_nanos
            .store(cost.as_nanos() as u64, Ordering::SeqCst);
    }

    /// The virtual time every device job waits for its thread before it runs: what it
    /// syncs is not on the disk during that wait, while its caller goes on.
    pub fn set_device_queue(&self, wait: std::time::Duration) {
        self.device_queue_nanos
            .store(wait.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Drops the tasks of `group` from inside a running task (a world whose director crashes
    /// one simulated process while the others run on).
    pub fn kill_group(&self, group: u32) {
        kill_group(&self.shared, &self.ready, group);
    }

    /// A handle whose tasks, and the tasks they spawn through it, belong to `group`: one
    /// simulated process, which [`Executor::kill_group`] kills while the others run on.
    pub fn in_group(&self, group: u32) -> ExecutorHandle {
        ExecutorHandle {
            group,
            ..self.clone()
        }
    }
}

pub use cairn_engine::env::panic_message;

fn kill_group(shared: &Mutex<Shared>, ready: &Ready, group: u32) {
    let killed: Vec<Slot> = {
        let mut shared = shared.lock().expect("executor");
        let ids: Vec<u64> = shared
            .tasks
            .iter()
            .filter(|(_, slot)| slot.group == group)
            .map(|(id, _)| *id)
            .collect();
        let mut ready = ready.0.lock().expect("ready");
        ids.iter()
            .filter_map(|id| {
                ready.remove(id);
                shared.tasks.remove(id)
            })
            .collect()
    };
    // Dropped outside the locks: a future's drop may wake or spawn.
    drop(killed);
}

/// Counts a queued blocking job until it ran (or was dropped with a killed task).
struct BlockingSlot(Arc<AtomicUsize>);

impl Drop for BlockingSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Tasks for ExecutorHandle {
    fn spawn_worker(&self, _name: &str, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle> {
        self.spawn(task)
    }

    fn spawn_device(&self, job: BlockingJob) {
        let wait = std::time::Duration::from_nanos(self.device_queue_nanos.load(Ordering::SeqCst));
        let clock = self.clock.clone();
        drop(self.spawn(Box::pin(async move {
            if !wait.is_zero() {
                clock.sleep(wait).await;
            }
            job()
        })));
    }

    fn spawn_blocking(&self, job: BlockingJob) -> Result<(), PoolBusy> {
        if self.blocking_jobs.fetch_add(1, Ordering::SeqCst) >= BLOCKING_SLOTS {
            self.blocking_jobs.fetch_sub(1, Ordering::SeqCst);
            return Err(PoolBusy);
        }
        let slot = BlockingSlot(self.blocking_jobs.clone());
        let cost = std::time::Duration::from_nanos(self.blocking_cost_nanos.load(Ordering::SeqCst));
        let clock = self.clock.clone();
        self.spawn(Box::pin(async move {
            let _slot = slot;
            if !cost.is_zero() {
                clock.sleep(cost).await;
            }
            job();
        }));
        Ok(())
    }

    fn spawn(&self, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle> {
        let mut shared = self.shared.lock().expect("executor");
        assert!(shared.tasks.len() < MAX_TASKS, "too many simulated tasks");
        let id = shared.next_id;
        shared.next_id += 1;
        let cancelled = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        let waker = Waker::from(Arc::new(TaskWaker {
            id,
            ready: self.ready.clone(),
        }));
        shared.tasks.insert(
            id,
            Slot {
                future: Some(task),
                group: self.group,
                cancelled: cancelled.clone(),
                finished: finished.clone(),
                waker,
            },
        );
        self.ready.0.lock().expect("ready").insert(id);
        Box::new(SimTaskHandle {
            cancelled,
            finished,
            ready: self.ready.clone(),
            id,
        })
    }
}

impl Executor {
    pub fn new(seed: u64, clock: SimClock) -> Executor {
        Executor {
            shared: Arc::new(Mutex::new(Shared::default())),
            ready: Arc::new(Ready(Mutex::new(BTreeSet::new()))),
            rng: ChaCha8Rng::seed_from_u64(seed),
            clock,
            blocking_cost: Arc::new(AtomicU64::new(0)),
            device_queue: Arc::new(AtomicU64::new(0)),
            blocking_jobs: Arc::new(AtomicUsize::new(0)),
            catch_panics: false,
            panics: Vec::new(),
        }
    }

    /// From now on a task that panics ends alone, as under tokio (the production runtime
    /// catches a task's panic, drops the task and runs the others on), and its message is
    /// kept for [`Executor::take_panics`]. Only for tests that inject a panic: otherwise
    /// every panic is an assertion that fails the run.
    pub fn catch_panics(&mut self) {
        self.catch_panics = true;
    }

    /// The panics caught since the last call.
    pub fn take_panics(&mut self) -> Vec<String> {
        std::mem::take(&mut self.panics)
    }

    pub fn handle(&self) -> ExecutorHandle {
        ExecutorHandle {
            shared: self.shared.clone(),
            ready: self.ready.clone(),
            clock: self.clock.clone(),
            blocking_cost_nanos: self.blocking_cost.clone(),
            device_queue_nanos: self.device_queue.clone(),
            blocking_jobs: self.blocking_jobs.clone(),
            group: 0,
        }
    }

    pub fn task_count(&self) -> usize {
        self.shared.lock().expect("executor").tasks.len()
    }

    /// Drops every task (a node's crash): their futures are dropped without running again.
    pub fn kill_all(&self) {
        let tasks = std::mem::take(&mut self.shared.lock().expect("executor").tasks);
        self.ready.0.lock().expect("ready").clear();
        drop(tasks);
    }

    /// Spawns `future` through `tasks` and runs the executor (every other task too) until
    /// it finishes; `None` if the run stalled or made `max_polls` polls first.
    pub fn block_on<T: Send + 'static>(
        &mut self,
        tasks: &ExecutorHandle,
        max_polls: u64,
        future: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let slot: Arc<Mutex<Option<T>>> = Arc::new(Mutex::new(None));
        let out = slot.clone();
        tasks.spawn(Box::pin(async move {
            let value = future.await;
            *out.lock().expect("slot") = Some(value);
        }));
        let done = || slot.lock().expect("slot").is_some();
        self.run_while(max_polls, u64::MAX, &|| !done());
        let value = slot.lock().expect("slot").take();
        value
    }

    /// Drops the tasks of `group` (one simulated process's crash); the others run on.
    pub fn kill_group(&self, group: u32) {
        kill_group(&self.shared, &self.ready, group);
    }

    /// Runs until no task is left, nothing can progress, `max_steps` polls were made, or
    /// virtual time passes `deadline_nanos`.
    pub fn run(&mut self, max_steps: u64, deadline_nanos: u64) -> Stop {
        self.run_while(max_steps, deadline_nanos, &|| true)
    }

    /// Like [`Executor::run`], and also stops (with [`Stop::Asked`]) as soon as `keep_going`
    /// says no, checked before every poll.
    pub fn run_while(
        &mut self,
        max_steps: u64,
        deadline_nanos: u64,
        keep_going: &dyn Fn() -> bool,
    ) -> Stop {
        let mut steps = 0;
        loop {
            if steps >= max_steps {
                return Stop::Budget;
            }
            if !keep_going() {
                return Stop::Asked;
            }
            // The next task: a ready one drawn by the PRNG, taken out of the ready set.
            let picked = {
                let mut ready = self.ready.0.lock().expect("ready");
                if ready.is_empty() {
                    None
                } else {
                    let at = self.rng.gen_range(0..ready.len());
                    let id = *ready.iter().nth(at).expect("a ready task at a drawn index");
                    ready.remove(&id);
                    Some(id)
                }
            };
            // The ready lock is released: firing a timer wakes tasks.
            let Some(id) = picked else {
                if self.task_count() == 0 {
                    return Stop::Done;
                }
                match self.clock.next_deadline() {
                    None => return Stop::Stalled,
                    Some(d) if d > deadline_nanos => return Stop::Deadline,
                    Some(_) => {
                        self.clock.fire_next();
                        continue;
                    }
                }
            };
            let taken = {
                let mut shared = self.shared.lock().expect("executor");
                shared.tasks.get_mut(&id).map(|slot| {
                    (
                        slot.future.take(),
                        slot.cancelled.clone(),
                        slot.finished.clone(),
                        slot.waker.clone(),
                    )
                })
            };
            let Some((Some(mut future), cancelled, finished, waker)) = taken else {
                continue;
            };
            steps += 1;
            if cancelled.load(Ordering::SeqCst) {
                finished.store(true, Ordering::SeqCst);
                self.shared.lock().expect("executor").tasks.remove(&id);
                continue;
            }
            let mut cx = Context::from_waker(&waker);
            let polled = match self.catch_panics {
                false => future.as_mut().poll(&mut cx),
                true => match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    future.as_mut().poll(&mut cx)
                })) {
                    Ok(polled) => polled,
                    Err(panic) => {
                        self.panics.push(panic_message(&*panic));
                        finished.store(true, Ordering::SeqCst);
                        self.shared.lock().expect("executor").tasks.remove(&id);
                        continue;
                    }
                },
            };
            match polled {
                Poll::Ready(()) => {
                    finished.store(true, Ordering::SeqCst);
                    self.shared.lock().expect("executor").tasks.remove(&id);
                }
                Poll::Pending => {
                    if let Some(slot) = self.shared.lock().expect("executor").tasks.get_mut(&id) {
                        slot.future = Some(future);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn order_for(seed: u64) -> (Vec<u32>, u64) {
        let clock = SimClock::new();
        let mut executor = Executor::new(seed, clock.clone());
        let handle = executor.handle();
        let log = Arc::new(Mutex::new(Vec::new()));
        for task in 0..8u32 {
            let log = log.clone();
            let clock = clock.clone();
            handle.spawn(Box::pin(async move {
                for round in 0..3u64 {
                    clock
                        .sleep(Duration::from_millis(
                            10 * (u64::from(task) % 3 + 1) + round,
                        ))
                        .await;
                    log.lock().unwrap().push(task);
                }
            }));
        }
        assert_eq!(executor.run(10_000, u64::MAX), Stop::Done);
        let order = log.lock().unwrap().clone();
        (order, clock.now_nanos())
    }

    #[test]
    fn same_seed_same_schedule_and_time_jumps_to_timers() {
        let (a, t) = order_for(7);
        assert_eq!(order_for(7), (a.clone(), t));
        assert_eq!(a.len(), 24);
        // Virtual time jumped to the last timer: 3 rounds of 30 ms sleeps plus rounds.
        assert_eq!(t, Duration::from_millis(93).as_nanos() as u64);
        // Ready tasks are picked by the seeded PRNG: some seed orders them differently.
        assert!((0..20).any(|s| order_for(s).0 != a));
    }

    #[test]
    fn killing_a_group_leaves_the_other_groups_running() {
        let clock = SimClock::new();
        let mut executor = Executor::new(3, clock.clone());
        let log = Arc::new(Mutex::new(Vec::new()));
        for group in [1u32, 2] {
            let handle = executor.handle().in_group(group);
            let (log, clock, inner) = (log.clone(), clock.clone(), handle.clone());
            handle.spawn(Box::pin(async move {
                // A task it spawns belongs to its group too.
                let (log2, clock2) = (log.clone(), clock.clone());
                inner.spawn(Box::pin(async move {
                    clock2.sleep(Duration::from_millis(20)).await;
                    log2.lock().unwrap().push((group, "child"));
                }));
                clock.sleep(Duration::from_millis(10)).await;
                log.lock().unwrap().push((group, "parent"));
            }));
        }
        // Every task started and sleeps; group 1 dies before any wakes.
        let deadline = Duration::from_millis(5).as_nanos() as u64;
        assert_eq!(executor.run(10_000, deadline), Stop::Deadline);
        executor.kill_group(1);
        assert_eq!(executor.run(10_000, u64::MAX), Stop::Done);
        assert_eq!(*log.lock().unwrap(), vec![(2, "parent"), (2, "child")]);
    }

    #[test]
    fn cancel_and_stall_are_reported() {
        let clock = SimClock::new();
        let mut executor = Executor::new(1, clock.clone());
        let handle = executor.handle();
        let sleeper = handle.spawn(Box::pin({
            let clock = clock.clone();
            async move { clock.sleep(Duration::from_secs(3600)).await }
        }));
        handle.spawn(Box::pin(std::future::pending()));
        assert_eq!(
            executor.run(100, Duration::from_secs(60).as_nanos() as u64),
            Stop::Deadline
        );
        sleeper.cancel();
        assert_eq!(executor.run(100, u64::MAX), Stop::Stalled);
        assert!(sleeper.is_finished());
        executor.kill_all();
        assert_eq!(executor.run(100, u64::MAX), Stop::Done);
    }
}

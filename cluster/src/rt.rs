//! openraft's runtime on the `Env` seam.
//!
//! openraft reaches its runtime through static functions (`spawn`, `sleep`, `Instant::now`,
//! `thread_rng`), not through a value it is handed. So the `Env` they act on travels with
//! the task instead: [`in_env`] wraps a future so that while it is polled a task-local holds
//! that `Env`'s tasks, clock and entropy, and every task openraft spawns from inside it is
//! wrapped the same way. Production wraps the futures it hands openraft in the real `Env`
//! (tokio, the real clock); the simulator in each simulated node's `Env` (the seeded executor
//! in that node's task group, the virtual clock, the node's seeded entropy). So a simulated
//! crash that kills a node's task group kills its Raft tasks too, and a run stays a pure
//! function of its seed.
//!
//! Channels and the mutex are tokio's synchronisation types: data structures driven by
//! wakers, with no runtime, timer or thread of their own, deterministic on any executor.
//!
//! **Invariant:** openraft code runs only inside [`in_env`]. Outside it the runtime has no
//! clock or tasks to use, and says so by panicking with the name of what was called.

use cairn_engine::env::{self, BoxFuture, Clock, Entropy, Env, Tasks};
use openraft_rt::{
    mpsc::{MpscReceiver, MpscSender, MpscWeakSender, SendError, TryRecvError},
    oneshot::{Oneshot, OneshotSender},
    watch::{RecvError, WatchReceiver, WatchSender},
    AsyncRuntime, Mpsc, Mutex as RtMutex, Watch,
};
use rand_010::SeedableRng;
use std::future::Future;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// What a Raft task reaches through the runtime: the part of its node's `Env` that openraft
/// uses (openraft does no disk or network I/O itself; the log store and the network do,
/// through the `Env` they hold).
#[derive(Clone)]
pub struct RaftEnv {
    tasks: Arc<dyn Tasks>,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
}

impl From<&Env> for RaftEnv {
    fn from(env: &Env) -> RaftEnv {
        RaftEnv {
            tasks: env.tasks.clone(),
            clock: env.clock.clone(),
            entropy: env.entropy.clone(),
        }
    }
}

openraft_rt::task_local! {
    static CURRENT: RaftEnv;
}

/// `future`, polled with `env` as the runtime of every openraft call it makes.
pub fn in_env<F: Future>(env: &Env, future: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(RaftEnv::from(env), future)
}

fn current(what: &str) -> RaftEnv {
    CURRENT.try_get().unwrap_or_else(|_| {
        panic!("openraft called `{what}` outside cairn_cluster::rt::in_env (no Env to run it on)")
    })
}

/// The runtime openraft is instantiated with ([`crate::types::Config`]). As a value it is
/// only what `AsyncRuntime::new`/`block_on` need (openraft's conformance suite and tools):
/// a real `Env`; the Raft tasks themselves find their `Env` through [`in_env`].
pub struct EnvRuntime {
    env: Env,
}

impl std::fmt::Debug for EnvRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EnvRuntime")
    }
}

/// A monotonic instant of the `Env`'s clock, in nanoseconds since its origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EnvInstant(u64);

impl EnvInstant {
    /// The reading: nanoseconds since the `Env`'s clock's origin (its `monotonic_nanos`).
    pub fn reading(self) -> u64 {
        self.0
    }

    fn nanos(d: Duration) -> u64 {
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Add<Duration> for EnvInstant {
    type Output = EnvInstant;
    fn add(self, d: Duration) -> EnvInstant {
        EnvInstant(self.0.saturating_add(Self::nanos(d)))
    }
}

impl AddAssign<Duration> for EnvInstant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Duration> for EnvInstant {
    type Output = EnvInstant;
    fn sub(self, d: Duration) -> EnvInstant {
        EnvInstant(self.0.saturating_sub(Self::nanos(d)))
    }
}

impl SubAssign<Duration> for EnvInstant {
    fn sub_assign(&mut self, d: Duration) {
        *self = *self - d;
    }
}

impl Sub<EnvInstant> for EnvInstant {
    type Output = Duration;
    fn sub(self, earlier: EnvInstant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl openraft_rt::Instant for EnvInstant {
    fn now() -> EnvInstant {
        EnvInstant(current("Instant::now").clock.monotonic_nanos())
    }
}

/// A spawned task's output; dropping it detaches the task.
pub struct JoinHandle<T>(tokio::sync::oneshot::Receiver<T>);

/// The task ended without an output: it was cancelled (its node's tasks were killed) or it
/// panicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the task ended before it produced its output (cancelled or panicked)")]
pub struct JoinError;

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map_err(|_| JoinError)
    }
}

/// A deadline passed before the future finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline elapsed")]
pub struct Elapsed;

/// `future`, or [`Elapsed`] once `sleep` completes first.
pub struct Timeout<R, F> {
    future: Pin<Box<F>>,
    sleep: BoxFuture<'static, ()>,
    _output: std::marker::PhantomData<fn() -> R>,
}

impl<R, F: Future<Output = R>> Future for Timeout<R, F> {
    type Output = Result<R, Elapsed>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(out) = self.future.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        self.sleep.as_mut().poll(cx).map(|()| Err(Elapsed))
    }
}

fn sleep_for(duration: Duration) -> BoxFuture<'static, ()> {
    current("sleep").clock.sleep(duration)
}

fn sleep_until(deadline: EnvInstant) -> BoxFuture<'static, ()> {
    let now = <EnvInstant as openraft_rt::Instant>::now();
    sleep_for(deadline - now)
}

impl AsyncRuntime for EnvRuntime {
    type JoinError = JoinError;
    type JoinHandle<T: Send + 'static> = JoinHandle<T>;
    type Sleep = BoxFuture<'static, ()>;
    type Instant = EnvInstant;
    type TimeoutError = Elapsed;
    type Timeout<R, T: Future<Output = R> + Send> = Timeout<R, T>;
    type ThreadLocalRng = rand_010::rngs::SmallRng;
    type Mpsc = EnvMpsc;
    type Watch = EnvWatch;
    type Oneshot = EnvOneshot;
    type Mutex<T: Send + 'static> = EnvMutex<T>;

    fn spawn<T>(future: T) -> JoinHandle<T::Output>
    where
        T: Future + Send + 'static,
        T::Output: Send + 'static,
    {
        let env = current("spawn");
        let (done, output) = tokio::sync::oneshot::channel();
        let tasks = env.tasks.clone();
        let task = CURRENT.scope(env, async move {
            let _ = done.send(future.await);
        });
        // Dropping the handle detaches the task, as openraft expects.
        drop(tasks.spawn(Box::pin(task)));
        JoinHandle(output)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        sleep_for(duration)
    }

    fn sleep_until(deadline: EnvInstant) -> Self::Sleep {
        sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + Send>(duration: Duration, future: F) -> Timeout<R, F> {
        Timeout {
            future: Box::pin(future),
            sleep: sleep_for(duration),
            _output: std::marker::PhantomData,
        }
    }

    fn timeout_at<R, F: Future<Output = R> + Send>(
        deadline: EnvInstant,
        future: F,
    ) -> Timeout<R, F> {
        Timeout {
            future: Box::pin(future),
            sleep: sleep_until(deadline),
            _output: std::marker::PhantomData,
        }
    }

    fn is_panic(_: &JoinError) -> bool {
        // A panicking task is not told apart from a cancelled one: in production the panic
        // is logged by the runtime and the node stops; in the simulator it fails the run.
        false
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        // Seeded from the node's entropy: the simulator's is a function of the run seed, so
        // election timeouts replay bit for bit.
        rand_010::rngs::SmallRng::seed_from_u64(current("thread_rng").entropy.next_u64())
    }

    fn new(threads: usize) -> EnvRuntime {
        EnvRuntime {
            env: env::real::env_with_workers(threads).expect("a tokio runtime for EnvRuntime"),
        }
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        env::real::block_on(in_env(&self.env, future))
    }
}

// Channels -----------------------------------------------------------------------------------

/// Bounded multi-producer channels (tokio's).
pub struct EnvMpsc;

pub struct MpscTx<T>(tokio::sync::mpsc::Sender<T>);
pub struct MpscRx<T>(tokio::sync::mpsc::Receiver<T>);
pub struct MpscWeakTx<T>(tokio::sync::mpsc::WeakSender<T>);

impl<T> Clone for MpscTx<T> {
    fn clone(&self) -> Self {
        MpscTx(self.0.clone())
    }
}

impl<T> Clone for MpscWeakTx<T> {
    fn clone(&self) -> Self {
        MpscWeakTx(self.0.clone())
    }
}

impl Mpsc for EnvMpsc {
    type Sender<T: Send> = MpscTx<T>;
    type Receiver<T: Send> = MpscRx<T>;
    type WeakSender<T: Send> = MpscWeakTx<T>;

    fn channel<T: Send>(buffer: usize) -> (MpscTx<T>, MpscRx<T>) {
        let (tx, rx) = tokio::sync::mpsc::channel(buffer.max(1));
        (MpscTx(tx), MpscRx(rx))
    }
}

impl<T: Send> MpscSender<EnvMpsc, T> for MpscTx<T> {
    fn send(&self, msg: T) -> impl Future<Output = Result<(), SendError<T>>> + Send {
        let tx = self.0.clone();
        async move { tx.send(msg).await.map_err(|e| SendError(e.0)) }
    }

    fn downgrade(&self) -> MpscWeakTx<T> {
        MpscWeakTx(self.0.downgrade())
    }
}

impl<T: Send> MpscReceiver<T> for MpscRx<T> {
    fn recv(&mut self) -> impl Future<Output = Option<T>> + Send {
        self.0.recv()
    }

    fn try_recv(&mut self) -> Result<T, TryRecvError> {
        self.0.try_recv().map_err(|e| match e {
            tokio::sync::mpsc::error::TryRecvError::Empty => TryRecvError::Empty,
            tokio::sync::mpsc::error::TryRecvError::Disconnected => TryRecvError::Disconnected,
        })
    }
}

impl<T: Send> MpscWeakSender<EnvMpsc, T> for MpscWeakTx<T> {
    fn upgrade(&self) -> Option<MpscTx<T>> {
        self.0.upgrade().map(MpscTx)
    }
}

/// Watch channels (tokio's).
pub struct EnvWatch;

pub struct WatchTx<T>(tokio::sync::watch::Sender<T>);
pub struct WatchRx<T>(tokio::sync::watch::Receiver<T>);

impl<T> Clone for WatchTx<T> {
    fn clone(&self) -> Self {
        WatchTx(self.0.clone())
    }
}

impl<T> Clone for WatchRx<T> {
    fn clone(&self) -> Self {
        WatchRx(self.0.clone())
    }
}

impl Watch for EnvWatch {
    type Sender<T: Send + Sync> = WatchTx<T>;
    type Receiver<T: Send + Sync> = WatchRx<T>;
    type Ref<'a, T: Send + 'a> = tokio::sync::watch::Ref<'a, T>;

    fn channel<T: Send + Sync>(init: T) -> (WatchTx<T>, WatchRx<T>) {
        let (tx, rx) = tokio::sync::watch::channel(init);
        (WatchTx(tx), WatchRx(rx))
    }
}

impl<T: Send + Sync> WatchSender<EnvWatch, T> for WatchTx<T> {
    fn send(&self, value: T) -> Result<(), openraft_rt::watch::SendError<T>> {
        self.0
            .send(value)
            .map_err(|e| openraft_rt::watch::SendError(e.0))
    }

    fn send_if_modified<F>(&self, modify: F) -> bool
    where
        F: FnOnce(&mut T) -> bool,
    {
        self.0.send_if_modified(modify)
    }

    fn borrow_watched(&self) -> tokio::sync::watch::Ref<'_, T> {
        self.0.borrow()
    }

    fn subscribe(&self) -> WatchRx<T> {
        WatchRx(self.0.subscribe())
    }
}

impl<T: Send + Sync> WatchReceiver<EnvWatch, T> for WatchRx<T> {
    async fn changed(&mut self) -> Result<(), RecvError> {
        self.0.changed().await.map_err(|_| RecvError(()))
    }

    fn borrow_watched(&self) -> tokio::sync::watch::Ref<'_, T> {
        self.0.borrow()
    }

    fn borrow_and_update(&mut self) -> tokio::sync::watch::Ref<'_, T> {
        self.0.borrow_and_update()
    }
}

/// One-shot channels (tokio's).
pub struct EnvOneshot;

pub struct OneshotTx<T>(tokio::sync::oneshot::Sender<T>);

impl Oneshot for EnvOneshot {
    type Sender<T: Send> = OneshotTx<T>;
    type Receiver<T: Send> = tokio::sync::oneshot::Receiver<T>;
    type ReceiverError = tokio::sync::oneshot::error::RecvError;

    fn channel<T: Send>() -> (OneshotTx<T>, tokio::sync::oneshot::Receiver<T>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (OneshotTx(tx), rx)
    }
}

impl<T: Send> OneshotSender<T> for OneshotTx<T> {
    fn send(self, t: T) -> Result<(), T> {
        self.0.send(t)
    }
}

/// An asynchronous mutex (tokio's, fair: waiters are served in arrival order).
pub struct EnvMutex<T>(tokio::sync::Mutex<T>);

impl<T: Send + 'static> RtMutex<T> for EnvMutex<T> {
    type Guard<'a> = tokio::sync::MutexGuard<'a, T>;

    fn new(value: T) -> Self {
        EnvMutex(tokio::sync::Mutex::new(value))
    }

    fn lock(&self) -> impl Future<Output = tokio::sync::MutexGuard<'_, T>> + Send {
        self.0.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// openraft's own conformance suite for runtimes: spawn and join, sleeps, instants,
    /// timeouts, selects, every channel's semantics, the mutex, task-locals.
    #[test]
    fn passes_openraft_runtime_conformance_suite() {
        let mut rt = EnvRuntime::new(1);
        openraft_rt::testing::Suite::<EnvRuntime>::test_all_on(&mut rt);
    }

    #[test]
    #[should_panic(expected = "outside cairn_cluster::rt::in_env")]
    fn outside_an_env_the_runtime_refuses() {
        let _ = <EnvInstant as openraft_rt::Instant>::now();
    }
}

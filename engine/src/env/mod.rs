//! The seam between the engine and the world.
//!
//! Engine code performs every piece of I/O, every clock read, every task spawn and every
//! random draw through these traits. Two implementations exist: [`real`] (real files with
//! real `fdatasync`, real TCP, the real clock, tokio hidden behind the traits) and the
//! simulated one in `cairn-faults` / `cairn-sim`. The workspace's `clippy.toml` forbids the
//! engine from reaching `std::fs`, `std::net`, `Instant::now`, `SystemTime::now`,
//! `std::thread::spawn` and tokio directly (and `HashMap`/`HashSet`); only `env::real` is
//! exempt. The engine has no random-number crate: its only randomness is [`Entropy`].
//!
//! The disk API is synchronous and positional: the partition log is a single-owner state
//! machine, and group commit comes from draining many requests into one flush, not from
//! overlapping syscalls. Clock sleeps, networking and tasks are asynchronous.
//!
//! Owners that do disk work run as **workers** ([`Tasks::spawn_worker`]): an OS thread of
//! their own in production; a task on the seeded executor in the simulator. Partition
//! shards run as **owners** ([`Tasks::spawn_owner`]): tasks on the connections' runtime in
//! production, whose waits on the device (a sync, a read the page cache cannot answer, and
//! whole [`Tasks::device_section`]s: a persist, a flush, directory work) the real disk runs
//! through tokio's `block_in_place`, so no connection waits on an fsync either way. Both
//! talk to callers through [`chan`] (bounded channels, one-shot replies) and, after each
//! step of disk work, [`settle`]: a real disk took its time by blocking the thread, a
//! simulated one charges virtual time the worker now sleeps off, so other callers'
//! operations interleave with it as they do in production.
//! CPU-heavy work (password hashing) runs on [`Tasks::spawn_blocking`], never on an owner.
//!
//! A disk wrapper that changes one or two calls (counting syncs, injecting a fault) is a
//! [`DiskLayer`]: it forwards everything else to the disk beneath it ([`layer`]).

pub mod chan;
pub mod layer;
pub mod page_cache;
pub mod real;

pub use layer::{DiskHook, DiskLayer, FileLayer};
pub use page_cache::PageCache;

use std::future::Future;
use std::io;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A boxed future, the currency of the asynchronous half of the seam.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Open an existing file for reading only.
    Read,
    /// Open an existing file for reading and writing.
    ReadWrite,
    /// Create a new file for reading and writing; fails if it exists.
    CreateNew,
    /// Open for reading and writing, creating the file if it does not exist.
    CreateOrOpen,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub is_dir: bool,
}

/// An open file. All operations are positional: there is no cursor.
#[allow(clippy::len_without_is_empty)]
pub trait DiskFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `pos`; returns the number read (0 at end of file).
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize>;
    /// Writes every buffer, in order, contiguously starting at `pos` (one vectored write
    /// where the platform allows it). Either all bytes are written or an error is returned.
    fn write_all_at(&self, bufs: &[IoSlice<'_>], pos: u64) -> io::Result<()>;
    /// Makes the file's data durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    /// Reserves `len` bytes without changing the file's length, where the file system
    /// supports it. Returns `Ok(false)` when preallocation is not supported.
    fn preallocate(&self, len: u64) -> io::Result<bool>;
    /// Drops the file's clean cached pages, so that the next reads of them return what the
    /// device holds. Dirty pages (writes not yet written back) stay cached. After a failed
    /// writeback Linux keeps the new bytes cached and marks them clean; reading them back
    /// after this call is how a restarted process learns they never reached the device.
    fn evict_cache(&self) -> io::Result<()>;

    /// Exactly `len` bytes at `pos`, in a buffer of their own, or `UnexpectedEof`. A real
    /// file reads into uninitialised memory (no memset of what the read then overwrites);
    /// this default reads through [`DiskFile::read_exact_at`] (a [`FileLayer`] passes the
    /// call to the file beneath).
    fn read_exact_owned(&self, len: usize, pos: u64) -> io::Result<bytes::BytesMut> {
        layer::owned_through_read_at(self, len, pos)
    }

    /// Reads exactly `buf.len()` bytes at `pos`, or fails with `UnexpectedEof`.
    fn read_exact_at(&self, mut buf: &mut [u8], mut pos: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, pos) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "read past end of file",
                    ))
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    pos += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Files and directories.
pub trait Disk: Send + Sync {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>>;
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Lists a directory, sorted by name (deterministic order).
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (created, renamed, removed names) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Makes every file and directory under `root` durable, as one call (Linux's `syncfs`
    /// of its file system): what each file's and directory's own sync would do, with one
    /// flush of the device instead of one each.
    fn sync_all(&self, root: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// The id of the running kernel's boot (Linux's `/proc/sys/kernel/random/boot_id`): it
    /// changes exactly when the page cache began empty again. A simulated disk draws a new
    /// one at each power loss. An error means it is unknown, and boot trusts no cache.
    fn boot_id(&self) -> io::Result<u128>;
    /// The time the calls made since the last ask took, which the caller has not yet waited
    /// for: zero on a real disk (its calls took their time by blocking the calling thread);
    /// the seeded latencies of a simulated disk in debt mode, which the worker that made the
    /// calls sleeps off ([`settle`]). Wrappers forward it.
    fn take_io_time(&self) -> Duration;
}

/// Time.
pub trait Clock: Send + Sync {
    /// Wall-clock time in microseconds since the Unix epoch (message timestamps).
    fn wall_micros(&self) -> u64;
    /// A monotonic instant, in nanoseconds since an arbitrary origin.
    fn monotonic_nanos(&self) -> u64;
    /// Completes after `duration` has elapsed.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
    /// A timer that is re-armed in place ([`Deadline::reset`]): what a connection waits
    /// against over and over (its idle and reply timeouts), without a new timer per wait.
    fn deadline(&self) -> Box<dyn Deadline>;
}

/// One re-armable timer (see [`Clock::deadline`]). Unarmed until the first `reset`: an
/// unarmed deadline never passes.
pub trait Deadline: Send {
    /// Arms it to pass `after` from now, replacing the time it was armed for.
    fn reset(&mut self, after: Duration);
    /// Ready once the armed time has passed; registers the waker otherwise.
    fn poll_passed(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()>;
}

impl<'d> dyn Deadline + 'd {
    /// Completes once the armed time has passed.
    pub fn passed<'a>(&'a mut self) -> Passed<'a, 'd> {
        Passed(self)
    }
}

/// [`Deadline::poll_passed`] as a future.
pub struct Passed<'a, 'd>(&'a mut (dyn Deadline + 'd));

impl Future for Passed<'_, '_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.0.poll_passed(cx)
    }
}

/// A [`Deadline`] made of one [`Clock::sleep`] per arming: for clocks whose sleeps are
/// cheap (simulated time, test clocks).
pub struct SleepDeadline {
    sleep: Box<dyn Fn(Duration) -> BoxFuture<'static, ()> + Send>,
    armed: Option<BoxFuture<'static, ()>>,
}

impl SleepDeadline {
    pub fn new(sleep: impl Fn(Duration) -> BoxFuture<'static, ()> + Send + 'static) -> Self {
        SleepDeadline {
            sleep: Box::new(sleep),
            armed: None,
        }
    }
}

impl Deadline for SleepDeadline {
    fn reset(&mut self, after: Duration) {
        self.armed = Some((self.sleep)(after));
    }

    fn poll_passed(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        match &mut self.armed {
            Some(sleep) => sleep.as_mut().poll(cx),
            None => std::task::Poll::Pending,
        }
    }
}

/// A bidirectional byte stream (a TCP connection or its simulation).
pub trait ByteStream: Send {
    fn read<'a>(&'a mut self, buf: &'a mut [u8]) -> BoxFuture<'a, io::Result<usize>>;
    fn write_all<'a>(&'a mut self, buf: &'a [u8]) -> BoxFuture<'a, io::Result<()>>;
    /// Reads into `buf`'s spare capacity (the caller reserves it), appending: the bytes
    /// read, 0 at the end of the stream (or when `buf` has no spare capacity). A real
    /// socket reads into the uninitialised capacity, with no memset first.
    fn read_buf<'a>(
        &'a mut self,
        buf: &'a mut bytes::BytesMut,
    ) -> BoxFuture<'a, io::Result<usize>> {
        Box::pin(async move {
            // At most 64 KiB zeroed a call: a stream that returns little per read (TLS
            // records) must not cost a memset of the whole remaining room each time.
            let filled = buf.len();
            let room = (buf.capacity() - filled).min(64 * 1024);
            buf.resize(filled + room, 0);
            let read = self.read(&mut buf[filled..]).await;
            buf.truncate(filled + *read.as_ref().unwrap_or(&0));
            read
        })
    }
    /// Writes some of `bufs`, in order, as one call where the stream can (a `writev`): the
    /// bytes taken, which may end inside a slice; 0 only when `bufs` hold none.
    fn write_vectored<'a>(
        &'a mut self,
        bufs: &'a [IoSlice<'a>],
    ) -> BoxFuture<'a, io::Result<usize>> {
        Box::pin(async move {
            let Some(first) = bufs.iter().find(|b| !b.is_empty()) else {
                return Ok(0);
            };
            self.write_all(first).await.map(|()| first.len())
        })
    }
    fn shutdown(&mut self) -> BoxFuture<'_, io::Result<()>>;
}

/// Reads exactly `buf.len()` bytes from `stream`: an early end of stream is
/// `UnexpectedEof`.
pub async fn read_exact(stream: &mut dyn ByteStream, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match stream.read(buf).await {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A listening socket.
pub trait Listener: Send {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>>;
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// The network.
pub trait Net: Send + Sync {
    fn listen(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn Listener>>>;
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn ByteStream>>>;
}

/// A spawned task; dropping the handle does not cancel the task.
pub trait TaskHandle: Send {
    /// Stops the task at its next suspension point.
    fn cancel(&self);
    fn is_finished(&self) -> bool;
}

/// A job off the owners' tasks: CPU-heavy work for [`Tasks::spawn_blocking`], or a
/// partition's persist for [`Tasks::spawn_device`]; it reports its result itself.
pub type BlockingJob = Box<dyn FnOnce() + Send>;

/// [`Tasks::spawn_blocking`] refused: the pool's queue is full (back-pressure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the blocking pool's queue is full")]
pub struct PoolBusy;

/// Running tasks on the current node.
pub trait Tasks: Send + Sync {
    /// A task that never blocks (it only awaits).
    fn spawn(&self, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle>;
    /// A long-lived owner that may block on disk between its awaits: its own OS thread
    /// (named `name`) in production, a task on the seeded executor in the simulator.
    fn spawn_worker(&self, name: &str, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle>;
    /// A long-lived owner whose disk calls are mostly page-cache work (a partition shard):
    /// in production a task on the runtime beside the connections it serves, so a request
    /// and its answer cross no thread; the real disk runs each wait on the device (a sync,
    /// a read the page cache cannot answer) so that the worker's other tasks move to
    /// another thread meanwhile. In the simulator the same as a worker.
    fn spawn_owner(&self, name: &str, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle> {
        self.spawn_worker(name, task)
    }
    /// Runs `section`, disk work that waits on the device more than once (a persist: log
    /// sync, record write, sync and read-back), as one wait: from an owner task, the real
    /// runtime hands the worker's other tasks to another thread once for the whole section,
    /// not once per sync. Elsewhere, and in the simulator, it just runs `section`.
    fn device_section(&self, section: &mut dyn FnMut()) {
        section()
    }
    /// Lets the runtime's other tasks run before the caller goes on (an owner after each
    /// round of its inbox, which otherwise never waits while requests keep coming). In the
    /// simulator it is ready at once: its executor already chooses among ready tasks.
    fn yield_now(&self) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
    /// A job that waits on the device (one partition's persist, run beside its shard's
    /// others): a thread of the runtime's blocking pool in production, so that several
    /// syncs are in flight at once; a task of its own in the simulator, run whole at its
    /// turn in seeded order among the others (a crash may fall between two partitions'
    /// persists, an answer between two jobs). Never refused: the callers bound how many
    /// run ([`crate::node::MAX_CONCURRENT_PERSISTS`] a shard,
    /// [`crate::node::MAX_PERSIST_JOBS`] a node).
    fn spawn_device(&self, job: BlockingJob) {
        drop(self.spawn(Box::pin(async move { job() })));
    }
    /// CPU-heavy work off every owner and socket thread: a bounded pool of threads in
    /// production, a task charged virtual time in the simulator. A full queue is
    /// [`PoolBusy`], never unbounded growth.
    fn spawn_blocking(&self, job: BlockingJob) -> Result<(), PoolBusy>;
}

/// `work` run as one [`Tasks::device_section`], its result returned.
pub fn device_section<T>(tasks: &dyn Tasks, work: impl FnOnce() -> T) -> T {
    let (mut work, mut done) = (Some(work), None);
    tasks.device_section(&mut || done = work.take().map(|w| w()));
    done.expect("a device section runs its work once")
}

/// Randomness, seeded by the environment (the simulator derives it from the run seed).
pub trait Entropy: Send + Sync {
    fn next_u64(&self) -> u64;
}

/// The bundle handed to engine code.
#[derive(Clone)]
pub struct Env {
    pub disk: Arc<dyn Disk>,
    pub clock: Arc<dyn Clock>,
    pub net: Arc<dyn Net>,
    pub tasks: Arc<dyn Tasks>,
    pub entropy: Arc<dyn Entropy>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Env")
    }
}

/// Sleeps off the disk time the calls since the last settle took (see
/// [`Disk::take_io_time`]); returns at once on a real disk.
pub async fn settle(env: &Env) {
    let owed = env.disk.take_io_time();
    if !owed.is_zero() {
        env.clock.sleep(owed).await;
    }
}

/// Runs `work` on the blocking pool and waits for its result; [`PoolBusy`] when the pool's
/// queue is full or the job was lost (its thread panicked).
pub async fn run_blocking<T: Send + 'static>(
    tasks: &dyn Tasks,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PoolBusy> {
    let (reply, pending) = chan::oneshot();
    tasks.spawn_blocking(Box::new(move || reply.send(work())))?;
    pending.await.map_err(|_| PoolBusy)
}

/// Which of two futures finished first.
pub enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Polls both futures and completes with the first one ready (`a` first when both are).
pub async fn race<A: Future, B: Future>(a: A, b: B) -> Either<A::Output, B::Output> {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    std::future::poll_fn(move |cx| {
        if let std::task::Poll::Ready(v) = a.as_mut().poll(cx) {
            return std::task::Poll::Ready(Either::Left(v));
        }
        if let std::task::Poll::Ready(v) = b.as_mut().poll(cx) {
            return std::task::Poll::Ready(Either::Right(v));
        }
        std::task::Poll::Pending
    })
    .await
}

/// A panic's message, whatever its payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Joins path components for the on-disk layout.
pub fn join(base: &Path, parts: &[&str]) -> PathBuf {
    let mut path = base.to_path_buf();
    for part in parts {
        path.push(part);
    }
    path
}

/// True when `error` means the device is out of space (ENOSPC).
pub fn is_no_space(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::StorageFull || error.raw_os_error() == Some(libc::ENOSPC)
}

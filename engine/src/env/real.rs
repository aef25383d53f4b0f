//! The production implementation of the seam: real files (`pwritev`, `fdatasync`,
//! `fallocate`), real TCP and the real clock, with tokio as the hidden runtime.
//!
//! This is the only module of the engine allowed to touch `std::fs`, `std::net`, the system
//! clock and the runtime directly.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// The crate denies unsafe code; its six calls into libc (pwritev, pread into uninitialised
// memory, fallocate, posix_fadvise, syncfs, getrandom) live here, each with its SAFETY comment.
#![allow(unsafe_code)]

mod net;
mod sync_all;

use super::{
    BlockingJob, BoxFuture, Clock, Deadline, DirEntry, Disk, DiskFile, Entropy, Env, OpenMode,
    PoolBusy, TaskHandle, Tasks,
};
pub use net::RealNet;
use std::fs::{File, OpenOptions};
use std::io;
use std::io::IoSlice;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::runtime::{Handle, Runtime};

/// Most buffers one `pwritev` call takes (Linux `IOV_MAX`).
pub const MAX_IOVECS_PER_WRITE: usize = 1024;

/// An [`Env`] on real files, the real clock and a tokio runtime given by `handle`.
pub fn env_on(handle: Handle) -> Env {
    Env {
        disk: Arc::new(RealDisk),
        clock: Arc::new(RealClock::new(handle.clone())),
        net: Arc::new(RealNet {
            handle: handle.clone(),
        }),
        tasks: Arc::new(RealTasks::new(handle)),
        entropy: Arc::new(RealEntropy::new()),
    }
}

/// An [`Env`] with its own small runtime (one worker thread), for tools and tests that do
/// not run a server. The runtime lives as long as the returned `Env` or anything cloned
/// from it.
pub fn env() -> io::Result<Env> {
    env_with_workers(1)
}

/// An [`Env`] whose runtime has `workers` threads for tasks (the server's connections and the
/// partition shards); the metadata and groups owners run on threads of their own besides.
pub fn env_with_workers(workers: usize) -> io::Result<Env> {
    let runtime = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers.max(1))
            .enable_all()
            .build()?,
    );
    let mut env = env_on(runtime.handle().clone());
    env.tasks = Arc::new(OwnedRuntimeTasks {
        inner: RealTasks::new(runtime.handle().clone()),
        runtime: Some(runtime),
    });
    Ok(env)
}

/// Writes all of `bufs` at `pos` through `write` (one positioned vectored write: returns
/// the bytes written, possibly fewer than asked), at most [`MAX_IOVECS_PER_WRITE`] buffers a
/// call, resuming after short writes and retrying `EINTR`.
fn write_all_vectored(
    bufs: &[IoSlice<'_>],
    mut pos: u64,
    mut write: impl FnMut(&[IoSlice<'_>], u64) -> io::Result<usize>,
) -> io::Result<()> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut done = 0usize;
    let mut index = 0;
    let mut skip = 0usize; // bytes of bufs[index] already written
    while index < bufs.len() {
        let end = (index + MAX_IOVECS_PER_WRITE).min(bufs.len());
        let chunk: Vec<IoSlice<'_>> = bufs[index..end]
            .iter()
            .enumerate()
            .map(|(i, buf)| IoSlice::new(if i == 0 { &buf[skip..] } else { buf }))
            .collect();
        let asked: usize = chunk.iter().map(|b| b.len()).sum();
        let written = match write(&chunk, pos) {
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
            Ok(0) if asked > 0 => {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote 0"))
            }
            Ok(written) => written,
        };
        assert!(written <= asked, "wrote {written} of {asked} bytes asked");
        pos += written as u64;
        done += written;
        // Advance (index, skip) past `written` bytes, then past empty buffers.
        let mut left = written;
        while index < bufs.len() && left >= bufs[index].len() - skip {
            left -= bufs[index].len() - skip;
            index += 1;
            skip = 0;
        }
        skip += left;
    }
    assert_eq!(done, total, "every byte written once");
    Ok(())
}

/// The real file system. What it creates is its owner's alone (files `0600`, directories
/// `0700`: the journal holds password hashes, the segments every message), or also its
/// group's to read (`0640`, `0750`) once [`set_group_read`] says so; the umask may narrow
/// either, never widen it.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealDisk;

static GROUP_READ: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether files and directories created from now on are readable by their group.
pub fn set_group_read(on: bool) {
    GROUP_READ.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The modes new files and directories get: (file, directory).
pub fn created_modes() -> (u32, u32) {
    match GROUP_READ.load(std::sync::atomic::Ordering::Relaxed) {
        false => (0o600, 0o700),
        true => (0o640, 0o750),
    }
}

struct RealFile {
    file: File,
    /// Set by `evict_cache`: this handle's reads go to the device from then on (a slot's
    /// read-back, recovery's scans), so each runs in a [`device_wait`]; any other read
    /// waits only for what the page cache does not hold ([`pread_cache_first`]).
    evicted: AtomicBool,
}

/// Runs `wait`, a call that waits on the device (`fdatasync`, a directory sync, a read the
/// page cache cannot answer), so that it never holds up a runtime worker's other tasks: on a
/// worker of a multi-threaded runtime (where the partition shards run, beside the
/// connections) through tokio's `block_in_place`, which hands the worker's queue to another
/// thread for the wait; anywhere else (an owner's own thread, a tool, a current-thread
/// runtime) directly. Engine code never runs inside a `LocalSet` or a current-thread
/// `block_on` while a multi-threaded runtime's handle is current: `block_in_place` would
/// panic there.
fn device_wait<T>(wait: impl FnOnce() -> T) -> T {
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
        _ => wait(),
    }
}

/// One `pread` of `len` bytes at `offset` into `ptr` that waits on the device only in a
/// [`device_wait`]: first `preadv2(RWF_NOWAIT)`, which answers from the page cache (all or
/// a prefix) or `EAGAIN`; only bytes the cache does not hold are read again in a wait.
/// `device` (a handle whose cache was evicted): straight to the wait. The bytes read, or the
/// error taken right after the call that failed (the hand-back after a wait makes calls of
/// its own, which may overwrite `errno`).
///
/// # Safety
/// `ptr` is valid for writes of `len` bytes for the call.
unsafe fn pread_cache_first(
    fd: std::os::fd::RawFd,
    ptr: *mut libc::c_void,
    len: usize,
    offset: libc::off_t,
    device: bool,
) -> io::Result<usize> {
    let read = |flags| {
        let iov = libc::iovec {
            iov_base: ptr,
            iov_len: len,
        };
        // SAFETY: one iovec over the caller's buffer; the descriptor is open for the call.
        let n = unsafe { libc::preadv2(fd, &iov, 1, offset, flags) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    };
    if device {
        return device_wait(|| read(0));
    }
    if NOWAIT_UNSUPPORTED.load(Ordering::Relaxed) {
        return read(0);
    }
    match read(libc::RWF_NOWAIT) {
        // Not cached: read it, off the runtime.
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => device_wait(|| read(0)),
        // The file system cannot say (overlayfs; tmpfs on older kernels): from now on every
        // read is a plain one in place, as before cache-first reads, not two calls and a wait.
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            NOWAIT_UNSUPPORTED.store(true, Ordering::Relaxed);
            read(0)
        }
        answered => answered,
    }
}

/// Set once a file system refused `RWF_NOWAIT`.
static NOWAIT_UNSUPPORTED: AtomicBool = AtomicBool::new(false);

impl RealFile {
    /// Exactly `len` bytes at `pos`, read into uninitialised memory.
    fn read_owned(&self, len: usize, pos: u64) -> io::Result<bytes::BytesMut> {
        let mut buf = bytes::BytesMut::with_capacity(len);
        while buf.len() < len {
            let filled = buf.len();
            let offset = libc::off_t::try_from(pos + filled as u64)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset overflow"))?;
            let spare = buf.spare_capacity_mut();
            assert!(
                spare.len() >= len - filled,
                "the buffer holds what is left to read"
            );
            // SAFETY: `pread` writes at most `len - filled` bytes at the start of the spare
            // capacity, which is at least that long and owned by `buf` for the call.
            let n = unsafe {
                pread_cache_first(
                    self.file.as_raw_fd(),
                    spare.as_mut_ptr().cast(),
                    len - filled,
                    offset,
                    self.evicted.load(Ordering::Relaxed),
                )
            };
            match n {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "read past end of file",
                    ))
                }
                // SAFETY: the read initialised these `n` bytes (n ≤ len - filled).
                Ok(n) => unsafe { buf.set_len(filled + n) },
            }
        }
        Ok(buf)
    }
}

impl DiskFile for RealFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let offset = libc::off_t::try_from(pos)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset overflow"))?;
        // SAFETY: `buf` is valid for writes of its length for the call.
        unsafe {
            pread_cache_first(
                self.file.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                offset,
                self.evicted.load(Ordering::Relaxed),
            )
        }
    }

    fn read_exact_owned(&self, len: usize, pos: u64) -> io::Result<bytes::BytesMut> {
        self.read_owned(len, pos)
    }

    fn write_all_at(&self, bufs: &[IoSlice<'_>], pos: u64) -> io::Result<()> {
        let fd = self.file.as_raw_fd();
        write_all_vectored(bufs, pos, |iov, offset| {
            let offset = libc::off_t::try_from(offset)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset overflow"))?;
            // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix; every entry borrows a
            // live slice of `bufs` for the duration of the call; the count is at most IOV_MAX.
            let written = unsafe {
                libc::pwritev(
                    fd,
                    iov.as_ptr().cast::<libc::iovec>(),
                    iov.len() as libc::c_int,
                    offset,
                )
            };
            if written < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(written as usize)
            }
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        device_wait(|| self.file.sync_data())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    #[cfg(target_os = "linux")]
    fn preallocate(&self, len: u64) -> io::Result<bool> {
        let len = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length overflow"))?;
        // SAFETY: plain syscall on an open descriptor.
        let rc =
            unsafe { libc::fallocate(self.file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, len) };
        if rc == 0 {
            return Ok(true);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(false),
            _ => Err(error),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn preallocate(&self, _len: u64) -> io::Result<bool> {
        Ok(false)
    }

    #[cfg(target_os = "linux")]
    fn evict_cache(&self) -> io::Result<()> {
        // SAFETY: plain syscall on an open descriptor; offset 0 and length 0 mean the whole
        // file. posix_fadvise returns the error number instead of setting errno.
        self.evicted.store(true, Ordering::Relaxed);
        let rc =
            unsafe { libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        match rc {
            0 => Ok(()),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn evict_cache(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A boot id as the kernel prints it: a UUID in hexadecimal, dashes between its groups.
fn parse_boot_id(text: &str) -> io::Result<u128> {
    let hex: String = text.trim().chars().filter(|c| *c != '-').collect();
    match hex.len() {
        32 => u128::from_str_radix(&hex, 16).map_err(io::Error::other),
        n => Err(io::Error::other(format!(
            "a boot id of {n} hexadecimal digits, not 32: {text:?}"
        ))),
    }
}

impl Disk for RealDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        let mut options = OpenOptions::new();
        match mode {
            OpenMode::Read => options.read(true),
            OpenMode::ReadWrite => options.read(true).write(true),
            OpenMode::CreateNew => options.read(true).write(true).create_new(true),
            OpenMode::CreateOrOpen => options.read(true).write(true).create(true),
        };
        options.mode(created_modes().0);
        Ok(Box::new(RealFile {
            file: options.open(path)?,
            evicted: AtomicBool::new(false),
        }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(created_modes().1)
            .create(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            // A non-UTF-8 name comes back altered and could not be opened again by it. That
            // is harmless: every file the engine opens has an ASCII name it made itself, and
            // recovery only notes (and never touches) a name it does not recognise.
            let name = entry.file_name().to_string_lossy().into_owned();
            entries.push(DirEntry {
                name,
                is_dir: entry.file_type()?.is_dir(),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let dir = File::open(path)?;
        device_wait(|| dir.sync_all())
    }

    #[cfg(target_os = "linux")]
    fn sync_all(&self, root: &Path) -> io::Result<()> {
        if !sync_all::syncfs_covers(root)? {
            return device_wait(|| sync_all::sync_tree(root));
        }
        let dir = File::open(root)?;
        // SAFETY: `dir` is an open descriptor for the call's length; syncfs reads nothing
        // else. Since Linux 5.8 it reports a writeback error of the file system that no
        // syncfs reported yet (as a file's fsync does for that file's).
        device_wait(|| match unsafe { libc::syncfs(dir.as_raw_fd()) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn sync_all(&self, root: &Path) -> io::Result<()> {
        device_wait(|| sync_all::sync_tree(root))
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn boot_id(&self) -> io::Result<u128> {
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?;
        parse_boot_id(&text)
    }

    fn take_io_time(&self) -> Duration {
        Duration::ZERO
    }
}

/// The system clock.
pub struct RealClock {
    origin: Instant,
    handle: Handle,
}

impl RealClock {
    pub fn new(handle: Handle) -> Self {
        RealClock {
            origin: Instant::now(),
            handle,
        }
    }
}

impl Clock for RealClock {
    fn wall_micros(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0)
    }

    fn monotonic_nanos(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        // A timer of the runtime's driver (made inside its context, no task spawned): it can
        // be awaited from any thread and any executor (a worker thread, a test's
        // `block_on`) while the runtime runs.
        let _context = self.handle.enter();
        Box::pin(tokio::time::sleep(duration))
    }

    fn deadline(&self) -> Box<dyn Deadline> {
        Box::new(RealDeadline {
            handle: self.handle.clone(),
            sleep: None,
        })
    }
}

/// One timer of the runtime's driver, re-armed in place: a connection's waits cost no
/// allocation and no task each.
struct RealDeadline {
    handle: Handle,
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl Deadline for RealDeadline {
    fn reset(&mut self, after: Duration) {
        let now = tokio::time::Instant::now();
        // As `tokio::time::sleep` does for a duration past the clock's range.
        let at = now
            .checked_add(after)
            .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30));
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().reset(at),
            None => {
                let _context = self.handle.enter();
                self.sleep = Some(Box::pin(tokio::time::sleep_until(at)));
            }
        }
    }

    fn poll_passed(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        use std::future::Future;
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().poll(cx),
            None => std::task::Poll::Pending,
        }
    }
}

/// Jobs the blocking pool holds waiting for a thread before it refuses more.
pub const BLOCKING_QUEUE: usize = 1024;

/// Tasks and owners on a tokio runtime (an owner's device waits through `block_in_place`);
/// workers on OS threads of their own; CPU-heavy jobs on a fixed pool of threads (one per
/// core) behind a bounded queue.
pub struct RealTasks {
    handle: Handle,
    pool: OnceLock<BlockingPool>,
}

impl RealTasks {
    pub fn new(handle: Handle) -> RealTasks {
        RealTasks {
            handle,
            pool: OnceLock::new(),
        }
    }
}

struct RealTaskHandle(tokio::task::JoinHandle<()>);

impl TaskHandle for RealTaskHandle {
    fn cancel(&self) {
        self.0.abort();
    }
    fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

/// A worker thread: cancelled at its next wake-up, finished when its future completed.
struct WorkerHandle {
    cancelled: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
    thread: std::thread::Thread,
}

impl TaskHandle for WorkerHandle {
    fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.thread.unpark();
    }
    fn is_finished(&self) -> bool {
        self.finished.load(Ordering::SeqCst)
    }
}

/// Wakes a worker thread parked in [`block_on`].
struct ThreadWaker(std::thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Sets its flag when dropped: on return and on unwind alike.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Runs `future` on this thread to completion (or until `cancelled`), parking between wakes.
fn run_worker(mut future: BoxFuture<'static, ()>, cancelled: &AtomicBool) {
    let waker = std::task::Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    while !cancelled.load(Ordering::SeqCst) {
        if future.as_mut().poll(&mut cx).is_ready() {
            return;
        }
        std::thread::park();
    }
}

/// Runs `future` to completion on the calling thread, parking between wakes: how tools and
/// tests that are not async themselves wait for a node's answers. Never call it from inside
/// an async task (it blocks the thread).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let waker = std::task::Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

struct BlockingPool {
    queue: Mutex<std::sync::mpsc::SyncSender<BlockingJob>>,
}

impl BlockingPool {
    fn start() -> BlockingPool {
        let (tx, rx) = std::sync::mpsc::sync_channel::<BlockingJob>(BLOCKING_QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("cairn-blocking-{i}"))
                .spawn(move || loop {
                    let job = match rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    match job {
                        // A panicking job loses its reply, which its waiter sees; the
                        // thread keeps serving.
                        Ok(job) => {
                            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        }
                        Err(_) => return,
                    }
                })
                .expect("spawning a blocking-pool thread");
        }
        BlockingPool {
            queue: Mutex::new(tx),
        }
    }
}

impl Tasks for RealTasks {
    fn spawn(&self, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle> {
        Box::new(RealTaskHandle(self.handle.spawn(task)))
    }

    fn spawn_worker(&self, name: &str, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle> {
        let cancelled = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        let (c, f) = (cancelled.clone(), finished.clone());
        // The worker's future may use the clock, whose timers live on this runtime.
        let handle = self.handle.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _guard = handle.enter();
                // Finished even when the future panics (the unwind drops this first).
                let _finished = SetOnDrop(f);
                run_worker(task, &c);
            })
            .expect("spawning a worker thread");
        Box::new(WorkerHandle {
            cancelled,
            finished,
            thread: thread.thread().clone(),
        })
    }

    fn spawn_owner(&self, name: &str, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle> {
        use tracing::Instrument;
        // Its log lines name it, as a worker thread's name did.
        self.spawn(Box::pin(
            task.instrument(tracing::info_span!("owner", name)),
        ))
    }

    fn yield_now(&self) -> BoxFuture<'static, ()> {
        Box::pin(tokio::task::yield_now())
    }

    fn device_section(&self, section: &mut dyn FnMut()) {
        // The device waits inside nest in this one (block_in_place within block_in_place
        // runs directly).
        device_wait(section)
    }

    fn spawn_device(&self, job: BlockingJob) {
        // Its device waits run in place there (`device_wait` hands off only a worker).
        drop(self.handle.spawn_blocking(job));
    }

    fn spawn_blocking(&self, job: BlockingJob) -> Result<(), PoolBusy> {
        let pool = self.pool.get_or_init(BlockingPool::start);
        let queue = pool.queue.lock().map_err(|_| PoolBusy)?;
        queue.try_send(job).map_err(|_| PoolBusy)
    }
}

struct OwnedRuntimeTasks {
    inner: RealTasks,
    runtime: Option<Arc<Runtime>>,
}

impl Tasks for OwnedRuntimeTasks {
    fn spawn(&self, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle> {
        self.inner.spawn(task)
    }
    fn spawn_worker(&self, name: &str, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle> {
        self.inner.spawn_worker(name, task)
    }
    fn spawn_owner(&self, name: &str, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle> {
        self.inner.spawn_owner(name, task)
    }
    fn device_section(&self, section: &mut dyn FnMut()) {
        self.inner.device_section(section)
    }
    fn yield_now(&self) -> BoxFuture<'static, ()> {
        self.inner.yield_now()
    }
    fn spawn_device(&self, job: BlockingJob) {
        self.inner.spawn_device(job)
    }
    fn spawn_blocking(&self, job: BlockingJob) -> Result<(), PoolBusy> {
        self.inner.spawn_blocking(job)
    }
}

impl Drop for OwnedRuntimeTasks {
    fn drop(&mut self) {
        // A runtime may not be dropped from inside an async context; shut it down in the
        // background instead when this is the last reference.
        if let Some(runtime) = self.runtime.take().and_then(|r| Arc::try_unwrap(r).ok()) {
            runtime.shutdown_background();
        }
    }
}

/// Entropy from the operating system (`getrandom(2)`): what is drawn from it (personal
/// access tokens, password salts, a generated root password, the cluster id) cannot be
/// predicted from another draw. A splitmix64 sequence, seeded by the clock and the process
/// id, stands in only if the system call fails (it does not on Linux since 3.17), and says
/// so in the log: that sequence is predictable from one of its outputs.
pub struct RealEntropy {
    fallback: AtomicU64,
}

impl RealEntropy {
    pub fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        RealEntropy {
            fallback: AtomicU64::new(nanos ^ (u64::from(std::process::id()) << 32)),
        }
    }

    /// Eight bytes from `getrandom(2)`, retried when interrupted.
    fn from_os() -> io::Result<u64> {
        let mut bytes = [0u8; 8];
        let mut filled = 0;
        while filled < bytes.len() {
            // SAFETY: the pointer and length name the unfilled part of `bytes`.
            let n = unsafe {
                libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
            };
            if n < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            filled += n as usize;
        }
        Ok(u64::from_le_bytes(bytes))
    }

    fn splitmix(&self) -> u64 {
        let mut z = self
            .fallback
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Default for RealEntropy {
    fn default() -> Self {
        Self::new()
    }
}

impl Entropy for RealEntropy {
    fn next_u64(&self) -> u64 {
        match Self::from_os() {
            Ok(value) => value,
            Err(error) => {
                tracing::error!(%error, "getrandom failed: drawing from a predictable sequence instead");
                self.splitmix()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boot_id_parses_from_the_kernels_text_and_nothing_else_does() {
        let id = parse_boot_id("0b4c2a54-5b19-4c5e-9f0e-3c1d2e4f5a6b\n").unwrap();
        assert_eq!(id, 0x0b4c2a545b194c5e9f0e3c1d2e4f5a6b);
        assert!(parse_boot_id("0b4c2a54-5b19").is_err(), "too short");
        assert!(parse_boot_id("zz4c2a54-5b19-4c5e-9f0e-3c1d2e4f5a6b").is_err());
        if cfg!(target_os = "linux") {
            let disk = RealDisk;
            assert_eq!(disk.boot_id().unwrap(), disk.boot_id().unwrap(), "stable");
        }
    }

    /// A fake `pwritev` into `file`: writes a pseudo-random prefix of what it is asked (never
    /// more), now and then fails with EINTR, and checks the IOV_MAX bound.
    fn short_writer(
        file: &mut Vec<u8>,
        seed: u64,
    ) -> impl FnMut(&[IoSlice<'_>], u64) -> io::Result<usize> + '_ {
        let mut state = seed | 1;
        move |iov, pos| {
            assert!(iov.len() <= MAX_IOVECS_PER_WRITE, "{} iovecs", iov.len());
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            if state.is_multiple_of(7) {
                return Err(io::Error::from(io::ErrorKind::Interrupted));
            }
            let asked: usize = iov.iter().map(|b| b.len()).sum();
            let limit = match state % 4 {
                0 => asked,
                _ => (state >> 8) as usize % (asked + 1),
            }
            .max(usize::from(asked > 0));
            let mut pos = pos as usize;
            let mut left = limit;
            for buf in iov {
                let n = buf.len().min(left);
                if file.len() < pos + n {
                    file.resize(pos + n, 0);
                }
                file[pos..pos + n].copy_from_slice(&buf[..n]);
                pos += n;
                left -= n;
            }
            Ok(limit)
        }
    }

    #[test]
    fn thousands_of_mixed_slices_survive_short_writes_and_eintr() {
        for seed in 1..20u64 {
            let owned: Vec<Vec<u8>> = (0..3000usize)
                .map(|i| {
                    let len = match (i * 7 + seed as usize) % 5 {
                        0 => 0,
                        1 => 1,
                        2 => 13,
                        3 => 256,
                        _ => 4096 + i % 97,
                    };
                    (0..len).map(|j| (i * 31 + j) as u8).collect()
                })
                .collect();
            let bufs: Vec<IoSlice<'_>> = owned.iter().map(|b| IoSlice::new(b)).collect();
            let expected: Vec<u8> = owned.concat();
            let mut file = vec![0xAA; 10];
            write_all_vectored(&bufs, 10, short_writer(&mut file, seed)).unwrap();
            assert_eq!(&file[..10], &[0xAA; 10]);
            assert_eq!(&file[10..], &expected[..], "seed {seed}");
        }
    }

    #[test]
    fn a_write_of_nothing_is_an_error_and_errors_pass_through() {
        let data = [1u8; 8];
        let bufs = [IoSlice::new(&data)];
        let zero = write_all_vectored(&bufs, 0, |_, _| Ok(0)).unwrap_err();
        assert_eq!(zero.kind(), io::ErrorKind::WriteZero);
        let failed = write_all_vectored(&bufs, 0, |_, _| {
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        })
        .unwrap_err();
        assert_eq!(failed.raw_os_error(), Some(libc::ENOSPC));
        write_all_vectored(&[], 0, |_, _| panic!("nothing to write")).unwrap();
    }

    #[test]
    fn writes_land_in_a_real_file_across_the_iovec_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = RealDisk.open(&path, OpenMode::CreateNew).unwrap();
        let owned: Vec<Vec<u8>> = (0..3000usize).map(|i| vec![i as u8; (i % 3) * 5]).collect();
        let bufs: Vec<IoSlice<'_>> = owned.iter().map(|b| IoSlice::new(b)).collect();
        file.write_all_at(&bufs, 3).unwrap();
        let mut back = vec![0u8; owned.iter().map(Vec::len).sum::<usize>()];
        file.read_exact_at(&mut back, 3).unwrap();
        assert_eq!(back, owned.concat());
        assert_eq!(file.len().unwrap(), 3 + back.len() as u64);
    }

    /// A read the page cache cannot answer (another handle evicted the file) is read from the
    /// device whole; so is one across cached and uncached pages.
    #[test]
    fn a_read_the_cache_cannot_answer_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..3 * 4096u32).map(|i| (i % 251) as u8).collect();
        let writer = RealDisk.open(&path, OpenMode::CreateNew).unwrap();
        writer.write_all_at(&[IoSlice::new(&bytes)], 0).unwrap();
        writer.sync_data().unwrap();
        let reader = RealDisk.open(&path, OpenMode::Read).unwrap();
        for (len, pos) in [(bytes.len(), 0), (100, 4000), (5000, 6000)] {
            writer.evict_cache().unwrap();
            // The first page cached again, the rest not.
            let mut first = [0u8; 16];
            reader.read_exact_at(&mut first, 0).unwrap();
            let got = reader.read_exact_owned(len, pos as u64).unwrap();
            assert_eq!(&got[..], &bytes[pos..pos + len]);
        }
    }

    /// An owner task waiting on the device in a section leaves its runtime worker's other
    /// tasks running: on a runtime of one worker, the section waits until another task has
    /// run. (Run directly, the section would hold the only worker, the other task could not
    /// run, and the wait would time out.)
    #[test]
    fn a_device_section_on_an_owner_task_leaves_the_worker_to_other_tasks() {
        let env = env().expect("runtime");
        let (ran_tx, ran_rx) = std::sync::mpsc::channel::<()>();
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<bool>();
        let tasks = env.tasks.clone();
        env.tasks.spawn_owner(
            "cairn-test-owner",
            Box::pin(async move {
                tasks.device_section(&mut || {
                    started_tx.send(()).unwrap();
                    // The device wait: until the other task ran (or 10 s).
                    let ran = ran_rx.recv_timeout(Duration::from_secs(10)).is_ok();
                    done_tx.send(ran).unwrap();
                });
            }),
        );
        started_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the section started");
        env.tasks.spawn(Box::pin(async move {
            let _ = ran_tx.send(());
        }));
        let ran = done_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert!(
            ran,
            "another task ran on the runtime while the section waited"
        );
    }
}

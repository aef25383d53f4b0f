//! The production implementation of the seam: real files (`pwritev`, `fdatasync`,
//! `fallocate`), real TCP and the real clock, with tokio as the hidden runtime.
//!
//! This is the only module of the engine allowed to touch `std::fs`, `std::net`, the system
//! clock and the runtime directly.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use super::{
    BoxFuture, ByteStream, Clock, DirEntry, Disk, DiskFile, Entropy, Env, Listener, Net, OpenMode,
    TaskHandle, Tasks,
};
use std::fs::{File, OpenOptions};
use std::io;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
        tasks: Arc::new(RealTasks { handle }),
        entropy: Arc::new(RealEntropy::new()),
    }
}

/// An [`Env`] with its own small runtime (one worker thread), for tools and tests that do
/// not run a server. The runtime lives as long as the returned `Env` or anything cloned
/// from it.
pub fn env() -> io::Result<Env> {
    let runtime = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?,
    );
    let mut env = env_on(runtime.handle().clone());
    env.tasks = Arc::new(OwnedRuntimeTasks {
        inner: RealTasks {
            handle: runtime.handle().clone(),
        },
        runtime: Some(runtime),
    });
    Ok(env)
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealDisk;

struct RealFile {
    file: File,
}

impl DiskFile for RealFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.file.read_at(buf, pos)
    }

    fn write_all_at(&self, bufs: &[IoSlice<'_>], pos: u64) -> io::Result<()> {
        let mut pos = pos;
        let mut index = 0;
        let mut skip = 0usize; // bytes of bufs[index] already written
        while index < bufs.len() {
            let end = (index + MAX_IOVECS_PER_WRITE).min(bufs.len());
            let mut iov: Vec<libc::iovec> = Vec::with_capacity(end - index);
            for (i, buf) in bufs[index..end].iter().enumerate() {
                let slice: &[u8] = if i == 0 { &buf[skip..] } else { buf };
                iov.push(libc::iovec {
                    iov_base: slice.as_ptr() as *mut libc::c_void,
                    iov_len: slice.len(),
                });
            }
            let offset = libc::off_t::try_from(pos)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset overflow"))?;
            // SAFETY: every iovec points into a live borrowed slice of `bufs` for the duration
            // of the call; the count is at most IOV_MAX.
            let written = unsafe {
                libc::pwritev(
                    self.file.as_raw_fd(),
                    iov.as_ptr(),
                    iov.len() as libc::c_int,
                    offset,
                )
            };
            if written < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            if written == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote 0"));
            }
            let mut written = written as usize;
            pos += written as u64;
            // Advance (index, skip) past `written` bytes.
            while written > 0 {
                let remaining = bufs[index].len() - skip;
                if written >= remaining {
                    written -= remaining;
                    index += 1;
                    skip = 0;
                } else {
                    skip += written;
                    written = 0;
                }
            }
            // Skip empty buffers so the loop ends.
            while index < bufs.len() && bufs[index].len() == skip {
                index += 1;
                skip = 0;
            }
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
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

impl Disk for RealDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        let mut options = OpenOptions::new();
        match mode {
            OpenMode::Read => options.read(true),
            OpenMode::ReadWrite => options.read(true).write(true),
            OpenMode::CreateNew => options.read(true).write(true).create_new(true),
            OpenMode::CreateOrOpen => options.read(true).write(true).create(true),
        };
        Ok(Box::new(RealFile {
            file: options.open(path)?,
        }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
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
        File::open(path)?.sync_all()
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
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
        // Spawned onto the runtime so the future can be awaited from any executor.
        let timer = self.handle.spawn(tokio::time::sleep(duration));
        Box::pin(async move {
            let _ = timer.await;
        })
    }
}

/// Real TCP.
pub struct RealNet {
    handle: Handle,
}

struct RealStream(tokio::net::TcpStream);
struct RealListener(tokio::net::TcpListener);

impl ByteStream for RealStream {
    fn read<'a>(&'a mut self, buf: &'a mut [u8]) -> BoxFuture<'a, io::Result<usize>> {
        Box::pin(self.0.read(buf))
    }
    fn write_all<'a>(&'a mut self, buf: &'a [u8]) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(self.0.write_all(buf))
    }
    fn shutdown(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(self.0.shutdown())
    }
}

impl Listener for RealListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>> {
        Box::pin(async move {
            let (stream, peer) = self.0.accept().await?;
            stream.set_nodelay(true)?;
            Ok((Box::new(RealStream(stream)) as Box<dyn ByteStream>, peer))
        })
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl Net for RealNet {
    fn listen(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn Listener>>> {
        let task = self
            .handle
            .spawn(async move { tokio::net::TcpListener::bind(addr).await });
        Box::pin(async move {
            let listener = task.await.map_err(io::Error::other)??;
            Ok(Box::new(RealListener(listener)) as Box<dyn Listener>)
        })
    }

    fn connect(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn ByteStream>>> {
        let task = self
            .handle
            .spawn(async move { tokio::net::TcpStream::connect(addr).await });
        Box::pin(async move {
            let stream = task.await.map_err(io::Error::other)??;
            stream.set_nodelay(true)?;
            Ok(Box::new(RealStream(stream)) as Box<dyn ByteStream>)
        })
    }
}

/// Tasks on a tokio runtime.
pub struct RealTasks {
    handle: Handle,
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

impl Tasks for RealTasks {
    fn spawn(&self, task: BoxFuture<'static, ()>) -> Box<dyn TaskHandle> {
        Box::new(RealTaskHandle(self.handle.spawn(task)))
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

/// Entropy from a splitmix64 sequence seeded by the clock and the process id.
pub struct RealEntropy {
    state: AtomicU64,
}

impl RealEntropy {
    pub fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        RealEntropy {
            state: AtomicU64::new(nanos ^ (u64::from(std::process::id()) << 32)),
        }
    }
}

impl Default for RealEntropy {
    fn default() -> Self {
        Self::new()
    }
}

impl Entropy for RealEntropy {
    fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

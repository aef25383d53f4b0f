//! This OS process's own figures (Linux `/proc`, `statvfs`, `uname`), for `GetStats` and
//! `/metrics`. Outside the `Env` seam by design: they describe the real process, so the
//! production server installs [`read`] as its figures source and the simulator installs
//! nothing (its stats carry zeros and stay a function of the seed).
// The crate denies unsafe code; `statvfs` below is the one call into libc, with its SAFETY
// comment.
#![allow(unsafe_code)]

use std::path::Path;

/// What `GetStats` carries about the process and its machine (zero when unknown).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessFigures {
    pub cpu_seconds: f64,
    /// The process's share of one core since it started, in percent.
    pub cpu_usage: f32,
    pub threads: u32,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    pub total_memory: u64,
    pub available_memory: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub free_disk: u64,
    pub total_disk: u64,
    pub hostname: String,
    pub os_version: String,
    pub kernel_version: String,
}

/// A source of figures for the data directory's file system.
pub type FiguresSource = fn(&Path) -> ProcessFigures;

/// Clock ticks per second of `/proc/self/stat` (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;
const PAGE_BYTES: u64 = 4096;

/// Reads them now; what cannot be read stays zero.
#[allow(clippy::disallowed_methods)]
pub fn read(data_dir: &Path) -> ProcessFigures {
    let mut f = ProcessFigures::default();
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // The fields after the command name, which is in parentheses and may hold spaces.
        if let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) {
            let fields: Vec<&str> = after.split_whitespace().collect();
            let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
            let ticks = field(14).unwrap_or(0) + field(15).unwrap_or(0);
            f.cpu_seconds = ticks as f64 / TICKS_PER_SECOND;
            f.threads = field(20).map_or(0, |t| u32::try_from(t).unwrap_or(u32::MAX));
            f.virtual_bytes = field(23).unwrap_or(0);
            f.resident_bytes = field(24).unwrap_or(0) * PAGE_BYTES;
            let started = field(22).unwrap_or(0) as f64 / TICKS_PER_SECOND;
            let uptime = std::fs::read_to_string("/proc/uptime")
                .ok()
                .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
                .unwrap_or(0.0);
            if uptime > started {
                f.cpu_usage = (100.0 * f.cpu_seconds / (uptime - started)) as f32;
            }
        }
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        f.open_fds = fds.count() as u64;
    }
    if let Ok(meminfo) = std::fs::read_to_string("/proc/meminfo") {
        let kib = |key: &str| {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
                .map_or(0, |k| k * 1024)
        };
        f.total_memory = kib("MemTotal:");
        f.available_memory = kib("MemAvailable:");
    }
    if let Ok(io) = std::fs::read_to_string("/proc/self/io") {
        let value = |key: &str| {
            io.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        f.read_bytes = value("read_bytes:");
        f.written_bytes = value("write_bytes:");
    }
    let (free, total) = disk_space(data_dir);
    f.free_disk = free;
    f.total_disk = total;
    let read_trimmed = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_owned());
    f.hostname = read_trimmed("/proc/sys/kernel/hostname").unwrap_or_default();
    f.kernel_version = read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default();
    f.os_version = read_trimmed("/proc/sys/kernel/version").unwrap_or_default();
    f
}

/// (free, total) bytes of the file system holding `dir`.
fn disk_space(dir: &Path) -> (u64, u64) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return (0, 0);
    };
    // SAFETY: `path` is a valid C string and `stat` a zeroed out-parameter statvfs fills.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return (0, 0);
    }
    let unit = stat.f_frsize as u64;
    (stat.f_bavail as u64 * unit, stat.f_blocks as u64 * unit)
}

/// Most open files the server asks for (Linux's default `fs.nr_open`).
pub const MAX_OPEN_FILES: u64 = 1 << 20;

/// The open-file limit: (soft, hard).
pub fn open_file_limit() -> std::io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-parameter getrlimit fills.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((limit.rlim_cur, limit.rlim_max))
}

/// Raises the soft open-file limit to the hard one (at most [`MAX_OPEN_FILES`]): systemd and
/// most shells start services at a soft 1024, a handful of topics' worth of partitions.
/// Returns the soft limit before and after.
pub fn raise_open_file_limit() -> std::io::Result<(u64, u64)> {
    let (before, hard) = open_file_limit()?;
    let wanted = hard.min(MAX_OPEN_FILES);
    if wanted <= before {
        return Ok((before, before));
    }
    let limit = libc::rlimit {
        rlim_cur: wanted as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: `limit` is a valid rlimit whose soft value is at most its hard one.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((before, wanted))
}

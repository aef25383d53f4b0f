//! The exit record: how the node's last process ended, kept at the data root so the next
//! boot knows whether it may read the page cache as it is ([`PageCache`]).
//!
//! A node writes `{boot id, unclean}` before it writes anything else, and `{boot id, clean}`
//! as the last thing of a graceful shutdown in which no write or sync of its failed. Boot
//! reads it from the device and decides (the table is [`verdict`]):
//!
//! | record found            | the kernel's boot id now | page cache | why                      |
//! |-------------------------|--------------------------|------------|--------------------------|
//! | none, unreadable, torn  | any                      | suspect    | nothing says how it ended |
//! | any                     | unknown                  | suspect    | nothing says which kernel |
//! | `{b, _}`                | not `b`                  | trusted    | the kernel booted since   |
//! | `{b, clean}`            | `b`                      | trusted    | a clean exit              |
//! | `{b, unclean}`          | `b`                      | suspect    | an unclean exit           |
//!
//! The record is a slot file ([`crate::slots`]): written whole, synced, and read back from
//! the device, so a write that failed or landed elsewhere leaves the device holding the
//! previous record, never a clean one the node did not earn. Architecture Invariant: no
//! write of a booting node precedes its `{boot id, unclean}` record reaching the device.

use crate::env::{Disk, DiskFile, DiskLayer, FileLayer, OpenMode, PageCache};
use crate::slots::{self, SlotBytes, RECORD_LEN};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

/// The record's file name at the data root.
pub const EXIT_RECORD: &str = "exit.record";
const MAGIC: [u8; 8] = *b"CAIRNEXT";
const VERSION: u32 = 1;
/// Bytes the checksum covers; the checksum follows them.
const COVERED: usize = RECORD_LEN - 8;

/// How the last process of the node ended, in the kernel that ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitRecord {
    pub boot_id: u128,
    pub clean: bool,
}

impl ExitRecord {
    /// magic (8) | version u32 | clean u32 (0 or 1) | boot id u128 | zeros | xxh3-64 of
    /// everything before it; little-endian.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut bytes = [0u8; RECORD_LEN];
        bytes[..8].copy_from_slice(&MAGIC);
        bytes[8..12].copy_from_slice(&VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&u32::from(self.clean).to_le_bytes());
        bytes[16..32].copy_from_slice(&self.boot_id.to_le_bytes());
        let checksum = xxh3_64(&bytes[..COVERED]);
        bytes[COVERED..].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8; RECORD_LEN]) -> Result<ExitRecord, String> {
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let stored = u64::from_le_bytes(bytes[COVERED..].try_into().expect("8 bytes"));
        if bytes[..8] != MAGIC {
            return Err("not an exit record".into());
        }
        if stored != xxh3_64(&bytes[..COVERED]) {
            return Err("checksum mismatch".into());
        }
        if word(8) != VERSION {
            return Err(format!("version {} (this node writes {VERSION})", word(8)));
        }
        let clean = match word(12) {
            0 => false,
            1 => true,
            other => return Err(format!("clean is {other}, not 0 or 1")),
        };
        if bytes[32..COVERED].iter().any(|b| *b != 0) {
            return Err("reserved bytes are not zero".into());
        }
        let boot_id = u128::from_le_bytes(bytes[16..32].try_into().expect("16 bytes"));
        Ok(ExitRecord { boot_id, clean })
    }
}

/// The exit record as boot found it on the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Missing,
    /// Unreadable, torn (the copies differ) or not a valid record: why.
    Damaged(String),
    Record(ExitRecord),
}

/// Why boot trusts the page cache or not (the rows of [`verdict`]'s table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    NoRecord,
    BootIdUnknown,
    KernelBooted,
    CleanExit,
    UncleanExit,
}

impl Why {
    pub fn name(self) -> &'static str {
        match self {
            Why::NoRecord => "no exit record",
            Why::BootIdUnknown => "the boot id is unknown",
            Why::KernelBooted => "the kernel booted since",
            Why::CleanExit => "a clean exit",
            Why::UncleanExit => "an unclean exit",
        }
    }
}

/// What a boot may take from the page cache, and why: the module's table.
pub fn verdict(found: &Found, boot_id: Option<u128>) -> (PageCache, Why) {
    match (found, boot_id) {
        (Found::Missing | Found::Damaged(_), _) => (PageCache::Suspect, Why::NoRecord),
        (Found::Record(_), None) => (PageCache::Suspect, Why::BootIdUnknown),
        (Found::Record(r), Some(now)) if r.boot_id != now => {
            (PageCache::Trusted, Why::KernelBooted)
        }
        (Found::Record(r), Some(_)) if r.clean => (PageCache::Trusted, Why::CleanExit),
        (Found::Record(_), Some(_)) => (PageCache::Suspect, Why::UncleanExit),
    }
}

/// Rewrites the verdict: a seam for the simulator's deliberate bugs
/// ([`super::NodeHooks::exit_verdict`]); production has none.
pub type ExitVerdictHook = fn(&Found, Option<u128>, (PageCache, Why)) -> (PageCache, Why);

/// Reads the exit record under `root` from the device (its cached pages dropped first).
pub fn read(disk: &dyn Disk, root: &Path) -> io::Result<Found> {
    if !disk.exists(root)? {
        return Ok(Found::Missing);
    }
    let entries = disk.read_dir(root)?;
    Ok(match slots::read(disk, root, &entries, EXIT_RECORD) {
        SlotBytes::Missing => Found::Missing,
        SlotBytes::Unreadable(e) => Found::Damaged(format!("unreadable: {e}")),
        SlotBytes::Oversized { len } => Found::Damaged(format!("{len} bytes long")),
        SlotBytes::Copies(copies) => match *copies {
            [Ok(a), Ok(b)] if a == b => match ExitRecord::decode(&a) {
                Ok(record) => Found::Record(record),
                Err(e) => Found::Damaged(e),
            },
            [Ok(_), Ok(_)] => Found::Damaged("its two copies differ".into()),
            [Err(e), _] | [_, Err(e)] => Found::Damaged(e),
        },
    })
}

/// Writes `record` as the exit record under `root`: written, synced and read back from the
/// device; a record that did not exist before has its name made durable too.
pub fn write(disk: &dyn Disk, root: &Path, record: ExitRecord) -> io::Result<()> {
    let _span = tracing::info_span!("exit_record", clean = record.clean).entered();
    disk.create_dir_all(root)?;
    let path = root.join(EXIT_RECORD);
    let existed = disk.exists(&path)?;
    slots::write(disk, &path, &record.encode())?;
    if !existed {
        disk.sync_dir(root)?;
    }
    Ok(())
}

/// What boot decided from the exit record, and what the node's graceful shutdown needs to
/// write the next one: the boot id, and the watch on the node's writes and syncs.
#[derive(Debug)]
pub struct ExitWatch {
    pub cache: PageCache,
    pub why: Why,
    boot_id: Option<u128>,
    failures: Arc<IoFailures>,
}

impl ExitWatch {
    /// Boot's first step on `disk` (the node's, watched by `failures`): reads the exit
    /// record from the device, decides, and replaces it with `{boot id, unclean}` before
    /// anything else is written. Without a boot id the record is removed instead (a later
    /// boot of the same kernel must not read an old clean one). An error here fails boot.
    pub fn begin(
        disk: &dyn Disk,
        root: &Path,
        failures: Arc<IoFailures>,
        hook: Option<ExitVerdictHook>,
    ) -> io::Result<ExitWatch> {
        let found = read(disk, root)?;
        let boot_id = disk
            .boot_id()
            .inspect_err(|e| tracing::warn!(%e, "the kernel's boot id is unknown"))
            .ok();
        let mut decided = verdict(&found, boot_id);
        if let Some(rewrite) = hook {
            decided = rewrite(&found, boot_id, decided);
        }
        let (cache, why) = decided;
        tracing::info!(
            page_cache = cache.name(),
            why = why.name(),
            ?found,
            "boot's page cache"
        );
        match boot_id {
            Some(boot_id) => write(
                disk,
                root,
                ExitRecord {
                    boot_id,
                    clean: false,
                },
            )?,
            None if found != Found::Missing => {
                disk.remove_file(&root.join(EXIT_RECORD))?;
                disk.sync_dir(root)?;
            }
            None => {}
        }
        Ok(ExitWatch {
            cache,
            why,
            boot_id,
            failures,
        })
    }

    /// A graceful shutdown's last step, once nothing of the node writes any more (its
    /// caller stopped every owner; a node's `end` runs once): when no write or sync failed
    /// since boot, everything under `root` is synced and the record says `{boot id,
    /// clean}`. Otherwise (or when that sync fails) the record stays `{boot id, unclean}`,
    /// and the next boot of this kernel reads the device.
    ///
    /// The sync is `syncfs` where it covers the tree: it reports a writeback error no
    /// `syncfs` of the file system reported yet, so another process's `syncfs` of the same
    /// file system could take one first (the data root is meant to be cairn's alone, as
    /// for boot's `sync_all`).
    pub fn end(&self, disk: &dyn Disk, root: &Path) {
        let Some(boot_id) = self.boot_id else {
            return;
        };
        if self.failures.seen() {
            tracing::warn!("a write or a sync failed since boot: the exit is not clean");
            return;
        }
        let clean = ExitRecord {
            boot_id,
            clean: true,
        };
        let ended = disk.sync_all(root).and_then(|()| write(disk, root, clean));
        if let Err(e) = ended {
            tracing::warn!(%e, "the clean exit could not be recorded");
        }
    }
}

/// Whether a write or a sync of the node failed since it booted: any such failure may have
/// left the page cache holding bytes the device does not, so the exit cannot be clean.
#[derive(Debug, Default)]
pub struct IoFailures {
    seen: AtomicBool,
}

impl IoFailures {
    pub fn seen(&self) -> bool {
        self.seen.load(Ordering::SeqCst)
    }

    fn note<T>(&self, result: io::Result<T>) -> io::Result<T> {
        if result.is_err() {
            self.seen.store(true, Ordering::SeqCst);
        }
        result
    }
}

/// `disk`, noting in `failures` every write, length change, file sync, directory sync and
/// `sync_all` that fails (the calls after which the cache may be ahead of the device).
pub fn watching(disk: Arc<dyn Disk>, failures: Arc<IoFailures>) -> Arc<dyn Disk> {
    Arc::new(WatchedDisk {
        inner: disk,
        failures,
    })
}

struct WatchedDisk {
    inner: Arc<dyn Disk>,
    failures: Arc<IoFailures>,
}

struct WatchedFile {
    inner: Box<dyn DiskFile>,
    failures: Arc<IoFailures>,
}

impl DiskLayer for WatchedDisk {
    fn inner(&self) -> &dyn Disk {
        self.inner.as_ref()
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        // Every mode: a file opened for reading can be synced too (its writeback error is
        // reported through it).
        Ok(Box::new(WatchedFile {
            inner: self.inner.open(path, mode)?,
            failures: self.failures.clone(),
        }))
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.failures.note(self.inner.sync_dir(path))
    }
    fn sync_all(&self, root: &Path) -> io::Result<()> {
        self.failures.note(self.inner.sync_all(root))
    }
}

impl FileLayer for WatchedFile {
    fn inner(&self) -> &dyn DiskFile {
        self.inner.as_ref()
    }
    fn write_all_at(&self, bufs: &[io::IoSlice<'_>], pos: u64) -> io::Result<()> {
        self.failures.note(self.inner.write_all_at(bufs, pos))
    }
    fn sync_data(&self) -> io::Result<()> {
        self.failures.note(self.inner.sync_data())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.failures.note(self.inner.set_len(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::real::RealDisk;

    /// The real disk, its boot id `id` (`None`: unknown).
    struct BootIdIs(RealDisk, Option<u128>);

    impl DiskLayer for BootIdIs {
        fn inner(&self) -> &dyn Disk {
            &self.0
        }
        fn boot_id(&self) -> io::Result<u128> {
            self.1.ok_or_else(|| io::Error::other("no /proc"))
        }
    }

    #[test]
    fn begin_trusts_only_what_the_record_earned_and_marks_this_process_unclean() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let begin = |disk: &dyn Disk| {
            let watch = ExitWatch::begin(disk, root, Arc::default(), None).unwrap();
            (watch.cache, watch.why)
        };
        let (same, other) = (BootIdIs(RealDisk, Some(7)), BootIdIs(RealDisk, Some(8)));
        assert_eq!(begin(&same), (PageCache::Suspect, Why::NoRecord));
        assert_eq!(
            read(&same, root).unwrap(),
            Found::Record(ExitRecord {
                boot_id: 7,
                clean: false
            })
        );
        assert_eq!(begin(&same), (PageCache::Suspect, Why::UncleanExit));
        let ended = ExitWatch::begin(&same, root, Arc::default(), None).unwrap();
        ended.end(&same, root);
        assert_eq!(begin(&same), (PageCache::Trusted, Why::CleanExit));
        // The clean record was replaced at that boot: the next one of the kernel is unclean.
        assert_eq!(begin(&same), (PageCache::Suspect, Why::UncleanExit));
        assert_eq!(begin(&other), (PageCache::Trusted, Why::KernelBooted));
        // A failure seen since boot: the exit is not clean.
        let failures = Arc::new(IoFailures::default());
        let watch = ExitWatch::begin(&same, root, failures.clone(), None).unwrap();
        let _ = failures.note::<()>(Err(io::Error::other("EIO")));
        watch.end(&same, root);
        assert_eq!(begin(&same), (PageCache::Suspect, Why::UncleanExit));
        // Without a boot id nothing is trusted, and the record is gone.
        let unknown = BootIdIs(RealDisk, None);
        assert_eq!(begin(&unknown), (PageCache::Suspect, Why::BootIdUnknown));
        assert_eq!(read(&same, root).unwrap(), Found::Missing);
    }

    #[test]
    fn a_record_round_trips_and_every_flipped_bit_is_refused() {
        for clean in [false, true] {
            let record = ExitRecord {
                boot_id: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
                clean,
            };
            let bytes = record.encode();
            assert_eq!(ExitRecord::decode(&bytes), Ok(record));
            for bit in 0..RECORD_LEN * 8 {
                let mut flipped = bytes;
                flipped[bit / 8] ^= 1 << (bit % 8);
                assert!(ExitRecord::decode(&flipped).is_err(), "bit {bit}");
            }
        }
    }

    #[test]
    fn the_verdict_trusts_the_cache_only_after_a_clean_exit_or_a_new_kernel() {
        let record = |boot_id, clean| Found::Record(ExitRecord { boot_id, clean });
        let cases = [
            (Found::Missing, Some(7), PageCache::Suspect, Why::NoRecord),
            (
                Found::Damaged("torn".into()),
                Some(7),
                PageCache::Suspect,
                Why::NoRecord,
            ),
            (
                record(7, true),
                None,
                PageCache::Suspect,
                Why::BootIdUnknown,
            ),
            (
                record(7, false),
                Some(8),
                PageCache::Trusted,
                Why::KernelBooted,
            ),
            (
                record(7, true),
                Some(8),
                PageCache::Trusted,
                Why::KernelBooted,
            ),
            (record(7, true), Some(7), PageCache::Trusted, Why::CleanExit),
            (
                record(7, false),
                Some(7),
                PageCache::Suspect,
                Why::UncleanExit,
            ),
        ];
        for (found, now, cache, why) in cases {
            assert_eq!(verdict(&found, now), (cache, why), "{found:?} at {now:?}");
        }
    }
}

//! The open files of the partitions' active segments, bounded across a node: a partition
//! opens its active segment's `.log` and `.index` when an append, a sync or a read needs
//! them (and its superblock slot files when a record does, kept beside them:
//! [`ActiveFiles::slot`]), and they stay open until the table is full and they are the least recently used
//! (review S4: two files held by every partition made the open-file limit the limit on
//! partitions; issue 26's 100,000 partitions need this bound).
//!
//! | a partition | the table |
//! |---|---|
//! | checks its files out to change them ([`Use::Write`]) | counts them dirty: written past what was synced |
//! | synced them and recorded the durable end ([`ActiveHandles::settled`]) | counts them clean |
//! | checks out files it does not hold | opens them, then closes the least recently used others' past [`ActiveHandles::new`]'s capacity: clean ones first as they are; a dirty one is synced first (closing unsynced files would lose a writeback error with them), and one whose sync fails stays open, its failure kept for its partition ([`ActiveHandles::failure`]: the partition fences at its next request; the sync that took the error was the one that could report it, so a later sync of the partition's own would succeed over lost bytes) |
//! | holds a checkout while another partition needs room | keeps those files: a checkout in use is never closed (the table may then hold more than its capacity, by at most the checkouts in flight, and a record job's slot file outlives its entry's closing until the job ends; a poll's reader holds only the log, read-only, which closes when the read ends) |
//! | seals its active segment ([`ActiveHandles::take`]) or goes away ([`ActiveHandles::forget_owner`]) | gives the files back |
//!
//! Owners are the numbers a node's [`super::resources::HandleCache`] gives its logs.

use super::segment::ActiveFiles;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// Counters, for tests and benches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActiveStats {
    /// Partitions whose active files are open now.
    pub open: usize,
    pub opens: u64,
    /// Files closed to make room, and of those how many were synced first.
    pub closes: u64,
    pub synced_to_close: u64,
    /// Times the table held more than its capacity because every candidate was in use.
    pub over: u64,
}

/// What a checkout is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    Read,
    /// Writes or cuts: the files count as dirty until [`ActiveHandles::settled`].
    Write,
    /// A sync that will record a durable end: refused, as a write is, once a sync made to
    /// close the files failed.
    Sync,
}

/// The bounded table of active segments' open files, shared by the partitions of a node.
#[derive(Clone)]
pub struct ActiveHandles {
    inner: Arc<Mutex<Table>>,
}

struct Table {
    capacity: usize,
    tick: u64,
    entries: BTreeMap<u64, Entry>,
    /// Last use → owner: the first is the one to close.
    by_use: BTreeMap<u64, u64>,
    stats: ActiveStats,
}

struct Entry {
    segment_start: u64,
    files: Arc<ActiveFiles>,
    /// Written since the last sync its partition recorded.
    dirty: bool,
    used: u64,
    /// A sync made to close the files failed: the partition's next write is refused with it.
    failed: Option<String>,
}

impl ActiveHandles {
    pub fn new(capacity: usize) -> ActiveHandles {
        assert!(
            capacity > 0,
            "the table holds at least one partition's files"
        );
        ActiveHandles {
            inner: Arc::new(Mutex::new(Table {
                capacity,
                tick: 0,
                entries: BTreeMap::new(),
                by_use: BTreeMap::new(),
                stats: ActiveStats::default(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `owner`'s active files for the segment at `segment_start`, opened with `open` when
    /// the table does not hold them (the open runs without the lock), for `use_`.
    pub fn checkout(
        &self,
        owner: u64,
        segment_start: u64,
        use_: Use,
        open: impl FnOnce() -> io::Result<ActiveFiles>,
    ) -> io::Result<Arc<ActiveFiles>> {
        if let Some(files) = self.lock().touch(owner, segment_start, use_)? {
            return Ok(files);
        }
        let files = Arc::new(open()?);
        let mut table = self.lock();
        // An owner's checkouts come one at a time (its shard's, or the persist job that
        // holds its partition), so none put its files here meanwhile; the table's own order
        // is all the lock keeps.
        assert!(table.touch(owner, segment_start, use_)?.is_none());
        table.insert(owner, segment_start, files.clone(), use_ == Use::Write);
        Ok(files)
    }

    /// Why a sync made to close `owner`'s active files failed, if one did.
    pub fn failure(&self, owner: u64) -> Option<String> {
        self.lock().entries.get(&owner)?.failed.clone()
    }

    /// Files a rotation just made for `owner`'s new active segment (dirty: not yet synced).
    pub fn adopt(&self, owner: u64, segment_start: u64, files: ActiveFiles) {
        let mut table = self.lock();
        table.remove(owner);
        table.insert(owner, segment_start, Arc::new(files), true);
    }

    /// `owner` synced everything it wrote to its active files and recorded it.
    pub fn settled(&self, owner: u64) {
        if let Some(entry) = self.lock().entries.get_mut(&owner) {
            entry.dirty = false;
        }
    }

    /// Gives back `owner`'s active files (a rotation sealing them), if the table holds them.
    pub fn take(&self, owner: u64) -> Option<Arc<ActiveFiles>> {
        self.lock().remove(owner).map(|entry| entry.files)
    }

    /// Closes `owner`'s active files (its log closed, removed or purged).
    pub fn forget_owner(&self, owner: u64) {
        self.lock().remove(owner);
    }

    pub fn stats(&self) -> ActiveStats {
        let table = self.lock();
        ActiveStats {
            open: table.entries.len(),
            ..table.stats
        }
    }
}

impl Table {
    /// The files held for `owner` at `segment_start`, marked used (and dirty for a
    /// write); the failure of a sync made to close them, for a write or a sync.
    fn touch(
        &mut self,
        owner: u64,
        segment_start: u64,
        use_: Use,
    ) -> io::Result<Option<Arc<ActiveFiles>>> {
        let tick = self.next_tick();
        let Some(entry) = self.entries.get_mut(&owner) else {
            return Ok(None);
        };
        assert_eq!(
            entry.segment_start, segment_start,
            "a partition's active files are those of its active segment"
        );
        if let (Use::Write | Use::Sync, Some(why)) = (use_, &entry.failed) {
            return Err(io::Error::other(format!(
                "a sync made to close the active segment's files failed: {why}"
            )));
        }
        entry.dirty |= use_ == Use::Write;
        let previous = std::mem::replace(&mut entry.used, tick);
        let files = entry.files.clone();
        self.by_use.remove(&previous);
        self.by_use.insert(tick, owner);
        Ok(Some(files))
    }

    fn insert(&mut self, owner: u64, segment_start: u64, files: Arc<ActiveFiles>, dirty: bool) {
        self.make_room(owner);
        let used = self.next_tick();
        let entry = Entry {
            segment_start,
            files,
            dirty,
            used,
            failed: None,
        };
        assert!(self.entries.insert(owner, entry).is_none());
        self.by_use.insert(used, owner);
        self.stats.opens += 1;
        assert_eq!(self.entries.len(), self.by_use.len());
    }

    /// Closes the least recently used files of owners other than `owner` until one more
    /// fits: clean ones first, then dirty ones, synced (the module doc's table).
    fn make_room(&mut self, owner: u64) {
        for dirty in [false, true] {
            let mut after = 0;
            while self.entries.len() >= self.capacity {
                let Some((&used, &victim)) = self.by_use.range(after..).next() else {
                    break;
                };
                after = used + 1;
                let entry = &self.entries[&victim];
                // In use: the table's reference is not the only one (a checkout holds
                // one, and none can be taken while the lock is held).
                let busy = Arc::strong_count(&entry.files) > 1;
                if victim == owner || busy || entry.failed.is_some() || entry.dirty != dirty {
                    continue;
                }
                if dirty && !self.sync_to_close(victim) {
                    continue;
                }
                self.remove(victim);
                self.stats.closes += 1;
            }
        }
        if self.entries.len() >= self.capacity {
            self.stats.over += 1;
        }
    }

    /// Syncs `victim`'s dirty files before they close; whether they may (a failure is
    /// kept for its partition's next write).
    fn sync_to_close(&mut self, victim: u64) -> bool {
        let entry = self.entries.get_mut(&victim).expect("a candidate is held");
        let files = &entry.files;
        match files.index.sync_data().and_then(|()| files.log.sync_data()) {
            Ok(()) => {
                self.stats.synced_to_close += 1;
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "a sync made to close a partition's active files failed");
                entry.failed = Some(e.to_string());
                false
            }
        }
    }

    fn remove(&mut self, owner: u64) -> Option<Entry> {
        let entry = self.entries.remove(&owner)?;
        self.by_use.remove(&entry.used);
        assert_eq!(self.entries.len(), self.by_use.len());
        Some(entry)
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }
}

#[cfg(test)]
mod tests {
    use super::super::resources::stub::StubFile;
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn files(syncs: &Arc<AtomicU64>, fail: bool) -> io::Result<ActiveFiles> {
        let file = || StubFile {
            syncs: syncs.clone(),
            fail,
        };
        Ok(ActiveFiles::new(Arc::new(file()), Box::new(file())))
    }

    #[test]
    fn the_least_recently_used_clean_files_close_first_and_dirty_ones_are_synced_to_close() {
        let syncs = Arc::new(AtomicU64::new(0));
        let table = ActiveHandles::new(2);
        table
            .checkout(1, 0, Use::Write, || files(&syncs, false))
            .unwrap();
        table
            .checkout(2, 0, Use::Read, || files(&syncs, false))
            .unwrap();
        // 1 is dirty and older, 2 clean: a third closes 2, unsynced.
        table
            .checkout(3, 0, Use::Write, || files(&syncs, false))
            .unwrap();
        let stats = table.stats();
        assert_eq!((stats.open, stats.closes, stats.synced_to_close), (2, 1, 0));
        assert_eq!(syncs.load(Ordering::Relaxed), 0);
        // 1 and 3 dirty: a fourth closes the older, 1, once synced.
        table
            .checkout(4, 0, Use::Read, || files(&syncs, false))
            .unwrap();
        let stats = table.stats();
        assert_eq!((stats.open, stats.closes, stats.synced_to_close), (2, 2, 1));
        assert_eq!(syncs.load(Ordering::Relaxed), 2, "its index and its log");
        // 3 settled is clean and older than 4: a fifth closes it without a sync.
        table.settled(3);
        table
            .checkout(5, 0, Use::Read, || files(&syncs, false))
            .unwrap();
        assert_eq!(syncs.load(Ordering::Relaxed), 2);
        let mut opened = false;
        let again = table.checkout(5, 0, Use::Read, || {
            opened = true;
            files(&syncs, false)
        });
        assert!(again.is_ok() && !opened, "5 is held");
        let reopened = table.checkout(3, 0, Use::Read, || {
            opened = true;
            files(&syncs, false)
        });
        assert!(reopened.is_ok() && opened, "3 was closed");
    }

    #[test]
    fn files_in_use_stay_open_past_the_capacity() {
        let syncs = Arc::new(AtomicU64::new(0));
        let table = ActiveHandles::new(1);
        let held = table
            .checkout(1, 0, Use::Write, || files(&syncs, false))
            .unwrap();
        table
            .checkout(2, 0, Use::Read, || files(&syncs, false))
            .unwrap();
        let stats = table.stats();
        assert_eq!((stats.open, stats.closes, stats.over), (2, 0, 1));
        drop(held);
        table
            .checkout(3, 0, Use::Read, || files(&syncs, false))
            .unwrap();
        assert_eq!(table.stats().open, 1, "both closed once free");
    }

    #[test]
    fn a_failed_sync_to_close_keeps_the_files_and_refuses_the_owners_next_write_or_sync() {
        let syncs = Arc::new(AtomicU64::new(0));
        let table = ActiveHandles::new(1);
        table
            .checkout(1, 0, Use::Write, || files(&syncs, true))
            .unwrap();
        table
            .checkout(2, 0, Use::Read, || files(&syncs, false))
            .unwrap();
        assert_eq!(table.stats().open, 2);
        let read = table.checkout(1, 0, Use::Read, || files(&syncs, false));
        assert!(read.is_ok(), "reads go on");
        assert!(table.failure(1).is_some_and(|why| why.contains("EIO")));
        for use_ in [Use::Write, Use::Sync] {
            let refused = table.checkout(1, 0, use_, || files(&syncs, false));
            let refused = refused.err().expect("refused");
            assert!(refused.to_string().contains("EIO"), "{refused}");
        }
        assert_eq!(table.failure(2), None);
    }

    #[test]
    fn a_rotation_takes_the_sealed_files_and_adopts_the_new_ones() {
        let syncs = Arc::new(AtomicU64::new(0));
        let table = ActiveHandles::new(4);
        table
            .checkout(1, 0, Use::Write, || files(&syncs, false))
            .unwrap();
        assert!(table.take(1).is_some());
        table.adopt(1, 100, files(&syncs, false).unwrap());
        let mut opened = false;
        table
            .checkout(1, 100, Use::Read, || {
                opened = true;
                files(&syncs, false)
            })
            .unwrap();
        assert!(!opened);
        table.forget_owner(1);
        assert_eq!(table.stats().open, 0);
    }
}

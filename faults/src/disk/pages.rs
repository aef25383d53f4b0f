//! The page and layer model of one file: the page cache (`data`), what the device returns
//! (`device`) and what survives a power loss (`durable`), with the dirty and lied pages
//! between them.

use super::{Damage, PAGE};
use std::collections::BTreeSet;
use std::ops::Range;

#[derive(Default, Clone)]
pub(super) struct FileState {
    pub(super) data: Vec<u8>,
    pub(super) device: Vec<u8>,
    pub(super) durable: Vec<u8>,
    pub(super) dirty: BTreeSet<u64>,
    pub(super) lied: BTreeSet<u64>,
    /// Length that an honest sync promised durable.
    pub(super) promised_len: u64,
    /// The length changed since the last honest sync.
    pub(super) len_dirty: bool,
    /// Bytes reserved by preallocation.
    pub(super) allocated: u64,
    pub(super) damage: Vec<Damage>,
    /// A writeback of this file failed inside a `sync_all`, which reported it for the whole
    /// file system: the file's own next `sync_data` reports it too (Linux keeps a writeback
    /// error per file and per file system, each reported to its own callers).
    pub(super) unreported_error: bool,
}

pub(super) fn pages_of(range: &Range<u64>) -> Range<u64> {
    if range.is_empty() {
        return 0..0;
    }
    range.start / PAGE..(range.end - 1) / PAGE + 1
}

pub(super) fn byte_range(page: u64, len: usize) -> Range<usize> {
    let start = (page * PAGE) as usize;
    start.min(len)..(start + PAGE as usize).min(len)
}

/// Copies page `page` of `from` into `to` (lengths as they are; missing bytes are zeros).
pub(super) fn copy_page(to: &mut [u8], from: &[u8], page: u64) {
    let range = byte_range(page, to.len());
    let present = range.start.min(from.len())..range.end.min(from.len());
    to[present.clone()].copy_from_slice(&from[present.clone()]);
    to[present.end.max(range.start)..range.end].fill(0);
}

impl FileState {
    pub(super) fn write(&mut self, pos: u64, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let end = pos as usize + bytes.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
            self.len_dirty = true;
        }
        self.data[pos as usize..end].copy_from_slice(bytes);
        let written = pos..end as u64;
        for page in pages_of(&written) {
            self.dirty.insert(page);
        }
        for damage in &mut self.damage {
            if damage.range.start >= written.start && damage.range.end <= written.end {
                damage.in_cache = false;
            }
        }
    }

    /// Writes back `pages` (honestly unless `lie`); returns them.
    pub(super) fn write_back(&mut self, pages: &BTreeSet<u64>, lie: bool) {
        let len = self.data.len();
        self.device.resize(len, 0);
        for &page in pages {
            copy_page(&mut self.device, &self.data, page);
        }
        for damage in &mut self.damage {
            let touched = pages_of(&damage.range).any(|p| pages.contains(&p));
            if touched {
                damage.on_device = damage.in_cache;
            }
        }
        if lie {
            self.lied.extend(pages.iter().copied());
            return;
        }
        // An honest flush empties the device's volatile cache too.
        let lied = std::mem::take(&mut self.lied);
        self.durable.resize(len, 0);
        for &page in pages.iter().chain(&lied) {
            copy_page(&mut self.durable, &self.device, page);
        }
        self.len_dirty = false;
        self.promised_len = len as u64;
        for damage in &mut self.damage {
            if pages_of(&damage.range).any(|p| pages.contains(&p) || lied.contains(&p)) {
                damage.durable = damage.on_device;
            }
            if damage.range.start >= len as u64 && !damage.missing {
                damage.on_device = false;
                damage.durable = false;
            }
        }
    }

    pub(super) fn used(&self) -> u64 {
        (self.data.len() as u64).max(self.allocated)
    }
}

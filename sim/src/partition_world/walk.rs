//! The oracle's own reader of a partition's segment files on the simulated disk: a walk from
//! byte zero of each log, batch by batch, verified against the format (checksums, lengths,
//! the offset chain from the file's name, the partition id) and the unreadable sectors. It
//! shares nothing with the engine's reader but the sans-IO format, so the checkers can say
//! where valid data ends, and where a damaged batch lies, without asking the engine.

use cairn_engine::format::{verify_batch, BatchHeader, Layout, Limits, BATCH_HEADER_LEN};
use cairn_faults::SimDisk;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Which bytes to walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// What reads return now (a running node).
    Cache,
    /// What a restarted node reads after dropping clean cached pages (recovery).
    Device,
}

/// One valid batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walked {
    pub position: u64,
    pub length: u64,
    pub base_offset: u64,
    pub next_offset: u64,
}

/// One log file walked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkedLog {
    pub path: PathBuf,
    pub start_offset: u64,
    pub file_len: u64,
    pub batches: Vec<Walked>,
    /// Where the walk stopped before the end of the file, and the bytes the batch there
    /// claims (at least its header): a fault that explains the stop lies in them.
    pub stop: Option<Range<u64>>,
}

impl WalkedLog {
    pub fn valid_end(&self) -> u64 {
        self.batches.last().map_or(0, |b| b.position + b.length)
    }

    pub fn next_offset(&self) -> u64 {
        self.batches
            .last()
            .map_or(self.start_offset, |b| b.next_offset)
    }

    /// The valid batch that holds `offset`.
    pub fn batch_holding(&self, offset: u64) -> Option<Walked> {
        self.batches
            .iter()
            .find(|b| b.base_offset <= offset && offset < b.next_offset)
            .copied()
    }
}

fn parse_log_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".log")?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// The log files of the partition in `dir`, in offset order, each walked.
pub fn walk_partition(disk: &SimDisk, dir: &Path, partition_id: u64, view: View) -> Vec<WalkedLog> {
    let mut logs: Vec<(u64, PathBuf)> = disk
        .paths_under(dir)
        .into_iter()
        .filter(|p| p.parent() == Some(dir))
        .filter_map(|p| {
            let start = parse_log_name(&p.file_name()?.to_string_lossy())?;
            Some((start, p))
        })
        .collect();
    logs.sort();
    logs.into_iter()
        .filter_map(|(start, path)| walk_log(disk, &path, start, partition_id, view))
        .collect()
}

/// Walks one log file.
pub fn walk_log(
    disk: &SimDisk,
    path: &Path,
    start_offset: u64,
    partition_id: u64,
    view: View,
) -> Option<WalkedLog> {
    let bytes = match view {
        View::Cache => disk.contents(path)?,
        View::Device => disk.device_view(path)?,
    };
    let bad = disk.bad_ranges(path);
    let mut walked = WalkedLog {
        path: path.to_path_buf(),
        start_offset,
        file_len: bytes.len() as u64,
        batches: Vec::new(),
        stop: None,
    };
    let mut position = 0u64;
    let mut expected = start_offset;
    while position < walked.file_len {
        match batch_at(&bytes, &bad, position, expected, partition_id) {
            Ok(batch) => {
                position += batch.length;
                expected = batch.next_offset;
                walked.batches.push(batch);
            }
            Err(claimed) => {
                walked.stop = Some(position..position + claimed);
                break;
            }
        }
    }
    Some(walked)
}

/// The valid batch at `position`, or the length of bytes it claims (for locating damage).
fn batch_at(
    bytes: &[u8],
    bad: &[Range<u64>],
    position: u64,
    expected: u64,
    partition_id: u64,
) -> Result<Walked, u64> {
    let at = position as usize;
    let header_len = BATCH_HEADER_LEN as u64;
    if bytes.len() - at < BATCH_HEADER_LEN {
        return Err(header_len);
    }
    let header = BatchHeader::decode(&bytes[at..]).map_err(|_| header_len)?;
    let plausible =
        header.batch_length >= header_len && header.batch_length <= Limits::CEILING.max_batch_bytes;
    let claimed = if plausible {
        header.batch_length
    } else {
        header_len
    };
    let end = position.checked_add(header.batch_length).ok_or(claimed)?;
    if !plausible || end > bytes.len() as u64 {
        return Err(claimed);
    }
    if bad.iter().any(|r| r.start < end && position < r.end) {
        return Err(claimed);
    }
    let verified = verify_batch(&bytes[at..end as usize], &Limits::CEILING, Layout::Stored)
        .map_err(|_| claimed)?;
    let header = verified.header;
    if header.base_offset != expected || header.partition_id != partition_id {
        return Err(claimed);
    }
    Ok(Walked {
        position,
        length: header.batch_length,
        base_offset: header.base_offset,
        next_offset: header.checked_next_offset().ok_or(claimed)?,
    })
}

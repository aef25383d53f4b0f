//! Ping-pong record slots, shared by the partition superblock and the metadata superblock.
//!
//! A slot file holds one fixed-size record twice, at offset 0 and at [`MIRROR_OFFSET`] (a
//! page apart), written by one write and made durable by one sync: a rotten sector, a bad
//! sector or a torn page can then not erase the newest record. The file is two whole pages
//! (each copy padded with zeros), so every write rewrites every sector of both copies: no
//! write needs the page cache to read a sector first, and a write heals a latent sector
//! error in either copy (a device remaps a sector written whole) instead of leaving it to
//! meet a second one. Every write is read back
//! from the device (the cached page dropped first): a device that puts a write at the wrong
//! place keeps the slot's old bytes, and nothing may be acknowledged on a record that is not
//! where recovery looks. Decoding the bytes is the caller's (each record has its own format).

use crate::env::{DirEntry, Disk, DiskFile, OpenMode};
use std::io;
use std::path::Path;

/// The length of every record kept in slots.
pub const RECORD_LEN: usize = 128;
/// Where the second copy of the record lies in a slot file.
pub const MIRROR_OFFSET: u64 = 4096;
/// The length of a slot file: two pages, one per copy. (Files written before the padding
/// end right after the mirror's record; they read the same.)
pub const SLOT_FILE_LEN: u64 = 2 * MIRROR_OFFSET;
const _: () = assert!(
    RECORD_LEN == 128 && MIRROR_OFFSET == 4096,
    "the format on disk"
);
const _: () = assert!(
    RECORD_LEN as u64 <= MIRROR_OFFSET,
    "the two copies never share a page"
);

/// The bytes of a slot file: `record` at 0 and again at [`MIRROR_OFFSET`].
pub fn encode_file(record: &[u8; RECORD_LEN]) -> Vec<u8> {
    let mut file = vec![0u8; SLOT_FILE_LEN as usize];
    file[..RECORD_LEN].copy_from_slice(record);
    file[MIRROR_OFFSET as usize..][..RECORD_LEN].copy_from_slice(record);
    file
}

/// Writes `record` into the slot file at `path` (both copies, one write), syncs it, and reads
/// it back from the device. A mismatch is an error: the write landed elsewhere.
pub fn write(disk: &dyn Disk, path: &Path, record: &[u8; RECORD_LEN]) -> io::Result<()> {
    let file = disk.open(path, OpenMode::CreateOrOpen)?;
    write_to(file.as_ref(), path, record)
}

/// [`write`] through `file`, the slot file at `path` opened already (kept open by its
/// owner, so a record costs no open and close).
pub fn write_to(file: &dyn DiskFile, path: &Path, record: &[u8; RECORD_LEN]) -> io::Result<()> {
    let _span = tracing::debug_span!("write_slot", path = %path.display()).entered();
    let bytes = encode_file(record);
    file.write_all_at(&[io::IoSlice::new(&bytes)], 0)?;
    file.sync_data()?;
    file.evict_cache()?;
    let mut back = [0u8; RECORD_LEN];
    file.read_exact_at(&mut back, 0)?;
    if back != *record {
        return Err(io::Error::other(format!(
            "the record read back from {} differs from what was written: the write landed elsewhere",
            path.display()
        )));
    }
    Ok(())
}

/// Creates the slot file at `path` holding `record`, all or nothing: written and synced as
/// `<path>.tmp`, then renamed. A crash leaves either no slot file or a whole one, never an
/// empty or torn slot that would read as damage. The caller syncs the directory.
pub fn create(disk: &dyn Disk, path: &Path, record: &[u8; RECORD_LEN]) -> io::Result<()> {
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = Path::new(&temp);
    write(disk, temp, record)?;
    disk.rename(temp, path)
}

/// One slot file as read from the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotBytes {
    Missing,
    Unreadable(String),
    /// Longer than a slot file: a write landed out of place.
    Oversized {
        len: u64,
    },
    /// Each copy's bytes, or why it could not be read.
    Copies(Box<[Result<[u8; RECORD_LEN], String>; 2]>),
}

/// Reads the slot file `name` of `dir` (listed in `entries`) from the device.
pub fn read(disk: &dyn Disk, dir: &Path, entries: &[DirEntry], name: &str) -> SlotBytes {
    if !entries.iter().any(|e| e.name == name) {
        return SlotBytes::Missing;
    }
    let path = dir.join(name);
    let opened = disk.open(&path, OpenMode::Read).and_then(|file| {
        file.evict_cache()?;
        Ok((file.len()?, file))
    });
    let (len, file) = match opened {
        Ok(opened) => opened,
        Err(e) => return SlotBytes::Unreadable(e.to_string()),
    };
    if len > SLOT_FILE_LEN {
        return SlotBytes::Oversized { len };
    }
    // Both copies in one read of the device; a file the read cannot take whole (a bad
    // sector under one copy, a file cut short) is read copy by copy, so each copy's fate is
    // its own.
    let mut whole = vec![0u8; len as usize];
    if len >= MIRROR_OFFSET + RECORD_LEN as u64 && file.read_exact_at(&mut whole, 0).is_ok() {
        return SlotBytes::Copies(Box::new([0, MIRROR_OFFSET].map(|at| {
            let at = at as usize;
            Ok(whole[at..at + RECORD_LEN]
                .try_into()
                .expect("a record's length"))
        })));
    }
    SlotBytes::Copies(Box::new([0, MIRROR_OFFSET].map(|at| {
        let mut bytes = [0u8; RECORD_LEN];
        if at + RECORD_LEN as u64 > len {
            return Err(format!("copy at {at}: the file is {len} bytes"));
        }
        file.read_exact_at(&mut bytes, at)
            .map(|()| bytes)
            .map_err(|e| format!("copy at {at} unreadable: {e}"))
    })))
}

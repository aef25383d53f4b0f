//! Stored consumer offsets of one partition: one small checksummed file per consumer under
//! `offsets/consumers/` (and `offsets/groups/` for consumer groups), named by the id in
//! decimal with no sign or leading zero.
//!
//! File layout, 32 bytes, little-endian:
//! `0 magic u32 | 4 version u16 | 6 kind u16 | 8 id u32 | 12 reserved u32 (zero) |
//!  16 offset u64 | 24 checksum u64 = xxh3_64 of bytes 0..24, seeded with the partition's
//!  owner value ([`owner`]: its stream, topic and partition ids and creation nonce)`.
//!
//! The seed binds a file to its partition: a write that lands in the wrong file (a
//! misdirected write carrying another partition's offset for the same consumer) reads as
//! damaged, never as that partition's offset.
//!
//! A store writes `{id}.tmp` and renames it over `{id}`; under `persisted` the file is synced
//! before the rename and the directory after it, before success. A shard's stores into
//! existing files share that directory sync: [`ConsumerOffsets::store_pending`] replaces
//! and syncs the file, and [`ConsumerOffsets::settle`] syncs the directories once for all
//! of a round's, before any is answered (until then reads show the value before). Under `replicated` a
//! store into a file the same process created that way and never synced rewrites it in
//! place ([`write_in_place`]: one 32-byte write). Repairs made by recovery
//! (lowering an offset beyond a lost tail, dropping a damaged `replicated` offset) are always
//! durable, whatever the policy. Boot reads the files in [`super::recovery`]; this module
//! serves them afterwards. A damaged file is reported on every read of that consumer, never
//! reset to zero.

use super::superblock::PartitionIdentity;
use crate::config::Durability;
use crate::env::{Disk, OpenMode};
use crate::format::{get_u32, get_u64, put_u32, put_u64};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

pub const OFFSET_FILE_LEN: usize = 32;
const _: () = assert!(
    OFFSET_FILE_LEN == 24 + 8,
    "the layout above: the checksum follows the offset (16) as the last u64"
);
const OFFSET_MAGIC: u32 = u32::from_le_bytes(*b"CNOF");
const OFFSET_VERSION: u16 = 2;
/// Suffix of the file a store writes before renaming it over the offset file.
pub const TEMP_SUFFIX: &str = ".tmp";

/// Whose offset: a single consumer or a consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConsumerKind {
    Consumer,
    Group,
}

impl ConsumerKind {
    pub const ALL: [ConsumerKind; 2] = [ConsumerKind::Consumer, ConsumerKind::Group];

    /// The directory under `offsets/` holding this kind's files.
    pub fn dir(self) -> &'static str {
        match self {
            ConsumerKind::Consumer => "consumers",
            ConsumerKind::Group => "groups",
        }
    }
    fn code(self) -> u16 {
        match self {
            ConsumerKind::Consumer => 1,
            ConsumerKind::Group => 2,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ConsumerId {
    pub kind: ConsumerKind,
    pub id: u32,
}

impl ConsumerId {
    pub fn consumer(id: u32) -> Self {
        ConsumerId {
            kind: ConsumerKind::Consumer,
            id,
        }
    }
    pub fn group(id: u32) -> Self {
        ConsumerId {
            kind: ConsumerKind::Group,
            id,
        }
    }

    /// This consumer's contribution to the recorded set of stored offsets.
    pub fn set_member(&self) -> u64 {
        crate::partition::superblock::OffsetSet::member_hash(self.kind.code(), self.id)
    }

    /// The offset file of this consumer in the partition directory `dir`.
    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join("offsets")
            .join(self.kind.dir())
            .join(self.id.to_string())
    }
}

/// The id an offset file name stands for: exactly the decimal id (`"7"`, never `"+7"` or
/// `"007"`, so two files can never alias one consumer).
pub fn parse_name(name: &str) -> Option<u32> {
    name.parse::<u32>().ok().filter(|id| id.to_string() == name)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredOffset {
    Offset(u64),
    /// The file exists but does not verify; `why` names file and problem.
    Damaged {
        path: PathBuf,
        why: String,
    },
}

/// The value offset files of the partition `identity` are checksummed with.
pub fn owner(identity: &PartitionIdentity) -> u64 {
    let mut key = [0u8; 20];
    key[..4].copy_from_slice(&identity.stream_id.to_le_bytes());
    key[4..8].copy_from_slice(&identity.topic_id.to_le_bytes());
    key[8..12].copy_from_slice(&identity.partition_id.to_le_bytes());
    key[12..].copy_from_slice(&identity.nonce.to_le_bytes());
    xxh3_64(&key)
}

pub fn encode(owner: u64, consumer: ConsumerId, offset: u64) -> [u8; OFFSET_FILE_LEN] {
    let mut out = [0u8; OFFSET_FILE_LEN];
    put_u32(&mut out, 0, OFFSET_MAGIC);
    out[4..6].copy_from_slice(&OFFSET_VERSION.to_le_bytes());
    out[6..8].copy_from_slice(&consumer.kind.code().to_le_bytes());
    put_u32(&mut out, 8, consumer.id);
    put_u64(&mut out, 16, offset);
    let checksum = xxh3_64_with_seed(&out[..24], owner);
    put_u64(&mut out, 24, checksum);
    out
}

pub fn decode(owner: u64, consumer: ConsumerId, bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() != OFFSET_FILE_LEN {
        return Err(format!("{} bytes, expected {OFFSET_FILE_LEN}", bytes.len()));
    }
    let stored = get_u64(bytes, 24);
    let computed = xxh3_64_with_seed(&bytes[..24], owner);
    if stored != computed {
        return Err(format!(
            "checksum: stored {stored:#018x}, computed {computed:#018x} (damaged, or another partition's file)"
        ));
    }
    let magic = get_u32(bytes, 0);
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    let kind = u16::from_le_bytes([bytes[6], bytes[7]]);
    if magic != OFFSET_MAGIC || version != OFFSET_VERSION || get_u32(bytes, 12) != 0 {
        return Err("bad magic, version or reserved bytes".into());
    }
    if kind != consumer.kind.code() || get_u32(bytes, 8) != consumer.id {
        return Err(format!(
            "file names consumer kind {kind} id {}, expected kind {} id {}",
            get_u32(bytes, 8),
            consumer.kind.code(),
            consumer.id
        ));
    }
    Ok(get_u64(bytes, 16))
}

/// Reads and verifies one offset file (at most one byte more than a whole file is read).
pub fn read(disk: &dyn Disk, path: &Path, owner: u64, consumer: ConsumerId) -> StoredOffset {
    let read = disk.open(path, OpenMode::Read).and_then(|file| {
        let len = file.len()?.min(OFFSET_FILE_LEN as u64 + 1) as usize;
        let mut bytes = vec![0u8; len];
        file.read_exact_at(&mut bytes, 0)?;
        Ok(bytes)
    });
    match read
        .map_err(|e| format!("unreadable: {e}"))
        .and_then(|bytes| decode(owner, consumer, &bytes))
    {
        Ok(offset) => StoredOffset::Offset(offset),
        Err(why) => StoredOffset::Damaged {
            path: path.to_path_buf(),
            why,
        },
    }
}

/// Writes `{path}.tmp` and renames it over `path`; when `durable`, syncs the file before the
/// rename and the directory after it.
pub fn write(
    disk: &dyn Disk,
    path: &Path,
    owner: u64,
    consumer: ConsumerId,
    offset: u64,
    durable: bool,
) -> io::Result<()> {
    replace(disk, path, (owner, consumer, offset), durable)?;
    if durable {
        disk.sync_dir(parent(path))?;
    }
    Ok(())
}

/// Writes `{path}.tmp` (synced when `sync`) and renames it over `path`; the directory is the
/// caller's to sync.
fn replace(
    disk: &dyn Disk,
    path: &Path,
    (owner, consumer, offset): (u64, ConsumerId, u64),
    sync: bool,
) -> io::Result<()> {
    let _span = tracing::debug_span!("store_offset", path = %path.display(), offset).entered();
    let tmp = temp_path(path);
    // Never truncated first: truncating a file to zero marks it, on ext4 (`auto_da_alloc`),
    // for writeback at its close, a device write per store. Every temp holds one whole
    // record or a prefix of one (only this function writes it, always all 32 bytes, and
    // boot removes any an interrupted store left), so this write covers it.
    let file = disk.open(&tmp, OpenMode::CreateOrOpen)?;
    file.write_all_at(&[io::IoSlice::new(&encode(owner, consumer, offset))], 0)?;
    if sync {
        file.sync_data()?;
    }
    drop(file);
    disk.rename(&tmp, path)
}

/// Rewrites the offset file at `path`, which exists, in place: one 32-byte write at its
/// start, inside one sector, never synced (a `replicated` store into a file this process
/// created and never synced, [`ConsumerOffsets::store`]). Sector-atomic writes are
/// the device assumption (`docs/design.md`, "Device"); a write torn anyway reads as damaged,
/// which boot drops like any damaged `replicated` offset, a store the policy never promised.
/// `NotFound` when the file is gone.
pub fn write_in_place(
    disk: &dyn Disk,
    path: &Path,
    owner: u64,
    consumer: ConsumerId,
    offset: u64,
) -> io::Result<()> {
    let _span =
        tracing::debug_span!("store_offset_in_place", path = %path.display(), offset).entered();
    let file = disk.open(path, OpenMode::ReadWrite)?;
    file.write_all_at(&[io::IoSlice::new(&encode(owner, consumer, offset))], 0)
}

/// Removes an offset file; when `durable`, syncs its directory after.
pub fn remove(disk: &dyn Disk, path: &Path, durable: bool) -> io::Result<()> {
    let _span = tracing::debug_span!("remove_offset", path = %path.display()).entered();
    disk.remove_file(path)?;
    if durable {
        disk.sync_dir(parent(path))?;
    }
    Ok(())
}

pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().expect("offset file name").to_os_string();
    name.push(TEMP_SUFFIX);
    path.with_file_name(name)
}

fn parent(path: &Path) -> &Path {
    path.parent().expect("an offset file has a directory")
}

/// The offsets of one open partition (loaded by recovery).
pub struct ConsumerOffsets {
    dir: PathBuf,
    owner: u64,
    entries: BTreeMap<ConsumerId, StoredOffset>,
    /// Files written without a sync since the last [`ConsumerOffsets::sync`] (at most one
    /// per consumer: bounded by [`MAX_CONSUMER_OFFSETS`]), and whether a directory changed
    /// unsynced (a rename or a removal).
    unsynced: BTreeSet<ConsumerId>,
    dirs_unsynced: bool,
    /// `persisted` stores of existing members replaced and synced, their directory not yet
    /// ([`Self::store_pending`]): not shown until [`Self::settle`] (at most one per
    /// consumer).
    pending: BTreeMap<ConsumerId, u64>,
}

/// Most consumers (single consumers and groups together) with a stored offset in one
/// partition: each is a file and a map entry, read again at every boot.
pub const MAX_CONSUMER_OFFSETS: usize = 10_000;

impl ConsumerOffsets {
    /// The offsets of the partition in `dir`, as recovery left them.
    pub fn new(dir: &Path, owner: u64, entries: BTreeMap<ConsumerId, StoredOffset>) -> Self {
        ConsumerOffsets {
            dir: dir.to_path_buf(),
            owner,
            entries,
            unsynced: BTreeSet::new(),
            dirs_unsynced: false,
            pending: BTreeMap::new(),
        }
    }

    pub fn get(&self, consumer: ConsumerId) -> Option<&StoredOffset> {
        self.entries.get(&consumer)
    }

    /// Consumers with a stored offset (damaged ones included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ConsumerId, &StoredOffset)> {
        self.entries.iter()
    }

    pub fn store(
        &mut self,
        disk: &dyn Disk,
        consumer: ConsumerId,
        offset: u64,
        durability: Durability,
    ) -> io::Result<()> {
        let path = consumer.path(&self.dir);
        let durable = durability == Durability::Persisted;
        // Under `replicated` an offset this process already wrote unsynced is rewritten in
        // place: no temp, no rename. Only into a file this process created (by the rename
        // below) and never synced: a file that holds a value on the device (one a boot
        // served, one a checkpoint synced) is replaced, never overwritten, so a power loss
        // after a crash can never bring that older value back as the stored one. (The
        // kernel may still write an unsynced value of this file back on its own: boot syncs
        // every `replicated` offset file it serves, `RecoveryPlan::sync_offsets`.)
        let rewritten = !durable
            && self.unsynced.contains(&consumer)
            && match write_in_place(disk, &path, self.owner, consumer, offset) {
                Ok(()) => true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => return Err(e),
            };
        if !rewritten {
            write(disk, &path, self.owner, consumer, offset, durable)?;
            self.dirs_unsynced |= !durable;
        }
        if !durable {
            self.unsynced.insert(consumer);
        }
        // Replaced the pending store: under `persisted` (the only policy a store waits
        // under) its directory sync covered that one's rename too.
        self.pending.remove(&consumer);
        self.entries.insert(consumer, StoredOffset::Offset(offset));
        Ok(())
    }

    /// A `persisted` store into `consumer`'s existing file whose directory sync is left to
    /// [`Self::settle`]: the file replaced by a synced temp, the rename not yet durable.
    /// Reads show the value before until then.
    pub fn store_pending(
        &mut self,
        disk: &dyn Disk,
        consumer: ConsumerId,
        offset: u64,
    ) -> io::Result<()> {
        assert!(
            self.entries.contains_key(&consumer),
            "only a member's existing file waits for its directory sync"
        );
        let path = consumer.path(&self.dir);
        replace(disk, &path, (self.owner, consumer, offset), true)?;
        self.pending.insert(consumer, offset);
        Ok(())
    }

    /// Syncs the directories of the stores pending since the last call, once each, and
    /// shows them. On an error none is shown (its partition fences on it).
    pub fn settle(&mut self, disk: &dyn Disk) -> io::Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let kinds: BTreeSet<ConsumerKind> = pending.keys().map(|c| c.kind).collect();
        let _span = tracing::debug_span!("settle_offsets", dir = %self.dir.display(), stores = pending.len()).entered();
        for kind in kinds {
            disk.sync_dir(&self.dir.join("offsets").join(kind.dir()))?;
        }
        for (consumer, offset) in pending {
            self.entries.insert(consumer, StoredOffset::Offset(offset));
        }
        Ok(())
    }

    /// Whether stores wait for [`Self::settle`].
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Returns whether an offset was stored.
    pub fn delete(
        &mut self,
        disk: &dyn Disk,
        consumer: ConsumerId,
        durability: Durability,
    ) -> io::Result<bool> {
        if !self.entries.contains_key(&consumer) {
            return Ok(false);
        }
        let durable = durability == Durability::Persisted;
        remove(disk, &consumer.path(&self.dir), durable)?;
        self.unsynced.remove(&consumer);
        self.pending.remove(&consumer);
        self.dirs_unsynced |= !durable;
        self.entries.remove(&consumer);
        Ok(true)
    }

    /// Syncs every file written unsynced since the last call, then the directories that
    /// name them: a cluster member's checkpoint of the partition, after which its group
    /// no longer holds the writes in its log.
    pub fn sync(&mut self, disk: &dyn Disk) -> io::Result<()> {
        let _span = tracing::debug_span!("sync_offsets", dir = %self.dir.display()).entered();
        for consumer in std::mem::take(&mut self.unsynced) {
            disk.open(&consumer.path(&self.dir), OpenMode::Read)?
                .sync_data()?;
        }
        if std::mem::take(&mut self.dirs_unsynced) {
            for kind in ConsumerKind::ALL {
                match disk.sync_dir(&self.dir.join("offsets").join(kind.dir())) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    synced => synced?,
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_plain_decimal_name_is_an_offset_file() {
        assert_eq!(parse_name("7"), Some(7));
        assert_eq!(parse_name("0"), Some(0));
        assert_eq!(parse_name("4294967295"), Some(u32::MAX));
        for alias in [
            "+7",
            "07",
            "007",
            " 7",
            "7 ",
            "4294967296",
            "",
            "7.tmp",
            "x",
        ] {
            assert_eq!(parse_name(alias), None, "{alias:?}");
        }
    }
}

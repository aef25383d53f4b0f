//! Stored consumer offsets of one partition: one small checksummed file per consumer under
//! `offsets/consumers/` (and `offsets/groups/` for consumer groups).
//!
//! File layout, 32 bytes, little-endian:
//! `0 magic u32 | 4 version u16 | 6 kind u16 | 8 id u32 | 12 reserved u32 (zero) |
//!  16 offset u64 | 24 checksum u64 = xxh3_64(bytes 0..24)`.
//!
//! A store writes `{id}.tmp`, renames it over `{id}`; under `persisted` the file is synced
//! before the rename and the directory after it, before success. A damaged file is reported
//! on every read of that consumer, never reset to zero.

use crate::config::Durability;
use crate::env::{Disk, OpenMode};
use crate::format::{get_u32, get_u64, put_u32, put_u64};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_64;

pub const OFFSET_FILE_LEN: usize = 32;
const OFFSET_MAGIC: u32 = u32::from_le_bytes(*b"CNOF");
const OFFSET_VERSION: u16 = 1;

/// Whose offset: a single consumer or a consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConsumerKind {
    Consumer,
    Group,
}

impl ConsumerKind {
    fn dir(self) -> &'static str {
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

pub fn encode(consumer: ConsumerId, offset: u64) -> [u8; OFFSET_FILE_LEN] {
    let mut out = [0u8; OFFSET_FILE_LEN];
    put_u32(&mut out, 0, OFFSET_MAGIC);
    out[4..6].copy_from_slice(&OFFSET_VERSION.to_le_bytes());
    out[6..8].copy_from_slice(&consumer.kind.code().to_le_bytes());
    put_u32(&mut out, 8, consumer.id);
    put_u64(&mut out, 16, offset);
    let checksum = xxh3_64(&out[..24]);
    put_u64(&mut out, 24, checksum);
    out
}

pub fn decode(consumer: ConsumerId, bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() != OFFSET_FILE_LEN {
        return Err(format!("{} bytes, expected {OFFSET_FILE_LEN}", bytes.len()));
    }
    let stored = get_u64(bytes, 24);
    let computed = xxh3_64(&bytes[..24]);
    if stored != computed {
        return Err(format!(
            "checksum: stored {stored:#018x}, computed {computed:#018x}"
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

/// The offsets of one partition, loaded at open.
pub struct ConsumerOffsets {
    dir: PathBuf,
    entries: BTreeMap<ConsumerId, StoredOffset>,
}

impl ConsumerOffsets {
    /// Loads every offset file; removes leftover `.tmp` files of interrupted stores. Under
    /// `persisted`, syncs the directories afterwards: a store interrupted between its rename
    /// and its directory sync may be visible, and what recovery serves must stay served.
    pub fn load(disk: &dyn Disk, partition_dir: &Path, durability: Durability) -> io::Result<Self> {
        let dir = partition_dir.join("offsets");
        let mut entries = BTreeMap::new();
        for kind in [ConsumerKind::Consumer, ConsumerKind::Group] {
            let kind_dir = dir.join(kind.dir());
            for entry in disk.read_dir(&kind_dir)? {
                let path = kind_dir.join(&entry.name);
                if entry.name.ends_with(".tmp") {
                    disk.remove_file(&path)?;
                    continue;
                }
                let Ok(id) = entry.name.parse::<u32>() else {
                    tracing::warn!(path = %path.display(), "ignoring unknown file in offsets");
                    continue;
                };
                let consumer = ConsumerId { kind, id };
                let read = disk.open(&path, OpenMode::Read).and_then(|file| {
                    let len = file.len()?.min(OFFSET_FILE_LEN as u64 + 1) as usize;
                    let mut bytes = vec![0u8; len];
                    file.read_exact_at(&mut bytes, 0)?;
                    Ok(bytes)
                });
                let stored = match read
                    .map_err(|e| format!("unreadable: {e}"))
                    .and_then(|bytes| decode(consumer, &bytes))
                {
                    Ok(offset) => StoredOffset::Offset(offset),
                    Err(why) => {
                        tracing::error!(path = %path.display(), %why, "damaged consumer offset");
                        StoredOffset::Damaged { path, why }
                    }
                };
                entries.insert(consumer, stored);
            }
            if durability == Durability::Persisted {
                disk.sync_dir(&kind_dir)?;
            }
        }
        Ok(ConsumerOffsets { dir, entries })
    }

    pub fn get(&self, consumer: ConsumerId) -> Option<&StoredOffset> {
        self.entries.get(&consumer)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ConsumerId, &StoredOffset)> {
        self.entries.iter()
    }

    /// Lowers every stored offset above `last_offset` to it, or deletes it when the log is
    /// empty (after recovery lost a `replicated` tail), and writes the change: a consumer must
    /// not later skip new messages that reuse the lost offsets. Returns what changed.
    pub fn clamp_to(
        &mut self,
        disk: &dyn Disk,
        last_offset: Option<u64>,
        durability: Durability,
    ) -> io::Result<Vec<(ConsumerId, u64, Option<u64>)>> {
        let above: Vec<(ConsumerId, u64)> = self
            .entries
            .iter()
            .filter_map(|(consumer, stored)| match stored {
                StoredOffset::Offset(offset) if last_offset.is_none_or(|last| *offset > last) => {
                    Some((*consumer, *offset))
                }
                _ => None,
            })
            .collect();
        let mut changed = Vec::with_capacity(above.len());
        for (consumer, offset) in above {
            match last_offset {
                Some(last) => self.store(disk, consumer, last, durability)?,
                None => {
                    self.delete(disk, consumer, durability)?;
                }
            }
            changed.push((consumer, offset, last_offset));
        }
        Ok(changed)
    }

    fn path(&self, consumer: ConsumerId) -> PathBuf {
        self.dir
            .join(consumer.kind.dir())
            .join(consumer.id.to_string())
    }

    pub fn store(
        &mut self,
        disk: &dyn Disk,
        consumer: ConsumerId,
        offset: u64,
        durability: Durability,
    ) -> io::Result<()> {
        let path = self.path(consumer);
        let _span = tracing::debug_span!("store_offset", path = %path.display(), offset).entered();
        let tmp = path.with_extension("tmp");
        let file = disk.open(&tmp, OpenMode::CreateOrOpen)?;
        file.set_len(0)?;
        file.write_all_at(&[io::IoSlice::new(&encode(consumer, offset))], 0)?;
        if durability == Durability::Persisted {
            file.sync_data()?;
        }
        drop(file);
        disk.rename(&tmp, &path)?;
        if durability == Durability::Persisted {
            disk.sync_dir(path.parent().expect("offset file has a directory"))?;
        }
        self.entries.insert(consumer, StoredOffset::Offset(offset));
        Ok(())
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
        let path = self.path(consumer);
        disk.remove_file(&path)?;
        self.entries.remove(&consumer);
        if durability == Durability::Persisted {
            disk.sync_dir(path.parent().expect("offset file has a directory"))?;
        }
        Ok(true)
    }
}

//! The fault vocabulary: the kinds of fault and of their effects, the record of each that
//! fired and the damage it left, the per-call intensities, the fates a power loss deals, the
//! faults a directed scenario scripts; and how the disk fires them (a record, a roll, a
//! scripted fault taken, a misdirected or torn write).

use super::dirs::Node;
use super::pages::FileState;
use super::{State, SECTOR};
use rand::Rng;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The kinds of injected faults and of their effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    ProcessCrash,
    PowerLoss,
    /// A write in flight at a crash landed partly (each sector old or new).
    TornWrite,
    /// A non-atomic device garbled a whole sector at a crash, unchanged bytes too.
    NonAtomicTear,
    /// At a power loss, a page never synced did not land (or landed torn).
    LostPage,
    /// At a power loss, a page a lying sync had claimed durable did not land.
    LostSyncedPage,
    /// At a power loss, an unsynced directory change did not persist.
    LostDirEntry,
    /// At a power loss, a directory change a lying `sync_dir` had claimed did not persist.
    LostSyncedDirEntry,
    LyingSync,
    LyingDirSync,
    WriteError,
    SyncError,
    DirSyncError,
    NoSpace,
    BitFlip,
    ReadError,
    MisdirectedWrite,
    /// Bytes of a file replaced by something outside the node (an operator, a restore of
    /// another copy): used by directed scenarios for rules no device fault reaches.
    Overwritten,
    ClockJump,
}

impl FaultKind {
    pub const ALL: [FaultKind; 19] = [
        FaultKind::ProcessCrash,
        FaultKind::PowerLoss,
        FaultKind::TornWrite,
        FaultKind::NonAtomicTear,
        FaultKind::LostPage,
        FaultKind::LostSyncedPage,
        FaultKind::LostDirEntry,
        FaultKind::LostSyncedDirEntry,
        FaultKind::LyingSync,
        FaultKind::LyingDirSync,
        FaultKind::WriteError,
        FaultKind::SyncError,
        FaultKind::DirSyncError,
        FaultKind::NoSpace,
        FaultKind::BitFlip,
        FaultKind::ReadError,
        FaultKind::MisdirectedWrite,
        FaultKind::Overwritten,
        FaultKind::ClockJump,
    ];
}

/// One fault that fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRecord {
    pub kind: FaultKind,
    pub path: Option<PathBuf>,
    /// The bytes of `path` it concerns, when it concerns bytes.
    pub range: Option<Range<u64>>,
    pub detail: String,
}

/// Bytes of a file an injected fault changed (or kept from changing), and where that change
/// is still present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub kind: FaultKind,
    pub range: Range<u64>,
    /// The damage is bytes that should be there and are not (a lost synced page, a failed
    /// writeback, a write that landed elsewhere): cutting the file does not heal it, only
    /// writing them does. Otherwise it is wrong bytes, gone once cut away.
    pub missing: bool,
    /// The index of its [`FaultRecord`].
    pub record: usize,
    /// Reads see it now.
    pub in_cache: bool,
    /// Reads see it once the cache is dropped.
    pub on_device: bool,
    /// It survives a power loss.
    pub durable: bool,
}

impl Damage {
    pub fn present(&self) -> bool {
        self.in_cache || self.on_device || self.durable
    }
}

/// Fault intensities of the disk (probabilities per call; `None` = off).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DiskFaults {
    pub lying_sync: Option<f64>,
    pub lying_dir_sync: Option<f64>,
    pub write_error: Option<f64>,
    pub sync_error: Option<f64>,
    pub dir_sync_error: Option<f64>,
    pub misdirected_write: Option<f64>,
    /// Bytes of file data the device holds; growing past it fails with ENOSPC.
    pub capacity: Option<u64>,
    /// The device does not write sectors atomically: a torn sector is garbled whole.
    pub non_atomic: bool,
}

/// What a power loss does to unsynced pages and directory changes (random unless scripted).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Fates {
    #[default]
    Random,
    /// Every unsynced page and directory change lands.
    KeepAll,
    /// None does.
    DropAll,
    /// Unsynced pages of files, and directory changes of names, whose path ends with one of
    /// these are lost; everything else lands.
    DropOnly(Vec<String>),
    /// Every unsynced page lands torn (directory changes land).
    TearAll,
}

impl Fates {
    pub(super) fn drops(&self, path: Option<&Path>) -> Option<bool> {
        match self {
            Fates::Random => None,
            Fates::KeepAll | Fates::TearAll => Some(false),
            Fates::DropAll => Some(true),
            Fates::DropOnly(ends) => {
                let path = path
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Some(ends.iter().any(|end| path.ends_with(end.as_str())))
            }
        }
    }
}

/// A fault scripted for the next call that matches (directed scenarios).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scripted {
    /// The next `sync_data` of a file whose path contains this lies.
    LieOnSync(String),
    /// The next `sync_data` of a file whose path contains this fails with EIO.
    FailSync(String),
    /// The next `sync_dir` of this directory lies.
    LieOnDirSync(PathBuf),
    /// The next write to a file whose path contains `from` lands in `into` instead, at the
    /// same position.
    MisdirectWrite { from: String, into: PathBuf },
    /// The next mutating call on a path containing this crashes the node (lands partly).
    CrashOn(String),
    /// The next call of kind `call` on a path containing `part` crashes the node (the call
    /// does not happen): a crash placed between two steps of a protocol (a checkpoint's
    /// rename after its record, its journal cut after the rename, a deletion's unlinks).
    CrashOnCall { call: Call, part: String },
    /// The next write to a file whose path contains this lands whole, then the node crashes
    /// (before whatever sync was to follow).
    CrashAfterWrite(String),
    /// The next `sync_dir` of exactly this directory crashes the node (the sync does not
    /// happen); the files under it are never matched.
    CrashOnDirSync(PathBuf),
}

/// The kinds of mutating call a scripted crash can wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Write,
    Sync,
    SetLen,
    Rename,
    Remove,
    Other,
}

impl State {
    pub(super) fn record(
        &mut self,
        kind: FaultKind,
        path: Option<&Path>,
        range: Option<Range<u64>>,
        detail: String,
    ) -> usize {
        self.records.push(FaultRecord {
            kind,
            path: path.map(Path::to_path_buf),
            range,
            detail,
        });
        self.records.len() - 1
    }

    /// Records a fault that damaged bytes of `inode`, present in the given layers.
    pub(super) fn damage(
        &mut self,
        inode: u64,
        kind: FaultKind,
        range: Range<u64>,
        detail: String,
        layers: (bool, bool, bool),
    ) {
        let path = self.path_of(inode);
        let record = self.record(kind, path.as_deref(), Some(range.clone()), detail.clone());
        let missing = matches!(kind, FaultKind::LostSyncedPage | FaultKind::SyncError)
            || (kind == FaultKind::MisdirectedWrite && detail.ends_with("never landed"));
        if let Some(file) = self.files.get_mut(&inode) {
            file.damage.push(Damage {
                kind,
                range,
                missing,
                record,
                in_cache: layers.0,
                on_device: layers.1,
                durable: layers.2,
            });
        }
    }

    pub(super) fn roll(&mut self, p: Option<f64>) -> bool {
        match p {
            Some(p) if p > 0.0 => self.rng.gen_bool(p.min(1.0)),
            _ => false,
        }
    }

    /// Takes the first scripted fault `matches` accepts.
    pub(super) fn take_scripted(
        &mut self,
        matches: impl Fn(&Scripted) -> bool,
    ) -> Option<Scripted> {
        let at = self.scripted.iter().position(matches)?;
        Some(self.scripted.remove(at))
    }

    /// A random file under `under` whose state satisfies `wanted`.
    pub(super) fn pick_file(
        &mut self,
        under: &Path,
        wanted: impl Fn(&FileState) -> bool,
    ) -> Option<(PathBuf, u64)> {
        let candidates: Vec<(PathBuf, u64)> = self
            .names
            .iter()
            .filter(|(p, _)| p.starts_with(under))
            .filter_map(|(p, n)| match n {
                Node::File(i) if wanted(&self.files[i]) => Some((p.clone(), *i)),
                _ => None,
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some(candidates[self.rng.gen_range(0..candidates.len())].clone())
    }

    /// A write whose target a device mixed up: another position, or another file.
    pub(super) fn misdirect(&mut self, inode: u64, pos: u64) -> Option<(u64, u64)> {
        let path = self.path_of(inode)?;
        let scripted_into = self.take_scripted(|s| {
            matches!(s, Scripted::MisdirectWrite { from, .. } if path.to_string_lossy().contains(from.as_str()))
        });
        if let Some(Scripted::MisdirectWrite { into, .. }) = scripted_into {
            return match self.names.get(&into) {
                Some(Node::File(target)) => Some((*target, pos)),
                _ => None,
            };
        }
        if !self.roll(self.faults.misdirected_write) {
            return None;
        }
        let root: PathBuf = path.components().take(2).collect();
        if self.rng.gen_bool(0.5) {
            if let Some((_, target)) = self.pick_file(&root, |_| true) {
                if target != inode {
                    return Some((target, pos));
                }
            }
        }
        let shift = SECTOR * self.rng.gen_range(1..16u64);
        let at = if self.rng.gen_bool(0.5) || pos < shift {
            pos + shift
        } else {
            pos - shift
        };
        Some((inode, at))
    }

    /// The bytes a crash lets land of an interrupted write: each sector old or new, or, on a
    /// non-atomic device, one sector garbled whole (its unchanged bytes too).
    pub(super) fn torn_write(&mut self, inode: u64, pos: u64, bytes: &[u8]) {
        let path = self.path_of(inode);
        let end = pos + bytes.len() as u64;
        let mut landed = 0;
        let mut sector = pos - pos % SECTOR;
        while sector < end {
            let from = sector.max(pos);
            let to = (sector + SECTOR).min(end);
            if self.rng.gen_bool(0.5) {
                let slice = &bytes[(from - pos) as usize..(to - pos) as usize];
                self.files.get_mut(&inode).expect("file").write(from, slice);
                landed += to - from;
            }
            sector += SECTOR;
        }
        self.record(
            FaultKind::TornWrite,
            path.as_deref(),
            Some(pos..end),
            format!("{landed} of {} bytes landed, sector by sector", bytes.len()),
        );
        if self.faults.non_atomic && !bytes.is_empty() {
            let sectors = (end - 1) / SECTOR - pos / SECTOR + 1;
            let garbled = (pos / SECTOR + self.rng.gen_range(0..sectors)) * SECTOR;
            let garbage: Vec<u8> = (0..SECTOR).map(|_| self.rng.gen()).collect();
            let file = self.files.get_mut(&inode).expect("file");
            let stop = (garbled + SECTOR).min(file.data.len().max(end as usize) as u64);
            let garbage = &garbage[..(stop - garbled) as usize];
            file.write(garbled, garbage);
            self.damage(
                inode,
                FaultKind::NonAtomicTear,
                garbled..stop,
                "a torn write garbled the whole sector".into(),
                (true, false, false),
            );
        }
    }
}

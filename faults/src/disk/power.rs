//! The power-loss algorithm: each directory keeps a prefix of its unsynced changes; each file
//! is rebuilt from its durable bytes and the fate of every dirty or lied page (kept, dropped
//! or torn at sectors), and the damage it carries is re-judged against what survived.

use super::dirs::{DirOp, Names, Node};
use super::pages::{byte_range, copy_page, pages_of};
use super::{Fates, FaultKind, State, PAGE, SECTOR};
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The namespace after a power loss: each directory keeps a prefix of its unsynced changes.
pub(super) fn power_loss_names(s: &mut State) {
    let pending = std::mem::take(&mut s.pending);
    for (dir, ops) in pending {
        let name_of = |op: &DirOp| match op {
            DirOp::Link(p, _) | DirOp::Unlink(p) | DirOp::UnlinkDir(p, _) => p.clone(),
            DirOp::Rename(_, to, _) => to.clone(),
        };
        // An honest device commits directory changes in order: a prefix lands. Changes a
        // lying `sync_dir` claimed sit in a device cache that reorders: each may be lost.
        let mut kept = Vec::with_capacity(ops.len());
        let prefix = match s.fates.drops(None) {
            Some(true) => 0,
            Some(false) => ops.len(),
            None => s.rng.gen_range(0..=ops.len()),
        };
        for (i, op) in ops.iter().enumerate() {
            let keep = match s.fates.drops(Some(&name_of(&op.op))) {
                Some(dropped) if s.fates != Fates::Random => !dropped,
                _ => i < prefix && !(op.promised && s.rng.gen_bool(0.5)),
            };
            kept.push(keep);
        }
        if let Fates::DropOnly(_) = s.fates {
            // A scripted loss keeps order too: nothing after a lost change lands.
            if let Some(first_lost) = kept.iter().position(|k| !k) {
                let promised_tail = ops[first_lost..].iter().all(|op| op.promised);
                if !promised_tail {
                    kept[first_lost..].iter_mut().for_each(|k| *k = false);
                }
            }
        }
        for (op, keep) in ops.iter().zip(&kept) {
            if *keep {
                s.apply_durably(&op.op);
                continue;
            }
            let name = name_of(&op.op);
            let kind = if op.promised {
                FaultKind::LostSyncedDirEntry
            } else {
                FaultKind::LostDirEntry
            };
            let record = s.record(
                kind,
                Some(&name),
                None,
                format!("in {}: {:?}", dir.display(), op.op),
            );
            if op.promised {
                s.lost_synced_names.push((name, record));
            }
        }
    }
    // Children of directories that no longer exist are gone.
    let all: Vec<PathBuf> = s.durable_names.keys().cloned().collect();
    for path in all {
        let orphan = path
            .ancestors()
            .skip(1)
            .take_while(|a| !a.as_os_str().is_empty() && *a != Path::new("/"))
            .any(|a| !matches!(s.durable_names.get(a), Some(Node::Dir(_))));
        if orphan {
            s.durable_names.remove(&path);
        }
    }
    s.names = Names::from_map(s.durable_names.clone());
}

/// The fate of one unsynced page at a power loss.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum PageFate {
    Kept,
    Dropped,
    Torn,
}

/// Rebuilds one file from its durable bytes and the fate of every dirty or lied page.
pub(super) fn power_loss_file(s: &mut State, inode: u64) {
    let mut file = s.files.remove(&inode).expect("file");
    let path = s.path_of(inode);
    let dropped = s.fates.drops(path.as_deref());
    let len = match dropped {
        _ if !file.len_dirty => file.durable.len(),
        Some(true) => file.durable.len(),
        Some(false) => file.data.len(),
        None if s.rng.gen_bool(0.5) => file.data.len(),
        None => file.durable.len(),
    };
    let mut image = file.durable.clone();
    image.resize(len, 0);
    let mut fates: BTreeMap<u64, PageFate> = BTreeMap::new();
    let unsettled: BTreeSet<u64> = file.dirty.union(&file.lied).copied().collect();
    let mut garbled = Vec::new();
    let mut lost = Vec::new();
    for &page in &unsettled {
        let lied_only = file.lied.contains(&page) && !file.dirty.contains(&page);
        let source = if lied_only { &file.device } else { &file.data };
        // The bytes this page was meant to hold (beyond the surviving length they are lost).
        let meant = byte_range(page, source.len());
        if meant.is_empty() {
            continue;
        }
        let range = byte_range(page, len);
        let fate = match dropped {
            _ if s.fates == Fates::TearAll => PageFate::Torn,
            Some(false) => PageFate::Kept,
            Some(true) => PageFate::Dropped,
            None => match s.rng.gen_range(0..10) {
                0..=4 => PageFate::Kept,
                5..=7 => PageFate::Dropped,
                _ => PageFate::Torn,
            },
        };
        fates.insert(page, fate);
        match fate {
            PageFate::Kept => copy_page(&mut image, source, page),
            PageFate::Dropped => {}
            PageFate::Torn => {
                let mut sector = range.start;
                while sector < range.end {
                    let end = (sector + SECTOR as usize).min(range.end);
                    if s.rng.gen_bool(0.5) {
                        for (i, byte) in image.iter_mut().enumerate().take(end).skip(sector) {
                            *byte = source.get(i).copied().unwrap_or(0);
                        }
                    }
                    sector = end;
                }
                if s.faults.non_atomic && !range.is_empty() {
                    let sectors = (range.end - range.start).div_ceil(SECTOR as usize);
                    let at = range.start + s.rng.gen_range(0..sectors) * SECTOR as usize;
                    let end = (at + SECTOR as usize).min(len);
                    for byte in &mut image[at..end] {
                        *byte = s.rng.gen();
                    }
                    garbled.push(at as u64..end as u64);
                }
            }
        }
        let landed = meant
            .clone()
            .all(|i| image.get(i).copied() == Some(source[i]));
        if !landed {
            lost.push((page, meant, file.lied.contains(&page)));
        }
    }
    let old_durable_len = file.durable.len() as u64;
    for damage in &mut file.damage {
        // A write that grew the file leaves its mark if the new length survives, whatever
        // became of its bytes.
        let grew = damage.range.end > old_durable_len
            && len as u64 > old_durable_len
            && damage.range.start < len as u64
            && (damage.in_cache || damage.durable);
        let pages = pages_of(&damage.range);
        // A page past the surviving length keeps nothing, whatever its fate.
        let fate_of = |p: u64| match fates.get(&p) {
            Some(_) if p * PAGE >= len as u64 => Some(PageFate::Dropped),
            fate => fate.copied(),
        };
        let from_cache = pages.clone().all(|p| fate_of(p) == Some(PageFate::Kept));
        let from_durable = pages
            .clone()
            .all(|p| matches!(fate_of(p), None | Some(PageFate::Dropped)));
        let present = if from_cache {
            damage.in_cache
        } else if from_durable {
            damage.durable
        } else {
            damage.in_cache || damage.durable
        };
        let present = (present || grew) && (damage.missing || damage.range.start < len as u64);
        damage.in_cache = present;
        damage.on_device = present;
        damage.durable = present;
    }
    file.data = image.clone();
    file.device = image.clone();
    file.durable = image;
    file.dirty.clear();
    file.lied.clear();
    file.len_dirty = false;
    // A new kernel: no writeback error is remembered.
    file.unreported_error = false;
    file.promised_len = file.promised_len.min(len as u64);
    s.files.insert(inode, file);
    for (page, range, promised) in lost {
        let kind = if promised {
            FaultKind::LostSyncedPage
        } else {
            FaultKind::LostPage
        };
        let range = range.start as u64..range.end as u64;
        if promised {
            s.damage(
                inode,
                kind,
                range,
                format!("page {page}: a lying sync had claimed it"),
                (true, true, true),
            );
        } else {
            s.record(kind, path.as_deref(), Some(range), format!("page {page}"));
        }
    }
    for range in garbled {
        s.damage(
            inode,
            FaultKind::NonAtomicTear,
            range,
            "a torn page garbled a whole sector".into(),
            (true, true, true),
        );
    }
}

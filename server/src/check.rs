//! `cairn check <data-dir>`: every boot plan (the metadata's, the entity tree's, each
//! partition's recovery) made over a data directory and printed, applied to nothing. The
//! binary prints it to standard output; the simulator runs it on its simulated disk.

use cairn_engine::env::Disk;
use cairn_engine::metadata;
use cairn_engine::node::tree::{Fate, Found};
use cairn_engine::node::{self, state::DirWork};
use cairn_engine::partition::recovery::{self, RecoveryPlan};
use cairn_engine::partition::{ConsumerId, StoredOffset};
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

/// Prints the report; true when boot would change and refuse nothing.
pub fn report(disk: &dyn Disk, root: &Path, out: &mut dyn Write) -> io::Result<bool> {
    let meta = metadata::plan(disk, root)?;
    let meta_dir = root.join(metadata::DIR);
    if let Some(refusal) = &meta.refusal {
        writeln!(
            out,
            "{}: BOOT REFUSED ({}): {refusal}",
            meta_dir.display(),
            refusal.name()
        )?;
        for note in &meta.notes {
            writeln!(out, "  note: {note}")?;
        }
        return Ok(false);
    }
    if meta.first_boot {
        writeln!(
            out,
            "{}: no metadata yet: the first boot initialises it",
            root.display()
        )?;
        return Ok(true);
    }
    let mut clean = meta.actions.is_empty();
    let record = meta
        .record
        .expect("a plan past the first boot has a record");
    writeln!(
        out,
        "{}: {} (snapshot at op {}, {} journal entries after it, last op {})",
        meta_dir.display(),
        if meta.actions.is_empty() {
            "clean"
        } else {
            "would repair"
        },
        record.snapshot.op,
        meta.replayed.len(),
        meta.last_op
    )?;
    for note in &meta.notes {
        writeln!(out, "  note: {note}")?;
    }
    for action in &meta.actions {
        writeln!(out, "  would {action}")?;
    }
    if let Some(a) = &meta.adopting {
        clean = false;
        writeln!(
            out,
            "  would finish adopting the cluster's state after op {} (adopt.bin)",
            a.op
        )?;
    }
    let redo = node::work_to_finish(&meta);
    let works: Vec<&DirWork> = redo.iter().map(|(_, w)| w).collect();
    let redo_refs: Vec<(u64, &DirWork)> = redo.iter().map(|(op, w)| (*op, w)).collect();
    for (op, work) in &redo {
        writeln!(
            out,
            "  op {op} has directory work boot redoes by identity: {work:?}"
        )?;
    }
    let state = meta.adopting.as_ref().map_or(&meta.state, |a| &a.state);
    let tree = node::tree::plan(disk, root, state, &works)?;
    clean &= tree.is_clean();
    for note in &tree.notes {
        writeln!(out, "  note: {note}")?;
    }
    let mut opening = Vec::new();
    for path in &tree.paths {
        match path.fate {
            Fate::Open => opening.push(path),
            Fate::Nothing => {}
            Fate::Create => writeln!(
 out,
                "{}: would create the partition a journaled op made ({})",
                path.dir.display(),
                path.wanted.expect("a created partition is wanted")
            )?,
            Fate::Replace => writeln!(
 out,
                "{}: would remove {} (a journaled op replaced it) and create {}",
                path.dir.display(),
                path.found,
                path.wanted.expect("a replacement is wanted")
            )?,
            Fate::Remove => writeln!(
 out,
                "{}: would remove {}: a journaled op deleted it",
                path.dir.display(),
                path.found
            )?,
            Fate::Unaccounted => writeln!(
 out,
                "{}: KEPT (unaccounted): holds {}, which the metadata does not have and no journaled op deleted; boot never removes it",
                path.dir.display(),
                path.found
            )?,
        }
    }
    for dir in &tree.remove_dirs {
        writeln!(
            out,
            "{}: would remove: a journaled op deleted it",
            dir.display()
        )?;
    }
    for dir in &tree.kept_dirs {
        writeln!(
 out,
            "{}: KEPT (unaccounted): the metadata does not have this entity and its directory holds what no journaled op deleted",
            dir.display()
        )?;
    }
    let claimed: BTreeMap<_, _> = tree.claimed.iter().cloned().collect();
    for path in opening {
        let identity = path.wanted.expect("an opened partition is the metadata's");
        let key = path.key;
        if let Some(other) = claimed.get(&key) {
            clean = false;
            writeln!(
                out,
                "{}: FENCED (IdentityDuplicated): {} also holds this partition's identity",
                path.dir.display(),
                other.display()
            )?;
            continue;
        }
        if let Some(mark) = node::rebuild::pending(disk, &path.dir, identity.nonce)? {
            clean = false;
            let what = match mark {
                node::rebuild::Pending::Redo { start } => format!("would finish a cluster replica's rebuild cut short: remove what is there and create the partition empty from offset {start}, for its group to refill"),
                other => format!("would remove a rebuild mark that names nothing to redo ({other:?})"),
            };
            writeln!(out, "{}: {what}", path.dir.display())?;
            if matches!(mark, node::rebuild::Pending::Redo { .. }) {
                continue;
            }
        }
        if path.found == Found::Missing {
            clean = false;
            writeln!(
 out,"{}: FENCED (DirectoryMissing): the metadata has this partition and its directory is missing", path.dir.display())?;
            continue;
        }
        let topic = state.topic(key.0, key.1);
        let plan = recovery::plan(
            disk,
            &path.dir,
            identity,
            topic.options.consumer_offset_durability,
        )?;
        clean &= plan.fence.is_none() && plan.actions.is_empty();
        report_partition(&path.dir, &plan, out)?;
        if plan.fence.is_some() {
            continue;
        }
        let stored: Vec<ConsumerId> = plan.offsets.keys().copied().collect();
        for group in node::doomed_group_offsets(state, &redo_refs, key, &stored) {
            clean = false;
            writeln!(
                out,
                "  would remove the offset of consumer group {group}: the group no longer exists"
            )?;
        }
        for (consumer, stored) in &plan.offsets {
            if let StoredOffset::Damaged { path, why } = stored {
                clean = false;
                writeln!(
                    out,
                    "  DAMAGED offset of {consumer:?} ({}): {why}; a read of it is refused",
                    path.display()
                )?;
            }
        }
    }
    Ok(clean)
}

fn report_partition(dir: &Path, plan: &RecoveryPlan, out: &mut dyn Write) -> io::Result<()> {
    if let Some(reason) = &plan.fence {
        writeln!(
            out,
            "{}: FENCED ({}): {reason}",
            dir.display(),
            reason.name()
        )?;
    } else if plan.actions.is_empty() {
        writeln!(out, "{}: clean", dir.display())?;
    } else {
        writeln!(out, "{}: would repair", dir.display())?;
    }
    for note in &plan.notes {
        writeln!(out, "  note: {note}")?;
    }
    for action in &plan.actions {
        writeln!(out, "  would {action}")?;
    }
    for segment in &plan.segments {
        writeln!(
            out,
            "  {}: {} bytes, offsets {}..{}, {} index entries",
            segment.log_path.display(),
            segment.len,
            segment.start_offset,
            segment.next_offset,
            segment.index.len()
        )?;
    }
    for (consumer, stored) in &plan.offsets {
        writeln!(out, "  offset {consumer:?}: {stored:?}")?;
    }
    Ok(())
}

//! Directed scenarios of the read path (listed with the others in `super::directed`): what
//! a poll's read plan serves from damaged bytes.

use super::scenario::{topic, Scenario};
use super::World;
use crate::report::Violation;
use cairn_engine::config::Durability;
use cairn_engine::format::{BatchHeader, BATCH_HEADER_LEN, FRAME_HEADER_LEN};
use cairn_engine::partition::segment::{index_name, log_name};
use cairn_engine::partition::PollFrom;
use std::collections::BTreeSet;

/// A poll from inside a flushed write walks from the write's index entry and skips the
/// batches below its offset by their headers; the batch it stops at is verified before it is
/// served: rot in it fences the partition and the reply holds none of it.
pub(super) fn a_poll_that_skips_to_a_rotten_batch_serves_none_of_it_and_fences(
) -> Result<Vec<&'static str>, Violation> {
    let mut spec = topic(Durability::Persisted);
    spec.config.messages_required_to_save = 1024;
    spec.config.size_of_messages_required_to_save = 1024 * 1024;
    let s = Scenario::new(vec![spec]);
    let log = s.file(0, &log_name(0));
    let index = s.file(0, &index_name(0));
    // A batch that is not the first of its write (no index entry names its position).
    let unindexed = |s: &Scenario| -> Option<(u64, BatchHeader)> {
        let disk = s.disk();
        let entries = disk.contents(&index).expect("the index exists");
        let indexed: BTreeSet<u64> = entries
            .chunks_exact(24)
            .map(|e| u64::from_le_bytes(e[16..24].try_into().expect("8 bytes")))
            .collect();
        let bytes = disk.contents(&log).expect("the log exists");
        let mut position = 0u64;
        while (position as usize) < bytes.len() {
            let header = BatchHeader::decode(&bytes[position as usize..]).expect("a batch");
            if !indexed.contains(&position) {
                return Some((position, header));
            }
            position += header.batch_length;
        }
        None
    };
    let mut found = None;
    for _ in 0..32 {
        s.produce(0, 1)?;
        found = unindexed(&s);
        if found.is_some() {
            break;
        }
    }
    let (position, header) = found.expect("a group of two batches within 32 rounds");
    // A bit of the batch's first payload byte, durable and cached alike.
    let payload = position + (BATCH_HEADER_LEN + FRAME_HEADER_LEN) as u64;
    s.disk().flip_bit_at(&log, payload, 3);
    s.operate(0, move |w: &mut World, p| {
        w.poll_from(p, PollFrom::Offset(header.base_offset), 1000)
    })?;
    Ok(s.decision_log())
}

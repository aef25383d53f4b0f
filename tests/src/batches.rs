//! Appending batches to a partition the way most tests do (one batch per group, each
//! acknowledged) and the (offset, id) pairs they expect to read back.

use crate::{batch, message_id, read_all};
use bytes::BytesMut;
use cairn_engine::partition::{AppendAck, Partition};

/// Appends `batch` as a group of its own and returns its acknowledgement; panics if the
/// partition refuses it.
pub fn append_acked(partition: &mut Partition, batch: BytesMut) -> AppendAck {
    partition
        .append_group(vec![batch])
        .pop()
        .expect("one result per batch")
        .expect("the batch is acknowledged")
}

/// Appends one acknowledged group per seed of `seeds`, each [`batch`]`(seed, count, size)`.
pub fn append_seeds(
    partition: &mut Partition,
    seeds: std::ops::Range<u64>,
    count: usize,
    size: usize,
) -> Vec<AppendAck> {
    seeds
        .map(|seed| append_acked(partition, batch(seed, count, size)))
        .collect()
}

/// Every message of `partition` as (offset, id).
pub fn ids(partition: &mut Partition) -> Vec<(u64, u128)> {
    read_all(partition, 1000)
        .into_iter()
        .map(|(offset, id, _)| (offset, id))
        .collect()
}

/// The (offset, id) of every message of the acknowledged `(seed, ack)` batches, each of
/// `count` messages made by [`batch`].
pub fn acked_ids(acked: &[(u64, AppendAck)], count: usize) -> Vec<(u64, u128)> {
    acked
        .iter()
        .flat_map(|&(seed, ack)| {
            (0..count).map(move |i| (ack.base_offset + i as u64, message_id(seed, i)))
        })
        .collect()
}

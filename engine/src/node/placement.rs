//! Which shard owns each partition: a table, not a function of the ids. A partition is
//! placed on the least-loaded shard (the one owning the fewest partitions, the lowest index
//! on a tie) when boot opens it or when the metadata owner creates it. A hash of the ids put
//! both partitions of a 2-partition topic on one shard half the time; a sum of the ids
//! spreads fresh ids evenly but drifts as deletions leave holes (delete every other topic
//! and every survivor sits on one shard of two).
//!
//! A partition removed while its topic lives is *vacated*, not forgotten: it no longer
//! counts in its shard's load, but its key keeps the shard, so a partition made again under
//! that key (a partition count cut, then raised) lands where it was. The shard's state that
//! outlives a removal (the groups whose offsets it retired, `Shard::retired`, kept until the
//! topic goes) is then always on the shard a request for that key reaches. A topic's or a
//! stream's removal forgets its keys.
//!
//! The table is recorded in memory only. A shard is a part of one process, so a placement
//! means nothing to the next one: boot places the partitions it finds afresh, in key order,
//! which spreads them evenly over whatever number of shards this process runs (the shard
//! count may differ from the last run's). Nothing on disk names a shard.
//!
//! Every request is routed through [`Placement::of`]: the caller's read lock is held for one
//! lookup. A key that was never placed (a partition that does not exist) goes to the shard
//! its ids pick, which answers that it holds no such partition.
//!
//! Architecture Invariant: a partition that exists has exactly one placement, and the shard
//! named by it is the only one that holds the partition open (checked after every batch of
//! metadata work: `MetaOwner::check_partitions`).

use crate::state::PartitionKey;
use std::collections::BTreeMap;
use std::sync::RwLock;

/// The node's placement table (see the module).
#[derive(Debug)]
pub(crate) struct Placement {
    table: RwLock<Table>,
}

#[derive(Debug)]
struct Table {
    /// Each key's shard, and whether its partition exists (`false`: vacated).
    of: BTreeMap<PartitionKey, (u32, bool)>,
    /// Partitions that exist on each shard.
    loads: Vec<u32>,
}

impl Placement {
    pub(crate) fn new(shards: usize) -> Placement {
        assert!(
            (1..=u32::MAX as usize).contains(&shards),
            "a node has at least one shard"
        );
        Placement {
            table: RwLock::new(Table {
                of: BTreeMap::new(),
                loads: vec![0; shards],
            }),
        }
    }

    /// The shard that owns `key`: its placement, or for a key never placed the shard its
    /// ids pick ([`unplaced_shard`]).
    pub(crate) fn of(&self, key: PartitionKey) -> usize {
        let table = self.read();
        match table.of.get(&key) {
            Some(&(shard, _)) => shard as usize,
            None => unplaced_shard(key, table.loads.len()),
        }
    }

    /// Places `key`'s partition and returns its shard: a key placed already (vacated or
    /// not) keeps its shard; a new one goes to the least-loaded shard.
    pub(crate) fn place(&self, key: PartitionKey) -> usize {
        let mut table = self.write();
        if let Some(&(shard, live)) = table.of.get(&key) {
            if !live {
                table.loads[shard as usize] += 1;
                table.of.insert(key, (shard, true));
            }
            return shard as usize;
        }
        let (shard, _) = table
            .loads
            .iter()
            .enumerate()
            .min_by_key(|&(index, load)| (*load, index))
            .expect("a node has at least one shard");
        table.loads[shard] += 1;
        table.of.insert(key, (shard as u32, true));
        shard
    }

    /// `key`'s partition was removed while its topic lives: it leaves its shard's load and
    /// keeps its shard (see the module). Nothing for a key never placed.
    pub(crate) fn vacate(&self, key: PartitionKey) {
        let mut table = self.write();
        if let Some(&(shard, true)) = table.of.get(&key) {
            let load = &mut table.loads[shard as usize];
            assert!(*load > 0, "a placed partition counts in its shard's load");
            *load -= 1;
            table.of.insert(key, (shard, false));
        }
    }

    /// Forgets every key of topic `topic` of stream `stream` (every key of the stream for
    /// `None`): the topic or the stream is gone, and its partitions were vacated first.
    pub(crate) fn forget(&self, stream: u32, topic: Option<u32>) {
        let mut table = self.write();
        let (first, last) = match topic {
            Some(t) => ((stream, t, 0), (stream, t, u32::MAX)),
            None => ((stream, 0, 0), (stream, u32::MAX, u32::MAX)),
        };
        let gone: Vec<PartitionKey> = table.of.range(first..=last).map(|(k, _)| *k).collect();
        for key in gone {
            let (_, live) = table.of.remove(&key).expect("listed");
            assert!(
                !live,
                "{key:?}: a partition is vacated before its topic is forgotten"
            );
        }
    }

    /// The loads count every partition that exists once, on its shard (a scan of the whole
    /// table: the metadata owner runs it once per batch of directory work).
    pub(crate) fn check(&self) {
        let table = self.read();
        let mut counted = vec![0u32; table.loads.len()];
        for &(shard, live) in table.of.values() {
            counted[shard as usize] += u32::from(live);
        }
        assert_eq!(counted, table.loads, "the loads count every partition once");
    }

    /// Partitions placed on each shard.
    pub(crate) fn loads(&self) -> Vec<u32> {
        self.read().loads.clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// The shard a key that was never placed is routed to: its ids summed, modulo the shards
/// (any fixed choice would do; this one spreads requests for missing partitions).
fn unplaced_shard(key: PartitionKey, shards: usize) -> usize {
    let sum = u64::from(key.0) + u64::from(key.1) + u64::from(key.2);
    (sum % shards as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::Placement;

    #[test]
    fn each_partition_goes_to_the_least_loaded_shard_and_keeps_it() {
        let placement = Placement::new(2);
        assert_eq!(placement.place((1, 1, 1)), 0);
        assert_eq!(placement.place((1, 1, 2)), 1);
        assert_eq!(placement.place((1, 1, 1)), 0, "placed once");
        assert_eq!(placement.loads(), vec![1, 1]);
        // Ties go to the lowest index; the table is what routes.
        assert_eq!(placement.place((7, 7, 7)), 0);
        assert_eq!(placement.of((7, 7, 7)), 0);
        assert_eq!(placement.of((1, 1, 2)), 1);
    }

    #[test]
    fn deletions_leave_no_drift() {
        // Topics of one partition each; every other one deleted, then as many created: the
        // shards stay even (a sum of the ids put every survivor on one shard).
        for shards in 1..=8usize {
            let placement = Placement::new(shards);
            let topics = 8 * shards as u32;
            for topic in 1..=topics {
                placement.place((1, topic, 1));
            }
            for topic in (2..=topics).step_by(2) {
                placement.vacate((1, topic, 1));
                placement.forget(1, Some(topic));
            }
            for topic in topics + 1..=topics + topics / 2 {
                placement.place((1, topic, 1));
            }
            let loads = placement.loads();
            let (min, max) = (loads.iter().min(), loads.iter().max());
            assert_eq!(min, max, "{shards} shards: {loads:?}");
            assert_eq!(loads.iter().sum::<u32>(), topics, "{shards} shards");
        }
    }

    #[test]
    fn a_vacated_key_keeps_its_shard_until_its_topic_is_forgotten() {
        let placement = Placement::new(3);
        let fresh = Placement::new(3);
        for key in [(1, 1, 1), (1, 1, 2), (4, 2, 9)] {
            placement.place(key);
        }
        assert_eq!(placement.of((4, 2, 9)), 2);
        placement.vacate((4, 2, 9));
        placement.vacate((4, 2, 9));
        assert_eq!(placement.loads(), [1, 1, 0], "out of the load");
        assert_eq!(placement.of((4, 2, 9)), 2, "still routed to its shard");
        // Made again while its topic lives: back on its shard, though shard 2 is not the
        // least loaded of a fresh choice (all tie; the lowest index would win).
        placement.vacate((1, 1, 1));
        assert_eq!(placement.place((4, 2, 9)), 2);
        assert_eq!(placement.loads(), [0, 1, 1]);
        placement.vacate((4, 2, 9));
        placement.forget(4, Some(2));
        assert_eq!(placement.of((4, 2, 9)), fresh.of((4, 2, 9)), "forgotten");
        placement.vacate((1, 1, 2));
        placement.forget(1, None);
        assert_eq!(placement.loads(), [0, 0, 0]);
        assert_eq!(placement.place((4, 2, 9)), 0, "placed afresh");
    }

    #[test]
    #[should_panic(expected = "vacated before its topic is forgotten")]
    fn a_topic_is_forgotten_only_once_its_partitions_are_vacated() {
        let placement = Placement::new(2);
        placement.place((1, 1, 0));
        placement.forget(1, Some(1));
    }
}

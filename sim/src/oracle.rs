//! The oracle: what every partition was sent, what was acknowledged at which offset under
//! which policy, what was promised durable, and which consumer offsets were stored; and the
//! checks that compare what the engine serves against it.

use crate::run::{Violation, INV_EXACT, INV_NO_LOSS, INV_OFFSETS, INV_PREFIX};
use cairn_engine::config::{Durability, TopicConfig};
use cairn_engine::partition::{ConsumerId, Partition, PartitionError};
use cairn_faults::{FaultKind, SimDisk};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// One message as a poll returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadMessage {
    pub offset: u64,
    pub id: u128,
    pub payload: Vec<u8>,
    pub headers: Vec<u8>,
    /// The (server) timestamp of its batch.
    pub timestamp: u64,
}

/// What a producer sent for one message id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub payload: Vec<u8>,
    pub headers: Vec<u8>,
}

type Checked<T> = Result<T, Violation>;

fn violation(invariant: &'static str, evidence: String) -> Violation {
    Violation {
        invariant,
        evidence,
    }
}

/// The model of one partition.
pub struct Model {
    pub dir: PathBuf,
    pub config: TopicConfig,
    pub partition: Option<Partition>,
    /// Set once recovery fenced the partition (with a justification checked).
    pub fenced: Option<String>,
    /// Offset → message id, for every offset whose content is known.
    pub log: BTreeMap<u64, u128>,
    /// Message id → offset (the reverse of `log`).
    pub positions: BTreeMap<u128, u64>,
    /// Ids whose append failed: they may or may not be in the log.
    pub unknown: BTreeSet<u128>,
    /// One past the highest acknowledged offset.
    pub acked_end: u64,
    /// Every offset below this was promised durable.
    pub durable_end: u64,
    /// Values stored per consumer since the last check (any may survive under `replicated`).
    pub offsets: BTreeMap<ConsumerId, Vec<u64>>,
    /// The last value stored under `persisted` offset durability.
    pub durable_offsets: BTreeMap<ConsumerId, u64>,
    /// One past the last offset at the last full read.
    pub end: u64,
}

impl Model {
    pub fn new(dir: PathBuf, config: TopicConfig, partition: Partition) -> Model {
        Model {
            dir,
            config,
            partition: Some(partition),
            fenced: None,
            log: BTreeMap::new(),
            positions: BTreeMap::new(),
            unknown: BTreeSet::new(),
            acked_end: 0,
            durable_end: 0,
            offsets: BTreeMap::new(),
            durable_offsets: BTreeMap::new(),
            end: 0,
        }
    }

    fn place(&mut self, p: usize, offset: u64, id: u128) -> Checked<()> {
        if let Some(previous) = self.log.get(&offset) {
            if *previous != id {
                return Err(violation(INV_PREFIX, format!("partition {p}: offset {offset} holds message {id:#x}, but it was acknowledged for {previous:#x}")));
            }
        }
        if let Some(at) = self.positions.get(&id) {
            if *at != offset {
                return Err(violation(
                    INV_PREFIX,
                    format!(
                        "partition {p}: message {id:#x} appears at offset {offset}, it was at {at}"
                    ),
                ));
            }
        }
        self.log.insert(offset, id);
        self.positions.insert(id, offset);
        self.unknown.remove(&id);
        Ok(())
    }

    /// Records an acknowledged append.
    pub fn acked(&mut self, base: u64, ids: &[u128], durable: bool) -> Checked<()> {
        for (i, id) in ids.iter().enumerate() {
            self.place(usize::MAX, base + i as u64, *id)?;
        }
        let end = base + ids.len() as u64;
        self.acked_end = self.acked_end.max(end);
        if durable {
            self.durable_end = self.durable_end.max(end);
        }
        Ok(())
    }

    /// Checks messages of one reply: consecutive offsets, exact bytes, known placement.
    pub fn check_messages(
        &self,
        p: usize,
        messages: &[ReadMessage],
        sent: &BTreeMap<u128, Sent>,
    ) -> Checked<()> {
        for pair in messages.windows(2) {
            if pair[1].offset != pair[0].offset + 1 {
                return Err(violation(
                    INV_PREFIX,
                    format!(
                        "partition {p}: a reply jumps from offset {} to {}",
                        pair[0].offset, pair[1].offset
                    ),
                ));
            }
            if pair[1].timestamp < pair[0].timestamp {
                return Err(violation(
                    INV_EXACT,
                    format!(
                        "partition {p}: timestamps go backwards at offset {}",
                        pair[1].offset
                    ),
                ));
            }
        }
        for ReadMessage {
            offset,
            id,
            payload,
            headers,
            ..
        } in messages
        {
            let Some(original) = sent.get(id) else {
                return Err(violation(INV_EXACT, format!("partition {p}: offset {offset} holds message {id:#x} that no producer sent")));
            };
            if original.payload != *payload || original.headers != *headers {
                return Err(violation(INV_EXACT, format!("partition {p}: message {id:#x} at offset {offset} differs from what was sent")));
            }
            if let Some(known) = self.log.get(offset) {
                if known != id {
                    return Err(violation(INV_PREFIX, format!("partition {p}: offset {offset} holds {id:#x}, acknowledged as {known:#x}")));
                }
            } else if !self.unknown.contains(id) && !self.positions.contains_key(id) {
                return Err(violation(INV_EXACT, format!("partition {p}: offset {offset} holds {id:#x}, which was sent to another partition")));
            }
        }
        Ok(())
    }

    /// Checks a full read of the partition (after a restart, or at any time).
    pub fn check_full(
        &mut self,
        p: usize,
        all: &[ReadMessage],
        sent: &BTreeMap<u128, Sent>,
        after_restart: bool,
        lie_on_record: bool,
        damaged: bool,
    ) -> Checked<()> {
        for (i, m) in all.iter().enumerate() {
            if m.offset != i as u64 {
                return Err(violation(INV_PREFIX, format!("partition {p}: the log is not gapless from 0: position {i} holds offset {}", m.offset)));
            }
        }
        self.check_messages(p, all, sent)?;
        let mut ids = BTreeSet::new();
        for m in all {
            if !ids.insert(m.id) {
                return Err(violation(
                    INV_PREFIX,
                    format!("partition {p}: message {:#x} appears twice", m.id),
                ));
            }
        }
        let end = all.len() as u64;
        // At runtime a poll stops short at damaged bytes (never serving them); after a
        // restart, recovery must have fenced such damage, so only a lie on the durable
        // record itself (undetectable on one disk) excuses a shorter log.
        let short_read_allowed = !after_restart && damaged;
        if end < self.durable_end && !lie_on_record && !short_read_allowed {
            let lost: Vec<u64> = self
                .log
                .range(end..self.durable_end)
                .map(|(o, _)| *o)
                .take(5)
                .collect();
            return Err(violation(INV_NO_LOSS, format!("partition {p}: the log ends at {end}, but offsets up to {} were promised durable (first lost: {lost:?})", self.durable_end)));
        }
        if !after_restart && end < self.acked_end && !damaged {
            return Err(violation(INV_NO_LOSS, format!("partition {p}: without any crash the log ends at {end}, below acknowledged offset {}", self.acked_end - 1)));
        }
        if after_restart {
            // What is gone is a suffix: forget it, learn what the unknown outcomes became.
            let lost: Vec<u64> = self.log.range(end..).map(|(o, _)| *o).collect();
            for offset in lost {
                if let Some(id) = self.log.remove(&offset) {
                    self.positions.remove(&id);
                }
            }
            for m in all {
                self.place(p, m.offset, m.id)?;
            }
            self.durable_end = end;
            self.acked_end = end;
        }
        self.end = end;
        Ok(())
    }

    fn records_under(&self, disk: &SimDisk, sub: &str, pred: impl Fn(FaultKind) -> bool) -> bool {
        let under = self.dir.join(sub);
        disk.any_record(|r| {
            pred(r.kind) && r.path.as_ref().is_some_and(|path| path.starts_with(&under))
        })
    }

    /// Whether a fault damaged (or lied about) durable data of this partition: then a poll
    /// may stop short at the damage (it never serves changed bytes), until a restart fences.
    pub fn damaged(&self, disk: &SimDisk) -> bool {
        self.records_under(disk, "", FaultKind::damages_durable_data)
    }

    /// Whether a sync of this partition's durable record lied: then a rewind is undetectable
    /// on a single disk, and the checker may not demand the acknowledged tail.
    pub fn superblock_lied(&self, disk: &SimDisk) -> bool {
        disk.any_record(|r| {
            r.kind == FaultKind::LyingSync
                && r.path.as_ref().is_some_and(|path| {
                    path.starts_with(&self.dir)
                        && path
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("superblock"))
                })
        })
    }

    /// Whether an offset file may legitimately be damaged.
    pub fn offset_damage_allowed(&self, disk: &SimDisk) -> bool {
        self.records_under(disk, "offsets", FaultKind::damages_durable_data)
            || (self.config.consumer_offset_durability == Durability::Replicated
                && disk.any_record(|r| r.kind == FaultKind::PowerLoss))
    }

    /// After a restart: every stored offset is within the log and, under `persisted`, the
    /// value last stored (lowered to the log's end when the log lost its tail).
    pub fn check_offsets(&mut self, p: usize, disk: &SimDisk) -> Checked<()> {
        let last = self.end.checked_sub(1);
        let consumers: Vec<ConsumerId> = self.offsets.keys().copied().collect();
        let partition = self.partition.as_ref().expect("open");
        for consumer in consumers {
            let got = partition.get_offset(consumer);
            let durable = self.durable_offsets.get(&consumer).copied();
            let expected_durable = durable.and_then(|v| last.map(|l| v.min(l)));
            match got {
                Ok(Some(x)) => {
                    if last.is_none_or(|l| x > l) {
                        return Err(violation(INV_OFFSETS, format!("partition {p}: {consumer:?} offset {x} beyond the last offset {last:?}")));
                    }
                    let allowed = match expected_durable {
                        Some(v) => x == v,
                        None => self.offsets[&consumer]
                            .iter()
                            .any(|v| last.map(|l| (*v).min(l)) == Some(x)),
                    };
                    if !allowed && !self.offset_damage_allowed(disk) {
                        return Err(violation(INV_OFFSETS, format!("partition {p}: {consumer:?} offset {x}, expected {expected_durable:?} (stored {:?})", self.offsets[&consumer])));
                    }
                    self.offsets.insert(consumer, vec![x]);
                    // Under `persisted`, what recovery serves is durable from now on.
                    if self.config.consumer_offset_durability == Durability::Persisted {
                        self.durable_offsets.insert(consumer, x);
                    }
                }
                Ok(None) => {
                    if expected_durable.is_some() && !self.offset_damage_allowed(disk) {
                        return Err(violation(INV_OFFSETS, format!("partition {p}: {consumer:?} lost its persisted offset {expected_durable:?}")));
                    }
                    self.offsets.remove(&consumer);
                    self.durable_offsets.remove(&consumer);
                }
                Err(PartitionError::OffsetDamaged { .. }) => {
                    if !self.offset_damage_allowed(disk) {
                        return Err(violation(INV_OFFSETS, format!("partition {p}: {consumer:?} offset reported damaged with no fault behind it")));
                    }
                }
                Err(e) => {
                    return Err(violation(
                        INV_OFFSETS,
                        format!("partition {p}: reading {consumer:?} failed: {e}"),
                    ))
                }
            }
        }
        Ok(())
    }
}

//! Stored consumer offsets (S8): what each consumer's offset calls stored or deleted in a
//! workload partition, and the judges of what GetConsumerOffset reads back; and a group
//! member's offset calls without a partition id, which mean its current partition: the one
//! its last poll read, while it still owns it. Pure.
//!
//! Within one boot a store or delete acknowledged, with no attempt of either in doubt since
//! the boot, decides what a read finds. Across boots (a `replicated` offset may be lost) or
//! after a lost reply (the attempt may land any time), a read finds nothing or some offset
//! a store sent, or the partition's last offset that a boot lowered a stored offset to.

use super::PartKey;
use crate::report::violation;
use crate::report::Checked;
use std::collections::{BTreeMap, BTreeSet};

pub const INV_OFFSETS: &str = "S8 stored offsets read back as stored; a member's offset without a partition id means its current partition";

/// One consumer's offset in one partition, as the model knows it.
#[derive(Debug, Clone, Default)]
pub struct Stored {
    /// Every offset a store of it sent.
    pub sent: BTreeSet<u64>,
    /// What a read in this boot must find (`Some(None)`: nothing), when it is known.
    pub known: Option<Option<u64>>,
    /// A store or delete of this boot had an unknown outcome: what it is stays unknown until
    /// the next boot.
    pub doubt: bool,
    /// Offsets a boot's recovery may have stored in place of a sent one: a stored offset
    /// above the recovered last offset (a `replicated` tail lost to a power loss) is lowered
    /// to that last offset, durably (the engine's `plan_offsets`).
    pub lowered: BTreeSet<u64>,
}

/// The consumers' offsets: (consumer id, partition) → what is stored.
#[derive(Debug, Clone, Default)]
pub struct Offsets {
    pub stored: BTreeMap<(u32, PartKey), Stored>,
}

/// How an offset call ended, as far as the model needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Done,
    /// Unknown outcome (it may still land), or refused for a reason of the server's (a
    /// full disk may fail the offset's write after its change).
    Lost,
}

impl Offsets {
    /// A new boot: nothing is known exactly any more; what was in doubt may have landed.
    pub fn crashed(&mut self) {
        for stored in self.stored.values_mut() {
            stored.known = None;
            stored.doubt = false;
        }
    }

    /// A boot recovered partition `part` holding `end` messages. Recovery lowers a stored
    /// offset above the last one to it; only a sent offset above it can have been lowered.
    pub fn recovered(&mut self, part: PartKey, end: u64) {
        let Some(last) = end.checked_sub(1) else {
            return;
        };
        let of_part = self.stored.iter_mut().filter(|((_, p), _)| *p == part);
        for (_, stored) in of_part {
            if stored.sent.last().is_some_and(|&top| top > last) {
                stored.lowered.insert(last);
            }
        }
    }

    /// A store of `offset` is about to be sent.
    pub fn storing(&mut self, key: (u32, PartKey), offset: u64) {
        self.stored.entry(key).or_default().sent.insert(offset);
    }

    /// A store (`Some(offset)`) or delete (`None`) got its answer from this boot's server.
    pub fn answered(&mut self, key: (u32, PartKey), value: Option<u64>, answer: Answer) {
        let stored = self.stored.entry(key).or_default();
        match answer {
            Answer::Done if !stored.doubt => stored.known = Some(value),
            Answer::Done => {}
            Answer::Lost => {
                stored.doubt = true;
                stored.known = None;
            }
        }
    }

    /// A delete was refused as "nothing stored" (3021).
    pub fn judge_delete_refused(&self, key: (u32, PartKey)) -> Checked<()> {
        match self.stored.get(&key).and_then(|s| s.known) {
            Some(Some(offset)) => Err(violation(INV_OFFSETS, format!("consumer {} in partition {:?}: a delete answered 'no offset stored', though offset {offset} was stored (acknowledged) in this boot", key.0, key.1))),
            _ => Ok(()),
        }
    }

    /// What a read sent and answered in this boot found.
    pub fn judge_read(&self, key: (u32, PartKey), found: Option<u64>) -> Checked<()> {
        let stored = self.stored.get(&key);
        let known = stored.and_then(|s| s.known);
        if let Some(expected) = known {
            if expected != found {
                return Err(violation(INV_OFFSETS, format!("consumer {} in partition {:?}: read {found:?}, though this boot acknowledged {expected:?} last with no attempt in doubt", key.0, key.1)));
            }
        }
        if let Some(offset) = found {
            let explained =
                stored.is_some_and(|s| s.sent.contains(&offset) || s.lowered.contains(&offset));
            if !explained {
                return Err(violation(
                    INV_OFFSETS,
                    format!(
                        "consumer {} in partition {:?}: read offset {offset}, which no store sent and no boot lowered a stored offset to",
                        key.0, key.1
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// What a group member's session knows of its current partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Current {
    /// No poll on this session since it joined, or its last poll was answered with no
    /// partition (it held none): nothing can be current.
    Nothing,
    /// Its last poll read this partition: current unless a rebalance took it since.
    Polled(u32),
}

/// An offset call without a partition id, as the member saw it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberAnswer {
    /// Answered for this partition (a read's reply names it).
    Named(u32),
    /// Answered, without saying which partition (a store, or a read that found nothing).
    Done,
    /// Refused: no current partition.
    NoCurrent,
}

/// The error code of a member's offset call with no current partition.
pub const NO_CURRENT_PARTITION: u32 = 3007;

/// Judges a member's offset call without a partition id. `stable`: the group's generation
/// was the same before the poll and after the call, on one session (no rebalance between).
pub fn judge_member(
    what: &str,
    current: Current,
    stable: bool,
    answer: MemberAnswer,
) -> Checked<()> {
    let wrong = |why: String| Err(violation(INV_OFFSETS, format!("{what}: {why}")));
    match (current, answer) {
        (Current::Nothing, MemberAnswer::Named(p)) => wrong(format!("answered for partition {p}, though no poll of this session read a partition")),
        (Current::Nothing, MemberAnswer::Done) => wrong("answered, though no poll of this session read a partition (expected no current partition)".into()),
        (Current::Polled(p), MemberAnswer::Named(q)) if p != q => wrong(format!("answered for partition {q}, though the member's last poll read partition {p}")),
        (Current::Polled(p), MemberAnswer::NoCurrent) if stable => wrong(format!("refused with no current partition, though the member's last poll read partition {p} and no rebalance happened since")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_offsets_read_back_as_acknowledged_until_in_doubt() {
        let mut o = Offsets::default();
        let key = (7, (0, 1));
        o.judge_read(key, None).unwrap();
        o.storing(key, 5);
        o.answered(key, Some(5), Answer::Done);
        o.judge_read(key, Some(5)).unwrap();
        assert!(o.judge_read(key, Some(4)).is_err());
        assert!(o.judge_read(key, None).is_err());
        assert!(o.judge_delete_refused(key).is_err());
        o.storing(key, 9);
        o.answered(key, Some(9), Answer::Lost);
        o.judge_read(key, Some(5)).unwrap();
        o.judge_read(key, None).unwrap();
        assert!(o.judge_read(key, Some(3)).is_err(), "never sent");
        o.answered(key, Some(9), Answer::Done);
        o.judge_read(key, Some(5)).unwrap();
        o.crashed();
        o.answered(key, None, Answer::Done);
        assert!(o.judge_read(key, Some(5)).is_err(), "deleted");
    }

    #[test]
    fn a_boot_may_lower_an_offset_above_the_recovered_end_to_its_last_offset() {
        let mut o = Offsets::default();
        let (key, other) = ((7, (1, 0)), (8, (1, 0)));
        o.storing(key, 9);
        o.answered(key, Some(9), Answer::Done);
        o.storing(other, 3);
        o.answered(other, Some(3), Answer::Done);
        o.crashed();
        o.recovered((1, 0), 6);
        o.recovered((0, 0), 2);
        o.judge_read(key, Some(5)).unwrap();
        o.judge_read(key, Some(9)).unwrap();
        assert!(o.judge_read(key, Some(4)).is_err(), "not the last offset");
        assert!(
            o.judge_read(key, Some(1)).is_err(),
            "another partition's last"
        );
        assert!(
            o.judge_read(other, Some(5)).is_err(),
            "3 was never above the end"
        );
        o.crashed();
        o.recovered((1, 0), 0);
        assert!(
            o.judge_read(key, Some(2)).is_err(),
            "an empty log deletes it"
        );
    }

    #[test]
    fn a_member_offset_names_its_current_partition() {
        let stable = true;
        judge_member("m", Current::Nothing, false, MemberAnswer::NoCurrent).unwrap();
        assert!(judge_member("m", Current::Nothing, false, MemberAnswer::Named(0)).is_err());
        assert!(judge_member("m", Current::Nothing, false, MemberAnswer::Done).is_err());
        judge_member("m", Current::Polled(2), stable, MemberAnswer::Named(2)).unwrap();
        assert!(judge_member("m", Current::Polled(2), stable, MemberAnswer::Named(1)).is_err());
        assert!(judge_member("m", Current::Polled(2), stable, MemberAnswer::NoCurrent).is_err());
        judge_member("m", Current::Polled(2), !stable, MemberAnswer::NoCurrent).unwrap();
    }
}

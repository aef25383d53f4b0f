//! The workload partitions' reported ends (S7): the window of message counts the model
//! allows a partition's log in, and the judges of the numbers GetTopic, GetStream, the
//! topic and stream lists, a poll's and a consumer offset's `current_offset` and the
//! server's stats report against it. Pure: the world takes a window's floor when a read is
//! sent and its ceiling when the reply arrives.
//!
//! A workload partition's log starts at offset 0 (no segment of it is ever deleted), so its
//! message count is its end and its current offset the last offset (0 when empty).

use super::oracle::{Checked, Oracle, PartKey};
use crate::report::violation;
use std::collections::BTreeMap;

pub const INV_ENDS: &str =
    "S7 a partition's reported end lies between what this boot acknowledged and what was sent";

/// The message counts the model allows one partition's log to hold when a read answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Known held when the read was sent: offsets up to the last this boot acknowledged or
    /// read.
    pub at_least: u64,
    /// Its length at boot plus every message whose send may have landed since.
    pub at_most: u64,
    /// It may report nothing: the disk filled since this boot (a refused write fences its
    /// partition) or the node stopped.
    pub may_be_empty: bool,
}

/// The floors of every workload partition, taken when a read is sent.
pub type Floors = BTreeMap<PartKey, u64>;

impl Oracle {
    /// The messages this boot's log is known to hold: up to the last offset it acknowledged
    /// or read (a log is gapless from 0).
    pub fn floor(&self, part: PartKey) -> u64 {
        self.parts[&part]
            .log
            .last_key_value()
            .map_or(0, |(offset, _)| offset + 1)
    }

    /// Every workload partition's floor, taken when a read is sent.
    pub fn floors(&self) -> Floors {
        self.parts.keys().map(|p| (*p, self.floor(*p))).collect()
    }

    /// The most messages `part`'s log can hold now: what its boot recovered plus every
    /// message sent since (or in flight when it began).
    pub fn ceiling(&self, part: PartKey) -> u64 {
        let model = &self.parts[&part];
        model.boot_len + model.epoch_sends
    }

    /// The windows of every workload partition, for a read sent when `floors` were taken
    /// and answered now.
    pub fn windows(
        &self,
        floors: &Floors,
        may_be_empty: impl Fn(PartKey) -> bool,
    ) -> BTreeMap<PartKey, Window> {
        floors
            .iter()
            .map(|(part, at_least)| {
                let at_most = self.ceiling(*part);
                assert!(*at_least <= at_most, "{part:?}: a floor above the ceiling");
                let window = Window {
                    at_least: *at_least,
                    at_most,
                    may_be_empty: may_be_empty(*part),
                };
                (*part, window)
            })
            .collect()
    }
}

/// One partition's reported numbers: its message count within the window, its current
/// offset the last of them.
pub fn judge_partition(
    what: &str,
    part: PartKey,
    window: Window,
    current_offset: u64,
    messages: u64,
) -> Checked<()> {
    if current_offset != messages.saturating_sub(1) {
        return Err(violation(INV_ENDS, format!("{what}: partition {part:?} reports current offset {current_offset} with {messages} messages from offset 0")));
    }
    judge_count(what, part, window, messages)
}

/// One partition's message count within its window.
pub fn judge_count(what: &str, part: PartKey, window: Window, messages: u64) -> Checked<()> {
    let empty_ok = window.may_be_empty && messages == 0;
    if messages < window.at_least && !empty_ok {
        return Err(violation(INV_ENDS, format!("{what}: partition {part:?} reports {messages} messages, though this boot acknowledged or read {} before the request was sent", window.at_least)));
    }
    if messages > window.at_most {
        return Err(violation(INV_ENDS, format!("{what}: partition {part:?} reports {messages} messages, more than its boot recovered plus every message sent since ({})", window.at_most)));
    }
    Ok(())
}

/// A current offset alone (a poll's, a consumer offset's): the last offset of a count in
/// the window (0 for an empty log).
pub fn judge_current(what: &str, part: PartKey, window: Window, current: u64) -> Checked<()> {
    let lowest = window.at_least.saturating_sub(1);
    let highest = window.at_most.saturating_sub(1);
    let empty_ok = window.may_be_empty && current == 0;
    if current < lowest && !empty_ok {
        return Err(violation(INV_ENDS, format!("{what}: partition {part:?} reports current offset {current}, though this boot acknowledged or read offset {lowest} before the request was sent")));
    }
    if current > highest {
        return Err(violation(INV_ENDS, format!("{what}: partition {part:?} reports current offset {current}, beyond the last offset that can exist ({highest})")));
    }
    Ok(())
}

/// A total over `parts` (a topic's, a stream's, the server's messages).
pub fn judge_total(
    what: &str,
    windows: &BTreeMap<PartKey, Window>,
    parts: impl Iterator<Item = PartKey>,
    total: u64,
) -> Checked<()> {
    let (mut low, mut high) = (0u64, 0u64);
    for part in parts {
        let w = windows[&part];
        if !w.may_be_empty {
            low += w.at_least;
        }
        high += w.at_most;
    }
    if total < low || total > high {
        return Err(violation(INV_ENDS, format!("{what}: {total} messages in all, the model allows {low}..={high} (acknowledged or read before the request; sent since boot)")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Window = Window {
        at_least: 3,
        at_most: 7,
        may_be_empty: false,
    };

    #[test]
    fn a_partition_end_below_what_was_acknowledged_or_above_what_was_sent_is_caught() {
        judge_partition("t", (0, 0), W, 2, 3).unwrap();
        judge_partition("t", (0, 0), W, 6, 7).unwrap();
        assert!(judge_partition("t", (0, 0), W, 0, 0).is_err());
        assert!(
            judge_partition("t", (0, 0), W, 0, 3).is_err(),
            "inconsistent"
        );
        assert!(judge_partition("t", (0, 0), W, 7, 8).is_err());
        let fenced = Window {
            may_be_empty: true,
            ..W
        };
        judge_partition("t", (0, 0), fenced, 0, 0).unwrap();
        assert!(judge_partition("t", (0, 0), fenced, 0, 1).is_err());
        judge_current("p", (0, 0), W, 2).unwrap();
        assert!(judge_current("p", (0, 0), W, 1).is_err());
        assert!(judge_current("p", (0, 0), W, 7).is_err());
        judge_current("p", (0, 0), fenced, 0).unwrap();
        let windows: BTreeMap<PartKey, Window> = [((0, 0), W), ((0, 1), W)].into();
        judge_total("s", &windows, windows.keys().copied(), 6).unwrap();
        assert!(judge_total("s", &windows, windows.keys().copied(), 5).is_err());
        assert!(judge_total("s", &windows, windows.keys().copied(), 15).is_err());
    }
}

//! A group member reads its partitions in turn: with no rebalance between two of its polls
//! (the group's generation unchanged), the second reads the partition after the first's in
//! the member's assignment, wrapping around (Iggy's round robin).

use super::super::{GroupInc, NodeWorld};
use crate::node_world::INV_CALLERS;
use crate::report::{violation, Checked};
use cairn_engine::node::NodeResult;

/// A member's last poll that read a partition with no rebalance while it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupPoll {
    group: GroupInc,
    generation: u64,
    assignment: Vec<u32>,
    partition: u32,
}

impl NodeWorld {
    /// Judges member `client`'s poll of `partition` in `group` against its last one, given
    /// the member's assignment (generation, partitions) asked before and after the poll;
    /// then remembers it. Anything but a poll with the generation unchanged forgets it.
    pub(crate) fn judge_round_robin(
        &mut self,
        client: u128,
        group: GroupInc,
        partition: u32,
        before: &NodeResult<(u64, Vec<u32>)>,
        after: Option<&NodeResult<(u64, Vec<u32>)>>,
    ) -> Checked<()> {
        let last = self.group_polls.remove(&client);
        let (Ok((generation, assignment)), Some(Ok((after_generation, _)))) = (before, after)
        else {
            return Ok(());
        };
        if generation != after_generation {
            return Ok(());
        }
        let now = GroupPoll {
            group,
            generation: *generation,
            assignment: assignment.clone(),
            partition,
        };
        if let Some(last) = last
            .filter(|l| (l.group, l.generation, &l.assignment) == (group, *generation, assignment))
        {
            let at = assignment.iter().position(|p| *p == last.partition);
            let expected = at.map(|i| assignment[(i + 1) % assignment.len()]);
            if expected != Some(partition) {
                return Err(violation(
                    INV_CALLERS,
                    format!("group {group:?}: member {client:#x} read partition {} and then {partition} at generation {generation}, owning {assignment:?}: the next in turn is {expected:?}", last.partition),
                ));
            }
            if assignment.len() > 1 {
                self.decision("GroupRoundRobin");
            }
        }
        self.group_polls.insert(client, now);
        Ok(())
    }
}

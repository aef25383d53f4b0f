//! Reads of a partition this member keeps no copy of (it is placed on other members:
//! `placement`): polls, consumer offsets and the partition's numbers go to a member that
//! keeps one ([`PartRpc::Read`]), answered from that member's copy by
//! [`cairn_engine::node::Node::read_here`].
//!
//! | the member asked | it answers |
//! |---|---|
//! | its replica leads the group, or knows no leader | from its copy |
//! | its replica follows a leader on another member | where the leader is ([`ReadReply::Leader`]): the asker asks there once, so a read after a write it forwarded sees it |
//! | it runs no replica of the group | [`PartReply::NoGroup`]: the asker asks the next placed member |
//!
//! With no placed member answering (none known yet, all down), the asker reads its own
//! copy: a member that holds none reads an empty partition, as a single node's new one.

use super::{id_of, PartGroups, FORWARD_LIMIT};
use crate::partition::net::{GroupName, PartEnvelope, PartReply, PartRpc};
use crate::types::{bytes_serde, member_of, MemberId};
use bytes::Bytes;
use cairn_engine::error::{NodeError, NodeResult};
use cairn_engine::node::{PartitionInfo, ReadAnswer, ReadElsewhere};
use cairn_engine::partition::{ConsumerId, ConsumerKind, PartitionIdentity, PollFrom, Polled};
use openraft::async_runtime::WatchReceiver;
use serde::{Deserialize, Serialize};

/// The most batch bytes one read asked of another member carries (the client polls again
/// for more).
pub const READ_BUDGET: u64 = 4 << 20;

/// A [`ReadElsewhere`] as the peers' frames carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireRead {
    Poll {
        from: WireFrom,
        count: u32,
        max_bytes: u64,
    },
    Offset(WireConsumer),
    Numbers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireFrom {
    Offset(u64),
    Timestamp(u64),
    First,
    Last,
    Next(WireConsumer),
}

/// A consumer: a group's (`group`) or a single consumer's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireConsumer {
    pub group: bool,
    pub id: u32,
}

/// What [`PartRpc::Read`] got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadReply {
    /// Read from the answering member's copy.
    Read(WireAnswer),
    /// The group's leader runs on this member: ask it there.
    Leader(MemberId),
    /// The read failed there: said in words.
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireAnswer {
    Polled {
        partition_id: u64,
        incarnation: u64,
        current_offset: Option<u64>,
        message_count: u32,
        /// Every batch's length, in order.
        lengths: Vec<u32>,
        /// The batches, back to back.
        #[serde(with = "bytes_serde")]
        bytes: Vec<u8>,
    },
    Offset(Option<u64>),
    Numbers(Option<WireNumbers>),
}

/// [`PartitionInfo`] but its fence (another member's replica's own: its group repairs it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireNumbers {
    pub segment_starts: Vec<u64>,
    pub log_start: u64,
    pub visible_next_offset: Option<u64>,
    pub durable_next_offset: Option<u64>,
    pub sealed: Vec<(u64, u64, u64)>,
    pub stored_bytes: u64,
}

fn consumer_to_wire(c: ConsumerId) -> WireConsumer {
    WireConsumer {
        group: c.kind == ConsumerKind::Group,
        id: c.id,
    }
}

fn consumer_of(c: WireConsumer) -> ConsumerId {
    match c.group {
        true => ConsumerId::group(c.id),
        false => ConsumerId::consumer(c.id),
    }
}

/// `read` for the wire, its batch bytes at most [`READ_BUDGET`].
pub fn read_to_wire(read: ReadElsewhere) -> WireRead {
    match read {
        ReadElsewhere::Poll {
            from,
            count,
            max_bytes,
        } => WireRead::Poll {
            from: match from {
                PollFrom::Offset(o) => WireFrom::Offset(o),
                PollFrom::Timestamp(t) => WireFrom::Timestamp(t),
                PollFrom::First => WireFrom::First,
                PollFrom::Last => WireFrom::Last,
                PollFrom::Next(c) => WireFrom::Next(consumer_to_wire(c)),
            },
            count,
            max_bytes: max_bytes.min(READ_BUDGET),
        },
        ReadElsewhere::Offset(c) => WireRead::Offset(consumer_to_wire(c)),
        ReadElsewhere::Numbers => WireRead::Numbers,
    }
}

/// The read `wire` names, its batch bytes at most [`READ_BUDGET`].
pub fn read_of(wire: WireRead) -> ReadElsewhere {
    match wire {
        WireRead::Poll {
            from,
            count,
            max_bytes,
        } => ReadElsewhere::Poll {
            from: match from {
                WireFrom::Offset(o) => PollFrom::Offset(o),
                WireFrom::Timestamp(t) => PollFrom::Timestamp(t),
                WireFrom::First => PollFrom::First,
                WireFrom::Last => PollFrom::Last,
                WireFrom::Next(c) => PollFrom::Next(consumer_of(c)),
            },
            count,
            max_bytes: max_bytes.min(READ_BUDGET),
        },
        WireRead::Offset(c) => ReadElsewhere::Offset(consumer_of(c)),
        WireRead::Numbers => ReadElsewhere::Numbers,
    }
}

pub fn answer_to_wire(answer: ReadAnswer) -> WireAnswer {
    match answer {
        ReadAnswer::Polled(p) => WireAnswer::Polled {
            partition_id: p.partition_id,
            incarnation: p.incarnation,
            current_offset: p.current_offset,
            message_count: p.message_count,
            lengths: p.batches.iter().map(|b| b.len() as u32).collect(),
            bytes: p.batches.concat(),
        },
        ReadAnswer::Offset(o) => WireAnswer::Offset(o),
        ReadAnswer::Numbers(n) => WireAnswer::Numbers(n.map(|n| WireNumbers {
            segment_starts: n.segment_starts,
            log_start: n.log_start,
            visible_next_offset: n.visible_next_offset,
            durable_next_offset: n.durable_next_offset,
            sealed: n.sealed,
            stored_bytes: n.stored_bytes,
        })),
    }
}

/// The answer `wire` carries, for partition `identity`; `None` when its batch lengths do
/// not add up to its bytes.
pub fn answer_of(wire: WireAnswer, identity: PartitionIdentity) -> Option<ReadAnswer> {
    Some(match wire {
        WireAnswer::Polled {
            partition_id,
            incarnation,
            current_offset,
            message_count,
            lengths,
            bytes,
        } => {
            let total: u64 = lengths.iter().map(|l| u64::from(*l)).sum();
            if total != bytes.len() as u64 {
                return None;
            }
            let all = Bytes::from(bytes);
            let mut at = 0usize;
            let batches = lengths
                .iter()
                .map(|l| {
                    let b = all.slice(at..at + *l as usize);
                    at += *l as usize;
                    b
                })
                .collect();
            ReadAnswer::Polled(Polled {
                partition_id,
                incarnation,
                current_offset,
                batches,
                message_count,
            })
        }
        WireAnswer::Offset(o) => ReadAnswer::Offset(o),
        WireAnswer::Numbers(n) => ReadAnswer::Numbers(n.map(|n| PartitionInfo {
            identity,
            fence: None,
            segment_starts: n.segment_starts,
            log_start: n.log_start,
            visible_next_offset: n.visible_next_offset,
            durable_next_offset: n.durable_next_offset,
            sealed: n.sealed,
            stored_bytes: n.stored_bytes,
        })),
    })
}

impl PartGroups {
    /// Whether this member serves group `name`'s reads from its own copy: its replica
    /// runs here and is a voter of the configuration it knows (a learner still filling,
    /// or a replica its group left out while it was down, reads elsewhere).
    pub(in crate::partition) fn keeps(&self, name: GroupName) -> bool {
        let Some(raft) = self.group(name) else {
            return false;
        };
        let metrics = raft.metrics();
        let metrics = metrics.borrow_watched();
        let id = metrics.id;
        let mut voters = metrics.membership_config.membership().voter_ids();
        voters.any(|v| v == id)
    }

    /// `read` of partition `identity` at a member that keeps a copy (the module doc's
    /// table); of this member's own copy only when no member is known to keep one (the
    /// metadata's voters not known yet).
    pub(in crate::partition) async fn read_elsewhere(
        self,
        identity: PartitionIdentity,
        read: ReadElsewhere,
    ) -> NodeResult<ReadAnswer> {
        let name = crate::partition::net::group_name(&identity);
        let wire = read_to_wire(read);
        let placed = self.placed_voters(name);
        // A leader's member may be one the group is no longer placed on (it leads until
        // it hands the group over).
        let voters = self.meta().status().voters;
        let me = member_of(self.me());
        let mut asked = 0;
        let mut redirect: Option<MemberId> = None;
        let mut order = placed.iter().filter(|(v, _)| member_of(**v) != me);
        let mut last = String::from("no member with a copy answered");
        while asked < placed.len() + 1 {
            asked += 1;
            let hinted = redirect.take();
            let target = hinted
                .and_then(|m| voters.iter().find(|(v, _)| member_of(**v) == m))
                .or_else(|| order.next());
            let Some((&voter, peer)) = target else { break };
            let envelope = PartEnvelope {
                from: self.me(),
                to: u64::from(member_of(voter)) << 32,
                rpc: PartRpc::Read(wire),
            };
            let reply = self.networks().call(peer, name, &envelope, FORWARD_LIMIT);
            match reply.await {
                Ok(PartReply::Read(ReadReply::Read(answer))) => {
                    let read = answer_of(answer, identity).ok_or_else(|| {
                        NodeError::Undecided("a peer's read does not add up".into())
                    })?;
                    self.counts()
                        .read_elsewhere
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(read);
                }
                Ok(PartReply::Read(ReadReply::Leader(m))) if m != me => redirect = Some(m),
                Ok(PartReply::Read(ReadReply::Failed(why))) => last = why,
                Ok(_) => last = format!("member {} runs no replica of it", member_of(voter)),
                Err(e) => last = format!("member {}: {e}", member_of(voter)),
            }
        }
        if placed.is_empty() {
            return self.node().read_here(identity, read).await;
        }
        // Never this member's own copy, which may be stale or empty.
        Err(NodeError::Undecided(format!(
            "partition {identity} was not read at a member with a copy: {last}"
        )))
    }

    /// A peer's [`PartRpc::Read`] of group `name`, whose replica here is `raft`.
    pub(super) async fn answer_read(
        &self,
        (name, raft): (GroupName, &crate::partition::PartRaft),
        wire: WireRead,
    ) -> PartReply {
        let leader = raft.metrics().borrow_watched().current_leader;
        if let Some(l) = leader.filter(|l| *l != id_of(raft)) {
            return PartReply::Read(ReadReply::Leader(member_of(l)));
        }
        let identity = crate::partition::net::identity_of(name);
        match self.node().read_here(identity, read_of(wire)).await {
            Ok(answer) => PartReply::Read(ReadReply::Read(answer_to_wire(answer))),
            Err(e) => PartReply::Read(ReadReply::Failed(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_and_its_answer_cross_the_wire_unchanged() {
        let reads = [
            ReadElsewhere::Poll {
                from: PollFrom::Next(ConsumerId::group(4)),
                count: 10,
                max_bytes: 100,
            },
            ReadElsewhere::Poll {
                from: PollFrom::Timestamp(7),
                count: 1,
                max_bytes: u64::MAX,
            },
            ReadElsewhere::Offset(ConsumerId::consumer(3)),
            ReadElsewhere::Numbers,
        ];
        for read in reads {
            let back = read_of(read_to_wire(read));
            match (read, back) {
                // The bytes a peer is asked for are bounded.
                (
                    ReadElsewhere::Poll { max_bytes: a, .. },
                    ReadElsewhere::Poll { max_bytes: b, .. },
                ) => assert_eq!(b, a.min(READ_BUDGET)),
                (a, b) => assert_eq!(a, b),
            }
        }
        let identity = PartitionIdentity {
            stream_id: 1,
            topic_id: 2,
            partition_id: 3,
            nonce: 9,
        };
        let polled = ReadAnswer::Polled(Polled {
            partition_id: 3,
            incarnation: 9,
            current_offset: Some(5),
            batches: vec![Bytes::from_static(b"abc"), Bytes::from_static(b"de")],
            message_count: 4,
        });
        let wire = answer_to_wire(polled.clone());
        assert_eq!(answer_of(wire.clone(), identity), Some(polled));
        // Lengths that do not add up are refused, not sliced past the end.
        let WireAnswer::Polled { mut lengths, .. } = wire.clone() else {
            unreachable!()
        };
        lengths[1] = 9;
        let bad = match wire {
            WireAnswer::Polled {
                partition_id,
                incarnation,
                current_offset,
                message_count,
                bytes,
                ..
            } => WireAnswer::Polled {
                partition_id,
                incarnation,
                current_offset,
                message_count,
                lengths,
                bytes,
            },
            other => other,
        };
        assert_eq!(answer_of(bad, identity), None);
    }
}

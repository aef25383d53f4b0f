//! How a member's node (its `Replicator`) and its metadata replica (its peers' partition
//! server, [`PartServe`]) reach its partition groups: through [`Installed`], a weak
//! reference. The groups hold the node and the replica, so a strong reference back would
//! be a cycle that keeps a stopped member's node, groups and disk alive for good (the
//! simulator's worlds leaked so, 0.7 MB a seed, until a 30-minute swarm ran out of memory).
//! The groups live as long as their `run` task (and whoever else holds them); past that,
//! sends are refused and peers' requests find no group.

use super::groups::{PartGroups, WeakGroups};
use super::net::{GroupName, PartEnvelope, PartReply, PartServe};
use crate::group::PartitionsLed;
use crate::rt::in_env;
use crate::types::MemberId;
use bytes::BytesMut;
use cairn_engine::env::BoxFuture;
use cairn_engine::error::NodeError;
use cairn_engine::node::{
    OffsetOrdered, OffsetWrite, ReadElsewhere, ReadFuture, Replicated, Replicator,
};
use cairn_engine::partition::PartitionIdentity;
use std::time::Duration;

/// A member's partition groups, as its node and its metadata replica reach them.
pub(super) struct Installed(pub(super) WeakGroups);

impl Installed {
    fn groups(&self) -> Option<PartGroups> {
        self.0.upgrade()
    }
}

impl Replicator for Installed {
    fn replicate(&self, partition: PartitionIdentity, batch: BytesMut) -> Replicated {
        match self.groups() {
            Some(groups) => {
                let env = groups.env().clone();
                Box::pin(in_env(&env, groups.send(partition, batch)))
            }
            None => Box::pin(async { Err(stopped()) }),
        }
    }

    fn order_offset(&self, partition: PartitionIdentity, write: OffsetWrite) -> OffsetOrdered {
        match self.groups() {
            Some(groups) => {
                let env = groups.env().clone();
                Box::pin(in_env(&env, groups.order_offset(partition, write)))
            }
            None => Box::pin(async { Err(stopped()) }),
        }
    }

    fn keeps(&self, partition: &PartitionIdentity) -> bool {
        let name = super::net::group_name(partition);
        self.groups().is_none_or(|groups| groups.keeps(name))
    }

    fn read_elsewhere(&self, partition: PartitionIdentity, read: ReadElsewhere) -> ReadFuture {
        match self.groups() {
            Some(groups) => {
                let env = groups.env().clone();
                Box::pin(in_env(&env, groups.read_elsewhere(partition, read)))
            }
            None => Box::pin(async { Err(stopped()) }),
        }
    }
}

fn stopped() -> NodeError {
    NodeError::Undecided("this member's partition groups have stopped".into())
}

impl PartServe for Installed {
    fn serve(&self, group: GroupName, envelope: PartEnvelope) -> BoxFuture<'_, PartReply> {
        match self.groups() {
            Some(groups) => Box::pin(async move { groups.serve_rpc(group, envelope).await }),
            None => Box::pin(async { PartReply::NoGroup }),
        }
    }

    fn hand_over(&self, limit: Duration) -> BoxFuture<'_, ()> {
        match self.groups() {
            Some(groups) => {
                let env = groups.env().clone();
                Box::pin(in_env(&env, groups.hand_over_all(limit)))
            }
            None => Box::pin(async {}),
        }
    }

    fn beat(&self, from: MemberId, body: &[u8]) -> Vec<u8> {
        self.groups()
            .map(|groups| groups.answer_beat(from, body))
            .unwrap_or_default()
    }

    fn partitions_led(&self) -> PartitionsLed {
        self.groups()
            .map(|groups| groups.partitions_led())
            .unwrap_or_default()
    }
}

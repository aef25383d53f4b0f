//! The judges: what checks each answer a caller got while the node ran, against the model
//! (the boot-time checks are in [`super::oracle`]). One file per area — metadata and logins
//! ([`meta`]), messages, offsets and groups ([`messages`]), the cleaners' deletions
//! ([`retention`]), a member's turns among its partitions ([`round_robin`]) — and here what they share: when an op started, whether a request by
//! name may have reached other entities, and which errors a known cause excuses.

mod messages;
mod meta;
mod retention;
mod round_robin;

pub(crate) use messages::{last_offset, GroupSeen};
pub(crate) use meta::names_that_do_not_resolve;
pub(crate) use round_robin::GroupPoll;

use super::NodeWorld;
use cairn_engine::node::{Failure, NodeError};
use cairn_engine::partition::PartitionError;

/// When an op started: the virtual time, and the model's op then.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Start {
    pub(crate) at: u64,
    pub(crate) model_op: u64,
}

/// The disk faults that return an error to the engine's call: a failed write, sync or
/// directory sync, no space, a failed read.
pub(crate) const IO_ERRORS: [cairn_faults::FaultKind; 5] = [
    cairn_faults::FaultKind::WriteError,
    cairn_faults::FaultKind::SyncError,
    cairn_faults::FaultKind::DirSyncError,
    cairn_faults::FaultKind::NoSpace,
    cairn_faults::FaultKind::ReadError,
];

impl NodeWorld {
    /// Whether a request that named its stream and topic by name may have reached other
    /// entities: a metadata op ran meanwhile (a rename, a deletion and a re-creation).
    pub(crate) fn names_moved(&self, started: Start) -> bool {
        self.model.op != started.model_op
            || !self.in_flight.is_empty()
            || !self.pending.is_empty()
            || !self.in_doubt.is_empty()
    }

    /// When a caller's op started, for judging its answer.
    pub(crate) fn start(&self) -> Start {
        Start {
            at: self.now(),
            model_op: self.model.op,
        }
    }

    /// Whether a `Stopped` answer has a cause: the node's own failure (which it then
    /// reports to its supervisor, and which needs a cause of its own: see
    /// [`NodeWorld::failure_has_cause`]), or the disk crashing under it. Outside a graceful
    /// shutdown (`exits`), `Stopped(Shutdown)` from a node that is up is an answer the node
    /// dropped: a wrong answer, never one in doubt.
    pub(crate) fn stopped_with_cause(&self, failure: &Failure) -> bool {
        if self.disk.is_crashed() {
            return true;
        }
        match failure {
            Failure::Shutdown => self.shutting_down,
            _ => self.node.as_ref().is_none_or(|n| n.failure().is_some()),
        }
    }

    /// Whether the node's `failure` has a cause the simulation injected since it booted: the
    /// disk crashed, it returned an I/O error ([`IO_ERRORS`]), or a graceful shutdown is
    /// under way and `failure` is the shutdown's (or its known side effect: shards close
    /// before the metadata owner, so an op whose directory work reaches a closed shard
    /// stops the node with "a shard stopped"). A node that stops with none of these failed
    /// on its own: a violation, not a restart.
    pub(crate) fn failure_has_cause(&self, failure: &Failure) -> bool {
        let shutdown_s = match failure {
            Failure::Shutdown => true,
            Failure::Work(e) => e.to_string().contains("a shard stopped"),
            _ => false,
        };
        (self.shutting_down && shutdown_s)
            || self.disk.is_crashed()
            || self
                .disk
                .records_since(self.faults_at_boot)
                .iter()
                .any(|r| IO_ERRORS.contains(&r.kind))
    }

    /// Whether an error to a caller of `s`/`t` has a cause the model knows of: a crash, a
    /// concurrent metadata op, a missing entity, an operator's removal, a full disk.
    pub(crate) fn excused(&self, error: &NodeError, s: u32, t: u32, started: Start) -> bool {
        use cairn_engine::partition::FenceReason;
        // Metadata changed (or may have) while the op ran.
        let racing = !self.in_flight.is_empty()
            || !self.pending.is_empty()
            || !self.in_doubt.is_empty()
            || self.model.op != started.model_op;
        let full = self.disk_full_until.is_some() || self.last_full >= started.at;
        match error {
            NodeError::Stopped(failure) => self.stopped_with_cause(failure),
            _ if self.disk.is_crashed() => true,
            NodeError::StreamNotFound(_) | NodeError::TopicNotFound { .. } => {
                racing || self.model.topic(s, t).is_none()
            }
            NodeError::PartitionNotFound { .. } => {
                racing
                    || self
                        .model
                        .topic(s, t)
                        .is_none_or(|t| t.partitions.is_empty())
            }
            NodeError::Partition(PartitionError::Fenced(FenceReason::DirectoryMissing {
                ..
            })) => self.removed.iter().any(|k| (k.0, k.1) == (s, t)),
            NodeError::Partition(PartitionError::NoSpace) => full,
            NodeError::Partition(PartitionError::Fenced(FenceReason::IoFailed { .. })) => full,
            NodeError::GroupNotFound { .. } | NodeError::NotAMember { .. } => racing,
            _ => false,
        }
    }
}

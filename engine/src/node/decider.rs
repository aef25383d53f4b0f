//! In a cluster, the node does not order its own metadata operations: the cluster decides
//! them, and every member's node applies the decided ops in the decided order.
//!
//! ```text
//!  Client::execute ─► Decider::decide (the cluster: propose on its leader, or forward)
//!                          │ committed, on every member
//!                          ▼
//!                     Node::apply_decided ─► MetaOwner (checked, journaled, applied as ever)
//! ```
//!
//! A decided op carries its decision (`metadata::journal::decision`: term and index) in
//! its journal entry and in the state (`MetaState::decided`); a decision at or below the
//! state's is answered [`NodeError::AlreadyDecided`] and never applied twice, so the
//! consensus log may hand a member entries again after a restart.

use super::meta_owner::{AdoptRequest, MetaReply, OpRequest, OwnerRequest};
use super::Node;
use crate::env::chan::oneshot;
use crate::error::{NodeError, NodeResult};
use crate::metadata::journal::Origin;
use crate::state::ops::MetaOp;
use crate::state::MetaState;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The answer to a decided op, once this member applied it.
pub type Decision = Pin<Box<dyn Future<Output = NodeResult<MetaReply>> + Send>>;

/// Done once this member applied every op decided before it was asked.
pub type Barrier = Pin<Box<dyn Future<Output = NodeResult<()>> + Send>>;

/// Who decides a clustered node's metadata ops.
pub trait Decider: Send + Sync {
    /// Has the cluster decide `op` (asked by `origin`), answering with the state machine's
    /// outcome once this member applied it (so the caller's next read here sees it).
    /// The decider keys the op (`origin.key`, `origin.asked_at`): one key per op, the same
    /// for each of its attempts (`state::proposals`).
    fn decide(&self, op: MetaOp, origin: Origin) -> Decision;

    /// Completes once this member has applied every op the cluster decided before the call
    /// (a read index): what the node's view then holds is at least as fresh as any answer
    /// the cluster gave before.
    fn barrier(&self) -> Barrier;
}

impl Node {
    /// Whether this node's metadata ops are decided by a cluster (`MetaSettings::cluster`).
    pub fn clustered(&self) -> bool {
        self.inner.settings.meta.cluster.is_some()
    }

    /// Installs who decides this clustered node's metadata ops (once).
    pub fn set_decider(&self, decider: Arc<dyn Decider>) {
        assert!(
            self.clustered(),
            "only a clustered node has its ops decided"
        );
        assert!(
            self.inner.decider.set(decider).is_ok(),
            "a node has one decider"
        );
    }

    pub(super) fn decider(&self) -> NodeResult<Arc<dyn Decider>> {
        self.inner.decider.get().cloned().ok_or_else(|| {
            NodeError::Undecided("this member's consensus replica has not started".into())
        })
    }

    /// Waits, on a clustered node, until its view holds every op the cluster decided before
    /// the call ([`Decider::barrier`]): a read that must be fresh (a login after a password
    /// change, a topic just made through another member) reads the view after it. A
    /// single node's view is always fresh.
    pub async fn fresh(&self) -> NodeResult<()> {
        if !self.clustered() {
            return Ok(());
        }
        self.decider()?.barrier().await
    }

    /// Applies an op the cluster decided (`origin.decided` its decision, `origin.timestamp`
    /// the proposing leader's clock), as the metadata owner applies any op.
    pub async fn apply_decided(&self, op: MetaOp, origin: Origin) -> NodeResult<MetaReply> {
        assert!(
            self.clustered(),
            "only a clustered node applies decided ops"
        );
        assert!(origin.decided != 0, "a decided op names its decision");
        self.check_running()?;
        let (reply, pending) = oneshot();
        let request = OpRequest { op, origin, reply };
        self.enqueue(&self.inner.meta, OwnerRequest::Op(request))
            .await?;
        self.answer(pending).await
    }

    /// Adopts `state`, the state after op `op` (whose prepare's checksum is `anchor`), in
    /// place of what the node holds: a clustered member too far behind for its leader's
    /// log is sent the leader's state whole. `false` when the node's state was as new
    /// already. Durable when answered; a node that stops midway finishes it at boot.
    pub async fn adopt(&self, op: u64, anchor: u128, state: MetaState) -> NodeResult<bool> {
        assert!(self.clustered(), "only a clustered node adopts a state");
        self.check_running()?;
        let (reply, pending) = oneshot();
        let request = AdoptRequest {
            op,
            anchor,
            state,
            reply,
        };
        self.enqueue(&self.inner.meta, OwnerRequest::Adopt(request))
            .await?;
        self.answer(pending).await?
    }
}

//! Optional hooks into the command path, for the simulator's deliberate bugs (TigerBeetle's
//! `on_checkpoint` style): every one is `None` in production, where the server keeps its
//! own rules; the simulator's canaries (`cairn_sim::canary`) set them to prove its oracle
//! catches what each would break.

use crate::handlers::Landed;
use crate::session::{Dedup, DedupKey, Revoked};
use bytes::{Bytes, BytesMut};
use cairn_engine::env::Tasks;
use cairn_engine::node::{Client, NodeResult};
use iggy_binary_protocol::{WireIdentifier, WirePartitioning, WirePermissions};

/// Answers an awaited send in place of the node's shard: (node, tasks, stream, topic,
/// partitioning, batch).
pub type SendHook = fn(
    &Client,
    &dyn Tasks,
    &WireIdentifier,
    &WireIdentifier,
    &WirePartitioning,
    BytesMut,
) -> NodeResult<Landed>;

/// The reply a retried request gets, given the session's duplicate table, the request's
/// identity, its cached reply and how to frame another reply body for it.
pub type DedupHitHook = fn(&Dedup, &DedupKey, Bytes, &dyn Fn(&[u8]) -> Bytes) -> Bytes;

/// Whether a session holds, given what its check judged.
pub type SessionCheckHook = fn(Result<(), Revoked>) -> Result<(), Revoked>;

/// The permissions a session acts with, given those the view holds for its user and
/// whether the user is in the view at all.
pub type PermissionsHook = fn(Option<WirePermissions>, bool) -> Option<WirePermissions>;

/// The server's hooks; [`Default`] is production (none).
#[derive(Clone, Copy, Default)]
pub struct ServerHooks {
    pub send: Option<SendHook>,
    pub dedup_hit: Option<DedupHitHook>,
    pub session_check: Option<SessionCheckHook>,
    pub permissions: Option<PermissionsHook>,
}

impl std::fmt::Debug for ServerHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHooks")
            .field("send", &self.send.is_some())
            .field("dedup_hit", &self.dedup_hit.is_some())
            .field("session_check", &self.session_check.is_some())
            .field("permissions", &self.permissions.is_some())
            .finish()
    }
}

impl ServerHooks {
    /// A session check's verdict, as the hook (if any) rewrites it.
    pub fn session_check(&self, judged: Result<(), Revoked>) -> Result<(), Revoked> {
        match self.session_check {
            Some(hook) => hook(judged),
            None => judged,
        }
    }

    /// The permissions a session acts with, as the hook (if any) rewrites them.
    pub fn permissions(
        &self,
        found: Option<WirePermissions>,
        user_exists: bool,
    ) -> Option<WirePermissions> {
        match self.permissions {
            Some(hook) => hook(found, user_exists),
            None => found,
        }
    }

    /// The cached reply of a retried request, as the hook (if any) rewrites it.
    pub fn dedup_hit(
        &self,
        dedup: &Dedup,
        key: &DedupKey,
        cached: Bytes,
        reframe: &dyn Fn(&[u8]) -> Bytes,
    ) -> Bytes {
        match self.dedup_hit {
            Some(hook) => hook(dedup, key, cached, reframe),
            None => cached,
        }
    }
}

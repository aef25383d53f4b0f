//! Optional hooks at the command layer's edges, for the simulator's deliberate bugs
//! (TigerBeetle's `on_checkpoint` style): every one is `None` in production, where the
//! command layer keeps its own rules; the simulator's canaries (`cairn_sim::canary`) set
//! them to prove its oracle catches what each would break. The binary protocol's duplicate
//! table has its own at its edge (`crate::tcp::dedup::DedupHitHook`).

use super::{Landed, Revoked};
use bytes::BytesMut;
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

/// Whether a session holds, given what its check judged.
pub type SessionCheckHook = fn(Result<(), Revoked>) -> Result<(), Revoked>;

/// The permissions a session acts with, given those the view holds for its user and
/// whether the user is in the view at all.
pub type PermissionsHook = fn(Option<WirePermissions>, bool) -> Option<WirePermissions>;

/// Whether a request body of this many bytes is read without taking its room in the
/// byte budget first (`true`: charged as it comes, never waiting).
pub type BodyRoomHook = fn(u64) -> bool;

/// The command layer's hooks; [`Default`] is production (none).
#[derive(Clone, Copy, Default)]
pub struct CommandHooks {
    pub send: Option<SendHook>,
    pub session_check: Option<SessionCheckHook>,
    pub permissions: Option<PermissionsHook>,
    pub body_room: Option<BodyRoomHook>,
}

impl std::fmt::Debug for CommandHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandHooks")
            .field("send", &self.send.is_some())
            .field("session_check", &self.session_check.is_some())
            .field("permissions", &self.permissions.is_some())
            .field("body_room", &self.body_room.is_some())
            .finish()
    }
}

impl CommandHooks {
    /// A session check's verdict, as the hook (if any) rewrites it.
    pub fn session_check(&self, judged: Result<(), Revoked>) -> Result<(), Revoked> {
        match self.session_check {
            Some(hook) => hook(judged),
            None => judged,
        }
    }

    /// Whether a body of `bytes` skips its room in the budget (never, without a hook).
    pub fn body_skips_room(&self, bytes: u64) -> bool {
        self.body_room.is_some_and(|hook| hook(bytes))
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
}

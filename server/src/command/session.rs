//! A connection's login: the protocol client id and session number it was given, the user
//! it acts as, and the node caller that carries its client id (group memberships are keyed by
//! it). A session is bound to its user's incarnation and password: user ids are reused, so a
//! deleted user's id may come back as someone else's; a deactivated user, or one whose
//! password changed, loses access at its next request ([`Session::still_valid`]). A session
//! that logged in with a personal access token is bound to that token instead of the
//! password: it loses access once the token is deleted or expires.

use super::hooks::CommandHooks;
use super::status::{codes, Status};
use super::Context;
use cairn_engine::node::{Client, MetaView};
use cairn_engine::state::tokens::TokenHash;

pub struct Session {
    /// The protocol client id of this login (header.client of the Register).
    pub client: u128,
    pub session: u64,
    /// The caller's address (TCP: the one it logged in from; HTTP: the current request's):
    /// a password it checks later (ChangePassword) is counted by the login limit there.
    pub peer: std::net::IpAddr,
    pub user_id: u32,
    /// The op that created the user this session acts as.
    pub incarnation: u64,
    /// The user's password hash at login: a changed password ends a password session.
    pub password_hash: String,
    /// The hash of the personal access token it logged in with, if it did: the session
    /// lasts as long as the token (a password change does not end it).
    pub token: Option<TokenHash>,
    /// The node caller for this login (its id is `client`).
    pub node: Client,
}

/// Why a session no longer grants access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    Deleted,
    Deactivated,
    PasswordChanged,
    TokenDeleted,
    TokenExpired,
}

impl Session {
    /// Whether the user this session acts as still exists as the same incarnation, is active
    /// and has the password it logged in with, or still holds the token it logged in with,
    /// unexpired at wall-clock `now` (µs).
    pub fn still_valid(&self, view: &MetaView, now: u64) -> Result<(), Revoked> {
        let Some(user) = view
            .user(self.user_id)
            .filter(|u| u.created_op == self.incarnation)
        else {
            return Err(Revoked::Deleted);
        };
        if !user.is_active() {
            return Err(Revoked::Deactivated);
        }
        if let Some(hash) = &self.token {
            return match view.token_by_hash(hash) {
                Some((owner, _, token)) if owner.id == user.id => {
                    if token.is_expired(now) {
                        Err(Revoked::TokenExpired)
                    } else {
                        Ok(())
                    }
                }
                _ => Err(Revoked::TokenDeleted),
            };
        }
        if user.password_hash != self.password_hash {
            return Err(Revoked::PasswordChanged);
        }
        Ok(())
    }

    /// The user's permissions, decoded (`None` for root or a user without any), as `hooks`
    /// (the simulator's; none in production) leave them.
    pub fn permissions(
        &self,
        view: &MetaView,
        hooks: &CommandHooks,
    ) -> Option<iggy_binary_protocol::WirePermissions> {
        use iggy_binary_protocol::WireDecode;
        let user = view.user(self.user_id);
        let found = user
            .and_then(|u| u.permissions.as_ref())
            .and_then(|bytes| iggy_binary_protocol::WirePermissions::decode(bytes).ok())
            .map(|(p, _)| p);
        hooks.permissions(found, user.is_some())
    }
}

/// Refuses (40, naming why) unless `session` still grants access on `view`, at the clock's
/// wall time.
pub fn check(cx: &Context, session: &Session, view: &MetaView) -> Result<(), Status> {
    let now = cx.env.clock.wall_micros();
    (cx.hooks)
        .session_check(session.still_valid(view, now))
        .map_err(|why| {
            Status::because(
                codes::UNAUTHENTICATED,
                format!("the session's access was revoked: {why:?}"),
            )
        })
}

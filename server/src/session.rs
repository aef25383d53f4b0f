//! A connection's login: the protocol client id and session number it was given, the user
//! it acts as, and the node caller that carries its client id (group memberships are keyed by
//! it). A session is bound to its user's incarnation and password: user ids are reused, so a
//! deleted user's id may come back as someone else's; a deactivated user, or one whose
//! password changed, loses access at its next request ([`Session::still_valid`]). A session
//! that logged in with a personal access token is bound to that token instead of the
//! password: it loses access once the token is deleted or expires.
//!
//! Also the duplicate table of SPEC §3: metadata operations only, keyed on (client, request,
//! request checksum), bounded; never partition operations (trap T9: the snapshot SDK sends
//! every partition op with the same request number).

use cairn_engine::node::{Client, MetaView};
use cairn_engine::state::tokens::TokenHash;
use std::collections::{BTreeMap, VecDeque};

/// Most cached metadata replies one connection keeps for retried requests.
pub const DEDUP_ENTRIES: usize = 64;

pub struct Session {
    /// The protocol client id of this login (header.client of the Register).
    pub client: u128,
    pub session: u64,
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
    pub dedup: Dedup,
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
        hooks: &crate::hooks::ServerHooks,
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

/// A request's identity for duplicate detection.
pub type DedupKey = (u128, u64, u128);

/// The last [`DEDUP_ENTRIES`] metadata replies of one connection, by request identity.
#[derive(Default)]
pub struct Dedup {
    replies: BTreeMap<DedupKey, bytes::Bytes>,
    order: VecDeque<DedupKey>,
}

impl Dedup {
    pub fn get(&self, key: &DedupKey) -> Option<bytes::Bytes> {
        self.replies.get(key).cloned()
    }

    pub fn insert(&mut self, key: DedupKey, reply: bytes::Bytes) {
        if self.replies.insert(key, reply).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > DEDUP_ENTRIES {
            let oldest = self.order.pop_front().expect("nonempty");
            self.replies.remove(&oldest);
        }
        assert_eq!(self.order.len(), self.replies.len());
        assert!(self.replies.len() <= DEDUP_ENTRIES);
    }

    pub fn len(&self) -> usize {
        self.replies.len()
    }

    /// The newest reply cached for a request other than `key` (a simulator canary's wrong
    /// answer, through [`crate::hooks::ServerHooks::dedup_hit`]).
    pub fn newest_except(&self, key: &DedupKey) -> Option<bytes::Bytes> {
        let other = self.order.iter().rev().find(|k| *k != key)?;
        self.replies.get(other).cloned()
    }

    pub fn is_empty(&self) -> bool {
        self.replies.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dedup_table_answers_only_the_same_request_and_stays_bounded() {
        let mut dedup = Dedup::default();
        dedup.insert((1, 1, 9), bytes::Bytes::from_static(b"a"));
        assert_eq!(dedup.get(&(1, 1, 9)).unwrap(), &b"a"[..]);
        // Another body under the same request number is another request.
        assert_eq!(dedup.get(&(1, 1, 8)), None);
        assert_eq!(dedup.get(&(2, 1, 9)), None);
        for r in 2..200 {
            dedup.insert((1, r, 9), bytes::Bytes::from_static(b"b"));
        }
        assert_eq!(dedup.len(), DEDUP_ENTRIES);
        assert_eq!(dedup.get(&(1, 1, 9)), None);
        assert!(dedup.get(&(1, 199, 9)).is_some());
    }
}

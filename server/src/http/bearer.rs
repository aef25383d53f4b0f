//! HTTP bearer tokens: signed, expiring, revocable. Sans-IO: issuing and checking are pure
//! functions of the key, the claims and the time; the revocation list is a bounded set.
//!
//! A token is `base64url(claims ‖ mac)`: 53 bytes of claims, then the 32-byte keyed BLAKE3
//! of them under the server's signing key. The claims bind the token to what the session
//! check compares against the metadata view, so a token stops working when its user is
//! deleted (the incarnation is gone), deactivated, or changes password (the fingerprint
//! differs), or when the personal access token it was issued for is deleted or expires:
//!
//! ```text
//! 0 version u8 = 1 | 1 user_id u32 | 5 incarnation u64 | 13 password fingerprint u64 |
//! 21 token id u64 | 29 personal access token fingerprint u64 (0: a password login) |
//! 37 issued at u64 (unix s) | 45 expires at u64 (unix s)
//! ```

use base64::Engine;
use std::collections::BTreeMap;
use std::sync::Mutex;

const VERSION: u8 = 1;
const CLAIMS_LEN: usize = 53;
const MAC_LEN: usize = 32;
/// The encoded length of every token this version issues.
pub const TOKEN_CHARS: usize = ((CLAIMS_LEN + MAC_LEN) * 4).div_ceil(3);

/// What a token asserts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claims {
    pub user_id: u32,
    /// The op that created the user (ids are reused; incarnations are not).
    pub incarnation: u64,
    /// [`fingerprint`] of the user's password hash at login.
    pub password: u64,
    /// Unique per login; a refreshed token keeps it: what logout revokes (every token of
    /// the login at once).
    pub token_id: u64,
    /// [`fingerprint`] of the personal access token's hash it was issued for, or 0.
    pub personal_access_token: u64,
    pub issued_at: u64,
    pub expires_at: u64,
}

/// Why a presented token grants nothing (every case answers 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the access token is malformed")]
    Malformed,
    #[error("the access token's signature does not match")]
    BadSignature,
    #[error("the access token expired at {expired_at} (unix s)")]
    Expired { expired_at: u64 },
    #[error("the access token was revoked by a logout")]
    Revoked,
}

/// A 64-bit fingerprint of a secret's stored hash (never of a secret itself).
pub fn fingerprint(stored_hash: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(stored_hash.as_bytes()).max(1)
}

/// The server's signing key.
#[derive(Clone)]
pub struct SigningKey([u8; 32]);

impl SigningKey {
    /// A key derived from a secret (tests: a fixed key).
    #[cfg(test)]
    pub fn from_secret(secret: &str) -> SigningKey {
        SigningKey(blake3::derive_key(
            "cairn 2026 http bearer token key",
            secret.as_bytes(),
        ))
    }

    /// A key from 32 random bytes (tokens die with the process).
    pub fn from_bytes(bytes: [u8; 32]) -> SigningKey {
        SigningKey(bytes)
    }

    fn mac(&self, claims: &[u8; CLAIMS_LEN]) -> blake3::Hash {
        blake3::keyed_hash(&self.0, claims)
    }

    /// The token for `claims`.
    pub fn issue(&self, claims: &Claims) -> String {
        let body = encode(claims);
        let mut bytes = Vec::with_capacity(CLAIMS_LEN + MAC_LEN);
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(self.mac(&body).as_bytes());
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        debug_assert_eq!(token.len(), TOKEN_CHARS);
        token
    }

    /// The claims of a token this key signed, if it has not expired by `now` (unix s).
    pub fn verify(&self, token: &str, now: u64) -> Result<Claims, TokenError> {
        if token.len() != TOKEN_CHARS {
            return Err(TokenError::Malformed);
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| TokenError::Malformed)?;
        if bytes.len() != CLAIMS_LEN + MAC_LEN {
            return Err(TokenError::Malformed);
        }
        let body: [u8; CLAIMS_LEN] = bytes[..CLAIMS_LEN].try_into().expect("length checked");
        let mac: [u8; MAC_LEN] = bytes[CLAIMS_LEN..].try_into().expect("length checked");
        // `blake3::Hash` compares in constant time.
        if self.mac(&body) != blake3::Hash::from_bytes(mac) {
            return Err(TokenError::BadSignature);
        }
        let claims = decode(&body).ok_or(TokenError::Malformed)?;
        if now >= claims.expires_at {
            return Err(TokenError::Expired {
                expired_at: claims.expires_at,
            });
        }
        Ok(claims)
    }
}

fn encode(c: &Claims) -> [u8; CLAIMS_LEN] {
    let mut out = [0u8; CLAIMS_LEN];
    out[0] = VERSION;
    out[1..5].copy_from_slice(&c.user_id.to_le_bytes());
    let words = [
        c.incarnation,
        c.password,
        c.token_id,
        c.personal_access_token,
        c.issued_at,
        c.expires_at,
    ];
    for (i, word) in words.iter().enumerate() {
        out[5 + 8 * i..13 + 8 * i].copy_from_slice(&word.to_le_bytes());
    }
    out
}

fn decode(b: &[u8; CLAIMS_LEN]) -> Option<Claims> {
    if b[0] != VERSION {
        return None;
    }
    let word = |i: usize| u64::from_le_bytes(b[5 + 8 * i..13 + 8 * i].try_into().expect("8"));
    Some(Claims {
        user_id: u32::from_le_bytes(b[1..5].try_into().expect("4")),
        incarnation: word(0),
        password: word(1),
        token_id: word(2),
        personal_access_token: word(3),
        issued_at: word(4),
        expires_at: word(5),
    })
}

/// Logins ended by a logout, by token id (a refreshed token keeps its login's id), each kept
/// until every token of that login has expired. Bounded twice: at most
/// [`Revocations::PER_USER`] live entries per user (one user's logouts cannot block
/// another's) and [`Revocations::LIMIT`] in all; past either, that logout is refused (the
/// caller answers 503) rather than a revocation forgotten.
#[derive(Default)]
pub struct Revocations {
    inner: Mutex<RevocationsInner>,
}

#[derive(Default)]
struct RevocationsInner {
    /// token id → (user id, until: unix s).
    ended: BTreeMap<u64, (u32, u64)>,
    per_user: BTreeMap<u32, usize>,
}

impl RevocationsInner {
    fn forget_expired(&mut self, now: u64) {
        let per_user = &mut self.per_user;
        self.ended.retain(|_, (user, until)| {
            let live = *until > now;
            if !live {
                let count = per_user.get_mut(user).expect("counted");
                *count -= 1;
                if *count == 0 {
                    per_user.remove(user);
                }
            }
            live
        });
    }
}

impl Revocations {
    pub const LIMIT: usize = 100_000;
    pub const PER_USER: usize = 1_000;

    /// Ends `claims`' login until `until` (unix s); `false` when a bound is reached.
    pub fn revoke(&self, claims: &Claims, until: u64, now: u64) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.ended.contains_key(&claims.token_id) {
            return true;
        }
        let full = |inner: &RevocationsInner| {
            inner.ended.len() >= Self::LIMIT
                || inner.per_user.get(&claims.user_id).copied().unwrap_or(0) >= Self::PER_USER
        };
        if full(&inner) {
            inner.forget_expired(now);
        }
        if full(&inner) {
            return false;
        }
        inner.ended.insert(claims.token_id, (claims.user_id, until));
        *inner.per_user.entry(claims.user_id).or_default() += 1;
        assert!(inner.ended.len() <= Self::LIMIT);
        assert_eq!(inner.per_user.values().sum::<usize>(), inner.ended.len());
        true
    }

    pub fn is_revoked(&self, claims: &Claims) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.ended.contains_key(&claims.token_id)
    }

    pub fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.ended.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn claims() -> Claims {
        Claims {
            user_id: 7,
            incarnation: 42,
            password: fingerprint("$argon2id$..."),
            token_id: 99,
            personal_access_token: 0,
            issued_at: 1_000,
            expires_at: 4_600,
        }
    }

    #[test]
    fn a_token_round_trips_until_it_expires() {
        let key = SigningKey::from_secret("s3cret");
        let token = key.issue(&claims());
        assert_eq!(token.len(), TOKEN_CHARS);
        assert_eq!(key.verify(&token, 1_000), Ok(claims()));
        assert_eq!(key.verify(&token, 4_599), Ok(claims()));
        assert_eq!(
            key.verify(&token, 4_600),
            Err(TokenError::Expired { expired_at: 4_600 })
        );
    }

    #[test]
    fn another_key_or_garbage_is_refused() {
        let token = SigningKey::from_secret("a").issue(&claims());
        let other = SigningKey::from_secret("b");
        assert_eq!(other.verify(&token, 1), Err(TokenError::BadSignature));
        assert_eq!(other.verify("", 1), Err(TokenError::Malformed));
        assert_eq!(other.verify("not a token", 1), Err(TokenError::Malformed));
        let padded = "A".repeat(TOKEN_CHARS);
        assert_eq!(other.verify(&padded, 1), Err(TokenError::BadSignature));
    }

    proptest! {
        /// Any change to any byte of a token makes it worthless.
        #[test]
        fn a_tampered_token_never_verifies(at in 0usize..TOKEN_CHARS, to in 0u8..64) {
            let key = SigningKey::from_secret("k");
            let token = key.issue(&claims());
            let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
            let mut bytes = token.clone().into_bytes();
            prop_assume!(bytes[at] != alphabet[to as usize]);
            bytes[at] = alphabet[to as usize];
            let tampered = String::from_utf8(bytes).unwrap();
            prop_assert!(key.verify(&tampered, 1_000).is_err());
        }
    }

    #[test]
    fn revocations_hold_until_expiry_and_stay_bounded_per_user() {
        let list = Revocations::default();
        let c = claims();
        assert!(!list.is_revoked(&c));
        assert!(list.revoke(&c, 5_000, 1_000));
        assert!(list.is_revoked(&c));
        // One user fills its share with live entries: its next logout is refused, not
        // forgotten, and another user's logout still works.
        for id in 1..Revocations::PER_USER as u64 {
            assert!(list.revoke(
                &Claims {
                    token_id: 1_000_000 + id,
                    ..c
                },
                5_000,
                1_000
            ));
        }
        assert_eq!(list.len(), Revocations::PER_USER);
        assert!(!list.revoke(&Claims { token_id: 5, ..c }, 5_000, 1_000));
        assert!(list.is_revoked(&c));
        let other_user = Claims {
            user_id: 8,
            token_id: 6,
            ..c
        };
        assert!(list.revoke(&other_user, 5_000, 1_000));
        // Once they expired, room returns.
        assert!(list.revoke(&Claims { token_id: 5, ..c }, 9_000, 6_000));
        assert!(!list.is_revoked(&c));
        assert_eq!(list.len(), 1);
    }
}

//! Passwords: argon2id hashing and verification, always on the blocking pool (tens of
//! milliseconds of CPU each at production cost), never on an owner or a socket thread.
//!
//! Login reads the user from the published view. An unknown username is verified against a
//! fixed dummy hash of the same cost, so it costs the same work as a wrong password and
//! gets the same answer ([`NodeError::InvalidCredentials`]): the answer does not tell which
//! usernames exist. An inactive user is refused ([`NodeError::UserInactive`]). A login
//! binds to the user's incarnation (the op that created it), since ids are reused.
//!
//! A password verified once is remembered ([`VerifiedLogins`]): a later login with the same
//! password against the same stored hash is answered without argon2. Only successes are
//! remembered, so a wrong password, an unknown user and a changed password (a new hash,
//! with a new salt) still cost a verification; a hit answers faster only someone who sent
//! the right password. A client pool reconnecting (64 producers logging in as one user)
//! pays one verification, not 64 (each tens of milliseconds of CPU).
//!
//! A personal access token logs in by its hash ([`token_login`]: BLAKE3, no pool needed):
//! unknown is [`NodeError::InvalidToken`], past its expiry by the environment's wall clock
//! [`NodeError::TokenExpired`], of an inactive user [`NodeError::UserInactive`].

use super::view::ViewCell;
use super::NodeStats;
use super::PasswordCost;
use crate::env::{run_blocking, Env};
use crate::error::{NodeError, NodeResult};
use crate::state::tokens::hash_token;
use crate::state::MetaState;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

/// Most verified logins remembered; past it the oldest is forgotten.
pub const MAX_VERIFIED_LOGINS: usize = 1024;

/// Who logged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    pub user_id: u32,
    /// The op that created the user: a session is bound to it, not only to the id.
    pub incarnation: u64,
    /// The password hash the login was checked against (for a token, the user's hash when
    /// the token was checked): a session is bound to it, so a password change that lands
    /// while the login completes still ends the session.
    pub password_hash: String,
}

pub(crate) struct Auth {
    cost: PasswordCost,
    /// A hash of a password nobody has, at the configured cost (made on first use).
    dummy: Arc<OnceLock<String>>,
    verified: VerifiedLogins,
}

/// Passwords verified lately, each as a BLAKE3 digest keyed by a secret drawn at boot over
/// the stored hash it matched and the password: never the password itself, and a digest
/// that matches only the same password against the same stored hash (a password change
/// makes a new hash, so every digest of the old one stops matching). At most
/// [`MAX_VERIFIED_LOGINS`], oldest forgotten first.
pub(crate) struct VerifiedLogins {
    key: [u8; 32],
    digests: Mutex<(BTreeSet<Digest>, VecDeque<Digest>)>,
}

/// A remembered login's digest.
type Digest = [u8; 32];

impl VerifiedLogins {
    pub(crate) fn new(key: [u8; 32]) -> VerifiedLogins {
        VerifiedLogins {
            key,
            digests: Mutex::default(),
        }
    }

    fn digest(&self, hash: &str, password: &str) -> Digest {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        hasher.update(&(hash.len() as u64).to_le_bytes());
        hasher.update(hash.as_bytes());
        hasher.update(password.as_bytes());
        *hasher.finalize().as_bytes()
    }

    pub(crate) fn contains(&self, hash: &str, password: &str) -> bool {
        let digest = self.digest(hash, password);
        let digests = self.digests.lock().unwrap_or_else(|p| p.into_inner());
        digests.0.contains(&digest)
    }

    /// Remembers that `password` matched `hash` (argon2 said so).
    pub(crate) fn remember(&self, hash: &str, password: &str) {
        let digest = self.digest(hash, password);
        let mut digests = self.digests.lock().unwrap_or_else(|p| p.into_inner());
        let (set, order) = &mut *digests;
        if !set.insert(digest) {
            return;
        }
        order.push_back(digest);
        if order.len() > MAX_VERIFIED_LOGINS {
            let oldest = order.pop_front().expect("over the bound");
            set.remove(&oldest);
        }
        assert!(
            set.len() == order.len() && set.len() <= MAX_VERIFIED_LOGINS,
            "every remembered digest once, within the bound"
        );
    }
}

fn argon(cost: PasswordCost) -> NodeResult<argon2::Argon2<'static>> {
    let params = argon2::Params::new(cost.memory_kib, cost.iterations, 1, None)
        .map_err(|e| NodeError::InvalidPassword(format!("hash parameters: {e}")))?;
    Ok(argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        params,
    ))
}

fn hash_with(cost: PasswordCost, password: &str, salt: [u8; 16]) -> NodeResult<String> {
    let salt = SaltString::encode_b64(&salt).expect("16 bytes make a salt");
    let hash = argon(cost)?
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| NodeError::InvalidPassword(e.to_string()))?
        .to_string();
    assert!(
        hash.len() <= crate::state::MAX_PASSWORD_HASH_LEN,
        "a PHC string fits the wire's password field"
    );
    Ok(hash)
}

/// Whether `password` matches the PHC string `hash` (its own parameters).
fn verify(hash: &str, password: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

fn pool_busy(_: crate::env::PoolBusy) -> NodeError {
    NodeError::Busy("the password hashing pool")
}

impl Auth {
    /// `key`: the secret the remembered logins' digests are keyed by (drawn at boot).
    pub(crate) fn new(cost: PasswordCost, key: [u8; 32]) -> Auth {
        Auth {
            cost,
            dummy: Arc::new(OnceLock::new()),
            verified: VerifiedLogins::new(key),
        }
    }

    /// Makes the dummy hash (on the pool) so that the first unknown-user login costs no
    /// more than any other.
    pub(crate) async fn prepare(&self, env: &Env) {
        let (dummy, cost) = (self.dummy.clone(), self.cost);
        let _ = run_blocking(env.tasks.as_ref(), move || {
            dummy.get_or_init(|| {
                hash_with(cost, "\u{0}no user has this password", [7; 16])
                    .expect("the configured cost hashes")
            });
        })
        .await;
    }

    /// Hashes a new password (3 to 100 bytes) with a salt from the environment's entropy.
    pub(crate) async fn hash(&self, env: &Env, password: &str) -> NodeResult<String> {
        if !(3..=100).contains(&password.len()) {
            return Err(NodeError::InvalidPassword("3 to 100 bytes".into()));
        }
        let mut salt = [0u8; 16];
        salt[..8].copy_from_slice(&env.entropy.next_u64().to_le_bytes());
        salt[8..].copy_from_slice(&env.entropy.next_u64().to_le_bytes());
        let (cost, password) = (self.cost, password.to_owned());
        run_blocking(env.tasks.as_ref(), move || hash_with(cost, &password, salt))
            .await
            .map_err(pool_busy)?
    }

    pub(crate) async fn login(
        &self,
        env: &Env,
        view: &ViewCell,
        stats: &NodeStats,
        username: &str,
        password: &str,
    ) -> NodeResult<Login> {
        let before = view.load();
        let user = before.user_by_name(username).cloned();
        let (hash, dummy, cost) = match &user {
            Some(u) => (Some(u.password_hash.clone()), self.dummy.clone(), self.cost),
            None => (None, self.dummy.clone(), self.cost),
        };
        let remembered = hash
            .as_deref()
            .is_some_and(|hash| self.verified.contains(hash, password));
        let matched = if remembered {
            stats.remembered_logins.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            let (checked, password_owned) = (hash.clone(), password.to_owned());
            let matched = run_blocking(env.tasks.as_ref(), move || {
                let hash = match checked {
                    Some(hash) => hash,
                    None => dummy
                        .get_or_init(|| {
                            hash_with(cost, "\u{0}no user has this password", [7; 16])
                                .expect("the configured cost hashes")
                        })
                        .clone(),
                };
                verify(&hash, &password_owned)
            })
            .await
            .map_err(pool_busy)?;
            stats.argon2_checks.fetch_add(1, Ordering::Relaxed);
            if let (true, Some(hash)) = (matched, &hash) {
                self.verified.remember(hash, password);
            }
            matched
        };
        let Some(user) = user.filter(|_| matched) else {
            return Err(NodeError::InvalidCredentials);
        };
        // The user may have changed while the hash was checked: only the incarnation and
        // password that were verified count.
        let now = view.load();
        let current = now
            .user(user.id)
            .filter(|u| u.created_op == user.created_op && u.password_hash == user.password_hash);
        let Some(current) = current else {
            return Err(NodeError::InvalidCredentials);
        };
        if !current.is_active() {
            return Err(NodeError::UserInactive(current.id));
        }
        Ok(Login {
            user_id: current.id,
            incarnation: current.created_op,
            // The hash the password was verified against (equal to the current one here).
            password_hash: user.password_hash.clone(),
        })
    }
}

/// Who the raw token `raw` logs in as in `state`, at wall-clock `now` (µs).
pub fn token_login(state: &MetaState, raw: &str, now: u64) -> NodeResult<Login> {
    let Some((user, name, token)) = state.token_by_hash(&hash_token(raw)) else {
        return Err(NodeError::InvalidToken);
    };
    if token.is_expired(now) {
        return Err(NodeError::TokenExpired {
            user: user.id,
            name: name.into(),
        });
    }
    if !user.is_active() {
        return Err(NodeError::UserInactive(user.id));
    }
    Ok(Login {
        user_id: user.id,
        incarnation: user.created_op,
        password_hash: user.password_hash.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::{VerifiedLogins, MAX_VERIFIED_LOGINS};

    #[test]
    fn a_remembered_login_matches_only_its_hash_and_password_and_the_oldest_goes_first() {
        let verified = VerifiedLogins::new([9; 32]);
        verified.remember("$hash-a", "secret");
        assert!(verified.contains("$hash-a", "secret"));
        assert!(
            !verified.contains("$hash-b", "secret"),
            "another stored hash"
        );
        assert!(!verified.contains("$hash-a", "secreT"), "another password");
        // The stored hash's length is part of the digest: no shifting bytes across.
        assert!(!verified.contains("$hash-as", "ecret"));
        assert!(
            !VerifiedLogins::new([8; 32]).contains("$hash-a", "secret"),
            "another boot's key"
        );
        for i in 0..MAX_VERIFIED_LOGINS {
            verified.remember("$hash-c", &format!("password {i}"));
        }
        assert!(
            !verified.contains("$hash-a", "secret"),
            "the oldest forgotten"
        );
        assert!(verified.contains("$hash-c", "password 0"));
        assert!(verified.contains("$hash-c", &format!("password {}", MAX_VERIFIED_LOGINS - 1)));
        let held = verified.digests.lock().unwrap().0.len();
        assert_eq!(held, MAX_VERIFIED_LOGINS);
    }
}

//! Logins: a session from a username and password, or from a personal access token, for any
//! adapter. Both are checked by the node (argon2 on its blocking pool; a token by its hash)
//! and counted by the failed-login limit of the caller's address. A session is bound to its
//! user's incarnation and password, or to the token (see [`super::session`]); it is not
//! bound to any connection yet: the adapter does that.

use super::session::Session;
use super::status::{codes, Status};
use super::Context;
use cairn_engine::node::{Login, NodeError};
use cairn_engine::state::tokens::TokenHash;
use std::net::IpAddr;

/// Why a login was refused. The binary protocol answers each with an eviction but
/// [`LoginRefused::Failed`] (the connection stays usable and may try again); HTTP with the
/// status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginRefused {
    /// A wrong username or password, or an inactive user (hidden, as Iggy hides it), or an
    /// address past its failed logins.
    Credentials,
    /// A token nobody holds, or one past its expiry (the status says which).
    Token(Status),
    /// The token's user is inactive.
    Inactive(Status),
    /// The node could not answer.
    Failed(Status),
}

impl LoginRefused {
    pub fn status(&self) -> Status {
        match self {
            LoginRefused::Credentials => Status::of(codes::INVALID_CREDENTIALS),
            LoginRefused::Token(s) | LoginRefused::Inactive(s) | LoginRefused::Failed(s) => {
                s.clone()
            }
        }
    }

    fn token() -> LoginRefused {
        LoginRefused::Token(Status::of(NodeError::InvalidToken.code()))
    }
}

/// A session for `username` and `password`, for the login client id `client` from `peer`.
pub async fn with_password(
    cx: &Context,
    client: u128,
    peer: IpAddr,
    username: &str,
    password: &str,
) -> Result<Session, LoginRefused> {
    let now = cx.env.clock.monotonic_nanos() / 1000;
    if !cx.logins.may_try(peer, now) {
        tracing::warn!(%peer, "login refused: too many failed logins from this address");
        return Err(LoginRefused::Credentials);
    }
    let node = cx.node.client(client);
    let login = match node.login(username, password).await {
        Ok(login) => login,
        Err(e) => {
            // Only a wrong password (or an inactive user's) is a failed login: a node that
            // stopped or a busy hashing pool says nothing about the credentials, and counting
            // it would lock the address out of its right password once the node is back.
            if matches!(
                e,
                NodeError::InvalidCredentials | NodeError::UserInactive(_)
            ) {
                cx.logins.failed(peer, now);
            }
            tracing::info!(%peer, user = %username, error = %e, "login refused");
            return Err(match e {
                NodeError::InvalidCredentials | NodeError::UserInactive(_) => {
                    LoginRefused::Credentials
                }
                other => LoginRefused::Failed(other.into()),
            });
        }
    };
    bind(cx, client, node, login, None).ok_or(LoginRefused::Credentials)
}

/// A session for the raw personal access token `raw`, for the login client id `client`
/// from `peer`, counted by the failed-login limit like a password: refused for a token
/// nobody holds or one past its expiry (status 53 or 54: the SDK reads 53), and for an
/// inactive user (47), as Iggy answers. The session lasts as long as the token: deleted or
/// expired, the session's next request is refused.
pub async fn with_token(
    cx: &Context,
    client: u128,
    peer: IpAddr,
    raw: &str,
) -> Result<Session, LoginRefused> {
    let now = cx.env.clock.monotonic_nanos() / 1000;
    if !cx.logins.may_try(peer, now) {
        tracing::warn!(%peer, "token login refused: too many failed logins from this address");
        return Err(LoginRefused::token());
    }
    let node = cx.node.client(client);
    let login = match node.login_with_token(raw).await {
        Ok(login) => login,
        Err(e) => {
            // As for a password: only a token refused on its own merits counts.
            if matches!(
                e,
                NodeError::InvalidToken
                    | NodeError::TokenExpired { .. }
                    | NodeError::UserInactive(_)
            ) {
                cx.logins.failed(peer, now);
            }
            tracing::info!(%peer, error = %e, "token login refused");
            return Err(match e {
                NodeError::InvalidToken | NodeError::TokenExpired { .. } => {
                    LoginRefused::Token(Status::of(e.code()))
                }
                NodeError::UserInactive(_) => LoginRefused::Inactive(Status::of(e.code())),
                other => LoginRefused::Failed(other.into()),
            });
        }
    };
    let hash = cairn_engine::state::tokens::hash_token(raw);
    bind(cx, client, node, login, Some(hash)).ok_or_else(LoginRefused::token)
}

/// The session of `login`, bound to what the login was checked against: `None` if the view
/// no longer holds that user incarnation, or (a password login) holds it with another
/// password, or (a token login) no longer holds the token — each changed after the check
/// and before this bind. (Taking the view's hash instead would give an old password a
/// session the change did not end; a password change does not end a token's session.)
fn bind(
    cx: &Context,
    client: u128,
    node: cairn_engine::node::Client,
    login: Login,
    token: Option<TokenHash>,
) -> Option<Session> {
    let view = cx.node.view();
    let user = view
        .user(login.user_id)
        .filter(|u| u.created_op == login.incarnation)?;
    let still_checked = match &token {
        Some(hash) => view
            .token_by_hash(hash)
            .is_some_and(|(owner, _, _)| owner.id == user.id),
        None => user.password_hash == login.password_hash,
    };
    if !still_checked {
        return None;
    }
    Some(Session {
        client,
        session: cx.next_session(),
        user_id: login.user_id,
        incarnation: login.incarnation,
        password_hash: login.password_hash,
        token,
        node,
    })
}

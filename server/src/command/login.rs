//! Logins: a session from a username and password, or from a personal access token, for any
//! adapter. Both are checked by the node (argon2 on its blocking pool; a token by its hash)
//! and counted, before the check, by the login limit ([`super::login_limit`]). A session is bound to its
//! user's incarnation and password, or to the token (see [`super::session`]); it is not
//! bound to any connection yet: the adapter does that.

use super::log_throttle::{Throttle, LOG_INTERVAL_NANOS};
use super::login_limit::{Account, Attempt, Refusal};
use super::session::Session;
use super::status::{codes, Status};
use super::Context;
use cairn_engine::env::Either;
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

/// Who keeps a login waiting for its turn (and so bounds the waiters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiter {
    /// Its connection, which serves nothing else meanwhile (TCP): the connection caps
    /// bound the waiters, so a login waits while its address is at its bound.
    Connection,
    /// A task of its own that outlives its client (HTTP runs a login to its end): nothing
    /// else bounds such waiters, so a login whose address is at its bound is answered
    /// busy at once; only the few the bound lets in wait, in the line of checks.
    Detached,
}

/// A session for `username` and `password`, for the login client id `client` from `peer`.
pub async fn with_password(
    cx: &Context,
    (client, waiter): (u128, Waiter),
    peer: IpAddr,
    username: &str,
    password: &str,
) -> Result<Session, LoginRefused> {
    fresh(cx).await?;
    let attempt = begin(cx, peer, waiter, Account::User(username)).await?;
    let node = cx.node.client(client);
    let login = match node.login(username, password).await {
        Ok(login) => login,
        Err(e) => {
            tracing::info!(%peer, user = ?username, error = %e, "login refused");
            return Err(judged(attempt, e, LoginRefused::Credentials));
        }
    };
    attempt.succeeded();
    bind(cx, client, peer, node, login, None).ok_or(LoginRefused::Credentials)
}

/// A session for the raw personal access token `raw`, for the login client id `client`
/// from `peer`, counted by the failed-login limit like a password: refused for a token
/// nobody holds or one past its expiry (status 53 or 54: the SDK reads 53), and for an
/// inactive user (47), as Iggy answers. The session lasts as long as the token: deleted or
/// expired, the session's next request is refused.
pub async fn with_token(
    cx: &Context,
    (client, waiter): (u128, Waiter),
    peer: IpAddr,
    raw: &str,
) -> Result<Session, LoginRefused> {
    fresh(cx).await?;
    let attempt = begin(cx, peer, waiter, Account::Token).await?;
    let node = cx.node.client(client);
    let login = match node.login_with_token(raw).await {
        Ok(login) => login,
        Err(e) => {
            tracing::info!(%peer, error = %e, "token login refused");
            let refused = match &e {
                NodeError::UserInactive(_) => LoginRefused::Inactive(Status::of(e.code())),
                _ => LoginRefused::Token(Status::of(e.code())),
            };
            return Err(judged(attempt, e, refused));
        }
    };
    attempt.succeeded();
    let hash = cairn_engine::state::tokens::hash_token(raw);
    bind(cx, client, peer, node, login, Some(hash)).ok_or_else(LoginRefused::token)
}

/// In a cluster, waits until this member's view holds every op the cluster answered before
/// (a login right after a password change made through another member sees it), before
/// the login takes its turn: a member cut off from its leader refuses the login as
/// unavailable instead of holding a turn of the line of checks.
async fn fresh(cx: &Context) -> Result<(), LoginRefused> {
    cx.node
        .fresh()
        .await
        .map_err(|e| LoginRefused::Failed(e.into()))
}

/// How long a login waits for its turn (its address's bound, then the line of password
/// checks) before it is answered busy.
pub const LOGIN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How often a login refused busy by its address's bound tries again.
const LOGIN_RETRY: std::time::Duration = std::time::Duration::from_millis(5);

/// Begins a counted attempt from `peer` at `account`, waiting its turn (at most
/// [`LOGIN_WAIT`] in all): while its address's attempts are at their bound, then (a
/// password) in the line of password checks, served in arrival order. Or says why it may
/// not begin: the account is locked for this address (refused as bad credentials would
/// be, status 42 or 53), or its turn did not come (busy: the caller may try again). Only a
/// login its connection holds waits at its address's bound ([`Waiter`]).
pub(super) async fn begin<'c>(
    cx: &'c Context,
    peer: IpAddr,
    waiter: Waiter,
    account: Account<'_>,
) -> Result<Attempt<'c>, LoginRefused> {
    let started = cx.env.clock.monotonic_nanos();
    let wait = LOGIN_WAIT.as_nanos() as u64;
    let address_wait = match waiter {
        Waiter::Connection => wait,
        Waiter::Detached => 0,
    };
    // An IPv6 /64 is one address, as the connection caps count it.
    let address = super::registry::address_of(peer);
    let mut attempt = loop {
        let now = cx.env.clock.monotonic_nanos();
        match cx.logins.begin(address, account, now / 1000) {
            Err(Refusal::Busy) if now.saturating_sub(started) < address_wait => {
                cx.env.clock.sleep(LOGIN_RETRY).await;
            }
            result => break begun(peer, account, now / 1000, result)?,
        }
    };
    if let Account::User(_) = account {
        let left = wait.saturating_sub(cx.env.clock.monotonic_nanos().saturating_sub(started));
        let timeout = cx.env.clock.sleep(std::time::Duration::from_nanos(left));
        match cairn_engine::env::race(cx.logins.turn(), timeout).await {
            Either::Left(turn) => attempt.hold(turn),
            Either::Right(()) => {
                attempt.not_judged();
                let now = cx.env.clock.monotonic_nanos() / 1000;
                return begun(peer, account, now, Err(Refusal::Busy));
            }
        }
    }
    Ok(attempt)
}

/// The attempt, or what a refusal before the check answers (logged, a line a second).
fn begun<'c>(
    peer: IpAddr,
    account: Account<'_>,
    now: u64,
    result: Result<Attempt<'c>, Refusal>,
) -> Result<Attempt<'c>, LoginRefused> {
    result.map_err(|refusal| {
        static REFUSED: Throttle = Throttle::new(LOG_INTERVAL_NANOS);
        if let Some(left_out) = REFUSED.admit(now.saturating_mul(1000)) {
            tracing::warn!(%peer, ?account, ?refusal, left_out, "login refused before its check");
        }
        match (refusal, account) {
            (Refusal::Busy, _) => {
                LoginRefused::Failed(NodeError::Busy("logins being checked").into())
            }
            (Refusal::LockedOut, Account::User(_)) => LoginRefused::Credentials,
            (Refusal::LockedOut, Account::Token) => LoginRefused::token(),
        }
    })
}

/// What a refused check answers, `refused` for credentials refused on their own merits
/// (which stay counted as a failure); a node that could not judge them (stopped, its pool
/// busy) says nothing about the credentials, and counting it would lock the address out
/// of its right password once the node is back.
pub(super) fn judged(attempt: Attempt<'_>, e: NodeError, refused: LoginRefused) -> LoginRefused {
    match e {
        NodeError::InvalidCredentials
        | NodeError::UserInactive(_)
        | NodeError::InvalidToken
        | NodeError::TokenExpired { .. } => {
            drop(attempt);
            refused
        }
        other => {
            attempt.not_judged();
            LoginRefused::Failed(other.into())
        }
    }
}

/// The session of `login`, bound to what the login was checked against: `None` if the view
/// no longer holds that user incarnation, or (a password login) holds it with another
/// password, or (a token login) no longer holds the token — each changed after the check
/// and before this bind. (Taking the view's hash instead would give an old password a
/// session the change did not end; a password change does not end a token's session.)
fn bind(
    cx: &Context,
    client: u128,
    peer: IpAddr,
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
        peer,
        user_id: login.user_id,
        incarnation: login.incarnation,
        password_hash: login.password_hash,
        token,
        node,
    })
}

//! Who an HTTP request acts as: the bearer token is checked (signature, expiry, logout),
//! then turned into the same [`Session`] a binary-protocol login makes, bound to the user's
//! incarnation and password, so the command layer's own checks revoke it exactly as they
//! revoke a TCP session. Login, refresh and logout live here too.

use super::bearer::{fingerprint, Claims};
use super::error::{codes, ApiError};
use super::Api;
use crate::command::login::{self, LoginRefused};
use crate::command::{self, Caller, Command, Context, Reply, Session};
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Client ids of HTTP sessions have the top bit set: they never meet a binary client's.
const HTTP_CLIENT_BIT: u128 = 1 << 127;

/// An HTTP login's client id, and who waits for it: a task that outlives its client.
const DETACHED: (u128, login::Waiter) = (HTTP_CLIENT_BIT, login::Waiter::Detached);

/// A 64-bit fingerprint of a personal access token's stored hash (never 0).
fn token_fingerprint(hash: &cairn_engine::state::tokens::TokenHash) -> u64 {
    u64::from_le_bytes(hash[..8].try_into().expect("8 bytes")).max(1)
}

/// An authenticated request: the session its token stands for, and the token's claims.
pub struct Authed {
    pub cx: Arc<Context>,
    pub session: Session,
    pub claims: Claims,
}

impl Authed {
    /// Runs `command` as this request's session (HTTP callers are not listed connections).
    pub async fn run(&self, command: Command) -> Result<Reply, ApiError> {
        self.run_within(command, u64::MAX).await
    }

    /// [`Authed::run`], a poll's reply carrying at most `reply_room` batch bytes.
    pub async fn run_within(&self, command: Command, reply_room: u64) -> Result<Reply, ApiError> {
        let caller = Caller {
            session: &self.session,
            client_id: 0,
            reply_room,
        };
        Ok(command::execute(&self.cx, &caller, command).await?)
    }
}

fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(axum::http::header::AUTHORIZATION)?;
    let value = value.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

fn peer(parts: &Parts) -> SocketAddr {
    parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
}

impl FromRequestParts<Arc<Api>> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<Api>) -> Result<Self, ApiError> {
        let Some(token) = bearer(parts).filter(|t| !t.is_empty()) else {
            return Err(ApiError::client(
                codes::ACCESS_TOKEN_MISSING,
                "no bearer token: log in at POST /users/login first",
            ));
        };
        let (claims, session) = api.authenticate(token, peer(parts).ip())?;
        tracing::trace!(peer = %peer(parts), user = session.user_id, "authenticated");
        Ok(Authed {
            cx: api.cx.clone(),
            session,
            claims,
        })
    }
}

impl Api {
    /// A token's claims and the session they stand for, checked as every command checks a
    /// session (the user still active, a personal access token unexpired): for every route,
    /// a send, a scrape, a logout and a refresh included.
    fn authenticate(&self, token: &str, peer: IpAddr) -> Result<(Claims, Session), ApiError> {
        let claims = self.verify(token)?;
        let session = self.session_for(&claims, peer)?;
        command::session::check(&self.cx, &session, &self.cx.node.view())?;
        Ok((claims, session))
    }

    /// The claims of a token this server signed, unexpired and not logged out.
    pub fn verify(&self, token: &str) -> Result<Claims, ApiError> {
        let claims = self
            .key
            .verify(token, self.now_secs())
            .map_err(|e| ApiError::client(codes::INVALID_ACCESS_TOKEN, e.to_string()))?;
        if self.revoked.is_revoked(&claims) {
            return Err(ApiError::client(
                codes::INVALID_ACCESS_TOKEN,
                "the access token was revoked by a logout",
            ));
        }
        Ok(claims)
    }

    /// The session a token's claims stand for, if its user still holds as it did at login
    /// (and, for a token issued for a personal access token, that token still exists; the
    /// session check then judges its expiry, as it does for a TCP session).
    fn session_for(&self, claims: &Claims, peer: IpAddr) -> Result<Session, ApiError> {
        let view = self.cx.node.view();
        let revoked = || ApiError::unauthenticated("the access token's user no longer holds it");
        let user = view
            .user(claims.user_id)
            .filter(|u| u.created_op == claims.incarnation)
            .ok_or_else(revoked)?;
        let token = match claims.personal_access_token {
            0 if fingerprint(&user.password_hash) != claims.password => return Err(revoked()),
            0 => None,
            bound => {
                let tokens = view.user_tokens(claims.user_id).ok_or_else(revoked)?;
                let held = tokens
                    .values()
                    .find(|t| token_fingerprint(&t.hash) == bound)
                    .ok_or_else(|| {
                        ApiError::unauthenticated("the personal access token was deleted")
                    })?;
                Some(held.hash)
            }
        };
        let client = HTTP_CLIENT_BIT | u128::from(claims.token_id);
        Ok(Session {
            client,
            session: 0,
            peer,
            user_id: claims.user_id,
            incarnation: claims.incarnation,
            password_hash: user.password_hash.clone(),
            node: self.cx.node.client(client),
            token,
        })
    }

    pub fn now_secs(&self) -> u64 {
        self.cx.env.clock.wall_micros() / 1_000_000
    }

    /// A bearer token for a session a login just made.
    pub fn issue(&self, session: &Session) -> Issued {
        let login = self.cx.env.entropy.next_u64();
        self.issue_for(
            login,
            session.user_id,
            session.incarnation,
            fingerprint(&session.password_hash),
            session.token.as_ref().map_or(0, token_fingerprint),
        )
    }

    fn issue_for(
        &self,
        login: u64,
        user_id: u32,
        incarnation: u64,
        password: u64,
        personal_access_token: u64,
    ) -> Issued {
        let now = self.now_secs();
        let claims = Claims {
            user_id,
            incarnation,
            password,
            token_id: login,
            personal_access_token,
            issued_at: now,
            expires_at: now + self.settings.token_expiry.as_secs().max(1),
        };
        Issued {
            token: self.key.issue(&claims),
            claims,
        }
    }
}

/// A token just issued.
pub struct Issued {
    pub token: String,
    pub claims: Claims,
}

impl Issued {
    /// Iggy's login reply.
    pub fn identity(&self) -> iggy_common::IdentityInfo {
        iggy_common::IdentityInfo {
            user_id: self.claims.user_id,
            access_token: Some(iggy_common::TokenInfo {
                token: self.token.clone(),
                expiry: self.claims.expires_at,
            }),
        }
    }
}

/// Runs a login to its end on a task of its own: a client that goes away mid-login drops
/// the handler, not the check, so the check's slot in the login limit stays held until the
/// password hashing it queued is done (else a login and a reset, repeated, would queue
/// checks past the limit's bound on those in flight).
async fn to_the_end<T: Send + 'static>(
    cx: &Context,
    login: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, ApiError> {
    let (answer, answered) = cairn_engine::env::chan::oneshot();
    // Dropping the handle leaves the task running.
    let _detached = cx.env.tasks.spawn(Box::pin(async move {
        answer.send(login.await);
    }));
    answered.await.map_err(|_| {
        ApiError::from(crate::command::status::Status::because(
            crate::command::status::codes::ERROR,
            "the login's task ended without an answer",
        ))
    })
}

/// `POST /users/login`: the same password check (and failed-login limit) as a TCP login.
pub async fn login(
    State(api): State<Arc<Api>>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    super::body::Json(request): super::body::Json<iggy_common::login_user::LoginUser>,
) -> Result<axum::Json<iggy_common::IdentityInfo>, ApiError> {
    let password = secrecy::ExposeSecret::expose_secret(&request.password).to_owned();
    let (cx, username) = (api.cx.clone(), request.username.clone());
    let session = to_the_end(&api.cx, async move {
        login::with_password(&cx, DETACHED, peer.ip(), &username, &password).await
    })
    .await?
    .map_err(|refused| ApiError::from(refused.status()))?;
    tracing::debug!(user = session.user_id, "http login");
    Ok(axum::Json(api.issue(&session).identity()))
}

/// `POST /personal-access-tokens/login`: a bearer token bound to the personal access
/// token (deleted or expired, the bearer token stops working too).
pub async fn login_with_personal_access_token(
    State(api): State<Arc<Api>>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    super::body::Json(request): super::body::Json<
        iggy_common::login_with_personal_access_token::LoginWithPersonalAccessToken,
    >,
) -> Result<axum::Json<iggy_common::IdentityInfo>, ApiError> {
    let raw = secrecy::ExposeSecret::expose_secret(&request.token).to_owned();
    let cx = api.cx.clone();
    let session = to_the_end(&api.cx, async move {
        login::with_token(&cx, DETACHED, peer.ip(), &raw).await
    })
    .await?
    .map_err(|refused| match refused {
        // An inactive user's token reads as no token (as Iggy answers it over HTTP).
        LoginRefused::Inactive(_) => ApiError::client(
            codes::INVALID_PERSONAL_ACCESS_TOKEN,
            "invalid personal access token",
        ),
        other => ApiError::from(other.status()),
    })?;
    tracing::debug!(
        user = session.user_id,
        "http login with a personal access token"
    );
    Ok(axum::Json(api.issue(&session).identity()))
}

#[derive(serde::Deserialize)]
pub struct RefreshToken {
    token: String,
}

/// `POST /users/refresh-token`: a new token for a valid one, of the same login (the old one
/// stays valid until it expires, as Iggy's stateless server does; a logout ends both).
pub async fn refresh(
    State(api): State<Arc<Api>>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    super::body::Json(request): super::body::Json<RefreshToken>,
) -> Result<axum::Json<iggy_common::IdentityInfo>, ApiError> {
    let (claims, _) = api.authenticate(&request.token, peer.ip())?;
    let issued = api.issue_for(
        claims.token_id,
        claims.user_id,
        claims.incarnation,
        claims.password,
        claims.personal_access_token,
    );
    Ok(axum::Json(issued.identity()))
}

/// `DELETE /users/logout`: the token is revoked until it would have expired.
pub async fn logout(
    State(api): State<Arc<Api>>,
    authed: Authed,
) -> Result<axum::http::StatusCode, ApiError> {
    // Every token of this login expires by now + the expiry (refreshes included).
    let now = api.now_secs();
    let until = now + api.settings.token_expiry.as_secs().max(1);
    if !api.revoked.revoke(&authed.claims, until, now) {
        return Err(ApiError::client(
            codes::ERROR,
            "too many live logged-out tokens to remember another; retry later",
        )
        .with_status(axum::http::StatusCode::SERVICE_UNAVAILABLE));
    }
    Ok(axum::http::StatusCode::NO_CONTENT)
}

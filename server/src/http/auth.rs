//! Who an HTTP request acts as: the bearer token is checked (signature, expiry, logout),
//! then turned into the same [`Session`] a binary-protocol login makes, bound to the user's
//! incarnation and password, so the command layer's own checks revoke it exactly as they
//! revoke a TCP session. Login, refresh and logout live here too.

use super::error::{codes, ApiError};
use super::token::{fingerprint, Claims};
use super::Api;
use crate::connection::Conn;
use crate::session::{Dedup, Session};
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use cairn_engine::node::NodeError;
use std::net::SocketAddr;
use std::sync::Arc;

/// Client ids of HTTP sessions have the top bit set: they never meet a binary client's.
const HTTP_CLIENT_BIT: u128 = 1 << 127;

/// An authenticated request: its connection state for the command layer, and its claims.
pub struct Authed {
    pub conn: Conn,
    pub claims: Claims,
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
        let claims = api.verify(token)?;
        let session = api.session_for(&claims)?;
        Ok(Authed {
            conn: api.conn(peer(parts), Some(session)),
            claims,
        })
    }
}

impl Api {
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

    /// The session a token's claims stand for, if its user still holds as it did at login.
    fn session_for(&self, claims: &Claims) -> Result<Session, ApiError> {
        let view = self.shared.node.view();
        let revoked = || ApiError::unauthenticated("the access token's user no longer holds it");
        let user = view
            .user(claims.user_id)
            .filter(|u| u.created_op == claims.incarnation)
            .ok_or_else(revoked)?;
        if fingerprint(&user.password_hash) != claims.password {
            return Err(revoked());
        }
        let client = HTTP_CLIENT_BIT | u128::from(claims.token_id);
        Ok(Session {
            client,
            session: 0,
            user_id: claims.user_id,
            incarnation: claims.incarnation,
            password_hash: user.password_hash.clone(),
            node: self.shared.node.client(client),
            dedup: Dedup::default(),
        })
    }

    /// A connection state for one request (not in the registry: HTTP has no connection to
    /// list).
    pub fn conn(&self, peer: SocketAddr, session: Option<Session>) -> Conn {
        Conn {
            shared: self.shared.clone(),
            peer,
            id: 0,
            session,
            connected_at: 0,
        }
    }

    pub fn now_secs(&self) -> u64 {
        self.shared.env.clock.wall_micros() / 1_000_000
    }

    /// A new token for a user who just proved who they are.
    pub fn issue(&self, user_id: u32, incarnation: u64, personal_access_token: u64) -> Issued {
        let view = self.shared.node.view();
        let password = view
            .user(user_id)
            .map_or(0, |u| fingerprint(&u.password_hash));
        let now = self.now_secs();
        let claims = Claims {
            user_id,
            incarnation,
            password,
            token_id: self.shared.env.entropy.next_u64(),
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

/// `POST /users/login`.
pub async fn login(
    State(api): State<Arc<Api>>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    super::body::Json(request): super::body::Json<iggy_common::login_user::LoginUser>,
) -> Result<axum::Json<iggy_common::IdentityInfo>, ApiError> {
    let shared = &api.shared;
    let now = shared.env.clock.monotonic_nanos() / 1000;
    if !shared.logins.may_try(peer.ip(), now) {
        return Err(ApiError::client(
            codes::INVALID_CREDENTIALS,
            "too many failed logins from this address; wait and retry",
        ));
    }
    let node = shared.node.client(HTTP_CLIENT_BIT);
    let password = secrecy::ExposeSecret::expose_secret(&request.password);
    let login = match node.login(&request.username, password).await {
        Ok(login) => login,
        Err(e) => {
            shared.logins.failed(peer.ip(), now);
            tracing::info!(%peer, user = %request.username, error = %e, "http login refused");
            return Err(match e {
                NodeError::InvalidCredentials => {
                    ApiError::client(codes::INVALID_CREDENTIALS, "invalid credentials")
                }
                other => crate::handlers::Status::from(other).into(),
            });
        }
    };
    let issued = api.issue(login.user_id, login.incarnation, 0);
    tracing::debug!(user = login.user_id, "http login");
    Ok(axum::Json(issued.identity()))
}

#[derive(serde::Deserialize)]
pub struct RefreshToken {
    token: String,
}

/// `POST /users/refresh-token`: a new token for a valid one (the old one stays valid until
/// it expires, as Iggy's stateless server does).
pub async fn refresh(
    State(api): State<Arc<Api>>,
    super::body::Json(request): super::body::Json<RefreshToken>,
) -> Result<axum::Json<iggy_common::IdentityInfo>, ApiError> {
    let claims = api.verify(&request.token)?;
    api.session_for(&claims)?;
    let issued = api.issue(
        claims.user_id,
        claims.incarnation,
        claims.personal_access_token,
    );
    Ok(axum::Json(issued.identity()))
}

/// `DELETE /users/logout`: the token is revoked until it would have expired.
pub async fn logout(
    State(api): State<Arc<Api>>,
    authed: Authed,
) -> Result<axum::http::StatusCode, ApiError> {
    if !api.revoked.revoke(&authed.claims, api.now_secs()) {
        return Err(ApiError::client(
            codes::ERROR,
            "too many live logged-out tokens to remember another; retry later",
        )
        .with_status(axum::http::StatusCode::SERVICE_UNAVAILABLE));
    }
    Ok(axum::http::StatusCode::NO_CONTENT)
}

impl Api {
    /// A bearer token for a personal access token's user.
    pub async fn login_with_personal_access_token(
        &self,
        peer: SocketAddr,
        raw: &str,
    ) -> Result<Issued, ApiError> {
        let _ = (peer, raw);
        Err(ApiError::client(
            codes::FEATURE_UNAVAILABLE,
            "personal access tokens are not served yet",
        ))
    }
}

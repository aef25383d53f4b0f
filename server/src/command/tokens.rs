//! Personal access tokens: each user manages its own. The raw token is in the creation's
//! reply only (never journaled, never kept for a retried request); the node keeps its
//! BLAKE3 hash.

use super::status::{codes, Status};
use super::{Call, Reply};
use cairn_engine::node::{Login, TokenExpiry};
use iggy_binary_protocol::requests::personal_access_tokens::{
    CreatePersonalAccessTokenRequest, DeletePersonalAccessTokenRequest,
};
use iggy_binary_protocol::responses::personal_access_tokens::{
    GetPersonalAccessTokensResponse, PersonalAccessTokenResponse, RawPersonalAccessTokenResponse,
};
use iggy_binary_protocol::WireName;

/// The login the session acts as.
fn login_of(call: &Call<'_>) -> Login {
    let session = call.session();
    Login {
        user_id: session.user_id,
        incarnation: session.incarnation,
        password_hash: session.password_hash.clone(),
    }
}

/// The session user's tokens: name and expiry (µs, 0 for never), never the token.
pub fn list(call: &Call<'_>) -> Reply {
    let tokens = call
        .view
        .user_tokens(call.session().user_id)
        .into_iter()
        .flatten()
        .map(|(name, token)| PersonalAccessTokenResponse {
            name: WireName::new(name.clone()).expect("stored names are valid"),
            expiry_at: token.expiry_at.unwrap_or(0),
        })
        .collect();
    Reply::Tokens(GetPersonalAccessTokensResponse { tokens })
}

/// Creates a token for the session's user. A session that logged in with a token may not:
/// a token it minted would outlive the token's expiry and deletion, so a leaked token could
/// not be contained (review S9).
pub async fn create(
    call: &Call<'_>,
    request: CreatePersonalAccessTokenRequest,
) -> Result<Reply, Status> {
    if call.session().token.is_some() {
        return Err(Status::because(
            codes::UNAUTHORIZED,
            "a session that logged in with a personal access token cannot create tokens",
        ));
    }
    let raw = call
        .session()
        .node
        .create_personal_access_token(
            login_of(call),
            request.name.as_str(),
            TokenExpiry::from_wire(request.expiry),
        )
        .await?;
    Ok(Reply::RawToken(RawPersonalAccessTokenResponse {
        token: WireName::new(raw).expect("a raw token is 68 bytes"),
    }))
}

pub async fn delete(
    call: &Call<'_>,
    request: DeletePersonalAccessTokenRequest,
) -> Result<Reply, Status> {
    call.session()
        .node
        .delete_personal_access_token(login_of(call), request.name.as_str())
        .await?;
    Ok(Reply::Done)
}

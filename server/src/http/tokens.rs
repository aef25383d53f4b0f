//! Personal access tokens over HTTP: list, create (the raw token is in the reply, once),
//! delete, and login with one (a bearer token bound to it: deleting or expiring the
//! personal access token ends the bearer token too).

use super::auth::Authed;
use super::body::Json;
use super::error::ApiError;
use super::routes::{call, decode};
use super::Api;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use iggy_binary_protocol::codes::{
    CREATE_PERSONAL_ACCESS_TOKEN_CODE, DELETE_PERSONAL_ACCESS_TOKEN_CODE,
    GET_PERSONAL_ACCESS_TOKENS_CODE,
};
use iggy_binary_protocol::requests::personal_access_tokens::{
    CreatePersonalAccessTokenRequest, DeletePersonalAccessTokenRequest,
    GetPersonalAccessTokensRequest,
};
use iggy_binary_protocol::responses::personal_access_tokens::{
    GetPersonalAccessTokensResponse, RawPersonalAccessTokenResponse,
};
use iggy_binary_protocol::WireName;
use iggy_common::wire_conversions as wire;
use std::sync::Arc;

pub fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route("/personal-access-tokens", get(list).post(create))
        .route("/personal-access-tokens/{name}", delete(remove))
        .route(
            "/personal-access-tokens/login",
            post(super::auth::login_with_personal_access_token)
                // A token may be named "login".
                .delete(|a: Authed| remove(a, Path("login".into()))),
        )
}

fn token_name(name: &str) -> Result<WireName, ApiError> {
    WireName::new(name).map_err(|_| {
        ApiError::field(
            super::error::codes::INVALID_PERSONAL_ACCESS_TOKEN_NAME,
            "name",
            format!("a token name must be 1 to 255 bytes, got {}", name.len()),
        )
    })
}

async fn list(
    mut a: Authed,
) -> Result<axum::Json<Vec<iggy_common::PersonalAccessTokenInfo>>, ApiError> {
    let body = call(
        &mut a,
        GET_PERSONAL_ACCESS_TOKENS_CODE,
        &GetPersonalAccessTokensRequest,
    )
    .await?;
    let tokens = decode::<GetPersonalAccessTokensResponse>(&body)?;
    Ok(axum::Json(wire::personal_access_tokens_from_wire(tokens)))
}

async fn create(
    mut a: Authed,
    Json(r): Json<iggy_common::create_personal_access_token::CreatePersonalAccessToken>,
) -> Result<Response, ApiError> {
    let request = CreatePersonalAccessTokenRequest {
        name: token_name(&r.name)?,
        expiry: u64::from(r.expiry),
    };
    let body = call(&mut a, CREATE_PERSONAL_ACCESS_TOKEN_CODE, &request).await?;
    let raw: iggy_common::RawPersonalAccessToken =
        decode::<RawPersonalAccessTokenResponse>(&body)?.into();
    Ok((StatusCode::CREATED, axum::Json(raw)).into_response())
}

async fn remove(mut a: Authed, Path(name): Path<String>) -> Result<Response, ApiError> {
    let request = DeletePersonalAccessTokenRequest {
        name: token_name(&name)?,
    };
    call(&mut a, DELETE_PERSONAL_ACCESS_TOKEN_CODE, &request).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

//! Personal access tokens over HTTP: list, create (the raw token is in the reply, once),
//! delete, and login with one (a bearer token bound to it: deleting or expiring the
//! personal access token ends the bearer token too).

use super::auth::Authed;
use super::body::Json;
use super::error::{codes, ApiError};
use super::resource::{done, name, reply};
use super::Api;
use crate::command::Command;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use iggy_binary_protocol::requests::personal_access_tokens::{
    CreatePersonalAccessTokenRequest, DeletePersonalAccessTokenRequest,
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

fn token_name(value: &str) -> Result<WireName, ApiError> {
    name("name", codes::INVALID_PERSONAL_ACCESS_TOKEN_NAME, value)
}

async fn list(
    a: Authed,
) -> Result<axum::Json<Vec<iggy_common::PersonalAccessTokenInfo>>, ApiError> {
    let tokens = reply!(a.run(Command::GetPersonalAccessTokens).await?, Tokens);
    Ok(axum::Json(wire::personal_access_tokens_from_wire(tokens)))
}

async fn create(
    a: Authed,
    Json(r): Json<iggy_common::create_personal_access_token::CreatePersonalAccessToken>,
) -> Result<Response, ApiError> {
    let command = Command::CreatePersonalAccessToken(CreatePersonalAccessTokenRequest {
        name: token_name(&r.name)?,
        expiry: u64::from(r.expiry),
    });
    let raw: iggy_common::RawPersonalAccessToken = reply!(a.run(command).await?, RawToken).into();
    Ok((StatusCode::CREATED, axum::Json(raw)).into_response())
}

async fn remove(a: Authed, Path(name): Path<String>) -> Result<Response, ApiError> {
    let command = Command::DeletePersonalAccessToken(DeletePersonalAccessTokenRequest {
        name: token_name(&name)?,
    });
    done(&a, command).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

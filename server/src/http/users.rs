//! Users: list, read (`me` is the caller), create, update, delete, permissions, password.

use super::auth::Authed;
use super::body::Json;
use super::resource::{
    created, done, entity_name, found, id, no_content, reply, string_options, unconvertible, Reply,
    Result,
};
use crate::command::Command;
use axum::extract::Path;
use axum::response::Response;
use cairn_engine::node::ops::MetaOp;
use iggy_binary_protocol::requests::users::{
    ChangePasswordRequest, CreateUserRequest, DeleteUserRequest, GetUserRequest,
    UpdatePermissionsRequest, UpdateUserRequest,
};
use iggy_binary_protocol::{WireIdentifier, WireOptions};
use iggy_common::wire_conversions as wire;
use secrecy::ExposeSecret;

pub async fn list(a: Authed) -> Reply<Vec<iggy_common::UserInfo>> {
    let users = reply!(a.run(Command::GetUsers).await?, Users);
    Ok(axum::Json(
        wire::users_from_wire(users).map_err(unconvertible)?,
    ))
}

pub async fn get(a: Authed, Path(user_id): Path<String>) -> Reply<iggy_common::UserInfoDetails> {
    // `/users/me` is the caller (Iggy's alias).
    let user_id = match user_id.as_str() {
        "me" => WireIdentifier::numeric(a.claims.user_id),
        other => id("user_id", other)?,
    };
    let command = Command::GetUser(GetUserRequest { user_id });
    let details = found!(a.run(command).await?, User, "user");
    Ok(axum::Json(details.try_into().map_err(unconvertible)?))
}

pub async fn create(
    a: Authed,
    Json(r): Json<iggy_common::create_user::CreateUser>,
) -> Result<Response> {
    let command = Command::CreateUser(CreateUserRequest {
        username: entity_name(&r.username)?,
        password: r.password.expose_secret().to_owned(),
        status: r.status.as_code(),
        permissions: r.permissions.as_ref().map(wire::permissions_to_wire),
        options: WireOptions::empty(),
    });
    let user = reply!(a.run(command).await?, User);
    let details: iggy_common::UserInfoDetails = user.try_into().map_err(unconvertible)?;
    Ok(created(details))
}

pub async fn update(
    a: Authed,
    Path(user_id): Path<String>,
    Json(r): Json<iggy_common::update_user::UpdateUser>,
) -> Result<Response> {
    let options = string_options(r.options, |raw| {
        iggy_common::UserUpdateOptions { raw }.to_wire()
    })?;
    let op = MetaOp::UpdateUser(UpdateUserRequest {
        user_id: id("user_id", &user_id)?,
        username: r.username.as_deref().map(entity_name).transpose()?,
        status: r.status.map(|s| s.as_code()),
        options,
    });
    done(&a, Command::Meta(op)).await?;
    Ok(no_content())
}

pub async fn delete(a: Authed, Path(user_id): Path<String>) -> Result<Response> {
    let op = MetaOp::DeleteUser(DeleteUserRequest {
        user_id: id("user_id", &user_id)?,
    });
    done(&a, Command::Meta(op)).await?;
    Ok(no_content())
}

pub async fn update_permissions(
    a: Authed,
    Path(user_id): Path<String>,
    Json(r): Json<iggy_common::update_permissions::UpdatePermissions>,
) -> Result<Response> {
    let op = MetaOp::UpdatePermissions(UpdatePermissionsRequest {
        user_id: id("user_id", &user_id)?,
        permissions: r.permissions.as_ref().map(wire::permissions_to_wire),
    });
    done(&a, Command::Meta(op)).await?;
    Ok(no_content())
}

pub async fn change_password(
    a: Authed,
    Path(user_id): Path<String>,
    Json(r): Json<iggy_common::change_password::ChangePassword>,
) -> Result<Response> {
    let command = Command::ChangePassword(ChangePasswordRequest {
        user_id: id("user_id", &user_id)?,
        current_password: r.current_password.expose_secret().to_owned(),
        new_password: r.new_password.expose_secret().to_owned(),
    });
    done(&a, command).await?;
    Ok(no_content())
}

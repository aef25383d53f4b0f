//! The server: stats, connections, the cluster's roster.

use super::auth::Authed;
use super::resource::{found, number, reply, unconvertible, Reply};
use crate::command::Command;
use axum::extract::Path;
use iggy_binary_protocol::requests::system::GetClientRequest;
use iggy_common::wire_conversions as wire;

pub async fn stats(a: Authed) -> Reply<iggy_common::Stats> {
    let stats = reply!(a.run(Command::GetStats).await?, Stats);
    Ok(axum::Json((*stats).into()))
}

pub async fn clients(a: Authed) -> Reply<Vec<iggy_common::ClientInfo>> {
    let clients = reply!(a.run(Command::GetClients).await?, Clients);
    Ok(axum::Json(wire::clients_from_wire(clients)))
}

pub async fn client(
    a: Authed,
    Path(client_id): Path<String>,
) -> Reply<iggy_common::ClientInfoDetails> {
    let client_id = number("client_id", &client_id)?;
    let command = Command::GetClient(GetClientRequest { client_id });
    let details = found!(a.run(command).await?, Client, "client");
    Ok(axum::Json(details.into()))
}

pub async fn cluster_metadata(a: Authed) -> Reply<iggy_common::ClusterMetadata> {
    let metadata = reply!(a.run(Command::GetClusterMetadata).await?, ClusterMetadata);
    Ok(axum::Json(
        wire::cluster_metadata_from_wire(metadata).map_err(unconvertible)?,
    ))
}

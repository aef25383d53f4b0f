//! The admin's reads of the server's clients (S9): Ping, GetClusterMetadata, then GetMe (this connection's
//! client, logged in as root), GetClients (which lists it, as root's) and GetClient of its
//! id (which answers for it). Judged on one session only: a reconnect is another client.

use super::super::lock;
use super::Actor;
use crate::report::{violation, Violation};

pub const INV_CLIENTS: &str = "S9 the server's clients list and describe the asking one";

fn session(a: &Actor) -> Option<(u64, u32)> {
    a.client
        .as_ref()
        .and_then(|c| c.session())
        .map(|s| (s.session, s.user_id))
}

fn judged(a: &Actor, row: &'static str, verdict: Result<(), Violation>) {
    let mut w = lock(&a.world);
    match verdict {
        Ok(()) => w.decision(row),
        Err(v) => w.fail(v),
    }
}

/// Ping, GetMe, GetClients and GetClient of the asking client, on one session.
pub(crate) async fn clients(a: &mut Actor) {
    let Some((on, user)) = session(a) else { return };
    let begun = a.begin("ping");
    let result = a.client().ping().await;
    a.end(&begun, &result);
    a.after(&begun);
    if let Err(cairn_client::ClientError::Server { code, .. }) = &result {
        // The server answers every ping. A refusal on another session (or none) came from
        // the login of the reconnect the ping needed: judged as a login is (code 1 only
        // while the node is stopped or the server down). On the ping's own session it is
        // the server's fault.
        if session(a).map(|s| s.0) != Some(on) {
            a.read_refusal_in_doubt(&begun, *code, "ping (its reconnect's login)", INV_CLIENTS);
            return;
        }
        let v = violation(INV_CLIENTS, format!("ping refused with {code}"));
        return judged(a, "Ping", Err(v));
    }
    if result.is_ok() {
        judged(a, "Ping", Ok(()));
    }
    cluster_metadata(a).await;
    let begun = a.begin("get me");
    let me = a.client().get_me().await;
    a.end(&begun, &me);
    a.after(&begun);
    let (Ok(me), Some((now, _))) = (me, session(a)) else {
        return;
    };
    if now != on {
        return;
    }
    let id = me.client.client_id;
    if me.client.user_id != user {
        let v = violation(
            INV_CLIENTS,
            format!(
                "GetMe: client {id} logged in as user {}, the login answered user {user}",
                me.client.user_id
            ),
        );
        return judged(a, "GetMe", Err(v));
    }
    judged(a, "GetMe", Ok(()));
    let begun = a.begin("get clients");
    let listed = a.client().get_clients().await;
    a.end(&begun, &listed);
    a.after(&begun);
    if session(a).map(|s| s.0) != Some(on) {
        return;
    }
    if let Ok(listed) = listed {
        let verdict = match listed.iter().find(|c| c.client_id == id) {
            Some(c) if c.user_id == user => Ok(()),
            found => Err(violation(INV_CLIENTS, format!("GetClients: the asking client {id} (user {user}) listed as {found:?} among {} clients", listed.len()))),
        };
        judged(a, "GetClients", verdict);
    }
    let begun = a.begin(&format!("get client {id}"));
    let one = a.client().get_client(id).await;
    a.end(&begun, &one);
    a.after(&begun);
    if session(a).map(|s| s.0) != Some(on) {
        return;
    }
    if let Ok(one) = one {
        let verdict = match &one {
            Some(c) if c.client.client_id == id && c.client.user_id == user => Ok(()),
            other => Err(violation(
                INV_CLIENTS,
                format!("GetClient {id}: the asking client answered as {other:?}"),
            )),
        };
        judged(a, "GetClient", verdict);
    }
}

/// GetClusterMetadata: one node, at the address the client connected to (the SDK's leader
/// routing connects there).
async fn cluster_metadata(a: &mut Actor) {
    let begun = a.begin("get cluster metadata");
    let result = a.client().get_cluster_metadata().await;
    a.end(&begun, &result);
    a.after(&begun);
    let verdict = match &result {
        Ok(metadata) => match metadata.nodes.as_slice() {
            [node]
                if node.ip == super::super::SERVER_ADDR.ip().to_string()
                    && node.tcp_port == super::super::SERVER_ADDR.port() =>
            {
                Ok(())
            }
            _ => Err(violation(
                INV_CLIENTS,
                format!(
                    "GetClusterMetadata: {metadata:?}, not this one node at {}",
                    super::super::SERVER_ADDR
                ),
            )),
        },
        // Refused only for a stopped node or a server going down (a full disk does not stop
        // a read); any other refusal fails the run there.
        Err(cairn_client::ClientError::Server { code, .. }) => {
            a.read_refusal_in_doubt(&begun, *code, "get cluster metadata", INV_CLIENTS);
            return;
        }
        Err(_) => return,
    };
    judged(a, "ClusterMetadata", verdict);
}

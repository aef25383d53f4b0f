//! A data connection attached to its coordinator's session (`ATTACH_CONSUMER_SESSION`, 14).
//! With a roster of more than one member, Iggy's SDK sends a consumer's auto-commit polls
//! (`POLL_MESSAGES_ON_PRIMARY`, 104) and offset writes on a second connection to the member
//! the routing named (`command::roster`), logged in with the same credentials, after
//! attaching it to the coordinator's session: those requests act for the coordinator's
//! login, whose consumer-group memberships they use.
//!
//! | request on a logged-in connection          | answer                                  |
//! |--------------------------------------------|-----------------------------------------|
//! | attach to a live login of the same user    | done; 104, 121, 122 act for that login  |
//! | attach to a login no connection holds now, or to another user's | 58 (the same answer: whether another user's session exists is not told); the SDK routes again |
//! | 104 unattached                             | 58: the SDK routes and attaches again   |
//! | 104, 121, 122 attached to a login that ended since | 58: never acts for the connection's own login instead (a group's offset written after the coordinator left it) |
//! | 121, 122 never attached                    | act for this connection's own login     |
//!
//! Architecture invariant: an attachment never widens what a connection may do: the acting
//! session is this connection's own login (its user, incarnation, password or token, all
//! checked at every request as before) with only the coordinator's client id and session
//! number, which key its group memberships.

use super::answer::Conn;
use crate::command::{Session, Status};
use iggy_binary_protocol::codes::{
    DELETE_CONSUMER_OFFSET_CODE, POLL_MESSAGES_ON_PRIMARY_CODE, STORE_CONSUMER_OFFSET_CODE,
};
use iggy_binary_protocol::requests::system::AttachConsumerSessionRequest;

/// Iggy's `TransientNotAccepted`: the SDK drops its route and routes again.
pub const NOT_ACCEPTED: u32 = 58;

/// Attaches the connection's login to the coordinator login `request` names.
pub fn attach(conn: &mut Conn, request: AttachConsumerSessionRequest) -> Result<(), Status> {
    let cx = conn.listener.cx.clone();
    let login = conn.login.as_mut().expect("the gate passed");
    let own = &login.session;
    let holder = cx.registry.login_of(request.client_id, request.session);
    match holder {
        Some(user) if user == own.user_id => {
            let acting = Session {
                client: request.client_id,
                session: request.session,
                peer: own.peer,
                user_id: own.user_id,
                incarnation: own.incarnation,
                password_hash: own.password_hash.clone(),
                token: own.token,
                node: cx.node.client(request.client_id),
            };
            tracing::debug!(user = own.user_id, "a data connection attached");
            login.attached = Some(Attached::Live(acting));
            Ok(())
        }
        other => {
            if other.is_some() {
                tracing::info!(
                    user = own.user_id,
                    "refused an attachment to another user's session"
                );
            }
            login.attached = Some(Attached::Ended);
            Err(Status::because(
                NOT_ACCEPTED,
                "no login of this user holds the session to attach to",
            ))
        }
    }
}

/// A data connection's attachment.
pub enum Attached {
    /// Acting for this login (the coordinator's client id and session, this connection's
    /// user and checks).
    Live(Session),
    /// Its login ended, or the last attachment was refused: routed requests answer 58
    /// until it attaches again.
    Ended,
}

fn routed(code: u32) -> bool {
    matches!(
        code,
        POLL_MESSAGES_ON_PRIMARY_CODE | STORE_CONSUMER_OFFSET_CODE | DELETE_CONSUMER_OFFSET_CODE
    )
}

/// Before a request of `code`: marks ended an attachment whose login ended, and refuses a
/// routed request without a live one (the module doc's table).
pub fn check(conn: &mut Conn, code: u32) -> Result<(), Status> {
    if !routed(code) {
        return Ok(());
    }
    let registry = &conn.listener.cx.registry;
    let login = conn.login.as_mut().expect("the gate passed");
    if let Some(Attached::Live(a)) = &login.attached {
        if registry.login_of(a.client, a.session) != Some(a.user_id) {
            login.attached = Some(Attached::Ended);
        }
    }
    match (&login.attached, code) {
        (Some(Attached::Live(_)), _) => Ok(()),
        (None, code) if code != POLL_MESSAGES_ON_PRIMARY_CODE => Ok(()),
        _ => Err(Status::because(
            NOT_ACCEPTED,
            "a routed request needs a live attached session",
        )),
    }
}

/// The session a request of `code` acts for, once [`check`]ed: the attached login's for
/// routed requests, else the connection's own.
pub fn acting(conn: &Conn, code: u32) -> &Session {
    let login = conn.login.as_ref().expect("the gate passed");
    match (&login.attached, routed(code)) {
        (Some(Attached::Live(attached)), true) => attached,
        _ => &login.session,
    }
}

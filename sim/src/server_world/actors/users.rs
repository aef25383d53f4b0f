//! The user the admin manages for the user's session: created, changed (its permission to
//! poll revoked, deactivated, its password replaced) and deleted; and the session, whose
//! logins and polls must behave as the last acknowledged change says from its answer on.

use super::super::lock;
use super::super::oracle::{INV_META, INV_REVOKED};
use super::data::judge_poll;
use super::{outcome, sid, Actor, Begun, Outcome, CODE_UNAVAILABLE};
use crate::report::violation;
use cairn_client::iggy_binary_protocol::requests::messages::PollMessagesRequest;
use cairn_client::iggy_binary_protocol::{
    WireConsumer, WireGlobalPermissions, WireIdentifier, WirePermissions, WirePollingStrategy,
};
use cairn_client::{codes, Client, ClientError, Credentials};
use rand::Rng;

/// Refusal codes (engine `NodeError::code`): no such user or a wrong password; an
/// inactive user; a request the session's permissions do not allow.
const INVALID_CREDENTIALS: u32 = 42;
const USER_INACTIVE: u32 = 47;
const UNAUTHORIZED: u32 = 41;
/// Failed logins from one address the server checks in a window (its default
/// `max_failed_logins`, counted per address and account; the count lives in the server
/// process's memory). The session counts its address's failures over every account it
/// tries, which is never fewer than any one account's: past the limit a login from there
/// may be refused with 42, so the session attempts a login it expects refused
/// only below [`MAX_FAILED_LOGINS`] - 1 failures in an epoch, and a refused login it expects
/// answered is excused only at the limit.
const MAX_FAILED_LOGINS: u32 = 5;
/// The share of the session's polls after which it logs in afresh.
const RELOGIN_SHARE: f64 = 0.25;

/// A change the admin makes to the session's user.
#[derive(Debug, Clone, Copy)]
enum Change {
    RevokePoll,
    Deactivate,
    NewPassword,
    Delete,
}

/// The session user's permissions: reads and polls while `poll`, nothing otherwise (reading
/// a stream or its topics allows polling them too, as in Iggy).
pub(super) fn permissions(poll: bool) -> WirePermissions {
    WirePermissions {
        global: WireGlobalPermissions {
            manage_servers: false,
            read_servers: false,
            manage_users: false,
            read_users: false,
            manage_streams: false,
            read_streams: poll,
            manage_topics: false,
            read_topics: poll,
            poll_messages: poll,
            send_messages: false,
        },
        streams: Vec::new(),
    }
}

/// Creates a user for the user's session, or changes or deletes the one it uses.
pub(crate) async fn users(a: &mut Actor, next: &mut u32) {
    let (live, doubtful, pick, changed) = {
        let mut w = lock(&a.world);
        if !w.profile.user_session {
            return;
        }
        let live = w
            .oracle
            .live_users
            .iter()
            .next()
            .map(|(n, p)| (n.clone(), p.clone()));
        let changed = live.as_ref().is_some_and(|(n, _)| {
            w.oracle.revoked_users.contains_key(n)
                || w.oracle.refused_logins.keys().any(|(user, _)| user == n)
        });
        let doubtful = !w.oracle.users_in_doubt.is_empty();
        (live, doubtful, w.rng.gen_range(0..4), changed)
    };
    match live {
        None if !doubtful || next.is_multiple_of(4) => {
            *next += 1;
            // Usernames are 3 to 50 bytes.
            create(a, format!("u{next:03}")).await;
        }
        // One change per user, then its deletion: each change judged on its own.
        Some((name, password)) => {
            let change = match pick {
                _ if changed => Change::Delete,
                0 => Change::RevokePoll,
                1 => Change::Deactivate,
                2 => Change::NewPassword,
                _ => Change::Delete,
            };
            change_user(a, &name, &password, change).await;
        }
        None => {}
    }
}

async fn create(a: &mut Actor, name: String) {
    let password = format!("pw-{name}");
    let begun = a.begin(&format!("create user {name}"));
    lock(&a.world).oracle.users_in_doubt.insert(name.clone());
    let result = a
        .client()
        .create_user(&name, &password, true, Some(permissions(true)))
        .await;
    a.end(&begun, &result);
    a.after(&begun);
    let kind = outcome(&result);
    if let Outcome::Refused(code) = kind {
        // In doubt (kept in `users_in_doubt`) only for a cause of the server's.
        a.refusal_in_doubt(&begun, code, &format!("create user {name}"), INV_META);
        return;
    }
    let mut w = lock(&a.world);
    match kind {
        Outcome::Ok => {
            w.oracle.users_in_doubt.remove(&name);
            w.oracle.live_users.insert(name, password);
        }
        Outcome::NotSent => {
            w.oracle.users_in_doubt.remove(&name);
        }
        _ => {}
    }
}

/// Sends `change` of user `name` (acknowledged, not in doubt); while it is in flight, and
/// for good when its outcome is unknown, the user is in doubt (never judged again).
async fn change_user(a: &mut Actor, name: &str, password: &str, change: Change) {
    let user = WireIdentifier::named(name).expect("name");
    let new_password = format!("{password}+");
    let op = format!("{change:?} of user {name}");
    let begun = a.begin(&op);
    lock(&a.world)
        .oracle
        .users_in_doubt
        .insert(name.to_string());
    let result = match change {
        Change::RevokePoll => {
            let client = a.client();
            client
                .update_permissions(&user, Some(permissions(false)))
                .await
        }
        Change::Deactivate => a.client().update_user(&user, None, Some(false)).await,
        Change::NewPassword => {
            let client = a.client();
            client.change_password(&user, password, &new_password).await
        }
        Change::Delete => a.client().delete_user(&user).await,
    };
    a.end(&begun, &result);
    a.after(&begun);
    let kind = outcome(&result);
    if let Outcome::Refused(code) = kind {
        // The user was acknowledged and nothing in doubt changed it: any refusal but one for
        // a cause of the server's is wrong.
        if a.refusal_in_doubt(&begun, code, &op, INV_META) {
            lock(&a.world).oracle.live_users.remove(name);
        }
        return;
    }
    let mut w = lock(&a.world);
    let now = w.now();
    match kind {
        Outcome::Ok => {
            w.oracle.users_in_doubt.remove(name);
            let key = (name.to_string(), password.to_string());
            match change {
                Change::RevokePoll => {
                    w.oracle.revoked_users.insert(name.to_string(), now);
                }
                // A password login as an inactive user gets the answer a wrong password gets.
                Change::Deactivate => {
                    w.oracle
                        .refused_logins
                        .insert(key, (now, INVALID_CREDENTIALS));
                }
                Change::NewPassword => {
                    w.oracle
                        .refused_logins
                        .insert(key, (now, INVALID_CREDENTIALS));
                    w.oracle.live_users.insert(name.to_string(), new_password);
                }
                Change::Delete => {
                    w.oracle.live_users.remove(name);
                    w.oracle.deleted_users.insert(name.to_string(), now);
                }
            }
        }
        Outcome::NotSent => {
            w.oracle.users_in_doubt.remove(name);
        }
        _ => {
            w.oracle.live_users.remove(name);
        }
    }
}

/// The session's failed logins in the server process of `epoch`: those an answer showed,
/// and an upper bound of those the server may have counted. A request whose client holds
/// credentials the server may refuse can log in unseen: its client re-logs in inside the
/// request (up to `1 + reconnect_retries` times, `Client::exchange`), and a refusal whose reply was lost reads
/// as a connection failure.
#[derive(Debug, Default)]
struct Failures {
    epoch: u64,
    count: u32,
    possible: u32,
}

impl Failures {
    /// Counts a refused login (the session's own, or its client's re-login inside a
    /// request) answered by this epoch's process; a new epoch starts from none. `logins`:
    /// the most logins the call may have made.
    fn note(&mut self, a: &Actor, begun: &Begun, logins: u32, error: Option<&ClientError>) {
        let w = lock(&a.world);
        let epoch = w.oracle.epoch;
        if self.epoch != epoch {
            *self = Failures {
                epoch,
                ..Failures::default()
            };
        }
        // A refusal answered by an earlier process than this epoch's counts against nothing.
        let (Some(error), true) = (error, begun.epoch == epoch) else {
            return;
        };
        let refused = login_refusal(error).is_some();
        let stale = match &a.config.credentials {
            Some(Credentials::Password { username, password }) => {
                let key = (username.clone(), password.clone());
                w.oracle.users_in_doubt.contains(username)
                    || w.oracle.refused_logins.contains_key(&key)
                    || w.oracle.live_users.get(username) != Some(password)
            }
            // The session logs in with passwords only.
            Some(Credentials::Token(_)) | None => false,
        };
        self.count += u32::from(refused);
        self.possible += match (stale, refused) {
            (true, _) => logins,
            (false, true) => 1,
            (false, false) => 0,
        };
        assert!(
            self.count <= self.possible,
            "a seen refusal is a possible one"
        );
    }

    /// Whether the server may have counted the limit of failed logins in this epoch.
    fn may_be_limited(&self) -> bool {
        self.possible >= MAX_FAILED_LOGINS
    }
}

/// The user the session may judge: acknowledged, not deleted, nothing about it in doubt.
/// Sometimes a password the user had before it was replaced (that login must be refused).
/// Near the limit of failed logins, only a login expected answered (or none).
fn pick_user(a: &Actor, failures: &Failures) -> Option<(String, String)> {
    let mut w = lock(&a.world);
    let near_limit = failures.epoch == w.oracle.epoch && failures.possible + 1 >= MAX_FAILED_LOGINS;
    let free = w
        .oracle
        .live_users
        .iter()
        .find(|(n, _)| !w.oracle.users_in_doubt.contains(*n))
        .map(|(n, p)| (n.clone(), p.clone()));
    let (name, password) = free?;
    if near_limit {
        let refused = w
            .oracle
            .refused_logins
            .contains_key(&(name.clone(), password.clone()));
        return (!refused).then_some((name, password));
    }
    let old = w
        .oracle
        .refused_logins
        .keys()
        .find(|(n, p)| *n == name && *p != password)
        .cloned();
    match old {
        Some(old) if w.rng.gen_bool(0.5) => Some(old),
        _ => Some((name, password)),
    }
}

/// Logs in as `name` with `password` on a fresh connection, judged: refused from the
/// answer of a change that forbids it on, answered while nothing forbids it.
async fn login(a: &mut Actor, name: &str, password: &str, failures: &mut Failures) -> bool {
    a.config = a.config.clone().with_credentials(name, password);
    a.client = None;
    a.session = None;
    let begun = a.begin(&format!("log in as user {name}"));
    let result = Client::connect(a.env.clone(), a.config.clone()).await;
    a.end(&begun, &result);
    failures.note(a, &begun, 1, result.as_ref().err());
    let limited = failures.may_be_limited();
    let judged = judge_login(a, &begun, (name, password), limited, &result);
    if let Err(v) = judged {
        a.fail(v);
        return false;
    }
    match result {
        Ok(client) => {
            a.client = Some(client);
            a.note_session();
            true
        }
        Err(_) => false,
    }
}

/// Judges a login as `user` (name, password); `limited` when the session's failed logins
/// reached the server's limit (any login may then be refused).
fn judge_login(
    a: &Actor,
    begun: &Begun,
    (name, password): (&str, &str),
    limited: bool,
    result: &Result<Client, ClientError>,
) -> Result<(), crate::report::Violation> {
    let code = match result {
        Ok(_) => None,
        Err(e) => match login_refusal(e) {
            Some(code) => Some(code),
            None => return Ok(()),
        },
    };
    judge_login_code(a, begun, (name, password), limited, code)
}

/// [`judge_login`], given the login's refusal code (`None`: it was answered).
fn judge_login_code(
    a: &Actor,
    begun: &Begun,
    (name, password): (&str, &str),
    limited: bool,
    code: Option<u32>,
) -> Result<(), crate::report::Violation> {
    let mut w = lock(&a.world);
    let epoch_changed = w.oracle.epoch != begun.epoch;
    if w.oracle.users_in_doubt.contains(name)
        || !w.oracle.live_users.contains_key(name)
        || epoch_changed
    {
        return Ok(());
    }
    let forbidden = w
        .oracle
        .refused_logins
        .get(&(name.to_string(), password.to_string()))
        .copied();
    if code == Some(CODE_UNAVAILABLE) {
        // The server could not check the credentials: that says nothing about them, but
        // only the node stopping or the server going down may say it (a login writes
        // nothing, so a full disk alone does not).
        return match w.stop_cause(begun.epoch) {
            Some(_) => {
                w.decision("RefusedWithCause");
                Ok(())
            }
            None => Err(violation(INV_REVOKED, format!("log in as user {name} sent at {} ns: refused with code {CODE_UNAVAILABLE}, with no fault to blame (the server stayed up, the node runs)", begun.at))),
        };
    }
    match (forbidden, code) {
        (Some((at, expected)), Some(code)) if at <= begun.at && code == expected => {
            // Deactivation forbids the current password; a new one, the old.
            let current = w.oracle.live_users.get(name).map(String::as_str) == Some(password);
            w.decision(if current { "LoginInactive" } else { "LoginOldPassword" });
            Ok(())
        }
        (Some((at, expected)), _) if at <= begun.at => Err(violation(INV_REVOKED, format!("log in as user {name} sent at {} ns: answered {code:?}, though a change answered at {at} ns forbids it (code {expected})", begun.at))),
        // A change answered after the login was sent was in flight while the server checked
        // it (the check waits on the hashing pool): either order is right.
        (Some((at, _)), Some(_)) if at > begun.at => {
            w.decision("LoginRacedChange");
            Ok(())
        }
        (_, Some(code @ (INVALID_CREDENTIALS | USER_INACTIVE))) if !limited => Err(violation(INV_REVOKED, format!("log in as user {name} with its current password refused with {code}, though it was acknowledged active with that password and nothing about it is in doubt"))),
        _ => Ok(()),
    }
}

/// The code of a refused login: a status, or an eviction naming the refusal.
fn login_refusal(e: &ClientError) -> Option<u32> {
    match e {
        ClientError::Evicted { reason } => match codes::eviction_reason_name(*reason) {
            "UserInactive" => Some(USER_INACTIVE),
            "InvalidCredentials" => Some(INVALID_CREDENTIALS),
            _ => None,
        },
        e => e.code(),
    }
}

/// Logs in as the admin's current user and polls; once the user's deletion or the
/// revocation of its permission to poll was answered, a poll sent after that answer must get
/// no data.
pub(crate) async fn user_session(mut a: Actor) {
    let mut failures = Failures::default();
    while a.think().await {
        let Some((name, password)) = pick_user(&a, &failures) else {
            continue;
        };
        if !login(&mut a, &name, &password, &mut failures).await {
            continue;
        }
        // A few polls, then a fresh login (half the time after a logout): a change is
        // judged at both.
        while a.think().await {
            if !poll(&mut a, &name, &mut failures).await {
                break;
            }
            if lock(&a.world).chance(RELOGIN_SHARE) {
                if lock(&a.world).chance(0.5) {
                    let limited = failures.may_be_limited();
                    logout(&mut a, (&name, &password), limited).await;
                }
                break;
            }
        }
    }
}

/// Logs the session out: answered, or the connection evicted (a logout without a session).
/// The server answers a logout itself, asking the node nothing; a refusal can only be the
/// client's login again (as `user`) after its connection reset, judged as a login is
/// (`limited` as there).
async fn logout(a: &mut Actor, (name, password): (&str, &str), limited: bool) {
    let begun = a.begin(&format!("log out user {name}"));
    let result = a.client().logout().await;
    a.end(&begun, &result);
    a.after(&begun);
    match outcome(&result) {
        Outcome::Ok => lock(&a.world).decision("Logout"),
        Outcome::Refused(code) => {
            if let Err(v) = judge_login_code(a, &begun, (name, password), limited, Some(code)) {
                a.fail(v);
            }
        }
        Outcome::Unknown | Outcome::NotSent => {}
    }
}

/// One poll as user `name`; false when the session is over (refused, revoked, failed).
async fn poll(a: &mut Actor, name: &str, failures: &mut Failures) -> bool {
    let request = PollMessagesRequest {
        consumer: WireConsumer::consumer(sid(99)),
        stream_id: sid(a.ids.stream),
        topic_id: sid(a.ids.topics[0]),
        partition_id: Some(0),
        strategy: WirePollingStrategy::offset(0),
        count: 5,
        auto_commit: false,
    };
    let known = lock(&a.world).oracle.knows((0, 0), 0);
    let begun = a.begin(&format!("poll as user {name}"));
    let result = a.client().poll_messages(&request).await;
    a.end(&begun, &result);
    let epoch = a.after(&begun);
    // A login when the request finds no connection, then each reconnect attempt.
    let logins = 1 + a.config.reconnect_retries;
    failures.note(a, &begun, logins, result.as_ref().err());
    // The password the session logged in with (its client logs in again with it).
    let password = match &a.config.credentials {
        Some(Credentials::Password { username, password }) if username == name => {
            Some((username.clone(), password.clone()))
        }
        _ => None,
    };
    let (deleted_at, revoked_at, changed_at, judged) = {
        let w = lock(&a.world);
        let judged =
            !w.oracle.users_in_doubt.contains(name) && w.oracle.live_users.contains_key(name);
        // A deactivation or a new password ends the session of the password it forbids,
        // even one that logged in while the change was in flight.
        let changed_at = password.and_then(|key| w.oracle.refused_logins.get(&key).map(|f| f.0));
        (
            w.oracle.deleted_users.get(name).copied(),
            w.oracle.revoked_users.get(name).copied(),
            changed_at,
            judged,
        )
    };
    let forbidden = [deleted_at, revoked_at, changed_at]
        .into_iter()
        .flatten()
        .find(|at| *at <= begun.at);
    match (&result, forbidden) {
        (Ok(polled), Some(at)) => {
            a.fail(violation(INV_REVOKED, format!("user {name} was deleted, deactivated, given a new password or lost its permission to poll (answered at {at} ns); its session's poll sent at {} ns was answered with {} messages", begun.at, polled.count)));
            false
        }
        (Ok(polled), None) => {
            let known = known && epoch == begun.epoch;
            judge_poll(a, (0, 0), Some(0), known, polled, epoch).is_ok()
        }
        (Err(ClientError::Server { code, .. }), Some(_)) => {
            if revoked_at.is_some() && deleted_at.is_none() && *code == UNAUTHORIZED {
                lock(&a.world).decision("PollRevoked");
            }
            false
        }
        (Err(ClientError::Server { code, .. }), None)
            if judged && *code == UNAUTHORIZED && revoked_at.is_none() =>
        {
            a.fail(violation(INV_REVOKED, format!("user {name} may poll and nothing about it is in doubt; its session's poll was refused with {code}")));
            false
        }
        (Err(_), _) => lock(&a.world).oracle.live_users.contains_key(name),
    }
}

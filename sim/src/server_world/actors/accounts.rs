//! The admin's account reads and tokens: GetUsers and GetUser judged against the users it
//! created and deleted; personal access tokens of its own created, logged in with (as root),
//! listed, deleted and then refused at login, each judged against the model of its tokens (in doubt after a lost reply until a list
//! after that server process is gone).

use super::super::lock;
use super::super::oracle::{StreamState, INV_META};
use super::{outcome, Actor, Outcome};
use crate::report::violation;
use cairn_client::iggy_binary_protocol::WireIdentifier;
use rand::Rng;
use std::collections::BTreeSet;

/// Most tokens the admin keeps (Iggy limits tokens per user; the model stays small).
const MAX_TOKENS: usize = 4;
/// The root user's id, whose account the admin reads by id.
const ROOT_ID: u32 = 0;
/// Logins with a deleted token the admin tries per server process.
const MAX_REFUSED_TOKEN_LOGINS: u32 = 2;

/// One account command, picked at random: a token created or deleted, then listed; or the
/// users listed, and root read by id.
pub(crate) async fn accounts(a: &mut Actor, next: &mut u32) {
    let (pick, doomed) = {
        let mut w = lock(&a.world);
        let live: Vec<String> = w
            .oracle
            .tokens
            .iter()
            .filter(|(_, s)| matches!(s, StreamState::Exists(_)))
            .map(|(n, _)| n.clone())
            .collect();
        let doomed = match live.len() >= MAX_TOKENS || (!live.is_empty() && w.rng.gen_bool(0.4)) {
            true => Some(live[w.rng.gen_range(0..live.len())].clone()),
            false => None,
        };
        (w.rng.gen_range(0..3), doomed)
    };
    match (pick, doomed) {
        (0, _) => users(a).await,
        (_, Some(name)) => delete_token(a, &name).await,
        (_, None) => {
            *next += 1;
            create_token(a, &format!("pat{next}")).await;
        }
    }
    list_tokens(a).await;
}

/// The model's verdict after a create or delete of token `name` ended: its next state,
/// or none when the run failed.
fn settle(
    a: &Actor,
    begun: &super::Begun,
    (name, op): (&str, &str),
    result: Outcome,
    done: StreamState,
) {
    let epoch = lock(&a.world).oracle.epoch;
    let next = match result {
        Outcome::Ok => done,
        Outcome::Refused(code) => {
            if !a.refusal_in_doubt(begun, code, op, INV_META) {
                return;
            }
            StreamState::InDoubt(epoch)
        }
        Outcome::Unknown => StreamState::InDoubt(epoch),
        Outcome::NotSent => return,
    };
    lock(&a.world).oracle.tokens.insert(name.to_string(), next);
}

async fn create_token(a: &mut Actor, name: &str) {
    let op = format!("create token {name}");
    let begun = a.begin(&op);
    let result = a.client().create_personal_access_token(name, 0).await;
    a.end(&begun, &result);
    a.after(&begun);
    if let Ok(raw) = &result {
        if raw.is_empty() {
            return a.fail(violation(INV_META, format!("{op}: an empty token")));
        }
        let mut w = lock(&a.world);
        w.decision("TokenCreated");
        w.oracle.token_secrets.insert(name.to_string(), raw.clone());
    }
    settle(
        a,
        &begun,
        (name, &op),
        outcome(&result),
        StreamState::Exists(0),
    );
    if let Ok(raw) = result {
        token_login(a, name, &raw, true).await;
    }
}

/// Logs in with token `name` (`raw`) on a connection of its own: as root while `valid`,
/// refused once its deletion was acknowledged. Refused token logins count against the
/// admin's address (one count for every token), so at most [`MAX_REFUSED_TOKEN_LOGINS`] are
/// tried per server process (below the server's limit of failed logins, which would refuse
/// the admin's valid tokens too).
async fn token_login(a: &mut Actor, name: &str, raw: &str, valid: bool) {
    let epoch = {
        let mut w = lock(&a.world);
        let epoch = w.oracle.epoch;
        if !valid {
            let tried = w.oracle.refused_token_logins.entry(epoch).or_default();
            if *tried >= MAX_REFUSED_TOKEN_LOGINS {
                return;
            }
            *tried += 1;
        }
        epoch
    };
    let mut config = a.config.clone().with_token(raw);
    config.reconnect_retries = 0;
    let op = format!("log in with token {name}");
    let begun = a.begin(&op);
    let result = cairn_client::Client::connect(a.env.clone(), config).await;
    a.end(&begun, &result);
    if lock(&a.world).oracle.epoch != epoch {
        return;
    }
    let verdict = match (&result, valid) {
        (Ok(client), true) => match client.session().map(|s| s.user_id) {
            Some(ROOT_ID) => Ok("TokenLogin"),
            other => Err(format!("logged in as user {other:?}, not root")),
        },
        (Ok(_), false) => Err("logged in, though the token's deletion was acknowledged".into()),
        (Err(e), false) if token_refusal(e) => Ok("TokenLoginRefused"),
        (Err(e), _) => match e.code() {
            // Refused for a cause of the server's (a stopped node, a restart; a login writes
            // nothing, so a full disk alone is none): the judge says.
            Some(code) if !token_refusal(e) => {
                a.read_refusal_in_doubt(&begun, code, &op, INV_META);
                return;
            }
            Some(_) => Err(format!(
                "refused ({e}), though the token was acknowledged created"
            )),
            None => return,
        },
    };
    if let Ok(client) = result {
        client.close().await;
    }
    let mut w = lock(&a.world);
    match verdict {
        Ok(row) => w.decision(row),
        Err(why) => w.fail(violation(INV_META, format!("{op}: {why}"))),
    }
}

/// Whether `e` refuses a login for its token (status 53 or 54, or an eviction naming it).
fn token_refusal(e: &cairn_client::ClientError) -> bool {
    match e {
        cairn_client::ClientError::Evicted { reason } => {
            cairn_client::codes::eviction_reason_name(*reason) == "InvalidToken"
        }
        e => matches!(e.code(), Some(53 | 54)),
    }
}

async fn delete_token(a: &mut Actor, name: &str) {
    let op = format!("delete token {name}");
    let begun = a.begin(&op);
    let result = a.client().delete_personal_access_token(name).await;
    a.end(&begun, &result);
    a.after(&begun);
    if result.is_ok() {
        lock(&a.world).decision("TokenDeleted");
    }
    settle(
        a,
        &begun,
        (name, &op),
        outcome(&result),
        StreamState::Absent,
    );
    let raw = lock(&a.world).oracle.token_secrets.remove(name);
    if let (Ok(()), Some(raw)) = (result, raw) {
        token_login(a, name, &raw, false).await;
    }
}

/// GetPersonalAccessTokens: every token the model holds created is listed, every one it
/// holds deleted is not, and none it does not hold (never created, or gone); a token in doubt is adopted as
/// listed once the process that might still apply its command is gone.
async fn list_tokens(a: &mut Actor) {
    let begun = a.begin("get tokens");
    let result = a.client().get_personal_access_tokens().await;
    a.end(&begun, &result);
    let epoch = a.after(&begun);
    let tokens = match result {
        Ok(tokens) => tokens,
        Err(e) => return refused(a, &begun, "get tokens", &e),
    };
    let listed: BTreeSet<String> = tokens.iter().map(|t| t.name.as_str().to_string()).collect();
    let mut w = lock(&a.world);
    if epoch != begun.epoch {
        return;
    }
    let mut wrong = Vec::new();
    for (name, state) in w.oracle.tokens.iter_mut() {
        let found = listed.contains(name);
        match *state {
            StreamState::InDoubt(e) if e == epoch => continue,
            StreamState::Exists(_) if !found => {
                wrong.push(format!("{name} acknowledged created is not listed"))
            }
            StreamState::Absent if found => {
                wrong.push(format!("{name} acknowledged deleted is listed"))
            }
            _ => {}
        }
        *state = match found {
            true => StreamState::Exists(0),
            false => StreamState::Absent,
        };
    }
    // Names are never reused, and a name leaves the model only once a read after its
    // deletion (or lost create) found it gone: a token listed that the model does not hold
    // was never created, or came back after it was gone.
    for name in listed.iter().filter(|n| !w.oracle.tokens.contains_key(*n)) {
        wrong.push(format!(
            "{name} is listed, though never created or already gone"
        ));
    }
    w.oracle.tokens.retain(|_, s| *s != StreamState::Absent);
    match wrong.is_empty() {
        true => w.decision("TokensListed"),
        false => w.fail(violation(
            INV_META,
            format!(
                "GetPersonalAccessTokens listed {listed:?}: {}",
                wrong.join("; ")
            ),
        )),
    }
}

/// GetUsers lists root and every user acknowledged created and not deleted, and no user
/// acknowledged deleted (users with a change in doubt are not judged); GetUser of root's id
/// answers root.
async fn users(a: &mut Actor) {
    let begun = a.begin("get users");
    let result = a.client().get_users().await;
    a.end(&begun, &result);
    a.after(&begun);
    let users = match result {
        Ok(users) => users,
        Err(e) => return refused(a, &begun, "get users", &e),
    };
    let listed: BTreeSet<&str> = users.iter().map(|u| u.username.as_str()).collect();
    let why = {
        let w = lock(&a.world);
        let doubt = &w.oracle.users_in_doubt;
        let missing: Vec<&String> = w
            .oracle
            .live_users
            .keys()
            .filter(|n| !doubt.contains(*n) && !listed.contains(n.as_str()))
            .collect();
        let deleted: Vec<&String> = w
            .oracle
            .deleted_users
            .keys()
            .filter(|n| !doubt.contains(*n) && listed.contains(n.as_str()))
            .collect();
        let root = listed.contains(super::super::ROOT_USER);
        (!missing.is_empty() || !deleted.is_empty() || !root).then(|| format!("GetUsers listed {listed:?}: missing {missing:?}, deleted yet listed {deleted:?}, root listed: {root}"))
    };
    if let Some(why) = why {
        return a.fail(violation(INV_META, why));
    }
    lock(&a.world).decision("UsersListed");
    let begun = a.begin("get user 0");
    let result = a.client().get_user(&WireIdentifier::numeric(ROOT_ID)).await;
    a.end(&begun, &result);
    a.after(&begun);
    match &result {
        Ok(Some(user)) if user.user.username.as_str() == super::super::ROOT_USER => {
            lock(&a.world).decision("UserRead")
        }
        Ok(other) => a.fail(violation(
            INV_META,
            format!("GetUser {ROOT_ID} answered {other:?}, not root"),
        )),
        Err(e) => refused(a, &begun, "get user 0", e),
    }
}

/// A read of the metadata view that ended in an error: a refusal needs the node stopped or
/// the server down (a full disk does not stop a read; else the run fails there); a lost
/// reply tells nothing.
fn refused(a: &Actor, begun: &super::Begun, op: &str, e: &cairn_client::ClientError) {
    if let Some(code) = e.code() {
        a.read_refusal_in_doubt(begun, code, op, INV_META);
    }
}

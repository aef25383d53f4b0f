//! Personal access tokens through Iggy's own Rust SDK (`iggy` =0.11.0) against the real
//! `cairn` binary: created, listed (never shown again), logged in with on a fresh client,
//! and refused once deleted, expired, or their user deleted or deactivated; failed token
//! logins count in the failed-login limit.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::common;

use common::{anonymous, id, Cairn, PASSWORD};
use iggy::prelude::*;
use std::time::Duration;

/// Enough failed logins for the refusals these tests provoke (the SDK retries some).
const LENIENT: [(&str, &str); 1] = [("CAIRN_AUTH_MAX_FAILED_LOGINS", "1000")];

async fn client(cairn: &Cairn, user: &str, password: &str) -> IggyClient {
    let client =
        IggyClient::from_connection_string(&cairn.connection_string(user, password)).unwrap();
    client.connect().await.expect("logs in");
    client
}

/// A fresh client logged in with `token`.
async fn with_token(cairn: &Cairn, token: &str) -> Result<IggyClient, IggyError> {
    let client = anonymous(cairn).await;
    client.login_with_personal_access_token(token).await?;
    Ok(client)
}

fn reader() -> Permissions {
    let mut permissions = Permissions::default();
    permissions.global.read_streams = true;
    permissions
}

/// A user named `name` (password `name-password`) who may read streams, and its client.
async fn user(cairn: &Cairn, root: &IggyClient, name: &str) -> (u32, IggyClient) {
    let password = format!("{name}-password");
    let created = root
        .create_user(name, &password, UserStatus::Active, Some(reader()))
        .await
        .unwrap();
    (created.id, client(cairn, name, &password).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_logs_in_is_listed_without_its_secret_and_deleting_it_ends_its_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &LENIENT);
    let root = client(&cairn, "iggy", PASSWORD).await;
    root.create_stream("s").await.unwrap();
    let (alice_id, alice) = user(&cairn, &root, "alice").await;

    let raw = alice
        .create_personal_access_token("ci-token", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap()
        .token;
    assert_eq!(
        raw.len(),
        68,
        "50 random bytes in base64, as Iggy makes them"
    );
    assert_eq!(
        alice
            .create_personal_access_token("ci-token", PersonalAccessTokenExpiry::NeverExpire)
            .await
            .unwrap_err()
            .as_code(),
        51,
        "a second token of the same name"
    );
    assert_eq!(
        alice
            .create_personal_access_token("no", PersonalAccessTokenExpiry::NeverExpire)
            .await
            .unwrap_err()
            .as_code(),
        50,
        "a name of 2 bytes"
    );
    let listed = alice.get_personal_access_tokens().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "ci-token");
    assert!(listed[0].expiry_at.is_none());
    assert!(
        root.get_personal_access_tokens().await.unwrap().is_empty(),
        "each user sees its own tokens"
    );

    let by_token = with_token(&cairn, &raw).await.expect("the token logs in");
    assert_eq!(by_token.get_me().await.unwrap().user_id, Some(alice_id));
    assert_eq!(by_token.get_streams().await.unwrap().len(), 1);
    assert!(
        by_token.get_users().await.is_err(),
        "a token acts with its user's permissions, no more"
    );

    alice
        .delete_personal_access_token("ci-token")
        .await
        .unwrap();
    // The session's next request is answered Unauthenticated (40); the SDK then logs in
    // again with the token it remembers, which is refused: that is what the caller sees.
    let revoked = by_token.get_streams().await.unwrap_err();
    assert_eq!(revoked.as_code(), 53, "{revoked:?}");
    assert_eq!(
        with_token(&cairn, &raw).await.err().map(|e| e.as_code()),
        Some(53),
        "a deleted token logs in no more"
    );
    assert_eq!(
        alice
            .delete_personal_access_token("ci-token")
            .await
            .unwrap_err()
            .as_code(),
        20,
        "a token that is gone is not found"
    );
    // The password session is untouched by its token's deletion.
    assert_eq!(alice.get_streams().await.unwrap().len(), 1);
    assert!(alice.get_personal_access_tokens().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_of_deleted_or_deactivated_users_and_expired_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &LENIENT);
    let root = client(&cairn, "iggy", PASSWORD).await;
    root.create_stream("s").await.unwrap();
    let never = PersonalAccessTokenExpiry::NeverExpire;

    let (_, gone) = user(&cairn, &root, "gone").await;
    let gone_token = gone
        .create_personal_access_token("mine", never)
        .await
        .unwrap()
        .token;
    let gone_session = with_token(&cairn, &gone_token).await.unwrap();
    root.delete_user(&id("gone")).await.unwrap();
    assert!(gone_session.get_streams().await.is_err());
    assert_eq!(
        with_token(&cairn, &gone_token)
            .await
            .err()
            .map(|e| e.as_code()),
        Some(53),
        "a deleted user's token"
    );
    // Its id comes back as another user's: the old token is still nobody's.
    let (_, heir) = user(&cairn, &root, "heir").await;
    assert!(heir.get_personal_access_tokens().await.unwrap().is_empty());
    assert_eq!(
        with_token(&cairn, &gone_token)
            .await
            .err()
            .map(|e| e.as_code()),
        Some(53),
    );

    let (_, sleepy) = user(&cairn, &root, "sleepy").await;
    let sleepy_token = sleepy
        .create_personal_access_token("mine", never)
        .await
        .unwrap()
        .token;
    let sleepy_session = with_token(&cairn, &sleepy_token).await.unwrap();
    root.update_user(
        &id("sleepy"),
        None,
        Some(UserStatus::Inactive),
        &UserUpdateOptions::default(),
    )
    .await
    .unwrap();
    assert!(sleepy_session.get_streams().await.is_err());
    let inactive = with_token(&cairn, &sleepy_token).await.err();
    assert_eq!(
        inactive.map(|e| e.as_code()),
        Some(40),
        "an inactive user's token: Iggy's UserInactive eviction, which the SDK reads as 40"
    );

    let (_, brief) = user(&cairn, &root, "brief").await;
    let lifetime = Duration::from_secs(2);
    let short = brief
        .create_personal_access_token(
            "short",
            PersonalAccessTokenExpiry::ExpireDuration(IggyDuration::from(lifetime)),
        )
        .await
        .unwrap()
        .token;
    let created = IggyTimestamp::now().as_micros();
    let listed = brief.get_personal_access_tokens().await.unwrap();
    let expiry_at = listed[0].expiry_at.expect("an expiry").as_micros();
    let lifetime_micros = lifetime.as_micros() as u64;
    assert!(
        expiry_at.abs_diff(created + lifetime_micros) < 1_000_000,
        "the expiry is absolute: {expiry_at} vs {created}"
    );
    let short_session = with_token(&cairn, &short).await.expect("not expired yet");
    assert_eq!(short_session.get_streams().await.unwrap().len(), 1);
    let now = IggyTimestamp::now().as_micros();
    tokio::time::sleep(Duration::from_micros(
        expiry_at.saturating_sub(now) + 200_000,
    ))
    .await;
    assert!(
        short_session.get_streams().await.is_err(),
        "an expired token's session is refused"
    );
    assert_eq!(
        with_token(&cairn, &short).await.err().map(|e| e.as_code()),
        Some(53),
        "an expired token logs in no more"
    );
}

/// Failed token logins are counted like failed passwords, per address: past the limit a
/// token login from that address is refused even with a valid token, while a password
/// login (an account the guesses did not name) still works (review S14).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_token_logins_count_in_the_failed_login_limit() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &[("CAIRN_AUTH_MAX_FAILED_LOGINS", "2")]);
    let root = client(&cairn, "iggy", PASSWORD).await;
    let valid = root
        .create_personal_access_token("valid", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap()
        .token;
    for guess in ["not-a-token", "still-not-a-token"] {
        assert_eq!(
            with_token(&cairn, guess).await.err().map(|e| e.as_code()),
            Some(53)
        );
    }
    assert_eq!(
        with_token(&cairn, &valid).await.err().map(|e| e.as_code()),
        Some(53),
        "a valid token is refused from an address past its failed token logins"
    );
    let by_password = client(&cairn, "iggy", PASSWORD).await;
    assert!(
        by_password.get_streams().await.is_ok(),
        "the password is not locked"
    );
}

/// A session that logged in with a personal access token cannot mint another: a minted
/// token would outlive the leaked one's expiry and deletion (review S9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_session_cannot_mint_a_token_that_outlives_it() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &LENIENT);
    let root = client(&cairn, "iggy", PASSWORD).await;
    let (_, alice) = user(&cairn, &root, "alice").await;
    let leaked = alice
        .create_personal_access_token("ci-60s", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap()
        .token;
    let by_token = with_token(&cairn, &leaked)
        .await
        .expect("the token logs in");
    let minted = by_token
        .create_personal_access_token("backdoor", PersonalAccessTokenExpiry::NeverExpire)
        .await;
    assert_eq!(minted.map(|t| t.token).map_err(|e| e.as_code()), Err(41));
    let listed = alice.get_personal_access_tokens().await.unwrap();
    assert_eq!(listed.len(), 1, "only the leaked token: {listed:?}");
    assert_eq!(
        by_token.get_personal_access_tokens().await.unwrap().len(),
        1,
        "a token session still lists its user's tokens"
    );
}

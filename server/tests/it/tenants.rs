//! One tenant never reaches another's data or credentials, through Iggy's own SDK against
//! the real binary (the security review's findings, `wave3-security.md`): grants bound to
//! what they were given on, logins counted before they are checked, forbidden before not
//! found, data its owner's alone.

use crate::common;

use common::{
    anonymous, every_right_on, http_token, id, messages, metric, payloads, sdk_client as client,
    topic_options, Cairn, PASSWORD,
};
use iggy::prelude::*;

/// Review S1: bob, granted every right on his stream, reaches nothing of the stream that
/// reuses its id after his is deleted: not by name, not by id, not with the session he
/// opened before the deletion, not after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_never_reaches_the_next_stream_with_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let root = client(&cairn, "iggy", PASSWORD).await.unwrap();
    let created = root.create_stream("bobs-stream").await.unwrap();
    root.create_user(
        "bob",
        "bob-password",
        UserStatus::Active,
        Some(every_right_on(created.id)),
    )
    .await
    .unwrap();
    let bob = client(&cairn, "bob", "bob-password").await.unwrap();
    bob.create_topic(
        &id("bobs-stream"),
        "t",
        &topic_options(1, Durability::Replicated),
    )
    .await
    .expect("bob manages his stream");

    root.delete_stream(&id("bobs-stream")).await.unwrap();
    let payroll = root.create_stream("payroll").await.unwrap();
    assert_eq!(payroll.id, created.id, "the id is reused");
    root.create_topic(
        &id("payroll"),
        "t",
        &topic_options(1, Durability::Replicated),
    )
    .await
    .unwrap();
    let partitioning = Partitioning::partition_id(0);
    root.send_messages(
        &id("payroll"),
        &id("t"),
        &partitioning,
        &mut messages("ceo", 1),
    )
    .await
    .unwrap();

    refused_everything("the session opened before the deletion", &bob, payroll.id).await;
    drop((bob, root));
    cairn.terminate();
    let cairn = Cairn::start(dir.path());
    let bob = client(&cairn, "bob", "bob-password").await.unwrap();
    refused_everything("a session after a restart", &bob, payroll.id).await;
}

/// `bob` may not read, poll, send into or delete stream `stream` (by name `payroll` or by
/// id), each refused with 41 (unauthorized).
async fn refused_everything(who: &str, bob: &IggyClient, stream: u32) {
    let refused = |e: &IggyError| e.as_code() == 41;
    for stream in [id("payroll"), Identifier::numeric(stream).unwrap()] {
        let read = bob.get_stream(&stream).await;
        assert!(
            matches!(&read, Err(e) if refused(e)),
            "{who}: bob reads {stream}: {read:?}"
        );
        let polled = bob
            .poll_messages(
                &stream,
                &id("t"),
                Some(0),
                &Consumer::new(Identifier::numeric(1).unwrap()),
                &PollingStrategy::first(),
                10,
                false,
            )
            .await;
        assert!(
            matches!(&polled, Err(e) if refused(e)),
            "{who}: bob polls {stream}: {:?}",
            polled.map(|p| payloads(&p))
        );
        let partitioning = Partitioning::partition_id(0);
        let sent = bob
            .send_messages(&stream, &id("t"), &partitioning, &mut messages("bob", 1))
            .await;
        assert!(
            matches!(&sent, Err(e) if refused(e)),
            "{who}: bob sends into {stream}: {sent:?}"
        );
        let deleted = bob.delete_stream(&stream).await;
        assert!(
            matches!(&deleted, Err(e) if refused(e)),
            "{who}: bob deletes {stream}: {deleted:?}"
        );
    }
}

/// A user named `name` (password `name-password`) with no permission at all.
async fn plain_user(root: &IggyClient, name: &str) {
    root.create_user(name, &format!("{name}-password"), UserStatus::Active, None)
        .await
        .unwrap();
}

/// Review S2 and S14: a burst of logins from one address is not all verified at once (those
/// past the checks in flight an address may have wait their turn), only as many are checked
/// as the limit allows before the account is locked for the address (`cairn_login_checks`
/// in `/metrics`), and it locks the address out of the account it guessed at, of no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_logins_is_bounded_and_locks_out_only_the_account_it_guessed() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let root = client(&cairn, "iggy", PASSWORD).await.unwrap();
    plain_user(&root, "alice").await;
    let token = http_token(&cairn, "iggy", PASSWORD).await;
    let checks_before = metric(&cairn, &token, "cairn_login_checks_total").await;
    let mut burst = Vec::new();
    for _ in 0..16 {
        burst.push(anonymous(&cairn).await);
    }
    let guesses: Vec<String> = (0..burst.len()).map(|n| format!("guess-{n}")).collect();
    let answers = futures::future::join_all(
        burst
            .iter()
            .zip(&guesses)
            .map(|(c, guess)| c.login_user("iggy", guess)),
    )
    .await;
    assert!(answers.iter().all(Result::is_err), "{answers:?}");
    let checked = metric(&cairn, &token, "cairn_login_checks_total").await - checks_before;
    assert_eq!(
        checked, 5,
        "of a burst of 16 guesses, only the limit's 5 are checked: {answers:?}"
    );
    let locked = anonymous(&cairn).await.login_user("iggy", PASSWORD).await;
    assert!(
        locked.is_err(),
        "the right password of the account under attack is refused from that address"
    );
    let alice = anonymous(&cairn).await;
    alice
        .login_user("alice", "alice-password")
        .await
        .expect("another account behind the same address logs in");
}

/// Review S2 over HTTP: an HTTP login runs on a task of its own that outlives its client,
/// so nothing but the address's bound on checks in flight bounds the logins waiting; past
/// that bound a burst from one address is answered busy (503) at once instead of queueing
/// tasks, and the server answers the address's next login as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_login_burst_past_the_address_bound_is_answered_busy_not_queued() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let url = format!("{}/users/login", cairn.http_url());
    let http = reqwest::Client::new();
    let statuses = futures::future::join_all((0..32).map(|n| {
        let body = serde_json::json!({"username": format!("nobody-{n}"), "password": "guess"});
        let request = http.post(&url).json(&body).send();
        async move { request.await.expect("answered").status().as_u16() }
    }))
    .await;
    let busy = statuses.iter().filter(|s| **s == 503).count();
    assert!(
        busy > 0 && statuses.iter().all(|s| *s == 503 || *s == 400),
        "32 checks at once from one address: those past its 4 in flight are busy, the \
         rest refused as bad credentials: {statuses:?}"
    );
    let token = http_token(&cairn, "iggy", PASSWORD).await;
    assert!(
        !token.is_empty(),
        "the address logs in once the burst is over"
    );
}

/// Review S8: the current password a ChangePassword checks is counted like a login's, so a
/// session alone cannot guess its user's password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_change_is_a_counted_password_check() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start_with(dir.path(), &[("CAIRN_AUTH_MAX_FAILED_LOGINS", "3")]);
    let root = client(&cairn, "iggy", PASSWORD).await.unwrap();
    plain_user(&root, "frank").await;
    let frank = client(&cairn, "frank", "frank-password").await.unwrap();
    for n in 0..3 {
        let guess = format!("guess-{n}");
        let refused = frank
            .change_password(&id("frank"), &guess, "taken-over")
            .await
            .unwrap_err();
        assert_eq!(refused.as_code(), 42, "{refused:?}");
    }
    let refused = frank
        .change_password(&id("frank"), "frank-password", "taken-over")
        .await;
    assert_eq!(
        refused.map_err(|e| e.as_code()),
        Err(42),
        "past the limit, even the right current password is refused"
    );
    assert!(
        client(&cairn, "frank", "taken-over").await.is_err(),
        "the password did not change"
    );
}

/// Review S16: what a user may not see is answered "forbidden", whether it exists or not,
/// so "not found" never tells which streams, topics and users exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_comes_before_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let root = client(&cairn, "iggy", PASSWORD).await.unwrap();
    root.create_stream("payroll").await.unwrap();
    root.create_topic(
        &id("payroll"),
        "t",
        &topic_options(1, Durability::Replicated),
    )
    .await
    .unwrap();
    plain_user(&root, "eve").await;
    let eve = client(&cairn, "eve", "eve-password").await.unwrap();
    let code = |r: Result<Option<()>, IggyError>| r.map_err(|e| e.as_code());
    for name in ["payroll", "ghost"] {
        let stream = eve.get_stream(&id(name)).await.map(|s| s.map(drop));
        assert_eq!(code(stream), Err(41), "GetStream {name}");
        let topic = eve
            .get_topic(&id(name), &id("t"))
            .await
            .map(|t| t.map(drop));
        assert_eq!(code(topic), Err(41), "GetTopic {name}/t");
    }
    let topic = eve
        .get_topic(&id("payroll"), &id("ghost"))
        .await
        .map(|t| t.map(drop));
    assert_eq!(code(topic), Err(41), "GetTopic payroll/ghost");
    for name in ["iggy", "ghost"] {
        let user = eve.get_user(&id(name)).await.map(|u| u.map(drop));
        assert_eq!(code(user), Err(41), "GetUser {name}");
    }
    // Who may read the space still learns what does not exist.
    assert!(root.get_stream(&id("ghost")).await.unwrap().is_none());
    assert!(root.get_user(&id("ghost")).await.unwrap().is_none());
}

/// Every directory and file under `dir` whose mode gives anyone but the owner access.
fn shared_paths(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            found.push((path.clone(), mode));
        }
        if meta.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    found
}

/// Review S12: the data directory and every file in it are the owner's alone (the journal
/// holds password hashes, the segments every message), and wider modes found at start are
/// reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_is_its_owners_alone_and_wider_modes_are_reported() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cairn = Cairn::start(&data);
    let root = client(&cairn, "iggy", PASSWORD).await.unwrap();
    root.create_stream("s").await.unwrap();
    root.create_topic(&id("s"), "t", &topic_options(1, Durability::Persisted))
        .await
        .unwrap();
    let partitioning = Partitioning::partition_id(0);
    root.send_messages(&id("s"), &id("t"), &partitioning, &mut messages("m", 3))
        .await
        .unwrap();
    drop(root);
    cairn.terminate();
    assert_eq!(shared_paths(&data), [], "modes that let others in");

    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cairn = Cairn::start(&data);
    let output = cairn.startup.join("\n");
    assert!(
        output.contains("gives more access than the node would create it with"),
        "{output}"
    );
}

/// Review S15: a refused username is logged escaped, so it cannot forge a log line or send
/// escape sequences to a terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_username_is_logged_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let cairn = Cairn::start(dir.path());
    let forged = "nobody\nFORGED-LINE \u{1b}[31m";
    assert!(anonymous(&cairn)
        .await
        .login_user(forged, "wrong")
        .await
        .is_err());
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !seen.iter().any(|l: &String| l.contains("login refused")) {
        assert!(
            std::time::Instant::now() < deadline,
            "no refusal logged: {seen:#?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        seen.extend(cairn.drain_output());
    }
    assert!(
        !seen
            .iter()
            .any(|l| l.starts_with("FORGED-LINE") || l.contains('\u{1b}')),
        "a raw newline or escape reached the log: {seen:#?}"
    );
    assert!(
        seen.iter().any(|l| l.contains("nobody\\nFORGED-LINE")),
        "{seen:#?}"
    );
}

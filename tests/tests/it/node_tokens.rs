//! Personal access tokens on a node over real files: they survive restarts from the journal
//! and from a snapshot, the raw token is written nowhere under the data directory, an
//! expired one is refused by the environment's wall clock, and none ever logs in as a later
//! user of the same id.

use cairn_engine::env::{BoxFuture, Clock, Env};
use cairn_engine::node::{Login, NodeError, TokenExpiry};
use cairn_engine::state::tokens::hash_token;
use cairn_engine::state::{USER_ACTIVE, USER_INACTIVE};
use cairn_tests::node::{start, TestNode};
use cairn_tests::*;
use iggy_binary_protocol::WireIdentifier;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The real clock with a wall clock a test can move forward.
struct Shifted {
    real: Arc<dyn Clock>,
    ahead: AtomicU64,
}

impl Clock for Shifted {
    fn wall_micros(&self) -> u64 {
        self.real.wall_micros() + self.ahead.load(Ordering::SeqCst)
    }

    fn monotonic_nanos(&self) -> u64 {
        self.real.monotonic_nanos()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        self.real.sleep(duration)
    }
    fn deadline(&self) -> Box<dyn cairn_engine::env::Deadline> {
        self.real.deadline()
    }
}

fn shifted_env() -> (Env, Arc<Shifted>) {
    let mut env = real_env();
    let clock = Arc::new(Shifted {
        real: env.clock.clone(),
        ahead: AtomicU64::new(0),
    });
    env.clock = clock.clone();
    (env, clock)
}

fn user(node: &TestNode, name: &str) -> Login {
    let password = format!("{name}-password");
    node.create_user(name, &password, USER_ACTIVE, None)
        .unwrap();
    node.login(name, &password).unwrap()
}

/// Whether any file under `root` holds `needle`.
fn on_disk(root: &Path, needle: &[u8]) -> bool {
    snapshot(root)
        .values()
        .any(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
}

#[test]
fn tokens_survive_restarts_from_the_journal_and_a_snapshot_and_no_raw_token_reaches_the_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let node = boot(root).node;
    let alice = user(&node, "alice");
    let forever = node
        .create_token(&alice, "forever", TokenExpiry::Never)
        .unwrap();
    let hour = node
        .create_token(&alice, "an-hour", TokenExpiry::After(3_600_000_000))
        .unwrap();
    assert_eq!(node.login_with_token(&forever).unwrap(), alice);
    let before = node.view();
    node.halt();
    assert!(
        on_disk(root, &hash_token(&forever)),
        "the journal holds the token's hash"
    );

    // A crash: the journal replays the tokens.
    let node = boot(root).node;
    assert_eq!(node.view(), before, "the same tokens, the same expiry");
    assert_eq!(node.login_with_token(&forever).unwrap(), alice);
    assert_eq!(node.login_with_token(&hour).unwrap(), alice);
    node.halt();

    // A checkpoint: the snapshot holds them, and what follows it replays.
    let mut settings = node_settings();
    settings.meta.checkpoint_bytes = 1;
    let node = start(&real_env(), root, settings).unwrap().node;
    let later = node
        .create_token(&alice, "after-snapshot", TokenExpiry::Never)
        .unwrap();
    node.delete_token(&alice, "an-hour").unwrap();
    assert!(root.join("metadata/snapshot.bin").exists());
    let before = node.view();
    node.halt();
    let node = boot(root).node;
    assert_eq!(node.view(), before);
    assert_eq!(node.login_with_token(&forever).unwrap(), alice);
    assert_eq!(node.login_with_token(&later).unwrap(), alice);
    assert!(matches!(
        node.login_with_token(&hour),
        Err(NodeError::InvalidToken)
    ));
    node.close().unwrap();

    for raw in [&forever, &hour, &later] {
        assert!(!on_disk(root, raw.as_bytes()), "a raw token on disk");
    }
}

#[test]
fn an_expired_token_is_refused_by_the_environments_wall_clock() {
    let tmp = tempfile::tempdir().unwrap();
    let (env, clock) = shifted_env();
    let node = start(&env, tmp.path(), node_settings()).unwrap().node;
    let alice = user(&node, "alice");
    let raw = node
        .create_token(&alice, "ten-seconds", TokenExpiry::After(10_000_000))
        .unwrap();
    assert_eq!(node.login_with_token(&raw).unwrap(), alice);
    clock.ahead.store(10_000_000, Ordering::SeqCst);
    let refused = node.login_with_token(&raw).unwrap_err();
    assert!(
        matches!(refused, NodeError::TokenExpired { user, ref name } if user == alice.user_id && name == "ten-seconds"),
        "{refused}"
    );
    assert_eq!(refused.code(), 54);
    assert!(
        node.view().user_tokens(alice.user_id).unwrap()["ten-seconds"]
            .expiry_at
            .is_some(),
        "an expired token is listed until it is deleted"
    );
    assert_eq!(
        node.create_token(&alice, "zero", TokenExpiry::After(0))
            .unwrap_err()
            .code(),
        56
    );
    node.halt();
}

#[test]
fn a_token_never_logs_in_as_a_later_user_of_the_same_id_nor_for_an_inactive_one() {
    let tmp = tempfile::tempdir().unwrap();
    let node = boot(tmp.path()).node;
    let bob = user(&node, "bob");
    let raw = node.create_token(&bob, "bobs", TokenExpiry::Never).unwrap();
    let bob_id = WireIdentifier::numeric(bob.user_id);

    node.update_user(&bob_id, None, Some(USER_INACTIVE))
        .unwrap();
    assert_eq!(node.login_with_token(&raw).unwrap_err().code(), 47);
    node.update_user(&bob_id, None, Some(USER_ACTIVE)).unwrap();
    assert_eq!(node.login_with_token(&raw).unwrap(), bob);

    node.delete_user(&bob_id).unwrap();
    assert_eq!(node.login_with_token(&raw).unwrap_err().code(), 53);
    let carol = user(&node, "carol");
    assert_eq!(carol.user_id, bob.user_id, "the id is reused");
    assert_ne!(carol.incarnation, bob.incarnation);
    assert_eq!(node.login_with_token(&raw).unwrap_err().code(), 53);
    assert!(node.view().user_tokens(carol.user_id).unwrap().is_empty());
    // Bob's login, held across the deletion, makes or deletes nothing of carol's.
    assert_eq!(
        node.create_token(&bob, "stale", TokenExpiry::Never)
            .unwrap_err()
            .code(),
        20
    );
    node.create_token(&carol, "bobs", TokenExpiry::Never)
        .unwrap();
    assert_eq!(node.delete_token(&bob, "bobs").unwrap_err().code(), 20);
    assert_eq!(node.view().user_tokens(carol.user_id).unwrap().len(), 1);
    node.halt();
}

/// A password verified once logs in again without argon2; a wrong password, an unknown user
/// and the old password after a change still cost a verification each and are refused; the
/// new password is verified once, then remembered; a deactivated user is refused even with
/// a remembered password; a restart forgets everything.
#[test]
fn a_verified_password_is_remembered_and_nothing_else_is() {
    let tmp = tempfile::tempdir().unwrap();
    let node = start(&real_env(), tmp.path(), node_settings())
        .unwrap()
        .node;
    let checks = |node: &TestNode| {
        let stats = node.node.stats();
        (stats.argon2_checks, stats.remembered_logins)
    };
    let id = node
        .create_user("ann", "ann-password", USER_ACTIVE, None)
        .unwrap();
    let before = checks(&node);
    let first = node.login("ann", "ann-password").unwrap();
    assert_eq!(
        checks(&node),
        (before.0 + 1, before.1),
        "verified by argon2"
    );
    for _ in 0..3 {
        assert_eq!(node.login("ann", "ann-password").unwrap(), first);
    }
    assert_eq!(checks(&node), (before.0 + 1, before.1 + 3), "remembered");
    for (name, password) in [
        ("ann", "ann-passwore"),
        ("ann", "ann-password "),
        ("bob", "ann-password"),
    ] {
        assert!(matches!(
            node.login(name, password),
            Err(NodeError::InvalidCredentials)
        ));
    }
    assert_eq!(
        checks(&node),
        (before.0 + 4, before.1 + 3),
        "each refusal verified"
    );
    node.change_password(&WireIdentifier::numeric(id), "ann-password", "ann-new")
        .unwrap();
    assert_eq!(
        checks(&node),
        (before.0 + 4, before.1 + 4),
        "the current one remembered"
    );
    assert!(matches!(
        node.login("ann", "ann-password"),
        Err(NodeError::InvalidCredentials)
    ));
    assert_eq!(
        checks(&node).0,
        before.0 + 5,
        "the old password is verified again"
    );
    node.login("ann", "ann-new").unwrap();
    node.login("ann", "ann-new").unwrap();
    assert_eq!(checks(&node), (before.0 + 6, before.1 + 5));
    node.update_user(&WireIdentifier::numeric(id), None, Some(USER_INACTIVE))
        .unwrap();
    assert!(matches!(
        node.login("ann", "ann-new"),
        Err(NodeError::UserInactive(_))
    ));
    assert_eq!(
        checks(&node),
        (before.0 + 6, before.1 + 6),
        "the remembered password matched; the inactive user was refused after it"
    );
    node.login("iggy", "iggy").unwrap();
    node.login("iggy", "iggy").unwrap();
    assert_eq!(checks(&node).1, before.1 + 7, "root's password remembered");
    node.close().unwrap();
    let node = start(&real_env(), tmp.path(), node_settings())
        .unwrap()
        .node;
    assert_eq!(checks(&node), (0, 0));
    node.login("iggy", "iggy").unwrap();
    assert_eq!(
        checks(&node),
        (1, 0),
        "a restart remembers nothing: root's password, remembered before, is verified again"
    );
}

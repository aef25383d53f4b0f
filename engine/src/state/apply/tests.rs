//! The state machine's operations, one by one.

use super::super::tokens::{hash_token, mint, TokenHash};
use super::*;
use crate::node::token_login;
use crate::state::proposals::Lookup;
use iggy_binary_protocol::requests::users::{DeleteUserRequest, UpdateUserRequest};
use iggy_binary_protocol::{WireIdentifier, WireName, WireOptions};

const NOW: u64 = 1_000_000;

pub(in crate::state) fn ctx(op: u64) -> OpContext {
    OpContext {
        op,
        timestamp: NOW,
        cluster: 7,
        decided: 0,
        proposal: 0,
        asked_at: 0,
    }
}

/// A state with the root user (op 1) and user 1 (op 2); the next op is 3.
pub(in crate::state) fn state() -> MetaState {
    let mut state = MetaState::default();
    for (op, name) in [(1, "root"), (2, "alice")] {
        state
            .apply(
                &MetaOp::CreateUser(CreateUserRequest {
                    username: WireName::new(name).unwrap(),
                    password: "$argon2id$stand-in".into(),
                    status: USER_ACTIVE,
                    permissions: None,
                    options: WireOptions::empty(),
                }),
                ctx(op),
            )
            .unwrap();
    }
    state
}

fn create(user: u32, incarnation: u64, name: &str, expiry: u64, hash: TokenHash) -> MetaOp {
    MetaOp::CreatePersonalAccessToken(CreateTokenOp {
        user_id: user,
        incarnation,
        name: WireName::new(name).unwrap(),
        expiry,
        hash,
    })
}

fn delete(user: u32, incarnation: u64, name: &str) -> MetaOp {
    MetaOp::DeletePersonalAccessToken(DeleteTokenOp {
        user_id: user,
        incarnation,
        name: WireName::new(name).unwrap(),
    })
}

/// `op` is refused with `code` and changes nothing.
fn refused(state: &mut MetaState, op: &MetaOp, code: u32) {
    let before = state.clone();
    let error = state.apply(op, ctx(99)).expect_err("refused");
    assert_eq!(error.code(), code, "{error}");
    assert_eq!(*state, before, "a refusal changes nothing");
}

fn raw(seed: u64) -> (String, TokenHash) {
    let mut n = seed;
    mint(|| {
        n = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
        n
    })
}

#[test]
fn an_attempt_asked_before_forgotten_keys_is_refused_unapplied() {
    use super::super::proposals::MAX_PROPOSALS_KEPT;
    use iggy_binary_protocol::requests::streams::{CreateStreamRequest, UpdateStreamRequest};
    let keyed = |index: u64, key: u128, asked_at: u64| OpContext {
        proposal: key,
        asked_at,
        decided: crate::metadata::journal::decision(1, index),
        ..ctx(index)
    };
    let mut state = MetaState::default();
    let create = MetaOp::CreateStream(CreateStreamRequest {
        name: WireName::new("orders").unwrap(),
        options: WireOptions::empty(),
    });
    state.apply(&create, keyed(1, 1, 0)).unwrap();
    let rename = MetaOp::UpdateStream(UpdateStreamRequest {
        stream_id: WireIdentifier::numeric(0),
        name: WireName::new("orders").unwrap(),
        options: WireOptions::empty(),
    });
    // Enough keyed ops after it that key 1 (index 1) is forgotten.
    let last = MAX_PROPOSALS_KEPT as u64 + 1;
    for index in 2..=last {
        state
            .apply(&rename, keyed(index, u128::from(index), index - 1))
            .unwrap();
    }
    assert_eq!(state.proposals().lookup(1, 0), Lookup::Forgotten(1));
    // A retry of key 1 (asked before index 1) cannot be told from a first attempt: refused,
    // nothing changed, nothing recorded.
    let before = state.clone();
    let refused = state.apply(&create, keyed(last + 1, 1, 0)).unwrap_err();
    assert!(
        matches!(
            refused,
            NodeError::ProposalForgotten {
                asked_at: 0,
                forgotten_through: 1
            }
        ),
        "{refused}"
    );
    assert_eq!(state.streams(), before.streams());
    assert_eq!(state.proposals(), before.proposals());
    // An op asked after the forgotten keys is decided as ever.
    let fresh = state
        .apply(&rename, keyed(last + 2, 1 << 100, last))
        .unwrap();
    assert!(!fresh.repeated);
}

#[test]
fn a_keyed_proposal_applies_once_and_its_retry_is_answered_with_its_outcome() {
    use iggy_binary_protocol::requests::partitions::CreatePartitionsRequest;
    use iggy_binary_protocol::requests::streams::CreateStreamRequest;
    let keyed = |op: u64, proposal: u128| OpContext {
        proposal,
        asked_at: 2,
        decided: crate::metadata::journal::decision(1, op),
        ..ctx(op)
    };
    let mut state = state();
    let stream = MetaOp::CreateStream(CreateStreamRequest {
        name: WireName::new("orders").unwrap(),
        options: WireOptions::empty(),
    });
    let first = state.apply(&stream, keyed(3, 0xa)).unwrap();
    assert_eq!((first.created, first.repeated), (Some(0), false));
    let again = state.apply(&stream, keyed(4, 0xa)).unwrap();
    assert_eq!((again.created, again.repeated), (Some(0), true));
    assert!(again.work.is_empty() && again.effects.is_empty());
    assert_eq!(state.decided(), crate::metadata::journal::decision(1, 4));
    // Another key is another op: refused, the name is taken.
    let other = state.apply(&stream, keyed(5, 0xb)).unwrap_err();
    assert_eq!(other.code(), 1012, "{other}");
    assert_eq!(
        state.proposals().lookup(0xb, 2),
        Lookup::New,
        "a refusal is not recorded"
    );

    // An op that is not idempotent: adding partitions twice would add them twice.
    state
        .apply(
            &MetaOp::CreateTopic(CreateTopicRequest {
                stream_id: WireIdentifier::numeric(0),
                partitions_count: 1,
                name: WireName::new("events").unwrap(),
                options: WireOptions::empty(),
            }),
            keyed(6, 0xc),
        )
        .unwrap();
    let add = MetaOp::CreatePartitions(CreatePartitionsRequest {
        stream_id: WireIdentifier::numeric(0),
        topic_id: WireIdentifier::numeric(0),
        partitions_count: 2,
    });
    state.apply(&add, keyed(7, 0xd)).unwrap();
    let before = state.clone();
    let retried = state.apply(&add, keyed(8, 0xd)).unwrap();
    assert!(retried.repeated);
    assert_eq!(
        state.partitions().len(),
        3,
        "one partition and two added, once"
    );
    assert_eq!(
        state.streams(),
        before.streams(),
        "the retry changed nothing"
    );
    // A single node's op has no key: the same op twice is two ops.
    state.apply(&add, ctx(9)).unwrap();
    assert_eq!(state.partitions().len(), 5);

    // The table is part of the state: it survives encoding as snapshots do.
    let bytes = rmp_serde::to_vec_named(&state).unwrap();
    let decoded: MetaState = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(decoded, state);
    assert_eq!(decoded.proposals().lookup(0xa, 2), Lookup::Applied(Some(0)));
    assert_eq!(decoded.proposals().len(), 3, "0xa, 0xc, 0xd");
}

#[test]
fn a_created_token_holds_its_hash_and_absolute_expiry_and_logs_in() {
    let mut state = state();
    let (never, never_hash) = raw(1);
    let (soon, soon_hash) = raw(2);
    state
        .apply(&create(1, 2, "forever", 0, never_hash), ctx(3))
        .unwrap();
    state
        .apply(&create(1, 2, "soon", 5_000, soon_hash), ctx(4))
        .unwrap();
    let tokens = state.user_tokens(1).unwrap();
    assert_eq!(tokens["forever"].expiry_at, None);
    assert_eq!(tokens["soon"].expiry_at, Some(NOW + 5_000));
    assert_eq!(tokens["soon"].hash, hash_token(&soon));
    assert!(state.indexes_agree());
    let login = token_login(&state, &never, NOW).unwrap();
    assert_eq!((login.user_id, login.incarnation), (1, 2));
    assert!(token_login(&state, &soon, NOW + 4_999).is_ok());
    assert_eq!(
        token_login(&state, &soon, NOW + 5_000).unwrap_err().code(),
        54
    );
    assert_eq!(
        token_login(&state, "not-a-token", NOW).unwrap_err().code(),
        53
    );
    // u64::MAX is Iggy's "never expire" too; an expiry past the clock's end is refused.
    state
        .apply(&create(1, 2, "max", u64::MAX, raw(3).1), ctx(5))
        .unwrap();
    assert_eq!(state.user_tokens(1).unwrap()["max"].expiry_at, None);
    refused(&mut state, &create(1, 2, "far", u64::MAX - 1, raw(4).1), 56);
}

#[test]
fn a_duplicate_name_a_bad_name_or_a_full_user_is_refused() {
    let mut state = state();
    state
        .apply(&create(1, 2, "ci-token", 0, raw(1).1), ctx(3))
        .unwrap();
    refused(&mut state, &create(1, 2, "ci-token", 0, raw(2).1), 51);
    // Another user may use the name; the hash must be new.
    state
        .apply(&create(0, 1, "ci-token", 0, raw(2).1), ctx(4))
        .unwrap();
    refused(&mut state, &create(0, 1, "other", 0, raw(2).1), 3);
    for bad in ["ab", &"x".repeat(31), "bad\nname", "   "] {
        refused(&mut state, &create(1, 2, bad, 0, raw(9).1), 50);
    }
    for i in 1..MAX_TOKENS_PER_USER {
        state
            .apply(
                &create(1, 2, &format!("t{i:03}"), 0, raw(100 + i as u64).1),
                ctx(5),
            )
            .unwrap();
    }
    assert_eq!(state.user_tokens(1).unwrap().len(), MAX_TOKENS_PER_USER);
    refused(&mut state, &create(1, 2, "one-more", 0, raw(7).1), 52);
    // At the limit a duplicate name is told the limit (Iggy's order).
    refused(&mut state, &create(1, 2, "ci-token", 0, raw(7).1), 52);
    assert!(state.indexes_agree());
}

#[test]
fn a_deleted_token_no_longer_logs_in_and_is_not_found_twice() {
    let mut state = state();
    let (token, hash) = raw(1);
    state
        .apply(&create(1, 2, "ci-token", 0, hash), ctx(3))
        .unwrap();
    refused(&mut state, &delete(1, 2, "missing"), 20);
    let applied = state.apply(&delete(1, 2, "ci-token"), ctx(4)).unwrap();
    assert_eq!(applied.effects, vec![Effect::UserChanged { user: 1 }]);
    assert!(state.user_tokens(1).unwrap().is_empty());
    assert!(state.token_by_hash(&hash).is_none());
    assert_eq!(token_login(&state, &token, NOW).unwrap_err().code(), 53);
    refused(&mut state, &delete(1, 2, "ci-token"), 20);
    assert!(state.indexes_agree());
}

#[test]
fn deleting_a_user_deletes_its_tokens_and_a_later_user_of_its_id_gets_none() {
    let mut state = state();
    let (token, hash) = raw(1);
    state
        .apply(&create(1, 2, "ci-token", 0, hash), ctx(3))
        .unwrap();
    state
        .apply(
            &MetaOp::DeleteUser(DeleteUserRequest {
                user_id: WireIdentifier::numeric(1),
            }),
            ctx(4),
        )
        .unwrap();
    assert!(state.token_by_hash(&hash).is_none());
    assert!(state.indexes_agree());
    state
        .apply(
            &MetaOp::CreateUser(CreateUserRequest {
                username: WireName::new("mallory").unwrap(),
                password: "$argon2id$stand-in".into(),
                status: USER_ACTIVE,
                permissions: None,
                options: WireOptions::empty(),
            }),
            ctx(5),
        )
        .unwrap();
    assert_eq!(state.user(1).unwrap().created_op, 5, "the id came back");
    assert!(state.user_tokens(1).unwrap().is_empty());
    assert_eq!(token_login(&state, &token, NOW).unwrap_err().code(), 53);
    // Ops for the user that is gone never land on the new one.
    refused(&mut state, &create(1, 2, "late", 0, raw(2).1), 20);
    state
        .apply(&create(1, 5, "mine", 0, raw(3).1), ctx(6))
        .unwrap();
    refused(&mut state, &delete(1, 2, "mine"), 20);
    refused(&mut state, &create(9, 2, "nobody", 0, raw(4).1), 20);
}

#[test]
fn an_inactive_users_token_is_refused_until_it_is_active_again() {
    let mut state = state();
    let (token, hash) = raw(1);
    state
        .apply(&create(1, 2, "ci-token", 0, hash), ctx(3))
        .unwrap();
    let status = |status| {
        MetaOp::UpdateUser(UpdateUserRequest {
            user_id: WireIdentifier::numeric(1),
            username: None,
            status: Some(status),
            options: WireOptions::empty(),
        })
    };
    state.apply(&status(USER_INACTIVE), ctx(4)).unwrap();
    assert_eq!(token_login(&state, &token, NOW).unwrap_err().code(), 47);
    state.apply(&status(USER_ACTIVE), ctx(5)).unwrap();
    assert!(token_login(&state, &token, NOW).is_ok());
}

#[test]
fn tokens_survive_a_snapshot_and_their_ops_a_journal_round_trip() {
    let mut state = state();
    let op = create(1, 2, "ci-token", 7, raw(1).1);
    let decoded = MetaOp::decode(op.operation(), &op.body()).unwrap();
    assert_eq!(decoded, op);
    state.apply(&decoded, ctx(3)).unwrap();
    let bytes = crate::metadata::snapshot::encode(7, 3, 0, &state);
    let snapshot = crate::metadata::snapshot::Snapshot::decode(&bytes).unwrap();
    assert_eq!(snapshot.state, state);
    assert!(snapshot.state.token_by_hash(&raw(1).1).is_some());
}

/// Review S13: a password change names the hash its current password was checked
/// against, and lands only while the user still has it.
#[test]
fn a_password_change_lands_only_on_the_hash_it_was_checked_against() {
    let mut state = state();
    let change = |current: &str, new: &str| {
        MetaOp::ChangePassword(ChangePasswordRequest {
            user_id: WireIdentifier::numeric(1),
            current_password: current.into(),
            new_password: new.into(),
        })
    };
    refused(
        &mut state,
        &change("$argon2id$someone-else", "$argon2id$new"),
        42,
    );
    state
        .apply(&change("$argon2id$stand-in", "$argon2id$new"), ctx(3))
        .unwrap();
    assert_eq!(state.user(1).unwrap().password_hash, "$argon2id$new");
    refused(
        &mut state,
        &change("$argon2id$stand-in", "$argon2id$again"),
        42,
    );
    state.apply(&change("", "$argon2id$set"), ctx(4)).unwrap();
    assert_eq!(state.user(1).unwrap().password_hash, "$argon2id$set");
}

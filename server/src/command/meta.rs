//! The journaled metadata operations: streams, topics, partitions, consumer groups, users.
//! The node journals each op before it applies, publishes or answers it; a create answers
//! with what it created, read from the view the op published.

use super::login::LoginRefused;
use super::login_limit::Account;
use super::responses::{self, Numbers};
use super::status::{codes, undecodable, Status};
use super::{Call, Reply, Target};
use cairn_engine::node::ops::MetaOp;
use cairn_engine::node::NodeError;
use cairn_engine::state::options::{for_create, TopicOptions, DERIVED_PREFIX};
use iggy_binary_protocol::requests::users::{ChangePasswordRequest, CreateUserRequest};
use iggy_binary_protocol::{WireIdentifier, WireOptions};

/// Flush thresholds a topic creation that names none gets. The server writes them into the
/// request's options before it is journaled, so a later change of the configuration never
/// changes a topic that exists (replay reads what the journal says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicDefaults {
    pub messages_required_to_save: u32,
    pub size_of_messages_required_to_save: u64,
    /// A cluster's `[cluster] replication_factor` (none for a single node).
    pub replication_factor: Option<u8>,
}

impl Default for TopicDefaults {
    fn default() -> Self {
        let config = cairn_engine::config::TopicConfig::default();
        TopicDefaults {
            messages_required_to_save: config.messages_required_to_save,
            size_of_messages_required_to_save: config.size_of_messages_required_to_save,
            replication_factor: None,
        }
    }
}

/// The names a journaled op acts on (a create acts on its parent).
pub fn target(op: &MetaOp) -> Target<'_> {
    match op {
        MetaOp::CreateStream(_)
        | MetaOp::CreateUser(_)
        | MetaOp::UpdateUser(_)
        | MetaOp::DeleteUser(_)
        | MetaOp::ChangePassword(_)
        | MetaOp::UpdatePermissions(_)
        | MetaOp::CreatePersonalAccessToken(_)
        | MetaOp::DeletePersonalAccessToken(_) => Target::Nothing,
        MetaOp::UpdateStream(r) => Target::Stream(&r.stream_id),
        MetaOp::DeleteStream(r) => Target::Stream(&r.stream_id),
        MetaOp::PurgeStream(r) => Target::Stream(&r.stream_id),
        MetaOp::CreateTopic(r) => Target::Stream(&r.stream_id),
        MetaOp::UpdateTopic(r) => Target::Topic(&r.stream_id, &r.topic_id),
        MetaOp::DeleteTopic(r) => Target::Topic(&r.stream_id, &r.topic_id),
        MetaOp::PurgeTopic(r) => Target::Topic(&r.stream_id, &r.topic_id),
        MetaOp::CreatePartitions(r) => Target::Topic(&r.stream_id, &r.topic_id),
        MetaOp::DeletePartitions(r) => Target::Topic(&r.stream_id, &r.topic_id),
        MetaOp::CreateConsumerGroup(r) => Target::Topic(&r.stream_id, &r.topic_id),
        MetaOp::DeleteConsumerGroup(r) => Target::Topic(&r.stream_id, &r.topic_id),
    }
}

/// Journals and applies `op` on behalf of the session's user; a create answers with what
/// it created.
pub async fn execute(call: &Call<'_>, mut op: MetaOp) -> Result<Reply, Status> {
    match &mut op {
        // Served by their own commands (a user manages its own tokens; a password is
        // hashed first); never taken from a client's body as a raw journaled op.
        MetaOp::CreatePersonalAccessToken(_)
        | MetaOp::DeletePersonalAccessToken(_)
        | MetaOp::CreateUser(_)
        | MetaOp::ChangePassword(_) => return Err(Status::of(codes::INVALID_COMMAND)),
        MetaOp::CreateTopic(request) => {
            let named = names_factor(&request.options);
            request.options = with_flush_defaults(&request.options, call.cx.topic_defaults)?;
            if let (true, Some(source)) = (named, call.cx.cluster.get()) {
                let members = (source.status)(false).voters.len();
                check_factor(&for_create(&request.options)?, members)?;
            }
        }
        _ => {}
    }
    let more = match &op {
        MetaOp::CreateTopic(r) => u64::from(r.partitions_count),
        MetaOp::CreatePartitions(r) => u64::from(r.partitions_count),
        _ => 0,
    };
    let _creating = match more {
        1.. => {
            let held = call.cx.partition_creates.acquire().await;
            let now = call.cx.node.view().partitions().len() as u64;
            super::descriptors::admit(now, more)?;
            Some(held)
        }
        _ => None,
    };
    let session = call.session();
    let executed = session.node.execute_as(op.clone(), session.user_id).await?;
    let Some(created) = executed.applied.created else {
        return Ok(Reply::Done);
    };
    let view = call.cx.node.view();
    let none = Numbers::new();
    Ok(match &op {
        MetaOp::CreateStream(_) => {
            let stream = view
                .stream(created)
                .ok_or(Status::of(codes::STREAM_ID_NOT_FOUND))?;
            Reply::Stream(responses::get_stream(stream, &none))
        }
        MetaOp::CreateTopic(r) => {
            let s = view.stream_id(&r.stream_id)?;
            let topic = view
                .find_topic(s, created)
                .ok_or(Status::of(codes::TOPIC_ID_NOT_FOUND))?;
            Reply::Topic(responses::get_topic(s, topic, &none))
        }
        MetaOp::CreateConsumerGroup(r) => {
            let (s, t) = view.topic_ids(&r.stream_id, &r.topic_id)?;
            let topic = view.topic(s, t);
            let group = topic
                .groups
                .get(&created)
                .ok_or(Status::of(codes::CONSUMER_GROUP_ID_NOT_FOUND))?;
            let partitions = u32::try_from(topic.partitions.len()).expect("bounded");
            Reply::Group(responses::group_details(
                created,
                &group.name,
                partitions,
                Vec::new(),
            ))
        }
        _ => Reply::Done,
    })
}

/// Creates a user (its password hashed on the node's blocking pool before it is journaled).
pub async fn create_user(call: &Call<'_>, request: CreateUserRequest) -> Result<Reply, Status> {
    let id = call
        .session()
        .node
        .create_user(
            request.username.as_str(),
            &request.password,
            request.status,
            request.permissions,
        )
        .await?;
    let view = call.cx.node.view();
    let user = view.user(id).ok_or(Status::of(codes::RESOURCE_NOT_FOUND))?;
    Ok(Reply::User(responses::user_details(user)))
}

/// Changes the resolved user's password, once its current one is checked.
pub async fn change_password(
    call: &Call<'_>,
    request: ChangePasswordRequest,
) -> Result<Reply, Status> {
    let super::Resolved::User(user) = call.target else {
        unreachable!("a password change names a user")
    };
    // The current password is a password check like a login's, counted by the same limit
    // (review S8): a session or bearer token alone must not guess its user's password.
    let username = call
        .view
        .user(user)
        .map(|u| u.username.clone())
        .unwrap_or_default();
    let session = call.session();
    // The request's connection (or HTTP request slot) holds the wait.
    let waiter = super::login::Waiter::Connection;
    let attempt = super::login::begin(call.cx, session.peer, waiter, Account::User(&username))
        .await
        .map_err(|refused| refused.status())?;
    let changed = session
        .node
        .change_password(
            &WireIdentifier::numeric(user),
            &request.current_password,
            &request.new_password,
        )
        .await;
    match changed {
        Ok(()) => attempt.succeeded(),
        Err(e @ NodeError::InvalidCredentials) => {
            return Err(super::login::judged(attempt, e, LoginRefused::Credentials).status())
        }
        // A new password refused, a stopped node: nothing said about the current one.
        Err(e) => {
            attempt.not_judged();
            return Err(e.into());
        }
    }
    Ok(Reply::Done)
}

/// Whether a topic creation's options name `replication_factor`.
fn names_factor(options: &WireOptions) -> bool {
    options.iter().any(|e| e.key == b"replication_factor")
}

/// Refuses a replication factor a cluster's topic creation names outside 2 to the number of
/// the cluster's `members` (a single node refuses any above 1: `single_copy`). One named
/// nowhere is `[cluster] replication_factor` (`with_flush_defaults`), kept at most every
/// member (`cairn_cluster::partition::placement`).
fn check_factor(options: &TopicOptions, members: usize) -> Result<(), NodeError> {
    let factor = options.replication_factor;
    if (2..=members.max(2)).contains(&usize::from(factor)) {
        return Ok(());
    }
    Err(NodeError::InvalidOptionValue {
        key: "replication_factor".into(),
        why: format!(
            "replication factor {factor} is not 2 to the cluster's {members} members (a cluster keeps at least two copies, at most one per member)"
        ),
    })
}

/// Keys a topic creation's options must name for the configuration's defaults to apply
/// (and, in a cluster, `replication_factor`).
const FLUSH_KEYS: [&str; 2] = [
    "messages_required_to_save",
    "size_of_messages_required_to_save",
];

/// `options` with the flush thresholds it does not name set to `defaults` (as unsigned
/// values, kinds Uint32 and Uint64). The server writes them into the request before it is
/// journaled, so a later change of the configuration never changes a topic that exists
/// (replay reads what the journal says); under [`DERIVED_PREFIX`], so the topic reports
/// them as filled from defaults, not as the client's choice. A client's own key with that
/// prefix is refused.
fn with_flush_defaults(
    options: &WireOptions,
    defaults: TopicDefaults,
) -> Result<WireOptions, Status> {
    if let Some(entry) = options
        .iter()
        .find(|entry| entry.key.starts_with(DERIVED_PREFIX.as_bytes()))
    {
        return Err(NodeError::UnsupportedOptionKey {
            key: String::from_utf8_lossy(entry.key).into_owned(),
            why: format!("keys starting with {DERIVED_PREFIX:?} are the server's own"),
        }
        .into());
    }
    let named: Vec<&[u8]> = options.iter().map(|entry| entry.key).collect();
    let mut block = options.as_bytes().to_vec();
    let values: [(u8, Vec<u8>); 2] = [
        (
            11,
            defaults.messages_required_to_save.to_le_bytes().to_vec(),
        ),
        (
            12,
            defaults
                .size_of_messages_required_to_save
                .to_le_bytes()
                .to_vec(),
        ),
    ];
    let factor = defaults
        .replication_factor
        .map(|f| ("replication_factor", (9u8, vec![f])));
    let filled = FLUSH_KEYS.iter().copied().zip(values).chain(factor);
    for (key, (kind, value)) in filled {
        if named.contains(&key.as_bytes()) {
            continue;
        }
        let derived = format!("{DERIVED_PREFIX}{key}");
        for (kind, bytes) in [(2u8, derived.as_bytes()), (kind, &value[..])] {
            block.push(kind);
            block.extend_from_slice(&u32::try_from(bytes.len()).expect("short").to_le_bytes());
            block.extend_from_slice(bytes);
        }
    }
    WireOptions::from_bytes(block.into()).map_err(|e| undecodable("topic options", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: TopicDefaults = TopicDefaults {
        messages_required_to_save: 7,
        size_of_messages_required_to_save: 9000,
        replication_factor: None,
    };

    #[test]
    fn a_topic_creation_gets_the_configured_flush_thresholds_it_does_not_name() {
        let filled = with_flush_defaults(&WireOptions::empty(), DEFAULTS).unwrap();
        let topic = for_create(&filled).unwrap();
        assert_eq!(topic.messages_required_to_save, 7);
        assert_eq!(topic.size_of_messages_required_to_save, 9000);
        assert!(
            topic.effective().iter().all(|e| !e.explicit),
            "the server's defaults are not the client's choice"
        );
    }

    #[test]
    fn a_clusters_topic_names_a_factor_of_two_to_its_members() {
        let factor = |f: u8| TopicOptions {
            replication_factor: f,
            ..TopicOptions::default()
        };
        assert!(check_factor(&factor(2), 3).is_ok());
        assert!(check_factor(&factor(3), 3).is_ok());
        for (f, members) in [(1, 3), (4, 3), (3, 2)] {
            let refused = check_factor(&factor(f), members).unwrap_err().to_string();
            assert!(refused.contains("not 2 to"), "{refused}");
        }
    }

    #[test]
    fn a_clusters_topic_gets_the_configured_factor_unless_it_names_one() {
        let defaults = TopicDefaults {
            replication_factor: Some(2),
            ..DEFAULTS
        };
        let filled = with_flush_defaults(&WireOptions::empty(), defaults).unwrap();
        assert!(!names_factor(&WireOptions::empty()));
        let topic = for_create(&filled).unwrap();
        assert_eq!(topic.replication_factor, 2);
        assert!(topic.effective().iter().all(|e| !e.explicit));
        // A single node fills none: one copy.
        let single = for_create(&with_flush_defaults(&WireOptions::empty(), DEFAULTS).unwrap());
        assert_eq!(single.unwrap().replication_factor, 1);
    }

    #[test]
    fn a_clients_key_with_the_derived_prefix_is_refused() {
        let mut block = Vec::new();
        let key = format!("{DERIVED_PREFIX}segment_size");
        for (kind, bytes) in [(2u8, key.as_bytes()), (12, &(1u64 << 20).to_le_bytes()[..])] {
            block.push(kind);
            block.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            block.extend_from_slice(bytes);
        }
        let sneaky = WireOptions::from_bytes(block.into()).unwrap();
        let refused = with_flush_defaults(&sneaky, DEFAULTS).unwrap_err();
        assert!(refused.reason.unwrap().contains("server's own"));
    }

    #[test]
    fn a_threshold_the_creation_names_is_kept() {
        let mut block = Vec::new();
        for (kind, bytes) in [
            (2u8, &b"messages_required_to_save"[..]),
            (11, &3u32.to_le_bytes()[..]),
        ] {
            block.push(kind);
            block.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            block.extend_from_slice(bytes);
        }
        let named = WireOptions::from_bytes(block.into()).unwrap();
        let topic = for_create(&with_flush_defaults(&named, DEFAULTS).unwrap()).unwrap();
        assert_eq!(topic.messages_required_to_save, 3);
        assert_eq!(topic.size_of_messages_required_to_save, 9000);
    }
}

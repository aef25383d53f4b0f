//! The oracle's own model of the metadata: every field a node's state holds, derived from
//! the acknowledged operations in journal order, written independently of the engine's
//! state machine (its rules are re-stated here: lowest free ids, unique names, the
//! limits, the root user's protections, the documented option defaults, the nonce
//! formula). After every boot the whole recovered state is compared with it, field by
//! field ([`compare`]).

use cairn_engine::config::Durability;
use cairn_engine::node::state::MetaState;
use cairn_engine::node::PartitionKey;
use cairn_engine::partition::PartitionIdentity;
use iggy_binary_protocol::{
    WireEncode, WireGlobalPermissions, WireOptions, WirePermissions, WireStreamPermissions,
    WireTopicPermissions,
};
use std::collections::BTreeMap;

/// The longest journaled body (the engine's `MAX_BODY_LEN`, re-stated).
pub const MAX_BODY: usize = 256 * 1024;
/// Segment size, flush count and other options every simulated topic is created with.
pub const SEGMENT_SIZE: u64 = 1 << 20;

/// The least size budget a partition has (the spec's `max_topic_size` share never falls
/// below one sealed segment's ceiling: its size plus one batch).
pub fn size_floor(profile: &super::NodeProfile) -> u64 {
    SEGMENT_SIZE + profile.max_batch_bytes
}
pub const MESSAGES_TO_SAVE: u32 = 16;

/// When an op ran, in wall-clock microseconds: its timestamps lie inside (`None` when the
/// wall clock jumped meanwhile, or the op's time is unknown).
pub type Window = Option<(u64, u64)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MTopic {
    pub name: String,
    pub created: Window,
    pub durability: Durability,
    pub offsets: Durability,
    pub expiry: u64,
    pub max_size: u64,
    /// Partition id → (the op that created or last purged it: its nonce's op, the window of
    /// the op that created it).
    pub partitions: BTreeMap<u32, (u64, Window)>,
    /// Group id → (name, the op that created it).
    pub groups: BTreeMap<u32, (String, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MStream {
    pub name: String,
    pub created: Window,
    pub topics: BTreeMap<u32, MTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MUser {
    pub name: String,
    pub password: String,
    pub status: u8,
    pub permissions: Option<MPermissions>,
    pub created: Window,
    pub created_op: u64,
}

/// What the acknowledged operations say the metadata is, after op `op`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Model {
    pub op: u64,
    pub streams: BTreeMap<u32, MStream>,
    pub users: BTreeMap<u32, MUser>,
}

/// Permissions the simulated admin grants: stream → topics with every right.
pub type MPermissions = Vec<(u32, Vec<u32>)>;

pub fn wire_permissions(p: &MPermissions) -> WirePermissions {
    WirePermissions {
        global: WireGlobalPermissions {
            manage_servers: false,
            read_servers: true,
            manage_users: false,
            read_users: true,
            manage_streams: false,
            read_streams: true,
            manage_topics: false,
            read_topics: true,
            poll_messages: true,
            send_messages: false,
        },
        streams: p
            .iter()
            .map(|(s, topics)| WireStreamPermissions {
                stream_id: *s,
                manage_stream: false,
                read_stream: true,
                manage_topics: false,
                read_topics: true,
                poll_messages: true,
                send_messages: true,
                topics: topics
                    .iter()
                    .map(|t| WireTopicPermissions {
                        topic_id: *t,
                        manage_topic: false,
                        read_topic: true,
                        poll_messages: true,
                        send_messages: true,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// An operation of the simulated callers, as the model and the node each carry it out.
#[derive(Debug, Clone)]
pub enum AdminOp {
    CreateStream(String),
    RenameStream(u32, String),
    DeleteStream(u32),
    PurgeStream(u32),
    CreateTopic {
        stream: u32,
        name: String,
        partitions: u32,
        persisted: bool,
        offsets_persisted: bool,
        expiry: u64,
        max_size: u64,
    },
    UpdateTopic {
        stream: u32,
        topic: u32,
        expiry: u64,
        max_size: u64,
    },
    DeleteTopic(u32, u32),
    PurgeTopic(u32, u32),
    CreatePartitions(u32, u32, u32),
    DeletePartitions(u32, u32, u32),
    CreateGroup(u32, u32, String),
    DeleteGroup(u32, u32, u32),
    CreateUser {
        name: String,
        password: String,
        status: u8,
        permissions: Option<MPermissions>,
    },
    UpdateUser {
        user: u32,
        name: Option<String>,
        status: Option<u8>,
    },
    DeleteUser(u32),
    ChangePassword {
        user: u32,
        password: String,
    },
    UpdatePermissions {
        user: u32,
        permissions: Option<MPermissions>,
    },
    /// A `CreateUser` whose body is `MAX_BODY + excess` bytes (its permissions name topics
    /// that do not exist, so it is refused either way: `TooBig` exactly when `excess > 0`).
    OversizeUser(String, i32),
}

impl AdminOp {
    pub fn is_user_op(&self) -> bool {
        matches!(
            self,
            AdminOp::CreateUser { .. }
                | AdminOp::UpdateUser { .. }
                | AdminOp::DeleteUser(..)
                | AdminOp::ChangePassword { .. }
                | AdminOp::UpdatePermissions { .. }
                | AdminOp::OversizeUser(..)
        )
    }
}

/// What the model says an accepted op did.
#[derive(Debug, Clone, Default)]
pub struct Effect {
    pub created: Option<u32>,
    /// Partitions it created or emptied (a new incarnation each).
    pub fresh: Vec<PartitionIdentity>,
    /// Partitions it removed (their last incarnation).
    pub removed: Vec<PartitionIdentity>,
    /// Groups it deleted: (stream, topic, group, incarnation).
    pub groups_deleted: Vec<(u32, u32, u32, u64)>,
    pub user_deleted: Option<u32>,
}

fn lowest_free<T>(map: &BTreeMap<u32, T>) -> u32 {
    (0..).find(|id| !map.contains_key(id)).expect("a free id")
}

/// The creation nonce the node draws for a partition: XxHash3-64 over the cluster id, the
/// op and the three ids, little-endian (re-stated from the format's description).
pub fn nonce(cluster: u128, op: u64, (s, t, p): PartitionKey) -> u64 {
    let mut key = Vec::with_capacity(40);
    key.extend_from_slice(&cluster.to_le_bytes());
    key.extend_from_slice(&op.to_le_bytes());
    for id in [s, t, p] {
        key.extend_from_slice(&id.to_le_bytes());
    }
    xxhash::xxh3::xxh3_64(&key)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.trim().is_empty()
        && !name.chars().any(char::is_control)
}

fn valid_username(name: &str) -> bool {
    valid_name(name) && (3..=50).contains(&name.len())
}

impl Model {
    pub fn topic(&self, s: u32, t: u32) -> Option<&MTopic> {
        self.streams.get(&s)?.topics.get(&t)
    }

    fn topic_mut(&mut self, s: u32, t: u32) -> Option<&mut MTopic> {
        self.streams.get_mut(&s)?.topics.get_mut(&t)
    }

    pub fn keys_of(&self, s: u32, t: Option<u32>) -> Vec<PartitionKey> {
        let Some(stream) = self.streams.get(&s) else {
            return Vec::new();
        };
        stream
            .topics
            .iter()
            .filter(|(id, _)| t.is_none_or(|t| t == **id))
            .flat_map(|(id, topic)| topic.partitions.keys().map(move |p| (s, *id, *p)))
            .collect()
    }

    /// The identity the model gives partition `key`.
    pub fn identity(&self, cluster: u128, key: PartitionKey) -> Option<PartitionIdentity> {
        let (op, _) = self.topic(key.0, key.1)?.partitions.get(&key.2)?;
        Some(PartitionIdentity {
            stream_id: key.0,
            topic_id: key.1,
            partition_id: key.2,
            nonce: nonce(cluster, *op, key),
        })
    }

    /// Every partition the model has, with its identity.
    pub fn identities(&self, cluster: u128) -> BTreeMap<PartitionKey, PartitionIdentity> {
        self.streams
            .keys()
            .flat_map(|s| self.keys_of(*s, None))
            .filter_map(|k| self.identity(cluster, k).map(|id| (k, id)))
            .collect()
    }

    fn permissions_valid(&self, p: &MPermissions) -> bool {
        let mut streams = std::collections::BTreeSet::new();
        p.iter().all(|(s, topics)| {
            let mut seen = std::collections::BTreeSet::new();
            streams.insert(*s)
                && self.streams.get(s).is_some_and(|st| {
                    topics
                        .iter()
                        .all(|t| st.topics.contains_key(t) && seen.insert(*t))
                })
        })
    }

    /// Applies `op` as op number `self.op + 1` run in `window`; `Err` when the node must
    /// refuse it (and then nothing changed).
    pub fn apply(&mut self, op: &AdminOp, window: Window, cluster: u128) -> Result<Effect, ()> {
        let mut next = self.clone();
        let number = self.op + 1;
        let effect = next.apply_at(op, number, window, cluster)?;
        next.op = number;
        *self = next;
        Ok(effect)
    }

    fn apply_at(
        &mut self,
        op: &AdminOp,
        number: u64,
        window: Window,
        cluster: u128,
    ) -> Result<Effect, ()> {
        let mut effect = Effect::default();
        let identity = |key: PartitionKey, op: u64| PartitionIdentity {
            stream_id: key.0,
            topic_id: key.1,
            partition_id: key.2,
            nonce: nonce(cluster, op, key),
        };
        match op {
            AdminOp::CreateStream(name) => {
                if !valid_name(name) || self.streams.values().any(|s| &s.name == name) {
                    return Err(());
                }
                let id = lowest_free(&self.streams);
                self.streams.insert(
                    id,
                    MStream {
                        name: name.clone(),
                        created: window,
                        topics: BTreeMap::new(),
                    },
                );
                effect.created = Some(id);
            }
            AdminOp::RenameStream(s, name) => {
                if !valid_name(name)
                    || !self.streams.contains_key(s)
                    || self
                        .streams
                        .iter()
                        .any(|(id, st)| &st.name == name && id != s)
                {
                    return Err(());
                }
                self.streams.get_mut(s).expect("checked").name = name.clone();
            }
            AdminOp::DeleteStream(s) => {
                let stream = self.streams.get(s).ok_or(())?;
                for (t, topic) in &stream.topics {
                    for g in topic.groups.iter() {
                        effect.groups_deleted.push((*s, *t, *g.0, g.1 .1));
                    }
                }
                effect.removed = self
                    .keys_of(*s, None)
                    .into_iter()
                    .filter_map(|k| self.identity(cluster, k))
                    .collect();
                self.streams.remove(s);
                // A grant goes with what it was given on (ids are reused).
                for p in self
                    .users
                    .values_mut()
                    .filter_map(|u| u.permissions.as_mut())
                {
                    p.retain(|(granted, _)| granted != s);
                }
            }
            AdminOp::PurgeStream(s) => {
                self.streams.get(s).ok_or(())?;
                for key in self.keys_of(*s, None) {
                    // A purge keeps the partition (and its creation time), with a new
                    // identity.
                    self.topic_mut(key.0, key.1)
                        .expect("listed")
                        .partitions
                        .get_mut(&key.2)
                        .expect("listed")
                        .0 = number;
                    effect.fresh.push(identity(key, number));
                }
            }
            AdminOp::CreateTopic {
                stream,
                name,
                partitions,
                persisted,
                offsets_persisted,
                expiry,
                max_size,
            } => {
                let st = self.streams.get_mut(stream).ok_or(())?;
                if !valid_name(name) || st.topics.values().any(|t| &t.name == name) {
                    return Err(());
                }
                let id = lowest_free(&st.topics);
                let policy = |p: bool| {
                    if p {
                        Durability::Persisted
                    } else {
                        Durability::Replicated
                    }
                };
                st.topics.insert(
                    id,
                    MTopic {
                        name: name.clone(),
                        created: window,
                        durability: policy(*persisted),
                        offsets: policy(*offsets_persisted),
                        expiry: *expiry,
                        max_size: *max_size,
                        partitions: (0..*partitions).map(|p| (p, (number, window))).collect(),
                        groups: BTreeMap::new(),
                    },
                );
                effect.created = Some(id);
                effect.fresh = (0..*partitions)
                    .map(|p| identity((*stream, id, p), number))
                    .collect();
            }
            AdminOp::UpdateTopic {
                stream,
                topic,
                expiry,
                max_size,
            } => {
                let t = self.topic_mut(*stream, *topic).ok_or(())?;
                t.expiry = *expiry;
                t.max_size = *max_size;
            }
            AdminOp::DeleteTopic(s, t) => {
                let topic = self.topic(*s, *t).ok_or(())?;
                for (g, (_, created)) in &topic.groups {
                    effect.groups_deleted.push((*s, *t, *g, *created));
                }
                effect.removed = self
                    .keys_of(*s, Some(*t))
                    .into_iter()
                    .filter_map(|k| self.identity(cluster, k))
                    .collect();
                self.streams.get_mut(s).expect("found").topics.remove(t);
                for p in self
                    .users
                    .values_mut()
                    .filter_map(|u| u.permissions.as_mut())
                {
                    for (_, topics) in p.iter_mut().filter(|(granted, _)| granted == s) {
                        topics.retain(|granted| granted != t);
                    }
                }
            }
            AdminOp::PurgeTopic(s, t) => {
                self.topic(*s, *t).ok_or(())?;
                for key in self.keys_of(*s, Some(*t)) {
                    // A purge keeps the partition (and its creation time), with a new
                    // identity.
                    self.topic_mut(key.0, key.1)
                        .expect("listed")
                        .partitions
                        .get_mut(&key.2)
                        .expect("listed")
                        .0 = number;
                    effect.fresh.push(identity(key, number));
                }
            }
            AdminOp::CreatePartitions(s, t, n) => {
                let topic = self.topic_mut(*s, *t).ok_or(())?;
                let count = topic.partitions.len() as u32;
                if *n == 0 || count + n > 1000 {
                    return Err(());
                }
                for p in count..count + n {
                    topic.partitions.insert(p, (number, window));
                    effect.fresh.push(identity((*s, *t, p), number));
                }
            }
            AdminOp::DeletePartitions(s, t, n) => {
                let count = self.topic(*s, *t).ok_or(())?.partitions.len() as u32;
                if *n == 0 || *n > count {
                    return Err(());
                }
                for p in count - n..count {
                    effect
                        .removed
                        .push(self.identity(cluster, (*s, *t, p)).expect("listed"));
                    self.topic_mut(*s, *t).expect("found").partitions.remove(&p);
                }
            }
            AdminOp::CreateGroup(s, t, name) => {
                let topic = self.topic_mut(*s, *t).ok_or(())?;
                if !valid_name(name) || topic.groups.values().any(|(g, _)| g == name) {
                    return Err(());
                }
                let id = lowest_free(&topic.groups);
                topic.groups.insert(id, (name.clone(), number));
                effect.created = Some(id);
            }
            AdminOp::DeleteGroup(s, t, g) => {
                let topic = self.topic_mut(*s, *t).ok_or(())?;
                let (_, created) = topic.groups.remove(g).ok_or(())?;
                effect.groups_deleted.push((*s, *t, *g, created));
            }
            AdminOp::CreateUser {
                name,
                password,
                status,
                permissions,
            } => {
                if !valid_username(name)
                    || self.users.values().any(|u| &u.name == name)
                    || !matches!(status, 1 | 2)
                    || permissions
                        .as_ref()
                        .is_some_and(|p| !self.permissions_valid(p))
                    || self.users.len() >= 1024
                {
                    return Err(());
                }
                let id = lowest_free(&self.users);
                self.users.insert(
                    id,
                    MUser {
                        name: name.clone(),
                        password: password.clone(),
                        status: *status,
                        permissions: permissions.clone(),
                        created: window,
                        created_op: number,
                    },
                );
                effect.created = Some(id);
            }
            AdminOp::UpdateUser { user, name, status } => {
                if !self.users.contains_key(user) {
                    return Err(());
                }
                if let Some(name) = name {
                    if !valid_username(name)
                        || self
                            .users
                            .iter()
                            .any(|(id, u)| &u.name == name && id != user)
                    {
                        return Err(());
                    }
                }
                if let Some(status) = status {
                    if !matches!(status, 1 | 2) || (*user == 0 && *status != 1) {
                        return Err(());
                    }
                }
                let u = self.users.get_mut(user).expect("checked");
                if let Some(name) = name {
                    u.name = name.clone();
                }
                if let Some(status) = status {
                    u.status = *status;
                }
            }
            AdminOp::DeleteUser(id) => {
                if *id == 0 {
                    return Err(());
                }
                self.users.remove(id).ok_or(())?;
                effect.user_deleted = Some(*id);
            }
            AdminOp::ChangePassword { user, password } => {
                self.users.get_mut(user).ok_or(())?.password = password.clone();
            }
            AdminOp::UpdatePermissions { user, permissions } => {
                if *user == 0
                    || !self.users.contains_key(user)
                    || permissions
                        .as_ref()
                        .is_some_and(|p| !self.permissions_valid(p))
                {
                    return Err(());
                }
                self.users.get_mut(user).expect("checked").permissions = permissions.clone();
            }
            AdminOp::OversizeUser(..) => return Err(()),
        }
        Ok(effect)
    }
}

pub fn encode_permissions(p: &MPermissions) -> Vec<u8> {
    wire_permissions(p).to_bytes().to_vec()
}

/// Topic options as the wire carries them, for a create.
pub fn create_options(
    persisted: bool,
    offsets_persisted: bool,
    expiry: u64,
    max_size: u64,
) -> WireOptions {
    let policy = |p: bool| if p { "persisted" } else { "replicated" };
    let entries: Vec<(&str, u8, Vec<u8>)> = vec![
        ("durability", 2, policy(persisted).as_bytes().to_vec()),
        (
            "consumer_offset_durability",
            2,
            policy(offsets_persisted).as_bytes().to_vec(),
        ),
        ("segment_size", 12, SEGMENT_SIZE.to_le_bytes().to_vec()),
        (
            "messages_required_to_save",
            11,
            MESSAGES_TO_SAVE.to_le_bytes().to_vec(),
        ),
        ("message_expiry", 12, expiry.to_le_bytes().to_vec()),
        ("max_topic_size", 12, max_size.to_le_bytes().to_vec()),
    ];
    crate::wire::options(&entries)
}

pub fn update_options(expiry: u64, max_size: u64) -> WireOptions {
    crate::wire::options(&[
        ("message_expiry", 12, expiry.to_le_bytes().to_vec()),
        ("max_topic_size", 12, max_size.to_le_bytes().to_vec()),
    ])
}

fn within(value: u64, window: Window) -> bool {
    window.is_none_or(|(lo, hi)| (lo..=hi).contains(&value))
}

/// Every field of `state` against the model: ids, names, options (the documented defaults
/// for those the callers never set), partition identities, groups and their incarnations,
/// users (status, permissions, the password verified against its hash, incarnation), and
/// every creation time within its op's window.
/// Whether a comparison verifies each user's password hash (argon2: slow, so only at boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passwords {
    Verify,
    Skip,
}

pub fn compare(
    model: &Model,
    state: &MetaState,
    cluster: u128,
    passwords: Passwords,
) -> Result<(), String> {
    let streams = state.streams();
    if streams.keys().ne(model.streams.keys()) {
        return Err(format!(
            "stream ids {:?}, the model has {:?}",
            streams.keys().collect::<Vec<_>>(),
            model.streams.keys().collect::<Vec<_>>()
        ));
    }
    for (id, stream) in streams {
        let m = &model.streams[id];
        if stream.name != m.name || !within(stream.created_at, m.created) {
            return Err(format!(
                "stream {id}: {:?} created at {}, the model has {:?} created in {:?}",
                stream.name, stream.created_at, m.name, m.created
            ));
        }
        if stream.topics.keys().ne(m.topics.keys()) {
            return Err(format!(
                "stream {id}: topic ids {:?}, the model has {:?}",
                stream.topics.keys().collect::<Vec<_>>(),
                m.topics.keys().collect::<Vec<_>>()
            ));
        }
        for (t, topic) in &stream.topics {
            compare_topic(cluster, *id, topic, &m.topics[t])?;
        }
    }
    let users = state.users();
    if users.keys().ne(model.users.keys()) {
        return Err(format!(
            "user ids {:?}, the model has {:?}",
            users.keys().collect::<Vec<_>>(),
            model.users.keys().collect::<Vec<_>>()
        ));
    }
    for (id, user) in users {
        let m = &model.users[id];
        let fields = (
            &user.username,
            user.status,
            &user.permissions,
            user.created_op,
        );
        let permissions = m.permissions.as_ref().map(encode_permissions);
        let expected = (&m.name, m.status, &permissions, m.created_op);
        if fields != expected {
            return Err(format!("user {id}: {fields:?}, the model has {expected:?}"));
        }
        if !within(user.created_at, m.created) {
            return Err(format!(
                "user {id}: created at {}, outside its op's window {:?}",
                user.created_at, m.created
            ));
        }
        if passwords == Passwords::Verify && !verify(&user.password_hash, &m.password) {
            return Err(format!(
                "user {id}: its password hash does not verify the password the model set"
            ));
        }
    }
    if !state.indexes_agree() {
        return Err("the state's name indexes disagree with its entities".into());
    }
    Ok(())
}

fn compare_topic(
    cluster: u128,
    s: u32,
    topic: &cairn_engine::node::state::Topic,
    m: &MTopic,
) -> Result<(), String> {
    let o = &topic.options;
    let found = (
        &topic.name,
        o.durability,
        o.consumer_offset_durability,
        o.message_expiry,
        o.max_topic_size,
        o.segment_size,
        o.messages_required_to_save,
        o.size_of_messages_required_to_save,
        o.preallocate_segments,
        o.replication_factor,
    );
    let expected = (
        &m.name,
        m.durability,
        m.offsets,
        m.expiry,
        m.max_size,
        SEGMENT_SIZE,
        MESSAGES_TO_SAVE,
        1024 * 1024,
        false,
        1,
    );
    let t = topic.id;
    if found != expected || o.compression.code() != 1 {
        return Err(format!(
            "topic {s}/{t}: {found:?}, the model has {expected:?}"
        ));
    }
    if !within(topic.created_at, m.created) {
        return Err(format!(
            "topic {s}/{t}: created at {}, outside its op's window {:?}",
            topic.created_at, m.created
        ));
    }
    if topic.partitions.keys().ne(m.partitions.keys()) {
        return Err(format!(
            "topic {s}/{t}: partition ids {:?}, the model has {:?}",
            topic.partitions.keys().collect::<Vec<_>>(),
            m.partitions.keys().collect::<Vec<_>>()
        ));
    }
    for (p, meta) in &topic.partitions {
        let (op, window) = m.partitions[p];
        let expected = nonce(cluster, op, (s, t, *p));
        if meta.nonce != expected || !within(meta.created_at, window) {
            return Err(format!(
                "partition {s}/{t}/{p}: nonce {:#x} created at {}, the model has nonce {expected:#x} (op {op}) in {window:?}",
                meta.nonce, meta.created_at
            ));
        }
    }
    let groups: BTreeMap<u32, (String, u64)> = topic
        .groups
        .iter()
        .map(|(g, v)| (*g, (v.name.clone(), v.created_op)))
        .collect();
    if groups != m.groups {
        return Err(format!(
            "topic {s}/{t}: groups {groups:?}, the model has {:?}",
            m.groups
        ));
    }
    Ok(())
}

/// Whether `password` is the one `hash` (a PHC string) was made from.
pub fn verify(hash: &str, password: &str) -> bool {
    use argon2::password_hash::{PasswordHash, PasswordVerifier};
    PasswordHash::new(hash).is_ok_and(|parsed| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

//! The workload: what the callers ask. Each choice is drawn from the world's seeded rng
//! against the model — a structure or user op for the admins, a login to try, a batch to
//! send, how to name a stream and topic, a group member's move — and an admin op becomes
//! the journaled request the node executes ([`meta_op`]).

use super::model::{self, AdminOp, Model};
use super::{NodeWorld, MAX_PARTITIONS, MAX_STREAMS, MAX_TOPICS};
use bytes::BytesMut;
use cairn_engine::format::BatchBuilder;
use cairn_engine::node::ops::MetaOp;
use cairn_engine::node::{Client, NodeResult, PartitionKey};
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest,
};
use iggy_binary_protocol::requests::partitions::{
    CreatePartitionsRequest, DeletePartitionsRequest,
};
use iggy_binary_protocol::requests::streams::{
    CreateStreamRequest, DeleteStreamRequest, PurgeStreamRequest, UpdateStreamRequest,
};
use iggy_binary_protocol::requests::topics::{
    CreateTopicRequest, DeleteTopicRequest, PurgeTopicRequest, UpdateTopicRequest,
};
use iggy_binary_protocol::requests::users::{
    ChangePasswordRequest, CreateUserRequest, DeleteUserRequest, UpdatePermissionsRequest,
    UpdateUserRequest,
};
use iggy_binary_protocol::{WireIdentifier, WireName, WireOptions};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

pub(crate) fn sid(id: u32) -> WireIdentifier {
    WireIdentifier::numeric(id)
}

fn wire_name(name: &str) -> WireName {
    WireName::new(name).unwrap_or_else(|_| WireName::new("invalid").expect("a valid name"))
}

// Metadata ----------------------------------------------------------------------------------

impl NodeWorld {
    fn name(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        // Now and then a name already taken: the node must refuse it as the model does.
        if self.rng.gen_bool(0.1) && self.next_name > 1 {
            return format!("{prefix}{}", self.rng.gen_range(0..self.next_name));
        }
        format!("{prefix}{}", self.next_name)
    }

    pub(crate) fn pick_topic(&mut self) -> Option<(u32, u32)> {
        let all: Vec<(u32, u32)> = self
            .model
            .streams
            .iter()
            .flat_map(|(s, st)| st.topics.keys().map(move |t| (*s, *t)))
            .collect();
        (!all.is_empty()).then(|| all[self.rng.gen_range(0..all.len())])
    }

    pub(crate) fn pick_key(&mut self) -> Option<PartitionKey> {
        let all: Vec<PartitionKey> = self
            .model
            .identities(self.cluster)
            .into_keys()
            .filter(|k| !self.removed.contains(k))
            .collect();
        (!all.is_empty()).then(|| all[self.rng.gen_range(0..all.len())])
    }

    pub(crate) fn structure_op(&mut self) -> Option<AdminOp> {
        let streams: Vec<u32> = self.model.streams.keys().copied().collect();
        let topics = self
            .model
            .streams
            .values()
            .map(|s| s.topics.len())
            .sum::<usize>();
        let roll = self.rng.gen_range(0..100);
        let any_stream = |w: &mut Self| {
            (!streams.is_empty()).then(|| streams[w.rng.gen_range(0..streams.len())])
        };
        Some(match roll {
            0..=14 if streams.len() < MAX_STREAMS => AdminOp::CreateStream(self.name("s")),
            0..=39 if topics < MAX_TOPICS * 2 => {
                let stream = any_stream(self)?;
                let expiry = self.profile.expiries[self.rng.gen_range(0..3)];
                AdminOp::CreateTopic {
                    stream,
                    name: self.name("t"),
                    partitions: self.rng.gen_range(0..=MAX_PARTITIONS),
                    persisted: self.rng.gen_bool(0.6),
                    offsets_persisted: self.rng.gen_bool(0.6),
                    expiry,
                    max_size: [0, 1, 3 << 20][self.rng.gen_range(0..3)],
                }
            }
            40..=47 => {
                let (s, t) = self.pick_topic()?;
                let n = self.rng.gen_range(1..=2);
                let count = self.model.topic(s, t)?.partitions.len() as u32;
                match count + n <= MAX_PARTITIONS + 1 {
                    true => AdminOp::CreatePartitions(s, t, n),
                    false => AdminOp::DeletePartitions(s, t, n),
                }
            }
            48..=52 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::DeletePartitions(s, t, self.rng.gen_range(1..=2))
            }
            53..=60 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::CreateGroup(s, t, self.name("g"))
            }
            61..=64 => {
                let (s, t) = self.pick_topic()?;
                let groups: Vec<u32> = self.model.topic(s, t)?.groups.keys().copied().collect();
                AdminOp::DeleteGroup(s, t, *groups.first()?)
            }
            65..=70 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::UpdateTopic {
                    stream: s,
                    topic: t,
                    expiry: self.profile.expiries[self.rng.gen_range(0..3)],
                    max_size: [0, 1, 3 << 20][self.rng.gen_range(0..3)],
                }
            }
            71..=75 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::PurgeTopic(s, t)
            }
            76..=78 => AdminOp::PurgeStream(any_stream(self)?),
            79..=84 => {
                let (s, t) = self.pick_topic()?;
                AdminOp::DeleteTopic(s, t)
            }
            85..=87 => AdminOp::DeleteStream(any_stream(self)?),
            _ => {
                let s = any_stream(self)?;
                AdminOp::RenameStream(s, self.name("s"))
            }
        })
    }

    pub(crate) fn user_op(&mut self) -> Option<AdminOp> {
        let users: Vec<u32> = self.model.users.keys().copied().collect();
        let any = |w: &mut Self| users[w.rng.gen_range(0..users.len())];
        Some(match self.rng.gen_range(0..100) {
            0..=29 => AdminOp::CreateUser {
                name: self.name("user"),
                password: format!("pw{}", self.rng.gen_range(0..4)),
                status: [1, 1, 1, 2, 0, 3][self.rng.gen_range(0..6)],
                permissions: self.some_permissions(),
            },
            30..=44 => AdminOp::UpdateUser {
                user: any(self),
                name: self.rng.gen_bool(0.3).then(|| self.name("user")),
                status: Some([1, 2, 2, 9][self.rng.gen_range(0..4)]),
            },
            45..=64 => AdminOp::DeleteUser(any(self)),
            65..=79 => AdminOp::ChangePassword {
                user: any(self),
                password: format!("pw{}", self.rng.gen_range(0..4)),
            },
            80..=94 => AdminOp::UpdatePermissions {
                user: any(self),
                permissions: self.some_permissions(),
            },
            _ => AdminOp::OversizeUser(self.name("huge"), [1, 0, 4096][self.rng.gen_range(0..3)]),
        })
    }

    /// Permissions over some of the topics the model has (now and then a topic it does not,
    /// which the node must refuse).
    fn some_permissions(&mut self) -> Option<model::MPermissions> {
        if self.rng.gen_bool(0.5) {
            return None;
        }
        let mut permissions = Vec::new();
        for (s, stream) in &self.model.streams {
            let topics: Vec<u32> = stream.topics.keys().copied().collect();
            permissions.push((*s, topics));
        }
        if self.rng.gen_bool(0.1) {
            permissions.push((99, vec![0]));
        }
        Some(permissions)
    }
}

/// The journaled op of an admin op (hashing a password on the node's pool first).
pub(crate) async fn meta_op(
    client: &Client,
    op: &AdminOp,
    model_view: &Model,
) -> NodeResult<MetaOp> {
    Ok(match op {
        AdminOp::CreateStream(name) => MetaOp::CreateStream(CreateStreamRequest {
            name: wire_name(name),
            options: WireOptions::empty(),
        }),
        AdminOp::RenameStream(s, name) => MetaOp::UpdateStream(UpdateStreamRequest {
            stream_id: sid(*s),
            name: wire_name(name),
            options: WireOptions::empty(),
        }),
        AdminOp::DeleteStream(s) => {
            MetaOp::DeleteStream(DeleteStreamRequest { stream_id: sid(*s) })
        }
        AdminOp::PurgeStream(s) => MetaOp::PurgeStream(PurgeStreamRequest { stream_id: sid(*s) }),
        AdminOp::CreateTopic {
            stream,
            name,
            partitions,
            persisted,
            offsets_persisted,
            expiry,
            max_size,
        } => MetaOp::CreateTopic(CreateTopicRequest {
            stream_id: sid(*stream),
            partitions_count: *partitions,
            name: wire_name(name),
            options: model::create_options(*persisted, *offsets_persisted, *expiry, *max_size),
        }),
        AdminOp::UpdateTopic {
            stream,
            topic,
            expiry,
            max_size,
        } => MetaOp::UpdateTopic(UpdateTopicRequest {
            stream_id: sid(*stream),
            topic_id: sid(*topic),
            name: wire_name(
                &model_view
                    .topic(*stream, *topic)
                    .map_or_else(|| "gone".to_string(), |t| t.name.clone()),
            ),
            options: model::update_options(*expiry, *max_size),
        }),
        AdminOp::DeleteTopic(s, t) => MetaOp::DeleteTopic(DeleteTopicRequest {
            stream_id: sid(*s),
            topic_id: sid(*t),
        }),
        AdminOp::PurgeTopic(s, t) => MetaOp::PurgeTopic(PurgeTopicRequest {
            stream_id: sid(*s),
            topic_id: sid(*t),
        }),
        AdminOp::CreatePartitions(s, t, n) => MetaOp::CreatePartitions(CreatePartitionsRequest {
            stream_id: sid(*s),
            topic_id: sid(*t),
            partitions_count: *n,
        }),
        AdminOp::DeletePartitions(s, t, n) => MetaOp::DeletePartitions(DeletePartitionsRequest {
            stream_id: sid(*s),
            topic_id: sid(*t),
            partitions_count: *n,
        }),
        AdminOp::CreateGroup(s, t, name) => {
            MetaOp::CreateConsumerGroup(CreateConsumerGroupRequest {
                stream_id: sid(*s),
                topic_id: sid(*t),
                name: wire_name(name),
            })
        }
        AdminOp::DeleteGroup(s, t, g) => MetaOp::DeleteConsumerGroup(DeleteConsumerGroupRequest {
            stream_id: sid(*s),
            topic_id: sid(*t),
            group_id: sid(*g),
        }),
        AdminOp::CreateUser {
            name,
            password,
            status,
            permissions,
        } => MetaOp::CreateUser(CreateUserRequest {
            username: wire_name(name),
            password: client.hash_password(password).await?,
            status: *status,
            permissions: permissions.as_ref().map(model::wire_permissions),
            options: WireOptions::empty(),
        }),
        AdminOp::UpdateUser { user, name, status } => MetaOp::UpdateUser(UpdateUserRequest {
            user_id: sid(*user),
            username: name.as_deref().map(wire_name),
            status: *status,
            options: WireOptions::empty(),
        }),
        AdminOp::DeleteUser(id) => MetaOp::DeleteUser(DeleteUserRequest { user_id: sid(*id) }),
        AdminOp::ChangePassword { user, password } => {
            MetaOp::ChangePassword(ChangePasswordRequest {
                user_id: sid(*user),
                current_password: String::new(),
                new_password: client.hash_password(password).await?,
            })
        }
        AdminOp::UpdatePermissions { user, permissions } => {
            MetaOp::UpdatePermissions(UpdatePermissionsRequest {
                user_id: sid(*user),
                permissions: permissions.as_ref().map(model::wire_permissions),
            })
        }
        AdminOp::OversizeUser(name, excess) => {
            let password = client.hash_password("password").await?;
            sized_user(
                name,
                &password,
                model::MAX_BODY.saturating_add_signed(*excess as isize),
            )
        }
    })
}

/// A `CreateUser` whose body is exactly `target` bytes: permissions over topics `0..n` of
/// stream 0, the name padded for the last few bytes.
fn sized_user(name: &str, password: &str, target: usize) -> MetaOp {
    let build = |name: &str, topics: u32| {
        MetaOp::CreateUser(CreateUserRequest {
            username: wire_name(name),
            password: password.to_string(),
            status: 1,
            permissions: Some(model::wire_permissions(&vec![(0, (0..topics).collect())])),
            options: WireOptions::empty(),
        })
    };
    let len = |op: &MetaOp| op.body().len();
    let one = len(&build(name, 1));
    let per_topic = len(&build(name, 2)) - one;
    let topics = 1 + ((target - one) / per_topic) as u32;
    let short = target - len(&build(name, topics));
    let op = build(&format!("{name}{}", "x".repeat(short)), topics);
    assert_eq!(len(&op), target, "a body of exactly the size asked for");
    op
}

// Logins and messages -----------------------------------------------------------------------

impl NodeWorld {
    pub(crate) fn plan_login(&mut self) -> (String, String) {
        let users: Vec<(String, String)> = self
            .model
            .users
            .values()
            .map(|u| (u.name.clone(), u.password.clone()))
            .collect();
        let (name, password) = users[self.rng.gen_range(0..users.len())].clone();
        match self.rng.gen_range(0..10) {
            0 => ("nobody".into(), "password".into()),
            1 => (name, "wrong password".into()),
            _ => (name, password),
        }
    }

    pub(crate) fn batch(&mut self, count: usize) -> (BytesMut, Vec<u128>) {
        let max = self.profile.max_payload;
        self.batch_sized(count, |rng| rng.gen_range(0..=max))
    }

    /// A batch of `count` messages, each payload `size` bytes long (random bytes).
    pub(crate) fn batch_sized(
        &mut self,
        count: usize,
        size: impl Fn(&mut ChaCha8Rng) -> usize,
    ) -> (BytesMut, Vec<u128>) {
        let mut builder = BatchBuilder::new(self.clock.now_nanos() / 1000);
        let mut ids = Vec::with_capacity(count);
        for _ in 0..count {
            let size = size(&mut self.rng);
            let mut payload = vec![0u8; size];
            self.rng.fill(&mut payload[..]);
            let id = self.next_id;
            self.next_id += 1;
            builder.push(id, 0, &payload, b"");
            ids.push(id);
            self.sent_ids.insert(id);
        }
        (builder.build(), ids)
    }

    /// How a caller names stream `s` and topic `t`: by id, or now and then by name (only
    /// while no metadata op is in flight, so the names denote these ids when picked).
    pub(crate) fn address(&mut self, s: u32, t: u32) -> (WireIdentifier, WireIdentifier, bool) {
        let quiet =
            self.in_flight.is_empty() && self.pending.is_empty() && self.in_doubt.is_empty();
        let names =
            self.model.streams.get(&s).and_then(|stream| {
                Some((stream.name.clone(), stream.topics.get(&t)?.name.clone()))
            });
        match names {
            Some((stream, topic)) if quiet && self.rng.gen_bool(0.3) => (
                WireIdentifier::named(&stream).expect("a model name is valid"),
                WireIdentifier::named(&topic).expect("a model name is valid"),
                true,
            ),
            _ => (sid(s), sid(t), false),
        }
    }
}

// Groups --------------------------------------------------------------------------------------

/// What a group member does in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupMove {
    Join,
    Leave,
    Disconnect,
    /// Ask the group's list and every member's assignment, and judge them.
    Check,
    Poll,
}

//! The metadata state machine: streams, topics, partitions, consumer groups and users, and
//! how each journaled operation changes them. Pure and deterministic (ordered maps only):
//! the same journal always rebuilds the same state, which the snapshot stores whole.
//!
//! [`MetaState::apply`] checks an operation first and changes nothing when it refuses; an
//! accepted operation returns the directory work it implies ([`DirWork`]), which the node
//! carries out after the journal entry is durable (and boot redoes for entries whose work may
//! not have finished).

use super::error::{Named, NodeError, NodeResult};
use super::ops::MetaOp;
use super::options::{self, TopicOptions};
use crate::partition::PartitionIdentity;
use iggy_binary_protocol::{WireIdentifier, MAX_PARTITIONS_PER_REQUEST};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use xxhash_rust::xxh3::xxh3_64;

/// Explicit limits on everything the metadata holds.
pub const MAX_STREAMS: usize = 4096;
pub const MAX_TOPICS_PER_STREAM: usize = 4096;
pub const MAX_PARTITIONS_PER_TOPIC: usize = 1000;
pub const MAX_GROUPS_PER_TOPIC: usize = 1024;
pub const MAX_USERS: usize = 1024;
/// The root user's id; it exists from the first boot and can be neither deleted nor
/// deactivated.
pub const ROOT_USER_ID: u32 = 0;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MetaState {
    pub streams: BTreeMap<u32, Stream>,
    pub users: BTreeMap<u32, User>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    pub topics: BTreeMap<u32, Topic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topic {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    pub options: TopicOptions,
    pub partitions: BTreeMap<u32, PartitionMeta>,
    pub groups: BTreeMap<u32, Group>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMeta {
    pub id: u32,
    pub created_at: u64,
    /// The nonce in its superblock's identity (new at every purge).
    pub nonce: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub id: u32,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: u32,
    pub username: String,
    /// A PHC string (argon2id).
    pub password_hash: String,
    /// 1 active, 2 inactive.
    pub status: u8,
    /// The permissions' wire encoding, when set.
    pub permissions: Option<Vec<u8>>,
    pub created_at: u64,
}

/// What applying an operation asks of the file system, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirWork {
    CreatePartition(PartitionIdentity),
    /// Remove a partition directory and recreate it empty with the new identity.
    PurgePartition(PartitionIdentity),
    RemovePartition {
        stream: u32,
        topic: u32,
        partition: u32,
    },
    RemoveTopic {
        stream: u32,
        topic: u32,
    },
    RemoveStream {
        stream: u32,
    },
}

/// Where an operation sits in the journal: what makes its effects deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpContext {
    pub op: u64,
    pub timestamp: u64,
    pub cluster: u128,
}

impl OpContext {
    /// The creation nonce of partition `(stream, topic, partition)` made by this op: drawn
    /// from the node's cluster id (itself drawn from the environment's entropy at the first
    /// boot) and the op, so a replay makes the same one and no other creation does.
    pub fn nonce(&self, stream: u32, topic: u32, partition: u32) -> u64 {
        let mut key = Vec::with_capacity(40);
        key.extend_from_slice(&self.cluster.to_le_bytes());
        key.extend_from_slice(&self.op.to_le_bytes());
        for id in [stream, topic, partition] {
            key.extend_from_slice(&id.to_le_bytes());
        }
        xxh3_64(&key)
    }
}

/// What an accepted operation did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// The id of the entity it created, if any.
    pub created: Option<u32>,
    pub work: Vec<DirWork>,
}

impl Applied {
    fn created(id: u32) -> Applied {
        Applied {
            created: Some(id),
            work: Vec::new(),
        }
    }
}

/// The lowest id not in `taken`.
fn lowest_free<T>(taken: &BTreeMap<u32, T>) -> u32 {
    let mut next = 0;
    for &id in taken.keys() {
        if id != next {
            break;
        }
        next += 1;
    }
    next
}

fn named(id: &WireIdentifier) -> Named {
    match id {
        WireIdentifier::Numeric(n) => Named::Id(*n),
        WireIdentifier::String(s) => Named::Name(s.as_str().to_owned()),
    }
}

/// Finds an entity by id or name.
fn find<T>(
    map: &BTreeMap<u32, T>,
    id: &WireIdentifier,
    name_of: impl Fn(&T) -> &str,
) -> Option<u32> {
    match id {
        WireIdentifier::Numeric(n) => map.contains_key(n).then_some(*n),
        WireIdentifier::String(s) => map
            .iter()
            .find(|(_, v)| name_of(v) == s.as_str())
            .map(|(k, _)| *k),
    }
}

impl MetaState {
    pub fn stream_id(&self, id: &WireIdentifier) -> NodeResult<u32> {
        find(&self.streams, id, |s| &s.name).ok_or_else(|| NodeError::StreamNotFound(named(id)))
    }

    pub fn topic_ids(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> NodeResult<(u32, u32)> {
        let s = self.stream_id(stream)?;
        let t = find(&self.streams[&s].topics, topic, |t| &t.name).ok_or_else(|| {
            NodeError::TopicNotFound {
                stream: s,
                topic: named(topic),
            }
        })?;
        Ok((s, t))
    }

    pub fn topic(&self, stream: u32, topic: u32) -> &Topic {
        &self.streams[&stream].topics[&topic]
    }

    fn topic_mut(&mut self, stream: u32, topic: u32) -> &mut Topic {
        self.streams
            .get_mut(&stream)
            .and_then(|s| s.topics.get_mut(&topic))
            .expect("resolved before")
    }

    pub fn group_id(&self, stream: u32, topic: u32, group: &WireIdentifier) -> NodeResult<u32> {
        find(&self.topic(stream, topic).groups, group, |g| &g.name).ok_or_else(|| {
            NodeError::GroupNotFound {
                stream,
                topic,
                group: named(group),
            }
        })
    }

    pub fn user_id(&self, user: &WireIdentifier) -> NodeResult<u32> {
        find(&self.users, user, |u| &u.username).ok_or_else(|| NodeError::UserNotFound(named(user)))
    }

    /// Every partition, with its identity.
    pub fn partitions(&self) -> Vec<PartitionIdentity> {
        let mut all = Vec::new();
        for stream in self.streams.values() {
            for topic in stream.topics.values() {
                for p in topic.partitions.values() {
                    all.push(PartitionIdentity {
                        stream_id: stream.id,
                        topic_id: topic.id,
                        partition_id: p.id,
                        nonce: p.nonce,
                    });
                }
            }
        }
        all
    }

    /// Applies `op`; refuses (changing nothing) when it does not hold.
    pub fn apply(&mut self, op: &MetaOp, ctx: OpContext) -> NodeResult<Applied> {
        match op {
            MetaOp::CreateStream(r) => self.create_stream(r.name.as_str(), ctx),
            MetaOp::UpdateStream(r) => {
                let s = self.stream_id(&r.stream_id)?;
                self.check_stream_name(r.name.as_str(), Some(s))?;
                self.streams.get_mut(&s).expect("found").name = r.name.as_str().to_owned();
                Ok(Applied::default())
            }
            MetaOp::DeleteStream(r) => {
                let s = self.stream_id(&r.stream_id)?;
                self.streams.remove(&s);
                Ok(Applied {
                    created: None,
                    work: vec![DirWork::RemoveStream { stream: s }],
                })
            }
            MetaOp::PurgeStream(r) => {
                let s = self.stream_id(&r.stream_id)?;
                let topics: Vec<u32> = self.streams[&s].topics.keys().copied().collect();
                let mut work = Vec::new();
                for t in topics {
                    work.extend(self.purge_topic(s, t, ctx));
                }
                Ok(Applied {
                    created: None,
                    work,
                })
            }
            MetaOp::CreateTopic(r) => self.create_topic(r, ctx),
            MetaOp::UpdateTopic(r) => {
                let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
                self.check_topic_name(s, r.name.as_str(), Some(t))?;
                let updated = options::for_update(self.topic(s, t).options, &r.options)?;
                let topic = self.topic_mut(s, t);
                topic.name = r.name.as_str().to_owned();
                topic.options = updated;
                Ok(Applied::default())
            }
            MetaOp::DeleteTopic(r) => {
                let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
                self.streams.get_mut(&s).expect("found").topics.remove(&t);
                Ok(Applied {
                    created: None,
                    work: vec![DirWork::RemoveTopic {
                        stream: s,
                        topic: t,
                    }],
                })
            }
            MetaOp::PurgeTopic(r) => {
                let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
                Ok(Applied {
                    created: None,
                    work: self.purge_topic(s, t, ctx),
                })
            }
            MetaOp::CreatePartitions(r) => {
                let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
                self.add_partitions(s, t, r.partitions_count, ctx)
            }
            MetaOp::DeletePartitions(r) => {
                let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
                self.delete_partitions(s, t, r.partitions_count)
            }
            MetaOp::CreateConsumerGroup(r) => {
                let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
                let name = r.name.as_str();
                let topic = self.topic(s, t);
                if topic.groups.values().any(|g| g.name == name) {
                    return Err(NodeError::GroupNameExists {
                        topic: t,
                        name: name.into(),
                    });
                }
                if topic.groups.len() >= MAX_GROUPS_PER_TOPIC {
                    return Err(NodeError::TooMany {
                        what: "consumer groups in a topic",
                        limit: MAX_GROUPS_PER_TOPIC,
                    });
                }
                let id = lowest_free(&topic.groups);
                self.topic_mut(s, t).groups.insert(
                    id,
                    Group {
                        id,
                        name: name.into(),
                    },
                );
                Ok(Applied::created(id))
            }
            MetaOp::DeleteConsumerGroup(r) => {
                let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
                let g = self.group_id(s, t, &r.group_id)?;
                self.topic_mut(s, t).groups.remove(&g);
                Ok(Applied::default())
            }
            MetaOp::CreateUser(r) => {
                let name = r.username.as_str();
                if self.users.values().any(|u| u.username == name) {
                    return Err(NodeError::UserExists(name.into()));
                }
                if self.users.len() >= MAX_USERS {
                    return Err(NodeError::TooMany {
                        what: "users",
                        limit: MAX_USERS,
                    });
                }
                let id = lowest_free(&self.users);
                self.users.insert(
                    id,
                    User {
                        id,
                        username: name.into(),
                        password_hash: r.password.clone(),
                        status: r.status,
                        permissions: r.permissions.as_ref().map(|p| {
                            use iggy_binary_protocol::WireEncode;
                            p.to_bytes().to_vec()
                        }),
                        created_at: ctx.timestamp,
                    },
                );
                Ok(Applied::created(id))
            }
            MetaOp::UpdateUser(r) => {
                let id = self.user_id(&r.user_id)?;
                if let Some(name) = &r.username {
                    if self
                        .users
                        .values()
                        .any(|u| u.username == name.as_str() && u.id != id)
                    {
                        return Err(NodeError::UserExists(name.as_str().into()));
                    }
                }
                if id == ROOT_USER_ID && r.status.is_some_and(|s| s != 1) {
                    return Err(NodeError::RootUser);
                }
                let user = self.users.get_mut(&id).expect("found");
                if let Some(name) = &r.username {
                    user.username = name.as_str().into();
                }
                if let Some(status) = r.status {
                    user.status = status;
                }
                Ok(Applied::default())
            }
            MetaOp::DeleteUser(r) => {
                let id = self.user_id(&r.user_id)?;
                if id == ROOT_USER_ID {
                    return Err(NodeError::RootUser);
                }
                self.users.remove(&id);
                Ok(Applied::default())
            }
            MetaOp::ChangePassword(r) => {
                let id = self.user_id(&r.user_id)?;
                self.users.get_mut(&id).expect("found").password_hash = r.new_password.clone();
                Ok(Applied::default())
            }
            MetaOp::UpdatePermissions(r) => {
                let id = self.user_id(&r.user_id)?;
                self.users.get_mut(&id).expect("found").permissions =
                    r.permissions.as_ref().map(|p| {
                        use iggy_binary_protocol::WireEncode;
                        p.to_bytes().to_vec()
                    });
                Ok(Applied::default())
            }
        }
    }

    fn check_stream_name(&self, name: &str, except: Option<u32>) -> NodeResult<()> {
        check_name(name)?;
        if self
            .streams
            .values()
            .any(|s| s.name == name && Some(s.id) != except)
        {
            return Err(NodeError::StreamNameExists(name.into()));
        }
        Ok(())
    }

    fn check_topic_name(&self, stream: u32, name: &str, except: Option<u32>) -> NodeResult<()> {
        check_name(name)?;
        if self.streams[&stream]
            .topics
            .values()
            .any(|t| t.name == name && Some(t.id) != except)
        {
            return Err(NodeError::TopicNameExists {
                stream,
                name: name.into(),
            });
        }
        Ok(())
    }

    fn create_stream(&mut self, name: &str, ctx: OpContext) -> NodeResult<Applied> {
        self.check_stream_name(name, None)?;
        if self.streams.len() >= MAX_STREAMS {
            return Err(NodeError::TooMany {
                what: "streams",
                limit: MAX_STREAMS,
            });
        }
        let id = lowest_free(&self.streams);
        self.streams.insert(
            id,
            Stream {
                id,
                name: name.into(),
                created_at: ctx.timestamp,
                topics: BTreeMap::new(),
            },
        );
        Ok(Applied::created(id))
    }

    fn create_topic(
        &mut self,
        r: &iggy_binary_protocol::requests::topics::CreateTopicRequest,
        ctx: OpContext,
    ) -> NodeResult<Applied> {
        let s = self.stream_id(&r.stream_id)?;
        self.check_topic_name(s, r.name.as_str(), None)?;
        check_partitions_count(r.partitions_count, 0, true)?;
        let options = options::for_create(&r.options)?;
        let stream = &self.streams[&s];
        if stream.topics.len() >= MAX_TOPICS_PER_STREAM {
            return Err(NodeError::TooMany {
                what: "topics in a stream",
                limit: MAX_TOPICS_PER_STREAM,
            });
        }
        let id = lowest_free(&stream.topics);
        self.streams.get_mut(&s).expect("found").topics.insert(
            id,
            Topic {
                id,
                name: r.name.as_str().into(),
                created_at: ctx.timestamp,
                options,
                partitions: BTreeMap::new(),
                groups: BTreeMap::new(),
            },
        );
        let work = self.make_partitions(s, id, 0..r.partitions_count, ctx);
        Ok(Applied {
            created: Some(id),
            work,
        })
    }

    fn add_partitions(
        &mut self,
        stream: u32,
        topic: u32,
        count: u32,
        ctx: OpContext,
    ) -> NodeResult<Applied> {
        let existing = self.topic(stream, topic).partitions.len();
        check_partitions_count(count, existing, false)?;
        let first = existing as u32;
        Ok(Applied {
            created: None,
            work: self.make_partitions(stream, topic, first..first + count, ctx),
        })
    }

    fn make_partitions(
        &mut self,
        stream: u32,
        topic: u32,
        ids: std::ops::Range<u32>,
        ctx: OpContext,
    ) -> Vec<DirWork> {
        let mut work = Vec::with_capacity(ids.len());
        for partition in ids {
            let nonce = ctx.nonce(stream, topic, partition);
            self.topic_mut(stream, topic).partitions.insert(
                partition,
                PartitionMeta {
                    id: partition,
                    created_at: ctx.timestamp,
                    nonce,
                },
            );
            work.push(DirWork::CreatePartition(PartitionIdentity {
                stream_id: stream,
                topic_id: topic,
                partition_id: partition,
                nonce,
            }));
        }
        work
    }

    fn delete_partitions(&mut self, stream: u32, topic: u32, count: u32) -> NodeResult<Applied> {
        let existing = self.topic(stream, topic).partitions.len() as u32;
        if count == 0 || count > existing {
            return Err(NodeError::InvalidPartitionsCount {
                count,
                why: format!("the topic has {existing} partitions"),
            });
        }
        let mut work = Vec::new();
        for partition in existing - count..existing {
            self.topic_mut(stream, topic).partitions.remove(&partition);
            work.push(DirWork::RemovePartition {
                stream,
                topic,
                partition,
            });
        }
        Ok(Applied {
            created: None,
            work,
        })
    }

    fn purge_topic(&mut self, stream: u32, topic: u32, ctx: OpContext) -> Vec<DirWork> {
        let ids: Vec<u32> = self
            .topic(stream, topic)
            .partitions
            .keys()
            .copied()
            .collect();
        let mut work = Vec::with_capacity(ids.len());
        for partition in ids {
            let nonce = ctx.nonce(stream, topic, partition);
            self.topic_mut(stream, topic)
                .partitions
                .get_mut(&partition)
                .expect("listed")
                .nonce = nonce;
            work.push(DirWork::PurgePartition(PartitionIdentity {
                stream_id: stream,
                topic_id: topic,
                partition_id: partition,
                nonce,
            }));
        }
        work
    }
}

/// Names are 1..=255 bytes (the wire guarantees it) and carry no control characters.
fn check_name(name: &str) -> NodeResult<()> {
    if name.chars().any(char::is_control) || name.trim().is_empty() {
        return Err(NodeError::InvalidName {
            name: name.into(),
            why: "names must not be blank or hold control characters".into(),
        });
    }
    Ok(())
}

fn check_partitions_count(count: u32, existing: usize, zero_ok: bool) -> NodeResult<()> {
    if count == 0 && !zero_ok {
        return Err(NodeError::InvalidPartitionsCount {
            count,
            why: "at least one partition must be added".into(),
        });
    }
    if count > MAX_PARTITIONS_PER_REQUEST || existing + count as usize > MAX_PARTITIONS_PER_TOPIC {
        return Err(NodeError::InvalidPartitionsCount {
            count,
            why: format!(
                "a topic holds at most {MAX_PARTITIONS_PER_TOPIC} partitions (it has {existing})"
            ),
        });
    }
    Ok(())
}

//! How each journaled operation changes the [`MetaState`]: one method per operation, each
//! resolve → validate → limits → mutate, so a refusal returns before anything changed.
//! The name indexes are kept in the same mutation step as the maps they index.

use super::grants::check_permissions;
use super::ops::{MetaOp, MAX_BODY_LEN};
use super::options;
use super::proposals::Lookup;
use super::tokens::{
    CreateTokenOp, DeleteTokenOp, Token, TokenExpiry, MAX_TOKENS_PER_USER, MAX_TOKEN_NAME_LEN,
    MIN_TOKEN_NAME_LEN,
};
use super::{
    lowest_free, Applied, DirWork, Effect, Group, MetaState, NodeError, NodeResult, OpContext,
    PartitionMeta, Proposals, Stream, Topic, User, MAX_GROUPS_PER_TOPIC, MAX_PARTITIONS_PER_TOPIC,
    MAX_STREAMS, MAX_TOPICS_PER_STREAM, MAX_USERS, ROOT_USER_ID, USER_ACTIVE, USER_INACTIVE,
};
use crate::error::{Capacity, Named, RootAction};
use crate::partition::PartitionIdentity;
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest,
};
use iggy_binary_protocol::requests::streams::UpdateStreamRequest;
use iggy_binary_protocol::requests::topics::{CreateTopicRequest, UpdateTopicRequest};
use iggy_binary_protocol::requests::users::{
    ChangePasswordRequest, CreateUserRequest, UpdatePermissionsRequest, UpdateUserRequest,
};
use iggy_binary_protocol::{WireEncode, MAX_PARTITIONS_PER_REQUEST};

/// The longest password hash a user may hold (the wire's password field is 255 bytes).
pub const MAX_PASSWORD_HASH_LEN: usize = 255;

impl MetaState {
    /// Applies `op`; refuses (changing nothing) when it does not hold.
    pub fn apply(&mut self, op: &MetaOp, ctx: OpContext) -> NodeResult<Applied> {
        assert!(
            ctx.decided == 0 || ctx.decided > self.decided,
            "a decided op applies once, in the order decided"
        );
        let applied = match ctx.proposal {
            0 => self.apply_op(op, ctx)?,
            key => {
                // The entry's log index: a decision's low half, or the op's number where the
                // group's own machine numbers ops by index (`cairn_cluster::sm`).
                let index = match ctx.decided {
                    0 => ctx.op,
                    decided => decided as u64,
                };
                match self.proposals.lookup(key, ctx.asked_at) {
                    Lookup::Applied(created) => Applied {
                        created,
                        repeated: true,
                        ..Applied::default()
                    },
                    Lookup::Forgotten(through) => {
                        return Err(NodeError::ProposalForgotten {
                            asked_at: ctx.asked_at,
                            forgotten_through: through,
                        })
                    }
                    Lookup::New => {
                        let applied = self.apply_op(op, ctx)?;
                        self.proposals.record(key, index, applied.created);
                        applied
                    }
                }
            }
        };
        if ctx.decided != 0 {
            self.decided = ctx.decided;
        }
        Ok(applied)
    }

    /// In a cluster, the keyed proposals applied lately ([`super::proposals`]).
    pub fn proposals(&self) -> &Proposals {
        &self.proposals
    }

    /// In a cluster, the last consensus decision applied (0 on a single node).
    pub fn decided(&self) -> u128 {
        self.decided
    }

    fn apply_op(&mut self, op: &MetaOp, ctx: OpContext) -> NodeResult<Applied> {
        let body = op.body().len();
        if body > MAX_BODY_LEN {
            return Err(NodeError::TooBig {
                what: "metadata request body",
                len: body,
                limit: MAX_BODY_LEN,
            });
        }
        match op {
            MetaOp::CreateStream(r) => self.create_stream(r.name.as_str(), ctx),
            MetaOp::UpdateStream(r) => self.update_stream(r),
            MetaOp::DeleteStream(r) => {
                let s = self.stream_id(&r.stream_id)?;
                Ok(self.delete_stream(s))
            }
            MetaOp::PurgeStream(r) => {
                let s = self.stream_id(&r.stream_id)?;
                let topics: Vec<u32> = self.streams[&s].topics.keys().copied().collect();
                let work = topics
                    .into_iter()
                    .flat_map(|t| self.purge_topic(s, t, ctx))
                    .collect();
                Ok(Applied::work(work))
            }
            MetaOp::CreateTopic(r) => self.create_topic(r, ctx),
            MetaOp::UpdateTopic(r) => self.update_topic(r),
            MetaOp::DeleteTopic(r) => {
                let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
                Ok(self.delete_topic(s, t))
            }
            MetaOp::PurgeTopic(r) => {
                let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
                Ok(Applied::work(self.purge_topic(s, t, ctx)))
            }
            MetaOp::CreatePartitions(r) => {
                let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
                self.add_partitions(s, t, r.partitions_count, ctx)
            }
            MetaOp::DeletePartitions(r) => {
                let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
                self.delete_partitions(s, t, r.partitions_count)
            }
            MetaOp::CreateConsumerGroup(r) => self.create_group(r, ctx),
            MetaOp::DeleteConsumerGroup(r) => self.delete_group(r),
            MetaOp::CreateUser(r) => self.create_user(r, ctx),
            MetaOp::UpdateUser(r) => self.update_user(r),
            MetaOp::DeleteUser(r) => {
                let id = self.user_id(&r.user_id)?;
                if id == ROOT_USER_ID {
                    return Err(NodeError::RootUser(RootAction::Deleted));
                }
                Ok(self.delete_user(id))
            }
            MetaOp::ChangePassword(r) => self.change_password(r),
            MetaOp::UpdatePermissions(r) => self.update_permissions(r),
            MetaOp::CreatePersonalAccessToken(r) => self.create_token(r, ctx),
            MetaOp::DeletePersonalAccessToken(r) => self.delete_token(r),
        }
    }

    // Streams -----------------------------------------------------------------------------

    fn check_stream_name(&self, name: &str, except: Option<u32>) -> NodeResult<()> {
        check_name(name)?;
        match self.names.streams.get(name) {
            Some(id) if Some(*id) != except => Err(NodeError::StreamNameExists(name.into())),
            _ => Ok(()),
        }
    }

    fn create_stream(&mut self, name: &str, ctx: OpContext) -> NodeResult<Applied> {
        self.check_stream_name(name, None)?;
        room_for(self.streams.len(), Capacity::Streams, MAX_STREAMS)?;
        let id = lowest_free(&self.streams);
        self.names.streams.insert(name.into(), id);
        self.streams.insert(
            id,
            Stream {
                id,
                name: name.into(),
                created_at: ctx.timestamp,
                topics: Default::default(),
            },
        );
        Ok(Applied::created(id))
    }

    fn update_stream(&mut self, r: &UpdateStreamRequest) -> NodeResult<Applied> {
        let s = self.stream_id(&r.stream_id)?;
        let name = r.name.as_str();
        self.check_stream_name(name, Some(s))?;
        let stream = self.streams.get_mut(&s).expect("resolved");
        self.names.streams.remove(&stream.name);
        self.names.streams.insert(name.into(), s);
        stream.name = name.into();
        Ok(Applied::default())
    }

    fn delete_stream(&mut self, s: u32) -> Applied {
        let partitions = self
            .partitions()
            .into_iter()
            .filter(|p| p.stream_id == s)
            .collect();
        let stream = self.streams.remove(&s).expect("resolved");
        self.names.streams.remove(&stream.name);
        self.forget_grants(s, None);
        let mut effects = Vec::new();
        for topic in stream.topics.values() {
            self.unindex_topic(s, topic);
            effects.extend(group_deletions(s, topic));
        }
        effects.push(Effect::StreamDeleted { stream: s });
        Applied {
            created: None,
            repeated: false,
            work: vec![DirWork::RemoveStream {
                stream: s,
                partitions,
            }],
            effects,
        }
    }

    // Topics ------------------------------------------------------------------------------

    fn check_topic_name(&self, stream: u32, name: &str, except: Option<u32>) -> NodeResult<()> {
        check_name(name)?;
        match self.names.topics.get(&(stream, name.to_owned())) {
            Some(id) if Some(*id) != except => Err(NodeError::TopicNameExists {
                stream,
                name: name.into(),
            }),
            _ => Ok(()),
        }
    }

    fn create_topic(&mut self, r: &CreateTopicRequest, ctx: OpContext) -> NodeResult<Applied> {
        let s = self.stream_id(&r.stream_id)?;
        let name = r.name.as_str();
        self.check_topic_name(s, name, None)?;
        check_partitions_count(r.partitions_count, 0, true)?;
        let options = options::for_create(&r.options)?;
        let stream = &self.streams[&s];
        room_for(
            stream.topics.len(),
            Capacity::TopicsInStream,
            MAX_TOPICS_PER_STREAM,
        )?;
        let id = lowest_free(&stream.topics);
        self.names.topics.insert((s, name.into()), id);
        self.streams.get_mut(&s).expect("resolved").topics.insert(
            id,
            Topic {
                id,
                name: name.into(),
                created_at: ctx.timestamp,
                options,
                partitions: Default::default(),
                groups: Default::default(),
            },
        );
        let work = self.make_partitions(s, id, 0..r.partitions_count, ctx);
        Ok(Applied {
            created: Some(id),
            repeated: false,
            work,
            effects: Vec::new(),
        })
    }

    fn update_topic(&mut self, r: &UpdateTopicRequest) -> NodeResult<Applied> {
        let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
        let name = r.name.as_str();
        self.check_topic_name(s, name, Some(t))?;
        let updated = options::for_update(self.topic(s, t).options, &r.options)?;
        let topic = self.topic_mut(s, t);
        let old = std::mem::replace(&mut topic.name, name.into());
        topic.options = updated;
        self.names.topics.remove(&(s, old));
        self.names.topics.insert((s, name.into()), t);
        Ok(Applied::default())
    }

    fn delete_topic(&mut self, s: u32, t: u32) -> Applied {
        let partitions = self.topic_partitions(s, t);
        let topic = self
            .streams
            .get_mut(&s)
            .expect("resolved")
            .topics
            .remove(&t)
            .expect("resolved");
        self.unindex_topic(s, &topic);
        self.forget_grants(s, Some(t));
        let mut effects = group_deletions(s, &topic);
        effects.push(Effect::TopicDeleted {
            stream: s,
            topic: t,
        });
        Applied {
            created: None,
            repeated: false,
            work: vec![DirWork::RemoveTopic {
                stream: s,
                topic: t,
                partitions,
            }],
            effects,
        }
    }

    fn topic_partitions(&self, s: u32, t: u32) -> Vec<PartitionIdentity> {
        self.topic(s, t)
            .partitions
            .values()
            .map(|p| PartitionIdentity {
                stream_id: s,
                topic_id: t,
                partition_id: p.id,
                nonce: p.nonce,
            })
            .collect()
    }

    fn unindex_topic(&mut self, s: u32, topic: &Topic) {
        self.names.topics.remove(&(s, topic.name.clone()));
        for group in topic.groups.values() {
            self.names.groups.remove(&(s, topic.id, group.name.clone()));
        }
    }

    fn topic_mut(&mut self, stream: u32, topic: u32) -> &mut Topic {
        self.streams
            .get_mut(&stream)
            .and_then(|s| s.topics.get_mut(&topic))
            .expect("resolved before")
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
            let meta = self
                .topic_mut(stream, topic)
                .partitions
                .get_mut(&partition)
                .expect("listed");
            let replaces = std::mem::replace(&mut meta.nonce, nonce);
            work.push(DirWork::PurgePartition {
                identity: PartitionIdentity {
                    stream_id: stream,
                    topic_id: topic,
                    partition_id: partition,
                    nonce,
                },
                replaces,
            });
        }
        work
    }

    // Partitions --------------------------------------------------------------------------

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
        let work = self.make_partitions(stream, topic, first..first + count, ctx);
        Ok(Applied {
            created: None,
            repeated: false,
            work,
            effects: vec![Effect::TopicResized {
                stream,
                topic,
                partitions: first + count,
            }],
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
            let meta = self
                .topic_mut(stream, topic)
                .partitions
                .remove(&partition)
                .expect("partition ids are 0..count");
            work.push(DirWork::RemovePartition(PartitionIdentity {
                stream_id: stream,
                topic_id: topic,
                partition_id: partition,
                nonce: meta.nonce,
            }));
        }
        Ok(Applied {
            created: None,
            repeated: false,
            work,
            effects: vec![Effect::TopicResized {
                stream,
                topic,
                partitions: existing - count,
            }],
        })
    }

    // Consumer groups ---------------------------------------------------------------------

    fn create_group(
        &mut self,
        r: &CreateConsumerGroupRequest,
        ctx: OpContext,
    ) -> NodeResult<Applied> {
        let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
        let name = r.name.as_str();
        check_name(name)?;
        if self.names.groups.contains_key(&(s, t, name.to_owned())) {
            return Err(NodeError::GroupNameExists {
                topic: t,
                name: name.into(),
            });
        }
        let topic = self.topic(s, t);
        room_for(
            topic.groups.len(),
            Capacity::GroupsInTopic,
            MAX_GROUPS_PER_TOPIC,
        )?;
        let id = lowest_free(&topic.groups);
        self.names.groups.insert((s, t, name.into()), id);
        self.topic_mut(s, t).groups.insert(
            id,
            Group {
                id,
                name: name.into(),
                created_op: ctx.op,
            },
        );
        Ok(Applied {
            created: Some(id),
            repeated: false,
            work: Vec::new(),
            effects: vec![Effect::GroupCreated {
                group: (s, t, id),
                incarnation: ctx.op,
            }],
        })
    }

    fn delete_group(&mut self, r: &DeleteConsumerGroupRequest) -> NodeResult<Applied> {
        let (s, t) = self.topic_ids(&r.stream_id, &r.topic_id)?;
        let g = self.group_id(s, t, &r.group_id)?;
        let topic = self.topic_mut(s, t);
        let group = topic.groups.remove(&g).expect("resolved");
        let work = topic
            .partitions
            .keys()
            .map(|&partition| DirWork::RemoveGroupOffsets {
                partition: (s, t, partition),
                group: g,
            })
            .collect();
        self.names.groups.remove(&(s, t, group.name));
        Ok(Applied {
            created: None,
            repeated: false,
            work,
            effects: vec![Effect::GroupDeleted {
                group: (s, t, g),
                incarnation: group.created_op,
            }],
        })
    }

    // Users -------------------------------------------------------------------------------

    fn check_username(&self, name: &str, except: Option<u32>) -> NodeResult<()> {
        check_name(name)?;
        if !(3..=50).contains(&name.len()) {
            return Err(NodeError::InvalidUsername("3 to 50 bytes".into()));
        }
        match self.names.users.get(name) {
            Some(id) if Some(*id) != except => Err(NodeError::UserExists(name.into())),
            _ => Ok(()),
        }
    }

    fn create_user(&mut self, r: &CreateUserRequest, ctx: OpContext) -> NodeResult<Applied> {
        let name = r.username.as_str();
        self.check_username(name, None)?;
        check_status(r.status)?;
        check_hash(&r.password)?;
        if let Some(permissions) = &r.permissions {
            check_permissions(self, permissions)?;
        }
        room_for(self.users.len(), Capacity::Users, MAX_USERS)?;
        let id = lowest_free(&self.users);
        self.names.users.insert(name.into(), id);
        self.users.insert(
            id,
            User {
                id,
                username: name.into(),
                password_hash: r.password.clone(),
                status: r.status,
                permissions: r.permissions.as_ref().map(|p| p.to_bytes().to_vec()),
                created_at: ctx.timestamp,
                created_op: ctx.op,
                tokens: Default::default(),
            },
        );
        Ok(Applied::created(id))
    }

    fn update_user(&mut self, r: &UpdateUserRequest) -> NodeResult<Applied> {
        let id = self.user_id(&r.user_id)?;
        if let Some(name) = &r.username {
            self.check_username(name.as_str(), Some(id))?;
        }
        if let Some(status) = r.status {
            check_status(status)?;
            if id == ROOT_USER_ID && status != USER_ACTIVE {
                return Err(NodeError::RootUser(RootAction::Deactivated));
            }
        }
        let user = self.users.get_mut(&id).expect("resolved");
        if let Some(name) = &r.username {
            self.names.users.remove(&user.username);
            self.names.users.insert(name.as_str().into(), id);
            user.username = name.as_str().into();
        }
        if let Some(status) = r.status {
            user.status = status;
        }
        Ok(Applied::effect(Effect::UserChanged { user: id }))
    }

    fn delete_user(&mut self, id: u32) -> Applied {
        let user = self.users.remove(&id).expect("resolved");
        self.names.users.remove(&user.username);
        for token in user.tokens.values() {
            self.names.tokens.remove(&token.hash);
        }
        Applied::effect(Effect::UserDeleted {
            user: id,
            incarnation: user.created_op,
        })
    }

    /// Sets a user's password hash. A `current_password` names the hash the caller's
    /// current password was verified against: the change lands only while the user still
    /// has it, never on a user who took the id meanwhile or changed it since. An empty one
    /// sets the hash unconditionally (an administrator's set; entries journaled before the
    /// check was).
    fn change_password(&mut self, r: &ChangePasswordRequest) -> NodeResult<Applied> {
        let id = self.user_id(&r.user_id)?;
        check_hash(&r.new_password)?;
        let user = self.users.get_mut(&id).expect("resolved");
        if !r.current_password.is_empty() && r.current_password != user.password_hash {
            return Err(NodeError::InvalidCredentials);
        }
        user.password_hash = r.new_password.clone();
        Ok(Applied::effect(Effect::UserChanged { user: id }))
    }

    fn update_permissions(&mut self, r: &UpdatePermissionsRequest) -> NodeResult<Applied> {
        let id = self.user_id(&r.user_id)?;
        if id == ROOT_USER_ID {
            return Err(NodeError::RootUser(RootAction::GivenPermissions));
        }
        if let Some(permissions) = &r.permissions {
            check_permissions(self, permissions)?;
        }
        self.users.get_mut(&id).expect("resolved").permissions =
            r.permissions.as_ref().map(|p| p.to_bytes().to_vec());
        Ok(Applied::effect(Effect::UserChanged { user: id }))
    }

    // Personal access tokens ----------------------------------------------------------------

    /// The user a token op is for: `id` as the incarnation `incarnation`, else not found (a
    /// token op for a user that is gone never lands on a later user of the same id).
    fn token_user(&self, id: u32, incarnation: u64) -> NodeResult<&User> {
        self.users
            .get(&id)
            .filter(|u| u.created_op == incarnation)
            .ok_or(NodeError::UserNotFound(Named::Id(id)))
    }

    fn create_token(&mut self, r: &CreateTokenOp, ctx: OpContext) -> NodeResult<Applied> {
        let user = self.token_user(r.user_id, r.incarnation)?;
        let name = r.name.as_str();
        check_token_name(name)?;
        // The limit before the name, in Iggy's order: a full user is told it is full.
        room_for(
            user.tokens.len(),
            Capacity::TokensOfUser,
            MAX_TOKENS_PER_USER,
        )
        .map_err(|_| NodeError::TooManyTokens {
            user: r.user_id,
            limit: MAX_TOKENS_PER_USER,
        })?;
        if user.tokens.contains_key(name) {
            return Err(NodeError::TokenExists {
                user: r.user_id,
                name: name.into(),
            });
        }
        let expiry_at = match TokenExpiry::from_wire(r.expiry) {
            TokenExpiry::Never => None,
            TokenExpiry::After(micros) => Some(
                ctx.timestamp
                    .checked_add(micros)
                    .ok_or(NodeError::InvalidTokenExpiry(micros))?,
            ),
        };
        if self.names.tokens.contains_key(&r.hash) {
            // 50 random bytes never repeat; a journal that says otherwise is refused rather
            // than letting one hash log in as two tokens.
            return Err(NodeError::InvalidRequest(
                "a personal access token with this hash exists".into(),
            ));
        }
        self.names
            .tokens
            .insert(r.hash, (r.user_id, name.to_owned()));
        self.users
            .get_mut(&r.user_id)
            .expect("resolved")
            .tokens
            .insert(
                name.to_owned(),
                Token {
                    hash: r.hash,
                    expiry_at,
                    created_at: ctx.timestamp,
                },
            );
        Ok(Applied::default())
    }

    fn delete_token(&mut self, r: &DeleteTokenOp) -> NodeResult<Applied> {
        self.token_user(r.user_id, r.incarnation)?;
        let user = self.users.get_mut(&r.user_id).expect("resolved");
        let Some(token) = user.tokens.remove(r.name.as_str()) else {
            return Err(NodeError::TokenNotFound {
                user: r.user_id,
                name: r.name.as_str().into(),
            });
        };
        self.names.tokens.remove(&token.hash);
        Ok(Applied::effect(Effect::UserChanged { user: r.user_id }))
    }
}

/// A token's name: Iggy's 3 to 30 bytes, and a name like any other.
fn check_token_name(name: &str) -> NodeResult<()> {
    if !(MIN_TOKEN_NAME_LEN..=MAX_TOKEN_NAME_LEN).contains(&name.len()) || check_name(name).is_err()
    {
        return Err(NodeError::InvalidTokenName(name.into()));
    }
    Ok(())
}

/// The effects of deleting every group of a topic (with the topic or its stream).
fn group_deletions(stream: u32, topic: &Topic) -> Vec<Effect> {
    topic
        .groups
        .values()
        .map(|g| Effect::GroupDeleted {
            group: (stream, topic.id, g.id),
            incarnation: g.created_op,
        })
        .collect()
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

fn check_status(status: u8) -> NodeResult<()> {
    if status != USER_ACTIVE && status != USER_INACTIVE {
        return Err(NodeError::InvalidUserStatus(status));
    }
    Ok(())
}

/// A journaled password is its hash: a PHC string that fits the wire's password field.
fn check_hash(hash: &str) -> NodeResult<()> {
    if hash.is_empty() || hash.len() > MAX_PASSWORD_HASH_LEN || !hash.starts_with('$') {
        return Err(NodeError::InvalidPassword(
            "a journaled password is an argon2 PHC string of at most 255 bytes".into(),
        ));
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

/// One more of `what` fits under its limit.
fn room_for(held: usize, what: Capacity, limit: usize) -> NodeResult<()> {
    if held >= limit {
        return Err(NodeError::TooMany { what, limit });
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests;

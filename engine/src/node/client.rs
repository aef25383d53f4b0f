//! The node's client façade: [`Client`], the handle every caller (a server connection, a
//! simulated client, a test) holds. It resolves names against the published view, turns a
//! call into a request for the owner that serves it (metadata ops for the metadata owner,
//! sends, polls and offsets for the partition's shard, memberships for the groups owner),
//! bounds the caller's requests in flight, and waits for the one-shot answer.

mod offsets;

use super::auth::{token_login, Login};
use super::groups::GroupRequest;
use super::meta_owner::{MetaReply, OpRequest, OwnerRequest};
use super::shard::ShardRequest;
use super::view::MetaView;
use super::{
    Deletion, Dispatched, Executed, Node, NodeError, NodeResult, PartitionInfo, PartitionKey,
    ReadAnswer, ReadElsewhere, Sent, MAX_BALANCED_CURSORS,
};
use crate::env::chan::{oneshot, Pending, Reply, Semaphore};
use crate::metadata::journal::Origin;
use crate::partition::{ConsumerId, PartitionError, PollFrom, Polled};
use crate::state::ops::MetaOp;
use crate::state::tokens::{self, CreateTokenOp, DeleteTokenOp, TokenExpiry};
use bytes::BytesMut;
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest,
};
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
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
use iggy_binary_protocol::{
    WireConsumer, WireIdentifier, WireName, WireOptions, WirePartitioning, WirePermissions,
    KIND_CONSUMER, KIND_CONSUMER_GROUP,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One caller of the node: a connection, a simulated client, a test.
#[derive(Clone)]
pub struct Client {
    node: Node,
    id: u128,
    permits: Semaphore,
    request: Arc<AtomicU64>,
}

impl Client {
    /// A caller of `node` with client id `id`; see [`Node::client`].
    pub(super) fn new(node: Node, id: u128) -> Client {
        let permits = Semaphore::new(node.inner.settings.limits.in_flight_per_client.max(1));
        Client {
            node,
            id,
            permits,
            request: Arc::new(AtomicU64::new(0)),
        }
    }
}

fn name(text: &str) -> NodeResult<WireName> {
    WireName::new(text).map_err(|e| NodeError::InvalidName {
        name: text.into(),
        why: e.to_string(),
    })
}

impl Client {
    pub fn id(&self) -> u128 {
        self.id
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    pub fn view(&self) -> Arc<MetaView> {
        self.node.view()
    }

    fn origin(&self, user_id: u32) -> Origin {
        Origin {
            timestamp: 0,
            user_id,
            client: self.id,
            request: self.request.fetch_add(1, Ordering::Relaxed) + 1,
            ..Origin::default()
        }
    }

    // Metadata ------------------------------------------------------------------------------

    /// Journals and applies `op` (batched with other callers' ops); answered once the op is
    /// durable, its directory work done and the view that holds it published.
    pub async fn execute(&self, op: MetaOp) -> NodeResult<Executed> {
        let reply = self.execute_by(op, 0).await?;
        let op = reply.at_op;
        reply.result.map(|applied| Executed { op, applied })
    }

    /// [`Self::execute_as`], also telling where a refused op was checked (for the
    /// simulator's oracle, which replays the journal order).
    pub async fn execute_traced(&self, op: MetaOp, user_id: u32) -> NodeResult<MetaReply> {
        self.execute_by(op, user_id).await
    }

    /// [`Self::execute`] on behalf of `user_id` (the journal entry names who asked).
    pub async fn execute_as(&self, op: MetaOp, user_id: u32) -> NodeResult<Executed> {
        let reply = self.execute_by(op, user_id).await?;
        let op = reply.at_op;
        reply.result.map(|applied| Executed { op, applied })
    }

    async fn execute_by(&self, op: MetaOp, user_id: u32) -> NodeResult<MetaReply> {
        let _permit = self.permits.acquire().await;
        self.node.check_running()?;
        if self.node.clustered() {
            return self.node.decider()?.decide(op, self.origin(user_id)).await;
        }
        if let MetaOp::CreateTopic(r) = &op {
            // Before the journal: a single node keeps one copy (`single_copy`).
            use crate::state::options::{for_create, single_copy};
            single_copy(&for_create(&r.options)?)?;
        }
        let (reply, pending) = oneshot();
        let request = OpRequest {
            op,
            origin: self.origin(user_id),
            reply,
        };
        self.node
            .enqueue(&self.node.inner.meta, OwnerRequest::Op(request))
            .await?;
        self.node.answer(pending).await
    }

    async fn created(&self, op: MetaOp) -> NodeResult<u32> {
        Ok(self
            .execute(op)
            .await?
            .applied
            .created
            .expect("a create returns its id"))
    }

    pub async fn create_stream(&self, stream_name: &str) -> NodeResult<u32> {
        self.created(MetaOp::CreateStream(CreateStreamRequest {
            name: name(stream_name)?,
            options: WireOptions::empty(),
        }))
        .await
    }

    pub async fn update_stream(&self, stream: &WireIdentifier, new_name: &str) -> NodeResult<()> {
        self.execute(MetaOp::UpdateStream(UpdateStreamRequest {
            stream_id: stream.clone(),
            name: name(new_name)?,
            options: WireOptions::empty(),
        }))
        .await
        .map(|_| ())
    }

    pub async fn delete_stream(&self, stream: &WireIdentifier) -> NodeResult<()> {
        self.execute(MetaOp::DeleteStream(DeleteStreamRequest {
            stream_id: stream.clone(),
        }))
        .await
        .map(|_| ())
    }

    pub async fn purge_stream(&self, stream: &WireIdentifier) -> NodeResult<()> {
        self.execute(MetaOp::PurgeStream(PurgeStreamRequest {
            stream_id: stream.clone(),
        }))
        .await
        .map(|_| ())
    }

    pub async fn create_topic(
        &self,
        stream: &WireIdentifier,
        topic_name: &str,
        partitions_count: u32,
        options: WireOptions,
    ) -> NodeResult<u32> {
        self.created(MetaOp::CreateTopic(CreateTopicRequest {
            stream_id: stream.clone(),
            partitions_count,
            name: name(topic_name)?,
            options,
        }))
        .await
    }

    pub async fn update_topic(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        new_name: &str,
        options: WireOptions,
    ) -> NodeResult<()> {
        self.execute(MetaOp::UpdateTopic(UpdateTopicRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            name: name(new_name)?,
            options,
        }))
        .await
        .map(|_| ())
    }

    pub async fn delete_topic(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> NodeResult<()> {
        self.execute(MetaOp::DeleteTopic(DeleteTopicRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
        }))
        .await
        .map(|_| ())
    }

    pub async fn purge_topic(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> NodeResult<()> {
        self.execute(MetaOp::PurgeTopic(PurgeTopicRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
        }))
        .await
        .map(|_| ())
    }

    pub async fn create_partitions(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        count: u32,
    ) -> NodeResult<()> {
        self.execute(MetaOp::CreatePartitions(CreatePartitionsRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partitions_count: count,
        }))
        .await
        .map(|_| ())
    }

    pub async fn delete_partitions(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        count: u32,
    ) -> NodeResult<()> {
        self.execute(MetaOp::DeletePartitions(DeletePartitionsRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partitions_count: count,
        }))
        .await
        .map(|_| ())
    }

    pub async fn create_group(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group_name: &str,
    ) -> NodeResult<u32> {
        self.created(MetaOp::CreateConsumerGroup(CreateConsumerGroupRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            name: name(group_name)?,
        }))
        .await
    }

    pub async fn delete_group(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<()> {
        self.execute(MetaOp::DeleteConsumerGroup(DeleteConsumerGroupRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            group_id: group.clone(),
        }))
        .await
        .map(|_| ())
    }

    // Users -------------------------------------------------------------------------------

    /// A PHC hash of `password` (argon2id, on the blocking pool): what a `CreateUser` or
    /// `ChangePassword` op journals in place of the password.
    pub async fn hash_password(&self, password: &str) -> NodeResult<String> {
        self.node
            .inner
            .auth
            .hash(&self.node.inner.env, password)
            .await
    }

    /// Creates a user; the password is hashed on the blocking pool first.
    pub async fn create_user(
        &self,
        username: &str,
        password: &str,
        status: u8,
        permissions: Option<WirePermissions>,
    ) -> NodeResult<u32> {
        let hash = self
            .node
            .inner
            .auth
            .hash(&self.node.inner.env, password)
            .await?;
        self.created(MetaOp::CreateUser(CreateUserRequest {
            username: name(username)?,
            password: hash,
            status,
            permissions,
            options: WireOptions::empty(),
        }))
        .await
    }

    pub async fn update_user(
        &self,
        user: &WireIdentifier,
        username: Option<&str>,
        status: Option<u8>,
    ) -> NodeResult<()> {
        self.execute(MetaOp::UpdateUser(UpdateUserRequest {
            user_id: user.clone(),
            username: username.map(name).transpose()?,
            status,
            options: WireOptions::empty(),
        }))
        .await
        .map(|_| ())
    }

    pub async fn update_permissions(
        &self,
        user: &WireIdentifier,
        permissions: Option<WirePermissions>,
    ) -> NodeResult<()> {
        self.execute(MetaOp::UpdatePermissions(UpdatePermissionsRequest {
            user_id: user.clone(),
            permissions,
        }))
        .await
        .map(|_| ())
    }

    pub async fn delete_user(&self, user: &WireIdentifier) -> NodeResult<()> {
        self.execute(MetaOp::DeleteUser(DeleteUserRequest {
            user_id: user.clone(),
        }))
        .await
        .map(|_| ())
    }

    /// Changes `user`'s password after checking `current` (both hashes on the pool).
    pub async fn change_password(
        &self,
        user: &WireIdentifier,
        current: &str,
        new: &str,
    ) -> NodeResult<()> {
        let view = self.view();
        let id = view.user_id(user)?;
        let username = view.user(id).expect("resolved").username.clone();
        let checked = self.login(&username, current).await?;
        if checked.user_id != id {
            // Renamed while the password was checked: the password verified is another
            // user's than the one the request named (and was authorized for).
            return Err(NodeError::InvalidCredentials);
        }
        let hash = self.node.inner.auth.hash(&self.node.inner.env, new).await?;
        // The op names the hash `current` was verified against: it applies only to that
        // user while it still has that password (review S13).
        self.execute(MetaOp::ChangePassword(ChangePasswordRequest {
            user_id: WireIdentifier::numeric(checked.user_id),
            current_password: checked.password_hash,
            new_password: hash,
        }))
        .await
        .map(|_| ())
    }

    /// Checks a username and password (on the blocking pool). An unknown user and a wrong
    /// password get the same answer after the same work; an inactive user is refused.
    pub async fn login(&self, username: &str, password: &str) -> NodeResult<Login> {
        let _permit = self.permits.acquire().await;
        self.node.check_running()?;
        self.node
            .inner
            .auth
            .login(
                &self.node.inner.env,
                &self.node.inner.view,
                &self.node.inner.stats,
                username,
                password,
            )
            .await
    }

    // Personal access tokens ------------------------------------------------------------

    /// Creates a personal access token named `name` for `user` (the incarnation it names:
    /// never a later user of the same id) and returns the raw token, which exists nowhere
    /// else: it is drawn from the environment's entropy and only its hash is journaled.
    pub async fn create_personal_access_token(
        &self,
        user: Login,
        token_name: &str,
        expiry: TokenExpiry,
    ) -> NodeResult<String> {
        if expiry == TokenExpiry::After(0) {
            return Err(NodeError::InvalidTokenExpiry(0));
        }
        let name = WireName::new(token_name)
            .map_err(|_| NodeError::InvalidTokenName(token_name.into()))?;
        let entropy = &self.node.inner.env.entropy;
        let (raw, hash) = tokens::mint(|| entropy.next_u64());
        self.execute_as(
            MetaOp::CreatePersonalAccessToken(CreateTokenOp {
                user_id: user.user_id,
                incarnation: user.incarnation,
                name,
                expiry: expiry.to_wire(),
                hash,
            }),
            user.user_id,
        )
        .await?;
        Ok(raw)
    }

    /// Deletes `user`'s token `name` (sessions that logged in with it lose access at their
    /// next request).
    pub async fn delete_personal_access_token(
        &self,
        user: Login,
        token_name: &str,
    ) -> NodeResult<()> {
        let name = WireName::new(token_name).map_err(|_| NodeError::TokenNotFound {
            user: user.user_id,
            name: token_name.into(),
        })?;
        self.execute_as(
            MetaOp::DeletePersonalAccessToken(DeleteTokenOp {
                user_id: user.user_id,
                incarnation: user.incarnation,
                name,
            }),
            user.user_id,
        )
        .await
        .map(|_| ())
    }

    /// Logs in with a raw personal access token: the same [`Login`] a password gives.
    /// Refuses a token nobody holds, one past its expiry (by the environment's wall clock)
    /// and one whose user is inactive.
    pub async fn login_with_token(&self, raw: &str) -> NodeResult<Login> {
        let _permit = self.permits.acquire().await;
        self.node.check_running()?;
        token_login(&self.view(), raw, self.node.inner.env.clock.wall_micros())
    }

    // Messages ----------------------------------------------------------------------------

    fn resolve_partition(
        &self,
        view: &MetaView,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partitioning: &WirePartitioning,
    ) -> NodeResult<PartitionKey> {
        let (s, t) = view.topic_ids(stream, topic)?;
        let count = view.topic(s, t).partitions.len() as u32;
        let missing = |p| NodeError::PartitionNotFound {
            stream: s,
            topic: t,
            partition: p,
        };
        if count == 0 {
            return Err(missing(0));
        }
        let p = match partitioning {
            WirePartitioning::PartitionId(p) => *p,
            WirePartitioning::Balanced => {
                let mut cursors = self
                    .node
                    .inner
                    .balanced
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if cursors.len() >= MAX_BALANCED_CURSORS {
                    cursors.retain(|(s, t), _| view.find_topic(*s, *t).is_some());
                }
                let cursor = cursors.entry((s, t)).or_default();
                let p = *cursor % count;
                *cursor = cursor.wrapping_add(1);
                p
            }
            WirePartitioning::MessagesKey(key) => xxhash_rust::xxh32::xxh32(key, 0) % count,
        };
        if p >= count {
            return Err(missing(p));
        }
        Ok((s, t, p))
    }

    /// Appends a batch (as a producer sends it) to the partition `partitioning` picks; the
    /// answer comes once the batch is complete under the topic's durability policy.
    pub async fn send(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partitioning: &WirePartitioning,
        batch: BytesMut,
    ) -> NodeResult<Sent> {
        let _permit = self.permits.acquire().await;
        self.node.check_running()?;
        let view = self.view();
        let key = self.resolve_partition(&view, stream, topic, partitioning)?;
        if let Some(replicator) = self.node.replicator()? {
            return replicator.replicate(replica_of(&view, key)?, batch).await;
        }
        let pending = self.queue_send(key, batch).await?;
        self.node.answer(pending).await?
    }

    /// Puts a send in its partition's owner's inbox (waiting for room).
    async fn queue_send(
        &self,
        key: PartitionKey,
        batch: BytesMut,
    ) -> NodeResult<Pending<NodeResult<Sent>>> {
        let (reply, pending) = oneshot();
        let request = ShardRequest::Send {
            key,
            batch,
            ticket: self.node.ticket(),
            reply,
        };
        self.node.enqueue(self.node.shard(key), request).await?;
        Ok(pending)
    }

    /// Queues a batch as [`Client::send`] does, without waiting for its outcome: `Ok` once
    /// that partition's owner holds the batch in its bounded inbox (HTTP's `ack=none`,
    /// "dispatch accepted"), with the partition and the outcome to come. The owner appends
    /// it in queue order like any send. Refused here: the topic or partition missing, a
    /// stopped node, a partition fenced now (asked of its owner first, so a fence known
    /// before the queue is never answered as accepted).
    pub async fn dispatch(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partitioning: &WirePartitioning,
        batch: BytesMut,
    ) -> NodeResult<(u32, Dispatched)> {
        let _permit = self.permits.acquire().await;
        self.node.check_running()?;
        let view = self.view();
        let key = self.resolve_partition(&view, stream, topic, partitioning)?;
        // A copy this member keeps may be fenced; another member's is its own group's.
        let here = self.node.reads_elsewhere(&view, key).is_none();
        let fenced = match here {
            true => self.partition_info(key).await?.and_then(|info| info.fence),
            false => None,
        };
        if let Some(fence) = fenced {
            return Err(NodeError::Partition(PartitionError::Fenced(fence)));
        }
        let pending = match self.node.replicator()? {
            Some(replicator) => {
                // The group orders it; its outcome comes as a queued send's would.
                let (reply, pending) = oneshot();
                let sent = replicator.replicate(replica_of(&view, key)?, batch);
                let task = async move { reply.send(sent.await) };
                drop(self.node.env().tasks.spawn(Box::pin(task)));
                pending
            }
            None => self.queue_send(key, batch).await?,
        };
        Ok((
            key.2,
            Dispatched {
                pending,
                node: self.node.clone(),
            },
        ))
    }

    /// The partition offsets are kept in for `consumer`, and its id there. A numeric
    /// consumer id is itself; a named one is XxHash32 of the name (as Iggy does).
    fn consumer_id(
        view: &MetaView,
        consumer: &WireConsumer,
        s: u32,
        t: u32,
    ) -> NodeResult<ConsumerId> {
        match consumer.kind {
            KIND_CONSUMER => Ok(ConsumerId::consumer(match &consumer.id {
                WireIdentifier::Numeric(id) => *id,
                WireIdentifier::String(name) => {
                    xxhash_rust::xxh32::xxh32(name.as_str().as_bytes(), 0)
                }
            })),
            KIND_CONSUMER_GROUP => Ok(ConsumerId::group(view.group_id(s, t, &consumer.id)?)),
            kind => Err(NodeError::InvalidRequest(format!("consumer kind {kind}"))),
        }
    }

    async fn ask_groups<T>(&self, request: GroupRequest, pending: Pending<T>) -> NodeResult<T> {
        self.node.enqueue(&self.node.inner.groups, request).await?;
        self.node.answer(pending).await
    }

    /// Which partition a poll reads: a consumer's named one (default 0); a group member's
    /// named one if it owns it, else the next of its partitions in round-robin (`None` when
    /// it holds none).
    async fn poll_partition(
        &self,
        view: &MetaView,
        consumer: &WireConsumer,
        s: u32,
        t: u32,
        partition: Option<u32>,
    ) -> NodeResult<Option<u32>> {
        if consumer.kind != KIND_CONSUMER_GROUP {
            return Ok(Some(partition.unwrap_or(0)));
        }
        let g = view.group_id(s, t, &consumer.id)?;
        let (reply, pending) = oneshot();
        let request = GroupRequest::Poll {
            key: (s, t, g),
            client: self.id,
            partition,
            reply,
        };
        self.ask_groups(request, pending).await?
    }

    /// Polls messages. `None` when a group member holds no partition.
    pub async fn poll(&self, request: &PollMessagesRequest) -> NodeResult<Option<Polled>> {
        self.poll_within(request, u64::MAX).await
    }

    /// [`Client::poll`], the reply carrying at most `max_bytes` of batches (a first batch
    /// always whole).
    pub async fn poll_within(
        &self,
        request: &PollMessagesRequest,
        max_bytes: u64,
    ) -> NodeResult<Option<Polled>> {
        let _permit = self.permits.acquire().await;
        self.node.check_running()?;
        let view = self.view();
        let (s, t) = view.topic_ids(&request.stream_id, &request.topic_id)?;
        let consumer_id = Self::consumer_id(&view, &request.consumer, s, t)?;
        let Some(p) = self
            .poll_partition(&view, &request.consumer, s, t, request.partition_id)
            .await?
        else {
            return Ok(None);
        };
        let strategy = &request.strategy;
        let from = match strategy.kind {
            1 => PollFrom::Offset(strategy.value),
            2 => PollFrom::Timestamp(strategy.value),
            3 => PollFrom::First,
            4 => PollFrom::Last,
            5 => PollFrom::Next(consumer_id),
            kind => {
                return Err(NodeError::InvalidRequest(format!(
                    "polling strategy {kind}"
                )))
            }
        };
        let key = (s, t, p);
        // A cluster member's group orders the auto-commit after the poll read.
        let replicated = self.node.replicator()?.is_some();
        let commit = request.auto_commit.then_some(consumer_id);
        let (polled, last) =
            if let Some((replicator, identity)) = self.node.reads_elsewhere(&view, key) {
                let read = ReadElsewhere::Poll {
                    from,
                    count: request.count,
                    max_bytes,
                };
                match replicator.read_elsewhere(identity, read).await? {
                    ReadAnswer::Polled(polled) => (polled, None),
                    other => return Err(unexpected_read(other)),
                }
            } else {
                let local = commit.filter(|_| !replicated).map(|c| (c, view.op));
                let read = (from, request.count, max_bytes);
                self.node.poll_owner(key, read, local).await?
            };
        if let (true, Some(consumer)) = (replicated, commit) {
            // A reply read elsewhere says its last offset in its last batch only.
            if let Some(last) = last.or_else(|| super::shard::last_offset(&polled)) {
                if let Some(ordered) = self.order_offset(&view, key, consumer, Some(last))? {
                    ordered.await?;
                }
            }
        }
        Ok(Some(polled))
    }

    /// Deletes the `count` oldest sealed segments of a partition (`DeleteSegments`); the
    /// active segment is never deleted.
    pub async fn delete_segments(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: u32,
        count: u32,
    ) -> NodeResult<Vec<Deletion>> {
        let _permit = self.permits.acquire().await;
        self.node.check_running()?;
        let (s, t) = self.view().topic_ids(stream, topic)?;
        let key = (s, t, partition);
        let (reply, pending) = oneshot();
        let request = ShardRequest::DeleteSegments { key, count, reply };
        self.ask_shard(key, request, pending).await
    }

    /// A partition's numbers (`None` when the node has no such partition), read where a
    /// copy is kept.
    pub async fn partition_info(&self, key: PartitionKey) -> NodeResult<Option<PartitionInfo>> {
        if let Some((replicator, identity)) = self.node.reads_elsewhere(&self.view(), key) {
            return match replicator
                .read_elsewhere(identity, ReadElsewhere::Numbers)
                .await?
            {
                ReadAnswer::Numbers(numbers) => Ok(numbers),
                other => Err(unexpected_read(other)),
            };
        }
        self.local_partition_info(key).await
    }

    /// The numbers of this member's own copy of a partition (`None` when the node has no
    /// such partition), wherever the cluster keeps its copies: what a replica's group
    /// reads of it.
    pub async fn local_partition_info(
        &self,
        key: PartitionKey,
    ) -> NodeResult<Option<PartitionInfo>> {
        let (reply, pending) = oneshot();
        self.node
            .enqueue(self.node.shard(key), ShardRequest::Inspect { key, reply })
            .await?;
        self.node.answer(pending).await
    }

    // Consumer groups ---------------------------------------------------------------------

    fn group_key(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<(u32, u32, u32)> {
        let view = self.view();
        let (s, t) = view.topic_ids(stream, topic)?;
        let g = view.group_id(s, t, group)?;
        Ok((s, t, g))
    }

    /// This client joins the group (a no-op for a member).
    pub async fn join_group(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<()> {
        self.change_membership(stream, topic, group, |key, client, reply| {
            GroupRequest::Join { key, client, reply }
        })
        .await
    }

    pub async fn leave_group(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<()> {
        self.change_membership(stream, topic, group, |key, client, reply| {
            GroupRequest::Leave { key, client, reply }
        })
        .await
    }

    /// A join or a leave of this client, as `request` builds it from the group's key.
    async fn change_membership(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
        request: impl FnOnce((u32, u32, u32), u128, Reply<NodeResult<()>>) -> GroupRequest,
    ) -> NodeResult<()> {
        self.node.check_running()?;
        let key = self.group_key(stream, topic, group)?;
        let (reply, pending) = oneshot();
        self.ask_groups(request(key, self.id, reply), pending)
            .await?
    }

    /// The session ended: this client leaves every group, releasing its partitions. Returns
    /// how many groups it left.
    pub async fn disconnect(&self) -> NodeResult<usize> {
        let (reply, pending) = oneshot();
        let request = GroupRequest::Disconnect {
            client: self.id,
            reply,
        };
        self.ask_groups(request, pending).await
    }

    /// This member's generation and partitions (`SyncConsumerGroup`).
    pub async fn group_assignment(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<(u64, Vec<u32>)> {
        let key = self.group_key(stream, topic, group)?;
        let (reply, pending) = oneshot();
        let request = GroupRequest::Assignment {
            key,
            client: self.id,
            reply,
        };
        self.ask_groups(request, pending).await?
    }

    /// Every member of a group and its partitions.
    pub async fn group_members(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<Vec<(u128, Vec<u32>)>> {
        let key = self.group_key(stream, topic, group)?;
        let (reply, pending) = oneshot();
        let request = GroupRequest::Members { key, reply };
        self.ask_groups(request, pending).await?
    }
}

/// The identity of partition `key` in `view` (a replica group's name for it).
/// A member that keeps a copy answered another read than the one asked.
pub(super) fn unexpected_read(answer: ReadAnswer) -> NodeError {
    NodeError::Undecided(format!(
        "the member that keeps the partition answered another read: {answer:?}"
    ))
}

fn replica_of(
    view: &MetaView,
    key: PartitionKey,
) -> NodeResult<crate::partition::PartitionIdentity> {
    view.partition(key).ok_or(NodeError::PartitionNotFound {
        stream: key.0,
        topic: key.1,
        partition: key.2,
    })
}

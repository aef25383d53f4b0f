//! A node on real files for tests that are not async themselves: each call is the node's
//! client call, waited for on the test's thread ([`block_on`]). One caller (client id 1)
//! unless a test asks for another ([`TestNode::as_client`]).

use bytes::BytesMut;
use cairn_engine::env::real::block_on;
use cairn_engine::env::Env;
use cairn_engine::metadata::MetaPlan;
use cairn_engine::node::{
    BootError, BootReport, Client, Deletion, Login, MetaView, Node, NodeResult, NodeSettings,
    PartitionInfo, PartitionKey, Sent, TokenExpiry,
};
use cairn_engine::partition::Polled;
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_binary_protocol::{
    WireConsumer, WireIdentifier, WireOptions, WirePartitioning, WirePermissions,
    WirePollingStrategy,
};
use std::path::Path;
use std::sync::Arc;

/// A booted node and what boot found.
pub struct Booted {
    pub node: TestNode,
    pub plan: MetaPlan,
    pub report: BootReport,
}

/// Boots the node under `root` with `settings` on `env`.
pub fn start(env: &Env, root: &Path, settings: NodeSettings) -> Result<Booted, BootError> {
    let booted = block_on(Node::start(env, root, settings))?;
    Ok(Booted {
        node: TestNode::new(booted.node),
        plan: booted.plan,
        report: booted.report,
    })
}

#[derive(Clone)]
pub struct TestNode {
    pub node: Node,
    pub client: Client,
}

impl TestNode {
    pub fn new(node: Node) -> TestNode {
        TestNode {
            client: node.client(1),
            node,
        }
    }

    /// The same node, called by client `id`.
    pub fn as_client(&self, id: u128) -> TestNode {
        TestNode {
            client: self.node.client(id),
            node: self.node.clone(),
        }
    }

    pub fn view(&self) -> Arc<MetaView> {
        self.node.view()
    }

    pub fn root(&self) -> &Path {
        self.node.root()
    }

    pub fn last_op(&self) -> u64 {
        self.node.view().op
    }

    pub fn cluster(&self) -> u128 {
        self.node.cluster()
    }

    /// A crash: every owner stops at its next wait, nothing is flushed.
    pub fn halt(self) {
        block_on(self.node.halt());
    }

    /// Graceful shutdown: everything committed is flushed and synced.
    pub fn close(self) -> NodeResult<()> {
        block_on(self.node.shutdown())
    }

    pub fn clean(&self, now: Option<u64>) -> NodeResult<Vec<Deletion>> {
        block_on(self.node.clean(now))
    }

    pub fn info(&self, key: PartitionKey) -> Option<PartitionInfo> {
        block_on(self.client.partition_info(key)).expect("inspect")
    }

    pub fn create_stream(&self, name: &str) -> NodeResult<u32> {
        block_on(self.client.create_stream(name))
    }

    pub fn update_stream(&self, stream: &WireIdentifier, name: &str) -> NodeResult<()> {
        block_on(self.client.update_stream(stream, name))
    }

    pub fn delete_stream(&self, stream: &WireIdentifier) -> NodeResult<()> {
        block_on(self.client.delete_stream(stream))
    }

    pub fn purge_stream(&self, stream: &WireIdentifier) -> NodeResult<()> {
        block_on(self.client.purge_stream(stream))
    }

    pub fn create_topic(
        &self,
        stream: &WireIdentifier,
        name: &str,
        partitions: u32,
        options: WireOptions,
    ) -> NodeResult<u32> {
        block_on(self.client.create_topic(stream, name, partitions, options))
    }

    pub fn update_topic(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        name: &str,
        options: WireOptions,
    ) -> NodeResult<()> {
        block_on(self.client.update_topic(stream, topic, name, options))
    }

    pub fn delete_topic(&self, stream: &WireIdentifier, topic: &WireIdentifier) -> NodeResult<()> {
        block_on(self.client.delete_topic(stream, topic))
    }

    pub fn purge_topic(&self, stream: &WireIdentifier, topic: &WireIdentifier) -> NodeResult<()> {
        block_on(self.client.purge_topic(stream, topic))
    }

    pub fn create_partitions(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        count: u32,
    ) -> NodeResult<()> {
        block_on(self.client.create_partitions(stream, topic, count))
    }

    pub fn delete_partitions(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        count: u32,
    ) -> NodeResult<()> {
        block_on(self.client.delete_partitions(stream, topic, count))
    }

    pub fn create_group(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        name: &str,
    ) -> NodeResult<u32> {
        block_on(self.client.create_group(stream, topic, name))
    }

    pub fn delete_group(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<()> {
        block_on(self.client.delete_group(stream, topic, group))
    }

    pub fn create_user(
        &self,
        username: &str,
        password: &str,
        status: u8,
        permissions: Option<WirePermissions>,
    ) -> NodeResult<u32> {
        block_on(
            self.client
                .create_user(username, password, status, permissions),
        )
    }

    pub fn update_user(
        &self,
        user: &WireIdentifier,
        username: Option<&str>,
        status: Option<u8>,
    ) -> NodeResult<()> {
        block_on(self.client.update_user(user, username, status))
    }

    pub fn delete_user(&self, user: &WireIdentifier) -> NodeResult<()> {
        block_on(self.client.delete_user(user))
    }

    pub fn change_password(
        &self,
        user: &WireIdentifier,
        current: &str,
        new: &str,
    ) -> NodeResult<()> {
        block_on(self.client.change_password(user, current, new))
    }

    pub fn login(&self, username: &str, password: &str) -> NodeResult<Login> {
        block_on(self.client.login(username, password))
    }

    pub fn create_token(
        &self,
        user: &Login,
        name: &str,
        expiry: TokenExpiry,
    ) -> NodeResult<String> {
        block_on(
            self.client
                .create_personal_access_token(user.clone(), name, expiry),
        )
    }

    pub fn delete_token(&self, user: &Login, name: &str) -> NodeResult<()> {
        block_on(self.client.delete_personal_access_token(user.clone(), name))
    }

    pub fn login_with_token(&self, raw: &str) -> NodeResult<Login> {
        block_on(self.client.login_with_token(raw))
    }

    pub fn send(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partitioning: &WirePartitioning,
        batch: BytesMut,
    ) -> NodeResult<Sent> {
        block_on(self.client.send(stream, topic, partitioning, batch))
    }

    /// Sends `batch` to partition `partition` of topic 0 in stream 0 (what
    /// [`node_with_topic`] makes); panics if the node refuses it.
    pub fn send_to(&self, partition: u32, batch: BytesMut) -> Sent {
        self.send(
            &id(0),
            &id(0),
            &WirePartitioning::PartitionId(partition),
            batch,
        )
        .expect("the send is accepted")
    }

    /// Polls topic 0 of stream 0 (what [`node_with_topic`] makes) as `consumer`; panics if
    /// the node refuses or no partition answers.
    pub fn poll_topic(
        &self,
        consumer: &WireConsumer,
        partition: Option<u32>,
        strategy: WirePollingStrategy,
        count: u32,
        auto_commit: bool,
    ) -> Polled {
        self.poll(
            consumer,
            &id(0),
            &id(0),
            partition,
            strategy,
            count,
            auto_commit,
        )
        .expect("the poll is served")
        .expect("a partition answers")
    }

    #[allow(clippy::too_many_arguments)]
    pub fn poll(
        &self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
        strategy: WirePollingStrategy,
        count: u32,
        auto_commit: bool,
    ) -> NodeResult<Option<Polled>> {
        block_on(self.client.poll(&PollMessagesRequest {
            consumer: consumer.clone(),
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partition_id: partition,
            strategy,
            count,
            auto_commit,
        }))
    }

    pub fn store_offset(
        &self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
        offset: u64,
    ) -> NodeResult<()> {
        block_on(
            self.client
                .store_offset(consumer, stream, topic, partition, offset),
        )
    }

    pub fn get_offset(
        &self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
    ) -> NodeResult<Option<u64>> {
        block_on(self.client.get_offset(consumer, stream, topic, partition))
    }

    pub fn delete_offset(
        &self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
    ) -> NodeResult<()> {
        block_on(
            self.client
                .delete_offset(consumer, stream, topic, partition),
        )
    }

    pub fn delete_segments(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: u32,
        count: u32,
    ) -> NodeResult<Vec<Deletion>> {
        block_on(self.client.delete_segments(stream, topic, partition, count))
    }

    pub fn join_group(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<()> {
        block_on(self.client.join_group(stream, topic, group))
    }

    pub fn leave_group(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<()> {
        block_on(self.client.leave_group(stream, topic, group))
    }

    pub fn disconnect(&self) -> NodeResult<usize> {
        block_on(self.client.disconnect())
    }

    pub fn group_assignment(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<(u64, Vec<u32>)> {
        block_on(self.client.group_assignment(stream, topic, group))
    }

    pub fn group_members(
        &self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> NodeResult<Vec<(u128, Vec<u32>)>> {
        block_on(self.client.group_members(stream, topic, group))
    }
}

/// Every message of partition `key`, polled through the node from its log start in pages.
pub fn read_node(node: &TestNode, key: PartitionKey) -> Vec<crate::Message> {
    let mut out: Vec<crate::Message> = Vec::new();
    let mut strategy = WirePollingStrategy { kind: 3, value: 0 };
    loop {
        let polled = node
            .poll(
                &WireConsumer::consumer(WireIdentifier::numeric(0)),
                &WireIdentifier::numeric(key.0),
                &WireIdentifier::numeric(key.1),
                Some(key.2),
                strategy.clone(),
                64,
                false,
            )
            .expect("poll")
            .expect("a consumer's poll has a partition");
        let before = out.len();
        out.extend(crate::messages(&polled.batches));
        if out.len() == before {
            return out;
        }
        strategy = WirePollingStrategy {
            kind: 1,
            value: out.last().expect("read").0 + 1,
        };
    }
}

/// A numeric stream, topic, group or consumer identifier.
pub fn id(n: u32) -> WireIdentifier {
    WireIdentifier::numeric(n)
}

/// A named identifier; panics if `s` is not a valid name.
pub fn named(s: &str) -> WireIdentifier {
    WireIdentifier::named(s).expect("a valid name")
}

/// A node booted under `root` holding stream `s` (id 0) with topic `t` (id 0) of
/// `partitions` partitions and `options`.
pub fn node_with_topic(root: &Path, partitions: u32, options: WireOptions) -> TestNode {
    let node = crate::boot(root).node;
    node.create_stream("s").unwrap();
    node.create_topic(&id(0), "t", partitions, options).unwrap();
    node
}

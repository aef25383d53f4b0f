//! A client's consumer offsets: stored, read and deleted in the partition's shard, or, on a
//! cluster member, ordered by the partition's group among its sends (`Replicator`).

use super::*;

impl Client {
    /// The partition and consumer an offset call means, and the view that named the
    /// consumer (its op for the shard's `retired` check; on a cluster member, the group's
    /// incarnation and the partition's). A group consumer without a partition id means the
    /// member's current partition (the one its last poll read), as in Iggy.
    pub(super) async fn offset_target(
        &self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
    ) -> NodeResult<(PartitionKey, ConsumerId, Arc<MetaView>)> {
        let view = self.view();
        let (s, t) = view.topic_ids(stream, topic)?;
        let id = Self::consumer_id(&view, consumer, s, t)?;
        let p = match (partition, consumer.kind) {
            (Some(p), _) => p,
            (None, KIND_CONSUMER_GROUP) => {
                let (reply, pending) = oneshot();
                let request = GroupRequest::Current {
                    key: (s, t, id.id),
                    client: self.id,
                    reply,
                };
                self.ask_groups(request, pending).await??
            }
            (None, _) => 0,
        };
        Ok(((s, t, p), id, view))
    }

    /// The partition an offset call with these arguments means (a group member's current
    /// one when no partition is named).
    pub async fn offset_partition(
        &self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
    ) -> NodeResult<PartitionKey> {
        Ok(self
            .offset_target(consumer, stream, topic, partition)
            .await?
            .0)
    }

    pub(super) async fn ask_shard<T>(
        &self,
        key: PartitionKey,
        request: ShardRequest,
        pending: Pending<NodeResult<T>>,
    ) -> NodeResult<T> {
        self.node.enqueue(self.node.shard(key), request).await?;
        self.node.answer(pending).await?
    }

    pub async fn store_offset(
        &self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
        offset: u64,
    ) -> NodeResult<()> {
        let _permit = self.permits.acquire().await;
        self.node.check_running()?;
        let (key, consumer, view) = self
            .offset_target(consumer, stream, topic, partition)
            .await?;
        if let Some(ordered) = self.order_offset(&view, key, consumer, Some(offset))? {
            return ordered.await.map(|_| ());
        }
        let (reply, pending) = oneshot();
        let request = ShardRequest::StoreOffset {
            key,
            consumer,
            resolved_at: view.op,
            offset,
            reply,
        };
        self.ask_shard(key, request, pending).await
    }

    /// On a cluster member, `offset` stored (`None`: deleted) for `consumer` in partition
    /// `key` through the partition's group, to be awaited; `None` where the node stores
    /// offsets itself. `view` is the one that named the consumer: its group's incarnation
    /// and its partition's are the write's (ids are reused, and a purge makes another
    /// partition), never a later view's.
    pub(super) fn order_offset(
        &self,
        view: &MetaView,
        key: PartitionKey,
        consumer: ConsumerId,
        offset: Option<u64>,
    ) -> NodeResult<Option<super::super::OffsetOrdered>> {
        let Some(replicator) = self.node.replicator()? else {
            return Ok(None);
        };
        let made_at = match consumer.kind {
            crate::partition::ConsumerKind::Consumer => 0,
            crate::partition::ConsumerKind::Group => {
                view.find_topic(key.0, key.1)
                    .and_then(|t| t.groups.get(&consumer.id))
                    .ok_or(NodeError::GroupNotFound {
                        stream: key.0,
                        topic: key.1,
                        group: crate::error::Named::Id(consumer.id),
                    })?
                    .created_op
            }
        };
        let write = super::super::OffsetWrite {
            consumer,
            made_at,
            offset,
        };
        Ok(Some(replicator.order_offset(replica_of(view, key)?, write)))
    }

    pub async fn get_offset(
        &self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
    ) -> NodeResult<Option<u64>> {
        let _permit = self.permits.acquire().await;
        self.node.check_running()?;
        let (key, consumer, view) = self
            .offset_target(consumer, stream, topic, partition)
            .await?;
        if let Some((replicator, identity)) = self.node.reads_elsewhere(&view, key) {
            let read = super::ReadElsewhere::Offset(consumer);
            return match replicator.read_elsewhere(identity, read).await? {
                super::ReadAnswer::Offset(offset) => Ok(offset),
                other => Err(super::unexpected_read(other)),
            };
        }
        let (reply, pending) = oneshot();
        let request = ShardRequest::GetOffset {
            key,
            consumer,
            reply,
        };
        self.ask_shard(key, request, pending).await
    }

    pub async fn delete_offset(
        &self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition: Option<u32>,
    ) -> NodeResult<()> {
        let _permit = self.permits.acquire().await;
        self.node.check_running()?;
        let (key, consumer_id, view) = self
            .offset_target(consumer, stream, topic, partition)
            .await?;
        let found = match self.order_offset(&view, key, consumer_id, None)? {
            Some(ordered) => ordered.await?,
            None => {
                let (reply, pending) = oneshot();
                let request = ShardRequest::DeleteOffset {
                    key,
                    consumer: consumer_id,
                    reply,
                };
                self.ask_shard(key, request, pending).await?
            }
        };
        if !found {
            return Err(NodeError::OffsetNotFound(format!("{consumer_id:?}")));
        }
        Ok(())
    }
}

//! Typed calls: each encodes the codec's request type, sends it as its command code and
//! decodes the codec's response type. Single-object reads answer `None` for the empty
//! "not found" body (`docs/wire.md` §4.4); lists answer empty for an empty body.

use crate::client::{decode_exact, name, Client};
use crate::error::{ClientError, ProtocolError};
use bytes::{Bytes, BytesMut};
use cairn_engine::format::{BatchBuilder, BATCH_HEADER_LEN};
use iggy_binary_protocol::codes::*;
use iggy_binary_protocol::requests::consumer_groups::*;
use iggy_binary_protocol::requests::consumer_offsets::*;
use iggy_binary_protocol::requests::messages::{PollMessagesRequest, SendMessagesHeader};
use iggy_binary_protocol::requests::partitions::*;
use iggy_binary_protocol::requests::personal_access_tokens::{
    CreatePersonalAccessTokenRequest, DeletePersonalAccessTokenRequest,
    GetPersonalAccessTokensRequest,
};
use iggy_binary_protocol::requests::segments::*;
use iggy_binary_protocol::requests::streams::*;
use iggy_binary_protocol::requests::system::*;
use iggy_binary_protocol::requests::topics::*;
use iggy_binary_protocol::requests::users::*;
use iggy_binary_protocol::responses::clients::{
    ClientDetailsResponse, ClientResponse, GetClientsResponse,
};
use iggy_binary_protocol::responses::consumer_groups::{
    ConsumerGroupDetailsResponse, ConsumerGroupResponse, GetConsumerGroupsResponse,
    SyncConsumerGroupResponse,
};
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::responses::messages::poll_messages::{
    PollMessagesResponseHeader, PolledBatchesIterator,
};
use iggy_binary_protocol::responses::messages::SendMessagesResponse;
use iggy_binary_protocol::responses::personal_access_tokens::{
    GetPersonalAccessTokensResponse, PersonalAccessTokenResponse, RawPersonalAccessTokenResponse,
};
use iggy_binary_protocol::responses::streams::{
    GetStreamResponse, GetStreamsResponse, StreamResponse, TopicHeader,
};
use iggy_binary_protocol::responses::system::{ClusterMetadataResponse, StatsResponse};
use iggy_binary_protocol::responses::topics::{GetTopicResponse, GetTopicsResponse};
use iggy_binary_protocol::responses::users::{GetUsersResponse, UserDetailsResponse, UserResponse};
use iggy_binary_protocol::{
    AckLevel, WireConsumer, WireDecode, WireEncode, WireIdentifier, WireOptions, WirePartitioning,
    WirePermissions,
};

/// Bytes of the PollMessages reply header: `[partition_id:u32][current_offset:u64][count:u32]`.
pub const POLL_HEADER_LEN: usize = 16;

/// A PollMessages reply: its header and the batch records as the server sent them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polled {
    pub partition_id: u32,
    /// The partition's last offset.
    pub current_offset: u64,
    /// Messages in `records`, as the server counted them.
    pub count: u32,
    /// Zero or more batch records back to back (256-byte header + frames each).
    pub records: Bytes,
}

impl Polled {
    /// The messages of `records`: offset, id, timestamps, payload and user headers. Stops
    /// after the first record that does not decode (yielding its error).
    pub fn messages(&self) -> PolledBatchesIterator<'_> {
        PolledBatchesIterator::new(&self.records)
    }
}

/// One message to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outgoing<'a> {
    /// 0 lets the client mint a random nonzero id (as the SDK does).
    pub id: u128,
    pub payload: &'a [u8],
    /// Encoded user headers (TLV, `iggy_binary_protocol::encode_user_headers`), or empty.
    pub headers: &'a [u8],
}

impl Client {
    /// Ping (1): answered before login too.
    pub async fn ping(&mut self) -> Result<(), ClientError> {
        self.call(PING_CODE, &PingRequest).await.map(drop)
    }

    /// GetStats (10).
    pub async fn get_stats(&mut self) -> Result<StatsResponse, ClientError> {
        let payload = self.call(GET_STATS_CODE, &GetStatsRequest).await?;
        decode_exact("stats", &payload)
    }

    /// GetClusterMetadata (12).
    pub async fn get_cluster_metadata(&mut self) -> Result<ClusterMetadataResponse, ClientError> {
        let payload = self
            .call(GET_CLUSTER_METADATA_CODE, &GetClusterMetadataRequest)
            .await?;
        decode_exact("cluster.metadata", &payload)
    }

    /// GetMe (20): this connection's client.
    pub async fn get_me(&mut self) -> Result<ClientDetailsResponse, ClientError> {
        let payload = self.call(GET_ME_CODE, &GetMeRequest).await?;
        decode_exact("me", &payload)
    }

    /// GetClient (21).
    pub async fn get_client(
        &mut self,
        client_id: u32,
    ) -> Result<Option<ClientDetailsResponse>, ClientError> {
        let payload = self
            .call(GET_CLIENT_CODE, &GetClientRequest { client_id })
            .await?;
        decode_optional("client.get", &payload)
    }

    /// GetClients (22).
    pub async fn get_clients(&mut self) -> Result<Vec<ClientResponse>, ClientError> {
        let payload = self.call(GET_CLIENTS_CODE, &GetClientsRequest).await?;
        let list: GetClientsResponse = decode_exact("client.list", &payload)?;
        Ok(list.clients)
    }

    /// GetStream (200); `None` when there is no such stream.
    pub async fn get_stream(
        &mut self,
        stream: &WireIdentifier,
    ) -> Result<Option<GetStreamResponse>, ClientError> {
        let request = GetStreamRequest {
            stream_id: stream.clone(),
        };
        let payload = self.call(GET_STREAM_CODE, &request).await?;
        decode_optional("stream.get", &payload)
    }

    /// GetStreams (201).
    pub async fn get_streams(&mut self) -> Result<Vec<StreamResponse>, ClientError> {
        let payload = self.call(GET_STREAMS_CODE, &GetStreamsRequest).await?;
        let list: GetStreamsResponse = decode_exact("stream.list", &payload)?;
        Ok(list.streams)
    }

    /// CreateStream (202): the new stream.
    pub async fn create_stream(
        &mut self,
        stream_name: &str,
    ) -> Result<StreamResponse, ClientError> {
        let request = CreateStreamRequest {
            name: name(stream_name, "stream name")?,
            options: WireOptions::empty(),
        };
        let payload = self.call(CREATE_STREAM_CODE, &request).await?;
        decode_exact("stream.create", &payload)
    }

    /// UpdateStream (204): renames a stream.
    pub async fn update_stream(
        &mut self,
        stream: &WireIdentifier,
        new_name: &str,
    ) -> Result<(), ClientError> {
        let request = UpdateStreamRequest {
            stream_id: stream.clone(),
            name: name(new_name, "stream name")?,
            options: WireOptions::empty(),
        };
        self.call(UPDATE_STREAM_CODE, &request).await.map(drop)
    }

    /// DeleteStream (203).
    pub async fn delete_stream(&mut self, stream: &WireIdentifier) -> Result<(), ClientError> {
        let request = DeleteStreamRequest {
            stream_id: stream.clone(),
        };
        self.call(DELETE_STREAM_CODE, &request).await.map(drop)
    }

    /// PurgeStream (205).
    pub async fn purge_stream(&mut self, stream: &WireIdentifier) -> Result<(), ClientError> {
        let request = PurgeStreamRequest {
            stream_id: stream.clone(),
        };
        self.call(PURGE_STREAM_CODE, &request).await.map(drop)
    }

    /// GetTopic (300); `None` when there is no such topic.
    pub async fn get_topic(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> Result<Option<GetTopicResponse>, ClientError> {
        let request = GetTopicRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
        };
        let payload = self.call(GET_TOPIC_CODE, &request).await?;
        decode_optional("topic.get", &payload)
    }

    /// GetTopics (301).
    pub async fn get_topics(
        &mut self,
        stream: &WireIdentifier,
    ) -> Result<Vec<TopicHeader>, ClientError> {
        let request = GetTopicsRequest {
            stream_id: stream.clone(),
        };
        let payload = self.call(GET_TOPICS_CODE, &request).await?;
        if payload.is_empty() {
            return Ok(Vec::new());
        }
        let list: GetTopicsResponse = decode_exact("topic.list", &payload)?;
        Ok(list.topics)
    }

    /// CreateTopic (302) with `options` (TLV: `durability`, `message_expiry`, …; `docs/wire.md`
    /// §8): the new topic with its partitions.
    pub async fn create_topic(
        &mut self,
        stream: &WireIdentifier,
        topic_name: &str,
        partitions_count: u32,
        options: WireOptions,
    ) -> Result<GetTopicResponse, ClientError> {
        let request = CreateTopicRequest {
            stream_id: stream.clone(),
            partitions_count,
            name: name(topic_name, "topic name")?,
            options,
        };
        let payload = self.call(CREATE_TOPIC_CODE, &request).await?;
        decode_exact("topic.create", &payload)
    }

    /// UpdateTopic (304): new name and options (compression, expiry, max size).
    pub async fn update_topic(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        new_name: &str,
        options: WireOptions,
    ) -> Result<(), ClientError> {
        let request = UpdateTopicRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            name: name(new_name, "topic name")?,
            options,
        };
        self.call(UPDATE_TOPIC_CODE, &request).await.map(drop)
    }

    /// DeleteTopic (303).
    pub async fn delete_topic(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> Result<(), ClientError> {
        let request = DeleteTopicRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
        };
        self.call(DELETE_TOPIC_CODE, &request).await.map(drop)
    }

    /// PurgeTopic (305).
    pub async fn purge_topic(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> Result<(), ClientError> {
        let request = PurgeTopicRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
        };
        self.call(PURGE_TOPIC_CODE, &request).await.map(drop)
    }

    /// CreatePartitions (402): adds `count` partitions.
    pub async fn create_partitions(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        count: u32,
    ) -> Result<(), ClientError> {
        let request = CreatePartitionsRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partitions_count: count,
        };
        self.call(CREATE_PARTITIONS_CODE, &request).await.map(drop)
    }

    /// DeletePartitions (403): removes the last `count` partitions.
    pub async fn delete_partitions(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        count: u32,
    ) -> Result<(), ClientError> {
        let request = DeletePartitionsRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partitions_count: count,
        };
        self.call(DELETE_PARTITIONS_CODE, &request).await.map(drop)
    }

    /// DeleteSegments (503): removes the oldest `count` segments of a partition.
    pub async fn delete_segments(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition_id: u32,
        count: u32,
    ) -> Result<(), ClientError> {
        let request = DeleteSegmentsRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partition_id,
            segments_count: count,
        };
        self.call(DELETE_SEGMENTS_CODE, &request).await.map(drop)
    }

    /// SendMessages (101): `batch` is a producer batch (`BatchBuilder`: partition_id,
    /// base_offset and base_timestamp zero, checksums over them). A malformed confirmation
    /// body reads as no confirmations, as in the SDK: the send was committed.
    pub async fn send_messages(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partitioning: &WirePartitioning,
        batch: &[u8],
    ) -> Result<SendMessagesResponse, ClientError> {
        let body = send_messages_body(stream, topic, partitioning, batch)?;
        let payload = self.request(SEND_MESSAGES_CODE, &body).await?;
        if payload.is_empty() {
            return Ok(SendMessagesResponse {
                confirmations: Vec::new(),
            });
        }
        match decode_exact("message.send", &payload) {
            Ok(response) => Ok(response),
            Err(error) => {
                tracing::warn!(%error, "undecodable send confirmation; treating as none");
                Ok(SendMessagesResponse {
                    confirmations: Vec::new(),
                })
            }
        }
    }

    /// Builds a batch of `messages` (ids minted for id 0, origin timestamp now) and sends it.
    pub async fn send_payloads(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partitioning: &WirePartitioning,
        messages: &[Outgoing<'_>],
    ) -> Result<SendMessagesResponse, ClientError> {
        if messages.is_empty() {
            return Err(ClientError::InvalidRequest(
                "a send needs at least one message".to_string(),
            ));
        }
        let mut builder = BatchBuilder::new(self.env.clock.wall_micros());
        for message in messages {
            let id = if message.id == 0 {
                self.mint_message_id()
            } else {
                message.id
            };
            builder.push(id, 0, message.payload, message.headers);
        }
        let batch = builder.build();
        self.send_messages(stream, topic, partitioning, &batch)
            .await
    }

    /// PollMessages (100).
    pub async fn poll_messages(
        &mut self,
        request: &PollMessagesRequest,
    ) -> Result<Polled, ClientError> {
        let payload = self.call(POLL_MESSAGES_CODE, request).await?;
        parse_polled(payload)
    }

    /// GetConsumerOffset (120); `None` when nothing is stored.
    pub async fn get_consumer_offset(
        &mut self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition_id: Option<u32>,
    ) -> Result<Option<ConsumerOffsetResponse>, ClientError> {
        let request = GetConsumerOffsetRequest {
            consumer: consumer.clone(),
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partition_id,
        };
        let payload = self.call(GET_CONSUMER_OFFSET_CODE, &request).await?;
        decode_optional("consumer_offset.get", &payload)
    }

    /// StoreConsumerOffset (121).
    pub async fn store_consumer_offset(
        &mut self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition_id: Option<u32>,
        offset: u64,
    ) -> Result<(), ClientError> {
        let request = StoreConsumerOffsetRequest {
            consumer: consumer.clone(),
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partition_id,
            offset,
            ack: AckLevel::Quorum,
        };
        self.call(STORE_CONSUMER_OFFSET_CODE, &request)
            .await
            .map(drop)
    }

    /// DeleteConsumerOffset (122).
    pub async fn delete_consumer_offset(
        &mut self,
        consumer: &WireConsumer,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        partition_id: Option<u32>,
    ) -> Result<(), ClientError> {
        let request = DeleteConsumerOffsetRequest {
            consumer: consumer.clone(),
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partition_id,
            ack: AckLevel::Quorum,
        };
        self.call(DELETE_CONSUMER_OFFSET_CODE, &request)
            .await
            .map(drop)
    }

    /// GetConsumerGroup (600); `None` when there is no such group.
    pub async fn get_consumer_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> Result<Option<ConsumerGroupDetailsResponse>, ClientError> {
        let request = GetConsumerGroupRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            group_id: group.clone(),
        };
        let payload = self.call(GET_CONSUMER_GROUP_CODE, &request).await?;
        decode_optional("consumer_group.get", &payload)
    }

    /// GetConsumerGroups (601).
    pub async fn get_consumer_groups(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
    ) -> Result<Vec<ConsumerGroupResponse>, ClientError> {
        let request = GetConsumerGroupsRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
        };
        let payload = self.call(GET_CONSUMER_GROUPS_CODE, &request).await?;
        let list: GetConsumerGroupsResponse = decode_exact("consumer_group.list", &payload)?;
        Ok(list.groups)
    }

    /// CreateConsumerGroup (602): the new group, when the server sends it (`docs/wire.md` §5
    /// says it does; the codec's response type is empty).
    pub async fn create_consumer_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group_name: &str,
    ) -> Result<Option<ConsumerGroupDetailsResponse>, ClientError> {
        let request = CreateConsumerGroupRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            name: name(group_name, "group name")?,
        };
        let payload = self.call(CREATE_CONSUMER_GROUP_CODE, &request).await?;
        decode_optional("consumer_group.create", &payload)
    }

    /// DeleteConsumerGroup (603).
    pub async fn delete_consumer_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> Result<(), ClientError> {
        let request = DeleteConsumerGroupRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            group_id: group.clone(),
        };
        self.call(DELETE_CONSUMER_GROUP_CODE, &request)
            .await
            .map(drop)
    }

    /// JoinConsumerGroup (604): membership is keyed by this login's client id.
    pub async fn join_consumer_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> Result<(), ClientError> {
        let request = JoinConsumerGroupRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            group_id: group.clone(),
        };
        self.call(JOIN_CONSUMER_GROUP_CODE, &request)
            .await
            .map(drop)
    }

    /// LeaveConsumerGroup (605).
    pub async fn leave_consumer_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> Result<(), ClientError> {
        let request = LeaveConsumerGroupRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            group_id: group.clone(),
        };
        self.call(LEAVE_CONSUMER_GROUP_CODE, &request)
            .await
            .map(drop)
    }

    /// SyncConsumerGroup (606): this member's generation and partitions; `None` when this
    /// client is not a member.
    pub async fn sync_consumer_group(
        &mut self,
        stream: &WireIdentifier,
        topic: &WireIdentifier,
        group: &WireIdentifier,
    ) -> Result<Option<SyncConsumerGroupResponse>, ClientError> {
        let request = SyncConsumerGroupRequest {
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            group_id: group.clone(),
        };
        let payload = self.call(SYNC_CONSUMER_GROUP_CODE, &request).await?;
        decode_optional("consumer_group.sync", &payload)
    }

    /// GetUser (31); `None` when there is no such user.
    pub async fn get_user(
        &mut self,
        user: &WireIdentifier,
    ) -> Result<Option<UserDetailsResponse>, ClientError> {
        let request = GetUserRequest {
            user_id: user.clone(),
        };
        let payload = self.call(GET_USER_CODE, &request).await?;
        decode_optional("user.get", &payload)
    }

    /// GetUsers (32).
    pub async fn get_users(&mut self) -> Result<Vec<UserResponse>, ClientError> {
        let payload = self.call(GET_USERS_CODE, &GetUsersRequest).await?;
        let list: GetUsersResponse = decode_exact("user.list", &payload)?;
        Ok(list.users)
    }

    /// CreateUser (33): the new user, when the server sends it.
    pub async fn create_user(
        &mut self,
        username: &str,
        password: &str,
        active: bool,
        permissions: Option<WirePermissions>,
    ) -> Result<Option<UserDetailsResponse>, ClientError> {
        check_password(password)?;
        let request = CreateUserRequest {
            username: name(username, "username")?,
            password: password.to_string(),
            status: user_status(active),
            permissions,
            options: WireOptions::empty(),
        };
        let payload = self.call(CREATE_USER_CODE, &request).await?;
        decode_optional("user.create", &payload)
    }

    /// UpdateUser (35): a new username and/or status.
    pub async fn update_user(
        &mut self,
        user: &WireIdentifier,
        username: Option<&str>,
        active: Option<bool>,
    ) -> Result<(), ClientError> {
        let request = UpdateUserRequest {
            user_id: user.clone(),
            username: username.map(|u| name(u, "username")).transpose()?,
            status: active.map(user_status),
            options: WireOptions::empty(),
        };
        self.call(UPDATE_USER_CODE, &request).await.map(drop)
    }

    /// DeleteUser (34).
    pub async fn delete_user(&mut self, user: &WireIdentifier) -> Result<(), ClientError> {
        let request = DeleteUserRequest {
            user_id: user.clone(),
        };
        self.call(DELETE_USER_CODE, &request).await.map(drop)
    }

    /// UpdatePermissions (36).
    pub async fn update_permissions(
        &mut self,
        user: &WireIdentifier,
        permissions: Option<WirePermissions>,
    ) -> Result<(), ClientError> {
        let request = UpdatePermissionsRequest {
            user_id: user.clone(),
            permissions,
        };
        self.call(UPDATE_PERMISSIONS_CODE, &request).await.map(drop)
    }

    /// ChangePassword (37).
    pub async fn change_password(
        &mut self,
        user: &WireIdentifier,
        current_password: &str,
        new_password: &str,
    ) -> Result<(), ClientError> {
        check_password(current_password)?;
        check_password(new_password)?;
        let request = ChangePasswordRequest {
            user_id: user.clone(),
            current_password: current_password.to_string(),
            new_password: new_password.to_string(),
        };
        self.call(CHANGE_PASSWORD_CODE, &request).await.map(drop)
    }

    /// GetPersonalAccessTokens (41): the logged-in user's tokens, names and expiries.
    pub async fn get_personal_access_tokens(
        &mut self,
    ) -> Result<Vec<PersonalAccessTokenResponse>, ClientError> {
        let payload = self
            .call(
                GET_PERSONAL_ACCESS_TOKENS_CODE,
                &GetPersonalAccessTokensRequest,
            )
            .await?;
        if payload.is_empty() {
            return Ok(Vec::new());
        }
        let list: GetPersonalAccessTokensResponse = decode_exact("token.list", &payload)?;
        Ok(list.tokens)
    }

    /// CreatePersonalAccessToken (42): a token for the logged-in user, expiring `expiry`
    /// microseconds after its creation (0: never); answers the raw token, shown only here.
    pub async fn create_personal_access_token(
        &mut self,
        token_name: &str,
        expiry: u64,
    ) -> Result<String, ClientError> {
        let request = CreatePersonalAccessTokenRequest {
            name: name(token_name, "token name")?,
            expiry,
        };
        let payload = self
            .call(CREATE_PERSONAL_ACCESS_TOKEN_CODE, &request)
            .await?;
        let raw: RawPersonalAccessTokenResponse = decode_exact("token.create", &payload)?;
        Ok(raw.token.as_str().to_string())
    }

    /// DeletePersonalAccessToken (43): the logged-in user's token `token_name`.
    pub async fn delete_personal_access_token(
        &mut self,
        token_name: &str,
    ) -> Result<(), ClientError> {
        let request = DeletePersonalAccessTokenRequest {
            name: name(token_name, "token name")?,
        };
        self.call(DELETE_PERSONAL_ACCESS_TOKEN_CODE, &request)
            .await
            .map(drop)
    }

    /// A random nonzero message id.
    fn mint_message_id(&self) -> u128 {
        let id = (u128::from(self.env.entropy.next_u64()) << 64)
            | u128::from(self.env.entropy.next_u64());
        id.max(1)
    }
}

/// The SendMessages body: `[metadata_length:u32][SendMessagesHeader][batch]` (`docs/wire.md` §6).
pub fn send_messages_body(
    stream: &WireIdentifier,
    topic: &WireIdentifier,
    partitioning: &WirePartitioning,
    batch: &[u8],
) -> Result<BytesMut, ClientError> {
    let invalid = |why: String| ClientError::InvalidRequest(format!("send batch: {why}"));
    if batch.len() < BATCH_HEADER_LEN {
        return Err(invalid(format!(
            "{} bytes, shorter than its {BATCH_HEADER_LEN}-byte header",
            batch.len()
        )));
    }
    let batch_length = u64::from_le_bytes(batch[32..40].try_into().expect("8 bytes"));
    if batch_length != batch.len() as u64 {
        return Err(invalid(format!(
            "batch_length says {batch_length}, the batch is {} bytes",
            batch.len()
        )));
    }
    let messages_count = u32::from_le_bytes(batch[48..52].try_into().expect("4 bytes"));
    if messages_count == 0 {
        return Err(invalid("the batch holds no message".to_string()));
    }
    let header = SendMessagesHeader {
        stream_id: stream.clone(),
        topic_id: topic.clone(),
        partitioning: partitioning.clone(),
        messages_count,
    };
    let metadata_length = header.metadata_length();
    let mut body = BytesMut::with_capacity(4 + metadata_length + batch.len());
    body.extend_from_slice(
        &u32::try_from(metadata_length)
            .expect("metadata is small")
            .to_le_bytes(),
    );
    header.encode(&mut body);
    assert_eq!(body.len(), 4 + metadata_length);
    body.extend_from_slice(batch);
    Ok(body)
}

/// Splits a PollMessages reply into its header and records (`docs/wire.md` §7).
pub fn parse_polled(payload: Bytes) -> Result<Polled, ClientError> {
    if payload.len() < POLL_HEADER_LEN {
        return Err(ProtocolError::ShortBody {
            command: "message.poll",
            len: payload.len(),
            why: "a poll reply has a 16-byte header",
        }
        .into());
    }
    let (header, consumed) =
        PollMessagesResponseHeader::decode(&payload).map_err(|source| ProtocolError::BadBody {
            command: "message.poll",
            source,
        })?;
    assert_eq!(consumed, POLL_HEADER_LEN);
    Ok(Polled {
        partition_id: header.partition_id,
        current_offset: header.current_offset,
        count: header.messages_count,
        records: payload.slice(POLL_HEADER_LEN..),
    })
}

/// `None` for an empty body (not found), else all of it decoded.
fn decode_optional<T: WireDecode>(
    command: &'static str,
    payload: &[u8],
) -> Result<Option<T>, ClientError> {
    if payload.is_empty() {
        return Ok(None);
    }
    decode_exact(command, payload).map(Some)
}

fn check_password(password: &str) -> Result<(), ClientError> {
    let range = crate::client::PASSWORD_LEN;
    if range.contains(&password.len()) {
        Ok(())
    } else {
        Err(ClientError::InvalidRequest(format!(
            "password is {} bytes, must be {}..={}",
            password.len(),
            range.start(),
            range.end()
        )))
    }
}

/// Iggy's user status byte: 1 active, 2 inactive.
fn user_status(active: bool) -> u8 {
    if active {
        1
    } else {
        2
    }
}

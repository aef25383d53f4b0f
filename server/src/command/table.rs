//! The command table: one row per command the server knows, in the shape of Iggy's own
//! (`iggy_binary_protocol::dispatch::COMMAND_TABLE`): its code and name (also the metric
//! label), the decoder of its binary-protocol body, the permission rule and what a name that
//! resolves to nothing answers, whether it is journaled and whether a retry of it is answered
//! from the duplicate table. Adapters read the table; [`super::execute`] enforces it.
//!
//! Login, logout and ping are not commands: they make or end a session, or need none, and
//! each adapter serves them itself.

use super::permissions::{Action, Rule};
use super::status::{codes, undecodable, Status};
use super::Command;
use bytes::{Buf, BytesMut};
use cairn_engine::format::BATCH_HEADER_LEN;
use cairn_engine::node::ops::MetaOp;
use iggy_binary_protocol::codes::*;
use iggy_binary_protocol::requests::messages::SendMessagesHeader;
use iggy_binary_protocol::{Operation, WireDecode};

/// What a command whose names resolve to nothing answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The not-found error of what did not resolve.
    Refuse,
    /// An empty reply ([`super::Reply::NotFound`]): Iggy's reads answer so.
    NotFound,
}

/// Decodes a binary-protocol request body into its command.
pub type Decoder = fn(BytesMut) -> Result<Command, Status>;

/// One command.
#[derive(Clone, Copy)]
pub struct Row {
    pub code: u32,
    /// Iggy's name of the command (`stream.create`); the metric label.
    pub name: &'static str,
    pub decode: Decoder,
    pub rule: Rule,
    pub missing: Missing,
    /// Whether the node journals it in the metadata plane before it answers.
    pub journaled: bool,
    /// Whether a retried request (same client, request number and body checksum) is
    /// answered from the duplicate table of the binary protocol: the metadata operations
    /// Iggy's protocol calls so (`Operation::is_metadata`), except a token's creation,
    /// whose reply holds the raw token and is never kept.
    pub dedup: bool,
}

/// Decodes a whole body as `T`; trailing bytes are a malformed request.
pub fn whole<T: WireDecode>(body: &[u8]) -> Result<T, Status> {
    let what = std::any::type_name::<T>();
    let (value, used) = T::decode(body).map_err(|e| undecodable(what, e))?;
    if used != body.len() {
        return Err(undecodable(
            what,
            format!("{} trailing bytes", body.len() - used),
        ));
    }
    Ok(value)
}

/// A journaled metadata operation's body.
fn meta(code: u32, body: &[u8]) -> Result<Command, Status> {
    let operation = Operation::from_command_code(code).expect("a replicated command");
    MetaOp::decode(operation, body)
        .map(Command::Meta)
        .map_err(|e| undecodable("metadata op", e))
}

/// A send's body (metadata length, header, one batch): the batch is split off the body,
/// never copied, and must fill the rest of the body exactly and hold the count the header
/// says.
fn send(mut body: BytesMut) -> Result<Command, Status> {
    if body.len() < 4 {
        return Err(undecodable("send", "no metadata length"));
    }
    let metadata_len = body.get_u32_le() as usize;
    if metadata_len > body.len() {
        return Err(undecodable("send", "metadata longer than the body"));
    }
    let header: SendMessagesHeader = whole(&body[..metadata_len])?;
    let batch = body.split_off(metadata_len);
    check_batch_frame(&batch, header.messages_count)?;
    Ok(Command::SendMessages(super::Send {
        stream: header.stream_id,
        topic: header.topic_id,
        partitioning: header.partitioning,
        count: header.messages_count,
        batch,
        ack: super::Ack::Awaited,
    }))
}

/// The batch fills the rest of the body exactly and holds `messages_count` messages.
pub fn check_batch_frame(batch: &[u8], messages_count: u32) -> Result<(), Status> {
    if batch.len() < BATCH_HEADER_LEN {
        return Err(undecodable("send", "batch shorter than its header"));
    }
    let length = u64::from_le_bytes(batch[32..40].try_into().expect("8 bytes"));
    let count = u32::from_le_bytes(batch[48..52].try_into().expect("4 bytes"));
    if length != batch.len() as u64 {
        return Err(undecodable(
            "send",
            format!("batch_length {length} but {} bytes follow", batch.len()),
        ));
    }
    if count != messages_count || count == 0 {
        return Err(Status::of(codes::INVALID_MESSAGES_COUNT));
    }
    Ok(())
}

/// A row whose body decodes as one request type into one command variant.
macro_rules! typed {
    ($variant:ident) => {
        |body: BytesMut| whole(&body).map(Command::$variant)
    };
}

/// A row whose command carries nothing (its body is not read, as Iggy's server does not).
macro_rules! bare {
    ($variant:ident) => {
        |_: BytesMut| Ok(Command::$variant)
    };
}

/// A journaled metadata operation's row.
macro_rules! journaled {
    ($code:ident) => {
        |body: BytesMut| meta($code, &body)
    };
}

const fn entry(
    code: u32,
    name: &'static str,
    decode: Decoder,
    rule: Rule,
    missing: Missing,
    journaled: bool,
    dedup: bool,
) -> Row {
    Row {
        code,
        name,
        decode,
        rule,
        missing,
        journaled,
        dedup,
    }
}

use Missing::{NotFound, Refuse};

/// Every command the server serves.
#[rustfmt::skip]
pub const TABLE: &[Row] = &[
    // code                              name                    decoder                          rule                                  missing   journaled dedup
    // System
    entry(GET_STATS_CODE,                  "stats",                bare!(GetStats),                 Rule::Server(Action::ReadServers),    Refuse,   false, false),
    entry(GET_CLUSTER_METADATA_CODE,       "cluster.metadata",     bare!(GetClusterMetadata),       Rule::Open,                           Refuse,   false, false),
    entry(GET_ME_CODE,                     "me",                   bare!(GetMe),                    Rule::Open,                           Refuse,   false, false),
    entry(GET_CLIENT_CODE,                 "client.get",           typed!(GetClient),               Rule::OwnOr(Action::ReadServers),     Refuse,   false, false),
    entry(GET_CLIENTS_CODE,                "client.list",          bare!(GetClients),               Rule::Server(Action::ReadServers),    Refuse,   false, false),
    // Users
    entry(GET_USER_CODE,                   "user.get",             typed!(GetUser),                 Rule::OwnOr(Action::ReadUsers),       NotFound, false, false),
    entry(GET_USERS_CODE,                  "user.list",            bare!(GetUsers),                 Rule::Server(Action::ReadUsers),      Refuse,   false, false),
    entry(CREATE_USER_CODE,                "user.create",          typed!(CreateUser),              Rule::Server(Action::ManageUsers),    Refuse,   true,  true),
    entry(DELETE_USER_CODE,                "user.delete",          journaled!(DELETE_USER_CODE),    Rule::Server(Action::ManageUsers),    Refuse,   true,  true),
    entry(UPDATE_USER_CODE,                "user.update",          journaled!(UPDATE_USER_CODE),    Rule::Server(Action::ManageUsers),    Refuse,   true,  true),
    entry(UPDATE_PERMISSIONS_CODE,         "user.permissions",     journaled!(UPDATE_PERMISSIONS_CODE), Rule::Server(Action::ManageUsers), Refuse,  true,  true),
    entry(CHANGE_PASSWORD_CODE,            "user.password",        typed!(ChangePassword),          Rule::OwnOr(Action::ManageUsers),     Refuse,   true,  true),
    // Personal access tokens: each user manages its own
    entry(GET_PERSONAL_ACCESS_TOKENS_CODE, "personal_access_token.list",   bare_checked_tokens,  Rule::Open,                           Refuse,   false, false),
    entry(CREATE_PERSONAL_ACCESS_TOKEN_CODE, "personal_access_token.create", typed!(CreatePersonalAccessToken), Rule::Open,             Refuse,   true,  false),
    entry(DELETE_PERSONAL_ACCESS_TOKEN_CODE, "personal_access_token.delete", typed!(DeletePersonalAccessToken), Rule::Open,             Refuse,   true,  true),
    // Messages
    entry(POLL_MESSAGES_CODE,              "message.poll",         typed!(PollMessages),            Rule::Topic(Action::Poll),            Refuse,   false, false),
    entry(POLL_MESSAGES_ON_PRIMARY_CODE,   "message.poll_primary", typed!(PollOnPrimary),           Rule::Topic(Action::Poll),            Refuse,   false, false),
    entry(GET_POLL_ROUTING_CODE,           "message.poll_routing", typed!(PollRouting),             Rule::Topic(Action::Poll),            Refuse,   false, false),
    entry(SEND_MESSAGES_CODE,              "message.send",         send,                            Rule::Topic(Action::Send),            Refuse,   false, false),
    // Consumer offsets
    entry(GET_CONSUMER_OFFSET_CODE,        "consumer_offset.get",  typed!(GetConsumerOffset),       Rule::Topic(Action::Poll),            Refuse,   false, false),
    entry(STORE_CONSUMER_OFFSET_CODE,      "consumer_offset.store", typed!(StoreConsumerOffset),    Rule::Topic(Action::Poll),            Refuse,   false, false),
    entry(GET_CONSUMER_OFFSET_ROUTING_CODE, "consumer_offset.routing", typed!(OffsetRouting),       Rule::Topic(Action::Poll),            Refuse,   false, false),
    entry(DELETE_CONSUMER_OFFSET_CODE,     "consumer_offset.delete", typed!(DeleteConsumerOffset),  Rule::Topic(Action::Poll),            Refuse,   false, false),
    // Streams
    entry(GET_STREAM_CODE,                 "stream.get",           typed!(GetStream),               Rule::Stream(Action::ReadStream),     NotFound, false, false),
    entry(GET_STREAMS_CODE,                "stream.list",          bare!(GetStreams),               Rule::Server(Action::ReadStreams),    Refuse,   false, false),
    entry(CREATE_STREAM_CODE,              "stream.create",        journaled!(CREATE_STREAM_CODE),  Rule::Server(Action::CreateStream),   Refuse,   true,  true),
    entry(DELETE_STREAM_CODE,              "stream.delete",        journaled!(DELETE_STREAM_CODE),  Rule::Stream(Action::ManageStream),   Refuse,   true,  true),
    entry(UPDATE_STREAM_CODE,              "stream.update",        journaled!(UPDATE_STREAM_CODE),  Rule::Stream(Action::ManageStream),   Refuse,   true,  true),
    entry(PURGE_STREAM_CODE,               "stream.purge",         journaled!(PURGE_STREAM_CODE),   Rule::Stream(Action::ManageStream),   Refuse,   true,  true),
    // Topics
    entry(GET_TOPIC_CODE,                  "topic.get",            typed!(GetTopic),                Rule::Topic(Action::ReadTopic),       NotFound, false, false),
    entry(GET_TOPICS_CODE,                 "topic.list",           typed!(GetTopics),               Rule::Stream(Action::ReadTopics),     Refuse,   false, false),
    entry(CREATE_TOPIC_CODE,               "topic.create",         journaled!(CREATE_TOPIC_CODE),   Rule::Stream(Action::CreateTopic),    Refuse,   true,  true),
    entry(DELETE_TOPIC_CODE,               "topic.delete",         journaled!(DELETE_TOPIC_CODE),   Rule::Topic(Action::ManageTopic),     Refuse,   true,  true),
    entry(UPDATE_TOPIC_CODE,               "topic.update",         journaled!(UPDATE_TOPIC_CODE),   Rule::Topic(Action::ManageTopic),     Refuse,   true,  true),
    entry(PURGE_TOPIC_CODE,                "topic.purge",          journaled!(PURGE_TOPIC_CODE),    Rule::Topic(Action::ManageTopic),     Refuse,   true,  true),
    // Partitions and segments
    entry(CREATE_PARTITIONS_CODE,          "partition.create",     journaled!(CREATE_PARTITIONS_CODE), Rule::Topic(Action::ManageTopic),  Refuse,   true,  true),
    entry(DELETE_PARTITIONS_CODE,          "partition.delete",     journaled!(DELETE_PARTITIONS_CODE), Rule::Topic(Action::ManageTopic),  Refuse,   true,  true),
    entry(DELETE_SEGMENTS_CODE,            "segment.delete",       typed!(DeleteSegments),          Rule::Topic(Action::ManageTopic),     Refuse,   false, false),
    // Consumer groups
    entry(GET_CONSUMER_GROUP_CODE,         "consumer_group.get",   typed!(GetConsumerGroup),        Rule::Topic(Action::ReadTopic),       NotFound, false, false),
    entry(GET_CONSUMER_GROUPS_CODE,        "consumer_group.list",  typed!(GetConsumerGroups),       Rule::Topic(Action::ReadTopic),       Refuse,   false, false),
    entry(CREATE_CONSUMER_GROUP_CODE,      "consumer_group.create", journaled!(CREATE_CONSUMER_GROUP_CODE), Rule::Topic(Action::ManageTopic), Refuse, true, true),
    entry(DELETE_CONSUMER_GROUP_CODE,      "consumer_group.delete", journaled!(DELETE_CONSUMER_GROUP_CODE), Rule::Topic(Action::ManageTopic), Refuse, true, true),
    entry(JOIN_CONSUMER_GROUP_CODE,        "consumer_group.join",  typed!(JoinConsumerGroup),       Rule::Topic(Action::Poll),            Refuse,   false, true),
    entry(LEAVE_CONSUMER_GROUP_CODE,       "consumer_group.leave", typed!(LeaveConsumerGroup),      Rule::Topic(Action::Poll),            Refuse,   false, true),
    entry(SYNC_CONSUMER_GROUP_CODE,        "consumer_group.sync",  typed!(SyncConsumerGroup),       Rule::Topic(Action::Poll),            NotFound, false, false),
];

/// The token list's body must be empty (its request has no fields).
fn bare_checked_tokens(body: BytesMut) -> Result<Command, Status> {
    let iggy_binary_protocol::requests::personal_access_tokens::GetPersonalAccessTokensRequest =
        whole(&body)?;
    Ok(Command::GetPersonalAccessTokens)
}

/// A known command cairn does not serve: it answers "feature unavailable".
const UNSERVED: Row = entry(
    0,
    "unserved",
    |_| Err(Status::of(codes::FEATURE_UNAVAILABLE)),
    Rule::Open,
    Refuse,
    false,
    false,
);

impl Row {
    /// Whether, in a cluster, it reads a fresh view of the metadata (`Node::fresh`: one
    /// read index first): every row that reads or changes the entities, so a topic made or
    /// a password changed through another member a moment before is seen. Not the data
    /// path (sends, polls, offsets: a partition's own), nor what is this node's alone
    /// (stats, the roster, sessions), nor commands cairn does not serve.
    pub fn reads_metadata(&self) -> bool {
        !matches!(
            self.code,
            0 | GET_STATS_CODE
                | GET_CLUSTER_METADATA_CODE
                | GET_ME_CODE
                | GET_CLIENT_CODE
                | GET_CLIENTS_CODE
                | POLL_MESSAGES_CODE
                | POLL_MESSAGES_ON_PRIMARY_CODE
                | GET_POLL_ROUTING_CODE
                | GET_CONSUMER_OFFSET_ROUTING_CODE
                | SEND_MESSAGES_CODE
                | GET_CONSUMER_OFFSET_CODE
                | STORE_CONSUMER_OFFSET_CODE
                | DELETE_CONSUMER_OFFSET_CODE
        )
    }
}

/// The row of `code`; the codes cairn does not serve share one row.
pub fn row(code: u32) -> &'static Row {
    TABLE.iter().find(|r| r.code == code).unwrap_or(&UNSERVED)
}

/// The metric label of `code`: its row's name, or Iggy's name of a command cairn does not
/// serve.
pub fn label(code: u32) -> &'static str {
    match TABLE.iter().find(|r| r.code == code) {
        Some(row) => row.name,
        None => iggy_binary_protocol::dispatch::lookup_command(code).map_or("unknown", |m| m.name),
    }
}

/// Decodes a binary-protocol body of `code` into its command.
pub fn decode(code: u32, body: BytesMut) -> Result<Command, Status> {
    match TABLE.iter().find(|r| r.code == code) {
        Some(row) => (row.decode)(body),
        None => Ok(Command::Unserved(code)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_binary_protocol::dispatch::lookup_command;

    #[test]
    fn every_row_is_iggys_command_under_iggys_name_once() {
        for (i, row) in TABLE.iter().enumerate() {
            let iggy = lookup_command(row.code).expect("a code of Iggy's table");
            assert_eq!(row.name, iggy.name, "code {}", row.code);
            assert!(
                TABLE[i + 1..].iter().all(|other| other.code != row.code),
                "{} twice",
                row.name
            );
            assert_eq!(label(row.code), row.name);
        }
    }

    #[test]
    fn dedup_and_journaled_agree_with_the_protocol() {
        for row in TABLE {
            let operation = Operation::from_command_code(row.code);
            let metadata = operation.is_some_and(|op| op.is_metadata());
            let expected = metadata && row.code != CREATE_PERSONAL_ACCESS_TOKEN_CODE;
            assert_eq!(row.dedup, expected, "{}: dedup", row.name);
            // Only what Iggy replicates can be journaled (cairn journals the metadata plane).
            let replicated = lookup_command(row.code).is_some_and(|m| m.is_replicated());
            assert!(!row.journaled || replicated, "{}: journaled", row.name);
            assert!(!row.journaled || metadata, "{}: journaled", row.name);
        }
    }

    #[test]
    fn a_code_cairn_does_not_serve_decodes_to_unserved_under_iggys_name() {
        let flush = FLUSH_UNSAVED_BUFFER_CODE;
        assert!(matches!(
            decode(flush, BytesMut::new()),
            Ok(Command::Unserved(code)) if code == flush
        ));
        assert_eq!(label(flush), "message.flush_unsaved_buffer");
        assert_eq!(row(flush).name, "unserved");
    }

    #[test]
    fn a_send_body_splits_its_batch_off_and_checks_its_frame() {
        let mut batch = cairn_engine::format::BatchBuilder::new(0);
        batch.push(1, 0, b"x", &[]);
        let batch = batch.build();
        let header = SendMessagesHeader {
            stream_id: iggy_binary_protocol::WireIdentifier::numeric(1),
            topic_id: iggy_binary_protocol::WireIdentifier::numeric(2),
            partitioning: iggy_binary_protocol::WirePartitioning::Balanced,
            messages_count: 1,
        };
        let metadata = iggy_binary_protocol::WireEncode::to_bytes(&header);
        let mut body = BytesMut::new();
        body.extend_from_slice(&(metadata.len() as u32).to_le_bytes());
        body.extend_from_slice(&metadata);
        body.extend_from_slice(&batch);
        let Ok(Command::SendMessages(send)) = decode(SEND_MESSAGES_CODE, body.clone()) else {
            panic!("a send decodes");
        };
        assert_eq!((send.count, &send.batch[..]), (1, &batch[..]));
        let short = body.split_to(body.len() - 1);
        let refused = decode(SEND_MESSAGES_CODE, short).unwrap_err();
        assert_eq!(refused.code, codes::INVALID_COMMAND);
    }
}

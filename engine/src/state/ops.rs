//! The metadata operations a node journals: each is the `iggy_binary_protocol` request type a
//! client sends, so the journal body is the request's wire format, byte for byte (a password
//! is replaced by its hash before it is journaled). The personal-access-token ops are the
//! exception: Iggy's requests name neither the user nor the token's hash, so they are
//! journaled in cairn's own format ([`super::tokens`]).

use super::tokens::{CreateTokenOp, DeleteTokenOp};
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
use iggy_binary_protocol::{Operation, WireDecode, WireEncode, WireError};

/// The longest wire body a journaled operation may have: an operation whose body is longer
/// is refused before it changes anything (the server's frame limit is above it).
pub const MAX_BODY_LEN: usize = 256 * 1024;

/// One journaled metadata operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaOp {
    CreateStream(CreateStreamRequest),
    UpdateStream(UpdateStreamRequest),
    DeleteStream(DeleteStreamRequest),
    PurgeStream(PurgeStreamRequest),
    CreateTopic(CreateTopicRequest),
    UpdateTopic(UpdateTopicRequest),
    DeleteTopic(DeleteTopicRequest),
    PurgeTopic(PurgeTopicRequest),
    CreatePartitions(CreatePartitionsRequest),
    DeletePartitions(DeletePartitionsRequest),
    CreateConsumerGroup(CreateConsumerGroupRequest),
    DeleteConsumerGroup(DeleteConsumerGroupRequest),
    /// `password` holds the hash (a PHC string), never the password.
    CreateUser(CreateUserRequest),
    UpdateUser(UpdateUserRequest),
    DeleteUser(DeleteUserRequest),
    /// `new_password` holds the hash; `current_password` the hash the caller's current password
    /// was verified against before journaling (the change lands only while the user has it),
    /// or empty for an unconditional set.
    ChangePassword(ChangePasswordRequest),
    UpdatePermissions(UpdatePermissionsRequest),
    /// Holds the token's hash, never the token.
    CreatePersonalAccessToken(CreateTokenOp),
    DeletePersonalAccessToken(DeleteTokenOp),
}

impl MetaOp {
    pub fn operation(&self) -> Operation {
        match self {
            MetaOp::CreateStream(_) => Operation::CreateStream,
            MetaOp::UpdateStream(_) => Operation::UpdateStream,
            MetaOp::DeleteStream(_) => Operation::DeleteStream,
            MetaOp::PurgeStream(_) => Operation::PurgeStream,
            MetaOp::CreateTopic(_) => Operation::CreateTopic,
            MetaOp::UpdateTopic(_) => Operation::UpdateTopic,
            MetaOp::DeleteTopic(_) => Operation::DeleteTopic,
            MetaOp::PurgeTopic(_) => Operation::PurgeTopic,
            MetaOp::CreatePartitions(_) => Operation::CreatePartitions,
            MetaOp::DeletePartitions(_) => Operation::DeletePartitions,
            MetaOp::CreateConsumerGroup(_) => Operation::CreateConsumerGroup,
            MetaOp::DeleteConsumerGroup(_) => Operation::DeleteConsumerGroup,
            MetaOp::CreateUser(_) => Operation::CreateUser,
            MetaOp::UpdateUser(_) => Operation::UpdateUser,
            MetaOp::DeleteUser(_) => Operation::DeleteUser,
            MetaOp::ChangePassword(_) => Operation::ChangePassword,
            MetaOp::UpdatePermissions(_) => Operation::UpdatePermissions,
            MetaOp::CreatePersonalAccessToken(_) => Operation::CreatePersonalAccessToken,
            MetaOp::DeletePersonalAccessToken(_) => Operation::DeletePersonalAccessToken,
        }
    }

    /// The wire-format body.
    pub fn body(&self) -> bytes::Bytes {
        match self {
            MetaOp::CreateStream(r) => r.to_bytes(),
            MetaOp::UpdateStream(r) => r.to_bytes(),
            MetaOp::DeleteStream(r) => r.to_bytes(),
            MetaOp::PurgeStream(r) => r.to_bytes(),
            MetaOp::CreateTopic(r) => r.to_bytes(),
            MetaOp::UpdateTopic(r) => r.to_bytes(),
            MetaOp::DeleteTopic(r) => r.to_bytes(),
            MetaOp::PurgeTopic(r) => r.to_bytes(),
            MetaOp::CreatePartitions(r) => r.to_bytes(),
            MetaOp::DeletePartitions(r) => r.to_bytes(),
            MetaOp::CreateConsumerGroup(r) => r.to_bytes(),
            MetaOp::DeleteConsumerGroup(r) => r.to_bytes(),
            MetaOp::CreateUser(r) => r.to_bytes(),
            MetaOp::UpdateUser(r) => r.to_bytes(),
            MetaOp::DeleteUser(r) => r.to_bytes(),
            MetaOp::ChangePassword(r) => r.to_bytes(),
            MetaOp::UpdatePermissions(r) => r.to_bytes(),
            MetaOp::CreatePersonalAccessToken(r) => r.to_bytes(),
            MetaOp::DeletePersonalAccessToken(r) => r.to_bytes(),
        }
    }

    /// Decodes a journaled body; the body must be exactly one request.
    pub fn decode(operation: Operation, body: &[u8]) -> Result<MetaOp, WireError> {
        fn whole<T: WireDecode>(body: &[u8]) -> Result<T, WireError> {
            let (value, used) = T::decode(body)?;
            if used != body.len() {
                return Err(WireError::Validation(
                    format!("{} trailing bytes", body.len() - used).into(),
                ));
            }
            Ok(value)
        }
        Ok(match operation {
            Operation::CreateStream => MetaOp::CreateStream(whole(body)?),
            Operation::UpdateStream => MetaOp::UpdateStream(whole(body)?),
            Operation::DeleteStream => MetaOp::DeleteStream(whole(body)?),
            Operation::PurgeStream => MetaOp::PurgeStream(whole(body)?),
            Operation::CreateTopic => MetaOp::CreateTopic(whole(body)?),
            Operation::UpdateTopic => MetaOp::UpdateTopic(whole(body)?),
            Operation::DeleteTopic => MetaOp::DeleteTopic(whole(body)?),
            Operation::PurgeTopic => MetaOp::PurgeTopic(whole(body)?),
            Operation::CreatePartitions => MetaOp::CreatePartitions(whole(body)?),
            Operation::DeletePartitions => MetaOp::DeletePartitions(whole(body)?),
            Operation::CreateConsumerGroup => MetaOp::CreateConsumerGroup(whole(body)?),
            Operation::DeleteConsumerGroup => MetaOp::DeleteConsumerGroup(whole(body)?),
            Operation::CreateUser => MetaOp::CreateUser(whole(body)?),
            Operation::UpdateUser => MetaOp::UpdateUser(whole(body)?),
            Operation::DeleteUser => MetaOp::DeleteUser(whole(body)?),
            Operation::ChangePassword => MetaOp::ChangePassword(whole(body)?),
            Operation::UpdatePermissions => MetaOp::UpdatePermissions(whole(body)?),
            Operation::CreatePersonalAccessToken => MetaOp::CreatePersonalAccessToken(whole(body)?),
            Operation::DeletePersonalAccessToken => MetaOp::DeletePersonalAccessToken(whole(body)?),
            other => {
                return Err(WireError::Validation(
                    format!("{other:?} is not a journaled metadata operation").into(),
                ))
            }
        })
    }
}

//! Iggy's error codes (`iggy_common` 0.11.0 `src/error/iggy_error.rs`, `docs/wire.md` §9) and
//! eviction reasons (`docs/wire.md` §1.4), by name.
//!
//! Binary transports carry only the number; this table turns it back into the name the
//! Iggy SDK would print. Unknown numbers are named `"Unknown"` (the SDK maps them to
//! `IggyError::Error`). A leaf: [`crate::error`] and [`crate::frame`] both read it.

use iggy_binary_protocol::EvictionReason;

/// Unauthenticated: the SDK reconnects and logs in again (`docs/wire.md` §2.4, T11).
pub const UNAUTHENTICATED: u32 = 40;
/// StaleClient: the SDK reconnects and logs in again.
pub const STALE_CLIENT: u32 = 30;
/// InvalidCredentials.
pub const INVALID_CREDENTIALS: u32 = 42;

/// The name of Iggy error `code`, or `"Unknown"`.
pub fn error_name(code: u32) -> &'static str {
    match code {
        1 => "Error",
        2 => "InvalidConfiguration",
        3 => "InvalidCommand",
        4 => "InvalidFormat",
        5 => "FeatureUnavailable",
        6 => "InvalidIdentifier",
        7 => "InvalidVersion",
        8 => "Disconnected",
        9 => "CannotEstablishConnection",
        20 => "ResourceNotFound",
        30 => "StaleClient",
        31 => "TcpError",
        40 => "Unauthenticated",
        41 => "Unauthorized",
        42 => "InvalidCredentials",
        43 => "InvalidUsername",
        44 => "InvalidPassword",
        45 => "InvalidUserStatus",
        46 => "UserAlreadyExists",
        47 => "UserInactive",
        48 => "CannotDeleteUser",
        49 => "CannotChangePermissions",
        50 => "InvalidPersonalAccessTokenName",
        51 => "PersonalAccessTokenAlreadyExists",
        52 => "PersonalAccessTokensLimitReached",
        53 => "InvalidPersonalAccessToken",
        54 => "PersonalAccessTokenExpired",
        55 => "UsersLimitReached",
        56 => "InvalidPersonalAccessTokenExpiry",
        57 => "TransientNotCommitted",
        58 => "TransientNotAccepted",
        59 => "RequestAlreadyApplied",
        1000 => "CannotCreateBaseDirectory",
        1009 => "StreamIdNotFound",
        1010 => "StreamNameNotFound",
        1011 => "StreamIdAlreadyExists",
        1012 => "StreamNameAlreadyExists",
        1013 => "InvalidStreamName",
        1014 => "InvalidStreamId",
        1020 => "TooManyStreams",
        2010 => "TopicIdNotFound",
        2011 => "TopicNameNotFound",
        2012 => "TopicIdAlreadyExists",
        2013 => "TopicNameAlreadyExists",
        2014 => "InvalidTopicName",
        2015 => "TooManyPartitions",
        2016 => "InvalidTopicId",
        2019 => "InvalidPartitionsCount",
        2021 => "TooManyTopics",
        3007 => "PartitionNotFound",
        3021 => "ConsumerOffsetNotFound",
        4009 => "InvalidMessagesCount",
        4022 => "TooBigMessagePayload",
        4024 => "EmptyMessagePayload",
        4027 => "InvalidMessageChecksum",
        4039 => "InvalidBatchChecksum",
        4041 => "UnsupportedOptionKey",
        4042 => "InvalidOptionValue",
        5000 => "ConsumerGroupIdNotFound",
        5003 => "ConsumerGroupNameNotFound",
        5004 => "ConsumerGroupNameAlreadyExists",
        5006 => "ConsumerGroupMemberNotFound",
        5009 => "ConsumerGroupPartitionNotOwned",
        14001 => "InvalidSession",
        14003 => "IncompatibleProtocolVersion",
        _ => "Unknown",
    }
}

/// True for the codes after which the Iggy SDK drops the connection, reconnects and logs in
/// again (`docs/wire.md` §2.4): Unauthenticated (40) and StaleClient (30).
pub fn triggers_reconnect(code: u32) -> bool {
    code == UNAUTHENTICATED || code == STALE_CLIENT
}

/// The name of an eviction reason byte (`"StaleClient"`), or `"Unknown"`.
pub fn eviction_reason_name(reason: u8) -> &'static str {
    match bytemuck::checked::try_cast::<u8, EvictionReason>(reason) {
        Ok(EvictionReason::Reserved) | Err(_) => "Unknown",
        Ok(EvictionReason::NoSession) => "NoSession",
        Ok(EvictionReason::ClientReleaseTooLow) => "ClientReleaseTooLow",
        Ok(EvictionReason::ClientReleaseTooHigh) => "ClientReleaseTooHigh",
        Ok(EvictionReason::InvalidRequestOperation) => "InvalidRequestOperation",
        Ok(EvictionReason::InvalidRequestBody) => "InvalidRequestBody",
        Ok(EvictionReason::InvalidRequestBodySize) => "InvalidRequestBodySize",
        Ok(EvictionReason::SessionTooLow) => "SessionTooLow",
        Ok(EvictionReason::SessionReleaseMismatch) => "SessionReleaseMismatch",
        Ok(EvictionReason::InvalidCredentials) => "InvalidCredentials",
        Ok(EvictionReason::InvalidToken) => "InvalidToken",
        Ok(EvictionReason::UserInactive) => "UserInactive",
        Ok(EvictionReason::SessionError) => "SessionError",
        Ok(EvictionReason::StaleClient) => "StaleClient",
        Ok(EvictionReason::IncompatibleProtocol) => "IncompatibleProtocol",
        Ok(EvictionReason::MalformedLogin) => "MalformedLogin",
    }
}

/// Whether the SDK answers an eviction with this reason by reconnecting and logging in
/// again: the reasons it maps to Unauthenticated (40) or StaleClient (30), or an
/// undecodable byte (`docs/wire.md` §1.4).
pub fn eviction_triggers_reconnect(reason: u8) -> bool {
    match bytemuck::checked::try_cast::<u8, EvictionReason>(reason) {
        Ok(reason) => matches!(
            reason,
            EvictionReason::NoSession
                | EvictionReason::SessionTooLow
                | EvictionReason::SessionReleaseMismatch
                | EvictionReason::UserInactive
                | EvictionReason::SessionError
                | EvictionReason::StaleClient
        ),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_codes_the_server_sends() {
        for (code, name) in [
            (1009, "StreamIdNotFound"),
            (1010, "StreamNameNotFound"),
            (1012, "StreamNameAlreadyExists"),
            (2010, "TopicIdNotFound"),
            (2011, "TopicNameNotFound"),
            (2013, "TopicNameAlreadyExists"),
            (3007, "PartitionNotFound"),
            (3021, "ConsumerOffsetNotFound"),
            (40, "Unauthenticated"),
            (41, "Unauthorized"),
            (42, "InvalidCredentials"),
            (46, "UserAlreadyExists"),
            (20, "ResourceNotFound"),
            (5000, "ConsumerGroupIdNotFound"),
            (5003, "ConsumerGroupNameNotFound"),
            (5004, "ConsumerGroupNameAlreadyExists"),
            (5006, "ConsumerGroupMemberNotFound"),
            (5009, "ConsumerGroupPartitionNotOwned"),
            (4027, "InvalidMessageChecksum"),
            (4039, "InvalidBatchChecksum"),
            (4041, "UnsupportedOptionKey"),
            (4042, "InvalidOptionValue"),
            (50, "InvalidPersonalAccessTokenName"),
            (51, "PersonalAccessTokenAlreadyExists"),
            (52, "PersonalAccessTokensLimitReached"),
            (53, "InvalidPersonalAccessToken"),
            (54, "PersonalAccessTokenExpired"),
            (56, "InvalidPersonalAccessTokenExpiry"),
        ] {
            assert_eq!(error_name(code), name, "code {code}");
        }
        assert_eq!(error_name(999_999), "Unknown");
    }

    #[test]
    fn names_eviction_reasons_and_which_reconnect() {
        assert_eq!(
            eviction_reason_name(EvictionReason::StaleClient as u8),
            "StaleClient"
        );
        assert_eq!(
            eviction_reason_name(EvictionReason::Reserved as u8),
            "Unknown"
        );
        assert_eq!(eviction_reason_name(u8::MAX), "Unknown");
        assert!(eviction_triggers_reconnect(EvictionReason::NoSession as u8));
        assert!(!eviction_triggers_reconnect(
            EvictionReason::InvalidCredentials as u8
        ));
        // An undecodable byte: the SDK treats it as Unauthenticated.
        assert!(eviction_triggers_reconnect(u8::MAX));
    }

    #[test]
    fn only_40_and_30_reconnect() {
        assert!(triggers_reconnect(40));
        assert!(triggers_reconnect(30));
        assert!(!triggers_reconnect(41));
        assert!(!triggers_reconnect(42));
    }
}

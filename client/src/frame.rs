//! Sans-IO framing of the 0.11 protocol, client side: building request frames (SPEC §1.2,
//! §3) and judging reply frames (SPEC §1.3, §1.4, §4).
//!
//! Nothing here touches a socket or a clock; [`crate::connection`] moves the bytes.

use crate::error::{ClientError, ProtocolError};
use bytes::Bytes;
use iggy_binary_protocol::codes::{
    LOGIN_REGISTER_CODE, LOGIN_REGISTER_WITH_PAT_CODE, LOGOUT_USER_CODE,
};
use iggy_binary_protocol::{
    lookup_command, result_code, result_section_len, Command, EvictionHeader, EvictionReason,
    Operation, ReplyHeader, RequestHeader, HEADER_SIZE, SIZE_FIELD_OFFSET,
};

/// Every frame starts with a header of this many bytes.
pub const HEADER_LEN: usize = HEADER_SIZE;
/// Iggy's default frame ceiling (64 MiB); the default bound on reply frames.
pub const DEFAULT_MAX_REPLY_BYTES: u32 = 64 * 1024 * 1024;
/// The largest request frame this client builds (header included).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;
/// Byte offset of the command byte in every header.
const COMMAND_OFFSET: usize = 60;
/// Where a NonReplicated request carries its u32 command code (`reserved[0..4]`).
pub const NON_REPLICATED_CODE_OFFSET: usize = 196;

const _: () = assert!(HEADER_LEN == 256);
const _: () = assert!(SIZE_FIELD_OFFSET == 48);

/// How a command code travels: the operation byte of its header and the rules that follow
/// from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The Iggy command code (1 Ping, 101 SendMessages, 202 CreateStream, …).
    pub code: u32,
    /// The codec's name of the command (`"stream.create"`), for errors and spans.
    pub name: &'static str,
    /// The header's operation byte.
    pub operation: Operation,
}

impl Route {
    /// Login (Register, operation 1; code 40 is not on the wire).
    pub const REGISTER: Route = Route {
        code: LOGIN_REGISTER_CODE,
        name: "user.login_register",
        operation: Operation::Register,
    };
    /// Logout (operation 3; code 39 is not on the wire).
    pub const LOGOUT: Route = Route {
        code: LOGOUT_USER_CODE,
        name: "user.logout",
        operation: Operation::Logout,
    };

    /// The route of `code`: Register for 40/45, Logout for 39, the codec's replicated
    /// operation, or NonReplicated.
    pub fn of(code: u32) -> Result<Route, ClientError> {
        if code == LOGIN_REGISTER_CODE || code == LOGIN_REGISTER_WITH_PAT_CODE {
            return Ok(Route {
                code,
                ..Route::REGISTER
            });
        }
        if code == LOGOUT_USER_CODE {
            return Ok(Route::LOGOUT);
        }
        let meta = lookup_command(code).ok_or(ClientError::UnknownCommand { code })?;
        Ok(Route {
            code,
            name: meta.name,
            operation: meta.operation.unwrap_or(Operation::NonReplicated),
        })
    }

    /// NonReplicated: the code rides at bytes 196..200 and the counter does not advance.
    pub fn is_non_replicated(&self) -> bool {
        self.operation == Operation::NonReplicated
    }

    /// Whether `request_checksum` = XxHash3-64(body): Register, Logout, metadata ops and
    /// DeleteSegments. Partition ops and NonReplicated ops leave it 0 (SPEC §1.2).
    pub fn stamps_checksum(&self) -> bool {
        matches!(
            self.operation,
            Operation::Register | Operation::Logout | Operation::DeleteSegments
        ) || self.operation.is_metadata()
    }

    /// Whether this request takes the next request number (replicated ops and Logout).
    pub fn advances_counter(&self) -> bool {
        !matches!(
            self.operation,
            Operation::Register | Operation::NonReplicated
        )
    }

    /// Whether the request may be sent again after a reconnect (SPEC §2.4): its outcome
    /// does not matter (a read, a login, a logout). Replicated ops may have been applied.
    pub fn is_replayable(&self) -> bool {
        matches!(
            self.operation,
            Operation::Register | Operation::NonReplicated | Operation::Logout
        )
    }
}

/// The identity a request header carries: the client id, the session from the login
/// reply, and the request counter (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequence {
    client: u128,
    session: u64,
    /// The number the next replicated request (or Logout) takes; what NonReplicated
    /// requests carry meanwhile. 1 right after login, 0 while unbound.
    next_request: u64,
}

impl Sequence {
    /// A connection that has not logged in (or has logged out): session 0, request 0.
    pub fn unbound(client: u128) -> Sequence {
        assert_ne!(client, 0, "client ids are nonzero");
        Sequence {
            client,
            session: 0,
            next_request: 0,
        }
    }

    /// A connection bound by a login reply: requests count from 1.
    pub fn bound(client: u128, session: u64) -> Sequence {
        assert_ne!(client, 0, "client ids are nonzero");
        assert_ne!(session, 0, "a login reply's session is nonzero");
        Sequence {
            client,
            session,
            next_request: 1,
        }
    }

    pub fn client(&self) -> u128 {
        self.client
    }

    pub fn session(&self) -> u64 {
        self.session
    }

    pub fn is_bound(&self) -> bool {
        self.session != 0
    }

    /// The request number `route` carries, advancing the counter when it must.
    fn take(&mut self, route: &Route) -> u64 {
        if route.operation == Operation::Register {
            return 0;
        }
        if !route.advances_counter() {
            return self.next_request;
        }
        assert!(self.is_bound(), "replicated requests need a session");
        let number = self.next_request;
        self.next_request = number.checked_add(1).expect("request counter overflow");
        number
    }
}

/// Builds the frame (header + body) of one request, taking its request number from
/// `sequence`.
pub fn encode_request(
    sequence: &mut Sequence,
    route: &Route,
    body: &[u8],
) -> Result<Vec<u8>, ClientError> {
    let size = HEADER_LEN + body.len();
    if size > MAX_REQUEST_BYTES {
        return Err(ClientError::InvalidRequest(format!(
            "`{}` request is {size} bytes, more than the {MAX_REQUEST_BYTES}-byte frame limit",
            route.name
        )));
    }
    if route.advances_counter() && !sequence.is_bound() {
        return Err(ClientError::NotLoggedIn {
            command: route.name,
        });
    }
    let mut header = RequestHeader {
        size: u32::try_from(size).expect("size bounded above"),
        command: Command::Request,
        client: sequence.client,
        request_checksum: if route.stamps_checksum() {
            u128::from(xxhash_rust::xxh3::xxh3_64(body))
        } else {
            0
        },
        request: sequence.take(route),
        operation: route.operation,
        session: if route.operation == Operation::Register {
            0
        } else {
            sequence.session
        },
        ..RequestHeader::default()
    };
    if route.is_non_replicated() {
        header.reserved[..4].copy_from_slice(&route.code.to_le_bytes());
    }
    let mut frame = Vec::with_capacity(size);
    frame.extend_from_slice(bytemuck::bytes_of(&header));
    frame.extend_from_slice(body);
    assert_eq!(frame.len(), size);
    Ok(frame)
}

/// What the first 256 bytes of an incoming frame announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    /// A reply with this many body bytes to read.
    Reply { body_len: usize },
    /// A session-terminal eviction (header only).
    Eviction,
}

/// Checks an incoming header before its body is read: size within `256..=max_reply_bytes`,
/// command Reply (8) or Eviction (13, exactly 256 bytes).
pub fn check_head(
    head: &[u8; HEADER_LEN],
    max_reply_bytes: u32,
) -> Result<Incoming, ProtocolError> {
    let size = iggy_binary_protocol::read_size_field(head).expect("head holds the size field");
    if (size as usize) < HEADER_LEN {
        return Err(ProtocolError::FrameTooShort { size });
    }
    if size > max_reply_bytes {
        return Err(ProtocolError::FrameTooLarge {
            size,
            max: max_reply_bytes,
        });
    }
    let command = head[COMMAND_OFFSET];
    match command {
        c if c == Command::Reply as u8 => Ok(Incoming::Reply {
            body_len: size as usize - HEADER_LEN,
        }),
        c if c == Command::Eviction as u8 => {
            if size as usize != HEADER_LEN {
                return Err(ProtocolError::EvictionWithBody { size });
            }
            Ok(Incoming::Eviction)
        }
        other => Err(ProtocolError::UnexpectedCommand { command: other }),
    }
}

/// Judges a complete reply frame to the request sent on `route` and returns the payload:
/// the body without its result section (for result-framed operations and a non-empty
/// Register reply). A nonzero status or result code is [`ClientError::Server`]; an
/// eviction is [`ClientError::Evicted`] (reason 9: [`ClientError::InvalidCredentials`]).
pub fn decode_reply(
    head: &[u8; HEADER_LEN],
    body: Bytes,
    route: &Route,
    max_reply_bytes: u32,
) -> Result<Bytes, ClientError> {
    match check_head(head, max_reply_bytes)? {
        Incoming::Eviction => Err(eviction_error(head)),
        Incoming::Reply { body_len } => {
            if body.len() != body_len {
                return Err(ProtocolError::BodyLength {
                    announced: body_len,
                    got: body.len(),
                }
                .into());
            }
            let header: ReplyHeader =
                bytemuck::checked::try_pod_read_unaligned(head).map_err(|_| {
                    ProtocolError::BadReplyHeader {
                        operation: head[208],
                    }
                })?;
            if header.operation != route.operation {
                return Err(ProtocolError::OperationMismatch {
                    sent: route.operation as u8,
                    got: header.operation as u8,
                }
                .into());
            }
            if header.status != 0 {
                return Err(ClientError::server(header.status));
            }
            strip_result_section(header.operation, body)
        }
    }
}

/// Removes the `[count][{index, result}…]` prefix of a result-framed body (SPEC §4.2).
fn strip_result_section(operation: Operation, body: Bytes) -> Result<Bytes, ClientError> {
    let framed =
        operation.is_result_framed() || (operation == Operation::Register && !body.is_empty());
    if !framed {
        return Ok(body);
    }
    let (Some(code), Some(len)) = (result_code(&body), result_section_len(&body)) else {
        return Err(ProtocolError::MalformedResultSection {
            operation: operation as u8,
            len: body.len(),
        }
        .into());
    };
    if code != 0 {
        return Err(ClientError::server(code));
    }
    Ok(body.slice(len..))
}

/// The error an eviction frame means (SPEC §1.4).
fn eviction_error(head: &[u8; HEADER_LEN]) -> ClientError {
    let reason = match bytemuck::checked::try_pod_read_unaligned::<EvictionHeader>(head) {
        Ok(eviction) => eviction.reason as u8,
        // An undecodable reason byte: the SDK treats it as Unauthenticated; keep the byte.
        Err(_) => head[HEADER_LEN - 1],
    };
    if reason == EvictionReason::InvalidCredentials as u8 {
        ClientError::InvalidCredentials
    } else {
        ClientError::Evicted { reason }
    }
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
/// undecodable byte (SPEC §1.4).
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

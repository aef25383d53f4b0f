//! Sans-IO framing of the 0.11 protocol, client side: building request frames
//! (`docs/wire.md` §1.2, §3) and judging reply frames (`docs/wire.md` §1.3, §1.4, §4).
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
    /// DeleteSegments. Partition ops and NonReplicated ops leave it 0 (`docs/wire.md` §1.2).
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

    /// Whether the request may be sent again after a reconnect (`docs/wire.md` §2.4): its outcome
    /// does not matter (a read, a login, a logout). Replicated ops may have been applied.
    pub fn is_replayable(&self) -> bool {
        matches!(
            self.operation,
            Operation::Register | Operation::NonReplicated | Operation::Logout
        )
    }
}

/// The identity a request header carries: the client id, the session from the login
/// reply, and the request counter (`docs/wire.md` §3).
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

/// Removes the `[count][{index, result}…]` prefix of a result-framed body (`docs/wire.md` §4.2).
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

/// The error an eviction frame means (`docs/wire.md` §1.4).
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

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_binary_protocol::codes::*;

    const CLIENT: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
    /// XxHash3-64 of the empty body (`docs/wire.md` §1.2), what Logout stamps.
    const EMPTY_BODY_CHECKSUM: u128 = 0x2d06_8005_38d3_94c2;

    fn route(code: u32) -> Route {
        Route::of(code).unwrap()
    }

    fn u64_at(frame: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(frame[at..at + 8].try_into().unwrap())
    }

    fn u128_at(frame: &[u8], at: usize) -> u128 {
        u128::from_le_bytes(frame[at..at + 16].try_into().unwrap())
    }

    fn u32_at(frame: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(frame[at..at + 4].try_into().unwrap())
    }

    fn zeros(frame: &[u8], range: std::ops::Range<usize>) -> bool {
        frame[range].iter().all(|&b| b == 0)
    }

    #[test]
    fn nonreplicated_header_has_every_field_of_spec_1_2() {
        let mut sequence = Sequence::bound(CLIENT, 77);
        let body = b"abc";
        let frame = encode_request(&mut sequence, &route(GET_STREAM_CODE), body).unwrap();
        assert_eq!(frame.len(), 256 + 3);
        assert!(
            zeros(&frame, 0..48),
            "checksum, checksum_body, cluster are 0"
        );
        assert_eq!(u32_at(&frame, 48), 259, "size = header + body");
        assert!(zeros(&frame, 52..60), "view, release");
        assert_eq!(frame[60], 5, "command Request");
        assert!(zeros(&frame, 61..128), "replica, reserved_frame");
        assert_eq!(u128_at(&frame, 128), CLIENT);
        assert_eq!(
            u128_at(&frame, 144),
            0,
            "NonReplicated leaves request_checksum 0"
        );
        assert_eq!(u64_at(&frame, 160), 0, "timestamp");
        assert_eq!(
            u64_at(&frame, 168),
            1,
            "the current counter right after login"
        );
        assert_eq!(frame[176], 2, "operation NonReplicated");
        assert!(zeros(&frame, 177..184), "operation padding");
        assert_eq!(u64_at(&frame, 184), 77, "session");
        assert_eq!(u32_at(&frame, 192), 0, "user_id");
        assert_eq!(u32_at(&frame, 196), GET_STREAM_CODE, "the code at 196..200");
        assert!(zeros(&frame, 200..256));
        assert_eq!(&frame[256..], body);
    }

    #[test]
    fn register_header_has_request_0_session_0_and_the_body_checksum() {
        let mut sequence = Sequence::unbound(CLIENT);
        let body = b"login body";
        let frame = encode_request(&mut sequence, &Route::REGISTER, body).unwrap();
        assert_eq!(frame[176], 1, "operation Register");
        assert_eq!(u64_at(&frame, 168), 0);
        assert_eq!(u64_at(&frame, 184), 0);
        assert_eq!(u128_at(&frame, 128), CLIENT);
        assert_eq!(
            u128_at(&frame, 144),
            u128::from(xxhash_rust::xxh3::xxh3_64(body))
        );
        assert!(zeros(&frame, 196..256), "code 40 is not on the wire");
        // Register takes 0 even on a bound sequence (a re-login).
        let mut bound = Sequence::bound(CLIENT, 5);
        let frame = encode_request(&mut bound, &Route::REGISTER, body).unwrap();
        assert_eq!(u64_at(&frame, 168), 0);
        assert_eq!(u64_at(&frame, 184), 0);
    }

    #[test]
    fn logout_stamps_the_empty_body_checksum_and_advances() {
        let mut sequence = Sequence::bound(CLIENT, 9);
        let frame = encode_request(&mut sequence, &Route::LOGOUT, &[]).unwrap();
        assert_eq!(frame[176], 3);
        assert_eq!(u128_at(&frame, 144), EMPTY_BODY_CHECKSUM);
        assert_eq!(u64_at(&frame, 168), 1);
        assert_eq!(u64_at(&frame, 184), 9);
        assert!(zeros(&frame, 196..256), "code 39 is not on the wire");
    }

    #[test]
    fn request_numbers_and_checksums_per_operation_kind() {
        let mut sequence = Sequence::bound(CLIENT, 3);
        let body = b"x";
        let stamped = u128::from(xxhash_rust::xxh3::xxh3_64(body));
        // (code, expected request, expected checksum, expected operation)
        let steps = [
            (PING_CODE, 1, 0, 2),
            (CREATE_STREAM_CODE, 1, stamped, 128),
            (GET_STREAMS_CODE, 2, 0, 2),
            (SEND_MESSAGES_CODE, 2, 0, 160),
            (STORE_CONSUMER_OFFSET_CODE, 3, 0, 161),
            (DELETE_CONSUMER_OFFSET_CODE, 4, 0, 162),
            (POLL_MESSAGES_CODE, 5, 0, 2),
            (DELETE_SEGMENTS_CODE, 5, stamped, 138),
            (JOIN_CONSUMER_GROUP_CODE, 6, stamped, 148),
            (CREATE_USER_CODE, 7, stamped, 141),
            (SYNC_CONSUMER_GROUP_CODE, 8, 0, 2),
        ];
        for (code, request, checksum, operation) in steps {
            let frame = encode_request(&mut sequence, &route(code), body).unwrap();
            assert_eq!(
                u64_at(&frame, 168),
                request,
                "request number of code {code}"
            );
            assert_eq!(u128_at(&frame, 144), checksum, "checksum of code {code}");
            assert_eq!(frame[176], operation, "operation of code {code}");
            let carried = u32_at(&frame, 196);
            if operation == 2 {
                assert_eq!(carried, code);
            } else {
                assert_eq!(carried, 0, "only NonReplicated carries its code");
            }
        }
    }

    #[test]
    fn unbound_reads_carry_zeros_and_writes_are_refused() {
        let mut sequence = Sequence::unbound(CLIENT);
        let frame = encode_request(&mut sequence, &route(PING_CODE), &[]).unwrap();
        assert_eq!(u64_at(&frame, 168), 0);
        assert_eq!(u64_at(&frame, 184), 0);
        assert_eq!(u32_at(&frame, 196), PING_CODE);
        let refused = encode_request(&mut sequence, &route(CREATE_STREAM_CODE), &[]);
        assert!(matches!(refused, Err(ClientError::NotLoggedIn { .. })));
        let refused = encode_request(&mut sequence, &Route::LOGOUT, &[]);
        assert!(matches!(refused, Err(ClientError::NotLoggedIn { .. })));
    }

    #[test]
    fn oversized_requests_are_refused() {
        let mut sequence = Sequence::bound(CLIENT, 1);
        let body = vec![0u8; MAX_REQUEST_BYTES - HEADER_LEN + 1];
        let refused = encode_request(&mut sequence, &route(POLL_MESSAGES_CODE), &body);
        assert!(matches!(refused, Err(ClientError::InvalidRequest(_))));
        let body = vec![0u8; MAX_REQUEST_BYTES - HEADER_LEN];
        assert!(encode_request(&mut sequence, &route(POLL_MESSAGES_CODE), &body).is_ok());
    }

    #[test]
    fn routes_of_the_special_codes() {
        assert_eq!(route(LOGIN_REGISTER_CODE).operation, Operation::Register);
        assert_eq!(
            route(LOGIN_REGISTER_WITH_PAT_CODE).operation,
            Operation::Register
        );
        assert_eq!(route(LOGOUT_USER_CODE), Route::LOGOUT);
        assert_eq!(route(SEND_MESSAGES_CODE).operation, Operation::SendMessages);
        assert_eq!(route(GET_STATS_CODE).operation, Operation::NonReplicated);
        assert!(matches!(
            Route::of(999),
            Err(ClientError::UnknownCommand { code: 999 })
        ));
        assert!(route(PING_CODE).is_replayable());
        assert!(Route::REGISTER.is_replayable());
        assert!(Route::LOGOUT.is_replayable());
        assert!(!route(CREATE_STREAM_CODE).is_replayable());
        assert!(!route(SEND_MESSAGES_CODE).is_replayable());
        assert!(!route(STORE_CONSUMER_OFFSET_CODE).is_replayable());
    }

    // ---- replies ----

    const MAX: u32 = 4096;

    fn reply_head(operation: Operation, status: u32, body_len: usize) -> [u8; HEADER_LEN] {
        let header = ReplyHeader {
            size: (HEADER_LEN + body_len) as u32,
            command: Command::Reply,
            operation,
            status,
            client: CLIENT,
            ..ReplyHeader::default()
        };
        bytemuck::bytes_of(&header).try_into().unwrap()
    }

    fn eviction_head(reason: EvictionReason) -> [u8; HEADER_LEN] {
        let header = EvictionHeader::new(0, 0, 0, CLIENT, reason);
        bytemuck::bytes_of(&header).try_into().unwrap()
    }

    fn decode(
        route: &Route,
        operation: Operation,
        status: u32,
        body: &[u8],
    ) -> Result<Bytes, ClientError> {
        let head = reply_head(operation, status, body.len());
        decode_reply(&head, Bytes::copy_from_slice(body), route, MAX)
    }

    fn result_body(count: u32, code: u32, payload: &[u8]) -> Vec<u8> {
        let mut body = count.to_le_bytes().to_vec();
        if count > 0 {
            body.extend_from_slice(&0u32.to_le_bytes());
            body.extend_from_slice(&code.to_le_bytes());
        }
        body.extend_from_slice(payload);
        body
    }

    #[test]
    fn nonzero_status_is_a_server_error_named_by_its_code() {
        let get = route(GET_STREAM_CODE);
        let error = decode(&get, Operation::NonReplicated, 1009, &[]).unwrap_err();
        assert!(matches!(
            error,
            ClientError::Server {
                code: 1009,
                name: "StreamIdNotFound"
            }
        ));
        assert_eq!(
            error.to_string(),
            "server refused: StreamIdNotFound (code 1009)"
        );
        let error = decode(&get, Operation::NonReplicated, 42, &[]).unwrap_err();
        assert!(matches!(error, ClientError::InvalidCredentials));
        // Status is checked before the result section, even for a framed op.
        let create = route(CREATE_STREAM_CODE);
        let error = decode(&create, Operation::CreateStream, 41, &[]).unwrap_err();
        assert_eq!(error.code(), Some(41));
    }

    #[test]
    fn result_section_is_stripped_on_success_and_its_code_is_an_error() {
        let create = route(CREATE_STREAM_CODE);
        let payload = decode(
            &create,
            Operation::CreateStream,
            0,
            &result_body(0, 0, b"stream"),
        )
        .unwrap();
        assert_eq!(&payload[..], b"stream");
        let error = decode(
            &create,
            Operation::CreateStream,
            0,
            &result_body(1, 1012, &[]),
        )
        .unwrap_err();
        assert!(matches!(error, ClientError::Server { code: 1012, .. }));
        let store = route(STORE_CONSUMER_OFFSET_CODE);
        let payload = decode(
            &store,
            Operation::StoreConsumerOffset,
            0,
            &result_body(0, 0, &[]),
        )
        .unwrap();
        assert!(payload.is_empty());
    }

    #[test]
    fn malformed_or_missing_result_sections_are_protocol_errors() {
        let create = route(CREATE_STREAM_CODE);
        for body in [
            &[][..],
            &[1, 0, 0, 0][..],
            &[1, 0, 0, 0, 0, 0, 0, 0][..],
            &[0, 0][..],
        ] {
            let error = decode(&create, Operation::CreateStream, 0, body).unwrap_err();
            assert!(
                matches!(
                    error,
                    ClientError::Protocol(ProtocolError::MalformedResultSection { .. })
                ),
                "body {body:?}: {error}"
            );
        }
    }

    #[test]
    fn unframed_operations_return_the_body_untouched() {
        // A NonReplicated body that happens to start with a zero u32 keeps it.
        let body = result_body(0, 0, b"tail");
        let payload = decode(&route(GET_STATS_CODE), Operation::NonReplicated, 0, &body).unwrap();
        assert_eq!(&payload[..], &body[..]);
        let payload = decode(
            &route(SEND_MESSAGES_CODE),
            Operation::SendMessages,
            0,
            &body,
        )
        .unwrap();
        assert_eq!(&payload[..], &body[..]);
        let payload = decode(
            &route(DELETE_SEGMENTS_CODE),
            Operation::DeleteSegments,
            0,
            &body,
        )
        .unwrap();
        assert_eq!(&payload[..], &body[..]);
        let payload = decode(&Route::LOGOUT, Operation::Logout, 0, &[]).unwrap();
        assert!(payload.is_empty());
    }

    #[test]
    fn register_reply_is_framed_only_when_not_empty() {
        let payload = decode(
            &Route::REGISTER,
            Operation::Register,
            0,
            &result_body(0, 0, b"who"),
        )
        .unwrap();
        assert_eq!(&payload[..], b"who");
        let payload = decode(&Route::REGISTER, Operation::Register, 0, &[]).unwrap();
        assert!(payload.is_empty());
        let error = decode(
            &Route::REGISTER,
            Operation::Register,
            0,
            &result_body(1, 42, &[]),
        )
        .unwrap_err();
        assert!(matches!(error, ClientError::InvalidCredentials));
    }

    #[test]
    fn a_reply_to_another_operation_is_a_protocol_error() {
        let error =
            decode(&route(CREATE_STREAM_CODE), Operation::NonReplicated, 0, &[]).unwrap_err();
        assert!(matches!(
            error,
            ClientError::Protocol(ProtocolError::OperationMismatch { sent: 128, got: 2 })
        ));
        let mut head = reply_head(Operation::NonReplicated, 0, 0);
        head[208] = 77; // not an Operation discriminant
        let error = decode_reply(&head, Bytes::new(), &route(PING_CODE), MAX).unwrap_err();
        assert!(matches!(
            error,
            ClientError::Protocol(ProtocolError::BadReplyHeader { operation: 77 })
        ));
    }

    #[test]
    fn evictions_map_to_their_errors() {
        let ping = route(PING_CODE);
        let head = eviction_head(EvictionReason::InvalidCredentials);
        let error = decode_reply(&head, Bytes::new(), &Route::REGISTER, MAX).unwrap_err();
        assert!(matches!(error, ClientError::InvalidCredentials));
        assert_eq!(error.to_string(), "wrong username or password");
        let head = eviction_head(EvictionReason::StaleClient);
        let error = decode_reply(&head, Bytes::new(), &ping, MAX).unwrap_err();
        assert!(matches!(error, ClientError::Evicted { reason: 13 }));
        assert!(error.triggers_reconnect());
        assert!(error.to_string().contains("StaleClient"));
        let head = eviction_head(EvictionReason::MalformedLogin);
        let error = decode_reply(&head, Bytes::new(), &ping, MAX).unwrap_err();
        assert!(!error.triggers_reconnect(), "reason 15 maps to 4, not 40");
        // An undecodable reason byte keeps the byte and reconnects (the SDK's 40).
        let mut head = eviction_head(EvictionReason::NoSession);
        head[255] = 200;
        let error = decode_reply(&head, Bytes::new(), &ping, MAX).unwrap_err();
        assert!(matches!(error, ClientError::Evicted { reason: 200 }));
        assert!(error.triggers_reconnect());
    }

    #[test]
    fn frames_are_bounded_and_must_be_replies_or_evictions() {
        let mut head = reply_head(Operation::NonReplicated, 0, 0);
        head[48..52].copy_from_slice(&255u32.to_le_bytes());
        assert!(matches!(
            check_head(&head, MAX),
            Err(ProtocolError::FrameTooShort { size: 255 })
        ));
        head[48..52].copy_from_slice(&(MAX + 1).to_le_bytes());
        assert!(matches!(
            check_head(&head, MAX),
            Err(ProtocolError::FrameTooLarge { size, max: MAX }) if size == MAX + 1
        ));
        head[48..52].copy_from_slice(&MAX.to_le_bytes());
        assert_eq!(
            check_head(&head, MAX).unwrap(),
            Incoming::Reply {
                body_len: MAX as usize - 256
            }
        );
        head[60] = 5;
        assert!(matches!(
            check_head(&head, MAX),
            Err(ProtocolError::UnexpectedCommand { command: 5 })
        ));
        let mut head = eviction_head(EvictionReason::NoSession);
        assert_eq!(check_head(&head, MAX).unwrap(), Incoming::Eviction);
        head[48..52].copy_from_slice(&300u32.to_le_bytes());
        assert!(matches!(
            check_head(&head, MAX),
            Err(ProtocolError::EvictionWithBody { size: 300 })
        ));
    }

    #[test]
    fn a_body_shorter_than_announced_is_refused() {
        let head = reply_head(Operation::NonReplicated, 0, 10);
        let error =
            decode_reply(&head, Bytes::from_static(b"short"), &route(PING_CODE), MAX).unwrap_err();
        assert!(matches!(
            error,
            ClientError::Protocol(ProtocolError::BodyLength {
                announced: 10,
                got: 5
            })
        ));
    }
}

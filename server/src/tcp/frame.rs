//! Sans-IO framing of Iggy 0.11's binary protocol, server side (`docs/wire.md` §1): every
//! frame is a 256-byte header whose `size` (u32 at 48) is the whole frame's length, then the
//! body. Requests decode into the codec's [`RequestHeader`]; replies and
//! evictions are built from the codec's [`ReplyHeader`] and [`EvictionHeader`].
//!
//! What breaks the framing (a size below 256 or above the limit) closes the connection: the
//! next frame's start is unknown. Everything else about a frame (an unknown operation, a
//! command byte that is not `Request`, reserved bytes set, a checksum that does not match the
//! body) is answered with a status and the connection stays usable.

use crate::command::codes as status;
use bytes::{BufMut, BytesMut};
use iggy_binary_protocol::{
    Command, EvictionHeader, EvictionReason, Operation, ReplyHeader, RequestHeader, HEADER_SIZE,
    SIZE_FIELD_OFFSET,
};

/// The framing is broken: the connection must close.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} is below the {HEADER_SIZE}-byte header")]
    TooSmall { size: u32 },
    #[error("frame size {size} exceeds the limit of {limit} bytes")]
    TooBig { size: u32, limit: u32 },
}

/// The body length a header announces, checked against the limit.
pub fn body_len(header: &[u8; HEADER_SIZE], max_frame: u32) -> Result<usize, FrameError> {
    let size = u32::from_le_bytes(
        header[SIZE_FIELD_OFFSET..SIZE_FIELD_OFFSET + 4]
            .try_into()
            .expect("4 bytes"),
    );
    if (size as usize) < HEADER_SIZE {
        return Err(FrameError::TooSmall { size });
    }
    if size > max_frame {
        return Err(FrameError::TooBig {
            size,
            limit: max_frame,
        });
    }
    Ok(size as usize - HEADER_SIZE)
}

/// A request header that is well framed but cannot be served, with the status to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("the header does not decode (command {command}, operation {operation})")]
    Undecodable { command: u8, operation: u8 },
    #[error("command {0:?} is not a request")]
    NotARequest(Command),
    #[error("client id 0")]
    NoClient,
    #[error("operation {0:?} is not one a client may send")]
    NotClientOperation(Operation),
    #[error("reserved header bytes are set")]
    ReservedSet,
    #[error("request checksum {sent:#x} does not match the body's {computed:#x}")]
    ChecksumMismatch { sent: u128, computed: u128 },
    #[error("unknown command code {0}")]
    UnknownCode(u32),
}

impl HeaderError {
    pub fn status(&self) -> u32 {
        match self {
            HeaderError::ChecksumMismatch { .. } | HeaderError::ReservedSet => {
                status::INVALID_FORMAT
            }
            _ => status::INVALID_COMMAND,
        }
    }
}

/// A request whose header checked out: its command code (the wire's for `NonReplicated`,
/// derived from the operation otherwise).
#[derive(Debug, Clone)]
pub struct Request {
    pub header: RequestHeader,
    pub code: u32,
}

/// The fields a reply echoes, readable even from a header that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo {
    pub client: u128,
    pub request: u64,
    pub request_checksum: u128,
    /// The request's operation when it is a valid discriminant, else `Reserved`.
    pub operation: Operation,
}

fn u128_at(bytes: &[u8], at: usize) -> u128 {
    u128::from_le_bytes(bytes[at..at + 16].try_into().expect("16 bytes"))
}

impl Echo {
    pub fn of(header: &[u8; HEADER_SIZE]) -> Echo {
        Echo {
            client: u128_at(header, 128),
            request_checksum: u128_at(header, 144),
            request: u64::from_le_bytes(header[168..176].try_into().expect("8 bytes")),
            operation: bytemuck::checked::try_cast::<u8, Operation>(header[176])
                .unwrap_or(Operation::Reserved),
        }
    }

    pub fn from_header(header: &RequestHeader) -> Echo {
        Echo {
            client: header.client,
            request: header.request,
            request_checksum: header.request_checksum,
            operation: header.operation,
        }
    }
}

/// The command code of a `NonReplicated` request's header, if it decodes as one.
pub fn non_replicated_code(header: &[u8; HEADER_SIZE]) -> Option<u32> {
    let decoded: RequestHeader = bytemuck::checked::try_pod_read_unaligned(header).ok()?;
    (decoded.operation == Operation::NonReplicated).then(|| wire_code(&decoded))
}

/// The command code a `NonReplicated` request carries at header bytes 196..200.
fn wire_code(header: &RequestHeader) -> u32 {
    u32::from_le_bytes(header.reserved[..4].try_into().expect("4 bytes"))
}

/// XxHash3-64 of a body, widened as the SDK stamps it.
pub fn body_checksum(body: &[u8]) -> u128 {
    u128::from(xxhash_rust::xxh3::xxh3_64(body))
}

/// Decodes and checks a request header against its body (`docs/wire.md` §1.2).
pub fn decode_request(header: &[u8; HEADER_SIZE], body: &[u8]) -> Result<Request, HeaderError> {
    let decoded: RequestHeader =
        bytemuck::checked::try_pod_read_unaligned(header).map_err(|_| {
            HeaderError::Undecodable {
                command: header[60],
                operation: header[176],
            }
        })?;
    if decoded.command != Command::Request {
        return Err(HeaderError::NotARequest(decoded.command));
    }
    if decoded.client == 0 {
        return Err(HeaderError::NoClient);
    }
    let operation = decoded.operation;
    if !operation.is_client_allowed() {
        return Err(HeaderError::NotClientOperation(operation));
    }
    let reserved_from = if operation == Operation::NonReplicated {
        4
    } else {
        0
    };
    if decoded.reserved[reserved_from..].iter().any(|&b| b != 0)
        || decoded.operation_padding.iter().any(|&b| b != 0)
    {
        return Err(HeaderError::ReservedSet);
    }
    if decoded.request_checksum != 0 {
        let computed = body_checksum(body);
        if computed != decoded.request_checksum {
            return Err(HeaderError::ChecksumMismatch {
                sent: decoded.request_checksum,
                computed,
            });
        }
    }
    let code = match operation {
        Operation::NonReplicated => wire_code(&decoded),
        Operation::Register => iggy_binary_protocol::codes::LOGIN_REGISTER_CODE,
        Operation::Logout => iggy_binary_protocol::codes::LOGOUT_USER_CODE,
        other => other
            .to_command_code()
            .ok_or(HeaderError::NotClientOperation(other))?,
    };
    if operation == Operation::NonReplicated
        && (iggy_binary_protocol::lookup_command(code).is_none_or(|meta| meta.is_replicated()))
    {
        return Err(HeaderError::UnknownCode(code));
    }
    Ok(Request {
        header: decoded,
        code,
    })
}

/// What the reply header carries besides the echo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplyMeta {
    pub session: u64,
    /// The metadata commit number the reply reflects (the view's op).
    pub commit: u64,
}

/// The `[count = 0]` result section a result-framed success starts with (`docs/wire.md` §4.2).
pub const RESULT_OK: [u8; 4] = 0u32.to_le_bytes();

/// A reply frame: the header echoing the request, then `body` (empty when `status` ≠ 0),
/// behind the result section when `framed`.
pub fn reply(echo: Echo, meta: ReplyMeta, status: u32, framed: bool, body: &[u8]) -> BytesMut {
    let (prefix, body): (&[u8], &[u8]) = match (status, framed) {
        (0, true) => (&RESULT_OK, body),
        (0, false) => (&[], body),
        _ => (&[], &[]),
    };
    let len = prefix.len() + body.len();
    let mut frame = BytesMut::with_capacity(HEADER_SIZE + len);
    frame.put_slice(&reply_header(echo, meta, status, len));
    frame.put_slice(prefix);
    frame.put_slice(body);
    frame
}

/// A reply header for `body_len` bytes of body (a poll's caller appends its stored batches
/// itself).
pub fn reply_header(
    echo: Echo,
    meta: ReplyMeta,
    status: u32,
    body_len: usize,
) -> [u8; HEADER_SIZE] {
    let header = ReplyHeader {
        size: u32::try_from(HEADER_SIZE + body_len).expect("replies are bounded below 4 GiB"),
        command: Command::Reply,
        request_checksum: echo.request_checksum,
        client: echo.client,
        op: meta.session,
        commit: meta.commit,
        request: echo.request,
        operation: echo.operation,
        status,
        ..ReplyHeader::default()
    };
    let mut out = [0u8; HEADER_SIZE];
    out.copy_from_slice(bytemuck::bytes_of(&header));
    out
}

/// A session-terminal eviction (`docs/wire.md` §1.4). A zero client id is replaced by 1: the SDK
/// refuses an eviction for client 0.
pub fn eviction(client: u128, reason: EvictionReason) -> BytesMut {
    let client = client.max(1);
    let header = if reason == EvictionReason::IncompatibleProtocol {
        EvictionHeader::incompatible_protocol(
            0,
            0,
            0,
            client,
            iggy_binary_protocol::IGGY_PROTOCOL_VERSION,
            iggy_binary_protocol::IGGY_PROTOCOL_VERSION_MIN,
        )
    } else {
        EvictionHeader::new(0, 0, 0, client, reason)
    };
    BytesMut::from(bytemuck::bytes_of(&header))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(operation: Operation, code: u32, body: &[u8]) -> [u8; HEADER_SIZE] {
        let mut header = RequestHeader {
            checksum: 0,
            checksum_body: 0,
            cluster: 0,
            size: (HEADER_SIZE + body.len()) as u32,
            view: 0,
            release: 0,
            command: Command::Request,
            replica: 0,
            reserved_frame: [0; 66],
            client: 7,
            request_checksum: 0,
            timestamp: 0,
            request: 3,
            operation,
            operation_padding: [0; 7],
            session: 9,
            user_id: 0,
            reserved: [0; 60],
        };
        if operation == Operation::NonReplicated {
            header.reserved[..4].copy_from_slice(&code.to_le_bytes());
        } else {
            header.request_checksum = body_checksum(body);
        }
        let mut out = [0u8; HEADER_SIZE];
        out.copy_from_slice(bytemuck::bytes_of(&header));
        out
    }

    #[test]
    fn sizes_outside_the_frame_bounds_break_the_framing() {
        let mut header = request(Operation::NonReplicated, 1, &[]);
        assert_eq!(body_len(&header, 1024), Ok(0));
        header[48..52].copy_from_slice(&255u32.to_le_bytes());
        assert_eq!(
            body_len(&header, 1024),
            Err(FrameError::TooSmall { size: 255 })
        );
        header[48..52].copy_from_slice(&1025u32.to_le_bytes());
        assert_eq!(
            body_len(&header, 1024),
            Err(FrameError::TooBig {
                size: 1025,
                limit: 1024
            })
        );
    }

    #[test]
    fn a_non_replicated_request_carries_its_code_and_a_replicated_one_derives_it() {
        let ping = request(Operation::NonReplicated, 1, &[]);
        assert_eq!(decode_request(&ping, &[]).unwrap().code, 1);
        let body = [1u8, 2, 3];
        let create = request(Operation::CreateStream, 0, &body);
        assert_eq!(decode_request(&create, &body).unwrap().code, 202);
        let unknown = request(Operation::NonReplicated, 9999, &[]);
        assert_eq!(
            decode_request(&unknown, &[]).unwrap_err(),
            HeaderError::UnknownCode(9999)
        );
        // A replicated command's code sent as NonReplicated is not a read.
        let sneaky = request(Operation::NonReplicated, 202, &[]);
        assert_eq!(
            decode_request(&sneaky, &[]).unwrap_err(),
            HeaderError::UnknownCode(202)
        );
    }

    #[test]
    fn checksum_reserved_bytes_and_command_are_checked() {
        let body = [1u8, 2, 3];
        let create = request(Operation::CreateStream, 0, &body);
        let err = decode_request(&create, &[1, 2, 4]).unwrap_err();
        assert!(matches!(err, HeaderError::ChecksumMismatch { .. }));
        assert_eq!(err.status(), status::INVALID_FORMAT);
        let mut reserved = create;
        reserved[200] = 1;
        assert_eq!(
            decode_request(&reserved, &body).unwrap_err(),
            HeaderError::ReservedSet
        );
        let mut reply_cmd = create;
        reply_cmd[60] = Command::Reply as u8;
        assert!(matches!(
            decode_request(&reply_cmd, &body).unwrap_err(),
            HeaderError::NotARequest(Command::Reply)
        ));
        let mut bad_op = create;
        bad_op[176] = 250;
        assert!(matches!(
            decode_request(&bad_op, &body).unwrap_err(),
            HeaderError::Undecodable { .. }
        ));
        assert_eq!(Echo::of(&bad_op).operation, Operation::Reserved);
        let mut no_client = create;
        no_client[128..144].fill(0);
        assert_eq!(
            decode_request(&no_client, &body).unwrap_err(),
            HeaderError::NoClient
        );
    }

    #[test]
    fn a_reply_echoes_the_request_and_drops_its_body_on_an_error() {
        let header = request(Operation::CreateStream, 0, b"abc");
        let echo = Echo::of(&header);
        let meta = ReplyMeta {
            session: 5,
            commit: 11,
        };
        let ok = reply(echo, meta, 0, false, b"xyz");
        let decoded: ReplyHeader = bytemuck::checked::try_pod_read_unaligned(&ok[..256]).unwrap();
        assert_eq!(decoded.size, 259);
        assert_eq!(decoded.command, Command::Reply);
        assert_eq!(decoded.operation, Operation::CreateStream);
        assert_eq!(decoded.client, 7);
        assert_eq!(decoded.request, 3);
        assert_eq!(decoded.op, 5);
        assert_eq!(decoded.commit, 11);
        assert_eq!(&ok[256..], b"xyz");
        let framed = reply(echo, meta, 0, true, b"xyz");
        assert_eq!(u32::from_le_bytes(framed[48..52].try_into().unwrap()), 263);
        assert_eq!(
            &framed[256..],
            b"\0\0\0\0xyz",
            "the result section, then the payload"
        );
        let err = reply(echo, meta, 1009, true, b"xyz");
        assert_eq!(err.len(), 256);
        assert_eq!(u32::from_le_bytes(err[216..220].try_into().unwrap()), 1009);
    }

    #[test]
    fn an_eviction_names_its_reason_and_the_protocol_window() {
        let frame = eviction(0, EvictionReason::IncompatibleProtocol);
        assert_eq!(frame.len(), 256);
        assert_eq!(frame[60], Command::Eviction as u8);
        assert_eq!(frame[255], 14);
        assert_eq!(u128_at(&frame, 128), 1);
        assert_ne!(u32::from_le_bytes(frame[144..148].try_into().unwrap()), 0);
        let frame = eviction(5, EvictionReason::InvalidCredentials);
        assert_eq!(frame[255], 9);
        assert_eq!(u32::from_le_bytes(frame[144..148].try_into().unwrap()), 0);
    }
}

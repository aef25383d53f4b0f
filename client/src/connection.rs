//! One TCP connection over the [`ByteStream`] seam: write a request frame, read exactly
//! one reply frame (lockstep, `docs/wire.md` §1), everything under a deadline.

use crate::error::ClientError;
use crate::frame::{check_head, Incoming, HEADER_LEN};
use bytes::{Bytes, BytesMut};
use cairn_engine::env::{race, ByteStream, Clock, Deadline, Either, Net};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// A complete frame as read: its header and its body.
#[derive(Debug, Clone)]
pub struct RawFrame {
    pub head: [u8; HEADER_LEN],
    pub body: Bytes,
}

/// One open connection to a server. Dropped on any transport or protocol failure: after
/// one, the byte stream's position is unknown.
pub struct Connection {
    stream: Box<dyn ByteStream>,
    address: SocketAddr,
    max_reply_bytes: u32,
    /// Every round trip's timeout: one timer re-armed, not one made per request.
    deadline: Box<dyn Deadline>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Opens a TCP connection to `address`, giving up after `timeout`.
    #[tracing::instrument(level = "debug", skip(net, clock))]
    pub async fn open(
        net: &dyn Net,
        clock: &dyn Clock,
        address: SocketAddr,
        timeout: Duration,
        max_reply_bytes: u32,
    ) -> Result<Connection, ClientError> {
        assert!(max_reply_bytes as usize >= HEADER_LEN);
        match race(net.connect(address), clock.sleep(timeout)).await {
            Either::Left(Ok(stream)) => Ok(Connection {
                stream,
                address,
                max_reply_bytes,
                deadline: clock.deadline(),
            }),
            Either::Left(Err(source)) => Err(ClientError::Unreachable { address, source }),
            Either::Right(()) => Err(ClientError::Timeout {
                address,
                waiting_for: "the TCP connection",
                after: timeout,
            }),
        }
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Writes `frame` and reads one reply frame, both within `timeout`.
    #[tracing::instrument(level = "trace", skip(self, frame), fields(address = %self.address, len = frame.len()))]
    pub async fn round_trip(
        &mut self,
        frame: &[u8],
        timeout: Duration,
    ) -> Result<RawFrame, ClientError> {
        let address = self.address;
        self.deadline.reset(timeout);
        let exchange = exchange(self.stream.as_mut(), address, self.max_reply_bytes, frame);
        match race(exchange, self.deadline.passed()).await {
            Either::Left(result) => result,
            Either::Right(()) => Err(ClientError::Timeout {
                address,
                waiting_for: "a reply",
                after: timeout,
            }),
        }
    }

    /// Closes the write half, best effort (the server sees EOF).
    pub async fn close(mut self) {
        if let Err(error) = self.stream.shutdown().await {
            tracing::debug!(address = %self.address, %error, "shutdown failed");
        }
    }
}

async fn exchange(
    stream: &mut dyn ByteStream,
    address: SocketAddr,
    max_reply_bytes: u32,
    frame: &[u8],
) -> Result<RawFrame, ClientError> {
    assert!(frame.len() >= HEADER_LEN);
    stream
        .write_all(frame)
        .await
        .map_err(|source| ClientError::Disconnected { address, source })?;
    let mut head = BytesMut::with_capacity(HEADER_LEN);
    read_exact(stream, address, &mut head).await?;
    let head: [u8; HEADER_LEN] = head[..].try_into().expect("a whole header");
    let body_len = match check_head(&head, max_reply_bytes)? {
        Incoming::Reply { body_len } => body_len,
        Incoming::Eviction => 0,
    };
    assert!(HEADER_LEN + body_len <= max_reply_bytes as usize);
    let mut body = BytesMut::with_capacity(body_len);
    read_exact(stream, address, &mut body).await?;
    Ok(RawFrame {
        head,
        body: body.freeze(),
    })
}

/// Fills `buf` to its capacity, into the uninitialised room (never more: `with_capacity`
/// allocates exactly, so the next frame stays in the socket).
async fn read_exact(
    stream: &mut dyn ByteStream,
    address: SocketAddr,
    buf: &mut BytesMut,
) -> Result<(), ClientError> {
    let want = buf.capacity();
    while buf.len() < want {
        match stream.read_buf(buf).await {
            Ok(0) => {
                return Err(ClientError::Disconnected {
                    address,
                    source: io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "server closed the connection {} bytes into a {want}-byte read",
                            buf.len()
                        ),
                    ),
                })
            }
            Ok(_) => assert!(buf.len() <= want, "read past the capacity asked for"),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(ClientError::Disconnected { address, source }),
        }
    }
    Ok(())
}

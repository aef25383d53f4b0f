//! A connection's read side: one small buffer that each `recv` fills as far as the bytes
//! that arrived allow, so a small request's header and body come in one call; a body larger
//! than the buffer is read straight into an allocation of its own, uninitialised (no memset
//! before the kernel's copy).
//!
//! A body never shares the buffer's allocation: a send's batch is journaled as the body's
//! bytes, and a slice of a shared buffer would pin all of it for as long as the journal
//! holds the batch. A small body is copied out (what zeroing it cost before); the buffer
//! itself is reused, at most [`INBOX_BYTES`] per connection, whatever the request sizes.

use bytes::{Buf, BytesMut};
use cairn_engine::env::ByteStream;
use std::io;

/// The read buffer's size: a frame of a few messages fits whole. With the connection limit
/// (`tcp.max_connections`) it bounds what read-ahead holds: 4,096 connections × 8 KiB.
pub const INBOX_BYTES: usize = 8 * 1024;

/// Why a read stopped.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed its side before the bytes asked for came.
    Closed,
    Io(io::Error),
}

/// Bytes read ahead of the frame being parsed (a pipelining client's next request stays
/// here, in order).
#[derive(Default)]
pub struct Inbox {
    buffered: BytesMut,
}

impl Inbox {
    /// Fills `header` with the next bytes.
    pub async fn header(
        &mut self,
        stream: &mut dyn ByteStream,
        header: &mut [u8],
    ) -> Result<(), ReadError> {
        assert!(header.len() <= INBOX_BYTES);
        self.fill(stream, header.len()).await?;
        header.copy_from_slice(&self.buffered[..header.len()]);
        self.buffered.advance(header.len());
        Ok(())
    }

    /// The next `len` bytes, in an allocation of their own.
    pub async fn body(
        &mut self,
        stream: &mut dyn ByteStream,
        len: usize,
    ) -> Result<BytesMut, ReadError> {
        if len <= INBOX_BYTES {
            self.fill(stream, len).await?;
            let body = BytesMut::from(&self.buffered[..len]);
            self.buffered.advance(len);
            return Ok(body);
        }
        let mut body = BytesMut::with_capacity(len);
        let ahead = self.buffered.len().min(len);
        body.extend_from_slice(&self.buffered[..ahead]);
        self.buffered.advance(ahead);
        while body.len() < len {
            // `with_capacity` allocates exactly `len`: a read never takes bytes of the next
            // frame into this body.
            let spare = body.capacity() - body.len();
            assert!(
                spare > 0 && body.len() + spare <= len,
                "a body's exact capacity"
            );
            read_some(stream, &mut body).await?;
        }
        assert_eq!(body.len(), len);
        Ok(body)
    }

    /// Reads and drops the next `len` bytes, a buffer at a time.
    pub async fn discard(
        &mut self,
        stream: &mut dyn ByteStream,
        mut len: usize,
    ) -> Result<(), ReadError> {
        while len > 0 {
            let n = len.min(INBOX_BYTES);
            self.fill(stream, n).await?;
            self.buffered.advance(n);
            len -= n;
        }
        Ok(())
    }

    /// Reads until at least `n` bytes are buffered, taking whatever else already arrived
    /// (up to the buffer's size).
    async fn fill(&mut self, stream: &mut dyn ByteStream, n: usize) -> Result<(), ReadError> {
        assert!(n <= INBOX_BYTES);
        while self.buffered.len() < n {
            let room = INBOX_BYTES - self.buffered.len();
            if self.buffered.capacity() - self.buffered.len() < room {
                if self.buffered.is_empty() {
                    // Reclaims the consumed front in place (never shared: bodies are copied).
                    self.buffered.reserve(room);
                } else {
                    // `reserve` would double the buffer while unread bytes remain: the
                    // remainder moves to a buffer of exactly INBOX_BYTES instead.
                    let mut fresh = BytesMut::with_capacity(INBOX_BYTES);
                    fresh.extend_from_slice(&self.buffered);
                    self.buffered = fresh;
                }
            }
            assert!(
                self.buffered.capacity() <= 2 * INBOX_BYTES,
                "read-ahead is bounded"
            );
            read_some(stream, &mut self.buffered).await?;
        }
        Ok(())
    }
}

/// One read into `buf`'s spare capacity: at least one byte, or why not.
async fn read_some(stream: &mut dyn ByteStream, buf: &mut BytesMut) -> Result<(), ReadError> {
    loop {
        match stream.read_buf(buf).await {
            Ok(0) => return Err(ReadError::Closed),
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::env::BoxFuture;

    /// A stream that hands out its bytes in reads of at most `per_read`, and counts them.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        per_read: usize,
        reads: usize,
    }

    impl ByteStream for Trickle {
        fn read<'a>(&'a mut self, buf: &'a mut [u8]) -> BoxFuture<'a, io::Result<usize>> {
            let n = buf.len().min(self.per_read).min(self.bytes.len() - self.at);
            buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            self.reads += 1;
            Box::pin(std::future::ready(Ok(n)))
        }
        fn write_all<'a>(&'a mut self, _: &'a [u8]) -> BoxFuture<'a, io::Result<()>> {
            Box::pin(std::future::ready(Ok(())))
        }
        fn shutdown(&mut self) -> BoxFuture<'_, io::Result<()>> {
            Box::pin(std::future::ready(Ok(())))
        }
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        let mut future = std::pin::pin!(future);
        let waker = std::task::Waker::noop();
        match future
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
        {
            std::task::Poll::Ready(value) => value,
            std::task::Poll::Pending => panic!("a trickle is always ready"),
        }
    }

    /// Frames of `[len: u8][len bytes]`, read back through an inbox.
    fn frames(sizes: &[usize]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            bytes.extend_from_slice(&(size as u32).to_le_bytes());
            bytes.extend((0..size).map(|j| (i * 7 + j) as u8));
        }
        bytes
    }

    fn read_back(sizes: &[usize], per_read: usize) -> (Vec<Vec<u8>>, usize) {
        let mut stream = Trickle {
            bytes: frames(sizes),
            at: 0,
            per_read,
            reads: 0,
        };
        let mut inbox = Inbox::default();
        let mut out = Vec::new();
        for _ in sizes {
            let mut head = [0u8; 4];
            block_on(inbox.header(&mut stream, &mut head)).expect("a header");
            let len = u32::from_le_bytes(head) as usize;
            let body = block_on(inbox.body(&mut stream, len)).expect("a body");
            assert!(
                body.capacity() < len + INBOX_BYTES,
                "a body owns its allocation"
            );
            out.push(body.to_vec());
        }
        assert!(matches!(
            block_on(inbox.header(&mut stream, &mut [0u8; 4])),
            Err(ReadError::Closed)
        ));
        (out, stream.reads)
    }

    #[test]
    fn frames_of_every_size_come_back_whole_and_in_order_however_the_bytes_arrive() {
        let sizes = [
            0,
            1,
            100,
            INBOX_BYTES - 4,
            INBOX_BYTES,
            INBOX_BYTES + 1,
            300_000,
            3,
        ];
        let expected: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| (0..size).map(|j| (i * 7 + j) as u8).collect())
            .collect();
        for per_read in [1, 3, 4096, INBOX_BYTES + 5, usize::MAX] {
            let (got, _) = read_back(&sizes, per_read);
            assert_eq!(got, expected, "reads of at most {per_read} bytes");
        }
    }

    #[test]
    fn small_requests_that_arrived_together_take_one_read() {
        // Ten 100-byte frames in the socket at once: one read, not two per frame.
        let (_, reads) = read_back(&[100; 10], usize::MAX);
        assert_eq!(
            reads,
            1 + 1,
            "one read for the frames, one that sees the close"
        );
    }

    #[test]
    fn discarding_drops_exactly_the_bytes_asked_for() {
        let mut stream = Trickle {
            bytes: frames(&[50_000, 5]),
            at: 0,
            per_read: 1000,
            reads: 0,
        };
        let mut inbox = Inbox::default();
        let mut head = [0u8; 4];
        block_on(inbox.header(&mut stream, &mut head)).unwrap();
        block_on(inbox.discard(&mut stream, 50_000)).unwrap();
        block_on(inbox.header(&mut stream, &mut head)).unwrap();
        assert_eq!(u32::from_le_bytes(head), 5);
        let body = block_on(inbox.body(&mut stream, 5)).unwrap();
        assert_eq!(&body[..], &[7, 8, 9, 10, 11]);
    }
}

//! Real TCP on the tokio runtime: the `Net` seam's production side.

use crate::env::{BoxFuture, ByteStream, Listener, Net};
use std::io;
use std::io::IoSlice;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Handle;

/// Real TCP.
pub struct RealNet {
    pub(super) handle: Handle,
}

struct RealStream(tokio::net::TcpStream);
struct RealListener(tokio::net::TcpListener);

impl ByteStream for RealStream {
    fn read<'a>(&'a mut self, buf: &'a mut [u8]) -> BoxFuture<'a, io::Result<usize>> {
        Box::pin(self.0.read(buf))
    }
    fn write_all<'a>(&'a mut self, buf: &'a [u8]) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(self.0.write_all(buf))
    }
    fn read_buf<'a>(
        &'a mut self,
        buf: &'a mut bytes::BytesMut,
    ) -> BoxFuture<'a, io::Result<usize>> {
        // Into the spare capacity only (tokio's `read_buf` would grow a full buffer).
        if buf.capacity() == buf.len() {
            return Box::pin(std::future::ready(Ok(0)));
        }
        Box::pin(self.0.read_buf(buf))
    }
    fn write_vectored<'a>(
        &'a mut self,
        bufs: &'a [IoSlice<'a>],
    ) -> BoxFuture<'a, io::Result<usize>> {
        Box::pin(self.0.write_vectored(bufs))
    }
    fn shutdown(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(self.0.shutdown())
    }
}

impl Listener for RealListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>> {
        Box::pin(async move {
            let (stream, peer) = self.0.accept().await?;
            stream.set_nodelay(true)?;
            Ok((Box::new(RealStream(stream)) as Box<dyn ByteStream>, peer))
        })
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl Net for RealNet {
    fn listen(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn Listener>>> {
        let task = self
            .handle
            .spawn(async move { tokio::net::TcpListener::bind(addr).await });
        Box::pin(async move {
            let listener = task.await.map_err(io::Error::other)??;
            Ok(Box::new(RealListener(listener)) as Box<dyn Listener>)
        })
    }

    fn connect(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn ByteStream>>> {
        let task = self
            .handle
            .spawn(async move { tokio::net::TcpStream::connect(addr).await });
        Box::pin(async move {
            let stream = task.await.map_err(io::Error::other)??;
            stream.set_nodelay(true)?;
            Ok(Box::new(RealStream(stream)) as Box<dyn ByteStream>)
        })
    }
}

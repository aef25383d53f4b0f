//! A scripted in-memory server behind a fake `Net`: every request frame the client writes
//! is decoded, logged, and answered as the test's script says.
#![allow(dead_code)]

use bytes::BytesMut;
use cairn_client::{Client, ClientConfig};
use cairn_engine::env::{BoxFuture, ByteStream, Env, Listener, Net};
use iggy_binary_protocol::responses::users::LoginRegisterResponse;
use iggy_binary_protocol::{
    Command, EvictionHeader, EvictionReason, Operation, ReplyHeader, RequestHeader, WireEncode,
    WireName,
};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const SESSION: u64 = 77;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Which connection (1-based) it came on.
    pub connection: usize,
    pub header: RequestHeader,
    pub body: Vec<u8>,
}

impl Seen {
    /// The command code: from bytes 196..200 for NonReplicated, else the operation.
    pub fn code(&self) -> u32 {
        match self.header.operation {
            Operation::NonReplicated => {
                u32::from_le_bytes(self.header.reserved[..4].try_into().unwrap())
            }
            Operation::Register => 40,
            Operation::Logout => 39,
            other => iggy_binary_protocol::COMMAND_TABLE
                .iter()
                .find(|m| m.operation == Some(other))
                .map(|m| m.code)
                .unwrap(),
        }
    }
}

/// What the server does with a request.
pub enum Action {
    /// Reply with status 0 and this body (echoing the operation).
    Reply(Vec<u8>),
    /// Reply with this status and an empty body.
    Status(u32),
    /// Reply with this operation byte instead of the echo.
    ReplyAs(Operation, Vec<u8>),
    /// An eviction frame.
    Evict(EvictionReason),
    /// These raw bytes.
    Raw(Vec<u8>),
    /// Close the connection (the client reads EOF).
    Close,
    /// Never answer.
    Silence,
}

type Script = Box<dyn FnMut(&Seen) -> Action + Send>;

struct State {
    script: Script,
    seen: Vec<Seen>,
    connections: usize,
    /// Connects to refuse before accepting again.
    refuse: usize,
    refused: usize,
}

/// The fake network and its server.
#[derive(Clone)]
pub struct Server {
    state: Arc<Mutex<State>>,
}

impl Server {
    pub fn new(script: impl FnMut(&Seen) -> Action + Send + 'static) -> Server {
        Server {
            state: Arc::new(Mutex::new(State {
                script: Box::new(script),
                seen: Vec::new(),
                connections: 0,
                refuse: 0,
                refused: 0,
            })),
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    pub fn codes(&self) -> Vec<(usize, u32)> {
        self.seen()
            .iter()
            .map(|s| (s.connection, s.code()))
            .collect()
    }

    pub fn connections(&self) -> usize {
        self.state.lock().unwrap().connections
    }

    pub fn refused(&self) -> usize {
        self.state.lock().unwrap().refused
    }

    /// Refuses the next `n` connects.
    pub fn refuse_next(&self, n: usize) {
        self.state.lock().unwrap().refuse = n;
    }

    /// An `Env` on the real clock and entropy whose network is this server.
    pub fn env(&self) -> Env {
        let mut env = cairn_engine::env::real::env().expect("runtime");
        env.net = Arc::new(self.clone());
        env
    }
}

impl Net for Server {
    fn listen(&self, _addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn Listener>>> {
        Box::pin(async { Err(io::Error::other("the fake net does not listen")) })
    }

    fn connect(&self, _addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn ByteStream>>> {
        let state = self.state.clone();
        Box::pin(async move {
            let mut guard = state.lock().unwrap();
            if guard.refuse > 0 {
                guard.refuse -= 1;
                guard.refused += 1;
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    "connection refused",
                ));
            }
            guard.connections += 1;
            let connection = guard.connections;
            drop(guard);
            Ok(Box::new(Stream {
                state,
                connection,
                inbox: Vec::new(),
                outbox: VecDeque::new(),
                closed: false,
            }) as Box<dyn ByteStream>)
        })
    }
}

struct Stream {
    state: Arc<Mutex<State>>,
    connection: usize,
    inbox: Vec<u8>,
    outbox: VecDeque<u8>,
    closed: bool,
}

impl Stream {
    fn serve(&mut self) {
        while self.inbox.len() >= 256 {
            let size = u32::from_le_bytes(self.inbox[48..52].try_into().unwrap()) as usize;
            assert!(size >= 256, "client sent a frame of {size} bytes");
            if self.inbox.len() < size {
                return;
            }
            let frame: Vec<u8> = self.inbox.drain(..size).collect();
            let header: RequestHeader =
                bytemuck::checked::try_pod_read_unaligned(&frame[..256]).expect("request header");
            let seen = Seen {
                connection: self.connection,
                header,
                body: frame[256..].to_vec(),
            };
            let action = {
                let mut state = self.state.lock().unwrap();
                state.seen.push(seen.clone());
                (state.script)(&seen)
            };
            self.act(&seen, action);
        }
    }

    fn act(&mut self, seen: &Seen, action: Action) {
        let bytes = match action {
            Action::Reply(body) => reply(&seen.header, seen.header.operation, 0, &body),
            Action::Status(status) => reply(&seen.header, seen.header.operation, status, &[]),
            Action::ReplyAs(operation, body) => reply(&seen.header, operation, 0, &body),
            Action::Evict(reason) => {
                let header = EvictionHeader::new(0, 0, 0, seen.header.client, reason);
                bytemuck::bytes_of(&header).to_vec()
            }
            Action::Raw(bytes) => bytes,
            Action::Close => {
                self.closed = true;
                Vec::new()
            }
            Action::Silence => Vec::new(),
        };
        self.outbox.extend(bytes);
    }
}

/// A reply frame to `request`.
pub fn reply(request: &RequestHeader, operation: Operation, status: u32, body: &[u8]) -> Vec<u8> {
    let header = ReplyHeader {
        size: (256 + body.len()) as u32,
        command: Command::Reply,
        client: request.client,
        request: request.request,
        request_checksum: request.request_checksum,
        operation,
        status,
        ..ReplyHeader::default()
    };
    let mut frame = bytemuck::bytes_of(&header).to_vec();
    frame.extend_from_slice(body);
    frame
}

impl ByteStream for Stream {
    fn read<'a>(&'a mut self, buf: &'a mut [u8]) -> BoxFuture<'a, io::Result<usize>> {
        Box::pin(async move {
            if self.outbox.is_empty() {
                if self.closed {
                    return Ok(0);
                }
                // Nothing to say: the client waits until its deadline.
                std::future::pending::<()>().await;
            }
            let n = buf.len().min(self.outbox.len());
            for (slot, byte) in buf.iter_mut().zip(self.outbox.drain(..n)) {
                *slot = byte;
            }
            Ok(n)
        })
    }

    fn write_all<'a>(&'a mut self, buf: &'a [u8]) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(async move {
            if self.closed {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "broken pipe"));
            }
            self.inbox.extend_from_slice(buf);
            self.serve();
            Ok(())
        })
    }

    fn shutdown(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// A framed result section `[0u32]` followed by `payload`.
pub fn framed(payload: &[u8]) -> Vec<u8> {
    let mut body = 0u32.to_le_bytes().to_vec();
    body.extend_from_slice(payload);
    body
}

/// A framed result section carrying error `code`.
pub fn framed_error(code: u32) -> Vec<u8> {
    let mut body = 1u32.to_le_bytes().to_vec();
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&code.to_le_bytes());
    body
}

/// A successful login reply body (framed LoginRegisterResponse, session [`SESSION`]).
pub fn login_ok() -> Vec<u8> {
    login_ok_with(SESSION)
}

pub fn login_ok_with(session: u64) -> Vec<u8> {
    let response = LoginRegisterResponse {
        user_id: 0,
        session,
        server_protocol_version: iggy_binary_protocol::IGGY_PROTOCOL_VERSION,
        server_version: WireName::new("cairn-test").unwrap(),
    };
    framed(&encode(&response))
}

pub fn encode(value: &impl WireEncode) -> Vec<u8> {
    let mut buf = BytesMut::new();
    value.encode(&mut buf);
    buf.to_vec()
}

pub fn address() -> SocketAddr {
    "127.0.0.1:8090".parse().unwrap()
}

/// A config with short timeouts and intervals for tests.
pub fn config() -> ClientConfig {
    let mut config = ClientConfig::new(address());
    config.reply_timeout = Duration::from_millis(200);
    config.connect_timeout = Duration::from_millis(200);
    config.reconnect_interval = Duration::from_millis(1);
    config.reconnect_retries = 3;
    config
}

pub fn config_with_login() -> ClientConfig {
    config().with_credentials("iggy", "iggy")
}

/// Connects a client to `server` with `config`.
pub fn connect(server: &Server, config: ClientConfig) -> Result<Client, cairn_client::ClientError> {
    cairn_engine::env::real::block_on(Client::connect(server.env(), config))
}

pub use cairn_engine::env::real::block_on;

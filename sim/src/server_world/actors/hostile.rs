//! Misbehaving clients (review `wave3-security.md`, issue 23): each on a host of its own,
//! speaking raw frames, never through `cairn_client` (whose rules would keep it polite).
//!
//! - A **trickler** announces a login frame and sends it a byte at a time: the server must
//!   close it (handshake timeout, or evicted for a newcomer) and hold none of its bytes
//!   beyond the frame's.
//! - A **guesser** logs in as root with wrong passwords, over and over: every answer must be
//!   a refusal, and the lockout it earns must lock out its own host only.
//! - A **flooder** opens up to 24 connections and sends a login on each before it reads
//!   any answer (wrong passwords, for root or for users nobody made): the checks its host
//!   has in flight are bounded, and every answer must be a refusal (bad credentials, the
//!   lockout, or busy).
//! - A **stalled reader** logs in as its own user and sends polls, pings and lists of
//!   streams whose replies it never reads: the server must cut it off, and its replies may
//!   use its user's share only.
//! - A **slow sender** logs in as its own user and trickles a send frame of three quarters
//!   of the byte budget (its body invalid): the body holds its room while it arrives, then
//!   is refused. Two or three at once would hold more than the budget were bodies not
//!   budgeted (the canary `bodies-unbudgeted`); budgeted, they hold one user's share, one
//!   body at a time, and the workload's sends go on beside them.
//!
//! None of them is judged for liveness; the well-behaved clients are, beside them. Each
//! draws from a random stream of its own, so the world's does not depend on what they do.

use super::super::{lock, Shared, ROOT_USER, SERVER_ADDR};
use crate::report::violation;
use bytes::Bytes;
use cairn_client::client::login_body;
use cairn_client::frame::{decode_reply, encode_request, Route, Sequence};
use cairn_client::iggy_binary_protocol::codes::{
    GET_STREAMS_CODE, LOGIN_REGISTER_CODE, PING_CODE, POLL_MESSAGES_CODE, SEND_MESSAGES_CODE,
};
use cairn_client::iggy_binary_protocol::requests::messages::PollMessagesRequest;
use cairn_client::iggy_binary_protocol::responses::users::LoginRegisterResponse;
use cairn_client::iggy_binary_protocol::{
    WireConsumer, WireDecode, WireEncode, WireIdentifier, WirePollingStrategy, HEADER_SIZE,
};
use cairn_client::{ClientError, Credentials};
use cairn_engine::env::{read_exact, ByteStream, Env, Tasks};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// The user the stalled readers log in as (made by the setup when a seed has one): it may
/// poll everything, and is no tenant of the workload's.
pub const STALLED_USER: &str = "stalled";
pub const STALLED_PASSWORD: &str = "stalled-password";
/// The user the slow senders log in as (made by the setup when a seed has one): it may
/// send everywhere, so its frames are read, and it is no tenant of the workload's.
pub const SLOW_USER: &str = "slow";
pub const SLOW_PASSWORD: &str = "slow-password";

/// The most reply bytes a misbehaving client reads of one reply (it reads only logins'
/// and refusals).
const MAX_REPLY: usize = 1 << 20;

/// What a misbehaving client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Trickler,
    Guesser,
    Flooder,
    StalledReader,
    SlowSender,
}

/// The misbehaving clients of one seed, and the server's byte budget beside them.
#[derive(Debug, Clone, Default)]
pub struct Hostile {
    pub clients: Vec<Kind>,
    /// `limits.buffered_bytes` (0: the default): small, so that they reach it.
    pub buffered_bytes: u64,
    /// The seed of their random streams.
    pub seed: u64,
}

impl Hostile {
    /// Half the seeds have some: up to two of each kind, beside a budget of 1 or 4 MiB.
    pub fn from_seed(seed: u64) -> Hostile {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x4057_11e5_eed5);
        if !rng.gen_bool(0.5) {
            return Hostile::default();
        }
        let mut clients = Vec::new();
        for kind in [
            Kind::Trickler,
            Kind::Guesser,
            Kind::Flooder,
            Kind::StalledReader,
            Kind::SlowSender,
        ] {
            let most = if kind == Kind::SlowSender { 3 } else { 2 };
            for _ in 0..rng.gen_range(0..=most) {
                clients.push(kind);
            }
        }
        Hostile {
            clients,
            buffered_bytes: [1 << 20, 4 << 20][rng.gen_range(0..2)],
            seed,
        }
    }

    /// The users the setup makes for them: (name, password, may send).
    pub fn users(&self) -> Vec<(&'static str, &'static str, bool)> {
        let mut users = Vec::new();
        if self.clients.contains(&Kind::StalledReader) {
            users.push((STALLED_USER, STALLED_PASSWORD, false));
        }
        if self.clients.contains(&Kind::SlowSender) {
            users.push((SLOW_USER, SLOW_PASSWORD, true));
        }
        users
    }
}

/// The invariant a misbehaving client's answers are held to.
pub const INV_HOSTILE: &str = "S10 a misbehaving client gets nothing it is not owed";

/// Spawns the misbehaving clients of the profile, each on host 10.0.2.n.
pub fn spawn(world: &Shared) {
    let (hostile, handle) = {
        let w = lock(world);
        (w.profile.hostile.clone(), w.clients.clone())
    };
    for (n, kind) in hostile.clients.iter().copied().enumerate() {
        let host = IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1 + n as u8));
        let env = lock(world).client_env(host);
        let rng = ChaCha8Rng::seed_from_u64(hostile.seed ^ (n as u64 + 1) << 32);
        let mut actor = Misbehaving {
            world: world.clone(),
            env,
            rng,
            budget: hostile.buffered_bytes,
        };
        handle.spawn(Box::pin(async move {
            while actor.running() {
                let _ = match kind {
                    Kind::Trickler => actor.trickled_login().await,
                    Kind::Guesser => actor.guess().await,
                    Kind::Flooder => actor.flood().await,
                    Kind::StalledReader => actor.stalled_reader().await,
                    Kind::SlowSender => actor.slow_send().await,
                };
                let pause = actor.rng.gen_range(10..500);
                actor.env.clock.sleep(Duration::from_millis(pause)).await;
            }
        }));
    }
}

struct Misbehaving {
    world: Shared,
    env: Env,
    rng: ChaCha8Rng,
    budget: u64,
}

type Ended = std::io::Result<()>;

impl Misbehaving {
    /// A client id of its own for each login, as the SDK draws one.
    fn client_id(&mut self) -> u128 {
        self.rng.gen::<u128>().max(1)
    }

    fn running(&self) -> bool {
        lock(&self.world).running()
    }

    async fn connect(&self) -> std::io::Result<Box<dyn ByteStream>> {
        self.env.net.connect(SERVER_ADDR).await
    }

    /// Sends `len` zero bytes, `chunk` at a time, `every` apart, while the run goes on.
    async fn trickle(
        &self,
        stream: &mut Box<dyn ByteStream>,
        len: usize,
        chunk: usize,
        every: Duration,
    ) -> Ended {
        let bytes = vec![0u8; chunk];
        let mut sent = 0;
        while sent < len && self.running() {
            stream.write_all(&bytes[..chunk.min(len - sent)]).await?;
            sent += chunk;
            self.env.clock.sleep(every).await;
        }
        Ok(())
    }

    async fn trickled_login(&mut self) -> Ended {
        let mut stream = self.connect().await?;
        let mut sequence = Sequence::unbound(1);
        stream
            .write_all(&frame(&mut sequence, LOGIN_REGISTER_CODE, &[], 60_000))
            .await?;
        if self
            .trickle(&mut stream, 60_000, 1, Duration::from_millis(200))
            .await
            .is_err()
        {
            lock(&self.world).decision("HostileTricklerClosed");
        }
        Ok(())
    }

    /// Wrong passwords for root, until the server closes the connection; each answer must
    /// be a refusal.
    async fn guess(&mut self) -> Ended {
        let mut stream = self.connect().await?;
        while self.running() {
            let guess = format!("guess-{}", self.rng.gen::<u32>());
            let credentials = Credentials::Password {
                username: ROOT_USER.into(),
                password: guess.clone(),
            };
            let client = self.client_id();
            let logged_in = login(&mut stream, client, &credentials).await?;
            let mut w = lock(&self.world);
            if logged_in.is_some() {
                w.fail(violation(
                    INV_HOSTILE,
                    format!("root logged in with the wrong password {guess:?}"),
                ));
                return Ok(());
            }
            w.decision("HostileGuessRefused");
        }
        Ok(())
    }

    /// A burst of logins with wrong passwords, one per connection, all sent before any
    /// answer is read; each answer must be a refusal.
    async fn flood(&mut self) -> Ended {
        let mut burst = Vec::new();
        for _ in 0..self.rng.gen_range(8..=24) {
            let username = match self.rng.gen_bool(0.5) {
                true => ROOT_USER.to_owned(),
                false => format!("nobody-{}", self.rng.gen_range(0..4)),
            };
            let credentials = Credentials::Password {
                username: username.clone(),
                password: format!("guess-{}", self.rng.gen::<u32>()),
            };
            let request = login_frame(self.client_id(), &credentials)?;
            let mut stream = self.connect().await?;
            stream.write_all(&request).await?;
            burst.push((stream, username));
        }
        for (mut stream, username) in burst {
            let answer = reply(&mut stream, &Route::REGISTER).await?;
            let mut w = lock(&self.world);
            if answer.is_ok_and(|payload| logged_in(&payload)) {
                w.fail(violation(
                    INV_HOSTILE,
                    format!(
                        "a flood's login as {username:?} with a wrong password answered a session"
                    ),
                ));
                return Ok(());
            }
            w.decision("HostileFloodRefused");
        }
        Ok(())
    }

    /// Logs in as [`STALLED_USER`], sends polls of the workload's first topic, never reads a
    /// reply, and pings until the server closes the connection.
    async fn stalled_reader(&mut self) -> Ended {
        let (stream_id, topic_id, partitions) = {
            let w = lock(&self.world);
            (w.ids.stream, w.ids.topics[0], w.profile.partitions)
        };
        let mut stream = self.connect().await?;
        let credentials = Credentials::Password {
            username: STALLED_USER.into(),
            password: STALLED_PASSWORD.into(),
        };
        let client = self.client_id();
        let Some(mut sequence) = login(&mut stream, client, &credentials).await? else {
            return Ok(());
        };
        for _ in 0..self.rng.gen_range(4..32) {
            let poll = PollMessagesRequest {
                consumer: WireConsumer::consumer(WireIdentifier::numeric(777)),
                stream_id: WireIdentifier::numeric(stream_id),
                topic_id: WireIdentifier::numeric(topic_id),
                partition_id: Some(self.rng.gen_range(0..partitions.max(1))),
                strategy: WirePollingStrategy { kind: 1, value: 0 },
                count: 1000,
                auto_commit: false,
            }
            .to_bytes();
            stream
                .write_all(&frame(&mut sequence, POLL_MESSAGES_CODE, &poll, poll.len()))
                .await?;
        }
        while self.running() {
            // Pings, and lists of streams (replies that are not polls), never read either.
            let code = [PING_CODE, GET_STREAMS_CODE][self.rng.gen_range(0..2)];
            let request = frame(&mut sequence, code, &[], 0);
            if stream.write_all(&request).await.is_err() {
                lock(&self.world).decision("HostileStalledReaderClosed");
                return Ok(());
            }
            self.env.clock.sleep(Duration::from_secs(1)).await;
        }
        Ok(())
    }

    /// Logs in as [`SLOW_USER`] and trickles a send frame three quarters of the byte budget
    /// long (its body zeros: no valid request), then reads the answer, which must refuse it.
    async fn slow_send(&mut self) -> Ended {
        let mut stream = self.connect().await?;
        let credentials = Credentials::Password {
            username: SLOW_USER.into(),
            password: SLOW_PASSWORD.into(),
        };
        let client = self.client_id();
        let Some(mut sequence) = login(&mut stream, client, &credentials).await? else {
            return Ok(());
        };
        let len = usize::try_from(self.budget.max(1 << 20) / 4 * 3).expect("small");
        stream
            .write_all(&frame(&mut sequence, SEND_MESSAGES_CODE, &[], len))
            .await?;
        // Slow beside the simulated network, quick beside a run (seconds of virtual time).
        self.trickle(&mut stream, len, 32 * 1024, Duration::from_millis(5))
            .await?;
        if !self.running() {
            return Ok(());
        }
        let route = Route::of(SEND_MESSAGES_CODE).expect("a known command");
        let answer = reply(&mut stream, &route).await?;
        let mut w = lock(&self.world);
        if answer.is_ok() {
            w.fail(violation(
                INV_HOSTILE,
                format!("a send of {len} zero bytes was acknowledged"),
            ));
            return Ok(());
        }
        w.decision("HostileSlowSendRefused");
        Ok(())
    }
}

/// A request's frame: its header announcing `announced` body bytes, and `body` (empty, or
/// all of it).
fn frame(sequence: &mut Sequence, code: u32, body: &[u8], announced: usize) -> Vec<u8> {
    let route = Route::of(code).expect("a known command");
    let mut frame = encode_request(sequence, &route, body).expect("a valid request");
    let size = u32::try_from(HEADER_SIZE + announced).expect("below 4 GiB");
    frame[48..52].copy_from_slice(&size.to_le_bytes());
    frame
}

/// Reads one reply to a request on `route` and judges it as the client does: the payload,
/// or the refusal (a nonzero status, a result code, an eviction).
async fn reply(
    stream: &mut Box<dyn ByteStream>,
    route: &Route,
) -> std::io::Result<Result<Bytes, ClientError>> {
    let mut header = [0u8; HEADER_SIZE];
    read_exact(stream.as_mut(), &mut header).await?;
    let size = u32::from_le_bytes(header[48..52].try_into().expect("4 bytes")) as usize;
    let mut body = vec![0u8; size.saturating_sub(HEADER_SIZE).min(MAX_REPLY)];
    read_exact(stream.as_mut(), &mut body).await?;
    Ok(decode_reply(&header, body.into(), route, MAX_REPLY as u32))
}

/// Logs in on `stream` with `credentials`: the sequence of the session, or `None` when
/// refused.
async fn login(
    stream: &mut Box<dyn ByteStream>,
    client: u128,
    credentials: &Credentials,
) -> std::io::Result<Option<Sequence>> {
    let request = login_frame(client, credentials)?;
    stream.write_all(&request).await?;
    let payload = match reply(stream, &Route::REGISTER).await? {
        Ok(payload) => payload,
        Err(_) => return Ok(None),
    };
    Ok(LoginRegisterResponse::decode(&payload)
        .ok()
        .filter(|(r, _)| r.session != 0)
        .map(|(r, _)| Sequence::bound(client, r.session)))
}

/// A login frame for `credentials` from login client id `client`.
fn login_frame(client: u128, credentials: &Credentials) -> std::io::Result<Vec<u8>> {
    let body = login_body(credentials).map_err(std::io::Error::other)?;
    let mut sequence = Sequence::unbound(client);
    Ok(frame(&mut sequence, LOGIN_REGISTER_CODE, &body, body.len()))
}

/// Whether a login's answer `payload` is a session.
fn logged_in(payload: &[u8]) -> bool {
    LoginRegisterResponse::decode(payload).is_ok_and(|(r, _)| r.session != 0)
}

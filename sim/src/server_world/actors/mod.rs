//! The server world's clients: each a task of the clients' process on its own simulated
//! host, speaking the binary protocol through `cairn_client::Client` (its reconnect,
//! re-login and replay rules are the ones under test). Every request is recorded (trace,
//! timeline), classified (answered, refused, or an unknown outcome) and judged by the
//! oracle; after each one the nemesis may strike.

mod accounts;
mod admin;
mod clients;
mod data;
mod details;
mod groups;
pub mod hostile;
mod offsets;
mod scratch;
mod users;

use super::{
    lock, Ids, PartKey, Phase, Shared, GROUP, ROOT_PASSWORD, ROOT_USER, SERVER_ADDR, STREAM, TOPICS,
};
use crate::timeline::{LaneKind, SpanOutcome, Timeline};
use cairn_client::iggy_binary_protocol::{WireIdentifier, WireOptions};
use cairn_client::{Client, ClientConfig, ClientError};
use cairn_engine::env::{Env, Tasks};
use rand::Rng;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

pub const ADMIN_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1));
const USER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));
/// Most messages one poll asks for.
const MAX_POLL: u32 = 50;
/// Refusals a send gets before its batch reaches a partition: unauthenticated,
/// unauthorized, invalid command or format, stream, topic or partition not found, a bad
/// message count.
const REFUSED_BEFORE_APPEND: [u32; 10] = [3, 4, 40, 41, 1009, 1010, 2010, 2011, 3007, 4009];
/// Ids a span's label lists (the rest are counted).
const LABEL_IDS: usize = 8;

/// A client role, and its number among its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Producer(u32),
    Consumer(u32),
    Member(u32),
    Admin,
    User,
}

impl Role {
    fn name(self) -> String {
        match self {
            Role::Producer(i) => format!("producer {i}"),
            Role::Consumer(i) => format!("consumer {i}"),
            Role::Member(i) => format!("member {i}"),
            Role::Admin => "admin".into(),
            Role::User => "user session".into(),
        }
    }

    fn host(self) -> IpAddr {
        let n = match self {
            Role::Admin => return ADMIN_IP,
            Role::User => return USER_IP,
            Role::Producer(i) => 10 + i,
            Role::Consumer(i) => 20 + i,
            Role::Member(i) => 30 + i,
        };
        IpAddr::V4(Ipv4Addr::new(
            10,
            0,
            1,
            u8::try_from(n).expect("few clients"),
        ))
    }
}

fn roles(profile: &super::ServerProfile) -> Vec<Role> {
    let mut roles = vec![Role::Admin];
    roles.extend((1..=profile.producers).map(Role::Producer));
    roles.extend((1..=profile.consumers).map(Role::Consumer));
    roles.extend((1..=profile.members).map(Role::Member));
    if profile.user_session {
        roles.push(Role::User);
    }
    roles
}

/// The hosts a network partition may cut off.
pub fn client_hosts(profile: &super::ServerProfile) -> Vec<IpAddr> {
    roles(profile).into_iter().map(Role::host).collect()
}

/// The clients that must make progress once faults heal (the user's session depends on
/// the admin having a user for it, so it is not among them).
pub fn names(profile: &super::ServerProfile) -> Vec<String> {
    roles(profile)
        .into_iter()
        .filter(|r| *r != Role::User)
        .map(Role::name)
        .collect()
}

/// The payload of message `id` at `len` bytes: derived from the id, so any read can check it.
pub fn payload(id: u128, len: usize) -> Vec<u8> {
    let seed = xxhash::xxh3::xxh3_64(&id.to_le_bytes());
    (0..len)
        .map(|i| (seed.rotate_left((i % 64) as u32) as u8) ^ (i as u8))
        .collect()
}

fn payload_len(id: u128, max: usize) -> usize {
    1 + (xxhash::xxh3::xxh3_64(&id.to_be_bytes()) as usize) % max
}

fn sid(id: u32) -> WireIdentifier {
    WireIdentifier::numeric(id)
}

/// How a request ended, as the client can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// The server refused it with this code.
    Refused(u32),
    /// The reply was lost or never came: it may or may not have been applied.
    Unknown,
    /// It never left the client (no connection, no login).
    NotSent,
}

fn outcome<T>(result: &Result<T, ClientError>) -> Outcome {
    match result {
        Ok(_) => Outcome::Ok,
        Err(ClientError::Server { code, .. }) => Outcome::Refused(*code),
        Err(
            ClientError::Disconnected { .. }
            | ClientError::Timeout { .. }
            | ClientError::Protocol(_),
        ) => Outcome::Unknown,
        Err(_) => Outcome::NotSent,
    }
}

/// One simulated client.
struct Actor {
    role: Role,
    name: String,
    world: Shared,
    env: Env,
    config: ClientConfig,
    client: Option<Client>,
    ids: Ids,
    /// The session of the last answered request (a change is a re-login).
    session: Option<u64>,
}

/// A request begun: its span, the epoch and virtual time it was sent in, and how many
/// disk faults had fired by then.
struct Begun {
    span: u64,
    epoch: u64,
    at: u64,
    records: usize,
}

/// The only refusal code that may leave an operation in doubt: the node has no space, is
/// busy, or stopped (engine `NodeError::code`; the wire carries no text).
const CODE_UNAVAILABLE: u32 = 1;

impl Actor {
    fn new(world: &Shared, role: Role) -> Actor {
        let mut w = lock(world);
        let env = w.client_env(role.host());
        let profile = &w.profile;
        let mut config = ClientConfig::new(SERVER_ADDR).with_credentials(ROOT_USER, ROOT_PASSWORD);
        config.connect_timeout = Duration::from_secs(1);
        config.reply_timeout = profile.reply_timeout;
        config.reconnect_retries = profile.reconnect_retries;
        config.reconnect_interval = profile.reconnect_interval;
        Actor {
            role,
            name: role.name(),
            world: world.clone(),
            env,
            config,
            client: None,
            ids: w.ids,
            session: None,
        }
    }

    /// A random think time; false once the run is over.
    async fn think(&mut self) -> bool {
        let nanos = {
            let mut w = lock(&self.world);
            if !w.running() {
                return false;
            }
            let max = w.profile.max_think_nanos;
            w.rng.gen_range(0..max)
        };
        self.env.clock.sleep(Duration::from_nanos(nanos)).await;
        // Once faults healed, a client that made its quota idles while the others catch up
        // (one may wait out a reply timeout on a connection left half-open).
        loop {
            let idle = {
                let w = lock(&self.world);
                if !w.running() {
                    return false;
                }
                w.phase == Phase::Liveness
                    && w.progress.get(&self.name).copied().unwrap_or(0) >= super::LIVENESS_REQUESTS
            };
            if !idle {
                return true;
            }
            self.env.clock.sleep(Duration::from_millis(100)).await;
        }
    }

    /// Connects (and logs in) when not connected; false when that failed this time.
    async fn connected(&mut self) -> bool {
        if self.client.is_some() {
            return true;
        }
        let begun = self.begin("connect and log in");
        let result = Client::connect(self.env.clone(), self.config.clone()).await;
        self.end(&begun, &result);
        match result {
            Ok(client) => {
                self.client = Some(client);
                self.note_session();
                true
            }
            Err(_) => false,
        }
    }

    fn client(&mut self) -> &mut Client {
        self.client.as_mut().expect("connected")
    }

    /// A changed session number after the first login is a reconnect with a re-login.
    fn note_session(&mut self) {
        let now = self
            .client
            .as_ref()
            .and_then(|c| c.session())
            .map(|s| s.session);
        if let (Some(before), Some(now)) = (self.session, now) {
            if before != now {
                lock(&self.world).decision("Relogin");
            }
        }
        if now.is_some() {
            self.session = now;
        }
    }

    fn begin(&self, label: &str) -> Begun {
        let mut w = lock(&self.world);
        let at = w.now();
        let epoch = w.oracle.epoch;
        let records = w.disk.record_count();
        w.event(format!("{}: {label}", self.name));
        let span = match &mut w.timeline {
            Some(timeline) => {
                let lane = timeline.lane(&self.name, LaneKind::Client);
                timeline.begin(lane, at, label)
            }
            None => 0,
        };
        Begun {
            span,
            epoch,
            at,
            records,
        }
    }

    /// Ends a request: trace, timeline, coverage, progress, then the nemesis.
    fn end<T>(&self, begun: &Begun, result: &Result<T, ClientError>) {
        let mut w = lock(&self.world);
        let now = w.now();
        let kind = outcome(result);
        let text = match result {
            Ok(_) => "ok".to_string(),
            Err(e) => e.to_string(),
        };
        w.event(format!("{}: -> {text}", self.name));
        if let Err(ClientError::Timeout { .. }) = result {
            w.decision("ClientTimeout");
            if w.power_lost_at.is_some_and(|t| begun.at <= t && t <= now) {
                w.decision("HalfOpen");
            }
        }
        if kind == Outcome::Unknown {
            w.decision("ReplyLost");
        }
        if kind == Outcome::Ok && w.phase == Phase::Liveness {
            *w.progress.entry(self.name.clone()).or_default() += 1;
        }
        if let Some(timeline) = &mut w.timeline {
            let outcome = match kind {
                Outcome::Ok => SpanOutcome::Ok,
                Outcome::Refused(_) | Outcome::NotSent => SpanOutcome::Refused(text),
                Outcome::Unknown => SpanOutcome::Lost(text),
            };
            timeline.end(begun.span, now, outcome);
        }
        w.ops += 1;
        w.nemesis();
    }

    /// After a request: notes a re-login, and returns the epoch of the server process
    /// that answered (by the session the reply came on; a client may connect inside a
    /// call, to a newer process than the one up when the call began).
    fn after(&mut self, begun: &Begun) -> u64 {
        self.note_session();
        let session = self
            .client
            .as_ref()
            .and_then(|c| c.session())
            .map(|s| s.session);
        session
            .and_then(|s| lock(&self.world).epoch_of_session(s))
            .unwrap_or(begun.epoch)
    }

    /// Whether refusal `code` of `op` (begun at `begun`) leaves it in doubt: only code 1,
    /// and only with a cause the world injected in the request's window (the disk filled,
    /// the server went down, the node stopped). Any other refusal, or code 1 with nothing
    /// to blame, fails the run under `invariant`.
    fn refusal_in_doubt(
        &self,
        begun: &Begun,
        code: u32,
        op: &str,
        invariant: &'static str,
    ) -> bool {
        let cause = lock(&self.world).refusal_cause(begun.records, begun.epoch);
        self.judge_refusal(cause, code, op, invariant)
    }

    /// As [`Actor::refusal_in_doubt`], for a request that writes nothing (a read of the
    /// metadata view, a login): only the node stopping or the server going down excuses it.
    fn read_refusal_in_doubt(
        &self,
        begun: &Begun,
        code: u32,
        op: &str,
        invariant: &'static str,
    ) -> bool {
        let cause = lock(&self.world).stop_cause(begun.epoch);
        self.judge_refusal(cause, code, op, invariant)
    }

    /// As [`Actor::refusal_in_doubt`], for a request to a partition: a partition fenced
    /// when the disk filled earlier in this boot also answers code 1.
    fn partition_refusal_in_doubt(
        &self,
        begun: &Begun,
        part: Option<PartKey>,
        code: u32,
        op: &str,
        invariant: &'static str,
    ) -> bool {
        let cause = {
            let w = lock(&self.world);
            let fenced = w
                .may_be_empty(part)
                .then_some("the disk filled under the partition this boot");
            w.refusal_cause(begun.records, begun.epoch).or(fenced)
        };
        self.judge_refusal(cause, code, op, invariant)
    }

    /// Judges a request to partition `part` (any, for `None`) that ended in an error: a
    /// refusal is in doubt only as [`Actor::partition_refusal_in_doubt`] says (nothing but
    /// a cause of the server's excuses it); a lost reply or one never sent tells nothing.
    /// False when the run failed.
    fn error_in_doubt<T>(
        &self,
        (begun, part): (&Begun, Option<PartKey>),
        result: &Result<T, ClientError>,
        op: &str,
        invariant: &'static str,
    ) -> bool {
        match outcome(result) {
            Outcome::Refused(code) => {
                self.partition_refusal_in_doubt(begun, part, code, op, invariant)
            }
            Outcome::Ok | Outcome::Unknown | Outcome::NotSent => true,
        }
    }

    fn judge_refusal(
        &self,
        cause: Option<&'static str>,
        code: u32,
        op: &str,
        invariant: &'static str,
    ) -> bool {
        let mut w = lock(&self.world);
        match cause {
            Some(_) if code == CODE_UNAVAILABLE => {
                w.decision("RefusedWithCause");
                true
            }
            Some(cause) => {
                w.fail(crate::report::violation(invariant, format!("{}: {op} refused with code {code} ({cause}, but only code {CODE_UNAVAILABLE} names it)", self.name)));
                false
            }
            None => {
                w.fail(crate::report::violation(invariant, format!("{}: {op} refused with code {code}, with no fault to blame (the disk did not fill, the server stayed up, the node runs)", self.name)));
                false
            }
        }
    }

    fn fail(&self, v: crate::report::Violation) {
        lock(&self.world).fail(v);
    }
}

/// Creates the workload's stream, topics and group as root.
pub async fn create_topology(
    env: Env,
    partitions: u32,
    hostile_users: Vec<(&'static str, &'static str, bool)>,
) -> Result<Ids, ClientError> {
    let config = ClientConfig::new(SERVER_ADDR).with_credentials(ROOT_USER, ROOT_PASSWORD);
    let mut client = Client::connect(env, config).await?;
    let stream = client.create_stream(STREAM).await?;
    let mut ids = Ids {
        stream: stream.id,
        ..Ids::default()
    };
    for (t, (name, persisted)) in TOPICS.iter().enumerate() {
        let topic = client
            .create_topic(&sid(stream.id), name, partitions, topic_options(*persisted))
            .await?;
        ids.topics[t] = topic.topic.id;
    }
    let group = client
        .create_consumer_group(&sid(stream.id), &sid(ids.topics[1]), GROUP)
        .await?
        .ok_or_else(|| {
            ClientError::InvalidRequest("the group's creation returned nothing".into())
        })?;
    ids.group = group.group.id;
    for (name, password, may_send) in hostile_users {
        let mut permissions = users::permissions(true);
        permissions.global.send_messages = may_send;
        client
            .create_user(name, password, true, Some(permissions))
            .await?;
    }
    client.close().await;
    Ok(ids)
}

/// A topic's options: both durability policies.
fn topic_options(persisted: bool) -> WireOptions {
    use crate::wire::{options, KIND_STRING};
    let policy = if persisted { "persisted" } else { "replicated" };
    options(&[
        ("consumer_offset_durability", KIND_STRING, policy.into()),
        ("durability", KIND_STRING, policy.into()),
    ])
}

/// Spawns every client of the profile on the clients' process.
pub fn spawn(world: &Shared) {
    let (profile, handle) = {
        let w = lock(world);
        (w.profile.clone(), w.clients.clone())
    };
    for role in roles(&profile) {
        let actor = Actor::new(world, role);
        handle.spawn(Box::pin(async move {
            match role {
                Role::Producer(_) => data::producer(actor).await,
                Role::Consumer(_) => data::consumer(actor).await,
                Role::Member(_) => data::member(actor).await,
                Role::Admin => admin::admin(actor).await,
                Role::User => users::user_session(actor).await,
            }
        }));
    }
    hostile::spawn(world);
}

/// The spans a violation's evidence names: by message id (`0x1:5`) or entity name (`x3`,
/// `u2`).
pub fn named_spans(timeline: &Timeline, evidence: &str) -> Vec<u64> {
    let tokens: Vec<&str> = evidence
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '(' | ')' | '[' | ']' | ';'))
        .filter(|t| {
            (t.starts_with("0x") && t.contains(':'))
                || (t.len() > 1
                    && (t.starts_with('x') || t.starts_with('u'))
                    && t[1..].chars().all(|c| c.is_ascii_digit()))
        })
        .collect();
    if tokens.is_empty() {
        return Vec::new();
    }
    timeline
        .spans
        .iter()
        .filter(|s| {
            s.label
                .split(|c: char| c.is_whitespace() || matches!(c, '[' | ']'))
                .any(|word| tokens.contains(&word))
        })
        .map(|s| s.id)
        .collect()
}

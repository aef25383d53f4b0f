//! The server world's clients: each a task of the clients' process on its own simulated
//! host, speaking the binary protocol through `cairn_client::Client` (its reconnect,
//! re-login and replay rules are the ones under test). Every request is recorded (trace,
//! timeline), classified (answered, refused, or an unknown outcome) and judged by the
//! oracle; after each one the nemesis may strike.

use super::oracle::{
    self, check_assignments, PartKey, StreamState, INV_DEDUP, INV_META, INV_REVOKED,
};
use super::{
    lock, Ids, Phase, Shared, GROUP, ROOT_PASSWORD, ROOT_USER, SERVER_ADDR, STREAM, TOPICS,
};
use crate::report::violation;
use crate::timeline::{LaneKind, SpanOutcome, Timeline};
use bytes::BytesMut;
use cairn_client::iggy_binary_protocol::requests::messages::PollMessagesRequest;
use cairn_client::iggy_binary_protocol::{
    WireConsumer, WireDecode, WireGlobalPermissions, WireIdentifier, WireOptions, WirePartitioning,
    WirePermissions, WirePollingStrategy,
};
use cairn_client::{Client, ClientConfig, ClientError, Outgoing, Polled};
use cairn_engine::env::{Env, Tasks};
use rand::Rng;
use std::collections::BTreeMap;
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

/// A request begun: its span, the epoch and virtual time it was sent in.
struct Begun {
    span: u64,
    epoch: u64,
    at: u64,
}

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
        w.event(format!("{}: {label}", self.name));
        let span = match &mut w.timeline {
            Some(timeline) => {
                let lane = timeline.lane(&self.name, LaneKind::Client);
                timeline.begin(lane, at, label)
            }
            None => 0,
        };
        Begun { span, epoch, at }
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

    fn fail(&self, v: crate::report::Violation) {
        lock(&self.world).fail(v);
    }
}

/// Creates the workload's stream, topics and group as root.
pub async fn create_topology(env: Env, partitions: u32) -> Result<Ids, ClientError> {
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
    client.close().await;
    Ok(ids)
}

/// A topic's options: both durability policies.
fn topic_options(persisted: bool) -> WireOptions {
    let policy: &[u8] = if persisted {
        b"persisted"
    } else {
        b"replicated"
    };
    let entries: Vec<(u8, &[u8], u8, &[u8])> = vec![
        (2, b"consumer_offset_durability", 2, policy),
        (2, b"durability", 2, policy),
    ];
    let mut buf = BytesMut::new();
    cairn_client::iggy_binary_protocol::encode_user_headers(&entries, &mut buf);
    WireOptions::from_bytes(buf.freeze()).expect("valid options")
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
                Role::Producer(_) => producer(actor).await,
                Role::Consumer(_) => consumer(actor).await,
                Role::Member(_) => member(actor).await,
                Role::Admin => admin(actor).await,
                Role::User => user_session(actor).await,
            }
        }));
    }
}

fn ids_label(ids: &[u128]) -> String {
    let mut text: Vec<String> = ids
        .iter()
        .take(LABEL_IDS)
        .map(|id| format!("{:#x}:{}", id >> 64, *id as u64))
        .collect();
    if ids.len() > LABEL_IDS {
        text.push(format!("+{}", ids.len() - LABEL_IDS));
    }
    text.join(" ")
}

async fn producer(mut a: Actor) {
    let Role::Producer(me) = a.role else {
        unreachable!()
    };
    let mut seq = 0u64;
    let mut retry: Option<(PartKey, Vec<u128>)> = None;
    while a.think().await {
        if !a.connected().await {
            continue;
        }
        let (part, ids, retried) = match retry.take() {
            Some((part, ids)) => (part, ids, true),
            None => {
                let mut w = lock(&a.world);
                let (partitions, max_batch) = (w.profile.partitions, w.profile.max_batch);
                let part = (
                    w.rng.gen_range(0..TOPICS.len()),
                    w.rng.gen_range(0..partitions),
                );
                let n = w.rng.gen_range(1..=max_batch);
                let ids = (0..n)
                    .map(|_| {
                        seq += 1;
                        (u128::from(me) << 64) | u128::from(seq)
                    })
                    .collect();
                (part, ids, false)
            }
        };
        let max_payload = {
            let mut w = lock(&a.world);
            if retried {
                w.decision("RetriedSend");
            }
            w.oracle.sending(part, &ids);
            w.profile.max_payload
        };
        let payloads: Vec<Vec<u8>> = ids
            .iter()
            .map(|id| payload(*id, payload_len(*id, max_payload)))
            .collect();
        let outgoing: Vec<Outgoing<'_>> = ids
            .iter()
            .zip(&payloads)
            .map(|(id, p)| Outgoing {
                id: *id,
                payload: p,
                headers: &[],
            })
            .collect();
        let label = format!(
            "send {}/{} [{}]{}",
            TOPICS[part.0].0,
            part.1,
            ids_label(&ids),
            if retried { " (retry)" } else { "" }
        );
        let begun = a.begin(&label);
        let (stream, topic) = (sid(a.ids.stream), sid(a.ids.topics[part.0]));
        let result = a
            .client()
            .send_payloads(
                &stream,
                &topic,
                &WirePartitioning::PartitionId(part.1),
                &outgoing,
            )
            .await;
        a.end(&begun, &result);
        let epoch = a.after(&begun);
        match &result {
            Ok(reply) => {
                let Some(confirmation) = reply.confirmations.first() else {
                    a.fail(violation(
                        oracle::INV_ACKED,
                        format!("{label}: acknowledged without a confirmation"),
                    ));
                    return;
                };
                if confirmation.partition_id != part.1 {
                    a.fail(violation(
                        oracle::INV_ACKED,
                        format!(
                            "{label}: confirmed in partition {}",
                            confirmation.partition_id
                        ),
                    ));
                    return;
                }
                let judged =
                    lock(&a.world)
                        .oracle
                        .acked(part, confirmation.base_offset, &ids, epoch);
                if let Err(v) = judged {
                    a.fail(v);
                    return;
                }
            }
            Err(_) if outcome(&result) == Outcome::Unknown => {
                // Unknown: sending it again may duplicate it, which the oracle allows.
                let mut w = lock(&a.world);
                w.oracle.unknown(&ids);
                if w.rng.gen_bool(0.6) {
                    retry = Some((part, ids));
                }
            }
            // Refused before the shard could append it (not found, not allowed, malformed):
            // it was not sent after all. Other refusals (I/O, space) may follow a write.
            Err(ClientError::Server { code, .. }) if REFUSED_BEFORE_APPEND.contains(code) => {
                lock(&a.world).oracle.unsent(&ids);
            }
            Err(_) => {}
        }
    }
}

/// The messages of a poll reply: (offset, id, payload as sent).
fn read(polled: &Polled) -> Result<Vec<(u64, u128, bool)>, String> {
    let mut out = Vec::new();
    for message in polled.messages() {
        let m = message.map_err(|e| format!("undecodable poll reply: {e}"))?;
        out.push((
            m.offset,
            m.id,
            m.payload == payload(m.id, m.payload.len()).as_slice(),
        ));
    }
    Ok(out)
}

/// Judges a poll reply of `part`.
fn judge_poll(
    a: &Actor,
    part: PartKey,
    from: Option<u64>,
    known: bool,
    polled: &Polled,
    epoch: u64,
) -> Result<Vec<(u64, u128, bool)>, ()> {
    let messages = match read(polled) {
        Ok(messages) => messages,
        Err(e) => {
            a.fail(violation(oracle::INV_POLL, format!("{}: {e}", a.name)));
            return Err(());
        }
    };
    let judged = lock(&a.world)
        .oracle
        .polled(part, from, known, &messages, epoch);
    if let Err(mut v) = judged {
        let crashed = lock(&a.world).disk.is_crashed();
        v.evidence.push_str(&format!(
            " (the reply: partition {} current offset {} count {}; the disk {})",
            polled.partition_id,
            polled.current_offset,
            polled.count,
            if crashed {
                "crashed inside a call"
            } else {
                "up"
            }
        ));
        a.fail(v);
        return Err(());
    }
    Ok(messages)
}

async fn consumer(mut a: Actor) {
    let Role::Consumer(me) = a.role else {
        unreachable!()
    };
    let mut cursors: BTreeMap<PartKey, u64> = BTreeMap::new();
    while a.think().await {
        if !a.connected().await {
            continue;
        }
        let (part, from, count, auto_commit) = {
            let mut w = lock(&a.world);
            let partitions = w.profile.partitions;
            let part = (
                w.rng.gen_range(0..TOPICS.len()),
                w.rng.gen_range(0..partitions),
            );
            let cursor = cursors.get(&part).copied().unwrap_or(0);
            let from = match w.rng.gen_range(0..10) {
                0 => Some(0),
                1 => None,
                _ => Some(cursor),
            };
            (part, from, w.rng.gen_range(1..=MAX_POLL), from.is_none())
        };
        let request = PollMessagesRequest {
            consumer: WireConsumer::consumer(sid(me)),
            stream_id: sid(a.ids.stream),
            topic_id: sid(a.ids.topics[part.0]),
            partition_id: Some(part.1),
            strategy: from.map_or(WirePollingStrategy::next(), WirePollingStrategy::offset),
            count,
            auto_commit,
        };
        let known = from.is_some_and(|f| lock(&a.world).oracle.knows(part, f));
        let begun = a.begin(&format!(
            "poll {}/{} from {from:?} count {count}",
            TOPICS[part.0].0, part.1
        ));
        let result = a.client().poll_messages(&request).await;
        a.end(&begun, &result);
        let epoch = a.after(&begun);
        let Ok(polled) = result else { continue };
        if polled.partition_id != part.1 {
            a.fail(violation(
                oracle::INV_POLL,
                format!(
                    "{}: a poll of partition {} answered for {}",
                    a.name, part.1, polled.partition_id
                ),
            ));
            return;
        }
        let Ok(messages) = judge_poll(
            &a,
            part,
            from,
            known && epoch == begun.epoch,
            &polled,
            epoch,
        ) else {
            return;
        };
        if let Some((last, _, _)) = messages.last() {
            cursors.insert(part, last + 1);
        }
    }
}

async fn member(mut a: Actor) {
    let mut joined: Option<u64> = None;
    let (stream, topic, group) = (sid(a.ids.stream), sid(a.ids.topics[1]), sid(a.ids.group));
    while a.think().await {
        if !a.connected().await {
            continue;
        }
        let session = a
            .client
            .as_ref()
            .and_then(|c| c.session())
            .map(|s| s.session);
        if session.is_none() || joined != session {
            let begun = a.begin("join group");
            let result = a
                .client()
                .join_consumer_group(&stream, &topic, &group)
                .await;
            a.end(&begun, &result);
            a.after(&begun);
            if result.is_ok() {
                joined = a
                    .client
                    .as_ref()
                    .and_then(|c| c.session())
                    .map(|s| s.session);
            }
            continue;
        }
        if lock(&a.world).rng.gen_bool(0.3) {
            let begun = a.begin("get group");
            let result = a.client().get_consumer_group(&stream, &topic, &group).await;
            a.end(&begun, &result);
            a.after(&begun);
            if let Ok(Some(details)) = result {
                let members: Vec<(u32, Vec<u32>)> = details
                    .members
                    .iter()
                    .map(|m| (m.id, m.partitions.clone()))
                    .collect();
                if let Err(v) = check_assignments(&members) {
                    a.fail(v);
                    return;
                }
            }
            continue;
        }
        let count = lock(&a.world).rng.gen_range(1..=MAX_POLL);
        let request = PollMessagesRequest {
            consumer: WireConsumer::consumer_group(group.clone()),
            stream_id: stream.clone(),
            topic_id: topic.clone(),
            partition_id: None,
            strategy: WirePollingStrategy::next(),
            count,
            auto_commit: true,
        };
        let begun = a.begin(&format!("group poll count {count}"));
        let result = a.client().poll_messages(&request).await;
        a.end(&begun, &result);
        let epoch = a.after(&begun);
        match result {
            Ok(polled) => {
                let part = (1, polled.partition_id);
                if polled.count > 0 && !lock(&a.world).oracle.parts.contains_key(&part) {
                    a.fail(violation(
                        oracle::INV_POLL,
                        format!(
                            "{}: a group poll answered for partition {}",
                            a.name, polled.partition_id
                        ),
                    ));
                    return;
                }
                if polled.count > 0 && judge_poll(&a, part, None, false, &polled, epoch).is_err() {
                    return;
                }
            }
            // Not a member (any more): join again.
            Err(_) => joined = None,
        }
    }
}

async fn admin(mut a: Actor) {
    let mut next = 0u32;
    while a.think().await {
        if !a.connected().await {
            continue;
        }
        let pick = lock(&a.world).rng.gen_range(0..100);
        match pick {
            0..=34 => {
                next += 1;
                create_stream(&mut a, format!("x{next}")).await;
            }
            35..=54 => delete_stream(&mut a).await,
            55..=79 => read_streams(&mut a).await,
            _ => users(&mut a, &mut next).await,
        }
        if lock(&a.world).violation.is_some() {
            return;
        }
    }
}

/// Creates scratch stream `name`; after an unknown outcome, tries once more on the new
/// session (where "already exists" is the first attempt having landed).
async fn create_stream(a: &mut Actor, name: String) {
    lock(&a.world)
        .oracle
        .streams
        .insert(name.clone(), StreamState::Absent);
    for attempt in 0..2 {
        let begun = a.begin(&format!(
            "create stream {name}{}",
            if attempt > 0 { " (retry)" } else { "" }
        ));
        // In doubt while in flight (the run may end before its reply).
        let before = in_flight(a, &name, begun.epoch);
        let result = a.client().create_stream(&name).await;
        a.end(&begun, &result);
        a.after(&begun);
        if let Ok(stream) = &result {
            let replay = {
                let mut w = lock(&a.world);
                w.oracle
                    .streams
                    .insert(name.clone(), StreamState::Exists(stream.id));
                let share = w.profile.replay;
                w.chance(share)
            };
            if replay {
                replay_create(a, &name, stream).await;
            }
            return;
        }
        let mut w = lock(&a.world);
        match (outcome(&result), &result) {
            (Outcome::Refused(1012), _) => {
                if before == StreamState::Absent {
                    w.fail(violation(INV_META, format!("create stream {name}: refused as existing, though no create of it can have landed")));
                }
                // The lost first attempt landed.
                return;
            }
            (Outcome::Unknown, _) => {
                w.oracle.lost_attempt(&name);
                continue;
            }
            (Outcome::Refused(_), _) => {
                // A refusal for a reason of the server's (a full disk): its journal entry
                // may have been written.
                let now_epoch = w.oracle.epoch;
                w.oracle
                    .streams
                    .insert(name.clone(), StreamState::InDoubt(now_epoch));
                return;
            }
            _ => {
                w.oracle.streams.insert(name.clone(), before);
                return;
            }
        }
    }
}

/// Marks stream `name` in doubt while a create or delete of it is in flight; returns what
/// the model held before.
fn in_flight(a: &Actor, name: &str, epoch: u64) -> StreamState {
    let mut w = lock(&a.world);
    let before = w.oracle.streams[name];
    w.oracle
        .streams
        .insert(name.to_string(), StreamState::InDoubt(epoch));
    before
}

/// The same request again, same header, same session: the duplicate table must answer it
/// with the original reply.
async fn replay_create(
    a: &mut Actor,
    name: &str,
    original: &cairn_client::iggy_binary_protocol::responses::streams::StreamResponse,
) {
    let begun = a.begin(&format!("replay create stream {name}"));
    let result = a.client().replay_last().await;
    a.end(&begun, &result);
    a.after(&begun);
    let payload = match result {
        Ok(payload) => payload,
        Err(ClientError::Server { code, .. }) => {
            // The table holds the session's last 64 metadata replies: a refusal means the
            // create ran again instead of being answered from it.
            a.fail(violation(INV_DEDUP, format!("create stream {name} replayed on its session right after its reply: refused with {code} (not answered from the duplicate table)")));
            return;
        }
        Err(_) => return,
    };
    let decoded =
        cairn_client::iggy_binary_protocol::responses::streams::StreamResponse::decode(&payload);
    match decoded {
        Ok((replayed, _)) if &replayed == original => lock(&a.world).decision("DedupAnswered"),
        Ok((replayed, _)) => a.fail(violation(INV_DEDUP, format!("create stream {name} replayed on its session: answered {replayed:?}, the original reply was {original:?}"))),
        Err(e) => a.fail(violation(INV_DEDUP, format!("create stream {name} replayed on its session: the reply does not decode as the original's kind ({e}); the original was {original:?}"))),
    }
}

async fn delete_stream(a: &mut Actor) {
    // By name: ids are reused, so a lost delete landing late could hit a newer stream.
    let name = {
        let mut w = lock(&a.world);
        let existing: Vec<String> = w
            .oracle
            .streams
            .iter()
            .filter(|(n, s)| {
                matches!(s, StreamState::Exists(_)) && !w.oracle.pending.contains_key(*n)
            })
            .map(|(n, _)| n.clone())
            .collect();
        if existing.is_empty() {
            return;
        }
        existing[w.rng.gen_range(0..existing.len())].clone()
    };
    for attempt in 0..2 {
        let begun = a.begin(&format!(
            "delete stream {name}{}",
            if attempt > 0 { " (retry)" } else { "" }
        ));
        let before = in_flight(a, &name, begun.epoch);
        let result = a
            .client()
            .delete_stream(&WireIdentifier::named(&name).expect("a valid name"))
            .await;
        a.end(&begun, &result);
        a.after(&begun);
        let mut w = lock(&a.world);
        match outcome(&result) {
            Outcome::Ok => {
                w.oracle.streams.insert(name.clone(), StreamState::Absent);
                return;
            }
            Outcome::Refused(1009 | 1010) => {
                if let StreamState::Exists(_) = before {
                    w.fail(violation(INV_META, format!("delete stream {name}: not found, though it was acknowledged and no delete of it can have landed")));
                } else {
                    w.oracle.streams.insert(name.clone(), StreamState::Absent);
                }
                return;
            }
            Outcome::Unknown => {
                w.oracle.lost_attempt(&name);
                continue;
            }
            Outcome::Refused(_) => {
                let now_epoch = w.oracle.epoch;
                w.oracle
                    .streams
                    .insert(name.clone(), StreamState::InDoubt(now_epoch));
                return;
            }
            Outcome::NotSent => {
                w.oracle.streams.insert(name.clone(), before);
                return;
            }
        }
    }
}

async fn read_streams(a: &mut Actor) {
    let begun = a.begin("get streams");
    let result = a.client().get_streams().await;
    a.end(&begun, &result);
    let epoch = a.after(&begun);
    let Ok(streams) = result else { return };
    let listed: BTreeMap<String, u32> = streams
        .iter()
        .filter(|s| s.name.as_str() != STREAM)
        .map(|s| (s.name.as_str().to_string(), s.id))
        .collect();
    let mut w = lock(&a.world);
    if epoch != w.oracle.epoch {
        return;
    }
    if let Err(v) = w.oracle.streams_read(&listed) {
        w.fail(v);
    }
}

/// Creates a user for the user's session, or deletes the one it uses.
async fn users(a: &mut Actor, next: &mut u32) {
    let (live, doubtful) = {
        let w = lock(&a.world);
        if !w.profile.user_session {
            return;
        }
        (
            w.oracle.live_users.keys().next().cloned(),
            !w.oracle.users_in_doubt.is_empty(),
        )
    };
    match live {
        None if !doubtful || next.is_multiple_of(4) => {
            *next += 1;
            let name = format!("u{next}");
            let password = format!("pw-{name}");
            let permissions = WirePermissions {
                global: WireGlobalPermissions {
                    manage_servers: false,
                    read_servers: false,
                    manage_users: false,
                    read_users: false,
                    manage_streams: false,
                    read_streams: true,
                    manage_topics: false,
                    read_topics: true,
                    poll_messages: true,
                    send_messages: false,
                },
                streams: Vec::new(),
            };
            let begun = a.begin(&format!("create user {name}"));
            lock(&a.world).oracle.users_in_doubt.insert(name.clone());
            let result = a
                .client()
                .create_user(&name, &password, true, Some(permissions))
                .await;
            a.end(&begun, &result);
            a.after(&begun);
            let mut w = lock(&a.world);
            match outcome(&result) {
                Outcome::Ok => {
                    w.oracle.users_in_doubt.remove(&name);
                    w.oracle.live_users.insert(name, password);
                }
                Outcome::NotSent => {
                    w.oracle.users_in_doubt.remove(&name);
                }
                _ => {}
            }
        }
        Some(name) => {
            let begun = a.begin(&format!("delete user {name}"));
            lock(&a.world).oracle.users_in_doubt.insert(name.clone());
            let result = a
                .client()
                .delete_user(&WireIdentifier::named(&name).expect("name"))
                .await;
            a.end(&begun, &result);
            a.after(&begun);
            let mut w = lock(&a.world);
            match outcome(&result) {
                Outcome::Ok => {
                    let now = w.now();
                    w.oracle.users_in_doubt.remove(&name);
                    w.oracle.live_users.remove(&name);
                    w.oracle.deleted_users.insert(name, now);
                }
                Outcome::NotSent => {
                    w.oracle.users_in_doubt.remove(&name);
                }
                _ => {
                    w.oracle.live_users.remove(&name);
                }
            }
        }
        None => {}
    }
}

/// Logs in as the admin's current user and polls; once the user's deletion was answered,
/// a request sent after that answer must get no data.
async fn user_session(mut a: Actor) {
    while a.think().await {
        let user = {
            let w = lock(&a.world);
            let free = w
                .oracle
                .live_users
                .iter()
                .find(|(n, _)| !w.oracle.users_in_doubt.contains(*n));
            free.map(|(n, p)| (n.clone(), p.clone()))
        };
        let Some((name, password)) = user else {
            continue;
        };
        a.config = a.config.clone().with_credentials(&name, &password);
        a.client = None;
        a.session = None;
        if !a.connected().await {
            continue;
        }
        while a.think().await {
            let request = PollMessagesRequest {
                consumer: WireConsumer::consumer(sid(99)),
                stream_id: sid(a.ids.stream),
                topic_id: sid(a.ids.topics[0]),
                partition_id: Some(0),
                strategy: WirePollingStrategy::offset(0),
                count: 5,
                auto_commit: false,
            };
            let known = lock(&a.world).oracle.knows((0, 0), 0);
            let begun = a.begin(&format!("poll as user {name}"));
            let result = a.client().poll_messages(&request).await;
            a.end(&begun, &result);
            let epoch = a.after(&begun);
            let deleted_at = lock(&a.world).oracle.deleted_users.get(&name).copied();
            match (&result, deleted_at) {
                (Ok(polled), Some(at)) if at <= begun.at => {
                    a.fail(violation(INV_REVOKED, format!("user {name} was deleted (answered at {at} ns); its session's poll sent at {} ns was answered with {} messages", begun.at, polled.count)));
                    return;
                }
                (Ok(polled), _) => {
                    if judge_poll(
                        &a,
                        (0, 0),
                        Some(0),
                        known && epoch == begun.epoch,
                        polled,
                        epoch,
                    )
                    .is_err()
                    {
                        return;
                    }
                }
                (Err(_), Some(_)) => break,
                (Err(_), None) => {
                    if !lock(&a.world).oracle.live_users.contains_key(&name) {
                        break;
                    }
                }
            }
        }
    }
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

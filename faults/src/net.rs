//! A simulated network of byte-stream connections, in virtual time.
//!
//! A connection is a pair of one-way pipes. Every write becomes chunks delivered after a
//! seeded random delay; chunks of one direction arrive in order, exactly once, as TCP
//! delivers them, so packet loss, reordering and duplication show up to the application as
//! what TCP makes of them: delay spikes (a retransmission). On top of that:
//! - each pipe holds at most [`NetFaults::pipe_capacity`] bytes: a write waits for the reader
//!   to make room (back-pressure, as a full socket buffer and a zero TCP window give);
//! - a read returns what is due, coalescing chunks and, when [`NetFaults::split_reads`],
//!   stopping at a seeded random byte (frames arrive split and joined anywhere);
//! - connection resets at any byte: the writer fails with `ConnectionReset`, the reader gets
//!   a seeded prefix of that write and then the reset;
//! - partitions between two hosts (connects fail; chunks in flight wait until it heals), and
//!   one-way ones ([`SimNet::cut_one_way`]: chunks from one host to the other wait, the
//!   other way flows; a connect, which needs both ways, fails);
//! - a host's power loss ([`SimNet::power_off`]): its connections are neither closed nor
//!   reset; peers see them half-open (reads wait, writes fill the pipe and then wait) until
//!   their own timeouts, and after [`SimNet::power_on`] a peer's next use of a connection of
//!   the old boot is reset, as the rebooted host's RST does;
//! - a dropped end closes its direction (the peer reads the rest, then end of stream) and
//!   resets the other (the peer's writes fail, as a closed socket's RST makes them). Stricter
//!   than TCP, where the peer's first write after the close still succeeds and only a later
//!   one fails: here the first does.
//!
//! Every fault is recorded.

use crate::clock::SimClock;
use cairn_engine::env::{BoxFuture, ByteStream, Clock, Listener, Net};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::poll_fn;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

/// Fault intensities of the network.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetFaults {
    /// Delivery delay of a chunk, uniformly in this range (nanoseconds).
    pub delay_nanos: (u64, u64),
    /// Probability that a chunk suffers a retransmission delay spike.
    pub spike: Option<f64>,
    /// Probability that a write resets its connection.
    pub reset: Option<f64>,
    /// Bytes one direction of a connection holds before a write waits for the reader.
    pub pipe_capacity: usize,
    /// Reads stop at seeded random bytes (otherwise they take everything due that fits).
    pub split_reads: bool,
}

impl Default for NetFaults {
    fn default() -> Self {
        NetFaults {
            delay_nanos: (50_000, 500_000),
            spike: None,
            reset: None,
            pipe_capacity: 64 * 1024,
            split_reads: true,
        }
    }
}

/// What happened on the network (for traces and coverage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetEvent {
    DelaySpike {
        from: SocketAddr,
        to: SocketAddr,
    },
    /// A reset that cut a write after `delivered` of its bytes.
    Reset {
        from: SocketAddr,
        to: SocketAddr,
        delivered: usize,
    },
    ConnectRefused {
        to: SocketAddr,
        partitioned: bool,
    },
    /// A write waited for the reader to make room.
    BackPressure {
        from: SocketAddr,
        to: SocketAddr,
    },
    PowerOff {
        host: IpAddr,
    },
    PowerOn {
        host: IpAddr,
    },
    /// A peer used a connection of a host's earlier boot: reset.
    StaleConnection {
        from: SocketAddr,
        to: SocketAddr,
    },
}

#[derive(Default)]
struct Pipe {
    chunks: VecDeque<(u64, Vec<u8>)>,
    /// Bytes queued (the chunks' lengths), bounded by the capacity.
    queued: usize,
    /// Delivery time of the last chunk queued (keeps the direction in order).
    last_delivery: u64,
    closed: bool,
    /// Reads fail once the chunks queued before the reset are read.
    reset_after_queued: bool,
    reset: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

impl Pipe {
    fn wake(&mut self) {
        for waker in [self.reader.take(), self.writer.take()]
            .into_iter()
            .flatten()
        {
            waker.wake();
        }
    }
}

struct PendingAccept {
    stream: SimStream,
    peer: SocketAddr,
}

#[derive(Default)]
struct ListenerState {
    pending: VecDeque<PendingAccept>,
    waker: Option<Waker>,
}

struct State {
    rng: ChaCha8Rng,
    faults: NetFaults,
    listeners: BTreeMap<SocketAddr, ListenerState>,
    /// Directions cut: chunks from the first host to the second wait.
    partitions: BTreeSet<(IpAddr, IpAddr)>,
    next_port: u16,
    events: Vec<NetEvent>,
    /// Hosts without power: their connections are frozen half-open.
    down: BTreeSet<IpAddr>,
    /// Each host's boot count: a connection remembers its ends' boots.
    boots: BTreeMap<IpAddr, u64>,
}

impl State {
    fn boot(&self, ip: IpAddr) -> u64 {
        self.boots.get(&ip).copied().unwrap_or(0)
    }
}

/// The simulated network; one per simulated cluster, shared by every node's `Env`.
#[derive(Clone)]
pub struct SimNet {
    state: Arc<Mutex<State>>,
    clock: SimClock,
}

/// A `Net` as seen from one host: connections it opens come from `ip`.
#[derive(Clone)]
pub struct HostNet {
    net: SimNet,
    ip: IpAddr,
}

impl SimNet {
    pub fn new(seed: u64, clock: SimClock, faults: NetFaults) -> SimNet {
        SimNet {
            state: Arc::new(Mutex::new(State {
                rng: ChaCha8Rng::seed_from_u64(seed),
                faults,
                listeners: BTreeMap::new(),
                partitions: BTreeSet::new(),
                next_port: 40_000,
                events: Vec::new(),
                down: BTreeSet::new(),
                boots: BTreeMap::new(),
            })),
            clock,
        }
    }

    /// The network as host `ip` sees it.
    pub fn host(&self, ip: IpAddr) -> HostNet {
        HostNet {
            net: self.clone(),
            ip,
        }
    }

    pub fn set_faults(&self, faults: NetFaults) {
        self.state.lock().expect("net").faults = faults;
    }

    /// Cuts every link between hosts `a` and `b`, both ways.
    pub fn partition(&self, a: IpAddr, b: IpAddr) {
        let mut s = self.state.lock().expect("net");
        s.partitions.insert((a, b));
        s.partitions.insert((b, a));
    }

    /// Cuts the links from host `from` to host `to` only: what `to` sends `from` still
    /// arrives.
    pub fn cut_one_way(&self, from: IpAddr, to: IpAddr) {
        self.state
            .lock()
            .expect("net")
            .partitions
            .insert((from, to));
    }

    /// Heals the partition between `a` and `b`, both ways (other partitions and faults
    /// stay).
    pub fn heal_partition(&self, a: IpAddr, b: IpAddr) {
        let mut s = self.state.lock().expect("net");
        s.partitions.remove(&(a, b));
        s.partitions.remove(&(b, a));
    }

    /// How many events happened so far.
    pub fn event_count(&self) -> usize {
        self.state.lock().expect("net").events.len()
    }

    /// The events from `from` on.
    pub fn events_since(&self, from: usize) -> Vec<NetEvent> {
        let s = self.state.lock().expect("net");
        s.events[from.min(s.events.len())..].to_vec()
    }

    /// Heals every partition and switches off resets and spikes.
    pub fn heal(&self) {
        let mut s = self.state.lock().expect("net");
        s.partitions.clear();
        s.faults.spike = None;
        s.faults.reset = None;
    }

    /// Host `ip` loses power: its connections stay open at their peers (half-open), nothing
    /// more leaves it, and connects to it time out.
    pub fn power_off(&self, ip: IpAddr) {
        let mut s = self.state.lock().expect("net");
        s.down.insert(ip);
        s.events.push(NetEvent::PowerOff { host: ip });
    }

    /// Host `ip` boots again: connections of its earlier boot are reset at their peers'
    /// next use.
    pub fn power_on(&self, ip: IpAddr) {
        let mut s = self.state.lock().expect("net");
        s.down.remove(&ip);
        *s.boots.entry(ip).or_insert(0) += 1;
        s.events.push(NetEvent::PowerOn { host: ip });
    }

    pub fn events(&self) -> Vec<NetEvent> {
        self.state.lock().expect("net").events.clone()
    }

    /// Whether chunks from `from` to `to` wait.
    fn cut(&self, from: IpAddr, to: IpAddr) -> bool {
        self.state
            .lock()
            .expect("net")
            .partitions
            .contains(&(from, to))
    }
}

impl Net for HostNet {
    fn listen(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn Listener>>> {
        let net = self.net.clone();
        Box::pin(async move {
            let mut s = net.state.lock().expect("net");
            if s.listeners.contains_key(&addr) {
                return Err(io::Error::new(io::ErrorKind::AddrInUse, "address in use"));
            }
            s.listeners.insert(addr, ListenerState::default());
            Ok(Box::new(SimListener {
                net: net.clone(),
                addr,
            }) as Box<dyn Listener>)
        })
    }

    fn connect(&self, to: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn ByteStream>>> {
        let net = self.net.clone();
        let from_ip = self.ip;
        Box::pin(async move {
            // A handshake takes a round trip.
            let delay = {
                let mut s = net.state.lock().expect("net");
                let (lo, hi) = s.faults.delay_nanos;
                2 * s.rng.gen_range(lo..=hi)
            };
            net.clock.sleep(Duration::from_nanos(delay)).await;
            let mut s = net.state.lock().expect("net");
            let partitioned = s.partitions.contains(&(from_ip, to.ip()))
                || s.partitions.contains(&(to.ip(), from_ip))
                || s.down.contains(&to.ip());
            if partitioned || !s.listeners.contains_key(&to) {
                s.events.push(NetEvent::ConnectRefused { to, partitioned });
                return Err(if partitioned {
                    io::Error::new(io::ErrorKind::TimedOut, "connect timed out (partition)")
                } else {
                    io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused")
                });
            }
            let port = s.next_port;
            s.next_port = s.next_port.wrapping_add(1).max(40_000);
            let local = SocketAddr::new(from_ip, port);
            let up = Arc::new(Mutex::new(Pipe::default()));
            let down = Arc::new(Mutex::new(Pipe::default()));
            let boots = (s.boot(from_ip), s.boot(to.ip()));
            let client = SimStream {
                net: net.clone(),
                local,
                peer: to,
                tx: up.clone(),
                rx: down.clone(),
                boots,
            };
            let server = SimStream {
                net: net.clone(),
                local: to,
                peer: local,
                tx: down,
                rx: up,
                boots: (boots.1, boots.0),
            };
            let listener = s.listeners.get_mut(&to).expect("checked");
            listener.pending.push_back(PendingAccept {
                stream: server,
                peer: local,
            });
            if let Some(waker) = listener.waker.take() {
                waker.wake();
            }
            Ok(Box::new(client) as Box<dyn ByteStream>)
        })
    }
}

struct SimListener {
    net: SimNet,
    addr: SocketAddr,
}

impl Listener for SimListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>> {
        Box::pin(poll_fn(move |cx| {
            let mut s = self.net.state.lock().expect("net");
            let listener = s.listeners.get_mut(&self.addr).expect("listening");
            match listener.pending.pop_front() {
                Some(PendingAccept { stream, peer }) => {
                    Poll::Ready(Ok((Box::new(stream) as Box<dyn ByteStream>, peer)))
                }
                None => {
                    listener.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        }))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

impl Drop for SimListener {
    fn drop(&mut self) {
        // Taken out under the lock, dropped after it: the connections it never accepted
        // close, and a stream's drop reads the network's state.
        let unaccepted = self
            .net
            .state
            .lock()
            .ok()
            .and_then(|mut s| s.listeners.remove(&self.addr));
        drop(unaccepted);
    }
}

/// One end of a simulated connection.
pub struct SimStream {
    net: SimNet,
    local: SocketAddr,
    peer: SocketAddr,
    tx: Arc<Mutex<Pipe>>,
    rx: Arc<Mutex<Pipe>>,
    /// The boots of this end's host and of the peer's when the connection was made.
    boots: (u64, u64),
}

fn reset_error() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "connection reset")
}

/// How this end's connection stands with the hosts' power.
enum Power {
    Up,
    /// This end's host is down: the process is gone, nothing it does goes anywhere.
    LocalDown,
    /// The peer's host is down (half-open): nothing comes from it, nothing it takes.
    PeerDown,
    /// The peer's host rebooted since: the connection is dead, its next use is reset.
    PeerRebooted,
}

impl SimStream {
    fn power(&self) -> Power {
        let s = self.net.state.lock().expect("net");
        if s.down.contains(&self.local.ip()) {
            Power::LocalDown
        } else if s.down.contains(&self.peer.ip()) {
            Power::PeerDown
        } else if s.boot(self.peer.ip()) != self.boots.1 {
            Power::PeerRebooted
        } else {
            Power::Up
        }
    }

    /// Both directions reset (what a rebooted peer's RST, or a reset fault, does).
    fn reset_both(&self) {
        for pipe in [&self.tx, &self.rx] {
            let mut pipe = pipe.lock().expect("pipe");
            pipe.reset = true;
            pipe.chunks.clear();
            pipe.queued = 0;
            pipe.wake();
        }
    }

    fn stale(&self) -> io::Error {
        self.net
            .state
            .lock()
            .expect("net")
            .events
            .push(NetEvent::StaleConnection {
                from: self.local,
                to: self.peer,
            });
        self.reset_both();
        reset_error()
    }

    /// At most how many bytes the next read returns: all of `available`, or a seeded
    /// random cut of it.
    fn read_cut(&self, available: usize) -> usize {
        let mut s = self.net.state.lock().expect("net");
        if available > 1 && s.faults.split_reads && s.rng.gen_bool(0.3) {
            s.rng.gen_range(1..available)
        } else {
            available
        }
    }

    async fn read_inner(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.power() {
                Power::PeerRebooted => return Err(self.stale()),
                // Half-open, or a dead process's socket: wait (the peer's timeouts decide).
                Power::LocalDown | Power::PeerDown => {
                    self.net.clock.sleep(Duration::from_millis(10)).await;
                    continue;
                }
                Power::Up => {}
            }
            let now = self.net.clock.now_nanos();
            let partitioned = self.net.cut(self.peer.ip(), self.local.ip());
            let (due_bytes, next_due) = {
                let pipe = self.rx.lock().expect("pipe");
                if pipe.reset && (!pipe.reset_after_queued || pipe.chunks.is_empty()) {
                    return Err(reset_error());
                }
                if pipe.chunks.is_empty() && pipe.closed {
                    return Ok(0);
                }
                let due: usize = pipe
                    .chunks
                    .iter()
                    .take_while(|(at, _)| *at <= now)
                    .map(|(_, c)| c.len())
                    .sum();
                (due, pipe.chunks.front().map(|(at, _)| *at))
            };
            if next_due.is_none() {
                // Nothing queued: wait for a writer (or a close, or a reset).
                let rx = self.rx.clone();
                poll_fn(|cx| {
                    let mut pipe = rx.lock().expect("pipe");
                    if pipe.chunks.is_empty() && !pipe.closed && !pipe.reset {
                        pipe.reader = Some(cx.waker().clone());
                        Poll::Pending
                    } else {
                        Poll::Ready(())
                    }
                })
                .await;
                continue;
            }
            if due_bytes == 0 || partitioned || buf.is_empty() {
                // While partitioned, data waits; poll again a little later.
                let wait = match next_due {
                    Some(at) if !partitioned && at > now => at - now,
                    _ => 1_000_000,
                };
                self.net.clock.sleep(Duration::from_nanos(wait)).await;
                continue;
            }
            let want = self.read_cut(due_bytes.min(buf.len()));
            return Ok(self.take(buf, want));
        }
    }

    /// Copies `want` due bytes out of the receive pipe, across chunks; wakes a writer
    /// waiting for room.
    fn take(&self, buf: &mut [u8], want: usize) -> usize {
        let mut pipe = self.rx.lock().expect("pipe");
        let mut n = 0;
        while n < want {
            let (_, chunk) = pipe.chunks.front_mut().expect("the due bytes are queued");
            let k = (want - n).min(chunk.len());
            buf[n..n + k].copy_from_slice(&chunk[..k]);
            chunk.drain(..k);
            if chunk.is_empty() {
                pipe.chunks.pop_front();
            }
            n += k;
        }
        pipe.queued -= n;
        if let Some(writer) = pipe.writer.take() {
            writer.wake();
        }
        n
    }

    /// Whether this write resets the connection.
    fn write_resets(&self) -> bool {
        let mut s = self.net.state.lock().expect("net");
        let reset = s.faults.reset;
        reset.is_some_and(|p| s.rng.gen_bool(p))
    }

    /// The delivery delay of the next chunk, drawn under the faults in force now: each chunk
    /// may suffer a spike of its own, so a write longer than the pipe pays a spike once,
    /// not once per pipe-full, and chunks sent after the faults heal travel healed.
    fn chunk_delay(&self) -> u64 {
        let mut s = self.net.state.lock().expect("net");
        let faults = s.faults;
        let (lo, hi) = faults.delay_nanos;
        let mut delay = s.rng.gen_range(lo..=hi);
        if faults.spike.is_some_and(|p| s.rng.gen_bool(p)) {
            delay += s.rng.gen_range(200_000_000..1_000_000_000);
            s.events.push(NetEvent::DelaySpike {
                from: self.local,
                to: self.peer,
            });
        }
        delay
    }

    /// A reset in the middle of `buf`: a seeded prefix reaches the reader before the reset
    /// does; this end's reads fail at once.
    fn reset_within(&self, buf: &[u8], delay: u64) -> io::Error {
        let delivered = {
            let mut s = self.net.state.lock().expect("net");
            let delivered = s.rng.gen_range(0..=buf.len());
            s.events.push(NetEvent::Reset {
                from: self.local,
                to: self.peer,
                delivered,
            });
            delivered
        };
        {
            let mut pipe = self.tx.lock().expect("pipe");
            if delivered > 0 {
                let due = (self.net.clock.now_nanos() + delay).max(pipe.last_delivery);
                pipe.last_delivery = due;
                pipe.chunks.push_back((due, buf[..delivered].to_vec()));
                pipe.queued += delivered;
            }
            pipe.reset = true;
            pipe.reset_after_queued = true;
            pipe.wake();
        }
        let mut rx = self.rx.lock().expect("pipe");
        rx.reset = true;
        rx.chunks.clear();
        rx.queued = 0;
        rx.wake();
        reset_error()
    }

    async fn write_inner(&mut self, mut buf: &[u8]) -> io::Result<()> {
        if self.write_resets() {
            let delay = self.chunk_delay();
            return Err(self.reset_within(buf, delay));
        }
        let capacity = self
            .net
            .state
            .lock()
            .expect("net")
            .faults
            .pipe_capacity
            .max(1);
        let mut waited = false;
        while !buf.is_empty() {
            match self.power() {
                Power::PeerRebooted => return Err(self.stale()),
                // A dead process writes nothing; its task is about to be dropped.
                Power::LocalDown => {
                    self.net.clock.sleep(Duration::from_millis(10)).await;
                    continue;
                }
                Power::PeerDown | Power::Up => {}
            }
            let room = {
                let mut pipe = self.tx.lock().expect("pipe");
                if pipe.reset {
                    return Err(reset_error());
                }
                if pipe.closed {
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "write after shutdown",
                    ));
                }
                let room = capacity.saturating_sub(pipe.queued);
                if room > 0 {
                    let n = room.min(buf.len());
                    // Drawn as the chunk is queued, under the faults in force now; under the
                    // pipe's lock (a pipe's lock may be held while the network's is taken,
                    // never the other way round).
                    let delay = self.chunk_delay();
                    let due = (self.net.clock.now_nanos() + delay).max(pipe.last_delivery);
                    pipe.last_delivery = due;
                    pipe.chunks.push_back((due, buf[..n].to_vec()));
                    pipe.queued += n;
                    if let Some(reader) = pipe.reader.take() {
                        reader.wake();
                    }
                    buf = &buf[n..];
                }
                room
            };
            if room == 0 {
                if !waited {
                    waited = true;
                    self.net
                        .state
                        .lock()
                        .expect("net")
                        .events
                        .push(NetEvent::BackPressure {
                            from: self.local,
                            to: self.peer,
                        });
                }
                self.wait_for_room(capacity).await;
            }
        }
        Ok(())
    }

    /// Until the reader made room (or the pipe broke), rechecking the hosts' power now and
    /// then (a half-open peer never reads).
    async fn wait_for_room(&self, capacity: usize) {
        let tx = self.tx.clone();
        let room = poll_fn(move |cx| {
            let mut pipe = tx.lock().expect("pipe");
            if pipe.queued < capacity || pipe.reset || pipe.closed {
                Poll::Ready(())
            } else {
                pipe.writer = Some(cx.waker().clone());
                Poll::Pending
            }
        });
        let _ =
            cairn_engine::env::race(room, self.net.clock.sleep(Duration::from_millis(50))).await;
    }
}

impl ByteStream for SimStream {
    fn read<'a>(&'a mut self, buf: &'a mut [u8]) -> BoxFuture<'a, io::Result<usize>> {
        Box::pin(self.read_inner(buf))
    }

    fn write_all<'a>(&'a mut self, buf: &'a [u8]) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(self.write_inner(buf))
    }

    fn shutdown(&mut self) -> BoxFuture<'_, io::Result<()>> {
        let mut pipe = self.tx.lock().expect("pipe");
        pipe.closed = true;
        pipe.wake();
        Box::pin(async { Ok(()) })
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        // Like a closed socket: the peer reads end of stream after what was sent. A host
        // without power sends no FIN: the peer's side stays open (half-open).
        let down = self
            .net
            .state
            .lock()
            .map(|s| s.down.contains(&self.local.ip()))
            .unwrap_or(false);
        if down {
            return;
        }
        if let Ok(mut pipe) = self.tx.lock() {
            pipe.closed = true;
            pipe.wake();
        }
        // A closed socket answers data with an RST: the peer's writes fail, and what it had
        // sent unread is gone (a writer waiting on a full pipe is not left to its timeout).
        if let Ok(mut pipe) = self.rx.lock() {
            pipe.reset = true;
            pipe.chunks.clear();
            pipe.queued = 0;
            pipe.wake();
        }
    }
}

//! A simulated network of byte-stream connections, in virtual time.
//!
//! A connection is a pair of one-way pipes. Every write becomes a chunk delivered after a
//! seeded random delay; chunks of one direction arrive in order, exactly once, as TCP
//! delivers them, so packet loss, reordering and duplication show up to the application as
//! what TCP makes of them: delay spikes (a retransmission). On top of that: connection resets
//! (a write or read fails with `ConnectionReset`), and partitions between two hosts (connects
//! fail; chunks in flight wait until the partition heals). Every fault is recorded.

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
}

impl Default for NetFaults {
    fn default() -> Self {
        NetFaults {
            delay_nanos: (50_000, 500_000),
            spike: None,
            reset: None,
        }
    }
}

/// What happened on the network (for traces and coverage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetEvent {
    DelaySpike { from: SocketAddr, to: SocketAddr },
    Reset { from: SocketAddr, to: SocketAddr },
    ConnectRefused { to: SocketAddr, partitioned: bool },
}

#[derive(Default)]
struct Pipe {
    chunks: VecDeque<(u64, Vec<u8>)>,
    /// Delivery time of the last chunk queued (keeps the direction in order).
    last_delivery: u64,
    closed: bool,
    reset: bool,
    reader: Option<Waker>,
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
    partitions: BTreeSet<(IpAddr, IpAddr)>,
    next_port: u16,
    events: Vec<NetEvent>,
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

fn ordered(a: IpAddr, b: IpAddr) -> (IpAddr, IpAddr) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
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

    /// Cuts every link between hosts `a` and `b`.
    pub fn partition(&self, a: IpAddr, b: IpAddr) {
        self.state
            .lock()
            .expect("net")
            .partitions
            .insert(ordered(a, b));
    }

    /// Heals every partition and switches off resets and spikes.
    pub fn heal(&self) {
        let mut s = self.state.lock().expect("net");
        s.partitions.clear();
        s.faults.spike = None;
        s.faults.reset = None;
    }

    pub fn events(&self) -> Vec<NetEvent> {
        self.state.lock().expect("net").events.clone()
    }

    fn partitioned(&self, a: IpAddr, b: IpAddr) -> bool {
        self.state
            .lock()
            .expect("net")
            .partitions
            .contains(&ordered(a, b))
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
            let partitioned = net.partitioned(from_ip, to.ip());
            let mut s = net.state.lock().expect("net");
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
            let client = SimStream {
                net: net.clone(),
                local,
                peer: to,
                tx: up.clone(),
                rx: down.clone(),
            };
            let server = SimStream {
                net: net.clone(),
                local: to,
                peer: local,
                tx: down,
                rx: up,
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
        if let Ok(mut s) = self.net.state.lock() {
            s.listeners.remove(&self.addr);
        }
    }
}

/// One end of a simulated connection.
pub struct SimStream {
    net: SimNet,
    local: SocketAddr,
    peer: SocketAddr,
    tx: Arc<Mutex<Pipe>>,
    rx: Arc<Mutex<Pipe>>,
}

fn reset_error() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "connection reset")
}

impl SimStream {
    async fn read_inner(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // What is deliverable now, or when the next chunk is due.
            let wait = {
                let mut pipe = self.rx.lock().expect("pipe");
                if pipe.reset {
                    return Err(reset_error());
                }
                let now = self.net.clock.now_nanos();
                let partitioned = self.net.partitioned(self.local.ip(), self.peer.ip());
                match pipe.chunks.front().map(|(due, _)| *due) {
                    Some(due) if due <= now && !partitioned => {
                        let (_, chunk) = pipe.chunks.front_mut().expect("front chunk");
                        let n = buf.len().min(chunk.len());
                        buf[..n].copy_from_slice(&chunk[..n]);
                        chunk.drain(..n);
                        let emptied = chunk.is_empty();
                        if emptied {
                            pipe.chunks.pop_front();
                        }
                        return Ok(n);
                    }
                    // While partitioned, data waits; poll again a little later.
                    Some(_) if partitioned => Some(1_000_000),
                    Some(due) => Some(due - now),
                    None if pipe.closed => return Ok(0),
                    None => None,
                }
            };
            match wait {
                Some(nanos) => self.net.clock.sleep(Duration::from_nanos(nanos)).await,
                None => {
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
                    .await
                }
            }
        }
    }

    fn write_inner(&mut self, buf: &[u8]) -> io::Result<()> {
        let (delay, reset) = {
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
            let reset = faults.reset.is_some_and(|p| s.rng.gen_bool(p));
            if reset {
                s.events.push(NetEvent::Reset {
                    from: self.local,
                    to: self.peer,
                });
            }
            (delay, reset)
        };
        if reset {
            for pipe in [&self.tx, &self.rx] {
                let mut pipe = pipe.lock().expect("pipe");
                pipe.reset = true;
                pipe.chunks.clear();
                if let Some(waker) = pipe.reader.take() {
                    waker.wake();
                }
            }
            return Err(reset_error());
        }
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
        let due = (self.net.clock.now_nanos() + delay).max(pipe.last_delivery);
        pipe.last_delivery = due;
        pipe.chunks.push_back((due, buf.to_vec()));
        if let Some(waker) = pipe.reader.take() {
            waker.wake();
        }
        Ok(())
    }
}

impl ByteStream for SimStream {
    fn read<'a>(&'a mut self, buf: &'a mut [u8]) -> BoxFuture<'a, io::Result<usize>> {
        Box::pin(self.read_inner(buf))
    }

    fn write_all<'a>(&'a mut self, buf: &'a [u8]) -> BoxFuture<'a, io::Result<()>> {
        let result = self.write_inner(buf);
        Box::pin(async move { result })
    }

    fn shutdown(&mut self) -> BoxFuture<'_, io::Result<()>> {
        let mut pipe = self.tx.lock().expect("pipe");
        pipe.closed = true;
        if let Some(waker) = pipe.reader.take() {
            waker.wake();
        }
        Box::pin(async { Ok(()) })
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        // Like a closed socket: the peer reads end of stream after what was sent.
        if let Ok(mut pipe) = self.tx.lock() {
            pipe.closed = true;
            if let Some(waker) = pipe.reader.take() {
                waker.wake();
            }
        }
    }
}

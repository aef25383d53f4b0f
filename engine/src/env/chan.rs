//! Bounded channels, one-shot replies, a counting semaphore and a latch that belong to no
//! runtime: each is a mutex around its state plus the wakers of whoever waits, so the same
//! code runs on OS threads in production and on the seeded single-threaded executor in the
//! simulator (where wake order is the executor's seeded choice, never the channel's).
//!
//! Every channel has an explicit capacity. [`Sender::try_send`] reports a full channel at
//! once (back-pressure the caller can turn into an error); [`Sender::send`] waits for room.
//! A receiver that is gone makes every send fail with the value handed back; senders that
//! are all gone make [`Receiver::recv`] end with `None` once the queue is drained.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// Most items any channel may hold: a capacity above it is a configuration bug.
pub const MAX_CAPACITY: usize = 1 << 20;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks is an engine bug already being reported; the
    // state itself (a queue and wakers) stays consistent, so keep serving it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Wakers of tasks waiting on one condition. A task polled again re-registers, so the same
/// task may appear twice; that only costs a spurious wake.
#[derive(Default)]
struct Waiters(Vec<Waker>);

impl Waiters {
    fn register(&mut self, waker: &Waker) {
        if !self.0.iter().any(|w| w.will_wake(waker)) {
            self.0.push(waker.clone());
        }
    }

    fn wake_all(&mut self) {
        for waker in self.0.drain(..) {
            waker.wake();
        }
    }
}

// Bounded channel ---------------------------------------------------------------------------

struct ChannelState<T> {
    queue: VecDeque<T>,
    capacity: usize,
    senders: usize,
    receiver_alive: bool,
    receiver: Option<Waker>,
    /// Senders waiting for room. All are woken when an item leaves: one of them gets the
    /// slot, the others register again (no lost wake-up when a woken sender is dropped).
    blocked: Waiters,
}

struct Channel<T> {
    state: Mutex<ChannelState<T>>,
}

/// Why [`Sender::try_send`] did not take the value (which comes back).
#[derive(Debug, PartialEq, Eq)]
pub enum TrySendError<T> {
    Full(T),
    Closed(T),
}

/// The receiver is gone; the value comes back.
#[derive(Debug, PartialEq, Eq)]
pub struct Closed<T>(pub T);

/// Why [`Receiver::try_recv`] returned nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryRecvError {
    Empty,
    Closed,
}

pub struct Sender<T> {
    channel: Arc<Channel<T>>,
}

pub struct Receiver<T> {
    channel: Arc<Channel<T>>,
}

/// A channel holding at most `capacity` items (1 ..= [`MAX_CAPACITY`]).
pub fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    assert!(
        (1..=MAX_CAPACITY).contains(&capacity),
        "channel capacity {capacity} out of 1..={MAX_CAPACITY}"
    );
    let channel = Arc::new(Channel {
        state: Mutex::new(ChannelState {
            queue: VecDeque::new(),
            capacity,
            senders: 1,
            receiver_alive: true,
            receiver: None,
            blocked: Waiters::default(),
        }),
    });
    (
        Sender {
            channel: channel.clone(),
        },
        Receiver { channel },
    )
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        lock(&self.channel.state).senders += 1;
        Sender {
            channel: self.channel.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = lock(&self.channel.state);
        state.senders -= 1;
        if state.senders == 0 {
            if let Some(waker) = state.receiver.take() {
                waker.wake();
            }
        }
    }
}

impl<T> Sender<T> {
    /// Queues `value` if there is room, at once.
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        let mut state = lock(&self.channel.state);
        if !state.receiver_alive {
            return Err(TrySendError::Closed(value));
        }
        if state.queue.len() >= state.capacity {
            return Err(TrySendError::Full(value));
        }
        state.queue.push_back(value);
        let receiver = state.receiver.take();
        drop(state);
        // Woken outside the lock: the woken receiver's first act is to take it.
        if let Some(waker) = receiver {
            waker.wake();
        }
        Ok(())
    }

    /// Queues `value`, waiting for room.
    pub fn send(&self, value: T) -> SendFuture<'_, T> {
        SendFuture {
            sender: self,
            value: Some(value),
        }
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        !lock(&self.channel.state).receiver_alive
    }

    /// Items queued now.
    pub fn len(&self) -> usize {
        lock(&self.channel.state).queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub struct SendFuture<'a, T> {
    sender: &'a Sender<T>,
    value: Option<T>,
}

impl<T> Unpin for SendFuture<'_, T> {}

impl<T> Future for SendFuture<'_, T> {
    type Output = Result<(), Closed<T>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let value = self
            .value
            .take()
            .expect("a send future is polled after it finished");
        match self.sender.try_send(value) {
            Ok(()) => Poll::Ready(Ok(())),
            Err(TrySendError::Closed(value)) => Poll::Ready(Err(Closed(value))),
            Err(TrySendError::Full(value)) => {
                let mut state = lock(&self.sender.channel.state);
                // Room may have appeared between the attempt and this lock.
                if state.queue.len() < state.capacity || !state.receiver_alive {
                    drop(state);
                    self.value = Some(value);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                state.blocked.register(cx.waker());
                drop(state);
                self.value = Some(value);
                Poll::Pending
            }
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = lock(&self.channel.state);
        state.receiver_alive = false;
        state.blocked.wake_all();
        // The queued items are dropped with the last reference to the channel, outside
        // this lock: an item may be a reply handle whose drop wakes another task.
        let queued = std::mem::take(&mut state.queue);
        drop(state);
        drop(queued);
    }
}

impl<T> Receiver<T> {
    /// The next item, waiting for one; `None` once every sender is gone and the queue is
    /// drained.
    pub fn recv(&mut self) -> RecvFuture<'_, T> {
        RecvFuture { receiver: self }
    }

    /// The next item if one is queued.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let mut state = lock(&self.channel.state);
        match state.queue.pop_front() {
            Some(value) => {
                state.blocked.wake_all();
                Ok(value)
            }
            None if state.senders == 0 => Err(TryRecvError::Closed),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Items queued now.
    pub fn len(&self) -> usize {
        lock(&self.channel.state).queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub struct RecvFuture<'a, T> {
    receiver: &'a mut Receiver<T>,
}

impl<T> Future for RecvFuture<'_, T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut state = lock(&self.receiver.channel.state);
        if let Some(value) = state.queue.pop_front() {
            state.blocked.wake_all();
            return Poll::Ready(Some(value));
        }
        if state.senders == 0 {
            return Poll::Ready(None);
        }
        state.receiver = Some(cx.waker().clone());
        Poll::Pending
    }
}

// One-shot reply ----------------------------------------------------------------------------

struct OneshotState<T> {
    value: Option<T>,
    /// The sender was dropped without sending (or sent already, when `value` is taken).
    done: bool,
    waker: Option<Waker>,
}

/// The answering half of a one-shot: [`Reply::send`] once, or drop it (the waiter then gets
/// [`Canceled`]).
pub struct Reply<T> {
    state: Arc<Mutex<OneshotState<T>>>,
}

/// The waiting half: a future of the value.
pub struct Pending<T> {
    state: Arc<Mutex<OneshotState<T>>>,
}

/// The answering half was dropped without an answer (its owner stopped or crashed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Canceled;

pub fn oneshot<T>() -> (Reply<T>, Pending<T>) {
    let state = Arc::new(Mutex::new(OneshotState {
        value: None,
        done: false,
        waker: None,
    }));
    (
        Reply {
            state: state.clone(),
        },
        Pending { state },
    )
}

impl<T> Reply<T> {
    /// Answers. The value is dropped when nobody waits any more.
    pub fn send(self, value: T) {
        let mut state = lock(&self.state);
        state.value = Some(value);
        state.done = true;
        let waiting = state.waker.take();
        drop(state);
        // Woken outside the lock: the woken task's first act is to take it.
        if let Some(waker) = waiting {
            waker.wake();
        }
    }

    /// Whether the waiting half is gone (the answer would be dropped).
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.state) == 1
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if !state.done {
            state.done = true;
            if let Some(waker) = state.waker.take() {
                waker.wake();
            }
        }
    }
}

impl<T> Future for Pending<T> {
    type Output = Result<T, Canceled>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = lock(&self.state);
        if let Some(value) = state.value.take() {
            return Poll::Ready(Ok(value));
        }
        if state.done {
            return Poll::Ready(Err(Canceled));
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

// Semaphore ---------------------------------------------------------------------------------

struct SemaphoreState {
    available: usize,
    waiters: Waiters,
}

/// A counting semaphore: at most `permits` holders at once (in-flight bounds).
#[derive(Clone)]
pub struct Semaphore {
    state: Arc<Mutex<SemaphoreState>>,
}

/// One permit; released when dropped.
pub struct Permit {
    state: Arc<Mutex<SemaphoreState>>,
}

impl Semaphore {
    pub fn new(permits: usize) -> Semaphore {
        assert!(
            permits > 0,
            "a semaphore with no permits never lets anyone in"
        );
        Semaphore {
            state: Arc::new(Mutex::new(SemaphoreState {
                available: permits,
                waiters: Waiters::default(),
            })),
        }
    }

    pub fn try_acquire(&self) -> Option<Permit> {
        let mut state = lock(&self.state);
        if state.available == 0 {
            return None;
        }
        state.available -= 1;
        Some(Permit {
            state: self.state.clone(),
        })
    }

    /// A permit, waiting for one.
    pub fn acquire(&self) -> Acquire<'_> {
        Acquire { semaphore: self }
    }

    pub fn available(&self) -> usize {
        lock(&self.state).available
    }
}

pub struct Acquire<'a> {
    semaphore: &'a Semaphore,
}

impl Future for Acquire<'_> {
    type Output = Permit;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit> {
        let mut state = lock(&self.semaphore.state);
        if state.available > 0 {
            state.available -= 1;
            return Poll::Ready(Permit {
                state: self.semaphore.state.clone(),
            });
        }
        state.waiters.register(cx.waker());
        Poll::Pending
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        state.available += 1;
        state.waiters.wake_all();
    }
}

// Turns: a first-come first-served semaphore ---------------------------------------------

struct TurnsState {
    available: usize,
    /// The next ticket handed out.
    next: u64,
    /// Tickets of whoever waits, in arrival order, each with its waker once it has one.
    waiting: std::collections::BTreeMap<u64, Option<Waker>>,
}

impl TurnsState {
    /// Wakes the first waiter, if a permit is free for it (it wakes the next when served).
    fn wake_first(&mut self) {
        if self.available == 0 {
            return;
        }
        if let Some(waker) = self.waiting.values_mut().next().and_then(Option::take) {
            waker.wake();
        }
    }
}

/// A counting semaphore that serves its waiters in arrival order: a permit freed goes to
/// whoever has waited longest, never to a newcomer polling at the right moment, so a
/// crowd of waiters cannot starve one of them (login checks: an honest login queues
/// behind the guesses ahead of it, not behind every guess that arrives after it).
#[derive(Clone)]
pub struct Turns {
    state: Arc<Mutex<TurnsState>>,
}

/// One turn; the next waiter's when dropped.
pub struct Turn {
    state: Arc<Mutex<TurnsState>>,
}

impl Turns {
    pub fn new(permits: usize) -> Turns {
        assert!(permits > 0, "turns with no permits never serve anyone");
        Turns {
            state: Arc::new(Mutex::new(TurnsState {
                available: permits,
                next: 0,
                waiting: std::collections::BTreeMap::new(),
            })),
        }
    }

    /// A turn, after everyone who asked before (who are still waiting).
    pub fn take(&self) -> TakeTurn<'_> {
        TakeTurn {
            turns: self,
            ticket: None,
        }
    }

    /// Waiters in line now.
    pub fn waiting(&self) -> usize {
        lock(&self.state).waiting.len()
    }
}

pub struct TakeTurn<'a> {
    turns: &'a Turns,
    /// Its place in the line, from its first poll until it is served.
    ticket: Option<u64>,
}

impl Future for TakeTurn<'_> {
    type Output = Turn;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Turn> {
        let this = self.get_mut();
        let mut state = lock(&this.turns.state);
        let ticket = *this.ticket.get_or_insert_with(|| {
            let ticket = state.next;
            state.next += 1;
            state.waiting.insert(ticket, None);
            ticket
        });
        let first = state.waiting.keys().next() == Some(&ticket);
        if first && state.available > 0 {
            state.waiting.remove(&ticket);
            state.available -= 1;
            this.ticket = None;
            state.wake_first();
            return Poll::Ready(Turn {
                state: this.turns.state.clone(),
            });
        }
        state.waiting.insert(ticket, Some(cx.waker().clone()));
        Poll::Pending
    }
}

impl Drop for TakeTurn<'_> {
    /// A waiter that gives up leaves the line; the one behind it may be first now.
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let mut state = lock(&self.turns.state);
            state.waiting.remove(&ticket);
            state.wake_first();
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        state.available += 1;
        state.wake_first();
    }
}

// Byte budget -------------------------------------------------------------------------------

struct BudgetState {
    /// Bytes not held; below zero after [`ByteBudget::charge`] overdrew it.
    available: i64,
    total: u64,
    waiters: Waiters,
}

/// A bound on bytes held at once (buffers of requests being read, replies not yet sent),
/// shared by everyone who buffers: a holder waits for room before it reads more, so a full
/// budget stops reading (back-pressure) instead of growing memory. Taken all at once, never
/// in parts, so two waiters never each hold part of what the other needs.
#[derive(Clone)]
pub struct ByteBudget {
    state: Arc<Mutex<BudgetState>>,
}

/// Bytes held of a [`ByteBudget`]; given back when dropped.
pub struct Charge {
    state: Arc<Mutex<BudgetState>>,
    bytes: u64,
}

impl ByteBudget {
    pub fn new(total: u64) -> ByteBudget {
        assert!(total > 0, "a budget of no bytes never lets anyone in");
        ByteBudget {
            state: Arc::new(Mutex::new(BudgetState {
                available: i64::try_from(total).expect("a budget below 8 EiB"),
                total,
                waiters: Waiters::default(),
            })),
        }
    }

    /// `bytes`: charged at once when at most `small` (bounded elsewhere, by connections:
    /// a small request is never held back), else waited for ([`ByteBudget::acquire`]).
    pub async fn admit(&self, bytes: u64, small: u64) -> Charge {
        match bytes <= small {
            true => self.charge(bytes),
            false => self.acquire(bytes).await,
        }
    }

    /// `bytes` (at most the whole budget), waiting until they fit.
    pub fn acquire(&self, bytes: u64) -> AcquireBytes<'_> {
        AcquireBytes {
            budget: self,
            bytes,
        }
    }

    /// `bytes` at once, if they fit now (nothing always fits, even past an overdraft).
    pub fn try_acquire(&self, bytes: u64) -> Option<Charge> {
        if bytes == 0 {
            return Some(self.charge_of(0));
        }
        let mut state = lock(&self.state);
        let wanted = bytes.min(state.total) as i64;
        if state.available < wanted {
            return None;
        }
        state.available -= wanted;
        Some(self.charge_of(wanted as u64))
    }

    /// `bytes` held now, past the budget if need be: for memory already taken (a reply
    /// built before its size was known). Later acquirers wait until it is given back.
    pub fn charge(&self, bytes: u64) -> Charge {
        let bytes = bytes.min(i64::MAX as u64 / 2);
        lock(&self.state).available -= bytes as i64;
        self.charge_of(bytes)
    }

    fn charge_of(&self, bytes: u64) -> Charge {
        Charge {
            state: self.state.clone(),
            bytes,
        }
    }

    /// Bytes held now (above the total after an overdraft).
    pub fn held(&self) -> u64 {
        let state = lock(&self.state);
        (state.total as i64 - state.available).max(0) as u64
    }

    pub fn total(&self) -> u64 {
        lock(&self.state).total
    }
}

pub struct AcquireBytes<'a> {
    budget: &'a ByteBudget,
    bytes: u64,
}

impl Future for AcquireBytes<'_> {
    type Output = Charge;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Charge> {
        match self.budget.try_acquire(self.bytes) {
            Some(charge) => Poll::Ready(charge),
            None => {
                let mut state = lock(&self.budget.state);
                // Given back between the try and this lock: try again at once.
                if state.available >= self.bytes.min(state.total) as i64 {
                    cx.waker().wake_by_ref();
                } else {
                    state.waiters.register(cx.waker());
                }
                Poll::Pending
            }
        }
    }
}

impl Charge {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        state.available += self.bytes as i64;
        debug_assert!(
            state.available <= state.total as i64,
            "a budget never gets back more than was taken"
        );
        state.waiters.wake_all();
    }
}

// Latch -------------------------------------------------------------------------------------

struct LatchState<T> {
    value: Option<T>,
    /// The wakers of pending [`LatchWait`]s, by the id each holds: a wait that is dropped
    /// unfinished takes its waker out (a connection's per-request wait on the server's
    /// stopping latch leaves nothing behind).
    waiters: std::collections::BTreeMap<u64, Waker>,
    next_waiter: u64,
}

/// Set once, read by anyone, awaited by anyone: how a node says it stopped.
pub struct Latch<T> {
    state: Arc<Mutex<LatchState<T>>>,
}

impl<T> Clone for Latch<T> {
    fn clone(&self) -> Self {
        Latch {
            state: self.state.clone(),
        }
    }
}

impl<T> Default for Latch<T> {
    fn default() -> Self {
        Latch {
            state: Arc::new(Mutex::new(LatchState {
                value: None,
                waiters: std::collections::BTreeMap::new(),
                next_waiter: 0,
            })),
        }
    }
}

impl<T: Clone> Latch<T> {
    /// Sets the value unless one is set already (the first one stays); true when this call
    /// set it.
    pub fn set(&self, value: T) -> bool {
        let waiters = {
            let mut state = lock(&self.state);
            if state.value.is_some() {
                return false;
            }
            state.value = Some(value);
            std::mem::take(&mut state.waiters)
        };
        // Woken outside the lock.
        for waker in waiters.into_values() {
            waker.wake();
        }
        true
    }

    pub fn get(&self) -> Option<T> {
        lock(&self.state).value.clone()
    }

    /// Completes with the value once it is set.
    pub fn wait(&self) -> LatchWait<'_, T> {
        LatchWait {
            latch: self,
            id: None,
        }
    }

    /// How many waits are pending (registered and not yet dropped or finished).
    pub fn waiting(&self) -> usize {
        lock(&self.state).waiters.len()
    }
}

pub struct LatchWait<'a, T> {
    latch: &'a Latch<T>,
    /// Its entry among the latch's waiters, once it registered.
    id: Option<u64>,
}

impl<T: Clone> Future for LatchWait<'_, T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut state = lock(&self.latch.state);
        if let Some(value) = &state.value {
            let value = value.clone();
            drop(state);
            self.id = None;
            return Poll::Ready(value);
        }
        let id = match self.id {
            Some(id) => id,
            None => {
                state.next_waiter += 1;
                state.next_waiter
            }
        };
        match state.waiters.get_mut(&id) {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            Some(waker) => waker.clone_from(cx.waker()),
            None => {
                state.waiters.insert(id, cx.waker().clone());
            }
        }
        drop(state);
        self.id = Some(id);
        Poll::Pending
    }
}

impl<T> Drop for LatchWait<'_, T> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            lock(&self.latch.state).waiters.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll_once<F: Future + Unpin>(future: &mut F, waker: &Arc<CountingWaker>) -> Poll<F::Output> {
        let waker = Waker::from(waker.clone());
        Pin::new(future).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_full_channel_pushes_back_and_wakes_a_sender_when_room_appears() {
        let (tx, mut rx) = channel(2);
        tx.try_send(1).unwrap();
        tx.try_send(2).unwrap();
        assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
        let waker = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let mut send = tx.send(3);
        assert!(poll_once(&mut send, &waker).is_pending());
        assert_eq!(rx.try_recv(), Ok(1));
        assert_eq!(
            waker.0.load(Ordering::SeqCst),
            1,
            "the blocked sender was woken"
        );
        assert!(matches!(poll_once(&mut send, &waker), Poll::Ready(Ok(()))));
        assert_eq!(rx.try_recv(), Ok(2));
        assert_eq!(rx.try_recv(), Ok(3));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        drop(tx);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));
        let mut recv = rx.recv();
        assert!(matches!(poll_once(&mut recv, &waker), Poll::Ready(None)));
    }

    #[test]
    fn a_dropped_receiver_hands_values_back_and_a_dropped_reply_cancels() {
        let (tx, rx) = channel::<u8>(1);
        drop(rx);
        assert_eq!(tx.try_send(7), Err(TrySendError::Closed(7)));
        assert!(tx.is_closed());
        let waker = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let (reply, mut pending) = oneshot::<u8>();
        assert!(poll_once(&mut pending, &waker).is_pending());
        drop(reply);
        assert_eq!(waker.0.load(Ordering::SeqCst), 1);
        assert_eq!(poll_once(&mut pending, &waker), Poll::Ready(Err(Canceled)));
        let (reply, mut pending) = oneshot::<u8>();
        reply.send(9);
        assert_eq!(poll_once(&mut pending, &waker), Poll::Ready(Ok(9)));
    }

    #[test]
    fn a_full_byte_budget_holds_readers_back_until_bytes_come_back() {
        let budget = ByteBudget::new(100);
        let first = budget.try_acquire(60).expect("room");
        assert!(budget.try_acquire(41).is_none(), "60 + 41 > 100");
        let waker = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let mut waiting = budget.acquire(50);
        assert!(poll_once(&mut waiting, &waker).is_pending());
        // A reply already built is charged past the budget: everyone else waits longer.
        let reply = budget.charge(80);
        assert_eq!(budget.held(), 140);
        drop(first);
        assert_eq!(waker.0.load(Ordering::SeqCst), 1, "a giver wakes waiters");
        assert!(
            poll_once(&mut waiting, &waker).is_pending(),
            "80 held: 50 do not fit"
        );
        drop(reply);
        let Poll::Ready(charge) = poll_once(&mut waiting, &waker) else {
            panic!("50 of 100 fit once all else came back");
        };
        assert_eq!((charge.bytes(), budget.held()), (50, 50));
        // Nothing fits even past an overdraft (an empty body never waits).
        let overdraft = budget.charge(200);
        assert!(budget.try_acquire(0).is_some());
        drop(overdraft);
        // More than the whole budget asks for all of it, never forever.
        drop(charge);
        let all = budget.try_acquire(1_000).expect("the whole budget");
        assert_eq!((all.bytes(), budget.held()), (100, 100));
        drop(all);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn permits_are_bounded_and_a_latch_keeps_its_first_value() {
        let semaphore = Semaphore::new(1);
        let permit = semaphore.try_acquire().expect("one permit");
        assert!(semaphore.try_acquire().is_none());
        let waker = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let mut acquire = semaphore.acquire();
        assert!(poll_once(&mut acquire, &waker).is_pending());
        drop(permit);
        assert_eq!(waker.0.load(Ordering::SeqCst), 1);
        assert!(poll_once(&mut acquire, &waker).is_ready());
        let latch = Latch::default();
        assert!(latch.set("first"));
        assert!(!latch.set("second"));
        assert_eq!(latch.get(), Some("first"));
        let mut wait = latch.wait();
        assert_eq!(poll_once(&mut wait, &waker), Poll::Ready("first"));
    }

    #[test]
    fn a_latch_wait_dropped_unfinished_leaves_no_waker_behind() {
        let latch: Latch<()> = Latch::default();
        let waker = Arc::new(CountingWaker(AtomicUsize::new(0)));
        // One task's many waits (a connection's one per request), each dropped pending.
        for _ in 0..1_000 {
            let mut wait = latch.wait();
            assert!(poll_once(&mut wait, &waker).is_pending());
            assert!(poll_once(&mut wait, &waker).is_pending());
            assert_eq!(latch.waiting(), 1, "a wait polled twice holds one entry");
        }
        assert_eq!(latch.waiting(), 0, "every dropped wait took its waker out");
        let (mut first, mut second) = (latch.wait(), latch.wait());
        assert!(poll_once(&mut first, &waker).is_pending());
        assert!(poll_once(&mut second, &waker).is_pending());
        assert!(latch.set(()));
        assert_eq!(
            waker.0.load(Ordering::SeqCst),
            2,
            "every pending wait is woken"
        );
        assert_eq!(latch.waiting(), 0);
        assert_eq!(poll_once(&mut first, &waker), Poll::Ready(()));
    }

    #[test]
    fn turns_are_served_in_arrival_order_and_a_waiter_who_leaves_gives_up_its_place() {
        let turns = Turns::new(1);
        let waker = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let mut first = turns.take();
        let held = match poll_once(&mut first, &waker) {
            Poll::Ready(turn) => turn,
            Poll::Pending => panic!("a free permit is taken at once"),
        };
        let (mut second, mut third, mut fourth) = (turns.take(), turns.take(), turns.take());
        for waiter in [&mut second, &mut third, &mut fourth] {
            assert!(poll_once(waiter, &waker).is_pending());
        }
        assert_eq!(turns.waiting(), 3);
        drop(held);
        assert_eq!(
            waker.0.load(Ordering::SeqCst),
            1,
            "only the first waiter is woken"
        );
        // A newcomer, and a later waiter polled first, do not jump the line.
        let mut late = turns.take();
        assert!(poll_once(&mut late, &waker).is_pending());
        assert!(poll_once(&mut third, &waker).is_pending());
        drop(second);
        let turn = match poll_once(&mut third, &waker) {
            Poll::Ready(turn) => turn,
            Poll::Pending => panic!("the second left: the third is first"),
        };
        assert!(poll_once(&mut fourth, &waker).is_pending());
        drop(turn);
        let held = poll_once(&mut fourth, &waker);
        assert!(held.is_ready());
        assert!(
            poll_once(&mut late, &waker).is_pending(),
            "fourth holds the permit"
        );
        assert_eq!(turns.waiting(), 1);
    }
}

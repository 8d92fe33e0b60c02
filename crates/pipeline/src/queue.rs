//! The request queue of one connection: many senders (every session that
//! uses the connection), one receiver (its task), and a depth bound that
//! refuses at once instead of waiting.
//!
//! A `VecDeque` under a mutex, handed to the receiver whole: the
//! connection task swaps it for its own (empty) one and takes the batch
//! without the lock. A request costs its sender one uncontended lock (two
//! atomic operations) and its receiver a share of one lock per batch. It
//! replaced tokio's unbounded channel plus a depth counter (≈ 8 atomic
//! read-modify-writes per request: the counter up and down, the channel's
//! tail, ready bit, permit count and waker): the queue's share of the
//! proxy's user-space time per unpipelined request fell from ≈ 4.1 % to
//! ≈ 2.2 % (BENCHMARKS.md, "Session driver: a table"), too little to show
//! in the total CPU beside this machine's noise. The channel had itself
//! replaced tokio's bounded channel,
//! whose receive locks its semaphore's waiter mutex per request
//! (docs/multicore.md). Nothing ever waits for room here (a full queue
//! answers `Busy`), and the senders are nearly always on the receiver's
//! thread, so the lock is uncontended.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::codec::{Codec, Request};

pub(crate) fn channel<C: Codec>(depth: usize) -> (Sender<C>, Receiver<C>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            waker: None,
            sender_gone: false,
            receiver_gone: false,
        }),
        taken: AtomicUsize::new(0),
        depth: depth.max(1),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver {
            shared,
            taken: VecDeque::new(),
        },
    )
}

/// Why a request was not queued (it is handed back).
pub(crate) enum Refused<C: Codec> {
    Full(Request<C>),
    Closed(Request<C>),
}

struct Shared<C: Codec> {
    state: Mutex<State<C>>,
    /// The receiver's batch still to take, counted against the depth as
    /// queued requests are. Written by the receiver alone (plain stores,
    /// the new length before the lock is released on a swap), read by
    /// senders under the lock: a sender may see it a moment too high,
    /// never too low.
    taken: AtomicUsize,
    depth: usize,
}

struct State<C: Codec> {
    /// Sent, not yet taken by the receiver.
    queue: VecDeque<Request<C>>,
    /// The receiver waiting for a request.
    waker: Option<Waker>,
    sender_gone: bool,
    receiver_gone: bool,
}

impl<C: Codec> Shared<C> {
    fn lock(&self) -> MutexGuard<'_, State<C>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sending side (one per connection: the `Pipeline`).
pub(crate) struct Sender<C: Codec> {
    shared: Arc<Shared<C>>,
}

impl<C: Codec> Sender<C> {
    pub(crate) fn try_send(&self, req: Request<C>) -> Result<(), Refused<C>> {
        let waiting = {
            let mut state = self.shared.lock();
            if state.receiver_gone {
                return Err(Refused::Closed(req));
            }
            let waiting = state.queue.len() + self.shared.taken.load(Ordering::Relaxed);
            if waiting >= self.shared.depth {
                return Err(Refused::Full(req));
            }
            state.queue.push_back(req);
            state.waker.take()
        };
        // Woken outside the lock.
        if let Some(waker) = waiting {
            waker.wake();
        }
        Ok(())
    }
}

impl<C: Codec> Drop for Sender<C> {
    fn drop(&mut self) {
        let waiting = {
            let mut state = self.shared.lock();
            state.sender_gone = true;
            state.waker.take()
        };
        if let Some(waker) = waiting {
            waker.wake();
        }
    }
}

pub(crate) struct Receiver<C: Codec> {
    shared: Arc<Shared<C>>,
    /// The last batch taken, in order.
    taken: VecDeque<Request<C>>,
}

impl<C: Codec> Receiver<C> {
    /// The next request; `None` once the sender is gone and the queue is
    /// empty.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Request<C>>> {
        if self.taken.is_empty() {
            let mut state = self.shared.lock();
            if !take_batch(&mut self.taken, &self.shared, &mut state) {
                if state.sender_gone {
                    return Poll::Ready(None);
                }
                if !state
                    .waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    state.waker = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
        }
        Poll::Ready(self.pop())
    }

    /// As [`Receiver::poll_recv`]. Cancel-safe: a request is only taken
    /// by the call that returns it.
    pub(crate) async fn recv(&mut self) -> Option<Request<C>> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The next request if one is queued now.
    pub(crate) fn try_recv(&mut self) -> Option<Request<C>> {
        if self.taken.is_empty() {
            let mut state = self.shared.lock();
            if !take_batch(&mut self.taken, &self.shared, &mut state) {
                return None;
            }
        }
        self.pop()
    }

    fn pop(&mut self) -> Option<Request<C>> {
        let req = self.taken.pop_front();
        self.shared.taken.store(self.taken.len(), Ordering::Relaxed);
        req
    }
}

/// Take the whole queue into `taken` (`state` is `shared`'s, locked), so
/// that the rest of the batch is taken without the lock; false if it was
/// empty.
fn take_batch<C: Codec>(
    taken: &mut VecDeque<Request<C>>,
    shared: &Shared<C>,
    state: &mut State<C>,
) -> bool {
    if state.queue.is_empty() {
        return false;
    }
    std::mem::swap(taken, &mut state.queue);
    // Stored before the lock is released: no sender sees the batch
    // uncounted.
    shared.taken.store(taken.len(), Ordering::Relaxed);
    true
}

impl<C: Codec> Drop for Receiver<C> {
    fn drop(&mut self) {
        // Requests still queued are dropped with the receiver, as a
        // channel's would be; later ones are refused as `Closed`.
        let queued = {
            let mut state = self.shared.lock();
            state.receiver_gone = true;
            std::mem::take(&mut state.queue)
        };
        drop(queued);
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};

    use super::*;
    use crate::codec::Delivery;
    use crate::error::{BackendError, DecodeError};

    struct Nothing;

    impl Codec for Nothing {
        type Expect = ();
        type Caller = u32;
        type Reply = ();

        fn decode(&mut self, _: &mut BytesMut, (): ()) -> Result<Option<()>, DecodeError> {
            Ok(None)
        }

        fn deliver(&mut self, _: u32, (): ()) -> Delivery<u32> {
            Delivery::Done
        }

        fn fail(_: u32, _: BackendError) {}

        fn resend_preamble(&mut self, _: &mut BytesMut) -> (usize, ()) {
            (0, ())
        }
    }

    fn request(caller: u32) -> Request<Nothing> {
        Request {
            bytes: Bytes::new(),
            expect: (),
            caller,
        }
    }

    #[test]
    fn a_full_queue_refuses_until_the_task_takes_one() {
        let (tx, mut rx) = channel::<Nothing>(2);
        assert!(tx.try_send(request(1)).is_ok());
        assert!(tx.try_send(request(2)).is_ok());
        assert!(matches!(tx.try_send(request(3)), Err(Refused::Full(r)) if r.caller == 3));
        assert_eq!(rx.try_recv().map(|r| r.caller), Some(1));
        assert!(tx.try_send(request(4)).is_ok());
        assert!(matches!(tx.try_send(request(5)), Err(Refused::Full(_))));
        assert_eq!(rx.try_recv().map(|r| r.caller), Some(2));
        assert_eq!(rx.try_recv().map(|r| r.caller), Some(4));
        assert!(rx.try_recv().is_none());
    }

    #[test]
    fn a_stopped_task_refuses_as_closed_and_frees_its_count() {
        let (tx, rx) = channel::<Nothing>(1);
        drop(rx);
        assert!(matches!(tx.try_send(request(1)), Err(Refused::Closed(r)) if r.caller == 1));
        // Not counted as queued: the refusal is Closed again, not Full.
        assert!(matches!(tx.try_send(request(2)), Err(Refused::Closed(_))));
    }

    #[tokio::test]
    async fn recv_ends_once_every_sender_is_gone() {
        let (tx, mut rx) = channel::<Nothing>(4);
        assert!(tx.try_send(request(7)).is_ok());
        drop(tx);
        assert_eq!(rx.recv().await.map(|r| r.caller), Some(7));
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_send_wakes_the_waiting_receiver_and_the_senders_end_too() {
        let (tx, mut rx) = channel::<Nothing>(4);
        let receiver = tokio::spawn(async move {
            let first = rx.recv().await.map(|r| r.caller);
            let end = rx.recv().await.map(|r| r.caller);
            (first, end)
        });
        // The receiver runs first and waits.
        tokio::task::yield_now().await;
        assert!(tx.try_send(request(9)).is_ok());
        tokio::task::yield_now().await;
        drop(tx);
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), receiver)
            .await
            .expect("woken")
            .expect("the receiver task");
        assert_eq!(got, (Some(9), None));
    }
}

//! The request queue of one connection: many senders (every session that
//! uses the connection), one receiver (its task), and a depth bound that
//! refuses at once instead of waiting.
//!
//! An unbounded channel with the bound kept by one counter, not tokio's
//! bounded channel: the bounded one returns each permit through its
//! semaphore, which locks the semaphore's waiter mutex on every receive
//! (tokio 1.54 `batch_semaphore::release`), a lock per request on the hot
//! path shared by every worker thread (docs/multicore.md). Nothing ever
//! waits for room here (a full queue answers `Busy`), so the semaphore's
//! waiting machinery bought nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::codec::{Codec, Request};

pub(crate) fn channel<C: Codec>(depth: usize) -> (Sender<C>, Receiver<C>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    (
        Sender {
            tx,
            queued: queued.clone(),
            depth: depth.max(1),
        },
        Receiver { rx, queued },
    )
}

/// Why a request was not queued (it is handed back).
pub(crate) enum Refused<C: Codec> {
    Full(Request<C>),
    Closed(Request<C>),
}

pub(crate) struct Sender<C: Codec> {
    tx: mpsc::UnboundedSender<Request<C>>,
    queued: Arc<AtomicUsize>,
    depth: usize,
}

impl<C: Codec> Sender<C> {
    pub(crate) fn try_send(&self, req: Request<C>) -> Result<(), Refused<C>> {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= self.depth {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(Refused::Full(req));
        }
        self.tx.send(req).map_err(|e| {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            Refused::Closed(e.0)
        })
    }
}

pub(crate) struct Receiver<C: Codec> {
    rx: mpsc::UnboundedReceiver<Request<C>>,
    queued: Arc<AtomicUsize>,
}

impl<C: Codec> Receiver<C> {
    /// The next request; `None` once every sender is gone and the queue is
    /// empty. Cancel-safe, as `mpsc::UnboundedReceiver::recv`.
    pub(crate) async fn recv(&mut self) -> Option<Request<C>> {
        let req = self.rx.recv().await;
        if req.is_some() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
        }
        req
    }

    /// The next request if one is queued now.
    pub(crate) fn try_recv(&mut self) -> Option<Request<C>> {
        let req = self.rx.try_recv().ok();
        if req.is_some() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
        }
        req
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
}

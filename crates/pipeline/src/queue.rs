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

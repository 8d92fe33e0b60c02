//! Whether a shard's near-cache entries may be served: its invalidation
//! connection (`crate::redis::tracking`) is up and tracking, and the
//! generation its entries were filled under. Also the queue of plain
//! `set`s this proxy sends on that connection (write-through, see
//! `super::store::Through`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::backend::{BackendError, ReplyTo};

/// A `SET` for the shard's invalidation connection, and where its reply goes.
#[derive(Debug)]
pub struct ThroughWrite {
    pub cmd: Bytes,
    pub reply: ReplyTo,
}

/// Whether a shard's entries may be served, and the generation they need.
#[derive(Debug, Default)]
pub struct Tracking {
    live: AtomicBool,
    generation: AtomicU64,
    /// The invalidation connection's write queue; `None`: the shard takes
    /// no write-through sets (Redis Cluster, where a node may redirect).
    writes: Option<mpsc::UnboundedSender<ThroughWrite>>,
}

impl Tracking {
    /// A shard whose invalidation connection also sends write-through sets:
    /// the listener takes the receiver.
    pub fn with_writes() -> (Tracking, mpsc::UnboundedReceiver<ThroughWrite>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let t = Tracking {
            writes: Some(tx),
            ..Tracking::default()
        };
        (t, rx)
    }

    /// The generation reads may be cached under, or `None` while the
    /// shard's invalidations are not being received.
    #[inline]
    pub fn current(&self) -> Option<u64> {
        // Generation first: one read while tracking resumes is older than
        // the bump before `live`, so its fill is refused, never wrongly kept.
        let generation = self.generation.load(Ordering::Acquire);
        self.live.load(Ordering::Acquire).then_some(generation)
    }

    /// True if sets of this shard may go through the invalidation connection.
    #[inline]
    pub fn takes_writes(&self) -> bool {
        self.writes.is_some()
    }

    /// Queue a write-through `SET`; if the listener is gone it is answered
    /// at once with `Unavailable`.
    pub fn send_write(&self, write: ThroughWrite) {
        match &self.writes {
            Some(tx) => {
                if let Err(mpsc::error::SendError(w)) = tx.send(write) {
                    w.reply.send(Err(BackendError::Unavailable));
                }
            }
            None => write.reply.send(Err(BackendError::Unavailable)),
        }
    }

    /// Drop every entry of this shard (flush, null invalidation).
    pub fn drop_all(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub fn lost(&self) {
        self.live.store(false, Ordering::Release);
        self.drop_all();
    }

    pub fn tracking_again(&self) {
        self.drop_all();
        self.live.store(true, Ordering::Release);
    }
}

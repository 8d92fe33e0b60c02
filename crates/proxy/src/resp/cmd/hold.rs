//! A request answered on a connection the session holds for itself
//! (`redis::dedicated`): `EXEC`, `WATCH`, a blocking call.
//!
//! It runs on another connection than the session's other requests, so
//! order is kept by holding the session, as Redis holds a client:
//! * it is written only once every request before it is answered (it must
//!   see their writes: `SET k 1` pipelined before `MULTI INCR k EXEC`);
//! * no request after it is dispatched until it is answered (they must
//!   see its effects; a `GET` after `WATCH` must not run before the watch
//!   is in place; a client blocked in `BLPOP` has nothing else running).
//!
//! While held the session still reads (up to [`HELD_INPUT_LIMIT`]:
//! `conn::Protocol::may_read`), so a client that disconnects mid-`BLPOP`
//! is noticed: the call is abandoned and the connection closed, which
//! unblocks the shard. The engine runs [`RespSession::hold_tick`] at the
//! top of every turn (`conn::Protocol::before_turn`); the held request's
//! reply comes on the session's reply channel like any backend reply,
//! which wakes the engine.
//!
//! Drain (SIGTERM): a blocking call still waiting is abandoned the same
//! way, and the client's connection closed once the replies before it are
//! written, with no reply to the call, as Redis closes its clients when it
//! shuts down (a client blocked with no timeout would otherwise hold the
//! drain until its deadline). A blocking call read while draining is not
//! sent at all.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use memshift_protocol::resp::Frame;
use tokio::time::Instant;

use super::super::pending::Render;
use super::super::RespSession;
use crate::proxy::Proxy;
use crate::redis::dedicated::{Dedicated, Job};
use crate::redis::{BackendReply, Reply};

const CANCELLED: &[u8] =
    b"ERR memshift: the blocking call was cancelled: the connection is closing";

/// Input read ahead while a held request is unanswered.
pub(in crate::resp) const HELD_INPUT_LIMIT: usize = 1024 * 1024;
/// A call with no timeout (`BLPOP key 0`): the session's backstop is this
/// far (tokio's timer reaches about two years).
const FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);
/// Beyond the connect and reply timeouts, before the session gives up on
/// the connection task (which answers first, unless it is stuck).
const BACKSTOP_MARGIN: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub(in crate::resp) struct Hold {
    /// The held request, until it is answered.
    seq: Option<u64>,
    /// Not written yet: requests before it are unanswered.
    deferred: Option<Job>,
    /// Its connection, released once it is answered (`None`: it runs on
    /// the session's WATCH connection, which stays).
    conn: Option<Dedicated>,
    /// `redis.connect_timeout_ms` of its shard (the connection may open
    /// when the job comes).
    connect_timeout: Duration,
    /// A blocking call: abandoned when the session closes.
    blocking: bool,
    /// A blocking call was written: the client counts as blocked
    /// (`blocked_clients`) until it is answered or the session ends.
    blocked: Option<Blocked>,
}

/// One client counted in `Stats::blocked_clients` while it lives.
struct Blocked(Arc<Proxy>);

impl std::fmt::Debug for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Blocked")
    }
}

impl Blocked {
    fn new(proxy: &Arc<Proxy>) -> Blocked {
        proxy.stats.blocked_clients.fetch_add(1, Relaxed);
        Blocked(proxy.clone())
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        self.0.stats.blocked_clients.fetch_sub(1, Relaxed);
    }
}

impl Hold {
    #[inline]
    pub(in crate::resp) fn active(&self) -> bool {
        self.seq.is_some()
    }
}

impl RespSession {
    /// Send `job` (its reply is the last queued request's) on `conn`, or
    /// on the WATCH connection when `conn` is `None`, once the requests
    /// before it are answered.
    pub(super) fn hold_send(
        &mut self,
        conn: Option<Dedicated>,
        job: Job,
        connect_timeout: Duration,
        blocking: bool,
    ) {
        let hold = &mut self.txn.hold;
        hold.seq = Some(job.reply.seq);
        hold.conn = conn;
        hold.connect_timeout = connect_timeout;
        hold.blocking = blocking;
        // Until it is written only the requests before it can hold it up.
        if let Some(p) = self.pending.back_mut() {
            p.deadline = Instant::now() + FOREVER;
        }
        hold.deferred = Some(job);
        self.launch_when_due();
    }

    /// Called on every turn of the session's loop: write a deferred job
    /// once its turn came, release the connection once it is answered, and
    /// go on reading requests.
    pub(in crate::resp) fn hold_tick(&mut self) {
        let Some(seq) = self.txn.hold.seq else {
            return;
        };
        if self.blocking_cancelled() {
            self.cancel_blocking(seq);
        }
        self.launch_when_due();
        let answered = self
            .pending
            .index_of(seq)
            .and_then(|i| self.pending.get(i))
            .is_none_or(|p| p.waiting == 0);
        if !answered {
            return;
        }
        let hold = &mut self.txn.hold;
        hold.seq = None;
        hold.deferred = None;
        hold.blocked = None;
        if let Some(conn) = hold.conn.take() {
            self.proxy.router.load().redis().dedicated.release(conn);
        }
        if !self.rbuf.is_empty() {
            self.process_input();
        }
    }

    /// The session is closing (its client left) or draining: a blocking
    /// call it holds stops.
    fn blocking_cancelled(&self) -> bool {
        self.txn.hold.blocking && (self.conn.closing || self.conn.draining)
    }

    fn launch_when_due(&mut self) {
        let (Some(seq), true) = (self.txn.hold.seq, self.txn.hold.deferred.is_some()) else {
            return;
        };
        let Some(index) = self.pending.index_of(seq) else {
            return;
        };
        if self.blocking_cancelled() {
            return; // dropped on the next turn (`cancel_blocking`)
        }
        let before_answered = self.pending.iter().take(index).all(|p| p.waiting == 0);
        if !before_answered {
            return;
        }
        let Some(job) = self.txn.hold.deferred.take() else {
            return;
        };
        let budget = match job.timeout {
            Some(t) => self.txn.hold.connect_timeout + t + BACKSTOP_MARGIN,
            None => FOREVER,
        };
        if let Some(p) = self.pending.get_mut(index) {
            p.deadline = Instant::now() + budget;
        }
        if self.txn.hold.blocking {
            self.txn.hold.blocked = Some(Blocked::new(&self.proxy));
        }
        match (&self.txn.hold.conn, self.txn.watching()) {
            (Some(conn), _) | (None, Some(conn)) => conn.send(job),
            (None, None) => job.reply.send(Err(crate::redis::BackendError::Unavailable)),
        }
    }

    /// The session is closing (its client left) or draining: a blocking
    /// call stops (its connection is closed, which unblocks the shard;
    /// one that was never sent goes back to the idle ones). Closing: the
    /// call is answered an error, for the replies' order. Draining: the
    /// client's connection closes after the replies before it, and the call
    /// counts as dropped by the drain.
    fn cancel_blocking(&mut self, seq: u64) {
        self.txn.hold.blocking = false;
        self.txn.hold.blocked = None;
        let index = self.pending.index_of(seq);
        let entry = index.and_then(|i| self.pending.get(i));
        if entry.is_none_or(|p| p.waiting == 0) {
            return; // answered already: released as usual
        }
        let conn = self.txn.hold.conn.take();
        if let (Some(_), Some(conn)) = (self.txn.hold.deferred.take(), conn) {
            self.proxy.router.load().redis().dedicated.release(conn);
        }
        let error = Frame::Error(Bytes::from_static(CANCELLED));
        self.complete(BackendReply {
            seq,
            part: 0,
            result: Ok(Reply::Redis(error)),
        });
        if self.conn.closing {
            return;
        }
        // Draining: nothing after it is dispatched (Redis closes its
        // clients on shutdown).
        self.conn.closing = true;
        if let Some(p) = index.and_then(|i| self.pending.get_mut(i)) {
            p.render = Render::Close;
            p.command = None;
        }
        self.proxy.stats.drain_dropped.fetch_add(1, Relaxed);
        self.proxy.metrics.drain_dropped(1);
    }
}

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
//! While held the session still reads (up to [`HELD_INPUT_LIMIT`]), so a
//! client that disconnects mid-`BLPOP` is noticed: the call is abandoned
//! and the connection closed, which unblocks the shard.

use std::time::Duration;

use bytes::Bytes;
use memshift_protocol::resp::Frame;
use tokio::time::Instant;

use super::super::RespSession;
use crate::redis::dedicated::{Dedicated, Job};
use crate::redis::Reply;

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
        if self.closing && self.txn.hold.blocking {
            self.cancel_blocking(seq);
        }
        self.launch_when_due();
        let answered = match seq.checked_sub(self.base_seq) {
            None => true,
            Some(i) => self.pending.get(i as usize).is_none_or(|p| p.waiting == 0),
        };
        if !answered {
            return;
        }
        let hold = &mut self.txn.hold;
        hold.seq = None;
        hold.deferred = None;
        if let Some(conn) = hold.conn.take() {
            self.proxy.router.load().redis().dedicated.release(conn);
        }
        if !self.rbuf.is_empty() {
            self.process_input();
        }
    }

    fn launch_when_due(&mut self) {
        let (Some(seq), true) = (self.txn.hold.seq, self.txn.hold.deferred.is_some()) else {
            return;
        };
        let Some(index) = seq.checked_sub(self.base_seq) else {
            return;
        };
        let before_answered = self
            .pending
            .iter()
            .take(index as usize)
            .all(|p| p.waiting == 0);
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
        if let Some(p) = self.pending.get_mut(index as usize) {
            p.deadline = Instant::now() + budget;
        }
        match (&self.txn.hold.conn, self.txn.watching()) {
            (Some(conn), _) | (None, Some(conn)) => conn.send(job),
            (None, None) => job.reply.send(Err(crate::redis::BackendError::Unavailable)),
        }
    }

    /// The session is closing (its client left, or shutdown): a blocking
    /// call stops (the connection is closed: the shard unblocks).
    fn cancel_blocking(&mut self, seq: u64) {
        self.txn.hold.conn = None;
        self.txn.hold.deferred = None;
        self.txn.hold.blocking = false;
        let index = seq.checked_sub(self.base_seq);
        if let Some(p) = index.and_then(|i| self.pending.get_mut(i as usize)) {
            p.fill(
                0,
                Ok(Reply::Redis(Frame::Error(Bytes::from_static(
                    b"ERR memshift: the blocking call was cancelled: the connection is closing",
                )))),
            );
        }
    }
}

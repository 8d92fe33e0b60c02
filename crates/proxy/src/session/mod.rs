//! One client connection: parse requests from the read buffer, route them
//! to their backends, and write the replies back in request order.
//!
//! Requests are dispatched as soon as they are parsed, so a pipelining client
//! has many in flight at once. Each request gets a `Pending` entry in a queue
//! that mirrors the client's order; backend replies arrive (from any shard or
//! server, in any order) on the session's reply channel tagged with the
//! request's sequence number, and the front of the queue is written out as
//! soon as it is complete.
//!
//! * `cmd`: one module per command family, each with both halves: dispatch
//!   (a parsed request → backend requests, through the router) and render
//!   (finished requests → reply bytes, counters, shadow writes).
//! * `pending`: the queue entries, in the client's order.
//! * `pool`: buffers and reply channels shared by the thread's sessions.
//! * `binary`: connections whose first byte is `0x80` (memcached's binary
//!   protocol), served through the same commands.

mod binary;
mod cmd;
mod deadline;
mod long_line;
mod pending;
mod pool;
mod replies;

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use memshift_protocol::memcache::{
    base64, parse_request, unterminated_line_closes, Parsed, ProtocolError, StaleKey,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::metrics::{command_index, Protocol};
use crate::proxy::Proxy;
use crate::redis::encoding::CasGenerator;
use crate::redis::BackendReply;
use crate::stats::bump;
use deadline::Deadline;
use pending::{Op, Pending, NO_COMMAND};
use pool::{Buffer, ReplyChannel};

/// Requests waiting on backends before the session stops reading from the client.
const MAX_WAITING: usize = 1024;
/// Reply bytes (estimated) a session may have in flight on the backends
/// before it stops dispatching (and reading): sessions share pipelined
/// backend connections, so this bounds how much of another client's reply
/// traffic one session's requests can sit in front of.
const MAX_IN_FLIGHT_BYTES: usize = 4 * 1024 * 1024;
/// A new session's guess of its next reply's size, until replies say how
/// large they are: its first batch puts at most
/// `MAX_IN_FLIGHT_BYTES / FIRST_REPLY_ESTIMATE` (4) requests in flight, so a
/// burst of gets for large values cannot sit in front of other clients'
/// replies; each smaller reply halves the guess, so a pipelining client of
/// small values reaches full depth within a few round trips.
const FIRST_REPLY_ESTIMATE: usize = 1024 * 1024;
/// Output buffered before replies stay queued instead (the client is not reading).
const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
const READ_CHUNK: usize = 16 * 1024;
/// First read buffer of a connection: small, so that thousands of idle
/// connections cost little; it grows by `READ_CHUNK` once traffic fills it.
const FIRST_READ: usize = 512;
/// First write buffer of a busy connection (replies of typical size).
const FIRST_WRITE: usize = 2048;
/// Bytes an idle connection reads into its (task-resident) array before it
/// takes a read buffer: enough for most single requests.
const IDLE_READ: usize = 256;
/// Largest incomplete request kept in the read buffer (a multi-get line of
/// ~60,000 keys), unless `max_item_size` allows more.
const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// Why a session ended.
#[derive(Debug)]
pub enum SessionEnd {
    ClientClosed,
    Quit,
    IdleTimeout,
    SlowConsumer,
    Shutdown,
    Io(std::io::Error),
}

pub struct Session {
    proxy: Arc<Proxy>,
    /// Which connection of each shard or server this session uses (keeps its
    /// requests to one backend in order).
    lane: usize,
    rbuf: BytesMut,
    wbuf: BytesMut,
    cmd_buf: BytesMut,
    /// Bytes of a rejected data block still to discard as they arrive.
    skip: usize,
    pending: VecDeque<Pending>,
    /// Sequence number of `pending[0]`.
    base_seq: u64,
    /// Pending requests still waiting on a backend.
    waiting: usize,
    /// Command of the request being dispatched (for its `Pending`).
    current_command: u8,
    /// When the input being processed arrived.
    current_start: Instant,
    /// Where backends send their replies; taken from the thread's pool with
    /// the first backend request and handed back when the connection goes
    /// quiet, unless a backend still holds a sender (then it stays here).
    replies: Option<ReplyChannel>,
    /// When the last input arrived (the idle timeout counts from it).
    last_input: Instant,
    /// The client has closed its side.
    read_closed: bool,
    cas: CasGenerator,
    closing: bool,
    /// SIGTERM: read nothing more, but answer every complete request
    /// already in the read buffer before closing.
    draining: bool,
    /// Near cache: hash of the key the request being dispatched writes
    /// (for its `Pending`).
    near_written: Option<u64>,
    /// Near cache: a write-through `set` is in flight. It travels on the
    /// shard's invalidation connection, not the session's data connection,
    /// so nothing else is dispatched until it is answered (the session's
    /// requests must reach Redis in order); it is only sent when nothing
    /// else is in flight.
    near_through: bool,
    /// Near cache: a reply-less write went to Redis (the quiet delete after
    /// a refused set, a backfill copy): no write-through for this session,
    /// since it could overtake that write.
    near_unordered: bool,
    /// `near_through` was just cleared: dispatch the input held back.
    near_resume: bool,
    /// Near cache: reads of this session that joined another read
    /// (`near_cache::coalesce`), at most; a write scans for them.
    near_joined: u32,
    /// `near_cache` settings as of the last input (read once per batch,
    /// not per lookup).
    near_limits: crate::near_cache::store::Limits,
    /// `server.max_pending_replies` as of the last input.
    max_pending_replies: usize,
    /// `server.max_item_size` as of the last input.
    max_item_size: usize,
    /// `server.max_pending_bytes` as of the last input: reply bytes a
    /// client may have waiting (on top of `MAX_OUTPUT_BYTES`) before it is
    /// closed as a slow consumer.
    max_pending_bytes: usize,
    /// Bytes of backend replies held by `pending`.
    pending_bytes: usize,
    /// Expected size of a reply: the largest recent one (halved by each
    /// smaller one), for `MAX_IN_FLIGHT_BYTES`.
    reply_estimate: usize,
    /// The buffer ends in a line over `max_line_length` without its `\n`
    /// (see `long_line`).
    line_stalled: bool,
    /// Text or binary, decided by the first byte the client sends.
    wire: Wire,
    binary: binary::BinaryState,
}

/// The protocol a connection speaks (memcached's rule: a first byte of
/// `0x80` makes it binary for its whole life).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Undecided,
    Text,
    Binary,
}

impl Session {
    pub fn new(proxy: Arc<Proxy>, id: u64) -> Session {
        let seed = twox_hash::XxHash3_64::oneshot_with_seed(proxy.cas_seed, &id.to_le_bytes());
        let settings = proxy.settings.load();
        let (max_pending_replies, max_pending_bytes, near_limits) = (
            settings.max_pending_replies,
            settings.max_pending_bytes,
            settings.near_cache,
        );
        drop(settings);
        Session {
            proxy,
            lane: id as usize,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            cmd_buf: BytesMut::new(),
            skip: 0,
            pending: VecDeque::new(),
            base_seq: 0,
            waiting: 0,
            current_command: NO_COMMAND,
            near_written: None,
            near_through: false,
            near_unordered: false,
            near_resume: false,
            near_joined: 0,
            near_limits,
            current_start: Instant::now(),
            replies: None,
            last_input: Instant::now(),
            read_closed: false,
            max_pending_replies,
            max_item_size: 0,
            max_pending_bytes,
            pending_bytes: 0,
            reply_estimate: FIRST_REPLY_ESTIMATE,
            cas: CasGenerator::new(seed),
            closing: false,
            draining: false,
            line_stalled: false,
            wire: Wire::Undecided,
            binary: binary::BinaryState::default(),
        }
    }

    /// Serve the connection until it ends.
    ///
    /// A connection alternates between idle (nothing buffered or in flight:
    /// it waits for input holding no buffers and no reply channel) and
    /// busy (the request loop, with buffers from the thread's pool, given
    /// back as soon as everything asked has been answered).
    pub async fn run<S>(mut self, stream: S) -> SessionEnd
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let mut shutdown = self.proxy.shutdown.clone();
        // Registered once for the session's life, not once per wait: every
        // session waits on the same watch, whose waiter list is one lock.
        // It completes once; the session then drains and ends.
        let mut shutdown = std::pin::pin!(shutdown.changed());
        loop {
            if self.draining {
                return SessionEnd::Shutdown;
            }
            if let Err(end) = self.wait_for_input(&mut rd, &mut shutdown).await {
                return end;
            }
            let end = self.serve(&mut rd, &mut wr, &mut shutdown).await;
            self.give_back();
            if let Some(end) = end {
                return end;
            }
        }
    }

    /// Quiet (or done): hand the buffers and the reply channel to the
    /// thread's pool.
    fn give_back(&mut self) {
        pool::give_buffer(Buffer::Read, std::mem::take(&mut self.rbuf));
        pool::give_buffer(Buffer::Write, std::mem::take(&mut self.wbuf));
        pool::give_buffer(Buffer::Command, std::mem::take(&mut self.cmd_buf));
        pool::give_queue(std::mem::take(&mut self.pending));
        if self.wire == Wire::Binary {
            self.give_back_binary();
        }
        if let Some(channel) = self.replies.take() {
            // A channel with a sender still out stays with this session
            // (its replies carry this session's sequence numbers).
            self.replies = pool::give_channel(channel);
        }
    }

    /// Idle: wait for the first bytes of the next request (read into a small
    /// array in the future, then into a fresh read buffer).
    async fn wait_for_input<R, Sd>(
        &mut self,
        rd: &mut R,
        shutdown: &mut Sd,
    ) -> Result<(), SessionEnd>
    where
        R: AsyncRead + Unpin,
        Sd: Future + Unpin,
    {
        let idle_at = self
            .proxy
            .settings
            .load()
            .idle_timeout
            .map(|d| self.last_input + d);
        let mut first = [0u8; IDLE_READ];
        let n = tokio::select! {
            biased;
            res = rd.read(&mut first) => match res {
                Ok(0) => return Err(SessionEnd::ClientClosed),
                Ok(n) => n,
                Err(e) => return Err(SessionEnd::Io(e)),
            },
            _ = sleep_until_opt(idle_at), if idle_at.is_some() => return Err(SessionEnd::IdleTimeout),
            _ = &mut *shutdown => return Err(SessionEnd::Shutdown),
        };
        if self.rbuf.capacity() == 0 {
            self.rbuf = pool::take_buffer(Buffer::Read, FIRST_READ);
        }
        if self.pending.capacity() == 0 {
            self.pending = pool::take_queue();
        }
        self.rbuf
            .extend_from_slice(first.get(..n).unwrap_or_default());
        let mut total = n;
        if n == IDLE_READ {
            // The array filled up: read what else is already there now, so
            // that a pipelined batch is dispatched (and coalesced toward the
            // shards) as a whole, not in two halves.
            self.rbuf.reserve(READ_CHUNK);
            total += read_ready(rd, &mut self.rbuf).await;
        }
        self.proxy
            .stats
            .bytes_read
            .fetch_add(total as u64, std::sync::atomic::Ordering::Relaxed);
        self.last_input = Instant::now();
        Ok(())
    }

    /// Busy: answer the input in the read buffer and everything that
    /// follows, until the connection ends (`Some`) or has nothing buffered
    /// or in flight (`None`).
    async fn serve<R, W, Sd>(
        &mut self,
        rd: &mut R,
        wr: &mut W,
        shutdown: &mut Sd,
    ) -> Option<SessionEnd>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
        Sd: Future + Unpin,
    {
        let idle = self.proxy.settings.load().idle_timeout;
        let mut idle_deadline = idle.map(|d| self.last_input + d);
        // One timer for the busy period, not one per wait (`deadline`); it
        // lives in this future, so an idle connection does not carry it.
        let mut sleep = std::pin::pin!(tokio::time::sleep_until(Instant::now()));
        let mut deadline = Deadline::new(sleep.as_mut());
        self.process_input();
        loop {
            if self.line_stalled {
                self.settle_stalled_line(rd).await;
            }
            self.flush_ready();
            if self.near_resume {
                // A write-through set was answered: the input held back
                // behind it goes on.
                self.near_resume = false;
                if !self.rbuf.is_empty() {
                    self.process_input();
                    self.flush_ready();
                }
            }
            if self.pending.len() > self.max_pending_replies
                || self.pending_bytes > self.max_pending_bytes.max(4 * self.max_item_size)
            {
                bump(&self.proxy.stats.slow_consumers_closed);
                self.proxy.metrics.slow_consumer_closed();
                return Some(SessionEnd::SlowConsumer);
            }
            if (self.closing || self.draining) && self.pending.is_empty() && self.wbuf.is_empty() {
                // Draining: every complete request read has been answered
                // (with nothing pending, `process_input` left at most an
                // incomplete one in the buffer).
                let _ = wr.shutdown().await;
                return Some(if self.read_closed {
                    SessionEnd::ClientClosed
                } else if self.draining && !self.closing {
                    SessionEnd::Shutdown
                } else {
                    SessionEnd::Quit
                });
            }
            let reading = !self.closing && !self.draining && self.room_to_dispatch();
            // Grow only when unparsed input is waiting for room (or there is
            // no buffer yet): a quiet connection keeps its small buffer.
            let spare = self.rbuf.capacity() - self.rbuf.len();
            if reading && (spare == 0 || (spare < 1024 && !self.rbuf.is_empty())) {
                let grow = if self.rbuf.capacity() == 0 {
                    FIRST_READ
                } else {
                    READ_CHUNK
                };
                self.rbuf.reserve(grow);
            }
            deadline.arm(
                self.pending
                    .front()
                    .filter(|p| p.waiting > 0)
                    .map(|p| p.deadline),
            );
            let idle_at = idle_deadline
                .filter(|_| self.pending.is_empty() && !self.closing && !self.draining);
            if self.pending.is_empty()
                && self.wbuf.is_empty()
                && self.rbuf.is_empty()
                && self.skip == 0
                && !self.closing
            {
                return None;
            }
            tokio::select! {
                biased;
                reply = recv_reply(&mut self.replies) => {
                    if let Some(reply) = reply {
                        self.complete(reply);
                        while let Some(reply) = self.replies.as_mut().and_then(|c| c.rx.try_recv().ok()) {
                            self.complete(reply);
                        }
                        // Requests the client already sent may be waiting
                        // in the buffer for room (`room_to_dispatch`): go on.
                        if !self.rbuf.is_empty() {
                            self.process_input();
                        }
                    }
                }
                res = wr.write(&self.wbuf), if !self.wbuf.is_empty() => match res {
                    Ok(0) => return Some(SessionEnd::ClientClosed),
                    Ok(n) => {
                        self.proxy.stats.bytes_written.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                        self.wbuf.advance(n);
                    }
                    Err(e) => return Some(SessionEnd::Io(e)),
                },
                res = rd.read_buf(&mut self.rbuf), if reading => match res {
                    Ok(0) => {
                        // Client closed its side: finish what it asked, then close.
                        self.read_closed = true;
                        self.closing = true;
                        if self.pending.is_empty() && self.wbuf.is_empty() {
                            return Some(SessionEnd::ClientClosed);
                        }
                    }
                    Ok(n) => {
                        self.proxy.stats.bytes_read.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                        let now = Instant::now();
                        self.last_input = now;
                        idle_deadline = idle.map(|d| now + d);
                        self.process_input();
                    }
                    Err(e) => return Some(SessionEnd::Io(e)),
                },
                () = deadline.fired(), if deadline.is_armed() => {
                    self.expire_overdue();
                    // As after a reply: input held back for room goes on.
                    if !self.rbuf.is_empty() {
                        self.process_input();
                    }
                }
                _ = sleep_until_opt(idle_at), if idle_at.is_some() => {
                    return Some(SessionEnd::IdleTimeout);
                }
                _ = &mut *shutdown, if !self.closing && !self.draining => {
                    // Drain: stop reading; answer everything already read
                    // (in flight, or parsed-to-be in the buffer, held back
                    // by `room_to_dispatch`) before closing.
                    self.draining = true;
                }
            }
        }
    }

    /// Parse and dispatch every complete request in the read buffer.
    fn process_input(&mut self) {
        if self.wire == Wire::Undecided {
            match self.rbuf.first() {
                Some(&memshift_protocol::memcache::binary::REQUEST_MAGIC) => {
                    self.wire = Wire::Binary
                }
                // SASL on: memcached (-S) binds the binary protocol only; a
                // text request is a bad magic byte: closed, no reply.
                Some(_) if self.proxy.sasl.is_some() => {
                    self.rbuf.clear();
                    self.push_ready(pending::Op::Close);
                    return;
                }
                Some(_) => self.wire = Wire::Text,
                None => return,
            }
        }
        if self.wire == Wire::Binary {
            return self.process_binary_input();
        }
        let limits = self.load_limits();
        let now = Instant::now();
        self.current_start = now;
        while !self.closing && self.room_to_dispatch() {
            if !self.skip_refused() {
                return;
            }
            if self.rbuf.is_empty() {
                return;
            }
            match parse_request(&self.rbuf, &limits) {
                Parsed::Complete { request, consumed } => {
                    // Re-anchor the request's slices on a frozen view of the
                    // same bytes (no copy) so they outlive the read buffer.
                    let base = self.rbuf.as_ptr() as usize;
                    let located = request.map(|s| (s.as_ptr() as usize - base, s.len()));
                    let frame = self.rbuf.split_to(consumed).freeze();
                    let request = located.map(|(off, len)| frame.slice(off..off + len));
                    self.current_command =
                        command_index(request.command_name()).map_or(NO_COMMAND, |i| i as u8);
                    self.dispatch(request, now);
                    self.current_command = NO_COMMAND;
                }
                Parsed::Incomplete => {
                    self.line_stalled = unterminated_line_closes(&self.rbuf, &limits);
                    // memcached takes multi-get lines of any length; a
                    // request larger than any item plus a generous line is
                    // not one a client sends: close rather than grow.
                    let cap = (self.max_item_size + 1024 * 1024).max(MAX_REQUEST_BYTES);
                    if self.rbuf.len() > cap {
                        tracing::info!(
                            bytes = self.rbuf.len(),
                            "closing a client whose request exceeds every limit"
                        );
                        self.rbuf.clear();
                        self.push_ready(Op::Close);
                    }
                    return;
                }
                Parsed::Invalid(ProtocolError::Reply {
                    reply,
                    skip,
                    delete,
                    counted_set,
                }) => {
                    if let Some(key) = counted_set {
                        self.proxy.stats.prefixes.record_set(key);
                    }
                    // memcached drops the old item of a store it refused.
                    if let Some(key) = delete.and_then(stale_key) {
                        self.delete_quietly(key);
                    }
                    let n = skip.min(self.rbuf.len());
                    self.rbuf.advance(n);
                    self.skip = skip - n;
                    self.push_ready(if reply.is_empty() {
                        Op::Silent
                    } else {
                        Op::Ready(reply)
                    });
                }
                Parsed::Invalid(ProtocolError::Close { reply }) => {
                    if !reply.is_empty() {
                        self.push_ready(Op::Ready(reply));
                    }
                    self.push_ready(Op::Close);
                    self.rbuf.clear();
                    return;
                }
            }
        }
    }

    /// Write out every finished request at the front of the queue.
    /// The live limits (a reload may have changed them since the last
    /// read), copied into the session for this batch of input.
    fn load_limits(&mut self) -> memshift_protocol::memcache::ParseLimits {
        let settings = self.proxy.settings.load();
        self.max_pending_replies = settings.max_pending_replies;
        self.max_item_size = settings.limits.max_item_size;
        self.max_pending_bytes = settings.max_pending_bytes;
        self.near_limits = settings.near_cache;
        settings.limits
    }

    /// Drop what has arrived of a refused request's data; false while more
    /// of it is still to come.
    fn skip_refused(&mut self) -> bool {
        if self.skip > 0 {
            let n = self.skip.min(self.rbuf.len());
            self.rbuf.advance(n);
            self.skip -= n;
        }
        self.skip == 0
    }

    fn flush_ready(&mut self) {
        if self.wire == Wire::Binary && self.skip > 0 {
            // memcached sends nothing while it swallows a rejected body.
            return;
        }
        let mut now = None;
        while self.wbuf.len() < MAX_OUTPUT_BYTES {
            match self.pending.front() {
                Some(p) if p.waiting == 0 => {}
                _ => return,
            }
            let Some(pending) = self.pending.pop_front() else {
                return;
            };
            self.base_seq += 1;
            self.pending_bytes -= pending.bytes;
            if pending.command != NO_COMMAND {
                let now = *now.get_or_insert_with(Instant::now);
                let protocol = if self.wire == Wire::Binary {
                    Protocol::Binary
                } else {
                    Protocol::Text
                };
                self.proxy.metrics.request(
                    protocol,
                    usize::from(pending.command),
                    now.saturating_duration_since(pending.started).as_secs_f64(),
                );
            }
            if matches!(pending.op, Op::Close) {
                // Nothing after a close is answered.
                self.pending.clear();
                self.pending_bytes = 0;
                self.closing = true;
                return;
            }
            if self.wbuf.capacity() == 0 {
                self.wbuf = pool::take_buffer(Buffer::Write, FIRST_WRITE);
            }
            if self.wire == Wire::Binary {
                self.render_binary(pending);
            } else {
                self.render(pending);
            }
        }
    }
}

/// The key to delete for the parser's `delete` verdict (decoded from
/// base64 for an `ms` with `b`).
fn stale_key(stale: StaleKey<'_>) -> Option<bytes::Bytes> {
    if stale.base64 {
        base64::decode(stale.key).map(bytes::Bytes::from)
    } else {
        Some(bytes::Bytes::copy_from_slice(stale.key))
    }
}

/// The next backend reply; never, while there is no channel.
async fn recv_reply(replies: &mut Option<ReplyChannel>) -> Option<BackendReply> {
    match replies {
        Some(channel) => channel.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Bytes read into `buf` by one read attempt that does not wait: 0 when
/// nothing is ready (end of stream and errors are left for the next read to
/// find again).
async fn read_ready<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut BytesMut) -> usize {
    use std::future::Future;
    std::future::poll_fn(|cx| {
        let read = std::pin::pin!(rd.read_buf(&mut *buf));
        std::task::Poll::Ready(match read.poll(cx) {
            std::task::Poll::Ready(Ok(n)) => n,
            _ => 0,
        })
    })
    .await
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

//! The loop every connection runs, whatever its protocol.
//!
//! A connection alternates between idle (nothing buffered or in flight: it
//! waits for input holding no buffers and no reply mailbox) and busy (the
//! request loop, with buffers from the thread's pool, given back as soon as
//! everything asked has been answered).
//!
//! Drain (SIGTERM): the connection goes on reading and answering, so that
//! requests already sent (in flight, or still in the kernel's receive
//! buffer) are answered; it closes at a request boundary once the client
//! has sent nothing for `server.drain_quiet_ms` with everything answered,
//! or at the drain deadline (`server.drain_timeout_ms`), when what is still
//! unanswered is dropped and counted.
//!
//! # Why a hand-written poll
//!
//! The loop is one `poll` over the connection's sources (reply mailbox,
//! pushes, socket, one timer, the stop signal), called through `poll_fn`
//! whenever the worker's session driver (`crate::driver`) polls the
//! session: no `select!`, no future built per source and turn, no
//! `async fn` state machine between idle and busy.
//! Against the `select!` loop it replaced it saves ≈ 0.3 µs of the proxy's
//! CPU per unpipelined request, ≈ 3.4 % (BENCHMARKS.md, "The connection
//! loop as one poll"). The sources are polled in the order the `select!` was
//! biased in, and each turn handles one event before looking again.
//!
//! One timer serves every wait (the front request's deadline, the idle
//! timeout, drain's quiet spell and its deadline): it is armed at the
//! earliest of them and only moved earlier; when it fires the clock is
//! read once and what is due is handled. A wake-up for an instant that no
//! longer matters (the request it was armed for was answered) re-arms it:
//! at worst one early wake-up per timeout period, instead of a timer
//! registration per request.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::deadline::Deadline;
use super::pool::{self, Buffer};
use super::push::{Push, Pushes};
use super::shutdown::Shutdown;
use super::{End, Entry, Protocol};
use crate::stats::bump;

/// Output buffered before replies stay queued instead (the client is not
/// reading).
const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
const READ_CHUNK: usize = 16 * 1024;
/// First read buffer of a connection: small, so that thousands of idle
/// connections cost little; it grows by `READ_CHUNK` once traffic fills it.
const FIRST_READ: usize = 512;
/// First write buffer of a busy connection (replies of typical size).
pub const FIRST_WRITE: usize = 2048;
/// Bytes an idle connection reads into its own array before it takes a
/// read buffer: enough for most single requests.
const IDLE_READ: usize = 256;
/// Serve the connection until it ends.
///
/// The stream is not split: this one future both reads and writes it through
/// one `&mut` borrow, so no poll takes the lock `tokio::io::split` would
/// (two atomic operations on every read and every write, measured at 0.8 %
/// of the proxy's CPU on the unpipelined get path).
pub async fn run<P, S>(p: &mut P, mut stream: S) -> End
where
    P: Protocol,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut waiting = p.proxy().shutdown.clone();
    // Registered once for the connection's life, not once per wait: every
    // connection waits on the same watch, whose waiter list is one lock
    // (see [`Shutdown`]). It completes once; the connection then drains.
    let changed = std::pin::pin!(waiting.changed());
    let shutdown = Shutdown::new(p.proxy().shutdown.clone(), changed);
    // Any instant will do: it is armed before it is polled.
    let sleep = std::pin::pin!(tokio::time::sleep_until(p.io().state.last_input));
    let mut conn = Conn {
        phase: Phase::Idle,
        timer: Deadline::new(sleep),
        shutdown,
        first: [0; IDLE_READ],
        idle: None,
        quiet: Duration::ZERO,
        idle_deadline: None,
        quiet_at: None,
    };
    conn.load_settings(p.proxy());
    std::future::poll_fn(|cx| conn.poll(p, &mut stream, cx)).await
}

/// Where a connection is in its life.
enum Phase {
    /// Waiting for input, holding no buffers.
    Idle,
    /// Answering what it read.
    Busy,
    /// Everything read is answered: shutting its write side down.
    ShuttingDown(End),
}

/// How a busy spell ended.
enum Spell {
    /// Nothing buffered or in flight: idle again.
    Quiet,
    /// Everything asked is answered: shut the write side, then end.
    Close(End),
    /// The connection ends now.
    End(End),
}

/// The engine's side of a connection (the protocol's side is `P`).
struct Conn<'a, F> {
    phase: Phase,
    /// The one timer of every wait (module doc).
    timer: Deadline<'a>,
    shutdown: Shutdown<'a, F>,
    /// An idle connection reads into this before it takes a read buffer.
    first: [u8; IDLE_READ],
    /// `server.idle_timeout_ms` and `drain_quiet_ms`, read when the
    /// connection starts and at each busy spell (a reload applies from the
    /// next one).
    idle: Option<Duration>,
    quiet: Duration,
    /// When the client will have been silent for the idle timeout.
    idle_deadline: Option<Instant>,
    /// Draining: when the client will have been quiet long enough.
    quiet_at: Option<Instant>,
}

/// What the timer waits for in a turn of the busy loop.
#[derive(Clone, Copy)]
struct Waits {
    /// The front request's deadline.
    front: Option<Instant>,
    idle_at: Option<Instant>,
    quiet_at: Option<Instant>,
    drain_at: Option<Instant>,
}

impl Waits {
    fn earliest(&self) -> Option<Instant> {
        [self.front, self.idle_at, self.quiet_at, self.drain_at]
            .into_iter()
            .flatten()
            .min()
    }
}

/// What one turn of the busy loop found.
struct Turn {
    /// Read input (not closing, and the protocol has room).
    reading: bool,
    /// Read input, or write output.
    transfer: bool,
    draining: bool,
    waits: Waits,
}

impl<F: Future> Conn<'_, F> {
    fn poll<P, S>(&mut self, p: &mut P, stream: &mut S, cx: &mut Context<'_>) -> Poll<End>
    where
        P: Protocol,
        S: AsyncRead + AsyncWrite + Unpin,
    {
        loop {
            match self.phase {
                Phase::Idle => match ready!(self.poll_idle(p, stream, cx)) {
                    Ok(()) => self.begin_busy(p),
                    Err(end) => return Poll::Ready(end),
                },
                Phase::Busy => match ready!(self.poll_busy(p, stream, cx)) {
                    Spell::Quiet => {
                        give_back(p);
                        self.phase = Phase::Idle;
                    }
                    Spell::Close(end) => self.phase = Phase::ShuttingDown(end),
                    Spell::End(end) => {
                        give_back(p);
                        return Poll::Ready(end);
                    }
                },
                Phase::ShuttingDown(_) => {
                    // Its outcome does not change how the connection ends.
                    let _ = ready!(Pin::new(&mut *stream).poll_shutdown(cx));
                    give_back(p);
                    if let Phase::ShuttingDown(end) =
                        std::mem::replace(&mut self.phase, Phase::Idle)
                    {
                        return Poll::Ready(end);
                    }
                }
            }
        }
    }

    /// Idle: wait for the first bytes of the next request (read into the
    /// connection's small array, then into a fresh read buffer), the idle
    /// timeout, or SIGTERM.
    fn poll_idle<P, R>(
        &mut self,
        p: &mut P,
        rd: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), End>>
    where
        P: Protocol,
        R: AsyncRead + Unpin,
    {
        let mut first = ReadBuf::new(&mut self.first);
        let n = match Pin::new(&mut *rd).poll_read(cx, &mut first) {
            Poll::Ready(Ok(())) if first.filled().is_empty() => {
                return Poll::Ready(Err(End::ClientClosed))
            }
            Poll::Ready(Ok(())) => first.filled().len(),
            Poll::Ready(Err(e)) => return Poll::Ready(Err(End::Io(e))),
            Poll::Pending => {
                let state = &*p.io().state;
                let idle_at = self.idle.map(|d| state.last_input + d);
                if idle_at.is_some_and(|at| self.timer_reached(at, cx)) {
                    return Poll::Ready(Err(End::IdleTimeout));
                }
                // Draining is done busy (it waits for the client to go
                // quiet).
                let stopping = !state.draining && Pin::new(&mut self.shutdown).poll(cx).is_ready();
                if !stopping {
                    return Poll::Pending;
                }
                start_drain(p);
                0
            }
        };
        let io = p.io();
        if io.rbuf.capacity() == 0 {
            *io.rbuf = pool::take_buffer(Buffer::Read, FIRST_READ);
        }
        io.queue.take_storage();
        io.rbuf
            .extend_from_slice(self.first.get(..n).unwrap_or_default());
        let mut total = n;
        if n == IDLE_READ {
            // The array filled up: read what else is already there now, so
            // that a pipelined batch is dispatched (and coalesced toward the
            // shards) as a whole, not in two halves.
            io.rbuf.reserve(READ_CHUNK);
            total += read_ready(rd, io.rbuf, cx);
        }
        if total > 0 {
            io.state.input_arrived();
            p.proxy().stats.bytes_read.add(total as u64);
        }
        Poll::Ready(Ok(()))
    }

    /// The timer has passed `at` (armed there, or earlier).
    fn timer_reached(&mut self, at: Instant, cx: &mut Context<'_>) -> bool {
        loop {
            self.timer.arm(Some(at));
            match self.timer.poll_fired(cx) {
                Poll::Ready(now) if now >= at => return true,
                // It was armed earlier, for what no longer matters.
                Poll::Ready(_) => {}
                Poll::Pending => return false,
            }
        }
    }

    /// The live `idle_timeout` and `drain_quiet` (a reload may have
    /// changed them).
    fn load_settings(&mut self, proxy: &crate::proxy::Proxy) {
        let settings = proxy.settings.load();
        self.idle = settings.idle_timeout;
        self.quiet = settings.drain_quiet;
    }

    /// Input arrived while idle (or SIGTERM came): a busy spell begins.
    fn begin_busy<P: Protocol>(&mut self, p: &mut P) {
        self.load_settings(p.proxy());
        self.idle_deadline = self.idle.map(|d| p.io().state.last_input + d);
        self.quiet_at = None;
        self.phase = Phase::Busy;
        p.parse_and_dispatch();
    }

    /// Busy: answer the input in the read buffer and everything that
    /// follows, until the connection has nothing buffered or in flight
    /// (never while draining) or ends.
    fn poll_busy<P, S>(&mut self, p: &mut P, stream: &mut S, cx: &mut Context<'_>) -> Poll<Spell>
    where
        P: Protocol,
        S: AsyncRead + AsyncWrite + Unpin,
    {
        loop {
            let turn = match self.look(p, stream, cx) {
                Ok(turn) => turn,
                Err(Some(spell)) => return Poll::Ready(spell),
                Err(None) => continue,
            };
            if let Some(spell) = ready!(self.poll_event(p, stream, cx, &turn)) {
                return Poll::Ready(spell);
            }
        }
    }

    /// The top of a turn: write out what is finished, decide whether the
    /// spell is over, and what to wait for (`Err(None)`: look again).
    fn look<P, S>(
        &mut self,
        p: &mut P,
        stream: &mut S,
        cx: &mut Context<'_>,
    ) -> Result<Turn, Option<Spell>>
    where
        P: Protocol,
        S: AsyncRead + AsyncWrite + Unpin,
    {
        p.before_turn();
        p.settle_input(stream, cx);
        flush_ready(p);
        if let Some(end) = close_slow_consumer(p) {
            return Err(Some(Spell::End(end)));
        }
        let may_read = p.may_read();
        let mid_request = p.mid_request();
        let io = p.io();
        let st = &*io.state;
        let (pushes_held, expecting) = io
            .pushes
            .as_deref()
            .map_or((false, false), |p| (!p.is_empty(), p.expecting));
        let answered = io.queue.is_empty() && io.wbuf.is_empty() && !pushes_held;
        if st.closing && answered {
            // Every complete request read has been answered (with nothing
            // pending, the protocol left at most an incomplete one in the
            // buffer).
            return Err(Some(Spell::Close(if st.read_closed {
                End::ClientClosed
            } else if st.draining {
                End::Shutdown
            } else {
                End::Quit
            })));
        }
        let nothing_left = answered && io.rbuf.is_empty() && !mid_request;
        if nothing_left && !st.closing && !st.draining && !expecting {
            // Pushes sent before the reply that ended the subscription
            // (already in the channel) are written first.
            let more = io.pushes.is_some_and(|p| {
                p.take_sent();
                !p.is_empty()
            });
            return Err((!more).then_some(Spell::Quiet));
        }
        let reading = !st.closing && may_read;
        grow_read_buffer(io.rbuf, reading);
        // A client waiting for pushes (a subscriber) is not idle.
        let idle_at = self
            .idle_deadline
            .filter(|_| io.queue.is_empty() && !st.closing && !st.draining && !expecting);
        if st.draining && answered && !mid_request && !st.closing {
            // A clock read per quiet spell, only while draining.
            let quiet = self.quiet;
            self.quiet_at.get_or_insert_with(|| Instant::now() + quiet);
        } else {
            self.quiet_at = None;
        }
        let waits = Waits {
            front: io.queue.front_deadline(),
            idle_at,
            quiet_at: self.quiet_at,
            drain_at: st.drain_deadline.filter(|_| !st.closing),
        };
        self.timer.arm(waits.earliest());
        Ok(Turn {
            reading,
            transfer: reading || !io.wbuf.is_empty(),
            draining: st.draining,
            waits,
        })
    }

    /// Wait for the next event and handle it, in the order the sources are
    /// polled (a reply first, the stop signal last); `Ready(None)`: handled,
    /// take another turn.
    fn poll_event<P, S>(
        &mut self,
        p: &mut P,
        stream: &mut S,
        cx: &mut Context<'_>,
        turn: &Turn,
    ) -> Poll<Option<Spell>>
    where
        P: Protocol,
        S: AsyncRead + AsyncWrite + Unpin,
    {
        if poll_replies(p, cx).is_ready() {
            return Poll::Ready(None);
        }
        if poll_pushes(p, cx).is_ready() {
            return Poll::Ready(None);
        }
        if turn.transfer {
            if let Poll::Ready(moved) = self.poll_transfer(p, stream, cx, turn.reading) {
                return Poll::Ready(moved.map(Spell::End));
            }
        }
        if let Poll::Ready(now) = self.timer.poll_fired(cx) {
            return Poll::Ready(self.timer_fired(p, now, &turn.waits).map(Spell::End));
        }
        if !turn.draining && Pin::new(&mut self.shutdown).poll(cx).is_ready() {
            start_drain(p);
            return Poll::Ready(None);
        }
        Poll::Pending
    }

    /// The next write of the output (when there is some) or read of input
    /// (when reading), whichever the stream is ready for; the write first.
    fn poll_transfer<P, S>(
        &mut self,
        p: &mut P,
        stream: &mut S,
        cx: &mut Context<'_>,
        reading: bool,
    ) -> Poll<Option<End>>
    where
        P: Protocol,
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let io = p.io();
        if !io.wbuf.is_empty() {
            if let Poll::Ready(wrote) = Pin::new(&mut *stream).poll_write(cx, io.wbuf) {
                return Poll::Ready(match wrote {
                    Ok(0) => Some(End::ClientClosed),
                    Ok(n) => {
                        p.proxy().stats.bytes_written.add(n as u64);
                        p.io().wbuf.advance(n);
                        None
                    }
                    Err(e) => Some(End::Io(e)),
                });
            }
        }
        if !reading {
            return Poll::Pending;
        }
        let read = std::pin::pin!(stream.read_buf(&mut *io.rbuf));
        Poll::Ready(match ready!(read.poll(cx)) {
            Ok(0) => {
                // Client closed its side: finish what it asked, then close.
                let io = p.io();
                io.state.read_closed = true;
                io.state.closing = true;
                (io.queue.is_empty() && io.wbuf.is_empty()).then_some(End::ClientClosed)
            }
            Ok(n) => {
                p.proxy().stats.bytes_read.add(n as u64);
                let state = p.io().state;
                state.input_arrived();
                self.idle_deadline = self.idle.map(|d| state.last_input + d);
                self.quiet_at = None;
                p.parse_and_dispatch();
                None
            }
            Err(e) => Some(End::Io(e)),
        })
    }

    /// The timer fired at `now`: handle what was due, the front request's
    /// deadline first (one thing per turn, as the sources are).
    fn timer_fired<P: Protocol>(&mut self, p: &mut P, now: Instant, waits: &Waits) -> Option<End> {
        let due = |at: Option<Instant>| at.is_some_and(|at| at <= now);
        if due(waits.front) {
            p.io().queue.expire_overdue(now);
            // As after a reply: input held back for room goes on.
            if !p.io().rbuf.is_empty() {
                p.parse_and_dispatch();
            }
        } else if due(waits.idle_at) {
            return Some(End::IdleTimeout);
        } else if due(waits.quiet_at) {
            // Drained: everything read is answered and the client has been
            // quiet (an incomplete request is no request).
            p.io().state.closing = true;
        } else if due(waits.drain_at) {
            drain_deadline_passed(p);
        }
        // Otherwise it was armed for what no longer matters: the next turn
        // arms it again.
        None
    }
}

/// Grow the read buffer only when unparsed input is waiting for room (or
/// there is no buffer yet): a quiet connection keeps its small buffer.
fn grow_read_buffer(rbuf: &mut BytesMut, reading: bool) {
    let spare = rbuf.capacity() - rbuf.len();
    if reading && (spare == 0 || (spare < 1024 && !rbuf.is_empty())) {
        let grow = if rbuf.capacity() == 0 {
            FIRST_READ
        } else {
            READ_CHUNK
        };
        rbuf.reserve(grow);
    }
}

/// Take every backend reply that came (`Ready`: some did).
fn poll_replies<P: Protocol>(p: &mut P, cx: &mut Context<'_>) -> Poll<()> {
    let Some(mailbox) = p.io().replies.as_mut() else {
        return Poll::Pending;
    };
    let Poll::Ready(Some(reply)) = mailbox.poll_recv(cx) else {
        return Poll::Pending;
    };
    p.take_reply(reply);
    while let Some(reply) = p.io().replies.as_mut().and_then(|m| m.try_recv()) {
        p.take_reply(reply);
    }
    // Requests the client already sent may be waiting in the buffer for
    // room (`room_to_dispatch`): go on.
    if !p.io().rbuf.is_empty() {
        p.parse_and_dispatch();
    }
    Poll::Ready(())
}

/// Take a push a source sent (`Ready`: one did).
fn poll_pushes<P: Protocol>(p: &mut P, cx: &mut Context<'_>) -> Poll<()> {
    let Some(pushes) = p.io().pushes else {
        return Poll::Pending;
    };
    let Some(rx) = pushes.receiver() else {
        return Poll::Pending;
    };
    let Poll::Ready(Some(push)) = rx.poll_recv(cx) else {
        return Poll::Pending;
    };
    pushes.hold(push);
    pushes.take_sent();
    Poll::Ready(())
}

/// Quiet (or done): hand the buffers, queue storage and reply mailbox to
/// the thread's pool (a mailbox slot is closed).
fn give_back<P: Protocol>(p: &mut P) {
    let io = p.io();
    pool::give_buffer(Buffer::Read, std::mem::take(io.rbuf));
    pool::give_buffer(Buffer::Write, std::mem::take(io.wbuf));
    pool::give_buffer(Buffer::Command, std::mem::take(io.cmd_buf));
    io.queue.give_storage();
    if let Some(mailbox) = io.replies.take() {
        // A channel with a sender still out stays with this connection
        // (its replies carry this connection's sequence numbers).
        *io.replies = pool::give_mailbox(mailbox);
    }
    p.give_back();
}

/// Bytes read into `buf` by one read attempt that does not wait: 0 when
/// nothing is ready (end of stream and errors are left for the next read to
/// find again).
pub fn read_ready<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> usize {
    let read = std::pin::pin!(rd.read_buf(buf));
    match read.poll(cx) {
        Poll::Ready(Ok(n)) => n,
        _ => 0,
    }
}

/// SIGTERM: go on serving until quiet or the deadline.
fn start_drain<P: Protocol>(p: &mut P) {
    let timeout = p.proxy().settings.load().drain_timeout;
    let state = p.io().state;
    state.draining = true;
    state.drain_deadline = Some(Instant::now() + timeout);
}

/// The drain deadline: what is still unanswered is dropped (and counted);
/// what is already rendered is written, then the connection closes.
fn drain_deadline_passed<P: Protocol>(p: &mut P) {
    let io = p.io();
    io.state.closing = true;
    let dropped = io.queue.clear();
    if dropped > 0 {
        let proxy = p.proxy();
        proxy.stats.drain_dropped.fetch_add(dropped as u64, Relaxed);
        proxy.metrics.drain_dropped(dropped);
    }
}

/// More replies or reply bytes waiting than `server.max_pending_replies` /
/// `max_pending_bytes` allow: the client is not reading.
fn close_slow_consumer<P: Protocol>(p: &mut P) -> Option<End> {
    let io = p.io();
    let push_bytes = io.pushes.as_deref().map_or(0, Pushes::bytes);
    let max_bytes = io.state.max_pending_bytes;
    let over = io.queue.over(
        io.state.max_pending_replies,
        max_bytes.saturating_sub(push_bytes),
    );
    if !over && push_bytes <= max_bytes {
        return None;
    }
    bump(&p.proxy().stats.slow_consumers_closed);
    p.proxy().metrics.slow_consumer_closed();
    Some(End::SlowConsumer)
}

/// Write out every finished request at the front of the queue.
fn flush_ready<P: Protocol>(p: &mut P) {
    if p.hold_output() {
        return;
    }
    let mut now = None;
    if let Some(pushes) = p.io().pushes {
        // A source sends a push before the reply that follows it (on the
        // reply channel, taken first): it must be held before that reply
        // is written.
        pushes.take_sent();
    }
    loop {
        let io = p.io();
        if io.wbuf.len() >= MAX_OUTPUT_BYTES {
            return;
        }
        let answered_below = io.queue.seq_of(0);
        if let Some(push) = io.pushes.and_then(|p| p.pop_due(answered_below)) {
            if write_push(p, push) {
                return;
            }
            continue;
        }
        let io = p.io();
        let Some(entry) = io.queue.pop_ready() else {
            return;
        };
        let latency = entry.command().map(|command| {
            let now = *now.get_or_insert_with(Instant::now);
            let latency = now.saturating_duration_since(entry.started());
            let proxy = p.proxy();
            proxy
                .metrics
                .request(p.front(), command, latency.as_secs_f64());
            latency
        });
        let io = p.io();
        if entry.is_close() {
            // Nothing after a close is answered.
            io.queue.clear();
            io.state.closing = true;
            if let Some(pushes) = io.pushes {
                pushes.close();
            }
            return;
        }
        if io.wbuf.capacity() == 0 {
            *io.wbuf = pool::take_buffer(Buffer::Write, FIRST_WRITE);
        }
        p.write_reply(entry, latency);
    }
}

/// Write an unsolicited frame; a source's last one closes the connection
/// (true).
fn write_push<P: Protocol>(p: &mut P, push: Push) -> bool {
    let push_type = p.push_type();
    let io = p.io();
    if io.wbuf.capacity() == 0 {
        *io.wbuf = pool::take_buffer(Buffer::Write, FIRST_WRITE);
    }
    let start = io.wbuf.len();
    io.wbuf.extend_from_slice(&push.frame);
    // Its form is the protocol's now, not when its source encoded it
    // (HELLO may have switched since): only the outer type differs, what
    // a push carries (bulk strings, integers) reads the same in both.
    if let (Some(kind), Some(first)) = (push_type, io.wbuf.get_mut(start)) {
        if *first == b'>' {
            *first = kind;
        }
    }
    if push.close {
        // Nothing after it is answered (as after a close reply).
        io.queue.clear();
        io.state.closing = true;
        if let Some(pushes) = io.pushes {
            pushes.close();
        }
    }
    push.close
}

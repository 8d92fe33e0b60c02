//! The loop every connection runs, whatever its protocol.
//!
//! A connection alternates between idle (nothing buffered or in flight: it
//! waits for input holding no buffers and no reply channel) and busy (the
//! request loop, with buffers from the thread's pool, given back as soon as
//! everything asked has been answered).
//!
//! Drain (SIGTERM): the connection goes on reading and answering, so that
//! requests already sent (in flight, or still in the kernel's receive
//! buffer) are answered; it closes at a request boundary once the client
//! has sent nothing for `server.drain_quiet_ms` with everything answered,
//! or at the drain deadline (`server.drain_timeout_ms`), when what is still
//! unanswered is dropped and counted.

use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::task::Poll;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::deadline::Deadline;
use super::pool::{self, Buffer};
use super::push::{Push, Pushes};
use super::shutdown::Shutdown;
use super::{End, Entry, Protocol};
use crate::backend::Mailbox;
use crate::redis::BackendReply;
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
/// Bytes an idle connection reads into its (task-resident) array before it
/// takes a read buffer: enough for most single requests.
const IDLE_READ: usize = 256;

/// Serve the connection until it ends.
///
/// The stream is not split: this one task both reads and writes it, and
/// [`transfer`] polls both directions through one `&mut` borrow, so no
/// poll takes the lock `tokio::io::split` would (two atomic operations on
/// every read and every write, measured at 0.8 % of the proxy's CPU on the
/// unpipelined get path).
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
    let mut shutdown = Shutdown::new(p.proxy().shutdown.clone(), changed);
    loop {
        if let Err(end) = wait_for_input(p, &mut stream, &mut shutdown).await {
            return end;
        }
        let end = serve(p, &mut stream, &mut shutdown).await;
        give_back(p);
        if let Some(end) = end {
            return end;
        }
    }
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

/// Idle: wait for the first bytes of the next request (read into a small
/// array in the future, then into a fresh read buffer), or for SIGTERM.
async fn wait_for_input<P, R, Sd>(p: &mut P, rd: &mut R, shutdown: &mut Sd) -> Result<(), End>
where
    P: Protocol,
    R: AsyncRead + Unpin,
    Sd: Future + Unpin,
{
    let idle = p.proxy().settings.load().idle_timeout;
    let state = p.io().state;
    let idle_at = idle.map(|d| state.last_input + d);
    let draining = state.draining;
    let mut first = [0u8; IDLE_READ];
    let n = tokio::select! {
        biased;
        res = rd.read(&mut first) => match res {
            Ok(0) => return Err(End::ClientClosed),
            Ok(n) => n,
            Err(e) => return Err(End::Io(e)),
        },
        _ = sleep_until_opt(idle_at), if idle_at.is_some() => return Err(End::IdleTimeout),
        // Draining is done busy (it waits for the client to go quiet).
        _ = &mut *shutdown, if !draining => {
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
        .extend_from_slice(first.get(..n).unwrap_or_default());
    let mut total = n;
    if n == IDLE_READ {
        // The array filled up: read what else is already there now, so
        // that a pipelined batch is dispatched (and coalesced toward the
        // shards) as a whole, not in two halves.
        io.rbuf.reserve(READ_CHUNK);
        total += read_ready(rd, io.rbuf).await;
    }
    if total > 0 {
        io.state.input_arrived();
        p.proxy().stats.bytes_read.add(total as u64);
    }
    Ok(())
}

/// Busy: answer the input in the read buffer and everything that follows,
/// until the connection ends (`Some`) or has nothing buffered or in flight
/// (`None`; never while draining).
async fn serve<P, S, Sd>(p: &mut P, stream: &mut S, shutdown: &mut Sd) -> Option<End>
where
    P: Protocol,
    S: AsyncRead + AsyncWrite + Unpin,
    Sd: Future + Unpin,
{
    let (idle, quiet) = {
        let settings = p.proxy().settings.load();
        (settings.idle_timeout, settings.drain_quiet)
    };
    let mut idle_deadline = idle.map(|d| p.io().state.last_input + d);
    // Draining: when the client will have been quiet long enough.
    let mut quiet_at: Option<Instant> = None;
    // One timer for the busy period, not one per wait (`deadline`); it
    // lives in this future, so an idle connection does not carry it.
    // Any instant will do (it is reset before it is polled): not a clock
    // read per busy period.
    let mut sleep = std::pin::pin!(tokio::time::sleep_until(p.io().state.last_input));
    let mut deadline = Deadline::new(sleep.as_mut());
    p.parse_and_dispatch();
    loop {
        p.before_turn();
        p.settle_input(stream).await;
        flush_ready(p);
        if let Some(end) = close_slow_consumer(p) {
            return Some(end);
        }
        let may_read = p.may_read();
        let mid_request = p.mid_request();
        let mut io = p.io();
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
            let _ = stream.shutdown().await;
            let st = p.io().state;
            return Some(if st.read_closed {
                End::ClientClosed
            } else if st.draining {
                End::Shutdown
            } else {
                End::Quit
            });
        }
        let nothing_left = answered && io.rbuf.is_empty() && !mid_request;
        if nothing_left && !st.closing && !st.draining && !expecting {
            // Pushes sent before the reply that ended the subscription
            // (already in the channel) are written first.
            let more = io.pushes.as_deref_mut().is_some_and(|p| {
                p.take_sent();
                !p.is_empty()
            });
            if !more {
                return None;
            }
            continue;
        }
        let reading = !st.closing && may_read;
        // Grow only when unparsed input is waiting for room (or there is
        // no buffer yet): a quiet connection keeps its small buffer.
        let spare = io.rbuf.capacity() - io.rbuf.len();
        if reading && (spare == 0 || (spare < 1024 && !io.rbuf.is_empty())) {
            let grow = if io.rbuf.capacity() == 0 {
                FIRST_READ
            } else {
                READ_CHUNK
            };
            io.rbuf.reserve(grow);
        }
        deadline.arm(io.queue.front_deadline());
        // A client waiting for pushes (a subscriber) is not idle.
        let idle_at = idle_deadline
            .filter(|_| io.queue.is_empty() && !st.closing && !st.draining && !expecting);
        if st.draining && answered && !mid_request && !st.closing {
            // A clock read per quiet spell, only while draining.
            quiet_at.get_or_insert_with(|| Instant::now() + quiet);
        } else {
            quiet_at = None;
        }
        let drain_at = st.drain_deadline.filter(|_| !st.closing);
        let draining = st.draining;
        tokio::select! {
            biased;
            reply = recv_reply(io.replies) => {
                if let Some(reply) = reply {
                    p.take_reply(reply);
                    while let Some(reply) = try_recv(p.io().replies) {
                        p.take_reply(reply);
                    }
                    // Requests the client already sent may be waiting in
                    // the buffer for room (`room_to_dispatch`): go on.
                    if !p.io().rbuf.is_empty() {
                        p.parse_and_dispatch();
                    }
                }
            }
            push = recv_push(io.pushes.as_deref_mut()) => {
                if let Some(pushes) = p.io().pushes {
                    if let Some(push) = push {
                        pushes.hold(push);
                    }
                    pushes.take_sent();
                }
            }
            moved = transfer(stream, io.wbuf, io.rbuf, reading), if reading || !io.wbuf.is_empty() => match moved {
                Transfer::Wrote(Ok(0)) => return Some(End::ClientClosed),
                Transfer::Wrote(Ok(n)) => {
                    p.proxy().stats.bytes_written.add(n as u64);
                    p.io().wbuf.advance(n);
                }
                Transfer::Read(Ok(0)) => {
                    // Client closed its side: finish what it asked, then close.
                    let io = p.io();
                    io.state.read_closed = true;
                    io.state.closing = true;
                    if io.queue.is_empty() && io.wbuf.is_empty() {
                        return Some(End::ClientClosed);
                    }
                }
                Transfer::Read(Ok(n)) => {
                    p.proxy().stats.bytes_read.add(n as u64);
                    let state = p.io().state;
                    state.input_arrived();
                    idle_deadline = idle.map(|d| state.last_input + d);
                    quiet_at = None;
                    p.parse_and_dispatch();
                }
                Transfer::Wrote(Err(e)) | Transfer::Read(Err(e)) => return Some(End::Io(e)),
            },
            () = deadline.fired(), if deadline.is_armed() => {
                p.io().queue.expire_overdue(Instant::now());
                // As after a reply: input held back for room goes on.
                if !p.io().rbuf.is_empty() {
                    p.parse_and_dispatch();
                }
            }
            _ = sleep_until_opt(idle_at), if idle_at.is_some() => {
                return Some(End::IdleTimeout);
            }
            _ = sleep_until_opt(quiet_at), if quiet_at.is_some() => {
                // Drained: everything read is answered and the client has
                // been quiet (an incomplete request is no request).
                p.io().state.closing = true;
            }
            _ = sleep_until_opt(drain_at), if drain_at.is_some() => drain_deadline_passed(p),
            _ = &mut *shutdown, if !draining => start_drain(p),
        }
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

/// The next push a source sent; never, without sources.
async fn recv_push(pushes: Option<&mut Pushes>) -> Option<Push> {
    match pushes.and_then(Pushes::receiver) {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The next backend reply; never, while there is no channel.
async fn recv_reply(replies: &mut Option<Mailbox>) -> Option<BackendReply> {
    match replies {
        Some(channel) => channel.recv().await,
        None => std::future::pending().await,
    }
}

fn try_recv(replies: &mut Option<Mailbox>) -> Option<BackendReply> {
    replies.as_mut().and_then(Mailbox::try_recv)
}

/// What [`transfer`] did.
enum Transfer {
    Wrote(std::io::Result<usize>),
    Read(std::io::Result<usize>),
}

/// The next write of `wbuf` (when not empty) or read into `rbuf` (when
/// `read`), whichever the stream is ready for first; the write is tried
/// first, as a `biased` select of the two would.
fn transfer<'a, S>(
    stream: &'a mut S,
    wbuf: &'a [u8],
    rbuf: &'a mut BytesMut,
    read: bool,
) -> impl Future<Output = Transfer> + 'a
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    std::future::poll_fn(move |cx| {
        if !wbuf.is_empty() {
            if let Poll::Ready(r) = std::pin::Pin::new(&mut *stream).poll_write(cx, wbuf) {
                return Poll::Ready(Transfer::Wrote(r));
            }
        }
        if read {
            let read = std::pin::pin!(stream.read_buf(&mut *rbuf));
            if let Poll::Ready(r) = read.poll(cx) {
                return Poll::Ready(Transfer::Read(r));
            }
        }
        Poll::Pending
    })
}

/// Bytes read into `buf` by one read attempt that does not wait: 0 when
/// nothing is ready (end of stream and errors are left for the next read to
/// find again).
pub async fn read_ready<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut BytesMut) -> usize {
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

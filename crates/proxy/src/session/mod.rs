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
//! * `dispatch`: a parsed request → backend requests (routing by phase).
//! * `render`: finished requests → reply bytes, shadow writes, counters.

mod dispatch;
mod pending;
mod render;

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use memshift_protocol::memcache::{parse_request, ParseLimits, Parsed, ProtocolError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::metrics::command_index;
use crate::proxy::Proxy;
use crate::redis::encoding::CasGenerator;
use crate::redis::{BackendError, BackendReply, ReplyTo};
use crate::stats::bump;
use pending::{Op, Pending, Results, NO_COMMAND};

/// Requests waiting on backends before the session stops reading from the client.
const MAX_WAITING: usize = 1024;
/// Output buffered before replies stay queued instead (the client is not reading).
const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Reply bytes a client may have waiting (on top of `MAX_OUTPUT_BYTES`)
/// before it is closed as a slow consumer: bounds memory even when each
/// queued reply is a large value.
const MAX_PENDING_BYTES: usize = 64 * 1024 * 1024;
const READ_CHUNK: usize = 16 * 1024;
/// Quiet time after which a connection gives its buffers back.
const RELEASE_IDLE_BUFFERS: std::time::Duration = std::time::Duration::from_secs(1);
/// First read buffer of a connection: small, so that thousands of idle
/// connections cost little; it grows by `READ_CHUNK` once traffic fills it.
const FIRST_READ: usize = 512;
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
    reply_tx: mpsc::UnboundedSender<BackendReply>,
    reply_rx: mpsc::UnboundedReceiver<BackendReply>,
    cas: CasGenerator,
    closing: bool,
    /// `server.max_pending_replies` as of the last input.
    max_pending_replies: usize,
    /// `server.max_item_size` as of the last input.
    max_item_size: usize,
    /// Bytes of backend replies held by `pending`.
    pending_bytes: usize,
}

impl Session {
    pub fn new(proxy: Arc<Proxy>, id: u64) -> Session {
        let (reply_tx, reply_rx) = mpsc::unbounded_channel();
        let seed = twox_hash::XxHash3_64::oneshot_with_seed(proxy.cas_seed, &id.to_le_bytes());
        let max_pending_replies = proxy.settings.load().max_pending_replies;
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
            current_start: Instant::now(),
            reply_tx,
            reply_rx,
            max_pending_replies,
            max_item_size: 0,
            pending_bytes: 0,
            cas: CasGenerator::new(seed),
            closing: false,
        }
    }

    /// Serve the connection until it ends.
    pub async fn run<S>(mut self, stream: S) -> SessionEnd
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let mut shutdown = self.proxy.shutdown.clone();
        let idle = self.proxy.settings.load().idle_timeout;
        let mut idle_deadline = idle.map(|d| Instant::now() + d);
        let mut read_closed = false;
        // When the buffers of a connection gone quiet are given back.
        let mut release_at: Option<Instant> = None;
        loop {
            self.flush_ready();
            if self.pending.len() > self.max_pending_replies
                || self.pending_bytes > MAX_PENDING_BYTES.max(4 * self.max_item_size)
            {
                bump(&self.proxy.stats.slow_consumers_closed);
                self.proxy.metrics.slow_consumer_closed();
                return SessionEnd::SlowConsumer;
            }
            if self.closing && self.pending.is_empty() && self.wbuf.is_empty() {
                let _ = wr.shutdown().await;
                return if read_closed {
                    SessionEnd::ClientClosed
                } else {
                    SessionEnd::Quit
                };
            }
            let reading = !self.closing && self.waiting < MAX_WAITING;
            // Grow only when unparsed input is waiting for room (or there is
            // no buffer yet): an idle connection keeps its small buffer.
            let spare = self.rbuf.capacity() - self.rbuf.len();
            if reading && (spare == 0 || (spare < 1024 && !self.rbuf.is_empty())) {
                let grow = if self.rbuf.capacity() == 0 {
                    FIRST_READ
                } else {
                    READ_CHUNK
                };
                self.rbuf.reserve(grow);
            }
            let front_deadline = self
                .pending
                .front()
                .filter(|p| p.waiting > 0)
                .map(|p| p.deadline);
            let idle_at = idle_deadline.filter(|_| self.pending.is_empty() && !self.closing);
            let quiet = self.pending.is_empty() && self.wbuf.is_empty() && self.rbuf.is_empty();
            let release = release_at.filter(|_| quiet);
            tokio::select! {
                biased;
                reply = self.reply_rx.recv() => {
                    if let Some(reply) = reply {
                        self.complete(reply);
                        while let Ok(reply) = self.reply_rx.try_recv() {
                            self.complete(reply);
                        }
                        // Requests the client already sent may be waiting
                        // in the buffer for room (MAX_WAITING): go on.
                        if !self.rbuf.is_empty() {
                            self.process_input();
                        }
                    }
                }
                res = wr.write(&self.wbuf), if !self.wbuf.is_empty() => match res {
                    Ok(0) => return SessionEnd::ClientClosed,
                    Ok(n) => {
                        self.proxy.stats.bytes_written.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                        self.wbuf.advance(n);
                    }
                    Err(e) => return SessionEnd::Io(e),
                },
                res = rd.read_buf(&mut self.rbuf), if reading => match res {
                    Ok(0) => {
                        // Client closed its side: finish what it asked, then close.
                        read_closed = true;
                        self.closing = true;
                        if self.pending.is_empty() && self.wbuf.is_empty() {
                            return SessionEnd::ClientClosed;
                        }
                    }
                    Ok(n) => {
                        self.proxy.stats.bytes_read.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                        let now = Instant::now();
                        idle_deadline = idle.map(|d| now + d);
                        release_at = Some(now + RELEASE_IDLE_BUFFERS);
                        self.process_input();
                    }
                    Err(e) => return SessionEnd::Io(e),
                },
                _ = sleep_until_opt(front_deadline), if front_deadline.is_some() => {
                    self.expire_overdue();
                }
                _ = sleep_until_opt(idle_at), if idle_at.is_some() => {
                    return SessionEnd::IdleTimeout;
                }
                _ = sleep_until_opt(release), if release.is_some() => {
                    // Idle connections hold no buffers (thousands of idle
                    // clients then cost little); busy ones keep theirs.
                    self.rbuf = BytesMut::new();
                    self.wbuf = BytesMut::new();
                    self.cmd_buf = BytesMut::new();
                    self.pending.shrink_to_fit();
                    release_at = None;
                }
                _ = shutdown.changed(), if !self.closing => {
                    // Drain: stop reading, finish what is in flight.
                    self.closing = true;
                    if self.pending.is_empty() && self.wbuf.is_empty() {
                        return SessionEnd::Shutdown;
                    }
                }
            }
        }
    }

    /// Parse and dispatch every complete request in the read buffer.
    fn process_input(&mut self) {
        let settings = self.proxy.settings.load();
        let limits = settings.limits;
        self.max_pending_replies = settings.max_pending_replies;
        self.max_item_size = settings.limits.max_item_size;
        let now = Instant::now();
        self.current_start = now;
        while !self.closing && self.waiting < MAX_WAITING {
            if self.skip > 0 {
                let n = self.skip.min(self.rbuf.len());
                self.rbuf.advance(n);
                self.skip -= n;
                if self.skip > 0 {
                    return;
                }
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
                Parsed::Invalid(ProtocolError::Reply { reply, skip }) => {
                    if let Some(key) = oversize_set_key(&self.rbuf, &limits) {
                        let key = bytes::Bytes::copy_from_slice(key);
                        self.delete_quietly(key);
                    }
                    if let Some(key) = dispatch::oversize_meta_set_key(&self.rbuf, reply) {
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

    fn push_ready(&mut self, op: Op) {
        if matches!(op, Op::Close) {
            self.closing = true;
        }
        self.pending.push_back(Pending {
            op,
            command: self.current_command,
            started: self.current_start,
            deadline: self.current_start,
            waiting: 0,
            bytes: 0,
            results: Results::None,
        });
    }

    fn push_waiting(&mut self, op: Op, parts: u32, deadline: Instant) {
        if parts == 0 {
            self.push_ready(op);
            return;
        }
        self.waiting += 1;
        self.pending.push_back(Pending {
            op,
            command: self.current_command,
            started: self.current_start,
            deadline,
            waiting: parts,
            bytes: 0,
            results: Results::with_parts(parts),
        });
    }

    fn next_seq(&self) -> u64 {
        self.base_seq + self.pending.len() as u64
    }

    fn reply_to(&self, seq: u64, part: u32) -> ReplyTo {
        ReplyTo {
            tx: self.reply_tx.clone(),
            seq,
            part,
        }
    }

    fn complete(&mut self, reply: BackendReply) {
        let Some(index) = reply.seq.checked_sub(self.base_seq) else {
            return; // for a request that already timed out
        };
        let index = index as usize;
        let Some(pending) = self.pending.get_mut(index) else {
            return;
        };
        let size = reply.result.as_ref().map_or(0, |r| r.size());
        if pending.waiting > 0 && pending.results.set(reply.part, reply.result) {
            pending.bytes += size;
            self.pending_bytes += size;
            pending.waiting -= 1;
            if pending.waiting == 0 && !self.start_backfill(index) {
                self.waiting -= 1;
            }
        }
    }

    /// Answer every overdue request's missing parts with a timeout.
    fn expire_overdue(&mut self) {
        let now = Instant::now();
        for pending in self.pending.iter_mut() {
            if pending.waiting == 0 {
                continue;
            }
            if pending.deadline > now {
                break;
            }
            pending.results.fill_missing(BackendError::Timeout);
            pending.waiting = 0;
            self.waiting -= 1;
        }
    }

    /// Write out every finished request at the front of the queue.
    fn flush_ready(&mut self) {
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
                self.proxy.metrics.request(
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
            self.render(pending);
        }
    }
}

/// memcached drops the old value when it refuses a `set` as too large (so a
/// stale value does not outlive a failed overwrite): the key of such a set.
fn oversize_set_key<'a>(input: &'a [u8], limits: &ParseLimits) -> Option<&'a [u8]> {
    let line = input.split(|&b| b == b'\n').next()?;
    let mut tokens = line
        .split(|&b| b == b' ' || b == b'\r')
        .filter(|t| !t.is_empty());
    if tokens.next()? != b"set" {
        return None;
    }
    let key = tokens.next()?;
    let number = |t: &[u8]| std::str::from_utf8(t).ok()?.parse::<u64>().ok();
    let flags = u32::try_from(number(tokens.next()?)?).ok()?;
    let _exptime = tokens.next()?;
    let length = usize::try_from(number(tokens.next()?)?).ok()?;
    let too_large = key.len() <= memshift_protocol::memcache::MAX_KEY_LEN
        && length > limits.max_data_len(key.len(), flags);
    too_large.then_some(key)
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

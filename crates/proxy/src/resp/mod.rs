//! The RESP listener's session: Redis clients (RESP2, or RESP3 after
//! `HELLO 3`) on the same ring and the same items as the memcached side.
//!
//! One connection: requests are parsed from the read buffer
//! (`memshift_protocol::resp::request`), dispatched at once (a pipelining
//! client has many in flight) and answered in request order. Each request
//! gets a [`Pending`] entry; backend replies arrive on the session's
//! channel tagged with the request's sequence number and the part (one per
//! shard a multi-key command was split into).
//!
//! * `cmd`: one module per command family (`mod.rs` is the match).
//! * `pending`: the queue entries and how each one's reply is rendered.
//!
//! docs/resp.md lists what is supported, split across shards, or refused.

mod cmd;
mod pending;

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use memshift_protocol::resp::reply::{self as out, RespVersion};
use memshift_protocol::resp::request::{RequestLimits, RequestParser, MAX_REQUEST_ARGS};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::proxy::Proxy;
use crate::redis::encoding::CasGenerator;
use crate::redis::BackendReply;
use crate::session::SessionEnd;
use cmd::near_before_reply;
use pending::{NearAfter, Pending, Render};

/// Requests in flight before the session stops reading.
const MAX_PENDING: usize = 1024;
/// Output buffered before the session stops reading (the client is slow).
const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
const READ_CHUNK: usize = 16 * 1024;
/// Largest incomplete request kept (Redis' default client-query-buffer-limit).
const MAX_QUERY_BYTES: usize = 1024 * 1024 * 1024;

pub struct RespSession {
    proxy: Arc<Proxy>,
    id: u64,
    /// Which connection of each shard this session uses (keeps its
    /// requests to one shard in order).
    lane: usize,
    version: RespVersion,
    authenticated: bool,
    /// `CLIENT SETNAME`.
    name: Option<Bytes>,
    rbuf: BytesMut,
    wbuf: BytesMut,
    /// Scratch space the backend commands are built in.
    cmd_buf: BytesMut,
    parser: RequestParser,
    /// The arguments of the request being dispatched (slices of its frame).
    args: Vec<Bytes>,
    /// Its `metrics::COMMANDS` index (set by `dispatch`).
    command: Option<usize>,
    /// `[redis] timeout_ms`, read once per batch of requests.
    request_timeout: std::time::Duration,
    pending: VecDeque<Pending>,
    /// Sequence number of `pending[0]`.
    base_seq: u64,
    tx: mpsc::UnboundedSender<BackendReply>,
    rx: mpsc::UnboundedReceiver<BackendReply>,
    cas: CasGenerator,
    /// QUIT, a protocol error, end of input or shutdown: answer what was
    /// read, then close.
    closing: bool,
    read_closed: bool,
    /// MULTI/WATCH state and the request held on a connection of the
    /// session's own (`cmd::transaction`, `cmd::hold`).
    txn: cmd::TxnState,
}

impl RespSession {
    pub fn new(proxy: Arc<Proxy>, id: u64) -> RespSession {
        // A seed space apart from the memcached sessions' (same ids).
        let seed = twox_hash::XxHash3_64::oneshot_with_seed(
            proxy.cas_seed ^ 0x5245_5350,
            &id.to_le_bytes(),
        );
        let authenticated = proxy.settings.load().resp_password.is_none();
        let (tx, rx) = mpsc::unbounded_channel();
        RespSession {
            proxy,
            id,
            lane: id as usize,
            version: RespVersion::Resp2,
            authenticated,
            name: None,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            cmd_buf: BytesMut::new(),
            parser: RequestParser::new(),
            args: Vec::new(),
            command: None,
            request_timeout: std::time::Duration::ZERO,
            pending: VecDeque::new(),
            base_seq: 0,
            tx,
            rx,
            cas: CasGenerator::new(seed),
            closing: false,
            read_closed: false,
            txn: cmd::TxnState::default(),
        }
    }

    /// Serve the connection until it ends.
    pub async fn run<S>(mut self, stream: S) -> SessionEnd
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let mut shutdown = self.proxy.shutdown.clone();
        let mut last_input = Instant::now();
        loop {
            self.hold_tick(); // EXEC, WATCH, blocking calls (cmd::hold)
            self.flush_ready();
            if self.closing && self.pending.is_empty() && self.wbuf.is_empty() {
                let _ = wr.shutdown().await;
                return if self.read_closed {
                    SessionEnd::ClientClosed
                } else {
                    SessionEnd::Quit
                };
            }
            let reading = !self.closing
                && self.pending.len() < MAX_PENDING
                && self.wbuf.len() < MAX_OUTPUT_BYTES
                && !(self.txn.held() && self.rbuf.len() >= cmd::HELD_INPUT_LIMIT);
            if reading && self.rbuf.capacity() - self.rbuf.len() < READ_CHUNK / 4 {
                self.rbuf.reserve(READ_CHUNK);
            }
            let front_deadline = self
                .pending
                .front()
                .filter(|p| p.waiting > 0)
                .map(|p| p.deadline);
            let idle_at = self
                .proxy
                .settings
                .load()
                .idle_timeout
                .filter(|_| self.pending.is_empty() && !self.closing)
                .map(|d| last_input + d);
            tokio::select! {
                biased;
                Some(reply) = self.rx.recv() => {
                    self.complete(reply);
                    while let Ok(reply) = self.rx.try_recv() {
                        self.complete(reply);
                    }
                    if !self.rbuf.is_empty() {
                        self.process_input();
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
                        self.read_closed = true;
                        self.closing = true;
                    }
                    Ok(n) => {
                        self.proxy.stats.bytes_read.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                        last_input = Instant::now();
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
                _ = shutdown.changed(), if !self.closing => {
                    // Drain: answer what was read, read nothing more.
                    self.closing = true;
                }
            }
        }
    }

    /// Parse and dispatch every complete request in the read buffer.
    fn process_input(&mut self) {
        let settings = self.proxy.settings.load();
        let limits = RequestLimits {
            max_bulk_len: settings.resp_max_bulk_len,
            max_args: MAX_REQUEST_ARGS,
            unauthenticated: !self.authenticated,
        };
        drop(settings);
        self.request_timeout = self.proxy.router.load().redis().request_timeout;
        // A held request (cmd::hold) stops dispatch until it is answered.
        while !self.closing && self.pending.len() < MAX_PENDING && !self.txn.held() {
            match self.parser.parse(&self.rbuf, &limits) {
                Ok(None) => {
                    // Redis' client-query-buffer-limit: close, no reply.
                    if self.rbuf.len() > MAX_QUERY_BYTES.max(limits.max_bulk_len + 1024 * 1024) {
                        tracing::info!(
                            bytes = self.rbuf.len(),
                            "closing a RESP client whose request exceeds the query buffer limit"
                        );
                        self.rbuf.clear();
                        self.push_ready(Render::Close);
                    }
                    return;
                }
                Ok(Some(consumed)) => {
                    let frame = self.rbuf.split_to(consumed).freeze();
                    self.args.clear();
                    self.command = None;
                    for range in self.parser.args() {
                        self.args.push(frame.slice(range.clone()));
                    }
                    if self.args.is_empty() {
                        continue;
                    }
                    // A multibulk request can go to Redis as it came.
                    let raw = (frame.first() == Some(&b'*')).then_some(frame);
                    self.dispatch(raw);
                }
                Err(e) => {
                    // Redis answers a protocol error and closes.
                    tracing::debug!(error = %e, "RESP protocol error");
                    self.push_error(format!("ERR {e}").as_bytes());
                    self.push_ready(Render::Close);
                    self.rbuf.clear();
                    return;
                }
            }
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
            let Some(mut p) = self.pending.pop_front() else {
                return;
            };
            self.base_seq += 1;
            if let Some(command) = p.command {
                let now = *now.get_or_insert_with(Instant::now);
                self.proxy.metrics.request(
                    crate::metrics::Protocol::Resp,
                    command,
                    now.saturating_duration_since(p.started).as_secs_f64(),
                );
            }
            if !matches!(p.near, NearAfter::Nothing) {
                near_before_reply(&self.proxy, &mut p);
            }
            if matches!(p.render, Render::Close) {
                self.pending.clear();
                self.closing = true;
                return;
            }
            p.render_into(&mut self.wbuf, self.version);
        }
    }

    fn complete(&mut self, reply: BackendReply) {
        let Some(index) = reply.seq.checked_sub(self.base_seq) else {
            return;
        };
        if let Some(p) = self.pending.get_mut(index as usize) {
            p.fill(reply.part, reply.result);
        }
    }

    /// Requests whose backends did not answer in time get a timeout.
    fn expire_overdue(&mut self) {
        let now = Instant::now();
        for p in self.pending.iter_mut() {
            if p.waiting > 0 && p.deadline <= now {
                p.expire();
            }
        }
    }

    /// Queue a reply already known (`Render::Ready` or `Close`).
    fn push_ready(&mut self, render: Render) {
        self.pending
            .push_back(Pending::ready(render, self.command, Instant::now()));
    }

    /// Queue an error reply (`text` starts with its code: `ERR ...`).
    fn push_error(&mut self, text: &[u8]) {
        let mut b = std::mem::take(&mut self.cmd_buf);
        b.clear();
        out::error(&mut b, text);
        let bytes = b.split().freeze();
        self.cmd_buf = b;
        self.push_ready(Render::Ready(bytes));
    }

    /// Queue a request waiting on `parts` backend replies; returns its
    /// sequence number.
    fn push_waiting(&mut self, render: Render, parts: usize) -> u64 {
        let seq = self.base_seq + self.pending.len() as u64;
        let timeout = self.request_timeout;
        let now = Instant::now();
        let command = self.command;
        self.pending.push_back(Pending::waiting(
            render,
            parts,
            command,
            now,
            // The connection times requests out itself; this is the
            // backstop should a reply never come.
            now + timeout * 2 + std::time::Duration::from_millis(100),
        ));
        seq
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

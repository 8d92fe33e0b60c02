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
mod subscriptions;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use memshift_protocol::resp::reply::{self as out, RespVersion};
use memshift_protocol::resp::request::{RequestLimits, RequestParser, MAX_REQUEST_ARGS};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use crate::backend::Mailbox;
use crate::conn::{self, End, Pushes, Queue, State};
use crate::proxy::Proxy;
use crate::redis::encoding::CasGenerator;
use crate::redis::BackendReply;
use cmd::near_before_reply;
use pending::{NearAfter, Pending, Render, Tally};

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
    /// Its `INFO commandstats` row (set by `dispatch`).
    stats_row: Option<u16>,
    /// `[redis] timeout_ms`, read once per batch of requests.
    request_timeout: std::time::Duration,
    /// The requests read, in the client's order.
    pending: Queue<Pending>,
    /// Where backends send their replies (see `conn::Io::replies`).
    replies: Option<Mailbox>,
    /// The connection engine's state (closing, draining, limits).
    conn: State,
    cas: CasGenerator,
    /// MULTI/WATCH state and the request held on a connection of the
    /// session's own (`cmd::transaction`, `cmd::hold`).
    txn: cmd::TxnState,
    /// Pub/sub: subscriptions and subscriber connections (boxed, and only
    /// while subscribed: most sessions never are).
    subs: Option<Box<subscriptions::Subscriptions>>,
    /// Messages from the subscriber connections (`conn::push`).
    pushes: Pushes,
}

impl RespSession {
    pub fn new(proxy: Arc<Proxy>, id: u64) -> RespSession {
        // A seed space apart from the memcached sessions' (same ids).
        let seed = twox_hash::XxHash3_64::oneshot_with_seed(
            proxy.cas_seed ^ 0x5245_5350,
            &id.to_le_bytes(),
        );
        let authenticated = proxy.settings.load().resp_password.is_none();
        let conn = State::new(&proxy);
        RespSession {
            proxy,
            id,
            lane: crate::workers::lane(id),
            version: RespVersion::Resp2,
            authenticated,
            name: None,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            cmd_buf: BytesMut::new(),
            parser: RequestParser::new(),
            args: Vec::new(),
            command: None,
            stats_row: None,
            request_timeout: std::time::Duration::ZERO,
            pending: Queue::default(),
            replies: None,
            conn,
            cas: CasGenerator::new(seed),
            txn: cmd::TxnState::default(),
            subs: None,
            pushes: Pushes::default(),
        }
    }

    /// Serve the connection until it ends (see `conn`).
    pub async fn run<S>(mut self, stream: S) -> End
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        conn::run(&mut self, stream).await
    }

    /// Parse and dispatch every complete request in the read buffer.
    fn process_input(&mut self) {
        let settings = self.proxy.settings.load();
        let limits = RequestLimits {
            max_bulk_len: settings.resp_max_bulk_len,
            max_args: MAX_REQUEST_ARGS,
            unauthenticated: !self.authenticated,
        };
        self.conn.load_limits(&settings);
        drop(settings);
        self.request_timeout = self.proxy.router.load().redis().request_timeout;
        // A held request (cmd::hold) stops dispatch until it is answered.
        while !self.conn.closing && self.pending.room() && !self.txn.held() {
            match self.parser.parse(&self.rbuf, &limits) {
                Ok(None) => {
                    // Redis' client-query-buffer-limit: close, no reply.
                    if self.rbuf.len() > MAX_QUERY_BYTES.max(limits.max_bulk_len + 1024 * 1024) {
                        let why = "a RESP request over the query buffer limit";
                        self.conn.refuse_input(&mut self.rbuf, why);
                    }
                    return;
                }
                Ok(Some(consumed)) => {
                    let frame = self.rbuf.split_to(consumed).freeze();
                    self.args.clear();
                    self.command = None;
                    self.stats_row = None;
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

    fn complete(&mut self, reply: BackendReply) {
        let size = reply.result.as_ref().map_or(0, |r| r.size());
        self.pending.note_reply(size);
        let Some(p) = self
            .pending
            .index_of(reply.seq)
            .and_then(|i| self.pending.get_mut(i))
        else {
            return; // for a request that already timed out
        };
        if p.fill(reply.part, reply.result, size) {
            let settled = p.waiting == 0;
            self.pending.hold(size);
            if settled {
                self.pending.settled();
            }
        }
    }

    /// Queue a reply already known (`Render::Ready` or `Close`).
    fn push_ready(&mut self, render: Render) {
        if matches!(render, Render::Close) {
            self.conn.closing = true;
        }
        let mut p = Pending::ready(render, self.command, Instant::now());
        p.stats = self.stats_row;
        self.pending.push_ready(p);
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
        let timeout = self.request_timeout;
        let now = Instant::now();
        let command = self.command;
        let mut p = Pending::waiting(
            render,
            parts,
            command,
            now,
            // The connection times requests out itself; this is the
            // backstop should a reply never come.
            now + timeout * 2 + std::time::Duration::from_millis(100),
        );
        p.stats = self.stats_row;
        self.pending.push_waiting(p)
    }
}

impl conn::Protocol for RespSession {
    crate::protocol_basics!(Pending, pushes: pushes);

    fn write_reply(&mut self, mut p: Pending, latency: Option<std::time::Duration>) {
        if !matches!(p.near, NearAfter::Nothing) {
            near_before_reply(&self.proxy, &mut p);
        }
        let tally = Tally {
            stats: &self.proxy.stats.commands,
            nanos: latency.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        };
        p.render_into(&mut self.wbuf, self.version, cmd::is_served, &tally);
    }

    fn room_to_dispatch(&self) -> bool {
        self.pending.room() && !self.txn.held()
    }

    fn may_read(&self) -> bool {
        // Held (cmd::hold): nothing is dispatched, but input is still read
        // (a bounded amount), so that a client leaving mid-BLPOP is noticed.
        if self.txn.held() {
            return self.rbuf.len() < cmd::HELD_INPUT_LIMIT;
        }
        self.pending.room()
    }

    fn before_turn(&mut self) {
        self.hold_tick(); // EXEC, WATCH, blocking calls (cmd::hold)
    }

    fn front(&self) -> crate::metrics::Protocol {
        crate::metrics::Protocol::Resp
    }

    fn give_back(&mut self) {
        // The last request's arguments are slices of the read buffer.
        self.args.clear();
    }

    fn push_type(&self) -> Option<u8> {
        Some(out::push_type(self.version))
    }
}

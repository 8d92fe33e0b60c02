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
//! * `pool`: buffers and reply mailboxes shared by the thread's sessions.
//! * `binary`: connections whose first byte is `0x80` (memcached's binary
//!   protocol), served through the same commands.

mod binary;
mod cmd;
mod long_line;
mod pending;
mod replies;

use std::sync::Arc;
use std::task::Context;

use bytes::{Buf, BytesMut};
use memshift_protocol::memcache::{
    base64, parse_request, unterminated_line_closes, Parsed, ProtocolError, StaleKey,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use crate::backend::Mailbox;
use crate::conn::{self, Queue, State};
use crate::metrics::{command_index, Protocol};
use crate::proxy::Proxy;
use crate::redis::encoding::CasGenerator;
use pending::{Op, Pending, NO_COMMAND};

pub use crate::conn::End as SessionEnd;

/// Largest incomplete request kept in the read buffer (a multi-get line of
/// ~60,000 keys), unless `max_item_size` allows more.
const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

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
    /// The requests read, in the client's order.
    pending: Queue<Pending>,
    /// Command of the request being dispatched (for its `Pending`).
    current_command: u8,
    /// When the input being processed arrived.
    current_start: Instant,
    /// Where backends send their replies (see `conn::Io::replies`).
    replies: Option<Mailbox>,
    /// The connection engine's state (closing, draining, limits).
    conn: State,
    cas: CasGenerator,
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
    /// `server.max_item_size` as of the last input.
    max_item_size: usize,
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
        let near_limits = proxy.settings.load().near_cache;
        let conn = State::new(&proxy);
        Session {
            proxy,
            lane: crate::workers::lane(id),
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            cmd_buf: BytesMut::new(),
            skip: 0,
            pending: Queue::default(),
            current_command: NO_COMMAND,
            near_written: None,
            near_through: false,
            near_unordered: false,
            near_resume: false,
            near_joined: 0,
            near_limits,
            current_start: Instant::now(),
            replies: None,
            conn,
            max_item_size: 0,
            cas: CasGenerator::new(seed),
            line_stalled: false,
            wire: Wire::Undecided,
            binary: binary::BinaryState::default(),
        }
    }

    /// Serve the connection until it ends (see `conn`).
    pub async fn run<S>(mut self, stream: S) -> SessionEnd
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        conn::run(&mut self, stream).await
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
        let now = self.conn.input_time();
        self.current_start = now;
        while !self.conn.closing && self.room_to_dispatch() {
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
                        let why = "a request over every limit";
                        self.conn.refuse_input(&mut self.rbuf, why);
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

    /// The live limits (a reload may have changed them since the last
    /// read), copied into the session for this batch of input.
    fn load_limits(&mut self) -> memshift_protocol::memcache::ParseLimits {
        let settings = self.proxy.settings.load();
        self.conn.load_limits(&settings);
        self.max_item_size = settings.limits.max_item_size;
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

impl conn::Protocol for Session {
    crate::protocol_basics!(Pending);

    fn write_reply(&mut self, pending: Pending, _latency: Option<std::time::Duration>) {
        if self.wire == Wire::Binary {
            self.render_binary(pending);
        } else {
            self.render(pending);
        }
    }

    fn room_to_dispatch(&self) -> bool {
        Session::room_to_dispatch(self)
    }

    fn front(&self) -> Protocol {
        if self.wire == Wire::Binary {
            Protocol::Binary
        } else {
            Protocol::Text
        }
    }

    fn mid_request(&self) -> bool {
        self.skip > 0
    }

    fn hold_output(&self) -> bool {
        // memcached sends nothing while it swallows a rejected body.
        self.wire == Wire::Binary && self.skip > 0
    }

    fn settle_input<R: AsyncRead + Unpin>(&mut self, rd: &mut R, cx: &mut Context<'_>) {
        if self.line_stalled {
            self.settle_stalled_line(rd, cx);
        }
        if self.near_resume {
            // A write-through set was answered: the input held back
            // behind it goes on.
            self.near_resume = false;
            if !self.rbuf.is_empty() {
                self.process_input();
            }
        }
    }

    fn give_back(&mut self) {
        if self.wire == Wire::Binary {
            self.give_back_binary();
        }
    }
}

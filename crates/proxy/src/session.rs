//! One client connection: parse requests from the read buffer, route them
//! to Redis shards, and write the replies back in request order.
//!
//! Requests are dispatched as soon as they are parsed, so a pipelining client
//! has many in flight at once. Each request gets a `Pending` entry in a queue
//! that mirrors the client's order; backend replies arrive (from any shard, in
//! any order) on the session's reply channel tagged with the request's
//! sequence number, and the front of the queue is written out as soon as it is
//! complete.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes, BytesMut};
use memshift_protocol::memcache::{
    parse_request, reply, ArithCommand, Keys, Parsed, ProtocolError, Request, RetrievalCommand,
    StorageCommand,
};
use memshift_protocol::resp::Frame;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::metrics::{command_index, Backend};
use crate::proxy::{Backends, Proxy};
use crate::redis::encoding::{self, CasGenerator};
use crate::redis::translate::{self, ArithOutcome, Expiry, WriteOutcome};
use crate::redis::{BackendError, BackendReply, BackendRequest, ReplyTo};
use crate::stats::bump;

/// Requests waiting on Redis before the session stops reading from the client.
const MAX_WAITING: usize = 1024;
/// Output buffered before replies stay queued instead (the client is not reading).
const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
const READ_CHUNK: usize = 16 * 1024;

type PartResult = Result<Frame, BackendError>;

const NO_COMMAND: u8 = u8::MAX;

/// How the replies of a retrieval's backend requests map back to its keys.
#[derive(Debug)]
enum RetrievalPlan {
    /// One key, one GET/GETEX (part 0).
    Single,
    /// gat/gats: one GETEX per key, part i answers key i.
    PerKey,
    /// get/gets: one MGET per shard; key i is element `index` of part `part`.
    Grouped(Vec<(u32, u32)>),
}

#[derive(Debug)]
enum Op {
    /// Reply already known.
    Ready(&'static [u8]),
    ReadyBytes(Bytes),
    /// Nothing to write (noreply, or an error memcached stays silent on).
    Silent,
    /// Write everything before it, then close (quit, or a fatal parse error).
    Close,
    Retrieval {
        keys: Keys<Bytes>,
        with_cas: bool,
        plan: RetrievalPlan,
    },
    Storage {
        command: StorageCommand,
        noreply: bool,
    },
    Arith {
        command: ArithCommand,
        noreply: bool,
    },
    Delete {
        noreply: bool,
    },
    Touch {
        noreply: bool,
    },
    FlushAll {
        noreply: bool,
    },
}

#[derive(Debug)]
struct Pending {
    op: Op,
    /// Index into `metrics::COMMANDS`, or `NO_COMMAND` for input rejected by
    /// the parser.
    command: u8,
    started: Instant,
    deadline: Instant,
    waiting: u32,
    results: Results,
}

#[derive(Debug)]
enum Results {
    None,
    One(Option<PartResult>),
    Many(Vec<Option<PartResult>>),
}

impl Results {
    fn with_parts(parts: u32) -> Results {
        match parts {
            0 => Results::None,
            1 => Results::One(None),
            n => Results::Many((0..n).map(|_| None).collect()),
        }
    }

    fn set(&mut self, part: u32, result: PartResult) -> bool {
        let slot = match self {
            Results::None => return false,
            Results::One(slot) if part == 0 => slot,
            Results::One(_) => return false,
            Results::Many(v) => match v.get_mut(part as usize) {
                Some(slot) => slot,
                None => return false,
            },
        };
        if slot.is_some() {
            return false;
        }
        *slot = Some(result);
        true
    }

    fn fill_missing(&mut self, err: BackendError) {
        match self {
            Results::None => {}
            Results::One(slot) => {
                slot.get_or_insert(Err(err));
            }
            Results::Many(v) => {
                for slot in v.iter_mut() {
                    slot.get_or_insert(Err(err));
                }
            }
        }
    }

    fn get(&self, part: u32) -> Option<&PartResult> {
        match self {
            Results::None => None,
            Results::One(slot) => slot.as_ref().filter(|_| part == 0),
            Results::Many(v) => v.get(part as usize).and_then(|s| s.as_ref()),
        }
    }
}

/// Why a session ended.
#[derive(Debug)]
pub enum SessionEnd {
    ClientClosed,
    Quit,
    ProtocolClose,
    IdleTimeout,
    SlowConsumer,
    Shutdown,
    Io(std::io::Error),
}

pub struct Session {
    proxy: Arc<Proxy>,
    /// Which connection of each shard this session uses (keeps its requests
    /// to one shard in order).
    lane: usize,
    rbuf: BytesMut,
    wbuf: BytesMut,
    cmd_buf: BytesMut,
    /// Bytes of a rejected data block still to discard as they arrive.
    skip: usize,
    pending: VecDeque<Pending>,
    /// Sequence number of `pending[0]`.
    base_seq: u64,
    /// Command of the request being dispatched (for its `Pending`).
    current_command: u8,
    /// When the input being processed arrived.
    current_start: Instant,
    waiting: usize,
    reply_tx: mpsc::UnboundedSender<BackendReply>,
    reply_rx: mpsc::UnboundedReceiver<BackendReply>,
    cas: CasGenerator,
    closing: bool,
}

impl Session {
    pub fn new(proxy: Arc<Proxy>, id: u64) -> Session {
        let (reply_tx, reply_rx) = mpsc::unbounded_channel();
        let seed = twox_hash::XxHash3_64::oneshot_with_seed(proxy.cas_seed, &id.to_le_bytes());
        Session {
            proxy,
            lane: id as usize,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            cmd_buf: BytesMut::new(),
            skip: 0,
            pending: VecDeque::new(),
            base_seq: 0,
            current_command: NO_COMMAND,
            current_start: Instant::now(),
            waiting: 0,
            reply_tx,
            reply_rx,
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
        let idle = self.proxy.idle_timeout;
        let mut idle_deadline = idle.map(|d| Instant::now() + d);
        let mut read_closed = false;
        loop {
            self.flush_ready();
            if self.pending.len() > self.proxy.max_pending_replies {
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
            if reading && self.rbuf.capacity() - self.rbuf.len() < 1024 {
                self.rbuf.reserve(READ_CHUNK);
            }
            let front_deadline = self
                .pending
                .front()
                .filter(|p| p.waiting > 0)
                .map(|p| p.deadline);
            let idle_at = idle_deadline.filter(|_| self.pending.is_empty() && !self.closing);
            tokio::select! {
                biased;
                reply = self.reply_rx.recv() => {
                    if let Some(reply) = reply {
                        self.complete(reply);
                        while let Ok(reply) = self.reply_rx.try_recv() {
                            self.complete(reply);
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
                        idle_deadline = idle.map(|d| Instant::now() + d);
                        self.process_input();
                    }
                    Err(e) => return SessionEnd::Io(e),
                },
                _ = sleep_until_opt(front_deadline), if front_deadline.is_some() => {
                    self.expire_front();
                }
                _ = sleep_until_opt(idle_at), if idle_at.is_some() => {
                    return SessionEnd::IdleTimeout;
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
        let limits = self.proxy.limits;
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
                    // Re-anchor the request's slices on a frozen copy of the
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
                Parsed::Incomplete => return,
                Parsed::Invalid(ProtocolError::Reply { reply, skip }) => {
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
            results: Results::None,
        });
    }

    fn seq_of_next(&self) -> u64 {
        self.base_seq + self.pending.len() as u64
    }

    fn reply_to(&self, seq: u64, part: u32) -> ReplyTo {
        ReplyTo {
            tx: self.reply_tx.clone(),
            seq,
            part,
        }
    }

    /// Send one encoded command (in `cmd_buf`) to the shard owning `key`.
    fn send_cmd(&mut self, backends: &Backends, shard: usize, seq: u64, part: u32) {
        let cmd = self.cmd_buf.split().freeze();
        let reply = self.reply_to(seq, part);
        backends.shards[shard].send(self.lane, BackendRequest { cmd, reply });
    }

    fn push_waiting(&mut self, op: Op, parts: u32, deadline: Instant) {
        self.waiting += 1;
        self.pending.push_back(Pending {
            op,
            command: self.current_command,
            started: self.current_start,
            deadline,
            waiting: parts,
            results: Results::with_parts(parts),
        });
    }

    fn dispatch(&mut self, request: Request<Bytes>, now: Instant) {
        let proxy = self.proxy.clone();
        let backends = proxy.backends.load();
        let stats = &proxy.stats;
        let seq = self.seq_of_next();
        let deadline = now + backends.request_timeout;
        match request {
            Request::Retrieval {
                command,
                exptime,
                keys,
            } => {
                stats
                    .cmd_get
                    .fetch_add(keys.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let touch = matches!(command, RetrievalCommand::Gat | RetrievalCommand::Gats);
                if touch {
                    stats
                        .cmd_touch
                        .fetch_add(keys.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
                let expiry = Expiry::from_exptime(exptime, unix_now());
                let with_cas = command.returns_cas();
                if keys.len() == 1 {
                    let key = keys.iter().next().unwrap_or_default();
                    let shard = backends.locate(key);
                    if touch {
                        translate::get_and_touch(&mut self.cmd_buf, key, expiry);
                    } else {
                        translate::get(&mut self.cmd_buf, key);
                    }
                    self.send_cmd(&backends, shard, seq, 0);
                    let plan = RetrievalPlan::Single;
                    self.push_waiting(
                        Op::Retrieval {
                            keys,
                            with_cas,
                            plan,
                        },
                        1,
                        deadline,
                    );
                } else if touch {
                    let mut parts = 0u32;
                    let key_list: Vec<&[u8]> = keys.iter().collect();
                    for key in key_list {
                        let shard = backends.locate(key);
                        translate::get_and_touch(&mut self.cmd_buf, key, expiry);
                        self.send_cmd(&backends, shard, seq, parts);
                        parts += 1;
                    }
                    self.push_waiting(
                        Op::Retrieval {
                            keys,
                            with_cas,
                            plan: RetrievalPlan::PerKey,
                        },
                        parts,
                        deadline,
                    );
                } else {
                    // Group keys by shard: one MGET per shard, all at once.
                    let shard_count = backends.shards.len();
                    let mut by_shard: Vec<Vec<&[u8]>> = vec![Vec::new(); shard_count];
                    let mut slots = Vec::with_capacity(keys.len());
                    for key in keys.iter() {
                        let shard = backends.locate(key);
                        slots.push((shard as u32, by_shard[shard].len() as u32));
                        by_shard[shard].push(key);
                    }
                    // Parts are numbered by the shards actually used.
                    let mut part_of_shard = vec![u32::MAX; shard_count];
                    let mut parts = 0u32;
                    for (shard, shard_keys) in by_shard.iter().enumerate() {
                        if shard_keys.is_empty() {
                            continue;
                        }
                        part_of_shard[shard] = parts;
                        translate::mget(&mut self.cmd_buf, shard_keys.iter().copied());
                        let cmd = self.cmd_buf.split().freeze();
                        let reply = self.reply_to(seq, parts);
                        backends.shards[shard].send(self.lane, BackendRequest { cmd, reply });
                        parts += 1;
                    }
                    for slot in slots.iter_mut() {
                        slot.0 = part_of_shard[slot.0 as usize];
                    }
                    drop(by_shard);
                    self.push_waiting(
                        Op::Retrieval {
                            keys,
                            with_cas,
                            plan: RetrievalPlan::Grouped(slots),
                        },
                        parts,
                        deadline,
                    );
                }
            }
            Request::Storage {
                command,
                key,
                flags,
                exptime,
                cas,
                data,
                noreply,
            } => {
                bump(&stats.cmd_set);
                let expiry = Expiry::from_exptime(exptime, unix_now());
                let new_cas = self.cas.next_cas();
                match command {
                    StorageCommand::Set | StorageCommand::Add | StorageCommand::Replace => {
                        translate::store(
                            &mut self.cmd_buf,
                            command,
                            &key,
                            flags,
                            new_cas,
                            &data,
                            expiry,
                        )
                    }
                    StorageCommand::Cas => translate::compare_and_swap(
                        &mut self.cmd_buf,
                        &key,
                        cas,
                        flags,
                        new_cas,
                        &data,
                        expiry,
                    ),
                    StorageCommand::Append | StorageCommand::Prepend => translate::concat(
                        &mut self.cmd_buf,
                        &key,
                        command == StorageCommand::Append,
                        new_cas,
                        &data,
                        proxy.limits.max_item_size,
                    ),
                }
                let shard = backends.locate(&key);
                self.send_cmd(&backends, shard, seq, 0);
                self.push_waiting(Op::Storage { command, noreply }, 1, deadline);
            }
            Request::Arith {
                command,
                key,
                delta,
                noreply,
            } => {
                let new_cas = self.cas.next_cas();
                translate::arith(&mut self.cmd_buf, &key, command, delta, new_cas);
                let shard = backends.locate(&key);
                self.send_cmd(&backends, shard, seq, 0);
                self.push_waiting(Op::Arith { command, noreply }, 1, deadline);
            }
            Request::Delete { key, noreply } => {
                translate::delete(&mut self.cmd_buf, &key);
                let shard = backends.locate(&key);
                self.send_cmd(&backends, shard, seq, 0);
                self.push_waiting(Op::Delete { noreply }, 1, deadline);
            }
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                bump(&stats.cmd_touch);
                let expiry = Expiry::from_exptime(exptime, unix_now());
                translate::touch(&mut self.cmd_buf, &key, expiry);
                let shard = backends.locate(&key);
                self.send_cmd(&backends, shard, seq, 0);
                self.push_waiting(Op::Touch { noreply }, 1, deadline);
            }
            Request::FlushAll { delay, noreply } => {
                if !proxy.allow_flush_all {
                    self.push_ready(Op::Ready(b"CLIENT_ERROR flush_all not allowed\r\n"));
                    return;
                }
                bump(&stats.cmd_flush);
                if delay > 0 {
                    // memcached invalidates everything when the delay has
                    // passed; do the same with a timer.
                    let flusher = proxy.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(std::time::Duration::from_secs(delay as u64)).await;
                        flusher.flush_all_detached().await;
                    });
                    self.push_ready(if noreply {
                        Op::Silent
                    } else {
                        Op::Ready(reply::OK)
                    });
                    return;
                }
                let shards = backends.shards.len() as u32;
                for shard in 0..backends.shards.len() {
                    translate::flush(&mut self.cmd_buf);
                    self.send_cmd(&backends, shard, seq, shard as u32);
                }
                self.push_waiting(Op::FlushAll { noreply }, shards, deadline);
            }
            Request::Version => {
                let mut out = BytesMut::with_capacity(64);
                reply::version(&mut out, crate::stats::VERSION);
                self.push_ready(Op::ReadyBytes(out.freeze()));
            }
            Request::Verbosity { noreply } => self.push_ready(if noreply {
                Op::Silent
            } else {
                Op::Ready(reply::OK)
            }),
            Request::Stats { group } => {
                let op = match group.as_deref() {
                    None => {
                        let mut out = BytesMut::with_capacity(2048);
                        proxy.stats.render(&proxy.facts, &mut out);
                        Op::ReadyBytes(out.freeze())
                    }
                    Some(group) => stats_group(group),
                };
                self.push_ready(op);
            }
            Request::Quit => self.push_ready(Op::Close),
        }
    }

    fn complete(&mut self, reply: BackendReply) {
        let Some(index) = reply.seq.checked_sub(self.base_seq) else {
            return; // for a request that already timed out
        };
        let Some(pending) = self.pending.get_mut(index as usize) else {
            return;
        };
        if pending.waiting > 0 && pending.results.set(reply.part, reply.result) {
            pending.waiting -= 1;
            if pending.waiting == 0 {
                self.waiting -= 1;
            }
        }
    }

    /// The front request ran out of time: answer what is missing with a timeout.
    fn expire_front(&mut self) {
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
                self.closing = true;
                return;
            }
            self.render(pending);
        }
    }

    fn render(&mut self, pending: Pending) {
        let stats = &self.proxy.stats;
        let metrics = &self.proxy.metrics;
        let out = &mut self.wbuf;
        match pending.op {
            Op::Ready(line) => out.extend_from_slice(line),
            Op::ReadyBytes(bytes) => out.extend_from_slice(&bytes),
            Op::Silent | Op::Close => {}
            Op::Retrieval {
                keys,
                with_cas,
                plan,
            } => {
                // A single key that failed is an error; for several keys, the
                // failed ones count as misses so the others still get served,
                // unless nothing could be served at all.
                let mut failures = 0usize;
                let mut first_error = None;
                let mut item_of = |part: u32, index: Option<u32>| -> Option<encoding::Item> {
                    match pending.results.get(part) {
                        Some(Ok(frame)) => {
                            let value = match (frame, index) {
                                (Frame::Bulk(v), None) => v,
                                (Frame::Array(items), Some(i)) => match items.get(i as usize) {
                                    Some(Frame::Bulk(v)) => v,
                                    _ => return None,
                                },
                                _ => return None,
                            };
                            encoding::decode(value)
                        }
                        Some(Err(e)) => {
                            failures += 1;
                            first_error.get_or_insert(*e);
                            None
                        }
                        None => None,
                    }
                };
                let mut body = BytesMut::new();
                for (i, key) in keys.iter().enumerate() {
                    let (part, index) = match &plan {
                        RetrievalPlan::Single => (0, None),
                        RetrievalPlan::PerKey => (i as u32, None),
                        RetrievalPlan::Grouped(slots) => match slots.get(i) {
                            Some(&(part, index)) => (part, Some(index)),
                            None => continue,
                        },
                    };
                    match item_of(part, index) {
                        Some(item) => {
                            bump(&stats.get_hits);
                            metrics.get_hit(Backend::Redis);
                            reply::value(
                                &mut body,
                                key,
                                item.flags,
                                &item.data,
                                with_cas.then_some(item.cas),
                            );
                        }
                        None => {
                            bump(&stats.get_misses);
                            metrics.get_miss(Backend::Redis);
                        }
                    }
                }
                let total_parts = match &pending.results {
                    Results::None => 0,
                    Results::One(_) => 1,
                    Results::Many(v) => v.len(),
                };
                match first_error {
                    Some(e) if failures >= total_parts => out.extend_from_slice(e.reply_line()),
                    _ => {
                        out.extend_from_slice(&body);
                        out.extend_from_slice(reply::END);
                    }
                }
            }
            Op::Storage { command, noreply } => {
                let outcome = match pending.results.get(0) {
                    Some(Ok(frame)) => Ok(translate::storage_outcome(command, frame)),
                    Some(Err(e)) => Err(*e),
                    None => Err(BackendError::Timeout),
                };
                if let Ok(o) = outcome {
                    if command == StorageCommand::Cas {
                        match o {
                            WriteOutcome::Stored => bump(&stats.cas_hits),
                            WriteOutcome::Exists => bump(&stats.cas_badval),
                            WriteOutcome::NotFound => bump(&stats.cas_misses),
                            _ => {}
                        }
                    }
                }
                if !noreply {
                    write_outcome(out, outcome);
                }
            }
            Op::Arith { command, noreply } => {
                let (hits, misses) = match command {
                    ArithCommand::Incr => (&stats.incr_hits, &stats.incr_misses),
                    ArithCommand::Decr => (&stats.decr_hits, &stats.decr_misses),
                };
                let line: Option<&[u8]> = match pending.results.get(0) {
                    Some(Ok(frame)) => match translate::arith_outcome(frame) {
                        ArithOutcome::Value(v) => {
                            bump(hits);
                            if !noreply {
                                out.extend_from_slice(v);
                                out.extend_from_slice(b"\r\n");
                            }
                            None
                        }
                        ArithOutcome::NotFound => {
                            bump(misses);
                            Some(reply::NOT_FOUND)
                        }
                        ArithOutcome::NonNumeric => Some(
                            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
                        ),
                        ArithOutcome::Failed => Some(WriteOutcome::Failed.line()),
                    },
                    Some(Err(e)) => Some(e.reply_line()),
                    None => Some(BackendError::Timeout.reply_line()),
                };
                if let (Some(line), false) = (line, noreply) {
                    out.extend_from_slice(line);
                }
            }
            Op::Delete { noreply } => {
                let outcome = one_outcome(&pending.results, translate::delete_outcome);
                match outcome {
                    Ok(WriteOutcome::Deleted) => bump(&stats.delete_hits),
                    Ok(WriteOutcome::NotFound) => bump(&stats.delete_misses),
                    _ => {}
                }
                if !noreply {
                    write_outcome(out, outcome);
                }
            }
            Op::Touch { noreply } => {
                let outcome = one_outcome(&pending.results, translate::touch_outcome);
                match outcome {
                    Ok(WriteOutcome::Touched) => bump(&stats.touch_hits),
                    Ok(WriteOutcome::NotFound) => bump(&stats.touch_misses),
                    _ => {}
                }
                if !noreply {
                    write_outcome(out, outcome);
                }
            }
            Op::FlushAll { noreply } => {
                if !noreply {
                    let parts = match &pending.results {
                        Results::Many(v) => v.len() as u32,
                        Results::One(_) => 1,
                        Results::None => 0,
                    };
                    let failed = (0..parts).find_map(|p| match pending.results.get(p) {
                        Some(Ok(Frame::Simple(_))) => None,
                        Some(Err(e)) => Some(e.reply_line()),
                        _ => Some(WriteOutcome::Failed.line()),
                    });
                    out.extend_from_slice(failed.unwrap_or(reply::OK));
                }
            }
        }
    }
}

fn one_outcome(
    results: &Results,
    interpret: impl Fn(&Frame) -> WriteOutcome,
) -> Result<WriteOutcome, BackendError> {
    match results.get(0) {
        Some(Ok(frame)) => Ok(interpret(frame)),
        Some(Err(e)) => Err(*e),
        None => Err(BackendError::Timeout),
    }
}

fn write_outcome(out: &mut BytesMut, outcome: Result<WriteOutcome, BackendError>) {
    out.extend_from_slice(match outcome {
        Ok(o) => o.line(),
        Err(e) => e.reply_line(),
    });
}

/// `stats <group>`: what makes sense for a proxy, in memcached's format.
fn stats_group(group: &[u8]) -> Op {
    match group {
        // A proxy holds no items or slabs: report the empty groups the way an
        // empty memcached does, so stats scrapers keep working.
        b"items" | b"sizes" => Op::Ready(reply::END),
        b"slabs" => Op::Ready(b"STAT active_slabs 0\r\nSTAT total_malloced 0\r\nEND\r\n"),
        b"settings" => {
            let mut out = BytesMut::new();
            reply::stat(&mut out, "item_size_max", "see memshift config");
            out.extend_from_slice(reply::END);
            Op::ReadyBytes(out.freeze())
        }
        b"conns" => Op::Ready(reply::END),
        b"reset" => Op::Ready(b"RESET\r\n"),
        _ => Op::Ready(b"ERROR\r\n"),
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

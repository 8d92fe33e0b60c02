//! A connection speaking memcached's binary protocol (its first byte was
//! `0x80`; memcached's rule: it stays binary for its whole life).
//!
//! Each binary request is turned into the text command that does the same
//! thing (`gets`/`gats`, `mg`/`ms`/`md`/`ma`, `flush_all`/`version`/`stats`/
//! `mn`) and
//! dispatched through the very path a text client's request takes: same
//! router, phases, Redis item layout, shadow writes and near cache. Its
//! reply is the binary response memcached 1.6.18 sends, with the
//! request's opcode and opaque, the quiet opcodes' silences and
//! memcached's error bodies:
//!
//! * written straight from the decoded backend answer (`direct`, through
//!   `cmd::Sink`) for the hot cases: the Get family (Get/GetK/GAT/GATK,
//!   +Q) hit or miss, and the outcome of Set/Add/Replace/Append/Prepend
//!   (+Q, with CAS) and Delete (+Q) on Redis. Rendering their text and
//!   parsing it back made binary ~0.9x text's throughput at pipeline 16
//!   (closed loop, 90/10 get/set, 100 B values; perf: memmove 7.7 %,
//!   `reply::parse_u64`, the text renderer);
//! * rendered as text into a scratch buffer and re-encoded (`reply`) for
//!   everything else: Touch, base64 keys, Increment/Decrement, Stat,
//!   Version, Flush, Noop, and any backend error or forwarded reply of
//!   the hot cases. Rare, and memcached's quirks live in one place.
//!
//! Binary-only state (opcode, opaque, key for GetK) waits in `frames`, in
//! request order beside the session's `pending` queue.
//!
//! * `get`: Get/GetK/GAT/GATK (+Q) and Touch.
//! * `store`: Set/Add/Replace/Append/Prepend (+Q).
//! * `arith_delete`: Increment/Decrement/Delete (+Q).
//! * `info`: Noop, Version, Stat, Flush, Quit.
//! * `sasl`: SASL List Mechs / Auth / Step (see docs/binary.md).
//! * `direct`: the hot responses, from the decoded answer.
//! * `reply`: the others, reading the text reply the text path rendered.

mod arith_delete;
mod direct;
#[cfg(test)]
mod direct_tests;
mod get;
mod info;
mod reply;
mod sasl;
mod store;

use std::collections::VecDeque;

use bytes::{Buf, Bytes, BytesMut};
use memshift_protocol::memcache::binary::{self, response, Command, Opcode, Request, Status};
use memshift_protocol::memcache::{base64, MetaCommand, MetaFlags};
use tokio::time::Instant;

use super::pending::{Op, Pending, NO_COMMAND};
use super::Session;
use crate::conn::pool::{self, Buffer};
use crate::metrics::command_index;

/// `scratch` gets this much more room when less than `SCRATCH_LOW` is left
/// (tokens are split off it: one allocation per many requests).
const SCRATCH_CHUNK: usize = 4 * 1024;
const SCRATCH_LOW: usize = 512;

/// The binary side of a session.
#[derive(Default)]
pub(super) struct BinaryState {
    /// One per dispatched request, in order (matched by `seq`).
    frames: VecDeque<Frame>,
    /// The text reply of the request being rendered.
    text: BytesMut,
    /// Meta flag tokens (and base64 keys) are written here, then split off.
    scratch: BytesMut,
    /// SASL: this connection authenticated.
    authenticated: bool,
}

/// What a binary response needs besides the text reply.
#[derive(Debug)]
struct Frame {
    seq: u64,
    /// The opcode as sent (echoed).
    opcode: u8,
    opaque: u32,
    quiet: bool,
    /// GetK/GATK: the key to send back.
    key: Bytes,
    answer: Answer,
}

/// How to read the text reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// `mg`: a value, with the key when asked.
    Get {
        with_key: bool,
    },
    /// `gets`/`gats` of one key (the classic path: a plain GET/GETEX on
    /// Redis, the near cache): `VALUE ...` or `END`.
    Value {
        with_key: bool,
    },
    /// `mg` without `v`: flags only.
    Touch,
    /// `ms`: NS means this status.
    Store {
        not_stored: Status,
    },
    Delete,
    Arith,
    Flush,
    Noop,
    Version,
    Stat,
    /// Answered here: an error.
    Error(Status),
    /// Answered here: success with this body.
    Body(&'static [u8]),
}

impl Session {
    /// Parse and dispatch every complete binary request in the read buffer.
    pub(super) fn process_binary_input(&mut self) {
        let limits = self.load_limits();
        let sasl = self.proxy.sasl.is_some();
        let now = self.conn.input_time();
        while !self.conn.closing && self.room_to_dispatch() {
            if !self.skip_refused() {
                return;
            }
            if self.rbuf.is_empty() {
                return;
            }
            if sasl && !self.binary.authenticated {
                match binary::read_header(&self.rbuf) {
                    Ok(None) => return,
                    Ok(Some(h)) => {
                        let allowed = Opcode::from_u8(h.opcode)
                            .is_some_and(|op| op.is_sasl() || op == Opcode::Version);
                        if !allowed {
                            // memcached: Auth Error, then close.
                            self.push_local(h.opcode, h.opaque, Answer::Error(Status::AuthError));
                            self.rbuf.clear();
                            self.push_ready(Op::Close);
                            return;
                        }
                    }
                    Err(e) => {
                        self.reject(e);
                        return;
                    }
                }
            }
            match binary::parse(&self.rbuf, &limits) {
                Ok(Some((request, consumed))) => {
                    let base = self.rbuf.as_ptr() as usize;
                    let located = request.map(|s| (s.as_ptr() as usize - base, s.len()));
                    let frame = self.rbuf.split_to(consumed).freeze();
                    let request = located.map(|(off, len)| frame.slice(off..off + len));
                    self.current_start = now;
                    self.dispatch_binary(request, now);
                    self.current_command = NO_COMMAND;
                }
                Ok(None) => return,
                Err(e) => {
                    if self.reject(e) {
                        return;
                    }
                }
            }
        }
    }

    /// Answer input the codec rejected; true when the connection closes.
    fn reject(&mut self, e: binary::Error) -> bool {
        if let Some(range) = e.stale_key() {
            // memcached drops the old item of a Set it refused.
            if let Some(key) = self.rbuf.get(range) {
                let key = Bytes::copy_from_slice(key);
                self.delete_quietly(key);
            }
        }
        if let (Some(h), Some(status)) = (e.header(), e.status()) {
            let (opcode, opaque) = (h.opcode, h.opaque);
            self.push_local(opcode, opaque, Answer::Error(status));
        }
        if e.closes() {
            self.rbuf.clear();
            self.push_ready(Op::Close);
            return true;
        }
        let n = e.consumed().min(self.rbuf.len());
        self.rbuf.advance(n);
        self.skip = e.swallow();
        false
    }

    fn dispatch_binary(&mut self, request: Request<Bytes>, now: Instant) {
        self.current_command = command_index(metric_name(&request)).map_or(NO_COMMAND, |i| i as u8);
        let (opcode, opaque, quiet) = (
            request.header.opcode,
            request.header.opaque,
            request.quiet(),
        );
        let cas = request.header.cas;
        let key = request.key;
        match request.command {
            Command::Get { with_key, touch } => {
                let reply_key = if with_key { key.clone() } else { Bytes::new() };
                if needs_base64(&key) {
                    self.push_frame(opcode, opaque, quiet, reply_key, Answer::Get { with_key });
                    self.binary_get(key, touch, true, now);
                } else {
                    self.push_frame(opcode, opaque, quiet, reply_key, Answer::Value { with_key });
                    self.binary_classic_get(key, touch, now);
                }
            }
            Command::Touch { exptime } => {
                self.push_frame(opcode, opaque, quiet, Bytes::new(), Answer::Touch);
                self.binary_get(key, Some(exptime), false, now);
            }
            Command::Store {
                mode,
                flags,
                exptime,
                value,
            } => {
                let answer = store::answer(mode, cas);
                self.push_frame(opcode, opaque, quiet, Bytes::new(), answer);
                self.binary_store(key, mode, flags, exptime, cas, value, now);
            }
            Command::Concat { append, value } => {
                let answer = Answer::Store {
                    not_stored: Status::NotStored,
                };
                self.push_frame(opcode, opaque, quiet, Bytes::new(), answer);
                self.binary_concat(key, append, cas, value, now);
            }
            Command::Delete => {
                self.push_frame(opcode, opaque, quiet, Bytes::new(), Answer::Delete);
                self.binary_delete(key, cas, now);
            }
            Command::Arith {
                decrement,
                delta,
                initial,
                exptime,
            } => {
                self.push_frame(opcode, opaque, quiet, Bytes::new(), Answer::Arith);
                self.binary_arith(key, decrement, delta, initial, exptime, cas, now);
            }
            Command::Flush { delay } => {
                self.push_frame(opcode, opaque, quiet, Bytes::new(), Answer::Flush);
                self.binary_flush(delay, now);
            }
            Command::Noop => {
                self.push_frame(opcode, opaque, quiet, Bytes::new(), Answer::Noop);
                self.dispatch(memshift_protocol::memcache::Request::MetaNoop, now);
            }
            Command::Version => {
                self.push_frame(opcode, opaque, quiet, Bytes::new(), Answer::Version);
                self.dispatch(memshift_protocol::memcache::Request::Version, now);
            }
            Command::Stat => self.binary_stat(opcode, opaque, &key, now),
            Command::Quit => {
                if !quiet {
                    self.push_local(opcode, opaque, Answer::Body(b""));
                }
                self.push_ready(Op::Close);
            }
            Command::SaslListMechs => self.sasl_list_mechs(opcode, opaque),
            Command::SaslAuth { data } => self.sasl_auth(opcode, opaque, &key, &data, false),
            Command::SaslStep { data } => self.sasl_auth(opcode, opaque, &key, &data, true),
        }
    }

    /// Remember how to answer the request about to be queued.
    fn push_frame(&mut self, opcode: u8, opaque: u32, quiet: bool, key: Bytes, answer: Answer) {
        let seq = self.next_seq();
        self.binary.frames.push_back(Frame {
            seq,
            opcode,
            opaque,
            quiet,
            key,
            answer,
        });
    }

    /// A response known now.
    fn push_local(&mut self, opcode: u8, opaque: u32, answer: Answer) {
        self.push_frame(opcode, opaque, false, Bytes::new(), answer);
        self.push_ready(Op::Silent);
    }

    /// Dispatch a meta command built here (the flags already decoded,
    /// `tokens` the flag text the reply is rendered from).
    fn dispatch_meta_for_binary(
        &mut self,
        command: MetaCommand,
        key: Bytes,
        data: Bytes,
        mut flags: MetaFlags,
        now: Instant,
    ) {
        // Keys that are not safe on a text line travel in base64 (`b`).
        let key = if needs_base64(&key) {
            flags.base64 = true;
            self.binary.scratch.extend_from_slice(b" b");
            let mut encoded = Vec::with_capacity(key.len() * 4 / 3 + 4);
            base64::encode_into(&mut encoded, &key);
            Bytes::from(encoded)
        } else {
            key
        };
        let tokens = self.binary.scratch.split().freeze();
        self.dispatch(
            memshift_protocol::memcache::Request::Meta {
                command,
                key,
                tokens,
                data,
                flags,
            },
            now,
        );
    }

    /// Room for the tokens of the next request.
    fn reserve_scratch(&mut self) {
        let scratch = &mut self.binary.scratch;
        if scratch.capacity() == 0 {
            *scratch = pool::take_buffer(Buffer::Command, SCRATCH_CHUNK);
        } else if scratch.capacity() - scratch.len() < SCRATCH_LOW {
            scratch.reserve(SCRATCH_CHUNK);
        }
    }

    /// Quiet: the binary buffers go back to the thread's pool, as the
    /// session's own do (an idle connection holds none).
    pub(super) fn give_back_binary(&mut self) {
        let state = &mut self.binary;
        pool::give_buffer(Buffer::Command, std::mem::take(&mut state.scratch));
        pool::give_buffer(Buffer::Write, std::mem::take(&mut state.text));
        if state.frames.capacity() > 64 {
            state.frames = VecDeque::new();
        }
    }

    /// Render a finished request as its binary response: directly for
    /// the hot cases (`direct`), else through its text reply.
    pub(super) fn render_binary(&mut self, pending: Pending) {
        let seq = self.pending.last_popped_seq();
        while self.binary.frames.front().is_some_and(|f| f.seq < seq) {
            self.binary.frames.pop_front();
        }
        let frame = match self.binary.frames.front() {
            Some(f) if f.seq == seq => self.binary.frames.pop_front(),
            _ => None,
        };
        let pending = match &frame {
            Some(f) if direct::answers(f.answer) => match self.render_direct(f, pending) {
                Some(pending) => pending,
                None => return,
            },
            _ => pending,
        };
        // The text reply goes to the scratch buffer, then is re-encoded.
        if self.binary.text.capacity() == 0 {
            self.binary.text = pool::take_buffer(Buffer::Write, crate::conn::FIRST_WRITE);
        }
        std::mem::swap(&mut self.wbuf, &mut self.binary.text);
        self.render(pending);
        std::mem::swap(&mut self.wbuf, &mut self.binary.text);
        if let Some(frame) = frame {
            let text = std::mem::take(&mut self.binary.text);
            reply::encode(&mut self.wbuf, &frame, &text);
            self.binary.text = text;
        }
        self.binary.text.clear();
    }
}

/// A key memcached's text tokenizer would split or cut (space, control
/// bytes, DEL): it goes to the meta path in base64.
fn needs_base64(key: &[u8]) -> bool {
    key.iter().any(|&b| b <= b' ' || b == 0x7f)
}

/// The `command` label a binary request counts under.
fn metric_name(request: &Request<Bytes>) -> &'static str {
    match (&request.command, request.header.cas) {
        (Command::Get { touch: None, .. }, _) => "get",
        (Command::Get { touch: Some(_), .. }, _) => "gat",
        (Command::Touch { .. }, _) => "touch",
        (Command::Store { .. }, c) if c != 0 => "cas",
        (Command::Store { mode, .. }, _) => match mode {
            binary::StoreMode::Set => "set",
            binary::StoreMode::Add => "add",
            binary::StoreMode::Replace => "replace",
        },
        (Command::Concat { append: true, .. }, _) => "append",
        (Command::Concat { append: false, .. }, _) => "prepend",
        (Command::Delete, _) => "delete",
        (
            Command::Arith {
                decrement: false, ..
            },
            _,
        ) => "incr",
        (
            Command::Arith {
                decrement: true, ..
            },
            _,
        ) => "decr",
        (Command::Flush { .. }, _) => "flush_all",
        (Command::Noop, _) => "mn",
        (Command::Version, _) => "version",
        (Command::Stat, _) => "stats",
        (Command::Quit, _) => "quit",
        _ => "",
    }
}

/// Write a local answer (no text reply involved).
fn encode_local(buf: &mut BytesMut, frame: &Frame) -> bool {
    match frame.answer {
        Answer::Error(status) => response::put_error(buf, frame.opcode, frame.opaque, status),
        Answer::Body(body) => {
            response::put_body(buf, frame.opcode, frame.opaque, Status::NoError, 0, body)
        }
        _ => return false,
    }
    true
}

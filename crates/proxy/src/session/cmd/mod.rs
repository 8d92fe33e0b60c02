//! The commands, one module per family; each holds both halves of its
//! commands: dispatch (a parsed request → backend requests, through the
//! router) and render (the finished request → reply bytes, counters,
//! shadow writes).
//!
//! * `get`: get/gets/gat/gats, with backfill and compare.
//! * `storage`: set/add/replace/append/prepend/cas.
//! * `arith_delete_touch`: incr/decr, delete, touch.
//! * `write`: the outcome of those single-key writes (shared render).
//! * `meta`: mg/ms/md/ma/mn.
//! * `flush`: flush_all.
//! * `info`: version/verbosity/stats/quit.
//! * `shadow`: which shadow write follows a write's outcome.
//! * `sink`: where a get's or a meta command's reply is written (text, or
//!   a binary response straight from the decoded answer).

mod admin;
mod arith_delete_touch;
mod flush;
mod get;
mod info;
mod meta;
mod near;
mod shadow;
mod sink;
mod storage;
mod write;

use bytes::Bytes;
use memshift_protocol::memcache::{Keys, Request};
use tokio::time::Instant;

use super::pending::{Op, Pending};
use super::Session;
use crate::router::{ReplyShape, Routes, Target};

pub(super) use meta::{render_redis, write_outcome, Outcome};
pub(super) use near::land;
pub(super) use sink::{Sink, Text};

/// `cmd_buf` gets `CMD_BUF_CHUNK` more room when less than `CMD_BUF_LOW` is left.
const CMD_BUF_CHUNK: usize = 4 * 1024;
const CMD_BUF_LOW: usize = 512;

/// A request's own deadline, in backend timeouts from when it was queued: a
/// backstop only. The backend connection times each request from when it
/// was written (and the reply before it was complete) and fails it with a
/// timeout; counting from the queueing here would fail requests that only
/// waited behind another client's large replies (twemproxy #526).
const BACKSTOP_TIMEOUTS: u32 = 3;

/// Near cache: the key a finished write wrote is invalidated again just
/// before its reply is written (read-your-writes).
pub(super) fn forget_written(pending: &Pending) {
    if let (Some(hash), Some(near)) = (pending.near_written, crate::near_cache::get()) {
        near.invalidate_hash(hash);
    }
}

/// Where a request's backend replies go (its sequence number) and until
/// when they are awaited.
#[derive(Debug, Clone, Copy)]
struct Tag {
    seq: u64,
    deadline: Instant,
}

impl Session {
    pub(super) fn dispatch(&mut self, request: Request<Bytes>, now: Instant) {
        let routes = self.proxy.router.load();
        let tag = Tag {
            seq: self.next_seq(),
            deadline: now + routes.redis().request_timeout * BACKSTOP_TIMEOUTS,
        };
        if !info::answered_here(&request) {
            self.reserve_command_room();
        }
        match request {
            Request::Retrieval {
                command,
                exptime,
                keys,
            } => self.dispatch_get(&routes, tag, command, exptime, keys),
            Request::Storage {
                command,
                key,
                flags,
                exptime,
                cas,
                data,
                noreply,
            } => self.dispatch_storage(
                &routes, tag, command, key, flags, exptime, cas, data, noreply,
            ),
            Request::Arith {
                command,
                key,
                delta,
                noreply,
            } => {
                self.near_write(&key);
                self.dispatch_arith(&routes, tag, command, key, delta, noreply)
            }
            Request::Delete { key, noreply } => {
                self.near_write(&key);
                self.dispatch_delete(&routes, tag, key, noreply)
            }
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                self.near_write(&key);
                self.dispatch_touch(&routes, tag, key, exptime, noreply)
            }
            Request::FlushAll { delay, noreply } => {
                self.near_flush(&routes);
                self.dispatch_flush(&routes, tag, delay, noreply)
            }
            Request::Version => self.dispatch_version(),
            Request::Verbosity { noreply } => self.dispatch_verbosity(noreply),
            Request::Stats(group) => self.dispatch_stats(group),
            Request::Admin { command, noreply } => self.dispatch_admin(command, noreply),
            Request::Quit => self.push_ready(Op::Close),
            Request::MetaNoop => self.dispatch_meta_noop(),
            Request::Meta {
                command,
                key,
                tokens,
                data,
                flags,
            } => self.dispatch_meta(&routes, tag, command, key, tokens, data, flags),
        }
    }

    pub(super) fn render(&mut self, pending: Pending) {
        forget_written(&pending);
        match pending.op {
            Op::Ready(line) => self.wbuf.extend_from_slice(line),
            Op::ReadyBytes(bytes) => self.wbuf.extend_from_slice(&bytes),
            Op::Silent | Op::Close => {}
            Op::Retrieval(retrieval) => self.render_get(retrieval, &pending.results, &mut Text),
            Op::Write(write) => self.render_write(write, &pending.results),
            Op::Meta(op) => self.render_meta(*op, &pending.results, &mut Text),
            Op::FlushAll { noreply } => {
                near::drop_all(&self.proxy.router.load());
                self.render_flush(noreply, &pending.results)
            }
            Op::NearHit {
                keys,
                hit,
                with_cas,
            } => self.render_near_hit(&keys, &hit, with_cas, &mut Text),
        }
    }

    /// A get of one key the near cache answered.
    pub(in crate::session) fn render_near_hit<S: Sink>(
        &mut self,
        keys: &Keys<Bytes>,
        hit: &crate::near_cache::store::Cached,
        with_cas: bool,
        sink: &mut S,
    ) {
        let key = keys.iter().next().unwrap_or_default();
        self.proxy.stats.prefixes.record_get(key, true);
        let cas = with_cas.then_some(hit.cas());
        sink.item(&mut self.wbuf, key, hit.flags(), hit.data(), cas);
        sink.end_items(&mut self.wbuf);
    }

    /// Commands are split off `cmd_buf` as they are sent; keeping spare
    /// room means one allocation per many requests, not one per request.
    fn reserve_command_room(&mut self) {
        if self.cmd_buf.capacity() - self.cmd_buf.len() < CMD_BUF_LOW {
            if self.cmd_buf.capacity() == 0 {
                self.cmd_buf = crate::conn::pool::take_buffer(
                    crate::conn::pool::Buffer::Command,
                    CMD_BUF_CHUNK,
                );
            } else {
                self.cmd_buf.reserve(CMD_BUF_CHUNK);
            }
        }
    }

    /// Send the command in `cmd_buf` to `target`; its reply is part `part`
    /// of request `seq`.
    fn send(&mut self, routes: &Routes, target: Target, shape: ReplyShape, seq: u64, part: u32) {
        let cmd = self.cmd_buf.split().freeze();
        let reply = self.reply_to(seq, part);
        routes.send(target, self.lane, cmd, shape, reply);
    }

    /// `send` of a plain read a replica may serve (`Routes::send_read`).
    fn send_read(
        &mut self,
        routes: &Routes,
        target: Target,
        shape: ReplyShape,
        seq: u64,
        part: u32,
    ) {
        let cmd = self.cmd_buf.split().freeze();
        let reply = self.reply_to(seq, part);
        routes.send_read(target, self.lane, cmd, shape, reply);
    }
}

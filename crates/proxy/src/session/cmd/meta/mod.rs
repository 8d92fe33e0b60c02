//! Meta commands (`mg`, `ms`, `md`, `ma`, `me`) on Redis, or forwarded as they are
//! to the legacy memcached when it is the key's primary. See docs/meta.md.
//!
//! On Redis the items keep the layout of docs/storage.md, so meta and
//! classic commands see the same items. Replies are memcached 1.6.18's:
//! `HD`/`VA`/`EN`/`NS`/`EX`/`NF` plus the requested return flags in the
//! order of the request's flag tokens, with `q` hiding what memcached hides
//! (mg: `EN`; ms and md: `HD`; ma: the success of an existing counter).

//!
//! * `encode`: the Redis command of each verb.
//! * `redis_reply`: a Redis reply → the meta reply line.
//! * `debug`: `me`, memcached's item dump, from what Redis knows.

mod debug;
mod encode;
mod redis_reply;

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::reply;
use memshift_protocol::memcache::{base64, MetaCommand, MetaFlags, MetaSetMode};

use super::super::pending::{Kind, MetaOp, Op, Results, OWN_REPLY};
use super::super::Session;
use super::shadow::Change;
use super::sink::Sink;
use super::Tag;
use crate::near_cache::store::Hit;
use crate::read_errors::ReadFailure;
use crate::redis::translate::WriteOutcome;
use crate::redis::{BackendError, Reply};
use crate::router::{Access, Backend, ReplyShape, Routes, Target};
use crate::stats::bump;
use memshift_protocol::memcache::unix_now;
pub(in crate::session) use redis_reply::{render_redis, write_outcome};

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub(in crate::session::cmd) fn dispatch_meta(
        &mut self,
        routes: &Routes,
        tag: Tag,
        command: MetaCommand,
        raw_key: Bytes,
        tokens: Bytes,
        data: Bytes,
        flags: MetaFlags,
    ) {
        let key = if flags.base64 {
            match base64::decode(&raw_key) {
                Some(k) => Bytes::from(k),
                None => {
                    self.push_ready(Op::Ready(b"CLIENT_ERROR error decoding key\r\n"));
                    return;
                }
            }
        } else {
            raw_key.clone()
        };
        // Anything but a plain mg (no touch) changes the item.
        if command != MetaCommand::Get || flags.ttl.is_some() {
            self.near_write(&key);
        }
        count_meta(&self.proxy.stats, command, &flags);
        let now = unix_now();
        let route = routes.route(&key);
        let mut op = MetaOp {
            command,
            key,
            tokens,
            flags,
            side: route.primary.backend(),
            kind: Kind::Forwarded,
            new_cas: 0,
            data: Bytes::new(),
            shadow: route.shadow,
            now,
        };
        if let Target::Memcached { .. } = route.primary {
            forward(&mut self.cmd_buf, command, &raw_key, &op.tokens, &data);
            self.send(routes, route.primary, ReplyShape::Meta, tag.seq, 0);
            op.data = data;
            self.push_waiting(Op::Meta(Box::new(op)), 1, tag.deadline);
            return;
        }
        match command {
            MetaCommand::Get => self.encode_meta_get(&mut op),
            MetaCommand::Debug => self.encode_meta_debug(&mut op),
            MetaCommand::Set => self.encode_meta_set(&mut op, data),
            MetaCommand::Delete => self.encode_meta_delete(&mut op),
            MetaCommand::Arith => self.encode_meta_arith(&mut op),
        }
        self.send(routes, route.primary, ReplyShape::Meta, tag.seq, 0);
        self.push_waiting(Op::Meta(Box::new(op)), 1, tag.deadline);
    }

    pub(in crate::session::cmd) fn dispatch_meta_noop(&mut self) {
        self.push_ready(Op::Ready(reply::META_NOOP));
    }

    pub(in crate::session) fn render_meta<S: Sink>(
        &mut self,
        op: MetaOp,
        results: &Results,
        sink: &mut S,
    ) {
        if let Some(why) = ReadFailure::of(results.get(0)) {
            if op.reads_as_miss() && self.proxy.router.load().redis().read_errors.as_misses {
                return self.render_meta_failed_read(&op, why, sink);
            }
        }
        let result = match results.get(0) {
            Some(Ok(reply)) => reply,
            Some(Err(e)) => {
                let line = e.reply_line();
                return sink.text(&mut self.wbuf, |out| out.extend_from_slice(line));
            }
            None => {
                let line = BackendError::Timeout.reply_line();
                return sink.text(&mut self.wbuf, |out| out.extend_from_slice(line));
            }
        };
        let outcome = match (op.kind, result) {
            (Kind::Forwarded, Reply::Memcached(raw)) => {
                let outcome = forwarded_outcome(op.command, raw);
                let hidden = op.flags.quiet && quiet_hides(op.command, outcome);
                sink.text(&mut self.wbuf, |out| {
                    if !hidden {
                        out.extend_from_slice(raw)
                    }
                });
                outcome
            }
            (_, Reply::Redis(frame)) => {
                let failed = ReadFailure::of(results.get(0)).is_some();
                if op.command == MetaCommand::Get && !failed && crate::near_cache::get().is_some() {
                    // Takes part in the near cache's monotonic reads, like
                    // a get answered by Redis.
                    let item = super::get::redis_item(frame, OWN_REPLY).map(|i| Hit {
                        flags: i.flags,
                        cas: i.cas,
                        data: i.data,
                    });
                    self.near_answered(None, &op.key, item.as_ref(), None);
                }
                sink.meta_reply(&mut self.wbuf, &op, frame)
            }
            _ => {
                let line = WriteOutcome::Failed.line();
                return sink.text(&mut self.wbuf, |out| out.extend_from_slice(line));
            }
        };
        // counters
        let proxy = &self.proxy;
        let stats = &proxy.stats;
        if op.command == MetaCommand::Get {
            match outcome {
                Outcome::Hit => {
                    bump(&stats.get_hits);
                    proxy.metrics.get_hit(op.side);
                }
                Outcome::Miss | Outcome::Created => {
                    bump(&stats.get_misses);
                    proxy.metrics.get_miss(op.side);
                }
                _ => {}
            }
        }
        if let Some(side) = op.shadow {
            let change = meta_change(&op, outcome);
            self.shadow(side, op.key, change);
        }
    }
}
impl MetaOp {
    /// Whether a failed read of this `mg` may be answered as a miss
    /// (`redis.read_errors_as_misses`): a read of Redis that creates
    /// nothing. With `N` a miss would claim a vivified item that does not
    /// exist; with `T` but no `v` it is a touch (binary Touch is sent as
    /// one), a write: both keep their error.
    fn reads_as_miss(&self) -> bool {
        self.command == MetaCommand::Get
            && self.kind == Kind::Get
            && self.side == Backend::Redis
            && self.flags.vivify.is_none()
            && (self.flags.value || self.flags.ttl.is_none())
    }
}

impl Session {
    /// A failed `mg` answered as a miss: `EN` with the flags memcached
    /// returns on a miss (or nothing under `q`), counted.
    fn render_meta_failed_read<S: Sink>(&mut self, op: &MetaOp, why: ReadFailure, sink: &mut S) {
        let routes = self.proxy.router.load();
        let access = op.flags.ttl.map_or(Access::Read, |_| Access::Write);
        self.read_failed_as_miss(&routes, &op.key, access, why);
        sink.text(&mut self.wbuf, |out| redis_reply::render_miss(op, out));
    }
}

/// `stats` counters of a meta command, as memcached counts them.
fn count_meta(stats: &crate::stats::Stats, command: MetaCommand, flags: &MetaFlags) {
    match command {
        MetaCommand::Get => bump(&stats.cmd_get),
        MetaCommand::Set => bump(&stats.cmd_set),
        MetaCommand::Delete | MetaCommand::Arith | MetaCommand::Debug => {}
    }
    if flags.ttl.is_some() && command == MetaCommand::Get {
        bump(&stats.cmd_touch);
    }
}

/// What a meta command did, as far as replies and the shadow care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::session) enum Outcome {
    /// mg found the item.
    Hit,
    Miss,
    /// HD (or VA) of a write.
    Done,
    /// ma created the counter.
    Created,
    NotStored,
    Exists,
    NotFound,
    /// An error reply: nothing known to have changed.
    Error,
    /// Something may have changed, the result is unknown.
    Unknown,
}

/// Whether `q` hides this outcome's reply (memcached 1.6.18: mg hides `EN`,
/// ms and md hide `HD`, ma hides the success of an existing counter; `NF`,
/// `NS`, `EX` and errors are always answered). A forwarded `ma` cannot tell
/// a created counter from an updated one: both are hidden.
fn quiet_hides(command: MetaCommand, outcome: Outcome) -> bool {
    matches!(
        (command, outcome),
        (MetaCommand::Get, Outcome::Miss)
            | (MetaCommand::Set, Outcome::Done)
            | (MetaCommand::Delete, Outcome::Done)
            | (MetaCommand::Arith, Outcome::Done)
    )
}

/// The TTL an item created by `N` ends with: whichever of `N` and `T`
/// comes last (memcached applies them in order).
fn last_of_n_and_t(tokens: &[u8], flags: &MetaFlags) -> Option<i64> {
    match (flags.vivify, flags.ttl) {
        (Some(_), Some(t)) if position(tokens, b'T') > position(tokens, b'N') => Some(t),
        (Some(n), _) => Some(n),
        (None, _) => None,
    }
}

/// The first flag token starting with `letter` (its index), if any.
fn position(tokens: &[u8], letter: u8) -> Option<usize> {
    tokens
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .position(|t| t.first() == Some(&letter))
}

/// A memcached meta reply, classified by its code.
fn forwarded_outcome(command: MetaCommand, raw: &[u8]) -> Outcome {
    match (command, raw.get(..2)) {
        (MetaCommand::Get, Some(b"VA" | b"HD")) => Outcome::Hit,
        (MetaCommand::Get, Some(b"EN")) => Outcome::Miss,
        (_, Some(b"VA" | b"HD")) => Outcome::Done,
        (_, Some(b"NS")) => Outcome::NotStored,
        (_, Some(b"EX")) => Outcome::Exists,
        (_, Some(b"NF")) => Outcome::NotFound,
        (_, Some(b"CL")) => Outcome::Error,
        _ => Outcome::Unknown,
    }
}

/// What the command did to its key, by its outcome on the primary.
fn meta_change(op: &MetaOp, outcome: Outcome) -> Change {
    match (op.command, outcome) {
        (MetaCommand::Get, Outcome::Hit) => op
            .flags
            .ttl
            .map_or(Change::Nothing, |exptime| Change::Touched { exptime }),
        (MetaCommand::Get | MetaCommand::Debug, _) => Change::Nothing,
        (MetaCommand::Set, Outcome::Done)
            if !matches!(
                op.flags.set_mode,
                MetaSetMode::Append | MetaSetMode::Prepend
            ) =>
        {
            Change::Stored {
                flags: op.flags.client_flags,
                exptime: op.flags.ttl.unwrap_or(0),
                data: op.data.clone(),
            }
        }
        (_, Outcome::NotStored | Outcome::Exists | Outcome::NotFound | Outcome::Error) => {
            Change::Nothing
        }
        _ => Change::Unknown,
    }
}

/// The request as memcached takes it, without `q` (its reply is needed to
/// know the outcome; the proxy hides it as memcached would).
fn forward(buf: &mut BytesMut, command: MetaCommand, key: &[u8], tokens: &[u8], data: &[u8]) {
    buf.extend_from_slice(match command {
        MetaCommand::Get => b"mg ",
        MetaCommand::Set => b"ms ",
        MetaCommand::Delete => b"md ",
        MetaCommand::Arith => b"ma ",
        MetaCommand::Debug => b"me ",
    });
    buf.extend_from_slice(key);
    if command == MetaCommand::Set {
        buf.extend_from_slice(b" ");
        reply::put_u64(buf, data.len() as u64);
    }
    for token in tokens.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
        if token.first() == Some(&b'q') {
            continue;
        }
        buf.extend_from_slice(b" ");
        buf.extend_from_slice(token);
    }
    buf.extend_from_slice(b"\r\n");
    if command == MetaCommand::Set {
        buf.extend_from_slice(data);
        buf.extend_from_slice(b"\r\n");
    }
}

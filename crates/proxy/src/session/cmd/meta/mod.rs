//! Meta commands (`mg`, `ms`, `md`, `ma`, `me`) on Redis, or forwarded as they are
//! to the legacy memcached when it is the key's primary. See docs/meta.md.
//!
//! On Redis the items keep the layout of docs/storage.md, so meta and
//! classic commands see the same items. Replies are memcached 1.6.18's:
//! `HD`/`VA`/`EN`/`NS`/`EX`/`NF` plus the requested return flags in the
//! order of the request's flag tokens, with `q` hiding what memcached hides
//! (mg: `EN`; ms and md: `HD`; ma: the success of an existing counter).

//!
//! * `redis_reply`: a Redis reply → the meta reply line.
//! * `debug`: `me`, memcached's item dump, from what Redis knows.

mod debug;
mod redis_reply;

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::reply;
use memshift_protocol::memcache::{
    base64, ArithCommand, Exptime, MetaCommand, MetaFlags, MetaSetMode, StorageCommand,
};

use super::super::pending::{Kind, MetaOp, Op, Results, OWN_REPLY};
use super::super::Session;
use super::shadow::Change;
use super::{unix_now, Tag};
use crate::near_cache::store::Hit;
use crate::redis::encoding::STATE_KEY_BINARY;
use crate::redis::translate::{self, Expiry, MetaArith, MetaGet, WriteOutcome};
use crate::redis::{BackendError, Reply};
use crate::router::{ReplyShape, Routes, Target};
use crate::stats::bump;
use redis_reply::render_redis;

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
        let proxy = self.proxy.clone();
        let stats = &proxy.stats;
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
        match command {
            MetaCommand::Get => bump(&stats.cmd_get),
            MetaCommand::Set => bump(&stats.cmd_set),
            MetaCommand::Delete | MetaCommand::Arith | MetaCommand::Debug => {}
        }
        if flags.ttl.is_some() && command == MetaCommand::Get {
            bump(&stats.cmd_touch);
        }
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
        let key = op.key.clone();
        let expiry = |exptime: i64| Expiry::from_exptime(exptime, now);
        match command {
            MetaCommand::Get => {
                // Every mg runs the script: a stale item answers X and hands
                // out W even to a plain `mg`, and a hit marks it fetched.
                let created_exptime = last_of_n_and_t(&op.tokens, &flags);
                let vivify = created_exptime.map(|e| (self.cas.next_cas(), expiry(e)));
                op.new_cas = vivify.map_or(0, |(c, _)| c);
                let recache_ttl = match (flags.ttl, flags.recache) {
                    (Some(t), Some(_))
                        if position(&op.tokens, b'T') < position(&op.tokens, b'R') =>
                    {
                        Some(Exptime::new(t).ttl(u64::try_from(now).unwrap_or(0)))
                    }
                    _ => None,
                };
                let get = MetaGet {
                    touch: flags.ttl.map(expiry),
                    vivify,
                    recache: flags.recache,
                    recache_ttl,
                    idle: flags.access_info,
                    peek: false,
                    no_update: flags.no_update,
                };
                translate::meta_get(&mut self.cmd_buf, &key, &get);
                op.kind = Kind::Get;
            }
            MetaCommand::Debug => {
                let get = MetaGet {
                    idle: true,
                    peek: true,
                    ..MetaGet::default()
                };
                translate::meta_get(&mut self.cmd_buf, &key, &get);
                op.kind = Kind::Debug;
            }
            MetaCommand::Set => {
                op.new_cas = self.cas.next_cas();
                let ex = expiry(flags.ttl.unwrap_or(0));
                // memcached remembers that the key came in base64.
                let state = if flags.base64 { STATE_KEY_BINARY } else { 0 };
                let store = match (flags.set_mode, flags.compare_cas) {
                    (MetaSetMode::Set | MetaSetMode::Replace, Some(expected)) => {
                        translate::meta_compare_and_swap(
                            &mut self.cmd_buf,
                            &key,
                            expected,
                            flags.client_flags,
                            op.new_cas,
                            state,
                            &data,
                            ex,
                            // memcached never takes C0 as an older CAS.
                            flags.invalidate && expected != 0,
                        );
                        StorageCommand::Cas
                    }
                    (MetaSetMode::Append | MetaSetMode::Prepend, expected) => {
                        // memcached checks an append's CAS only when it is
                        // not 0 (`C0` appends unconditionally).
                        let expected = expected.filter(|&c| c != 0);
                        let append = flags.set_mode == MetaSetMode::Append;
                        translate::concat(
                            &mut self.cmd_buf,
                            &key,
                            append,
                            op.new_cas,
                            &data,
                            proxy.settings.load().limits.max_data_len(key.len(), 0),
                            expected,
                        );
                        if append {
                            StorageCommand::Append
                        } else {
                            StorageCommand::Prepend
                        }
                    }
                    (mode, _) => {
                        let command = match mode {
                            MetaSetMode::Add => StorageCommand::Add,
                            MetaSetMode::Replace => StorageCommand::Replace,
                            _ => StorageCommand::Set,
                        };
                        if state == 0 {
                            translate::store(
                                &mut self.cmd_buf,
                                command,
                                &key,
                                flags.client_flags,
                                op.new_cas,
                                &data,
                                ex,
                            );
                        } else {
                            translate::store_meta(
                                &mut self.cmd_buf,
                                command,
                                &key,
                                flags.client_flags,
                                op.new_cas,
                                state,
                                &data,
                                ex,
                            );
                        }
                        command
                    }
                };
                op.kind = Kind::Store(store);
                op.data = data;
            }
            MetaCommand::Delete if flags.invalidate => {
                op.new_cas = self.cas.next_cas();
                translate::meta_invalidate(
                    &mut self.cmd_buf,
                    &key,
                    flags.compare_cas,
                    op.new_cas,
                    flags.ttl.map(expiry),
                );
                op.kind = Kind::Invalidate;
            }
            MetaCommand::Delete => match flags.compare_cas {
                Some(expected) => {
                    translate::meta_delete_cas(&mut self.cmd_buf, &key, expected);
                    op.kind = Kind::DeleteCas;
                }
                None => {
                    translate::delete(&mut self.cmd_buf, &key);
                    op.kind = Kind::Delete;
                }
            },
            MetaCommand::Arith => {
                op.new_cas = self.cas.next_cas();
                // A created counter ends with the TTL of whichever of N and T
                // comes last (memcached applies them in order).
                let create_exptime = last_of_n_and_t(&op.tokens, &flags);
                let arith = MetaArith {
                    command: if flags.decrement {
                        ArithCommand::Decr
                    } else {
                        ArithCommand::Incr
                    },
                    delta: flags.delta,
                    new_cas: op.new_cas,
                    expected: flags.compare_cas.filter(|&c| c != 0),
                    create: create_exptime.map(|e| (flags.initial, expiry(e))),
                    touch: flags.ttl.map(expiry),
                };
                translate::meta_arith(&mut self.cmd_buf, &key, &arith);
                op.kind = Kind::Arith;
            }
        }
        self.send(routes, route.primary, ReplyShape::Meta, tag.seq, 0);
        self.push_waiting(Op::Meta(Box::new(op)), 1, tag.deadline);
    }

    pub(in crate::session::cmd) fn dispatch_meta_noop(&mut self) {
        self.push_ready(Op::Ready(reply::META_NOOP));
    }

    pub(in crate::session::cmd) fn render_meta(&mut self, op: MetaOp, results: &Results) {
        let proxy = self.proxy.clone();
        let result = match results.get(0) {
            Some(Ok(reply)) => reply,
            Some(Err(e)) => return self.wbuf.extend_from_slice(e.reply_line()),
            None => {
                return self
                    .wbuf
                    .extend_from_slice(BackendError::Timeout.reply_line())
            }
        };
        let outcome = match (op.kind, result) {
            (Kind::Forwarded, Reply::Memcached(raw)) => {
                let outcome = forwarded_outcome(op.command, raw);
                if !(op.flags.quiet && quiet_hides(op.command, outcome)) {
                    self.wbuf.extend_from_slice(raw);
                }
                outcome
            }
            (_, Reply::Redis(frame)) => {
                if op.command == MetaCommand::Get && crate::near_cache::get().is_some() {
                    // Takes part in the near cache's monotonic reads, like
                    // a get answered by Redis.
                    let item = super::get::redis_item(frame, OWN_REPLY).map(|i| Hit {
                        flags: i.flags,
                        cas: i.cas,
                        data: i.data,
                    });
                    self.near_answered(None, &op.key, item.as_ref(), None);
                }
                render_redis(&op, frame, &mut self.wbuf)
            }
            _ => {
                self.wbuf.extend_from_slice(WriteOutcome::Failed.line());
                return;
            }
        };
        // counters
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
/// What a meta command did, as far as replies and the shadow care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
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

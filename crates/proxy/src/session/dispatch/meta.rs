//! Meta commands (`mg`, `ms`, `md`, `ma`) on Redis, or forwarded as they are
//! to the legacy memcached when it is the key's primary. See docs/meta.md.
//!
//! On Redis the items keep the layout of docs/storage.md, so meta and
//! classic commands see the same items. Replies are memcached 1.6.18's:
//! `HD`/`VA`/`EN`/`NS`/`EX`/`NF` plus the requested return flags in the
//! order of the request's flag tokens, with `q` hiding what memcached hides
//! (mg: `EN`; ms and md: `HD`; ma: the success of an existing counter).

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::reply::{self, MetaReturn, MetaTtl};
use memshift_protocol::memcache::{
    base64, ArithCommand, MetaCommand, MetaFlags, MetaSetMode, StorageCommand,
};
use memshift_protocol::resp::Frame;
use memshift_shadow::op::{unix_now as shadow_now, Expiry as ShadowExpiry, ShadowOp};
use tokio::time::Instant;

use super::super::pending::{Op, Results};
use super::super::Session;
use super::unix_now;
use crate::legacy::ReplyShape;
use crate::migration::Side;
use crate::redis::encoding;
use crate::redis::translate::{self, Expiry, MetaArith, WriteOutcome};
use crate::redis::{BackendError, Reply};
use crate::stats::bump;

/// A meta command waiting for its backend.
#[derive(Debug)]
pub(in crate::session) struct MetaOp {
    command: MetaCommand,
    /// The key (decoded under `b`).
    key: Bytes,
    /// The flag tokens as sent.
    tokens: Bytes,
    flags: MetaFlags,
    side: Side,
    /// How the Redis reply reads.
    kind: Kind,
    /// The CAS unique a successful write stores.
    new_cas: u64,
    /// `ms`: the item as written (for the shadow).
    data: Bytes,
    /// Where the write's result is replicated.
    shadow: Option<Side>,
    /// When the request was dispatched (for `t` after `T`).
    now: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `GET` / `GETEX`.
    Get,
    /// The meta get script: `{value, pttl}`.
    GetWithTtl,
    Store(StorageCommand),
    /// `DEL`.
    Delete,
    /// The meta delete script.
    DeleteCas,
    Arith,
    /// Forwarded to memcached: its reply is passed through.
    Forwarded,
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub(in crate::session) fn dispatch_meta(
        &mut self,
        command: MetaCommand,
        raw_key: Bytes,
        tokens: Bytes,
        data: Bytes,
        flags: MetaFlags,
        seq: u64,
        deadline: Instant,
    ) {
        let proxy = self.proxy.clone();
        let backends = proxy.backends.load();
        let migration = proxy.migration.load();
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
        match command {
            MetaCommand::Get => bump(&stats.cmd_get),
            MetaCommand::Set => bump(&stats.cmd_set),
            MetaCommand::Delete | MetaCommand::Arith => {}
        }
        if flags.ttl.is_some() && command == MetaCommand::Get {
            bump(&stats.cmd_touch);
        }
        let now = unix_now();
        let route = migration.route(&key);
        let mut op = MetaOp {
            command,
            key,
            tokens,
            flags,
            side: route.primary,
            kind: Kind::Forwarded,
            new_cas: 0,
            data: Bytes::new(),
            shadow: route.shadow,
            now,
        };
        if let (Side::Memcached, Some(legacy)) = (route.primary, migration.legacy.as_deref()) {
            forward(&mut self.cmd_buf, command, &raw_key, &op.tokens, &data);
            let server = legacy.locate(&op.key);
            let cmd = self.cmd_buf.split().freeze();
            legacy.send(
                server,
                self.lane,
                cmd,
                ReplyShape::Meta,
                self.reply_to(seq, 0),
            );
            op.data = data;
            self.push_waiting(Op::Meta(Box::new(op)), 1, deadline);
            return;
        }
        op.side = Side::Redis;
        let key = op.key.clone();
        let expiry = |exptime: i64| Expiry::from_exptime(exptime, now);
        match command {
            MetaCommand::Get => {
                let touch = flags.ttl.map(expiry);
                if flags.return_ttl {
                    translate::meta_get_with_ttl(&mut self.cmd_buf, &key, touch);
                    op.kind = Kind::GetWithTtl;
                } else {
                    match touch {
                        Some(e) => translate::get_and_touch(&mut self.cmd_buf, &key, e),
                        None => translate::get(&mut self.cmd_buf, &key),
                    }
                    op.kind = Kind::Get;
                }
            }
            MetaCommand::Set => {
                op.new_cas = self.cas.next_cas();
                let ex = expiry(flags.ttl.unwrap_or(0));
                let store = match (flags.set_mode, flags.compare_cas) {
                    (MetaSetMode::Set | MetaSetMode::Replace, Some(expected)) => {
                        translate::compare_and_swap(
                            &mut self.cmd_buf,
                            &key,
                            expected,
                            flags.client_flags,
                            op.new_cas,
                            &data,
                            ex,
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
                        translate::store(
                            &mut self.cmd_buf,
                            command,
                            &key,
                            flags.client_flags,
                            op.new_cas,
                            &data,
                            ex,
                        );
                        command
                    }
                };
                op.kind = Kind::Store(store);
                op.data = data;
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
                let create_exptime = match (flags.vivify, flags.ttl) {
                    (Some(_), Some(t))
                        if position(&op.tokens, b'T') > position(&op.tokens, b'N') =>
                    {
                        Some(t)
                    }
                    (Some(n), _) => Some(n),
                    (None, _) => None,
                };
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
        let shard = backends.locate(&key);
        self.send_redis(&backends, shard, seq, 0);
        self.push_waiting(Op::Meta(Box::new(op)), 1, deadline);
    }

    pub(in crate::session) fn render_meta(&mut self, op: MetaOp, results: &Results) {
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
            (_, Reply::Redis(frame)) => render_redis(&op, frame, &mut self.wbuf),
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
                    proxy.metrics.get_hit(op.side.metrics());
                }
                Outcome::Miss => {
                    bump(&stats.get_misses);
                    proxy.metrics.get_miss(op.side.metrics());
                }
                _ => {}
            }
        }
        if let Some(side) = op.shadow {
            if let Some(shadow) = shadow_op(&op, outcome) {
                proxy.migration.load().shadow(side, shadow);
            }
        }
    }
}

/// What a meta command did, as far as replies and the shadow care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
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

/// The first flag token starting with `letter` (its index), if any.
fn position(tokens: &[u8], letter: u8) -> Option<usize> {
    tokens
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .position(|t| t.first() == Some(&letter))
}

/// TTL in seconds as memcached's `t` prints it, from a Redis PTTL.
fn ttl_from_pttl(pttl: i64) -> i64 {
    if pttl < 0 {
        -1
    } else {
        (pttl + 999) / 1000
    }
}

/// TTL `t` prints after `T<exptime>` / `N<exptime>` at `now`.
fn ttl_from_exptime(exptime: i64, now: i64) -> i64 {
    match Expiry::from_exptime(exptime, now) {
        Expiry::Never => -1,
        Expiry::In(s) => s,
        Expiry::At(t) => t - now,
        Expiry::Past => 0,
    }
}

fn render_redis(op: &MetaOp, frame: &Frame, out: &mut BytesMut) -> Outcome {
    let flags = &op.flags;
    let key = &op.key[..];
    let line = |out: &mut BytesMut, code: &[u8], ret: &MetaReturn| {
        out.extend_from_slice(code);
        reply::meta_flags(out, &op.tokens, key, flags.base64, ret);
        out.extend_from_slice(b"\r\n");
    };
    if let Frame::Error(_) = frame {
        out.extend_from_slice(WriteOutcome::Failed.line());
        return Outcome::Unknown;
    }
    match op.kind {
        Kind::Get | Kind::GetWithTtl => {
            let (value, pttl) = match frame {
                Frame::Bulk(v) => (Some(v), None),
                Frame::Array(items) => match (items.first(), items.get(1)) {
                    (Some(Frame::Bulk(v)), Some(Frame::Integer(p))) => (Some(v), Some(*p)),
                    _ => (None, None),
                },
                _ => (None, None),
            };
            let Some(item) = value.and_then(encoding::decode) else {
                if !flags.quiet {
                    line(out, b"EN", &MetaReturn::default());
                }
                return Outcome::Miss;
            };
            let ttl = pttl.map(|p| MetaTtl {
                before: ttl_from_pttl(p),
                on_touch: flags.ttl.map(|t| ttl_from_exptime(t, op.now)),
                on_vivify: None,
            });
            let ret = MetaReturn {
                size: Some(item.data.len() as u64),
                cas: Some(item.cas),
                flags: Some(item.flags),
                ttl,
            };
            if flags.value {
                let mut code = BytesMut::with_capacity(24);
                code.extend_from_slice(b"VA ");
                reply::put_u64(&mut code, item.data.len() as u64);
                line(out, &code, &ret);
                out.extend_from_slice(&item.data);
                out.extend_from_slice(b"\r\n");
            } else {
                line(out, b"HD", &ret);
            }
            Outcome::Hit
        }
        Kind::Store(command) => {
            let (code, outcome): (&[u8], Outcome) = match translate::storage_outcome(command, frame)
            {
                WriteOutcome::Stored => (b"HD", Outcome::Done),
                WriteOutcome::NotStored => (b"NS", Outcome::NotStored),
                WriteOutcome::Exists => (b"EX", Outcome::Exists),
                WriteOutcome::NotFound => (b"NF", Outcome::NotFound),
                _ => {
                    out.extend_from_slice(WriteOutcome::Failed.line());
                    return Outcome::Unknown;
                }
            };
            if !(flags.quiet && outcome == Outcome::Done) {
                let cas = if outcome == Outcome::Done {
                    op.new_cas
                } else {
                    0
                };
                let ret = MetaReturn {
                    cas: Some(cas),
                    ..MetaReturn::default()
                };
                line(out, code, &ret);
            }
            outcome
        }
        Kind::Delete | Kind::DeleteCas => {
            let outcome = match (op.kind, frame) {
                (Kind::Delete, Frame::Integer(0)) | (Kind::DeleteCas, Frame::Integer(0)) => {
                    Outcome::NotFound
                }
                (Kind::DeleteCas, Frame::Integer(1)) => Outcome::Exists,
                (_, Frame::Integer(_)) => Outcome::Done,
                _ => {
                    out.extend_from_slice(WriteOutcome::Failed.line());
                    return Outcome::Unknown;
                }
            };
            let code: &[u8] = match outcome {
                Outcome::NotFound => b"NF",
                Outcome::Exists => b"EX",
                _ => b"HD",
            };
            if !(flags.quiet && outcome == Outcome::Done) {
                line(out, code, &MetaReturn::default());
            }
            outcome
        }
        Kind::Arith => {
            let (status, digits, pttl) = match frame {
                Frame::Integer(0) => {
                    line(out, b"NF", &MetaReturn::default());
                    return Outcome::NotFound;
                }
                Frame::Integer(1) => {
                    line(out, b"EX", &MetaReturn::default());
                    return Outcome::Exists;
                }
                Frame::Integer(-1) => {
                    out.extend_from_slice(reply::CLIENT_ERROR_NON_NUMERIC);
                    return Outcome::Error;
                }
                Frame::Array(items) => match (items.first(), items.get(1), items.get(2)) {
                    (
                        Some(Frame::Integer(status)),
                        Some(Frame::Bulk(digits)),
                        Some(Frame::Integer(pttl)),
                    ) => (*status, digits, *pttl),
                    _ => {
                        out.extend_from_slice(WriteOutcome::Failed.line());
                        return Outcome::Unknown;
                    }
                },
                _ => {
                    out.extend_from_slice(WriteOutcome::Failed.line());
                    return Outcome::Unknown;
                }
            };
            let created = status == 3;
            let outcome = if created {
                Outcome::Created
            } else {
                Outcome::Done
            };
            if flags.quiet && !created {
                return outcome;
            }
            let ret = MetaReturn {
                cas: Some(op.new_cas),
                ttl: Some(MetaTtl {
                    before: if created { -1 } else { ttl_from_pttl(pttl) },
                    on_touch: flags.ttl.map(|t| ttl_from_exptime(t, op.now)),
                    on_vivify: flags
                        .vivify
                        .filter(|_| created)
                        .map(|t| ttl_from_exptime(t, op.now)),
                }),
                ..MetaReturn::default()
            };
            if flags.value {
                let mut code = BytesMut::with_capacity(24);
                code.extend_from_slice(b"VA ");
                reply::put_u64(&mut code, digits.len() as u64);
                line(out, &code, &ret);
                out.extend_from_slice(digits);
                out.extend_from_slice(b"\r\n");
            } else {
                line(out, b"HD", &ret);
            }
            outcome
        }
        Kind::Forwarded => {
            out.extend_from_slice(WriteOutcome::Failed.line());
            Outcome::Unknown
        }
    }
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

/// What the shadow backend gets: the resulting item when it is known, a
/// delete when the primary may have changed the key in a way not known
/// here, nothing when nothing changed.
fn shadow_op(op: &MetaOp, outcome: Outcome) -> Option<ShadowOp> {
    let key = op.key.clone();
    let now = shadow_now();
    match (op.command, outcome) {
        (MetaCommand::Get, Outcome::Hit) => op.flags.ttl.map(|t| ShadowOp::Touch {
            key,
            expiry: ShadowExpiry::from_memcached(t, now),
        }),
        (MetaCommand::Get, _) => None,
        (MetaCommand::Set, Outcome::Done)
            if !matches!(
                op.flags.set_mode,
                MetaSetMode::Append | MetaSetMode::Prepend
            ) =>
        {
            Some(ShadowOp::Set {
                key,
                flags: op.flags.client_flags,
                expiry: ShadowExpiry::from_memcached(op.flags.ttl.unwrap_or(0), now),
                data: op.data.clone(),
            })
        }
        (_, Outcome::NotStored | Outcome::Exists | Outcome::NotFound | Outcome::Error) => None,
        _ => Some(ShadowOp::Delete { key }),
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

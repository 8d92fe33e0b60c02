//! A Redis reply to a meta command, as memcached 1.6.18 answers it: the
//! code, the requested return flags, the value.

use bytes::BytesMut;
use memshift_protocol::memcache::reply::{self, MetaReturn, MetaTokens, MetaTtl};
use memshift_protocol::memcache::Exptime;
use memshift_protocol::resp::Frame;

use super::{Kind, MetaOp, Outcome};
use crate::redis::encoding::{
    self, STATE_FETCHED, STATE_KEY_BINARY, STATE_STALE, STATE_TOKEN_SENT,
};
use crate::redis::translate::{self, WriteOutcome};

/// TTL in seconds as memcached's `t` prints it, from a Redis PTTL.
fn ttl_from_pttl(pttl: i64) -> i64 {
    if pttl < 0 {
        -1
    } else {
        (pttl + 999) / 1000
    }
}

/// TTL `t` prints after `T<exptime>` / `N<exptime>` at `now`.
/// memcached's `t` for an item touched with `exptime` at `now`.
fn ttl_from_exptime(exptime: i64, now: u64) -> i64 {
    Exptime::new(exptime).ttl(now)
}

/// `mg`'s miss: `EN` and the flags memcached returns with it (nothing
/// under `q`).
pub(super) fn render_miss(op: &MetaOp, out: &mut BytesMut) {
    if !op.flags.quiet {
        line(op, out, b"EN", &MetaReturn::default());
    }
}

pub(in crate::session) fn render_redis(op: &MetaOp, frame: &Frame, out: &mut BytesMut) -> Outcome {
    if let Frame::Error(_) = frame {
        return failed(out);
    }
    match op.kind {
        Kind::Debug => super::debug::render(op, frame, out),
        Kind::Get => render_get(op, frame, out),
        Kind::Store(_) | Kind::Delete | Kind::DeleteCas | Kind::Invalidate => {
            render_write(op, frame, out)
        }
        Kind::Arith => render_arith(op, frame, out),
        Kind::Forwarded => failed(out),
    }
}

/// A reply that says nothing of the outcome: the write may or may not
/// have happened.
fn failed(out: &mut BytesMut) -> Outcome {
    out.extend_from_slice(WriteOutcome::Failed.line());
    Outcome::Unknown
}

/// `<code> <flags>\r\n` with the request's return flags.
fn line(op: &MetaOp, out: &mut BytesMut, code: &[u8], ret: &MetaReturn) {
    out.extend_from_slice(code);
    reply::meta_flags(out, &op.tokens, &op.key, op.flags.base64, ret);
    out.extend_from_slice(b"\r\n");
}

/// `VA <len>`, for a reply with a value.
fn va_code(len: usize) -> BytesMut {
    let mut code = BytesMut::with_capacity(24);
    code.extend_from_slice(b"VA ");
    reply::put_u64(&mut code, len as u64);
    code
}

/// The TTLs `t` prints: before the request, after `T`, after `N` created it.
fn meta_ttl(op: &MetaOp, pttl: i64, created: bool) -> MetaTtl {
    MetaTtl {
        before: if created { -1 } else { ttl_from_pttl(pttl) },
        on_touch: op.flags.ttl.map(|t| ttl_from_exptime(t, op.now)),
        on_vivify: op
            .flags
            .vivify
            .filter(|_| created)
            .map(|t| ttl_from_exptime(t, op.now)),
    }
}

/// `mg`: the meta get script's `{value, pttl, idle, won | created}`.
fn render_get(op: &MetaOp, frame: &Frame, out: &mut BytesMut) -> Outcome {
    let parts = match frame {
        Frame::Array(items) => match (items.first(), items.get(1), items.get(2), items.get(3)) {
            (
                Some(Frame::Bulk(v)),
                Some(Frame::Integer(p)),
                Some(Frame::Integer(idle)),
                Some(Frame::Integer(code)),
            ) => encoding::decode(v).map(|item| (item, *p, *idle, *code)),
            _ => None,
        },
        _ => None,
    };
    let Some((item, pttl, idle, code)) = parts else {
        render_miss(op, out);
        return Outcome::Miss;
    };
    let created = code & 2 != 0;
    let ret = MetaReturn {
        size: Some(item.data.len() as u64),
        cas: Some(item.cas),
        flags: Some(item.flags),
        ttl: Some(meta_ttl(op, pttl, created)),
        hit_before: Some(item.state & STATE_FETCHED != 0),
        // Unknown (an LFU eviction policy keeps no idle time): 0.
        idle: Some(u64::try_from(idle).unwrap_or(0)),
    };
    let tokens = MetaTokens {
        sent_before: item.state & STATE_TOKEN_SENT != 0,
        stale: item.state & STATE_STALE != 0,
        won: code & 1 != 0,
    };
    // memcached prints the key as it was stored (base64 or not).
    let base64 = item.state & STATE_KEY_BINARY != 0;
    if op.flags.value {
        out.extend_from_slice(&va_code(item.data.len()));
    } else {
        out.extend_from_slice(b"HD");
    }
    reply::meta_flags(out, &op.tokens, &op.key, base64, &ret);
    reply::meta_tokens(out, tokens);
    out.extend_from_slice(b"\r\n");
    if op.flags.value {
        out.extend_from_slice(&item.data);
        out.extend_from_slice(b"\r\n");
    }
    if created {
        Outcome::Created
    } else {
        Outcome::Hit
    }
}

/// What an `ms` or `md` on Redis did, from its reply: `Done`, `NotStored`,
/// `Exists` or `NotFound`; `None` for a reply that says nothing of the
/// outcome (answered `SERVER_ERROR`), or another command.
pub(in crate::session) fn write_outcome(op: &MetaOp, frame: &Frame) -> Option<Outcome> {
    let outcome = match (op.kind, frame) {
        (_, Frame::Error(_)) => return None,
        (Kind::Store(command), _) => translate::storage_outcome(command, frame),
        (Kind::Delete | Kind::DeleteCas | Kind::Invalidate, Frame::Integer(0)) => {
            WriteOutcome::NotFound
        }
        (Kind::DeleteCas | Kind::Invalidate, Frame::Integer(1)) => WriteOutcome::Exists,
        (Kind::Delete | Kind::DeleteCas | Kind::Invalidate, Frame::Integer(_)) => {
            WriteOutcome::Deleted
        }
        _ => return None,
    };
    match outcome {
        WriteOutcome::Stored | WriteOutcome::Deleted => Some(Outcome::Done),
        WriteOutcome::NotStored => Some(Outcome::NotStored),
        WriteOutcome::Exists => Some(Outcome::Exists),
        WriteOutcome::NotFound => Some(Outcome::NotFound),
        _ => None,
    }
}

/// `ms` and `md`: `HD` (hidden under `q`), `NS`, `EX` or `NF`; `c` of
/// `ms` is the new CAS of a stored item.
fn render_write(op: &MetaOp, frame: &Frame, out: &mut BytesMut) -> Outcome {
    let Some(outcome) = write_outcome(op, frame) else {
        return failed(out);
    };
    let code: &[u8] = match outcome {
        Outcome::Done => b"HD",
        Outcome::NotStored => b"NS",
        Outcome::Exists => b"EX",
        _ => b"NF",
    };
    if op.flags.quiet && outcome == Outcome::Done {
        return outcome;
    }
    let cas = match (op.kind, outcome) {
        (Kind::Store(_), Outcome::Done) => Some(op.new_cas),
        (Kind::Store(_), _) => Some(0),
        _ => None,
    };
    let ret = MetaReturn {
        cas,
        ..MetaReturn::default()
    };
    line(op, out, code, &ret);
    outcome
}

/// `ma`: the script's `{status, digits, pttl}`, or a refusal code.
fn render_arith(op: &MetaOp, frame: &Frame, out: &mut BytesMut) -> Outcome {
    let (status, digits, pttl) = match frame {
        Frame::Integer(0) => {
            line(op, out, b"NF", &MetaReturn::default());
            return Outcome::NotFound;
        }
        Frame::Integer(1) => {
            line(op, out, b"EX", &MetaReturn::default());
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
            _ => return failed(out),
        },
        _ => return failed(out),
    };
    let created = status == 3;
    let outcome = if created {
        Outcome::Created
    } else {
        Outcome::Done
    };
    if op.flags.quiet && !created {
        return outcome;
    }
    let ret = MetaReturn {
        cas: Some(op.new_cas),
        ttl: Some(meta_ttl(op, pttl, created)),
        ..MetaReturn::default()
    };
    if op.flags.value {
        line(op, out, &va_code(digits.len()), &ret);
        out.extend_from_slice(digits);
        out.extend_from_slice(b"\r\n");
    } else {
        line(op, out, b"HD", &ret);
    }
    outcome
}

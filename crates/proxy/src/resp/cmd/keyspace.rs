//! The keyspace across every shard (every master of a cluster): SCAN with a
//! cursor that names the shard it walks, KEYS merged from every shard,
//! RANDOMKEY from a shard that has a key; and OBJECT on its key's shard.
//!
//! SCAN's cursor (docs/resp.md): `shard_cursor * 1024 + position`, where
//! `position` indexes the walked shards (the ring's shards in config
//! order; a cluster's masters by node index) and `shard_cursor` is that
//! shard's own SCAN cursor. Cursor 0 starts at position 0; a shard's
//! cursor 0 moves on to the next position, and the last one's ends the
//! walk with 0. While the shards stay the same, every key present for
//! the whole walk is returned, from one shard only (a shard's own SCAN
//! may repeat a key when its table is resized, as one Redis may).
//! Cursors stay below 2^53 (JavaScript clients keep them in a double).
//!
//! Keys only: memshift keeps nothing of its own in Redis (items are the
//! client's keys, their header is in the value), so nothing is hidden
//! but keys a RESP `GET` would not read from that shard (a ring shard's
//! leftover copy after a resize or an ejection, or a key still migrating
//! from memcached).

use std::hash::BuildHasher;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use memshift_protocol::resp::reply::{self as out, RespVersion, Shape};
use memshift_protocol::resp::{CommandWriter, Frame};

use super::super::pending::{backend_error, Gather, Part, Render};
use super::super::RespSession;
use crate::redis::BackendError;
use crate::router::{Backend, Migration, RedisBackends};

/// Low bits of a SCAN cursor: the position of the shard walked.
const POSITION_BITS: u32 = 10;
/// Most shards a SCAN walks (more: SCAN is refused, KEYS still works).
const MAX_WALKED: usize = 1 << POSITION_BITS;
/// Largest shard cursor that fits (the whole cursor stays below 2^53).
const MAX_SHARD_CURSOR: u64 = (1 << (53 - POSITION_BITS)) - 1;

impl RespSession {
    pub(super) fn keyspace(&mut self, upper: &[u8], raw: Option<Bytes>) {
        let n = self.args.len();
        match upper {
            b"SCAN" if n >= 2 => self.scan(),
            b"KEYS" if n == 2 => {
                let visible = Visible::now(self);
                let cmd = raw.unwrap_or_else(|| self.encode_args());
                self.broadcast_cmd(cmd, |targets| {
                    Render::Gather(Box::new(Keys {
                        walked: targets.to_vec(),
                        visible,
                    }))
                });
            }
            b"RANDOMKEY" if n == 1 => {
                let visible = Visible::now(self);
                let start = std::collections::hash_map::RandomState::new().hash_one(self.id);
                let cmd = raw.unwrap_or_else(|| self.encode_args());
                self.broadcast_cmd(cmd, |targets| {
                    Render::Gather(Box::new(RandomKey {
                        walked: targets.to_vec(),
                        start: start as usize,
                        visible,
                    }))
                });
            }
            b"OBJECT" if n >= 2 => self.object(raw),
            _ => self.arity_error(),
        }
    }

    /// `SCAN cursor [MATCH p] [COUNT n] [TYPE t]`: one SCAN on the shard
    /// the cursor names; the options go as sent (the shard answers Redis'
    /// own errors for them).
    fn scan(&mut self) {
        let Some(cursor) = parse_cursor(&self.args[1]) else {
            return self.push_error(b"ERR invalid cursor");
        };
        let position = (cursor & (MAX_WALKED as u64 - 1)) as usize;
        let shard_cursor = cursor >> POSITION_BITS;
        let routes = self.proxy.router.load();
        let walked = routes.redis().flush_targets();
        if walked.is_empty() {
            return self.push_error(b"ERR memshift: backend unavailable");
        }
        if walked.len() > MAX_WALKED {
            return self.refuse(
                "its cursor names at most 1024 shards (use KEYS, or SCAN each Redis server)",
            );
        }
        let Some(&shard) = walked.get(position) else {
            // A cursor past the last shard: the walk is over.
            return self.push_bytes(|b| {
                out::array(b, 2);
                out::bulk(b, b"0");
                out::array(b, 0);
            });
        };
        self.cmd_buf.clear();
        let mut w = CommandWriter::new(&mut self.cmd_buf, self.args.len());
        w.arg(b"SCAN").arg(shard_cursor.to_string().as_bytes());
        for a in &self.args[2..] {
            w.arg(a);
        }
        drop(w);
        let cmd = self.cmd_buf.split().freeze();
        let page = ScanPage {
            position,
            walked: walked.len(),
            shard,
            visible: Visible::now(self),
        };
        let seq = self.push_waiting(Render::Gather(Box::new(page)), 1);
        routes
            .redis()
            .send(shard, self.lane, cmd, self.reply_to(seq, 0));
    }

    /// `OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT key` on the key's shard;
    /// anything else (HELP, a wrong subcommand or arity) gets a shard's
    /// own answer.
    fn object(&mut self, raw: Option<Bytes>) {
        let keyed = self.args.len() == 3
            && [&b"ENCODING"[..], b"FREQ", b"IDLETIME", b"REFCOUNT"]
                .iter()
                .any(|s| self.args[1].eq_ignore_ascii_case(s));
        let cmd = raw.unwrap_or_else(|| self.encode_args());
        let render = Render::Relay(Shape::Plain);
        if keyed {
            let key = self.args[2].clone();
            self.send_for_key(&key, Some(cmd), render);
        } else {
            self.send_to_first(cmd, render);
        }
    }
}

/// A SCAN cursor as Redis 7.0 reads one (`strtoul`): digits with an
/// optional sign (a negative one wraps), empty is 0, nothing else.
fn parse_cursor(s: &[u8]) -> Option<u64> {
    let (negative, digits) = match s.split_first() {
        None => return Some(0),
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        Some(_) => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if negative { n.wrapping_neg() } else { n })
}

/// Which keys of a walked shard a client sees: those a RESP `GET` would
/// read from that very shard.
struct Visible {
    redis: Arc<RedisBackends>,
    migration: Arc<Migration>,
}

impl std::fmt::Debug for Visible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Visible")
            .field("phase", &self.migration.phase)
            .finish_non_exhaustive()
    }
}

impl Visible {
    fn now(session: &RespSession) -> Visible {
        Visible {
            redis: session.proxy.router.redis(),
            migration: session.proxy.router.migration(),
        }
    }

    fn keeps(&self, key: &[u8], shard: usize) -> bool {
        let sides = self.migration.sides(key);
        if sides.primary != Backend::Redis || sides.shadow.is_some() {
            return false;
        }
        // A cluster node holds its slots' keys (mid-resharding, the keys
        // of a slot moving in too: they are on no other node then).
        self.redis.cluster_slot(key).is_some() || self.redis.locate_read(key) == shard
    }

    /// Add the keys of `shard`'s reply that a client sees to `kept`.
    fn keep_from<'a>(&self, keys: &'a [Frame], shard: usize, kept: &mut Vec<&'a Bytes>) {
        kept.extend(keys.iter().filter_map(|k| match k {
            Frame::Bulk(k) if self.keeps(k, shard) => Some(k),
            _ => None,
        }));
    }
}

/// An array of keys.
fn key_array(buf: &mut BytesMut, keys: &[&Bytes]) {
    out::array(buf, keys.len());
    for k in keys {
        out::bulk(buf, k);
    }
}

/// The first failure among `parts`: a backend's (unanswered) or a
/// Redis error reply; `None` when every part is a frame other than an
/// error.
fn failure(parts: &[Part]) -> Option<Result<&Frame, BackendError>> {
    parts.iter().find_map(|p| match p {
        None => Some(Err(BackendError::Timeout)),
        Some(Err(e)) => Some(Err(*e)),
        Some(Ok(f @ Frame::Error(_))) => Some(Ok(f)),
        Some(Ok(_)) => None,
    })
}

fn render_failure(buf: &mut BytesMut, v: RespVersion, failed: Result<&Frame, BackendError>) {
    match failed {
        Ok(f) => out::frame(buf, f, v, Shape::Plain),
        Err(e) => backend_error(buf, e),
    }
}

/// The keys of a shard's `SCAN` or `KEYS` reply (`None`: not that shape).
fn keys_of(reply: &Frame) -> Option<&[Frame]> {
    match reply {
        Frame::Array(keys) => Some(keys),
        _ => None,
    }
}

/// One SCAN step on `shard`, the `position`-th of `walked` shards.
#[derive(Debug)]
struct ScanPage {
    position: usize,
    walked: usize,
    shard: usize,
    visible: Visible,
}

/// The client's next cursor after the `position`-th of `walked` shards
/// answered `shard_next` (`None`: it does not fit).
fn next_cursor(position: usize, walked: usize, shard_next: u64) -> Option<u64> {
    if shard_next == 0 {
        let next = position + 1;
        return Some(if next < walked { next as u64 } else { 0 });
    }
    (shard_next <= MAX_SHARD_CURSOR).then_some(shard_next << POSITION_BITS | position as u64)
}

impl Gather for ScanPage {
    fn render(&self, parts: &[Part], buf: &mut BytesMut, v: RespVersion) {
        if let Some(failed) = failure(parts) {
            return render_failure(buf, v, failed);
        }
        let Some(Some(Ok(Frame::Array(reply)))) = parts.first() else {
            return backend_error(buf, BackendError::ConnectionLost);
        };
        let (Some(Frame::Bulk(cursor)), Some(keys)) =
            (reply.first(), reply.get(1).and_then(keys_of))
        else {
            return backend_error(buf, BackendError::ConnectionLost);
        };
        let Some(next) =
            parse_cursor(cursor).and_then(|c| next_cursor(self.position, self.walked, c))
        else {
            return out::error(
                buf,
                b"ERR memshift: a shard's SCAN cursor is too large to carry in memshift's cursor",
            );
        };
        let mut kept = Vec::with_capacity(keys.len());
        self.visible.keep_from(keys, self.shard, &mut kept);
        out::array(buf, 2);
        out::bulk(buf, next.to_string().as_bytes());
        key_array(buf, &kept);
    }
}

/// KEYS on every shard, merged (part `i` from `walked[i]`).
#[derive(Debug)]
struct Keys {
    walked: Vec<usize>,
    visible: Visible,
}

impl Gather for Keys {
    fn render(&self, parts: &[Part], buf: &mut BytesMut, v: RespVersion) {
        if let Some(failed) = failure(parts) {
            return render_failure(buf, v, failed);
        }
        let mut kept = Vec::new();
        for (part, &shard) in parts.iter().zip(&self.walked) {
            if let Some(Ok(reply)) = part {
                let keys = keys_of(reply).unwrap_or_default();
                self.visible.keep_from(keys, shard, &mut kept);
            }
        }
        key_array(buf, &kept);
    }
}

/// RANDOMKEY on every shard: the key of the first shard from a random
/// one on that has one (an empty shard is skipped, a failed one too
/// unless no shard gave a key).
#[derive(Debug)]
struct RandomKey {
    walked: Vec<usize>,
    start: usize,
    visible: Visible,
}

impl Gather for RandomKey {
    fn render(&self, parts: &[Part], buf: &mut BytesMut, v: RespVersion) {
        let n = parts.len().min(self.walked.len());
        for i in 0..n {
            let at = (self.start + i) % n;
            if let Some(Ok(Frame::Bulk(key))) = &parts[at] {
                if self.visible.keeps(key, self.walked[at]) {
                    return out::bulk(buf, key);
                }
            }
        }
        match failure(parts) {
            Some(failed) => render_failure(buf, v, failed),
            None => out::null(buf, v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_parse_as_redis_reads_them() {
        assert_eq!(parse_cursor(b"0"), Some(0));
        assert_eq!(parse_cursor(b""), Some(0));
        assert_eq!(parse_cursor(b"+5"), Some(5));
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551616"), None);
        for bad in [&b" 1"[..], b"1 ", b"abc", b"+", b"-", b"0x10", b"1.5"] {
            assert_eq!(parse_cursor(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_cursor_walks_every_shard_once() {
        // Three shards: shard cursors carry the position in the low bits.
        assert_eq!(next_cursor(0, 3, 17), Some(17 << 10));
        assert_eq!(next_cursor(2, 3, 17), Some(17 << 10 | 2));
        // A shard done: the next one from its start; the last one: done.
        assert_eq!(next_cursor(0, 3, 0), Some(1));
        assert_eq!(next_cursor(1, 3, 0), Some(2));
        assert_eq!(next_cursor(2, 3, 0), Some(0));
        // The largest shard cursor that fits keeps the cursor below 2^53.
        let top = next_cursor(1023, 1024, MAX_SHARD_CURSOR).unwrap();
        assert!(top < 1 << 53);
        assert_eq!(top >> POSITION_BITS, MAX_SHARD_CURSOR);
        assert_eq!(next_cursor(0, 3, MAX_SHARD_CURSOR + 1), None);
    }
}

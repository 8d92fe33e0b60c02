//! RESP commands: which family serves a command, and what the families
//! share (routing a key, sending to a shard, argument errors).
//!
//! * `connection`: answered by memshift itself (HELLO, AUTH, PING, ...).
//! * `server`: every shard at once (DBSIZE, FLUSHDB, FLUSHALL, INFO, SCRIPT LOAD).
//! * `strings`: commands on values memcached clients share (GET, SET, INCR, ...).
//! * `relay`: single-key commands sent to the key's shard as they came.
//! * `multi`: multi-key commands split by shard and merged in the client's order.
//! * `near`: GET/MGET through the near cache, and what writes do to it.
//! * `pubsub`: SUBSCRIBE and friends on the client's subscriber
//!   connections, PUBLISH and PUBSUB.
//! * `refused`: what memshift cannot serve over a ring of shards, and why.

mod connection;
mod multi;
mod near;
mod pubsub;
mod refused;
mod relay;
mod server;
mod strings;

use bytes::Bytes;
use memshift_protocol::resp::reply::{RespVersion, Shape};
use memshift_protocol::resp::CommandWriter;

pub(super) use near::near_before_reply;

use super::pending::{NearAfter, Render};
use super::RespSession;
use crate::metrics::command_index;
use crate::redis::ReplyTo;
use crate::router::{Routes, Target};

/// Longest command name looked up (longer ones are unknown).
const MAX_NAME: usize = 24;

/// Who serves a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Connection,
    Server,
    Strings,
    /// Sent to the shard of the key in `args[1]`.
    Relay(Shape),
    /// EVAL/EVALSHA: the key in `args[3]` (exactly one key).
    Script,
    Multi,
    PubSub,
    Refused(&'static str),
}

/// The family of `upper` (an upper-case command name) and its metrics group.
fn lookup(upper: &[u8]) -> Option<(Family, &'static str)> {
    use Family::*;
    Some(match upper {
        b"HELLO" | b"AUTH" | b"PING" | b"ECHO" | b"QUIT" | b"SELECT" | b"CLIENT" | b"COMMAND"
        | b"RESET" => (Connection, "connection"),
        b"INFO" | b"DBSIZE" | b"FLUSHDB" | b"FLUSHALL" | b"SCRIPT" => (Server, "server"),
        b"GET" | b"GETEX" | b"GETDEL" => (Strings, "get"),
        b"SET" | b"SETNX" | b"SETEX" | b"PSETEX" | b"GETSET" => (Strings, "set"),
        b"INCR" | b"INCRBY" | b"INCRBYFLOAT" => (Strings, "incr"),
        b"DECR" | b"DECRBY" => (Strings, "decr"),
        b"APPEND" => (Strings, "append"),
        b"STRLEN" | b"GETRANGE" | b"SUBSTR" | b"SETRANGE" => (Strings, "strings"),
        b"MGET" => (Multi, "get"),
        b"MSET" | b"MSETNX" => (Multi, "set"),
        b"DEL" | b"UNLINK" => (Multi, "delete"),
        b"EXISTS" => (Multi, "keys"),
        b"TOUCH" => (Multi, "touch"),
        b"HGETALL" => (Relay(Shape::Map), "hashes"),
        b"HSET" | b"HSETNX" | b"HGET" | b"HMGET" | b"HMSET" | b"HDEL" | b"HLEN" | b"HSTRLEN"
        | b"HINCRBY" | b"HINCRBYFLOAT" | b"HKEYS" | b"HVALS" | b"HEXISTS" | b"HRANDFIELD"
        | b"HSCAN" => (Relay(Shape::Plain), "hashes"),
        b"LPUSH" | b"RPUSH" | b"LPUSHX" | b"RPUSHX" | b"LPOP" | b"RPOP" | b"LLEN" | b"LRANGE"
        | b"LINDEX" | b"LSET" | b"LINSERT" | b"LREM" | b"LTRIM" | b"LPOS" => {
            (Relay(Shape::Plain), "lists")
        }
        b"SMEMBERS" => (Relay(Shape::Set), "sets"),
        b"SADD" | b"SREM" | b"SISMEMBER" | b"SMISMEMBER" | b"SCARD" | b"SPOP" | b"SRANDMEMBER"
        | b"SSCAN" => (Relay(Shape::Plain), "sets"),
        b"ZSCORE" | b"ZINCRBY" => (Relay(Shape::Double), "zsets"),
        b"ZMSCORE" => (Relay(Shape::Doubles), "zsets"),
        // WITHSCORES decides the shape (see `relay`).
        b"ZRANGE" | b"ZREVRANGE" | b"ZRANGEBYSCORE" | b"ZREVRANGEBYSCORE" => {
            (Relay(Shape::ScorePairs), "zsets")
        }
        b"ZADD" | b"ZREM" | b"ZCARD" | b"ZCOUNT" | b"ZRANGEBYLEX" | b"ZREVRANGEBYLEX"
        | b"ZRANK" | b"ZREVRANK" | b"ZREMRANGEBYRANK" | b"ZREMRANGEBYSCORE" | b"ZREMRANGEBYLEX"
        | b"ZLEXCOUNT" | b"ZPOPMIN" | b"ZPOPMAX" | b"ZRANDMEMBER" | b"ZSCAN" => {
            (Relay(Shape::Plain), "zsets")
        }
        b"EXPIRE" | b"PEXPIRE" | b"EXPIREAT" | b"PEXPIREAT" | b"PERSIST" => {
            (Relay(Shape::Plain), "touch")
        }
        b"TTL" | b"PTTL" | b"EXPIRETIME" | b"PEXPIRETIME" | b"TYPE" => {
            (Relay(Shape::Plain), "keys")
        }
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" => (Script, "scripts"),
        b"SUBSCRIBE" | b"PSUBSCRIBE" | b"SSUBSCRIBE" | b"UNSUBSCRIBE" | b"PUNSUBSCRIBE"
        | b"SUNSUBSCRIBE" | b"PUBLISH" | b"SPUBLISH" | b"PUBSUB" => (PubSub, "pubsub"),
        other => (Refused(refused::reason(other)?), "refused"),
    })
}

/// Whether memshift serves the command (for COMMAND's answers).
pub(super) fn is_served(name: &[u8]) -> bool {
    let mut buf = [0u8; MAX_NAME];
    upper(name, &mut buf)
        .and_then(lookup)
        .is_some_and(|(f, _)| !matches!(f, Family::Refused(_)))
}

/// Every command memshift serves (COMMAND COUNT; docs/resp.md).
pub(super) const SERVED: &[&str] = &[
    "hello",
    "auth",
    "ping",
    "echo",
    "quit",
    "select",
    "client",
    "command",
    "reset",
    "info",
    "dbsize",
    "flushdb",
    "flushall",
    "script",
    "get",
    "getex",
    "getdel",
    "set",
    "setnx",
    "setex",
    "psetex",
    "getset",
    "incr",
    "incrby",
    "incrbyfloat",
    "decr",
    "decrby",
    "append",
    "strlen",
    "getrange",
    "substr",
    "setrange",
    "mget",
    "mset",
    "msetnx",
    "del",
    "unlink",
    "exists",
    "touch",
    "hgetall",
    "hset",
    "hsetnx",
    "hget",
    "hmget",
    "hmset",
    "hdel",
    "hlen",
    "hstrlen",
    "hincrby",
    "hincrbyfloat",
    "hkeys",
    "hvals",
    "hexists",
    "hrandfield",
    "hscan",
    "lpush",
    "rpush",
    "lpushx",
    "rpushx",
    "lpop",
    "rpop",
    "llen",
    "lrange",
    "lindex",
    "lset",
    "linsert",
    "lrem",
    "ltrim",
    "lpos",
    "smembers",
    "sadd",
    "srem",
    "sismember",
    "smismember",
    "scard",
    "spop",
    "srandmember",
    "sscan",
    "zscore",
    "zincrby",
    "zmscore",
    "zrange",
    "zrevrange",
    "zrangebyscore",
    "zrevrangebyscore",
    "zadd",
    "zrem",
    "zcard",
    "zcount",
    "zrangebylex",
    "zrevrangebylex",
    "zrank",
    "zrevrank",
    "zremrangebyrank",
    "zremrangebyscore",
    "zremrangebylex",
    "zlexcount",
    "zpopmin",
    "zpopmax",
    "zrandmember",
    "zscan",
    "expire",
    "pexpire",
    "expireat",
    "pexpireat",
    "persist",
    "ttl",
    "pttl",
    "expiretime",
    "pexpiretime",
    "type",
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "subscribe",
    "psubscribe",
    "ssubscribe",
    "unsubscribe",
    "punsubscribe",
    "sunsubscribe",
    "publish",
    "spublish",
    "pubsub",
];

fn upper<'a>(name: &[u8], buf: &'a mut [u8; MAX_NAME]) -> Option<&'a [u8]> {
    let dst = buf.get_mut(..name.len())?;
    for (d, s) in dst.iter_mut().zip(name) {
        *d = s.to_ascii_uppercase();
    }
    Some(dst)
}

/// Why a key cannot be served over RESP now (None: it can, on `shard`).
enum Placed {
    Shard(usize),
    Refused(&'static [u8]),
}

impl RespSession {
    /// Answer or send the request in `self.args` (`raw`: its bytes, when
    /// they can go to Redis as they came).
    pub(super) fn dispatch(&mut self, raw: Option<Bytes>) {
        let mut buf = [0u8; MAX_NAME];
        let Some(found) = upper(&self.args[0], &mut buf).and_then(lookup) else {
            return self.unknown_command();
        };
        let upper = &buf[..self.args[0].len()];
        self.command = command_index(found.1);
        if !self.authenticated && !matches!(upper, b"AUTH" | b"HELLO" | b"QUIT" | b"RESET") {
            return self.push_error(b"NOAUTH Authentication required.");
        }
        if self.subs.as_ref().is_some_and(|s| s.active()) && self.version == RespVersion::Resp2 {
            match upper {
                b"PING" => return self.subscribed_ping(),
                u if !pubsub::allowed_subscribed(u) => return self.refuse_subscribed(),
                _ => {}
            }
        }
        if upper == b"RESET" {
            self.reset_subscriptions();
        }
        match found.0 {
            Family::Connection => self.connection(upper),
            Family::Server => self.server(upper),
            Family::Strings => self.strings(upper, raw),
            Family::Relay(shape) => self.relay(upper, shape, raw, 1),
            Family::Script => self.script(raw),
            Family::Multi => self.multi(upper, raw),
            Family::PubSub => self.pubsub(upper, raw),
            Family::Refused(why) => self.refuse(why),
        }
    }

    /// Redis' reply to a command it does not know.
    fn unknown_command(&mut self) {
        let mut text = Vec::with_capacity(96);
        text.extend_from_slice(b"ERR unknown command '");
        push_printable(&mut text, &self.args[0], 128);
        text.extend_from_slice(b"', with args beginning with: ");
        for a in self.args.iter().skip(1) {
            if text.len() > 1024 {
                break;
            }
            text.push(b'\'');
            push_printable(&mut text, a, 128);
            text.extend_from_slice(b"' ");
        }
        self.push_error(&text);
    }

    fn refuse(&mut self, why: &str) {
        let mut text = Vec::with_capacity(96);
        text.extend_from_slice(b"ERR ");
        push_printable(&mut text, &self.args[0], 64);
        text[4..].make_ascii_uppercase();
        text.extend_from_slice(b" is not supported by memshift: ");
        text.extend_from_slice(why.as_bytes());
        self.push_error(&text);
    }

    /// `ERR wrong number of arguments for '<cmd>' command`.
    fn arity_error(&mut self) {
        let mut text = Vec::with_capacity(64);
        text.extend_from_slice(b"ERR wrong number of arguments for '");
        let name = text.len();
        push_printable(&mut text, &self.args[0], 64);
        text[name..].make_ascii_lowercase();
        text.extend_from_slice(b"' command");
        self.push_error(&text);
    }

    /// The shard serving `key` over RESP: Redis must be its primary with no
    /// shadow (during a migration the memcached side would miss RESP
    /// writes), see docs/resp.md.
    fn place(routes: &Routes, key: &[u8]) -> Placed {
        let route = routes.route(key);
        match (route.primary, route.shadow) {
            (Target::Redis { shard }, None) => Placed::Shard(shard),
            _ => Placed::Refused(
                b"ERR memshift: this key is still migrating from memcached (migration.phase is not redis); use the memcached protocol for it",
            ),
        }
    }

    /// Send the command in `self.cmd_buf` (or `raw`) to `key`'s shard as a
    /// request of its own, answered as `render`.
    fn send_for_key(&mut self, key: &[u8], cmd: Option<Bytes>, render: Render) {
        let routes = self.proxy.router.load();
        let shard = match Self::place(&routes, key) {
            Placed::Shard(s) => s,
            Placed::Refused(text) => {
                self.cmd_buf.clear();
                return self.push_error(text);
            }
        };
        let written = self.invalidate_near(key);
        let cmd = cmd.unwrap_or_else(|| self.cmd_buf.split().freeze());
        let seq = self.push_waiting(render, 1);
        if let (Some(hash), Some(p)) = (written, self.pending.back_mut()) {
            p.near = NearAfter::Written(hash);
        }
        routes
            .redis()
            .send(shard, self.lane, cmd, self.reply_to(seq, 0));
    }

    /// Near cache (memcached `get`s): a request that may change `key`
    /// invalidates it now (and, single-key, again before its reply, as
    /// memcached writes do); returns the key's hash for that second time.
    fn invalidate_near(&self, key: &[u8]) -> Option<u64> {
        let near = crate::near_cache::get()?;
        if reads_only(&self.args[0]) {
            return None;
        }
        let hash = crate::near_cache::hash(key);
        near.invalidate_hash(hash);
        Some(hash)
    }

    fn reply_to(&mut self, seq: u64, part: u32) -> ReplyTo {
        let channel = self
            .replies
            .get_or_insert_with(crate::conn::pool::take_channel);
        ReplyTo {
            tx: channel.tx.clone(),
            seq,
            part,
        }
    }

    /// Re-encode `self.args` as a Redis command into `cmd_buf` (for a
    /// request that arrived inline).
    fn encode_args(&mut self) -> Bytes {
        self.cmd_buf.clear();
        let mut w = CommandWriter::new(&mut self.cmd_buf, self.args.len());
        for a in &self.args {
            w.arg(a);
        }
        drop(w);
        self.cmd_buf.split().freeze()
    }

    /// A bulk-string or integer reply known now.
    fn push_bytes(&mut self, f: impl FnOnce(&mut bytes::BytesMut)) {
        self.cmd_buf.clear();
        f(&mut self.cmd_buf);
        let bytes = self.cmd_buf.split().freeze();
        self.push_ready(Render::Ready(bytes));
    }
}

/// Commands that never change a string key (the near cache keeps only
/// memcached items, which are strings).
fn reads_only(name: &[u8]) -> bool {
    const READS: &[&[u8]] = &[
        b"GET",
        b"MGET",
        b"STRLEN",
        b"GETRANGE",
        b"SUBSTR",
        b"EXISTS",
        b"TTL",
        b"PTTL",
        b"EXPIRETIME",
        b"PEXPIRETIME",
        b"TYPE",
    ];
    READS.iter().any(|r| r.eq_ignore_ascii_case(name))
}

/// Append at most `max` bytes of `s`, unprintable ones as `?` (error
/// lines must stay one line).
fn push_printable(out: &mut Vec<u8>, s: &[u8], max: usize) {
    out.extend(
        s.iter()
            .take(max)
            .map(|&b| if (0x20..0x7f).contains(&b) { b } else { b'?' }),
    );
}

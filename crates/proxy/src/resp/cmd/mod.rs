//! RESP commands: which family serves a command, and what the families
//! share (routing a key, sending to a shard, argument errors).
//!
//! * `connection`: answered by memshift itself (HELLO, AUTH, PING, ...).
//! * `server`: every shard at once (DBSIZE, FLUSHDB, FLUSHALL, SCRIPT LOAD).
//! * `info`, `config`: INFO and CONFIG GET, memshift's own fields and the
//!   shards' summed.
//! * `keyspace`: walks over every shard (SCAN, KEYS, RANDOMKEY) and OBJECT.
//! * `strings`: commands on values memcached clients share (GET, SET, INCR, ...).
//! * `relay`: single-key commands sent to the key's shard as they came.
//! * `multi`: multi-key commands split by shard and merged in the client's order.
//! * `near`: GET/MGET through the near cache, and what writes do to it.
//! * `pubsub`: SUBSCRIBE and friends on the client's subscriber
//!   connections, PUBLISH and PUBSUB.
//! * `refused`: what memshift cannot serve over a ring of shards, and why.
//! * `transaction`: MULTI/EXEC/DISCARD/WATCH/UNWATCH on one shard.
//! * `blocking`: BLPOP & co. on a connection held for the call.
//! * `hold`: ordering around requests answered on a held connection.

mod blocking;
mod config;
mod connection;
mod hold;
mod info;
mod keyspace;
mod multi;
mod near;
mod pubsub;
mod refused;
mod relay;
mod server;
mod strings;
mod table;
mod transaction;

use bytes::Bytes;
use memshift_protocol::resp::CommandWriter;

pub(super) use hold::HELD_INPUT_LIMIT;
pub(super) use near::near_before_reply;
pub(super) use transaction::TxnState;

use super::pending::{NearAfter, Render};
use super::RespSession;
use crate::metrics::command_index;
use crate::redis::ReplyTo;
use crate::router::{Routes, Target};
use table::Family;

/// Longest command name looked up (longer ones are unknown).
const MAX_NAME: usize = 24;

/// The family of `upper` (an upper-case command name), its metrics group
/// and, for a served command, its index in the table.
fn lookup(upper: &[u8]) -> Option<(Family, &'static str, Option<usize>)> {
    if let Some(i) = table::position(upper) {
        let c = &table::COMMANDS[i];
        return Some((c.family, c.group, Some(i)));
    }
    Some((Family::Refused(refused::reason(upper)?), "refused", None))
}

/// Whether memshift serves the command (for COMMAND's answers).
pub(super) fn is_served(name: &[u8]) -> bool {
    let mut buf = [0u8; MAX_NAME];
    upper(name, &mut buf).and_then(table::find).is_some()
}

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
        // Between MULTI and EXEC (`transaction`): queued, not sent.
        if self.queueing() {
            return self.queue_command(raw);
        }
        self.dispatch_now(raw)
    }

    fn dispatch_now(&mut self, raw: Option<Bytes>) {
        let mut buf = [0u8; MAX_NAME];
        let Some(found) = upper(&self.args[0], &mut buf).and_then(lookup) else {
            return self.unknown_command();
        };
        let upper = &buf[..self.args[0].len()];
        self.command = command_index(found.1);
        self.stats_row = table::stats_row(found.2, upper, &self.args);
        if !self.authenticated && !matches!(upper, b"AUTH" | b"HELLO" | b"QUIT" | b"RESET") {
            return self.push_error(b"NOAUTH Authentication required.");
        }
        if self.subs.as_ref().is_some_and(|s| s.active())
            && self.version == memshift_protocol::resp::reply::RespVersion::Resp2
        {
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
            Family::Transaction => self.transaction(upper),
            Family::Blocking => self.blocking(upper, raw),
            Family::Keyspace => self.keyspace(upper, raw),
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

    /// `-ERR <COMMAND> <SUBCOMMAND> is not supported by memshift: <why>`.
    fn refuse_subcommand(&mut self, why: &str) {
        let mut text = b"ERR ".to_vec();
        self.push_subcommand(&mut text, b' ');
        text[4..].make_ascii_uppercase();
        text.extend_from_slice(b" is not supported by memshift: ");
        text.extend_from_slice(why.as_bytes());
        self.push_error(&text);
    }

    /// `ERR wrong number of arguments for '<cmd>|<sub>' command`.
    fn subcommand_arity_error(&mut self) {
        let mut text = b"ERR wrong number of arguments for '".to_vec();
        let name = text.len();
        self.push_subcommand(&mut text, b'|');
        text[name..].make_ascii_lowercase();
        text.extend_from_slice(b"' command");
        self.push_error(&text);
    }

    /// Append `<command><sep><subcommand>` as sent, printable.
    fn push_subcommand(&self, text: &mut Vec<u8>, sep: u8) {
        push_printable(text, &self.args[0], 32);
        text.push(sep);
        push_printable(text, self.args.get(1).map_or(&b""[..], |s| s), 32);
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
        // Inside MULTI (`transaction`): queued for EXEC, not sent.
        let Some(cmd) = self.captured(shard, || routes.redis().cluster_slot(key), cmd) else {
            return;
        };
        self.send_keyed(&routes, shard, cmd, seq, 0);
    }

    /// Queue this request's `cmd` on `shard` as part `part`: a read-only
    /// command (the table's `read` column) may be served by a replica of
    /// the shard (`redis.read_from`), a write never.
    fn send_keyed(&mut self, routes: &Routes, shard: usize, cmd: Bytes, seq: u64, part: u32) {
        let reply = self.reply_to(seq, part);
        match reads_only(&self.args[0]) {
            true => routes.redis().send_read(shard, self.lane, cmd, reply),
            false => routes.redis().send(shard, self.lane, cmd, reply),
        }
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
            .get_or_insert_with(crate::conn::pool::take_mailbox);
        ReplyTo {
            tx: channel.sender(),
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

/// Commands that never change a string key (see `table::Command::read`).
fn reads_only(name: &[u8]) -> bool {
    let mut buf = [0u8; MAX_NAME];
    upper(name, &mut buf)
        .and_then(table::find)
        .is_some_and(|c| c.read)
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

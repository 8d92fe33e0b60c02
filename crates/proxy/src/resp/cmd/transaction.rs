//! Transactions on one shard: `MULTI`, `EXEC`, `DISCARD`, `WATCH`,
//! `UNWATCH` (docs/resp.md, "Transactions").
//!
//! After `MULTI` each command goes through its family's usual path (the
//! same validation, translation and reply rendering as outside a
//! transaction), but what that path would send is captured instead
//! ([`RespSession::captured`]) and the client gets `+QUEUED`. Every key of
//! a transaction must live on one shard (one slot on a Redis Cluster): the
//! first key's, or the WATCHed keys'. A command that breaks that rule, or
//! that its family refuses, answers its error and marks the transaction:
//! `EXEC` then answers `-EXECABORT` and nothing is sent. Nothing is sent
//! before `EXEC` at all; then `MULTI`, the queued commands and `EXEC` are
//! written together on a connection the session holds for itself
//! (`redis::dedicated`), so nothing else runs between them, and each
//! element of the `EXEC` array is rendered as its command's reply would be
//! (`GET` without memshift's item header, ...).
//!
//! `WATCH` opens that connection early (on the keys' shard) and sends
//! `WATCH` on it; the transaction then runs there. `EXEC`, `DISCARD`,
//! `UNWATCH`, `RESET` and the client's disconnect release it.

use bytes::{BufMut, Bytes};
use memshift_protocol::resp::reply as out;
use memshift_protocol::resp::Frame;

use super::super::pending::{NearAfter, Render, EXEC_UNKNOWN};
use super::super::RespSession;
use super::{lookup, upper, Family, Placed, MAX_NAME};
use crate::redis::dedicated::{Dedicated, Job};

const EXECABORT: &[u8] = b"EXECABORT Transaction discarded because of previous errors.";
const OTHER_SHARD: &[u8] = b"CROSSSLOT memshift: a transaction's keys must live on one shard (one slot on a cluster) and this key is not on the shard of its first key or of the WATCHed keys; put them under one {hash tag}";
const SPLIT_KEYS: &[u8] = b"CROSSSLOT memshift: this command's keys live on different shards (slots on a cluster) and a transaction runs on one; put them under one {hash tag}";
const WATCH_SPLIT: &[u8] = b"CROSSSLOT memshift: WATCH keys must live on one shard (one slot on a cluster), the shard of any keys WATCHed already; put them under one {hash tag}";
const WATCH_LOST: &[u8] =
    b"ERR memshift: the shard's connection was lost during WATCH; nothing is watched";
const WATCH_GONE: &[u8] = b"ERR memshift: the connection holding the WATCH was lost; EXEC will abort, WATCH again after it";
pub(super) const LIMIT: &[u8] = b"ERR memshift: every dedicated shard connection is in use (redis.max_dedicated_connections); retry later";
const UNAVAILABLE: &[u8] = b"ERR memshift: backend unavailable";

/// Where a transaction runs: a shard, and on a cluster one slot of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Target {
    pub shard: usize,
    pub slot: Option<u16>,
}

/// A session's transaction state.
#[derive(Debug, Default)]
pub(in crate::resp) struct TxnState {
    /// Between `MULTI` and `EXEC`/`DISCARD`.
    multi: Option<Queue>,
    /// After `WATCH`: the connection that sent it, on the keys' shard.
    watch: Option<Watch>,
    /// While a queued command's family runs: what it would have sent.
    capture: Option<Vec<(Target, Bytes)>>,
    pub(super) hold: super::hold::Hold,
}

#[derive(Debug, Default)]
struct Queue {
    cmds: Vec<Bytes>,
    /// Each queued command's reply rendering and stats row.
    renders: Vec<(Render, Option<u16>)>,
    target: Option<Target>,
    /// A queued command was refused: `EXEC` answers `-EXECABORT`.
    aborted: bool,
    /// Near cache: the keys the transaction may change.
    written: Vec<u64>,
}

#[derive(Debug)]
struct Watch {
    conn: Dedicated,
    target: Target,
}

impl TxnState {
    /// A request is answered on a held connection: the session waits.
    #[inline]
    pub(in crate::resp) fn held(&self) -> bool {
        self.hold.active()
    }

    pub(super) fn watching(&self) -> Option<&Dedicated> {
        self.watch.as_ref().map(|w| &w.conn)
    }

    /// Inside MULTI, a command's family is running: its sends are queued.
    #[inline]
    pub(super) fn capturing(&self) -> bool {
        self.capture.is_some()
    }

    /// Reads skip the near cache: inside MULTI they belong to the
    /// transaction; after WATCH they must see every write the watch does
    /// not cover (a near-cache copy may lag a write made just before it).
    #[inline]
    pub(super) fn bypass_near_cache(&self) -> bool {
        self.capture.is_some() || self.watch.is_some()
    }

    /// `RESET`: out of MULTI, nothing watched.
    pub(super) fn reset(&mut self) {
        self.multi = None;
        self.watch = None;
    }
}

impl RespSession {
    /// Between MULTI and EXEC, with no queued command's family running.
    #[inline]
    pub(super) fn queueing(&self) -> bool {
        self.txn.multi.is_some() && !self.txn.capturing()
    }

    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH.
    pub(super) fn transaction(&mut self, upper: &[u8]) {
        let in_multi = self.txn.multi.is_some();
        let n = self.args.len();
        let arity_ok = match upper {
            b"WATCH" => n >= 2,
            _ => n == 1,
        };
        if !arity_ok && upper == b"EXEC" && in_multi {
            // Redis discards the transaction at once.
            self.txn.reset();
            return self.push_error(
                b"EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command",
            );
        }
        if !arity_ok {
            // Inside MULTI a refused command aborts the transaction.
            self.abort_queued();
            return self.arity_error();
        }
        match upper {
            b"MULTI" if in_multi => self.push_error(b"ERR MULTI calls can not be nested"),
            b"MULTI" => {
                self.txn.multi = Some(Queue::default());
                self.push_simple(b"OK");
            }
            b"EXEC" if in_multi => self.exec(),
            b"EXEC" => self.push_error(b"ERR EXEC without MULTI"),
            b"DISCARD" if in_multi => {
                self.txn.reset();
                self.push_simple(b"OK");
            }
            b"DISCARD" => self.push_error(b"ERR DISCARD without MULTI"),
            b"WATCH" if in_multi => self.push_error(b"ERR WATCH inside MULTI is not allowed"),
            b"WATCH" => self.watch(),
            // Outside MULTI (inside it is queued: Redis runs it in EXEC).
            _ => {
                self.txn.watch = None;
                self.push_simple(b"OK");
            }
        }
    }

    /// A request between MULTI and EXEC (`self.args`).
    pub(super) fn queue_command(&mut self, raw: Option<Bytes>) {
        let mut buf = [0u8; MAX_NAME];
        let found = upper(&self.args[0], &mut buf).and_then(lookup);
        let name = &buf[..self.args[0].len().min(MAX_NAME)];
        self.command = found.and_then(|f| crate::metrics::command_index(f.1));
        self.stats_row = found.and_then(|f| super::table::stats_row(f.2, name, &self.args));
        match found.map(|f| f.0) {
            Some(Family::Transaction) if name != b"UNWATCH" => return self.transaction(name),
            Some(Family::Transaction) => return self.queue_keyless(1..=1),
            Some(Family::Connection) => match name {
                b"QUIT" => return self.dispatch_now(raw),
                b"RESET" => {
                    self.txn.reset();
                    return self.dispatch_now(raw);
                }
                // Redis checks PING's argument count when it runs it.
                b"PING" => return self.queue_keyless(1..=usize::MAX),
                b"ECHO" => return self.queue_keyless(2..=2),
                _ => return self.refuse_in_multi(),
            },
            // Walks over every shard (OBJECT has one key: it joins).
            Some(Family::Server) => return self.refuse_in_multi(),
            Some(Family::Keyspace) if name != b"OBJECT" => return self.refuse_in_multi(),
            _ => {}
        }
        self.txn.capture = Some(Vec::new());
        self.dispatch_now(raw);
        let sends = self.txn.capture.take().unwrap_or_default();
        self.queued(sends);
    }

    /// Inside MULTI: `cmd` is queued for EXEC instead of sent (`None`);
    /// otherwise it is returned, to be sent.
    #[inline]
    pub(super) fn captured(
        &mut self,
        shard: usize,
        slot: impl FnOnce() -> Option<u16>,
        cmd: Bytes,
    ) -> Option<Bytes> {
        match &mut self.txn.capture {
            None => Some(cmd),
            Some(sends) => {
                sends.push((
                    Target {
                        shard,
                        slot: slot(),
                    },
                    cmd,
                ));
                None
            }
        }
    }

    /// The family of a queued command ran: what it would have sent becomes
    /// the transaction's, or its error marks the transaction.
    fn queued(&mut self, sends: Vec<(Target, Bytes)>) {
        let Some(queue) = self.txn.multi.as_mut() else {
            return;
        };
        let [(target, _)] = sends.as_slice() else {
            if sends.is_empty() {
                // Answered at once: an error (arity, refused, migrating key).
                return self.abort_queued();
            }
            return self.replace_queued(SPLIT_KEYS);
        };
        let required = queue.target.or(self.txn.watch.as_ref().map(|w| w.target));
        if required.is_some_and(|r| r != *target) {
            return self.replace_queued(OTHER_SHARD);
        }
        queue.target = Some(*target);
        let Some(p) = self.pending.pop_back() else {
            return;
        };
        let Some((_, cmd)) = sends.into_iter().next() else {
            return;
        };
        queue.cmds.push(cmd);
        match p.near {
            NearAfter::Written(h) => queue.written.push(h),
            NearAfter::WrittenMany(hs) => queue.written.extend(hs),
            _ => {}
        }
        queue.renders.push((p.render, p.stats));
        // Queued, not run: Redis counts it when EXEC runs it.
        self.stats_row = None;
        self.push_simple(b"QUEUED");
    }

    /// The queued command's reply (not sent) becomes an error; EXEC aborts.
    fn replace_queued(&mut self, error: &[u8]) {
        self.abort_queued();
        self.pending.pop_back();
        self.push_error(error);
    }

    /// PING, ECHO, UNWATCH inside MULTI: run by the shard in EXEC, as Redis
    /// runs them.
    fn queue_keyless(&mut self, arity: std::ops::RangeInclusive<usize>) {
        if !arity.contains(&self.args.len()) {
            self.abort_queued();
            return self.arity_error();
        }
        let cmd = self.encode_args();
        if let Some(q) = self.txn.multi.as_mut() {
            q.cmds.push(cmd);
            q.renders
                .push((Render::Relay(Default::default()), self.stats_row));
        }
        self.stats_row = None;
        self.push_simple(b"QUEUED");
    }

    /// Commands memshift answers itself, or on every shard, cannot join a
    /// transaction that one shard runs.
    fn refuse_in_multi(&mut self) {
        self.abort_queued();
        let mut text = b"ERR memshift: ".to_vec();
        super::push_printable(&mut text, &self.args[0], 64);
        text[14..].make_ascii_uppercase();
        text.extend_from_slice(
            b" is not supported inside MULTI (a transaction runs on one shard; memshift answers this command itself)",
        );
        self.push_error(&text);
    }

    /// Inside MULTI: `EXEC` will answer `-EXECABORT`.
    fn abort_queued(&mut self) {
        if let Some(q) = self.txn.multi.as_mut() {
            q.aborted = true;
        }
    }

    fn exec(&mut self) {
        let Some(queue) = self.txn.multi.take() else {
            return;
        };
        let watch = self.txn.watch.take();
        if queue.aborted {
            return self.push_error(EXECABORT);
        }
        if queue.cmds.is_empty() && watch.is_none() {
            return self.push_bytes(|b| out::array(b, 0));
        }
        let routes = self.proxy.router.load();
        let redis = routes.redis();
        let target = queue
            .target
            .or(watch.as_ref().map(|w| w.target))
            .unwrap_or_else(|| Target {
                shard: redis.locate(b""),
                slot: None,
            });
        let Some(shard) = redis.shard_at(target.shard) else {
            return self.push_error(UNAVAILABLE);
        };
        let watched = watch.is_some();
        let conn = match watch {
            Some(w) => w.conn,
            None => match redis.dedicated.open(&shard) {
                Ok(c) => c,
                Err(_) => return self.push_error(LIMIT),
            },
        };
        let mut bytes = bytes::BytesMut::new();
        bytes.put_slice(b"*1\r\n$5\r\nMULTI\r\n");
        for c in &queue.cmds {
            bytes.put_slice(c);
        }
        bytes.put_slice(b"*1\r\n$4\r\nEXEC\r\n");
        if let Some(near) = crate::near_cache::get() {
            queue.written.iter().for_each(|&h| near.invalidate_hash(h));
        }
        let replies = queue.cmds.len() + 2;
        let seq = self.push_waiting(Render::Exec(queue.renders), 1);
        if let (false, Some(p)) = (queue.written.is_empty(), self.pending.back_mut()) {
            p.near = NearAfter::WrittenMany(queue.written);
        }
        let job = Job {
            bytes: bytes.freeze(),
            replies,
            timeout: Some(redis.request_timeout),
            if_lost: EXEC_UNKNOWN,
            // The WATCH connection broke before EXEC: the watch is gone, so
            // the transaction aborts as if a watched key had changed.
            if_gone: watched.then_some(Frame::NullArray),
            leaves_clean: true,
            reply: self.reply_to(seq, 0),
        };
        let connect_timeout = shard.settings().connect_timeout;
        self.hold_send(Some(conn), job, connect_timeout, false);
    }

    fn watch(&mut self) {
        let routes = self.proxy.router.load();
        let redis = routes.redis();
        let Some(target) = self.keys_target(1..self.args.len()) else {
            return;
        };
        let Some(target) = target else {
            return self.push_error(WATCH_SPLIT);
        };
        if let Some(w) = &self.txn.watch {
            if w.target != target {
                return self.push_error(WATCH_SPLIT);
            }
        }
        let Some(shard) = redis.shard_at(target.shard) else {
            return self.push_error(UNAVAILABLE);
        };
        let watching = self.txn.watch.is_some();
        if !watching {
            match redis.dedicated.open(&shard) {
                Ok(conn) => self.txn.watch = Some(Watch { conn, target }),
                Err(_) => return self.push_error(LIMIT),
            }
        }
        let bytes = self.encode_args();
        let seq = self.push_waiting(Render::Relay(Default::default()), 1);
        let job = Job {
            bytes,
            replies: 1,
            timeout: Some(redis.request_timeout),
            if_lost: WATCH_LOST,
            if_gone: watching.then(|| Frame::Error(Bytes::from_static(WATCH_GONE))),
            leaves_clean: false,
            reply: self.reply_to(seq, 0),
        };
        self.hold_send(None, job, shard.settings().connect_timeout, false);
    }

    /// The one shard (and slot) of `self.args[keys]`: `Some(None)` when
    /// they are on several; `None` when a key cannot be served (the error
    /// is queued).
    pub(super) fn keys_target(&mut self, keys: std::ops::Range<usize>) -> Option<Option<Target>> {
        let routes = self.proxy.router.load();
        let redis = routes.redis();
        let mut found: Option<Target> = None;
        for i in keys {
            let key = &self.args[i];
            let shard = match Self::place(&routes, key) {
                Placed::Shard(s) => s,
                Placed::Refused(text) => {
                    self.push_error(text);
                    return None;
                }
            };
            let t = Target {
                shard,
                slot: redis.cluster_slot(key),
            };
            match found {
                Some(f) if f != t => return Some(None),
                _ => found = Some(t),
            }
        }
        Some(found)
    }

    fn push_simple(&mut self, s: &[u8]) {
        self.push_bytes(|b| out::simple(b, s));
    }
}

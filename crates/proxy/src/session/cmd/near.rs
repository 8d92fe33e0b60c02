//! The near cache's hooks in the request path (see `crate::near_cache`):
//! writes invalidate their key when dispatched and again just before their
//! reply is written; plain `set`s of tracked shards go write-through (sent
//! on the invalidation connection, and cache what they stored);
//! `flush_all` drops every shard's entries; single-key get/gets look up
//! before dispatch; their Redis answers drop older copies and fill the
//! cache. Single-key get/gets misses of a key already being read wait for
//! that read (`near_cache::coalesce`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::super::pending::{Op, PartResult, Retrieval, OWN_REPLY};
use super::super::Session;
use super::get::redis_item;
use crate::near_cache::coalesce::{self, Joined, Lead};
use crate::near_cache::store::{self, Hit, Limits, Lookup, Through, Ticket};
use crate::near_cache::tracking::ThroughWrite;
use crate::near_cache::Tracking;
use crate::read_errors::ReadFailure;
use crate::redis::translate::{self, Expiry};
use crate::redis::{BackendError, BackendReply, Reply};
use crate::router::{ReplyShape, Routes, Target};

impl Session {
    /// A write of `key` is being dispatched.
    pub(super) fn near_write(&mut self, key: &[u8]) {
        if let Some(near) = crate::near_cache::get() {
            let hash = crate::near_cache::hash(key);
            near.invalidate_hash(hash);
            self.near_written = Some(hash);
            if self.near_joined > 0 {
                self.near_overtake(Some(hash));
            }
        }
    }

    /// A `flush_all` is being dispatched: a write of every key. Entries
    /// go, and reads waiting on other reads leave them first, as before a
    /// write of their own key.
    pub(super) fn near_flush(&mut self, routes: &Routes) {
        drop_all(routes);
        if self.near_joined > 0 {
            self.near_overtake(None);
        }
    }

    /// A single-key get/gets of `key` (request `seq`) missed: join the read
    /// of it in flight, if there is one it may share.
    pub(super) fn near_join(
        &mut self,
        routes: &Routes,
        shard: usize,
        key: &[u8],
        seq: u64,
    ) -> Option<Joined> {
        if !self.near_limits.coalesce {
            return None;
        }
        let near = crate::near_cache::get()?;
        let tracking = routes.redis().shards.get(shard)?.tracking.as_ref()?;
        let joined = coalesce::join(near, tracking, key, || self.reply_to(seq, 0))?;
        self.near_joined = self.near_joined.saturating_add(1);
        Some(joined)
    }

    /// The admitted read of `key` (a slice of `raw`) that `ticket` stands
    /// for is being sent: let other misses of the key wait for it.
    pub(super) fn near_lead(&self, ticket: &Ticket, raw: &Bytes, key: &[u8]) -> Option<Lead> {
        if !self.near_limits.coalesce {
            return None;
        }
        coalesce::lead(ticket, raw.slice_ref(key))
    }

    /// A write of the key with `hash` (`None`: of every key, flush_all) is
    /// being dispatched while some of this session's reads wait on other
    /// reads: those of that key leave their flights and are sent now, ahead
    /// of the write (the read they joined may reach Redis after it); see
    /// `near_cache::coalesce`. One left waiting would be taken out by a
    /// later write of its key and sent after this one.
    fn near_overtake(&mut self, written: Option<u64>) {
        let Some(tx) = self.replies.as_ref().map(|c| c.sender()) else {
            self.near_joined = 0;
            return;
        };
        let mut still = 0u32;
        let mut own_reads = Vec::new();
        let first_seq = self.pending.seq_of(0);
        for (i, pending) in self.pending.iter_mut().enumerate() {
            let Op::Retrieval(r) = &mut pending.op else {
                continue;
            };
            let Some(joined) = r.near_join.as_mut().filter(|_| pending.waiting > 0) else {
                continue;
            };
            if written.is_some_and(|hash| joined.hash() != hash) {
                still += 1;
            } else if coalesce::leave(joined, &tx, first_seq + i as u64) {
                r.near_join = None;
                own_reads.push(i);
            } else {
                joined.overtaken = true;
                still += 1;
            }
        }
        self.near_joined = still;
        for i in own_reads {
            self.near_read_own(i);
        }
    }

    /// The read that request `index` joined was lost: read for itself,
    /// unless this session wrote the key since (then it fails, as the read
    /// it waited for did, rather than see its own later write).
    pub(in crate::session) fn near_redispatch(&mut self, index: usize) {
        let seq = self.pending.seq_of(index);
        let Some(pending) = self.pending.get_mut(index) else {
            return;
        };
        let Op::Retrieval(r) = &mut pending.op else {
            return;
        };
        let Some(joined) = r.near_join.take().filter(|_| pending.waiting > 0) else {
            return;
        };
        if joined.overtaken {
            self.complete(BackendReply {
                seq,
                part: 0,
                result: Err(BackendError::ConnectionLost),
            });
        } else {
            self.near_read_own(index);
        }
    }

    /// Send the plain read of single-key get/gets `index` (it had joined
    /// another read).
    fn near_read_own(&mut self, index: usize) {
        let seq = self.pending.seq_of(index);
        let routes = self.proxy.router.load();
        let Some(Op::Retrieval(r)) = self.pending.get(index).map(|p| &p.op) else {
            return;
        };
        let key = r.keys.iter().next().unwrap_or_default();
        match routes.route_read(key).primary {
            target @ Target::Redis { .. } => {
                translate::get(&mut self.cmd_buf, key);
                self.send(&routes, target, ReplyShape::Values, seq, 0);
            }
            // Its key moved to the memcached side meanwhile (a reload).
            Target::Memcached { .. } => self.complete(BackendReply {
                seq,
                part: 0,
                result: Err(BackendError::Unavailable),
            }),
        }
    }

    /// A plain `set` of `key` to Redis shard `shard`: the shard's tracking
    /// if it can go write-through (see [`Through`]), with the item it
    /// writes. `None`: send it as any write ([`Session::near_write`]).
    pub(super) fn near_write_through(
        &mut self,
        routes: &Routes,
        shard: usize,
        key: &Bytes,
        item: Hit,
        expiry: Expiry,
    ) -> Option<(Arc<Tracking>, Through)> {
        let near = crate::near_cache::get()?;
        // An absolute or past exptime would need the wall clock to bound
        // the entry; relative and none are the common ones.
        let ttl = match expiry {
            Expiry::Never => None,
            Expiry::In(s) => Some(Duration::from_secs(u64::try_from(s).ok()?)),
            Expiry::At(_) | Expiry::Past => return None,
        };
        let tracking = routes
            .redis()
            .shards
            .get(shard)?
            .tracking
            .as_ref()
            .filter(|t| t.takes_writes())?
            .clone();
        let through = store::write_through(near, &tracking, key.clone(), item, ttl)?;
        Some((tracking, through))
    }

    /// Send the command in `cmd_buf` on `tracking`'s connection; its reply
    /// is part 0 of request `seq`.
    pub(super) fn send_through(&mut self, tracking: &Tracking, seq: u64) {
        let cmd = self.cmd_buf.split().freeze();
        let reply = self.reply_to(seq, 0);
        tracking.send_write(ThroughWrite { cmd, reply });
    }

    /// A write-through set's outcome is known: fill or drop.
    pub(super) fn near_settle(&mut self, through: Through, stored: bool) {
        self.near_through = false;
        self.near_resume = true;
        let Some(near) = crate::near_cache::get() else {
            return;
        };
        if stored {
            through.stored(near, &self.near_limits);
        } else {
            through.failed(near);
        }
    }

    /// A get/gets of `key`, read from Redis shard `shard`: the cached item,
    /// or whether to fill the cache with the reply.
    pub(super) fn near_lookup(&self, routes: &Routes, shard: usize, key: &[u8]) -> Lookup {
        let (Some(near), Some(tracking)) = (
            crate::near_cache::get(),
            routes
                .redis()
                .shards
                .get(shard)
                .and_then(|s| s.tracking.as_ref()),
        ) else {
            return Lookup::Miss(None);
        };
        // The request's start (its read's clock reading), not another
        // clock read per get: an entry is served if it was live when the
        // request came in.
        store::lookup(near, tracking, key, &self.near_limits, self.current_start)
    }

    /// A get/gets of `key` read from Redis answered `item` (with `pttl`
    /// ms to live when asked): drop older copies, fill with `ticket`.
    pub(super) fn near_answered(
        &self,
        ticket: Option<Ticket>,
        key: &[u8],
        item: Option<&Hit>,
        pttl: Option<i64>,
    ) {
        if let Some(near) = crate::near_cache::get() {
            store::answered(near, ticket, key, item, pttl, &self.near_limits);
        }
    }
}

/// The answer of a read other misses may be waiting for (`r.near_lead`)
/// arrived: fill the near cache with it first (so no waiter's answer,
/// observed before the leader's, refuses the fill), then send each waiter
/// its copy, tagged with its own request.
pub(in crate::session) fn land(r: &mut Retrieval, result: &PartResult, limits: &Limits) {
    let Some(lead) = r.near_lead.take() else {
        return;
    };
    let waiters = lead.land();
    if waiters.is_empty() {
        return;
    }
    if let Some(near) = crate::near_cache::get() {
        // A failed read (an error reply) says nothing about the key: each
        // waiter answers it as its own failure.
        let failed = ReadFailure::of(Some(result)).is_some();
        if let (Ok(Reply::Redis(frame)), Some(key), false) = (result, r.keys.iter().next(), failed)
        {
            let item = redis_item(frame, OWN_REPLY).map(|i| Hit {
                flags: i.flags,
                cas: i.cas,
                data: i.data,
            });
            let ticket = r.near_fill.pop().map(|(_, t)| t);
            store::answered(
                near,
                ticket,
                key,
                item.as_ref(),
                translate::fill_pttl(frame),
                limits,
            );
            r.near_observed = true;
        }
        near.metrics.near_cache.coalesced(waiters.len());
    }
    for waiter in waiters {
        coalesce::answer(waiter, result);
    }
}

/// Drop every cached entry (flush_all).
pub(super) fn drop_all(routes: &Routes) {
    for shard in &routes.redis().shards {
        if let Some(t) = &shard.tracking {
            t.drop_all();
        }
    }
}

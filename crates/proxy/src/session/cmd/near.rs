//! The near cache's hooks in the request path (see `crate::near_cache`):
//! writes invalidate their key when dispatched and again just before their
//! reply is written; plain `set`s of tracked shards go write-through (sent
//! on the invalidation connection, and cache what they stored);
//! `flush_all` drops every shard's entries; single-key get/gets look up
//! before dispatch; their Redis answers drop older copies and fill the
//! cache.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::reply;

use super::super::Session;
use crate::near_cache::store::{self, Hit, Lookup, Through, Ticket};
use crate::near_cache::tracking::ThroughWrite;
use crate::near_cache::Tracking;
use crate::redis::translate::Expiry;
use crate::router::Routes;

impl Session {
    /// A write of `key` is being dispatched.
    pub(super) fn near_write(&mut self, key: &[u8]) {
        if let Some(near) = crate::near_cache::get() {
            let hash = crate::near_cache::hash(key);
            near.invalidate_hash(hash);
            self.near_written = Some(hash);
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
        store::lookup(near, tracking, key, &self.near_limits)
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

/// Drop every cached entry (flush_all).
pub(super) fn drop_all(routes: &Routes) {
    for shard in &routes.redis().shards {
        if let Some(t) = &shard.tracking {
            t.drop_all();
        }
    }
}

/// `VALUE key flags bytes [cas]` + data + `END`.
pub(super) fn render_hit(out: &mut BytesMut, key: &[u8], hit: &Hit, with_cas: bool) {
    reply::value(out, key, hit.flags, &hit.data, with_cas.then_some(hit.cas));
    out.extend_from_slice(reply::END);
}

//! The near cache's hooks in the request path (see `crate::near_cache`):
//! writes invalidate their key when dispatched and again just before their
//! reply is written; `flush_all` drops every shard's entries; single-key
//! get/gets look up before dispatch; their Redis answers drop older copies
//! and fill the cache.

use bytes::BytesMut;
use memshift_protocol::memcache::reply;

use super::super::Session;
use crate::near_cache::store::{self, Hit, Lookup, Ticket};
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
        store::lookup(near, tracking, key, &self.proxy.settings.load().near_cache)
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
            let limits = &self.proxy.settings.load().near_cache;
            store::answered(near, ticket, key, item, pttl, limits);
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

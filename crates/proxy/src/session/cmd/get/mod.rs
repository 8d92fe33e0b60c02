//! get, gets, gat, gats: keys grouped by backend server, Redis misses
//! looked up in memcached (backfill), sampled reads compared with the
//! other backend. With the near cache on, get/gets keys of Redis shards
//! are looked up in it first: hits are answered from memory, keys it
//! admits are read one by one with their TTL (to fill it), the rest in
//! one MGET per shard as usual; replies stay in request order.
//!
//! * here: the request, and a get of one key;
//! * `multi`: a get of several keys, grouped by shard and server;
//! * `render`: the reply, each key's answer in request order (a key whose
//!   shard failed is a miss under `redis.read_errors_as_misses`);
//! * `backfill`: Redis misses looked up in memcached during a migration.

mod backfill;
mod multi;
mod render;

use bytes::Bytes;
use memshift_protocol::memcache::client;
use memshift_protocol::memcache::{Keys, RetrievalCommand};

use super::super::pending::{Backfill, Op, Plan, Retrieval};
use super::super::Session;
use super::Tag;
use crate::near_cache::store::{Cached, Lookup};
use crate::redis::translate::{self, Expiry};
use crate::router::{Backend, ReplyShape, Routes, Target};
use crate::stats::bump;

pub(in crate::session::cmd) use render::redis_item;

/// How a get/gets of one Redis key goes out.
enum OneRead {
    /// The near cache has it.
    Hit(Cached),
    /// It waits for another read of the key (`near_cache::coalesce`).
    Joined,
    /// Its command is in `cmd_buf`.
    Send,
}

impl Session {
    pub(super) fn dispatch_get(
        &mut self,
        routes: &Routes,
        tag: Tag,
        command: RetrievalCommand,
        exptime: i64,
        keys: Keys<Bytes>,
    ) {
        let stats = &self.proxy.stats;
        stats.cmd_get.add(keys.len() as u64);
        if matches!(command, RetrievalCommand::Gat | RetrievalCommand::Gats) {
            stats.cmd_touch.add(keys.len() as u64);
        }
        let (op, parts) = self.send_get(routes, command, exptime, keys, tag.seq);
        self.push_waiting(op, parts, tag.deadline);
    }

    /// get/gets/gat/gats: Redis keys grouped by shard (one MGET each; GETEX
    /// per key for gat), memcached keys grouped by server (one request
    /// each), all sent at once. Returns the op and its number of parts.
    fn send_get(
        &mut self,
        routes: &Routes,
        command: RetrievalCommand,
        exptime: i64,
        keys: Keys<Bytes>,
        seq: u64,
    ) -> (Op, u32) {
        let touch = matches!(command, RetrievalCommand::Gat | RetrievalCommand::Gats);
        let retrieval = Retrieval {
            keys,
            with_cas: command.returns_cas(),
            plan: Plan::Single(Backend::Redis),
            backfill: None,
            compare: false,
            sample_miss_rate: routes.migration().rollback.is_some(),
            touch: touch.then_some(exptime),
            near_fill: Vec::new(),
            near_hits: Vec::new(),
            near_lead: None,
            near_join: None,
            near_observed: false,
        };
        if retrieval.keys.len() == 1 {
            self.send_one_get(routes, command, retrieval, seq)
        } else {
            self.send_multi_get(routes, command, retrieval, seq)
        }
    }

    /// A get of one key: one request (or the near cache's answer).
    fn send_one_get(
        &mut self,
        routes: &Routes,
        command: RetrievalCommand,
        mut retrieval: Retrieval,
        seq: u64,
    ) -> (Op, u32) {
        let migration = routes.migration();
        let first = retrieval.keys.iter().next().unwrap_or_default();
        let key = retrieval.keys.raw().slice_ref(first);
        let route = match retrieval.touch {
            // gat/gats change the item's TTL (and the TTL a cached entry
            // is bounded by): a write for placement.
            Some(_) => {
                self.near_write(&key);
                routes.route(&key)
            }
            None => routes.route_read(&key),
        };
        let mut joined = false;
        match (route.primary, retrieval.touch) {
            (Target::Memcached { .. }, _) => {
                let exptime = retrieval.touch.unwrap_or(0);
                let _ = client::retrieval(&mut self.cmd_buf, command, exptime, [&key[..]]);
                retrieval.plan = Plan::Single(Backend::Memcached);
            }
            (Target::Redis { .. }, Some(exptime)) => {
                let expiry = Expiry::from_exptime(exptime, memshift_protocol::memcache::unix_now());
                translate::get_and_touch(&mut self.cmd_buf, &key, expiry);
            }
            (Target::Redis { shard }, None) => {
                match self.one_redis_read(routes, shard, &key, &mut retrieval, seq) {
                    OneRead::Hit(hit) => return self.near_hit(retrieval, hit),
                    OneRead::Joined => joined = true,
                    OneRead::Send => {}
                }
                if migration.backfills(route.sides()) {
                    retrieval.backfill = Some(Backfill::default());
                }
            }
        }
        // A plain get (no CAS, no TTL change, not filling the near cache)
        // may be served by a replica (`redis.read_from`).
        let plain =
            !retrieval.with_cas && retrieval.touch.is_none() && retrieval.near_fill.is_empty();
        match (joined, plain) {
            (true, _) => {}
            (false, true) => self.send_read(routes, route.primary, ReplyShape::Values, seq, 0),
            (false, false) => self.send(routes, route.primary, ReplyShape::Values, seq, 0),
        }
        retrieval.compare = migration.phase != crate::config::Phase::Redis
            && route.shadow.is_some()
            && retrieval.touch.is_none()
            && migration.compare.sample();
        (Op::Retrieval(retrieval), 1)
    }

    /// A get/gets of one Redis key, through the near cache when it is on:
    /// its cached item, the read it joins, or the command to send (the
    /// plain GET, or with its TTL when the cache admits the key).
    fn one_redis_read(
        &mut self,
        routes: &Routes,
        shard: usize,
        key: &Bytes,
        r: &mut Retrieval,
        seq: u64,
    ) -> OneRead {
        let ticket = match self.near_lookup(routes, shard, key) {
            Lookup::Hit(hit) => return OneRead::Hit(hit),
            Lookup::Miss(ticket) => ticket,
        };
        // Another read of the key is in flight: its answer.
        r.near_join = self.near_join(routes, shard, key, seq);
        if r.near_join.is_some() {
            return OneRead::Joined;
        }
        match ticket {
            // Read with its remaining TTL, to bound the entry.
            Some(ticket) => {
                translate::fill_read(&mut self.cmd_buf, key);
                r.near_lead = self.near_lead(&ticket, r.keys.raw(), key);
                r.near_fill.push((0, ticket));
            }
            None => translate::get(&mut self.cmd_buf, key),
        }
        OneRead::Send
    }

    /// A get/gets of one key the near cache answered.
    fn near_hit(&self, retrieval: Retrieval, hit: Cached) -> (Op, u32) {
        bump(&self.proxy.stats.get_hits);
        self.proxy.metrics.get_hit(Backend::Redis);
        let op = Op::NearHit {
            keys: retrieval.keys,
            hit,
            with_cas: retrieval.with_cas,
        };
        (op, 0)
    }
}

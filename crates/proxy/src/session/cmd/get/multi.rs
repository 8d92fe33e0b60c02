//! A get of several keys: each key's backend and group decided, one request
//! per group sent (MGET per shard, or per (node, slot) in a cluster; GETEX
//! per key for gat/gats; a read with its TTL per key the near cache
//! admits; one multi-get per memcached server), and where each key's answer
//! will be.

use bytes::Bytes;
use memshift_protocol::memcache::{client, Keys, RetrievalCommand};

use super::super::super::pending::{Backfill, Op, Plan, Retrieval, Slot, NEAR_HIT, OWN_REPLY};
use super::super::super::Session;
use crate::near_cache::store::{Cached, Lookup, Ticket};
use crate::redis::translate::{self, Expiry};
use crate::router::{Backend, ReplyShape, Routes, Target};

/// `placed` groups of keys the near cache answered, and of those read with
/// their TTL to fill it.
const NEAR_GROUP: u32 = u32::MAX;
const FILL_GROUP: u32 = u32::MAX - 1;

/// Where each key goes, before parts are numbered.
struct Groups<'k> {
    shard_count: usize,
    redis: Vec<Vec<&'k [u8]>>,
    memcached: Vec<Vec<&'k [u8]>>,
    /// Cluster mode: one group per (node, slot), numbered from
    /// `shard_count` on (a cluster refuses an MGET across slots).
    slots: Vec<(usize, u16)>,
    /// (side, group, index within group) per key.
    placed: Vec<(Backend, u32, u32)>,
    /// Near cache: (shard, key) of each key read with its TTL to fill it.
    fills: Vec<(usize, &'k [u8])>,
    any_backfill: bool,
}

impl Groups<'_> {
    /// The shard of Redis group `group`.
    fn shard(&self, group: usize) -> usize {
        match group.checked_sub(self.shard_count) {
            Some(g) => self.slots.get(g).map_or(usize::MAX, |&(shard, _)| shard),
            None => group,
        }
    }

    /// The Redis group of `key` on `shard`.
    fn redis_group(&mut self, routes: &Routes, shard: usize, key: &[u8]) -> usize {
        let Some(slot) = routes.redis().cluster_slot(key) else {
            return shard;
        };
        match self.slots.iter().position(|&g| g == (shard, slot)) {
            Some(g) => self.shard_count + g,
            None => {
                self.slots.push((shard, slot));
                self.redis.push(Vec::new());
                self.redis.len() - 1
            }
        }
    }
}

/// The part each group's request got (`u32::MAX`: none sent).
#[derive(Default)]
struct Parts {
    redis: Vec<u32>,
    memcached: Vec<u32>,
    /// gat/gats: per key.
    getex: Vec<u32>,
    fill: Vec<u32>,
    count: u32,
}

impl Parts {
    fn next(&mut self) -> u32 {
        self.count += 1;
        self.count - 1
    }
}

impl Session {
    pub(super) fn send_multi_get(
        &mut self,
        routes: &Routes,
        command: RetrievalCommand,
        mut r: Retrieval,
        seq: u64,
    ) -> (Op, u32) {
        let touch = r.touch.is_some();
        let groups = self.group_keys(routes, &r.keys, touch, &mut r.near_hits, &mut r.near_fill);
        let mut parts = Parts::default();
        match r.touch {
            Some(exptime) => self.send_getex(routes, &r.keys, exptime, &groups, &mut parts, seq),
            None => self.send_mgets(routes, &groups, &mut parts, seq, r.with_cas),
        }
        self.send_fills(routes, &groups, &mut parts, seq);
        let exptime = r.touch.unwrap_or(0);
        self.send_memcached_gets(command, exptime, &groups, &mut parts, seq, routes);
        r.plan = Plan::Slots(slots(&groups, &parts, touch));
        if groups.any_backfill {
            r.backfill = Some(Backfill::default());
        }
        (Op::Retrieval(r), parts.count)
    }

    /// Decide each key's backend and group; the near cache answers or
    /// admits keys of Redis shards first (not for gat/gats).
    fn group_keys<'k>(
        &self,
        routes: &Routes,
        keys: &'k Keys<Bytes>,
        touch: bool,
        near_hits: &mut Vec<(u32, Cached)>,
        near_fill: &mut Vec<(u32, Ticket)>,
    ) -> Groups<'k> {
        let migration = routes.migration();
        let shard_count = routes.redis().shards.len();
        let server_count = routes.legacy().map_or(0, |l| l.server_count());
        let mut g = Groups {
            shard_count,
            redis: vec![Vec::new(); shard_count],
            memcached: vec![Vec::new(); server_count],
            slots: Vec::new(),
            placed: Vec::with_capacity(keys.len()),
            fills: Vec::new(),
            any_backfill: false,
        };
        let near_on = !touch && crate::near_cache::get().is_some();
        for (i, key) in keys.iter().enumerate() {
            let route = if touch {
                routes.route(key)
            } else {
                routes.route_read(key)
            };
            let shard = match route.primary {
                Target::Memcached { server } => {
                    let index = g.memcached[server].len() as u32;
                    g.placed.push((Backend::Memcached, server as u32, index));
                    g.memcached[server].push(key);
                    continue;
                }
                Target::Redis { shard } => shard,
            };
            g.any_backfill |= !touch && migration.backfills(route.sides());
            if near_on {
                match self.near_lookup(routes, shard, key) {
                    Lookup::Hit(hit) => {
                        g.placed
                            .push((Backend::Redis, NEAR_GROUP, near_hits.len() as u32));
                        near_hits.push((i as u32, hit));
                        continue;
                    }
                    // A read of its own, with the TTL (as for one key).
                    Lookup::Miss(Some(ticket)) => {
                        g.placed
                            .push((Backend::Redis, FILL_GROUP, g.fills.len() as u32));
                        g.fills.push((shard, key));
                        near_fill.push((i as u32, ticket));
                        continue;
                    }
                    Lookup::Miss(None) => {}
                }
            }
            let group = g.redis_group(routes, shard, key);
            let index = g.redis[group].len() as u32;
            g.placed.push((Backend::Redis, group as u32, index));
            g.redis[group].push(key);
        }
        g
    }

    /// gat/gats on Redis: one GETEX per key, each its own part.
    fn send_getex(
        &mut self,
        routes: &Routes,
        keys: &Keys<Bytes>,
        exptime: i64,
        groups: &Groups,
        parts: &mut Parts,
        seq: u64,
    ) {
        let expiry = Expiry::from_exptime(exptime, memshift_protocol::memcache::unix_now());
        for (i, key) in keys.iter().enumerate() {
            self.near_write(key);
            let (side, group, _) = groups.placed[i];
            if side != Backend::Redis {
                parts.getex.push(u32::MAX);
                continue;
            }
            translate::get_and_touch(&mut self.cmd_buf, key, expiry);
            let shard = groups.shard(group as usize);
            let part = parts.next();
            self.send(routes, Target::Redis { shard }, ReplyShape::Line, seq, part);
            parts.getex.push(part);
        }
    }

    /// get/gets on Redis: one MGET per group; a get's (no CAS: no `cas`
    /// can depend on it) may be served by a replica (`redis.read_from`).
    fn send_mgets(
        &mut self,
        routes: &Routes,
        groups: &Groups,
        parts: &mut Parts,
        seq: u64,
        with_cas: bool,
    ) {
        parts.redis = vec![u32::MAX; groups.redis.len()];
        for (g, keys) in groups.redis.iter().enumerate() {
            if keys.is_empty() {
                continue;
            }
            translate::mget(&mut self.cmd_buf, keys.iter().copied());
            let target = Target::Redis {
                shard: groups.shard(g),
            };
            let part = parts.next();
            match with_cas {
                true => self.send(routes, target, ReplyShape::Line, seq, part),
                false => self.send_read(routes, target, ReplyShape::Line, seq, part),
            }
            parts.redis[g] = part;
        }
    }

    /// Near cache: each admitted key read with its TTL, its own part.
    fn send_fills(&mut self, routes: &Routes, groups: &Groups, parts: &mut Parts, seq: u64) {
        for &(shard, key) in &groups.fills {
            translate::fill_read(&mut self.cmd_buf, key);
            let part = parts.next();
            self.send(routes, Target::Redis { shard }, ReplyShape::Line, seq, part);
            parts.fill.push(part);
        }
    }

    /// One multi-get per memcached server, as the client sent it.
    fn send_memcached_gets(
        &mut self,
        command: RetrievalCommand,
        exptime: i64,
        groups: &Groups,
        parts: &mut Parts,
        seq: u64,
        routes: &Routes,
    ) {
        parts.memcached = vec![u32::MAX; groups.memcached.len()];
        for (server, keys) in groups.memcached.iter().enumerate() {
            if keys.is_empty() {
                continue;
            }
            let _ = client::retrieval(&mut self.cmd_buf, command, exptime, keys.iter());
            let part = parts.next();
            let target = Target::Memcached { server };
            self.send(routes, target, ReplyShape::Values, seq, part);
            parts.memcached[server] = part;
        }
    }
}

/// Where each key's answer is, once the parts are numbered.
fn slots(groups: &Groups, parts: &Parts, touch: bool) -> Vec<Slot> {
    let part_of = |parts: &[u32], i: u32| parts.get(i as usize).copied().unwrap_or(u32::MAX);
    groups
        .placed
        .iter()
        .enumerate()
        .map(|(i, &(side, group, index))| {
            let (part, index) = match side {
                Backend::Redis if touch => (part_of(&parts.getex, i as u32), OWN_REPLY),
                Backend::Redis if group == NEAR_GROUP => (NEAR_HIT, index),
                Backend::Redis if group == FILL_GROUP => (part_of(&parts.fill, index), OWN_REPLY),
                Backend::Redis => (part_of(&parts.redis, group), index),
                Backend::Memcached => (part_of(&parts.memcached, group), index),
            };
            Slot { side, part, index }
        })
        .collect()
}

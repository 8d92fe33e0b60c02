//! get, gets, gat, gats: keys grouped by backend server, Redis misses
//! looked up in memcached (backfill), sampled reads compared with the
//! other backend. With the near cache on, get/gets keys of Redis shards
//! are looked up in it first: hits are answered from memory, keys it
//! admits are read one by one with their TTL (to fill it), the rest in
//! one MGET per shard as usual; replies stay in request order.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use memshift_protocol::memcache::client::{self, Response};
use memshift_protocol::memcache::{reply, Keys, RetrievalCommand, StorageCommand};
use memshift_protocol::resp::Frame;

use super::super::pending::{Backfill, Op, Plan, Results, Retrieval, Slot, NEAR_HIT, OWN_REPLY};
use super::super::Session;
use super::shadow::Change;
use super::unix_now;
use super::Tag;
use crate::config::Phase;
use crate::near_cache::store::{Hit, Lookup};
use crate::redis::translate::{self, Expiry};
use crate::redis::{encoding, Reply};
use crate::router::{Access, Backend, ReplyShape, Routes, Target};
use crate::stats::bump;

/// `placed` groups of multi-key get keys the near cache answered, and of
/// those read with their TTL to fill it.
const NEAR_GROUP: u32 = u32::MAX;
const FILL_GROUP: u32 = u32::MAX - 1;

/// A read to compare with the other backend: key, side that answered, and
/// its answer (flags, data).
type Compared = (Bytes, Backend, Option<(u32, Bytes)>);

/// One key's answer.
struct Found {
    flags: u32,
    cas: u64,
    data: Bytes,
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
        stats
            .cmd_get
            .fetch_add(keys.len() as u64, Ordering::Relaxed);
        if matches!(command, RetrievalCommand::Gat | RetrievalCommand::Gats) {
            stats
                .cmd_touch
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
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
        let expiry = Expiry::from_exptime(exptime, unix_now());
        let migration = routes.migration();
        let legacy = routes.legacy();
        let phase_is_redis = migration.phase == Phase::Redis;
        let mut retrieval = Retrieval {
            keys,
            with_cas: command.returns_cas(),
            plan: Plan::Single(Backend::Redis),
            backfill: None,
            compare: false,
            sample_miss_rate: migration.rollback.is_some(),
            touch: touch.then_some(exptime),
            near_fill: Vec::new(),
            near_hits: Vec::new(),
            near_lead: None,
            near_join: None,
            near_observed: false,
        };

        if retrieval.keys.len() == 1 {
            let key = retrieval.keys.iter().next().unwrap_or_default();
            // gat/gats change the item's TTL: a write for placement.
            let route = if touch {
                // gat/gats change the TTL a cached entry is bounded by.
                self.near_write(key);
                routes.route(key)
            } else {
                routes.route_read(key)
            };
            // Waits for another read of the key instead of being sent.
            let mut joined = false;
            match route.primary {
                Target::Memcached { .. } => {
                    let _ = client::retrieval(&mut self.cmd_buf, command, exptime, [key]);
                    retrieval.plan = Plan::Single(Backend::Memcached);
                }
                Target::Redis { shard } => {
                    if touch {
                        translate::get_and_touch(&mut self.cmd_buf, key, expiry);
                    } else {
                        let lookup = self.near_lookup(routes, shard, key);
                        if let Lookup::Miss(_) = lookup {
                            // Another read of the key is in flight: its answer.
                            retrieval.near_join = self.near_join(routes, shard, key, seq);
                            joined = retrieval.near_join.is_some();
                        }
                        match lookup {
                            Lookup::Miss(_) if joined => {}
                            Lookup::Hit(hit) => {
                                bump(&self.proxy.stats.get_hits);
                                self.proxy.metrics.get_hit(Backend::Redis);
                                let op = Op::NearHit {
                                    keys: retrieval.keys,
                                    hit,
                                    with_cas: retrieval.with_cas,
                                };
                                return (op, 0);
                            }
                            // Read with its remaining TTL, to bound the entry.
                            Lookup::Miss(Some(ticket)) => {
                                // `peek`: the value and its PTTL, changing nothing.
                                translate::meta_get(
                                    &mut self.cmd_buf,
                                    key,
                                    &translate::MetaGet {
                                        peek: true,
                                        ..translate::MetaGet::default()
                                    },
                                );
                                retrieval.near_lead =
                                    self.near_lead(&ticket, retrieval.keys.raw(), key);
                                retrieval.near_fill.push((0, ticket));
                            }
                            Lookup::Miss(None) => translate::get(&mut self.cmd_buf, key),
                        }
                    }
                    if !touch && migration.backfills(route.sides()) {
                        retrieval.backfill = Some(Backfill::default());
                    }
                }
            }
            if !joined {
                self.send(routes, route.primary, ReplyShape::Values, seq, 0);
            }
            retrieval.compare =
                !phase_is_redis && route.shadow.is_some() && !touch && migration.compare.sample();
            return (Op::Retrieval(retrieval), 1);
        }

        // Several keys: decide each key's backend and group.
        let shard_count = routes.redis().shards.len();
        let server_count = legacy.map_or(0, |l| l.server_count());
        let mut redis_groups: Vec<Vec<&[u8]>> = vec![Vec::new(); shard_count];
        let mut mc_groups: Vec<Vec<&[u8]>> = vec![Vec::new(); server_count];
        // Cluster mode: one group per (node, slot), numbered from
        // `shard_count` on (a cluster refuses an MGET across slots).
        let mut slot_groups: Vec<(usize, u16)> = Vec::new();
        // (side, group, index within group) per key, before parts are numbered.
        let mut placed: Vec<(Backend, u32, u32)> = Vec::with_capacity(retrieval.keys.len());
        // Near cache: (shard, key) of each key read with its TTL to fill it.
        let mut fills: Vec<(usize, &[u8])> = Vec::new();
        let near_on = !touch && crate::near_cache::get().is_some();
        let mut any_backfill = false;
        for (i, key) in retrieval.keys.iter().enumerate() {
            let route = if touch {
                routes.route(key)
            } else {
                routes.route_read(key)
            };
            let (groups, group) = match route.primary {
                Target::Memcached { server } => (&mut mc_groups, server),
                Target::Redis { shard } => {
                    any_backfill |= !touch && migration.backfills(route.sides());
                    if near_on {
                        match self.near_lookup(routes, shard, key) {
                            Lookup::Hit(hit) => {
                                let index = retrieval.near_hits.len() as u32;
                                placed.push((Backend::Redis, NEAR_GROUP, index));
                                retrieval.near_hits.push((i as u32, hit));
                                continue;
                            }
                            // A read of its own, with the TTL (as for one key).
                            Lookup::Miss(Some(ticket)) => {
                                placed.push((Backend::Redis, FILL_GROUP, fills.len() as u32));
                                fills.push((shard, key));
                                retrieval.near_fill.push((i as u32, ticket));
                                continue;
                            }
                            Lookup::Miss(None) => {}
                        }
                    }
                    let group = match routes.redis().cluster_slot(key) {
                        None => shard,
                        Some(slot) => match slot_groups.iter().position(|&g| g == (shard, slot)) {
                            Some(g) => shard_count + g,
                            None => {
                                slot_groups.push((shard, slot));
                                redis_groups.push(Vec::new());
                                redis_groups.len() - 1
                            }
                        },
                    };
                    (&mut redis_groups, group)
                }
            };
            let index = groups[group].len() as u32;
            placed.push((route.primary.backend(), group as u32, index));
            groups[group].push(key);
        }
        let mut parts = 0u32;
        let group_shard = |group: usize| match group.checked_sub(shard_count) {
            Some(g) => slot_groups.get(g).map_or(usize::MAX, |&(shard, _)| shard),
            None => group,
        };
        let mut redis_part = vec![u32::MAX; redis_groups.len()];
        let mut mc_part = vec![u32::MAX; server_count];
        // gat/gats on Redis: one GETEX per key, each its own part.
        let mut getex_part: Vec<u32> = Vec::new();
        if touch {
            for (i, key) in retrieval.keys.iter().enumerate() {
                self.near_write(key);
                if placed[i].0 == Backend::Redis {
                    translate::get_and_touch(&mut self.cmd_buf, key, expiry);
                    let target = Target::Redis {
                        shard: group_shard(placed[i].1 as usize),
                    };
                    self.send(routes, target, ReplyShape::Line, seq, parts);
                    getex_part.push(parts);
                    parts += 1;
                } else {
                    getex_part.push(u32::MAX);
                }
            }
        } else {
            for (g, group) in redis_groups.iter().enumerate() {
                if group.is_empty() {
                    continue;
                }
                translate::mget(&mut self.cmd_buf, group.iter().copied());
                let target = Target::Redis {
                    shard: group_shard(g),
                };
                self.send(routes, target, ReplyShape::Line, seq, parts);
                redis_part[g] = parts;
                parts += 1;
            }
        }
        let mut fill_part = Vec::with_capacity(fills.len());
        for &(shard, key) in &fills {
            // `peek`: the value and its PTTL, changing nothing.
            let peek = translate::MetaGet {
                peek: true,
                ..translate::MetaGet::default()
            };
            translate::meta_get(&mut self.cmd_buf, key, &peek);
            self.send(
                routes,
                Target::Redis { shard },
                ReplyShape::Line,
                seq,
                parts,
            );
            fill_part.push(parts);
            parts += 1;
        }
        for (server, group) in mc_groups.iter().enumerate() {
            if group.is_empty() {
                continue;
            }
            let _ = client::retrieval(&mut self.cmd_buf, command, exptime, group.iter());
            let target = Target::Memcached { server };
            self.send(routes, target, ReplyShape::Values, seq, parts);
            mc_part[server] = parts;
            parts += 1;
        }
        let slots = placed
            .iter()
            .enumerate()
            .map(|(i, &(side, group, index))| match side {
                Backend::Redis if touch => Slot {
                    side,
                    part: getex_part[i],
                    index: OWN_REPLY,
                },
                Backend::Redis if group == NEAR_GROUP => Slot {
                    side,
                    part: NEAR_HIT,
                    index,
                },
                Backend::Redis if group == FILL_GROUP => Slot {
                    side,
                    part: fill_part.get(index as usize).copied().unwrap_or(u32::MAX),
                    index: OWN_REPLY,
                },
                Backend::Redis => Slot {
                    side,
                    part: redis_part[group as usize],
                    index,
                },
                Backend::Memcached => Slot {
                    side,
                    part: mc_part[group as usize],
                    index,
                },
            })
            .collect();
        retrieval.plan = Plan::Slots(slots);
        if any_backfill {
            retrieval.backfill = Some(Backfill::default());
        }
        (Op::Retrieval(retrieval), parts)
    }

    /// A retrieval's Redis replies are in: look up its Redis misses in
    /// memcached (backfill). True if lookups were sent (still waiting).
    pub(in crate::session) fn start_backfill(&mut self, index: usize) -> bool {
        let routes = self.proxy.router.load();
        let migration = routes.migration();
        if routes.legacy().is_none() {
            return false;
        }
        let seq = self.pending.seq_of(index);
        let reply_to = self.reply_to(seq, 0);
        let Some(pending) = self.pending.get_mut(index) else {
            return false;
        };
        let Op::Retrieval(retrieval) = &mut pending.op else {
            return false;
        };
        let Some(backfill) = retrieval.backfill.as_mut() else {
            return false;
        };
        if backfill.started {
            return false;
        }
        backfill.started = true;
        let mut lookups = Vec::new();
        for (i, key) in retrieval.keys.iter().enumerate() {
            let Some(slot) = retrieval.plan.slot(i) else {
                continue;
            };
            if slot.side != Backend::Redis || !migration.backfills(migration.sides(key)) {
                continue;
            }
            let hit = match pending.results.get(slot.part) {
                Some(Ok(Reply::Redis(frame))) => redis_item(frame, slot.index).is_some(),
                // A failed Redis read is not a miss: don't mask the error.
                _ => true,
            };
            if let (false, Some(target)) =
                (hit, routes.target_on(Backend::Memcached, key, Access::Read))
            {
                let part = pending.results.push();
                let _ = client::meta_get(&mut self.cmd_buf, key);
                let cmd = self.cmd_buf.split().freeze();
                lookups.push((i as u32, part, target, cmd));
            }
        }
        if lookups.is_empty() {
            return false;
        }
        pending.waiting += lookups.len() as u32;
        let lane = self.lane;
        for (key_index, part, target, cmd) in lookups {
            backfill.lookups.push((key_index, part));
            let reply = crate::redis::ReplyTo {
                part,
                ..reply_to.clone()
            };
            routes.send(target, lane, cmd, ReplyShape::Meta, reply);
        }
        true
    }

    pub(super) fn render_get(&mut self, mut r: Retrieval, results: &Results) {
        let proxy = self.proxy.clone();
        let stats = &proxy.stats;
        let metrics = &proxy.metrics;
        let routes = proxy.router.load();
        let migration = routes.migration();
        let parts = results.len();
        // A key whose backend failed or timed out is neither a hit nor a
        // miss, and memcached never answers part of a get: the whole request
        // gets the error (a client retries it or counts a failure; left out,
        // the key would look like a miss of a stored key).
        let failed = (0..r.keys.len()).find_map(|i| {
            match r.plan.slot(i).and_then(|slot| results.get(slot.part)) {
                Some(Err(e)) => Some(*e),
                _ => None,
            }
        });
        if let Some(e) = failed {
            self.wbuf.extend_from_slice(e.reply_line());
            return;
        }
        // Where the next VALUE of each memcached part starts.
        // Allocated only when a memcached reply is read.
        let mut cursors: Vec<usize> = Vec::new();
        let mut compared: Option<Compared> = None;
        // Both in key order: each key takes its own off the front.
        let mut near_fill = std::mem::take(&mut r.near_fill).into_iter().peekable();
        let mut near_hits = std::mem::take(&mut r.near_hits).into_iter().peekable();
        if let (Some(_), Some(near)) = (r.touch, crate::near_cache::get()) {
            // gat/gats: again before the reply (read-your-writes).
            for key in r.keys.iter() {
                near.invalidate(key);
            }
        }
        for (i, key) in r.keys.iter().enumerate() {
            let Some(slot) = r.plan.slot(i) else {
                continue;
            };
            let near_hit = near_hits.next_if(|(k, _)| *k as usize == i);
            let ticket = near_fill.next_if(|(k, _)| *k as usize == i);
            let from_near_cache = near_hit.is_some();
            let mut found = match (near_hit, results.get(slot.part)) {
                (Some((_, hit)), _) => Some(Found {
                    flags: hit.flags,
                    cas: hit.cas,
                    data: hit.data,
                }),
                (None, Some(Ok(Reply::Redis(frame)))) => {
                    redis_item(frame, slot.index).map(|item| Found {
                        flags: item.flags,
                        cas: item.cas,
                        data: item.data,
                    })
                }
                (None, Some(Ok(Reply::Memcached(raw)))) => {
                    if cursors.len() < parts {
                        cursors.resize(parts, 0);
                    }
                    next_value(raw, &mut cursors[slot.part as usize], key)
                }
                // Errors were answered above; no result is not a miss either.
                (None, Some(Err(_)) | None) => continue,
            };
            // Per-backend hit rates count what the primary had; a value the
            // backfill found counts as a memcached hit on top.
            let primary_hit = found.is_some();
            // A get/gets answered by Redis (not by the near cache, nor a
            // gat, which invalidates anyway): before the reply is written.
            let answered_by_redis = match results.get(slot.part) {
                Some(Ok(Reply::Redis(frame))) if !from_near_cache && r.touch.is_none() => {
                    Some(frame)
                }
                _ => None,
            };
            if let (Some(frame), Some(_), false) =
                (answered_by_redis, crate::near_cache::get(), r.near_observed)
            {
                let item = found.as_ref().map(|f| Hit {
                    flags: f.flags,
                    cas: f.cas,
                    data: f.data.clone(),
                });
                let pttl = ticket.as_ref().and_then(|_| meta_get_pttl(frame));
                self.near_answered(ticket.map(|(_, t)| t), key, item.as_ref(), pttl);
            }
            if primary_hit {
                metrics.get_hit(slot.side);
            } else {
                metrics.get_miss(slot.side);
            }
            if found.is_none() && slot.side == Backend::Redis {
                found = self.backfilled(&r, i, key, results);
                if found.is_some() {
                    metrics.get_hit(Backend::Memcached);
                }
            }
            if r.sample_miss_rate {
                if let Some(detector) = &migration.rollback {
                    detector.record(slot.side, primary_hit);
                }
            }
            if let (Some(exptime), Some(_)) = (r.touch, &found) {
                // gat/gats changed the TTL on the primary: same on the shadow.
                if let Some(side) = migration.sides(key).shadow {
                    self.shadow(
                        side,
                        Bytes::copy_from_slice(key),
                        Change::Touched { exptime },
                    );
                }
            }
            if r.compare {
                compared = Some((
                    Bytes::copy_from_slice(key),
                    slot.side,
                    found.as_ref().map(|f| (f.flags, f.data.clone())),
                ));
            }
            stats.prefixes.record_get(key, found.is_some());
            match found {
                Some(item) => {
                    bump(&stats.get_hits);
                    reply::value(
                        // Straight to the output: a request with any value
                        // has an answered backend, so it ends with END.
                        &mut self.wbuf,
                        key,
                        item.flags,
                        &item.data,
                        r.with_cas.then_some(item.cas),
                    );
                }
                None => bump(&stats.get_misses),
            }
        }
        self.wbuf.extend_from_slice(reply::END);
        if let Some((key, side, primary)) = compared {
            crate::compare::spawn(proxy.clone(), key, side, primary);
        }
    }

    /// A Redis miss that the backfill found in memcached: answer with it and
    /// copy it into Redis (same flags, remaining TTL; only if Redis still has
    /// no value, so a newer write is never overwritten).
    fn backfilled(
        &mut self,
        r: &Retrieval,
        key_index: usize,
        key: &[u8],
        results: &Results,
    ) -> Option<Found> {
        let backfill = r.backfill.as_ref()?;
        let &(_, part) = backfill
            .lookups
            .iter()
            .find(|(k, _)| *k as usize == key_index)?;
        let Some(Ok(Reply::Memcached(raw))) = results.get(part) else {
            return None;
        };
        let Ok(Some((Response::MetaValue { flags, data }, _))) = client::parse_reply(raw) else {
            return None;
        };
        let item_flags = flags.client_flags().unwrap_or(0);
        let ttl = flags.ttl();
        let data = raw.slice_ref(data);
        let expiry = match ttl {
            None | Some(-1) => Expiry::Never,
            Some(t) if t <= 0 => Expiry::Past,
            Some(t) => Expiry::In(t),
        };
        let cas = self.cas.next_cas();
        let routes = self.proxy.router.load();
        translate::store(
            &mut self.cmd_buf,
            StorageCommand::Add,
            key,
            item_flags,
            cas,
            &data,
            expiry,
        );
        let target = routes.target_on(Backend::Redis, key, Access::Write)?;
        // The copy's reply is not awaited: a sequence number no request has.
        self.near_unordered = true;
        self.send(&routes, target, ReplyShape::Line, u64::MAX, 0);
        Some(Found {
            flags: item_flags,
            cas,
            data,
        })
    }
}

/// The stored item a Redis reply holds for one key: a GET/GETEX reply
/// (`OWN_REPLY`) or element `index` of an MGET reply.
pub(super) fn redis_item(frame: &Frame, index: u32) -> Option<encoding::Item> {
    let value = match (frame, index) {
        (Frame::Bulk(v), OWN_REPLY) => v,
        // The meta_get script (a near-cache fill): `{value, pttl}`.
        (Frame::Array(items), OWN_REPLY) => match items.first() {
            Some(Frame::Bulk(v)) => v,
            _ => return None,
        },
        (Frame::Array(items), i) => match items.get(i as usize) {
            Some(Frame::Bulk(v)) => v,
            _ => return None,
        },
        _ => return None,
    };
    encoding::decode(value)
}
/// The PTTL of a meta_get script reply `{value, pttl}`.
pub(super) fn meta_get_pttl(frame: &Frame) -> Option<i64> {
    match frame {
        Frame::Array(items) => match items.get(1) {
            Some(Frame::Integer(p)) => Some(*p),
            _ => None,
        },
        _ => None,
    }
}

/// The next VALUE of a memcached multi-get reply, if it is for `key`
/// (memcached answers keys in request order and skips misses).
fn next_value(raw: &Bytes, cursor: &mut usize, key: &[u8]) -> Option<Found> {
    let rest = raw.get(*cursor..)?;
    match client::parse_reply(rest) {
        Ok(Some((
            Response::Value {
                key: k,
                flags,
                data,
                cas,
            },
            used,
        ))) if k == key => {
            let data = raw.slice_ref(data);
            *cursor += used;
            Some(Found {
                flags,
                cas: cas.unwrap_or(0),
                data,
            })
        }
        _ => None,
    }
}

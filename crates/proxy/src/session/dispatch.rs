//! A parsed request becomes backend requests: each key goes to its primary
//! backend by migration phase (Redis shard by the ring, memcached server by
//! the legacy distribution).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::{client, reply, Request, RetrievalCommand, StorageCommand};
use memshift_protocol::resp::Frame;
use tokio::time::Instant;

use super::pending::{
    Backfill, Op, Plan, Retrieval, ShadowPlan, Slot, Write, WriteKind, OWN_REPLY,
};
use super::Session;
use crate::config::Phase;
use crate::legacy::{Legacy, ReplyShape};
use crate::migration::{Migration, Side};
use crate::proxy::Backends;
use crate::redis::encoding;
use crate::redis::translate::{self, Expiry};
use crate::redis::{BackendRequest, Reply};
use crate::stats::bump;

mod meta;

pub(super) use meta::MetaOp;

/// `cmd_buf` gets `CMD_BUF_CHUNK` more room when less than `CMD_BUF_LOW` is left.
const CMD_BUF_CHUNK: usize = 4 * 1024;
const CMD_BUF_LOW: usize = 512;

impl Session {
    /// Send the command in `cmd_buf` to Redis shard `shard`.
    fn send_redis(&mut self, backends: &Backends, shard: usize, seq: u64, part: u32) {
        let cmd = self.cmd_buf.split().freeze();
        let reply = self.reply_to(seq, part);
        backends.shards[shard].send(self.lane, BackendRequest { cmd, reply });
    }

    /// Send the command in `cmd_buf` to legacy server `server`.
    fn send_legacy(
        &mut self,
        legacy: &Legacy,
        server: usize,
        shape: ReplyShape,
        seq: u64,
        part: u32,
    ) {
        let cmd = self.cmd_buf.split().freeze();
        let reply = self.reply_to(seq, part);
        legacy.send(server, self.lane, cmd, shape, reply);
    }

    pub(super) fn dispatch(&mut self, request: Request<Bytes>, now: Instant) {
        let proxy = self.proxy.clone();
        let backends = proxy.backends.load();
        let migration = proxy.migration.load();
        let stats = &proxy.stats;
        let seq = self.next_seq();
        let deadline = now + backends.request_timeout;
        // Commands are split off this buffer as they are sent; keeping spare
        // room means one allocation per many requests, not one per request.
        // Requests answered here need none (an idle connection that only
        // sent `version` holds no command buffer).
        let answered_here = matches!(
            request,
            Request::Version | Request::Verbosity { .. } | Request::Stats { .. } | Request::Quit
        );
        if !answered_here && self.cmd_buf.capacity() - self.cmd_buf.len() < CMD_BUF_LOW {
            if self.cmd_buf.capacity() == 0 {
                self.cmd_buf =
                    super::pool::take_buffer(super::pool::Buffer::Command, CMD_BUF_CHUNK);
            } else {
                self.cmd_buf.reserve(CMD_BUF_CHUNK);
            }
        }
        match request {
            Request::Retrieval {
                command,
                exptime,
                keys,
            } => {
                stats
                    .cmd_get
                    .fetch_add(keys.len() as u64, Ordering::Relaxed);
                if matches!(command, RetrievalCommand::Gat | RetrievalCommand::Gats) {
                    stats
                        .cmd_touch
                        .fetch_add(keys.len() as u64, Ordering::Relaxed);
                }
                let (op, parts) =
                    self.dispatch_retrieval(&backends, &migration, command, exptime, keys, seq);
                self.push_waiting(op, parts, deadline);
            }
            Request::Storage {
                command,
                key,
                flags,
                exptime,
                cas,
                data,
                noreply,
            } => {
                bump(&stats.cmd_set);
                let route = migration.route(&key);
                match (route.primary, migration.legacy.as_deref()) {
                    (Side::Memcached, Some(legacy)) => {
                        let encoded = if command == StorageCommand::Cas {
                            client::cas(&mut self.cmd_buf, &key, flags, exptime, &data, cas, false)
                        } else {
                            client::storage(
                                &mut self.cmd_buf,
                                command,
                                &key,
                                flags,
                                exptime,
                                &data,
                                false,
                            )
                        };
                        if encoded.is_err() {
                            self.push_ready(Op::Ready(b"CLIENT_ERROR bad command line format\r\n"));
                            return;
                        }
                        let server = legacy.locate(&key);
                        self.send_legacy(legacy, server, ReplyShape::Line, seq, 0);
                    }
                    _ => {
                        let expiry = Expiry::from_exptime(exptime, unix_now());
                        let new_cas = self.cas.next_cas();
                        match command {
                            StorageCommand::Set | StorageCommand::Add | StorageCommand::Replace => {
                                translate::store(
                                    &mut self.cmd_buf,
                                    command,
                                    &key,
                                    flags,
                                    new_cas,
                                    &data,
                                    expiry,
                                )
                            }
                            StorageCommand::Cas => translate::compare_and_swap(
                                &mut self.cmd_buf,
                                &key,
                                cas,
                                flags,
                                new_cas,
                                &data,
                                expiry,
                            ),
                            StorageCommand::Append | StorageCommand::Prepend => translate::concat(
                                &mut self.cmd_buf,
                                &key,
                                command == StorageCommand::Append,
                                new_cas,
                                &data,
                                // memcached's limit for the combined item (the
                                // script takes 4 more off for non-zero flags).
                                proxy.settings.load().limits.max_data_len(key.len(), 0),
                                None,
                            ),
                        }
                        let shard = backends.locate(&key);
                        self.send_redis(&backends, shard, seq, 0);
                    }
                }
                let shadow = route.shadow.map(|side| {
                    Box::new(ShadowPlan {
                        side,
                        key,
                        flags,
                        exptime,
                        data,
                    })
                });
                let write = Write {
                    kind: WriteKind::Storage(command),
                    side: route.primary,
                    noreply,
                    shadow,
                };
                self.push_waiting(Op::Write(write), 1, deadline);
            }
            Request::Arith {
                command,
                key,
                delta,
                noreply,
            } => {
                let route = migration.route(&key);
                match (route.primary, migration.legacy.as_deref()) {
                    (Side::Memcached, Some(legacy)) => {
                        let _ = client::arith(&mut self.cmd_buf, command, &key, delta, false);
                        let server = legacy.locate(&key);
                        self.send_legacy(legacy, server, ReplyShape::Line, seq, 0);
                    }
                    _ => {
                        let new_cas = self.cas.next_cas();
                        translate::arith(&mut self.cmd_buf, &key, command, delta, new_cas);
                        let shard = backends.locate(&key);
                        self.send_redis(&backends, shard, seq, 0);
                    }
                }
                let write =
                    self.single_key_write(WriteKind::Arith(command), route, key, 0, noreply);
                self.push_waiting(Op::Write(write), 1, deadline);
            }
            Request::Delete { key, noreply } => {
                let route = migration.route(&key);
                match (route.primary, migration.legacy.as_deref()) {
                    (Side::Memcached, Some(legacy)) => {
                        let _ = client::delete(&mut self.cmd_buf, &key, false);
                        let server = legacy.locate(&key);
                        self.send_legacy(legacy, server, ReplyShape::Line, seq, 0);
                    }
                    _ => {
                        translate::delete(&mut self.cmd_buf, &key);
                        let shard = backends.locate(&key);
                        self.send_redis(&backends, shard, seq, 0);
                    }
                }
                let write = self.single_key_write(WriteKind::Delete, route, key, 0, noreply);
                self.push_waiting(Op::Write(write), 1, deadline);
            }
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                bump(&stats.cmd_touch);
                let route = migration.route(&key);
                match (route.primary, migration.legacy.as_deref()) {
                    (Side::Memcached, Some(legacy)) => {
                        let _ = client::touch(&mut self.cmd_buf, &key, exptime, false);
                        let server = legacy.locate(&key);
                        self.send_legacy(legacy, server, ReplyShape::Line, seq, 0);
                    }
                    _ => {
                        let expiry = Expiry::from_exptime(exptime, unix_now());
                        translate::touch(&mut self.cmd_buf, &key, expiry);
                        let shard = backends.locate(&key);
                        self.send_redis(&backends, shard, seq, 0);
                    }
                }
                let write = self.single_key_write(WriteKind::Touch, route, key, exptime, noreply);
                self.push_waiting(Op::Write(write), 1, deadline);
            }
            Request::FlushAll { delay, noreply } => {
                if !proxy.settings.load().allow_flush_all {
                    self.push_ready(Op::Ready(b"CLIENT_ERROR flush_all not allowed\r\n"));
                    return;
                }
                bump(&stats.cmd_flush);
                let parts = self.dispatch_flush(&backends, &migration, delay, seq);
                self.push_waiting(Op::FlushAll { noreply }, parts, deadline);
            }
            Request::Version => {
                let mut out = BytesMut::with_capacity(64);
                reply::version(&mut out, crate::stats::VERSION);
                self.push_ready(Op::ReadyBytes(out.freeze()));
            }
            Request::Verbosity { noreply } => self.push_ready(if noreply {
                Op::Silent
            } else {
                Op::Ready(reply::OK)
            }),
            Request::Stats { group } => {
                let op = match group.as_deref() {
                    None => {
                        let mut out = BytesMut::with_capacity(2048);
                        proxy.stats.render(&proxy.facts, &mut out);
                        Op::ReadyBytes(out.freeze())
                    }
                    Some(group) => stats_group(group, &proxy),
                };
                self.push_ready(op);
            }
            Request::Quit => self.push_ready(Op::Close),
            Request::MetaNoop => self.push_ready(Op::Ready(reply::META_NOOP)),
            Request::Meta {
                command,
                key,
                tokens,
                data,
                flags,
            } => self.dispatch_meta(command, key, tokens, data, flags, seq, deadline),
        }
    }

    /// Delete `key` on its primary (and shadow) without a reply to the
    /// client: the side effect of a refused oversize `set`.
    pub(super) fn delete_quietly(&mut self, key: Bytes) {
        let proxy = self.proxy.clone();
        let migration = proxy.migration.load();
        let route = migration.route(&key);
        // A sequence number no request has: the reply is dropped.
        let reply = self.reply_to(u64::MAX, 0);
        match (route.primary, migration.legacy.as_deref()) {
            (Side::Memcached, Some(legacy)) => {
                if client::delete(&mut self.cmd_buf, &key, false).is_ok() {
                    let cmd = self.cmd_buf.split().freeze();
                    legacy.send(legacy.locate(&key), self.lane, cmd, ReplyShape::Line, reply);
                }
            }
            _ => {
                let backends = proxy.backends.load();
                translate::delete(&mut self.cmd_buf, &key);
                let cmd = self.cmd_buf.split().freeze();
                let shard = backends.locate(&key);
                backends.shards[shard].send(self.lane, BackendRequest { cmd, reply });
            }
        }
        if let Some(side) = route.shadow {
            migration.shadow(side, memshift_shadow::op::ShadowOp::Delete { key });
        }
    }

    fn single_key_write(
        &self,
        kind: WriteKind,
        route: crate::migration::Route,
        key: Bytes,
        exptime: i64,
        noreply: bool,
    ) -> Write {
        Write {
            kind,
            side: route.primary,
            noreply,
            shadow: route.shadow.map(|side| {
                Box::new(ShadowPlan {
                    side,
                    key,
                    flags: 0,
                    exptime,
                    data: Bytes::new(),
                })
            }),
        }
    }

    /// get/gets/gat/gats: Redis keys grouped by shard (one MGET each; GETEX
    /// per key for gat), memcached keys grouped by server (one request
    /// each), all sent at once. Returns the op and its number of parts.
    fn dispatch_retrieval(
        &mut self,
        backends: &Backends,
        migration: &Migration,
        command: RetrievalCommand,
        exptime: i64,
        keys: memshift_protocol::memcache::Keys<Bytes>,
        seq: u64,
    ) -> (Op, u32) {
        let touch = matches!(command, RetrievalCommand::Gat | RetrievalCommand::Gats);
        let expiry = Expiry::from_exptime(exptime, unix_now());
        let legacy = migration.legacy.as_deref();
        let phase_is_redis = migration.phase == Phase::Redis;
        let mut retrieval = Retrieval {
            keys,
            with_cas: command.returns_cas(),
            plan: Plan::Single(Side::Redis),
            backfill: None,
            compare: false,
            sample_miss_rate: migration.rollback.is_some(),
            touch: touch.then_some(exptime),
        };

        if retrieval.keys.len() == 1 {
            let key = retrieval.keys.iter().next().unwrap_or_default();
            let route = migration.route(key);
            match (route.primary, legacy) {
                (Side::Memcached, Some(legacy)) => {
                    let _ = client::retrieval(&mut self.cmd_buf, command, exptime, [key]);
                    let server = legacy.locate(key);
                    let cmd = self.cmd_buf.split().freeze();
                    legacy.send(
                        server,
                        self.lane,
                        cmd,
                        ReplyShape::Values,
                        self.reply_to(seq, 0),
                    );
                    retrieval.plan = Plan::Single(Side::Memcached);
                }
                _ => {
                    if touch {
                        translate::get_and_touch(&mut self.cmd_buf, key, expiry);
                    } else {
                        translate::get(&mut self.cmd_buf, key);
                    }
                    let shard = backends.locate(key);
                    self.send_redis(backends, shard, seq, 0);
                    if !touch && migration.backfills(route) {
                        retrieval.backfill = Some(Backfill::default());
                    }
                }
            }
            retrieval.compare =
                !phase_is_redis && route.shadow.is_some() && !touch && migration.compare.sample();
            return (Op::Retrieval(retrieval), 1);
        }

        // Several keys: decide each key's backend and group.
        let shard_count = backends.shards.len();
        let server_count = legacy.map_or(0, |l| l.server_count());
        let mut redis_groups: Vec<Vec<&[u8]>> = vec![Vec::new(); shard_count];
        let mut mc_groups: Vec<Vec<&[u8]>> = vec![Vec::new(); server_count];
        // (side, group, index within group) per key, before parts are numbered.
        let mut placed: Vec<(Side, u32, u32)> = Vec::with_capacity(retrieval.keys.len());
        let mut any_backfill = false;
        for key in retrieval.keys.iter() {
            let route = migration.route(key);
            match (route.primary, legacy) {
                (Side::Memcached, Some(legacy)) => {
                    let server = legacy.locate(key);
                    placed.push((
                        Side::Memcached,
                        server as u32,
                        mc_groups[server].len() as u32,
                    ));
                    mc_groups[server].push(key);
                }
                _ => {
                    let shard = backends.locate(key);
                    placed.push((Side::Redis, shard as u32, redis_groups[shard].len() as u32));
                    redis_groups[shard].push(key);
                    any_backfill |= !touch && migration.backfills(route);
                }
            }
        }
        let mut parts = 0u32;
        let mut redis_part = vec![u32::MAX; shard_count];
        let mut mc_part = vec![u32::MAX; server_count];
        // gat/gats on Redis: one GETEX per key, each its own part.
        let mut getex_part: Vec<u32> = Vec::new();
        if touch {
            for (i, key) in retrieval.keys.iter().enumerate() {
                if placed[i].0 == Side::Redis {
                    translate::get_and_touch(&mut self.cmd_buf, key, expiry);
                    self.send_redis(backends, placed[i].1 as usize, seq, parts);
                    getex_part.push(parts);
                    parts += 1;
                } else {
                    getex_part.push(u32::MAX);
                }
            }
        } else {
            for (shard, group) in redis_groups.iter().enumerate() {
                if group.is_empty() {
                    continue;
                }
                translate::mget(&mut self.cmd_buf, group.iter().copied());
                self.send_redis(backends, shard, seq, parts);
                redis_part[shard] = parts;
                parts += 1;
            }
        }
        if let Some(legacy) = legacy {
            for (server, group) in mc_groups.iter().enumerate() {
                if group.is_empty() {
                    continue;
                }
                let _ = client::retrieval(&mut self.cmd_buf, command, exptime, group.iter());
                self.send_legacy(legacy, server, ReplyShape::Values, seq, parts);
                mc_part[server] = parts;
                parts += 1;
            }
        }
        let slots = placed
            .iter()
            .enumerate()
            .map(|(i, &(side, group, index))| match side {
                Side::Redis if touch => Slot {
                    side,
                    part: getex_part[i],
                    index: OWN_REPLY,
                },
                Side::Redis => Slot {
                    side,
                    part: redis_part[group as usize],
                    index,
                },
                Side::Memcached => Slot {
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

    /// flush_all: every Redis shard, and the legacy pool when memcached is
    /// the primary or the shadow of anything. With a delay, memcached's own
    /// servers take the delay; Redis is flushed by a timer.
    fn dispatch_flush(
        &mut self,
        backends: &Backends,
        migration: &Migration,
        delay: i64,
        seq: u64,
    ) -> u32 {
        let mut parts = 0;
        if let Some(legacy) = migration.legacy.as_deref() {
            for server in 0..legacy.server_count() {
                client::flush_all(&mut self.cmd_buf, (delay > 0).then_some(delay), false);
                self.send_legacy(legacy, server, ReplyShape::Line, seq, parts);
                parts += 1;
            }
        }
        if delay > 0 {
            let proxy = self.proxy.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_secs(delay as u64)).await;
                Arc::clone(&proxy).flush_all_detached().await;
            });
            return parts;
        }
        for shard in 0..backends.shards.len() {
            translate::flush(&mut self.cmd_buf);
            self.send_redis(backends, shard, seq, parts);
            parts += 1;
        }
        parts
    }

    /// A retrieval's Redis replies are in: look up its Redis misses in
    /// memcached (backfill). True if lookups were sent (still waiting).
    pub(super) fn start_backfill(&mut self, index: usize) -> bool {
        let migration = self.proxy.migration.load();
        let Some(legacy) = migration.legacy.clone() else {
            return false;
        };
        let seq = self.base_seq + index as u64;
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
            if slot.side != Side::Redis || !migration.backfills(migration.route(key)) {
                continue;
            }
            let hit = match pending.results.get(slot.part) {
                Some(Ok(Reply::Redis(frame))) => redis_item(frame, slot.index).is_some(),
                // A failed Redis read is not a miss: don't mask the error.
                _ => true,
            };
            if !hit {
                let part = pending.results.push();
                let _ = client::meta_get(&mut self.cmd_buf, key);
                let cmd = self.cmd_buf.split().freeze();
                lookups.push((i as u32, part, legacy.locate(key), cmd));
            }
        }
        if lookups.is_empty() {
            return false;
        }
        pending.waiting += lookups.len() as u32;
        let lane = self.lane;
        for (key_index, part, server, cmd) in lookups {
            backfill.lookups.push((key_index, part));
            let reply = crate::redis::ReplyTo {
                part,
                ..reply_to.clone()
            };
            legacy.send(server, lane, cmd, ReplyShape::Meta, reply);
        }
        true
    }
}

/// The stored item a Redis reply holds for one key: a GET/GETEX reply
/// (`OWN_REPLY`) or element `index` of an MGET reply.
pub(super) fn redis_item(frame: &Frame, index: u32) -> Option<encoding::Item> {
    let value = match (frame, index) {
        (Frame::Bulk(v), OWN_REPLY) => v,
        (Frame::Array(items), i) => match items.get(i as usize) {
            Some(Frame::Bulk(v)) => v,
            _ => return None,
        },
        _ => return None,
    };
    encoding::decode(value)
}

/// `stats <group>`: what makes sense for a proxy, in memcached's format.
fn stats_group(group: &[u8], proxy: &crate::proxy::Proxy) -> Op {
    match group {
        // A proxy holds no items or slabs: report the empty groups the way an
        // empty memcached does, so stats scrapers keep working.
        b"items" | b"sizes" | b"conns" => Op::Ready(reply::END),
        b"slabs" => Op::Ready(b"STAT active_slabs 0\r\nSTAT total_malloced 0\r\nEND\r\n"),
        b"settings" => {
            let mut out = BytesMut::new();
            reply::stat(&mut out, "maxconns", proxy.facts.max_connections);
            let settings = proxy.settings.load();
            reply::stat(&mut out, "item_size_max", settings.limits.max_item_size);
            reply::stat(&mut out, "num_threads", proxy.facts.threads);
            reply::stat(&mut out, "evictions", "on");
            reply::stat(&mut out, "cas_enabled", "yes");
            out.extend_from_slice(reply::END);
            Op::ReadyBytes(out.freeze())
        }
        b"reset" => Op::Ready(reply::RESET),
        _ => Op::Ready(reply::ERROR),
    }
}

pub(super) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

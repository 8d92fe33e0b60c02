//! The near cache (`crate::near_cache`) on the RESP side, with the same
//! guarantees as memcached get/gets (`session::cmd::near`):
//!
//! * GET and MGET keys of items are looked up before dispatch; a hit is
//!   answered from memory. A miss the cache admits is read with its PTTL
//!   (`translate::fill_read`: `[value or nil, pttl]`, a raw string as it
//!   is, a key of another type GET's own WRONGTYPE) under a ticket taken
//!   before the read is sent; every answer read from Redis drops older
//!   copies of the item on every thread and fills with the ticket, just
//!   before the reply is written.
//! * Only memshift items are cached: a raw Redis string (no item header)
//!   is observed as absent, as memcached clients see it, and always read
//!   from Redis.
//! * Writes (any command that is not a read, `cmd::reads_only`) invalidate
//!   their keys when dispatched and again just before their reply;
//!   FLUSHDB/FLUSHALL drop every shard's entries both times.

use bytes::Bytes;
use memshift_protocol::resp::reply as out;
use memshift_protocol::resp::{CommandWriter, Frame};

use super::super::pending::{NearAfter, NearRead, Pending, Render, NEAR_HIT, OWN_REPLY};
use super::super::RespSession;
use super::Placed;
use crate::near_cache::store::{self, Hit, Limits, Lookup};
use crate::proxy::Proxy;
use crate::redis::{encoding, translate};
use crate::router::Routes;

/// `key`'s near-cache lookup for a read from shard `shard`.
fn lookup(routes: &Routes, shard: usize, key: &[u8], limits: &Limits) -> Lookup {
    let tracking = routes
        .redis()
        .shards
        .get(shard)
        .and_then(|s| s.tracking.as_ref());
    match (crate::near_cache::get(), tracking) {
        (Some(near), Some(tracking)) => {
            store::lookup(near, tracking, key, limits, tokio::time::Instant::now())
        }
        _ => Lookup::Miss(None),
    }
}

/// Every shard's entries are dropped (FLUSHDB/FLUSHALL).
pub(super) fn drop_all(routes: &Routes) {
    for shard in &routes.redis().shards {
        if let Some(t) = &shard.tracking {
            t.drop_all();
        }
    }
}

/// The near cache's part of `p`, just before its reply is written.
pub(in crate::resp) fn near_before_reply(proxy: &Proxy, p: &mut Pending) {
    let Some(near) = crate::near_cache::get() else {
        return;
    };
    match std::mem::take(&mut p.near) {
        NearAfter::Nothing => {}
        NearAfter::Written(hash) => near.invalidate_hash(hash),
        NearAfter::WrittenMany(hashes) => hashes.iter().for_each(|&h| near.invalidate_hash(h)),
        NearAfter::Flushed => drop_all(&proxy.router.load()),
        NearAfter::Read(read) => {
            let limits = proxy.settings.load().near_cache;
            answered(near, p, *read, &limits);
        }
        NearAfter::ReadMany(reads) => {
            let limits = proxy.settings.load().near_cache;
            for read in reads {
                answered(near, p, read, &limits);
            }
        }
    }
}

/// `read`'s answer (if one came): drop older copies, fill with its ticket.
fn answered(near: &crate::near_cache::NearCache, p: &Pending, read: NearRead, limits: &Limits) {
    let Some(frame) = p.frame(read.part) else {
        // A backend error or timeout: nothing was read.
        return;
    };
    let bulk = |f: Option<&Frame>| match f {
        Some(Frame::Bulk(v)) => encoding::decode(v),
        _ => None,
    };
    let (item, pttl) = match frame {
        Frame::Bulk(_) if read.index == OWN_REPLY => (bulk(Some(frame)), None),
        Frame::Array(items) if read.index == OWN_REPLY => {
            (bulk(items.first()), translate::fill_pttl(frame))
        }
        Frame::Array(items) => (bulk(items.get(read.index as usize)), None),
        // nil, WRONGTYPE: no item.
        _ => (None, None),
    };
    let hit = item.map(|i| Hit {
        flags: i.flags,
        cas: i.cas,
        data: i.data,
    });
    store::answered(near, read.ticket, &read.key, hit.as_ref(), pttl, limits);
}

impl RespSession {
    /// GET with the near cache on.
    pub(super) fn get_near(&mut self, raw: Option<Bytes>) {
        let key = self.args[1].clone();
        let routes = self.proxy.router.load();
        let shard = match Self::place(&routes, &key) {
            Placed::Shard(s) => s,
            Placed::Refused(text) => return self.push_error(text),
        };
        let limits = self.proxy.settings.load().near_cache;
        let (cmd, render, ticket) = match lookup(&routes, shard, &key, &limits) {
            Lookup::Hit(hit) => return self.push_bytes(|b| out::bulk(b, hit.data())),
            Lookup::Miss(Some(ticket)) => (self.fill_read(&key), Render::FillValue, Some(ticket)),
            Lookup::Miss(None) => (
                raw.unwrap_or_else(|| self.encode_args()),
                Render::Value,
                None,
            ),
        };
        let fills = ticket.is_some();
        let seq = self.push_waiting(render, 1);
        if let Some(p) = self.pending.back_mut() {
            p.near = NearAfter::Read(Box::new(NearRead {
                key,
                ticket,
                part: 0,
                index: OWN_REPLY,
            }));
        }
        // A fill reads the primary: the near cache never holds a replica's value.
        match fills {
            true => routes
                .redis()
                .send(shard, self.lane, cmd, self.reply_to(seq, 0)),
            false => self.send_keyed(&routes, shard, cmd, seq, 0),
        }
    }

    /// MGET with the near cache on: hits answered here, admitted misses
    /// read one by one to fill it, the rest in one MGET per shard (and
    /// slot); merged in the client's order.
    pub(super) fn mget_near(&mut self) {
        let routes = self.proxy.router.load();
        let redis = routes.redis();
        let limits = self.proxy.settings.load().near_cache;
        let n = self.args.len() - 1;
        let mut slots = vec![(0u32, 0u32); n];
        let mut hits: Vec<Bytes> = Vec::new();
        // (shard, slot, keys) per MGET; (shard, key index, ticket) per fill.
        let mut groups: Vec<(usize, Option<u16>, Vec<u32>)> = Vec::new();
        let mut fills = Vec::new();
        for (i, slot_of_key) in slots.iter_mut().enumerate() {
            let key = &self.args[1 + i];
            let shard = match Self::place(&routes, key) {
                Placed::Shard(s) => s,
                Placed::Refused(text) => return self.push_error(text),
            };
            match lookup(&routes, shard, key, &limits) {
                Lookup::Hit(hit) => {
                    *slot_of_key = (NEAR_HIT, hits.len() as u32);
                    hits.push(hit.into_data());
                }
                Lookup::Miss(Some(ticket)) => fills.push((shard, i, ticket)),
                Lookup::Miss(None) => {
                    let slot = redis.cluster_slot(key);
                    let g = match groups
                        .iter()
                        .position(|(s, sl, _)| *s == shard && *sl == slot)
                    {
                        Some(g) => g,
                        None => {
                            groups.push((shard, slot, Vec::new()));
                            groups.len() - 1
                        }
                    };
                    *slot_of_key = (g as u32, groups[g].2.len() as u32);
                    groups[g].2.push(i as u32);
                }
            }
        }
        let mut reads = Vec::with_capacity(n - hits.len());
        for (g, (_, _, keys)) in groups.iter().enumerate() {
            for (index, &k) in keys.iter().enumerate() {
                reads.push(NearRead {
                    key: self.args[1 + k as usize].clone(),
                    ticket: None,
                    part: g as u32,
                    index: index as u32,
                });
            }
        }
        let parts = groups.len() + fills.len();
        let mut fill_cmds = Vec::with_capacity(fills.len());
        for (j, (shard, i, ticket)) in fills.into_iter().enumerate() {
            let part = (groups.len() + j) as u32;
            slots[i] = (part, OWN_REPLY);
            let key = self.args[1 + i].clone();
            fill_cmds.push((shard, self.fill_read(&key)));
            reads.push(NearRead {
                key,
                ticket: Some(ticket),
                part,
                index: OWN_REPLY,
            });
        }
        let seq = self.push_waiting(Render::Mget { slots, hits }, parts);
        if let Some(p) = self.pending.back_mut() {
            p.near = NearAfter::ReadMany(reads);
        }
        for (part, (shard, _, keys)) in groups.iter().enumerate() {
            self.cmd_buf.clear();
            let mut w = CommandWriter::new(&mut self.cmd_buf, 1 + keys.len());
            w.arg(b"MGET");
            for &k in keys {
                w.arg(&self.args[1 + k as usize]);
            }
            drop(w);
            let cmd = self.cmd_buf.split().freeze();
            redis.send_read(*shard, self.lane, cmd, self.reply_to(seq, part as u32));
        }
        for (j, (shard, cmd)) in fill_cmds.into_iter().enumerate() {
            let part = (groups.len() + j) as u32;
            redis.send(shard, self.lane, cmd, self.reply_to(seq, part));
        }
    }

    /// The fill read of `key` (`translate::fill_read`).
    fn fill_read(&mut self, key: &[u8]) -> Bytes {
        self.cmd_buf.clear();
        translate::fill_read(&mut self.cmd_buf, key);
        self.cmd_buf.split().freeze()
    }
}

//! The reply to get/gets/gat/gats: each key's answer in request order, from
//! the near cache, a Redis reply (GET, GETEX, an MGET element, a fill
//! read) or a memcached multi-get reply; hits and misses counted, the near
//! cache told what Redis answered, backfilled values, the gat's shadow
//! touch, the sampled compare.
//!
//! A key whose backend failed is neither a hit nor a miss. Under
//! `redis.read_errors_as_misses` (the default) a failed Redis read is
//! answered as a miss (counted, see `crate::read_errors`) and the other
//! keys as usual; otherwise, and for a failed legacy memcached read, the
//! whole request gets the error (memcached never answers part of a get).

use bytes::Bytes;
use memshift_protocol::memcache::client::{self, Response};
use memshift_protocol::resp::Frame;

use super::super::super::pending::{Results, Retrieval, Slot, NEAR_HIT, OWN_REPLY};
use super::super::super::Session;
use super::super::shadow::Change;
use super::super::sink::Sink;
use crate::near_cache::store::{Cached, Hit, Ticket};
use crate::read_errors::ReadFailure;
use crate::redis::{encoding, translate, Reply};
use crate::router::{Access, Backend, Routes};
use crate::stats::bump;

/// A read to compare with the other backend: key, side that answered, and
/// its answer (flags, data).
type Compared = (Bytes, Backend, Option<(u32, Bytes)>);

/// One key's answer.
pub(super) struct Found {
    pub flags: u32,
    pub cas: u64,
    pub data: Bytes,
}

impl From<Cached> for Found {
    fn from(hit: Cached) -> Found {
        Found {
            flags: hit.flags(),
            cas: hit.cas(),
            data: hit.into_data(),
        }
    }
}

impl Session {
    pub(in crate::session) fn render_get<S: Sink>(
        &mut self,
        mut r: Retrieval,
        results: &Results,
        sink: &mut S,
    ) {
        // Not a clone of the `Arc<Proxy>`: its count is one line every
        // worker thread writes (`docs/multicore.md`).
        let routes = self.proxy.router.load();
        let as_misses = routes.redis().read_errors.as_misses;
        if let Some(why) = request_failure(&r, results, as_misses) {
            let line = why.reply_line();
            sink.text(&mut self.wbuf, |out| out.extend_from_slice(line));
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
            let found = match near_hit {
                Some((_, hit)) => Some(Found::from(hit)),
                None => match ReadFailure::of(results.get(slot.part)) {
                    // Only Redis reads get here failed (see `request_failure`).
                    Some(why) => {
                        let access = r.touch.map_or(Access::Read, |_| Access::Write);
                        self.read_failed_as_miss(&routes, key, access, why);
                        self.proxy.stats.prefixes.record_get(key, false);
                        continue;
                    }
                    None => {
                        let found = self.backend_answer(key, slot, results, &mut cursors);
                        let ticket = ticket.map(|(_, t)| t);
                        self.near_observe(&r, slot, results, ticket, key, found.as_ref());
                        found
                    }
                },
            };
            let found = self.count_and_backfill(&r, i, key, slot, results, &routes, found);
            if r.compare {
                compared = Some((
                    Bytes::copy_from_slice(key),
                    slot.side,
                    found.as_ref().map(|f| (f.flags, f.data.clone())),
                ));
            }
            self.write_value(&r, key, found, sink);
        }
        sink.end_items(&mut self.wbuf);
        if let Some((key, side, primary)) = compared {
            crate::compare::spawn(self.proxy.clone(), key, side, primary);
        }
    }

    /// A read of `key` whose shard failed with `why` is answered as a miss
    /// (`redis.read_errors_as_misses`): count it on the key's shard.
    pub(in crate::session::cmd) fn read_failed_as_miss(
        &self,
        routes: &Routes,
        key: &[u8],
        access: Access,
        why: ReadFailure,
    ) {
        let stats = &self.proxy.stats;
        let redis = routes.redis();
        let shard = redis.locate_for(key, access);
        redis.read_errors.answered_as_miss(shard, why, stats);
        bump(&stats.get_misses);
    }

    /// `key`'s item in its backend's reply (`slot`), if it has one.
    fn backend_answer(
        &self,
        key: &[u8],
        slot: Slot,
        results: &Results,
        cursors: &mut Vec<usize>,
    ) -> Option<Found> {
        match results.get(slot.part) {
            Some(Ok(Reply::Redis(frame))) => redis_item(frame, slot.index).map(|item| Found {
                flags: item.flags,
                cas: item.cas,
                data: item.data,
            }),
            Some(Ok(Reply::Memcached(raw))) => {
                if cursors.len() < results.len() {
                    cursors.resize(results.len(), 0);
                }
                next_value(raw, &mut cursors[slot.part as usize], key)
            }
            // Failures were answered by the caller.
            Some(Err(_)) | None => None,
        }
    }

    /// A get/gets answered by Redis (not by the near cache, nor a gat,
    /// which invalidates anyway): tell the near cache, before the reply is
    /// written (drops older copies; fills with `ticket`).
    fn near_observe(
        &self,
        r: &Retrieval,
        slot: Slot,
        results: &Results,
        ticket: Option<Ticket>,
        key: &[u8],
        found: Option<&Found>,
    ) {
        let Some(Ok(Reply::Redis(frame))) = results.get(slot.part) else {
            return;
        };
        if r.touch.is_some() || r.near_observed || crate::near_cache::get().is_none() {
            return;
        }
        let item = found.map(|f| Hit {
            flags: f.flags,
            cas: f.cas,
            data: f.data.clone(),
        });
        let pttl = ticket.as_ref().and_then(|_| translate::fill_pttl(frame));
        self.near_answered(ticket, key, item.as_ref(), pttl);
    }

    /// Hit and miss counts of the primary, the backfill of a Redis miss,
    /// the rollback detector's sample, the gat's shadow touch. Returns the
    /// key's answer (the backfilled value of a Redis miss).
    #[allow(clippy::too_many_arguments)]
    fn count_and_backfill(
        &mut self,
        r: &Retrieval,
        i: usize,
        key: &[u8],
        slot: Slot,
        results: &Results,
        routes: &Routes,
        mut found: Option<Found>,
    ) -> Option<Found> {
        let metrics = &self.proxy.metrics;
        let migration = routes.migration();
        // Per-backend hit rates count what the primary had; a value the
        // backfill found counts as a memcached hit on top.
        let primary_hit = found.is_some();
        if primary_hit {
            metrics.get_hit(slot.side);
        } else {
            metrics.get_miss(slot.side);
        }
        if found.is_none() && slot.side == Backend::Redis {
            found = self.backfilled(r, i, key, results);
            if found.is_some() {
                self.proxy.metrics.get_hit(Backend::Memcached);
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
                let key = Bytes::copy_from_slice(key);
                self.shadow(side, key, Change::Touched { exptime });
            }
        }
        found
    }

    /// A hit's item (`VALUE ...` in text; straight to the output: a request
    /// with any value has an answered backend, so it ends with END),
    /// counted.
    fn write_value<S: Sink>(
        &mut self,
        r: &Retrieval,
        key: &[u8],
        found: Option<Found>,
        sink: &mut S,
    ) {
        let stats = &self.proxy.stats;
        stats.prefixes.record_get(key, found.is_some());
        let Some(item) = found else {
            bump(&stats.get_misses);
            return;
        };
        bump(&stats.get_hits);
        let cas = r.with_cas.then_some(item.cas);
        sink.item(&mut self.wbuf, key, item.flags, &item.data, cas);
    }
}

/// Why the whole request fails: a key whose backend failed and is not
/// answered as a miss (a legacy memcached server's, or any with
/// `read_errors_as_misses` off). Keys the near cache answered have no part.
fn request_failure(r: &Retrieval, results: &Results, as_misses: bool) -> Option<ReadFailure> {
    (0..r.keys.len()).find_map(|i| {
        let slot = r.plan.slot(i).filter(|s| s.part != NEAR_HIT)?;
        let why = ReadFailure::of(results.get(slot.part))?;
        (!as_misses || slot.side != Backend::Redis).then_some(why)
    })
}

/// The stored item a Redis reply holds for one key: a GET/GETEX reply
/// (`OWN_REPLY`) or element `index` of an MGET reply.
pub(in crate::session::cmd) fn redis_item(frame: &Frame, index: u32) -> Option<encoding::Item> {
    let value = match (frame, index) {
        (Frame::Bulk(v), OWN_REPLY) => v,
        // A near-cache fill (`translate::fill_read`): `[value, pttl]`.
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

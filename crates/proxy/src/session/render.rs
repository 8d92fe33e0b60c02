//! A finished request becomes reply bytes, in memcached's format, plus the
//! side effects of its outcome: counters, shadow writes, backfill copies,
//! compare samples.

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::client::{self, Response};
use memshift_protocol::memcache::{reply, ArithCommand, StorageCommand};
use memshift_protocol::resp::Frame;
use memshift_shadow::op::{unix_now as shadow_now, Expiry as ShadowExpiry, ShadowOp};

use super::dispatch::redis_item;
use super::pending::{Op, Pending, Results, Retrieval, Write, WriteKind};
use super::Session;
use crate::redis::translate::{self, ArithOutcome, Expiry, WriteOutcome};
use crate::redis::{BackendError, Reply};
use crate::router::{Backend, ReplyShape};
use crate::stats::bump;

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
    pub(super) fn render(&mut self, pending: Pending) {
        match pending.op {
            Op::Ready(line) => self.wbuf.extend_from_slice(line),
            Op::ReadyBytes(bytes) => self.wbuf.extend_from_slice(&bytes),
            Op::Silent | Op::Close => {}
            Op::Retrieval(retrieval) => self.render_retrieval(retrieval, &pending.results),
            Op::Write(write) => self.render_write(write, &pending.results),
            Op::Meta(op) => self.render_meta(*op, &pending.results),
            Op::FlushAll { noreply } => {
                let mut failed = None;
                for part in 0..pending.results.len() as u32 {
                    let line: Option<&'static [u8]> = match pending.results.get(part) {
                        Some(Ok(Reply::Redis(Frame::Simple(_)))) => None,
                        Some(Ok(Reply::Memcached(r))) if r.starts_with(b"OK") => None,
                        Some(Err(e)) => Some(e.reply_line()),
                        _ => Some(WriteOutcome::Failed.line()),
                    };
                    failed = failed.or(line);
                }
                // Both backends were flushed directly: nothing to shadow.
                if !noreply {
                    self.wbuf.extend_from_slice(failed.unwrap_or(reply::OK));
                }
            }
        }
    }

    fn render_retrieval(&mut self, r: Retrieval, results: &Results) {
        let proxy = self.proxy.clone();
        let stats = &proxy.stats;
        let metrics = &proxy.metrics;
        let routes = proxy.router.load();
        let migration = routes.migration();
        let parts = results.len();
        // Where the next VALUE of each memcached part starts.
        // Allocated only when a memcached reply is read.
        let mut cursors: Vec<usize> = Vec::new();
        let mut answered = 0usize;
        let mut first_error: Option<BackendError> = None;
        let mut compared: Option<Compared> = None;
        for (i, key) in r.keys.iter().enumerate() {
            let Some(slot) = r.plan.slot(i) else {
                continue;
            };
            let mut found = match results.get(slot.part) {
                Some(Ok(Reply::Redis(frame))) => redis_item(frame, slot.index).map(|item| Found {
                    flags: item.flags,
                    cas: item.cas,
                    data: item.data,
                }),
                Some(Ok(Reply::Memcached(raw))) => {
                    if cursors.len() < parts {
                        cursors.resize(parts, 0);
                    }
                    next_value(raw, &mut cursors[slot.part as usize], key)
                }
                Some(Err(e)) => {
                    first_error.get_or_insert(*e);
                    None
                }
                None => None,
            };
            // A key whose backend failed is neither a hit nor a miss.
            let failed = !matches!(results.get(slot.part), Some(Ok(_)));
            if failed {
                continue;
            }
            answered += 1;
            // Per-backend hit rates count what the primary had; a value the
            // backfill found counts as a memcached hit on top.
            let primary_hit = found.is_some();
            if primary_hit {
                metrics.get_hit(crate::to_metrics::backend(slot.side));
            } else {
                metrics.get_miss(crate::to_metrics::backend(slot.side));
            }
            if found.is_none() && slot.side == Backend::Redis {
                found = self.backfilled(&r, i, key, results);
                if found.is_some() {
                    metrics.get_hit(crate::to_metrics::backend(Backend::Memcached));
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
                    migration.shadow(
                        side,
                        ShadowOp::Touch {
                            key: Bytes::copy_from_slice(key),
                            expiry: ShadowExpiry::from_memcached(exptime, shadow_now()),
                        },
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
        match first_error {
            // When no backend involved answered, the request failed; keys of
            // a failed backend in a multi-get are left out (like misses) so
            // the others are still served.
            Some(e) if answered == 0 => self.wbuf.extend_from_slice(e.reply_line()),
            _ => self.wbuf.extend_from_slice(reply::END),
        }
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
        let target = routes.target_on(Backend::Redis, key)?;
        // The copy's reply is not awaited: a sequence number no request has.
        self.send(&routes, target, ReplyShape::Line, u64::MAX, 0);
        Some(Found {
            flags: item_flags,
            cas,
            data,
        })
    }

    fn render_write(&mut self, w: Write, results: &Results) {
        let proxy = self.proxy.clone();
        let stats = &proxy.stats;
        let result = results.get(0);
        let outcome = match (w.side, result) {
            (_, Some(Err(e))) => Outcome::Error(e.reply_line()),
            (_, None) => Outcome::Error(BackendError::Timeout.reply_line()),
            (Backend::Redis, Some(Ok(Reply::Redis(frame)))) => redis_outcome(w.kind, frame),
            (Backend::Memcached, Some(Ok(Reply::Memcached(raw)))) => memcached_outcome(raw),
            _ => Outcome::Error(WriteOutcome::Failed.line()),
        };
        // memcached's counters.
        match (w.kind, &outcome) {
            (WriteKind::Storage(StorageCommand::Cas), Outcome::Known(o)) => match o {
                WriteOutcome::Stored => bump(&stats.cas_hits),
                WriteOutcome::Exists => bump(&stats.cas_badval),
                WriteOutcome::NotFound => bump(&stats.cas_misses),
                _ => {}
            },
            (WriteKind::Arith(c), Outcome::Number(_) | Outcome::Known(WriteOutcome::NotFound)) => {
                let hit = matches!(outcome, Outcome::Number(_));
                let counter = match (c, hit) {
                    (ArithCommand::Incr, true) => &stats.incr_hits,
                    (ArithCommand::Incr, false) => &stats.incr_misses,
                    (ArithCommand::Decr, true) => &stats.decr_hits,
                    (ArithCommand::Decr, false) => &stats.decr_misses,
                };
                bump(counter);
            }
            (WriteKind::Delete, Outcome::Known(WriteOutcome::Deleted)) => bump(&stats.delete_hits),
            (WriteKind::Delete, Outcome::Known(WriteOutcome::NotFound)) => {
                bump(&stats.delete_misses)
            }
            (WriteKind::Touch, Outcome::Known(WriteOutcome::Touched)) => bump(&stats.touch_hits),
            (WriteKind::Touch, Outcome::Known(WriteOutcome::NotFound)) => bump(&stats.touch_misses),
            _ => {}
        }
        if let Some(plan) = w.shadow {
            // The shadow gets the resulting state when it is known, and a
            // delete when it is not: never a stale value.
            let now = shadow_now();
            let op = match (w.kind, &outcome) {
                (
                    WriteKind::Storage(
                        StorageCommand::Set
                        | StorageCommand::Add
                        | StorageCommand::Replace
                        | StorageCommand::Cas,
                    ),
                    Outcome::Known(WriteOutcome::Stored),
                ) => ShadowOp::Set {
                    key: plan.key,
                    flags: plan.flags,
                    expiry: ShadowExpiry::from_memcached(plan.exptime, now),
                    data: plan.data,
                },
                (WriteKind::Touch, Outcome::Known(WriteOutcome::Touched)) => ShadowOp::Touch {
                    key: plan.key,
                    expiry: ShadowExpiry::from_memcached(plan.exptime, now),
                },
                _ => ShadowOp::Delete { key: plan.key },
            };
            // A write the primary refused changes nothing: skip it.
            let unchanged = matches!(outcome, Outcome::Unchanged(_) | Outcome::RawUnchanged(_))
                || matches!(
                    (w.kind, &outcome),
                    (
                        WriteKind::Storage(StorageCommand::Add),
                        Outcome::Known(WriteOutcome::NotStored)
                    ) | (
                        WriteKind::Storage(StorageCommand::Cas),
                        Outcome::Known(WriteOutcome::Exists)
                    )
                );
            if !unchanged {
                proxy.router.migration().shadow(plan.side, op);
            }
        }
        if w.noreply {
            return;
        }
        match outcome {
            Outcome::Known(o) => self.wbuf.extend_from_slice(o.line()),
            Outcome::Number(raw) | Outcome::Raw(raw) | Outcome::RawUnchanged(raw) => {
                self.wbuf.extend_from_slice(&raw)
            }
            Outcome::Error(line) | Outcome::Unchanged(line) => self.wbuf.extend_from_slice(line),
        }
    }
}

/// A write's outcome, ready to encode.
enum Outcome {
    Known(WriteOutcome),
    /// incr/decr result, with its line ending.
    Number(Bytes),
    /// A memcached reply passed through as is (e.g. SERVER_ERROR …).
    Raw(Bytes),
    /// Refused without changing the item (e.g. incr of a non-number).
    Unchanged(&'static [u8]),
    /// A memcached client error: the item was not touched.
    RawUnchanged(Bytes),
    Error(&'static [u8]),
}

fn redis_outcome(kind: WriteKind, frame: &Frame) -> Outcome {
    match kind {
        WriteKind::Storage(command) => Outcome::Known(translate::storage_outcome(command, frame)),
        WriteKind::Delete => Outcome::Known(translate::delete_outcome(frame)),
        WriteKind::Touch => Outcome::Known(translate::touch_outcome(frame)),
        WriteKind::Arith(_) => match translate::arith_outcome(frame) {
            ArithOutcome::Value(v) => {
                let mut line = BytesMut::with_capacity(v.len() + 2);
                line.extend_from_slice(v);
                line.extend_from_slice(b"\r\n");
                Outcome::Number(line.freeze())
            }
            ArithOutcome::NotFound => Outcome::Known(WriteOutcome::NotFound),
            ArithOutcome::NonNumeric => Outcome::Unchanged(
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
            ArithOutcome::Failed => Outcome::Known(WriteOutcome::Failed),
        },
    }
}

/// A legacy memcached reply line, classified (and passed through as is).
fn memcached_outcome(raw: &Bytes) -> Outcome {
    match client::parse_reply(raw) {
        Ok(Some((Response::Stored, _))) => Outcome::Known(WriteOutcome::Stored),
        Ok(Some((Response::NotStored, _))) => Outcome::Known(WriteOutcome::NotStored),
        Ok(Some((Response::Exists, _))) => Outcome::Known(WriteOutcome::Exists),
        Ok(Some((Response::NotFound, _))) => Outcome::Known(WriteOutcome::NotFound),
        Ok(Some((Response::Deleted, _))) => Outcome::Known(WriteOutcome::Deleted),
        Ok(Some((Response::Touched, _))) => Outcome::Known(WriteOutcome::Touched),
        Ok(Some((Response::Number(_), _))) => Outcome::Number(raw.clone()),
        Ok(Some((Response::ClientError(_), _))) => Outcome::RawUnchanged(raw.clone()),
        _ => Outcome::Raw(raw.clone()),
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

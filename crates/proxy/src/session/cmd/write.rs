//! The outcome of a single-key write (storage, incr/decr, delete, touch)
//! on either backend: the reply line, memcached's counters, and what the
//! shadow gets.

use bytes::{Bytes, BytesMut};
use memshift_protocol::memcache::client::{self, Response};
use memshift_protocol::memcache::{ArithCommand, StorageCommand};
use memshift_protocol::resp::Frame;

use super::super::pending::{Results, ShadowPlan, Write, WriteKind};
use super::super::Session;
use super::shadow::Change;
use crate::redis::translate::{self, ArithOutcome, WriteOutcome};
use crate::redis::{BackendError, Reply};
use crate::router::{Backend, Route};
use crate::stats::{bump, Stats};

/// A write of `kind` sent on `route`; `flags`, `exptime` and `data` are
/// what the shadow gets if the primary stores or touches the item.
pub(super) fn single_key_write(
    kind: WriteKind,
    route: Route,
    noreply: bool,
    key: Bytes,
    flags: u32,
    exptime: i64,
    data: Bytes,
) -> Write {
    Write {
        kind,
        side: route.primary.backend(),
        noreply,
        near_through: None,
        shadow: route.shadow.map(|side| {
            Box::new(ShadowPlan {
                side,
                key,
                flags,
                exptime,
                data,
            })
        }),
    }
}

impl Session {
    pub(super) fn render_write(&mut self, mut w: Write, results: &Results) {
        let result = results.get(0);
        let outcome = match (w.side, result) {
            (_, Some(Err(e))) => Outcome::Error(e.reply_line()),
            (_, None) => Outcome::Error(BackendError::Timeout.reply_line()),
            (Backend::Redis, Some(Ok(Reply::Redis(frame)))) => redis_outcome(w.kind, frame),
            (Backend::Memcached, Some(Ok(Reply::Memcached(raw)))) => memcached_outcome(raw),
            _ => Outcome::Error(WriteOutcome::Failed.line()),
        };
        if let Some(through) = w.near_through.take() {
            // Before the reply: read-your-writes.
            let stored = matches!(outcome, Outcome::Known(WriteOutcome::Stored));
            self.near_settle(through, stored);
        }
        count_write(&self.proxy.stats, w.kind, &outcome);
        if let Some(plan) = w.shadow {
            let ShadowPlan {
                side,
                key,
                flags,
                exptime,
                data,
            } = *plan;
            let change = write_change(w.kind, &outcome, flags, exptime, data);
            self.shadow(side, key, change);
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

/// memcached's `stats` counters of a write, by its outcome.
fn count_write(stats: &Stats, kind: WriteKind, outcome: &Outcome) {
    match (kind, outcome) {
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
        (WriteKind::Delete, Outcome::Known(WriteOutcome::NotFound)) => bump(&stats.delete_misses),
        (WriteKind::Touch, Outcome::Known(WriteOutcome::Touched)) => bump(&stats.touch_hits),
        (WriteKind::Touch, Outcome::Known(WriteOutcome::NotFound)) => bump(&stats.touch_misses),
        _ => {}
    }
}

/// What the write did to its key, by its outcome on the primary (`flags`,
/// `exptime`, `data`: the request's item).
fn write_change(
    kind: WriteKind,
    outcome: &Outcome,
    flags: u32,
    exptime: i64,
    data: Bytes,
) -> Change {
    // A write the primary refused changes nothing.
    let unchanged = matches!(outcome, Outcome::Unchanged(_) | Outcome::RawUnchanged(_))
        || matches!(
            (kind, outcome),
            (
                WriteKind::Storage(StorageCommand::Add),
                Outcome::Known(WriteOutcome::NotStored)
            ) | (
                WriteKind::Storage(StorageCommand::Cas),
                Outcome::Known(WriteOutcome::Exists)
            )
        );
    if unchanged {
        return Change::Nothing;
    }
    match (kind, outcome) {
        (
            WriteKind::Storage(
                StorageCommand::Set
                | StorageCommand::Add
                | StorageCommand::Replace
                | StorageCommand::Cas,
            ),
            Outcome::Known(WriteOutcome::Stored),
        ) => Change::Stored {
            flags,
            exptime,
            data,
        },
        (WriteKind::Touch, Outcome::Known(WriteOutcome::Touched)) => Change::Touched { exptime },
        _ => Change::Unknown,
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

//! A RESP request waiting for its reply, and how the backends' replies
//! become the client's.

use bytes::{Bytes, BytesMut};
use memshift_protocol::resp::reply::{self as out, RespVersion, Shape};
use memshift_protocol::resp::Frame;
use tokio::time::Instant;

use crate::near_cache::store::Ticket;
use crate::redis::encoding;
use crate::redis::{BackendError, Reply};
use crate::stats::{error_code, CommandStats, Outcome};

/// The connection dropped or timed out after `EXEC` was written: Redis may
/// have run the transaction (a client of Redis itself would see a dropped
/// connection here; memshift must not claim it failed).
pub(super) const EXEC_UNKNOWN: &[u8] = b"ERR memshift: the shard's connection was lost after EXEC was sent; the transaction may or may not have been applied";

/// One backend reply of a request: `None` until it comes.
pub(super) type Part = Option<Result<Frame, BackendError>>;

/// A reply a command family renders itself from every part, failed ones
/// included (INFO, CONFIG GET, SCAN, KEYS, RANDOMKEY: `cmd::info`,
/// `cmd::config`, `cmd::keyspace`).
pub(super) trait Gather: std::fmt::Debug + Send {
    fn render(&self, parts: &[Part], buf: &mut BytesMut, v: RespVersion);
}

/// How a finished request is written.
#[derive(Debug)]
pub(super) enum Render {
    /// The reply, encoded.
    Ready(Bytes),
    /// Write what came before, then close (QUIT, protocol error).
    Close,
    /// The one reply as it is, RESP3-shaped when the client asked for it.
    Relay(Shape),
    /// A string value: memshift's item header is taken off (GET, GETDEL,
    /// GETEX, SET ... GET).
    Value,
    /// GET read for the near cache (`cmd::near`): `{value, pttl}`, the
    /// value rendered as [`Render::Value`].
    FillValue,
    /// A bulk string of digits is an integer reply (INCR through the
    /// wrapping script, which returns the digits to keep 64-bit precision).
    IntegerFromBulk,
    /// SETNX sent as `SET ... NX`: OK is 1, nil is 0.
    SetNx,
    /// GETRANGE on the value without its header.
    Range { start: i64, end: i64 },
    /// MGET split by shard: `slots[i]` = (part, index in that part's
    /// reply); part [`NEAR_HIT`]: `hits[index]` (near cache); index
    /// [`OWN_REPLY`]: the part is that key's own near-cache fill read.
    Mget {
        slots: Vec<(u32, u32)>,
        hits: Vec<Bytes>,
    },
    /// DEL, UNLINK, EXISTS, TOUCH, DBSIZE: the parts' integers summed.
    Sum,
    /// MSET, FLUSHDB, FLUSHALL: OK when every part is OK.
    AllOk,
    /// SCRIPT LOAD on every shard: the first SHA, or the first error.
    First,
    /// Pub/sub (UN)SUBSCRIBE: each part is the frames one subscriber
    /// connection answered (`Frame::Array`, written one after another),
    /// or its error.
    Frames,
    /// COMMAND / COMMAND INFO from a shard, narrowed to what memshift
    /// serves (entries of other commands are dropped or nil).
    CommandTable { info: bool },
    /// Rendered by the command's own family (see [`Gather`]).
    Gather(Box<dyn Gather>),
    /// EXEC: the array's elements rendered as each queued command's reply
    /// (`cmd::transaction`), each counted in its command's stats row; a
    /// nil (WATCH) or an error as it came.
    Exec(Vec<(Render, Option<u16>)>),
}

#[derive(Debug)]
pub struct Pending {
    pub(super) render: Render,
    parts: PartsVec,
    pub(super) waiting: u32,
    /// Bytes of the replies received so far (for the slow-consumer limit).
    bytes: usize,
    /// Index into `metrics::COMMANDS`.
    pub(super) command: Option<usize>,
    /// Its `INFO commandstats` row (`cmd::table::stats_row`).
    pub(super) stats: Option<u16>,
    pub(super) started: Instant,
    pub(super) deadline: Instant,
    /// Near cache: what to do just before the reply is written.
    pub(super) near: NearAfter,
}

impl crate::conn::Entry for Pending {
    crate::entry_basics!(Pending);

    fn expire(&mut self) {
        Pending::expire(self);
    }

    #[inline]
    fn is_close(&self) -> bool {
        matches!(self.render, Render::Close)
    }

    #[inline]
    fn command(&self) -> Option<usize> {
        self.command
    }
}

/// `Render::Mget` slot part of a key the near cache answered.
pub(super) const NEAR_HIT: u32 = u32::MAX;
/// `Render::Mget` slot index of a key read on its own (a fill read).
pub(super) const OWN_REPLY: u32 = u32::MAX;

/// The near cache's part in a request, done just before its reply is
/// written (see `cmd::near`).
#[derive(Debug, Default)]
pub(super) enum NearAfter {
    #[default]
    Nothing,
    /// A write of the key with this hash: invalidated again
    /// (read-your-writes).
    Written(u64),
    /// A multi-key write: every key's hash, as `Written`.
    WrittenMany(Vec<u64>),
    /// FLUSHDB/FLUSHALL: every shard's entries dropped again.
    Flushed,
    /// GET of one key read from Redis (boxed: keeps every `Pending` small).
    Read(Box<NearRead>),
    /// MGET keys read from Redis (not the near cache's hits).
    ReadMany(Vec<NearRead>),
}

/// A key read from Redis: its answer drops older copies of the item on
/// every thread and, with a ticket, fills the near cache.
#[derive(Debug)]
pub(super) struct NearRead {
    pub key: Bytes,
    pub ticket: Option<Ticket>,
    /// Where its answer is: part, and index in an MGET reply
    /// ([`OWN_REPLY`]: the part is a GET or fill reply of its own).
    pub part: u32,
    pub index: u32,
}

/// One reply inline (the common case: single-key commands), more in a Vec.
#[derive(Debug)]
enum PartsVec {
    One(Part),
    Many(Vec<Part>),
}

impl Pending {
    pub(super) fn ready(render: Render, command: Option<usize>, now: Instant) -> Pending {
        Pending {
            render,
            parts: PartsVec::One(None),
            waiting: 0,
            bytes: 0,
            command,
            stats: None,
            started: now,
            deadline: now,
            near: NearAfter::Nothing,
        }
    }

    pub(super) fn waiting(
        render: Render,
        parts: usize,
        command: Option<usize>,
        now: Instant,
        deadline: Instant,
    ) -> Pending {
        Pending {
            render,
            parts: if parts == 1 {
                PartsVec::One(None)
            } else {
                PartsVec::Many((0..parts).map(|_| None).collect())
            },
            waiting: parts as u32,
            bytes: 0,
            command,
            stats: None,
            started: now,
            deadline,
            near: NearAfter::Nothing,
        }
    }

    /// Record part `part`'s reply (`size` bytes); false if unknown or
    /// already recorded.
    pub(super) fn fill(
        &mut self,
        part: u32,
        result: Result<Reply, BackendError>,
        size: usize,
    ) -> bool {
        let slot = match &mut self.parts {
            PartsVec::One(p) if part == 0 => p,
            PartsVec::Many(v) => match v.get_mut(part as usize) {
                Some(p) => p,
                None => return false,
            },
            PartsVec::One(_) => return false,
        };
        if slot.is_some() || self.waiting == 0 {
            return false;
        }
        *slot = Some(match result {
            Ok(Reply::Redis(f)) => Ok(f),
            Ok(Reply::Memcached(_)) => Err(BackendError::ConnectionLost),
            Err(e) => Err(e),
        });
        self.waiting -= 1;
        self.bytes += size;
        true
    }

    pub(super) fn expire(&mut self) {
        let fill = |p: &mut Part| {
            if p.is_none() {
                *p = Some(Err(BackendError::Timeout));
            }
        };
        match &mut self.parts {
            PartsVec::One(p) => fill(p),
            PartsVec::Many(v) => v.iter_mut().for_each(fill),
        }
        self.waiting = 0;
    }

    /// Part `part`'s frame, if it came.
    pub(super) fn frame(&self, part: u32) -> Option<&Frame> {
        match self.parts().get(part as usize) {
            Some(Some(Ok(f))) => Some(f),
            _ => None,
        }
    }

    fn parts(&self) -> &[Part] {
        match &self.parts {
            PartsVec::One(p) => std::slice::from_ref(p),
            PartsVec::Many(v) => v,
        }
    }

    /// Write the reply and count it (`tally`); `served` says which
    /// commands memshift serves (for COMMAND's table).
    pub(super) fn render_into(
        self,
        buf: &mut BytesMut,
        v: RespVersion,
        served: fn(&[u8]) -> bool,
        tally: &Tally,
    ) {
        let start = buf.len();
        let row = self.stats;
        self.render_reply(buf, v, served, tally);
        tally.reply(row, buf.get(start..).unwrap_or_default());
    }

    fn render_reply(
        self,
        buf: &mut BytesMut,
        v: RespVersion,
        served: fn(&[u8]) -> bool,
        tally: &Tally,
    ) {
        match &self.render {
            Render::Ready(bytes) => return buf.extend_from_slice(bytes),
            Render::Close => return,
            Render::Gather(g) => return g.render(self.parts(), buf, v),
            Render::Exec(_) => return self.render_exec(buf, v, served, tally),
            _ => {}
        }
        // A backend failure answers the whole request.
        let parts = self.parts();
        for p in parts {
            match p {
                Some(Ok(_)) => {}
                Some(Err(e)) => return backend_error(buf, *e),
                None => return backend_error(buf, BackendError::Timeout),
            }
        }
        // Every part is a frame now (no allocation on the reply path).
        let frames = || {
            parts.iter().filter_map(|p| match p {
                Some(Ok(f)) => Some(f),
                _ => None,
            })
        };
        let first = frames().next();
        match (&self.render, first) {
            (Render::Relay(shape), Some(f)) => out::frame(buf, f, v, *shape),
            (Render::Value, Some(Frame::Bulk(b))) => value(buf, b),
            (Render::FillValue, Some(Frame::Array(items))) => match items.first() {
                Some(Frame::Bulk(b)) => value(buf, b),
                _ => out::null(buf, v),
            },
            (Render::IntegerFromBulk, Some(Frame::Bulk(b))) => {
                match memshift_protocol::resp::request::string2ll(b) {
                    Some(n) => out::integer(buf, n),
                    None => out::error(buf, b"ERR value is not an integer or out of range"),
                }
            }
            (Render::SetNx, Some(Frame::Simple(_))) => out::integer(buf, 1),
            (Render::SetNx, Some(Frame::Null)) => out::integer(buf, 0),
            (Render::Range { start, end }, Some(Frame::Bulk(b))) => {
                let data = strip(b);
                out::bulk(buf, get_range(&data, *start, *end));
            }
            (Render::Range { .. }, Some(Frame::Null)) => out::bulk(buf, b""),
            (Render::Mget { slots, hits }, _) => {
                // An MGET's error (a cluster's CROSSSLOT, say) answers the
                // request; a fill read's (WRONGTYPE) is that key's nil, as
                // MGET answers a key that is not a string.
                let mget_error = slots
                    .iter()
                    .filter(|&&(part, index)| part != NEAR_HIT && index != OWN_REPLY)
                    .find_map(|&(part, _)| match parts.get(part as usize) {
                        Some(Some(Ok(f @ Frame::Error(_)))) => Some(f),
                        _ => None,
                    });
                if let Some(err) = mget_error {
                    return out::frame(buf, err, v, Shape::Plain);
                }
                out::array(buf, slots.len());
                for &(part, index) in slots {
                    if part == NEAR_HIT {
                        match hits.get(index as usize) {
                            Some(data) => out::bulk(buf, data),
                            None => out::null(buf, v),
                        }
                        continue;
                    }
                    let item = match parts.get(part as usize) {
                        Some(Some(Ok(Frame::Array(items)))) if index == OWN_REPLY => items.first(),
                        Some(Some(Ok(Frame::Array(items)))) => items.get(index as usize),
                        _ => None,
                    };
                    match item {
                        Some(Frame::Bulk(b)) => value(buf, b),
                        _ => out::null(buf, v),
                    }
                }
            }
            (Render::Sum, _) => {
                let mut total = 0i64;
                for f in frames() {
                    match f {
                        Frame::Integer(n) => total = total.saturating_add(*n),
                        other => return out::frame(buf, other, v, Shape::Plain),
                    }
                }
                out::integer(buf, total);
            }
            (Render::AllOk | Render::First, _) => {
                match frames().find(|f| !matches!(f, Frame::Simple(_) | Frame::Bulk(_))) {
                    Some(f) => out::frame(buf, f, v, Shape::Plain),
                    None => match first {
                        Some(f) => out::frame(buf, f, v, Shape::Plain),
                        None => out::simple(buf, b"OK"),
                    },
                }
            }
            (Render::Frames, _) => {
                for f in frames() {
                    match f {
                        Frame::Array(items) => {
                            for item in items {
                                out::frame(buf, item, v, Shape::Plain);
                            }
                        }
                        other => return out::frame(buf, other, v, Shape::Plain),
                    }
                }
            }
            (Render::CommandTable { info }, Some(Frame::Array(entries))) => {
                command_table(buf, entries, *info, v, served)
            }
            // Errors, nils and anything unexpected: as the backend sent it.
            (_, Some(f)) => out::frame(buf, f, v, Shape::Plain),
            (_, None) => out::null(buf, v),
        }
    }
}

impl Pending {
    /// EXEC's reply: its array's elements each rendered as its queued
    /// command's reply would be.
    /// Redis counts each queued command as it runs inside EXEC (its time
    /// is EXEC's: 0 µs here, and no latency sample).
    fn render_exec(
        self,
        buf: &mut BytesMut,
        v: RespVersion,
        served: fn(&[u8]) -> bool,
        tally: &Tally,
    ) {
        let Render::Exec(renders) = self.render else {
            return;
        };
        let reply = match self.parts {
            PartsVec::One(p) => p,
            PartsVec::Many(_) => None,
        };
        match reply {
            Some(Ok(Frame::Array(items))) if items.len() == renders.len() => {
                out::array(buf, items.len());
                let started = self.started;
                let queued = Tally {
                    stats: tally.stats,
                    nanos: None,
                };
                for ((render, row), item) in renders.into_iter().zip(items) {
                    let mut p = Pending::waiting(render, 1, None, started, started);
                    p.stats = row;
                    p.fill(0, Ok(Reply::Redis(item)), 0);
                    p.render_into(buf, v, served, &queued);
                }
            }
            // A nil (a WATCHed key changed), an error (EXECABORT).
            Some(Ok(f)) => out::frame(buf, &f, v, Shape::Plain),
            // Given up on after EXEC was sent: it may have run.
            None | Some(Err(BackendError::Timeout)) => out::error(buf, EXEC_UNKNOWN),
            Some(Err(e)) => backend_error(buf, e),
        }
    }
}

/// Where written replies are counted: `INFO commandstats` (the request's
/// row) and `errorstats`.
pub(super) struct Tally<'a> {
    pub stats: &'a CommandStats,
    /// The request's time, from reading it to writing its reply (`None`:
    /// not timed, as a command queued by MULTI, which runs inside EXEC).
    pub nanos: Option<u64>,
}

impl Tally<'_> {
    /// `reply` (its bytes as written) answered a request of `row`.
    fn reply(&self, row: Option<u16>, reply: &[u8]) {
        let outcome = match reply.split_first() {
            None => return,
            Some((b'-', text)) => {
                self.stats.error(error_code(text));
                if rejected(text) {
                    Outcome::Rejected
                } else {
                    Outcome::Failed
                }
            }
            Some(_) => Outcome::Done,
        };
        if let Some(row) = row {
            self.stats.record(row.into(), outcome, self.nanos);
        }
    }
}

/// An error Redis answers before running the command (its
/// `rejected_calls`): arity, authentication, the subscribed context, a
/// cluster redirect, the server's state; and memshift's refusals (a command
/// or key it does not serve here), which it never sends.
fn rejected(text: &[u8]) -> bool {
    const CODES: [&[u8]; 13] = [
        b"NOAUTH",
        b"NOPERM",
        b"CROSSSLOT",
        b"MOVED",
        b"ASK",
        b"TRYAGAIN",
        b"OOM",
        b"MISCONF",
        b"NOREPLICAS",
        b"READONLY",
        b"LOADING",
        b"MASTERDOWN",
        b"BUSY",
    ];
    const ERR_PREFIXES: [&[u8]; 3] = [
        b"ERR wrong number of arguments",
        b"ERR Can't execute",
        b"ERR memshift: this key is still migrating",
    ];
    let code = error_code(text);
    CODES.contains(&code)
        || ERR_PREFIXES.iter().any(|p| text.starts_with(p))
        || (code == b"ERR" && memchr::memmem::find(text, b" is not supported ").is_some())
}

/// A stored string as a Redis client reads it: the data of a memshift
/// item, anything else as stored.
pub(super) fn strip(b: &Bytes) -> Bytes {
    match encoding::decode(b) {
        Some(item) => item.data,
        None => b.clone(),
    }
}

fn value(buf: &mut BytesMut, b: &Bytes) {
    match encoding::decode(b) {
        Some(item) => out::bulk(buf, &item.data),
        None => out::bulk(buf, b),
    }
}

/// Redis 7's GETRANGE on `data`.
pub(super) fn get_range(data: &[u8], mut start: i64, mut end: i64) -> &[u8] {
    let len = data.len() as i64;
    if start < 0 && end < 0 && start > end {
        return b"";
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        return b"";
    }
    data.get(start as usize..=end as usize).unwrap_or_default()
}

pub(super) fn backend_error(buf: &mut BytesMut, e: BackendError) {
    let text: &[u8] = match e {
        BackendError::Timeout => b"ERR memshift: backend timeout",
        BackendError::Busy => b"ERR memshift: backend busy",
        _ => b"ERR memshift: backend unavailable",
    };
    out::error(buf, text);
}

/// COMMAND's entries for the commands memshift serves; COMMAND INFO keeps
/// its positions (nil for the others).
fn command_table(
    buf: &mut BytesMut,
    entries: &[Frame],
    info: bool,
    v: RespVersion,
    is_served: fn(&[u8]) -> bool,
) {
    let served = |e: &Frame| match e {
        Frame::Array(fields) => match fields.first() {
            Some(Frame::Bulk(name)) => is_served(name),
            _ => false,
        },
        _ => false,
    };
    if info {
        out::array(buf, entries.len());
        for e in entries {
            if served(e) {
                out::frame(buf, e, v, Shape::Plain);
            } else {
                out::null(buf, v);
            }
        }
    } else {
        let kept: Vec<&Frame> = entries.iter().filter(|e| served(e)).collect();
        out::array(buf, kept.len());
        for e in kept {
            out::frame(buf, e, v, Shape::Plain);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::get_range;

    #[test]
    fn getrange_follows_redis() {
        let d = b"This is a string";
        assert_eq!(get_range(d, 0, 3), b"This");
        assert_eq!(get_range(d, -3, -1), b"ing");
        assert_eq!(get_range(d, 0, -1), d);
        assert_eq!(get_range(d, 10, 100), b"string");
        assert_eq!(get_range(d, -1, -5), b"");
        assert_eq!(get_range(b"", 0, -1), b"");
        assert_eq!(get_range(d, 5, 2), b"");
    }
}

//! memcached commands as Redis commands, and Redis replies as memcached
//! reply lines. Pure functions: the session owns the I/O.

use bytes::BytesMut;
use memshift_protocol::memcache::{reply, ArithCommand, Exptime, StorageCommand};
use memshift_protocol::resp::{CommandWriter, Frame};

use super::encoding::{header, header_meta};
use super::scripts;

/// memcached's exptime, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// 0: never expires.
    Never,
    /// 1..=30 days: seconds from now.
    In(i64),
    /// Above 30 days: an absolute Unix time still in the future.
    At(i64),
    /// Negative, or an absolute time not in the future: already expired.
    Past,
}

impl Expiry {
    /// memcached 1.6's rules for an exptime seen at `now_unix`.
    pub fn from_exptime(exptime: i64, now: u64) -> Expiry {
        match Exptime::new(exptime) {
            Exptime::Never => Expiry::Never,
            Exptime::Relative(s) => Expiry::In(i64::from(s)),
            at if at.is_expired(now) => Expiry::Past,
            // Above 30 days and in the future: fits an i64 (it came from one).
            Exptime::Absolute(t) => Expiry::At(t as i64),
            Exptime::Expired => Expiry::Past,
        }
    }

    /// Arguments for SET/GETEX: none, `EX n`, `EXAT t`, or `PXAT 1` (a time
    /// long past: Redis stores nothing and deletes the key).
    pub fn option(self) -> Option<(&'static [u8], i64)> {
        match self {
            Expiry::Never => None,
            Expiry::In(s) => Some((b"EX", s)),
            Expiry::At(t) => Some((b"EXAT", t)),
            Expiry::Past => Some((b"PXAT", 1)),
        }
    }
}

/// `GET key`
pub fn get(buf: &mut BytesMut, key: &[u8]) {
    CommandWriter::new(buf, 2).arg(b"GET").arg(key);
}

/// A near-cache fill: the value and its PTTL in one atomic step (the
/// entry must not outlive the item), as the transaction `MULTI`, `GET`,
/// `PTTL`, `EXEC`; the answer is EXEC's `[value or nil, pttl]`
/// (`RedisCodec` drops the status replies before it). A transaction and
/// not a script: on one redis-server it costs 4.6–4.8 µs of the server's
/// CPU per fill, against 8–10 µs for the `meta_get` script that did this
/// before, 6.7–7.5 µs for the smallest script that could, and 1.5–1.8 µs
/// for a plain GET (pipelined 16 deep, BENCHMARKS.md, "Near cache: fills
/// as transactions").
pub fn fill_read(buf: &mut BytesMut, key: &[u8]) {
    buf.extend_from_slice(MULTI);
    CommandWriter::new(buf, 2).arg(b"GET").arg(key);
    CommandWriter::new(buf, 2).arg(b"PTTL").arg(key);
    buf.extend_from_slice(EXEC);
}

/// The PTTL in a fill's answer `[value, pttl]` ([`fill_read`]).
pub fn fill_pttl(answer: &Frame) -> Option<i64> {
    match answer {
        Frame::Array(items) => match items.get(1) {
            Some(Frame::Integer(p)) => Some(*p),
            _ => None,
        },
        _ => None,
    }
}

/// `MULTI` as [`fill_read`] sends it. The fill is the only transaction
/// sent on a shared connection (a RESP client's own MULTI goes to a
/// dedicated one), so a request that starts with it is a fill.
const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
const EXEC: &[u8] = b"*1\r\n$4\r\nEXEC\r\n";

/// How many status replies come before the answer to `request`: MULTI's
/// `+OK` and GET's and PTTL's `+QUEUED` for a fill ([`fill_read`]), none
/// for any other request.
pub fn statuses_before_answer(request: &[u8]) -> u8 {
    if request.starts_with(MULTI) {
        3
    } else {
        0
    }
}

/// `MGET key...`
pub fn mget<'k>(buf: &mut BytesMut, keys: impl ExactSizeIterator<Item = &'k [u8]>) {
    let mut w = CommandWriter::new(buf, 1 + keys.len());
    w.arg(b"MGET");
    for key in keys {
        w.arg(key);
    }
}

/// gat/gats: `GETEX key EX n | EXAT t | PXAT 1 | PERSIST`
pub fn get_and_touch(buf: &mut BytesMut, key: &[u8], expiry: Expiry) {
    match expiry.option() {
        Some((opt, n)) => {
            CommandWriter::new(buf, 4)
                .arg(b"GETEX")
                .arg(key)
                .arg(opt)
                .arg_i64(n);
        }
        None => {
            CommandWriter::new(buf, 3)
                .arg(b"GETEX")
                .arg(key)
                .arg(b"PERSIST");
        }
    }
}

/// set/add/replace: `SET key <header+data> [NX|XX] [expiry]`. A plain SET
/// also clears any previous TTL, as memcached's set replaces the item.
pub fn store(
    buf: &mut BytesMut,
    command: StorageCommand,
    key: &[u8],
    flags: u32,
    cas: u64,
    data: &[u8],
    expiry: Expiry,
) {
    store_with(buf, command, key, &header(flags, cas), data, expiry);
}

/// `ms` with `b`: as [`store`], the item marked as stored through a base64
/// key (format version 2), so `mg ... k` prints it as memcached does.
#[allow(clippy::too_many_arguments)]
pub fn store_meta(
    buf: &mut BytesMut,
    command: StorageCommand,
    key: &[u8],
    flags: u32,
    cas: u64,
    state: u8,
    data: &[u8],
    expiry: Expiry,
) {
    let head = header_meta(flags, cas, state);
    store_with(buf, command, key, &head, data, expiry);
}

fn store_with(
    buf: &mut BytesMut,
    command: StorageCommand,
    key: &[u8],
    head: &[u8],
    data: &[u8],
    expiry: Expiry,
) {
    let condition: Option<&[u8]> = match command {
        StorageCommand::Add => Some(b"NX"),
        StorageCommand::Replace => Some(b"XX"),
        _ => None,
    };
    let option = expiry.option();
    let argc = 3 + usize::from(condition.is_some()) + if option.is_some() { 2 } else { 0 };
    let mut w = CommandWriter::new(buf, argc);
    w.arg(b"SET").arg(key).arg_parts(&[head, data]);
    if let Some(c) = condition {
        w.arg(c);
    }
    if let Some((opt, n)) = option {
        w.arg(opt).arg_i64(n);
    }
}

/// cas: the CAS script.
#[allow(clippy::too_many_arguments)]
pub fn compare_and_swap(
    buf: &mut BytesMut,
    key: &[u8],
    expected: u64,
    flags: u32,
    new_cas: u64,
    data: &[u8],
    expiry: Expiry,
) {
    let head = header(flags, new_cas);
    cas_script(buf, key, expected, &head, data, expiry, false);
}

/// `ms` with `C`: the CAS script, with the meta state `state` (version 2
/// when not 0) and `I` (`invalidate`: a stale item takes the value).
#[allow(clippy::too_many_arguments)]
pub fn meta_compare_and_swap(
    buf: &mut BytesMut,
    key: &[u8],
    expected: u64,
    flags: u32,
    new_cas: u64,
    state: u8,
    data: &[u8],
    expiry: Expiry,
    invalidate: bool,
) {
    if state == 0 {
        let head = header(flags, new_cas);
        cas_script(buf, key, expected, &head, data, expiry, invalidate);
    } else {
        let head = header_meta(flags, new_cas, state);
        cas_script(buf, key, expected, &head, data, expiry, invalidate);
    }
}

#[allow(clippy::too_many_arguments)]
fn cas_script(
    buf: &mut BytesMut,
    key: &[u8],
    expected: u64,
    head: &[u8],
    data: &[u8],
    expiry: Expiry,
    invalidate: bool,
) {
    let (opt, n): (&[u8], i64) = expiry.option().unwrap_or((b"", 0));
    let mut w = CommandWriter::new(buf, 8 + usize::from(invalidate));
    w.arg(b"EVALSHA")
        .arg(scripts::sha(scripts::CAS_SCRIPT))
        .arg(b"1")
        .arg(key)
        .arg(&expected.to_be_bytes())
        .arg_parts(&[head, data])
        .arg(opt)
        .arg_i64(n);
    if invalidate {
        w.arg(b"1");
    }
}

/// append/prepend: the concat script (`expected`: the `ms` CAS compare).
pub fn concat(
    buf: &mut BytesMut,
    key: &[u8],
    append: bool,
    new_cas: u64,
    data: &[u8],
    max_item_size: usize,
    expected: Option<u64>,
) {
    let mut w = CommandWriter::new(buf, 8 + usize::from(expected.is_some()));
    w.arg(b"EVALSHA")
        .arg(scripts::sha(scripts::CONCAT_SCRIPT))
        .arg(b"1")
        .arg(key)
        .arg(&new_cas.to_be_bytes())
        .arg(data)
        .arg(if append { b"a" } else { b"p" })
        .arg_u64(max_item_size as u64);
    if let Some(cas) = expected {
        w.arg(&cas.to_be_bytes());
    }
}

/// An expiry as the scripts take it: option and argument ("" keeps the
/// TTL, "PERSIST" removes it).
fn script_expiry(expiry: Option<Expiry>) -> (&'static [u8], i64) {
    match expiry {
        None => (b"", 0),
        Some(Expiry::Never) => (b"PERSIST", 0),
        Some(e) => e.option().unwrap_or((b"", 0)),
    }
}

/// What `mg` (or `me`) asks of the meta get script.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaGet {
    /// `T`: touch a hit.
    pub touch: Option<Expiry>,
    /// `N`: create a missing item with this CAS and expiry.
    pub vivify: Option<(u64, Expiry)>,
    /// `R`: the recache threshold (seconds).
    pub recache: Option<i64>,
    /// The TTL `R` compares with when a `T` came before it (-1: none).
    pub recache_ttl: Option<i64>,
    /// `l` / `me`: read the idle time.
    pub idle: bool,
    /// `me`: look without changing anything.
    pub peek: bool,
    /// `u`: do not mark the item fetched.
    pub no_update: bool,
}

/// `mg` / `me`: the meta get script.
pub fn meta_get(buf: &mut BytesMut, key: &[u8], g: &MetaGet) {
    let (topt, tn) = match g.touch {
        Some(e) => script_expiry(Some(e)),
        None => (&b""[..], 0),
    };
    let (vopt, vn) = match g.vivify {
        Some((_, Expiry::Never)) | None => (&b""[..], 0),
        Some((_, e)) => script_expiry(Some(e)),
    };
    let mut w = CommandWriter::new(buf, 14);
    w.arg(b"EVALSHA")
        .arg(scripts::sha(scripts::META_GET_SCRIPT))
        .arg(b"1")
        .arg(key)
        .arg(topt)
        .arg_i64(tn)
        .arg(vopt)
        .arg_i64(vn);
    match g.vivify {
        Some((cas, _)) => w.arg(&cas.to_be_bytes()),
        None => w.arg(b""),
    };
    match g.recache {
        Some(r) => w.arg_i64(r),
        None => w.arg(b""),
    };
    match g.recache_ttl {
        Some(t) => w.arg_i64(t),
        None => w.arg(b""),
    };
    w.arg(if g.idle { b"1" } else { b"" })
        .arg(if g.peek { b"1" } else { b"" })
        .arg(if g.no_update { b"1" } else { b"" });
}

/// `md ... I`: the meta invalidate script.
pub fn meta_invalidate(
    buf: &mut BytesMut,
    key: &[u8],
    expected: Option<u64>,
    new_cas: u64,
    ttl: Option<Expiry>,
) {
    let (opt, n) = script_expiry(ttl);
    let mut w = CommandWriter::new(buf, 8);
    w.arg(b"EVALSHA")
        .arg(scripts::sha(scripts::META_INVALIDATE_SCRIPT))
        .arg(b"1")
        .arg(key);
    match expected {
        Some(c) => w.arg(&c.to_be_bytes()),
        None => w.arg(b""),
    };
    w.arg(&new_cas.to_be_bytes()).arg(opt).arg_i64(n);
}

/// `md` with `C`: the meta delete script.
pub fn meta_delete_cas(buf: &mut BytesMut, key: &[u8], expected: u64) {
    CommandWriter::new(buf, 5)
        .arg(b"EVALSHA")
        .arg(scripts::sha(scripts::META_DELETE_SCRIPT))
        .arg(b"1")
        .arg(key)
        .arg(&expected.to_be_bytes());
}

/// What `ma` asks of the meta arith script.
#[derive(Debug, Clone, Copy)]
pub struct MetaArith {
    pub command: ArithCommand,
    pub delta: u64,
    pub new_cas: u64,
    /// CAS compare (none for `C0`, as memcached).
    pub expected: Option<u64>,
    /// Create a missing counter with this value and expiry.
    pub create: Option<(u64, Expiry)>,
    /// New expiry of an updated counter (`T`).
    pub touch: Option<Expiry>,
}

/// `ma`: the meta arith script.
pub fn meta_arith(buf: &mut BytesMut, key: &[u8], a: &MetaArith) {
    let expected = a.expected.map(u64::to_be_bytes);
    let (create_opt, create_n) = script_expiry(a.create.map(|(_, e)| e));
    let (touch_opt, touch_n) = script_expiry(a.touch);
    let mut w = CommandWriter::new(buf, 15);
    w.arg(b"EVALSHA")
        .arg(scripts::sha(scripts::META_ARITH_SCRIPT))
        .arg(b"1")
        .arg(key)
        .arg(match a.command {
            ArithCommand::Incr => b"i",
            ArithCommand::Decr => b"d",
        })
        .arg_u64(a.delta >> 32)
        .arg_u64(a.delta & 0xFFFF_FFFF)
        .arg(&a.new_cas.to_be_bytes())
        .arg(expected.as_ref().map_or(&b""[..], |e| &e[..]))
        .arg(if a.create.is_some() { b"1" } else { b"" })
        .arg_u64(a.create.map_or(0, |(initial, _)| initial))
        .arg(create_opt)
        .arg_i64(create_n)
        .arg(touch_opt)
        .arg_i64(touch_n);
}

/// incr/decr: the arith script (delta split into 32-bit halves for Lua).
pub fn arith(buf: &mut BytesMut, key: &[u8], command: ArithCommand, delta: u64, new_cas: u64) {
    CommandWriter::new(buf, 8)
        .arg(b"EVALSHA")
        .arg(scripts::sha(scripts::ARITH_SCRIPT))
        .arg(b"1")
        .arg(key)
        .arg(match command {
            ArithCommand::Incr => b"i",
            ArithCommand::Decr => b"d",
        })
        .arg_u64(delta >> 32)
        .arg_u64(delta & 0xFFFF_FFFF)
        .arg(&new_cas.to_be_bytes());
}

/// `DEL key`
pub fn delete(buf: &mut BytesMut, key: &[u8]) {
    CommandWriter::new(buf, 2).arg(b"DEL").arg(key);
}

/// touch: EXPIRE / EXPIREAT / PEXPIREAT 1, or the persist script for 0.
pub fn touch(buf: &mut BytesMut, key: &[u8], expiry: Expiry) {
    let (cmd, n): (&[u8], i64) = match expiry {
        Expiry::Never => {
            CommandWriter::new(buf, 4)
                .arg(b"EVALSHA")
                .arg(scripts::sha(scripts::TOUCH_PERSIST_SCRIPT))
                .arg(b"1")
                .arg(key);
            return;
        }
        Expiry::In(s) => (b"EXPIRE", s),
        Expiry::At(t) => (b"EXPIREAT", t),
        Expiry::Past => (b"PEXPIREAT", 1),
    };
    CommandWriter::new(buf, 3).arg(cmd).arg(key).arg_i64(n);
}

/// `FLUSHDB ASYNC`: empties the shard's keyspace at once, frees memory in
/// the background.
pub fn flush(buf: &mut BytesMut) {
    CommandWriter::new(buf, 2).arg(b"FLUSHDB").arg(b"ASYNC");
}

/// Outcome of a write-type command, as memcached reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    /// Redis answered something unexpected (an error, a wrong type).
    Failed,
}

impl WriteOutcome {
    pub fn line(self) -> &'static [u8] {
        match self {
            WriteOutcome::Stored => reply::STORED,
            WriteOutcome::NotStored => reply::NOT_STORED,
            WriteOutcome::Exists => reply::EXISTS,
            WriteOutcome::NotFound => reply::NOT_FOUND,
            WriteOutcome::Deleted => reply::DELETED,
            WriteOutcome::Touched => reply::TOUCHED,
            WriteOutcome::Failed => b"SERVER_ERROR backend error\r\n",
        }
    }
}

/// Reply to set/add/replace (`SET`), cas and append/prepend (scripts).
pub fn storage_outcome(command: StorageCommand, frame: &Frame) -> WriteOutcome {
    match (command, frame) {
        (StorageCommand::Cas, Frame::Integer(0)) => WriteOutcome::NotFound,
        (StorageCommand::Cas, Frame::Integer(1)) => WriteOutcome::Exists,
        (StorageCommand::Cas, Frame::Integer(2)) => WriteOutcome::Stored,
        (StorageCommand::Append | StorageCommand::Prepend, Frame::Integer(0)) => {
            WriteOutcome::NotStored
        }
        (StorageCommand::Append | StorageCommand::Prepend, Frame::Integer(1)) => {
            WriteOutcome::Stored
        }
        // memcached cannot allocate the combined item: NOT_STORED.
        (StorageCommand::Append | StorageCommand::Prepend, Frame::Integer(2)) => {
            WriteOutcome::NotStored
        }
        // `ms` MA/MP with a CAS that does not match.
        (StorageCommand::Append | StorageCommand::Prepend, Frame::Integer(3)) => {
            WriteOutcome::Exists
        }
        (StorageCommand::Set | StorageCommand::Add | StorageCommand::Replace, Frame::Simple(_)) => {
            WriteOutcome::Stored
        }
        (StorageCommand::Add | StorageCommand::Replace, Frame::Null) => WriteOutcome::NotStored,
        _ => WriteOutcome::Failed,
    }
}

/// Reply to DEL.
pub fn delete_outcome(frame: &Frame) -> WriteOutcome {
    match frame {
        Frame::Integer(0) => WriteOutcome::NotFound,
        Frame::Integer(_) => WriteOutcome::Deleted,
        _ => WriteOutcome::Failed,
    }
}

/// Reply to EXPIRE & co. or the persist script.
pub fn touch_outcome(frame: &Frame) -> WriteOutcome {
    match frame {
        Frame::Integer(0) => WriteOutcome::NotFound,
        Frame::Integer(_) => WriteOutcome::Touched,
        _ => WriteOutcome::Failed,
    }
}

/// Reply to the arith script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArithOutcome<'a> {
    Value(&'a [u8]),
    NotFound,
    NonNumeric,
    Failed,
}

pub fn arith_outcome(frame: &Frame) -> ArithOutcome<'_> {
    match frame {
        Frame::Bulk(v) => ArithOutcome::Value(v),
        Frame::Integer(0) => ArithOutcome::NotFound,
        Frame::Integer(-1) => ArithOutcome::NonNumeric,
        _ => ArithOutcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptime_rules_follow_memcached() {
        let now = 1_700_000_000u64;
        let at = now as i64;
        assert_eq!(Expiry::from_exptime(0, now), Expiry::Never);
        assert_eq!(Expiry::from_exptime(-1, now), Expiry::Past);
        assert_eq!(Expiry::from_exptime(1, now), Expiry::In(1));
        assert_eq!(Expiry::from_exptime(2_592_000, now), Expiry::In(2_592_000));
        assert_eq!(Expiry::from_exptime(2_592_001, now), Expiry::Past);
        assert_eq!(Expiry::from_exptime(at, now), Expiry::Past);
        assert_eq!(Expiry::from_exptime(at + 10, now), Expiry::At(at + 10));
        assert_eq!(Expiry::from_exptime(i64::MAX, now), Expiry::At(i64::MAX));
        assert_eq!(Expiry::from_exptime(i64::MIN, now), Expiry::Past);
    }

    #[test]
    fn set_is_one_command_with_header_and_expiry() {
        let mut buf = BytesMut::new();
        store(
            &mut buf,
            StorageCommand::Add,
            b"k",
            7,
            9,
            b"v",
            Expiry::In(5),
        );
        let mut expected = Vec::new();
        expected.extend_from_slice(b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$14\r\n");
        expected.extend_from_slice(&header(7, 9));
        expected.extend_from_slice(b"v\r\n$2\r\nNX\r\n$2\r\nEX\r\n$1\r\n5\r\n");
        assert_eq!(&buf[..], &expected[..]);
    }
}

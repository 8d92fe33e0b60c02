//! Resumable RESP2 reply parser, plus the RESP3 types a client-tracking
//! connection needs (`>` push, `%` map, `_` null, `#` boolean). A RESP2
//! server never sends those bytes, so RESP2 streams parse as before; other
//! RESP3 types (double, big number, verbatim, set, attribute) stay errors.
//!
//! The parser consumes bytes from the front of the caller's buffer as soon as
//! a piece of a frame (a length line, a bulk payload, a simple line) is
//! complete, and keeps what it cannot return yet in its own state:
//!
//! * a stack of partially filled arrays (nested arrays push one entry each);
//! * the payload length of a bulk whose `$<len>\r\n` line was consumed but
//!   whose payload has not fully arrived;
//! * how far an incomplete `+`/`-` line has already been searched for `\n`.
//!
//! So a large reply arriving over many reads is scanned once. Only a
//! `$`/`*`/`:` header line split across reads is re-read, and it is at most
//! ~22 bytes.
//!
//! Contract: between calls the caller may only append to the buffer (the
//! usual read loop). Bulk and simple payloads are `split_to(..).freeze()`
//! slices of that buffer: zero-copy.

use bytes::{Buf, BytesMut};

use super::Frame;

/// Largest bulk string accepted, as Redis's default `proto-max-bulk-len`.
pub const MAX_BULK_LEN: usize = 512 * 1024 * 1024;
/// Largest array accepted (elements). Far above any sane reply; bounds what a
/// corrupt stream can make us wait for.
pub const MAX_ARRAY_LEN: usize = 1 << 24;
/// Deepest array nesting accepted. Redis replies nest a handful of levels
/// (EXEC, XREAD, ...); the bound keeps the recursive `Drop`/`Debug` of
/// `Frame` far from the stack limit.
pub const MAX_DEPTH: usize = 128;
/// Longest `+`/`-` line content accepted.
pub const MAX_LINE_LEN: usize = 1 << 20;
/// Most digits in an integer or length line: `i64::MAX` has 19.
const MAX_DIGITS: usize = 19;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RespError {
    #[error("invalid RESP: {0}")]
    Invalid(&'static str),
}

fn invalid(msg: &'static str) -> RespError {
    RespError::Invalid(msg)
}

/// Which aggregate a partial array becomes when complete.
#[derive(Debug, Clone, Copy)]
enum Aggregate {
    Array,
    Push,
    Map,
}

#[derive(Debug)]
struct PartialArray {
    items: Vec<Frame>,
    remaining: usize,
    kind: Aggregate,
}

/// What one step of parsing produced.
enum Step {
    /// A complete value (scalar, null, empty array).
    Frame(Frame),
    /// The header of a non-empty aggregate of this many frames.
    Open(usize, Aggregate),
}

/// Parses replies from a connection's read buffer. Keeps its position inside a
/// partially received frame (including nested arrays) across calls so a large
/// reply is not re-scanned from the start on every read.
#[derive(Debug, Default)]
pub struct ReplyParser {
    stack: Vec<PartialArray>,
    /// Payload length of a bulk whose length line is already consumed.
    bulk: Option<usize>,
    /// Bytes at the front of the buffer already searched for `\n` while
    /// looking for the end of a `+`/`-` line (nothing consumed yet).
    scanned: usize,
}

impl ReplyParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Take the next complete reply off the front of `buf`, consuming its
    /// bytes. `Ok(None)`: need more input (bytes of a partial frame may have
    /// been consumed into the parser's state). `Err`: the stream is corrupt;
    /// the connection must be dropped.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, RespError> {
        // Fast path for the most common reply, a complete top-level bulk (GET
        // hit): no state machine, and the frame is built in place rather than
        // moved through the generic path's intermediate enums. Anything else
        // (including every error) falls through to the generic path, which
        // decides identically.
        if self.stack.is_empty() && self.bulk.is_none() && buf.first() == Some(&b'$') {
            if let Ok(Some((n, used))) = int_line(&buf[1..]) {
                if (0..=MAX_BULK_LEN as i64).contains(&n) {
                    let (start, len) = (1 + used, n as usize);
                    if buf.get(start + len..start + len + 2) == Some(b"\r\n") {
                        buf.advance(start);
                        let data = buf.split_to(len).freeze();
                        buf.advance(2);
                        return Ok(Some(Frame::Bulk(data)));
                    }
                }
            }
        }
        self.parse_slow(buf)
    }

    #[inline(never)]
    fn parse_slow(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, RespError> {
        let res = self.parse_inner(buf);
        if res.is_err() {
            // The stream is unusable; don't keep half-built arrays around.
            self.reset();
        }
        res
    }

    /// True when bytes of an unfinished reply have been consumed into the
    /// parser (the connection is mid-reply).
    pub fn in_progress(&self) -> bool {
        !self.stack.is_empty() || self.bulk.is_some()
    }

    /// Forget any partial reply (e.g. when the connection is replaced).
    pub fn reset(&mut self) {
        self.stack.clear();
        self.bulk = None;
        self.scanned = 0;
    }

    #[inline]
    fn parse_inner(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, RespError> {
        loop {
            let mut frame = match self.step(buf)? {
                None => return Ok(None),
                Some(Step::Frame(f)) => f,
                Some(Step::Open(n, kind)) => {
                    if self.stack.len() >= MAX_DEPTH {
                        return Err(invalid("arrays nested too deep"));
                    }
                    // Pre-size only for elements whose bytes could already be
                    // here (each takes >= 3 bytes), never from the peer's count.
                    let cap = n.min(buf.len() / 3);
                    self.stack.push(PartialArray {
                        items: Vec::with_capacity(cap),
                        remaining: n,
                        kind,
                    });
                    continue;
                }
            };
            // Attach the finished value to its parent, closing every array
            // that it completes.
            loop {
                let Some(top) = self.stack.last_mut() else {
                    return Ok(Some(frame));
                };
                top.items.push(frame);
                top.remaining -= 1;
                if top.remaining > 0 {
                    break;
                }
                match self.stack.pop() {
                    Some(done) => {
                        frame = match done.kind {
                            Aggregate::Array => Frame::Array(done.items),
                            Aggregate::Push => Frame::Push(done.items),
                            Aggregate::Map => Frame::Map(done.items),
                        }
                    }
                    None => return Err(invalid("internal: empty array stack")),
                }
            }
        }
    }

    /// Parse one header or scalar from the front of `buf`.
    #[inline]
    fn step(&mut self, buf: &mut BytesMut) -> Result<Option<Step>, RespError> {
        if let Some(len) = self.bulk {
            return Ok(self.bulk_payload(buf, len)?.map(Step::Frame));
        }
        let Some(&kind) = buf.first() else {
            return Ok(None);
        };
        match kind {
            b'$' => {
                let Some((n, used)) = int_line(&buf[1..])? else {
                    return Ok(None);
                };
                buf.advance(1 + used);
                match n {
                    -1 => Ok(Some(Step::Frame(Frame::Null))),
                    n if n < 0 => Err(invalid("negative bulk length")),
                    n if n as u64 > MAX_BULK_LEN as u64 => Err(invalid("bulk too long")),
                    n => {
                        let len = n as usize;
                        self.bulk = Some(len);
                        Ok(self.bulk_payload(buf, len)?.map(Step::Frame))
                    }
                }
            }
            b'*' | b'>' | b'%' => {
                let Some((n, used)) = int_line(&buf[1..])? else {
                    return Ok(None);
                };
                buf.advance(1 + used);
                let kind = match kind {
                    b'*' => Aggregate::Array,
                    b'>' => Aggregate::Push,
                    _ => Aggregate::Map,
                };
                match (n, kind) {
                    (-1, Aggregate::Array) => Ok(Some(Step::Frame(Frame::NullArray))),
                    (0, Aggregate::Array) => Ok(Some(Step::Frame(Frame::Array(Vec::new())))),
                    (0, Aggregate::Push) => Ok(Some(Step::Frame(Frame::Push(Vec::new())))),
                    (0, Aggregate::Map) => Ok(Some(Step::Frame(Frame::Map(Vec::new())))),
                    (n, _) if n < 0 => Err(invalid("negative array length")),
                    (n, _) if n as u64 > MAX_ARRAY_LEN as u64 => Err(invalid("array too long")),
                    // A map of n pairs is 2n frames.
                    (n, Aggregate::Map) => Ok(Some(Step::Open(2 * n as usize, kind))),
                    (n, _) => Ok(Some(Step::Open(n as usize, kind))),
                }
            }
            b'_' | b'#' => {
                // `_\r\n`, `#t\r\n`, `#f\r\n`: decided by bytes present.
                let want: &[u8] = match (kind, buf.get(1)) {
                    (b'_', _) => b"_\r\n",
                    (_, Some(b't')) => b"#t\r\n",
                    (_, Some(b'f')) => b"#f\r\n",
                    (_, None) => return Ok(None),
                    _ => return Err(invalid("invalid boolean")),
                };
                let have = &buf[..buf.len().min(want.len())];
                if have != &want[..have.len()] {
                    return Err(invalid("invalid null or boolean"));
                }
                if have.len() < want.len() {
                    return Ok(None);
                }
                let frame = match want[1] {
                    b't' => Frame::Boolean(true),
                    b'f' => Frame::Boolean(false),
                    _ => Frame::Null,
                };
                buf.advance(want.len());
                Ok(Some(Step::Frame(frame)))
            }
            b':' => {
                let Some((n, used)) = int_line(&buf[1..])? else {
                    return Ok(None);
                };
                buf.advance(1 + used);
                Ok(Some(Step::Frame(Frame::Integer(n))))
            }
            b'+' => Ok(self.line(buf)?.map(|b| Step::Frame(Frame::Simple(b)))),
            b'-' => Ok(self.line(buf)?.map(|b| Step::Frame(Frame::Error(b)))),
            _ => Err(invalid("unknown type byte")),
        }
    }

    /// The payload of a bulk whose length line is consumed: `len` bytes + CRLF.
    #[inline]
    fn bulk_payload(&mut self, buf: &mut BytesMut, len: usize) -> Result<Option<Frame>, RespError> {
        // len <= MAX_BULK_LEN, so no overflow.
        if buf.len() < len + 2 {
            return Ok(None);
        }
        if buf[len..len + 2] != *b"\r\n" {
            return Err(invalid("bulk not terminated by CRLF"));
        }
        self.bulk = None;
        let data = buf.split_to(len).freeze();
        buf.advance(2);
        Ok(Some(Frame::Bulk(data)))
    }

    /// A `+`/`-` line: content between the type byte and CRLF.
    fn line(&mut self, buf: &mut BytesMut) -> Result<Option<bytes::Bytes>, RespError> {
        // '\n' may sit at most at index 1 (type) + MAX_LINE_LEN + 1 ('\r').
        let limit = buf.len().min(MAX_LINE_LEN + 3);
        // Resume the search where the previous call stopped (never past `limit`,
        // even if the caller broke the append-only contract).
        let start = self.scanned.max(1).min(limit);
        let Some(off) = memchr::memchr(b'\n', &buf[start..limit]) else {
            if buf.len() >= MAX_LINE_LEN + 3 {
                return Err(invalid("line too long"));
            }
            self.scanned = limit;
            return Ok(None);
        };
        let nl = start + off;
        if nl < 2 || buf[nl - 1] != b'\r' {
            return Err(invalid("line not terminated by CRLF"));
        }
        self.scanned = 0;
        let mut content = buf.split_to(nl - 1);
        content.advance(1);
        buf.advance(2);
        Ok(Some(content.freeze()))
    }
}

/// Parse `-?[0-9]+\r\n` at the front of `b`. Returns the value and the bytes
/// used (CRLF included), or `None` when the line is still incomplete. Every
/// error is decided by a byte that is present, so the verdict never depends
/// on how the input was split.
#[inline]
fn int_line(b: &[u8]) -> Result<Option<(i64, usize)>, RespError> {
    let neg = b.first() == Some(&b'-');
    let start = neg as usize;
    let mut i = start;
    let mut v: i64 = 0;
    loop {
        let Some(&c) = b.get(i) else {
            return Ok(None);
        };
        match c {
            b'0'..=b'9' => {
                if i - start == MAX_DIGITS {
                    return Err(invalid("integer too long"));
                }
                let d = (c - b'0') as i64;
                // Accumulate negatives downwards so i64::MIN parses.
                v = v
                    .checked_mul(10)
                    .and_then(|v| {
                        if neg {
                            v.checked_sub(d)
                        } else {
                            v.checked_add(d)
                        }
                    })
                    .ok_or(invalid("integer overflow"))?;
                i += 1;
            }
            b'\r' => break,
            _ => return Err(invalid("invalid integer")),
        }
    }
    if i == start {
        return Err(invalid("empty integer"));
    }
    match b.get(i + 1) {
        None => Ok(None),
        Some(b'\n') => Ok(Some((v, i + 2))),
        Some(_) => Err(invalid("integer line not terminated by CRLF")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_lines() {
        assert_eq!(int_line(b"0\r\n"), Ok(Some((0, 3))));
        assert_eq!(int_line(b"-12\r\nx"), Ok(Some((-12, 5))));
        assert_eq!(
            int_line(b"-9223372036854775808\r\n"),
            Ok(Some((i64::MIN, 22)))
        );
        assert_eq!(
            int_line(b"9223372036854775807\r\n"),
            Ok(Some((i64::MAX, 21)))
        );
        assert!(int_line(b"9223372036854775808\r\n").is_err());
        assert!(int_line(b"-9223372036854775809\r\n").is_err());
        assert!(int_line(b"00000000000000000000").is_err());
        assert!(int_line(b"\r\n").is_err());
        assert!(int_line(b"-\r\n").is_err());
        assert!(int_line(b"+1\r\n").is_err());
        assert!(int_line(b"1\rx").is_err());
        assert_eq!(int_line(b"12"), Ok(None));
        assert_eq!(int_line(b"12\r"), Ok(None));
        assert_eq!(int_line(b""), Ok(None));
        assert_eq!(int_line(b"-"), Ok(None));
    }
}

//! RESP server side: parsing client requests (arrays of bulk strings, and
//! inline commands) the way Redis 7 does, with its error replies.
//!
//! The parser is resumable: it remembers how far into the buffer it got (the
//! argument boundaries found so far), so a large request arriving over many
//! reads is scanned once. Nothing is allocated from a declared length: a
//! client announcing a 1 GB bulk only makes the caller keep the bytes that
//! actually arrive (bounded by `max_bulk_len`); the argument list grows one
//! entry per argument received. Requests do not nest: an aggregate where a
//! bulk string is expected is Redis' `expected '$'` protocol error.
//!
//! Contract: between calls returning `Ok(None)` the caller may only append
//! to the buffer. After `Ok(Some(consumed))` the arguments are
//! [`RequestParser::args`] ranges into the buffer's first `consumed` bytes;
//! the next call starts a new request (the caller drops those bytes first).

use std::ops::Range;

use memchr::memchr;

/// Longest inline command or `*`/`$` length line (Redis' PROTO_INLINE_MAX_SIZE).
pub const MAX_INLINE_LEN: usize = 64 * 1024;
/// Most arguments in one request (Redis' multibulk limit).
pub const MAX_REQUEST_ARGS: usize = 1024 * 1024;
/// Redis' limits on a client that still has to authenticate.
pub const UNAUTHENTICATED_MAX_ARGS: usize = 10;
pub const UNAUTHENTICATED_MAX_BULK: usize = 16384;

/// What a request may declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Largest bulk string (Redis' `proto-max-bulk-len`).
    pub max_bulk_len: usize,
    /// Most arguments.
    pub max_args: usize,
    /// The client has not authenticated yet (Redis' tighter limits,
    /// with their own error text).
    pub unauthenticated: bool,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_bulk_len: 512 * 1024 * 1024,
            max_args: MAX_REQUEST_ARGS,
            unauthenticated: false,
        }
    }
}

/// A request Redis would refuse; the connection is closed after the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("Protocol error: too big inline request")]
    InlineTooBig,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("Protocol error: too big mbulk count string")]
    CountLineTooBig,
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    #[error("Protocol error: too big bulk count string")]
    BulkLineTooBig,
    #[error("Protocol error: expected '$', got '{}'", char::from(*.0))]
    ExpectedBulk(u8),
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
}

/// Where the parser is inside the current request.
#[derive(Debug, Default)]
pub struct RequestParser {
    args: Vec<Range<usize>>,
    /// Arguments the `*` line announced (None: not read yet).
    argc: Option<usize>,
    /// Offset of the next unparsed byte.
    pos: usize,
    /// Bytes of an unterminated line already searched for `\n`.
    scanned: usize,
}

impl RequestParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// The arguments of the request the last `Ok(Some(_))` completed (none
    /// for an empty request, which the caller skips as Redis does).
    pub fn args(&self) -> &[Range<usize>] {
        &self.args
    }

    /// Look for one complete request at the front of `buf`. `Ok(Some(n))`:
    /// it is the first `n` bytes; `Ok(None)`: more input is needed.
    pub fn parse(
        &mut self,
        buf: &[u8],
        limits: &RequestLimits,
    ) -> Result<Option<usize>, RequestError> {
        if self.argc.is_none() && self.pos == 0 && self.scanned == 0 {
            self.args.clear();
        }
        let res = match buf.first() {
            None => Ok(None),
            Some(b'*') => self.multibulk(buf, limits),
            Some(_) => self.inline(buf),
        };
        if !matches!(res, Ok(None)) {
            // Complete or refused: the next call starts a new request.
            self.argc = None;
            self.pos = 0;
            self.scanned = 0;
        }
        res
    }

    fn multibulk(
        &mut self,
        buf: &[u8],
        limits: &RequestLimits,
    ) -> Result<Option<usize>, RequestError> {
        let argc = match self.argc {
            Some(n) => n,
            None => {
                let Some((n, next)) = self.length_line(buf, 0, RequestError::CountLineTooBig)?
                else {
                    return Ok(None);
                };
                if limits.unauthenticated && n > UNAUTHENTICATED_MAX_ARGS as i64 {
                    return Err(RequestError::UnauthenticatedMultibulkLength);
                }
                let n = match n {
                    // `*0` and `*-1`: nothing to run, as Redis.
                    i64::MIN..=0 => return Ok(Some(next)),
                    n if n as u64 > limits.max_args as u64 => {
                        return Err(RequestError::InvalidMultibulkLength)
                    }
                    n => n as usize,
                };
                self.argc = Some(n);
                self.pos = next;
                // Grow with the arguments that arrive, not the count announced.
                self.args.reserve(n.min(16));
                n
            }
        };
        while self.args.len() < argc {
            let Some(&first) = buf.get(self.pos) else {
                return Ok(None);
            };
            if first != b'$' {
                return Err(RequestError::ExpectedBulk(first));
            }
            let Some((len, start)) =
                self.length_line(buf, self.pos, RequestError::BulkLineTooBig)?
            else {
                return Ok(None);
            };
            if limits.unauthenticated && len > UNAUTHENTICATED_MAX_BULK as i64 {
                return Err(RequestError::UnauthenticatedBulkLength);
            }
            if len < 0 || len as u64 > limits.max_bulk_len as u64 {
                return Err(RequestError::InvalidBulkLength);
            }
            let end = start + len as usize;
            // Redis skips the two bytes after the payload without checking them.
            if buf.len() < end + 2 {
                return Ok(None);
            }
            self.args.push(start..end);
            self.pos = end + 2;
        }
        Ok(Some(self.pos))
    }

    /// `<prefix><integer>\r\n` at `at`: the integer and where the next byte
    /// is. Redis reads up to `\r` and takes the number with string2ll.
    fn length_line(
        &mut self,
        buf: &[u8],
        at: usize,
        too_big: RequestError,
    ) -> Result<Option<(i64, usize)>, RequestError> {
        let rest = buf.get(at..).unwrap_or_default();
        // A line arriving in pieces is searched once.
        let from = self.scanned.min(rest.len());
        let Some(cr) = memchr(b'\r', &rest[from..]).map(|i| from + i) else {
            if rest.len() > MAX_INLINE_LEN {
                return Err(too_big);
            }
            self.scanned = rest.len();
            return Ok(None);
        };
        if cr > MAX_INLINE_LEN {
            return Err(too_big);
        }
        // The `\n` after `\r` must have arrived before the line is used.
        if rest.len() < cr + 2 {
            self.scanned = cr;
            return Ok(None);
        }
        let digits = rest.get(1..cr).unwrap_or_default();
        let invalid = if at == 0 {
            RequestError::InvalidMultibulkLength
        } else {
            RequestError::InvalidBulkLength
        };
        let n = string2ll(digits).ok_or(invalid)?;
        self.scanned = 0;
        Ok(Some((n, at + cr + 2)))
    }

    /// A command line without `*`: arguments separated by spaces (Redis'
    /// `sdssplitargs`, with its quoting).
    fn inline(&mut self, buf: &[u8]) -> Result<Option<usize>, RequestError> {
        let from = self.scanned;
        let Some(nl) = memchr(b'\n', buf.get(from..).unwrap_or_default()).map(|i| from + i) else {
            if buf.len() > MAX_INLINE_LEN {
                return Err(RequestError::InlineTooBig);
            }
            self.scanned = buf.len();
            return Ok(None);
        };
        if nl > MAX_INLINE_LEN {
            return Err(RequestError::InlineTooBig);
        }
        let mut line_end = nl;
        if line_end > 0 && buf[line_end - 1] == b'\r' {
            line_end -= 1;
        }
        split_inline(&buf[..line_end], &mut self.args)?;
        Ok(Some(nl + 1))
    }
}

/// Split an inline line into argument ranges. Quoted arguments are taken
/// whole when they contain no escapes (the ranges point into the buffer,
/// so an escaped argument cannot be represented): an escape or unbalanced
/// quote is refused as Redis refuses unbalanced quotes.
fn split_inline(line: &[u8], args: &mut Vec<Range<usize>>) -> Result<(), RequestError> {
    let mut i = 0;
    while i < line.len() {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            break;
        }
        let quote = line[i];
        if quote == b'"' || quote == b'\'' {
            let start = i + 1;
            let close = line
                .get(start..)
                .and_then(|rest| memchr(quote, rest))
                .map(|j| start + j)
                .ok_or(RequestError::UnbalancedQuotes)?;
            if line[start..close].contains(&b'\\') {
                return Err(RequestError::UnbalancedQuotes);
            }
            // Redis wants a space (or the end) after the closing quote.
            if close + 1 < line.len() && !line[close + 1].is_ascii_whitespace() {
                return Err(RequestError::UnbalancedQuotes);
            }
            args.push(start..close);
            i = close + 1;
        } else {
            let start = i;
            while i < line.len() && !line[i].is_ascii_whitespace() {
                i += 1;
            }
            args.push(start..i);
        }
    }
    Ok(())
}

/// Redis' `string2ll`: optional `-`, decimal digits, no leading zeros (but
/// "0"), no spaces or `+`, within i64.
pub fn string2ll(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first()? {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    match digits {
        [] => return None,
        [b'0'] if !neg => return Some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    if digits.len() > 19 {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes consumed and the arguments of one complete request.
    type Parsed = Option<(usize, Vec<Vec<u8>>)>;

    fn one(input: &[u8]) -> Result<Parsed, RequestError> {
        let mut p = RequestParser::new();
        let limits = RequestLimits::default();
        Ok(p.parse(input, &limits)?.map(|n| {
            let args = p.args().iter().map(|r| input[r.clone()].to_vec()).collect();
            (n, args)
        }))
    }

    #[test]
    fn multibulk_and_inline() {
        let req = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nrest";
        assert_eq!(
            one(req).unwrap(),
            Some((req.len() - 4, vec![b"GET".to_vec(), b"k".to_vec()]))
        );
        assert_eq!(
            one(b"  set a  'b c' \r\n").unwrap(),
            Some((17, vec![b"set".to_vec(), b"a".to_vec(), b"b c".to_vec()]))
        );
        assert_eq!(one(b"\r\n").unwrap(), Some((2, vec![])));
        assert_eq!(one(b"*0\r\n").unwrap(), Some((4, vec![])));
        assert_eq!(one(b"*-1\r\n").unwrap(), Some((5, vec![])));
    }

    #[test]
    fn every_split_point_resumes() {
        let req = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n";
        for cut in 0..req.len() {
            let mut p = RequestParser::new();
            let limits = RequestLimits::default();
            assert_eq!(p.parse(&req[..cut], &limits), Ok(None), "cut {cut}");
            assert_eq!(p.parse(req, &limits), Ok(Some(req.len())));
            assert_eq!(p.args().len(), 3);
            assert_eq!(&req[p.args()[2].clone()], b"0123456789");
        }
    }

    #[test]
    fn redis_errors() {
        assert_eq!(one(b"*1\r\n*1\r\n"), Err(RequestError::ExpectedBulk(b'*')));
        assert_eq!(one(b"*x\r\n"), Err(RequestError::InvalidMultibulkLength));
        assert_eq!(
            one(b"*1048577\r\n"),
            Err(RequestError::InvalidMultibulkLength)
        );
        assert_eq!(one(b"*1\r\n$-1\r\n"), Err(RequestError::InvalidBulkLength));
        assert_eq!(
            one(b"*1\r\n$536870913\r\n"),
            Err(RequestError::InvalidBulkLength)
        );
        // A declared 512 MB bulk is accepted and waits for its bytes.
        assert_eq!(one(b"*1\r\n$536870912\r\nabc"), Ok(None));
        assert_eq!(one(b"'abc\r\n"), Err(RequestError::UnbalancedQuotes));
        assert_eq!(
            one(&vec![b'a'; MAX_INLINE_LEN + 1]),
            Err(RequestError::InlineTooBig)
        );
        assert_eq!(
            RequestError::ExpectedBulk(b'*').to_string(),
            "Protocol error: expected '$', got '*'"
        );
        let mut p = RequestParser::new();
        let unauth = RequestLimits {
            unauthenticated: true,
            ..RequestLimits::default()
        };
        assert_eq!(
            p.parse(b"*11\r\n", &unauth),
            Err(RequestError::UnauthenticatedMultibulkLength)
        );
        assert_eq!(
            p.parse(b"*1\r\n$16385\r\n", &unauth),
            Err(RequestError::UnauthenticatedBulkLength)
        );
    }

    #[test]
    fn string2ll_is_strict() {
        assert_eq!(string2ll(b"0"), Some(0));
        assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(string2ll(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"-",
            b"01",
            b"+1",
            b" 1",
            b"9223372036854775808",
            b"-0",
        ] {
            assert_eq!(string2ll(bad), None, "{bad:?}");
        }
    }
}

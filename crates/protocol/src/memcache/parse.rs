//! Request parser: `&[u8]` in, a request and the bytes it used out.
//!
//! The parser reproduces what memcached 1.6.18 does with the same bytes, so
//! that a client sees the same replies and the connection stays in sync the
//! same way (see `tests/memcache_parse.rs`, each case confirmed against a live
//! memcached 1.6.18). The points where memcached is not what its docs say:
//!
//! * A line ends at `\n`; one `\r` before it is dropped. Everything after a
//!   NUL byte in a line is ignored (memcached works on C strings).
//! * Tokens are separated by spaces only; keys may hold any other byte,
//!   control characters included. Keys are 1..=250 bytes.
//! * Numbers are read like C `strtol`: see [`tokens`] for the quirks (32-bit
//!   fields keep the low 32 bits of a 64-bit value, `+5` and `\t5` are 5).
//! * Once memcached has seen `noreply` as the last token of a command that
//!   takes it, every later error of that command is silent too (bad numbers,
//!   key too long, object too large, bad data chunk). Errors found before
//!   that point (wrong token count → `ERROR`) are always answered.
//! * Only a too-large data block is swallowed; after other errors in a
//!   storage command the data block is read as the next command line.
//! * A line that is not a multi-get (`get `/`gets ` after at most 100
//!   spaces) closes the connection when more than 2048 bytes of it wait for
//!   their `\n` after a read, or when it is longer than memcached's 16 KiB
//!   read buffer; a longer complete line read at once is served. See
//!   [`MAX_LINE_LEN`], [`READ_BUFFER_SIZE`] and [`unterminated_line_closes`].
//! * An unknown command whose last token starts with `HTTP/` closes the
//!   connection, unless the command starts with a letter memcached
//!   dispatches on (`g s a c i d t`, or a two-letter `m?`).

mod admin;
mod arith;
mod delete;
mod meta;
mod meta_arith;
mod meta_delete;
mod meta_get;
mod meta_set;
mod retrieval;
mod stats;
mod storage;
mod tokens;
mod touch;

use super::reply;
use super::{ArithCommand, Request, RetrievalCommand, StorageCommand};
use tokens::next_token;

/// Limits that memcached enforces while parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Largest data block a storage command may carry (memcached `-I`).
    pub max_item_size: usize,
    /// Most bytes of a line that is not a multi-get that may wait for their
    /// `\n`; memcached's is [`MAX_LINE_LEN`].
    pub max_line_len: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_item_size: 1024 * 1024,
            max_line_len: MAX_LINE_LEN,
        }
    }
}

/// Bytes memcached 1.6.18 (64-bit, CAS enabled) adds to a data block when it
/// sizes an item: the item header (48), the CAS value (8), the NUL after the
/// key (1) and the data's `\r\n` (2). Measured: with `-I 1m`, key `b` and
/// flags 0, 1048516 data bytes are stored and 1048517 are too large.
pub const ITEM_OVERHEAD: usize = 48 + 8 + 1 + 2;

/// Extra bytes for non-zero client flags (stored as a 4-byte suffix).
const FLAGS_SUFFIX: usize = 4;

impl ParseLimits {
    /// Largest data block memcached stores for this key length and flags:
    /// `max_item_size - 59 - key_len - (flags != 0 ? 4 : 0)`. One byte more
    /// gets `SERVER_ERROR object too large for cache`.
    pub fn max_data_len(&self, key_len: usize, flags: u32) -> usize {
        let suffix = if flags == 0 { 0 } else { FLAGS_SUFFIX };
        self.max_item_size
            .saturating_sub(ITEM_OVERHEAD + key_len + suffix)
    }

    /// Longest line that is not a multi-get, its `\n` included: memcached's
    /// read buffer, or more when `max_line_len` allows more to wait.
    pub fn max_whole_line(&self) -> usize {
        READ_BUFFER_SIZE.max(self.max_line_len.saturating_add(2))
    }
}

/// What to do about input memcached would reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolError<'a> {
    /// Answer `reply` (a complete line including `\r\n`, e.g.
    /// `b"CLIENT_ERROR bad command line format\r\n"`, or empty when memcached
    /// stays silent) and discard `skip` bytes of input. `skip` may exceed what
    /// has arrived so far (a too-large data block is swallowed as it arrives);
    /// the caller discards the rest as it comes in. When `delete` is set,
    /// memcached also drops the item stored under that key.
    Reply {
        reply: &'static [u8],
        skip: usize,
        delete: Option<StaleKey<'a>>,
        /// The key of a classic storage command (set, add, replace,
        /// append, prepend, cas) refused after its line was valid (object
        /// too large, bad data chunk): memcached counts its `set` in `stats
        /// detail` all the same (not for a bad line, nor for `ms`).
        counted_set: Option<&'a [u8]>,
    },
    /// memcached closes the connection (e.g. an over-long line that is not a
    /// multi-get). `reply` is written first if not empty.
    Close { reply: &'static [u8] },
}

/// The key of a store memcached refused as too large, whose old item it
/// drops so that a stale value does not outlive a failed overwrite. It does
/// so for `set` (not add/replace/append/prepend/cas) and for `ms` in every
/// mode, and only once the command line was valid up to the size check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleKey<'a> {
    /// The key as sent, a slice of the input.
    pub key: &'a [u8],
    /// `key` is base64 (`ms` with the `b` flag): decode it before deleting.
    pub base64: bool,
}

/// Result of one parse attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A complete request that used `consumed` bytes of input.
    Complete {
        request: Request<&'a [u8]>,
        consumed: usize,
    },
    /// More bytes are needed; nothing was consumed.
    Incomplete,
    /// Input memcached rejects; see [`ProtocolError`].
    Invalid(ProtocolError<'a>),
}

/// Most bytes of a line that is not a multi-get that may wait for their `\n`.
///
/// memcached checks after each read: more than 2048 bytes with no `\n`
/// among them close the connection, unless they start with `get `/`gets `.
/// A longer line that arrives whole in one read is served (up to
/// [`READ_BUFFER_SIZE`]), so the verdict depends on how the bytes arrive.
/// [`parse_request`] keeps such a line [`Parsed::Incomplete`]; the caller,
/// once it has read all that is ready, asks [`unterminated_line_closes`].
pub const MAX_LINE_LEN: usize = 2048;

/// memcached 1.6.18's read buffer (`READ_BUFFER_SIZE`): a line that is not
/// a multi-get and does not fit in it with its `\n` closes the connection.
/// Measured: `mg` lines of 16,382 bytes plus `\r\n` are served, one more
/// byte closes.
pub const READ_BUFFER_SIZE: usize = 16384;

/// Leading spaces memcached skips when checking an over-long line for `get `.
const MAX_LEADING_SPACES: usize = 100;

/// One command line: its text (without `\r\n`, cut at a NUL) and the bytes
/// it takes in the input including the `\n`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Line<'a> {
    pub(crate) text: &'a [u8],
    pub(crate) len: usize,
}

impl<'a> Line<'a> {
    /// Answer `reply` and drop this line.
    pub(crate) fn reply(self, reply: &'static [u8]) -> Parsed<'a> {
        Parsed::Invalid(ProtocolError::Reply {
            reply,
            skip: self.len,
            delete: None,
            counted_set: None,
        })
    }

    /// Answer `reply`, or nothing under `noreply`, and drop this line.
    pub(crate) fn reply_unless(self, noreply: bool, reply: &'static [u8]) -> Parsed<'a> {
        self.reply(if noreply { b"" } else { reply })
    }

    pub(crate) fn complete(self, request: Request<&'a [u8]>) -> Parsed<'a> {
        Parsed::Complete {
            request,
            consumed: self.len,
        }
    }
}

/// Parse one request from the front of `buf`.
pub fn parse_request<'a>(buf: &'a [u8], limits: &ParseLimits) -> Parsed<'a> {
    // One scan finds the line end, or a NUL before it (rare).
    let (newline, nul) = match memchr::memchr2(b'\n', 0, buf) {
        Some(at) if buf.get(at) == Some(&b'\n') => (Some(at), None),
        Some(nul) => {
            let after = buf.get(nul + 1..).unwrap_or_default();
            (
                memchr::memchr(b'\n', after).map(|at| nul + 1 + at),
                Some(nul),
            )
        }
        None => (None, None),
    };
    // Past memcached's read buffer no `\n` can arrive in time.
    let Some(newline) = newline else {
        if buf.len() >= limits.max_whole_line() && !is_multiget_prefix(buf) {
            return close_silently();
        }
        return Parsed::Incomplete;
    };
    if newline >= limits.max_whole_line() && !is_multiget_prefix(buf) {
        return close_silently();
    }
    let Some(mut text) = buf.get(..newline) else {
        return Parsed::Incomplete;
    };
    if let Some(stripped) = text.strip_suffix(b"\r") {
        text = stripped;
    }
    // memcached reads the line as a C string: it ends at the first NUL.
    if let Some(nul) = nul {
        text = text.get(..nul).unwrap_or(text);
    }
    let line = Line {
        text,
        len: newline + 1,
    };
    dispatch(buf, line, limits)
}

/// memcached's verdict on input that [`parse_request`] found
/// [`Parsed::Incomplete`], once a read has left it so: more than
/// `max_line_len` bytes of a line that is not a multi-get still wait for
/// their `\n` (anything with a `\n` is a command waiting for its data).
/// `true`: close the connection without a reply.
pub fn unterminated_line_closes(buf: &[u8], limits: &ParseLimits) -> bool {
    buf.len() > limits.max_line_len
        && !is_multiget_prefix(buf)
        && memchr::memchr(b'\n', buf).is_none()
}

fn close_silently<'a>() -> Parsed<'a> {
    Parsed::Invalid(ProtocolError::Close { reply: b"" })
}

/// memcached lets a line wait past [`MAX_LINE_LEN`] only for `get`/`gets`.
fn is_multiget_prefix(buf: &[u8]) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    if spaces > MAX_LEADING_SPACES {
        return false;
    }
    let rest = buf.get(spaces..).unwrap_or_default();
    rest.starts_with(b"get ") || rest.starts_with(b"gets ")
}

fn dispatch<'a>(buf: &'a [u8], line: Line<'a>, limits: &ParseLimits) -> Parsed<'a> {
    let Some((command, rest)) = next_token(line.text) else {
        return line.reply(reply::ERROR);
    };
    // memcached has no command shorter than two bytes.
    if command.len() < 2 {
        return line.reply(reply::ERROR);
    }
    match command {
        b"get" | b"bget" => retrieval::parse(line, rest, RetrievalCommand::Get),
        b"gets" => retrieval::parse(line, rest, RetrievalCommand::Gets),
        b"gat" => retrieval::parse(line, rest, RetrievalCommand::Gat),
        b"gats" => retrieval::parse(line, rest, RetrievalCommand::Gats),
        b"set" => storage::parse(buf, line, rest, StorageCommand::Set, limits),
        b"add" => storage::parse(buf, line, rest, StorageCommand::Add, limits),
        b"replace" => storage::parse(buf, line, rest, StorageCommand::Replace, limits),
        b"append" => storage::parse(buf, line, rest, StorageCommand::Append, limits),
        b"prepend" => storage::parse(buf, line, rest, StorageCommand::Prepend, limits),
        b"cas" => storage::parse(buf, line, rest, StorageCommand::Cas, limits),
        b"incr" => arith::parse(line, rest, ArithCommand::Incr),
        b"decr" => arith::parse(line, rest, ArithCommand::Decr),
        b"delete" => delete::parse(line, rest),
        b"touch" => touch::parse(line, rest),
        b"flush_all" => admin::parse_flush_all(line, rest),
        b"version" => line.complete(Request::Version),
        b"quit" => line.complete(Request::Quit),
        b"verbosity" => admin::parse_verbosity(line, rest),
        b"stats" => stats::parse_stats(line, rest),
        b"cache_memlimit" => admin::parse_cache_memlimit(line, rest),
        b"slabs" => admin::parse_slabs(line, rest),
        b"lru" => admin::parse_lru(line, rest),
        b"lru_crawler" => admin::parse_lru_crawler(line, rest),
        b"watch" => admin::parse_watch(line, rest),
        [b'm', _] => meta::parse(buf, line, command, rest, limits),
        // memcached 1.6.18 without -A answers this to any `shutdown` line
        // (memshift has no remote shutdown either).
        b"shutdown" => line.reply(b"ERROR: shutdown not enabled\r\n"),
        // memcached commands a proxy does not offer: answered like unknown
        // commands, but never mistaken for HTTP. (`misbehave` and
        // `debugtime` exist only in debug builds of memcached: unknown.)
        b"extstore" | b"refresh_certs" => line.reply(reply::ERROR),
        _ => unknown(line, command, rest),
    }
}

/// memcached answers `ERROR` to an unknown command, except that it hangs up
/// on what looks like an HTTP request line (last token `HTTP/...`) when the
/// command's first letter is not one it dispatches on.
fn unknown<'a>(line: Line<'a>, command: &'a [u8], rest: &'a [u8]) -> Parsed<'a> {
    let dispatched_letter = matches!(
        command.first(),
        Some(b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't')
    );
    if !dispatched_letter {
        let args = tokens::Args::split(rest);
        let last = if args.len() == 0 {
            command
        } else {
            args.last()
        };
        if last.starts_with(b"HTTP/") {
            return close_silently();
        }
    }
    line.reply(reply::ERROR)
}

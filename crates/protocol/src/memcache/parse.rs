//! Request parser: `&[u8]` in, a request and the bytes it used out.

use super::Request;

/// Limits that memcached enforces while parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Largest data block a storage command may carry (memcached `-I`).
    pub max_item_size: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_item_size: 1024 * 1024,
        }
    }
}

/// What to do about input memcached would reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolError {
    /// Answer `reply` (a complete line including `\r\n`, e.g.
    /// `b"CLIENT_ERROR bad command line format\r\n"`, or empty when memcached
    /// stays silent) and discard `skip` bytes of input. `skip` may exceed what
    /// has arrived so far (a too-large data block is swallowed as it arrives);
    /// the caller discards the rest as it comes in.
    Reply { reply: &'static [u8], skip: usize },
    /// memcached closes the connection (e.g. an over-long line that is not a
    /// multi-get). `reply` is written first if not empty.
    Close { reply: &'static [u8] },
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
    Invalid(ProtocolError),
}

/// Parse one request from the front of `buf`.
pub fn parse_request<'a>(buf: &'a [u8], limits: &ParseLimits) -> Parsed<'a> {
    let _ = (buf, limits);
    todo!("implemented by the protocol work")
}

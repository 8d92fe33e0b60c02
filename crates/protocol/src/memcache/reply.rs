//! Reply encoding, straight into the caller's buffer.
//!
//! Fixed lines are constants; everything else is written piecewise with
//! integers formatted on the stack (no allocation besides growing `buf`).
//! The error lines are the exact bytes memcached 1.6.18 sends.

use bytes::BytesMut;

pub const END: &[u8] = b"END\r\n";
pub const STORED: &[u8] = b"STORED\r\n";
pub const NOT_STORED: &[u8] = b"NOT_STORED\r\n";
pub const EXISTS: &[u8] = b"EXISTS\r\n";
pub const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
pub const DELETED: &[u8] = b"DELETED\r\n";
pub const TOUCHED: &[u8] = b"TOUCHED\r\n";
pub const OK: &[u8] = b"OK\r\n";
pub const ERROR: &[u8] = b"ERROR\r\n";
pub const RESET: &[u8] = b"RESET\r\n";

/// Malformed command line (bad number, key over 250 bytes, ...).
pub const CLIENT_ERROR_BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
/// Data block not followed by `\r\n`.
pub const CLIENT_ERROR_BAD_DATA_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
/// touch / gat / gats / flush_all with a non-numeric time.
pub const CLIENT_ERROR_INVALID_EXPTIME: &[u8] = b"CLIENT_ERROR invalid exptime argument\r\n";
/// incr / decr with a non-numeric delta.
pub const CLIENT_ERROR_INVALID_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta argument\r\n";
/// delete with a hold time other than 0 (two spaces before "Usage", sic).
pub const CLIENT_ERROR_DELETE_USAGE: &[u8] =
    b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
/// incr / decr on a value that is not a decimal number.
pub const CLIENT_ERROR_NON_NUMERIC: &[u8] =
    b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
/// Data block larger than the item size limit.
pub const SERVER_ERROR_TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
/// Allocation failure while storing.
pub const SERVER_ERROR_OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";

/// Longest decimal `u64`.
const U64_DIGITS: usize = 20;

/// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`
pub fn value(buf: &mut BytesMut, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    // "VALUE " + 3 spaces + flags + length + cas + 2 CRLFs.
    buf.reserve(key.len() + data.len() + 6 + 3 + 10 + 2 * U64_DIGITS + 4);
    buf.extend_from_slice(b"VALUE ");
    buf.extend_from_slice(key);
    buf.extend_from_slice(b" ");
    put_u64(buf, u64::from(flags));
    buf.extend_from_slice(b" ");
    put_u64(buf, data.len() as u64);
    if let Some(cas) = cas {
        buf.extend_from_slice(b" ");
        put_u64(buf, cas);
    }
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\n");
}

/// An incr/decr result: `<n>\r\n`.
pub fn number(buf: &mut BytesMut, n: u64) {
    put_u64(buf, n);
    buf.extend_from_slice(b"\r\n");
}

/// `VERSION <v>\r\n`
pub fn version(buf: &mut BytesMut, v: &str) {
    buf.extend_from_slice(b"VERSION ");
    put_line_safe(buf, v.as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// `STAT <name> <value>\r\n`
pub fn stat(buf: &mut BytesMut, name: &str, value: impl std::fmt::Display) {
    use std::fmt::Write;
    buf.extend_from_slice(b"STAT ");
    put_line_safe(buf, name.as_bytes());
    buf.extend_from_slice(b" ");
    let start = buf.len();
    // Writing into BytesMut cannot fail.
    let _ = write!(buf, "{value}");
    if let Some(written) = buf.get_mut(start..) {
        neutralize_line_breaks(written);
    }
    buf.extend_from_slice(b"\r\n");
}

/// `STAT <name> <value>\r\n` for an integer, without `fmt`.
pub fn stat_u64(buf: &mut BytesMut, name: &str, value: u64) {
    buf.extend_from_slice(b"STAT ");
    put_line_safe(buf, name.as_bytes());
    buf.extend_from_slice(b" ");
    put_u64(buf, value);
    buf.extend_from_slice(b"\r\n");
}

/// `SERVER_ERROR <msg>\r\n`
pub fn server_error(buf: &mut BytesMut, msg: &str) {
    buf.extend_from_slice(b"SERVER_ERROR ");
    put_line_safe(buf, msg.as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// `CLIENT_ERROR <msg>\r\n`
pub fn client_error(buf: &mut BytesMut, msg: &str) {
    buf.extend_from_slice(b"CLIENT_ERROR ");
    put_line_safe(buf, msg.as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// Decimal digits of `n` without allocating.
pub fn put_u64(buf: &mut BytesMut, n: u64) {
    let mut digits = [0u8; U64_DIGITS];
    buf.extend_from_slice(format_u64(n, &mut digits));
}

/// Decimal digits of `n`, written at the end of `out`; returns them.
pub fn format_u64(mut n: u64, out: &mut [u8; U64_DIGITS]) -> &[u8] {
    let mut start = out.len();
    for slot in out.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        start -= 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.get(start..).unwrap_or_default()
}

/// Text that ends up inside a reply line: a `\r` or `\n` in it (say, from a
/// backend's error message) would end the line early and desynchronize the
/// client, so they become spaces.
fn put_line_safe(buf: &mut BytesMut, text: &[u8]) {
    let start = buf.len();
    buf.extend_from_slice(text);
    if let Some(written) = buf.get_mut(start..) {
        neutralize_line_breaks(written);
    }
}

fn neutralize_line_breaks(text: &mut [u8]) {
    for b in text {
        if *b == b'\r' || *b == b'\n' {
            *b = b' ';
        }
    }
}

/// `MN\r\n`
pub const META_NOOP: &[u8] = b"MN\r\n";

/// What a meta reply reports about its item, for the return flags. A flag
/// whose value is `None` is not printed (memcached prints only what the
/// outcome knows: `c` on a failed `ms` is `c0`, a miss reports only `O`/`k`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaReturn {
    /// `s`: data length.
    pub size: Option<u64>,
    /// `c`: CAS unique.
    pub cas: Option<u64>,
    /// `f`: client flags.
    pub flags: Option<u32>,
    /// `t`: remaining TTL as memcached prints it (-1: none).
    pub ttl: Option<MetaTtl>,
    /// `h`: fetched before this request.
    pub hit_before: Option<bool>,
    /// `l`: seconds since the last access.
    pub idle: Option<u64>,
}

/// memcached's anti-stampede flags, printed after the return flags.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaTokens {
    /// A win token went to another client before (`Z`).
    pub sent_before: bool,
    /// The item is stale (`X`).
    pub stale: bool,
    /// This client won the token (`W`).
    pub won: bool,
}

/// ` Z`, ` X`, ` W` in memcached 1.6.18's order.
pub fn meta_tokens(buf: &mut BytesMut, t: MetaTokens) {
    if t.sent_before {
        buf.extend_from_slice(b" Z");
    }
    if t.stale {
        buf.extend_from_slice(b" X");
    }
    if t.won {
        buf.extend_from_slice(b" W");
    }
}

/// The TTL `t` prints, which depends on where `t` stands: memcached applies
/// `T` (and `N` for a created item) as it walks the flags, so a `t` before
/// `T` reports the old TTL and one after it the new one.
#[derive(Debug, Clone, Copy)]
pub struct MetaTtl {
    pub before: i64,
    /// TTL after a `T` token (when `T` applies).
    pub on_touch: Option<i64>,
    /// TTL after an `N` token (when the item was just created).
    pub on_vivify: Option<i64>,
}

/// The return flags of a meta reply, in the order of the request's flag
/// tokens: ` s<n>`, ` t<n>`, ` c<n>`, ` f<n>`, ` h<0|1>`, ` l<n>`,
/// ` O<opaque>`, ` k<key>` (base64 followed by ` b` when `base64`: the
/// request said `b`, or for `mg` the item was stored so). `key` is the
/// decoded key.
pub fn meta_flags(buf: &mut BytesMut, tokens: &[u8], key: &[u8], base64: bool, ret: &MetaReturn) {
    let mut ttl = ret.ttl.map(|t| t.before);
    for token in tokens.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
        let Some(&letter) = token.first() else {
            continue;
        };
        match letter {
            b's' => {
                if let Some(size) = ret.size {
                    buf.extend_from_slice(b" s");
                    put_u64(buf, size);
                }
            }
            b'c' => {
                if let Some(cas) = ret.cas {
                    buf.extend_from_slice(b" c");
                    put_u64(buf, cas);
                }
            }
            b'f' => {
                if let Some(flags) = ret.flags {
                    buf.extend_from_slice(b" f");
                    put_u64(buf, u64::from(flags));
                }
            }
            b'T' => {
                if let Some(new) = ret.ttl.and_then(|t| t.on_touch) {
                    ttl = Some(new);
                }
            }
            b'N' => {
                if let Some(new) = ret.ttl.and_then(|t| t.on_vivify) {
                    ttl = Some(new);
                }
            }
            b't' => {
                if let Some(t) = ttl {
                    buf.extend_from_slice(b" t");
                    if t < 0 {
                        buf.extend_from_slice(b"-1");
                    } else {
                        put_u64(buf, t as u64);
                    }
                }
            }
            b'h' => {
                if let Some(hit) = ret.hit_before {
                    buf.extend_from_slice(if hit { b" h1" } else { b" h0" });
                }
            }
            b'l' => {
                if let Some(idle) = ret.idle {
                    buf.extend_from_slice(b" l");
                    put_u64(buf, idle);
                }
            }
            b'O' => {
                // A token holds no `\n`: it is safe to echo as is.
                buf.extend_from_slice(b" ");
                buf.extend_from_slice(token);
            }
            b'k' => {
                buf.extend_from_slice(b" k");
                if base64 {
                    let mut encoded = Vec::with_capacity(key.len() * 4 / 3 + 4);
                    super::base64::encode_into(&mut encoded, key);
                    buf.extend_from_slice(&encoded);
                    buf.extend_from_slice(b" b");
                } else {
                    buf.extend_from_slice(key);
                }
            }
            _ => {}
        }
    }
}

//! Reply encoding, straight into the caller's buffer.

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

/// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`
pub fn value(buf: &mut BytesMut, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    buf.reserve(key.len() + data.len() + 48);
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
    buf.extend_from_slice(v.as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// `STAT <name> <value>\r\n`
pub fn stat(buf: &mut BytesMut, name: &str, value: impl std::fmt::Display) {
    use std::fmt::Write;
    buf.extend_from_slice(b"STAT ");
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b" ");
    let _ = write!(buf, "{value}");
    buf.extend_from_slice(b"\r\n");
}

/// `SERVER_ERROR <msg>\r\n`
pub fn server_error(buf: &mut BytesMut, msg: &str) {
    buf.extend_from_slice(b"SERVER_ERROR ");
    buf.extend_from_slice(msg.as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// `CLIENT_ERROR <msg>\r\n`
pub fn client_error(buf: &mut BytesMut, msg: &str) {
    buf.extend_from_slice(b"CLIENT_ERROR ");
    buf.extend_from_slice(msg.as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// Decimal digits of `n` without allocating.
pub fn put_u64(buf: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_line_with_and_without_cas() {
        let mut b = BytesMut::new();
        value(&mut b, b"k", 4294967295, b"abc", None);
        value(&mut b, b"k", 0, b"", Some(18446744073709551615));
        assert_eq!(
            &b[..],
            b"VALUE k 4294967295 3\r\nabc\r\nVALUE k 0 0 18446744073709551615\r\n\r\n"
        );
    }

    #[test]
    fn numbers_and_stats() {
        let mut b = BytesMut::new();
        number(&mut b, 0);
        stat(&mut b, "pid", 42);
        version(&mut b, "1.6.18");
        assert_eq!(&b[..], b"0\r\nSTAT pid 42\r\nVERSION 1.6.18\r\n");
    }
}

//! Command encoding (RESP2 arrays of bulk strings) straight into `BytesMut`.
//!
//! Nothing here allocates besides growing the destination buffer: integers
//! (the array and bulk length prefixes, `arg_i64`/`arg_u64` arguments) are
//! formatted into a stack buffer by [`fmt_u64`]/[`fmt_i64`].

use bytes::BytesMut;

/// Longest decimal rendering of an `i64`/`u64` (`-9223372036854775808` is 20,
/// `18446744073709551615` is 20).
const INT_BUF: usize = 20;

/// Writes one command: `*argc\r\n` then each argument as a bulk string.
/// The caller promises exactly `argc` arguments (checked in debug builds).
pub struct CommandWriter<'a> {
    buf: &'a mut BytesMut,
    remaining: usize,
}

impl<'a> CommandWriter<'a> {
    pub fn new(buf: &'a mut BytesMut, argc: usize) -> Self {
        put_header(buf, b'*', argc as u64);
        CommandWriter {
            buf,
            remaining: argc,
        }
    }

    /// A bulk-string argument.
    pub fn arg(&mut self, arg: &[u8]) -> &mut Self {
        self.count();
        // One reserve for header + payload + CRLF instead of one per piece.
        self.buf.reserve(arg.len() + INT_BUF + 6);
        put_header(self.buf, b'$', arg.len() as u64);
        self.buf.extend_from_slice(arg);
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// One bulk-string argument made of several parts written back to back
    /// (e.g. a header and a value) without concatenating them first.
    pub fn arg_parts(&mut self, parts: &[&[u8]]) -> &mut Self {
        self.count();
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.buf.reserve(len + INT_BUF + 6);
        put_header(self.buf, b'$', len as u64);
        for part in parts {
            self.buf.extend_from_slice(part);
        }
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// An integer argument, formatted in decimal without allocating.
    pub fn arg_i64(&mut self, n: i64) -> &mut Self {
        let mut tmp = [0u8; INT_BUF];
        let digits = fmt_i64(n, &mut tmp);
        self.arg(digits)
    }

    /// An unsigned integer argument, formatted in decimal without allocating.
    pub fn arg_u64(&mut self, n: u64) -> &mut Self {
        let mut tmp = [0u8; INT_BUF];
        let digits = fmt_u64(n, &mut tmp);
        self.arg(digits)
    }

    /// Arguments still owed before the command is complete.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    #[inline]
    fn count(&mut self) {
        debug_assert!(self.remaining > 0, "CommandWriter: more args than argc");
        self.remaining = self.remaining.wrapping_sub(1);
    }
}

impl Drop for CommandWriter<'_> {
    fn drop(&mut self) {
        // A short command would desynchronise the connection; catch it in
        // debug builds (but never double-panic while unwinding).
        if !std::thread::panicking() {
            debug_assert_eq!(self.remaining, 0, "CommandWriter: fewer args than argc");
        }
    }
}

/// Encode a whole command from a slice of arguments.
pub fn encode_command(buf: &mut BytesMut, args: &[&[u8]]) {
    let total: usize = args.iter().map(|a| a.len() + INT_BUF + 5).sum();
    buf.reserve(total + INT_BUF + 3);
    let mut w = CommandWriter::new(buf, args.len());
    for arg in args {
        w.arg(arg);
    }
}

/// `<prefix><n>\r\n`.
#[inline]
fn put_header(buf: &mut BytesMut, prefix: u8, n: u64) {
    if n < 100_000 {
        // Up to 8 bytes: assemble them in a register and append one u64.
        // Formatting into a byte array and copying that out costs a
        // store-forwarding stall (byte stores, wide load) or a memmove call.
        let digits = n.checked_ilog10().map_or(1, |l| l as usize + 1);
        let mut word = u64::from(prefix);
        let mut m = n;
        let mut k = digits;
        while k > 0 {
            word |= (u64::from(b'0') + m % 10) << (8 * k);
            m /= 10;
            k -= 1;
        }
        word |= 0x0a0d << (8 * (digits + 1)); // "\r\n"
        let end = buf.len() + digits + 3;
        buf.extend_from_slice(&word.to_le_bytes());
        buf.truncate(end);
    } else {
        let mut tmp = [0u8; INT_BUF];
        let digits = fmt_u64(n, &mut tmp);
        buf.extend_from_slice(&[prefix]);
        buf.extend_from_slice(digits);
        buf.extend_from_slice(b"\r\n");
    }
}

/// Formats `n` in decimal at the end of `out`; returns the digits.
#[inline]
pub(crate) fn fmt_u64(mut n: u64, out: &mut [u8; INT_BUF]) -> &[u8] {
    let mut i = INT_BUF;
    loop {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &out[i..]
}

/// Formats `n` in decimal (with a leading `-` when negative) at the end of `out`.
#[inline]
pub(crate) fn fmt_i64(n: i64, out: &mut [u8; INT_BUF]) -> &[u8] {
    // unsigned_abs handles i64::MIN, whose magnitude has 19 digits + sign = 20.
    let len = fmt_u64(n.unsigned_abs(), out).len();
    if n < 0 {
        let i = INT_BUF - len - 1;
        out[i] = b'-';
        &out[i..]
    } else {
        &out[INT_BUF - len..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints() {
        for n in [
            0i64,
            1,
            -1,
            9,
            10,
            -10,
            99,
            100,
            i64::MAX,
            i64::MIN,
            1234567890,
        ] {
            let mut t = [0u8; INT_BUF];
            assert_eq!(fmt_i64(n, &mut t), n.to_string().as_bytes());
        }
        for n in [0u64, 7, 10, u64::MAX, 1 << 40] {
            let mut t = [0u8; INT_BUF];
            assert_eq!(fmt_u64(n, &mut t), n.to_string().as_bytes());
        }
    }

    #[test]
    fn set_ex() {
        let mut buf = BytesMut::new();
        CommandWriter::new(&mut buf, 5)
            .arg(b"SET")
            .arg(b"key")
            .arg_parts(&[b"va", b"", b"lue"])
            .arg(b"EX")
            .arg_u64(100);
        assert_eq!(
            &buf[..],
            b"*5\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n$2\r\nEX\r\n$3\r\n100\r\n"
        );
        buf.clear();
        encode_command(&mut buf, &[]);
        assert_eq!(&buf[..], b"*0\r\n");
        buf.clear();
        CommandWriter::new(&mut buf, 1).arg_i64(i64::MIN);
        assert_eq!(&buf[..], b"*1\r\n$20\r\n-9223372036854775808\r\n");
        for n in [0u64, 9, 10, 99_999, 100_000, 123_456_789, u64::MAX] {
            buf.clear();
            put_header(&mut buf, b'$', n);
            assert_eq!(&buf[..], format!("${n}\r\n").as_bytes());
        }
    }

    #[test]
    #[should_panic]
    #[cfg(debug_assertions)]
    fn too_few_args_caught_in_debug() {
        let mut buf = BytesMut::new();
        CommandWriter::new(&mut buf, 2).arg(b"GET");
    }
}

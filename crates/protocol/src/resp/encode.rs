//! Command encoding (RESP2 arrays of bulk strings) straight into `BytesMut`.
//! Implemented by the protocol work; API fixed here.

use bytes::BytesMut;

/// Writes one command: `*argc\r\n` then each argument as a bulk string.
/// The caller promises exactly `argc` arguments (checked in debug builds).
pub struct CommandWriter<'a> {
    buf: &'a mut BytesMut,
    remaining: usize,
}

impl<'a> CommandWriter<'a> {
    pub fn new(buf: &'a mut BytesMut, argc: usize) -> Self {
        let _ = (buf, argc);
        todo!()
    }
    /// A bulk-string argument.
    pub fn arg(&mut self, arg: &[u8]) -> &mut Self {
        let _ = arg;
        todo!()
    }
    /// One bulk-string argument made of several parts written back to back
    /// (e.g. a header and a value) without concatenating them first.
    pub fn arg_parts(&mut self, parts: &[&[u8]]) -> &mut Self {
        let _ = parts;
        todo!()
    }
    /// An integer argument, formatted in decimal without allocating.
    pub fn arg_i64(&mut self, n: i64) -> &mut Self {
        let _ = n;
        todo!()
    }
    pub fn arg_u64(&mut self, n: u64) -> &mut Self {
        let _ = n;
        todo!()
    }
}

/// Encode a whole command from a slice of arguments.
pub fn encode_command(buf: &mut BytesMut, args: &[&[u8]]) {
    let _ = (buf, args);
    todo!()
}

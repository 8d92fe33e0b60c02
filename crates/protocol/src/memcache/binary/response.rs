//! Binary responses, byte for byte as memcached 1.6.18 writes them.

use bytes::{BufMut, BytesMut};

use super::header::RESPONSE_MAGIC;

/// Response status codes memcached 1.6.18 sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    NoError = 0x00,
    KeyNotFound = 0x01,
    KeyExists = 0x02,
    TooLarge = 0x03,
    InvalidArguments = 0x04,
    NotStored = 0x05,
    DeltaBadValue = 0x06,
    AuthError = 0x20,
    AuthContinue = 0x21,
    UnknownCommand = 0x81,
    OutOfMemory = 0x82,
    /// Not sent by memcached: memshift's answer when a backend failed
    /// (the body says why).
    TemporaryFailure = 0x86,
}

impl Status {
    /// memcached's error body for this status.
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::NoError | Status::AuthContinue => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::DeltaBadValue => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
            Status::TemporaryFailure => b"Temporary failure",
        }
    }
}

/// The fields of a response header that vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    /// The request's opcode, as sent.
    pub opcode: u8,
    pub status: Status,
    pub extras_len: u8,
    pub key_len: u16,
    pub body_len: u32,
    pub opaque: u32,
    pub cas: u64,
}

/// Append a response header.
pub fn put_header(buf: &mut BytesMut, h: &ResponseHeader) {
    buf.reserve(super::HEADER_LEN);
    buf.put_u8(RESPONSE_MAGIC);
    buf.put_u8(h.opcode);
    buf.put_u16(h.key_len);
    buf.put_u8(h.extras_len);
    buf.put_u8(0); // data type: raw bytes
    buf.put_u16(h.status as u16);
    buf.put_u32(h.body_len);
    buf.put_u32(h.opaque);
    buf.put_u64(h.cas);
}

/// A response with `body` only (no extras, no key).
pub fn put_body(
    buf: &mut BytesMut,
    opcode: u8,
    opaque: u32,
    status: Status,
    cas: u64,
    body: &[u8],
) {
    put_header(
        buf,
        &ResponseHeader {
            opcode,
            status,
            extras_len: 0,
            key_len: 0,
            body_len: body.len() as u32,
            opaque,
            cas,
        },
    );
    buf.extend_from_slice(body);
}

/// An error with memcached's standard body for `status`.
pub fn put_error(buf: &mut BytesMut, opcode: u8, opaque: u32, status: Status) {
    put_body(buf, opcode, opaque, status, 0, status.message());
}

/// A success without a body (stores, delete, flush, noop, quit).
pub fn put_ok(buf: &mut BytesMut, opcode: u8, opaque: u32, cas: u64) {
    put_body(buf, opcode, opaque, Status::NoError, cas, b"");
}

/// A get (or touch) hit: the flags as extras, the key when asked for,
/// then the value.
pub fn put_value(
    buf: &mut BytesMut,
    opcode: u8,
    opaque: u32,
    cas: u64,
    flags: u32,
    key: &[u8],
    value: &[u8],
) {
    let body_len = 4 + key.len() + value.len();
    buf.reserve(super::HEADER_LEN + body_len);
    put_header(
        buf,
        &ResponseHeader {
            opcode,
            status: Status::NoError,
            extras_len: 4,
            key_len: key.len() as u16,
            body_len: body_len as u32,
            opaque,
            cas,
        },
    );
    buf.put_u32(flags);
    buf.extend_from_slice(key);
    buf.extend_from_slice(value);
}

/// A get miss of GetK/GetKQ/GATK: `Not found` with the key as the body.
pub fn put_miss_with_key(buf: &mut BytesMut, opcode: u8, opaque: u32, key: &[u8]) {
    put_header(
        buf,
        &ResponseHeader {
            opcode,
            status: Status::KeyNotFound,
            extras_len: 0,
            key_len: key.len() as u16,
            body_len: key.len() as u32,
            opaque,
            cas: 0,
        },
    );
    buf.extend_from_slice(key);
}

/// An incr/decr result: the new value, 8 bytes.
pub fn put_counter(buf: &mut BytesMut, opcode: u8, opaque: u32, cas: u64, value: u64) {
    put_body(
        buf,
        opcode,
        opaque,
        Status::NoError,
        cas,
        &value.to_be_bytes(),
    );
}

/// One Stat entry: the name as key, the value as value. The terminating
/// entry has neither.
pub fn put_stat(buf: &mut BytesMut, opcode: u8, opaque: u32, name: &[u8], value: &[u8]) {
    put_header(
        buf,
        &ResponseHeader {
            opcode,
            status: Status::NoError,
            extras_len: 0,
            key_len: name.len() as u16,
            body_len: (name.len() + value.len()) as u32,
            opaque,
            cas: 0,
        },
    );
    buf.extend_from_slice(name);
    buf.extend_from_slice(value);
}

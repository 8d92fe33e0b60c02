//! The text reply a request rendered, re-encoded as its binary response:
//! the fallback for what `direct` does not write itself (Touch, base64
//! keys, Increment/Decrement, Stat, Version, Flush, Noop, backend errors
//! and forwarded replies). The Get family's hits and misses and the
//! store/delete outcomes on Redis are written by `direct` from the
//! decoded answer instead: going through text cost binary ~10 % of text's
//! throughput at pipeline 16. `direct_tests` check that both write the
//! same bytes.
//!
//! The text path answers the meta commands built in this module with
//! `VA <len> <flags>\r\n<data>\r\n`, `HD <flags>`, `EN`, `NS`, `EX`, `NF`,
//! `MN`, or an error line; `version`, `stats`, `flush_all` with their
//! classic replies. A backend failure (`SERVER_ERROR ...`) has no
//! memcached equivalent: it is answered `Temporary failure` (0x86) with
//! the text as the body.

use bytes::BytesMut;
use memshift_protocol::memcache::binary::{response, Status};

use super::{encode_local, Answer, Frame};

/// The first line of a meta reply.
struct MetaLine<'a> {
    code: &'a [u8],
    /// `VA`: the value's length (the data follows the line).
    len: usize,
    flags: u32,
    cas: u64,
    /// Where the line ends (after its `\r\n`).
    end: usize,
}

fn meta_line(text: &[u8]) -> Option<MetaLine<'_>> {
    let eol = memchr::memchr(b'\n', text)?;
    let line = text.get(..eol)?.strip_suffix(b"\r").unwrap_or(&text[..eol]);
    let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let code = tokens.next()?;
    let mut out = MetaLine {
        code,
        len: 0,
        flags: 0,
        cas: 0,
        end: eol + 1,
    };
    if code == b"VA" {
        out.len = parse_u64(tokens.next()?)? as usize;
    }
    if code != b"VA" && code != b"HD" {
        // An error line's words are not flags.
        return Some(out);
    }
    for token in tokens {
        match token.split_first() {
            Some((b'f', n)) => out.flags = parse_u64(n)? as u32,
            Some((b'c', n)) => out.cas = parse_u64(n)?,
            _ => {}
        }
    }
    Some(out)
}

fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
            .flatten()
    })
}

/// Write `frame`'s response for the text reply `text`.
pub(super) fn encode(buf: &mut BytesMut, frame: &Frame, text: &[u8]) {
    if encode_local(buf, frame) {
        return;
    }
    let (opcode, opaque) = (frame.opcode, frame.opaque);
    let error =
        |buf: &mut BytesMut, status: Status| response::put_error(buf, opcode, opaque, status);
    if let Some(message) = text.strip_prefix(b"SERVER_ERROR ") {
        let message = trim_line(message);
        return response::put_body(buf, opcode, opaque, Status::TemporaryFailure, 0, message);
    }
    match frame.answer {
        Answer::Version => match text.strip_prefix(b"VERSION ") {
            Some(v) => response::put_body(buf, opcode, opaque, Status::NoError, 0, trim_line(v)),
            None => error(buf, Status::TemporaryFailure),
        },
        Answer::Stat => encode_stats(buf, opcode, opaque, text),
        Answer::Flush => match text {
            b"OK\r\n" if frame.quiet => {}
            b"OK\r\n" => response::put_ok(buf, opcode, opaque, 0),
            // `allow_flush_all = false`: memcached's answer with -F.
            _ => error(buf, Status::AuthError),
        },
        Answer::Noop => response::put_ok(buf, opcode, opaque, 0),
        Answer::Value { with_key } => encode_value(buf, frame, with_key, text),
        _ => encode_meta(buf, frame, text),
    }
}

fn encode_meta(buf: &mut BytesMut, frame: &Frame, text: &[u8]) {
    let (opcode, opaque) = (frame.opcode, frame.opaque);
    let Some(line) = meta_line(text) else {
        return response::put_error(buf, opcode, opaque, Status::TemporaryFailure);
    };
    let error =
        |buf: &mut BytesMut, status: Status| response::put_error(buf, opcode, opaque, status);
    match (frame.answer, line.code) {
        (Answer::Get { with_key }, b"VA") => {
            let data = text.get(line.end..line.end + line.len).unwrap_or_default();
            let key = if with_key { &frame.key[..] } else { b"" };
            response::put_value(buf, opcode, opaque, line.cas, line.flags, key, data);
        }
        (Answer::Touch, b"HD") => {
            response::put_value(buf, opcode, opaque, line.cas, line.flags, b"", b"");
        }
        (Answer::Get { .. } | Answer::Touch, b"EN") if frame.quiet => {}
        (Answer::Get { with_key: true }, b"EN") => {
            response::put_miss_with_key(buf, opcode, opaque, &frame.key)
        }
        (Answer::Get { .. } | Answer::Touch, b"EN") => error(buf, Status::KeyNotFound),
        (Answer::Store { .. } | Answer::Delete | Answer::Arith, b"HD" | b"VA") if frame.quiet => {}
        (Answer::Store { .. }, b"HD") => response::put_ok(buf, opcode, opaque, line.cas),
        (Answer::Delete, b"HD") => response::put_ok(buf, opcode, opaque, 0),
        (Answer::Arith, b"VA") => {
            let digits = text.get(line.end..line.end + line.len).unwrap_or_default();
            match parse_u64(digits) {
                Some(n) => response::put_counter(buf, opcode, opaque, line.cas, n),
                None => error(buf, Status::TemporaryFailure),
            }
        }
        (Answer::Store { not_stored }, b"NS") => error(buf, not_stored),
        (_, b"NS") => error(buf, Status::NotStored),
        (_, b"EX") => error(buf, Status::KeyExists),
        (_, b"NF") => error(buf, Status::KeyNotFound),
        (Answer::Arith, b"CLIENT_ERROR") => error(buf, Status::DeltaBadValue),
        (_, b"CLIENT_ERROR") => {
            let message = trim_line(text.strip_prefix(b"CLIENT_ERROR ").unwrap_or(text));
            response::put_body(buf, opcode, opaque, Status::InvalidArguments, 0, message)
        }
        _ => error(buf, Status::TemporaryFailure),
    }
}

/// `VALUE <key> <flags> <bytes> <cas>\r\n<data>\r\nEND\r\n`, or `END\r\n`.
fn encode_value(buf: &mut BytesMut, frame: &Frame, with_key: bool, text: &[u8]) {
    let (opcode, opaque) = (frame.opcode, frame.opaque);
    if text == b"END\r\n" {
        return put_miss(buf, frame, with_key);
    }
    let Some(hit) = value_line(text) else {
        return response::put_error(buf, opcode, opaque, Status::TemporaryFailure);
    };
    let key = if with_key { &frame.key[..] } else { b"" };
    response::put_value(buf, opcode, opaque, hit.cas, hit.flags, key, hit.data);
}

/// A get's miss: nothing (quiet), `Not found` with the key (GetK, GATK),
/// or memcached's `Not found` error.
pub(super) fn put_miss(buf: &mut BytesMut, frame: &Frame, with_key: bool) {
    let (opcode, opaque) = (frame.opcode, frame.opaque);
    match (frame.quiet, with_key) {
        (true, _) => {}
        (false, true) => response::put_miss_with_key(buf, opcode, opaque, &frame.key),
        (false, false) => response::put_error(buf, opcode, opaque, Status::KeyNotFound),
    }
}

struct Hit<'a> {
    flags: u32,
    cas: u64,
    data: &'a [u8],
}

/// The one `VALUE` of a single-key `gets`/`gats` reply.
fn value_line(text: &[u8]) -> Option<Hit<'_>> {
    let eol = memchr::memchr(b'\n', text)?;
    let line = text.get(..eol)?.strip_suffix(b"\r")?;
    let mut tokens = line.split(|&b| b == b' ');
    if tokens.next()? != b"VALUE" {
        return None;
    }
    let _key = tokens.next()?;
    let flags = parse_u64(tokens.next()?)? as u32;
    let len = parse_u64(tokens.next()?)? as usize;
    let cas = parse_u64(tokens.next()?)?;
    let data = text.get(eol + 1..eol + 1 + len)?;
    Some(Hit { flags, cas, data })
}

/// `STAT <name> <value>` lines → one response each, then the empty one
/// that ends a Stat. `RESET`/`OK` (stats reset, detail on/off): only the
/// end. Anything else (`ERROR`): `Not found`, as memcached.
fn encode_stats(buf: &mut BytesMut, opcode: u8, opaque: u32, text: &[u8]) {
    if !(text.ends_with(b"END\r\n") || text == b"RESET\r\n" || text == b"OK\r\n") {
        return response::put_error(buf, opcode, opaque, Status::KeyNotFound);
    }
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(rest) = line.strip_prefix(b"STAT ") else {
            continue;
        };
        let (name, value) = match memchr::memchr(b' ', rest) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &b""[..]),
        };
        response::put_stat(buf, opcode, opaque, name, value);
    }
    response::put_stat(buf, opcode, opaque, b"", b"");
}

fn trim_line(text: &[u8]) -> &[u8] {
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    text.strip_suffix(b"\r").unwrap_or(text)
}

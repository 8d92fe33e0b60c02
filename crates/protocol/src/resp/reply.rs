//! RESP server side: writing replies to a client in RESP2 or RESP3.
//!
//! Backends speak RESP2 to memshift; a RESP3 client gets the RESP3 types
//! Redis would send it where memshift knows the command's shape (a map for
//! `HGETALL`, a double for `ZSCORE`, ...; see [`Shape`]), RESP2's otherwise.

use bytes::BytesMut;

use super::encode::{fmt_i64, fmt_u64};
use super::Frame;

/// The protocol a client chose with `HELLO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RespVersion {
    #[default]
    Resp2,
    Resp3,
}

/// How a RESP2 reply maps onto RESP3 for one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shape {
    /// Unchanged (nulls become `_`).
    #[default]
    Plain,
    /// A flat array of field/value pairs is a map (`HGETALL`, `CONFIG GET`).
    Map,
    /// An array is a set (`SMEMBERS`, `SINTER`, ...).
    Set,
    /// A bulk string holding a number is a double (`ZSCORE`, `ZINCRBY`).
    Double,
    /// Each element is a double or null (`ZMSCORE`).
    Doubles,
    /// A flat member/score array is an array of `[member, double]` pairs
    /// (`ZRANGE ... WITHSCORES`).
    ScorePairs,
    /// A flat field/value array is an array of `[field, value]` pairs
    /// (`HRANDFIELD ... WITHVALUES`).
    Pairs,
    /// A flat member/score array keeps its shape, scores as doubles
    /// (`ZPOPMIN key` without a count).
    FlatScores,
    /// `[key, member, score]`, the score a double (`BZPOPMIN`, `BZPOPMAX`).
    KeyMemberScore,
}

pub fn simple(buf: &mut BytesMut, s: &[u8]) {
    buf.extend_from_slice(b"+");
    buf.extend_from_slice(s);
    buf.extend_from_slice(b"\r\n");
}

/// `-<text>`: the text starts with the error code (`ERR ...`).
pub fn error(buf: &mut BytesMut, text: &[u8]) {
    buf.extend_from_slice(b"-");
    buf.extend_from_slice(text);
    buf.extend_from_slice(b"\r\n");
}

pub fn integer(buf: &mut BytesMut, n: i64) {
    let mut tmp = [0u8; 20];
    buf.extend_from_slice(b":");
    buf.extend_from_slice(fmt_i64(n, &mut tmp));
    buf.extend_from_slice(b"\r\n");
}

fn header(buf: &mut BytesMut, prefix: &[u8], n: usize) {
    let mut tmp = [0u8; 20];
    buf.extend_from_slice(prefix);
    buf.extend_from_slice(fmt_u64(n as u64, &mut tmp));
    buf.extend_from_slice(b"\r\n");
}

pub fn bulk(buf: &mut BytesMut, data: &[u8]) {
    buf.reserve(data.len() + 26);
    header(buf, b"$", data.len());
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\n");
}

/// The type byte of a push in `v`: RESP2 has no push type, and Redis
/// gives a RESP2 client the same frame as an array (a pub/sub message, a
/// subscription count).
pub fn push_type(v: RespVersion) -> u8 {
    match v {
        RespVersion::Resp2 => b'*',
        RespVersion::Resp3 => b'>',
    }
}

/// A missing value: `$-1` (RESP2) or `_` (RESP3).
pub fn null(buf: &mut BytesMut, v: RespVersion) {
    buf.extend_from_slice(match v {
        RespVersion::Resp2 => b"$-1\r\n",
        RespVersion::Resp3 => b"_\r\n",
    });
}

pub fn array(buf: &mut BytesMut, n: usize) {
    header(buf, b"*", n);
}

/// A map of `n` pairs: `%n` (RESP3) or an array of `2n` (RESP2).
pub fn map(buf: &mut BytesMut, v: RespVersion, n: usize) {
    match v {
        RespVersion::Resp2 => header(buf, b"*", 2 * n),
        RespVersion::Resp3 => header(buf, b"%", n),
    }
}

pub fn set(buf: &mut BytesMut, v: RespVersion, n: usize) {
    match v {
        RespVersion::Resp2 => header(buf, b"*", n),
        RespVersion::Resp3 => header(buf, b"~", n),
    }
}

/// A frame from a backend, as the client's protocol and the command's
/// shape want it.
pub fn frame(buf: &mut BytesMut, f: &Frame, v: RespVersion, shape: Shape) {
    if v == RespVersion::Resp3 && shape != Shape::Plain {
        if let Some(()) = shaped(buf, f, shape) {
            return;
        }
    }
    match f {
        Frame::Simple(s) => simple(buf, s),
        Frame::Error(e) => error(buf, e),
        Frame::Integer(n) => integer(buf, *n),
        Frame::Bulk(b) => bulk(buf, b),
        Frame::Null => null(buf, v),
        Frame::NullArray => buf.extend_from_slice(match v {
            RespVersion::Resp2 => b"*-1\r\n",
            RespVersion::Resp3 => b"_\r\n",
        }),
        Frame::Array(items) => {
            array(buf, items.len());
            for i in items {
                frame(buf, i, v, Shape::Plain);
            }
        }
        Frame::Push(items) => {
            header(buf, &[push_type(v)], items.len());
            for i in items {
                frame(buf, i, v, Shape::Plain);
            }
        }
        Frame::Map(items) => {
            map(buf, v, items.len() / 2);
            for i in items {
                frame(buf, i, v, Shape::Plain);
            }
        }
        Frame::Boolean(b) => buf.extend_from_slice(match (v, b) {
            (RespVersion::Resp3, true) => b"#t\r\n",
            (RespVersion::Resp3, false) => b"#f\r\n",
            (RespVersion::Resp2, true) => b":1\r\n",
            (RespVersion::Resp2, false) => b":0\r\n",
        }),
    }
}

/// The RESP3 form of `f`; `None` when `f` is not what the shape expects
/// (an error, a null): the caller writes it plainly.
fn shaped(buf: &mut BytesMut, f: &Frame, shape: Shape) -> Option<()> {
    let v = RespVersion::Resp3;
    match (shape, f) {
        (Shape::Map, Frame::Array(items)) if items.len() % 2 == 0 => {
            map(buf, v, items.len() / 2);
            for i in items {
                frame(buf, i, v, Shape::Plain);
            }
        }
        (Shape::Set, Frame::Array(items)) => {
            set(buf, v, items.len());
            for i in items {
                frame(buf, i, v, Shape::Plain);
            }
        }
        (Shape::Double, Frame::Bulk(b)) => double(buf, b),
        (Shape::Doubles, Frame::Array(items)) => {
            array(buf, items.len());
            for i in items {
                match i {
                    Frame::Bulk(b) => double(buf, b),
                    other => frame(buf, other, v, Shape::Plain),
                }
            }
        }
        (Shape::ScorePairs | Shape::Pairs, Frame::Array(items)) if items.len() % 2 == 0 => {
            array(buf, items.len() / 2);
            for pair in items.chunks_exact(2) {
                array(buf, 2);
                frame(buf, &pair[0], v, Shape::Plain);
                match (&pair[1], shape) {
                    (Frame::Bulk(b), Shape::ScorePairs) => double(buf, b),
                    (other, _) => frame(buf, other, v, Shape::Plain),
                }
            }
        }
        (Shape::FlatScores, Frame::Array(items)) if items.len() % 2 == 0 => {
            array(buf, items.len());
            for pair in items.chunks_exact(2) {
                frame(buf, &pair[0], v, Shape::Plain);
                match &pair[1] {
                    Frame::Bulk(b) => double(buf, b),
                    other => frame(buf, other, v, Shape::Plain),
                }
            }
        }
        (Shape::KeyMemberScore, Frame::Array(items)) if items.len() == 3 => {
            array(buf, 3);
            frame(buf, &items[0], v, Shape::Plain);
            frame(buf, &items[1], v, Shape::Plain);
            match &items[2] {
                Frame::Bulk(b) => double(buf, b),
                other => frame(buf, other, v, Shape::Plain),
            }
        }
        _ => return None,
    }
    Some(())
}

/// `,<number>`: Redis writes the same digits in RESP2's bulk and RESP3's
/// double, except the infinities.
fn double(buf: &mut BytesMut, digits: &[u8]) {
    buf.extend_from_slice(b",");
    buf.extend_from_slice(match digits {
        b"inf" => b"inf",
        b"-inf" => b"-inf",
        d => d,
    });
    buf.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn out(f: &Frame, v: RespVersion, shape: Shape) -> Vec<u8> {
        let mut b = BytesMut::new();
        frame(&mut b, f, v, shape);
        b.to_vec()
    }

    #[test]
    fn a_push_is_an_array_in_resp2() {
        let push = Frame::Push(vec![
            Frame::Bulk(Bytes::from_static(b"unsubscribe")),
            Frame::Null,
            Frame::Integer(0),
        ]);
        assert_eq!(
            out(&push, RespVersion::Resp2, Shape::Plain),
            b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"
        );
        assert_eq!(
            out(&push, RespVersion::Resp3, Shape::Plain),
            b">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n"
        );
    }

    #[test]
    fn resp2_and_resp3_forms() {
        let pairs = Frame::Array(vec![
            Frame::Bulk(Bytes::from_static(b"f")),
            Frame::Bulk(Bytes::from_static(b"1.5")),
        ]);
        assert_eq!(
            out(&pairs, RespVersion::Resp2, Shape::Map),
            b"*2\r\n$1\r\nf\r\n$3\r\n1.5\r\n"
        );
        assert_eq!(
            out(&pairs, RespVersion::Resp3, Shape::Map),
            b"%1\r\n$1\r\nf\r\n$3\r\n1.5\r\n"
        );
        assert_eq!(
            out(&pairs, RespVersion::Resp3, Shape::ScorePairs),
            b"*1\r\n*2\r\n$1\r\nf\r\n,1.5\r\n"
        );
        assert_eq!(
            out(&Frame::Null, RespVersion::Resp3, Shape::Double),
            b"_\r\n"
        );
        assert_eq!(
            out(&Frame::Null, RespVersion::Resp2, Shape::Plain),
            b"$-1\r\n"
        );
        assert_eq!(
            out(&Frame::Integer(-3), RespVersion::Resp2, Shape::Plain),
            b":-3\r\n"
        );
    }
}

//! The RESP3 types a client-tracking connection receives (`>` push, `%` map,
//! `_` null, `#` boolean), with `redis-protocol`'s RESP3 encoder as the
//! oracle for the bytes, fed whole and one byte at a time.

use bytes::{Bytes, BytesMut};
use memshift_protocol::resp::{Frame, ReplyParser};
use redis_protocol::resp3::encode::complete::encode;
use redis_protocol::resp3::types::{OwnedFrame, Resp3Frame};

fn oracle(f: &OwnedFrame) -> Vec<u8> {
    let mut out = vec![0u8; f.encode_len(false)];
    let n = encode(&mut out, f, false).expect("redis-protocol encode");
    out.truncate(n);
    out
}

fn blob(s: &str) -> OwnedFrame {
    OwnedFrame::BlobString {
        data: s.as_bytes().to_vec(),
        attributes: None,
    }
}

/// Parse everything in `data`, fed in `chunk`-byte reads.
fn parse(data: &[u8], chunk: usize) -> Vec<Frame> {
    let mut p = ReplyParser::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in data.chunks(chunk) {
        buf.extend_from_slice(piece);
        while let Some(f) = p.parse(&mut buf).expect("valid RESP3") {
            out.push(f);
        }
    }
    assert!(buf.is_empty() && !p.in_progress());
    out
}

fn both(data: &[u8]) -> Vec<Frame> {
    let whole = parse(data, data.len().max(1));
    assert_eq!(whole, parse(data, 1), "byte-at-a-time differs");
    whole
}

fn b(s: &str) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

#[test]
fn invalidation_push_with_keys() {
    let push = OwnedFrame::Push {
        data: vec![
            blob("invalidate"),
            OwnedFrame::Array {
                data: vec![blob("k1"), blob("key two")],
                attributes: None,
            },
        ],
        attributes: None,
    };
    assert_eq!(
        both(&oracle(&push)),
        vec![Frame::Push(vec![
            b("invalidate"),
            Frame::Array(vec![b("k1"), b("key two")])
        ])]
    );
}

#[test]
fn invalidation_push_with_null_and_interleaved_replies() {
    let push = OwnedFrame::Push {
        data: vec![blob("invalidate"), OwnedFrame::Null],
        attributes: None,
    };
    let mut data = oracle(&push);
    data.extend_from_slice(b"+PONG\r\n");
    data.extend_from_slice(&oracle(&OwnedFrame::Boolean {
        data: true,
        attributes: None,
    }));
    data.extend_from_slice(b"#f\r\n>0\r\n");
    assert_eq!(
        both(&data),
        vec![
            Frame::Push(vec![b("invalidate"), Frame::Null]),
            Frame::Simple(Bytes::from_static(b"PONG")),
            Frame::Boolean(true),
            Frame::Boolean(false),
            Frame::Push(vec![]),
        ]
    );
}

#[test]
fn hello_map() {
    let mut map = redis_protocol::resp3::types::FrameMap::default();
    map.insert(
        blob("proto"),
        OwnedFrame::Number {
            data: 3,
            attributes: None,
        },
    );
    let frame = OwnedFrame::Map {
        data: map,
        attributes: None,
    };
    assert_eq!(
        both(&oracle(&frame)),
        vec![Frame::Map(vec![b("proto"), Frame::Integer(3)])]
    );
    // Empty map, then a nested one: `%2` is four frames.
    assert_eq!(
        both(b"%0\r\n%2\r\n$1\r\na\r\n%1\r\n:1\r\n:2\r\n$1\r\nb\r\n_\r\n"),
        vec![
            Frame::Map(vec![]),
            Frame::Map(vec![
                b("a"),
                Frame::Map(vec![Frame::Integer(1), Frame::Integer(2)]),
                b("b"),
                Frame::Null,
            ]),
        ]
    );
}

#[test]
fn malformed_resp3_is_rejected() {
    for bad in [
        &b"#x\r\n"[..],
        b"_x\r\n",
        b"#tt\r\n",
        b">-1\r\n",
        b"%-2\r\n",
    ] {
        let mut buf = BytesMut::from(bad);
        assert!(ReplyParser::new().parse(&mut buf).is_err(), "{bad:?}");
    }
    // Types memshift never asks for stay errors.
    for other in [&b",1.5\r\n"[..], b"(12\r\n", b"~1\r\n:1\r\n", b"|1\r\n"] {
        let mut buf = BytesMut::from(other);
        assert!(ReplyParser::new().parse(&mut buf).is_err(), "{other:?}");
    }
}

//! Hand-written cases for the RESP2 reply parser: every frame type, nesting,
//! resumability (state kept across calls, bytes consumed as they complete),
//! and malformed input.

use bytes::{Bytes, BytesMut};
use memshift_protocol::resp::{Frame, ReplyParser, RespError, MAX_DEPTH};

fn b(s: &[u8]) -> Bytes {
    Bytes::copy_from_slice(s)
}

/// Parse every complete frame of `input`; returns frames and the first error.
fn parse_all(input: &[u8]) -> (Vec<Frame>, Option<RespError>) {
    let mut p = ReplyParser::new();
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    loop {
        match p.parse(&mut buf) {
            Ok(Some(f)) => out.push(f),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

fn one(input: &[u8]) -> Frame {
    let (mut frames, err) = parse_all(input);
    assert_eq!(err, None, "input {:?}", String::from_utf8_lossy(input));
    assert_eq!(
        frames.len(),
        1,
        "input {:?}",
        String::from_utf8_lossy(input)
    );
    frames.remove(0)
}

fn err(input: &[u8]) -> RespError {
    match parse_all(input) {
        (_, Some(e)) => e,
        (frames, None) => panic!("expected an error for {input:?}, got {frames:?}"),
    }
}

#[test]
fn scalars() {
    assert_eq!(one(b"+OK\r\n"), Frame::Simple(b(b"OK")));
    assert_eq!(one(b"+\r\n"), Frame::Simple(b(b"")));
    assert_eq!(
        one(b"-ERR unknown command 'FOO'\r\n"),
        Frame::Error(b(b"ERR unknown command 'FOO'"))
    );
    assert_eq!(one(b"-\r\n"), Frame::Error(b(b"")));
    assert_eq!(one(b":0\r\n"), Frame::Integer(0));
    assert_eq!(one(b":-42\r\n"), Frame::Integer(-42));
    assert_eq!(one(b":9223372036854775807\r\n"), Frame::Integer(i64::MAX));
    assert_eq!(one(b":-9223372036854775808\r\n"), Frame::Integer(i64::MIN));
    assert_eq!(one(b"$5\r\nhello\r\n"), Frame::Bulk(b(b"hello")));
    assert_eq!(one(b"$0\r\n\r\n"), Frame::Bulk(b(b"")));
    assert_eq!(one(b"$4\r\n\r\n\r\n\r\n"), Frame::Bulk(b(b"\r\n\r\n")));
    assert_eq!(one(b"$-1\r\n"), Frame::Null);
}

#[test]
fn arrays() {
    assert_eq!(one(b"*0\r\n"), Frame::Array(vec![]));
    assert_eq!(one(b"*-1\r\n"), Frame::NullArray);
    assert_eq!(
        one(b"*3\r\n$3\r\nfoo\r\n$-1\r\n:7\r\n"),
        Frame::Array(vec![Frame::Bulk(b(b"foo")), Frame::Null, Frame::Integer(7)])
    );
    // Nested, with empty and null arrays in the middle and at the end.
    assert_eq!(
        one(b"*4\r\n*2\r\n+a\r\n*0\r\n*-1\r\n-E\r\n*1\r\n*1\r\n*0\r\n"),
        Frame::Array(vec![
            Frame::Array(vec![Frame::Simple(b(b"a")), Frame::Array(vec![])]),
            Frame::NullArray,
            Frame::Error(b(b"E")),
            Frame::Array(vec![Frame::Array(vec![Frame::Array(vec![])])]),
        ])
    );
}

#[test]
fn back_to_back_and_leftover() {
    let (frames, e) = parse_all(b"+OK\r\n:1\r\n$1\r\nx\r\n*1\r\n$2\r\nab");
    assert_eq!(e, None);
    assert_eq!(
        frames,
        vec![
            Frame::Simple(b(b"OK")),
            Frame::Integer(1),
            Frame::Bulk(b(b"x"))
        ]
    );
}

#[test]
fn resumes_without_rescanning() {
    let mut p = ReplyParser::new();
    let mut buf = BytesMut::new();

    // Array header and first element complete, second bulk's payload partial:
    // everything up to the payload is consumed into the parser.
    buf.extend_from_slice(b"*2\r\n$3\r\nfoo\r\n$6\r\nbar");
    assert_eq!(p.parse(&mut buf), Ok(None));
    assert!(p.in_progress());
    assert_eq!(&buf[..], b"bar");

    buf.extend_from_slice(b"baz");
    assert_eq!(p.parse(&mut buf), Ok(None));
    assert_eq!(&buf[..], b"barbaz", "payload waits for its CRLF");

    buf.extend_from_slice(b"\r\n+next\r\n");
    assert_eq!(
        p.parse(&mut buf),
        Ok(Some(Frame::Array(vec![
            Frame::Bulk(b(b"foo")),
            Frame::Bulk(b(b"barbaz"))
        ])))
    );
    assert!(!p.in_progress());
    assert_eq!(p.parse(&mut buf), Ok(Some(Frame::Simple(b(b"next")))));
    assert!(buf.is_empty());
    assert_eq!(p.parse(&mut buf), Ok(None));

    // A simple line arriving in pieces, including a '\r' at a chunk boundary.
    for piece in [&b"+hel"[..], b"lo", b"\r"] {
        buf.extend_from_slice(piece);
        assert_eq!(p.parse(&mut buf), Ok(None));
    }
    buf.extend_from_slice(b"\n");
    assert_eq!(p.parse(&mut buf), Ok(Some(Frame::Simple(b(b"hello")))));
}

#[test]
fn bulk_is_zero_copy() {
    let mut p = ReplyParser::new();
    let mut buf = BytesMut::from(&b"$5\r\nhello\r\n"[..]);
    let base = buf.as_ptr() as usize;
    let Ok(Some(Frame::Bulk(data))) = p.parse(&mut buf) else {
        panic!("expected a bulk");
    };
    assert_eq!(
        data.as_ptr() as usize,
        base + 4,
        "payload points into the read buffer"
    );
}

#[test]
fn depth_limit() {
    let ok = b"*1\r\n".repeat(MAX_DEPTH);
    let mut input = ok.clone();
    input.extend_from_slice(b":1\r\n");
    let (frames, e) = parse_all(&input);
    assert_eq!(e, None);
    assert_eq!(frames.len(), 1);
    let mut too_deep = b"*1\r\n".repeat(MAX_DEPTH + 1);
    too_deep.extend_from_slice(b":1\r\n");
    assert_eq!(err(&too_deep), RespError::Invalid("arrays nested too deep"));
}

#[test]
fn malformed() {
    let cases: &[&[u8]] = &[
        b"?\r\n",                        // unknown type byte
        b"OK\r\n",                       // inline, not RESP
        b"+OK\n",                        // bare LF
        b"+OK\r\r\n:1\r\n\n",            // '\r' not followed by '\n' is content, but then bare LF
        b":\r\n",                        // empty integer
        b":abc\r\n",                     // not a number
        b":1 \r\n",                      // trailing space
        b":+1\r\n",                      // explicit plus
        b":12\rx",                       // CR not followed by LF
        b":9223372036854775808\r\n",     // overflow
        b":-9223372036854775809\r\n",    // underflow
        b":00000000000000000000001\r\n", // too many digits
        b"$-2\r\n",                      // negative length
        b"$-\r\n",                       // sign only
        b"$3\r\nfooXY",                  // payload not followed by CRLF
        b"$3\r\nfoo\n\r",                // swapped terminator
        b"$536870913\r\n",               // bulk longer than 512 MiB
        b"$99999999999999999999\r\n",    // absurd length
        b"*-5\r\n",                      // negative array length
        b"*16777217\r\n",                // array longer than the cap
        b"*2\r\n:1\r\n!\r\n",            // bad element
    ];
    for case in cases {
        let (_, e) = parse_all(case);
        // "+OK\r\r\n..." is valid up to the bare LF; others fail outright.
        assert!(
            e.is_some(),
            "no error for {:?}",
            String::from_utf8_lossy(case)
        );
    }
    assert_eq!(err(b"?"), RespError::Invalid("unknown type byte"));
    assert_eq!(err(b"$536870913\r\n"), RespError::Invalid("bulk too long"));
    assert_eq!(err(b"*16777217\r\n"), RespError::Invalid("array too long"));
}

#[test]
fn limits_are_inclusive() {
    // The caps themselves are accepted (nothing is allocated from them).
    let mut p = ReplyParser::new();
    let mut buf = BytesMut::from(&b"$536870912\r\nab"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    assert!(p.in_progress());
    assert!(
        buf.capacity() < 1 << 20,
        "no allocation from the peer's length"
    );

    let mut p = ReplyParser::new();
    let mut buf = BytesMut::from(&b"*16777216\r\n:1\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    assert!(p.in_progress());
}

#[test]
fn error_resets_state() {
    let mut p = ReplyParser::new();
    let mut buf = BytesMut::from(&b"*2\r\n:1\r\n?"[..]);
    assert!(p.parse(&mut buf).is_err());
    assert!(!p.in_progress());
}

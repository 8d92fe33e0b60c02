//! Property tests for the RESP2 codec with `redis-protocol` as the oracle:
//! frames encoded by redis-protocol decode with our parser to the same frame
//! however the bytes are chunked, our parser agrees with redis-protocol's
//! decoder, and our `CommandWriter` output decodes with redis-protocol to the
//! arguments written.

use bytes::{Bytes, BytesMut};
use memshift_protocol::resp::{encode_command, CommandWriter, Frame, ReplyParser, RespError};
use proptest::prelude::*;
use redis_protocol::resp2::{
    decode::decode,
    encode::encode,
    types::{OwnedFrame, Resp2Frame},
};

// ---- oracle plumbing ----------------------------------------------------

/// redis-protocol has no null array (`*-1`): it decodes it as `Null`.
fn to_owned(f: &Frame) -> OwnedFrame {
    match f {
        Frame::Simple(s) => OwnedFrame::SimpleString(s.to_vec()),
        Frame::Error(e) => OwnedFrame::Error(String::from_utf8(e.to_vec()).expect("utf8 error")),
        Frame::Integer(i) => OwnedFrame::Integer(*i),
        Frame::Bulk(b) => OwnedFrame::BulkString(b.to_vec()),
        Frame::Null | Frame::NullArray => OwnedFrame::Null,
        Frame::Array(items) => OwnedFrame::Array(items.iter().map(to_owned).collect()),
        // The generators here are RESP2 only (RESP3: tests/resp3_parse.rs).
        Frame::Push(_) | Frame::Map(_) | Frame::Boolean(_) => unreachable!("RESP3 frame"),
    }
}

fn has_null_array(f: &Frame) -> bool {
    match f {
        Frame::NullArray => true,
        Frame::Array(items) => items.iter().any(has_null_array),
        _ => false,
    }
}

fn oracle_encode_owned(f: &OwnedFrame, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + f.encode_len(false), 0);
    let n = encode(&mut out[start..], f, false).expect("redis-protocol encode");
    out.truncate(start + n);
}

/// Encode with redis-protocol. `*-1` cannot be expressed there, so arrays
/// containing one are framed by hand around oracle-encoded children.
fn oracle_encode(f: &Frame, out: &mut Vec<u8>) {
    match f {
        Frame::NullArray => out.extend_from_slice(b"*-1\r\n"),
        Frame::Array(items) if has_null_array(f) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for item in items {
                oracle_encode(item, out);
            }
        }
        other => oracle_encode_owned(&to_owned(other), out),
    }
}

fn encode_all(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        oracle_encode(f, &mut out);
    }
    out
}

// ---- feeding helpers ----------------------------------------------------

/// Feed `chunks` one after the other, parsing everything available after
/// each. Returns all frames, the first error, and the bytes left unparsed.
fn feed<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> (Vec<Frame>, Option<RespError>, usize) {
    let mut p = ReplyParser::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match p.parse(&mut buf) {
                Ok(Some(f)) => out.push(f),
                Ok(None) => break,
                Err(e) => return (out, Some(e), buf.len()),
            }
        }
    }
    let left = buf.len() + usize::from(p.in_progress());
    (out, None, left)
}

fn assert_decodes(bytes: &[u8], expected: &[Frame]) {
    // (a) whole
    let (got, e, left) = feed([bytes]);
    assert_eq!(e, None);
    assert_eq!(got, expected);
    assert_eq!(left, 0);
    // (b) two pieces, split at every byte boundary
    for i in 0..=bytes.len() {
        let (got, e, left) = feed([&bytes[..i], &bytes[i..]]);
        assert_eq!(e, None, "split at {i}");
        assert_eq!(got, expected, "split at {i}");
        assert_eq!(left, 0, "split at {i}");
    }
    // (c) one byte at a time
    let (got, e, left) = feed(bytes.chunks(1));
    assert_eq!(e, None);
    assert_eq!(got, expected);
    assert_eq!(left, 0);
}

// ---- strategies ---------------------------------------------------------

fn line_bytes() -> impl Strategy<Value = Bytes> {
    // Simple strings and errors cannot contain CR or LF; keep them UTF-8
    // since redis-protocol models errors as `String`.
    "[^\r\n]{0,24}".prop_map(|s| Bytes::from(s.into_bytes()))
}

fn bulk_bytes() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..48),
        // Payloads full of protocol-looking bytes.
        proptest::collection::vec(
            prop_oneof![
                Just(b'\r'),
                Just(b'\n'),
                Just(b'$'),
                Just(b'*'),
                Just(b'-'),
                Just(b'1')
            ],
            0..16
        ),
        Just(b"\r\n".to_vec()),
    ]
    .prop_map(Bytes::from)
}

fn leaf() -> impl Strategy<Value = Frame> {
    prop_oneof![
        line_bytes().prop_map(Frame::Simple),
        line_bytes().prop_map(Frame::Error),
        any::<i64>().prop_map(Frame::Integer),
        prop_oneof![-1000i64..1000, Just(i64::MIN), Just(i64::MAX)].prop_map(Frame::Integer),
        bulk_bytes().prop_map(Frame::Bulk),
        Just(Frame::Null),
        Just(Frame::NullArray),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        proptest::collection::vec(inner, 0..6).prop_map(Frame::Array)
    })
}

// ---- properties ---------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn oracle_frames_decode_whole_split_and_bytewise(f in frame()) {
        let bytes = encode_all(std::slice::from_ref(&f));
        assert_decodes(&bytes, std::slice::from_ref(&f));
    }

    #[test]
    fn agrees_with_redis_protocol_decoder(f in frame()) {
        let bytes = encode_all(std::slice::from_ref(&f));
        let (ours, e, _) = feed([&bytes[..]]);
        prop_assert_eq!(e, None);
        let (theirs, used) = decode(&bytes).expect("oracle decode").expect("oracle complete");
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(ours.len(), 1);
        prop_assert_eq!(to_owned(&ours[0]), theirs);
    }

    #[test]
    fn back_to_back_frames(frames in proptest::collection::vec(frame(), 1..6), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8)) {
        let bytes = encode_all(&frames);
        assert_decodes(&bytes, &frames);
        // Also random multi-way chunking.
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut prev = 0;
        for p in points.into_iter().chain([bytes.len()]) {
            chunks.push(&bytes[prev..p]);
            prev = p;
        }
        let (got, e, left) = feed(chunks);
        prop_assert_eq!(e, None);
        prop_assert_eq!(got, frames);
        prop_assert_eq!(left, 0);
    }

    #[test]
    fn truncated_frame_is_incomplete_not_error(f in frame(), cut in any::<prop::sample::Index>()) {
        let bytes = encode_all(std::slice::from_ref(&f));
        let cut = cut.index(bytes.len()); // strictly shorter than the frame
        let (got, e, _) = feed([&bytes[..cut]]);
        prop_assert_eq!(e, None);
        prop_assert!(got.is_empty());
    }

    #[test]
    fn command_writer_decodes_with_redis_protocol(
        args in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..40).prop_map(Arg::Bytes),
                (proptest::collection::vec(any::<u8>(), 0..40), proptest::collection::vec(any::<prop::sample::Index>(), 0..4))
                    .prop_map(|(b, cuts)| Arg::Parts(b, cuts)),
                any::<i64>().prop_map(Arg::I64),
                any::<u64>().prop_map(Arg::U64),
            ],
            0..12,
        )
    ) {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(b"garbage-before:"); // appends, never clobbers
        let prefix = buf.len();
        let mut expected = Vec::new();
        {
            let mut w = CommandWriter::new(&mut buf, args.len());
            for a in &args {
                match a {
                    Arg::Bytes(b) => { w.arg(b); expected.push(b.clone()); }
                    Arg::Parts(b, cuts) => {
                        let mut pts: Vec<usize> = cuts.iter().map(|c| c.index(b.len() + 1)).collect();
                        pts.sort_unstable();
                        let mut parts: Vec<&[u8]> = Vec::new();
                        let mut prev = 0;
                        for p in pts.into_iter().chain([b.len()]) { parts.push(&b[prev..p]); prev = p; }
                        w.arg_parts(&parts);
                        expected.push(b.clone());
                    }
                    Arg::I64(n) => { w.arg_i64(*n); expected.push(n.to_string().into_bytes()); }
                    Arg::U64(n) => { w.arg_u64(*n); expected.push(n.to_string().into_bytes()); }
                }
            }
        }
        let encoded = &buf[prefix..];
        let (theirs, used) = decode(encoded).expect("oracle decode").expect("oracle complete");
        prop_assert_eq!(used, encoded.len());
        let want = OwnedFrame::Array(expected.iter().cloned().map(OwnedFrame::BulkString).collect());
        prop_assert_eq!(&theirs, &want);

        // Byte-identical to redis-protocol's own encoding of the same array.
        let mut oracle = Vec::new();
        oracle_encode_owned(&want, &mut oracle);
        prop_assert_eq!(encoded, &oracle[..]);

        // encode_command gives the same bytes.
        let mut again = BytesMut::new();
        let refs: Vec<&[u8]> = expected.iter().map(|v| v.as_slice()).collect();
        encode_command(&mut again, &refs);
        prop_assert_eq!(&again[..], encoded);

        // And our own parser reads it back.
        let (ours, e, _) = feed([encoded]);
        prop_assert_eq!(e, None);
        prop_assert_eq!(ours, vec![Frame::Array(expected.into_iter().map(|v| Frame::Bulk(v.into())).collect())]);
    }

    /// Arbitrary bytes (biased towards protocol bytes): never panics, and
    /// chunking never changes the frames or the error.
    #[test]
    fn garbage_is_split_invariant(
        data in proptest::collection::vec(
            prop_oneof![
                4 => any::<u8>(),
                8 => proptest::sample::select(b"+-:$*\r\n0123456789".to_vec()),
            ],
            0..96,
        ),
        cut in any::<prop::sample::Index>(),
    ) {
        let whole = feed([&data[..]]);
        let cut = cut.index(data.len() + 1);
        let split = feed([&data[..cut], &data[cut..]]);
        let bytewise = feed(data.chunks(1));
        prop_assert_eq!(&whole.0, &split.0);
        prop_assert_eq!(&whole.1, &split.1);
        prop_assert_eq!(&whole.0, &bytewise.0);
        prop_assert_eq!(&whole.1, &bytewise.1);
    }

    /// Corrupting one byte of a valid stream never panics and stays
    /// chunking-invariant.
    #[test]
    fn mutated_frames_are_split_invariant(f in frame(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = encode_all(std::slice::from_ref(&f));
        let at = at.index(bytes.len());
        bytes[at] = byte;
        let whole = feed([&bytes[..]]);
        let bytewise = feed(bytes.chunks(1));
        prop_assert_eq!(whole.0, bytewise.0);
        prop_assert_eq!(whole.1, bytewise.1);
    }
}

#[derive(Debug, Clone)]
enum Arg {
    Bytes(Vec<u8>),
    Parts(Vec<u8>, Vec<prop::sample::Index>),
    I64(i64),
    U64(u64),
}

#[test]
fn error_replies_match_oracle() {
    for msg in [
        "ERR unknown command 'FOO', with args beginning with: ",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "MOVED 3999 127.0.0.1:6381",
        "NOSCRIPT No matching script. Please use EVAL.",
        "",
    ] {
        let owned = OwnedFrame::Error(msg.to_string());
        let mut bytes = Vec::new();
        oracle_encode_owned(&owned, &mut bytes);
        let expected = Frame::Error(Bytes::copy_from_slice(msg.as_bytes()));
        assert_decodes(&bytes, std::slice::from_ref(&expected));
        // Error inside an array (EXEC reply with a failed command).
        let arr = OwnedFrame::Array(vec![OwnedFrame::SimpleString(b"OK".to_vec()), owned]);
        let mut bytes = Vec::new();
        oracle_encode_owned(&arr, &mut bytes);
        assert_decodes(
            &bytes,
            &[Frame::Array(vec![
                Frame::Simple(Bytes::from_static(b"OK")),
                expected,
            ])],
        );
    }
}

#[test]
fn null_array_is_null_for_the_oracle() {
    // Documents the mapping used above.
    let (f, used) = decode(b"*-1\r\n").expect("decode").expect("complete");
    assert_eq!((f, used), (OwnedFrame::Null, 5));
}

//! The RESP2 parser's fuzz invariants, shared by the fuzz target
//! (`fuzz/fuzz_targets/resp_parse.rs`) and the corpus replay test
//! (`tests/resp_fuzz_corpus.rs`): never panic, the frames (and the error, if
//! any) do not depend on how the bytes are chunked, and every frame survives
//! a re-encode/re-parse round trip.

use bytes::BytesMut;
use memshift_protocol::resp::{Frame, ReplyParser, RespError};

pub fn feed<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> (Vec<Frame>, Option<RespError>) {
    let mut p = ReplyParser::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match p.parse(&mut buf) {
                Ok(Some(f)) => out.push(f),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fn encode(f: &Frame, out: &mut Vec<u8>) {
    match f {
        Frame::Simple(s) => {
            out.push(b'+');
            out.extend_from_slice(s);
            out.extend_from_slice(b"\r\n");
        }
        Frame::Error(s) => {
            out.push(b'-');
            out.extend_from_slice(s);
            out.extend_from_slice(b"\r\n");
        }
        Frame::Integer(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
        Frame::Bulk(b) => {
            out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Frame::Null => out.extend_from_slice(b"$-1\r\n"),
        Frame::NullArray => out.extend_from_slice(b"*-1\r\n"),
        Frame::Array(items) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for item in items {
                encode(item, out);
            }
        }
        Frame::Push(items) => {
            out.extend_from_slice(format!(">{}\r\n", items.len()).as_bytes());
            for item in items {
                encode(item, out);
            }
        }
        Frame::Map(items) => {
            out.extend_from_slice(format!("%{}\r\n", items.len() / 2).as_bytes());
            for item in items {
                encode(item, out);
            }
        }
        Frame::Boolean(b) => out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
    }
}

pub fn check(data: &[u8]) {
    let whole = feed([data]);
    let bytewise = feed(data.chunks(1));
    assert_eq!(whole, bytewise, "byte-at-a-time differs");
    if let Some(&first) = data.first() {
        let size = usize::from(first % 13) + 2;
        assert_eq!(whole, feed(data.chunks(size)), "chunks of {size} differ");
        let cut = (usize::from(first) * 31 + data.len() / 2) % (data.len() + 1);
        assert_eq!(
            whole,
            feed([&data[..cut], &data[cut..]]),
            "split at {cut} differs"
        );
    }
    let mut re = Vec::new();
    for f in &whole.0 {
        encode(f, &mut re);
    }
    let again = feed([&re[..]]);
    assert_eq!(again, (whole.0, None), "re-encoded frames differ");
}

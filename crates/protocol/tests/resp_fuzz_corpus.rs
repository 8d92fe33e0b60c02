//! Replays the minimized `resp_parse` fuzz corpus
//! (`crates/protocol/fuzz/corpus/resp_parse/`) through the same invariants as
//! the fuzz target, so regressions show up in a plain `cargo test`.
//! Keep `check` in sync with `fuzz/fuzz_targets/resp_parse.rs`.

use bytes::BytesMut;
use memshift_protocol::resp::{Frame, ReplyParser, RespError};

fn feed<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> (Vec<Frame>, Option<RespError>) {
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
    }
}

fn check(data: &[u8]) {
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

#[test]
fn replay_resp_parse_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/resp_parse");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    assert!(!entries.is_empty(), "empty corpus at {}", dir.display());
    let mut frames = 0;
    for path in &entries {
        let data = std::fs::read(path).expect("read corpus file");
        let result = std::panic::catch_unwind(|| check(&data));
        assert!(result.is_ok(), "corpus file {} fails", path.display());
        frames += feed([&data[..]]).0.len();
    }
    println!("replayed {} corpus files, {frames} frames", entries.len());
}

//! The RESP request parser's fuzz invariants (server side), shared by the
//! fuzz target (`fuzz/fuzz_targets/resp_request.rs`) and the corpus replay
//! test (`tests/resp_request_fuzz_corpus.rs`): never panic; every complete
//! request consumes bytes and its arguments lie inside them; the requests
//! (and the error, if any) do not depend on how the bytes are chunked; a
//! request re-encoded as an array of bulk strings parses back to the same
//! arguments; nothing is held beyond the bytes received.

use memshift_protocol::resp::request::{RequestError, RequestLimits, RequestParser};

pub type Request = Vec<Vec<u8>>;

/// Small limits so the fuzzer reaches them.
pub fn limits() -> RequestLimits {
    RequestLimits {
        max_bulk_len: 4096,
        max_args: 64,
        unauthenticated: false,
    }
}

/// Feed `chunks` the way a session does (append, parse, drop what a
/// complete request consumed).
pub fn feed<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
    limits: &RequestLimits,
) -> (Vec<Request>, Option<RequestError>) {
    let mut p = RequestParser::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match p.parse(&buf, limits) {
                Ok(Some(n)) => {
                    assert!(n > 0 && n <= buf.len(), "consumed {n} of {}", buf.len());
                    let args: Request = p
                        .args()
                        .iter()
                        .map(|r| {
                            assert!(r.end <= n, "argument {r:?} past the request ({n})");
                            buf[r.clone()].to_vec()
                        })
                        .collect();
                    assert!(args.len() <= limits.max_args);
                    if !args.is_empty() {
                        out.push(args);
                    }
                    buf.drain(..n);
                }
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

/// `req` as a RESP multibulk of bulk strings (what a client sends).
pub fn encode(req: &Request) -> Vec<u8> {
    let mut out = format!("*{}\r\n", req.len()).into_bytes();
    for a in req {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

pub fn check(data: &[u8]) {
    let limits = limits();
    let whole = feed([data], &limits);
    let bytes = feed(data.chunks(1), &limits);
    assert_eq!(whole, bytes, "byte-at-a-time parse differs");
    let mid = data.len() / 2;
    let halves = feed([&data[..mid], &data[mid..]], &limits);
    assert_eq!(whole, halves, "split parse differs");
    for req in &whole.0 {
        let again = feed([&encode(req)[..]], &limits);
        assert_eq!(again, (vec![req.clone()], None), "round trip of {req:?}");
    }
}

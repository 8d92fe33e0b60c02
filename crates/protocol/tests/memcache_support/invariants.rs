//! The parser's contract, checked on arbitrary input. Shared by the fuzz
//! target (`fuzz/fuzz_targets/memcache_parse.rs`, included by path) and the
//! corpus replay test. Panics on a violation.

use memshift_protocol::memcache::{
    parse_request, ParseLimits, Parsed, ProtocolError, Request, RetrievalCommand, MAX_KEY_LEN,
};

/// Check every invariant on `data`, with the default item size limit and
/// with a tiny one (so that "too large" is reachable).
pub fn check(data: &[u8]) {
    for limits in [
        ParseLimits::default(),
        ParseLimits {
            max_item_size: 100,
            ..ParseLimits::default()
        },
    ] {
        check_with(data, &limits);
    }
}

fn check_with(data: &[u8], limits: &ParseLimits) {
    let result = parse_request(data, limits);
    match &result {
        Parsed::Complete { request, consumed } => {
            assert!(*consumed > 0, "empty request");
            assert!(*consumed <= data.len(), "consumed past the input");
            check_request(request, &data[..*consumed]);
            // The same request from exactly its bytes ...
            assert_eq!(parse_request(&data[..*consumed], limits), result);
            // ... and nothing before all of them arrived.
            for cut in cuts(*consumed) {
                assert_eq!(
                    parse_request(&data[..cut], limits),
                    Parsed::Incomplete,
                    "prefix of {cut} bytes of a complete request"
                );
            }
        }
        Parsed::Incomplete => {
            for cut in cuts(data.len()) {
                assert_eq!(
                    parse_request(&data[..cut], limits),
                    Parsed::Incomplete,
                    "prefix of {cut} bytes of an incomplete request"
                );
            }
        }
        Parsed::Invalid(ProtocolError::Reply { reply, skip, .. }) => {
            assert!(*skip > 0, "an error must make progress");
            assert!(reply.is_empty() || reply.ends_with(b"\r\n"));
            // The verdict does not depend on bytes after the skipped ones.
            if *skip <= data.len() {
                assert_eq!(parse_request(&data[..*skip], limits), result);
            }
        }
        Parsed::Invalid(ProtocolError::Close { reply }) => {
            assert!(reply.is_empty() || reply.ends_with(b"\r\n"));
        }
    }
}

/// Prefix lengths to try: all of them for short inputs, a spread otherwise.
fn cuts(len: usize) -> impl Iterator<Item = usize> {
    let step = if len <= 512 { 1 } else { len / 256 };
    (0..len).step_by(step).chain(len.saturating_sub(4)..len)
}

fn check_key(key: &[u8]) {
    assert!(
        !key.is_empty() && key.len() <= MAX_KEY_LEN,
        "key length {}",
        key.len()
    );
    assert!(!key.contains(&b' ') && !key.contains(&b'\n') && !key.contains(&0));
}

/// Fields are valid and every slice lies inside the request's bytes.
fn check_request(request: &Request<&[u8]>, input: &[u8]) {
    let start = input.as_ptr() as usize;
    let end = start + input.len();
    request.clone().map(|s| {
        let at = s.as_ptr() as usize;
        assert!(
            at >= start && at + s.len() <= end,
            "slice outside the input"
        );
    });
    match request {
        Request::Retrieval { command, keys, .. } => {
            assert_eq!(keys.len(), keys.iter().count());
            keys.iter().for_each(check_key);
            if matches!(command, RetrievalCommand::Get | RetrievalCommand::Gets) {
                assert!(!keys.is_empty());
            }
        }
        Request::Storage { key, data, .. } => {
            check_key(key);
            let data_at = data.as_ptr() as usize - start;
            assert_eq!(data_at + data.len() + 2, input.len());
            assert!(input.ends_with(b"\r\n"));
        }
        Request::Arith { key, .. } | Request::Delete { key, .. } | Request::Touch { key, .. } => {
            check_key(key)
        }
        Request::Meta {
            command,
            key,
            tokens,
            data,
            flags,
        } => {
            if flags.base64 {
                let decoded = memshift_protocol::memcache::base64::decode(key);
                assert!(decoded.is_some_and(|k| !k.is_empty()));
                assert!(key.len() <= MAX_KEY_LEN);
            } else {
                check_key(key);
            }
            assert!(!tokens.starts_with(b" ") && !tokens.ends_with(b" "));
            if *command == memshift_protocol::memcache::MetaCommand::Set {
                let data_at = data.as_ptr() as usize - start;
                assert_eq!(data_at + data.len() + 2, input.len());
                assert!(input.ends_with(b"\r\n"));
            } else {
                assert!(data.is_empty());
            }
        }
        _ => {}
    }
}

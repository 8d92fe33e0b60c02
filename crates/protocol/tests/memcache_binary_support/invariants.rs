//! The binary parser's contract, checked on arbitrary input. Shared by the
//! fuzz target (`fuzz/fuzz_targets/memcache_binary.rs`, included by path)
//! and the corpus replay test. Panics on a violation.

use memshift_protocol::memcache::binary::{parse, read_header, Command, Error, HEADER_LEN};
use memshift_protocol::memcache::{ParseLimits, MAX_KEY_LEN};

/// Check every invariant on `data`, with the default item size limit and a
/// tiny one (so that "too large" is reachable).
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
    let result = parse(data, limits);
    match &result {
        Ok(Some((request, consumed))) => {
            assert!(*consumed >= HEADER_LEN, "request shorter than a header");
            assert!(*consumed <= data.len(), "consumed past the input");
            assert!(request.key.len() <= MAX_KEY_LEN, "key over 250 bytes");
            let value_len = match &request.command {
                Command::Store { value, .. } | Command::Concat { value, .. } => value.len(),
                Command::SaslAuth { data } | Command::SaslStep { data } => data.len(),
                _ => 0,
            };
            assert!(
                value_len <= limits.max_item_size,
                "value over the item size limit"
            );
            // The same request from exactly its bytes, and nothing from
            // fewer of them.
            assert_eq!(parse(&data[..*consumed], limits), result);
            for cut in [0, 1, HEADER_LEN - 1, *consumed - 1] {
                if cut < *consumed {
                    assert_eq!(
                        parse(&data[..cut], limits),
                        Ok(None),
                        "prefix of {cut} bytes"
                    );
                }
            }
        }
        Ok(None) => {
            // Waiting: the bytes still missing are bounded by the header.
            if let Ok(Some(header)) = read_header(data) {
                assert!(header.fixed_len() <= data.len());
                assert!(header.value_len() <= limits.max_item_size);
            }
        }
        Err(err) => {
            assert!(
                err.consumed() <= data.len(),
                "error consumed past the input"
            );
            match err {
                Error::BadMagic(m) => assert_ne!(*m, 0x80),
                _ => assert!(err.status().is_some(), "error without a response"),
            }
            if let Some(range) = err.stale_key() {
                assert!(range.end <= data.len());
            }
        }
    }
}

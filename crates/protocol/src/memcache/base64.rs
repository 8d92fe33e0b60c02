//! Base64 as memcached 1.6.18 reads and writes meta command keys (`b` flag).
//!
//! Decoding is lenient the way memcached's is: bytes outside the alphabet
//! are skipped, the remaining characters (`=` included) must come in groups
//! of four, and the first group holding padding ends the key (one `=` drops
//! one byte, two drop two, more fail). Encoding is standard, padded.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Value of a base64 character (`=` counts as 0), `None` for other bytes.
fn sextet(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        b'=' => Some(0),
        _ => None,
    }
}

/// The key a `b` token stands for; `None` where memcached answers
/// `CLIENT_ERROR error decoding key`.
pub fn decode(src: &[u8]) -> Option<Vec<u8>> {
    let count = src.iter().filter(|&&b| sextet(b).is_some()).count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(count / 4 * 3);
    let mut group = [0u8; 4];
    let mut filled = 0;
    let mut pad = 0;
    for &b in src {
        let Some(v) = sextet(b) else {
            continue;
        };
        if b == b'=' {
            pad += 1;
        }
        if let Some(slot) = group.get_mut(filled) {
            *slot = v;
        }
        filled += 1;
        if filled == 4 {
            out.push((group[0] << 2) | (group[1] >> 4));
            out.push((group[1] << 4) | (group[2] >> 2));
            out.push((group[2] << 6) | group[3]);
            filled = 0;
            if pad > 0 {
                match pad {
                    1 => out.truncate(out.len() - 1),
                    2 => out.truncate(out.len() - 2),
                    _ => return None,
                }
                break;
            }
        }
    }
    if out.is_empty() {
        return None;
    }
    Some(out)
}

/// Standard padded base64 of `src`, appended to `out`.
pub fn encode_into(out: &mut impl Extend<u8>, src: &[u8]) {
    let sym = |v: u8| ALPHABET[usize::from(v & 0x3f)];
    let mut chunks = src.chunks_exact(3);
    for c in &mut chunks {
        out.extend([
            sym(c[0] >> 2),
            sym((c[0] << 4) | (c[1] >> 4)),
            sym((c[1] << 2) | (c[2] >> 6)),
            sym(c[2]),
        ]);
    }
    match *chunks.remainder() {
        [a] => out.extend([sym(a >> 2), sym(a << 4), b'=', b'=']),
        [a, b] => out.extend([sym(a >> 2), sym((a << 4) | (b >> 4)), sym(b << 2), b'=']),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(src: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        encode_into(&mut v, src);
        v
    }

    #[test]
    fn decodes_like_memcached() {
        assert_eq!(decode(b"YWJj").as_deref(), Some(&b"abc"[..]));
        assert_eq!(decode(b"YWI=").as_deref(), Some(&b"ab"[..]));
        assert_eq!(decode(b"YQ==").as_deref(), Some(&b"a"[..]));
        assert_eq!(decode(b"AA==").as_deref(), Some(&b"\0"[..]));
        // Observed: `mg YW=j b k` answers `EN kYWA= b`.
        assert_eq!(enc(&decode(b"YW=j").unwrap_or_default()), b"YWA=");
        // `YWJjZA=x` is `abcd\0` (`kYWJjZAA= b`).
        assert_eq!(decode(b"YWJjZA=x").as_deref(), Some(&b"abcd\0"[..]));
        // Skipped bytes, then too few characters: an error.
        assert_eq!(decode(b"YW*j"), None);
        assert_eq!(decode(b"YWI"), None);
        assert_eq!(decode(b"YWJj="), None);
        assert_eq!(decode(b"===="), None);
        assert_eq!(decode(b""), None);
    }

    #[test]
    fn encodes_padded() {
        assert_eq!(enc(b"abc"), b"YWJj");
        assert_eq!(enc(b"ab"), b"YWI=");
        assert_eq!(enc(b"a"), b"YQ==");
        assert_eq!(enc(b""), b"");
        for key in [&b"abc2"[..], b"\x00\xff\x10 x", b"hello world"] {
            assert_eq!(decode(&enc(key)).as_deref(), Some(key));
        }
    }
}

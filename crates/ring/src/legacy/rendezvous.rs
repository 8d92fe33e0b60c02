//! pymemcache's `HashClient` default hasher, `RendezvousHash` (see the
//! module docs of [`crate::legacy`] for the algorithm and its sources).

use super::hash::Murmur3;
use super::LegacyError;

/// How the applications hand keys to pymemcache. pymemcache hashes the
/// Python *object* it was given, formatted with `f"{node}-{key}"`, so a `str`
/// key and the `bytes` key with the same wire bytes land on different
/// servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RendezvousKeys {
    /// Keys are `str` (the common case, e.g. Django's cache backend). The
    /// wire bytes are the key's UTF-8 encoding; pymemcache hashes the low 8
    /// bits of each code point. A key that is not valid UTF-8 cannot come
    /// from a `str`, so it is hashed as [`RendezvousKeys::Bytes`] would.
    #[default]
    Str,
    /// Keys are `bytes`: pymemcache hashes their Python `repr`, `b'...'`.
    Bytes,
}

/// pymemcache's node name for a configured address, as
/// `normalize_server_spec` + `HashClient._make_client_key` build it:
///
/// * `unix:/path` -> `/path`; `/path` -> `/path`;
/// * no `:`, or ending in `]` -> `host:11211`;
/// * otherwise split at the last `:` and reprint the port as an integer;
/// * a host starting with `[` loses its surrounding brackets
///   (`[::1]:11211` -> `::1:11211`).
pub fn node_name(addr: &str) -> Result<String, LegacyError> {
    let invalid = |reason: &'static str| LegacyError::InvalidAddr {
        addr: addr.to_string(),
        reason,
    };
    if addr.is_empty() {
        return Err(invalid("empty address"));
    }
    if let Some(path) = addr.strip_prefix("unix:") {
        return Ok(path.to_string());
    }
    if addr.starts_with('/') {
        return Ok(addr.to_string());
    }
    let (host, port) = if !addr.contains(':') || addr.ends_with(']') {
        (addr, 11211u32)
    } else {
        let (host, port) = addr.rsplit_once(':').unwrap_or((addr, ""));
        // Python's int() would take a few more spellings (" 1", "+1", "1_1");
        // plain decimal digits are what real configurations use.
        if port.is_empty() || port.len() > 9 || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid("bad port"));
        }
        (host, port.parse::<u32>().map_err(|_| invalid("bad port"))?)
    };
    let host = if host.starts_with('[') {
        host.trim_matches(|c| c == '[' || c == ']')
    } else {
        host
    };
    Ok(format!("{host}:{port}"))
}

/// Feed the bytes pymemcache's murmur3 sees for a Python `str`: the low 8
/// bits of each code point (`ord(c) & 0xff`).
#[inline]
fn feed_str(m: &mut Murmur3, s: &str) {
    for c in s.chars() {
        m.write_byte(c as u32 as u8);
    }
}

/// Feed Python's `repr(bytes)`: `b'...'`, or `b"..."` when the bytes contain
/// `'` but no `"`; backslash, the quote, `\t`, `\n`, `\r` escaped; other bytes
/// outside 0x20..0x7e as `\xhh` (lowercase hex).
#[inline]
fn feed_bytes_repr(m: &mut Murmur3, key: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let quote = if key.contains(&b'\'') && !key.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    m.write_byte(b'b');
    m.write_byte(quote);
    for &b in key {
        match b {
            b'\\' => m.write(b"\\\\"),
            b'\t' => m.write(b"\\t"),
            b'\n' => m.write(b"\\n"),
            b'\r' => m.write(b"\\r"),
            _ if b == quote => {
                m.write_byte(b'\\');
                m.write_byte(b);
            }
            0x20..=0x7e => m.write_byte(b),
            _ => m.write(&[
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
        }
    }
    m.write_byte(quote);
}

#[derive(Debug, Clone)]
struct Node {
    /// Murmur state after `"{node}-"`.
    prefix: Murmur3,
    name: String,
}

#[derive(Debug, Clone)]
pub struct Rendezvous {
    /// One entry per configured server, in order (duplicates included; they
    /// score the same and lose ties to the first).
    nodes: Vec<Node>,
    keys: RendezvousKeys,
}

impl Rendezvous {
    pub fn new(addrs: &[&str], keys: RendezvousKeys) -> Result<Rendezvous, LegacyError> {
        let mut nodes = Vec::with_capacity(addrs.len());
        for addr in addrs {
            let name = node_name(addr)?;
            let mut prefix = Murmur3::new(0);
            feed_str(&mut prefix, &name);
            prefix.write_byte(b'-');
            nodes.push(Node { prefix, name });
        }
        Ok(Rendezvous { nodes, keys })
    }

    /// pymemcache's score of node `i` for `key`:
    /// `murmur3_32(f"{node}-{key}", seed=0)`.
    #[inline]
    fn score(&self, node: &Node, key: &[u8]) -> u32 {
        let mut m = node.prefix;
        match (self.keys, std::str::from_utf8(key)) {
            (RendezvousKeys::Str, Ok(s)) => feed_str(&mut m, s),
            _ => feed_bytes_repr(&mut m, key),
        }
        m.finish()
    }

    /// Highest score wins; on equal scores the node whose name is greater
    /// (Python `str` order, i.e. bytewise UTF-8) wins; identical names keep
    /// the first.
    #[inline]
    pub fn locate(&self, key: &[u8]) -> usize {
        let mut best = 0usize;
        let mut best_score = 0u32;
        for (i, node) in self.nodes.iter().enumerate() {
            let score = self.score(node, key);
            if i == 0 || score > best_score {
                best = i;
                best_score = score;
            } else if score == best_score && node.name > self.nodes[best].name {
                best = i;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::super::hash::murmur3_32;
    use super::*;

    fn repr_hash(prefix: &str, key: &[u8]) -> u32 {
        let mut m = Murmur3::new(0);
        m.write(prefix.as_bytes());
        feed_bytes_repr(&mut m, key);
        m.finish()
    }

    #[test]
    fn node_names_follow_normalize_server_spec() {
        let ok = |a: &str| node_name(a).unwrap();
        assert_eq!(ok("127.0.0.1:11211"), "127.0.0.1:11211");
        assert_eq!(ok("cache-a"), "cache-a:11211");
        assert_eq!(ok("cache-a:011212"), "cache-a:11212");
        assert_eq!(ok("[::1]:11212"), "::1:11212");
        assert_eq!(ok("[::1]"), "::1:11211");
        assert_eq!(ok("unix:/run/mc.sock"), "/run/mc.sock");
        assert_eq!(ok("/run/mc.sock"), "/run/mc.sock");
        for bad in ["", "h:", "h:x", "h:-1"] {
            assert!(node_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bytes_repr_matches_python() {
        // Each hash equals murmur3 of Python's repr(key), written out.
        let cases: [(&[u8], &str); 6] = [
            (b"key:1", "b'key:1'"),
            (b"it's", "b\"it's\""),
            (b"a\"b", "b'a\"b'"),
            (b"both'\"", "b'both\\'\"'"),
            (b"back\\slash\t\n\r", "b'back\\\\slash\\t\\n\\r'"),
            (b"\x00\x1f\x7f\x80\xff~", "b'\\x00\\x1f\\x7f\\x80\\xff~'"),
        ];
        for (key, repr) in cases {
            assert_eq!(
                repr_hash("n-", key),
                murmur3_32(format!("n-{repr}").as_bytes(), 0),
                "{repr}"
            );
        }
    }

    #[test]
    fn str_keys_hash_low_bytes_of_code_points() {
        let r = Rendezvous::new(&["a:1"], RendezvousKeys::Str).unwrap();
        // 'é' is U+00E9 -> 0xe9; '€' is U+20AC -> 0xac.
        let want = murmur3_32(b"a:1-caf\xe9\xac", 0);
        assert_eq!(r.score(&r.nodes[0], "café€".as_bytes()), want);
        // Invalid UTF-8 falls back to the bytes repr.
        let want = murmur3_32(b"a:1-b'\\xff'", 0);
        assert_eq!(r.score(&r.nodes[0], b"\xff"), want);
    }
}

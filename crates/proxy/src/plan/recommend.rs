//! From the estimate to a fleet: how many nodes of `--node-memory` with
//! `--headroom` free, how the ring spreads the sampled keys (by bytes) over
//! them, and the option parsers for sizes and percentages.

use std::collections::HashMap;

use memshift_ring::{Ring, RingConfig, ShardSpec};

/// Nodes tried above the plain `total / usable` when the ring's most
/// loaded shard does not fit.
const EXTRA_NODES_TRIED: u64 = 64;

/// One sampled item for placement: its key and its bytes in Redis.
pub struct Weighted<'a> {
    pub key: &'a [u8],
    pub bytes: f64,
}

/// The fleet `plan` recommends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fleet {
    pub nodes: u64,
    /// Per node: `node_memory * (1 - headroom)`.
    pub maxmemory: u64,
    /// The most loaded shard's share of the bytes, 0..=1.
    pub max_share: f64,
    /// The most loaded shard's share of the keys, 0..=1.
    pub max_key_share: f64,
}

/// Shares (bytes, keys) per shard of `shards` for the sampled items.
pub fn spread(ring: &Ring, items: &[Weighted<'_>]) -> Vec<(f64, f64)> {
    let mut load = vec![(0.0f64, 0.0f64); ring.shard_count()];
    for item in items {
        if let Some(l) = load.get_mut(ring.locate(item.key)) {
            l.0 += item.bytes;
            l.1 += 1.0;
        }
    }
    let (bytes, keys) = load
        .iter()
        .fold((0.0, 0.0), |(b, k), (lb, lk)| (b + lb, k + lk));
    load.iter()
        .map(|(b, k)| (b / bytes.max(1.0), k / keys.max(1.0)))
        .collect()
}

/// The smallest node count whose most loaded shard (on a ring of nodes
/// named `node-1`.. with the config's ring settings) fits `maxmemory`.
pub fn fleet(
    total: f64,
    node_memory: u64,
    headroom: f64,
    ring_config: RingConfig,
    items: &[Weighted<'_>],
) -> Fleet {
    let maxmemory = (node_memory as f64 * (1.0 - headroom)).floor().max(1.0);
    let base = ((total / maxmemory).ceil() as u64).max(1);
    let mut best = None;
    for nodes in base..=base + EXTRA_NODES_TRIED {
        let specs: Vec<ShardSpec> = (1..=nodes)
            .map(|i| ShardSpec::new(format!("node-{i}"), 1))
            .collect();
        let Ok(ring) = Ring::new(&specs, ring_config) else {
            break;
        };
        let shares = spread(&ring, items);
        let max_share = shares.iter().map(|s| s.0).fold(0.0, f64::max);
        let max_key_share = shares.iter().map(|s| s.1).fold(0.0, f64::max);
        let found = Fleet {
            nodes,
            maxmemory: maxmemory as u64,
            max_share: if items.is_empty() {
                1.0 / nodes as f64
            } else {
                max_share
            },
            max_key_share,
        };
        best = Some(found);
        if found.max_share * total <= maxmemory {
            break;
        }
    }
    best.unwrap_or(Fleet {
        nodes: base,
        maxmemory: maxmemory as u64,
        max_share: 1.0 / base as f64,
        max_key_share: 1.0 / base as f64,
    })
}

/// A key's prefix: up to the first `delimiter`, or `(none)`.
pub fn prefix_of(key: &[u8], delimiter: u8) -> String {
    match memchr::memchr(delimiter, key) {
        Some(i) => String::from_utf8_lossy(&key[..=i]).into_owned(),
        None => "(none)".to_owned(),
    }
}

/// The `top` prefixes by bytes: (prefix, sampled items, sampled bytes).
pub fn top_prefixes(items: &[Weighted<'_>], delimiter: u8, top: usize) -> Vec<(String, u64, f64)> {
    let mut by_prefix: HashMap<String, (u64, f64)> = HashMap::new();
    for item in items {
        let e = by_prefix.entry(prefix_of(item.key, delimiter)).or_default();
        e.0 += 1;
        e.1 += item.bytes;
    }
    let mut list: Vec<(String, u64, f64)> =
        by_prefix.into_iter().map(|(p, (n, b))| (p, n, b)).collect();
    list.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    list.truncate(top);
    list
}

/// `16GiB`, `512MiB`, `16GB`, `1.5G`, `1073741824`: bytes. Binary for
/// `KiB`/`MiB`/`GiB`/`TiB` and the bare `K`/`M`/`G`/`T`, decimal for
/// `KB`/`MB`/`GB`/`TB`.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number.parse().ok()?;
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return None,
    };
    let bytes = number * multiplier;
    (bytes.is_finite() && bytes >= 1.0).then_some(bytes as u64)
}

/// `25%` or `25`: the percentage kept free, 0 ..= 90.
pub fn parse_percent(text: &str) -> Option<u8> {
    let t = text.trim();
    let n: u8 = t.strip_suffix('%').unwrap_or(t).trim().parse().ok()?;
    (n <= 90).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_percents() {
        assert_eq!(parse_size("16GiB"), Some(16 << 30));
        assert_eq!(parse_size("16g"), Some(16 << 30));
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("16GB"), Some(16_000_000_000));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("4096"), Some(4096));
        for bad in ["", "GiB", "16XB", "-1G", "0"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
        assert_eq!(parse_percent("25%"), Some(25));
        assert_eq!(parse_percent("10"), Some(10));
        assert_eq!(parse_percent("95%"), None);
        assert_eq!(parse_percent("x"), None);
    }

    #[test]
    fn prefixes() {
        assert_eq!(prefix_of(b"user:1:name", b':'), "user:");
        assert_eq!(prefix_of(b"plain", b':'), "(none)");
        let keys: Vec<Vec<u8>> = (0..10).map(|i| format!("a:{i}").into_bytes()).collect();
        let mut items: Vec<Weighted<'_>> = keys
            .iter()
            .map(|k| Weighted {
                key: k,
                bytes: 10.0,
            })
            .collect();
        items.push(Weighted {
            key: b"big:1",
            bytes: 1000.0,
        });
        let top = top_prefixes(&items, b':', 1);
        assert_eq!(top, vec![("big:".to_owned(), 1, 1000.0)]);
    }

    /// 12 GiB usable per 16 GiB node: 90 GiB of data needs 8 nodes, more if
    /// the ring's most loaded shard would overflow.
    #[test]
    fn fleet_fits_the_most_loaded_shard() {
        let keys: Vec<Vec<u8>> = (0..20_000).map(|i| format!("k:{i}").into_bytes()).collect();
        let items: Vec<Weighted<'_>> = keys
            .iter()
            .map(|k| Weighted { key: k, bytes: 1.0 })
            .collect();
        let gib = (1u64 << 30) as f64;
        let f = fleet(90.0 * gib, 16 << 30, 0.25, RingConfig::default(), &items);
        assert_eq!(f.maxmemory, 12 << 30);
        assert!(f.nodes >= 8, "{f:?}");
        assert!(f.max_share * 90.0 * gib <= f.maxmemory as f64, "{f:?}");
        let tiny = fleet(1000.0, 16 << 30, 0.25, RingConfig::default(), &items);
        assert_eq!(tiny.nodes, 1);
        assert!((tiny.max_share - 1.0).abs() < 1e-9);
    }
}

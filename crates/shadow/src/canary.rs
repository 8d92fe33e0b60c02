//! The canary split: which keys have Redis as their primary during the
//! `canary` phase.
//!
//! # Contract
//!
//! Every proxy of a fleet, and every version of memshift, must put a key on
//! the same side for the same `canary_percent` (otherwise two proxies would
//! read and write the same key on different backends). So the exact rule is
//! pinned by golden vectors in the tests:
//!
//! * `h = XXH3-64(CANARY_SEED, key)` over the raw key bytes (no hash tag: the
//!   split is per key, not per tag).
//! * `point = h >> 11`, a uniform 53-bit integer.
//! * `threshold = round(canary_percent / 100 * 2^53)`, with `canary_percent`
//!   clamped to `0..=100` (NaN counts as 0).
//! * The key is a canary key iff `point < threshold`.
//!
//! [`CANARY_SEED`] differs from the ring's seed so the split is independent of
//! shard placement (otherwise the canary keys would all crowd on a few
//! shards). Raising `canary_percent` only ever adds keys to the canary set:
//! a key that went to Redis at 5% still goes there at 20%.

/// Seed of the canary hash: the ASCII bytes of `"canary!!"`, big-endian.
pub const CANARY_SEED: u64 = u64::from_be_bytes(*b"canary!!");

const POINT_BITS: u32 = 53;
const POINT_SPAN: f64 = (1u64 << POINT_BITS) as f64;

/// The hash the split is decided on.
#[inline]
pub fn canary_hash(key: &[u8]) -> u64 {
    memshift_ring::xxh3(CANARY_SEED, key)
}

/// True if `key` has Redis as its primary at `canary_percent` (0..=100).
///
/// Use [`CanarySplit`] on a hot path to skip the float conversion.
#[inline]
pub fn is_canary(key: &[u8], canary_percent: f64) -> bool {
    CanarySplit::new(canary_percent).contains(key)
}

/// A precomputed split for one `canary_percent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CanarySplit {
    threshold: u64,
}

impl CanarySplit {
    pub fn new(canary_percent: f64) -> CanarySplit {
        let share = if canary_percent.is_nan() {
            0.0
        } else {
            canary_percent.clamp(0.0, 100.0) / 100.0
        };
        // Exact at both ends: 0% gives 0 (nothing is below it), 100% gives
        // 2^53 (every 53-bit point is below it).
        let threshold = (share * POINT_SPAN).round() as u64;
        CanarySplit { threshold }
    }

    #[inline]
    pub fn contains(&self, key: &[u8]) -> bool {
        self.contains_hash(canary_hash(key))
    }

    /// Same as [`CanarySplit::contains`] for a hash from [`canary_hash`].
    #[inline]
    pub fn contains_hash(&self, hash: u64) -> bool {
        (hash >> (64 - POINT_BITS)) < self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned outputs: if any of these change, keys would switch sides in a
    /// running fleet.
    #[test]
    fn golden_vectors() {
        let golden: &[(&[u8], u64)] = &[
            (b"", GOLDEN_EMPTY),
            (b"a", GOLDEN_A),
            (b"user:42", GOLDEN_USER42),
            (b"session:9f2c", GOLDEN_SESSION),
        ];
        for &(key, want) in golden {
            assert_eq!(canary_hash(key), want, "hash of {:?}", key);
        }
        let membership: &[(&[u8], f64, bool)] = &[
            (b"user:42", 0.0, false),
            (b"user:42", 100.0, true),
            (b"user:42", GOLDEN_USER42_PCT + 0.01, true),
            (b"user:42", GOLDEN_USER42_PCT - 0.01, false),
        ];
        for &(key, pct, want) in membership {
            assert_eq!(is_canary(key, pct), want, "{:?} at {pct}%", key);
        }
    }

    /// The seed is a distinct constant, and the hash really is XXH3-64:
    /// XXH3_64bits("") with seed 0 is 0x2D06800538D394C2 (reference vector).
    #[test]
    fn hash_is_xxh3_with_own_seed() {
        assert_eq!(memshift_ring::xxh3(0, b""), 0x2D06_8005_38D3_94C2);
        assert_ne!(CANARY_SEED, 0);
        assert_ne!(canary_hash(b"k"), memshift_ring::xxh3(0, b"k"));
    }

    #[test]
    fn twenty_percent_of_ten_thousand_keys() {
        let split = CanarySplit::new(20.0);
        let n = (0..10_000)
            .filter(|i| split.contains(format!("key:{i}").as_bytes()))
            .count();
        assert!((1800..=2200).contains(&n), "{n} canary keys of 10000");
    }

    #[test]
    fn edges_and_bad_input() {
        for i in 0..1000 {
            let key = format!("k{i}");
            assert!(!is_canary(key.as_bytes(), 0.0));
            assert!(is_canary(key.as_bytes(), 100.0));
            assert!(!is_canary(key.as_bytes(), f64::NAN));
            assert!(!is_canary(key.as_bytes(), -5.0));
            assert!(is_canary(key.as_bytes(), 150.0));
        }
    }

    #[test]
    fn raising_the_percent_only_adds_keys() {
        let low = CanarySplit::new(5.0);
        let high = CanarySplit::new(20.0);
        for i in 0..10_000 {
            let key = format!("key:{i}");
            if low.contains(key.as_bytes()) {
                assert!(high.contains(key.as_bytes()), "{key} left the canary");
            }
        }
    }

    #[test]
    fn independent_of_ring_placement() {
        // Keys the ring's hash puts in its lowest 20% should still be split
        // ~20/80 by the canary hash.
        let split = CanarySplit::new(20.0);
        let (mut low, mut canary) = (0, 0);
        for i in 0..50_000 {
            let key = format!("key:{i}");
            if memshift_ring::xxh3(0, key.as_bytes()) < u64::MAX / 5 {
                low += 1;
                canary += usize::from(split.contains(key.as_bytes()));
            }
        }
        let share = canary as f64 / low as f64;
        assert!((0.17..=0.23).contains(&share), "share {share}");
    }

    const GOLDEN_EMPTY: u64 = 0x228D_1BBD_91E9_EBEA;
    const GOLDEN_A: u64 = 0x0D62_AACB_D1E1_3E03;
    const GOLDEN_USER42: u64 = 0x22C2_8D6E_2000_1C00;
    const GOLDEN_SESSION: u64 = 0x45A6_9E22_103A_41A3;
    /// Where `user:42`'s point sits, in percent of the 53-bit range.
    const GOLDEN_USER42_PCT: f64 = 13.578_113_497;
}

//! The formula: how many bytes of Redis 7.0 `used_memory` one memcached
//! item costs once memshift stores it, and the sample statistics that turn
//! a sample of items into a total with a confidence interval.
//!
//! Per key (jemalloc 5 size classes, x86-64):
//!
//! ```text
//! value   = 13-byte memshift header + data                 (redis/encoding.rs)
//! object  = len(value) <= 44: embstr, class(16 + 3 + len + 1)
//!           else raw:         16 + class(sdshdr(len) + len + 1)
//! key     = class(sdshdr(key_len) + key_len + 1)
//! entry   = class(24) = 32 (standalone), class(24 + 16) = 48 (cluster:
//!           the slot's key list pointers)
//! expires = 32 more when the item has a TTL (an entry in db->expires)
//! ```
//!
//! Per shard, the dicts' bucket arrays: `8 * next_pow2(keys)` for the key
//! space and `8 * next_pow2(keys with a TTL)` for the expires dict.
//! `sdshdr(n)`: 1 byte below 32 (keys only: values of that size are
//! embstr), 3 below 256, 5 below 65,536, 9 beyond. See docs/migration.md.

use crate::redis::encoding::HEADER_LEN;

/// `sizeof(robj)`.
const ROBJ: u64 = 16;
/// Longest string Redis keeps as an embedded string (`OBJ_ENCODING_EMBSTR_SIZE_LIMIT`).
const EMBSTR_LIMIT: u64 = 44;
/// `sizeof(dictEntry)`: key, value and next pointers.
const DICT_ENTRY: u64 = 24;
/// Redis Cluster's per-entry metadata (the slot's doubly linked key list).
const CLUSTER_ENTRY_METADATA: u64 = 16;
/// One bucket pointer of a dict's table.
const BUCKET: u64 = 8;

/// The smallest jemalloc size class that holds `n` bytes (x86-64: 16-byte
/// quantum, four classes per doubling above 128).
pub fn jemalloc_class(n: u64) -> u64 {
    match n {
        0..=8 => 8,
        9..=128 => n.div_ceil(16) * 16,
        _ => {
            // Classes in (2^k, 2^(k+1)] are spaced 2^(k-2) apart.
            let k = 63 - (n - 1).leading_zeros() as u64;
            let spacing = 1u64 << (k - 2);
            n.div_ceil(spacing) * spacing
        }
    }
}

/// Bytes of an sds header for a string of `len` bytes (`sdsReqType`).
fn sds_header(len: u64) -> u64 {
    match len {
        0..=31 => 1,
        32..=255 => 3,
        256..=65_535 => 5,
        _ => 9,
    }
}

/// Where the keys live: the dict entry is larger in a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Standalone,
    Cluster,
}

impl Topology {
    fn dict_entry(self) -> u64 {
        match self {
            Topology::Standalone => jemalloc_class(DICT_ENTRY),
            Topology::Cluster => jemalloc_class(DICT_ENTRY + CLUSTER_ENTRY_METADATA),
        }
    }
}

/// One item as memshift will store it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemShape {
    pub key_len: u64,
    pub data_len: u64,
    pub has_ttl: bool,
}

impl ItemShape {
    /// The bytes of the Redis string memshift writes (header + data).
    pub fn stored_len(&self) -> u64 {
        HEADER_LEN as u64 + self.data_len
    }
}

/// The value object's bytes: embedded string or robj + raw sds.
pub fn value_bytes(stored_len: u64) -> u64 {
    if stored_len <= EMBSTR_LIMIT {
        jemalloc_class(ROBJ + 3 + stored_len + 1)
    } else {
        ROBJ + jemalloc_class(sds_header(stored_len) + stored_len + 1)
    }
}

/// The key's sds.
pub fn key_bytes(key_len: u64) -> u64 {
    jemalloc_class(sds_header(key_len) + key_len + 1)
}

/// What one item adds to `used_memory`, the dicts' bucket arrays aside.
pub fn item_bytes(item: &ItemShape, topology: Topology) -> u64 {
    let expires = if item.has_ttl {
        jemalloc_class(DICT_ENTRY)
    } else {
        0
    };
    value_bytes(item.stored_len()) + key_bytes(item.key_len) + topology.dict_entry() + expires
}

/// What `MEMORY USAGE key SAMPLES 0` leaves out of an item's cost: it counts
/// `sizeof(dictEntry)` unrounded and not the expires entry at all.
pub fn memory_usage_blind_spot(has_ttl: bool, topology: Topology) -> u64 {
    let counted = match topology {
        Topology::Standalone => DICT_ENTRY,
        Topology::Cluster => DICT_ENTRY + CLUSTER_ENTRY_METADATA,
    };
    let expires = if has_ttl {
        jemalloc_class(DICT_ENTRY)
    } else {
        0
    };
    topology.dict_entry() - counted + expires
}

/// The bucket arrays of one shard's key space and expires dict.
pub fn shard_table_bytes(keys: u64, keys_with_ttl: u64) -> u64 {
    let table = |n: u64| {
        if n == 0 {
            0
        } else {
            BUCKET * n.next_power_of_two()
        }
    };
    table(keys) + table(keys_with_ttl)
}

/// Running mean and variance (Welford), for the sample's per-item bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Moments {
    pub n: u64,
    mean: f64,
    m2: f64,
}

impl Moments {
    pub fn add(&mut self, x: f64) {
        self.n += 1;
        let delta = x - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (x - self.mean);
    }

    pub fn mean(&self) -> f64 {
        self.mean
    }

    /// Sample variance (n - 1).
    pub fn variance(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            self.m2 / (self.n - 1) as f64
        }
    }

    /// Half-width of the 95% confidence interval of `population * mean`
    /// (normal approximation, finite population correction).
    pub fn total_ci95(&self, population: u64) -> f64 {
        if self.n == 0 || population == 0 {
            return 0.0;
        }
        let n = self.n as f64;
        let pop = population as f64;
        let fpc = if pop > 1.0 {
            ((pop - n).max(0.0) / (pop - 1.0)).sqrt()
        } else {
            0.0
        };
        1.96 * pop * (self.variance() / n).sqrt() * fpc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jemalloc_classes() {
        let cases = [
            (1, 8),
            (8, 8),
            (9, 16),
            (24, 32),
            (40, 48),
            (128, 128),
            (129, 160),
            (257, 320),
            (4115, 5120),
            (16_384, 16_384),
            (16_385, 20_480),
            (65_559, 81_920),
        ];
        for (n, class) in cases {
            assert_eq!(jemalloc_class(n), class, "class of {n}");
        }
    }

    /// Measured on redis-server 7.0.15 (jemalloc 5.3.0): `used_memory`
    /// growth over 100,000 keys "key:N" divided by the key count, less the
    /// bucket arrays: 100-byte values 192.5, 4 KiB with a TTL 5216.
    #[test]
    fn matches_measured_redis() {
        let small = ItemShape {
            key_len: 9,
            data_len: 100,
            has_ttl: false,
        };
        assert_eq!(item_bytes(&small, Topology::Standalone), 16 + 32 + 16 + 128);
        let session = ItemShape {
            key_len: 9,
            data_len: 4096,
            has_ttl: true,
        };
        assert_eq!(
            item_bytes(&session, Topology::Standalone),
            16 + 5120 + 16 + 32 + 32
        );
        // Short values are embedded strings: one allocation with the robj.
        assert_eq!(value_bytes(13 + 31), 64);
        assert_eq!(value_bytes(13 + 32), 16 + 64);
        assert_eq!(shard_table_bytes(100_000, 0), 8 * 131_072);
        assert_eq!(shard_table_bytes(0, 0), 0);
    }

    #[test]
    fn blind_spot_is_entry_rounding_and_expires() {
        assert_eq!(memory_usage_blind_spot(false, Topology::Standalone), 8);
        assert_eq!(memory_usage_blind_spot(true, Topology::Standalone), 40);
        assert_eq!(memory_usage_blind_spot(false, Topology::Cluster), 8);
    }

    #[test]
    fn moments_and_interval() {
        let mut m = Moments::default();
        for x in [1.0, 2.0, 3.0, 4.0] {
            m.add(x);
        }
        assert!((m.mean() - 2.5).abs() < 1e-9);
        assert!((m.variance() - 5.0 / 3.0).abs() < 1e-9);
        // The whole population sampled: no sampling error.
        assert_eq!(m.total_ci95(4), 0.0);
        assert!(m.total_ci95(1000) > 0.0);
        let mut constant = Moments::default();
        constant.add(7.0);
        constant.add(7.0);
        assert_eq!(constant.total_ci95(1_000_000), 0.0);
    }
}

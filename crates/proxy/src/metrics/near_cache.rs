//! `memshift_near_cache_*`: the near cache's counters and size.

use metrics::{Counter, Gauge};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::registry::{counter, gauge};

pub const NEAR_CACHE_HITS: &str = "memshift_near_cache_hits_total";
pub const NEAR_CACHE_MISSES: &str = "memshift_near_cache_misses_total";
pub const NEAR_CACHE_ADMISSIONS: &str = "memshift_near_cache_admissions_total";
pub const NEAR_CACHE_EVICTIONS: &str = "memshift_near_cache_evictions_total";
pub const NEAR_CACHE_INVALIDATIONS: &str = "memshift_near_cache_invalidations_total";
pub const NEAR_CACHE_BYTES: &str = "memshift_near_cache_bytes";
pub const NEAR_CACHE_ENTRIES: &str = "memshift_near_cache_entries";

/// Name, type, HELP of each family (appended to `FAMILIES` by the tests
/// and the registry).
pub const NEAR_CACHE_FAMILIES: [(&str, &str, &str); 7] = [
    (
        NEAR_CACHE_HITS,
        "counter",
        "get/gets keys answered from the near cache.",
    ),
    (
        NEAR_CACHE_MISSES,
        "counter",
        "get/gets keys of Redis-served shards looked up in the near cache and not found there.",
    ),
    (
        NEAR_CACHE_ADMISSIONS,
        "counter",
        "Items put into the near cache.",
    ),
    (
        NEAR_CACHE_EVICTIONS,
        "counter",
        "Items evicted from the near cache to stay within max_bytes.",
    ),
    (
        NEAR_CACHE_INVALIDATIONS,
        "counter",
        "Invalidations received from Redis: kind=key per key, kind=all per whole-shard drop (connection lost, flush, tracking overflow).",
    ),
    (
        NEAR_CACHE_BYTES,
        "gauge",
        "Bytes held by the near cache (keys, values, per-entry overhead).",
    ),
    (NEAR_CACHE_ENTRIES, "gauge", "Items held by the near cache."),
];

#[derive(Debug)]
pub struct NearCacheMetrics {
    hits: Counter,
    misses: Counter,
    admissions: Counter,
    evictions: Counter,
    /// `[key, all]`
    invalidations: [Counter; 2],
    bytes: Gauge,
    entries: Gauge,
}

impl NearCacheMetrics {
    pub(super) fn register(r: &PrometheusRecorder) -> NearCacheMetrics {
        NearCacheMetrics {
            hits: counter(r, NEAR_CACHE_HITS, &[]),
            misses: counter(r, NEAR_CACHE_MISSES, &[]),
            admissions: counter(r, NEAR_CACHE_ADMISSIONS, &[]),
            evictions: counter(r, NEAR_CACHE_EVICTIONS, &[]),
            invalidations: ["key", "all"]
                .map(|k| counter(r, NEAR_CACHE_INVALIDATIONS, &[("kind", k)])),
            bytes: gauge(r, NEAR_CACHE_BYTES, &[]),
            entries: gauge(r, NEAR_CACHE_ENTRIES, &[]),
        }
    }

    #[inline]
    pub fn hit(&self) {
        self.hits.increment(1);
    }

    #[inline]
    pub fn miss(&self) {
        self.misses.increment(1);
    }

    pub fn admission(&self) {
        self.admissions.increment(1);
    }

    pub fn eviction(&self) {
        self.evictions.increment(1);
    }

    /// One key invalidated, or (`all`) a whole shard dropped.
    pub fn invalidation(&self, all: bool) {
        self.invalidations[usize::from(all)].increment(1);
    }

    /// A store's size moved from `before` to `after` (bytes, entries).
    pub fn resized(&self, before: (usize, usize), after: (usize, usize)) {
        if before != after {
            self.bytes.increment(after.0 as f64 - before.0 as f64);
            self.entries.increment(after.1 as f64 - before.1 as f64);
        }
    }
}

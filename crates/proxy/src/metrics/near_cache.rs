//! `memshift_near_cache_*`: the near cache's counters and size.
//!
//! Plain atomics, rendered into `/metrics` here and read by the `stats`
//! lines (`near_cache_*`): one tally per event serves both, and the size
//! gauges move by an integer add instead of the recorder's float CAS loop.
//! The per-key tallies (hits, misses, coalesced reads) are sharded by worker
//! thread ([`PerThreadCounter`]), as a get adds to one of them.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use bytes::BytesMut;
use memshift_protocol::memcache::reply;

use crate::per_thread::PerThreadCounter;

pub const NEAR_CACHE_HITS: &str = "memshift_near_cache_hits_total";
pub const NEAR_CACHE_MISSES: &str = "memshift_near_cache_misses_total";
pub const NEAR_CACHE_ADMISSIONS: &str = "memshift_near_cache_admissions_total";
pub const NEAR_CACHE_EVICTIONS: &str = "memshift_near_cache_evictions_total";
pub const NEAR_CACHE_INVALIDATIONS: &str = "memshift_near_cache_invalidations_total";
pub const NEAR_CACHE_BYTES: &str = "memshift_near_cache_bytes";
pub const NEAR_CACHE_ENTRIES: &str = "memshift_near_cache_entries";
pub const NEAR_CACHE_COALESCED: &str = "memshift_near_cache_coalesced_total";

/// Name, type, HELP of each family (appended to `FAMILIES` by the tests
/// and the registry).
pub const NEAR_CACHE_FAMILIES: [(&str, &str, &str); 8] = [
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
    (
        NEAR_CACHE_COALESCED,
        "counter",
        "get/gets reads answered by joining another read of the same key already in flight (coalesce_misses).",
    ),
];

/// The near cache's tallies (all 0 while it is off).
#[derive(Debug, Default)]
pub struct NearCacheMetrics {
    hits: PerThreadCounter,
    misses: PerThreadCounter,
    admissions: AtomicU64,
    evictions: AtomicU64,
    /// `[key, all]`
    invalidations: [AtomicU64; 2],
    bytes: AtomicI64,
    entries: AtomicI64,
    coalesced: PerThreadCounter,
}

/// A snapshot, for `stats` and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NearCacheCounts {
    pub hits: u64,
    pub misses: u64,
    pub admissions: u64,
    pub evictions: u64,
    pub key_invalidations: u64,
    pub shard_drops: u64,
    pub bytes: u64,
    pub entries: u64,
    pub coalesced: u64,
}

fn add(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl NearCacheMetrics {
    #[inline]
    pub fn hit(&self) {
        self.hits.add(1);
    }

    #[inline]
    pub fn miss(&self) {
        self.misses.add(1);
    }

    pub fn admission(&self) {
        add(&self.admissions);
    }

    /// `n` reads answered by joining another read.
    pub fn coalesced(&self, n: usize) {
        self.coalesced.add(n as u64);
    }

    pub fn eviction(&self) {
        add(&self.evictions);
    }

    /// One key invalidated, or (`all`) a whole shard dropped.
    pub fn invalidation(&self, all: bool) {
        add(&self.invalidations[usize::from(all)]);
    }

    /// A store's size moved from `before` to `after` (bytes, entries).
    pub fn resized(&self, before: (usize, usize), after: (usize, usize)) {
        if before != after {
            let delta = |a: usize, b: usize| a as i64 - b as i64;
            self.bytes
                .fetch_add(delta(after.0, before.0), Ordering::Relaxed);
            self.entries
                .fetch_add(delta(after.1, before.1), Ordering::Relaxed);
        }
    }

    pub fn counts(&self) -> NearCacheCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        // Stores on different threads move the sums in separate steps: never
        // below 0 in total, but clamp rather than trust that.
        let size = |c: &AtomicI64| u64::try_from(c.load(Ordering::Relaxed)).unwrap_or(0);
        NearCacheCounts {
            hits: self.hits.get(),
            misses: self.misses.get(),
            admissions: get(&self.admissions),
            evictions: get(&self.evictions),
            key_invalidations: get(&self.invalidations[0]),
            shard_drops: get(&self.invalidations[1]),
            bytes: size(&self.bytes),
            entries: size(&self.entries),
            coalesced: self.coalesced.get(),
        }
    }

    /// Append the families in Prometheus text format.
    pub(super) fn render(&self, out: &mut String) {
        let c = self.counts();
        let values: [(&str, &[(&str, u64)]); 8] = [
            (NEAR_CACHE_HITS, &[("", c.hits)]),
            (NEAR_CACHE_MISSES, &[("", c.misses)]),
            (NEAR_CACHE_ADMISSIONS, &[("", c.admissions)]),
            (NEAR_CACHE_EVICTIONS, &[("", c.evictions)]),
            (
                NEAR_CACHE_INVALIDATIONS,
                &[
                    ("{kind=\"key\"}", c.key_invalidations),
                    ("{kind=\"all\"}", c.shard_drops),
                ],
            ),
            (NEAR_CACHE_BYTES, &[("", c.bytes)]),
            (NEAR_CACHE_ENTRIES, &[("", c.entries)]),
            (NEAR_CACHE_COALESCED, &[("", c.coalesced)]),
        ];
        for ((name, kind, help), (_, series)) in NEAR_CACHE_FAMILIES.iter().zip(values) {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, v) in series {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        }
    }

    /// The `stats` lines (only while the near cache is on, so that `stats`
    /// of a proxy without it keeps memcached's exact set of lines).
    pub fn render_stats(&self, out: &mut BytesMut) {
        let c = self.counts();
        reply::stat(out, "near_cache_hits", c.hits);
        reply::stat(out, "near_cache_misses", c.misses);
        reply::stat(out, "near_cache_admissions", c.admissions);
        reply::stat(out, "near_cache_evictions", c.evictions);
        reply::stat(out, "near_cache_invalidations", c.key_invalidations);
        reply::stat(out, "near_cache_shard_drops", c.shard_drops);
        reply::stat(out, "near_cache_bytes", c.bytes);
        reply::stat(out, "near_cache_entries", c.entries);
        reply::stat(out, "near_cache_coalesced", c.coalesced);
    }
}

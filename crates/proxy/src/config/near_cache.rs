//! `[near_cache]`: hot keys answered from the proxy's memory, invalidated by
//! Redis client tracking (see docs/near-cache.md).

use serde::Deserialize;

/// Largest `max_ttl_ms`: the bound on how long an entry is served without a
/// re-read is the safety net behind invalidation; a minute is plenty.
pub const MAX_TTL_MS_LIMIT: u64 = 60_000;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NearCacheConfig {
    /// Off by default. Changing it needs a restart (it starts or stops the
    /// per-shard invalidation connections).
    pub enabled: bool,
    /// Memory bound for the whole process (split evenly over the worker
    /// threads): keys + values + a fixed per-entry overhead.
    pub max_bytes: usize,
    /// Longest an entry is served without a re-read, whatever its TTL.
    pub max_ttl_ms: u64,
    /// A key is cached on its `admit_reads`-th read within `admit_window_ms`
    /// (1 = on its first read).
    pub admit_reads: u32,
    pub admit_window_ms: u64,
}

impl Default for NearCacheConfig {
    fn default() -> Self {
        NearCacheConfig {
            enabled: false,
            max_bytes: 64 * 1024 * 1024,
            max_ttl_ms: 2_000,
            admit_reads: 2,
            admit_window_ms: 1_000,
        }
    }
}

pub(super) fn validate(c: &NearCacheConfig) -> Result<(), String> {
    if c.max_bytes < 1024 {
        return Err(format!(
            "near_cache.max_bytes: {} is too small (at least 1024)",
            c.max_bytes
        ));
    }
    if c.max_ttl_ms == 0 || c.max_ttl_ms > MAX_TTL_MS_LIMIT {
        return Err(format!(
            "near_cache.max_ttl_ms: {} is outside 1..={MAX_TTL_MS_LIMIT}",
            c.max_ttl_ms
        ));
    }
    if !(1..=2).contains(&c.admit_reads) {
        return Err(format!(
            "near_cache.admit_reads: {} is outside 1..=2",
            c.admit_reads
        ));
    }
    if c.admit_window_ms == 0 || c.admit_window_ms > 3_600_000 {
        return Err(format!(
            "near_cache.admit_window_ms: {} is outside 1..=3600000",
            c.admit_window_ms
        ));
    }
    Ok(())
}

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
    /// A single-key get/gets that misses while a read of the same key
    /// (same shard, nothing invalidated since it was sent) is in flight on
    /// the same worker thread waits for that read's answer instead of
    /// sending its own. On by default: the answer it gets is one it could
    /// have got from its own read (the fill rule), and it only costs a map
    /// insert per admitted miss.
    pub coalesce_misses: bool,
}

impl Default for NearCacheConfig {
    fn default() -> Self {
        NearCacheConfig {
            enabled: false,
            max_bytes: 64 * 1024 * 1024,
            max_ttl_ms: 2_000,
            admit_reads: 2,
            admit_window_ms: 1_000,
            coalesce_misses: true,
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

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const BASE: &str =
        "[server]\nlisten = \"127.0.0.1:11211\"\n[redis]\nshards = [\"127.0.0.1:6379\"]\n";

    fn load(extra: &str) -> Result<Config, String> {
        Config::from_toml_str(&format!("{BASE}{extra}")).map_err(|e| e.to_string())
    }

    #[test]
    fn off_by_default_and_every_bound_named() {
        let c = load("").unwrap();
        assert!(!c.near_cache.enabled);
        assert_eq!(c.near_cache.max_ttl_ms, 2_000);
        assert!(c.near_cache.coalesce_misses);
        let off = load("[near_cache]\ncoalesce_misses = false\n").unwrap();
        assert!(!off.near_cache.coalesce_misses);
        assert!(
            c.restart_required_changes(&off).is_empty(),
            "hot-reloadable"
        );
        let on = load("[near_cache]\nenabled = true\nmax_bytes = 4096\nadmit_reads = 1\n").unwrap();
        assert!(on.near_cache.enabled);
        for (bad, key) in [
            ("max_bytes = 10", "near_cache.max_bytes"),
            ("max_ttl_ms = 0", "near_cache.max_ttl_ms"),
            ("max_ttl_ms = 60001", "near_cache.max_ttl_ms"),
            ("admit_reads = 0", "near_cache.admit_reads"),
            ("admit_reads = 3", "near_cache.admit_reads"),
            ("admit_window_ms = 0", "near_cache.admit_window_ms"),
        ] {
            let e = load(&format!("[near_cache]\n{bad}\n")).unwrap_err();
            assert!(e.starts_with(key), "{bad}: {e}");
        }
        assert!(load("[near_cache]\nsize = 1\n").is_err(), "unknown key");
        assert_eq!(c.restart_required_changes(&on), vec!["near_cache.enabled"]);
    }
}

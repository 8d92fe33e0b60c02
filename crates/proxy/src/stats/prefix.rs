//! memcached's `stats detail`: get/hit/set/delete counts per key prefix (the
//! bytes before the first `:`), off until `stats detail on`.
//!
//! Cost: while off, one relaxed atomic load per recorded key. While on, a
//! lock-free read of the published prefix map and an atomic add; the writer
//! mutex is taken only to add a new prefix (at most [`MAX_PREFIXES`] times
//! between two resets) or to clear. Past the cap, new prefixes are not
//! counted (memcached does the same past its own 65,536); prefixes already
//! known keep counting.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use bytes::BytesMut;

/// Most distinct prefixes counted between two `stats reset`s.
pub const MAX_PREFIXES: usize = 1024;

/// memcached's default `-D` delimiter.
const DELIMITER: u8 = b':';

#[derive(Debug, Default)]
struct Counts {
    gets: AtomicU64,
    hits: AtomicU64,
    sets: AtomicU64,
    deletes: AtomicU64,
}

type Map = HashMap<Box<[u8]>, Arc<Counts>>;

#[derive(Debug, Default)]
pub struct PrefixStats {
    enabled: AtomicBool,
    /// Read without a lock on the request path; replaced (copy on write)
    /// when a prefix is added or on clear.
    map: ArcSwap<Map>,
    /// Serialises writers of `map`.
    writer: Mutex<()>,
    /// Set once the cap is reached, so that further unknown prefixes skip the
    /// writer lock.
    full: AtomicBool,
}

impl PrefixStats {
    /// `stats detail on|off`. Counts survive `off`, like memcached's.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// A get/gets/gat/gats of `key` (memcached counts each key).
    #[inline]
    pub fn record_get(&self, key: &[u8], hit: bool) {
        if self.enabled() {
            self.record(key, |c| {
                c.gets.fetch_add(1, Ordering::Relaxed);
                if hit {
                    c.hits.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    }

    /// A set/add/replace/append/prepend/cas, whatever its outcome.
    #[inline]
    pub fn record_set(&self, key: &[u8]) {
        if self.enabled() {
            self.record(key, |c| {
                c.sets.fetch_add(1, Ordering::Relaxed);
            });
        }
    }

    /// A delete, hit or miss.
    #[inline]
    pub fn record_delete(&self, key: &[u8]) {
        if self.enabled() {
            self.record(key, |c| {
                c.deletes.fetch_add(1, Ordering::Relaxed);
            });
        }
    }

    #[inline(never)]
    fn record(&self, key: &[u8], bump: impl FnOnce(&Counts)) {
        // A key without the delimiter has no prefix and is not counted.
        let Some(end) = memchr::memchr(DELIMITER, key) else {
            return;
        };
        let prefix = key.get(..end).unwrap_or_default();
        if let Some(counts) = self.map.load().get(prefix) {
            bump(counts);
            return;
        }
        if let Some(counts) = self.insert(prefix) {
            bump(&counts);
        }
    }

    fn insert(&self, prefix: &[u8]) -> Option<Arc<Counts>> {
        if self.full.load(Ordering::Relaxed) {
            return None;
        }
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.map.load_full();
        if let Some(counts) = current.get(prefix) {
            return Some(counts.clone());
        }
        if current.len() >= MAX_PREFIXES {
            self.full.store(true, Ordering::Relaxed);
            tracing::warn!(
                cap = MAX_PREFIXES,
                "stats detail: prefix cap reached, new prefixes are not counted until `stats reset`"
            );
            return None;
        }
        let counts = Arc::new(Counts::default());
        let mut next: Map = (*current).clone();
        next.insert(prefix.into(), counts.clone());
        self.map.store(Arc::new(next));
        Some(counts)
    }

    /// `stats reset`: forget every prefix (memcached clears them too).
    pub fn clear(&self) {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.map.store(Arc::new(Map::new()));
        self.full.store(false, Ordering::Relaxed);
    }

    /// `stats detail dump`: memcached's lines, then `END`. memcached lists
    /// prefixes in its hash-table order; here they are sorted.
    pub fn dump(&self, out: &mut BytesMut) {
        let map = self.map.load();
        let mut entries: Vec<(&[u8], &Counts)> =
            map.iter().map(|(p, c)| (&p[..], c.as_ref())).collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut line = String::new();
        for (prefix, counts) in entries {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(prefix);
            line.clear();
            let _ = write!(
                line,
                " get {} hit {} set {} del {}\r\n",
                get(&counts.gets),
                get(&counts.hits),
                get(&counts.sets),
                get(&counts.deletes)
            );
            out.extend_from_slice(line.as_bytes());
        }
        out.extend_from_slice(b"END\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(stats: &PrefixStats) -> String {
        let mut out = BytesMut::new();
        stats.dump(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn counts_only_while_enabled_and_keeps_counts_when_off() {
        let stats = PrefixStats::default();
        stats.record_get(b"a:1", true);
        assert_eq!(dump(&stats), "END\r\n");
        stats.set_enabled(true);
        stats.record_get(b"a:1", true);
        stats.record_get(b"a:2", false);
        stats.record_set(b"b:x:y");
        stats.record_delete(b"a:3");
        stats.record_set(b":x");
        stats.record_set(b"nodelimiter");
        stats.set_enabled(false);
        stats.record_set(b"a:1");
        assert_eq!(
            dump(&stats),
            "PREFIX  get 0 hit 0 set 1 del 0\r\n\
             PREFIX a get 2 hit 1 set 0 del 1\r\n\
             PREFIX b get 0 hit 0 set 1 del 0\r\n\
             END\r\n"
        );
        stats.clear();
        assert_eq!(dump(&stats), "END\r\n");
    }

    #[test]
    fn new_prefixes_past_the_cap_are_not_counted() {
        let stats = PrefixStats::default();
        stats.set_enabled(true);
        for i in 0..MAX_PREFIXES + 10 {
            stats.record_set(format!("p{i}:k").as_bytes());
        }
        stats.record_set(b"p0:k");
        let text = dump(&stats);
        assert_eq!(text.lines().count(), MAX_PREFIXES + 1);
        assert!(text.contains("PREFIX p0 get 0 hit 0 set 2 del 0\r\n"));
        assert!(!text.contains(&format!("PREFIX p{} ", MAX_PREFIXES)));
        stats.clear();
        stats.record_set(b"new:k");
        assert_eq!(
            dump(&stats),
            "PREFIX new get 0 hit 0 set 1 del 0\r\nEND\r\n"
        );
    }
}

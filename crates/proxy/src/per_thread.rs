//! Counters sharded by worker thread: what a request counts without writing
//! a cache line that another core writes too.
//!
//! A process-wide `AtomicU64` bumped by every request is one cache line that
//! every worker thread takes exclusive in turn: with `server.threads` = N,
//! each bump may have to fetch the line from another core (a cache miss of
//! ~100 ns across sockets, worse as N grows), and the `metrics` recorder's
//! counters cost two such writes (value and generation). Counted by reading
//! the request path (`docs/multicore.md`): before this, a plain text `get`
//! hit made 8 such writes to 6 process-wide counters (`cmd_get`,
//! `get_hits`, `bytes_read`, `bytes_written`, and two for each of
//! `memshift_requests_total` and `memshift_get_hits_total`), a `set` 5, a
//! RESP `GET` 4.
//!
//! Here each thread adds to its own slot (one of [`SLOTS`], assigned
//! round-robin on the thread's first count, 128-byte aligned so that no two
//! slots share a line, prefetcher pairs included); a read sums the slots.
//! Reads are rare (`stats`, a scrape) and may see a count a moment old,
//! as with any relaxed counter.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Slots per counter. Threads past this many share slots (round-robin),
/// which only brings back some of the sharing; 16 covers the usual
/// `server.threads` at 2 KiB per single counter.
pub const SLOTS: usize = 16;

thread_local! {
    /// This thread's slot, assigned round-robin on first use.
    static SLOT: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS
    };
}

/// The calling thread's slot, in `0..SLOTS`.
#[inline]
pub fn slot() -> usize {
    SLOT.with(|s| *s)
}

/// One slot of `N` counters, alone on its cache lines.
#[repr(align(128))]
struct Line<const N: usize>([AtomicU64; N]);

/// `N` counters (a family's series, by index), sharded by thread.
pub struct PerThreadCounters<const N: usize> {
    lines: Box<[Line<N>]>,
}

impl<const N: usize> Default for PerThreadCounters<N> {
    fn default() -> Self {
        let lines = (0..SLOTS)
            .map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect();
        PerThreadCounters { lines }
    }
}

impl<const N: usize> std::fmt::Debug for PerThreadCounters<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let totals: Vec<u64> = (0..N).map(|i| self.get_at(i)).collect();
        f.debug_tuple("PerThreadCounters").field(&totals).finish()
    }
}

impl<const N: usize> PerThreadCounters<N> {
    /// Add `n` to counter `i` (an index past `N` is ignored).
    #[inline]
    pub fn add_at(&self, i: usize, n: u64) {
        let line = &self.lines[slot() % self.lines.len()];
        if let Some(c) = line.0.get(i) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counter `i`'s total (0 past `N`).
    pub fn get_at(&self, i: usize) -> u64 {
        self.lines
            .iter()
            .filter_map(|line| line.0.get(i))
            .fold(0u64, |sum, c| sum.wrapping_add(c.load(Ordering::Relaxed)))
    }

    /// Every counter back to 0 (a count added meanwhile may survive).
    pub fn reset(&self) {
        for c in self.lines.iter().flat_map(|line| line.0.iter()) {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// One counter, sharded by thread.
#[derive(Debug, Default)]
pub struct PerThreadCounter(PerThreadCounters<1>);

impl PerThreadCounter {
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.add_at(0, n);
    }

    pub fn get(&self) -> u64 {
        self.0.get_at(0)
    }

    pub fn reset(&self) {
        self.0.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_from_many_threads_sum_up() {
        let one = Arc::new(PerThreadCounter::default());
        let many = Arc::new(PerThreadCounters::<3>::default());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (one, many) = (one.clone(), many.clone());
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        one.add(1);
                        many.add_at(1, t + 1);
                    }
                    many.add_at(3, 1); // past N: ignored
                    slot()
                })
            })
            .collect();
        let slots: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(one.get(), 40_000);
        assert_eq!(many.get_at(0), 0);
        assert_eq!(many.get_at(1), 10_000 * (1 + 2 + 3 + 4));
        assert_eq!(many.get_at(3), 0);
        // Round-robin: four fresh threads never all share one slot.
        assert!(slots.iter().any(|s| *s != slots[0]), "{slots:?}");
        one.reset();
        many.reset();
        assert_eq!((one.get(), many.get_at(1)), (0, 0));
    }

    #[test]
    fn slots_are_cache_line_apart() {
        assert_eq!(std::mem::align_of::<Line<1>>(), 128);
        assert_eq!(std::mem::size_of::<Line<17>>(), 256);
    }
}

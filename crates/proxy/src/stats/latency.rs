//! RESP `INFO latencystats`: each command's p50, p99 and p99.9 latency,
//! as Redis 7.0 prints them (`latency_percentiles_usec_<name>`).
//!
//! A histogram per command row and per thread slot (as
//! [`crate::per_thread`] shards its counters: a request writes no line
//! another core writes), allocated when the row is first timed in that
//! slot: most rows are never used. Buckets are log-linear over
//! nanoseconds, 16 per power of two (a value is within 1/16 of its
//! bucket's top, the figure printed; Redis' histograms keep 2 significant
//! digits).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::per_thread::{slot, SLOTS};

/// Sub-buckets per power of two: 2^SUB_BITS.
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Up to 2^42 ns (≈ 73 minutes); longer counts in the last bucket.
const MAX_EXP: u32 = 42;
const BUCKETS: usize = (MAX_EXP - SUB_BITS + 2) as usize * SUB;

type Histogram = Box<[AtomicU32]>;

/// The percentiles Redis prints by default (`latency-tracking-info-percentiles`).
pub const PERCENTILES: [(&str, f64); 3] = [("p50", 50.0), ("p99", 99.0), ("p99.9", 99.9)];

pub struct Latencies {
    /// `[slot][row]`
    slots: Box<[Box<[OnceLock<Histogram>]>]>,
}

impl std::fmt::Debug for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latencies").finish_non_exhaustive()
    }
}

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies::new(super::commands::MAX_ROWS)
    }
}

impl Latencies {
    pub fn new(rows: usize) -> Latencies {
        let slots = (0..SLOTS)
            .map(|_| (0..rows).map(|_| OnceLock::new()).collect())
            .collect();
        Latencies { slots }
    }

    /// One call of `row` took `nanos` (a row out of range is ignored).
    #[inline]
    pub fn record(&self, row: usize, nanos: u64) {
        let Some(cell) = self.slots[slot() % self.slots.len()].get(row) else {
            return;
        };
        let histogram = cell.get_or_init(|| (0..BUCKETS).map(|_| AtomicU32::new(0)).collect());
        if let Some(b) = histogram.get(bucket(nanos)) {
            b.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every histogram back to empty (their memory stays).
    pub fn reset(&self) {
        let cells = self.slots.iter().flat_map(|rows| rows.iter());
        for b in cells.filter_map(OnceLock::get).flat_map(|h| h.iter()) {
            b.store(0, Ordering::Relaxed);
        }
    }

    /// `row`'s percentiles in µs (each a bucket's top), `None` when it was
    /// never timed.
    pub fn percentiles(&self, row: usize) -> Option<[f64; 3]> {
        let mut counts = vec![0u64; BUCKETS];
        let mut total = 0u64;
        for cell in self.slots.iter().filter_map(|rows| rows.get(row)?.get()) {
            for (sum, b) in counts.iter_mut().zip(cell.iter()) {
                let n = u64::from(b.load(Ordering::Relaxed));
                *sum += n;
                total += n;
            }
        }
        if total == 0 {
            return None;
        }
        Some(PERCENTILES.map(|(_, p)| {
            // The bucket of the value at rank p% of total, rounded (as
            // HdrHistogram ranks it: 99.9 % of 1,000 is the 999th).
            let rank = ((p / 100.0 * total as f64 + 0.5) as u64).max(1);
            let mut seen = 0;
            let index = counts
                .iter()
                .position(|&n| {
                    seen += n;
                    seen >= rank
                })
                .unwrap_or(BUCKETS - 1);
            top(index) as f64 / 1000.0
        }))
    }
}

/// The bucket of a value: exact below 2·SUB, then SUB per power of two.
fn bucket(nanos: u64) -> usize {
    let v = nanos.max(1);
    let exp = 63 - v.leading_zeros();
    if exp <= SUB_BITS {
        return v as usize;
    }
    let exp = exp.min(MAX_EXP);
    let shift = exp - SUB_BITS;
    let sub = ((v >> shift) as usize) & (SUB - 1);
    let index = (exp - SUB_BITS + 1) as usize * SUB + sub;
    index.min(BUCKETS - 1)
}

/// The largest value a bucket holds.
fn top(index: usize) -> u64 {
    if index < 2 * SUB {
        return index as u64;
    }
    let exp = (index / SUB) as u32 + SUB_BITS - 1;
    let sub = (index % SUB) as u64;
    let shift = exp - SUB_BITS;
    (((SUB as u64) | sub) << shift) + (1 << shift) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_hold_their_values_within_a_sixteenth() {
        let mut last = 0;
        for v in (1..100_000u64).chain([1 << 30, (1 << 30) + 12_345, 1 << 41]) {
            let b = bucket(v);
            assert!(b >= last || v > 100_000, "{v}");
            last = b;
            let t = top(b);
            assert!(t >= v, "{v}: top {t}");
            assert!(t - v <= v / 16, "{v}: top {t}");
            if b > 0 {
                assert!(top(b - 1) < v, "{v}: the bucket below holds it");
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket(0), 1);
    }

    #[test]
    fn percentiles_come_from_every_slot() {
        let l = Latencies::new(4);
        assert_eq!(l.percentiles(2), None);
        // 1,000 calls: 990 at 1 µs, 9 at 100 µs, 1 at 10 ms.
        for _ in 0..990 {
            l.record(2, 1_000);
        }
        let l = std::sync::Arc::new(l);
        let other = std::thread::spawn({
            let l = l.clone();
            move || {
                for _ in 0..9 {
                    l.record(2, 100_000);
                }
            }
        });
        other.join().unwrap();
        l.record(2, 10_000_000);
        l.record(9, 1);
        let [p50, p99, p999] = l.percentiles(2).unwrap();
        assert!((1.0..1.07).contains(&p50), "{p50}");
        assert!((1.0..1.07).contains(&p99), "{p99}");
        assert!((100.0..106.3).contains(&p999), "{p999}");
        assert_eq!(l.percentiles(3), None);
        l.reset();
        assert_eq!(l.percentiles(2), None);
    }
}

//! Canary rollback detection: is Redis missing noticeably more than
//! memcached?
//!
//! # Design
//!
//! Reads are counted into a ring of one-second buckets covering the last
//! `rollback_window_s` seconds. Each bucket holds the second it counts for
//! (`epoch`) and four counters (hits and misses per backend), all atomics:
//! recording is one load and one `fetch_add` on the hot path, shared by every
//! session without a lock and without allocating.
//!
//! A bucket still holding an older second is recycled by whichever recorder
//! gets there first: it claims the bucket by swapping the epoch for
//! `second | CLAIMED`, zeroes the counters, then publishes `second`. Recorders
//! of the same second that meet the claimed bucket wait for it (spinning,
//! then yielding: once a second, a few stores long unless the claimer was
//! preempted, when dropping would lose every sample meanwhile, as a loaded
//! 2-core machine showed); a sample for another second is dropped (a window
//! old: this is a statistic). Readers sum the
//! buckets whose epoch lies in the window, so a bucket nobody wrote to for a
//! while simply falls out of it.
//!
//! Time is whole seconds from an injectable clock: every method has an `_at`
//! variant taking `now_s`; the plain ones use seconds since the detector was
//! created.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::Backend;

/// Set in a bucket's epoch while a recorder is zeroing it.
const CLAIMED: u64 = 1 << 63;
/// Epoch of a bucket that never counted anything.
const EMPTY: u64 = !CLAIMED;

/// The thresholds (`[migration]` keys of the same names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RollbackSettings {
    pub window_s: u64,
    pub min_samples: u64,
    pub miss_delta_pp: f64,
}

/// Counters of one second, for both backends.
#[derive(Debug)]
struct Bucket {
    epoch: AtomicU64,
    /// redis hits, redis misses, memcached hits, memcached misses.
    counts: [AtomicU64; 4],
}

/// Spins, then yields, while another recorder resets a bucket for the same
/// second: the reset is a few stores, but a recorder preempted in the
/// middle of it would otherwise cost every sample recorded meanwhile.
const CLAIM_WAIT_TURNS: u32 = 10_000;

impl Bucket {
    fn new() -> Bucket {
        Bucket {
            epoch: AtomicU64::new(EMPTY),
            counts: Default::default(),
        }
    }

    /// Counts the sample once the bucket counts `now_s` (another recorder
    /// is resetting it for that second); drops it if the bucket went to
    /// another second, or after `CLAIM_WAIT_TURNS`.
    fn count_after_claim(&self, now_s: u64, counter: usize) {
        for turn in 0..CLAIM_WAIT_TURNS {
            let epoch = self.epoch.load(Ordering::Acquire);
            if epoch == now_s {
                self.counts[counter].fetch_add(1, Ordering::Relaxed);
                return;
            }
            if epoch != now_s | CLAIMED {
                return;
            }
            if turn < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Hits and misses of one backend in the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCounts {
    pub hits: u64,
    pub misses: u64,
}

impl ReadCounts {
    pub fn total(&self) -> u64 {
        self.hits + self.misses
    }

    /// Miss rate in percent (0 with no reads).
    pub fn miss_pct(&self) -> f64 {
        match self.total() {
            0 => 0.0,
            n => self.misses as f64 * 100.0 / n as f64,
        }
    }
}

/// What the window holds, with the verdict: for the log line that explains a
/// rollback.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RollbackSnapshot {
    pub redis: ReadCounts,
    pub memcached: ReadCounts,
    /// Redis' miss rate minus memcached's, in percentage points.
    pub delta_pp: f64,
    /// Both backends have at least `min_samples` reads in the window.
    pub enough_samples: bool,
    pub roll_back: bool,
}

/// Sliding-window miss-rate comparison. Share it as `Arc<RollbackDetector>`.
#[derive(Debug)]
pub struct RollbackDetector {
    settings: RollbackSettings,
    buckets: Box<[Bucket]>,
    base: Instant,
}

impl RollbackDetector {
    pub fn new(settings: RollbackSettings) -> RollbackDetector {
        // A bucket for second `s` is reused for `s + window`, by which time
        // `s` has left the window.
        let n = settings.window_s.clamp(1, 24 * 3600) as usize;
        RollbackDetector {
            settings,
            buckets: (0..n).map(|_| Bucket::new()).collect(),
            base: Instant::now(),
        }
    }

    pub fn settings(&self) -> RollbackSettings {
        self.settings
    }

    fn now_s(&self) -> u64 {
        self.base.elapsed().as_secs()
    }

    /// Count one read answered by `backend`.
    #[inline]
    pub fn record(&self, backend: Backend, hit: bool) {
        self.record_at(self.now_s(), backend, hit)
    }

    /// [`RollbackDetector::record`] with the clock passed in (seconds, any
    /// origin, monotonic).
    pub fn record_at(&self, now_s: u64, backend: Backend, hit: bool) {
        let now_s = now_s & !CLAIMED;
        let idx = (now_s % self.buckets.len() as u64) as usize;
        let counter = match (backend, hit) {
            (Backend::Redis, true) => 0,
            (Backend::Redis, false) => 1,
            (Backend::Memcached, true) => 2,
            (Backend::Memcached, false) => 3,
        };
        let bucket = &self.buckets[idx];
        let epoch = bucket.epoch.load(Ordering::Acquire);
        if epoch == now_s {
            bucket.counts[counter].fetch_add(1, Ordering::Relaxed);
            return;
        }
        if epoch == now_s | CLAIMED {
            return bucket.count_after_claim(now_s, counter);
        }
        // Being recycled for another second, or already counting a newer
        // one (this sample is a window old): drop it.
        if epoch & CLAIMED != 0 || (epoch != EMPTY && epoch > now_s) {
            return;
        }
        if bucket
            .epoch
            .compare_exchange(epoch, now_s | CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // Another recorder recycled it first: count once it is ours.
            return bucket.count_after_claim(now_s, counter);
        }
        for (i, c) in bucket.counts.iter().enumerate() {
            c.store(u64::from(i == counter), Ordering::Relaxed);
        }
        bucket.epoch.store(now_s, Ordering::Release);
    }

    /// Reads per backend over the window ending at `now_s`.
    pub fn counts_at(&self, now_s: u64) -> (ReadCounts, ReadCounts) {
        let window = self.buckets.len() as u64;
        let oldest = now_s.saturating_sub(window - 1);
        let mut sums = [0u64; 4];
        for bucket in self.buckets.iter() {
            let epoch = bucket.epoch.load(Ordering::Acquire);
            if epoch == EMPTY || epoch & CLAIMED != 0 || epoch < oldest || epoch > now_s {
                continue;
            }
            for (sum, c) in sums.iter_mut().zip(&bucket.counts) {
                *sum += c.load(Ordering::Relaxed);
            }
        }
        (
            ReadCounts {
                hits: sums[0],
                misses: sums[1],
            },
            ReadCounts {
                hits: sums[2],
                misses: sums[3],
            },
        )
    }

    pub fn snapshot(&self) -> RollbackSnapshot {
        self.snapshot_at(self.now_s())
    }

    pub fn snapshot_at(&self, now_s: u64) -> RollbackSnapshot {
        let (redis, memcached) = self.counts_at(now_s);
        let min = self.settings.min_samples;
        let enough_samples = redis.total() >= min && memcached.total() >= min;
        let delta_pp = redis.miss_pct() - memcached.miss_pct();
        RollbackSnapshot {
            redis,
            memcached,
            delta_pp,
            enough_samples,
            roll_back: enough_samples && delta_pp > self.settings.miss_delta_pp,
        }
    }

    /// True when both backends have at least `min_samples` reads in the window
    /// and Redis' miss rate exceeds memcached's by more than `miss_delta_pp`
    /// percentage points.
    pub fn should_roll_back(&self) -> bool {
        self.snapshot().roll_back
    }

    pub fn should_roll_back_at(&self, now_s: u64) -> bool {
        self.snapshot_at(now_s).roll_back
    }

    /// Forget everything (after a rollback, or when the canary restarts).
    pub fn clear(&self) {
        for bucket in self.buckets.iter() {
            bucket.epoch.store(EMPTY, Ordering::Release);
            for c in &bucket.counts {
                c.store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detector(window_s: u64, min_samples: u64, miss_delta_pp: f64) -> RollbackDetector {
        RollbackDetector::new(RollbackSettings {
            window_s,
            min_samples,
            miss_delta_pp,
        })
    }

    fn record_n(d: &RollbackDetector, now: u64, backend: Backend, hits: u64, misses: u64) {
        for _ in 0..hits {
            d.record_at(now, backend, true);
        }
        for _ in 0..misses {
            d.record_at(now, backend, false);
        }
    }

    #[test]
    fn threshold_is_strictly_more_than_delta() {
        let d = detector(60, 100, 5.0);
        record_n(&d, 10, Backend::Memcached, 900, 100); // 10% misses
        record_n(&d, 10, Backend::Redis, 850, 150); // 15%: exactly +5pp
        let snap = d.snapshot_at(10);
        assert!(snap.enough_samples);
        assert!((snap.delta_pp - 5.0).abs() < 1e-9);
        assert!(!snap.roll_back);
        record_n(&d, 10, Backend::Redis, 0, 10); // 160/1010 = 15.8%
        assert!(d.should_roll_back_at(10));
    }

    #[test]
    fn redis_better_never_rolls_back() {
        let d = detector(60, 10, 1.0);
        record_n(&d, 0, Backend::Memcached, 0, 100);
        record_n(&d, 0, Backend::Redis, 100, 0);
        let snap = d.snapshot_at(0);
        assert!(snap.delta_pp < 0.0);
        assert!(!snap.roll_back);
    }

    #[test]
    fn min_samples_gate_on_each_backend() {
        let d = detector(60, 1000, 5.0);
        record_n(&d, 5, Backend::Redis, 0, 5000); // 100% misses
        record_n(&d, 5, Backend::Memcached, 999, 0);
        assert!(!d.should_roll_back_at(5), "memcached has 999 < 1000 reads");
        record_n(&d, 5, Backend::Memcached, 1, 0);
        assert!(d.should_roll_back_at(5));

        let d = detector(60, 1000, 5.0);
        record_n(&d, 5, Backend::Redis, 0, 999);
        record_n(&d, 5, Backend::Memcached, 5000, 0);
        assert!(!d.should_roll_back_at(5), "redis has 999 < 1000 reads");
        record_n(&d, 5, Backend::Redis, 0, 1);
        assert!(d.should_roll_back_at(5));
    }

    #[test]
    fn window_slides() {
        let d = detector(10, 100, 5.0);
        // Bad Redis reads at t=100..=104.
        for t in 100..105 {
            record_n(&d, t, Backend::Redis, 0, 40);
            record_n(&d, t, Backend::Memcached, 40, 0);
        }
        assert!(d.should_roll_back_at(104));
        // The window is (now-10, now]: t=100 is still in it at 109...
        let (redis, _) = d.counts_at(109);
        assert_eq!(redis.misses, 200);
        // ...and gone at 110.
        let (redis, mc) = d.counts_at(110);
        assert_eq!((redis.misses, mc.hits), (160, 160));
        assert!(d.should_roll_back_at(110));
        // By 114 everything but t=104 has slid out: under min_samples.
        let snap = d.snapshot_at(113);
        assert_eq!(snap.redis.total(), 40);
        assert!(!snap.roll_back);
        // Good Redis reads later replace the bad ones in reused buckets.
        for t in 200..210 {
            record_n(&d, t, Backend::Redis, 40, 0);
            record_n(&d, t, Backend::Memcached, 40, 0);
        }
        let snap = d.snapshot_at(209);
        assert_eq!(
            snap.redis,
            ReadCounts {
                hits: 400,
                misses: 0
            }
        );
        assert!(!snap.roll_back);
    }

    #[test]
    fn reused_bucket_starts_from_zero() {
        let d = detector(3, 1, 5.0);
        record_n(&d, 0, Backend::Redis, 7, 7);
        // Second 3 maps onto second 0's bucket.
        record_n(&d, 3, Backend::Redis, 1, 0);
        let (redis, _) = d.counts_at(3);
        assert_eq!(redis, ReadCounts { hits: 1, misses: 0 });
        // A late sample for second 0 does not pollute second 3.
        d.record_at(0, Backend::Redis, false);
        assert_eq!(d.counts_at(3).0, ReadCounts { hits: 1, misses: 0 });
    }

    #[test]
    fn clear_forgets() {
        let d = detector(60, 1, 1.0);
        record_n(&d, 1, Backend::Redis, 0, 10);
        record_n(&d, 1, Backend::Memcached, 10, 0);
        assert!(d.should_roll_back_at(1));
        d.clear();
        assert!(!d.should_roll_back_at(1));
        assert_eq!(
            d.counts_at(1),
            (ReadCounts::default(), ReadCounts::default())
        );
    }

    #[test]
    fn concurrent_recording_loses_nothing_within_a_second() {
        let d = std::sync::Arc::new(detector(60, 1, 5.0));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let d = d.clone();
                std::thread::spawn(move || {
                    let backend = if i % 2 == 0 {
                        Backend::Redis
                    } else {
                        Backend::Memcached
                    };
                    record_n(&d, 7, backend, 10_000, 10_000);
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().is_ok());
        }
        let (redis, mc) = d.counts_at(7);
        // Samples racing the bucket's reset wait for it: none is lost.
        assert_eq!(redis.total(), 40_000, "{redis:?}");
        assert_eq!(mc.total(), 40_000, "{mc:?}");
    }

    #[test]
    fn real_clock_variant() {
        let d = detector(60, 1, 5.0);
        d.record(Backend::Redis, false);
        d.record(Backend::Memcached, true);
        assert!(d.should_roll_back());
    }
}

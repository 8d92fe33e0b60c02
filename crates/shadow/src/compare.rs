//! Compare sampling: is what the shadow holds what the primary answered?
//!
//! * [`compare`] classifies one key's pair of get results.
//! * [`CompareSampler`] picks which reads get compared.
//! * [`MismatchLogger`] names mismatched keys in the log without flooding it.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Result of comparing one key (label of `memshift_compare_total{result}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareResult {
    /// Same flags and bytes, or a miss on both sides.
    Match,
    /// Both hit but flags or data differ (flags are part of the value: a
    /// client deserializes by them).
    ValueMismatch,
    /// The primary missed, the shadow hit.
    PrimaryMiss,
    /// The primary hit, the shadow missed.
    ShadowMiss,
}

impl CompareResult {
    pub const ALL: [CompareResult; 4] = [
        CompareResult::Match,
        CompareResult::ValueMismatch,
        CompareResult::PrimaryMiss,
        CompareResult::ShadowMiss,
    ];

    pub fn label(self) -> &'static str {
        match self {
            CompareResult::Match => "match",
            CompareResult::ValueMismatch => "value_mismatch",
            CompareResult::PrimaryMiss => "primary_miss",
            CompareResult::ShadowMiss => "shadow_miss",
        }
    }

    pub fn is_match(self) -> bool {
        self == CompareResult::Match
    }
}

/// Classify the primary's and the shadow's answer for one key:
/// `Some((flags, data))` on a hit, `None` on a miss.
pub fn compare(primary: Option<(u32, &[u8])>, shadow: Option<(u32, &[u8])>) -> CompareResult {
    match (primary, shadow) {
        (None, None) => CompareResult::Match,
        (None, Some(_)) => CompareResult::PrimaryMiss,
        (Some(_), None) => CompareResult::ShadowMiss,
        (Some((pf, pd)), Some((sf, sd))) => {
            if pf == sf && pd == sd {
                CompareResult::Match
            } else {
                CompareResult::ValueMismatch
            }
        }
    }
}

/// Decides whether a read is compared, for `compare_percent` of reads.
///
/// The choice is **random per read**, not per key: every key, hot or cold,
/// gets compared now and then, and a mismatching hot key is not compared on
/// every single read. Randomness comes from a thread-local SplitMix64
/// generator, so [`CompareSampler::sample`] takes no lock, touches no shared
/// cache line and allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompareSampler {
    /// A read is compared when a uniform 53-bit draw is below this.
    threshold: u64,
}

const DRAW_BITS: u32 = 53;

impl CompareSampler {
    /// `compare_percent` is clamped to `0..=100`; NaN counts as 0.
    pub fn new(compare_percent: f64) -> CompareSampler {
        let share = if compare_percent.is_nan() {
            0.0
        } else {
            compare_percent.clamp(0.0, 100.0) / 100.0
        };
        CompareSampler {
            threshold: (share * (1u64 << DRAW_BITS) as f64).round() as u64,
        }
    }

    /// True if this read should be compared.
    #[inline]
    pub fn sample(&self) -> bool {
        // Skip the generator entirely when comparing is off (the default).
        self.threshold != 0 && self.sample_with(next_random())
    }

    /// Same decision for a caller-supplied uniform random `u64` (tests, or a
    /// caller with its own generator).
    #[inline]
    pub fn sample_with(&self, random: u64) -> bool {
        (random >> (64 - DRAW_BITS)) < self.threshold
    }

    pub fn is_enabled(&self) -> bool {
        self.threshold != 0
    }
}

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
}

/// A per-thread seed: the address of the thread-local differs per thread, and
/// the clock differs per process.
fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let local = 0u8;
    nanos ^ (&local as *const u8 as u64).rotate_left(32)
}

fn next_random() -> u64 {
    RNG.with(|state| {
        let s = state.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        state.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

/// What [`MismatchLogger`] decided to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MismatchLine {
    /// The mismatched key, lossily decoded and cut to 250 bytes.
    pub key: String,
    pub result: CompareResult,
    /// Mismatches not logged since the previous line.
    pub suppressed: u64,
}

/// Logs at most one mismatch line per interval (one second by default),
/// naming one mismatched key and counting the ones it kept quiet about.
///
/// Shared by every session: two atomics, no lock.
#[derive(Debug)]
pub struct MismatchLogger {
    base: Instant,
    interval_ms: u64,
    /// Milliseconds since `base` from which the next line may be logged.
    next_allowed_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl Default for MismatchLogger {
    fn default() -> Self {
        MismatchLogger::new(Duration::from_secs(1))
    }
}

impl MismatchLogger {
    pub fn new(interval: Duration) -> MismatchLogger {
        MismatchLogger {
            base: Instant::now(),
            interval_ms: interval.as_millis().max(1) as u64,
            next_allowed_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Record a comparison and emit a `tracing` warning if one is due.
    /// Matches are ignored.
    pub fn record(&self, key: &[u8], result: CompareResult) {
        if let Some(line) = self.record_at(Instant::now(), key, result) {
            tracing::warn!(
                key = %line.key,
                result = line.result.label(),
                suppressed = line.suppressed,
                "shadow compare mismatch"
            );
        }
    }

    /// The pure part of [`MismatchLogger::record`], with the clock passed in:
    /// returns the line to log, if one is due.
    pub fn record_at(
        &self,
        now: Instant,
        key: &[u8],
        result: CompareResult,
    ) -> Option<MismatchLine> {
        if result.is_match() {
            return None;
        }
        let now_ms = now.saturating_duration_since(self.base).as_millis() as u64;
        let next = self.next_allowed_ms.load(Ordering::Relaxed);
        let won = now_ms >= next
            && self
                .next_allowed_ms
                .compare_exchange(
                    next,
                    now_ms.saturating_add(self.interval_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok();
        if !won {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let shown = &key[..key.len().min(250)];
        Some(MismatchLine {
            key: String::from_utf8_lossy(shown).into_owned(),
            result,
            suppressed: self.suppressed.swap(0, Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert_eq!(compare(None, None), CompareResult::Match);
        assert_eq!(
            compare(Some((1, b"a")), Some((1, b"a"))),
            CompareResult::Match
        );
        assert_eq!(
            compare(Some((1, b"a")), Some((1, b"b"))),
            CompareResult::ValueMismatch
        );
        assert_eq!(
            compare(Some((1, b"a")), Some((2, b"a"))),
            CompareResult::ValueMismatch
        );
        assert_eq!(compare(None, Some((0, b""))), CompareResult::PrimaryMiss);
        assert_eq!(compare(Some((0, b"")), None), CompareResult::ShadowMiss);
        assert_eq!(
            compare(Some((u32::MAX, b"")), Some((u32::MAX, b""))),
            CompareResult::Match
        );
        let labels: Vec<_> = CompareResult::ALL.iter().map(|r| r.label()).collect();
        assert_eq!(
            labels,
            ["match", "value_mismatch", "primary_miss", "shadow_miss"]
        );
    }

    #[test]
    fn sampler_edges() {
        let off = CompareSampler::new(0.0);
        let all = CompareSampler::new(100.0);
        assert!(!off.is_enabled());
        for _ in 0..1000 {
            assert!(!off.sample());
            assert!(all.sample());
        }
        assert!(all.sample_with(u64::MAX));
        assert!(!CompareSampler::new(f64::NAN).is_enabled());
        assert!(!CompareSampler::new(-1.0).is_enabled());
        let half = CompareSampler::new(50.0);
        assert!(half.sample_with(0));
        assert!(half.sample_with(u64::MAX / 2 - 4096));
        assert!(!half.sample_with(u64::MAX / 2 + 4096));
    }

    #[test]
    fn sampler_rate() {
        let s = CompareSampler::new(10.0);
        let n = (0..100_000).filter(|_| s.sample()).count();
        assert!((9_000..=11_000).contains(&n), "{n} of 100000 sampled");
        let s = CompareSampler::new(0.5);
        let n = (0..100_000).filter(|_| s.sample()).count();
        assert!((300..=700).contains(&n), "{n} of 100000 sampled at 0.5%");
    }

    #[test]
    fn threads_get_different_streams() {
        let a = std::thread::spawn(|| (0..4).map(|_| next_random()).collect::<Vec<_>>());
        let b = std::thread::spawn(|| (0..4).map(|_| next_random()).collect::<Vec<_>>());
        let (a, b) = (a.join().ok(), b.join().ok());
        assert!(a.is_some() && a != b);
    }

    #[test]
    fn logger_rate_limits_and_counts_suppressed() {
        let log = MismatchLogger::new(Duration::from_secs(1));
        let t0 = Instant::now() + Duration::from_millis(10);
        let ms = |n: u64| t0 + Duration::from_millis(n);

        assert_eq!(log.record_at(ms(0), b"ok", CompareResult::Match), None);
        let first = log.record_at(ms(0), b"k1", CompareResult::ValueMismatch);
        assert_eq!(
            first,
            Some(MismatchLine {
                key: "k1".into(),
                result: CompareResult::ValueMismatch,
                suppressed: 0
            })
        );
        for i in 0..5 {
            assert_eq!(
                log.record_at(ms(100 + i), b"k2", CompareResult::ShadowMiss),
                None
            );
        }
        // Matches are not counted as suppressed mismatches.
        assert_eq!(log.record_at(ms(500), b"ok", CompareResult::Match), None);
        assert_eq!(
            log.record_at(ms(999), b"k3", CompareResult::ShadowMiss),
            None
        );
        let second = log.record_at(ms(1010), b"k4", CompareResult::PrimaryMiss);
        assert_eq!(
            second,
            Some(MismatchLine {
                key: "k4".into(),
                result: CompareResult::PrimaryMiss,
                suppressed: 6
            })
        );
        assert_eq!(
            log.record_at(ms(1500), b"k5", CompareResult::ShadowMiss),
            None
        );
    }

    #[test]
    fn logger_cuts_long_and_binary_keys() {
        let log = MismatchLogger::new(Duration::from_secs(1));
        let key = vec![0xffu8; 1000];
        let line = log.record_at(Instant::now(), &key, CompareResult::ValueMismatch);
        let line = line.map(|l| l.key.chars().count());
        assert_eq!(line, Some(250));
    }

    #[test]
    fn logger_one_line_per_interval_across_threads() {
        let log = std::sync::Arc::new(MismatchLogger::new(Duration::from_secs(3600)));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let log = log.clone();
                std::thread::spawn(move || {
                    let now = Instant::now();
                    // The suppressed counts the lines carried.
                    (0..1000)
                        .filter_map(|_| log.record_at(now, b"k", CompareResult::ShadowMiss))
                        .map(|line| (1, line.suppressed))
                        .fold((0, 0), |(n, s), (m, t)| (n + m, s + t))
                })
            })
            .collect();
        let (lines, reported) = handles
            .into_iter()
            .map(|h| h.join().unwrap_or((99, 0)))
            .fold((0, 0), |(n, s), (m, t)| (n + m, s + t));
        assert_eq!(lines, 1);
        // Every other mismatch is counted once: in the line (another thread
        // may count one between the winner's claim and its swap of the
        // count) or still pending for the next line.
        assert_eq!(reported + log.suppressed.load(Ordering::Relaxed), 3999);
    }
}

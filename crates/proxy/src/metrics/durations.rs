//! `memshift_request_duration_seconds`, kept outside the recorder.

use std::sync::atomic::{AtomicU64, Ordering};

use super::families::{help, COMMANDS, DURATION_BUCKETS, REQUEST_DURATION};
use crate::per_thread::{slot, SLOTS};

/// Request-duration histograms as plain atomic bucket counters, sharded by
/// worker thread. The recorder's histograms queue every sample until an
/// upkeep folds them into buckets: measured at ~6% of the proxy's CPU per
/// request, and memory that grows between upkeeps. These cost one bucket
/// search and two relaxed adds on a cache line no other thread writes
/// (one shard per [`crate::per_thread`] slot).
pub(super) struct Durations {
    shards: Box<[DurationShard]>,
    pub(super) enabled: bool,
}

#[repr(align(128))]
struct DurationShard {
    /// `[command][bucket]`; the last bucket is `+Inf`. Not cumulative.
    buckets: [[AtomicU64; DURATION_BUCKETS.len() + 1]; COMMANDS.len()],
    sum_nanos: [AtomicU64; COMMANDS.len()],
}

impl std::fmt::Debug for Durations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durations")
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl Durations {
    pub(super) fn new() -> Durations {
        let shards = (0..SLOTS)
            .map(|_| DurationShard {
                buckets: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
                sum_nanos: std::array::from_fn(|_| AtomicU64::new(0)),
            })
            .collect();
        Durations {
            shards,
            enabled: true,
        }
    }

    #[inline]
    pub(super) fn record(&self, command: usize, seconds: f64) {
        if !self.enabled || command >= COMMANDS.len() {
            return;
        }
        // First bound not below the value: Prometheus' `le` semantics.
        let bucket = DURATION_BUCKETS.partition_point(|&le| le < seconds);
        let shard = &self.shards[slot() % self.shards.len()];
        shard.buckets[command][bucket].fetch_add(1, Ordering::Relaxed);
        shard.sum_nanos[command].fetch_add((seconds * 1e9) as u64, Ordering::Relaxed);
    }

    /// Append the family in Prometheus text format (cumulative buckets).
    pub(super) fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(out, "# HELP {REQUEST_DURATION} {}", help(REQUEST_DURATION));
        let _ = writeln!(out, "# TYPE {REQUEST_DURATION} histogram");
        for (c, command) in COMMANDS.iter().enumerate() {
            let mut cumulative = 0u64;
            let mut sum_nanos = 0u64;
            for shard in self.shards.iter() {
                sum_nanos = sum_nanos.wrapping_add(shard.sum_nanos[c].load(Ordering::Relaxed));
            }
            for (b, le) in DURATION_BUCKETS
                .iter()
                .map(|le| le.to_string())
                .chain(std::iter::once("+Inf".to_string()))
                .enumerate()
            {
                for shard in self.shards.iter() {
                    cumulative += shard.buckets[c][b].load(Ordering::Relaxed);
                }
                let _ = writeln!(
                    out,
                    "{REQUEST_DURATION}_bucket{{command=\"{command}\",le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "{REQUEST_DURATION}_sum{{command=\"{command}\"}} {}",
                sum_nanos as f64 / 1e9
            );
            let _ = writeln!(
                out,
                "{REQUEST_DURATION}_count{{command=\"{command}\"}} {cumulative}"
            );
        }
    }
}

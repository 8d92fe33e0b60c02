//! `flush_all [delay]` as memcached 1.6.18 keeps it: one flush deadline per
//! server. A later `flush_all` replaces the deadline (so an earlier delayed
//! flush that has not happened yet never does); items stored before the
//! deadline are gone at it, items stored after it stay.
//!
//! memcached's rule (`process_flush_all_command`, `realtime`): a delay ≤ 0
//! flushes now; 1 ..= 30 days is relative, above that a Unix time. The
//! deadline is the clock second before the delay's end, and what is stored
//! during that second is flushed too (memcached's clock ticks in whole
//! seconds: `flush_all 1` flushes now and the rest of this second). A Unix
//! time before the server started flushes nothing and only cancels a
//! pending deadline; one since then but already past flushes now.
//!
//! memshift flushes Redis by `FLUSHDB` on every shard at the start of the
//! deadline's second and again at its end. The deadline lives in the memshift process that received the
//! command (see docs/storage.md, "flush_all"): like memcached's, it is lost
//! on a restart, and each sidecar has its own.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::time::Instant;

/// Largest relative delay (memcached's `REALTIME_MAXDELTA`, 30 days).
const MAX_RELATIVE: i64 = memshift_protocol::memcache::REALTIME_MAXDELTA;

/// memcached counts a Unix time as past from this long before it started
/// (`process_started = time(0) - ITEM_UPDATE_INTERVAL - 2`).
const STARTED_SLACK: u64 = 62;

/// When a `flush_all` takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushAt {
    /// Flush now; no deadline is left pending.
    Now,
    /// No flush, and no deadline left pending (a Unix time before start).
    Cancel,
    /// The deadline's second (Unix time); may be now or already past, then
    /// the flush is done at once as well.
    At(u64),
}

impl FlushAt {
    /// memcached's reading of `flush_all <delay>` at Unix time `now`, for
    /// a server started at Unix time `started`.
    pub fn from_delay(delay: i64, now: u64, started: u64) -> FlushAt {
        match delay {
            d if d <= 0 => FlushAt::Now,
            d if d <= MAX_RELATIVE => FlushAt::At(now.saturating_add(d as u64 - 1)),
            d if (d as u64) <= started.saturating_sub(STARTED_SLACK) => FlushAt::Cancel,
            d => FlushAt::At(d as u64 - 1),
        }
    }
}

/// The proxy's one flush deadline. `flush_all` replaces it; the runner
/// task flushes the shards when it comes.
#[derive(Debug)]
pub struct FlushSchedule {
    deadline: watch::Sender<Option<u64>>,
}

impl Default for FlushSchedule {
    fn default() -> Self {
        FlushSchedule {
            deadline: watch::Sender::new(None),
        }
    }
}

impl FlushSchedule {
    /// Replace the deadline (`None`: no flush pending, as after a
    /// `flush_all` done now).
    pub fn replace(&self, at: Option<u64>) {
        self.deadline.send_replace(at);
    }

    pub fn pending(&self) -> Option<u64> {
        *self.deadline.borrow()
    }

    /// Wait for each deadline in turn and call `flush` when one comes
    /// without having been replaced. Runs until the schedule is dropped.
    pub async fn run<F, Fut>(&self, mut flush: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let mut rx = self.deadline.subscribe();
        loop {
            let at = *rx.borrow_and_update();
            match at {
                None => {
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
                Some(at) => {
                    // The start of the deadline's second, then its end.
                    for (when, last) in [(at, false), (at.saturating_add(1), true)] {
                        tokio::select! {
                            _ = tokio::time::sleep_until(instant_of(when)) => {}
                            changed = rx.changed() => {
                                if changed.is_err() {
                                    return;
                                }
                                break; // replaced: start over
                            }
                        }
                        if *self.deadline.borrow() != Some(at) {
                            break;
                        }
                        if last {
                            // Clear it before flushing: a flush_all arriving
                            // while the shards flush sets a new deadline.
                            self.deadline.send_if_modified(|d| {
                                let same = *d == Some(at);
                                if same {
                                    *d = None;
                                }
                                same
                            });
                        }
                        flush().await;
                    }
                }
            }
        }
    }
}

pub use memshift_protocol::memcache::unix_now;

/// The monotonic instant of Unix time `at` (seconds).
fn instant_of(at: u64) -> Instant {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let target = Duration::from_secs(at);
    Instant::now() + target.saturating_sub(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000;

    #[test]
    fn delays_read_as_memcached_reads_them() {
        let started = NOW - 3600;
        let at = |delay| FlushAt::from_delay(delay, NOW, started);
        assert_eq!(at(0), FlushAt::Now);
        assert_eq!(at(-5), FlushAt::Now);
        // memcached's deadline is the tick before the delay's end.
        assert_eq!(at(1), FlushAt::At(NOW));
        assert_eq!(at(2), FlushAt::At(NOW + 1));
        assert_eq!(at(MAX_RELATIVE), FlushAt::At(NOW + MAX_RELATIVE as u64 - 1));
        // Above 30 days: a Unix time; before the start it flushes nothing.
        assert_eq!(at(MAX_RELATIVE + 1), FlushAt::Cancel);
        assert_eq!(at((started - STARTED_SLACK) as i64), FlushAt::Cancel);
        assert_eq!(at(started as i64), FlushAt::At(started - 1));
        assert_eq!(at(NOW as i64 + 2), FlushAt::At(NOW + 1));
        assert_eq!(at(i64::MAX), FlushAt::At(i64::MAX as u64 - 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_replaced_deadline_never_fires() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let schedule = Arc::new(FlushSchedule::default());
        let fired = Arc::new(AtomicUsize::new(0));
        let runner = {
            let (schedule, fired) = (schedule.clone(), fired.clone());
            tokio::spawn(async move {
                schedule
                    .run(|| {
                        fired.fetch_add(1, Ordering::SeqCst);
                        async {}
                    })
                    .await
            })
        };
        schedule.replace(Some(unix_now() + 100));
        tokio::time::sleep(Duration::from_secs(10)).await;
        // A flush now cancels the pending one.
        schedule.replace(None);
        tokio::time::sleep(Duration::from_secs(200)).await;
        assert_eq!(fired.load(Ordering::SeqCst), 0);
        // A later deadline replaces a sooner one.
        schedule.replace(Some(unix_now() + 5));
        tokio::time::sleep(Duration::from_secs(1)).await;
        schedule.replace(Some(unix_now() + 50));
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(fired.load(Ordering::SeqCst), 0);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(fired.load(Ordering::SeqCst), 1, "the deadline's start");
        // (The wall clock does not move with the paused tokio clock, so the
        // end of the second comes a deadline's wait later here.)
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(fired.load(Ordering::SeqCst), 2, "and its end");
        assert_eq!(schedule.pending(), None);
        runner.abort();
    }
}

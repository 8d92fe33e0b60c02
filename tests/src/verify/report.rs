//! What the verifying clients saw, merged: the counts a scenario asserts
//! on and the latencies it prints.

use std::time::{Duration, Instant};

/// A `get`, a multi-get omission or a `delete` `NOT_FOUND` of a key whose
/// last acknowledged operation was a write.
#[derive(Debug, Clone)]
pub struct Miss {
    pub key: String,
    /// Sequence of the acknowledged write.
    pub acked_seq: u64,
    /// When that write's `STORED` arrived.
    pub acked_at: Instant,
    pub seen_at: Instant,
}

/// A `SERVER_ERROR` reply.
#[derive(Debug, Clone)]
pub struct ErrorReply {
    pub keys: Vec<String>,
    pub line: String,
    pub at: Instant,
}

/// A request left without a reply when the server closed the connection.
#[derive(Debug, Clone)]
pub struct Unanswered {
    pub request: String,
    pub sent_at: Instant,
    /// Part of a reply had arrived (a truncated reply is never right).
    pub partial: bool,
}

/// Everything the clients saw.
#[derive(Debug, Default)]
pub struct VerifyReport {
    pub ops: u64,
    pub cross_talk: Vec<String>,
    pub stale: Vec<String>,
    pub errors: Vec<ErrorReply>,
    pub misses: Vec<Miss>,
    /// Replies slower than `request_timeout` (or none within it).
    pub over_timeout: Vec<String>,
    pub connection_errors: Vec<String>,
    pub unanswered_at_close: Vec<Unanswered>,
    /// Clients that ended because the server closed their connection.
    pub closed_by_server: usize,
    /// Every request's latency, sorted.
    pub latencies: Vec<Duration>,
    /// Every answered request's send time and latency, per client in order.
    pub timed: Vec<(Instant, Duration)>,
    /// Every key of every client.
    pub keys: Vec<String>,
}

impl VerifyReport {
    pub fn max_latency(&self) -> Duration {
        self.latencies.last().copied().unwrap_or_default()
    }

    /// The `q` quantile (0..=1) of the latencies.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() - 1) as f64 * q).round() as usize;
        self.latencies[i.min(self.latencies.len() - 1)]
    }

    /// `(count, p99, max)` of the requests sent between `from` and `to`.
    pub fn window(&self, from: Instant, to: Instant) -> (usize, Duration, Duration) {
        let mut l: Vec<Duration> = self
            .timed
            .iter()
            .filter(|(at, _)| *at >= from && *at <= to)
            .map(|&(_, d)| d)
            .collect();
        l.sort_unstable();
        let p99 = l
            .get(((l.len().max(1) - 1) as f64 * 0.99).round() as usize)
            .copied()
            .unwrap_or_default();
        (l.len(), p99, l.last().copied().unwrap_or_default())
    }

    /// When the first and the last `SERVER_ERROR` arrived (None: none did).
    pub fn error_span(&self) -> Option<(Instant, Instant)> {
        let first = self.errors.iter().map(|e| e.at).min()?;
        let last = self.errors.iter().map(|e| e.at).max()?;
        Some((first, last))
    }

    /// Panics (with the first examples) on cross-talk, stale values,
    /// replies over the timeout and broken connections.
    pub fn assert_no_wrong_values(&self, what: &str) {
        for (name, list) in [
            ("cross-talk replies", &self.cross_talk),
            ("stale values", &self.stale),
            (
                "requests not answered within the timeout",
                &self.over_timeout,
            ),
            ("connection errors", &self.connection_errors),
        ] {
            assert!(
                list.is_empty(),
                "{what}: {} {name}; first ones: {:#?}",
                list.len(),
                &list[..list.len().min(10)]
            );
        }
    }
}

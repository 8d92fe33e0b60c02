//! Per-connection counters and latency histogram, merged at the end.

use hdrhistogram::Histogram;

use super::proto::Reply;

/// Highest recordable latency (larger values are clamped): 60 s in ns.
const MAX_NS: u64 = 60_000_000_000;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Errors {
    pub server_error: u64,
    pub client_error: u64,
    /// memcached's bare `ERROR`.
    pub error: u64,
    pub timeout: u64,
    /// Well-framed but wrong replies, and replies that could not be parsed.
    pub unexpected: u64,
    /// Requests lost to a failed or dropped connection.
    pub connection: u64,
    /// Connects that failed (and drops with nothing outstanding).
    pub connect_failures: u64,
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.server_error
            + self.client_error
            + self.error
            + self.timeout
            + self.unexpected
            + self.connection
            + self.connect_failures
    }

    fn add(&mut self, o: &Errors) {
        self.server_error += o.server_error;
        self.client_error += o.client_error;
        self.error += o.error;
        self.timeout += o.timeout;
        self.unexpected += o.unexpected;
        self.connection += o.connection;
        self.connect_failures += o.connect_failures;
    }
}

pub struct Stats {
    /// Requests answered with a valid, non-error reply.
    pub ok: u64,
    pub gets: u64,
    pub sets: u64,
    pub hits: u64,
    pub misses: u64,
    pub errors: Errors,
    pub reconnects: u64,
    /// Latency of the `ok` requests, in nanoseconds.
    pub hist: Histogram<u64>,
    /// Open loop: how late each request left versus its intended time (ns);
    /// the load generator's own accuracy.
    pub lag: Histogram<u64>,
    /// First few distinct error descriptions, for the report.
    pub samples: Vec<String>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            ok: 0,
            gets: 0,
            sets: 0,
            hits: 0,
            misses: 0,
            errors: Errors::default(),
            reconnects: 0,
            // 1 ns .. 60 s, 3 significant digits: fixed bounds, so `add` never fails.
            hist: Histogram::new_with_bounds(1, MAX_NS, 3)
                .unwrap_or_else(|e| panic!("histogram bounds: {e}")),
            lag: Histogram::new_with_bounds(1, MAX_NS, 3)
                .unwrap_or_else(|e| panic!("histogram bounds: {e}")),
            samples: Vec::new(),
        }
    }
}

impl Stats {
    pub fn record(&mut self, reply: Reply, latency_ns: u64) {
        match reply {
            Reply::Values { hits, misses } => {
                self.gets += 1;
                self.hits += u64::from(hits);
                self.misses += u64::from(misses);
            }
            Reply::Stored => self.sets += 1,
            Reply::Probed => {}
            Reply::ServerError => {
                self.errors.server_error += 1;
                return;
            }
            Reply::ClientError => {
                self.errors.client_error += 1;
                return;
            }
            Reply::Error => {
                self.errors.error += 1;
                return;
            }
            Reply::Other => {
                self.errors.unexpected += 1;
                return;
            }
        }
        self.ok += 1;
        self.hist.saturating_record(latency_ns.clamp(1, MAX_NS));
    }

    pub fn note(&mut self, what: String) {
        if self.samples.len() < 5 && !self.samples.contains(&what) {
            self.samples.push(what);
        }
    }

    pub fn merge(&mut self, o: &Stats) {
        self.ok += o.ok;
        self.gets += o.gets;
        self.sets += o.sets;
        self.hits += o.hits;
        self.misses += o.misses;
        self.errors.add(&o.errors);
        self.reconnects += o.reconnects;
        // Same bounds on both sides: cannot fail.
        let _ = self.hist.add(&o.hist);
        let _ = self.lag.add(&o.lag);
        for s in &o.samples {
            self.note(s.clone());
        }
    }

    /// Latency quantile in microseconds (0 when nothing was recorded).
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    pub fn lag_us(&self, q: f64) -> f64 {
        if self.lag.is_empty() {
            return 0.0;
        }
        self.lag.value_at_quantile(q) as f64 / 1000.0
    }

    pub fn max_us(&self) -> f64 {
        self.hist.max() as f64 / 1000.0
    }

    pub fn mean_us(&self) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.mean() / 1000.0
    }
}

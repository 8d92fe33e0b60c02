//! Per-shard series: `memshift_backend_errors_total` and `memshift_backend_up`.

use metrics::{Counter, Gauge};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::families::{BACKEND_ERRORS, BACKEND_UP};
use super::labels::{Backend, ErrorKind};
use super::registry::{counter, gauge};

/// Per-shard handles, cheap to clone into each connection task.
#[derive(Clone, Debug)]
pub struct ShardMetrics {
    errors: [Counter; ErrorKind::ALL.len()],
    up: Gauge,
}

impl ShardMetrics {
    #[inline]
    pub fn error(&self, kind: ErrorKind) {
        self.errors[kind as usize].increment(1);
    }

    pub fn set_up(&self, up: bool) {
        self.up.set(if up { 1.0 } else { 0.0 });
    }

    /// Registers (or, on reload, looks up again) one shard's series.
    pub(super) fn register(r: &PrometheusRecorder, backend: Backend, shard: &str) -> ShardMetrics {
        let labels = [("backend", backend.label()), ("shard", shard)];
        ShardMetrics {
            errors: ErrorKind::ALL.map(|k| {
                counter(
                    r,
                    BACKEND_ERRORS,
                    &[labels[0], labels[1], ("kind", k.as_str())],
                )
            }),
            up: gauge(r, BACKEND_UP, &labels),
        }
    }
}

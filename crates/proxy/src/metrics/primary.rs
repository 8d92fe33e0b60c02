//! A Sentinel-managed shard's primary: `memshift_backend_primary_changes_total`
//! and the info-style `memshift_backend_primary{shard,addr}` (1 for the
//! current address, 0 for the ones before it: the recorder cannot drop a
//! series). Touched once per switch, never on the request path.

use std::sync::Arc;

use metrics::Counter;
use metrics_exporter_prometheus::PrometheusRecorder;

use super::families::{BACKEND_PRIMARY, BACKEND_PRIMARY_CHANGES};
use super::registry::{counter, gauge};

#[derive(Clone)]
pub struct PrimaryMetrics {
    recorder: Arc<PrometheusRecorder>,
    shard: String,
    changes: Counter,
}

impl std::fmt::Debug for PrimaryMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrimaryMetrics")
            .field("shard", &self.shard)
            .finish_non_exhaustive()
    }
}

impl PrimaryMetrics {
    pub(super) fn register(recorder: Arc<PrometheusRecorder>, shard: &str) -> PrimaryMetrics {
        let changes = counter(&recorder, BACKEND_PRIMARY_CHANGES, &[("shard", shard)]);
        PrimaryMetrics {
            recorder,
            shard: shard.to_string(),
            changes,
        }
    }

    /// The primary is `addr` (at start, or after a switch from `old`).
    pub fn primary_is(&self, addr: &str, old: Option<&str>) {
        if let Some(old) = old.filter(|o| !o.is_empty() && *o != addr) {
            self.changes.increment(1);
            self.addr_gauge(old, 0.0);
        }
        if !addr.is_empty() {
            self.addr_gauge(addr, 1.0);
        }
    }

    fn addr_gauge(&self, addr: &str, value: f64) {
        gauge(
            &self.recorder,
            BACKEND_PRIMARY,
            &[("shard", &self.shard), ("addr", addr)],
        )
        .set(value);
    }
}

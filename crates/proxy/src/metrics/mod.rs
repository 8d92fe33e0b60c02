//! Prometheus metrics: every series is registered up front as a handle, so the
//! request path only does an atomic add (no map lookup, no label formatting).
//!
//! [`Metrics`] owns its own [`PrometheusRecorder`] instead of installing a
//! global one: tests get isolated registries and nothing depends on init
//! order. `docs/metrics.md` describes each family and what to alert on.

//!
//! * [`families`]: what is exported (names, types, HELP, fixed label values);
//! * [`labels`]: the label types (the shadow crate's outcomes re-exported);
//! * `registry`: registering series, the upkeep thread;
//! * `durations`: the request-duration histograms;
//! * `counts`: the request and get hit/miss counters (sharded by thread,
//!   like the histograms);
//! * [`shard`]: per-shard series.

use std::sync::Arc;

use metrics::{Counter, Gauge, KeyName, Recorder, SharedString};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

mod counts;
mod durations;
pub mod families;
pub mod labels;
pub mod near_cache;
pub mod primary;
mod registry;
pub mod shard;

#[cfg(test)]
mod tests;

pub use families::*;
pub use labels::{Backend, CompareResult, ErrorKind, Protocol, ShadowResult, TlsResult, Transport};
pub use primary::PrimaryMetrics;
pub use shard::ShardMetrics;

use counts::RequestCounts;
use durations::Durations;
use registry::{counter, gauge, spawn_upkeep};

/// Registers one shard's series (like [`Metrics::shard`]) after start.
#[derive(Debug, Clone)]
pub struct ShardRegistry(Arc<PrometheusRecorder>);

impl ShardRegistry {
    pub fn shard(&self, backend: Backend, shard: &str) -> ShardMetrics {
        ShardMetrics::register(&self.0, backend, shard)
    }
}

/// All metric handles of one proxy process. `Send + Sync`; share it via `Arc`.
#[derive(Debug)]
pub struct Metrics {
    recorder: Arc<PrometheusRecorder>,
    /// `memshift_requests_total`, `memshift_get_{hits,misses}_total`: our
    /// own counters, not the recorder's (see [`RequestCounts`]).
    counts: RequestCounts,
    /// `memshift_request_duration_seconds`: our own buckets, not the
    /// recorder's (see [`Durations`]).
    durations: Durations,
    client_connections: Gauge,
    client_connections_total: Counter,
    /// `[transport]`
    transport_connections: [Gauge; Transport::ALL.len()],
    transport_connections_total: [Counter; Transport::ALL.len()],
    rejected_connections: Counter,
    slow_consumers: Counter,
    dedicated_in_use: Gauge,
    dedicated_refused: Counter,
    drain_aborted: Counter,
    drain_dropped: Counter,
    /// `[backend][result]`
    shadow_writes: [[Counter; ShadowResult::LABELS.len()]; Backend::ALL.len()],
    breaker_open: [Gauge; Backend::ALL.len()],
    compare: [Counter; CompareResult::ALL.len()],
    phase: [Gauge; PHASES.len()],
    rollbacks: Counter,
    tls: [Counter; TlsResult::ALL.len()],
    /// `[ok, error]`
    config_reloads: [Counter; 2],
    subscribers: Gauge,
    subscribers_refused: Counter,
    subscribers_lost: Counter,
    pub near_cache: near_cache::NearCacheMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every fixed-label series registered at 0, so
    /// dashboards and alerts see them before the first event.
    ///
    /// Starts a small background thread that folds histogram samples into
    /// buckets every few seconds, so memory stays bounded even when nobody
    /// scrapes `/metrics`; it ends once the `Metrics` is dropped.
    pub fn new() -> Metrics {
        let recorder = PrometheusBuilder::new()
            // Buckets for every histogram: all render as `_bucket` series,
            // never as summaries (which cannot be aggregated across proxies).
            .set_buckets(&DURATION_BUCKETS)
            .expect("DURATION_BUCKETS is not empty")
            .build_recorder();
        let r = &recorder;
        for (name, kind, help) in FAMILIES {
            if counts::OWN_FAMILIES.contains(&name) {
                continue; // rendered by `RequestCounts`
            }
            let (name, help) = (KeyName::from(name), SharedString::from(help));
            match kind {
                "gauge" => r.describe_gauge(name, None, help),
                // Rendered by `Durations`, not the recorder.
                "histogram" => {}
                _ => r.describe_counter(name, None, help),
            }
        }

        let metrics = Metrics {
            counts: RequestCounts::default(),
            durations: Durations::new(),
            client_connections: gauge(r, CLIENT_CONNECTIONS, &[]),
            client_connections_total: counter(r, CLIENT_CONNECTIONS_TOTAL, &[]),
            transport_connections: Transport::ALL
                .map(|t| gauge(r, TRANSPORT_CONNECTIONS, &[("transport", t.as_str())])),
            transport_connections_total: Transport::ALL
                .map(|t| counter(r, TRANSPORT_CONNECTIONS_TOTAL, &[("transport", t.as_str())])),
            rejected_connections: counter(r, REJECTED_CONNECTIONS, &[]),
            slow_consumers: counter(r, SLOW_CONSUMERS, &[]),
            dedicated_in_use: gauge(r, DEDICATED_CONNECTIONS, &[]),
            dedicated_refused: counter(r, DEDICATED_REFUSED, &[]),
            drain_aborted: counter(r, DRAIN_ABORTED, &[]),
            drain_dropped: counter(r, DRAIN_DROPPED, &[]),
            shadow_writes: Backend::ALL.map(|b| {
                ShadowResult::LABELS.map(|result| {
                    counter(
                        r,
                        SHADOW_WRITES,
                        &[("backend", b.label()), ("result", result)],
                    )
                })
            }),
            breaker_open: Backend::ALL
                .map(|b| gauge(r, SHADOW_BREAKER_OPEN, &[("backend", b.label())])),
            compare: CompareResult::ALL.map(|c| counter(r, COMPARE, &[("result", c.label())])),
            phase: PHASES.map(|p| gauge(r, MIGRATION_PHASE, &[("phase", p)])),
            rollbacks: counter(r, ROLLBACKS, &[]),
            tls: TlsResult::ALL.map(|t| counter(r, TLS_HANDSHAKES, &[("result", t.as_str())])),
            config_reloads: ["ok", "error"].map(|x| counter(r, CONFIG_RELOADS, &[("result", x)])),
            subscribers: gauge(r, SUBSCRIBERS, &[]),
            subscribers_refused: counter(r, SUBSCRIBERS_REFUSED, &[]),
            subscribers_lost: counter(r, SUBSCRIBERS_LOST, &[]),
            near_cache: near_cache::NearCacheMetrics::default(),
            recorder: Arc::new(recorder),
        };
        gauge(
            &metrics.recorder,
            BUILD_INFO,
            &[("version", env!("CARGO_PKG_VERSION"))],
        )
        .set(1.0);
        spawn_upkeep(Arc::downgrade(&metrics.recorder));
        metrics
    }

    /// Like [`Metrics::new`], but the per-request handles (request counts,
    /// durations, hits and misses) do nothing: for measuring what metrics
    /// cost on the request path (`MEMSHIFT_METRICS=off`). Not for production:
    /// the dashboards go blank.
    pub fn without_request_metrics() -> Metrics {
        let mut m = Metrics::new();
        m.counts.disabled = true;
        m.durations.enabled = false;
        m
    }

    /// The Prometheus text exposition (format 0.0.4) of every series.
    pub fn render(&self) -> String {
        let mut text = self.recorder.handle().render();
        self.counts.render(&mut text);
        self.durations.render(&mut text);
        self.near_cache.render(&mut text);
        text
    }

    /// Fold queued histogram samples into their buckets. The background
    /// thread and `render` already do this; exposed for tests and shutdown.
    pub fn upkeep(&self) {
        self.recorder.handle().run_upkeep();
    }

    /// One request of `COMMANDS[command]`, received in `protocol`, finished
    /// after `seconds`. An out-of-range index is ignored rather than trusted.
    #[inline]
    pub fn request(&self, protocol: Protocol, command: usize, seconds: f64) {
        if command < COMMANDS.len() {
            self.counts.request(protocol, command);
            self.durations.record(command, seconds);
        }
    }

    /// Handles for `redis::dedicated`: connections in use, refusals.
    pub fn dedicated_handles(&self) -> (Gauge, Counter) {
        (
            self.dedicated_in_use.clone(),
            self.dedicated_refused.clone(),
        )
    }

    #[inline]
    pub fn get_hit(&self, b: Backend) {
        self.counts.get(b, true);
    }

    #[inline]
    pub fn get_miss(&self, b: Backend) {
        self.counts.get(b, false);
    }

    /// Register (or, on reload, look up again) the series of one shard:
    /// `backend_errors_total` for every kind at 0 and `backend_up`.
    /// `backend_up` starts at 0 until [`ShardMetrics::set_up`] says otherwise.
    /// Series of shards removed by a reload stay until the process restarts
    /// (the recorder cannot unregister); their values stop changing.
    pub fn shard(&self, backend: Backend, shard: &str) -> ShardMetrics {
        ShardMetrics::register(&self.recorder, backend, shard)
    }

    /// `memshift_read_errors_as_misses_total{shard}` (registered, or on
    /// reload looked up again).
    pub fn read_errors_as_misses(&self, shard: &str) -> Counter {
        registry::counter(
            &self.recorder,
            families::READ_ERRORS_AS_MISSES,
            &[("shard", shard)],
        )
    }

    /// A Sentinel-managed shard's primary series (by master name).
    pub fn primary(&self, shard: &str) -> PrimaryMetrics {
        PrimaryMetrics::register(self.recorder.clone(), shard)
    }

    /// `memshift_replica_reads_total{shard}` (registered, or on reload
    /// looked up again).
    pub fn replica_reads(&self, shard: &str) -> Counter {
        registry::counter(&self.recorder, families::REPLICA_READS, &[("shard", shard)])
    }

    /// Registers shard series later: Redis Cluster nodes found after start.
    pub fn shard_registry(&self) -> ShardRegistry {
        ShardRegistry(self.recorder.clone())
    }

    pub fn client_connected(&self, transport: Transport) {
        self.client_connections.increment(1.0);
        self.client_connections_total.increment(1);
        self.transport_connections[transport as usize].increment(1.0);
        self.transport_connections_total[transport as usize].increment(1);
    }

    pub fn client_disconnected(&self, transport: Transport) {
        self.client_connections.decrement(1.0);
        self.transport_connections[transport as usize].decrement(1.0);
    }

    pub fn connection_rejected(&self) {
        self.rejected_connections.increment(1);
    }

    /// A RESP subscriber connection opened (+1) or closed (-1).
    pub fn subscriber_connections(&self, delta: f64) {
        self.subscribers.increment(delta);
    }

    pub fn subscriber_refused(&self) {
        self.subscribers_refused.increment(1);
    }

    pub fn subscriber_lost(&self) {
        self.subscribers_lost.increment(1);
    }

    pub fn slow_consumer_closed(&self) {
        self.slow_consumers.increment(1);
    }

    /// `n` connections were still open when the drain timeout ran out.
    pub fn drain_aborted(&self, n: usize) {
        self.drain_aborted.increment(n as u64);
    }

    /// `n` requests read were left unanswered at the drain deadline.
    pub fn drain_dropped(&self, n: usize) {
        self.drain_dropped.increment(n as u64);
    }

    #[inline]
    pub fn shadow_write(&self, b: Backend, result: &ShadowResult) {
        self.shadow_writes[b as usize][result.label_index()].increment(1);
    }

    pub fn set_breaker_open(&self, b: Backend, open: bool) {
        self.breaker_open[b as usize].set(if open { 1.0 } else { 0.0 });
    }

    #[inline]
    pub fn compare(&self, result: CompareResult) {
        self.compare[result as usize].increment(1);
    }

    /// Mark `phase` current. An unknown name leaves every phase at 0, which
    /// is visible on the dashboard rather than silently wrong.
    pub fn set_phase(&self, phase: &str) {
        // Clear first, then set: a scrape in between sees no phase for an
        // instant rather than two.
        for (name, g) in PHASES.iter().zip(&self.phase) {
            if *name != phase {
                g.set(0.0);
            }
        }
        if let Some(i) = PHASES.iter().position(|p| *p == phase) {
            self.phase[i].set(1.0);
        }
    }

    pub fn rollback(&self) {
        self.rollbacks.increment(1);
    }

    pub fn tls_handshake(&self, result: TlsResult) {
        self.tls[result as usize].increment(1);
    }

    pub fn config_reload(&self, ok: bool) {
        self.config_reloads[usize::from(!ok)].increment(1);
    }
}

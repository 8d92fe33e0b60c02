//! Registering series on the recorder, and the upkeep thread that drains
//! its histogram queue.

use std::sync::Weak;
use std::time::Duration;

use metrics::{Counter, Gauge, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::PrometheusRecorder;

/// How often histogram samples are folded into their buckets when nobody
/// scrapes; bounds the memory queued samples can take.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Registration goes straight through the `Recorder` trait; the metadata is
/// unused by the Prometheus recorder but required by the signature.
const META: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

fn key(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
    let labels: Vec<Label> = labels
        .iter()
        .map(|(k, v)| Label::new(*k, v.to_string()))
        .collect();
    Key::from_parts(name, labels)
}

pub(super) fn counter(
    r: &PrometheusRecorder,
    name: &'static str,
    labels: &[(&'static str, &str)],
) -> Counter {
    let c = r.register_counter(&key(name, labels), &META);
    // Registration alone creates the series at 0; the explicit no-op add keeps
    // that true should the recorder ever become lazy.
    c.increment(0);
    c
}

pub(super) fn gauge(
    r: &PrometheusRecorder,
    name: &'static str,
    labels: &[(&'static str, &str)],
) -> Gauge {
    r.register_gauge(&key(name, labels), &META)
}

/// Histogram samples queue up in the recorder until upkeep folds them into
/// buckets; without a scraper that queue would grow with every request.
pub(super) fn spawn_upkeep(recorder: Weak<PrometheusRecorder>) {
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_EVERY);
            match recorder.upgrade() {
                Some(r) => r.handle().run_upkeep(),
                None => return,
            }
        });
    if let Err(e) = spawned {
        // Scrapes still drain the queue; only the unscraped case is exposed.
        tracing::warn!("metrics upkeep thread not started: {e}");
    }
}

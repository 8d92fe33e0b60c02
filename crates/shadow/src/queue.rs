//! The bounded shadow queue: writes to replicate on the shadow backend,
//! applied by a worker task, never in the way of the primary path.
//!
//! * [`ShadowQueue::try_push`] never waits. A full queue drops the operation.
//! * One worker task per queue takes operations in order, asks the
//!   [`Breaker`] whether the backend may be used, and hands them to the
//!   [`ShadowSink`]. Up to `max_in_flight` operations are outstanding at once.
//! * Every operation ends in exactly one [`ShadowResult`] reported to the
//!   [`ShadowObserver`] (the proxy turns them into
//!   `memshift_shadow_writes_total{backend,result}`), including the ones
//!   `try_push` drops: the caller does not count drops itself.
//!
//! # Order
//!
//! The worker calls [`ShadowSink::apply`] in queue order. A sink that must
//! keep per-key order (a `set` then a `delete` of the same key) enqueues the
//! request on an order-preserving connection *inside* `apply`, before
//! returning the future that waits for the reply; the legacy pool sink does
//! (same key, same connection).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::breaker::{Admit, Breaker, BreakerSettings, Transition};
use crate::op::ShadowOp;
use crate::ShadowError;

/// The future a sink returns. `'static`: it owns what it needs (typically
/// the receiving end of a reply channel), so the worker can keep several.
pub type ApplyFuture = Pin<Box<dyn Future<Output = Result<(), ShadowError>> + Send + 'static>>;

/// A shadow backend.
pub trait ShadowSink: Send + Sync + 'static {
    /// Apply one operation. Called in queue order; see the module docs about
    /// enqueuing inside this call to keep per-key order.
    fn apply(&self, op: ShadowOp) -> ApplyFuture;
}

/// Why an operation never reached the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The queue was full (or its worker has stopped).
    QueueFull,
    /// The circuit breaker was open.
    BreakerOpen,
}

/// How one shadow operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShadowResult {
    Ok,
    Error(ShadowError),
    Dropped(DropReason),
}

impl ShadowResult {
    /// Every `result` label of `memshift_shadow_writes_total`, indexed by
    /// [`ShadowResult::label_index`]: lets metrics register each series up
    /// front (the variants carry data, so there is no `ALL`).
    pub const LABELS: [&'static str; 3] = ["ok", "error", "dropped"];

    /// Position of this result's label in [`ShadowResult::LABELS`].
    pub fn label_index(&self) -> usize {
        match self {
            ShadowResult::Ok => 0,
            ShadowResult::Error(_) => 1,
            ShadowResult::Dropped(_) => 2,
        }
    }

    /// The `result` label of `memshift_shadow_writes_total`.
    pub fn label(&self) -> &'static str {
        Self::LABELS[self.label_index()]
    }
}

/// Where outcomes go (metrics). Called from the pushing side for
/// [`DropReason::QueueFull`] and from the worker for everything else: keep
/// it cheap (a counter increment).
pub trait ShadowObserver: Send + Sync + 'static {
    fn result(&self, result: ShadowResult);
    /// The breaker opened (`true`) or closed (`false`).
    fn breaker(&self, open: bool);
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopObserver;

impl ShadowObserver for NoopObserver {
    fn result(&self, _: ShadowResult) {}
    fn breaker(&self, _: bool) {}
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSettings {
    /// `[migration] shadow_queue`: operations waiting (0 is treated as 1).
    pub capacity: usize,
    /// Operations handed to the sink and not finished yet.
    pub max_in_flight: usize,
    /// Backstop for a sink that never answers; counts as a failure.
    pub apply_timeout: Duration,
    pub breaker: BreakerSettings,
}

impl QueueSettings {
    pub fn new(capacity: usize, breaker: BreakerSettings) -> QueueSettings {
        QueueSettings {
            capacity,
            max_in_flight: 128,
            apply_timeout: Duration::from_secs(5),
            breaker,
        }
    }
}

/// What [`ShadowQueue::try_push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushResult {
    Queued,
    /// Dropped; already reported to the observer.
    Dropped,
}

struct Shared {
    /// Pushed and not finished (queued + in flight).
    pending: AtomicUsize,
    idle: Notify,
    observer: Arc<dyn ShadowObserver>,
}

impl Shared {
    fn finish(&self, result: ShadowResult) {
        self.observer.result(result);
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }
}

/// Handle to a shadow queue; cheap to clone. The worker stops once every
/// handle is dropped and the remaining operations are done.
#[derive(Clone)]
pub struct ShadowQueue {
    tx: mpsc::Sender<ShadowOp>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ShadowQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShadowQueue")
            .field("pending", &self.pending())
            .finish()
    }
}

impl ShadowQueue {
    /// Start the worker on the current tokio runtime.
    pub fn start(
        settings: QueueSettings,
        sink: Arc<dyn ShadowSink>,
        observer: Arc<dyn ShadowObserver>,
    ) -> ShadowQueue {
        let (tx, rx) = mpsc::channel(settings.capacity.max(1));
        let shared = Arc::new(Shared {
            pending: AtomicUsize::new(0),
            idle: Notify::new(),
            observer,
        });
        tokio::spawn(worker(settings, rx, sink, shared.clone()));
        ShadowQueue { tx, shared }
    }

    /// Queue `op` without waiting. Never blocks.
    pub fn try_push(&self, op: ShadowOp) -> PushResult {
        // Count before sending so `flush` never sees an op in the channel as
        // already done.
        self.shared.pending.fetch_add(1, Ordering::AcqRel);
        match self.tx.try_send(op) {
            Ok(()) => PushResult::Queued,
            Err(_) => {
                self.shared
                    .finish(ShadowResult::Dropped(DropReason::QueueFull));
                PushResult::Dropped
            }
        }
    }

    /// Operations pushed and not finished yet.
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::Acquire)
    }

    /// Wait until every pushed operation has finished or `deadline` passes.
    /// True if the queue drained.
    pub async fn flush(&self, deadline: Instant) -> bool {
        loop {
            let idle = self.shared.idle.notified();
            tokio::pin!(idle);
            // Register before checking, so a notify in between is not lost.
            idle.as_mut().enable();
            if self.pending() == 0 {
                return true;
            }
            tokio::select! {
                _ = &mut idle => {}
                _ = tokio::time::sleep_until(deadline) => return self.pending() == 0,
            }
        }
    }
}

async fn worker(
    settings: QueueSettings,
    mut rx: mpsc::Receiver<ShadowOp>,
    sink: Arc<dyn ShadowSink>,
    shared: Arc<Shared>,
) {
    let mut breaker = Breaker::new(settings.breaker);
    let mut inflight: JoinSet<(bool, Result<(), ShadowError>)> = JoinSet::new();
    let max_in_flight = settings.max_in_flight.max(1);
    let mut open = true;
    while open || !inflight.is_empty() {
        tokio::select! {
            biased;
            done = inflight.join_next(), if !inflight.is_empty() => {
                let (probe, result) = match done {
                    Some(Ok(outcome)) => outcome,
                    // The apply task panicked or was cancelled: a failure.
                    Some(Err(_)) => (false, Err(ShadowError::Internal)),
                    None => continue,
                };
                let ok = result.as_ref().map_or_else(|e| !e.is_backend_failure(), |_| true);
                let now = std::time::Instant::now();
                let transition = if probe {
                    breaker.record_probe(ok, now)
                } else {
                    breaker.record_regular(ok, now)
                };
                report_transition(&shared, transition);
                shared.finish(match result {
                    Ok(()) => ShadowResult::Ok,
                    Err(e) => ShadowResult::Error(e),
                });
            }
            op = rx.recv(), if open && inflight.len() < max_in_flight => {
                let Some(op) = op else {
                    open = false;
                    continue;
                };
                let probe = match breaker.admit(std::time::Instant::now()) {
                    Admit::No => {
                        shared.finish(ShadowResult::Dropped(DropReason::BreakerOpen));
                        continue;
                    }
                    Admit::Yes => false,
                    Admit::Probe => true,
                };
                let fut = sink.apply(op);
                let limit = settings.apply_timeout;
                inflight.spawn(async move {
                    match tokio::time::timeout(limit, fut).await {
                        Ok(result) => (probe, result),
                        Err(_) => (probe, Err(ShadowError::Timeout)),
                    }
                });
            }
        }
    }
}

fn report_transition(shared: &Shared, transition: Option<Transition>) {
    match transition {
        Some(Transition::Opened) => {
            tracing::warn!(
                "shadow breaker opened: shadow writes are dropped until a probe succeeds"
            );
            shared.observer.breaker(true);
        }
        Some(Transition::Closed) => {
            tracing::info!("shadow breaker closed: shadow writes resume");
            shared.observer.breaker(false);
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Expiry;
    use bytes::Bytes;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;

    /// Counts outcomes.
    #[derive(Default)]
    struct Counts {
        ok: AtomicUsize,
        error: AtomicUsize,
        full: AtomicUsize,
        breaker_drop: AtomicUsize,
        open: AtomicBool,
        transitions: AtomicUsize,
    }

    impl ShadowObserver for Counts {
        fn result(&self, result: ShadowResult) {
            let c = match result {
                ShadowResult::Ok => &self.ok,
                ShadowResult::Error(_) => &self.error,
                ShadowResult::Dropped(DropReason::QueueFull) => &self.full,
                ShadowResult::Dropped(DropReason::BreakerOpen) => &self.breaker_drop,
            };
            c.fetch_add(1, Ordering::SeqCst);
        }
        fn breaker(&self, open: bool) {
            self.open.store(open, Ordering::SeqCst);
            self.transitions.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// An in-memory sink that can be made to fail or to stall.
    struct MemSink {
        data: Mutex<HashMap<Bytes, Bytes>>,
        failing: AtomicBool,
        calls: AtomicUsize,
        gate: tokio::sync::Semaphore,
        gated: AtomicBool,
    }

    impl Default for MemSink {
        fn default() -> Self {
            MemSink {
                data: Mutex::default(),
                failing: AtomicBool::new(false),
                calls: AtomicUsize::new(0),
                gate: tokio::sync::Semaphore::new(0),
                gated: AtomicBool::new(false),
            }
        }
    }

    impl ShadowSink for Arc<MemSink> {
        fn apply(&self, op: ShadowOp) -> ApplyFuture {
            self.calls.fetch_add(1, Ordering::SeqCst);
            // Apply synchronously: that is what keeps order.
            let fail = self.failing.load(Ordering::SeqCst);
            if !fail {
                let mut data = self.data.lock().unwrap_or_else(|p| p.into_inner());
                match op {
                    ShadowOp::Set { key, data: v, .. } => {
                        data.insert(key, v);
                    }
                    ShadowOp::Delete { key } => {
                        data.remove(&key);
                    }
                    ShadowOp::Touch { .. } => {}
                    ShadowOp::FlushAll => data.clear(),
                }
            }
            let this = self.clone();
            Box::pin(async move {
                if this.gated.load(Ordering::SeqCst) {
                    let _permit = this.gate.acquire().await;
                }
                if fail {
                    Err(ShadowError::Unavailable)
                } else {
                    Ok(())
                }
            })
        }
    }

    fn set(key: &str, value: &str) -> ShadowOp {
        ShadowOp::Set {
            key: Bytes::copy_from_slice(key.as_bytes()),
            flags: 0,
            expiry: Expiry::Never,
            data: Bytes::copy_from_slice(value.as_bytes()),
        }
    }

    fn settings(capacity: usize, failures: u32, cooldown_ms: u64) -> QueueSettings {
        QueueSettings::new(
            capacity,
            BreakerSettings {
                failures,
                cooldown: Duration::from_millis(cooldown_ms),
            },
        )
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[tokio::test]
    async fn applies_in_order_and_reports_ok() {
        let sink = Arc::new(MemSink::default());
        let counts = Arc::new(Counts::default());
        let q = ShadowQueue::start(
            settings(100, 3, 1000),
            Arc::new(sink.clone()),
            counts.clone(),
        );
        assert_eq!(q.try_push(set("a", "1")), PushResult::Queued);
        assert_eq!(q.try_push(set("a", "2")), PushResult::Queued);
        assert_eq!(q.try_push(set("b", "1")), PushResult::Queued);
        assert_eq!(
            q.try_push(ShadowOp::Delete {
                key: Bytes::from_static(b"b")
            }),
            PushResult::Queued
        );
        assert!(q.flush(soon()).await);
        assert_eq!(q.pending(), 0);
        assert_eq!(counts.ok.load(Ordering::SeqCst), 4);
        let data = sink.data.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(data.len(), 1);
        assert_eq!(
            data.get(&Bytes::from_static(b"a")),
            Some(&Bytes::from_static(b"2"))
        );
    }

    #[tokio::test]
    async fn overflow_is_dropped_and_counted_without_blocking() {
        let sink = Arc::new(MemSink::default());
        sink.gated.store(true, Ordering::SeqCst);
        let counts = Arc::new(Counts::default());
        let mut s = settings(10, 3, 1000);
        s.max_in_flight = 1;
        let q = ShadowQueue::start(s, Arc::new(sink.clone()), counts.clone());
        let started = std::time::Instant::now();
        let mut dropped = 0;
        for i in 0..1000 {
            if q.try_push(set(&format!("k{i}"), "v")) == PushResult::Dropped {
                dropped += 1;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        // At most capacity queued plus one taken by the worker.
        assert!(dropped >= 1000 - 11, "dropped {dropped}");
        assert_eq!(counts.full.load(Ordering::SeqCst), dropped);
        // Stalled sink: flush gives up at the deadline.
        let deadline = Instant::now() + Duration::from_millis(100);
        assert!(!q.flush(deadline).await);
        sink.gate.add_permits(10_000);
        assert!(q.flush(soon()).await);
        assert_eq!(counts.ok.load(Ordering::SeqCst) + dropped, 1000);
    }

    #[tokio::test]
    async fn breaker_opens_drops_then_probes_and_closes() {
        let sink = Arc::new(MemSink::default());
        sink.failing.store(true, Ordering::SeqCst);
        let counts = Arc::new(Counts::default());
        let mut s = settings(1000, 3, 200);
        s.max_in_flight = 1;
        let q = ShadowQueue::start(s, Arc::new(sink.clone()), counts.clone());
        for i in 0..100 {
            q.try_push(set(&format!("k{i}"), "v"));
        }
        assert!(q.flush(soon()).await);
        assert!(counts.open.load(Ordering::SeqCst));
        assert_eq!(counts.error.load(Ordering::SeqCst), 3);
        assert_eq!(counts.breaker_drop.load(Ordering::SeqCst), 97);
        // Only the 3 failures reached the sink.
        assert_eq!(sink.calls.load(Ordering::SeqCst), 3);

        // Backend healthy again; after the cooldown the probe closes it.
        sink.failing.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(250)).await;
        q.try_push(set("probe", "v"));
        assert!(q.flush(soon()).await);
        assert!(!counts.open.load(Ordering::SeqCst));
        assert_eq!(counts.transitions.load(Ordering::SeqCst), 2);
        q.try_push(set("after", "v"));
        assert!(q.flush(soon()).await);
        assert_eq!(counts.ok.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn rejections_are_errors_but_do_not_open_the_breaker() {
        struct Refuse;
        impl ShadowSink for Refuse {
            fn apply(&self, _: ShadowOp) -> ApplyFuture {
                Box::pin(async {
                    Err(ShadowError::Rejected(
                        "SERVER_ERROR object too large".into(),
                    ))
                })
            }
        }
        let counts = Arc::new(Counts::default());
        let q = ShadowQueue::start(settings(100, 2, 10_000), Arc::new(Refuse), counts.clone());
        for i in 0..10 {
            q.try_push(set(&format!("k{i}"), "v"));
        }
        assert!(q.flush(soon()).await);
        assert_eq!(counts.error.load(Ordering::SeqCst), 10);
        assert_eq!(counts.transitions.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn hung_sink_times_out() {
        struct Hang;
        impl ShadowSink for Hang {
            fn apply(&self, _: ShadowOp) -> ApplyFuture {
                Box::pin(std::future::pending())
            }
        }
        let counts = Arc::new(Counts::default());
        let mut s = settings(100, 100, 10_000);
        s.apply_timeout = Duration::from_millis(50);
        let q = ShadowQueue::start(s, Arc::new(Hang), counts.clone());
        q.try_push(ShadowOp::FlushAll);
        assert!(q.flush(soon()).await);
        assert_eq!(counts.error.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn flush_on_an_idle_queue_returns_at_once() {
        let q = ShadowQueue::start(
            settings(10, 3, 100),
            Arc::new(Arc::new(MemSink::default())),
            Arc::new(NoopObserver),
        );
        assert!(q.flush(Instant::now()).await);
    }
}

//! The shadow queue's circuit breaker against a real memcached that dies
//! mid-stream and comes back.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{bounded, single, wait_up, Memcached};
use memshift_shadow::{
    BreakerSettings, DropReason, Expiry, PushResult, QueueSettings, ShadowObserver, ShadowOp,
    ShadowQueue, ShadowResult,
};

#[derive(Default)]
struct Counts {
    ok: AtomicUsize,
    error: AtomicUsize,
    dropped_full: AtomicUsize,
    dropped_breaker: AtomicUsize,
    open: AtomicBool,
    opened: AtomicUsize,
    closed: AtomicUsize,
}

impl Counts {
    fn total(&self) -> usize {
        self.ok.load(Ordering::SeqCst)
            + self.error.load(Ordering::SeqCst)
            + self.dropped_full.load(Ordering::SeqCst)
            + self.dropped_breaker.load(Ordering::SeqCst)
    }
}

impl ShadowObserver for Counts {
    fn result(&self, result: ShadowResult) {
        let counter = match result {
            ShadowResult::Ok => &self.ok,
            ShadowResult::Error(_) => &self.error,
            ShadowResult::Dropped(DropReason::QueueFull) => &self.dropped_full,
            ShadowResult::Dropped(DropReason::BreakerOpen) => &self.dropped_breaker,
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }

    fn breaker(&self, open: bool) {
        self.open.store(open, Ordering::SeqCst);
        let counter = if open { &self.opened } else { &self.closed };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

fn set(i: usize) -> ShadowOp {
    ShadowOp::Set {
        key: Bytes::from(format!("shadow:{i}")),
        flags: i as u32,
        expiry: Expiry::Never,
        data: Bytes::from(format!("value {i}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_opens_when_memcached_dies_and_closes_when_it_returns() {
    let mut mc = Memcached::start();
    let pool = Arc::new(single(mc.addr(), 200));
    let counts = Arc::new(Counts::default());
    let cooldown = Duration::from_millis(500);
    let queue = ShadowQueue::start(
        QueueSettings::new(
            10_000,
            BreakerSettings {
                failures: 3,
                cooldown,
            },
        ),
        pool.clone(),
        counts.clone(),
    );
    bounded(60, async {
        wait_up(&pool).await;
        let mut slowest_push = Duration::ZERO;
        for i in 0..10_000 {
            if i == 3_000 {
                // Let part of the stream land, then kill the shadow.
                assert!(queue.flush(tokio::time::Instant::now() + Duration::from_secs(5)).await);
                assert_eq!(counts.ok.load(Ordering::SeqCst), 3_000);
                mc.kill();
            }
            let started = Instant::now();
            let pushed = queue.try_push(set(i));
            slowest_push = slowest_push.max(started.elapsed());
            assert!(matches!(pushed, PushResult::Queued | PushResult::Dropped));
            if i % 100 == 0 {
                // Give the worker a chance to see failures mid-stream.
                tokio::task::yield_now().await;
            }
        }
        // Pushing never waited on the dead backend (a wait would last at
        // least the 200 ms request timeout; scheduling noise on a loaded
        // machine is well below it).
        assert!(slowest_push < Duration::from_millis(150), "{slowest_push:?}");
        assert!(queue.flush(tokio::time::Instant::now() + Duration::from_secs(10)).await);

        assert_eq!(counts.total(), 10_000);
        assert!(counts.open.load(Ordering::SeqCst), "breaker should be open");
        assert_eq!(counts.opened.load(Ordering::SeqCst), 1);
        let errors = counts.error.load(Ordering::SeqCst);
        let dropped = counts.dropped_breaker.load(Ordering::SeqCst);
        eprintln!("after kill: {errors} errors, {dropped} dropped by the breaker, slowest push {slowest_push:?}");
        // Only a handful reached the dead server (3 consecutive failures open
        // the breaker; a few more may have been in flight); the rest were
        // dropped without touching it.
        assert!((3..500).contains(&errors), "errors {errors}");
        assert!(dropped > 6_000, "dropped {dropped}");

        // Back up. Until a probe succeeds, writes keep being dropped; after
        // the cooldown one probe goes through and closes the breaker.
        mc.restart();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut i = 10_000;
        while counts.open.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "breaker never closed");
            queue.try_push(set(i));
            i += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(counts.closed.load(Ordering::SeqCst), 1);
        eprintln!("breaker closed after {} probing pushes", i - 10_000);

        // Writes resume and land.
        let ok_before = counts.ok.load(Ordering::SeqCst);
        for j in 0..100 {
            queue.try_push(set(20_000 + j));
        }
        assert!(queue.flush(tokio::time::Instant::now() + Duration::from_secs(5)).await);
        assert_eq!(counts.ok.load(Ordering::SeqCst), ok_before + 100);
        let item = pool.get(b"shadow:20099").await.expect("get").expect("hit");
        assert_eq!(item.flags, 20_099);
        assert_eq!(item.data, Bytes::from_static(b"value 20099"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_drops_without_blocking_a_stalled_backend() {
    let mut mc = Memcached::start();
    let pool = Arc::new(single(mc.addr(), 300));
    let counts = Arc::new(Counts::default());
    let mut settings = QueueSettings::new(
        100,
        BreakerSettings {
            failures: 3,
            cooldown: Duration::from_secs(60),
        },
    );
    settings.max_in_flight = 10;
    let queue = ShadowQueue::start(settings, pool.clone(), counts.clone());
    bounded(30, async {
        wait_up(&pool).await;
        // A stopped server accepts bytes and never answers.
        mc.stop();
        let mut slowest_push = Duration::ZERO;
        let mut dropped = 0;
        for i in 0..5_000 {
            let started = Instant::now();
            if queue.try_push(set(i)) == PushResult::Dropped {
                dropped += 1;
            }
            slowest_push = slowest_push.max(started.elapsed());
        }
        // Everything the worker has finished so far (errors after the 300 ms
        // request timeout, then breaker drops). Read after the loop, so at
        // least what finished while it ran.
        let finished = counts.ok.load(Ordering::SeqCst)
            + counts.error.load(Ordering::SeqCst)
            + counts.dropped_breaker.load(Ordering::SeqCst);
        let accepted = 5_000 - dropped;
        eprintln!(
            "stalled: {accepted} accepted, {dropped} dropped, {finished} finished by the worker, slowest push {slowest_push:?}"
        );
        // Pushing never waited on the stalled backend (a wait would last at
        // least the 300 ms request timeout; scheduling noise is well below).
        assert!(slowest_push < Duration::from_millis(150), "{slowest_push:?}");
        // Every drop is reported as QueueFull, and only drops are.
        assert_eq!(counts.dropped_full.load(Ordering::SeqCst), dropped);
        // The queue is bounded: an op is accepted only into one of the 100
        // queue slots, which the worker frees by taking an op in flight
        // (at most 10 at once) or by finishing one. How many finish while
        // the loop runs depends on timing (a slow loop sees the request
        // timeout and the breaker), so they are counted, not assumed.
        assert!(
            accepted <= 100 + 10 + finished,
            "accepted {accepted} > 110 + {finished} finished: the queue is not bounded"
        );
        // The in-flight writes time out, the breaker opens, the rest drain.
        assert!(
            queue
                .flush(tokio::time::Instant::now() + Duration::from_secs(10))
                .await
        );
        assert!(counts.open.load(Ordering::SeqCst));
        assert_eq!(counts.total(), 5_000);
        mc.cont();
    })
    .await;
}

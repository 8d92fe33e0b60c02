//! Each worker thread's client connections, polled by one task.
//!
//! A session (`conn::run` and what its listener wraps around it) is not a
//! tokio task of its own: the worker's sessions sit in one
//! [`FuturesUnordered`] that a single task drives. Each session still gets
//! its own waker, so a wake-up (its socket readable, a reply in its
//! mailbox) polls that session alone; what goes away is tokio's per-task
//! work on every wake-up and poll (the task's state transitions, reference
//! counts, the scheduler's queue and context switch), paid twice per
//! unpipelined request (once for the request, once for its reply) and
//! shared here by every session ready in the same pass. Measured against a
//! task per session with the same connection loop (`NICE=-20
//! benches/hop.sh`, closed loop, five rounds alternated; BENCHMARKS.md,
//! "The connection loop as one poll"): ≈ 0.18 µs less proxy CPU per
//! unpipelined request, ≈ 2 %.
//!
//! The sessions of a poll share the driver task's cooperative budget:
//! once it is spent, their sockets report not ready and wake them after the
//! driver has yielded, and `FuturesUnordered` itself yields after polling
//! each ready session once, so one busy client cannot hold the others up.
//!
//! A listener counts its sessions in a [`Sessions`] (its drain waits for
//! them) and can drop the ones still running at the end of a drain
//! ([`abort`]), as it could abort tasks.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Notify;

/// A listener's live sessions, on every worker.
#[derive(Debug, Default)]
pub struct Sessions {
    live: AtomicUsize,
    ended: Notify,
}

impl Sessions {
    pub fn new() -> Arc<Sessions> {
        Arc::new(Sessions::default())
    }

    /// Sessions started and not yet ended (or dropped).
    pub fn len(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Count a session from now (accepted, not yet on its worker): it is
    /// counted until the returned guard, handed to [`spawn`], is dropped.
    pub fn enter(self: &Arc<Sessions>) -> Entered {
        self.live.fetch_add(1, Ordering::AcqRel);
        Entered(self.clone())
    }

    /// Wait until every session has ended.
    pub async fn all_ended(&self) {
        loop {
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            // Registered before the count is read: an end in between is
            // not missed.
            ended.as_mut().enable();
            if self.is_empty() {
                return;
            }
            ended.await;
        }
    }
}

/// A session counted in its listener's [`Sessions`].
#[derive(Debug)]
pub struct Entered(Arc<Sessions>);

impl Drop for Entered {
    fn drop(&mut self) {
        if self.0.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.ended.notify_waiters();
        }
    }
}

/// A session in the driver, with the count it belongs to.
struct Session {
    entered: Entered,
    future: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Future for Session {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.future.as_mut().poll(cx)
    }
}

/// This thread's sessions and the task that drives them.
struct Driver {
    sessions: FuturesUnordered<Session>,
    /// The driving task, to wake when a session is added.
    task: Option<Waker>,
}

thread_local! {
    static DRIVER: RefCell<Option<Driver>> = const { RefCell::new(None) };
}

/// Run `session` on this thread's driver (started with the first, on the
/// current runtime), counted by `entered` until it ends or is dropped.
pub fn spawn(entered: Entered, session: Pin<Box<dyn Future<Output = ()> + Send>>) {
    DRIVER.with(|driver| {
        let mut driver = driver.borrow_mut();
        let driver = driver.get_or_insert_with(|| {
            tokio::spawn(drive());
            Driver {
                sessions: FuturesUnordered::new(),
                task: None,
            }
        });
        driver.sessions.push(Session {
            entered,
            future: session,
        });
        if let Some(task) = &driver.task {
            task.wake_by_ref();
        }
    });
}

/// Drop this thread's sessions counted in `of` (the end of a drain).
pub fn abort(of: &Arc<Sessions>) {
    DRIVER.with(|driver| {
        let mut driver = driver.borrow_mut();
        let Some(driver) = driver.as_mut() else {
            return;
        };
        // The aborted ones are dropped here, inside the borrow, as ended
        // ones are in `drive`: a session's drop touches no driver.
        let kept: Vec<Session> = std::mem::take(&mut driver.sessions)
            .into_iter()
            .filter(|s| !Arc::ptr_eq(&s.entered.0, of))
            .collect();
        driver.sessions.extend(kept);
        if let Some(task) = &driver.task {
            task.wake_by_ref();
        }
    });
}

/// The driving task: poll whichever sessions were woken; never ends.
async fn drive() {
    // The runtime stopping drops this task: the thread's sessions go with
    // it (as its tasks would), and a later runtime on this thread starts a
    // driver of its own.
    struct Stopped;
    impl Drop for Stopped {
        fn drop(&mut self) {
            let driver = DRIVER
                .try_with(|d| d.try_borrow_mut().ok().and_then(|mut d| d.take()))
                .ok()
                .flatten();
            drop(driver);
        }
    }
    let _stopped = Stopped;
    std::future::poll_fn(|cx| {
        DRIVER.with(|driver| {
            let mut driver = driver.borrow_mut();
            let Some(driver) = driver.as_mut() else {
                return Poll::Pending;
            };
            if !driver
                .task
                .as_ref()
                .is_some_and(|t| t.will_wake(cx.waker()))
            {
                driver.task = Some(cx.waker().clone());
            }
            // A session that ends is dropped here, inside the borrow: its
            // drop touches no driver.
            while let Poll::Ready(Some(())) = driver.sessions.poll_next_unpin(cx) {}
            Poll::Pending
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn sessions_run_are_counted_until_they_end_and_abort_drops_only_its_own() {
        let ours = Sessions::new();
        let others = Sessions::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        spawn(
            ours.enter(),
            Box::pin(async move {
                let _ = rx.await;
            }),
        );
        spawn(ours.enter(), Box::pin(std::future::pending()));
        spawn(others.enter(), Box::pin(std::future::pending()));
        assert_eq!((ours.len(), others.len()), (2, 1));

        tx.send(()).expect("the session is waiting");
        tokio::time::timeout(Duration::from_secs(5), async {
            while ours.len() != 1 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the first session ended");

        abort(&ours);
        tokio::time::timeout(Duration::from_secs(5), ours.all_ended())
            .await
            .expect("aborted sessions are no longer counted");
        assert_eq!(others.len(), 1, "another listener's session runs on");
        abort(&others);
        assert!(others.is_empty());
    }
}

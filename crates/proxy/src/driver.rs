//! Each worker thread's client connections, polled by one task.
//!
//! A session (`conn::run` and what its listener wraps around it) is not a
//! tokio task of its own: the worker's sessions sit in one table that a
//! single task drives. Each session still gets its own waker, so a wake-up
//! (its socket readable, a reply in its mailbox) polls that session alone;
//! what goes away is tokio's per-task work on every wake-up and poll (the
//! task's state transitions, reference counts, the scheduler's queue and
//! context switch), paid twice per unpipelined request (once for the
//! request, once for its reply) and shared here by every session ready in
//! the same pass. Measured against a task per session with the same
//! connection loop (`NICE=-20 benches/hop.sh`, closed loop, five rounds
//! alternated; BENCHMARKS.md, "The connection loop as one poll"): ≈ 0.18 µs
//! less proxy CPU per unpipelined request, ≈ 2 %.
//!
//! # Why a table and not `FuturesUnordered`
//!
//! The table is a slab of sessions and a ready list of their slots, both
//! this thread's own: a wake-up on the driver's thread (nearly all of
//! them: the I/O driver, the timer and the shard connections run there)
//! costs one atomic swap (the session's "queued" flag) and a push on a
//! `RefCell`'d list, and a poll none. `futures_util`'s `FuturesUnordered`,
//! built for wake-ups from any thread, paid about a dozen atomic
//! operations per wake-up and poll (a weak reference upgraded, an
//! intrusive queue, its list unlinked and relinked around each poll); it
//! was ≈ 8 % of the proxy's user-space time per unpipelined request, the
//! table ≈ 3 % (`perf record -e cpu-clock:u`, BENCHMARKS.md, "Session
//! driver: a table"). A wake-up from another thread goes through a
//! mutex-guarded list and wakes the driver's task.
//!
//! A pass polls the sessions woken before it began, once each; those
//! woken during it (a session that woke itself included) wait for the
//! next pass, after the task has yielded to the I/O driver and the other
//! tasks, so one busy client cannot hold the others up. The sessions of a
//! pass share the driver task's cooperative budget: once it is spent,
//! their sockets report not ready and wake them after the yield.
//!
//! A listener counts its sessions in a [`Sessions`] (its drain waits for
//! them) and can drop the ones still running at the end of a drain
//! ([`abort`]), as it could abort tasks.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

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

type SessionFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A session's place in its driver's table, with the session's own
/// generation (a wake-up for an ended session finds another generation in
/// the slot, or no slot, and is dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    slot: u32,
    gen: u32,
}

/// A session's waker: puts the session's key on its driver's ready list.
struct SessionWaker {
    key: Key,
    /// The driver it belongs to ([`Here::driver`] on its thread).
    driver: u64,
    /// On a ready list already: another wake-up adds nothing.
    queued: AtomicBool,
    /// Where wake-ups from other threads go.
    remote: Arc<Remote>,
}

impl Wake for SessionWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let here = HERE
            .try_with(|here| here.driver.get() == self.driver && here.make_ready(self.key))
            .unwrap_or(false);
        if !here {
            self.remote.make_ready(self.key);
        }
    }
}

/// A driver's ready list for wake-ups from other threads (rare: a reply
/// relayed through another thread's connection, the shutdown signal), and
/// the driver's task to wake for them.
#[derive(Default)]
struct Remote {
    any: AtomicBool,
    inner: Mutex<RemoteInner>,
}

#[derive(Default)]
struct RemoteInner {
    ready: Vec<Key>,
    task: Option<Waker>,
}

impl Remote {
    fn lock(&self) -> std::sync::MutexGuard<'_, RemoteInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn make_ready(&self, key: Key) {
        let task = {
            let mut inner = self.lock();
            inner.ready.push(key);
            self.any.store(true, Ordering::Release);
            inner.task.clone()
        };
        if let Some(task) = task {
            task.wake();
        }
    }

    /// Move what other threads woke onto `ready`.
    fn take_into(&self, ready: &mut Vec<Key>) {
        if self.any.swap(false, Ordering::AcqRel) {
            ready.append(&mut self.lock().ready);
        }
    }
}

/// The driver's side of this thread that wakers reach: apart from
/// [`DRIVER`], which is borrowed while sessions are polled.
#[derive(Default)]
struct Here {
    /// The id of the driver on this thread (0: none).
    driver: Cell<u64>,
    /// Sessions woken since the driver's last pass.
    ready: RefCell<Vec<Key>>,
    /// The last pass's list, empty, kept for its room.
    spare: RefCell<Vec<Key>>,
    /// The driving task is running or already woken: a wake-up only adds
    /// to the list.
    notified: Cell<bool>,
    task: RefCell<Option<Waker>>,
}

impl Here {
    /// Put `key` on the ready list and wake the driving task if it is
    /// not running or woken already; false if the list is busy (the
    /// caller goes through the remote list instead).
    fn make_ready(&self, key: Key) -> bool {
        let Ok(mut ready) = self.ready.try_borrow_mut() else {
            return false;
        };
        ready.push(key);
        drop(ready);
        if !self.notified.replace(true) {
            if let Ok(task) = self.task.try_borrow() {
                if let Some(task) = task.as_ref() {
                    task.wake_by_ref();
                }
            }
        }
        true
    }
}

/// A session in the driver.
struct Running {
    /// Its listener's count, until it ends or is dropped.
    entered: Entered,
    future: SessionFuture,
    /// `wake` as a `Waker`, built once: a poll's context costs no
    /// reference count.
    waker: Waker,
    /// Its key (with its generation) and "queued" flag.
    wake: Arc<SessionWaker>,
}

/// A table emptied with room for more slots than this gives the room back
/// (a burst of connections must not keep its table for ever).
const KEEP_SLOTS: usize = 64;

/// This thread's sessions.
struct Driver {
    id: u64,
    /// Every slot is either running a session or on `free`.
    slots: Vec<Option<Running>>,
    free: Vec<u32>,
    /// The next session's generation: every session gets a new one, so a
    /// key outlives its slot, the table's room given back included.
    next_gen: u32,
    remote: Arc<Remote>,
}

thread_local! {
    static DRIVER: RefCell<Option<Driver>> = const { RefCell::new(None) };
    static HERE: Here = Here::default();
}

/// Driver ids, unique in the process (a thread may run one runtime after
/// another, each with a driver).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Driver {
    fn start() -> Driver {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        HERE.with(|here| here.driver.set(id));
        tokio::spawn(drive());
        Driver {
            id,
            slots: Vec::new(),
            free: Vec::new(),
            next_gen: 0,
            remote: Arc::new(Remote::default()),
        }
    }

    /// Add a session; its waker, to poll it a first time.
    fn insert(&mut self, entered: Entered, future: SessionFuture) -> Arc<SessionWaker> {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            (self.slots.len() - 1) as u32
        });
        let gen = self.next_gen;
        self.next_gen = gen.wrapping_add(1);
        let wake = Arc::new(SessionWaker {
            key: Key { slot, gen },
            driver: self.id,
            queued: AtomicBool::new(false),
            remote: self.remote.clone(),
        });
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = Some(Running {
                entered,
                future,
                waker: Waker::from(wake.clone()),
                wake: wake.clone(),
            });
        }
        wake
    }

    /// Poll the session at `key` if it is still there; drop it if it ended.
    fn poll(&mut self, key: Key) {
        let Some(running) = self
            .slots
            .get_mut(key.slot as usize)
            .and_then(Option::as_mut)
            .filter(|r| r.wake.key.gen == key.gen)
        else {
            return;
        };
        // Cleared before the poll: a wake-up during it queues the session
        // again.
        running.wake.queued.store(false, Ordering::Release);
        let mut cx = Context::from_waker(&running.waker);
        if running.future.as_mut().poll(&mut cx).is_ready() {
            self.remove(key.slot);
        }
    }

    /// Drop the session in `slot` (its drop touches no driver).
    fn remove(&mut self, slot: u32) {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        if s.take().is_none() {
            return;
        }
        self.free.push(slot);
        let emptied = self.free.len() == self.slots.len();
        if emptied && self.slots.capacity() > KEEP_SLOTS {
            self.slots = Vec::new();
            self.free = Vec::new();
        }
    }
}

/// Run `session` on this thread's driver (started with the first, on the
/// current runtime), counted by `entered` until it ends or is dropped.
pub fn spawn(entered: Entered, session: SessionFuture) {
    let wake = DRIVER.with(|driver| {
        let mut driver = driver.borrow_mut();
        driver
            .get_or_insert_with(Driver::start)
            .insert(entered, session)
    });
    wake.wake_by_ref();
}

/// Drop this thread's sessions counted in `of` (the end of a drain).
pub fn abort(of: &Arc<Sessions>) {
    DRIVER.with(|driver| {
        let mut driver = driver.borrow_mut();
        let Some(driver) = driver.as_mut() else {
            return;
        };
        let theirs: Vec<u32> = driver
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.as_ref().is_some_and(|r| Arc::ptr_eq(&r.entered.0, of)))
            .map(|(i, _)| i as u32)
            .collect();
        // Dropped here, inside the borrow, as ended ones are in `drive`.
        for slot in theirs {
            driver.remove(slot);
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
            let _ = HERE.try_with(|here| {
                here.driver.set(0);
                here.notified.set(false);
                here.task.replace(None);
                here.ready.replace(Vec::new());
            });
            drop(driver);
        }
    }
    let _stopped = Stopped;
    std::future::poll_fn(|cx| HERE.with(|here| pass(here, cx))).await
}

/// One pass of the driver: poll each session woken before it began, once.
/// Those woken during it wait for the next pass, after the task has
/// yielded (to the I/O driver and the other tasks).
fn pass(here: &Here, cx: &mut Context<'_>) -> Poll<()> {
    here.notified.set(true);
    let mut batch = here.spare.take();
    std::mem::swap(&mut batch, &mut *here.ready.borrow_mut());
    DRIVER.with(|driver| {
        let mut driver = driver.borrow_mut();
        let Some(driver) = driver.as_mut() else {
            return;
        };
        let mut task = here.task.borrow_mut();
        if !task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            *task = Some(cx.waker().clone());
            driver.remote.lock().task = Some(cx.waker().clone());
        }
        drop(task);
        driver.remote.take_into(&mut batch);
        for key in batch.drain(..) {
            driver.poll(key);
        }
    });
    here.spare.replace(batch);
    if here.ready.borrow().is_empty() {
        here.notified.set(false);
    } else {
        cx.waker().wake_by_ref();
    }
    Poll::Pending
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

    /// A session that counts its polls and keeps its waker for the test.
    fn counting(
        polls: Arc<AtomicUsize>,
        waker: Arc<Mutex<Option<Waker>>>,
        ready: Arc<AtomicBool>,
    ) -> SessionFuture {
        Box::pin(std::future::poll_fn(move |cx| {
            polls.fetch_add(1, Ordering::SeqCst);
            *waker.lock().expect("not poisoned") = Some(cx.waker().clone());
            if ready.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }))
    }

    async fn until(what: &str, done: impl Fn() -> bool) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while !done() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
    }

    #[tokio::test]
    async fn a_wake_from_another_thread_polls_the_session() {
        let sessions = Sessions::new();
        let polls = Arc::new(AtomicUsize::new(0));
        let waker = Arc::new(Mutex::new(None));
        let ready = Arc::new(AtomicBool::new(false));
        spawn(
            sessions.enter(),
            counting(polls.clone(), waker.clone(), ready.clone()),
        );
        until("the first poll", || polls.load(Ordering::SeqCst) == 1).await;
        ready.store(true, Ordering::SeqCst);
        let theirs = waker.lock().expect("not poisoned").clone();
        std::thread::spawn(move || theirs.expect("polled once").wake())
            .join()
            .expect("the waking thread");
        until("the session ended", || sessions.is_empty()).await;
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_wake_for_an_ended_session_does_not_poll_the_next_in_its_slot() {
        let sessions = Sessions::new();
        let (first_polls, first_waker) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(None)));
        let first_ready = Arc::new(AtomicBool::new(false));
        spawn(
            sessions.enter(),
            counting(
                first_polls.clone(),
                first_waker.clone(),
                first_ready.clone(),
            ),
        );
        until("the first session's poll", || {
            first_polls.load(Ordering::SeqCst) == 1
        })
        .await;
        let stale = first_waker
            .lock()
            .expect("not poisoned")
            .clone()
            .expect("polled");
        first_ready.store(true, Ordering::SeqCst);
        stale.wake_by_ref();
        until("the first session ended", || sessions.is_empty()).await;

        // The next session takes the freed slot.
        let polls = Arc::new(AtomicUsize::new(0));
        spawn(
            sessions.enter(),
            counting(
                polls.clone(),
                Arc::new(Mutex::new(None)),
                Arc::new(AtomicBool::new(false)),
            ),
        );
        until("the second session's poll", || {
            polls.load(Ordering::SeqCst) == 1
        })
        .await;
        stale.wake_by_ref();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "polled for a stale wake-up"
        );
        abort(&sessions);
    }

    #[tokio::test]
    async fn a_session_that_always_wakes_itself_does_not_starve_the_others() {
        let sessions = Sessions::new();
        spawn(
            sessions.enter(),
            Box::pin(std::future::poll_fn(|cx| {
                cx.waker().wake_by_ref();
                Poll::<()>::Pending
            })),
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let others = Sessions::new();
        spawn(
            others.enter(),
            Box::pin(async move {
                let _ = rx.await;
            }),
        );
        tokio::task::yield_now().await;
        tx.send(()).expect("the session is waiting");
        until("the other session ended", || others.is_empty()).await;
        abort(&sessions);
        assert!(sessions.is_empty());
    }

    #[tokio::test]
    async fn an_emptied_table_gives_its_room_back() {
        let sessions = Sessions::new();
        let (tx, rx) = tokio::sync::watch::channel(false);
        for _ in 0..(KEEP_SLOTS * 2) {
            let mut rx = rx.clone();
            spawn(
                sessions.enter(),
                Box::pin(async move {
                    let _ = rx.wait_for(|go| *go).await;
                }),
            );
        }
        let room = || DRIVER.with(|d| d.borrow().as_ref().map_or(0, |d| d.slots.capacity()));
        until("every session started", || room() >= KEEP_SLOTS * 2).await;
        tx.send_replace(true);
        until("every session ended", || sessions.is_empty()).await;
        assert_eq!(room(), 0, "the table kept its room");
    }
}

//! Worker threads (`server.threads` > 1): one tokio current-thread runtime
//! per worker, each with its own I/O driver (epoll instance) and timer
//! wheel. The acceptor hands each client connection to the next worker in
//! turn, and connection `j` of every Redis shard runs on worker
//! `j % threads`; a session on worker `w` uses a lane congruent to `w`
//! modulo the worker count (see [`lane`]), so
//! with `connections_per_shard` a multiple of the worker count (the
//! default: one per worker) a request's hand-off to its shard connection
//! and the reply's way back are wake-ups on one thread, never a
//! cross-thread notification, and no worker takes another's timer or I/O
//! driver lock. memcached's own threads and mcrouter's and Envoy's workers
//! are built the same way. docs/multicore.md has the count this design
//! removed, BENCHMARKS.md ("One runtime per worker, A/B") the measurement:
//! with one worker, 9-11 % less CPU per request than the multi-thread
//! runtime of one worker it replaced; with two, no cross-thread wake-up.
//!
//! Each worker is also the home of its sessions' reply mailboxes
//! (`backend::mailbox`): a reply from a connection on the same worker goes
//! straight into the session's queue, with no channel.
//!
//! A connection that carries every worker's traffic (a shard's replica
//! connection, its near-cache invalidation connection) goes to the workers
//! in turn. The rest runs on the main thread's runtime: the accept loops,
//! signals, SIGHUP reloads, the admin endpoint, health checks and the
//! other background tasks. With one worker there is no pool: the main thread's
//! runtime is the worker (`run.rs`).

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread::JoinHandle;

use tokio::runtime::{EnterGuard, Handle};
use tokio::sync::oneshot;

/// The workers' runtimes, once started (never with one worker).
static WORKERS: OnceLock<Workers> = OnceLock::new();

thread_local! {
    /// This thread's worker index (`None` off the workers).
    static INDEX: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The workers' runtimes and the round-robin positions.
#[derive(Debug)]
pub struct Workers {
    handles: Vec<Handle>,
    /// The next worker the acceptor hands a connection to.
    next_client: AtomicUsize,
    /// The next worker a shared connection goes to.
    next_shared: AtomicUsize,
}

/// The running worker threads; [`Pool::stop`] ends them.
#[derive(Debug)]
pub struct Pool {
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

/// Start `threads` workers and publish their runtimes for the functions
/// below. Once per process.
pub fn start(threads: usize) -> io::Result<Pool> {
    if WORKERS.get().is_some() {
        return Err(io::Error::other("worker threads already started"));
    }
    let (pool, workers) = Pool::start(threads)?;
    WORKERS
        .set(workers)
        .map_err(|_| io::Error::other("worker threads already started"))?;
    Ok(pool)
}

impl Pool {
    /// Start `threads` worker threads (named `memshift-wN`), each running
    /// a current-thread runtime until [`Pool::stop`].
    pub fn start(threads: usize) -> io::Result<(Pool, Workers)> {
        let mut pool = Pool {
            stops: Vec::with_capacity(threads),
            threads: Vec::with_capacity(threads),
        };
        let mut handles = Vec::with_capacity(threads);
        for index in 0..threads {
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("memshift-w{index}"))
                .spawn(move || run_worker(index, ready_tx, stop_rx))?;
            pool.stops.push(stop_tx);
            pool.threads.push(thread);
            let handle = ready_rx
                .recv()
                .map_err(|_| io::Error::other("a worker thread ended while starting"))??;
            handles.push(handle);
        }
        let workers = Workers {
            handles,
            next_client: AtomicUsize::new(0),
            next_shared: AtomicUsize::new(0),
        };
        Ok((pool, workers))
    }

    /// Stop every worker (what still runs on them is dropped) and wait
    /// for their threads.
    pub fn stop(self) {
        drop(self.stops);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

/// A worker's runtime: the current-thread scheduler with I/O and timers
/// (also the main thread's, which is the worker when there is one).
pub fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

fn run_worker(
    index: usize,
    ready: std::sync::mpsc::Sender<io::Result<Handle>>,
    stop: oneshot::Receiver<()>,
) {
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    INDEX.with(|i| i.set(Some(index)));
    // Its sessions' reply mailboxes live on this thread.
    let mailboxes = crate::backend::mailbox::install();
    if ready.send(Ok(runtime.handle().clone())).is_err() {
        return;
    }
    // Its tasks run while this waits; a dropped sender stops it too.
    runtime.block_on(async {
        tokio::select! {
            _ = stop => {}
            () = mailboxes => {}
        }
    });
}

impl Workers {
    /// The worker the next accepted connection goes to (round robin).
    pub fn next_client(&self) -> &Handle {
        self.pick(&self.next_client)
    }

    /// The worker connection `index` of a backend runs on.
    pub fn for_connection(&self, index: usize) -> &Handle {
        &self.handles[index % self.handles.len()]
    }

    /// The next worker in turn for a shared connection.
    pub fn next_shared(&self) -> &Handle {
        self.pick(&self.next_shared)
    }

    fn pick(&self, turn: &AtomicUsize) -> &Handle {
        &self.handles[turn.fetch_add(1, Ordering::Relaxed) % self.handles.len()]
    }

    pub fn count(&self) -> usize {
        self.handles.len()
    }
}

/// The process's workers, `None` with one worker (and in unit tests).
fn published() -> Option<&'static Workers> {
    WORKERS.get().filter(|w| w.count() > 0)
}

/// The worker the next accepted connection goes to (round robin); `None`
/// with one worker (it stays on the accepting runtime).
pub fn next() -> Option<&'static Handle> {
    published().map(Workers::next_client)
}

/// Run `work` on every worker thread (on this one, with one worker) and
/// wait until each has.
pub async fn on_each<F>(work: F)
where
    F: Fn() + Clone + Send + 'static,
{
    let Some(workers) = published() else {
        work();
        return;
    };
    let done: Vec<_> = workers
        .handles
        .iter()
        .map(|h| {
            h.spawn({
                let work = work.clone();
                async move { work() }
            })
        })
        .collect();
    for handle in done {
        // A worker that stopped has no sessions left to act on.
        let _ = handle.await;
    }
}

/// Enter the runtime of the worker that connection `index` of a backend
/// runs on, so that what is spawned until the guard drops runs there;
/// `None` (spawn on the current runtime) with one worker.
pub fn enter_for_connection(index: usize) -> Option<EnterGuard<'static>> {
    published().map(|w| w.for_connection(index).enter())
}

/// Enter the runtime of the next worker in turn, for a background task
/// that carries client traffic for every worker (a shard's replica
/// connection, its near-cache invalidation connection): spread over the
/// workers rather than all on the main thread. `None` with one worker.
pub fn enter_next_shared() -> Option<EnterGuard<'static>> {
    published().map(|w| w.next_shared().enter())
}

/// The backend connection lane of a session numbered `id` that starts on
/// this thread: on a worker `w` of `n`, `w + n * id`, which is `w` modulo
/// `n`, so with `connections_per_shard` a multiple of `n` the session's
/// shard connections are the ones [`enter_for_connection`] put on its own
/// worker (and consecutive sessions spread over them). Off the workers
/// (one worker, tests), `id`.
pub fn lane(id: u64) -> usize {
    lane_on(
        INDEX.with(Cell::get),
        published().map_or(0, Workers::count),
        id,
    )
}

fn lane_on(worker: Option<usize>, workers: usize, id: u64) -> usize {
    let id = id as usize;
    match worker {
        Some(w) => w.wrapping_add(workers.wrapping_mul(id)),
        None => id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_lanes_are_its_index_modulo_the_worker_count() {
        assert_eq!(lane_on(None, 4, 7), 7);
        for w in 0..4 {
            for id in [0, 1, 2, 99, u64::MAX] {
                let lane = lane_on(Some(w), 4, id);
                assert_eq!(lane % 4, w);
                // 8 connections per shard (a multiple of 4): the lane's
                // connection is one of the two on worker w.
                assert_eq!((lane % 8) % 4, w);
            }
        }
        // Consecutive sessions on a worker spread over its connections.
        assert_ne!(lane_on(Some(1), 4, 0) % 8, lane_on(Some(1), 4, 1) % 8);
    }

    /// A pool of its own (the process-wide one stays unset: other tests'
    /// tasks must not land on these runtimes).
    #[test]
    fn connections_and_their_backend_lanes_land_on_the_same_worker() {
        assert_eq!(lane(7), 7, "off the workers the lane is the session id");
        let (pool, workers) = Pool::start(3).expect("start workers");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            // Round robin: three accepted connections, three workers.
            let mut seen = Vec::new();
            for id in 0..3u64 {
                let (w, lane) = workers
                    .next_client()
                    .spawn(async move {
                        let w = INDEX.with(Cell::get);
                        (w, lane_on(w, 3, id))
                    })
                    .await
                    .expect("task");
                let w = w.expect("ran on a worker");
                assert_eq!(lane % 3, w);
                seen.push(w);
            }
            seen.sort_unstable();
            assert_eq!(seen, [0, 1, 2]);
            // Backend connection 4 runs on worker 4 % 3.
            let task = {
                let _on = workers.for_connection(4).enter();
                tokio::spawn(async { INDEX.with(Cell::get) })
            };
            assert_eq!(task.await.expect("task"), Some(1));
            let shared: Vec<_> = (0..3).map(|_| workers.next_shared().clone()).collect();
            for (i, h) in shared.iter().enumerate() {
                let w = h
                    .spawn(async { INDEX.with(Cell::get) })
                    .await
                    .expect("task");
                assert_eq!(w, Some(i), "shared connections go round the workers");
            }
        });
        assert!(next().is_none(), "the process-wide pool is untouched");
        pool.stop();
    }
}

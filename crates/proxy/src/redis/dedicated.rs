//! Connections a RESP session holds for itself, outside the shared
//! pipelined ones: for `WATCH` … `EXEC` (the watch lives on the connection
//! that sent it), for one transaction (`MULTI`, the queued commands and
//! `EXEC` written together on a connection nobody else writes to), and for
//! one blocking call (`BLPOP` & co. would stall every session behind it on
//! a shared connection).
//!
//! Each is a task owning one socket, opened (TLS, `AUTH`, `SCRIPT LOAD`, as
//! the pipelined connections do) when the first job comes. The session
//! sends it jobs; a job's last reply goes to the session's reply channel
//! like any backend reply. Dropping the [`Dedicated`] handle closes the
//! socket (a job in flight is abandoned: a client that left mid-`BLPOP`
//! stops blocking the shard), which also drops any `WATCH`.
//!
//! How many exist at once is bounded per proxy by
//! `redis.max_dedicated_connections` ([`DedicatedLimit`]). One whose last
//! job left nothing on it (an `EXEC` answered, a blocking call answered)
//! is kept idle for the next session that needs the same shard, so a
//! transaction does not pay a connection setup each time; an idle one is
//! closed when a new connection needs its permit, or when its socket says
//! anything (the server closed it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use memshift_pipeline::{BackendError, Connector};
use memshift_protocol::resp::{Frame, ReplyParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::connection::{RedisConnector, ShardReader, ShardWriter};
use super::shard::Shard;
use super::ReplyTo;

/// The per-proxy bound on held connections, its metrics, and the idle
/// connections kept for the next session that needs one.
#[derive(Debug)]
pub struct DedicatedLimit {
    permits: Arc<Semaphore>,
    pub max: usize,
    in_use: metrics::Gauge,
    refused: metrics::Counter,
    /// Connections whose last job ended cleanly (no WATCH, no MULTI, the
    /// socket open), by shard address. Each holds its permit; one is closed
    /// when a new connection needs that permit.
    idle: Mutex<Vec<Dedicated>>,
}

/// `redis.max_dedicated_connections` is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("every dedicated connection is in use")]
pub struct LimitReached;

impl DedicatedLimit {
    pub fn new(max: usize, in_use: metrics::Gauge, refused: metrics::Counter) -> DedicatedLimit {
        DedicatedLimit {
            permits: Arc::new(Semaphore::new(max)),
            max,
            in_use,
            refused,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A connection of its own to `shard`: an idle one, else a new one
    /// (opened when its first job comes), or [`LimitReached`] at once.
    pub fn open(&self, shard: &Shard) -> Result<Dedicated, LimitReached> {
        let addr = shard.addr();
        if let Some(conn) = self.take_idle(|a| a == addr) {
            return Ok(conn);
        }
        let held = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Held::new(permit, &self.in_use),
            // Every permit is taken: close an idle connection (of any
            // shard) for its permit.
            Err(_) => match self.take_idle(|_| true) {
                Some(Dedicated { held, .. }) => held,
                None => {
                    self.refused.increment(1);
                    return Err(LimitReached);
                }
            },
        };
        let connector = RedisConnector {
            settings: shard.settings().clone(),
            metrics: shard.metrics().clone(),
            cluster: None,
            last_target: Default::default(),
            // Writes (EXEC) and blocking pops: the primary, ROLE-checked.
            replica: false,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let clean = Arc::new(AtomicBool::new(false));
        tokio::spawn(run(connector, rx, clean.clone()));
        Ok(Dedicated {
            jobs: tx,
            clean,
            addr: addr.to_string(),
            held,
        })
    }

    /// A connection whose work is done: kept for reuse when its last job
    /// left it clean, else closed.
    pub fn release(&self, conn: Dedicated) {
        if !conn.clean.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(conn);
        }
    }

    fn take_idle(&self, matches: impl Fn(&str) -> bool) -> Option<Dedicated> {
        let mut idle = self.idle.lock().ok()?;
        // A connection that broke while idle is dropped on the way.
        idle.retain(|c| c.clean.load(Ordering::Acquire));
        let at = idle.iter().rposition(|c| matches(&c.addr))?;
        Some(idle.swap_remove(at))
    }
}

/// Counts a connection as open, and holds its permit, until dropped.
#[derive(Debug)]
struct Held {
    _permit: OwnedSemaphorePermit,
    in_use: metrics::Gauge,
}

impl Held {
    fn new(permit: OwnedSemaphorePermit, in_use: &metrics::Gauge) -> Held {
        in_use.increment(1.0);
        Held {
            _permit: permit,
            in_use: in_use.clone(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.in_use.decrement(1.0);
    }
}

/// The session's end of a held connection; dropping it closes the socket
/// and frees its permit.
#[derive(Debug)]
pub struct Dedicated {
    jobs: mpsc::UnboundedSender<Job>,
    /// Set by the connection task: its last job ended with the socket open
    /// and nothing left on it (no WATCH, no MULTI).
    clean: Arc<AtomicBool>,
    /// The shard's address (idle connections are found by it).
    addr: String,
    held: Held,
}

impl Dedicated {
    /// Queue a job (answered on `job.reply`).
    pub fn send(&self, job: Job) {
        self.clean.store(false, Ordering::Release);
        if let Err(mpsc::error::SendError(job)) = self.jobs.send(job) {
            job.reply.send(Err(BackendError::Unavailable));
        }
    }
}

/// Commands written at once; the last of their `replies` replies answers.
#[derive(Debug)]
pub struct Job {
    pub bytes: Bytes,
    pub replies: usize,
    /// How long the replies may take (`None`: forever, `BLPOP key 0`).
    pub timeout: Option<Duration>,
    /// The answer when the connection breaks (or times out) after the bytes
    /// were written: the client must not be told a write failed when it
    /// may have happened.
    pub if_lost: &'static [u8],
    /// For a job that needs the state an earlier job left on the
    /// connection (a `WATCH`): the answer when that connection was lost
    /// before the job came (nothing is sent). `None`: a new connection
    /// does.
    pub if_gone: Option<Frame>,
    /// Answered, it leaves nothing on the connection (`EXEC`, a blocking
    /// call; not `WATCH`): the connection may serve another session.
    pub leaves_clean: bool,
    pub reply: ReplyTo,
}

async fn run(
    connector: RedisConnector,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    clean: Arc<AtomicBool>,
) {
    let mut conn: Option<Conn> = None;
    let mut opened = false;
    loop {
        let job = match conn.as_mut() {
            // Connected and idle: a connection that says anything (or
            // closes) now is broken; a WATCH on it is gone. So is one to a
            // primary Sentinel replaced: a transaction sent there could be
            // acknowledged and then lost when it is demoted.
            // The move is checked first: a job that comes after memshift
            // learnt of the switch never goes to the old primary.
            Some(c) => {
                let job = tokio::select! {
                    biased;
                    () = connector.moved() => None,
                    _ = c.reader.read_buf(&mut c.buf) => None,
                    job = jobs.recv() => Some(job),
                };
                let Some(job) = job else {
                    clean.store(false, Ordering::Release);
                    conn = None;
                    continue;
                };
                job
            }
            None => jobs.recv().await,
        };
        let Some(job) = job else {
            return;
        };
        if conn.is_none() {
            if let (true, Some(frame)) = (opened, &job.if_gone) {
                job.reply.send(Ok(frame.clone()));
                continue;
            }
            opened = true;
            match connect(&connector).await {
                Some(c) => conn = Some(c),
                None => {
                    job.reply.send(Err(BackendError::Unavailable));
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else {
            continue;
        };
        let outcome = tokio::select! {
            r = run_job(c, &job) => r,
            // The session let go (its client left): abandon the call.
            _ = jobs_closed(&mut jobs) => return,
        };
        match outcome {
            Some(frame) => {
                // Before the reply: the session may release it on seeing it.
                clean.store(job.leaves_clean, Ordering::Release);
                job.reply.send(Ok(frame))
            }
            None => {
                conn = None;
                job.reply
                    .send(Ok(Frame::Error(Bytes::from_static(job.if_lost))));
            }
        }
    }
}

/// Resolves once the session dropped its handle.
async fn jobs_closed(jobs: &mut mpsc::UnboundedReceiver<Job>) {
    // Jobs come one at a time (the session waits for each reply), so
    // anything received here is a protocol slip: closing is what matters.
    while jobs.recv().await.is_some() {}
}

struct Conn {
    reader: ShardReader,
    writer: ShardWriter,
    parser: ReplyParser,
    buf: BytesMut,
}

async fn connect(connector: &RedisConnector) -> Option<Conn> {
    let bound = connector.settings.connect_timeout;
    match tokio::time::timeout(bound, connector.connect()).await {
        Ok(Ok((reader, writer))) => Some(Conn {
            reader,
            writer,
            parser: ReplyParser::new(),
            buf: BytesMut::with_capacity(4096),
        }),
        Ok(Err(e)) => {
            tracing::info!(shard = %connector.settings.addr, error = %e, "dedicated redis connection failed");
            None
        }
        Err(_) => {
            tracing::info!(shard = %connector.settings.addr, "dedicated redis connection timed out");
            None
        }
    }
}

/// Write the job and read its replies: the last one, or `None` when the
/// connection broke or the replies took too long.
async fn run_job(c: &mut Conn, job: &Job) -> Option<Frame> {
    let work = async {
        c.writer.write_all(&job.bytes).await.ok()?;
        c.writer.flush().await.ok()?;
        let mut last = None;
        for _ in 0..job.replies {
            last = Some(read_frame(c).await?);
        }
        last
    };
    let frame = match job.timeout {
        Some(t) => tokio::time::timeout(t, work).await.ok()??,
        None => work.await?,
    };
    Some(cluster_redirect_as_error(frame))
}

async fn read_frame(c: &mut Conn) -> Option<Frame> {
    loop {
        if let Some(frame) = c.parser.parse(&mut c.buf).ok()? {
            return Some(frame);
        }
        if c.reader.read_buf(&mut c.buf).await.ok()? == 0 {
            return None;
        }
    }
}

/// A cluster node that no longer serves the key's slot answers `-MOVED`
/// (`-ASK` while it migrates): nothing ran; a client that believes it
/// talks to one Redis gets a plain error rather than a redirect it cannot
/// follow. (A transaction's queued commands answered so are relayed as
/// Redis' own `-EXECABORT`.)
fn cluster_redirect_as_error(frame: Frame) -> Frame {
    match &frame {
        Frame::Error(e) if e.starts_with(b"MOVED ") || e.starts_with(b"ASK ") => Frame::Error(
            Bytes::from_static(
                b"TRYAGAIN memshift: the key's cluster slot moved during the call; nothing was applied, retry",
            ),
        ),
        _ => frame,
    }
}

#[cfg(test)]
mod tests {
    use super::cluster_redirect_as_error;
    use bytes::Bytes;
    use memshift_protocol::resp::Frame;

    #[test]
    fn redirects_become_plain_errors() {
        let moved = Frame::Error(Bytes::from_static(b"MOVED 3999 127.0.0.1:6381"));
        let Frame::Error(e) = cluster_redirect_as_error(moved) else {
            panic!("an error");
        };
        assert!(e.starts_with(b"TRYAGAIN memshift: "));
        let other = Frame::Error(Bytes::from_static(b"WRONGTYPE x"));
        assert_eq!(cluster_redirect_as_error(other.clone()), other);
    }
}

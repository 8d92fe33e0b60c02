//! The connection task: supervisor (reconnect, backoff, fail fast while
//! down) around one `select!` that batches requests, writes, reads replies
//! into FIFO slots and notices a backend that stopped answering.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::codec::{Codec, Connector, Delivery, Event, Request};
use crate::error::{BackendError, Broken, ConnectError};
use crate::queue::{self, Refused};

/// Largest batch pulled from the queue before writing.
pub const MAX_BATCH_BYTES: usize = 256 * 1024;
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);
const READ_CHUNK: usize = 16 * 1024;
/// A request arriving within this long of the previous one finds the
/// connection busy: it waits one scheduler pass for company even when
/// nothing is in flight (see `serve`).
const BUSY_GAP: Duration = Duration::from_millis(1);
/// An idle connection pings its server this often (codecs with a ping).
const IDLE_PING: Duration = Duration::from_secs(1);
/// A connection that lived this long before breaking (dropped by the server
/// when idle, say) is retried at once; a flapping one waits the backoff.
const LONG_LIVED: Duration = Duration::from_secs(1);

/// How long a connection waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// A request whose reply is not complete this long after it was
    /// written (or after the reply before it was complete) resets the
    /// connection (its requests get [`BackendError::Timeout`]).
    pub timeout: Duration,
    /// Bound on connecting plus the handshake.
    pub connect_timeout: Duration,
}

/// The sending side of one pipelined connection; the connection task runs
/// until every `Pipeline` for it is dropped.
pub struct Pipeline<C: Codec> {
    tx: queue::Sender<C>,
    up: Arc<AtomicBool>,
}

impl<C: Codec> std::fmt::Debug for Pipeline<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("up", &self.is_up())
            .finish_non_exhaustive()
    }
}

impl<C: Codec> Pipeline<C> {
    /// Spawn the connection task (on the current runtime); it connects in
    /// the background. `queue_depth` requests may wait before new ones are
    /// refused with [`BackendError::Busy`].
    pub fn start<K>(connector: K, settings: Settings, queue_depth: usize) -> Pipeline<C>
    where
        K: Connector<Codec = C>,
    {
        let (tx, rx) = queue::channel(queue_depth);
        let up = Arc::new(AtomicBool::new(false));
        tokio::spawn(run(connector, settings, rx, up.clone()));
        Pipeline { tx, up }
    }

    /// Queue a request. Never waits: a full queue or a stopped connection
    /// answers the caller at once, and says how.
    pub fn send(&self, req: Request<C>) -> Result<(), BackendError> {
        let Err(e) = self.tx.try_send(req) else {
            return Ok(());
        };
        let (req, err) = match e {
            Refused::Full(r) => (r, BackendError::Busy),
            Refused::Closed(r) => (r, BackendError::Unavailable),
        };
        C::fail(req.caller, err);
        Err(err)
    }

    /// True while the connection is established.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }
}

/// Write what is buffered (`Some(bytes written)`), else flush (`None`).
async fn write_or_flush<W>(wr: &mut W, buf: &[u8]) -> std::io::Result<Option<usize>>
where
    W: AsyncWrite + Unpin,
{
    if buf.is_empty() {
        wr.flush().await.map(|()| None)
    } else {
        wr.write(buf).await.map(Some)
    }
}

/// A reply slot, in FIFO order. The bytes are kept for a re-send.
struct Slot<C: Codec> {
    bytes: Bytes,
    expect: C::Expect,
    /// `None` for the connection's own requests (preambles, pings).
    caller: Option<C::Caller>,
    /// Where the request's bytes end in the connection's output stream.
    end: u64,
    /// When its bytes were written (queued, until then), or when the reply
    /// before it was complete if that is later: the timeout counts the time
    /// the server had to answer it, not the time spent behind other replies.
    sent: Instant,
}

async fn run<K: Connector>(
    connector: K,
    settings: Settings,
    mut rx: queue::Receiver<K::Codec>,
    up: Arc<AtomicBool>,
) {
    let mut backoff = BACKOFF_MIN;
    // Something failed since the start / since the last connection.
    let mut outage = false;
    let mut failing = false;
    loop {
        let attempt = tokio::time::timeout(settings.connect_timeout, connector.connect()).await;
        match attempt.unwrap_or(Err(ConnectError::Timeout)) {
            Ok((rd, wr)) => {
                up.store(true, Ordering::Relaxed);
                connector.event(Event::Connected {
                    after_outage: outage,
                });
                backoff = BACKOFF_MIN;
                failing = false;
                let connected = Instant::now();
                let mut conn = Connection {
                    codec: connector.codec(),
                    slots: VecDeque::with_capacity(256),
                    queued: 0,
                    written: 0,
                    stamped: 0,
                    timeout: settings.timeout,
                    senders_gone: false,
                    last_request: connected,
                };
                let ended = conn.serve(rd, wr, &mut rx, connector.moved()).await;
                up.store(false, Ordering::Relaxed);
                match ended {
                    Ok(()) => {
                        connector.event(Event::Stopped);
                        return;
                    }
                    Err(why) => {
                        let failed = conn.fail_all(why.request_error());
                        connector.event(Event::Lost { why: &why, failed });
                        outage = true;
                    }
                }
                if conn.senders_gone {
                    return;
                }
                if connected.elapsed() >= LONG_LIVED {
                    continue;
                }
            }
            Err(why) => {
                up.store(false, Ordering::Relaxed);
                connector.event(Event::Unreachable {
                    why: &why,
                    first: !failing,
                });
                failing = true;
                outage = true;
            }
        }
        // Down: fail requests fast until the next attempt (at once if the
        // backend moved meanwhile).
        let retry_at = Instant::now() + backoff;
        let moved = connector.moved();
        tokio::pin!(moved);
        loop {
            tokio::select! {
                () = &mut moved => {
                    backoff = BACKOFF_MIN;
                    break;
                }
                req = rx.recv() => match req {
                    Some(req) => {
                        connector.event(Event::RefusedWhileDown);
                        <K::Codec as Codec>::fail(req.caller, BackendError::Unavailable);
                    }
                    None => return,
                },
                _ = tokio::time::sleep_until(retry_at) => break,
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One established connection's state.
struct Connection<C: Codec> {
    codec: C,
    slots: VecDeque<Slot<C>>,
    /// Bytes ever put in the write buffer, and ever written.
    queued: u64,
    written: u64,
    /// Slots (from the front) whose bytes were all written.
    stamped: usize,
    timeout: Duration,
    /// The queue closed: answer what is in flight, then stop.
    senders_gone: bool,
    /// When the last request (batch) was taken from the queue.
    last_request: Instant,
}

impl<C: Codec> Connection<C> {
    /// Serve until the connection breaks (`Err`), or every sender is gone
    /// and every request was answered (`Ok`).
    async fn serve<R, W>(
        &mut self,
        mut rd: R,
        mut wr: W,
        rx: &mut queue::Receiver<C>,
        moved: impl std::future::Future<Output = ()>,
    ) -> Result<(), Broken>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        tokio::pin!(moved);
        let mut rbuf = BytesMut::with_capacity(READ_CHUNK);
        let mut wbuf = BytesMut::with_capacity(READ_CHUNK);
        // TLS may keep the tail of a write buffered; a no-op on TCP.
        let mut unflushed = false;
        let timeout = self.timeout;
        // Wake up now and then to notice a server that stopped answering.
        let mut tick = tokio::time::interval((timeout / 4).max(Duration::from_millis(5)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // When the server last sent anything (for the idle ping).
        let mut last_heard = Instant::now();

        let ended = loop {
            if self.senders_gone && self.slots.is_empty() && wbuf.is_empty() && !unflushed {
                break Ok(());
            }
            if rbuf.capacity() - rbuf.len() < READ_CHUNK / 4 {
                rbuf.reserve(READ_CHUNK);
            }
            tokio::select! {
                biased;
                // First: a busy connection must still notice it moved.
                () = &mut moved => break Err(Broken::Moved),
                read = rd.read_buf(&mut rbuf) => match read {
                    Ok(0) => break Err(Broken::Closed),
                    Ok(_) => {
                        last_heard = Instant::now();
                        if let Err(why) = self.complete(&mut rbuf, &mut wbuf, last_heard) {
                            break Err(why);
                        }
                    }
                    Err(e) => break Err(Broken::Read(e)),
                },
                io = write_or_flush(&mut wr, &wbuf), if !wbuf.is_empty() || unflushed => match io {
                    Ok(Some(0)) => break Err(Broken::WriteZero),
                    Ok(Some(n)) => {
                        wbuf.advance(n);
                        unflushed = true;
                        self.wrote(n);
                    }
                    Ok(None) => unflushed = false,
                    Err(e) => break Err(Broken::Write(e)),
                },
                req = rx.recv(), if !self.senders_gone && wbuf.len() < MAX_BATCH_BYTES => {
                    let Some(req) = req else {
                        self.senders_gone = true;
                        continue;
                    };
                    let now = Instant::now();
                    // Busy: replies outstanding, or the previous request
                    // came less than BUSY_GAP ago. Then other sessions are
                    // active: let the ones ready in this scheduler pass
                    // queue their requests too, so they go out in this
                    // same write (one send() and one backend wake-up for
                    // many unpipelined clients; measured on Redis: 1.77x
                    // the throughput). `yield_now` polls the I/O driver
                    // before resuming us, so sessions whose sockets became
                    // readable meanwhile join too; a self-wake yield skips
                    // that `epoll_wait` but batched less and cost more CPU
                    // (docs/benchmarks-history.md, "Issue 14").
                    // Idle (a lone request): write at once; a yield would
                    // cost a scheduler pass and an `epoll_wait` for nothing
                    // to batch with. "Nothing outstanding" alone is not
                    // idle: under a closed-loop load a fast server often
                    // has answered everything when the next request comes,
                    // and writing those at once cost 8 % more proxy CPU and
                    // 10 % fewer requests/s (BENCHMARKS.md, "Engine: when to
                    // wait for company").
                    let busy = !self.slots.is_empty()
                        || now.saturating_duration_since(self.last_request) < BUSY_GAP;
                    self.last_request = now;
                    self.push(&mut wbuf, req, now);
                    if busy {
                        tokio::task::yield_now().await;
                    }
                    while wbuf.len() < MAX_BATCH_BYTES {
                        match rx.try_recv() {
                            Some(req) => self.push(&mut wbuf, req, now),
                            None => break,
                        }
                    }
                }
                _ = tick.tick() => {
                    let stuck = self.slots.front().is_some_and(|s| s.sent.elapsed() > timeout);
                    if stuck {
                        break Err(Broken::Timeout(timeout));
                    }
                    let idle = !self.senders_gone
                        && self.slots.is_empty()
                        && last_heard.elapsed() >= IDLE_PING;
                    if let Some((ping, expect)) = self.codec.idle_ping().filter(|_| idle) {
                        wbuf.extend_from_slice(ping);
                        self.queued += ping.len() as u64;
                        self.slots.push_back(Slot {
                            bytes: Bytes::new(),
                            expect,
                            caller: None,
                            end: self.queued,
                            sent: Instant::now(),
                        });
                    }
                }
            }
        };
        let _ = wr.shutdown().await;
        ended
    }

    fn push(&mut self, wbuf: &mut BytesMut, req: Request<C>, now: Instant) {
        wbuf.extend_from_slice(&req.bytes);
        self.queued += req.bytes.len() as u64;
        self.slots.push_back(Slot {
            bytes: req.bytes,
            expect: req.expect,
            caller: Some(req.caller),
            end: self.queued,
            sent: now,
        });
    }

    /// `n` more bytes were written: the requests they complete start their
    /// clocks now.
    fn wrote(&mut self, n: usize) {
        self.written += n as u64;
        let now = Instant::now();
        while let Some(slot) = self.slots.get_mut(self.stamped) {
            if slot.end > self.written {
                break;
            }
            slot.sent = now;
            self.stamped += 1;
        }
    }

    /// Complete every reply the buffer holds in full (read at `now`), in
    /// FIFO order.
    fn complete(
        &mut self,
        rbuf: &mut BytesMut,
        wbuf: &mut BytesMut,
        now: Instant,
    ) -> Result<(), Broken> {
        while !rbuf.is_empty() {
            let Some(front) = self.slots.front() else {
                return Err(Broken::ReplyWithoutRequest);
            };
            let Some(reply) = self
                .codec
                .decode(rbuf, front.expect)
                .map_err(Broken::Protocol)?
            else {
                return Ok(());
            };
            let Some(slot) = self.slots.pop_front() else {
                return Err(Broken::ReplyWithoutRequest);
            };
            self.stamped = self.stamped.saturating_sub(1);
            // The next reply's clock starts no earlier than now: the time
            // spent receiving the replies before it is not its server's delay.
            if let Some(next) = self.slots.front_mut().filter(|_| self.stamped > 0) {
                next.sent = next.sent.max(now);
            }
            let Some(caller) = slot.caller else {
                continue;
            };
            if let Delivery::Resend(caller) = self.codec.deliver_request(caller, reply, &slot.bytes)
            {
                let before = wbuf.len();
                let (replies, expect) = self.codec.resend_preamble(wbuf);
                self.queued += (wbuf.len() - before) as u64;
                for _ in 0..replies {
                    self.slots.push_back(Slot {
                        bytes: Bytes::new(),
                        expect,
                        caller: None,
                        end: self.queued,
                        sent: now,
                    });
                }
                wbuf.extend_from_slice(&slot.bytes);
                self.queued += slot.bytes.len() as u64;
                self.slots.push_back(Slot {
                    bytes: slot.bytes,
                    expect: slot.expect,
                    caller: Some(caller),
                    end: self.queued,
                    sent: now,
                });
            }
        }
        Ok(())
    }

    /// Fail every request in flight; returns how many callers there were.
    fn fail_all(&mut self, err: BackendError) -> usize {
        let mut failed = 0;
        for caller in self.slots.drain(..).filter_map(|slot| slot.caller) {
            C::fail(caller, err);
            failed += 1;
        }
        failed
    }
}

//! One long-lived, pipelined connection to a legacy memcached server.
//!
//! Callers queue [`LegacyRequest`]s on a bounded channel. The connection's
//! single task coalesces whatever is queued into one write, records a reply
//! slot per request in FIFO order, parses replies as they arrive and
//! completes the slots in the same order. Reading and writing are branches of
//! one `select!`, so a large pipeline can never deadlock with a server that
//! stops reading until we read (and no lock is shared with anyone).
//!
//! When the connection breaks, or the oldest request has waited longer than
//! the timeout (a hung server), every request in flight fails (never a reply
//! meant for another request) and the task reconnects with backoff, failing
//! new requests fast meanwhile.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use memshift_protocol::memcache::client::{parse_reply, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::reply::{LegacyError, LegacyReply, LegacyRequest, ReplyShape, ReplyTo, TaggedReply};

/// Largest batch pulled from the queue before writing.
const MAX_BATCH_BYTES: usize = 256 * 1024;
const READ_CHUNK: usize = 16 * 1024;
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// An idle connection checks its server this often.
const IDLE_PING: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub(crate) struct ConnectionSettings {
    pub addr: String,
    pub timeout: Duration,
    pub connect_timeout: Duration,
}

struct Slot<T> {
    /// `None` for the connection's own health checks.
    reply: Option<ReplyTo<T>>,
    shape: ReplyShape,
    sent: Instant,
}

/// Health check request: cheap, answered with one line.
const PING: &[u8] = b"version\r\n";

enum Ended {
    /// Every sender is gone: the pool was dropped.
    Shutdown,
    Broken(String, LegacyError),
}

/// Runs one connection until the pool is dropped.
pub(crate) async fn run<T>(
    settings: ConnectionSettings,
    mut rx: mpsc::Receiver<LegacyRequest<T>>,
    up: Arc<AtomicBool>,
) where
    T: From<TaggedReply> + Send + 'static,
{
    let mut backoff = BACKOFF_MIN;
    let mut logged_down = false;
    loop {
        match connect(&settings).await {
            Ok(stream) => {
                up.store(true, Ordering::Relaxed);
                if logged_down {
                    tracing::info!(server = %settings.addr, "memcached server reconnected");
                }
                backoff = BACKOFF_MIN;
                let connected = Instant::now();
                let ended = serve(stream, &settings, &mut rx).await;
                up.store(false, Ordering::Relaxed);
                match ended {
                    Ended::Shutdown => return,
                    Ended::Broken(why, _) => {
                        tracing::warn!(server = %settings.addr, reason = %why, "memcached connection lost");
                        logged_down = true;
                    }
                }
                // A connection that served a while (dropped by the server
                // when idle, say) is retried at once; a flapping one waits.
                if connected.elapsed() >= Duration::from_secs(1) {
                    continue;
                }
            }
            Err(why) => {
                up.store(false, Ordering::Relaxed);
                if !logged_down {
                    tracing::warn!(server = %settings.addr, reason = %why, "memcached server unreachable");
                    logged_down = true;
                }
            }
        }
        // Down: fail requests fast until the next attempt.
        let retry_at = Instant::now() + backoff;
        loop {
            tokio::select! {
                req = rx.recv() => match req {
                    Some(req) => req.reply.send(Err(LegacyError::Unavailable)),
                    None => return,
                },
                _ = tokio::time::sleep_until(retry_at) => break,
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Connect and check that a memcached answers (`version`): a server that
/// accepts connections but is hung (SIGSTOP, overload) stays down and its
/// requests fail fast instead of each waiting for the timeout.
async fn connect(settings: &ConnectionSettings) -> Result<TcpStream, String> {
    let handshake = async {
        let mut stream = TcpStream::connect(&settings.addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("nodelay: {e}"))?;
        stream
            .write_all(PING)
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut buf = BytesMut::with_capacity(64);
        loop {
            match parse_reply(&buf) {
                Ok(Some((Response::Version(_), used))) if used == buf.len() => return Ok(stream),
                Ok(Some(_)) => return Err("unexpected reply to version".to_string()),
                Ok(None) => {}
                Err(e) => return Err(format!("handshake: {e}")),
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) => return Err("closed during handshake".to_string()),
                Ok(_) => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    };
    match tokio::time::timeout(settings.connect_timeout, handshake).await {
        Ok(result) => result,
        Err(_) => Err("no answer to version (connect timeout)".to_string()),
    }
}

/// Reply framing state for the request at the front of the FIFO.
struct Reader {
    buf: BytesMut,
    /// Bytes of `buf` already parsed as units of the front reply.
    parsed: usize,
}

impl Reader {
    /// Complete every reply the buffer holds in full.
    fn drain<T: From<TaggedReply>>(&mut self, slots: &mut VecDeque<Slot<T>>) -> Result<(), String> {
        loop {
            let rest = self.buf.get(self.parsed..).unwrap_or_default();
            if rest.is_empty() {
                return Ok(());
            }
            let Some(front) = slots.front() else {
                return Err("reply without a request".to_string());
            };
            let (unit, used) = match parse_reply(rest) {
                Ok(Some(parsed)) => parsed,
                Ok(None) => return Ok(()),
                Err(e) => return Err(format!("protocol: {e}")),
            };
            let is_item = matches!(
                unit,
                Response::Value { .. } | Response::Stat { .. } | Response::Metadump(_)
            );
            let complete = match front.shape {
                ReplyShape::Single if is_item => {
                    return Err("multi-line reply to a single-reply request".to_string())
                }
                ReplyShape::Single => true,
                // END, or an error line that cuts the reply short.
                ReplyShape::UntilEnd => !is_item,
            };
            self.parsed += used;
            if complete {
                let raw = self.buf.split_to(self.parsed).freeze();
                self.parsed = 0;
                if let Some(reply) = slots.pop_front().and_then(|slot| slot.reply) {
                    reply.send(Ok(LegacyReply::from_raw(raw)));
                }
            }
        }
    }
}

async fn serve<T>(
    stream: TcpStream,
    settings: &ConnectionSettings,
    rx: &mut mpsc::Receiver<LegacyRequest<T>>,
) -> Ended
where
    T: From<TaggedReply> + Send + 'static,
{
    let (mut rd, mut wr) = stream.into_split();
    let mut slots: VecDeque<Slot<T>> = VecDeque::with_capacity(256);
    let mut wbuf = BytesMut::with_capacity(READ_CHUNK);
    let mut reader = Reader {
        buf: BytesMut::with_capacity(READ_CHUNK),
        parsed: 0,
    };
    // Wake up now and then to notice a server that stopped answering.
    let tick_every = (settings.timeout / 4).max(Duration::from_millis(5));
    let mut tick = tokio::time::interval(tick_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When the server last sent anything: an idle connection is pinged so a
    // server that hangs or vanishes silently is noticed (and `is_up` turns
    // false) without waiting for a request to time out.
    let mut last_heard = Instant::now();

    let ended = loop {
        if reader.buf.capacity() - reader.buf.len() < READ_CHUNK / 4 {
            reader.buf.reserve(READ_CHUNK);
        }
        tokio::select! {
            biased;
            read = rd.read_buf(&mut reader.buf) => match read {
                Ok(0) => break Ended::Broken("closed by server".into(), LegacyError::ConnectionLost),
                Ok(_) => {
                    last_heard = Instant::now();
                    if let Err(why) = reader.drain(&mut slots) {
                        break Ended::Broken(why, LegacyError::ConnectionLost);
                    }
                }
                Err(e) => break Ended::Broken(format!("read: {e}"), LegacyError::ConnectionLost),
            },
            written = wr.write(&wbuf), if !wbuf.is_empty() => match written {
                Ok(0) => break Ended::Broken("write: zero bytes".into(), LegacyError::ConnectionLost),
                Ok(n) => wbuf.advance(n),
                Err(e) => break Ended::Broken(format!("write: {e}"), LegacyError::ConnectionLost),
            },
            req = rx.recv(), if wbuf.len() < MAX_BATCH_BYTES => {
                let Some(req) = req else { break Ended::Shutdown };
                let now = Instant::now();
                push(&mut wbuf, &mut slots, req, now);
                while wbuf.len() < MAX_BATCH_BYTES {
                    match rx.try_recv() {
                        Ok(req) => push(&mut wbuf, &mut slots, req, now),
                        Err(_) => break,
                    }
                }
            }
            _ = tick.tick() => {
                let hung = slots.front().is_some_and(|s| s.sent.elapsed() > settings.timeout);
                if hung {
                    break Ended::Broken(
                        format!("no reply within {} ms", settings.timeout.as_millis()),
                        LegacyError::Timeout,
                    );
                }
                if slots.is_empty() && last_heard.elapsed() >= IDLE_PING {
                    wbuf.extend_from_slice(PING);
                    slots.push_back(Slot { reply: None, shape: ReplyShape::Single, sent: Instant::now() });
                }
            }
        }
    };
    let err = match &ended {
        Ended::Shutdown => LegacyError::ConnectionLost,
        Ended::Broken(_, err) => err.clone(),
    };
    for reply in slots.drain(..).filter_map(|slot| slot.reply) {
        reply.send(Err(err.clone()));
    }
    let _ = wr.shutdown().await;
    ended
}

fn push<T: From<TaggedReply>>(
    wbuf: &mut BytesMut,
    slots: &mut VecDeque<Slot<T>>,
    req: LegacyRequest<T>,
    now: Instant,
) {
    if let Err(e) = req.check() {
        req.reply.send(Err(e));
        return;
    }
    wbuf.extend_from_slice(&req.bytes);
    slots.push_back(Slot {
        reply: Some(req.reply),
        shape: req.shape,
        sent: now,
    });
}

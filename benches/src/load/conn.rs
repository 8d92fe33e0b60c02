//! One load connection: a single task that writes and reads without blocking
//! on either (a big pipelined batch can never deadlock against the server),
//! validates every reply, and reconnects after a failure.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::Interest;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Notify;

use super::keys::KeyGen;
use super::pacer::Clock;
use super::proto::{Encoder, Kind, Parsed};
use super::stats::Stats;
use super::Args;

/// Keys set per batch while prefilling.
const PREFILL_BATCH: u64 = 64;

/// State shared by the connections of one phase (warmup or run).
pub struct Shared {
    pub args: Arc<Args>,
    pub enc: Encoder,
    /// Stop issuing at this instant.
    pub deadline: Option<Instant>,
    /// Closed loop: stop after this many requests in total.
    pub limit: Option<u64>,
    /// Requests claimed so far (closed loop) / next key to prefill.
    pub issued: AtomicU64,
}

impl Shared {
    pub fn new(args: Arc<Args>, deadline: Option<Instant>, limit: Option<u64>) -> Shared {
        Shared {
            enc: Encoder::new(args.protocol, &args.key_prefix, args.value_size),
            args,
            deadline,
            limit,
            issued: AtomicU64::new(0),
        }
    }

    fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }
}

#[derive(Clone, Copy)]
pub enum Mode {
    /// Write `pipeline` requests, read their replies, repeat.
    Closed,
    /// Requests at fixed intended times `start + i * interval`, sent whatever
    /// the state of earlier ones; `budget` caps this connection's count.
    Open {
        start: Instant,
        interval: Duration,
        budget: Option<u64>,
    },
    /// Set every key once (claims ids from `Shared::issued`).
    Prefill,
}

pub(super) struct Pending {
    /// Latency is measured from here (the schedule in open loop).
    intended: Instant,
    /// Timeouts are measured from here.
    pub(super) sent: Instant,
    kind: Kind,
    nkeys: usize,
}

pub(super) enum Failure {
    Io(String),
    Timeout,
    Bad(String),
}

/// Open loop: the shared clock and this connection's wake-up.
pub struct Pacing {
    pub clock: Arc<Clock>,
    pub notify: Arc<Notify>,
}

/// Runs one connection until the phase ends; never panics on network input.
pub async fn run(shared: Arc<Shared>, mode: Mode, seed: u64, pacing: Option<Pacing>) -> Stats {
    let a = shared.args.clone();
    let mut c = Conn::new(shared, mode, seed, pacing);
    loop {
        let stream = match connect(a.addr, None, a.timeout).await {
            Ok(s) => s,
            Err(e) => {
                if !c.connect_failed(e) {
                    break;
                }
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
        };
        match c.drive(&stream).await {
            Ok(()) => break,
            Err(f) => {
                if !c.fail(f) {
                    break;
                }
                // No reconnect storm against a server that refuses us.
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
    c.stats
}

/// After a failed connect, before the next try.
pub(super) const RECONNECT_PAUSE: Duration = Duration::from_millis(50);
/// After a connection failed, before reconnecting.
pub(super) const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// Connects with a timeout; `local` binds the source address first (to use
/// more than one loopback source IP when opening many connections).
pub async fn connect(
    addr: SocketAddr,
    local: Option<SocketAddr>,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(local) = local {
        bind_no_port(&sock)?;
        sock.bind(local)?;
    }
    let s = tokio::time::timeout(timeout, sock.connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    s.set_nodelay(true)?;
    Ok(s)
}

/// IP_BIND_ADDRESS_NO_PORT: pick the source port at connect time, per
/// destination, instead of at bind time (which would cap the connections per
/// source IP at the ephemeral range regardless of destination).
fn bind_no_port(sock: &TcpSocket) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let one: libc::c_int = 1;
        // SAFETY: valid fd and a c_int option value of the right size.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = sock;
    Ok(())
}

pub(super) struct Conn {
    pub(super) shared: Arc<Shared>,
    pub(super) mode: Mode,
    pub(super) gen: KeyGen,
    pub(super) stats: Stats,
    pub(super) wbuf: Vec<u8>,
    pub(super) wpos: usize,
    pub(super) rbuf: BytesMut,
    pub(super) pend: VecDeque<Pending>,
    /// Keys of the outstanding gets, in order (for reply validation).
    pub(super) pkeys: VecDeque<u64>,
    pub(super) ids: Vec<u64>,
    /// Open loop: next intended send time.
    pub(super) next: Instant,
    pub(super) budget: Option<u64>,
    /// False once this connection has nothing more to send.
    pub(super) issuing: bool,
    /// Open loop: the ticker's clock and this connection's wake-up.
    pub(super) pacing: Option<Pacing>,
}

impl Conn {
    pub(super) fn new(shared: Arc<Shared>, mode: Mode, seed: u64, pacing: Option<Pacing>) -> Conn {
        let a = &shared.args;
        Conn {
            gen: KeyGen::new(seed, a.keys, a.dist, a.get_weight, a.set_weight),
            stats: Stats::default(),
            wbuf: Vec::with_capacity(64 * 1024),
            wpos: 0,
            rbuf: BytesMut::with_capacity(64 * 1024),
            pend: VecDeque::new(),
            pkeys: VecDeque::new(),
            ids: Vec::new(),
            next: match mode {
                Mode::Open { start, .. } => start,
                _ => Instant::now(),
            },
            budget: match mode {
                Mode::Open { budget, .. } => budget,
                _ => None,
            },
            issuing: true,
            pacing,
            shared: shared.clone(),
            mode,
        }
    }

    /// A connect that failed: counted, and what was due is lost (so a dead
    /// server still ends the run). Returns whether to try again.
    pub(super) fn connect_failed(&mut self, e: io::Error) -> bool {
        self.stats.errors.connect_failures += 1;
        self.stats
            .note(format!("connect {}: {e}", self.shared.args.addr));
        self.lose_due()
    }

    /// A connection that failed: its outstanding requests are counted as
    /// lost and the buffers reset. Returns whether to reconnect.
    pub(super) fn fail(&mut self, f: Failure) -> bool {
        let lost = self.pend.len() as u64;
        match f {
            Failure::Timeout => self.stats.errors.timeout += lost,
            Failure::Io(e) => {
                self.stats.errors.connection += lost;
                self.stats.errors.connect_failures += u64::from(lost == 0);
                self.stats.note(e);
            }
            Failure::Bad(e) => {
                // The unparseable reply itself; the rest are lost.
                self.stats.errors.unexpected += 1;
                self.stats.errors.connection += lost.saturating_sub(1);
                self.stats.note(e);
            }
        }
        self.stats.reconnects += 1;
        self.pend.clear();
        self.pkeys.clear();
        self.wbuf.clear();
        self.wpos = 0;
        self.rbuf.clear();
        self.issuing
    }

    /// Whether the oldest outstanding request has waited `timeout` by `now`.
    pub(super) fn timed_out(&self, now: Instant) -> bool {
        self.pend
            .front()
            .is_some_and(|p| now.saturating_duration_since(p.sent) >= self.shared.args.timeout)
    }

    async fn drive(&mut self, s: &TcpStream) -> Result<(), Failure> {
        let timeout = self.shared.args.timeout;
        loop {
            let now = Instant::now();
            let mut progress = self.generate(now);
            if !self.issuing && self.pend.is_empty() {
                return Ok(());
            }
            if self.wpos < self.wbuf.len() {
                match s.try_write(&self.wbuf[self.wpos..]) {
                    Ok(n) => {
                        self.wpos += n;
                        progress = true;
                        if self.wpos == self.wbuf.len() {
                            self.wbuf.clear();
                            self.wpos = 0;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(Failure::Io(format!("write: {e}"))),
                }
            }
            if !self.pend.is_empty() {
                self.rbuf.reserve(32 * 1024);
                let room = self.rbuf.capacity() - self.rbuf.len();
                match s.try_read_buf(&mut self.rbuf) {
                    Ok(0) => return Err(Failure::Io("connection closed by the server".into())),
                    Ok(n) => {
                        if n < room {
                            // A short read drained the socket: drop the cached
                            // readiness now rather than pay a read() that
                            // returns EAGAIN (new data re-arms it).
                            let _ = s.try_io(Interest::READABLE, || {
                                Err::<(), _>(io::ErrorKind::WouldBlock.into())
                            });
                        }
                        self.parse()?;
                        progress = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(Failure::Io(format!("read: {e}"))),
                }
            }
            if self.timed_out(now) {
                return Err(Failure::Timeout);
            }
            if progress {
                continue;
            }
            // Nothing to do right now: wait for the socket or the clock.
            let wake = self
                .pend
                .front()
                .map_or(now + timeout, |p| p.sent + timeout);
            let pacing = self.issuing && self.pacing.is_some();
            let notify = self.pacing.as_ref().map(|p| p.notify.clone());
            tokio::select! {
                r = s.readable(), if !self.pend.is_empty() => {
                    r.map_err(|e| Failure::Io(format!("poll: {e}")))?;
                }
                r = s.writable(), if self.wpos < self.wbuf.len() => {
                    r.map_err(|e| Failure::Io(format!("poll: {e}")))?;
                }
                _ = async {
                    match &notify {
                        Some(n) => n.notified().await,
                        None => std::future::pending().await,
                    }
                }, if pacing => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    /// Queues the requests due now; returns whether it queued any.
    pub(super) fn generate(&mut self, now: Instant) -> bool {
        if !self.issuing {
            return false;
        }
        let sh = self.shared.clone();
        match self.mode {
            Mode::Closed => {
                if !self.pend.is_empty() {
                    return false;
                }
                let n = self.claim(now);
                for _ in 0..n {
                    self.push_op(now, now);
                }
                n > 0
            }
            Mode::Open { interval, .. } => {
                // Everything due up to the ticker's latest tick; a request's
                // intended time is the grid point at which it became due.
                let Some(clock) = self.pacing.as_ref().map(|p| p.clock.clone()) else {
                    self.issuing = false;
                    return false;
                };
                let released = clock.now();
                let mut any = false;
                while self.issuing && self.next <= released {
                    if sh.past_deadline(self.next) || self.budget == Some(0) {
                        self.issuing = false;
                        break;
                    }
                    let t = clock.grid(self.next);
                    let lag = now.saturating_duration_since(t).as_nanos() as u64;
                    self.stats.lag.saturating_record(lag.max(1));
                    self.push_op(t, now);
                    self.next += interval;
                    if let Some(b) = &mut self.budget {
                        *b -= 1;
                    }
                    any = true;
                }
                if sh.past_deadline(self.next) || self.budget == Some(0) {
                    self.issuing = false;
                }
                any
            }
            Mode::Prefill => {
                if !self.pend.is_empty() {
                    return false;
                }
                let keys = sh.args.keys;
                let first = sh.issued.fetch_add(PREFILL_BATCH, Ordering::Relaxed);
                if first >= keys {
                    self.issuing = false;
                    return false;
                }
                for id in first..(first + PREFILL_BATCH).min(keys) {
                    sh.enc.set(&mut self.wbuf, id);
                    self.pend.push_back(Pending {
                        intended: now,
                        sent: now,
                        kind: Kind::Set,
                        nkeys: 0,
                    });
                }
                true
            }
        }
    }

    /// Closed loop: how many requests the next batch may carry.
    fn claim(&mut self, now: Instant) -> u64 {
        let sh = &self.shared;
        let want = sh.args.pipeline as u64;
        let n = if sh.past_deadline(now) {
            0
        } else if let Some(limit) = sh.limit {
            let prev = sh.issued.fetch_add(want, Ordering::Relaxed);
            limit.saturating_sub(prev).min(want)
        } else {
            want
        };
        if n == 0 {
            self.issuing = false;
        }
        n
    }

    /// A failed connect: count what was due as lost. Returns whether the
    /// connection should try again.
    pub(super) fn lose_due(&mut self) -> bool {
        let now = Instant::now();
        match self.mode {
            Mode::Closed => {
                let n = self.claim(now);
                self.stats.errors.connection += n;
            }
            Mode::Open { interval, .. } => {
                while self.next <= now && !self.shared.past_deadline(self.next) {
                    if self.budget == Some(0) {
                        break;
                    }
                    self.stats.errors.connection += 1;
                    self.next += interval;
                    if let Some(b) = &mut self.budget {
                        *b -= 1;
                    }
                }
                if self.shared.past_deadline(self.next) || self.budget == Some(0) {
                    self.issuing = false;
                }
            }
            // Prefill gives up on the first failed connect (reported as errors).
            Mode::Prefill => self.issuing = false,
        }
        self.issuing
    }

    fn push_op(&mut self, intended: Instant, sent: Instant) {
        let sh = &self.shared;
        if self.gen.is_get() {
            let k = sh.args.multiget;
            self.ids.clear();
            for _ in 0..k {
                // Distinct keys when the key space allows (a few retries).
                let mut id = self.gen.key();
                for _ in 0..8 {
                    if !self.ids.contains(&id) {
                        break;
                    }
                    id = self.gen.key();
                }
                self.ids.push(id);
            }
            sh.enc.get(&mut self.wbuf, &self.ids);
            self.pkeys.extend(self.ids.iter().copied());
            self.pend.push_back(Pending {
                intended,
                sent,
                kind: Kind::Get,
                nkeys: k,
            });
        } else {
            let id = self.gen.key();
            sh.enc.set(&mut self.wbuf, id);
            self.pend.push_back(Pending {
                intended,
                sent,
                kind: Kind::Set,
                nkeys: 0,
            });
        }
    }

    pub(super) fn parse(&mut self) -> Result<(), Failure> {
        let now = Instant::now();
        while let Some(p) = self.pend.front() {
            let keys = self.pkeys.iter().take(p.nkeys);
            match self.shared.enc.parse(&self.rbuf, p.kind, p.nkeys, keys) {
                Parsed::Done(n, reply) => {
                    let lat = now.saturating_duration_since(p.intended).as_nanos() as u64;
                    self.stats.record(reply, lat);
                    self.rbuf.advance(n);
                    self.pkeys.drain(..p.nkeys);
                    self.pend.pop_front();
                }
                Parsed::Incomplete => return Ok(()),
                Parsed::Bad(e) => return Err(Failure::Bad(e)),
            }
        }
        if !self.rbuf.is_empty() {
            let head = String::from_utf8_lossy(&self.rbuf[..self.rbuf.len().min(80)]).into_owned();
            self.pend.push_back(Pending {
                intended: now,
                sent: now,
                kind: Kind::Probe,
                nkeys: 0,
            });
            return Err(Failure::Bad(format!("data nobody asked for: {head:?}")));
        }
        Ok(())
    }
}

/// Sends one probe (`version` / `PING`) and waits for its reply.
pub async fn probe(s: &TcpStream, enc: &Encoder, timeout: Duration) -> Result<(), String> {
    let mut req = Vec::new();
    enc.probe(&mut req);
    let fut = async {
        let mut off = 0;
        while off < req.len() {
            s.writable().await.map_err(|e| e.to_string())?;
            match s.try_write(&req[off..]) {
                Ok(n) => off += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        let mut buf = BytesMut::with_capacity(256);
        loop {
            s.readable().await.map_err(|e| e.to_string())?;
            match s.try_read_buf(&mut buf) {
                Ok(0) => return Err("connection closed by the server".to_string()),
                Ok(_) => match enc.parse(&buf, Kind::Probe, 0, [].iter()) {
                    Parsed::Done(n, _) if n == buf.len() => return Ok(()),
                    Parsed::Done(..) => return Err("data nobody asked for".to_string()),
                    Parsed::Incomplete => {}
                    Parsed::Bad(e) => return Err(e),
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| "probe timed out".to_string())?
}

//! `--shape event-loop`: every connection of the run driven by one thread,
//! one epoll loop over nonblocking sockets, the way node, Go or async Python
//! clients drive theirs. A connection writes its next batch as soon as its
//! replies are in, inside the loop turn that read them: the replies that
//! one `epoll_wait` returns turn into a burst of requests, which reaches the
//! server together (unlike the task-per-connection shape, whose tasks the
//! runtime interleaves one by one).
//!
//! Closed loop only. Request generation, reply validation and accounting
//! are the per-connection shape's own ([`Conn`]); only the I/O differs.

use std::io::{self, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BufMut;

use super::conn::{Conn, Failure, Mode, Shared, RECONNECT_PAUSE, RETRY_PAUSE};
use super::stats::Stats;
use crate::epoll::Epoll;

/// Bytes read per `read` call at most.
const READ_CHUNK: usize = 32 * 1024;
/// Longest `epoll_wait`: the deadline and timeouts are checked at least this often.
const MAX_WAIT: Duration = Duration::from_millis(50);

struct Slot {
    conn: Conn,
    stream: Option<Sock>,
    /// When to (re)connect while `stream` is `None`.
    retry_at: Instant,
    done: bool,
}

/// Runs `n` closed-loop connections on the calling thread until the phase
/// ends; merges their stats.
pub fn run(shared: Arc<Shared>, n: usize, deadline: Option<Instant>) -> Stats {
    let mut total = Stats::default();
    let ep = match Epoll::new() {
        Ok(ep) => ep,
        Err(e) => {
            total.errors.unexpected += 1;
            total.note(format!("epoll_create1: {e}"));
            return total;
        }
    };
    let now = Instant::now();
    let mut slots: Vec<Slot> = (0..n)
        .map(|i| Slot {
            conn: Conn::new(shared.clone(), Mode::Closed, seed(&shared, i), None),
            stream: None,
            retry_at: now,
            done: false,
        })
        .collect();
    let hard = deadline.map(|d| d + shared.args.timeout * 2 + Duration::from_secs(5));
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; n.max(1)];
    loop {
        let now = Instant::now();
        if hard.is_some_and(|h| now >= h) {
            let stuck = slots.iter().filter(|s| !s.done).count() as u64;
            total.errors.timeout += stuck;
            total.note(format!("{stuck} connections did not stop in time"));
            break;
        }
        let mut wake = now + MAX_WAIT;
        for (i, s) in slots.iter_mut().enumerate() {
            if !s.done {
                tend(&ep, i, s, now);
                wake = wake.min(next_wake(s));
            }
        }
        if slots.iter().all(|s| s.done) {
            break;
        }
        let wait = wake.saturating_duration_since(Instant::now());
        let ready = match ep.wait(&mut events, wait) {
            Ok(k) => k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => {
                total.errors.unexpected += 1;
                total.note(format!("epoll_wait: {e}"));
                break;
            }
        };
        let now = Instant::now();
        for ev in &events[..ready] {
            let Some(s) = slots.get_mut(ev.u64 as usize) else {
                continue;
            };
            if let Err(f) = on_ready(s, now) {
                close(&ep, s, f, now);
            }
        }
    }
    for s in slots {
        total.merge(&s.conn.stats);
    }
    total
}

fn seed(shared: &Shared, i: usize) -> u64 {
    shared
        .args
        .seed
        .wrapping_mul(1_000_003)
        .wrapping_add(i as u64)
}

/// Everything a connection needs outside of socket readiness: connecting,
/// the next batch, the reply timeout, finishing.
fn tend(ep: &Epoll, i: usize, s: &mut Slot, now: Instant) {
    if s.stream.is_none() {
        if now < s.retry_at {
            return;
        }
        let args = &s.conn.shared.args;
        match connect(args).and_then(|t| ep.add(t.as_raw_fd(), i).map(|()| t)) {
            Ok(t) => s.stream = Some(t),
            Err(e) => {
                s.done = !s.conn.connect_failed(e);
                s.retry_at = now + RECONNECT_PAUSE;
                return;
            }
        }
    }
    if s.conn.timed_out(now) {
        close(ep, s, Failure::Timeout, now);
        return;
    }
    if let Err(f) = send(s, now) {
        close(ep, s, f, now);
        return;
    }
    if !s.conn.issuing && s.conn.pend.is_empty() {
        if let Some(t) = s.stream.take() {
            ep.remove(t.as_raw_fd());
        }
        s.done = true;
    }
}

/// When this connection next needs `tend` without a socket event.
fn next_wake(s: &Slot) -> Instant {
    if s.stream.is_none() {
        return s.retry_at;
    }
    s.conn.pend.front().map_or(Instant::now() + MAX_WAIT, |p| {
        p.sent + s.conn.shared.args.timeout
    })
}

/// The socket is readable or writable: read every reply there is, then
/// queue and write the next batch at once.
fn on_ready(s: &mut Slot, now: Instant) -> Result<(), Failure> {
    let Some(t) = &s.stream else { return Ok(()) };
    let fd = t.as_raw_fd();
    let c = &mut s.conn;
    while !c.pend.is_empty() {
        c.rbuf.reserve(READ_CHUNK);
        let spare = c.rbuf.chunk_mut();
        let room = spare.len();
        // SAFETY: reads at most `room` bytes into the buffer's spare capacity.
        let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), room) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => break,
                io::ErrorKind::Interrupted => continue,
                _ => return Err(Failure::Io(format!("read: {e}"))),
            }
        }
        if n == 0 {
            return Err(Failure::Io("connection closed by the server".into()));
        }
        // SAFETY: `read` initialised the first `n` bytes of the spare capacity.
        unsafe { c.rbuf.advance_mut(n as usize) };
        c.parse()?;
        if (n as usize) < room {
            break;
        }
    }
    send(s, now)
}

/// Queues the next batch when the last one is answered, and writes what
/// the socket takes.
fn send(s: &mut Slot, now: Instant) -> Result<(), Failure> {
    let Some(t) = &mut s.stream else {
        return Ok(());
    };
    let c = &mut s.conn;
    c.generate(now);
    while c.wpos < c.wbuf.len() {
        match t.write(&c.wbuf[c.wpos..]) {
            Ok(n) => c.wpos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Failure::Io(format!("write: {e}"))),
        }
    }
    c.wbuf.clear();
    c.wpos = 0;
    Ok(())
}

fn close(ep: &Epoll, s: &mut Slot, f: Failure, now: Instant) {
    if let Some(t) = s.stream.take() {
        ep.remove(t.as_raw_fd());
    }
    s.done = !s.conn.fail(f);
    s.retry_at = now + RETRY_PAUSE;
}

/// A connection of the loop: TCP, or a unix-domain socket (`--addr unix:/path`).
enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Sock::Tcp(t) => t.as_raw_fd(),
            Sock::Unix(u) => u.as_raw_fd(),
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(t) => t.write(buf),
            Sock::Unix(u) => u.write(buf),
        }
    }
}

fn connect(args: &super::args::Args) -> io::Result<Sock> {
    if let Some(path) = &args.unix {
        let u = UnixStream::connect(path)?;
        u.set_nonblocking(true)?;
        return Ok(Sock::Unix(u));
    }
    let t = TcpStream::connect_timeout(&args.addr, args.timeout)?;
    t.set_nodelay(true)?;
    t.set_nonblocking(true)?;
    Ok(Sock::Tcp(t))
}

#[cfg(test)]
mod tests {
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use clap::Parser;

    use crate::load::{self, Cli};

    /// A real memcached on a free loopback port, stopped on drop.
    struct Memcached(Child, SocketAddr);

    impl Memcached {
        fn start() -> Option<Memcached> {
            let port = TcpListener::bind("127.0.0.1:0")
                .ok()?
                .local_addr()
                .ok()?
                .port();
            let mut cmd = Command::new("memcached");
            cmd.args([
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-t",
                "1",
            ]);
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                cmd.args(["-u", "root"]);
            }
            let child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .ok()?;
            let m = Memcached(child, SocketAddr::from(([127, 0, 0, 1], port)));
            let deadline = Instant::now() + Duration::from_secs(10);
            while TcpStream::connect(m.1).is_err() {
                if Instant::now() > deadline {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Some(m)
        }
    }

    impl Drop for Memcached {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn run(addr: SocketAddr, extra: &str) -> load::Report {
        let addr = addr.to_string();
        // --duration bounds a broken loop: the test fails instead of hanging.
        let mut argv = vec![
            "memshift-load",
            "--addr",
            &addr,
            "--shape",
            "event-loop",
            "--duration",
            "20",
            "--timeout-ms",
            "500",
        ];
        argv.extend(extra.split_whitespace());
        let args = Cli::try_parse_from(argv).unwrap().into_args().unwrap();
        load::run(args).unwrap()
    }

    /// Every request answered and validated, exactly the number asked for,
    /// with and without pipelining and multi-gets; hits after a warm-up.
    #[test]
    fn event_loop_runs_a_bounded_load_against_memcached() {
        let Some(mc) = Memcached::start() else {
            eprintln!("skipped: no memcached on PATH");
            return;
        };
        let r = run(mc.1, "--conns 7 --requests 3000 --keys 500 --warmup");
        assert_eq!(r.run.errors.total(), 0, "{:?}", r.run.samples);
        assert_eq!(r.run.ok, 3000);
        assert_eq!(r.run.misses, 0, "every key was set by the warm-up");
        assert!(
            r.run.hits > 2000 && r.run.sets > 100,
            "{} hits, {} sets",
            r.run.hits,
            r.run.sets
        );
        let r = run(
            mc.1,
            "--conns 5 --requests 4000 --pipeline 16 --multiget 3 --keys 500",
        );
        assert_eq!(r.run.errors.total(), 0, "{:?}", r.run.samples);
        assert_eq!(r.run.ok, 4000);
        assert_eq!(r.to_json()["shape"], "event-loop");
    }

    /// A server that is not there: counted as errors, and the run still ends.
    #[test]
    fn event_loop_ends_against_a_closed_port() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let t = Instant::now();
        let r = run(
            SocketAddr::from(([127, 0, 0, 1], port)),
            "--conns 3 --duration 0.3",
        );
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(r.run.ok, 0);
        assert!(r.run.errors.connect_failures > 0);
    }
}

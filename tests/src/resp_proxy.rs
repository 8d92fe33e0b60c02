//! memshift with its RESP listener on, over real Redis shards, and a plain
//! Redis to compare its replies with.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::env::free_port;
use crate::process::{
    memshift_config, start_memshift_on_free_ports, ClusterOptions, Memshift, RedisServer,
};

/// memshift (phase `redis`) with `server.resp_listen`, over `shards`.
pub struct RespCluster {
    // Field order = drop order: memshift goes first.
    pub memshift: Memshift,
    pub shards: Vec<RedisServer>,
    pub resp_port: u16,
    pub admin_port: u16,
}

impl RespCluster {
    pub fn start() -> Self {
        Self::start_with(3, "")
    }

    /// `server_extra`: more `[server]` lines (e.g. `resp_password`).
    pub fn start_with(shards: usize, server_extra: &str) -> Self {
        Self::start_with_tables(shards, server_extra, "")
    }

    /// `extra_tables`: more tables (e.g. `[near_cache]`).
    pub fn start_with_tables(shards: usize, server_extra: &str, extra_tables: &str) -> Self {
        let shards: Vec<RedisServer> = (0..shards).map(|_| RedisServer::start()).collect();
        let addrs: Vec<String> = shards.iter().map(RedisServer::addr).collect();
        let (memshift, resp_port, admin_port) = start_resp_memshift(&addrs, |opts| {
            opts.server_extra.push_str(server_extra);
            opts.extra_tables.push_str(extra_tables);
        });
        RespCluster {
            memshift,
            shards,
            resp_port,
            admin_port,
        }
    }

    pub fn resp_addr(&self) -> String {
        format!("127.0.0.1:{}", self.resp_port)
    }

    /// A raw connection to the RESP port (for hostile input).
    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.resp_port)).expect("connect RESP port");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        s
    }
}

/// memshift (phase `redis`) over `addrs` with its RESP listener on, once
/// it accepts there; `options` adjusts the config. Returns it, the RESP
/// port and the admin port.
pub fn start_resp_memshift(
    addrs: &[String],
    options: impl Fn(&mut ClusterOptions),
) -> (Memshift, u16, u16) {
    let mut resp_port = 0;
    let (memshift, admin_port, _) = start_memshift_on_free_ports(|port, admin_port| {
        resp_port = free_port();
        let mut opts = ClusterOptions {
            server_extra: format!("resp_listen = \"127.0.0.1:{resp_port}\"\n"),
            ..ClusterOptions::default()
        };
        options(&mut opts);
        memshift_config(port, admin_port, addrs, &opts)
    });
    wait_for_resp_listener(&memshift, resp_port);
    (memshift, resp_port, admin_port)
}

/// Wait (up to 30 s) until `memshift`'s RESP listener on `resp_port`
/// accepts: it binds right after the memcached one, which the start waited for.
pub fn wait_for_resp_listener(memshift: &Memshift, resp_port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", resp_port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the RESP listener never accepted:\n{}",
            memshift.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `session` against plain Redis on `redis` and memshift's RESP port
/// `memshift` at once: (Redis' result, memshift's). Each server has one
/// session, so what one counts of its clients is unchanged; sessions that
/// end by waiting for silence take half the time.
pub fn on_both<T: Send>(redis: u16, memshift: u16, session: impl Fn(u16) -> T + Sync) -> (T, T) {
    std::thread::scope(|scope| {
        let want = scope.spawn(|| session(redis));
        let got = session(memshift);
        (want.join().expect("the plain Redis session"), got)
    })
}

/// Send `bytes`, then read until the peer closes or `idle` passes with
/// nothing new; returns what was read and whether the peer closed.
pub fn send_and_read(stream: &mut TcpStream, bytes: &[u8], idle: Duration) -> (Vec<u8>, bool) {
    stream.write_all(bytes).expect("write");
    stream.set_read_timeout(Some(idle)).expect("timeout");
    let mut out = Vec::new();
    loop {
        if let Some(closed) = read_more(stream, &mut out) {
            return (out, closed);
        }
    }
}

/// One read into `out`: `Some(closed)` once the exchange is over (the peer
/// closed, or nothing came within the read timeout), `None` to read on.
fn read_more(stream: &mut TcpStream, out: &mut Vec<u8>) -> Option<bool> {
    let mut buf = [0u8; 4096];
    match stream.read(&mut buf) {
        Ok(0) => Some(true),
        Ok(n) => {
            out.extend_from_slice(&buf[..n]);
            None
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Some(false)
        }
        Err(_) => Some(true),
    }
}

/// Send `bytes`, then read until one whole RESP2/RESP3 reply has arrived,
/// the peer closes, or `limit` passes; returns what was read and whether
/// the peer closed. For exchanges of one reply each, which `send_and_read`
/// would make wait out its idle time every time. Bytes past the reply that
/// came in the same read are kept, so an extra reply still shows.
pub fn send_and_read_reply(
    stream: &mut TcpStream,
    bytes: &[u8],
    limit: Duration,
) -> (Vec<u8>, bool) {
    stream.write_all(bytes).expect("write");
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    while reply_len(&out).is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (out, false);
        }
        stream.set_read_timeout(Some(left)).expect("timeout");
        if let Some(closed) = read_more(stream, &mut out) {
            return (out, closed);
        }
    }
    (out, false)
}

/// The length of the whole RESP2/RESP3 reply at the front of `buf`, once
/// all of it is there.
fn reply_len(buf: &[u8]) -> Option<usize> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    let kind = *buf.first()?;
    let after = line_end + 2;
    let count = || {
        std::str::from_utf8(&buf[1..line_end])
            .ok()?
            .parse::<i64>()
            .ok()
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after),
        b'$' | b'!' | b'=' => {
            let Ok(n) = usize::try_from(count()?) else {
                return Some(after); // $-1: a RESP2 null
            };
            let end = after + n + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let Ok(n) = usize::try_from(count()?) else {
                return Some(after); // *-1: a RESP2 null array
            };
            let items = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut at = after;
            for _ in 0..items {
                at += reply_len(&buf[at..])?;
            }
            if kind == b'|' {
                // Attributes come before the reply they describe.
                at += reply_len(&buf[at..])?;
            }
            Some(at)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::reply_len;

    #[test]
    fn a_reply_is_whole_only_once_all_of_it_is_there() {
        assert_eq!(reply_len(b"+OK\r\n"), Some(5));
        assert_eq!(reply_len(b"$1\r\n1\r\n+OK"), Some(7));
        assert_eq!(reply_len(b"$3\r\nab"), None);
        assert_eq!(reply_len(b"$-1\r\n"), Some(5));
        assert_eq!(reply_len(b"_\r\n"), Some(3));
        let map = b"%2\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n*1\r\n+x\r\n";
        assert_eq!(reply_len(map), Some(map.len()));
        assert_eq!(reply_len(&map[..map.len() - 1]), None);
        assert_eq!(reply_len(b"?\r\n"), None);
    }
}

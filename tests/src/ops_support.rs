//! Helpers for the operations tests: the admin HTTP endpoint, Prometheus
//! text, process memory, polling with deadlines, and pausing a Redis shard.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::client::McClient;
use crate::process::RedisServer;
use crate::resp::Resp;

/// Polls `f` every `every` until it gives `Some`; panics naming `what` after
/// `timeout`.
pub fn wait_until<T>(
    timeout: Duration,
    every: Duration,
    what: &str,
    f: impl FnMut() -> Option<T>,
) -> T {
    poll_until(timeout, every, f)
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// Polls `f` every `every` until it gives `Some`, or `None` once `timeout`
/// has passed (for callers that report the timeout themselves).
pub fn poll_until<T>(
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        sleep(every);
    }
}

/// `GET path` on the admin listener: `(status, body)`.
pub fn http_get(port: u16, path: &str) -> io::Result<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other(format!("bad HTTP status line: {head:?}")))?;
    Ok((status, body.to_string()))
}

/// The `/metrics` text (panics when the admin endpoint does not answer 200).
pub fn metrics_text(admin_port: u16) -> String {
    match http_get(admin_port, "/metrics") {
        Ok((200, body)) => body,
        Ok((status, body)) => panic!("/metrics answered {status}: {body}"),
        Err(e) => panic!("/metrics on port {admin_port}: {e}"),
    }
}

/// The value of one series, `name` or `name{label="v",...}` spelled exactly
/// as memshift prints it.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

/// One series from the live `/metrics` (0 when the series is absent).
pub fn metric(admin_port: u16, series: &str) -> f64 {
    metric_value(&metrics_text(admin_port), series).unwrap_or(0.0)
}

/// `VmRSS` of a process, in KiB.
pub fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// How often a Redis server ran `command` (lower case): its `calls` in
/// `info`, the server's reply to `INFO commandstats` (0 if never).
pub fn redis_command_calls(info: &Resp, command: &str) -> u64 {
    let Resp::Bulk(Some(info)) = info else {
        panic!("INFO commandstats: {info:?}");
    };
    let prefix = format!("cmdstat_{command}:calls=");
    String::from_utf8_lossy(info)
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// The memcached `stats` counters of a server, by name.
pub fn mc_stats(client: &mut McClient) -> io::Result<HashMap<String, String>> {
    client.send(b"stats\r\n")?;
    let mut out = HashMap::new();
    for unit in client.read_reply()? {
        let raw = unit.raw();
        let line = String::from_utf8_lossy(&raw);
        if let Some(rest) = line.trim_end().strip_prefix("STAT ") {
            if let Some((k, v)) = rest.split_once(' ') {
                out.insert(k.to_string(), v.to_string());
            }
        }
    }
    Ok(out)
}

/// `CLIENT PAUSE <ms> ALL` on a Redis server: it reads commands but runs
/// none until the pause ends (a shard that is slow to answer).
pub fn pause_redis(redis: &RedisServer, ms: u64) {
    let reply = redis.cmd(&[b"CLIENT", b"PAUSE", ms.to_string().as_bytes(), b"ALL"]);
    assert_eq!(
        reply,
        Resp::Simple("OK".into()),
        "CLIENT PAUSE on {}",
        redis.addr()
    );
}

/// Whether a TCP connection to `addr` is accepted.
pub fn accepts_connections(addr: &str) -> bool {
    let sock: SocketAddr = addr.parse().expect("a socket address");
    TcpStream::connect_timeout(&sock, Duration::from_millis(500)).is_ok()
}

/// Sends pipelined `set` requests (`STORED` expected for each) in batches.
pub fn set_many(client: &mut McClient, items: &[(String, Vec<u8>)]) -> io::Result<()> {
    for batch in items.chunks(200) {
        let mut req = Vec::new();
        for (k, v) in batch {
            req.extend_from_slice(format!("set {k} 0 0 {}\r\n", v.len()).as_bytes());
            req.extend_from_slice(v);
            req.extend_from_slice(b"\r\n");
        }
        client.send(&req)?;
        for (k, _) in batch {
            let reply = client.read_reply()?;
            if reply.len() != 1 || !reply[0].is_line(b"STORED\r\n") {
                return Err(io::Error::other(format!(
                    "set {k}: {}",
                    crate::escape(&reply.iter().flat_map(|u| u.raw()).collect::<Vec<_>>(), 200)
                )));
            }
        }
    }
    Ok(())
}
